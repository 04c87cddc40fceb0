"""Non-maximum suppression and proposal kernels of Fluid 1.8's detection layers:
multiclass_nms (and multiclass_nms2, which adds Index), matrix_nms, locality_aware_nms,
distribute_fpn_proposals, collect_fpn_proposals and generate_proposals.

NMS is sequential, so these kernels run on the host: they read their inputs with ``to_host``
and give their outputs back in the inputs' array module (numpy or CuPy). Their outputs carry
one LoD sequence per image (``lod="kernel"``). None is differentiable (Fluid registers no
grad op for them). Box arithmetic stays in the inputs' dtype, as Paddle's ``T`` kernels."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import LOD_KEY, array_module, register, to_host

# ---------------------------------------------------------------------------------------------
# helpers


def _lod_of(attrs: dict, slot: str) -> tuple | None:
    lods = (attrs.get("_lods") or {}).get(slot) or []
    return lods[0] if lods and lods[0] else None


def _box_area(b: np.ndarray, normalized: bool) -> Any:
    """``BBoxArea`` of Paddle's NMS kernels: 0 for an invalid box, ``+1`` pixel sizes when the
    boxes are not normalized."""
    if b[2] < b[0] or b[3] < b[1]:
        return b.dtype.type(0)
    w, h = b[2] - b[0], b[3] - b[1]
    return w * h if normalized else (w + 1) * (h + 1)


def _iou(b1: np.ndarray, b2: np.ndarray, normalized: bool) -> Any:
    """``JaccardOverlap`` of Paddle's NMS kernels, in the boxes' dtype."""
    if b2[0] > b1[2] or b2[2] < b1[0] or b2[1] > b1[3] or b2[3] < b1[1]:
        return b1.dtype.type(0)
    norm = b1.dtype.type(0 if normalized else 1)
    iw = min(b1[2], b2[2]) - max(b1[0], b2[0]) + norm
    ih = min(b1[3], b2[3]) - max(b1[1], b2[1]) + norm
    inter = iw * ih
    return inter / (_box_area(b1, normalized) + _box_area(b2, normalized) - inter)


def _sorted_above(scores: np.ndarray, threshold: float, top_k: int) -> list[int]:
    """``GetMaxScoreIndex``: the indices whose score is above ``threshold``, by descending
    score (a stable sort, so equal scores keep index order), cut to ``top_k`` (-1: all)."""
    idx = np.nonzero(scores > scores.dtype.type(threshold))[0]
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    if -1 < top_k < len(idx):
        idx = idx[:top_k]
    return idx.tolist()


def _nms_fast(boxes: np.ndarray, scores: np.ndarray, score_threshold: float,
              nms_threshold: float, eta: float, top_k: int, normalized: bool) -> list[int]:
    """``NMSFast``: greedy NMS of one class, with the adaptive threshold of ``nms_eta``."""
    return _greedy(boxes, _sorted_above(scores, score_threshold, top_k), scores.dtype.type,
                   nms_threshold, eta, normalized)


def _greedy(boxes: np.ndarray, order: list[int], t: type, nms_threshold: float, eta: float,
            normalized: bool) -> list[int]:
    """The greedy loop of ``NMSFast``: each candidate of ``order`` is kept unless its IoU with
    a kept box exceeds the adaptive threshold (times ``eta`` after each keep while above
    0.5)."""
    adaptive = t(nms_threshold)
    selected: list[int] = []
    for i in order:
        keep = all(_iou(boxes[i], boxes[k], normalized) <= adaptive for k in selected)
        if keep:
            selected.append(i)
            if eta < 1 and adaptive > 0.5:
                adaptive = t(adaptive * t(eta))
    return selected


# ---------------------------------------------------------------------------------------------
# multiclass_nms, multiclass_nms2

_MCNMS_ATTRS = {"background_label": 0, "score_threshold": 0.0, "nms_top_k": -1,
                "nms_threshold": 0.3, "nms_eta": 1.0, "keep_top_k": -1, "normalized": True}


def _multiclass_one(boxes: np.ndarray, scores: np.ndarray, attrs: dict,
                    per_class_boxes: bool) -> list[tuple[int, int]]:
    """``MultiClassNMS`` for one image: the kept ``(label, box index)`` pairs, by ascending
    label, in the order Paddle's kernel writes them.

    ``per_class_boxes`` is the LoD form: ``scores`` ``[M, C]``, ``boxes`` ``[M, C, 4]``, and each
    class's kept indices are sorted ascending; otherwise ``scores`` is ``[C, M]``, ``boxes``
    ``[M, 4]`` and the indices stay in NMS order."""
    background = int(attrs["background_label"])
    keep_top_k = int(attrs["keep_top_k"])
    class_num = scores.shape[1] if per_class_boxes else scores.shape[0]
    picked: dict[int, list[int]] = {}
    for c in range(class_num):
        if c == background:
            continue
        s = scores[:, c] if per_class_boxes else scores[c]
        b = boxes[:, c, :] if per_class_boxes else boxes
        sel = _nms_fast(b, np.ascontiguousarray(s), float(attrs["score_threshold"]),
                        float(attrs["nms_threshold"]), float(attrs["nms_eta"]),
                        int(attrs["nms_top_k"]), bool(attrs["normalized"]))
        picked[c] = sorted(sel) if per_class_boxes else sel
    num = sum(len(v) for v in picked.values())
    if -1 < keep_top_k < num:
        pairs = [(c, i) for c in sorted(picked) for i in picked[c]]
        sc = np.array([scores[i, c] if per_class_boxes else scores[c, i] for c, i in pairs])
        # stable: equal scores keep the (label, NMS order) order
        order = np.argsort(-sc, kind="stable")[:keep_top_k]
        picked = {}
        for j in order.tolist():
            picked.setdefault(pairs[j][0], []).append(pairs[j][1])
        if per_class_boxes:
            picked = {c: sorted(v) for c, v in picked.items()}
    return [(c, i) for c in sorted(picked) for i in picked[c]]


def _multiclass_nms(ins: dict, attrs: dict, outs: tuple, op: str) -> dict:
    bboxes, scores = ins["BBoxes"][0], ins["Scores"][0]
    xp = array_module(bboxes, scores)
    b, s = to_host(bboxes), to_host(scores)
    if s.ndim not in (2, 3):
        raise ValueError(f"{op}: Input(Scores) must have rank 2 or 3, got shape {list(s.shape)}")
    if b.ndim != 3:
        raise ValueError(f"{op}: Input(BBoxes) must have rank 3, got shape {list(b.shape)}")
    if b.shape[2] in (8, 16, 24, 32) and s.ndim == 3:
        raise NotImplementedError(f"{op} with polygon boxes (BBoxes last dim {b.shape[2]}) is "
                                  "not implemented in dask_fluid")
    if b.shape[2] != 4:
        raise ValueError(f"{op}: the last dim of Input(BBoxes) must be 4, got "
                         f"{list(b.shape)}")
    per_class = s.ndim == 2
    if per_class:
        lod = _lod_of(attrs, "BBoxes")
        if lod is None:
            raise ValueError(f"{op}: with a 2-D Input(Scores), Input(BBoxes) [M, C, 4] must be "
                             "a LoD tensor (fluid.create_lod_tensor) giving each image's boxes")
        o = [int(v) for v in lod[-1]]
        if b.shape[:2] != s.shape or o[-1] != b.shape[0]:
            raise ValueError(f"{op}: Input(BBoxes) {list(b.shape)} must be [M, C, 4] for "
                             f"Input(Scores) {list(s.shape)}, with a LoD ending at M, got {o}")
        images = [(b[o[i]:o[i + 1]], s[o[i]:o[i + 1]], o[i] * s.shape[1])
                  for i in range(len(o) - 1)]
    else:
        if b.shape[1] != s.shape[2] or b.shape[0] != s.shape[0]:
            raise ValueError(f"{op}: Input(BBoxes) {list(b.shape)} must be [N, M, 4] for "
                             f"Input(Scores) [N, C, M] {list(s.shape)}")
        images = [(b[i], s[i], i * s.shape[2]) for i in range(s.shape[0])]
    rows, index, starts = [], [], [0]
    for boxes, sc, offset in images:
        for c, i in _multiclass_one(boxes, sc, attrs, per_class):
            if per_class:
                rows.append(np.concatenate([[c, sc[i, c]], boxes[i, c]]))
                index.append(offset + i * s.shape[1] + c)
            else:
                rows.append(np.concatenate([[c, sc[c, i]], boxes[i]]))
                index.append(offset + i)
        starts.append(len(rows))
    want_index = "Index" in outs
    if rows:
        out = np.asarray(rows, dtype=s.dtype)
    elif want_index:
        # with Index, Paddle's kernel writes empty [0, 6] / [0, 1] tensors
        out = np.zeros((0, b.shape[2] + 2), dtype=s.dtype)
    else:
        # without Index, a single -1 row with the LoD [0, 1]
        out = np.full((1, 1), -1, dtype=s.dtype)
        starts = [0, 1]
    lod_out = (tuple(starts),)
    res = {"Out": [xp.asarray(out)], LOD_KEY: {"Out": [lod_out]}}
    if want_index:
        res["Index"] = [xp.asarray(np.asarray(index, dtype=np.int32).reshape(-1, 1))]
        res[LOD_KEY]["Index"] = [lod_out]
    return res


@register("multiclass_nms", ("BBoxes", "Scores"), ("Out",), dict(_MCNMS_ATTRS), lod="kernel")
def multiclass_nms(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Per-class greedy NMS then a per-image ``keep_top_k`` cut, as Paddle's
    ``MultiClassNMSKernel``: Out ``[No, 6]`` rows ``label, score, x1, y1, x2, y2`` grouped by
    image (the LoD), by ascending label within an image; ``[[-1]]`` when nothing is kept.

    Scores ``[N, C, M]`` with BBoxes ``[N, M, 4]``, or (LoD form) Scores ``[M, C]`` with
    BBoxes ``[M, C, 4]`` carrying the images' LoD."""
    return _multiclass_nms(ins, attrs, outs, "multiclass_nms")


@register("multiclass_nms2", ("BBoxes", "Scores"), ("Out", "Index"), dict(_MCNMS_ATTRS),
          lod="kernel")
def multiclass_nms2(ins: dict, attrs: dict, outs: tuple) -> dict:
    """``multiclass_nms`` that also writes Index ``[No, 1]`` (int32): each kept box's row in
    the flattened input across the batch (``n * M + m``; LoD form ``row * C + class``).
    Nothing kept gives empty ``[0, 6]`` / ``[0, 1]`` outputs, as Paddle's kernel."""
    return _multiclass_nms(ins, attrs, outs, "multiclass_nms2")


# ---------------------------------------------------------------------------------------------
# matrix_nms

_MATRIX_NMS_ATTRS = {"background_label": 0, "score_threshold": 0.0, "post_threshold": 0.0,
                     "nms_top_k": -1, "keep_top_k": -1, "normalized": True,
                     "use_gaussian": False, "gaussian_sigma": 2.0}


def _matrix_nms_class(boxes: np.ndarray, scores: np.ndarray, attrs: dict) -> tuple[list, list]:
    """``NMSMatrix`` of one class: the kept box indices and their decayed scores, by
    descending original score. Paddle sorts with ``std::partial_sort`` (equal scores in no set
    order); this sorts stably, so equal scores keep index order."""
    t = scores.dtype.type
    normalized = bool(attrs["normalized"])
    order = _sorted_above(scores, float(attrs["score_threshold"]), int(attrs["nms_top_k"]))
    if not order:
        return [], []
    k = len(order)
    iou = np.zeros((k, k), dtype=scores.dtype)
    for i in range(1, k):
        for j in range(i):
            iou[i, j] = _iou(boxes[order[i]], boxes[order[j]], normalized)
    # each box's largest IoU with a better-scored box: how much it was itself suppressed
    iou_max = iou.max(axis=1)
    post = t(attrs["post_threshold"])
    sigma = float(attrs["gaussian_sigma"])
    kept, decayed = [], []
    for i in range(k):
        s = scores[order[i]]
        if i:
            cur, mx = iou[i, :i].astype(np.float64), iou_max[:i].astype(np.float64)
            # a better box fully overlapped by an even better one (max_iou 1) divides by 0:
            # +inf or NaN, no decay from it, as in Paddle's kernel
            with np.errstate(divide="ignore", invalid="ignore"):
                if attrs["use_gaussian"]:
                    decay = np.exp((mx * mx - cur * cur) * sigma)
                else:
                    decay = (1.0 - cur) / (1.0 - mx)
            # std::min(min_decay, nan) keeps min_decay: NaN decays (0 / 0) are skipped
            s = t(np.nanmin(np.append(decay, 1.0))) * s
        if s > post:
            kept.append(order[i])
            decayed.append(s)
    return kept, decayed


@register("matrix_nms", ("BBoxes", "Scores"), ("Out", "Index"), dict(_MATRIX_NMS_ATTRS),
          lod="kernel")
def matrix_nms(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Matrix NMS (SOLOv2), as Paddle's ``MatrixNMSKernel``: per class, the scores above
    ``score_threshold`` (best ``nms_top_k``) are decayed by their IoU with better-scored boxes
    (linear ``(1 - iou) / (1 - max_iou)`` or Gaussian ``exp((max_iou² - iou²) · sigma)``, the
    smallest decay over those boxes), kept when above ``post_threshold``; then each image keeps
    its best ``keep_top_k`` by decayed score, in descending decayed score.

    Out ``[No, 6]`` rows ``label, decayed score, x1, y1, x2, y2``, Index ``[No, 1]`` int32
    (``n * M + m``), both with one LoD sequence per image; empty ``[0, 6]`` / ``[0, 1]`` when
    nothing is kept. Scores ``[N, C, M]``, BBoxes ``[N, M, 4]``."""
    bboxes, scores = ins["BBoxes"][0], ins["Scores"][0]
    xp = array_module(bboxes, scores)
    b, s = to_host(bboxes), to_host(scores)
    if s.ndim != 3 or b.ndim != 3 or b.shape[2] != 4 or b.shape[:2] != (s.shape[0], s.shape[2]):
        raise ValueError(f"matrix_nms: Input(BBoxes) must be [N, M, 4] and Input(Scores) "
                         f"[N, C, M], got {list(b.shape)} and {list(s.shape)}")
    background = int(attrs["background_label"])
    keep_top_k = int(attrs["keep_top_k"])
    rows, index, starts = [], [], [0]
    for n in range(s.shape[0]):
        found: list[tuple[Any, int, int]] = []  # (decayed score, class, box), class by class
        for c in range(s.shape[1]):
            if c == background:
                continue
            kept, decayed = _matrix_nms_class(b[n], np.ascontiguousarray(s[n, c]), attrs)
            found += [(d, c, i) for i, d in zip(kept, decayed, strict=True)]
        if found:
            ds = np.array([f[0] for f in found], dtype=s.dtype)
            order = np.argsort(-ds, kind="stable")
            if keep_top_k > -1:
                order = order[:keep_top_k]
            for j in order.tolist():
                d, c, i = found[j]
                rows.append(np.concatenate([np.array([c, d], dtype=s.dtype), b[n, i]]))
                index.append(n * s.shape[2] + i)
        starts.append(len(rows))
    out = (np.asarray(rows, dtype=s.dtype) if rows
           else np.zeros((0, b.shape[2] + 2), dtype=s.dtype))
    lod = (tuple(starts),)
    return {"Out": [xp.asarray(out)],
            "Index": [xp.asarray(np.asarray(index, dtype=np.int32).reshape(-1, 1))],
            LOD_KEY: {"Out": [lod], "Index": [lod]}}


# ---------------------------------------------------------------------------------------------
# locality_aware_nms

_LANMS_ATTRS = {**_MCNMS_ATTRS, "background_label": -1}


def _locality_merge(boxes: np.ndarray, scores: np.ndarray, nms_threshold: Any,
                    normalized: bool) -> np.ndarray:
    """The merge pass of ``GetMaxScoreIndexWithLocalityAware``, in place: walking the boxes in
    index order, a box overlapping the current survivor by more than ``nms_threshold`` is merged
    into it (score-weighted average of the corners, scores summed); otherwise it becomes the
    survivor. Returns whether each box survived."""
    alive = np.zeros(len(scores), dtype=bool)
    cur = -1
    for i in range(len(scores)):
        if cur > -1 and _iou(boxes[i], boxes[cur], normalized) > nms_threshold:
            boxes[cur] = (boxes[i] * scores[i] + boxes[cur] * scores[cur]) / (scores[i]
                                                                              + scores[cur])
            scores[cur] += scores[i]
        else:
            if cur > -1:
                alive[cur] = True
            cur = i
    if cur > -1:
        alive[cur] = True
    return alive


@register("locality_aware_nms", ("BBoxes", "Scores"), ("Out",), dict(_LANMS_ATTRS),
          lod="kernel")
def locality_aware_nms(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Locality-aware NMS (EAST), as Paddle's ``LocalityAwareNMSKernel``: per class, adjacent
    overlapping boxes are first merged (weighted by score, scores summed), then the merged
    boxes go through ``multiclass_nms``'s greedy NMS and per-image ``keep_top_k``.

    As in Paddle's kernel, the merges work on one copy of each image's boxes and scores, so a
    class's merges change the boxes the following classes see, and the output holds the merged
    boxes and summed scores. Out ``[No, 6]`` (label, score, box) with one LoD sequence per
    image, ``[[-1]]`` when nothing is kept. Scores ``[N, C, M]``, BBoxes ``[N, M, 4]``."""
    bboxes, scores = ins["BBoxes"][0], ins["Scores"][0]
    xp = array_module(bboxes, scores)
    b, s = to_host(bboxes), to_host(scores)
    if s.ndim != 3 or b.ndim != 3 or b.shape[:2] != (s.shape[0], s.shape[2]):
        raise ValueError(f"locality_aware_nms: Input(BBoxes) must be [N, M, 4] and "
                         f"Input(Scores) [N, C, M], got {list(b.shape)} and {list(s.shape)}")
    if b.shape[2] in (8, 16, 24, 32):
        raise NotImplementedError(f"locality_aware_nms with polygon boxes (BBoxes last dim "
                                  f"{b.shape[2]}) is not implemented in dask_fluid")
    if b.shape[2] != 4:
        raise ValueError(f"locality_aware_nms: the last dim of Input(BBoxes) must be 4, got "
                         f"{list(b.shape)}")
    t = s.dtype.type
    background = int(attrs["background_label"])
    keep_top_k = int(attrs["keep_top_k"])
    normalized = bool(attrs["normalized"])
    rows, starts = [], [0]
    for n in range(s.shape[0]):
        boxes, sc = b[n].copy(), s[n].copy()
        picked: dict[int, list[int]] = {}
        for c in range(sc.shape[0]):
            if c == background:
                continue
            alive = _locality_merge(boxes, sc[c], t(attrs["nms_threshold"]), normalized)
            cand = np.nonzero(alive & (sc[c] > t(attrs["score_threshold"])))[0]
            order = cand[np.argsort(-sc[c][cand], kind="stable")].tolist()
            if -1 < int(attrs["nms_top_k"]) < len(order):
                order = order[:int(attrs["nms_top_k"])]
            picked[c] = _greedy(boxes, order, t, float(attrs["nms_threshold"]),
                                float(attrs["nms_eta"]), normalized)
        pairs = [(c, i) for c in sorted(picked) for i in picked[c]]
        if -1 < keep_top_k < len(pairs):
            ranked = np.argsort(-np.array([sc[c, i] for c, i in pairs]), kind="stable")
            picked = {}
            for j in ranked[:keep_top_k].tolist():
                picked.setdefault(pairs[j][0], []).append(pairs[j][1])
            pairs = [(c, i) for c in sorted(picked) for i in picked[c]]
        rows += [np.concatenate([np.array([c, sc[c, i]], dtype=s.dtype), boxes[i]])
                 for c, i in pairs]
        starts.append(len(rows))
    if rows:
        out = np.asarray(rows, dtype=s.dtype)
    else:
        out, starts = np.full((1, 1), -1, dtype=s.dtype), [0, 1]
    return {"Out": [xp.asarray(out)], LOD_KEY: {"Out": [(tuple(starts),)]}}


# ---------------------------------------------------------------------------------------------
# distribute_fpn_proposals, collect_fpn_proposals


def _need_lod(attrs: dict, slot: str, op: str, i: int = 0) -> list[int]:
    """The last LoD level of the ``i``-th tensor of ``slot`` as offsets; ValueError without."""
    lods = (attrs.get("_lods") or {}).get(slot) or []
    lod = lods[i] if i < len(lods) else None
    if not lod:
        raise ValueError(f"{op}: Input({slot}) #{i} has no LoD: feed it as a LoD tensor "
                         "(fluid.create_lod_tensor) with one sequence per image")
    return [int(v) for v in lod[-1]]


@register("distribute_fpn_proposals", ("FpnRois",), ("MultiFpnRois", "RestoreIndex"),
          {"min_level": 2, "max_level": 5, "refer_level": 4, "refer_scale": 224}, lod="kernel")
def distribute_fpn_proposals(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Send each RoI to FPN level ``floor(log2(sqrt(area) / refer_scale) + refer_level)``
    clipped to ``[min_level, max_level]`` (area with Paddle's ``+1`` pixel sizes), as Paddle's
    ``DistributeFpnProposalsOpKernel``.

    MultiFpnRois: one ``[n_l, 4]`` LoD tensor per level (RoIs in input order, per image);
    RestoreIndex ``[R, 1]`` int32: for each input RoI, its row in the levels' concatenation."""
    rois = ins["FpnRois"][0]
    xp = array_module(rois)
    r = to_host(rois)
    op = "distribute_fpn_proposals"
    lo, hi = int(attrs["min_level"]), int(attrs["max_level"])
    if hi < lo:
        raise ValueError(f"{op}: max_level ({hi}) must not be lower than min_level ({lo})")
    if r.ndim != 2 or r.shape[1] != 4:
        raise ValueError(f"{op}: Input(FpnRois) must be [R, 4], got {list(r.shape)}")
    lods = (attrs.get("_lods") or {}).get("FpnRois") or []
    if lods and lods[0] and len(lods[0]) != 1:
        raise ValueError(f"{op}: Input(FpnRois) needs 1 level of LoD, got {len(lods[0])}")
    o = _need_lod(attrs, "FpnRois", op)
    t = r.dtype.type
    w, h = r[:, 2] - r[:, 0], r[:, 3] - r[:, 1]
    area = np.where((w < 0) | (h < 0), t(0), (w + t(1)) * (h + t(1))).astype(r.dtype)
    # an all-zero area gives log2(0) = -inf, clipped to min_level as Paddle's int cast of
    # floor(-inf) then max() does on common platforms
    with np.errstate(divide="ignore"):
        lvl = np.floor(np.log2(np.sqrt(area) / t(int(attrs["refer_scale"])))
                       + t(int(attrs["refer_level"])))
    lvl = np.clip(np.nan_to_num(lvl, neginf=lo, posinf=hi), lo, hi).astype(np.int64)
    multi, lod_out, order = [], [], []
    for level in range(lo, hi + 1):
        rows, offsets = [], [0]
        for b in range(len(o) - 1):
            sel = [j for j in range(o[b], o[b + 1]) if lvl[j] == level]
            rows += sel
            offsets.append(len(rows))
        multi.append(xp.asarray(np.ascontiguousarray(r[rows].reshape(-1, 4))))
        lod_out.append((tuple(offsets),))
        order += rows
    restore = np.empty(len(order), dtype=np.int32)
    restore[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int32)
    return {"MultiFpnRois": multi, "RestoreIndex": [xp.asarray(restore.reshape(-1, 1))],
            LOD_KEY: {"MultiFpnRois": lod_out, "RestoreIndex": [None]}}


@register("collect_fpn_proposals", ("MultiLevelRois", "MultiLevelScores"), ("FpnRois",),
          {"post_nms_topN": 100}, lod="kernel")
def collect_fpn_proposals(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Gather the RoIs of every FPN level, keep the ``post_nms_topN`` best scored over the
    whole batch, and regroup them by image, as Paddle's ``CollectFpnProposalsOpKernel``.

    Ties in score keep level-then-row order (Paddle's comparator ``>=`` leaves that order
    unspecified). The output LoD is built as Paddle builds it: one offset wherever the image id
    changes, so an image left without RoIs gets no sequence of its own."""
    op = "collect_fpn_proposals"
    rois, scores = ins["MultiLevelRois"], ins["MultiLevelScores"]
    if len(rois) != len(scores):
        raise ValueError(f"{op}: got {len(rois)} MultiLevelRois but {len(scores)} "
                         "MultiLevelScores; they must be as many")
    top = int(attrs["post_nms_topN"])
    if top < 0:
        raise ValueError(f"{op}: post_nms_topN must be non-negative, got {top}")
    xp = array_module(*rois)
    items = []  # (score, image, level, row)
    host_rois = []
    for lv, (rt, st) in enumerate(zip(rois, scores, strict=True)):
        r, s = to_host(rt), to_host(st).reshape(-1)
        ro = _need_lod(attrs, "MultiLevelRois", op, lv)
        so = _need_lod(attrs, "MultiLevelScores", op, lv)
        if r.ndim != 2 or r.shape[1] != 4 or ro[-1] != r.shape[0] or len(s) < ro[-1]:
            raise ValueError(f"{op}: level {lv}: MultiLevelRois must be [R, 4] with a LoD "
                             f"ending at R and as many scores, got rois {list(r.shape)}, LoD "
                             f"{ro}, {len(s)} scores")
        host_rois.append(r)
        image = 0
        for j in range(ro[-1]):
            # Paddle walks the scores' LoD to find each RoI's image, one step per RoI at
            # most (so consecutive images without RoIs in a level shift the ids, as there)
            if image + 1 < len(so) - 1 and j >= so[image + 1]:
                image += 1
            items.append((s[j], image, lv, j))
    dtype = host_rois[0].dtype if host_rois else np.float32
    top = min(top, len(items))
    ranked = np.argsort(-np.array([it[0] for it in items], dtype=np.float64),
                        kind="stable")[:top]
    kept = [items[k] for k in ranked.tolist()]
    kept.sort(key=lambda it: it[1])  # stable: by image, best score first within one
    out = np.array([host_rois[lv][j] for _, _, lv, j in kept], dtype=dtype).reshape(-1, 4)
    offsets, cur = [0], 0
    for i, it in enumerate(kept):
        if it[1] != cur:
            cur = it[1]
            offsets.append(i)
    offsets.append(top)
    return {"FpnRois": [xp.asarray(out)], LOD_KEY: {"FpnRois": [(tuple(offsets),)]}}


# ---------------------------------------------------------------------------------------------
# generate_proposals

_BBOX_CLIP = float(np.log(1000.0 / 16.0))


def _decode_anchors(anchors: np.ndarray, deltas: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """``BoxCoder`` of Paddle's generate_proposals: center-size decoding of ``deltas`` against
    pixel anchors (``+1`` sizes), the log-size deltas clipped at ``log(1000 / 16)``."""
    t = anchors.dtype.type
    w = anchors[:, 2] - anchors[:, 0] + t(1)
    h = anchors[:, 3] - anchors[:, 1] + t(1)
    cx = anchors[:, 0] + t(0.5) * w
    cy = anchors[:, 1] + t(0.5) * h
    bx = variances[:, 0] * deltas[:, 0] * w + cx
    by = variances[:, 1] * deltas[:, 1] * h + cy
    bw = np.exp(np.minimum(variances[:, 2] * deltas[:, 2], t(_BBOX_CLIP))) * w
    bh = np.exp(np.minimum(variances[:, 3] * deltas[:, 3], t(_BBOX_CLIP))) * h
    return np.stack([bx - bw / t(2), by - bh / t(2), bx + bw / t(2) - t(1),
                     by + bh / t(2) - t(1)], axis=1).astype(anchors.dtype)


def _proposals_one(im_info: np.ndarray, anchors: np.ndarray, variances: np.ndarray,
                   deltas: np.ndarray, scores: np.ndarray, attrs: dict) -> tuple:
    """``ProposalForOneImage``: the image's RoIs ``[K, 4]`` and scores ``[K, 1]``."""
    t = scores.dtype.type
    pre, post = int(attrs["pre_nms_topN"]), int(attrs["post_nms_topN"])
    # Paddle sorts with std::sort (equal scores in no set order); a stable sort here
    order = np.argsort(-scores, kind="stable")
    if 0 < pre < len(order):
        order = order[:pre]
    sc = scores[order]
    boxes = _decode_anchors(anchors[order], deltas[order], variances[order])
    # ClipTiledBoxes: x into [0, W - 1], y into [0, H - 1]
    im_h, im_w, im_scale = (t(v) for v in im_info[:3])
    boxes[:, 0::2] = np.maximum(np.minimum(boxes[:, 0::2], im_w - t(1)), t(0))
    boxes[:, 1::2] = np.maximum(np.minimum(boxes[:, 1::2], im_h - t(1)), t(0))
    # FilterBoxes: sizes at the original scale at least max(min_size, 1), centres inside
    min_size = t(max(float(attrs["min_size"]), 1.0))
    ws = boxes[:, 2] - boxes[:, 0] + t(1)
    hs = boxes[:, 3] - boxes[:, 1] + t(1)
    ws0 = (boxes[:, 2] - boxes[:, 0]) / im_scale + t(1)
    hs0 = (boxes[:, 3] - boxes[:, 1]) / im_scale + t(1)
    keep = np.nonzero((ws0 >= min_size) & (hs0 >= min_size)
                      & (boxes[:, 0] + ws / t(2) <= im_w) & (boxes[:, 1] + hs / t(2) <= im_h))[0]
    if len(keep) == 0:
        # Paddle's kernel gives one all-zero RoI with score 0 for such an image
        return np.zeros((1, 4), dtype=boxes.dtype), np.zeros((1, 1), dtype=sc.dtype)
    boxes, sc = boxes[keep], sc[keep]
    if float(attrs["nms_thresh"]) <= 0:
        return boxes, sc.reshape(-1, 1)
    # Paddle's NMS sorts ascending (stably) and takes from the back: equal scores go
    # last-first
    pos = np.arange(len(sc))
    nms_order = np.lexsort((-pos, -sc)).tolist()
    kept = _greedy(boxes, nms_order, t, float(attrs["nms_thresh"]), float(attrs["eta"]),
                   False)
    if 0 < post < len(kept):
        kept = kept[:post]
    return boxes[kept], sc[kept].reshape(-1, 1)


@register("generate_proposals", ("Scores", "BboxDeltas", "ImInfo", "Anchors", "Variances"),
          ("RpnRois", "RpnRoiProbs", "RpnRoisLod"),
          {"pre_nms_topN": 6000, "post_nms_topN": 1000, "nms_thresh": 0.5, "min_size": 0.1,
           "eta": 1.0}, optional=("RpnRoisLod",), lod="kernel")
def generate_proposals(ins: dict, attrs: dict, outs: tuple) -> dict:
    """RPN proposals, as Paddle's ``GenerateProposalsKernel``: per image, the
    ``pre_nms_topN`` best anchors (Scores ``[N, A, H, W]``) decoded by BboxDeltas
    ``[N, 4A, H, W]`` against Anchors / Variances ``[H, W, A, 4]``, clipped to the image
    (ImInfo ``[N, 3]``: height, width, scale), filtered by ``min_size``, through NMS
    (``nms_thresh``, adaptive ``eta``; none when ``nms_thresh <= 0``), cut to
    ``post_nms_topN``.

    RpnRois ``[R, 4]`` and RpnRoiProbs ``[R, 1]`` with one LoD sequence per image;
    RpnRoisLod (when bound) int32 ``[N]``, each image's RoI count."""
    op = "generate_proposals"
    s_in = ins["Scores"][0]
    xp = array_module(s_in)
    scores, deltas = to_host(s_in), to_host(ins["BboxDeltas"][0])
    im_info = to_host(ins["ImInfo"][0])
    anchors, variances = to_host(ins["Anchors"][0]), to_host(ins["Variances"][0])
    if scores.ndim != 4:
        raise ValueError(f"{op}: Input(Scores) must be [N, A, H, W], got {list(scores.shape)}")
    n, a, h, w = scores.shape
    if deltas.shape != (n, 4 * a, h, w):
        raise ValueError(f"{op}: Input(BboxDeltas) must be [N, 4A, H, W] = "
                         f"{[n, 4 * a, h, w]}, got {list(deltas.shape)}")
    if anchors.size != h * w * a * 4 or variances.size != h * w * a * 4:
        raise ValueError(f"{op}: Input(Anchors) and Input(Variances) must be [H, W, A, 4] = "
                         f"{[h, w, a, 4]}, got {list(anchors.shape)} and "
                         f"{list(variances.shape)}")
    if im_info.shape != (n, 3):
        raise ValueError(f"{op}: Input(ImInfo) must be [N, 3] = {[n, 3]}, got "
                         f"{list(im_info.shape)}")
    # NCHW -> NHWC: row (y, x, anchor) matches the [H, W, A, 4] anchors
    sc = scores.transpose(0, 2, 3, 1).reshape(n, -1)
    dl = deltas.transpose(0, 2, 3, 1).reshape(n, -1, 4)
    an = anchors.reshape(-1, 4).astype(scores.dtype, copy=False)
    va = variances.reshape(-1, 4).astype(scores.dtype, copy=False)
    rois, probs, counts = [], [], []
    for i in range(n):
        r, p = _proposals_one(im_info[i].astype(scores.dtype), an, va,
                              dl[i].astype(scores.dtype, copy=False), sc[i], attrs)
        rois.append(r)
        probs.append(p)
        counts.append(len(r))
    offsets = (tuple(np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()),)
    rois_out = np.concatenate(rois) if rois else np.zeros((0, 4), dtype=scores.dtype)
    probs_out = np.concatenate(probs) if probs else np.zeros((0, 1), dtype=scores.dtype)
    res = {"RpnRois": [xp.asarray(rois_out.astype(deltas.dtype, copy=False))],
           "RpnRoiProbs": [xp.asarray(probs_out)],
           LOD_KEY: {"RpnRois": [offsets], "RpnRoiProbs": [offsets]}}
    if "RpnRoisLod" in outs:
        res["RpnRoisLod"] = [xp.asarray(np.asarray(counts, dtype=np.int32))]
        res[LOD_KEY]["RpnRoisLod"] = [None]
    return res
