"""The parameter-server shard: what Fluid's ``listen_and_serv`` op serves.

A :class:`PServerShard` holds a scope with the pserver's variables (initialised by the pserver
startup program, or a checkpoint) and runs the program's optimize blocks with the
:class:`~dask_fluid.executor.Executor` when gradients arrive. The ``listen_and_serv`` kernel
(:mod:`.ops`) builds one over the scope ``exe.run(pserver_program)`` was given and calls
:meth:`PServerShard.run`, which returns once every trainer has said it is done. Whether the
pserver is a process started by hand (Fluid's launch style) or a Dask task, this is the one
pserver loop; :class:`ServeOptions` says what differs (where to bind, the job's schedule,
checkpoints, the Dask service hook).

Requests. Three ways lead to the same thread-safe core (:meth:`PServerShard.push`,
:meth:`~PServerShard.reply`, :meth:`~PServerShard.pull_sync`, :meth:`~PServerShard.prefetch_sync`,
:meth:`~PServerShard.complete`):

- a trainer on the shard's own worker calls the core directly (no copy, no serialisation);
- a trainer on another worker of a ``tcp://`` (or ``inproc://``) cluster talks to the shard's own
  socket (:mod:`.shard_server`, the "tcp" data path), where one thread per trainer connection
  calls :meth:`~PServerShard.handle`, or, while the trainer of the shard's own worker waits for
  its replies, that trainer (a sync push whose round is still open is answered by whoever
  ends the round: :meth:`~PServerShard.reply_later`);
- on other clusters (``tls://``, ``ucx://``: the "dask" data path) the Dask handler
  :meth:`~PServerShard.request` runs :meth:`~PServerShard.handle` in a thread off the event loop.

:meth:`~PServerShard.handle` knows these requests:

``push_pull`` (one per pserver per step: Fluid's send + send_barrier + recv + fetch_barrier)
    *sync*: the gradients of step ``(epoch, step)`` are stored under the trainer's names; the
    push that completes the step (every trainer active in it has pushed) runs the optimize
    blocks in its own thread (the program's own ``sum`` and ``scale`` ops average the
    gradients), and every waiting trainer then gets the updated parameter blocks it asked for.
    *async*: each gradient runs its block from ``grad_to_block_id`` at once, unscaled; the reply
    carries the current parameters, and with DC-ASGD the reply to trainer ``i`` copies each
    parameter into ``P.trainer_i_bak``.
``push_part`` (sync, no reply)
    Gradients of the trainer's coming ``push_pull`` of step ``round``, sent ahead while the
    trainer still computes (its early pushes on a network link, :mod:`.client`). They are kept
    apart and join that ``push_pull``, whose ``parts`` header says how many came: the step is
    the trainer's only when the ``push_pull`` arrives, so a round still starts only after
    every active trainer's whole gradient. A part that is refused (a past step, a step after
    the trainer's last, a gradient sent twice) fails that ``push_pull`` with the reason.
``pull``
    Parameter values without a push (trainer start-up, resume).
``prefetch``
    Rows of the distributed lookup table for global ids (``id % P == k`` live here, at local row
    ``id // P``), or, when the header names a ``table``, rows of one of this pserver's
    parameter blocks (a sparse table its trainers look up remotely).
``complete``
    The trainer is done (Fluid's COMPLETE): when all trainers are, :meth:`~PServerShard.run`
    returns. A trainer whose connection closes before it said so is lost, and fails the job.
``ping``
    The trainer is alive. A trainer's step reaches only the pservers holding a block it
    sends or receives; the others hear a ping from it every quarter of ``FLAGS_rpc_deadline``,
    so that a pserver holding no block still fails the job when its trainers go silent.

Rounds (sync). A pserver started by hand has open-ended rounds: a round completes when every
trainer that is not done yet has pushed. Under ``train_pserver`` every trainer's number of steps
per epoch is known when the job starts (its rows and the batch size, a :class:`Schedule`), so
the shard knows which trainers take part in step ``s`` of an epoch:
those with more than ``s`` steps. A trainer that has no batch left leaves the barrier for the
rest of the epoch, and the reply to its last push of the epoch waits until the epoch's last step
is done, so that every trainer starts the next epoch from the same parameters. In a step with
``k < N`` active trainers the missing per-trainer gradients are zero and the ``scale`` op
multiplies by ``1/k`` instead of ``1/N``: the update is the average gradient of the trainers that
took the step (Fluid keeps ``1/N``, which shrinks the last steps of an epoch).

Threads. The sync state lives under one condition variable (released while a round's
optimize runs, so that the next round's pushes are not held up); a push never waits for other
trainers (a trainer pushes to every pserver before it waits for any reply), a reply waits for
its round. Numpy work of at least ``inline_bytes`` goes to three pools:
``FLAGS_rpc_send_thread_num`` threads apply gradients (sync optimize steps, async blocks),
``FLAGS_rpc_get_thread_num`` threads copy parameters for async replies, and
``FLAGS_rpc_prefetch_thread_num`` threads serve table lookups; smaller work runs in the calling
thread, where a thread hop would cost more than the work. An update counts the shard's
parameter bytes (Adam touches every row even for a sparse gradient), a lookup the rows it
returns (a 25 MB table's 1,000-row lookup runs inline), a reply what it copies (nothing in sync
mode, which replies with the live parameters).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...executor import Executor, Scope
from ...flags import RPCFlags
from ...framework import Program, VarType
from ...ops.selected_rows import SelectedRows
from ...transpiler.lr_counter import LR_DECAY_COUNTER
from ...transpiler.plan import TRAINER_ID_VAR
from ..checkpoint_files import checkpoint_due
from ..comm.auth import split_endpoint
from ..comm.rpc import Service, pack_arrays, unpack_arrays
from ..comm.tls import TlsContexts
from ..errors import DeadlineExceededError, JobAbortedError, WorkerLostError
from . import checkpoint as ckpt
from .fused_update import FusedUpdate
from .fused_update import plan as plan_fused
from .shard_server import ShardServer

__all__ = ["PServerShard", "Schedule", "ServeOptions", "TableShard", "decode_tensors",
           "encode_tensors", "service_name"]

logger = logging.getLogger(__name__)

_ROWS, _VALUE = "@@rows", "@@value"
#: listen_and_serv's distributed_mode (Fluid 1.8) as the log names it; the shard itself only
#: knows sync rounds and applying each received variable's block at once (every other mode)
_MODE_NAMES = {0: "sync", 1: "async", 2: "half-async", 3: "GEO-SGD"}
_POLL_S = 0.5  # a waiter re-checks for failures at least this often
#: after a failure, the trainers' requests in flight get this long to receive their error reply
DRAIN_S = 2.0


def _tensor_bytes(values: Any) -> int:
    """Bytes of dense arrays and SelectedRows (rows and values) together."""
    total = 0
    for v in values:
        if isinstance(v, SelectedRows):
            total += int(np.asarray(v.rows).nbytes) + int(v.value.nbytes)
        else:
            total += int(getattr(v, "nbytes", 0))
    return total


def service_name(endpoint: str) -> str:
    """The job-service name of the pserver at ``endpoint``."""
    return f"pserver/{endpoint}"


def flatten_tensors(tensors: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """Dense arrays as they are, SelectedRows as two arrays: ``(arrays, sparse heights)``."""
    flat: dict[str, Any] = {}
    sparse: dict[str, int] = {}
    for name, value in tensors.items():
        if isinstance(value, SelectedRows):
            flat[name + _ROWS] = np.asarray(value.rows, dtype=np.int64)
            flat[name + _VALUE] = value.value
            sparse[name] = value.height
        else:
            flat[name] = value
    return flat, sparse


def unflatten_tensors(flat: Mapping[str, Any], sparse: Mapping[str, int] | None
                      ) -> dict[str, Any]:
    """Inverse of :func:`flatten_tensors`."""
    flat = dict(flat)
    out: dict[str, Any] = {}
    for name, height in (sparse or {}).items():
        out[name] = SelectedRows(flat.pop(name + _ROWS), flat.pop(name + _VALUE), height)
    out.update(flat)
    return out


def encode_tensors(tensors: Mapping[str, Any]) -> tuple[dict, Any, dict[str, int]]:
    """Pack dense arrays and SelectedRows into one buffer: ``(meta, buffer, sparse heights)``."""
    flat, sparse = flatten_tensors(tensors)
    meta, buf = pack_arrays(flat)
    return meta, buf, sparse


def decode_tensors(meta: Mapping, buf: Any, sparse: Mapping[str, int] | None) -> dict[str, Any]:
    """Inverse of :func:`encode_tensors` (dense arrays are views into ``buf``)."""
    flat = unpack_arrays(meta, buf) if meta and meta.get("names") else {}
    return unflatten_tensors(flat, sparse)


@dataclass(frozen=True)
class TableShard:
    """This pserver's part of the distributed lookup table: global ids ``id % n == index``."""

    name: str
    grad: str
    n: int
    index: int
    rows: int


@dataclass(frozen=True)
class Schedule:
    """Every trainer's number of steps per epoch, known when a job starts (``train_pserver``).

    Without one (a pserver started by hand, Fluid style) the rounds are open-ended: a round
    completes when every trainer that has not yet said it is done has pushed.
    """

    steps_per_epoch: tuple[int, ...]
    epochs: int
    start_round: int = 0


@dataclass
class ServeOptions:
    """How ``listen_and_serv`` serves its endpoint, besides what the program says.

    The defaults are a pserver started by hand (Fluid's launch style): it binds its endpoint,
    rounds are open-ended, and it returns when every trainer has said it is done. The Dask
    launcher sets the rest (:mod:`dask_fluid.distributed.launch.pserver_tasks`).
    """

    #: what trainers prove they know when they connect (:func:`..comm.auth.server_handshake`)
    secret: bytes = b""
    flags: RPCFlags = field(default_factory=RPCFlags)
    #: (host, port) the direct data path binds; None: the endpoint itself; port 0: any free port
    bind: tuple[str, int] | None = None
    #: False: no socket at all (the Dask RPC data path and same-worker calls only)
    serve_socket: bool = True
    #: the socket's TLS (a ``tls://`` Dask cluster's certificates); None: plain TCP
    tls: TlsContexts | None = None
    schedule: Schedule | None = None
    #: what error messages call each trainer (Dask: its worker address)
    trainer_names: list[str] | None = None
    table: TableShard | None = None
    n_pservers: int = 1
    checkpoint_dir: str | None = None
    checkpoint_every: int | str | None = None
    resume_path: str | None = None
    #: the state to start from instead (an elastic restart: :meth:`PServerShard.elastic_state`)
    resume_state: Mapping[str, np.ndarray] | None = None
    #: values for some of the state to start from instead of the startup program's (this
    #: pserver's cut of ``train_pserver(initial_values=...)``: :mod:`...transpiler.pserver_state`)
    initial_values: Mapping[str, np.ndarray] | None = None
    #: elastic training: keep the state before the latest sync round too, so that a restart
    #: after a lost trainer finds every pserver at one common round
    elastic: bool = False
    #: numpy work on shards with fewer parameter bytes runs in the calling thread (see
    #: :attr:`PServerShard.inline_bytes`); None keeps the class default
    inline_bytes: int | None = None
    #: the event loop the Dask handlers run on (None without Dask)
    loop: asyncio.AbstractEventLoop | None = None
    #: called with the shard once it is ready, before it serves (the Dask launcher attaches it
    #: as a job service there)
    on_start: Callable[[PServerShard], None] | None = None
    #: a trainer hanging up before it is done fails the job at once; False where a launcher
    #: watches the trainers itself and aborts the job with the trainer's own error (Dask)
    fail_on_hangup: bool = True


class PServerShard(Service):
    """One pserver's state and request handlers (see the module docstring).

    Parameters
    ----------
    program : Program
        The pserver program (its last op is ``listen_and_serv``).
    scope : Scope
        Holds the pserver's variables, initialised by its startup program.
    options : ServeOptions
    """

    #: numpy work on less than this many bytes of parameters runs in the calling thread: a
    #: thread hop costs more than the work (tests set it to 0 to exercise the pools)
    inline_bytes: int = 1 << 20

    def __init__(self, program: Program, scope: Scope, options: ServeOptions) -> None:
        self.options = options
        self.program = program
        serv = program.global_block().ops[-1]
        if serv.type != "listen_and_serv":
            raise ValueError(f"a pserver program ends with listen_and_serv (found {serv.type!r})")
        self.attrs = dict(serv.attrs)
        self.endpoint = str(self.attrs["endpoint"])
        self.pserver_id = int(self.attrs.get("pserver_id", 0))
        self.trainer_num = int(self.attrs["Fanin"])
        self.sync_mode = bool(self.attrs["sync_mode"])
        self.flags = options.flags
        self.table = options.table
        self.recv_inputs = list(serv.input("X"))
        #: holds no block: no trainer sends it a step (only pings and complete), it has no
        #: rounds, and it saves nothing (its variables, a learning rate at most, serve nothing)
        self.idle = not self.recv_inputs and self.table is None
        #: each trainer's gradient variables among them (every round reads them)
        self._names_of_trainer = {tid: self._trainer_names(tid)
                                  for tid in range(self.trainer_num)}
        self.block_of_grad = {}
        for entry in self.attrs["grad_to_block_id"]:
            grad, idx = entry.rsplit(":", 1)
            self.block_of_grad[grad] = int(idx)
        self.param_names = list(self.attrs.get("param_varnames", []))
        self.exe = Executor()
        self.scope = scope
        self.schedule = options.schedule
        self.round = self.schedule.start_round if self.schedule else 0
        if options.checkpoint_every == "epoch" and self.schedule is None:
            raise ValueError("checkpoint_every='epoch' needs the job's epochs (train_pserver)")
        if options.checkpoint_dir is not None and options.checkpoint_every is not None:
            ckpt.mark_idle(options.checkpoint_dir, self.pserver_id, self.idle,
                           {"n_pservers": options.n_pservers, "endpoint": self.endpoint})
        if options.resume_path:
            self._restore(options.resume_path)
        if options.resume_state is not None:
            self._load(options.resume_state, "the state of the elastic restart")
        if options.initial_values is not None:
            self._load(options.initial_values, "initial_values", complete=False)
        #: (round, state arrays) before the latest sync round (elastic only)
        self._previous: tuple[int, dict[str, np.ndarray]] | None = None
        #: async: the last round each trainer's gradients were applied for
        self._pushed: dict[int, int] = {}
        gblock = self.program.global_block()
        self._shapes = {n: (tuple(gblock.var(n).shape), gblock.var(n).dtype,
                            gblock.var(n).type == VarType.SELECTED_ROWS)
                        for n in self.recv_inputs}
        self.param_bytes = sum(np.asarray(self.scope.get(n)).nbytes for n in self.param_names)
        if options.inline_bytes is not None:
            self.inline_bytes = options.inline_bytes
        self._threads_used: dict[str, set[str]] = {"send": set(), "get": set(), "prefetch": set()}
        flags, k = self.flags, self.pserver_id
        self.send_pool = concurrent.futures.ThreadPoolExecutor(
            flags.send_thread_num, thread_name_prefix=f"pserver-send-{k}")
        self.get_pool = concurrent.futures.ThreadPoolExecutor(
            flags.get_thread_num, thread_name_prefix=f"pserver-get-{k}")
        self.prefetch_pool = concurrent.futures.ThreadPoolExecutor(
            flags.prefetch_thread_num, thread_name_prefix=f"pserver-prefetch-{k}")
        self._variants: dict[int, tuple[Program, dict[int, FusedUpdate | None]]] = {}
        # async mode: one lock per optimize block (its gradient and parameter), a shard-wide
        # one for DC-ASGD (the trainer id is one scope variable)
        self._block_locks = {idx: threading.Lock() for idx in self.attrs["optimize_blocks"]}
        self._param_block = self._param_blocks()
        self._shard_lock = threading.Lock()
        self._lr_block = int(self.attrs.get("lr_decay_block_id", -1))
        #: async mode with the trainers' own step counters (:mod:`...transpiler.lr_counter`):
        #: the LR block runs when a counter arrives, not on every push
        self._counter_driven = not self.sync_mode and self._lr_block >= 0 and any(
            LR_DECAY_COUNTER in name for name in self._block_reads(self._lr_block))
        # Dask handlers wait in these threads (a barrier may block for the deadline)
        self._handler_pool = concurrent.futures.ThreadPoolExecutor(
            self.trainer_num + 2, thread_name_prefix=f"pserver-rpc-{k}")
        self.server: Any = None  # the direct data path, when started
        # sync state, under _cond
        self._cond = threading.Condition()
        self._optimizing = False  # a round's optimize runs (with _cond released)
        self._active_at: dict[int, list[int]] = {}
        self._pending: dict[int, dict[int, dict[str, Any]]] = {}
        self._round_started: dict[int, float] = {}
        self._completed: set[int] = set()
        self._done = threading.Event()
        self._closed = False
        self._failed: BaseException | None = None
        self._last_activity = time.monotonic()
        #: round -> what sends the replies waiting for its end (see :meth:`reply_later`)
        self._on_round_end: dict[int, list[Callable[[], None]]] = {}
        #: (trainer, round) -> the parts that came ahead of its push (:meth:`push_part`), and
        #: why a part was refused (the push then fails with it)
        self._parts: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self._part_errors: dict[tuple[int, int | None], str] = {}
        #: the tensor bytes that came in (gradients, ids) and went out (parameters, rows)
        self.stats = {"rounds": 0, "pushes": 0, "early_pushes": 0, "prefetches": 0,
                      "optimize_s": 0.0, "read_s": 0.0, "bytes_in": 0, "bytes_out": 0}
        self._stats_lock = threading.Lock()
        if self._counter_driven:
            # Fluid's async loop runs the LR block once before serving: the counter is then
            # the sum of the trainers' counters as initialised (or restored), not its own init
            self.exe.run_block(self.program, self.program.block(self._lr_block), self.scope)
        if self.schedule is not None:
            self._steps_max = max(self.schedule.steps_per_epoch)
            self._total_rounds: float = self.schedule.epochs * self._steps_max
        else:
            self._steps_max = 0
            self._total_rounds = math.inf

    def trainer_name(self, trainer_id: int) -> str:
        """Where errors say trainer ``trainer_id`` is: its worker under Dask, else its id."""
        names = self.options.trainer_names
        return names[trainer_id] if names else str(trainer_id)

    # -- schedule -------------------------------------------------------------------------------
    def active(self, round_index: int) -> list[int]:
        """Trainers that take part in global round ``round_index`` (sync)."""
        if self.schedule is None:  # open-ended: all but the trainers that are done
            return [r for r in range(self.trainer_num) if r not in self._completed]
        s = round_index % self._steps_max
        active = self._active_at.get(s)
        if active is None:  # asked by every push: computed once per step of the epoch
            active = self._active_at[s] = [r for r, n in
                                           enumerate(self.schedule.steps_per_epoch) if n > s]
        return active

    def _release_round(self, trainer: int, round_index: int) -> int:
        if self.schedule is None:
            return round_index
        epoch, s = divmod(round_index, self._steps_max)
        if s == self.schedule.steps_per_epoch[trainer] - 1:
            return epoch * self._steps_max + self._steps_max - 1
        return round_index

    # -- the thread-safe core: called by trainer threads on this worker, by the connection
    # -- threads of the direct data path (shard_server) and by the Dask handlers below ----------
    def push(self, trainer_id: int, round: int, grads: dict[str, Any], parts: int = 0) -> int:
        """Take one step's gradients; return the round whose end :meth:`reply` waits for.

        Sync mode: ``parts`` of them came ahead (:meth:`push_part`) and join these. When this
        push completes the step (every trainer active in it has pushed), the optimize blocks
        run here, in the caller's thread. Async mode: the gradients are applied at once. Never
        waits for other trainers: a trainer pushes to every pserver before it waits for any
        reply.
        """
        self._raise_if_failed()
        grads = self._take_in(grads)
        if not self.sync_mode:
            if parts:
                raise ValueError(f"trainer {trainer_id} sent early pushes to an async pserver "
                                 f"({self.endpoint}): they are for sync mode")
            self.stats["pushes"] += 1
            self._run_pool(self.send_pool, self._apply_async, trainer_id, grads)
            self._pushed[trainer_id] = max(self._pushed.get(trainer_id, -1), int(round))
            return round
        with self._cond:
            self._check_push(trainer_id, round)
            grads = self._join_parts(trainer_id, round, int(parts), grads)
            self.stats["pushes"] += 1
            self._pending.setdefault(round, {})[trainer_id] = grads
            self._round_started.setdefault(round, time.monotonic())
            self._advance()
            due = self._take_due()
        for send in due:
            send()
        return self._release_round(trainer_id, round)

    def push_part(self, trainer_id: int, round: int, grads: dict[str, Any]) -> None:
        """Keep gradients that came ahead of trainer ``trainer_id``'s push of step ``round``
        (sync). A refused part is not raised here (nobody waits for an answer): the push it
        came ahead of fails with the reason."""
        try:
            self._raise_if_failed()
            grads = self._take_in(grads)
            if not self.sync_mode:
                raise ValueError(f"pserver {self.endpoint} is async: early pushes are for sync "
                                 "mode")
            with self._cond:
                self._check_push(trainer_id, round)
                parts = self._parts.setdefault((trainer_id, round), [])
                repeated = sorted(n for part in parts for n in grads if n in part)
                if repeated:
                    raise ValueError(f"trainer {trainer_id} sent {repeated} of step {round} "
                                     "twice")
                parts.append(grads)
                self.stats["early_pushes"] += 1
        except Exception as exc:
            with self._cond:
                self._part_errors.setdefault((trainer_id, round), str(exc))

    def push_part_request(self, trainer_id: int, header: Mapping[str, Any],
                          arrays: dict[str, Any]) -> None:
        """:meth:`push_part` of a ``push_part`` request's flattened gradients (a malformed
        one is refused the same way)."""
        round_index = header.get("round")
        stepped = type(round_index) is int
        try:
            if not stepped:
                raise ValueError(f"its step is {round_index!r}, not an integer")
            grads = unflatten_tensors(arrays, header.get("sparse"))
        except Exception as exc:
            # without a step of its own the refusal waits for the trainer's next push
            key = (trainer_id, round_index if stepped else None)
            with self._cond:
                self._part_errors.setdefault(key, f"a malformed early push ({exc!r})")
            return
        self.push_part(trainer_id, round_index, grads)

    def _take_in(self, grads: dict[str, Any]) -> dict[str, Any]:
        """Count gradients that came in (a push or a part); the table's rows rebased."""
        self._last_activity = time.monotonic()
        self._count(_tensor_bytes(grads.values()), 0)
        if self.table is not None:
            grads = {n: self._rebase(n, g) for n, g in grads.items()}
        return grads

    def _check_push(self, trainer_id: int, round: int) -> None:
        """Whether trainer ``trainer_id`` may push step ``round`` now (holding ``_cond``)."""
        self._raise_if_failed()
        if round < self.round:
            raise ValueError(f"trainer {trainer_id} pushed step {round}, but pserver "
                             f"{self.endpoint} is already at step {self.round}")
        if trainer_id not in self.active(round):
            raise ValueError(f"trainer {trainer_id} pushed step {round}, which is past its "
                             "last step of the epoch")
        if trainer_id in self._pending.get(round, ()):
            raise ValueError(f"trainer {trainer_id} pushed step {round} twice")

    def _join_parts(self, trainer_id: int, round: int, expected: int,
                    grads: dict[str, Any]) -> dict[str, Any]:
        """``grads`` with the parts that came ahead of them (holding ``_cond``)."""
        key = (trainer_id, round)
        error = self._part_errors.pop(key, None)
        unstepped = self._part_errors.pop((trainer_id, None), None)  # a part without a step
        error = error if error is not None else unstepped
        parts = self._parts.pop(key, [])
        if error is not None:
            raise ValueError(f"pserver {self.endpoint} refused an early push of trainer "
                             f"{trainer_id}'s step {round}: {error}")
        if len(parts) != expected:
            raise ValueError(f"trainer {trainer_id}'s push of step {round} counts {expected} "
                             f"early pushes, but pserver {self.endpoint} received {len(parts)}")
        if not parts:
            return grads
        joined: dict[str, Any] = {}
        for part in parts:
            joined.update(part)
        repeated = sorted(set(joined) & set(grads))
        if repeated:
            raise ValueError(f"trainer {trainer_id} sent {repeated} of step {round} twice")
        joined.update(grads)
        return joined

    def reply(self, trainer_id: int, release: int, want: tuple[str, ...]) -> dict[str, Any]:
        """The parameters ``want`` once round ``release`` is done (sync; at once in async).

        Sync mode returns the live parameters, not copies: they cannot change before this
        trainer's next push, since the next step needs that push (the optimizers update in
        place, the trainer only reads). Async mode: copies, taken under the blocks' locks.
        """
        if self.sync_mode:
            if self.round <= release:  # (a plain int read: no lock when the round is done)
                with self._cond:
                    self._wait_until(release)
            self._raise_if_failed()
            return self._read(want, None)
        return self._read(want, trainer_id)

    def push_request(self, trainer_id: int, header: Mapping[str, Any],
                     arrays: dict[str, Any]) -> int:
        """:meth:`push` of a ``push_pull`` request's flattened gradients."""
        return self.push(trainer_id, int(header["round"]),
                         unflatten_tensors(arrays, header.get("sparse")),
                         int(header.get("parts", 0)))

    def round_done(self, release: int) -> bool:
        """Whether round ``release`` is over (or the job failed: :meth:`reply` says why)."""
        return self.round > release or self._failed is not None

    def reply_later(self, release: int, send: Callable[[], None]) -> bool:
        """Sync mode: have ``send`` (which replies to a push) called by the thread that ends
        round ``release``, and return True; False when that round is over already (reply now).

        Only for shards under :attr:`inline_bytes` of parameters: the thread that ends a round
        then sends every deferred reply in turn, which costs less than waking each connection's
        thread only while the replies are small; larger ones are copied out by their own
        threads, in parallel."""
        if not self.sync_mode or self.param_bytes >= self.inline_bytes:
            return False
        with self._cond:
            if self.round > release or self._failed is not None:
                return False
            self._on_round_end.setdefault(release, []).append(send)
            return True

    def _take_due(self) -> list[Callable[[], None]]:
        due = []
        for r in [r for r in self._on_round_end if r < self.round or self._failed is not None]:
            due.extend(self._on_round_end.pop(r))
        return due

    def pull_sync(self, trainer_id: int, want: tuple[str, ...],
                  after_round: int = 0) -> dict[str, Any]:
        """The values of ``want`` (trainer startup; async pulls without a push).

        Sync mode: waits until every round before ``after_round`` is done, so a trainer that
        resumes (or starts) at a later round than the pserver sees the same parameters as in an
        uninterrupted run.
        """
        self._raise_if_failed()
        self._last_activity = time.monotonic()
        if self.sync_mode:
            wait_for = min(int(after_round), self._total_rounds) - 1
            if wait_for >= self.round:
                with self._cond:
                    self._wait_until(wait_for)
        return self._read(want, trainer_id)

    def prefetch_sync(self, ids: Any, table: str | None = None) -> Any:
        """Rows of the distributed table for the global ``ids`` (shape [n, 1] or [n]), or,
        with ``table``, rows ``ids`` of that parameter block (a remote-prefetch table)."""
        self._raise_if_failed()
        self.stats["prefetches"] += 1
        source = self.table.name if table is None and self.table is not None else table
        value = self.scope.vars.get(source) if source is not None else None
        work = (int(np.size(ids)) * (value.nbytes // max(len(value), 1))
                if isinstance(value, np.ndarray) and value.ndim else None)
        if table is not None:
            rows = self._run_pool(self.prefetch_pool, self._block_rows, str(table), ids,
                                  work_bytes=work)
        else:
            rows = self._run_pool(self.prefetch_pool, self._lookup, ids, work_bytes=work)
        self._count(_tensor_bytes([ids]), _tensor_bytes([rows]))
        return rows

    def complete(self, trainer_id: int) -> None:
        """Trainer ``trainer_id`` has finished training (Fluid's COMPLETE)."""
        with self._cond:
            self._last_activity = time.monotonic()
            self._completed.add(int(trainer_id))
            if len(self._completed) == self.trainer_num:
                self._done.set()
            elif self.sync_mode and self.schedule is None:
                self._advance()  # the current round may have been waiting for this trainer
            due = self._take_due()
        for send in due:
            send()

    def ping(self, trainer_id: int) -> None:
        """Trainer ``trainer_id`` is alive (it sends this pserver nothing this step)."""
        self._raise_if_failed()
        self._last_activity = time.monotonic()

    def trainer_lost(self, trainer_id: int, why: str) -> None:
        """Trainer ``trainer_id`` hung up before it said it was done: the job cannot go on
        (its gradients would be missing from every later round)."""
        if (not self.options.fail_on_hangup or trainer_id in self._completed
                or self._done.is_set()):
            return
        self._fail(WorkerLostError(f"pserver {self.endpoint} lost trainer {trainer_id}: {why}",
                                   "trainer", self.trainer_name(trainer_id),
                                   self.round))

    def handle(self, trainer_id: int, header: Mapping[str, Any],
               arrays: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Answer one request of a trainer on another worker: ``(reply header, arrays)``.

        ``header["method"]`` is ``push_pull`` (``round``, ``want``, ``sparse``, ``parts``; the
        arrays are the flattened gradients), ``push_part`` (``round``, ``sparse``: answered
        with nothing), ``pull`` (``want``, ``after_round``), ``prefetch`` (the array ``ids``,
        and ``table`` for a parameter block), ``complete`` or ``ping``.
        """
        method = header["method"]  # those, or abort
        if method == "push_pull":
            release = self.push_request(trainer_id, header, arrays)
            return {}, self.reply(trainer_id, release, tuple(header["want"]))
        if method == "push_part":  # no reply goes back (shard_server sends none)
            self.push_part_request(trainer_id, header, arrays)
            return {}, None
        if method == "pull":
            return {}, self.pull_sync(trainer_id, tuple(header["want"]),
                                      int(header.get("after_round", 0)))
        if method == "prefetch":
            return {}, {"rows": self.prefetch_sync(arrays["ids"], header.get("table"))}
        if method == "complete":
            self.complete(trainer_id)
            return {}, None
        if method == "ping":
            self.ping(trainer_id)
            return {}, None
        if method == "abort":  # the trainer gives up (e.g. another pserver died): say why
            self._fail(JobAbortedError(f"trainer {trainer_id} stopped the job: "
                                       f"{header.get('reason', '')}", "trainer",
                                       self.trainer_name(trainer_id), self.round))
            return {}, None
        raise ValueError(f"pserver {self.endpoint} has no request {method!r}")

    # -- Dask handlers --------------------------------------------------------------------------
    async def request(self, trainer_id: int, header: dict, meta: dict, buf: Any) -> tuple:
        """:meth:`handle` over Dask RPC (clusters without plain TCP): ``(reply header, meta,
        buffer)``, the reply arrays packed (copied: the live parameters never travel by
        reference through Dask)."""
        arrays = unpack_arrays(meta, buf) if meta.get("names") else {}

        def run() -> tuple:
            reply, out = self.handle(trainer_id, header, arrays)
            return (reply, *pack_arrays(out or {}))

        return await self._in_thread(run)

    def endpoint_info(self) -> dict[str, Any] | None:
        """Where the direct data path listens (``{"host", "port"}``), None without one."""
        if self.server is None:
            return None
        host, port = self.server.address
        return {"host": host, "port": port}

    def info(self) -> dict:
        """Pool sizes, round and counters (tests, diagnostics)."""
        return {"endpoint": self.endpoint, "round": self.round, "idle": self.idle,
                "blocks": len(self.param_names), **self.stats,
                "send_threads": self.send_pool._max_workers,
                "get_threads": self.get_pool._max_workers,
                "prefetch_threads": self.prefetch_pool._max_workers,
                "threads_used": {k: len(v) for k, v in self._threads_used.items()},
                "inline": self.param_bytes < self.inline_bytes,
                "param_bytes": self.param_bytes,
                "transport": "dask" if self.server is None else
                "tls" if self.options.tls is not None else "tcp",
                "read_by": dict(self.server.read_by) if self.server is not None else {}}

    # -- sync rounds (under self._cond) ---------------------------------------------------------
    def _advance(self) -> None:
        """Run the current round if every active trainer has pushed, and wake the waiters.

        Called holding ``_cond`` once (not re-entered). The optimize itself runs with the lock
        released: the next round's pushes (which only store gradients) and the replies' checks
        go on meanwhile instead of queueing behind it (50 trainers on one shard spent most of a
        step waiting for this lock). One optimize at a time; its thread then takes the lock
        back, ends the round, and runs the next one if that is complete too."""
        while (self._failed is None and not self._optimizing
               and self.round < self._total_rounds):
            pending = self._pending.get(self.round, {})
            if len(pending) < len(self.active(self.round)):
                return
            round_index = self.round
            if self.options.elastic:
                self._previous = (round_index - 1, self.state_copy())
            grads = self._pending.pop(round_index)
            self._optimizing = True
            self._cond.release()
            try:
                self._run_pool(self.send_pool, self._optimize, round_index, grads)
            except Exception as exc:  # a failed optimize ends the job: every waiter learns why
                self._cond.acquire()
                self._optimizing = False
                self._fail(exc)
                raise
            self._cond.acquire()
            self._optimizing = False
            self._round_started.pop(round_index, None)
            self.round = round_index + 1
            self.stats["rounds"] += 1
            self._cond.notify_all()

    def _wait_until(self, round_index: int) -> None:
        """Wait until ``round_index`` is done (or the job failed)."""
        while self.round <= round_index:
            self._raise_if_failed()
            self._cond.wait(_POLL_S)
        self._raise_if_failed()

    def _optimize(self, round_index: int, grads: dict[int, dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        self._optimize_blocks(round_index, grads)
        self.stats["optimize_s"] += time.perf_counter() - t0

    def _optimize_blocks(self, round_index: int, grads: dict[int, dict[str, Any]]) -> None:
        vals = self.scope.vars
        n = self.trainer_num
        for tid in range(n):
            received = grads.get(tid)
            for name in self._names_of_trainer[tid]:
                if received is not None and name in received:
                    vals[name] = received[name]
                else:  # a trainer that left this epoch adds nothing
                    vals[name] = self._zeros(name)
        program, fused_blocks = self._variant(len(grads))
        for idx in self.attrs["optimize_blocks"]:
            fused = fused_blocks[idx]
            if fused is None or not fused.run(vals):
                self.exe.run_block(program, program.block(idx), self.scope)
        self._maybe_checkpoint(round_index)

    def _trainer_names(self, tid: int) -> list[str]:
        if self.trainer_num == 1:
            return self.recv_inputs
        suffix = f".trainer_{tid}"
        return [n for n in self.recv_inputs if n.endswith(suffix) or f"{suffix}." in n]

    def _zeros(self, name: str) -> Any:
        shape, dtype, sparse = self._shapes[name]
        if sparse:
            rows = self.table.rows if self.table else shape[0]
            return SelectedRows(np.zeros(0, np.int64), np.zeros((0, *shape[1:]), dtype), rows)
        return np.zeros(shape, dtype)

    def _variant(self, active: int) -> tuple[Program, dict[int, FusedUpdate | None]]:
        """The program whose averaging ``scale`` ops use ``1/active`` (module docstring), and
        the cache-blocked form of each of its optimize blocks (None where there is none)."""
        cached = self._variants.get(active)
        if cached is None:
            program = self.program if active == self.trainer_num else self._rescaled(active)
            cached = (program, {idx: plan_fused(program.block(idx))
                                for idx in self.attrs["optimize_blocks"]})
            self._variants[active] = cached
        return cached

    def _rescaled(self, active: int) -> Program:
        program = self.program.clone()
        for idx in self.attrs["optimize_blocks"]:
            ops = program.block(idx).ops
            for i, op in enumerate(ops[:-1]):
                nxt = ops[i + 1]
                if (op.type == "sum" and all(".trainer_" in x for x in op.input("X"))
                        and nxt.type == "scale" and nxt.input("X") == op.output("Out")):
                    nxt.attrs["scale"] = 1.0 / active
        return program

    # -- async ----------------------------------------------------------------------------------
    def _param_blocks(self) -> dict[str, int]:
        """Parameter block -> the optimize block that updates it (whose lock its reads take):
        an optimizer's ``Param``, or (GEO-SGD's ``sum(P, P.delta) -> P``) an output that is a
        parameter of this pserver."""
        params = set(self.param_names)
        out = {}
        for idx in self.attrs["optimize_blocks"]:
            for op in self.program.block(idx).ops:
                if "Param" in op.inputs:
                    out[op.input("Param")[0]] = idx
                for name in op.output_arg_names:
                    if name in params:
                        out.setdefault(name, idx)
        return out

    def _block_reads(self, idx: int) -> set[str]:
        """What the ops of block ``idx`` read and none of them writes."""
        ops = self.program.block(idx).ops
        written = {n for op in ops for n in op.output_arg_names}
        return {n for op in ops for n in op.input_arg_names if n not in written}

    def _apply_async(self, trainer_id: int, grads: dict[str, Any]) -> None:
        counters = {n: v for n, v in grads.items() if LR_DECAY_COUNTER in n}
        if self._lr_block >= 0 and not self._counter_driven:
            # one schedule step per push: the LR block counts the pushes itself
            with self._block_locks[self._lr_block]:
                self.exe.run_block(self.program, self.program.block(self._lr_block), self.scope)
        for name, value in grads.items():
            if name in counters:
                continue
            idx = self.block_of_grad.get(name)
            if idx is None:
                raise ValueError(f"pserver {self.endpoint} has no block for gradient "
                                 f"{name!r}; it serves {sorted(self.block_of_grad)}")
            lock = self._shard_lock if self.attrs.get("dc_asgd") else self._block_locks[idx]
            with lock:
                self.scope.vars[name] = value
                if self.attrs.get("dc_asgd"):
                    self.scope.vars[TRAINER_ID_VAR] = np.array([trainer_id], np.int64)
                self.exe.run_block(self.program, self.program.block(idx), self.scope)
        if counters:
            self._count_steps(counters)

    def _count_steps(self, counters: dict[str, Any]) -> None:
        """Add the step counters a trainer sent to its counters here, then run the LR block
        (Fluid's ``RequestNotifyHandler``). After the gradients of the same push: the trainer
        sends its counter after its gradients."""
        if not self._counter_driven:
            raise ValueError(f"pserver {self.endpoint} got the step counters "
                             f"{sorted(counters)}, but its program has no learning-rate block "
                             "that sums the trainers' counters")
        with self._block_locks[self._lr_block]:
            for name, value in counters.items():
                if name not in self.scope:
                    raise ValueError(f"pserver {self.endpoint} has no step counter {name!r}")
                self.scope.vars[name] = self.scope.get(name) + np.asarray(value)
            self.exe.run_block(self.program, self.program.block(self._lr_block), self.scope)

    # -- reads ----------------------------------------------------------------------------------
    def _read(self, want: tuple[str, ...], trainer_id: int | None) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            copied = 0 if self.sync_mode else sum(
                int(getattr(self.scope.vars.get(n), "nbytes", 0)) for n in want)
            out = self._run_pool(self.get_pool, self._read_arrays, want, trainer_id,
                                 work_bytes=copied)
        finally:
            self.stats["read_s"] += time.perf_counter() - t0
        self._count(0, _tensor_bytes(out.values()))
        return out

    def _count(self, bytes_in: int, bytes_out: int) -> None:
        with self._stats_lock:  # requests run in several threads at once
            self.stats["bytes_in"] += bytes_in
            self.stats["bytes_out"] += bytes_out

    def _read_arrays(self, want: tuple[str, ...], trainer_id: int | None) -> dict[str, Any]:
        if self.sync_mode:
            return {name: self.scope.get(name) for name in want}
        arrays = {}
        dc = bool(self.attrs.get("dc_asgd")) and trainer_id is not None
        for name in want:
            lock = self._shard_lock if dc else self._block_locks.get(self._param_block.get(name))
            if lock is None:
                arrays[name] = np.array(self.scope.get(name), copy=True)
                continue
            with lock:
                arrays[name] = np.array(self.scope.get(name), copy=True)
                bak = f"{name}.trainer_{trainer_id}_bak"
                if dc and bak in self.scope:
                    self.scope.vars[bak] = arrays[name].copy()
        return arrays

    def _lookup(self, ids: Any) -> Any:
        table = self.table
        if table is None:
            raise ValueError(f"pserver {self.endpoint} holds no distributed lookup table")
        flat = np.asarray(ids, dtype=np.int64).reshape(-1)
        if flat.size and (flat % table.n != table.index).any():
            raise ValueError(f"prefetch sent ids of another shard to pserver {table.index}")
        return np.take(self.scope.get(table.name), flat // table.n, axis=0)

    def _block_rows(self, name: str, rows: Any) -> Any:
        if name not in self._param_block:
            raise ValueError(f"prefetch of {name!r}: pserver {self.endpoint} optimizes no such "
                             f"parameter block (it has {sorted(self._param_block)})")
        flat = np.asarray(rows, dtype=np.int64).reshape(-1)
        lock = None if self.sync_mode else self._block_locks.get(self._param_block[name])
        if lock is None:
            value = self.scope.get(name)
            return self._take_rows(name, value, flat)
        with lock:  # async: not halfway through an update of the block
            return self._take_rows(name, self.scope.get(name), flat)

    @staticmethod
    def _take_rows(name: str, value: Any, flat: Any) -> Any:
        height = int(value.shape[0])
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= height):
            raise ValueError(f"prefetch of {name!r}: rows must lie in [0, {height}), got "
                             f"{int(flat.min())}..{int(flat.max())}")
        return np.take(value, flat, axis=0)

    def _rebase(self, name: str, value: Any) -> Any:
        table = self.table
        if not isinstance(value, SelectedRows) or not name.startswith(table.grad + "."):
            return value
        return SelectedRows(np.asarray(value.rows, np.int64) // table.n, value.value, table.rows)

    # -- checkpoints ----------------------------------------------------------------------------
    def state_names(self) -> list[str]:
        """Every persistable variable worth saving: all but gradients and scratch."""
        if self.idle:
            return []
        grads = set(self.recv_inputs) | set(self.block_of_grad)
        return [n for n, v in self.program.global_block().vars.items()
                if v.persistable and n not in grads and n != TRAINER_ID_VAR
                and v.type != VarType.RAW and n in self.scope]

    def _maybe_checkpoint(self, round_index: int) -> None:
        every, root = self.options.checkpoint_every, self.options.checkpoint_dir
        if root is None or every is None:
            return
        # "epoch" comes only with a schedule (checked at construction)
        if not checkpoint_due(every, round_index, self._steps_max):
            return
        epoch, step = divmod(round_index, self._steps_max) if self.schedule else (0, round_index)
        meta = {"round": round_index, "epoch": epoch, "step": step,
                "pserver_id": self.pserver_id, "n_pservers": self.options.n_pservers,
                "endpoint": self.endpoint, "trainer_num": self.trainer_num,
                "steps_per_epoch": list(self.schedule.steps_per_epoch) if self.schedule else None,
                "sync_mode": self.sync_mode}
        arrays = {n: self.scope.get(n) for n in self.state_names()}
        ckpt.write_shard(root, meta, arrays)

    def _restore(self, path: str) -> None:
        info = ckpt.find_checkpoint(path)
        self._load(ckpt.read_shard(info, self.pserver_id), f"checkpoint {str(info.path)!r}")

    def _load(self, saved: Mapping[str, np.ndarray], source: str, *,
              complete: bool = True) -> None:
        missing = sorted(set(self.state_names()) - set(saved))
        if missing and complete:
            raise ValueError(f"{source} does not match pserver {self.pserver_id}: it lacks "
                             f"{missing[:5]}; resume with the same program, pservers and "
                             "transpiler config")
        for name, value in saved.items():
            current = self.scope.vars.get(name)
            if current is not None and np.shape(current) != np.shape(value):
                raise ValueError(f"variable {name!r} of {source} has shape "
                                 f"{list(np.shape(value))} but pserver {self.pserver_id} "
                                 f"expects {list(np.shape(current))}")
            self.scope.vars[name] = np.array(value, copy=True)

    def state_copy(self) -> dict[str, np.ndarray]:
        """A copy of every variable :meth:`state_names` lists: the parameter blocks and the
        optimizer state as they are now."""
        return {n: np.array(self.scope.get(n), copy=True) for n in self.state_names()}

    def elastic_state(self) -> dict[str, Any]:
        """What an elastic restart needs of this pserver: ``{"pserver_id", "sync", "round",
        "arrays", "previous", "pushed", "idle"}`` — the state after sync round ``round`` (the
        last one it completed) and, in sync mode with ``elastic``, ``previous = (round - 1,
        arrays)``: a lost trainer may have pushed its last gradients to some pservers only, so
        the pservers can be one round apart, and the restart takes the older round. Async:
        ``pushed`` maps each trainer to the last round of its that this pserver applied."""
        with self._cond:
            while self._optimizing:  # the state between two rounds, never half updated
                self._cond.wait(_POLL_S)
            return {"pserver_id": self.pserver_id, "sync": self.sync_mode,
                    "round": self.round - 1, "arrays": self.state_copy(),
                    "previous": self._previous, "pushed": dict(self._pushed),
                    "idle": self.idle}

    # -- plumbing -------------------------------------------------------------------------------
    def _run_pool(self, pool: concurrent.futures.Executor, fn: Any, *args: Any,
                  work_bytes: int | None = None) -> Any:
        """``fn(*args)`` in ``pool``, or here when ``work_bytes`` (default: the shard's
        parameter bytes) is under :attr:`inline_bytes`."""
        if (self.param_bytes if work_bytes is None else work_bytes) < self.inline_bytes:
            return fn(*args)
        return pool.submit(self._in_pool, pool, fn, args).result()

    def _in_pool(self, pool: concurrent.futures.Executor, fn: Any, args: tuple) -> Any:
        kind = ("send" if pool is self.send_pool else "get" if pool is self.get_pool
                else "prefetch")
        self._threads_used[kind].add(threading.current_thread().name)
        return fn(*args)

    async def _in_thread(self, fn: Any) -> Any:
        # the core blocks (barriers): never on the event loop
        return await self.options.loop.run_in_executor(self._handler_pool, fn)

    def start_server(self) -> None:
        """Open the direct data path (:mod:`.shard_server`) where the options say: the
        endpoint itself by default."""
        host, port = self.options.bind or split_endpoint(self.endpoint)
        self.server = ShardServer(self, host, port)

    def _raise_if_failed(self) -> None:
        if self._failed is not None:
            raise self._failed

    def _fail(self, exc: BaseException) -> None:
        """Record the first failure and wake every waiter with it (any thread)."""
        with self._cond:
            if self._failed is None:
                self._failed = exc
            self._cond.notify_all()
            due = self._take_due()
        self._done.set()
        if due:  # the caller may hold the lock: the error replies go out from a thread
            threading.Thread(target=lambda: [send() for send in due], daemon=True,
                             name=f"pserver-{self.pserver_id}-fail-replies").start()

    def abort(self, reason: str) -> None:
        self._fail(JobAbortedError(f"job aborted: {reason}", "pserver", self.endpoint,
                                   self.round))

    def close(self) -> None:
        """Stop serving: wake every waiter (with an abort if training had not ended), close the
        socket and the pools. Safe to call twice (the kernel and the Dask detach both do)."""
        if not self._done.is_set():  # detached while training: wake everyone, then stop
            self.abort("the pserver service was detached before training ended")
        if self._closed:
            return
        self._closed = True
        if self.server is not None:
            self.server.close()
        for pool in (self.send_pool, self.get_pool, self.prefetch_pool, self._handler_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    def _check_deadline(self) -> BaseException | None:
        with self._cond:
            return self._missed_deadline()

    def _missed_deadline(self) -> BaseException | None:
        deadline = self.flags.deadline_s
        now = time.monotonic()
        if self.sync_mode and not self._optimizing:  # an optimizing round has every push
            for round_index, started in list(self._round_started.items()):
                if now - started > deadline and round_index == self.round:
                    pushed = set(self._pending.get(round_index, {}))
                    missing = [r for r in self.active(round_index) if r not in pushed]
                    if missing:
                        return DeadlineExceededError(
                            f"pserver {self.endpoint} waited for the gradients of trainer "
                            f"{missing[0]} (of {missing})", "trainer",
                            self.trainer_name(missing[0]), round_index,
                            deadline_ms=self.flags.deadline_ms)
        if now - self._last_activity > deadline:
            missing = [r for r in range(self.trainer_num) if r not in self._completed]
            return DeadlineExceededError(
                f"pserver {self.endpoint} heard nothing from trainer {missing[0]} (of "
                f"{missing})", "trainer", self.trainer_name(missing[0]), self.round,
                deadline_ms=self.flags.deadline_ms)
        return None

    def serve(self) -> None:
        """Block until every trainer completed (the parameters are then in the scope).

        Raises
        ------
        DeadlineExceededError
            A trainer stayed silent (or missed a step's barrier) for ``FLAGS_rpc_deadline``.
        DistributedTrainingError
            The job was aborted, a trainer hung up, or an optimize step failed.
        """
        while not self._done.wait(0.25):
            exc = self._check_deadline()
            if exc is not None:
                self._fail(exc)
                raise exc
        if self._failed is not None:
            raise self._failed

    def run(self) -> None:
        """What ``listen_and_serv`` does: open the data path, serve until every trainer is
        done, let the last replies go out, close."""
        try:
            if self.options.serve_socket:
                self.start_server()
            if self.options.on_start is not None:
                self.options.on_start(self)
            logger.info("pserver %s serving %d trainer(s), %s mode%s", self.endpoint,
                        self.trainer_num, _MODE_NAMES.get(int(self.attrs.get(
                            "distributed_mode", 0 if self.sync_mode else 1)), "async"),
                        f", listening on {self.server.address}" if self.server else "")
            self.serve()
            if self.server is not None:
                # the trainers hang up after their "complete" reply: wait for that (bounded)
                self.server.wait_hung_up(self.flags.deadline_s)
        except BaseException:
            if self.server is not None:  # let the trainers hear why: each hangs up once told
                self.server.wait_hung_up(DRAIN_S)
            raise
        finally:
            self.close()
