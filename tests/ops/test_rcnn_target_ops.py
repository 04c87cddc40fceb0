"""generate_proposal_labels and generate_mask_labels kernels against numpy ports of Paddle's
unit-test references (python/paddle/fluid/tests/unittests/test_generate_proposal_labels_op.py
and test_generate_mask_labels_op.py), and on (strict) CuPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_fluid.ops.rcnn_target_ops import poly2mask
from dask_fluid.ops.registry import LOD_KEY

from . import run_op

# ---------------------------------------------------------------------------------------------
# generate_proposal_labels: Paddle's unit-test reference (use_random=False, no cascade)


def _ref_overlaps(roi_boxes, gt_boxes):
    w1 = np.maximum(roi_boxes[:, 2] - roi_boxes[:, 0] + 1, 0)
    h1 = np.maximum(roi_boxes[:, 3] - roi_boxes[:, 1] + 1, 0)
    w2 = np.maximum(gt_boxes[:, 2] - gt_boxes[:, 0] + 1, 0)
    h2 = np.maximum(gt_boxes[:, 3] - gt_boxes[:, 1] + 1, 0)
    area1, area2 = w1 * h1, w2 * h2
    overlaps = np.zeros((roi_boxes.shape[0], gt_boxes.shape[0]))
    for i in range(roi_boxes.shape[0]):
        for j in range(gt_boxes.shape[0]):
            iw = max(min(roi_boxes[i, 2], gt_boxes[j, 2]) - max(roi_boxes[i, 0], gt_boxes[j, 0])
                     + 1, 0)
            ih = max(min(roi_boxes[i, 3], gt_boxes[j, 3]) - max(roi_boxes[i, 1], gt_boxes[j, 1])
                     + 1, 0)
            inter = iw * ih
            overlaps[i, j] = inter / (area1[i] + area2[j] - inter)
    return overlaps


def _ref_box_to_delta(ex, gt, w):
    ex_w, ex_h = ex[:, 2] - ex[:, 0] + 1, ex[:, 3] - ex[:, 1] + 1
    gt_w, gt_h = gt[:, 2] - gt[:, 0] + 1, gt[:, 3] - gt[:, 1] + 1
    dx = (gt[:, 0] + 0.5 * gt_w - ex[:, 0] - 0.5 * ex_w) / ex_w / w[0]
    dy = (gt[:, 1] + 0.5 * gt_h - ex[:, 1] - 0.5 * ex_h) / ex_h / w[1]
    return np.vstack([dx, dy, np.log(gt_w / ex_w) / w[2], np.log(gt_h / ex_h) / w[3]]).T


def _ref_sample_rois(rpn_rois, gt_classes, is_crowd, gt_boxes, im_info, batch, fg_fraction,
                     fg_thresh, bg_hi, bg_lo, weights, class_nums, is_cls_agnostic):
    fg_per_im = int(np.round(fg_fraction * batch))
    im_scale = im_info[2]
    rpn_rois = rpn_rois * (1.0 / im_scale)
    boxes = np.vstack([gt_boxes, rpn_rois])
    gt_overlaps = np.zeros((boxes.shape[0], class_nums))
    box_to_gt = np.zeros(boxes.shape[0], dtype=np.int32)
    ov = _ref_overlaps(boxes, gt_boxes)
    argmax, omax = ov.argmax(axis=1), ov.max(axis=1)
    pos = np.where(omax > 0)[0]
    gt_overlaps[pos, gt_classes[argmax[pos]]] = omax[pos]
    box_to_gt[pos] = argmax[pos]
    gt_overlaps[np.where(is_crowd)[0]] = -1.0
    max_overlaps = gt_overlaps.max(axis=1)
    max_classes = gt_overlaps.argmax(axis=1)
    fg_inds = np.where(max_overlaps >= fg_thresh)[0]
    n_fg = min(fg_per_im, fg_inds.shape[0])
    fg_inds = fg_inds[:n_fg]
    bg_inds = np.where((max_overlaps < bg_hi) & (max_overlaps >= bg_lo))[0]
    bg_inds = bg_inds[:min(batch - n_fg, bg_inds.shape[0])]
    keep = np.append(fg_inds, bg_inds)
    labels = max_classes[keep]
    labels[n_fg:] = 0
    sampled = boxes[keep]
    gts = gt_boxes[box_to_gt[keep]]
    gts[n_fg:, :] = gt_boxes[0]
    deltas = _ref_box_to_delta(sampled, gts, np.asarray(weights))
    width = 4 * (2 if is_cls_agnostic else class_nums)
    targets = np.zeros((len(keep), width))
    inside = np.zeros((len(keep), width))
    for i in np.where(labels > 0)[0]:
        c = 1 if is_cls_agnostic else int(labels[i])
        targets[i, 4 * c:4 * c + 4] = deltas[i]
        inside[i, 4 * c:4 * c + 4] = 1.0
    return sampled * im_scale, labels, targets, inside, (inside > 0).astype(inside.dtype)


def _gen_boxes(rng, image_size, n):
    xywh = rng.random((n, 4))
    xy1 = xywh[:, [0, 1]] * image_size
    xy2 = xy1 + xywh[:, [2, 3]] * (np.asarray(image_size) - xy1)
    boxes = np.hstack([xy1, xy2])
    boxes[:, [0, 2]] = np.minimum(image_size[0] - 1.0, np.maximum(0.0, boxes[:, [0, 2]]))
    boxes[:, [1, 3]] = np.minimum(image_size[1] - 1.0, np.maximum(0.0, boxes[:, [1, 3]]))
    return boxes.astype(np.float32)


def _gpl_data(seed=0, gt_nums=(6, 4), proposal_nums=(200, 150), class_nums=81,
              scales=(0.8, 1.5)):
    rng = np.random.default_rng(seed)
    shapes = [[64, 64], [80, 48]]
    rois, gts, classes, crowds = [], [], [], []
    for i, (ng, nr) in enumerate(zip(gt_nums, proposal_nums, strict=True)):
        rois.append(_gen_boxes(rng, shapes[i], nr))
        gts.append(_gen_boxes(rng, shapes[i], ng))
        classes.append(rng.integers(1, class_nums, ng).astype(np.int32))
        c = np.zeros(ng, np.int32)
        c[0] = 1
        crowds.append(c)
    im_info = np.array([[s[0], s[1], sc] for s, sc in zip(shapes, scales, strict=True)],
                       np.float32)
    return rois, gts, classes, crowds, im_info


def _offsets(parts):
    return tuple(np.cumsum([0] + [len(p) for p in parts]).tolist())


def _gpl_run(rois, gts, classes, crowds, im_info, **attrs):
    r_lod, g_lod = _offsets(rois), _offsets(gts)
    ins = {"RpnRois": [np.concatenate(rois)], "GtClasses": [np.concatenate(classes)[:, None]],
           "IsCrowd": [np.concatenate(crowds)[:, None]], "GtBoxes": [np.concatenate(gts)],
           "ImInfo": [im_info]}
    lods = {"RpnRois": [(r_lod,)], "GtClasses": [(g_lod,)], "IsCrowd": [(g_lod,)],
            "GtBoxes": [(g_lod,)], "ImInfo": [None]}
    return run_op("generate_proposal_labels", ins, {**attrs, "_lods": lods})


_GPL = {"batch_size_per_im": 100, "fg_fraction": 0.25, "fg_thresh": 0.5, "bg_thresh_hi": 0.5,
        "bg_thresh_lo": 0.0, "bbox_reg_weights": [0.1, 0.1, 0.2, 0.2], "class_nums": 81,
        "use_random": False, "is_cls_agnostic": False, "is_cascade_rcnn": False}


@pytest.mark.parametrize("case", [
    {},
    {"batch_size_per_im": 512, "fg_fraction": 0.25, "is_cls_agnostic": True, "class_nums": 2},
    {"batch_size_per_im": 40, "fg_fraction": 0.5, "fg_thresh": 0.3, "bg_thresh_hi": 0.3,
     "bg_thresh_lo": 0.05, "bbox_reg_weights": [1.0, 1.0, 1.0, 1.0]},
])
def test_generate_proposal_labels_matches_paddle_reference(case):
    attrs = {**_GPL, **case}
    data = _gpl_data()
    res = _gpl_run(*data, **attrs)
    rois, gts, classes, crowds, im_info = data
    refs = [_ref_sample_rois(rois[i], classes[i], crowds[i], gts[i], im_info[i],
                             attrs["batch_size_per_im"], attrs["fg_fraction"],
                             attrs["fg_thresh"], attrs["bg_thresh_hi"], attrs["bg_thresh_lo"],
                             attrs["bbox_reg_weights"],
                             # the data has 81 classes; agnostic targets are 2 wide
                             81 if attrs["is_cls_agnostic"] else attrs["class_nums"],
                             attrs["is_cls_agnostic"]) for i in range(2)]
    names = ("Rois", "LabelsInt32", "BboxTargets", "BboxInsideWeights", "BboxOutsideWeights")
    for k, name in enumerate(names):
        want = np.concatenate([r[k] for r in refs])
        got = res[name][0]
        if name == "LabelsInt32":
            assert got.dtype == np.int32 and got.shape == (len(want), 1)
            np.testing.assert_array_equal(got[:, 0], want)
        else:
            assert got.dtype == np.float32, name
            # the reference multiplies by 1 / im_scale where Paddle divides: float32 rounding
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
        assert res[LOD_KEY][name] == [(_offsets([r[0] for r in refs]),)]
    n_fg = (res["LabelsInt32"][0] > 0).sum()
    assert 0 < n_fg < len(res["LabelsInt32"][0])  # both kinds are exercised


def test_generate_proposal_labels_float64_and_empty_image():
    rois, gts, classes, crowds, im_info = _gpl_data()
    rois = [rois[0].astype(np.float64), np.zeros((0, 4)), rois[1].astype(np.float64)]
    gts = [gts[0], gts[0][:2], gts[1]]
    classes = [classes[0], classes[0][:2], classes[1]]
    crowds = [crowds[0], crowds[0][:2], crowds[1]]
    im_info = np.concatenate([im_info[:1], im_info[:1], im_info[1:]])
    res = _gpl_run(rois, [g.astype(np.float64) for g in gts], classes, crowds, im_info, **_GPL)
    assert res["Rois"][0].dtype == np.float64 and res["BboxTargets"][0].dtype == np.float64
    lod = res[LOD_KEY]["Rois"][0][0]
    assert lod[1] == lod[2] and len(lod) == 4  # the image without rpn rois gets no rows


def _sample_sets(res):
    lod = res[LOD_KEY]["Rois"][0][0]
    out = []
    for i in range(len(lod) - 1):
        rows = res["Rois"][0][lod[i]:lod[i + 1]]
        lbl = res["LabelsInt32"][0][lod[i]:lod[i + 1], 0]
        out.append(([tuple(r) for r in rows[lbl > 0]], [tuple(r) for r in rows[lbl == 0]]))
    return out


def test_generate_proposal_labels_use_random_is_a_seeded_valid_sample():
    data = _gpl_data(gt_nums=(6, 5), proposal_nums=(300, 300))
    attrs = {**_GPL, "batch_size_per_im": 64, "fg_fraction": 0.05, "fg_thresh": 0.2,
             "bg_thresh_hi": 0.5, "bg_thresh_lo": 0.0}
    # every candidate: a batch large enough to keep all foregrounds and all backgrounds
    every = _sample_sets(_gpl_run(*data, **{**attrs, "batch_size_per_im": 10 ** 6,
                                            "fg_fraction": 0.5}))
    first = _gpl_run(*data, **attrs)
    runs = [_gpl_run(*data, **{**attrs, "use_random": True, "_rng": np.random.default_rng(s)})
            for s in (3, 3, 4)]
    for name in ("Rois", "LabelsInt32", "BboxTargets"):
        np.testing.assert_array_equal(runs[0][name][0], runs[1][name][0])
    assert not np.array_equal(runs[0]["Rois"][0], runs[2]["Rois"][0])
    assert not np.array_equal(runs[0]["Rois"][0], first["Rois"][0])
    fg_per_im = math.floor(64 * 0.05)
    for run in runs:
        for (fg, bg), (all_fg, all_bg) in zip(_sample_sets(run), every, strict=True):
            assert len(fg) == min(fg_per_im, len(all_fg)) and len(all_fg) > fg_per_im
            assert len(bg) == min(64 - len(fg), len(all_bg))
            assert set(fg) <= set(all_fg) and len(set(fg)) == len(fg)
            assert set(bg) <= set(all_bg) and len(set(bg)) == len(bg)


def test_generate_proposal_labels_errors():
    data = _gpl_data()
    with pytest.raises(NotImplementedError, match=r"is_cascade_rcnn=True"):
        _gpl_run(*data, **{**_GPL, "is_cascade_rcnn": True})
    with pytest.raises(ValueError, match="class_nums"):
        _gpl_run(*data, **{**_GPL, "class_nums": 10 ** 0})
    with pytest.raises(ValueError, match="fg_fraction"):
        _gpl_run(*data, **{**_GPL, "fg_fraction": 1.5})
    rois, gts, classes, crowds, im_info = data
    with pytest.raises(ValueError, match="no gt boxes"):
        _gpl_run(rois, [gts[0], gts[1][:0]], classes[:1] + [classes[1][:0]],
                 crowds[:1] + [crowds[1][:0]], im_info, **_GPL)
    with pytest.raises(ValueError, match="needs 1 level of LoD"):
        run_op("generate_proposal_labels", {"RpnRois": [rois[0]], "GtClasses": [classes[0]],
                                            "IsCrowd": [crowds[0]], "GtBoxes": [gts[0]],
                                            "ImInfo": [im_info]}, _GPL)


# ---------------------------------------------------------------------------------------------
# generate_mask_labels: Paddle's unit-test reference


def _ref_decode(cnts, m):
    v, mask = 0, []
    for j in range(m):
        mask.extend([v] * cnts[j])
        v = 1 - v
    return mask


def _ref_poly2mask(xy, k, h, w):
    scale = 5.0
    x = [int(scale * p + 0.5) for p in xy[::2]]
    x = x + [x[0]]
    y = [int(scale * p + 0.5) for p in xy[1::2]]
    y = y + [y[0]]
    u, v = [], []
    for j in range(k):
        xs, xe, ys, ye = x[j], x[j + 1], y[j], y[j + 1]
        dx, dy = abs(xe - xs), abs(ys - ye)
        flip = (dx >= dy and xs > xe) or (dx < dy and ys > ye)
        if flip:
            xs, xe = xe, xs
            ys, ye = ye, ys
        if dx >= dy:
            s = 0 if dx == 0 else float(ye - ys) / dx
            ts = [dx - d if flip else d for d in range(dx + 1)]
            u.extend([xs + t for t in ts])
            v.extend([int(ys + s * t + 0.5) for t in ts])
        else:
            s = 0 if dy == 0 else float(xe - xs) / dy
            ts = [dy - d if flip else d for d in range(dy + 1)]
            v.extend([t + ys for t in ts])
            u.extend([int(xs + s * t + 0.5) for t in ts])
    k = len(u)
    x = np.zeros(k, np.int_)
    y = np.zeros(k, np.int_)
    m = 0
    for j in range(1, k):
        if u[j] != u[j - 1]:
            xd = float(u[j] if (u[j] < u[j - 1]) else (u[j] - 1))
            xd = (xd + 0.5) / scale - 0.5
            if math.floor(xd) != xd or xd < 0 or xd > (w - 1):
                continue
            yd = float(v[j] if v[j] < v[j - 1] else v[j - 1])
            yd = (yd + 0.5) / scale - 0.5
            yd = math.ceil(0 if yd < 0 else (h if yd > h else yd))
            x[m], y[m] = int(xd), int(yd)
            m += 1
    k = m
    a = [int(x[i] * h + y[i]) for i in range(k)]
    a.append(h * w)
    a.sort()
    b = [0] + a[:len(a) - 1]
    a = [c - d for (c, d) in zip(a, b, strict=True)]
    k += 1
    b = [0 for _ in range(k)]
    b[0] = a[0]
    m, j = 1, 1
    while j < k:
        if a[j] > 0:
            b[m] = a[j]
            m += 1
            j += 1
        else:
            j += 1
            if j < k:
                b[m - 1] += a[j]
                j += 1
    return np.array(_ref_decode(b, m), dtype=np.int_).reshape((w, h)).T


def _ref_polys_to_boxes(polys):
    boxes = np.zeros((len(polys), 4), dtype=np.float32)
    for i, poly in enumerate(polys):
        boxes[i] = [min(min(p[::2]) for p in poly), min(min(p[1::2]) for p in poly),
                    max(max(p[::2]) for p in poly), max(max(p[1::2]) for p in poly)]
    return boxes


def _ref_bbox_overlaps(boxes, query):
    out = np.zeros((boxes.shape[0], query.shape[0]), dtype=boxes.dtype)
    for k in range(query.shape[0]):
        area = (query[k, 2] - query[k, 0] + 1) * (query[k, 3] - query[k, 1] + 1)
        for n in range(boxes.shape[0]):
            iw = min(boxes[n, 2], query[k, 2]) - max(boxes[n, 0], query[k, 0]) + 1
            if iw > 0:
                ih = min(boxes[n, 3], query[k, 3]) - max(boxes[n, 1], query[k, 1]) + 1
                if ih > 0:
                    ua = float((boxes[n, 2] - boxes[n, 0] + 1) * (boxes[n, 3] - boxes[n, 1] + 1)
                               + area - iw * ih)
                    out[n, k] = iw * ih / ua
    return out


def _ref_polys_to_mask_wrt_box(polygons, box, m):
    w = np.maximum(box[2] - box[0], 1)
    h = np.maximum(box[3] - box[1], 1)
    masks = []
    for poly in polygons:
        p = np.array(poly, dtype=np.float32)
        p[0::2] = (p[0::2] - box[0]) * m / w
        p[1::2] = (p[1::2] - box[1]) * m / h
        masks.append(_ref_poly2mask(p, p.shape[0] // 2, m, m))
    return np.array(np.sum(np.array(masks), axis=0) > 0, dtype=np.float32)


def _ref_sample_mask(num_classes, im_info, gt_classes, is_crowd, labels, gt_polys, res, rois):
    inds = np.where((gt_classes > 0) & (is_crowd == 0))[0]
    polys_gt = [gt_polys[i] for i in inds]
    boxes_from_polys = _ref_polys_to_boxes(polys_gt)
    fg = np.where(labels > 0)[0]
    has_mask = fg.copy()
    if fg.shape[0] > 0:
        cls = labels[fg]
        masks = np.zeros((fg.shape[0], res ** 2), dtype=np.int32)
        rois_fg = rois[fg]
        best = np.argmax(_ref_bbox_overlaps(rois_fg.astype(np.float32), boxes_from_polys),
                         axis=1)
        for i in range(rois_fg.shape[0]):
            mask = _ref_polys_to_mask_wrt_box(polys_gt[best[i]], rois_fg[i], res)
            masks[i, :] = np.reshape(np.array(mask > 0, dtype=np.int32), res ** 2)
    else:
        bg = np.where(labels == 0)[0]
        rois_fg = rois[bg[0]].reshape((1, -1))
        masks = -np.ones((1, res ** 2), dtype=np.int32)
        cls = np.zeros((1,))
        has_mask = np.append(has_mask, 0)
    target = -np.ones((masks.shape[0], num_classes * res ** 2), dtype=np.int32)
    for i in range(masks.shape[0]):
        c = int(cls[i])
        if c > 0:
            target[i, res ** 2 * c:res ** 2 * (c + 1)] = masks[i, :]
    return rois_fg * im_info[2], has_mask, target


def _gml_data(seed=0, batch=2, per_im=64, num_classes=81, shape=(100, 200)):
    """The unit test's data: image 0 has only background rois (the empty case)."""
    rng = np.random.default_rng(seed)
    rois, labels = [], []
    for b in range(batch):
        for _ in range(per_im):
            xywh = rng.random(4)
            xy1 = xywh[0:2] * 2
            xy2 = xy1 + xywh[2:4] * (shape[0] - xy1)
            rois.append([xy1[0], xy1[1], xy2[0], xy2[1]])
            labels.append(0 if b == 0 else int(rng.integers(1, num_classes)))
    h, w = shape
    flat, polys_list, lod0, lod1, lod2 = [], [], [], [], []
    for _ in range(batch):
        gt_num = int(rng.integers(1, 4))
        lod0.append(gt_num)
        ptss = []
        for _ in range(gt_num):
            poly_num = int(rng.integers(1, 5))
            lod1.append(poly_num)
            pts = []
            for _ in range(poly_num):
                size = int(rng.integers(4, 16))
                xy = np.concatenate((rng.random((size, 1)) * w, rng.random((size, 1)) * h), 1)
                xy = xy.astype(np.float32)
                pts.append(xy.flatten().tolist())
                flat.extend(xy.flatten().tolist())
                lod2.append(size)
            ptss.append(pts)
        polys_list.append(ptss)
    gt_classes = rng.integers(1, num_classes, sum(lod0))
    return dict(rois=np.array(rois, np.float32), labels=np.array(labels, np.int32),
                rois_lens=[per_im] * batch, polys=polys_list,
                segms=np.array(flat, np.float32).reshape(-1, 2), lens=(lod0, lod1, lod2),
                gt_classes=gt_classes.astype(np.int32), crowd=np.zeros(sum(lod0), np.int32),
                im_info=np.array([[shape[0], shape[1], 1.0]] * batch, np.float32))


def _lens_to_offsets(lens):
    return tuple(np.cumsum([0] + list(lens)).tolist())


def _gml_run(d, num_classes=81, resolution=14):
    r_lod = _lens_to_offsets(d["rois_lens"])
    g_lod = _lens_to_offsets(d["lens"][0])
    s_lod = tuple(_lens_to_offsets(level) for level in d["lens"])
    ins = {"ImInfo": [d["im_info"]], "GtClasses": [d["gt_classes"][:, None]],
           "IsCrowd": [d["crowd"][:, None]], "GtSegms": [d["segms"]], "Rois": [d["rois"]],
           "LabelsInt32": [d["labels"][:, None]]}
    lods = {"ImInfo": [None], "GtClasses": [(g_lod,)], "IsCrowd": [(g_lod,)],
            "GtSegms": [s_lod], "Rois": [(r_lod,)], "LabelsInt32": [(r_lod,)]}
    return run_op("generate_mask_labels", ins,
                  {"num_classes": num_classes, "resolution": resolution, "_lods": lods})


def _gml_ref(d, num_classes=81, resolution=14):
    r_lod = _lens_to_offsets(d["rois_lens"])
    g_lod = _lens_to_offsets(d["lens"][0])
    outs = [_ref_sample_mask(num_classes, d["im_info"][i],
                             d["gt_classes"][g_lod[i]:g_lod[i + 1]],
                             d["crowd"][g_lod[i]:g_lod[i + 1]],
                             d["labels"][r_lod[i]:r_lod[i + 1]], d["polys"][i], resolution,
                             d["rois"][r_lod[i]:r_lod[i + 1]]) for i in range(len(r_lod) - 1)]
    return (np.vstack([o[0] for o in outs]), np.hstack([o[1] for o in outs])[:, None],
            np.vstack([o[2] for o in outs]), _lens_to_offsets([len(o[0]) for o in outs]))


@pytest.mark.parametrize("seed, resolution", [(0, 14), (1, 7), (2, 28)])
def test_generate_mask_labels_is_bit_exact_with_paddle_reference(seed, resolution):
    d = _gml_data(seed)
    res = _gml_run(d, resolution=resolution)
    rois, has_mask, masks, lod = _gml_ref(d, resolution=resolution)
    assert res["MaskRois"][0].dtype == np.float32
    np.testing.assert_array_equal(res["MaskRois"][0], rois)
    assert res["RoiHasMaskInt32"][0].dtype == np.int32
    np.testing.assert_array_equal(res["RoiHasMaskInt32"][0], has_mask)
    assert res["MaskInt32"][0].dtype == np.int32
    assert res["MaskInt32"][0].shape == (len(rois), 81 * resolution ** 2)
    np.testing.assert_array_equal(res["MaskInt32"][0], masks)
    for name in ("MaskRois", "RoiHasMaskInt32", "MaskInt32"):
        assert res[LOD_KEY][name] == [(lod,)]
    assert (masks == 1).any() and (masks == 0).any()  # real rasterised masks


def test_generate_mask_labels_scale_crowd_and_background_class():
    d = _gml_data(5)
    d["im_info"][:, 2] = 2.0
    d["crowd"][0] = 1
    d["gt_classes"][-1] = 0
    res = _gml_run(d)
    # Paddle rasterises in the original image's frame (rois / im_scale): the reference, which
    # does not divide, given the divided rois and scale 1
    ref_d = dict(d, rois=(d["rois"] / np.float32(2.0)).astype(np.float32),
                 im_info=d["im_info"] * np.array([1, 1, 0.5], np.float32))
    _, has_mask, masks, _ = _gml_ref(ref_d)
    np.testing.assert_array_equal(res["MaskInt32"][0], masks)
    np.testing.assert_array_equal(res["RoiHasMaskInt32"][0], has_mask)
    np.testing.assert_allclose(res["MaskRois"][0],
                               d["rois"][np.ravel(has_mask) + np.repeat([0, 64], [1, 64])],
                               rtol=1e-6)


def test_poly2mask_matches_reference_on_degenerate_polygons():
    rng = np.random.default_rng(7)
    polys = [np.array([0.5, 0.5, 3.2, 0.5, 3.2, 3.9], np.float32),
             np.array([1.0, 1.0, 1.0, 1.0, 5.0, 1.0, 5.0, 6.0], np.float32),  # repeated point
             np.array([-2.0, -2.0, 20.0, -1.0, 9.0, 25.0], np.float32),  # beyond the grid
             (rng.random(30) * 12).astype(np.float32)]
    for p in polys:
        np.testing.assert_array_equal(poly2mask(p, 10, 12), _ref_poly2mask(p, len(p) // 2, 10, 12))


def test_generate_mask_labels_errors():
    d = _gml_data(0)
    with pytest.raises(TypeError, match="float32"):
        _gml_run(dict(d, rois=d["rois"].astype(np.float64)))
    with pytest.raises(ValueError, match="resolution"):
        _gml_run(d, resolution=0)
    with pytest.raises(ValueError, match="out of range for num_classes"):
        _gml_run(d, num_classes=3)
    bad = dict(d, lens=(d["lens"][0], d["lens"][1], d["lens"][2][:-1] + [d["lens"][2][-1] + 1]))
    with pytest.raises(ValueError, match="3-level LoD"):
        _gml_run(bad)


# ---------------------------------------------------------------------------------------------
# CuPy in, CuPy out (strict CuPy refuses implicit host copies)


def _same(cp, gpu, cpu):
    assert set(gpu) == set(cpu)
    for slot, vals in cpu.items():
        if slot == LOD_KEY:
            assert gpu[slot] == vals
            continue
        assert isinstance(gpu[slot][0], cp.ndarray), slot
        assert gpu[slot][0].dtype == vals[0].dtype, slot
        np.testing.assert_array_equal(cp.asnumpy(gpu[slot][0]), vals[0], err_msg=slot)


def _to(cp, ins):
    return {k: [cp.asarray(v[0])] for k, v in ins.items()}


def test_rcnn_targets_on_cupy(device_xp):
    cp = device_xp
    rois, gts, classes, crowds, im_info = _gpl_data()
    g_lod, r_lod = _offsets(gts), _offsets(rois)
    ins = {"RpnRois": [np.concatenate(rois)], "GtClasses": [np.concatenate(classes)[:, None]],
           "IsCrowd": [np.concatenate(crowds)[:, None]], "GtBoxes": [np.concatenate(gts)],
           "ImInfo": [im_info]}
    lods = {"RpnRois": [(r_lod,)], "GtClasses": [(g_lod,)], "IsCrowd": [(g_lod,)],
            "GtBoxes": [(g_lod,)], "ImInfo": [None]}
    for use_random in (False, True):
        attrs = {**_GPL, "use_random": use_random, "_lods": lods}
        cpu = run_op("generate_proposal_labels", ins, {**attrs, "_rng": np.random.default_rng(1)})
        gpu = run_op("generate_proposal_labels", _to(cp, ins),
                     {**attrs, "_rng": np.random.default_rng(1)})
        _same(cp, gpu, cpu)
    d = _gml_data(3)
    r_lod = _lens_to_offsets(d["rois_lens"])
    g_lod = _lens_to_offsets(d["lens"][0])
    ins = {"ImInfo": [d["im_info"]], "GtClasses": [d["gt_classes"][:, None]],
           "IsCrowd": [d["crowd"][:, None]], "GtSegms": [d["segms"]], "Rois": [d["rois"]],
           "LabelsInt32": [d["labels"][:, None]]}
    attrs = {"num_classes": 81, "resolution": 14,
             "_lods": {"ImInfo": [None], "GtClasses": [(g_lod,)], "IsCrowd": [(g_lod,)],
                       "GtSegms": [tuple(_lens_to_offsets(v) for v in d["lens"])],
                       "Rois": [(r_lod,)], "LabelsInt32": [(r_lod,)]}}
    _same(cp, run_op("generate_mask_labels", _to(cp, ins), attrs),
          run_op("generate_mask_labels", ins, attrs))
