"""``layers.py_func``: a Python function as an op (kernel: :mod:`dask_fluid.ops.py_func_ops`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from ..ops.py_func_ops import register_function

__all__ = ["py_func"]


def _as_list(value: Any, what: str) -> list[Variable]:
    if value is None:
        return []
    if isinstance(value, Variable):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, Variable) for v in value):
        return list(value)
    raise TypeError(f"py_func: {what} must be a Variable or a list/tuple of Variables, got "
                    f"{type(value).__name__}")


def py_func(func: Callable[..., Any], x: Any, out: Any,
            backward_func: Callable[..., Any] | None = None,
            skip_vars_in_backward_input: Variable | Sequence[Variable] | None = None) -> Any:
    """Run ``func`` as an op (Fluid 1.8's ``layers.py_func``).

    Parameters
    ----------
    func : callable
        Called with one LoDTensor per variable of ``x``; returns the values of ``out``
        (numpy arrays or LoDTensors; None when ``out`` is None).
    x : Variable or list of Variable or None
    out : Variable or list of Variable or None
        Variables the caller created, with their shapes (``block.create_var``).
    backward_func : callable, optional
        Called with the inputs, outputs and output gradients (less
        ``skip_vars_in_backward_input``); returns one gradient (or None) per input. Without
        it the op has no gradient.
    skip_vars_in_backward_input : Variable or list of Variable, optional
        Forward inputs or outputs the backward function does not need.

    Returns
    -------
    Variable or list of Variable or None
        ``out``.

    Raises
    ------
    TypeError
        ``func`` is not callable, or ``x``/``out`` are not Variables.
    ValueError
        An output has no shape, or a skipped variable is none of the inputs and outputs.
    """
    if not callable(func):
        raise TypeError(f"py_func: func must be callable, got {type(func).__name__}")
    if backward_func is not None and not callable(backward_func):
        raise TypeError("py_func: backward_func must be callable")
    xs, outs = _as_list(x, "x"), _as_list(out, "out")
    for each in outs:
        if not each.shape:
            raise ValueError("Output shapes of py_func op should be provided by users "
                             f"manually: {each.name!r} has none")
    skip: list[str] = []
    if backward_func is not None and skip_vars_in_backward_input is not None:
        known = {v.name for v in xs + outs}
        for v in _as_list(skip_vars_in_backward_input, "skip_vars_in_backward_input"):
            if v.name not in known:
                raise ValueError(f"Variable {v.name} is not found in forward inputs and "
                                 "outputs")
            skip.append(v.name)
    helper = LayerHelper("py_func")
    helper.append_op("py_func", inputs={"X": xs}, outputs={"Out": outs},
                     attrs={"forward_callable_id": register_function(func),
                            "backward_callable_id": -1 if backward_func is None
                            else register_function(backward_func),
                            "backward_skip_vars": sorted(skip)})
    return out
