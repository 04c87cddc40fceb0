"""The ``py_func`` op (Fluid 1.8's ``layers.py_func``): a Python function of this process as an
op. ``forward_callable_id`` and ``backward_callable_id`` index :data:`REGISTRY`, which
``layers.py_func`` fills; the ids mean nothing in another process, so a program holding a
``py_func`` runs where it was built (a Dask worker or a launched process that rebuilt the
program registers its own functions).

The function gets each input as a :class:`~dask_fluid.lod.LoDTensor` (``np.array(x)`` reads it)
and returns None, one value, or a list/tuple of one value per output: numpy arrays or
LoDTensors (whose LoD the output takes). The gradient op is another ``py_func`` calling the
backward function with the forward inputs, outputs and output gradients (minus
``backward_skip_vars``); it returns one gradient (or None: zeros) per forward input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..lod import LoDTensor
from .registry import GRAD, LOD_KEY, register

#: the functions of ``layers.py_func``, by id (Fluid's ``PyFuncRegistry``)
REGISTRY: list[Callable[..., Any]] = []


def register_function(fn: Callable[..., Any]) -> int:
    """``fn``'s id (registered once per function object)."""
    for i, known in enumerate(REGISTRY):
        if known is fn:
            return i
    REGISTRY.append(fn)
    return len(REGISTRY) - 1


def _grad_maker(op: Any) -> list[dict]:
    backward = int(op.attrs.get("backward_callable_id", -1))
    if backward < 0:
        return []  # no backward function: no gradient, as in Fluid
    skip = set(op.attrs.get("backward_skip_vars", []))
    xs, outs = list(op.inputs.get("X", [])), list(op.outputs.get("Out", []))
    ins = [n for n in xs + outs if n not in skip] + [n + GRAD for n in outs]
    return [{"type": "py_func", "inputs": {"X": ins},
             "outputs": {"Out": [n + GRAD for n in xs]},
             "attrs": {"forward_callable_id": backward, "backward_callable_id": -1,
                       "backward_skip_vars": []}}]


@register("py_func", ("X",), ("Out",),
          {"forward_callable_id": -1, "backward_callable_id": -1, "backward_skip_vars": []},
          optional=("X",), grad=_grad_maker, host=True, lod="kernel")
def py_func(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    """Out = the registered function of the inputs (module docstring)."""
    fid = int(attrs.get("forward_callable_id", -1))
    if not 0 <= fid < len(REGISTRY):
        raise ValueError(f"py_func: callable id {fid} is not registered in this process: a "
                         "program holding py_func runs in the process that built it")
    place = ctx.executor.place
    lods = attrs.get("_lods") or {}
    args = [None if v is None else LoDTensor._of(v, lod or (), place)
            for v, lod in zip(ins.get("X", []), lods.get("X", []), strict=False)]
    result = REGISTRY[fid](*args)
    names = ctx.op.output("Out")
    if result is None:
        result = []
    elif not isinstance(result, (list, tuple)):
        result = [result]
    if len(result) != len(names):
        raise ValueError(f"py_func: the function returned {len(result)} values for "
                         f"{len(names)} outputs {names}")
    values, out_lods = [], []
    for value in result:
        if value is None:
            values.append(None)
            out_lods.append(None)
            continue
        lod = value.lod() if isinstance(value, LoDTensor) else None
        array = value._require() if isinstance(value, LoDTensor) else np.asarray(value)
        values.append(ctx.executor.to_place(array))
        out_lods.append([tuple(level) for level in lod] if lod else None)
    return {"Out": values, LOD_KEY: {"Out": out_lods}}
