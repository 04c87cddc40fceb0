"""The pserver shard in-process (no cluster): sync barrier, DC-ASGD backups, thread pools sized
by the FLAGS_rpc_*_thread_num flags, checkpoint files."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from dask_fluid.distributed.pserver import PServerShard, ShardSpec, encode_tensors
from dask_fluid.flags import RPCFlags
from dask_fluid.transpiler import DistributeTranspiler

from ..transpiler.models import config, reference_mlp

EP = "127.0.0.1:6174"


def _spec(trainers: int, sync: bool, dc: bool = False, **kw) -> tuple[ShardSpec, list[str]]:
    main, startup, _ = reference_mlp()
    t = DistributeTranspiler(config(enable_dc_asgd=dc))
    t.transpile(0, program=main, startup_program=startup, pservers=EP, trainers=trainers,
                sync_mode=sync)
    ps_main, ps_startup = t.get_pserver_programs(EP)
    spec = ShardSpec("job", EP, 0, 1, ps_main.to_json(), ps_startup.to_json(), trainers,
                     [f"w{i}" for i in range(trainers)], [3] * trainers, 1, sync, **kw)
    return spec, [pp.grad for pp in t.plan.params]


def _grads(spec_names: list[str], suffix: str, value: float) -> dict:
    shapes = {"fc_0.w_0@GRAD": (64, 256), "fc_1.w_0@GRAD": (256, 256),
              "fc_2.w_0@GRAD": (256, 10), "fc_0.b_0@GRAD": (256,), "fc_1.b_0@GRAD": (256,),
              "fc_2.b_0@GRAD": (10,)}
    return {n + suffix: np.full(shapes[n], value, np.float32) for n in spec_names}


def test_sync_push_waits_for_every_trainer_then_averages():
    spec, grads = _spec(2, True)

    async def main():
        shard = PServerShard(spec, asyncio.get_running_loop())
        w0 = shard.scope.get("fc_0.w_0").copy()
        meta0, buf0, sp0 = encode_tensors(_grads(grads, ".trainer_0", 1.0))
        first = asyncio.ensure_future(shard.push_pull(0, 0, meta0, buf0, sp0, ["fc_0.w_0"]))
        await asyncio.sleep(0.05)
        assert not first.done()  # the barrier waits for trainer 1
        meta1, buf1, sp1 = encode_tensors(_grads(grads, ".trainer_1", 3.0))
        second = await shard.push_pull(1, 0, meta1, buf1, sp1, ["fc_0.w_0"])
        await first
        from dask_fluid.distributed.rpc import unpack_arrays
        got = unpack_arrays(*second)["fc_0.w_0"]
        np.testing.assert_allclose(got, w0 - 0.1 * 2.0, rtol=1e-6)  # mean of 1 and 3
        with pytest.raises(ValueError, match="already at step 1"):
            await shard.push_pull(0, 0, meta0, buf0, sp0, [])
        shard.close()

    asyncio.run(main())


def test_dc_asgd_pull_by_trainer_i_refreshes_its_backup():
    spec, grads = _spec(2, False, dc=True)

    async def main():
        shard = PServerShard(spec, asyncio.get_running_loop())
        p0 = shard.scope.get("fc_2.b_0").copy()
        np.testing.assert_array_equal(shard.scope.get("fc_2.b_0.trainer_1_bak"), p0)
        meta, buf, sp = encode_tensors(_grads(grads, "", 1.0))
        await shard.push_pull(0, 0, meta, buf, sp, [])
        p1 = shard.scope.get("fc_2.b_0").copy()
        assert not np.array_equal(p0, p1)
        await shard.pull(1, ["fc_2.b_0"])
        np.testing.assert_array_equal(shard.scope.get("fc_2.b_0.trainer_1_bak"), p1)
        np.testing.assert_array_equal(shard.scope.get("fc_2.b_0.trainer_0_bak"), p0)
        shard.close()

    asyncio.run(main())


def test_thread_pools_follow_the_flags_and_do_the_work():
    flags = RPCFlags(deadline_ms=5000, send_thread_num=3, get_thread_num=2,
                     prefetch_thread_num=5)
    spec, grads = _spec(1, False, flags=flags, inline_bytes=0)

    async def main():
        shard = PServerShard(spec, asyncio.get_running_loop())
        meta, buf, sp = encode_tensors(_grads(grads, "", 1.0))
        await asyncio.gather(*(shard.push_pull(0, 0, meta, buf, sp, ["fc_0.w_0"])
                               for _ in range(8)))
        info = shard.info()
        shard.close()
        return info

    info = asyncio.run(main())
    assert (info["send_threads"], info["get_threads"], info["prefetch_threads"]) == (3, 2, 5)
    assert 1 <= info["threads_used"]["send"] <= 3 and 1 <= info["threads_used"]["get"] <= 2
    assert info["inline"] is False and info["pushes"] == 8


def test_checkpoint_files_are_complete_and_atomic(tmp_path):
    spec, grads = _spec(1, True, checkpoint_dir=str(tmp_path), checkpoint_every=2)

    async def main():
        shard = PServerShard(spec, asyncio.get_running_loop())
        meta, buf, sp = encode_tensors(_grads(grads, "", 1.0))
        for step in range(3):
            await shard.push_pull(0, step, meta, buf, sp, [])
        state = {n: shard.scope.get(n).copy() for n in shard.state_names()}
        shard.close()
        return state

    asyncio.run(main())
    files = sorted(p.name for p in tmp_path.rglob("*"))
    assert files == ["pserver-0.json", "pserver-0.npz", "round-00000001"]
    doc = json.loads((tmp_path / "round-00000001" / "pserver-0.json").read_text())
    assert doc["round"] == 1 and doc["epoch"] == 0 and doc["step"] == 1
    assert "learning_rate_0" in doc["vars"] and "fc_0.w_0@GRAD" not in doc["vars"]
