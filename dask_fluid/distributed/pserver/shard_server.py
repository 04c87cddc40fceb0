"""The direct data path of a pserver shard: a listening socket and one thread per trainer.

Why not only Dask RPC: profiled on 2 cores (reference MLP, 2 pservers + 2 trainers), each
worker's event loop was busy about 70% of the time with tornado, msgpack and the thread hops of
the step's requests, and the trainers spent 60% of their time waiting for it. Here a trainer
writes its push to a socket from its own thread and a thread of the pserver answers from the
shard's thread-safe core (:class:`~dask_fluid.distributed.pserver.shard.PServerShard`), as Fluid's
gRPC server threads do; the worker's event loop is not involved.

Dask stays the control plane: the trainer learns the listening address from the shard's job
service (a Dask call, retried until the shard is attached), greets with a token derived from
the job id, and aborts arrive as job-service aborts, which close these sockets.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from ..comm.rpc import _error, unpack_arrays
from ..comm.wire import POLL_S, Connection, PeerClosed, WireTimeout, accept, token
from ..errors import DistributedTrainingError

__all__ = ["ShardServer", "greeting"]

logger = logging.getLogger(__name__)


def greeting(job: str, endpoint: str, trainer_id: int) -> bytes:
    """What trainer ``trainer_id`` sends first on a connection to pserver ``endpoint``: its id
    (4 bytes) and a token only members of ``job`` can compute."""
    return int(trainer_id).to_bytes(4, "big") + token(job, f"{endpoint}/{trainer_id}")


class ShardServer:
    """Serve ``shard`` to trainers on a socket bound to ``host`` (any free port).

    Parameters
    ----------
    shard : PServerShard
        Its ``handle(trainer_id, header, arrays)`` answers one request.
    host : str
        The worker's host (the address trainers reach it by).
    """

    def __init__(self, shard: Any, host: str) -> None:
        self.shard = shard
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, 0), family=family)
        self._listener.settimeout(POLL_S)
        self.address = (host, self._listener.getsockname()[1])
        self._conns: dict[int, socket.socket] = {}
        self._lock = threading.Lock()
        self._stopped = False
        self._accept_thread = threading.Thread(
            target=self._accept, name=f"pserver-accept-{shard.spec.pserver_id}", daemon=True)
        self._accept_thread.start()

    def _accept(self) -> None:
        spec = self.shard.spec
        while not self._stopped:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            try:
                conn.settimeout(POLL_S * 4)
                hello = b""
                while len(hello) < 36 and (piece := conn.recv(36 - len(hello))):
                    hello += piece
                tid = int.from_bytes(hello[:4], "big") if len(hello) == 36 else -1
                if not 0 <= tid < spec.trainer_num or hello != greeting(spec.job, spec.endpoint,
                                                                          tid):
                    conn.close()  # a stranger on our port
                    continue
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(POLL_S)
                link = accept(conn, POLL_S * 4)
            except (OSError, PeerClosed, WireTimeout):
                conn.close()
                continue
            with self._lock:
                if self._stopped:
                    link.close()
                    return
                old = self._conns.pop(tid, None)
                self._conns[tid] = link
            if old is not None:
                old.shutdown()
            thread = threading.Thread(target=self._serve, args=(tid, link), daemon=True,
                                      name=f"pserver-{spec.pserver_id}-trainer-{tid}")
            thread.start()

    def _serve(self, tid: int, conn: Connection) -> None:
        """Answer trainer ``tid``'s requests, one at a time, until it hangs up.

        The arrays of a request may be views into the trainer's shared-memory segment: the
        shard is done with them when it replies (a sync push is consumed by the optimize step
        its reply waits for), and the trainer sends nothing before it has the reply."""
        stop = self._is_stopped
        while not self._stopped:
            try:
                # a trainer may compute for long between requests: wait without a deadline
                header, buf = conn.recv(deadline=float("inf"), stop=stop)
            except (PeerClosed, WireTimeout):
                break
            arrays = unpack_arrays(header["meta"], buf) if header["meta"]["names"] else {}
            try:
                reply, out = self.shard.handle(tid, header, arrays)
                reply = {"ok": True, **reply}
            except Exception as exc:
                if not isinstance(exc, DistributedTrainingError):
                    logger.debug("pserver request failed", exc_info=True)
                reply, out = {"ok": False, "error": _error(exc)}, None
            deadline = time.monotonic() + self.shard.spec.flags.deadline_s
            try:
                conn.send(reply, out, deadline=deadline, stop=stop)
            except (PeerClosed, WireTimeout):
                break
        conn.close()

    def _is_stopped(self) -> bool:
        return self._stopped

    def close(self) -> None:
        """Stop accepting, close every connection (wakes the trainers' reads) and the threads."""
        with self._lock:
            self._stopped = True
            conns = list(self._conns.values())
            self._conns.clear()
        self._listener.close()
        for conn in conns:
            conn.shutdown()
        # no join: close() may run on the worker's event loop; the threads notice within POLL_S
