"""Fleet's parameter-server API as scripts use it: roles, strategies and their transpiler
configurations, the programs of each role, and the errors of a wrong order. (Training through
it: tests/launch/test_paddle_fleet.py.)"""

from __future__ import annotations

import pytest

import dask_fluid as fluid


@pytest.fixture
def fleet_modules():
    # the modules behind paddle.fluid.incubate.fleet.{base.role_maker, parameter_server...}
    from dask_fluid.compat.incubate.fleet.base import role_maker
    from dask_fluid.compat.incubate.fleet.parameter_server import distribute_transpiler

    return (role_maker, distribute_transpiler,
            distribute_transpiler.distributed_strategy.StrategyFactory)


def test_strategies_carry_fluid_18s_transpiler_configs(fleet_modules):
    _, _, factory = fleet_modules
    sync = factory.create_sync_strategy().get_program_config()
    assert (sync.sync_mode, sync.runtime_split_send_recv, sync.half_async,
            sync.completely_not_async) == (False, True, True, True)
    half = factory.create_half_async_strategy().get_program_config()
    assert (half.sync_mode, half.half_async) == (False, True)
    geo = factory.create_geo_strategy(7).get_program_config()
    assert geo.geo_sgd_mode and geo.geo_sgd_need_push_nums == 7
    strategy = factory.create_async_strategy()
    strategy.set_program_config({"min_block_size": 16384})
    assert strategy.get_program_config().min_block_size == 16384
    with pytest.raises(ValueError, match="doesn't have key: nope"):
        strategy.set_program_config({"nope": 1})
    assert isinstance(strategy.get_build_strategy(), fluid.BuildStrategy)


@pytest.mark.parametrize("role", ["WORKER", "SERVER"])
def test_each_role_gets_its_programs(fleet_modules, role):
    role_maker, module, factory = fleet_modules
    with pytest.raises(ValueError, match="fleet.init"):
        module.FleetTranspiler().distributed_optimizer(fluid.optimizer.SGD(0.1))
    fleet = module.fleet  # ParameterServerOptimizer.minimize transpiles through it, as Fluid
    fleet.init(role_maker.UserDefinedRoleMaker(
        current_id=0, role=getattr(role_maker.Role, role), worker_num=2,
        server_endpoints=["127.0.0.1:6170", "127.0.0.1:6171"]))
    with pytest.raises(ValueError, match="need invoke DistributedOptimizer.minimize first"):
        fleet.run_server()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4])
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        opt = fleet.distributed_optimizer(fluid.optimizer.SGD(0.1),
                                          factory.create_sync_strategy())
        opt.minimize(loss)
    ops = {op.type for op in fleet.main_program.global_block().ops}
    if role == "WORKER":
        assert fleet.is_worker() and "send" in ops and fleet.main_program is main
    else:
        assert fleet.is_server() and ops == {"listen_and_serv"}
    assert fleet.server_endpoints(to_string=True) == "127.0.0.1:6170,127.0.0.1:6171"
    with pytest.raises(ValueError, match="optimizer must be an instance of Optimizer"):
        fleet.distributed_optimizer("sgd")


def test_program_parse_from_string_reads_the_inference_model(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4])
        out = fluid.layers.fc(x, 2)
    exe = fluid.Executor()
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        fluid.io.save_inference_model(str(tmp_path), ["x"], out, exe, main)  # one Variable
    program = fluid.Program.parse_from_string((tmp_path / "__model__").read_bytes())
    assert [op.type for op in program.global_block().ops] == ["mul", "elementwise_add"]
    assert "mul" in str(program)
    with pytest.raises(ValueError, match="ProgramDesc protobuf written by real Fluid"):
        fluid.Program.parse_from_string(b"\\x0a\\x02\\x08\\x00")


def test_a_strategys_server_runtime_config_sizes_the_pserver_threads(fleet_modules):
    role_maker, module, factory = fleet_modules
    from dask_fluid.transpiler.distribute_transpiler import DistributedMode, ServerRuntimeConfig

    assert DistributedMode.SYNC == 0  # importable where Fluid 1.8 scripts import it from
    strategy = factory.create_async_strategy()
    assert isinstance(strategy.get_server_runtime_config(), ServerRuntimeConfig)
    strategy.set_server_runtime_config({"_rpc_send_thread_num": 5})
    with pytest.raises(ValueError, match="doesn't have key: threads"):
        strategy.set_server_runtime_config({"threads": 5})
    with pytest.raises(TypeError, match="dict or ServerRuntimeConfig"):
        strategy.set_server_runtime_config(5)
    fleet = module.fleet
    fleet.init(role_maker.UserDefinedRoleMaker(
        current_id=0, role=role_maker.Role.SERVER, worker_num=2,
        server_endpoints=["127.0.0.1:6170", "127.0.0.1:6171"]))
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4])
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy).minimize(loss)
    serv, = fleet.main_program.global_block().ops
    assert (serv.attrs["rpc_send_thread_num"], serv.attrs["rpc_get_thread_num"]) == (5, 12)


def test_transpiler_optimizer_is_the_pre_18_name_and_checks_its_strategy(fleet_modules):
    _, module, factory = fleet_modules
    assert module.TranspilerOptimizer is module.ParameterServerOptimizer
    sgd = fluid.optimizer.SGD(0.1)
    made = module.TranspilerOptimizer(sgd)  # Fluid's default: the sync strategy
    assert made._strategy.get_program_config().completely_not_async
    config = fluid.DistributeTranspilerConfig()
    config.sync_mode = False
    assert not module.TranspilerOptimizer(sgd, config)._strategy.get_program_config().half_async
    with pytest.raises(TypeError, match="strategy must be an instance of "
                                        "DistributeTranspilerConfig, SyncStrategy"):
        module.TranspilerOptimizer(sgd, "sync")


def test_train_status_counts_completed_epochs():
    from dask_fluid.compat.incubate.fleet.collective import TrainStatus

    status = TrainStatus(2)
    assert status.next() == 3 and status == TrainStatus(2) and status != TrainStatus()
    assert TrainStatus().next() == 0
