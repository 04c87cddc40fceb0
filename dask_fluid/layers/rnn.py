"""Recurrent layers of ``fluid.layers`` over LoD sequences (Fluid 1.8's signatures and
defaults; the kernels are in :mod:`dask_fluid.ops.rnn_ops`)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..initializer import ConstantInitializer
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .tensor import _check_var

__all__ = ["dynamic_gru", "dynamic_lstm"]


def dynamic_gru(input: Variable, size: int, param_attr: Any = None, bias_attr: Any = None,
                is_reverse: bool = False, gate_activation: str = "sigmoid",
                candidate_activation: str = "tanh", h_0: Variable | None = None,
                origin_mode: bool = False) -> Variable:
    """A GRU over every sequence of ``input`` (Fluid's ``dynamic_gru``).

    Parameters
    ----------
    input : Variable
        ``[T, 3 * size]``, a LoD tensor: the projected update, reset and candidate inputs
        (usually ``fc(x, size * 3)``).
    size : int
        The hidden size ``D``.
    param_attr, bias_attr : ParamAttr, optional
        The weight ``[D, 3D]`` (Fluid's memory layout) and the bias ``[1, 3D]``.
    is_reverse : bool
        Run each sequence from its end.
    gate_activation, candidate_activation : str
        ``sigmoid``, ``tanh``, ``relu`` or ``identity``.
    h_0 : Variable, optional
        The initial state of each sequence, ``[num_sequences, D]``; zeros by default.
    origin_mode : bool
        ``h = u * h_prev + (1 - u) * c`` (the GRU paper's form) instead of Fluid's default
        ``(1 - u) * h_prev + u * c``.

    Returns
    -------
    Variable
        ``[T, D]``, with ``input``'s LoD.
    """
    _check_var(input, "input", "dynamic_gru")
    if input.shape is not None and input.shape[-1] > 0 and input.shape[-1] != 3 * size:
        raise ValueError(f"dynamic_gru: input must be [T, 3 * size] = [T, {3 * size}], got "
                         f"{list(input.shape)}; project it with fc(x, size * 3) first")
    helper = LayerHelper("gru")
    weight = helper.create_parameter(ParamAttr._to_attr(param_attr), [size, 3 * size],
                                     input.dtype)
    inputs = {"Input": [input], "Weight": [weight]}
    battr = ParamAttr._to_attr(bias_attr)
    if battr is not False:
        inputs["Bias"] = [helper.create_parameter(battr, [1, 3 * size], input.dtype,
                                                  is_bias=True,
                                                  default_initializer=ConstantInitializer(0.0))]
    if h_0 is not None:
        inputs["H0"] = [h_0]
    outs = {slot: [helper.create_tmp(dtype=input.dtype, shape=[-1, width],
                                     stop_gradient=slot != "Hidden")]
            for slot, width in (("Hidden", size), ("BatchGate", 3 * size),
                                ("BatchResetHiddenPrev", size), ("BatchHidden", size))}
    helper.append_op("gru", inputs=inputs, outputs=outs,
                     attrs={"is_reverse": bool(is_reverse), "gate_activation": gate_activation,
                            "activation": candidate_activation,
                            "origin_mode": bool(origin_mode)})
    return outs["Hidden"][0]


def dynamic_lstm(input: Variable, size: int, h_0: Variable | None = None,
                 c_0: Variable | None = None, param_attr: Any = None, bias_attr: Any = None,
                 use_peepholes: bool = True, is_reverse: bool = False,
                 gate_activation: str = "sigmoid", cell_activation: str = "tanh",
                 candidate_activation: str = "tanh", dtype: str = "float32",
                 name: str | None = None) -> tuple[Variable, Variable]:
    """An LSTM over every sequence of ``input`` (Fluid's ``dynamic_lstm``).

    Parameters
    ----------
    input : Variable
        ``[T, size]``, a LoD tensor: the projected candidate, input, forget and output gate
        inputs, in that order (usually ``fc(x, size)``).
    size : int
        Four times the hidden size ``D``, as in Fluid.
    h_0, c_0 : Variable, optional
        The initial hidden and cell state of each sequence, ``[num_sequences, D]``; zeros by
        default. ``h_0`` needs ``c_0``.
    param_attr, bias_attr : ParamAttr, optional
        The weight ``[D, 4D]`` and the bias ``[1, 7D]`` with peepholes (gate biases, then the
        peephole weights ``W_ic, W_fc, W_oc``), ``[1, 4D]`` without.
    use_peepholes : bool
        Let the cell state feed the gates.
    is_reverse : bool
        Run each sequence from its end.
    gate_activation, cell_activation, candidate_activation : str
        ``sigmoid``, ``tanh``, ``relu`` or ``identity``.
    dtype : str
        The parameters' type.
    name : str, optional
        A prefix for the layer's parameter names.

    Returns
    -------
    tuple of Variable
        ``(hidden, cell)``, each ``[T, D]`` with ``input``'s LoD.
    """
    _check_var(input, "input", "dynamic_lstm")
    if size % 4:
        raise ValueError(f"dynamic_lstm: size is four times the hidden size, got {size}")
    if input.shape is not None and input.shape[-1] > 0 and input.shape[-1] != size:
        raise ValueError(f"dynamic_lstm: input must be [T, size] = [T, {size}], got "
                         f"{list(input.shape)}; project it with fc(x, size) first")
    if h_0 is not None and c_0 is None:
        raise ValueError("dynamic_lstm: h_0 needs c_0 as well (Fluid's lstm op rule)")
    hidden_size = size // 4
    helper = LayerHelper("lstm", name=name)
    weight = helper.create_parameter(ParamAttr._to_attr(param_attr), [hidden_size, size],
                                     dtype)
    battr = ParamAttr._to_attr(bias_attr)
    if battr is False and use_peepholes:
        raise ValueError("dynamic_lstm: use_peepholes needs the bias (the peephole weights "
                         "are its last 3 * D values); pass use_peepholes=False")
    inputs = {"Input": [input], "Weight": [weight]}
    if battr is not False:
        width = 7 * hidden_size if use_peepholes else size
        inputs["Bias"] = [helper.create_parameter(battr, [1, width], dtype, is_bias=True,
                                                  default_initializer=ConstantInitializer(0.0))]
    if h_0 is not None:
        inputs["H0"] = [h_0]
    if c_0 is not None:
        inputs["C0"] = [c_0]
    outs = {slot: [helper.create_tmp(dtype=dtype, shape=[-1, width],
                                     stop_gradient=slot not in ("Hidden", "Cell"))]
            for slot, width in (("Hidden", hidden_size), ("Cell", hidden_size),
                                ("BatchGate", size), ("BatchCellPreAct", hidden_size))}
    helper.append_op("lstm", inputs=inputs, outputs=outs,
                     attrs={"use_peepholes": bool(use_peepholes), "is_reverse": bool(is_reverse),
                            "gate_activation": gate_activation,
                            "cell_activation": cell_activation,
                            "candidate_activation": candidate_activation})
    return outs["Hidden"][0], outs["Cell"][0]
