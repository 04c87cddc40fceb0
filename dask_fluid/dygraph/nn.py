"""Fluid 1.8's dygraph layer classes (``fluid.dygraph.nn``): Linear, Conv2D, Conv2DTranspose,
Pool2D, BatchNorm, Embedding, LayerNorm, Dropout, PRelu, GroupNorm and InstanceNorm.

Each class takes Fluid 1.8's constructor arguments, creates its parameters once in
``__init__`` (named as 1.8 names them: ``linear_0.w_0``, ``conv2d_0.b_0``; held as
``self.weight``, ``self.bias``, BatchNorm's ``_mean`` / ``_variance``, InstanceNorm's
``scale``) with 1.8's shapes and default initialisers, and its ``forward`` appends the ops
the static ``fluid.layers`` function of the same name appends (``conv2d`` or
``depthwise_conv2d``, then ``elementwise_add`` of the bias along axis 1, then the
activation; ``matmul`` + ``elementwise_add`` for Linear; ...), which the tracer runs at once.
Outside ``fluid.dygraph.guard`` the same call appends those ops to the default main program,
as in Fluid 1.8: each output is declared with the shape the static function declares (``-1``
where the input's dim is unknown), and dims a static input leaves unknown are not checked
when the program is built (the kernels check the values).
Dropout and BatchNorm follow ``Layer.train()`` / ``Layer.eval()`` (``self.training``).

The module also holds (from :mod:`.nn_extra`) GRUUnit, BilinearTensorProduct, Conv3D,
Conv3DTranspose, SpectralNorm, NCE and TreeConv, which 1.8's ``dygraph/nn.py`` has too.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from ..framework import Variable, convert_dtype, default_main_program
from ..initializer import ConstantInitializer, NormalInitializer
from ..layer_helper import ACTIVATIONS
from ..layers.checks import check_variable_and_dtype
from ..ops.conv_ops import conv_output_size, conv_transpose_output_size, pool_output_size
from ..param_attr import ParamAttr
from .layer_checks import check_input, fits, int_list
from .layers import Layer
from .nn_extra import (
    NCE,
    BilinearTensorProduct,
    Conv3D,
    Conv3DTranspose,
    GRUUnit,
    SpectralNorm,
    TreeConv,
)

__all__ = ["NCE", "BatchNorm", "BilinearTensorProduct", "Conv2D", "Conv2DTranspose", "Conv3D",
           "Conv3DTranspose", "Dropout", "Embedding", "GRUUnit", "GroupNorm", "InstanceNorm",
           "LayerNorm", "Linear", "PRelu", "Pool2D", "SpectralNorm", "TreeConv"]


# -- helpers ----------------------------------------------------------------------------------
def _check_act(act: str | None, layer: str) -> None:
    if act is not None and act not in ACTIVATIONS:
        raise ValueError(f"{layer}: unknown activation act={act!r}; use one of {ACTIVATIONS} "
                         "or None")


def _check_bool(value: Any, name: str, layer: str) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{layer}: {name} should be True or False, got {value!r}")


def _float_dtype(dtype: Any, layer: str, half: bool = False) -> str:
    """``dtype`` as Fluid's name: float32 or float64 (or float16 where ``half``)."""
    name = convert_dtype(dtype)
    if name not in ("float32", "float64") and not (half and name == "float16"):
        raise TypeError(f"{layer}: dtype must be 'float32' or 'float64', got {name!r}")
    return name


def _no_output(sizes: Sequence[int], inputs: Sequence[int]) -> bool:
    """Some known input size leaves an empty (or negative) output size."""
    return any(i >= 0 and o <= 0 for i, o in zip(inputs, sizes, strict=True))


def _conv_sizes(layer: Any, input: Variable, name: str, size: Any, how: str
                ) -> tuple[tuple[int, ...], list[int]]:
    """The NCHW dims of ``input`` and the output's spatial sizes by ``size`` (the conv or
    transposed-conv rule) for Conv2D and Conv2DTranspose ``layer``; ValueError for the wrong
    channels or an input too small (``how``: the rest of the message after filter_size)."""
    n, c, h, w = check_input(input, name, dtype=layer._dtype, rank=4)
    if not fits(c, layer._num_channels):
        raise ValueError(f"{name}: the input {input.name!r} (NCHW, shape {[n, c, h, w]}) "
                         f"has {c} channels, the layer was built for num_channels="
                         f"{layer._num_channels}")
    sizes = [size(d, k, p, p, s, dil) for d, k, p, s, dil in zip(
        (h, w), layer._filter_size, layer._padding, layer._stride, layer._dilation,
        strict=True)]
    if _no_output(sizes, (h, w)):
        raise ValueError(f"{name}: an input of {h}x{w} with filter_size "
                         f"{layer._filter_size}{how} leaves no output")
    return (n, c, h, w), sizes


def _known_prod(dims: Sequence[int]) -> int:
    """The product of ``dims``, or ``-1`` where one is unknown."""
    return math.prod(dims) if all(d >= 0 for d in dims) else -1


class _Layer(Layer):
    """A Fluid 1.8 dygraph layer: its name scope from its class name (``Conv2D`` ->
    ``conv2d``), as 1.8's ``Layer``."""

    def __init__(self, dtype: Any = "float32", name_scope: str | None = None) -> None:
        super().__init__(name_scope, dtype)

    def _tmp(self, dtype: Any, shape: Sequence[int], stop_gradient: bool = False) -> Variable:
        """An output of ``shape``: what the static ``fluid.layers`` function declares, so
        that a static program can go on from it (dygraph mode takes the value's shape)."""
        return self._helper.create_tmp(dtype=dtype, shape=list(shape),
                                       stop_gradient=stop_gradient)

    def _bias_act(self, pre_bias: Variable, bias: Variable | None, axis: int,
                  act: str | None) -> Variable:
        """``pre_bias + bias`` (``elementwise_add`` along ``axis``; none without a bias),
        then the activation ``act``."""
        out = pre_bias
        if bias is not None:
            out = self._tmp(pre_bias.dtype, pre_bias.shape)
            self._helper.append_op("elementwise_add", inputs={"X": [pre_bias], "Y": [bias]},
                                   outputs={"Out": [out]}, attrs={"axis": axis})
        return self._helper.append_activation(out, act)


# -- Linear -----------------------------------------------------------------------------------
class Linear(_Layer):
    """``act(input @ weight + bias)`` over the last dim of the input (Fluid 1.8's
    ``dygraph.Linear``: ops ``matmul``, ``elementwise_add`` along the last axis, ``act``).

    Parameters
    ----------
    input_dim, output_dim : int
        ``weight`` is ``[input_dim, output_dim]`` (Xavier), ``bias`` ``[output_dim]`` (zeros).
    param_attr, bias_attr : ParamAttr, str, Initializer or None
        ``bias_attr=False``: no bias.
    act : str, optional
    dtype : str
        ``"float32"`` or ``"float64"``: the parameters' dtype, which the input must have.
    """

    def __init__(self, input_dim: int, output_dim: int, param_attr: Any = None,
                 bias_attr: Any = None, act: str | None = None,
                 dtype: Any = "float32") -> None:
        dtype = _float_dtype(dtype, "Linear")
        super().__init__(dtype)
        for arg, v in (("input_dim", input_dim), ("output_dim", output_dim)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"Linear: {arg} must be a positive int, got {v!r}")
        if param_attr is False:
            raise ValueError("Linear: param_attr=False leaves no weight; give None or a "
                             "ParamAttr")
        _check_act(act, "Linear")
        self._input_dim, self._output_dim = int(input_dim), int(output_dim)
        self._act = act
        self.weight = self.create_parameter(shape=[self._input_dim, self._output_dim],
                                            attr=param_attr, dtype=dtype, is_bias=False)
        self.bias = self.create_parameter(shape=[self._output_dim], attr=bias_attr,
                                          dtype=dtype, is_bias=True)

    def forward(self, input: Variable) -> Variable:
        shape = check_input(input, "Linear", dtype=self._dtype)
        if not shape or not fits(shape[-1], self._input_dim):
            raise ValueError(f"Linear: the input {input.name!r} has shape {list(shape)}; its "
                             f"last dim must be input_dim={self._input_dim}")
        pre_bias = self._tmp(self._dtype, [*shape[:-1], self._output_dim])
        self._helper.append_op("matmul", inputs={"X": [input], "Y": [self.weight]},
                               outputs={"Out": [pre_bias]},
                               attrs={"transpose_X": False, "transpose_Y": False,
                                      "alpha": 1.0})
        return self._bias_act(pre_bias, self.bias, len(shape) - 1, self._act)


# -- convolutions and pooling -------------------------------------------------------------------
class Conv2D(_Layer):
    """2-D convolution of an NCHW input (Fluid 1.8's ``dygraph.Conv2D``).

    ``weight`` is ``[num_filters, num_channels / groups, KH, KW]`` from
    ``Normal(0, sqrt(2 / (KH * KW * num_channels)))``; ``bias`` ``[num_filters]`` (zeros) is
    added along axis 1. The op is ``depthwise_conv2d`` when ``groups == num_channels``,
    ``num_filters`` is a multiple of it and ``use_cudnn`` is False, else ``conv2d``.

    Parameters
    ----------
    num_channels, num_filters : int
    filter_size, stride, padding, dilation : int or pair of int
    groups : int, optional
        Must divide ``num_channels`` and ``num_filters``.
    param_attr, bias_attr : ParamAttr, ...
        ``param_attr`` may not be False; ``bias_attr=False``: no bias.
    use_cudnn : bool
    act : str, optional
    dtype : str
    """

    def __init__(self, num_channels: int, num_filters: int, filter_size: Any,
                 stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                 groups: int | None = None, param_attr: Any = None, bias_attr: Any = None,
                 use_cudnn: bool = True, act: str | None = None,
                 dtype: Any = "float32") -> None:
        dtype = _float_dtype(dtype, "Conv2D")
        if param_attr is False:
            raise ValueError("Conv2D: param_attr should not be False here (the filter is "
                             "needed)")
        super().__init__(dtype)
        _check_bool(use_cudnn, "use_cudnn", "Conv2D")
        _check_act(act, "Conv2D")
        for arg, v in (("num_channels", num_channels), ("num_filters", num_filters)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"Conv2D: {arg} must be a positive int, got {v!r}")
        if groups is not None and (not isinstance(groups, numbers.Integral) or groups <= 0):
            raise ValueError(f"Conv2D: groups must be a positive int or None, got {groups!r}")
        g = 1 if groups is None else int(groups)
        if num_channels % g:
            raise ValueError(f"Conv2D: num_channels must be divisible by groups (num_channels="
                             f"{num_channels}, groups={g})")
        if num_filters % g:
            raise ValueError(f"Conv2D: num_filters must be divisible by groups (num_filters="
                             f"{num_filters}, groups={g})")
        self._num_channels, self._num_filters, self._groups = num_channels, num_filters, groups
        self._filter_size = int_list(filter_size, 2, "filter_size", "Conv2D")
        self._stride = int_list(stride, 2, "stride", "Conv2D")
        self._padding = int_list(padding, 2, "padding", "Conv2D")
        self._dilation = int_list(dilation, 2, "dilation", "Conv2D")
        if min(self._filter_size + self._stride + self._dilation) <= 0 or min(self._padding) < 0:
            raise ValueError("Conv2D: filter_size, stride and dilation must be positive and "
                             f"padding >= 0, got filter_size={filter_size!r}, stride="
                             f"{stride!r}, dilation={dilation!r}, padding={padding!r}")
        self._use_cudnn, self._act = use_cudnn, act
        self._l_type = ("depthwise_conv2d" if num_channels == groups
                        and num_filters % num_channels == 0 and not use_cudnn else "conv2d")
        fh, fw = self._filter_size
        std = (2.0 / (fh * fw * num_channels)) ** 0.5
        self.weight = self.create_parameter(
            shape=[num_filters, num_channels // g, fh, fw], attr=param_attr, dtype=dtype,
            default_initializer=NormalInitializer(0.0, std, 0))
        self.bias = self.create_parameter(shape=[num_filters], attr=bias_attr, dtype=dtype,
                                          is_bias=True)

    def forward(self, input: Variable) -> Variable:
        (n, *_), sizes = _conv_sizes(self, input, "Conv2D", conv_output_size,
                                     f", padding {self._padding} and dilation {self._dilation}")
        pre_bias = self._tmp(self._dtype, [n, self._num_filters, *sizes])
        self._helper.append_op(self._l_type,
                               inputs={"Input": [input], "Filter": [self.weight]},
                               outputs={"Output": [pre_bias]},
                               attrs={"strides": self._stride, "paddings": self._padding,
                                      "dilations": self._dilation,
                                      "groups": self._groups if self._groups else 1,
                                      "use_cudnn": self._use_cudnn, "use_mkldnn": False})
        return self._bias_act(pre_bias, self.bias, 1, self._act)


class Conv2DTranspose(_Layer):
    """Transposed 2-D convolution of an NCHW input (Fluid 1.8's ``dygraph.Conv2DTranspose``).

    ``weight`` is ``[num_channels, num_filters / groups, KH, KW]`` (Xavier); ``bias``
    ``[num_filters]`` (zeros) is added along axis 1. The op is ``conv2d_transpose``, or, as
    in Fluid 1.8, ``depthwise_conv2d_transpose`` when ``groups == num_channels ==
    num_filters`` and ``use_cudnn`` is False.

    Parameters
    ----------
    num_channels, num_filters : int
    filter_size : int or pair of int
    output_size : int or pair of int, optional
        Within ``[H', H' + stride)`` where ``H' = (H - 1) * stride - 2 * padding +
        dilation * (KH - 1) + 1``; ``H'`` when None.
    padding, stride, dilation : int or pair of int
    groups : int, optional
    param_attr, bias_attr, use_cudnn, act, dtype
        As :class:`Conv2D`.
    """

    def __init__(self, num_channels: int, num_filters: int, filter_size: Any,
                 output_size: Any = None, padding: Any = 0, stride: Any = 1,
                 dilation: Any = 1, groups: int | None = None, param_attr: Any = None,
                 bias_attr: Any = None, use_cudnn: bool = True, act: str | None = None,
                 dtype: Any = "float32") -> None:
        dtype = _float_dtype(dtype, "Conv2DTranspose")
        if param_attr is False:
            raise ValueError("Conv2DTranspose: param_attr should not be False in "
                             "conv2d_transpose")
        super().__init__(dtype)
        _check_bool(use_cudnn, "use_cudnn", "Conv2DTranspose")
        _check_act(act, "Conv2DTranspose")
        for arg, v in (("num_channels", num_channels), ("num_filters", num_filters)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"Conv2DTranspose: {arg} must be a positive int, got {v!r}")
        self._groups = 1 if groups is None else groups
        if not isinstance(self._groups, numbers.Integral) or self._groups <= 0 or \
                num_channels % self._groups or num_filters % self._groups:
            raise ValueError(f"Conv2DTranspose: num_channels={num_channels} and num_filters="
                             f"{num_filters} must both be divisible by groups={groups!r}")
        self._num_channels, self._num_filters = num_channels, num_filters
        self._filter_size = int_list(filter_size, 2, "filter_size", "Conv2DTranspose")
        self._padding = int_list(padding, 2, "padding", "Conv2DTranspose")
        self._stride = int_list(stride, 2, "stride", "Conv2DTranspose")
        self._dilation = int_list(dilation, 2, "dilation", "Conv2DTranspose")
        if min(self._filter_size + self._stride + self._dilation) <= 0 or min(self._padding) < 0:
            raise ValueError("Conv2DTranspose: filter_size, stride and dilation must be "
                             "positive and padding >= 0")
        if output_size is None:
            self._output_size: list[int] = []
        elif isinstance(output_size, (numbers.Integral, list, tuple)):
            self._output_size = int_list(output_size, 2, "output_size", "Conv2DTranspose")
        else:
            raise ValueError(f"Conv2DTranspose: output_size should be list or int, got "
                             f"{output_size!r}")
        self._use_cudnn, self._act = use_cudnn, act
        self._op_type = ("depthwise_conv2d_transpose" if num_channels == self._groups ==
                         num_filters and not use_cudnn else "conv2d_transpose")
        self.weight = self.create_parameter(
            shape=[num_channels, num_filters // self._groups, *self._filter_size],
            attr=param_attr, dtype=dtype)
        self.bias = self.create_parameter(shape=[num_filters], attr=bias_attr, dtype=dtype,
                                          is_bias=True)

    def forward(self, input: Variable) -> Variable:
        (n, _, h, w), sizes = _conv_sizes(self, input, "Conv2DTranspose",
                                          conv_transpose_output_size,
                                          f" and padding {self._padding}")
        if self._output_size and not all(
                o < 0 or o <= want < o + s for o, want, s in zip(sizes, self._output_size,
                                                                 self._stride, strict=True)):
            raise ValueError(f"Conv2DTranspose: output_size {self._output_size} must be "
                             f"within [{sizes[0]}, {sizes[0] + self._stride[0]}) x "
                             f"[{sizes[1]}, {sizes[1] + self._stride[1]}) for an input of "
                             f"{h}x{w}, filter_size {self._filter_size}, padding "
                             f"{self._padding} and stride {self._stride}")
        # as the static conv2d_transpose: output_size, when given, is the output's size
        pre_bias = self._tmp(self._dtype,
                             [n, self._num_filters, *(self._output_size or sizes)])
        self._helper.append_op(self._op_type,
                               inputs={"Input": [input], "Filter": [self.weight]},
                               outputs={"Output": [pre_bias]},
                               attrs={"output_size": self._output_size,
                                      "strides": self._stride, "paddings": self._padding,
                                      "dilations": self._dilation, "groups": self._groups,
                                      "use_cudnn": self._use_cudnn})
        return self._bias_act(pre_bias, self.bias, 1, self._act)


class Pool2D(_Layer):
    """Max or average pooling of an NCHW input (Fluid 1.8's ``dygraph.Pool2D``, op
    ``pool2d``): windows clipped to the input, ``exclusive`` averages over the clipped
    window, ``ceil_mode`` rounds the output size up, ``global_pooling`` pools each map.

    Raises
    ------
    ValueError
        ``pool_type`` not ``"max"`` / ``"avg"``; no ``pool_size`` without
        ``global_pooling``; ``use_cudnn`` not a bool.
    """

    def __init__(self, pool_size: Any = -1, pool_type: str = "max", pool_stride: Any = 1,
                 pool_padding: Any = 0, global_pooling: bool = False, use_cudnn: bool = True,
                 ceil_mode: bool = False, exclusive: bool = True,
                 data_format: str = "NCHW") -> None:
        if pool_type not in ("max", "avg"):
            raise ValueError(f"Unknown pool_type: {pool_type!r}. It can only be 'max' or "
                             "'avg'.")
        if global_pooling is False and pool_size == -1:
            raise ValueError("When the global_pooling is False, pool_size must be passed and "
                             f"be a valid value. Received pool_size: {pool_size}")
        _check_bool(use_cudnn, "use_cudnn", "Pool2D")
        if data_format not in ("NCHW", "NHWC"):
            raise ValueError("Attr(data_format) should be 'NCHW' or 'NHWC'. Received "
                             f"Attr(data_format): {data_format}.")
        super().__init__()
        self._pool_type = pool_type
        self._pool_size = [1, 1] if pool_size == -1 else int_list(pool_size, 2, "pool_size",
                                                                  "Pool2D")
        self._pool_padding = int_list(pool_padding, 2, "pool_padding", "Pool2D")
        self._pool_stride = int_list(pool_stride, 2, "pool_stride", "Pool2D")
        # global pooling takes the whole map whatever pool_size says (Fluid's models pass 0)
        sizes = self._pool_stride if global_pooling else self._pool_size + self._pool_stride
        if min(sizes) <= 0 or min(self._pool_padding) < 0:
            raise ValueError("Pool2D: pool_size and pool_stride must be positive and "
                             f"pool_padding >= 0, got pool_size={pool_size!r}, pool_stride="
                             f"{pool_stride!r}, pool_padding={pool_padding!r}")
        self._global_pooling = bool(global_pooling)
        self._use_cudnn, self._ceil_mode = use_cudnn, bool(ceil_mode)
        self._exclusive, self._data_format = bool(exclusive), data_format
        self._l_type = "pool2d"

    def forward(self, input: Variable) -> Variable:
        n, c, h, w = check_input(input, "Pool2D", rank=4,
                                 dtypes=("int8", "uint8", "float16", "float32", "float64"))
        sizes = [1, 1]
        if not self._global_pooling:
            sizes = [pool_output_size(d, k, p, p, s, self._ceil_mode) for d, k, p, s in zip(
                (h, w), self._pool_size, self._pool_padding, self._pool_stride, strict=True)]
            if _no_output(sizes, (h, w)):
                raise ValueError(f"Pool2D: an input of {h}x{w} with pool_size "
                                 f"{self._pool_size} and pool_padding {self._pool_padding} "
                                 "leaves no output")
        out = self._tmp(input.dtype, [n, c, *sizes])
        self._helper.append_op(self._l_type, inputs={"X": [input]}, outputs={"Out": [out]},
                               attrs={"pooling_type": self._pool_type,
                                      "ksize": self._pool_size,
                                      "global_pooling": self._global_pooling,
                                      "strides": self._pool_stride,
                                      "paddings": self._pool_padding,
                                      "use_cudnn": self._use_cudnn,
                                      "ceil_mode": self._ceil_mode, "use_mkldnn": False,
                                      "exclusive": self._exclusive,
                                      "data_format": self._data_format})
        return out


# -- normalisations ---------------------------------------------------------------------------
class BatchNorm(_Layer):
    """Batch normalisation over the channel axis (Fluid 1.8's ``dygraph.BatchNorm``, op
    ``batch_norm``).

    ``weight`` (ones) and ``bias`` (zeros) are ``[num_channels]``; the moving ``_mean``
    (zeros) and ``_variance`` (ones) are non-trainable parameters (``batch_norm_0.w_1``,
    ``.w_2``, or ``moving_mean_name`` / ``moving_variance_name``). In training mode
    (``Layer.train()``) the batch's statistics normalise and the moving ones are updated in
    place (``momentum``); in eval mode, or with ``use_global_stats``, the moving ones
    normalise and stay. ``trainable_statistics`` uses the batch's statistics in eval mode too.
    As in Fluid 1.8's dygraph mode, ``is_test`` and ``in_place`` are kept but not used
    (the layer's mode decides).

    Parameters
    ----------
    num_channels : int
    act : str, optional
    is_test : bool
    momentum, epsilon : float
    param_attr, bias_attr : ParamAttr, ...
        Neither may be False.
    dtype : str
        ``"float16"`` makes float32 parameters, as in Fluid.
    data_layout : str
        ``"NCHW"`` (channels at axis 1) or ``"NHWC"`` (channels last).
    in_place : bool
    moving_mean_name, moving_variance_name : str, optional
    do_model_average_for_mean_and_var : bool
    use_global_stats, trainable_statistics : bool
    """

    def __init__(self, num_channels: int, act: str | None = None, is_test: bool = False,
                 momentum: float = 0.9, epsilon: float = 1e-05, param_attr: Any = None,
                 bias_attr: Any = None, dtype: Any = "float32", data_layout: str = "NCHW",
                 in_place: bool = False, moving_mean_name: str | None = None,
                 moving_variance_name: str | None = None,
                 do_model_average_for_mean_and_var: bool = True,
                 use_global_stats: bool = False, trainable_statistics: bool = False) -> None:
        dtype = _float_dtype(dtype, "BatchNorm", half=True)
        if dtype == "float16":
            dtype = "float32"
        super().__init__(dtype)
        if not isinstance(num_channels, numbers.Integral) or num_channels <= 0:
            raise ValueError(f"BatchNorm: num_channels must be a positive int, got "
                             f"{num_channels!r}")
        if bias_attr is False:
            raise ValueError("BatchNorm: bias_attr should not be False in batch_norm.")
        if param_attr is False:
            raise ValueError("BatchNorm: param_attr should not be False in batch_norm.")
        if data_layout not in ("NCHW", "NHWC"):
            raise ValueError(f"BatchNorm: data_layout must be 'NCHW' or 'NHWC', got "
                             f"{data_layout!r}")
        _check_act(act, "BatchNorm")
        self._param_attr, self._bias_attr, self._act = param_attr, bias_attr, act
        self._num_channels = int(num_channels)
        shape = [self._num_channels]
        self.weight = self.create_parameter(shape=shape, attr=param_attr, dtype=dtype,
                                            default_initializer=ConstantInitializer(1.0))
        self.bias = self.create_parameter(shape=shape, attr=bias_attr, dtype=dtype,
                                          is_bias=True)
        if use_global_stats:  # Fluid 1.8: frozen when their learning rate is 0
            for param, attr in ((self.weight, param_attr), (self.bias, bias_attr)):
                if ParamAttr._to_attr(attr).learning_rate == 0.0:
                    param.stop_gradient = True
        self._mean = self.create_parameter(
            shape=shape, dtype=dtype,
            attr=ParamAttr(name=moving_mean_name, initializer=ConstantInitializer(0.0),
                           trainable=False, do_model_average=do_model_average_for_mean_and_var))
        self._mean.stop_gradient = True
        self._variance = self.create_parameter(
            shape=shape, dtype=dtype,
            attr=ParamAttr(name=moving_variance_name, initializer=ConstantInitializer(1.0),
                           trainable=False, do_model_average=do_model_average_for_mean_and_var))
        self._variance.stop_gradient = True
        self._in_place, self._data_layout = in_place, data_layout
        self._momentum, self._epsilon = float(momentum), float(epsilon)
        self._is_test, self._fuse_with_relu = is_test, False
        self._use_global_stats = bool(use_global_stats)
        self._trainable_statistics = bool(trainable_statistics)

    def forward(self, input: Variable) -> Variable:
        shape = check_input(input, "BatchNorm", dtype=self._dtype)
        if len(shape) < 2:
            raise ValueError(f"BatchNorm: the input {input.name!r} needs rank >= 2, got "
                             f"shape {list(shape)}")
        channels = shape[1] if self._data_layout == "NCHW" else shape[-1]
        if not fits(channels, self._num_channels):
            raise ValueError(f"BatchNorm: the input {input.name!r} ({self._data_layout}, "
                             f"shape {list(shape)}) has {channels} channels, the layer was "
                             f"built for num_channels={self._num_channels}")
        is_test = not self.training and not self._trainable_statistics
        stats = [self._num_channels]
        saved_mean = self._tmp(self._dtype, stats, stop_gradient=True)
        saved_variance = self._tmp(self._dtype, stats, stop_gradient=True)
        # Fluid 1.8: no in-place output in dygraph mode; kept out of place in static
        # programs too, so that both modes build the same ops
        out = self._tmp(self._dtype, shape)
        # MeanOut / VarianceOut are the moving statistics themselves: updated in place
        self._helper.append_op(
            "batch_norm",
            inputs={"X": [input], "Scale": [self.weight], "Bias": [self.bias],
                    "Mean": [self._mean], "Variance": [self._variance]},
            outputs={"Y": [out], "MeanOut": [self._mean], "VarianceOut": [self._variance],
                     "SavedMean": [saved_mean], "SavedVariance": [saved_variance]},
            attrs={"momentum": self._momentum, "epsilon": self._epsilon, "is_test": is_test,
                   "data_layout": self._data_layout, "use_mkldnn": False,
                   "fuse_with_relu": self._fuse_with_relu,
                   "use_global_stats": self._use_global_stats,
                   "trainable_statistics": self._trainable_statistics})
        return self._helper.append_activation(out, self._act)


class LayerNorm(_Layer):
    """Normalise each sample over its last dims, those of ``normalized_shape`` (Fluid 1.8's
    ``dygraph.LayerNorm``, op ``layer_norm`` with ``begin_norm_axis = rank -
    len(normalized_shape)``): ``weight`` (ones) and ``bias`` (zeros) of
    ``prod(normalized_shape)`` elements when ``scale`` / ``shift``."""

    def __init__(self, normalized_shape: int | Sequence[int], scale: bool = True,
                 shift: bool = True, epsilon: float = 1e-05, param_attr: Any = None,
                 bias_attr: Any = None, act: str | None = None,
                 dtype: Any = "float32") -> None:
        dtype = _float_dtype(dtype, "LayerNorm")
        super().__init__(dtype)
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = [normalized_shape]
        self._normalized_shape = [int(d) for d in normalized_shape]
        if not self._normalized_shape or min(self._normalized_shape) <= 0:
            raise ValueError(f"LayerNorm: normalized_shape must be a positive int or a "
                             f"non-empty list of them, got {normalized_shape!r}")
        _check_act(act, "LayerNorm")
        self._scale, self._shift, self._epsilon = bool(scale), bool(shift), float(epsilon)
        self._param_attr, self._bias_attr, self._act = param_attr, bias_attr, act
        param_shape = [math.prod(self._normalized_shape)]
        self.weight = self.create_parameter(
            attr=param_attr, shape=param_shape, dtype=dtype,
            default_initializer=ConstantInitializer(1.0)) if self._scale else None
        if self._shift and bias_attr is False:
            raise ValueError("LayerNorm: bias_attr=False with shift=True; pass shift=False "
                             "for no bias")
        self.bias = self.create_parameter(attr=bias_attr, shape=param_shape, dtype=dtype,
                                          is_bias=True) if self._shift else None

    def forward(self, input: Variable) -> Variable:
        input_shape = list(check_input(input, "LayerNorm", dtype=self._dtype))
        ndim, norm_ndim = len(input_shape), len(self._normalized_shape)
        begin = ndim - norm_ndim
        if ndim < norm_ndim or not all(fits(d, want) for d, want in zip(
                input_shape[begin:], self._normalized_shape, strict=True)):
            shown = str(self._normalized_shape)
            raise ValueError(f"Given normalized_shape is {shown}, expected input with shape "
                             f"[*, {shown[1:]}, but got input shape {input_shape}")
        if begin == 0:
            raise ValueError(f"LayerNorm: the input {input.name!r} of shape {input_shape} "
                             "needs a leading dim before the normalized ones")
        inputs: dict[str, list[Variable]] = {"X": [input]}
        if self.weight is not None:
            inputs["Scale"] = [self.weight]
        if self.bias is not None:
            inputs["Bias"] = [self.bias]
        rows = [_known_prod(input_shape[:begin])]
        mean = self._tmp(self._dtype, rows, stop_gradient=True)
        variance = self._tmp(self._dtype, rows, stop_gradient=True)
        out = self._tmp(self._dtype, input_shape)
        self._helper.append_op("layer_norm", inputs=inputs,
                               outputs={"Y": [out], "Mean": [mean], "Variance": [variance]},
                               attrs={"epsilon": self._epsilon, "begin_norm_axis": begin})
        return self._helper.append_activation(out, self._act)


class GroupNorm(_Layer):
    """Normalise each sample over groups of channels (Fluid 1.8's ``dygraph.GroupNorm``, op
    ``group_norm``): ``weight`` (ones) and ``bias`` (zeros) of ``channels`` elements, left
    out when ``param_attr`` / ``bias_attr`` is False. NCHW only, as in Fluid 1.8."""

    def __init__(self, channels: int, groups: int, epsilon: float = 1e-05,
                 param_attr: Any = None, bias_attr: Any = None, act: str | None = None,
                 data_layout: str = "NCHW", dtype: Any = "float32") -> None:
        dtype = _float_dtype(dtype, "GroupNorm")
        super().__init__(dtype)
        if data_layout != "NCHW":
            raise ValueError(f"unsupported data layout:{data_layout}")
        if not isinstance(channels, numbers.Integral) or channels <= 0:
            raise ValueError(f"GroupNorm: channels must be a positive int, got {channels!r}")
        if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or \
                groups <= 0 or channels % groups:
            raise ValueError(f"GroupNorm: groups={groups!r} must be a positive int dividing "
                             f"the {channels} channels")
        _check_act(act, "GroupNorm")
        self._channels, self._groups = int(channels), int(groups)
        self._epsilon, self._act = float(epsilon), act
        self._param_attr, self._bias_attr = param_attr, bias_attr
        self.weight = self.create_parameter(attr=param_attr, shape=[self._channels],
                                            dtype=dtype,
                                            default_initializer=ConstantInitializer(1.0))
        self.bias = self.create_parameter(attr=bias_attr, shape=[self._channels], dtype=dtype,
                                          is_bias=True)

    def forward(self, input: Variable) -> Variable:
        shape = check_input(input, "GroupNorm", dtype=self._dtype)
        if len(shape) < 2 or not fits(shape[1], self._channels):
            raise ValueError(f"GroupNorm: the input {input.name!r} (NCHW, shape "
                             f"{list(shape)}) must have {self._channels} channels at dim 1")
        inputs: dict[str, list[Variable]] = {"X": [input]}
        if self.bias is not None:
            inputs["Bias"] = [self.bias]
        if self.weight is not None:
            inputs["Scale"] = [self.weight]
        rows = [shape[0], self._groups]
        mean = self._tmp(self._dtype, rows, stop_gradient=True)
        variance = self._tmp(self._dtype, rows, stop_gradient=True)
        out = self._tmp(self._dtype, shape)
        self._helper.append_op("group_norm", inputs=inputs,
                               outputs={"Y": [out], "Mean": [mean], "Variance": [variance]},
                               attrs={"epsilon": self._epsilon, "groups": self._groups,
                                      "data_layout": "NCHW"})
        return self._helper.append_activation(out, self._act)


class InstanceNorm(_Layer):
    """Normalise each sample's channels over their positions (Fluid 1.8's
    ``dygraph.InstanceNorm``, op ``instance_norm``): ``scale`` (ones) and ``bias`` (zeros)
    of ``num_channels`` elements; ``param_attr=False`` and ``bias_attr=False`` together
    leave both out."""

    def __init__(self, num_channels: int, epsilon: float = 1e-05, param_attr: Any = None,
                 bias_attr: Any = None, dtype: Any = "float32") -> None:
        dtype = _float_dtype(dtype, "InstanceNorm")
        super().__init__(dtype)
        if not isinstance(num_channels, numbers.Integral) or num_channels <= 0:
            raise ValueError(f"InstanceNorm: num_channels must be a positive int, got "
                             f"{num_channels!r}")
        if not isinstance(epsilon, (int, float)) or not 0.0 <= epsilon <= 0.001:
            raise ValueError(f"InstanceNorm: epsilon must be between 0.0 and 0.001, got "
                             f"{epsilon!r}")
        if (param_attr is False) != (bias_attr is False):
            raise ValueError("InstanceNorm: param_attr and bias_attr must be set to False at "
                             "the same time")
        self._num_channels, self._epsilon = int(num_channels), float(epsilon)
        self._param_attr, self._bias_attr = param_attr, bias_attr
        if param_attr is False:
            self.scale = self.bias = None
        else:
            self.scale = self.create_parameter(attr=param_attr, shape=[self._num_channels],
                                               dtype=dtype, is_bias=False,
                                               default_initializer=ConstantInitializer(1.0))
            self.bias = self.create_parameter(attr=bias_attr, shape=[self._num_channels],
                                              dtype=dtype, is_bias=True,
                                              default_initializer=ConstantInitializer(0.0))

    def forward(self, input: Variable) -> Variable:
        shape = check_input(input, "InstanceNorm", dtype=self._dtype, rank=(2, 3, 4, 5))
        if not fits(shape[1], self._num_channels):
            raise ValueError(f"InstanceNorm: the input {input.name!r} (shape {list(shape)}) "
                             f"has {shape[1]} channels at dim 1, the layer was built for "
                             f"num_channels={self._num_channels}")
        inputs: dict[str, list[Variable]] = {"X": [input]}
        if self.scale is not None:
            inputs["Scale"], inputs["Bias"] = [self.scale], [self.bias]
        rows = [_known_prod([shape[0], self._num_channels])]
        saved_mean = self._tmp(self._dtype, rows, stop_gradient=True)
        saved_variance = self._tmp(self._dtype, rows, stop_gradient=True)
        out = self._tmp(self._dtype, shape)
        self._helper.append_op("instance_norm", inputs=inputs,
                               outputs={"Y": [out], "SavedMean": [saved_mean],
                                        "SavedVariance": [saved_variance]},
                               attrs={"epsilon": self._epsilon})
        return out


# -- the rest -----------------------------------------------------------------------------------
class Embedding(_Layer):
    """Rows of a ``size = [vocab, dim]`` table for int64 ids of any shape (Fluid 1.8's
    ``dygraph.Embedding``, op ``lookup_table_v2``): ids ``[N1, ..., Nk]`` give
    ``[N1, ..., Nk, dim]``.

    Parameters
    ----------
    size : [int, int]
    is_sparse : bool
        The table's gradient is ``(rows' values, rows)`` of the looked-up rows.
    is_distributed : bool
    padding_idx : int, optional
        In ``[-vocab, vocab)`` (negative counts from the end): that id looks up zeros and
        its row gets no gradient.
    param_attr : ParamAttr, ...
        The table, Xavier by default.
    dtype : str
    """

    def __init__(self, size: Sequence[int], is_sparse: bool = False,
                 is_distributed: bool = False, padding_idx: int | None = None,
                 param_attr: Any = None, dtype: Any = "float32") -> None:
        dtype = _float_dtype(dtype, "Embedding")
        super().__init__(dtype)
        if not isinstance(size, (list, tuple)) or len(size) != 2 or not all(
                isinstance(d, numbers.Integral) and d > 0 for d in size):
            raise ValueError(f"Embedding: size must be [vocab_size, emb_size] (two positive "
                             f"ints), got {size!r}")
        if param_attr is False:
            raise ValueError("Embedding: param_attr=False leaves no table")
        self._size = [int(d) for d in size]
        if padding_idx is not None and not -self._size[0] <= padding_idx < self._size[0]:
            raise ValueError(f"Embedding: padding_idx must be in [-{self._size[0]}, "
                             f"{self._size[0]}), got {padding_idx}")
        self._is_sparse, self._is_distributed = bool(is_sparse), bool(is_distributed)
        self._padding_idx = (-1 if padding_idx is None else padding_idx if padding_idx >= 0
                             else self._size[0] + padding_idx)
        self._param_attr = param_attr
        self._remote_prefetch = self._is_sparse and not self._is_distributed
        self.weight = self.create_parameter(attr=param_attr, shape=self._size, dtype=dtype,
                                            is_bias=False)

    def forward(self, input: Variable) -> Variable:
        # Fluid 1.8's check of a static program's ids (off in dygraph mode, where int32 ids
        # are looked up too)
        check_variable_and_dtype(input, "input", ("int64",), "Embedding")
        shape = check_input(input, "Embedding")
        if convert_dtype(input.dtype) not in ("int32", "int64"):
            raise TypeError(f"Embedding: the ids {input.name!r} must be int64 (or int32), got "
                            f"{convert_dtype(input.dtype)}")
        out = self._tmp(self._dtype, [*shape, self._size[1]])
        self._helper.append_op("lookup_table_v2", inputs={"Ids": [input], "W": [self.weight]},
                               outputs={"Out": [out]},
                               attrs={"is_sparse": self._is_sparse,
                                      "is_distributed": self._is_distributed,
                                      "remote_prefetch": self._remote_prefetch,
                                      "padding_idx": self._padding_idx})
        return out


class Dropout(_Layer):
    """Zero each element with probability ``p`` while training (Fluid 1.8's
    ``dygraph.Dropout``, op ``dropout``); in eval mode (``Layer.eval()``)
    ``downgrade_in_infer`` scales by ``1 - p`` and ``upscale_in_train`` passes the input
    through (training then divides the kept elements by ``1 - p``).

    As in Fluid 1.8, a ``seed`` (or, when None or 0, the main program's nonzero
    ``random_seed``) fixes the mask: every call then drops the same elements; without one
    each call draws a new mask from the guard's stream. ``is_test`` is kept but, in dygraph
    mode as in 1.8, the layer's mode decides.
    """

    def __init__(self, p: float = 0.5, seed: int | None = None,
                 dropout_implementation: str = "downgrade_in_infer",
                 is_test: bool = False) -> None:
        if not isinstance(p, (float, int)) or isinstance(p, bool):
            raise TypeError(f"Dropout: p argument should be a number, got {p!r}")
        if not 0 <= p <= 1:
            raise ValueError(f"Dropout: p argument should between 0 and 1, got {p}")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"Dropout: seed argument should be None or a integer, got "
                            f"{seed!r}")
        if dropout_implementation not in ("downgrade_in_infer", "upscale_in_train"):
            raise ValueError("Dropout: dropout_implementation argument should be "
                             "'downgrade_in_infer' or 'upscale_in_train', got "
                             f"{dropout_implementation!r}")
        super().__init__()
        self._dropout_prob, self._seed = float(p), seed
        self._dropout_implementation, self._is_test = dropout_implementation, is_test

    def forward(self, input: Variable) -> Variable:
        shape = check_input(input, "Dropout")
        prog = default_main_program()
        if (self._seed is None or self._seed == 0) and prog.random_seed != 0:
            self._seed = prog.random_seed
        out = self._tmp(input.dtype, shape)
        mask = self._tmp("uint8", shape, stop_gradient=True)
        self._helper.append_op("dropout", inputs={"X": [input]},
                               outputs={"Out": [out], "Mask": [mask]},
                               attrs={"dropout_prob": self._dropout_prob,
                                      "is_test": not self.training,
                                      "fix_seed": self._seed is not None,
                                      "seed": self._seed if self._seed is not None else 0,
                                      "dropout_implementation": self._dropout_implementation})
        return out


class PRelu(_Layer):
    """``x`` where positive, else ``weight * x`` (Fluid 1.8's ``dygraph.PRelu``, op
    ``prelu``); ``weight`` (1.0 at first, as 1.8's dygraph layer) is one value (``mode
    "all"``, shape ``[1]``), one per channel (``"channel"``, ``[1, channel, 1, 1]``) or one
    per element of a sample (``"element"``, ``[1, *input_shape[1:]]``).

    ``dtype`` is the weight's (Fluid 1.8 always makes it float32, which a float64 input
    cannot use).
    """

    def __init__(self, mode: str, channel: int | None = None,
                 input_shape: Sequence[int] | None = None, param_attr: Any = None,
                 dtype: Any = "float32") -> None:
        dtype = _float_dtype(dtype, "PRelu")
        # Fluid names it explicitly: the class name in snake case would be 'p_relu'
        super().__init__(dtype, name_scope="prelu")
        self._mode, self._param_attr = mode, param_attr
        if mode == "all":
            self._alpha_shape = [1]
        elif mode == "channel":
            if not isinstance(channel, numbers.Integral) or channel <= 0:
                raise ValueError("PRelu: channel argument is required when mode is "
                                 f"'channel' (a positive int), got {channel!r}")
            self._alpha_shape = [1, int(channel), 1, 1]
        elif mode == "element":
            if not isinstance(input_shape, (list, tuple)) or len(input_shape) < 2:
                raise ValueError("PRelu: input_shape argument is required when mode is "
                                 f"'element' (the input's shape), got {input_shape!r}")
            self._alpha_shape = [1] + [int(d) for d in input_shape[1:]]
        else:
            raise ValueError(f"PRelu: mode should be one of all, channel, element, got "
                             f"{mode!r}")
        if param_attr is False:
            raise ValueError("PRelu: param_attr=False leaves no alpha")
        self.weight = self.create_parameter(attr=param_attr, shape=self._alpha_shape,
                                            dtype=dtype, is_bias=False,
                                            default_initializer=ConstantInitializer(1.0))

    def forward(self, input: Variable) -> Variable:
        shape = check_input(input, "PRelu", dtype=self._dtype)
        if self._mode == "channel" and (len(shape) < 2
                                        or not fits(shape[1], self._alpha_shape[1])):
            raise ValueError(f"PRelu: the input {input.name!r} (shape {list(shape)}) must "
                             f"have {self._alpha_shape[1]} channels at dim 1")
        if self._mode == "element" and (len(shape) != len(self._alpha_shape) or not all(
                fits(d, want) for d, want in zip(shape[1:], self._alpha_shape[1:],
                                                  strict=True))):
            raise ValueError(f"PRelu: the input {input.name!r} (shape {list(shape)}) must "
                             f"have shape [*, {str(self._alpha_shape[1:])[1:]}")
        out = self._tmp(self._dtype, shape)
        self._helper.append_op("prelu", inputs={"X": [input], "Alpha": [self.weight]},
                               outputs={"Out": [out]}, attrs={"mode": self._mode})
        return out
