"""The argument and input checks the dygraph layer classes share (:mod:`.nn`, :mod:`.nn_extra`).

A layer's input is a dygraph variable, whose shape comes from its value, or, when the layer
builds a static program (outside the guard), a program Variable whose declared shape may hold
``-1`` for a dim known only at run time: such a dim matches anything here, and the op's kernel
checks the value when it runs.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from ..framework import Variable, convert_dtype

__all__ = ["check_input", "fits", "int_list", "is_int", "known"]


def is_int(value: Any) -> bool:
    """An int (a numpy integer too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def int_list(value: Any, n: int, arg: str, layer: str, minimum: int | None = None
             ) -> list[int]:
    """Fluid's ``utils.convert_to_list``: an int repeated ``n`` times, or ``n`` ints (each at
    least ``minimum`` when given).

    Raises
    ------
    ValueError
        Anything else.
    """
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n or not all(is_int(v) and (minimum is None or v >= minimum)
                                   for v in values):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"{layer}: {arg} must be an int or a list/tuple of {n} ints{bound}, "
                         f"got {value!r}")
    return [int(v) for v in values]


def check_input(x: Any, layer: str, *, arg: str = "input",
                rank: int | Sequence[int] | None = None, dtype: str | None = None,
                dtypes: Sequence[str] | None = None) -> tuple[int, ...]:
    """Check that ``x`` is a variable of rank ``rank`` and of the layer's ``dtype`` (or one of
    ``dtypes``); its shape.

    Raises
    ------
    TypeError
        ``x`` is not a Variable, or of another dtype.
    ValueError
        ``x`` has another rank.
    """
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: the {arg} must be a dygraph variable (to_variable) or, "
                        f"outside the guard, a Variable of the program, got "
                        f"{type(x).__name__}")
    # the dtype first, as Fluid's check_variable_and_dtype comes before a layer's rank checks
    have = convert_dtype(x.dtype)
    if dtype is not None and have != dtype:
        raise TypeError(f"{layer}: the {arg} {x.name!r} is {have}, the layer's parameters are "
                        f"{dtype}: create the layer with dtype={have!r} or cast the input "
                        "(astype)")
    if dtypes is not None and have not in dtypes:
        raise TypeError(f"{layer}: the {arg} {x.name!r} must be of dtype "
                        f"{' or '.join(dtypes)}, got {have}")
    shape = tuple(int(d) for d in (x.shape or ()))
    if rank is not None:
        ranks = (rank,) if isinstance(rank, int) else tuple(rank)
        if len(shape) not in ranks:
            want = " or ".join(str(r) for r in ranks)
            raise ValueError(f"{layer}: the {arg} {x.name!r} must have rank {want} ({want}-D), "
                             f"got shape {list(shape)}")
    return shape


def fits(dim: int, want: int) -> bool:
    """A declared dim matches ``want``: equal, or either unknown (``-1``) until run time."""
    return dim < 0 or want < 0 or dim == want


def known(*dims: int) -> int:
    """The first known one of ``dims`` (the same dim of several inputs), else ``-1``."""
    return next((d for d in dims if d >= 0), -1)
