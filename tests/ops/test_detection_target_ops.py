"""The detection target/loss kernels (sigmoid_focal_loss, bipartite_match, target_assign,
yolo_box) against explicit element loops written after Paddle 1.8's CPU kernels
(``detection/sigmoid_focal_loss_op.h``, ``bipartite_match_op.cc``, ``target_assign_op.h``,
``yolo_box_op.h``) and the references of Paddle's unit tests; tie rules; and the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from . import run_op

FLT_MIN = float(np.finfo(np.float32).tiny)


def _lod(slot, offsets):
    return {"_lods": {slot: [(tuple(offsets),)]}}


# -- sigmoid_focal_loss ---------------------------------------------------------------------------


def ref_focal(x, label, fg, gamma, alpha):
    n, d = x.shape
    out = np.zeros_like(x)
    dx = np.zeros_like(x)
    fgn = max(fg, 1)
    for a in range(n):
        for c in range(d):
            g = label[a, 0]
            p = 1.0 / (1.0 + math.exp(-x[a, c]))
            if g == c + 1:
                out[a, c] = -alpha / fgn * (1 - p) ** gamma * math.log(max(p, FLT_MIN))
                dx[a, c] = -alpha / fgn * (1 - p) ** gamma * (
                    1 - p - gamma * p * math.log(max(p, FLT_MIN)))
            elif g != -1:
                out[a, c] = -(1 - alpha) / fgn * p ** gamma * math.log(1 - p)
                dx[a, c] = -(1 - alpha) / fgn * p ** gamma * (
                    gamma * (1 - p) * math.log(1 - p) - p)
    return out, dx


@pytest.mark.parametrize("gamma,alpha,fg", [(2.0, 0.25, 4), (1.5, 0.6, 0), (0.0, 0.5, 1)])
def test_sigmoid_focal_loss_matches_loops(gamma, alpha, fg):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 4)) * 3
    label = np.array([[0], [1], [4], [-1], [2], [3], [1]], np.int32)
    ins = {"X": [x], "Label": [label], "FgNum": [np.array([fg], np.int32)]}
    attrs = {"gamma": gamma, "alpha": alpha}
    want, want_dx = ref_focal(x, label, fg, float(np.float32(gamma)), float(np.float32(alpha)))
    np.testing.assert_allclose(run_op("sigmoid_focal_loss", ins, attrs)["Out"][0], want,
                               rtol=1e-12, atol=1e-14)
    assert np.all(run_op("sigmoid_focal_loss", ins, attrs)["Out"][0][3] == 0)  # ignored row
    dout = rng.standard_normal(x.shape)
    got = run_op("sigmoid_focal_loss_grad", {**ins, "Out@GRAD": [dout]}, attrs)["X@GRAD"][0]
    np.testing.assert_allclose(got, want_dx * dout, rtol=1e-12, atol=1e-14)


def test_sigmoid_focal_loss_float32_and_extreme_logits():
    x = np.array([[-100.0, 100.0, 0.0]], np.float32)
    label = np.array([[1]], np.int32)
    out = run_op("sigmoid_focal_loss", {"X": [x], "Label": [label],
                                        "FgNum": [np.array([1], np.int32)]})["Out"][0]
    assert out.dtype == np.float32 and np.all(np.isfinite(out))
    # p underflows to 0 for x = -100: log is floored at FLT_MIN, as Paddle does
    assert out[0, 0] == pytest.approx(-0.25 * math.log(FLT_MIN), rel=1e-6)
    assert out[0, 1] == pytest.approx(0.75 * 100.0, rel=1e-6)  # -(1-α)·log(1-σ(100))


def test_sigmoid_focal_loss_errors():
    x = np.zeros((3, 2))
    with pytest.raises(ValueError, match="Input\\(Label\\) must have X's shape"):
        run_op("sigmoid_focal_loss", {"X": [x], "Label": [np.zeros((3, 2), np.int32)],
                                      "FgNum": [np.array([1], np.int32)]})
    with pytest.raises(ValueError, match="rank of Input\\(FgNum\\) must be 1"):
        run_op("sigmoid_focal_loss", {"X": [x], "Label": [np.zeros((3, 1), np.int32)],
                                      "FgNum": [np.array([[1]], np.int32)]})


# -- bipartite_match ------------------------------------------------------------------------------


def ref_bipartite(dist, thresh=None):
    """Paddle's unit-test reference: all pairs sorted by distance (stable, descending), each
    taken when its row and column are free and the distance is > 0; then per_prediction."""
    row, col = dist.shape
    idx = -np.ones(col, np.int32)
    md = np.zeros(col, dist.dtype)
    pairs = sorted(((i, j, dist[i, j]) for i in range(row) for j in range(col)),
                   key=lambda t: t[2], reverse=True)
    used = set()
    for i, j, v in pairs:
        if len(used) >= row:
            break
        if idx[j] == -1 and i not in used and v > 0:
            idx[j], md[j] = i, v
            used.add(i)
    if thresh is not None:
        for j in range(col):
            if idx[j] != -1:
                continue
            best, bi = -1.0, -1
            for i in range(row):
                if dist[i, j] >= 1e-6 and dist[i, j] >= thresh and dist[i, j] > best:
                    best, bi = dist[i, j], i
            if bi != -1:
                idx[j], md[j] = bi, best
    return idx, md


@pytest.mark.parametrize("rows,cols", [(5, 8), (8, 5), (140, 6)])
def test_bipartite_match_single_instance(rows, cols):
    d = np.random.default_rng(rows).uniform(0.01, 1, (rows, cols)).astype(np.float32)
    res = run_op("bipartite_match", {"DistMat": [d]})
    want_i, want_d = ref_bipartite(d)
    assert res["ColToRowMatchIndices"][0].dtype == np.int32
    np.testing.assert_array_equal(res["ColToRowMatchIndices"][0], want_i[None])
    np.testing.assert_array_equal(res["ColToRowMatchDist"][0], want_d[None])


def test_bipartite_match_lod_per_prediction_and_empty_instance():
    rng = np.random.default_rng(3)
    d = rng.uniform(0, 1, (9, 6))
    offsets = (0, 4, 4, 9)
    res = run_op("bipartite_match", {"DistMat": [d]},
                 {"match_type": "per_prediction", "dist_threshold": 0.3, **_lod("DistMat",
                                                                               offsets)})
    idx, md = res["ColToRowMatchIndices"][0], res["ColToRowMatchDist"][0]
    assert idx.shape == (3, 6) and md.shape == (3, 6)
    for b in range(3):
        one = d[offsets[b]:offsets[b + 1]]
        if len(one) == 0:
            want_i, want_d = -np.ones(6, np.int32), np.zeros(6)
        else:
            want_i, want_d = ref_bipartite(one, np.float64(np.float32(0.3)))
        np.testing.assert_array_equal(idx[b], want_i)
        np.testing.assert_array_equal(md[b], want_d)
    assert (idx[0] >= 0).sum() > 4  # per_prediction matched more columns than rows


def test_bipartite_match_ties_and_eps():
    # equal distances: the first column, then its first free row (Paddle's strict '>')
    d = np.array([[0.9, 0.9], [0.9, 0.1]])
    res = run_op("bipartite_match", {"DistMat": [d]})
    np.testing.assert_array_equal(res["ColToRowMatchIndices"][0], [[0, 1]])
    np.testing.assert_array_equal(res["ColToRowMatchDist"][0], [[0.9, 0.1]])
    # distances below kEPS = 1e-6 never match (below 130 rows)
    d = np.array([[5e-7, 0.2], [0.0, 0.4]])
    res = run_op("bipartite_match", {"DistMat": [d]})
    np.testing.assert_array_equal(res["ColToRowMatchIndices"][0], [[-1, 1]])
    np.testing.assert_array_equal(res["ColToRowMatchDist"][0], [[0.0, 0.4]])


def test_bipartite_match_errors():
    with pytest.raises(ValueError, match="rank of Input\\(DistMat\\) must be 2"):
        run_op("bipartite_match", {"DistMat": [np.zeros((2, 2, 2))]})
    with pytest.raises(ValueError, match="match_type must be 'bipartite' or 'per_prediction'"):
        run_op("bipartite_match", {"DistMat": [np.ones((2, 2))]}, {"match_type": "greedy"})
    with pytest.raises(ValueError, match="1 level of LoD"):
        run_op("bipartite_match", {"DistMat": [np.ones((2, 2))]},
               {"_lods": {"DistMat": [((0, 1), (0, 1, 2))]}})


# -- target_assign --------------------------------------------------------------------------------


def ref_target_assign(x, offsets, match, mismatch, neg=None, neg_offsets=None):
    n, m = match.shape
    p, k = x.shape[1:]
    out = np.zeros((n, m, k), x.dtype)
    wt = np.zeros((n, m, 1), np.float32)
    for i in range(n):
        for j in range(m):
            if match[i, j] > -1:
                out[i, j] = x[offsets[i] + match[i, j], j % p]
                wt[i, j] = 1
            else:
                out[i, j] = mismatch
    if neg is not None:
        for i in range(n):
            for r in range(neg_offsets[i], neg_offsets[i + 1]):
                out[i, neg[r, 0]] = mismatch
                wt[i, neg[r, 0]] = 1
    return out, wt


@pytest.mark.parametrize("p", [1, 3])
def test_target_assign_matches_loops(p):
    rng = np.random.default_rng(p)
    offsets = (0, 2, 5)
    x = rng.standard_normal((5, p, 4))
    match = np.array([[1, -1, 0, -1, 1, 0], [2, 0, -1, -1, 1, 2]], np.int32)
    res = run_op("target_assign", {"X": [x], "MatchIndices": [match]},
                 {"mismatch_value": 7, **_lod("X", offsets)})
    want, wt = ref_target_assign(x, offsets, match, 7)
    np.testing.assert_array_equal(res["Out"][0], want)
    np.testing.assert_array_equal(res["OutWeight"][0], wt)
    assert res["OutWeight"][0].dtype == np.float32


def test_target_assign_negative_indices_int_input():
    x = np.arange(5 * 1 * 2, dtype=np.int32).reshape(5, 1, 2)
    match = np.array([[1, -1, -1, 0], [-1, 2, -1, -1]], np.int32)
    neg = np.array([[1], [2], [0], [3]], np.int32)
    lods = {"_lods": {"X": [((0, 2, 5),)], "NegIndices": [((0, 2, 4),)]}}
    res = run_op("target_assign", {"X": [x], "MatchIndices": [match], "NegIndices": [neg]},
                 {"mismatch_value": -1, **lods})
    want, wt = ref_target_assign(x, (0, 2, 5), match, -1, neg, (0, 2, 4))
    np.testing.assert_array_equal(res["Out"][0], want)
    np.testing.assert_array_equal(res["OutWeight"][0], wt)
    assert res["Out"][0].dtype == np.int32
    np.testing.assert_array_equal(wt[:, :, 0], [[1, 1, 1, 1], [1, 1, 0, 1]])


def test_target_assign_errors():
    x, match = np.zeros((3, 1, 2)), np.zeros((1, 2), np.int32)
    with pytest.raises(ValueError, match="Input\\(X\\) needs 1 level of LoD"):
        run_op("target_assign", {"X": [x], "MatchIndices": [match]})
    with pytest.raises(ValueError, match="rank of Input\\(X\\) must be 3"):
        run_op("target_assign", {"X": [np.zeros((3, 2))], "MatchIndices": [match]},
               _lod("X", (0, 3)))
    with pytest.raises(ValueError, match="Input\\(NegIndices\\) needs 1 level of LoD"):
        run_op("target_assign", {"X": [x], "MatchIndices": [match],
                                 "NegIndices": [np.zeros((1, 1), np.int32)]}, _lod("X", (0, 3)))


# -- yolo_box -------------------------------------------------------------------------------------


def _sig(v):
    return 1.0 / (1.0 + math.exp(-v))


def ref_yolo_box(x, img, anchors, cls, thresh, ratio, clip, scale):
    n, _, h, w = x.shape
    a = len(anchors) // 2
    t = x.reshape(n, a, 5 + cls, h, w)
    boxes = np.zeros((n, a, h, w, 4))
    scores = np.zeros((n, a, h, w, cls))
    bias = -0.5 * (scale - 1)
    for i in range(n):
        ih, iw = img[i]
        for j in range(a):
            for k in range(h):
                for l in range(w):  # noqa: E741
                    conf = _sig(t[i, j, 4, k, l])
                    if conf < thresh:
                        continue
                    cx = (l + _sig(t[i, j, 0, k, l]) * scale + bias) * iw / h  # 1.8: H only
                    cy = (k + _sig(t[i, j, 1, k, l]) * scale + bias) * ih / h
                    bw = math.exp(t[i, j, 2, k, l]) * anchors[2 * j] * iw / (ratio * h)
                    bh = math.exp(t[i, j, 3, k, l]) * anchors[2 * j + 1] * ih / (ratio * h)
                    b = [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]
                    if clip:
                        b = [max(b[0], 0), max(b[1], 0), min(b[2], iw - 1), min(b[3], ih - 1)]
                    boxes[i, j, k, l] = b
                    scores[i, j, k, l] = [conf * _sig(t[i, j, 5 + c, k, l]) for c in range(cls)]
    return boxes.reshape(n, -1, 4), scores.reshape(n, -1, cls)


@pytest.mark.parametrize("clip,scale,hw", [(True, 1.0, (4, 4)), (False, 1.2, (3, 5))])
def test_yolo_box_matches_loops(clip, scale, hw):
    rng = np.random.default_rng(2)
    anchors, cls = [10, 13, 16, 30, 33, 23], 2
    x = rng.standard_normal((2, 3 * (5 + cls), *hw))
    img = np.array([[120, 100], [64, 90]], np.int32)
    attrs = {"anchors": anchors, "class_num": cls, "conf_thresh": 0.5,
             "downsample_ratio": 8, "clip_bbox": clip, "scale_x_y": scale}
    res = run_op("yolo_box", {"X": [x], "ImgSize": [img]}, attrs)
    want_b, want_s = ref_yolo_box(x, img, anchors, cls, np.float32(0.5), 8, clip,
                                  float(np.float32(scale)))
    np.testing.assert_allclose(res["Boxes"][0], want_b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res["Scores"][0], want_s, rtol=1e-12, atol=1e-12)
    assert (want_s == 0).all(axis=2).any() and not (want_s == 0).all()  # both kinds present


def test_yolo_box_skipped_box_with_overflowing_size_is_zero():
    x = np.zeros((1, 6, 1, 1), np.float32)
    x[0, 2] = 1000.0  # e^tw overflows
    x[0, 4] = -20.0  # objectness below the threshold: the box is skipped
    res = run_op("yolo_box", {"X": [x], "ImgSize": [np.array([[10, 10]], np.int32)]},
                 {"anchors": [1, 1], "class_num": 1})
    np.testing.assert_array_equal(res["Boxes"][0], np.zeros((1, 1, 4), np.float32))


def test_yolo_box_errors():
    img = np.array([[8, 8]], np.int32)
    with pytest.raises(ValueError, match="anchors must be a non-empty list"):
        run_op("yolo_box", {"X": [np.zeros((1, 6, 2, 2))], "ImgSize": [img]},
               {"anchors": [1, 2, 3], "class_num": 1})
    with pytest.raises(ValueError, match="must have anchor_num \\* \\(5 \\+ class_num\\) = 12"):
        run_op("yolo_box", {"X": [np.zeros((1, 6, 2, 2))], "ImgSize": [img]},
               {"anchors": [1, 2, 3, 4], "class_num": 1})
    with pytest.raises(ValueError, match="Input\\(ImgSize\\) must be \\[N, 2\\]"):
        run_op("yolo_box", {"X": [np.zeros((1, 6, 2, 2))], "ImgSize": [np.zeros((1, 3),
                                                                                 np.int32)]},
               {"anchors": [1, 2], "class_num": 1})


# -- yolov3_loss ----------------------------------------------------------------------------------


def _sce(v, lab):
    return max(v, 0.0) - v * lab + math.log(1.0 + math.exp(-abs(v)))


def _box_iou(b1, b2):
    def over(c1, w1, c2, w2):
        return min(c1 + w1 / 2, c2 + w2 / 2) - max(c1 - w1 / 2, c2 - w2 / 2)
    ow, oh = over(b1[0], b1[2], b2[0], b2[2]), over(b1[1], b1[3], b2[1], b2[3])
    inter = 0.0 if ow < 0 or oh < 0 else ow * oh
    return inter / (b1[2] * b1[3] + b2[2] * b2[3] - inter)


def ref_yolov3(x, gtbox, gtlabel, gtscore, anchors, mask, cls, ignore, ratio, smooth, scale):
    """Paddle's Yolov3LossKernel, one loop at a time."""
    n, _, h, w = x.shape
    mnum, b, insz = len(mask), gtbox.shape[1], ratio * h
    t = x.reshape(n, mnum, 5 + cls, h, w)
    loss = np.zeros(n)
    objm = np.zeros((n, mnum, h, w))
    match = np.zeros((n, b), np.int32)
    sw = min(1.0 / cls, 1.0 / 40) if smooth else 0.0
    bias = -0.5 * (scale - 1)
    for i in range(n):
        valid = [gtbox[i, q, 2] >= 1e-6 and gtbox[i, q, 3] >= 1e-6 for q in range(b)]
        for j in range(mnum):
            aw, ah = anchors[2 * mask[j]], anchors[2 * mask[j] + 1]
            for k in range(h):
                for l in range(w):  # noqa: E741
                    v = t[i, j, :, k, l]
                    pred = ((l + 1 / (1 + math.exp(-v[0])) * scale + bias) / h,
                            (k + 1 / (1 + math.exp(-v[1])) * scale + bias) / h,
                            math.exp(v[2]) * aw / insz, math.exp(v[3]) * ah / insz)
                    best = 0.0
                    for q in range(b):
                        if valid[q]:
                            best = max(best, _box_iou(pred, gtbox[i, q]))
                    if best > ignore:
                        objm[i, j, k, l] = -1
        for q in range(b):
            if not valid[q]:
                match[i, q] = -1
                continue
            gx, gy, gw, gh = gtbox[i, q]
            gi, gj = int(gx * w), int(gy * h)
            best, best_n = 0.0, 0
            for a in range(len(anchors) // 2):
                iou = float(np.float32(_box_iou((0, 0, anchors[2 * a] / insz,
                                                 anchors[2 * a + 1] / insz), (0, 0, gw, gh))))
                if iou > best:
                    best, best_n = iou, a
            mi = mask.index(best_n) if best_n in mask else -1
            match[i, q] = mi
            if mi < 0:
                continue
            sc = gtscore[i, q]
            v = t[i, mi, :, gj, gi]
            s = (2 - gw * gh) * sc
            loss[i] += _sce(v[0], gx * h - gi) * s + _sce(v[1], gy * h - gj) * s
            loss[i] += abs(math.log(gw * insz / anchors[2 * best_n]) - v[2]) * s
            loss[i] += abs(math.log(gh * insz / anchors[2 * best_n + 1]) - v[3]) * s
            for c in range(cls):
                loss[i] += _sce(v[5 + c], 1 - sw if c == gtlabel[i, q] else sw) * sc
            objm[i, mi, gj, gi] = sc
        for j in range(mnum):
            for k in range(h):
                for l in range(w):  # noqa: E741
                    o = objm[i, j, k, l]
                    if o > 1e-5:
                        loss[i] += _sce(t[i, j, 4, k, l], 1.0) * o
                    elif o > -0.5:
                        loss[i] += _sce(t[i, j, 4, k, l], 0.0)
    return loss, objm, match


YOLO_ANCHORS = [10, 13, 16, 30, 33, 23, 30, 61, 62, 45, 59, 119]


def _yolo3_case(rng, n=2, b=4, h=5, cls=3, mask=(0, 1, 2)):
    x = rng.standard_normal((n, len(mask) * (5 + cls), h, h)) * 0.5
    box = np.concatenate([rng.uniform(0.05, 0.95, (n, b, 2)), rng.uniform(0.05, 0.6, (n, b, 2))],
                         axis=2)
    box[0, -1, 2] = 0.0  # a padding box
    label = rng.integers(0, cls, (n, b)).astype(np.int32)
    return x, box, label


@pytest.mark.parametrize("mask,smooth,scale,ignore,with_score",
                         [((0, 1, 2), True, 1.0, 0.7, False), ((3, 4, 5), False, 1.2, 0.3, True),
                          ((1, 3), True, 1.0, 0.5, True)])
def test_yolov3_loss_matches_loops(mask, smooth, scale, ignore, with_score):
    rng = np.random.default_rng(11)
    x, box, label = _yolo3_case(rng, mask=mask)
    score = rng.uniform(0.3, 1.0, label.shape) if with_score else np.ones(label.shape)
    ins = {"X": [x], "GTBox": [box], "GTLabel": [label]}
    if with_score:
        ins["GTScore"] = [score]
    attrs = {"anchors": YOLO_ANCHORS, "anchor_mask": list(mask), "class_num": 3,
             "ignore_thresh": ignore, "downsample_ratio": 32, "use_label_smooth": smooth,
             "scale_x_y": scale}
    res = run_op("yolov3_loss", ins, attrs)
    want_l, want_o, want_m = ref_yolov3(x, box, label, score, YOLO_ANCHORS, list(mask), 3,
                                        float(np.float32(ignore)), 32, smooth,
                                        float(np.float32(scale)))
    np.testing.assert_allclose(res["Loss"][0], want_l, rtol=1e-12)
    np.testing.assert_array_equal(res["ObjectnessMask"][0], want_o)
    np.testing.assert_array_equal(res["GTMatchMask"][0], want_m)
    assert res["GTMatchMask"][0].dtype == np.int32 and want_m[0, -1] == -1
    assert (want_m >= 0).any() and (want_o == -1).any() or ignore == 0.7


def test_yolov3_loss_shared_cell_sums_losses_but_keeps_later_gradient():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2 * 7, 4, 4)) * 0.5
    both = np.array([[[0.3, 0.3, 0.2, 0.3], [0.32, 0.28, 0.22, 0.31]]])  # one cell, one anchor
    attrs = {"anchors": [40, 60, 200, 200], "anchor_mask": [0, 1], "class_num": 2,
             "ignore_thresh": 0.7, "downsample_ratio": 32}
    label = np.array([[0, 1]], np.int32)
    res = run_op("yolov3_loss", {"X": [x], "GTBox": [both], "GTLabel": [label]}, attrs)
    np.testing.assert_array_equal(res["GTMatchMask"][0], [[0, 0]])
    want, _, _ = ref_yolov3(x, both, label, np.ones((1, 2)), [40, 60, 200, 200], [0, 1], 2,
                            float(np.float32(0.7)), 32, True, 1.0)
    np.testing.assert_allclose(res["Loss"][0], want, rtol=1e-12)
    dloss = np.array([1.5])
    g_both = run_op("yolov3_loss_grad", {"X": [x], "GTBox": [both], "GTLabel": [label],
                                         "ObjectnessMask": res["ObjectnessMask"],
                                         "GTMatchMask": res["GTMatchMask"],
                                         "Loss@GRAD": [dloss]}, attrs)["X@GRAD"][0]
    later = both[:, 1:]
    r2 = run_op("yolov3_loss", {"X": [x], "GTBox": [later], "GTLabel": [label[:, 1:]]}, attrs)
    g_later = run_op("yolov3_loss_grad", {"X": [x], "GTBox": [later], "GTLabel": [label[:, 1:]],
                                          "ObjectnessMask": r2["ObjectnessMask"],
                                          "GTMatchMask": r2["GTMatchMask"],
                                          "Loss@GRAD": [dloss]}, attrs)["X@GRAD"][0]
    chans = [0, 1, 2, 3, 5, 6]  # anchor 0's location and class channels at cell (1, 1)
    np.testing.assert_array_equal(g_both[0, chans, 1, 1], g_later[0, chans, 1, 1])
    assert np.abs(g_both[0, chans, 1, 1]).sum() > 0


def test_yolov3_loss_errors():
    x = np.zeros((1, 14, 4, 4))
    box, label = np.full((1, 1, 4), 0.5), np.zeros((1, 1), np.int32)
    base = {"anchors": [10, 10, 20, 20], "anchor_mask": [0, 1], "class_num": 2}
    with pytest.raises(ValueError, match="anchor_mask must be a non-empty list of anchor "
                                         "indices in \\[0, 2\\), got \\[0, 2\\]"):
        run_op("yolov3_loss", {"X": [x], "GTBox": [box], "GTLabel": [label]},
               {**base, "anchor_mask": [0, 2]})
    with pytest.raises(ValueError, match="H == W"):
        run_op("yolov3_loss", {"X": [np.zeros((1, 14, 4, 3))], "GTBox": [box],
                               "GTLabel": [label]}, base)
    with pytest.raises(ValueError, match="= 14 channels, got 12"):
        run_op("yolov3_loss", {"X": [np.zeros((1, 12, 4, 4))], "GTBox": [box],
                               "GTLabel": [label]}, base)
    with pytest.raises(ValueError, match="Input\\(GTLabel\\) must be \\[N, B\\]"):
        run_op("yolov3_loss", {"X": [x], "GTBox": [box], "GTLabel": [np.zeros((1, 2), np.int32)]},
               base)
    with pytest.raises(ValueError, match="centre .* outside the image"):
        run_op("yolov3_loss", {"X": [x], "GTBox": [np.array([[[1.0, 1.0, 0.3, 0.3]]])],
                               "GTLabel": [label]}, base)


# -- device arrays (strict CuPy everywhere, the real CuPy on a GPU) -------------------------------


def _device_cases():
    rng = np.random.default_rng(8)
    x, box, label = _yolo3_case(rng)
    return [
        ("bipartite_match", {"DistMat": [rng.uniform(0, 1, (9, 6))]},
         {"match_type": "per_prediction", **_lod("DistMat", (0, 4, 4, 9))}),
        ("bipartite_match", {"DistMat": [rng.uniform(0, 1, (131, 3))]}, {}),
        ("target_assign", {"X": [rng.standard_normal((5, 2, 3))],
                           "MatchIndices": [np.array([[1, -1, 0], [2, -1, 0]], np.int32)],
                           "NegIndices": [np.array([[1], [1]], np.int32)]},
         {"mismatch_value": 3, "_lods": {"X": [((0, 2, 5),)], "NegIndices": [((0, 1, 2),)]}}),
        ("yolo_box", {"X": [rng.standard_normal((2, 14, 3, 3))],
                      "ImgSize": [np.array([[100, 80], [60, 60]], np.int32)]},
         {"anchors": [10, 20, 30, 40], "class_num": 2, "conf_thresh": 0.4}),
        ("yolov3_loss", {"X": [x], "GTBox": [box], "GTLabel": [label]},
         {"anchors": YOLO_ANCHORS, "anchor_mask": [0, 1, 2], "class_num": 3,
          "ignore_thresh": 0.5}),
    ]


@pytest.mark.parametrize("case", range(len(_device_cases())))
def test_kernels_on_device_arrays_match_numpy(device_xp, case):
    from .test_cupy import assert_same_result, to_cp

    op_type, ins, attrs = _device_cases()[case]
    got = run_op(op_type, to_cp(device_xp, ins), attrs)
    want = run_op(op_type, ins, attrs)
    got.pop("@LOD", None)
    want.pop("@LOD", None)
    assert_same_result(device_xp, got, want, f"{op_type}#{case}")
