"""Launch one pinned task per worker for a training job, and make sure it ends.

The recipe of xgboost.dask and lightgbm.dask: check the workers are alive, submit one task per
worker with ``workers=[addr]`` and no fallback, then watch. What this adds is the ending: the
first failed task, a job worker that leaves the cluster (its pinned task would otherwise sit
in ``no-worker`` for ever, distributed#7346), or a job worker that is frozen (alive but silent:
its scheduler heartbeats, sent every 0.5–2 s, stopped for longer than ``FLAGS_rpc_deadline``)
aborts the job on every worker so that no rank stays blocked, and the job's services are always
detached afterwards.

The heartbeat check is what ends a job whose frozen worker nobody waits on: an async trainer
(its pservers do not wait for it), or a rank that froze between two collectives. The ranks'
own deadlines catch the rest, often sooner.
"""

from __future__ import annotations

import functools
import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any

from distributed import wait

from ...flags import RPCFlags
from ..comm import rpc
from ..errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
    WorkerLostError,
    with_detail,
    with_step,
)
from .dashboard.plugin import ensure_dashboard
from .events import Callback, Subscription, topic

logger = logging.getLogger(__name__)

#: how long tasks get to notice an abort (they check every 0.5 s) before the job gives up on
#: them, counted from the abort
ABORT_GRACE_S = 5.0
#: how long the launcher waits for the cause when the first task to fail only says it was
#: aborted (the failing task is still telling the others)
CAUSE_GRACE_S = 2.0
#: how long the abort message waits for the workers' acknowledgement
ABORT_ACK_S = 2.0
#: how long the clean-up waits for the workers to detach the job's services. A frozen worker
#: (SIGSTOP, a hung machine) never answers, and the job must still end: its services end
#: themselves at their own deadline once it runs again. With these bounds a job ends at most
#: ABORT_GRACE_S + DETACH_TIMEOUT_S after its first error.
DETACH_TIMEOUT_S = 3.0
#: how long a finished job waits for its trainers' last events to reach the callbacks
DONE_GRACE_S = 2.0
#: how long the launcher waits for the stack of a task that missed a deadline
STACK_TIMEOUT_S = 2.0
#: how many of that stack's innermost frames the error message shows (the log has them all)
STACK_FRAMES = 6
_FRAME = re.compile(r'\s*File "([^"]*)", line (\d+), in (\S+)')


@dataclass
class TaskSpec:
    """One pinned task of a job."""

    worker: str
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    role: str = "trainer"
    endpoint: str | None = None
    #: the task publishes a ``done`` event as it ends (the runtimes' trainers): the launcher
    #: waits for those (at most DONE_GRACE_S) so that the callbacks see the job's last events
    reports_done: bool = False

    @property
    def where(self) -> str:
        return self.endpoint or self.worker


class LastStep:
    """An event callback that keeps the highest step the job's tasks reported (``step``, None
    before the first)."""

    def __init__(self) -> None:
        self.step: int | None = None

    def __call__(self, event: dict) -> None:
        if event.get("type") == "step":
            self.step = max(self.step if self.step is not None else -1, int(event["step"]))


class _Ends:
    """An event callback that counts the trainers' ``done`` events, so that the launcher can
    let them reach the callbacks before it unsubscribes (they travel through the scheduler,
    the results do not, so the results can arrive first: a short job's step events could
    arrive after it returned, its progress view would then miss them)."""

    def __init__(self) -> None:
        self.done: set[int] = set()

    def __call__(self, event: dict) -> None:
        if event.get("type") == "done":
            self.done.add(int(event.get("rank", 0)))

    def wait(self, trainers: int, timeout_s: float = DONE_GRACE_S) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.done) < trainers and time.monotonic() < deadline:
            time.sleep(0.005)


def new_job_id() -> str:
    """A short random job id (also the session id of the job's services)."""
    return uuid.uuid4().hex[:12]


def live_workers(client: Any) -> set[str]:
    """Addresses of the workers the scheduler knows now (a scheduler round trip)."""
    return set(worker_silence(client))


def worker_silence(client: Any) -> dict[str, float]:
    """Seconds since the scheduler last heard each of its workers' heartbeats."""
    return client.run_on_scheduler(_scheduler_silence)


def _scheduler_silence(dask_scheduler: Any) -> dict[str, float]:
    from distributed.metrics import time

    now = time()
    return {addr: max(0.0, now - ws.last_seen) for addr, ws in dask_scheduler.workers.items()}


def check_workers_alive(client: Any, workers: Iterable[str]) -> None:
    """Raise ``ValueError`` naming the workers that are not part of the cluster."""
    alive = live_workers(client)
    missing = sorted(set(workers) - alive)
    if missing:
        raise ValueError(f"Missing required workers: {missing}; the cluster has "
                         f"{sorted(alive)}. Pass addresses of live workers.")


def _detach(job: str, dask_worker: Any = None) -> None:
    rpc.detach_job(dask_worker, job)


def _as_training_error(exc: BaseException, spec: TaskSpec) -> BaseException:
    if isinstance(exc, (DistributedTrainingError, ValueError, TypeError)):
        return exc
    err = DistributedTrainingError(f"{type(exc).__name__}: {exc}", spec.role, spec.where)
    err.__cause__ = exc
    return err


def _first_error(done: Sequence[tuple[Any, TaskSpec]]) -> BaseException | None:
    """The root cause among finished tasks: an abort notice only if nothing else failed."""
    # Dask cancels (rather than fails) a task whose scattered input died with its worker.
    lost = [spec for f, spec in done if f.status == "cancelled"]
    if lost:
        return WorkerLostError(f"the {lost[0].role} task was cancelled: its worker or its "
                               "data left the cluster", lost[0].role, lost[0].where)
    errors = [(f.exception(), spec) for f, spec in done if f.status == "error"]
    errors.sort(key=lambda e: _echo_rank(e[0]))
    return _as_training_error(*errors[0]) if errors else None


def _echo_rank(error: BaseException) -> int:
    """0 for a cause; 1 for a missed deadline that blames a pserver, which may echo the cause
    (a sync pserver waits for a silent trainer, the other trainers wait for it and give up a
    moment after it: on a loaded machine, first); 2 for the abort notice of another failure."""
    if isinstance(error, JobAbortedError):
        return 2
    return int(isinstance(error, DeadlineExceededError) and error.role == "pserver")


def _watch(client: Any, pairs: list[tuple[Any, TaskSpec]], poll_s: float, deadline_s: float
           ) -> BaseException | None:
    pending = {f for f, _ in pairs}
    cause_by: float | None = None
    answered: dict[str, float] = {}  # when each worker last answered a direct probe
    while pending:
        try:
            _, pending = wait(list(pending), timeout=poll_s, return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        except CancelledError:
            pending = {f for f in pending if not f.done()}
        err = _first_error([(f, s) for f, s in pairs if f.done()])
        if err is not None:
            # a task that was told to stop, or that waited for the failing one, can end before
            # it: give that one a moment, so that the job fails with the cause
            if not _echo_rank(err) or not pending:
                return err
            cause_by = cause_by or time.monotonic() + CAUSE_GRACE_S
            if time.monotonic() >= cause_by:
                return err
            continue
        silence = worker_silence(client)
        for f, spec in pairs:
            if f.done():
                continue
            if spec.worker not in silence:
                return WorkerLostError(
                    f"worker {spec.worker} left the cluster while running the job's "
                    f"{spec.role} task", spec.role, spec.where)
            since = time.monotonic() - answered.get(spec.worker, float("-inf"))
            if min(silence[spec.worker], since) <= deadline_s:
                continue
            # late heartbeats alone can be a loaded machine (the worker's or the scheduler's
            # event loop waiting for a core): frozen only if a direct call gets no answer in
            # another deadline either
            if _answers(client, spec.worker, deadline_s):
                answered[spec.worker] = time.monotonic()
                continue
            return DeadlineExceededError(
                f"worker {spec.worker} has not answered the scheduler for "
                f"{silence[spec.worker]:.1f} s, nor a direct call for {deadline_s:.1f} s, "
                f"while running the job's {spec.role} task: it is frozen (stopped, swapping, "
                "or its event loop blocked)", spec.role, spec.where,
                deadline_ms=deadline_s * 1000)
    return None


def _with_where_it_waited(client: Any, pairs: list[tuple[Any, TaskSpec]],
                          error: DistributedTrainingError) -> DistributedTrainingError:
    """``error`` (a missed deadline that blames a role) with where the blamed role's running
    task was: the innermost frames of its stack in the message, the whole stack in the log.
    What it waited on, or what it was computing, is what tells a hang from a slow step."""
    blamed: dict[str, str] = {}  # task key -> "trainer 3"
    seen: Counter[str] = Counter()
    for f, spec in pairs:  # a role's tasks are in rank order
        rank, seen[spec.role] = seen[spec.role], seen[spec.role] + 1
        if spec.role == error.role and spec.where == error.endpoint and not f.done():
            blamed[f.key] = f"{spec.role} {rank}"
    if not blamed:
        return error
    try:
        stacks = client.sync(client.scheduler.call_stack, keys=list(blamed),
                             callback_timeout=STACK_TIMEOUT_S)
    except Exception:  # noqa: BLE001  (a frozen worker does not answer: the error stands)
        return error
    found = [(blamed[key], frames) for per_worker in (stacks or {}).values()
             for key, frames in per_worker.items() if key in blamed]
    if not found:
        return error
    for name, frames in found:
        logger.warning("the %s task at %s was here when it missed the deadline:\n%s", name,
                       error.endpoint, "".join(frames))
    return with_detail(error, "; ".join(f"its {name} task was in {_innermost(frames)}"
                                        for name, frames in found))


def _innermost(frames: Sequence[str], keep: int = STACK_FRAMES) -> str:
    """``fn (file:line) < caller (file:line) < ...`` for the last ``keep`` frames of a
    formatted stack (Dask's call stack: ``'  File "path", line N, in fn\\n\\tcode\\n'``)."""
    parsed = []
    for frame in frames[-keep:][::-1]:
        match = _FRAME.match(frame)
        if match:
            path, line, fn = match.groups()
            parsed.append(f"{fn} ({path.rsplit('/', 1)[-1]}:{line})")
    return " < ".join(parsed) or "an unknown place"


def _pong() -> bool:
    return True


def _answers(client: Any, worker: str, timeout_s: float) -> bool:
    """Whether ``worker`` answers a call within ``timeout_s`` (a stopped process does not)."""
    try:
        return bool(client.run(_pong, workers=[worker], callback_timeout=timeout_s).get(worker))
    except Exception:  # noqa: BLE001  (a timeout, a closed comm: no answer either way)
        return False


def _log(client: Any, job: str, event: dict, subscription: Subscription | None = None) -> None:
    """Publish a launcher event on the job's topic (for the dashboard) and hand it to the
    callbacks of ``subscription``."""
    event = {**event, "job": job, "time": time.time(), "origin": "client"}
    if subscription is not None:
        subscription.emit(event)
    try:
        client.log_event(topic(job), event)
    except Exception:  # watching must never stop a job
        logger.debug("could not publish %s of job %s", event.get("type"), job, exc_info=True)


def _job_event(tasks: Sequence[TaskSpec], info: Mapping[str, Any] | None) -> dict:
    """What runs where: trainers in rank order, pservers by endpoint, plus ``info``."""
    trainers = [t.worker for t in tasks if t.role == "trainer"]
    pservers = {t.where: t.worker for t in tasks if t.role == "pserver"}
    return {"type": "job", "kind": "tasks", "trainers": trainers, "pservers": pservers,
            "roles": [[t.role, t.where] for t in tasks], **(info or {})}


def run_tasks(client: Any, job: str, tasks: Sequence[TaskSpec], *,
              callbacks: Iterable[Callback] = (), poll_s: float = 0.2,
              deadline_s: float | None = None, last_step: LastStep | None = None,
              info: Mapping[str, Any] | None = None) -> list:
    """Run ``tasks`` (one pinned task each) and return their results in order.

    Parameters
    ----------
    client : distributed.Client
        A synchronous client.
    job : str
        The job id; events go to its topic and its services are detached at the end.
    tasks : sequence of TaskSpec
    callbacks : iterable of callable
        Called on the client with every event the tasks publish while they run.
    poll_s : float
        How often the liveness of the job's workers is checked.
    deadline_s : float, optional
        A job worker whose heartbeats stop for this long is taken for frozen (default:
        ``FLAGS_rpc_deadline``, read now).
    last_step : LastStep, optional
        Follows the steps the tasks report (a fresh one by default).
    info : mapping, optional
        Published with the job's ``{"type": "job"}`` event before the tasks start (plain
        values only): ``kind``, ``rounds`` (steps the job takes), ``summary``...

    Raises
    ------
    DistributedTrainingError
        The first task failure (``RemoteError``, ``DeadlineExceededError``...),
        ``WorkerLostError`` when a job worker leaves, or ``DeadlineExceededError`` when one
        freezes; every other task is aborted first. An error that the launcher found (a lost
        or frozen worker) carries the last step any task reported.
    """
    if deadline_s is None:
        deadline_s = RPCFlags.current().deadline_s
    last_step = last_step or LastStep()
    rpc.ensure_plugin(client)
    ensure_dashboard(client)
    workers = sorted({t.worker for t in tasks})
    check_workers_alive(client, workers)
    pairs: list[tuple[Any, TaskSpec]] = []
    reachable = set(workers)  # an abort that a worker did not acknowledge drops it
    end = {"type": "job_end", "status": "failed", "error": ""}
    try:
        # as_current: distributed.wait() otherwise goes through the newest client of the process
        ends = _Ends()
        with client.as_current(), Subscription(client, job,
                                               [last_step, ends, *callbacks]) as subscription:
            _log(client, job, _job_event(tasks, info), subscription)
            for i, spec in enumerate(tasks):
                fn = functools.partial(spec.fn, **spec.kwargs) if spec.kwargs else spec.fn
                future = client.submit(fn, *spec.args, key=f"dask-fluid-{spec.role}-{i}-{job}",
                                       workers=[spec.worker], allow_other_workers=False,
                                       pure=False, retries=0)
                pairs.append((future, spec))
            error = _watch(client, pairs, poll_s, deadline_s)
            if isinstance(error, DeadlineExceededError):  # before the abort moves them on
                error = _with_where_it_waited(client, pairs, error)
            if error is not None:
                reachable = _abort(client, job, workers, pairs, error)
                if isinstance(error, DistributedTrainingError):
                    error = with_step(error, last_step.step)
                end["error"] = f"{type(error).__name__}: {error}"[:2000]
                raise error
            results = client.gather([f for f, _ in pairs])
            ends.wait(sum(1 for t in tasks if t.reports_done))
            end["status"] = "finished"
            return results
    except BaseException as exc:
        end["error"] = end["error"] or f"{type(exc).__name__}: {exc}"[:2000]
        raise
    finally:
        _log(client, job, end)
        alive = sorted(live_workers(client) & reachable)
        try:
            client.run(_detach, job, workers=alive, on_error="ignore",
                       callback_timeout=DETACH_TIMEOUT_S)
        except Exception:  # a worker may die or freeze during clean-up; the rest are detached
            logger.warning("detaching job %s from %s failed or timed out", job, alive,
                           exc_info=True)
        client.cancel([f for f, _ in pairs])


def _abort(client: Any, job: str, workers: list[str], pairs: list[tuple[Any, TaskSpec]],
           error: BaseException) -> set[str]:
    """Abort the job everywhere; wait a little for the tasks of the workers that heard it.
    Returns those workers."""
    logger.info("aborting job %s: %s", job, error)
    alive = sorted(live_workers(client) & set(workers))
    deadline = time.monotonic() + ABORT_GRACE_S
    # wait only for the tasks of workers that heard the abort: a frozen one will not stop
    acked = set(rpc.abort_job_sync(client, alive, job, f"{type(error).__name__}: {error}",
                                   timeout_s=ABORT_ACK_S))
    running = [f for f, spec in pairs if not f.done() and spec.worker in acked]
    while running and time.monotonic() < deadline:
        try:
            wait(running, timeout=max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            break
        running = [f for f in running if not f.done()]
    if running:
        logger.warning("job %s: %d task(s) did not stop within %.0f s of the abort", job,
                       len(running), ABORT_GRACE_S)
    return acked
