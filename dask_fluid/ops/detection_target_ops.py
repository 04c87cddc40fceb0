"""Target-assignment and detection-loss kernels of Fluid 1.8: bipartite_match,
target_assign, sigmoid_focal_loss, yolov3_loss, yolo_box, rpn_target_assign,
retinanet_target_assign, generate_proposal_labels and generate_mask_labels."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from .math_ops import _sigmoid
from .registry import GRAD, LOD_KEY, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots

#: C's FLT_MIN, the floor Paddle puts under p before log(p) (for float and double alike)

def _or_empty(v: Any) -> Any:
    """A list attr that may be None or a numpy array (whose truth value is ambiguous)."""
    return [] if v is None else v


_FLT_MIN = float(np.finfo(np.float32).tiny)
#: bipartite_match's "distance is 0" cut-off (Paddle's kEPS)
_MATCH_EPS = 1e-6


# -- sigmoid_focal_loss (Paddle 1.8's detection/sigmoid_focal_loss_op.h) --------------------------
# X [..., D] logits of the D foreground classes, Label [..., 1] int in {-1 (ignored), 0
# (background), 1..D}; class d is positive where Label == d + 1, negative where Label is neither
# -1 nor d + 1. Both terms are divided by max(FgNum[0], 1).

_FOCAL_ATTRS = {"gamma": 2.0, "alpha": 0.25}


def _focal_parts(ins: dict, attrs: dict, op: str) -> tuple:
    """(x, p, c_pos, c_neg, s_pos, s_neg, log(1 - p) as Paddle writes it, gamma)."""
    x, label, fg_num = ins["X"][0], ins["Label"][0], ins["FgNum"][0]
    xp = array_module(x)
    if label.ndim != x.ndim or label.shape[-1] != 1 or label.shape[:-1] != x.shape[:-1]:
        raise ValueError(f"{op}: Input(Label) must have X's shape with a last dimension of 1 "
                         f"(X {list(x.shape)}), got {list(label.shape)}")
    if fg_num.ndim != 1:
        raise ValueError(f"{op}: the rank of Input(FgNum) must be 1, got shape "
                         f"{list(fg_num.shape)}")
    dt = x.dtype.type
    gamma, alpha = dt(np.float32(attrs.get("gamma", 2.0))), dt(np.float32(attrs.get("alpha",
                                                                                     0.25)))
    fg = max(int(to_host(fg_num).reshape(-1)[0]), 1)
    s_pos, s_neg = alpha / dt(fg), (dt(1.0) - alpha) / dt(fg)
    g = label.astype(np.int64)
    d1 = xp.arange(1, x.shape[-1] + 1, dtype=np.int64)
    c_pos = (g == d1).astype(x.dtype)
    c_neg = ((g != -1) & (g != d1)).astype(x.dtype)
    p = _sigmoid(xp, x)
    pos = (x >= 0).astype(x.dtype)
    # log(1 - p) computed stably: -x·[x ≥ 0] − log(1 + exp(x − 2x·[x ≥ 0]))
    log_1mp = -x * pos - xp.log(1.0 + xp.exp(x - 2.0 * x * pos))
    return x, p, c_pos, c_neg, s_pos, s_neg, log_1mp, gamma


@register("sigmoid_focal_loss", ("X", "Label", "FgNum"), ("Out",), _FOCAL_ATTRS,
          grad=grad_maker(("X", "Label", "FgNum"), ("Out",), ("X",)))
def sigmoid_focal_loss(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = −c_pos·α/fg·(1 − p)^γ·log(p) − c_neg·(1 − α)/fg·p^γ·log(1 − p), p = σ(X)."""
    x, p, c_pos, c_neg, s_pos, s_neg, log_1mp, gamma = _focal_parts(ins, attrs,
                                                                     "sigmoid_focal_loss")
    xp = array_module(x)
    term_pos = (1.0 - p) ** gamma * xp.log(xp.maximum(p, _FLT_MIN))
    term_neg = p ** gamma * log_1mp
    out = -c_pos * term_pos * s_pos - c_neg * term_neg * s_neg
    return {"Out": [out.astype(x.dtype, copy=False)]}


@register("sigmoid_focal_loss_grad",
          *grad_slots(("X", "Label", "FgNum"), ("Out",), ("X",)), _FOCAL_ATTRS)
def sigmoid_focal_loss_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut · (−c_pos·s_pos·(1 − p)^γ·(1 − p − γ·p·log p)
    − c_neg·s_neg·p^γ·(γ·(1 − p)·log(1 − p) − p))."""
    x, p, c_pos, c_neg, s_pos, s_neg, log_1mp, gamma = _focal_parts(
        ins, attrs, "sigmoid_focal_loss_grad")
    xp = array_module(x)
    dout = ins["Out" + GRAD][0]
    if dout is None:
        return {"X" + GRAD: [xp.zeros_like(x)]}
    term_pos = (1.0 - p) ** gamma * (1.0 - p - p * gamma * xp.log(xp.maximum(p, _FLT_MIN)))
    term_neg = p ** gamma * (log_1mp * (1.0 - p) * gamma - p)
    dx = (-c_pos * s_pos * term_pos - c_neg * s_neg * term_neg) * dout
    return {"X" + GRAD: [dx.astype(x.dtype, copy=False)]}


# -- bipartite_match (Paddle 1.8's detection/bipartite_match_op.cc) -------------------------------
# A sequential greedy matching, run on the host. Each instance (a LoD sequence of DistMat's rows,
# or the whole matrix without a LoD) fills one row of the [N, M] outputs: -1 / 0 where a column
# stays unmatched.


def _greedy_match(dist: np.ndarray, idx: np.ndarray, mdist: np.ndarray) -> None:
    """Paddle's BipartiteMatch on one instance ``dist`` [rows, M], writing ``idx``/``mdist``."""
    rows, cols = dist.shape
    if rows >= 130:
        # Paddle sorts all pairs by distance, descending (std::sort: the order of equal
        # distances is unspecified there; here it is row-major), and takes each pair whose
        # row and column are both free and whose distance is > 0, up to `rows` matches.
        flat = dist.reshape(-1)
        order = np.argsort(-flat, kind="stable")
        row_used = np.zeros(rows, bool)
        found = 0
        for k in order:
            if found >= min(rows, cols) or not flat[k] > 0:
                break  # no further match is possible (the rest are <= 0 or all are used)
            i, j = divmod(int(k), cols)
            if idx[j] == -1 and not row_used[i]:
                idx[j], mdist[j], row_used[i] = i, flat[k], True
                found += 1
        return
    # Below 130 rows Paddle scans the free columns j (ascending) and, inside, the free rows
    # (ascending), keeping the first strict maximum among distances >= kEPS.
    free_rows = np.ones(rows, bool)
    while free_rows.any():
        ok = (dist >= _MATCH_EPS) & free_rows[:, None] & (idx == -1)[None, :]
        if not ok.any():
            break
        cand = np.where(ok, dist, -np.inf).T  # [M, rows]: column-major scan order
        j, i = divmod(int(np.argmax(cand)), rows)
        idx[j], mdist[j] = i, dist[i, j]
        free_rows[i] = False


def _argmax_match(dist: np.ndarray, idx: np.ndarray, mdist: np.ndarray,
                  threshold: float) -> None:
    """Paddle's ArgMaxMatch: each still-free column takes its best row (the first strict
    maximum) among distances >= kEPS and >= ``threshold``."""
    if dist.shape[0] == 0:
        return
    ok = (dist >= _MATCH_EPS) & (dist >= threshold)
    cand = np.where(ok, dist, -np.inf)
    best = np.argmax(cand, axis=0)
    cols = np.arange(dist.shape[1])
    take = (idx == -1) & ok[best, cols]
    idx[take] = best[take]
    mdist[take] = dist[best[take], cols[take]]


@register("bipartite_match", ("DistMat",), ("ColToRowMatchIndices", "ColToRowMatchDist"),
          {"match_type": "bipartite", "dist_threshold": 0.5}, lod="kernel")
def bipartite_match(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Greedy bipartite matching of DistMat's columns to rows, per LoD instance; with
    ``match_type='per_prediction'`` the unmatched columns then take their best row whose
    distance is >= ``dist_threshold``."""
    d = ins["DistMat"][0]
    xp = array_module(d)
    if d.ndim != 2:
        raise ValueError(f"bipartite_match: the rank of Input(DistMat) must be 2, got shape "
                         f"{list(d.shape)}")
    mtype = attrs.get("match_type", "bipartite")
    if mtype not in ("bipartite", "per_prediction"):
        raise ValueError(f"bipartite_match: match_type must be 'bipartite' or "
                         f"'per_prediction', got {mtype!r}")
    lods = (attrs.get("_lods") or {}).get("DistMat") or []
    lod = lods[0] if lods else None
    if lod and len(lod) != 1:
        raise ValueError(f"bipartite_match: Input(DistMat) must have 1 level of LoD, got "
                         f"{len(lod)}")
    dist = to_host(d)
    offsets = [int(o) for o in lod[-1]] if lod else [0, dist.shape[0]]
    n, cols = len(offsets) - 1, dist.shape[1]
    # the threshold is a C++ float attribute compared in DistMat's dtype
    threshold = dist.dtype.type(np.float32(attrs.get("dist_threshold", 0.5)))
    idx = np.full((n, cols), -1, np.int32)
    mdist = np.zeros((n, cols), dist.dtype)
    for b in range(n):
        if offsets[b + 1] <= offsets[b]:
            continue
        one = dist[offsets[b]:offsets[b + 1]]
        _greedy_match(one, idx[b], mdist[b])
        if mtype == "per_prediction":
            _argmax_match(one, idx[b], mdist[b], threshold)
    return {"ColToRowMatchIndices": [xp.asarray(idx)], "ColToRowMatchDist": [xp.asarray(mdist)],
            LOD_KEY: {}}


# -- target_assign (Paddle 1.8's detection/target_assign_op.h) ------------------------------------
# X [P_total, P, K] with a 1-level LoD (instance i owns rows lod[i]..lod[i+1]), MatchIndices
# [N, M] int: Out[i, j] = X[lod[i] + id, j % P] and OutWeight[i, j] = 1 where id =
# MatchIndices[i, j] > -1, else mismatch_value and 0. NegIndices (a LoD tensor [Neg, 1]) then
# sets Out[i, id] = mismatch_value and OutWeight[i, id] = 1 for instance i's negative ids.


@register("target_assign", ("X", "MatchIndices", "NegIndices"), ("Out", "OutWeight"),
          {"mismatch_value": 0}, optional=("NegIndices",), lod="kernel")
def target_assign(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Gather each matched column's target row from X (see the section comment)."""
    x, match = ins["X"][0], ins["MatchIndices"][0]
    neg = (ins.get("NegIndices") or [None])[0]
    xp = array_module(x)
    if x.ndim != 3:
        raise ValueError(f"target_assign: the rank of Input(X) must be 3, got shape "
                         f"{list(x.shape)}")
    if match.ndim != 2:
        raise ValueError(f"target_assign: the rank of Input(MatchIndices) must be 2, got shape "
                         f"{list(match.shape)}")
    lods = (attrs.get("_lods") or {}).get("X") or []
    lod = lods[0] if lods else None
    if not lod or len(lod) != 1:
        raise ValueError("target_assign: Input(X) needs 1 level of LoD (feed it as a LoD "
                         f"tensor), got {len(lod) if lod else 0} levels")
    n, m = match.shape
    p = x.shape[1]
    offsets = np.asarray(lod[-1], np.int64)
    if len(offsets) - 1 < n:
        raise ValueError(f"target_assign: Input(MatchIndices) has {n} rows but the LoD of "
                         f"Input(X) has only {len(offsets) - 1} instances")
    mismatch = x.dtype.type(int(attrs.get("mismatch_value", 0)))
    ids = match.astype(np.int64)
    hit = ids > -1
    rows = xp.where(hit, xp.asarray(offsets[:n])[:, None] + ids, 0)
    cols = xp.broadcast_to(xp.arange(m, dtype=np.int64) % p, (n, m))
    out = xp.where(hit[:, :, None], x[rows, cols], mismatch).astype(x.dtype, copy=False)
    weight = hit.astype(np.float32)[:, :, None]
    if neg is not None:
        nlods = (attrs.get("_lods") or {}).get("NegIndices") or []
        nlod = nlods[0] if nlods else None
        if not nlod or len(nlod) != 1:
            raise ValueError("target_assign: Input(NegIndices) needs 1 level of LoD, got "
                             f"{len(nlod) if nlod else 0} levels")
        noff = np.asarray(nlod[-1], np.int64)
        seg = np.repeat(np.arange(len(noff) - 1), np.diff(noff))
        if len(seg):
            seg_x = xp.asarray(seg)
            nid = neg.reshape(-1)[:len(seg)].astype(np.int64)
            out = out.copy()
            out[seg_x, nid] = mismatch
            weight[seg_x, nid] = 1.0
    return {"Out": [out], "OutWeight": [weight], LOD_KEY: {}}


# -- yolo_box (Paddle 1.8's detection/yolo_box_op.h) ----------------------------------------------
# X [N, A·(5 + class_num), H, W]: per anchor a the channels tx, ty, tw, th, objectness, class
# logits. Box centre ((l + σ(tx)·s + b)·img_w / H, (k + σ(ty)·s + b)·img_h / H) with s =
# scale_x_y, b = −(s − 1)/2, size (e^tw·anchor_w·img_w / (ratio·H), e^th·anchor_h·img_h /
# (ratio·H)); 1.8's kernel takes the grid size and the input size from H alone (it assumes
# square maps; the W split came after 1.8). Corners clipped to [0, img − 1] with clip_bbox.
# Scores = σ(obj)·σ(class logit). A box whose σ(obj) < conf_thresh stays all zeros (boxes and
# scores). Boxes are ordered (anchor, row, column): [N, A·H·W, 4] and [N, A·H·W, class_num].

_YOLO_BOX_ATTRS = {"anchors": [], "class_num": 1, "conf_thresh": 0.01, "downsample_ratio": 32,
                   "clip_bbox": True, "scale_x_y": 1.0}


def _yolo_anchors(op: str, attrs: dict) -> list[int]:
    anchors = [int(a) for a in np.asarray(_or_empty(attrs.get("anchors"))).reshape(-1)]
    if not anchors or len(anchors) % 2:
        raise ValueError(f"{op}: anchors must be a non-empty list of (width, height) pairs, "
                         f"got {anchors}")
    return anchors


@register("yolo_box", ("X", "ImgSize"), ("Boxes", "Scores"), _YOLO_BOX_ATTRS)
def yolo_box(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Decode YOLOv3 head output into boxes and class scores (see the section comment)."""
    x, img = ins["X"][0], ins["ImgSize"][0]
    xp = array_module(x)
    anchors = _yolo_anchors("yolo_box", attrs)
    cls = int(attrs.get("class_num", 1))
    if cls <= 0:
        raise ValueError(f"yolo_box: class_num must be > 0, got {cls}")
    if x.ndim != 4:
        raise ValueError(f"yolo_box: Input(X) must be 4-D NCHW, got shape {list(x.shape)}")
    a = len(anchors) // 2
    if x.shape[1] != a * (5 + cls):
        raise ValueError(f"yolo_box: Input(X) must have anchor_num * (5 + class_num) = "
                         f"{a * (5 + cls)} channels, got {x.shape[1]}")
    if img.ndim != 2 or img.shape[1] != 2 or img.shape[0] != x.shape[0]:
        raise ValueError(f"yolo_box: Input(ImgSize) must be [N, 2] with N = {x.shape[0]}, got "
                         f"{list(img.shape)}")
    n, _, h, w = x.shape
    dt = x.dtype.type
    ratio = int(attrs.get("downsample_ratio", 32))
    scale = float(np.float32(attrs.get("scale_x_y", 1.0)))
    bias = float(np.float32(-0.5 * (scale - 1.0)))
    t = x.reshape(n, a, 5 + cls, h, w)
    sig = _sigmoid(xp, t[:, :, [0, 1, 4]])
    conf = sig[:, :, 2]
    keep = ~(conf < dt(np.float32(attrs.get("conf_thresh", 0.01))))  # [N, A, H, W]
    img_h = img[:, 0].astype(x.dtype).reshape(n, 1, 1, 1)
    img_w = img[:, 1].astype(x.dtype).reshape(n, 1, 1, 1)
    col = xp.arange(w, dtype=x.dtype).reshape(1, 1, 1, w)
    row = xp.arange(h, dtype=x.dtype).reshape(1, 1, h, 1)
    anc = xp.asarray(np.asarray(anchors, dtype=x.dtype).reshape(1, a, 2))
    cx = (col + sig[:, :, 0] * dt(scale) + dt(bias)) * img_w / dt(h)
    cy = (row + sig[:, :, 1] * dt(scale) + dt(bias)) * img_h / dt(h)
    # e^tw may overflow to inf as in Paddle's kernel (a kept box reports it); the boxes
    # under conf_thresh are zeroed below whatever they hold
    with np.errstate(over="ignore"):
        bw = xp.exp(t[:, :, 2]) * anc[:, :, 0, None, None] * img_w / dt(ratio * h)
        bh = xp.exp(t[:, :, 3]) * anc[:, :, 1, None, None] * img_h / dt(ratio * h)
    x1, y1, x2, y2 = cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2
    if bool(attrs.get("clip_bbox", True)):
        zero = dt(0)
        x1, y1 = xp.where(x1 > 0, x1, zero), xp.where(y1 > 0, y1, zero)
        x2 = xp.where(x2 < img_w - 1, x2, img_w - 1)
        y2 = xp.where(y2 < img_h - 1, y2, img_h - 1)
    # where(), not a product: a skipped box stays 0 even where e^tw overflowed
    boxes = xp.where(keep[..., None], xp.stack([x1, y1, x2, y2], axis=-1), dt(0))
    scores = conf[:, :, None] * _sigmoid(xp, t[:, :, 5:])  # [N, A, cls, H, W]
    scores = xp.where(keep[..., None], xp.moveaxis(scores, 2, -1), dt(0))
    return {"Boxes": [boxes.reshape(n, a * h * w, 4).astype(x.dtype, copy=False)],
            "Scores": [scores.reshape(n, a * h * w, cls).astype(x.dtype, copy=False)]}


# -- yolov3_loss (Paddle 1.8's detection/yolov3_loss_op.h) ----------------------------------------
# X [N, M·(5 + C), H, W] (M = len(anchor_mask), H == W), GTBox [N, B, 4] (cx, cy, w, h as
# fractions of the image), GTLabel [N, B] int, GTScore [N, B] (1 without it). A GT box with w or
# h < 1e-6 is padding (GTMatchMask -1). Each valid box takes the anchor (of all `anchors`) whose
# centred IoU with it is largest (the first strict maximum); when that anchor is in anchor_mask
# (at mask index m, else GTMatchMask = -1) the cell (int(x·W), int(y·H)) of anchor m is a
# positive: Loss += score·(2 − w·h)·(SCE(tx) + SCE(ty) + |tw − ·| + |th − ·|) + score·Σ_c
# SCE(class c, label smoothed by min(1/C, 1/40) when use_label_smooth). The objectness mask
# starts at 0, is −1 where the decoded prediction's best IoU with a valid GT box exceeds
# ignore_thresh, then takes each positive's score (the later GT box wins a shared cell); the
# objectness loss is SCE(obj, 1)·mask where mask > 1e-5, SCE(obj, 0) where mask > −0.5.
# The host computes the GT geometry (small); the predictions' IoUs and the losses are xp arrays.
# The gradient kernel, like Paddle's, assigns (not adds) each positive's gradient, so with two
# GT boxes on one cell and anchor only the later one's gradient is kept.

_YOLO3_ATTRS = {"anchors": [], "anchor_mask": [], "class_num": 1, "ignore_thresh": 0.7,
                "downsample_ratio": 32, "use_label_smooth": True, "scale_x_y": 1.0}


def _sce(xp: Any, x: Any, label: Any) -> Any:
    """Paddle's SigmoidCrossEntropy: max(x, 0) − x·label + log(1 + e^−|x|)."""
    return xp.maximum(x, 0) - x * label + xp.log(1.0 + xp.exp(-xp.abs(x)))


def _overlap(c1: Any, w1: Any, c2: Any, w2: Any, xp: Any) -> Any:
    return (xp.minimum(c1 + w1 / 2.0, c2 + w2 / 2.0)
            - xp.maximum(c1 - w1 / 2.0, c2 - w2 / 2.0))


def _iou(xp: Any, a: tuple, b: tuple) -> Any:
    """Paddle's CalcBoxIoU of (x, y, w, h) centre boxes (0 when they do not overlap)."""
    ow = _overlap(a[0], a[2], b[0], b[2], xp)
    oh = _overlap(a[1], a[3], b[1], b[3], xp)
    inter = xp.where((ow < 0) | (oh < 0), 0.0, ow * oh)
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def _yolo3_geometry(ins: dict, attrs: dict, op: str) -> SimpleNamespace:
    """The checked shapes and attributes and the host-side GT geometry."""
    x, box, label = ins["X"][0], ins["GTBox"][0], ins["GTLabel"][0]
    score = (ins.get("GTScore") or [None])[0]
    anchors = _yolo_anchors(op, attrs)
    mask = [int(m) for m in np.asarray(_or_empty(attrs.get("anchor_mask"))).reshape(-1)]
    cls = int(attrs.get("class_num", 1))
    a = len(anchors) // 2
    if not mask or any(not 0 <= m < a for m in mask):
        raise ValueError(f"{op}: anchor_mask must be a non-empty list of anchor indices in "
                         f"[0, {a}), got {mask}")
    if cls <= 0:
        raise ValueError(f"{op}: class_num must be > 0, got {cls}")
    if x.ndim != 4 or x.shape[2] != x.shape[3]:
        raise ValueError(f"{op}: Input(X) must be 4-D NCHW with H == W, got shape "
                         f"{list(x.shape)}")
    if x.shape[1] != len(mask) * (5 + cls):
        raise ValueError(f"{op}: Input(X) must have len(anchor_mask) * (5 + class_num) = "
                         f"{len(mask) * (5 + cls)} channels, got {x.shape[1]}")
    if box.ndim != 3 or box.shape[2] != 4 or box.shape[0] != x.shape[0]:
        raise ValueError(f"{op}: Input(GTBox) must be [N, B, 4] with N = {x.shape[0]}, got "
                         f"{list(box.shape)}")
    if tuple(label.shape) != tuple(box.shape[:2]):
        raise ValueError(f"{op}: Input(GTLabel) must be [N, B] = {list(box.shape[:2])}, got "
                         f"{list(label.shape)}")
    if score is not None and tuple(score.shape) != tuple(box.shape[:2]):
        raise ValueError(f"{op}: Input(GTScore) must be [N, B] = {list(box.shape[:2])}, got "
                         f"{list(score.shape)}")
    n, _, h, w = x.shape
    dt = np.dtype(x.dtype).type
    input_size = int(attrs.get("downsample_ratio", 32)) * h
    g = to_host(box).astype(dt)
    gx, gy, gw, gh = g[..., 0], g[..., 1], g[..., 2], g[..., 3]
    valid = ~((gw < 1e-6) | (gh < 1e-6))
    # the best anchor of each GT box: both centred at 0; IoU rounded to float as in Paddle
    aw = np.asarray(anchors[0::2], dt) / dt(input_size)
    ah = np.asarray(anchors[1::2], dt) / dt(input_size)
    best_iou = np.zeros(gw.shape, dt)
    best_n = np.zeros(gw.shape, np.int64)
    zero = np.zeros_like(gw)
    with np.errstate(invalid="ignore", divide="ignore"):
        for k in range(a):
            iou = _iou(np, (zero, zero, aw[k], ah[k]), (zero, zero, gw, gh))
            iou = iou.astype(np.float32).astype(dt)
            better = iou > best_iou
            best_iou = np.where(better, iou, best_iou)
            best_n = np.where(better, k, best_n)
    lookup = np.full(a, -1, np.int64)
    for m_idx, m in reversed(list(enumerate(mask))):
        lookup[m] = m_idx  # GetMaskIndex: the first position of the anchor in the mask
    return SimpleNamespace(
        x=x, n=n, h=h, w=w, b=box.shape[1], cls=cls, anchors=anchors, mask=mask, dt=dt,
        input_size=input_size, gx=gx, gy=gy, gw=gw, gh=gh, valid=valid, best_n=best_n,
        match=np.where(valid, lookup[best_n], -1).astype(np.int32),
        label=to_host(label).astype(np.int64),
        score=np.ones(gw.shape, dt) if score is None else to_host(score).astype(dt))


def _yolo3_positives(geo: SimpleNamespace, match: np.ndarray) -> SimpleNamespace:
    """The positive GT boxes (GTMatchMask >= 0) in (image, box) order, with their cell and
    their regression targets (host arrays in X's dtype)."""
    dt = geo.dt
    ii, tt = np.nonzero(match >= 0)
    gx, gy, gw, gh = geo.gx[ii, tt], geo.gy[ii, tt], geo.gw[ii, tt], geo.gh[ii, tt]
    gi = (gx * dt(geo.w)).astype(np.int64)  # static_cast<int>: truncation
    gj = (gy * dt(geo.h)).astype(np.int64)
    cell = gj * geo.w + gi
    if len(cell) and (cell.min() < 0 or cell.max() >= geo.h * geo.w):
        bad = int(np.flatnonzero((cell < 0) | (cell >= geo.h * geo.w))[0])
        raise ValueError(f"yolov3_loss: GT box {int(tt[bad])} of image {int(ii[bad])} has its "
                         f"centre ({gx[bad]}, {gy[bad]}) outside the image (centres must be "
                         "in [0, 1))")
    an = geo.best_n[ii, tt]
    aw = np.asarray(geo.anchors[0::2], dt)[an]
    ah = np.asarray(geo.anchors[1::2], dt)[an]
    with np.errstate(divide="ignore"):
        tw = np.log(gw * dt(geo.input_size) / aw)
        th = np.log(gh * dt(geo.input_size) / ah)
    score = geo.score[ii, tt]
    return SimpleNamespace(
        ii=ii, tt=tt, m=match[ii, tt].astype(np.int64), cell=cell,
        tx=gx * dt(geo.h) - gi, ty=gy * dt(geo.h) - gj, tw=tw, th=th,
        lscale=(dt(2.0) - gw * gh) * score, score=score, label=geo.label[ii, tt])


def _label_targets(geo: SimpleNamespace, labels: np.ndarray, use_smooth: bool) -> np.ndarray:
    dt = geo.dt
    pos, neg = dt(1.0), dt(0.0)
    if use_smooth:
        smooth = dt(min(1.0 / dt(geo.cls), 1.0 / 40))
        pos, neg = dt(1.0) - smooth, smooth
    return np.where(labels[:, None] == np.arange(geo.cls)[None, :], pos, neg).astype(dt)


def _last_per_cell(pos: SimpleNamespace, mask_num: int, hw: int) -> np.ndarray:
    """Positions (into the positives) of the last GT box of each (image, anchor, cell)."""
    key = (pos.ii * mask_num + pos.m) * hw + pos.cell
    _, first_rev = np.unique(key[::-1], return_index=True)
    return np.sort(len(key) - 1 - first_rev)


@register("yolov3_loss", ("X", "GTBox", "GTLabel", "GTScore"),
          ("Loss", "ObjectnessMask", "GTMatchMask"), _YOLO3_ATTRS, optional=("GTScore",),
          grad=grad_maker(("X", "GTBox", "GTLabel", "GTScore", "ObjectnessMask",
                           "GTMatchMask"), ("Loss",), ("X",)))
def yolov3_loss(ins: dict, attrs: dict, outs: tuple) -> dict:
    """YOLOv3's loss per image (see the section comment): Loss [N], ObjectnessMask
    [N, M, H, W] and GTMatchMask [N, B] int32."""
    geo = _yolo3_geometry(ins, attrs, "yolov3_loss")
    x, dt, n, h, w, mnum = geo.x, geo.dt, geo.n, geo.h, geo.w, len(geo.mask)
    xp = array_module(x)
    hw = h * w
    t = x.reshape(n, mnum, 5 + geo.cls, hw)
    # -- the ignore mask: each prediction's best IoU with the valid GT boxes
    scale = float(np.float32(attrs.get("scale_x_y", 1.0)))
    bias = float(np.float32(-0.5 * (scale - 1.0)))
    col = xp.asarray(np.tile(np.arange(w, dtype=dt), h))[None, None, :]
    row = xp.asarray(np.repeat(np.arange(h, dtype=dt), w))[None, None, :]
    anc = np.asarray(geo.anchors, dt).reshape(-1, 2)[geo.mask]
    aw = xp.asarray(anc[:, 0])[None, :, None]
    ah = xp.asarray(anc[:, 1])[None, :, None]
    sig_xy = _sigmoid(xp, t[:, :, 0:2])
    px = (col + sig_xy[:, :, 0] * dt(scale) + dt(bias)) / dt(h)
    py = (row + sig_xy[:, :, 1] * dt(scale) + dt(bias)) / dt(h)
    pw = xp.exp(t[:, :, 2]) * aw / dt(geo.input_size)
    ph = xp.exp(t[:, :, 3]) * ah / dt(geo.input_size)
    obj = xp.zeros((n, mnum, hw), dtype=x.dtype)
    if geo.b:
        g = [xp.asarray(v)[:, None, None, :] for v in (geo.gx, geo.gy, geo.gw, geo.gh)]
        iou = _iou(xp, (px[..., None], py[..., None], pw[..., None], ph[..., None]), g)
        ok = xp.asarray(geo.valid)[:, None, None, :] & (iou > 0)
        best = xp.where(ok, iou, dt(0)).max(axis=-1)
        thresh = dt(np.float32(attrs.get("ignore_thresh", 0.7)))
        obj = xp.where(best > thresh, dt(-1), obj)
    # -- the positives: location and class losses, then their objectness score
    pos = _yolo3_positives(geo, geo.match)
    loss = xp.zeros(n, dtype=x.dtype)
    if len(pos.ii):
        ii, m, cell = (xp.asarray(v) for v in (pos.ii, pos.m, pos.cell))
        pred = t[ii, m, :, cell]  # [P, 5 + C]
        lscale = xp.asarray(pos.lscale)
        per = (_sce(xp, pred[:, 0], xp.asarray(pos.tx)) * lscale
               + _sce(xp, pred[:, 1], xp.asarray(pos.ty)) * lscale
               + xp.abs(xp.asarray(pos.tw) - pred[:, 2]) * lscale
               + xp.abs(xp.asarray(pos.th) - pred[:, 3]) * lscale)
        lab = xp.asarray(_label_targets(geo, pos.label, bool(attrs.get("use_label_smooth",
                                                                        True))))
        per = per + (_sce(xp, pred[:, 5:], lab) * xp.asarray(pos.score)[:, None]).sum(axis=1)
        onehot = xp.asarray((pos.ii[None, :] == np.arange(n)[:, None]).astype(dt))
        loss = loss + onehot @ per
        last = _last_per_cell(pos, mnum, hw)
        obj[xp.asarray(pos.ii[last]), xp.asarray(pos.m[last]),
            xp.asarray(pos.cell[last])] = xp.asarray(pos.score[last])
    # -- the objectness loss
    xo = t[:, :, 4]
    obj_loss = xp.where(obj > dt(1e-5), _sce(xp, xo, dt(1.0)) * obj,
                        xp.where(obj > dt(-0.5), _sce(xp, xo, dt(0.0)), dt(0)))
    loss = loss + obj_loss.reshape(n, -1).sum(axis=1)
    return {"Loss": [loss.astype(x.dtype, copy=False)],
            "ObjectnessMask": [obj.reshape(n, mnum, h, w)],
            "GTMatchMask": [xp.asarray(geo.match)]}


@register("yolov3_loss_grad",
          *grad_slots(("X", "GTBox", "GTLabel", "GTScore", "ObjectnessMask", "GTMatchMask"),
                      ("Loss",), ("X",)), _YOLO3_ATTRS, optional=("GTScore",))
def yolov3_loss_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX of yolov3_loss, Paddle's way: the objectness channel from ObjectnessMask, and each
    positive of GTMatchMask assigns its location and class gradients (the later GT box of a
    shared cell wins)."""
    geo = _yolo3_geometry(ins, attrs, "yolov3_loss_grad")
    x, dt, n, h, w, mnum = geo.x, geo.dt, geo.n, geo.h, geo.w, len(geo.mask)
    xp = array_module(x)
    dloss = ins["Loss" + GRAD][0]
    if dloss is None:
        return {"X" + GRAD: [xp.zeros_like(x)]}
    hw = h * w
    t = x.reshape(n, mnum, 5 + geo.cls, hw)
    dx = xp.zeros_like(t)
    dl = dloss.reshape(n).astype(x.dtype, copy=False)
    obj = ins["ObjectnessMask"][0].reshape(n, mnum, hw)
    sig_o = _sigmoid(xp, t[:, :, 4])
    dl3 = dl[:, None, None]
    dx[:, :, 4] = xp.where(obj > dt(1e-5), (sig_o - 1.0) * obj * dl3,
                           xp.where(obj > dt(-0.5), sig_o * dl3, dt(0)))
    match = to_host(ins["GTMatchMask"][0]).astype(np.int64)
    pos = _yolo3_positives(geo, match)
    if len(pos.ii):
        last = _last_per_cell(pos, mnum, hw)
        ii, m, cell = (xp.asarray(v[last]) for v in (pos.ii, pos.m, pos.cell))
        pred = t[ii, m, :, cell]  # [P, 5 + C]
        g = dl[ii]
        ls = xp.asarray(pos.lscale[last]) * g
        sig = _sigmoid(xp, pred)
        grad = xp.empty_like(pred)
        grad[:, 0] = (sig[:, 0] - xp.asarray(pos.tx[last])) * ls
        grad[:, 1] = (sig[:, 1] - xp.asarray(pos.ty[last])) * ls
        grad[:, 2] = xp.where(pred[:, 2] > xp.asarray(pos.tw[last]), dt(1), dt(-1)) * ls
        grad[:, 3] = xp.where(pred[:, 3] > xp.asarray(pos.th[last]), dt(1), dt(-1)) * ls
        grad[:, 4] = dx[ii, m, 4, cell]  # the objectness channel is set above
        lab = xp.asarray(_label_targets(geo, pos.label[last],
                                        bool(attrs.get("use_label_smooth", True))))
        grad[:, 5:] = (sig[:, 5:] - lab) * (xp.asarray(pos.score[last]) * g)[:, None]
        dx[ii, m, :, cell] = grad
    return {"X" + GRAD: [dx.reshape(x.shape)]}
