"""Image resizing layers of ``fluid.layers``: ``image_resize`` and its short forms (Fluid
1.8's signatures and defaults; the kernels are in :mod:`dask_fluid.ops.interp_ops`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..framework import Variable
from ..layer_helper import LayerHelper
from .tensor import _check_var, _shape_tensor_list

__all__: list[str] = ["image_resize", "image_resize_short", "resize_bilinear", "resize_nearest",
                      "resize_trilinear"]

_METHODS = {"BILINEAR": "bilinear", "TRILINEAR": "trilinear", "NEAREST": "nearest"}


def _static_out_shape(x_shape: list[int], inputs: dict, attrs: dict) -> list[int]:
    """The output shape Fluid 1.8's InferShape gives at compile time (-1 where it depends on
    a tensor): SizeTensor → the ``out_*`` attrs; a Scale tensor → -1; the ``scale`` attr →
    ``int(in · scale)`` (-1 for an unknown dim); else the ``out_*`` attrs. OutSize is only read
    at run time, so at compile time it leaves the attrs' sizes."""
    k = len(x_shape) - 2
    channels_last = attrs["data_layout"] == "NHWC"
    in_sizes = x_shape[1:1 + k] if channels_last else x_shape[2:]
    attr_sizes = [int(attrs[n]) for n in ("out_d", "out_h", "out_w")[3 - k:]]
    if "SizeTensor" in inputs:
        sizes = attr_sizes
    elif "Scale" in inputs:
        sizes = [-1] * k
    elif attrs.get("scale", 0.0) > 0:
        scale = np.float32(attrs["scale"])
        # Paddle multiplies the int dim by the float scale in float, then truncates
        sizes = [int(np.float32(d) * scale) for d in in_sizes]
        sizes = [s if s > 0 else -1 for s in sizes]
    else:
        sizes = attr_sizes
    if channels_last:
        return [x_shape[0], *sizes, x_shape[-1]]
    return [x_shape[0], x_shape[1], *sizes]


def image_resize(input: Variable, out_shape: Sequence[int | Variable] | Variable | None = None,
                 scale: float | Variable | None = None, name: str | None = None,
                 resample: str = "BILINEAR", actual_shape: Variable | None = None,
                 align_corners: bool = True, align_mode: int = 1,
                 data_format: str = "NCHW") -> Variable:
    """Resize a batch of images (4-D, ``BILINEAR``/``NEAREST``) or volumes (5-D,
    ``TRILINEAR``) to ``out_shape`` or by ``scale`` (Fluid 1.8's ``layers.image_resize``).

    Parameters
    ----------
    input : Variable
        ``[N, C, H, W]``/``[N, H, W, C]`` or ``[N, C, D, H, W]``/``[N, D, H, W, C]``.
    out_shape : list or tuple of int/Variable, or Variable, optional
        The spatial output size; a list holding Variables (int32 ``[1]``) becomes the op's
        ``SizeTensor`` input, a Variable (int32 ``[2]`` or ``[3]``) its ``OutSize`` input.
        When given, ``scale`` is not used.
    scale : float, int or Variable, optional
        The output size is ``int(in · scale)``; a Variable (float32 ``[1]``) becomes ``Scale``.
    resample : str
        ``'BILINEAR'``, ``'NEAREST'`` (4-D) or ``'TRILINEAR'`` (5-D); op ``<method>_interp``.
    actual_shape : Variable, optional
        Deprecated in Fluid 1.8: the run-time output size, bound to ``OutSize`` (it overrides
        ``out_shape`` and ``scale`` at run time; the static shape stays theirs).
    align_corners, align_mode : bool, int
        The source positions (see :mod:`dask_fluid.ops.interp_ops`).
    data_format : str
        ``'NCHW'``/``'NHWC'`` for 4-D, ``'NCDHW'``/``'NDHWC'`` for 5-D input.

    Raises
    ------
    ValueError
        An unknown ``resample``, a rank that does not fit it, ``align_mode`` not 0 or 1, both
        ``out_shape`` and ``scale`` None, an ``out_shape`` of the wrong length or with a size
        <= 0, ``scale`` <= 0, or a ``data_format`` that does not fit the rank.
    TypeError
        ``align_corners`` not a bool, ``out_shape``, ``scale`` or ``actual_shape`` of the wrong
        type.
    """
    _check_var(input, "input", "image_resize")
    if resample not in _METHODS:
        raise ValueError(f"image_resize: resample can only be 'BILINEAR', 'TRILINEAR' or "
                         f"'NEAREST' currently, got {resample!r}")
    method = _METHODS[resample]
    shape = list(input.shape or ())
    if resample in ("BILINEAR", "NEAREST") and len(shape) != 4:
        raise ValueError(f"image_resize: 'BILINEAR' and 'NEAREST' only support 4-D tensor, "
                         f"input {input.name!r} has shape {shape}")
    if resample == "TRILINEAR" and len(shape) != 5:
        raise ValueError(f"image_resize: 'TRILINEAR' only supports 5-D tensor, input "
                         f"{input.name!r} has shape {shape}")
    if not isinstance(align_corners, bool):
        raise TypeError(f"image_resize: align_corners should be a bool value, got "
                        f"{align_corners!r}")
    if align_mode not in (0, 1) or isinstance(align_mode, bool):
        raise ValueError(f"image_resize: align_mode can only be 0 or 1, got {align_mode!r}")
    if out_shape is None and scale is None:
        raise ValueError("image_resize: one of out_shape and scale must not be None")
    formats = ("NCHW", "NHWC") if len(shape) == 4 else ("NCDHW", "NDHWC")
    if data_format not in formats:
        raise ValueError(f"image_resize: got wrong value for data_format: {data_format!r}, "
                         f"only {formats[0]!r} or {formats[1]!r} supported for "
                         f"{len(shape)}-D input")
    data_layout = "NCHW" if data_format in ("NCHW", "NCDHW") else "NHWC"
    k = len(shape) - 2

    helper = LayerHelper(f"{method}_interp", name)
    inputs: dict[str, list[Variable]] = {"X": [input]}
    attrs: dict[str, Any] = {"out_d": -1, "out_h": -1, "out_w": -1, "interp_method": method,
                             "align_corners": align_corners, "align_mode": align_mode,
                             "data_layout": data_layout}
    size_names = ("out_d", "out_h", "out_w")[3 - k:]
    if out_shape is not None:
        if isinstance(out_shape, Variable):
            out_shape.stop_gradient = True
            inputs["OutSize"] = [out_shape]
        else:
            if not isinstance(out_shape, (list, tuple)):
                raise TypeError(f"image_resize: out_shape should be a list or tuple or "
                                f"Variable, got {type(out_shape).__name__}")
            if len(out_shape) != k:
                raise ValueError(f"image_resize: out_shape length should be {k} for input "
                                 f"{len(shape)}-D tensor, got {list(out_shape)!r}")
            contain_var = any(isinstance(d, Variable) for d in out_shape)
            for d in out_shape:
                if isinstance(d, Variable):
                    continue
                if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
                    raise TypeError(f"image_resize: each size in out_shape must be an int or "
                                    f"a Variable, got {d!r}")
                if d <= 0:
                    raise ValueError(f"image_resize: each dimension size given in out_shape "
                                     f"must be greater than 0, got {list(out_shape)!r}")
            sizes = [-1 if isinstance(d, Variable) else int(d) for d in out_shape]
            if contain_var:
                # Fluid 1.8: every size becomes an int32 [1] tensor and the attrs keep -1
                # where a Variable stands
                inputs["SizeTensor"] = _shape_tensor_list(out_shape, helper)
            attrs.update(zip(size_names, sizes, strict=True))
    elif isinstance(scale, Variable):
        scale.stop_gradient = True
        inputs["Scale"] = [scale]
    elif isinstance(scale, (int, float, np.integer, np.floating)) and not isinstance(scale,
                                                                                     bool):
        if scale <= 0:
            raise ValueError(f"image_resize: Attr(scale) should be greater than zero, got "
                             f"{scale!r}")
        attrs["scale"] = float(scale)
    else:
        raise TypeError(f"image_resize: Attr(scale)'s type should be float, int or Variable, "
                        f"got {type(scale).__name__}")

    if isinstance(actual_shape, Variable):
        warnings.warn("actual_shape will be deprecated, it is recommended to use out_shape "
                      "instead of actual_shape to specify output shape dynamically.",
                      stacklevel=2)
        actual_shape.stop_gradient = True
        inputs["OutSize"] = [actual_shape]
    elif actual_shape is not None:
        raise TypeError(f"image_resize: actual_shape should either be Variable or None, got "
                        f"{type(actual_shape).__name__}")

    out = helper.create_tmp(dtype=input.dtype, shape=_static_out_shape(shape, inputs, attrs))
    helper.append_op(f"{method}_interp", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def resize_bilinear(input: Variable,
                    out_shape: Sequence[int | Variable] | Variable | None = None,
                    scale: float | Variable | None = None, name: str | None = None,
                    actual_shape: Variable | None = None, align_corners: bool = True,
                    align_mode: int = 1, data_format: str = "NCHW") -> Variable:
    """Bilinear resize of a 4-D image batch (Fluid 1.8's ``layers.resize_bilinear``):
    :func:`image_resize` with ``resample='BILINEAR'``."""
    return image_resize(input, out_shape, scale, name, "BILINEAR", actual_shape, align_corners,
                        align_mode, data_format)


def resize_trilinear(input: Variable,
                     out_shape: Sequence[int | Variable] | Variable | None = None,
                     scale: float | Variable | None = None, name: str | None = None,
                     actual_shape: Variable | None = None, align_corners: bool = True,
                     align_mode: int = 1, data_format: str = "NCDHW") -> Variable:
    """Trilinear resize of a 5-D volume batch (Fluid 1.8's ``layers.resize_trilinear``):
    :func:`image_resize` with ``resample='TRILINEAR'``."""
    return image_resize(input, out_shape, scale, name, "TRILINEAR", actual_shape,
                        align_corners, align_mode, data_format)


def resize_nearest(input: Variable,
                   out_shape: Sequence[int | Variable] | Variable | None = None,
                   scale: float | Variable | None = None, name: str | None = None,
                   actual_shape: Variable | None = None, align_corners: bool = True,
                   data_format: str = "NCHW") -> Variable:
    """Nearest-neighbour resize of a 4-D image batch (Fluid 1.8's ``layers.resize_nearest``):
    :func:`image_resize` with ``resample='NEAREST'`` (``align_mode`` 1, unused by nearest)."""
    return image_resize(input, out_shape, scale, name, "NEAREST", actual_shape, align_corners,
                        1, data_format)


def image_resize_short(input: Variable, out_short_len: int,
                       resample: str = "BILINEAR") -> Variable:
    """Resize a 4-D NCHW batch so that its shorter side is ``out_short_len``, the longer one
    in proportion, rounded half up (Fluid 1.8's ``layers.image_resize_short``)."""
    _check_var(input, "input", "image_resize_short")
    shape = list(input.shape or ())
    if len(shape) != 4:
        raise ValueError(f"image_resize_short: the rank of input must be 4 (num_batches, "
                         f"channels, in_h, in_w), got shape {shape}")
    hw = shape[2:4]
    if min(hw) <= 0:
        raise ValueError(f"image_resize_short: the height and width of input {input.name!r} "
                         f"must be known (> 0), got shape {shape}")
    short_idx = hw.index(min(hw))
    long_idx = 1 - short_idx
    out_shape = list(hw)
    out_shape[short_idx] = out_short_len
    out_shape[long_idx] = int(float(out_shape[long_idx])
                              * (float(out_short_len) / float(hw[short_idx])) + 0.5)
    return image_resize(input=input, out_shape=out_shape, resample=resample)
