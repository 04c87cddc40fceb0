"""Elastic pserver training: what survives a lost worker, and where the restart begins.

With ``elastic=True`` the launcher does not end the job when a worker is lost: it starts the
job again on the workers that are left, from the pservers' state, within the same call.

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

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["collect", "restart_point", "stash"]

#: (job, pserver id) -> (time, state); entries nobody collects go after STASH_TTL_S
_STASH: dict[tuple[str, int], tuple[float, dict[str, Any]]] = {}
_LOCK = threading.Lock()
STASH_TTL_S = 600.0


def stash(job: str, state: dict[str, Any]) -> None:
    """Keep a pserver's :meth:`~..pserver.shard.PServerShard.elastic_state` in this process
    until the launcher collects it."""
    now = time.monotonic()
    with _LOCK:
        for key in [k for k, (t, _) in _STASH.items() if now - t > STASH_TTL_S]:
            del _STASH[key]
        _STASH[(job, int(state["pserver_id"]))] = (now, state)


def _take(job: str, dask_worker: Any = None) -> list[dict[str, Any]]:
    with _LOCK:
        keys = [k for k in _STASH if k[0] == job]
        return [_STASH.pop(k)[1] for k in keys]


def collect(client: Any, job: str, workers: Sequence[str], timeout_s: float
            ) -> dict[int, dict[str, Any]]:
    """The states the pservers of ``job`` left on ``workers``, by pserver id."""
    if not workers:
        return {}
    found = client.run(_take, job, workers=list(workers), on_error="ignore",
                       callback_timeout=timeout_s)
    states: dict[int, dict[str, Any]] = {}
    for per_worker in found.values():
        if isinstance(per_worker, list):
            for state in per_worker:
                states[int(state["pserver_id"])] = state
    return states


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
