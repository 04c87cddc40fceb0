"""The estimators on a GPU: ``device="gpu"`` in this process (on the real CuPy with a GPU, and on
the strict CPU CuPy everywhere), and ``mode="nccl2"`` on a Dask worker process that owns the
GPU, fitted on a dask array (skipped, saying why, without a CUDA GPU that CuPy sees and
NCCL)."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from dask_fluid.cli import gpu_status
from dask_fluid.datasets import reference_blobs
from dask_fluid.estimators import MLPClassifier

_GPU = gpu_status()
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

PARAMS = dict(hidden_layer_sizes=(32,), max_iter=3, batch_size=64, learning_rate_init=0.01,
              shuffle=False, random_state=0)


def test_gpu_device_trains_like_cpu(device_xp):
    X, y = reference_blobs(2_000, n_features=16, n_classes=4, seed=2)
    cpu = MLPClassifier(device="cpu", **PARAMS).fit(X, y)
    gpu = MLPClassifier(device="gpu", **PARAMS).fit(X, y)
    for a, b in zip(cpu.coefs_ + cpu.intercepts_, gpu.coefs_ + gpu.intercepts_, strict=True):
        assert isinstance(b, np.ndarray)  # fitted attributes are host arrays, as sklearn's
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gpu.loss_curve_, cpu.loss_curve_, rtol=1e-5)
    proba = gpu.predict_proba(X)
    assert isinstance(proba, np.ndarray)
    np.testing.assert_allclose(proba, cpu.predict_proba(X), rtol=1e-4, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not _GPU["gpus"], reason=f"needs a CUDA GPU: {_GPU['reason']}")
@pytest.mark.skipif(_GPU["gpus"] and not _GPU["nccl"], reason="CuPy cannot load NCCL")
def test_nccl2_on_a_gpu_worker_equals_the_cpu_ring():
    from distributed import Client, Nanny, Scheduler, SpecCluster

    # one worker process that sees GPU 0 only, as dask-cuda would start it
    cluster = SpecCluster(
        workers={"gpu0": {"cls": Nanny, "options": {"nthreads": 1, "env": {
            "CUDA_VISIBLE_DEVICES": "0"}}}},
        scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
        silence_logs=40)
    X, y = reference_blobs(4_000, n_features=16, n_classes=4, seed=3)
    Xd, yd = da.from_array(X, chunks=(1_000, 16)), da.from_array(y, chunks=1_000)
    with cluster, Client(cluster) as client:
        client.wait_for_workers(1, timeout=120)
        gpu = MLPClassifier(mode="nccl2", device="gpu", client=client, **PARAMS).fit(Xd, yd)
        ring = MLPClassifier(mode="collective", backend="ring", client=client,
                             **PARAMS).fit(Xd, yd)
    assert "backend nccl" in gpu.fit_summary_, gpu.fit_summary_
    assert "backend ring" in ring.fit_summary_, ring.fit_summary_
    for a, b in zip(ring.coefs_ + ring.intercepts_, gpu.coefs_ + gpu.intercepts_, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    assert gpu.score(X, y) == pytest.approx(ring.score(X, y), abs=1e-3)


def test_collective_gpu_estimator_on_a_dask_array_equals_cpu(device_xp):
    # device="gpu" trainers in an in-process cluster (its workers see the test's CuPy)
    from distributed import Client, LocalCluster

    X, y = reference_blobs(2_000, n_features=16, n_classes=4, seed=4)
    Xd, yd = da.from_array(X, chunks=(500, 16)), da.from_array(y, chunks=500)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        fitted = {device: MLPClassifier(mode="collective", backend="ring", device=device,
                                        client=client, **PARAMS).fit(Xd, yd)
                  for device in ("cpu", "gpu")}
    for a, b in zip(fitted["cpu"].coefs_, fitted["gpu"].coefs_, strict=True):
        assert isinstance(b, np.ndarray)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(fitted["gpu"].predict(X), fitted["cpu"].predict(X))
