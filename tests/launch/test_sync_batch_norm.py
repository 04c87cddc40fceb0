"""``BuildStrategy.sync_batch_norm`` over nccl2 trainers (Fluid 1.8's sync_batch_norm ops): two
trainers in threads, each on half of every batch, end with the parameters and moving statistics
of one process trained with batch norm over the whole batch; without it they do not.
"""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.ops.registry import to_host

from .. import strict_cupy
from . import cluster

STEPS = 3


def _net(layout: str):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.layers.data("img", [3, 6, 6])
        y = fluid.layers.data("y", [1], dtype="int64")
        conv = fluid.layers.conv2d(img, 4, 3)
        if layout == "NHWC":
            conv = fluid.layers.transpose(conv, [0, 2, 3, 1])
        bn = fluid.layers.batch_norm(conv, act="relu", data_layout=layout)
        h = fluid.layers.fc(bn, 8)
        bn2 = fluid.layers.batch_norm(h)  # [N, C]: the channels are the last axis
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(bn2, 3), y))
        fluid.optimizer.Momentum(0.1, momentum=0.9).minimize(loss)
    return main, startup, loss


def _batches():
    rng = np.random.RandomState(2)
    # the halves differ on purpose: per-trainer statistics would not be the global ones
    out = []
    for _ in range(STEPS):
        img = rng.normal(size=(8, 3, 6, 6)).astype("float32")
        img[4:] = img[4:] * 3.0 + 1.5
        out.append((img, rng.randint(0, 3, size=(8, 1)).astype("int64")))
    return out


def _state(scope, main):
    names = [v.name for v in main.global_block().vars.values() if v.persistable
             and v.name in scope and hasattr(scope.get(v.name), "shape")]
    return {n: np.array(to_host(scope.get(n))) for n in names}


def _local(layout: str) -> dict:
    main, startup, _ = _net(layout)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for img, y in _batches():
        exe.run(main, feed={"img": img, "y": y}, scope=scope)
    return _state(scope, main)


def _two_trainers(layout: str, sync: bool, monkeypatch, endpoints: list[str],
                  place=None) -> list[dict]:
    monkeypatch.setenv("DASK_FLUID_JOB_SECRET", "sync-bn")

    def programs(rank: int):
        main, startup, loss = _net(layout)
        return main, startup, cluster.nccl2_trainer(main, startup, loss, rank, endpoints,
                                                    sync_batch_norm=sync)

    built = [programs(rank) for rank in range(2)]  # program_guard is process-wide
    def trainer(rank: int) -> dict:
        main, startup, compiled = built[rank]
        exe, scope = fluid.Executor(place or fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        for img, y in _batches():
            half = slice(4 * rank, 4 * rank + 4)
            exe.run(compiled, feed={"img": img[half], "y": y[half]}, scope=scope)
        exe.close()
        return _state(scope, main)

    results = cluster.in_threads(2, trainer)
    # the user's program is left as it was: the synchronised ops are the compiled copy's
    assert "sync_batch_norm" not in [op.type for op in built[0][0].global_block().ops]
    return results


@pytest.mark.parametrize("layout,device", [("NCHW", "cpu"), ("NHWC", "cpu"),
                                           ("NCHW", "strict")])
def test_sync_batch_norm_over_two_trainers_equals_one_on_the_whole_batch(layout, device,
                                                                        monkeypatch, request,
                                                                        held_endpoints):
    local = _local(layout)
    place = None
    if device == "strict":  # CUDAPlace on the strict CPU CuPy: device arrays, the ring on host
        strict_cupy.device_module("strict", request)
        place = fluid.CUDAPlace(0)
    t0, t1 = _two_trainers(layout, True, monkeypatch, held_endpoints(2), place)
    moving = [n for n in local if n.endswith((".w_1", ".w_2"))]  # moving mean and variance
    assert len(moving) == 4
    for name, value in local.items():
        np.testing.assert_array_equal(t0[name], t1[name])
        np.testing.assert_allclose(t0[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_without_sync_batch_norm_each_trainer_keeps_its_own_statistics(monkeypatch,
                                                                       held_endpoints):
    local = _local("NCHW")
    t0, t1 = _two_trainers("NCHW", False, monkeypatch, held_endpoints(2))
    moving = [n for n in local if n.endswith(".w_1")]
    # the control: per-trainer statistics are not the global batch's
    assert any(not np.allclose(t0[n], local[n], rtol=1e-3) for n in moving)
    assert any(not np.allclose(t0[n], t1[n]) for n in moving)
