"""Kernel tests of dask_fluid/ops/detection_assign_ops.py: roi_perspective_transform against
an element-by-element port of Paddle 1.8's CPU kernel (roi_perspective_transform_op.cc)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_fluid.ops.registry import LOD_KEY

from . import run_op

EPS = 1e-4


def _ge(a, b):
    return a > b or abs(a - b) < EPS


def _le(a, b):
    return a < b or abs(a - b) < EPS


def _in_quad(x, y, qx, qy):
    for i in range(4):
        xs, ys, xe, ye = qx[i], qy[i], qx[(i + 1) % 4], qy[(i + 1) % 4]
        if abs(ys - ye) < EPS:
            if (abs(y - ys) < EPS and abs(y - ye) < EPS and _ge(x, min(xs, xe))
                    and _le(x, max(xs, xe))):
                return True
        else:
            ix = (y - ys) * (xe - xs) / (ye - ys) + xs
            if abs(ix - x) < EPS and _ge(y, min(ys, ye)) and _le(y, max(ys, ye)):
                return True
    count = 0
    for i in range(4):
        xs, ys, xe, ye = qx[i], qy[i], qx[(i + 1) % 4], qy[(i + 1) % 4]
        if abs(ys - ye) < EPS or _le(y, min(ys, ye)) or y - max(ys, ye) > EPS:
            continue
        ix = (y - ys) * (xe - xs) / (ye - ys) + xs
        if abs(ix - x) < EPS:
            return True
        count += ix - x > EPS
    return count % 2 == 1


def _matrix(qx, qy, th, tw):
    x0, x1, x2, x3 = qx
    y0, y1, y2, y3 = qy
    est_h = (math.hypot(x1 - x2, y1 - y2) + math.hypot(x3 - x0, y3 - y0)) / 2
    est_w = (math.hypot(x0 - x1, y0 - y1) + math.hypot(x2 - x3, y2 - y3)) / 2
    nh = max(2, th)
    nw = max(2, min(int(math.floor(est_w * (nh - 1) / est_h + 0.5)) + 1, tw))
    dx1, dx2, dx3 = x1 - x2, x3 - x2, x0 - x1 + x2 - x3
    dy1, dy2, dy3 = y1 - y2, y3 - y2, y0 - y1 + y2 - y3
    den = dx1 * dy2 - dx2 * dy1 + 1e-5
    a31 = (dx3 * dy2 - dx2 * dy3) / den / (nw - 1)
    a32 = (dx1 * dy3 - dx3 * dy1) / den / (nh - 1)
    return [(x1 - x0 + a31 * (nw - 1) * x1) / (nw - 1), (x3 - x0 + a32 * (nh - 1) * x3) / (nh - 1),
            x0, (y1 - y0 + a31 * (nw - 1) * y1) / (nw - 1),
            (y3 - y0 + a32 * (nh - 1) * y3) / (nh - 1), y0, a31, a32, 1.0]


def _corners(sx, sy, h, w):
    """[(row, col, weight)] of the bilinear sample at (sx, sy), as Paddle clamps it."""
    sx, sy = (0.0 if _ge(0, sx) else sx), (0.0 if _ge(0, sy) else sy)
    wf, hf = math.floor(sx), math.floor(sy)
    if wf >= w - 1:
        wf = wc = w - 1
        sx = float(wf)
    else:
        wc = wf + 1
    if hf >= h - 1:
        hf = hc = h - 1
        sy = float(hf)
    else:
        hc = hf + 1
    a, b = sx - wf, sy - hf
    return [(hf, wf, (1 - a) * (1 - b)), (hc, wf, (1 - a) * b), (hc, wc, a * b),
            (hf, wc, a * (1 - b))]


def reference(x, rois, offsets, th, tw, scale, dout=None):
    """(Out, Mask, TransformMatrix, dX) element by element."""
    n, c, h, w = x.shape
    r = len(rois)
    out = np.zeros((r, c, th, tw))
    mask = np.zeros((r, 1, th, tw), np.int32)
    mats = np.zeros((r, 9))
    dx = np.zeros_like(x)
    for b in range(n):
        for k in range(offsets[b], offsets[b + 1]):
            qx = [rois[k][2 * i] * scale for i in range(4)]
            qy = [rois[k][2 * i + 1] * scale for i in range(4)]
            m = _matrix(qx, qy, th, tw)
            mats[k] = m
            for i in range(th):
                for j in range(tw):
                    den = m[6] * j + m[7] * i + m[8]
                    sx = (m[0] * j + m[1] * i + m[2]) / den
                    sy = (m[3] * j + m[4] * i + m[5]) / den
                    if not _in_quad(sx, sy, qx, qy):
                        continue
                    if _ge(-0.5, sx) or _ge(sx, w - 0.5) or _ge(-0.5, sy) or _ge(sy, h - 0.5):
                        continue
                    mask[k, 0, i, j] = 1
                    for ch in range(c):
                        for row, col, wt in _corners(sx, sy, h, w):
                            out[k, ch, i, j] += wt * x[b, ch, row, col]
                            if dout is not None:
                                dx[b, ch, row, col] += wt * dout[k, ch, i, j]
    return out, mask, mats, dx


QUADS = np.array([[0.5, 0.8, 6.2, 1.1, 5.7, 5.3, 0.9, 4.6],     # a skewed quad inside
                  [2.0, 2.0, 9.0, 3.0, 10.5, 9.5, 1.0, 8.0],    # runs off the map
                  [1.2, 0.3, 4.8, 0.3, 4.8, 3.9, 1.2, 3.9],     # axis-aligned
                  [3.1, 1.0, 7.9, 2.4, 6.6, 6.8, 2.2, 5.1]])


@pytest.mark.parametrize("th, tw, scale", [(4, 5, 1.0), (3, 8, 0.5), (1, 1, 1.0), (6, 3, 0.8)])
def test_roi_perspective_transform_matches_loops(th, tw, scale):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 7, 8))
    offsets = (0, 1, 4)
    dout = rng.standard_normal((4, 3, th, tw))
    res = run_op("roi_perspective_transform", {"X": [x], "ROIs": [QUADS]},
                 {"transformed_height": th, "transformed_width": tw, "spatial_scale": scale,
                  "_lods": {"ROIs": [(offsets,)]}})
    out, mask, mats, dx = reference(x, QUADS, offsets, th, tw, scale, dout)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(res["Mask"][0], mask)
    assert res["Mask"][0].dtype == np.int32
    np.testing.assert_allclose(res["TransformMatrix"][0], mats, rtol=1e-10, atol=1e-12)
    assert res["Out2InIdx"][0].shape == (out.size, 4)
    assert res["Out2InIdx"][0].dtype == np.int32
    assert res["Out2InWeights"][0].shape == (out.size, 4)
    assert mask.any() and not mask.all() or th == 1
    g = run_op("roi_perspective_transform_grad",
               {"X": [x], "ROIs": [QUADS], "Out2InIdx": res["Out2InIdx"],
                "Out2InWeights": res["Out2InWeights"], "Out@GRAD": [dout]},
               {"transformed_height": th, "transformed_width": tw, "spatial_scale": scale})
    np.testing.assert_allclose(g["X@GRAD"][0], dx, rtol=1e-10, atol=1e-12)


def test_roi_perspective_transform_float32_and_lod():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 7, 8)).astype(np.float32)
    rois = QUADS[:2].astype(np.float32)
    res = run_op("roi_perspective_transform", {"X": [x], "ROIs": [rois]},
                 {"transformed_height": 4, "transformed_width": 4,
                  "_lods": {"ROIs": [((0, 2),)]}})
    assert res["Out"][0].dtype == np.float32 and res["Out"][0].shape == (2, 2, 4, 4)
    assert res["TransformMatrix"][0].dtype == np.float32
    assert res[LOD_KEY] == {"Out": [((0, 2),)]}
    out = reference(x.astype(np.float64), rois.astype(np.float64), (0, 2), 4, 4, 1.0)[0]
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-4, atol=1e-4)


def test_roi_perspective_transform_null_gradient():
    x = np.ones((1, 1, 7, 8))
    res = run_op("roi_perspective_transform", {"X": [x], "ROIs": [QUADS[:1]]},
                 {"transformed_height": 2, "transformed_width": 2,
                  "_lods": {"ROIs": [((0, 1),)]}})
    g = run_op("roi_perspective_transform_grad",
               {"X": [x], "ROIs": [QUADS[:1]], "Out2InIdx": res["Out2InIdx"],
                "Out2InWeights": res["Out2InWeights"], "Out@GRAD": [None]},
               {"transformed_height": 2, "transformed_width": 2})
    np.testing.assert_array_equal(g["X@GRAD"][0], np.zeros_like(x))


@pytest.mark.parametrize("x_shape, rois, attrs, match", [
    ((1, 4, 4), np.zeros((1, 8)), {}, "NCHW"),
    ((1, 1, 4, 4, 1), np.zeros((1, 8)), {}, "NCHW"),
    ((1, 1, 4, 4), np.zeros((1, 4)), {}, r"\(num_rois, 8\)"),
    ((1, 1, 4, 4), QUADS[:1], {"transformed_height": 0}, "greater than 0"),
    ((1, 1, 4, 4), QUADS[:1], {"spatial_scale": 0.0}, "spatial_scale"),
    ((2, 1, 4, 4), QUADS[:1], {}, "batch of 2"),
    ((1, 1, 4, 4), np.ones((1, 8)), {}, "zero estimated height"),
])
def test_roi_perspective_transform_errors(x_shape, rois, attrs, match):
    with pytest.raises(ValueError, match=match):
        run_op("roi_perspective_transform", {"X": [np.zeros(x_shape)], "ROIs": [rois]},
               {**attrs, "_lods": {"ROIs": [((0, 1),)]}})


def test_roi_perspective_transform_no_lod():
    with pytest.raises(ValueError, match="no LoD"):
        run_op("roi_perspective_transform", {"X": [np.zeros((1, 1, 4, 4))],
                                             "ROIs": [QUADS[:1]]}, {"_lods": {}})


# ---------------------------------------------------------------------------------------------
# rpn_target_assign: a scalar port of Paddle 1.8's rpn_target_assign_op.cc (use_random=False)

def _iou_px(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0]) + 1
    ih = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    area = (a[2] - a[0] + 1) * (a[3] - a[1] + 1) + (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    return inter / (area - inter)


def _delta(ex, gt):
    ew, eh = ex[2] - ex[0] + 1, ex[3] - ex[1] + 1
    gw, gh = gt[2] - gt[0] + 1, gt[3] - gt[1] + 1
    return [(gt[0] + gw / 2 - ex[0] - ew / 2) / ew, (gt[1] + gh / 2 - ex[1] - eh / 2) / eh,
            math.log(gw / ew), math.log(gh / eh)]


def rpn_reference(anchor, gt, crowd, gt_lod, im_info, batch, straddle, pos, neg, frac,
                  gt_labels=None):
    """Per image (loc, score, bbox, label, weight) lists, first-n sampling; with
    ``gt_labels`` (retinanet) a foreground's label is its best gt's."""
    res = []
    n_anchor = len(anchor)
    for i in range(len(gt_lod) - 1):
        h, w, scale = im_info[i]
        inside = [k for k in range(n_anchor) if straddle < 0 or (
            anchor[k][0] >= -straddle and anchor[k][1] >= -straddle
            and anchor[k][2] < w + straddle and anchor[k][3] < h + straddle)]
        kept = [j for j in range(gt_lod[i], gt_lod[i + 1]) if crowd[j] == 0]
        gts = [[v * scale for v in gt[j]] for j in kept]
        ov = [[_iou_px(anchor[k], g) for g in gts] for k in inside]
        col_max = [max(ov[r][j] for r in range(len(inside))) for j in range(len(gts))]
        fgs = [r for r in range(len(inside))
               if any(abs(ov[r][j] - col_max[j]) < 1e-5 for j in range(len(gts)))
               or (gts and max(ov[r]) >= pos)]
        sampling = frac > 0 and batch > 0  # otherwise Paddle keeps every candidate
        if sampling:
            fgs = fgs[:int(frac * batch)]
        label = {r: 1 for r in fgs}
        bgs = [r for r in range(len(inside)) if not gts or max(ov[r]) < neg]
        if sampling:
            bgs = bgs[:batch - len(fgs)]
        loc, weight = [], []
        for r in bgs:
            if label.get(r) == 1:
                loc.append(fgs[0])
                weight.append([0.0] * 4)
            label[r] = 0
        fg = sorted(r for r, v in label.items() if v == 1)
        bg = sorted(r for r, v in label.items() if v == 0)
        weight += [[1.0] * 4] * len(fg)
        loc += fg
        bbox = [_delta(anchor[inside[r]], gts[int(np.argmax(ov[r]))]) for r in loc]
        fg_lbl = [1 if gt_labels is None else gt_labels[kept[int(np.argmax(ov[r]))]]
                  for r in fg]
        res.append(([inside[r] + i * n_anchor for r in loc],
                    [inside[r] + i * n_anchor for r in fg + bg],
                    bbox, fg_lbl + [0] * len(bg), weight))
    return res


def _rpn_data(rng):
    xs, ys = np.meshgrid(np.arange(0, 40, 6.0), np.arange(0, 30, 6.0))
    anchor = []
    for size in (8.0, 14.0):
        anchor.append(np.stack([xs.ravel() - size / 2, ys.ravel() - size / 2,
                                xs.ravel() + size / 2, ys.ravel() + size / 2], axis=1))
    anchor = np.concatenate(anchor)
    gt = np.array([[2.0, 3.0, 12.5, 11.0], [20.0, 5.0, 31.0, 19.0], [5.0, 14.0, 16.0, 26.0],
                   [1.0, 1.0, 9.0, 8.0], [22.0, 12.0, 34.0, 24.0]])
    crowd = np.array([0, 1, 0, 0, 0], np.int32).reshape(-1, 1)
    im_info = np.array([[30.0, 40.0, 1.0], [28.0, 36.0, 0.9]])
    return anchor, gt, crowd, (0, 3, 5), im_info


@pytest.mark.parametrize("batch, straddle, frac", [(256, 0.0, 0.25), (12, 2.0, 0.5),
                                                   (20, -1.0, 0.25), (0, 0.0, 0.25)])
def test_rpn_target_assign_matches_loops(batch, straddle, frac):
    anchor, gt, crowd, lod, im_info = _rpn_data(np.random.default_rng(0))
    attrs = {"rpn_batch_size_per_im": batch, "rpn_straddle_thresh": straddle,
             "rpn_positive_overlap": 0.5, "rpn_negative_overlap": 0.3, "rpn_fg_fraction": frac,
             "use_random": False, "_lods": {"GtBoxes": [(lod,)], "IsCrowd": [(lod,)]}}
    res = run_op("rpn_target_assign", {"Anchor": [anchor], "GtBoxes": [gt],
                                       "IsCrowd": [crowd], "ImInfo": [im_info]}, attrs)
    ref = rpn_reference(anchor.tolist(), gt.tolist(), crowd.ravel().tolist(), lod,
                        im_info.tolist(), batch, straddle, 0.5, 0.3, frac)
    loc = [v for r in ref for v in r[0]]
    score = [v for r in ref for v in r[1]]
    np.testing.assert_array_equal(res["LocationIndex"][0], loc)
    np.testing.assert_array_equal(res["ScoreIndex"][0], score)
    np.testing.assert_allclose(res["TargetBBox"][0],
                               np.array([v for r in ref for v in r[2]]).reshape(-1, 4),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(res["TargetLabel"][0],
                                  np.array([v for r in ref for v in r[3]]).reshape(-1, 1))
    np.testing.assert_array_equal(res["BBoxInsideWeight"][0],
                                  np.array([v for r in ref for v in r[4]]).reshape(-1, 4))
    assert res["LocationIndex"][0].dtype == np.int32 and res["TargetLabel"][0].dtype == np.int32
    lods = res[LOD_KEY]
    locs = tuple(np.cumsum([0] + [len(r[0]) for r in ref]).tolist())
    scores = tuple(np.cumsum([0] + [len(r[1]) for r in ref]).tolist())
    assert lods["LocationIndex"] == [(locs,)] and lods["TargetBBox"] == [(locs,)]
    assert lods["ScoreIndex"] == [(scores,)] and lods["TargetLabel"] == [(scores,)]
    assert len(loc) > 0 and len(score) > len(loc)


def test_rpn_target_assign_fake_foreground():
    """A foreground anchor drawn again as background keeps a row pointing at the first
    foreground with inside weight 0 (Paddle's fg_fake)."""
    anchor = np.array([[0.0, 0.0, 9.0, 9.0], [0.0, 0.0, 3.0, 3.0], [20.0, 20.0, 29.0, 29.0]])
    gt = np.array([[0.0, 0.0, 9.0, 9.0], [40.0, 40.0, 49.0, 49.0]])
    attrs = {"rpn_batch_size_per_im": 10, "rpn_positive_overlap": 0.7,
             "rpn_negative_overlap": 0.3, "rpn_fg_fraction": 0.5, "use_random": False,
             "rpn_straddle_thresh": -1.0, "_lods": {"GtBoxes": [((0, 2),)],
                                                    "IsCrowd": [((0, 2),)]}}
    res = run_op("rpn_target_assign", {"Anchor": [anchor], "GtBoxes": [gt],
                                       "IsCrowd": [np.zeros((2, 1), np.int32)],
                                       "ImInfo": [np.array([[60.0, 60.0, 1.0]])]}, attrs)
    # gt 1 meets no anchor: every anchor ties its best (0), so all are fg, then bg 1 and 2
    ref = rpn_reference(anchor.tolist(), gt.tolist(), [0, 0], (0, 2), [[60.0, 60.0, 1.0]],
                        10, -1.0, 0.7, 0.3, 0.5)[0]
    np.testing.assert_array_equal(res["LocationIndex"][0], ref[0])
    np.testing.assert_array_equal(res["BBoxInsideWeight"][0], np.array(ref[4]))
    assert (res["BBoxInsideWeight"][0] == 0).any()


def test_rpn_target_assign_random_sampling():
    anchor, gt, crowd, lod, im_info = _rpn_data(np.random.default_rng(0))
    base = {"rpn_batch_size_per_im": 10, "rpn_straddle_thresh": -1.0,
            "rpn_positive_overlap": 0.5, "rpn_negative_overlap": 0.3, "rpn_fg_fraction": 0.3,
            "_lods": {"GtBoxes": [(lod,)], "IsCrowd": [(lod,)]}}
    ins = {"Anchor": [anchor], "GtBoxes": [gt], "IsCrowd": [crowd], "ImInfo": [im_info]}
    full = run_op("rpn_target_assign", ins, {**base, "rpn_batch_size_per_im": 100000,
                                             "rpn_fg_fraction": 1e-5, "use_random": False})
    a = run_op("rpn_target_assign", ins, {**base, "_rng": np.random.default_rng(5)})
    b = run_op("rpn_target_assign", ins, {**base, "_rng": np.random.default_rng(5)})
    c = run_op("rpn_target_assign", ins, {**base, "_rng": np.random.default_rng(6)})
    first = run_op("rpn_target_assign", ins, {**base, "use_random": False})
    for slot in ("LocationIndex", "ScoreIndex", "TargetBBox", "TargetLabel"):
        np.testing.assert_array_equal(a[slot][0], b[slot][0])
    assert any(not np.array_equal(a[s][0], v[s][0]) for v in (c, first)
               for s in ("ScoreIndex",))
    lod_s = a[LOD_KEY]["ScoreIndex"][0][0]
    assert all(0 < n <= 10 for n in np.diff(lod_s))
    lbl = a["TargetLabel"][0].ravel()
    fg_per_image = [int(lbl[s:e].sum()) for s, e in zip(lod_s[:-1], lod_s[1:], strict=True)]
    assert all(n <= 3 for n in fg_per_image)
    # every sampled background anchor is a background candidate
    bg_all = set(full["ScoreIndex"][0][full["TargetLabel"][0].ravel() == 0].tolist())
    assert set(a["ScoreIndex"][0][lbl == 0].tolist()) <= bg_all


@pytest.mark.parametrize("change, match", [
    ({"Anchor": [np.zeros((4, 3))]}, r"Input\(Anchor\) must be 2-D with 4 columns"),
    ({"ImInfo": [np.zeros((2,))]}, r"Input\(ImInfo\) must be \[N, 3\]"),
    ({"_lods": {"GtBoxes": [None], "IsCrowd": [((0, 2),)]}}, "needs 1 level of LoD"),
    ({"_lods": {"GtBoxes": [((0, 2),)], "IsCrowd": [((0, 1, 2),)]}}, "must equal GtBoxes'"),
])
def test_rpn_target_assign_errors(change, match):
    ins = {"Anchor": [np.zeros((4, 4))], "GtBoxes": [np.ones((2, 4))],
           "IsCrowd": [np.zeros((2, 1), np.int32)], "ImInfo": [np.ones((1, 3))]}
    attrs = {"_lods": {"GtBoxes": [((0, 2),)], "IsCrowd": [((0, 2),)]}}
    for k, v in change.items():
        (attrs if k == "_lods" else ins)[k] = v
    with pytest.raises(ValueError, match=match):
        run_op("rpn_target_assign", ins, attrs)


# ---------------------------------------------------------------------------------------------
# retinanet_target_assign: every anchor, no sampling, gt classes as labels

@pytest.mark.parametrize("pos, neg", [(0.5, 0.4), (0.35, 0.2)])
def test_retinanet_target_assign_matches_loops(pos, neg):
    anchor, gt, crowd, lod, im_info = _rpn_data(np.random.default_rng(0))
    labels = np.array([3, 1, 7, 2, 5], np.int32).reshape(-1, 1)
    attrs = {"positive_overlap": pos, "negative_overlap": neg,
             "_lods": {"GtBoxes": [(lod,)], "IsCrowd": [(lod,)], "GtLabels": [(lod,)]}}
    res = run_op("retinanet_target_assign", {"Anchor": [anchor], "GtBoxes": [gt],
                                             "GtLabels": [labels], "IsCrowd": [crowd],
                                             "ImInfo": [im_info]}, attrs)
    ref = rpn_reference(anchor.tolist(), gt.tolist(), crowd.ravel().tolist(), lod,
                        im_info.tolist(), -1, -1.0, pos, neg, -1.0,
                        gt_labels=labels.ravel().tolist())
    np.testing.assert_array_equal(res["LocationIndex"][0], [v for r in ref for v in r[0]])
    np.testing.assert_array_equal(res["ScoreIndex"][0], [v for r in ref for v in r[1]])
    np.testing.assert_allclose(res["TargetBBox"][0],
                               np.array([v for r in ref for v in r[2]]).reshape(-1, 4),
                               rtol=1e-12, atol=1e-12)
    got_lbl = res["TargetLabel"][0].ravel()
    np.testing.assert_array_equal(got_lbl, [v for r in ref for v in r[3]])
    assert {3, 7} <= set(got_lbl.tolist()) and 1 not in got_lbl  # gt 1 is crowd
    np.testing.assert_array_equal(res["BBoxInsideWeight"][0],
                                  np.array([v for r in ref for v in r[4]]).reshape(-1, 4))
    np.testing.assert_array_equal(res["ForegroundNumber"][0],
                                  [[len(r[0]) + 1] for r in ref])
    assert res["ForegroundNumber"][0].dtype == np.int32
    assert res[LOD_KEY]["ForegroundNumber"] == [((0, 1, 2),)]
    # no straddle filter: anchor 0 (x1 = -4, outside the image) is a candidate
    assert 0 in res["ScoreIndex"][0]


def test_retinanet_target_assign_label_lod_error():
    ins = {"Anchor": [np.zeros((4, 4))], "GtBoxes": [np.ones((2, 4))],
           "GtLabels": [np.ones((2, 1), np.int32)], "IsCrowd": [np.zeros((2, 1), np.int32)],
           "ImInfo": [np.ones((1, 3))]}
    attrs = {"_lods": {"GtBoxes": [((0, 2),)], "IsCrowd": [((0, 2),)],
                       "GtLabels": [((0, 1, 2),)]}}
    with pytest.raises(ValueError, match="LoD of GtLabels"):
        run_op("retinanet_target_assign", ins, attrs)


# ---------------------------------------------------------------------------------------------
# retinanet_detection_output: a scalar reference of retinanet_detection_output_op.cc

def _jacc(b1, b2):
    if b2[0] > b1[2] or b2[2] < b1[0] or b2[1] > b1[3] or b2[3] < b1[1]:
        return 0.0
    iw = min(b1[2], b2[2]) - max(b1[0], b2[0]) + 1
    ih = min(b1[3], b2[3]) - max(b1[1], b2[1]) + 1

    def area(b):
        return 0.0 if b[2] < b[0] or b[3] < b[1] else (b[2] - b[0] + 1) * (b[3] - b[1] + 1)

    return iw * ih / (area(b1) + area(b2) - iw * ih)


def rdo_reference(boxes, scores, anchors, info, thr, top_k, nms_t, keep, eta=1.0):
    out, lod = [], [0]
    for i in range(len(info)):
        h = math.floor(info[i][0] / info[i][2] + 0.5)
        w = math.floor(info[i][1] / info[i][2] + 0.5)
        per_class = {}
        for lvl in range(len(scores)):
            sc = scores[lvl][i]
            t = thr if lvl < len(scores) - 1 else 0.0
            cands = [(sc[a][c], a, c) for a in range(len(sc)) for c in range(len(sc[a]))
                     if sc[a][c] > t]
            cands.sort(key=lambda v: -v[0])  # stable: (a, c) order among ties
            if top_k > -1:
                cands = cands[:top_k]
            for s, a, c in cands:
                an, d = anchors[lvl][a], boxes[lvl][i][a]
                aw, ah = an[2] - an[0] + 1, an[3] - an[1] + 1
                cx, cy = d[0] * aw + an[0] + aw / 2, d[1] * ah + an[1] + ah / 2
                bw, bh = math.exp(d[2]) * aw, math.exp(d[3]) * ah
                box = [(cx - bw / 2) / info[i][2], (cy - bh / 2) / info[i][2],
                       (cx + bw / 2 - 1) / info[i][2], (cy + bh / 2 - 1) / info[i][2]]
                box = [max(min(v, (w if k % 2 == 0 else h) - 1), 0) for k, v in enumerate(box)]
                per_class.setdefault(c, []).append(box + [s])
        kept = []
        for c in sorted(per_class):
            dets = per_class[c]
            order = sorted(range(len(dets)), key=lambda k: -dets[k][4])
            sel, adaptive = [], nms_t
            for k in order:
                if all(_jacc(dets[k], dets[j]) <= adaptive for j in sel):
                    sel.append(k)
                    if eta < 1 and adaptive > 0.5:
                        adaptive *= eta
            kept += [(dets[k][4], c, dets[k]) for k in sel]
        kept.sort(key=lambda v: -v[0])
        if keep > -1:
            kept = kept[:keep]
        out += [[c + 1, d[4], *d[:4]] for _, c, d in kept]
        lod.append(len(out))
    return np.array(out).reshape(-1, 6), tuple(lod)


def _rdo_data(rng, n=2, classes=3):
    levels = []
    for m, size in ((12, 6.0), (5, 14.0)):
        cx = rng.uniform(0, 40, m)
        cy = rng.uniform(0, 30, m)
        anchors = np.stack([cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2], 1)
        deltas = rng.normal(0, 0.3, (n, m, 4))
        scores = rng.uniform(0, 1, (n, m, classes))
        levels.append((deltas, scores, anchors))
    info = np.array([[30.0, 40.0, 1.0], [36.0, 48.0, 1.2]])[:n]
    return levels, info


@pytest.mark.parametrize("thr, top_k, nms_t, keep, eta", [
    (0.3, 10, 0.3, 100, 1.0), (0.6, -1, 0.5, 7, 1.0), (0.05, 1000, 0.7, 20, 0.8),
    (0.99, 5, 0.3, 100, 1.0)])
def test_retinanet_detection_output_matches_loops(thr, top_k, nms_t, keep, eta):
    levels, info = _rdo_data(np.random.default_rng(11))
    res = run_op("retinanet_detection_output",
                 {"BBoxes": [lv[0] for lv in levels], "Scores": [lv[1] for lv in levels],
                  "Anchors": [lv[2] for lv in levels], "ImInfo": [info]},
                 {"score_threshold": thr, "nms_top_k": top_k, "nms_threshold": nms_t,
                  "keep_top_k": keep, "nms_eta": eta})
    ref, lod = rdo_reference([lv[0].tolist() for lv in levels],
                             [lv[1].tolist() for lv in levels],
                             [lv[2].tolist() for lv in levels], info.tolist(),
                             thr, top_k, nms_t, keep, eta)
    np.testing.assert_allclose(res["Out"][0], ref, rtol=1e-12, atol=1e-12)
    assert res[LOD_KEY] == {"Out": [(lod,)]}
    assert len(ref) > 0


def test_retinanet_detection_output_errors():
    levels, info = _rdo_data(np.random.default_rng(1))
    ins = {"BBoxes": [levels[0][0]], "Scores": [levels[0][1], levels[1][1]],
           "Anchors": [levels[0][2]], "ImInfo": [info]}
    with pytest.raises(ValueError, match="lists of the same length"):
        run_op("retinanet_detection_output", ins)
    ins["Scores"] = [levels[1][1]]
    with pytest.raises(ValueError, match="must agree on M"):
        run_op("retinanet_detection_output", ins)
    ins["Scores"] = [levels[0][1][0]]
    with pytest.raises(ValueError, match=r"Scores must be \[N, M, C\]"):
        run_op("retinanet_detection_output", ins)


# ---------------------------------------------------------------------------------------------
# detection_map: a reference with the textbook AP formulas

def _tp_fp(labels, label_lod, dets, det_lod, thr, evaluate_difficult):
    pos, tps = {}, {}
    for n in range(len(label_lod) - 1):
        gts = [r for r in labels[label_lod[n]:label_lod[n + 1]]]
        for r in gts:
            if evaluate_difficult or r[1] == 0:
                pos[int(r[0])] = pos.get(int(r[0]), 0) + 1
        for c in sorted({int(d[0]) for d in dets[det_lod[n]:det_lod[n + 1]]}):
            mine = sorted([d for d in dets[det_lod[n]:det_lod[n + 1]] if int(d[0]) == c],
                          key=lambda d: -d[1])
            cls_gts = [g for g in gts if int(g[0]) == c]
            used = [False] * len(cls_gts)
            for d in mine:
                box = [min(max(v, 0.0), 1.0) for v in d[2:]]
                best, best_iou = 0, -1.0
                for j, g in enumerate(cls_gts):
                    gb = g[2:]
                    iw = min(box[2], gb[2]) - max(box[0], gb[0])
                    ih = min(box[3], gb[3]) - max(box[1], gb[1])
                    iou = 0.0 if iw < 0 or ih < 0 else iw * ih / (
                        (box[2] - box[0]) * (box[3] - box[1])
                        + (gb[2] - gb[0]) * (gb[3] - gb[1]) - iw * ih)
                    if iou > best_iou:
                        best, best_iou = j, iou
                if cls_gts and best_iou > thr:
                    if not evaluate_difficult and cls_gts[best][1] != 0:
                        continue
                    hit = not used[best]
                    used[best] = True
                    tps.setdefault(c, []).append((d[1], int(hit)))
                else:
                    tps.setdefault(c, []).append((d[1], 0))
    return pos, tps


def map_reference(pos, tps, ap_type):
    aps = []
    for c in sorted(pos):
        if pos[c] == 0:
            continue
        flags = [f for _, f in sorted(tps.get(c, []), key=lambda v: -v[0])]
        tp = np.cumsum(flags)
        fp = np.cumsum([1 - f for f in flags])
        prec = tp / np.maximum(tp + fp, 1)
        rec = tp / pos[c]
        if ap_type == "integral":
            aps.append(sum(p * (r - q) for p, r, q in zip(prec, rec, [0.0, *rec[:-1]],
                                                           strict=True)))
        else:
            aps.append(sum(max([p for p, r in zip(prec, rec, strict=True) if r >= k / 10]
                               or [0.0]) for k in range(11)) / 11)
    return float(np.mean(aps)) if aps else 0.0


def _map_data():
    labels = np.array([[1, 0, 0.1, 0.1, 0.3, 0.3], [1, 1, 0.6, 0.6, 0.8, 0.8],
                       [2, 0, 0.3, 0.3, 0.6, 0.5], [1, 0, 0.7, 0.1, 0.9, 0.3],
                       [2, 0, 0.1, 0.2, 0.3, 0.4], [3, 0, 0.2, 0.5, 0.4, 0.9]])
    dets = np.array([[1, 0.9, 0.1, 0.1, 0.3, 0.3], [1, 0.85, 0.12, 0.1, 0.31, 0.3],
                     [1, 0.3, 0.6, 0.6, 0.8, 0.8], [2, 0.8, 0.3, 0.3, 0.6, 0.52],
                     [1, 0.7, 0.0, 0.0, 0.2, 0.2], [3, 0.6, 0.5, 0.5, 0.7, 0.7],
                     [1, 0.95, 0.7, 0.1, 0.9, 0.3], [2, 0.5, 0.1, 0.2, 0.3, 0.4],
                     [2, 0.2, 0.5, 0.5, 0.9, 0.9], [1, 0.4, -0.1, 0.0, 0.2, 0.2]])
    return labels, (0, 3, 6), dets, (0, 6, 10)


@pytest.mark.parametrize("ap_type", ["integral", "11point"])
@pytest.mark.parametrize("evaluate_difficult", [True, False])
def test_detection_map_matches_reference(ap_type, evaluate_difficult):
    labels, l_lod, dets, d_lod = _map_data()
    attrs = {"class_num": 4, "overlap_threshold": 0.5, "evaluate_difficult": evaluate_difficult,
             "ap_type": ap_type, "_lods": {"Label": [(l_lod,)], "DetectRes": [(d_lod,)]}}
    res = run_op("detection_map", {"DetectRes": [dets], "Label": [labels]}, attrs)
    pos, tps = _tp_fp(labels.tolist(), l_lod, dets.tolist(), d_lod, 0.5, evaluate_difficult)
    want = map_reference(pos, tps, ap_type)
    np.testing.assert_allclose(res["MAP"][0], [want], rtol=1e-6)
    assert 0 < want < 1
    np.testing.assert_array_equal(res["AccumPosCount"][0].ravel(),
                                  [pos.get(c, 0) for c in range(4)])
    tp_rows = res["AccumTruePos"][0]
    starts = res[LOD_KEY]["AccumTruePos"][0][0]
    for c in range(4):
        got = sorted(map(tuple, tp_rows[starts[c]:starts[c + 1]].tolist()))
        assert got == sorted((float(s), float(f)) for s, f in tps.get(c, [])), c
    fp_rows = res["AccumFalsePos"][0]
    np.testing.assert_array_equal(fp_rows[:, 1] + tp_rows[:, 1], np.ones(len(tp_rows)))


def test_detection_map_accumulates_states():
    """Batch A then batch B with A's states equals A and B as one batch."""
    labels, l_lod, dets, d_lod = _map_data()
    base = {"class_num": 4, "overlap_threshold": 0.5, "ap_type": "11point"}

    def lods(ll, dl):
        return {"_lods": {"Label": [(ll,)], "DetectRes": [(dl,)]}}

    first = run_op("detection_map", {"DetectRes": [dets[:6]], "Label": [labels[:3]]},
                   {**base, **lods((0, 3), (0, 6))})
    ins = {"DetectRes": [dets[6:]], "Label": [labels[3:]],
           "HasState": [np.array([1], np.int32)], "PosCount": first["AccumPosCount"],
           "TruePos": first["AccumTruePos"], "FalsePos": first["AccumFalsePos"]}
    state_lods = {"TruePos": first[LOD_KEY]["AccumTruePos"],
                  "FalsePos": first[LOD_KEY]["AccumFalsePos"]}
    attrs = {**base, "_lods": {"Label": [((0, 3),)], "DetectRes": [((0, 4),)], **state_lods}}
    second = run_op("detection_map", ins, attrs)
    whole = run_op("detection_map", {"DetectRes": [dets], "Label": [labels]},
                   {**base, **lods(l_lod, d_lod)})
    np.testing.assert_allclose(second["MAP"][0], whole["MAP"][0], rtol=1e-12)
    np.testing.assert_array_equal(second["AccumPosCount"][0], whole["AccumPosCount"][0])
    # HasState 0 ignores the states
    ins["HasState"] = [np.array([0], np.int32)]
    alone = run_op("detection_map", ins, attrs)
    only_b = run_op("detection_map", {"DetectRes": [dets[6:]], "Label": [labels[3:]]},
                    {**base, **lods((0, 3), (0, 4))})
    np.testing.assert_allclose(alone["MAP"][0], only_b["MAP"][0], rtol=1e-12)
    assert not np.allclose(alone["MAP"][0], second["MAP"][0])


@pytest.mark.parametrize("change, match", [
    ({"DetectRes": [np.zeros((2, 5))]}, r"DetectRes\) must be \[M, 6\]"),
    ({"Label": [np.zeros((2, 4))]}, r"Label\) must be \[N, 6\]"),
    ({"ap_type": "voc"}, "ap_type must be"),
    ({"_lods": {"Label": [((0, 1, 2),)], "DetectRes": [((0, 2),)]}}, "batch sizes"),
    ({"_lods": {"Label": [None], "DetectRes": [((0, 2),)]}}, "lod_level 1"),
])
def test_detection_map_errors(change, match):
    ins = {"DetectRes": [np.zeros((2, 6))], "Label": [np.zeros((2, 6))]}
    attrs = {"_lods": {"Label": [((0, 2),)], "DetectRes": [((0, 2),)]}}
    for k, v in change.items():
        (ins if k in ins else attrs)[k] = v
    with pytest.raises(ValueError, match=match):
        run_op("detection_map", ins, attrs)
