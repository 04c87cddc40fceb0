"""A trainer's rows as the feeds of its program, and the check of what each step fetched.

Both runtimes (pserver and collective) feed their trainers through here, so that a mistake in
the data is refused the same way in every mode: a cast that would change values (floats with a
fractional part, or NaN, for an integer data layer) is an error naming the layer, not a silent
truncation; and a loss that becomes NaN or infinite stops training at that step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...framework import Program

__all__ = ["check_data_keys", "check_finite", "feed_names", "prepare_feeds"]


def feed_names(program: Program) -> list[str]:
    """The names of ``program``'s data layers, in the order they were declared."""
    return [v.name for v in program.global_block().vars.values() if v.is_data]


def check_data_keys(data: Any, names: Sequence[str]) -> None:
    """Every key of ``data`` (a mapping, or a list of per-trainer mappings) must be a data
    layer in ``names``: a typo would otherwise train on nothing, silently.

    Raises
    ------
    ValueError
        Naming the keys that are not data layers, and the data layers.
    """
    dicts = data if isinstance(data, (list, tuple)) else [data]
    for d in dicts:
        if not isinstance(d, Mapping):
            continue
        extra = sorted(set(d) - set(names))
        if extra:
            raise ValueError(f"data has keys {extra} that are not data layers of the program; "
                             f"its data layers are {list(names)}")


def prepare_feeds(program: Program, arrays: Mapping[str, Any], names: Sequence[str]
                  ) -> dict[str, Any]:
    """``arrays`` cast to the data layers' dtypes, label columns given their trailing 1, once.

    Arrays may be numpy or CuPy (anything with numpy's array methods); they keep their kind.

    Raises
    ------
    ValueError
        A layer of ``names`` has no data, or an integer layer's data has non-integer values.
    """
    block = program.global_block()
    out = {}
    for name in names:
        if name not in arrays:
            raise ValueError(f"no data for the data layer {name!r}; data has {sorted(arrays)}")
        arr = arrays[name]
        if not hasattr(arr, "__cuda_array_interface__"):
            arr = np.asarray(arr)
        var = block.var(name)
        target = np.dtype(var.dtype)
        if arr.dtype != target:
            if target.kind in "iu" and arr.dtype.kind == "f":
                flat = arr.reshape(-1)
                bad = ~np.isfinite(flat) | (flat != flat.round())
                if bool(bad.any()):
                    first = int(bad.argmax())
                    raise ValueError(f"the data layer {name!r} is {var.dtype}, but its data has "
                                     f"non-integer values (e.g. {float(flat[first])!r} at "
                                     f"flat index {first}); labels and ids must be whole "
                                     "numbers: fix the data or cast it yourself")
            arr = arr.astype(target)
        if var.shape is not None and arr.ndim == len(var.shape) - 1 and var.shape[-1] == 1:
            arr = arr.reshape(*arr.shape, 1)
        out[name] = arr if arr.flags.c_contiguous else arr.copy(order="C")
    return out


def check_finite(names: Sequence[str], fetched: Sequence[Any], epoch: int, step: int) -> None:
    """Stop at the first step whose fetched values (the loss) are NaN or infinite: training
    diverged, and every later step would only spread NaN through the parameters.

    Raises
    ------
    FloatingPointError
        Naming the fetched variable, the step and the epoch.
    """
    for name, value in zip(names, fetched, strict=True):
        value = np.asarray(value)
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise FloatingPointError(f"{name} became {value.reshape(-1)[0]} at step {step} "
                                     f"(epoch {epoch}): training diverged; lower the learning "
                                     "rate, scale the inputs, or clip the gradients")
