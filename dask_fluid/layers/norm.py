"""Normalisation layers of ``fluid.layers``: ``batch_norm``, ``layer_norm``, ``group_norm``,
``instance_norm``, ``lrn``, ``spectral_norm`` and ``inplace_abn`` (Fluid 1.8's signatures,
defaults and parameters; the kernels are in :mod:`dask_fluid.ops.norm_ops` and
:mod:`dask_fluid.ops.image_channel_ops`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..framework import Variable
from ..initializer import ConstantInitializer
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .checks import check_variable_and_dtype
from .tensor import _check_var, _known

__all__ = ["batch_norm", "group_norm", "inplace_abn", "instance_norm", "layer_norm", "lrn",
           "spectral_norm"]


def _layout_channels(input: Variable, data_layout: str, layer: str) -> tuple[list[int], int]:
    """The checks batch_norm, group_norm and inplace_abn share: ``data_layout`` is NCHW or
    NHWC and ``input`` has rank >= 2; its static shape and channel dim (-1 when unknown)."""
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"{layer}: data_layout must be 'NCHW' or 'NHWC', got "
                         f"{data_layout!r}")
    shape = list(input.shape or ())
    if len(shape) < 2:
        raise ValueError(f"{layer}: input {input.name!r} needs rank >= 2, got {shape}")
    return shape, shape[1] if data_layout == "NCHW" else shape[-1]


def batch_norm(input: Variable, act: str | None = None, is_test: bool = False,
               momentum: float | Variable = 0.9, epsilon: float = 1e-05,
               param_attr: Any = None,
               bias_attr: Any = None, data_layout: str = "NCHW", in_place: bool = False,
               name: str | None = None, moving_mean_name: str | None = None,
               moving_variance_name: str | None = None,
               do_model_average_for_mean_and_var: bool = True,
               use_global_stats: bool = False) -> Variable:
    """Batch normalisation over the channel axis, as Fluid 1.8's ``layers.batch_norm``.

    Creates the scale (ones) and bias (zeros) parameters and, as Fluid does, the moving mean
    (zeros) and variance (ones) as non-trainable parameters (``<name>.w_1``, ``<name>.w_2``)
    that the op updates in place while training. ``clone(for_test=True)`` sets ``is_test``.
    A ``momentum`` Variable of one element is read at each run (the op's ``MomentumTensor``).
    """
    check_variable_and_dtype(input, "input", ("float16", "float32", "float64"), "batch_norm")
    _check_var(input, "input", "batch_norm")
    shape, channels = _layout_channels(input, data_layout, "batch_norm")
    if channels <= 0:
        raise ValueError(f"batch_norm: the channel dim of {input.name!r} must be known, got "
                         f"shape {shape}")
    helper = LayerHelper("batch_norm", name)
    dtype = input.dtype
    scale = helper.create_parameter(ParamAttr._to_attr(param_attr), [channels], dtype,
                                    default_initializer=ConstantInitializer(1.0))
    bias = helper.create_parameter(ParamAttr._to_attr(bias_attr), [channels], dtype,
                                   is_bias=True)
    mean = helper.create_parameter(
        ParamAttr(name=moving_mean_name, initializer=ConstantInitializer(0.0),
                  trainable=False, do_model_average=do_model_average_for_mean_and_var),
        [channels], dtype)
    mean.stop_gradient = True
    variance = helper.create_parameter(
        ParamAttr(name=moving_variance_name, initializer=ConstantInitializer(1.0),
                  trainable=False, do_model_average=do_model_average_for_mean_and_var),
        [channels], dtype)
    variance.stop_gradient = True
    saved_mean = helper.create_tmp(dtype=dtype, shape=[channels], stop_gradient=True)
    saved_variance = helper.create_tmp(dtype=dtype, shape=[channels], stop_gradient=True)
    out = input if in_place else helper.create_tmp(dtype=dtype, shape=shape)
    inputs = {"X": [input], "Scale": [scale], "Bias": [bias], "Mean": [mean],
              "Variance": [variance]}
    if isinstance(momentum, Variable):  # read at run time (a schedule), as Fluid 1.8
        inputs["MomentumTensor"] = [momentum]
    helper.append_op("batch_norm", inputs=inputs,
                     outputs={"Y": [out], "MeanOut": [mean], "VarianceOut": [variance],
                              "SavedMean": [saved_mean], "SavedVariance": [saved_variance]},
                     attrs={"momentum": 0.9 if isinstance(momentum, Variable) else
                            float(momentum), "epsilon": float(epsilon),
                            "is_test": bool(is_test), "data_layout": data_layout,
                            "use_mkldnn": False, "fuse_with_relu": False,
                            "use_global_stats": bool(use_global_stats)})
    return helper.append_activation(out, act)


def group_norm(input: Variable, groups: int, epsilon: float = 1e-05, param_attr: Any = None,
               bias_attr: Any = None, act: str | None = None, data_layout: str = "NCHW",
               name: str | None = None) -> Variable:
    """Normalise each sample over groups of ``groups`` channels (Fluid 1.8's
    ``layers.group_norm``): a scale (ones) and a bias (zeros) of one element per channel
    only when ``param_attr`` / ``bias_attr`` is given (truthy), as Fluid 1.8 builds it."""
    check_variable_and_dtype(input, "input", ("float32", "float64"), "group_norm")
    _check_var(input, "input", "group_norm")
    shape, channels = _layout_channels(input, data_layout, "group_norm")
    if not isinstance(groups, int) or groups < 1 or channels <= 0 or channels % groups:
        raise ValueError(f"group_norm: groups={groups!r} must be a positive int dividing the "
                         f"{channels} channels of {input.name!r}")
    helper = LayerHelper("group_norm", name)
    inputs: dict[str, list[Variable]] = {"X": [input]}
    # Fluid 1.8 tests ``if param_attr:`` / ``if bias_attr:``: the default None (or False)
    # gives no Scale / Bias at all, the kernel then scaling by 1 and shifting by 0
    if param_attr:
        inputs["Scale"] = [helper.create_parameter(
            ParamAttr._to_attr(param_attr), [channels], input.dtype,
            default_initializer=ConstantInitializer(1.0))]
    if bias_attr:
        inputs["Bias"] = [helper.create_parameter(ParamAttr._to_attr(bias_attr), [channels],
                                                  input.dtype, is_bias=True)]
    rows = [shape[0], groups]
    mean = helper.create_tmp(dtype=input.dtype, shape=rows, stop_gradient=True)
    variance = helper.create_tmp(dtype=input.dtype, shape=rows, stop_gradient=True)
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op("group_norm", inputs=inputs,
                     outputs={"Y": [out], "Mean": [mean], "Variance": [variance]},
                     attrs={"epsilon": float(epsilon), "groups": int(groups),
                            "data_layout": data_layout})
    return helper.append_activation(out, act)


def lrn(input: Variable, n: int = 5, k: float = 1.0, alpha: float = 1e-4, beta: float = 0.75,
        name: str | None = None, data_format: str = "NCHW") -> Variable:
    """Local response normalisation across channels, as Fluid 1.8's ``layers.lrn``:
    ``Out = X / (k + alpha · Σ X²)^beta``, the sum over the ``n`` channels centred on each
    channel (those outside the input count 0). The op's second output ``MidOut`` (the
    denominator before the power) is kept for the gradient.

    Parameters
    ----------
    input : Variable
        4-D, ``NCHW`` or ``NHWC`` as ``data_format`` says.
    n : int
        The (odd) number of channels summed.
    k, alpha, beta : float
        Positive, as the op's checkers require.
    """
    check_variable_and_dtype(input, "input", ("float32",), "lrn")
    _check_var(input, "input", "lrn")
    shape = list(input.shape or ())
    if len(shape) != 4:
        raise ValueError(f"lrn: input {input.name!r} must be 4-D, got shape {shape}")
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError(f"lrn: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
    if not isinstance(n, int) or n <= 0 or n % 2 != 1:
        raise ValueError(f"lrn: n must be a positive odd int, got {n!r}")
    for arg, v in (("k", k), ("alpha", alpha), ("beta", beta)):
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"lrn: {arg} must be a number > 0, got {v!r}")
    helper = LayerHelper("lrn", name)
    mid = helper.create_tmp(dtype=input.dtype, shape=shape, stop_gradient=True)
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op("lrn", inputs={"X": [input]}, outputs={"Out": [out], "MidOut": [mid]},
                     attrs={"n": n, "k": float(k), "alpha": float(alpha), "beta": float(beta),
                            "data_format": data_format})
    return out


def instance_norm(input: Variable, epsilon: float = 1e-05, param_attr: Any = None,
                  bias_attr: Any = None, name: str | None = None) -> Variable:
    """Normalise each sample's channels over their positions, as Fluid 1.8's
    ``layers.instance_norm``: ``(x − mean) / sqrt(var + epsilon) · scale + bias``, with a
    scale (ones) and a bias (zeros) of one element per channel (axis 1).

    ``param_attr=False`` and ``bias_attr=False`` together leave both parameters out (the op
    takes them as optional inputs, as later Fluid versions do); one of them alone False is
    an error, as there.
    """
    check_variable_and_dtype(input, "input", ("float32", "float64"), "instance_norm")
    _check_var(input, "input", "instance_norm")
    shape = list(input.shape or ())
    if not 2 <= len(shape) <= 5:
        raise ValueError(f"instance_norm: input {input.name!r} must have rank 2 to 5, got "
                         f"shape {shape}")
    if not isinstance(epsilon, (int, float)) or not 0.0 <= epsilon <= 0.001:
        raise ValueError(f"instance_norm: epsilon must be between 0.0 and 0.001, got "
                         f"{epsilon!r}")
    channels = shape[1]
    if not _known(channels) or channels == 0:
        raise ValueError(f"instance_norm: the channel dim (1) of {input.name!r} must be known, "
                         f"got shape {shape}")
    scale_attr, shift_attr = ParamAttr._to_attr(param_attr), ParamAttr._to_attr(bias_attr)
    if (scale_attr is False) != (shift_attr is False):
        raise ValueError("instance_norm: param_attr and bias_attr must be False together (got "
                         f"param_attr={param_attr!r}, bias_attr={bias_attr!r})")
    helper = LayerHelper("instance_norm", name)
    inputs: dict[str, list[Variable]] = {"X": [input]}
    if scale_attr is not False:
        inputs["Scale"] = [helper.create_parameter(
            scale_attr, [channels], input.dtype, default_initializer=ConstantInitializer(1.0))]
        inputs["Bias"] = [helper.create_parameter(
            shift_attr, [channels], input.dtype, is_bias=True,
            default_initializer=ConstantInitializer(0.0))]
    rows = shape[0] * channels if _known(shape[0]) else -1
    saved_mean = helper.create_tmp(dtype=input.dtype, shape=[rows], stop_gradient=True)
    saved_variance = helper.create_tmp(dtype=input.dtype, shape=[rows], stop_gradient=True)
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op("instance_norm", inputs=inputs,
                     outputs={"Y": [out], "SavedMean": [saved_mean],
                              "SavedVariance": [saved_variance]},
                     attrs={"epsilon": float(epsilon)})
    return out


def layer_norm(input: Variable, scale: bool = True, shift: bool = True,
               begin_norm_axis: int = 1, epsilon: float = 1e-05, param_attr: Any = None,
               bias_attr: Any = None, act: str | None = None,
               name: str | None = None) -> Variable:
    """Normalise each sample over the dims from ``begin_norm_axis`` on (Fluid 1.8's
    ``layers.layer_norm``): a scale (ones) and a shift (zeros) of ``prod(shape[axis:])``
    elements when ``scale`` / ``shift``."""
    _check_var(input, "input", "layer_norm")
    shape = list(input.shape or ())
    if not 0 < begin_norm_axis < len(shape):
        raise ValueError(f"layer_norm: begin_norm_axis={begin_norm_axis} must be in "
                         f"[1, {len(shape)}) for input {input.name!r} of shape {shape}")
    if any(d <= 0 for d in shape[begin_norm_axis:]):
        raise ValueError(f"layer_norm: the normalised dims of {input.name!r} must be known, "
                         f"got shape {shape}")
    helper = LayerHelper("layer_norm", name)
    width = math.prod(shape[begin_norm_axis:])
    inputs: dict[str, list[Variable]] = {"X": [input]}
    if scale:
        inputs["Scale"] = [helper.create_parameter(
            ParamAttr._to_attr(param_attr), [width], input.dtype,
            default_initializer=ConstantInitializer(1.0))]
    if shift:
        inputs["Bias"] = [helper.create_parameter(ParamAttr._to_attr(bias_attr), [width],
                                                  input.dtype, is_bias=True)]
    rows = [math.prod(shape[:begin_norm_axis])] if all(d > 0 for d in
                                                       shape[:begin_norm_axis]) else [-1]
    mean = helper.create_tmp(dtype=input.dtype, shape=rows, stop_gradient=True)
    variance = helper.create_tmp(dtype=input.dtype, shape=rows, stop_gradient=True)
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op("layer_norm", inputs=inputs,
                     outputs={"Y": [out], "Mean": [mean], "Variance": [variance]},
                     attrs={"epsilon": float(epsilon), "begin_norm_axis": int(begin_norm_axis)})
    return helper.append_activation(out, act)


def spectral_norm(weight: Variable, dim: int = 0, power_iters: int = 1, eps: float = 1e-12,
                  name: str | None = None) -> Variable:
    """``weight / σ`` with σ ≈ its largest singular value (Fluid 1.8's
    ``layers.spectral_norm``): the weight viewed as ``[shape[dim], rest]``; U ``[h]`` and
    V ``[w]`` are non-trainable parameters drawn from Normal(0, 1) that seed
    ``power_iters`` power iterations each run (1.8 does not write the iterated vectors back).

    Raises
    ------
    ValueError
        ``weight`` not of rank 2 to 5 with known dims, ``dim`` not 0 or 1, ``power_iters``
        negative.
    TypeError
        ``dim`` / ``power_iters`` not ints or ``eps`` not a float.
    """
    from ..initializer import NormalInitializer

    _check_var(weight, "weight", "spectral_norm")
    for arg, v, t in (("dim", dim, int), ("power_iters", power_iters, int), ("eps", eps, float)):
        if not isinstance(v, t) or isinstance(v, bool):
            raise TypeError(f"spectral_norm: {arg} must be {t.__name__}, got {v!r}")
    shape = list(weight.shape or ())
    if not 2 <= len(shape) <= 5 or any(not _known(d) or d == 0 for d in shape):
        raise ValueError(f"spectral_norm: weight {weight.name!r} must have rank 2 to 5 with "
                         f"known, non-zero dims, got {shape}")
    if dim not in (0, 1):
        raise ValueError(f"spectral_norm: dim can only be 0 or 1, got {dim}")
    if power_iters < 0:
        raise ValueError(f"spectral_norm: power_iters must be >= 0, got {power_iters}")
    h = shape[dim]
    w = int(np.prod(shape)) // h
    helper = LayerHelper("spectral_norm", name)
    u = helper.create_parameter(ParamAttr(), [h], weight.dtype,
                                default_initializer=NormalInitializer(0.0, 1.0))
    u.stop_gradient = True
    v = helper.create_parameter(ParamAttr(), [w], weight.dtype,
                                default_initializer=NormalInitializer(0.0, 1.0))
    v.stop_gradient = True
    out = helper.create_tmp(dtype=weight.dtype, shape=shape)
    helper.append_op("spectral_norm", inputs={"Weight": [weight], "U": [u], "V": [v]},
                     outputs={"Out": [out]},
                     attrs={"dim": dim, "power_iters": power_iters, "eps": eps})
    return out


def inplace_abn(input: Variable, act: str | None = None, is_test: bool = False,
                momentum: float = 0.9, epsilon: float = 1e-05, param_attr: Any = None,
                bias_attr: Any = None, data_layout: str = "NCHW", name: str | None = None,
                moving_mean_name: str | None = None, moving_variance_name: str | None = None,
                do_model_average_for_mean_and_var: bool = True, use_global_stats: bool = False,
                act_alpha: float = 1.0) -> Variable:
    """Batch normalisation fused with ``act`` (None/'identity', 'leaky_relu' or 'elu' with
    ``act_alpha``), written in place into ``input`` (Fluid 1.8's ``layers.inplace_abn``): the
    parameters are ``batch_norm``'s; the returned variable is ``input`` itself.

    Raises
    ------
    ValueError
        an unsupported ``act``, ``bias_attr`` False, a bad ``data_layout`` or an input without
        a known channel dim.
    NotImplementedError
        ``momentum`` given as a Variable.
    """
    from ..initializer import ConstantInitializer as _Const

    _check_var(input, "input", "inplace_abn")
    if act not in (None, "identity", "leaky_relu", "elu"):
        raise ValueError(f"inplace_abn: act must be None, 'identity', 'leaky_relu' or 'elu', "
                         f"got {act!r}")
    if bias_attr is False:
        raise ValueError("inplace_abn: bias_attr should not be False")
    if isinstance(momentum, Variable):
        raise NotImplementedError("inplace_abn(momentum=Variable) is not implemented in "
                                  "dask_fluid")
    shape, channels = _layout_channels(input, data_layout, "inplace_abn")
    if act in ("leaky_relu", "elu") and float(act_alpha) <= 0:
        raise ValueError(f"inplace_abn: act_alpha must be > 0 for {act} (the gradient inverts "
                         f"the activation), got {act_alpha!r}")
    if not _known(channels) or channels == 0:
        raise ValueError(f"inplace_abn: the channel dim of {input.name!r} must be known, got "
                         f"shape {shape}")
    helper = LayerHelper("inplace_abn", name)
    dtype = input.dtype
    scale = helper.create_parameter(ParamAttr._to_attr(param_attr), [channels], dtype,
                                    default_initializer=_Const(1.0))
    bias = helper.create_parameter(ParamAttr._to_attr(bias_attr), [channels], dtype,
                                   is_bias=True)
    stats = []
    for stat_name, init in ((moving_mean_name, 0.0), (moving_variance_name, 1.0)):
        p = helper.create_parameter(
            ParamAttr(name=stat_name, initializer=_Const(init), trainable=False,
                      do_model_average=do_model_average_for_mean_and_var), [channels], dtype)
        p.stop_gradient = True
        stats.append(p)
    mean, variance = stats
    saved_mean = helper.create_tmp(dtype=dtype, shape=[channels], stop_gradient=True)
    saved_variance = helper.create_tmp(dtype=dtype, shape=[channels], stop_gradient=True)
    attrs = {"epsilon": float(epsilon), "is_test": bool(is_test), "data_layout": data_layout,
             "use_mkldnn": False, "fuse_with_relu": False,
             "use_global_stats": bool(use_global_stats), "alpha": float(act_alpha),
             "momentum": float(momentum)}
    if act is not None:  # Fluid drops a None attr: the op's default (identity) applies
        attrs["activation"] = act
    helper.append_op("inplace_abn",
                     inputs={"X": [input], "Scale": [scale], "Bias": [bias], "Mean": [mean],
                             "Variance": [variance]},
                     outputs={"Y": [input], "MeanOut": [mean], "VarianceOut": [variance],
                              "SavedMean": [saved_mean], "SavedVariance": [saved_variance]},
                     attrs=attrs)
    return input
