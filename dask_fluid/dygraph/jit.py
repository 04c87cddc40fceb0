"""``fluid.dygraph.jit``: a dygraph layer traced into a static program (``TracedLayer``).

``TracedLayer.trace(layer, inputs)`` runs the layer once and copies every op it runs into a
Program (named as Fluid 1.8's tracer names it: ``feed_0``, ``fetch_0``, ``t_0``, ...) that
shares the layer's parameters: the program runs on the executor (``static_layer(inputs)``)
with their current values and saves as an inference model that ``fluid.io`` loads, as in
Fluid 1.8. The source translator (``declarative``, ``ProgramTranslator``, ``save``/``load``)
is :mod:`.dygraph_to_static`; this module gathers Fluid 1.8's ``fluid.dygraph.jit`` names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..compiler import CompiledProgram
from ..executor import Executor, Scope, scope_guard
from ..framework import (
    EMPTY_VAR,
    Program,
    _dygraph_tracer,
    _dygraph_tracer_guard,
    in_dygraph_mode,
)
from ..inference_model import save_inference_model
from .dygraph_to_static.ast_transform import set_code_level, set_verbosity
from .dygraph_to_static.program_translator import ProgramTranslator, declarative
from .dygraph_to_static.saving import SaveLoadConfig, TranslatedLayer, load, save
from .layers import Layer
from .varbase import VarBase, var_list

__all__ = ["ProgramTranslator", "SaveLoadConfig", "TracedLayer", "TranslatedLayer",
           "declarative", "dygraph_to_static_func", "load", "save", "set_code_level",
           "set_verbosity"]


def dygraph_to_static_func(dygraph_func: Any) -> Any:
    """Fluid 1.8's ``dygraph_to_static_func``: the translated function, which builds its
    control flow as program ops when called in a static program (and runs as written in
    dygraph mode, or when ``ProgramTranslator().enable(False)``)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        if in_dygraph_mode():
            return dygraph_func(*args, **kwargs)
        # (get_func gives the function as written when translation is off)
        return ProgramTranslator().get_func(dygraph_func)(*args, **kwargs)
    call.__wrapped__ = dygraph_func
    call.__name__ = getattr(dygraph_func, "__name__", "dygraph_to_static_func")
    return call


class TracedLayer:
    """A dygraph layer as a static program (Fluid 1.8's ``fluid.dygraph.TracedLayer``).

    Made by :meth:`trace`; call it with numpy arrays (one per traced input) to run the program,
    or save it with :meth:`save_inference_model`. The program shares the layer's parameters,
    as Fluid 1.8's does: each run and each save uses their values at that time (after an
    optimizer step or ``set_value``), and what a run writes to them (batch norm's running
    statistics in train mode) is the layer's.
    """

    def __init__(self, program: Program, parameters: dict[str, VarBase], feed_names: list[str],
                 fetch_names: list[str]) -> None:
        self._program = program
        self._feed_names = feed_names
        self._fetch_names = fetch_names
        tracer = _dygraph_tracer()
        self._place = tracer.place if tracer is not None else None
        self._exe = Executor(self._place)
        self._scope = Scope()
        #: the layer's own variables by program name: the program shares their values (Fluid
        #: 1.8 shares the tensors), so an optimizer step or set_value reaches the next run
        self._shared = parameters
        self._build_strategy = self._exec_strategy = None
        self._compiled: CompiledProgram | None = None

    @property
    def program(self) -> Program:
        """The traced program."""
        return self._program

    @staticmethod
    def trace(layer: Layer, inputs: Any) -> tuple[Any, TracedLayer]:
        """Run ``layer(*inputs)`` in dygraph mode and trace it into a program.

        Parameters
        ----------
        layer : Layer
        inputs : VarBase or list of VarBase
            Nested lists too (``[[a, b], c]`` calls ``layer([a, b], c)``); the traced layer
            is then called with one array per variable, in order (``[a, b, c]``).

        Returns
        -------
        (outputs, TracedLayer)
            The layer's dygraph outputs, and the traced layer.

        Raises
        ------
        TypeError
            ``layer`` is not a Layer, or inputs / outputs are not dygraph variables.
        RuntimeError
            Outside ``fluid.dygraph.guard``.
        """
        if not isinstance(layer, Layer):
            raise TypeError(f"TracedLayer.trace: layer must be a fluid.dygraph.Layer, got "
                            f"{type(layer).__name__}")
        tracer = _dygraph_tracer()
        if tracer is None:
            raise RuntimeError("TracedLayer.trace works in dygraph mode only: call it inside "
                               "fluid.dygraph.guard()")
        # as Fluid 1.8: the layer takes the inputs as given (nested lists too), the program
        # feeds their variables in order
        args = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        ins = var_list(_flat(args), "inputs", "TracedLayer.trace")
        with tracer.recording() as recorded:
            outputs = layer(*args)
        outs = var_list(outputs, "the layer's outputs", "TracedLayer.trace")
        block = recorded.global_block()
        for var in ins:
            if not block.has_var(var.name):
                raise ValueError(f"TracedLayer.trace: input {var.name!r} is not read by any op "
                                 "of the layer")
        program, names, shared = _renamed(block, [v.name for v in ins], [v.name for v in outs])
        parameters = {}
        for name in shared:
            live = tracer.block.vars.get(name)
            if live is None or live._value is None:
                raise ValueError(f"TracedLayer.trace: {name!r}, which the layer reads, has "
                                 "no value")
            parameters[name] = live
        return outputs, TracedLayer(program, parameters, [names[v.name] for v in ins],
                                    [names[v.name] for v in outs])

    def _switch(self, is_test: bool = True) -> None:
        """Set ``is_test`` on every op of the program that has it (Fluid 1.8's private
        ``TracedLayer._switch``, which its unit tests call: dropout and batch norm in
        inference or training form)."""
        for block in self._program.blocks:
            for op in block.ops:
                if op.has_attr("is_test"):
                    op._set_attr("is_test", bool(is_test))
        self._compiled = None

    def set_strategy(self, build_strategy: Any = None, exec_strategy: Any = None) -> None:
        """Run through a CompiledProgram with these strategies (Fluid 1.8)."""
        self._build_strategy, self._exec_strategy = build_strategy, exec_strategy
        self._compiled = None

    def _runnable(self) -> Program | CompiledProgram:
        if self._build_strategy is None and self._exec_strategy is None:
            return self._program
        if self._compiled is None:
            self._compiled = CompiledProgram(self._program, build_strategy=self._build_strategy)
        return self._compiled

    def __call__(self, inputs: Sequence[np.ndarray]) -> list:
        """Run the program on ``inputs`` (numpy arrays, in the traced inputs' order) and
        return the outputs as numpy arrays."""
        if not isinstance(inputs, (list, tuple)) or len(inputs) != len(self._feed_names):
            raise ValueError(f"TracedLayer: give a list of {len(self._feed_names)} input "
                             "arrays, one per traced input")
        feed = {name: np.asarray(value) for name, value in
                zip(self._feed_names, inputs, strict=True)}
        self._share_values()
        try:
            with _dygraph_tracer_guard(None):  # a static run, as Fluid's switch_to_static_graph
                return self._exe.run(self._runnable(), feed=feed,
                                     fetch_list=list(self._fetch_names), scope=self._scope)
        finally:
            self._take_back_values()

    def _share_values(self) -> None:
        """Put the layer's current values into the scope (references, not copies)."""
        for name, var in self._shared.items():
            self._scope.vars[name] = var._checked_value()

    def _take_back_values(self) -> None:
        """What the program wrote to a shared variable (batch norm's running statistics in
        train mode) goes to the layer's variable, which Fluid 1.8's shared tensor is."""
        for name, var in self._shared.items():
            value = self._scope.vars.get(name)
            if value is not None and value is not var._value:
                var._value = value

    def save_inference_model(self, dirname: str, feed: Sequence[int] | None = None,
                             fetch: Sequence[int] | None = None) -> None:
        """Save the program and its parameters as an inference model (``fluid.io``'s
        format); ``feed`` and ``fetch`` pick traced inputs and outputs by index (all by
        default)."""
        feed_idx = range(len(self._feed_names)) if feed is None else feed
        fetch_idx = range(len(self._fetch_names)) if fetch is None else fetch
        try:
            feeds = [self._feed_names[i] for i in feed_idx]
            fetches = [self._program.global_block().var(self._fetch_names[i])
                       for i in fetch_idx]
        except (IndexError, TypeError) as err:
            raise ValueError(f"save_inference_model: feed and fetch are indices of the traced "
                             f"inputs ({len(self._feed_names)}) and outputs "
                             f"({len(self._fetch_names)})") from err
        self._share_values()
        with scope_guard(self._scope), _dygraph_tracer_guard(None):
            save_inference_model(dirname, feeds, fetches, self._exe,
                                 main_program=self._program)


def _flat(values: list) -> list:
    """Nested lists and tuples of inputs, in order, as one list."""
    return [v for item in values
            for v in (_flat(list(item)) if isinstance(item, (list, tuple)) else [item])]


def _renamed(block: Any, feeds: list[str], fetches: list[str]) -> tuple[Program, dict, list]:
    """The traced ops as a new program named as Fluid 1.8's ``jit::ProgramDescTracer`` names
    it, so that tracing a layer twice gives the same program: persistable variables keep
    their names, the inputs become ``feed_0``, ``feed_1``, ..., the outputs ``fetch_0``, ...,
    every other variable ``t_0``, ``t_1``, ... in the order the ops read (slots by name, as
    1.8's maps) and write it. A variable the ops read before any op wrote it and that is no
    input (a constant the layer holds) keeps its name and becomes persistable, as in 1.8.

    Returns the program, old name -> new name, and the names of the variables whose values
    the program shares with the layer (the persistable ones)."""
    written: set[str] = set()
    captured: list[str] = []
    for op in block.ops:
        for slot in sorted(op.inputs):
            for name in op.inputs[slot]:
                if (name != EMPTY_VAR and name not in written and name not in feeds
                        and name not in captured and not block.var(name).persistable):
                    captured.append(name)
        written.update(n for n in op.output_arg_names if n != EMPTY_VAR)
    shared = [n for n, v in block.vars.items() if v.persistable or n in captured]
    names = {n: n for n in shared}
    taken = set(shared)
    counters: dict[str, int] = {}

    def name_of(old: str, prefix: str) -> str:
        if old == EMPTY_VAR:
            return old
        if old not in names:
            i = counters.get(prefix, 0)
            while f"{prefix}{i}" in taken:
                i += 1
            counters[prefix] = i + 1
            names[old] = f"{prefix}{i}"
            taken.add(names[old])
        return names[old]

    for old in feeds:
        name_of(old, "feed_")
    for old in fetches:
        name_of(old, "fetch_")
    ops = []
    for op in block.ops:
        ins = {s: [name_of(n, "t_") for n in op.inputs[s]] for s in sorted(op.inputs)}
        outs = {s: [name_of(n, "t_") for n in op.outputs[s]] for s in sorted(op.outputs)}
        ops.append((op.type, ins, outs, dict(op.attrs)))
    program = Program()
    new_block = program.global_block()
    with _dygraph_tracer_guard(None):
        for old, var in block.vars.items():
            if old not in names:  # declared while tracing, but read and written by no op
                continue
            made = new_block.create_var(name=names[old], shape=var.shape, dtype=var.dtype,
                                        persistable=old in shared, type=var.type,
                                        stop_gradient=var.stop_gradient)
            made.is_data = old in feeds
        for op_type, ins, outs, attrs in ops:
            new_block.append_op(op_type, ins, outs, attrs)
    return program, names, shared
