"""The worker tasks of ``train_pserver``: each runs its transpiled program with the executor.

A pserver task runs the pserver startup program, then ``exe.run(pserver_program)``: the
``listen_and_serv`` kernel serves the endpoint exactly as in a process started by hand, with
:class:`~dask_fluid.distributed.pserver.shard.ServeOptions` saying what Dask adds (bind any free
port of the worker's host, the job's schedule, checkpoints, the job-service hook through which
same-worker trainers and the Dask RPC data path reach the shard). A trainer task runs the
trainer startup and then ``exe.run(trainer_program)`` once per batch of its rows, with a
:class:`~dask_fluid.distributed.pserver.client.DaskClient` for the RPC ops.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...executor import Executor, Scope
from ...flags import RPCFlags
from ...framework import Program
from ..comm.rpc import attach_service
from ..comm.tls import worker_contexts
from ..comm.wire import worker_host
from ..errors import DistributedTrainingError
from ..pserver.client import DaskClient
from ..pserver.ops import CLIENT_KEY, SERVE_KEY, table_shard
from ..pserver.shard import PServerShard, Schedule, ServeOptions, service_name
from . import elastic, events
from .data import batch_indices, local_arrays
from .feeds import check_finite, prepare_feeds
from .pserver_stats import StatsPublisher
from .worker_tuning import WorkerTuning, tuned_for_training

__all__ = ["ShardSpec", "TrainerSpec", "run_pserver", "run_trainer"]

#: Step events go to the client at most this often (and at every epoch's last step).
PUBLISH_INTERVAL_S = events.PUBLISH_INTERVAL_S


@dataclass
class ShardSpec:
    """Everything a pserver task needs, built on the client and shipped with the task."""

    job: str
    #: the job secret the direct data path checks (never part of a task key)
    secret: bytes
    endpoint: str
    program_json: str
    startup_json: str
    trainer_workers: list[str]
    schedule: Schedule
    n_pservers: int
    flags: RPCFlags = field(default_factory=RPCFlags)
    checkpoint_dir: str | None = None
    checkpoint_every: int | str | None = None
    resume_path: str | None = None
    #: numpy work on shards with fewer parameter bytes runs in the calling thread; None keeps
    #: the class default
    inline_bytes: int | None = None
    #: "tcp": trainers on other workers reach the shard through its own socket; "dask":
    #: through Dask RPC handlers
    transport: str = "dask"
    tuning: WorkerTuning = field(default_factory=WorkerTuning)
    #: elastic training: on failure, leave the state for the launcher's restart (:mod:`.elastic`)
    elastic: bool = False
    #: an elastic restart's state for this pserver (instead of its startup values)
    resume_state: dict[str, np.ndarray] | None = None
    #: this pserver's cut of the job's ``initial_values`` (over its startup values)
    initial_values: dict[str, np.ndarray] | None = None


def run_pserver(spec: ShardSpec) -> dict:
    """The pserver task: run the pserver program until the trainers complete.

    Returns ``{"endpoint", "worker", "state": {name: array}, "info"}``: the state is every
    variable the pserver keeps (:meth:`PServerShard.state_names`: its parameter blocks and
    their optimizer state).
    """
    from distributed import get_worker, secede

    worker = get_worker()
    # Leave the worker's thread slot to the trainer that shares this worker (Fluid runs the
    # pserver as its own process); the scheduler is told the task is long-running.
    secede()
    started: list[PServerShard] = []
    stats: list[StatsPublisher] = []

    def on_start(shard: PServerShard) -> None:
        started.append(shard)
        stats.append(StatsPublisher(worker, spec.job, shard))  # before any trainer call
        attach_service(worker, spec.job, service_name(spec.endpoint), shard)

    try:
        program = Program.from_json(spec.program_json)
        exe, scope = Executor(), Scope()
        exe.run(Program.from_json(spec.startup_json), scope=scope)
        serv = program.global_block().ops[-1]
        exe.host_context[SERVE_KEY] = ServeOptions(
            secret=spec.secret, flags=spec.flags, bind=(worker_host(worker.address), 0),
            serve_socket=spec.transport == "tcp", tls=worker_contexts(worker),
            schedule=spec.schedule,
            trainer_names=list(spec.trainer_workers), table=table_shard(serv.attrs),
            n_pservers=spec.n_pservers, checkpoint_dir=spec.checkpoint_dir,
            checkpoint_every=spec.checkpoint_every, resume_path=spec.resume_path,
            inline_bytes=spec.inline_bytes, loop=worker.loop.asyncio_loop, on_start=on_start,
            fail_on_hangup=False, elastic=spec.elastic, resume_state=spec.resume_state,
            initial_values=spec.initial_values)
        with tuned_for_training(worker, spec.tuning):
            exe.run(program, scope=scope)
    except DistributedTrainingError:
        if spec.elastic and started:
            state = started[0].elastic_state()
            elastic.stash(spec.job, state["pserver_id"], state)
        raise
    except Exception as exc:  # name the role, endpoint and step, keep the cause
        raise DistributedTrainingError(f"{type(exc).__name__}: {exc}", "pserver",
                                       spec.endpoint, spec.schedule.start_round) from exc
    finally:
        for publisher in stats:
            publisher.stop()
    shard = started[0]
    return {"endpoint": spec.endpoint, "worker": worker.address,
            "state": shard.state_copy(), "info": shard.info()}


@dataclass
class TrainerSpec:
    """Everything one trainer task needs, built on the client."""

    job: str
    secret: bytes
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
    tuning: WorkerTuning = field(default_factory=WorkerTuning)
    #: sync gradients for a pserver on a network link go out at this many bytes (None: with
    #: the barrier; :data:`..pserver.client.EARLY_PUSH_KEY`, read on the client)
    early_push_bytes: int | None = None
    #: values of the trainer's own persistable variables (those no pserver holds, such as
    #: batch norm's statistics) to start from instead of its startup program's
    initial_values: dict[str, np.ndarray] = field(default_factory=dict)


def run_trainer(spec: TrainerSpec, parts: list[Any]) -> dict:
    """The trainer task: train on this worker's rows against the pservers of the job.

    Returns ``{"rank", "steps", "samples", "elapsed", "rpc_s", "requests", "bytes_sent",
    "bytes_received", "history", "vars"}`` (``requests``: pserver round trips; bytes: tensor
    bytes over sockets) where
    ``history`` holds this trainer's step events and ``vars`` the values of
    ``spec.keep_vars``.
    """
    from distributed import get_worker, secede

    worker = get_worker()
    secede()  # a pserver task may share this worker's thread slot
    state = {"round": spec.start_round}
    try:
        with tuned_for_training(worker, spec.tuning):
            return _train(worker, spec, parts, state)
    except DistributedTrainingError:
        raise
    except Exception as exc:  # name the role, endpoint and step, keep the cause
        raise DistributedTrainingError(f"{type(exc).__name__}: {exc}", "trainer",
                                       worker.address, state["round"]) from exc


def _train(worker: Any, spec: TrainerSpec, parts: list[Any], state: dict) -> dict:
    program = Program.from_json(spec.program_json)
    feed_data = prepare_feeds(program, local_arrays(parts), spec.feed_names)
    client = DaskClient(worker, spec.job, spec.secret, spec.rank, spec.workers_of, spec.flags,
                        spec.sync_mode, early_push_bytes=spec.early_push_bytes)
    try:
        return _loop(worker, spec, program, feed_data, client, state)
    finally:
        client.close()


def _loop(worker: Any, spec: TrainerSpec, program: Program, feed_data: dict[str, Any],
          client: DaskClient, state: dict) -> dict:
    n_steps = spec.steps_per_epoch[spec.rank]
    m = max(spec.steps_per_epoch)
    n_rows = len(next(iter(feed_data.values())))
    exe = Executor()
    exe.host_context[CLIENT_KEY] = client
    scope = Scope()
    start_epoch, start_step = divmod(spec.start_round, m)
    # the startup pull waits for the rounds before this trainer's first one (resume)
    first_round = spec.start_round if start_step < n_steps else (start_epoch + 1) * m
    client.begin_step(first_round)
    exe.run(Program.from_json(spec.startup_json), scope=scope)
    for name, value in spec.initial_values.items():
        scope.vars[name] = np.array(value, copy=True)
    history: list[dict] = []
    samples = steps = 0
    meter = events.StepMeter(PUBLISH_INTERVAL_S)
    t0 = meter.start
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
            waited = client.rpc_s
            fetched = exe.run(program, feed=feed, fetch_list=spec.fetch_names, scope=scope)
            check_finite(spec.fetch_names, fetched, epoch, round_index)
            steps += 1
            samples += len(idx)
            meter.step(len(idx), client.rpc_s - waited)
            event = events.step_event(spec.rank, epoch, round_index, len(idx),
                                      spec.fetch_names, fetched)
            event["time"] = time.time()
            history.append(event)
            if meter.due(last=s == len(batches) - 1):
                event.update(meter.fields())
                events.publish(worker, spec.job, event)
        events.publish(worker, spec.job, {"type": "epoch_end", "rank": spec.rank,
                                          "epoch": epoch, "steps": steps, "samples": samples})
    elapsed = time.perf_counter() - t0
    client.complete()
    kept = {n: np.array(scope.get(n), copy=True) for n in spec.keep_vars if n in scope}
    events.publish(worker, spec.job, {"type": "done", "rank": spec.rank, "steps": steps,
                                      "samples": samples, "elapsed": elapsed})
    return {"rank": spec.rank, "steps": steps, "samples": samples, "elapsed": elapsed,
            "rpc_s": client.rpc_s, "requests": client.requests,
            "bytes_sent": client.bytes_sent, "bytes_received": client.bytes_received,
            "history": history, "vars": kept}
