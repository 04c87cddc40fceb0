"""More of Fluid 1.8's ``fluid.dygraph.nn`` layer classes: ``GRUUnit``,
``BilinearTensorProduct``, ``Conv3D``, ``Conv3DTranspose``, ``SpectralNorm``, ``NCE`` and
``TreeConv``.

Each layer creates its parameters once in ``__init__`` (named as Fluid 1.8 names them:
``<full_name>.w_N`` / ``.b_N``, with Fluid's shapes and default initialisers) and its
``forward`` appends the op the static ``fluid.layers`` function appends, which runs at once
inside ``fluid.dygraph.guard()``; outside it the op goes into the default main program, its
outputs declared with the static layer's shapes (``-1`` for dims the inputs leave unknown).

Where Fluid 1.8's dygraph classes behave differently from the static layers, these follow
the dygraph classes (and say so where it shows):

* ``NCE`` and ``TreeConv`` create a bias only when ``bias_attr`` is truthy (a ParamAttr, a
  name, an initializer or True): with the default ``None`` there is none.
* ``Conv3DTranspose`` always creates its bias ``[num_filters]`` (unless ``bias_attr`` is
  False) but adds it only when ``bias_attr`` is truthy, so with the default ``None`` the bias
  exists, is not used and gets no gradient.
* ``TreeConv``'s bias is ``[num_filters]``, added from axis 1 of the ``[N, max_nodes,
  output_size, num_filters]`` output (the static layer's is ``[max_nodes, output_size,
  num_filters]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..framework import Variable
from ..initializer import NormalInitializer, NumpyArrayInitializer
from ..layers.nn import _alias_table
from ..ops.conv_ops import conv_output_size, conv_transpose_output_size
from ..param_attr import ParamAttr
from .layer_checks import check_input, fits, int_list, is_int, known
from .layers import Layer

__all__ = ["NCE", "BilinearTensorProduct", "Conv3D", "Conv3DTranspose", "GRUUnit",
           "SpectralNorm", "TreeConv"]

#: gru_unit's activation enum (Fluid 1.8's ``activation_dict`` in ``GRUUnit``)
_GRU_ACTS = {"identity": 0, "sigmoid": 1, "tanh": 2, "relu": 3}
#: nce's sampler enum
_NCE_SAMPLERS = {"uniform": 0, "log_uniform": 1, "custom_dist": 2}
_FLOATS = ("float16", "float32", "float64")


# -- argument checks -------------------------------------------------------------------------------

def _positive_int(value: Any, arg: str, layer: str) -> int:
    if not is_int(value) or value <= 0:
        raise ValueError(f"{layer}: {arg} must be a positive int, got {value!r}")
    return int(value)


def _truthy_attr(attr: Any) -> Any:
    """A truthy ``bias_attr`` as create_parameter takes it (True: the default attribute)."""
    return None if attr is True else attr


def _bias_add(layer: Layer, x: Variable, bias: Variable, axis: int) -> Variable:
    """``x + bias`` broadcast from ``axis`` (op ``elementwise_add``, Fluid's append_bias)."""
    out = layer._helper.create_tmp(dtype=x.dtype, shape=x.shape)
    layer._helper.append_op("elementwise_add", inputs={"X": [x], "Y": [bias]},
                            outputs={"Out": [out]}, attrs={"axis": axis})
    return out


# -- GRUUnit ---------------------------------------------------------------------------------------

class GRUUnit(Layer):
    """One GRU step (Fluid 1.8's ``dygraph.GRUUnit``, op ``gru_unit``).

    Parameters
    ----------
    size : int
        ``3 * D``: the width of the projected input (update, reset and candidate parts).
    param_attr : ParamAttr, optional
        The hidden-to-hidden weight ``[D, 3D]`` (Xavier by default).
    bias_attr : ParamAttr or bool, optional
        The bias ``[1, 3D]`` (zeros by default; False: none).
    activation, gate_activation : str
        ``identity``, ``sigmoid``, ``tanh`` or ``relu`` for the candidate and the gates.
    origin_mode : bool
        ``h = u * h_prev + (1 - u) * c`` instead of ``(1 - u) * h_prev + u * c``. Fluid 1.8's
        dygraph class accepts it but never passes it to the op; this one does.
    dtype : str
        ``float32`` or ``float64``.

    Raises
    ------
    ValueError
        ``size`` not a positive multiple of 3, or an unknown activation.
    """

    def __init__(self, size: int, param_attr: Any = None, bias_attr: Any = None,
                 activation: str = "tanh", gate_activation: str = "sigmoid",
                 origin_mode: bool = False, dtype: str = "float32") -> None:
        super().__init__(dtype=dtype)
        if not is_int(size) or size <= 0 or size % 3:
            raise ValueError(f"GRUUnit: size must be 3 * hidden size (a positive multiple of "
                             f"3), got {size!r}")
        for arg, act in (("activation", activation), ("gate_activation", gate_activation)):
            if act not in _GRU_ACTS:
                raise ValueError(f"GRUUnit: {arg} must be one of {list(_GRU_ACTS)}, got "
                                 f"{act!r}")
        self.activation = _GRU_ACTS[activation]
        self.gate_activation = _GRU_ACTS[gate_activation]
        self._origin_mode = bool(origin_mode)
        d = size // 3
        self._hidden_size = d
        self.weight = self.create_parameter(attr=param_attr, shape=[d, 3 * d], dtype=dtype)
        self._bias_size = [1, 3 * d]
        self.bias = self.create_parameter(attr=bias_attr, shape=self._bias_size, dtype=dtype,
                                          is_bias=True)

    def forward(self, input: Variable, hidden: Variable
                ) -> tuple[Variable, Variable, Variable]:
        """``(updated_hidden [N, D], reset_hidden_pre [N, D], gate [N, 3D])``, Fluid's
        order, from ``input`` ``[N, 3D]`` and ``hidden`` ``[N, D]``."""
        d = self._hidden_size
        xs = check_input(input, "GRUUnit", rank=2, dtypes=("float32", "float64"))
        hs = check_input(hidden, "GRUUnit", arg="hidden", rank=2,
                         dtypes=("float32", "float64"))
        if not (fits(xs[1], 3 * d) and fits(hs[1], d) and fits(xs[0], hs[0])):
            raise ValueError(f"GRUUnit: input must be [N, {3 * d}] and hidden [N, {d}] for "
                             f"size={3 * d}, got {xs} and {hs}")
        inputs = {"Input": [input], "HiddenPrev": [hidden], "Weight": [self.weight]}
        if self.bias is not None:
            inputs["Bias"] = [self.bias]
        n = known(xs[0], hs[0])
        gate = self._helper.create_tmp(dtype=self._dtype, shape=[n, 3 * d])
        reset_hidden_pre = self._helper.create_tmp(dtype=self._dtype, shape=[n, d])
        updated_hidden = self._helper.create_tmp(dtype=self._dtype, shape=[n, d])
        self._helper.append_op(
            "gru_unit", inputs=inputs,
            outputs={"Gate": [gate], "ResetHiddenPrev": [reset_hidden_pre],
                     "Hidden": [updated_hidden]},
            attrs={"activation": self.activation, "gate_activation": self.gate_activation,
                   "origin_mode": self._origin_mode})
        return updated_hidden, reset_hidden_pre, gate


# -- BilinearTensorProduct ------------------------------------------------------------------------

class BilinearTensorProduct(Layer):
    """``out[:, i] = act(x W_i yᵀ + b_i)`` (Fluid 1.8's ``dygraph.BilinearTensorProduct``,
    op ``bilinear_tensor_product``).

    Parameters
    ----------
    input1_dim, input2_dim : int
        The widths M of ``x`` and P of ``y``.
    output_dim : int
        The output width; the weight is ``[output_dim, M, P]`` (Xavier by default).
    name : str, optional
        Names the output ``<full_name>.<name>``.
    act : str, optional
        An activation applied to the output.
    param_attr, bias_attr : ParamAttr, optional
        The weight and the bias ``[1, output_dim]`` (zeros; ``bias_attr=False``: none).
    dtype : str
    """

    def __init__(self, input1_dim: int, input2_dim: int, output_dim: int,
                 name: str | None = None, act: str | None = None, param_attr: Any = None,
                 bias_attr: Any = None, dtype: str = "float32") -> None:
        super().__init__(dtype=dtype)
        layer = "BilinearTensorProduct"
        self._input1_dim = _positive_int(input1_dim, "input1_dim", layer)
        self._input2_dim = _positive_int(input2_dim, "input2_dim", layer)
        self._output_dim = _positive_int(output_dim, "output_dim", layer)
        self._name = name
        self._act = act
        self.weight = self.create_parameter(
            attr=param_attr, shape=[self._output_dim, self._input1_dim, self._input2_dim],
            dtype=dtype, is_bias=False)
        self.bias = self.create_parameter(attr=bias_attr, shape=[1, self._output_dim],
                                          dtype=dtype, is_bias=True)

    def forward(self, x: Variable, y: Variable) -> Variable:
        """``[N, output_dim]`` from ``x`` ``[N, input1_dim]`` and ``y`` ``[N, input2_dim]``."""
        layer = "BilinearTensorProduct"
        xs = check_input(x, layer, arg="x", rank=2, dtypes=("float32", "float64"))
        ys = check_input(y, layer, arg="y", rank=2, dtypes=("float32", "float64"))
        if not (fits(xs[1], self._input1_dim) and fits(ys[1], self._input2_dim)
                and fits(xs[0], ys[0])):
            raise ValueError(f"{layer}: x must be [N, {self._input1_dim}] and y "
                             f"[N, {self._input2_dim}], got {xs} and {ys}")
        inputs = {"X": [x], "Y": [y], "Weight": [self.weight]}
        if self.bias is not None:
            inputs["Bias"] = [self.bias]
        shape = [known(xs[0], ys[0]), self._output_dim]
        if self._name is not None:
            out = self.create_variable(name=self._name, dtype=self._dtype)
            out.shape = shape
        else:
            out = self._helper.create_tmp(dtype=self._dtype, shape=shape)
        self._helper.append_op("bilinear_tensor_product", inputs=inputs,
                               outputs={"Out": [out]})
        return self._helper.append_activation(out, self._act)


# -- Conv3D, Conv3DTranspose ----------------------------------------------------------------------

def _conv3d_args(layer: str, num_channels: Any, num_filters: Any, groups: Any,
                 use_cudnn: Any, param_attr: Any) -> int:
    """The checks both 3-D convolutions make; the groups (1 for None)."""
    if not isinstance(use_cudnn, bool):
        raise ValueError(f"{layer}: use_cudnn should be True or False, got {use_cudnn!r}")
    if param_attr is False:
        raise ValueError(f"{layer}: param_attr should not be False (the filter is required)")
    _positive_int(num_channels, "num_channels", layer)
    _positive_int(num_filters, "num_filters", layer)
    groups = 1 if groups is None else groups
    if not is_int(groups) or groups <= 0:
        raise ValueError(f"{layer}: groups must be a positive int or None, got {groups!r}")
    if num_channels % groups:
        raise ValueError(f"{layer}: num_channels ({num_channels}) must be divisible by groups "
                         f"({groups})")
    if num_filters % groups:
        raise ValueError(f"{layer}: num_filters ({num_filters}) must be divisible by groups "
                         f"({groups})")
    return int(groups)


def _conv3d_sizes(layer: Any, shape: Sequence[int], name: str, size: Any, how: str
                  ) -> list[int]:
    """The output's D, H, W by ``size`` (the conv or transposed-conv rule) for Conv3D and
    Conv3DTranspose ``layer`` on an input of ``shape``; ValueError when one is empty
    (``how``: the rest of the message after the filter)."""
    outs = [size(i, k, p, p, s, d) for i, k, p, s, d in zip(
        shape[2:], layer._filter_size, layer._padding, layer._stride, layer._dilation,
        strict=True)]
    if any(i >= 0 and o <= 0 for i, o in zip(shape[2:], outs, strict=True)):
        raise ValueError(f"{name}: input {shape} with filter {layer._filter_size}{how} "
                         f"leaves an output of {outs}")
    return outs


def _check_ncdhw(layer: Layer, input: Any, name: str) -> list[int]:
    shape = check_input(input, name, rank=5, dtypes=_FLOATS)
    if not fits(shape[1], layer._num_channels):
        raise ValueError(f"{name}: input must be NCDHW with {layer._num_channels} channels "
                         f"(num_channels), got shape {shape}")
    return shape


class Conv3D(Layer):
    """3-D convolution of an NCDHW input (Fluid 1.8's ``dygraph.Conv3D``, op ``conv3d``).

    Parameters
    ----------
    num_channels : int
        C, the input's channels.
    num_filters : int
        M, the output's channels.
    filter_size, stride, padding, dilation : int or 3 ints
        (depth, height, width); ``padding`` is symmetric per dim.
    groups : int, optional
        Grouped convolution (None: 1).
    param_attr : ParamAttr, optional
        The filter ``[M, C / groups, KD, KH, KW]``, ``Normal(0, sqrt(2 / (KD KH KW C)))`` by
        default.
    bias_attr : ParamAttr or bool, optional
        The bias ``[M]`` (zeros; False: none), added along axis 1.
    use_cudnn : bool
        Accepted as Fluid does; the kernel is the same.
    act : str, optional
    dtype : str

    Raises
    ------
    ValueError
        Channels or filters not divisible by ``groups``, bad sizes, ``use_cudnn`` not a bool
        or ``param_attr=False``.
    """

    def __init__(self, num_channels: int, num_filters: int, filter_size: Any,
                 stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                 groups: int | None = None, param_attr: Any = None, bias_attr: Any = None,
                 use_cudnn: bool = True, act: str | None = None,
                 dtype: str = "float32") -> None:
        super().__init__(dtype=dtype)
        self._groups = _conv3d_args("Conv3D", num_channels, num_filters, groups, use_cudnn,
                                    param_attr)
        self._num_channels = int(num_channels)
        self._num_filters = int(num_filters)
        self._stride = int_list(stride, 3, "stride", "Conv3D")
        self._padding = int_list(padding, 3, "padding", "Conv3D", minimum=0)
        self._dilation = int_list(dilation, 3, "dilation", "Conv3D")
        self._filter_size = int_list(filter_size, 3, "filter_size", "Conv3D")
        self._use_cudnn = use_cudnn
        self._act = act
        k = self._filter_size
        std = (2.0 / (k[0] * k[1] * k[2] * self._num_channels)) ** 0.5
        self.weight = self.create_parameter(
            attr=param_attr, shape=[self._num_filters, self._num_channels // self._groups, *k],
            dtype=dtype, default_initializer=NormalInitializer(0.0, std, 0))
        self.bias = self.create_parameter(attr=bias_attr, shape=[self._num_filters],
                                          dtype=dtype, is_bias=True)

    def forward(self, input: Variable) -> Variable:
        """``[N, M, D', H', W']`` from ``input`` ``[N, C, D, H, W]``."""
        shape = _check_ncdhw(self, input, "Conv3D")
        outs = _conv3d_sizes(self, shape, "Conv3D", conv_output_size,
                             f", padding {self._padding}, stride {self._stride} and dilation "
                             f"{self._dilation}")
        pre_bias = self._helper.create_tmp(dtype=self._dtype,
                                           shape=[shape[0], self._num_filters, *outs])
        self._helper.append_op(
            "conv3d", inputs={"Input": [input], "Filter": [self.weight]},
            outputs={"Output": [pre_bias]},
            attrs={"strides": self._stride, "paddings": self._padding,
                   "dilations": self._dilation, "groups": self._groups,
                   "use_cudnn": self._use_cudnn, "use_mkldnn": False})
        pre_act = pre_bias if self.bias is None else _bias_add(self, pre_bias, self.bias, 1)
        return self._helper.append_activation(pre_act, self._act)


class Conv3DTranspose(Layer):
    """Transposed 3-D convolution of an NCDHW input (Fluid 1.8's ``dygraph.Conv3DTranspose``,
    op ``conv3d_transpose``).

    Each output size is ``(I - 1) * stride - 2 * padding + dilation * (K - 1) + 1`` (1.8's
    class takes no ``output_size``).

    Parameters
    ----------
    num_channels : int
        C, the input's channels.
    num_filters : int
        M, the output's channels.
    filter_size, padding, stride, dilation : int or 3 ints
        Note Fluid's order: padding before stride.
    groups : int, optional
        None: 1.
    param_attr : ParamAttr, optional
        The filter ``[C, M / groups, KD, KH, KW]`` (Xavier by default).
    bias_attr : ParamAttr or bool, optional
        The bias ``[M]`` (zeros; False: none). As in Fluid 1.8 it is added only when
        ``bias_attr`` is truthy: with the default None the parameter exists but is unused.
    use_cudnn : bool
    act : str, optional
    dtype : str
    """

    def __init__(self, num_channels: int, num_filters: int, filter_size: Any,
                 padding: Any = 0, stride: Any = 1, dilation: Any = 1,
                 groups: int | None = None, param_attr: Any = None, bias_attr: Any = None,
                 use_cudnn: bool = True, act: str | None = None,
                 dtype: str = "float32") -> None:
        super().__init__(dtype=dtype)
        layer = "Conv3DTranspose"
        self._groups = _conv3d_args(layer, num_channels, num_filters, groups, use_cudnn,
                                    param_attr)
        self._num_channels = int(num_channels)
        self._num_filters = int(num_filters)
        self._padding = int_list(padding, 3, "padding", layer, minimum=0)
        self._stride = int_list(stride, 3, "stride", layer)
        self._dilation = int_list(dilation, 3, "dilation", layer)
        self._filter_size = int_list(filter_size, 3, "filter_size", layer)
        self._use_cudnn = use_cudnn
        self._act = act
        self._bias_attr = _truthy_attr(bias_attr)
        self.weight = self.create_parameter(
            attr=param_attr,
            shape=[self._num_channels, self._num_filters // self._groups, *self._filter_size],
            dtype=dtype)
        self.bias = self.create_parameter(attr=self._bias_attr, shape=[self._num_filters],
                                          dtype=dtype, is_bias=True)

    def forward(self, input: Variable) -> Variable:
        """``[N, M, D', H', W']`` from ``input`` ``[N, C, D, H, W]``."""
        shape = _check_ncdhw(self, input, "Conv3DTranspose")
        outs = _conv3d_sizes(self, shape, "Conv3DTranspose", conv_transpose_output_size,
                             f", padding {self._padding} and stride {self._stride}")
        pre_bias = self._helper.create_tmp(dtype=self._dtype,
                                           shape=[shape[0], self._num_filters, *outs])
        self._helper.append_op(
            "conv3d_transpose", inputs={"Input": [input], "Filter": [self.weight]},
            outputs={"Output": [pre_bias]},
            attrs={"strides": self._stride, "paddings": self._padding,
                   "dilations": self._dilation, "groups": self._groups,
                   "use_cudnn": self._use_cudnn})
        # Fluid 1.8 tests ``bias_attr`` itself here, not the parameter: followed, so that
        # models behave as they did there (the default None adds no bias)
        pre_act = pre_bias
        if self._bias_attr and self.bias is not None:
            pre_act = _bias_add(self, pre_bias, self.bias, 1)
        return self._helper.append_activation(pre_act, self._act)


# -- SpectralNorm ----------------------------------------------------------------------------------

class SpectralNorm(Layer):
    """``weight / σ(weight)``, σ its largest singular value by power iteration (Fluid 1.8's
    ``dygraph.SpectralNorm``, op ``spectral_norm``).

    Parameters
    ----------
    weight_shape : list of int
        The shape of the weights it normalises (rank 2 to 5).
    dim : int
        0 or 1: the dim viewed as the matrix's rows (H); W is the product of the others.
    power_iters : int
        Power iterations per call (>= 0).
    eps : float
    dtype : str

    The vectors ``weight_u`` ``[H]`` and ``weight_v`` ``[W]`` are non-trainable parameters
    drawn from Normal(0, 1); as in Fluid 1.8, the op does not write the iterated vectors back.

    Raises
    ------
    ValueError
        A zero or negative dim in ``weight_shape``, a rank outside 2..5, ``dim`` not 0 or 1
        (Fluid 1.8 asserts ``dim < len(weight_shape)`` and its op accepts only 0 and 1), or
        ``power_iters`` negative.
    TypeError
        ``dim`` / ``power_iters`` not ints or ``eps`` not a number.
    """

    def __init__(self, weight_shape: Sequence[int], dim: int = 0, power_iters: int = 1,
                 eps: float = 1e-12, dtype: str = "float32") -> None:
        super().__init__(dtype=dtype)
        if not isinstance(weight_shape, (list, tuple)) or \
                not all(is_int(d) and d > 0 for d in weight_shape):
            raise ValueError(f"SpectralNorm: weight_shape must be a list of positive ints "
                             f"(no dim of 0), got {weight_shape!r}")
        self._weight_shape = [int(d) for d in weight_shape]
        if not 2 <= len(self._weight_shape) <= 5:
            raise ValueError(f"SpectralNorm: weight_shape must have rank 2 to 5, got "
                             f"{self._weight_shape}")
        if not is_int(dim) or not is_int(power_iters):
            raise TypeError(f"SpectralNorm: dim and power_iters must be ints, got {dim!r} and "
                            f"{power_iters!r}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise TypeError(f"SpectralNorm: eps must be a float, got {eps!r}")
        if dim not in (0, 1):
            raise ValueError(f"SpectralNorm: dim can only be 0 or 1, got {dim}")
        if power_iters < 0:
            raise ValueError(f"SpectralNorm: power_iters must be >= 0, got {power_iters}")
        self._dim = int(dim)
        self._power_iters = int(power_iters)
        self._eps = float(eps)
        h = self._weight_shape[self._dim]
        w = int(np.prod(self._weight_shape)) // h
        self.weight_u = self.create_parameter(attr=ParamAttr(), shape=[h], dtype=dtype,
                                              default_initializer=NormalInitializer(0.0, 1.0))
        self.weight_u.stop_gradient = True
        self.weight_v = self.create_parameter(attr=ParamAttr(), shape=[w], dtype=dtype,
                                              default_initializer=NormalInitializer(0.0, 1.0))
        self.weight_v.stop_gradient = True

    def forward(self, weight: Variable) -> Variable:
        """The normalised ``weight``, of ``weight_shape``."""
        shape = check_input(weight, "SpectralNorm", arg="weight",
                            dtypes=("float32", "float64"))
        if len(shape) != len(self._weight_shape) or not all(
                fits(d, want) for d, want in zip(shape, self._weight_shape, strict=True)):
            raise ValueError(f"SpectralNorm: weight must have weight_shape "
                             f"{self._weight_shape}, got {shape}")
        out = self._helper.create_tmp(dtype=self._dtype, shape=self._weight_shape)
        self._helper.append_op(
            "spectral_norm",
            inputs={"Weight": [weight], "U": [self.weight_u], "V": [self.weight_v]},
            outputs={"Out": [out]},
            attrs={"dim": self._dim, "power_iters": self._power_iters, "eps": self._eps})
        return out


# -- NCE -------------------------------------------------------------------------------------------

class NCE(Layer):
    """Noise-contrastive estimation loss (Fluid 1.8's ``dygraph.NCE``, op ``nce``).

    Parameters
    ----------
    num_total_classes : int
        The classes (>= 2); the weight is ``[num_total_classes, dim]`` (Xavier by default).
    dim : int
        The input's width.
    sample_weight : Variable, optional
        Per-row weights ``[N, 1]``, used when ``forward`` is given none. (Fluid 1.8 keeps it
        but its forward then always replaces it with forward's argument.)
    param_attr : ParamAttr, optional
    bias_attr : ParamAttr or bool, optional
        The bias ``[num_total_classes, 1]`` (zeros). As in Fluid 1.8's class, there is one
        only when ``bias_attr`` is truthy: the default None gives none.
    num_neg_samples : int, optional
        Negative classes drawn per row (None: 10).
    sampler : str
        ``uniform``, ``log_uniform`` or ``custom_dist``.
    custom_dist : list of float, optional
        The ``custom_dist`` sampler's probabilities, one per class. Its three tables
        (probabilities, alias, alias probabilities) are non-trainable parameters named
        before the weight, as in Fluid (so the weight is then ``nce_0.w_3``), kept out of
        ``parameters()`` as Fluid keeps them.
    seed : int
        Non-zero: every call draws the same negatives (0: fresh ones each call).
    is_sparse : bool
        The weight's gradient is a SelectedRows of the sampled rows.
    dtype : str

    Raises
    ------
    ValueError
        An unknown sampler, a missing or wrong-sized ``custom_dist``, non-positive sizes.
    """

    def __init__(self, num_total_classes: int, dim: int, sample_weight: Variable | None = None,
                 param_attr: Any = None, bias_attr: Any = None,
                 num_neg_samples: int | None = None, sampler: str = "uniform",
                 custom_dist: Sequence[float] | None = None, seed: int = 0,
                 is_sparse: bool = False, dtype: str = "float32") -> None:
        super().__init__(dtype=dtype)
        if not is_int(num_total_classes) or num_total_classes < 2:
            raise ValueError(f"NCE: num_total_classes must be an int >= 2, got "
                             f"{num_total_classes!r}")
        self._num_total_classes = int(num_total_classes)
        self._dim = _positive_int(dim, "dim", "NCE")
        if sampler not in _NCE_SAMPLERS:
            raise ValueError(f"NCE: unsupported sampler type {sampler!r}; use one of "
                             f"{list(_NCE_SAMPLERS)}")
        if num_neg_samples is None:
            num_neg_samples = 10
        if not is_int(num_neg_samples) or num_neg_samples <= 0:
            raise ValueError(f"NCE: num_neg_samples must be a positive int or None, got "
                             f"{num_neg_samples!r}")
        if not is_int(seed):
            raise TypeError(f"NCE: seed must be an int, got {seed!r}")
        self._num_neg_samples = int(num_neg_samples)
        self._sample_weight = sample_weight
        self._inputs: dict[str, list] = {}
        if sampler == "custom_dist":
            if custom_dist is None or len(custom_dist) != self._num_total_classes:
                raise ValueError(f"NCE: the custom_dist sampler needs custom_dist with "
                                 f"num_total_classes={self._num_total_classes} probabilities, "
                                 f"got {None if custom_dist is None else len(custom_dist)}")
            # the same Walker alias table the static layer builds, so both sample alike
            keep, alias = _alias_table(custom_dist)
            for slot, values, table_dtype in (("CustomDistProbs", custom_dist, "float32"),
                                              ("CustomDistAlias", alias, "int32"),
                                              ("CustomDistAliasProbs", keep, "float32")):
                table = np.asarray(values, dtype=table_dtype)
                var = self.create_parameter(
                    attr=ParamAttr(), shape=list(table.shape), dtype=table_dtype,
                    default_initializer=NumpyArrayInitializer(table))
                var.stop_gradient = True
                self._inputs[slot] = [var]
        self._attrs = {"num_total_classes": self._num_total_classes,
                       "num_neg_samples": self._num_neg_samples, "seed": int(seed),
                       "sampler": _NCE_SAMPLERS[sampler], "is_sparse": bool(is_sparse),
                       # Fluid 1.8: a sparse nce weight is read from the pservers
                       "remote_prefetch": bool(is_sparse)}
        self.weight = self.create_parameter(attr=param_attr,
                                            shape=[self._num_total_classes, self._dim],
                                            dtype=dtype, is_bias=False)
        self.bias = None
        if bias_attr:
            self.bias = self.create_parameter(attr=_truthy_attr(bias_attr),
                                              shape=[self._num_total_classes, 1], dtype=dtype,
                                              is_bias=True)

    def forward(self, input: Variable, label: Variable,
                sample_weight: Variable | None = None) -> Variable:
        """The cost ``[N, 1]`` divided by ``num_neg_samples + 1`` (as Fluid 1.8), from
        ``input`` ``[N, dim]`` and int64 ``label`` ``[N, T]``."""
        xs = check_input(input, "NCE", rank=2, dtypes=("float32", "float64"))
        ls = check_input(label, "NCE", arg="label", dtypes=("int64",))
        if not fits(xs[1], self._dim):
            raise ValueError(f"NCE: input must be [N, {self._dim}] (dim), got {xs}")
        if not ls or not fits(ls[0], xs[0]):
            raise ValueError(f"NCE: label must be [N, T] with N={xs[0]} rows, got {ls}")
        weights = sample_weight if sample_weight is not None else self._sample_weight
        if weights is not None and not isinstance(weights, Variable):
            raise TypeError(f"NCE: sample_weight must be a Variable or None, got "
                            f"{type(weights).__name__}")
        inputs: dict[str, list] = {"Input": [input], "Label": [label],
                                   "Weight": [self.weight],
                                   "SampleWeight": [] if weights is None else [weights],
                                   **self._inputs}
        if self.bias is not None:
            inputs["Bias"] = [self.bias]
        n = known(xs[0], ls[0])
        true_labels = ls[-1] if len(ls) > 1 else 1
        width = [n, true_labels + self._num_neg_samples if true_labels >= 0 else -1]
        cost = self._helper.create_tmp(dtype=input.dtype, shape=[n, 1])
        logits = self._helper.create_tmp(dtype=input.dtype, shape=width, stop_gradient=True)
        samples = self._helper.create_tmp(dtype=label.dtype, shape=width, stop_gradient=True)
        self._helper.append_op("nce", inputs=inputs,
                               outputs={"Cost": [cost], "SampleLogits": [logits],
                                        "SampleLabels": [samples]},
                               attrs=dict(self._attrs))
        return cost / (self._num_neg_samples + 1)


# -- TreeConv --------------------------------------------------------------------------------------

class TreeConv(Layer):
    """Tree-based convolution (Fluid 1.8's ``dygraph.TreeConv``, op ``tree_conv``).

    Parameters
    ----------
    feature_size : int
        F, the nodes' feature width.
    output_size : int
        The output feature width.
    num_filters : int
    max_depth : int
        The depth of the filter window.
    act : str, optional
        ``tanh`` by default.
    param_attr : ParamAttr, optional
        The filter ``[F, 3, output_size, num_filters]`` (Xavier by default).
    bias_attr : ParamAttr, optional
        As in Fluid 1.8's class: a bias ``[num_filters]`` only when ``bias_attr`` is truthy
        (the default None gives none), added from axis 1 of the output, so it needs
        ``num_filters`` 1 or equal to the inputs' ``max_nodes``.
    name : str, optional
        Names the output ``<full_name>.<name>``.
    dtype : str

    Bias and weight are created in Fluid's order, the bias first (``tree_conv_0.b_0``, then
    ``tree_conv_0.w_0``).
    """

    def __init__(self, feature_size: int, output_size: int, num_filters: int = 1,
                 max_depth: int = 2, act: str | None = "tanh", param_attr: Any = None,
                 bias_attr: Any = None, name: str | None = None,
                 dtype: str = "float32") -> None:
        super().__init__(dtype=dtype)
        self._feature_size = _positive_int(feature_size, "feature_size", "TreeConv")
        self._output_size = _positive_int(output_size, "output_size", "TreeConv")
        self._num_filters = _positive_int(num_filters, "num_filters", "TreeConv")
        self._max_depth = _positive_int(max_depth, "max_depth", "TreeConv")
        self._act = act
        self._name = name
        self.bias = None
        if bias_attr:
            self.bias = self.create_parameter(attr=_truthy_attr(bias_attr),
                                              shape=[self._num_filters], dtype=dtype,
                                              is_bias=True)
        self.weight = self.create_parameter(
            attr=param_attr,
            shape=[self._feature_size, 3, self._output_size, self._num_filters],
            dtype=dtype, is_bias=False)

    def forward(self, nodes_vector: Variable, edge_set: Variable) -> Variable:
        """``[N, max_nodes, output_size, num_filters]`` from ``nodes_vector``
        ``[N, max_nodes, feature_size]`` and int32 ``edge_set`` ``[N, max_edges, 2]``."""
        ns = check_input(nodes_vector, "TreeConv", arg="nodes_vector", rank=3,
                         dtypes=("float32", "float64"))
        es = check_input(edge_set, "TreeConv", arg="edge_set", rank=3,
                         dtypes=("int32", "int64"))
        if not (fits(ns[2], self._feature_size) and fits(es[2], 2) and fits(es[0], ns[0])):
            raise ValueError(f"TreeConv: nodes_vector must be [N, max_nodes, "
                             f"{self._feature_size}] and edge_set [N, max_edges, 2], got "
                             f"{ns} and {es}")
        if self.bias is not None and self._num_filters != 1 and not fits(ns[1],
                                                                            self._num_filters):
            raise ValueError(f"TreeConv: Fluid 1.8 adds the bias [num_filters] from axis 1 "
                             f"(max_nodes): num_filters={self._num_filters} must be 1 or "
                             f"max_nodes={ns[1]}")
        shape = [known(ns[0], es[0]), ns[1], self._output_size, self._num_filters]
        if self._name:
            out = self.create_variable(name=self._name, dtype=self._dtype)
            out.shape = shape
        else:
            out = self._helper.create_tmp(dtype=self._dtype, shape=shape)
        self._helper.append_op(
            "tree_conv",
            inputs={"NodesVector": [nodes_vector], "EdgeSet": [edge_set],
                    "Filter": [self.weight]},
            outputs={"Out": [out]}, attrs={"max_depth": self._max_depth})
        pre_act = out if self.bias is None else _bias_add(self, out, self.bias, 1)
        return self._helper.append_activation(pre_act, self._act)
