"""Comparison layers of Fluid 1.8's layers/control_flow.py besides less_than and equal: less_equal,
greater_than, greater_equal, not_equal."""

from __future__ import annotations

from ..framework import Variable
from .tensor import _check_var, _compare

__all__: list[str] = ["greater_equal", "greater_than", "less_equal", "not_equal"]


def _build(op_type: str, x: Variable, y: Variable, cond: Variable | None) -> Variable:
    # as control_flow.py: a new bool, stop_gradient output unless ``cond`` is given
    _check_var(x, "x", op_type)
    _check_var(y, "y", op_type)
    if cond is not None:
        _check_var(cond, "cond", op_type)
    return _compare(op_type, x, y, cond)


def less_equal(x: Variable, y: Variable, cond: Variable | None = None) -> Variable:
    """Element-wise ``x <= y`` (bool, ``y`` broadcast as for ``less_than``); Fluid 1.8's
    ``layers.less_equal``."""
    return _build("less_equal", x, y, cond)


def greater_than(x: Variable, y: Variable, cond: Variable | None = None) -> Variable:
    """Element-wise ``x > y`` (bool); Fluid 1.8's ``layers.greater_than``."""
    return _build("greater_than", x, y, cond)


def greater_equal(x: Variable, y: Variable, cond: Variable | None = None) -> Variable:
    """Element-wise ``x >= y`` (bool); Fluid 1.8's ``layers.greater_equal``."""
    return _build("greater_equal", x, y, cond)


def not_equal(x: Variable, y: Variable, cond: Variable | None = None) -> Variable:
    """Element-wise ``x != y`` (bool); Fluid 1.8's ``layers.not_equal``."""
    return _build("not_equal", x, y, cond)
