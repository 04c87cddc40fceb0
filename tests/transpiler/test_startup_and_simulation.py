"""Pserver startups reproduce the local initial values exactly, and the transpiled programs,
run by the in-process reference runner, train exactly like one process on the global batch."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.transpiler import HashName, PSDispatcher, RoundRobin
from dask_fluid.transpiler.simulate import InProcessCluster

from .models import config, op_types, reference_mlp, transpile, word_data, word_net

THREE = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"


def _mixed_init_net():
    """Uniform, normal and truncated normal weights of awkward shapes, 3 pservers."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 7
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [37])
        h = layers.fc(x, 1003, act="tanh",
                      param_attr=fluid.initializer.Normal(0.0, 0.1))
        h = layers.fc(h, 17, param_attr=fluid.initializer.TruncatedNormal(0.0, 0.1))
        loss = layers.mean(layers.square_error_cost(h, layers.data("y", [17])))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup


def _local_values(startup):
    scope = fluid.Scope()
    fluid.Executor().run(startup, scope=scope)
    return scope


@pytest.mark.parametrize("build,pservers,split_method", [
    (lambda: reference_mlp()[:2], "127.0.0.1:1,127.0.0.1:2", RoundRobin),
    (lambda: reference_mlp(optimizer=lambda: fluid.optimizer.Adam(0.01))[:2], THREE, HashName),
    (_mixed_init_net, THREE, RoundRobin),
])
def test_pserver_startup_blocks_concatenate_to_local_startup(build, pservers, split_method):
    main, startup = build()
    local = _local_values(startup.clone())
    t = transpile(main, startup, config(split_method=split_method), pservers=pservers)
    scopes = {ep: _local_values(t.get_pserver_programs(ep)[1]) for ep in t.pserver_endpoints}
    assert any(len(b) > 1 for b in t.param_blocks.values())
    for pp in t.plan.params:
        parts = [scopes[ep].get(n) for n, ep in zip(pp.param_block_names, pp.endpoints,
                                                   strict=True)]
        np.testing.assert_array_equal(np.concatenate(parts), local.get(pp.param))
        assert local.get(pp.param).std() > 0 or pp.param.endswith(".b_0")


def _model(kind: str, optimizer: str):
    opt = {"sgd": lambda: fluid.optimizer.SGD(0.1),
           "momentum": lambda: fluid.optimizer.Momentum(0.05, 0.9),
           "adam": lambda: fluid.optimizer.Adam(0.01),
           "rmsprop": lambda: fluid.optimizer.RMSProp(0.01)}[optimizer]
    if kind == "mlp":
        return reference_mlp(optimizer=opt, dtype="float64")
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 3
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        clip = fluid.clip.GradientClipByValue(0.05)
        ids = layers.data("ids", [1], dtype="int64")
        emb = layers.embedding(ids, [2000, 16], is_sparse=(kind == "sparse"), dtype="float64")
        x = layers.data("x", [64], dtype="float64")
        h = layers.fc([emb, x], 64, act="relu", param_attr=fluid.ParamAttr(
            gradient_clip=clip, regularizer=fluid.regularizer.L2Decay(1e-3)))
        logits = layers.fc(h, 10)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, layers.data(
            "y", [1], dtype="int64")))
        opt().minimize(loss)
    return main, startup, loss


def _batches(steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        yield {"x": rng.normal(size=(64, 64)), "y": rng.integers(0, 10, size=(64, 1)),
               "ids": rng.integers(0, 2000, size=(64, 1))}


@pytest.mark.parametrize("kind,optimizer,slice_var_up,split_method,pservers", [
    ("mlp", "sgd", True, RoundRobin, "127.0.0.1:1,127.0.0.1:2"),
    ("mlp", "sgd", False, RoundRobin, "127.0.0.1:1,127.0.0.1:2"),
    ("mlp", "momentum", True, HashName, THREE),
    ("mlp", "momentum", False, HashName, "127.0.0.1:1,127.0.0.1:2"),
    ("mlp", "adam", True, RoundRobin, THREE),
    ("mlp", "adam", False, HashName, THREE),
    ("mlp", "rmsprop", True, RoundRobin, "127.0.0.1:1,127.0.0.1:2"),
    ("dense", "adam", True, HashName, "127.0.0.1:1,127.0.0.1:2"),
    ("sparse", "sgd", True, RoundRobin, "127.0.0.1:1,127.0.0.1:2"),
    ("sparse", "momentum", True, RoundRobin, THREE),
])
def test_sync_training_equals_local_training(kind, optimizer, slice_var_up, split_method,
                                             pservers):
    main, startup, loss = _model(kind, optimizer)
    cfg = config(slice_var_up=slice_var_up, split_method=split_method)
    cluster = InProcessCluster(main, startup, pservers, 2, cfg)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    for batch in _batches(4):
        feed = {k: v for k, v in batch.items() if main.global_block().has_var(k)}
        (local_loss,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        halves = [{k: v[:32] for k, v in feed.items()}, {k: v[32:] for k, v in feed.items()}]
        losses = cluster.step(halves, fetch_list=[loss.name])
        np.testing.assert_allclose(np.mean([lo[0] for lo in losses]), local_loss, rtol=1e-6)
    for name, value in cluster.parameters().items():
        np.testing.assert_allclose(value, scope.get(name), rtol=1e-6, atol=1e-12,
                                   err_msg=name)
    # a sparse table is looked up on the pservers: the trainers' copies stay as at startup
    remote = {pp.param for pp in cluster.transpilers[0].plan.params if pp.remote}
    assert remote == ({"embedding_0.w_0"} if kind == "sparse" else set())
    for t, tscope in enumerate(cluster.trainer_scopes):
        for name, value in cluster.parameters().items():
            if name not in remote:
                np.testing.assert_array_equal(tscope.get(name), value, err_msg=f"trainer {t}")


def test_single_trainer_sync_has_no_trainer_suffix():
    main, startup, loss = _model("mlp", "sgd")
    cluster = InProcessCluster(main, startup, "127.0.0.1:1,127.0.0.1:2", 1)
    sends = [op for op in cluster.transpilers[0].get_trainer_program().global_block().ops
             if op.type == "send"]
    assert all(".trainer_" not in n for op in sends for n in op.input("X"))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    for batch in _batches(2):
        feed = {"x": batch["x"], "y": batch["y"]}
        exe.run(main, feed=feed, scope=scope)
        cluster.step([feed])
    for name, value in cluster.parameters().items():
        np.testing.assert_allclose(value, scope.get(name), rtol=1e-9)


def test_async_and_dc_asgd_run():
    for dc in (False, True):
        main, startup, loss = _model("mlp", "sgd")
        cluster = InProcessCluster(main, startup, "127.0.0.1:1,127.0.0.1:2", 2,
                                   config(enable_dc_asgd=dc), sync_mode=False)
        before = {k: v.copy() for k, v in cluster.parameters().items()}
        for batch in _batches(2):
            feed = {"x": batch["x"], "y": batch["y"]}
            cluster.step([{k: v[:32] for k, v in feed.items()},
                          {k: v[32:] for k, v in feed.items()}])
        after = cluster.parameters()
        assert all(not np.array_equal(before[k], after[k]) for k in before)
        assert all(np.isfinite(v).all() for v in after.values())


class AllOnFirst(PSDispatcher):
    """A custom dispatcher that puts every block on the first pserver."""

    def dispatch(self, varlist):
        return [self.eps[0]] * len(varlist)


def test_two_blocks_of_one_param_on_one_pserver_keep_separate_state():
    # Fluid makes one optimize block per optimizer op, so a second block of the same parameter
    # on the same pserver would never be updated; here each block has its own block and state.
    main, startup, loss = _model("mlp", "adam")
    cfg = config(split_method=AllOnFirst)
    cluster = InProcessCluster(main, startup, "127.0.0.1:1,127.0.0.1:2", 2, cfg)
    prog = cluster.pserver_programs["127.0.0.1:1"]
    assert prog.global_block().has_var("fc_1.w_0_moment1_0.block1")
    assert prog.global_block().var("fc_1.w_0_moment1_0.block1").shape == (128, 256)
    assert op_types(cluster.pserver_programs["127.0.0.1:2"].block(1)) == []
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    for batch in _batches(3):
        feed = {"x": batch["x"], "y": batch["y"]}
        exe.run(main, feed=feed, scope=scope)
        cluster.step([{k: v[:32] for k, v in feed.items()}, {k: v[32:] for k, v in feed.items()}])
    for name, value in cluster.parameters().items():
        np.testing.assert_allclose(value, scope.get(name), rtol=1e-6, atol=1e-12, err_msg=name)


def test_sync_mode_argument_must_be_bool():
    main, startup, _ = reference_mlp()
    with pytest.raises(ValueError, match="sync_mode = 'yes' is not allowed"):
        transpile(main, startup, sync_mode="yes")


@pytest.mark.parametrize("loss,trainers", [("nce", 1), ("hsigmoid", 2)])
def test_nce_and_hsigmoid_tables_read_on_the_pservers_simulate_like_local(loss, trainers):
    # the in-process runner reads their rows (forward and grad op) from the pserver scopes
    main, startup = word_net(loss)
    cluster = InProcessCluster(main, startup, "127.0.0.1:1,127.0.0.1:2", trainers)
    exe, scope = fluid.Executor(), fluid.Scope()
    lmain, lstartup = word_net(loss)
    exe.run(lstartup, scope=scope)
    data = word_data(96, seed=3)
    for s in range(3):
        feed = {k: v[32 * s:32 * (s + 1)] for k, v in data.items()
                if main.global_block().has_var(k)}
        exe.run(lmain, feed=feed, scope=scope)
        cluster.step([{k: v[i * 32 // trainers:(i + 1) * 32 // trainers] for k, v in feed.items()}
                      for i in range(trainers)])
    remote = {pp.param for pp in cluster.transpilers[0].plan.params if pp.remote}
    assert remote == {"word_emb", "nce_w" if loss == "nce" else "hs_w"}
    for name, value in cluster.parameters().items():
        np.testing.assert_allclose(value, scope.get(name), rtol=1e-5, atol=1e-7, err_msg=name)
