"""The pserver's cache-blocked sync update gives the executor's bits exactly, and only takes
the blocks it understands."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.distributed.pserver import fused_update
from dask_fluid.executor import Executor, Scope
from dask_fluid.transpiler import DistributeTranspiler


def _pserver_program(opt, trainers: int, dtype: str = "float32", regularize: bool = False):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[300], dtype=dtype)
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        h = fluid.layers.fc(x, size=250, act="relu")  # 75 000 weights: 3 chunks and a bit
        logits = fluid.layers.fc(h, size=3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        reg = fluid.regularizer.L2Decay(1e-3) if regularize else None
        opt(reg).minimize(loss)
    t = DistributeTranspiler()
    t.transpile(0, program=main, startup_program=startup, pservers="ps:1", trainers=trainers)
    return t.get_pserver_programs("ps:1")


OPTS = {
    "sgd": lambda reg: fluid.optimizer.SGD(0.1, regularization=reg),
    "momentum": lambda reg: fluid.optimizer.Momentum(0.05, 0.9, regularization=reg),
    "nesterov": lambda reg: fluid.optimizer.Momentum(0.05, 0.9, use_nesterov=True,
                                                     regularization=reg),
    "adam": lambda reg: fluid.optimizer.Adam(0.01, regularization=reg),
}


def _scopes(main, startup, trainers: int, seed: int):
    """Two identical scopes after the startup program, with random per-trainer gradients and
    velocities (so momentum starts from a non-zero state)."""
    rng = np.random.default_rng(seed)
    scopes = []
    for _ in range(2):
        scope = Scope()
        Executor().run(startup, scope=scope)
        scopes.append(scope)
    for block in main.blocks[1:]:
        for op in block.ops:
            if op.type in ("sgd", "momentum", "adam"):
                p = scopes[0].get(op.input("Param")[0])
                for name in block.ops[0].input("X"):
                    g = rng.standard_normal(p.shape).astype(p.dtype)
                    for scope in scopes:
                        scope.vars[name] = g.copy()
                if op.type == "momentum":
                    v = rng.standard_normal(p.shape).astype(p.dtype)
                    for scope in scopes:
                        scope.vars[op.input("Velocity")[0]] = v.copy()
    return scopes


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("trainers", [1, 2, 3])
@pytest.mark.parametrize("kind", ["sgd", "momentum", "nesterov"])
def test_bit_identical_to_the_executor(kind, trainers, dtype):
    main, startup = _pserver_program(OPTS[kind], trainers, dtype)
    fused_scope, exe_scope = _scopes(main, startup, trainers, seed=trainers)
    exe = Executor()
    blocks = [b for b in main.blocks[1:] if any(op.type in ("sgd", "momentum") for op in b.ops)]
    assert blocks
    for block in blocks:
        update = fused_update.plan(block)
        if trainers == 1:  # no sum / scale to fuse: the executor runs the block
            assert update is None
            continue
        assert update is not None and update.kind == kind.replace("nesterov", "momentum")
        for _ in range(3):  # state carries over between rounds
            assert update.run(fused_scope.vars)
            exe.run_block(main, block, exe_scope)
        for name in (update.param, update.velocity):
            if name:
                np.testing.assert_array_equal(fused_scope.get(name), exe_scope.get(name),
                                              err_msg=name)
                assert fused_scope.get(name).dtype == np.dtype(dtype)


@pytest.mark.parametrize("kind, regularize", [("adam", False), ("sgd", True),
                                              ("momentum", True)])
def test_other_blocks_are_left_to_the_executor(kind, regularize):
    main, _ = _pserver_program(OPTS[kind], 2, regularize=regularize)
    assert all(fused_update.plan(b) is None for b in main.blocks[1:])


def test_arrays_it_cannot_update_in_place_are_declined():
    main, startup = _pserver_program(OPTS["sgd"], 2)
    block = next(b for b in main.blocks[1:] if fused_update.plan(b) is not None)
    update = fused_update.plan(block)
    scope, _ = _scopes(main, startup, 2, seed=0)
    before = scope.get(update.param).copy()
    vals = dict(scope.vars)
    vals[update.grads[0]] = vals[update.grads[0]].astype(np.float64)  # dtype mismatch
    assert not update.run(vals)
    vals = dict(scope.vars)
    vals[update.param] = np.asfortranarray(vals[update.param]) if before.ndim > 1 else \
        vals[update.param][::-1]  # not C-contiguous: a flat view would be a copy
    assert not update.run(vals)
    np.testing.assert_array_equal(scope.get(update.param), before)
