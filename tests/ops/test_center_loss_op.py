"""The ``center_loss`` kernel against a per-row loop written after Paddle's
CenterLossKernel (including its in-place center update with counts starting at 1), its
gradient, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from . import run_op


def _reference(x, label, centers, alpha, need_update):
    n, m = x.shape
    diff = np.zeros((n, m))
    loss = np.zeros((n, 1))
    acc = np.zeros_like(centers)
    count = [1] * centers.shape[0]
    for i in range(n):
        c = int(label[i, 0])
        count[c] += 1
        for j in range(m):
            diff[i, j] = x[i, j] - centers[c, j]
            acc[c, j] += diff[i, j]
            loss[i, 0] += diff[i, j] ** 2 / 2
    out = centers.copy()
    if need_update:
        for c in range(centers.shape[0]):
            out[c] += alpha * acc[c] / count[c]
    return diff, loss, out


@pytest.mark.parametrize("need_update", [True, False])
def test_center_loss_matches_loop_reference(need_update):
    rng = np.random.default_rng(3)
    x, centers = rng.standard_normal((7, 4)), rng.standard_normal((5, 4))
    label = np.array([[0], [3], [0], [4], [3], [0], [1]], np.int64)  # class 2 unused
    centers_before = centers.copy()
    res = run_op("center_loss", {"X": [x], "Label": [label], "Centers": [centers],
                                 "CenterUpdateRate": [np.array([0.3], np.float32)]},
                 {"cluster_num": 5, "need_update": need_update})
    diff, loss, out = _reference(x, label, centers, 0.3, need_update)
    np.testing.assert_allclose(res["SampleCenterDiff"][0], diff, rtol=1e-12)
    np.testing.assert_allclose(res["Loss"][0], loss, rtol=1e-12)
    np.testing.assert_allclose(res["CentersOut"][0], out, rtol=1e-7)
    np.testing.assert_array_equal(centers, centers_before)  # the input is not written
    assert res["Loss"][0].shape == (7, 1)
    if need_update:  # class 0: three rows, so its step is alpha * sum / 4
        want0 = centers[0] + 0.3 * (x[[0, 2, 5]] - centers[0]).sum(0) / 4
        np.testing.assert_allclose(res["CentersOut"][0][0], want0, rtol=1e-7)
        np.testing.assert_array_equal(res["CentersOut"][0][2], centers[2])


def test_center_loss_float32_and_grad():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 2)).astype(np.float32)
    centers = rng.standard_normal((2, 2)).astype(np.float32)
    label = np.array([[1], [0], [1]], np.int32)
    res = run_op("center_loss", {"X": [x], "Label": [label], "Centers": [centers],
                                 "CenterUpdateRate": [np.array([0.5], np.float32)]},
                 {"cluster_num": 2, "need_update": True})
    assert {a.dtype for v in res.values() for a in v} == {np.dtype(np.float32)}
    dloss = np.array([[1.0], [2.0], [-1.0]], np.float32)
    g = run_op("center_loss_grad", {"SampleCenterDiff": res["SampleCenterDiff"], "X": [x],
                                    "Loss@GRAD": [dloss]}, {"cluster_num": 2})
    np.testing.assert_allclose(g["X@GRAD"][0], dloss * (x - centers[label[:, 0]]), rtol=1e-6)
    none = run_op("center_loss_grad", {"SampleCenterDiff": res["SampleCenterDiff"], "X": [x],
                                       "Loss@GRAD": [None]}, {"cluster_num": 2})
    np.testing.assert_array_equal(none["X@GRAD"][0], np.zeros_like(x))


def test_center_loss_errors():
    x, centers = np.ones((2, 3)), np.zeros((2, 3))
    rate = np.array([0.1])

    def run(**kw):
        ins = {"X": [x], "Label": [np.array([[0], [1]])], "Centers": [centers],
               "CenterUpdateRate": [rate]}
        ins.update({k: [v] for k, v in kw.items() if k != "cluster_num"})
        return run_op("center_loss", ins, {"cluster_num": kw.get("cluster_num", 2),
                                           "need_update": True})

    with pytest.raises(ValueError, match="Label values must lie in \\[0, cluster_num=2\\)"):
        run(Label=np.array([[0], [2]]))
    with pytest.raises(ValueError, match="cluster_num=3 must equal Centers' first dim 2"):
        run(cluster_num=3)
    with pytest.raises(ValueError, match="Centers must be \\[cluster_num, M=3\\]"):
        run(Centers=np.zeros((2, 4)))
    with pytest.raises(ValueError, match="one class per row of X"):
        run(Label=np.array([[0]]))
    with pytest.raises(TypeError, match="Label must be an int tensor"):
        run(Label=np.array([[0.0], [1.0]]))
    with pytest.raises(ValueError, match="CenterUpdateRate must hold one value"):
        run(CenterUpdateRate=np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="X must be at least 2-D"):
        run(X=np.ones(2))
