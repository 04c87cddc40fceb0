"""Fluid's own transpiler unit tests (shared/reference/fluid-transpiler.md §9), ported.

Setup for all: trainer 0 of 2, pservers A and B, sync, random_seed 1, x[1000] -> fc(1000) ->
square_error_cost -> mean -> SGD(0.1) unless the test says otherwise.

Where Fluid versions disagree we follow 1.8.5 (the reference output of
fluid-1.8.5-mlp-programs.txt): ``get_trainer_program`` removes the optimizer-only variables
(the learning rate) and their init ops from the trainer startup, so its startup has one
``fill_constant`` fewer than the old §9 listing.
"""

from __future__ import annotations

import logging

import dask_fluid as fluid
from dask_fluid import layers

from .models import A, B, config, fluid_test_net, op_types, table_net, transpile

TRAINER_BASIC = ["mul", "elementwise_add", "elementwise_sub", "square", "mean",
                 "fill_constant", "mean_grad", "square_grad", "elementwise_sub_grad",
                 "elementwise_add_grad", "send", "mul_grad", "split_byref", "send",
                 "send_barrier", "recv", "recv", "fetch_barrier", "concat"]


def pserver(t, ep):
    return t.get_pserver_programs(ep)


def test_basic_model():
    main, startup = fluid_test_net()
    t = transpile(main, startup)
    trainer = t.get_trainer_program()
    assert trainer is main
    assert op_types(trainer.global_block()) == TRAINER_BASIC
    # Fluid 1.8.5 drops the learning rate's init from the trainer startup (its own MLP
    # output; test_dist_transpiler's TestBasicModel still lists it)
    assert op_types(startup.global_block()) == [
        "fill_constant", "uniform_random", "recv", "recv", "fetch_barrier", "concat"]
    svars = startup.global_block().vars
    assert "learning_rate_0" not in svars
    assert {"fc_w.block0", "fc_w.block1", "fc_w", "fc_b"} <= set(svars)
    assert not [n for n in svars if "@GRAD" in n]
    prog_a, start_a = pserver(t, A)
    assert len(prog_a.blocks) == 3
    assert op_types(prog_a.block(0)) == ["listen_and_serv"]
    assert op_types(prog_a.block(1)) == ["sum", "scale", "sgd"]
    assert op_types(start_a.global_block()) == ["fill_constant", "fill_constant",
                                                "uniform_random"]
    assert start_a.global_block().var("fc_w.block1").shape == (500, 1000)
    params = set()
    for ep in (A, B):
        prog, _ = pserver(t, ep)
        for blk in prog.blocks[1:]:
            for op in blk.ops:
                if "Param" in op.inputs:
                    params.add(op.input("Param")[0].split(".block")[0])
    assert params == {"fc_w", "fc_b"}
    serv = prog_a.block(0).ops[0]
    assert serv.attrs["grad_to_block_id"] == ["fc_b@GRAD:1", "fc_w@GRAD.block1:2"]
    assert serv.input("X") == ["fc_b@GRAD.trainer_0", "fc_b@GRAD.trainer_1",
                               "fc_w@GRAD.block1.trainer_0", "fc_w@GRAD.block1.trainer_1"]
    assert (serv.attrs["Fanin"], serv.attrs["sync_mode"], serv.attrs["endpoint"]) == (2, True, A)


def test_large_block_size():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(min_block_size=1048576))
    assert op_types(t.get_trainer_program().global_block()) == [
        *TRAINER_BASIC[:10], "send", "mul_grad", "send", "send_barrier", "recv", "recv",
        "fetch_barrier"]
    prog_a, start_a = pserver(t, A)
    assert len(prog_a.blocks) == 2
    assert op_types(prog_a.block(1)) == ["sum", "scale", "sgd"]
    assert op_types(start_a.global_block()) == ["fill_constant", "fill_constant"]
    _, start_b = pserver(t, B)
    assert start_b.global_block().var("fc_w").shape == (1000, 1000)


def test_no_slice_var():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(slice_var_up=False))
    shapes = {}
    for ep in (A, B):
        _, start = pserver(t, ep)
        if start.global_block().has_var("fc_w"):
            shapes[ep] = start.global_block().var("fc_w").shape
    assert list(shapes.values()) == [(1000, 1000)]


def test_lr_decay_exponential():
    main, startup = fluid_test_net(
        lr=lambda: layers.exponential_decay(1.0, 100000, 0.1, staircase=True))
    prog_a, _ = pserver(transpile(main, startup), A)
    assert len(prog_a.blocks) == 4
    # Fluid 1.8's math_op_patch (scale ops for a Variable and a Python number); Paddle's
    # test_dist_transpiler.py still lists the elementwise ops of older releases
    assert op_types(prog_a.block(1)) == [
        "increment", "cast", "scale", "floor", "fill_constant", "elementwise_pow", "scale"]
    assert prog_a.block(0).ops[0].attrs["lr_decay_block_id"] == 1
    assert prog_a.block(0).ops[0].attrs["optimize_blocks"] == [1, 2, 3]


def test_lr_decay_conditional():
    main, startup = fluid_test_net(lr=lambda: layers.piecewise_decay([10000, 20000],
                                                                     [1.0, 0.5, 1.0]))
    prog_a, _ = pserver(transpile(main, startup), A)
    assert len(prog_a.blocks) == 7
    assert op_types(prog_a.block(1)) == [
        "increment", "cast", "fill_constant", "fill_constant", "less_than", "logical_not",
        "conditional_block", "fill_constant", "fill_constant", "less_than", "logical_not",
        "logical_and", "logical_and", "conditional_block", "fill_constant",
        "conditional_block"]
    for idx in (2, 3, 4):
        assert op_types(prog_a.block(idx)) == ["assign"]
        assert prog_a.block(idx).parent_idx == 1
    subs = [op.attrs["sub_block"] for op in prog_a.block(1).ops if op.type == "conditional_block"]
    assert subs == [2, 3, 4]


def test_l2_decay_with_clip():
    main2, startup2 = _clip_both_l2_fc_w()
    prog_a, _ = pserver(transpile(main2, startup2), A)
    assert len(prog_a.blocks) == 3
    assert op_types(prog_a.block(1)) == ["sum", "scale", "clip", "sgd"]
    assert op_types(prog_a.block(2)) == ["sum", "scale", "clip", "scale", "sum", "sgd"]
    # the optimizer reads what clip and decay produced, not the raw merged gradient
    sgd = prog_a.block(2).ops[-1]
    assert sgd.input("Grad") == prog_a.block(2).ops[-2].output("Out")
    assert prog_a.block(2).ops[2].input("X") == ["fc_w@GRAD.block1"]
    assert prog_a.block(2).ops[3].input("X") == ["fc_w.block1"]


def _clip_both_l2_fc_w():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 1
    clip = fluid.clip.GradientClipByValue(0.1)
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [1000])
        pred = layers.fc(x, 1000, param_attr=fluid.ParamAttr(
            name="fc_w", regularizer=fluid.regularizer.L2Decay(), gradient_clip=clip),
            bias_attr=fluid.ParamAttr(name="fc_b", gradient_clip=clip))
        cost = layers.mean(layers.square_error_cost(pred, layers.data("y", [1])))
        fluid.optimizer.SGD(0.1).minimize(cost)
    return main, startup


def test_l2_decay_with_piecewise():
    main, startup = fluid_test_net(
        optimizer=lambda lr: fluid.optimizer.Momentum(
            lr, 0.9, regularization=fluid.regularizer.L2Decay(1e-4)),
        lr=lambda: layers.piecewise_decay([10000, 20000, 30000, 40000],
                                          [1.0, 0.5, 0.1, 0.05, 0.01]))
    prog_a, _ = pserver(transpile(main, startup), A)
    assert len(prog_a.blocks) == 9
    assert op_types(prog_a.block(1)).count("conditional_block") == 5
    for idx in (7, 8):
        assert op_types(prog_a.block(idx)) == ["sum", "scale", "scale", "sum", "momentum"]


def test_empty_pserver_optimize_blocks(caplog):
    main, startup = fluid_test_net(bias=False)
    t = transpile(main, startup, config(slice_var_up=False))
    with caplog.at_level(logging.WARNING, logger="dask_fluid.transpiler"):
        prog_b, start_b = pserver(t, B)
    assert len(prog_b.blocks) == 2
    assert op_types(prog_b.block(1)) == []
    assert prog_b.block(0).ops[0].attrs["optimize_blocks"] == [1]
    assert "holds no block" in caplog.text


def test_rmsprop_accumulators_are_sliced():
    main, startup = fluid_test_net(optimizer=lambda lr: fluid.optimizer.RMSProp(lr))
    prog_a, start_a = pserver(transpile(main, startup), A)
    assert len(prog_a.blocks) == 3
    assert op_types(prog_a.block(1)) == ["sum", "scale", "rmsprop"]
    sblock = start_a.global_block()
    assert sblock.var("fc_w.block1").shape == (500, 1000)
    for acc in ("fc_w_momentum_0", "fc_w_mean_square_0", "fc_w_mean_grad_0"):
        assert sblock.var(acc).shape == (500, 1000)
        assert prog_a.global_block().var(acc).shape == (500, 1000)


def test_adam_sync_and_async():
    # Fluid 1.8: the adam op advances its beta powers (no scale ops after it)
    for sync, expected in ((True, ["sum", "scale", "adam"]), (False, ["adam"])):
        main, startup = fluid_test_net(optimizer=lambda lr: fluid.optimizer.Adam(lr))
        prog_a, start_a = pserver(transpile(main, startup, sync_mode=sync), A)
        assert op_types(prog_a.block(1)) == expected
        assert start_a.global_block().var("fc_w_moment1_0").shape == (500, 1000)
        assert start_a.global_block().var("fc_w_beta1_pow_acc_0").shape == (1,)


def test_load_slice_var():
    main, startup = fluid_test_net()
    t = transpile(main, startup)
    _, start_a = pserver(t, A)
    _, start_b = pserver(t, B)
    for name, blocks in t.param_blocks.items():
        numel = 0
        for b in blocks:
            var_name = f"{name}.block{b.index}" if len(blocks) > 1 else name
            for start in (start_a, start_b):
                if start.global_block().has_var(var_name):
                    shape = start.global_block().var(var_name).shape
                    numel += int(__import__("math").prod(shape))
        assert numel == int(__import__("math").prod(main.global_block().var(name).shape))


def test_async_trainer_program():
    main, startup = fluid_test_net()
    t = transpile(main, startup, sync_mode=False)
    ops = t.get_trainer_program().global_block().ops
    assert [op.type for op in ops][10:] == ["send", "mul_grad", "split_byref", "send", "recv",
                                            "recv", "concat"]
    sends = [op for op in ops if op.type == "send"]
    assert sends[0].input("X") == ["fc_b@GRAD"]
    assert sends[1].input("X") == ["fc_w@GRAD.block0", "fc_w@GRAD.block1"]
    recvs = [op for op in ops if op.type == "recv"]
    assert [r.input("X") for r in recvs] == [s.output("Out") for s in sends]
    prog_a, _ = pserver(t, A)
    assert op_types(prog_a.block(1)) == ["sgd"]
    # Fluid 1.8: async without runtime_split_send_recv is HALF_ASYNC (2); ASYNC (1) is the
    # Communicator's runtime split (tests/transpiler/test_config_fields.py)
    assert prog_a.block(0).ops[0].attrs["distributed_mode"] == 2


def test_args_in_program_and_trainer_metadata():
    main, startup = table_net()
    t = transpile(main, startup)
    prog = t.get_trainer_program()
    assert prog._is_distributed and prog._is_chief
    assert prog._distributed_lookup_table == "shared_w"
    assert prog._endpoints == [A, B]
    assert (prog._trainer_id, prog._num_trainers, prog._sync_mode) == (0, 2, True)
    assert t.param_endpoints == {"fc_b": [A], "fc_w": [B]}


def test_print_log(caplog):
    main, startup = fluid_test_net()
    with caplog.at_level(logging.INFO, logger="dask_fluid.transpiler"):
        t = transpile(main, startup, config(print_log=True))
        t.get_pserver_programs(A)
    assert "slice fc_w [1000, 1000] into [[500, 1000], [500, 1000]]" in caplog.text
    assert f"place fc_w.block1 on {A}" in caplog.text
    assert "block 2 for fc_w.block1 [500, 1000]: ['sum', 'scale', 'sgd']" in caplog.text
    caplog.clear()
    main, startup = fluid_test_net()
    with caplog.at_level(logging.INFO, logger="dask_fluid.transpiler"):
        transpile(main, startup)
    assert caplog.text == ""


def test_every_pserver_program_carries_the_overview_of_all_blocks():
    main, startup = fluid_test_net()
    t = transpile(main, startup)
    prog_a, _ = pserver(t, A)
    overview = prog_a._parameters_on_pservers
    on_a, on_b = overview.get_distributed_vars_by_ep(A), overview.get_distributed_vars_by_ep(B)
    assert on_a and on_b
    w = [v for v in on_a + on_b if v.origin.name == "fc_w"]
    assert all(v.is_slice for v in w) and sum(v.slice.shape[0] for v in w) == 1000
    assert overview.get_distributed_var_by_slice("fc_w.block0").endpoint in (A, B)
