"""Async mode with a learning-rate decay: the programs of the trainers' own step counters
(Fluid 1.8's ``_get_lr_ops``; test_dist_transpiler_async_decay.py). A job whose schedule
follows the global step count: tests/distributed/test_pserver_async.py."""

from __future__ import annotations

from dask_fluid import layers
from dask_fluid.transpiler import DistributeTranspiler

from .models import PSERVERS, A, config, fluid_test_net

COUNTER = "@LR_DECAY_COUNTER@"


def _exponential_decay():
    return layers.exponential_decay(learning_rate=0.1, decay_steps=100, decay_rate=0.99,
                                    staircase=True)


def _transpile(sync_mode: bool = False, trainer_id: int = 0, cfg: dict | None = None) -> tuple:
    main, startup = fluid_test_net(lr=_exponential_decay)
    t = DistributeTranspiler(config(**(cfg or {})))
    t.transpile(trainer_id, program=main, startup_program=startup, pservers=PSERVERS,
                trainers=2, sync_mode=sync_mode)
    ps_main, ps_startup = t.get_pserver_programs(A)
    return t.get_trainer_program(wait_port=False), startup, ps_main, ps_startup


def _inits(startup) -> dict:
    return {op.output("Out")[0]: op.attrs["value"] for op in startup.global_block().ops
            if op.type == "fill_constant"}


def test_programs_as_fluid():
    trainer, startup, ps_main, ps_startup = _transpile()
    assert [op.type for op in startup.global_block().ops] == [
        "fill_constant"] * 4 + ["uniform_random", "recv", "recv", "fetch_barrier", "concat"]
    assert [op.type for op in trainer.global_block().ops] == [
        "mul", "elementwise_add", "elementwise_sub", "square", "mean", "fill_constant",
        "mean_grad", "square_grad", "elementwise_sub_grad", "elementwise_add_grad", "send",
        "mul_grad", "split_byref", "send", "send", "recv", "recv", "concat"]
    send = trainer.global_block().ops[14]
    mine = f"{COUNTER}.trainer_0"
    assert send.input("X") == [mine]
    assert send.attrs["epmap"] == PSERVERS.split(",")
    assert send.attrs["sections"] == [] and send.attrs["send_varnames"] == []
    assert send.attrs["merge_add"] is True and send.attrs["use_send_handler"] is False
    assert send.attrs["op_role_var"] == [mine, mine]
    assert [op.type for op in ps_main.blocks[1].ops] == [
        "sum", "cast", "scale", "floor", "fill_constant", "elementwise_pow", "scale"]
    assert ps_main.blocks[1].ops[0].input("X") == [f"{COUNTER}.trainer_0",
                                                   f"{COUNTER}.trainer_1"]
    assert [op.type for op in ps_startup.global_block().ops] == [
        "fill_constant"] * 4 + ["uniform_random"]
    expected = {COUNTER: -2.0, f"{COUNTER}.trainer_0": 1.0, f"{COUNTER}.trainer_1": 1.0}
    for prog in (startup, ps_startup):
        assert {n: v for n, v in _inits(prog).items() if COUNTER in n} == expected


def test_runtime_split_names_the_counter():
    trainer, *_ = _transpile(trainer_id=1,
                             cfg={"sync_mode": False, "runtime_split_send_recv": True})
    send = [op for op in trainer.global_block().ops if op.type == "send"][-1]
    assert send.attrs["send_varnames"] == [f"{COUNTER}.trainer_1"]


def test_sync_mode_keeps_the_increment():
    trainer, startup, ps_main, _ = _transpile(sync_mode=True)
    assert ps_main.blocks[1].ops[0].type == "increment"
    assert _inits(startup)[COUNTER] == -1.0
    assert not any(COUNTER in n for op in trainer.global_block().ops
                   if op.type == "send" for n in op.input_arg_names)
