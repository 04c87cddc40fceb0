"""Sequence (LoD) layers of ``fluid.layers`` (Fluid 1.8's ``layers/sequence_lod.py``
signatures and defaults; the kernels are in :mod:`dask_fluid.ops.sequence_ops`)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..initializer import ConstantInitializer
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .nn import _append_activation
from .tensor import _check_var

__all__ = ["sequence_conv", "sequence_first_step", "sequence_last_step", "sequence_pool"]

_POOL_TYPES = ("average", "sum", "sqrt", "max", "last", "first")


def sequence_pool(input: Variable, pool_type: str, is_test: bool = False,
                  pad_value: float = 0.0) -> Variable:
    """Pool every sequence of ``input``'s last LoD level into one row.

    Parameters
    ----------
    input : Variable
        A LoD tensor (``lod_level`` 1 or 2), ``[N, ...]``.
    pool_type : str
        ``"average"``, ``"sum"``, ``"sqrt"``, ``"max"``, ``"last"`` or ``"first"``.
    is_test : bool
    pad_value : float
        The output row of an empty sequence.

    Returns
    -------
    Variable
        ``[num_sequences, ...]``; with a 2-level input, a LoD tensor of the top level.
    """
    _check_var(input, "input", "sequence_pool")
    if str(pool_type).lower() not in _POOL_TYPES:
        raise ValueError(f"sequence_pool: pool_type must be one of {_POOL_TYPES}, got "
                         f"{pool_type!r}")
    helper = LayerHelper("sequence_pool")
    shape = list(input.shape) if input.shape is not None else None
    if shape:
        shape[0] = -1
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    max_index = helper.create_tmp(dtype=input.dtype, shape=shape, stop_gradient=True)
    helper.append_op("sequence_pool", inputs={"X": [input]},
                     outputs={"Out": [out], "MaxIndex": [max_index]},
                     attrs={"pooltype": str(pool_type).upper(), "is_test": bool(is_test),
                            "pad_value": float(pad_value)})
    return out


def sequence_first_step(input: Variable) -> Variable:
    """The first row of every sequence (``sequence_pool(input, "first")``)."""
    return sequence_pool(input=input, pool_type="first")


def sequence_last_step(input: Variable) -> Variable:
    """The last row of every sequence (``sequence_pool(input, "last")``)."""
    return sequence_pool(input=input, pool_type="last")


def sequence_conv(input: Variable, num_filters: int, filter_size: int = 3,
                  filter_stride: int = 1, padding: bool = True, padding_start: int | None = None,
                  bias_attr: Any = None, param_attr: Any = None, act: str | None = None,
                  name: str | None = None) -> Variable:
    """A 1-D convolution along every sequence of ``input`` (Fluid's ``sequence_conv``).

    Parameters
    ----------
    input : Variable
        A LoD tensor ``[N, D]``.
    num_filters : int
    filter_size : int
        The context window (rows).
    filter_stride : int
        Only 1, as in Fluid.
    padding : bool
        Has no effect, as in Fluid 1.8 (windows are zero-padded at sequence ends).
    padding_start : int, optional
        The window's first row relative to the output row; default ``-(filter_size // 2)``.
    bias_attr, param_attr : ParamAttr, optional
        The filter is ``[filter_size * D, num_filters]`` (Xavier); the bias ``[num_filters]``.
    act : str, optional

    Returns
    -------
    Variable
        ``[N, num_filters]`` with ``input``'s LoD.
    """
    _check_var(input, "input", "sequence_conv")
    if input.shape is None or len(input.shape) != 2 or input.shape[1] <= 0:
        raise ValueError(f"sequence_conv: input must be [N, D] with D known, got {input.shape}")
    helper = LayerHelper("sequence_conv", name)
    filt = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                   [filter_size * input.shape[1], num_filters], input.dtype)
    if padding_start is None:
        padding_start = -int(filter_size // 2)
    pre_bias = helper.create_tmp(dtype=input.dtype, shape=[-1, num_filters])
    helper.append_op("sequence_conv", inputs={"X": [input], "Filter": [filt]},
                     outputs={"Out": [pre_bias]},
                     attrs={"contextStride": int(filter_stride),
                            "contextStart": int(padding_start),
                            "contextLength": int(filter_size)})
    battr = ParamAttr._to_attr(bias_attr)
    pre_act = pre_bias
    if battr is not False:
        b = helper.create_parameter(battr, [num_filters], input.dtype, is_bias=True,
                                    default_initializer=ConstantInitializer(0.0))
        pre_act = helper.create_tmp(dtype=input.dtype, shape=[-1, num_filters])
        helper.append_op("elementwise_add", inputs={"X": [pre_bias], "Y": [b]},
                         outputs={"Out": [pre_act]}, attrs={"axis": 1})
    return _append_activation(helper, pre_act, act)
