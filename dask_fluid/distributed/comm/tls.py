"""TLS for the direct data paths on clusters whose workers talk TLS (``tls://``).

The pserver wire and the ring's links are plain sockets that the job's tasks open between
workers. On a cluster secured with :class:`distributed.security.Security` they carry the same
mutual TLS as the workers' own comms: each task builds its contexts from its worker's
``security`` (the worker role's certificate, key and CA), so the certificates never travel with
the job. The job secret's challenge-response still runs inside the TLS session: TLS proves the
peer is a worker of the cluster, the secret that it belongs to this job.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any

__all__ = ["TlsContexts", "client_side", "server_side", "worker_contexts"]


@dataclass(frozen=True)
class TlsContexts:
    """The contexts a task accepts (``server``) and dials (``client``) direct connections
    with."""

    server: ssl.SSLContext
    client: ssl.SSLContext


def worker_contexts(worker: Any) -> TlsContexts | None:
    """The TLS contexts of ``worker``'s cluster, or None when its comms are not TLS.

    Raises
    ------
    RuntimeError
        A ``tls://`` worker whose ``security`` has no worker certificate (it could not reach
        its peers over TLS either).
    """
    if not str(worker.address).startswith("tls://"):
        return None
    security = worker.security
    server = security.get_listen_args("worker").get("ssl_context")
    client = security.get_connection_args("worker").get("ssl_context")
    if server is None or client is None:
        raise RuntimeError(
            f"worker {worker.address} uses tls:// but its Security has no worker certificate "
            "and CA (tls_ca_file, tls_worker_cert, tls_worker_key): set them so the job's direct "
            "connections can use TLS too")
    return TlsContexts(server, client)


def server_side(sock: socket.socket, tls: TlsContexts | None) -> socket.socket:
    """``sock``, accepted, with the TLS handshake done when ``tls`` (its timeout bounds it)."""
    if tls is None:
        return sock
    try:
        return tls.server.wrap_socket(sock, server_side=True)
    except ssl.SSLError as exc:
        sock.close()
        raise ConnectionError(f"TLS handshake refused: {exc}") from None


def client_side(sock: socket.socket, tls: TlsContexts | None) -> socket.socket:
    """``sock``, connected, with the TLS handshake done when ``tls`` (its timeout bounds it)."""
    if tls is None:
        return sock
    try:
        return tls.client.wrap_socket(sock)
    except ssl.SSLError as exc:
        sock.close()
        raise ConnectionError(f"the TLS handshake failed: {exc}") from None
