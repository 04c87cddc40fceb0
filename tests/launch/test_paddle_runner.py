"""Paddle 1.8's own distributed tests, unchanged, under ``dask-fluid run``: their TestDistBase
runner starts the local run, 2 pservers and 2 trainers of the model file with
--role/--endpoints/... arguments and compares the losses. test_dist_word2vec.py (sync delta
1e-4, async delta 100) and test_dist_mnist_train.py (the CNN of dist_mnist.py: sync, sync with
memory optimisation, async and DC-ASGD), test_dist_mnist_batch_merge.py (multi_batch_merge_pass)
and, with a two-line TestDistBase case of our own (Paddle 1.8 ships no test file for it),
dist_mnist_lars.py (LarsMomentumOptimizer, sync delta 1e-5); test_dist_simnet_bow.py (LoD
sequences, 6 cases), test_dist_text_classification.py (sequence_conv_pool), test_dist_ctr.py
(auc) and test_dist_save_load.py (distributed save and load)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITTESTS = Path(__file__).resolve().parents[3] / "shared/reference/paddle-1.8/unittests"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not UNITTESTS.is_dir(),
                       reason=f"{UNITTESTS} (Paddle 1.8's unittests) is not beside this checkout"),
]


def _run_paddle_test(tmp_path: Path, test: str, *models: str, test_text: str | None = None,
                     cases: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """Run Paddle's ``test`` (``test_text`` when given; only its ``cases`` when given) with its
    runner and ``models``, copied (the runner writes its logs next to the test file), under
    ``dask-fluid run``; its stderr and its loss-pair lines."""
    pytest.importorskip("six", reason="test_dist_base.py imports six")
    for name in ("test_dist_base.py", *models) + (() if test_text else (test,)):
        shutil.copy(UNITTESTS / name, tmp_path / name)
    if test_text:
        (tmp_path / test).write_text(test_text)
    proc = subprocess.run([sys.executable, "-m", "dask_fluid.cli", "run", test, *cases],
                          cwd=tmp_path,
                          capture_output=True, timeout=300)
    err = proc.stderr.decode(errors="replace")  # the runner logs pickles to stderr
    assert proc.returncode == 0, err[-4000:]
    # the runner's own check printed local : distributed loss pairs for every step
    pairs = [line for line in proc.stdout.decode(errors="replace").splitlines()
             if line.startswith("=======")]
    return err, pairs


def test_paddle_18_test_dist_word2vec_unchanged(tmp_path, imikolov_in_paddle_cache):
    err, pairs = _run_paddle_test(tmp_path, "test_dist_word2vec.py", "dist_word2vec.py")
    assert "Ran 3 tests" in err and "\nOK" in err, err[-4000:]
    assert len(pairs) == 3 * 5


def test_paddle_18_test_dist_simnet_bow_unchanged(tmp_path, simnet_in_paddle_cache):
    # LoD feeds, sequence_pool, cos_sim, a per-parameter learning rate; dense, sparse and
    # distributed-table embeddings, sync and async (Paddle leaves the dense async case out)
    err, pairs = _run_paddle_test(tmp_path, "test_dist_simnet_bow.py", "dist_simnet_bow.py")
    assert "Ran 6 tests" in err and "\nOK" in err, err[-4000:]
    assert len(pairs) == 6 * 5


def test_paddle_18_test_dist_text_classification_unchanged(tmp_path,
                                                          text_classification_in_paddle_cache):
    # nets.sequence_conv_pool over LoD word sequences, sync (delta 1e-6) and async
    err, pairs = _run_paddle_test(tmp_path, "test_dist_text_classification.py",
                                  "dist_text_classification.py")
    assert "Ran 2 tests" in err and "\nOK" in err, err[-4000:]
    assert len(pairs) == 2 * 5


def test_paddle_18_test_dist_save_load_unchanged(tmp_path, simnet_in_paddle_cache):
    # local save -> 2x2 load (SGD), and 2x2 save with Adam -> 2x2 load: trainer 0 fetches the
    # pservers' moments and beta powers (Fluid's recv_save), each pserver's load_persistables
    # cuts its blocks from the whole files (Fluid's _load_distributed_persistables)
    err, _ = _run_paddle_test(tmp_path, "test_dist_save_load.py", "dist_save_load.py",
                              "dist_simnet_bow.py")
    assert "Ran 2 tests" in err and "\nOK" in err, err[-4000:]


def test_paddle_18_test_dist_mnist_train_unchanged(tmp_path, mnist_in_paddle_cache):
    err, pairs = _run_paddle_test(tmp_path, "test_dist_mnist_train.py", "dist_mnist.py")
    assert "Ran 4 tests" in err and "\nOK" in err, err[-4000:]
    assert len(pairs) == 4 * 5


def test_paddle_18_test_dist_mnist_batch_merge_unchanged(tmp_path, mnist_in_paddle_cache):
    err, _ = _run_paddle_test(tmp_path, "test_dist_mnist_batch_merge.py",
                              "dist_mnist_batch_merge.py", "dist_mnist.py")
    assert "Ran 1 test" in err and "\nOK" in err, err[-4000:]


LARS_TEST = """
import unittest
from test_dist_base import TestDistBase


class TestDistMnistLars2x2(TestDistBase):
    def _setup_config(self):
        self._sync_mode = True

    def test_dist_train(self):
        self.check_with_place("dist_mnist_lars.py", delta=1e-5)


if __name__ == "__main__":
    unittest.main()
"""


def test_paddle_18_dist_mnist_lars_unchanged(tmp_path, mnist_in_paddle_cache):
    err, pairs = _run_paddle_test(tmp_path, "test_dist_mnist_lars.py", "dist_mnist_lars.py",
                                  "dist_mnist.py", test_text=LARS_TEST)
    assert "Ran 1 test" in err and "\nOK" in err, err[-4000:]
    assert len(pairs) == 5
