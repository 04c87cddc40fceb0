"""A trainer's connections to the pservers of its job (the trainer side of pserver mode).

The RPC ops of a trainer program (:mod:`.ops`) stage and exchange through a
:class:`PServerClient`: ``send`` stages gradients, ``send_barrier`` (sync) sends every pserver
one request with all the gradients staged for it and the names of the parameter blocks the
following ``recv`` ops want, and each reply, which comes after that pserver's optimize step,
carries the updated blocks (push and pull fused: one round trip per pserver per step).

Two kinds of client, one round trip:

- :class:`DirectClient` (Fluid's launch style: processes started by hand or by
  ``dask-fluid launch``): every endpoint is the ``host:port`` a pserver listens on. Connecting
  is retried until ``FLAGS_rpc_deadline`` (the pservers may start after the trainers: Fluid's
  ``wait_port``). ``exe.close()`` tells every pserver this trainer is done; so does a normal
  exit of the process (an unhandled exception does not: the pservers then fail the job instead
  of training on without this trainer).
- :class:`DaskClient` (``train_pserver``): a pserver on the trainer's own worker, or on any
  worker of this process (an in-process cluster), is called directly (its thread-safe core, no
  copy); others through their direct data path (framed
  messages of :mod:`..comm.wire`, the address learned from the shard's job service) or through
  Dask RPC (the "dask" data path, for ``tls://`` and other clusters).

A round trip sends to every remote pserver, starts the Dask calls, pushes to the local shard,
and only then waits for replies, so that no pserver waits on a trainer that is itself waiting.

Early pushes (sync mode, the overlap of Fluid's asynchronous ``send`` ops). Fluid's transpiler
puts each ``send`` right after the op that makes its gradient, so the last layers' gradients are
ready while the backward pass still runs through the first layers. Where a pserver is reached
over a network link (a direct connection whose payloads go through the socket: another host,
TLS, or ``DASK_FLUID_SHM_DISABLE``), once the gradients staged for it reach
``early_push_bytes`` (the ``dask.config`` key :data:`EARLY_PUSH_KEY`, 1 MiB by default;
``None`` turns it off) they go out at once as a ``push_part``, from a sender thread, while the
executor goes on with the backward pass; the step's ``push_pull`` carries the rest and the
number of parts. Nothing changes in what the pserver computes: its round still starts with
every active trainer's whole gradient. Shared memory and the local shard take a push in
microseconds, so they keep the one ``push_pull``.

The training modes of Fluid 1.8 (``distributed_mode`` on the RPC ops, :mod:`...transpiler.modes`)
differ only here, on the trainer side:

- sync and half-async: each step's exchange is waited for (sync: after the pservers' round);
- async with the runtime split (Fluid's Communicator): the exchange of a step is started and
  left in flight; the step goes on with the parameters of the previous step's exchange, which
  is finished first (:meth:`PServerClient.exchange_in_background`). One exchange at most is in
  flight; any other request, and :meth:`~PServerClient.complete`, finishes it first;
- GEO-SGD: :class:`GeoState` keeps, per parameter, the value last merged with the pservers;
  every ``geo_sgd_need_push_nums`` steps the parameter's change since then, divided by the
  number of trainers, is sent and the pservers' values are merged back.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import math
import queue
import ssl
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import dask.config
import numpy as np
from dask.utils import parse_bytes

from ...flags import RPCFlags
from ...ops.selected_rows import SelectedRows
from ...ops.split_ops import split_byref, split_selected_rows
from ..comm import rpc
from ..comm.auth import HandshakeError, client_handshake, split_endpoint
from ..comm.rpc import pack_arrays, unpack_arrays
from ..comm.tls import TlsContexts, worker_contexts
from ..comm.wire import POLL_S, Connection, PeerClosed, WireTimeout, connect
from ..errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
    RemoteError,
    ServiceNotFoundError,
    WorkerLostError,
)
from .shard import PServerShard, flatten_tensors, service_name, unflatten_tensors
from .shard_server import ShardServer, serve_while_waiting

__all__ = ["EARLY_PUSH_KEY", "DaskClient", "DirectClient", "PServerClient",
           "early_push_setting"]

logger = logging.getLogger(__name__)

#: connecting to a pserver that is not listening yet is retried this often
CONNECT_RETRY_S = 0.1
#: how long a failing trainer spends telling each other pserver why it stops
ABORT_NOTICE_S = 2.0
#: a trainer waiting for its own shard's round re-checks it this often, then less and less often
#: (another thread may end it); requests on the connections lent to it wake it at once
ROUND_CHECK_S = 0.001
ROUND_CHECK_MAX_S = 0.05
#: dask.config key: gradients staged for a pserver on a network link go out as soon as they
#: reach this many bytes (an int, or a string such as "4 MiB"); None: only with the barrier
EARLY_PUSH_KEY = "dask_fluid.pserver.early-push-bytes"
EARLY_PUSH_DEFAULT = 1 << 20


def early_push_setting() -> int | None:
    """The :data:`EARLY_PUSH_KEY` setting of this process: bytes, or None (off).

    Raises
    ------
    ValueError
        The value is neither None, a byte count of 0 or more, nor a string of one.
    """
    value = dask.config.get(EARLY_PUSH_KEY, EARLY_PUSH_DEFAULT)
    if value is None or value is False:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        n = parse_bytes(value) if isinstance(value, str) else int(value)
        if isinstance(value, float) and value != n:
            raise TypeError
    except (TypeError, ValueError):
        n = -1
    if n < 0:
        raise ValueError(f"dask.config {EARLY_PUSH_KEY!r} is {value!r}: give a byte count of "
                         "0 or more (e.g. 1048576 or \"1 MiB\"), or None to send every "
                         "gradient with the step's barrier")
    return n


@dataclass
class _Call:
    """One request of a round trip: ``method`` to the pserver at ``endpoint``."""

    endpoint: str
    method: str
    header: dict[str, Any]
    arrays: dict[str, Any]


@dataclass
class _Started:
    """A round trip whose requests are out: what :meth:`PServerClient._finish` needs."""

    calls: list[_Call]
    links: list[Any]
    futures: dict[int, concurrent.futures.Future]
    finishers: dict[int, Any]


class _PartSender:
    """One thread that writes a trainer's early pushes, in order, while the trainer computes.

    :meth:`drain` waits until everything handed over is written: the trainer calls it before it
    writes anything else to a connection (a connection carries one message at a time), and
    gets the first failure then.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._unsent = 0
        self._failure: tuple[_Call, BaseException] | None = None
        self._current: _Call | None = None
        self._thread: threading.Thread | None = None

    def put(self, call: _Call, send: Any) -> None:
        """Write ``call`` with ``send()`` after what was put before."""
        with self._cond:
            self._unsent += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        self._queue.put((call, send))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            call, send = item
            self._current = call
            try:
                if self._failure is None:  # after a failure the rest would only fail too
                    send()
            except BaseException as exc:  # handed to the trainer by drain
                self._failure = (call, exc)
            finally:
                with self._cond:
                    self._unsent -= 1
                    self._cond.notify_all()

    def drain(self, timeout_s: float) -> tuple[_Call, BaseException] | None:
        """Wait until every early push is written (each write has its own deadline; this
        gives up after ``timeout_s`` in any case): the first that failed, and why."""
        if self._thread is None:  # nothing was ever handed over (the usual case)
            return None
        give_up = time.monotonic() + timeout_s
        with self._cond:
            while self._unsent and time.monotonic() < give_up:
                self._cond.wait(POLL_S)
            failure, self._failure = self._failure, None
            if failure is None and self._unsent and self._current is not None:
                failure = (self._current, WireTimeout("an early push was not written in time"))
        return failure

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)


#: a reply that is not there yet (the first step of the pipelined async mode): the ``recv``
#: keeps the parameter's current value
NOT_YET = object()


@dataclass
class GeoParam:
    """GEO-SGD bookkeeping of one parameter on a trainer."""

    #: the value last merged with the pservers (Fluid's "old" scope)
    old: np.ndarray
    steps: int = 0
    #: the parameter after the latest step (what the final push at ``complete`` sends)
    latest: Any = None
    #: where its deltas go: (endpoints, delta names, rows per block) of its ``send``
    route: tuple[list[str], list[str], list[int]] | None = None
    #: whether the latest step exchanges with the pservers
    due: bool = False


class GeoState:
    """A trainer's GEO-SGD state (Fluid's GeoSgdCommunicator), keyed by parameter name.

    Per parameter ``x`` with last merged value ``old``: every ``push_nums`` steps
    ``delta = (x - old) / trainers`` is sent (the pservers add it) and ``old += delta``; then
    the pservers' value ``z`` is received and merged, ``x += z - old``, ``old = z``.
    """

    def __init__(self, trainers: int, push_nums: int) -> None:
        self.trainers = int(trainers)
        self.push_nums = int(push_nums)
        self.params: dict[str, GeoParam] = {}

    def init(self, names: list[str], values: list[Any]) -> None:
        for name, value in zip(names, values, strict=True):
            self.params[name] = GeoParam(np.array(value, copy=True))

    def param(self, name: str) -> GeoParam:
        state = self.params.get(name)
        if state is None:
            raise geo_not_initialised(name)
        return state

    def step(self, name: str, value: Any, route: tuple) -> dict[str, Any] | None:
        """Count a step of ``name``; the delta blocks to send when an exchange is due."""
        state = self.param(name)
        state.steps += 1
        state.latest, state.route = value, route
        state.due = state.steps % self.push_nums == 0
        return self.take_delta(name) if state.due else None

    def take_delta(self, name: str) -> dict[str, Any]:
        """``(x - old) / trainers`` cut into the parameter's delta blocks; ``old += delta``."""
        state = self.params[name]
        delta = (np.asarray(state.latest) - state.old) / np.asarray(self.trainers,
                                                                      state.old.dtype)
        state.old = state.old + delta
        _, names, sections = state.route
        return dict(zip(names, split_rows(delta, sections), strict=True))

    def merge(self, name: str, current: Any, pulled: Any) -> Any:
        """The trainer's parameter after an exchange: ``x + (z - old)``; ``old = z``."""
        state = self.params[name]
        merged = np.asarray(current) + (np.asarray(pulled) - state.old)
        state.old = np.array(pulled, copy=True)
        return merged.astype(state.old.dtype, copy=False)

    def unsent(self) -> list[str]:
        """Parameters with steps since their last exchange (pushed by ``complete``)."""
        return [n for n, s in self.params.items() if s.route is not None and
                s.steps % self.push_nums]


def geo_not_initialised(name: str) -> ValueError:
    return ValueError(f"GEO-SGD: parameter {name!r} was never initialised: run the trainer "
                      "startup program the transpiler produced (its last op, send(param_init), "
                      "records the starting values) with the same Executor before the trainer "
                      "program")


def split_rows(value: Any, sections: list[int]) -> list[Any]:
    """``value`` cut along dim 0 into blocks of ``sections`` rows (views; a SelectedRows is
    cut by row id and rebased, as ``split_selected_rows``)."""
    if len(sections) <= 1:
        return [value]
    if isinstance(value, SelectedRows):
        return split_selected_rows({"X": [value]}, {"height_sections": sections}, ())["Out"]
    return split_byref({"X": [value]}, {"sections": sections}, ())["Out"]


def join_rows(blocks: list[Any]) -> Any:
    """Inverse of :func:`split_rows` for dense blocks."""
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=0)


class PServerClient:
    """What every trainer does with its pservers; subclasses say how to reach one.

    Parameters
    ----------
    trainer_id : int
    flags : RPCFlags
    sync_mode : bool
    endpoints : iterable of str
        Every pserver of the job (the RPC ops add the ones they name).
    early_push_bytes : int, optional
        Sync mode: gradients staged for a pserver on a network link go out as soon as they
        reach this many bytes (module docstring); None: only with the step's barrier.
    """

    def __init__(self, trainer_id: int, flags: RPCFlags, sync_mode: bool,
                 endpoints: Iterable[str] = (), *, early_push_bytes: int | None = None) -> None:
        self.trainer_id = int(trainer_id)
        self.flags = flags
        self.sync_mode = bool(sync_mode)
        self.endpoints: set[str] = set(endpoints)
        self.round = 0
        self._staged: dict[str, dict[str, Any]] = {}
        self._replies: dict[str, Any] = {}
        self._recv_plans: dict[tuple, tuple[Any, dict[str, list[str]]]] = {}
        self._links: dict[str, Any] = {}  # endpoint -> local shard | Connection | None (Dask)
        self._aborted: str | None = None
        #: the direct connections' TLS (on a ``tls://`` Dask cluster); None: plain TCP
        self.tls: TlsContexts | None = None
        #: seconds spent in pserver exchanges (requests in flight; this includes answering
        #: the requests lent to this trainer meanwhile), for the summary
        self.rpc_s = 0.0
        #: tensor bytes sent to and received from pservers over sockets, and requests made (one
        #: round trip each, whatever the data path), for the summary and the benchmarks
        self.bytes_sent = 0
        self.bytes_received = 0
        self.requests = 0
        #: when this trainer last sent each pserver a request (pings go to the silent ones)
        self._last_contact: dict[str, float] = {}
        #: wait for a pserver that does not accept connections yet (the ops' ``wait_port``)
        self.wait_port = True
        self._prefetch_lock = threading.Lock()
        #: the exchange left in flight by the pipelined async mode, and the replies of one
        #: that another request had to finish first (they are the next step's parameters)
        self._in_flight: _Started | None = None
        self._in_flight_replies: dict[str, Any] = {}
        self.geo: GeoState | None = None
        #: the direct data paths of this process's shards this trainer waits on: while it
        #: waits, it answers the requests on the connections they lend it (:mod:`.shard_server`)
        self._serving: list[ShardServer] = []
        self.early_push_bytes = early_push_bytes
        #: early pushes made so far, and this step's per pserver (the push_pull counts them)
        self.early_pushes = 0
        self._parts_sent: dict[str, int] = {}
        self._sender = _PartSender(f"trainer-{self.trainer_id}-early-push")

    # -- step bookkeeping -----------------------------------------------------------------------
    def begin_step(self, round_index: int) -> None:
        """Start global round ``round_index`` (the Dask trainer loop knows the schedule)."""
        self.round = round_index
        self._replies.clear()

    def stage(self, epmap: list[str], names: list[str], values: list[Any]) -> None:
        """Keep gradient blocks ``values`` for the pservers ``epmap`` until the step's push;
        push early the ones that fill a network link's batch (module docstring)."""
        for ep, name, value in zip(epmap, names, values, strict=True):
            self._staged.setdefault(ep, {})[name] = value
        if self.early_push_bytes is not None and self.sync_mode:
            for ep in dict.fromkeys(epmap):
                self._push_early(ep)

    def _push_early(self, ep: str) -> None:
        """Hand what is staged for ``ep`` to the sender if it is on a network link and has
        reached ``early_push_bytes``."""
        link = self._links.get(ep)
        # a link opens at the startup's pull; a shard of this process, Dask RPC or shared
        # memory take the whole push at the barrier for less than a part would cost
        if not isinstance(link, Connection) or link.sends_shared:
            return
        staged = self._staged[ep]
        if sum(int(getattr(v, "nbytes", 0)) for v in staged.values()) < self.early_push_bytes:
            return
        del self._staged[ep]
        arrays, sparse = flatten_tensors(staged)
        call = _Call(ep, "push_part", {"method": "push_part", "round": self.round,
                                       "sparse": sparse}, arrays)
        now = time.monotonic()
        deadline = now + self._deadline_s
        self._parts_sent[ep] = self._parts_sent.get(ep, 0) + 1
        self.early_pushes += 1
        self.requests += 1
        self.bytes_sent += sum(int(a.nbytes) for a in arrays.values())
        self._last_contact[ep] = now
        self._sender.put(call, lambda: link.send(call.header, arrays, deadline=deadline,
                                                 stop=self._stopped))

    def wanted(self, block: Any, op: Any) -> dict[str, list[str]]:
        """Endpoint -> the blocks every ``recv`` of ``block`` from ``op`` on wants."""
        key = (id(block), id(op))
        cached = self._recv_plans.get(key)
        # the entry holds the op itself: no other op can take its id while it is cached
        plan = cached[1] if cached is not None and cached[0] is op else None
        if plan is None:
            ops = block.ops
            start = next(i for i, o in enumerate(ops) if o is op)
            plan = {}
            for o in ops[start:]:
                if o.type != "recv":
                    continue
                for ep, name in zip(o.attrs["epmap"], o.attrs["recv_varnames"], strict=True):
                    plan.setdefault(ep, []).append(name)
            self._recv_plans[key] = (op, plan)
        return plan

    def has_replies(self, names: Iterable[str]) -> bool:
        return all(n in self._replies for n in names)

    @property
    def staged(self) -> bool:
        """Whether this step has gradients to push (staged, or gone ahead as early pushes that
        the step's push_pull must count)."""
        return bool(self._staged) or bool(self._parts_sent)

    # -- requests -------------------------------------------------------------------------------
    def exchange(self, want: dict[str, list[str]], push: bool) -> None:
        """One request per pserver: staged gradients (if ``push``) and the blocks ``want``."""
        for reply in self._round_trip(self._exchange_calls(want, push)):
            self._replies.update(reply)
        if push and self.sync_mode:
            self.round += 1  # the next push is the next round (begin_step may set it too)

    def exchange_in_background(self, want: dict[str, list[str]]) -> None:
        """The async Communicator's step: finish the exchange in flight (its parameters are
        this step's replies), start this step's push and pull, and leave it in flight. On the
        first step nothing was in flight: every wanted block is :data:`NOT_YET`."""
        if self._in_flight is not None:
            self._finish_in_flight()
        if self._in_flight_replies:
            self._replies.update(self._in_flight_replies)
            self._in_flight_replies.clear()
        else:
            self._replies.update({n: NOT_YET for names in want.values() for n in names})
        calls = self._exchange_calls(want, push=True)
        t0 = time.perf_counter()
        try:
            self._in_flight = self._guarded(self._start, calls)
        finally:
            self.rpc_s += time.perf_counter() - t0

    def _finish_in_flight(self) -> None:
        started, self._in_flight = self._in_flight, None
        t0 = time.perf_counter()
        try:
            replies = self._guarded(self._finish, started)
        finally:
            self.rpc_s += time.perf_counter() - t0
        for reply in replies:
            # kept apart: a recv must not take them for replies to this step's push
            self._in_flight_replies.update(reply)

    def _exchange_calls(self, want: dict[str, list[str]], push: bool) -> list[_Call]:
        # only the pservers that take or hold a block of this step: one that holds no block
        # has no round to count (Fluid's send_barrier goes to every pserver; that made a
        # step's cost grow with trainers x pservers)
        parts = self._parts_sent if push else {}
        endpoints = sorted(set(want) | (set(self._staged) | set(parts) if push else set()))
        calls = self._pings(endpoints) if push else []
        for ep in endpoints:
            names = want.get(ep, [])
            if push:
                arrays, sparse = flatten_tensors(self._staged.get(ep, {}))
                header = {"method": "push_pull", "round": self.round, "want": names,
                          "sparse": sparse}
                if ep in parts:
                    header["parts"] = parts[ep]
            else:
                arrays, header = {}, {"method": "pull", "want": names,
                                      "after_round": self.round}
            calls.append(_Call(ep, header["method"], header, arrays))
        if push:
            self._staged.clear()
            self._parts_sent = {}
        return calls

    def _pings(self, busy: list[str]) -> list[_Call]:
        """A ``ping`` to each pserver this trainer has not reached for a quarter of the
        deadline: a pserver that holds no block hears from its trainers that way, so that it
        still fails the job when they all go silent."""
        now = time.monotonic()
        interval = self.flags.deadline_s / 4
        return [_Call(ep, "ping", {"method": "ping"}, {}) for ep in sorted(self.endpoints)
                if ep not in busy and now - self._last_contact.get(ep, -math.inf) > interval]

    def prefetch(self, epmap: list[str], ids: list[Any],
                 tables: list[str] | None = None) -> list[Any]:
        """Rows of the distributed table for ``ids[i]`` from ``epmap[i]``; with ``tables``,
        rows ``ids[i]`` of the parameter block ``tables[i]``. One exchange at a time: the
        places of a multi-place trainer look up concurrently."""
        names = [None] * len(epmap) if tables is None else list(tables)
        calls = [_Call(ep, "prefetch", {"method": "prefetch"} if t is None else
                       {"method": "prefetch", "table": t}, {"ids": np.asarray(i)})
                 for ep, i, t in zip(epmap, ids, names, strict=True)]
        with self._prefetch_lock:
            return [reply["rows"] for reply in self._round_trip(calls)]

    def complete(self) -> None:
        """Tell every pserver this trainer is done (Fluid's COMPLETE), after the exchange in
        flight (async) and the GEO-SGD progress not sent yet: Fluid's Communicator drops the
        last steps' progress when it stops; here the pservers' final parameters include it."""
        if self._in_flight is not None:
            self._finish_in_flight()
            self._in_flight_replies.clear()
        if self.geo is not None:
            for name in self.geo.unsent():
                eps, _, _ = self.geo.params[name].route
                delta = self.geo.take_delta(name)
                self.stage(eps, list(delta), list(delta.values()))
            if self._staged:
                self.exchange({}, push=True)
        self._round_trip([_Call(ep, "complete", {"method": "complete"}, {})
                          for ep in sorted(self.endpoints | set(self._links))])

    def take(self, names: list[str]) -> list[Any]:
        return [self._replies.pop(n) for n in names]

    # -- GEO-SGD --------------------------------------------------------------------------------
    def geo_init(self, trainers: int, push_nums: int, names: list[str],
                 values: list[Any]) -> None:
        """The GEO trainer startup's ``send(param_init)``: the values deltas start from."""
        if self.geo is None:
            self.geo = GeoState(trainers, push_nums)
        self.geo.init(names, values)

    def geo_send(self, name: str, value: Any, epmap: list[str], delta_names: list[str],
                 sections: list[int]) -> None:
        """A GEO step of parameter ``name``: stage its delta blocks when an exchange is due."""
        if self.geo is None:
            raise geo_not_initialised(name)
        delta = self.geo.step(name, value, (list(epmap), list(delta_names), list(sections)))
        if delta is not None:
            self.stage(list(epmap), list(delta), list(delta.values()))

    def geo_due(self, name: str) -> bool:
        """Whether this step of parameter ``name`` exchanges with the pservers."""
        if self.geo is None:
            raise geo_not_initialised(name)
        return self.geo.param(name).due

    # -- how to reach a pserver (subclasses) ----------------------------------------------------
    def _link(self, ep: str) -> Any:
        """The shard itself (same process), a :class:`Connection`, or None (Dask RPC)."""
        raise NotImplementedError

    def _where(self, ep: str) -> str:
        """How errors name the pserver at ``ep``."""
        return f"pserver {ep}"

    def _start_dask(self, c: _Call) -> concurrent.futures.Future:
        raise NotImplementedError(f"{type(self).__name__} has no Dask RPC data path")

    # -- the round trip -------------------------------------------------------------------------
    def _round_trip(self, calls: list[_Call]) -> list[dict[str, Any]]:
        """Send every call, then collect the replies (name -> array dicts, in call order).

        An exchange left in flight is finished first (its replies are kept): a connection
        carries one request at a time. The first failure is raised as a
        :class:`DistributedTrainingError` naming the pserver.
        """
        if self._in_flight is not None:
            self._finish_in_flight()
        t0 = time.perf_counter()
        try:
            return self._guarded(lambda: self._finish(self._start(calls)))
        finally:
            self.rpc_s += time.perf_counter() - t0

    def _guarded(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except DistributedTrainingError as err:
            err._dask_fluid_passthrough = True  # the executor re-raises it as is
            self._on_failure(err)
            raise

    def _start(self, calls: list[_Call]) -> _Started:
        """Put every request on its way (sockets, Dask calls, the local shard's push), after
        the early pushes."""
        failed = self._sender.drain(self._deadline_s + POLL_S)
        if failed is not None:
            call, exc = failed

            def reraise() -> None:
                raise exc
            self._wire(call, reraise)
        links = [self._link(c.endpoint) for c in calls]
        now = time.monotonic()
        deadline = now + self._deadline_s
        self.requests += len(calls)
        for c in calls:
            self._last_contact[c.endpoint] = now
        futures = {}
        for i, (c, link) in enumerate(zip(calls, links, strict=True)):
            if isinstance(link, Connection):
                self._wire(c, lambda c=c, link=link: link.send(
                    c.header, c.arrays, deadline=deadline, stop=self._stopped))
                self.bytes_sent += sum(int(a.nbytes) for a in (c.arrays or {}).values())
            elif link is None:
                futures[i] = self._start_dask(c)
        finishers = {i: self._local(c, link) for i, (c, link) in
                     enumerate(zip(calls, links, strict=True))
                     if isinstance(link, PServerShard)}
        return _Started(calls, links, futures, finishers)

    def _finish(self, started: _Started) -> list[dict[str, Any]]:
        """Collect the replies of :meth:`_start`'s requests, in call order."""
        calls = started.calls
        # the deadline counts from here: a pipelined exchange waits for a whole step first
        deadline = time.monotonic() + self._deadline_s
        results: list[Any] = [None] * len(calls)
        # remote replies first: a reply larger than the socket buffers only moves while
        # this thread reads it, and the local reply costs nothing once its round is done
        for i, (c, link) in enumerate(zip(calls, started.links, strict=True)):
            if isinstance(link, Connection):
                self._serve_until_readable(link, deadline)
                # copied out of shared memory: the parameters it holds outlive the message
                header, buf = self._wire(c, lambda link=link: link.recv(
                    deadline=deadline, stop=self._stopped, copy=True))
                self.bytes_received += int(getattr(buf, "nbytes", 0))
                results[i] = self._unwrap(c, header, buf)
        for i, fut in started.futures.items():
            header, meta, buf = _future_result(fut, self._deadline_s, calls[i], self.round)
            results[i] = self._unwrap(calls[i], {"ok": True, **header, "meta": meta}, buf)
        for i, finish in started.finishers.items():
            results[i] = finish()
        return results

    def _on_failure(self, err: DistributedTrainingError) -> None:
        """A round trip failed for good (the subclass may tell the other pservers)."""

    def _serve_until_readable(self, link: Connection, deadline: float) -> None:
        """Wait for ``link``'s reply, answering the requests lent to this trainer meanwhile
        (returns at once when nothing is lent: ``link.recv`` then waits as usual)."""
        servers = [s for s in self._serving if s.lending]
        if not servers or isinstance(link.sock, ssl.SSLSocket):  # (TLS: bytes poll can't see)
            return
        fd = link.sock.fileno()
        while not serve_while_waiting(servers, (fd,), POLL_S):
            if self._stopped() or time.monotonic() > deadline:
                return  # link.recv says what went wrong

    def _serve_until_done(self, shard: PServerShard, release: int) -> None:
        """Wait for round ``release`` of this process's ``shard``, answering the requests lent
        to this trainer meanwhile (the round may need one of them)."""
        server = shard.server
        if server is None or server not in self._serving:
            return
        give_up = time.monotonic() + self._deadline_s
        check_s = ROUND_CHECK_S
        while (server.lending and not shard.round_done(release) and not self._stopped()
               and time.monotonic() < give_up):
            serve_while_waiting([server], (), check_s)
            check_s = min(2 * check_s, ROUND_CHECK_MAX_S)  # a long wait: a stalled trainer

    def _local(self, c: _Call, shard: PServerShard) -> Any:
        """Start ``c`` on a shard of this process; return what finishes it (may block)."""
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

            def finish() -> Any:
                self._serve_until_done(shard, release)
                return guarded(shard.reply, tid, release, tuple(h["want"]))
            return finish
        if c.method == "pull":
            return lambda: guarded(shard.pull_sync, tid, tuple(h["want"]), h["after_round"])
        if c.method == "prefetch":
            return lambda: {"rows": guarded(shard.prefetch_sync, c.arrays["ids"],
                                            h.get("table"))}
        if c.method == "ping":
            return lambda: guarded(shard.ping, tid) or {}
        return lambda: guarded(shard.complete, tid) or {}

    def _unwrap(self, c: _Call, header: dict, buf: Any) -> dict[str, Any]:
        if not header.get("ok"):
            # bytes from a socket: the error is rebuilt from plain fields, never unpickled
            error = header.get("error")
            raise rpc._remote_exception(error if isinstance(error, dict) else {},
                                        role="pserver", endpoint=c.endpoint, step=self.round,
                                        what=f"{service_name(c.endpoint)}.{c.method}",
                                        trusted=False)
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
            raise WorkerLostError(f"the connection to {self._where(c.endpoint)} broke during "
                                  f"{c.method}: {exc}", "pserver", c.endpoint,
                                  self.round) from exc
        except WireTimeout:
            raise DeadlineExceededError(f"{service_name(c.endpoint)}.{c.method} did not answer",
                                        "pserver", c.endpoint, self.round,
                                        deadline_ms=self._deadline_s * 1000) from None

    def _connect(self, ep: str, host: str, port: int, secret: bytes) -> Connection:
        """A greeted connection to the pserver listening at ``host:port``."""
        try:
            return connect(host, port, lambda sock: client_handshake(sock, secret, ep,
                                                                     self.trainer_id),
                           self.flags.deadline_s, self.tls)
        except (PeerClosed, HandshakeError) as exc:  # it hung up on the handshake
            raise WorkerLostError(f"{self._where(ep)} at {host}:{port} refused trainer "
                                  f"{self.trainer_id}: is it a pserver of this job (same job "
                                  "secret, same number of trainers)?", "pserver", ep,
                                  self.round) from exc

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
        """Close the connections (the pservers see the trainer hang up)."""
        self._sender.close()
        serving, self._serving = self._serving, []
        for server in serving:  # their connections are read by their own threads again
            server.detach_waiter(self.trainer_id)
        for link in list(self._links.values()):
            if isinstance(link, Connection):
                link.close()
        self._links.clear()


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
# Fluid's launch style: endpoints are addresses
# --------------------------------------------------------------------------------------------

#: clients of this process that have not said "complete" yet (strong references: a trainer
#: script may drop its executor before the process exits, and the pservers must still hear)
_open_clients: set[DirectClient] = set()
_open_lock = threading.Lock()
_crashed = False


class DirectClient(PServerClient):
    """A trainer process's client: every endpoint is the ``host:port`` a pserver listens on.

    Parameters
    ----------
    trainer_id, flags, sync_mode, endpoints
        As :class:`PServerClient`.
    secret : bytes
        The job secret (:func:`..comm.auth.env_secret`).
    tls : TlsContexts, optional
        Connect with TLS (:func:`..comm.tls.env_contexts`).

    Early pushes follow this process's :data:`EARLY_PUSH_KEY` setting.
    """

    def __init__(self, trainer_id: int, flags: RPCFlags, sync_mode: bool,
                 endpoints: Iterable[str] = (), *, secret: bytes = b"",
                 tls: TlsContexts | None = None) -> None:
        super().__init__(trainer_id, flags, sync_mode, endpoints,
                         early_push_bytes=early_push_setting())
        self.secret = secret
        self.tls = tls
        self._done = False
        _install_exit_hooks()
        with _open_lock:
            _open_clients.add(self)

    def _link(self, ep: str) -> Connection:
        link = self._links.get(ep)
        if link is None:
            link = self._links[ep] = self._wait_and_connect(ep)
        return link

    def _wait_and_connect(self, ep: str) -> Connection:
        """Connect, retrying while nothing listens there yet (until FLAGS_rpc_deadline); with
        ``wait_port`` off, once (Fluid's trainer then does not wait for its pservers)."""
        host, port = split_endpoint(ep)
        give_up = time.monotonic() + self.flags.deadline_s
        said = False
        while True:
            try:
                return self._connect(ep, host, port, self.secret)
            except OSError as exc:  # refused (not listening yet), unreachable, timed out
                if not self.wait_port:
                    raise DistributedTrainingError(
                        f"pserver {ep} did not accept trainer {self.trainer_id}'s connection "
                        f"({type(exc).__name__}: {exc}), and the trainer program was made "
                        "with wait_port=False, so the trainer does not wait for it: start the "
                        "pservers first, or use get_trainer_program(wait_port=True) to wait "
                        "up to FLAGS_rpc_deadline", "pserver", ep, self.round) from None
                if time.monotonic() > give_up:
                    raise DeadlineExceededError(
                        f"pserver {ep} did not accept trainer {self.trainer_id}'s connection "
                        f"({type(exc).__name__}: {exc}); is it running, and is {ep} its "
                        "endpoint?", "pserver", ep, self.round,
                        deadline_ms=self.flags.deadline_ms) from None
                if not said:
                    logger.info("trainer %d: waiting for pserver %s", self.trainer_id, ep)
                    said = True
                time.sleep(CONNECT_RETRY_S)

    def _on_failure(self, err: DistributedTrainingError) -> None:
        """Tell every other pserver why this trainer stops, so that each fails with the cause
        (a dead pserver's endpoint) instead of only "trainer i hung up". A fresh connection
        carries the notice: the trainer's own may be stuck in a barrier that will never end."""
        if self._done:
            return
        self._done = True  # a stopped trainer never says "complete"
        with _open_lock:
            _open_clients.discard(self)
        reason = str(err).split(". ")[0]
        for ep in sorted(self._links):
            if ep == err.endpoint:
                continue
            try:
                host, port = split_endpoint(ep)
                conn = connect(host, port, lambda sock, ep=ep: client_handshake(
                    sock, self.secret, ep, self.trainer_id), ABORT_NOTICE_S, self.tls)
                try:
                    conn.send({"method": "abort", "reason": reason}, None,
                              deadline=time.monotonic() + ABORT_NOTICE_S)
                finally:
                    conn.close()
            except OSError:
                pass  # that pserver is gone too, or not listening: nothing to tell

    def finish(self) -> None:
        """Tell the pservers this trainer is done, then hang up (``exe.close()``)."""
        with _open_lock:
            _open_clients.discard(self)
        if self._done:
            return
        self._done = True
        try:
            if self._links:
                self.complete()
        finally:
            self.close()

    def on_executor_close(self) -> None:
        self.finish()


def shared_client(trainer_id: int, flags: RPCFlags, sync_mode: bool, *, secret: bytes = b"",
                  tls: TlsContexts | None = None) -> DirectClient:
    """This process's open client of trainer ``trainer_id``, made on first use.

    Fluid keeps one RPC client a process: a script that runs its transpiled startup program
    (whose ``recv`` ops pull the first parameters) with one executor and trains with another
    (a ParallelExecutor) is still one trainer to the pservers, and says "complete" once.
    """
    with _open_lock:
        for client in _open_clients:
            if client.trainer_id == trainer_id and client.sync_mode == bool(sync_mode) and \
                    client.secret == secret and not client._done:
                return client
    return DirectClient(trainer_id, flags, sync_mode, secret=secret, tls=tls)


def open_client(trainer_id: int) -> DirectClient | None:
    """This process's open client of trainer ``trainer_id`` in whatever mode, if any (a
    remote-prefetch lookup talks through the connections of its trainer's RPC ops)."""
    with _open_lock:
        return next((c for c in _open_clients if c.trainer_id == trainer_id and not c._done),
                    None)


def finish_clients(trainer_id: int | None = None) -> None:
    """Tell the pservers that this process's trainer (``trainer_id``, or every one) is done,
    and hang up: fleet's ``stop_worker``, which Fluid runs as its communicator's stop and
    ``SendComplete``."""
    with _open_lock:
        clients = [c for c in _open_clients if trainer_id is None or c.trainer_id == trainer_id]
    for client in clients:
        client.finish()


def _install_exit_hooks() -> None:
    """Once per process: finish every open client at a normal exit, none after a crash."""
    global _install_exit_hooks
    previous = sys.excepthook

    def excepthook(*args: Any) -> None:
        global _crashed
        _crashed = True  # the pservers must not take this trainer for done
        previous(*args)

    sys.excepthook = excepthook
    atexit.register(_finish_open_clients)
    _install_exit_hooks = lambda: None  # noqa: E731 - installed


def _finish_open_clients() -> None:
    with _open_lock:
        clients = list(_open_clients)
    for client in clients:
        try:
            if _crashed:
                client.close()
            else:
                client.finish()
        except Exception as exc:  # exiting anyway: say why the pservers may fail
            print(f"dask_fluid: trainer {client.trainer_id} could not tell the pservers it is "
                  f"done: {exc}", file=sys.stderr)


# --------------------------------------------------------------------------------------------
# train_pserver: endpoints are Dask workers
# --------------------------------------------------------------------------------------------


class _Hook(rpc.Service):
    """Job service: an abort of the job closes the trainer's pserver connections at once."""

    def __init__(self, client: DaskClient) -> None:
        self._client = client

    def abort(self, reason: str) -> None:
        self._client._abort(reason)

    def close(self) -> None:
        self._client.close()


class DaskClient(PServerClient):
    """A trainer task's client: each pserver is a job service on a Dask worker.

    Parameters
    ----------
    worker : distributed.Worker
    job : str
    secret : bytes
        What the shards' direct data paths check (:func:`..comm.auth.server_handshake`).
    trainer_id : int
    workers_of : dict of str to str
        Fluid endpoint -> Dask worker address of each pserver.
    flags : RPCFlags
    sync_mode : bool
    early_push_bytes : int, optional
        As :class:`PServerClient` (the job's client process read the setting).
    """

    def __init__(self, worker: Any, job: str, secret: bytes, trainer_id: int,
                 workers_of: dict[str, str], flags: RPCFlags, sync_mode: bool, *,
                 early_push_bytes: int | None = None) -> None:
        super().__init__(trainer_id, flags, sync_mode, workers_of,
                         early_push_bytes=early_push_bytes)
        self.worker = worker
        self.job = job
        self.secret = secret
        self.workers_of = dict(workers_of)
        self.tls = worker_contexts(worker)
        self._hook = f"trainer/{trainer_id}"
        rpc.attach_service(worker, job, self._hook, _Hook(self))

    def _where(self, ep: str) -> str:
        return f"pserver {ep} ({self.workers_of[ep]})"

    def _link(self, ep: str) -> Any:
        if ep in self._links:
            return self._links[ep]
        address = self.workers_of[ep]
        service = service_name(ep)
        # the shard of a worker in this process (its own, or any worker of an in-process
        # cluster) is called directly: a socket there would only add a thread hop
        peer = (self.worker if address == self.worker.address
                else rpc.worker_in_process(address))
        if peer is not None:
            link = self._retrying(ep, lambda: rpc.get_service(peer, self.job, service))
            if link.server is not None and self.sync_mode:
                link.server.attach_waiter(self.trainer_id)
                self._serving.append(link.server)
        else:
            info = self._retrying(ep, lambda: rpc.call_sync(
                self.worker, address, self.job, service, "endpoint_info",
                deadline_s=self.flags.deadline_s, role="pserver", endpoint=ep,
                step=self.round))
            link = None
            if info is not None:
                try:
                    link = self._connect(ep, info["host"], info["port"], self.secret)
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

    def _start_dask(self, c: _Call) -> concurrent.futures.Future:
        meta, buf = pack_arrays(c.arrays)
        return rpc.start_call(self.worker, self.workers_of[c.endpoint], self.job,
                              service_name(c.endpoint), "request", deadline_s=self._deadline_s,
                              role="pserver", endpoint=c.endpoint, step=self.round,
                              trainer_id=self.trainer_id, header=c.header, meta=meta, buf=buf)

    def close(self) -> None:
        super().close()
        rpc.detach_service(self.worker, self.job, self._hook)
