"""Learning-rate schedules: ops with the LRSched role, computed once per step."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..framework import Variable, default_main_program, in_dygraph_mode
from ..initializer import ConstantInitializer
from ..layer_helper import LayerHelper
from . import tensor
from .activations import ceil
from .control_flow import Switch
from .nn import cos, elementwise_min, exp, floor

__all__ = [
    "autoincreased_step_counter", "cosine_decay", "exponential_decay", "inverse_time_decay",
    "linear_lr_warmup", "natural_exp_decay", "noam_decay", "piecewise_decay",
    "polynomial_decay",
]

LR_COUNTER = "@LR_DECAY_COUNTER@"

#: fluid.dygraph's decay classes by name: in dygraph mode each function below returns one (as
#: Fluid 1.8's do); :mod:`dask_fluid.dygraph.learning_rate_scheduler`, above this module,
#: registers them when imported
_DYGRAPH_DECAYS: dict[str, Callable[..., Any]] = {}


def register_dygraph_decays(classes: dict[str, Callable[..., Any]]) -> None:
    """Give the decay functions their dygraph classes (name -> class)."""
    _DYGRAPH_DECAYS.update(classes)


def _dygraph_decay(name: str, *args: Any, **kwargs: Any) -> Any:
    try:
        cls = _DYGRAPH_DECAYS[name]
    except KeyError:
        raise RuntimeError(f"fluid.dygraph.{name} is not registered: import dask_fluid (its "
                           "dygraph package registers the decays)") from None
    return cls(*args, **kwargs)


def autoincreased_step_counter(counter_name: str = LR_COUNTER, begin: int = 1,
                               step: int = 1) -> Variable:
    """A persistable int64 counter incremented by an op prepended to the main program."""
    helper = LayerHelper("global_step_counter")
    block = helper.main_program.global_block()
    if block.has_var(counter_name):
        return block.var(counter_name)
    counter = block.create_var(name=counter_name, dtype="int64", shape=[1], persistable=True,
                               stop_gradient=True)
    helper.set_variable_initializer(counter, ConstantInitializer(float(begin - 1)))
    block._prepend_op("increment", inputs={"X": [counter]}, outputs={"Out": [counter]},
                      attrs={"step": float(step)})
    return counter


def _decay_step_counter(begin: int = 0) -> Variable:
    return tensor.cast(autoincreased_step_counter(LR_COUNTER, begin, 1), "float32")


def _decay_ratio(decay_steps: float, staircase: bool) -> Variable:
    """``step / decay_steps``, floored when ``staircase``."""
    if decay_steps <= 0:
        raise ValueError(f"decay_steps must be > 0, got {decay_steps}")
    div_res = _decay_step_counter() / float(decay_steps)
    return floor(div_res) if staircase else div_res


def exponential_decay(learning_rate: float, decay_steps: int, decay_rate: float,
                      staircase: bool = False) -> Variable:
    """``lr * decay_rate ** (step / decay_steps)`` (floored exponent when ``staircase``);
    in dygraph mode a ``fluid.dygraph.ExponentialDecay`` (as every decay here: its class)."""
    if in_dygraph_mode():
        return _dygraph_decay("ExponentialDecay", learning_rate, decay_steps, decay_rate,
                              staircase)
    with default_main_program()._lr_schedule_guard():
        return float(learning_rate) * (float(decay_rate) ** _decay_ratio(decay_steps, staircase))


def piecewise_decay(boundaries: Sequence[float], values: Sequence[float]) -> Variable:
    """``values[i]`` while ``step < boundaries[i]``, ``values[-1]`` after the last boundary."""
    if len(values) - len(boundaries) != 1:
        raise ValueError(f"piecewise_decay needs len(values) == len(boundaries) + 1, got "
                         f"{len(values)} values and {len(boundaries)} boundaries")
    if list(boundaries) != sorted(boundaries):
        raise ValueError(f"piecewise_decay boundaries must increase, got {list(boundaries)}")
    if in_dygraph_mode():
        return _dygraph_decay("PiecewiseDecay", boundaries, values, 0)
    with default_main_program()._lr_schedule_guard():
        global_step = _decay_step_counter()
        lr = tensor.create_global_var([1], 0.0, "float32", persistable=True,
                                      name="learning_rate")
        with Switch() as switch:
            for boundary, value in zip(boundaries, values, strict=False):
                boundary_val = tensor.fill_constant([1], "float32", float(boundary), True)
                value_var = tensor.fill_constant([1], "float32", float(value))
                with switch.case(global_step < boundary_val):
                    tensor.assign(value_var, lr)
            last = tensor.fill_constant([1], "float32", float(values[-1]))
            with switch.default():
                tensor.assign(last, lr)
        return lr


def _check_steps(name: str, value: float) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def noam_decay(d_model: float, warmup_steps: float, learning_rate: float = 1.0) -> Variable:
    """``learning_rate * d_model ** -0.5 * min(step ** -0.5, warmup_steps ** -1.5 * step)``,
    the step counted from 1 (the Transformer's schedule)."""
    _check_steps("warmup_steps", warmup_steps)
    if in_dygraph_mode():
        return _dygraph_decay("NoamDecay", d_model, warmup_steps, learning_rate=learning_rate)
    with default_main_program()._lr_schedule_guard():
        global_step = _decay_step_counter(1)
        a = global_step ** -0.5
        b = global_step * float(warmup_steps ** -1.5)
        return elementwise_min(a, b) * float(learning_rate * d_model ** -0.5)


def natural_exp_decay(learning_rate: float, decay_steps: int, decay_rate: float,
                      staircase: bool = False) -> Variable:
    """``lr * exp(-decay_rate * step / decay_steps)`` (floored ratio when ``staircase``)."""
    if in_dygraph_mode():
        return _dygraph_decay("NaturalExpDecay", learning_rate, decay_steps, decay_rate,
                              staircase)
    with default_main_program()._lr_schedule_guard():
        return exp(_decay_ratio(decay_steps, staircase) * float(-decay_rate)) * \
            float(learning_rate)


def inverse_time_decay(learning_rate: float, decay_steps: int, decay_rate: float,
                       staircase: bool = False) -> Variable:
    """``lr / (1 + decay_rate * step / decay_steps)`` (floored ratio when ``staircase``)."""
    if in_dygraph_mode():
        return _dygraph_decay("InverseTimeDecay", learning_rate, decay_steps, decay_rate,
                              staircase)
    with default_main_program()._lr_schedule_guard():
        return float(learning_rate) / (_decay_ratio(decay_steps, staircase) *
                                       float(decay_rate) + 1.0)


def polynomial_decay(learning_rate: float, decay_steps: int,
                     end_learning_rate: float = 0.0001, power: float = 1.0,
                     cycle: bool = False) -> Variable:
    """``(lr - end) * (1 - min(step, decay_steps) / decay_steps) ** power + end``; with
    ``cycle`` the decay starts over every ``decay_steps``: ``(lr - end) * (1 - step / (decay_steps
    * ceil(step / decay_steps))) ** power + end`` (the ceil taken as 1 at step 0), as Fluid
    1.8 builds it (``ceil``, and a ``Switch`` on ``step == 0``)."""
    _check_steps("decay_steps", decay_steps)
    if in_dygraph_mode():
        return _dygraph_decay("PolynomialDecay", learning_rate, decay_steps, end_learning_rate,
                              power, cycle)
    with default_main_program()._lr_schedule_guard():
        global_step = _decay_step_counter()
        if cycle:
            div_res = ceil(global_step / float(decay_steps))
            zero = tensor.fill_constant([1], "float32", 0.0)
            one = tensor.fill_constant([1], "float32", 1.0)
            with Switch() as switch:
                with switch.case(tensor.equal(global_step, zero)):
                    tensor.assign(one, div_res)
            frac = (global_step / (div_res * float(decay_steps))) * -1.0 + 1.0
        else:
            steps = tensor.fill_constant([1], "float32", float(decay_steps))
            global_step = elementwise_min(global_step, steps)
            frac = (global_step / float(decay_steps)) * -1.0 + 1.0
        return (frac ** float(power)) * float(learning_rate - end_learning_rate) + \
            float(end_learning_rate)


def cosine_decay(learning_rate: float, step_each_epoch: int, epochs: int) -> Variable:
    """``lr * 0.5 * (cos(floor(step / step_each_epoch) * pi / epochs) + 1)``."""
    _check_steps("step_each_epoch", step_each_epoch)
    _check_steps("epochs", epochs)
    if in_dygraph_mode():
        return _dygraph_decay("CosineDecay", learning_rate, step_each_epoch, epochs)
    with default_main_program()._lr_schedule_guard():
        cur_epoch = floor(_decay_step_counter() / float(step_each_epoch))
        return (cos(cur_epoch * float(math.pi / epochs)) + 1.0) * float(learning_rate * 0.5)


def linear_lr_warmup(learning_rate: float | Variable, warmup_steps: int, start_lr: float,
                     end_lr: float) -> Variable:
    """From ``start_lr`` linearly to ``end_lr`` over ``warmup_steps`` steps, then
    ``learning_rate`` (a float or another schedule)."""
    _check_steps("warmup_steps", warmup_steps)
    if in_dygraph_mode():
        return _dygraph_decay("LinearLrWarmup", learning_rate, warmup_steps, start_lr, end_lr)
    dtype = learning_rate.dtype if isinstance(learning_rate, Variable) else "float32"
    linear_step = float(end_lr) - float(start_lr)
    with default_main_program()._lr_schedule_guard():
        lr = tensor.create_global_var([1], 0.0, dtype, persistable=True,
                                      name="learning_rate_warmup")
        global_step = _decay_step_counter()
        with Switch() as switch:
            with switch.case(global_step < float(warmup_steps)):
                decayed = (global_step / float(warmup_steps)) * linear_step + float(start_lr)
                tensor.assign(decayed, lr)
            with switch.default():
                if not isinstance(learning_rate, Variable):
                    learning_rate = tensor.fill_constant([1], dtype, float(learning_rate))
                tensor.assign(learning_rate, lr)
        return lr
