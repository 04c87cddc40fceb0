"""TLS for the direct data paths on clusters whose workers talk TLS (``tls://``).

The pserver wire and the ring's links are plain sockets that the job's tasks open between
workers. On a cluster secured with :class:`distributed.security.Security` they carry the same
mutual TLS as the workers' own comms: each task builds its contexts from its worker's
``security`` (the worker role's certificate, key and CA), so the certificates never travel with
the job. The job secret's challenge-response still runs inside the TLS session: TLS proves the
peer is a worker of the cluster, the secret that it belongs to this job.

Processes that ``dask-fluid launch`` starts on ``tls://`` workers (Fluid's launch style) get
their worker's certificate, key and CA as files in the role's private directory, named by
:data:`TLS_ENV`; their pservers, trainers and rings then use TLS as the Dask tasks do
(:func:`env_contexts`). Processes started by hand use TLS when those variables are set.
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass
from typing import Any

__all__ = ["TLS_ENV", "TlsContexts", "client_side", "env_contexts", "export_env", "server_side",
           "worker_contexts"]

#: the environment variables holding the paths of the CA, the certificate and its key
TLS_ENV = ("DASK_FLUID_TLS_CA_FILE", "DASK_FLUID_TLS_CERT", "DASK_FLUID_TLS_KEY")


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


def export_env(worker: Any, directory: str) -> dict[str, str]:
    """The :data:`TLS_ENV` variables that give a child process ``worker``'s TLS identity (the
    files are written, 0600, under ``directory``); ``{}`` when its comms are not TLS."""
    if not str(worker.address).startswith("tls://"):
        return {}
    worker_contexts(worker)  # the same check and error as the tasks get
    config = worker.security.get_tls_config_for_role("worker")
    env = {}
    for var, field, name in zip(TLS_ENV, ("ca_file", "cert", "key"),
                                ("ca.pem", "cert.pem", "key.pem"), strict=True):
        value = config.get(field) or (config.get("cert") if field == "key" else None)
        if value is None:
            raise RuntimeError(f"worker {worker.address}'s Security has no {field}")
        if "\n" in value:  # PEM text (Security.temporary()), not a path: give the child a file
            path = os.path.join(directory, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(value)
            value = path
        env[var] = value
    return env


def env_contexts() -> TlsContexts | None:
    """The TLS contexts :data:`TLS_ENV` names, or None when they are not set.

    Raises
    ------
    ValueError
        Only some of the variables are set, or their files do not make a certificate chain.
    """
    values = [os.environ.get(var, "") for var in TLS_ENV]
    if not any(values):
        return None
    if not all(values):
        missing = [var for var, v in zip(TLS_ENV, values, strict=True) if not v]
        raise ValueError(f"TLS for the job's direct connections needs all of {TLS_ENV}; "
                         f"{missing} not set")
    from distributed.security import Security

    try:
        security = Security(tls_ca_file=values[0], tls_worker_cert=values[1],
                            tls_worker_key=values[2], require_encryption=True)
        return TlsContexts(security.get_listen_args("worker")["ssl_context"],
                           security.get_connection_args("worker")["ssl_context"])
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"the TLS files in {TLS_ENV} do not load: {exc}") from exc


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
