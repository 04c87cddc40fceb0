"""The per-channel image kernels (lrn, instance_norm, affine_channel, shuffle_channel,
space_to_depth, max_pool2d_with_index and adaptive pool2d) against references written as
explicit loops over Paddle 1.8's formulas (space_to_depth: a port of the index loop of
Paddle's ``test_space_to_depth_op.py``), and their errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from . import run_op

RNG = np.random.default_rng(7)


# -- lrn -----------------------------------------------------------------------------------------

def _lrn_ref(x: np.ndarray, n: int, k: float, alpha: float, beta: float):
    """Paddle's documented formula, channel by channel (NCHW)."""
    c = x.shape[1]
    mid = np.empty_like(x)
    for i in range(c):
        lo, hi = max(0, i - n // 2), min(c - 1, i + n // 2)
        mid[:, i] = k + alpha * sum(x[:, j] ** 2 for j in range(lo, hi + 1))
    return x / mid ** beta, mid


@pytest.mark.parametrize("n", [1, 3, 5, 7])
def test_lrn_matches_the_channel_window_formula(n):
    x = RNG.standard_normal((2, 5, 3, 4))
    attrs = {"n": n, "k": 1.5, "alpha": 0.2, "beta": 0.6, "data_format": "NCHW"}
    res = run_op("lrn", {"X": [x]}, attrs)
    out, mid = _lrn_ref(x, n, 1.5, 0.2, 0.6)
    np.testing.assert_allclose(res["MidOut"][0], mid, rtol=1e-12)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12)


def test_lrn_op_defaults_and_nhwc():
    x = RNG.standard_normal((2, 3, 4, 6))
    res = run_op("lrn", {"X": [x]})  # the op's own defaults: n 5, k 2.0, AnyLayout = NCHW
    np.testing.assert_allclose(res["Out"][0], _lrn_ref(x, 5, 2.0, 1e-4, 0.75)[0], rtol=1e-12)
    nhwc = run_op("lrn", {"X": [x]}, {"data_format": "NHWC", "n": 3, "alpha": 0.5})
    want, mid = _lrn_ref(x.transpose(0, 3, 1, 2), 3, 2.0, 0.5, 0.75)
    np.testing.assert_allclose(nhwc["Out"][0], want.transpose(0, 2, 3, 1), rtol=1e-12)
    np.testing.assert_allclose(nhwc["MidOut"][0], mid.transpose(0, 2, 3, 1), rtol=1e-12)
    assert run_op("lrn", {"X": [x.astype(np.float32)]})["Out"][0].dtype == np.float32


def test_lrn_grad_is_paddles_functor():
    """dX[i] = MidOut[i]^-beta dOut[i] - 2 alpha beta X[i] Σ_window dOut Out / MidOut, with
    the sums written as loops."""
    x, d = RNG.standard_normal((1, 4, 2, 2)), RNG.standard_normal((1, 4, 2, 2))
    attrs = {"n": 3, "k": 1.0, "alpha": 0.4, "beta": 0.7}
    fwd = run_op("lrn", {"X": [x]}, attrs)
    out, mid = fwd["Out"][0], fwd["MidOut"][0]
    got = run_op("lrn_grad", {"X": [x], "Out": [out], "MidOut": [mid], "Out@GRAD": [d]},
                 attrs)["X@GRAD"][0]
    want = np.empty_like(x)
    for i in range(4):
        acc = mid[:, i] ** -0.7 * d[:, i]
        for ch in range(i - 1, i + 2):
            if 0 <= ch < 4:
                acc = acc - 2 * 0.4 * 0.7 * d[:, ch] * out[:, ch] * x[:, i] / mid[:, ch]
        want[:, i] = acc
    np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(ValueError, match="is_test must be False"):
        run_op("lrn_grad", {"X": [x], "Out": [out], "MidOut": [mid], "Out@GRAD": [d]},
               {**attrs, "is_test": True})


def test_lrn_errors():
    x = np.ones((2, 3, 2, 2))
    with pytest.raises(ValueError, match="n must be a positive odd int, got 4"):
        run_op("lrn", {"X": [x]}, {"n": 4})
    with pytest.raises(ValueError, match="lrn needs a 4-D input"):
        run_op("lrn", {"X": [np.ones((2, 3))]})
    with pytest.raises(ValueError, match="beta must be > 0"):
        run_op("lrn", {"X": [x]}, {"beta": 0.0})
    with pytest.raises(ValueError, match="data_format must be 'NCHW' or 'NHWC'"):
        run_op("lrn", {"X": [x]}, {"data_format": "NWHC"})


# -- instance_norm -------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 2, 6), (2, 2, 2, 3, 2), (4, 3)])
def test_instance_norm_per_sample_and_channel(shape):
    x = RNG.standard_normal(shape) * 3 + 1
    c = shape[1]
    scale, bias = RNG.uniform(0.5, 2, c), RNG.standard_normal(c)
    res = run_op("instance_norm", {"X": [x], "Scale": [scale], "Bias": [bias]},
                 {"epsilon": 1e-4})
    y, mean, inv = res["Y"][0], res["SavedMean"][0], res["SavedVariance"][0]
    assert mean.shape == (shape[0] * c,) and inv.shape == (shape[0] * c,)
    for i in range(shape[0]):
        for j in range(c):
            part = x[i, j]
            m, v = part.mean(), part.var()
            assert mean[i * c + j] == pytest.approx(m, rel=1e-12, abs=1e-12)
            # SavedVariance is the inverse standard deviation, as Paddle's kernel stores it
            assert inv[i * c + j] == pytest.approx(1 / math.sqrt(v + 1e-4), rel=1e-12)
            np.testing.assert_allclose(y[i, j], (part - m) / math.sqrt(v + 1e-4) * scale[j]
                                       + bias[j], rtol=1e-10, atol=1e-12)


def test_instance_norm_without_scale_and_bias_and_errors():
    x = RNG.standard_normal((2, 3, 5))
    y = run_op("instance_norm", {"X": [x]})["Y"][0]
    want = (x - x.mean(axis=2, keepdims=True)) / np.sqrt(x.var(axis=2, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-10)
    with pytest.raises(ValueError, match="epsilon must be between 0.0 and 0.001, got 0.01"):
        run_op("instance_norm", {"X": [x]}, {"epsilon": 0.01})
    with pytest.raises(ValueError, match="rank 2 to 5"):
        run_op("instance_norm", {"X": [np.ones(4)]})
    with pytest.raises(ValueError, match=r"Scale must have shape \[3\]"):
        run_op("instance_norm", {"X": [x], "Scale": [np.ones(2)]})


# -- affine_channel ------------------------------------------------------------------------------

def test_affine_channel_layouts():
    x = RNG.standard_normal((2, 3, 4, 5))
    s3, b3, s5, b5 = (RNG.standard_normal(k) for k in (3, 3, 5, 5))
    got = run_op("affine_channel", {"X": [x], "Scale": [s3], "Bias": [b3]},
                 {"data_layout": "NCHW"})["Out"][0]
    want = np.empty_like(x)
    for c in range(3):
        want[:, c] = x[:, c] * s3[c] + b3[c]
    np.testing.assert_allclose(got, want, rtol=1e-14)
    # NHWC, and the op's default AnyLayout, which Paddle's kernel treats as channels-last
    for attrs in ({"data_layout": "NHWC"}, {}):
        got = run_op("affine_channel", {"X": [x], "Scale": [s5], "Bias": [b5]}, attrs)["Out"][0]
        for c in range(5):
            np.testing.assert_allclose(got[..., c], x[..., c] * s5[c] + b5[c], rtol=1e-14)
    flat = RNG.standard_normal((4, 3))
    got = run_op("affine_channel", {"X": [flat], "Scale": [s3], "Bias": [b3]},
                 {"data_layout": "NCHW"})["Out"][0]
    np.testing.assert_allclose(got, flat * s3 + b3, rtol=1e-14)
    with pytest.raises(ValueError, match=r"Scale and Bias must have shape \[3\]"):
        run_op("affine_channel", {"X": [x], "Scale": [s5], "Bias": [b5]},
               {"data_layout": "NCHW"})
    with pytest.raises(ValueError, match="data_layout must be 'NCHW' or 'NHWC'"):
        run_op("affine_channel", {"X": [x], "Scale": [s3], "Bias": [b3]},
               {"data_layout": "CHWN"})


# -- shuffle_channel -----------------------------------------------------------------------------

@pytest.mark.parametrize("group", [1, 2, 3, 6])
def test_shuffle_channel_loop(group):
    x = RNG.standard_normal((2, 6, 3, 2))
    got = run_op("shuffle_channel", {"X": [x]}, {"group": group})["Out"][0]
    per = 6 // group
    for i in range(group):
        for j in range(per):
            np.testing.assert_array_equal(got[:, j * group + i], x[:, i * per + j])
    d = RNG.standard_normal(x.shape)
    back = run_op("shuffle_channel_grad", {"X": [x], "Out@GRAD": [d]},
                  {"group": group})["X@GRAD"][0]
    # the gradient is the inverse permutation: shuffling it forward gives dOut back
    np.testing.assert_array_equal(run_op("shuffle_channel", {"X": [back]},
                                         {"group": group})["Out"][0], d)
    with pytest.raises(ValueError, match=r"group \(4\) must be a positive divisor of the 6"):
        run_op("shuffle_channel", {"X": [x]}, {"group": 4})


# -- space_to_depth ------------------------------------------------------------------------------

def _reorg_ref(x: np.ndarray, bs: int) -> np.ndarray:
    """Paddle's unit-test loop: element (b, k, j, i) goes to flat position
    ``w2 + W·bs·(h2 + H·bs·(c2 + C2·b))``."""
    batch, channel, height, width = x.shape
    c_out = channel // (bs * bs)
    flat_in, flat_out = x.reshape(-1), np.zeros(x.size)
    for b in range(batch):
        for k in range(channel):
            for j in range(height):
                for i in range(width):
                    src = ((b * channel + k) * height + j) * width + i
                    off = k // c_out
                    h2, w2 = j * bs + off // bs, i * bs + off % bs
                    dst = ((b * c_out + k % c_out) * height * bs + h2) * width * bs + w2
                    flat_out[dst] = flat_in[src]
    return flat_out.reshape(batch, channel * bs * bs, height // bs, width // bs)


@pytest.mark.parametrize("shape, bs", [((3, 12, 6, 6), 2), ((2, 8, 6, 6), 2),
                                       ((2, 9, 6, 6), 3), ((2, 9, 9, 6), 3),
                                       ((1, 16, 4, 8), 2)])
def test_space_to_depth_is_paddles_reorg(shape, bs):
    x = RNG.standard_normal(shape)
    got = run_op("space_to_depth", {"X": [x]}, {"blocksize": bs})["Out"][0]
    want = _reorg_ref(x, bs)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    # the gradient reads dOut through the same map: dX[src] = dOut[dst]
    d = RNG.standard_normal(got.shape)
    dx = run_op("space_to_depth_grad", {"X": [x], "Out@GRAD": [d]},
                {"blocksize": bs})["X@GRAD"][0]
    np.testing.assert_array_equal(run_op("space_to_depth", {"X": [dx]},
                                         {"blocksize": bs})["Out"][0], d)


def test_space_to_depth_is_not_tensorflows():
    x = np.arange(16.0).reshape(1, 4, 2, 2)
    got = run_op("space_to_depth", {"X": [x]}, {"blocksize": 2})["Out"][0]
    tf_like = x.reshape(1, 4, 1, 2, 1, 2).transpose(0, 3, 5, 1, 2, 4).reshape(1, 16, 1, 1)
    assert not np.array_equal(got, tf_like)
    np.testing.assert_array_equal(got, _reorg_ref(x, 2))


def test_space_to_depth_errors():
    with pytest.raises(ValueError, match=r"channels \(6\) must be divisible by blocksize² \(4\)"):
        run_op("space_to_depth", {"X": [np.ones((1, 6, 4, 4))]}, {"blocksize": 2})
    with pytest.raises(ValueError, match="height \\(5\\)"):
        run_op("space_to_depth", {"X": [np.ones((1, 4, 5, 4))]}, {"blocksize": 2})
    with pytest.raises(ValueError, match="blocksize must be > 1, got 1"):
        run_op("space_to_depth", {"X": [np.ones((1, 4, 4, 4))]}, {"blocksize": 1})


# -- adaptive pooling ----------------------------------------------------------------------------

def _adaptive_ref(x: np.ndarray, oh: int, ow: int, kind: str):
    """Loops over Paddle's AdaptStartIndex / AdaptEndIndex; also each maximum's position."""
    n, c, h, w = x.shape
    out = np.empty((n, c, oh, ow))
    where = np.empty((n, c, oh, ow), np.int64)
    for i in range(oh):
        hs, he = math.floor(i * h / oh), math.ceil((i + 1) * h / oh)
        for j in range(ow):
            ws, we = math.floor(j * w / ow), math.ceil((j + 1) * w / ow)
            for a in range(n):
                for b in range(c):
                    win = x[a, b, hs:he, ws:we]
                    if kind == "avg":
                        out[a, b, i, j] = win.sum() / ((he - hs) * (we - ws))
                        continue
                    best, pos = -np.inf, -1
                    for r in range(hs, he):
                        for q in range(ws, we):
                            if x[a, b, r, q] > best:
                                best, pos = x[a, b, r, q], r * w + q
                    out[a, b, i, j], where[a, b, i, j] = best, pos
    return out, where


@pytest.mark.parametrize("size", [(3, 2), (1, 1), (5, 7), (2, 4)])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_adaptive_windows(size, kind):
    x = RNG.standard_normal((2, 3, 5, 7))
    attrs = {"pooling_type": kind, "ksize": list(size), "adaptive": True,
             # strides, paddings and ceil_mode play no part in adaptive pooling
             "strides": [3, 3], "paddings": [1, 1], "ceil_mode": True, "exclusive": False}
    got = run_op("pool2d", {"X": [x]}, attrs)["Out"][0]
    np.testing.assert_allclose(got, _adaptive_ref(x, *size, kind)[0], rtol=1e-12)


def test_pool2d_adaptive_grads_add_over_overlapping_windows():
    x = RNG.permutation(35).reshape(1, 1, 5, 7) * 1.0  # windows [0,2) [1,4) [3,5) overlap
    d = RNG.standard_normal((1, 1, 3, 2))
    for kind in ("max", "avg"):
        attrs = {"pooling_type": kind, "ksize": [3, 2], "adaptive": True}
        out = run_op("pool2d", {"X": [x]}, attrs)["Out"][0]
        dx = run_op("pool2d_grad", {"X": [x], "Out": [out], "Out@GRAD": [d]},
                    attrs)["X@GRAD"][0]
        _, where = _adaptive_ref(x, 3, 2, "max")
        want = np.zeros(35)
        for i in range(3):
            hs, he = math.floor(i * 5 / 3), math.ceil((i + 1) * 5 / 3)
            for j in range(2):
                ws, we = math.floor(j * 7 / 2), math.ceil((j + 1) * 7 / 2)
                if kind == "max":
                    want[where[0, 0, i, j]] += d[0, 0, i, j]
                else:
                    cells = [r * 7 + q for r in range(hs, he) for q in range(ws, we)]
                    want[cells] += d[0, 0, i, j] / len(cells)
        np.testing.assert_allclose(dx.reshape(-1), want, rtol=1e-12, err_msg=kind)


def test_pool2d_adaptive_max_gradient_goes_to_the_first_tie():
    x = np.zeros((1, 1, 2, 2))
    x[0, 0, 1, 0] = x[0, 0, 0, 1] = 1.0  # two maxima: (0, 1) comes first in row-major order
    attrs = {"ksize": [1, 1], "adaptive": True}
    out = run_op("pool2d", {"X": [x]}, attrs)["Out"][0]
    dx = run_op("pool2d_grad", {"X": [x], "Out": [out], "Out@GRAD": [np.ones((1, 1, 1, 1))]},
                attrs)["X@GRAD"][0]
    np.testing.assert_array_equal(dx[0, 0], [[0, 1], [0, 0]])
    with pytest.raises(ValueError, match="adaptive pooling needs a positive output size"):
        run_op("pool2d", {"X": [x]}, {"ksize": [0, 2], "adaptive": True})


def test_max_pool2d_with_index_adaptive_and_strided():
    x = RNG.standard_normal((2, 3, 7, 5))
    res = run_op("max_pool2d_with_index", {"X": [x]}, {"ksize": [3, 2], "adaptive": True})
    out, where = _adaptive_ref(x, 3, 2, "max")
    np.testing.assert_array_equal(res["Out"][0], out)
    assert res["Mask"][0].dtype == np.int32
    np.testing.assert_array_equal(res["Mask"][0], where)
    # plain windows: clipped to the input, output (H - k + 2p) / s + 1
    res = run_op("max_pool2d_with_index", {"X": [x]},
                 {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]})
    assert res["Out"][0].shape == (2, 3, 4, 3)
    for i in range(4):
        for j in range(3):
            hs, ws = max(2 * i - 1, 0), max(2 * j - 1, 0)
            win = x[:, :, hs:2 * i + 2, ws:2 * j + 2]
            np.testing.assert_array_equal(res["Out"][0][:, :, i, j], win.max(axis=(2, 3)))
            flat = win.reshape(2, 3, -1).argmax(axis=2)
            ww = win.shape[3]
            np.testing.assert_array_equal(res["Mask"][0][:, :, i, j],
                                          (hs + flat // ww) * 5 + ws + flat % ww)
    d = RNG.standard_normal(res["Out"][0].shape)
    dx = run_op("max_pool2d_with_index_grad", {"X": [x], "Mask": res["Mask"],
                                               "Out@GRAD": [d]},
                {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]})["X@GRAD"][0]
    want = np.zeros((2, 3, 35))
    for a in range(2):
        for b in range(3):
            for i in range(4):
                for j in range(3):
                    want[a, b, res["Mask"][0][a, b, i, j]] += d[a, b, i, j]
    np.testing.assert_allclose(dx, want.reshape(x.shape), rtol=1e-14)
    glob = run_op("max_pool2d_with_index", {"X": [x]}, {"global_pooling": True})
    np.testing.assert_array_equal(glob["Out"][0][..., 0, 0], x.max(axis=(2, 3)))
    with pytest.raises(ValueError, match="paddings must have 2 entries"):
        run_op("max_pool2d_with_index", {"X": [x]}, {"ksize": [2, 2], "paddings": [1, 1, 1]})
