"""3-D layers of ``fluid.layers``: ``conv3d``, ``conv3d_transpose``, ``pool3d`` and
``adaptive_pool3d`` (Fluid 1.8's signatures and defaults; the kernels are in
:mod:`dask_fluid.ops.conv3d_ops`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..framework import Variable
from ..initializer import NormalInitializer
from ..layer_helper import LayerHelper
from ..ops.conv3d_ops import resolve_paddings_3d
from ..ops.conv_ops import conv_output_size, conv_transpose_output_size, pool_output_size
from ..param_attr import ParamAttr
from .image import _adaptive_args, _append_adaptive_pool
from .tensor import _check_var

__all__ = ["adaptive_pool3d", "conv3d", "conv3d_transpose", "pool3d"]


def _triple(value: Any, name: str, layer: str) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * 3
    if len(values) != 3 or not all(isinstance(v, int) and not isinstance(v, bool)
                                   for v in values):
        raise ValueError(f"{layer}: {name} must be an int or 3 ints (depth, height, width), "
                         f"got {value!r}")
    return [int(v) for v in values]


def _padding3d(padding: Any, layer: str, data_format: str,
               expand: bool = False) -> tuple[list[int], str]:
    """Fluid 1.8's ``padding`` of the 3-D layers as ``(paddings attr, padding_algorithm)``:
    "SAME" / "VALID" (paddings ``[0, 0, 0]``), an int, 3 ints, 6 ints ``[front, back, top,
    bottom, left, right]`` (kept as 3 when symmetric, as Fluid's ``_update_padding``) or 5
    pairs, one per input axis, whose batch and channel pairs must be 0. ``expand`` gives 6
    values always (what conv3d_transpose computes its filter size from)."""
    if isinstance(padding, str):
        algorithm = padding.upper()
        if algorithm not in ("SAME", "VALID"):
            raise ValueError(f"{layer}: padding must be 'SAME', 'VALID', an int, 3 or 6 ints or "
                             f"5 pairs, got {padding!r}")
        return ([0] * 6 if expand else [0, 0, 0]), algorithm
    values = list(padding) if isinstance(padding, (list, tuple)) else [padding] * 3
    if len(values) == 5 and all(isinstance(v, (list, tuple)) for v in values):
        channel_axes = (0, 1) if data_format == "NCDHW" else (0, 4)
        if any(list(values[i]) != [0, 0] for i in channel_axes):
            raise ValueError(f"{layer}: non-zero padding {padding!r} in the batch or channel "
                             "dimensions is not supported")
        spatial = [values[i] for i in range(5) if i not in channel_axes]
        values = [v for pair in spatial for v in pair]
    if len(values) not in (3, 6) or not all(isinstance(v, int) and not isinstance(v, bool)
                                            and v >= 0 for v in values):
        raise ValueError(f"{layer}: padding must be 'SAME', 'VALID', an int, 3 or 6 ints >= 0 "
                         f"or 5 pairs, got {padding!r}")
    if len(values) == 3:
        values = [values[0], values[0], values[1], values[1], values[2], values[2]]
    if not expand and values[0::2] == values[1::2]:
        values = values[0::2]
    return [int(v) for v in values], "EXPLICIT"


def _ncdhw(input: Variable, layer: str, data_format: str,
           formats: tuple[str, ...] = ("NCDHW", "NDHWC")) -> tuple[list[int], bool]:
    """The input's shape and whether its channels are last; a 5-D input is required."""
    if data_format not in formats:
        raise ValueError(f"{layer}: data_format must be one of {list(formats)}, got "
                         f"{data_format!r}")
    shape = list(input.shape or ())
    if len(shape) != 5:
        raise ValueError(f"{layer}: input {input.name!r} must be 5-D ({data_format}), got "
                         f"shape {shape}")
    return shape, data_format == "NDHWC"


def _spatial(shape: list[int], last: bool) -> tuple[int, list[int]]:
    """``(channels, [D, H, W])`` of a 5-D shape."""
    return (shape[4], shape[1:4]) if last else (shape[1], shape[2:5])


def _layout(n: int, c: int, spatial: list[int], last: bool) -> list[int]:
    return [n, *spatial, c] if last else [n, c, *spatial]


def _same_or(sizes: list[int], strides: list[int], algorithm: str, other: Any) -> list[int]:
    """Output sizes: ``ceil(I / s)`` under SAME, else ``other(i, dim)``; unknown stays -1."""
    if algorithm == "SAME":
        return [-1 if i < 0 else -(-i // s) for i, s in zip(sizes, strides, strict=True)]
    return [other(i, d) for d, i in enumerate(sizes)]


def _bias_along(helper: LayerHelper, pre_bias: Variable, bias_attr: Any,
                axis: int) -> Variable:
    """``pre_bias`` plus a bias (zeros) of its ``axis`` dim added along that axis (Fluid's
    ``append_bias_op``), unless ``bias_attr`` is False."""
    battr = ParamAttr._to_attr(bias_attr)
    if battr is False:
        return pre_bias
    b = helper.create_parameter(battr, [pre_bias.shape[axis]], pre_bias.dtype, is_bias=True)
    out = helper.create_tmp(dtype=pre_bias.dtype, shape=pre_bias.shape)
    helper.append_op("elementwise_add", inputs={"X": [pre_bias], "Y": [b]},
                     outputs={"Out": [out]}, attrs={"axis": axis})
    return out


def conv3d(input: Variable, num_filters: int, filter_size: int | Sequence[int],
           stride: int | Sequence[int] = 1, padding: Any = 0,
           dilation: int | Sequence[int] = 1, groups: int | None = None,
           param_attr: Any = None, bias_attr: Any = None, use_cudnn: bool = True,
           act: str | None = None, name: str | None = None,
           data_format: str = "NCDHW") -> Variable:
    """3-D convolution of an NCDHW (or NDHWC) input, as Fluid 1.8's ``layers.conv3d``.

    The filter ``[num_filters, C / groups, KD, KH, KW]`` starts from ``Normal(0, sqrt(2 /
    (KD * KH * KW * C)))``; the bias ``[num_filters]`` (zeros) is added along the channel
    axis (1, or 4 for NDHWC). ``padding`` "SAME" gives ``ceil(I / stride)`` outputs and
    ignores the dilations, as Fluid's kernel does.

    Parameters
    ----------
    input : Variable
        ``[N, C, D, H, W]`` (``[N, D, H, W, C]`` with ``data_format="NDHWC"``).
    num_filters : int
    filter_size, stride, dilation : int or 3 ints
    padding : int, 3 ints, 6 ints ``[front, back, top, bottom, left, right]``, 5 pairs,
        "SAME" or "VALID"
    groups : int, optional
        Grouped convolution (``None``: 1).
    param_attr, bias_attr : ParamAttr, ... (``bias_attr=False``: no bias)
    use_cudnn : bool
        Accepted as Fluid does; the kernel is the same.
    act : str, optional
    """
    _check_var(input, "input", "conv3d")
    if not isinstance(use_cudnn, bool):
        raise ValueError(f"conv3d: use_cudnn must be True or False, got {use_cudnn!r}")
    shape, last = _ncdhw(input, "conv3d", data_format)
    c, sizes = _spatial(shape, last)
    if c is None or c < 0:
        raise ValueError(f"conv3d: the channel dim of input {input.name!r} must be known, got "
                         f"shape {shape}")
    if ParamAttr._to_attr(param_attr) is False:
        raise ValueError("conv3d: param_attr cannot be False (the filter is required)")
    groups = 1 if groups is None else groups
    if not isinstance(groups, int) or groups <= 0 or c % groups:
        raise ValueError(f"conv3d: the input's {c} channels must be a multiple of "
                         f"groups={groups!r}")
    if not isinstance(num_filters, int) or num_filters <= 0 or num_filters % groups:
        raise ValueError(f"conv3d: num_filters must be a positive multiple of groups={groups}, "
                         f"got {num_filters!r}")
    ksize = _triple(filter_size, "filter_size", "conv3d")
    strides = _triple(stride, "stride", "conv3d")
    dilations = _triple(dilation, "dilation", "conv3d")
    paddings, algorithm = _padding3d(padding, "conv3d", data_format)
    pads = resolve_paddings_3d(paddings, "EXPLICIT" if algorithm == "SAME" else algorithm,
                               [max(i, 1) for i in sizes], ksize, strides, "conv3d")
    outs = _same_or(sizes, strides, algorithm, lambda i, d: conv_output_size(
        i, ksize[d], pads[d][0], pads[d][1], strides[d], dilations[d]))
    if any(o == 0 or o < -1 for o in outs):
        raise ValueError(f"conv3d: input {shape} with filter {ksize}, padding {padding!r}, "
                         f"stride {strides} and dilation {dilations} leaves no output")
    helper = LayerHelper("conv3d", name)
    std = (2.0 / (ksize[0] * ksize[1] * ksize[2] * c)) ** 0.5
    filt = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                   [num_filters, c // groups, *ksize], input.dtype,
                                   default_initializer=NormalInitializer(0.0, std, 0))
    pre_bias = helper.create_tmp(dtype=input.dtype,
                                 shape=_layout(shape[0], num_filters, outs, last))
    helper.append_op("conv3d", inputs={"Input": [input], "Filter": [filt]},
                     outputs={"Output": [pre_bias]},
                     attrs={"strides": strides, "paddings": paddings, "dilations": dilations,
                            "groups": groups, "use_cudnn": use_cudnn, "use_mkldnn": False,
                            "padding_algorithm": algorithm, "data_format": data_format})
    return helper.append_activation(_bias_along(helper, pre_bias, bias_attr, 4 if last else 1),
                                    act)


def conv3d_transpose(input: Variable, num_filters: int, output_size: Any = None,
                     filter_size: Any = None, padding: Any = 0, stride: Any = 1,
                     dilation: Any = 1, groups: int | None = None, param_attr: Any = None,
                     bias_attr: Any = None, use_cudnn: bool = True, act: str | None = None,
                     name: str | None = None, data_format: str = "NCDHW") -> Variable:
    """Transposed 3-D convolution of an NCDHW (or NDHWC) input, as Fluid 1.8's
    ``layers.conv3d_transpose``.

    The filter is ``[C, num_filters / groups, KD, KH, KW]`` (Fluid's default initializer,
    Xavier). Without ``filter_size`` it follows from ``output_size``: ``(output - (I - 1) *
    stride + pad_before + pad_after - 1) // dilation + 1``. Each output size is ``(I - 1) *
    stride - pad_before - pad_after + dilation * (K - 1) + 1``, or ``output_size`` (which the
    op checks to lie within ``stride`` of that). The bias ``[num_filters]`` is added along
    the channel axis (1, or 4 for NDHWC). As Fluid 1.8 does, the op's ``data_format`` attr is
    ``"NCHW"`` (``"NHWC"`` for NDHWC).
    """
    _check_var(input, "input", "conv3d_transpose")
    if not isinstance(use_cudnn, bool):
        raise ValueError(f"conv3d_transpose: use_cudnn must be True or False, got "
                         f"{use_cudnn!r}")
    shape, last = _ncdhw(input, "conv3d_transpose", data_format)
    c, sizes = _spatial(shape, last)
    if c is None or c <= 0:
        raise ValueError(f"conv3d_transpose: the channel dim of input {input.name!r} must be "
                         f"known, got shape {shape}")
    groups = 1 if groups is None else groups
    if not isinstance(groups, int) or groups <= 0 or c % groups:
        raise ValueError(f"conv3d_transpose: the input's {c} channels must be a multiple of "
                         f"groups={groups!r}")
    if not isinstance(num_filters, int) or num_filters <= 0 or num_filters % groups:
        raise ValueError(f"conv3d_transpose: num_filters must be a positive multiple of "
                         f"groups={groups}, got {num_filters!r}")
    strides = _triple(stride, "stride", "conv3d_transpose")
    dilations = _triple(dilation, "dilation", "conv3d_transpose")
    six, algorithm = _padding3d(padding, "conv3d_transpose", data_format, expand=True)
    out_attr: list[int] = []
    if output_size is not None:
        if not isinstance(output_size, (int, list, tuple)):
            raise ValueError(f"conv3d_transpose: output_size must be an int or 3 ints, got "
                             f"{output_size!r}")
        out_attr = _triple(output_size, "output_size", "conv3d_transpose")
    if filter_size is None:
        if not out_attr:
            raise ValueError("conv3d_transpose: output_size must be set when filter_size is "
                             "None")
        if min(sizes) < 0:
            raise ValueError(f"conv3d_transpose: deriving filter_size from output_size needs "
                             f"the input's spatial dims, got shape {shape}")
        filter_size = [(o - (i - 1) * s + six[2 * d] + six[2 * d + 1] - 1) // dil + 1
                       for d, (o, i, s, dil) in enumerate(zip(out_attr, sizes, strides,
                                                               dilations, strict=True))]
    ksize = _triple(filter_size, "filter_size", "conv3d_transpose")
    if min(ksize) <= 0:
        raise ValueError(f"conv3d_transpose: filter_size must be positive, got {ksize}")
    paddings = six[0::2] if six[0::2] == six[1::2] else six
    pads = resolve_paddings_3d(paddings, algorithm, [max(i, 1) for i in sizes], ksize, strides,
                               "conv3d_transpose")
    eff_dil = [1, 1, 1] if algorithm == "SAME" else dilations
    outs = list(out_attr) or [conv_transpose_output_size(i, k, b, a, s, d) for i, k, (b, a), s, d
                              in zip(sizes, ksize, pads, strides, eff_dil, strict=True)]
    if any(o == 0 or o < -1 for o in outs):
        raise ValueError(f"conv3d_transpose: input {shape} with filter {ksize} and padding "
                         f"{padding!r} leaves no output")
    helper = LayerHelper("conv3d_transpose", name)
    filt = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                   [c, num_filters // groups, *ksize], input.dtype)
    pre_bias = helper.create_tmp(dtype=input.dtype,
                                 shape=_layout(shape[0], num_filters, outs, last))
    # Fluid 1.8 names the layouts "NCHW" / "NHWC" in this op's attr, and adds the bias of an
    # NDHWC output along its last axis (append_bias_op(dim_start=4))
    helper.append_op("conv3d_transpose", inputs={"Input": [input], "Filter": [filt]},
                     outputs={"Output": [pre_bias]},
                     attrs={"output_size": out_attr, "strides": strides, "paddings": paddings,
                            "padding_algorithm": algorithm, "dilations": dilations,
                            "groups": groups, "use_cudnn": use_cudnn,
                            "data_format": "NHWC" if last else "NCHW"})
    return helper.append_activation(
        _bias_along(helper, pre_bias, bias_attr, 4 if last else 1), act)


def pool3d(input: Variable, pool_size: int | Sequence[int] = -1, pool_type: str = "max",
           pool_stride: int | Sequence[int] = 1, pool_padding: Any = 0,
           global_pooling: bool = False, use_cudnn: bool = True, ceil_mode: bool = False,
           name: str | None = None, exclusive: bool = True,
           data_format: str = "NCDHW") -> Variable:
    """Max or average pooling of an NCDHW (or NDHWC) input, as Fluid 1.8's
    ``layers.pool3d``.

    Windows are clipped to the input; ``exclusive`` averages divide by the clipped window's
    size, the others by ``KD * KH * KW``; ``ceil_mode`` rounds the output size up;
    ``global_pooling`` pools each whole map; ``pool_padding`` "SAME" gives ``ceil(I /
    stride)`` outputs.
    """
    _check_var(input, "input", "pool3d")
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool3d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if global_pooling is False and pool_size == -1:
        raise ValueError("pool3d: pool_size must be given when global_pooling is False")
    if not isinstance(use_cudnn, bool):
        raise TypeError(f"pool3d: use_cudnn must be True or False, got {use_cudnn!r}")
    shape, last = _ncdhw(input, "pool3d", data_format)
    c, sizes = _spatial(shape, last)
    ksize = [1, 1, 1] if pool_size == -1 else _triple(pool_size, "pool_size", "pool3d")
    strides = _triple(pool_stride, "pool_stride", "pool3d")
    paddings, algorithm = _padding3d(pool_padding, "pool3d", data_format)
    if algorithm == "VALID" and ceil_mode:
        raise ValueError("pool3d: pool_padding 'VALID' needs ceil_mode=False, got True")
    if global_pooling:
        outs = [1, 1, 1]
    else:
        pads = resolve_paddings_3d(paddings, "EXPLICIT" if algorithm == "SAME" else algorithm,
                                   sizes, ksize, strides, "pool3d")
        outs = _same_or(sizes, strides, algorithm, lambda i, d: pool_output_size(
            i, ksize[d], pads[d][0], pads[d][1], strides[d], ceil_mode))
        if any(o == 0 or o < -1 for o in outs):
            raise ValueError(f"pool3d: input {shape} with pool_size {ksize} and padding "
                             f"{pool_padding!r} leaves no output")
    helper = LayerHelper("pool3d", name)
    out = helper.create_tmp(dtype=input.dtype, shape=_layout(shape[0], c, outs, last))
    helper.append_op("pool3d", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"pooling_type": pool_type, "ksize": ksize,
                            "global_pooling": bool(global_pooling), "strides": strides,
                            "paddings": paddings, "padding_algorithm": algorithm,
                            "use_cudnn": use_cudnn, "ceil_mode": bool(ceil_mode),
                            "use_mkldnn": False, "exclusive": bool(exclusive),
                            "data_format": data_format})
    return out


def adaptive_pool3d(input: Variable, pool_size: int | Sequence[int], pool_type: str = "max",
                    require_index: bool = False,
                    name: str | None = None) -> Variable | tuple[Variable, Variable]:
    """Adaptive pooling of an NCDHW input to ``pool_size`` outputs, as Fluid 1.8's
    ``layers.adaptive_pool3d``: output ``(i, j, k)`` pools depths ``[floor(i·D/l),
    ceil((i+1)·D/l))`` and the rows and columns likewise. As in Fluid, max pooling is the op
    ``max_pool3d_with_index`` (whose ``Mask`` output, int32 positions ``(d·H + h)·W + w``,
    is returned too with ``require_index``) and average pooling is ``pool3d`` with
    ``adaptive=True``."""
    _check_var(input, "input", "adaptive_pool3d")
    size = _adaptive_args("adaptive_pool3d", pool_size, pool_type, require_index, _triple, 3)
    shape, _ = _ncdhw(input, "adaptive_pool3d", "NCDHW")
    return _append_adaptive_pool(3, input, shape[0], shape[1], size, pool_type, require_index,
                                 name)
