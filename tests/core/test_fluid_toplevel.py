"""Fluid 1.8's top-level names: fluid.data, fluid.embedding, fluid.one_hot, fluid.gradients,
fluid.name_scope, memory_optimize/release_memory, load_program_state/set_program_state."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.ops.selected_rows import SelectedRows

from .numeric_grad import program_grads_and_numeric


@pytest.fixture
def progs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        yield main, startup


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


# -- fluid.data --------------------------------------------------------------------------------

def test_data_keeps_the_whole_shape_and_checks_feeds(progs):
    main, startup = progs
    x = fluid.data("x", [None, 3], "float32")
    ids = fluid.data("ids", [-1, 1], "int64", lod_level=1)
    assert list(x.shape) == [-1, 3] and x.stop_gradient and x.is_data and x.lod_level == 0
    assert ids.lod_level == 1 and ids.dtype == "int64"
    y = layers.scale(x, 2.0)
    (out,), _ = _run(main, startup, {"x": np.ones((2, 3), "float32")}, [y])
    np.testing.assert_array_equal(out, np.full((2, 3), 2.0, "float32"))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    # Fluid 1.8's check_feed_shape_type, word for word
    with pytest.raises(ValueError, match=r"^The fed Variable 'x' should have dimensions = 2, "
                                         r"shape = \(-1, 3\), but received fed shape \[2, 4\] "
                                         r"on each device$"):
        exe.run(main, feed={"x": np.ones((2, 4), "float32")}, fetch_list=[y], scope=scope)
    with pytest.raises(ValueError, match=r"received fed shape \[6\]"):
        exe.run(main, feed={"x": np.ones(6, "float32")}, fetch_list=[y], scope=scope)
    for error in (TypeError, ValueError):  # Fluid's ValueError, and a TypeError
        with pytest.raises(error, match="^The data type of fed Variable 'x' must be 'float32', "
                                        "but received 'float64'$"):
            exe.run(main, feed={"x": np.ones((2, 3))}, fetch_list=[y], scope=scope)
    # a LoD tensor's rows are its sequences' items, not the batch: dim 0 is not checked
    batch = fluid.data("batch", [2, 3], "float32")
    z = layers.scale(batch, 2.0)
    t = fluid.create_lod_tensor(np.ones((5, 3), "float32"), [[2, 3]], fluid.CPUPlace())
    out, = exe.run(main, feed={"x": np.ones((2, 3), "float32"), "batch": t}, fetch_list=[z],
                   scope=scope, return_numpy=False)
    assert out.shape() == [5, 3] and out.recursive_sequence_lengths() == [[2, 3]]
    with pytest.raises(ValueError, match=r"received fed shape \[5, 3\]"):
        exe.run(main, feed={"x": np.ones((2, 3), "float32"), "batch": np.ones((5, 3), "float32")},
                fetch_list=[z], scope=scope)


def test_data_argument_errors(progs):
    with pytest.raises(TypeError, match="shape must be a list or tuple"):
        fluid.data("a", 3)
    with pytest.raises(ValueError, match="each dimension must be an int >= 0"):
        fluid.data("a", [2, -5])
    with pytest.raises(TypeError, match="name must be a str"):
        fluid.data(1, [2])
    with pytest.raises(ValueError, match="lod_level"):
        fluid.data("a", [2], lod_level=-1)


# -- fluid.embedding / fluid.one_hot -----------------------------------------------------------

def test_embedding_program_values_and_padding(progs):
    main, startup = progs
    ids = fluid.data("ids", [None, 3], "int64")
    emb = fluid.embedding(ids, size=[7, 4], padding_idx=-2, is_sparse=True)
    assert list(emb.shape) == [-1, 3, 4]
    op = main.global_block().ops[-1]
    assert op.type == "lookup_table_v2"
    assert op.input("Ids") == ["ids"] and op.input("W") == ["embedding_0.w_0"]
    assert op.attrs["padding_idx"] == 5 and op.attrs["is_sparse"]
    assert op.attrs["remote_prefetch"] and not op.attrs["is_distributed"]
    assert list(main.global_block().var("embedding_0.w_0").shape) == [7, 4]
    feed = np.array([[0, 5, 6], [2, 2, 1]], np.int64)
    (out,), scope = _run(main, startup, {"ids": feed}, [emb])
    w = np.array(scope.get("embedding_0.w_0"))
    want = w[feed]
    want[feed == 5] = 0
    assert out.shape == (2, 3, 4)
    np.testing.assert_array_equal(out, want)


def test_embedding_keeps_a_trailing_one_unlike_layers_embedding(progs):
    main, startup = progs
    ids = fluid.data("ids", [None, 1], "int64")
    v2 = fluid.embedding(ids, size=[5, 2])
    v1 = layers.embedding(ids, size=[5, 2])
    assert list(v2.shape) == [-1, 1, 2] and list(v1.shape) == [-1, 2]
    (a, b), _ = _run(main, startup, {"ids": np.array([[1], [4]], np.int64)}, [v2, v1])
    assert a.shape == (2, 1, 2) and b.shape == (2, 2)


def test_embedding_gradients_dense_and_sparse_match_central_differences():
    feed = {"ids": np.array([[0, 3, 3], [4, 1, 0]], np.int64),
            "y": np.random.default_rng(0).standard_normal((2, 3, 2))}

    def build(sparse):
        def net():
            ids = fluid.data("ids", [None, 3], "int64")
            y = fluid.data("y", [None, 3, 2], "float64")
            emb = fluid.embedding(ids, size=[5, 2], is_sparse=sparse, padding_idx=1,
                                  dtype="float64")
            return layers.reduce_sum(layers.square(emb - y))
        return net

    for sparse in (False, True):
        got = program_grads_and_numeric(build(sparse), feed, ["embedding_0.w_0"])
        analytic, numeric = got["embedding_0.w_0"]
        if isinstance(analytic, SelectedRows):
            analytic = analytic.to_dense()
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)
        assert not analytic[1].any()  # the padding row takes no gradient


def test_embedding_and_one_hot_argument_errors(progs):
    f = fluid.data("f", [None, 2], "float32")
    i32 = fluid.data("i32", [None, 2], "int32")
    with pytest.raises(TypeError, match="must hold ids of dtype int64, got float32"):
        fluid.embedding(f, [4, 2])
    with pytest.raises(TypeError, match="int64, got int32"):
        fluid.embedding(i32, [4, 2])
    ids = fluid.data("ids", [None, 2], "int64")
    with pytest.raises(ValueError, match="padding_idx must lie in"):
        fluid.embedding(ids, [4, 2], padding_idx=4)
    with pytest.raises(TypeError, match="dtype must be float16, float32 or float64"):
        fluid.embedding(ids, [4, 2], dtype="int32")
    with pytest.raises(ValueError, match="depth must be a positive int"):
        fluid.one_hot(ids, 0)
    with pytest.raises(TypeError, match="int32 or int64, got float32"):
        fluid.one_hot(f, 3)


def test_one_hot_appends_depth_to_any_shape(progs):
    main, startup = progs
    ids = fluid.data("ids", [None, 3], "int64")
    depth = layers.fill_constant([1], "int32", 5)
    a = fluid.one_hot(ids, 4, allow_out_of_range=True)
    b = fluid.one_hot(ids, depth)
    assert list(a.shape) == [-1, 3, 4] and list(b.shape) == [-1, 3, -1]
    ops = main.global_block().ops
    assert [op.type for op in ops[-2:]] == ["one_hot_v2", "one_hot_v2"]
    assert ops[-2].attrs["depth"] == 4 and ops[-1].input("depth_tensor") == [depth.name]
    feed = np.array([[0, 3, 4], [2, 2, 1]], np.int64)
    (oa, ob), _ = _run(main, startup, {"ids": feed}, [a, b])
    want = np.zeros((2, 3, 5), np.float32)
    for i, j in np.ndindex(feed.shape):
        want[i, j, feed[i, j]] = 1
    np.testing.assert_array_equal(ob, want)
    np.testing.assert_array_equal(oa, want[..., :4])  # id 4 is out of range: a zero row
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(fluid.ExecutionError, match="id 4 is out of range"):
        exe.run(main, feed={"ids": feed}, fetch_list=[fluid.one_hot(ids, 4)],
                scope=fluid.Scope())


# -- fluid.gradients ---------------------------------------------------------------------------

def _mlp_and_input(x_grad: bool = True):
    x = fluid.data("x", [None, 3], "float32")
    x.stop_gradient = not x_grad
    h = layers.fc(x, 4, act="tanh")
    return x, h, layers.reduce_sum(h * h)


def test_gradients_of_an_input_match_numpy(progs):
    main, startup = progs
    x, h, y = _mlp_and_input()
    (gx,) = fluid.gradients(y, x)
    types = [op.type for op in main.global_block().ops]
    assert gx.name == "x@GRAD" and types.index("shape") < types.index("mul_grad")
    xv = np.random.default_rng(1).random((2, 3)).astype("float32")
    (g,), scope = _run(main, startup, {"x": xv}, [gx])
    w, b = np.array(scope.get("fc_0.w_0")), np.array(scope.get("fc_0.b_0"))
    hv = np.tanh(xv @ w + b)
    np.testing.assert_allclose(g, (2 * hv * (1 - hv ** 2)) @ w.T, rtol=1e-5)


def test_calc_gradient_gives_one_inputs_gradient_alone(progs):
    # Fluid 1.8's backward.calc_gradient: fluid.gradients without the list for one input
    from dask_fluid.backward import calc_gradient

    x, h, y = _mlp_and_input()
    gx = calc_gradient(y, x)
    assert isinstance(gx, fluid.Variable) and gx.name == "x@GRAD"
    gh, gx2 = calc_gradient([y], [h, x])
    assert "fc_0.tmp" in gh.name and gx2 is not None  # renamed "grad/..." on a 2nd call


def test_gradients_with_target_gradients_several_targets_and_misses(progs):
    main, startup = progs
    x, h, y = _mlp_and_input()
    z = layers.reduce_sum(h)
    dh = fluid.data("dh", [None, 4], "float32")
    unrelated = fluid.data("u", [None, 3], "float32")
    unrelated.stop_gradient = False
    gx_h, gu = fluid.gradients([h], [x, unrelated], target_gradients=[dh])
    gx_yz = fluid.gradients([y, z], x)[0]
    assert gu is None
    rng = np.random.default_rng(2)
    xv, dhv = rng.random((3, 3)).astype("float32"), rng.random((3, 4)).astype("float32")
    (a, b), scope = _run(main, startup, {"x": xv, "dh": dhv, "u": xv}, [gx_h, gx_yz])
    w, bias = np.array(scope.get("fc_0.w_0")), np.array(scope.get("fc_0.b_0"))
    hv = np.tanh(xv @ w + bias)
    np.testing.assert_allclose(a, (dhv * (1 - hv ** 2)) @ w.T, rtol=1e-5)
    # the two targets' gradients are summed where they meet
    np.testing.assert_allclose(b, ((2 * hv + 1) * (1 - hv ** 2)) @ w.T, rtol=1e-5)


def test_gradients_follow_stop_gradient_and_no_grad_set(progs):
    x, h, y = _mlp_and_input(x_grad=False)
    assert fluid.gradients(y, x) == [None]  # Fluid's rule: data layers stop gradients
    x2, h2, y2 = _mlp_and_input()
    assert fluid.gradients(y2, x2, no_grad_set=[h2.name]) == [None]
    with pytest.raises(ValueError, match="1 targets but 2 target_gradients"):
        fluid.gradients(y2, x2, target_gradients=[None, None])
    with pytest.raises(TypeError, match="targets must be a Variable"):
        fluid.gradients("y", x2)


def test_a_loss_over_gradients_is_a_clear_error_not_a_wrong_answer(progs):
    x, h, y = _mlp_and_input()
    (gx,) = fluid.gradients(y, x)
    penalty = layers.reduce_mean(layers.square(gx))
    with pytest.raises(NotImplementedError, match="second-order gradient"):
        fluid.optimizer.SGD(0.1).minimize(layers.elementwise_add(y, penalty))


def test_a_later_backward_pass_keeps_the_gradients_of_an_earlier_one(progs):
    main, startup = progs
    x, h, y = _mlp_and_input()
    (gx,) = fluid.gradients(y, x)
    loss = layers.mean(h)
    pairs = fluid.append_backward(loss)
    # the second pass's gradients have Fluid 1.8's grad/ prefix; x@GRAD stays dy/dx
    assert {g.name for _, g in pairs} == {"grad/grad/fc_0.w_0@GRAD", "grad/grad/fc_0.b_0@GRAD"}
    xv = np.random.default_rng(3).random((2, 3)).astype("float32")
    (g, gw), scope = _run(main, startup, {"x": xv}, [gx, pairs[0][1]])
    w, b = np.array(scope.get("fc_0.w_0")), np.array(scope.get("fc_0.b_0"))
    hv = np.tanh(xv @ w + b)
    np.testing.assert_allclose(g, (2 * hv * (1 - hv ** 2)) @ w.T, rtol=1e-5)
    np.testing.assert_allclose(gw, xv.T @ ((1 - hv ** 2) / hv.size), rtol=1e-5)


# -- fluid.name_scope --------------------------------------------------------------------------

def test_name_scope_tags_ops_and_counts_reused_prefixes(progs):
    main, _ = progs
    x = fluid.data("x", [None, 3], "float32")
    with fluid.name_scope("encoder"):
        h = layers.fc(x, 2)
        with fluid.name_scope("attention"):
            h = layers.relu(h)
    with fluid.name_scope("encoder"):
        h = layers.relu(h)
    layers.relu(h)
    scopes = [op.attrs.get("op_namescope") for op in main.global_block().ops]
    assert scopes[:3] == ["/encoder/", "/encoder/", "/encoder/attention/"]
    assert scopes[3].startswith("/encoder_") and scopes[4] is None
    with pytest.raises(ValueError, match="non-empty str"):
        with fluid.name_scope(""):
            pass


# -- memory_optimize / release_memory ----------------------------------------------------------

def test_memory_optimize_and_release_memory_warn_and_change_nothing(progs):
    main, _ = progs
    _mlp_and_input()
    before = main.to_json()
    for fn in (fluid.memory_optimize, fluid.release_memory):
        with pytest.warns(UserWarning, match="deprecated"):
            fn(main)
    assert main.to_json() == before
    with pytest.raises(TypeError, match="must be a Program"):
        fluid.memory_optimize("main")
    with pytest.raises(ValueError, match="level must be 0 or 1"):
        fluid.memory_optimize(main, level=3)


# -- load_program_state / set_program_state ----------------------------------------------------

def _trained_scope(main, startup):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe, scope


def test_program_state_round_trips_through_fluid_save(tmp_path, progs):
    main, startup = progs
    x, h, y = _mlp_and_input()
    fluid.optimizer.Adam(0.1).minimize(layers.mean(h))
    exe, scope = _trained_scope(main, startup)
    with fluid.scope_guard(scope):
        exe.run(main, feed={"x": np.ones((2, 3), "float32")})
        fluid.save(main, str(tmp_path / "model"))
        state = fluid.load_program_state(str(tmp_path / "model.pdparams"))
    assert {"fc_0.w_0", "fc_0.b_0"} <= set(state)
    assert any("moment1" in k for k in state)  # the optimizer's state too (.pdopt)
    np.testing.assert_array_equal(state["fc_0.w_0"], np.array(scope.get("fc_0.w_0")))

    other = fluid.Scope()
    exe.run(startup, scope=other)
    with fluid.scope_guard(other):
        fluid.set_program_state(main, state)
    for name in state:
        np.testing.assert_array_equal(np.array(other.get(name)), state[name])


def test_program_state_from_save_persistables_and_one_file(tmp_path, progs):
    main, startup = progs
    _mlp_and_input()
    exe, scope = _trained_scope(main, startup)
    params = [v for v in main.list_vars() if isinstance(v, fluid.Parameter)]
    with fluid.scope_guard(scope):
        fluid.io.save_persistables(exe, str(tmp_path / "dir"), main)
        fluid.io.save_vars(exe, str(tmp_path / "one"), main, vars=params, filename="all")
    by_dir = fluid.load_program_state(str(tmp_path / "dir"))
    assert set(by_dir) == {"fc_0.w_0", "fc_0.b_0"}
    by_file = fluid.load_program_state(str(tmp_path / "one" / "all"), var_list=params)
    for name in by_dir:
        np.testing.assert_array_equal(by_dir[name], by_file[name])
        np.testing.assert_array_equal(by_dir[name], np.array(scope.get(name)))
    with pytest.raises(ValueError, match="pass var_list"):
        fluid.load_program_state(str(tmp_path / "one" / "all"))
    with pytest.raises(TypeError, match="must be variable, got str 'fc_0.w_0'"):  # as Fluid
        fluid.load_program_state(str(tmp_path / "one" / "all"), var_list=["fc_0.w_0"])
    with pytest.raises(TypeError, match="must be variable"):
        fluid.load_program_state(str(tmp_path / "dir"), var_list=["fc_0.w_0"])
    with pytest.raises(FileNotFoundError, match="neither"):
        fluid.load_program_state(str(tmp_path / "nothing"))


def test_set_program_state_checks_everything_before_setting_anything(progs):
    main, startup = progs
    _mlp_and_input()
    exe, scope = _trained_scope(main, startup)
    w_before = np.array(scope.get("fc_0.w_0"))
    bad = {"fc_0.w_0": np.zeros((3, 4), "float32"), "fc_0.b_0": np.zeros(5, "float32")}
    with fluid.scope_guard(scope):
        with pytest.raises(ValueError, match=r"shape of 'fc_0.b_0' does not match"):
            fluid.set_program_state(main, bad)
        np.testing.assert_array_equal(np.array(scope.get("fc_0.w_0")), w_before)
        with pytest.raises(ValueError, match="dtype of 'fc_0.w_0'"):
            fluid.set_program_state(main, {"fc_0.w_0": np.zeros((3, 4))})
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            fluid.set_program_state(main, {"fc_0.w_0": np.ones((3, 4), "float32"),
                                           "not_there": np.ones(2)})
        assert any("not_there" in str(w.message) for w in seen)
        np.testing.assert_array_equal(np.array(scope.get("fc_0.w_0")), np.ones((3, 4)))
    with pytest.raises(ValueError, match="run the startup program first"):
        with fluid.scope_guard(fluid.Scope()):
            fluid.set_program_state(main, {"fc_0.w_0": np.ones((3, 4), "float32")})


# -- through import paddle.fluid ---------------------------------------------------------------

def test_the_names_through_paddle_fluid():
    from dask_fluid import compat

    compat.install()
    try:
        import paddle.fluid as pfluid

        assert pfluid.data is fluid.data and pfluid.embedding is fluid.embedding
        assert pfluid.one_hot is fluid.one_hot and pfluid.gradients is fluid.gradients
        assert pfluid.name_scope is fluid.name_scope
        assert pfluid.io.load_program_state is fluid.load_program_state
        assert pfluid.transpiler.memory_optimize is fluid.memory_optimize
    finally:
        compat.uninstall()
