"""Image layers of ``fluid.layers``: ``conv2d``, ``conv2d_transpose``, ``pool2d``,
``adaptive_pool2d``, ``pixel_shuffle``, ``maxout`` and the per-channel ``affine_channel``,
``shuffle_channel`` and ``space_to_depth`` (Fluid 1.8's signatures and defaults; the kernels
are in :mod:`dask_fluid.ops.conv_ops`, :mod:`dask_fluid.ops.image_channel_ops` and
:mod:`dask_fluid.ops.shape_ops`; the normalisations are in :mod:`dask_fluid.layers.norm`, the
3-D layers in :mod:`dask_fluid.layers.image3d`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..framework import Variable
from ..initializer import NormalInitializer
from ..layer_helper import LayerHelper
from ..ops.conv_ops import (
    conv_output_size,
    conv_transpose_output_size,
    pool_output_size,
    resolve_paddings,
)
from ..param_attr import ParamAttr
from .checks import check_type, check_variable_and_dtype
from .tensor import _check_float, _check_var, _known

__all__ = [
    "adaptive_pool2d", "affine_channel", "conv2d", "conv2d_transpose", "deformable_conv",
    "maxout", "pixel_shuffle", "pool2d", "shuffle_channel", "space_to_depth",
]


def _pair(value: Any, name: str, layer: str) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value, value]
    if len(values) != 2 or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{layer}: {name} must be an int or a pair of ints, got {value!r}")
    return [int(v) for v in values]


def _padding(padding: Any, layer: str, data_format: str = "NCHW") -> tuple[list[int], str]:
    """Fluid's ``padding`` argument as ``(paddings attr, padding_algorithm)``; Fluid 1.8's
    per-dimension form (four ``[before, after]`` pairs in the data's layout, zero on the batch
    and channel dimensions) becomes ``[top, bottom, left, right]``."""
    if isinstance(padding, (list, tuple)) and len(padding) == 4 and all(
            isinstance(p, (list, tuple)) for p in padding):
        spatial = (1, 2) if data_format == "NHWC" else (2, 3)
        other = [list(padding[i]) for i in range(4) if i not in spatial]
        if any(p != [0, 0] for p in other):
            raise ValueError(f"{layer}: non-zero padding {padding!r} in the batch or channel "
                             f"dimensions is not supported ({data_format})")
        padding = [v for i in spatial for v in padding[i]]
    if isinstance(padding, str):
        algorithm = padding.upper()
        if algorithm not in ("SAME", "VALID"):
            raise ValueError(f"{layer}: padding must be 'SAME', 'VALID', an int or a list of "
                             f"2 or 4 ints, got {padding!r}")
        return [0, 0], algorithm
    values = list(padding) if isinstance(padding, (list, tuple)) else [padding, padding]
    if len(values) not in (2, 4) or not all(isinstance(v, int) and v >= 0 for v in values):
        raise ValueError(f"{layer}: padding must be 'SAME', 'VALID', an int or a list of 2 or "
                         f"4 ints >= 0, got {padding!r}")
    return [int(v) for v in values], "EXPLICIT"


def _nchw(input: Variable, layer: str, data_format: str) -> tuple[int, ...]:
    """``(N, C, H, W)`` of a 4-D input in ``data_format`` (``"NCHW"`` or ``"NHWC"``)."""
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError(f"{layer}: data_format must be 'NCHW' or 'NHWC', got "
                         f"{data_format!r}")
    shape = tuple(input.shape or ())
    if len(shape) != 4:
        raise ValueError(f"{layer}: input {input.name!r} must be 4-D {data_format}, got shape "
                         f"{list(shape)}")
    if data_format == "NHWC":
        n, h, w, c = shape
        return n, c, h, w
    return shape


def _shaped(data_format: str, n: int, c: int, h: int, w: int) -> list[int]:
    """An output shape in the data's layout."""
    return [n, h, w, c] if data_format == "NHWC" else [n, c, h, w]


def _channel_bias(helper: LayerHelper, pre_bias: Variable, bias_attr: Any,
                  data_format: str = "NCHW") -> Variable:
    """``pre_bias`` plus a per-channel bias (zeros) along the channel axis (1, or 3 for
    NHWC, as Fluid's ``append_bias_op``), unless ``bias_attr`` is False."""
    battr = ParamAttr._to_attr(bias_attr)
    if battr is False:
        return pre_bias
    axis = 3 if data_format == "NHWC" else 1
    b = helper.create_parameter(battr, [pre_bias.shape[axis]], pre_bias.dtype, is_bias=True)
    out = helper.create_tmp(dtype=pre_bias.dtype, shape=pre_bias.shape)
    helper.append_op("elementwise_add", inputs={"X": [pre_bias], "Y": [b]},
                     outputs={"Out": [out]}, attrs={"axis": axis})
    return out


def conv2d(input: Variable, num_filters: int, filter_size: int | Sequence[int],
           stride: int | Sequence[int] = 1, padding: Any = 0,
           dilation: int | Sequence[int] = 1, groups: int | None = None,
           param_attr: Any = None, bias_attr: Any = None, use_cudnn: bool = True,
           act: str | None = None, name: str | None = None,
           data_format: str = "NCHW") -> Variable:
    """2-D convolution, as Fluid 1.8's ``layers.conv2d``.

    The filter ``[num_filters, C / groups, KH, KW]`` starts from ``Normal(0, sqrt(2 / (KH *
    KW * C)))``; the bias ``[num_filters]`` (zeros) is added along the channel axis (1, or 3
    with ``data_format="NHWC"``: the op then computes channels-last). ``groups == C``
    with ``use_cudnn=False`` (and ``num_filters`` a multiple of ``C``) makes the op
    ``depthwise_conv2d``, as in Fluid.

    Parameters
    ----------
    input : Variable
        ``[N, C, H, W]`` (``[N, H, W, C]`` with ``data_format="NHWC"``).
    num_filters : int
    filter_size, stride, dilation : int or pair of int
    padding : int, pair, 4 ints ``[top, bottom, left, right]``, "SAME" or "VALID"
    groups : int, optional
        Grouped convolution (``None``: 1).
    param_attr, bias_attr : ParamAttr, ... or False
    use_cudnn : bool
        Accepted as Fluid does (a non-bool is a ValueError); the kernel is the same.
    act : str, optional

    Raises
    ------
    TypeError
        ``input`` is not a float16/32/64 Variable (checked first, as Fluid).
    ValueError
        A non-bool ``use_cudnn``, a bad ``data_format`` or ``padding``, an unknown channel
        count, or channels that do not split into ``groups``.
    """
    _check_float(input, "input", "conv2d")
    if not isinstance(use_cudnn, bool):
        raise ValueError(f"conv2d: use_cudnn must be True or False, got {use_cudnn!r}")
    n, c, h, w = _nchw(input, "conv2d", data_format)
    if not isinstance(num_filters, int) or num_filters <= 0:
        raise ValueError(f"conv2d: num_filters must be a positive int, got {num_filters!r}")
    # Fluid picks depthwise_conv2d by the groups argument as given (None is never C)
    depthwise = c > 0 and c == groups and num_filters % c == 0 and not use_cudnn
    groups = 1 if groups is None else int(groups)
    if c <= 0 or groups <= 0 or c % groups or num_filters % groups:
        raise ValueError(f"conv2d: the input's {c} channels and num_filters={num_filters} must "
                         f"both be multiples of groups={groups}")
    ksize = _pair(filter_size, "filter_size", "conv2d")
    strides = _pair(stride, "stride", "conv2d")
    dilations = _pair(dilation, "dilation", "conv2d")
    paddings, algorithm = _padding(padding, "conv2d", data_format)
    op_type = "depthwise_conv2d" if depthwise else "conv2d"
    helper = LayerHelper(op_type, name)  # Fluid names the parameters after the op type
    std = (2.0 / (ksize[0] * ksize[1] * c)) ** 0.5
    filt = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                   [num_filters, c // groups, *ksize], input.dtype,
                                   default_initializer=NormalInitializer(0.0, std, 0))
    pads = resolve_paddings(paddings, algorithm, (max(h, 1), max(w, 1)), ksize, strides)
    if algorithm == "SAME":  # dilations play no part (UpdatePaddingAndDilation resets them)
        oh = -1 if h < 0 else -(-h // strides[0])
        ow = -1 if w < 0 else -(-w // strides[1])
    else:
        oh = conv_output_size(h, ksize[0], pads[0], pads[1], strides[0], dilations[0])
        ow = conv_output_size(w, ksize[1], pads[2], pads[3], strides[1], dilations[1])
    if oh == 0 or ow == 0 or oh < -1 or ow < -1:
        raise ValueError(f"conv2d: input {list(input.shape)} with filter {ksize}, padding "
                         f"{padding!r}, stride {strides} and dilation {dilations} leaves no "
                         "output")
    pre_bias = helper.create_tmp(dtype=input.dtype,
                                 shape=_shaped(data_format, n, num_filters, oh, ow))
    helper.append_op(op_type, inputs={"Input": [input], "Filter": [filt]},
                     outputs={"Output": [pre_bias]},
                     attrs={"strides": strides, "paddings": paddings, "dilations": dilations,
                            "groups": groups, "use_cudnn": bool(use_cudnn),
                            "use_mkldnn": False, "fuse_relu_before_depthwise_conv": False,
                            "padding_algorithm": algorithm, "data_format": data_format})
    return helper.append_activation(_channel_bias(helper, pre_bias, bias_attr, data_format),
                                    act)


def pool2d(input: Variable, pool_size: int | Sequence[int] = -1, pool_type: str = "max",
           pool_stride: int | Sequence[int] = 1, pool_padding: Any = 0,
           global_pooling: bool = False, use_cudnn: bool = True, ceil_mode: bool = False,
           name: str | None = None, exclusive: bool = True,
           data_format: str = "NCHW") -> Variable:
    """Max or average pooling, as Fluid 1.8's ``layers.pool2d`` (``data_format`` ``"NCHW"`` or
    ``"NHWC"``).

    Windows are clipped to the input; ``exclusive`` averages divide by the clipped window's
    size; ``ceil_mode`` rounds the output size up; ``global_pooling`` pools each whole map.

    Raises
    ------
    TypeError
        ``input`` is not a Variable, or ``use_cudnn`` is not a bool (as Fluid).
    ValueError
        A bad ``pool_type``, ``data_format`` or ``pool_padding``, no ``pool_size`` without
        ``global_pooling``, or ``pool_padding="VALID"`` with ``ceil_mode``.
    """
    _check_var(input, "input", "pool2d")
    # Fluid 1.8's checks, in its order
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if not global_pooling and pool_size == -1:
        raise ValueError("pool2d: pool_size must be given when global_pooling is False")
    if not isinstance(use_cudnn, bool):
        raise TypeError(f"pool2d: use_cudnn must be True or False, got {use_cudnn!r}")
    n, c, h, w = _nchw(input, "pool2d", data_format)
    ksize = [1, 1] if pool_size == -1 else _pair(pool_size, "pool_size", "pool2d")
    strides = _pair(pool_stride, "pool_stride", "pool2d")
    paddings, algorithm = _padding(pool_padding, "pool2d", data_format)
    if algorithm == "VALID" and ceil_mode:
        raise ValueError("pool2d: pool_padding 'VALID' needs ceil_mode=False, got True")
    if global_pooling:
        oh, ow = 1, 1
    elif algorithm == "SAME":
        oh = -1 if h < 0 else -(-h // strides[0])
        ow = -1 if w < 0 else -(-w // strides[1])
    else:
        pads = resolve_paddings(paddings, algorithm, (h, w), ksize, strides)
        oh = pool_output_size(h, ksize[0], pads[0], pads[1], strides[0], ceil_mode)
        ow = pool_output_size(w, ksize[1], pads[2], pads[3], strides[1], ceil_mode)
        if oh == 0 or ow == 0 or oh < -1 or ow < -1:
            raise ValueError(f"pool2d: input {list(input.shape)} with pool_size {ksize} and "
                             f"padding {pool_padding!r} leaves no output")
    helper = LayerHelper("pool2d", name)
    out = helper.create_tmp(dtype=input.dtype, shape=_shaped(data_format, n, c, oh, ow))
    helper.append_op("pool2d", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"pooling_type": pool_type, "ksize": ksize,
                            "global_pooling": bool(global_pooling), "strides": strides,
                            "paddings": paddings, "padding_algorithm": algorithm,
                            "use_cudnn": bool(use_cudnn), "ceil_mode": bool(ceil_mode),
                            "use_mkldnn": False, "exclusive": bool(exclusive),
                            "data_format": data_format})
    return out


def conv2d_transpose(input: Variable, num_filters: int, output_size: Any = None,
                     filter_size: Any = None, padding: Any = 0, stride: Any = 1,
                     dilation: Any = 1, groups: int | None = None, param_attr: Any = None,
                     bias_attr: Any = None, use_cudnn: bool = True, act: str | None = None,
                     name: str | None = None, data_format: str = "NCHW") -> Variable:
    """Transposed 2-D convolution, as Fluid 1.8's ``layers.conv2d_transpose`` (``data_format``
    ``"NCHW"`` or ``"NHWC"``).

    The filter is ``[C, num_filters / groups, KH, KW]`` (Xavier). Without ``filter_size`` it
    follows from ``output_size``: ``(output - (H - 1) * stride + 2 * padding - 1) //
    dilation + 1``. The bias ``[num_filters]`` is added along the channel axis. With
    ``groups == C == num_filters`` and ``use_cudnn=False`` the op is
    ``depthwise_conv2d_transpose``, as in Fluid. ``padding="SAME"`` pads as a SAME conv2d of
    this layer's input would, with the dilations reset to 1 (Fluid's
    ``UpdatePaddingAndDilation``).

    Raises
    ------
    TypeError
        ``input`` is not a Variable.
    ValueError
        A non-bool ``use_cudnn``, a bad ``data_format`` or ``padding``, or channels that do
        not split into ``groups``.
    """
    _check_var(input, "input", "conv2d_transpose")
    if not isinstance(use_cudnn, bool):
        raise ValueError(f"conv2d_transpose: use_cudnn must be True or False, got "
                         f"{use_cudnn!r}")
    n, c, h, w = _nchw(input, "conv2d_transpose", data_format)
    # Fluid 1.8 emits depthwise_conv2d_transpose for groups (as given) == C == num_filters
    # without cuDNN; it computes as the grouped conv2d_transpose
    op_type = "depthwise_conv2d_transpose" if c == groups == num_filters and not use_cudnn \
        else "conv2d_transpose"
    groups = 1 if groups is None else int(groups)
    if not isinstance(num_filters, int) or num_filters <= 0 or num_filters % groups or \
            c % groups:
        raise ValueError(f"conv2d_transpose: num_filters={num_filters!r} and the input's {c} "
                         f"channels must be positive multiples of groups={groups}")
    strides = _pair(stride, "stride", "conv2d_transpose")
    dilations = _pair(dilation, "dilation", "conv2d_transpose")
    paddings, algorithm = _padding(padding, "conv2d_transpose", data_format)
    if filter_size is None:
        if output_size is None:
            raise ValueError("conv2d_transpose: give output_size or filter_size")
        out_hw = _pair(output_size, "output_size", "conv2d_transpose")
        pads = resolve_paddings(paddings, "EXPLICIT", (h, w), (1, 1), strides)
        filter_size = [(o - (d - 1) * s + pads[2 * i] + pads[2 * i + 1] - 1) // dil + 1
                       for i, (o, d, s, dil) in enumerate(zip(out_hw, (h, w), strides,
                                                               dilations, strict=True))]
    ksize = _pair(filter_size, "filter_size", "conv2d_transpose")
    helper = LayerHelper(op_type, name)
    filt = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                   [c, num_filters // groups, *ksize], input.dtype)
    pads = resolve_paddings(paddings, algorithm, (max(h, 1), max(w, 1)), ksize, strides)
    # SAME resets the dilations to 1 (UpdatePaddingAndDilation); the attr keeps them, as Fluid
    dh, dw = (1, 1) if algorithm == "SAME" else dilations
    oh = conv_transpose_output_size(h, ksize[0], pads[0], pads[1], strides[0], dh)
    ow = conv_transpose_output_size(w, ksize[1], pads[2], pads[3], strides[1], dw)
    out_attr: list[int] = []
    if output_size is not None:
        out_attr = _pair(output_size, "output_size", "conv2d_transpose")
        oh, ow = out_attr
    pre_bias = helper.create_tmp(dtype=input.dtype,
                                 shape=_shaped(data_format, n, num_filters, oh, ow))
    helper.append_op(op_type, inputs={"Input": [input], "Filter": [filt]},
                     outputs={"Output": [pre_bias]},
                     attrs={"output_size": out_attr, "strides": strides, "paddings": paddings,
                            "padding_algorithm": algorithm, "dilations": dilations,
                            "groups": groups, "use_cudnn": bool(use_cudnn),
                            "data_format": data_format})
    return helper.append_activation(_channel_bias(helper, pre_bias, bias_attr, data_format),
                                    act)


def pixel_shuffle(x: Variable, upscale_factor: int) -> Variable:
    """``[N, C·r², H, W]`` → ``[N, C, H·r, W·r]`` with ``r = upscale_factor`` (Fluid 1.8's
    ``layers.pixel_shuffle``)."""
    _check_var(x, "x", "pixel_shuffle")
    if not isinstance(upscale_factor, int) or upscale_factor < 1:
        raise TypeError(f"pixel_shuffle: upscale_factor must be a positive int, got "
                        f"{upscale_factor!r}")
    shape = list(x.shape or ())
    if len(shape) != 4:
        raise ValueError(f"pixel_shuffle: x {x.name!r} must be 4-D NCHW, got shape {shape}")
    r = upscale_factor
    if shape[1] > 0 and shape[1] % (r * r):
        raise ValueError(f"pixel_shuffle: the {shape[1]} channels of {x.name!r} must be a "
                         f"multiple of upscale_factor² ({r * r})")
    helper = LayerHelper("pixel_shuffle")
    out = helper.create_tmp(dtype=x.dtype, shape=[
        shape[0], shape[1] // (r * r) if shape[1] > 0 else -1,
        shape[2] * r if shape[2] > 0 else -1, shape[3] * r if shape[3] > 0 else -1])
    helper.append_op("pixel_shuffle", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"upscale_factor": r})
    return out


def maxout(x: Variable, groups: int, name: str | None = None, axis: int = 1) -> Variable:
    """The maximum of each run of ``groups`` channels: ``[N, C, H, W]`` → ``[N, C / groups,
    H, W]`` (Fluid 1.8's ``layers.maxout``; ``axis`` 1 for NCHW, -1 or 3 for NHWC)."""
    check_variable_and_dtype(x, "x", ("float32", "float64"), "maxout")
    _check_var(x, "x", "maxout")
    if axis not in (1, -1, 3):
        raise ValueError(f"maxout: axis must be 1 (NCHW), -1 or 3 (NHWC), got {axis!r}")
    axis = 3 if axis == -1 else axis
    shape = list(x.shape or ())
    if len(shape) != 4:
        raise ValueError(f"maxout: x {x.name!r} must be 4-D, got shape {shape}")
    # groups > 1: Fluid 1.8's op refuses 1 when the layer appends it (MaxOutOp::InferShape)
    if not isinstance(groups, int) or groups <= 1 or (shape[axis] > 0 and shape[axis] % groups):
        raise ValueError(f"maxout: groups={groups!r} must be an int larger than 1 dividing "
                         f"dim {axis} of {x.name!r} ({shape[axis]})")
    helper = LayerHelper("maxout", name)
    out_shape = list(shape)
    out_shape[axis] = shape[axis] // groups if shape[axis] > 0 else -1
    out = helper.create_tmp(dtype=x.dtype, shape=out_shape)
    helper.append_op("maxout", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"groups": groups, "axis": axis})
    return out


# -- per-channel layers: affine_channel, shuffle_channel, space_to_depth; adaptive_pool2d -------

def affine_channel(x: Variable, scale: Variable | None = None, bias: Variable | None = None,
                   data_layout: str = "NCHW", name: str | None = None,
                   act: str | None = None) -> Variable:
    """``x · scale + bias`` per channel (axis 1 for ``NCHW``, the last for ``NHWC``), as
    Fluid 1.8's ``layers.affine_channel``. ``scale`` and ``bias`` are 1-D variables of the
    channel count; the op needs both (Fluid's signature defaults them to None, but the op
    fails without them)."""
    _check_var(x, "x", "affine_channel")
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"affine_channel: data_layout must be 'NCHW' or 'NHWC', got "
                         f"{data_layout!r}")
    for arg, v in (("scale", scale), ("bias", bias)):
        if not isinstance(v, Variable):
            raise TypeError(f"affine_channel: {arg} must be a Variable of shape [C], got "
                            f"{type(v).__name__}")
    shape = list(x.shape or ())
    if len(shape) < 2:
        raise ValueError(f"affine_channel: x {x.name!r} needs rank >= 2, got shape {shape}")
    c = shape[1] if data_layout == "NCHW" else shape[-1]
    for arg, v in (("scale", scale), ("bias", bias)):
        vs = list(v.shape or ())
        if len(vs) != 1 or (_known(c) and _known(vs[0]) and vs[0] != c):
            raise ValueError(f"affine_channel: {arg} must have shape [{c}] (the channels of "
                             f"{x.name!r}), got {vs}")
    helper = LayerHelper("affine_channel", name)
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    helper.append_op("affine_channel", inputs={"X": [x], "Scale": [scale], "Bias": [bias]},
                     outputs={"Out": [out]}, attrs={"data_layout": data_layout})
    return helper.append_activation(out, act)


def shuffle_channel(x: Variable, group: int, name: str | None = None) -> Variable:
    """Shuffle the channels of an NCHW ``x`` as Fluid 1.8's ``layers.shuffle_channel``:
    view them as a ``[group, C / group]`` matrix and transpose it."""
    _check_var(x, "x", "shuffle_channel")
    if not isinstance(group, int) or isinstance(group, bool):
        raise TypeError(f"shuffle_channel: group must be int, got {type(group).__name__}")
    shape = list(x.shape or ())
    if len(shape) != 4:
        raise ValueError(f"shuffle_channel: x {x.name!r} must be 4-D NCHW, got shape {shape}")
    if group < 1 or (_known(shape[1]) and shape[1] % group):
        raise ValueError(f"shuffle_channel: group={group} must be a positive divisor of the "
                         f"{shape[1]} channels of {x.name!r}")
    helper = LayerHelper("shuffle_channel", name)
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    helper.append_op("shuffle_channel", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"group": group})
    return out


def space_to_depth(x: Variable, blocksize: int, name: str | None = None) -> Variable:
    """``[B, C, H, W]`` → ``[B, C·bs², H/bs, W/bs]`` as Fluid 1.8's ``layers.space_to_depth``
    (the YOLOv2 reorg; Paddle's index map, which is not TensorFlow's: see
    :func:`dask_fluid.ops.image_channel_ops.space_to_depth`)."""
    _check_var(x, "x", "space_to_depth")
    if not isinstance(blocksize, int) or isinstance(blocksize, bool):
        raise ValueError(f"space_to_depth: blocksize must be a python int, got {blocksize!r}")
    shape = list(x.shape or ())
    if len(shape) != 4:
        raise ValueError(f"space_to_depth: x {x.name!r} must be 4-D NCHW, got shape {shape}")
    if blocksize <= 1:
        raise ValueError(f"space_to_depth: blocksize must be > 1, got {blocksize}")
    bs = blocksize
    for axis, div, what in ((1, bs * bs, "channels"), (2, bs, "height"), (3, bs, "width")):
        if _known(shape[axis]) and (shape[axis] == 0 or shape[axis] % div):
            raise ValueError(f"space_to_depth: the {what} of {x.name!r} ({shape[axis]}) must "
                             f"be a positive multiple of {div} (blocksize={bs})")
    out_shape = [shape[0], shape[1] * bs * bs if _known(shape[1]) else -1,
                 shape[2] // bs if _known(shape[2]) else -1,
                 shape[3] // bs if _known(shape[3]) else -1]
    helper = LayerHelper("space_to_depth", name)
    out = helper.create_tmp(dtype=x.dtype, shape=out_shape)
    helper.append_op("space_to_depth", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"blocksize": bs})
    return out


def adaptive_pool2d(input: Variable, pool_size: int | Sequence[int], pool_type: str = "max",
                    require_index: bool = False,
                    name: str | None = None) -> Variable | tuple[Variable, Variable]:
    """Adaptive pooling of an NCHW input to ``pool_size`` outputs, as Fluid 1.8's
    ``layers.adaptive_pool2d``: output ``(i, j)`` pools rows ``[floor(i·H/m),
    ceil((i+1)·H/m))`` and the columns likewise. As in Fluid, max pooling is the op
    ``max_pool2d_with_index`` (whose ``Mask`` output, int32 positions ``h·W + w``, is
    returned too with ``require_index``) and average pooling is ``pool2d`` with
    ``adaptive=True``."""
    _check_var(input, "input", "adaptive_pool2d")
    size = _adaptive_args("adaptive_pool2d", pool_size, pool_type, require_index, _pair, 2)
    n, c, _, _ = _nchw(input, "adaptive_pool2d", "NCHW")
    return _append_adaptive_pool(2, input, n, c, size, pool_type, require_index, name)


def _adaptive_args(layer: str, pool_size: Any, pool_type: Any, require_index: Any,
                   normalise: Any, dims: int) -> list[int]:
    """adaptive_pool2d's and adaptive_pool3d's argument checks: the output size per dim."""
    if not isinstance(pool_type, str) or pool_type not in ("max", "avg"):
        raise ValueError(f"{layer}: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if not isinstance(require_index, bool):
        raise TypeError(f"{layer}: require_index must be a bool, got "
                        f"{type(require_index).__name__}")
    if pool_type == "avg" and require_index:
        raise ValueError(f"{layer}: require_index=True needs pool_type='max', got 'avg'")
    if not isinstance(pool_size, (int, list, tuple)):
        raise TypeError(f"{layer}: pool_size must be an int or a list/tuple of {dims} ints, "
                        f"got {type(pool_size).__name__}")
    size = normalise(pool_size, "pool_size", layer)
    if min(size) <= 0:
        raise ValueError(f"{layer}: pool_size must be positive, got {pool_size!r}")
    return size


def _append_adaptive_pool(dims: int, input: Variable, n: int, c: int, size: list[int],
                          pool_type: str, require_index: bool, name: str | None
                          ) -> Variable | tuple[Variable, Variable]:
    """Fluid's adaptive pooling ops: ``max_pool{dims}d_with_index`` (with its int32 ``Mask``)
    for max, ``pool{dims}d`` with ``adaptive=True`` for avg."""
    op_type = f"max_pool{dims}d_with_index" if pool_type == "max" else f"pool{dims}d"
    helper = LayerHelper(op_type, name)
    out = helper.create_tmp(dtype=input.dtype, shape=[n, c, *size])
    outputs = {"Out": [out]}
    if pool_type == "max":
        # Fluid declares the mask with the input's dtype; its kernel writes int32
        mask = helper.create_tmp(dtype="int32", shape=[n, c, *size], stop_gradient=True)
        outputs["Mask"] = [mask]
    helper.append_op(op_type, inputs={"X": [input]}, outputs=outputs,
                     attrs={"pooling_type": pool_type, "ksize": size, "adaptive": True})
    return (out, mask) if require_index else out




def deformable_conv(input: Variable, offset: Variable, mask: Variable | None, num_filters: int,
                    filter_size: int | Sequence[int], stride: int | Sequence[int] = 1,
                    padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                    groups: int | None = None, deformable_groups: int | None = None,
                    im2col_step: int | None = None, param_attr: Any = None,
                    bias_attr: Any = None, modulated: bool = True,
                    name: str | None = None) -> Variable:
    """Deformable convolution of an NCHW input, as Fluid 1.8's ``layers.deformable_conv``.

    Each filter tap samples the input bilinearly at its regular position plus a learnt
    ``offset`` ``[N, 2·deformable_groups·KH·KW, H_out, W_out]`` (``(Δh, Δw)`` pairs per tap)
    and, with ``modulated`` (the op ``deformable_conv``, v2), scales the sample by ``mask``
    ``[N, deformable_groups·KH·KW, H_out, W_out]``; without it the op is
    ``deformable_conv_v1`` and ``mask`` is not read. The filter ``[num_filters, C / groups,
    KH, KW]`` starts from ``Normal(0, sqrt(2 / (KH·KW·C)))``; the bias ``[num_filters]``
    (zeros) is added along axis 1. ``groups``, ``deformable_groups`` and ``im2col_step``
    default (``None``) to the op's 1, 1 and 64.
    """
    check_variable_and_dtype(input, "input", ("float32", "float64"), "deformable_conv")
    check_variable_and_dtype(offset, "offset", ("float32", "float64"), "deformable_conv")
    check_type(mask, "mask", (Variable, type(None)), "deformable_conv")
    _check_var(input, "input", "deformable_conv")
    _check_var(offset, "offset", "deformable_conv")
    if modulated:
        _check_var(mask, "mask", "deformable_conv")
    elif mask is not None and not isinstance(mask, Variable):
        raise TypeError(f"deformable_conv: mask must be a Variable or None, got "
                        f"{type(mask).__name__}")
    if ParamAttr._to_attr(param_attr) is False:
        raise ValueError("deformable_conv: param_attr must not be False (the filter is a "
                         "parameter)")
    n, c, h, w = _nchw(input, "deformable_conv", "NCHW")
    if not isinstance(num_filters, int) or num_filters <= 0:
        raise ValueError(f"deformable_conv: num_filters must be a positive int, got "
                         f"{num_filters!r}")
    groups = 1 if groups is None else groups
    deformable_groups = 1 if deformable_groups is None else deformable_groups
    im2col_step = 64 if im2col_step is None else im2col_step
    for arg, value in (("groups", groups), ("deformable_groups", deformable_groups),
                       ("im2col_step", im2col_step)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"deformable_conv: {arg} must be a positive int, got {value!r}")
    if c <= 0 or c % groups:
        raise ValueError(f"deformable_conv: the input's {c} channels must be a multiple of "
                         f"groups={groups}")
    ksize = _pair(filter_size, "filter_size", "deformable_conv")
    strides = _pair(stride, "stride", "deformable_conv")
    paddings = _pair(padding, "padding", "deformable_conv")
    dilations = _pair(dilation, "dilation", "deformable_conv")
    helper = LayerHelper("deformable_conv", name)
    std = (2.0 / (ksize[0] * ksize[1] * c)) ** 0.5
    filt = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                   [num_filters, c // groups, *ksize], input.dtype,
                                   default_initializer=NormalInitializer(0.0, std, 0))
    oh = conv_output_size(h, ksize[0], paddings[0], paddings[0], strides[0], dilations[0])
    ow = conv_output_size(w, ksize[1], paddings[1], paddings[1], strides[1], dilations[1])
    if oh == 0 or ow == 0 or oh < -1 or ow < -1:
        raise ValueError(f"deformable_conv: input {list(input.shape)} with filter {ksize}, "
                         f"padding {paddings}, stride {strides} and dilation {dilations} "
                         "leaves no output")
    pre_bias = helper.create_tmp(dtype=input.dtype, shape=[n, num_filters, oh, ow])
    inputs = {"Input": [input], "Filter": [filt], "Offset": [offset]}
    if modulated:
        inputs["Mask"] = [mask]
    helper.append_op("deformable_conv" if modulated else "deformable_conv_v1", inputs=inputs,
                     outputs={"Output": [pre_bias]},
                     attrs={"strides": strides, "paddings": paddings, "dilations": dilations,
                            "groups": groups, "deformable_groups": deformable_groups,
                            "im2col_step": im2col_step})
    return _channel_bias(helper, pre_bias, bias_attr)
