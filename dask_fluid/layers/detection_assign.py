"""Target-assignment, evaluation and transform layers of Fluid 1.8's layers/detection.py
(kernels in :mod:`dask_fluid.ops.detection_assign_ops`): ``roi_perspective_transform`` and
``rpn_target_assign``, ``retinanet_target_assign``, ``retinanet_detection_output`` and
``detection_map``."""

from __future__ import annotations

from ..framework import Variable
from ..layer_helper import LayerHelper
from .tensor import _check_var, gather, reshape

__all__: list[str] = ["detection_map", "retinanet_detection_output",
                      "retinanet_target_assign", "roi_perspective_transform",
                      "rpn_target_assign"]


def _float_var(v: Variable, arg: str, layer: str, dtypes: tuple[str, ...] = ("float32",
                                                                           "float64")) -> None:
    _check_var(v, arg, layer)
    if v.dtype not in dtypes:
        raise TypeError(f"{layer}: {arg} {v.name!r} must be {' or '.join(dtypes)}, got "
                        f"{v.dtype}")


def roi_perspective_transform(input: Variable, rois: Variable, transformed_height: int,
                              transformed_width: int, spatial_scale: float = 1.0,
                              name: str | None = None) -> tuple[Variable, Variable, Variable]:
    """Warps each quadrilateral ROI of ``rois`` (a ``[num_rois, 8]`` LoD tensor of
    ``x1, y1, ..., x4, y4``: top-left, top-right, bottom-right, bottom-left, in input
    coordinates times ``spatial_scale``; the LoD says which image of ``input`` (NCHW) each
    belongs to) onto a ``transformed_height × transformed_width`` grid by a perspective
    transform with bilinear sampling. Returns ``(out [num_rois, C, th, tw], mask [num_rois, 1,
    th, tw] int32 (1 where the pixel was sampled inside the quad and the map), transform_matrix
    [num_rois, 9])``; ``out`` keeps the ROIs' LoD. Op ``roi_perspective_transform``, as Fluid
    1.8's ``layers.roi_perspective_transform`` (which rejects a non-int size and a non-float
    scale)."""
    layer = "roi_perspective_transform"
    # Fluid 1.8 checks float32 (its only kernel); float64 runs here too (numpy/CuPy kernels)
    _float_var(input, "input", layer)
    _float_var(rois, "rois", layer)
    for arg, v in (("transformed_height", transformed_height),
                   ("transformed_width", transformed_width)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{layer}: {arg} must be an int, got {v!r}")
        if v <= 0:
            raise ValueError(f"{layer}: {arg} must be greater than 0, got {v}")
    if not isinstance(spatial_scale, float):
        raise TypeError(f"{layer}: spatial_scale must be a float, got {spatial_scale!r}")
    if not spatial_scale > 0:
        raise ValueError(f"{layer}: spatial_scale must be greater than 0, got {spatial_scale}")
    in_shape = list(input.shape) if input.shape is not None else None
    if in_shape is not None and len(in_shape) != 4:
        raise ValueError(f"{layer}: input {input.name!r} must be NCHW (4-D), got {in_shape}")
    r_shape = list(rois.shape) if rois.shape is not None else None
    if r_shape is not None and (len(r_shape) != 2 or r_shape[1] not in (8, -1)):
        raise ValueError(f"{layer}: rois {rois.name!r} must have shape (num_rois, 8), got "
                         f"{r_shape}")
    n_rois = r_shape[0] if r_shape is not None else -1
    channels = in_shape[1] if in_shape is not None else -1
    out_shape = [n_rois, channels, transformed_height, transformed_width]
    helper = LayerHelper(layer, name)
    out = helper.create_tmp(dtype=input.dtype, shape=out_shape)
    mask = helper.create_tmp(dtype="int32", shape=[n_rois, 1, transformed_height,
                                                   transformed_width], stop_gradient=True)
    matrix = helper.create_tmp(dtype=input.dtype, shape=[n_rois, 9], stop_gradient=True)
    # Fluid's InferShape gives both intermediates Out's dims; the kernel fills [numel(Out), 4]
    out2in_idx = helper.create_tmp(dtype="int32", shape=out_shape, stop_gradient=True)
    out2in_w = helper.create_tmp(dtype=input.dtype, shape=out_shape, stop_gradient=True)
    helper.append_op(layer, inputs={"X": [input], "ROIs": [rois]},
                     outputs={"Out": [out], "Out2InIdx": [out2in_idx],
                              "Out2InWeights": [out2in_w], "Mask": [mask],
                              "TransformMatrix": [matrix]},
                     attrs={"transformed_height": transformed_height,
                            "transformed_width": transformed_width,
                            "spatial_scale": spatial_scale})
    return out, mask, matrix


def rpn_target_assign(bbox_pred: Variable, cls_logits: Variable, anchor_box: Variable,
                      anchor_var: Variable, gt_boxes: Variable, is_crowd: Variable,
                      im_info: Variable, rpn_batch_size_per_im: int = 256,
                      rpn_straddle_thresh: float = 0.0, rpn_fg_fraction: float = 0.5,
                      rpn_positive_overlap: float = 0.7, rpn_negative_overlap: float = 0.3,
                      use_random: bool = True
                      ) -> tuple[Variable, Variable, Variable, Variable, Variable]:
    """Faster R-CNN's RPN targets: op ``rpn_target_assign`` samples, per image, foreground
    anchors (some gt's best match, or IoU >= ``rpn_positive_overlap``) and background anchors
    (IoU < ``rpn_negative_overlap``), at most ``rpn_batch_size_per_im`` with a
    ``rpn_fg_fraction`` share of foreground, among the anchors inside the image by
    ``rpn_straddle_thresh`` and the non-crowd ``gt_boxes`` (LoD, scaled by ``im_info``'s
    scale). Returns ``(predicted_scores [F + B, 1], predicted_location [F, 4], target_label
    [F + B, 1] int32, target_bbox [F, 4], bbox_inside_weight [F, 4])``, the predictions being
    ``gather``s of ``cls_logits`` / ``bbox_pred`` reshaped to ``[-1, 1]`` / ``[-1, 4]``, as
    Fluid 1.8's ``layers.rpn_target_assign`` (``anchor_var`` is checked, not used).
    ``use_random=True`` samples with a generator of dask_fluid's (its draws differ from
    Paddle's std::minstd_rand); ``use_random=False`` keeps the first candidates, as Paddle."""
    layer = "rpn_target_assign"
    for arg, v in (("bbox_pred", bbox_pred), ("cls_logits", cls_logits),
                   ("anchor_box", anchor_box), ("anchor_var", anchor_var),
                   ("gt_boxes", gt_boxes), ("im_info", im_info)):
        _float_var(v, arg, layer)
    _float_var(is_crowd, "is_crowd", layer, ("int32",))
    if isinstance(rpn_batch_size_per_im, bool) or not isinstance(rpn_batch_size_per_im, int):
        raise TypeError(f"{layer}: rpn_batch_size_per_im must be an int, got "
                        f"{rpn_batch_size_per_im!r}")
    if not isinstance(use_random, bool):
        raise TypeError(f"{layer}: use_random must be a bool, got {use_random!r}")
    for arg, v in (("anchor_box", anchor_box), ("gt_boxes", gt_boxes), ("im_info", im_info)):
        if v.shape is not None and len(v.shape) != 2:
            raise ValueError(f"{layer}: {arg} {v.name!r} must be 2-D, got {list(v.shape)}")
    helper = LayerHelper(layer, None)
    loc_index = helper.create_tmp(dtype="int32", shape=[-1], stop_gradient=True)
    score_index = helper.create_tmp(dtype="int32", shape=[-1], stop_gradient=True)
    target_label = helper.create_tmp(dtype="int32", shape=[-1, 1], stop_gradient=True)
    target_bbox = helper.create_tmp(dtype=anchor_box.dtype, shape=[-1, 4], stop_gradient=True)
    inside_weight = helper.create_tmp(dtype=anchor_box.dtype, shape=[-1, 4],
                                      stop_gradient=True)
    helper.append_op(layer, inputs={"Anchor": [anchor_box], "GtBoxes": [gt_boxes],
                                    "IsCrowd": [is_crowd], "ImInfo": [im_info]},
                     outputs={"LocationIndex": [loc_index], "ScoreIndex": [score_index],
                              "TargetLabel": [target_label], "TargetBBox": [target_bbox],
                              "BBoxInsideWeight": [inside_weight]},
                     attrs={"rpn_batch_size_per_im": rpn_batch_size_per_im,
                            "rpn_straddle_thresh": rpn_straddle_thresh,
                            "rpn_positive_overlap": rpn_positive_overlap,
                            "rpn_negative_overlap": rpn_negative_overlap,
                            "rpn_fg_fraction": rpn_fg_fraction, "use_random": use_random})
    # Fluid's order: both reshapes, then both gathers
    cls_flat = reshape(cls_logits, [-1, 1])
    bbox_flat = reshape(bbox_pred, [-1, 4])
    scores = gather(cls_flat, score_index)
    location = gather(bbox_flat, loc_index)
    return scores, location, target_label, target_bbox, inside_weight


def retinanet_target_assign(bbox_pred: Variable, cls_logits: Variable, anchor_box: Variable,
                            anchor_var: Variable, gt_boxes: Variable, gt_labels: Variable,
                            is_crowd: Variable, im_info: Variable, num_classes: int = 1,
                            positive_overlap: float = 0.5, negative_overlap: float = 0.4
                            ) -> tuple[Variable, Variable, Variable, Variable, Variable,
                                       Variable]:
    """RetinaNet targets: op ``retinanet_target_assign`` labels every anchor foreground (some
    non-crowd gt's best match, or IoU >= ``positive_overlap``; its label is that gt's class
    from ``gt_labels``) or background (IoU < ``negative_overlap``), without sampling. Returns
    ``(predicted_scores [F + B, num_classes], predicted_location [F, 4], target_label
    [F + B, 1] int32, target_bbox [F, 4], bbox_inside_weight [F, 4], fg_num [N, 1] int32)``
    (``fg_num`` is F + 1 per image), the predictions being ``gather``s of ``cls_logits`` /
    ``bbox_pred`` reshaped to ``[-1, num_classes]`` / ``[-1, 4]``, as Fluid 1.8's
    ``layers.retinanet_target_assign`` (``anchor_var`` is checked, not used)."""
    layer = "retinanet_target_assign"
    for arg, v in (("bbox_pred", bbox_pred), ("cls_logits", cls_logits),
                   ("anchor_box", anchor_box), ("anchor_var", anchor_var),
                   ("gt_boxes", gt_boxes), ("im_info", im_info)):
        _float_var(v, arg, layer)
    _float_var(gt_labels, "gt_labels", layer, ("int32",))
    _float_var(is_crowd, "is_crowd", layer, ("int32",))
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"{layer}: num_classes must be a positive int, got {num_classes!r}")
    for arg, v in (("anchor_box", anchor_box), ("gt_boxes", gt_boxes),
                   ("gt_labels", gt_labels), ("im_info", im_info)):
        if v.shape is not None and len(v.shape) != 2:
            raise ValueError(f"{layer}: {arg} {v.name!r} must be 2-D, got {list(v.shape)}")
    helper = LayerHelper(layer, None)
    # Fluid's InferShape gives every output GtLabels' row count; the kernel's sizes differ
    rows = gt_labels.shape[0] if gt_labels.shape is not None else -1
    loc_index = helper.create_tmp(dtype="int32", shape=[rows], stop_gradient=True)
    score_index = helper.create_tmp(dtype="int32", shape=[rows], stop_gradient=True)
    target_label = helper.create_tmp(dtype="int32", shape=[rows, 1], stop_gradient=True)
    target_bbox = helper.create_tmp(dtype=anchor_box.dtype, shape=[rows, 4],
                                    stop_gradient=True)
    inside_weight = helper.create_tmp(dtype=anchor_box.dtype, shape=[rows, 4],
                                      stop_gradient=True)
    fg_num = helper.create_tmp(dtype="int32", shape=[rows, 1], stop_gradient=True)
    helper.append_op(layer, inputs={"Anchor": [anchor_box], "GtBoxes": [gt_boxes],
                                    "GtLabels": [gt_labels], "IsCrowd": [is_crowd],
                                    "ImInfo": [im_info]},
                     outputs={"LocationIndex": [loc_index], "ScoreIndex": [score_index],
                              "TargetLabel": [target_label], "TargetBBox": [target_bbox],
                              "BBoxInsideWeight": [inside_weight],
                              "ForegroundNumber": [fg_num]},
                     attrs={"positive_overlap": positive_overlap,
                            "negative_overlap": negative_overlap})
    cls_flat = reshape(cls_logits, [-1, num_classes])
    bbox_flat = reshape(bbox_pred, [-1, 4])
    scores = gather(cls_flat, score_index)
    location = gather(bbox_flat, loc_index)
    return scores, location, target_label, target_bbox, inside_weight, fg_num


def retinanet_detection_output(bboxes: list[Variable], scores: list[Variable],
                               anchors: list[Variable], im_info: Variable,
                               score_threshold: float = 0.05, nms_top_k: int = 1000,
                               keep_top_k: int = 100, nms_threshold: float = 0.3,
                               nms_eta: float = 1.0) -> Variable:
    """RetinaNet's detections: per image and FPN level (lists ``bboxes`` ``[N, Mi, 4]``
    deltas, ``scores`` ``[N, Mi, C]``, ``anchors`` ``[Mi, 4]``, the last the highest level,
    whose scores are not thresholded), the ``nms_top_k`` best scores above
    ``score_threshold`` are decoded against the anchors, scaled back by ``im_info`` and
    clipped; per-class NMS at ``nms_threshold`` then keeps the ``keep_top_k`` best: a LoD
    tensor ``[No, 6]`` of ``[label, score, x1, y1, x2, y2]`` (Fluid 1.8's
    ``layers.retinanet_detection_output``). Fluid 1.8's layer always passes ``nms_eta=1.0`` to
    the op whatever the argument; any other value raises NotImplementedError here."""
    layer = "retinanet_detection_output"
    for arg, vs in (("bboxes", bboxes), ("scores", scores), ("anchors", anchors)):
        if not isinstance(vs, list):
            raise TypeError(f"{layer}: {arg} must be a list of Variables (one per FPN level), "
                            f"got {type(vs).__name__}")
        for i, v in enumerate(vs):
            _float_var(v, f"{arg}[{i}]", layer)
    if not bboxes or len(bboxes) != len(scores) or len(bboxes) != len(anchors):
        raise ValueError(f"{layer}: bboxes, scores and anchors must be non-empty lists of the "
                         f"same length, got {len(bboxes)}, {len(scores)} and {len(anchors)}")
    _float_var(im_info, "im_info", layer)
    if nms_eta != 1.0:
        raise NotImplementedError(f"{layer}(nms_eta={nms_eta!r}) is not implemented in "
                                  "dask_fluid (Fluid 1.8's layer always runs the op with "
                                  "nms_eta=1.0)")
    helper = LayerHelper(layer, None)
    # Fluid's InferShape: [M of level 0, 6] (the kernel writes the real row count)
    rows = bboxes[0].shape[1] if bboxes[0].shape is not None and len(bboxes[0].shape) > 1 \
        else -1
    out = helper.create_tmp(dtype=scores[0].dtype, shape=[rows, 6], stop_gradient=True)
    helper.append_op(layer, inputs={"BBoxes": list(bboxes), "Scores": list(scores),
                                    "Anchors": list(anchors), "ImInfo": [im_info]},
                     outputs={"Out": [out]},
                     attrs={"score_threshold": score_threshold, "nms_top_k": nms_top_k,
                            "nms_threshold": nms_threshold, "keep_top_k": keep_top_k,
                            "nms_eta": 1.0})
    return out


def detection_map(detect_res: Variable, label: Variable, class_num: int,
                  background_label: int = 0, overlap_threshold: float = 0.3,
                  evaluate_difficult: bool = True, has_state: Variable | None = None,
                  input_states: list[Variable] | None = None,
                  out_states: list[Variable] | None = None,
                  ap_version: str = "integral") -> Variable:
    """Detection mAP (op ``detection_map``) of ``detect_res`` (LoD ``[M, 6]``: label, score,
    x1, y1, x2, y2) against ``label`` (LoD ``[N, 6]``: label, difficult, x1, y1, x2, y2, or
    ``[N, 5]`` without difficult), ``ap_version`` 'integral' or '11point'. With
    ``input_states`` (pos_count, true_pos, false_pos) and a non-zero ``has_state`` the counts
    accumulate over batches; ``out_states`` name the accumulated outputs (fresh variables
    otherwise). Returns the mAP ``[1]``, as Fluid 1.8's ``layers.detection_map`` (which does
    not pass ``background_label`` to the op: the op's 0 applies; another value raises
    NotImplementedError here)."""
    layer = "detection_map"
    _float_var(detect_res, "detect_res", layer)
    _check_var(label, "label", layer)
    if isinstance(class_num, bool) or not isinstance(class_num, int):
        raise TypeError(f"{layer}: class_num must be an int, got {class_num!r}")
    if ap_version not in ("integral", "11point"):
        raise ValueError(f"{layer}: ap_version must be 'integral' or '11point', got "
                         f"{ap_version!r}")
    if background_label != 0:
        raise NotImplementedError(f"{layer}(background_label={background_label!r}) is not "
                                  "implemented in dask_fluid (Fluid 1.8's layer never passes "
                                  "it to the op, whose default 0 applies)")
    for arg, states in (("input_states", input_states), ("out_states", out_states)):
        if states is not None:
            if not isinstance(states, (list, tuple)) or len(states) != 3:
                raise ValueError(f"{layer}: {arg} must be a list of 3 Variables (pos_count, "
                                 f"true_pos, false_pos), got {states!r}")
            for i, v in enumerate(states):
                _check_var(v, f"{arg}[{i}]", layer)
    if detect_res.shape is not None and (len(detect_res.shape) != 2
                                         or detect_res.shape[1] not in (6, -1)):
        raise ValueError(f"{layer}: detect_res {detect_res.name!r} must be [M, 6], got "
                         f"{list(detect_res.shape)}")
    if label.shape is not None and (len(label.shape) != 2
                                    or label.shape[1] not in (5, 6, -1)):
        raise ValueError(f"{layer}: label {label.name!r} must be [N, 6] or [N, 5], got "
                         f"{list(label.shape)}")
    helper = LayerHelper(layer, None)
    map_out = helper.create_tmp(dtype="float32", shape=[1])
    if out_states is not None:
        pos_out, tp_out, fp_out = out_states
    else:
        pos_out = helper.create_tmp(dtype="int32")
        tp_out = helper.create_tmp(dtype="float32")
        fp_out = helper.create_tmp(dtype="float32")
    inputs = {"Label": [label], "DetectRes": [detect_res]}
    if has_state is not None:
        inputs["HasState"] = [has_state]
    if input_states is not None:
        inputs.update(PosCount=[input_states[0]], TruePos=[input_states[1]],
                      FalsePos=[input_states[2]])
    helper.append_op(layer, inputs=inputs,
                     outputs={"MAP": [map_out], "AccumPosCount": [pos_out],
                              "AccumTruePos": [tp_out], "AccumFalsePos": [fp_out]},
                     attrs={"overlap_threshold": overlap_threshold,
                            "evaluate_difficult": evaluate_difficult, "ap_type": ap_version,
                            "class_num": class_num})
    return map_out
