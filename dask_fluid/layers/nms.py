"""Non-maximum suppression and proposal layers of Fluid 1.8's ``layers/detection.py``
(the kernels are in :mod:`dask_fluid.ops.nms_ops`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..framework import Variable
from ..layer_helper import LayerHelper
from .checks import check_type, check_variable_and_dtype
from .tensor import _check_var

__all__: list[str] = ["collect_fpn_proposals", "distribute_fpn_proposals",
                       "generate_proposals", "locality_aware_nms", "matrix_nms",
                       "multiclass_nms", "multiclass_nms2"]


def _check_float_var(x: Variable, arg: str, layer: str) -> None:
    _check_var(x, arg, layer)
    if str(x.dtype) not in ("float32", "float64"):
        raise TypeError(f"{layer}: {arg} must have dtype float32 or float64, got {x.dtype}")


def _num(v: object, arg: str, layer: str, kind: type) -> float | int:
    """``v`` as ``kind`` (int or float; an int is accepted for a float); TypeError naming
    ``arg`` otherwise (Fluid's ``check_type``)."""
    ok = (int, float) if kind is float else (int,)
    if isinstance(v, bool) or not isinstance(v, ok):
        raise TypeError(f"{layer}: {arg} must be {kind.__name__}, got {type(v).__name__} {v!r}")
    return kind(v)


def _nms_attrs(layer: str, score_threshold: float, nms_top_k: int, keep_top_k: int,
               nms_threshold: float, normalized: bool, nms_eta: float,
               background_label: int) -> dict:
    if not isinstance(normalized, bool):
        raise TypeError(f"{layer}: normalized must be bool, got {type(normalized).__name__}")
    return {"background_label": _num(background_label, "background_label", layer, int),
            "score_threshold": _num(score_threshold, "score_threshold", layer, float),
            "nms_top_k": _num(nms_top_k, "nms_top_k", layer, int),
            "nms_threshold": _num(nms_threshold, "nms_threshold", layer, float),
            "nms_eta": _num(nms_eta, "nms_eta", layer, float),
            "keep_top_k": _num(keep_top_k, "keep_top_k", layer, int),
            "normalized": normalized}


def _nms_out_shape(bboxes: Variable, scores: Variable) -> list[int]:
    """``MultiClassNMSOp::InferShape``: ``[M, box_size + 2]`` for 3-D scores (M stands for the
    row count, only known at run time), ``[-1, box_size + 2]`` for 2-D (LoD) scores."""
    bs = list(bboxes.shape or [])
    width = bs[2] + 2 if len(bs) == 3 and bs[2] >= 0 else -1
    if len(scores.shape or []) == 3 and len(bs) == 3:
        return [bs[1], width]
    return [-1, width]


def _append_nms(op_type: str, layer: str, bboxes: Variable, scores: Variable, attrs: dict,
                with_index: bool, name: str | None) -> tuple[Variable, Variable | None]:
    """The NMS op ``op_type`` on ``bboxes`` and ``scores``: its ``Out`` (shape as the op's
    InferShape) and, ``with_index``, its int32 ``Index`` ``[M, 1]`` (else None)."""
    helper = LayerHelper(layer, name)
    shape = _nms_out_shape(bboxes, scores)
    out = helper.create_tmp(dtype=bboxes.dtype, shape=shape, stop_gradient=True)
    outputs = {"Out": [out]}
    index = None
    if with_index:
        index = helper.create_tmp(dtype="int32", shape=[shape[0], 1], stop_gradient=True)
        outputs["Index"] = [index]
    helper.append_op(op_type, inputs={"BBoxes": [bboxes], "Scores": [scores]},
                     outputs=outputs, attrs=attrs)
    return out, index


def multiclass_nms(bboxes: Variable, scores: Variable, score_threshold: float, nms_top_k: int,
                   keep_top_k: int, nms_threshold: float = 0.3, normalized: bool = True,
                   nms_eta: float = 1.0, background_label: int = 0,
                   name: str | None = None) -> Variable:
    """Multi-class non-maximum suppression, following Fluid 1.8's ``layers.multiclass_nms``.

    For every image and every class but ``background_label``: the boxes scoring above
    ``score_threshold``, best ``nms_top_k`` first (-1: all), greedily kept unless their IoU
    with a kept box exceeds the (``nms_eta``-adaptive) ``nms_threshold``; then the best
    ``keep_top_k`` of the image (-1: all).

    Parameters
    ----------
    bboxes : Variable
        ``[N, M, 4]`` boxes ``x1, y1, x2, y2`` (with 3-D scores), or a LoD tensor
        ``[M, C, 4]`` of per-class boxes (with 2-D scores).
    scores : Variable
        ``[N, C, M]`` scores, or ``[M, C]`` (LoD form).
    score_threshold, nms_top_k, keep_top_k, nms_threshold, normalized, nms_eta,
    background_label : as Fluid's (``normalized`` False adds 1 to widths and heights).
    name : str, optional

    Returns
    -------
    Variable
        A LoD tensor ``[No, 6]``, rows ``label, score, x1, y1, x2, y2`` with one LoD sequence
        per image; ``[[-1]]`` when no image keeps a box.
    """
    layer = "multiclass_nms"
    _check_float_var(bboxes, "bboxes", layer)
    _check_float_var(scores, "scores", layer)
    attrs = _nms_attrs(layer, score_threshold, nms_top_k, keep_top_k, nms_threshold,
                       normalized, nms_eta, background_label)
    return _append_nms("multiclass_nms", layer, bboxes, scores, attrs, False, name)[0]


def multiclass_nms2(bboxes: Variable, scores: Variable, score_threshold: float,
                    nms_top_k: int, keep_top_k: int, nms_threshold: float = 0.3,
                    normalized: bool = True, nms_eta: float = 1.0, background_label: int = 0,
                    return_index: bool = False,
                    name: str | None = None) -> Variable | tuple[Variable, Variable]:
    """:func:`multiclass_nms` through the ``multiclass_nms2`` op, which also gives each kept
    box's index, following Fluid 1.8's ``fluid.contrib.layers.multiclass_nms2``.

    Returns ``Out`` (as :func:`multiclass_nms`, except that nothing kept gives an empty
    ``[0, 6]`` tensor rather than ``[[-1]]``) and, with ``return_index``, ``Index``: an int32
    LoD tensor ``[No, 1]`` of each kept box's row across the batch (``n * M + m``; LoD form
    ``row * C + class``).
    """
    layer = "multiclass_nms2"
    _check_float_var(bboxes, "bboxes", layer)
    _check_float_var(scores, "scores", layer)
    if not isinstance(return_index, bool):
        raise TypeError(f"{layer}: return_index must be bool, got {type(return_index).__name__}")
    attrs = _nms_attrs(layer, score_threshold, nms_top_k, keep_top_k, nms_threshold,
                       normalized, nms_eta, background_label)
    out, index = _append_nms("multiclass_nms2", layer, bboxes, scores, attrs, True, name)
    return (out, index) if return_index else out


def matrix_nms(bboxes: Variable, scores: Variable, score_threshold: float,
               post_threshold: float, nms_top_k: int, keep_top_k: int,
               use_gaussian: bool = False, gaussian_sigma: float = 2.0,
               background_label: int = 0, normalized: bool = True, return_index: bool = False,
               name: str | None = None) -> Variable | tuple[Variable, Variable]:
    """Matrix NMS (SOLOv2), following Fluid 1.8's ``layers.matrix_nms``.

    Per class (but ``background_label``), the boxes scoring above ``score_threshold`` (best
    ``nms_top_k``) have their scores decayed by their IoU with better-scored boxes (linear, or
    Gaussian with ``gaussian_sigma`` when ``use_gaussian``); those still above
    ``post_threshold`` are kept, and each image keeps its best ``keep_top_k`` (-1: all) by
    decayed score.

    Parameters
    ----------
    bboxes : Variable
        ``[N, M, 4]`` boxes ``x1, y1, x2, y2``.
    scores : Variable
        ``[N, C, M]`` scores.
    score_threshold, post_threshold, nms_top_k, keep_top_k, use_gaussian, gaussian_sigma,
    background_label, normalized : as Fluid's.
    return_index : bool
        Also return Index, an int32 LoD tensor ``[No, 1]`` of each kept box's row ``n * M + m``.
    name : str, optional

    Returns
    -------
    Variable or (Variable, Variable)
        Out, a LoD tensor ``[No, 6]`` of rows ``label, decayed score, x1, y1, x2, y2`` in
        descending decayed score per image (empty ``[0, 6]`` when nothing is kept), and with
        ``return_index`` the Index.
    """
    layer = "matrix_nms"
    _check_float_var(bboxes, "bboxes", layer)
    _check_float_var(scores, "scores", layer)
    for arg, v in (("use_gaussian", use_gaussian), ("normalized", normalized),
                   ("return_index", return_index)):
        if not isinstance(v, bool):
            raise TypeError(f"{layer}: {arg} must be bool, got {type(v).__name__}")
    attrs = {"background_label": _num(background_label, "background_label", layer, int),
             "score_threshold": _num(score_threshold, "score_threshold", layer, float),
             "post_threshold": _num(post_threshold, "post_threshold", layer, float),
             "nms_top_k": _num(nms_top_k, "nms_top_k", layer, int),
             "keep_top_k": _num(keep_top_k, "keep_top_k", layer, int),
             "normalized": normalized, "use_gaussian": use_gaussian,
             "gaussian_sigma": _num(gaussian_sigma, "gaussian_sigma", layer, float)}
    # MatrixNMSOp::InferShape (1.8): Out [M, box_size + 2], Index [M, 1]
    out, index = _append_nms("matrix_nms", layer, bboxes, scores, attrs, True, name)
    return (out, index) if return_index else out


def locality_aware_nms(bboxes: Variable, scores: Variable, score_threshold: float,
                       nms_top_k: int, keep_top_k: int, nms_threshold: float = 0.3,
                       normalized: bool = True, nms_eta: float = 1.0,
                       background_label: int = -1, name: str | None = None) -> Variable:
    """Locality-aware NMS (EAST), following Fluid 1.8's ``layers.locality_aware_nms``.

    Adjacent boxes overlapping by more than ``nms_threshold`` are first merged (score-weighted
    corners, summed scores); the merged boxes then go through :func:`multiclass_nms`'s greedy
    NMS and ``keep_top_k``. As Fluid's layer, ``scores`` must hold one class: ``[N, 1, M]``.

    Returns
    -------
    Variable
        A LoD tensor ``[No, 6]``, rows ``label, score, x1, y1, x2, y2`` (merged boxes and
        scores), one LoD sequence per image; ``[[-1]]`` when nothing is kept.
    """
    layer = "locality_aware_nms"
    # Fluid 1.8's checks of this layer, stricter than _nms_attrs (which takes an int for a
    # float, as multiclass_nms does): an int score_threshold is refused here
    check_variable_and_dtype(bboxes, "bboxes", ("float32", "float64"), layer)
    check_variable_and_dtype(scores, "scores", ("float32", "float64"), layer)
    for arg, value, kind in (("background_label", background_label, int),
                             ("score_threshold", score_threshold, float),
                             ("nms_top_k", nms_top_k, int), ("nms_eta", nms_eta, float),
                             ("nms_threshold", nms_threshold, float),
                             ("keep_top_k", keep_top_k, int), ("normalized", normalized, bool)):
        check_type(value, arg, kind, layer)
    _check_float_var(bboxes, "bboxes", layer)
    _check_float_var(scores, "scores", layer)
    shape = list(scores.shape or [])
    if len(shape) != 3 or shape[1] != 1:
        raise ValueError(f"{layer}: scores must be [N, 1, M] (Fluid's layer supports one class "
                         f"only), got shape {shape}")
    attrs = _nms_attrs(layer, score_threshold, nms_top_k, keep_top_k, nms_threshold,
                       normalized, nms_eta, background_label)
    return _append_nms("locality_aware_nms", layer, bboxes, scores, attrs, False, name)[0]


def _levels(min_level: int, max_level: int, layer: str) -> int:
    lo = _num(min_level, "min_level", layer, int)
    hi = _num(max_level, "max_level", layer, int)
    if hi < lo:
        raise ValueError(f"{layer}: max_level ({hi}) must not be lower than min_level ({lo})")
    return hi - lo + 1


def distribute_fpn_proposals(fpn_rois: Variable, min_level: int, max_level: int,
                             refer_level: int, refer_scale: int,
                             name: str | None = None) -> tuple[list[Variable], Variable]:
    """Distribute RoIs over FPN levels by size, following Fluid 1.8's
    ``layers.distribute_fpn_proposals``: RoI ``(x1, y1, x2, y2)`` goes to level
    ``floor(log2(sqrt((x2 - x1 + 1) (y2 - y1 + 1)) / refer_scale) + refer_level)``, clipped to
    ``[min_level, max_level]``.

    Parameters
    ----------
    fpn_rois : Variable
        A LoD tensor ``[R, 4]`` (one sequence per image).
    min_level, max_level, refer_level, refer_scale : int
    name : str, optional

    Returns
    -------
    (list of Variable, Variable)
        One LoD tensor ``[-1, 4]`` per level (``max_level - min_level + 1``), and the int32
        ``[-1, 1]`` restore index: each input RoI's row in the levels' concatenation.
    """
    layer = "distribute_fpn_proposals"
    _check_float_var(fpn_rois, "fpn_rois", layer)
    num = _levels(min_level, max_level, layer)
    attrs = {"min_level": int(min_level), "max_level": int(max_level),
             "refer_level": _num(refer_level, "refer_level", layer, int),
             "refer_scale": _num(refer_scale, "refer_scale", layer, int)}
    helper = LayerHelper(layer, name)
    multi = [helper.create_tmp(dtype=fpn_rois.dtype, shape=[-1, 4], stop_gradient=True)
             for _ in range(num)]
    restore = helper.create_tmp(dtype="int32", shape=[-1, 1], stop_gradient=True)
    helper.append_op("distribute_fpn_proposals", inputs={"FpnRois": [fpn_rois]},
                     outputs={"MultiFpnRois": multi, "RestoreIndex": [restore]}, attrs=attrs)
    return multi, restore


def collect_fpn_proposals(multi_rois: Sequence[Variable], multi_scores: Sequence[Variable],
                          min_level: int, max_level: int, post_nms_top_n: int,
                          name: str | None = None) -> Variable:
    """Concatenate the RoIs of the FPN levels and keep the ``post_nms_top_n`` best scored of
    the batch, grouped by image, following Fluid 1.8's ``layers.collect_fpn_proposals``
    (only the first ``max_level - min_level + 1`` levels are used, as there).

    Parameters
    ----------
    multi_rois : list of Variable
        Per level, a LoD tensor ``[R_l, 4]``.
    multi_scores : list of Variable
        Per level, a LoD tensor ``[R_l, 1]`` of scores.
    min_level, max_level, post_nms_top_n : int
    name : str, optional

    Returns
    -------
    Variable
        A LoD tensor ``[-1, 4]`` of the kept RoIs.
    """
    layer = "collect_fpn_proposals"
    for arg, vs in (("multi_rois", multi_rois), ("multi_scores", multi_scores)):
        if not isinstance(vs, (list, tuple)) or not vs:
            raise TypeError(f"{layer}: {arg} must be a non-empty list of Variables, got "
                            f"{type(vs).__name__}")
        for v in vs:
            _check_float_var(v, arg, layer)
    num = _levels(min_level, max_level, layer)
    if len(multi_rois) < num or len(multi_scores) < num:
        raise ValueError(f"{layer}: min_level..max_level needs {num} levels, got "
                         f"{len(multi_rois)} multi_rois and {len(multi_scores)} multi_scores")
    top = _num(post_nms_top_n, "post_nms_top_n", layer, int)
    helper = LayerHelper(layer, name)
    out = helper.create_tmp(dtype=multi_rois[0].dtype, shape=[-1, 4], stop_gradient=True)
    helper.append_op("collect_fpn_proposals",
                     inputs={"MultiLevelRois": list(multi_rois[:num]),
                             "MultiLevelScores": list(multi_scores[:num])},
                     outputs={"FpnRois": [out]}, attrs={"post_nms_topN": top})
    return out


def generate_proposals(scores: Variable, bbox_deltas: Variable, im_info: Variable,
                       anchors: Variable, variances: Variable, pre_nms_top_n: int = 6000,
                       post_nms_top_n: int = 1000, nms_thresh: float = 0.5,
                       min_size: float = 0.1, eta: float = 1.0, name: str | None = None,
                       return_rois_num: bool = False) -> tuple[Variable, ...]:
    """Faster R-CNN RPN proposals, following Fluid 1.8's ``layers.generate_proposals``.

    Per image: the ``pre_nms_top_n`` best-scored anchors, decoded by ``bbox_deltas`` and
    ``variances``, clipped to the image, those smaller than ``min_size`` (at the original
    scale) dropped, NMS at ``nms_thresh`` (adaptive with ``eta``), the best ``post_nms_top_n``
    kept.

    Parameters
    ----------
    scores : Variable
        ``[N, A, H, W]`` objectness.
    bbox_deltas : Variable
        ``[N, 4A, H, W]``.
    im_info : Variable
        ``[N, 3]``: height, width, scale of each image.
    anchors, variances : Variable
        ``[H, W, A, 4]``.
    pre_nms_top_n, post_nms_top_n, nms_thresh, min_size, eta : as Fluid's.
    name : str, optional
    return_rois_num : bool
        Also return the int32 ``[N]`` RoI count of each image (the op's RpnRoisLod).

    Returns
    -------
    tuple of Variable
        ``(rpn_rois [-1, 4], rpn_roi_probs [-1, 1])``, LoD tensors with one sequence per image,
        plus the counts with ``return_rois_num``.
    """
    layer = "generate_proposals"
    for arg, v in (("scores", scores), ("bbox_deltas", bbox_deltas), ("im_info", im_info),
                   ("anchors", anchors), ("variances", variances)):
        _check_float_var(v, arg, layer)
    if not isinstance(return_rois_num, bool):
        raise TypeError(f"{layer}: return_rois_num must be bool, got "
                        f"{type(return_rois_num).__name__}")
    attrs = {"pre_nms_topN": _num(pre_nms_top_n, "pre_nms_top_n", layer, int),
             "post_nms_topN": _num(post_nms_top_n, "post_nms_top_n", layer, int),
             "nms_thresh": _num(nms_thresh, "nms_thresh", layer, float),
             "min_size": _num(min_size, "min_size", layer, float),
             "eta": _num(eta, "eta", layer, float)}
    helper = LayerHelper(layer, name)
    rois = helper.create_tmp(dtype=bbox_deltas.dtype, shape=[-1, 4], stop_gradient=True)
    probs = helper.create_tmp(dtype=scores.dtype, shape=[-1, 1], stop_gradient=True)
    counts = helper.create_tmp(dtype="int32", shape=[-1], stop_gradient=True)
    helper.append_op("generate_proposals",
                     inputs={"Scores": [scores], "BboxDeltas": [bbox_deltas],
                             "ImInfo": [im_info], "Anchors": [anchors],
                             "Variances": [variances]},
                     outputs={"RpnRois": [rois], "RpnRoiProbs": [probs],
                              "RpnRoisLod": [counts]}, attrs=attrs)
    return (rois, probs, counts) if return_rois_num else (rois, probs)
