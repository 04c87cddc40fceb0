"""The parameter-server shard: one pserver program served from a Dask worker (worker side).

A :class:`PServerShard` is what Fluid's ``listen_and_serv`` op is: a scope holding the pserver's
variables, initialised by the pserver startup program (or a checkpoint), and the program's
optimize blocks, run by the :class:`~dask_fluid.executor.Executor` when gradients arrive. It is
attached to a worker as a job service (``rpc.attach_service``) by :func:`run_pserver`, a
long-running task that returns the final parameter blocks when every trainer has completed.

Requests (all from trainers, worker to worker):

``push_pull`` (one request per pserver per step: Fluid's send + send_barrier + recv +
fetch_barrier fused)
    *sync*: the gradients of step ``(epoch, step)`` are stored under the trainer's names; when
    every trainer active in that step has pushed, the optimize blocks run (the program's own
    ``sum`` and ``scale`` ops average the gradients), and every waiting trainer gets the updated
    parameter blocks it asked for in the reply. *async*: each gradient runs its block from
    ``grad_to_block_id`` at once, unscaled; the reply carries the current parameters, and with
    DC-ASGD the reply to trainer ``i`` copies each parameter into ``P.trainer_i_bak``.
``prefetch``
    Rows of the distributed lookup table for global ids (``id % P == k`` live here, at local row
    ``id // P``).
``complete``
    The trainer is done (Fluid's COMPLETE): when all trainers are, :func:`run_pserver` returns.

Uneven data (sync). Every trainer's number of steps per epoch is known when the job starts (its
rows and the batch size), so the shard knows which trainers take part in step ``s`` of an epoch:
those with more than ``s`` steps. A trainer that has no batch left leaves the barrier for the
rest of the epoch, and the reply to its last push of the epoch waits until the epoch's last step
is done, so that every trainer starts the next epoch from the same parameters. In a step with
``k < N`` active trainers the missing per-trainer gradients are zero and the ``scale`` op
multiplies by ``1/k`` instead of ``1/N``: the update is the average gradient of the trainers that
took the step (Fluid keeps ``1/N``, which shrinks the last steps of an epoch).

Threads. Handlers are coroutines on the worker's event loop; numpy work goes to three pools:
``FLAGS_rpc_send_thread_num`` threads apply gradients (sync optimize steps, async blocks),
``FLAGS_rpc_get_thread_num`` threads copy parameters into reply buffers, and
``FLAGS_rpc_prefetch_thread_num`` threads serve table lookups.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..executor import Executor, Scope
from ..flags import RPCFlags
from ..framework import Program, VarType
from ..ops.selected_rows import SelectedRows
from ..transpiler.plan import TRAINER_ID_VAR
from . import checkpoint as ckpt
from .errors import DeadlineExceededError, DistributedTrainingError, JobAbortedError
from .rpc import Service, attach_service, pack_arrays, unpack_arrays

__all__ = ["PServerShard", "ShardSpec", "TableShard", "decode_tensors", "encode_tensors",
           "run_pserver", "service_name"]

logger = logging.getLogger(__name__)

_ROWS, _VALUE = "@@rows", "@@value"


def service_name(endpoint: str) -> str:
    """The job-service name of the pserver at ``endpoint``."""
    return f"pserver/{endpoint}"


def encode_tensors(tensors: Mapping[str, Any]) -> tuple[dict, Any, dict[str, int]]:
    """Pack dense arrays and SelectedRows into one buffer: ``(meta, buffer, sparse heights)``."""
    flat: dict[str, Any] = {}
    sparse: dict[str, int] = {}
    for name, value in tensors.items():
        if isinstance(value, SelectedRows):
            flat[name + _ROWS] = np.asarray(value.rows, dtype=np.int64)
            flat[name + _VALUE] = value.value
            sparse[name] = value.height
        else:
            flat[name] = value
    meta, buf = pack_arrays(flat)
    return meta, buf, sparse


def decode_tensors(meta: Mapping, buf: Any, sparse: Mapping[str, int] | None) -> dict[str, Any]:
    """Inverse of :func:`encode_tensors` (dense arrays are views into ``buf``)."""
    flat = unpack_arrays(meta, buf) if meta and meta.get("names") else {}
    out: dict[str, Any] = {}
    for name, height in (sparse or {}).items():
        out[name] = SelectedRows(flat.pop(name + _ROWS), flat.pop(name + _VALUE), height)
    out.update(flat)
    return out


@dataclass(frozen=True)
class TableShard:
    """This pserver's part of the distributed lookup table: global ids ``id % n == index``."""

    name: str
    grad: str
    n: int
    index: int
    rows: int


@dataclass
class ShardSpec:
    """Everything a pserver needs, built on the client and shipped with the task."""

    job: str
    endpoint: str
    pserver_id: int
    n_pservers: int
    program_json: str
    startup_json: str
    trainer_num: int
    trainer_workers: list[str]
    steps_per_epoch: list[int]
    epochs: int
    sync_mode: bool
    flags: RPCFlags = field(default_factory=RPCFlags)
    start_round: int = 0
    table: TableShard | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int | str | None = None
    resume_path: str | None = None
    #: numpy work on shards with fewer parameter bytes runs on the event loop (see
    #: :attr:`PServerShard.inline_bytes`); None keeps the class default
    inline_bytes: int | None = None


class PServerShard(Service):
    """One pserver's state and request handlers (see the module docstring).

    Parameters
    ----------
    spec : ShardSpec
    loop : asyncio.AbstractEventLoop
        The worker's event loop (waiters live there).
    """

    #: numpy work on less than this many bytes of parameters runs on the event loop: a thread
    #: hop costs more than the work (tests set it to 0 to exercise the pools)
    inline_bytes: int = 1 << 20

    def __init__(self, spec: ShardSpec, loop: asyncio.AbstractEventLoop) -> None:
        self.spec = spec
        self.loop = loop
        self.program = Program.from_json(spec.program_json)
        serv = self.program.global_block().ops[-1]
        if serv.type != "listen_and_serv":
            raise ValueError(f"the pserver program of {spec.endpoint} does not end with "
                             f"listen_and_serv (found {serv.type!r})")
        self.attrs = dict(serv.attrs)
        self.recv_inputs = list(serv.input("X"))
        self.block_of_grad = {}
        for entry in self.attrs["grad_to_block_id"]:
            grad, idx = entry.rsplit(":", 1)
            self.block_of_grad[grad] = int(idx)
        self.param_names = list(self.attrs.get("param_varnames", []))
        self.exe = Executor()
        self.scope = Scope()
        self.exe.run(Program.from_json(spec.startup_json), scope=self.scope)
        self.round = spec.start_round
        if spec.resume_path:
            self._restore(spec.resume_path)
        gblock = self.program.global_block()
        self._shapes = {n: (tuple(gblock.var(n).shape), gblock.var(n).dtype,
                            gblock.var(n).type == VarType.SELECTED_ROWS)
                        for n in self.recv_inputs}
        self.param_bytes = sum(np.asarray(self.scope.get(n)).nbytes for n in self.param_names)
        if spec.inline_bytes is not None:
            self.inline_bytes = spec.inline_bytes
        self._threads_used: dict[str, set[str]] = {"send": set(), "get": set(), "prefetch": set()}
        flags = spec.flags
        self.send_pool = concurrent.futures.ThreadPoolExecutor(
            flags.send_thread_num, thread_name_prefix=f"pserver-send-{spec.pserver_id}")
        self.get_pool = concurrent.futures.ThreadPoolExecutor(
            flags.get_thread_num, thread_name_prefix=f"pserver-get-{spec.pserver_id}")
        self.prefetch_pool = concurrent.futures.ThreadPoolExecutor(
            flags.prefetch_thread_num, thread_name_prefix=f"pserver-prefetch-{spec.pserver_id}")
        self._variants: dict[int, Program] = {spec.trainer_num: self.program}
        # async mode: one lock per optimize block (its gradient and parameter), a shard-wide
        # one for DC-ASGD (the trainer id is one scope variable)
        self._block_locks = {idx: threading.Lock() for idx in self.attrs["optimize_blocks"]}
        self._param_block = self._param_blocks()
        self._shard_lock = threading.Lock()
        # sync state, touched only on the event loop
        self._pending: dict[int, dict[int, dict[str, Any]]] = {}
        self._waiters: dict[int, list[tuple[int, tuple[str, ...], asyncio.Future]]] = {}
        self._round_started: dict[int, float] = {}
        self._busy = False
        self._completed: set[int] = set()
        self._done = threading.Event()
        self._failed: BaseException | None = None
        self._last_activity = time.monotonic()
        self.stats = {"rounds": 0, "pushes": 0, "prefetches": 0, "optimize_s": 0.0,
                      "read_s": 0.0}
        m = max(spec.steps_per_epoch)
        self._steps_max = m
        self._total_rounds = spec.epochs * m

    # -- schedule -------------------------------------------------------------------------------
    def active(self, round_index: int) -> list[int]:
        """Trainers that take part in global round ``round_index`` (sync)."""
        s = round_index % self._steps_max
        return [r for r, n in enumerate(self.spec.steps_per_epoch) if n > s]

    def _release_round(self, trainer: int, round_index: int) -> int:
        epoch, s = divmod(round_index, self._steps_max)
        if s == self.spec.steps_per_epoch[trainer] - 1:
            return epoch * self._steps_max + self._steps_max - 1
        return round_index

    # -- requests -------------------------------------------------------------------------------
    async def push_pull(self, trainer_id: int, round: int, meta: dict, buf: Any,
                        sparse: dict | None = None, want: list[str] | tuple = ()) -> tuple:
        """Push one step's gradients and receive the parameters ``want`` after the update.

        Returns ``(meta, buffer)`` of the packed parameter blocks.
        """
        self._raise_if_failed(round)
        self._last_activity = time.monotonic()
        self.stats["pushes"] += 1
        grads = decode_tensors(meta, buf, sparse)
        if self.spec.table is not None:
            grads = {n: self._rebase(n, g) for n, g in grads.items()}
        want = tuple(want)
        if not self.spec.sync_mode:
            await self._run(self.send_pool, self._apply_async, trainer_id, grads)
            return await self._run(self.get_pool, self._read, want, trainer_id)
        if round < self.round:
            raise ValueError(f"trainer {trainer_id} pushed step {round}, but pserver "
                             f"{self.spec.endpoint} is already at step {self.round}")
        if trainer_id not in self.active(round):
            raise ValueError(f"trainer {trainer_id} pushed step {round}, which is past its last "
                             "step of the epoch")
        pending = self._pending.setdefault(round, {})
        if trainer_id in pending:
            raise ValueError(f"trainer {trainer_id} pushed step {round} twice")
        pending[trainer_id] = grads
        self._round_started.setdefault(round, time.monotonic())
        fut = self.loop.create_future()
        self._waiters.setdefault(self._release_round(trainer_id, round), []).append(
            (trainer_id, want, fut))
        self._kick()
        return await fut

    async def pull(self, trainer_id: int, want: list[str] | tuple,
                   after_round: int = 0) -> tuple:
        """The values of ``want`` (trainer startup; async pulls without a push).

        Sync mode: the reply waits until every round before ``after_round`` is done, so a
        trainer that resumes (or starts) at a later round than the pserver sees the same
        parameters as in an uninterrupted run.
        """
        self._raise_if_failed(None)
        self._last_activity = time.monotonic()
        want = tuple(want)
        wait_for = min(int(after_round), self._total_rounds) - 1
        if self.spec.sync_mode and wait_for >= self.round:
            fut = self.loop.create_future()
            self._waiters.setdefault(wait_for, []).append((trainer_id, want, fut))
            return await fut
        return await self._run(self.get_pool, self._read, want, trainer_id)

    async def prefetch(self, ids: Any) -> Any:
        """Rows of the table for the global ``ids`` (shape [n, 1] or [n])."""
        self._raise_if_failed(None)
        self.stats["prefetches"] += 1
        return await self._run(self.prefetch_pool, self._lookup, ids)

    def complete(self, trainer_id: int) -> None:
        """Trainer ``trainer_id`` has finished training (Fluid's COMPLETE)."""
        self._last_activity = time.monotonic()
        self._completed.add(int(trainer_id))
        if len(self._completed) == self.spec.trainer_num:
            self._done.set()

    def info(self) -> dict:
        """Pool sizes, round and counters (tests, diagnostics)."""
        return {"endpoint": self.spec.endpoint, "round": self.round, **self.stats,
                "send_threads": self.send_pool._max_workers,
                "get_threads": self.get_pool._max_workers,
                "prefetch_threads": self.prefetch_pool._max_workers,
                "threads_used": {k: len(v) for k, v in self._threads_used.items()},
                "inline": self.param_bytes < self.inline_bytes,
                "param_bytes": self.param_bytes}

    # -- sync rounds ----------------------------------------------------------------------------
    def _kick(self) -> None:
        if self._busy or self._failed is not None or self.round >= self._total_rounds:
            return
        pending = self._pending.get(self.round, {})
        if len(pending) == len(self.active(self.round)):
            self._busy = True
            asyncio.ensure_future(self._finish_round(self.round, self._pending.pop(self.round)))

    async def _finish_round(self, round_index: int, grads: dict[int, dict[str, Any]]) -> None:
        try:
            await self._run(self.send_pool, self._optimize, round_index, grads)
            waiters = self._waiters.pop(round_index, [])
            wants = {want for _, want, _ in waiters}
            replies = {want: await self._run(self.get_pool, self._read, want, None)
                       for want in wants}
        except Exception as exc:  # a failed optimize ends the job: every waiter learns why
            self._fail(exc)
            return
        self._round_started.pop(round_index, None)
        self.round = round_index + 1
        self.stats["rounds"] += 1
        self._busy = False
        for _, want, fut in waiters:
            if not fut.done():
                fut.set_result(replies[want])
        self._kick()

    def _optimize(self, round_index: int, grads: dict[int, dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        self._optimize_blocks(round_index, grads)
        self.stats["optimize_s"] += time.perf_counter() - t0

    def _optimize_blocks(self, round_index: int, grads: dict[int, dict[str, Any]]) -> None:
        vals = self.scope.vars
        n = self.spec.trainer_num
        for tid in range(n):
            received = grads.get(tid)
            for name in self._trainer_names(tid):
                if received is not None and name in received:
                    vals[name] = received[name]
                else:  # a trainer that left this epoch adds nothing
                    vals[name] = self._zeros(name)
        program = self._variant(len(grads))
        for idx in self.attrs["optimize_blocks"]:
            self.exe.run_block(program, program.block(idx), self.scope)
        self._maybe_checkpoint(round_index)

    def _trainer_names(self, tid: int) -> list[str]:
        if self.spec.trainer_num == 1:
            return self.recv_inputs
        suffix = f".trainer_{tid}"
        return [n for n in self.recv_inputs if n.endswith(suffix) or f"{suffix}." in n]

    def _zeros(self, name: str) -> Any:
        shape, dtype, sparse = self._shapes[name]
        if sparse:
            rows = self.spec.table.rows if self.spec.table else shape[0]
            return SelectedRows(np.zeros(0, np.int64), np.zeros((0, *shape[1:]), dtype), rows)
        return np.zeros(shape, dtype)

    def _variant(self, active: int) -> Program:
        """The program whose averaging ``scale`` ops use ``1/active`` (module docstring)."""
        program = self._variants.get(active)
        if program is None:
            program = self.program.clone()
            for idx in self.attrs["optimize_blocks"]:
                ops = program.block(idx).ops
                for i, op in enumerate(ops[:-1]):
                    nxt = ops[i + 1]
                    if (op.type == "sum" and all(".trainer_" in x for x in op.input("X"))
                            and nxt.type == "scale" and nxt.input("X") == op.output("Out")):
                        nxt.attrs["scale"] = 1.0 / active
            self._variants[active] = program
        return program

    # -- async ----------------------------------------------------------------------------------
    def _param_blocks(self) -> dict[str, int]:
        out = {}
        for idx in self.attrs["optimize_blocks"]:
            for op in self.program.block(idx).ops:
                if "Param" in op.inputs:
                    out[op.input("Param")[0]] = idx
        return out

    def _apply_async(self, trainer_id: int, grads: dict[str, Any]) -> None:
        lr_block = int(self.attrs.get("lr_decay_block_id", -1))
        if lr_block >= 0:
            with self._block_locks[lr_block]:
                self.exe.run_block(self.program, self.program.block(lr_block), self.scope)
        for name, value in grads.items():
            idx = self.block_of_grad.get(name)
            if idx is None:
                raise ValueError(f"pserver {self.spec.endpoint} has no block for gradient "
                                 f"{name!r}; it serves {sorted(self.block_of_grad)}")
            lock = self._shard_lock if self.attrs.get("dc_asgd") else self._block_locks[idx]
            with lock:
                self.scope.vars[name] = value
                if self.attrs.get("dc_asgd"):
                    self.scope.vars[TRAINER_ID_VAR] = np.array([trainer_id], np.int64)
                self.exe.run_block(self.program, self.program.block(idx), self.scope)

    # -- reads ----------------------------------------------------------------------------------
    def _read(self, want: tuple[str, ...], trainer_id: int | None) -> tuple:
        t0 = time.perf_counter()
        try:
            return self._read_arrays(want, trainer_id)
        finally:
            self.stats["read_s"] += time.perf_counter() - t0

    def _read_arrays(self, want: tuple[str, ...], trainer_id: int | None) -> tuple:
        arrays = {}
        dc = bool(self.attrs.get("dc_asgd")) and trainer_id is not None
        for name in want:
            idx = self._param_block.get(name)
            lock = (self._shard_lock if dc else self._block_locks.get(idx)) if (
                not self.spec.sync_mode) else None
            if lock is None:
                arrays[name] = self.scope.get(name)
                continue
            with lock:
                value = self.scope.get(name)
                arrays[name] = np.array(value, copy=True)
                bak = f"{name}.trainer_{trainer_id}_bak"
                if dc and bak in self.scope:
                    self.scope.vars[bak] = arrays[name].copy()
        meta, buf = pack_arrays(arrays)  # copies: the reply never aliases live parameters
        return meta, buf

    def _lookup(self, ids: Any) -> Any:
        table = self.spec.table
        if table is None:
            raise ValueError(f"pserver {self.spec.endpoint} holds no distributed lookup table")
        flat = np.asarray(ids, dtype=np.int64).reshape(-1)
        if flat.size and (flat % table.n != table.index).any():
            raise ValueError(f"prefetch sent ids of another shard to pserver {table.index}")
        return np.take(self.scope.get(table.name), flat // table.n, axis=0)

    def _rebase(self, name: str, value: Any) -> Any:
        table = self.spec.table
        if not isinstance(value, SelectedRows) or not name.startswith(table.grad + "."):
            return value
        return SelectedRows(np.asarray(value.rows, np.int64) // table.n, value.value, table.rows)

    # -- checkpoints ----------------------------------------------------------------------------
    def state_names(self) -> list[str]:
        """Every persistable variable worth saving: all but gradients and scratch."""
        grads = set(self.recv_inputs) | set(self.block_of_grad)
        return [n for n, v in self.program.global_block().vars.items()
                if v.persistable and n not in grads and n != TRAINER_ID_VAR
                and v.type != VarType.RAW and n in self.scope]

    def _maybe_checkpoint(self, round_index: int) -> None:
        every, root = self.spec.checkpoint_every, self.spec.checkpoint_dir
        if root is None or every is None:
            return
        last_of_epoch = round_index % self._steps_max == self._steps_max - 1
        if every == "epoch":
            due = last_of_epoch
        else:
            due = (round_index + 1) % int(every) == 0
        if not due:
            return
        epoch, step = divmod(round_index, self._steps_max)
        meta = {"round": round_index, "epoch": epoch, "step": step,
                "pserver_id": self.spec.pserver_id, "n_pservers": self.spec.n_pservers,
                "endpoint": self.spec.endpoint, "trainer_num": self.spec.trainer_num,
                "steps_per_epoch": list(self.spec.steps_per_epoch),
                "sync_mode": self.spec.sync_mode}
        arrays = {n: self.scope.get(n) for n in self.state_names()}
        ckpt.write_shard(root, meta, arrays)

    def _restore(self, path: str) -> None:
        info = ckpt.find_checkpoint(path)
        saved = ckpt.read_shard(info, self.spec.pserver_id)
        missing = sorted(set(self.state_names()) - set(saved))
        if missing:
            raise ValueError(f"checkpoint {str(info.path)!r} does not match pserver "
                             f"{self.spec.pserver_id}: it lacks {missing[:5]}; resume with the "
                             "same program, pservers and transpiler config")
        for name, value in saved.items():
            current = self.scope.vars.get(name)
            if current is not None and np.shape(current) != value.shape:
                raise ValueError(f"checkpoint variable {name!r} has shape {list(value.shape)} "
                                 f"but pserver {self.spec.pserver_id} expects "
                                 f"{list(np.shape(current))}")
            self.scope.vars[name] = np.array(value, copy=True)

    # -- plumbing -------------------------------------------------------------------------------
    async def _run(self, pool: concurrent.futures.Executor, fn: Any, *args: Any) -> Any:
        if self.param_bytes < self.inline_bytes:
            return fn(*args)
        return await self.loop.run_in_executor(pool, self._in_pool, pool, fn, args)

    def _in_pool(self, pool: concurrent.futures.Executor, fn: Any, args: tuple) -> Any:
        kind = ("send" if pool is self.send_pool else "get" if pool is self.get_pool
                else "prefetch")
        self._threads_used[kind].add(threading.current_thread().name)
        return fn(*args)

    def _raise_if_failed(self, round_index: int | None) -> None:
        if self._failed is not None:
            raise self._failed

    def _fail(self, exc: BaseException) -> None:
        """Record the first failure and wake every waiter with it (event loop only)."""
        if self._failed is None:
            self._failed = exc
        for waiters in self._waiters.values():
            for _, _, fut in waiters:
                if not fut.done():
                    fut.set_exception(self._failed)
        self._waiters.clear()
        self._done.set()

    def abort(self, reason: str) -> None:
        exc = JobAbortedError(f"job aborted: {reason}", "pserver", self.spec.endpoint,
                              self.round)
        self.loop.call_soon_threadsafe(self._fail, exc)
        self._done.set()

    def close(self) -> None:
        if not self._done.is_set():  # detached while training: wake everyone, then stop
            self.abort("the pserver service was detached before training ended")
        for pool in (self.send_pool, self.get_pool, self.prefetch_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    def final_params(self) -> dict[str, np.ndarray]:
        return {n: np.array(self.scope.get(n), copy=True) for n in self.param_names
                if n in self.scope}

    def _check_deadline(self) -> BaseException | None:
        deadline = self.spec.flags.deadline_s
        now = time.monotonic()
        if self.spec.sync_mode:
            for round_index, started in list(self._round_started.items()):
                if now - started > deadline and round_index == self.round and not self._busy:
                    pushed = set(self._pending.get(round_index, {}))
                    missing = [r for r in self.active(round_index) if r not in pushed]
                    if missing:
                        return DeadlineExceededError(
                            f"pserver {self.spec.endpoint} waited for the gradients of trainer "
                            f"{missing[0]} (of {missing})", "trainer",
                            self.spec.trainer_workers[missing[0]], round_index,
                            deadline_ms=self.spec.flags.deadline_ms)
        if now - self._last_activity > deadline:
            missing = [r for r in range(self.spec.trainer_num) if r not in self._completed]
            return DeadlineExceededError(
                f"pserver {self.spec.endpoint} heard nothing from trainer {missing[0]} (of "
                f"{missing})", "trainer", self.spec.trainer_workers[missing[0]], self.round,
                deadline_ms=self.spec.flags.deadline_ms)
        return None

    def serve(self) -> dict[str, np.ndarray]:
        """Block until every trainer completed; return the final parameter blocks.

        Raises
        ------
        DeadlineExceededError
            A trainer stayed silent (or missed a step's barrier) for ``FLAGS_rpc_deadline``.
        DistributedTrainingError
            The job was aborted, or an optimize step failed.
        """
        while not self._done.wait(0.25):
            exc = self._check_deadline()
            if exc is not None:
                self.loop.call_soon_threadsafe(self._fail, exc)
                raise exc
        if self._failed is not None:
            raise self._failed
        return self.final_params()


def run_pserver(spec: ShardSpec) -> dict:
    """The pserver task: build the shard, serve it until the trainers complete.

    Returns ``{"endpoint", "params": {block name: array}, "info"}``.
    """
    from distributed import get_worker, secede

    worker = get_worker()
    # Leave the worker's thread slot to the trainer that shares this worker (Fluid runs the
    # pserver as its own process); the scheduler is told the task is long-running.
    secede()
    try:
        shard = PServerShard(spec, worker.loop.asyncio_loop)
        attach_service(worker, spec.job, service_name(spec.endpoint), shard)
        params = shard.serve()
    except DistributedTrainingError:
        raise
    except Exception as exc:  # name the role, endpoint and step, keep the cause
        raise DistributedTrainingError(f"{type(exc).__name__}: {exc}", "pserver",
                                       spec.endpoint, spec.start_round) from exc
    return {"endpoint": spec.endpoint, "worker": worker.address, "params": params,
            "info": shard.info()}
