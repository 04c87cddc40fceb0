"""Learning-rate schedules: ops with the LRSched role, computed once per step."""

from __future__ import annotations

from collections.abc import Sequence

from ..framework import Variable, default_main_program
from ..initializer import ConstantInitializer
from ..layer_helper import LayerHelper
from . import tensor
from .control_flow import Switch
from .nn import floor

__all__ = [
    "autoincreased_step_counter", "exponential_decay", "piecewise_decay",
]

LR_COUNTER = "@LR_DECAY_COUNTER@"


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


def exponential_decay(learning_rate: float, decay_steps: int, decay_rate: float,
                      staircase: bool = False) -> Variable:
    """``lr * decay_rate ** (step / decay_steps)`` (floored exponent when ``staircase``)."""
    if decay_steps <= 0:
        raise ValueError(f"decay_steps must be > 0, got {decay_steps}")
    with default_main_program()._lr_schedule_guard():
        global_step = _decay_step_counter()
        div_res = global_step / float(decay_steps)
        if staircase:
            div_res = floor(div_res)
        return float(learning_rate) * (float(decay_rate) ** div_res)


def piecewise_decay(boundaries: Sequence[float], values: Sequence[float]) -> Variable:
    """``values[i]`` while ``step < boundaries[i]``, ``values[-1]`` after the last boundary."""
    if len(values) - len(boundaries) != 1:
        raise ValueError(f"piecewise_decay needs len(values) == len(boundaries) + 1, got "
                         f"{len(values)} values and {len(boundaries)} boundaries")
    if list(boundaries) != sorted(boundaries):
        raise ValueError(f"piecewise_decay boundaries must increase, got {list(boundaries)}")
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
