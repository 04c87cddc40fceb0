"""Kernels of the pserver-mode ops, so that transpiled programs run themselves.

``exe.run(pserver_program)`` runs ``listen_and_serv``: it serves the endpoint's optimize blocks
(:class:`.shard.PServerShard`) from the scope the pserver startup program initialised, and
returns once every trainer is done. ``exe.run(trainer_program)`` runs ``send``,
``send_barrier``, ``recv``, ``fetch_barrier`` and ``prefetch`` against the pservers through the
executor's :class:`.client.PServerClient`:

- ``send`` stages its gradients (nothing goes on the wire yet);
- ``send_barrier`` (sync) pushes everything staged to every pserver at once and asks for the
  blocks the following ``recv`` ops want; the replies come after each pserver's optimize step;
- ``recv`` takes its blocks from those replies. Without a preceding barrier (async mode, the
  trainer startup) the first ``recv`` of a block does the same exchange for every ``recv`` of
  the block;
- ``fetch_barrier`` has nothing left to wait for;
- ``prefetch`` asks every pserver at once for its rows of the distributed lookup table;
- an op the transpiler marked for remote prefetch (``lookup_table``, ``nce``,
  ``hierarchical_sigmoid`` and their grads that read the table) asks the pservers holding
  its table's blocks for the rows it reads.

The ``distributed_mode`` attr of the trainer's RPC ops (Fluid 1.8's enum, as on
``listen_and_serv``; :mod:`...transpiler.modes`) says how they run:

- a ``send`` with one whole variable and several ``send_varnames`` (``runtime_split_send_recv``)
  cuts it into the blocks by ``sections``; a ``recv`` with one output and several
  ``recv_varnames`` joins the blocks into it;
- ``ASYNC`` (1) without a ``send_barrier``: the first ``recv`` of a step finishes the previous
  step's exchange, takes its parameters, and leaves this step's exchange in flight (Fluid's
  async Communicator: the trainer never waits for the pservers within a step);
- ``GEO`` (3): ``send`` counts the parameter's steps and, when an exchange is due, stages its
  delta; ``recv`` merges the pservers' values into the parameter on those steps and leaves it
  as it is on the others; the startup's ``send(param_init)`` records the starting values.

Every RPC op also sets the client's ``wait_port`` (whether connecting to a pserver that does
not listen yet is retried until ``FLAGS_rpc_deadline``).

Where the client and the serving options come from: the Dask launchers put them into
``executor.host_context`` (:data:`CLIENT_KEY`, :data:`SERVE_KEY`); otherwise (a process started
by hand, Fluid's launch style) the first RPC op of an executor takes the process's client of
its trainer (:func:`.client.shared_client`: one a process, as Fluid's RPC client), made from
its attributes, the job secret of the environment and the ``FLAGS_rpc_*`` flags, and
``listen_and_serv`` binds its endpoint. This module is imported by
the op registry the first time a program needs one of these kernels.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...executor import RunContext
from ...flags import RPCFlags
from ...ops import registry
from ...ops.selected_rows import SelectedRows
from ...places import CUDAPlace
from ...transpiler.modes import DistributedMode
from ...transpiler.trainer_rewrite import GEO_PARAM_INIT
from ..comm.auth import env_secret
from ..comm.tls import env_contexts
from ..errors import DistributedTrainingError
from .client import NOT_YET, PServerClient, join_rows, open_client, shared_client, split_rows
from .shard import PServerShard, ServeOptions, TableShard

__all__ = ["CLIENT_KEY", "SERVE_KEY", "table_shard"]

#: ``executor.host_context`` key of the trainer's :class:`.client.PServerClient`
CLIENT_KEY = "dask_fluid.pserver.client"
#: ``executor.host_context`` key of the pserver's :class:`.shard.ServeOptions`
SERVE_KEY = "dask_fluid.pserver.serve"

_DUMMY = np.zeros(0, np.float32)


def table_shard(attrs: dict) -> TableShard | None:
    """This pserver's part of the distributed lookup table, from ``listen_and_serv``'s attrs."""
    entry = attrs.get("lookup_table_shard")
    if not entry:
        return None
    name, grad, n, rows = entry
    return TableShard(str(name), str(grad), int(n), int(attrs.get("pserver_id", 0)), int(rows))


def _on_host(value: Any) -> Any:
    """What a trainer sends: a GPU trainer's gradient (a device array, or a SelectedRows of
    them) copied to the host; host values as they are."""
    if isinstance(value, SelectedRows):
        if isinstance(value.value, np.ndarray):
            return value
        return SelectedRows(registry.to_host(value.rows), registry.to_host(value.value),
                            value.height)
    return value if isinstance(value, np.ndarray) else registry.to_host(value)


def _client(ctx: RunContext) -> PServerClient:
    client = ctx.executor.host_context.get(CLIENT_KEY)
    if client is None:  # a trainer started by hand: the program says who it is
        attrs = ctx.op.attrs
        client = shared_client(int(attrs.get("trainer_id", 0)), RPCFlags.current(),
                               bool(attrs.get("sync_mode", True)), secret=env_secret(),
                               tls=env_contexts())
        ctx.executor.host_context[CLIENT_KEY] = client
    client.wait_port = bool(ctx.op.attrs.get("wait_port", True))
    return client


@dataclass(frozen=True)
class _Plan:
    """What an RPC op's attributes say, worked out on its first run: a trainer runs its
    dozen ``send``/``recv`` ops every step."""

    epmap: tuple[str, ...]
    names: list[str]  # send_varnames / recv_varnames, else the op's own variables
    inputs: list[str]
    outputs: list[str]
    mode: DistributedMode | None
    dummies: tuple  # values of the control-dependency outputs ``Out``

    def control_outputs(self, outs: tuple) -> dict:
        return {"Out": self.dummies} if "Out" in outs else {}


def _plan(attrs: dict, ctx: RunContext, names_attr: str | None = None) -> _Plan:
    # cached in the attrs of the executor's compiled step (its own copy of the op's attrs)
    plan = attrs.get("_rpc_plan")
    if plan is None:
        op = ctx.op
        inputs, outputs = op.input("X"), op.output("Out")
        own = inputs if names_attr == "send_varnames" else outputs
        named = attrs.get(names_attr) if names_attr else None
        plan = attrs["_rpc_plan"] = _Plan(
            tuple(attrs.get("epmap", ())), list(named or own), inputs, outputs, _mode(attrs),
            (_DUMMY,) * len(outputs))
    return plan


def _mode(attrs: dict) -> DistributedMode | None:
    """The op's ``distributed_mode`` (None on the startup's pull, the same in every mode)."""
    mode = attrs.get("distributed_mode")
    return None if mode is None else DistributedMode(int(mode))


def _send(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    client = _client(ctx)
    plan = _plan(attrs, ctx, "send_varnames")
    epmap = plan.epmap
    client.endpoints.update(epmap)
    values = [_on_host(v) if v is not None else None for v in ins["X"]]
    if any(v is None for v in values):
        missing = [n for n, v in zip(plan.inputs, values, strict=True) if v is None]
        raise ValueError(f"send: {missing} were not computed before this op; run the trainer "
                         "program the transpiler produced, with every data layer fed")
    names = plan.names
    if plan.mode == DistributedMode.GEO:
        if names == [GEO_PARAM_INIT]:
            client.geo_init(int(attrs["trainers"]), int(attrs["geo_sgd_need_push_nums"]),
                            plan.inputs, list(values))
        else:
            client.geo_send(plan.inputs[0], values[0], list(epmap), names,
                            list(attrs["sections"]))
        return plan.control_outputs(outs)
    if not attrs.get("use_send_handler", True):
        # Fluid's notify (the async step counter, ...lr_counter): every input to every pserver
        client.stage([ep for ep in epmap for _ in names], list(names) * len(epmap),
                     list(values) * len(epmap))
        return plan.control_outputs(outs)
    if len(values) == 1 and len(names) > 1:  # runtime split: the whole gradient came in
        values = split_rows(values[0], [int(r) for r in attrs["sections"]])
    client.stage(epmap, names, values)
    return plan.control_outputs(outs)


def _send_barrier(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    client = _client(ctx)
    client.endpoints.update(attrs.get("endpoints", ()))
    client.exchange(client.wanted(ctx.block, ctx.op), push=True)
    return _plan(attrs, ctx).control_outputs(outs)


def _recv(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    client = _client(ctx)
    plan = _plan(attrs, ctx, "recv_varnames")
    client.endpoints.update(plan.epmap)
    names, out, mode = plan.names, plan.outputs, plan.mode
    if mode == DistributedMode.GEO:
        return {"Out": [_geo_recv(client, names, out[0], ctx)]}
    if not client.has_replies(names):
        want = client.wanted(ctx.block, ctx.op)
        if mode == DistributedMode.ASYNC:  # the Communicator: never wait within a step
            client.exchange_in_background(want)
        else:  # no barrier before: half-async step (push what is staged) or the startup
            client.exchange(want, push=client.staged)
    values = client.take(names)
    if len(out) == len(values):
        if any(v is NOT_YET for v in values):
            values = [ctx.scope.get(n) for n in out]
            return {"Out": values}
        # where the trainer's executor keeps its variables (a GPU trainer's device)
        return {"Out": [ctx.executor.to_place(v) for v in values]}
    # runtime split: the blocks make the one output
    if any(v is NOT_YET for v in values):  # the first async step: nothing came back yet
        return {"Out": [ctx.scope.get(out[0])]}
    return {"Out": [ctx.executor.to_place(join_rows(values))]}


def _geo_recv(client: PServerClient, names: list[str], param: str, ctx: RunContext) -> object:
    """The parameter after a GEO step: merged with the pservers' values when due."""
    current = ctx.scope.get(param)
    if not client.geo_due(param):
        return current
    if not client.has_replies(names):  # the step's first recv: one exchange for all of them
        client.exchange(client.wanted(ctx.block, ctx.op), push=client.staged)
    merged = client.geo.merge(param, _on_host(current), join_rows(client.take(names)))
    return ctx.executor.to_place(merged)


def _fetch_barrier(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    return _plan(attrs, ctx).control_outputs(outs)


def _prefetch(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    client = _client(ctx)
    client.endpoints.update(attrs["epmap"])
    rows = client.prefetch(list(attrs["epmap"]), [_on_host(ids) for ids in ins["X"]])
    return {"Out": [ctx.executor.to_place(r) for r in rows]}


def _remote_rows(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """An op whose table stays on the pservers (``lookup_table``, ``nce``,
    ``hierarchical_sigmoid`` and the grads that read the table): its own kernel, reading the
    rows it needs from the pservers holding them instead of from the trainer's stale copy."""
    op_type = ctx.op.type
    opdef = registry.get(op_type)
    table = ins[opdef.table_slot][0]
    sections = [int(h) for h in attrs["height_sections"]]
    epmap, tables = list(attrs["epmap"]), list(attrs["table_names"])
    if not len(sections) == len(epmap) == len(tables):
        raise ValueError(f"{op_type}: epmap {epmap}, table_names {tables} and "
                         f"height_sections {sections} must have one entry per block")
    if sum(sections) != table.shape[0]:
        raise ValueError(f"{op_type}: height_sections {sections} add up to {sum(sections)} "
                         f"rows, but the table {ctx.op.input(opdef.table_slot)[0]!r} has "
                         f"{table.shape[0]}")
    xp = registry.array_module(table)
    offsets = np.cumsum([0, *sections])

    def fetch(ids: Any) -> Any:
        """Rows ``ids`` of the table: each distinct id asked once of the pserver whose block
        (``height_sections``, in order) holds it."""
        host_ids = registry.to_host(ids)
        uniq, inverse = np.unique(host_ids.reshape(-1), return_inverse=True)
        block = np.searchsorted(offsets, uniq, side="right") - 1
        asked = [k for k in range(len(sections)) if (block == k).any()]
        # the client of the trainer's RPC ops (the startup's recv opened it): one connection
        # a trainer to each pserver, whatever program (a place's copy) the op runs in
        client = ctx.executor.host_context.get(CLIENT_KEY) or open_client(
            int(attrs["trainer_id"]))
        if client is None:
            client = _client(ctx)
        client.endpoints.update(epmap)
        rows = client.prefetch([epmap[k] for k in asked],
                               [uniq[block == k] - offsets[k] for k in asked],
                               [tables[k] for k in asked]) if asked else []
        values = np.zeros((uniq.size, *table.shape[1:]), dtype=table.dtype)
        for k, got in zip(asked, rows, strict=True):
            values[block == k] = got
        return xp.asarray(values[inverse.reshape(-1)])

    return opdef.resolve()(ins, {**attrs, "_table_rows": fetch}, outs)


#: RPCFlags field -> the listen_and_serv attr that sizes it
_THREAD_ATTRS = {"send_thread_num": "rpc_send_thread_num", "get_thread_num": "rpc_get_thread_num",
                 "prefetch_thread_num": "rpc_prefetch_thread_num"}


def _listen_and_serv(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    if isinstance(ctx.executor.place, CUDAPlace):
        # the shard's update kernels, wire and checkpoints work on host arrays
        raise NotImplementedError(
            "a pserver program on a CUDAPlace executor is not implemented: run it with "
            "fluid.Executor(fluid.CPUPlace()), as Paddle's dist tests run their pservers; "
            "its trainers may use CUDAPlace")
    options = ctx.executor.host_context.get(SERVE_KEY)
    by_hand = options is None
    if by_hand:  # a pserver started by hand: bind the endpoint, open-ended rounds
        # its pools as the op says (Fluid's ListenAndServOp reads rpc_*_thread_num: the
        # transpiler's ServerRuntimeConfig, a fleet strategy's)
        flags = dataclasses.replace(RPCFlags.current(), **{
            name: attrs[attr] for name, attr in _THREAD_ATTRS.items() if attr in attrs})
        options = ServeOptions(secret=env_secret(), flags=flags, tls=env_contexts(),
                               table=table_shard(attrs), on_start=_save_port)
    try:
        PServerShard(ctx.program, ctx.scope, options).run()
    except DistributedTrainingError as err:
        err._dask_fluid_passthrough = True  # the executor re-raises it as is
        raise
    finally:
        if by_hand:
            _remove_port_file()
    return {}


def _port_file() -> str:
    return f"/tmp/paddle.{os.getpid()}.port"


def _save_port(shard: PServerShard) -> None:
    """Fluid 1.8's ``RPCServer::SavePort``: a pserver started by hand writes the port it
    listens on to ``/tmp/paddle.<pid>.port`` once it serves, so that a script that started
    it with endpoint port 0 (Paddle's own listen_and_serv tests) can wait for it and connect;
    removed when it stops, as Fluid's ListenAndServOp does."""
    if shard.server is None:
        return
    path = _port_file()
    with open(path + ".tmp", "w") as f:  # renamed into place: a reader never sees half
        f.write(str(shard.server.address[1]))
    os.replace(path + ".tmp", path)


def _remove_port_file() -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(_port_file())


registry.set_kernel("send", _send)
registry.set_kernel("send_barrier", _send_barrier)
registry.set_kernel("recv", _recv)
registry.set_kernel("fetch_barrier", _fetch_barrier)
registry.set_kernel("prefetch", _prefetch)
registry.set_kernel("listen_and_serv", _listen_and_serv)
for _type in registry.remote_table_ops():
    registry.set_remote_kernel(_type, _remote_rows)
