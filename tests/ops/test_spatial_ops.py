"""Kernels of ``affine_grid``, ``grid_sampler``, ``temporal_shift``, ``unfold``,
``pad_constant_like``, ``fsp`` and ``similarity_focus`` against independent references
(explicit loops, and ports of the references in Paddle 1.8's own op tests), and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from . import run_op

RNG = np.random.default_rng(7)


# -- affine_grid (test_affine_grid_op.py's reference) ------------------------------------------

def affine_grid_ref(theta, size):
    n, _, h, w = size
    h_idx = np.repeat(np.linspace(-1, 1, h)[np.newaxis, :], w, axis=0).T[:, :, np.newaxis]
    w_idx = np.repeat(np.linspace(-1, 1, w)[np.newaxis, :], h, axis=0)[:, :, np.newaxis]
    grid = np.concatenate([w_idx, h_idx, np.ones([h, w, 1])], axis=2)
    ret = np.zeros([n, h * w, 2])
    for i in range(n):
        ret[i] = np.dot(grid.reshape([h * w, 3]), theta[i].T)
    return ret.reshape([n, h, w, 2])


@pytest.mark.parametrize("dynamic", [False, True])
def test_affine_grid_matches_paddles_reference(dynamic):
    theta = RNG.random((17, 2, 3))
    size = [17, 2, 5, 7]
    if dynamic:
        ins = {"Theta": [theta], "OutputShape": [np.array(size, np.int32)]}
        attrs = {}
    else:
        ins, attrs = {"Theta": [theta]}, {"output_shape": size}
    got = run_op("affine_grid", ins, attrs)["Output"][0]
    assert got.shape == (17, 5, 7, 2)
    np.testing.assert_allclose(got, affine_grid_ref(theta, size), rtol=1e-12, atol=1e-12)


def test_affine_grid_by_loops_and_grad():
    theta = RNG.standard_normal((2, 2, 3))
    got = run_op("affine_grid", {"Theta": [theta]}, {"output_shape": [2, 1, 3, 4]})["Output"][0]
    for b in range(2):
        for i in range(3):
            for j in range(4):
                pt = np.array([-1 + 2 * j / 3, -1 + i, 1.0])
                np.testing.assert_allclose(got[b, i, j], theta[b] @ pt, atol=1e-12)
    # the attribute wins over the tensor (Fluid reads OutputShape only when it is empty)
    both = run_op("affine_grid", {"Theta": [theta], "OutputShape": [np.array([2, 1, 9, 9],
                                                                             np.int32)]},
                  {"output_shape": [2, 1, 3, 4]})["Output"][0]
    np.testing.assert_array_equal(both, got)
    d = RNG.standard_normal(got.shape)
    g = run_op("affine_grid_grad", {"Theta": [theta], "Output@GRAD": [d]},
               {"output_shape": [2, 1, 3, 4]})["Theta@GRAD"][0]
    want = np.zeros_like(theta)
    for b in range(2):
        for i in range(3):
            for j in range(4):
                want[b] += np.outer(d[b, i, j], [-1 + 2 * j / 3, -1 + i, 1.0])
    np.testing.assert_allclose(g, want, atol=1e-12)


def test_affine_grid_errors():
    theta = np.zeros((2, 2, 3))
    with pytest.raises(ValueError, match="Input\\(OutputShape\\) must be given"):
        run_op("affine_grid", {"Theta": [theta]})
    with pytest.raises(ValueError, match="must have 4 values"):
        run_op("affine_grid", {"Theta": [theta]}, {"output_shape": [2, 3, 4]})
    with pytest.raises(ValueError, match="Theta\\) must have shape \\[N, 2, 3\\]"):
        run_op("affine_grid", {"Theta": [np.zeros((2, 3, 3))]}, {"output_shape": [2, 1, 3, 3]})


# -- grid_sampler (test_grid_sampler_op.py's reference, 1.8) -----------------------------------

def grid_sampler_ref(data, grid):
    n, c, h, w = data.shape
    x = 0.5 * ((grid[..., 0] + 1.0) * (w - 1))
    y = 0.5 * ((grid[..., 1] + 1.0) * (h - 1))
    x0 = np.floor(x).astype(int)
    y0 = np.floor(y).astype(int)
    out = np.zeros_like(data)
    for b in range(n):
        for i in range(h):
            for j in range(w):
                for dy in (0, 1):
                    for dx in (0, 1):
                        xx, yy = x0[b, i, j] + dx, y0[b, i, j] + dy
                        if 0 <= xx <= w - 1 and 0 <= yy <= h - 1:
                            wx = (x[b, i, j] - x0[b, i, j]) if dx else (xx + 1 - x[b, i, j])
                            wy = (y[b, i, j] - y0[b, i, j]) if dy else (yy + 1 - y[b, i, j])
                            out[b, :, i, j] += data[b, :, yy, xx] * wx * wy
    return out


def test_grid_sampler_matches_reference_on_an_affine_grid():
    x = RNG.standard_normal((2, 3, 8, 8))
    theta = RNG.random((2, 2, 3))
    grid = affine_grid_ref(theta, [2, 3, 8, 8])
    got = run_op("grid_sampler", {"X": [x], "Grid": [grid]})["Output"][0]
    assert got.shape == x.shape
    np.testing.assert_allclose(got, grid_sampler_ref(x, grid), rtol=1e-12, atol=1e-12)


def test_grid_sampler_identity_corners_and_outside():
    x = RNG.standard_normal((1, 2, 3, 4))
    ident = affine_grid_ref(np.array([[[1.0, 0, 0], [0, 1.0, 0]]]), [1, 2, 3, 4])
    np.testing.assert_allclose(run_op("grid_sampler", {"X": [x], "Grid": [ident]})["Output"][0],
                               x, atol=1e-12)  # ±1 are the corner pixels' centres
    far = np.full((1, 3, 4, 2), 3.0)  # every point beyond X: zero padding
    assert not run_op("grid_sampler", {"X": [x], "Grid": [far]})["Output"][0].any()
    # half a pixel left of X: only the east neighbours count, with weight 1/2
    edge = ident.copy()
    edge[..., 0] = -1 - 1 / 3  # x = -0.5 pixel
    got = run_op("grid_sampler", {"X": [x], "Grid": [edge]})["Output"][0]
    np.testing.assert_allclose(got, np.broadcast_to(0.5 * x[..., :1], x.shape), atol=1e-12)


def test_grid_sampler_grads_by_loops():
    x = RNG.standard_normal((1, 2, 3, 3))
    grid = RNG.uniform(-1.3, 1.3, (1, 3, 3, 2))
    d = RNG.standard_normal(x.shape)
    res = run_op("grid_sampler_grad", {"X": [x], "Grid": [grid], "Output@GRAD": [d]})
    gx = 0.5 * ((grid[..., 0] + 1) * 2)
    gy = 0.5 * ((grid[..., 1] + 1) * 2)
    dx = np.zeros_like(x)
    for i in range(3):
        for j in range(3):
            x0, y0 = int(np.floor(gx[0, i, j])), int(np.floor(gy[0, i, j]))
            for yy in (y0, y0 + 1):
                for xx in (x0, x0 + 1):
                    if 0 <= xx <= 2 and 0 <= yy <= 2:
                        wgt = (1 - abs(gx[0, i, j] - xx)) * (1 - abs(gy[0, i, j] - yy))
                        dx[0, :, yy, xx] += d[0, :, i, j] * wgt
    np.testing.assert_allclose(res["X@GRAD"][0], dx, atol=1e-12)
    only = run_op("grid_sampler_grad", {"X": [x], "Grid": [grid], "Output@GRAD": [d]},
                  outs=("Grid@GRAD",))
    assert set(only) == {"Grid@GRAD"} and only["Grid@GRAD"][0].shape == grid.shape


def test_grid_sampler_errors():
    x = np.zeros((1, 2, 3, 4))
    with pytest.raises(ValueError, match="must be \\[N, H, W, 2\\] with X's N, H and W"):
        run_op("grid_sampler", {"X": [x], "Grid": [np.zeros((1, 4, 3, 2))]})
    with pytest.raises(ValueError, match="Grid\\) must have shape \\[N, H, W, 2\\]"):
        run_op("grid_sampler", {"X": [x], "Grid": [np.zeros((1, 3, 4, 3))]})
    with pytest.raises(ValueError, match="Input\\(X\\) must be a 4-D tensor"):
        run_op("grid_sampler", {"X": [np.zeros((2, 3, 4))], "Grid": [np.zeros((2, 3, 4, 2))]})


# -- temporal_shift (test_temporal_shift_op.py's reference) ------------------------------------

def temporal_shift_ref(x, seg_num, shift_ratio):
    shape = x.shape
    pad_x = np.pad(x.reshape((-1, seg_num) + shape[1:]), ((0, 0), (1, 1), (0, 0), (0, 0),
                                                          (0, 0)))
    c1 = int(shape[1] * shift_ratio)
    c2 = int(shape[1] * 2 * shift_ratio)
    concat = np.concatenate([pad_x[:, :seg_num, :c1], pad_x[:, 2:seg_num + 2, c1:c2],
                             pad_x[:, 1:seg_num + 1, c2:]], axis=2)
    return concat.reshape(shape)


@pytest.mark.parametrize("shape, seg_num, ratio", [((6, 4, 4, 4), 3, 0.25),
                                                   ((4, 9, 7, 7), 2, 0.2),
                                                   ((3, 10, 5, 5), 1, 0.3)])
def test_temporal_shift_matches_paddles_reference(shape, seg_num, ratio):
    x = RNG.standard_normal(shape)
    attrs = {"seg_num": seg_num, "shift_ratio": ratio}
    got = run_op("temporal_shift", {"X": [x]}, attrs)["Out"][0]
    np.testing.assert_array_equal(got, temporal_shift_ref(x, seg_num, ratio))
    d = RNG.standard_normal(shape)
    dx = run_op("temporal_shift_grad", {"X": [x], "Out@GRAD": [d]}, attrs)["X@GRAD"][0]
    # the adjoint: <shift(x), d> = <x, shift^T(d)>
    np.testing.assert_allclose((got * d).sum(), (x * dx).sum(), rtol=1e-12)


def test_temporal_shift_channel_split_in_float32():
    # 0.35 in float32 is 0.3499999940; Paddle's kernel multiplies in float: int(20 * 0.35f) = 7
    x = np.arange(2 * 20, dtype=np.float64).reshape(2, 20, 1, 1)
    got = run_op("temporal_shift", {"X": [x]}, {"seg_num": 2, "shift_ratio": 0.35})["Out"][0]
    assert (got[0, :7] == 0).all() and (got[0, 7:14] == x[1, 7:14]).all()
    assert (got[0, 14:] == x[0, 14:]).all()


def test_temporal_shift_errors():
    x = np.zeros((6, 4, 2, 2))
    with pytest.raises(ValueError, match="dims\\[0\\] \\(6\\) must be divisible by seg_num"):
        run_op("temporal_shift", {"X": [x]}, {"seg_num": 4})
    with pytest.raises(ValueError, match="shift_ratio must be in \\(0, 0.5\\)"):
        run_op("temporal_shift", {"X": [x]}, {"seg_num": 3, "shift_ratio": 0.5})
    with pytest.raises(ValueError, match="seg_num must be greater than 0"):
        run_op("temporal_shift", {"X": [x]}, {"seg_num": 0})
    with pytest.raises(ValueError, match="must be 4-D"):
        run_op("temporal_shift", {"X": [np.zeros((6, 4, 2))]}, {"seg_num": 3})


# -- unfold (test_unfold_op.py's reference) ----------------------------------------------------

def unfold_ref(x, k, s, p, d):
    n, c, h, w = x.shape
    dkh, dkw = d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1
    oh = (h + p[0] + p[2] - dkh) // s[0] + 1
    ow = (w + p[1] + p[3] - dkw) // s[1] + 1
    out = np.zeros((n, c * k[0] * k[1], oh * ow))
    for i in range(n):
        for j in range(c * k[0] * k[1]):
            for q in range(oh * ow):
                h_out, w_out = q // ow, q % ow
                w_off, h_off = j % k[1], (j // k[1]) % k[0]
                c_in = j // (k[0] * k[1])
                h_in = h_off * d[0] + h_out * s[0] - p[0]
                w_in = w_off * d[1] + w_out * s[1] - p[1]
                if 0 <= h_in < h and 0 <= w_in < w:
                    out[i, j, q] = x[i, c_in, h_in, w_in]
    return out


@pytest.mark.parametrize("shape, k, s, p, d", [
    ((3, 3, 20, 20), [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),  # Paddle's test case
    ((2, 2, 7, 6), [2, 3], [2, 1], [1, 0, 2, 1], [1, 2]),
    ((1, 1, 5, 5), [5, 5], [1, 1], [0, 0, 0, 0], [1, 1]),
    ((1, 2, 6, 5), [2, 2], [3, 2], [0, 2, 0, 0], [2, 1]),
])
def test_unfold_matches_paddles_reference(shape, k, s, p, d):
    x = RNG.standard_normal(shape)
    attrs = {"kernel_sizes": k, "strides": s, "paddings": p, "dilations": d}
    got = run_op("unfold", {"X": [x]}, attrs)["Y"][0]
    want = unfold_ref(x, k, s, p, d)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    dy = RNG.standard_normal(want.shape)
    dx = run_op("unfold_grad", {"X": [x], "Y@GRAD": [dy]}, attrs)["X@GRAD"][0]
    np.testing.assert_allclose((want * dy).sum(), (x * dx).sum(), rtol=1e-12)


def test_unfold_errors():
    x = np.zeros((1, 1, 3, 3))
    base = {"kernel_sizes": [2, 2], "strides": [1, 1], "paddings": [0, 0, 0, 0],
            "dilations": [1, 1]}
    with pytest.raises(ValueError, match="which must be positive"):
        run_op("unfold", {"X": [x]}, {**base, "kernel_sizes": [4, 4]})
    with pytest.raises(ValueError, match="strides must be greater than zero"):
        run_op("unfold", {"X": [x]}, {**base, "strides": [0, 1]})
    with pytest.raises(ValueError, match="paddings 4"):
        run_op("unfold", {"X": [x]}, {**base, "paddings": [1, 1]})
    with pytest.raises(ValueError, match="must be a 4-D tensor"):
        run_op("unfold", {"X": [np.zeros((3, 3))]}, base)


# -- pad_constant_like (test_pad_constant_like.py's cases) -------------------------------------

@pytest.mark.parametrize("xs, ys, value", [((16, 16), (1, 16), 0.1),
                                           ((16, 16), (1, 16), 1.0),
                                           ((4, 3, 4, 5), (2, 3, 4, 5), 0.5)])
def test_pad_constant_like_matches_np_pad(xs, ys, value):
    x, y = RNG.random(xs), RNG.random(ys)
    got = run_op("pad_constant_like", {"X": [x], "Y": [y]}, {"pad_value": value})["Out"][0]
    want = np.pad(y, [(0, a - b) for a, b in zip(xs, ys, strict=True)],
                  constant_values=value)
    np.testing.assert_array_equal(got, want)
    d = RNG.standard_normal(xs)
    dy = run_op("pad_constant_like_grad", {"Y": [y], "Out@GRAD": [d]})["Y@GRAD"][0]
    np.testing.assert_array_equal(dy, d[tuple(slice(0, b) for b in ys)])


def test_pad_constant_like_keeps_ys_dtype_and_errors():
    got = run_op("pad_constant_like", {"X": [np.zeros((3, 2))],
                                       "Y": [np.array([[5, 6]], np.int64)]},
                 {"pad_value": -1.0})["Out"][0]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [[5, 6], [-1, -1], [-1, -1]])
    with pytest.raises(ValueError, match="expected X.dim\\[1\\] >= Y.dim\\[1\\], got 2 < 3"):
        run_op("pad_constant_like", {"X": [np.zeros((3, 2))], "Y": [np.zeros((1, 3))]})
    with pytest.raises(ValueError, match="must have the same rank"):
        run_op("pad_constant_like", {"X": [np.zeros((3, 2))], "Y": [np.zeros(2)]})


# -- fsp (test_fsp_op.py's reference) ----------------------------------------------------------

def fsp_ref(a, b):
    batch, ac, h, w = a.shape
    bc = b.shape[1]
    a_t = a.transpose([0, 2, 3, 1]).reshape([batch, h * w, ac])
    b_t = b.transpose([0, 2, 3, 1]).reshape([batch, h * w, bc])
    a_r = a_t.repeat(bc, axis=1).reshape([batch, h * w, bc, ac]).transpose([0, 1, 3, 2])
    b_r = b_t.repeat(ac, axis=1).reshape([batch, h * w, ac, bc])
    return np.mean(a_r * b_r, axis=1)


def test_fsp_matches_paddles_reference_and_grads():
    a, b = RNG.random((2, 3, 5, 6)), RNG.random((2, 4, 5, 6))
    got = run_op("fsp", {"X": [a], "Y": [b]})["Out"][0]
    np.testing.assert_allclose(got, fsp_ref(a, b), rtol=1e-12)
    d = RNG.standard_normal(got.shape)
    res = run_op("fsp_grad", {"X": [a], "Y": [b], "Out@GRAD": [d]})
    dx, dy = np.zeros_like(a), np.zeros_like(b)
    for n in range(2):
        for i in range(3):
            for j in range(4):
                dx[n, i] += d[n, i, j] * b[n, j] / 30
                dy[n, j] += d[n, i, j] * a[n, i] / 30
    np.testing.assert_allclose(res["X@GRAD"][0], dx, atol=1e-12)
    np.testing.assert_allclose(res["Y@GRAD"][0], dy, atol=1e-12)
    with pytest.raises(ValueError, match="same batch size, height and width"):
        run_op("fsp", {"X": [a], "Y": [np.zeros((2, 4, 5, 5))]})


# -- similarity_focus (test_similarity_focus_op.py's cases) ------------------------------------

def similarity_focus_ref(x, axis, indexes):
    """Greedy picks by explicit scanning of the remaining maximum."""
    out = np.zeros_like(x)
    for b in range(x.shape[0]):
        for idx in indexes:
            plane = np.take(x[b], idx, axis=axis - 1).astype(float)
            rows, cols = plane.shape
            for _ in range(min(rows, cols)):
                r, c = np.unravel_index(np.argmax(plane), plane.shape)
                sel = [b, r, c]
                sel.insert(axis, slice(None))
                out[tuple(sel)] = 1
                plane[r, :] = -np.inf
                plane[:, c] = -np.inf
    return out


def test_similarity_focus_paddles_fixed_case():
    x = np.array([[[[0.8, 0.1], [0.4, 0.5]], [[0.9, 0.7], [0.9, 0.9]],
                   [[0.8, 0.9], [0.1, 0.2]]],
                  [[[0.2, 0.5], [0.3, 0.4]], [[0.9, 0.7], [0.8, 0.4]],
                   [[0.0, 0.2], [0.4, 0.7]]]])
    got = run_op("similarity_focus", {"X": [x]}, {"axis": 1, "indexes": [0]})["Out"][0]
    want = np.array([[[[1.0, 0.0], [0.0, 1.0]]] * 3, [[[0.0, 1.0], [1.0, 0.0]]] * 3])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape, axis, indexes", [((2, 3, 4, 5), 1, [0, 2]),
                                                  ((1, 4, 3, 5), 2, [1]),
                                                  ((2, 3, 5, 4), 3, [0, 1, 3])])
def test_similarity_focus_matches_a_greedy_reference(shape, axis, indexes):
    x = RNG.permutation(int(np.prod(shape))).reshape(shape) / 10.0  # distinct values
    got = run_op("similarity_focus", {"X": [x]}, {"axis": axis, "indexes": indexes})["Out"][0]
    np.testing.assert_array_equal(got, similarity_focus_ref(x, axis, indexes))
    assert got.dtype == x.dtype


def test_similarity_focus_errors():
    x = np.zeros((1, 2, 3, 3))
    with pytest.raises(ValueError, match="axis must be 1, 2 or 3, got 0"):
        run_op("similarity_focus", {"X": [x]}, {"axis": 0, "indexes": [0]})
    with pytest.raises(ValueError, match="indexes\\[1\\] = 2 must be in \\[0, 2\\)"):
        run_op("similarity_focus", {"X": [x]}, {"axis": 1, "indexes": [0, 2]})
    with pytest.raises(ValueError, match="indexes must not be empty"):
        run_op("similarity_focus", {"X": [x]}, {"axis": 1, "indexes": []})
    with pytest.raises(ValueError, match="must be a 4-D tensor"):
        run_op("similarity_focus", {"X": [np.zeros((2, 3))]}, {"axis": 1, "indexes": [0]})
