"""``fluid.data`` (Fluid 1.8's ``fluid/data.py``): an input with its whole shape declared."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .framework import Variable, convert_dtype, default_main_program

__all__ = ["data"]


def data(name: str, shape: Sequence[int | None], dtype: Any = "float32",
         lod_level: int = 0) -> Variable:
    """Declare an input fed at run time, with its whole shape (Fluid 1.8's ``fluid.data``).

    Unlike ``layers.data`` no batch dimension is prepended: ``shape`` is the shape of what is
    fed, with ``None`` or ``-1`` for a dimension of any size (usually the batch). Every run
    checks the fed value against it (its rank, each fixed dimension and its dtype) and raises
    a ValueError or TypeError naming the input before any op runs.

    Parameters
    ----------
    name : str
        The key of this input in ``Executor.run(feed=...)``.
    shape : list or tuple of int or None
    dtype : str or numpy dtype
    lod_level : int
        Levels of LoD the fed LoDTensor carries (0: a plain tensor).

    Returns
    -------
    Variable
        A global-block variable with ``stop_gradient=True`` and ``is_data=True``.
    """
    if not isinstance(name, str):
        raise TypeError(f"fluid.data: name must be a str, got {type(name).__name__}")
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"fluid.data: shape must be a list or tuple, got "
                        f"{type(shape).__name__}")
    dims = []
    for d in shape:
        if d is None:
            dims.append(-1)
        elif isinstance(d, bool) or not isinstance(d, int) or d < -1:
            raise ValueError(f"fluid.data: shape {list(shape)} of {name!r}: each dimension must "
                             "be an int >= 0, or -1 or None for any size")
        else:
            dims.append(int(d))
    if not isinstance(lod_level, int) or lod_level < 0:
        raise ValueError(f"fluid.data: lod_level must be an int >= 0, got {lod_level!r}")
    block = default_main_program().global_block()
    return block.create_var(name=name, shape=dims, dtype=convert_dtype(dtype), lod_level=lod_level,
                            stop_gradient=True, is_data=True, need_check_feed=True)
