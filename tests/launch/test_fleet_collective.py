"""Fluid 1.8's collective fleet (``paddle.fluid.incubate.fleet.collective``) and the collective
transpile mode (``DistributeTranspilerConfig.mode = "collective"``) with its ``c_*`` ops.

1. The programs: Fluid's structure (GradAllReduce, LocalSGD), ring ids, refusals.
2. The ``c_*`` kernels between two trainers in threads (each its own scope and executor, a TCP
   ring between their endpoints).
3. A Fluid-style fleet script as two real processes in each strategy mode: the trainers end with
   the parameters of one process trained on the whole batch; on Dask workers through
   ``dask-fluid launch --mode nccl2``.
4. Paddle 1.8's own runner (test_dist_base.py ``--gpu_fleet_api``) with dist_mnist.py, on the
   strict CPU CuPy: its nccl2, local-SGD and grad-allreduce fleet cases, and fleet's savers;
   its test_dist_allreduce_op.py case (``layers.collective._allreduce`` in the program) and its
   test_dist_mnist_dgc_nccl.py case (DGCMomentumOptimizer's nccl2 trainers).
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_fluid as fluid
from dask_fluid.compat.incubate.fleet.base import role_maker
from dask_fluid.compat.incubate.fleet.collective import (
    Collective,
    CollectiveOptimizer,
    DistributedStrategy,
)
from dask_fluid.distributed.launch.script import launch_script
from dask_fluid.ops.registry import to_host
from dask_fluid.transpiler import DistributeTranspiler, DistributeTranspilerConfig
from dask_fluid.transpiler.collective import GradAllReduce, MultiThread

from .. import strict_cupy
from . import cluster

ROOT = Path(__file__).resolve().parents[2]
UNITTESTS = ROOT.parent / "shared/reference/paddle-1.8/unittests"
SCRIPT = Path(__file__).with_name("fleet_collective_script.py")
TIMEOUT_S = 120
MODES = ("nccl2", "grad_allreduce", "local_sgd")


def _net(optimizer=None, minimize=None):
    """The test MLP; ``optimizer.minimize(loss)`` (SGD by default), or ``minimize(loss)``."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [8])
        y = fluid.layers.data("y", [1], dtype="int64")
        h = fluid.layers.fc(x, 16, act="relu")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(h, 3), y))
        if minimize is not None:
            minimize(loss)
        else:
            (optimizer or fluid.optimizer.SGD(0.1)).minimize(loss)
    return main, startup, loss


def _collective(kind: str, rings: int = 1, rank: int = 0, endpoints=None):
    main, startup, loss = _net()
    config = DistributeTranspilerConfig()
    config.mode = "collective"
    config.collective_mode = kind
    config.nccl_comm_num = rings
    endpoints = endpoints or ["127.0.0.1:6170", "127.0.0.1:6171"]
    t = DistributeTranspiler(config=config)
    t.transpile(rank, program=main, startup_program=startup, trainers=",".join(endpoints),
                current_endpoint=endpoints[rank])
    return t, main, startup, loss


def _ops(program):
    return [op.type for op in program.global_block().ops]


# -- 1. the programs -------------------------------------------------------------------------


def test_grad_allreduce_writes_fluids_ops_with_alternating_rings():
    t, main, startup, _ = _collective("grad_allreduce", rings=2)
    params = ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]
    # startup: one id + init per ring, then every parameter broadcast from rank 0, rings in turn
    assert _ops(startup)[-10:] == ["c_gen_nccl_id", "c_comm_init"] * 2 + \
        ["c_broadcast"] * 4 + ["c_sync_comm_stream"] * 2
    ops = startup.global_block().ops
    gens = [op for op in ops if op.type == "c_gen_nccl_id"]
    inits = [op for op in ops if op.type == "c_comm_init"]
    assert len(gens) == len(inits) == 2
    assert [op.attr("ring_id") for op in inits] == [0, 1]
    assert gens[0].attr("other_endpoints") == ["127.0.0.1:6171"] and gens[0].attr("rank") == 0
    casts = [op for op in ops if op.type == "c_broadcast"]
    assert [op.input("X")[0] for op in casts] == params
    assert [op.attr("ring_id") for op in casts] == [0, 1, 0, 1]
    assert all(op.attr("root") == 0 for op in casts)
    assert _ops(startup)[-2:] == ["c_sync_comm_stream"] * 2
    # main: the loss gradient scaled by 1/2 right after the op that seeds it
    ops = main.global_block().ops
    seed = next(i for i, op in enumerate(ops) if op.type == "fill_constant"
                and op.output("Out")[0].endswith("@GRAD"))
    assert ops[seed + 1].type == "scale" and ops[seed + 1].attr("scale") == 0.5
    # each gradient summed right after the backward op that makes it: sync, then all-reduce
    reduced = [op.input("X")[0] for op in ops if op.type == "c_allreduce_sum"]
    assert sorted(reduced) == sorted(p + "@GRAD" for p in params)
    for i, op in enumerate(ops):
        if op.type == "c_allreduce_sum":
            assert ops[i - 1].type in ("c_sync_calc_stream", "c_allreduce_sum")
    # walked backwards, the ring ids alternate in program order too
    rings = [op.attr("ring_id") for op in ops if op.type == "c_allreduce_sum"]
    assert rings == [1, 0, 1, 0]
    first_opt = next(i for i, op in enumerate(ops) if op.type == "sgd")
    assert _ops(main)[first_opt - 2:first_opt] == ["c_sync_comm_stream"] * 2
    assert max(i for i, op in enumerate(ops) if op.type == "c_allreduce_sum") < first_opt
    assert t.get_trainer_program() is main and t.trainer_num == 2 and t.trainer_id == 0
    assert "collective mode (grad_allreduce)" in t._repr_html_()


def test_local_sgd_averages_the_parameters_after_each_update():
    _, main, startup, _ = _collective("local_sgd")
    params = ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]
    snapshots = [op for op in startup.global_block().ops if op.type == "assign"]
    assert [op.output("Out")[0] for op in snapshots] == [p + "@SNAPSHOT" for p in params]
    ops = _ops(main)
    assert "c_allreduce_sum" in ops and "scale" not in ops[:ops.index("sgd")]
    for i, op in enumerate(main.global_block().ops):
        if op.type == "sgd":  # the move since the last average, summed over the trainers
            assert ops[i + 1:i + 4] == ["elementwise_sub", "c_sync_calc_stream",
                                        "c_allreduce_sum"]
    tail = ops[ops.index("c_sync_comm_stream"):]
    assert tail == ["c_sync_comm_stream"] + ["scale", "elementwise_sub", "assign"] * 4
    scales = [op for op in main.global_block().ops if op.type == "scale"]
    assert all(op.attr("scale") == 0.5 for op in scales)


def test_collective_transpile_refuses_what_it_cannot_do():
    main, startup, _ = _net()
    config = DistributeTranspilerConfig()
    config.mode = "collective"
    with pytest.raises(ValueError, match="collective_mode"):
        DistributeTranspiler(config=config).transpile(
            0, program=main, startup_program=startup, trainers="127.0.0.1:1,127.0.0.1:2",
            current_endpoint="127.0.0.1:1")
    with pytest.raises(ValueError, match="collective_mode = 'ring'"):
        config.collective_mode = "ring"
    config.collective_mode = "single_process_multi_thread"
    with pytest.raises(NotImplementedError, match="single_process_multi_thread"):
        DistributeTranspiler(config=config).transpile(
            0, program=main, startup_program=startup, trainers="127.0.0.1:1,127.0.0.1:2",
            current_endpoint="127.0.0.1:1")
    config.collective_mode = "grad_allreduce"
    for trainers, endpoint, match in (("127.0.0.1:1", "127.0.0.1:1", "at least two"),
                                      ("127.0.0.1:1,127.0.0.1:2", "127.0.0.1:2", "trainer 0"),
                                      (2, "127.0.0.1:1", "trainer endpoints")):
        with pytest.raises((ValueError, TypeError), match=match):
            DistributeTranspiler(config=config).transpile(
                0, program=main, startup_program=startup, trainers=trainers,
                current_endpoint=endpoint)
    config.geo_sgd_mode = True
    with pytest.raises(ValueError, match="pserver-mode option"):
        DistributeTranspiler(config=config).transpile(
            0, program=main, startup_program=startup, trainers="127.0.0.1:1,127.0.0.1:2",
            current_endpoint="127.0.0.1:1")
    t, *_ = _collective("grad_allreduce")
    with pytest.raises(RuntimeError, match="collective mode: there are no pserver"):
        t.get_pserver_program("127.0.0.1:6170")
    with pytest.raises(NotImplementedError, match="c_comm_init_all"):
        MultiThread()
    with pytest.raises(ValueError, match="nrings"):
        GradAllReduce(0)


def test_train_collective_refuses_programs_that_reduce_themselves():
    from dask_fluid.distributed import train_collective

    t, main, startup, _ = _collective("grad_allreduce")
    for kwargs in ({"transpiler": t}, {"main_program": main, "startup_program": startup}):
        with pytest.raises(ValueError, match="dask-fluid launch --mode nccl2"):
            train_collective(None, data={"x": np.ones((4, 8), "float32")}, **kwargs)


def test_c_ops_without_a_communicator_say_how_to_get_one():
    _, main, startup, loss = _collective("grad_allreduce")
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    for op in list(startup.global_block().ops):  # the startup without its collective part
        if op.type.startswith("c_"):
            startup.global_block().ops.remove(op)
    with fluid.scope_guard(scope):
        exe.run(startup)
        with pytest.raises(RuntimeError, match="no communicator for ring 0.*startup program"):
            exe.run(main, feed={"x": np.ones((2, 8), "float32"),
                                "y": np.zeros((2, 1), "int64")}, fetch_list=[loss])


def test_layers_collective_builds_fluids_ops():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [4, 3], append_batch_size=False)
        col = fluid.layers.collective
        assert col._allreduce(x, reduce_type="max").shape == (4, 3)
        assert col._c_allgather(x, nranks=2).shape == (8, 3)
        assert col._c_reducescatter(x, nranks=2).shape == (2, 3)
        assert col._c_allreduce(x, reduce_type="prod", ring_id=1).shape == (4, 3)
        assert col._c_broadcast(x, root=1) is x and col._broadcast(x, 1) is x
        col._c_sync_comm_stream(col._c_sync_calc_stream(x), ring_id=0)
        with pytest.raises(ValueError, match="evenly divided"):
            col._c_reducescatter(x, nranks=3)
        with pytest.raises(TypeError, match="reduce type"):
            col._allreduce(x, reduce_type="mean")
    ops = main.global_block().ops
    assert [op.type for op in ops] == ["allreduce", "c_allgather", "c_reducescatter",
                                       "c_allreduce_prod", "c_broadcast", "broadcast",
                                       "c_sync_calc_stream", "c_sync_comm_stream"]
    assert ops[0].attr("reduce_type") == 2 and ops[3].attr("ring_id") == 1
    assert ops[4].attr("root") == 1 and ops[1].attr("nranks") == 2


# -- 2. the kernels between two trainers in threads ---------------------------------------------


def _ring_startup(rank: int, endpoints: list[str], var: str) -> fluid.Program:
    """A startup program connecting trainer ``rank`` of two as ring 0 (id variable ``var``)."""
    startup = fluid.Program()
    block = startup.global_block()
    comm = block.create_var(name=var, persistable=True, type=fluid.framework.VarType.RAW)
    block.append_op("c_gen_nccl_id", outputs={"Out": [comm]},
                    attrs={"rank": rank, "endpoint": endpoints[rank],
                           "other_endpoints": [endpoints[1 - rank]]})
    block.append_op("c_comm_init", inputs={"X": [comm]},
                    attrs={"nranks": 2, "rank": rank, "ring_id": 0})
    return startup


def _two_gpus() -> int:
    from dask_fluid.distributed.collective.trainers import nccl_usable

    if not nccl_usable():
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


@pytest.mark.parametrize("device", [
    "cpu", "strict",  # CUDAPlace on the strict CPU CuPy: device arrays, the ring on the host
    pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(
        _two_gpus() < 2, reason="needs 2 CUDA GPUs with CuPy and NCCL (one NCCL rank per GPU)")]),
])
def test_collective_ops_reduce_gather_scatter_and_broadcast_between_two_trainers(
        device, monkeypatch, request, held_endpoints):
    monkeypatch.setenv("DASK_FLUID_JOB_SECRET", "c-ops")
    if device == "strict":
        strict_cupy.device_module("strict", request)
    endpoints = held_endpoints(2)
    ops = ("c_allreduce_sum", "c_allreduce_max", "c_allreduce_min", "c_allreduce_prod",
           "c_allgather", "c_reducescatter", "c_broadcast", "c_sync_calc_stream",
           "allreduce", "broadcast")

    def programs(rank: int) -> tuple:
        # built here, run in the threads: program_guard and scope_guard are process-wide
        # (the id named as nccl2 mode's: the older allreduce/broadcast ops find it there)
        main, startup = fluid.Program(), _ring_startup(rank, endpoints, "NCCLID")
        blk = main.global_block()
        x = blk.create_var(name="x", shape=(2, 3), dtype="float32", is_data=True)
        outs = []
        for op in ops:
            attrs = {**({"ring_id": 0} if op.startswith("c_") else {}),
                     **({"nranks": 2} if op in ("c_allgather", "c_reducescatter")
                                      else {}),
                     **({"root": 1} if op in ("c_broadcast", "broadcast") else {}),
                     **({"reduce_type": 3} if op == "allreduce" else {})}  # 3: min
            out = blk.create_var(name=op + ".out", dtype="float32")
            blk.append_op(op, inputs={"X": [x]}, outputs={"Out": [out]}, attrs=attrs)
            outs.append(out)
        return main, startup, outs

    built = [programs(rank) for rank in range(2)]

    def trainer(rank: int) -> dict:
        main, startup, outs = built[rank]
        place = {"cpu": fluid.CPUPlace(), "strict": fluid.CUDAPlace(0),
                 "gpu": fluid.CUDAPlace(rank)}[device]
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(startup, scope=scope)
        value = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], "float32") * (rank + 2)
        got = exe.run(main, feed={"x": value}, fetch_list=outs, scope=scope)
        exe.close()
        return {"x": value, **{op: np.asarray(to_host(v))
                               for op, v in zip(ops, got, strict=True)}}

    r0, r1 = cluster.in_threads(2, trainer)
    x0, x1 = r0["x"], r1["x"]
    for r in (r0, r1):
        np.testing.assert_array_equal(r["c_allreduce_sum"], x0 + x1)
        np.testing.assert_array_equal(r["c_allreduce_max"], np.maximum(x0, x1))
        np.testing.assert_array_equal(r["c_allreduce_min"], np.minimum(x0, x1))
        np.testing.assert_array_equal(r["c_allreduce_prod"], x0 * x1)
        np.testing.assert_array_equal(r["c_allgather"], np.concatenate([x0, x1]))
        np.testing.assert_array_equal(r["c_broadcast"], x1)  # root 1
        np.testing.assert_array_equal(r["broadcast"], x1)
        np.testing.assert_array_equal(r["allreduce"], np.minimum(x0, x1))
    np.testing.assert_array_equal(r0["c_sync_calc_stream"], x0)
    np.testing.assert_array_equal(r0["c_reducescatter"], (x0 + x1)[:1])
    np.testing.assert_array_equal(r1["c_reducescatter"], (x0 + x1)[1:])


def test_allreduces_are_held_for_their_rings_sync_unless_read_before_it(monkeypatch,
                                                                        held_endpoints):
    # Fluid's c_allreduce_sum result is only promised after the ring's c_sync_comm_stream:
    # b and c are summed there in one exchange; a, read by the scale before the sync, at once
    from dask_fluid.distributed.collective.tcp_ring import EndpointRingCommunicator

    monkeypatch.setenv("DASK_FLUID_JOB_SECRET", "c-ops")
    calls: list[int] = []
    real = EndpointRingCommunicator.allreduce

    def counted(self, arrays, **kwargs):
        calls.append(len(arrays))
        return real(self, arrays, **kwargs)

    monkeypatch.setattr(EndpointRingCommunicator, "allreduce", counted)
    endpoints = held_endpoints(2)

    def programs(rank: int) -> tuple:
        main, startup = fluid.Program(), _ring_startup(rank, endpoints, "nccl_id_0")
        blk = main.global_block()
        x = blk.create_var(name="x", shape=(2, 3), dtype="float32", is_data=True)
        out = {n: blk.create_var(name=n, dtype="float32") for n in "absc"}
        blk.append_op("c_allreduce_sum", inputs={"X": [x]}, outputs={"Out": [out["a"]]})
        blk.append_op("scale", inputs={"X": [out["a"]]}, outputs={"Out": [out["s"]]},
                      attrs={"scale": 2.0})
        for n in "bc":
            blk.append_op("c_allreduce_sum", inputs={"X": [x]}, outputs={"Out": [out[n]]})
        blk.append_op("c_sync_comm_stream", inputs={"X": [out["c"]]},
                      outputs={"Out": [out["c"]]}, attrs={"ring_id": 0})
        return main, startup, [out[n] for n in "sbc"]

    built = [programs(rank) for rank in range(2)]

    def trainer(rank: int) -> list:
        main, startup, fetch = built[rank]
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        x = np.full((2, 3), rank + 1.0, "float32")
        got = [exe.run(main, feed={"x": x}, fetch_list=fetch, scope=scope) for _ in range(2)]
        exe.close()
        return got

    for runs in cluster.in_threads(2, trainer):
        for s_, b, c in runs:  # 1 + 2 = 3 everywhere
            np.testing.assert_array_equal(s_, np.full((2, 3), 6.0))
            np.testing.assert_array_equal(b, np.full((2, 3), 3.0))
            np.testing.assert_array_equal(c, np.full((2, 3), 3.0))
    # per rank and run: a alone, then b and c together
    assert sorted(calls) == [1] * 4 + [2] * 4


def _check_halves_equal_local(built: list[tuple], batches: list, local: dict) -> None:
    """Trainer r runs its ``(main, startup, to_run)`` in a thread on rows ``4r:4r + 4`` of
    every batch; both end with the parameters ``local`` trained on the whole batches."""

    def trainer(rank: int) -> dict:
        main, startup, to_run = built[rank]
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        for x, y in batches:
            half = slice(4 * rank, 4 * rank + 4)
            exe.run(to_run, feed={"x": x[half], "y": y[half]}, scope=scope)
        exe.close()
        return {p.name: np.array(scope.get(p.name)) for p in main.global_block().all_parameters()}

    p0, p1 = cluster.in_threads(2, trainer)
    for name, value in local.items():
        np.testing.assert_array_equal(p0[name], p1[name])
        np.testing.assert_allclose(p0[name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["grad_allreduce", "local_sgd"])
def test_two_trainers_in_threads_equal_one_on_the_whole_batch(kind, monkeypatch, held_endpoints):
    monkeypatch.setenv("DASK_FLUID_JOB_SECRET", "c-ops")
    rng = np.random.RandomState(0)
    batches = [(rng.normal(size=(8, 8)).astype("float32"),
                rng.randint(0, 3, size=(8, 1)).astype("int64")) for _ in range(4)]

    def optimizer():
        return fluid.optimizer.Momentum(0.1, momentum=0.9)

    main, startup, loss = _net(optimizer())
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        for x, y in batches:
            exe.run(main, feed={"x": x, "y": y})
        local = {p.name: np.array(fluid.global_scope().get(p.name))
                 for p in main.global_block().all_parameters()}
    endpoints = held_endpoints(2)

    def programs(rank: int) -> tuple:
        main, startup, _ = _net(optimizer())
        config = DistributeTranspilerConfig()
        config.mode, config.collective_mode, config.nccl_comm_num = "collective", kind, 2
        DistributeTranspiler(config=config).transpile(
            rank, program=main, startup_program=startup, trainers=endpoints,
            current_endpoint=endpoints[rank])
        return main, startup, main

    built = [programs(rank) for rank in range(2)]  # program_guard is process-wide

    _check_halves_equal_local(built, batches, local)


def test_in_program_allreduce_ops_sum_and_the_loss_gradient_is_scaled(monkeypatch,
                                                                       held_endpoints):
    # Paddle 1.8's dist_allreduce_op.py: optimizer.backward, layers.collective._allreduce of
    # every gradient, apply_gradients, in a CompiledProgram of nccl2 trainers
    monkeypatch.setenv("DASK_FLUID_JOB_SECRET", "c-ops")
    rng = np.random.RandomState(1)
    batches = [(rng.normal(size=(8, 8)).astype("float32"),
                rng.randint(0, 3, size=(8, 1)).astype("int64")) for _ in range(3)]
    main, startup, _ = _net(fluid.optimizer.Momentum(0.1, momentum=0.9))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for x, y in batches:
        exe.run(main, feed={"x": x, "y": y}, scope=scope)
    local = {p.name: np.array(scope.get(p.name)) for p in main.global_block().all_parameters()}
    endpoints = held_endpoints(2)

    def reduce_in_program(loss) -> None:
        opt = fluid.optimizer.Momentum(0.1, momentum=0.9)
        pairs = [(p, fluid.layers.collective._allreduce(g)) for p, g in opt.backward(loss)]
        opt.apply_gradients(pairs)

    def programs(rank: int) -> tuple:
        main, startup, loss = _net(minimize=reduce_in_program)
        return main, startup, cluster.nccl2_trainer(main, startup, loss, rank, endpoints)

    built = [programs(rank) for rank in range(2)]
    assert _ops(built[0][0]).count("allreduce") == 4

    _check_halves_equal_local(built, batches, local)


# -- the fleet API ---------------------------------------------------------------------------


def _role(rank: int = 0, endpoints=("127.0.0.1:6170", "127.0.0.1:6171")):
    return role_maker.UserDefinedCollectiveRoleMaker(rank, list(endpoints))


def test_fleet_answers_the_role_questions_and_splits_files():
    fleet = Collective()
    with pytest.raises(ValueError, match="fleet.init"):
        fleet.worker_index()
    fleet.init(_role(1, ["10.0.0.1:1", "10.0.0.1:2", "10.0.0.2:1"]))
    assert (fleet.worker_index(), fleet.worker_num(), fleet.is_worker(),
            fleet.is_first_worker(), fleet.node_num()) == (1, 3, True, False, 2)
    assert fleet.worker_endpoints(to_string=True) == "10.0.0.1:1,10.0.0.1:2,10.0.0.2:1"
    files = [f"part-{i}" for i in range(8)]
    shares = []
    for rank in range(3):
        fleet.init(_role(rank, ["10.0.0.1:1", "10.0.0.1:2", "10.0.0.2:1"]))
        shares.append(fleet.split_files(files))
    assert shares == [files[0:3], files[3:6], files[6:8]]  # Fluid: the first ones get one more
    with pytest.raises(TypeError, match="list"):
        fleet.split_files("part-0")
    with pytest.raises(TypeError, match="RoleMakerBase"):
        fleet.init("trainer")


@pytest.fixture
def fleet(monkeypatch) -> Collective:
    """A fresh collective fleet as the module's ``fleet``, trainer 0 of two."""
    fleet = Collective()
    monkeypatch.setattr("dask_fluid.compat.incubate.fleet.collective.fleet", fleet)
    fleet.init(_role())
    return fleet


def test_fleet_optimizer_checks_its_strategy(fleet):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [4])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        strategy = DistributedStrategy()
        strategy.use_dist_fc = True
        with pytest.raises(NotImplementedError, match="use_dist_fc"):
            fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy).minimize(loss)
        strategy = DistributedStrategy()
        strategy.collective_mode = "grad_allreduce"  # mode still "nccl2"
        with pytest.raises(ValueError, match="collective mode"):
            fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy).minimize(loss)
        strategy = DistributedStrategy()
        strategy.forward_recompute = True
        with pytest.raises(ValueError, match="recompute_checkpoints"):
            fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy).minimize(loss)
        with pytest.raises(TypeError, match="DistributedStrategy"):
            CollectiveOptimizer(fluid.optimizer.SGD(0.1), fluid.BuildStrategy())
        strategy = DistributedStrategy()
        strategy.fuse_laryer_size = 1  # fleet's strategy takes fields of its own (Paddle's runner)
        fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy).minimize(loss)
    assert isinstance(fleet.main_program, fluid.CompiledProgram)
    assert "gen_nccl_id" in _ops(fleet.startup_program)
    assert "sgd" in _ops(fleet._origin_program)
    assert (strategy.num_trainers, strategy.trainer_id) == (2, 0)
    with pytest.raises(TypeError, match="Executor"):
        fleet.save_persistables("exe", "/tmp/nowhere")
    for name in ("save_checkpoint", "load_checkpoint"):  # not Fluid 1.8's: named, with its own
        with pytest.raises(NotImplementedError, match=f"{name} .*fleet.{name[:4]}_check_point"):
            getattr(fleet, name)(fluid.Executor(fluid.CPUPlace()), "/tmp/nowhere")


def test_fleet_check_points_keep_the_persistables_and_the_train_status(fleet, tmp_path):
    # Fluid 1.8's collective checkpoints: <path>/__paddle_fleet_checkpoint__.<n>, the
    # persistables in one file and the TrainStatus, the newest loaded
    from dask_fluid.compat.distributed.fs_wrapper import BDFS, LocalFS
    from dask_fluid.compat.incubate.fleet.collective import TrainStatus

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [4])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2, param_attr="w", bias_attr=False))
        fleet.distributed_optimizer(fluid.optimizer.SGD(0.1)).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    path = str(tmp_path / "ckpt")
    init = fleet.startup_program.clone()  # its initialisers, without meeting trainer 1
    for i in reversed(range(len(init.global_block().ops))):
        if init.global_block().ops[i].type not in ("fill_constant", "uniform_random"):
            init.global_block()._remove_op(i)
    with fluid.scope_guard(scope):
        exe.run(init)
        assert fleet.load_check_point(exe, path, trainer_id=0) is None  # nothing saved yet
        with pytest.raises(FileNotFoundError, match="no __paddle_fleet_checkpoint__"):
            fleet.load_check_point(exe, path, 0, ignore_empty=False)
        first = np.array(scope.vars["w"]).copy()
        fleet.save_check_point(exe, path, TrainStatus(0))
        scope.vars["w"][...] = 7.0
        fleet.save_check_point(exe, path, TrainStatus(1))
        assert sorted(LocalFS().list_dirs(path)) == [
            "__paddle_fleet_checkpoint__.0", "__paddle_fleet_checkpoint__.1"]
        scope.vars["w"][...] = 0.0
        assert fleet.load_check_point(exe, path, 0) == TrainStatus(1)  # the newest
        np.testing.assert_array_equal(np.array(scope.vars["w"]), np.full_like(first, 7.0))
        fleet.save_check_point(exe, path, TrainStatus(2), remain_all_checkpoint=False)
        assert LocalFS().list_dirs(path) == ["__paddle_fleet_checkpoint__.2"]
        assert (tmp_path / "ckpt/__paddle_fleet_checkpoint__.2/_paddle_fleet_param__").exists()
        with pytest.raises(TypeError, match="train_status must be a TrainStatus"):
            fleet.save_check_point(exe, path, 3)
    with pytest.raises(NotImplementedError, match="BDFS is not implemented"):
        BDFS("hdfs://nn:9000", "user,passwd")


def test_fleet_use_amp_all_reduces_the_scaled_gradients_before_the_finite_check(fleet):
    # every trainer must unscale and check the same (all-reduced) gradients, or one trainer
    # skips a step the others take: the all-reduce goes before AMP's unscale and isfinite
    from dask_fluid.distributed.collective.data_parallel import ALLREDUCE_OP, with_allreduce

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [4])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        strategy = DistributedStrategy()
        strategy.use_amp = True
        fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy).minimize(loss)
    assert isinstance(fleet.main_program, fluid.CompiledProgram)
    ops = _ops(with_allreduce(main, "NCCLID"))
    assert ops.index(ALLREDUCE_OP) < ops.index("isfinite") < ops.index("sgd")
    assert ops.index(ALLREDUCE_OP) < ops.index("elementwise_div")  # the unscale


# -- 3. a Fluid-style fleet script as real processes --------------------------------------------


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "local.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    subprocess.run(cluster.command(SCRIPT, str(out), via_run=True), env={**env, "CPU_NUM": "1"},
                   check=True, timeout=TIMEOUT_S, capture_output=True)
    result = json.loads(out.read_text())
    assert np.mean(result["losses"][-3:]) < np.mean(result["losses"][:3])  # it learns
    return result


def _check_equal_local(t0: dict, t1: dict, local: dict) -> None:
    mean = (np.array(t0["losses"]) + np.array(t1["losses"])) / 2
    np.testing.assert_allclose(mean, local["losses"], atol=1e-5, rtol=0)
    for name, value in local["params"].items():
        np.testing.assert_array_equal(t0["params"][name], t1["params"][name])
        np.testing.assert_allclose(t0["params"][name], value, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode,recompute", [(m, False) for m in MODES] +
                         [("grad_allreduce", True)])
def test_fleet_script_as_two_processes_equals_local(tmp_path, local_run, mode, recompute,
                                                    held_endpoints):
    endpoints = held_endpoints(2)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    procs = []
    for i in range(2):
        env = {**base, "CPU_NUM": "1", "FLAGS_rpc_deadline": "30000",
               "DASK_FLUID_JOB_SECRET": "fleet", "SCRIPT_FLEET_MODE": mode,
               "SCRIPT_NCCL_COMM_NUM": "2", "SCRIPT_RECOMPUTE": "1" if recompute else "",
               "PADDLE_TRAINER_ID": str(i),
               "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
               "PADDLE_CURRENT_ENDPOINT": endpoints[i]}
        procs.append(subprocess.Popen(
            cluster.command(SCRIPT, str(tmp_path / f"t{i}.json"), via_run=True), env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    try:
        errs = [p.communicate(timeout=TIMEOUT_S)[1].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], errs
    t0, t1 = (json.loads((tmp_path / f"t{i}.json").read_text()) for i in (0, 1))
    _check_equal_local(t0, t1, local_run)
    if mode == "nccl2":  # the program is left alone; a CompiledProgram all-reduces
        assert not any(op.startswith("c_") for op in t0["ops"])
    else:
        assert "c_allreduce_sum" in t0["ops"]
    # forward_recompute: the layer after the checkpoint runs again in the backward pass
    assert t0["ops"].count("mul") == (3 if recompute else 2)
    # trainer 0 saved the original program's persistables (fleet.save_persistables)
    saved = tmp_path / "t0.json.model"
    names = {p.name for p in saved.iterdir()}
    assert set(local_run["params"]) <= names  # and the optimizer's state (velocities, rate)
    assert {n + "_velocity_0" for n in local_run["params"]} <= names
    assert not (tmp_path / "t1.json.model").exists()


@pytest.mark.slow
def test_fleet_script_launched_on_dask_workers_equals_local(tmp_path, local_run, monkeypatch):
    monkeypatch.setenv("CPU_NUM", "1")
    monkeypatch.setenv("SCRIPT_FLEET_MODE", "grad_allreduce")
    out, err = io.StringIO(), io.StringIO()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0", silence_logs=40) as lc, Client(lc) as client:
        results = launch_script(client, str(SCRIPT), [str(tmp_path / "{role}{trainer_id}.json")],
                                trainers=2, mode="nccl2", out=out, err=err)
    assert [r["returncode"] for r in results] == [0, 0], err.getvalue()[-3000:]
    t0, t1 = (json.loads((tmp_path / f"trainer{i}.json").read_text()) for i in (0, 1))
    _check_equal_local(t0, t1, local_run)


# -- 4. Paddle 1.8's own runner: test_dist_base.py --gpu_fleet_api ---------------------------

_FLEET_CASES = """
import unittest
from test_dist_base import TestDistBase


class _Fleet(TestDistBase):
    def _setup_config(self):
        self._sync_mode = True
        self._use_reduce = False
        self._use_reader_alloc = False
        self._nccl2_mode = True
        self._gpu_fleet_api = True
        self._setup_fleet()

    def test_dist_train(self):
        import paddle.fluid as fluid
        assert fluid.core.is_compiled_with_cuda()  # the strict CuPy stands in for one
        self.check_with_place("dist_mnist.py", delta=1e-5)


class TestDistMnistNCCL2FleetApi(_Fleet):  # Paddle 1.8's test_dist_mnist_fleetapi.py
    def _setup_fleet(self):
        pass


class TestDistMnistFleetLocalSGD(_Fleet):
    def _setup_fleet(self):
        self._use_local_sgd = True


class TestDistMnistFleetGradAllReduce(_Fleet):
    def _setup_fleet(self):
        self._ut4grad_allreduce = True


class TestDistMnistFleetSave(_Fleet):  # the trainers save with fluid.io and fleet's savers
    def _setup_fleet(self):
        self._save_model = True


class TestDistMnistNCCL2(TestDistBase):  # Paddle 1.8's test_dist_allreduce_op.py
    def _setup_config(self):
        self._sync_mode = True
        self._use_reduce = False
        self._use_reader_alloc = False
        self._nccl2_mode = True
        self._nccl2_reduce_layer = True

    def test_dist_train(self):
        import paddle.fluid as fluid
        assert fluid.core.is_compiled_with_cuda()
        self.check_with_place("dist_allreduce_op.py", delta=1e-5, check_error_log=True)


class TestDistMnistNCCL2DGC(TestDistBase):  # Paddle 1.8's test_dist_mnist_dgc_nccl.py
    def _setup_config(self):
        self._sync_mode = True
        self._use_reduce = False
        self._use_reader_alloc = False
        self._nccl2_mode = True
        self._use_dgc = True  # dist_mnist.py's DGCMomentumOptimizer, rampup_begin_step=2

    def test_dist_train(self):
        import paddle.fluid as fluid
        assert fluid.core.is_compiled_with_cuda()  # else the runner drops _use_dgc
        self.check_with_place("dist_mnist.py", delta=1e-5, check_error_log=True)


del _Fleet

if __name__ == "__main__":
    unittest.main()
"""

_STRICT_CUPY_SITE = """
import sys
sys.path.insert(0, {root!r})
from tests import strict_cupy
sys.modules.update(strict_cupy.modules())
"""

_SAVED = ("fluid_persistables", "fleet_persistables", "fluid_infer", "fleet_infer")


@pytest.mark.slow
@pytest.mark.skipif(not (UNITTESTS / "test_dist_base.py").exists(),
                    reason=f"{UNITTESTS} (Paddle 1.8's unittests) is not beside this checkout")
def test_paddle_18_runner_fleet_api_cases_match_local(tmp_path, mnist_in_paddle_cache):
    # the runner's processes read Paddle's own cache: synthetic MNIST there, removed after
    # (a real download is left as it is)
    pytest.importorskip("six", reason="test_dist_base.py imports six")
    for name in ("test_dist_base.py", "dist_mnist.py", "dist_allreduce_op.py"):
        shutil.copy(UNITTESTS / name, tmp_path / name)
    (tmp_path / "test_dist_mnist_fleet_cases.py").write_text(_FLEET_CASES)
    # its fleet trainer runs on fluid.CUDAPlace(FLAGS_selected_gpus): tests/strict_cupy.py
    # stands in for CuPy in every process (no NCCL: the trainers' ring is TCP on the host)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_STRICT_CUPY_SITE.format(root=str(ROOT)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    saved = [Path("/tmp") / f"{d}{s}" for d in _SAVED for s in ("", "_2")]
    try:
        proc = subprocess.run([sys.executable, "-m", "dask_fluid.cli", "run",
                               "test_dist_mnist_fleet_cases.py"], cwd=tmp_path, env=env,
                              capture_output=True, timeout=300)
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode == 0, err[-4000:]
        assert "Ran 6 tests" in err and "\nOK" in err, err[-4000:]
        pairs = [line for line in proc.stdout.decode(errors="replace").splitlines()
                 if line.startswith("=======")]
        assert len(pairs) == 6 * 5  # the runner's local : distributed loss of every step
        # trainer 0 saved with fluid.io and with fleet's savers, trainer 1 under "_2"
        for d in saved:
            assert d.is_dir(), d
        assert (Path("/tmp/fleet_infer") / "__model__").is_file()
        assert sorted(p.name for p in Path("/tmp/fleet_persistables").iterdir()) == \
            sorted(p.name for p in Path("/tmp/fluid_persistables").iterdir())
    finally:
        for d in saved:
            shutil.rmtree(d, ignore_errors=True)


# -- 5. python -m paddle.distributed.launch ---------------------------------------------------


def _launch(tmp_path, *options, env=None, timeout=TIMEOUT_S):
    base = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    return subprocess.run(
        [sys.executable, "-m", "dask_fluid.cli", "run", "-m", "paddle.distributed.launch",
         *options, str(SCRIPT), str(tmp_path / "t{trainer_id}.json")],
        cwd=tmp_path, env={**base, "CPU_NUM": "1", **(env or {})}, capture_output=True,
        timeout=timeout)


def test_paddle_launch_starts_one_trainer_per_selected_gpu_equal_to_local(tmp_path, local_run):
    proc = _launch(tmp_path, "--selected_gpus=0,1", "--log_dir", "logs",
                   env={"SCRIPT_FLEET_MODE": "grad_allreduce"})
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    t0, t1 = (json.loads((tmp_path / f"t{i}.json").read_text()) for i in (0, 1))
    _check_equal_local(t0, t1, local_run)
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["workerlog.0",
                                                                     "workerlog.1"]
    assert "selected_gpus: 0,1" in proc.stdout.decode()  # --print_config


def test_paddle_launch_stops_the_others_when_one_trainer_fails(tmp_path):
    # trainer 1 exits with 3 before connecting; trainer 0 would wait for it until the deadline
    proc = _launch(tmp_path, "--selected_gpus=0,1",
                   env={"SCRIPT_FAIL_TRAINER": "1", "FLAGS_rpc_deadline": "600000"}, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err[-3000:]
    assert "trainer(s) [1] of 2 failed (exit status [3])" in err
    assert not (tmp_path / "t0.json").exists()


def test_paddle_launch_refuses_bad_arguments(tmp_path):
    proc = _launch(tmp_path, "--selected_gpus=0,1", "--cluster_node_ips=10.0.0.1,10.0.0.2",
                   "--node_ip=10.0.0.3")
    assert proc.returncode == 2 and b"10.0.0.3 is not one of" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "dask_fluid.cli", "run", "-m",
                           "paddle.distributed.nowhere"], capture_output=True, timeout=60)
    assert proc.returncode == 1 and b"paddle.distributed.nowhere" in proc.stderr


def test_paddle_launch_cluster_and_gpus_follow_paddle_18(monkeypatch):
    from dask_fluid.compat.distributed.launch import get_cluster, get_gpus

    endpoints, mine = get_cluster(["10.0.0.1", "10.0.0.2"], "10.0.0.2", [6070, 6071],
                                  ["0", "1"])
    assert endpoints == ["10.0.0.1:6070", "10.0.0.1:6071", "10.0.0.2:6070", "10.0.0.2:6071"]
    assert [(t.rank, t.endpoint, t.gpus) for t in mine] == [
        (2, "10.0.0.2:6070", ["0"]), (3, "10.0.0.2:6071", ["1"])]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert get_gpus("5,7") == ["1", "3"]  # indices into CUDA_VISIBLE_DEVICES, as Paddle
    with pytest.raises(ValueError, match="Can't find your selected_gpus 2"):
        get_gpus("2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert get_gpus("0, 1") == ["0", "1"]


PORT_PROBE = '''
import errno, json, os, socket, sys
port = int(os.environ["PADDLE_CURRENT_ENDPOINT"].rsplit(":", 1)[1])
plain = socket.socket()
try:
    plain.bind(("", port))   # what another process's bind would meet
    taken = None
except OSError as exc:
    taken = exc.errno
server = socket.create_server(("127.0.0.1", port))  # the trainer's own server still listens
with socket.create_connection(("127.0.0.1", port), timeout=5):
    pass
json.dump({"port": port, "plain_bind": taken},
          open(sys.argv[1].format(rank=os.environ["PADDLE_TRAINER_ID"]), "w"))
'''


def test_paddle_launch_holds_its_trainers_ports_until_they_exit(tmp_path):
    """Paddle's launcher finds free ports and lets them go before its trainers bind them; ours
    holds them (bound, not listening) for the job, so no other process takes one meanwhile."""
    script = tmp_path / "probe.py"
    script.write_text(PORT_PROBE)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "dask_fluid.cli", "run", "-m", "paddle.distributed.launch",
         "--selected_gpus=0,1", str(script), str(tmp_path / "p{rank}.json")],
        cwd=tmp_path, env={**base, "CPU_NUM": "1"}, capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    probes = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("p*.json"))]
    assert len(probes) == 2 and probes[0]["port"] != probes[1]["port"]
    assert all(p["plain_bind"] == errno.EADDRINUSE for p in probes), probes
