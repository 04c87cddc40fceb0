"""On a TLS Dask cluster (``Security``, ``tls://``) the direct data paths use TLS with the
cluster's certificates: the pserver wire and the ring's links, trained end to end, and the wire
itself with payloads larger than one TLS record."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.security import Security

from dask_fluid.distributed import DistributedTrainingError, train_collective, train_pserver
from dask_fluid.distributed.collective import links
from dask_fluid.distributed.comm import wire
from dask_fluid.distributed.comm.auth import client_handshake, server_handshake
from dask_fluid.distributed.comm.rpc import unpack_arrays
from dask_fluid.distributed.comm.tls import TlsContexts
from dask_fluid.models import mlp

pytest.importorskip("cryptography", reason="Security.temporary() needs the cryptography package")

SECRET = bytes(range(32))


@pytest.fixture(scope="module")
def security():
    return Security.temporary()


@pytest.fixture(scope="module")
def tls_client(security):
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, security=security,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster, security=security) as client:
        client.wait_for_workers(2, timeout=60)
        yield client


def _contexts(security: Security) -> TlsContexts:
    return TlsContexts(security.get_listen_args("worker")["ssl_context"],
                       security.get_connection_args("worker")["ssl_context"])


def _data(n: int = 256) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 64)).astype(np.float32), rng.integers(0, 10, (n, 1))


def _workers(client) -> list[str]:
    return sorted(client.scheduler_info(n_workers=-1)["workers"])


def test_pserver_training_uses_tls_sockets_and_equals_the_plain_cluster(tls_client, dist_client):
    x, y = _data()
    parts = [{"x": x[:128], "y": y[:128]}, {"x": x[128:], "y": y[128:]}]
    w = _workers(tls_client)
    assert all(a.startswith("tls://") for a in w)
    spec = mlp()
    result = train_pserver(tls_client, spec.main, spec.startup, parts, trainers=w, pservers=w,
                           batch_size=16, shuffle=False)
    lines = [ln for ln in result.summary.splitlines() if ln.startswith("pserver ")]
    assert len(lines) == 2 and all("(tls data path)" in ln for ln in lines), lines
    plain = mlp()
    pw = _workers(dist_client)[:2]
    expected = train_pserver(dist_client, plain.main, plain.startup, parts, trainers=pw,
                             pservers=pw, batch_size=16, shuffle=False)
    for name, value in expected.params.items():
        np.testing.assert_array_equal(result.params[name], value, err_msg=name)


def test_collective_ring_uses_tls_links_and_equals_the_plain_cluster(tls_client, dist_client):
    x, y = _data()
    spec = mlp()
    result = train_collective(tls_client, spec.main, spec.startup, (x, y),
                              trainers=_workers(tls_client), backend="ring", batch_size=16)
    assert "backend ring (tls data path)" in result.summary, result.summary
    plain = mlp()
    expected = train_collective(dist_client, plain.main, plain.startup, (x, y),
                                trainers=_workers(dist_client)[:2], backend="ring",
                                batch_size=16)
    for name, value in expected.params.items():
        np.testing.assert_array_equal(result.params[name], value, err_msg=name)


def test_the_wire_carries_large_payloads_over_tls(security):
    tls = _contexts(security)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    payload = {"a": np.arange(3_000_000, dtype=np.float32), "b": np.ones((7, 3))}
    got: dict = {}

    def serve():
        conn, _ = server.accept()
        conn.settimeout(5)
        conn = tls.server.wrap_socket(conn, server_side=True)
        server_handshake(conn, SECRET, "ep", 1)
        conn.settimeout(wire.POLL_S)
        link = wire.accept(conn, 10)
        # the socket itself, not shared memory (which carries large payloads on one machine)
        header, buf = wire.recv_message(link.sock, deadline=time.monotonic() + 30)
        got["header"], got["buf"] = header, buf
        wire.send_message(link.sock, {"ok": True}, {"back": np.arange(10)},
                          deadline=time.monotonic() + 30)
        link.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        link = wire.connect("127.0.0.1", port, lambda s: client_handshake(s, SECRET, "ep", 0),
                            10, tls)
        assert isinstance(link.sock, ssl.SSLSocket)
        wire.send_message(link.sock, {"method": "push"}, payload, deadline=time.monotonic() + 30)
        reply, back = wire.recv_message(link.sock, deadline=time.monotonic() + 30)
        link.close()
    finally:
        t.join(30)
        server.close()
    arrays = unpack_arrays(got["header"]["meta"], got["buf"])
    np.testing.assert_array_equal(arrays["a"], payload["a"])
    np.testing.assert_array_equal(arrays["b"], payload["b"])
    assert reply["ok"]
    np.testing.assert_array_equal(unpack_arrays(reply["meta"], back)["back"], np.arange(10))


def test_a_tls_listener_refuses_a_plain_dialler_and_takes_a_tls_one(security):
    tls = _contexts(security)
    listener = links.Listener(links.bind("127.0.0.1", 0, "rank0"), SECRET, "rank0", 2, tls=tls)
    host, port = listener.address
    try:
        with pytest.raises(DistributedTrainingError, match="refused the greeting"):
            links.dial(host, port, links.hello(SECRET, "ring", "rank0", 1), 5, peer="rank0",
                       me="plain", retry=False)
        sock = links.dial(host, port, links.hello(SECRET, "ring", "rank0", 1), 5, peer="rank0",
                          me="rank1", retry=False, tls=tls)
        conn = listener.take("ring", 1, 5, "rank1")
        sock.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        sock.close()
        conn.close()
    finally:
        listener.close()


def _export(directory, dask_worker=None):
    from dask_fluid.distributed.comm.tls import export_env

    return export_env(dask_worker, directory)


def test_a_launched_role_gets_its_workers_tls_identity(tls_client, tmp_path, monkeypatch):
    """What ``dask-fluid launch`` hands a role's process: files of the worker's certificate,
    key and CA, 0600, from which the process's own listeners and dialers build TLS."""
    from dask_fluid.distributed.comm.tls import TLS_ENV, env_contexts

    w = _workers(tls_client)[0]
    env = tls_client.run(_export, str(tmp_path), workers=[w])[w]
    assert sorted(env) == sorted(TLS_ENV)
    for path in env.values():
        assert (tmp_path / path.rsplit("/", 1)[1]).stat().st_mode & 0o077 == 0
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    tls = env_contexts()
    listener = links.Listener(links.bind("127.0.0.1", 0, "r0"), SECRET, "r0", 2, tls=tls)
    try:
        sock = links.dial(*listener.address, links.hello(SECRET, "ring", "r0", 1), 5, peer="r0",
                          me="r1", retry=False, tls=tls)
        assert isinstance(sock, ssl.SSLSocket)
        sock.close()
        listener.take("ring", 1, 5, "r1").close()
    finally:
        listener.close()
    monkeypatch.delenv(TLS_ENV[2])
    with pytest.raises(ValueError, match="DASK_FLUID_TLS_KEY"):
        env_contexts()
