"""Recurrent layers of ``fluid.layers`` over LoD sequences (Fluid 1.8's signatures and
defaults; the kernels are in :mod:`dask_fluid.ops.rnn_ops`)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..initializer import ConstantInitializer
from ..layer_helper import LayerHelper
from ..ops.rnn_ops import cudnn_lstm_weight_size
from ..param_attr import ParamAttr
from .nn import fc
from .tensor import _check_var, concat

__all__ = ["dynamic_gru", "dynamic_lstm", "dynamic_lstmp", "gru_unit", "lstm", "lstm_unit"]


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


_UNIT_ACTS = {"identity": 0, "sigmoid": 1, "tanh": 2, "relu": 3}


def gru_unit(input: Variable, hidden: Variable, size: int, param_attr: Any = None,
             bias_attr: Any = None, activation: str = "tanh", gate_activation: str = "sigmoid",
             origin_mode: bool = False) -> tuple[Variable, Variable, Variable]:
    """One GRU step (Fluid's ``gru_unit``), the cell of a hand-written recurrence.

    Parameters
    ----------
    input : Variable
        ``[N, size]`` with ``size = 3 * D``: the projected update, reset and candidate inputs.
    hidden : Variable
        The previous state, ``[N, D]``.
    size : int
        ``3 * D``, as in Fluid.
    param_attr, bias_attr : ParamAttr, optional
        The weight ``[D, 3D]`` and the bias ``[1, 3D]`` (``bias_attr=False``: none).
    activation, gate_activation : str
        ``identity``, ``sigmoid``, ``tanh`` or ``relu`` (Fluid 1.8's layer always writes tanh
        and sigmoid into the op whatever is asked; this one writes what is asked).
    origin_mode : bool
        ``h = u * h_prev + (1 - u) * c`` instead of ``(1 - u) * h_prev + u * c``.

    Returns
    -------
    tuple of Variable
        ``(hidden [N, D], reset_hidden_prev [N, D], gate [N, 3D])``, Fluid's order.
    """
    _check_var(input, "input", "gru_unit")
    _check_var(hidden, "hidden", "gru_unit")
    for name, act in (("activation", activation), ("gate_activation", gate_activation)):
        if act not in _UNIT_ACTS:
            raise ValueError(f"gru_unit: {name} {act!r} is not one of {list(_UNIT_ACTS)}")
    if size % 3:
        raise ValueError(f"gru_unit: size must be 3 * hidden size, got {size}")
    d = size // 3
    helper = LayerHelper("gru_unit")
    weight = helper.create_parameter(ParamAttr._to_attr(param_attr), [d, 3 * d], input.dtype)
    inputs = {"Input": [input], "HiddenPrev": [hidden], "Weight": [weight]}
    battr = ParamAttr._to_attr(bias_attr)
    if battr is not False:
        inputs["Bias"] = [helper.create_parameter(battr, [1, 3 * d], input.dtype, is_bias=True)]
    batch = input.shape[0] if input.shape else -1
    outs = {"Gate": [helper.create_tmp(dtype=input.dtype, shape=[batch, 3 * d])],
            "ResetHiddenPrev": [helper.create_tmp(dtype=input.dtype, shape=[batch, d])],
            "Hidden": [helper.create_tmp(dtype=input.dtype, shape=[batch, d])]}
    helper.append_op("gru_unit", inputs=inputs, outputs=outs,
                     attrs={"activation": _UNIT_ACTS[activation],
                            "gate_activation": _UNIT_ACTS[gate_activation],
                            "origin_mode": bool(origin_mode)})
    return outs["Hidden"][0], outs["ResetHiddenPrev"][0], outs["Gate"][0]


def lstm_unit(x_t: Variable, hidden_t_prev: Variable, cell_t_prev: Variable,
              forget_bias: float = 0.0, param_attr: Any = None, bias_attr: Any = None,
              name: str | None = None) -> tuple[Variable, Variable]:
    """One LSTM step (Fluid's ``lstm_unit``): ``fc(concat([x_t, hidden_t_prev]), 4 * D)``,
    then op ``lstm_unit`` with the gates in the order input, forget, output, candidate.

    Returns
    -------
    tuple of Variable
        ``(hidden [N, D], cell [N, D])``, Fluid's order.
    """
    for arg, var in (("x_t", x_t), ("hidden_t_prev", hidden_t_prev),
                     ("cell_t_prev", cell_t_prev)):
        _check_var(var, arg, "lstm_unit")
        if var.shape is None or len(var.shape) != 2:
            raise ValueError(f"lstm_unit: {arg} must be a 2-D tensor, got shape {var.shape}")
    if len({v.shape[0] for v in (x_t, hidden_t_prev, cell_t_prev) if v.shape[0] > 0}) > 1:
        raise ValueError("lstm_unit: x_t, hidden_t_prev and cell_t_prev must have the same "
                         "batch size")
    if hidden_t_prev.shape[1] != cell_t_prev.shape[1]:
        raise ValueError(f"lstm_unit: hidden_t_prev {list(hidden_t_prev.shape)} and "
                         f"cell_t_prev {list(cell_t_prev.shape)} must have the same width")
    size = cell_t_prev.shape[1]
    helper = LayerHelper("lstm_unit", name=name)
    fc_out = fc(concat([x_t, hidden_t_prev], axis=1), 4 * size, param_attr=param_attr,
                bias_attr=bias_attr)
    c = helper.create_tmp(dtype=x_t.dtype, shape=list(cell_t_prev.shape))
    h = helper.create_tmp(dtype=x_t.dtype, shape=list(cell_t_prev.shape))
    helper.append_op("lstm_unit", inputs={"X": [fc_out], "C_prev": [cell_t_prev]},
                     outputs={"C": [c], "H": [h]}, attrs={"forget_bias": float(forget_bias)})
    return h, c


_LSTMP_ACTS = ("sigmoid", "tanh", "relu", "identity")


def dynamic_lstmp(input: Variable, size: int, proj_size: int, param_attr: Any = None,
                  bias_attr: Any = None, use_peepholes: bool = True, is_reverse: bool = False,
                  gate_activation: str = "sigmoid", cell_activation: str = "tanh",
                  candidate_activation: str = "tanh", proj_activation: str = "tanh",
                  dtype: str = "float32", name: str | None = None, h_0: Variable | None = None,
                  c_0: Variable | None = None, cell_clip: float | None = None,
                  proj_clip: float | None = None) -> tuple[Variable, Variable]:
    """An LSTM with a recurrent projection over every sequence of ``input`` (Fluid 1.8's
    ``dynamic_lstmp``, op ``lstmp``): the LSTM of :func:`dynamic_lstm` whose state fed back
    to the gates is the projection ``r_t = proj_act(h_t W_rh)`` (``[T, proj_size]``).

    Parameters
    ----------
    input : Variable
        ``[T, size]``, a LoD tensor: the projected candidate, input, forget and output gate
        inputs (usually ``fc(x, size)``).
    size : int
        Four times the hidden size ``D``.
    proj_size : int
        The projection size ``P``.
    param_attr : ParamAttr, optional
        Used for both weights, as in Fluid: the recurrent weight ``[P, 4D]`` and the
        projection weight ``[D, P]`` (Xavier by default; a name in it clashes, as in Fluid).
    bias_attr : ParamAttr, optional
        The bias ``[1, 7D]`` with peepholes (gate biases, then ``W_ic, W_fc, W_oc``),
        ``[1, 4D]`` without; zeros by default. It cannot be ``False`` (Fluid asserts so).
    use_peepholes, is_reverse : bool
        Let the cell state feed the gates; run each sequence from its end.
    gate_activation, cell_activation, candidate_activation, proj_activation : str
        ``sigmoid``, ``tanh``, ``relu`` or ``identity``. As Fluid 1.8's kernel does, a
        ``proj_activation`` other than ``identity`` applies ``cell_activation`` to the
        projection.
    dtype : str
        The parameters' and outputs' type.
    name : str, optional
        A prefix for the parameter names.
    h_0, c_0 : Variable, optional
        The initial projection ``[num_sequences, P]`` and cell ``[num_sequences, D]``;
        zeros by default. ``h_0`` needs ``c_0``.
    cell_clip, proj_clip : float, optional
        When positive, clip the cell state (before the output gate and cell activation read
        it) and the projection (after its activation) to ``[-clip, clip]``.

    Returns
    -------
    tuple of Variable
        ``(projection [T, P], cell [T, D])``, both with ``input``'s LoD.
    """
    _check_var(input, "input", "dynamic_lstmp")
    if size % 4 or size <= 0:
        raise ValueError(f"dynamic_lstmp: size is four times the hidden size, got {size}")
    if not isinstance(proj_size, int) or proj_size <= 0:
        raise ValueError(f"dynamic_lstmp: proj_size must be a positive int, got {proj_size!r}")
    if input.shape is not None and input.shape[-1] > 0 and input.shape[-1] != size:
        raise ValueError(f"dynamic_lstmp: input must be [T, size] = [T, {size}], got "
                         f"{list(input.shape)}; project it with fc(x, size) first")
    for arg, act in (("gate_activation", gate_activation), ("cell_activation", cell_activation),
                     ("candidate_activation", candidate_activation),
                     ("proj_activation", proj_activation)):
        if act not in _LSTMP_ACTS:
            raise ValueError(f"dynamic_lstmp: {arg} {act!r} is not one of {list(_LSTMP_ACTS)}")
    battr = ParamAttr._to_attr(bias_attr)
    if battr is False:
        raise ValueError("dynamic_lstmp: bias_attr cannot be False (the lstmp op needs its Bias)")
    if h_0 is not None and c_0 is None:
        raise ValueError("dynamic_lstmp: h_0 needs c_0 as well (Fluid's lstmp op rule)")
    for arg, clip in (("cell_clip", cell_clip), ("proj_clip", proj_clip)):
        if clip is not None and clip < 0:
            raise ValueError(f"dynamic_lstmp: {arg} must not be negative, got {clip}")
    d = size // 4
    for arg, var, width in (("h_0", h_0, proj_size), ("c_0", c_0, d)):
        if var is not None:
            _check_var(var, arg, "dynamic_lstmp")
            if var.shape is not None and (len(var.shape) != 2 or var.shape[-1] not in
                                          (-1, width)):
                raise ValueError(f"dynamic_lstmp: {arg} must be [num_sequences, {width}], got "
                                 f"{list(var.shape)}")
    helper = LayerHelper("lstmp", name=name)
    pattr = ParamAttr._to_attr(param_attr)
    weight = helper.create_parameter(pattr, [proj_size, size], dtype)
    proj_weight = helper.create_parameter(pattr, [d, proj_size], dtype)
    bias = helper.create_parameter(battr, [1, 7 * d if use_peepholes else size], dtype,
                                   is_bias=True, default_initializer=ConstantInitializer(0.0))
    inputs = {"Input": [input], "Weight": [weight], "ProjWeight": [proj_weight],
              "Bias": [bias]}
    if h_0 is not None:
        inputs["H0"] = [h_0]
    if c_0 is not None:
        inputs["C0"] = [c_0]
    rows = input.shape[0] if input.shape else -1
    outs = {slot: [helper.create_tmp(dtype=dtype, shape=[rows, width],
                                     stop_gradient=slot not in ("Projection", "Cell"))]
            for slot, width in (("Projection", proj_size), ("Cell", d), ("BatchHidden", d),
                                ("BatchGate", size), ("BatchCellPreAct", d))}
    helper.append_op("lstmp", inputs=inputs, outputs=outs,
                     attrs={"use_peepholes": bool(use_peepholes),
                            "cell_clip": float(cell_clip or 0.0),
                            "proj_clip": float(proj_clip or 0.0),
                            "is_reverse": bool(is_reverse), "gate_activation": gate_activation,
                            "cell_activation": cell_activation,
                            "candidate_activation": candidate_activation,
                            "proj_activation": proj_activation})
    return outs["Projection"][0], outs["Cell"][0]


def lstm(input: Variable, init_h: Variable, init_c: Variable, max_len: int, hidden_size: int,
         num_layers: int, dropout_prob: float = 0.0, is_bidirec: bool = False,
         is_test: bool = False, name: str | None = None, default_initializer: Any = None,
         seed: int = -1) -> tuple[Variable, Variable, Variable]:
    """A multi-layer LSTM, optionally bidirectional, over a padded time-major batch (Fluid
    1.8's ``layers.lstm``, op ``cudnn_lstm``; computed here on numpy/CuPy, not cuDNN).

    Parameters
    ----------
    input : Variable
        ``[T, B, input_size]``: every sequence T steps long.
    init_h, init_c : Variable
        The initial states ``[num_layers * dirs, B, hidden_size]`` (dirs = 2 when
        ``is_bidirec``), indexed ``layer * dirs + direction``.
    max_len : int
        Unused, as in Fluid 1.8 (its op has no such attribute).
    hidden_size, num_layers : int
        The state size and the number of stacked layers.
    dropout_prob : float
        Dropout on the outputs of every layer but the last, in training (none with
        ``is_test=True`` or a single layer, as cuDNN's): kept values scaled by ``1 / (1 -
        dropout_prob)``; the masks are drawn from a stream of the op (``seed``, or the
        program's ``random_seed``), not cuDNN's generator.
    is_bidirec, is_test : bool
        Run a backward LSTM too (outputs concatenated); inference mode.
    name : str, optional
        The weight's name prefix (``cudnn_lstm_N.w_0`` by default).
    default_initializer : Initializer, optional
        For the flat weight; Xavier by default.
    seed : int
        The dropout seed attribute.

    Returns
    -------
    tuple of Variable
        ``(out [T, B, dirs * hidden_size], last_h, last_c)``, the last two shaped as
        ``init_h``.

    Notes
    -----
    The weight is one flat parameter in cuDNN's layout: every pseudo-layer's ``W_ih``
    ``[4H, in]`` and ``W_hh`` ``[4H, H]`` (gates ``i, f, c, o``), then every pseudo-layer's
    ``b_ih`` and ``b_hh``. Its size counts ``in = 2 * hidden_size`` for the layers above the
    first when ``is_bidirec`` (what the LSTM needs); Fluid 1.8's layer counted
    ``hidden_size``, a blob too small for that case.
    """
    for arg, var in (("input", input), ("init_h", init_h), ("init_c", init_c)):
        _check_var(var, arg, "lstm")
    for arg, v in (("max_len", max_len), ("hidden_size", hidden_size),
                   ("num_layers", num_layers)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"lstm: {arg} must be an int, got {type(v).__name__}")
    if hidden_size < 1 or num_layers < 1:
        raise ValueError(f"lstm: hidden_size and num_layers must be >= 1, got {hidden_size} and "
                         f"{num_layers}")
    if input.shape is None or len(input.shape) != 3 or input.shape[-1] <= 0:
        raise ValueError(f"lstm: input must be [seq_len, batch_size, input_size] with a known "
                         f"input_size, got {None if input.shape is None else list(input.shape)}")
    if not 0.0 <= float(dropout_prob) < 1.0:
        raise ValueError(f"lstm: dropout_prob must be in [0, 1), got {dropout_prob}")
    dirs = 2 if is_bidirec else 1
    want = [num_layers * dirs, input.shape[1], hidden_size]
    for arg, var in (("init_h", init_h), ("init_c", init_c)):
        if var.shape is None or len(var.shape) != 3 or any(
                a > 0 and b > 0 and a != b for a, b in zip(var.shape, want, strict=True)):
            raise ValueError(f"lstm: {arg} must be [num_layers * dirs, batch_size, hidden_size] "
                             f"= {want}, got {None if var.shape is None else list(var.shape)}")
    input_size = int(input.shape[-1])
    helper = LayerHelper("cudnn_lstm", name=name)
    dtype = input.dtype
    weight = helper.create_parameter(
        ParamAttr._to_attr(None),
        [cudnn_lstm_weight_size(input_size, hidden_size, num_layers, bool(is_bidirec))], dtype,
        default_initializer=default_initializer)
    out = helper.create_tmp(dtype=dtype, shape=[*input.shape[:2], dirs * hidden_size])
    last_h = helper.create_tmp(dtype=dtype, shape=list(init_h.shape))
    last_c = helper.create_tmp(dtype=dtype, shape=list(init_c.shape))
    reserve = helper.create_tmp(dtype="uint8", shape=[0], stop_gradient=True)
    state_out = helper.create_tmp(dtype="uint8", shape=[0], stop_gradient=True)
    helper.append_op("cudnn_lstm",
                     inputs={"Input": [input], "InitH": [init_h], "InitC": [init_c],
                             "W": [weight]},
                     outputs={"Out": [out], "LastH": [last_h], "LastC": [last_c],
                              "Reserve": [reserve], "StateOut": [state_out]},
                     attrs={"is_bidirec": bool(is_bidirec), "input_size": input_size,
                            "hidden_size": hidden_size, "num_layers": num_layers,
                            "is_test": bool(is_test), "dropout_prob": float(dropout_prob),
                            "seed": int(seed)})
    return out, last_h, last_c


# Fluid 1.8's layers/rnn.py also holds the cell and decoder API (``from
# paddle.fluid.layers.rnn import LSTMCell``): the same objects, from rnn_cells
from .rnn_cells import (  # noqa: E402, F401
    BasicDecoder,
    BeamSearchDecoder,
    DecodeHelper,
    Decoder,
    GreedyEmbeddingHelper,
    GRUCell,
    LSTMCell,
    RNNCell,
    SampleEmbeddingHelper,
    TrainingHelper,
    dynamic_decode,
    gather_tree,
    rnn,
)
