"""Fluid 1.8's training-mode fields of DistributeTranspilerConfig (runtime_split_send_recv,
half_async, completely_not_async, geo_sgd_mode, geo_sgd_need_push_nums, sync_mode, wait_port):
their checks at assignment, the combinations transpile() refuses, and the programs each mode
produces (Fluid 1.8's distribute_transpiler.py and geo_sgd_transpiler.py).

Net: x[1000] -> fc(1000, fc_w/fc_b) -> square_error_cost -> mean -> SGD(0.1), trainer 0 of 2,
pservers A and B; fc_w is cut into 2 blocks (block0 on B, block1 on A), fc_b is whole on A.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.transpiler import DistributeTranspiler, DistributeTranspilerConfig
from dask_fluid.transpiler.modes import DistributedMode
from dask_fluid.transpiler.simulate import InProcessCluster

from .models import (
    PSERVERS,
    A,
    B,
    config,
    fluid_test_net,
    op_types,
    reference_mlp,
    table_net,
    transpile,
)

BACKWARD_HEAD = ["mul", "elementwise_add", "elementwise_sub", "square", "mean", "fill_constant",
                 "mean_grad", "square_grad", "elementwise_sub_grad", "elementwise_add_grad"]
ASYNC_SPLIT = {"sync_mode": False, "runtime_split_send_recv": True}
HALF_ASYNC_SPLIT = {**ASYNC_SPLIT, "half_async": True}
SYNC_SPLIT = {**HALF_ASYNC_SPLIT, "completely_not_async": True}  # fleet 1.8's SyncStrategy
GEO = {**ASYNC_SPLIT, "geo_sgd_mode": True, "geo_sgd_need_push_nums": 4}


def _ops(program, *types):
    return [op for op in program.global_block().ops if op.type in types]


def _serv(t, ep):
    return t.get_pserver_program(ep).global_block().ops[-1]


# -- assignment --------------------------------------------------------------------------------
def test_defaults_are_fluid_18s():
    cfg = DistributeTranspilerConfig()
    assert (cfg.sync_mode, cfg.runtime_split_send_recv, cfg.half_async,
            cfg.completely_not_async, cfg.geo_sgd_mode, cfg.geo_sgd_need_push_nums,
            cfg.wait_port) == (True, False, False, False, False, 100, True)
    assert not cfg.is_set("sync_mode")


@pytest.mark.parametrize("field,value,match", [
    ("sync_mode", None, "sync_mode can't be None"),
    ("runtime_split_send_recv", None, "runtime_split_send_recv can't be None"),
    ("runtime_split_send_recv", 1, r"runtime_split_send_recv = 1 .*bool"),
    ("half_async", "yes", r"half_async = 'yes' .*bool"),
    ("completely_not_async", None, r"completely_not_async = None .*bool"),
    ("geo_sgd_mode", 1, r"geo_sgd_mode = 1 .*bool"),
    ("geo_sgd_need_push_nums", 0, r"geo_sgd_need_push_nums = 0 .*int >= 1"),
    ("geo_sgd_need_push_nums", 4.0, r"geo_sgd_need_push_nums = 4.0 .*int >= 1"),
    ("geo_sgd_need_push_nums", True, r"geo_sgd_need_push_nums = True .*int >= 1"),
    ("wait_port", "no", r"wait_port = 'no' .*bool"),
])
def test_bad_values_are_refused_at_assignment(field, value, match):
    with pytest.raises(ValueError, match=match):
        setattr(DistributeTranspilerConfig(), field, value)


def test_runtime_split_needs_sync_mode_off_first_as_in_fluid_18():
    cfg = DistributeTranspilerConfig()
    with pytest.raises(ValueError, match="runtime_split_send_recv = True is not allowed while "
                                         "sync_mode is True.*set config.sync_mode = False"):
        cfg.runtime_split_send_recv = True
    cfg.sync_mode = False
    cfg.runtime_split_send_recv = True
    with pytest.raises(ValueError, match="sync_mode = True is not allowed while "
                                         "runtime_split_send_recv is True"):
        cfg.sync_mode = True
    assert cfg.is_set("sync_mode") and cfg.is_set("runtime_split_send_recv")


def test_copies_track_their_assignments_apart():
    cfg = config(sync_mode=False)
    other = copy.copy(cfg)
    other.geo_sgd_mode = True
    assert other.is_set("geo_sgd_mode") and not cfg.is_set("geo_sgd_mode")


def test_validate_catches_both_modes_set_behind_the_setters():
    cfg = config(**ASYNC_SPLIT)
    cfg.__dict__["sync_mode"] = True
    main, startup = fluid_test_net()
    with pytest.raises(ValueError, match="sync_mode and runtime_split_send_recv are both True"):
        transpile(main, startup, cfg)


# -- sync_mode precedence --------------------------------------------------------------------
def test_the_transpile_argument_decides_while_config_sync_mode_is_unset():
    main, startup = fluid_test_net()
    t = transpile(main, startup, DistributeTranspilerConfig(), sync_mode=False)
    assert not t.sync_mode
    assert t.training_mode.distributed_mode == DistributedMode.HALF_ASYNC


def test_an_assigned_config_sync_mode_wins_over_the_argument():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(sync_mode=False), sync_mode=True)
    assert not t.sync_mode and "send_barrier" not in op_types(main.global_block())
    main, startup = fluid_test_net()
    assert transpile(main, startup, config(sync_mode=True), sync_mode=False).sync_mode


# -- combinations transpile() refuses ----------------------------------------------------------
@pytest.mark.parametrize("fields,sync_arg,match", [
    ({"half_async": True}, True, "half_async needs asynchronous training, but sync_mode=True"),
    ({"sync_mode": True, "half_async": True}, False, "half_async needs asynchronous training"),
    ({"enable_dc_asgd": True}, True, "enable_dc_asgd needs asynchronous training"),
    ({"sync_mode": False, "geo_sgd_mode": True}, False,
     "geo_sgd_mode needs runtime_split_send_recv = True"),
    ({"geo_sgd_mode": True}, True, "geo_sgd_mode is asynchronous.*sync_mode = False"),
    ({**GEO, "half_async": True}, False, "geo_sgd_mode cannot be combined with half_async"),
    ({**GEO, "enable_dc_asgd": True}, False,
     "geo_sgd_mode cannot be combined with enable_dc_asgd"),
    ({**ASYNC_SPLIT, "geo_sgd_mode": True, "completely_not_async": True}, False,
     "geo_sgd_mode cannot be combined with completely_not_async"),
    ({"sync_mode": False, "completely_not_async": True}, False,
     "completely_not_async with sync_mode=False needs runtime_split_send_recv and half_async"),
    ({**ASYNC_SPLIT, "completely_not_async": True}, False,
     "completely_not_async with sync_mode=False needs half_async = True"),
    ({**SYNC_SPLIT, "enable_dc_asgd": True}, False,
     "enable_dc_asgd needs asynchronous training, but completely_not_async"),
])
def test_unsupported_combinations_raise_naming_them(fields, sync_arg, match):
    main, startup = fluid_test_net()
    with pytest.raises(ValueError, match=match):
        transpile(main, startup, config(**fields), sync_mode=sync_arg)


def test_geo_refuses_the_distributed_lookup_table():
    main, startup = table_net()
    with pytest.raises(ValueError, match="geo_sgd_mode does not support the distributed lookup "
                                         "table 'shared_w'"):
        transpile(main, startup, config(**GEO))


@pytest.mark.parametrize("field", ["runtime_split_send_recv", "half_async",
                                   "completely_not_async", "geo_sgd_mode"])
def test_nccl2_mode_refuses_the_pserver_modes(field):
    cfg = config(mode="nccl2", sync_mode=False)
    setattr(cfg, field, True)
    main, startup = fluid_test_net()
    t = DistributeTranspiler(cfg)
    with pytest.raises(ValueError, match=f"config.{field} is a pserver-mode option"):
        t.transpile(0, program=main, startup_program=startup, trainers=PSERVERS,
                    current_endpoint=A)


def test_half_async_without_the_runtime_split_is_fluids_half_async_mode():
    # Fluid 1.8: async without the Communicator is HALF_ASYNC whatever half_async says
    for fields in ({"sync_mode": False}, {"sync_mode": False, "half_async": True}):
        main, startup = fluid_test_net()
        t = transpile(main, startup, config(**fields), sync_mode=False)
        assert t.training_mode.distributed_mode == DistributedMode.HALF_ASYNC
        assert "send_barrier" not in op_types(t.get_trainer_program().global_block())


# -- programs ----------------------------------------------------------------------------------
def test_async_runtime_split_program():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(**ASYNC_SPLIT), sync_mode=False)
    trainer = t.get_trainer_program()
    # Fluid 1.8 (fluid-transpiler.md §4.1, Communicator async): no split_byref, no concat
    assert op_types(trainer.global_block()) == [*BACKWARD_HEAD, "send", "mul_grad", "send",
                                                "recv", "recv"]
    sends, recvs = _ops(trainer, "send"), _ops(trainer, "recv")
    assert [s.input("X") for s in sends] == [["fc_b@GRAD"], ["fc_w@GRAD"]]
    assert sends[1].attrs["sections"] == [500, 500]
    assert sends[1].attrs["send_varnames"] == ["fc_w@GRAD.block0", "fc_w@GRAD.block1"]
    assert sends[1].attrs["epmap"] == [B, A]
    assert [r.output("Out") for r in recvs] == [["fc_b"], ["fc_w"]]
    assert recvs[1].attrs["recv_varnames"] == ["fc_w.block0", "fc_w.block1"]
    assert [r.input("X") for r in recvs] == [s.output("Out") for s in sends]
    assert {op.attrs["distributed_mode"] for op in sends + recvs} == {1}
    # the startup still pulls the blocks and joins them, in every mode
    assert op_types(startup.global_block())[-4:] == ["recv", "recv", "fetch_barrier", "concat"]
    assert not [op for op in startup.global_block().ops if "distributed_mode" in op.attrs]
    serv = _serv(t, A)
    assert serv.attrs["distributed_mode"] == 1 and serv.attrs["sync_mode"] is False
    assert serv.input("X") == ["fc_b@GRAD", "fc_w@GRAD.block1"]
    prog_a = t.get_pserver_program(A)
    assert [op_types(b) for b in prog_a.blocks[1:]] == [["sgd"], ["sgd"]]


def test_half_async_runtime_split_program():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(**HALF_ASYNC_SPLIT), sync_mode=False)
    trainer = t.get_trainer_program()
    assert op_types(trainer.global_block())[10:] == ["send", "mul_grad", "send", "send_barrier",
                                                     "recv", "recv"]
    [barrier] = _ops(trainer, "send_barrier")
    assert barrier.attrs["half_async"] is True
    assert barrier.input("X") == [s.output("Out")[0] for s in _ops(trainer, "send")]
    assert {tuple(r.input("X")) for r in _ops(trainer, "recv")} == {tuple(barrier.output("Out"))}
    assert _serv(t, A).attrs["distributed_mode"] == 1  # Fluid 1.8: ASYNC on the pserver
    assert t.training_mode.name == "async (half-async, runtime split)"


def test_completely_not_async_is_sync_through_the_runtime_split():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(**SYNC_SPLIT), sync_mode=False)
    assert t.sync_mode
    trainer = t.get_trainer_program()
    assert op_types(trainer.global_block())[10:] == ["send", "mul_grad", "send", "send_barrier",
                                                     "recv", "recv"]
    sends = _ops(trainer, "send")
    # Fluid 1.8: send_varnames get the trainer suffix when completely_not_async and N > 1
    assert sends[0].attrs["send_varnames"] == ["fc_b@GRAD.trainer_0"]
    assert sends[1].attrs["send_varnames"] == ["fc_w@GRAD.block0.trainer_0",
                                               "fc_w@GRAD.block1.trainer_0"]
    assert sends[1].input("X") == ["fc_w@GRAD"]
    assert _ops(trainer, "send_barrier")[0].attrs["half_async"] is True
    serv = _serv(t, A)
    assert (serv.attrs["distributed_mode"], serv.attrs["sync_mode"]) == (0, True)
    assert serv.input("X") == ["fc_b@GRAD.trainer_0", "fc_b@GRAD.trainer_1",
                               "fc_w@GRAD.block1.trainer_0", "fc_w@GRAD.block1.trainer_1"]
    prog_a = t.get_pserver_program(A)
    assert [op_types(b) for b in prog_a.blocks[1:]] == [["sum", "scale", "sgd"]] * 2


def test_geo_sgd_programs():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(**GEO), sync_mode=False)
    trainer = t.get_trainer_program()
    # the trainer keeps its optimizer (and its startup the learning rate), then sends each
    # parameter's delta and merges the pservers' values
    assert op_types(trainer.global_block())[10:] == ["mul_grad", "sgd", "sgd", "send", "send",
                                                     "recv", "recv"]
    sends, recvs = _ops(trainer, "send"), _ops(trainer, "recv")
    assert [s.input("X") for s in sends] == [["fc_b"], ["fc_w"]]
    assert sends[1].attrs["send_varnames"] == ["fc_w.block0.delta", "fc_w.block1.delta"]
    assert sends[1].attrs["sections"] == [500, 500]
    assert {s.attrs["geo_sgd_need_push_nums"] for s in sends} == {4}
    assert [r.output("Out") for r in recvs] == [["fc_b"], ["fc_w"]]
    assert recvs[1].attrs["recv_varnames"] == ["fc_w.block0", "fc_w.block1"]
    assert {op.attrs["distributed_mode"] for op in sends + recvs} == {3}
    # no pull: each GEO trainer starts from its own (seeded, so equal) initial values, which
    # keeps a late trainer from starting from another's progress
    assert op_types(startup.global_block()) == [
        "fill_constant", "fill_constant", "uniform_random", "send"]
    init = startup.global_block().ops[-1]
    assert init.attrs["send_varnames"] == ["param_init"] and init.input("X") == ["fc_b", "fc_w"]
    prog_a, start_a = t.get_pserver_programs(A)
    serv = prog_a.global_block().ops[-1]
    assert serv.attrs["distributed_mode"] == 3
    assert serv.attrs["grad_to_block_id"] == ["fc_b.delta:1", "fc_w.block1.delta:2"]
    assert [(b.ops[0].type, b.ops[0].input("X"), b.ops[0].output("Out"))
            for b in prog_a.blocks[1:]] == [("sum", ["fc_b", "fc_b.delta"], ["fc_b"]),
                                            ("sum", ["fc_w.block1", "fc_w.block1.delta"],
                                             ["fc_w.block1"])]
    assert prog_a.global_block().var("fc_w.block1.delta").shape == (500, 1000)
    # only the parameter blocks are initialised on the pserver: no learning rate, no deltas
    assert op_types(start_a.global_block()) == ["fill_constant", "uniform_random"]
    assert t.training_mode.name == "async (GEO-SGD, every 4 steps)"


def test_nccl2_records_wait_port_on_gen_nccl_id():
    for wait_port in (True, False):
        main, startup = fluid_test_net()
        t = DistributeTranspiler(config(mode="nccl2", wait_port=wait_port))
        t.transpile(0, program=main, startup_program=startup, trainers=PSERVERS,
                    current_endpoint=A)
        assert startup.global_block().ops[-1].attrs["wait_port"] is wait_port


def test_wait_port_is_recorded_on_every_rpc_op():
    main, startup = fluid_test_net()
    t = transpile(main, startup)
    rpc = ("send", "recv", "send_barrier", "fetch_barrier")
    assert {op.attrs["wait_port"] for op in _ops(main, *rpc) + _ops(startup, *rpc)} == {True}
    t.get_trainer_program(wait_port=False)
    assert {op.attrs["wait_port"] for op in _ops(main, *rpc) + _ops(startup, *rpc)} == {False}
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(wait_port=False))
    assert {op.attrs["wait_port"] for op in _ops(startup, *rpc)} == {False}
    t.get_trainer_program(wait_port=True)  # the config's False still holds
    assert {op.attrs["wait_port"] for op in _ops(main, *rpc)} == {False}
    with pytest.raises(TypeError, match="wait_port must be a bool"):
        t.get_trainer_program(wait_port="no")


@pytest.mark.parametrize("fields", [ASYNC_SPLIT, GEO])
def test_the_in_process_runner_refuses_what_it_cannot_simulate(fields):
    main, startup = fluid_test_net()
    with pytest.raises(NotImplementedError, match="does not simulate"):
        InProcessCluster(main, startup, PSERVERS, 2, config(**fields), sync_mode=False)


def _run_in_process(fields: dict, sync_mode: bool, steps: int = 3) -> dict:
    main, startup, _ = reference_mlp(dtype="float64")
    cluster = InProcessCluster(main, startup, PSERVERS, 2, config(**fields), sync_mode=sync_mode)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x, y = rng.normal(size=(64, 64)), rng.integers(0, 10, size=(64, 1))
        cluster.step([{"x": x[:32], "y": y[:32]}, {"x": x[32:], "y": y[32:]}])
    return cluster.parameters()


@pytest.mark.parametrize("fields,twin,sync_mode", [
    (SYNC_SPLIT, {}, True),                          # the Communicator's sync = sync mode
    (HALF_ASYNC_SPLIT, {"sync_mode": False}, False),  # same updates, cut by the runtime
    ({**HALF_ASYNC_SPLIT, "enable_dc_asgd": True}, {"sync_mode": False, "enable_dc_asgd": True},
     False),
])
def test_runtime_split_variants_train_like_their_program_split_twins(fields, twin, sync_mode):
    split, plain = _run_in_process(fields, False), _run_in_process(twin, sync_mode)
    assert split.keys() == plain.keys()
    for name, value in split.items():
        np.testing.assert_array_equal(value, plain[name], err_msg=name)


def test_runtime_split_cuts_sparse_gradients_like_split_selected_rows():
    # a local (not distributed) table: its SelectedRows gradient is cut by row in the runtime
    def run(fields):
        main, startup = table_net(is_distributed=False, optimizer=lambda: fluid.optimizer.SGD(
            0.5))
        cluster = InProcessCluster(main, startup, PSERVERS, 2, config(**fields),
                                   sync_mode=False)
        rng = np.random.default_rng(0)
        for _ in range(3):
            feed = {"ids_a": rng.integers(0, 1000, (32, 1)),
                    "ids_b": rng.integers(0, 1000, (32, 1)),
                    "label": rng.integers(0, 2, (32, 1))}
            cluster.step([{k: v[:16] for k, v in feed.items()},
                          {k: v[16:] for k, v in feed.items()}])
        return cluster.parameters()

    split, plain = run(HALF_ASYNC_SPLIT), run({"sync_mode": False})
    assert len(split["shared_w"]) == 1000
    for name, value in split.items():
        np.testing.assert_array_equal(value, plain[name], err_msg=name)
