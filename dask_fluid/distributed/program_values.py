"""A program's persistable variables, and values given for them to start a job from.

Shared by both runtimes: ``train_pserver`` and ``train_collective`` take ``initial_values`` (a
full array per persistable variable of the original program, as their results give them) and
refuse names or shapes the program does not have before anything runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..framework import Program, VarType
from ..ops.registry import to_host

__all__ = ["checked_values", "persistable_names"]


def persistable_names(main: Program) -> list[str]:
    """The persistable variables of ``main`` that hold tensors (not ids, not data layers)."""
    return sorted(v.name for v in main.global_block().vars.values()
                  if v.persistable and v.type != VarType.RAW and not v.is_data)


def checked_values(values: Mapping[str, Any], main: Program) -> dict[str, np.ndarray]:
    """``initial_values`` as numpy arrays of the program's persistable variables, with their
    shapes (a dim unknown in the program matches any) and dtypes.

    Raises
    ------
    ValueError
        A name is not a persistable variable of ``main``, or a shape differs from its.
    """
    block = main.global_block()
    known = set(persistable_names(main))
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"initial_values names {unknown[:8]}, which are not persistable "
                         "variables of the program")
    out = {}
    for name, value in values.items():
        array = np.asarray(to_host(value))
        shape = block.var(name).shape
        if shape is not None and (len(shape) != array.ndim or any(
                d >= 0 and d != n for d, n in zip(shape, array.shape, strict=True))):
            raise ValueError(f"initial_values[{name!r}] has shape {list(array.shape)}; the "
                             f"program's {name} has {list(shape)}")
        out[name] = array.astype(np.dtype(block.var(name).dtype), copy=False)
    return out
