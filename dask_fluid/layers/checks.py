"""Fluid 1.8's build-time input checks of its layers (``python/paddle/fluid/data_feeder.py``).

A layer calls :func:`check_variable_and_dtype` on each tensor input, with the dtypes Fluid's
layer of that name lists for that argument, and :func:`check_type` on its other arguments,
before any shape check: a wrong input then fails with a TypeError where the program is built,
naming the layer, the argument and what was received, instead of a ValueError of a later
shape check or an error when the program runs.

As in Fluid, the checks are skipped inside ``fluid.dygraph.guard``: there the op runs at once
and its kernel reports a wrong input on the same line, and a check per call would slow every
step of a dygraph loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..framework import Variable, convert_dtype, in_dygraph_mode

__all__ = ["ArgumentAssertionError", "check_dtype", "check_type", "check_variable_and_dtype"]


class ArgumentAssertionError(ValueError, AssertionError):
    """An argument that Fluid 1.8's layer refuses with an ``assert`` (an empty shape, two -1
    dims in ``reshape``): an AssertionError as there, for code written against Fluid, and a
    ValueError as every other bad value here. Raised explicitly, so ``python -O`` keeps it."""


def _words(names: Sequence[str]) -> str:
    """``["a", "b", "c"]`` as ``"a, b or c"``, how the messages list what is allowed."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _type_name(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return _words([t.__name__ for t in types])


def check_type(input: Any, input_name: str, expected_type: type | tuple[type, ...],
               op_name: str, extra_message: str = "") -> None:
    """Fluid's ``check_type``: ``input`` an instance of ``expected_type``.

    Parameters
    ----------
    input : Any
        The argument as the layer received it.
    input_name : str
        The argument's name in Fluid's layer (``"x"``, ``"input"``).
    expected_type : type or tuple of type
    op_name : str
        The layer's name, as Fluid's layer names itself in the message.
    extra_message : str
        Appended to the message.

    Raises
    ------
    TypeError
        ``input`` is of another type (outside dygraph mode).
    """
    if in_dygraph_mode():
        return
    if not isinstance(input, expected_type):
        message = (f"The type of '{input_name}' in {op_name} must be "
                   f"{_type_name(expected_type)}, but received {type(input).__name__}.")
        raise TypeError(f"{message} {extra_message}".rstrip())


def check_dtype(input_dtype: Any, input_name: str, expected_dtype: Sequence[str],
                op_name: str, extra_message: str = "") -> None:
    """Fluid's ``check_dtype``: ``input_dtype`` one of ``expected_dtype``.

    Parameters
    ----------
    input_dtype : Any
        A dtype in any spelling :func:`~dask_fluid.framework.convert_dtype` reads.
    input_name, op_name, extra_message : str
        As in :func:`check_type`.
    expected_dtype : sequence of str
        Fluid's list for this layer and argument (``["float32", "float64"]``).

    Raises
    ------
    TypeError
        Another dtype (outside dygraph mode).
    """
    if in_dygraph_mode():
        return
    # Fluid passes ('bool') for reduce_all, a str, not a tuple: a one-name list is meant
    expected = [expected_dtype] if isinstance(expected_dtype, str) else list(expected_dtype)
    dtype = convert_dtype(input_dtype)
    if dtype not in expected:
        message = (f"The data type of '{input_name}' in {op_name} must be {_words(expected)}, "
                   f"but received {dtype}.")
        raise TypeError(f"{message} {extra_message}".rstrip())


def check_variable_and_dtype(input: Any, input_name: str, expected_dtype: Sequence[str],
                             op_name: str, extra_message: str = "") -> None:
    """Fluid's ``check_variable_and_dtype``: ``input`` a Variable of one of
    ``expected_dtype``.

    Raises
    ------
    TypeError
        ``input`` is not a Variable (a LoDTensor or numpy array passed where a program's
        Variable belongs), or of another dtype (outside dygraph mode).
    """
    if in_dygraph_mode():
        return
    check_type(input, input_name, Variable, op_name, extra_message)
    check_dtype(input.dtype, input_name, expected_dtype, op_name, extra_message)
