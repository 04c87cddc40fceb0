"""Kernels of ``rank_loss``, ``margin_rank_loss``, ``bpr_loss``,
``teacher_student_sigmoid_loss``, ``bilinear_tensor_product`` and ``add_position_encoding``
against element-by-element references written from Paddle's kernels and unit tests, their
gradients' special rules, and the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_fluid.ops import registry

from . import run_op

RNG = np.random.default_rng(7)


def test_rank_loss_matches_ranknet_by_rows():
    label = np.array([[0.0], [1.0], [0.5], [1.0]], np.float32)
    left = RNG.standard_normal((4, 1)).astype(np.float32)
    right = RNG.standard_normal((4, 1)).astype(np.float32)
    out = run_op("rank_loss", {"Label": [label], "Left": [left], "Right": [right]})["Out"][0]
    assert out.shape == (4, 1) and out.dtype == np.float32
    for i in range(4):
        o = float(left[i, 0]) - float(right[i, 0])
        assert out[i, 0] == pytest.approx(math.log(1 + math.exp(o)) - float(label[i, 0]) * o,
                                          rel=1e-5)
    d = np.array([[1.0], [2.0], [-1.0], [0.5]], np.float32)
    g = run_op("rank_loss_grad", {"Label": [label], "Left": [left], "Right": [right],
                                  "Out@GRAD": [d]})
    want = d * (1 / (1 + np.exp(right - left)) - label)
    np.testing.assert_allclose(g["Left@GRAD"][0], want, rtol=1e-5)
    np.testing.assert_allclose(g["Right@GRAD"][0], -want, rtol=1e-5)
    only = run_op("rank_loss_grad", {"Label": [label], "Left": [left], "Right": [right],
                                     "Out@GRAD": [None]}, outs=("Right@GRAD",))
    assert set(only) == {"Right@GRAD"} and not only["Right@GRAD"][0].any()


def test_rank_loss_shape_errors():
    a = np.zeros((3, 1))
    with pytest.raises(ValueError, match="rank_loss: Left must have shape \\[N\\] or \\[N, 1\\]"):
        run_op("rank_loss", {"Label": [a], "Left": [np.zeros((3, 2))], "Right": [a]})
    with pytest.raises(ValueError, match="first dims of Label and Right must be equal, got 3 "
                                         "and 2"):
        run_op("rank_loss", {"Label": [a], "Left": [a], "Right": [np.zeros((2, 1))]})


def test_margin_rank_loss_hinge_and_activated():
    x1 = np.array([[0.3], [1.0], [-0.5], [2.0]])
    x2 = np.array([[0.1], [1.5], [0.5], [2.05]])
    label = np.array([[1.0], [1.0], [-1.0], [1.0]])
    res = run_op("margin_rank_loss", {"X1": [x1], "X2": [x2], "Label": [label]},
                 {"margin": 0.1})
    want = [max(0.0, -lab * (a - b) + 0.1) for a, b, lab in zip(x1[:, 0], x2[:, 0], label[:, 0],
                                                                strict=True)]
    np.testing.assert_allclose(res["Out"][0][:, 0], want)
    np.testing.assert_array_equal(res["Activated"][0][:, 0], [w > 0 for w in want])
    d = np.array([[1.0], [2.0], [3.0], [4.0]])
    g = run_op("margin_rank_loss_grad", {"Activated": res["Activated"], "Label": [label],
                                         "Out@GRAD": [d]})
    np.testing.assert_allclose(g["X1@GRAD"][0], -d * res["Activated"][0] * label)
    np.testing.assert_allclose(g["X2@GRAD"][0], d * res["Activated"][0] * label)
    assert registry.get("margin_rank_loss").attrs["margin"] == 0.0  # the op's own default
    with pytest.raises(ValueError, match="X1, X2 and Label must all be \\[N, 1\\]"):
        run_op("margin_rank_loss", {"X1": [x1], "X2": [x2[:3]], "Label": [label]})


def _bpr_reference(x, label):
    """Paddle's test_bpr_loss_op reference, row by row: −Σ_{j≠l} log σ(x_l − x_j) / (C − 1)."""
    rows, c = x.reshape(-1, x.shape[-1]), x.shape[-1]
    lab = label.reshape(-1)
    out = np.zeros(rows.shape[0])
    for i in range(rows.shape[0]):
        s = 0.0
        for j in range(c):
            if j != lab[i]:
                s += -math.log(1.0 + math.exp(rows[i, j] - rows[i, lab[i]]))
        out[i] = -s / (c - 1)
    return out.reshape(x.shape[:-1] + (1,))


def test_bpr_loss_matches_the_row_loop_and_its_gradient():
    x = RNG.standard_normal((2, 3, 5))
    label = RNG.integers(0, 5, (2, 3, 1))
    y = run_op("bpr_loss", {"X": [x], "Label": [label]})["Y"][0]
    np.testing.assert_allclose(y, _bpr_reference(x, label), rtol=1e-12)
    d = RNG.standard_normal((2, 3, 1))
    dx = run_op("bpr_loss_grad", {"X": [x], "Label": [label], "Y@GRAD": [d]})["X@GRAD"][0]
    rows, lab, dd = x.reshape(-1, 5), label.reshape(-1), d.reshape(-1)
    want = np.zeros_like(rows)
    for i in range(rows.shape[0]):  # BprLossGradientOpKernel's loop
        p = lab[i]
        for j in range(5):
            if j != p:
                g = -dd[i] / (4 * (1.0 + math.exp(rows[i, p] - rows[i, j])))
                want[i, p] += g
                want[i, j] -= g
    np.testing.assert_allclose(dx, want.reshape(x.shape), rtol=1e-12)


def test_bpr_loss_tolerable_value_caps_an_overflowing_exp():
    x = np.array([[0.0, 100.0, 0.0]], np.float32)  # exp(100) is inf in float32
    with np.errstate(over="ignore"):
        y = run_op("bpr_loss", {"X": [x], "Label": [np.array([[0]])]})["Y"][0]
    # TolerableValue: exp → 1e20, so the term is log(1 + 1e20), not inf
    assert y[0, 0] == pytest.approx((math.log(1 + 1e20) + math.log(2)) / 2, rel=1e-6)


def test_bpr_loss_errors():
    x = np.zeros((2, 3))
    with pytest.raises(ValueError, match="label 3 is out of range \\[0, 3\\)"):
        run_op("bpr_loss", {"X": [x], "Label": [np.array([[0], [3]])]})
    with pytest.raises(ValueError, match="Label must have X's shape with a last dim of 1"):
        run_op("bpr_loss", {"X": [x], "Label": [np.array([0, 1])]})
    with pytest.raises(TypeError, match="Label must be int64 class indices, got float64"):
        run_op("bpr_loss", {"X": [x], "Label": [np.zeros((2, 1))]})
    with pytest.raises(ValueError, match="needs at least 2 classes"):
        run_op("bpr_loss", {"X": [np.zeros((2, 1))], "Label": [np.zeros((2, 1), np.int64)]})


def _tssl_reference(x, label):
    """The loss as Paddle's docstring writes it: z the click, z' the teacher's value."""
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        v, lab = float(x[i, 0]), float(label[i, 0])

        def ce(z, v=v):
            return max(v, 0.0) - v * z + math.log(1 + math.exp(-abs(v)))

        if lab < -1:
            out[i, 0] = ce(0.0)
        elif lab < 0:
            out[i, 0] = ce(1.0)
        elif lab < 1:
            out[i, 0] = ce(0.0) + ce(lab)
        else:
            out[i, 0] = ce(1.0) + ce(lab - 1.0)
    return out


def test_teacher_student_sigmoid_loss_label_code():
    x = np.array([[0.5], [-1.2], [2.0], [0.1], [-20.0], [30.0]])
    label = np.array([[-2.0], [-1.0], [0.4], [1.6], [0.0], [1.9]])
    y = run_op("teacher_student_sigmoid_loss", {"X": [x], "Label": [label]})["Y"][0]
    np.testing.assert_allclose(y, _tssl_reference(x, label), rtol=1e-12)
    d = np.full((6, 1), 2.0)
    dx = run_op("teacher_student_sigmoid_loss_grad",
                {"X": [x], "Label": [label], "Y@GRAD": [d]})["X@GRAD"][0]
    p = 1 / (1 + np.exp(-x))
    want = 2.0 * np.array([[p[0, 0]], [p[1, 0] - 1], [2 * p[2, 0] - 0.4], [2 * p[3, 0] - 1.6],
                           [0.0], [0.0]])  # rows 4 and 5 lie outside the ±15 bounds
    np.testing.assert_allclose(dx, want, rtol=1e-12)
    # a bound reached exactly also stops the gradient (Paddle tests >= and <=)
    edge = run_op("teacher_student_sigmoid_loss_grad",
                  {"X": [np.array([[1.0], [0.5]])], "Label": [np.array([[0.5], [0.5]])],
                   "Y@GRAD": [np.ones((2, 1))]},
                  {"soft_max_up_bound": 1.0, "soft_max_lower_bound": -1.0})["X@GRAD"][0]
    assert edge[0, 0] == 0.0 and edge[1, 0] != 0.0
    with pytest.raises(ValueError, match="X and Label must both be \\[N, 1\\]"):
        run_op("teacher_student_sigmoid_loss", {"X": [np.zeros((3, 2))], "Label": [label[:3]]})


def test_bilinear_tensor_product_by_loops():
    x, y = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 2))
    w, b = RNG.standard_normal((5, 4, 2)), RNG.standard_normal((1, 5))
    out = run_op("bilinear_tensor_product", {"X": [x], "Y": [y], "Weight": [w], "Bias": [b]})
    want = np.zeros((3, 5))
    for n in range(3):
        for i in range(5):
            want[n, i] = x[n] @ w[i] @ y[n] + b[0, i]
    np.testing.assert_allclose(out["Out"][0], want, rtol=1e-12)
    plain = run_op("bilinear_tensor_product", {"X": [x], "Y": [y], "Weight": [w]})["Out"][0]
    np.testing.assert_allclose(plain, want - b, rtol=1e-12)
    d = RNG.standard_normal((3, 5))
    g = run_op("bilinear_tensor_product_grad", {"X": [x], "Y": [y], "Weight": [w],
                                                "Out@GRAD": [d]})
    assert g["Bias@GRAD"][0].shape == (1, 5)
    np.testing.assert_allclose(g["Bias@GRAD"][0], d.sum(axis=0, keepdims=True))
    dw = np.zeros_like(w)
    for i in range(5):
        for n in range(3):
            dw[i] += d[n, i] * np.outer(x[n], y[n])
    np.testing.assert_allclose(g["Weight@GRAD"][0], dw, rtol=1e-12)
    with pytest.raises(ValueError, match="Bias must be \\[1, 5\\], got \\[5\\]"):
        run_op("bilinear_tensor_product", {"X": [x], "Y": [y], "Weight": [w], "Bias": [b[0]]})
    with pytest.raises(ValueError, match="do not match"):
        run_op("bilinear_tensor_product", {"X": [x], "Y": [y.T], "Weight": [w]})


def _pe(pos, k, half):
    """Paddle's AddPositionEncodingKernel for one position and one k < half."""
    val = pos / 10000.0 ** (k / (half - 1)) if half > 1 else pos / 10000.0
    return math.sin(val), math.cos(val)


def test_add_position_encoding_dense_layout():
    x = RNG.standard_normal((2, 4, 6))
    out = run_op("add_position_encoding", {"X": [x]}, {"alpha": 0.5, "beta": 3.0})["Out"][0]
    for b in range(2):
        for j in range(4):
            for k in range(3):
                s, c = _pe(j, k, 3)
                assert out[b, j, k] == pytest.approx(0.5 * x[b, j, k] + 3.0 * s)
                assert out[b, j, 3 + k] == pytest.approx(0.5 * x[b, j, 3 + k] + 3.0 * c)
    one = run_op("add_position_encoding", {"X": [np.zeros((1, 3, 2))]})["Out"][0]
    np.testing.assert_allclose(one[0, :, 0], np.sin(np.arange(3) / 10000.0))  # half == 1


def test_add_position_encoding_restarts_positions_at_each_sequence():
    x = RNG.standard_normal((5, 4))
    lod = ((0, 2, 2, 5),)  # lengths 2, 0, 3
    res = run_op("add_position_encoding", {"X": [x]}, {"_lods": {"X": [lod]}})
    out = res["Out"][0]
    for row, pos in enumerate([0, 1, 0, 1, 2]):
        for k in range(2):
            s, c = _pe(pos, k, 2)
            assert out[row, k] == pytest.approx(x[row, k] + s)
            assert out[row, 2 + k] == pytest.approx(x[row, 2 + k] + c)
    assert res["@LOD"] == {"Out": [lod]}
    g = run_op("add_position_encoding_grad", {"X": [x], "Out@GRAD": [np.ones((5, 4))]},
               {"alpha": 0.25})["X@GRAD"][0]
    np.testing.assert_allclose(g, np.full((5, 4), 0.25))


def test_add_position_encoding_errors():
    with pytest.raises(ValueError, match="a dense X must be 3-D"):
        run_op("add_position_encoding", {"X": [np.zeros((4, 6))]})
    with pytest.raises(ValueError, match="the hidden size must be even, got 5"):
        run_op("add_position_encoding", {"X": [np.zeros((1, 2, 5))]})
    with pytest.raises(ValueError, match="supports lod_level 1 only"):
        run_op("add_position_encoding", {"X": [np.zeros((3, 2))]},
               {"_lods": {"X": [((0, 1, 2), (0, 1, 2, 3))]}})
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        run_op("add_position_encoding", {"X": [np.zeros((1, 2, 2))]}, {"alpha": -1.0})
