"""``fluid.contrib.layers.rnn_impl`` (Fluid 1.8): BasicGRUUnit, basic_gru, BasicLSTMUnit,
basic_lstm.

As in Fluid 1.8 (``python/paddle/fluid/contrib/layers/rnn_impl.py``) everything is pure Python
over basic layers: each unit is concat + matmul + elementwise_add + activations + split, and
``basic_gru``/``basic_lstm`` unroll a stack of units per direction with one ``StaticRNN``.

As in Fluid the units are :class:`dask_fluid.dygraph.Layer` subclasses: they build static
programs outside a dygraph guard and run at once inside one; their parameters, created at the
first call, are the layer's (``parameters()``, ``state_dict()``). The step arithmetic is that
of ``layers.GRUCell`` / ``layers.LSTMCell`` (Fluid 1.8 builds those from these very units), so
the units delegate to them; parameter names and shapes are Fluid's:
``<name_scope>/BasicGRUUnit_<k>.w_0`` (gate, ``[in + hidden, 2 hidden]``), ``.w_1`` (candidate,
``[in + hidden, hidden]``), ``.b_0``, ``.b_1``; ``<name_scope>/BasicLSTMUnit_<k>.w_0`` (``[in +
hidden, 4 hidden]``) and ``.b_0``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ...dygraph.layers import Layer
from ...framework import Variable
from ...layers import control_flow, nn, sequence_lod, tensor
from ...layers.rnn_cells import GRUCell, LSTMCell
from ...param_attr import ParamAttr

__all__: list[str] = ["BasicGRUUnit", "basic_gru", "BasicLSTMUnit", "basic_lstm"]

_FLOATS = ("float32", "float64")


# -- argument checks --------------------------------------------------------------------------

def _check_int(value: Any, arg: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {arg} must be a positive int, got {value!r}")
    return value


def _check_dtype(dtype: Any, where: str) -> str:
    if dtype not in _FLOATS:
        raise ValueError(f"{where}: dtype must be 'float32' or 'float64', got {dtype!r}")
    return dtype


def _check_attr(attr: Any, arg: str, where: str) -> ParamAttr | None:
    """The ParamAttr form of ``attr`` (None stays None, as Fluid tests ``attr is not None``);
    ``False`` (no parameter) is refused: Fluid's units would add ``None`` in their ops."""
    if attr is None:
        return None
    converted = ParamAttr._to_attr(attr)
    if converted is False:
        raise NotImplementedError(f"{where}({arg}=False) is not implemented in dask_fluid")
    return converted


def _check_act(act: Any, arg: str, where: str) -> Callable | None:
    if act is not None and not callable(act):
        raise TypeError(f"{where}: {arg} must be a callable layer function or None, got "
                        f"{act!r}")
    return act


def _check_var(x: Any, arg: str, where: str, optional: bool = False) -> None:
    if x is None and optional:
        return
    if not isinstance(x, Variable):
        raise TypeError(f"{where}: {arg} must be a Variable{' or None' if optional else ''}, "
                        f"got {type(x).__name__}")


# -- the units --------------------------------------------------------------------------------

class BasicGRUUnit(Layer):
    """One GRU step from basic operators (Fluid 1.8's ``contrib.layers.BasicGRUUnit``)::

        r, u = split(gate_activation([x, h] @ W_gate + b_gate), 2)
        c = activation([x, r * h] @ W_cand + b_cand)
        h' = u * h + (1 - u) * c

    Parameters
    ----------
    name_scope : str
        Prefix of the parameter names: ``<name_scope>/BasicGRUUnit_<k>.w_0`` (gate weight,
        ``[input_size + hidden_size, 2 * hidden_size]``), ``.w_1`` (candidate weight,
        ``[input_size + hidden_size, hidden_size]``), ``.b_0`` and ``.b_1`` (biases). They
        are created at the first call, when the input size is known.
    hidden_size : int
        Size of the hidden state.
    param_attr, bias_attr : ParamAttr or None
        Attributes of the weights / biases (Xavier weights, zero biases by default). A named
        attribute gives two parameters, ``<name>_gate`` and ``<name>_candidate``.
    gate_activation, activation : callable or None
        Layer functions for the gates (default ``layers.sigmoid``) and the candidate
        (default ``layers.tanh``).
    dtype : str
        ``'float32'`` or ``'float64'``.

    Examples
    --------
    >>> unit = fluid.contrib.layers.BasicGRUUnit("gru_unit", 32)
    >>> new_hidden = unit(step_input, pre_hidden)
    """

    def __init__(self, name_scope: str, hidden_size: int, param_attr: Any = None,
                 bias_attr: Any = None, gate_activation: Callable | None = None,
                 activation: Callable | None = None, dtype: str = "float32") -> None:
        where = "BasicGRUUnit"
        if not isinstance(name_scope, str) or not name_scope:
            raise TypeError(f"{where}: name_scope must be a non-empty str, got {name_scope!r}")
        _check_int(hidden_size, "hidden_size", where)
        _check_dtype(dtype, where)
        param_attr = _check_attr(param_attr, "param_attr", where)
        bias_attr = _check_attr(bias_attr, "bias_attr", where)
        # Fluid's Layer.__init__ draws a unique name from name_scope, so that later names made
        # from the same prefix are numbered as in Fluid
        super().__init__(name_scope, dtype)
        self._cell = GRUCell(hidden_size, param_attr, bias_attr,
                             _check_act(gate_activation, "gate_activation", where),
                             _check_act(activation, "activation", where), dtype,
                             name=name_scope)
        self._name = name_scope
        self._hiden_size = hidden_size  # (sic) Fluid's attribute name
        self._dtype = dtype

    def full_name(self) -> str:
        """``<name_scope>/BasicGRUUnit_<k>``, the prefix of the parameter names (Fluid 1.8
        keeps this "old school" full name for these units)."""
        return self._cell._full_name

    def forward(self, input: Variable, pre_hidden: Variable) -> Variable:
        """One step: the new hidden state ``[batch, hidden_size]``."""
        _check_var(input, "input", "BasicGRUUnit")
        _check_var(pre_hidden, "pre_hidden", "BasicGRUUnit")
        new_hidden, _ = self._cell(input, pre_hidden)
        if not self._parameters:  # made by the first call: the layer's, in Fluid's order
            c = self._cell
            self._gate_weight, self._candidate_weight = c._gate_weight, c._candidate_weight
            self._gate_bias, self._candidate_bias = c._gate_bias, c._candidate_bias
        return new_hidden


class BasicLSTMUnit(Layer):
    """One LSTM step from basic operators (Fluid 1.8's ``contrib.layers.BasicLSTMUnit``)::

        i, j, f, o = split([x, h] @ W + b, 4)
        c' = c * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j)
        h' = tanh(c') * sigmoid(o)

    Parameters
    ----------
    name_scope : str
        Prefix of the parameter names: ``<name_scope>/BasicLSTMUnit_<k>.w_0`` (``[input_size
        + hidden_size, 4 * hidden_size]``) and ``.b_0`` (``[4 * hidden_size]``), created at
        the first call.
    hidden_size : int
        Size of the hidden and cell states.
    param_attr, bias_attr : ParamAttr or None
        Attributes of the weight / bias (Xavier weight, zero bias by default).
    gate_activation, activation : None
        Fluid 1.8 stores them but its ``forward`` always uses sigmoid and tanh; rather than
        ignore them, anything but None raises ``NotImplementedError``.
    forget_bias : float
        Added to the forget gate's input (a ``fill_constant`` made here, as Fluid does).
    dtype : str
        ``'float32'`` or ``'float64'``.

    Examples
    --------
    >>> unit = fluid.contrib.layers.BasicLSTMUnit("lstm_unit", 32)
    >>> new_hidden, new_cell = unit(step_input, pre_hidden, pre_cell)
    """

    def __init__(self, name_scope: str, hidden_size: int, param_attr: Any = None,
                 bias_attr: Any = None, gate_activation: Callable | None = None,
                 activation: Callable | None = None, forget_bias: float = 1.0,
                 dtype: str = "float32") -> None:
        where = "BasicLSTMUnit"
        if not isinstance(name_scope, str) or not name_scope:
            raise TypeError(f"{where}: name_scope must be a non-empty str, got {name_scope!r}")
        _check_int(hidden_size, "hidden_size", where)
        _check_dtype(dtype, where)
        param_attr = _check_attr(param_attr, "param_attr", where)
        bias_attr = _check_attr(bias_attr, "bias_attr", where)
        if gate_activation is not None or activation is not None:
            raise NotImplementedError(
                "BasicLSTMUnit(gate_activation=..., activation=...) is not implemented in "
                "dask_fluid (Fluid 1.8 accepts them but always uses sigmoid and tanh)")
        if isinstance(forget_bias, bool) or not isinstance(forget_bias, (int, float)):
            raise TypeError(f"{where}: forget_bias must be a float, got {forget_bias!r}")
        super().__init__(name_scope, dtype)  # a unique name drawn, as Fluid's (see GRU)
        self._cell = LSTMCell(hidden_size, param_attr, bias_attr, forget_bias=float(forget_bias),
                              dtype=dtype, name=name_scope)
        self._forget_bias = self._cell._forget_bias
        self._name = name_scope
        self._hiden_size = hidden_size  # (sic) Fluid's attribute name
        self._dtype = dtype

    def full_name(self) -> str:
        """``<name_scope>/BasicLSTMUnit_<k>``, the prefix of the parameter names."""
        return self._cell._full_name

    def forward(self, input: Variable, pre_hidden: Variable,
                pre_cell: Variable) -> tuple[Variable, Variable]:
        """One step: ``(new_hidden, new_cell)``, each ``[batch, hidden_size]``."""
        for x, arg in ((input, "input"), (pre_hidden, "pre_hidden"), (pre_cell, "pre_cell")):
            _check_var(x, arg, "BasicLSTMUnit")
        new_hidden, (_, new_cell) = self._cell(input, [pre_hidden, pre_cell])
        if not self._parameters:  # made by the first call: the layer's
            self._weight, self._bias = self._cell._weight, self._cell._bias
        return new_hidden, new_cell


# -- the multi-layer, optionally bidirectional networks ---------------------------------------

def _layer_attr(attr: ParamAttr | None, suffix: str) -> ParamAttr | None:
    """Fluid: a named attribute gets ``suffix`` (``_fw_w_<i>``, ...) per layer and direction;
    an unnamed one is shared as is."""
    if attr is not None and attr.name is not None:
        attr = copy.deepcopy(attr)
        attr.name += suffix
    return attr


def _check_common(where: str, input: Any, hidden_size: Any, num_layers: Any,
                  sequence_length: Any, dropout_prob: Any, dtype: Any,
                  inits: dict[str, Any]) -> None:
    _check_var(input, "input", where)
    if input.shape is None or len(input.shape) != 3:
        raise ValueError(f"{where}: input must be 3-D ([batch, time, size] or, without "
                         f"batch_first, [time, batch, size]), got shape {input.shape}")
    if input.shape[-1] <= 0:
        raise ValueError(f"{where}: the input's last dim must be known, got shape "
                         f"{input.shape}")
    if input.dtype not in _FLOATS:
        raise TypeError(f"{where}: input must be float32 or float64, got {input.dtype}")
    _check_int(hidden_size, "hidden_size", where)
    _check_int(num_layers, "num_layers", where)
    _check_var(sequence_length, "sequence_length", where, optional=True)
    for arg, v in inits.items():
        _check_var(v, arg, where, optional=True)
    if dropout_prob is not None and (isinstance(dropout_prob, bool)
                                     or not isinstance(dropout_prob, (int, float))
                                     or not 0.0 <= dropout_prob < 1.0):
        raise ValueError(f"{where}: dropout_prob must be a float in [0, 1), got "
                         f"{dropout_prob!r}")
    _check_dtype(dtype, where)


def _pick(init: Variable, i: int, d: int) -> Variable:
    """Fluid's ``init[i, d]`` on ``[num_layers, directions, batch, hidden]``: a slice with
    the two leading axes dropped."""
    return tensor.squeeze(tensor.slice(init, axes=[0, 1], starts=[i, d], ends=[i + 1, d + 1]),
                          axes=[0, 1])


def _last_step(x: Variable) -> Variable:
    """Fluid's ``x[-1]`` on a ``[time, ...]`` output: the last step, time axis dropped."""
    return tensor.squeeze(tensor.slice(x, axes=[0], starts=[-1], ends=[2 ** 31 - 1]),
                          axes=[0])


def _keep_past_end(new: Variable, pre: Variable, step_mask: Variable) -> Variable:
    # Fluid: new * mask - pre * (mask - 1): past a sequence's end the state is carried over
    return (nn.elementwise_mul(new, step_mask, axis=0)
            - nn.elementwise_mul(pre, step_mask - 1, axis=0))


def _time_major_mask(sequence_length: Variable | None, input: Variable,
                     dtype: str) -> Variable | None:
    if sequence_length is None:
        return None
    # Fluid: shape(input)[0], the number of time steps, as a tensor
    max_seq_len = tensor.slice(tensor.shape(input), axes=[0], starts=[0], ends=[1])
    # Fluid makes the mask float32; the model's dtype here so float64 models need no cast
    mask = sequence_lod.sequence_mask(sequence_length, maxlen=max_seq_len, dtype=dtype)
    return tensor.transpose(mask, [1, 0])


def _run_direction(rnn_input: Variable, mask: Variable | None, num_layers: int,
                   hidden_size: int, step: Callable, inits: list[Variable | None] | None,
                   n_states: int, dropout_prob: float | None,
                   dropout_implementation: str) -> tuple[Variable, list[Variable]]:
    """One direction of Fluid's ``get_single_direction_output``: a StaticRNN whose step runs
    the layers in turn (layer i's input is layer i-1's hidden state, dropped out). Returns
    the last layer's per-step output ``[time, batch, hidden]`` and, per state kind, the
    last-step states of all layers ``[num_layers, batch, hidden]``."""
    rnn = control_flow.StaticRNN()
    with rnn.step():
        step_input = rnn.step_input(rnn_input)
        step_mask = rnn.step_input(mask) if mask is not None else None
        for i in range(num_layers):
            if inits is not None:
                pre = [rnn.memory(init=inits[k][i]) for k in range(n_states)]
            else:
                pre = [rnn.memory(batch_ref=rnn_input, shape=[-1, hidden_size],
                                  ref_batch_dim_idx=1) for _ in range(n_states)]
            new = step(i, step_input, pre)
            if step_mask is not None:
                new = [_keep_past_end(n, p, step_mask) for n, p in zip(new, pre, strict=True)]
            for p, n in zip(pre, new, strict=True):
                rnn.update_memory(p, n)
            for n in new:
                rnn.step_output(n)
            step_input = new[0]
            if dropout_prob is not None and dropout_prob > 0.0:
                step_input = nn.dropout(step_input, dropout_prob=float(dropout_prob),
                                        dropout_implementation=dropout_implementation)
        rnn.step_output(step_input)
    rnn_out = rnn()
    lasts = []
    for k in range(n_states):
        per_layer = [_last_step(rnn_out[i * n_states + k]) for i in range(num_layers)]
        lasts.append(tensor.reshape(tensor.concat(per_layer, axis=0),
                                    shape=[num_layers, -1, hidden_size]))
    return rnn_out[-1], lasts


def _network(where: str, input: Variable, inits: list[Variable] | None, n_states: int,
             hidden_size: int, num_layers: int, sequence_length: Variable | None,
             dropout_prob: float | None, dropout_implementation: str, bidirectional: bool,
             batch_first: bool, make_units: Callable[[str, str], list],
             call_unit: Callable, dtype: str) -> tuple[Variable, list[Variable]]:
    """What basic_gru and basic_lstm share: units per direction, the layout transposes, the
    mask, the StaticRNN of each direction and the concatenation of the directions."""
    if not isinstance(bidirectional, bool):
        raise TypeError(f"{where}: bidirectional must be a bool, got {bidirectional!r}")
    if not isinstance(batch_first, bool):
        raise TypeError(f"{where}: batch_first must be a bool, got {batch_first!r}")
    fw_units = make_units("_layers_", "fw")
    bw_units = make_units("_reverse_layers_", "bw") if bidirectional else None
    if batch_first:
        input = tensor.transpose(input, [1, 0, 2])
    mask = _time_major_mask(sequence_length, input, dtype)
    direc_num = 2 if bidirectional else 1
    if inits is not None:
        inits = [tensor.reshape(s, shape=[num_layers, direc_num, -1, hidden_size])
                 for s in inits]

    def direction(rnn_input, units, dir_mask, d):
        per_layer = None
        if inits is not None:
            per_layer = [[_pick(s, i, d) for i in range(num_layers)] for s in inits]
        return _run_direction(rnn_input, dir_mask, num_layers, hidden_size,
                              lambda i, x, pre: call_unit(units[i], x, pre), per_layer,
                              n_states, dropout_prob, dropout_implementation)

    rnn_out, lasts = direction(input, fw_units, mask, 0)
    if bidirectional:
        # the backward direction runs over the time-reversed padded batch (padding first,
        # kept at the initial state by the reversed mask) and is flipped back
        bw_mask = tensor.reverse(mask, axis=[0]) if mask is not None else None
        bw_out, bw_lasts = direction(tensor.reverse(input, axis=[0]), bw_units, bw_mask, 1)
        bw_out = tensor.reverse(bw_out, axis=[0])
        rnn_out = tensor.concat([rnn_out, bw_out], axis=2)
        # [L, B, H] + [L, B, H] -> [L, 2B, H] -> [2L, B, H]: layer-major, forward first
        lasts = [tensor.reshape(tensor.concat([f, b], axis=1),
                                shape=[num_layers * direc_num, -1, hidden_size])
                 for f, b in zip(lasts, bw_lasts, strict=True)]
    if batch_first:
        rnn_out = tensor.transpose(rnn_out, [1, 0, 2])
    return rnn_out, lasts


def basic_gru(input: Variable, init_hidden: Variable | None, hidden_size: int,
              num_layers: int = 1, sequence_length: Variable | None = None,
              dropout_prob: float = 0.0, bidirectional: bool = False, batch_first: bool = True,
              param_attr: Any = None, bias_attr: Any = None,
              gate_activation: Callable | None = None, activation: Callable | None = None,
              dtype: str = "float32", name: str = "basic_gru") -> tuple[Variable, Variable]:
    """A multi-layer, optionally bidirectional GRU from basic operators (Fluid 1.8's
    ``contrib.layers.basic_gru``).

    Parameters
    ----------
    input : Variable
        ``[batch, time, size]`` (``batch_first``) or ``[time, batch, size]``.
    init_hidden : Variable or None
        ``[num_layers * directions, batch, hidden_size]`` (layer-major, forward first); None
        starts from zeros.
    hidden_size, num_layers : int
        Size of the hidden state; number of stacked layers (each direction stacks its own).
    sequence_length : Variable or None
        ``[batch]`` int lengths: past its length a sequence's hidden state is carried over
        unchanged (and repeated in ``rnn_out``), so ``last_hidden`` is the state at its last
        real step.
    dropout_prob : float
        Dropout (Fluid's default ``downgrade_in_infer``) on each layer's output before the
        next layer and on the returned output, not between time steps; off in a program
        cloned with ``for_test=True``.
    bidirectional, batch_first : bool
    param_attr, bias_attr : ParamAttr or None
        Shared by every unit when unnamed; a named one becomes ``<name>_fw_w_<i>``
        (``_bw_w_``, ``_fw_b_``, ``_bw_b_``) then ``_gate``/``_candidate``.
    gate_activation, activation : callable or None
        As :class:`BasicGRUUnit`.
    dtype : str
    name : str
        Units are named ``<name>_layers_<i>`` and ``<name>_reverse_layers_<i>``, so the
        parameters are ``<name>_layers_<i>/BasicGRUUnit_<k>.w_0`` etc.

    Returns
    -------
    rnn_out : Variable
        The last layer's hidden states, in the layout of ``input``, size ``hidden_size``
        (``2 * hidden_size`` bidirectional: forward then backward).
    last_hidden : Variable
        ``[num_layers * directions, batch, hidden_size]``.
    """
    where = "basic_gru"
    _check_common(where, input, hidden_size, num_layers, sequence_length, dropout_prob,
                  dtype, {"init_hidden": init_hidden})
    if not isinstance(name, str) or not name:
        raise TypeError(f"{where}: name must be a non-empty str, got {name!r}")
    param_attr = _check_attr(param_attr, "param_attr", where)
    bias_attr = _check_attr(bias_attr, "bias_attr", where)
    _check_act(gate_activation, "gate_activation", where)
    _check_act(activation, "activation", where)

    def make_units(infix: str, direc: str) -> list[BasicGRUUnit]:
        return [BasicGRUUnit(f"{name}{infix}{i}", hidden_size,
                             _layer_attr(param_attr, f"_{direc}_w_{i}"),
                             _layer_attr(bias_attr, f"_{direc}_b_{i}"),
                             gate_activation, activation, dtype)
                for i in range(num_layers)]

    rnn_out, (last_hidden,) = _network(
        where, input, None if init_hidden is None else [init_hidden], 1, hidden_size,
        num_layers, sequence_length, dropout_prob, "downgrade_in_infer", bidirectional,
        batch_first, make_units, lambda unit, x, pre: [unit(x, pre[0])], dtype)
    return rnn_out, last_hidden


def basic_lstm(input: Variable, init_hidden: Variable | None, init_cell: Variable | None,
               hidden_size: int, num_layers: int = 1, sequence_length: Variable | None = None,
               dropout_prob: float = 0.0, bidirectional: bool = False,
               batch_first: bool = True, param_attr: Any = None, bias_attr: Any = None,
               gate_activation: Callable | None = None, activation: Callable | None = None,
               forget_bias: float = 1.0, dtype: str = "float32",
               name: str = "basic_lstm") -> tuple[Variable, Variable, Variable]:
    """A multi-layer, optionally bidirectional LSTM from basic operators (Fluid 1.8's
    ``contrib.layers.basic_lstm``).

    Parameters
    ----------
    input : Variable
        ``[batch, time, size]`` (``batch_first``) or ``[time, batch, size]``.
    init_hidden, init_cell : Variable or None
        ``[num_layers * directions, batch, hidden_size]`` each, both or neither; None starts
        from zeros.
    hidden_size, num_layers, sequence_length, bidirectional, batch_first, dtype
        As :func:`basic_gru`; with ``sequence_length`` both the hidden and the cell state
        are carried over past a sequence's end.
    dropout_prob : float
        Dropout with ``dropout_implementation='upscale_in_train'`` (as Fluid's basic_lstm)
        on each layer's output before the next layer and on the returned output.
    param_attr, bias_attr : ParamAttr or None
        Shared by every unit when unnamed; a named one becomes ``<name>_fw_w_<i>`` etc. As
        Fluid 1.8, a backward unit whose ``bias_attr`` is unnamed gets ``param_attr`` as its
        bias attribute (Fluid's ``layer_bias_attr = param_attr`` there), so its initializer.
    gate_activation, activation : None
        Not implemented (see :class:`BasicLSTMUnit`): anything but None raises.
    forget_bias : float
    name : str
        Units are ``<name>_layers_<i>`` and ``<name>_reverse_layers_<i>``; parameters
        ``<name>_layers_<i>/BasicLSTMUnit_<k>.w_0`` and ``.b_0``.

    Returns
    -------
    rnn_out, last_hidden, last_cell : Variable
        As :func:`basic_gru`, plus the last cell states.
    """
    where = "basic_lstm"
    _check_common(where, input, hidden_size, num_layers, sequence_length, dropout_prob,
                  dtype, {"init_hidden": init_hidden, "init_cell": init_cell})
    if (init_hidden is None) != (init_cell is None):
        raise ValueError(f"{where}: init_hidden and init_cell must both be given or both be "
                         f"None, got init_hidden={init_hidden!r}, init_cell={init_cell!r}")
    if not isinstance(name, str) or not name:
        raise TypeError(f"{where}: name must be a non-empty str, got {name!r}")
    if gate_activation is not None or activation is not None:
        raise NotImplementedError(
            "basic_lstm(gate_activation=..., activation=...) is not implemented in "
            "dask_fluid (Fluid 1.8 accepts them but always uses sigmoid and tanh)")
    param_attr = _check_attr(param_attr, "param_attr", where)
    bias_attr = _check_attr(bias_attr, "bias_attr", where)
    if (bidirectional and param_attr is not None and param_attr.name is not None
            and (bias_attr is None or bias_attr.name is None)):
        # Fluid 1.8 would name every backward bias exactly param_attr.name (one shared
        # [4 hidden] parameter clashing with nothing it expects): refused, not guessed
        raise NotImplementedError(
            "basic_lstm(bidirectional=True, param_attr=<named>, bias_attr=<unnamed>) is not "
            "implemented in dask_fluid (Fluid 1.8 gives the backward biases param_attr's "
            "name); name bias_attr too")

    def make_units(infix: str, direc: str) -> list[BasicLSTMUnit]:
        units = []
        for i in range(num_layers):
            b_attr = _layer_attr(bias_attr, f"_{direc}_b_{i}")
            if direc == "bw" and (bias_attr is None or bias_attr.name is None):
                b_attr = param_attr  # Fluid 1.8's basic_lstm does exactly this
            units.append(BasicLSTMUnit(f"{name}{infix}{i}", hidden_size,
                                       param_attr=_layer_attr(param_attr, f"_{direc}_w_{i}"),
                                       bias_attr=b_attr, forget_bias=forget_bias,
                                       dtype=dtype))
        return units

    rnn_out, (last_hidden, last_cell) = _network(
        where, input, None if init_hidden is None else [init_hidden, init_cell], 2,
        hidden_size, num_layers, sequence_length, dropout_prob, "upscale_in_train",
        bidirectional, batch_first, make_units,
        lambda unit, x, pre: list(unit(x, pre[0], pre[1])), dtype)
    return rnn_out, last_hidden, last_cell
