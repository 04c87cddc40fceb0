"""``fluid.dygraph.StaticModelRunner``: a saved inference model run (and fine-tuned) as a Layer.

Fluid 1.8 loads a model ``fluid.io.save_inference_model`` wrote into dygraph mode: its
parameters become the layer's parameters and calling the layer runs the program's ops on the
inputs. Here each op of the program goes through the tracer, so the outputs are dygraph
variables, ``loss.backward()`` reaches the loaded parameters and an optimizer fine-tunes them,
and ``train()``/``eval()`` set the ops' ``is_test`` as 1.8 does.
"""

from __future__ import annotations

from typing import Any

from ..executor import Executor, Scope, scope_guard
from ..framework import EMPTY_VAR, Parameter, _dygraph_tracer, _dygraph_tracer_guard
from ..inference_model import load_inference_model
from .layers import Layer
from .varbase import VarBase

__all__ = ["StaticModelRunner"]


class StaticModelRunner(Layer):
    """A saved inference model as a dygraph layer (Fluid 1.8's ``StaticModelRunner``).

    Parameters
    ----------
    model_dir : str
        What ``fluid.io.save_inference_model`` wrote.
    model_filename, params_filename : str, optional
        As for ``fluid.io.load_inference_model``.

    Raises
    ------
    RuntimeError
        Outside ``fluid.dygraph.guard``.
    ValueError
        ``model_dir`` is not such a directory.
    """

    def __init__(self, model_dir: str, model_filename: str | None = None,
                 params_filename: str | None = None) -> None:
        super().__init__()
        tracer = _dygraph_tracer()
        if tracer is None:
            raise RuntimeError("StaticModelRunner works in dygraph mode only: create it "
                               "inside fluid.dygraph.guard()")
        scope = Scope()
        # the model is read as a static program (fluid.io builds programs), on the host
        with _dygraph_tracer_guard(None), scope_guard(scope):
            program, feeds, fetches = load_inference_model(
                model_dir, Executor(), model_filename, params_filename)
        self._program = program
        self._feed_names = list(feeds)
        self._fetch_names = [v.name for v in fetches]
        #: the program's persistable values: trainable parameters (registered, so that
        #: parameters() and the optimizers see them) and the others (batch norm's statistics)
        self._persistables: dict[str, VarBase] = {}
        block = program.global_block()
        for name, value in scope.vars.items():
            var = block._find_var_recursive(name)
            if var is None or value is None:
                continue
            value = tracer.executor.to_place(value)
            if isinstance(var, Parameter):
                param = tracer.create_parameter(name, var.shape, dtype=var.dtype,
                                                trainable=var.trainable)
                param._value = value
                self.add_parameter(name.replace(".", "_"), param)
                self._persistables[name] = param
            else:
                held = tracer.create_var(name=name, persistable=True, stop_gradient=True)
                held._value = value
                self._persistables[name] = held

    def forward(self, *inputs: Any) -> Any:
        """Run the program on ``inputs`` (dygraph variables or arrays, in the model's feed
        order); the fetch targets, one variable or a list of them."""
        from .base import to_variable  # noqa: PLC0415  (base imports the layers module)

        tracer = _dygraph_tracer()
        if tracer is None:
            raise RuntimeError("StaticModelRunner runs in dygraph mode only")
        values = list(inputs[0]) if len(inputs) == 1 and isinstance(
            inputs[0], (list, tuple)) else list(inputs)
        if len(values) != len(self._feed_names):
            raise ValueError(f"StaticModelRunner: the model takes {len(self._feed_names)} "
                             f"inputs ({self._feed_names}), got {len(values)}")
        env: dict[str, VarBase] = dict(self._persistables)
        for name, value in zip(self._feed_names, values, strict=True):
            env[name] = value if isinstance(value, VarBase) else to_variable(value)
        for op in self._program.global_block().ops:
            ins = {}
            for slot, names in op.inputs.items():
                missing = [n for n in names if n != EMPTY_VAR and n not in env]
                if missing:
                    raise ValueError(f"StaticModelRunner: op {op.type!r} reads {missing}, "
                                     "which neither a feed nor an earlier op gives")
                ins[slot] = [env[n] if n != EMPTY_VAR else n for n in names]
            outs = {}
            for slot, names in op.outputs.items():
                made = []
                for n in names:
                    if n != EMPTY_VAR and n not in self._persistables:
                        env[n] = tracer.create_var(name=n)
                    made.append(env.get(n, n))
                outs[slot] = made
            attrs = dict(op.attrs)
            if "is_test" in attrs:  # Fluid 1.8: the layer's mode decides
                attrs["is_test"] = not self.training
            tracer.trace_op(op.type, ins, outs, attrs)
        results = [env[n] for n in self._fetch_names]
        return results[0] if len(results) == 1 else results
