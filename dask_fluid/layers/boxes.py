"""Box layers of Fluid 1.8's ``layers/detection.py``: ``prior_box``, ``density_prior_box``,
``anchor_generator``, ``box_coder``, ``iou_similarity``, ``box_clip``,
``polygon_box_transform`` and ``box_decoder_and_assign`` (the kernels are in
:mod:`dask_fluid.ops.box_ops`).

Boxes are ``(x1, y1, x2, y2)`` corners; "normalised" boxes live in ``[0, 1]`` while
unnormalised (pixel) boxes count their end pixel, so a width is ``x2 - x1 + 1``.
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from ..ops.box_ops import check_prior_attrs, expand_aspect_ratios
from .tensor import _check_var

__all__: list[str] = ["prior_box", "density_prior_box", "anchor_generator", "box_coder",
                      "iou_similarity", "box_clip", "polygon_box_transform",
                      "box_decoder_and_assign"]

_FLOATS = ("float32", "float64")


def _check_float(x: Any, arg: str, layer: str) -> Variable:
    _check_var(x, arg, layer)
    if x.dtype not in _FLOATS:
        raise TypeError(f"{layer}: {arg} {x.name!r} must be float32 or float64, got {x.dtype}")
    return x


def _floats(value: Any, arg: str, layer: str) -> list[float]:
    """A number or a list/tuple of numbers as a list of floats (Fluid wraps a scalar)."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{layer}: {arg} must be a number or a list of numbers, "
                            f"got {value!r}")
    return [float(v) for v in items]


def _check_maps(input: Variable, image: Variable, layer: str) -> list[int]:
    """input's static shape, after Fluid's InferShape checks of input against image."""
    _check_var(image, "image", layer)
    shape, ishape = list(input.shape or ()), list(image.shape or ())
    if len(shape) != 4 or len(ishape) != 4:
        raise ValueError(f"{layer}: input and image must be 4-D NCHW, got shapes {shape} "
                         f"and {ishape}")
    for d, what in ((2, "height"), (3, "width")):
        if shape[d] >= 0 and ishape[d] >= 0 and not shape[d] < ishape[d]:
            raise ValueError(f"{layer}: the {what} of input ({shape[d]}) must be smaller "
                             f"than the image's ({ishape[d]})")
    return shape


def _steps(steps: Any, arg: str, layer: str) -> list[float]:
    if not (isinstance(steps, (list, tuple)) and len(steps) == 2):
        raise ValueError(f"{layer}: {arg} must be a list or tuple of length 2 "
                         f"(width, height), got {steps!r}")
    return _floats(steps, arg, layer)


def _variance(variance: Any, layer: str) -> list[float]:
    var = _floats(variance, "variance", layer)
    if len(var) != 4 or any(v <= 0 for v in var):
        raise ValueError(f"{layer}: variance must be 4 positive values, got {variance!r}")
    return var


def prior_box(input: Variable, image: Variable, min_sizes: Any, max_sizes: Any = None,
              aspect_ratios: Any = (1.0,), variance: Any = (0.1, 0.1, 0.2, 0.2),
              flip: bool = False, clip: bool = False, steps: Any = (0.0, 0.0),
              offset: float = 0.5, name: str | None = None,
              min_max_aspect_ratios_order: bool = False) -> tuple[Variable, Variable]:
    """SSD prior boxes of each position of the feature map ``input`` ([N, C, H, W]) for the
    image ``image`` ([N, C, IH, IW]): ``(boxes, variances)``, both ``[H, W, num_priors, 4]``
    with ``num_priors = len(expanded aspect ratios) · len(min_sizes) + len(max_sizes)``;
    boxes are normalised by the image size. Op ``prior_box``, as Fluid 1.8's
    ``layers.prior_box`` (both outputs stop gradients)."""
    _check_var(input, "input", "prior_box")
    if input.dtype in ("uint8", "int8"):
        raise NotImplementedError(f"prior_box(input=<{input.dtype}>) is not implemented in "
                                  "dask_fluid (Fluid runs it only with MKLDNN)")
    _check_float(input, "input", "prior_box")
    shape = _check_maps(input, image, "prior_box")
    mins = _floats(min_sizes, "min_sizes", "prior_box")
    ratios = _floats(aspect_ratios, "aspect_ratios", "prior_box")
    step = _steps(steps, "steps", "prior_box")
    var = _variance(variance, "prior_box")
    attrs: dict[str, Any] = {
        "min_sizes": mins, "aspect_ratios": ratios, "variances": var, "flip": bool(flip),
        "clip": bool(clip), "step_w": step[0], "step_h": step[1], "offset": float(offset),
        "min_max_aspect_ratios_order": bool(min_max_aspect_ratios_order)}
    maxs: list[float] = []
    if max_sizes is not None:
        maxs = _floats(max_sizes, "max_sizes", "prior_box")
        # Fluid passes max_sizes only when its first size is positive
        if maxs and maxs[0] > 0:
            attrs["max_sizes"] = maxs
        else:
            maxs = []
    check_prior_attrs("prior_box", {"max_sizes": [], **attrs})
    n_priors = len(expand_aspect_ratios(ratios, bool(flip))) * len(mins) + len(maxs)
    helper = LayerHelper("prior_box", name)
    out_shape = [shape[2], shape[3], n_priors, 4]
    boxes = helper.create_tmp(dtype=input.dtype, shape=out_shape, stop_gradient=True)
    variances = helper.create_tmp(dtype=input.dtype, shape=out_shape, stop_gradient=True)
    helper.append_op("prior_box", inputs={"Input": [input], "Image": [image]},
                     outputs={"Boxes": [boxes], "Variances": [variances]}, attrs=attrs)
    return boxes, variances


def box_coder(prior_box: Variable, prior_box_var: Any, target_box: Variable,
              code_type: str = "encode_center_size", box_normalized: bool = True,
              name: str | None = None, axis: int = 0) -> Variable:
    """Encode ``target_box`` ([N, 4]) against ``prior_box`` ([M, 4]) as centre/size offsets
    ([N, M, 4]), or decode offsets ``target_box`` ([N, M, 4]) into corner boxes, the priors
    broadcast along ``axis`` (0: prior j for column j, 1: prior i for row i).
    ``prior_box_var`` is a [M, 4] Variable (input ``PriorBoxVar``), a list of 4 variances
    (attr ``variance``); the op runs without either (no scaling) but Fluid's layer, like
    this one, requires one. Op ``box_coder``, as Fluid 1.8's ``layers.box_coder``."""
    _check_float(prior_box, "prior_box", "box_coder")
    _check_float(target_box, "target_box", "box_coder")
    if code_type not in ("encode_center_size", "decode_center_size"):
        raise ValueError(f"box_coder: code_type must be 'encode_center_size' or "
                         f"'decode_center_size', got {code_type!r}")
    if isinstance(axis, bool) or axis not in (0, 1):
        raise ValueError(f"box_coder: axis must be 0 or 1, got {axis!r}")
    inputs: dict[str, list[Variable]] = {"PriorBox": [prior_box], "TargetBox": [target_box]}
    attrs: dict[str, Any] = {"code_type": code_type, "box_normalized": bool(box_normalized),
                             "axis": int(axis)}
    if isinstance(prior_box_var, Variable):
        inputs["PriorBoxVar"] = [prior_box_var]
    elif isinstance(prior_box_var, list):
        var = _floats(prior_box_var, "prior_box_var", "box_coder")
        if len(var) != 4:
            raise ValueError(f"box_coder: prior_box_var as a list must hold 4 variances, got "
                             f"{prior_box_var!r}")
        attrs["variance"] = var
    else:
        raise TypeError(f"box_coder: prior_box_var must be a Variable or a list, got "
                        f"{type(prior_box_var).__name__}")
    pshape, tshape = list(prior_box.shape or ()), list(target_box.shape or ())
    if code_type == "encode_center_size":
        if len(tshape) != 2:
            raise ValueError(f"box_coder: encode_center_size needs target_box [N, 4], got "
                             f"shape {tshape}")
        out_shape = [tshape[0], pshape[0] if pshape else -1, 4]
    else:
        if len(tshape) != 3:
            raise ValueError(f"box_coder: decode_center_size needs target_box [N, M, 4], "
                             f"got shape {tshape}")
        out_shape = tshape
    helper = LayerHelper("box_coder", name)
    out = helper.create_tmp(dtype=prior_box.dtype, shape=out_shape)
    helper.append_op("box_coder", inputs=inputs, outputs={"OutputBox": [out]}, attrs=attrs)
    return out


def iou_similarity(x: Variable, y: Variable, box_normalized: bool = True,
                   name: str | None = None) -> Variable:
    """``[N, M]`` intersection over union of each box of ``x`` ([N, 4], may carry a LoD,
    kept on the output) with each box of ``y`` ([M, 4]). Op ``iou_similarity``, as Fluid
    1.8's ``layers.iou_similarity``."""
    _check_var(x, "x", "iou_similarity")
    _check_var(y, "y", "iou_similarity")
    xs, ys = list(x.shape or ()), list(y.shape or ())
    if len(xs) != 2 or len(ys) != 2:
        raise ValueError(f"iou_similarity: x and y must be [rows, 4], got shapes {xs} and "
                         f"{ys}")
    helper = LayerHelper("iou_similarity", name)
    out = helper.create_tmp(dtype=x.dtype, shape=[xs[0], ys[0]])
    helper.append_op("iou_similarity", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                     attrs={"box_normalized": bool(box_normalized)})
    return out


def box_clip(input: Variable, im_info: Variable, name: str | None = None) -> Variable:
    """Clip the boxes of ``input`` ([N, ..., 4], a one-level LoD giving each image's boxes)
    to their image ``[0, round(w / scale) - 1] × [0, round(h / scale) - 1]`` from
    ``im_info`` ([batch, 3] rows ``(h, w, scale)``). Op ``box_clip``, as Fluid 1.8's
    ``layers.box_clip``."""
    _check_float(input, "input", "box_clip")
    _check_float(im_info, "im_info", "box_clip")
    helper = LayerHelper("box_clip", name)
    out = helper.create_tmp(dtype=input.dtype, shape=list(input.shape or ()))
    helper.append_op("box_clip", inputs={"Input": [input], "ImInfo": [im_info]},
                     outputs={"Output": [out]}, attrs={})
    return out


def _list_arg(value: Any, arg: str, layer: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{layer}: {arg} must be a list or tuple, got {value!r}")
    return list(value)


def density_prior_box(input: Variable, image: Variable, densities: Any = None,
                      fixed_sizes: Any = None, fixed_ratios: Any = None,
                      variance: Any = (0.1, 0.1, 0.2, 0.2), clip: bool = False,
                      steps: Any = (0.0, 0.0), offset: float = 0.5,
                      flatten_to_2d: bool = False,
                      name: str | None = None) -> tuple[Variable, Variable]:
    """Density prior boxes (Fluid 1.8's ``layers.density_prior_box``, op
    ``density_prior_box``): for each fixed size with density d and each fixed ratio, a d × d
    grid of boxes around every position of ``input``; ``(boxes, variances)`` of shape
    ``[H, W, num_priors, 4]`` (``[H·W·num_priors, 4]`` with ``flatten_to_2d``),
    ``num_priors = len(fixed_ratios) · Σ d²``; both stop gradients."""
    layer = "density_prior_box"
    _check_float(input, "input", layer)
    shape = _check_maps(input, image, layer)
    dens = _list_arg(densities, "densities", layer)
    sizes = _floats(_list_arg(fixed_sizes, "fixed_sizes", layer), "fixed_sizes",
                    layer)
    ratios = _floats(_list_arg(fixed_ratios, "fixed_ratios", layer),
                     "fixed_ratios", layer)
    if len(dens) != len(sizes):
        raise ValueError(f"{layer}: densities ({len(dens)}) and fixed_sizes ({len(sizes)}) "
                         "must have the same length")
    dens = [int(d) for d in dens]
    if any(v <= 0 for v in sizes + ratios + dens):
        raise ValueError(f"{layer}: densities {dens}, fixed_sizes {sizes} and fixed_ratios "
                         f"{ratios} must be positive")
    step = _steps(steps, "steps", layer)
    attrs = {"variances": _variance(variance, layer), "clip": bool(clip), "step_w": step[0],
             "step_h": step[1], "offset": float(offset), "densities": dens,
             "fixed_sizes": sizes, "fixed_ratios": ratios,
             "flatten_to_2d": bool(flatten_to_2d)}
    n_priors = len(ratios) * sum(d * d for d in dens)
    if flatten_to_2d:
        known = shape[2] >= 0 and shape[3] >= 0
        out_shape = [shape[2] * shape[3] * n_priors if known else -1, 4]
    else:
        out_shape = [shape[2], shape[3], n_priors, 4]
    helper = LayerHelper(layer, name)
    boxes = helper.create_tmp(dtype=input.dtype, shape=out_shape, stop_gradient=True)
    variances = helper.create_tmp(dtype=input.dtype, shape=out_shape, stop_gradient=True)
    helper.append_op(layer, inputs={"Input": [input], "Image": [image]},
                     outputs={"Boxes": [boxes], "Variances": [variances]}, attrs=attrs)
    return boxes, variances


def anchor_generator(input: Variable, anchor_sizes: Any = None, aspect_ratios: Any = None,
                     variance: Any = (0.1, 0.1, 0.2, 0.2), stride: Any = None,
                     offset: float = 0.5,
                     name: str | None = None) -> tuple[Variable, Variable]:
    """Faster R-CNN anchors of each position of ``input`` (Fluid 1.8's
    ``layers.anchor_generator``, op ``anchor_generator``): ``(anchors, variances)`` of shape
    ``[H, W, len(aspect_ratios) · len(anchor_sizes), 4]`` in pixels; both stop
    gradients."""
    layer = "anchor_generator"
    _check_float(input, "input", layer)
    shape = list(input.shape or ())
    if len(shape) != 4:
        raise ValueError(f"{layer}: input must be 4-D NCHW, got shape {shape}")
    if anchor_sizes is None or aspect_ratios is None:
        raise ValueError(f"{layer}: anchor_sizes and aspect_ratios must be given, got "
                         f"{anchor_sizes!r} and {aspect_ratios!r}")
    sizes = _floats(anchor_sizes, "anchor_sizes", layer)
    ratios = _floats(aspect_ratios, "aspect_ratios", layer)
    if not sizes or not ratios or any(v <= 0 for v in sizes + ratios):
        raise ValueError(f"{layer}: anchor_sizes {sizes} and aspect_ratios {ratios} must be "
                         "non-empty and positive")
    strides = _steps(stride, "stride", layer)
    attrs = {"anchor_sizes": sizes, "aspect_ratios": ratios,
             "variances": _variance(variance, layer), "stride": strides,
             "offset": float(offset)}
    out_shape = [shape[2], shape[3], len(sizes) * len(ratios), 4]
    helper = LayerHelper(layer, name)
    anchors = helper.create_tmp(dtype=input.dtype, shape=out_shape, stop_gradient=True)
    variances = helper.create_tmp(dtype=input.dtype, shape=out_shape, stop_gradient=True)
    helper.append_op(layer, inputs={"Input": [input]},
                     outputs={"Anchors": [anchors], "Variances": [variances]}, attrs=attrs)
    return anchors, variances


def polygon_box_transform(input: Variable, name: str | None = None) -> Variable:
    """Polygon vertex offsets ``[N, 2k, H, W]`` to coordinates (even channels ``4·w - x``,
    odd ones ``4·h - x``): op ``polygon_box_transform``, as Fluid 1.8's
    ``layers.polygon_box_transform``."""
    _check_float(input, "input", "polygon_box_transform")
    shape = list(input.shape or ())
    if len(shape) != 4 or (shape[1] >= 0 and shape[1] % 2):
        raise ValueError(f"polygon_box_transform: input must be [N, C, H, W] with an even C, "
                         f"got shape {shape}")
    helper = LayerHelper("polygon_box_transform", name)
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op("polygon_box_transform", inputs={"Input": [input]},
                     outputs={"Output": [out]}, attrs={})
    return out


def box_decoder_and_assign(prior_box: Variable, prior_box_var: Variable,
                           target_box: Variable, box_score: Variable, box_clip: float,
                           name: str | None = None) -> tuple[Variable, Variable]:
    """Decode per-class deltas ``target_box`` ([N, classes · 4]) against ``prior_box``
    ([N, 4], pixel boxes) with ``prior_box_var`` ([4]), the log-size deltas clipped at
    ``box_clip``, and assign each box its best non-background class's decoded box:
    ``(decode_box [N, classes · 4], output_assign_box [N, 4])``. Op
    ``box_decoder_and_assign``, as Fluid 1.8's ``layers.box_decoder_and_assign``."""
    layer = "box_decoder_and_assign"
    _check_float(prior_box, "prior_box", layer)
    _check_float(prior_box_var, "prior_box_var", layer)
    _check_float(target_box, "target_box", layer)
    _check_float(box_score, "box_score", layer)
    if isinstance(box_clip, bool) or not isinstance(box_clip, (int, float)):
        raise TypeError(f"{layer}: box_clip must be a float, got {box_clip!r}")
    helper = LayerHelper(layer, name)
    tshape, pshape = list(target_box.shape or ()), list(prior_box.shape or ())
    decoded = helper.create_tmp(dtype=prior_box.dtype, shape=tshape)
    assign = helper.create_tmp(dtype=prior_box.dtype, shape=pshape)
    helper.append_op(layer, inputs={"PriorBox": [prior_box], "PriorBoxVar": [prior_box_var],
                                    "TargetBox": [target_box], "BoxScore": [box_score]},
                     outputs={"DecodeBox": [decoded], "OutputAssignBox": [assign]},
                     attrs={"box_clip": float(box_clip)})
    return decoded, assign
