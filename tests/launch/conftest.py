"""Fixtures of the launch tests: loopback endpoints held for the test, and Paddle's dataset cache
with synthetic files for the runs of Paddle 1.8's own runner, whose processes read
``~/.cache/paddle/dataset``."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.compat import synthetic_data
from tests.launch.cluster import held_ports

#: Paddle's cache: its runner keeps only PATH, PYTHONPATH and LD_LIBRARY_PATH of the
#: environment, so its processes read the default ~/.cache/paddle/dataset
PADDLE_CACHE = os.path.expanduser("~/.cache/paddle/dataset")


@pytest.fixture
def held_endpoints() -> Iterator[Callable[[int], list[str]]]:
    """``held_endpoints(n)``: ``n`` endpoints on 127.0.0.1 whose ports stay held
    (:func:`~tests.launch.cluster.held_ports`) until the test ends, so that no test running
    beside takes one before our trainers or pservers listen on it."""
    with contextlib.ExitStack() as stack:
        yield lambda n: [f"127.0.0.1:{p}" for p in stack.enter_context(held_ports(n))]


@contextlib.contextmanager
def _synthetic_in_cache(module: str, marker: str, write) -> Iterator[Path]:
    """Paddle's cache directory ``module``, with synthetic files written by ``write`` unless a
    real ``marker`` file is there; the files written are removed after.

    The cache is the user's, shared by every test process (pytest-xdist runs two): a lock
    file beside it holds the directory for one test at a time, so that no test removes the
    files another is reading."""
    Path(PADDLE_CACHE).mkdir(parents=True, exist_ok=True)
    with open(Path(PADDLE_CACHE) / f".{module}.dask-fluid-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        directory = Path(PADDLE_CACHE) / module
        before = set(directory.glob("*")) if directory.is_dir() else set()
        if any(p.name == marker for p in before):
            yield directory
            return
        write(PADDLE_CACHE)
        try:
            yield directory
        finally:
            for path in set(directory.glob("*")) - before:
                path.unlink()


def _cache_fixture(module: str, marker: str, write):
    """A fixture: Paddle's cache directory ``module`` with synthetic files (see
    :func:`_synthetic_in_cache`)."""
    @pytest.fixture
    def fixture():
        with _synthetic_in_cache(module, marker, write) as directory:
            yield directory

    return fixture


imikolov_in_paddle_cache = _cache_fixture("imikolov", "imikolov%2Fsimple-examples.tgz",
                                          synthetic_data.write_imikolov)
mnist_in_paddle_cache = _cache_fixture("mnist", "t10k-images-idx3-ubyte.gz",
                                       synthetic_data.write_mnist)
simnet_in_paddle_cache = _cache_fixture("simnet", "train", synthetic_data.write_simnet)
text_classification_in_paddle_cache = _cache_fixture(
    "text_classification", "text_classification.tar.gz", synthetic_data.write_text_classification)
avazu_in_paddle_cache = _cache_fixture("avazu_ctr_data", "avazu_ctr_data.tgz",
                                       synthetic_data.write_avazu_ctr)
