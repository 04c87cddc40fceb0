"""Fluid 1.8's layers/rnn.py API: RNNCell, GRUCell, LSTMCell, rnn, and the decoding pieces
Decoder, DecodeHelper, GreedyEmbeddingHelper, SampleEmbeddingHelper and BasicDecoder.

The cells are built from basic layers (concat, matmul, elementwise_add, split, activations)
exactly as Fluid 1.8's ``contrib/layers/rnn_impl.py`` ``BasicGRUUnit``/``BasicLSTMUnit`` build
them, with the same parameter names, shapes and initializers; ``rnn`` unrolls a cell with a
``StaticRNN`` as Fluid 1.8's ``layers.rnn`` does.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Sequence
from typing import Any

from .. import unique_name
from ..framework import Variable
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from . import control_flow, nn, sampling, sequence_lod, tensor

__all__: list[str] = ["RNNCell", "GRUCell", "LSTMCell", "rnn", "Decoder", "DecodeHelper",
                      "GreedyEmbeddingHelper", "SampleEmbeddingHelper", "BasicDecoder"]


# -- nested structures (Fluid 1.8's layers/utils.py map_structure & co) --------------------

def _is_sequence(x: Any) -> bool:
    return isinstance(x, (list, tuple, dict))


def _flatten(x: Any) -> list:
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in _flatten(x[k])]
    if isinstance(x, (list, tuple)):
        return [y for e in x for y in _flatten(e)]
    return [x]


def _pack_sequence_as(structure: Any, flat: Sequence[Any]) -> Any:
    it = iter(flat)

    def pack(s: Any) -> Any:
        if isinstance(s, dict):
            return {k: pack(s[k]) for k in sorted(s)}
        if isinstance(s, (list, tuple)):
            return type(s)(pack(e) for e in s)
        return next(it)

    return pack(structure)


def _map_structure(fn: Callable, *structures: Any) -> Any:
    flats = [_flatten(s) for s in structures]
    for s, f in zip(structures[1:], flats[1:], strict=True):
        if len(f) != len(flats[0]):
            raise ValueError(f"structures do not match: {structures[0]!r} and {s!r}")
    return _pack_sequence_as(structures[0], [fn(*args) for args in zip(*flats, strict=True)])


def _sigmoid(x: Variable) -> Variable:
    return nn.sigmoid(x)


def _tanh(x: Variable) -> Variable:
    return nn.tanh(x)


# -- the cells ------------------------------------------------------------------------------

class RNNCell:
    """Base class of the cells ``rnn`` and the decoders step (Fluid 1.8's ``layers.RNNCell``).

    A subclass implements ``call(inputs, states, **kwargs) -> (outputs, new_states)`` and,
    for ``get_initial_states`` without explicit shapes, the ``state_shape`` property (and
    optionally ``state_dtype``; float32 when it is not implemented)."""

    def call(self, inputs: Any, states: Any, **kwargs: Any) -> tuple[Any, Any]:
        raise NotImplementedError("RNNCell.call must be implemented by the cell")

    def __call__(self, inputs: Any, states: Any, **kwargs: Any) -> tuple[Any, Any]:
        return self.call(inputs, states, **kwargs)

    def get_initial_states(self, batch_ref: Any, shape: Any = None, dtype: Any = None,
                           init_value: float = 0.0, batch_dim_idx: int = 0) -> Any:
        """Tensors of ``init_value`` with the structure of ``shape`` (default
        ``self.state_shape``), each ``[batch] + shape`` where batch is dim ``batch_dim_idx``
        of the first tensor of ``batch_ref`` (``fill_constant_batch_size_like``, as Fluid
        1.8). A shape given with a leading -1 keeps it as the batch dim."""
        ref = _flatten(batch_ref)[0]
        if not isinstance(ref, Variable):
            raise TypeError(f"get_initial_states: batch_ref must hold Variables, got "
                            f"{type(ref).__name__}")
        shapes = self.state_shape if shape is None else shape

        # a shape is a list of ints: it is a leaf of the nested structure, not a sequence
        def is_shape(s: Any) -> bool:
            return isinstance(s, (list, tuple)) and all(isinstance(d, int) for d in s)

        def leaves(s: Any) -> list:
            if is_shape(s):
                return [list(s) if s and s[0] == -1 else [-1, *s]]
            if isinstance(s, (list, tuple)):
                return [y for e in s for y in leaves(e)]
            raise TypeError(f"get_initial_states: shape must be a (nested) list of int lists, "
                            f"got {s!r}")

        def pack(s: Any, it: Any) -> Any:
            if is_shape(s):
                return next(it)
            return type(s)(pack(e, it) for e in s)

        flat_shapes = leaves(shapes)
        try:
            dtypes = self.state_dtype if dtype is None else dtype
        except NotImplementedError:  # Fluid's default when the cell names no dtype
            dtypes = "float32"
        flat_dtypes = _flatten(dtypes)
        if len(flat_dtypes) == 1:
            flat_dtypes = flat_dtypes * len(flat_shapes)
        if len(flat_dtypes) != len(flat_shapes):
            raise ValueError(f"get_initial_states: {len(flat_dtypes)} dtypes for "
                             f"{len(flat_shapes)} state shapes")
        flat = [tensor.fill_constant_batch_size_like(input=ref, shape=s, dtype=d,
                                                     value=init_value,
                                                     input_dim_idx=batch_dim_idx)
                for s, d in zip(flat_shapes, flat_dtypes, strict=True)]
        return pack(shapes, iter(flat))

    @property
    def state_shape(self) -> Any:
        raise NotImplementedError("Please add implementaion for `state_shape` in the used cell.")

    @property
    def state_dtype(self) -> Any:
        raise NotImplementedError("Please add implementaion for `state_dtype` in the used cell.")


def _suffixed(attr: Any, suffix: str) -> Any:
    """Fluid's BasicGRUUnit: a named ParamAttr gives two parameters, name_gate and
    name_candidate; an unnamed one is shared as is (the names are then generated)."""
    attr = ParamAttr._to_attr(attr)
    if attr is False:
        raise NotImplementedError("GRUCell(param_attr=False / bias_attr=False) is not "
                                  "implemented in dask_fluid")
    if attr.name is None:
        return attr
    attr = copy.deepcopy(attr)
    attr.name += suffix
    return attr


def _check_act(act: Any, arg: str, cell: str) -> Callable:
    if act is not None and not callable(act):
        raise TypeError(f"{cell}: {arg} must be a callable layer function or None, got {act!r}")
    return act


class GRUCell(RNNCell):
    """Fluid 1.8's ``layers.GRUCell`` (its ``BasicGRUUnit``)::

        r, u = split(gate_act([x, h] @ W_gate + b_gate), 2)
        c = act([x, r * h] @ W_cand + b_cand)
        h' = u * h + (1 - u) * c

    Parameters ``<name>/BasicGRUUnit_<k>.w_0`` ([in + hidden, 2 hidden], gate),
    ``.w_1`` ([in + hidden, hidden], candidate), ``.b_0``, ``.b_1``; created at the first
    call (the input size is read then). Xavier weights and zero biases by default."""

    def __init__(self, hidden_size: int, param_attr: Any = None, bias_attr: Any = None,
                 gate_activation: Callable | None = None, activation: Callable | None = None,
                 dtype: str = "float32", name: str = "GRUCell") -> None:
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"GRUCell: hidden_size must be a positive int, got {hidden_size!r}")
        self.hidden_size = hidden_size
        self._param_attr, self._bias_attr = param_attr, bias_attr
        self._gate_activation = _check_act(gate_activation, "gate_activation", "GRUCell") \
            or _sigmoid
        self._activation = _check_act(activation, "activation", "GRUCell") or _tanh
        self._dtype = dtype
        self._full_name = unique_name.generate(f"{name}/BasicGRUUnit")
        self._built = False

    def _build(self, input_size: int) -> None:
        helper = LayerHelper("basic_gru_unit", name=self._full_name)
        h, d = self.hidden_size, input_size
        self._gate_weight = helper.create_parameter(
            _suffixed(self._param_attr, "_gate"), [d + h, 2 * h], self._dtype)
        self._candidate_weight = helper.create_parameter(
            _suffixed(self._param_attr, "_candidate"), [d + h, h], self._dtype)
        self._gate_bias = helper.create_parameter(
            _suffixed(self._bias_attr, "_gate"), [2 * h], self._dtype, is_bias=True)
        self._candidate_bias = helper.create_parameter(
            _suffixed(self._bias_attr, "_candidate"), [h], self._dtype, is_bias=True)
        self._built = True

    def call(self, inputs: Variable, states: Variable) -> tuple[Variable, Variable]:
        """One step: ``(new_hidden, new_hidden)``."""
        if not isinstance(inputs, Variable) or not isinstance(states, Variable):
            raise TypeError("GRUCell: inputs and states must be Variables, got "
                            f"{type(inputs).__name__} and {type(states).__name__}")
        if not self._built:
            if inputs.shape[-1] <= 0:
                raise ValueError(f"GRUCell: the input's last dim must be known, got shape "
                                 f"{inputs.shape}")
            self._build(inputs.shape[-1])
        pre_hidden = states
        gate_input = nn.matmul(tensor.concat([inputs, pre_hidden], 1), self._gate_weight)
        gate_input = nn.elementwise_add(gate_input, self._gate_bias)
        gate_input = self._gate_activation(gate_input)
        r, u = tensor.split(gate_input, num_or_sections=2, dim=1)
        r_hidden = nn.elementwise_mul(r, pre_hidden)
        candidate = nn.matmul(tensor.concat([inputs, r_hidden], 1), self._candidate_weight)
        candidate = nn.elementwise_add(candidate, self._candidate_bias)
        c = self._activation(candidate)
        # Fluid's ``1 - u`` is a scale op (scale=-1, bias=1)
        new_hidden = nn.elementwise_add(nn.elementwise_mul(u, pre_hidden),
                                        nn.elementwise_mul(nn.scale(u, -1.0, 1.0), c))
        return new_hidden, new_hidden

    @property
    def state_shape(self) -> list[int]:
        return [self.hidden_size]


class LSTMCell(RNNCell):
    """Fluid 1.8's ``layers.LSTMCell`` (its ``BasicLSTMUnit``)::

        i, j, f, o = split([x, h] @ W + b, 4)
        c' = c * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j)
        h' = tanh(c') * sigmoid(o)

    Parameters ``<name>/BasicLSTMUnit_<k>.w_0`` ([in + hidden, 4 hidden]) and ``.b_0``
    ([4 hidden]), created at the first call. As in Fluid 1.8, ``forward`` uses sigmoid and
    tanh whatever ``gate_activation``/``activation`` say (1.8 stores them but never calls
    them); here passing either raises ``NotImplementedError`` rather than being ignored.
    States are ``[hidden, cell]``."""

    def __init__(self, hidden_size: int, param_attr: Any = None, bias_attr: Any = None,
                 gate_activation: Callable | None = None, activation: Callable | None = None,
                 forget_bias: float = 1.0, dtype: str = "float32",
                 name: str = "LSTMCell") -> None:
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"LSTMCell: hidden_size must be a positive int, got "
                             f"{hidden_size!r}")
        if gate_activation is not None or activation is not None:
            raise NotImplementedError("LSTMCell(gate_activation=..., activation=...) is not "
                                      "implemented in dask_fluid (Fluid 1.8 ignores them)")
        if ParamAttr._to_attr(param_attr) is False or ParamAttr._to_attr(bias_attr) is False:
            raise NotImplementedError("LSTMCell(param_attr=False / bias_attr=False) is not "
                                      "implemented in dask_fluid")
        self.hidden_size = hidden_size
        self._param_attr, self._bias_attr = param_attr, bias_attr
        self._dtype = dtype
        self._full_name = unique_name.generate(f"{name}/BasicLSTMUnit")
        # Fluid creates the forget bias as a trainable-looking fill_constant where the cell
        # is constructed
        self._forget_bias = tensor.fill_constant([1], dtype=dtype, value=float(forget_bias))
        self._forget_bias.stop_gradient = False
        self._built = False

    def _build(self, input_size: int) -> None:
        helper = LayerHelper("basic_lstm_unit", name=self._full_name)
        h = self.hidden_size
        self._weight = helper.create_parameter(ParamAttr._to_attr(self._param_attr),
                                               [input_size + h, 4 * h], self._dtype)
        self._bias = helper.create_parameter(ParamAttr._to_attr(self._bias_attr), [4 * h],
                                             self._dtype, is_bias=True)
        self._built = True

    def call(self, inputs: Variable, states: Sequence[Variable]
             ) -> tuple[Variable, list[Variable]]:
        """One step: ``(new_hidden, [new_hidden, new_cell])``."""
        if not isinstance(inputs, Variable):
            raise TypeError(f"LSTMCell: inputs must be a Variable, got {type(inputs).__name__}")
        if not isinstance(states, (list, tuple)) or len(states) != 2:
            raise TypeError(f"LSTMCell: states must be [hidden, cell], got {states!r}")
        if not self._built:
            if inputs.shape[-1] <= 0:
                raise ValueError(f"LSTMCell: the input's last dim must be known, got shape "
                                 f"{inputs.shape}")
            self._build(inputs.shape[-1])
        pre_hidden, pre_cell = states
        gate_input = nn.matmul(tensor.concat([inputs, pre_hidden], 1), self._weight)
        gate_input = nn.elementwise_add(gate_input, self._bias)
        i, j, f, o = tensor.split(gate_input, num_or_sections=4, dim=-1)
        new_cell = nn.elementwise_add(
            nn.elementwise_mul(pre_cell, _sigmoid(nn.elementwise_add(f, self._forget_bias))),
            nn.elementwise_mul(_sigmoid(i), _tanh(j)))
        new_hidden = nn.elementwise_mul(_tanh(new_cell), _sigmoid(o))
        return new_hidden, [new_hidden, new_cell]

    @property
    def state_shape(self) -> list[list[int]]:
        return [[self.hidden_size], [self.hidden_size]]


# -- rnn ------------------------------------------------------------------------------------

def _transpose_batch_time(x: Variable) -> Variable:
    return tensor.transpose(x, [1, 0, *range(2, len(x.shape))])


def _maybe_copy(state: Variable, new_state: Variable, step_mask: Variable) -> Variable:
    # Fluid 1.8: new * mask - state * (mask - 1): past a sequence's end its state is kept
    return nn.elementwise_sub(nn.elementwise_mul(new_state, step_mask, axis=0),
                              nn.elementwise_mul(state, nn.scale(step_mask, 1.0, -1.0), axis=0))


def rnn(cell: RNNCell, inputs: Any, initial_states: Any = None,
        sequence_length: Variable | None = None, time_major: bool = False,
        is_reverse: bool = False, **kwargs: Any) -> tuple[Any, Any]:
    """Run ``cell`` over the time steps of ``inputs`` (Fluid 1.8's ``layers.rnn``), unrolled
    by a ``StaticRNN``.

    ``inputs`` (a Variable or nested structure) is ``[batch, time, ...]`` or, with
    ``time_major``, ``[time, batch, ...]``. ``initial_states`` defaults to
    ``cell.get_initial_states(inputs)``. With ``sequence_length`` ([batch] int), a sequence's
    states stop changing past its length (``new * m - old * (m - 1)``, as 1.8); its outputs
    there are still the cell's outputs (1.8 does not zero them). Returns ``(outputs,
    final_states)``: outputs in the layout of ``inputs``, final states as after the last
    step."""
    if not isinstance(cell, RNNCell):
        raise TypeError(f"rnn: cell must be an RNNCell, got {type(cell).__name__}")
    if not isinstance(inputs, (Variable, list, tuple)):
        raise TypeError(f"rnn: inputs must be a Variable or a list/tuple of them, got "
                        f"{type(inputs).__name__}")
    for k, x in enumerate(_flatten(inputs)):
        if not isinstance(x, Variable) or x.dtype not in ("float32", "float64"):
            raise TypeError(f"rnn: inputs[{k}] must be a float32/float64 Variable, got {x!r}")
    if initial_states is not None and not isinstance(initial_states, (Variable, list, tuple)):
        raise TypeError(f"rnn: initial_states must be a Variable, list, tuple or None, got "
                        f"{type(initial_states).__name__}")
    if sequence_length is not None and not isinstance(sequence_length, Variable):
        raise TypeError(f"rnn: sequence_length must be a Variable or None, got "
                        f"{type(sequence_length).__name__}")
    if is_reverse:
        # Fluid reverses the time axis with the reverse op, which dask_fluid lacks
        raise NotImplementedError("rnn(is_reverse=True) is not implemented in dask_fluid")

    if initial_states is None:
        initial_states = cell.get_initial_states(batch_ref=inputs,
                                                 batch_dim_idx=1 if time_major else 0)

    def _switch_grad(x: Variable) -> Variable:
        # Fluid 1.8: the initial states take gradients (stop_gradient=False)
        x.stop_gradient = False
        return x

    initial_states = _map_structure(_switch_grad, initial_states)
    if not time_major:
        inputs = _map_structure(_transpose_batch_time, inputs)

    mask = None
    if sequence_length is not None:
        # Fluid: shape(inputs)[0], the number of time steps, as a tensor
        max_seq_len = tensor.slice(tensor.shape(_flatten(inputs)[0]), axes=[0], starts=[0],
                                   ends=[1])
        mask = sequence_lod.sequence_mask(sequence_length, maxlen=max_seq_len,
                                          dtype=_flatten(initial_states)[0].dtype)
        mask = tensor.transpose(mask, [1, 0])

    srnn = control_flow.StaticRNN()
    with srnn.step():
        step_inputs = _map_structure(srnn.step_input, inputs)
        states = _map_structure(lambda s: srnn.memory(init=s), initial_states)
        copy_states = _map_structure(lambda x: x, states)
        outputs, new_states = cell(step_inputs, copy_states, **kwargs)
        if len(_flatten(new_states)) != len(_flatten(states)):
            raise ValueError(f"rnn: the cell returned {len(_flatten(new_states))} states for "
                             f"{len(_flatten(states))} initial states")
        if mask is not None:
            step_mask = srnn.step_input(mask)
            new_states = _map_structure(
                lambda s, n: _maybe_copy(s, n, step_mask), states, new_states)
        _map_structure(srnn.update_memory, states, new_states)
        flat_outputs = _flatten(outputs)
        for o in flat_outputs:
            srnn.step_output(o)
        for s in _flatten(new_states):
            srnn.step_output(s)

    rnn_out = srnn()
    rnn_out = rnn_out if isinstance(rnn_out, (list, tuple)) else [rnn_out]
    final_outputs = _pack_sequence_as(outputs, list(rnn_out[:len(flat_outputs)]))

    def last(x: Variable) -> Variable:
        # Fluid's x[-1]: a slice of the last step with the time axis dropped
        return tensor.squeeze(tensor.slice(x, axes=[0], starts=[-1], ends=[2 ** 31 - 1]),
                              axes=[0])

    final_states = _pack_sequence_as(new_states,
                                     [last(x) for x in rnn_out[len(flat_outputs):]])
    if not time_major:
        final_outputs = _map_structure(_transpose_batch_time, final_outputs)
    return final_outputs, final_states


# -- decoding -------------------------------------------------------------------------------

class Decoder:
    """Base class of the decoders (Fluid 1.8's ``layers.Decoder``): ``initialize(inits) ->
    (initial_inputs, initial_states, finished)``, ``step(time, inputs, states, **kwargs) ->
    (outputs, next_states, next_inputs, finished)`` and optionally ``finalize(outputs,
    final_states, sequence_lengths)``."""

    def initialize(self, inits: Any) -> tuple[Any, Any, Variable]:
        raise NotImplementedError("Decoder.initialize must be implemented by the decoder")

    def step(self, time: Variable, inputs: Any, states: Any, **kwargs: Any) -> tuple:
        raise NotImplementedError("Decoder.step must be implemented by the decoder")

    def finalize(self, outputs: Any, final_states: Any, sequence_lengths: Variable) -> tuple:
        raise NotImplementedError("Decoder.finalize is not implemented by this decoder")

    @property
    def tracks_own_finished(self) -> bool:
        """False: a decoding loop ORs the step's ``finished`` with the finished so far."""
        return False


class DecodeHelper:
    """Base class of ``BasicDecoder``'s helpers (Fluid 1.8's ``layers.DecodeHelper``):
    ``initialize() -> (initial_inputs, initial_finished)``, ``sample(time, outputs, states)
    -> sample_ids`` and ``next_inputs(time, outputs, states, sample_ids) -> (finished,
    next_inputs, next_states)``."""

    def initialize(self) -> tuple[Any, Variable]:
        raise NotImplementedError("DecodeHelper.initialize must be implemented by the helper")

    def sample(self, time: Variable, outputs: Variable, states: Any) -> Variable:
        raise NotImplementedError("DecodeHelper.sample must be implemented by the helper")

    def next_inputs(self, time: Variable, outputs: Variable, states: Any,
                    sample_ids: Variable) -> tuple[Variable, Any, Any]:
        raise NotImplementedError("DecodeHelper.next_inputs must be implemented by the helper")


class GreedyEmbeddingHelper(DecodeHelper):
    """Fluid 1.8's ``layers.GreedyEmbeddingHelper``: the argmax of the outputs (logits) is the
    sample; its embedding (``embedding_fn``) is the next input; a sequence is finished when
    it samples ``end_token``. ``start_tokens`` is an int64 ``[batch]`` tensor."""

    def __init__(self, embedding_fn: Callable, start_tokens: Variable, end_token: int) -> None:
        if not callable(embedding_fn):
            raise TypeError(f"GreedyEmbeddingHelper: embedding_fn must be callable, got "
                            f"{embedding_fn!r}")
        if not isinstance(start_tokens, Variable):
            raise TypeError(f"GreedyEmbeddingHelper: start_tokens must be a Variable "
                            f"(int64 [batch]), got {type(start_tokens).__name__}")
        self.embedding_fn = embedding_fn
        self.start_tokens = start_tokens
        self.end_token = tensor.fill_constant(shape=[1], dtype="int64", value=int(end_token))

    def initialize(self) -> tuple[Any, Variable]:
        """``(embedding_fn(start_tokens), all-False [batch] bool)``."""
        init_finished = tensor.fill_constant_batch_size_like(
            input=self.start_tokens, shape=[-1], dtype="bool", value=False, force_cpu=True)
        return self.embedding_fn(self.start_tokens), init_finished

    def sample(self, time: Variable, outputs: Variable, states: Any) -> Variable:
        """``argmax(outputs, axis=-1)`` (int64 ``[batch]``)."""
        return tensor.argmax(outputs, axis=-1)

    def next_inputs(self, time: Variable, outputs: Variable, states: Any,
                    sample_ids: Variable) -> tuple[Variable, Any, Any]:
        """``(sample_ids == end_token, embedding_fn(sample_ids), states)``."""
        finished = tensor.equal(sample_ids, self.end_token)
        return finished, self.embedding_fn(sample_ids), states


class SampleEmbeddingHelper(GreedyEmbeddingHelper):
    """Fluid 1.8's ``layers.SampleEmbeddingHelper``: as ``GreedyEmbeddingHelper`` but the
    sample is drawn (``sampling_id``) from ``softmax(outputs / softmax_temperature)``."""

    def __init__(self, embedding_fn: Callable, start_tokens: Variable, end_token: int,
                 softmax_temperature: float | None = None, seed: int | None = None) -> None:
        super().__init__(embedding_fn, start_tokens, end_token)
        if softmax_temperature is not None and not softmax_temperature > 0:
            raise ValueError(f"SampleEmbeddingHelper: softmax_temperature must be > 0, got "
                             f"{softmax_temperature!r}")
        self.softmax_temperature = (
            tensor.fill_constant(shape=[1], dtype="float32", value=float(softmax_temperature))
            if softmax_temperature is not None else None)
        self.seed = seed

    def sample(self, time: Variable, outputs: Variable, states: Any) -> Variable:
        """One id per row drawn from ``softmax(outputs / T)`` (dtype of ``start_tokens``)."""
        logits = outputs
        if self.softmax_temperature is not None:
            temp = self.softmax_temperature
            if temp.dtype != outputs.dtype:
                temp = tensor.cast(temp, outputs.dtype)
            logits = nn.elementwise_div(outputs, temp)
        probs = nn.softmax(logits)
        # sampling_id has no gradient op, as in Fluid
        probs.stop_gradient = True
        # seed None is Fluid's "not fixed", the op's seed 0. Fluid asks sampling_id for ids of
        # start_tokens' dtype directly; dask_fluid's sampling_id layer only takes float dtypes,
        # so the ids come as floats and are cast (same values)
        ids = sampling.sampling_id(probs, seed=0 if self.seed is None else int(self.seed),
                                   dtype=probs.dtype)
        return tensor.cast(ids, self.start_tokens.dtype)


class BasicDecoder(Decoder):
    """Fluid 1.8's ``layers.BasicDecoder``: a cell and a ``DecodeHelper``. One step runs the
    cell, applies ``output_fn`` to its output, samples ids with the helper and lets the
    helper give the next inputs, states and finished flags."""

    class OutputWrapper(collections.namedtuple("OutputWrapper",
                                               ("cell_outputs", "sample_ids"))):
        """What ``step`` returns as outputs: the (output_fn'd) cell outputs and the ids."""

    def __init__(self, cell: RNNCell, helper: DecodeHelper,
                 output_fn: Callable | None = None) -> None:
        if not callable(cell):
            raise TypeError(f"BasicDecoder: cell must be an RNNCell, got {cell!r}")
        if not isinstance(helper, DecodeHelper):
            raise TypeError(f"BasicDecoder: helper must be a DecodeHelper, got "
                            f"{type(helper).__name__}")
        if output_fn is not None and not callable(output_fn):
            raise TypeError(f"BasicDecoder: output_fn must be callable or None, got "
                            f"{output_fn!r}")
        self.cell, self.helper, self.output_fn = cell, helper, output_fn

    def initialize(self, initial_cell_states: Any) -> tuple[Any, Any, Variable]:
        """``(helper's initial inputs, initial_cell_states, helper's initial finished)``."""
        initial_inputs, initial_finished = self.helper.initialize()
        return initial_inputs, initial_cell_states, initial_finished

    def step(self, time: Variable, inputs: Any, states: Any, **kwargs: Any) -> tuple:
        """``(OutputWrapper(cell_outputs, sample_ids), next_states, next_inputs,
        finished)``."""
        cell_outputs, cell_states = self.cell(inputs, states, **kwargs)
        if self.output_fn is not None:
            cell_outputs = self.output_fn(cell_outputs)
        sample_ids = self.helper.sample(time=time, outputs=cell_outputs, states=cell_states)
        sample_ids.stop_gradient = True
        finished, next_inputs, next_states = self.helper.next_inputs(
            time=time, outputs=cell_outputs, states=cell_states, sample_ids=sample_ids)
        return self.OutputWrapper(cell_outputs, sample_ids), next_states, next_inputs, finished
