"""``bilinear_interp``, ``nearest_interp``, ``trilinear_interp`` and ``bicubic_interp`` (and
their gradients) against element-by-element references written after Paddle 1.8's own op tests
(``test_bilinear_interp_op.py``, ``test_nearest_interp_op.py``, ``test_trilinear_interp_op.py``:
float64 ratios, explicit loops; bicubic after Paddle's ``BicubicInterpolation`` kernel), the
output-size priority of the kernel, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from . import run_op


def _ratio(n_in: int, n_out: int, align_corners: bool) -> float:
    if n_out <= 1:
        return 0.0
    return (n_in - 1.0) / (n_out - 1.0) if align_corners else 1.0 * n_in / n_out


def _linear_1d(i: int, ratio: float, n_in: int, align_corners: bool, align_mode: int):
    """(lower, upper, weight of upper) for output position i, in float64."""
    half = align_mode == 0 and not align_corners
    lo = max(int(ratio * (i + 0.5) - 0.5) if half else int(ratio * i), 0)
    step = 1 if lo < n_in - 1 else 0
    lam = (max(ratio * (i + 0.5) - 0.5, 0) if half else ratio * i) - lo
    return lo, lo + step, lam


def bilinear_ref(x, out_h, out_w, align_corners=True, align_mode=1, nhwc=False):
    if nhwc:
        x = x.transpose(0, 3, 1, 2)
    n, c, in_h, in_w = x.shape
    rh, rw = _ratio(in_h, out_h, align_corners), _ratio(in_w, out_w, align_corners)
    out = np.zeros((n, c, out_h, out_w))
    for i in range(out_h):
        h0, h1, lh = _linear_1d(i, rh, in_h, align_corners, align_mode)
        for j in range(out_w):
            w0, w1, lw = _linear_1d(j, rw, in_w, align_corners, align_mode)
            out[:, :, i, j] = ((1 - lh) * ((1 - lw) * x[:, :, h0, w0] + lw * x[:, :, h0, w1])
                               + lh * ((1 - lw) * x[:, :, h1, w0] + lw * x[:, :, h1, w1]))
    return out.transpose(0, 2, 3, 1) if nhwc else out


def nearest_ref(x, out_h, out_w, align_corners=True, nhwc=False):
    if nhwc:
        x = x.transpose(0, 3, 1, 2)
    n, c, in_h, in_w = x.shape
    rh, rw = _ratio(in_h, out_h, align_corners), _ratio(in_w, out_w, align_corners)
    out = np.zeros((n, c, out_h, out_w))
    for i in range(out_h):
        si = int(rh * i + 0.5) if align_corners else int(rh * i)
        for j in range(out_w):
            sj = int(rw * j + 0.5) if align_corners else int(rw * j)
            out[:, :, i, j] = x[:, :, si, sj]
    return out.transpose(0, 2, 3, 1) if nhwc else out


def trilinear_ref(x, out_d, out_h, out_w, align_corners=True, align_mode=1):
    n, c, in_d, in_h, in_w = x.shape
    rd = _ratio(in_d, out_d, align_corners)
    rh, rw = _ratio(in_h, out_h, align_corners), _ratio(in_w, out_w, align_corners)
    out = np.zeros((n, c, out_d, out_h, out_w))
    for t in range(out_d):
        d0, d1, ld = _linear_1d(t, rd, in_d, align_corners, align_mode)
        for i in range(out_h):
            h0, h1, lh = _linear_1d(i, rh, in_h, align_corners, align_mode)
            for j in range(out_w):
                w0, w1, lw = _linear_1d(j, rw, in_w, align_corners, align_mode)
                acc = 0.0
                for dd, wd in ((d0, 1 - ld), (d1, ld)):
                    for hh, wh in ((h0, 1 - lh), (h1, lh)):
                        for ww, wwt in ((w0, 1 - lw), (w1, lw)):
                            acc = acc + wd * wh * wwt * x[:, :, dd, hh, ww]
                out[:, :, t, i, j] = acc
    return out


def _grad_by_loops(x_shape, dy, method, align_corners=True, align_mode=1):
    """Paddle's grad kernel loops (NCHW): each output gradient added into the positions the
    forward read, times their weights."""
    n, c, in_h, in_w = x_shape
    _, _, out_h, out_w = dy.shape
    rh, rw = _ratio(in_h, out_h, align_corners), _ratio(in_w, out_w, align_corners)
    dx = np.zeros(x_shape)
    for i in range(out_h):
        for j in range(out_w):
            if method == "nearest":
                si = int(rh * i + 0.5) if align_corners else int(rh * i)
                sj = int(rw * j + 0.5) if align_corners else int(rw * j)
                dx[:, :, si, sj] += dy[:, :, i, j]
                continue
            h0, h1, lh = _linear_1d(i, rh, in_h, align_corners, align_mode)
            w0, w1, lw = _linear_1d(j, rw, in_w, align_corners, align_mode)
            dx[:, :, h0, w0] += dy[:, :, i, j] * (1 - lh) * (1 - lw)
            dx[:, :, h1, w0] += dy[:, :, i, j] * lh * (1 - lw)
            dx[:, :, h0, w1] += dy[:, :, i, j] * (1 - lh) * lw
            dx[:, :, h1, w1] += dy[:, :, i, j] * lh * lw
    return dx


RNG = np.random.default_rng(7)

BILINEAR_CASES = [
    # (input shape NCHW, out_h, out_w, align_corners, align_mode)
    ((2, 3, 4, 5), 7, 9, True, 1),
    ((2, 3, 4, 5), 7, 9, False, 1),
    ((2, 3, 4, 5), 7, 9, False, 0),
    ((1, 2, 6, 8), 3, 5, False, 0),  # downsampling, half-pixel centres
    ((1, 2, 6, 8), 3, 5, True, 0),  # align_mode only matters without align_corners
    ((1, 1, 5, 4), 1, 6, False, 0),  # one output row reads row 0
    ((1, 1, 1, 3), 4, 2, True, 1),  # one input row
]


@pytest.mark.parametrize("shape, oh, ow, ac, am", BILINEAR_CASES)
@pytest.mark.parametrize("nhwc", [False, True])
def test_bilinear_matches_reference(shape, oh, ow, ac, am, nhwc):
    x = RNG.standard_normal(shape)
    attrs = {"out_h": oh, "out_w": ow, "align_corners": ac, "align_mode": am}
    if nhwc:
        x = x.transpose(0, 2, 3, 1).copy()
        attrs["data_layout"] = "NHWC"
    out = run_op("bilinear_interp", {"X": [x]}, attrs)["Out"][0]
    # Paddle's weights are C++ floats: agreement to float32 precision
    np.testing.assert_allclose(out, bilinear_ref(x, oh, ow, ac, am, nhwc), rtol=1e-5,
                               atol=1e-5)
    assert out.dtype == np.float64


NEAREST_CASES = [
    ((2, 3, 3, 4), 7, 9, False),  # repeats
    ((2, 3, 4, 4), 7, 10, True),  # round half up
    ((1, 2, 5, 7), 3, 4, True),
    ((1, 2, 6, 8), 4, 3, False),
]


@pytest.mark.parametrize("shape, oh, ow, ac", NEAREST_CASES)
@pytest.mark.parametrize("nhwc", [False, True])
def test_nearest_matches_reference(shape, oh, ow, ac, nhwc):
    x = RNG.standard_normal(shape).astype(np.float32)
    attrs = {"interp_method": "nearest", "out_h": oh, "out_w": ow, "align_corners": ac}
    if nhwc:
        x = x.transpose(0, 2, 3, 1).copy()
        attrs["data_layout"] = "NHWC"
    out = run_op("nearest_interp", {"X": [x]}, attrs)["Out"][0]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, nearest_ref(x, oh, ow, ac, nhwc).astype(np.float32))


@pytest.mark.parametrize("ac, am", [(True, 1), (False, 1), (False, 0)])
def test_trilinear_matches_reference(ac, am):
    x = RNG.standard_normal((2, 2, 3, 4, 3))
    attrs = {"interp_method": "trilinear", "out_d": 5, "out_h": 3, "out_w": 6,
             "align_corners": ac, "align_mode": am}
    out = run_op("trilinear_interp", {"X": [x]}, attrs)["Out"][0]
    np.testing.assert_allclose(out, trilinear_ref(x, 5, 3, 6, ac, am), rtol=1e-5, atol=1e-5)
    # channels last: the same values with C moved to the end
    xl = x.transpose(0, 2, 3, 4, 1).copy()
    outl = run_op("trilinear_interp", {"X": [xl]}, {**attrs, "data_layout": "NHWC"})["Out"][0]
    np.testing.assert_allclose(outl, out.transpose(0, 2, 3, 4, 1), rtol=1e-12)


@pytest.mark.parametrize("method, ac, am", [("bilinear", True, 1), ("bilinear", False, 0),
                                            ("bilinear", False, 1), ("nearest", False, 1),
                                            ("nearest", True, 1)])
def test_gradient_is_the_scatter_add_of_the_forward_weights(method, ac, am):
    x = RNG.standard_normal((2, 2, 3, 5))
    attrs = {"interp_method": method, "out_h": 8, "out_w": 4, "align_corners": ac,
             "align_mode": am}
    dy = RNG.standard_normal((2, 2, 8, 4))
    dx = run_op(f"{method}_interp_grad", {"X": [x], "Out@GRAD": [dy]}, attrs)["X@GRAD"][0]
    np.testing.assert_allclose(dx, _grad_by_loops(x.shape, dy, method, ac, am), rtol=1e-5,
                               atol=1e-5)
    # the adjoint of the forward: <interp(x), dy> == <x, dx>
    out = run_op(f"{method}_interp", {"X": [x]}, attrs)["Out"][0]
    assert np.isclose((out * dy).sum(), (x * dx).sum(), rtol=1e-10)


def _cubic_coeffs(t: float) -> list[float]:
    a = -0.75

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def bicubic_ref(x, out_h, out_w, align_corners=True, nhwc=False):
    """Paddle's BicubicInterpolation, pixel by pixel (each row along W first, then the four
    row results along H), in float64."""
    if nhwc:
        x = x.transpose(0, 3, 1, 2)
    n, c, in_h, in_w = x.shape
    rh, rw = _ratio(in_h, out_h, align_corners), _ratio(in_w, out_w, align_corners)
    out = np.zeros((n, c, out_h, out_w))
    for k in range(out_h):
        yn = rh * k if align_corners else rh * (k + 0.5) - 0.5
        iy = int(np.floor(yn))
        cy = _cubic_coeffs(yn - iy)
        for m in range(out_w):
            xn = rw * m if align_corners else rw * (m + 0.5) - 0.5
            ix = int(np.floor(xn))
            cx = _cubic_coeffs(xn - ix)
            rows = []
            for ii in range(4):
                yy = min(max(iy - 1 + ii, 0), in_h - 1)
                rows.append(sum(cx[jj] * x[:, :, yy, min(max(ix - 1 + jj, 0), in_w - 1)]
                                for jj in range(4)))
            out[:, :, k, m] = sum(cy[ii] * rows[ii] for ii in range(4))
    return out.transpose(0, 2, 3, 1) if nhwc else out


@pytest.mark.parametrize("shape,oh,ow,ac,nhwc", [
    ((2, 3, 5, 4), 9, 7, True, False),     # up
    ((1, 2, 6, 7), 3, 4, False, False),    # down, half-pixel taps
    ((1, 4, 5, 3), 8, 5, False, True),     # NHWC
    ((1, 1, 2, 2), 1, 5, True, False),     # one output row: ratio 0
])
def test_bicubic_matches_reference(shape, oh, ow, ac, nhwc):
    x = np.random.default_rng(0).standard_normal(shape)
    attrs = {"interp_method": "bicubic", "out_h": oh, "out_w": ow, "align_corners": ac,
             "data_layout": "NHWC" if nhwc else "NCHW"}
    got = run_op("bicubic_interp", {"X": [x]}, attrs)["Out"][0]
    ref_in = x
    np.testing.assert_allclose(got, bicubic_ref(ref_in, oh, ow, ac, nhwc), rtol=1e-6,
                               atol=1e-6)
    # align_mode plays no part in bicubic (Paddle's kernel ignores it)
    other = run_op("bicubic_interp", {"X": [x]}, {**attrs, "align_mode": 0})["Out"][0]
    np.testing.assert_array_equal(other, got)


def test_uint8_input_truncates_as_paddle_casts():
    x = np.array([[[[0, 255], [10, 20]]]], np.uint8)
    out = run_op("bilinear_interp", {"X": [x]}, {"out_h": 3, "out_w": 3})["Out"][0]
    assert out.dtype == np.uint8
    ref = bilinear_ref(x.astype(np.float64), 3, 3)
    np.testing.assert_array_equal(out, np.floor(ref + 1e-4).astype(np.uint8))


def test_unchanged_size_copies_the_input():
    x = RNG.standard_normal((1, 2, 3, 4))
    for method in ("bilinear", "nearest"):
        out = run_op(f"{method}_interp", {"X": [x]},
                     {"interp_method": method, "out_h": 3, "out_w": 4, "align_corners": False,
                      "align_mode": 0})["Out"][0]
        np.testing.assert_array_equal(out, x)
        assert out is not x
        dy = RNG.standard_normal(x.shape)
        dx = run_op(f"{method}_interp_grad", {"X": [x], "Out@GRAD": [dy]},
                    {"interp_method": method, "out_h": 3, "out_w": 4})["X@GRAD"][0]
        np.testing.assert_array_equal(dx, dy)


def _size(ins, attrs):
    x = np.zeros((1, 1, 4, 6))
    return run_op("bilinear_interp", {"X": [x], **ins}, attrs)["Out"][0].shape[2:]


def test_output_size_priority():
    st = [np.array([3], np.int32), np.array([5], np.int32)]
    osz = [np.array([7, 2], np.int32)]
    sc = [np.array([0.5], np.float32)]
    attrs = {"out_h": 9, "out_w": 11, "scale": 1.5}
    assert _size({}, {"out_h": 9, "out_w": 11}) == (9, 11)
    assert _size({}, attrs) == (6, 9)  # scale attr over out_h/out_w: int(4·1.5), int(6·1.5)
    assert _size({"Scale": sc}, attrs) == (2, 3)  # Scale tensor over the attr
    assert _size({"OutSize": osz, "Scale": sc}, attrs) == (7, 2)  # OutSize over Scale
    assert _size({"SizeTensor": st, "OutSize": osz, "Scale": sc}, attrs) == (3, 5)
    assert _size({}, {"scale": 1.3}) == (5, 7)  # truncated: int(5.2), int(7.8)


def test_gradient_uses_the_same_size_priority():
    x = RNG.standard_normal((1, 1, 4, 6))
    ins = {"X": [x], "SizeTensor": [np.array([3], np.int32), np.array([5], np.int32)],
           "OutSize": [np.array([7, 2], np.int32)]}
    dy = RNG.standard_normal((1, 1, 3, 5))
    dx = run_op("bilinear_interp_grad", {**ins, "Out@GRAD": [dy]},
                {"out_h": 9, "out_w": 9})["X@GRAD"][0]
    np.testing.assert_allclose(dx, _grad_by_loops(x.shape, dy, "bilinear"), rtol=1e-6)
    with pytest.raises(ValueError, match=r"Out@GRAD has shape \[1, 1, 7, 2\]"):
        run_op("bilinear_interp_grad", {**ins, "Out@GRAD": [np.zeros((1, 1, 7, 2))]}, {})


def test_missing_output_gradient_is_zero_and_unrequested_is_skipped():
    x = RNG.standard_normal((1, 2, 3, 3))
    res = run_op("nearest_interp_grad", {"X": [x], "Out@GRAD": [None]},
                 {"interp_method": "nearest", "out_h": 5, "out_w": 5})
    np.testing.assert_array_equal(res["X@GRAD"][0], np.zeros_like(x))
    assert run_op("bilinear_interp_grad", {"X": [x], "Out@GRAD": [np.ones((1, 2, 5, 5))]},
                  {"out_h": 5, "out_w": 5}, outs=()) == {}


def test_float32_stays_float32_through_the_gradient():
    x = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    out = run_op("bilinear_interp", {"X": [x]}, {"out_h": 5, "out_w": 4})["Out"][0]
    assert out.dtype == np.float32
    dx = run_op("bilinear_interp_grad", {"X": [x], "Out@GRAD": [np.ones_like(out)]},
                {"out_h": 5, "out_w": 4})["X@GRAD"][0]
    assert dx.dtype == np.float32 and dx.shape == x.shape
    np.testing.assert_allclose(dx.sum(), out.size, rtol=1e-5)  # the weights sum to 1


def test_errors():
    x = np.zeros((1, 1, 4, 4))
    with pytest.raises(ValueError, match="out_h of the output .* greater than 0, got 0"):
        run_op("bilinear_interp", {"X": [x]}, {})
    with pytest.raises(ValueError, match="out_w .* greater than 0, got -1"):
        run_op("bilinear_interp", {"X": [x]}, {"out_h": 2, "out_w": -1})
    with pytest.raises(ValueError, match="dimension must be 4 or 5"):
        run_op("bilinear_interp", {"X": [np.zeros((2, 3, 4))]}, {"out_h": 2, "out_w": 2})
    with pytest.raises(ValueError, match="can only be 'bilinear', 'nearest' or 'bicubic'"):
        run_op("bilinear_interp", {"X": [x]},
               {"interp_method": "trilinear", "out_h": 2, "out_w": 2})
    with pytest.raises(ValueError, match="can only be 'trilinear' when Input.X. dimension is 5"):
        run_op("trilinear_interp", {"X": [np.zeros((1, 1, 2, 2, 2))]},
               {"out_d": 3, "out_h": 3, "out_w": 3})
    with pytest.raises(ValueError, match="'bilinear', 'nearest' or 'bicubic'"):
        run_op("bicubic_interp", {"X": [x]}, {"interp_method": "cubic", "out_h": 2,
                                              "out_w": 2})
    with pytest.raises(ValueError, match="data_layout must be 'NCHW' or 'NHWC', got 'NCDHW'"):
        run_op("bilinear_interp", {"X": [x]}, {"out_h": 2, "out_w": 2,
                                               "data_layout": "NCDHW"})
    with pytest.raises(ValueError, match="SizeTensor. must hold 2 tensors .* got 1"):
        run_op("bilinear_interp", {"X": [x], "SizeTensor": [np.array([2], np.int32)]}, {})
    with pytest.raises(ValueError, match=r"each SizeTensor must hold one value .*\[2\]"):
        run_op("bilinear_interp", {"X": [x], "SizeTensor": [np.array([2, 2], np.int32)] * 2},
               {})
    with pytest.raises(TypeError, match="OutSize. must be an int32 tensor, got dtype float32"):
        run_op("bilinear_interp", {"X": [x], "OutSize": [np.array([2, 2], np.float32)]}, {})
    with pytest.raises(ValueError, match=r"OutSize. must hold 2 sizes .* \[3\]"):
        run_op("bilinear_interp", {"X": [x], "OutSize": [np.array([2, 2, 2], np.int32)]}, {})
    with pytest.raises(ValueError, match="out_h .* greater than 0, got 0"):
        run_op("bilinear_interp", {"X": [x], "Scale": [np.array([0.1], np.float32)]}, {})
