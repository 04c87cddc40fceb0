"""Sync pserver mode on a real (threads) LocalCluster equals local training (DESIGN.md
decision 3): 1 trainer exactly, N trainers each taking 1/N of every global batch to float
rounding, for SGD, Momentum and Adam, slice_var_up on and off, RoundRobin and HashName; the
uneven-data rule; the distributed lookup table; progress events; argument errors."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_fluid as fluid
from dask_fluid.distributed import train_pserver
from dask_fluid.distributed.program_values import persistable_names
from dask_fluid.models import mlp
from dask_fluid.transpiler import DistributeTranspiler, HashName, RoundRobin

from ..transpiler.models import config, reference_mlp, table_net, word_data, word_net


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as c:
        yield c


OPTIMIZERS = {"sgd": lambda: fluid.optimizer.SGD(0.1),
              "momentum": lambda: fluid.optimizer.Momentum(0.05, 0.9),
              "adam": lambda: fluid.optimizer.Adam(0.01),
              "adamax": lambda: fluid.optimizer.Adamax(0.01),
              "decayed_adagrad": lambda: fluid.optimizer.DecayedAdagrad(0.05),
              "ftrl": lambda: fluid.optimizer.Ftrl(0.05, l1=0.001, l2=0.001),
              "lars_momentum": lambda: fluid.optimizer.LarsMomentum(0.5, 0.9,
                                                                    lars_coeff=0.01)}


def _data(n: int, dtype=np.float64, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(n, 64)).astype(dtype), "y": rng.integers(0, 10, size=(n, 1))}


def _local(main, startup, batches: list[dict]) -> fluid.Scope:
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    for feed in batches:
        exe.run(main, feed=feed, scope=scope)
    return scope


def _rows(data: dict, lo: int, hi: int) -> dict:
    return {k: v[lo:hi] for k, v in data.items()}


def _cat(parts: list[dict]) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _two_trainers(data: dict, steps: int, half: int) -> tuple[list[dict], list[dict]]:
    """``steps`` global batches of ``2 * half`` rows, and each of 2 trainers' rows: trainer r
    takes half r of every global batch."""
    global_batches = [_rows(data, 2 * half * s, 2 * half * (s + 1)) for s in range(steps)]
    per_trainer = [_cat([_rows(b, r * half, (r + 1) * half) for b in global_batches])
                   for r in (0, 1)]
    return global_batches, per_trainer


def _assert_params_equal(params: dict, scope: fluid.Scope, rtol: float) -> None:
    assert params
    for name, value in params.items():
        expected = scope.get(name)
        scale = np.abs(expected).max() or 1.0
        assert np.abs(value - expected).max() <= rtol * scale, name
        np.testing.assert_allclose(value, expected, rtol=max(rtol, 1e-5), atol=rtol * scale,
                                   err_msg=name)


def test_one_trainer_two_pservers_20_steps_equal_local(client):
    x = _data(20 * 64, np.float32)
    spec = mlp()
    local = mlp()
    scope = _local(local.main, local.startup, [_rows(x, 64 * s, 64 * (s + 1)) for s in range(20)])
    result = train_pserver(client, spec.main, spec.startup, [x], pservers=2, batch_size=64,
                           shuffle=False, fetch_list=[spec.loss])
    assert result.steps == 20 and result.samples == 20 * 64
    _assert_params_equal(result.params, scope, 1e-6)
    # every persistable variable, the optimizer's included, each equal to local training's
    assert set(result.params) == set(persistable_names(local.main))


@pytest.mark.parametrize("slice_var_up", [True, False])
@pytest.mark.parametrize("split_method", [RoundRobin, HashName])
# lars_momentum scales by the norm of what a pserver holds: a sliced block's, not the whole
# parameter's (as in Fluid), so it equals local training only unsliced
@pytest.mark.parametrize("optimizer", [o for o in OPTIMIZERS if o != "lars_momentum"])
def test_two_trainers_three_pservers_equal_local_with_the_global_batch(
        client, optimizer, slice_var_up, split_method):
    steps, half = 4, 16
    x = _data(steps * 2 * half)
    global_batches, per_trainer = _two_trainers(x, steps, half)
    main, startup, loss = reference_mlp(optimizer=OPTIMIZERS[optimizer], dtype="float64")
    lmain, lstartup, _ = reference_mlp(optimizer=OPTIMIZERS[optimizer], dtype="float64")
    scope = _local(lmain, lstartup, global_batches)
    cfg = config(slice_var_up=slice_var_up, split_method=split_method)
    result = train_pserver(client, main, startup, per_trainer, config=cfg, pservers=3,
                           batch_size=half, shuffle=False, fetch_list=[loss])
    _assert_params_equal(result.params, scope, 1e-6)
    assert result.steps == steps and len(result.history) == 2 * steps


def test_lars_unsliced_equals_local(client):
    steps, half = 3, 16
    x = _data(steps * 2 * half)
    global_batches, per_trainer = _two_trainers(x, steps, half)
    main, startup, loss = reference_mlp(optimizer=OPTIMIZERS["lars_momentum"], dtype="float64")
    lmain, lstartup, _ = reference_mlp(optimizer=OPTIMIZERS["lars_momentum"], dtype="float64")
    scope = _local(lmain, lstartup, global_batches)
    result = train_pserver(client, main, startup, per_trainer,
                           config=config(slice_var_up=False), pservers=2, batch_size=half,
                           shuffle=False, fetch_list=[loss])
    _assert_params_equal(result.params, scope, 1e-6)


@pytest.mark.parametrize("transport", ["tcp", "dask"])
def test_both_data_paths_equal_local_on_worker_processes(dist_client, transport):
    # worker processes: the trainers reach the pserver on the other worker through its own
    # socket ("tcp") or through Dask RPC ("dask"), and the one on their worker directly
    steps, half = 3, 16
    x = _data(steps * 2 * half)
    global_batches, per_trainer = _two_trainers(x, steps, half)
    main, startup, loss = reference_mlp(optimizer=OPTIMIZERS["momentum"], dtype="float64")
    lmain, lstartup, _ = reference_mlp(optimizer=OPTIMIZERS["momentum"], dtype="float64")
    scope = _local(lmain, lstartup, global_batches)
    workers = sorted(dist_client.scheduler_info(n_workers=-1)["workers"])[:2]
    with dask.config.set({"dask_fluid.pserver.transport": transport}):
        result = train_pserver(dist_client, main, startup, per_trainer, trainers=workers,
                               pservers=workers, batch_size=half, shuffle=False,
                               fetch_list=[loss])
    _assert_params_equal(result.params, scope, 1e-6)
    lines = [ln for ln in result.summary.splitlines() if ln.startswith("pserver ")]
    assert len(lines) == 2 and all(f"({transport} data path)" in ln for ln in lines), lines


def test_a_bad_transport_setting_is_refused_before_anything_runs(client):
    spec = mlp()
    with dask.config.set({"dask_fluid.pserver.transport": "udp"}), \
            pytest.raises(ValueError, match="transport = 'udp' is not allowed"):
        train_pserver(client, spec.main, spec.startup, [_data(64, np.float32)], pservers=1)


def test_uneven_data_leaves_the_barrier_and_averages_over_the_active_trainers(client):
    # trainer 0 has 5 batches per epoch, trainer 1 has 3: in steps 3 and 4 of each epoch only
    # trainer 0 trains, and its gradient is used unscaled (1/active = 1), so the run equals
    # local training on the concatenation of the active trainers' batches.
    b = 8
    x = _data(8 * b, seed=3)
    parts = [_rows(x, 0, 5 * b), _rows(x, 5 * b, 8 * b)]
    main, startup, loss = reference_mlp(dtype="float64")
    lmain, lstartup, _ = reference_mlp(dtype="float64")
    batches = []
    for _ in range(2):
        for s in range(5):
            active = [_rows(p, s * b, (s + 1) * b) for p in parts if len(p["x"]) > s * b]
            batches.append(_cat(active))
    scope = _local(lmain, lstartup, batches)
    events = []
    result = train_pserver(client, main, startup, parts, pservers=2, batch_size=b, epochs=2,
                           shuffle=False, fetch_list=[loss], callbacks=[events.append])
    _assert_params_equal(result.params, scope, 1e-6)
    steps = {r: [e["step"] for e in result.history if e["rank"] == r] for r in (0, 1)}
    assert steps == {0: list(range(10)), 1: [0, 1, 2, 5, 6, 7]}
    assert result.samples == 2 * 8 * b and len(result.epochs) == 2


def test_progress_events_reach_the_callbacks(client):
    seen = []
    x = _data(96, np.float32)
    spec = mlp()
    result = train_pserver(client, spec.main, spec.startup, {"x": x["x"], "y": x["y"]},
                           pservers=1, trainers=2, batch_size=16, epochs=2,
                           fetch_list=[spec.loss, spec.accuracy], callbacks=[seen.append])
    kinds = {e["type"] for e in seen}
    assert {"step", "epoch_end"} <= kinds
    step = next(e for e in seen if e["type"] == "step")
    assert set(step["fetches"]) == {spec.loss.name, spec.accuracy.name}
    assert len(result.history) == 2 * 2 * 3 and result.epochs[1]["epoch"] == 1
    assert "pserver" in result.summary and "trainer 1 on worker" in result.summary


def test_dask_arrays_stay_on_their_workers_and_a_given_transpiler_is_used(client):
    x = _data(128, np.float32)
    X = da.from_array(x["x"], chunks=(64, 64))
    y = da.from_array(x["y"].ravel(), chunks=64)
    spec = mlp()
    t = DistributeTranspiler()
    t.transpile(0, program=spec.main, startup_program=spec.startup,
                pservers="127.0.0.1:6174,127.0.0.1:6175", trainers=2)
    result = train_pserver(client, data={"x": X, "y": y}, transpiler=t, batch_size=32)
    assert result.samples == 128
    assert "127.0.0.1:6174" in result.summary
    assert result.params["fc_0.w_0"].shape == (64, 256)


def test_distributed_lookup_table_with_prefetch_equals_local(client):
    # Fluid's table gradient is summed over trainers, not averaged, so equality with local
    # training holds for one trainer (docs/pserver.md); the dense layers are checked too.
    rng = np.random.default_rng(0)
    n, b = 64, 16
    data = {"ids_a": rng.integers(0, 1000, (n, 1)), "ids_b": rng.integers(0, 1000, (n, 1)),
            "label": rng.integers(0, 2, (n, 1))}
    main, startup = table_net(optimizer=lambda: fluid.optimizer.SGD(0.5))
    lmain, lstartup = table_net(optimizer=lambda: fluid.optimizer.SGD(0.5))
    scope = _local(lmain, lstartup, [_rows(data, s * b, (s + 1) * b) for s in range(n // b)])
    before = _local(lmain, lstartup, []).get("shared_w")
    result = train_pserver(client, main, startup, [data], pservers=2, batch_size=b,
                           shuffle=False)
    assert not np.allclose(result.params["shared_w"], before)
    _assert_params_equal(result.params, scope, 1e-6)
    assert "prefetches" in result.summary and " 0 prefetches" not in result.summary


def test_a_sparse_table_looked_up_on_the_pservers_equals_local_with_two_trainers(client):
    # embedding(is_sparse=True): sliced over the pservers, never received by the step (each
    # lookup prefetches its rows); its gradient is averaged like a dense one
    rng = np.random.default_rng(1)
    steps, half = 4, 16
    data = {"ids_a": rng.integers(0, 1000, (steps * 2 * half, 1)),
            "ids_b": rng.integers(0, 1000, (steps * 2 * half, 1)),
            "label": rng.integers(0, 2, (steps * 2 * half, 1))}
    global_batches, per_trainer = _two_trainers(data, steps, half)
    net = lambda: table_net(is_distributed=False,  # noqa: E731
                            optimizer=lambda: fluid.optimizer.Adam(0.01))
    main, startup = net()
    scope = _local(*net(), global_batches)
    result = train_pserver(client, main, startup, per_trainer, pservers=2, batch_size=half,
                           shuffle=False)
    _assert_params_equal(result.params, scope, 1e-5)
    before = _local(*net(), []).get("shared_w")
    assert np.abs(result.params["shared_w"] - before).max() > 1e-3
    assert " 0 prefetches" not in result.summary and "prefetches" in result.summary


def test_nce_and_its_embedding_read_on_the_pservers_equal_local(client):
    # nce(is_sparse) and embedding(is_sparse): both tables stay on the pservers, the forward
    # and the grad op read their rows there. One trainer: a fixed seed draws the same
    # negatives for the same rows, so the batch must not be split
    data = {k: v for k, v in word_data(48).items() if k in ("ids", "label")}
    main, startup = word_net("nce")
    scope = _local(*word_net("nce"), [_rows(data, 16 * s, 16 * (s + 1)) for s in range(3)])
    result = train_pserver(client, main, startup, [data], pservers=2, batch_size=16,
                           shuffle=False)
    _assert_params_equal(result.params, scope, 1e-6)
    before = _local(*word_net("nce"), [])
    for name in ("nce_w", "word_emb"):
        assert np.abs(result.params[name] - before.get(name)).max() > 1e-3, name
    assert " 0 prefetches" not in result.summary and "prefetches" in result.summary


def test_a_sparse_custom_tree_hsigmoid_read_on_the_pservers_equals_local_with_two_trainers(
        client):
    steps, half = 3, 16
    data = word_data(steps * 2 * half, seed=2)
    global_batches, per_trainer = _two_trainers(data, steps, half)
    main, startup = word_net("hsigmoid")
    scope = _local(*word_net("hsigmoid"), global_batches)
    result = train_pserver(client, main, startup, per_trainer, pservers=2, batch_size=half,
                           shuffle=False)
    _assert_params_equal(result.params, scope, 1e-5)
    before = _local(*word_net("hsigmoid"), []).get("hs_w")
    assert np.abs(result.params["hs_w"] - before).max() > 1e-3


def _static_rnn_net():
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 4
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[5, 3], dtype="float64")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        time_major = fluid.layers.transpose(x, [1, 0, 2])
        rnn = fluid.layers.StaticRNN()
        with rnn.step():
            word = rnn.step_input(time_major)
            prev = rnn.memory(shape=[-1, 8], batch_ref=word)
            h = fluid.layers.fc([word, prev], 8, act="tanh")
            rnn.update_memory(prev, h)
            rnn.step_output(h)
        last = fluid.layers.squeeze(fluid.layers.slice(rnn(), [0], [4], [5]), [0])
        logits = fluid.layers.fc(last, 2)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Adam(0.01).minimize(loss)
    return main, startup


def test_a_static_rnn_trained_by_two_trainers_equals_local(client):
    # the recurrent op's weight gradients (summed over the steps) go to the pservers as any
    # other parameter's
    rng = np.random.default_rng(3)
    steps, half = 3, 8
    data = {"x": rng.standard_normal((steps * 2 * half, 5, 3)),
            "y": rng.integers(0, 2, (steps * 2 * half, 1))}
    global_batches, per_trainer = _two_trainers(data, steps, half)
    main, startup = _static_rnn_net()
    scope = _local(*_static_rnn_net(), global_batches)
    result = train_pserver(client, main, startup, per_trainer, pservers=2, batch_size=half,
                           shuffle=False)
    _assert_params_equal(result.params, scope, 1e-6)
    before = _local(*_static_rnn_net(), [])
    assert np.abs(result.params["fc_0.w_1"] - before.get("fc_0.w_1")).max() > 1e-3


def _ifelse_net():
    """Rows through one of two fc branches by the sign of their first feature (IfElse)."""
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[4], dtype="float64")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        h = fluid.layers.fc(x, 6, act="tanh")
        zero = fluid.layers.fill_constant([1], "float64", 0.0)
        pick = fluid.layers.less_than(fluid.layers.slice(x, [1], [0], [1]), zero)
        ie = fluid.layers.IfElse(pick)
        with ie.true_block():
            ie.output(fluid.layers.fc(ie.input(h), 6, act="relu"))
        with ie.false_block():
            ie.output(fluid.layers.fc(ie.input(h), 6, act="tanh"))
        merged, = ie()
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(merged, 2), y))
        fluid.optimizer.Adam(0.01).minimize(loss)
    return main, startup


def test_an_ifelse_trained_by_two_trainers_equals_local(client):
    # the branches' weights get their gradients through conditional_block_grad and
    # split/merge_lod_tensor on each trainer, and go to the pservers as any other's
    rng = np.random.default_rng(5)
    steps, half = 3, 8
    data = {"x": rng.standard_normal((steps * 2 * half, 4)),
            "y": rng.integers(0, 2, (steps * 2 * half, 1))}
    global_batches, per_trainer = _two_trainers(data, steps, half)
    scope = _local(*_ifelse_net(), global_batches)
    result = train_pserver(client, *_ifelse_net(), per_trainer, pservers=2, batch_size=half,
                           shuffle=False)
    _assert_params_equal(result.params, scope, 1e-6)
    before = _local(*_ifelse_net(), [])
    for name in ("fc_1.w_0", "fc_2.w_0"):  # the true and the false branch
        assert np.abs(result.params[name] - before.get(name)).max() > 1e-3, name


def _while_rnn_net():
    """A tanh RNN over the 3 steps of each row, as a While loop over a tensor array."""
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 8
    layers = fluid.layers
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data(name="x", shape=[12], dtype="float64")
        y = layers.data(name="y", shape=[1], dtype="int64")
        steps = layers.create_array("float64")
        for t in range(3):
            layers.array_write(layers.slice(x, [1], [4 * t], [4 * t + 4]),
                               layers.fill_constant([1], "int64", t), array=steps)
        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", 3)
        # the loop's own copy: tanh's gradient reads the value the loop would overwrite
        mem = layers.assign(layers.fc(layers.slice(x, [1], [0], [4]), 5, act="tanh"))
        cond = layers.less_than(i, n)
        loop = layers.While(cond)
        with loop.block():
            h = layers.fc([layers.array_read(steps, i), mem], 5, act="tanh")
            layers.assign(h, mem)
            layers.increment(i, in_place=True)
            layers.less_than(i, n, cond=cond)
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(mem, 2), y))
        fluid.optimizer.Adam(0.01).minimize(loss)
    return main, startup


def test_a_while_loop_trained_by_two_trainers_equals_local(client):
    # the loop's weights get their gradients from while_grad, summed over the steps
    rng = np.random.default_rng(6)
    steps, half = 3, 8
    data = {"x": rng.standard_normal((steps * 2 * half, 12)),
            "y": rng.integers(0, 2, (steps * 2 * half, 1))}
    global_batches, per_trainer = _two_trainers(data, steps, half)
    scope = _local(*_while_rnn_net(), global_batches)
    result = train_pserver(client, *_while_rnn_net(), per_trainer, pservers=2, batch_size=half,
                           shuffle=False)
    _assert_params_equal(result.params, scope, 1e-6)
    before = _local(*_while_rnn_net(), [])
    for name in ("fc_1.w_0", "fc_1.w_1"):  # the loop body's input and state weights
        assert np.abs(result.params[name] - before.get(name)).max() > 1e-3, name


def _linear_net():
    """One parameter block (fc without bias, 640 values): of three pservers, two hold nothing."""
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 6
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[64], dtype="float64")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        logits = fluid.layers.fc(x, 10, bias_attr=False)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup


def test_pservers_holding_no_block_take_no_step_and_checkpoints_still_resume(client, tmp_path):
    steps, half = 4, 8
    x = _data(steps * 2 * half)
    global_batches, per_trainer = _two_trainers(x, steps, half)
    scope = _local(*_linear_net(), global_batches)
    result = train_pserver(client, *_linear_net(), per_trainer, pservers=3, batch_size=half,
                           shuffle=False, checkpoint_dir=str(tmp_path), checkpoint_every=2)
    _assert_params_equal(result.params, scope, 1e-6)
    lines = [ln for ln in result.summary.splitlines() if ln.startswith("pserver ")]
    assert len(lines) == 3
    assert sum(f"{steps} steps, {2 * steps} pushes" in ln for ln in lines) == 1
    assert sum("0 steps, 0 pushes" in ln for ln in lines) == 2, lines
    # the idle pservers saved nothing, and every round is still whole
    assert len(list(tmp_path.glob("idle-pserver-*.json"))) == 2
    assert sorted(p.name for p in tmp_path.glob("round-*")) == ["round-00000001",
                                                                "round-00000003"]
    resumed = train_pserver(client, *_linear_net(), per_trainer, pservers=3, batch_size=half,
                            shuffle=False, resume_from=str(tmp_path / "round-00000001"))
    assert resumed.steps == 2
    for name, value in result.params.items():
        np.testing.assert_array_equal(resumed.params[name], value, err_msg=name)


def test_more_trainers_than_workers_run_several_loops_per_worker_and_equal_local(client):
    # 6 trainers on 3 workers: two trainer loops per worker, each on its own rows
    steps, part = 3, 8
    x = _data(steps * 6 * part)
    global_batches = [_rows(x, 6 * part * s, 6 * part * (s + 1)) for s in range(steps)]
    main, startup, loss = reference_mlp(optimizer=OPTIMIZERS["adam"], dtype="float64")
    scope = _local(*reference_mlp(optimizer=OPTIMIZERS["adam"], dtype="float64")[:2],
                   global_batches)
    # as dask arrays of one chunk per trainer: rank r takes chunk r (a function of the data)
    per_rank = [_cat([_rows(b, r * part, (r + 1) * part) for b in global_batches])
                for r in range(6)]
    data = {k: da.from_array(np.concatenate([p[k] for p in per_rank]),
                             chunks=(steps * part, *per_rank[0][k].shape[1:]))
            for k in ("x", "y")}
    result = train_pserver(client, main, startup, data, pservers=2, trainers=6,
                           batch_size=part, shuffle=False, fetch_list=[loss])
    _assert_params_equal(result.params, scope, 1e-6)
    workers = [t["worker"] for t in result.stats["trainers"]]
    assert len(workers) == 6 and sorted(workers.count(w) for w in set(workers)) == [2, 2, 2]
    assert result.steps == steps and result.samples == steps * 6 * part


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"epochs": 0}, ValueError, "epochs = 0"),
    ({"batch_size": -1}, ValueError, "batch_size = -1"),
    ({"checkpoint_every": 2}, ValueError, "needs checkpoint_dir"),
    ({"trainers": 0}, ValueError, "need at least 1 trainer"),
    ({"trainers": 40}, ValueError, "32 non-empty row chunk.*for 40 trainer.*rechunk"),
    ({"trainers": ["tcp://10.9.9.9:1"]}, ValueError, "unknown"),
    ({"pservers": "tcp://10.9.9.9:1"}, ValueError, "no such worker"),
    ({"sync_mode": False, "checkpoint_every": 1, "checkpoint_dir": "/tmp/x"}, ValueError,
     "sync_mode=True"),
])
def test_argument_errors(client, kwargs, exc, match):
    spec = mlp()
    with pytest.raises(exc, match=match):
        train_pserver(client, spec.main, spec.startup, _data(32, np.float32), **kwargs)


def test_data_is_required_and_transpiler_trainer_count_must_match(client):
    spec = mlp()
    with pytest.raises(ValueError, match="data is required"):
        train_pserver(client, spec.main, spec.startup)
    t = DistributeTranspiler()
    t.transpile(0, program=spec.main, startup_program=spec.startup, pservers="127.0.0.1:1",
                trainers=3)
    with pytest.raises(ValueError, match="transpiler was run for 3 trainers"):
        train_pserver(client, data=[_data(16, np.float32)], transpiler=t)


def test_two_identical_fits_on_dask_arrays_are_bit_identical(client):
    # the chunk -> trainer assignment depends on the data alone, not on where Dask put the
    # chunks: scatter them to different workers in each run and get the same parameters
    rows = _data(240, np.float32)
    spec = mlp()
    results = []
    workers = sorted(client.scheduler_info()["workers"])
    for run in range(2):
        order = workers if run == 0 else workers[::-1]
        X = da.from_array(rows["x"], chunks=(40, 64))
        y = da.from_array(rows["y"].ravel(), chunks=40)
        X, y = client.persist([X, y], workers=order[:1])  # every chunk on one, another worker
        results.append(train_pserver(client, spec.main, spec.startup, {"x": X, "y": y},
                                     pservers=2, batch_size=16, epochs=2, seed=3))
    assert results[0].params.keys() == results[1].params.keys()
    for name, value in results[0].params.items():
        np.testing.assert_array_equal(results[1].params[name], value, err_msg=name)
    assert len({r["rank"] for r in results[0].history}) == 3  # one trainer per worker
