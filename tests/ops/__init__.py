"""Kernel tests; :func:`run_op` calls a registered kernel the way the executor does."""

from __future__ import annotations

from typing import Any

from dask_fluid.ops import registry


def run_op(type: str, ins: dict[str, list[Any]], attrs: dict | None = None,
           outs: tuple[str, ...] | None = None) -> dict[str, list[Any]]:
    """Run ``type``'s kernel on ``ins`` with its registered attr defaults updated by ``attrs``,
    binding ``outs`` (default: every output slot)."""
    opdef = registry.get(type)
    full = dict(opdef.attrs)
    full.update(attrs or {})
    return opdef.kernel(ins, full, tuple(outs if outs is not None else opdef.outputs))
