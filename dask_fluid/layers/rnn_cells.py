"""Fluid 1.8's layers/rnn.py API: RNNCell, GRUCell, LSTMCell, rnn, and the decoding pieces
Decoder, DecodeHelper, TrainingHelper, GreedyEmbeddingHelper, SampleEmbeddingHelper,
BasicDecoder, BeamSearchDecoder and dynamic_decode (a ``While`` loop over the decoder's
steps, its outputs stacked from tensor arrays with ``tensor_array_to_tensor``).

The cells are built from basic layers (concat, matmul, elementwise_add, split, activations)
exactly as Fluid 1.8's ``contrib/layers/rnn_impl.py`` ``BasicGRUUnit``/``BasicLSTMUnit`` build
them, with the same parameter names, shapes and initializers; ``rnn`` unrolls a cell with a
``StaticRNN`` as Fluid 1.8's ``layers.rnn`` does.
"""

from __future__ import annotations

import collections
import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import unique_name
from ..framework import Variable, default_main_program
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from . import compare, control_flow, indexing, loops, nn, sampling, sequence_lod, tensor
from .utils import flatten, map_structure, pack_sequence_as

__all__: list[str] = ["RNNCell", "GRUCell", "LSTMCell", "rnn", "Decoder", "DecodeHelper",
                      "GreedyEmbeddingHelper", "SampleEmbeddingHelper", "BasicDecoder",
                      "TrainingHelper", "BeamSearchDecoder", "dynamic_decode", "gather_tree"]


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
        ref = flatten(batch_ref)[0]
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
        flat_dtypes = flatten(dtypes)
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
    step. With ``is_reverse`` the steps run from the last time step to the first (over the
    padded length: a shorter sequence's padding is visited first, its state kept there by
    the mask), and the outputs come back in the original time order."""
    if not isinstance(cell, RNNCell):
        raise TypeError(f"rnn: cell must be an RNNCell, got {type(cell).__name__}")
    if not isinstance(inputs, (Variable, list, tuple)):
        raise TypeError(f"rnn: inputs must be a Variable or a list/tuple of them, got "
                        f"{type(inputs).__name__}")
    for k, x in enumerate(flatten(inputs)):
        if not isinstance(x, Variable) or x.dtype not in ("float32", "float64"):
            raise TypeError(f"rnn: inputs[{k}] must be a float32/float64 Variable, got {x!r}")
    if initial_states is not None and not isinstance(initial_states, (Variable, list, tuple)):
        raise TypeError(f"rnn: initial_states must be a Variable, list, tuple or None, got "
                        f"{type(initial_states).__name__}")
    if sequence_length is not None and not isinstance(sequence_length, Variable):
        raise TypeError(f"rnn: sequence_length must be a Variable or None, got "
                        f"{type(sequence_length).__name__}")
    if initial_states is None:
        initial_states = cell.get_initial_states(batch_ref=inputs,
                                                 batch_dim_idx=1 if time_major else 0)

    def _switch_grad(x: Variable) -> Variable:
        # Fluid 1.8: the initial states take gradients (stop_gradient=False)
        x.stop_gradient = False
        return x

    initial_states = map_structure(_switch_grad, initial_states)
    if not time_major:
        inputs = map_structure(_transpose_batch_time, inputs)

    mask = None
    if sequence_length is not None:
        # Fluid: shape(inputs)[0], the number of time steps, as a tensor
        max_seq_len = tensor.slice(tensor.shape(flatten(inputs)[0]), axes=[0], starts=[0],
                                   ends=[1])
        mask = sequence_lod.sequence_mask(sequence_length, maxlen=max_seq_len,
                                          dtype=flatten(initial_states)[0].dtype)
        mask = tensor.transpose(mask, [1, 0])

    if is_reverse:
        # Fluid 1.8: the steps run last to first over the time-major inputs (and mask); the
        # outputs are flipped back below, the final states are those after step 0
        inputs = map_structure(lambda x: tensor.reverse(x, axis=[0]), inputs)
        mask = tensor.reverse(mask, axis=[0]) if mask is not None else None

    srnn = control_flow.StaticRNN()
    with srnn.step():
        step_inputs = map_structure(srnn.step_input, inputs)
        states = map_structure(lambda s: srnn.memory(init=s), initial_states)
        copy_states = map_structure(lambda x: x, states)
        outputs, new_states = cell(step_inputs, copy_states, **kwargs)
        if len(flatten(new_states)) != len(flatten(states)):
            raise ValueError(f"rnn: the cell returned {len(flatten(new_states))} states for "
                             f"{len(flatten(states))} initial states")
        if mask is not None:
            step_mask = srnn.step_input(mask)
            new_states = map_structure(
                lambda s, n: _maybe_copy(s, n, step_mask), states, new_states)
        map_structure(srnn.update_memory, states, new_states)
        flat_outputs = flatten(outputs)
        for o in flat_outputs:
            srnn.step_output(o)
        for s in flatten(new_states):
            srnn.step_output(s)

    rnn_out = srnn()
    rnn_out = rnn_out if isinstance(rnn_out, (list, tuple)) else [rnn_out]
    final_outputs = pack_sequence_as(outputs, list(rnn_out[:len(flat_outputs)]))

    # Fluid 1.8's x[-1]: one slice op with decrease_axis=[0], whose compile-time shape drops
    # the time axis even though its size is unknown (-1); a slice + squeeze2 would keep that
    # -1 axis, and a second rnn started from these states would step rank-3 states
    final_states = pack_sequence_as(new_states, [x[-1] for x in rnn_out[len(flat_outputs):]])
    if is_reverse:
        final_outputs = map_structure(lambda x: tensor.reverse(x, axis=[0]), final_outputs)
    if not time_major:
        final_outputs = map_structure(_transpose_batch_time, final_outputs)
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


class TrainingHelper(DecodeHelper):
    """Fluid 1.8's ``layers.TrainingHelper`` (teacher forcing): step ``t``'s input is step
    ``t`` of the full sequence ``inputs`` (``[batch, time, ...]``, or ``[time, batch, ...]``
    with ``time_major``); a sequence is finished once ``t + 1 >= sequence_length``; the
    sample is ``argmax(outputs)``.

    Fluid pads the time axis with one zero step (so the step after the last can be read) and
    reads step ``t + 1`` with a ``slice`` whose start is a tensor; dask_fluid's ``slice``
    takes int bounds only, so the (padded, time-major) inputs are read with ``gather`` on the
    time axis instead: the same values and gradients."""

    def __init__(self, inputs: Any, sequence_length: Variable, time_major: bool = False) -> None:
        for k, x in enumerate(flatten(inputs)):
            if not isinstance(x, Variable):
                raise TypeError(f"TrainingHelper: inputs[{k}] must be a Variable, got {x!r}")
        if not isinstance(sequence_length, Variable):
            raise TypeError(f"TrainingHelper: sequence_length must be a Variable ([batch] "
                            f"int), got {type(sequence_length).__name__}")
        self.inputs = inputs
        self.sequence_length = sequence_length
        self.time_major = time_major

        def _pad_time_major(x: Variable) -> Variable:
            x = x if time_major else _transpose_batch_time(x)
            return nn.pad(x, paddings=[0, 1] + [0, 0] * (len(x.shape) - 1))

        self.inputs_ = map_structure(_pad_time_major, inputs)

    def initialize(self) -> tuple[Any, Variable]:
        """``(step 0 of inputs, sequence_length == 0)``."""
        init_finished = tensor.equal(
            self.sequence_length,
            tensor.fill_constant(shape=[1], dtype=self.sequence_length.dtype, value=0))
        # Fluid 1.8's x[0] / x[:, 0]: a slice op with decrease_axis, which drops the time axis
        # from the compile-time shape even when its size is unknown (squeeze2 would keep it)
        init_inputs = map_structure(
            lambda x: x[0] if self.time_major else x[:, 0], self.inputs)
        return init_inputs, init_finished

    def sample(self, time: Variable, outputs: Variable, states: Any) -> Variable:
        """``argmax(outputs, axis=-1)``."""
        return tensor.argmax(outputs, axis=-1)

    def next_inputs(self, time: Variable, outputs: Variable, states: Any,
                    sample_ids: Variable) -> tuple[Variable, Any, Any]:
        """``(sequence_length <= t + 1, step t + 1 of inputs, states)``."""
        # Fluid compares in int32 (the time cast, the lengths cast to it)
        time = tensor.cast(time, "int32") if time.dtype != "int32" else time
        if self.sequence_length.dtype != time.dtype:
            self.sequence_length = tensor.cast(self.sequence_length, time.dtype)
        next_time = tensor.increment(time, 1.0, in_place=False)
        finished = compare.less_equal(self.sequence_length, next_time)
        next_inputs = map_structure(
            lambda x: tensor.squeeze(tensor.gather(x, next_time), axes=[0]), self.inputs_)
        return finished, next_inputs, states


def gather_tree(ids: Variable, parents: Variable) -> Variable:
    """The whole sequences of a beam search, walked back from the last step through the
    beams each step's ids came from (Fluid 1.8's ``layers.gather_tree``, what
    ``BeamSearchDecoder.finalize`` uses).

    Parameters
    ----------
    ids, parents : Variable
        ``[max_time, batch_size, beam_size]`` int32 or int64: each step's selected ids and the
        beam of the previous step each extends.

    Returns
    -------
    Variable
        ``[max_time, batch_size, beam_size]``, the dtype of ``ids``.
    """
    for arg, var in (("ids", ids), ("parents", parents)):
        if not isinstance(var, Variable):
            raise TypeError(f"gather_tree: {arg} must be a Variable, got {type(var).__name__}")
        if var.dtype not in ("int32", "int64"):
            raise TypeError(f"gather_tree: {arg} must be int32 or int64, got {var.dtype}")
    helper = LayerHelper("gather_tree")
    out = helper.create_tmp(dtype=ids.dtype, shape=ids.shape, stop_gradient=True)
    helper.append_op("gather_tree", inputs={"Ids": [ids], "Parents": [parents]},
                     outputs={"Out": [out]})
    return out


class BeamSearchDecoder(Decoder):
    """Fluid 1.8's ``layers.BeamSearchDecoder``: beam search over a cell, for
    :func:`dynamic_decode`. Each step runs the cell on the ``batch * beam`` rows, takes
    ``log(softmax(output_fn(outputs)))`` (finished beams put all their mass on
    ``end_token``), adds the beams' log probabilities and keeps the ``beam_size`` best of the
    ``beam * vocab`` candidates (``topk``); ``finalize`` backtracks with ``gather_tree``.

    Differences from Fluid 1.8, same values: the initial ids and log probabilities, built
    there with ``expand`` by a batch-size tensor, are built with
    ``fill_constant_batch_size_like``; the log probabilities take the dtype of the cell's
    states (Fluid: float32 always)."""

    class OutputWrapper(collections.namedtuple("OutputWrapper",
                                               ("scores", "predicted_ids", "parent_ids"))):
        """A step's outputs: scores, predicted_ids, parent_ids (``[batch, beam]`` each)."""

    class StateWrapper(collections.namedtuple(
            "StateWrapper", ("cell_states", "log_probs", "finished", "lengths"))):
        """The decoder's states: cell_states, log_probs, finished, lengths."""

    def __init__(self, cell: RNNCell, start_token: int, end_token: int, beam_size: int,
                 embedding_fn: Callable | None = None,
                 output_fn: Callable | None = None) -> None:
        if not callable(cell):
            raise TypeError(f"BeamSearchDecoder: cell must be an RNNCell, got {cell!r}")
        if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"BeamSearchDecoder: beam_size must be a positive int, got "
                             f"{beam_size!r}")
        for arg, fn in (("embedding_fn", embedding_fn), ("output_fn", output_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"BeamSearchDecoder: {arg} must be callable or None, got {fn!r}")
        self.cell = cell
        self.embedding_fn = embedding_fn
        self.output_fn = output_fn
        self.start_token = int(start_token)
        self.end_token = int(end_token)
        self.beam_size = beam_size

    @staticmethod
    def tile_beam_merge_with_batch(x: Variable, beam_size: int) -> Variable:
        """``[batch, ...]`` to ``[batch * beam_size, ...]``, each entry repeated
        ``beam_size`` times in a row (Fluid's unsqueeze/expand/transpose/reshape)."""
        x = tensor.unsqueeze(x, [1])  # [batch, 1, ...]
        expand_times = [1] * len(x.shape)
        expand_times[1] = beam_size
        x = tensor.expand(x, expand_times)  # [batch, beam, ...]
        x = tensor.transpose(x, list(range(2, len(x.shape))) + [0, 1])  # [..., batch, beam]
        x = tensor.reshape(x, shape=[0] * (len(x.shape) - 2) + [-1])  # [..., batch * beam]
        return tensor.transpose(x, [len(x.shape) - 1] + list(range(0, len(x.shape) - 1)))

    def _split_batch_beams(self, x: Variable) -> Variable:
        return tensor.reshape(x, shape=[-1, self.beam_size, *x.shape[1:]])

    def _merge_batch_beams(self, x: Variable) -> Variable:
        return tensor.reshape(x, shape=[-1, *x.shape[2:]])

    def _expand_to_beam_size(self, x: Variable) -> Variable:
        x = tensor.unsqueeze(x, [1])
        expand_times = [1] * len(x.shape)
        expand_times[1] = self.beam_size
        return tensor.expand(x, expand_times)

    def _mask_probs(self, probs: Variable, finished: Variable) -> Variable:
        """Finished beams: log probability 0 for end_token and -1e9 for the others;
        unfinished beams unchanged."""
        finished = tensor.cast(finished, dtype=probs.dtype)
        return nn.elementwise_sub(
            nn.elementwise_mul(tensor.expand(tensor.unsqueeze(finished, [2]),
                                             [1, 1, self.vocab_size]),
                               self.noend_mask_tensor, axis=-1),
            nn.elementwise_mul(probs, nn.scale(finished, 1.0, -1.0), axis=0))

    def _gather(self, x: Variable, indices: Variable, batch_size: Variable) -> Variable:
        """``x[b, indices[b, k]]`` for every batch entry b and beam k (gather_nd)."""
        if batch_size.dtype != indices.dtype:
            batch_size = tensor.cast(batch_size, indices.dtype)
        batch_pos = tensor.expand(
            tensor.unsqueeze(tensor.range(0, batch_size, 1, dtype=indices.dtype), [1]),
            [1, self.beam_size])
        coordinates = tensor.stack([batch_pos, indices], axis=2)
        return indexing.gather_nd(x, coordinates)

    def initialize(self, initial_cell_states: Any) -> tuple[Any, Any, Variable]:
        """``(start ids (or their embedding) [batch, beam], StateWrapper(tiled cell states,
        log_probs [0, -1e9, ...], finished False, lengths 0), finished)``."""
        self.kinf = 1e9
        state = flatten(initial_cell_states)[0]
        self.batch_size = tensor.slice(tensor.shape(state), axes=[0], starts=[0], ends=[1])
        self.start_token_tensor = tensor.fill_constant(shape=[1], dtype="int64",
                                                       value=self.start_token)
        self.end_token_tensor = tensor.fill_constant(shape=[1], dtype="int64",
                                                     value=self.end_token)
        init_cell_states = map_structure(self._expand_to_beam_size, initial_cell_states)
        init_inputs = tensor.fill_constant_batch_size_like(
            input=state, shape=[-1, self.beam_size], dtype="int64", value=self.start_token)
        dtype = state.dtype if state.dtype in ("float32", "float64") else "float32"
        first = tensor.cast(tensor.assign(
            np.array([[0.0] + [-self.kinf] * (self.beam_size - 1)],
                                      dtype="float32")), dtype)
        log_probs = nn.elementwise_add(
            tensor.fill_constant_batch_size_like(input=state, shape=[-1, self.beam_size],
                                                 dtype=dtype, value=0.0), first)
        init_finished = tensor.fill_constant_batch_size_like(
            input=state, shape=[-1, self.beam_size], dtype="bool", value=False,
            force_cpu=True)
        init_lengths = tensor.zeros_like(init_inputs)
        init_inputs = self.embedding_fn(init_inputs) if self.embedding_fn else init_inputs
        return init_inputs, self.StateWrapper(init_cell_states, log_probs, init_finished,
                                              init_lengths), init_finished

    def _beam_search_step(self, time: Variable, logits: Variable, next_cell_states: Any,
                          beam_state: Any) -> tuple[Any, Any]:
        self.vocab_size = logits.shape[-1]
        if self.vocab_size is None or self.vocab_size < 0:
            raise ValueError("BeamSearchDecoder: the vocabulary size (the last dim of the "
                             "output_fn'd cell outputs) must be known when building")
        self.vocab_size_tensor = tensor.fill_constant(shape=[1], dtype="int64",
                                                      value=self.vocab_size)
        noend = [-self.kinf] * self.vocab_size
        noend[self.end_token] = 0
        self.noend_mask_tensor = tensor.cast(
            tensor.assign(np.array(noend, "float32")), logits.dtype)
        step_log_probs = nn.log(nn.softmax(logits))
        step_log_probs = self._mask_probs(step_log_probs, beam_state.finished)
        log_probs = nn.elementwise_add(step_log_probs, beam_state.log_probs, axis=0)
        scores = tensor.reshape(log_probs, [-1, self.beam_size * self.vocab_size])
        topk_scores, topk_indices = nn.topk(scores, k=self.beam_size)
        beam_indices = nn.elementwise_floordiv(topk_indices, self.vocab_size_tensor)
        token_indices = nn.elementwise_mod(topk_indices, self.vocab_size_tensor)
        next_log_probs = self._gather(
            tensor.reshape(log_probs, [-1, self.beam_size * self.vocab_size]), topk_indices,
            self.batch_size)
        next_cell_states = map_structure(
            lambda x: self._gather(x, beam_indices, self.batch_size), next_cell_states)
        next_finished = self._gather(beam_state.finished, beam_indices, self.batch_size)
        next_lengths = self._gather(beam_state.lengths, beam_indices, self.batch_size)
        next_lengths = nn.elementwise_add(
            next_lengths, tensor.cast(tensor.logical_not(next_finished),
                                      beam_state.lengths.dtype))
        next_finished = tensor.logical_or(
            next_finished, tensor.equal(token_indices, self.end_token_tensor))
        return (self.OutputWrapper(topk_scores, token_indices, beam_indices),
                self.StateWrapper(next_cell_states, next_log_probs, next_finished,
                                  next_lengths))

    def step(self, time: Variable, inputs: Any, states: Any, **kwargs: Any) -> tuple:
        """``(OutputWrapper, StateWrapper, next_inputs, finished)`` of one beam step."""
        inputs = map_structure(self._merge_batch_beams, inputs)
        cell_states = map_structure(self._merge_batch_beams, states.cell_states)
        cell_outputs, next_cell_states = self.cell(inputs, cell_states, **kwargs)
        cell_outputs = map_structure(self._split_batch_beams, cell_outputs)
        next_cell_states = map_structure(self._split_batch_beams, next_cell_states)
        if self.output_fn is not None:
            cell_outputs = self.output_fn(cell_outputs)
        output, state = self._beam_search_step(time=time, logits=cell_outputs,
                                               next_cell_states=next_cell_states,
                                               beam_state=states)
        sample_ids = output.predicted_ids
        next_inputs = self.embedding_fn(sample_ids) if self.embedding_fn else sample_ids
        return output, state, next_inputs, state.finished

    def finalize(self, outputs: Any, final_states: Any, sequence_lengths: Variable) -> tuple:
        """``(gather_tree(predicted_ids, parent_ids) [time, batch, beam], final_states)``."""
        return gather_tree(outputs.predicted_ids, outputs.parent_ids), final_states

    @property
    def tracks_own_finished(self) -> bool:
        """True: beams are reordered each step, so the decoder keeps its own finished."""
        return True

    @property
    def output_dtype(self) -> Any:
        return self.OutputWrapper(scores="float32", predicted_ids="int64",
                                  parent_ids="int64")


def dynamic_decode(decoder: Decoder, inits: Any = None, max_step_num: int | None = None,
                   output_time_major: bool = False, impute_finished: bool = False,
                   is_test: bool = False, return_length: bool = False,
                   **kwargs: Any) -> tuple:
    """Run ``decoder.step`` in a ``While`` loop until every entry is finished or, with
    ``max_step_num``, the step count passes it (Fluid 1.8's ``layers.dynamic_decode``, its
    static-graph path).

    Each step's outputs are written to tensor arrays and stacked at the end with
    ``tensor_array_to_tensor(use_stack=True)``; ``finished`` is ORed over the steps (unless
    ``decoder.tracks_own_finished``) and ``sequence_lengths`` counts each entry's unfinished
    steps. Not ``is_test``: the inputs and states of every step are kept in tensor arrays
    (so the loop trains); ``is_test``: they are updated in place. ``impute_finished`` keeps
    the states of finished entries. As in Fluid, with ``max_step_num`` the loop continues
    while ``step <= max_step_num``, so at most ``max_step_num + 1`` steps run.

    Returns ``(final_outputs, final_states)``, plus ``sequence_lengths`` with
    ``return_length``; outputs ``[batch, time, ...]`` (``[time, batch, ...]`` with
    ``output_time_major``), after ``decoder.finalize`` when the decoder has one."""
    if not isinstance(decoder, Decoder):
        raise TypeError(f"dynamic_decode: decoder must be a Decoder, got "
                        f"{type(decoder).__name__}")
    if max_step_num is not None and (isinstance(max_step_num, bool)
                                     or not isinstance(max_step_num, int)):
        raise TypeError(f"dynamic_decode: max_step_num must be an int or None, got "
                        f"{max_step_num!r}")
    initial_inputs, initial_states, initial_finished = decoder.initialize(inits)
    global_inputs, global_states, global_finished = (
        initial_inputs, initial_states, initial_finished)
    global_finished.stop_gradient = True
    step_idx = tensor.fill_constant(shape=[1], dtype="int64", value=0)
    cond = tensor.logical_not(nn.reduce_all(initial_finished))
    if max_step_num is not None:
        max_step_num = tensor.fill_constant(shape=[1], dtype="int64", value=max_step_num)
    while_op = loops.While(cond, is_test=is_test)

    sequence_lengths = tensor.cast(tensor.zeros_like(initial_finished), "int64")
    sequence_lengths.stop_gradient = True

    if is_test:
        # in place: only the last step's inputs and states are kept
        inputs = map_structure(lambda x: x, initial_inputs)
        states = map_structure(lambda x: x, initial_states)
    else:
        # every step's inputs and states are kept in arrays, for the backward pass
        inputs_arrays = map_structure(lambda x: loops.array_write(x, step_idx),
                                       initial_inputs)
        states_arrays = map_structure(lambda x: loops.array_write(x, step_idx),
                                       initial_states)

    def _maybe_copy_finished(state: Variable, new_state: Variable,
                             step_mask: Variable) -> Variable:
        # Fluid 1.8: state * mask - new * (mask - 1), bools through float32
        state_dtype = state.dtype
        if state_dtype == "bool":
            state = tensor.cast(state, "float32")
            new_state = tensor.cast(new_state, "float32")
        if step_mask.dtype != state.dtype:
            step_mask = tensor.cast(step_mask, state.dtype)
            step_mask.stop_gradient = True
        new_state = nn.elementwise_sub(
            nn.elementwise_mul(state, step_mask, axis=0),
            nn.elementwise_mul(new_state, nn.scale(step_mask, 1.0, -1.0), axis=0))
        if state_dtype == "bool":
            new_state = tensor.cast(new_state, state_dtype)
        return new_state

    def _create_array_out_of_while(dtype: str) -> Variable:
        # the output arrays live in the enclosing block, created once the dtypes are known
        program = default_main_program()
        current = program.current_block_idx
        program.current_block_idx = program.current_block().parent_idx
        array = loops.create_array(dtype)
        program.current_block_idx = current
        return array

    with while_op.block():
        if not is_test:
            inputs = map_structure(lambda a: loops.array_read(a, step_idx), inputs_arrays)
            states = map_structure(lambda a: loops.array_read(a, step_idx), states_arrays)
        outputs, next_states, next_inputs, next_finished = decoder.step(
            step_idx, inputs, states, **kwargs)
        if not decoder.tracks_own_finished:
            # an entry once finished stays finished
            next_finished = tensor.logical_or(next_finished, global_finished)
            next_sequence_lengths = nn.elementwise_add(
                sequence_lengths,
                tensor.cast(tensor.logical_not(global_finished), sequence_lengths.dtype))
            if impute_finished:
                next_states = map_structure(
                    lambda x, y: _maybe_copy_finished(x, y, global_finished), states,
                    next_states)
        else:
            if not hasattr(next_states, "lengths"):
                warnings.warn("`next_states` has no `lengths` attribute, the returned "
                              "`sequence_lengths` would be all zeros.", stacklevel=2)
            next_sequence_lengths = getattr(next_states, "lengths", sequence_lengths)

        outputs_arrays = map_structure(lambda x: _create_array_out_of_while(x.dtype),
                                        outputs)
        map_structure(lambda x, a: loops.array_write(x, i=step_idx, array=a), outputs,
                       outputs_arrays)
        tensor.increment(x=step_idx, value=1.0, in_place=True)
        # finished first: it may also be one of the decoder's states
        tensor.assign(next_finished, global_finished)
        tensor.assign(next_sequence_lengths, sequence_lengths)
        if is_test:
            map_structure(tensor.assign, next_inputs, global_inputs)
            map_structure(tensor.assign, next_states, global_states)
        else:
            map_structure(lambda x, a: loops.array_write(x, i=step_idx, array=a),
                           next_inputs, inputs_arrays)
            map_structure(lambda x, a: loops.array_write(x, i=step_idx, array=a),
                           next_states, states_arrays)
        if max_step_num is not None:
            tensor.logical_and(tensor.logical_not(nn.reduce_all(global_finished)),
                               compare.less_equal(step_idx, max_step_num), cond)
        else:
            tensor.logical_not(nn.reduce_all(global_finished), cond)

    final_outputs = map_structure(
        lambda a: control_flow.tensor_array_to_tensor(a, axis=0, use_stack=True)[0],
        outputs_arrays)
    if is_test:
        final_states = global_states
    else:
        final_states = map_structure(lambda a: loops.array_read(a, step_idx), states_arrays)
    try:
        final_outputs, final_states = decoder.finalize(final_outputs, final_states,
                                                       sequence_lengths)
    except NotImplementedError:
        pass
    if not output_time_major:
        final_outputs = map_structure(_transpose_batch_time, final_outputs)
    if return_length:
        return final_outputs, final_states, sequence_lengths
    return final_outputs, final_states
