"""NMS and proposal kernels (multiclass_nms, multiclass_nms2, matrix_nms, locality_aware_nms,
distribute_fpn_proposals, collect_fpn_proposals, generate_proposals) against independent
references: the numpy references of Paddle's test_multiclass_nms_op.py, test_matrix_nms_op.py,
test_locality_aware_nms_op.py, test_distribute_fpn_proposals_op.py,
test_collect_fpn_proposals_op.py and test_generate_proposals_op.py rewritten in other forms
(IoU matrices at once, matrix-form decay, loops over Python floats), plus hand-computed cases,
error messages and the device (CuPy) path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_fluid.ops.registry import LOD_KEY

from . import run_op

# ---------------------------------------------------------------------------------------------
# reference


def iou_matrix(boxes: np.ndarray, normalized: bool) -> np.ndarray:
    """Pairwise IoU of ``[K, 4]`` boxes, vectorised (0 for disjoint boxes)."""
    add = 0.0 if normalized else 1.0
    b = boxes.astype(np.float64)
    w = np.where(b[:, 2] < b[:, 0], 0, b[:, 2] - b[:, 0] + add)
    h = np.where(b[:, 3] < b[:, 1], 0, b[:, 3] - b[:, 1] + add)
    area = np.where((b[:, 2] < b[:, 0]) | (b[:, 3] < b[:, 1]), 0, w * h)
    iw = np.minimum(b[:, None, 2], b[None, :, 2]) - np.maximum(b[:, None, 0], b[None, :, 0])
    ih = np.minimum(b[:, None, 3], b[None, :, 3]) - np.maximum(b[:, None, 1], b[None, :, 1])
    disjoint = (iw < 0) | (ih < 0)
    inter = (iw + add) * (ih + add)
    return np.where(disjoint, 0.0, inter / (area[:, None] + area[None, :] - inter))


def ref_nms(boxes, scores, score_thr, nms_thr, top_k, eta, normalized):
    cand = sorted((i for i in range(len(scores)) if scores[i] > score_thr),
                  key=lambda i: (-scores[i], i))
    if top_k > -1:
        cand = cand[:top_k]
    ious = iou_matrix(boxes, normalized)
    kept, thr = [], nms_thr
    for i in cand:
        if all(ious[i, k] <= thr for k in kept):
            kept.append(i)
            if eta < 1 and thr > 0.5:
                thr *= eta
    return kept


def ref_image(boxes, scores, a, lod_form):
    """One image: list of (label, idx) in output order. ``scores`` [C, M] / LoD form [M, C]."""
    sc = scores.T if lod_form else scores
    picked = {}
    for c in range(sc.shape[0]):
        if c == a["background_label"]:
            continue
        b = boxes[:, c] if lod_form else boxes
        k = ref_nms(b, sc[c], a["score_threshold"], a["nms_threshold"], a["nms_top_k"],
                    a["nms_eta"], a["normalized"])
        picked[c] = sorted(k) if lod_form else k
    flat = [(c, i) for c in sorted(picked) for i in picked[c]]
    if -1 < a["keep_top_k"] < len(flat):
        pos = sorted(range(len(flat)), key=lambda j: (-sc[flat[j][0], flat[j][1]], j))
        chosen = [flat[j] for j in pos[:a["keep_top_k"]]]
        by_label = {}
        for c, i in chosen:
            by_label.setdefault(c, []).append(i)
        if lod_form:
            by_label = {c: sorted(v) for c, v in by_label.items()}
        flat = [(c, i) for c in sorted(by_label) for i in by_label[c]]
    return flat


ATTRS = {"background_label": 0, "score_threshold": 0.0, "nms_top_k": -1, "nms_threshold": 0.3,
         "nms_eta": 1.0, "keep_top_k": -1, "normalized": True}


def random_boxes(rng, shape, normalized=True):
    xy = rng.uniform(0, 1 if normalized else 50, shape + (2,))
    wh = rng.uniform(0.1, 0.5 if normalized else 20, shape + (2,))
    return np.concatenate([xy, xy + wh], axis=-1)


# ---------------------------------------------------------------------------------------------
# multiclass_nms


def test_hand_computed_case():
    # boxes 0 and 1 overlap with IoU 1/1.1; box 2 is apart
    b = np.array([[[0, 0, 1, 1], [0, 0, 1, 1.1], [2, 2, 3, 3]]], np.float32)
    s = np.array([[[.1, .2, .3], [.9, .8, .7], [.3, .6, .5]]], np.float32)
    res = run_op("multiclass_nms", {"BBoxes": [b], "Scores": [s]},
                 {"score_threshold": 0.05, "nms_threshold": 0.5, "keep_top_k": 3})
    # class 1 keeps 0 (0.9) and 2 (0.7), drops 1; class 2 keeps 1 (0.6) and 2 (0.5), drops
    # 0; keep_top_k 3 drops (2, box 2, 0.5)
    np.testing.assert_allclose(res["Out"][0], [[1, .9, 0, 0, 1, 1], [1, .7, 2, 2, 3, 3],
                                               [2, .6, 0, 0, 1, 1.1]], rtol=1e-6)
    assert res["Out"][0].dtype == np.float32
    assert res[LOD_KEY] == {"Out": [((0, 3),)]}
    # nms_threshold above the IoU (0.909): nothing suppressed; background -1 keeps class 0
    res = run_op("multiclass_nms", {"BBoxes": [b], "Scores": [s]},
                 {"score_threshold": 0.25, "nms_threshold": 0.95, "background_label": -1})
    # within a class, rows stay in NMS (score) order in the batched form
    np.testing.assert_allclose(res["Out"][0][:, :2], [[0, .3], [1, .9], [1, .8], [1, .7],
                                                      [2, .6], [2, .5], [2, .3]], rtol=1e-6)


def test_unnormalized_boxes_add_one_pixel():
    # areas 2x2=4 and 2x3=6 (pixels), intersection 2x2=4: IoU 4/6 = 0.667
    b = np.array([[[0, 0, 1, 1], [0, 0, 1, 2]]], np.float64)
    s = np.array([[[0, 0], [.9, .8]]], np.float64)
    kept = run_op("multiclass_nms", {"BBoxes": [b], "Scores": [s]},
                  {"normalized": False, "nms_threshold": 0.6})["Out"][0]
    assert kept.shape == (1, 6)
    kept = run_op("multiclass_nms", {"BBoxes": [b], "Scores": [s]},
                  {"normalized": False, "nms_threshold": 0.7})["Out"][0]
    assert kept.shape == (2, 6)
    # normalized: IoU 1/2, kept at 0.6
    kept = run_op("multiclass_nms", {"BBoxes": [b], "Scores": [s]},
                  {"normalized": True, "nms_threshold": 0.6})["Out"][0]
    assert kept.shape == (2, 6)


@pytest.mark.parametrize("attrs", [
    {},
    {"score_threshold": 0.3, "nms_top_k": 6, "keep_top_k": 10},
    {"background_label": -1, "nms_threshold": 0.5, "nms_eta": 0.8, "keep_top_k": 7},
    {"background_label": 2, "normalized": False, "nms_threshold": 0.1},
])
def test_batched_form_matches_reference(attrs):
    rng = np.random.default_rng(3)
    a = {**ATTRS, **attrs}
    n, c, m = 3, 4, 12
    boxes = random_boxes(rng, (n, m), a["normalized"])
    scores = rng.uniform(0, 1, (n, c, m))
    for dtype in (np.float64, np.float32):
        res = run_op("multiclass_nms", {"BBoxes": [boxes.astype(dtype)],
                                        "Scores": [scores.astype(dtype)]}, attrs)
        rows, starts = [], [0]
        for i in range(n):
            for lab, j in ref_image(boxes[i], scores[i], a, False):
                rows.append([lab, scores[i, lab, j], *boxes[i, j]])
            starts.append(len(rows))
        assert res[LOD_KEY] == {"Out": [(tuple(starts),)]}
        np.testing.assert_allclose(res["Out"][0], np.array(rows), rtol=1e-6)
        assert res["Out"][0].dtype == dtype


def test_lod_form_matches_reference_and_index():
    rng = np.random.default_rng(8)
    a = {**ATTRS, "score_threshold": 0.2, "keep_top_k": 5, "nms_threshold": 0.4}
    lens, c = [5, 0, 7], 3
    m = sum(lens)
    boxes = random_boxes(rng, (m, c))
    scores = rng.uniform(0, 1, (m, c))
    o = np.concatenate([[0], np.cumsum(lens)])
    res = run_op("multiclass_nms2", {"BBoxes": [boxes], "Scores": [scores]},
                 {**a, "_lods": {"BBoxes": [((0, 5, 5, 12),)]}})
    rows, index, starts = [], [], [0]
    for i in range(len(lens)):
        bi, si = boxes[o[i]:o[i + 1]], scores[o[i]:o[i + 1]]
        for lab, j in ref_image(bi, si, a, True):
            rows.append([lab, si[j, lab], *bi[j, lab]])
            index.append((o[i] + j) * c + lab)
        starts.append(len(rows))
    np.testing.assert_allclose(res["Out"][0], np.array(rows))
    assert res["Index"][0].dtype == np.int32
    assert res["Index"][0].ravel().tolist() == index
    # the index points at the kept score in the flattened [M, C] scores
    np.testing.assert_allclose(scores.ravel()[index], res["Out"][0][:, 1])
    assert res[LOD_KEY] == {"Out": [(tuple(starts),)], "Index": [(tuple(starts),)]}


def test_nms2_index_batched_form():
    rng = np.random.default_rng(1)
    boxes = random_boxes(rng, (2, 6))
    scores = rng.uniform(0, 1, (2, 3, 6))
    res = run_op("multiclass_nms2", {"BBoxes": [boxes], "Scores": [scores]},
                 {"score_threshold": 0.4})
    out, idx = res["Out"][0], res["Index"][0].ravel()
    # Index is n * M + m: the box row of the flattened [N * M, 4] boxes
    np.testing.assert_allclose(boxes.reshape(-1, 4)[idx], out[:, 2:])
    plain = run_op("multiclass_nms", {"BBoxes": [boxes], "Scores": [scores]},
                   {"score_threshold": 0.4})
    np.testing.assert_array_equal(plain["Out"][0], out)


def test_nothing_kept():
    b = np.zeros((2, 3, 4))
    s = np.full((2, 2, 3), 0.1)
    res = run_op("multiclass_nms", {"BBoxes": [b], "Scores": [s]}, {"score_threshold": 0.5})
    assert res["Out"][0].tolist() == [[-1.0]]
    assert res[LOD_KEY] == {"Out": [((0, 1),)]}
    res = run_op("multiclass_nms2", {"BBoxes": [b], "Scores": [s]}, {"score_threshold": 0.5})
    assert res["Out"][0].shape == (0, 6) and res["Index"][0].shape == (0, 1)
    assert res[LOD_KEY]["Out"] == [((0, 0, 0),)]


def test_errors():
    b, s = np.zeros((1, 3, 4)), np.zeros((1, 2, 3))
    with pytest.raises(ValueError, match="rank 2 or 3"):
        run_op("multiclass_nms", {"BBoxes": [b], "Scores": [s[0, 0]]})
    with pytest.raises(ValueError, match=r"must be \[N, M, 4\]"):
        run_op("multiclass_nms", {"BBoxes": [b], "Scores": [np.zeros((1, 2, 4))]})
    with pytest.raises(NotImplementedError, match="polygon boxes"):
        run_op("multiclass_nms", {"BBoxes": [np.zeros((1, 3, 8))], "Scores": [s]})
    with pytest.raises(ValueError, match="must be a LoD tensor"):
        run_op("multiclass_nms", {"BBoxes": [np.zeros((3, 2, 4))], "Scores": [np.zeros((3, 2))]})


def test_device_arrays(device_xp):
    cp = device_xp
    rng = np.random.default_rng(2)
    boxes, scores = random_boxes(rng, (2, 8)), rng.uniform(0, 1, (2, 3, 8))
    cpu = run_op("multiclass_nms2", {"BBoxes": [boxes], "Scores": [scores]})
    gpu = run_op("multiclass_nms2", {"BBoxes": [cp.asarray(boxes)],
                                     "Scores": [cp.asarray(scores)]})
    for slot in ("Out", "Index"):
        assert isinstance(gpu[slot][0], cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(gpu[slot][0]), cpu[slot][0])
    assert gpu[LOD_KEY] == cpu[LOD_KEY]


# ---------------------------------------------------------------------------------------------
# matrix_nms

MATRIX_ATTRS = {"background_label": 0, "score_threshold": 0.0, "post_threshold": 0.0,
                "nms_top_k": -1, "keep_top_k": -1, "normalized": True, "use_gaussian": False,
                "gaussian_sigma": 2.0}


def ref_matrix_class(boxes, scores, a):
    """Matrix NMS of one class in matrix form (as the SOLOv2 paper writes it)."""
    order = sorted((i for i in range(len(scores)) if scores[i] > a["score_threshold"]),
                   key=lambda i: (-scores[i], i))
    if a["nms_top_k"] > -1:
        order = order[:a["nms_top_k"]]
    if not order:
        return []
    ious = np.triu(iou_matrix(boxes[order], a["normalized"]), 1)  # [j, i]: j better than i
    comp = ious.max(axis=0)  # each box's own largest IoU with a better box
    if a["use_gaussian"]:
        dec = np.exp((comp[:, None] ** 2 - ious ** 2) * a["gaussian_sigma"])
    else:
        dec = (1 - ious) / (1 - comp[:, None])
    upper = np.triu(np.ones_like(ious, dtype=bool), 1)
    factor = np.minimum(np.where(upper, dec, 1.0).min(axis=0), 1.0)
    new = factor * scores[order]
    return [(new[k], order[k]) for k in range(len(order)) if new[k] > a["post_threshold"]]


def test_matrix_nms_hand_computed():
    # IoU of the two boxes is 1/2 (normalized)
    b = np.array([[[0, 0, 1, 1], [0, 0, 1, 2], [5, 5, 6, 6]]], np.float64)
    s = np.array([[[0, 0, 0], [.9, .8, .3]]])
    res = run_op("matrix_nms", {"BBoxes": [b], "Scores": [s]}, {"post_threshold": 0.35})
    # linear: 0.8 * (1 - 0.5) / (1 - 0) = 0.4; box 2 is apart, undecayed 0.3 <= 0.35 dropped
    np.testing.assert_allclose(res["Out"][0], [[1, .9, 0, 0, 1, 1], [1, .4, 0, 0, 1, 2]])
    assert res["Index"][0].ravel().tolist() == [0, 1]
    assert res[LOD_KEY] == {"Out": [((0, 2),)], "Index": [((0, 2),)]}
    res = run_op("matrix_nms", {"BBoxes": [b], "Scores": [s]},
                 {"use_gaussian": True, "gaussian_sigma": 2.0, "post_threshold": 0.45})
    np.testing.assert_allclose(res["Out"][0][:, 1], [.9, .8 * np.exp(-0.5)])
    res = run_op("matrix_nms", {"BBoxes": [b], "Scores": [s]}, {"score_threshold": 0.95})
    assert res["Out"][0].shape == (0, 6) and res["Index"][0].shape == (0, 1)
    assert res[LOD_KEY]["Out"] == [((0, 0),)]


@pytest.mark.parametrize("attrs", [
    {},
    {"score_threshold": 0.2, "post_threshold": 0.3, "nms_top_k": 8, "keep_top_k": 9},
    {"use_gaussian": True, "gaussian_sigma": 0.5, "background_label": -1, "keep_top_k": 12},
    {"normalized": False, "background_label": 1, "post_threshold": 0.1},
])
def test_matrix_nms_matches_reference(attrs):
    rng = np.random.default_rng(11)
    a = {**MATRIX_ATTRS, **attrs}
    n, c, m = 2, 3, 10
    boxes = random_boxes(rng, (n, m), a["normalized"])
    scores = rng.uniform(0, 1, (n, c, m))
    for dtype, rtol in ((np.float64, 1e-10), (np.float32, 1e-5)):
        res = run_op("matrix_nms", {"BBoxes": [boxes.astype(dtype)],
                                    "Scores": [scores.astype(dtype)]}, attrs)
        rows, index, starts = [], [], [0]
        for i in range(n):
            found = []
            for lab in range(c):
                if lab != a["background_label"]:
                    found += [(d, lab, j) for d, j in ref_matrix_class(boxes[i], scores[i, lab],
                                                                         a)]
            found.sort(key=lambda f: -f[0])  # Python's sort is stable too
            if a["keep_top_k"] > -1:
                found = found[:a["keep_top_k"]]
            rows += [[lab, d, *boxes[i, j]] for d, lab, j in found]
            index += [i * m + j for _, _, j in found]
            starts.append(len(rows))
        np.testing.assert_allclose(res["Out"][0], np.array(rows), rtol=rtol)
        assert res["Out"][0].dtype == dtype
        assert res["Index"][0].ravel().tolist() == index
        assert res[LOD_KEY]["Out"] == [(tuple(starts),)]


def test_matrix_nms_errors_and_device(device_xp):
    with pytest.raises(ValueError, match=r"matrix_nms: Input\(BBoxes\) must be"):
        run_op("matrix_nms", {"BBoxes": [np.zeros((1, 3, 4))], "Scores": [np.zeros((1, 2, 4))]})
    cp = device_xp
    rng = np.random.default_rng(2)
    boxes, scores = random_boxes(rng, (2, 8)), rng.uniform(0, 1, (2, 3, 8))
    cpu = run_op("matrix_nms", {"BBoxes": [boxes], "Scores": [scores]})
    gpu = run_op("matrix_nms", {"BBoxes": [cp.asarray(boxes)], "Scores": [cp.asarray(scores)]})
    for slot in ("Out", "Index"):
        assert isinstance(gpu[slot][0], cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(gpu[slot][0]), cpu[slot][0])


# ---------------------------------------------------------------------------------------------
# locality_aware_nms


def test_locality_aware_nms_hand_computed():
    # A and B overlap (IoU 1/1.2): B merges into A with weights .6/.4 -> y2 1.08, score 1.0
    b = np.array([[[0, 0, 1, 1], [0, 0, 1, 1.2], [3, 3, 4, 4]]])
    s = np.array([[[.6, .4, .5]]])
    res = run_op("locality_aware_nms", {"BBoxes": [b], "Scores": [s]})
    np.testing.assert_allclose(res["Out"][0], [[0, 1.0, 0, 0, 1, 1.08], [0, .5, 3, 3, 4, 4]])
    assert res[LOD_KEY] == {"Out": [((0, 2),)]}
    # a second class merges B into the already merged A again (y2 (1.08 .2 + 1.2 .2) / .4 =
    # 1.14), and class 0's rows show that final box, as Paddle's in-place kernel does
    s2 = np.array([[[.6, .4, .5], [.2, .2, .9]]])
    res = run_op("locality_aware_nms", {"BBoxes": [b], "Scores": [s2]})
    np.testing.assert_allclose(res["Out"][0], [[0, 1.0, 0, 0, 1, 1.14], [0, .5, 3, 3, 4, 4],
                                               [1, .9, 3, 3, 4, 4], [1, .4, 0, 0, 1, 1.14]])
    res = run_op("locality_aware_nms", {"BBoxes": [b], "Scores": [s2]},
                 {"score_threshold": 2.0})
    assert res["Out"][0].tolist() == [[-1.0]] and res[LOD_KEY] == {"Out": [((0, 1),)]}


def ref_locality_aware(boxes, scores, a):
    """Loops over Python lists: merge pass, then greedy NMS; boxes shared by the classes."""
    bx = [list(map(float, r)) for r in boxes]
    sc = [list(map(float, r)) for r in scores]
    ious = lambda p, q: iou_matrix(np.array([bx[p], bx[q]]), a["normalized"])[0, 1]  # noqa: E731
    picked = {}
    for c in range(len(sc)):
        if c == a["background_label"]:
            continue
        s = sc[c]
        survivors, cur = [], None
        for i in range(len(s)):
            if cur is not None and ious(i, cur) > a["nms_threshold"]:
                w = s[i] + s[cur]
                bx[cur] = [(p * s[i] + q * s[cur]) / w for p, q in zip(bx[i], bx[cur],
                                                                       strict=True)]
                s[cur] += s[i]
            else:
                if cur is not None:
                    survivors.append(cur)
                cur = i
        survivors.append(cur)
        cand = sorted((i for i in survivors if s[i] > a["score_threshold"]),
                      key=lambda i: (-s[i], i))
        if a["nms_top_k"] > -1:
            cand = cand[:a["nms_top_k"]]
        kept, thr = [], a["nms_threshold"]
        for i in cand:
            if all(ious(i, k) <= thr for k in kept):
                kept.append(i)
                if a["nms_eta"] < 1 and thr > 0.5:
                    thr *= a["nms_eta"]
        picked[c] = kept
    flat = [(c, i) for c in sorted(picked) for i in picked[c]]
    if -1 < a["keep_top_k"] < len(flat):
        pos = sorted(range(len(flat)), key=lambda j: (-sc[flat[j][0]][flat[j][1]], j))
        chosen = {}
        for j in pos[:a["keep_top_k"]]:
            chosen.setdefault(flat[j][0], []).append(flat[j][1])
        flat = [(c, i) for c in sorted(chosen) for i in chosen[c]]
    return [[c, sc[c][i], *bx[i]] for c, i in flat]


@pytest.mark.parametrize("attrs", [
    {},
    {"score_threshold": 0.3, "nms_top_k": 5, "keep_top_k": 6, "background_label": 0},
    {"nms_threshold": 0.2, "nms_eta": 0.7, "normalized": False},
])
def test_locality_aware_nms_matches_reference(attrs):
    rng = np.random.default_rng(21)
    a = {**ATTRS, "background_label": -1, **attrs}
    n, c, m = 2, 3, 12
    # boxes in a row that overlap their neighbours, so merges happen
    x = np.sort(rng.uniform(0, 6 if a["normalized"] else 60, (n, m)), axis=1)
    w = rng.uniform(0.5, 1.5, (n, m)) * (1 if a["normalized"] else 10)
    y = rng.uniform(0, 0.3, (n, m))
    boxes = np.stack([x, y, x + w, y + w], axis=-1)
    scores = rng.uniform(0, 1, (n, c, m))
    res = run_op("locality_aware_nms", {"BBoxes": [boxes], "Scores": [scores]}, attrs)
    rows, starts = [], [0]
    for i in range(n):
        rows += ref_locality_aware(boxes[i], scores[i], a)
        starts.append(len(rows))
    np.testing.assert_allclose(res["Out"][0], np.array(rows), rtol=1e-10)
    assert res[LOD_KEY] == {"Out": [(tuple(starts),)]}
    assert (res["Out"][0][:, 1] > 1).any()  # some merges summed scores


def test_locality_aware_nms_errors_and_device(device_xp):
    with pytest.raises(ValueError, match=r"locality_aware_nms: Input\(BBoxes\) must be"):
        run_op("locality_aware_nms", {"BBoxes": [np.zeros((1, 3, 4))],
                                      "Scores": [np.zeros((1, 2))]})
    with pytest.raises(NotImplementedError, match="polygon boxes"):
        run_op("locality_aware_nms", {"BBoxes": [np.zeros((1, 3, 8))],
                                      "Scores": [np.zeros((1, 2, 3))]})
    cp = device_xp
    rng = np.random.default_rng(2)
    boxes, scores = random_boxes(rng, (2, 8)), rng.uniform(0, 1, (2, 3, 8))
    cpu = run_op("locality_aware_nms", {"BBoxes": [boxes], "Scores": [scores]})
    gpu = run_op("locality_aware_nms", {"BBoxes": [cp.asarray(boxes)],
                                        "Scores": [cp.asarray(scores)]})
    assert isinstance(gpu["Out"][0], cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(gpu["Out"][0]), cpu["Out"][0])
    # the kernel works on copies: its inputs are unchanged
    np.testing.assert_array_equal(boxes, random_boxes(np.random.default_rng(2), (2, 8)))


# ---------------------------------------------------------------------------------------------
# distribute_fpn_proposals, collect_fpn_proposals

FPN = {"min_level": 2, "max_level": 5, "refer_level": 4, "refer_scale": 224}


def test_distribute_fpn_proposals_hand_computed():
    # sizes (+1 pixel) 224 -> level 4, 448 -> 5, 112 -> 3, 11 -> -1 clipped to 2, 2001 -> 5
    rois = np.array([[0, 0, 223, 223], [0, 0, 447, 447], [0, 0, 111, 111], [5, 5, 15, 15],
                     [0, 0, 2000, 2000]], np.float32)
    res = run_op("distribute_fpn_proposals", {"FpnRois": [rois]},
                 {**FPN, "_lods": {"FpnRois": [((0, 2, 5),)]}})
    levels = res["MultiFpnRois"]
    assert [lv.shape[0] for lv in levels] == [1, 1, 1, 2]
    np.testing.assert_array_equal(levels[0], rois[[3]])
    np.testing.assert_array_equal(levels[3], rois[[1, 4]])
    assert res[LOD_KEY]["MultiFpnRois"] == [((0, 0, 1),), ((0, 0, 1),), ((0, 1, 1),),
                                            ((0, 1, 2),)]
    # concatenated levels: rows 3, 2, 0, 1, 4; RestoreIndex gives each input row's position
    assert res["RestoreIndex"][0].tolist() == [[2], [3], [1], [0], [4]]
    assert res["RestoreIndex"][0].dtype == np.int32
    cat = np.concatenate(levels)
    np.testing.assert_array_equal(cat[res["RestoreIndex"][0].ravel()], rois)


def test_distribute_fpn_proposals_matches_loops():
    rng = np.random.default_rng(4)
    xy = rng.uniform(0, 100, (30, 2))
    rois = np.concatenate([xy, xy + rng.uniform(5, 900, (30, 2))], axis=1)
    lod = (0, 7, 7, 30)
    attrs = {"min_level": 3, "max_level": 6, "refer_level": 5, "refer_scale": 160}
    res = run_op("distribute_fpn_proposals", {"FpnRois": [rois]},
                 {**attrs, "_lods": {"FpnRois": [(lod,)]}})
    want = []
    for x1, y1, x2, y2 in rois:
        s = math.sqrt((x2 - x1 + 1) * (y2 - y1 + 1))
        want.append(min(6, max(3, math.floor(math.log2(s / 160) + 5))))
    pos = 0
    restore = [None] * len(rois)
    for k, level in enumerate(range(3, 7)):
        rows = [i for i in range(len(rois)) if want[i] == level]
        np.testing.assert_array_equal(res["MultiFpnRois"][k], rois[rows].reshape(-1, 4))
        counts = [sum(1 for i in rows if lod[b] <= i < lod[b + 1]) for b in range(3)]
        assert res[LOD_KEY]["MultiFpnRois"][k] == ((0, *np.cumsum(counts).tolist()),)
        for i in rows:
            restore[i] = pos
            pos += 1
    assert res["RestoreIndex"][0].ravel().tolist() == restore


def test_collect_fpn_proposals_hand_computed_and_reference():
    r0 = np.array([[0, 0, 1, 1], [1, 1, 2, 2], [2, 2, 3, 3]], np.float32)
    r1 = np.array([[5, 5, 6, 6], [6, 6, 7, 7]], np.float32)
    s0 = np.array([[.9], [.1], [.5]], np.float32)
    s1 = np.array([[.3], [.8]], np.float32)
    lods = {"MultiLevelRois": [((0, 2, 3),), ((0, 1, 2),)],
            "MultiLevelScores": [((0, 2, 3),), ((0, 1, 2),)]}
    res = run_op("collect_fpn_proposals", {"MultiLevelRois": [r0, r1],
                                           "MultiLevelScores": [s0, s1]},
                 {"post_nms_topN": 4, "_lods": lods})
    # top 4: .9 (img 0), .8 (img 1), .5 (img 1), .3 (img 0); regrouped by image
    np.testing.assert_array_equal(res["FpnRois"][0], [r0[0], r1[0], r1[1], r0[2]])
    assert res[LOD_KEY] == {"FpnRois": [((0, 2, 4),)]}
    # post_nms_topN above the count keeps everything
    res = run_op("collect_fpn_proposals", {"MultiLevelRois": [r0, r1],
                                           "MultiLevelScores": [s0, s1]},
                 {"post_nms_topN": 50, "_lods": lods})
    assert res["FpnRois"][0].shape == (5, 4) and res[LOD_KEY]["FpnRois"] == [((0, 3, 5),)]
    # random levels against a sort of (score, image) tuples
    rng = np.random.default_rng(6)
    rois, scores, lod_r = [], [], []
    for n in ([3, 4], [5, 0], [2, 6]):
        rois.append(rng.uniform(0, 50, (sum(n), 4)))
        scores.append(rng.uniform(0, 1, (sum(n), 1)))
        lod_r.append(((0, n[0], sum(n)),))
    res = run_op("collect_fpn_proposals", {"MultiLevelRois": rois, "MultiLevelScores": scores},
                 {"post_nms_topN": 12, "_lods": {"MultiLevelRois": lod_r,
                                                 "MultiLevelScores": lod_r}})
    allr = [(scores[lv][j, 0], 0 if j < lod_r[lv][0][1] else 1, rois[lv][j])
            for lv in range(3) for j in range(len(rois[lv]))]
    best = sorted(allr, key=lambda a: -a[0])[:12]
    best = [a for a in best if a[1] == 0] + [a for a in best if a[1] == 1]
    np.testing.assert_array_equal(res["FpnRois"][0], np.array([a[2] for a in best]))
    n0 = sum(1 for a in best if a[1] == 0)
    assert res[LOD_KEY]["FpnRois"] == [((0, n0, 12),)]


def test_fpn_errors_and_device(device_xp):
    rois = np.array([[0, 0, 223, 223]], np.float32)
    with pytest.raises(ValueError, match="has no LoD"):
        run_op("distribute_fpn_proposals", {"FpnRois": [rois]}, FPN)
    with pytest.raises(ValueError, match="max_level"):
        run_op("distribute_fpn_proposals", {"FpnRois": [rois]},
               {**FPN, "max_level": 1, "_lods": {"FpnRois": [((0, 1),)]}})
    with pytest.raises(ValueError, match="as many"):
        run_op("collect_fpn_proposals", {"MultiLevelRois": [rois], "MultiLevelScores": []})
    with pytest.raises(ValueError, match="non-negative"):
        run_op("collect_fpn_proposals", {"MultiLevelRois": [rois],
                                         "MultiLevelScores": [rois[:, :1]]},
               {"post_nms_topN": -1})
    cp = device_xp
    rng = np.random.default_rng(3)
    r = rng.uniform(0, 500, (6, 4))
    r[:, 2:] += r[:, :2]
    lods = {"FpnRois": [((0, 4, 6),)]}
    cpu = run_op("distribute_fpn_proposals", {"FpnRois": [r]}, {**FPN, "_lods": lods})
    gpu = run_op("distribute_fpn_proposals", {"FpnRois": [cp.asarray(r)]},
                 {**FPN, "_lods": lods})
    for g, c in zip(gpu["MultiFpnRois"] + gpu["RestoreIndex"],
                    cpu["MultiFpnRois"] + cpu["RestoreIndex"], strict=True):
        assert isinstance(g, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(g), c)
    s = rng.uniform(0, 1, (6, 1))
    lods = {"MultiLevelRois": [((0, 4, 6),)], "MultiLevelScores": [((0, 4, 6),)]}
    cpu = run_op("collect_fpn_proposals", {"MultiLevelRois": [r], "MultiLevelScores": [s]},
                 {"post_nms_topN": 3, "_lods": lods})
    gpu = run_op("collect_fpn_proposals", {"MultiLevelRois": [cp.asarray(r)],
                                           "MultiLevelScores": [cp.asarray(s)]},
                 {"post_nms_topN": 3, "_lods": lods})
    assert isinstance(gpu["FpnRois"][0], cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(gpu["FpnRois"][0]), cpu["FpnRois"][0])


# ---------------------------------------------------------------------------------------------
# generate_proposals

GP = {"pre_nms_topN": 6000, "post_nms_topN": 1000, "nms_thresh": 0.5, "min_size": 0.1,
      "eta": 1.0}


def test_generate_proposals_hand_computed():
    # zero deltas decode the anchors to themselves; the image (20 x 20) clips x2 23 -> 19;
    # IoU of the two boxes (pixel sizes): 8 * 16 / (256 + 192 - 128) = 0.4
    anchors = np.array([[0, 0, 15, 15], [8, 0, 23, 15]], np.float64).reshape(1, 2, 1, 4)
    ins = {"Scores": [np.array([0.3, 0.9]).reshape(1, 1, 1, 2)],
           "BboxDeltas": [np.zeros((1, 4, 1, 2))], "ImInfo": [np.array([[20.0, 20.0, 1.0]])],
           "Anchors": [anchors], "Variances": [np.ones_like(anchors)]}
    res = run_op("generate_proposals", ins, GP)
    np.testing.assert_array_equal(res["RpnRois"][0], [[8, 0, 19, 15], [0, 0, 15, 15]])
    np.testing.assert_array_equal(res["RpnRoiProbs"][0], [[0.9], [0.3]])
    assert res[LOD_KEY]["RpnRois"] == [((0, 2),)] and res["RpnRoisLod"][0].tolist() == [2]
    res = run_op("generate_proposals", ins, {**GP, "nms_thresh": 0.3})
    np.testing.assert_array_equal(res["RpnRois"][0], [[8, 0, 19, 15]])
    # min_size 13 at scale 1 drops the clipped 12-wide box; at scale 0.5 both are 2x larger
    res = run_op("generate_proposals", ins, {**GP, "min_size": 13.0})
    np.testing.assert_array_equal(res["RpnRois"][0], [[0, 0, 15, 15]])
    ins2 = {**ins, "ImInfo": [np.array([[20.0, 20.0, 0.5]])]}
    assert run_op("generate_proposals", ins2, {**GP, "min_size": 13.0})["RpnRois"][0].shape \
        == (2, 4)
    # nothing left: one all-zero RoI with score 0
    res = run_op("generate_proposals", ins, {**GP, "min_size": 100.0})
    assert res["RpnRois"][0].tolist() == [[0, 0, 0, 0]]
    assert res["RpnRoiProbs"][0].tolist() == [[0]]


def ref_proposals(scores, deltas, im_info, anchors, variances, a):
    """Loops over Python floats for one image (scores [A, H, W], deltas [4A, H, W])."""
    na, hh, ww = scores.shape
    cand = []
    for y in range(hh):
        for x in range(ww):
            for k in range(na):
                cand.append((scores[k, y, x], [deltas[4 * k + j, y, x] for j in range(4)],
                             anchors[y, x, k], variances[y, x, k]))
    cand.sort(key=lambda c: -c[0])
    if 0 < a["pre_nms_topN"] < len(cand):
        cand = cand[:a["pre_nms_topN"]]
    h, w, scale = im_info
    props = []
    for s, d, an, v in cand:
        aw, ah = an[2] - an[0] + 1, an[3] - an[1] + 1
        cx, cy = an[0] + aw / 2, an[1] + ah / 2
        bx, by = v[0] * d[0] * aw + cx, v[1] * d[1] * ah + cy
        bw = math.exp(min(v[2] * d[2], math.log(1000 / 16))) * aw
        bh = math.exp(min(v[3] * d[3], math.log(1000 / 16))) * ah
        box = [bx - bw / 2, by - bh / 2, bx + bw / 2 - 1, by + bh / 2 - 1]
        box = [max(min(c, (w if j % 2 == 0 else h) - 1), 0) for j, c in enumerate(box)]
        bw1, bh1 = box[2] - box[0] + 1, box[3] - box[1] + 1
        ms = max(a["min_size"], 1)
        if ((box[2] - box[0]) / scale + 1 >= ms and (box[3] - box[1]) / scale + 1 >= ms
                and box[0] + bw1 / 2 <= w and box[1] + bh1 / 2 <= h):
            props.append((s, box))
    if not props:
        return [[0, 0, 0, 0]], [0]
    kept, thr = [], a["nms_thresh"]
    for s, box in props:
        if all(iou_matrix(np.array([box, kb]), False)[0, 1] <= thr for _, kb in kept):
            kept.append((s, box))
            if a["eta"] < 1 and thr > 0.5:
                thr *= a["eta"]
    if 0 < a["post_nms_topN"] < len(kept):
        kept = kept[:a["post_nms_topN"]]
    return [b for _, b in kept], [s for s, _ in kept]


@pytest.mark.parametrize("attrs", [
    {},
    {"pre_nms_topN": 30, "post_nms_topN": 8, "nms_thresh": 0.7, "min_size": 4.0},
    {"nms_thresh": 0.8, "eta": 0.9, "min_size": 2.0},
])
def test_generate_proposals_matches_reference(attrs):
    rng = np.random.default_rng(13)
    a = {**GP, **attrs}
    n, na, hh, ww = 2, 3, 4, 5
    ctr = np.stack(np.meshgrid(np.arange(ww) * 16 + 8, np.arange(hh) * 16 + 8), -1)
    sizes = np.array([16.0, 32.0, 48.0])
    anchors = np.concatenate([ctr[:, :, None, :] - sizes[:, None] / 2,
                              ctr[:, :, None, :] + sizes[:, None] / 2 - 1], axis=-1)
    variances = rng.uniform(0.5, 1.5, anchors.shape)
    scores = rng.uniform(0, 1, (n, na, hh, ww))
    deltas = rng.normal(0, 0.3, (n, 4 * na, hh, ww))
    im_info = np.array([[64.0, 80.0, 1.0], [50.0, 70.0, 0.8]])
    res = run_op("generate_proposals", {"Scores": [scores], "BboxDeltas": [deltas],
                                        "ImInfo": [im_info], "Anchors": [anchors],
                                        "Variances": [variances]}, attrs)
    rois, probs, counts = [], [], []
    for i in range(n):
        r, p = ref_proposals(scores[i], deltas[i], im_info[i], anchors, variances, a)
        rois += r
        probs += p
        counts.append(len(r))
    np.testing.assert_allclose(res["RpnRois"][0], np.array(rois), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(res["RpnRoiProbs"][0].ravel(), probs)
    assert res[LOD_KEY]["RpnRois"] == [((0, counts[0], sum(counts)),)]
    assert res["RpnRoisLod"][0].tolist() == counts
    assert 1 < counts[0] < na * hh * ww  # the filters and the NMS did something


def test_generate_proposals_errors_and_device(device_xp):
    anchors = np.zeros((2, 2, 1, 4))
    ok = {"Scores": [np.zeros((1, 1, 2, 2))], "BboxDeltas": [np.zeros((1, 4, 2, 2))],
          "ImInfo": [np.array([[8.0, 8.0, 1.0]])], "Anchors": [anchors],
          "Variances": [np.ones_like(anchors)]}
    with pytest.raises(ValueError, match=r"BboxDeltas\) must be \[N, 4A, H, W\]"):
        run_op("generate_proposals", {**ok, "BboxDeltas": [np.zeros((1, 3, 2, 2))]})
    with pytest.raises(ValueError, match=r"ImInfo\) must be \[N, 3\]"):
        run_op("generate_proposals", {**ok, "ImInfo": [np.zeros((2, 3))]})
    with pytest.raises(ValueError, match=r"Anchors\) and Input\(Variances\)"):
        run_op("generate_proposals", {**ok, "Anchors": [np.zeros((2, 2, 2, 4))]})
    cp = device_xp
    rng = np.random.default_rng(1)
    anchors = rng.uniform(0, 20, (2, 2, 1, 4))
    anchors[..., 2:] += anchors[..., :2] + 4
    ins = {"Scores": [rng.uniform(0, 1, (2, 1, 2, 2))],
           "BboxDeltas": [rng.normal(0, .2, (2, 4, 2, 2))],
           "ImInfo": [np.array([[40.0, 40.0, 1.0], [30.0, 30.0, 1.0]])], "Anchors": [anchors],
           "Variances": [np.ones_like(anchors)]}
    cpu = run_op("generate_proposals", ins)
    gpu = run_op("generate_proposals", {k: [cp.asarray(v[0])] for k, v in ins.items()})
    for slot in ("RpnRois", "RpnRoiProbs", "RpnRoisLod"):
        assert isinstance(gpu[slot][0], cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(gpu[slot][0]), cpu[slot][0])
