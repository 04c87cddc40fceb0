"""Everything of the nccl backend that happens before a communicator exists.

- **Probing** (client side, before anything is launched): :func:`probe_gpus` asks each worker
  what it offers (:class:`GpuInfo`), :func:`check_nccl` decides whether the workers can form an
  NCCL clique and names what is missing.
- **The unique id** (:func:`create_session` on the scheduler, :func:`fetch_unique_id` from each
  trainer). The recipe is raft-dask's (shared/reference/dask-peers.md §3): the scheduler process
  calls ``ncclGetUniqueId`` -- the process that creates the id hosts NCCL's bootstrap listener,
  and the scheduler is the one process every worker can reach -- and keeps it in a dict keyed by
  a session id; each trainer checks in and waits until every rank has, so that the one call that
  cannot be interrupted (``ncclCommInitRank``) never starts while a peer is missing.

The id is 128 raw bytes everywhere it travels (``run_on_scheduler`` replies, task arguments, the
``gen_nccl_id`` socket): msgpack keeps bytes as bytes, whereas a tuple comes back a list. Only
the worker that calls ``NcclCommunicator`` converts it to what its CuPy takes
(:func:`uid_for_cupy`): CuPy 14 takes ``bytes``, CuPy 13 a tuple of 128 signed ints, and each
rejects the other's form with a ``TypeError``.

The scheduler also records its NCCL version: the id's bootstrap protocol is private to an NCCL
release, so every rank must run the version that made it.

CuPy is optional: it is imported inside the functions that need it, never at module import.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dask_fluid.distributed.errors import DeadlineExceededError, JobAbortedError

__all__ = [
    "GpuInfo",
    "NcclUnavailableError",
    "check_nccl",
    "create_session",
    "destroy_session",
    "fetch_unique_id",
    "format_nccl_version",
    "local_nccl_version",
    "probe_gpus",
    "uid_bytes",
    "uid_for_cupy",
]

UID_SIZE = 128  # sizeof(ncclUniqueId)
_SIGNED = struct.Struct(f"{UID_SIZE}b")
_STORE = "_dask_fluid_nccl"  # attribute of the Scheduler object holding the sessions
_CHECKIN_POLL_S = 0.01


class NcclUnavailableError(RuntimeError):
    """The nccl backend cannot run: CuPy, NCCL or a GPU is missing somewhere (named)."""


# --------------------------------------------------------------------------------------------
# The unique id and the NCCL version
# --------------------------------------------------------------------------------------------


def uid_bytes(uid: Any) -> bytes:
    """The 128 raw bytes of an NCCL unique id in any form CuPy hands out.

    Parameters
    ----------
    uid : bytes or sequence of int
        ``cupy.cuda.nccl.get_unique_id()`` (bytes on CuPy 14, a tuple of signed chars on 13),
        or raw bytes already.

    Raises
    ------
    ValueError
        It is not 128 values.
    """
    raw = bytes(uid) if isinstance(uid, (bytes, bytearray, memoryview)) else \
        bytes(int(v) & 0xFF for v in uid)
    if len(raw) != UID_SIZE:
        raise ValueError(f"an NCCL unique id has {UID_SIZE} bytes, got {len(raw)}")
    return raw


def cupy_major() -> int:
    """The major version of the installed CuPy."""
    import cupy  # noqa: PLC0415

    return int(str(cupy.__version__).split(".")[0])


def uid_for_cupy(raw: bytes) -> bytes | tuple[int, ...]:
    """``raw`` in the form the installed CuPy's ``NcclCommunicator`` takes as ``commId``.

    CuPy 14 declares ``bytes commId``; CuPy 13 declares ``tuple commId`` of signed chars.
    """
    raw = uid_bytes(raw)
    return raw if cupy_major() >= 14 else _SIGNED.unpack(raw)


def local_nccl_version() -> int:
    """``ncclGetVersion()`` of this process (e.g. 23203 for NCCL 2.32.3)."""
    from cupy.cuda import nccl  # noqa: PLC0415

    return int(nccl.get_version())


def format_nccl_version(code: int) -> str:
    """23203 -> ``"2.32.3"`` (NCCL's encoding: major*10000 + minor*100 + patch since 2.9)."""
    code = int(code)
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def check_nccl_version(theirs: int, whose: str) -> None:
    """Raise :class:`NcclUnavailableError` unless this process runs NCCL version ``theirs``."""
    mine = local_nccl_version()
    if mine != int(theirs):
        raise NcclUnavailableError(
            f"this process has NCCL {format_nccl_version(mine)} but {whose} has NCCL "
            f"{format_nccl_version(theirs)}: an NCCL unique id is only understood by the NCCL "
            "release that made it. Install the same nvidia-nccl (or CUDA toolkit) everywhere")


# --------------------------------------------------------------------------------------------
# Probing (client side, before anything is launched)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInfo:
    """What one process offers to the nccl backend.

    Attributes
    ----------
    cupy : bool
        CuPy imports.
    nccl : bool
        ``cupy.cuda.nccl.available``.
    gpus : int
        CUDA devices visible to the process.
    host : str
        ``socket.gethostname()`` of the process.
    uuid : str
        UUID of its device 0 (``GPU-...``, what ``nvidia-smi -L`` prints); empty if unknown.
    bus_id : str
        PCI bus id of its device 0: the same on two identical machines, so not an identity.
    nccl_version : int
        ``ncclGetVersion()``, 0 if unknown.
    cupy_version : str
    problem : str
        Why the backend cannot run there, empty when it can.
    """

    cupy: bool = False
    nccl: bool = False
    gpus: int = 0
    host: str = ""
    uuid: str = ""
    bus_id: str = ""
    nccl_version: int = 0
    cupy_version: str = ""
    problem: str = ""

    @property
    def gpu(self) -> tuple[str, str]:
        """Which physical GPU device 0 is: (host, UUID), or (host, bus id) without a UUID."""
        return self.host, self.uuid or self.bus_id


def _format_uuid(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    hexed = bytes(raw).hex()
    if len(hexed) != 32:
        return hexed
    return f"GPU-{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"


def _probe(*, need_gpu: bool = True) -> dict[str, Any]:
    # Runs in client.run (the worker's event loop): only quick calls, no cupy.is_available(),
    # which can take seconds (cupy#8152).
    info: dict[str, Any] = {"host": socket.gethostname()}
    try:
        import cupy  # noqa: PLC0415
        from cupy.cuda import nccl  # noqa: PLC0415
    except Exception as exc:  # ImportError, or a wheel missing its CUDA libraries (cupy#8108)
        info["problem"] = (f"CuPy is not importable ({type(exc).__name__}: {exc}); install the "
                           "'gpu' extra (pip install 'dask-fluid[gpu]')")
        return info
    info.update(cupy=True, cupy_version=str(cupy.__version__),
                nccl=bool(getattr(nccl, "available", False)))
    if not info["nccl"]:
        info["problem"] = ("CuPy cannot load the NCCL library (cupy.cuda.nccl.available is "
                           "False); install NCCL, e.g. pip install nvidia-nccl-cu12")
        return info
    try:
        info["nccl_version"] = int(nccl.get_version())
    except Exception as exc:  # noqa: BLE001 - reported as the problem
        info["problem"] = f"NCCL does not answer ncclGetVersion ({type(exc).__name__}: {exc})"
        return info
    if not need_gpu:
        return info
    try:
        info["gpus"] = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        info["problem"] = f"no usable CUDA GPU ({type(exc).__name__}: {exc})"
        return info
    if info["gpus"] == 0:
        info["problem"] = "no CUDA GPU is visible (CUDA_VISIBLE_DEVICES?)"
        return info
    try:
        info["uuid"] = _format_uuid(cupy.cuda.runtime.getDeviceProperties(0)["uuid"])
    except Exception:  # noqa: BLE001 - older CUDA: the bus id (with the host) stands in
        pass
    try:
        info["bus_id"] = str(cupy.cuda.Device(0).pci_bus_id)
    except Exception:  # noqa: BLE001
        pass
    return info


def probe_gpus(client: Any, workers: Sequence[str] | None = None) -> dict[str, GpuInfo]:
    """Ask each worker (default: all) whether it can run an NCCL rank.

    Runs quick checks through ``client.run``; nothing is launched and CuPy stays optional.

    Returns
    -------
    dict of str to GpuInfo
        Worker address -> what it offers.
    """
    kwargs = {} if workers is None else {"workers": list(workers)}
    replies = client.run(_probe, **kwargs)
    return {addr: GpuInfo(**reply) for addr, reply in replies.items()}


def _probe_scheduler(dask_scheduler: Any = None) -> dict[str, Any]:
    return _probe(need_gpu=False)


def check_nccl(client: Any, workers: Sequence[str],
               infos: dict[str, GpuInfo] | None = None) -> None:
    """Raise :class:`NcclUnavailableError` unless ``workers`` can form an NCCL clique.

    Checks that every worker has CuPy, NCCL and a GPU, that no two workers on one host use the
    same GPU (by UUID: identical machines have identical PCI bus ids), and that the scheduler
    (which creates the unique id) has CuPy with the workers' NCCL version.

    Parameters
    ----------
    client : distributed.Client
    workers : sequence of str
        The trainer workers.
    infos : dict, optional
        The result of :func:`probe_gpus`, to avoid probing twice.
    """
    infos = infos if infos is not None else probe_gpus(client, workers)
    problems = [f"worker {w}: {infos[w].problem}" if w in infos else f"worker {w}: not found"
                for w in workers if w not in infos or infos[w].problem]
    ok = [w for w in workers if w in infos and not infos[w].problem]
    seen: dict[tuple[str, str], str] = {}
    for w in ok:
        gpu = infos[w].gpu
        if gpu[1] and gpu in seen:
            problems.append(f"workers {seen[gpu]} and {w} share the GPU {gpu[1]} on host "
                            f"{gpu[0]} (NCCL needs one GPU per rank: start one worker per "
                            "GPU, e.g. with dask_cuda.LocalCUDACluster)")
        seen.setdefault(gpu, w)
    scheduler = client.run_on_scheduler(_probe_scheduler)
    if scheduler.get("problem"):
        problems.append(f"the scheduler (it creates the NCCL unique id): {scheduler['problem']}")
    versions = {f"worker {w}": infos[w].nccl_version for w in ok}
    if scheduler.get("nccl_version"):
        versions["the scheduler"] = scheduler["nccl_version"]
    if len(set(versions.values())) > 1:
        listed = ", ".join(f"{who} {format_nccl_version(v)}" for who, v in versions.items())
        problems.append(f"the NCCL versions differ ({listed}): every rank and the scheduler "
                        "need the same NCCL release")
    if problems:
        raise NcclUnavailableError(
            "backend='nccl' cannot run here: " + "; ".join(problems)
            + ". Use backend='ring' (CPU) or backend='auto'.")


# --------------------------------------------------------------------------------------------
# Sessions on the scheduler
# --------------------------------------------------------------------------------------------


def _scheduler_create(session: str, dask_scheduler: Any = None) -> None:
    from cupy.cuda import nccl  # noqa: PLC0415

    store = dask_scheduler.__dict__.setdefault(_STORE, {})
    store[session] = {"uid": uid_bytes(nccl.get_unique_id()),
                      "nccl_version": int(nccl.get_version()), "arrived": set()}


def _scheduler_checkin(session: str, rank: int, dask_scheduler: Any = None) -> dict | None:
    state = getattr(dask_scheduler, _STORE, {}).get(session)
    if state is None:
        return None
    state["arrived"].add(rank)
    return {"uid": state["uid"], "nccl_version": state["nccl_version"]}


def _scheduler_arrived(session: str, dask_scheduler: Any = None) -> int:
    state = getattr(dask_scheduler, _STORE, {}).get(session)
    return -1 if state is None else len(state["arrived"])


def _scheduler_delete(session: str, dask_scheduler: Any = None) -> None:
    getattr(dask_scheduler, _STORE, {}).pop(session, None)


def create_session(client: Any, session: str | None = None) -> str:
    """Create an NCCL unique id on the scheduler; return the session id that names it.

    Parameters
    ----------
    client : distributed.Client
    session : str, optional
        The name to give it (trainers that derive a common name); a fresh uuid by default.
    """
    session = session or uuid.uuid4().hex
    client.run_on_scheduler(_scheduler_create, session)
    return session


def destroy_session(client: Any, session: str) -> None:
    """Forget the session on the scheduler (idempotent)."""
    client.run_on_scheduler(_scheduler_delete, session)


def fetch_unique_id(session: str, rank: int, nranks: int, deadline_s: float, *,
                    address: str = "", aborted: Any = None, client: Any = None,
                    wait_for_session: bool = False) -> tuple[bytes, int]:
    """From a trainer: check in with the scheduler, wait for every rank, return the id.

    Parameters
    ----------
    session : str
    rank, nranks : int
    deadline_s : float
    address : str
        This rank's label, for errors.
    aborted : callable, optional
        Returns an abort reason to stop waiting.
    client : distributed.Client, optional
        Default: the worker's client (``get_client()``, inside a task).
    wait_for_session : bool
        Wait (until the deadline) for another rank to create the session, instead of failing
        when it does not exist yet (trainers started by ``dask-fluid launch``: trainer 0
        creates it).

    Returns
    -------
    (bytes, int)
        The 128 bytes of the id and the scheduler's NCCL version.

    Raises
    ------
    DeadlineExceededError
        If not every rank checked in within ``deadline_s``.
    JobAbortedError
        If ``aborted()`` returns a reason while waiting.
    RuntimeError
        If the session does not exist (already destroyed).
    """
    if client is None:
        from distributed import get_client  # noqa: PLC0415

        client = get_client()
    give_up = time.monotonic() + deadline_s
    while (reply := client.run_on_scheduler(_scheduler_checkin, session, rank)) is None:
        if not wait_for_session:
            raise RuntimeError(f"NCCL session {session} does not exist on the scheduler (the "
                               "job ended or was never set up)")
        if time.monotonic() > give_up:
            raise DeadlineExceededError("trainer 0 never created the NCCL session on the "
                                        "scheduler", "rank", address,
                                        deadline_ms=deadline_s * 1000)
        time.sleep(_CHECKIN_POLL_S)
    while (arrived := client.run_on_scheduler(_scheduler_arrived, session)) < nranks:
        reason = aborted() if aborted is not None else None
        if reason:
            raise JobAbortedError(f"job aborted: {reason}", "rank", address)
        if time.monotonic() > give_up:
            raise DeadlineExceededError(
                f"only {max(arrived, 0)} of {nranks} ranks checked in for the NCCL rendezvous",
                "rank", address, deadline_ms=deadline_s * 1000)
        time.sleep(_CHECKIN_POLL_S)
    return uid_bytes(reply["uid"]), int(reply["nccl_version"])
