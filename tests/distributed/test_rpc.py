"""Worker services, worker-to-worker calls, errors across the wire, abort, mailbox, packing."""

import asyncio
import concurrent.futures
import pickle
import sys
import threading
import time
import uuid

import cloudpickle
import numpy as np
import pytest
from distributed import get_worker

from dask_fluid.distributed.comm import rpc
from dask_fluid.distributed.errors import (
    DeadlineExceededError,
    JobAbortedError,
    RemoteError,
    ServiceNotFoundError,
)

# the services and functions below run on the workers
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Echo(rpc.Service):
    """A service with every kind of method the handler supports."""

    def __init__(self):
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="echo-send")
        self.closed = False

    def executor_for(self, method):
        return self.pool if method == "threaded" else None

    def echo(self, x=None):
        return x

    async def async_echo(self, x=None):
        await asyncio.sleep(0)
        return x

    def threaded(self):
        return threading.current_thread().name

    def loop_thread(self):
        return threading.current_thread().name

    def fail(self, text):
        raise ValueError(text)

    async def slow(self, seconds):
        await asyncio.sleep(seconds)
        return seconds

    def close(self):
        self.closed = True
        self.pool.shutdown(wait=False)


def _attach(job, name, dask_worker):
    rpc.attach_service(dask_worker, job, name, Echo())


def _detach(job, dask_worker):
    rpc.detach_job(dask_worker, job)


@pytest.fixture
def job(dist_client, workers):
    """A fresh job with an Echo service on every worker, detached afterwards."""
    job = uuid.uuid4().hex
    dist_client.run(_attach, job, "echo")
    yield job
    dist_client.run(_detach, job)


def test_plugin_is_registered_once_with_both_handlers(dist_client, workers):
    rpc.ensure_plugin(dist_client)  # again: a no-op

    def handlers(dask_worker):
        return sorted(h for h in dask_worker.handlers if h.startswith("dask_fluid"))

    assert dist_client.run(handlers) == {w: [rpc.ABORT_HANDLER, rpc.CALL_HANDLER] for w in workers}


def test_call_from_async_code_on_a_worker(dist_client, workers, job):
    async def caller(peer, dask_worker):
        kw = dict(deadline_s=10, role="pserver")
        array = np.arange(12, dtype=np.float32).reshape(3, 4)
        return {
            "tuple": await rpc.call(dask_worker, peer, job, "echo", "echo", x=(1, "a"), **kw),
            "array": await rpc.call(dask_worker, peer, job, "echo", "async_echo", x=array, **kw),
            "none": await rpc.call(dask_worker, peer, job, "echo", "echo", **kw),
        }

    out = dist_client.run(caller, workers[1], workers=[workers[0]])[workers[0]]
    assert out["tuple"] == (1, "a")  # tuples stay tuples
    np.testing.assert_array_equal(out["array"], np.arange(12, dtype=np.float32).reshape(3, 4))
    assert out["array"].dtype == np.float32
    assert out["none"] is None


def test_call_sync_from_a_task_thread_and_threaded_methods(dist_client, workers, job):
    def task(peer):
        worker = get_worker()
        kw = dict(deadline_s=10, role="pserver")
        return (
            rpc.call_sync(worker, peer, job, "echo", "echo", x=[1, 2], **kw),
            rpc.call_sync(worker, peer, job, "echo", "threaded", **kw),
            rpc.call_sync(worker, peer, job, "echo", "loop_thread", **kw),
        )

    future = dist_client.submit(task, workers[2], workers=[workers[0]], pure=False)
    echoed, threaded, loop_thread = future.result()
    assert echoed == [1, 2]
    assert threaded.startswith("echo-send")  # ran in the service's own pool
    assert not loop_thread.startswith("echo-send")  # plain sync methods run on the event loop


def test_remote_exception_becomes_remote_error(dist_client, workers, job):
    def task(peer):
        try:
            rpc.call_sync(get_worker(), peer, job, "echo", "fail", deadline_s=10, role="pserver",
                          endpoint="127.0.0.1:6174", step=7, text="bad shard")
        except RemoteError as exc:
            return pickle.dumps(exc)

    exc = pickle.loads(dist_client.submit(task, workers[1], workers=[workers[0]]).result())
    assert isinstance(exc, RemoteError)
    assert (exc.role, exc.endpoint, exc.step) == ("pserver", "127.0.0.1:6174", 7)
    assert exc.remote_type == "builtins.ValueError"
    assert exc.remote_message == "bad shard"
    assert "in fail" in exc.remote_traceback and "ValueError: bad shard" in exc.remote_traceback
    assert "pserver 127.0.0.1:6174 (step 7)" in str(exc)


def test_missing_service_and_private_methods(dist_client, workers, job):
    async def caller(peer, dask_worker):
        errors = []
        for service, method in [("nope", "echo"), ("echo", "_secret"), ("echo", "missing")]:
            try:
                await rpc.call(dask_worker, peer, job, service, method, deadline_s=10,
                               role="rank")
            except Exception as exc:
                errors.append((type(exc).__name__, str(exc)))
        return errors

    errors = dist_client.run(caller, workers[1], workers=[workers[0]])[workers[0]]
    assert errors[0][0] == ServiceNotFoundError.__name__ and "'nope'" in errors[0][1]
    assert errors[1][0] == RemoteError.__name__ and "private method '_secret'" in errors[1][1]
    assert errors[2][0] == RemoteError.__name__ and "no method 'missing'" in errors[2][1]


def test_deadline(dist_client, workers, job):
    async def caller(peer, dask_worker):
        start = time.perf_counter()
        try:
            await rpc.call(dask_worker, peer, job, "echo", "slow", deadline_s=0.3, role="pserver",
                           step=2, seconds=5)
        except DeadlineExceededError as exc:
            return time.perf_counter() - start, str(exc)

    elapsed, message = dist_client.run(caller, workers[1], workers=[workers[0]])[workers[0]]
    assert 0.25 < elapsed < 2.0
    assert "FLAGS_rpc_deadline = 300 ms" in message and "step 2" in message


def test_call_many_returns_in_order_and_raises_the_first_failure(dist_client, workers, job):
    def task(peers):
        worker = get_worker()
        requests = [rpc.Request(p, "echo", {"x": i}) for i, p in enumerate(peers)]
        results = rpc.call_many_sync(worker, job, "echo", requests, deadline_s=10, role="pserver")
        bad = [rpc.Request(peers[0], "slow", {"seconds": 5}),
               rpc.Request(peers[1], "fail", {"text": "shard 1 broke"}, endpoint="ep1")]
        start = time.perf_counter()
        try:
            rpc.call_many_sync(worker, job, "echo", bad, deadline_s=10, role="pserver", step=3)
        except RemoteError as exc:
            return results, exc.endpoint, time.perf_counter() - start

    results, endpoint, elapsed = dist_client.submit(
        task, workers[1:], workers=[workers[0]]).result()
    assert results == [0, 1]
    assert endpoint == "ep1"
    assert elapsed < 2.0  # did not wait for the slow call


def test_abort_from_the_client_wakes_a_blocked_task(dist_client, workers):
    job = uuid.uuid4().hex

    def blocked():
        worker = get_worker()
        mailbox = rpc.attach_service(worker, job, "mbox", rpc.Mailbox())
        start = time.perf_counter()
        try:
            mailbox.get(("never",), timeout=30, endpoint="peer")
        except JobAbortedError as exc:
            return time.perf_counter() - start, str(exc)
        finally:
            rpc.detach_job(worker, job)

    future = dist_client.submit(blocked, workers=[workers[0]], pure=False)
    while not dist_client.run(lambda dask_worker: job in rpc._registry(dask_worker),
                              workers=[workers[0]])[workers[0]]:
        time.sleep(0.02)
    rpc.abort_job_sync(dist_client, [workers[0]], job, "trainer 1 ran out of memory")
    elapsed, message = future.result(timeout=10)
    assert elapsed < 5
    assert "trainer 1 ran out of memory" in message


def test_abort_reaches_services_attached_later_and_calls_fail_fast(dist_client, workers):
    job = uuid.uuid4().hex

    async def abort_then_attach(peer, dask_worker):
        await rpc.abort_job(dask_worker, [peer, dask_worker.address], job, "rank 0 died")
        return rpc.job_aborted(dask_worker, job)

    def late_attach(dask_worker):
        mailbox = rpc.attach_service(dask_worker, job, "mbox", rpc.Mailbox())
        try:
            mailbox.get("x", timeout=5)
        except JobAbortedError as exc:
            return str(exc)

    async def call_aborted(peer, dask_worker):
        try:
            await rpc.call(dask_worker, peer, job, "mbox", "put", deadline_s=5, role="rank",
                           tag="x")
        except JobAbortedError as exc:
            return exc.role, exc.endpoint

    assert dist_client.run(abort_then_attach, workers[1],
                           workers=[workers[0]])[workers[0]] == "rank 0 died"
    assert "rank 0 died" in dist_client.run(late_attach, workers=[workers[1]])[workers[1]]
    role_endpoint = dist_client.run(call_aborted, workers[1], workers=[workers[0]])[workers[0]]
    assert role_endpoint == ("rank", workers[1])
    dist_client.run(_detach, job)


def test_attach_twice_and_detach_closes(dist_client, workers):
    job = uuid.uuid4().hex

    def check(dask_worker):
        echo = rpc.attach_service(dask_worker, job, "echo", Echo())
        with pytest.raises(ValueError, match="already has a service 'echo'"):
            rpc.attach_service(dask_worker, job, "echo", Echo())
        assert rpc.get_service(dask_worker, job, "echo") is echo
        rpc.detach_job(dask_worker, job)
        with pytest.raises(ServiceNotFoundError):
            rpc.get_service(dask_worker, job, "echo")
        return echo.closed and job not in rpc._registry(dask_worker)

    assert dist_client.run(check, workers=[workers[0]])[workers[0]]


# -- Mailbox, without a cluster ------------------------------------------------------------------


def test_mailbox_delivers_by_tag_in_order():
    box = rpc.Mailbox()
    box.put((1, "rs", 0), "a")
    box.put((1, "rs", 0), "b")
    box.put([2, "rs", 0], "c")  # a tag that went through msgpack comes back as a list
    assert box.pending() == 3
    assert box.get((1, "rs", 0), timeout=1) == "a"
    assert box.get((1, "rs", 0), timeout=1) == "b"
    assert box.get((2, "rs", 0), timeout=1) == "c"
    assert box.pending() == 0


def test_mailbox_get_from_a_thread_wakes_on_put():
    box = rpc.Mailbox()
    threading.Timer(0.05, box.put, args=("t", 42)).start()
    assert box.get("t", timeout=5) == 42


def test_mailbox_timeout_names_the_peer():
    box = rpc.Mailbox()
    start = time.perf_counter()
    with pytest.raises(DeadlineExceededError, match="rank tcp://peer:1 \\(step 4\\)") as info:
        box.get("t", timeout=0.1, endpoint="tcp://peer:1", step=4)
    assert time.perf_counter() - start < 1
    assert info.value.deadline_ms == 100


def test_mailbox_abort_wakes_a_blocked_thread():
    box = rpc.Mailbox()
    threading.Timer(0.05, box.abort, args=("rank 2 lost",)).start()
    start = time.perf_counter()
    with pytest.raises(JobAbortedError, match="rank 2 lost"):
        box.get("t", timeout=10)
    assert time.perf_counter() - start < 2
    box.close()
    with pytest.raises(RuntimeError, match="closed"):
        box.put("t", 1)


# -- packing ---------------------------------------------------------------------------------------


def test_pack_unpack_round_trip_with_zero_copy_views():
    rng = np.random.default_rng(0)
    arrays = {
        "w": rng.standard_normal((64, 256)).astype(np.float32),
        "b": rng.standard_normal(256),
        "step": np.array(7, dtype=np.int64),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "odd": np.arange(5, dtype=np.int8),
        "strided": rng.standard_normal((6, 4))[:, ::2],
    }
    meta, buffer = rpc.pack_arrays(arrays)
    assert buffer.dtype == np.uint8 and buffer.ndim == 1
    assert all(offset % 64 == 0 for offset in meta["offsets"])
    out = rpc.unpack_arrays(meta, buffer)
    assert list(out) == list(arrays)
    for name, array in arrays.items():
        assert out[name].dtype == array.dtype and out[name].shape == array.shape
        np.testing.assert_array_equal(out[name], array)
        assert np.shares_memory(out[name], buffer) or out[name].size == 0


def test_packed_arrays_travel_as_one_buffer(dist_client, workers, job):
    arrays = {f"g{i}": np.full(i + 1, i, dtype=np.float32) for i in range(20)}

    async def caller(peer, dask_worker):
        meta, buffer = rpc.pack_arrays(arrays)
        meta2, buffer2 = await rpc.call(dask_worker, peer, job, "echo", "echo", deadline_s=10,
                                        role="pserver", x=(meta, buffer))
        return rpc.unpack_arrays(meta2, buffer2)

    out = dist_client.run(caller, workers[1], workers=[workers[0]])[workers[0]]
    for name, array in arrays.items():
        np.testing.assert_array_equal(out[name], array)
