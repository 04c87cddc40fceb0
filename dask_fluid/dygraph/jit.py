"""``fluid.dygraph.jit``: a dygraph layer traced into a static program (``TracedLayer``).

``TracedLayer.trace(layer, inputs)`` runs the layer once and copies every op it runs into a
Program, with the parameters' values in a scope of its own: the program runs on the executor
(``static_layer(inputs)``) and saves as an inference model that ``fluid.io`` loads, as in
Fluid 1.8. The source translator (``declarative``, ``ProgramTranslator``, ``save``/``load``)
is :mod:`.dygraph_to_static`; this module gathers Fluid 1.8's ``fluid.dygraph.jit`` names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..compiler import CompiledProgram
from ..executor import Executor, Scope, scope_guard
from ..framework import Program, _dygraph_tracer, _dygraph_tracer_guard, in_dygraph_mode
from ..inference_model import save_inference_model
from .dygraph_to_static.ast_transform import set_code_level, set_verbosity
from .dygraph_to_static.program_translator import ProgramTranslator, declarative
from .dygraph_to_static.saving import SaveLoadConfig, TranslatedLayer, load, save
from .layers import Layer
from .varbase import var_list

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
    or save it with :meth:`save_inference_model`.
    """

    def __init__(self, program: Program, parameters: dict[str, Any], feed_names: list[str],
                 fetch_names: list[str]) -> None:
        self._program = program
        self._feed_names = feed_names
        self._fetch_names = fetch_names
        tracer = _dygraph_tracer()
        self._place = tracer.place if tracer is not None else None
        self._exe = Executor(self._place)
        self._scope = Scope()
        for name, value in parameters.items():
            self._scope.vars[name] = value
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
        ins = var_list(inputs, "inputs", "TracedLayer.trace")
        with tracer.recording() as program:
            outputs = layer(*ins)
        outs = var_list(outputs, "the layer's outputs", "TracedLayer.trace")
        block = program.global_block()
        for var in ins:
            if not block.has_var(var.name):
                raise ValueError(f"TracedLayer.trace: input {var.name!r} is not read by any op "
                                 "of the layer")
            declared = block.var(var.name)
            declared.is_data, declared.persistable = True, False
        parameters = {}
        for var in block.vars.values():
            if var.persistable:
                live = tracer.block.vars.get(var.name)
                if live is None or live._value is None:
                    raise ValueError(f"TracedLayer.trace: persistable {var.name!r} has no "
                                     "value")
                parameters[var.name] = live._value.copy()
        return outputs, TracedLayer(program, parameters, [v.name for v in ins],
                                    [v.name for v in outs])

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
        with _dygraph_tracer_guard(None):  # a static run, as Fluid's switch_to_static_graph
            return self._exe.run(self._runnable(), feed=feed,
                                 fetch_list=list(self._fetch_names), scope=self._scope)

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
        with scope_guard(self._scope), _dygraph_tracer_guard(None):
            save_inference_model(dirname, feeds, fetches, self._exe,
                                 main_program=self._program)
