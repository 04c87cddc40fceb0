"""Collective (NCCL2-style) data-parallel training on Dask: one call, two backends.

:func:`train_collective` runs a program -- plain, or transpiled with ``config.mode = "nccl2"`` -- on
one trainer task per data-holding worker (the xgboost.dask recipe: the data never moves). Every
step, on every rank:

1. forward and backward with the :class:`~dask_fluid.executor.Executor` on the main program up to
   its first Optimize-role op;
2. one all-reduce of every gradient (mean over ranks, Fluid's 1/nranks scaling), fused into one
   flat buffer per dtype;
3. the optimize ops (and anything after them: LR schedule, Adamax's beta power), locally.

The split and the communication of a step live in :mod:`.data_parallel`, which a
``CompiledProgram`` with ``num_trainers > 1`` (Fluid's launch style) runs too.

All ranks start from the same parameters (each runs the deterministic startup program, then rank 0
broadcasts them anyway, as NCCL programs do) and apply the same reduced gradients, so they hold
bit-identical parameters throughout, and with equal batch sizes the result is local training
with the global batch (DESIGN.md decision 3).

Backends (DESIGN.md decision 8): ``ring``
(:class:`~dask_fluid.distributed.collective.ring.RingCommunicator`, CPU, worker-to-worker comms)
and ``nccl`` (:class:`~dask_fluid.distributed.collective.nccl.NcclCommunicator`,
unique id through the scheduler). ``auto`` picks nccl when every trainer has a GPU and CuPy with
NCCL, ring otherwise.

Steps per epoch. Collectives need every rank at every step, so all ranks take the same number of
steps: the minimum over ranks of ``ceil(rows / batch_size)`` (or ``steps_per_epoch`` when given;
a rank with fewer batches then cycles through its batches again). A rank with more rows
visits a different random subset each epoch. Workers that hold no rows never become ranks (a
rank without data would deadlock the collectives, cuml#8398).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import math
import os
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dask_fluid.distributed.checkpoint_files import check_checkpoint_args, checkpoint_due
from dask_fluid.distributed.collective import checkpoint as ckpt
from dask_fluid.distributed.collective.data_parallel import (
    broadcast_persistables,
    reduce_gradients,
    split_program,
)
from dask_fluid.distributed.collective.nccl import (
    NcclUnavailableError,
    check_nccl,
    create_session,
    destroy_session,
    probe_gpus,
)
from dask_fluid.distributed.comm import transport
from dask_fluid.distributed.comm.rpc import abort_job_sync
from dask_fluid.distributed.errors import DistributedTrainingError, WorkerLostError
from dask_fluid.distributed.launch import elastic as recovery
from dask_fluid.distributed.launch.data import (
    DataPartition,
    assign_trainers,
    batch_indices,
    local_arrays,
    partition_by_worker,
)
from dask_fluid.distributed.launch.events import (
    PUBLISH_INTERVAL_S,
    Callback,
    StepMeter,
    TrainResult,
    publish,
    step_event,
)
from dask_fluid.distributed.launch.feeds import (
    check_data_keys,
    check_finite,
    feed_names,
    prepare_feeds,
)
from dask_fluid.distributed.launch.tasks import (
    DETACH_TIMEOUT_S,
    TaskSpec,
    live_workers,
    new_job_id,
    run_tasks,
)
from dask_fluid.distributed.launch.worker_tuning import WorkerTuning, tuned_for_training
from dask_fluid.distributed.program_values import checked_values, persistable_names
from dask_fluid.flags import RPCFlags
from dask_fluid.framework import (
    OP_ROLE_KEY,
    OpRole,
    Program,
    Variable,
    default_main_program,
    default_startup_program,
)
from dask_fluid.ops.registry import to_host

__all__ = ["BACKENDS", "rank_seed", "split_program", "train_collective"]

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "ring", "nccl")
_DEVICES = ("cpu", "gpu", "cuda")
# The batch order of rank r uses seed + _RANK_STRIDE * r: distinct from every (seed, epoch) pair
# of the other ranks for fewer than _RANK_STRIDE epochs.
_RANK_STRIDE = 10007
#: how long an elastic recovery waits for the surviving ranks to leave their state
_COLLECT_S = 10.0


def rank_seed(seed: int, rank: int) -> int:
    """Seed of rank ``rank``'s batch order: ``batch_indices(rows, bs, epoch, rank_seed(...))``."""
    return seed + _RANK_STRIDE * rank


# --------------------------------------------------------------------------------------------
# Program handling (shared by client and workers)
# --------------------------------------------------------------------------------------------


def _strip_nccl_id(startup: Program) -> Program:
    """The startup program without ``gen_nccl_id`` and its RAW vars: the runtime owns the id."""
    startup = startup.clone()
    block = startup.global_block()
    for op in [op for op in block.ops if op.type == "gen_nccl_id"]:
        for name in op.output_arg_names:
            block.vars.pop(name, None)
    block.ops = [op for op in block.ops if op.type != "gen_nccl_id"]
    return startup


def _loss_name(main: Program) -> str | None:
    for op in main.global_block().ops:
        if op.attrs.get(OP_ROLE_KEY, 0) & OpRole.Loss and not op.attrs[OP_ROLE_KEY] & \
                OpRole.Backward:
            return op.output_arg_names[0]
    return None


# --------------------------------------------------------------------------------------------
# Client side
# --------------------------------------------------------------------------------------------


def _resolve_programs(main: Program | None, startup: Program | None, transpiler: Any
                      ) -> tuple[Program, Program, list[str]]:
    if transpiler is not None:
        mode = getattr(transpiler, "_mode", None)
        if mode == "collective":
            raise ValueError(_COLLECTIVE_OPS_HERE)
        if mode != "nccl2":
            raise ValueError(f"the transpiler ran in mode {mode!r}; train_collective runs "
                             "config.mode='nccl2' programs (use train_pserver for pserver mode)")
        main = main if main is not None else transpiler._program
        startup = startup if startup is not None else transpiler._startup
    main = main if main is not None else default_main_program()
    startup = startup if startup is not None else default_startup_program()
    for arg, prog in (("main_program", main), ("startup_program", startup)):
        if not isinstance(prog, Program):
            raise TypeError(f"{arg} must be a Program, got {type(prog).__name__}")
    if any(op.type.startswith("c_") for prog in (main, startup)
           for op in prog.global_block().ops):
        raise ValueError(_COLLECTIVE_OPS_HERE)
    if any(op.type == "dgc" for op in main.global_block().ops):
        raise ValueError(_DGC_HERE)
    endpoints = list(getattr(transpiler, "_endpoints", None) or main._trainers_endpoints or [])
    return main, _strip_nccl_id(startup), endpoints


#: train_collective places and reduces itself; collective-mode programs run themselves
_COLLECTIVE_OPS_HERE = (
    "the programs have Fluid's c_* collective ops (config.mode = 'collective', or the "
    "collective fleet's strategy.mode = 'collective'): they connect and all-reduce by "
    "themselves, so run the script on every trainer (dask-fluid launch --mode nccl2, or as "
    "processes with PADDLE_* variables); train_collective takes nccl2-mode or plain programs")


#: DGC's exchange is the nccl2 trainers' CompiledProgram's
_DGC_HERE = (
    "the program was built with DGCMomentumOptimizer, whose compressed exchange runs in the "
    "nccl2 trainers' CompiledProgram (build_strategy.num_trainers > 1): run the script on "
    "every trainer (dask-fluid launch --mode nccl2, or as processes with PADDLE_* "
    "variables); train_collective all-reduces dense gradients only")


def _map_endpoints(endpoints: Sequence[str], workers: Sequence[str]) -> list[str]:
    """Trainer endpoints -> workers: an endpoint equal to a worker address is that worker, the
    others take the remaining workers in sorted order."""
    if len(endpoints) > len(workers):
        raise ValueError(f"the program was transpiled for {len(endpoints)} trainers but the "
                         f"cluster has {len(workers)} workers")
    free = [w for w in sorted(workers) if w not in endpoints]
    return [ep if ep in workers else free.pop(0) for ep in endpoints]


def _candidates(client: Any, trainers: Any, endpoints: Sequence[str]
                ) -> tuple[list[str] | None, dict[str, str]]:
    """The trainer workers in rank order (None: the data decides) and endpoint labels."""
    # a scheduler round trip: scheduler_info() can hand back its cached, worker-less identity
    workers = sorted(live_workers(client))
    if not workers:
        raise ValueError("the cluster has no workers")
    if trainers is None and endpoints:
        mapped = _map_endpoints(endpoints, workers)
        return mapped, dict(zip(mapped, endpoints, strict=True))
    if trainers is None:
        return None, {}
    if isinstance(trainers, (int, np.integer)) and not isinstance(trainers, bool):
        if not 1 <= trainers <= len(workers):
            raise ValueError(f"trainers={trainers}: the cluster has {len(workers)} workers")
        return workers[:int(trainers)], {}
    if isinstance(trainers, str):
        trainers = [t.strip() for t in trainers.split(",") if t.strip()]
    trainers = list(trainers)
    unknown = [t for t in trainers if t not in workers]
    if unknown:
        raise ValueError(f"trainers {unknown} are not workers of this cluster; workers: "
                         f"{workers}")
    if len(set(trainers)) != len(trainers):
        raise ValueError(f"trainers repeat a worker: {trainers}")
    return trainers, {}


def _as_arrays(data: Any, names: Sequence[str]) -> dict[str, Any]:
    if isinstance(data, Mapping):
        check_data_keys(data, names)
        missing = [n for n in names if n not in data]
        if missing:
            raise ValueError(f"data has no input for the program's data layers {missing}; "
                             f"pass data={{{', '.join(repr(n) + ': ...' for n in names)}}}")
        return {n: data[n] for n in names}
    if isinstance(data, (tuple, list)):
        if len(data) != len(names):
            raise ValueError(f"data has {len(data)} inputs but the program has data layers "
                             f"{names}")
        return dict(zip(names, data, strict=True))
    raise TypeError("data must be a mapping {data layer name: array}, a tuple in data-layer "
                    f"order {names}, or a DataPartition; got {type(data).__name__}")


def _choose_backend(client: Any, backend: str, workers: list[str], infos: dict | None) -> str:
    if backend == "ring":
        return "ring"
    if backend == "nccl":
        check_nccl(client, workers, infos)
        return "nccl"
    if infos is None or any(w not in infos or infos[w].problem for w in workers):
        return "ring"
    try:
        check_nccl(client, workers, infos)
    except NcclUnavailableError as exc:
        logger.info("backend='auto' falls back to ring: %s", exc)
        return "ring"
    return "nccl"


def steps_per_epoch_for(rows: Sequence[int], batch_size: int, steps: int | None = None) -> int:
    """Steps every rank takes per epoch: ``steps`` or min over ranks of ``ceil(rows/bs)``."""
    if steps is not None:
        if steps <= 0:
            raise ValueError(f"steps_per_epoch={steps} must be > 0")
        return int(steps)
    return min(math.ceil(n / batch_size) for n in rows)


def train_collective(client: Any, main_program: Program | None = None,
                     startup_program: Program | None = None, data: Any = None, *,
                     transpiler: Any = None, trainers: Any = None, backend: str = "auto",
                     epochs: int = 1, batch_size: int = 128,
                     fetch_list: Iterable[Variable | str] = (), shuffle: bool = True,
                     seed: int = 0, callbacks: Iterable[Callback] = (),
                     flags: RPCFlags | None = None, device: str = "cpu",
                     steps_per_epoch: int | None = None, elastic: bool = False,
                     min_trainers: int = 1, checkpoint_dir: str | os.PathLike | None = None,
                     checkpoint_every: int | str | None = None,
                     resume_from: str | os.PathLike | None = None,
                     initial_values: Mapping[str, Any] | None = None) -> TrainResult:
    """Train ``main_program`` data-parallel on the workers that hold ``data``.

    Parameters
    ----------
    client : distributed.Client
        A synchronous client.
    main_program, startup_program : Program, optional
        The program (plain, or transpiled in nccl2 mode) and its startup program; default to the
        transpiler's programs, else the default programs.
    data : mapping, tuple or DataPartition
        ``{data layer name: array}`` (dask arrays/DataFrames, numpy or pandas; all with the same
        rows), a tuple in data-layer order, or the result of ``partition_by_worker``.
    transpiler : DistributeTranspiler, optional
        Transpiled with ``config.mode = "nccl2"``: its trainer endpoints map onto workers (an
        endpoint equal to a worker address is that worker, the others in order).
    trainers : None, int, str or sequence of str
        None: the data-holding workers (or the transpiled endpoints); an int: the first n workers
        (sorted); addresses: those workers, in rank order. Workers left without rows are dropped.
        With a DataPartition it only selects among the workers that hold the data.
    backend : {"auto", "ring", "nccl"}
        ``auto``: nccl when every trainer has a GPU and CuPy with NCCL (and the scheduler has
        CuPy with NCCL), else ring. ``nccl`` raises :class:`NcclUnavailableError` naming what is
        missing before anything is launched.
    epochs, batch_size : int
        ``batch_size`` rows per rank per step (the global batch is ``batch_size * nranks``).
    fetch_list : iterable of Variable or str
        Fetched every step into the events and the history; default: the loss.
    shuffle, seed : bool, int
        Rank r visits its rows in the order of ``batch_indices(rows, batch_size, epoch,
        rank_seed(seed, r), shuffle)``.
    callbacks : iterable of callable
        Called on the client with every event (``step``, ``epoch_end``, ``done``).
    flags : RPCFlags, optional
        Deadline of every collective; default ``RPCFlags.current()``.
    device : {"cpu", "gpu"}
        Where the executor runs (``gpu``: ``CUDAPlace(0)`` of each worker).
    steps_per_epoch : int, optional
        Override the number of steps per epoch (ranks cycle through their batches).
    elastic : bool
        Carry on when a trainer's worker is lost instead of failing: the job starts again, in
        the same call, on the workers that are left, from the variables of the surviving rank
        that got furthest (every rank holds the whole model) and the step after it; the lost
        worker's rows are placed again over the others, and each rank's batch becomes the
        global batch divided by the ranks left. Every recovery is a ``recovery`` event and an
        entry of ``TrainResult.recoveries``.
    min_trainers : int
        With ``elastic``: fail, as without it, when fewer ranks than this would be left.
    checkpoint_dir, checkpoint_every : optional
        Every ``checkpoint_every`` steps (an int) or at every epoch end (``"epoch"``), rank 0
        writes every persistable variable under ``checkpoint_dir/step-NNNNNNNN/`` in Fluid's
        files (``fluid.io.load_persistables`` reads them) with a ``checkpoint.json`` of sizes
        and checksums (:mod:`.checkpoint`).
    resume_from : path, optional
        A ``step-NNNNNNNN`` directory, or a checkpoint_dir (its latest intact step): the job
        starts from its variables at the step after it. The data, batch size and number of
        ranks must give the same steps per epoch as the job that wrote it.
    initial_values : mapping of str to array, optional
        Values of some of the program's persistable variables to start from instead of the
        startup program's (a previous job's ``TrainResult.params``: parameters and optimizer
        state), on every rank; step 0 as in a new job. Not with ``resume_from``.

    Returns
    -------
    TrainResult
        ``params`` from rank 0; ``history`` with every rank's step records; ``ranks`` (an extra
        attribute): per rank its worker, rows, steps, elapsed time and a SHA-256 digest of its
        final parameters (identical on every rank).

    Raises
    ------
    DistributedTrainingError
        A rank failed, timed out or its worker died (with ``elastic``: and no restart was
        possible); every other rank was aborted.
    ValueError
        A bad argument; ``elastic`` with a ``transpiler`` (its endpoints fix the trainers) or
        with a DataPartition (a lost worker's part cannot be placed again); a ``resume_from``
        checkpoint that lacks a variable of the program or was taken with other steps per
        epoch.
    FileNotFoundError
        No intact checkpoint at ``resume_from``.
    NcclUnavailableError
        ``backend="nccl"`` where it cannot run.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; use one of {BACKENDS}")
    if device not in _DEVICES:
        raise ValueError(f"device={device!r}; use one of {_DEVICES}")
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs={epochs} and batch_size={batch_size} must be >= 1")
    if data is None:
        raise ValueError("data is required: {data layer name: array} or a DataPartition")
    if isinstance(min_trainers, bool) or not isinstance(min_trainers, int) or min_trainers < 1:
        raise ValueError(f"min_trainers = {min_trainers!r}: give an int of at least 1")
    if elastic and transpiler is not None:
        raise ValueError("elastic=True restarts on the workers that are left, but a "
                         "transpiler's endpoints fix the trainers: pass the programs (and "
                         "trainers=...) instead")
    if elastic and isinstance(data, DataPartition):
        raise ValueError("elastic=True places the data again on the workers that are left, "
                         "which a DataPartition (parts already on the workers) cannot: pass "
                         "the arrays")
    check_checkpoint_args(checkpoint_dir, checkpoint_every)
    if checkpoint_dir is not None and checkpoint_every is None:
        raise ValueError("checkpoint_dir needs checkpoint_every: an int (every that many steps) "
                         "or 'epoch'")
    flags = flags if flags is not None else RPCFlags.current()
    main, startup, endpoints = _resolve_programs(main_program, startup_program, transpiler)
    split_program(main)  # fail here, not on every worker
    resume = None if resume_from is None else _resume_point(resume_from, main)
    if initial_values is not None:
        if resume is not None:
            raise ValueError("initial_values and resume_from both give the starting values: "
                             "pass one")
        initial_values = checked_values(initial_values, main)
    names = feed_names(main)
    fetch_names = [f.name if isinstance(f, Variable) else str(f) for f in fetch_list]
    if not fetch_names and (loss := _loss_name(main)) is not None:
        fetch_names = [loss]
    req = _Request(main, startup, endpoints, data, trainers, backend, int(epochs),
                   int(batch_size), names, fetch_names, bool(shuffle), int(seed),
                   list(callbacks), flags, device, steps_per_epoch, bool(elastic),
                   min_trainers, None if checkpoint_dir is None else os.fspath(checkpoint_dir),
                   checkpoint_every, resume, initial_values)
    attempts: list[_Attempt] = []

    def attempt(restart: _Restart | None) -> TrainResult:
        attempts.append(_Attempt())
        return _run(client, req, restart, attempts[-1])

    return recovery.run_with_restarts(attempt, lambda err, restart, recoveries: _recover(
        client, req, attempts[-1], err, restart, recoveries))


@dataclass
class _Request:
    """What :func:`train_collective` was asked, checked."""

    main: Program
    startup: Program
    endpoints: list[str]
    data: Any
    trainers: Any
    backend: str
    epochs: int
    batch_size: int
    names: list[str]
    fetch_names: list[str]
    shuffle: bool
    seed: int
    callbacks: list
    flags: RPCFlags
    device: str
    steps_per_epoch: int | None
    elastic: bool
    min_trainers: int
    checkpoint_dir: str | None
    checkpoint_every: int | str | None
    resume: ckpt.StepCheckpoint | None
    initial_values: dict[str, np.ndarray] | None


def _resume_point(path: str | os.PathLike, main: Program) -> ckpt.StepCheckpoint:
    """The checkpoint ``resume_from`` names, checked against the program's variables."""
    info = ckpt.find_step_checkpoint(path)
    # the parameters: every startup program sets them (each rank checks the rest it holds)
    missing = sorted({p.name for p in main.global_block().all_parameters()} - set(info.names))
    if missing:
        raise ValueError(f"checkpoint {str(info.path)!r} lacks the program's parameter(s) "
                         f"{missing[:8]}: it was written for another program")
    return info


@dataclass
class _Restart:
    """How an elastic restart differs from the request: the workers lost so far, the
    trainers argument without them, the step to start at, the variables to start from and the
    global batch to keep."""

    lost: set[str]
    trainers: Any
    start_step: int
    arrays: dict[str, np.ndarray]
    global_batch: int


@dataclass
class _Attempt:
    """What one attempt got to (what a recovery needs)."""

    job: str = ""
    ranks: list[str] = field(default_factory=list)
    global_batch: int = 0


def _run(client: Any, req: _Request, restart: _Restart | None, attempt: _Attempt
         ) -> TrainResult:
    """One attempt: place the data, choose the ranks, run them, assemble the result."""
    flags, data = req.flags, req.data
    trainers = req.trainers if restart is None else restart.trainers
    lost = set() if restart is None else restart.lost
    if isinstance(data, DataPartition):  # the data already lives somewhere: trainers filter
        candidates, labels = list(data.workers), {}
        if isinstance(trainers, (int, np.integer)) and not isinstance(trainers, bool):
            candidates = candidates[:int(trainers)]
        elif trainers is not None:
            candidates = _candidates(client, trainers, ())[0]
    else:
        candidates, labels = _candidates(client, trainers, req.endpoints)
        if lost:  # (None means every worker: the ones left, here)
            candidates = [w for w in (candidates or sorted(live_workers(client)))
                          if w not in lost]
    infos = None
    backend = req.backend
    if backend != "ring":
        infos = probe_gpus(client, candidates)
        if backend == "nccl":  # before any data moves
            check_nccl(client, candidates or sorted(infos), infos)
    partition = data if isinstance(data, DataPartition) else partition_by_worker(
        client, _as_arrays(data, req.names), workers=candidates)
    holders = [w for w in partition.workers if partition.rows_per_worker.get(w)]
    if not holders:
        raise ValueError("no worker holds any rows of data")
    allowed = candidates or sorted(holders)
    n = min(len(allowed), sum(1 for r in partition.chunk_rows if r > 0))
    dropped = allowed[n:]
    if dropped:
        logger.warning("workers %s get no rows and do not train (the data has %d non-empty "
                       "chunk(s); a rank without data would stall every collective)", dropped, n)
    # rank r trains on the r-th run of chunks, a function of the data alone (not of where Dask
    # put them), so identical fits are bit-identical; when the caller chose the trainers
    # (a count, a list, endpoints), rank r runs on the r-th of them, else where its rows are
    assignment = assign_trainers(client, partition, n, allowed, flags.deadline_s,
                                 in_order=candidates is not None)
    ranks = assignment.workers
    backend = _choose_backend(client, backend, ranks, infos)
    batch_size = req.batch_size
    if restart is not None:  # the same global batch over the ranks that are left
        batch_size = max(1, math.ceil(restart.global_batch / len(ranks)))
    rows = assignment.rows
    steps = steps_per_epoch_for(rows, batch_size, req.steps_per_epoch)
    resume = None if restart is None else (restart.start_step, restart.arrays)
    if restart is None and req.resume is not None:
        written = req.resume.meta.get("steps_per_epoch")
        if written != steps:
            raise ValueError(f"checkpoint {str(req.resume.path)!r} was taken at {written} steps "
                             f"per epoch; this job takes {steps} ({len(ranks)} rank(s) of "
                             f"batch {batch_size} over rows {list(rows)}): resume with the same "
                             "data, batch size and number of ranks")
        resume = (req.resume.step + 1, ckpt.read_step(req.resume))

    job = new_job_id()
    attempt.job, attempt.ranks, attempt.global_batch = job, list(ranks), batch_size * len(ranks)
    cfg = {"job": job, "main": req.main.to_json(), "startup": req.startup.to_json(),
           "backend": backend, "addresses": ranks, "deadline_s": flags.deadline_s,
           "epochs": req.epochs, "batch_size": int(batch_size), "steps": steps,
           "fetch": req.fetch_names, "shuffle": req.shuffle, "seed": req.seed,
           "device": req.device, "session": None, "tuning": WorkerTuning.from_config(),
           "secret": secrets.token_bytes(32),
           "transport": transport.choose(transport.COLLECTIVE_KEY, ranks, ("tcp://", "tls://")),
           "elastic": req.elastic, "resume": resume, "initial": req.initial_values,
           "checkpoint_dir": req.checkpoint_dir, "checkpoint_every": req.checkpoint_every}
    session = create_session(client) if backend == "nccl" else None
    cfg["session"] = session
    tasks = [TaskSpec(w, _trainer_task, args=(cfg, r, assignment.parts[r]), role="trainer",
                      endpoint=labels.get(w), reports_done=True) for r, w in enumerate(ranks)]
    try:
        info = {"kind": "collective", "backend": backend, "epochs": req.epochs,
                "batch_size": int(batch_size), "rounds": req.epochs * steps,
                "summary": f"{len(ranks)} trainer(s), {backend} all-reduce, {steps} steps "
                           f"per epoch"}
        results = run_tasks(client, job, tasks, callbacks=req.callbacks,
                            deadline_s=flags.deadline_s, info=info)
    except concurrent.futures.CancelledError as exc:
        raise _lost_worker_error(client, job, tasks) from exc
    finally:
        if session is not None:
            destroy_session(client, session)
    tls = cfg["transport"] == "tcp" and all(r.startswith("tls://") for r in ranks)
    path = f"{backend} ({'tls' if tls else cfg['transport']} data path)" if backend == "ring" \
        else backend
    return _result(results, req.fetch_names, path, steps, labels)


def _recover(client: Any, req: _Request, attempt: _Attempt, err: DistributedTrainingError,
             previous: _Restart | None, recoveries: list[dict]) -> _Restart | None:
    """The restart after a lost worker, or None when the error is not one to recover from
    (not elastic, no worker lost, too few ranks left, no state left)."""
    if not req.elastic or not attempt.job:
        return None
    alive = live_workers(client)
    lost = {w for w in attempt.ranks if w not in alive}
    if not lost:
        return None  # a failure of the program or the data, not of a worker
    before = previous.lost if previous is not None else set()
    lost |= before
    candidates = sorted(alive - lost)
    trainers = req.trainers if previous is None else previous.trainers
    _, trainers, n_left = recovery.without_lost(req.data, trainers, attempt.ranks, lost,
                                                candidates)
    survivors = [w for w in attempt.ranks if w not in lost]
    # collected in every case (what the surviving ranks left must not stay on the workers),
    # and for a moment: a rank leaves its state once the abort has reached it
    states: dict[int, dict] = {}
    give_up = time.monotonic() + _COLLECT_S
    while True:
        states.update(recovery.collect(client, attempt.job, survivors, DETACH_TIMEOUT_S))
        if len(states) >= len(survivors) or time.monotonic() >= give_up:
            break
        time.sleep(0.1)
    state = recovery.newest_rank_state(states)
    if (len(recoveries) >= recovery.MAX_RECOVERIES or n_left < req.min_trainers
            or state is None):
        logger.warning("elastic: not restarting job %s: %d rank(s) left (min_trainers=%d), "
                       "%s", attempt.job, n_left, req.min_trainers,
                       "no state left by the ranks" if state is None else
                       f"{len(recoveries)} recoveries so far")
        return None
    restart = _Restart(lost, trainers, int(state["done"]) + 1, state["arrays"],
                       attempt.global_batch)
    roles = ", ".join(f"trainer worker {w}" for w in sorted(lost - before))
    recovery.announce(lost - before, roles, err, restart.start_step,
                      f"rank {state['rank']}'s variables", recoveries, req.callbacks)
    return restart


def _lost_worker_error(client: Any, job: str, tasks: Sequence[TaskSpec]) -> Exception:
    """A trainer future was cancelled: its worker died with data that cannot be recomputed
    (scattered numpy parts). Abort the surviving ranks and name the dead worker."""
    alive = live_workers(client)
    survivors = sorted({t.worker for t in tasks} & alive)
    lost = [t for t in tasks if t.worker not in alive]
    where = lost[0].where if lost else ", ".join(t.where for t in tasks)
    reason = (f"worker {where} left the cluster while running a trainer (its data went with "
              "it)")
    abort_job_sync(client, survivors, job, reason)
    return WorkerLostError(reason, "trainer", where)


def _result(results: list[dict], fetch_names: list[str], backend: str, steps: int,
            labels: Mapping[str, str]) -> TrainResult:
    history, per_epoch = [], {}
    for res in results:
        for epoch, step, samples, values in res["records"]:
            event = {"type": "step", "rank": res["rank"], "epoch": epoch, "step": step,
                     "samples": samples, "fetches": dict(zip(fetch_names, values, strict=True))}
            history.append(event)
            per_epoch.setdefault(epoch, []).append(values)
    history.sort(key=lambda e: (e["step"], e["rank"]))
    epochs = [{"epoch": e, **{n: float(np.mean([v[i] for v in vals]))
                               for i, n in enumerate(fetch_names)}}
              for e, vals in sorted(per_epoch.items())]
    elapsed = max(r["elapsed"] for r in results)
    samples = sum(r["samples"] for r in results)
    ranks = [{k: r[k] for k in ("rank", "address", "rows", "steps", "samples", "elapsed",
                                "digest")} for r in results]
    lines = [f"collective training, backend {backend}, {len(results)} rank(s), {steps} steps "
             "per epoch"]
    lines += [f"  rank {r['rank']}: {r['address']}"
              + (f" (endpoint {labels[r['address']]})" if r["address"] in labels else "")
              + f", {r['rows']} rows, {r['steps']} steps, digest {r['digest'][:12]}"
              for r in ranks]
    result = TrainResult(params=results[0]["params"], history=history, epochs=epochs,
                         steps=max(r["steps"] for r in results), samples=samples,
                         elapsed_s=elapsed, samples_per_s=samples / elapsed if elapsed else 0.0,
                         summary="\n".join(lines))
    result.ranks = ranks  # type: ignore[attr-defined]
    return result


# --------------------------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------------------------


def _make_comm(cfg: dict, worker: Any, rank: int) -> Any:
    if cfg["backend"] == "nccl":
        from dask_fluid.distributed.collective.nccl import NcclCommunicator  # noqa: PLC0415

        return NcclCommunicator(worker, cfg["job"], rank, cfg["addresses"], cfg["deadline_s"],
                                session=cfg["session"])
    from dask_fluid.distributed.collective import tcp_ring  # noqa: PLC0415
    from dask_fluid.distributed.collective.ring import RingCommunicator  # noqa: PLC0415

    # direct sockets between neighbours unless the job asked for Dask comms (see tcp_ring for why)
    if cfg["transport"] == "tcp":
        return tcp_ring.TcpRingCommunicator(worker, cfg["job"], rank, cfg["addresses"],
                                            cfg["deadline_s"], secret=cfg["secret"])
    return RingCommunicator(worker, cfg["job"], rank, cfg["addresses"], cfg["deadline_s"])


def _trainer_task(cfg: dict, rank: int, parts: list) -> dict:
    """One rank of a collective job (runs pinned on its worker, in a task thread)."""
    from distributed import get_worker  # noqa: PLC0415

    from dask_fluid.distributed.errors import JobAbortedError  # noqa: PLC0415

    worker = get_worker()
    comm = _make_comm(cfg, worker, rank)
    progress = _Progress()
    try:
        with tuned_for_training(worker, cfg["tuning"]):
            return _train(cfg, rank, worker, comm, parts, progress)
    except BaseException as exc:
        if not isinstance(exc, JobAbortedError):  # wake the others now, not at the deadline
            comm.abort(f"rank {rank} ({worker.address}) failed: {type(exc).__name__}: "
                       f"{exc}"[:500])
        if cfg["elastic"] and progress.scope is not None:  # what a restart starts from
            recovery.stash(cfg["job"], rank, recovery.rank_state(rank, progress.done, {
                n: np.array(to_host(progress.scope.vars[n]), copy=True)
                for n in progress.persist}))
        raise
    finally:
        comm.close()


def _checkpoint(cfg: dict, global_step: int, epoch: int, scope: Any, persist: list[str]
                ) -> None:
    """Rank 0 writes every persistable variable: all ranks hold the same after a step."""
    meta = {"job": cfg["job"], "ranks": cfg["addresses"], "epochs": cfg["epochs"],
            "steps_per_epoch": cfg["steps"], "global_batch": cfg["batch_size"] *
            len(cfg["addresses"]), "backend": cfg["backend"]}
    ckpt.write_step(cfg["checkpoint_dir"], global_step, epoch,
                    {n: to_host(scope.vars[n]) for n in persist}, meta)


@dataclass
class _Progress:
    """How far a rank got: its scope, its persistable variables and the last global step
    whose update it applied (what it leaves for an elastic restart)."""

    scope: Any = None
    persist: list[str] = field(default_factory=list)
    done: int = -1


def _train(cfg: dict, rank: int, worker: Any, comm: Any, parts: list,
           progress: _Progress) -> dict:
    from dask_fluid.executor import CPUPlace, CUDAPlace, Executor, Scope  # noqa: PLC0415

    main = Program.from_json(cfg["main"])
    startup = Program.from_json(cfg["startup"])
    compute, optimize, grads = split_program(main)
    exe = Executor(CPUPlace() if cfg["device"] == "cpu" else CUDAPlace(0))
    xp = exe._xp
    scope = Scope()
    exe.run(startup, scope=scope)
    persist = [n for n in persistable_names(main) if n in scope]
    host = cfg["backend"] == "ring"  # the ring reduces numpy arrays only
    # the values every rank starts from instead of the startup program's: all of them for an
    # elastic restart or resume_from (the step after theirs), some for a warm start
    start, values = 0, cfg["initial"] or {}
    if cfg["resume"] is not None:
        start, arrays = cfg["resume"]
        missing = [n for n in persist if n not in arrays]
        if missing:
            raise ValueError(f"the restart state lacks {missing}")
        values = {n: arrays[n] for n in persist}
    for n, value in values.items():
        scope.vars[n] = xp.asarray(value) if xp is not np else np.array(value, copy=True)
    if cfg["resume"] is None:
        broadcast_persistables(comm, scope, persist, xp, host=host)
    progress.scope, progress.persist, progress.done = scope, persist, start - 1

    feeds = prepare_feeds(main, local_arrays(parts), feed_names(main))
    if xp is not np:
        feeds = {k: xp.asarray(v) for k, v in feeds.items()}
    n_rows = len(next(iter(feeds.values())))
    steps, bs, fetch = cfg["steps"], cfg["batch_size"], cfg["fetch"]
    seed_r = rank_seed(cfg["seed"], rank)
    records: list[tuple] = []
    samples = 0
    meter = StepMeter(PUBLISH_INTERVAL_S)
    started = meter.start
    for epoch in range(cfg["epochs"]):
        if (epoch + 1) * steps <= start:  # done before an elastic restart
            continue
        batches = batch_indices(n_rows, bs, epoch, seed_r, cfg["shuffle"])
        for s in range(steps):
            global_step = epoch * steps + s
            if global_step < start:
                continue
            idx = batches[s % len(batches)]
            if xp is not np:
                idx = xp.asarray(idx)
            fetched = exe.run(compute, feed={k: v[idx] for k, v in feeds.items()},
                              fetch_list=fetch, scope=scope)
            check_finite(fetch, fetched, epoch, global_step)
            reduce_start = time.perf_counter()
            reduce_gradients(comm, scope, grads, xp, host=host, step=global_step)
            waited = time.perf_counter() - reduce_start
            exe.run(optimize, scope=scope)
            progress.done = global_step
            if rank == 0 and checkpoint_due(cfg["checkpoint_every"], global_step, steps):
                _checkpoint(cfg, global_step, epoch, scope, persist)
            samples += len(idx)
            meter.step(len(idx), waited)
            event = step_event(rank, epoch, global_step, len(idx), fetch, fetched)
            if meter.due(last=s == steps - 1):
                event.update(meter.fields())
                publish(worker, cfg["job"], event)
            records.append((epoch, global_step, len(idx), list(event["fetches"].values())))
        publish(worker, cfg["job"], {"type": "epoch_end", "rank": rank, "epoch": epoch,
                                     "steps": steps, "samples": samples})
    elapsed = time.perf_counter() - started
    publish(worker, cfg["job"], {"type": "done", "rank": rank, "steps": len(records),
                                 "samples": samples, "elapsed": elapsed})
    params = {n: np.array(to_host(scope.vars[n]), copy=True) for n in persist}
    digest = hashlib.sha256()
    for n in persist:
        digest.update(n.encode())
        digest.update(np.ascontiguousarray(params[n]).tobytes())
    return {"rank": rank, "address": worker.address, "rows": n_rows, "steps": len(records),
            "samples": samples, "elapsed": elapsed, "digest": digest.hexdigest(),
            "records": records, "params": params if rank == 0 else None}
