"""``train_pserver``: run Fluid's pserver-mode training on a Dask cluster (client side).

The client transpiles (one trainer program per trainer id, one program per pserver), keeps the
data where it lives, maps the pserver endpoints onto workers (:mod:`.placement`), and launches
one pinned task per pserver and per trainer (:mod:`.pserver_tasks`: each runs its transpiled
program with the executor, as a process started by hand would) through :func:`.tasks.run_tasks`,
which aborts the whole job on the first failure. The result holds the full parameters,
assembled from the pservers' blocks.
"""

from __future__ import annotations

import concurrent.futures
import copy
import logging
import math
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dask.config
import numpy as np

from ...flags import RPCFlags
from ...framework import Program, Variable, default_main_program, default_startup_program
from ...transpiler import DistributeTranspiler, DistributeTranspilerConfig, summarize
from ...transpiler.pserver_state import Piece, assemble, cut, pserver_pieces
from ..checkpoint_files import check_checkpoint_args
from ..comm import transport
from ..comm.rpc import ensure_plugin
from ..errors import DeadlineExceededError, DistributedTrainingError, WorkerLostError
from ..program_values import checked_values, persistable_names
from ..pserver import checkpoint as ckpt
from ..pserver.client import early_push_setting
from ..pserver.shard import Schedule
from . import elastic as recovery
from .data import assign_trainers, partition_by_worker
from .events import Callback, TrainResult
from .feeds import check_data_keys, feed_names
from .placement import Placement, place_pservers
from .pserver_tasks import ShardSpec, TrainerSpec, run_pserver, run_trainer
from .tasks import DETACH_TIMEOUT_S, LastStep, TaskSpec, live_workers, new_job_id, run_tasks
from .worker_tuning import WorkerTuning

__all__ = ["train_pserver"]

logger = logging.getLogger(__name__)

#: an elastic job gives up after this many restarts (a cluster losing worker after worker)
#: dask.config key: pserver shards with fewer parameter bytes do their numpy work in the
#: requesting thread instead of the FLAGS_rpc_*_thread_num pools (default 1 MiB)
INLINE_BYTES_KEY = "dask_fluid.pserver.inline-bytes"
def _names(fetch_list: Iterable[Variable | str]) -> list[str]:
    return [f.name if isinstance(f, Variable) else str(f) for f in fetch_list]


def _check_args(data: Any, epochs: int, batch_size: int, checkpoint_dir: Any,
                checkpoint_every: Any, steps_per_epoch: int | None) -> None:
    if data is None:
        raise ValueError("data is required: a dict of data-layer name -> dask array / numpy "
                         "array, or a list with one such dict per trainer")
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} = {value!r} is not allowed: it must be an int >= 1")
    if steps_per_epoch is not None and (not isinstance(steps_per_epoch, int)
                                        or steps_per_epoch < 1):
        raise ValueError(f"steps_per_epoch = {steps_per_epoch!r} is not allowed: None or an "
                         "int >= 1")
    check_checkpoint_args(checkpoint_dir, checkpoint_every)


def _place_data(client: Any, data: Any, trainers: int | Sequence[str] | None,
                workers: list[str], timeout_s: float
                ) -> tuple[list[str], list[list[Any]], list[int]]:
    """(trainer workers, parts per trainer, rows per trainer)."""
    count: int | None = None
    if isinstance(trainers, int) and not isinstance(trainers, bool):
        if trainers < 1:
            raise ValueError(f"trainers = {trainers} is not allowed: need at least 1 trainer")
        count = trainers
        # more trainers than workers: several trainer loops per worker, over all of them
        wanted: list[str] | None = workers[:trainers] if trainers <= len(workers) else None
    elif trainers is None:
        wanted = None
    else:
        wanted = list(trainers)
        unknown = sorted(set(wanted) - set(workers))
        # with one dict per trainer a worker may be named for several (an elastic restart
        # keeps the workers of the trainers that are left)
        repeated = len(set(wanted)) != len(wanted) and not isinstance(data, (list, tuple))
        if unknown or repeated:
            raise ValueError(f"trainers {wanted} must be distinct addresses of live workers; "
                             f"unknown: {unknown}; the cluster's workers are {workers}")
    if isinstance(data, (list, tuple)):
        # one dict per trainer: trainer r trains on exactly data[r]
        if wanted is None:  # trainer r on worker r, cycling when there are more trainers
            wanted = [workers[r % len(workers)] for r in range(len(data))]
        if len(wanted) != len(data):
            raise ValueError(f"data has {len(data)} per-trainer parts for {len(wanted)} "
                             "trainers; give one dict per trainer")
        parts, rows = [], []
        for w, part in zip(wanted, data, strict=True):
            part = {k: np.asarray(v) for k, v in part.items()}
            lengths = {len(v) for v in part.values()}
            if len(lengths) != 1 or 0 in lengths:
                raise ValueError("every per-trainer data dict needs arrays of the same, non-zero "
                                 "number of rows")
            try:
                [future] = client.scatter([part], workers=[w], broadcast=False, hash=False,
                                          timeout=timeout_s)
            except TimeoutError:
                raise DeadlineExceededError(f"worker {w} did not take trainer {len(parts)}'s "
                                            "data", "trainer", w,
                                            deadline_ms=timeout_s * 1000) from None
            parts.append([future])
            rows.append(lengths.pop())
        return list(wanted), parts, rows
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be a dict of name -> array or a list of such dicts, got "
                        f"{type(data).__name__}")
    partition = partition_by_worker(client, data, workers=wanted, timeout_s=timeout_s,
                                    min_blocks=count or 1)
    allowed = wanted if wanted is not None else workers
    # rank r's rows depend on the data only (not on where Dask put the chunks): runs repeat
    n = count if count is not None else len(wanted) if wanted is not None else min(
        len(workers), sum(1 for r in partition.chunk_rows if r > 0))
    assignment = assign_trainers(client, partition, n, allowed, timeout_s)
    return assignment.workers, assignment.parts, assignment.rows


def _transpile_all(origin: Program, origin_startup: Program, config: DistributeTranspilerConfig,
                   endpoints: list[str], n: int, sync_mode: bool
                   ) -> tuple[list[tuple[Program, Program]], DistributeTranspiler]:
    """One (trainer program, trainer startup) per trainer id; the transpiler of trainer 0."""
    out, first = [], None
    for t in range(n):
        main, startup = origin.clone(), origin_startup.clone()
        tr = DistributeTranspiler(copy.copy(config))
        tr.transpile(t, program=main, pservers=",".join(endpoints), trainers=n,
                     sync_mode=sync_mode, startup_program=startup)
        out.append((tr.get_trainer_program(), startup))
        if first is None:
            first = tr
    return out, first


def _lost_worker_error(client: Any, tasks: list[TaskSpec], step: int | None
                       ) -> DistributedTrainingError:
    alive = live_workers(client)
    lost = [t for t in tasks if t.worker not in alive]
    lost.sort(key=lambda t: t.role != "trainer")  # a lost trainer also took its data
    if not lost:
        return DistributedTrainingError("a task of the job was cancelled by the scheduler",
                                        tasks[0].role, tasks[0].where, step)
    t = lost[0]
    return WorkerLostError(f"worker {t.worker} left the cluster while running the job's "
                           f"{t.role} task (its data went with it)", t.role, t.where, step)


def train_pserver(client: Any, main_program: Program | None = None,
                  startup_program: Program | None = None, data: Any = None, *,
                  transpiler: DistributeTranspiler | None = None,
                  config: DistributeTranspilerConfig | None = None,
                  pservers: int | str | Sequence[str] = 2,
                  trainers: int | Sequence[str] | None = None, sync_mode: bool = True,
                  epochs: int = 1, batch_size: int = 128,
                  fetch_list: Iterable[Variable | str] = (), shuffle: bool = True,
                  seed: int = 0, callbacks: Iterable[Callback] = (),
                  checkpoint_dir: str | None = None, checkpoint_every: int | str | None = None,
                  resume_from: str | None = None, flags: RPCFlags | None = None,
                  steps_per_epoch: int | None = None, elastic: bool = False,
                  min_trainers: int = 1,
                  initial_values: Mapping[str, Any] | None = None) -> TrainResult:
    """Train a Fluid program in pserver mode on the Dask cluster of ``client``.

    Parameters
    ----------
    client : distributed.Client
        A synchronous client.
    main_program, startup_program : Program, optional
        The single-process programs after ``optimizer.minimize`` (default: the default
        programs). Ignored when ``transpiler`` is given.
    data : dict or list of dict
        Data-layer name -> dask array, dask DataFrame column or numpy array (rows aligned):
        chunk ``i`` of every input is paired on one worker, and the trainers run where their
        rows are (see ``trainers``). A **list** of such dicts (numpy) gives
        trainer ``r`` exactly ``data[r]``: ``[{k: v[r::W] for k, v in d.items()} for r in
        range(W)]`` makes trainer ``r`` take rows ``r::W``.
    transpiler : DistributeTranspiler, optional
        Already transpiled (pserver mode): its endpoints, config, trainer count and sync mode
        are used; the trainer programs of every trainer id are re-derived from its plan.
    config : DistributeTranspilerConfig, optional
        Used when this function transpiles.
    pservers : int, str or list of str
        A count, worker addresses, or Fluid endpoints (see :mod:`.placement`).
    trainers : int or list of str, optional
        Default: one per worker, at most one per non-empty row chunk. An int takes the first
        workers in address order; more trainers than workers run several trainer loops per
        worker (at most ``ceil(trainers / workers)`` each, each on its own rows, as threads of
        the worker: 50 trainers need 50 row chunks, not 50 workers). A list names the workers.
        Trainer ``r`` trains on the
        ``r``-th contiguous run of row chunks (balanced by rows): a function of the data alone,
        so identical runs are bit-identical; it runs on the allowed worker that holds most of
        those rows, and chunks held elsewhere are copied there first.
    sync_mode : bool
        Synchronous training (gradients averaged over the trainers each step) or asynchronous.
    epochs, batch_size : int
        ``batch_size`` is per trainer (Fluid semantics: the global batch is ``trainers x
        batch_size``).
    fetch_list : list of Variable or str
        Fetched every step on every trainer, published as events, averaged in
        ``TrainResult.epochs``.
    shuffle, seed : bool, int
        Each trainer visits its rows in ``default_rng(seed + 1000 * rank + epoch)`` order.
    callbacks : iterable of callable
        Called on the client with every event while training runs.
    checkpoint_dir, checkpoint_every : optional
        Sync mode: every ``checkpoint_every`` steps (an int) or at every epoch end
        (``"epoch"``), every pserver writes its state under ``checkpoint_dir``.
    resume_from : str, optional
        A checkpoint round directory or a checkpoint_dir (the latest complete round): the
        pservers load it and the trainers start at the next step.
    flags : RPCFlags, optional
        Default: ``RPCFlags.current()`` (``FLAGS_rpc_*`` environment variables and
        ``dask_fluid.rpc.*`` config keys, read here on the client).
    steps_per_epoch : int, optional
        At most this many steps per trainer and epoch.
    elastic : bool
        Carry on when a worker is lost instead of failing (:mod:`.elastic`): a lost trainer's
        rows go to the trainers that are left and training restarts from the pservers' state
        (sync: the interrupted step is replayed with the global batch re-split over the
        remaining trainers); a lost pserver's shards are restored, with every other
        pserver's, from the latest intact round in ``checkpoint_dir`` onto other workers.
        Every recovery is an event ``{"type": "recovery", ...}`` and a line of the summary.
    min_trainers : int
        With ``elastic``: fail, as without it, when fewer trainers than this would be left.
    initial_values : mapping of str to array, optional
        Start from these values of the original program's persistable variables (full
        arrays, by the original names, such as a previous result's ``params``) instead of the
        startup program's: each pserver takes its blocks of them, optimizer state included,
        and each trainer the variables no pserver holds (batch norm's statistics). Variables
        not given keep their startup values. Not with ``resume_from``.

    Returns
    -------
    TrainResult
        ``params`` holds every persistable variable of the original program, full and
        unsliced: the parameters, the optimizer's state (assembled from the pservers'
        blocks), the learning rate, and trainer 0's own variables (batch norm's statistics).

    Raises
    ------
    ValueError, TypeError
        Bad arguments (checked before anything runs on the cluster).
    DistributedTrainingError
        Training failed; the error names the role, the endpoint and the step.
    """
    _check_args(data, epochs, batch_size, checkpoint_dir, checkpoint_every, steps_per_epoch)
    check_data_keys(data, feed_names(transpiler.plan.origin if transpiler is not None else
                                       main_program or default_main_program()))
    _check_elastic(elastic, min_trainers, transpiler)
    flags = flags or RPCFlags.current()
    ensure_plugin(client)
    if transpiler is None:
        main_program = main_program or default_main_program()
        startup_program = startup_program or default_startup_program()
    if initial_values is not None:
        if resume_from is not None:
            raise ValueError("initial_values and resume_from both give the starting values: "
                             "pass one of them")
        initial_values = checked_values(initial_values, transpiler.plan.origin
                                        if transpiler is not None else main_program)
    req = _Request(main_program, startup_program, data, transpiler, config, pservers, trainers,
                   sync_mode, epochs, batch_size, list(fetch_list), shuffle, seed,
                   list(callbacks), checkpoint_dir, checkpoint_every, resume_from, flags,
                   steps_per_epoch, elastic, initial_values)
    jobs: list[_Job] = []

    def attempt(restart: _Restart | None) -> TrainResult:
        jobs.append(_Job(req, restart))
        return jobs[-1].run(client)

    return recovery.run_with_restarts(attempt, lambda err, _, recoveries: _recover(
        client, req, jobs[-1], err, min_trainers, recoveries))


def _check_elastic(elastic: bool, min_trainers: int, transpiler: Any) -> None:
    if isinstance(min_trainers, bool) or not isinstance(min_trainers, int) or min_trainers < 1:
        raise ValueError(f"min_trainers = {min_trainers!r} is not allowed: an int >= 1")
    if elastic and transpiler is not None:
        raise ValueError("elastic=True re-transpiles the program for the trainers that are "
                         "left after a loss: pass main_program/startup_program (and config) "
                         "instead of an already transpiled transpiler")


@dataclass
class _Request:
    """What the caller of :func:`train_pserver` asked for (every attempt starts from it)."""

    main_program: Program | None
    startup_program: Program | None
    data: Any
    transpiler: DistributeTranspiler | None
    config: DistributeTranspilerConfig | None
    pservers: Any
    trainers: Any
    sync_mode: bool
    epochs: int
    batch_size: int
    fetch_list: list
    shuffle: bool
    seed: int
    callbacks: list
    checkpoint_dir: str | None
    checkpoint_every: Any
    resume_from: str | None
    flags: RPCFlags
    steps_per_epoch: int | None
    elastic: bool
    initial_values: dict[str, np.ndarray] | None


@dataclass
class _Restart:
    """How an elastic restart differs from the request: fewer workers, a start round and the
    pservers' state, and the per-trainer batch that keeps the global batch."""

    lost: set[str]
    start_round: int
    #: the data and trainers arguments for the workers that are left
    data: Any
    trainers: Any
    states: dict[int, dict[str, np.ndarray]] | None = None
    resume_path: str | None = None
    global_batch: int | None = None


class _Job:
    """One attempt at the request: place, transpile, run, assemble."""

    def __init__(self, req: _Request, restart: _Restart | None) -> None:
        self.req, self.restart = req, restart
        self.trainer_workers: list[str] = []
        self.pserver_workers: list[str] = []
        self.global_batch: int | None = None
        self.sync = req.sync_mode
        self.n_pservers = 0
        self.job = ""
        self.last_step = LastStep()

    def run(self, client: Any) -> TrainResult:
        req, restart = self.req, self.restart
        flags = req.flags
        lost = restart.lost if restart is not None else set()
        workers = sorted(live_workers(client) - lost)
        data_path = transport.choose(transport.PSERVER_KEY, workers,
                                     ("tcp://", "tls://", "inproc://"))
        tuning = WorkerTuning.from_config()
        early_push = early_push_setting()
        data, trainers = (req.data, req.trainers) if restart is None else (restart.data,
                                                                             restart.trainers)
        trainer_workers, parts, rows = _place_data(client, data, trainers, workers,
                                                   flags.deadline_s)
        self.trainer_workers = trainer_workers
        n = len(trainer_workers)
        batch_size = req.batch_size
        if restart is not None and restart.global_batch is not None:
            batch_size = max(1, math.ceil(restart.global_batch / n))  # the same global batch
        self.global_batch = batch_size * n
        schedule = [math.ceil(r / batch_size) for r in rows]
        if req.steps_per_epoch is not None:
            schedule = [min(s, req.steps_per_epoch) for s in schedule]

        if req.transpiler is not None:
            plan = req.transpiler.plan
            if plan.trainer_num != n:
                raise ValueError(f"the transpiler was run for {plan.trainer_num} trainers but "
                                 f"the data gives {n} ({trainer_workers}); transpile with "
                                 f"trainers={n} or choose the trainers")
            placement = place_pservers(plan.endpoints, workers)
            config, sync = req.transpiler.config, plan.sync_mode
            origin, origin_startup = plan.origin, plan.origin_startup
        else:
            pservers = _pservers_without_lost(req.pservers, lost)
            placement = place_pservers(pservers, workers, preferred=trainer_workers)
            config, sync = req.config or DistributeTranspilerConfig(), req.sync_mode
            origin, origin_startup = req.main_program, req.startup_program
        trainer_programs, first = _transpile_all(origin, origin_startup, config,
                                                 placement.endpoints, n, sync)
        sync = self.sync = first.sync_mode
        self.n_pservers = len(placement.endpoints)
        self.pserver_workers = [w for _, w in placement.items()]
        if req.checkpoint_every is not None and not sync:
            raise ValueError("checkpoints are taken at synchronous steps: use sync_mode=True, "
                             "or leave checkpoint_every unset in async mode")
        start_round, resume_path, states = 0, None, None
        if restart is not None:
            start_round, resume_path, states = (restart.start_round, restart.resume_path,
                                                restart.states)
        elif req.resume_from is not None:
            info = ckpt.find_checkpoint(req.resume_from)
            if info.n_pservers != len(placement.endpoints) or list(
                    info.meta.get("steps_per_epoch", [])) != schedule:
                raise ValueError(f"checkpoint {str(info.path)!r} was written by "
                                 f"{info.n_pservers} pservers with steps per epoch "
                                 f"{info.meta.get('steps_per_epoch')}; this job has "
                                 f"{len(placement.endpoints)} pservers and {schedule}: resume "
                                 "with the same data, batch size and pservers")
            start_round, resume_path = info.round + 1, str(info.path)

        job, secret = new_job_id(), secrets.token_bytes(32)
        self.job = job
        fetch_names = _names(req.fetch_list)
        # given starting values, for a first attempt (a restart goes on from the job's state)
        start = req.initial_values if restart is None else None
        tasks, pieces = _pserver_tasks(job, secret, first, placement, trainer_workers,
                                       Schedule(tuple(schedule), req.epochs, start_round),
                                       flags, req.checkpoint_dir, req.checkpoint_every,
                                       resume_path, data_path, tuning, req.elastic, states,
                                       start)
        held = {piece.origin for on_ep in pieces.values() for piece in on_ep.values()}
        # the trainers keep (and trainer 0 returns) what no pserver holds: batch norm's
        # statistics, GEO-SGD's optimizer state
        keep = [n for n in persistable_names(origin) if n not in held]
        trainer_start = {n: v for n, v in (start or {}).items() if n not in held}
        names = feed_names(origin)
        workers_of = dict(placement.items())
        for rank, (w, (prog, startup)) in enumerate(zip(trainer_workers, trainer_programs,
                                                        strict=True)):
            spec = TrainerSpec(job, secret, rank, prog.to_json(), startup.to_json(), workers_of,
                               names, fetch_names, schedule, req.epochs, batch_size,
                               req.shuffle, req.seed, sync, flags, start_round,
                               keep if rank == 0 else [], tuning,
                               early_push_bytes=early_push, initial_values=trainer_start)
            tasks.append(TaskSpec(w, run_trainer, (spec, parts[rank]), role="trainer",
                                  endpoint=w, reports_done=True))

        try:
            info = {"kind": "pserver", "mode": "sync" if sync else "async",
                    "epochs": req.epochs, "batch_size": batch_size,
                    "rounds": req.epochs * max(schedule), "summary": summarize(first)}
            results = run_tasks(client, job, tasks, callbacks=req.callbacks,
                                deadline_s=flags.deadline_s, last_step=self.last_step,
                                info=info)
        except concurrent.futures.CancelledError as err:
            # A dead worker took the only copy of a task's data with it: Dask cancels the task
            # instead of failing it. Name the lost worker (the launcher detached the job's
            # services, which wakes every remaining waiter).
            raise _lost_worker_error(client, tasks, self.last_step.step) from err
        n_ps = len(placement.endpoints)
        ps_results, tr_results = results[:n_ps], results[n_ps:]
        params = {**tr_results[0]["vars"],
                  **assemble(pieces, {r["endpoint"]: r["state"] for r in ps_results})}
        return _result(params, ps_results, tr_results, first, placement, trainer_workers,
                       fetch_names)


def _pservers_without_lost(pservers: Any, lost: set[str]) -> Any:
    """``pservers`` naming lost workers takes the same number of other workers instead."""
    if isinstance(pservers, (list, tuple)) and any(p in lost for p in pservers):
        return len(pservers)
    if isinstance(pservers, str) and pservers in lost:
        return 1
    return pservers


def _recover(client: Any, req: _Request, job: _Job, err: DistributedTrainingError,
             min_trainers: int, recoveries: list[dict]) -> _Restart | None:
    """The restart after a lost worker, or None when the error is not one to recover from
    (not elastic, no worker lost, too few trainers left, nothing to restart from)."""
    if not req.elastic or not job.job:
        return None
    alive = live_workers(client)
    lost = {w for w in set(job.trainer_workers) | set(job.pserver_workers) if w not in alive}
    if not lost:
        return None  # a failure of the program or the data, not of a worker
    before = job.restart.lost if job.restart is not None else set()
    lost |= before
    candidates = sorted(alive - lost)
    data, trainers = (req.data, req.trainers) if job.restart is None else (job.restart.data,
                                                                           job.restart.trainers)
    data, trainers, n_left = recovery.without_lost(data, trainers, job.trainer_workers, lost,
                                                   candidates)
    if len(recoveries) >= recovery.MAX_RECOVERIES or n_left < min_trainers:
        logger.warning("elastic: not restarting job %s: %d trainer(s) left, min_trainers=%d",
                       job.job, n_left, min_trainers)
        return None
    lost_pserver = [w for w in job.pserver_workers if w in lost]
    # collected in every case: what the surviving pservers left must not stay on the workers
    states = recovery.collect(client, job.job, sorted(set(job.pserver_workers) & alive),
                              DETACH_TIMEOUT_S)
    point = None if lost_pserver else recovery.restart_point(states, job.n_pservers, [
        r for r, w in enumerate(job.trainer_workers) if w not in lost])
    global_batch = job.global_batch if job.sync else None
    if point is not None:
        done, arrays = point
        restart = _Restart(lost, done + 1, data, trainers, states=arrays,
                           global_batch=global_batch)
        source = "the pservers' state"
    elif req.checkpoint_dir is not None and job.sync:
        try:
            info = ckpt.find_checkpoint(req.checkpoint_dir)
        except (FileNotFoundError, ValueError) as exc:
            logger.warning("elastic: no checkpoint to restart job %s from: %s", job.job, exc)
            return None
        if info.n_pservers != job.n_pservers:
            return None
        restart = _Restart(lost, info.round + 1, data, trainers, resume_path=str(info.path),
                           global_batch=global_batch)
        source = f"checkpoint {info.path.name}"
    else:
        logger.warning("elastic: job %s lost pserver worker(s) %s and has no checkpoint_dir "
                       "to restore their shards from", job.job, lost_pserver)
        return None
    roles = ", ".join(f"{'pserver' if w in lost_pserver else 'trainer'} worker {w}"
                      for w in sorted(lost - before))
    recovery.announce(lost - before, roles, err, restart.start_round, source, recoveries,
                      req.callbacks)
    return restart


def _pserver_tasks(job: str, secret: bytes, tr: DistributeTranspiler, placement: Placement,
                   trainer_workers: list[str], schedule: Schedule, flags: RPCFlags,
                   checkpoint_dir: str | None, checkpoint_every: Any, resume_path: str | None,
                   data_path: str, tuning: WorkerTuning, elastic_mode: bool = False,
                   states: dict[int, dict[str, np.ndarray]] | None = None,
                   initial_values: dict[str, np.ndarray] | None = None
                   ) -> tuple[list[TaskSpec], dict[str, dict[str, Piece]]]:
    """One task per pserver, and what each pserver holds of the original variables (each
    starts from its cut of ``initial_values`` when given)."""
    inline_bytes = dask.config.get(INLINE_BYTES_KEY, None)
    tasks, pieces = [], {}
    for k, (ep, w) in enumerate(placement.items()):
        main, startup = tr.get_pserver_programs(ep)
        pieces[ep] = pserver_pieces(tr, ep)
        spec = ShardSpec(job, secret, ep, main.to_json(), startup.to_json(),
                         list(trainer_workers), schedule, len(placement.endpoints), flags,
                         None if checkpoint_dir is None else str(checkpoint_dir),
                         checkpoint_every, resume_path, inline_bytes, data_path, tuning,
                         elastic_mode, None if states is None else states[k],
                         None if initial_values is None else cut(pieces[ep], initial_values))
        tasks.append(TaskSpec(w, run_pserver, (spec,), role="pserver", endpoint=ep))
    return tasks, pieces


def _describe(ps_result: dict) -> str:
    info = ps_result["info"]
    return (f"pserver {info['endpoint']} on worker {ps_result['worker']} ({info['transport']} "
            f"data path): {info['rounds']} "
            f"steps, {info['pushes']} pushes{_early(info)}, {info['prefetches']} prefetches; "
            "threads "
            f"send/get/prefetch {info['send_threads']}/{info['get_threads']}/"
            f"{info['prefetch_threads']} (used {info['threads_used']['send']}/"
            f"{info['threads_used']['get']}/{info['threads_used']['prefetch']}"
            f"{', numpy work inline' if info['inline'] else ''}); optimize "
            f"{info['optimize_s']:.2f} s, replies {info['read_s']:.2f} s; "
            f"{info['bytes_in'] / 1e6:.1f} MB in, {info['bytes_out'] / 1e6:.1f} MB out"
            f"{_read_by(info.get('read_by', {}))}")


def _early(info: dict) -> str:
    n = info.get("early_pushes", 0)
    return f" (and {n} early pushes ahead of them)" if n else ""


def _read_by(counts: dict[str, int]) -> str:
    if not counts.get("trainer"):
        return ""
    return (f"; requests read by the worker's waiting trainer {counts['trainer']}, by "
            f"connection threads {counts['threads']}")


def _result(params: dict, ps_results: list[dict], tr_results: list[dict],
            tr: DistributeTranspiler,
            placement: Placement, trainer_workers: list[str],
            fetch_names: list[str]) -> TrainResult:
    history = sorted((e for r in tr_results for e in r["history"]),
                     key=lambda e: (e["step"], e["rank"]))
    per_epoch: dict[int, dict[str, list[float]]] = {}
    for e in history:
        slot = per_epoch.setdefault(e["epoch"], {})
        for name, value in e["fetches"].items():
            slot.setdefault(name, []).append(value)
    epochs = [{"epoch": ep, **{k: float(np.mean(v)) for k, v in vals.items()}}
              for ep, vals in sorted(per_epoch.items())]
    samples = sum(r["samples"] for r in tr_results)
    elapsed = max(r["elapsed"] for r in tr_results)
    summary = "\n".join([summarize(tr)] + [_describe(r) for r in ps_results]
                        + [f"trainer {r} on worker {w}: {t['steps']} steps in {t['elapsed']:.2f} "
                           f"s, {t['rpc_s']:.2f} s in pserver exchanges, "
                           f"{t['requests'] / max(t['steps'], 1):.1f} requests per step"
                           for r, (w, t) in enumerate(zip(trainer_workers, tr_results,
                                                          strict=True))])
    stats = {"trainers": [{"rank": r, "worker": w,
                           **{k: t[k] for k in ("steps", "samples", "elapsed", "rpc_s",
                                                "requests", "bytes_sent", "bytes_received")}}
                          for r, (w, t) in enumerate(zip(trainer_workers, tr_results,
                                                         strict=True))],
             "pservers": [dict(r["info"], worker=r["worker"]) for r in ps_results]}
    return TrainResult(params=params, history=history, epochs=epochs,
                       steps=max(r["steps"] for r in tr_results), samples=samples,
                       elapsed_s=elapsed, samples_per_s=samples / elapsed if elapsed else 0.0,
                       summary=summary, stats=stats)

