"""``@declarative`` and ``ProgramTranslator`` (Fluid 1.8's ``program_translator``).

A function (or a Layer's ``forward``) decorated with :func:`declarative` is translated
(:mod:`.ast_transform`) and, in dygraph mode, built into a static program once per input
signature (shapes, dtypes and whether each input needs a gradient; the Python arguments' values;
the layer's train/eval mode): its inputs become data variables, the dygraph parameters it reads
become the program's parameters. The program then runs as one op (:mod:`.partial_program`), so
that ``loss.backward()`` reaches the parameters through its conditional blocks and loops, and
the optimizers of dygraph mode train them. Outside dygraph mode the translated function builds
its ops into the current program. ``ProgramTranslator().enable(False)`` runs the functions as
they are written, in dygraph mode.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import unique_name
from ...executor import Executor, Scope, scope_guard
from ...framework import (
    Parameter,
    Program,
    Variable,
    _dygraph_tracer,
    _dygraph_tracer_guard,
    in_dygraph_mode,
    program_guard,
)
from ...inference_model import _inference_program, save_inference_model
from ...ops.registry import to_host
from ..base import to_variable
from ..varbase import ParamBase, VarBase
from .ast_transform import translated_code, verbose
from .convert_operators import translate
from .partial_program import PartialProgram

__all__ = ["ConcreteProgram", "ProgramCache", "ProgramTranslator", "StaticLayer", "declarative"]


@dataclass(eq=False)
class ConcreteProgram:
    """The program of one input signature: what ``get_program`` returns, what ``jit.save``
    writes."""

    main_program: Program
    startup_program: Program
    inputs: list[Variable]
    outputs: list[Variable]
    parameters: list[Parameter]
    #: the other persistable variables it reads and writes
    buffers: list[Variable]
    #: the function's result with each output Variable replaced by its index in ``outputs``
    structure: Any = None
    runner: PartialProgram | None = field(default=None, repr=False)

    def save(self, dirname: str, feed: Sequence[int] | None = None,
             fetch: Sequence[int] | None = None, model_filename: str | None = None,
             params_filename: str | None = None) -> list[Parameter]:
        """Write the program (inputs ``feed``, outputs ``fetch``: indices, all by default) as
        an inference model with the dygraph parameters' values; returns the parameters.

        Raises
        ------
        RuntimeError
            Outside dygraph mode, or a parameter has no value.
        ValueError
            ``feed`` or ``fetch`` are not indices of the inputs / outputs.
        """
        tracer = _dygraph_tracer()
        if tracer is None:
            raise RuntimeError("saving a @declarative program reads the dygraph parameters: "
                               "do it inside fluid.dygraph.guard()")
        try:
            feeds = [self.inputs[i].name for i in (
                range(len(self.inputs)) if feed is None else feed)]
            fetches = [self.outputs[i] for i in (
                range(len(self.outputs)) if fetch is None else fetch)]
        except (IndexError, TypeError) as err:
            raise ValueError(f"feed and fetch are indices of the program's {len(self.inputs)} "
                             f"inputs and {len(self.outputs)} outputs") from err
        # only the inputs the chosen outputs read stay inputs of the saved model
        pruned = _inference_program(self.main_program, feeds, [v.name for v in fetches])
        feeds = [name for name in feeds if pruned.global_block().has_var(name)]
        scope = Scope()
        for var in [*self.parameters, *self.buffers]:
            live = tracer.block.vars.get(var.name)
            if live is None or live._value is None:
                raise RuntimeError(f"the parameter {var.name!r} has no value to save")
            scope.set(var.name, to_host(live._value))
        with scope_guard(scope), _dygraph_tracer_guard(None):
            save_inference_model(dirname, feeds, fetches, Executor(),
                                 main_program=self.main_program, model_filename=model_filename,
                                 params_filename=params_filename)
        return self.parameters

    def pack(self, values: list[Any]) -> Any:
        """The function's result with ``values`` in place of the output Variables."""
        return _map_leaves(self.structure, lambda leaf: values[leaf.index]
                           if isinstance(leaf, _Out) else leaf)


@dataclass(frozen=True)
class _Out:
    index: int


def _map_leaves(tree: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(tree, (list, tuple)):
        items = [_map_leaves(t, fn) for t in tree]
        return type(tree)(items) if not hasattr(tree, "_fields") else type(tree)(*items)
    if isinstance(tree, dict):
        return {k: _map_leaves(v, fn) for k, v in tree.items()}
    return fn(tree)


class ProgramCache:
    """The concrete programs of the translated functions (each ``@declarative`` function
    bound to a layer keeps its own, by input signature; this lists those alive) and the one
    that ran last."""

    def __init__(self) -> None:
        self._programs: weakref.WeakSet = weakref.WeakSet()
        self.last: ConcreteProgram | None = None

    def __len__(self) -> int:
        return len(self._programs)

    def put(self, program: ConcreteProgram) -> None:
        """Record ``program`` as built and the last run."""
        self._programs.add(program)
        self.last = program

    def clear(self) -> None:
        self._programs = weakref.WeakSet()
        self.last = None


class ProgramTranslator:
    """The switch and the cache of ``@declarative`` (Fluid 1.8's ``ProgramTranslator``, one
    object a process: ``ProgramTranslator()`` always returns it)."""

    _instance: ProgramTranslator | None = None
    _lock = threading.Lock()

    def __new__(cls) -> ProgramTranslator:
        with cls._lock:
            if cls._instance is None:
                self = super().__new__(cls)
                self.enable_declarative = True
                self._program_cache = ProgramCache()
                cls._instance = self
        return cls._instance

    @classmethod
    def get_instance(cls) -> ProgramTranslator:
        """The process's translator."""
        return cls()

    @classmethod
    def reset(cls) -> None:
        """Forget the concrete programs and turn translation back on."""
        translator = cls()
        translator.enable_declarative = True
        translator._program_cache.clear()

    def enable(self, enable_declarative: bool) -> None:
        """Translate ``@declarative`` functions (True, the default) or run them as written.

        Raises
        ------
        TypeError
            ``enable_declarative`` is not a bool.
        """
        if not isinstance(enable_declarative, bool):
            raise TypeError(f"ProgramTranslator.enable takes a bool, got "
                            f"{type(enable_declarative).__name__}")
        self.enable_declarative = enable_declarative

    def get_output(self, dygraph_func: Callable, *args: Any, **kwargs: Any) -> Any:
        """``dygraph_func(*args, **kwargs)`` run as its translated program (dygraph mode)."""
        _check_callable(dygraph_func, "get_output")
        if not self.enable_declarative:
            return dygraph_func(*args, **kwargs)
        return _static(dygraph_func)(*args, **kwargs)

    def get_func(self, dygraph_func: Callable) -> Callable:
        """The translated function (which builds program ops when called outside dygraph
        mode), or ``dygraph_func`` itself when translation is off."""
        _check_callable(dygraph_func, "get_func")
        if not self.enable_declarative:
            return dygraph_func
        return _static(dygraph_func)._translated()

    def get_program(self, dygraph_func: Callable, *args: Any,
                    **kwargs: Any) -> tuple[Program, Program, list[Variable], list[Variable]]:
        """``(main_program, startup_program, inputs, outputs)`` of ``dygraph_func`` for these
        arguments (built in dygraph mode, where the parameters live)."""
        _check_callable(dygraph_func, "get_program")
        if not self.enable_declarative:
            return dygraph_func(*args, **kwargs)
        concrete = _static(dygraph_func).concrete_program_for(*args, **kwargs)
        return (concrete.main_program, concrete.startup_program, concrete.inputs,
                concrete.outputs)

    def get_code(self, dygraph_func: Callable) -> str:
        """The translated source of ``dygraph_func``."""
        _check_callable(dygraph_func, "get_code")
        return _static(dygraph_func).code

    def get_program_cache(self) -> ProgramCache:
        """The concrete programs built so far."""
        return self._program_cache

    def save_inference_model(self, dirname: str, feed: list[int] | None = None,
                             fetch: list[int] | None = None) -> None:
        """Save the last concrete program run as an inference model (``fluid.io`` format):
        ``feed`` and ``fetch`` pick inputs and outputs by index (all by default).

        Raises
        ------
        RuntimeError
            No ``@declarative`` function has run yet.
        """
        last = self._program_cache.last
        if last is None:
            raise RuntimeError("ProgramTranslator.save_inference_model: no @declarative "
                               "function has run yet; call it on an example input first")
        last.save(dirname, feed, fetch)


def _check_callable(func: Any, where: str) -> None:
    if not callable(func):
        raise TypeError(f"ProgramTranslator.{where}: the dygraph function must be callable, "
                        f"got {type(func).__name__}")


def _static(func: Callable) -> StaticLayer:
    if isinstance(func, StaticLayer):
        return func
    if inspect.ismethod(func):
        return StaticLayer(func.__func__).__get__(func.__self__, type(func.__self__))
    return StaticLayer(func)


class StaticLayer:
    """A function decorated with :func:`declarative` (Fluid 1.8's ``StaticLayer``); a Layer
    method binds it to the layer."""

    def __init__(self, function: Callable, instance: Any = None) -> None:
        if not callable(function):
            raise TypeError(f"declarative: {function!r} is not a function")
        self._function = function
        # weakly: the layer keys the class-level object's table of bound ones
        self._instance_ref = None if instance is None else weakref.ref(instance)
        self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._last_outputs: list[weakref.ref] = []
        self._signature: inspect.Signature | None = None
        self._programs: dict[tuple, ConcreteProgram] = {}
        self._last: ConcreteProgram | None = None
        self.__name__ = getattr(function, "__name__", "declarative")
        self.__doc__ = getattr(function, "__doc__", None)
        self.__wrapped__ = function

    def __get__(self, instance: Any, owner: Any = None) -> StaticLayer:
        if instance is None:
            return self
        bound = self._bound.get(instance)
        if bound is None:
            bound = self._bound[instance] = StaticLayer(self._function, instance)
        return bound

    @property
    def _instance(self) -> Any:
        return None if self._instance_ref is None else self._instance_ref()

    @property
    def dygraph_function(self) -> Callable:
        """The function as written (bound to its layer, if any)."""
        if self._instance is not None:
            return self._function.__get__(self._instance)
        return self._function

    @property
    def code(self) -> str:
        """The translated source."""
        return translated_code(self._function)

    @property
    def program_cache(self) -> ProgramCache:
        return ProgramTranslator().get_program_cache()

    @property
    def concrete_program(self) -> ConcreteProgram:
        """The program of the last call.

        Raises
        ------
        RuntimeError
            The function has not run in dygraph mode yet.
        """
        last = self._last
        if last is None:
            raise RuntimeError(f"{self.__name__}: the function has not run as a program yet; "
                               "call it once on example inputs in dygraph mode")
        return last

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not ProgramTranslator().enable_declarative:
            return self.dygraph_function(*args, **kwargs)
        if not in_dygraph_mode():  # building a program: the translated ops go into it
            return self._translated()(*args, **kwargs)
        arguments = self._arguments(args, kwargs)
        concrete = self._concrete(arguments)
        inputs = [to_variable(v) for v in _tensor_args(arguments)]  # arrays made variables
        params = [_param_of(p.name) for p in concrete.parameters]
        buffers = [_param_of(b.name) for b in concrete.buffers]
        training = True if self._instance is None else bool(
            getattr(self._instance, "training", True))
        outputs = concrete.runner(inputs, params, training, buffers)
        self._last_outputs = [weakref.ref(o) for o in outputs]  # (not the step's graph)
        return concrete.pack(outputs)

    def output_index(self, var: VarBase) -> int:
        """Which output of the program ``var`` (returned by the last call) is.

        Raises
        ------
        ValueError
            ``var`` is not one of the last call's outputs.
        """
        for i, out in enumerate(self._last_outputs):
            if out() is var:
                return i
        raise ValueError(f"The tensor {var.name!r} does not exist among the outputs of the "
                         f"last call of {self.__name__}: give output_spec variables that call "
                         "returned")

    def _translated(self) -> Callable:
        translated = translate(self._function)
        return translated.__get__(self._instance) if self._instance is not None else translated

    def _arguments(self, args: tuple, kwargs: dict) -> dict:
        """The call's arguments by parameter name, defaults included."""
        if self._signature is None:
            self._signature = inspect.signature(self.dygraph_function)
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def concrete_program_for(self, *args: Any, **kwargs: Any) -> ConcreteProgram:
        """The program of these arguments, built on the first call with their signature.

        Raises
        ------
        RuntimeError
            Outside dygraph mode.
        """
        if not in_dygraph_mode():
            raise RuntimeError(f"{self.__name__}: programs of @declarative functions are built "
                               "in dygraph mode (inside fluid.dygraph.guard()), where the "
                               "parameters live")
        return self._concrete(self._arguments(args, kwargs))

    def _concrete(self, arguments: dict) -> ConcreteProgram:
        # this object is bound to one layer: its programs are that layer's
        training = None if self._instance is None else bool(
            getattr(self._instance, "training", True))
        key = (training, tuple((name, _arg_key(value)) for name, value in arguments.items()))
        concrete = self._programs.get(key)
        if concrete is None:
            concrete = self._programs[key] = self._build(arguments)
            verbose(f"built the program of {self.__name__} for {key}")
        ProgramTranslator().get_program_cache().put(concrete)
        self._last = concrete
        return concrete

    def _build(self, arguments: dict) -> ConcreteProgram:
        tracer = _dygraph_tracer()
        main, startup = Program(), Program()
        inputs: list[Variable] = []

        def as_data(name: str, value: Any) -> Any:
            if not _is_tensor(value):
                return value
            _, shape, dtype, lod_level, stop_gradient = _arg_key(value)
            block = main.global_block()
            data = block.create_var(
                name=name if name not in block.vars else unique_name.generate(name),
                shape=list(shape), dtype=dtype, lod_level=lod_level,
                stop_gradient=stop_gradient, is_data=True)
            inputs.append(data)
            return data

        with _dygraph_tracer_guard(None), program_guard(main, startup), unique_name.guard():
            # every live dygraph parameter is declared first (the blocks of an if or a loop
            # look up what they read); those no op uses go again below
            _declare_live(main.global_block(), tracer)
            call_args = {name: _map_leaves(value, lambda v, n=name: as_data(n, v))
                         for name, value in arguments.items()}
            result = self._call_translated(call_args)
        outputs: list[Variable] = []

        def out(leaf: Any) -> Any:
            if isinstance(leaf, Variable):
                outputs.append(leaf)
                return _Out(len(outputs) - 1)
            return leaf

        structure = _map_leaves(result, out)
        if not outputs:
            raise TypeError(f"{self.__name__}: the function returns no Variable ({result!r}); "
                            "a @declarative function returns its results")
        if startup.global_block().ops:
            made = sorted({n for op in startup.global_block().ops for n in op.output_arg_names})
            raise TypeError(f"{self.__name__}: the function creates parameters {made} while it "
                            "runs (static layers such as fluid.layers.fc); create them once "
                            "with dygraph layers (fluid.dygraph.Linear, ...) in the layer's "
                            "__init__ and call those")
        parameters, buffers = _used_persistables(main)
        runner = PartialProgram(main, inputs, outputs, parameters, buffers)
        return ConcreteProgram(main, startup, inputs, outputs, parameters, buffers, structure,
                               runner)

    def _call_translated(self, arguments: dict) -> Any:
        sig = inspect.signature(self.dygraph_function)
        args, kwargs = [], {}
        for name, param in sig.parameters.items():
            value = arguments[name]
            if param.kind == param.VAR_POSITIONAL:
                args.extend(value)
            elif param.kind == param.VAR_KEYWORD:
                kwargs.update(value)
            elif param.kind == param.KEYWORD_ONLY:
                kwargs[name] = value
            else:
                args.append(value)
        return self._translated()(*args, **kwargs)


def _tensor_args(arguments: dict) -> list[Any]:
    found: list[Any] = []
    for value in arguments.values():
        _map_leaves(value, lambda v: found.append(v) if _is_tensor(v) else None)
    return found


def _is_tensor(value: Any) -> bool:
    return isinstance(value, (VarBase, np.ndarray))


def _arg_key(value: Any) -> Any:
    """What of an argument the program depends on: a tensor's shape, dtype, LoD levels and
    whether it needs a gradient; a Python value itself."""
    if isinstance(value, VarBase):
        return ("tensor", tuple(value.shape), str(value.dtype), len(value._lod or ()),
                bool(value.stop_gradient))
    if isinstance(value, np.ndarray):
        return ("tensor", value.shape, str(value.dtype), 0, True)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_arg_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _arg_key(v)) for k, v in value.items())))
    try:
        hash(value)
    except TypeError:
        return ("object", id(value))
    return ("value", type(value).__name__, value)


def _param_of(name: str) -> ParamBase:
    tracer = _dygraph_tracer()
    var = tracer.block.vars.get(name)
    if var is None:
        raise RuntimeError(f"the parameter {name!r} of a @declarative program no longer exists "
                           "in this dygraph guard")
    return var


def _declare_live(block: Any, tracer: Any) -> None:
    """Declare the guard's live dygraph parameters and other persistable variables in the
    (global) ``block``: the layers the function calls read them by name."""
    for name, var in list(tracer.block.vars.items()):
        if not var.persistable or var._value is None:
            continue
        if isinstance(var, ParamBase):
            declared = block.create_parameter(
                name=name, shape=list(var.shape), dtype=var.dtype, trainable=var.trainable,
                optimize_attr=getattr(var, "optimize_attr", None),
                regularizer=getattr(var, "regularizer", None))
        else:
            declared = block.create_var(name=name, shape=list(var.shape), dtype=var.dtype,
                                        persistable=True)
        declared.stop_gradient = var.stop_gradient
        declared._dask_fluid_dygraph = True


def _used_persistables(program: Program) -> tuple[list[Parameter], list[Variable]]:
    """The declared dygraph parameters and other persistable variables the program's ops read
    or write (in the order the ops first name them); the others are taken out again.

    Raises
    ------
    ValueError
        An op names a variable that is neither declared nor made by the program.
    """
    block = program.global_block()
    used: dict[str, Variable] = {}
    for sub in program.blocks:
        for op in sub.ops:
            for name in [*op.input_arg_names, *op.output_arg_names]:
                var = sub._find_var_recursive(name)
                if var is None:
                    raise ValueError(f"op {op.type!r} of the translated program reads {name!r}, "
                                     "which is neither an input, nor made by the program, nor a "
                                     "parameter: pass dygraph variables as arguments of the "
                                     "@declarative function")
                if getattr(var, "_dask_fluid_dygraph", False):
                    used.setdefault(name, var)
    for name in [n for n, v in block.vars.items()
                 if getattr(v, "_dask_fluid_dygraph", False) and n not in used]:
        del block.vars[name]
    parameters = [v for v in used.values() if isinstance(v, Parameter)]
    buffers = [v for v in used.values() if not isinstance(v, Parameter)]
    return parameters, buffers


def declarative(function: Callable) -> StaticLayer:
    """Translate ``function``'s Python control flow into program ops (Fluid 1.8's
    ``fluid.dygraph.declarative``, the decorator of ``forward`` methods and functions).

    In dygraph mode the function runs as a static program built once per input signature;
    ``loss.backward()`` and the optimizers work through it. Outside dygraph mode it builds its
    ops into the current program.

    Parameters
    ----------
    function : callable
        A function or method defined with ``def`` in a file (its source is read).

    Returns
    -------
    StaticLayer
    """
    return StaticLayer(function)
