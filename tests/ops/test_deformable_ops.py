"""The deformable convolution kernels (deformable_conv, deformable_conv_v1) against explicit
loops written after Paddle's reference in ``test_deformable_conv_op.py`` (one output element
and one bilinear sample at a time, with DmcnIm2colBilinear's border rule), zero offsets
against conv2d, hand-worked border samples, a gradient against the loop reference's own
finite differences, and the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from . import conv2d_by_loops, run_op


def _bilinear(img, h, w):
    """One sample as DmcnIm2colBilinear: each neighbour counts only inside the image."""
    height, width = img.shape
    h0, w0 = math.floor(h), math.floor(w)
    total = 0.0
    for yy, xx, wt in ((h0, w0, (1 - (h - h0)) * (1 - (w - w0))),
                       (h0, w0 + 1, (1 - (h - h0)) * (w - w0)),
                       (h0 + 1, w0, (h - h0) * (1 - (w - w0))),
                       (h0 + 1, w0 + 1, (h - h0) * (w - w0))):
        if 0 <= yy < height and 0 <= xx < width:
            total += wt * img[yy, xx]
    return total


def ref_deformable_conv(x, offset, mask, filt, stride, pad, dil, groups, dg):
    n_, c_, h_, w_ = x.shape
    m_, cpg, kh, kw = filt.shape
    oh = (h_ + 2 * pad[0] - (dil[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (w_ + 2 * pad[1] - (dil[1] * (kw - 1) + 1)) // stride[1] + 1
    out = np.zeros((n_, m_, oh, ow))
    for b in range(n_):
        for f in range(m_):
            grp = f // (m_ // groups)
            for oy in range(oh):
                for ox in range(ow):
                    acc = 0.0
                    for ci in range(cpg):
                        ch = grp * cpg + ci
                        dgi = ch // (c_ // dg)
                        for i in range(kh):
                            for j in range(kw):
                                t = i * kw + j
                                hh = (oy * stride[0] - pad[0] + i * dil[0]
                                      + offset[b, dgi * 2 * kh * kw + 2 * t, oy, ox])
                                ww = (ox * stride[1] - pad[1] + j * dil[1]
                                      + offset[b, dgi * 2 * kh * kw + 2 * t + 1, oy, ox])
                                val = 0.0
                                if -1 < hh < h_ and -1 < ww < w_:
                                    val = _bilinear(x[b, ch], hh, ww)
                                if mask is not None:
                                    val *= mask[b, dgi * kh * kw + t, oy, ox]
                                acc += filt[f, ci, i, j] * val
                    out[b, f, oy, ox] = acc
    return out


CASES = [
    # (input shape, filter shape, strides, paddings, dilations, groups, deformable_groups)
    ((2, 4, 5, 5), (4, 2, 2, 2), (1, 1), (1, 1), (1, 1), 2, 2),
    ((1, 3, 6, 5), (2, 3, 3, 3), (2, 1), (1, 0), (1, 2), 1, 1),
    ((1, 4, 4, 4), (4, 4, 1, 1), (1, 1), (0, 0), (1, 1), 1, 4),
]


def _inputs(rng, xs, fs, stride, pad, dil, dg, scale=1.5):
    kh, kw = fs[2:]
    oh = (xs[2] + 2 * pad[0] - (dil[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (xs[3] + 2 * pad[1] - (dil[1] * (kw - 1) + 1)) // stride[1] + 1
    x = rng.standard_normal(xs)
    offset = rng.uniform(-scale, scale, (xs[0], 2 * dg * kh * kw, oh, ow))
    mask = rng.uniform(0, 1, (xs[0], dg * kh * kw, oh, ow))
    filt = rng.standard_normal(fs)
    return x, offset, mask, filt


def _attrs(stride, pad, dil, groups, dg):
    return {"strides": list(stride), "paddings": list(pad), "dilations": list(dil),
            "groups": groups, "deformable_groups": dg, "im2col_step": 1}


@pytest.mark.parametrize("case", CASES)
def test_deformable_conv_matches_loops(case):
    xs, fs, stride, pad, dil, groups, dg = case
    rng = np.random.default_rng(1)
    x, offset, mask, filt = _inputs(rng, xs, fs, stride, pad, dil, dg)
    attrs = _attrs(stride, pad, dil, groups, dg)
    got = run_op("deformable_conv", {"Input": [x], "Offset": [offset], "Mask": [mask],
                                     "Filter": [filt]}, attrs)["Output"][0]
    want = ref_deformable_conv(x, offset, mask, filt, stride, pad, dil, groups, dg)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    got1 = run_op("deformable_conv_v1", {"Input": [x], "Offset": [offset], "Filter": [filt]},
                  attrs)["Output"][0]
    want1 = ref_deformable_conv(x, offset, None, filt, stride, pad, dil, groups, dg)
    np.testing.assert_allclose(got1, want1, rtol=1e-10, atol=1e-12)


def test_zero_offsets_and_unit_mask_are_conv2d_and_float32_stays():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    filt = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    offset = np.zeros((2, 2 * 6, 3, 5), np.float32)
    mask = np.ones((2, 6, 3, 5), np.float32)
    attrs = {"strides": [2, 1], "paddings": [1, 0], "dilations": [1, 1], "groups": 2}
    got = run_op("deformable_conv", {"Input": [x], "Offset": [offset], "Mask": [mask],
                                     "Filter": [filt]}, attrs)["Output"][0]
    want, _, _ = conv2d_by_loops(x.astype(np.float64), filt.astype(np.float64), (2, 1),
                                 (1, 1, 0, 0), (1, 1), 2)
    assert got.dtype == np.float32 and got.shape == (2, 6, 3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_border_samples_follow_paddles_rule():
    # a 1x1 identity filter: the output is the sample itself
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    filt = np.ones((1, 1, 1, 1))
    offset = np.zeros((1, 2, 2, 2))
    offset[0, :, 0, 0] = [-0.5, 0.0]    # h = -0.5: half of row 0
    offset[0, :, 0, 1] = [-1.0, 0.0]    # h = -1: outside (needs h > -1)
    offset[0, :, 1, 0] = [0.5, 0.25]    # h = 1.5, w = 0.25: half of row 1, mixed columns
    offset[0, :, 1, 1] = [0.0, 0.75]    # w = 1.75 < W: a quarter of column 1 only
    got = run_op("deformable_conv_v1", {"Input": [x], "Offset": [offset],
                                        "Filter": [filt]})["Output"][0]
    want = [[0.5 * 1.0, 0.0], [0.5 * (0.75 * 3 + 0.25 * 4), 0.25 * 4.0]]
    np.testing.assert_allclose(got[0, 0], want)


def test_grad_matches_loop_reference_differences():
    rng = np.random.default_rng(3)
    xs, fs, stride, pad, dil, groups, dg = CASES[0]
    x, offset, mask, filt = _inputs(rng, xs, fs, stride, pad, dil, dg, scale=0.9)
    offset = np.floor(offset) + rng.uniform(0.2, 0.8, offset.shape)  # off the grid
    attrs = _attrs(stride, pad, dil, groups, dg)
    dout = rng.standard_normal((2, 4, 6, 6))
    grads = run_op("deformable_conv_grad",
                   {"Input": [x], "Offset": [offset], "Mask": [mask], "Filter": [filt],
                    "Output@GRAD": [dout]}, attrs)
    eps = 1e-6
    for slot, arr in (("Offset", offset), ("Mask", mask)):
        idx = [tuple(rng.integers(0, s) for s in arr.shape) for _ in range(6)]
        for k in idx:
            plus, minus = arr.copy(), arr.copy()
            plus[k] += eps
            minus[k] -= eps
            args = {"Offset": offset, "Mask": mask}
            vals = []
            for a in (plus, minus):
                args[slot] = a
                vals.append((ref_deformable_conv(x, args["Offset"], args["Mask"], filt,
                                                 stride, pad, dil, groups, dg) * dout).sum())
            numeric = (vals[0] - vals[1]) / (2 * eps)
            assert grads[slot + "@GRAD"][0][k] == pytest.approx(numeric, rel=1e-5, abs=1e-7)
    # only what is asked is computed
    only = run_op("deformable_conv_grad",
                  {"Input": [x], "Offset": [offset], "Mask": [mask], "Filter": [filt],
                   "Output@GRAD": [dout]}, attrs, outs=("Filter@GRAD",))
    assert set(only) == {"Filter@GRAD"}
    np.testing.assert_allclose(only["Filter@GRAD"][0], grads["Filter@GRAD"][0])
    none = run_op("deformable_conv_v1_grad",
                  {"Input": [x], "Offset": [offset], "Filter": [filt], "Output@GRAD": [None]},
                  attrs, outs=("Input@GRAD", "Offset@GRAD"))
    assert not none["Input@GRAD"][0].any() and none["Offset@GRAD"][0].shape == offset.shape


def test_errors():
    x = np.zeros((2, 4, 5, 5))
    filt = np.zeros((4, 2, 3, 3))
    offset = np.zeros((2, 18, 3, 3))
    mask = np.zeros((2, 9, 3, 3))
    base = {"Input": [x], "Offset": [offset], "Mask": [mask], "Filter": [filt]}
    with pytest.raises(ValueError, match="Input's channels \\(4\\) must equal Filter's "
                                         "channels \\(2\\) times groups \\(1\\)"):
        run_op("deformable_conv", base)
    with pytest.raises(ValueError, match="Offset must have shape \\[2, 36, 3, 3\\]"):
        run_op("deformable_conv", base, {"groups": 2, "deformable_groups": 2})
    with pytest.raises(ValueError, match="Mask must have shape \\[2, 9, 5, 5\\]"):
        run_op("deformable_conv", {**base, "Offset": [np.zeros((2, 18, 5, 5))]},
               {"groups": 2, "paddings": [1, 1]})
    with pytest.raises(ValueError, match="multiples of deformable_groups \\(3\\)"):
        run_op("deformable_conv", base, {"groups": 2, "deformable_groups": 3})
    with pytest.raises(ValueError, match="batch size \\(3\\) must be at most or a multiple "
                                         "of im2col_step \\(2\\)"):
        run_op("deformable_conv_v1", {"Input": [np.zeros((3, 4, 5, 5))],
                                      "Offset": [np.zeros((3, 18, 3, 3))], "Filter": [filt]},
               {"groups": 2, "im2col_step": 2})
    with pytest.raises(ValueError, match="strides must be 2 ints >= 1"):
        run_op("deformable_conv", base, {"groups": 2, "strides": [0, 1]})
    with pytest.raises(ValueError, match="leaves no output"):
        run_op("deformable_conv_v1", {"Input": [np.zeros((1, 4, 2, 2))],
                                      "Offset": [offset[:1]], "Filter": [filt]}, {"groups": 2})


# ---------------------------------------------------------------------------------------------
# deformable_psroi_pooling: loops after DeformablePSROIPoolForwardCPUKernel and its backward


def _cr(v):
    return math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)


def ref_dpsroi(x, rois, batch, trans, no_trans, scale, od, grp, ph_, pw_, part, spp, std,
               dout=None):
    n_, c_, h_, w_ = x.shape
    r_ = len(rois)
    classes = 1 if no_trans else trans.shape[1] // 2
    each = od // classes
    out = np.zeros((r_, od, ph_, pw_))
    cnt = np.zeros_like(out)
    dx = np.zeros_like(x)
    dtr = None if trans is None else np.zeros_like(trans)
    for r in range(r_):
        x1, y1, x2, y2 = (_cr(v) for v in rois[r])
        sw, sh = x1 * scale - 0.5, y1 * scale - 0.5
        rw = max((x2 + 1) * scale - 0.5 - sw, 0.1)
        rh = max((y2 + 1) * scale - 0.5 - sh, 0.1)
        bh, bw = rh / ph_, rw / pw_
        for o in range(od):
            for p in range(ph_):
                for q in range(pw_):
                    parth = math.floor(p / ph_ * part[0])
                    partw = math.floor(q / pw_ * part[1])
                    k = o // each
                    tx = 0.0 if no_trans else trans[r, 2 * k, parth, partw] * std
                    ty = 0.0 if no_trans else trans[r, 2 * k + 1, parth, partw] * std
                    ws, hs = q * bw + sw + tx * rw, p * bh + sh + ty * rh
                    gw = min(max(math.floor(q * grp[1] / pw_), 0), grp[1] - 1)
                    gh = min(max(math.floor(p * grp[0] / ph_), 0), grp[0] - 1)
                    ch = (o * grp[0] + gh) * grp[1] + gw
                    img = x[batch[r], ch]
                    pts = []
                    for ih in range(spp):
                        for iw in range(spp):
                            ww, hh = ws + iw * bw / spp, hs + ih * bh / spp
                            if ww < -0.5 or ww > w_ - 0.5 or hh < -0.5 or hh > h_ - 0.5:
                                continue
                            pts.append((min(max(hh, 0.0), h_ - 1.0), min(max(ww, 0.0), w_ - 1.0)))
                    total = 0.0
                    for hh, ww in pts:
                        a0, a1 = math.floor(ww), math.ceil(ww)
                        b0, b1 = math.floor(hh), math.ceil(hh)
                        fx, fy = ww - a0, hh - b0
                        total += ((1 - fx) * (1 - fy) * img[b0, a0] + (1 - fx) * fy * img[b1, a0]
                                  + fx * (1 - fy) * img[b0, a1] + fx * fy * img[b1, a1])
                        if dout is not None:
                            g = dout[r, o, p, q] / len(pts)
                            dimg = dx[batch[r], ch]
                            dimg[b0, a0] += (1 - fx) * (1 - fy) * g
                            dimg[b1, a0] += (1 - fx) * fy * g
                            dimg[b0, a1] += fx * (1 - fy) * g
                            dimg[b1, a1] += fx * fy * g
                            if not no_trans:
                                u00, u01 = img[b0, a0], img[b1, a0]
                                u10, u11 = img[b0, a1], img[b1, a1]
                                dtr[r, 2 * k, parth, partw] += (
                                    (u11 * fy + u10 * (1 - fy) - u01 * fy - u00 * (1 - fy))
                                    * std * g * rw)
                                dtr[r, 2 * k + 1, parth, partw] += (
                                    (u11 * fx + u01 * (1 - fx) - u10 * fx - u00 * (1 - fx))
                                    * std * g * rh)
                    cnt[r, o, p, q] = len(pts)
                    out[r, o, p, q] = total / len(pts) if pts else 0.0
    return out, cnt, dx, dtr


DPS_ROIS = np.array([[0.4, 1.0, 4.6, 5.2], [2.0, 0.0, 5.0, 3.0], [1.0, 2.0, 2.0, 6.0],
                     [-3.0, -2.0, 9.0, 8.0]])
DPS_LOD = {"_lods": {"ROIs": [((0, 3, 4),)]}}


@pytest.mark.parametrize("no_trans,od,grp,pooled,part,spp,scale", [
    (False, 2, [2, 2], (2, 2), [2, 2], 2, 1.0),
    (False, 4, [1, 1], (3, 2), [3, 2], 3, 0.5),
    (True, 3, [1, 2], (2, 3), [2, 3], 2, 1.0),
])
def test_deformable_psroi_pooling_matches_loops(no_trans, od, grp, pooled, part, spp, scale):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, od * grp[0] * grp[1] + 1, 6, 7))
    trans = rng.uniform(-1.5, 1.5, (4, 4, *part))
    attrs = {"no_trans": no_trans, "spatial_scale": scale, "output_dim": od,
             "group_size": grp, "pooled_height": pooled[0], "pooled_width": pooled[1],
             "part_size": part, "sample_per_part": spp, "trans_std": 0.3, **DPS_LOD}
    ins = {"Input": [x], "ROIs": [DPS_ROIS], "Trans": [trans]}
    res = run_op("deformable_psroi_pooling", ins, attrs)
    dout = rng.standard_normal(res["Output"][0].shape)
    want, cnt, dx, dtr = ref_dpsroi(x, DPS_ROIS, [0, 0, 0, 1], trans, no_trans, scale, od, grp,
                                    *pooled, part, spp, 0.3, dout)
    np.testing.assert_allclose(res["Output"][0], want, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(res["TopCount"][0], cnt)
    assert (cnt < spp * spp).any()  # some samples fall outside and are dropped
    grads = run_op("deformable_psroi_pooling_grad",
                   {**ins, "TopCount": [res["TopCount"][0]], "Output@GRAD": [dout]}, attrs)
    np.testing.assert_allclose(grads["Input@GRAD"][0], dx, rtol=1e-10, atol=1e-12)
    if no_trans:
        assert not grads["Trans@GRAD"][0].any()
    else:
        np.testing.assert_allclose(grads["Trans@GRAD"][0], dtr, rtol=1e-10, atol=1e-12)


def test_deformable_psroi_pooling_errors():
    x = np.zeros((2, 4, 5, 5))
    trans = np.zeros((4, 2, 2, 2))
    base = {"Input": [x], "ROIs": [DPS_ROIS], "Trans": [trans]}
    attrs = {"output_dim": 1, "group_size": [2, 2], "pooled_height": 2, "pooled_width": 2,
             "part_size": [2, 2], **DPS_LOD}
    with pytest.raises(ValueError, match="Input has 4 channels, fewer than "
                                         "output_dim·group_h·group_w = 8"):
        run_op("deformable_psroi_pooling", base, {**attrs, "output_dim": 2})
    with pytest.raises(ValueError, match="part_size \\[3, 2\\] exceeds Trans's spatial size"):
        run_op("deformable_psroi_pooling", base, {**attrs, "part_size": [3, 2]})
    with pytest.raises(ValueError, match="has no LoD"):
        run_op("deformable_psroi_pooling", base, {**attrs, "_lods": {}})
    with pytest.raises(ValueError, match="gives ROIs for 1 images but Input\\(X\\) has a "
                                         "batch of 2"):
        run_op("deformable_psroi_pooling", base, {**attrs, "_lods": {"ROIs": [((0, 4),)]}})
    with pytest.raises(ValueError, match="output_dim \\(3\\) a multiple of classes"):
        run_op("deformable_psroi_pooling", {**base, "Input": [np.zeros((2, 12, 5, 5))],
                                            "Trans": [np.zeros((4, 4, 2, 2))]},
               {**attrs, "output_dim": 3})
