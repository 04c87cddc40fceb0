"""The ROI pooling kernels (roi_pool, roi_align, psroi_pool, prroi_pool) against explicit
loops written after Paddle's CPU kernels (``roi_pool_op.h``, ``roi_align_op.h``,
``psroi_pool_op.h``, ``prroi_pool_op.h``), on cases shaped like Paddle's own unit tests
(``test_roi_pool_op.py``, ``test_roi_align_op.py``, ``test_psroi_pool_op.py``,
``test_prroi_pool_op.py``); their gradients; and the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from . import run_op

# ---------------------------------------------------------------------------------------------
# references: one output element at a time, as the C++ loops go


def _batch_of(offsets):
    return [n for n in range(len(offsets) - 1) for _ in range(offsets[n], offsets[n + 1])]


def _cround(v: float) -> int:
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def ref_roi_pool(x, rois, offsets, ph, pw, ss):
    n_, c_, h, w = x.shape
    out = np.zeros((len(rois), c_, ph, pw))
    arg = np.full((len(rois), c_, ph, pw), -1, np.int64)
    for r, b in enumerate(_batch_of(offsets)):
        sw, sh, ew, eh = (_cround(float(v) * ss) for v in rois[r])
        rh, rw = max(eh - sh + 1, 1), max(ew - sw + 1, 1)
        bh, bw = np.float32(rh) / np.float32(ph), np.float32(rw) / np.float32(pw)
        for c in range(c_):
            for p in range(ph):
                for q in range(pw):
                    hs = min(max(int(np.floor(np.float32(p) * bh)) + sh, 0), h)
                    he = min(max(int(np.ceil(np.float32(p + 1) * bh)) + sh, 0), h)
                    ws = min(max(int(np.floor(np.float32(q) * bw)) + sw, 0), w)
                    we = min(max(int(np.ceil(np.float32(q + 1) * bw)) + sw, 0), w)
                    if he <= hs or we <= ws:
                        continue
                    best = -np.finfo(np.float64).max
                    for i in range(hs, he):
                        for j in range(ws, we):
                            if x[b, c, i, j] > best:
                                best, arg[r, c, p, q] = x[b, c, i, j], i * w + j
                    out[r, c, p, q] = best
    return out, arg


def _bilinear(h, w, y, x):
    """[(flat index, weight)] of Paddle's roi_align sample at (y, x); [] outside."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return []
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= h - 1:
        yl = yh = h - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xl = xh = w - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    hy, hx = 1 - ly, 1 - lx
    return [(yl * w + xl, hy * hx), (yl * w + xh, hy * lx), (yh * w + xl, ly * hx),
            (yh * w + xh, ly * lx)]


def _align_samples(roi, ph, pw, ss, ratio, h, w):
    xmin, ymin, xmax, ymax = (float(v) * ss for v in roi)
    rw, rh = max(xmax - xmin, 1.0), max(ymax - ymin, 1.0)
    bh, bw = rh / ph, rw / pw
    gh = ratio if ratio > 0 else math.ceil(rh / ph)
    gw = ratio if ratio > 0 else math.ceil(rw / pw)
    for p in range(ph):
        for q in range(pw):
            pts = []
            for iy in range(gh):
                y = ymin + p * bh + (iy + 0.5) * bh / gh
                for ix in range(gw):
                    xx = xmin + q * bw + (ix + 0.5) * bw / gw
                    pts.append(_bilinear(h, w, y, xx))
            yield p, q, pts, gh * gw


def ref_roi_align(x, rois, offsets, ph, pw, ss, ratio, dout=None):
    n_, c_, h, w = x.shape
    out = np.zeros((len(rois), c_, ph, pw))
    dx = np.zeros_like(x)
    for r, b in enumerate(_batch_of(offsets)):
        for p, q, pts, count in _align_samples(rois[r], ph, pw, ss, ratio, h, w):
            for c in range(c_):
                plane = x[b, c].reshape(-1)
                out[r, c, p, q] = sum(wt * plane[i] for s in pts for i, wt in s) / count
                if dout is not None:
                    g = dx[b, c].reshape(-1)
                    for s in pts:
                        for i, wt in s:
                            g[i] += dout[r, c, p, q] * wt / count
    return out, dx


def ref_psroi_pool(x, rois, offsets, oc, ph, pw, ss, dout=None):
    n_, c_, h, w = x.shape
    out = np.zeros((len(rois), oc, ph, pw))
    dx = np.zeros_like(x)
    for r, b in enumerate(_batch_of(offsets)):
        sw = _cround(rois[r][0]) * ss
        sh = _cround(rois[r][1]) * ss
        ew = (_cround(rois[r][2]) + 1.0) * ss
        eh = (_cround(rois[r][3]) + 1.0) * ss
        rh, rw = max(eh - sh, 0.1), max(ew - sw, 0.1)
        bh, bw = rh / ph, rw / pw
        for c in range(oc):
            for p in range(ph):
                for q in range(pw):
                    hs = min(max(math.floor(p * bh + sh), 0), h)
                    ws = min(max(math.floor(q * bw + sw), 0), w)
                    he = min(max(math.ceil((p + 1) * bh + sh), 0), h)
                    we = min(max(math.ceil((q + 1) * bw + sw), 0), w)
                    ch = (c * ph + p) * pw + q
                    if he <= hs or we <= ws:
                        continue
                    area = (he - hs) * (we - ws)
                    out[r, c, p, q] = x[b, ch, hs:he, ws:we].sum() / area
                    if dout is not None:
                        dx[b, ch, hs:he, ws:we] += dout[r, c, p, q] / area
    return out, dx


def _cell_terms(s_h, s_w, y0, x0, y1, x1):
    """PrRoIPoolingMatCalculation's four (row, col, weight) terms of one cell."""
    def f(a, la):
        return la - 0.5 * la * la - a + 0.5 * a * a

    e_h, e_w = s_h + 1, s_w + 1
    return [(s_h, s_w, f(x0 - s_w, x1 - s_w) * f(y0 - s_h, y1 - s_h)),
            (s_h, e_w, f(e_w - x1, e_w - x0) * f(y0 - s_h, y1 - s_h)),
            (e_h, s_w, f(x0 - s_w, x1 - s_w) * f(e_h - y1, e_h - y0)),
            (e_h, e_w, f(e_w - x1, e_w - x0) * f(e_h - y1, e_h - y0))]


def ref_prroi_pool(x, rois, offsets, ph, pw, ss, dout=None):
    n_, c_, h, w = x.shape
    out = np.zeros((len(rois), c_, ph, pw))
    dx = np.zeros_like(x)
    for r, b in enumerate(_batch_of(offsets)):
        sw, sh, ew, eh = (float(v) * ss for v in rois[r])
        rw, rh = max(ew - sw, 0.0), max(eh - sh, 0.0)
        bh, bw = rh / ph, rw / pw
        size = max(0.0, bw * bh)
        for c in range(c_):
            for p in range(ph):
                for q in range(pw):
                    ys, xs = p * bh + sh, q * bw + sw
                    ye, xe = ys + bh, xs + bw
                    if size <= 0:
                        continue
                    total = 0.0
                    for wi in range(math.floor(xs), math.ceil(xe)):
                        for hi in range(math.floor(ys), math.ceil(ye)):
                            for i, j, wt in _cell_terms(hi, wi, max(ys, hi), max(xs, wi),
                                                        min(ye, hi + 1.0), min(xe, wi + 1.0)):
                                if 0 <= i < h and 0 <= j < w:
                                    total += x[b, c, i, j] * wt
                                    if dout is not None:
                                        dx[b, c, i, j] += dout[r, c, p, q] / size * wt
                    out[r, c, p, q] = total / size
    return out, dx


def _make_rois(rng, batch, h, w, ss, ph, pw, integer):
    """Paddle's tests' ROIs: image ``bno`` gets ``bno + 1`` ROIs at least a bin wide."""
    rois, offsets = [], [0]
    for bno in range(batch):
        for _ in range(bno + 1):
            draw = rng.integers if integer else rng.uniform
            x1 = draw(0, w // ss - pw)
            y1 = draw(0, h // ss - ph)
            x2 = draw(x1 + pw, w // ss)
            y2 = draw(y1 + ph, h // ss)
            rois.append([x1, y1, x2, y2])
        offsets.append(len(rois))
    return np.array(rois, np.float64), tuple(offsets)


def _lod(offsets):
    return {"_lods": {"ROIs": [(tuple(offsets),)]}}


# ---------------------------------------------------------------------------------------------
# roi_pool


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_roi_pool_matches_the_kernel_loops(seed):
    # test_roi_pool_op.py: batch 3, channels 3, 6 x 4, spatial_scale 1/4, 2 x 2 bins
    rng = np.random.default_rng(seed)
    x = rng.random((3, 3, 6, 4))
    rois, offsets = _make_rois(rng, 3, 6, 4, 0.25, 2, 2, integer=True)
    attrs = {"pooled_height": 2, "pooled_width": 2, "spatial_scale": 0.25, **_lod(offsets)}
    res = run_op("roi_pool", {"X": [x], "ROIs": [rois]}, attrs)
    want, arg = ref_roi_pool(x, rois, offsets, 2, 2, 0.25)
    np.testing.assert_array_equal(res["Out"][0], want)
    np.testing.assert_array_equal(res["Argmax"][0], arg)
    assert res["Argmax"][0].dtype == np.int64
    dout = rng.standard_normal(want.shape)
    g = run_op("roi_pool_grad", {"X": [x], "ROIs": [rois], "Argmax": [arg],
                                 "Out@GRAD": [dout]}, attrs)["X@GRAD"][0]
    dx = np.zeros_like(x)
    for r, b in enumerate(_batch_of(offsets)):
        for c in range(3):
            for p in range(2):
                for q in range(2):
                    if arg[r, c, p, q] >= 0:
                        dx[b, c].reshape(-1)[arg[r, c, p, q]] += dout[r, c, p, q]
    np.testing.assert_allclose(g, dx, rtol=1e-12)


def test_roi_pool_rounding_ties_empty_bins_and_float32():
    x = np.zeros((1, 1, 5, 5), np.float32)
    x[0, 0, 1, 2] = x[0, 0, 2, 1] = 3.0  # a tie: the row-major first wins
    # 2.5 rounds away from zero to 3 (numpy's round would give 2); the second ROI starts
    # right of the map: all its bins are empty
    rois = np.array([[0.5, 0.5, 2.5, 2.5], [6.0, 0.0, 9.0, 3.0]], np.float32)
    attrs = {"pooled_height": 1, "pooled_width": 1, **_lod((0, 2))}
    res = run_op("roi_pool", {"X": [x], "ROIs": [rois]}, attrs)
    assert res["Out"][0].dtype == np.float32
    np.testing.assert_array_equal(res["Out"][0].reshape(-1), [3.0, 0.0])
    np.testing.assert_array_equal(res["Argmax"][0].reshape(-1), [1 * 5 + 2, -1])
    x2 = np.random.default_rng(3).standard_normal((1, 2, 7, 9)).astype(np.float32)
    rois2 = np.array([[0.0, 0.0, 6.0, 8.0], [1.0, 2.0, 7.0, 6.0]], np.float32)
    for ph, pw in ((3, 3), (3, 7), (7, 2)):
        a = {"pooled_height": ph, "pooled_width": pw, **_lod((0, 2))}
        got = run_op("roi_pool", {"X": [x2], "ROIs": [rois2]}, a)
        want, arg = ref_roi_pool(x2.astype(np.float64), rois2, (0, 2), ph, pw, 1.0)
        np.testing.assert_array_equal(got["Out"][0], want.astype(np.float32))
        np.testing.assert_array_equal(got["Argmax"][0], arg)


def test_roi_pool_takes_rois_lod_tensor_and_missing_grad_is_zero():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 6, 5))
    rois = np.array([[0.0, 0.0, 3.0, 4.0], [1.0, 1.0, 4.0, 5.0], [2.0, 0.0, 4.0, 2.0]])
    a = {"pooled_height": 2, "pooled_width": 2}
    via_lod = run_op("roi_pool", {"X": [x], "ROIs": [rois]}, {**a, **_lod((0, 1, 3))})
    via_tensor = run_op("roi_pool", {"X": [x], "ROIs": [rois],
                                     "RoisLod": [np.array([0, 1, 3], np.int64)]}, a)
    np.testing.assert_array_equal(via_lod["Out"][0], via_tensor["Out"][0])
    g = run_op("roi_pool_grad", {"X": [x], "ROIs": [rois], "Argmax": via_lod["Argmax"],
                                 "Out@GRAD": [None]}, {**a, **_lod((0, 1, 3))})
    np.testing.assert_array_equal(g["X@GRAD"][0], np.zeros_like(x))


# ---------------------------------------------------------------------------------------------
# roi_align


@pytest.mark.parametrize("ratio, ss, ph, pw", [(-1, 0.5, 2, 2), (2, 0.5, 2, 3), (-1, 1.0, 3, 2)])
def test_roi_align_matches_the_kernel_loops(ratio, ss, ph, pw):
    # test_roi_align_op.py: batch 3, channels 3, 8 x 6, spatial_scale 1/2, 2 x 2 bins
    rng = np.random.default_rng(7)
    x = rng.random((3, 3, 8, 6))
    rois, offsets = _make_rois(rng, 3, 8, 6, ss, ph, pw, integer=False)
    rois[0] = [-3.0, -2.5, 5.0, 19.0]  # reaches outside: the [-1, H] rule and the clamping
    attrs = {"pooled_height": ph, "pooled_width": pw, "spatial_scale": ss,
             "sampling_ratio": ratio, **_lod(offsets)}
    got = run_op("roi_align", {"X": [x], "ROIs": [rois]}, attrs)["Out"][0]
    dout = rng.standard_normal(got.shape)
    want, dx = ref_roi_align(x, rois, offsets, ph, pw, ss, ratio, dout)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    g = run_op("roi_align_grad", {"X": [x], "ROIs": [rois], "Out@GRAD": [dout]}, attrs)
    np.testing.assert_allclose(g["X@GRAD"][0], dx, rtol=1e-12, atol=1e-14)


def test_roi_align_float32_small_roi_is_one_pixel():
    x = np.arange(20, dtype=np.float32).reshape(1, 1, 4, 5)
    # a degenerate ROI is widened to 1 x 1: one sample at its centre (x 1.5, y 2.5)
    rois = np.array([[1.0, 2.0, 1.0, 2.0]], np.float32)
    out = run_op("roi_align", {"X": [x], "ROIs": [rois]}, _lod((0, 1)))["Out"][0]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.reshape(-1), [2.5 * 5 + 1.5])


# ---------------------------------------------------------------------------------------------
# psroi_pool


@pytest.mark.parametrize("seed", [0, 1])
def test_psroi_pool_matches_the_kernel_loops(seed):
    # test_psroi_pool_op.py: batch 3, channels 3·2·2, 6 x 4, spatial_scale 1/4, 2 x 2 bins
    rng = np.random.default_rng(seed)
    x = rng.random((3, 12, 6, 4))
    rois, offsets = _make_rois(rng, 3, 6, 4, 0.25, 2, 2, integer=True)
    rois[-1] = [-5.4, 10.6, 30.0, 40.0]  # clipped bins, one empty
    attrs = {"output_channels": 3, "pooled_height": 2, "pooled_width": 2,
             "spatial_scale": 0.25, **_lod(offsets)}
    got = run_op("psroi_pool", {"X": [x], "ROIs": [rois]}, attrs)["Out"][0]
    dout = rng.standard_normal(got.shape)
    want, dx = ref_psroi_pool(x, rois, offsets, 3, 2, 2, 0.25, dout)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    g = run_op("psroi_pool_grad", {"X": [x], "ROIs": [rois], "Out@GRAD": [dout]}, attrs)
    np.testing.assert_allclose(g["X@GRAD"][0], dx, rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# prroi_pool


def test_prroi_pool_matches_the_kernel_loops_with_lod_and_batch_roi_nums():
    # test_prroi_pool_op.py: batch 3, channels 12, 12 x 16, spatial_scale 1/2, 4 x 4 bins
    rng = np.random.default_rng(11)
    x = rng.random((3, 4, 12, 16))
    rois, offsets = _make_rois(rng, 3, 12, 16, 0.5, 4, 4, integer=False)
    rois[1] = [20.3, -3.1, 40.2, 30.5]  # past the map: zeros outside
    attrs = {"pooled_height": 4, "pooled_width": 4, "spatial_scale": 0.5}
    got = run_op("prroi_pool", {"X": [x], "ROIs": [rois]}, {**attrs, **_lod(offsets)})["Out"][0]
    dout = rng.standard_normal(got.shape)
    want, dx = ref_prroi_pool(x, rois, offsets, 4, 4, 0.5, dout)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    counts = np.diff(offsets).astype(np.int64)
    by_counts = run_op("prroi_pool", {"X": [x], "ROIs": [rois], "BatchRoINums": [counts]},
                       attrs)["Out"][0]
    np.testing.assert_allclose(by_counts, want, rtol=1e-10)
    g = run_op("prroi_pool_grad", {"X": [x], "ROIs": [rois], "Out": [got],
                                   "Out@GRAD": [dout]}, {**attrs, **_lod(offsets)})
    np.testing.assert_allclose(g["X@GRAD"][0], dx, rtol=1e-10, atol=1e-14)
    assert g["ROIs@GRAD"][0].shape == rois.shape


def test_prroi_pool_of_a_constant_map_is_the_constant_and_empty_roi_is_zero():
    x = np.full((1, 1, 5, 5), 2.0)
    rois = np.array([[0.5, 0.5, 3.5, 3.0], [1.0, 1.0, 1.0, 3.0]])
    out = run_op("prroi_pool", {"X": [x], "ROIs": [rois]},
                 {"pooled_height": 2, "pooled_width": 2, **_lod((0, 2))})["Out"][0]
    np.testing.assert_allclose(out[0], 2.0)
    np.testing.assert_array_equal(out[1], 0.0)


def test_prroi_pool_grad_computes_only_what_is_asked():
    x = np.ones((1, 1, 4, 4))
    rois = np.array([[0.5, 0.5, 2.5, 2.5]])
    ins = {"X": [x], "ROIs": [rois], "Out@GRAD": [np.ones((1, 1, 1, 1))]}
    res = run_op("prroi_pool_grad", ins, _lod((0, 1)), outs=("X@GRAD",))
    assert set(res) == {"X@GRAD"}
    res = run_op("prroi_pool_grad", ins, _lod((0, 1)), outs=("ROIs@GRAD",))
    assert set(res) == {"ROIs@GRAD"}
    # a constant map: moving the ROI does not change the average
    np.testing.assert_allclose(res["ROIs@GRAD"][0], 0.0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# errors


def test_errors_name_the_problem():
    x = np.zeros((2, 3, 4, 4))
    rois = np.array([[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 2.0, 2.0]])
    lod = _lod((0, 1, 2))
    with pytest.raises(ValueError, match="Input\\(X\\) must be 4-D NCHW"):
        run_op("roi_pool", {"X": [x[0]], "ROIs": [rois]}, lod)
    with pytest.raises(ValueError, match="shape \\[num_rois, 4\\].*got shape \\[2, 5\\]"):
        run_op("roi_align", {"X": [x], "ROIs": [np.zeros((2, 5))]}, lod)
    with pytest.raises(ValueError, match="pooled_height and pooled_width must be greater"):
        run_op("roi_align", {"X": [x], "ROIs": [rois]}, {"pooled_height": 0, **lod})
    with pytest.raises(ValueError, match="spatial_scale must be greater than 0, got -1"):
        run_op("prroi_pool", {"X": [x], "ROIs": [rois]}, {"spatial_scale": -1.0, **lod})
    with pytest.raises(ValueError, match="roi_pool: Input\\(ROIs\\) has no LoD"):
        run_op("roi_pool", {"X": [x], "ROIs": [rois]}, {"_lods": {}})
    with pytest.raises(ValueError, match="ROIs for 1 images but Input\\(X\\) has a batch of 2"):
        run_op("roi_align", {"X": [x], "ROIs": [rois]}, _lod((0, 2)))
    with pytest.raises(ValueError, match="covers 3 ROIs .* but Input\\(ROIs\\) has 2 rows"):
        run_op("psroi_pool", {"X": [x], "ROIs": [rois]}, {"output_channels": 3, **_lod((0, 1, 3))})
    with pytest.raises(ValueError, match="the 3 channels of Input\\(X\\) must equal "
                                         "output_channels × pooled_height × pooled_width"):
        run_op("psroi_pool", {"X": [x], "ROIs": [rois]},
               {"output_channels": 1, "pooled_height": 2, **lod})
    with pytest.raises(ValueError, match="Input\\(BatchRoINums\\) is not given"):
        run_op("prroi_pool", {"X": [x], "ROIs": [rois]}, {"_lods": {}})
    with pytest.raises(ValueError, match="Input\\(BatchRoINums\\) gives ROIs for 1 images"):
        run_op("prroi_pool", {"X": [x], "ROIs": [rois],
                              "BatchRoINums": [np.array([2], np.int64)]}, {"_lods": {}})
    with pytest.raises(ValueError, match="Input\\(RoisLod\\) covers 1 ROIs"):
        run_op("roi_pool", {"X": [x], "ROIs": [rois],
                            "RoisLod": [np.array([0, 1, 1], np.int64)]}, {"_lods": {}})
