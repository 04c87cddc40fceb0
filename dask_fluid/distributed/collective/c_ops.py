"""Kernels of Fluid 1.8's ``c_*`` collective ops, which the collective transpilers
(:mod:`dask_fluid.transpiler.collective`) and ``fluid.layers.collective`` write into programs.

- ``c_gen_nccl_id`` connects this trainer to the others, as the nccl2 mode's ``gen_nccl_id``
  does (:func:`.ops.connect`: a TCP ring between the trainer endpoints on CPUs, NCCL on
  GPUs), and leaves the communicator in its ``Out`` variable. Fluid makes one NCCL
  communicator per ring; the endpoint ring of a process listens on the trainer's endpoint, so
  the later ``c_gen_nccl_id`` ops of a startup program (one per further ring) take the first
  one's communicator: the ring ids then order the same collectives on one connection, with the
  same results.
- ``c_comm_init`` files that communicator under its ``ring_id`` in the scope, where the other
  ops look it up (Fluid's process-wide NCCLCommContext; per scope here, because a Dask worker
  may run several trainers as threads of one process).
- ``c_allreduce_sum`` (and ``_max``, ``_min``, ``_prod``), ``c_broadcast``, ``c_allgather``,
  ``c_reducescatter`` write their results into ``Out``. The communicators reduce by sum; the
  other reductions gather every rank's tensor (each rank's slot of a zero buffer, summed) and
  reduce it in rank order, so every rank computes the same bits.
- the older ``allreduce`` (``reduce_type`` 0-3: sum, prod, max, min) and ``broadcast`` run on
  the nccl2 trainers' communicator (the ``NCCLID`` variable of ``gen_nccl_id``).
- ``c_sync_calc_stream`` and ``c_sync_comm_stream`` order Fluid's compute and communication
  CUDA streams. Every collective here has finished when its op returns (the NCCL communicator
  waits for its stream), except the ``c_allreduce_sum`` ops held for the ring's
  ``c_sync_comm_stream`` (below), which that op sums in one fused exchange;
  ``c_sync_calc_stream`` passes ``X`` through.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...executor import RunContext
from ...ops import registry
from ...ops.registry import to_host
from ...ops.selected_rows import SelectedRows
from ..errors import DistributedTrainingError
from .data_parallel import allgather
from .ops import connect, find_comm, passthrough
from .trainers import TrainerComm

__all__ = ["ring_var"]


def ring_var(ring_id: int) -> str:
    """The scope entry of ring ``ring_id``'s communicator (set by ``c_comm_init``)."""
    return f"@COLLECTIVE_RING_{int(ring_id)}@"


def _endpoints(attrs: dict) -> tuple[int, list[str]]:
    rank = int(attrs.get("rank", 0))
    mine = str(attrs.get("endpoint") or "")
    others = [str(e) for e in attrs.get("other_endpoints") or ()]
    if not mine:
        raise ValueError("c_gen_nccl_id has no endpoint (attr 'endpoint'): transpile with "
                         "current_endpoint = this trainer's endpoint")
    if not 0 <= rank <= len(others):
        raise ValueError(f"c_gen_nccl_id: rank {rank} is out of range for "
                         f"{len(others) + 1} trainers (this one and other_endpoints "
                         f"{others})")
    if mine in others:
        raise ValueError(f"c_gen_nccl_id: this trainer's endpoint {mine} is also in "
                         f"other_endpoints {others}")
    return rank, others[:rank] + [mine] + others[rank:]


def _c_gen_nccl_id(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    rank, endpoints = _endpoints(attrs)
    out = ctx.op.output("Out")[0]
    first = next(op for op in ctx.block.ops if op.type == "c_gen_nccl_id")
    if first is not ctx.op:  # a further ring: the communicator the first op made this run
        handle = ctx.scope.vars.get(first.output("Out")[0])
        if (isinstance(handle, TrainerComm) and not handle.closed
                and handle.endpoints == endpoints and handle.rank == rank):
            return {"Out": [handle]}
    return {"Out": [connect(ctx, rank, endpoints, out)]}


def _c_comm_init(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    handle = (ins.get("X") or [None])[0]
    var = ctx.op.input("X")[0]
    if not isinstance(handle, TrainerComm):
        raise RuntimeError(f"c_comm_init: {var} holds no communicator; the c_gen_nccl_id op "
                           "before it makes one (run the whole startup program)")
    nranks, rank = int(attrs.get("nranks", 0)), int(attrs.get("rank", 0))
    if (handle.nranks, handle.rank) != (nranks, rank):
        raise ValueError(f"c_comm_init says trainer {rank} of {nranks}, but {var} connected "
                         f"trainer {handle.rank} of {handle.nranks} "
                         f"({', '.join(handle.endpoints)})")
    ctx.scope.vars[ring_var(attrs.get("ring_id", 0))] = handle
    return {}


def _ring(ctx: RunContext, attrs: dict) -> TrainerComm:
    ring_id = int(attrs.get("ring_id", 0))
    handle = ctx.scope.vars.get(ring_var(ring_id))
    if not isinstance(handle, TrainerComm):
        raise RuntimeError(
            f"{ctx.op.type}: there is no communicator for ring {ring_id} in the scope; run the "
            "startup program transpiled in collective mode (its c_gen_nccl_id and c_comm_init "
            f"ops) on this scope first")
    if handle.closed:
        raise RuntimeError(f"{ctx.op.type}: the communicator of ring {ring_id} was closed "
                           "(exe.close()); run the startup program again to reconnect")
    return handle


def _input(ctx: RunContext, ins: dict) -> Any:
    value = ins["X"][0]
    if value is None:
        raise ValueError(f"{ctx.op.type}: its input {ctx.op.input('X')[0]} was not computed "
                         "before it; every trainer must run the same program")
    if isinstance(value, SelectedRows):  # a sparse gradient is reduced dense
        value = value.to_dense()
    return value


def _buffer(handle: TrainerComm, value: Any, xp: Any) -> np.ndarray | Any:
    """A writable, contiguous copy of ``value`` the communicator takes (host for the ring)."""
    if handle.host_staged or xp is np:
        return np.array(to_host(value), copy=True, order="C")
    return xp.array(value, copy=True, order="C")


def _collective(body: Any) -> Any:
    try:
        return body()
    except DistributedTrainingError as err:
        raise passthrough(err) from None


def _allreduce(handle: TrainerComm, value: Any, xp: Any) -> Any:
    buf = _buffer(handle, value, xp)
    handle.comm.allreduce([buf], op="sum")
    return xp.asarray(buf)


def _reduced(handle: TrainerComm, value: Any, xp: Any, reduce: str) -> Any:
    if reduce == "sum":
        return _collective(lambda: _allreduce(handle, value, xp))
    gathered = _collective(lambda: allgather(handle, value, xp))
    mod = np if isinstance(gathered, np.ndarray) else xp
    combine = {"max": mod.maximum, "min": mod.minimum, "prod": mod.multiply}[reduce]
    out = gathered[0].copy()
    for i in range(1, handle.nranks):  # rank order: the same bits on every rank
        out = combine(out, gathered[i])
    return xp.asarray(out)


def _reduce_kernel(reduce: str) -> Any:
    def kernel(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
        handle, value = _ring(ctx, attrs), _input(ctx, ins)
        if reduce == "sum" and not attrs.get("use_calc_stream"):
            plan = _comm_stream_plan(ctx, int(attrs.get("ring_id", 0)))
            if plan is not None:  # summed with the ring's others at its c_sync_comm_stream
                key = _pending_var(int(attrs.get("ring_id", 0)))
                pending = [] if plan.starts else ctx.scope.vars.get(key, [])
                pending.append((ctx.op.output("Out")[0], _buffer(handle, value,
                                                                 ctx.executor._xp)))
                ctx.scope.vars[key] = pending
                return {"Out": [value]}
        return {"Out": [_reduced(handle, value, ctx.executor._xp, reduce)]}

    kernel.__name__ = f"c_allreduce_{reduce}"
    return kernel


# -- the communication stream ---------------------------------------------------------------
# Fluid's c_allreduce_sum (use_calc_stream False) runs on the ring's CUDA stream and its result
# is only promised after the ring's c_sync_comm_stream: GradAllReduce puts one sync before the
# optimizer, LocalSGD one after the last parameter. Here such an all-reduce, when a
# c_sync_comm_stream of its ring follows it in the block and no op in between reads or writes
# its output, is held until that sync, which sums every held tensor of the ring in one fused
# exchange (one exchange a step instead of one per gradient). Any other all-reduce runs at once.


@dataclass(frozen=True)
class _StreamPlan:
    op: Any  # the all-reduce the plan is for, where it stood (checked before every use)
    index: int
    sync: Any  # the c_sync_comm_stream that ends its wait, where it stood
    sync_index: int
    starts: bool  # no held all-reduce of the ring before it since the last sync


#: op -> its plan (None: run at once); revalidated by position, so inserted ops replan
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _pending_var(ring_id: int) -> str:
    return f"@COLLECTIVE_PENDING_{ring_id}@"


def _is_sync(op: Any, ring_id: int) -> bool:
    return op.type == "c_sync_comm_stream" and int(op.attrs.get("ring_id", 0)) == ring_id


def _is_held_kind(op: Any, ring_id: int) -> bool:
    return (op.type == "c_allreduce_sum" and not op.attrs.get("use_calc_stream")
            and int(op.attrs.get("ring_id", 0)) == ring_id)


def _comm_stream_plan(ctx: RunContext, ring_id: int) -> _StreamPlan | None:
    ops, op = ctx.block.ops, ctx.op
    cached = _PLANS.get(op, False)
    if cached is None or (cached and cached.index < len(ops) and ops[cached.index] is op
                          and cached.sync_index < len(ops)
                          and ops[cached.sync_index] is cached.sync):
        return cached
    index = next(i for i, other in enumerate(ops) if other is op)
    names = set(op.output_arg_names)  # its input was copied: only the result must wait
    plan = None
    for j in range(index + 1, len(ops)):
        other = ops[j]
        if _is_sync(other, ring_id):
            starts = True
            for before in reversed(ops[:index]):
                if _is_sync(before, ring_id):
                    break
                if _is_held_kind(before, ring_id):
                    starts = False
                    break
            plan = _StreamPlan(op, index, other, j, starts)
            break
        if names & (set(other.input_arg_names) | set(other.output_arg_names)):
            break  # read or rewritten before the sync: the result is needed at once
    _PLANS[op] = plan
    return plan


#: the older ``allreduce`` op's ``reduce_type`` attr
_REDUCE_TYPES = {0: "sum", 1: "prod", 2: "max", 3: "min"}


def _trainers_comm(ctx: RunContext) -> TrainerComm:
    try:
        return find_comm(ctx.scope)
    except RuntimeError as err:
        raise RuntimeError(f"{ctx.op.type}: {err}") from None


def _allreduce_op(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    kind = int(attrs.get("reduce_type", 0))
    if kind not in _REDUCE_TYPES:
        raise ValueError(f"allreduce: reduce_type {kind} is not one of {_REDUCE_TYPES} "
                         "(sum, prod, max, min)")
    return {"Out": [_reduced(_trainers_comm(ctx), _input(ctx, ins), ctx.executor._xp,
                             _REDUCE_TYPES[kind])]}


def _broadcast_op(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    return {"Out": [_broadcast(ctx, _trainers_comm(ctx), int(attrs.get("root", 0)),
                               _input(ctx, ins))]}


def _broadcast(ctx: RunContext, handle: TrainerComm, root: int, value: Any) -> Any:
    if not 0 <= root < handle.nranks:
        raise ValueError(f"{ctx.op.type}: root {root} is not a rank of the {handle.nranks} "
                         "trainers")
    buf = _buffer(handle, value, ctx.executor._xp)
    _collective(lambda: handle.comm.broadcast([buf], root=root))
    return ctx.executor._xp.asarray(buf)


def _c_broadcast(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    return {"Out": [_broadcast(ctx, _ring(ctx, attrs), int(attrs.get("root", 0)),
                               _input(ctx, ins))]}


def _check_nranks(ctx: RunContext, attrs: dict, handle: TrainerComm) -> None:
    nranks = int(attrs.get("nranks", handle.nranks))
    if nranks != handle.nranks:
        raise ValueError(f"{ctx.op.type}: nranks is {nranks}, but ring "
                         f"{int(attrs.get('ring_id', 0))} has {handle.nranks} trainers")


def _c_allgather(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    handle, xp = _ring(ctx, attrs), ctx.executor._xp
    _check_nranks(ctx, attrs, handle)
    value = _input(ctx, ins)
    gathered = _collective(lambda: allgather(handle, value, xp))
    # Fluid's layout: the ranks' tensors stacked along dim 0
    return {"Out": [xp.asarray(gathered.reshape((-1, *gathered.shape[2:])))]}


def _c_reducescatter(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    handle, xp = _ring(ctx, attrs), ctx.executor._xp
    _check_nranks(ctx, attrs, handle)
    value = _input(ctx, ins)
    rows = value.shape[0] if value.ndim else 0
    if rows % handle.nranks:
        raise ValueError(f"c_reducescatter: dim 0 of {ctx.op.input('X')[0]} ({rows}) is not "
                         f"divisible by the {handle.nranks} trainers")
    summed = _collective(lambda: _allreduce(handle, value, xp))
    part = rows // handle.nranks
    return {"Out": [summed[handle.rank * part:(handle.rank + 1) * part].copy()]}


def _c_sync_calc_stream(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    return {"Out": [ins["X"][0]]}


def _c_sync_comm_stream(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """Sum the ring's held all-reduces in one exchange and write their results."""
    pending = ctx.scope.vars.pop(_pending_var(int(attrs.get("ring_id", 0))), None)
    if pending:
        handle, xp = _ring(ctx, attrs), ctx.executor._xp
        buffers = [buf for _, buf in pending]
        _collective(lambda: handle.comm.allreduce(buffers, op="sum"))
        for name, buf in pending:
            ctx.scope.vars[name] = xp.asarray(buf)
    x = ctx.op.input("X")[0]
    return {"Out": [ctx.scope.vars.get(x, ins["X"][0])]}


registry.set_kernel("c_gen_nccl_id", _c_gen_nccl_id)
registry.set_kernel("c_comm_init", _c_comm_init)
for _reduce in ("sum", "max", "min", "prod"):
    registry.set_kernel(f"c_allreduce_{_reduce}", _reduce_kernel(_reduce))
registry.set_kernel("c_broadcast", _c_broadcast)
registry.set_kernel("c_allgather", _c_allgather)
registry.set_kernel("c_reducescatter", _c_reducescatter)
registry.set_kernel("c_sync_calc_stream", _c_sync_calc_stream)
registry.set_kernel("c_sync_comm_stream", _c_sync_comm_stream)
registry.set_kernel("allreduce", _allreduce_op)
registry.set_kernel("broadcast", _broadcast_op)
