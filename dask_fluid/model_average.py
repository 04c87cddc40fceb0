"""Parameter averaging of Fluid 1.8's ``fluid.optimizer``: ModelAverage and
ExponentialMovingAverage.

Both append their accumulating ops to the default main program when built (ModelAverage in
its constructor, ExponentialMovingAverage in ``update()``), and build two small programs of
their own: ``apply_program`` (back the parameters up, write the averages into them) and
``restore_program`` (copy the backups back), run by ``apply(executor)`` / ``restore(executor)``
against the executor's global scope, as in Fluid.

This module does not import :mod:`dask_fluid.optimizer` (which re-exports these classes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import unique_name
from .framework import (
    Parameter,
    Program,
    Variable,
    default_main_program,
    default_startup_program,
    name_scope,
    program_guard,
    refuse_in_dygraph,
)
from .initializer import ConstantInitializer
from .layer_helper import LayerHelper
from .layers import control_flow, nn, tensor
from .layers.learning_rate_scheduler import autoincreased_step_counter

__all__ = ["ModelAverage", "ExponentialMovingAverage"]


def _clone(block, var: Variable) -> Variable:
    """Fluid's ``Block._clone_variable(var)`` (force_persistable=True): the same name, shape
    and dtype in another program, persistable so that what the apply program writes (the
    backups) is still in the scope when the restore program runs."""
    if block.has_var(var.name):
        return block.var(var.name)
    return block.create_var(name=var.name, shape=list(var.shape), dtype=var.dtype,
                            persistable=True, stop_gradient=True)


def _averaged_params(program: Program) -> list[Parameter]:
    """The parameters Fluid averages: all of the global block's but those whose ParamAttr
    says ``do_model_average=False`` (None, the default, averages)."""
    return [p for p in program.global_block().all_parameters()
            if p.do_model_average is not False]


def _backup_var(program: Program, param: Parameter, key: str) -> Variable:
    """Where ``apply`` keeps the parameter's value (non-persistable in the main program, as
    Fluid's; the apply and restore programs hold it persistable)."""
    return program.global_block().create_var(
        name=unique_name.generate(key), shape=list(param.shape),
        dtype=param.dtype, persistable=False, stop_gradient=True)


def _check_executor(executor: Any) -> None:
    if not callable(getattr(executor, "run", None)):
        raise TypeError(f"executor must be a fluid.Executor, got {type(executor).__name__}")


class _Averaging:
    """What ModelAverage and ExponentialMovingAverage share: an ``apply_program`` that puts
    the averages into the parameters (backing them up) and a ``restore_program``."""

    apply_program: Program
    restore_program: Program

    @contextlib.contextmanager
    def apply(self, executor: Any, need_restore: bool = True) -> Iterator[None]:
        """Set the parameters to their averages (in the executor's global scope) for the
        ``with`` block; restore them after it when ``need_restore``."""
        _check_executor(executor)
        executor.run(self.apply_program)
        try:
            yield
        finally:
            if need_restore:
                self.restore(executor)

    def restore(self, executor: Any) -> None:
        """Put back the parameters ``apply`` backed up."""
        _check_executor(executor)
        executor.run(self.restore_program)


class ModelAverage(_Averaging):
    """Average of the parameters over a sliding window of recent steps, following Fluid
    1.8's ``fluid.optimizer.ModelAverage``.

    Built after ``minimize`` in the training program: for every parameter (but those with
    ``ParamAttr(do_model_average=False)``) it appends an ``average_accumulates`` op with the
    accumulators ``sum_1``, ``sum_2``, ``sum_3`` (the parameter's shape and dtype) and the
    int64 ``[1]`` counters ``num_accumulates``, ``old_num_accumulates``, ``num_updates``
    (named ``<param>_<acc>_<n>``, zero-initialised by the startup program). The window
    restarts once it holds ``min_average_window`` steps and ``min(max_average_window,
    num_updates * average_window_rate)`` steps; ``apply`` then sets each parameter to
    ``(sum_1 + sum_2 + sum_3) / (num_accumulates + old_num_accumulates)``: the current window
    plus the previous one.

    Parameters
    ----------
    average_window_rate : float
        The window's length relative to the number of updates, > 0.
    min_average_window, max_average_window : int
        Bounds of the window, ``1 <= min <= max``.
    regularization : None
        Anything else raises NotImplementedError: Fluid 1.8 takes it and no op ever reads it,
        so it would regularize nothing.
    name : str, optional

    Notes
    -----
    In Fluid, ModelAverage subclasses Optimizer (only for its accumulator helpers; its
    ``minimize`` is never meant to be called); here it is a plain class. The apply program
    divides in the parameter's dtype, where Fluid casts both sums to float32 (its
    ``self._dtype`` is None), which only differs for float64 parameters.
    """

    def __init__(self, average_window_rate: float, min_average_window: int = 10000,
                 max_average_window: int = 10000, regularization: Any = None,
                 name: str | None = None) -> None:
        refuse_in_dygraph("ModelAverage")  # before it looks for a program's parameters
        if isinstance(average_window_rate, bool) or not isinstance(average_window_rate,
                                                                   (int, float)):
            raise TypeError(f"average_window_rate must be a number, got "
                            f"{type(average_window_rate).__name__}")
        if not average_window_rate > 0:
            raise ValueError(f"average_window_rate must be > 0, got {average_window_rate!r}")
        for arg, val in (("min_average_window", min_average_window),
                         ("max_average_window", max_average_window)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)):
                raise TypeError(f"{arg} must be an int, got {type(val).__name__}")
            if val < 1:
                raise ValueError(f"{arg} must be >= 1, got {val}")
        if min_average_window > max_average_window:
            raise ValueError(f"min_average_window ({min_average_window}) must be <= "
                             f"max_average_window ({max_average_window})")
        self.average_window = float(average_window_rate)
        self.min_average_window = int(min_average_window)
        self.max_average_window = int(max_average_window)
        if regularization is not None:
            raise NotImplementedError(
                "ModelAverage(regularization=...) is not implemented in dask_fluid: Fluid 1.8 "
                "accepts it but no op reads it, so it regularizes nothing; give the "
                "regularization to the optimizer (or to the ParamAttr) instead")
        self.regularization = None
        self._name = name
        self._accumulators: dict[str, dict[str, Variable]] = {}
        program = default_main_program()
        # Fluid calls the backup ``grad``: the ``(param, grad)`` pairs of the Optimizer base
        self.params_grads = [(p, _backup_var(program, p, f"{p.name}.tmp"))
                             for p in _averaged_params(program)]
        if not self.params_grads:
            raise ValueError("ModelAverage: the default main program has no parameter to "
                             "average (build it after the network, inside its program_guard)")
        for param, backup in self.params_grads:
            with program._optimized_guard([param, backup]), name_scope("move_average"):
                self._append_average_accumulate_op(param)
        self.apply_program = Program()
        with program_guard(self.apply_program, Program()):
            for pair in self.params_grads:
                self._add_average_apply_op(self.apply_program.global_block(), pair)
        self.restore_program = Program()
        with program_guard(self.restore_program, Program()):
            block = self.restore_program.global_block()
            for param, backup in self.params_grads:
                tensor.assign(_clone(block, backup), _clone(block, param))

    def _add_accumulator(self, name: str, param: Parameter, dtype: str | None = None,
                         shape: list[int] | None = None) -> Variable:
        block = param.block.program.global_block()
        var = block.create_var(name=unique_name.generate(f"{param.name}_{name}"),
                               shape=list(shape or param.shape), dtype=dtype or param.dtype,
                               persistable=True, stop_gradient=True)
        LayerHelper("average_accumulate").set_variable_initializer(var,
                                                                   ConstantInitializer(0.0))
        self._accumulators.setdefault(name, {})[param.name] = var
        return var

    def _get_accumulator(self, name: str, param: Parameter) -> Variable:
        return self._accumulators[name][param.name]

    def _append_average_accumulate_op(self, param: Parameter) -> None:
        sums = [self._add_accumulator(f"sum_{i}", param) for i in (1, 2, 3)]
        counters = [self._add_accumulator(n, param, "int64", [1])
                    for n in ("num_accumulates", "old_num_accumulates", "num_updates")]
        names = ("sum_1", "sum_2", "sum_3", "num_accumulates", "old_num_accumulates",
                 "num_updates")
        state = dict(zip(names, sums + counters, strict=True))
        param.block.program.global_block().append_op(
            "average_accumulates",
            inputs={"param": [param], **{f"in_{n}": [v] for n, v in state.items()}},
            outputs={f"out_{n}": [v] for n, v in state.items()},
            attrs={"average_window": self.average_window,
                   "min_average_window": self.min_average_window,
                   "max_average_window": self.max_average_window})

    def _add_average_apply_op(self, block, pair: tuple[Parameter, Variable]) -> None:
        param, backup = _clone(block, pair[0]), _clone(block, pair[1])
        acc = {n: _clone(block, self._get_accumulator(n, pair[0]))
               for n in ("sum_1", "sum_2", "sum_3", "num_accumulates", "old_num_accumulates")}
        tensor.assign(param, backup)  # back the parameter up
        count = tensor.sums([acc["num_accumulates"], acc["old_num_accumulates"]])
        total = tensor.sums([acc["sum_1"], acc["sum_2"], acc["sum_3"]])
        count = tensor.cast(count, param.dtype)
        total = tensor.cast(total, param.dtype)
        block.append_op("elementwise_div", inputs={"X": [total], "Y": [count]},
                        outputs={"Out": [param]}, attrs={"axis": -1})



class ExponentialMovingAverage(_Averaging):
    """Exponential moving average of the parameters, following Fluid 1.8's
    ``fluid.optimizer.ExponentialMovingAverage``.

    ``update()`` (called once, after ``minimize``, in the training program) appends, for
    every parameter but those with ``do_model_average=False``::

        ema = decay * ema + (1 - decay) * param      # ema: <name><param>_ema_<n>, zeros

    and a step counter ``@EMA_STEP_COUNTER@`` incremented at the start of each run. ``apply``
    writes the bias-corrected average ``ema / (1 - decay^t)`` (``t`` the counter; no
    correction while it is 0) into the parameters.

    Parameters
    ----------
    decay : float
        In [0, 1). Kept in the persistable float32 variable ``scheduled_ema_decay_rate``.
    thres_steps : Variable, optional
        A step counter (e.g. ``layers.autoincreased_step_counter()``): the decay used is then
        ``min(decay, (1 + thres_steps) / (10 + thres_steps))``, recomputed each step by ops
        (with the LR-schedule role) appended to the main program when the object is built.
    name : str, optional
        Prefix of the EMA variables' names.

    Notes
    -----
    As Fluid 1.8's apply program, the bias correction is written back into the EMA
    variables themselves (``ema = ema / (1 - decay^t)``, then ``param = ema``), with ``decay``
    the current (last scheduled) rate: applying twice without training in between corrects
    twice, and training after an apply continues from the corrected averages. The decay
    variable is cast to the parameters' dtype where it is not float32 (Fluid would refuse the
    mixed-dtype ops).
    """

    _step_counter_name = "@EMA_STEP_COUNTER@"

    def __init__(self, decay: float = 0.999, thres_steps: Variable | None = None,
                 name: str | None = None) -> None:
        refuse_in_dygraph("ExponentialMovingAverage")
        if isinstance(decay, bool) or not isinstance(decay, (int, float)):
            raise TypeError(f"decay must be a number, got {type(decay).__name__}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay!r}")
        if thres_steps is not None and not isinstance(thres_steps, Variable):
            raise TypeError(f"thres_steps must be a Variable (a step counter) or None, got "
                            f"{type(thres_steps).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self._decay = float(decay)
        self._thres_steps = thres_steps
        self._name = name if name is not None else ""
        program = default_main_program()
        self._program = program
        self._decay_var = self._get_ema_decay()
        self._params_tmps = [(p, _backup_var(program, p, f"{self._name}{p.name}.ema_tmp"))
                             for p in _averaged_params(program)]
        if not self._params_tmps:
            raise ValueError("ExponentialMovingAverage: the default main program has no "
                             "parameter to average (build it after the network, inside its "
                             "program_guard)")
        self._ema_vars: dict[str, Variable] = {}
        for param, tmp in self._params_tmps:
            with program._optimized_guard([param, tmp]), name_scope("moving_average"):
                self._ema_vars[param.name] = tensor.create_global_var(
                    list(param.shape), 0.0, param.dtype, persistable=True,
                    name=unique_name.generate(f"{self._name}{param.name}_ema"))
        self._updated = False
        self.apply_program = Program()
        with program_guard(self.apply_program, default_startup_program()):
            block = self.apply_program.global_block()
            decay_pow, global_step = self._get_decay_pow(block)
            for param, tmp in self._params_tmps:
                p, t = _clone(block, param), _clone(block, tmp)
                ema = _clone(block, self._ema_vars[param.name])
                tensor.assign(p, t)
                pow_p = decay_pow if p.dtype == decay_pow.dtype else tensor.cast(decay_pow,
                                                                                p.dtype)
                # bias correction, written into the EMA as Fluid 1.8 does
                with control_flow.Switch() as switch, switch.case(global_step > 0):
                    tensor.assign(ema / (1.0 - pow_p), ema)
                tensor.assign(ema, p)
        self.restore_program = Program()
        with program_guard(self.restore_program, Program()):
            block = self.restore_program.global_block()
            for param, tmp in self._params_tmps:
                tensor.assign(_clone(block, tmp), _clone(block, param))

    def _get_ema_decay(self) -> Variable:
        program = default_main_program()
        with program._lr_schedule_guard():
            decay_var = tensor.create_global_var([1], self._decay, "float32", persistable=True,
                                                 name="scheduled_ema_decay_rate")
            if self._thres_steps is not None:
                steps = tensor.cast(self._thres_steps, "float32")
                decay_t = (steps + 1.0) / (steps + 10.0)
                with control_flow.Switch() as switch:
                    with switch.case(decay_t < self._decay):
                        tensor.assign(decay_t, decay_var)
                    with switch.default():
                        tensor.assign(np.array([self._decay], dtype=np.float32), decay_var)
        return decay_var

    def _get_decay_pow(self, block) -> tuple[Variable, Variable]:
        counter = tensor.create_global_var([1], 0, "int64", persistable=True,
                                           name=self._step_counter_name)
        global_step = tensor.cast(counter, "float32")
        decay_var = _clone(block, self._decay_var)
        return nn.elementwise_pow(decay_var, global_step), global_step

    def update(self) -> None:
        """Append the EMA update ops (and the step counter) to the training program; call it
        once, after ``minimize``."""
        if default_main_program() is not self._program:
            raise ValueError("ExponentialMovingAverage.update() must be called with the "
                             "program the object was built in as the default main program")
        if self._updated:
            raise ValueError("ExponentialMovingAverage.update() was already called: the EMA "
                             "ops would run twice per step")
        self._updated = True
        autoincreased_step_counter(counter_name=self._step_counter_name)
        for param, tmp in self._params_tmps:
            with self._program._optimized_guard([param, tmp]), name_scope("moving_average"):
                ema = self._ema_vars[param.name]
                decay = (self._decay_var if param.dtype == self._decay_var.dtype
                         else tensor.cast(self._decay_var, param.dtype))
                tensor.assign(ema * decay + param * (1 - decay), ema)

