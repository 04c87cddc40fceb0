"""Paddle 1.8's own distributed test, unchanged: test_dist_word2vec.py (its TestDistBase runner
starts the local run, 2 pservers and 2 trainers of dist_word2vec.py with --role/--endpoints/...
arguments) passes under ``dask-fluid run``, sync (delta 1e-4) and async (delta 100)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITTESTS = Path(__file__).resolve().parents[3] / "shared/reference/paddle-1.8/unittests"
FILES = ("test_dist_base.py", "test_dist_word2vec.py", "dist_word2vec.py")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not UNITTESTS.is_dir(),
                       reason=f"{UNITTESTS} (Paddle 1.8's unittests) is not beside this checkout"),
]


@pytest.fixture
def imikolov_in_paddle_cache():
    """Paddle's runner keeps only PATH, PYTHONPATH and LD_LIBRARY_PATH of the environment, so
    its processes read Paddle's default cache (~/.cache/paddle/dataset): put a synthetic
    imikolov file there unless a real one is present, and take it away afterwards."""
    from tests.compat import synthetic_data

    home = os.path.expanduser("~/.cache/paddle/dataset")
    target = Path(home) / "imikolov" / "imikolov%2Fsimple-examples.tgz"
    if target.exists():
        yield target
        return
    made = synthetic_data.write_imikolov(home)
    try:
        yield Path(made)
    finally:
        for path in Path(made).parent.glob(Path(made).name + "*"):
            path.unlink()
        assert not target.exists()


def test_paddle_18_test_dist_word2vec_unchanged(tmp_path, imikolov_in_paddle_cache):
    pytest.importorskip("six", reason="test_dist_base.py imports six")
    for name in FILES:  # copies: the runner writes its logs next to the test file
        shutil.copy(UNITTESTS / name, tmp_path / name)
    proc = subprocess.run([sys.executable, "-m", "dask_fluid.cli", "run",
                           "test_dist_word2vec.py"], cwd=tmp_path, capture_output=True,
                          timeout=300)
    err = proc.stderr.decode(errors="replace")  # the runner logs pickles to stderr
    assert proc.returncode == 0, err[-4000:]
    assert "Ran 3 tests" in err and "\nOK" in err, err[-4000:]
    # the runner's own check printed local : distributed loss pairs for every step
    pairs = [line for line in proc.stdout.decode(errors="replace").splitlines()
             if line.startswith("=======")]
    assert len(pairs) == 3 * 5
