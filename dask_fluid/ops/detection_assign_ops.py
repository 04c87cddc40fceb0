"""Target-assignment, evaluation and transform kernels of Fluid 1.8's layers/detection.py:
rpn_target_assign, retinanet_target_assign, retinanet_detection_output,
generate_proposal_labels, generate_mask_labels, roi_perspective_transform, detection_map."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .registry import GRAD, LOD_KEY, array_module, register, to_host
from .roi_ops import _offsets
from .selected_rows import grad_maker, grad_slots, scatter_add

# -- roi_perspective_transform (Paddle 1.8's detection/roi_perspective_transform_op.cc/.cu) -----
# Each ROI is a quadrilateral (x0, y0, ..., x3, y3) (top-left, top-right, bottom-right,
# bottom-left) mapped onto a transformed_height × transformed_width grid by the perspective
# matrix of get_transform_matrix; an output pixel whose source point lies inside the quad and
# the feature map is the bilinear sample of X there (Mask 1), any other is 0 (Mask 0). The
# sampling geometry is worked out on the host in X's dtype with Paddle's 1e-4 tolerances; the
# gathers run on X's device. Out2InIdx / Out2InWeights are the CUDA kernel's [numel(Out), 4]
# flat X indices (-1 where the pixel is not sampled) and bilinear weights; the grad op
# scatters dOut through them as Paddle's CUDA grad kernel does (its CPU kernel recomputes the
# same weights per input pixel; the sums are the same, added in the same (roi, h, w) order).

_RPT_ATTRS = {"spatial_scale": 1.0, "transformed_height": 1, "transformed_width": 1}
_RPT_EPS = 1e-4


def _gte(a: Any, b: Any) -> Any:
    return (a > b) | (np.abs(a - b) < _RPT_EPS)


def _lte(a: Any, b: Any) -> Any:
    return (a < b) | (np.abs(a - b) < _RPT_EPS)


def _rpt_matrix(qx: np.ndarray, qy: np.ndarray, th: int, tw: int, t: type) -> np.ndarray:
    """Paddle's get_transform_matrix for one quad (coordinates already scaled), in dtype t."""
    x0, x1, x2, x3 = (t(v) for v in qx)
    y0, y1, y2, y3 = (t(v) for v in qy)

    def dist(ax: Any, ay: Any, bx: Any, by: Any) -> Any:
        return t(np.sqrt((ax - bx) * (ax - bx) + (ay - by) * (ay - by)))

    est_h = t((dist(x1, y1, x2, y2) + dist(x3, y3, x0, y0)) / 2.0)
    est_w = t((dist(x0, y0, x1, y1) + dist(x2, y2, x3, y3)) / 2.0)
    nh = max(2, th)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(est_w * t(nh - 1) / est_h)
    if not math.isfinite(ratio):
        raise ValueError("roi_perspective_transform: an ROI has zero estimated height "
                         f"(quad x {qx.tolist()}, y {qy.tolist()}); Paddle's width estimate "
                         "is undefined for it")
    nw = max(2, min(int(math.floor(ratio + 0.5)) + 1, tw))  # std::round: half away from 0
    dx1, dx2, dx3 = x1 - x2, x3 - x2, x0 - x1 + x2 - x3
    dy1, dy2, dy3 = y1 - y2, y3 - y2, y0 - y1 + y2 - y3
    den = float(dx1 * dy2 - dx2 * dy1) + 1e-5  # the 1e-5 literal is a double in Paddle
    m = np.zeros(9, dtype=t)
    m[6] = t(float(dx3 * dy2 - dx2 * dy3) / den / (nw - 1))
    m[7] = t(float(dx1 * dy3 - dx3 * dy1) / den / (nh - 1))
    m[8] = t(1)
    m[3] = (y1 - y0 + m[6] * t(nw - 1) * y1) / t(nw - 1)
    m[4] = (y3 - y0 + m[7] * t(nh - 1) * y3) / t(nh - 1)
    m[5] = y0
    m[0] = (x1 - x0 + m[6] * t(nw - 1) * x1) / t(nw - 1)
    m[1] = (x3 - x0 + m[7] * t(nh - 1) * x3) / t(nh - 1)
    m[2] = x0
    return m


def _rpt_in_quad(x: np.ndarray, y: np.ndarray, qx: np.ndarray, qy: np.ndarray) -> np.ndarray:
    """Paddle's in_quad on arrays of points: on an edge (within 1e-4) or an odd crossing count."""
    inside = np.zeros(x.shape, dtype=bool)
    for i in range(4):
        xs, ys, xe, ye = qx[i], qy[i], qx[(i + 1) % 4], qy[(i + 1) % 4]
        if abs(ys - ye) < _RPT_EPS:
            inside |= ((np.abs(y - ys) < _RPT_EPS) & (np.abs(y - ye) < _RPT_EPS)
                       & _gte(x, min(xs, xe)) & _lte(x, max(xs, xe)))
        else:
            ix = (y - ys) * (xe - xs) / (ye - ys) + xs
            inside |= (np.abs(ix - x) < _RPT_EPS) & _gte(y, min(ys, ye)) & _lte(y, max(ys, ye))
    crossings = np.zeros(x.shape, dtype=np.int64)
    for i in range(4):
        xs, ys, xe, ye = qx[i], qy[i], qx[(i + 1) % 4], qy[(i + 1) % 4]
        if abs(ys - ye) < _RPT_EPS:
            continue
        live = ~(_lte(y, min(ys, ye)) | ((y - max(ys, ye)) > _RPT_EPS))
        ix = (y - ys) * (xe - xs) / (ye - ys) + xs
        inside |= live & (np.abs(ix - x) < _RPT_EPS)
        crossings += live & ((ix - x) > _RPT_EPS)
    return inside | (crossings % 2 == 1)


def _rpt_sampling(rois: np.ndarray, h: int, w: int, th: int, tw: int, scale: float,
                  t: type) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per ROI: the transform matrices [R, 9], the sampled-pixel mask [R, th, tw] and the four
    bilinear corners (flat h·W + w indices) and weights [R, th, tw, 4] (Paddle's v1..v4 order:
    (floor, floor), (ceil_h, floor_w), (ceil, ceil), (floor_h, ceil_w))."""
    r = rois.shape[0]
    mats = np.zeros((r, 9), dtype=t)
    mask = np.zeros((r, th, tw), dtype=bool)
    corners = np.zeros((r, th, tw, 4), dtype=np.int64)
    weights = np.zeros((r, th, tw, 4), dtype=t)
    oh, ow = np.meshgrid(np.arange(th, dtype=t), np.arange(tw, dtype=t), indexing="ij")
    for n in range(r):
        qx = (rois[n, 0::2] * t(scale)).astype(t)
        qy = (rois[n, 1::2] * t(scale)).astype(t)
        m = _rpt_matrix(qx, qy, th, tw, t)
        mats[n] = m
        with np.errstate(divide="ignore", invalid="ignore"):
            den = m[6] * ow + m[7] * oh + m[8]
            sx = (m[0] * ow + m[1] * oh + m[2]) / den
            sy = (m[3] * ow + m[4] * oh + m[5]) / den
            ok = _rpt_in_quad(sx, sy, qx, qy)
            ok &= ~(_gte(t(-0.5), sx) | _gte(sx, t(w - 0.5)) | _gte(t(-0.5), sy)
                    | _gte(sy, t(h - 0.5)))
        sx = np.where(ok, sx, 0).astype(t)
        sy = np.where(ok, sy, 0).astype(t)
        sx = np.where(_gte(t(0), sx), t(0), sx)
        sy = np.where(_gte(t(0), sy), t(0), sy)
        wf, hf = np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64)
        w_edge, h_edge = wf >= w - 1, hf >= h - 1
        wf, hf = np.where(w_edge, w - 1, wf), np.where(h_edge, h - 1, hf)
        wc, hc = np.where(w_edge, wf, wf + 1), np.where(h_edge, hf, hf + 1)
        sx, sy = np.where(w_edge, wf.astype(t), sx), np.where(h_edge, hf.astype(t), sy)
        fw, fh = (sx - wf).astype(t), (sy - hf).astype(t)
        cw, ch = (t(1) - fw).astype(t), (t(1) - fh).astype(t)
        corners[n] = np.stack([hf * w + wf, hc * w + wf, hc * w + wc, hf * w + wc], axis=-1)
        weights[n] = np.stack([cw * ch, cw * fh, fw * fh, fw * ch], axis=-1)
        mask[n] = ok
    corners[~mask] = -1
    weights[~mask] = 0
    return mats, mask, corners, weights


def _rpt_check(op: str, x: Any, rois: Any, attrs: dict) -> tuple[int, int, float]:
    if x.ndim != 4:
        raise ValueError(f"{op}: Input(X) must be NCHW (4-D), got shape {list(x.shape)}")
    if rois.ndim != 2 or rois.shape[1] != 8:
        raise ValueError(f"{op}: Input(ROIs) must be a 2-D LoDTensor of shape (num_rois, 8) "
                         f"given as [[x0, y0, x1, y1, x2, y2, x3, y3], ...], got shape "
                         f"{list(rois.shape)}")
    th, tw = int(attrs["transformed_height"]), int(attrs["transformed_width"])
    scale = float(attrs["spatial_scale"])
    if th <= 0 or tw <= 0:
        raise ValueError(f"{op}: transformed_height and transformed_width must be greater than "
                         f"0, got {th} and {tw}")
    if not scale > 0:
        raise ValueError(f"{op}: spatial_scale must be greater than 0, got {scale}")
    return th, tw, scale


@register("roi_perspective_transform", ("X", "ROIs"),
          ("Out", "Mask", "TransformMatrix", "Out2InIdx", "Out2InWeights"), _RPT_ATTRS,
          lod="kernel",
          grad=grad_maker(("X", "ROIs", "Out2InIdx", "Out2InWeights"), ("Out",), ("X",)))
def roi_perspective_transform(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[r, c] = the perspective warp of ROI r's quad of X[image of r, c] onto a
    transformed_height × transformed_width grid (bilinear sampling, 0 outside the quad or the
    map); Mask [R, 1, th, tw] int32, TransformMatrix [R, 9]; Out keeps the ROIs' LoD."""
    x, rois = ins["X"][0], ins["ROIs"][0]
    xp = array_module(x)
    op = "roi_perspective_transform"
    th, tw, scale = _rpt_check(op, x, rois, attrs)
    n, c, h, w = (int(d) for d in x.shape)
    r = int(rois.shape[0])
    offsets = _offsets(op, ins, attrs, n, r)
    t = np.dtype(x.dtype).type
    mats, mask, corners, weights = _rpt_sampling(to_host(rois).astype(t), h, w, th, tw, scale, t)
    image = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    base = ((image[:, None] * c + np.arange(c, dtype=np.int64)[None, :]) * (h * w))
    idx = np.where(mask[:, None, :, :, None], corners[:, None] + base[:, :, None, None, None],
                   -1)  # [R, C, th, tw, 4]
    wts = np.broadcast_to(weights[:, None], idx.shape)
    idx_d = xp.asarray(np.maximum(idx, 0))
    w_d = xp.asarray(wts)
    g = x.reshape(-1)[idx_d]
    out = g[..., 0] * w_d[..., 0] + g[..., 1] * w_d[..., 1] + g[..., 2] * w_d[..., 2] \
        + g[..., 3] * w_d[..., 3]
    out = xp.where(xp.asarray(mask[:, None]), out, xp.zeros((), dtype=x.dtype))
    lod = ((attrs.get("_lods") or {}).get("ROIs") or [None])[0]
    return {"Out": [out.astype(x.dtype, copy=False)],
            "Mask": [xp.asarray(mask[:, None].astype(np.int32))],
            "TransformMatrix": [xp.asarray(mats)],
            "Out2InIdx": [xp.asarray(idx.reshape(-1, 4).astype(np.int32))],
            "Out2InWeights": [xp.asarray(np.ascontiguousarray(wts).reshape(-1, 4))],
            LOD_KEY: {"Out": [lod]} if lod else {}}


@register("roi_perspective_transform_grad",
          *grad_slots(("X", "ROIs", "Out2InIdx", "Out2InWeights"), ("Out",), ("X",)),
          _RPT_ATTRS)
def roi_perspective_transform_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX[i] = Σ dOut[o] · Out2InWeights[o, k] over the (o, k) with Out2InIdx[o, k] = i."""
    x = ins["X"][0]
    xp = array_module(x)
    dout = ins["Out" + GRAD][0]
    dx = xp.zeros(x.size, dtype=x.dtype)
    if dout is not None:
        idx = to_host(ins["Out2InIdx"][0]).astype(np.int64).reshape(-1)
        if idx.size != 4 * dout.size:
            raise ValueError("roi_perspective_transform_grad: Input(Out2InIdx) must hold 4 "
                             f"indices per element of Out ({dout.size}), got {idx.size}")
        keep = np.nonzero(idx >= 0)[0]
        contrib = (dout.reshape(-1, 1) * ins["Out2InWeights"][0].reshape(-1, 4)).reshape(-1)
        scatter_add(xp, dx, xp.asarray(idx[keep]), contrib[xp.asarray(keep)])
    return {"X" + GRAD: [dx.reshape(x.shape)]}


# -- rpn_target_assign (Paddle 1.8's detection/rpn_target_assign_op.cc, with bbox_util.h's
# BboxOverlaps / BoxToDelta: pixel boxes, widths x2 - x1 + 1) --------------------------------
# Per image: the anchors inside the image (by rpn_straddle_thresh), the non-crowd gt boxes
# times im_scale, their IoU; an anchor is foreground when it is some gt's best match (within
# 1e-5) or its best IoU >= rpn_positive_overlap, background when its best IoU <
# rpn_negative_overlap (a background draw overrides a foreground label: Paddle then keeps a
# "fake" foreground row pointing at the first sampled foreground anchor, with inside weight 0).
# With use_random, Paddle's reservoir sampling draws from a std::minstd_rand seeded by
# std::random_device on every run and passed by value (each sampling call restarts from the
# seeded state); here the seed is drawn from the executor's ``_rng`` stream when it passes one
# (else from fresh OS entropy, as Paddle) and each sampling call restarts a numpy generator
# from it, so the structure is Paddle's but the sample differs from Paddle's.

_RPN_ATTRS = {"rpn_batch_size_per_im": 256, "rpn_straddle_thresh": 0.0,
              "rpn_positive_overlap": 0.7, "rpn_negative_overlap": 0.3,
              "rpn_fg_fraction": 0.25, "use_random": True}


def _pixel_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """BboxOverlaps: IoU of pixel boxes (w = x2 - x1 + 1), 0 where they do not meet."""
    t = a.dtype.type
    one = t(1)
    area_a = (a[:, 2] - a[:, 0] + one) * (a[:, 3] - a[:, 1] + one)
    area_b = (b[:, 2] - b[:, 0] + one) * (b[:, 3] - b[:, 1] + one)
    iw = np.maximum(np.minimum(a[:, None, 2], b[None, :, 2])
                    - np.maximum(a[:, None, 0], b[None, :, 0]) + one, t(0))
    ih = np.maximum(np.minimum(a[:, None, 3], b[None, :, 3])
                    - np.maximum(a[:, None, 1], b[None, :, 1]) + one, t(0))
    inter = iw * ih
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / (area_a[:, None] + area_b[None, :] - inter)
    return np.where(inter == 0, t(0), iou).astype(t)


def _box_to_delta(ex: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """BoxToDelta without weights, unnormalised: (dx, dy, log dw, log dh) of gt from ex."""
    t = ex.dtype.type
    ex_w, ex_h = ex[:, 2] - ex[:, 0] + t(1), ex[:, 3] - ex[:, 1] + t(1)
    gt_w, gt_h = gt[:, 2] - gt[:, 0] + t(1), gt[:, 3] - gt[:, 1] + t(1)
    dx = ((gt[:, 0] + t(0.5) * gt_w) - (ex[:, 0] + t(0.5) * ex_w)) / ex_w
    dy = ((gt[:, 1] + t(0.5) * gt_h) - (ex[:, 1] + t(0.5) * ex_h)) / ex_h
    return np.stack([dx, dy, np.log(gt_w / ex_w), np.log(gt_h / ex_h)], axis=1).astype(t)


def _reservoir(num: int, inds: list[int], seed: int | None) -> list[int]:
    """Paddle's ReservoirSampling: keep ``num`` of ``inds``; with a seed (use_random) element i
    >= num replaces slot floor(u·i) when that is < num, u a float32 uniform draw from a
    generator restarted from ``seed`` (Paddle's engine is passed by value); without, the
    first ``num``. A negative ``num`` keeps everything (Paddle compares as size_t)."""
    if num < 0 or len(inds) <= num:
        return inds
    inds = list(inds)
    if seed is not None:
        gen = np.random.default_rng(seed)
        for i in range(num, len(inds)):
            k = int(np.floor(np.float32(gen.random(dtype=np.float32)) * np.float32(i)))
            if k < num:
                inds[k], inds[i] = inds[i], inds[k]
    return inds[:num]


def _run_seed(attrs: dict) -> int | None:
    if not attrs.get("use_random", True):
        return None
    rng = attrs.get("_rng")
    if rng is None:  # Paddle seeds from std::random_device on every run
        rng = np.random.default_rng()
    return int(rng.integers(0, 2 ** 31))


def _score_assign(ov: np.ndarray, batch: int, frac: float, pos: float, neg: float,
                  seed: int | None) -> tuple[list[int], list[int], list[int], list[float]]:
    """ScoreAssign: (loc rows incl. fakes, fg rows, bg rows, inside weights); no sampling
    unless ``frac > 0 and batch > 0`` (retinanet passes -1, -1)."""
    n_anchor = ov.shape[0]
    t = ov.dtype.type
    if ov.shape[1]:
        a_max, g_max = ov.max(axis=1), ov.max(axis=0)
        best = (np.abs(ov - g_max[None, :]) < np.float32(1e-5)).any(axis=1)
    else:  # no gt: Eigen's max over nothing is the lowest value
        a_max = np.full(n_anchor, -np.inf, dtype=t)
        best = np.zeros(n_anchor, dtype=bool)
    frac = float(np.float32(frac))
    sampling = frac > 0 and batch > 0
    fg_fake = [int(i) for i in np.nonzero(best | (a_max >= t(np.float32(pos))))[0]]
    if sampling:
        fg_fake = _reservoir(int(np.float32(frac) * np.float32(batch)), fg_fake, seed)
    label = np.full(n_anchor, -1, dtype=np.int64)
    label[fg_fake] = 1
    bg_fake = [int(i) for i in np.nonzero(a_max < t(np.float32(neg)))[0]]
    if sampling:
        bg_fake = _reservoir(batch - len(fg_fake), bg_fake, seed)
    loc, weights = [], []
    for i in bg_fake:
        if label[i] == 1:  # a background draw overrides a foreground: a fake fg row
            loc.append(fg_fake[0])
            weights += [0.0] * 4
        label[i] = 0
    fake = len(loc)
    weights += [1.0] * (4 * (len(fg_fake) - fake))
    fg = [int(i) for i in np.nonzero(label == 1)[0]]
    bg = [int(i) for i in np.nonzero(label == 0)[0]]
    return loc + fg, fg, bg, weights


def _gt_offsets(op: str, attrs: dict, slot: str, rows: int) -> np.ndarray:
    lods = (attrs.get("_lods") or {}).get(slot) or [None]
    lod = lods[0]
    if not lod or len(lod) != 1:
        raise ValueError(f"{op}: Input({slot}) needs 1 level of LoD (the boxes of each image), "
                         f"got {0 if not lod else len(lod)} levels")
    offsets = np.asarray(lod[0], dtype=np.int64)
    if offsets[0] != 0 or offsets[-1] != rows or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{op}: the LoD of Input({slot}) {offsets.tolist()} does not cover "
                         f"its {rows} rows")
    return offsets


def _check_boxes(op: str, name: str, a: Any, cols: int = 4) -> None:
    if a.ndim != 2 or a.shape[1] != cols:
        raise ValueError(f"{op}: Input({name}) must be 2-D with {cols} columns, got shape "
                         f"{list(a.shape)}")


def _check_im_info(op: str, im_info: Any) -> None:
    if im_info.ndim != 2 or im_info.shape[1] < 3:
        raise ValueError(f"{op}: Input(ImInfo) must be [N, 3] (height, width, scale), got shape "
                         f"{list(im_info.shape)}")


def _assign_images(op: str, ins: dict, attrs: dict, straddle: float, batch_size: int,
                   frac: float, pos: float, neg: float, seed: int | None,
                   with_labels: bool) -> dict:
    """The per-image loop of RpnTargetAssignKernel / RetinanetTargetAssignKernel."""
    anchor_d = ins["Anchor"][0]
    xp = array_module(anchor_d)
    anchor = to_host(anchor_d)
    gt = to_host(ins["GtBoxes"][0]).astype(anchor.dtype, copy=False)
    crowd = to_host(ins["IsCrowd"][0]).reshape(-1)
    im_info = to_host(ins["ImInfo"][0])
    _check_boxes(op, "Anchor", anchor)
    _check_boxes(op, "GtBoxes", gt)
    _check_im_info(op, im_info)
    g_off = _gt_offsets(op, attrs, "GtBoxes", gt.shape[0])
    c_off = _gt_offsets(op, attrs, "IsCrowd", crowd.shape[0])
    batch = len(g_off) - 1
    if not np.array_equal(g_off, c_off) or im_info.shape[0] < batch:
        raise ValueError(f"{op}: the LoD of IsCrowd {c_off.tolist()} must equal GtBoxes' "
                         f"{g_off.tolist()} (one flag per gt box) and ImInfo needs a row per "
                         f"image ({batch}), got {im_info.shape[0]}")
    gt_labels = None
    if with_labels:
        gt_labels = to_host(ins["GtLabels"][0]).reshape(-1)
        l_off = _gt_offsets(op, attrs, "GtLabels", gt_labels.shape[0])
        if not np.array_equal(g_off, l_off):
            raise ValueError(f"{op}: the LoD of GtLabels {l_off.tolist()} must equal "
                             f"GtBoxes' {g_off.tolist()} (one label per gt box)")
    t = anchor.dtype.type
    n_anchor = anchor.shape[0]
    thresh = t(np.float32(straddle))
    parts: dict[str, list] = {k: [] for k in ("loc", "score", "lbl", "bbox", "w")}
    loc_lod, score_lod = [0], [0]
    fg_nums = []
    for i in range(batch):
        im_h, im_w, im_scale = (t(v) for v in im_info[i, :3])
        if thresh >= 0:
            inside = np.nonzero((anchor[:, 0] >= -thresh) & (anchor[:, 1] >= -thresh)
                                & (anchor[:, 2] < im_w + thresh)
                                & (anchor[:, 3] < im_h + thresh))[0]
        else:
            inside = np.arange(n_anchor)
        keep = crowd[c_off[i]:c_off[i + 1]] == 0
        g = (gt[g_off[i]:g_off[i + 1]][keep] * im_scale).astype(t)
        ov = _pixel_iou(anchor[inside], g)
        loc, fg, bg, weights = _score_assign(ov, batch_size, frac, pos, neg, seed)
        argmax = ov.argmax(axis=1) if g.shape[0] else np.zeros(len(inside), np.int64)
        gt_idx = argmax[np.asarray(loc, dtype=np.int64)]
        loc_anchor = inside[np.asarray(loc, dtype=np.int64)]
        parts["bbox"].append(_box_to_delta(anchor[loc_anchor], g[gt_idx]) if loc
                             else np.zeros((0, 4), t))
        parts["loc"].append(loc_anchor + i * n_anchor)
        parts["score"].append(inside[np.asarray(fg + bg, dtype=np.int64)] + i * n_anchor)
        fg_lbl = np.ones(len(fg), np.int64)
        if gt_labels is not None and fg:  # retinanet: the class of the matched gt
            fg_lbl = gt_labels[g_off[i]:g_off[i + 1]][keep][argmax[np.asarray(fg)]]
        parts["lbl"].append(np.concatenate([fg_lbl, np.zeros(len(bg), np.int64)]))
        parts["w"].append(np.asarray(weights, dtype=t).reshape(-1, 4))
        loc_lod.append(loc_lod[-1] + len(loc))
        score_lod.append(score_lod[-1] + len(fg) + len(bg))
        fg_nums.append(len(loc) + 1)

    def cat(key: str, shape: tuple, dtype: Any) -> Any:
        if not parts[key]:
            return xp.asarray(np.zeros((0, *shape[1:]), dtype))
        return xp.asarray(np.concatenate(parts[key]).astype(dtype).reshape(shape))

    lod_l, lod_s = (tuple(loc_lod),), (tuple(score_lod),)
    res = {"LocationIndex": [cat("loc", (-1,), np.int32)],
           "ScoreIndex": [cat("score", (-1,), np.int32)],
           "TargetBBox": [cat("bbox", (-1, 4), t)],
           "TargetLabel": [cat("lbl", (-1, 1), np.int32)],
           "BBoxInsideWeight": [cat("w", (-1, 4), t)],
           LOD_KEY: {"LocationIndex": [lod_l], "ScoreIndex": [lod_s], "TargetBBox": [lod_l],
                     "TargetLabel": [lod_s], "BBoxInsideWeight": [lod_l]}}
    if with_labels:
        res["ForegroundNumber"] = [xp.asarray(np.asarray(fg_nums, np.int32).reshape(-1, 1))]
        res[LOD_KEY]["ForegroundNumber"] = [(tuple(range(batch + 1)),)]
    return res


@register("rpn_target_assign", ("Anchor", "GtBoxes", "IsCrowd", "ImInfo"),
          ("LocationIndex", "ScoreIndex", "TargetBBox", "TargetLabel", "BBoxInsideWeight"),
          _RPN_ATTRS, lod="kernel")
def rpn_target_assign(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Samples RPN foreground/background anchors per image: LocationIndex [F] int32 (into the
    N·A anchors of the batch), ScoreIndex [F + B] int32, TargetBBox [F, 4] deltas, TargetLabel
    [F + B, 1] int32 (1 then 0), BBoxInsideWeight [F, 4]; each has one LoD level per image."""
    return _assign_images("rpn_target_assign", ins, attrs, attrs["rpn_straddle_thresh"],
                          int(attrs["rpn_batch_size_per_im"]), attrs["rpn_fg_fraction"],
                          attrs["rpn_positive_overlap"], attrs["rpn_negative_overlap"],
                          _run_seed(attrs), with_labels=False)


# -- retinanet_target_assign (same file): every anchor, no straddle filter, no sampling; a
# foreground's label is its matched gt's class; ForegroundNumber [N, 1] = rows of
# LocationIndex per image + 1 (Paddle's guard against a zero divisor).

@register("retinanet_target_assign", ("Anchor", "GtBoxes", "GtLabels", "IsCrowd", "ImInfo"),
          ("LocationIndex", "ScoreIndex", "TargetBBox", "TargetLabel", "BBoxInsideWeight",
           "ForegroundNumber"), {"positive_overlap": 0.5, "negative_overlap": 0.4},
          lod="kernel")
def retinanet_target_assign(ins: dict, attrs: dict, outs: tuple) -> dict:
    """RetinaNet targets: as rpn_target_assign over all anchors without sampling, TargetLabel
    the gt class (foreground) or 0, plus ForegroundNumber [N, 1] int32."""
    return _assign_images("retinanet_target_assign", ins, attrs, -1.0, -1, -1.0,
                          attrs["positive_overlap"], attrs["negative_overlap"], None,
                          with_labels=True)


# -- retinanet_detection_output (Paddle 1.8's detection/retinanet_detection_output_op.cc) ------
# Per image and FPN level: the (anchor, class) scores above score_threshold (0 for the last
# level), the nms_top_k best (stable sort), decoded against the level's anchors (pixel boxes,
# no variances), scaled back by im_scale and clipped to round(im / scale) - 1; then per class
# a greedy NMS (pixel IoU, adaptive eta), the keep_top_k best over all classes (sorted by the
# score as a float, stable) as rows [class + 1, score, x1, y1, x2, y2] with one LoD level.

_RDO_ATTRS = {"score_threshold": 0.05, "nms_top_k": 1000, "nms_threshold": 0.3,
              "nms_eta": 1.0, "keep_top_k": 100}


def _pixel_jaccard(b1: np.ndarray, b2: np.ndarray) -> Any:
    """JaccardOverlap with normalized=false: 0 when the boxes do not meet, widths + 1."""
    if b2[0] > b1[2] or b2[2] < b1[0] or b2[1] > b1[3] or b2[3] < b1[1]:
        return b1.dtype.type(0)
    t = b1.dtype.type
    iw = min(b1[2], b2[2]) - max(b1[0], b2[0]) + t(1)
    ih = min(b1[3], b2[3]) - max(b1[1], b2[1]) + t(1)
    inter = iw * ih

    def area(b: np.ndarray) -> Any:
        if b[2] < b[0] or b[3] < b[1]:
            return t(0)
        return (b[2] - b[0] + t(1)) * (b[3] - b[1] + t(1))

    return inter / (area(b1) + area(b2) - inter)


def _stable_desc(keys: np.ndarray) -> np.ndarray:
    return np.argsort(-keys, kind="stable")


def _nms_fast(dets: np.ndarray, threshold: Any, eta: Any) -> list[int]:
    """NMSFast over rows [x1, y1, x2, y2, score]: the kept rows, best first."""
    selected: list[int] = []
    adaptive = threshold
    for idx in _stable_desc(dets[:, 4]):
        keep = True
        for kept in selected:
            if _pixel_jaccard(dets[idx], dets[kept]) > adaptive:
                keep = False
                break
        if keep:
            selected.append(int(idx))
            if eta < 1 and adaptive > 0.5:
                adaptive = adaptive * eta
    return selected


def _rdo_image(scores: list, boxes: list, anchors: list, info: np.ndarray, attrs: dict,
               t: type) -> np.ndarray:
    top_k, keep_top_k = int(attrs["nms_top_k"]), int(attrs["keep_top_k"])
    thresh = t(np.float32(attrs["score_threshold"]))
    im_h, im_w, im_scale = (t(v) for v in info[:3])
    im_h = t(math.floor(abs(im_h / im_scale) + 0.5) * np.sign(im_h / im_scale))  # std::round
    im_w = t(math.floor(abs(im_w / im_scale) + 0.5) * np.sign(im_w / im_scale))
    n_class = scores[0].shape[1]
    preds: dict[int, list[np.ndarray]] = {}
    for lvl, (sc, bx, an) in enumerate(zip(scores, boxes, anchors, strict=True)):
        flat = sc.reshape(-1)
        level_thresh = thresh if lvl < len(scores) - 1 else t(0)
        cand = np.nonzero(flat > level_thresh)[0]
        cand = cand[_stable_desc(flat[cand])]
        if top_k > -1:
            cand = cand[:top_k]
        a, c = cand // n_class, cand % n_class
        anc, dlt = an[a], bx[a]
        aw = anc[:, 2] - anc[:, 0] + t(1)
        ah = anc[:, 3] - anc[:, 1] + t(1)
        cx = dlt[:, 0] * aw + (anc[:, 0] + aw / t(2))
        cy = dlt[:, 1] * ah + (anc[:, 1] + ah / t(2))
        w, h = np.exp(dlt[:, 2]) * aw, np.exp(dlt[:, 3]) * ah
        x1, y1 = (cx - w / t(2)) / im_scale, (cy - h / t(2)) / im_scale
        x2, y2 = (cx + w / t(2) - t(1)) / im_scale, (cy + h / t(2) - t(1)) / im_scale
        x1, x2 = (np.maximum(np.minimum(v, im_w - t(1)), t(0)) for v in (x1, x2))
        y1, y2 = (np.maximum(np.minimum(v, im_h - t(1)), t(0)) for v in (y1, y2))
        rows = np.stack([x1, y1, x2, y2, flat[cand]], axis=1).astype(t)
        for k in range(len(cand)):
            preds.setdefault(int(c[k]), []).append(rows[k])
    picked = []  # (score as float, class, row)
    eta, nms_t = t(np.float32(attrs["nms_eta"])), t(np.float32(attrs["nms_threshold"]))
    for cls in sorted(preds):
        dets = np.stack(preds[cls])
        for idx in _nms_fast(dets, nms_t, eta):
            picked.append((np.float32(dets[idx, 4]), cls, dets[idx]))
    order = _stable_desc(np.array([p[0] for p in picked], np.float32))
    if keep_top_k > -1:  # Paddle's -1 would resize to SIZE_MAX; keep all instead
        order = order[:keep_top_k]
    out = np.zeros((len(order), 6), dtype=t)
    for r, k in enumerate(order):
        _, cls, row = picked[k]
        out[r] = [t(cls + 1), row[4], row[0], row[1], row[2], row[3]]
    return out


@register("retinanet_detection_output", ("BBoxes", "Scores", "Anchors", "ImInfo"), ("Out",),
          _RDO_ATTRS, lod="kernel")
def retinanet_detection_output(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Decodes each FPN level's top predictions and runs per-class NMS over them: Out
    [No, 6] rows [label, score, x1, y1, x2, y2] with one LoD level per image."""
    op = "retinanet_detection_output"
    boxes_d, scores_d, anchors_d = ins["BBoxes"], ins["Scores"], ins["Anchors"]
    if not boxes_d or len(boxes_d) != len(scores_d) or len(boxes_d) != len(anchors_d):
        raise ValueError(f"{op}: Input(BBoxes), Input(Scores) and Input(Anchors) must be "
                         f"non-empty lists of the same length, got {len(boxes_d)}, "
                         f"{len(scores_d)} and {len(anchors_d)}")
    xp = array_module(scores_d[0])
    boxes = [to_host(b) for b in boxes_d]
    scores = [to_host(s) for s in scores_d]
    anchors = [to_host(a) for a in anchors_d]
    info = to_host(ins["ImInfo"][0])
    for lvl, (b, s, a) in enumerate(zip(boxes, scores, anchors, strict=True)):
        if s.ndim != 3 or b.ndim != 3 or a.ndim != 2 or b.shape[2] != 4:
            raise ValueError(f"{op}: level {lvl}: Scores must be [N, M, C], BBoxes [N, M, 4] "
                             f"and Anchors [M, 4], got {list(s.shape)}, {list(b.shape)} and "
                             f"{list(a.shape)}")
        if b.shape[1] != s.shape[1] or a.shape[0] != b.shape[1]:
            raise ValueError(f"{op}: level {lvl}: BBoxes {list(b.shape)}, Scores "
                             f"{list(s.shape)} and Anchors {list(a.shape)} must agree on M")
    if info.ndim != 2:
        raise ValueError(f"{op}: the rank of Input(ImInfo) must be 2, got {list(info.shape)}")
    t = scores[0].dtype.type
    n = scores[0].shape[0]
    parts, starts = [], [0]
    for i in range(n):
        res = _rdo_image([s[i].astype(t) for s in scores], [b[i].astype(t) for b in boxes],
                         [a.astype(t) for a in anchors], info[i], attrs, t)
        parts.append(res)
        starts.append(starts[-1] + len(res))
    out = np.concatenate(parts) if parts else np.zeros((0, 6), t)
    return {"Out": [xp.asarray(out.reshape(-1, 6))], LOD_KEY: {"Out": [(tuple(starts),)]}}


# -- detection_map (Paddle 1.8's detection_map_op.h) --------------------------------------------
# Per image, each detection [label, score, x1, y1, x2, y2] (clipped to [0, 1]) of a class with
# gt in the image is matched, best score first, to its class's gt of largest (normalised) IoU:
# a true positive when IoU > overlap_threshold and that gt is not yet taken (a difficult gt,
# when difficulties are not evaluated, gives neither), else a false positive. The per-class
# (score, flag) lists and positive counts are the accumulated states (PosCount [class_num, 1]
# int32, TruePos / FalsePos [n, 2] with a LoD of one sequence per class); MAP is the mean AP
# ('integral' or VOC '11point') over the classes with positives. Paddle's quirks are kept:
# a class is skipped when its positive COUNT equals background_label, detections of one class
# are sorted with std::sort (here a stable sort: ties keep their input order), the
# accumulation sorts by the score as a float and the integral sums in float.

_MAP_ATTRS = {"class_num": 1, "background_label": 0, "overlap_threshold": 0.5,
              "evaluate_difficult": True, "ap_type": "integral"}


def _norm_iou(a: np.ndarray, b: np.ndarray) -> Any:
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return a.dtype.type(0)
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _map_lod(op: str, attrs: dict, slot: str) -> list[int]:
    lod = ((attrs.get("_lods") or {}).get(slot) or [None])[0]
    if not lod or len(lod) != 1:
        raise ValueError(f"{op}: Input({slot}) must be a LoD tensor of lod_level 1 (one "
                         f"sequence per image), got {0 if not lod else len(lod)} levels")
    return [int(v) for v in lod[0]]


def _average_precision(tp: list, fp: list, n_pos: int, ap_type: str, t: type) -> Any:
    def accumulate(pairs: list) -> list[int]:
        keys = np.array([p[0] for p in pairs], dtype=np.float32)
        return np.cumsum(np.array([p[1] for p in pairs], np.int64)[_stable_desc(keys)]).tolist()

    tp_sum, fp_sum = accumulate(tp), accumulate(fp)
    num = len(tp_sum)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = [t(tp_sum[i]) / t(tp_sum[i] + fp_sum[i]) for i in range(num)]
        recall = [t(tp_sum[i]) / t(n_pos) for i in range(num)]
    if ap_type == "11point":
        max_prec = [t(0)] * 11
        start = num - 1
        for j in range(10, -1, -1):
            for i in range(start, -1, -1):
                if recall[i] < j / 10.0:
                    start = i
                    if j > 0:
                        max_prec[j - 1] = max_prec[j]
                    break
                if max_prec[j] < precision[i]:
                    max_prec[j] = precision[i]
        ap = t(0)
        for j in range(10, -1, -1):
            ap = ap + max_prec[j] / t(11)
        return ap
    ap, prev = np.float32(0), np.float32(0)
    for i in range(num):
        if abs(recall[i] - prev) > 1e-6:
            ap = np.float32(ap + precision[i] * abs(recall[i] - t(prev)))
        prev = np.float32(recall[i])
    return t(ap)


@register("detection_map", ("DetectRes", "Label", "HasState", "PosCount", "TruePos",
                            "FalsePos"),
          ("AccumPosCount", "AccumTruePos", "AccumFalsePos", "MAP"), dict(_MAP_ATTRS),
          optional=("HasState", "PosCount", "TruePos", "FalsePos"), lod="kernel")
def detection_map(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Detection mAP of this batch, accumulated with the input states when HasState is
    non-zero: MAP [1], AccumPosCount [class_num, 1] int32, AccumTruePos / AccumFalsePos
    [n, 2] (score, flag) with one LoD sequence per class."""
    op = "detection_map"
    det_d = ins["DetectRes"][0]
    xp = array_module(det_d)
    det, label = to_host(det_d), to_host(ins["Label"][0])
    if det.ndim != 2 or det.shape[1] != 6:
        raise ValueError(f"{op}: Input(DetectRes) must be [M, 6] (label, score, x1, y1, x2, "
                         f"y2), got shape {list(det.shape)}")
    if label.ndim != 2 or label.shape[1] not in (5, 6):
        raise ValueError(f"{op}: Input(Label) must be [N, 6] (label, difficult, x1, y1, x2, "
                         f"y2) or [N, 5] (label, x1, y1, x2, y2), got shape "
                         f"{list(label.shape)}")
    ap_type = attrs["ap_type"]
    if ap_type not in ("integral", "11point"):
        raise ValueError(f"{op}: ap_type must be 'integral' or '11point', got {ap_type!r}")
    class_num = int(attrs["class_num"])
    t = det.dtype.type
    label = label.astype(t, copy=False)
    l_lod, d_lod = _map_lod(op, attrs, "Label"), _map_lod(op, attrs, "DetectRes")
    if len(l_lod) != len(d_lod):
        raise ValueError(f"{op}: the batch sizes of Input(Label) ({len(l_lod) - 1}) and "
                         f"Input(DetectRes) ({len(d_lod) - 1}) must be the same")
    pos_count: dict[int, int] = {}
    true_pos: dict[int, list] = {}
    false_pos: dict[int, list] = {}
    has_state = (ins.get("HasState") or [None])[0]
    state = int(to_host(has_state).reshape(-1)[0]) if has_state is not None else 0
    if (ins.get("PosCount") or [None])[0] is not None and state:
        counts = to_host(ins["PosCount"][0]).reshape(-1)
        for c in range(class_num):
            pos_count[c] = int(counts[c])
        for slot, store in (("TruePos", true_pos), ("FalsePos", false_pos)):
            data = to_host(ins[slot][0]).astype(t, copy=False).reshape(-1, 2)
            seq = _map_lod(op, attrs, slot)
            for c in range(len(seq) - 1):
                for j in range(seq[c], seq[c + 1]):
                    store.setdefault(c, []).append((data[j, 0], int(data[j, 1])))
    evaluate_difficult = bool(attrs["evaluate_difficult"])
    threshold = np.float32(attrs["overlap_threshold"])
    six = label.shape[1] == 6
    for n in range(len(l_lod) - 1):
        gts: dict[int, list] = {}
        for i in range(l_lod[n], l_lod[n + 1]):
            row = label[i]
            box = row[2:6] if six else row[1:5]
            difficult = bool(six and abs(row[1] - 0.0) >= 1e-6)
            gts.setdefault(int(row[0]), []).append((box, difficult))
        for c, boxes in sorted(gts.items()):
            count = len(boxes) if evaluate_difficult else sum(not d for _, d in boxes)
            if count:
                pos_count[c] = pos_count.get(c, 0) + count
        dets: dict[int, list] = {}
        for i in range(d_lod[n], d_lod[n + 1]):
            dets.setdefault(int(det[i, 0]), []).append((det[i, 1], det[i, 2:6]))
        for c, preds in sorted(dets.items()):
            tp, fp = true_pos.setdefault(c, []), false_pos.setdefault(c, [])
            if c not in gts:
                for score, _ in preds:
                    tp.append((score, 0))
                    fp.append((score, 1))
                continue
            matched = gts[c]
            visited = [False] * len(matched)
            order = _stable_desc(np.array([p[0] for p in preds], dtype=np.float32))
            for k in order:
                score = preds[k][0]
                box = np.clip(preds[k][1], t(0), t(1))
                overlaps = [_norm_iou(box, g) for g, _ in matched]
                best = int(np.argmax(overlaps))  # first of the largest (strict >)
                if overlaps[best] > threshold:
                    if evaluate_difficult or not matched[best][1]:
                        if not visited[best]:
                            tp.append((score, 1))
                            fp.append((score, 0))
                            visited[best] = True
                        else:
                            tp.append((score, 0))
                            fp.append((score, 1))
                else:
                    tp.append((score, 0))
                    fp.append((score, 1))
    m_ap, count = t(0), 0
    for c in sorted(pos_count):
        n_pos = pos_count[c]
        if n_pos == int(attrs["background_label"]):  # Paddle compares the count
            continue
        if c not in true_pos:
            count += 1
            continue
        m_ap = m_ap + _average_precision(true_pos[c], false_pos[c], n_pos, ap_type, t)
        count += 1
    if count:
        m_ap = m_ap / t(count)
    pc = np.array([pos_count.get(c, 0) for c in range(class_num)], np.int32).reshape(-1, 1)
    res = {"MAP": [xp.asarray(np.array([m_ap], dtype=t))], "AccumPosCount": [xp.asarray(pc)],
           LOD_KEY: {}}
    for slot, store in (("AccumTruePos", true_pos), ("AccumFalsePos", false_pos)):
        rows, starts = [], [0]
        for c in range(class_num):
            rows += [[s, t(f)] for s, f in store.get(c, [])]
            starts.append(len(rows))
        res[slot] = [xp.asarray(np.array(rows, dtype=t).reshape(-1, 2))]
        res[LOD_KEY][slot] = [(tuple(starts),)]
    return res
