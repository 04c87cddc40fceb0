"""Faster/Mask R-CNN target layers (Fluid 1.8's ``layers.detection``: generate_proposal_labels,
generate_mask_labels). Kernels in :mod:`dask_fluid.ops.rcnn_target_ops`."""

from __future__ import annotations

from collections.abc import Sequence

from ..framework import Variable
from ..layer_helper import LayerHelper
from .tensor import _check_var

__all__: list[str] = ["generate_mask_labels", "generate_proposal_labels"]


def _typed(v: Variable, arg: str, layer: str, dtypes: tuple[str, ...]) -> None:
    _check_var(v, arg, layer)
    if v.dtype not in dtypes:
        raise TypeError(f"{layer}: {arg} {v.name!r} must be {' or '.join(dtypes)}, got "
                        f"{v.dtype}")


def _rank2(v: Variable, arg: str, layer: str, cols: int | None = None) -> None:
    shape = list(v.shape) if v.shape is not None else None
    if shape is None:
        return
    if len(shape) != 2 or (cols is not None and shape[1] not in (cols, -1)):
        want = f"[-1, {cols}]" if cols is not None else "2-D"
        raise ValueError(f"{layer}: {arg} {v.name!r} must be {want}, got {shape}")


def _pos_int(v: object, arg: str, layer: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{layer}: {arg} must be an int, got {v!r}")
    if v < 1:
        raise ValueError(f"{layer}: {arg} must be greater than 0, got {v}")


def generate_proposal_labels(rpn_rois: Variable, gt_classes: Variable, is_crowd: Variable,
                             gt_boxes: Variable, im_info: Variable, batch_size_per_im: int = 256,
                             fg_fraction: float = 0.25, fg_thresh: float = 0.25,
                             bg_thresh_hi: float = 0.5, bg_thresh_lo: float = 0.0,
                             bbox_reg_weights: Sequence[float] = (0.1, 0.1, 0.2, 0.2),
                             class_nums: int | None = None, use_random: bool = True,
                             is_cls_agnostic: bool = False, is_cascade_rcnn: bool = False
                             ) -> tuple[Variable, Variable, Variable, Variable, Variable]:
    """Fast R-CNN training rois and targets, following Fluid 1.8's
    ``layers.generate_proposal_labels`` (op ``generate_proposal_labels``).

    Per image (the LoD of ``rpn_rois`` and of the gt inputs), the RPN proposals divided by the
    image's ``im_info`` scale and the gt boxes before them are matched to their best gt by IoU:
    IoU >= ``fg_thresh`` is foreground, ``[bg_thresh_lo, bg_thresh_hi)`` background (a crowd
    gt is neither). At most ``floor(batch_size_per_im * fg_fraction)`` foregrounds, then up to
    ``batch_size_per_im`` in all with backgrounds, are kept: the first candidates, or with
    ``use_random`` a reservoir sample drawn from the program's random stream (deterministic
    for a ``random_seed``; the draws differ from Paddle's std::minstd_rand).

    Parameters
    ----------
    rpn_rois : Variable
        ``[N, 4]`` float32/float64 LoD tensor of proposals (x1, y1, x2, y2), 1 LoD level.
    gt_classes, is_crowd : Variable
        ``[M, 1]`` int32 LoD tensors: the class and crowd flag of each gt box.
    gt_boxes : Variable
        ``[M, 4]`` LoD tensor of gt boxes in the original image's scale.
    im_info : Variable
        ``[B, 3]`` (height, width, scale) per image.
    batch_size_per_im, fg_fraction, fg_thresh, bg_thresh_hi, bg_thresh_lo : int, float
        The sampling sizes and IoU thresholds above.
    bbox_reg_weights : sequence of 4 floats
        The divisors of the (dx, dy, dw, dh) targets.
    class_nums : int
        Number of classes (with background); required.
    use_random : bool
        Sample randomly instead of taking the first candidates.
    is_cls_agnostic : bool
        Write every foreground's target at class 1 (use ``class_nums=2``).
    is_cascade_rcnn : bool
        Not implemented: ``True`` raises NotImplementedError.

    Returns
    -------
    tuple of Variable
        ``(rois [P, 4], labels_int32 [P, 1], bbox_targets [P, 4 * class_nums],
        bbox_inside_weights, bbox_outside_weights)``, the rows of each image together (the
        run-time LoD is one level, per image); all ``stop_gradient``.
    """
    layer = "generate_proposal_labels"
    if is_cascade_rcnn is not False:
        if not isinstance(is_cascade_rcnn, bool):
            raise TypeError(f"{layer}: is_cascade_rcnn must be a bool, got {is_cascade_rcnn!r}")
        raise NotImplementedError(f"{layer}(is_cascade_rcnn=True) is not implemented in "
                                  "dask_fluid")
    _typed(rpn_rois, "rpn_rois", layer, ("float32", "float64"))
    _typed(gt_classes, "gt_classes", layer, ("int32",))
    _typed(is_crowd, "is_crowd", layer, ("int32",))
    _typed(gt_boxes, "gt_boxes", layer, (rpn_rois.dtype,))
    _typed(im_info, "im_info", layer, ("float32", "float64"))
    _rank2(rpn_rois, "rpn_rois", layer, 4)
    _rank2(gt_boxes, "gt_boxes", layer, 4)
    _rank2(im_info, "im_info", layer)
    if class_nums is None:
        raise ValueError(f"{layer}: class_nums is required (the number of classes, background "
                         "included), got None")
    _pos_int(class_nums, "class_nums", layer)
    if isinstance(batch_size_per_im, bool) or not isinstance(batch_size_per_im, int) \
            or batch_size_per_im < 0:
        raise ValueError(f"{layer}: batch_size_per_im must be a non-negative int, got "
                         f"{batch_size_per_im!r}")
    for arg, v in (("fg_fraction", fg_fraction), ("fg_thresh", fg_thresh),
                   ("bg_thresh_hi", bg_thresh_hi), ("bg_thresh_lo", bg_thresh_lo)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{layer}: {arg} must be a float, got {v!r}")
    if not 0.0 <= fg_fraction <= 1.0:
        raise ValueError(f"{layer}: fg_fraction must be in [0, 1], got {fg_fraction}")
    weights = list(bbox_reg_weights) if isinstance(bbox_reg_weights, (list, tuple)) else None
    if weights is None or len(weights) != 4 or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
        raise ValueError(f"{layer}: bbox_reg_weights must be 4 numbers, got "
                         f"{bbox_reg_weights!r}")
    for arg, v in (("use_random", use_random), ("is_cls_agnostic", is_cls_agnostic)):
        if not isinstance(v, bool):
            raise TypeError(f"{layer}: {arg} must be a bool, got {v!r}")
    if is_cls_agnostic and class_nums < 2:
        raise ValueError(f"{layer}: is_cls_agnostic writes targets at class 1, so class_nums "
                         f"must be >= 2, got {class_nums}")
    helper = LayerHelper(layer, None)
    width = 4 * class_nums
    rois = helper.create_tmp(dtype=rpn_rois.dtype, shape=[-1, 4], stop_gradient=True)
    labels = helper.create_tmp(dtype=gt_classes.dtype, shape=[-1, 1], stop_gradient=True)
    targets = helper.create_tmp(dtype=rpn_rois.dtype, shape=[-1, width], stop_gradient=True)
    inside = helper.create_tmp(dtype=rpn_rois.dtype, shape=[-1, width], stop_gradient=True)
    outside = helper.create_tmp(dtype=rpn_rois.dtype, shape=[-1, width], stop_gradient=True)
    helper.append_op(layer, inputs={"RpnRois": [rpn_rois], "GtClasses": [gt_classes],
                                    "IsCrowd": [is_crowd], "GtBoxes": [gt_boxes],
                                    "ImInfo": [im_info]},
                     outputs={"Rois": [rois], "LabelsInt32": [labels],
                              "BboxTargets": [targets], "BboxInsideWeights": [inside],
                              "BboxOutsideWeights": [outside]},
                     attrs={"batch_size_per_im": batch_size_per_im,
                            "fg_fraction": float(fg_fraction), "fg_thresh": float(fg_thresh),
                            "bg_thresh_hi": float(bg_thresh_hi),
                            "bg_thresh_lo": float(bg_thresh_lo),
                            "bbox_reg_weights": [float(w) for w in weights],
                            "class_nums": class_nums, "use_random": use_random,
                            "is_cls_agnostic": is_cls_agnostic,
                            "is_cascade_rcnn": is_cascade_rcnn})
    return rois, labels, targets, inside, outside


def generate_mask_labels(im_info: Variable, gt_classes: Variable, is_crowd: Variable,
                         gt_segms: Variable, rois: Variable, labels_int32: Variable,
                         num_classes: int, resolution: int
                         ) -> tuple[Variable, Variable, Variable]:
    """Mask R-CNN mask targets, following Fluid 1.8's ``layers.generate_mask_labels`` (op
    ``generate_mask_labels``).

    For each foreground roi (``labels_int32 > 0``) of an image, the non-crowd gt of a class
    > 0 whose polygons' bounding box overlaps it most is rasterised in the roi's frame to a
    ``resolution × resolution`` binary mask (COCO maskApi's polygon rasterisation, as Paddle's
    mask_util), placed in the roi's class slot; an image without foreground gives its first
    background roi with an all -1 (ignore) target.

    Parameters
    ----------
    im_info : Variable
        ``[B, 3]`` (height, width, scale) per image.
    gt_classes, is_crowd : Variable
        ``[M, 1]`` int32 LoD tensors (1 level: the gts of each image).
    gt_segms : Variable
        ``[S, 2]`` float32 points with 3 LoD levels: gts per image, polygons per gt, points
        per polygon.
    rois : Variable
        ``[R, 4]`` float32 LoD tensor of rois in the input scale (e.g. from
        :func:`generate_proposal_labels`).
    labels_int32 : Variable
        ``[R, 1]`` int32 class of each roi.
    num_classes, resolution : int
        Number of classes and the mask side M.

    Returns
    -------
    tuple of Variable
        ``(mask_rois [P, 4], roi_has_mask_int32 [P, 1] int32 (the row of each mask roi in its
        image's rois), mask_int32 [P, num_classes * M * M] int32 (0/1 in the class slot, -1
        elsewhere))``; run-time LoD one level, per image; all ``stop_gradient``.
    """
    layer = "generate_mask_labels"
    _typed(im_info, "im_info", layer, ("float32",))
    _typed(gt_classes, "gt_classes", layer, ("int32",))
    _typed(is_crowd, "is_crowd", layer, ("int32",))
    # Paddle registers the float kernel only
    _typed(gt_segms, "gt_segms", layer, ("float32",))
    _typed(rois, "rois", layer, ("float32",))
    _typed(labels_int32, "labels_int32", layer, ("int32",))
    _rank2(im_info, "im_info", layer)
    _rank2(gt_segms, "gt_segms", layer, 2)
    _rank2(rois, "rois", layer, 4)
    _pos_int(num_classes, "num_classes", layer)
    _pos_int(resolution, "resolution", layer)
    helper = LayerHelper(layer, None)
    mask_rois = helper.create_tmp(dtype=rois.dtype, shape=[-1, 4], stop_gradient=True)
    has_mask = helper.create_tmp(dtype=gt_classes.dtype, shape=[-1, 1], stop_gradient=True)
    masks = helper.create_tmp(dtype=gt_classes.dtype,
                              shape=[-1, num_classes * resolution * resolution],
                              stop_gradient=True)
    helper.append_op(layer, inputs={"ImInfo": [im_info], "GtClasses": [gt_classes],
                                    "IsCrowd": [is_crowd], "GtSegms": [gt_segms],
                                    "Rois": [rois], "LabelsInt32": [labels_int32]},
                     outputs={"MaskRois": [mask_rois], "RoiHasMaskInt32": [has_mask],
                              "MaskInt32": [masks]},
                     attrs={"num_classes": num_classes, "resolution": resolution})
    return mask_rois, has_mask, masks
