"""``fluid.dygraph.jit.save`` / ``jit.load``: a ``@declarative`` layer's program and parameters
on disk, loaded back as a :class:`TranslatedLayer` (Fluid 1.8's ``jit.save``, ``jit.load``,
``SaveLoadConfig`` and ``dygraph.io.TranslatedLayer``).

``jit.save`` writes the layer's concrete program pruned for inference (``fluid.io``'s inference
model: ``__model__``, the parameters in ``__variables__`` or one file each) and
``__variables.info__``, which says for each parameter whether it trains and which attribute of
the layer held it (JSON here, where Fluid 1.8 pickles it). ``fluid.io.load_inference_model``
reads the directory too. ``jit.load`` gives a Layer whose parameters are the saved ones and
whose ``forward`` runs the program as one op (:mod:`.partial_program`): it predicts, and
``loss.backward()`` plus an optimizer fine-tune it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from ... import unique_name
from ...executor import Executor, Scope, scope_guard
from ...framework import Parameter, Variable, _dygraph_tracer, _dygraph_tracer_guard
from ...inference_model import (
    MODEL_FILENAME,
    load_inference_model,
)
from ..base import to_variable
from ..layers import Layer
from ..varbase import VarBase
from .partial_program import PartialProgram
from .program_translator import StaticLayer

__all__ = ["SaveLoadConfig", "TranslatedLayer", "load", "save"]

#: Fluid 1.8's file names of a saved layer
PARAMS_FILENAME = "__variables__"
INFO_FILENAME = "__variables.info__"


class SaveLoadConfig:
    """Options of :func:`save` and :func:`load` (Fluid 1.8's ``SaveLoadConfig``).

    Attributes
    ----------
    output_spec : list of VarBase, optional
        The outputs to save (some of those the layer's last call returned); all by default.
    model_filename : str, optional
        The program's file (``__model__`` by default).
    params_filename : str, optional
        The parameters' file (``__variables__`` by default).
    separate_params : bool
        One file per parameter instead of ``params_filename``.
    """

    def __init__(self) -> None:
        self._output_spec: list[VarBase] | None = None
        self._model_filename: str | None = None
        self._params_filename: str | None = None
        self._separate_params = False

    @property
    def output_spec(self) -> list[VarBase] | None:
        return self._output_spec

    @output_spec.setter
    def output_spec(self, spec: Sequence[VarBase]) -> None:
        if not isinstance(spec, list) or not all(isinstance(v, VarBase) for v in spec):
            raise TypeError("SaveLoadConfig.output_spec must be a list of the dygraph "
                            "variables a call of the layer returned")
        self._output_spec = spec

    @property
    def model_filename(self) -> str | None:
        return self._model_filename

    @model_filename.setter
    def model_filename(self, name: str) -> None:
        self._model_filename = _file_name(name, "model_filename")

    @property
    def params_filename(self) -> str | None:
        return self._params_filename

    @params_filename.setter
    def params_filename(self, name: str) -> None:
        self._params_filename = _file_name(name, "params_filename")

    @property
    def separate_params(self) -> bool:
        return self._separate_params

    @separate_params.setter
    def separate_params(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"SaveLoadConfig.separate_params must be a bool, got "
                            f"{type(value).__name__}")
        self._separate_params = value


def _file_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"SaveLoadConfig.{what} must be a non-empty str, got {name!r}")
    return name


def _files(configs: SaveLoadConfig | None) -> tuple[str, str | None]:
    configs = configs or SaveLoadConfig()
    if not isinstance(configs, SaveLoadConfig):
        raise TypeError(f"configs must be a fluid.dygraph.jit.SaveLoadConfig, got "
                        f"{type(configs).__name__}")
    params = None if configs.separate_params else (configs.params_filename or PARAMS_FILENAME)
    return configs.model_filename or MODEL_FILENAME, params


def save(layer: Layer, model_path: str, input_spec: Sequence[Any] | None = None,
         configs: SaveLoadConfig | None = None) -> None:
    """Save a layer whose ``forward`` is ``@declarative`` for inference and fine-tuning
    (Fluid 1.8's ``fluid.dygraph.jit.save``).

    Parameters
    ----------
    layer : Layer
        Its ``forward`` decorated with ``@declarative``.
    model_path : str
        The directory to write.
    input_spec : list of VarBase or numpy arrays, optional
        Example inputs: the program of their signature is saved. By default, the program of
        the layer's last call.
    configs : SaveLoadConfig, optional

    Raises
    ------
    TypeError
        ``layer`` is not a Layer with a ``@declarative`` forward.
    RuntimeError
        Without ``input_spec``, the layer has not been called yet; outside dygraph mode.
    ValueError
        An ``output_spec`` variable is not an output of the layer's last call.
    """
    if not isinstance(layer, Layer):
        raise TypeError(f"jit.save: layer must be a fluid.dygraph.Layer, got "
                        f"{type(layer).__name__}")
    forward = layer.forward
    if not isinstance(forward, StaticLayer):
        raise TypeError(f"jit.save: the forward of layer should be a StaticLayer (decorated "
                        f"with @declarative), but received forward type is "
                        f"{type(forward).__name__}")
    model_filename, params_filename = _files(configs)
    if input_spec is not None:
        if not isinstance(input_spec, (list, tuple)):
            raise TypeError("jit.save: input_spec must be a list of example inputs")
        concrete = forward.concrete_program_for(*input_spec)
    else:
        concrete = forward.concrete_program
    fetch = None
    if configs is not None and configs.output_spec is not None:
        fetch = [forward.output_index(var) for var in configs.output_spec]
    os.makedirs(model_path, exist_ok=True)
    params = concrete.save(model_path, None, fetch, model_filename, params_filename)
    structured = {p.name: attr for attr, p in layer.state_dict().items()
                  if isinstance(p, VarBase)}
    info = {p.name: {"structured_name": structured.get(p.name, p.name),
                     "trainable": bool(p.trainable)} for p in params}
    with open(os.path.join(model_path, INFO_FILENAME), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)


def load(model_path: str, configs: SaveLoadConfig | None = None) -> TranslatedLayer:
    """A layer :func:`save` wrote (Fluid 1.8's ``fluid.dygraph.jit.load``), in dygraph mode.

    Raises
    ------
    RuntimeError
        Outside ``fluid.dygraph.guard()``.
    ValueError
        ``model_path`` holds no saved model.
    """
    model_filename, params_filename = _files(configs)
    return TranslatedLayer(model_path, model_filename, params_filename)


class TranslatedLayer(Layer):
    """A saved program as a layer (Fluid 1.8's ``TranslatedLayer``, what :func:`load`
    returns): its persistable variables are the layer's parameters (batch norm's statistics
    too, not trainable), and a call runs the program on the inputs (dygraph variables or
    arrays, in the saved order; or one list of them) as one op, so that ``backward`` reaches
    the parameters and an optimizer fine-tunes them. ``train()`` runs the program as built for
    training (``is_test`` off: dropout on, batch norm on the batch), ``eval()`` for test.

    Parameters
    ----------
    model_path : str
        What :func:`save` or ``fluid.io.save_inference_model`` wrote.
    model_filename : str
    params_filename : str, optional
        None: one file per variable.

    Raises
    ------
    RuntimeError
        Outside ``fluid.dygraph.guard()``.
    ValueError
        ``model_path`` holds no such model.
    """

    _what = "jit.load"

    def __init__(self, model_path: str, model_filename: str = MODEL_FILENAME,
                 params_filename: str | None = PARAMS_FILENAME) -> None:
        super().__init__()
        tracer = _dygraph_tracer()
        if tracer is None:
            raise RuntimeError(f"{self._what} works in dygraph mode only: call it inside "
                               "fluid.dygraph.guard()")
        if not os.path.isfile(os.path.join(model_path, model_filename)):
            raise ValueError(f"{self._what}: {model_path!r} holds no saved model (no "
                             f"{model_filename!r}); write one with fluid.dygraph.jit.save or "
                             "fluid.io.save_inference_model")
        scope = Scope()
        with scope_guard(scope), _dygraph_tracer_guard(None):
            program, feeds, fetches = load_inference_model(
                model_path, Executor(), model_filename, params_filename)
        info_path = os.path.join(model_path, INFO_FILENAME)
        info = {}
        if os.path.isfile(info_path):
            with open(info_path) as f:
                info = json.load(f)
        # the inference model was saved for test; train mode runs the program as built for
        # training (dropout on, batch norm on the batch, loops keeping their steps), as
        # Fluid 1.8's TranslatedLayer resets is_test; eval mode is its test clone again
        for sub in program.blocks:
            for op in sub.ops:
                if "is_test" in op.attrs:
                    op.attrs["is_test"] = False
        program._version += 1
        block = program.global_block()
        persistables = [v for v in block.vars.values() if v.persistable and not v.is_data
                        and scope.get(v.name) is not None]
        self._params: list[VarBase] = []
        static_params = []
        for var in persistables:
            if var.name in tracer.block.vars:  # the saved layer lives here too: a name apart
                value = scope.get(var.name)
                var = _renamed(program, var, unique_name.generate(var.name))
                scope.set(var.name, value)
            trainable = bool(info.get(var.name, {}).get(
                "trainable", getattr(var, "trainable", False)))
            if not isinstance(var, Parameter):
                # a persistable the program reads (batch norm's statistics, saved as
                # variables): a parameter that does not train, as in Fluid 1.8's BatchNorm
                var = _as_parameter(block, var)
            var.trainable = trainable
            param = tracer.create_parameter(var.name, var.shape, dtype=var.dtype,
                                            trainable=trainable)
            param._value = tracer.executor.to_place(scope.get(var.name))
            param.stop_gradient = not trainable
            self.add_parameter(var.name.replace(".", "_"), param)
            self._params.append(param)
            static_params.append(var)
        inputs = [block.var(name) for name in feeds]
        self._runner = PartialProgram(program, inputs, list(fetches), static_params)

    def forward(self, *inputs: Any) -> Any:
        """The saved outputs for ``inputs``: one variable, or a list of them."""
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        values = [to_variable(v) for v in inputs]  # (a variable as it is)
        outs = self._runner(values, self._params, self.training)
        return outs[0] if len(outs) == 1 else outs


def _renamed(program: Any, var: Variable, new: str) -> Variable:
    """``var`` of ``program``'s global block named ``new`` everywhere in the program."""
    old = var.name
    for block in program.blocks:
        for op in block.ops:
            op._rename_input(old, new)
            op._rename_output(old, new)
    vars_ = program.global_block().vars
    vars_[new] = vars_.pop(old)
    var.name = new
    program._version += 1
    return var


def _as_parameter(block: Any, var: Variable) -> Parameter:
    """A persistable variable of a loaded program re-declared as a (frozen) Parameter."""
    del block.vars[var.name]
    return block.create_parameter(name=var.name, shape=list(var.shape), dtype=var.dtype,
                                  trainable=False)
