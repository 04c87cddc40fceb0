"""Paddle 1.8's own dist model files, trained locally by Paddle's own runner with
``--use_cuda`` (``CUDAPlace(0)``) and without: the same losses, step by step. On the strict CPU
CuPy everywhere, and on the real CuPy with a GPU. The models cover conv and pool (dist_mnist),
LARS, embeddings and hierarchical word contexts (dist_word2vec), LoD sequences (dist_simnet_bow,
dist_text_classification), auc (dist_ctr) and the Transformer (its validation costs). The
runner runs in a child process (``paddle_models_on_device.py``): it installs ``paddle`` and
sets the default programs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .. import strict_cupy

UNITTESTS = Path(__file__).resolve().parents[3] / "shared/reference/paddle-1.8/unittests"
DRIVER = Path(__file__).with_name("paddle_models_on_device.py")
MODELS = ["dist_mnist", "dist_mnist_lars", "dist_word2vec", "dist_simnet_bow",
          "dist_text_classification", "dist_ctr", "dist_transformer"]

pytestmark = pytest.mark.skipif(not (UNITTESTS / "test_dist_base.py").exists(),
                                reason=f"{UNITTESTS} (Paddle 1.8's unittests) is not beside "
                                       "this checkout")


@pytest.fixture(scope="module", params=strict_cupy.DEVICE_PARAMS)
def runs(request) -> dict:
    if request.param == "gpu" and strict_cupy.gpu_reason() is not None:
        pytest.skip(f"CuPy with a CUDA GPU is not available: {strict_cupy.gpu_reason()}")
    proc = subprocess.run([sys.executable, str(DRIVER), request.param, str(UNITTESTS),
                           *MODELS], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["model"]: r for r in reports} | {"_kind": request.param}


@pytest.mark.parametrize("model", MODELS)
def test_paddle_model_trains_on_the_device_as_on_the_cpu(runs, model):
    report = runs[model]
    assert "error" not in report, report.get("traceback")
    assert len(report["cpu"]) == len(report["gpu"]) >= 1
    assert np.isfinite(report["cpu"]).all()
    # the strict CuPy computes with numpy: equal; a GPU's kernels round differently
    rtol = 1e-6 if runs["_kind"] == "strict" else 1e-4
    np.testing.assert_allclose(report["gpu"], report["cpu"], rtol=rtol, atol=1e-6)
