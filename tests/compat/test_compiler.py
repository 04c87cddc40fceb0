"""fluid.compiler: CompiledProgram over one place runs the program as is (several places:
tests/core/test_multi_place.py); the strategies carry Fluid 1.8's fields and defaults; what is
not implemented says so."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.compiler import BuildStrategy, CompiledProgram, ExecutionStrategy


@pytest.fixture(autouse=True)
def one_cpu(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "1")


def _net(seed=7):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = seed
    # the same parameter names each time, so that the same seed draws the same start point
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4])
        y = fluid.layers.data(name="y", shape=[1])
        h = fluid.layers.fc(x, 8, act="relu")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        fluid.optimizer.SGD(0.05).minimize(loss)
    return main, startup, loss


def _feed(step):
    rng = np.random.default_rng(step)
    return {"x": rng.random((6, 4), dtype=np.float32),
            "y": rng.random((6, 1), dtype=np.float32)}


def _train(program_for, steps=4):
    main, startup, loss = _net()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    program = program_for(main, loss)
    return [exe.run(program, feed=_feed(i), fetch_list=[loss.name], scope=scope)[0]
            for i in range(steps)]


def test_data_parallel_on_one_place_equals_the_plain_program():
    plain = _train(lambda main, loss: main)
    compiled = _train(lambda main, loss: CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, build_strategy=BuildStrategy(),
        exec_strategy=ExecutionStrategy()))
    undecorated = _train(lambda main, loss: CompiledProgram(main))
    for a, b, c in zip(plain, compiled, undecorated, strict=True):
        assert a.shape == b.shape == c.shape == (1,)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert plain[-1][0] != plain[0][0]


def test_strategies_resolved_at_first_run_as_fluid_does():
    main, startup, loss = _net()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    compiled = CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    exe.run(compiled, feed=[_feed(0)], fetch_list=[loss], scope=scope)  # one dict per place
    assert compiled._exec_strategy.num_threads == 2  # 2 x CPU places
    assert compiled._exec_strategy.use_cuda is False
    assert compiled._build_strategy.is_distribution is False
    assert compiled._places == [fluid.CPUPlace()]
    with pytest.raises(ValueError, match="different scope"):
        exe.run(compiled, feed=_feed(0), fetch_list=[loss], scope=fluid.Scope())
    with pytest.raises(ValueError, match="same size as places"):
        exe.run(compiled, feed=[_feed(0), _feed(1)], fetch_list=[loss], scope=scope)
    with pytest.raises(ValueError, match="Already compiled with parallel"):
        compiled.with_data_parallel(loss_name=loss.name)


def test_cpu_num_defaults_to_one(monkeypatch):
    monkeypatch.delenv("CPU_NUM")
    assert fluid.cpu_places() == [fluid.CPUPlace()]
    assert os.environ["CPU_NUM"] == "1"  # set for child processes, as Fluid 1.8 does
    assert len(fluid.cpu_places(3)) == 3


def test_share_vars_from_must_have_run():
    main, _, loss = _net()
    train = CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    test = CompiledProgram(main.clone(for_test=True)).with_data_parallel(share_vars_from=train)
    with pytest.raises(ValueError, match="not compiled and executed"):
        fluid.Executor().run(test, feed=_feed(0))


@pytest.mark.parametrize("setup, match", [
    (lambda b, e, env: (env.setenv("CPU_NUM", "2"), setattr(b, "num_trainers", 2)),
     r"num_trainers=2 trainers with 2 places each \(CPU_NUM=2\) is not implemented"),
    (lambda b, e, env: setattr(e, "num_iteration_per_run", 2),
     "num_iteration_per_run=2 is not implemented"),
    (lambda b, e, env: setattr(b, "debug_graphviz_path", "/tmp/g"),
     "debug_graphviz_path is not implemented"),
])
def test_not_implemented_yet_says_which(monkeypatch, setup, match):
    main, startup, loss = _net()
    build, execs = BuildStrategy(), ExecutionStrategy()
    setup(build, execs, monkeypatch)
    compiled = CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, build_strategy=build, exec_strategy=execs)
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(NotImplementedError, match=match):
        exe.run(compiled, feed=_feed(0), fetch_list=[loss])


def test_explicit_places_over_one_and_two():
    main, startup, loss = _net()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    one = CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                   places=fluid.CPUPlace())
    assert exe.run(one, feed=_feed(0), fetch_list=[loss], scope=scope)[0].shape == (1,)
    two = CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                   places=[fluid.CPUPlace()] * 2)
    # one loss a place (tests/core/test_multi_place.py checks the training itself)
    assert exe.run(two, feed=_feed(0), fetch_list=[loss], scope=scope)[0].shape == (2,)


def test_strategy_defaults_and_unknown_fields():
    build = BuildStrategy()
    assert build.reduce_strategy == BuildStrategy.ReduceStrategy.AllReduce
    assert BuildStrategy.ReduceStrategy.Reduce != BuildStrategy.ReduceStrategy.AllReduce
    assert build.gradient_scale_strategy == BuildStrategy.GradientScaleStrategy.CoeffNumDevice
    assert (build.num_trainers, build.trainer_id, build.trainers_endpoints) == (1, 0, [])
    assert build.memory_optimize is None and build.remove_unnecessary_lock is True
    assert build.fuse_all_reduce_ops is True and build.sync_batch_norm is False
    build.enable_inplace = False  # test_dist_base.py's settings are accepted
    build.memory_optimize = False
    with pytest.raises(AttributeError, match="no attribute 'enable_inplce'"):
        build.enable_inplce = False
    passes = build._finalize_strategy_and_create_passes()  # tests/core/test_ir_passes.py
    assert passes is build._finalize_strategy_and_create_passes() and not passes.all_passes()
    execs = ExecutionStrategy()
    assert (execs.num_threads, execs.num_iteration_per_drop_scope,
            execs.num_iteration_per_run) == (0, 100, 1)
    with pytest.raises(AttributeError):
        execs.num_thread = 1


def test_type_errors():
    with pytest.raises(TypeError, match="expects a Program"):
        CompiledProgram("main")
    with pytest.raises(TypeError, match="Program or a CompiledProgram, got str"):
        fluid.Executor().run("main")
