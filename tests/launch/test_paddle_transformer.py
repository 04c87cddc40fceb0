"""Paddle 1.8's dist_transformer.py, unchanged, under ``dask-fluid run``: its training path
(the Transformer of ``transformer()``, ParallelExecutor with GradientScaleStrategy.Customized
and a fed ``sum_cost@GRAD``, fed position-encoding parameters, a test ParallelExecutor with
share_vars_from) runs locally and as 2 pservers + 2 trainers of its own DistTransformer2x2.

Paddle 1.8's test_dist_base.py cannot run this file itself: its parser has no ``--is_dist``,
which DistTransformer2x2.run_trainer reads (Paddle's CMakeLists leaves test_dist_transformer
out). So a short driver of ours parses the runner's arguments, adds ``is_dist``, sets the
model's sizes to ``synthetic_data.TRANSFORMER_TEST_SIZES`` (2 layers of d_model 256, not 6 of
512: the same program at a size a 2-core CI trains in seconds), and calls the file's own
``update_args()`` and DistTransformer2x2 roles; the model file is Paddle's.
The synthetic WMT files give every trainer's batch the same samples as its half of the local
batch, so sync training must print the local validation costs (test_dist_transformer.py's
delta for sync is 1e-5; for async, 1.0).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat import synthetic_data

UNITTESTS = Path(__file__).resolve().parents[3] / "shared/reference/paddle-1.8/unittests"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not UNITTESTS.is_dir(),
                       reason=f"{UNITTESTS} (Paddle 1.8's unittests) is not beside this checkout"),
]

DRIVER = '''
import argparse

import dist_transformer

parser = argparse.ArgumentParser()
for flag, kind, default in (("--role", str, "trainer"), ("--endpoints", str, ""),
                            ("--trainer_id", int, 0), ("--current_endpoint", str, ""),
                            ("--trainers", int, 1), ("--update_method", str, "local")):
    parser.add_argument(flag, type=kind, default=default)
parser.add_argument("--sync_mode", action="store_true")
args = parser.parse_args()
args.use_cuda = False
args.is_dist = args.update_method != "local"
for name, value in {sizes}.items():  # synthetic_data.TRANSFORMER_TEST_SIZES
    setattr(dist_transformer.ModelHyperParams, name, value)
dist_transformer.update_args()
role = dist_transformer.DistTransformer2x2()
role.run_pserver(args) if args.role == "pserver" else role.run_trainer(args)
'''

COST = re.compile(r"^\[(-?[0-9.]+)\]$", re.M)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The model file, its runner module, the driver, and a HOME whose Paddle cache holds the
    synthetic files (the file reads ``~/.cache/paddle/dataset/test_dist_transformer``)."""
    pytest.importorskip("six", reason="dist_transformer.py imports six")
    root = tmp_path_factory.mktemp("transformer")
    for name in ("dist_transformer.py", "test_dist_base.py"):
        shutil.copy(UNITTESTS / name, root / name)
    (root / "driver.py").write_text(DRIVER.format(sizes=synthetic_data.TRANSFORMER_TEST_SIZES))
    home = root / "home"
    synthetic_data.write_transformer(home / ".cache" / "paddle" / "dataset")
    return root


@pytest.fixture(scope="module")
def local_costs(workdir):
    return _local(workdir)


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(root / "home"), "CPU_NUM": "1"}


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "dask_fluid.cli", "run", "driver.py", *args]


def _costs(text: str) -> list[float]:
    return [float(v) for v in COST.findall(text)]


def _local(root: Path) -> list[float]:
    proc = subprocess.run(_cmd(), cwd=root, env=_env(root), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return _costs(proc.stdout)


def _cluster(root: Path, eps: list[str], sync: bool) -> tuple[list[float], list[float], str]:
    """Two pservers on ``eps[:2]`` and two trainers on ``eps[2:]``."""
    common = ["--endpoints", ",".join(eps[:2]), "--trainers", "2", "--update_method", "pserver",
              *(["--sync_mode"] if sync else [])]
    procs = {}
    try:
        for i in range(2):
            procs[f"ps{i}"] = subprocess.Popen(
                _cmd("--role", "pserver", "--current_endpoint", eps[i], *common), cwd=root,
                env=_env(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2):
            procs[f"tr{i}"] = subprocess.Popen(
                _cmd("--role", "trainer", "--trainer_id", str(i), "--current_endpoint",
                     eps[2 + i], *common), cwd=root, env=_env(root), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
        outs = {name: procs[name].communicate(timeout=300) for name in ("tr0", "tr1")}
        errs = "\n".join(f"--- {name}\n{err[-3000:]}" for name, (_, err) in outs.items())
        for name in ("tr0", "tr1"):
            assert procs[name].returncode == 0, errs
        for name in ("ps0", "ps1"):  # every trainer said "complete": the pservers end
            _, err = procs[name].communicate(timeout=60)
            assert procs[name].returncode == 0, err[-3000:]
            errs += f"\n--- {name}\n{err[-3000:]}"
        return _costs(outs["tr0"][0]), _costs(outs["tr1"][0]), errs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()


def test_paddle_18_dist_transformer_local_and_2x2_sync_agree(workdir, local_costs,
                                                             held_endpoints):
    local = local_costs
    assert len(local) == 5  # RUN_STEP steps, one validation cost each
    assert local[-1] < local[0]
    tr0, tr1, errs = _cluster(workdir, held_endpoints(4), sync=True)
    assert tr0 == tr1 and len(tr0) == 5, errs  # both trainers hold the same parameters
    for step, (a, b) in enumerate(zip(local, tr0, strict=True)):
        assert abs(a - b) <= 1e-5, f"step {step}: local {a} vs distributed {b}"
    # the trainers said "complete" once each, though their startup ran on another executor
    assert "could not tell the pservers" not in errs, errs


def test_paddle_18_dist_transformer_2x2_async_trains(workdir, local_costs, held_endpoints):
    local = local_costs
    tr0, tr1, errs = _cluster(workdir, held_endpoints(4), sync=False)
    for costs in (tr0, tr1):
        assert len(costs) == 5 and costs[-1] < costs[0], errs
        for a, b in zip(local, costs, strict=True):
            assert abs(a - b) <= 1.0  # test_dist_transformer.py's async delta
    assert "could not tell the pservers" not in errs, errs
