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

from dask_fluid.framework import OP_ROLE_KEY, OpRole, Program
from dask_fluid.ops.dgc_ops import DGC_RAMPUP_BEGIN, scalar
from dask_fluid.ops.registry import to_host
from dask_fluid.program_phases import (
    PROGRAM_ALLREDUCE,
    gradient_names,
    optimize_start,
    split_program,
)

__all__ = ["ALLREDUCE_OP", "DGC_ALLREDUCE_OP", "SYNC_OPS", "allgather", "broadcast_persistables",
           "compressing", "gradient_names", "optimize_start", "reduce_compressed",
           "reduce_gradients", "split_program", "with_allreduce", "with_sync_batch_norm"]

#: the op :func:`with_allreduce` inserts (its kernel: :mod:`.ops`)
ALLREDUCE_OP = "fused_allreduce"
#: and for the gradients DGCMomentumOptimizer compresses (Fluid's SparseAllReduceOpHandle)
DGC_ALLREDUCE_OP = "dgc_allreduce"


def with_allreduce(main: Program, comm_var: str, *, average: bool = True,
                   nranks: int = 1) -> Program:
    """A copy of ``main`` with one ``fused_allreduce`` op of every gradient before its first
    optimize op; ``main`` itself when it has no optimize op or nothing to reduce (an
    evaluation program runs as it is on every trainer).

    Gradients that the program's own ``allreduce`` ops reduce (``layers.collective._allreduce``,
    a sum) are left to them; then, as Fluid's CoeffNumDevice scaling does, the loss gradient is
    scaled by ``1 / nranks`` and the other gradients are summed, so every gradient is the
    trainers' mean. So it is with ``DGCMomentumOptimizer``'s programs, whose compressed
    gradients (those its ``dgc`` ops write) get a ``dgc_allreduce`` op of their own (dense
    before the ramp-up, the trainers' top-k entries after: :func:`reduce_compressed`).

    Parameters
    ----------
    main : Program
    comm_var : str
        The scope variable holding the trainers' communicator (``NCCLID``).
    average : bool
        Mean over trainers (Fluid's ``CoeffNumDevice``), else the sum (``One``).
    nranks : int
        The number of trainers.
    """
    first = optimize_start(main)
    if first is None:
        return main
    grads = gradient_names(main, first)
    before = main.global_block().ops[:first]
    compressed = {op.output("Grad_out")[0]: op for op in before if op.type == "dgc"}
    grads = [g for g in grads if g not in compressed]
    # Fluid's CoeffNumDevice: the loss gradient scaled by 1 / N and the gradients summed
    # (the dgc ops and DGC's momentum count on that)
    scale_loss = average and (bool(compressed)
                              or any(op.type == PROGRAM_ALLREDUCE for op in before))
    if not grads and not scale_loss:
        return main
    program = main.clone()
    block = program.global_block()
    if compressed:
        dgc_ops = [compressed[g] for g in sorted(compressed)]
        block._insert_op(
            first, DGC_ALLREDUCE_OP,
            inputs={"Grad": sorted(compressed),
                    "EncodeGrad": [op.output("EncodeGrad")[0] for op in dgc_ops],
                    "current_step": dgc_ops[0].input("current_step"),
                    "rampup_begin_step": [DGC_RAMPUP_BEGIN], "Comm": [comm_var]},
            outputs={"Out": sorted(compressed),
                     "GatherBuff": [op.output("GatherBuff")[0] for op in dgc_ops]},
            attrs={OP_ROLE_KEY: OpRole.Backward})
    if grads:
        block._insert_op(first, ALLREDUCE_OP, inputs={"X": grads, "Comm": [comm_var]},
                         outputs={"Out": grads},
                         attrs={"average": average and not scale_loss,
                                OP_ROLE_KEY: OpRole.Backward})
    if scale_loss:
        _scale_loss_grad(block, 1.0 / nranks)
    return program


def _scale_loss_grad(block: Any, scale: float) -> None:
    seeds = [i for i, op in enumerate(block.ops)
             if op.attrs.get(OP_ROLE_KEY, 0) & OpRole.Backward
             and op.attrs.get(OP_ROLE_KEY, 0) & OpRole.Loss]
    if not seeds:
        raise ValueError("the program all-reduces gradients with allreduce ops but has no "
                         "loss-gradient op (op_role Backward | Loss) to scale by 1 / trainers; "
                         "build it with optimizer.backward(loss)")
    for i in reversed(seeds):
        loss_grad = block.ops[i].output_arg_names[0]
        block._insert_op(i + 1, "scale", inputs={"X": [loss_grad]}, outputs={"Out": [loss_grad]},
                         attrs={"scale": scale, OP_ROLE_KEY: OpRole.Backward})


#: batch_norm op type -> the synchronised one (kernels: :mod:`.sync_batch_norm`)
SYNC_OPS = {"batch_norm": "sync_batch_norm", "batch_norm_grad": "sync_batch_norm_grad"}


def with_sync_batch_norm(program: Program) -> Program:
    """``program`` (changed in place) with its training batch-norm ops synchronised over the
    trainers; those at test time or with ``use_global_stats`` stay as they are."""
    for block in program.blocks:
        for op in block.ops:
            if op.type in SYNC_OPS and not (op.attrs.get("is_test")
                                            or op.attrs.get("use_global_stats")):
                op.type = SYNC_OPS[op.type]
    return program


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
                           host: bool, root: int = 0) -> None:
    """Overwrite ``names`` in ``scope`` with rank ``root``'s values (NCCL programs' start: rank
    0's parameters win even if a startup op were not deterministic).

    ``host``: the communicator takes numpy arrays only (the ring), so device arrays travel
    through host memory.
    """
    state = [_writable(scope, n, xp, host=host) for n in names]
    comm.broadcast(state, root=root)
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


def allgather(handle: Any, value: Any, xp: Any, *, step: int | None = None) -> Any:
    """``[nranks, *value.shape]``: every trainer's ``value`` in rank order, through the
    communicators' sum (each rank's copy in its slot of a zero buffer); numpy arrays when the
    communicator stages through the host (the ring)."""
    if handle.host_staged or xp is np:
        part, mod = np.array(to_host(value), copy=True, order="C"), np
    else:
        part, mod = xp.array(value, copy=True, order="C"), xp
    buf = mod.zeros((handle.nranks, *part.shape), dtype=part.dtype)
    buf[handle.rank] = part
    handle.comm.allreduce([buf], op="sum", step=step)
    return buf


def reduce_compressed(handle: Any, scope: Any, grads: Sequence[str], encoded: Sequence[str],
                      xp: Any, *, step: int | None = None) -> list[Any]:
    """Sum the trainers' DGC top-k entries into the gradients ``grads`` (which their ``dgc``
    ops zeroed), in one fused exchange: Fluid's ``sparseAllGReduce``.

    ``encoded`` are the ``dgc`` ops' ``EncodeGrad`` values (``k`` indices' int32 bits, then
    ``k`` values); every trainer's are gathered (:func:`allgather`, in float64, which keeps
    both the indices and the float32 values exact) and added into zeros in rank order, so
    every trainer ends with the same bits. Returns the gathered encodings of each gradient in
    Fluid's layout (its ``GatherBuff``).
    """
    host = handle.host_staged or xp is np
    encs = [to_host(scope.vars[e]) if host else scope.vars[e] for e in encoded]
    ks = [len(e) // 2 for e in encs]
    mod = np if host else xp
    row = mod.concatenate([part for enc, k in zip(encs, ks, strict=True)
                           for part in (enc[:k].view(np.int32).astype(np.float64),
                                        enc[k:].astype(np.float64))]) if encs else \
        mod.zeros(0, dtype=np.float64)
    buf = allgather(handle, row, xp, step=step)
    off, gathered = 0, []
    for g, k in zip(grads, ks, strict=True):
        like = scope.vars[g]
        dense = mod.zeros(like.shape, dtype=like.dtype)
        flat = dense.reshape(-1)
        parts = []
        for r in range(handle.nranks):
            idx = buf[r, off:off + k].astype(np.int64)
            vals = buf[r, off + k:off + 2 * k].astype(like.dtype)
            flat[idx] += vals  # a trainer's indices are distinct
            parts += [idx.astype(np.int32).view(np.float32), vals.astype(np.float32)]
        off += 2 * k
        scope.vars[g] = xp.asarray(dense)
        gathered.append(xp.asarray(mod.concatenate(parts)))
    return gathered


def compressing(scope: Any, step_var: str, begin_var: str) -> bool:
    """Whether this step of DGC sends top-k entries (the step counter has reached the
    ramp-up's first step) rather than the dense gradients."""
    return int(scalar(scope.vars[step_var])) >= int(scalar(scope.vars[begin_var]))
