"""Faster/Mask R-CNN training targets (Fluid 1.8's generate_proposal_labels and
generate_mask_labels).

Both are sequential host kernels in Paddle (CPU only): the per-image loops run on the host in
numpy; inputs on a GPU (CuPy) come back as CuPy outputs through ``to_host`` / ``xp.asarray``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .detection_assign_ops import (
    _box_to_delta,
    _check_boxes,
    _check_im_info,
    _gt_offsets,
    _pixel_iou,
    _run_seed,
)
from .registry import LOD_KEY, array_module, register, to_host

# -- generate_proposal_labels (Paddle's detection/generate_proposal_labels_op.cc) -------------
# Per image: the RPN rois are divided by im_scale, the gt boxes are put in front of them,
# every box takes its best gt by BboxOverlaps (pixel IoU); a box whose best IoU is >= fg_thresh
# is foreground (its first gt within 1e-5 of the best), one in [bg_thresh_lo, bg_thresh_hi)
# background; a crowd gt's own row is neither. At most floor(batch_size_per_im · fg_fraction)
# foregrounds and then batch_size_per_im minus those backgrounds are kept: the first ones, or
# with use_random Paddle's reservoir sampling. Targets are BoxToDelta(weights) of the fg boxes,
# written at the 4 columns of their class; rois go back to the input scale.

_GPL_ATTRS = {"batch_size_per_im": 256, "fg_fraction": 0.25, "fg_thresh": 0.25,
              "bg_thresh_hi": 0.5, "bg_thresh_lo": 0.0, "bbox_reg_weights": [0.1, 0.1, 0.2, 0.2],
              "class_nums": 81, "use_random": True, "is_cls_agnostic": False,
              "is_cascade_rcnn": False}


def _gpl_sample(fg: list[int], gts: list[int], bg: list[int], batch: int, frac: float,
                seed: int | None) -> tuple[list[int], list[int], list[int]]:
    """SampleFgBgGt's reservoir sampling. Paddle passes its std::minstd_rand by value into the
    per-image sampler, so every image restarts from the run's seed and its fg and bg draws
    share one stream; dask_fluid draws float32 uniforms from numpy's generator instead (the
    values differ from Paddle's, the rule is the same)."""
    fg, gts, bg = list(fg), list(gts), list(bg)
    fg_per_im = int(math.floor(np.float32(batch) * np.float32(frac)))
    n_fg = min(fg_per_im, len(fg))
    gen = np.random.default_rng(seed) if seed is not None else None
    if gen is not None and len(fg) > n_fg:
        for i in range(n_fg, len(fg)):
            k = int(np.floor(gen.random(dtype=np.float32) * np.float32(i)))
            if k < n_fg:
                fg[k], fg[i] = fg[i], fg[k]
                gts[k], gts[i] = gts[i], gts[k]
    n_bg = min(batch - n_fg, len(bg))
    if gen is not None and len(bg) > n_bg:
        for i in range(n_bg, len(bg)):
            k = int(np.floor(gen.random(dtype=np.float32) * np.float32(i)))
            # Paddle compares with the foreground count here (not n_bg); kept as Paddle does:
            # the kept slots still hold distinct background rows either way
            if k < n_fg:
                bg[k], bg[i] = bg[i], bg[k]
    return fg[:n_fg], gts[:n_fg], bg[:n_bg]


def _gpl_image(rois: np.ndarray, gt_cls: np.ndarray, crowd: np.ndarray, gt: np.ndarray,
               scale: Any, attrs: dict, seed: int | None, class_nums: int,
               image: int) -> tuple[np.ndarray, ...]:
    op = "generate_proposal_labels"
    t = rois.dtype.type
    if gt.shape[0] == 0:
        # Paddle takes std::max_element over an empty row here (undefined behaviour)
        raise ValueError(f"{op}: image {image} has rpn rois but no gt boxes; Paddle's "
                         "overlap maximum is undefined without a gt box")
    boxes = np.concatenate([gt, (rois / scale).astype(t)])
    ov = _pixel_iou(boxes, gt)
    max_ov = ov.max(axis=1)
    n_gt = gt.shape[0]
    max_ov[:n_gt][crowd != 0] = t(-1)
    fg_thresh = t(np.float32(attrs["fg_thresh"]))
    hi, lo = t(np.float32(attrs["bg_thresh_hi"])), t(np.float32(attrs["bg_thresh_lo"]))
    fg_rows = np.nonzero(max_ov >= fg_thresh)[0]
    # the first gt within 1e-5 of the row's best (a crowd row's -1 finds none: not kept)
    near = np.abs(max_ov[fg_rows, None] - ov[fg_rows]) < np.float32(1e-5)
    has = near.any(axis=1)
    fg = [int(r) for r in fg_rows[has]]
    gts = [int(g) for g in near[has].argmax(axis=1)]
    bg = [int(r) for r in np.nonzero((max_ov < fg_thresh) & (max_ov >= lo) & (max_ov < hi))[0]]
    fg, gts, bg = _gpl_sample(fg, gts, bg, int(attrs["batch_size_per_im"]),
                              attrs["fg_fraction"], seed)
    n_fg = len(fg)
    keep = np.asarray(fg + bg, dtype=np.int64)
    sampled = boxes[keep]
    labels = np.zeros(len(keep), np.int32)
    labels[:n_fg] = gt_cls[np.asarray(gts, dtype=np.int64)]
    deltas = _box_to_delta(sampled[:n_fg], gt[np.asarray(gts, dtype=np.int64)])
    weights = np.asarray(attrs["bbox_reg_weights"], np.float32).astype(t)
    deltas = (deltas / weights).astype(t)
    width = 4 * class_nums
    targets = np.zeros((len(keep), width), t)
    inside = np.zeros((len(keep), width), t)
    agnostic = bool(attrs["is_cls_agnostic"])
    for i in range(n_fg):
        lbl = int(labels[i])
        if lbl <= 0:
            continue
        if agnostic:
            lbl = 1
        if lbl >= class_nums:
            raise ValueError(f"{op}: gt class {lbl} of image {image} is out of range for "
                             f"class_nums={class_nums} (expected < class_nums)")
        targets[i, 4 * lbl:4 * lbl + 4] = deltas[i]
        inside[i, 4 * lbl:4 * lbl + 4] = t(1)
    return (sampled * scale).astype(t), labels.reshape(-1, 1), targets, inside, inside.copy()


def _check_gpl_attrs(op: str, attrs: dict) -> int:
    if attrs.get("is_cascade_rcnn"):
        raise NotImplementedError(f"{op}(is_cascade_rcnn=True) is not implemented in dask_fluid")
    class_nums = attrs.get("class_nums")
    if isinstance(class_nums, bool) or not isinstance(class_nums, int) or class_nums < 1:
        raise ValueError(f"{op}: class_nums must be a positive int, got {class_nums!r}")
    if attrs.get("is_cls_agnostic") and class_nums < 2:
        raise ValueError(f"{op}: is_cls_agnostic writes the targets at class 1, so class_nums "
                         f"must be >= 2, got {class_nums}")
    batch = attrs["batch_size_per_im"]
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        raise ValueError(f"{op}: batch_size_per_im must be a non-negative int, got {batch!r}")
    if not 0.0 <= float(attrs["fg_fraction"]) <= 1.0:
        raise ValueError(f"{op}: fg_fraction must be in [0, 1], got {attrs['fg_fraction']}")
    w = attrs["bbox_reg_weights"]
    if len(w) != 4:
        raise ValueError(f"{op}: bbox_reg_weights must have 4 values, got {list(w)}")
    return class_nums


@register("generate_proposal_labels", ("RpnRois", "GtClasses", "IsCrowd", "GtBoxes", "ImInfo"),
          ("Rois", "LabelsInt32", "BboxTargets", "BboxInsideWeights", "BboxOutsideWeights"),
          _GPL_ATTRS, lod="kernel")
def generate_proposal_labels(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Samples Fast R-CNN training rois per image: Rois [R, 4], LabelsInt32 [R, 1] int32,
    BboxTargets / BboxInsideWeights / BboxOutsideWeights [R, 4 · class_nums]; each has one LoD
    level (the rois of each image; an image without rpn rois gets none)."""
    op = "generate_proposal_labels"
    class_nums = _check_gpl_attrs(op, attrs)
    rois_d = ins["RpnRois"][0]
    xp = array_module(rois_d)
    rois = to_host(rois_d)
    if rois.dtype not in (np.float32, np.float64):
        raise TypeError(f"{op}: Input(RpnRois) must be float32 or float64, got {rois.dtype}")
    t = rois.dtype.type
    gt = to_host(ins["GtBoxes"][0]).astype(t, copy=False)
    gt_cls = to_host(ins["GtClasses"][0]).reshape(-1).astype(np.int32, copy=False)
    crowd = to_host(ins["IsCrowd"][0]).reshape(-1)
    im_info = to_host(ins["ImInfo"][0])
    _check_boxes(op, "RpnRois", rois)
    _check_boxes(op, "GtBoxes", gt)
    _check_im_info(op, im_info)
    r_off = _gt_offsets(op, attrs, "RpnRois", rois.shape[0])
    g_off = _gt_offsets(op, attrs, "GtBoxes", gt.shape[0])
    batch = len(r_off) - 1
    for slot, arr in (("GtClasses", gt_cls), ("IsCrowd", crowd)):
        off = _gt_offsets(op, attrs, slot, arr.shape[0])
        if not np.array_equal(off, g_off):
            raise ValueError(f"{op}: the LoD of {slot} {off.tolist()} must equal GtBoxes' "
                             f"{g_off.tolist()} (one value per gt box)")
    if len(g_off) - 1 != batch or im_info.shape[0] < batch:
        raise ValueError(f"{op}: RpnRois has {batch} images in its LoD, GtBoxes "
                         f"{len(g_off) - 1} and ImInfo {im_info.shape[0]} rows; they must "
                         "agree")
    seed = _run_seed(attrs)
    parts: list[tuple[np.ndarray, ...]] = []
    lod = [0]
    for i in range(batch):
        if r_off[i] == r_off[i + 1]:
            lod.append(lod[-1])
            continue
        gs = slice(g_off[i], g_off[i + 1])
        res = _gpl_image(rois[r_off[i]:r_off[i + 1]], gt_cls[gs], crowd[gs], gt[gs],
                         t(im_info[i, 2]), attrs, seed, class_nums, i)
        parts.append(res)
        lod.append(lod[-1] + res[0].shape[0])
    width = 4 * class_nums
    empty = (np.zeros((0, 4), t), np.zeros((0, 1), np.int32), np.zeros((0, width), t),
             np.zeros((0, width), t), np.zeros((0, width), t))
    cols = [np.concatenate([p[k] for p in parts]) if parts else empty[k] for k in range(5)]
    names = ("Rois", "LabelsInt32", "BboxTargets", "BboxInsideWeights", "BboxOutsideWeights")
    level = (tuple(lod),)
    out: dict = {n: [xp.asarray(c)] for n, c in zip(names, cols, strict=True)}
    out[LOD_KEY] = {n: [level] for n in names}
    return out


# -- generate_mask_labels (Paddle's detection/generate_mask_labels_op.cc, mask_util.cc) -------
# Per image: the non-crowd gts of a class > 0 keep their polygons; each fg roi (label > 0),
# divided by im_scale, takes the gt whose polygons' bounding box overlaps it most and
# rasterises those polygons in the roi's frame to resolution × resolution with COCO maskApi's
# Poly2Mask (union over the gt's polygons); the mask is written in the roi's class slot of
# [num_classes · M²], -1 elsewhere. An image without fg rois gives its first bg roi with an
# all -1 target (Paddle's "the network cannot handle empty blobs"). Paddle's kernel is float
# only; so is this one.

_GML_ATTRS = {"num_classes": 81, "resolution": 14}


def poly2mask(xy: np.ndarray, h: int, w: int) -> np.ndarray:
    """mask_util.cc's Poly2Mask (COCO maskApi rleFrPoly + rleDecode): the polygon ``xy``
    (float32 x, y pairs) rasterised to an [h, w] uint8 mask, integer arithmetic as in C."""
    k = len(xy) // 2
    scale = 5.0
    # static_cast<int>(double): truncation toward zero
    x = [int(scale * float(xy[2 * j]) + 0.5) for j in range(k)]
    y = [int(scale * float(xy[2 * j + 1]) + 0.5) for j in range(k)]
    x.append(x[0])
    y.append(y[0])
    u: list[int] = []
    v: list[int] = []
    for j in range(k):
        xs, xe, ys, ye = x[j], x[j + 1], y[j], y[j + 1]
        dx, dy = abs(xe - xs), abs(ys - ye)
        flip = (dx >= dy and xs > xe) or (dx < dy and ys > ye)
        if flip:
            xs, xe, ys, ye = xe, xs, ye, ys
        if dx >= dy:
            # a repeated (rounded) point: C computes 0/0 here and casts the NaN to int
            # (undefined behaviour); Paddle's unit-test reference takes s = 0, and so do we
            s = (ye - ys) / dx if dx else 0.0
            for d in range(dx + 1):
                tt = dx - d if flip else d
                u.append(tt + xs)
                v.append(int(ys + s * tt + 0.5))
        else:
            s = (xe - xs) / dy
            for d in range(dy + 1):
                tt = dy - d if flip else d
                v.append(tt + ys)
                u.append(int(xs + s * tt + 0.5))
    bx: list[int] = []
    by: list[int] = []
    for j in range(1, len(u)):
        if u[j] != u[j - 1]:
            xd = float(u[j] if u[j] < u[j - 1] else u[j] - 1)
            xd = (xd + 0.5) / scale - 0.5
            if math.floor(xd) != xd or xd < 0 or xd > w - 1:
                continue
            yd = float(v[j] if v[j] < v[j - 1] else v[j - 1])
            yd = (yd + 0.5) / scale - 0.5
            yd = 0.0 if yd < 0 else (float(h) if yd > h else yd)
            bx.append(int(xd))
            by.append(int(math.ceil(yd)))
    # run-length encoding of the y-boundary points (uint32 in C; all values are < h·w)
    a = sorted([bx[j] * h + by[j] for j in range(len(bx))] + [h * w])
    prev = 0
    for j in range(len(a)):
        a[j], prev = a[j] - prev, a[j]
    b = [a[0]]
    j = 1
    while j < len(a):
        if a[j] > 0:
            b.append(a[j])
            j += 1
        else:
            j += 1
            if j < len(a):
                b[-1] += a[j]
                j += 1
    flat = np.zeros(h * w, np.uint8)
    pos, val = 0, 0
    for c in b:
        flat[pos:pos + c] = val
        pos += c
        val = 1 - val
    # maskApi is column-major: the decoded runs go down the columns
    return np.ascontiguousarray(flat.reshape(w, h).T)


def _poly2boxes(polys: list[list[np.ndarray]]) -> np.ndarray:
    """Poly2Boxes: each gt's polygon bounding box; the max starts from FLT_MIN (the smallest
    positive float32, Paddle's std::numeric_limits<float>::min()), as Paddle."""
    f32 = np.float32
    boxes = np.zeros((len(polys), 4), f32)
    for i, gt_polys in enumerate(polys):
        x0 = y0 = np.finfo(f32).max
        x1 = y1 = np.finfo(f32).tiny
        for p in gt_polys:
            x0 = min(x0, f32(p[0::2].min()))
            x1 = max(x1, f32(p[0::2].max()))
            y0 = min(y0, f32(p[1::2].min()))
            y1 = max(y1, f32(p[1::2].max()))
        boxes[i] = (x0, y0, x1, y1)
    return boxes


def _polys2mask_wrt_box(polys: list[np.ndarray], box: np.ndarray, m: int) -> np.ndarray:
    """Polys2MaskWrtBox: the union of the polygons, each mapped into ``box`` (float32
    arithmetic as Paddle: (p - box0) · M / max(w, 1)), rasterised to M × M."""
    f32 = np.float32
    w = max(f32(box[2] - box[0]), f32(1))
    h = max(f32(box[3] - box[1]), f32(1))
    mask = np.zeros((m, m), np.uint8)
    for p in polys:
        q = np.empty_like(p)
        q[0::2] = (p[0::2] - box[0]) * f32(m) / w
        q[1::2] = (p[1::2] - box[1]) * f32(m) / h
        mask |= poly2mask(q, m, m)
    return mask


def _gml_image(rois: np.ndarray, labels: np.ndarray, gt_cls: np.ndarray, crowd: np.ndarray,
               polys: list[list[np.ndarray]], scale: np.float32, num_classes: int, res: int,
               image: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    op = "generate_mask_labels"
    f32 = np.float32
    keep = [i for i in range(len(gt_cls)) if gt_cls[i] > 0 and crowd[i] == 0]
    gt_polys = [polys[i] for i in keep]
    fg = np.nonzero(labels > 0)[0]
    mm = res * res
    if len(fg):
        if not gt_polys:
            # Paddle reads polygons of gt 0 of an empty list here (undefined behaviour)
            raise ValueError(f"{op}: image {image} has foreground rois but no non-crowd gt "
                             "with a class > 0 to take a mask from")
        cls = labels[fg].astype(np.int64)
        rois_fg = (rois[fg] / scale).astype(f32)
        ov = _pixel_iou(rois_fg, _poly2boxes(gt_polys))
        # Paddle's running max starts at FLT_MIN with strict '>': the first maximum, and gt 0
        # when no overlap is positive
        best = np.where(ov.max(axis=1) > np.finfo(f32).tiny, ov.argmax(axis=1), 0)
        masks = np.stack([_polys2mask_wrt_box(gt_polys[best[i]], rois_fg[i], res).reshape(-1)
                          for i in range(len(fg))])
        has_mask = fg.astype(np.int32)
    else:
        bg = np.nonzero(labels == 0)[0]
        if not len(bg):
            raise ValueError(f"{op}: image {image} has neither foreground (> 0) nor background "
                             "(0) labels; Paddle reads an uninitialised roi then")
        # Paddle copies rois_data[0..3], the image's first roi, whatever bg_inds[0] is
        rois_fg = (rois[:1] / scale).astype(f32)
        cls = np.zeros(1, np.int64)
        masks = np.zeros((1, mm), np.uint8)
        has_mask = bg[:1].astype(np.int32)
    target = np.full((len(cls), num_classes * mm), -1, np.int32)
    for i, c in enumerate(cls):
        if c > 0:
            if c >= num_classes:
                raise ValueError(f"{op}: roi label {c} of image {image} is out of range for "
                                 f"num_classes={num_classes} (expected < num_classes)")
            target[i, mm * c:mm * (c + 1)] = masks[i]
    return (rois_fg * scale).astype(f32), has_mask.reshape(-1, 1), target


@register("generate_mask_labels", ("ImInfo", "GtClasses", "IsCrowd", "GtSegms", "Rois",
                                   "LabelsInt32"),
          ("MaskRois", "RoiHasMaskInt32", "MaskInt32"), _GML_ATTRS, lod="kernel")
def generate_mask_labels(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Mask R-CNN mask targets per image: MaskRois [P, 4], RoiHasMaskInt32 [P, 1] int32 (the
    row of each mask roi in its image's Rois), MaskInt32 [P, num_classes · resolution²] int32
    (0/1 in the roi's class slot, -1 elsewhere); one LoD level per image."""
    op = "generate_mask_labels"
    num_classes, res = attrs["num_classes"], attrs["resolution"]
    for arg, v in (("num_classes", num_classes), ("resolution", res)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{op}: {arg} must be a positive int, got {v!r}")
    rois_d = ins["Rois"][0]
    xp = array_module(rois_d)
    rois = to_host(rois_d)
    segms = to_host(ins["GtSegms"][0])
    for slot, arr in (("Rois", rois), ("GtSegms", segms)):
        if arr.dtype != np.float32:  # Paddle registers the float kernel only
            raise TypeError(f"{op}: Input({slot}) must be float32 (Paddle's only kernel), got "
                            f"{arr.dtype}")
    _check_boxes(op, "Rois", rois)
    _check_boxes(op, "GtSegms", segms, cols=2)
    labels = to_host(ins["LabelsInt32"][0]).reshape(-1)
    gt_cls = to_host(ins["GtClasses"][0]).reshape(-1)
    crowd = to_host(ins["IsCrowd"][0]).reshape(-1)
    im_info = to_host(ins["ImInfo"][0])
    _check_im_info(op, im_info)
    g_off = _gt_offsets(op, attrs, "GtClasses", gt_cls.shape[0])
    c_off = _gt_offsets(op, attrs, "IsCrowd", crowd.shape[0])
    r_off = _gt_offsets(op, attrs, "Rois", rois.shape[0])
    l_off = _gt_offsets(op, attrs, "LabelsInt32", labels.shape[0])
    n = len(g_off) - 1
    if not np.array_equal(c_off, g_off):
        raise ValueError(f"{op}: the LoD of IsCrowd {c_off.tolist()} must equal GtClasses' "
                         f"{g_off.tolist()}")
    if not np.array_equal(l_off, r_off):
        raise ValueError(f"{op}: the LoD of LabelsInt32 {l_off.tolist()} must equal Rois' "
                         f"{r_off.tolist()} (one label per roi)")
    if len(r_off) - 1 != n or im_info.shape[0] < n:
        raise ValueError(f"{op}: GtClasses has {n} images in its LoD, Rois {len(r_off) - 1} "
                         f"and ImInfo {im_info.shape[0]} rows; they must agree")
    s_lod = ((attrs.get("_lods") or {}).get("GtSegms") or [None])[0]
    if not s_lod or len(s_lod) != 3:
        raise ValueError(f"{op}: Input(GtSegms) needs 3 levels of LoD (gts per image, polygons "
                         f"per gt, points per polygon), got {0 if not s_lod else len(s_lod)}")
    l0, l1, l2 = (np.asarray(level, np.int64) for level in s_lod)
    if len(l0) - 1 != n or l0[-1] != len(l1) - 1 or l1[-1] != len(l2) - 1 \
            or l2[-1] != segms.shape[0]:
        raise ValueError(f"{op}: the 3-level LoD of GtSegms does not match {n} images and its "
                         f"{segms.shape[0]} points")
    if not np.array_equal(np.diff(l0), np.diff(g_off)):
        raise ValueError(f"{op}: GtSegms has {np.diff(l0).tolist()} gts per image, GtClasses "
                         f"{np.diff(g_off).tolist()}; they must agree")
    if np.any(np.diff(l2) == 0):
        raise ValueError(f"{op}: GtSegms has an empty polygon (Paddle enforces s != e)")
    flat = segms.reshape(-1)
    parts = []
    lod = [0]
    for i in range(n):
        if r_off[i] == r_off[i + 1]:
            lod.append(lod[-1])
            continue
        polys = [[flat[2 * l2[p]:2 * l2[p + 1]] for p in range(l1[g], l1[g + 1])]
                 for g in range(l0[i], l0[i + 1])]
        gs = slice(g_off[i], g_off[i + 1])
        rs = slice(r_off[i], r_off[i + 1])
        out = _gml_image(rois[rs], labels[rs], gt_cls[gs], crowd[gs], polys,
                         np.float32(im_info[i, 2]), num_classes, res, i)
        parts.append(out)
        lod.append(lod[-1] + out[0].shape[0])
    width = num_classes * res * res
    empty = (np.zeros((0, 4), np.float32), np.zeros((0, 1), np.int32),
             np.zeros((0, width), np.int32))
    cols = [np.concatenate([p[k] for p in parts]) if parts else empty[k] for k in range(3)]
    names = ("MaskRois", "RoiHasMaskInt32", "MaskInt32")
    level = (tuple(lod),)
    result: dict = {nm: [xp.asarray(c)] for nm, c in zip(names, cols, strict=True)}
    result[LOD_KEY] = {nm: [level] for nm in names}
    return result
