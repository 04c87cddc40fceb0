"""Elastic training: what survives a lost worker, and where the restart begins.

With ``elastic=True`` the launcher does not end the job when a worker is lost: it starts the
job again on the workers that are left, from the state the job left, within the same call.

Collective (ring, NCCL) training: every rank holds the whole model, so each surviving rank
leaves its variables and its last applied step here when the job is aborted
(:func:`rank_state`); the restart takes the rank that got furthest (:func:`newest_rank_state`).

Pserver training:

- **A trainer's worker is lost.** The pservers are alive: when the job is aborted each one
  leaves its state here, on its worker (:func:`stash`), and the launcher collects it
  (:func:`collect`). In sync mode a lost trainer may have pushed its last gradients to some
  pservers only, so the pservers can be one round apart; each keeps the state before its
  latest round too, and the restart takes the older of the two rounds (:func:`restart_point`):
  the interrupted step is replayed by the remaining trainers, from one consistent state. In
  async mode each pserver's current state is taken as it is.
- **A pserver's worker is lost.** Its shards are gone with it: every pserver restarts from the
  latest intact checkpoint round (``checkpoint_dir``), on the workers that are left.

Either way the data is placed again over the remaining trainers (the lost worker's rows go to
them), and in sync mode the global batch stays what it was: each trainer's batch is the global
batch divided by the trainers that are left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import DistributedTrainingError

__all__ = ["announce", "collect", "newest_rank_state", "rank_state", "restart_point",
           "run_with_restarts", "stash", "without_lost"]

logger = logging.getLogger(__name__)

#: (job, pserver id) -> (time, state); entries nobody collects go after STASH_TTL_S
_STASH: dict[tuple[str, int], tuple[float, dict[str, Any]]] = {}
_LOCK = threading.Lock()
STASH_TTL_S = 600.0
#: restarts within one call at most (a cluster that keeps losing workers ends the job)
MAX_RECOVERIES = 8


def stash(job: str, key: int, state: dict[str, Any]) -> None:
    """Keep what a pserver (its :meth:`~..pserver.shard.PServerShard.elastic_state`, ``key``
    its id) or a collective rank (:func:`rank_state`, ``key`` its rank) leaves of an aborted
    job in this process until the launcher collects it."""
    now = time.monotonic()
    with _LOCK:
        for old in [k for k, (t, _) in _STASH.items() if now - t > STASH_TTL_S]:
            del _STASH[old]
        _STASH[(job, int(key))] = (now, state)


def _take(job: str, dask_worker: Any = None) -> dict[int, dict[str, Any]]:
    with _LOCK:
        keys = [k for k in _STASH if k[0] == job]
        return {k[1]: _STASH.pop(k)[1] for k in keys}


def collect(client: Any, job: str, workers: Sequence[str], timeout_s: float
            ) -> dict[int, dict[str, Any]]:
    """The states the pservers (or ranks) of ``job`` left on ``workers``, by id."""
    if not workers:
        return {}
    found = client.run(_take, job, workers=list(workers), on_error="ignore",
                       callback_timeout=timeout_s)
    states: dict[int, dict[str, Any]] = {}
    for per_worker in found.values():
        if isinstance(per_worker, dict):
            states.update(per_worker)
    return states


def rank_state(rank: int, done: int, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """What a collective rank leaves of an aborted job: the last global step whose update it
    applied and its persistable variables after it (host copies)."""
    return {"rank": int(rank), "done": int(done), "arrays": arrays}


def newest_rank_state(states: Mapping[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The state to restart a collective job from: the surviving rank that got furthest.

    Every rank applies the same all-reduced gradients, so ranks that applied the same step hold
    the same values; a rank whose last all-reduce completed (it received every rank's part)
    applied a correct step, even when a peer died before finishing that all-reduce itself."""
    if not states:
        return None
    return max(states.values(), key=lambda s: (int(s["done"]), -int(s["rank"])))


def without_lost(data: Any, trainers: Any, trainer_workers: list[str], lost: set[str],
                 candidates: list[str]) -> tuple[Any, Any, int]:
    """The data and trainers arguments for the workers that are left, and how many trainers
    that gives (at most). A list of trainers loses the lost workers; per-trainer dicts of lost
    trainers go, whole, to the remaining trainers in turn (which keep their workers)."""
    if isinstance(data, (list, tuple)) and data and all(isinstance(d, Mapping) for d in data):
        keep = [i for i, w in enumerate(trainer_workers) if w not in lost]
        gone = [i for i, w in enumerate(trainer_workers) if w in lost]
        merged = [dict(data[i]) for i in keep]
        for j, i in enumerate(gone):
            if not merged:
                break
            target = merged[j % len(merged)]
            for key, value in data[i].items():
                target[key] = np.concatenate([np.asarray(target[key]), np.asarray(value)])
        return merged, [trainer_workers[i] for i in keep], len(keep)
    if isinstance(trainers, (list, tuple)):
        trainers = [t for t in trainers if t not in lost]
        return data, trainers, len(trainers)
    if isinstance(trainers, int) and not isinstance(trainers, bool):
        trainers = min(trainers, len(candidates))
        return data, trainers, trainers
    return data, trainers, len(candidates)


def restart_point(states: Mapping[int, dict[str, Any]], n_pservers: int,
                  survivors: Sequence[int]) -> tuple[int, dict[int, dict[str, np.ndarray]]] | None:
    """``(last round done, {pserver id: arrays})`` that every pserver can restart from, or
    None when some pserver's state is missing or no common round exists.

    Sync: the newest round every pserver has (its current round or the one before). Async:
    the current states, and the last round that the slowest of the ``survivors`` (trainer
    ids) got to (the furthest any pserver applied of it): no surviving trainer skips a step.
    """
    if sorted(states) != list(range(n_pservers)):
        return None
    # a pserver holding no block has no rounds and no state: the others decide
    working = {k: s for k, s in states.items() if not s.get("idle")}
    chosen: dict[int, dict[str, np.ndarray]] = {k: {} for k in states if k not in working}
    if not working:
        return None
    if not all(s["sync"] for s in working.values()):
        done = min((max(int(s["pushed"].get(r, -1)) for s in working.values())
                    for r in survivors), default=-1)
        return done, {**chosen, **{k: s["arrays"] for k, s in working.items()}}
    common = min(int(s["round"]) for s in working.values())
    for k, s in working.items():
        if int(s["round"]) == common:
            chosen[k] = s["arrays"]
        elif s["previous"] is not None and int(s["previous"][0]) == common:
            chosen[k] = s["previous"][1]
        else:
            return None
    return common, chosen


def run_with_restarts(attempt: Callable[[Any], Any],
                      recover: Callable[[Exception, Any, list[dict]], Any]) -> Any:
    """Run ``attempt(restart)`` (None the first time) until it returns a TrainResult; after a
    DistributedTrainingError, ``recover(error, restart, recoveries)`` gives the next restart,
    or None to raise the error. The result carries the recoveries and a ``recovered:`` line in
    its summary for each."""
    recoveries: list[dict] = []
    restart = None
    while True:
        try:
            result = attempt(restart)
        except DistributedTrainingError as err:
            restart = recover(err, restart, recoveries)
            if restart is None:
                raise
            continue
        if recoveries:
            result.recoveries = recoveries
            result.summary += "".join(f"\nrecovered: {r['message']}" for r in recoveries)
        return result


def announce(lost: Sequence[str], roles: str, err: Exception, start: int, source: str,
             recoveries: list[dict], callbacks: Sequence[Callable[[dict], Any]]) -> None:
    """Record a recovery: the ``recovery`` event (to the callbacks and ``recoveries``) and a
    warning in the log."""
    event = {"type": "recovery", "lost": sorted(lost), "error": str(err),
             "start_round": int(start), "source": source,
             "message": f"lost {roles} ({type(err).__name__}); restarted at step {start} "
                        f"from {source}"}
    logger.warning("elastic: %s", event["message"])
    recoveries.append(event)
    for callback in callbacks:
        callback(event)
