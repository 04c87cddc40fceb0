"""glibc malloc settings for the duration of a training task on a Dask worker.

Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``) so that long-lived workers give freed memory back to
the OS. Setting that variable also freezes glibc's mmap threshold at 128 KiB, so every array of
128 KiB or more (the reference MLP's activations are exactly 128 KiB) is a fresh ``mmap``, zeroed
page by page, and ``munmap``-ed when freed. Measured here: the reference MLP's local training
step takes 1.46 ms inside a worker against 0.87 ms in a plain process, and 0.88 ms inside the
worker with the thresholds below.

So while a trainer or pserver task runs, :func:`training_malloc` raises the mmap threshold to
32 MiB (glibc's maximum) and the trim threshold to 64 MiB, so that step-sized arrays are reused
from the heap; when the last such task on the worker ends it restores the worker's values and
trims the heap (``malloc_trim(0)``), which is what the nanny's setting asks for. Workers started
without those variables keep glibc's adaptive thresholds and are left alone, as are non-glibc
platforms. ``dask_fluid.worker.tune-malloc: false`` (read on the client when a job starts)
turns this off.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import threading
from collections.abc import Iterator

import dask.config

__all__ = ["CONFIG_KEY", "enabled", "training_malloc"]

logger = logging.getLogger(__name__)

CONFIG_KEY = "dask_fluid.worker.tune-malloc"
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 64 << 20
_GLIBC_MMAP_DEFAULT = 128 << 10

_lock = threading.Lock()
_active = 0


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def _worker_values() -> tuple[int, int] | None:
    """The (trim, mmap) thresholds the environment fixed, or None if it fixed neither."""
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_")
    mmap = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    if trim is None and mmap is None:
        return None
    try:
        return (int(trim) if trim is not None else _GLIBC_MMAP_DEFAULT,
                int(mmap) if mmap is not None else _GLIBC_MMAP_DEFAULT)
    except ValueError:
        return None


def enabled() -> bool:
    """The client-side setting (``dask_fluid.worker.tune-malloc``, default true)."""
    value = dask.config.get(CONFIG_KEY, True)
    # DASK_DASK_FLUID__WORKER__TUNE_MALLOC=false arrives as the string "false"
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ValueError(f"{CONFIG_KEY} = {value!r} is not allowed: true or false")
    return value


@contextlib.contextmanager
def training_malloc(enable: bool = True) -> Iterator[bool]:
    """Use training-friendly malloc thresholds while the block runs (see the module docstring).

    Parameters
    ----------
    enable : bool
        False leaves malloc alone (the job's :func:`enabled` on the client).

    Yields
    ------
    bool
        Whether the thresholds were changed (glibc, fixed by the environment, not disabled).
    """
    global _active
    values = _worker_values() if enable else None
    libc = _libc() if values is not None else None
    if libc is None:
        yield False
        return
    with _lock:
        _active += 1
        if _active == 1:
            libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
            libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    try:
        yield True
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                trim, mmap = values
                libc.mallopt(_M_MMAP_THRESHOLD, mmap)
                libc.mallopt(_M_TRIM_THRESHOLD, trim)
                libc.malloc_trim(0)
