import math

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.models import mlp


def _train(spec, x, y, steps, batch=32, scope=None):
    scope = scope or fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(spec.startup, scope=scope)
    losses = []
    for s in range(steps):
        lo = (s * batch) % (len(x) - batch)
        (loss,) = exe.run(spec.main, feed={"x": x[lo:lo + batch], "y": y[lo:lo + batch, None]},
                          fetch_list=[spec.loss], scope=scope)
        losses.append(float(loss[0]))
    return scope, losses


def test_mlp_on_digits_reaches_95_percent():
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0)
    spec = mlp(n_features=64, hidden=(64,), n_classes=10,
               opt=fluid.optimizer.Momentum(0.05, momentum=0.9))
    test_prog = spec.main.clone(for_test=True)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(spec.startup, scope=scope)
    rng = np.random.default_rng(0)
    for _epoch in range(30):
        perm = rng.permutation(len(x_tr))
        for lo in range(0, len(perm), 32):
            idx = perm[lo:lo + 32]
            exe.run(spec.main, feed={"x": x_tr[idx], "y": y_tr[idx, None]}, scope=scope)
    (acc,) = exe.run(test_prog, feed={"x": x_te, "y": y_te[:, None]},
                     fetch_list=[spec.accuracy], scope=scope)
    assert acc[0] >= 0.95


def test_training_twice_gives_identical_bits():
    x = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    runs = []
    for _ in range(2):
        spec = mlp(hidden=(32,), n_classes=2, opt=fluid.optimizer.Adam(0.01))
        scope, losses = _train(spec, x, y, steps=10)
        runs.append((losses, {p.name: scope.get(p.name).copy()
                              for p in spec.main.all_parameters()}))
    assert runs[0][0] == runs[1][0]
    for name, value in runs[0][1].items():
        assert np.array_equal(value, runs[1][1][name]), name


def test_dropout_is_seeded():
    def run(random_seed):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = random_seed
        with fluid.unique_name.guard(), fluid.program_guard(main, startup):
            x = layers.data(name="x", shape=[100])
            out = layers.dropout(x, 0.5)
        scope = fluid.Scope()
        exe = fluid.Executor()
        feed = {"x": np.ones((4, 100), np.float32)}
        return [exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0] for _ in range(2)]

    # Fluid 1.8: the program's random_seed is the op's fixed seed (fix_seed): one mask for
    # every step, the same in every run
    a, b = run(3), run(3)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[0], a[1])
    assert not np.array_equal(a[0], run(4)[0])
    fresh = run(0)  # no seed anywhere: a new mask every step
    assert not np.array_equal(fresh[0], fresh[1])


@pytest.fixture()
def trained_spec():
    spec = mlp(hidden=(8,), n_classes=3)
    scope = fluid.Scope()
    fluid.Executor().run(spec.startup, scope=scope)
    return spec, scope


def _feed(n=4, d=64):
    return {"x": np.zeros((n, d), np.float32), "y": np.zeros((n, 1), np.int64)}


def test_feed_with_wrong_shape(trained_spec):
    # layers.data is not checked at the feed (Fluid 1.8: need_check_feed is fluid.data's):
    # the first op that reads it names the mismatch
    spec, scope = trained_spec
    feed = _feed(d=63)
    with pytest.raises(fluid.ExecutionError, match=r"op 'mul' \(#0 in block 0\) failed.*size "
                                                   r"64 is different from 63"):
        fluid.Executor().run(spec.main, feed=feed, scope=scope)


def test_feed_with_another_dtype():
    # fluid.data checks a feed's dtype (Fluid's words); layers.data takes the value as it is,
    # as Fluid does (a label declared float32 and fed int64 stays int64), a float of another
    # width in the declared one
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        checked = fluid.data("checked", [None, 2], "float32")
        loose = fluid.layers.data("loose", [2], dtype="float32")
        label = fluid.layers.data("label", [1], dtype="float32")
        total = fluid.layers.elementwise_add(checked, loose)
    exe, scope = fluid.Executor(), fluid.Scope()
    ones = np.ones((3, 2), np.float32)
    for error in (TypeError, ValueError):
        with pytest.raises(error, match=r"^The data type of fed Variable 'checked' must be "
                                        r"'float32', but received 'float64'$"):
            exe.run(main, feed={"checked": ones.astype(np.float64), "loose": ones},
                    scope=scope)
    got, kept = exe.run(main, feed={"checked": ones, "loose": ones.astype(np.float64),
                                    "label": np.arange(3).reshape(3, 1)},
                        fetch_list=[total, label], scope=scope)
    assert got.dtype == np.float32 and kept.dtype == np.int64


def test_feed_with_nan(trained_spec):
    spec, scope = trained_spec
    feed = _feed()
    feed["x"][1, 2] = np.nan
    with pytest.raises(ValueError, match="feed 'x' contains NaN or inf"):
        fluid.Executor().run(spec.main, feed=feed, scope=scope)


def test_unknown_feed_and_fetch(trained_spec):
    spec, scope = trained_spec
    with pytest.raises(ValueError, match="feed 'z' is not a variable"):
        fluid.Executor().run(spec.main, feed={"z": np.zeros(3, np.float32)}, scope=scope)
    with pytest.raises(ValueError, match="fetch 'nope' is not a variable"):
        fluid.Executor().run(spec.main, feed=_feed(), fetch_list=["nope"], scope=scope)


def test_missing_input_is_reported_before_running(trained_spec):
    spec, scope = trained_spec
    with pytest.raises(fluid.ExecutionError, match="reads X='x'.*neither fed"):
        fluid.Executor().run(spec.main, feed={"y": _feed()["y"]}, scope=scope)


def test_running_main_before_startup():
    spec = mlp(hidden=(8,), n_classes=3)
    with pytest.raises(fluid.ExecutionError, match="run the startup program first"):
        fluid.Executor().run(spec.main, feed=_feed(), scope=fluid.Scope())


def test_piecewise_decay_runs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = layers.piecewise_decay([2, 4], [1.0, 0.5, 0.1])
    scope = fluid.Scope()
    exe = fluid.Executor()
    exe.run(startup, scope=scope)
    got = [float(exe.run(main, fetch_list=[lr], scope=scope)[0][0]) for _ in range(6)]
    assert got == pytest.approx([1.0, 1.0, 0.5, 0.5, 0.1, 0.1])


def test_exponential_decay_runs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = layers.exponential_decay(0.1, 2, 0.5, staircase=True)
    scope = fluid.Scope()
    exe = fluid.Executor()
    exe.run(startup, scope=scope)
    got = [float(exe.run(main, fetch_list=[lr], scope=scope)[0][0]) for _ in range(5)]
    assert got == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025])


def test_sparse_embedding_updates_only_touched_rows():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 1
    with fluid.program_guard(main, startup):
        ids = layers.data(name="ids", shape=[1], dtype="int64")
        emb = layers.embedding(ids, size=[20, 4], is_sparse=True,
                               param_attr=fluid.ParamAttr(name="table"))
        loss = layers.mean(layers.fc(emb, 1))
        fluid.optimizer.SGD(0.5).minimize(loss)
    scope = fluid.Scope()
    exe = fluid.Executor()
    exe.run(startup, scope=scope)
    before = scope.get("table").copy()
    exe.run(main, feed={"ids": np.array([[3], [5], [3]], np.int64)}, scope=scope)
    after = scope.get("table")
    changed = np.where((before != after).any(axis=1))[0]
    assert list(changed) == [3, 5]


def test_cuda_place_trains_like_cpu(device_xp):
    # numpy feeds, as a Fluid script gives them: the executor moves them to the device
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    params = []
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        spec = mlp(hidden=(16,), n_classes=2)
        scope = fluid.Scope()
        exe = fluid.Executor(place)
        exe.run(spec.startup, scope=scope)
        for _ in range(5):
            exe.run(spec.main, feed={"x": x, "y": y[:, None]}, scope=scope)
        w = scope.get("fc_0.w_0")
        assert isinstance(w, device_xp.ndarray) == isinstance(place, fluid.CUDAPlace)
        params.append(w.get() if hasattr(w, "get") else w)
    np.testing.assert_allclose(params[0], params[1], rtol=1e-4, atol=1e-5)


def test_a_scope_variables_tensor_reads_and_writes_the_scope(device_xp):
    # Fluid's idiom: scope.find_var(name).get_tensor() then np.array(t) / t.set(value, place)
    spec = mlp(hidden=(4,), n_features=3, n_classes=2)
    x = np.ones((2, 3), np.float32)
    y = np.zeros((2, 1), np.int64)
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(spec.startup, scope=scope)
        t = scope.find_var("fc_0.w_0").get_tensor()
        assert t.shape() == [3, 4] and t.lod() == []
        t.set(np.full((3, 4), 0.5, np.float32), place)  # on the executor's place
        value = scope.get("fc_0.w_0")
        assert isinstance(value, device_xp.ndarray) == isinstance(place, fluid.CUDAPlace)
        exe.run(spec.main, feed={"x": x, "y": y}, scope=scope)
        assert not np.allclose(np.array(t), 0.5)  # the run updated what the tensor shows
        words = scope.var("words").get_tensor()
        words.set(np.arange(5).reshape(5, 1), place)
        words.set_lod([[0, 2, 5]])
        assert scope.lods["words"] == ((0, 2, 5),) and words.recursive_sequence_lengths() == \
            [[2, 3]]


def _lr_values(build, steps: int = 6) -> list[float]:
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = build()
    scope = fluid.Scope()
    exe = fluid.Executor()
    exe.run(startup, scope=scope)
    return [float(exe.run(main, fetch_list=[lr], scope=scope)[0][0]) for _ in range(steps)]


@pytest.mark.parametrize("name,build,formula", [
    # Fluid 1.8's learning_rate_scheduler.py, written out; ``t`` is the step Fluid counts
    ("noam", lambda: layers.noam_decay(512, 4, 2.0),
     lambda t: 2.0 * 512 ** -0.5 * min((t + 1) ** -0.5, 4 ** -1.5 * (t + 1))),
    ("natural_exp", lambda: layers.natural_exp_decay(0.1, 2, 0.5),
     lambda t: 0.1 * math.exp(-0.5 * t / 2)),
    ("natural_exp_staircase", lambda: layers.natural_exp_decay(0.1, 2, 0.5, staircase=True),
     lambda t: 0.1 * math.exp(-0.5 * (t // 2))),
    ("inverse_time", lambda: layers.inverse_time_decay(0.1, 2, 0.5),
     lambda t: 0.1 / (1 + 0.5 * t / 2)),
    ("polynomial", lambda: layers.polynomial_decay(0.1, 4, 0.01, power=2.0),
     lambda t: (0.1 - 0.01) * (1 - min(t, 4) / 4) ** 2 + 0.01),
    ("polynomial_cycle", lambda: layers.polynomial_decay(0.1, 2, 0.01, power=2.0, cycle=True),
     lambda t: (0.1 - 0.01) * (1 - t / (2 * max(math.ceil(t / 2), 1))) ** 2 + 0.01),
    ("cosine", lambda: layers.cosine_decay(0.1, 2, 3),
     lambda t: 0.1 * 0.5 * (math.cos((t // 2) * math.pi / 3) + 1)),
    ("linear_warmup", lambda: layers.linear_lr_warmup(0.1, 3, 0.01, 0.1),
     lambda t: 0.01 + (0.1 - 0.01) * t / 3 if t < 3 else 0.1),
])
def test_learning_rate_schedules_follow_fluids_formulas(name, build, formula):
    assert _lr_values(build) == pytest.approx([formula(t) for t in range(6)], rel=1e-5)



def test_gather_tree_layer():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = layers.data("ids", [3, 2, 2], dtype="int64", append_batch_size=False)
        parents = layers.data("parents", [3, 2, 2], dtype="int64", append_batch_size=False)
        out = layers.gather_tree(ids, parents)
        with pytest.raises(TypeError, match="int32 or int64"):
            layers.gather_tree(layers.data("f", [3, 2, 2], append_batch_size=False), parents)
    assert out.shape == (3, 2, 2) and out.dtype == "int64"
    assert [op.type for op in main.global_block().ops] == ["gather_tree"]
    ids_v = np.array([[[2, 2], [6, 1]], [[3, 9], [6, 1]], [[0, 1], [9, 0]]], np.int64)
    par_v = np.array([[[0, 0], [1, 1]], [[1, 0], [1, 0]], [[0, 0], [0, 1]]], np.int64)
    got, = fluid.Executor().run(main, feed={"ids": ids_v, "parents": par_v}, fetch_list=[out],
                                scope=fluid.Scope())
    assert got.tolist() == [[[2, 2], [1, 6]], [[3, 3], [6, 1]], [[0, 1], [9, 0]]]


def test_np_array_of_a_scope_tensor_is_a_snapshot_the_next_run_leaves_alone():
    # Fluid: np.array(tensor) copies. The optimizer updates the parameter in place here, so a
    # view would change under the caller at the next run
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[-1, 5], dtype="float32")
        cost = fluid.layers.mean(fluid.layers.fc(x, 3, param_attr="w"))
        fluid.optimizer.Adam(learning_rate=0.1).minimize(cost)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    tensor = scope.find_var("w").get_tensor()
    snapshot = np.array(tensor)
    kept = snapshot.copy()
    exe.run(main, feed={"x": np.ones((2, 5), "float32")}, scope=scope)
    np.testing.assert_array_equal(snapshot, kept)
    assert not np.array_equal(np.array(scope.find_var("w").get_tensor()), kept)
    # np.asarray may share the tensor's memory (Fluid's buffer protocol); a cast without a
    # copy is refused as numpy refuses it
    assert np.asarray(tensor).dtype == np.float32
    with pytest.raises(ValueError, match="without a copy"):
        np.array(tensor, dtype="float64", copy=False)


def test_a_number_fed_to_a_one_element_variable_is_a_one_element_tensor():
    # Fluid 1.8's _as_lodtensor: np.array([number]).astype(the variable's dtype); a learning
    # rate fed as a float is the usual case
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = fluid.data(name="lr", shape=[1], dtype="float32")
        x = fluid.data(name="x", shape=[None, 1], dtype="float32")
        out = fluid.layers.elementwise_mul(x, lr)
    exe = fluid.Executor(fluid.CPUPlace())
    xs = np.ones([4, 1], "float32")
    for number in (0.5, 3, np.float64(0.25)):
        got, = exe.run(main, feed={"x": xs, "lr": number}, fetch_list=[out],
                       scope=fluid.Scope())
        np.testing.assert_allclose(got, xs * np.float32(number))
    with pytest.raises(ValueError, match=r"received fed shape \[1\]"):  # [1], not [None, 1]
        exe.run(main, feed={"x": 1.0, "lr": 0.5}, fetch_list=[out], scope=fluid.Scope())
