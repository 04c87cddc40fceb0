"""The communicator of a trainer process started Fluid's way (NCCL2 mode, ``gen_nccl_id``).

Every trainer knows the same things: its id, the endpoints of all trainers
(``PADDLE_TRAINER_ENDPOINTS``, in the op's ``trainers`` attr), its own endpoint, the job secret
(``DASK_FLUID_JOB_SECRET``) and, under ``dask-fluid launch``, the Dask scheduler
(``DASK_SCHEDULER_ADDRESS``). :func:`connect_trainers` turns that into a communicator:

- on a CPU (or without CuPy and NCCL): an
  :class:`~dask_fluid.distributed.collective.tcp_ring.EndpointRingCommunicator`, a TCP ring
  between the trainer endpoints;
- on a GPU with CuPy and NCCL: an
  :class:`~dask_fluid.distributed.collective.nccl.NcclCommunicator`, whose unique id trainer 0
  creates and either serves at its endpoint (Fluid's ``gen_nccl_id``:
  :func:`exchange_unique_id`) or, under ``dask-fluid launch``, keeps on the Dask scheduler
  (DESIGN.md decision 6), in a session whose name every trainer derives from the job secret and
  the endpoints.

The result is a :class:`TrainerComm`, which the ``gen_nccl_id`` kernel stores in the scope's
``NCCLID`` variables, where a ``CompiledProgram`` with ``num_trainers > 1`` finds it.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dask_fluid.distributed.collective import links, nccl_setup
from dask_fluid.distributed.collective.ring import Communicator
from dask_fluid.distributed.collective.tcp_ring import EndpointRingCommunicator
from dask_fluid.distributed.comm.tls import TlsContexts
from dask_fluid.distributed.errors import WorkerLostError

__all__ = ["TrainerComm", "connect_trainers", "exchange_unique_id", "nccl_usable"]

logger = logging.getLogger(__name__)

#: what trainer 0 sends each trainer: the id's 128 bytes and its NCCL version
_ID_MESSAGE = struct.Struct(f"!{nccl_setup.UID_SIZE}sQ")


@dataclass
class TrainerComm:
    """What the ``NCCLID`` variables of a trainer's scope hold: its communicator.

    Attributes
    ----------
    comm : Communicator
    backend : {"ring", "nccl"}
    rank, nranks : int
    endpoints : list of str
    steps : int
        Collective steps run so far (errors quote the step).
    """

    comm: Communicator
    backend: str
    rank: int
    nranks: int
    endpoints: list[str]
    steps: int = 0
    closed: bool = False

    @property
    def host_staged(self) -> bool:
        """Whether device arrays go through host memory (the ring reduces numpy arrays)."""
        return self.backend == "ring"

    def close(self) -> None:
        """Release the communicator (idempotent)."""
        if not self.closed:
            self.closed = True
            self.comm.close()

    def on_executor_close(self) -> None:
        """``exe.close()`` of the executor that ran ``gen_nccl_id`` ends the communicator."""
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (f"TrainerComm({self.backend}, trainer {self.rank} of {self.nranks}, "
                f"{self.endpoints[self.rank]}, {state})")


def nccl_usable() -> bool:
    """CuPy imports, has NCCL and sees a GPU (the checks are quick; nothing is initialised)."""
    try:
        import cupy  # noqa: PLC0415
        from cupy.cuda import nccl  # noqa: PLC0415

        return bool(getattr(nccl, "available", False)) and \
            cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError: both mean no NCCL here
        return False


def exchange_unique_id(rank: int, endpoints: Sequence[str], deadline_s: float, *,
                       secret: bytes, make_id: Callable[[], Any], nccl_version: int = 0,
                       tls: TlsContexts | None = None) -> tuple[bytes, int]:
    """Fluid's ``gen_nccl_id``: trainer 0 creates the id and serves it at its endpoint.

    Trainer 0 listens on ``endpoints[0]`` until every other trainer has fetched the id (each
    dials it, retried until the deadline, greeted with the job secret); the others return what
    they fetched.

    Parameters
    ----------
    rank : int
    endpoints : sequence of str
    deadline_s : float
    secret : bytes
    make_id : callable
        Creates the id on trainer 0 (``cupy.cuda.nccl.get_unique_id``: bytes or a tuple).
    nccl_version : int
        Trainer 0's NCCL version, sent along with the id.
    tls : TlsContexts, optional
        The links' TLS.

    Returns
    -------
    (bytes, int)
        The id's 128 bytes and trainer 0's NCCL version.

    Raises
    ------
    DeadlineExceededError
        A trainer never came (on trainer 0), or trainer 0 never answered (on the others).
    """
    endpoints = list(endpoints)
    if rank == 0:
        uid = nccl_setup.uid_bytes(make_id())
        if len(endpoints) == 1:
            return uid, nccl_version
        listener = links.Listener(links.bind(*links.split_endpoint(endpoints[0]), endpoints[0]),
                                  secret, endpoints[0], len(endpoints), tls=tls)
        try:
            for k in range(1, len(endpoints)):
                conn = listener.take("ncclid", k, deadline_s, endpoints[k], role="trainer")
                try:
                    conn.sendall(_ID_MESSAGE.pack(uid, nccl_version))
                finally:
                    conn.close()
        finally:
            listener.close()
        return uid, nccl_version
    host, port = links.split_endpoint(endpoints[0])
    conn = links.dial(host, port, links.hello(secret, "ncclid", endpoints[0], rank), deadline_s,
                      peer=endpoints[0], me=endpoints[rank], role="trainer", tls=tls)
    try:
        conn.settimeout(deadline_s)
        data = b""
        while len(data) < _ID_MESSAGE.size and (piece := conn.recv(_ID_MESSAGE.size - len(data))):
            data += piece
    finally:
        conn.close()
    if len(data) != _ID_MESSAGE.size:
        raise WorkerLostError("trainer 0 hung up before sending the NCCL unique id", "trainer",
                              endpoints[0])
    uid, version = _ID_MESSAGE.unpack(data)
    return uid, int(version)


def _session_name(secret: bytes, endpoints: Sequence[str]) -> str:
    # every trainer of the job derives the same name; another job (another secret) another one
    return "launch-" + hashlib.sha256(secret + b"|" + ",".join(endpoints).encode()).hexdigest()[:32]


def _nccl_through_scheduler(rank: int, endpoints: list[str], deadline_s: float, secret: bytes,
                            scheduler: str, device: int) -> Communicator:
    from distributed import Client  # noqa: PLC0415

    from dask_fluid.distributed.collective import nccl  # noqa: PLC0415

    session = _session_name(secret, endpoints)
    with Client(scheduler, set_as_default=False, timeout=deadline_s) as client:
        if rank == 0:
            nccl.create_session(client, session)
        try:
            uid, version = nccl.fetch_unique_id(session, rank, len(endpoints), deadline_s,
                                                address=endpoints[rank], client=client,
                                                wait_for_session=True)
            return nccl.NcclCommunicator(None, session, rank, endpoints, deadline_s,
                                         unique_id=uid, nccl_version=version, device=device)
        finally:
            if rank == 0:  # every rank checked in before the init: nobody needs it any more
                nccl.destroy_session(client, session)


def connect_trainers(rank: int, endpoints: Sequence[str], deadline_s: float, *,
                     secret: bytes = b"", on_gpu: bool = False, device: int = 0,
                     scheduler: str | None = None, tls: TlsContexts | None = None
                     ) -> TrainerComm:
    """The communicator of trainer ``rank`` of the job whose trainers are ``endpoints``.

    Parameters
    ----------
    rank : int
    endpoints : sequence of str
        ``host:port`` of every trainer, in trainer-id order.
    deadline_s : float
        ``FLAGS_rpc_deadline``: how long the trainers may take to come up.
    secret : bytes
        The job secret.
    on_gpu : bool
        The executor runs on a GPU: NCCL when CuPy has it, else the ring on host memory.
    device : int
        CUDA device of this trainer.
    scheduler : str, optional
        The Dask scheduler (``DASK_SCHEDULER_ADDRESS``): the NCCL id goes through it.
    tls : TlsContexts, optional
        TLS for the ring's links and the NCCL id's (:func:`..comm.tls.env_contexts`).

    Returns
    -------
    TrainerComm
    """
    endpoints = list(endpoints)
    if on_gpu and nccl_usable():
        if scheduler:
            comm = _nccl_through_scheduler(rank, endpoints, deadline_s, secret, scheduler,
                                           device)
        else:
            from cupy.cuda import nccl as cupy_nccl  # noqa: PLC0415

            from dask_fluid.distributed.collective.nccl import NcclCommunicator  # noqa: PLC0415

            uid, version = exchange_unique_id(rank, endpoints, deadline_s, secret=secret,
                                              make_id=cupy_nccl.get_unique_id,
                                              nccl_version=int(cupy_nccl.get_version()),
                                              tls=tls)
            comm = NcclCommunicator(None, _session_name(secret, endpoints), rank, endpoints,
                                    deadline_s, unique_id=uid, nccl_version=version,
                                    device=device)
        return TrainerComm(comm, "nccl", rank, len(endpoints), endpoints)
    if on_gpu:
        logger.warning("trainer %d runs on a GPU but CuPy has no NCCL here: gradients are "
                       "all-reduced through host memory over a TCP ring", rank)
    comm = EndpointRingCommunicator(rank, endpoints, deadline_s, secret=secret, tls=tls)
    return TrainerComm(comm, "ring", rank, len(endpoints), endpoints)
