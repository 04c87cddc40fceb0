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
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..executor import Executor, RunContext, Scope
from ..flags import RPCFlags
from ..framework import Program
from ..ops import registry
from . import events, rpc
from .data import batch_indices, local_arrays
from .errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
    RemoteError,
    ServiceNotFoundError,
)
from .pserver import decode_tensors, encode_tensors, service_name
from .rpc import Request, _run_bounded, call

__all__ = ["HOST_KEY", "PServerClient", "TrainerSpec", "run_trainer"]

HOST_KEY = "dask_fluid.pserver"
#: Step events go to the client at most this often (and at every epoch's last step): each one
#: costs the scheduler and the client CPU that the workers need on a small machine.
#: ``TrainResult.history`` still holds every step.
PUBLISH_INTERVAL_S = 0.05
_DUMMY = np.zeros(0, np.float32)


class PServerClient:
    """A trainer's connection to every pserver of its job.

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

    # -- the exchange ---------------------------------------------------------------------------
    def exchange(self, want: dict[str, list[str]], push: bool) -> None:
        """One request per pserver: staged gradients (if ``push``) and the blocks ``want``."""
        endpoints = sorted(set(want) | (set(self._staged) if push else set()))
        if push and self.sync_mode:
            endpoints = sorted(self.workers_of)  # every pserver counts this trainer's step
        requests = []
        for ep in endpoints:
            names = want.get(ep, [])
            if push:
                meta, buf, sparse = encode_tensors(self._staged.get(ep, {}))
                payload = {"trainer_id": self.trainer_id, "round": self.round, "meta": meta,
                           "buf": buf, "sparse": sparse, "want": names}
                method = "push_pull"
            else:
                payload = {"trainer_id": self.trainer_id, "want": names,
                           "after_round": self.round}
                method = "pull"
            requests.append(Request(self.workers_of[ep], method, payload, endpoint=ep))
        if push:
            self._staged.clear()
        for meta, buf in self._call(requests, retry=not push):
            self._replies.update(decode_tensors(meta, buf, None))

    def _call(self, requests: list[Request], retry: bool = False) -> list[Any]:
        """Make ``requests`` (each to its own pserver's service) at once; results in order.

        The first failure cancels the calls still in flight and is raised (as ``call_many``).
        """
        if not requests:
            return []
        deadline_s, job, worker, step = self._deadline_s, self.job, self.worker, self.round

        async def many() -> list[Any]:
            tasks = [asyncio.ensure_future(
                _local_call(worker, job, r, deadline_s, step) if r.address == worker.address
                else call(worker, r.address, job, service_name(r.endpoint), r.method,
                          deadline_s=deadline_s, role="pserver", endpoint=r.endpoint, step=step,
                          **r.payload)) for r in requests]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                failed = [t.exception() for t in tasks
                          if t.done() and not t.cancelled() and t.exception() is not None]
                if failed:
                    raise failed[0]  # the others are marked retrieved: no log noise
                return [t.result() for t in tasks]
            finally:
                for t in tasks:
                    if not t.done():
                        t.cancel()

        where = ", ".join(r.endpoint or r.address for r in requests)

        def once() -> list[Any]:
            return _run_bounded(worker, many(), deadline_s, "pserver", where, step)

        # only idempotent pulls are retried: they may reach a pserver before it is attached
        t0 = time.perf_counter()
        try:
            return self._retrying(once) if retry else once()
        except DistributedTrainingError as err:
            err._dask_fluid_passthrough = True  # the executor re-raises it as is
            raise
        finally:
            self.rpc_s += time.perf_counter() - t0

    @property
    def _deadline_s(self) -> float:
        # the pserver answers a missed barrier with the name of the missing trainer after the
        # deadline; give that answer a moment to arrive before this call gives up on its own
        return self.flags.deadline_s + 1.0 if self.sync_mode else self.flags.deadline_s

    def _retrying(self, fn: Any) -> Any:
        """Retry while a pserver has not attached its service yet (job start)."""
        give_up = time.monotonic() + self.flags.deadline_s
        while True:
            try:
                return fn()
            except ServiceNotFoundError as err:
                if time.monotonic() > give_up:
                    raise DeadlineExceededError(
                        f"the pserver service never appeared on worker {err.worker}",
                        "pserver", err.worker, self.round,
                        deadline_ms=self.flags.deadline_ms) from None
                time.sleep(0.02)

    def take(self, names: list[str]) -> list[Any]:
        return [self._replies.pop(n) for n in names]

    def prefetch(self, epmap: list[str], ids: list[Any]) -> list[Any]:
        requests = [Request(self.workers_of[ep], "prefetch", {"ids": i}, endpoint=ep)
                    for ep, i in zip(epmap, ids, strict=True)]
        return self._call(requests)

    def complete(self) -> None:
        requests = [Request(w, "complete", {"trainer_id": self.trainer_id}, endpoint=ep)
                    for ep, w in sorted(self.workers_of.items())]
        self._call(requests)


async def _local_call(worker: Any, job: str, r: Request, deadline_s: float, step: int) -> Any:
    """A call to a pserver on this very worker: straight to the service on the event loop.

    Skips the TCP round trip to itself and the (de)serialisation of the payload and the
    reply; the arrays travel by reference (both sides only read them: the payload and the
    reply are freshly packed buffers).
    """
    service = service_name(r.endpoint)
    try:
        return await rpc._with_deadline(
            rpc._dispatch(worker, job, service, r.method, dict(r.payload)), deadline_s)
    except asyncio.TimeoutError:
        raise DeadlineExceededError(f"{service}.{r.method} did not answer", "pserver",
                                    r.endpoint, step, deadline_ms=deadline_s * 1000) from None
    except (DistributedTrainingError, ServiceNotFoundError):
        raise
    except JobAbortedError:
        raise
    except Exception as exc:
        raise RemoteError(f"{service}.{r.method} raised {type(exc).__name__}: {exc}",
                          "pserver", r.endpoint, step, remote_type=type(exc).__name__,
                          remote_message=str(exc)) from exc


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
        return _train(worker, spec, parts, state)
    except DistributedTrainingError:
        raise
    except Exception as exc:  # name the role, endpoint and step, keep the cause
        raise DistributedTrainingError(f"{type(exc).__name__}: {exc}", "trainer",
                                       worker.address, state["round"]) from exc


def _train(worker: Any, spec: TrainerSpec, parts: list[Any], state: dict) -> dict:
    n_steps = spec.steps_per_epoch[spec.rank]
    m = max(spec.steps_per_epoch)
    program = Program.from_json(spec.program_json)
    feed_data = _prepare_feed(program, local_arrays(parts), spec.feed_names)
    n_rows = len(next(iter(feed_data.values())))
    client = PServerClient(worker, spec.job, spec.rank, spec.workers_of, spec.flags,
                           spec.sync_mode)
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
