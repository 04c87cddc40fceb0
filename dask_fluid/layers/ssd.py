"""SSD's composite layers of Fluid 1.8's ``layers/detection.py``: ``multi_box_head`` (the
prior boxes and the location and confidence heads over several feature maps),
``detection_output`` (decode the predicted boxes, softmax the scores, multi-class NMS) and
``ssd_loss`` (match, mine hard negatives, weighted confidence and location losses).

They are built from other layers exactly as Fluid builds them, so their programs hold the
same ops (``prior_box``, ``conv2d``, ``transpose2``, ``reshape2``, ``flatten2``, ``concat``;
``box_coder``, ``softmax``, ``transpose2``, ``multiclass_nms``; ``iou_similarity``,
``bipartite_match``, ``target_assign``, ``mine_hard_examples``, ``softmax_with_cross_entropy``,
``smooth_l1``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..framework import Variable
from ..layer_helper import LayerHelper
from . import tensor
from .boxes import box_coder, iou_similarity, prior_box
from .detection_targets import bipartite_match, target_assign
from .image import conv2d
from .nn import reduce_sum, smooth_l1, softmax, softmax_with_cross_entropy
from .tensor import _check_var, assign, cast, concat, flatten, reshape, transpose

__all__: list[str] = ["multi_box_head", "detection_output", "ssd_loss"]


def _per_layer(value: Any, count: int, arg: str) -> list:
    if not (isinstance(value, (list, tuple)) and len(value) == count):
        raise ValueError(f"multi_box_head: {arg} must be a list or tuple with one entry per "
                         f"input ({count}), got {value!r}")
    return list(value)


def _default_sizes(base_size: int, min_ratio: Any, max_ratio: Any,
                   num_layer: int) -> tuple[list[float], list[float]]:
    """Fluid's sizes from ratios: 10 % and 20 % of ``base_size`` for the first map, then
    ``min_ratio`` to ``max_ratio`` in equal integer steps for the others."""
    if min_ratio is None or max_ratio is None:
        raise ValueError("multi_box_head: with more than 2 inputs give min_sizes and "
                         "max_sizes, or min_ratio and max_ratio to derive them")
    step = int(math.floor((max_ratio - min_ratio) / (num_layer - 2)))
    if step <= 0:
        raise ValueError(f"multi_box_head: max_ratio ({max_ratio}) - min_ratio ({min_ratio}) "
                         f"must be at least the number of inputs - 2 ({num_layer - 2})")
    min_sizes = [base_size * 0.10]
    max_sizes = [base_size * 0.20]
    for ratio in range(min_ratio, max_ratio + 1, step):
        min_sizes.append(base_size * ratio / 100.0)
        max_sizes.append(base_size * (ratio + step) / 100.0)
    return min_sizes, max_sizes


def _head(input: Variable, channels_per_box: int, num_boxes: int, kernel_size: Any,
          pad: Any, stride: Any) -> Variable:
    """A conv2d of ``num_boxes * channels_per_box`` filters reshaped to
    ``[N, H * W * num_boxes, channels_per_box]`` (NHWC order, as the prior boxes are laid)."""
    out = conv2d(input=input, num_filters=num_boxes * channels_per_box,
                 filter_size=kernel_size, padding=pad, stride=stride)
    out = transpose(out, perm=[0, 2, 3, 1])
    n, h, w, c = out.shape
    rows = h * w * c // channels_per_box if min(h, w, c) > 0 else -1
    # Fluid passes the compile-time shape and, as actual_shape, [0, -1, channels] for the run
    run_shape = assign(np.array([0, -1, channels_per_box], dtype="int32"))
    return reshape(out, shape=[n, rows, channels_per_box], actual_shape=run_shape)


def multi_box_head(inputs: Sequence[Variable], image: Variable, base_size: int,
                   num_classes: int, aspect_ratios: Sequence[Any],
                   min_ratio: int | None = None, max_ratio: int | None = None,
                   min_sizes: Sequence[Any] | None = None,
                   max_sizes: Sequence[Any] | None = None,
                   steps: Sequence[float] | None = None,
                   step_w: Sequence[float] | None = None,
                   step_h: Sequence[float] | None = None, offset: float = 0.5,
                   variance: Sequence[float] = (0.1, 0.1, 0.2, 0.2), flip: bool = True,
                   clip: bool = False, kernel_size: int = 1, pad: Any = 0, stride: Any = 1,
                   name: str | None = None,
                   min_max_aspect_ratios_order: bool = False
                   ) -> tuple[Variable, Variable, Variable, Variable]:
    """SSD's prior boxes and prediction heads over several feature maps, as Fluid 1.8's
    ``layers.multi_box_head``.

    For each NCHW map of ``inputs`` a ``prior_box`` (sizes ``min_sizes[i]``/``max_sizes[i]``,
    or derived from ``base_size``, ``min_ratio`` and ``max_ratio`` when more than two maps
    are given), a location conv2d of ``4 * priors`` filters and a confidence conv2d of
    ``num_classes * priors`` filters.

    Returns
    -------
    tuple of Variable
        ``(mbox_loc [N, P, 4], mbox_conf [N, P, num_classes], boxes [P, 4],
        variances [P, 4])``, ``P`` the prior boxes of all maps together (with one map, the
        boxes and variances keep ``prior_box``'s ``[H, W, priors, 4]``).
    """
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise ValueError(f"multi_box_head: inputs must be a non-empty list or tuple of "
                         f"Variables, got {inputs!r}")
    for i, x in enumerate(inputs):
        _check_var(x, f"inputs[{i}]", "multi_box_head")
    _check_var(image, "image", "multi_box_head")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"multi_box_head: num_classes must be a positive int, got "
                         f"{num_classes!r}")
    num_layer = len(inputs)
    if num_layer <= 2:
        if min_sizes is None or max_sizes is None:
            raise ValueError("multi_box_head: with 1 or 2 inputs min_sizes and max_sizes "
                             "must be given")
        min_sizes = _per_layer(min_sizes, num_layer, "min_sizes")
        max_sizes = _per_layer(max_sizes, num_layer, "max_sizes")
    elif min_sizes is None and max_sizes is None:
        min_sizes, max_sizes = _default_sizes(base_size, min_ratio, max_ratio, num_layer)
    else:
        if min_sizes is None or max_sizes is None:
            raise ValueError("multi_box_head: give both min_sizes and max_sizes, or neither")
        min_sizes = _per_layer(min_sizes, num_layer, "min_sizes")
        max_sizes = _per_layer(max_sizes, num_layer, "max_sizes")
    if len(min_sizes) < num_layer or len(max_sizes) < num_layer:
        raise ValueError(f"multi_box_head: min_ratio {min_ratio} and max_ratio {max_ratio} "
                         f"give sizes for {len(min_sizes)} maps, fewer than the "
                         f"{num_layer} inputs")
    if aspect_ratios:
        aspect_ratios = _per_layer(aspect_ratios, num_layer, "aspect_ratios")
    if step_h:
        step_h = _per_layer(step_h, num_layer, "step_h")
    if step_w:
        step_w = _per_layer(step_w, num_layer, "step_w")
    if steps:
        step_w = step_h = _per_layer(steps, num_layer, "steps")

    locs, confs, boxes, variances = [], [], [], []
    for i, input in enumerate(inputs):
        min_size = min_sizes[i] if isinstance(min_sizes[i], (list, tuple)) else [min_sizes[i]]
        max_size = max_sizes[i] if isinstance(max_sizes[i], (list, tuple)) else [max_sizes[i]]
        ratio = []
        if aspect_ratios:
            ratio = aspect_ratios[i]
            if not isinstance(ratio, (list, tuple)):
                ratio = [ratio]
        step = [float(step_w[i]) if step_w else 0.0, float(step_h[i]) if step_h else 0.0]
        box, var = prior_box(input, image, min_size, max_size, list(ratio), list(variance),
                             flip, clip, step, offset, None, min_max_aspect_ratios_order)
        boxes.append(box)
        variances.append(var)
        num_boxes = box.shape[2]
        locs.append(_head(input, 4, num_boxes, kernel_size, pad, stride))
        confs.append(_head(input, num_classes, num_boxes, kernel_size, pad, stride))

    if num_layer == 1:
        box, var, loc, conf = boxes[0], variances[0], locs[0], confs[0]
    else:
        flat_boxes, flat_vars = [], []
        for b, v in zip(boxes, variances, strict=True):
            flat_boxes.append(flatten(b, axis=3))
            flat_vars.append(flatten(v, axis=3))
        box, var = concat(flat_boxes), concat(flat_vars)
        loc = concat(locs, axis=1)
        conf = concat(confs, axis=1)
    box.stop_gradient = True
    var.stop_gradient = True
    return loc, conf, box, var


def detection_output(loc: Variable, scores: Variable, prior_box: Variable,
                     prior_box_var: Variable, background_label: int = 0,
                     nms_threshold: float = 0.3, nms_top_k: int = 400, keep_top_k: int = 200,
                     score_threshold: float = 0.01, nms_eta: float = 1.0,
                     return_index: bool = False) -> Variable | tuple[Variable, Variable]:
    """SSD's detections, as Fluid 1.8's ``layers.detection_output``: ``loc`` ``[N, M, 4]``
    decoded against the priors (``box_coder`` ``decode_center_size``), ``scores``
    ``[N, M, C]`` softmaxed, then ``multiclass_nms``.

    Fluid 1.8's layer passes ``background_label=0`` and ``nms_eta=1.0`` to the op whatever
    the arguments say; so does this one, to give the same detections.

    Returns
    -------
    Variable or tuple of Variable
        ``[No, 6]`` rows ``label, score, x1, y1, x2, y2`` with one LoD level (detections per
        image); the single row ``[-1]`` when no image has any. With ``return_index`` also
        ``[No, 1]`` the row of each detection's box in ``loc`` flattened to ``[N * M, 4]``
        (op ``multiclass_nms2``).
    """
    for arg, v in (("loc", loc), ("scores", scores), ("prior_box", prior_box),
                   ("prior_box_var", prior_box_var)):
        _check_var(v, arg, "detection_output")
    helper = LayerHelper("detection_output")
    decoded = box_coder(prior_box=prior_box, prior_box_var=prior_box_var, target_box=loc,
                        code_type="decode_center_size")
    probs = transpose(softmax(input=scores), perm=[0, 2, 1])
    probs.stop_gradient = True
    out = helper.create_tmp(dtype=decoded.dtype, shape=[-1, 6], stop_gradient=True)
    outputs = {"Out": [out]}
    if return_index:
        index = helper.create_tmp(dtype="int32", shape=[-1, 1], stop_gradient=True)
        outputs["Index"] = [index]
    helper.append_op("multiclass_nms2" if return_index else "multiclass_nms",
                     inputs={"Scores": [probs], "BBoxes": [decoded]}, outputs=outputs,
                     attrs={"background_label": 0, "nms_threshold": float(nms_threshold),
                            "nms_top_k": int(nms_top_k), "keep_top_k": int(keep_top_k),
                            "score_threshold": float(score_threshold), "nms_eta": 1.0})
    return (out, index) if return_index else out


def ssd_loss(location: Variable, confidence: Variable, gt_box: Variable, gt_label: Variable,
             prior_box: Variable, prior_box_var: Variable | None = None,
             background_label: int = 0, overlap_threshold: float = 0.5,
             neg_pos_ratio: float = 3.0, neg_overlap: float = 0.5,
             loc_loss_weight: float = 1.0, conf_loss_weight: float = 1.0,
             match_type: str = "per_prediction", mining_type: str = "max_negative",
             normalize: bool = True, sample_size: int | None = None) -> Variable:
    """SSD's multi-box loss, as Fluid 1.8's ``layers.ssd_loss``: match the priors to the
    ground truth (``iou_similarity``, ``bipartite_match``), mine hard negatives by their
    confidence loss (``mine_hard_examples``), then the weighted sum of the softmax
    cross-entropy over the matched and mined priors and the smooth-L1 loss of the matched
    priors' encoded boxes.

    Parameters
    ----------
    location, confidence : Variable
        ``[N, Np, 4]`` predicted offsets and ``[N, Np, C]`` class scores.
    gt_box, gt_label : Variable
        ``[Ng, 4]`` boxes and ``[Ng, 1]`` labels with one LoD level (boxes per image).
    prior_box, prior_box_var : Variable
        ``[Np, 4]`` priors and their variances.

    Returns
    -------
    Variable
        ``[N, 1]``: each image's loss, divided by the number of matched priors in the batch
        when ``normalize``.
    """
    if mining_type != "max_negative":
        # Fluid 1.8's own ValueError: only max_negative mining is wired into ssd_loss
        raise ValueError(f"ssd_loss: mining_type must be 'max_negative' (the only mining "
                         f"Fluid's ssd_loss supports), got {mining_type!r}")
    for arg, v in (("location", location), ("confidence", confidence), ("gt_box", gt_box),
                   ("gt_label", gt_label), ("prior_box", prior_box)):
        _check_var(v, arg, "ssd_loss")
    if len(confidence.shape or ()) != 3:
        raise ValueError(f"ssd_loss: confidence must be 3-D [N, Np, C], got shape "
                         f"{list(confidence.shape or ())}")
    num, num_prior, _ = confidence.shape
    helper = LayerHelper("ssd_loss")
    conf_shape = tensor.shape(confidence)

    # 1. match every prior to a ground-truth box
    iou = iou_similarity(x=gt_box, y=prior_box)
    matched_indices, matched_dist = bipartite_match(iou, match_type, overlap_threshold)

    # 2. the confidence loss of every prior against its matched label (background if none)
    gt_label = reshape(gt_label, shape=(len(gt_label.shape) - 1) * (0,) + (-1, 1))
    gt_label.stop_gradient = True
    target_label, _ = target_assign(gt_label, matched_indices,
                                    mismatch_value=background_label)
    confidence = flatten(confidence, axis=2)
    target_label = flatten(cast(target_label, "int64"), axis=2)
    target_label.stop_gradient = True
    conf_loss = softmax_with_cross_entropy(confidence, target_label)

    # 3. mine the hard negatives by that loss
    actual_shape = tensor.slice(conf_shape, axes=[0], starts=[0], ends=[2])
    actual_shape.stop_gradient = True
    conf_loss = reshape(conf_loss, shape=(num, num_prior), actual_shape=actual_shape)
    conf_loss.stop_gradient = True
    neg_indices = helper.create_tmp(dtype="int32", shape=[-1, 1], stop_gradient=True)
    updated_indices = helper.create_tmp(dtype=matched_indices.dtype,
                                        shape=list(matched_indices.shape or (-1, -1)),
                                        stop_gradient=True)
    helper.append_op("mine_hard_examples",
                     inputs={"ClsLoss": [conf_loss], "MatchIndices": [matched_indices],
                             "MatchDist": [matched_dist]},
                     outputs={"NegIndices": [neg_indices],
                              "UpdatedMatchIndices": [updated_indices]},
                     attrs={"neg_pos_ratio": float(neg_pos_ratio),
                            "neg_dist_threshold": float(neg_overlap),
                            "mining_type": mining_type,
                            "sample_size": int(sample_size or 0)})

    # 4. the regression and classification targets
    encoded = box_coder(prior_box=prior_box, prior_box_var=prior_box_var, target_box=gt_box,
                        code_type="encode_center_size")
    target_bbox, target_loc_weight = target_assign(encoded, updated_indices,
                                                   mismatch_value=background_label)
    target_label, target_conf_weight = target_assign(gt_label, updated_indices,
                                                     negative_indices=neg_indices,
                                                     mismatch_value=background_label)

    # 5. the weighted losses
    target_label = cast(flatten(target_label, axis=2), "int64")
    target_label.stop_gradient = True
    target_conf_weight = flatten(target_conf_weight, axis=2)
    target_conf_weight.stop_gradient = True
    conf_loss = softmax_with_cross_entropy(confidence, target_label) * target_conf_weight

    target_bbox = flatten(target_bbox, axis=2)
    target_bbox.stop_gradient = True
    target_loc_weight = flatten(target_loc_weight, axis=2)
    target_loc_weight.stop_gradient = True
    loc_loss = smooth_l1(flatten(location, axis=2), target_bbox) * target_loc_weight

    loss = conf_loss_weight * conf_loss + loc_loss_weight * loc_loss
    loss = reshape(loss, shape=(num, num_prior), actual_shape=actual_shape)
    loss = reduce_sum(loss, dim=1, keep_dim=True)
    if normalize:
        loss = loss / reduce_sum(target_loc_weight)
    return loss
