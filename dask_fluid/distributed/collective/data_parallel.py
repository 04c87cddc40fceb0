"""One data-parallel step, shared by ``train_collective`` and ``CompiledProgram`` (NCCL2 mode).

A step is forward and backward, one all-reduce of every parameter gradient (fused per dtype by
the communicator; the mean over ranks, Fluid's default ``CoeffNumDevice`` scaling), then the
optimize ops. :func:`split_program` (:mod:`dask_fluid.program_phases`) finds where the
optimize ops start and which gradients to reduce; :func:`reduce_gradients` and
:func:`broadcast_persistables` do the communication against a scope; :func:`with_allreduce`
writes the step as one program, a ``fused_allreduce`` host op between backward and optimize,
which is what a ``CompiledProgram`` with ``build_strategy.num_trainers > 1`` runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dask_fluid.framework import OP_ROLE_KEY, OpRole, Program, VarType
from dask_fluid.ops.registry import to_host
from dask_fluid.program_phases import gradient_names, optimize_start, split_program

__all__ = ["ALLREDUCE_OP", "broadcast_persistables", "gradient_names", "optimize_start",
           "persistable_names", "reduce_gradients", "split_program", "with_allreduce"]

#: the op :func:`with_allreduce` inserts (its kernel: :mod:`.ops`)
ALLREDUCE_OP = "fused_allreduce"


def with_allreduce(main: Program, comm_var: str, *, average: bool = True) -> Program:
    """A copy of ``main`` with one ``fused_allreduce`` op of every gradient before its first
    optimize op; ``main`` itself when it has no optimize op or no gradient (an evaluation
    program runs as it is on every trainer).

    Parameters
    ----------
    main : Program
    comm_var : str
        The scope variable holding the trainers' communicator (``NCCLID``).
    average : bool
        Mean over trainers (Fluid's ``CoeffNumDevice``), else the sum (``One``).
    """
    first = optimize_start(main)
    grads = gradient_names(main, first) if first is not None else []
    if not grads:
        return main
    program = main.clone()
    block = program.global_block()
    block._insert_op(first, ALLREDUCE_OP, inputs={"X": grads, "Comm": [comm_var]},
                     outputs={"Out": grads},
                     attrs={"average": average, OP_ROLE_KEY: OpRole.Backward})
    return program


def persistable_names(main: Program) -> list[str]:
    """The persistable variables of ``main`` that hold tensors (not ids, not data layers)."""
    return sorted(v.name for v in main.global_block().vars.values()
                  if v.persistable and v.type != VarType.RAW and not v.is_data)


def _writable(scope: Any, name: str, xp: Any, *, host: bool) -> Any:
    """The array under ``name``, contiguous and writable (numpy when ``host``), kept in scope."""
    value = scope.vars[name]
    if host and xp is not np:
        return np.array(to_host(value), copy=True)
    if isinstance(value, np.ndarray):
        if not (value.flags.writeable and value.flags.c_contiguous):
            value = np.array(value, copy=True)
    elif xp is np:
        value = np.array(value, copy=True)
    scope.vars[name] = value
    return value


def broadcast_persistables(comm: Any, scope: Any, names: Sequence[str], xp: Any, *,
                           host: bool) -> None:
    """Overwrite ``names`` in ``scope`` with rank 0's values (NCCL programs' start: rank 0's
    parameters win even if a startup op were not deterministic).

    ``host``: the communicator takes numpy arrays only (the ring), so device arrays travel
    through host memory.
    """
    state = [_writable(scope, n, xp, host=host) for n in names]
    comm.broadcast(state, root=0)
    if host and xp is not np:
        for n, a in zip(names, state, strict=True):
            scope.vars[n] = xp.asarray(a)


def reduce_gradients(comm: Any, scope: Any, grads: Sequence[str], xp: Any, *, host: bool,
                     op: str = "mean", step: int | None = None) -> None:
    """All-reduce the gradients ``grads`` of ``scope`` in one fused collective, in place.

    Sparse gradients (SelectedRows) are reduced dense. ``host`` as in
    :func:`broadcast_persistables`.
    """
    from dask_fluid.ops.selected_rows import SelectedRows  # noqa: PLC0415

    arrays = []
    for g in grads:
        value = scope.vars[g]
        if isinstance(value, SelectedRows):
            scope.vars[g] = value.to_dense()
        arrays.append(_writable(scope, g, xp, host=host))
    comm.allreduce(arrays, op=op, step=step)
    if host and xp is not np:
        for g, a in zip(grads, arrays, strict=True):
            scope.vars[g] = xp.asarray(a)
