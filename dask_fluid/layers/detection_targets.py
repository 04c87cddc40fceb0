"""Target-assignment and loss layers of Fluid 1.8's ``layers/detection.py`` (the kernels are
in :mod:`dask_fluid.ops.detection_target_ops`): ``sigmoid_focal_loss``, ``bipartite_match``
``target_assign``, ``yolo_box`` and ``yolov3_loss``."""

from __future__ import annotations

from collections.abc import Sequence

from ..framework import Variable
from ..layer_helper import LayerHelper
from .tensor import _check_var

__all__: list[str] = ["bipartite_match", "sigmoid_focal_loss", "target_assign",
                      "yolo_box", "yolov3_loss"]


def _dtype(v: Variable, arg: str, layer: str, dtypes: tuple[str, ...]) -> None:
    if v.dtype not in dtypes:
        raise TypeError(f"{layer}: {arg} {v.name!r} must be {' or '.join(dtypes)}, got "
                        f"{v.dtype}")


def sigmoid_focal_loss(x: Variable, label: Variable, fg_num: Variable, gamma: float = 2.0,
                       alpha: float = 0.25) -> Variable:
    """The focal loss of the sigmoid of each logit ``x [N, C]`` against the class ``label``
    ``[N, 1]`` (int32: 1..C a foreground class, 0 background, -1 ignored), divided by
    ``max(fg_num, 1)``: ``-alpha (1 - p)^gamma log p`` for the labelled class and
    ``-(1 - alpha) p^gamma log(1 - p)`` for the others; ``[N, C]`` like ``x`` (Fluid 1.8's
    ``layers.sigmoid_focal_loss``)."""
    _check_var(x, "x", "sigmoid_focal_loss")
    _check_var(label, "label", "sigmoid_focal_loss")
    _check_var(fg_num, "fg_num", "sigmoid_focal_loss")
    _dtype(x, "x", "sigmoid_focal_loss", ("float32", "float64"))
    _dtype(label, "label", "sigmoid_focal_loss", ("int32",))
    _dtype(fg_num, "fg_num", "sigmoid_focal_loss", ("int32",))
    if x.shape is not None and label.shape is not None:
        if len(x.shape) != len(label.shape):
            raise ValueError(f"sigmoid_focal_loss: x {list(x.shape)} and label "
                             f"{list(label.shape)} must have the same rank")
        if label.shape[-1] != 1:
            raise ValueError(f"sigmoid_focal_loss: the last dimension of label must be 1, got "
                             f"{list(label.shape)}")
    if fg_num.shape is not None and len(fg_num.shape) != 1:
        raise ValueError(f"sigmoid_focal_loss: fg_num must have rank 1, got "
                         f"{list(fg_num.shape)}")
    helper = LayerHelper("sigmoid_focal_loss", None)
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op("sigmoid_focal_loss",
                     inputs={"X": [x], "Label": [label], "FgNum": [fg_num]},
                     outputs={"Out": [out]}, attrs={"gamma": gamma, "alpha": alpha})
    return out


def bipartite_match(dist_matrix: Variable, match_type: str | None = None,
                    dist_threshold: float | None = None, name: str | None = None
                    ) -> tuple[Variable, Variable]:
    """Greedy bipartite matching of the columns of ``dist_matrix`` ``[K, M]`` (a LoD tensor
    whose sequences are the instances; without a LoD, one instance) to its rows, the largest
    distance first: ``(match_indices [N, M] int32, match_distance [N, M])``, -1 and 0 where a
    column is unmatched. ``match_type='per_prediction'`` then matches each free column to its
    best row whose distance is >= ``dist_threshold`` (Fluid 1.8's ``layers.bipartite_match``;
    None leaves the op's defaults 'bipartite' and 0.5)."""
    _check_var(dist_matrix, "dist_matrix", "bipartite_match")
    _dtype(dist_matrix, "dist_matrix", "bipartite_match", ("float32", "float64"))
    if match_type is not None and match_type not in ("bipartite", "per_prediction"):
        raise ValueError(f"bipartite_match: match_type must be 'bipartite' or "
                         f"'per_prediction', got {match_type!r}")
    if dist_matrix.shape is not None and len(dist_matrix.shape) != 2:
        raise ValueError(f"bipartite_match: dist_matrix must have rank 2, got "
                         f"{list(dist_matrix.shape)}")
    helper = LayerHelper("bipartite_match", name)
    # Fluid's InferShape gives both outputs DistMat's dims; at run time they are [N, M]
    shape = None if dist_matrix.shape is None else (-1, dist_matrix.shape[1])
    indices = helper.create_tmp(dtype="int32", shape=shape, stop_gradient=True)
    distance = helper.create_tmp(dtype=dist_matrix.dtype, shape=shape, stop_gradient=True)
    attrs = {k: v for k, v in (("match_type", match_type), ("dist_threshold", dist_threshold))
             if v is not None}
    helper.append_op("bipartite_match", inputs={"DistMat": [dist_matrix]},
                     outputs={"ColToRowMatchIndices": [indices],
                              "ColToRowMatchDist": [distance]}, attrs=attrs)
    return indices, distance


def target_assign(input: Variable, matched_indices: Variable,
                  negative_indices: Variable | None = None, mismatch_value: int | None = None,
                  name: str | None = None) -> tuple[Variable, Variable]:
    """Per instance ``i`` and column ``j``: ``out[i, j] = input[lod[i] + id, j % P]`` with
    weight 1 where ``id = matched_indices[i, j] > -1``, else ``mismatch_value`` with weight 0;
    the ``negative_indices`` of each instance (a LoD tensor) get ``mismatch_value`` with
    weight 1. ``input`` is a ``[*, P, K]`` LoD tensor; returns ``(out [N, M, K],
    out_weight [N, M, 1] float32)`` (Fluid 1.8's ``layers.target_assign``)."""
    _check_var(input, "input", "target_assign")
    _check_var(matched_indices, "matched_indices", "target_assign")
    _dtype(matched_indices, "matched_indices", "target_assign", ("int32",))
    if negative_indices is not None:
        _check_var(negative_indices, "negative_indices", "target_assign")
        _dtype(negative_indices, "negative_indices", "target_assign", ("int32",))
    if input.shape is not None and len(input.shape) != 3:
        raise ValueError(f"target_assign: input must have rank 3 [*, P, K], got "
                         f"{list(input.shape)}")
    if matched_indices.shape is not None and len(matched_indices.shape) != 2:
        raise ValueError(f"target_assign: matched_indices must have rank 2 [N, M], got "
                         f"{list(matched_indices.shape)}")
    helper = LayerHelper("target_assign", name)
    nm = (-1, -1) if matched_indices.shape is None else tuple(matched_indices.shape)
    k = -1 if input.shape is None else input.shape[2]
    out = helper.create_tmp(dtype=input.dtype, shape=(*nm, k))
    out_weight = helper.create_tmp(dtype="float32", shape=(*nm, 1))
    inputs = {"X": [input], "MatchIndices": [matched_indices]}
    if negative_indices is not None:
        inputs["NegIndices"] = [negative_indices]
    attrs = {} if mismatch_value is None else {"mismatch_value": int(mismatch_value)}
    helper.append_op("target_assign", inputs=inputs,
                     outputs={"Out": [out], "OutWeight": [out_weight]}, attrs=attrs)
    return out, out_weight


def yolo_box(x: Variable, img_size: Variable, anchors: Sequence[int], class_num: int,
             conf_thresh: float, downsample_ratio: int, clip_bbox: bool = True,
             name: str | None = None, scale_x_y: float = 1.0) -> tuple[Variable, Variable]:
    """Decode a YOLOv3 head ``x`` ``[N, A * (5 + class_num), H, W]`` (A = len(anchors) / 2)
    into boxes ``[N, A*H*W, 4]`` (x1, y1, x2, y2 in the pixels of ``img_size`` ``[N, 2]``
    (height, width), clipped to the image with ``clip_bbox``) and scores ``[N, A*H*W,
    class_num]`` (objectness · class probability); boxes whose objectness is below
    ``conf_thresh`` are all zeros (Fluid 1.8's ``layers.yolo_box``)."""
    _check_var(x, "x", "yolo_box")
    _check_var(img_size, "img_size", "yolo_box")
    _dtype(x, "x", "yolo_box", ("float32", "float64"))
    _dtype(img_size, "img_size", "yolo_box", ("int32",))
    if not isinstance(anchors, (list, tuple)):
        raise TypeError(f"yolo_box: anchors must be a list or tuple, got "
                        f"{type(anchors).__name__}")
    if not anchors or len(anchors) % 2:
        raise ValueError(f"yolo_box: anchors must hold (width, height) pairs, got "
                         f"{list(anchors)}")
    if not isinstance(class_num, int) or isinstance(class_num, bool) or class_num <= 0:
        raise TypeError(f"yolo_box: class_num must be a positive int, got {class_num!r}")
    if not isinstance(conf_thresh, float):
        raise TypeError(f"yolo_box: conf_thresh must be a float, got {conf_thresh!r}")
    an_num = len(anchors) // 2
    shape = None
    if x.shape is not None:
        if len(x.shape) != 4:
            raise ValueError(f"yolo_box: x must be 4-D NCHW, got {list(x.shape)}")
        c, h, w = x.shape[1:]
        if c >= 0 and c != an_num * (5 + class_num):
            raise ValueError(f"yolo_box: x must have len(anchors) / 2 * (5 + class_num) = "
                             f"{an_num * (5 + class_num)} channels, got {c}")
        shape = (x.shape[0], h * w * an_num if h >= 0 and w >= 0 else -1)
    helper = LayerHelper("yolo_box", name)
    boxes = helper.create_tmp(dtype=x.dtype, shape=None if shape is None else (*shape, 4))
    scores = helper.create_tmp(dtype=x.dtype,
                               shape=None if shape is None else (*shape, class_num))
    helper.append_op("yolo_box", inputs={"X": [x], "ImgSize": [img_size]},
                     outputs={"Boxes": [boxes], "Scores": [scores]},
                     attrs={"anchors": [int(a) for a in anchors], "class_num": class_num,
                            "conf_thresh": conf_thresh, "downsample_ratio": downsample_ratio,
                            "clip_bbox": bool(clip_bbox), "scale_x_y": float(scale_x_y)})
    return boxes, scores


def yolov3_loss(x: Variable, gt_box: Variable, gt_label: Variable, anchors: Sequence[int],
                anchor_mask: Sequence[int], class_num: int, ignore_thresh: float,
                downsample_ratio: int, gt_score: Variable | None = None,
                use_label_smooth: bool = True, name: str | None = None,
                scale_x_y: float = 1.0) -> Variable:
    """YOLOv3's training loss per image, ``[N]``, of the head ``x`` ``[N, len(anchor_mask) *
    (5 + class_num), H, W]`` against the ground-truth boxes ``gt_box`` ``[N, B, 4]`` (centre
    x, y, width, height as fractions of the image; w or h 0 marks padding), their int32
    classes ``gt_label`` ``[N, B]`` and optional mixup scores ``gt_score``: location (sigmoid
    cross-entropy on x, y, L1 on w, h), class and objectness terms, predictions whose best IoU
    with a GT box exceeds ``ignore_thresh`` leaving out the objectness term (Fluid 1.8's
    ``layers.yolov3_loss``)."""
    layer = "yolov3_loss"
    _check_var(x, "x", layer)
    _check_var(gt_box, "gt_box", layer)
    _check_var(gt_label, "gt_label", layer)
    _dtype(x, "x", layer, ("float32", "float64"))
    _dtype(gt_label, "gt_label", layer, ("int32",))
    if gt_score is not None:
        _check_var(gt_score, "gt_score", layer)
    for arg, value in (("anchors", anchors), ("anchor_mask", anchor_mask)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"yolov3_loss: {arg} must be a list or tuple, got "
                            f"{type(value).__name__}")
    if not anchors or len(anchors) % 2:
        raise ValueError(f"yolov3_loss: anchors must hold (width, height) pairs, got "
                         f"{list(anchors)}")
    an_num = len(anchors) // 2
    if not anchor_mask or any(not 0 <= int(m) < an_num for m in anchor_mask):
        raise ValueError(f"yolov3_loss: anchor_mask must index the {an_num} anchors, got "
                         f"{list(anchor_mask)}")
    if not isinstance(class_num, int) or isinstance(class_num, bool) or class_num <= 0:
        raise TypeError(f"yolov3_loss: class_num must be a positive int, got {class_num!r}")
    if not isinstance(ignore_thresh, float):
        raise TypeError(f"yolov3_loss: ignore_thresh must be a float, got {ignore_thresh!r}")
    if not isinstance(use_label_smooth, bool):
        raise TypeError(f"yolov3_loss: use_label_smooth must be a bool, got "
                        f"{use_label_smooth!r}")
    mask_num = len(anchor_mask)
    if x.shape is not None:
        if len(x.shape) != 4:
            raise ValueError(f"yolov3_loss: x must be 4-D NCHW, got {list(x.shape)}")
        c, h, w = x.shape[1:]
        if h >= 0 and w >= 0 and h != w:
            raise ValueError(f"yolov3_loss: x must have H == W, got {list(x.shape)}")
        if c >= 0 and c != mask_num * (5 + class_num):
            raise ValueError(f"yolov3_loss: x must have len(anchor_mask) * (5 + class_num) = "
                             f"{mask_num * (5 + class_num)} channels, got {c}")
    if gt_box.shape is not None and (len(gt_box.shape) != 3 or gt_box.shape[2] != 4):
        raise ValueError(f"yolov3_loss: gt_box must be [N, B, 4], got {list(gt_box.shape)}")
    helper = LayerHelper(layer, name)
    n = None if x.shape is None else x.shape[0]
    loss = helper.create_tmp(dtype=x.dtype, shape=None if n is None else (n,))
    # Fluid declares the mask int32 but its kernel writes X's dtype: here it has X's dtype
    obj_mask = helper.create_tmp(
        dtype=x.dtype, shape=None if x.shape is None else (n, mask_num, *x.shape[2:]),
        stop_gradient=True)
    match_mask = helper.create_tmp(
        dtype="int32", shape=None if gt_box.shape is None else tuple(gt_box.shape[:2]),
        stop_gradient=True)
    inputs = {"X": [x], "GTBox": [gt_box], "GTLabel": [gt_label]}
    if gt_score is not None:
        inputs["GTScore"] = [gt_score]
    helper.append_op(layer, inputs=inputs,
                     outputs={"Loss": [loss], "ObjectnessMask": [obj_mask],
                              "GTMatchMask": [match_mask]},
                     attrs={"anchors": [int(a) for a in anchors],
                            "anchor_mask": [int(m) for m in anchor_mask],
                            "class_num": class_num, "ignore_thresh": ignore_thresh,
                            "downsample_ratio": downsample_ratio,
                            "use_label_smooth": use_label_smooth,
                            "scale_x_y": float(scale_x_y)})
    return loss
