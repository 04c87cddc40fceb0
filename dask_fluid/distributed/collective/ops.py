"""Kernels of the NCCL2-mode ops, so that a Fluid 1.8 nccl2 script runs as it is.

- ``gen_nccl_id`` (the last op of a startup program transpiled with ``config.mode = "nccl2"``)
  connects this trainer to the others (:func:`.trainers.connect_trainers`: a TCP ring between
  the trainer endpoints on CPUs, NCCL on GPUs) and stores the resulting
  :class:`.trainers.TrainerComm` in the scope's ``NCCLID`` variables, where Fluid keeps the
  NCCL id; ``exe.close()`` of that executor closes it.
- ``fused_allreduce`` (inserted by a ``CompiledProgram`` with ``num_trainers > 1`` between
  backward and optimize, :func:`.data_parallel.with_allreduce`) all-reduces the gradients
  through the communicator it finds there; ``dgc_allreduce`` exchanges those that
  ``DGCMomentumOptimizer`` compresses (dense before its ramp-up, the top-k entries after).

:func:`compile_for_trainers` is what ``CompiledProgram`` calls at its first run. The op
registry imports this module the first time a program needs one of these kernels.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...executor import CUDAPlace, RunContext
from ...flags import RPCFlags
from ...ops import registry
from ...ops.dgc_ops import DGC_NRANKS
from ..comm.auth import env_secret
from ..comm.tls import env_contexts
from ..errors import DistributedTrainingError
from ..program_values import persistable_names
from . import data_parallel
from .trainers import TrainerComm, connect_trainers

__all__ = ["COMM_VAR", "compile_for_trainers", "connect", "find_comm", "passthrough"]

#: the scope variable that holds the trainer's communicator (Fluid's NCCL id variable)
COMM_VAR = "NCCLID"
#: ``executor.host_context`` key of the communicator that ``exe.close()`` closes
_CLOSE_KEY = "dask_fluid.collective.comm"

_MISSING = (
    "there is no NCCL2 communicator in the scope (variable {var}): transpile with "
    "config.mode = 'nccl2' (DistributeTranspiler.transpile(trainer_id, trainers=..., "
    "current_endpoint=..., startup_program=startup)) and run exe.run(startup) on this scope "
    "before the CompiledProgram; its gen_nccl_id op connects the trainers")


def passthrough(err: DistributedTrainingError) -> DistributedTrainingError:
    err._dask_fluid_passthrough = True  # the executor re-raises it as is: it names the peer
    return err


def _gen_nccl_id(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    endpoints = [str(e) for e in attrs.get("trainers") or ()]
    rank = int(attrs.get("trainer_id", 0))
    if not endpoints:
        raise ValueError("gen_nccl_id has no trainer endpoints (attr 'trainers'); transpile "
                         "with trainers='ip:port,ip:port'")
    if not 0 <= rank < len(endpoints):
        raise ValueError(f"gen_nccl_id: trainer_id {rank} is out of range for "
                         f"{len(endpoints)} trainers")
    mine = attrs.get("endpoint") or os.environ.get("PADDLE_CURRENT_ENDPOINT", "")
    if mine and mine != endpoints[rank]:
        raise ValueError(f"gen_nccl_id: trainer {rank}'s endpoint is {endpoints[rank]} in "
                         f"trainers={endpoints}, not {mine}; pass current_endpoint = "
                         "trainers[trainer_id] to transpile()")
    names = ctx.op.output("NCCLID")
    handle = connect(ctx, rank, endpoints, names[0] if names else None)
    # Fluid keeps one NCCL id per communicator (nccl_comm_num, hierarchical rings); one
    # communicator serves them all here, with the same result
    return {"NCCLID": [handle] * len(names)}


def connect(ctx: RunContext, rank: int, endpoints: list[str], var: str | None) -> TrainerComm:
    """Connect trainer ``rank`` of ``endpoints`` (the ring on CPUs, NCCL on GPUs), closing
    the communicator an earlier run of the startup program left in ``var``; ``exe.close()``
    of this executor closes the new one."""
    old = ctx.scope.vars.get(var) if var else None
    if isinstance(old, TrainerComm):  # the startup program ran again: start afresh
        old.close()
    place = ctx.executor.place
    on_gpu = isinstance(place, CUDAPlace)
    try:
        handle = connect_trainers(
            rank, endpoints, RPCFlags.current().deadline_s, secret=env_secret(), tls=env_contexts(),
            on_gpu=on_gpu, device=place.device_id if on_gpu else 0,
            scheduler=os.environ.get("DASK_SCHEDULER_ADDRESS") or None)
    except DistributedTrainingError as err:
        raise passthrough(err) from None
    ctx.executor.host_context[_CLOSE_KEY] = handle
    return handle


def _op_comm(ins: dict, ctx: RunContext, slot: str) -> TrainerComm:
    """The communicator in the op's ``Comm`` input, once every gradient in ``slot`` is there."""
    handle = (ins.get("Comm") or [None])[0]
    var = (ctx.op.input("Comm") or [COMM_VAR])[0]
    if not isinstance(handle, TrainerComm):
        raise RuntimeError(_MISSING.format(var=var))
    if handle.closed:
        raise RuntimeError(f"the NCCL2 communicator in {var} was closed (exe.close()); run the "
                           "startup program again to reconnect the trainers")
    missing = [g for g, v in zip(ctx.op.input(slot), ins[slot], strict=True) if v is None]
    if missing:
        raise ValueError(f"{ctx.op.type}: the gradients {missing} were not computed before "
                         "it; every trainer must run the same program")
    return handle


def _fused_allreduce(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    handle = _op_comm(ins, ctx, "X")
    grads = ctx.op.input("X")
    step, handle.steps = handle.steps, handle.steps + 1
    try:
        data_parallel.reduce_gradients(handle.comm, ctx.scope, grads, ctx.executor._xp,
                                       host=handle.host_staged,
                                       op="mean" if attrs.get("average", True) else "sum",
                                       step=step)
    except DistributedTrainingError as err:
        raise passthrough(err) from None
    return {"Out": [ctx.scope.vars[g] for g in grads]}


def _dgc_allreduce(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """The DGC gradients' exchange: summed densely before the ramp-up begins, their
    trainers' top-k entries summed after (:func:`.data_parallel.reduce_compressed`)."""
    handle = _op_comm(ins, ctx, "Grad")
    grads, xp = ctx.op.input("Grad"), ctx.executor._xp
    step, handle.steps = handle.steps, handle.steps + 1
    compressing = data_parallel.compressing(ctx.scope, ctx.op.input("current_step")[0],
                                            ctx.op.input("rampup_begin_step")[0])
    try:
        if compressing:
            gathered = data_parallel.reduce_compressed(handle, ctx.scope, grads,
                                                       ctx.op.input("EncodeGrad"), xp, step=step)
        else:
            data_parallel.reduce_gradients(handle.comm, ctx.scope, grads, xp,
                                           host=handle.host_staged, op="sum", step=step)
    except DistributedTrainingError as err:
        raise passthrough(err) from None
    out = {"Out": [ctx.scope.vars[g] for g in grads]}
    if compressing:
        out["GatherBuff"] = gathered
    return out


def find_comm(scope: Any, var: str = COMM_VAR) -> TrainerComm:
    """The trainer communicator in ``scope``; RuntimeError saying how to get one."""
    handle = scope.vars.get(var)
    if not isinstance(handle, TrainerComm):
        raise RuntimeError(_MISSING.format(var=var))
    if handle.closed:
        raise RuntimeError(f"the NCCL2 communicator in {var} was closed (exe.close()); run the "
                           "startup program again to reconnect the trainers")
    return handle


def compile_for_trainers(program: Any, scope: Any, place: Any, *, num_trainers: int,
                         trainer_id: int, average: bool, sync_batch_norm: bool = False) -> Any:
    """What a ``CompiledProgram`` with ``num_trainers > 1`` runs: ``program`` with one fused
    all-reduce of its gradients before its optimize ops, after rank 0's persistables replaced
    every trainer's (as Fluid's ParallelExecutor broadcasts them at its start). A program
    without optimize ops (evaluation) runs as it is, with no collective. With
    ``sync_batch_norm`` its training batch norms use the trainers' global statistics
    (:mod:`.sync_batch_norm`).

    Raises
    ------
    RuntimeError
        No communicator in the scope (startup not run, or not transpiled in nccl2 mode).
    ValueError
        The build strategy's trainers disagree with the communicator's.
    """
    handle = find_comm(scope)
    if handle.nranks != num_trainers or handle.rank != trainer_id:
        raise ValueError(
            f"build_strategy says trainer {trainer_id} of {num_trainers}, but the startup "
            f"program connected trainer {handle.rank} of {handle.nranks} "
            f"({', '.join(handle.endpoints)}); set build_strategy.num_trainers = "
            "len(trainer endpoints) and build_strategy.trainer_id = the transpiled trainer_id")
    to_run = data_parallel.with_allreduce(program, COMM_VAR, average=average,
                                          nranks=num_trainers)
    if sync_batch_norm and any(op.type in data_parallel.SYNC_OPS for block in program.blocks
                               for op in block.ops):
        if to_run is program:  # the ops are renamed in a copy: the user's program stays
            to_run = program.clone()
        data_parallel.with_sync_batch_norm(to_run)
    if to_run is program:  # nothing to train (an evaluation program): no collective at all
        return program
    xp = np
    if isinstance(place, CUDAPlace):
        import cupy as xp  # noqa: PLC0415 - only on GPUs
    names = [n for n in persistable_names(program) if n in scope.vars]
    data_parallel.broadcast_persistables(handle.comm, scope, names, xp, host=handle.host_staged)
    if program.global_block().has_var(DGC_NRANKS):  # as Fluid's ParallelExecutor sets it
        scope.vars[DGC_NRANKS] = xp.full((1,), num_trainers, dtype=np.float32)
    return to_run


registry.set_kernel("gen_nccl_id", _gen_nccl_id)
registry.set_kernel(data_parallel.ALLREDUCE_OP, _fused_allreduce)
registry.set_kernel(data_parallel.DGC_ALLREDUCE_OP, _dgc_allreduce)
