"""``fluid.layers.device``: the module Fluid 1.8 still ships for ``get_places``.

Fluid 1.8's ``get_places`` builds a ``PLACE_LIST`` variable for the ``ParallelDo`` op, which
1.8 no longer has; the module exports nothing (``__all__ = []``), and scripts of Fluid's book
import it without calling it. Data parallelism over places is
``CompiledProgram(...).with_data_parallel`` here, as in Fluid 1.8.
"""

from __future__ import annotations

from typing import Any

__all__: list[str] = []


def get_places(device_count: int | None = None, device_type: str | None = None) -> Any:
    """Not implemented: the list of places ``ParallelDo`` took (gone in Fluid 1.8).

    Raises
    ------
    NotImplementedError
        Always; use ``fluid.CompiledProgram(program).with_data_parallel(...)`` with
        ``places=`` to run a program on several places.
    """
    raise NotImplementedError(
        "fluid.layers.device.get_places is not implemented: it fed ParallelDo, which Fluid "
        "1.8 removed; run the program on several places with "
        "fluid.CompiledProgram(program).with_data_parallel(loss_name=..., places=...)")
