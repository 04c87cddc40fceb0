"""``memory_optimize`` and ``release_memory``: deprecated in Fluid 1.8, where they change
nothing and say so (Fluid 1.8's ``transpiler/memory_optimization_transpiler.py``).

Fluid 1.8 frees each temporary after its last reader by default; dask_fluid's executor drops
its references the same way, so a 1.x script that still calls these runs as it does on
Fluid 1.8: unchanged, with the warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from ..framework import Program

__all__ = ["memory_optimize", "release_memory"]


def _check_program(fn: str, program: Any) -> None:
    if not isinstance(program, Program):
        raise TypeError(f"{fn}: input_program must be a Program, got {type(program).__name__}")


def memory_optimize(input_program: Any, skip_opt_set: Iterable[str] | None = None,
                    print_log: bool = False, level: int = 0, skip_grads: bool = True) -> None:
    """Leave ``input_program`` as it is and warn, as Fluid 1.8 does (deprecated since 1.6)."""
    _check_program("memory_optimize", input_program)
    if level not in (0, 1):
        raise ValueError(f"memory_optimize: level must be 0 or 1, got {level!r}")
    warnings.warn("memory_optimize() is deprecated (as in Fluid 1.8) and changes nothing: "
                  "temporaries are already freed after their last reader", stacklevel=2)


def release_memory(input_program: Any, skip_opt_set: Iterable[str] | None = None) -> None:
    """Leave ``input_program`` as it is and warn, as Fluid 1.8 does (deprecated)."""
    _check_program("release_memory", input_program)
    warnings.warn("release_memory() is deprecated (as in Fluid 1.8) and changes nothing",
                  stacklevel=2)
