"""The pserver shard in-process (no cluster): sync barrier, abort, the Dask handler and the
direct data path, DC-ASGD backups, thread pools sized by the FLAGS_rpc_*_thread_num flags,
checkpoint files."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import time

import numpy as np
import pytest

from dask_fluid.distributed.comm import wire
from dask_fluid.distributed.comm.auth import client_handshake
from dask_fluid.distributed.comm.rpc import pack_arrays, unpack_arrays
from dask_fluid.distributed.errors import DeadlineExceededError, JobAbortedError
from dask_fluid.distributed.pserver.shard import PServerShard, Schedule, ServeOptions
from dask_fluid.executor import Executor, Scope
from dask_fluid.flags import RPCFlags
from dask_fluid.transpiler import DistributeTranspiler

from ..transpiler.models import config, reference_mlp

EP = "127.0.0.1:6174"


def _spec(trainers: int, sync: bool, dc: bool = False, **kw):
    """A factory of shards of the reference MLP's one pserver (3 steps per trainer, 1 epoch),
    and the gradient names."""
    main, startup, _ = reference_mlp()
    t = DistributeTranspiler(config(enable_dc_asgd=dc))
    t.transpile(0, program=main, startup_program=startup, pservers=EP, trainers=trainers,
                sync_mode=sync)
    ps_main, ps_startup = t.get_pserver_programs(EP)
    kw.setdefault("schedule", Schedule((3,) * trainers, 1))

    def make(loop=None) -> PServerShard:
        scope = Scope()
        Executor().run(ps_startup, scope=scope)
        options = ServeOptions(secret=b"job", trainer_names=[f"w{i}" for i in range(trainers)],
                               bind=("127.0.0.1", 0), loop=loop, **kw)
        return PServerShard(ps_main, scope, options)

    return make, [pp.grad for pp in t.plan.params]


def _grads(spec_names: list[str], suffix: str, value: float) -> dict:
    shapes = {"fc_0.w_0@GRAD": (64, 256), "fc_1.w_0@GRAD": (256, 256),
              "fc_2.w_0@GRAD": (256, 10), "fc_0.b_0@GRAD": (256,), "fc_1.b_0@GRAD": (256,),
              "fc_2.b_0@GRAD": (10,)}
    return {n + suffix: np.full(shapes[n], value, np.float32) for n in spec_names}


def _push_pull(shard, tid, round_index, grads, want):
    return shard.reply(tid, shard.push(tid, round_index, grads), tuple(want))


def test_sync_push_waits_for_every_trainer_then_averages():
    spec, grads = _spec(2, True)
    shard = spec()
    w0 = shard.scope.get("fc_0.w_0").copy()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(_push_pull, shard, 0, 0, _grads(grads, ".trainer_0", 1.0),
                            ["fc_0.w_0"])
        time.sleep(0.05)
        assert not first.done()  # the barrier waits for trainer 1
        second = _push_pull(shard, 1, 0, _grads(grads, ".trainer_1", 3.0), ["fc_0.w_0"])
        np.testing.assert_array_equal(first.result(5)["fc_0.w_0"], second["fc_0.w_0"])
    np.testing.assert_allclose(second["fc_0.w_0"], w0 - 0.1 * 2.0, rtol=1e-6)  # mean of 1, 3
    with pytest.raises(ValueError, match="already at step 1"):
        shard.push(0, 0, _grads(grads, ".trainer_0", 1.0))
    shard.close()


def test_a_push_never_waits_for_other_trainers_only_the_reply_does():
    # a trainer pushes to every pserver before it waits for any reply: with two pservers on
    # its own worker, waiting inside the first push would deadlock the step
    spec, grads = _spec(2, True)
    shard = spec()
    release = shard.push(0, 0, _grads(grads, ".trainer_0", 1.0))  # returns at once
    assert release == 0 and shard.round == 0
    shard.push(1, 0, _grads(grads, ".trainer_1", 1.0))  # completes the step: optimizes here
    assert shard.round == 1 and shard.reply(0, release, ("fc_2.b_0",))["fc_2.b_0"].shape == (10,)
    shard.close()


def test_an_abort_wakes_a_waiting_trainer_with_the_reason():
    spec, grads = _spec(2, True)
    shard = spec()
    release = shard.push(0, 0, _grads(grads, ".trainer_0", 1.0))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(shard.reply, 0, release, ("fc_2.b_0",))
        time.sleep(0.05)
        shard.abort("trainer 1 died")
        with pytest.raises(JobAbortedError, match="trainer 1 died"):
            waiting.result(5)
    shard.close()


def test_prefetch_of_a_parameter_block_gives_its_rows_and_refuses_others():
    # a remote-prefetch lookup asks for rows of one of this pserver's blocks by name
    spec, _ = _spec(1, True)
    shard = spec()
    w = shard.scope.get("fc_1.w_0")
    np.testing.assert_array_equal(shard.prefetch_sync(np.array([[3], [0], [3]]), "fc_1.w_0"),
                                  w[[3, 0, 3]])
    with pytest.raises(ValueError, match="optimizes no such parameter block"):
        shard.prefetch_sync(np.array([1]), "fc_9.w_0")
    with pytest.raises(ValueError, match=r"rows must lie in \[0, 256\), got 0\.\.256"):
        shard.prefetch_sync(np.array([0, 256]), "fc_1.w_0")
    with pytest.raises(ValueError, match="rows must lie"):
        shard.prefetch_sync(np.array([-1]), "fc_1.w_0")
    shard.close()


def test_dask_handler_answers_with_packed_copies():
    spec, grads = _spec(1, True)

    async def main():
        shard = spec(asyncio.get_running_loop())
        meta, buf = pack_arrays(_grads(grads, "", 1.0))
        header, rmeta, rbuf = await shard.request(
            0, {"method": "push_pull", "round": 0, "want": ["fc_2.b_0"], "sparse": {}},
            meta, buf)
        got = unpack_arrays(rmeta, rbuf)["fc_2.b_0"]
        assert header == {}
        assert not np.shares_memory(got, shard.scope.get("fc_2.b_0"))
        np.testing.assert_array_equal(got, shard.scope.get("fc_2.b_0"))
        shard.close()

    asyncio.run(main())


def test_direct_data_path_serves_greeted_trainers_and_drops_strangers():
    spec, grads = _spec(1, True)
    shard = spec()
    shard.start_server()
    host, port = shard.endpoint_info()["host"], shard.endpoint_info()["port"]
    stranger = socket.create_connection((host, port), timeout=5)
    assert len(stranger.recv(16)) == 16  # the challenge
    stranger.sendall(b"\0" * 52)
    assert stranger.recv(1) == b""  # the shard hung up on it
    stranger.close()
    conn = wire.connect(host, port, lambda s: client_handshake(s, b"job", EP, 0), 5)
    try:
        g = _grads(grads, "", 1.0)
        before = shard.scope.get("fc_2.b_0").copy()
        conn.send({"method": "push_pull", "round": 0, "want": ["fc_2.b_0"], "sparse": {}}, g,
                  deadline=time.monotonic() + 5)
        header, buf = conn.recv(deadline=time.monotonic() + 5)
        assert header["ok"]
        np.testing.assert_allclose(unpack_arrays(header["meta"], buf)["fc_2.b_0"],
                                   before - 0.1, rtol=1e-6)
        # a bad request comes back as an error reply, and the connection stays usable
        conn.send({"method": "push_pull", "round": 0, "want": [], "sparse": {}}, g,
                  deadline=time.monotonic() + 5)
        header, _ = conn.recv(deadline=time.monotonic() + 5)
        assert not header["ok"] and "already at step 1" in header["error"]["text"]
        conn.send({"method": "complete"}, None, deadline=time.monotonic() + 5)
        assert conn.recv(deadline=time.monotonic() + 5)[0]["ok"]
    finally:
        conn.close()
        shard.close()
    shard.serve()
    assert set(shard.param_names) <= shard.state_copy().keys()


def test_dc_asgd_pull_by_trainer_i_refreshes_its_backup():
    spec, grads = _spec(2, False, dc=True)
    shard = spec()
    p0 = shard.scope.get("fc_2.b_0").copy()
    np.testing.assert_array_equal(shard.scope.get("fc_2.b_0.trainer_1_bak"), p0)
    _push_pull(shard, 0, 0, _grads(grads, "", 1.0), [])
    p1 = shard.scope.get("fc_2.b_0").copy()
    assert not np.array_equal(p0, p1)
    shard.pull_sync(1, ("fc_2.b_0",))
    np.testing.assert_array_equal(shard.scope.get("fc_2.b_0.trainer_1_bak"), p1)
    np.testing.assert_array_equal(shard.scope.get("fc_2.b_0.trainer_0_bak"), p0)
    shard.close()


def test_thread_pools_follow_the_flags_and_do_the_work():
    flags = RPCFlags(deadline_ms=5000, send_thread_num=3, get_thread_num=2,
                     prefetch_thread_num=5)
    spec, grads = _spec(1, False, flags=flags, inline_bytes=0)
    shard = spec()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: _push_pull(shard, 0, 0, _grads(grads, "", 1.0), ["fc_0.w_0"]),
                      range(8)))
    info = shard.info()
    shard.close()
    assert (info["send_threads"], info["get_threads"], info["prefetch_threads"]) == (3, 2, 5)
    assert 1 <= info["threads_used"]["send"] <= 3 and 1 <= info["threads_used"]["get"] <= 2
    assert info["inline"] is False and info["pushes"] == 8


def test_work_goes_to_the_pools_by_its_own_size():
    """A lookup counts the rows it returns and a sync reply copies nothing: both stay in the
    calling thread under ``inline_bytes`` even though the shard's parameters are over it; an
    update counts the shard's parameters, and a lookup of many rows goes to its pool."""
    row = 256 * 4  # a row of fc_1.w_0, float32
    spec, grads = _spec(1, True, inline_bytes=10 * row)
    shard = spec()
    assert shard.param_bytes > 10 * row
    _push_pull(shard, 0, 0, _grads(grads, "", 1.0), ["fc_0.w_0"])
    shard.prefetch_sync(np.array([[3], [0], [3]]), "fc_1.w_0")
    used = shard.info()["threads_used"]
    assert (used["send"], used["get"], used["prefetch"]) == (1, 0, 0)
    rows = shard.prefetch_sync(np.arange(100).reshape(-1, 1), "fc_1.w_0")
    assert rows.shape == (100, 256) and shard.info()["threads_used"]["prefetch"] == 1
    shard.close()

    spec, grads = _spec(1, False, inline_bytes=10 * row)  # async replies are copies
    shard = spec()
    _push_pull(shard, 0, 0, _grads(grads, "", 1.0), ["fc_1.w_0"])  # 256 rows
    assert shard.info()["threads_used"]["get"] == 1
    shard.close()


def test_checkpoint_files_are_complete_and_atomic(tmp_path):
    spec, grads = _spec(1, True, checkpoint_dir=str(tmp_path), checkpoint_every=2)
    shard = spec()
    for step in range(3):
        _push_pull(shard, 0, step, _grads(grads, "", 1.0), [])
    shard.close()
    files = sorted(p.name for p in tmp_path.rglob("*"))
    assert files == ["pserver-0.json", "pserver-0.npz", "round-00000001"]
    doc = json.loads((tmp_path / "round-00000001" / "pserver-0.json").read_text())
    assert doc["round"] == 1 and doc["epoch"] == 0 and doc["step"] == 1
    assert "learning_rate_0" in doc["vars"] and "fc_0.w_0@GRAD" not in doc["vars"]


def _idle_shard(deadline_ms: int, **kw) -> PServerShard:
    """A pserver that holds nothing: the reference MLP's six parameters, unsliced, over seven
    pservers."""
    main, startup, _ = reference_mlp()
    eps = [f"127.0.0.1:{6174 + i}" for i in range(7)]
    t = DistributeTranspiler(config(slice_var_up=False))
    t.transpile(0, program=main, startup_program=startup, pservers=",".join(eps), trainers=2)
    held = {ep for pp in t.plan.params for ep in pp.endpoints}
    ps_main, ps_startup = t.get_pserver_programs(next(ep for ep in eps if ep not in held))
    scope = Scope()
    Executor().run(ps_startup, scope=scope)
    options = ServeOptions(secret=b"job", trainer_names=["w0", "w1"], bind=("127.0.0.1", 0),
                           flags=RPCFlags(deadline_ms=deadline_ms), **kw)
    return PServerShard(ps_main, scope, options)


def test_a_pserver_holding_no_block_fails_when_its_trainers_go_silent():
    shard = _idle_shard(1500)
    assert shard.idle and shard.state_names() == []
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError, match="heard nothing from trainer 0"):
        shard.serve()
    assert time.monotonic() - start < 10
    shard.close()


def test_a_pserver_holding_no_block_lives_on_pings_and_ends_on_complete():
    shard = _idle_shard(1500)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        serving = pool.submit(shard.serve)
        for _ in range(8):  # 2.4 s of pings every 0.3 s: longer than the deadline
            for tid in (0, 1):
                assert shard.handle(tid, {"method": "ping"}, {}) == ({}, None)
            time.sleep(0.3)
        assert not serving.done()
        shard.complete(0)
        shard.complete(1)
        serving.result(5)
    assert shard.info()["idle"] and shard.info()["pushes"] == 0
    shard.close()


def test_an_idle_pserver_is_recorded_once_and_a_working_one_clears_a_stale_record(tmp_path):
    shard = _idle_shard(60_000, checkpoint_dir=str(tmp_path), checkpoint_every=1,
                        n_pservers=7)
    marker = tmp_path / f"idle-pserver-{shard.pserver_id}.json"
    assert json.loads(marker.read_text())["idle"] is True
    shard.close()
    # the same id holding blocks in a later job: the record must go
    spec, _ = _spec(1, True, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    (tmp_path / "idle-pserver-0.json").write_text(marker.read_text())
    working = spec()
    assert not (tmp_path / "idle-pserver-0.json").exists()
    working.close()
