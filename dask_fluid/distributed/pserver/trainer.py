"""The trainer side of pserver mode (worker side): the training-loop task and the kernels of
the RPC ops of the trainer program.

The trainer program is run by the ordinary :class:`~dask_fluid.executor.Executor`; its RPC ops
get kernels here (``registry.set_kernel``) that talk to the shards through a
:class:`PServerClient` found in ``executor.host_context``:

- ``send`` stages its gradients (nothing goes on the wire yet);
- ``send_barrier`` (sync) sends, to every pserver at once, one request with all the gradients
  staged for it and the names of the parameter blocks the following ``recv`` ops want; each reply
  comes after that pserver's optimize step and carries the updated blocks (push and pull fused:
  one round trip per pserver per step);
- ``recv`` takes its blocks from those replies. Without a preceding barrier (async mode, the
  trainer startup) the first ``recv`` of a block does the same exchange for every ``recv`` of the
  block;
- ``fetch_barrier`` has nothing left to wait for;
- ``prefetch`` asks every pserver at once for its rows of the distributed lookup table.

Links. :class:`PServerClient` reaches each pserver in the cheapest way there is: the shard
object itself when it lives on the trainer's worker; otherwise the shard's own socket (the "tcp"
data path: framed messages of :mod:`.wire`, one connection per trainer and pserver, greeted with
the job's token), or Dask RPC (the "dask" data path, for ``tls://`` and other clusters). A round
trip sends to every remote pserver, starts the Dask calls, pushes to the local shard, and only
then waits for replies, so that no pserver waits on a trainer that is itself waiting.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...executor import Executor, RunContext, Scope
from ...flags import RPCFlags
from ...framework import Program
from ...ops import registry
from ..comm import rpc
from ..comm.rpc import pack_arrays, unpack_arrays
from ..comm.wire import Connection, PeerClosed, WireTimeout, connect
from ..errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
    RemoteError,
    ServiceNotFoundError,
    WorkerLostError,
)
from ..launch import events
from ..launch.data import batch_indices, local_arrays
from ..launch.malloc import training_malloc
from .shard import PServerShard, flatten_tensors, service_name, unflatten_tensors
from .shard_server import greeting

__all__ = ["HOST_KEY", "PServerClient", "TrainerSpec", "run_trainer"]

HOST_KEY = "dask_fluid.pserver"
#: Step events go to the client at most this often (and at every epoch's last step): each one
#: costs the scheduler and the client CPU that the workers need on a small machine.
#: ``TrainResult.history`` still holds every step.
PUBLISH_INTERVAL_S = 0.05
_DUMMY = np.zeros(0, np.float32)


@dataclass
class _Call:
    """One request of a round trip: ``method`` to the pserver at ``endpoint``."""

    endpoint: str
    method: str
    header: dict[str, Any]
    arrays: dict[str, Any]


class _Hook(rpc.Service):
    """Job service: an abort of the job closes the trainer's pserver connections at once."""

    def __init__(self, client: PServerClient) -> None:
        self._client = client

    def abort(self, reason: str) -> None:
        self._client._abort(reason)

    def close(self) -> None:
        self._client.close()


class PServerClient:
    """A trainer's connections to every pserver of its job.

    A pserver on this very worker is called directly (its thread-safe core, from this thread);
    others through their direct data path (:mod:`.shard_server`) when they have one, else
    through Dask RPC. Every round trip sends to every pserver before it waits for any.

    Parameters
    ----------
    worker : distributed.Worker
    job : str
    trainer_id : int
    workers_of : dict of str to str
        Fluid endpoint -> Dask worker address of each pserver.
    flags : RPCFlags
    sync_mode : bool
    """

    def __init__(self, worker: Any, job: str, trainer_id: int, workers_of: dict[str, str],
                 flags: RPCFlags, sync_mode: bool) -> None:
        self.worker = worker
        self.job = job
        self.trainer_id = trainer_id
        self.workers_of = dict(workers_of)
        self.flags = flags
        self.sync_mode = sync_mode
        self.round = 0
        self._staged: dict[str, dict[str, Any]] = {}
        self._replies: dict[str, Any] = {}
        self._recv_plans: dict[tuple, dict[str, list[str]]] = {}
        self._links: dict[str, Any] = {}  # endpoint -> local shard | Connection | None (Dask)
        self._aborted: str | None = None
        self._hook = f"trainer/{trainer_id}"
        rpc.attach_service(worker, job, self._hook, _Hook(self))
        #: seconds spent waiting for pservers (requests in flight), for the summary
        self.rpc_s = 0.0

    # -- step bookkeeping -----------------------------------------------------------------------
    def begin_step(self, round_index: int) -> None:
        self.round = round_index
        self._replies.clear()

    def stage(self, epmap: list[str], names: list[str], values: list[Any]) -> None:
        for ep, name, value in zip(epmap, names, values, strict=True):
            self._staged.setdefault(ep, {})[name] = value

    def _wanted(self, ctx: RunContext, start_after_barrier: bool) -> dict[str, list[str]]:
        """Endpoint -> the blocks every ``recv`` of the block (from this op on) wants."""
        key = (id(ctx.block), id(ctx.op))
        plan = self._recv_plans.get(key)
        if plan is None:
            ops = ctx.block.ops
            start = next(i for i, op in enumerate(ops) if op is ctx.op)
            plan = {}
            for op in ops[start:]:
                if op.type != "recv":
                    continue
                for ep, name in zip(op.attrs["epmap"], op.attrs["recv_varnames"], strict=True):
                    plan.setdefault(ep, []).append(name)
            self._recv_plans[key] = plan
        return plan

    # -- requests -------------------------------------------------------------------------------
    def exchange(self, want: dict[str, list[str]], push: bool) -> None:
        """One request per pserver: staged gradients (if ``push``) and the blocks ``want``."""
        endpoints = sorted(set(want) | (set(self._staged) if push else set()))
        if push and self.sync_mode:
            endpoints = sorted(self.workers_of)  # every pserver counts this trainer's step
        calls = []
        for ep in endpoints:
            names = want.get(ep, [])
            if push:
                arrays, sparse = flatten_tensors(self._staged.get(ep, {}))
                header = {"method": "push_pull", "round": self.round, "want": names,
                          "sparse": sparse}
            else:
                arrays, header = {}, {"method": "pull", "want": names,
                                      "after_round": self.round}
            calls.append(_Call(ep, header["method"], header, arrays))
        if push:
            self._staged.clear()
        for reply in self._round_trip(calls):
            self._replies.update(reply)

    def prefetch(self, epmap: list[str], ids: list[Any]) -> list[Any]:
        calls = [_Call(ep, "prefetch", {"method": "prefetch"}, {"ids": np.asarray(i)})
                 for ep, i in zip(epmap, ids, strict=True)]
        return [reply["rows"] for reply in self._round_trip(calls)]

    def complete(self) -> None:
        self._round_trip([_Call(ep, "complete", {"method": "complete"}, {})
                          for ep in sorted(self.workers_of)])

    def take(self, names: list[str]) -> list[Any]:
        return [self._replies.pop(n) for n in names]

    # -- the round trip -------------------------------------------------------------------------
    def _round_trip(self, calls: list[_Call]) -> list[dict[str, Any]]:
        """Send every call, then collect the replies (name -> array dicts, in call order).

        The first failure is raised as a :class:`DistributedTrainingError` naming the pserver.
        """
        t0 = time.perf_counter()
        try:
            links = [self._link(c.endpoint) for c in calls]
            deadline = time.monotonic() + self._deadline_s
            results: list[Any] = [None] * len(calls)
            started = {}
            for i, (c, link) in enumerate(zip(calls, links, strict=True)):
                if isinstance(link, Connection):
                    self._wire(c, lambda c=c, link=link: link.send(
                        c.header, c.arrays, deadline=deadline, stop=self._stopped))
                elif link is None:
                    started[i] = self._start_dask(c)
            finishers = {i: self._local(c, link) for i, (c, link) in
                         enumerate(zip(calls, links, strict=True))
                         if isinstance(link, PServerShard)}
            # remote replies first: a reply larger than the socket buffers only moves while
            # this thread reads it, and the local reply costs nothing once its round is done
            for i, (c, link) in enumerate(zip(calls, links, strict=True)):
                if isinstance(link, Connection):
                    # copied out of shared memory: the parameters it holds outlive the message
                    header, buf = self._wire(c, lambda link=link: link.recv(
                        deadline=deadline, stop=self._stopped, copy=True))
                    results[i] = self._unwrap(c, header, buf)
            for i, fut in started.items():
                header, meta, buf = _future_result(fut, self._deadline_s, calls[i], self.round)
                results[i] = self._unwrap(calls[i], {"ok": True, **header, "meta": meta}, buf)
            for i, finish in finishers.items():
                results[i] = finish()
            return results
        except DistributedTrainingError as err:
            err._dask_fluid_passthrough = True  # the executor re-raises it as is
            raise
        finally:
            self.rpc_s += time.perf_counter() - t0

    def _local(self, c: _Call, shard: PServerShard) -> Any:
        """Start ``c`` on a shard of this worker; return what finishes it (may block)."""
        def guarded(fn: Any, *args: Any) -> Any:
            try:
                return fn(*args)
            except DistributedTrainingError:
                raise
            except Exception as exc:
                raise RemoteError(f"{service_name(c.endpoint)}.{c.method} raised "
                                  f"{type(exc).__name__}: {exc}", "pserver", c.endpoint,
                                  self.round, remote_type=type(exc).__name__,
                                  remote_message=str(exc)) from exc

        tid, h = self.trainer_id, c.header
        if c.method == "push_pull":
            grads = unflatten_tensors(c.arrays, h["sparse"])
            release = guarded(shard.push, tid, h["round"], grads)
            return lambda: guarded(shard.reply, tid, release, tuple(h["want"]))
        if c.method == "pull":
            return lambda: guarded(shard.pull_sync, tid, tuple(h["want"]), h["after_round"])
        if c.method == "prefetch":
            return lambda: {"rows": guarded(shard.prefetch_sync, c.arrays["ids"])}
        return lambda: guarded(shard.complete, tid) or {}

    def _start_dask(self, c: _Call) -> concurrent.futures.Future:
        meta, buf = pack_arrays(c.arrays)
        return rpc.start_call(self.worker, self.workers_of[c.endpoint], self.job,
                              service_name(c.endpoint), "request", deadline_s=self._deadline_s,
                              role="pserver", endpoint=c.endpoint, step=self.round,
                              trainer_id=self.trainer_id, header=c.header, meta=meta, buf=buf)

    def _unwrap(self, c: _Call, header: dict, buf: Any) -> dict[str, Any]:
        if not header.get("ok"):
            raise rpc._remote_exception(header["error"], role="pserver", endpoint=c.endpoint,
                                        step=self.round,
                                        what=f"{service_name(c.endpoint)}.{c.method}")
        meta = header["meta"]
        return unpack_arrays(meta, buf) if meta["names"] else {}

    def _wire(self, c: _Call, fn: Any) -> Any:
        """Run a socket operation of ``c``; wire errors become errors naming the pserver."""
        try:
            return fn()
        except PeerClosed as exc:
            if self._aborted is not None:
                raise JobAbortedError(f"job aborted: {self._aborted}", "pserver", c.endpoint,
                                      self.round) from None
            raise WorkerLostError(f"the connection to pserver {c.endpoint} "
                                  f"({self.workers_of[c.endpoint]}) broke during "
                                  f"{c.method}: {exc}", "pserver", c.endpoint,
                                  self.round) from exc
        except WireTimeout:
            raise DeadlineExceededError(f"{service_name(c.endpoint)}.{c.method} did not answer",
                                        "pserver", c.endpoint, self.round,
                                        deadline_ms=self._deadline_s * 1000) from None

    # -- connections ----------------------------------------------------------------------------
    def _link(self, ep: str) -> Any:
        """The shard itself (same worker), a socket to its data path, or None (Dask RPC)."""
        if ep in self._links:
            return self._links[ep]
        address = self.workers_of[ep]
        service = service_name(ep)
        if address == self.worker.address:
            link = self._retrying(ep, lambda: rpc.get_service(self.worker, self.job, service))
        else:
            info = self._retrying(ep, lambda: rpc.call_sync(
                self.worker, address, self.job, service, "endpoint_info",
                deadline_s=self.flags.deadline_s, role="pserver", endpoint=ep,
                step=self.round))
            link = None
            if info is not None:
                try:
                    link = connect(info["host"], info["port"],
                                   greeting(self.job, ep, self.trainer_id),
                                   self.flags.deadline_s)
                except OSError as exc:
                    raise WorkerLostError(f"could not connect to pserver {ep} at "
                                          f"{info['host']}:{info['port']}: {exc}", "pserver",
                                          ep, self.round) from exc
        self._links[ep] = link
        return link

    def _retrying(self, ep: str, fn: Any) -> Any:
        """Retry while the pserver has not attached its service yet (job start)."""
        give_up = time.monotonic() + self.flags.deadline_s
        while True:
            if self._aborted is not None:
                raise JobAbortedError(f"job aborted: {self._aborted}", "pserver", ep,
                                      self.round)
            try:
                return fn()
            except ServiceNotFoundError as err:
                if time.monotonic() > give_up:
                    raise DeadlineExceededError(
                        f"the pserver service never appeared on worker {err.worker}",
                        "pserver", ep, self.round,
                        deadline_ms=self.flags.deadline_ms) from None
                time.sleep(0.02)

    @property
    def _deadline_s(self) -> float:
        # the pserver answers a missed barrier with the name of the missing trainer after the
        # deadline; give that answer a moment to arrive before this call gives up on its own
        return self.flags.deadline_s + 1.0 if self.sync_mode else self.flags.deadline_s

    def _stopped(self) -> bool:
        return self._aborted is not None

    def _abort(self, reason: str) -> None:
        if self._aborted is None:
            self._aborted = reason
        for link in list(self._links.values()):
            if isinstance(link, Connection):
                link.shutdown()  # wakes a blocked read

    def close(self) -> None:
        """Close the connections (the shards' threads see the trainer hang up)."""
        for link in list(self._links.values()):
            if isinstance(link, Connection):
                link.close()
        self._links.clear()
        rpc.detach_service(self.worker, self.job, self._hook)


def _future_result(fut: concurrent.futures.Future, deadline_s: float, c: _Call,
                   step: int) -> Any:
    try:
        return fut.result(deadline_s + rpc._SYNC_GRACE_S)
    except concurrent.futures.TimeoutError:
        fut.cancel()
        raise DeadlineExceededError("the worker's event loop did not run the call (is the "
                                    "worker closing?)", "pserver", c.endpoint, step,
                                    deadline_ms=deadline_s * 1000) from None


# --------------------------------------------------------------------------------------------
# Kernels of the trainer program's RPC ops
# --------------------------------------------------------------------------------------------


def _client(ctx: RunContext) -> PServerClient:
    client = ctx.executor.host_context.get(HOST_KEY)
    if client is None:
        raise RuntimeError(f"op {ctx.op.type!r} talks to parameter servers: run the transpiled "
                           "program with dask_fluid.distributed.train_pserver")
    return client


def _send(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    names = list(attrs.get("send_varnames") or ctx.op.input("X"))
    _client(ctx).stage(list(attrs["epmap"]), names, ins["X"])
    return {"Out": [_DUMMY] * len(ctx.op.output("Out"))} if "Out" in outs else {}


def _send_barrier(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    client = _client(ctx)
    client.exchange(client._wanted(ctx, True), push=True)
    return {"Out": [_DUMMY] * len(ctx.op.output("Out"))} if "Out" in outs else {}


def _recv(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    client = _client(ctx)
    names = list(attrs.get("recv_varnames") or ctx.op.output("Out"))
    if any(n not in client._replies for n in names):
        # no barrier before: async step (push what is staged) or the startup (pull only)
        client.exchange(client._wanted(ctx, False), push=bool(client._staged))
    return {"Out": client.take(names)}


def _fetch_barrier(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    return {"Out": [_DUMMY] * len(ctx.op.output("Out"))} if "Out" in outs else {}


def _prefetch(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    rows = _client(ctx).prefetch(list(attrs["epmap"]), ins["X"])
    return {"Out": rows}


registry.set_kernel("send", _send)
registry.set_kernel("send_barrier", _send_barrier)
registry.set_kernel("recv", _recv)
registry.set_kernel("fetch_barrier", _fetch_barrier)
registry.set_kernel("prefetch", _prefetch)


# --------------------------------------------------------------------------------------------
# The trainer task
# --------------------------------------------------------------------------------------------


@dataclass
class TrainerSpec:
    """Everything one trainer needs, built on the client."""

    job: str
    rank: int
    program_json: str
    startup_json: str
    workers_of: dict[str, str]
    feed_names: list[str]
    fetch_names: list[str]
    steps_per_epoch: list[int]
    epochs: int
    batch_size: int
    shuffle: bool
    seed: int
    sync_mode: bool
    flags: RPCFlags = field(default_factory=RPCFlags)
    start_round: int = 0
    keep_vars: list[str] = field(default_factory=list)
    tune_malloc: bool = True


def _prepare_feed(program: Program, arrays: dict[str, Any], names: list[str]) -> dict:
    """Cast to the data layers' dtypes and add the trailing 1 of label columns, once."""
    block = program.global_block()
    out = {}
    for name in names:
        if name not in arrays:
            raise ValueError(f"no data for the data layer {name!r}; data has {sorted(arrays)}")
        arr = np.asarray(arrays[name])
        var = block.var(name)
        if arr.dtype != np.dtype(var.dtype):
            arr = arr.astype(var.dtype)
        if var.shape is not None and arr.ndim == len(var.shape) - 1 and var.shape[-1] == 1:
            arr = arr.reshape(*arr.shape, 1)
        out[name] = np.ascontiguousarray(arr)
    return out


def run_trainer(spec: TrainerSpec, parts: list[Any]) -> dict:
    """The trainer task: train on this worker's rows against the pservers of the job.

    Returns ``{"rank", "steps", "samples", "elapsed", "history", "vars"}`` where ``history``
    holds this trainer's step events and ``vars`` the values of ``spec.keep_vars``.
    """
    from distributed import get_worker, secede

    worker = get_worker()
    secede()  # a pserver task may share this worker's thread slot
    state = {"round": spec.start_round}
    try:
        with training_malloc(spec.tune_malloc):
            return _train(worker, spec, parts, state)
    except DistributedTrainingError:
        raise
    except Exception as exc:  # name the role, endpoint and step, keep the cause
        raise DistributedTrainingError(f"{type(exc).__name__}: {exc}", "trainer",
                                       worker.address, state["round"]) from exc


def _train(worker: Any, spec: TrainerSpec, parts: list[Any], state: dict) -> dict:
    program = Program.from_json(spec.program_json)
    feed_data = _prepare_feed(program, local_arrays(parts), spec.feed_names)
    client = PServerClient(worker, spec.job, spec.rank, spec.workers_of, spec.flags,
                           spec.sync_mode)
    try:
        return _loop(worker, spec, program, feed_data, client, state)
    finally:
        client.close()


def _loop(worker: Any, spec: TrainerSpec, program: Program, feed_data: dict[str, Any],
          client: PServerClient, state: dict) -> dict:
    n_steps = spec.steps_per_epoch[spec.rank]
    m = max(spec.steps_per_epoch)
    n_rows = len(next(iter(feed_data.values())))
    exe = Executor()
    exe.host_context[HOST_KEY] = client
    scope = Scope()
    start_epoch, start_step = divmod(spec.start_round, m)
    # the startup pull waits for the rounds before this trainer's first one (resume)
    first_round = spec.start_round if start_step < n_steps else (start_epoch + 1) * m
    client.begin_step(first_round)
    exe.run(Program.from_json(spec.startup_json), scope=scope)
    history: list[dict] = []
    samples = steps = 0
    published = 0.0
    t0 = time.perf_counter()
    for epoch in range(start_epoch, spec.epochs):
        batches = batch_indices(n_rows, spec.batch_size, epoch, spec.seed + 1000 * spec.rank,
                                spec.shuffle)[:n_steps]
        first = start_step if epoch == start_epoch else 0
        for s in range(first, len(batches)):
            idx = batches[s]
            round_index = epoch * m + s
            state["round"] = round_index
            client.begin_step(round_index)
            feed = {name: arr[idx] for name, arr in feed_data.items()}
            fetched = exe.run(program, feed=feed, fetch_list=spec.fetch_names, scope=scope)
            steps += 1
            samples += len(idx)
            event = events.step_event(spec.rank, epoch, round_index, len(idx),
                                      spec.fetch_names, fetched)
            event["time"] = time.time()
            history.append(event)
            now = time.perf_counter()
            if now - published >= PUBLISH_INTERVAL_S or s == len(batches) - 1:
                events.publish(worker, spec.job, event)
                published = now
        events.publish(worker, spec.job, {"type": "epoch_end", "rank": spec.rank,
                                          "epoch": epoch, "steps": steps, "samples": samples})
    elapsed = time.perf_counter() - t0
    client.complete()
    kept = {n: np.array(scope.get(n), copy=True) for n in spec.keep_vars if n in scope}
    events.publish(worker, spec.job, {"type": "done", "rank": spec.rank, "steps": steps,
                                      "samples": samples, "elapsed": elapsed})
    return {"rank": spec.rank, "steps": steps, "samples": samples, "elapsed": elapsed,
            "rpc_s": client.rpc_s, "history": history, "vars": kept}
