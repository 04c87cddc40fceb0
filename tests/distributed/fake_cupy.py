"""A CuPy for CPU tests, faithful where the nccl backend depends on CuPy's behaviour.

``modules(version)`` returns ``sys.modules`` entries for ``cupy``, ``cupy.cuda``,
``cupy.cuda.nccl`` and ``cupy.cuda.runtime`` imitating CuPy ``version`` (13.x or 14.x). What it
keeps of the real thing:

- **signatures and argument types**: ``NcclCommunicator(ndev, commId, rank[, config])`` takes
  ``commId`` as ``bytes`` on 14 and as a tuple of 128 signed chars on 13 and rejects the other
  form with CuPy's own ``TypeError``; ``get_unique_id()`` returns the version's form; the
  collectives take integers (pointers, counts, NCCL's datatype and op codes) and check them as
  NCCL does (a pointer outside any device allocation, or on another device than the
  communicator's, is ``NCCL_ERROR_INVALID_ARGUMENT``);
- **devices**: the current device is per thread (``Device(i).use()``, ``with Device(i)``);
  arrays live on the device current when they were made, and a kernel on an array of another
  device raises CuPy's ``ValueError``;
- **streams**: every operation (host-to-device copies, ``concatenate``, ``copy``, ``*=``,
  assignment, the collectives) is queued on the current stream (``with stream:``) and runs later
  on that stream's own thread, each taking ``KERNEL_S``; ``Stream.done`` is False until the queue
  drained; events (``Event.record``, ``Stream.wait_event``) order streams; the legacy null stream
  waits for blocking streams but not for ``non_blocking`` ones; ``asnumpy`` waits only for the
  current stream. A missing wait or a missing event reads stale memory, which is filled with
  NaN-like garbage (0xFF bytes) when allocated;
- **NCCL**: the ranks of one unique id rendezvous per collective on their streams' threads;
  sum, prod, max, min and avg are honoured; ``groupStart``/``groupEnd`` defer the launches to
  ``groupEnd``; ``ncclCommInitRank`` blocks until every rank joined; ``abort`` makes waiting
  collectives return, and a peer that aborted or destroyed its communicator shows as
  ``NCCL_ERROR_REMOTE_ERROR`` in ``check_async_error``;
- **errors**: ``World.inject_kernel_error(device)`` makes the next kernel on that device fail
  with a sticky ``cudaErrorIllegalAddress`` (``Stream.done``, ``synchronize`` and later launches
  raise it).

What it checks beyond CuPy (tests read ``World.violations`` and :func:`check_released`): two
threads inside one communicator at once (NCCL forbids it), a communicator used after
destroy/abort, and communicators never released.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import threading
import time
import types
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

KERNEL_S = 0.001  # duration of every queued operation: long enough that a missing wait shows
API_S = 0.001  # time spent inside every NcclCommunicator method (makes overlaps visible)

_NCCL_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
                "float16": 6, "float32": 7, "float64": 8}
_NCCL_OPS = {"SUM": 0, "PROD": 1, "MAX": 2, "MIN": 3, "AVG": 4}
_NCCL_ERRORS = {1: ("NCCL_ERROR_UNHANDLED_CUDA_ERROR", "unhandled cuda error"),
                2: ("NCCL_ERROR_SYSTEM_ERROR", "unhandled system error"),
                3: ("NCCL_ERROR_INTERNAL_ERROR", "internal error"),
                4: ("NCCL_ERROR_INVALID_ARGUMENT", "invalid argument"),
                5: ("NCCL_ERROR_INVALID_USAGE", "invalid usage"),
                6: ("NCCL_ERROR_REMOTE_ERROR", "remote process exited or there was a network "
                                               "error")}


class CUDARuntimeError(RuntimeError):
    """cupy_backends.cuda.api.runtime.CUDARuntimeError."""


CUDARuntimeError.__module__ = "cupy_backends.cuda.api.runtime"


class NcclError(RuntimeError):
    """cupy_backends.cuda.libs.nccl.NcclError."""

    def __init__(self, status: int) -> None:
        self.status = status
        name, text = _NCCL_ERRORS[status]
        super().__init__(f"{name}: {text}")


NcclError.__module__ = "cupy_backends.cuda.libs.nccl"


def _illegal_address() -> CUDARuntimeError:
    return CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")


# -- the world: devices, allocations, streams, cliques -----------------------------------------


class World:
    """State shared by everything one :func:`modules` call made."""

    def __init__(self, version: str, gpus: int) -> None:
        self.version, self.major = version, int(version.split(".")[0])
        self.gpus = gpus
        self.nccl_version = 23203
        self.local = threading.local()
        self.lock = threading.Lock()
        self.allocations: dict[int, weakref.ref] = {}
        #: pointers of freed allocations, dropped from ``allocations`` under the lock later: a
        #: finalizer runs wherever the garbage collector does, also in a thread that holds
        #: ``lock`` (taking it there deadlocked the world, once in a full run)
        self._freed: deque[int] = deque()
        self.null_streams: dict[int, Stream] = {}
        self.streams: dict[int, Stream] = {}
        self.sticky: dict[int, BaseException] = {}
        self.fail_next: set[int] = set()
        self.cliques: dict[bytes, _Clique] = {}
        self.live: set[NcclCommunicator] = set()
        self.violations: list[str] = []
        self.aborts: list[tuple] = []  # (name, ident) of the thread of each abort()
        self.shared_gpu = False  # True: every probe sees the same GPU UUID
        self._probes = itertools.count()
        self._ptrs = itertools.count(0x7F0000001000, 0x1000)

    # thread-local CUDA state
    @property
    def device(self) -> int:
        return getattr(self.local, "device", 0)

    def current_stream(self) -> Stream:
        stack = getattr(self.local, "streams", None)
        return stack[-1] if stack else self.null_stream(self.device)

    def null_stream(self, device: int) -> Stream:
        with self.lock:
            stream = self.null_streams.get(device)
        if stream is None:
            stream = Stream(null=True, _device=device)
            with self.lock:
                stream = self.null_streams.setdefault(device, stream)
        return stream

    def check_device(self, device: int) -> None:
        if not 0 <= device < self.gpus:
            raise CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")

    def raise_sticky(self, device: int) -> None:
        error = self.sticky.get(device)
        if error is not None:
            raise error

    def inject_kernel_error(self, device: int) -> None:
        """The next kernel run on ``device`` fails; the device then stays failed (sticky)."""
        self.fail_next.add(device)

    def uuid(self, device: int) -> bytes:
        n = 0 if self.shared_gpu else next(self._probes)
        return hashlib.md5(f"fake-gpu-{device}-{n}".encode()).digest()

    # allocations
    def register(self, allocation: _Allocation) -> None:
        with self.lock:
            self._drop_freed()
            self.allocations[allocation.ptr] = weakref.ref(allocation)
        weakref.finalize(allocation, self._freed.append, allocation.ptr)  # deque: no lock

    def _drop_freed(self) -> None:  # under self.lock
        while self._freed:
            self.allocations.pop(self._freed.popleft(), None)

    def find(self, ptr: int, nbytes: int) -> _Allocation | None:
        with self.lock:
            self._drop_freed()
            refs = list(self.allocations.values())
        for ref in refs:
            a = ref()
            if a is not None and a.ptr <= ptr and ptr + nbytes <= a.ptr + a.nbytes:
                return a
        return None


_world: World | None = None


def world() -> World:
    """The world of the latest :func:`modules` call."""
    assert _world is not None, "call fake_cupy.modules() first"
    return _world


def check_released() -> None:
    """Assert that every communicator was destroyed or aborted and NCCL's rules were kept."""
    w = world()
    deadline = time.monotonic() + 5  # an init helper may still be aborting its late comm
    while w.live and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not w.live, f"NCCL communicators never destroyed nor aborted: {w.live}"
    assert not w.violations, w.violations


# -- memory and arrays ---------------------------------------------------------------------------


class _Allocation:
    def __init__(self, nbytes: int, device: int) -> None:
        self.nbytes, self.device = max(int(nbytes), 1), device
        self.buf = np.full(self.nbytes, 0xFF, dtype=np.uint8)  # uninitialised memory
        self.ptr = self.buf.ctypes.data
        world().register(self)

    def view(self, ptr: int, count: int, dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        return np.frombuffer(self.buf, dtype=dtype, count=count, offset=ptr - self.ptr)


class MemoryPointer:
    def __init__(self, allocation: _Allocation, offset: int) -> None:
        self.mem, self.ptr, self.device_id = allocation, allocation.ptr + offset, \
            allocation.device


class ndarray:  # noqa: N801 - cupy's name
    """A C-contiguous device array: bytes of an allocation on one device."""

    def __init__(self, shape: Any, dtype: Any = float, *, _alloc: _Allocation | None = None,
                 _offset: int = 0) -> None:
        self.shape = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        if _alloc is None:
            _alloc = _Allocation(self.nbytes, world().device)
        self._alloc, self._offset = _alloc, _offset

    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    ndim = property(lambda self: len(self.shape))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)
    data = property(lambda self: MemoryPointer(self._alloc, self._offset))
    device = property(lambda self: Device(self._alloc.device))

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3,
                "data": (self.data.ptr, False)}

    def _host(self) -> np.ndarray:
        """The bytes as they are in device memory now (no synchronisation)."""
        return self._alloc.view(self.data.ptr, self.size, self.dtype).reshape(self.shape)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use "
                        "`.get()` to construct a NumPy array explicitly.")

    def reshape(self, *shape: Any) -> ndarray:
        shape = shape[0] if len(shape) == 1 and not np.isscalar(shape[0]) else shape
        shape = tuple(int(n) for n in shape)
        if shape.count(-1) == 1:
            known = int(np.prod([n for n in shape if n != -1], dtype=np.int64))
            shape = tuple(self.size // max(known, 1) if n == -1 else n for n in shape)
        if int(np.prod(shape, dtype=np.int64)) != self.size:
            raise ValueError(f"cannot reshape array of size {self.size} into shape {shape}")
        return ndarray(shape, self.dtype, _alloc=self._alloc, _offset=self._offset)

    def __getitem__(self, key: Any) -> ndarray:
        if self.ndim != 1 or not isinstance(key, slice) or key.step not in (None, 1):
            raise NotImplementedError("the fake cupy slices 1-D arrays with step 1 only")
        start, stop, _ = key.indices(self.size)
        stop = max(stop, start)
        return ndarray((stop - start,), self.dtype, _alloc=self._alloc,
                       _offset=self._offset + start * self.dtype.itemsize)

    def _same_device(self) -> None:
        if self._alloc.device != world().device:
            raise ValueError(f"The device where the array resides ({self._alloc.device}) is "
                             f"different from the current device ({world().device}). Peer "
                             "access has been activated automatically.")

    def __setitem__(self, key: Any, value: Any) -> None:
        if key is not Ellipsis and key != slice(None):
            raise NotImplementedError("the fake cupy assigns whole arrays only (a[...] = b)")
        self._same_device()
        if isinstance(value, ndarray):
            if value.shape != self.shape:
                raise ValueError(f"shape mismatch {value.shape} -> {self.shape}")
            _enqueue(lambda: np.copyto(self._host(), value._host(), casting="unsafe"),
                     "assign")
        else:
            snapshot = np.array(value, dtype=self.dtype, copy=True)
            _enqueue(lambda: np.copyto(self._host(), snapshot), "assign")

    def __imul__(self, other: Any) -> ndarray:
        self._same_device()
        factor = np.asarray(other).item()
        _enqueue(lambda: np.multiply(self._host(), factor, out=self._host(), casting="unsafe"),
                 "multiply")
        return self

    def copy(self) -> ndarray:
        self._same_device()
        out = ndarray(self.shape, self.dtype)
        _enqueue(lambda: np.copyto(out._host(), self._host()), "copy")
        return out

    def get(self, stream: Stream | None = None) -> np.ndarray:
        return asnumpy(self, stream)

    def __repr__(self) -> str:
        return f"fake_cupy.ndarray(shape={self.shape}, dtype={self.dtype}, " \
               f"device={self._alloc.device})"


def asarray(a: Any, dtype: Any = None) -> ndarray:
    if isinstance(a, ndarray):
        if dtype is not None and np.dtype(dtype) != a.dtype:
            raise NotImplementedError("the fake cupy does not convert device arrays")
        return a
    snapshot = np.array(a, dtype=dtype, copy=True)  # pageable memory is staged at the call
    out = ndarray(snapshot.shape, snapshot.dtype)
    _enqueue(lambda: np.copyto(out._host(), snapshot), "host-to-device copy")
    return out


def zeros(shape: Any, dtype: Any = float) -> ndarray:
    out = ndarray(shape, dtype)
    _enqueue(lambda: out._host().fill(0), "memset")
    return out


def full(shape: Any, fill_value: Any, dtype: Any = None) -> ndarray:
    out = ndarray(shape, dtype if dtype is not None else np.asarray(fill_value).dtype)
    _enqueue(lambda: out._host().fill(fill_value), "fill")
    return out


def concatenate(parts: list[ndarray]) -> ndarray:
    for p in parts:
        p._same_device()
    dtype = np.result_type(*[p.dtype for p in parts])
    out = ndarray((sum(p.size for p in parts),), dtype)

    def run() -> None:
        np.concatenate([p._host().reshape(-1) for p in parts], out=out._host())

    _enqueue(run, "concatenate")
    return out


def asnumpy(a: Any, stream: Stream | None = None) -> np.ndarray:
    if not isinstance(a, ndarray):
        return np.asarray(a)
    (stream or world().current_stream()).synchronize()  # a synchronous device-to-host copy
    return np.array(a._host(), copy=True)


# -- devices, streams, events --------------------------------------------------------------------


class Device:
    def __init__(self, device: int | None = None) -> None:
        w = world()
        self.id = w.device if device is None else int(device)
        w.check_device(self.id)

    @property
    def pci_bus_id(self) -> str:  # identical machines have identical bus ids
        return f"0000:{self.id + 1:02X}:00.0"

    def use(self) -> None:
        world().local.device = self.id

    def synchronize(self) -> None:
        w = world()
        for s in [w.null_stream(self.id), *w.streams.values()]:
            if s.device == self.id:
                s.synchronize()

    def __enter__(self) -> Device:
        w = world()
        stack = w.local.__dict__.setdefault("device_stack", [])
        stack.append(w.device)
        self.use()
        return self

    def __exit__(self, *exc: object) -> None:
        w = world()
        w.local.device = w.local.device_stack.pop()


class Stream:
    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False,
                 priority: int | None = None, *, _device: int | None = None) -> None:
        w = world()
        self.device = w.device if _device is None else _device
        self.null, self.non_blocking = null, non_blocking
        self.ptr = 0 if null else next(w._ptrs)
        self._cv = threading.Condition()
        self._queue: deque = deque()
        self.enqueued = self.completed = 0
        if not null:
            w.streams[self.ptr] = self
        threading.Thread(target=self._serve, name=f"fake-stream-{self.ptr:x}",
                         daemon=True).start()

    # the stream's "hardware": runs queued work in order
    def _serve(self) -> None:
        w = _world  # the world this stream belongs to, even after a new modules() call
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                fn = self._queue[0]
            time.sleep(KERNEL_S)
            try:
                if self.device in w.fail_next:
                    w.fail_next.discard(self.device)
                    raise _illegal_address()
                if self.device not in w.sticky:
                    fn()
            except BaseException as exc:  # noqa: BLE001 - becomes the device's sticky error
                w.sticky.setdefault(self.device, exc if isinstance(exc, CUDARuntimeError)
                                    else _illegal_address())
            with self._cv:
                self._queue.popleft()
                self.completed += 1
                self._cv.notify_all()

    def _put(self, fn: Any) -> int:
        w = world()
        w.raise_sticky(self.device)
        deps = []
        if not self.non_blocking:  # legacy null stream semantics between blocking streams
            if self.null:
                deps = [(s, s.enqueued) for s in list(w.streams.values())
                        if s.device == self.device and not s.non_blocking]
            else:
                n = w.null_stream(self.device)
                deps = [(n, n.enqueued)]
        with self._cv:
            if deps:
                self._queue.append(lambda: [s._wait_for(seq) for s, seq in deps])
                self.enqueued += 1
            self._queue.append(fn)
            self.enqueued += 1
            self._cv.notify_all()
            return self.enqueued

    def _wait_for(self, seq: int) -> None:
        with self._cv:
            while self.completed < seq and self.device not in world().sticky:
                self._cv.wait(0.05)

    @property
    def done(self) -> bool:
        world().raise_sticky(self.device)
        with self._cv:
            return self.completed == self.enqueued

    def synchronize(self) -> None:
        self._wait_for(self.enqueued)
        world().raise_sticky(self.device)

    def wait_event(self, event: Event) -> None:
        target = event._target
        if target is not None:
            stream, seq = target
            self._put(lambda: stream._wait_for(seq))

    def record(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def use(self) -> Stream:
        world().local.__dict__.setdefault("streams", []).append(self)
        return self

    def __enter__(self) -> Stream:
        return self.use()

    def __exit__(self, *exc: object) -> None:
        world().local.streams.pop()


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False,
                 interprocess: bool = False) -> None:
        self._target: tuple[Stream, int] | None = None

    def record(self, stream: Stream | None = None) -> None:
        stream = stream or world().current_stream()
        world().raise_sticky(stream.device)
        self._target = (stream, stream.enqueued)

    @property
    def done(self) -> bool:
        if self._target is None:
            return True
        stream, seq = self._target
        world().raise_sticky(stream.device)
        return stream.completed >= seq

    def synchronize(self) -> None:
        if self._target is not None:
            self._target[0]._wait_for(self._target[1])


def _enqueue(fn: Any, what: str) -> None:
    """Queue ``fn`` (a kernel or copy called ``what``) on the calling thread's current stream."""
    world().current_stream()._put(fn)


def get_current_stream() -> Stream:
    return world().current_stream()


# -- NCCL ------------------------------------------------------------------------------------------


class _Clique:
    def __init__(self, n: int) -> None:
        self.n = n
        self.cv = threading.Condition()
        self.members: dict[int, NcclCommunicator] = {}
        self.contributions: dict[int, dict[int, np.ndarray]] = {}
        self.results: dict[int, np.ndarray] = {}


def _int_arg(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"an integer is required (argument {name!r}, got "
                        f"{type(value).__name__})")
    return int(value)


class NcclCommunicator:
    """cupy.cuda.nccl.NcclCommunicator of the imitated CuPy version."""

    def __init__(self, ndev: Any, commId: Any, rank: Any, config: Any = None) -> None:  # noqa: N803
        w = world()
        ndev, rank = _int_arg("ndev", ndev), _int_arg("rank", rank)
        want = bytes if w.major >= 14 else tuple
        if type(commId) is not want:
            raise TypeError(f"Argument 'commId' has incorrect type (expected {want.__name__}, "
                            f"got {type(commId).__name__})")
        if config is not None and w.major < 14:
            raise TypeError("__init__() takes exactly 3 positional arguments (4 given)")
        if want is tuple:
            if len(commId) != 128:
                raise IndexError("tuple index out of range")
            for v in commId:
                if not -128 <= int(v) <= 127:
                    raise OverflowError("value too large to convert to char")
            key = bytes(int(v) & 0xFF for v in commId)
        else:
            if len(commId) != 128:
                raise ValueError("commId must be 128 bytes")
            key = commId
        if not 0 <= rank < ndev:
            raise NcclError(4)
        self._world, self._device, self._rank, self._n = w, w.device, rank, ndev
        w.raise_sticky(self._device)
        self._inuse = threading.Lock()
        self._seq = 0
        self._state = "open"
        self.async_error: int | None = None
        with w.lock:
            clique = w.cliques.setdefault(key, _Clique(ndev))
        self._clique = clique
        with clique.cv:
            if clique.n != ndev or rank in clique.members:
                raise NcclError(5)
            clique.members[rank] = self
            clique.cv.notify_all()
            if not clique.cv.wait_for(lambda: len(clique.members) == ndev, timeout=60):
                raise NcclError(2)  # the bootstrap gave up
        with w.lock:
            w.live.add(self)

    @contextlib.contextmanager
    def _inside(self, what: str) -> Iterator[None]:
        """Every method: one thread at a time, and not after destroy/abort (else a violation)."""
        if not self._inuse.acquire(blocking=False):
            self._world.violations.append(f"{what} called while another thread was inside "
                                          f"rank {self._rank}'s communicator")
            self._inuse.acquire()
        try:
            if self._state != "open" and what not in ("abort", "destroy", "check_async_error"):
                self._world.violations.append(f"{what} on a communicator after {self._state}")
            time.sleep(API_S)
            yield
        finally:
            self._inuse.release()

    def _buffer(self, ptr: Any, count: int, dtype: int, name: str) -> np.ndarray:
        ptr = _int_arg(name, ptr)
        types_ = {v: k for k, v in _NCCL_DTYPES.items()}
        if dtype not in types_:
            raise NcclError(4)
        nbytes = count * np.dtype(types_[dtype]).itemsize
        allocation = self._world.find(ptr, nbytes)
        if allocation is None or allocation.device != self._device:
            raise NcclError(4)  # not device memory, or another device's
        return allocation.view(ptr, count, types_[dtype])

    def _stream(self, ptr: Any) -> Stream:
        ptr = _int_arg("stream", ptr)
        w = self._world
        stream = w.null_stream(self._device) if ptr == 0 else w.streams.get(ptr)
        if stream is None or stream.device != self._device:
            raise NcclError(1)
        return stream

    def _launch(self, stream: Stream, run: Any) -> None:
        seq, self._seq = self._seq, self._seq + 1
        local = self._world.local
        if getattr(local, "group", 0):
            local.pending.append((stream, lambda: run(seq)))
        else:
            stream._put(lambda: run(seq))

    def _collective(self, seq: int, contribution: np.ndarray, combine: Any,
                    out: np.ndarray) -> None:
        clique = self._clique
        with clique.cv:
            clique.contributions.setdefault(seq, {})[self._rank] = contribution.copy()
            clique.cv.notify_all()
            while True:
                parts = clique.contributions.get(seq, {})
                if seq in clique.results or len(parts) == clique.n:
                    break
                if self._state != "open":
                    return  # ncclCommAbort: the kernel returns
                gone = [r for r, m in clique.members.items() if m._state != "open"]
                if gone:
                    self.async_error = 6
                clique.cv.wait(0.02)
            if seq not in clique.results:
                clique.results[seq] = combine([parts[r] for r in range(clique.n)])
            result = clique.results[seq]
        np.copyto(out, result, casting="unsafe")

    def allReduce(self, sendbuf: Any, recvbuf: Any, count: Any, datatype: Any, op: Any,  # noqa: N802
                  stream: Any) -> None:
        with self._inside("allReduce"):
            count, datatype, op = (_int_arg(n, v) for n, v in
                                   (("count", count), ("datatype", datatype), ("op", op)))
            send = self._buffer(sendbuf, count, datatype, "sendbuf")
            recv = self._buffer(recvbuf, count, datatype, "recvbuf")
            if op not in _NCCL_OPS.values():
                raise NcclError(4)
            ops = {0: lambda p: np.sum(p, axis=0, dtype=p[0].dtype),
                   1: lambda p: np.prod(p, axis=0, dtype=p[0].dtype),
                   2: lambda p: np.max(p, axis=0), 3: lambda p: np.min(p, axis=0),
                   4: lambda p: (np.sum(p, axis=0, dtype=p[0].dtype) / len(p)).astype(
                       p[0].dtype)}
            self._launch(self._stream(stream), lambda seq: self._collective(
                seq, send, lambda parts: ops[op](np.stack(parts)), recv))

    def broadcast(self, sendbuff: Any, recvbuff: Any, count: Any, datatype: Any, root: Any,
                  stream: Any) -> None:
        with self._inside("broadcast"):
            count, datatype, root = (_int_arg(n, v) for n, v in
                                     (("count", count), ("datatype", datatype), ("root", root)))
            send = self._buffer(sendbuff, count, datatype, "sendbuff")
            recv = self._buffer(recvbuff, count, datatype, "recvbuff")
            if not 0 <= root < self._n:
                raise NcclError(4)
            self._launch(self._stream(stream), lambda seq: self._collective(
                seq, send, lambda parts: parts[root], recv))

    def bcast(self, buff: Any, count: Any, datatype: Any, root: Any, stream: Any) -> None:
        self.broadcast(buff, buff, count, datatype, root, stream)

    def check_async_error(self) -> None:
        with self._inside("check_async_error"):
            if self.async_error is not None:
                raise NcclError(self.async_error)

    def _end(self, how: str) -> None:
        with self._inside(how):
            if how == "abort":
                thread = threading.current_thread()
                self._world.aborts.append((thread.name, thread.ident))
            if self._state == "open":
                self._state = how
            with self._world.lock:
                self._world.live.discard(self)
            with self._clique.cv:
                self._clique.cv.notify_all()

    def destroy(self) -> None:
        self._end("destroy")

    def abort(self) -> None:
        self._end("abort")

    def rank_id(self) -> int:
        return self._rank

    def device_id(self) -> int:
        return self._device

    def size(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"FakeNcclCommunicator(rank {self._rank} of {self._n}, {self._state})"


def _group_start() -> None:
    local = world().local
    local.group = getattr(local, "group", 0) + 1
    if local.group == 1:
        local.pending = []


def _group_end() -> None:
    local = world().local
    if not getattr(local, "group", 0):
        raise NcclError(5)
    local.group -= 1
    if local.group == 0:
        pending, local.pending = local.pending, []
        for stream, run in pending:
            stream._put(run)


def _unique_id() -> Any:
    raw = os.urandom(128)
    return raw if world().major >= 14 else tuple(int(v) for v in np.frombuffer(raw, np.int8))


# -- the modules -----------------------------------------------------------------------------------


def modules(version: str = "14.2.0", gpus: int = 2) -> dict[str, types.ModuleType]:
    """``sys.modules`` entries of a fresh fake CuPy ``version`` seeing ``gpus`` devices."""
    global _world
    _world = World(version, gpus)
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    nccl = types.ModuleType("cupy.cuda.nccl")
    runtime = types.ModuleType("cupy.cuda.runtime")
    cupy.__version__ = version
    cupy.ndarray, cupy.asarray, cupy.asnumpy = ndarray, asarray, asnumpy
    cupy.zeros, cupy.full, cupy.concatenate = zeros, full, concatenate
    for name in ("float16", "float32", "float64", "int8", "uint8", "int32", "uint32", "int64",
                 "uint64"):
        setattr(cupy, name, getattr(np, name))
    nccl.available = True
    nccl.get_unique_id = _unique_id
    nccl.get_version = lambda: world().nccl_version
    nccl.NcclCommunicator = NcclCommunicator
    nccl.NcclError = NcclError
    nccl.groupStart, nccl.groupEnd = _group_start, _group_end
    for name, code in _NCCL_DTYPES.items():
        setattr(nccl, f"NCCL_{name.upper()}", code)
    for name, code in _NCCL_OPS.items():
        setattr(nccl, f"NCCL_{name}", code)
    runtime.CUDARuntimeError = CUDARuntimeError
    runtime.getDeviceCount = lambda: world().gpus
    runtime.getDeviceProperties = lambda device: {
        "name": b"Fake GPU", "uuid": world().uuid(device), "pciBusID": device + 1}
    runtime.deviceSynchronize = lambda: Device().synchronize()
    cuda.Device, cuda.Stream, cuda.Event = Device, Stream, Event
    cuda.get_current_stream = get_current_stream
    cuda.nccl, cuda.runtime = nccl, runtime
    cupy.cuda = cuda
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.nccl": nccl,
            "cupy.cuda.runtime": runtime}
