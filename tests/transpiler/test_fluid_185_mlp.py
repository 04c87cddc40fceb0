"""The reference MLP transpiled for 2 pservers and 2 trainers equals real Fluid 1.8.5's output
(shared/reference/fluid-1.8.5-mlp-programs.txt), op for op and name for name.

With ``slice_var_up=False`` Fluid shuffles the gradient list with
``np.random.seed(program.random_seed); np.random.shuffle``; we shuffle with
``np.random.RandomState(program.random_seed).shuffle``, which is the same legacy generator and
the same algorithm, so the placement matches Fluid's exactly here (both are asserted below).

The trainer's startup program has no ``fill_constant`` for the learning rate: Fluid 1.8.5
drops the optimizer-only variables' init ops there, and so do we.
"""

from __future__ import annotations

import numpy as np
import pytest

from .models import config, op_types, reference_mlp, transpile

E1, E2 = "127.0.0.1:36001", "127.0.0.1:36002"

FWD_BWD_HEAD = ["mul", "elementwise_add", "relu", "mul", "elementwise_add", "relu", "mul",
                "elementwise_add", "softmax_with_cross_entropy", "mean", "softmax", "top_k",
                "accuracy", "fill_constant", "mean_grad", "softmax_with_cross_entropy_grad",
                "elementwise_add_grad", "send", "mul_grad", "send", "relu_grad",
                "elementwise_add_grad", "send", "mul_grad"]
INIT = ["fill_constant", "uniform_random"] * 3

SLICED = {
    "trainer": FWD_BWD_HEAD + [
        "split_byref", "send", "relu_grad", "elementwise_add_grad", "send", "mul_grad",
        "split_byref", "send", "send_barrier"] + ["recv"] * 6 + ["fetch_barrier", "concat",
                                                                  "concat"],
    "startup": INIT + ["recv"] * 6 + ["fetch_barrier", "concat", "concat"],
    "sends": [
        (["fc_2.b_0@GRAD.trainer_0"], [E1]),
        (["fc_2.w_0@GRAD.trainer_0"], [E2]),
        (["fc_1.b_0@GRAD.trainer_0"], [E2]),
        (["fc_1.w_0@GRAD.block0.trainer_0", "fc_1.w_0@GRAD.block1.trainer_0"], [E1, E2]),
        (["fc_0.b_0@GRAD.trainer_0"], [E1]),
        (["fc_0.w_0@GRAD.block0.trainer_0", "fc_0.w_0@GRAD.block1.trainer_0"], [E2, E1]),
    ],
    "recvs": [
        (["fc_0.b_0"], [E1]), (["fc_0.w_0.block0", "fc_0.w_0.block1"], [E2, E1]),
        (["fc_1.b_0"], [E2]), (["fc_1.w_0.block0", "fc_1.w_0.block1"], [E1, E2]),
        (["fc_2.b_0"], [E1]), (["fc_2.w_0"], [E2]),
    ],
    "pservers": {
        E1: (["fill_constant", "fill_constant", "uniform_random", "fill_constant",
              "uniform_random"],
             [("fc_0.b_0", ""), ("fc_0.w_0", ".block1"), ("fc_1.w_0", ".block0"),
              ("fc_2.b_0", "")]),
        E2: (["fill_constant", "uniform_random", "fill_constant", "uniform_random",
              "uniform_random"],
             [("fc_0.w_0", ".block0"), ("fc_1.b_0", ""), ("fc_1.w_0", ".block1"),
              ("fc_2.w_0", "")]),
    },
}

UNSLICED = {
    "trainer": FWD_BWD_HEAD + [
        "send", "relu_grad", "elementwise_add_grad", "send", "mul_grad", "send",
        "send_barrier"] + ["recv"] * 6 + ["fetch_barrier"],
    "startup": INIT + ["recv"] * 6 + ["fetch_barrier"],
    "sends": [
        (["fc_2.b_0@GRAD.trainer_0"], [E1]), (["fc_2.w_0@GRAD.trainer_0"], [E2]),
        (["fc_1.b_0@GRAD.trainer_0"], [E1]), (["fc_1.w_0@GRAD.trainer_0"], [E1]),
        (["fc_0.b_0@GRAD.trainer_0"], [E2]), (["fc_0.w_0@GRAD.trainer_0"], [E2]),
    ],
    "recvs": [
        (["fc_0.b_0"], [E2]), (["fc_0.w_0"], [E2]), (["fc_1.b_0"], [E1]), (["fc_1.w_0"], [E1]),
        (["fc_2.b_0"], [E1]), (["fc_2.w_0"], [E2]),
    ],
    "pservers": {
        E1: (["fill_constant", "fill_constant", "fill_constant", "uniform_random"],
             [("fc_1.b_0", ""), ("fc_1.w_0", ""), ("fc_2.b_0", "")]),
        E2: (["fill_constant", "uniform_random", "fill_constant", "uniform_random"],
             [("fc_0.b_0", ""), ("fc_0.w_0", ""), ("fc_2.w_0", "")]),
    },
}


def _args(op):
    """Fluid prints input_arg_names with slots in sorted order (Grad, LearningRate, Param)."""
    return [n for slot in sorted(op.inputs) for n in op.inputs[slot]]


@pytest.mark.parametrize("slice_var_up,ref", [(True, SLICED), (False, UNSLICED)])
def test_matches_fluid_185(slice_var_up, ref):
    main, startup, _ = reference_mlp()
    t = transpile(main, startup, config(slice_var_up=slice_var_up), pservers=f"{E1},{E2}")
    trainer = t.get_trainer_program()
    assert op_types(trainer.global_block()) == ref["trainer"]
    assert op_types(startup.global_block()) == ref["startup"]
    ops = trainer.global_block().ops
    assert [(op.input("X"), op.attrs["epmap"]) for op in ops if op.type == "send"] == ref["sends"]
    assert [(op.output("Out"), op.attrs["epmap"]) for op in ops
            if op.type == "recv"] == ref["recvs"]
    for op in ops:
        if op.type == "split_byref":
            stem = op.input("X")[0]
            assert op.output("Out") == [f"{stem}.block0.trainer_0", f"{stem}.block1.trainer_0"]
        if op.type == "concat":
            stem = op.output("Out")[0]
            assert op.input("X") == [f"{stem}.block0", f"{stem}.block1"]
    for ep, (startup_ops, blocks) in ref["pservers"].items():
        prog, start = t.get_pserver_programs(ep)
        assert op_types(start.global_block()) == startup_ops
        assert len(prog.blocks) == 1 + len(blocks)
        for blk, (param, suffix) in zip(prog.blocks[1:], blocks, strict=True):
            grad = f"{param}@GRAD{suffix}"
            got = [(op.type, _args(op), op.output_arg_names) for op in blk.ops]
            assert got == [
                ("sum", [f"{grad}.trainer_0", f"{grad}.trainer_1"], [grad]),
                ("scale", [grad], [grad]),
                ("sgd", [grad, "learning_rate_0", param + suffix], [param + suffix]),
            ]


def test_sliced_shapes():
    main, startup, _ = reference_mlp()
    t = transpile(main, startup, pservers=f"{E1},{E2}")
    assert {p: [b.shape for b in bs] for p, bs in t.param_blocks.items()} == {
        "fc_0.b_0": [(256,)], "fc_0.w_0": [(32, 256), (32, 256)],
        "fc_1.b_0": [(256,)], "fc_1.w_0": [(128, 256), (128, 256)],
        "fc_2.b_0": [(10,)], "fc_2.w_0": [(256, 10)]}


def test_unsliced_order_is_fluids_shuffle():
    params = ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0", "fc_2.b_0", "fc_2.w_0"]
    np.random.seed(1)
    fluid_order = list(params)
    np.random.shuffle(fluid_order)
    placed = {p: (E1, E2)[i % 2] for i, p in enumerate(fluid_order)}
    main, startup, _ = reference_mlp()
    t = transpile(main, startup, config(slice_var_up=False), pservers=f"{E1},{E2}")
    assert {p: eps[0] for p, eps in t.param_endpoints.items()} == placed
