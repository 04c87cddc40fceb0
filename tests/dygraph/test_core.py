"""Dygraph mode's core: guard, to_variable, VarBase, the tracer, backward, no_grad, Layer.

The references are independent of the tracer: central differences for gradients, numpy for
values, and the same model trained as a static program for training."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import dygraph
from dask_fluid.ops.selected_rows import SelectedRows


def _numeric_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


class _Linear(dygraph.Layer):
    """A dense layer from the core alone (dygraph.nn has its own)."""

    def __init__(self, n_in: int, n_out: int, act: str | None = None,
                 dtype: str = "float32") -> None:
        super().__init__(dtype=dtype)
        self.weight = self.create_parameter([n_in, n_out], dtype=dtype)
        self.bias = self.create_parameter([n_out], dtype=dtype, is_bias=True)
        self._act = act

    def forward(self, x):
        y = fluid.layers.elementwise_add(fluid.layers.matmul(x, self.weight), self.bias)
        return fluid.layers.relu(y) if self._act == "relu" else y


class _MLP(dygraph.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = _Linear(4, 8, "relu")
        self.fc2 = _Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x))


# -- guard and variables ----------------------------------------------------------------------


def test_guard_turns_dygraph_mode_on_and_off():
    assert not fluid.in_dygraph_mode() and not dygraph.enabled()
    with dygraph.guard(fluid.CPUPlace()):
        assert fluid.in_dygraph_mode() and dygraph.enabled()
        main = fluid.default_main_program()
        x = dygraph.to_variable(np.ones(2, "float32"))
        assert (x + 1.0).numpy().tolist() == [2.0, 2.0]
        assert not main.global_block().ops  # nothing was appended to a program
    assert not fluid.in_dygraph_mode()
    fluid.enable_dygraph(fluid.CPUPlace())
    try:
        assert fluid.in_dygraph_mode()
    finally:
        fluid.disable_dygraph()
    assert not fluid.in_dygraph_mode()


def test_static_programs_are_unchanged_outside_the_guard():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3])
        fluid.layers.fc(x, 2)
    assert [op.type for op in main.global_block().ops] == ["mul", "elementwise_add"]
    assert type(x) is fluid.Variable


def test_to_variable_copies_keeps_dtype_and_checks_input():
    src = np.arange(6, dtype="float64").reshape(2, 3)
    with pytest.raises(RuntimeError, match="inside fluid.dygraph.guard"):
        dygraph.to_variable(src)
    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(src, name="x")
        assert x.name == "x" and x.dtype == "float64" and x.shape == [2, 3]
        assert x.stop_gradient
        src[0, 0] = 100.0
        assert x.numpy()[0, 0] == 0.0  # a copy
        out = x.numpy()
        out[0, 1] = -1.0
        assert x.numpy()[0, 1] == 1.0  # numpy() is a copy too
        assert dygraph.to_variable(x) is x
        with pytest.raises(TypeError, match="numpy.ndarray, LoDTensor or VarBase"):
            dygraph.to_variable([1.0, 2.0])
        with pytest.raises(TypeError, match="not tensors"):
            dygraph.to_variable(np.array(["a", "b"]))
        with pytest.raises(ValueError, match="NaN or inf"):
            dygraph.to_variable(np.array([1.0, np.nan]), name="batch")


def test_arithmetic_on_variables_matches_numpy():
    a = np.array([[1.0, -2.0], [3.0, 4.0]], "float32")
    b = np.array([[0.5, 2.0], [-1.0, 3.0]], "float32")
    with dygraph.guard(fluid.CPUPlace()):
        x, y = dygraph.to_variable(a), dygraph.to_variable(b)
        np.testing.assert_allclose((x + y).numpy(), a + b)
        np.testing.assert_allclose((x - y).numpy(), a - b)
        np.testing.assert_allclose((x * y).numpy(), a * b)
        np.testing.assert_allclose((x / y).numpy(), a / b)
        np.testing.assert_allclose((2.0 * x - 1.0).numpy(), 2 * a - 1)
        np.testing.assert_allclose((-x).numpy(), -a)
        np.testing.assert_array_equal((x > y).numpy(), a > b)
        assert float(fluid.layers.reduce_sum(x)) == pytest.approx(6.0)
        with pytest.raises(ValueError, match="needs one value"):
            float(x)


def test_equality_is_elementwise_as_fluid_18s_varbase():
    # Fluid 1.8's monkey_patch_math_varbase maps == and != to equal / not_equal
    a = np.array([[1, 2], [3, 4]], "int64")
    b = np.array([[1, 0], [3, 5]], "int64")
    with dygraph.guard(fluid.CPUPlace()):
        x, y = dygraph.to_variable(a), dygraph.to_variable(b)
        for got, want in [(x == y, a == b), (x != y, a != b), (x == 3, a == 3),
                          (x != np.int64(2), a != 2), (y == x, a == b)]:
            assert isinstance(got, dygraph.VarBase) and got.dtype == "bool"
            np.testing.assert_array_equal(got.numpy(), want)
        hits = fluid.layers.reduce_sum(fluid.layers.cast(x == y, "float32"))
        assert float(hits) == 2.0  # an accuracy count, as 1.8 scripts write it
        # the variables themselves stay usable as keys and list members (identity first)
        assert {x: 1, y: 2}[y] == 2 and x in [x] and [x, y].index(x) == 0
        assert (x == "x") is False and (x != None) is True  # noqa: E711
        with pytest.raises(ValueError, match="needs one value"):
            bool(x == y)  # no silent truth value of several elements
        with pytest.raises(TypeError, match="not_equal: a Variable meets a Variable or a "
                                            "Python number, got ndarray"):
            b != y  # noqa: B015  (an array is refused as by +: to_variable it first)


# -- backward ---------------------------------------------------------------------------------


def test_backward_matches_central_differences():
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((3, 4))
    wv = rng.standard_normal((4, 2))
    label = np.array([[1], [0], [1]], "int64")

    def loss_of(x, w):
        h = np.tanh(x @ w) * x[:, :2]
        z = h - h.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return -logp[np.arange(3), label[:, 0]].mean()

    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(xv)
        w = dygraph.to_variable(wv)
        x.stop_gradient = False
        w.stop_gradient = False
        h = fluid.layers.tanh(fluid.layers.matmul(x, w)) * fluid.layers.slice(
            x, axes=[1], starts=[0], ends=[2])
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            h, dygraph.to_variable(label)))
        assert float(loss) == pytest.approx(loss_of(xv, wv), rel=1e-10)
        loss.backward()
        np.testing.assert_allclose(w.gradient(), _numeric_grad(lambda v: loss_of(xv, v), wv),
                                   rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(x.gradient(), _numeric_grad(lambda v: loss_of(v, wv), xv),
                                   rtol=1e-6, atol=1e-9)


def test_a_variable_used_twice_gets_both_gradients():
    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(np.array([1.0, 2.0, 3.0]))
        x.stop_gradient = False
        loss = fluid.layers.reduce_sum(x * x + x)
        loss.backward()
        np.testing.assert_allclose(x.gradient(), 2 * np.array([1.0, 2.0, 3.0]) + 1)


def test_gradients_add_up_until_cleared():
    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(np.array([1.0, 2.0]))
        x.stop_gradient = False
        for _ in range(2):
            fluid.layers.reduce_sum(x * 3.0).backward()
        np.testing.assert_allclose(x.gradient(), [6.0, 6.0])
        x.clear_gradient()
        assert x.gradient() is None
        fluid.layers.reduce_sum(x * 3.0).backward()
        np.testing.assert_allclose(x.gradient(), [3.0, 3.0])


def test_a_value_rewritten_in_place_keeps_its_gradient_path():
    # y is read by z, then rewritten by an assign: the backward pass must use each value
    with dygraph.guard(fluid.CPUPlace()):
        xv = np.array([1.0, -2.0])
        x = dygraph.to_variable(xv)
        x.stop_gradient = False
        y = x * 2.0
        z = y * y
        fluid.layers.assign(x * 5.0, output=y)
        loss = fluid.layers.reduce_sum(z) + fluid.layers.reduce_sum(y)
        loss.backward()
        np.testing.assert_allclose(x.gradient(), 8 * xv + 5)


def test_stop_gradient_follows_fluid_18():
    with dygraph.guard(fluid.CPUPlace()):
        a = dygraph.to_variable(np.ones(2))
        b = dygraph.to_variable(np.ones(2))
        c = a + b
        assert a.stop_gradient and c.stop_gradient  # nothing needs a gradient
        fluid.layers.reduce_sum(c).backward()  # Fluid 1.8 skips it: nothing to differentiate
        assert a.gradient() is None and b.gradient() is None
        b.stop_gradient = False
        d = a * b
        assert not d.stop_gradient
        fluid.layers.reduce_sum(d).backward()
        assert a.gradient() is None
        np.testing.assert_allclose(b.gradient(), [1.0, 1.0])


def test_no_grad_as_context_and_decorator():
    @dygraph.no_grad
    def double(v):
        return v * 2.0

    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(np.ones(2))
        x.stop_gradient = False
        with dygraph.no_grad():
            y = x * 3.0
        assert y.stop_gradient and y._node is None
        assert double(x).stop_gradient
        assert not (x * 3.0).stop_gradient  # recording is back on
        fluid.layers.reduce_sum(y).backward()  # no graph behind it: skipped, as in Fluid 1.8
        assert x.gradient() is None


def test_sparse_embedding_gradient_is_rows():
    table = np.arange(12, dtype="float32").reshape(6, 2)
    ids = np.array([[1], [4], [1]], "int64")
    with dygraph.guard(fluid.CPUPlace()):
        emb = fluid.layers.embedding(
            dygraph.to_variable(ids), size=[6, 2], is_sparse=True,
            param_attr=fluid.ParamAttr(name="emb_w",
                                       initializer=fluid.initializer.NumpyArrayInitializer(
                                           table)))
        loss = fluid.layers.reduce_sum(emb * 2.0)
        loss.backward()
        w = fluid.framework._dygraph_tracer().block.vars["emb_w"]
        assert isinstance(w._grad, SelectedRows)
        values, rows = w.gradient()
        assert sorted(rows.tolist()) == [1, 1, 4]
        np.testing.assert_allclose(values, np.full((3, 2), 2.0))
        fluid.optimizer.SGD(0.5, parameter_list=[w]).minimize(loss)
        expected = table.copy()
        expected[1] -= 0.5 * 4.0
        expected[4] -= 0.5 * 2.0
        np.testing.assert_allclose(w.numpy(), expected)


def test_graph_is_released_with_its_variables():
    with dygraph.guard(fluid.CPUPlace()):
        tracer = fluid.framework._dygraph_tracer()
        x = dygraph.to_variable(np.ones((4, 4)))
        x.stop_gradient = False
        for _ in range(5):
            loss = fluid.layers.reduce_sum(fluid.layers.relu(x * 2.0))
        node = weakref.ref(loss._node)
        del loss
        gc.collect()
        assert node() is None
        assert len(tracer.block.vars) < 5  # the intermediates went with their graph


# -- errors -----------------------------------------------------------------------------------


def test_static_variables_and_control_flow_are_refused_clearly():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        static_x = fluid.layers.data("sx", shape=[2])
    with dygraph.guard(fluid.CPUPlace()):
        with pytest.raises(ValueError, match="not a variable of this dygraph guard"):
            fluid.layers.relu(static_x)
        cond = dygraph.to_variable(np.array([True]))
        with pytest.raises(NotImplementedError, match="not supported in dygraph mode"):
            with fluid.layers.While(cond).block():
                pass
        with pytest.raises(NotImplementedError, match="WeightNormParamAttr"):
            _Linear(2, 2).create_parameter([2, 2], attr=fluid.WeightNormParamAttr())


def test_optimizer_needs_a_parameter_list_and_updates_only_gradients():
    with dygraph.guard(fluid.CPUPlace()):
        model = _Linear(3, 2)
        with pytest.raises(AttributeError, match="parameter_list"):
            fluid.optimizer.SGD(0.1)
        opt = fluid.optimizer.SGD(0.1, parameter_list=model.parameters())
        out = model(dygraph.to_variable(np.ones((2, 3), "float32")))
        loss = fluid.layers.mean(out)
        before = [p.numpy() for p in model.parameters()]
        opt.minimize(loss)  # no loss.backward(): nothing to apply, as in Fluid 1.8
        for param, value in zip(model.parameters(), before, strict=True):
            np.testing.assert_array_equal(param.numpy(), value)


# -- training ---------------------------------------------------------------------------------


def _static_mlp_run(init: dict, xs: list, ys: list, lr: float) -> dict:
    """The same MLP as _MLP, as a static program with the given initial values."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", shape=[4])
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        h = fluid.layers.fc(x, 8, act="relu", param_attr="w1", bias_attr="b1")
        logits = fluid.layers.fc(h, 3, param_attr="w2", bias_attr="b2")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(lr, 0.9).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for name, value in init.items():
        scope.set(name, value.copy())
    losses = [exe.run(main, feed={"x": xv, "y": yv}, fetch_list=[loss], scope=scope)[0]
              for xv, yv in zip(xs, ys, strict=True)]
    return {"losses": np.array(losses).ravel(),
            **{n: np.array(scope.get(n)) for n in init}}


def _dygraph_mlp_run(xs: list, ys: list, lr: float, place) -> tuple[dict, dict]:
    with dygraph.guard(place):
        fluid.default_main_program().random_seed = 3
        model = _MLP()
        init = {"w1": model.fc1.weight.numpy(), "b1": model.fc1.bias.numpy(),
                "w2": model.fc2.weight.numpy(), "b2": model.fc2.bias.numpy()}
        opt = fluid.optimizer.Momentum(lr, 0.9, parameter_list=model.parameters())
        losses = []
        for xv, yv in zip(xs, ys, strict=True):
            logits = model(dygraph.to_variable(xv))
            loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
                logits, dygraph.to_variable(yv)))
            loss.backward()
            opt.minimize(loss)
            model.clear_gradients()
            losses.append(float(loss))
        final = {"losses": np.array(losses), "w1": model.fc1.weight.numpy(),
                 "b1": model.fc1.bias.numpy(), "w2": model.fc2.weight.numpy(),
                 "b2": model.fc2.bias.numpy()}
    return init, final


def _batches(steps: int = 6):
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((16, 4)).astype("float32") for _ in range(steps)]
    ys = [rng.integers(0, 3, (16, 1)).astype("int64") for _ in range(steps)]
    return xs, ys


def test_dygraph_training_equals_the_static_program():
    xs, ys = _batches()
    init, dy = _dygraph_mlp_run(xs, ys, 0.2, fluid.CPUPlace())
    st = _static_mlp_run(init, xs, ys, 0.2)
    for name in ("losses", "w1", "b1", "w2", "b2"):
        np.testing.assert_allclose(dy[name], st[name], rtol=2e-5, atol=1e-6, err_msg=name)
    assert dy["losses"][-1] < dy["losses"][0]


def test_dygraph_on_a_cuda_place_trains_as_on_cpu(device_xp):
    xs, ys = _batches(3)
    _, cpu = _dygraph_mlp_run(xs, ys, 0.2, fluid.CPUPlace())
    _, gpu = _dygraph_mlp_run(xs, ys, 0.2, fluid.CUDAPlace(0))
    for name in ("losses", "w1", "b1", "w2", "b2"):
        np.testing.assert_allclose(gpu[name], cpu[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_parameters_start_from_the_programs_seed():
    def first_weight(seed):
        with dygraph.guard(fluid.CPUPlace()):
            fluid.default_main_program().random_seed = seed
            return _Linear(4, 3).weight.numpy()

    np.testing.assert_array_equal(first_weight(7), first_weight(7))
    assert not np.array_equal(first_weight(7), first_weight(8))


def test_dropout_masks_as_fluid_18_seeds_them():
    def masks(random_seed=0, seed=None):
        with dygraph.guard(fluid.CPUPlace()):
            fluid.default_main_program().random_seed = random_seed
            x = dygraph.to_variable(np.ones((50,), "float32"))
            return [fluid.layers.dropout(x, 0.5, seed=seed).numpy() for _ in range(3)]

    # no seed anywhere: a new mask each call
    fresh = masks()
    assert not np.array_equal(fresh[0], fresh[1])
    # Fluid 1.8: the program's random_seed is the op's fixed seed: the same mask each call,
    # and the same as a static program's (test_imperative_reinforcement compares the two)
    fixed = masks(random_seed=11)
    assert all(np.array_equal(fixed[0], m) for m in fixed[1:])
    np.testing.assert_array_equal(fixed[0], masks(seed=11)[0])
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 11
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [50], append_batch_size=False)
        out = fluid.layers.dropout(x, 0.5)
    exe = fluid.Executor(fluid.CPUPlace())
    runs = [exe.run(main, feed={"x": np.ones(50, "float32")}, fetch_list=[out])[0]
            for _ in range(2)]
    np.testing.assert_array_equal(runs[0], fixed[0])
    np.testing.assert_array_equal(runs[1], fixed[0])


# -- Layer ------------------------------------------------------------------------------------


def test_layer_registers_parameters_and_sublayers_with_fluid_names():
    with dygraph.guard(fluid.CPUPlace()):
        model = _MLP()
        assert model.full_name() == "_mlp_0"
        assert [(n, p.name) for n, p in model.named_parameters()] == [
            # Fluid's camel-to-snake rule: "_Linear" -> "__linear"
            ("fc1.weight", "__linear_0.w_0"), ("fc1.bias", "__linear_0.b_0"),
            ("fc2.weight", "__linear_1.w_0"), ("fc2.bias", "__linear_1.b_0")]
        assert [type(s).__name__ for s in model.sublayers()] == ["_Linear", "_Linear"]
        assert list(model.state_dict()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
        assert model.fc1.create_parameter([2], attr=False) is None
        with pytest.raises(TypeError, match="should be of type Parameter"):
            model.fc1.weight = np.zeros((4, 8))


def test_set_dict_restores_and_checks_values():
    with dygraph.guard(fluid.CPUPlace()):
        a, b = _MLP(), _MLP()
        b.set_dict(a.state_dict())
        for (_, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
            np.testing.assert_array_equal(pa.numpy(), pb.numpy())
        by_name = {pb.name: pa.numpy() * 2
                   for pa, pb in zip(a.parameters(), b.parameters(), strict=True)}
        b.set_dict(by_name, use_structured_name=False)
        np.testing.assert_array_equal(b.fc1.weight.numpy(), a.fc1.weight.numpy() * 2)
        with pytest.raises(RuntimeError, match="fc2.bias"):
            b.set_dict({k: v for k, v in a.state_dict().items() if k != "fc2.bias"})
        with pytest.raises(ValueError, match="shape"):
            b.set_dict({**a.state_dict(), "fc2.bias": np.zeros(5, "float32")})


def test_hooks_and_modes():
    with dygraph.guard(fluid.CPUPlace()):
        model = _MLP()
        seen = []
        pre = model.register_forward_pre_hook(lambda layer, inputs: seen.append("pre"))
        model.register_forward_post_hook(lambda layer, inputs, out: out * 0.0)
        out = model(dygraph.to_variable(np.ones((2, 4), "float32")))
        assert seen == ["pre"] and not out.numpy().any()
        pre.remove()
        model(dygraph.to_variable(np.ones((2, 4), "float32")))
        assert seen == ["pre"]
        model.eval()
        assert not model.training and not model.fc1.training
        assert model(dygraph.to_variable(np.ones((2, 4), "float32"))).stop_gradient
        model.train()
        assert model.fc2.training


class _MnistLike(dygraph.Layer):
    """Fluid 1.8's test_imperative_mnist pattern: one Layer class, built in either mode."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = dygraph.Conv2D(1, 4, 3, act="relu")
        self.pool = dygraph.Pool2D(2, "max", 2)
        self.norm = dygraph.BatchNorm(4)
        self.fc = dygraph.Linear(4 * 3 * 3, 10)

    def forward(self, x):
        h = self.norm(self.pool(self.conv(x)))
        return self.fc(fluid.layers.reshape(h, [-1, 4 * 3 * 3]))


def test_a_layer_class_builds_the_same_model_as_a_static_program():
    # Fluid 1.8's test_imperative_*: the same seeds give the same start in both modes, and
    # the same steps (each parameter is drawn from the seed and its name)
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((8, 1, 8, 8)).astype("float32") for _ in range(3)]
    ys = [rng.integers(0, 10, (8, 1)).astype("int64") for _ in range(3)]
    seed = 90
    with dygraph.guard(fluid.CPUPlace()):
        fluid.default_startup_program().random_seed = seed
        fluid.default_main_program().random_seed = seed
        model = _MnistLike()
        opt = fluid.optimizer.SGD(0.1, parameter_list=model.parameters())
        dy_losses = []
        for x, y in zip(xs, ys, strict=True):
            loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
                model(dygraph.to_variable(x)), dygraph.to_variable(y)))
            loss.backward()
            opt.minimize(loss)
            model.clear_gradients()
            dy_losses.append(float(loss))
        dy_params = {p.name: p.numpy() for p in model.parameters()}

    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        model = _MnistLike()
        img = fluid.layers.data("img", shape=[1, 8, 8])
        label = fluid.layers.data("label", shape=[1], dtype="int64")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(model(img), label))
        fluid.optimizer.SGD(0.1).minimize(loss)
    assert sorted(p.name for p in model.parameters()) == sorted(dy_params)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    st_losses = [exe.run(main, feed={"img": x, "label": y}, fetch_list=[loss], scope=scope)[0]
                 for x, y in zip(xs, ys, strict=True)]
    np.testing.assert_allclose(np.ravel(st_losses), dy_losses, rtol=1e-5)
    for name, value in dy_params.items():
        np.testing.assert_allclose(np.array(scope.get(name)), value, rtol=1e-4, atol=1e-6,
                                   err_msg=name)
    with pytest.raises(RuntimeError, match="set_dict works in dygraph mode"):
        model.set_dict({})


def test_cond_case_switch_and_while_loop_run_python_control_flow():
    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(np.array([2.0]))
        x.stop_gradient = False
        big = fluid.layers.cond(x > 1.0, lambda: x * 10.0, lambda: x * -1.0)
        assert float(big) == 20.0
        small = fluid.layers.cond(x < 1.0, lambda: x * 10.0, lambda: x * -1.0)
        assert float(small) == -2.0
        picked = fluid.layers.switch_case(
            dygraph.to_variable(np.array([1], "int64")),
            [lambda: x * 1.0, lambda: x * 2.0, lambda: x * 3.0])
        assert float(picked) == 4.0
        i, total = fluid.layers.while_loop(
            lambda i, t: i < 4.0, lambda i, t: [i + 1.0, t * x],
            [dygraph.to_variable(np.array([0.0])), dygraph.to_variable(np.array([1.0]))])
        assert float(i) == 4.0 and float(total) == 16.0
        total.backward()  # d(x^4)/dx through the loop's ops
        np.testing.assert_allclose(x.gradient(), [4 * 2.0 ** 3])


def test_indexing_matches_numpy_and_differentiates():
    a = np.arange(24, dtype="float64").reshape(2, 3, 4)
    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(a)
        x.stop_gradient = False
        for item in (1, -1, (0, 2), (slice(None), 1), (slice(0, 1), slice(1, 3)),
                     (1, slice(None), slice(0, 4, 2)), (slice(None, None, -1),),
                     (0, slice(1, None), -1), (slice(None), slice(None), slice(None, None, 3))):
            np.testing.assert_array_equal(x[item].numpy(), a[item], err_msg=str(item))
        fluid.layers.reduce_sum(x[1, :, 1:3] * 2.0).backward()
        expected = np.zeros_like(a)
        expected[1, :, 1:3] = 2.0
        np.testing.assert_array_equal(x.gradient(), expected)
        with pytest.raises(IndexError, match="out of bounds"):
            x[2]
        with pytest.raises(IndexError, match="too many indices"):
            x[0, 0, 0, 0]
        with pytest.raises(TypeError, match="only ints, int Variables and slices"):
            x[[0, 1]]
        rows = list(x[0])
        assert len(rows) == 3
        np.testing.assert_array_equal(rows[2].numpy(), a[0, 2])


def test_static_variables_index_too_and_are_not_iterable():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data("x", shape=[3, 4], append_batch_size=False)
        y = x[1:, ::2]
        z = x[0]
    assert [op.type for op in main.global_block().ops] == ["strided_slice", "slice"]
    assert z.shape == (4,)
    exe = fluid.Executor(fluid.CPUPlace())
    value = np.arange(12, dtype="float32").reshape(3, 4)
    got_y, got_z = exe.run(main, feed={"x": value}, fetch_list=[y, z])
    np.testing.assert_array_equal(got_y, value[1:, ::2])
    np.testing.assert_array_equal(got_z, value[0])
    with pytest.raises(TypeError, match="not iterable"):
        list(x)


def test_static_variables_index_with_int_variables_as_fluid_18():
    # an int Variable index is start i, end i + 1 (StartsTensorList/EndsTensorList of a slice
    # op), its dim dropped; Variable bounds of a slice leave that dim unknown until run time
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [-1, 4])
        x.stop_gradient = False
        i = fluid.layers.fill_constant([1], "int64", 1)
        row, tail, stepped = x[i], x[i:, 1:3], x[0:i + 2:2]
        sliced = fluid.layers.slice(x, axes=[0, 1], starts=[i, 0], ends=[3, i])
        whole = fluid.layers.slice(x, axes=[1], starts=i, ends=i + 2)
        grad, = fluid.gradients([fluid.layers.reduce_sum(row) +
                                 fluid.layers.reduce_sum(tail * 2.0)], [x])
    assert row.shape == (4,) and list(tail.shape) == [-1, 2] and list(sliced.shape) == [-1, -1]
    ops = [op for op in main.global_block().ops if op.type in ("slice", "strided_slice")]
    assert "StartsTensorList" in ops[0].inputs and "EndsTensorList" in ops[0].inputs
    assert ops[0].attr("infer_flags") == [-1] and ops[0].attr("decrease_axis") == [0]
    value = np.arange(12, dtype="float32").reshape(3, 4)
    got = fluid.Executor(fluid.CPUPlace()).run(
        main, feed={"x": value}, fetch_list=[row, tail, stepped, sliced, whole, grad])
    expected = np.zeros_like(value)
    expected[1] += 1.0
    expected[1:, 1:3] += 2.0
    for g, e in zip(got, [value[1], value[1:, 1:3], value[0:3:2], value[1:3, :1],
                          value[:, 1:3], expected], strict=True):
        np.testing.assert_array_equal(g, e)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [3, 4])
        with pytest.raises(TypeError, match="an index Variable holds one int"):
            x[fluid.layers.fill_constant([1], "float32", 1.0)]


# -- TracedLayer ------------------------------------------------------------------------------


def test_traced_layer_runs_and_saves_as_an_inference_model(tmp_path):
    from dask_fluid.dygraph.jit import TracedLayer

    x_np = np.random.default_rng(2).standard_normal((5, 4)).astype("float32")
    with dygraph.guard(fluid.CPUPlace()):
        model = _MLP()
        out, traced = TracedLayer.trace(model, inputs=[dygraph.to_variable(x_np)])
        assert [op.type for op in traced.program.global_block().ops] == [
            "matmul", "elementwise_add", "relu", "matmul", "elementwise_add"]
        np.testing.assert_allclose(traced([x_np])[0], out.numpy(), rtol=1e-6)
        traced.save_inference_model(str(tmp_path / "model"))
        with pytest.raises(TypeError, match="fluid.dygraph.Layer"):
            TracedLayer.trace(lambda v: v, [dygraph.to_variable(x_np)])
        with pytest.raises(ValueError, match="one per traced input"):
            traced([x_np, x_np])
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path / "model"), exe)
        got = exe.run(program, feed={feeds[0]: x_np}, fetch_list=fetches)[0]
    np.testing.assert_allclose(got, out.numpy(), rtol=1e-6)


def test_grad_returns_gradients_without_touching_the_variables():
    xv = np.array([1.0, 2.0, 3.0])
    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(xv)
        x.stop_gradient = False
        w = dygraph.to_variable(np.array([0.5, -1.0, 2.0]))
        w.stop_gradient = False
        y = x * x * w
        z = fluid.layers.reduce_sum(y)
        gx, gw = dygraph.grad(z, [x, w])
        np.testing.assert_allclose(gx.numpy(), 2 * xv * w.numpy())
        np.testing.assert_allclose(gw.numpy(), xv ** 2)
        assert x.gradient() is None
        (gy,) = dygraph.grad(y, x, grad_outputs=[dygraph.to_variable(np.array([1.0, 0.0, 2.0]))])
        np.testing.assert_allclose(gy.numpy(), 2 * xv * w.numpy() * [1.0, 0.0, 2.0])
        mid = x * w
        top = fluid.layers.reduce_sum(mid * x)
        (through_x_only,) = dygraph.grad(top, x, no_grad_vars=[mid])
        np.testing.assert_allclose(through_x_only.numpy(), xv * w.numpy())  # mid's value
        unused = dygraph.to_variable(np.ones(3))
        unused.stop_gradient = False
        with pytest.raises(ValueError, match="allow_unused"):
            dygraph.grad(z, [x, unused])
        assert dygraph.grad(z, [x, unused], allow_unused=True)[1] is None
        z.backward(dygraph.BackwardStrategy())
        with pytest.raises(TypeError, match="BackwardStrategy"):
            z.backward("sorted")


def test_an_intermediate_that_stops_gradients_blocks_its_path():
    xv = np.array([1.0, 2.0])
    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(xv)
        x.stop_gradient = False
        mid = x * 3.0
        mid.stop_gradient = True  # Fluid's detach of an intermediate
        fluid.layers.reduce_sum(mid * x).backward()
        np.testing.assert_allclose(x.gradient(), 3 * xv)  # only through the second factor


def test_layers_decay_functions_give_dygraph_decays_in_dygraph_mode():
    with dygraph.guard(fluid.CPUPlace()):
        decay = fluid.layers.exponential_decay(0.1, 2, 0.5, staircase=True)
        assert isinstance(decay, dygraph.ExponentialDecay)
        assert isinstance(fluid.layers.piecewise_decay([2], [0.1, 0.01]), dygraph.PiecewiseDecay)
        w = _Linear(2, 1)
        opt = fluid.optimizer.SGD(decay, parameter_list=w.parameters())
        rates = []
        for _ in range(4):
            loss = fluid.layers.mean(w(dygraph.to_variable(np.ones((1, 2), "float32"))))
            loss.backward()
            opt.minimize(loss)
            w.clear_gradients()
            rates.append(opt.current_step_lr())
        np.testing.assert_allclose(rates, [0.1, 0.1, 0.05, 0.05])


def test_data_loader_yields_dygraph_variables():
    def samples():
        for i in range(7):
            yield np.full((3,), i, "float32"), np.array([i % 2], "int64")

    with dygraph.guard(fluid.CPUPlace()):
        with pytest.warns(UserWarning, match="returning as list only"):
            loader = fluid.io.DataLoader.from_generator(capacity=4)
        loader.set_sample_generator(samples, batch_size=3, drop_last=False)
        batches = [data for data in loader()]
        assert [len(b) for b in batches] == [2, 2, 2]
        img, label = batches[0]
        assert isinstance(img, dygraph.VarBase) and img.stop_gradient
        np.testing.assert_array_equal(img.numpy(), [[0] * 3, [1] * 3, [2] * 3])
        assert label.shape == [3, 1] and label.dtype == "int64"
        assert batches[-1][0].shape == [1, 3]
        loader = fluid.io.DataLoader.from_generator(capacity=2, return_list=True)
        loader.set_batch_generator(lambda: iter([(np.ones((2, 3), "float32"), np.zeros(2))]))
        (x, y), = list(loader())
        assert x.shape == [2, 3] and y.shape == [2]
        # as Fluid 1.8's DygraphGeneratorLoader: warned and made iterable
        with pytest.warns(UserWarning, match="supports iterable mode only"):
            switched = fluid.io.DataLoader.from_generator(capacity=2, iterable=False,
                                                          return_list=True)
        switched.set_batch_generator(lambda: iter([(np.ones((2, 3), "float32"),)]))
        (x,), = list(switched())
        assert x.shape == [2, 3]
        ragged = fluid.io.DataLoader.from_generator(capacity=2, return_list=True)
        ragged.set_sample_list_generator(lambda: iter([[(np.ones(2),), (np.ones(3),)]]))
        with pytest.raises(TypeError, match="same shape"):
            list(ragged())
        bad = fluid.io.DataLoader.from_generator(capacity=2, return_list=True)
        bad.set_batch_generator(lambda: iter([(np.array([[np.inf, 1.0]], "float32"),)]))
        with pytest.raises(ValueError, match="field 0 of a batch contains NaN or inf"):
            list(bad())


@pytest.mark.parametrize("make_opt", [
    lambda params: fluid.optimizer.Momentum(
        0.1, 0.9, parameter_list=params, regularization=fluid.regularizer.L2Decay(0.01),
        grad_clip=fluid.clip.GradientClipByGlobalNorm(0.5)),
    lambda params: fluid.optimizer.Adam(
        0.05, parameter_list=params, grad_clip=fluid.clip.GradientClipByValue(0.05)),
], ids=["momentum-l2-globalnorm", "adam-clipbyvalue"])
def test_regularization_and_clipping_match_the_static_program(make_opt):
    xs, ys = _batches(3)
    seed = 21
    with dygraph.guard(fluid.CPUPlace()):
        fluid.default_startup_program().random_seed = seed
        fluid.default_main_program().random_seed = seed
        model = _MLP()
        opt = make_opt(model.parameters())
        accs = []
        for x, y in zip(xs, ys, strict=True):
            logits = model(dygraph.to_variable(x))
            label = dygraph.to_variable(y)
            loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
            accs.append(float(fluid.layers.accuracy(fluid.layers.softmax(logits), label)))
            loss.backward()
            opt.minimize(loss)
            model.clear_gradients()
        dy = {p.name: p.numpy() for p in model.parameters()}

    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        model = _MLP()
        x = fluid.layers.data("x", shape=[4])
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        logits = model(x)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        acc = fluid.layers.accuracy(fluid.layers.softmax(logits), y)
        make_opt(None).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    st_accs = [exe.run(main, feed={"x": xv, "y": yv}, fetch_list=[acc], scope=scope)[0].item()
               for xv, yv in zip(xs, ys, strict=True)]
    assert accs == pytest.approx(st_accs)
    for name, value in dy.items():
        np.testing.assert_allclose(np.array(scope.get(name)), value, rtol=1e-4, atol=1e-6,
                                   err_msg=name)


def test_grad_with_create_graph_gives_a_differentiable_gradient_penalty():
    # WGAN-GP in dygraph: penalty = sum((d critic / d x)^2), differentiated for the weights
    rng = np.random.default_rng(8)
    xv, w1v, w2v = (rng.standard_normal(s) for s in ((5, 3), (3, 4), (4, 1)))

    def penalty_of(w1, w2):
        dx = (2 * (xv @ w1) * w2.T) @ w1.T  # d sum(critic) / dx of critic = (x w1)^2 w2
        return float((dx ** 2).sum())

    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(xv)
        x.stop_gradient = False
        w1, w2 = dygraph.to_variable(w1v), dygraph.to_variable(w2v)
        w1.stop_gradient = w2.stop_gradient = False
        # ops with second-order gradients in Fluid 1.8: mul, square, reduce_sum
        critic = fluid.layers.mul(fluid.layers.square(fluid.layers.mul(x, w1)), w2)
        (dx,) = dygraph.grad(critic, x, create_graph=True)
        assert not dx.stop_gradient
        penalty = fluid.layers.reduce_sum(fluid.layers.square(dx))
        assert float(penalty) == pytest.approx(penalty_of(w1v, w2v), rel=1e-10)
        penalty.backward()
        np.testing.assert_allclose(
            w1.gradient(), _numeric_grad(lambda v: penalty_of(v, w2v), w1v), rtol=1e-5,
            atol=1e-8)
        np.testing.assert_allclose(
            w2.gradient(), _numeric_grad(lambda v: penalty_of(w1v, v), w2v), rtol=1e-5,
            atol=1e-8)
        with pytest.raises(NotImplementedError, match="second-order"):
            y = fluid.layers.tanh(fluid.layers.mul(x, w1))  # tanh_grad_grad came after 1.8
            (gx,) = dygraph.grad(fluid.layers.reduce_sum(y), x, create_graph=True)
            fluid.layers.reduce_sum(gx * gx).backward()


def test_the_backward_program_of_a_graph_is_planned_once():
    xs, ys = _batches(4)
    with dygraph.guard(fluid.CPUPlace()):
        tracer = fluid.framework._dygraph_tracer()
        model = _MLP()
        for x, y in zip(xs, ys, strict=True):
            loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
                model(dygraph.to_variable(x)), dygraph.to_variable(y)))
            loss.backward()
        assert len(tracer._backward_plans) == 1  # four steps, one graph shape
        plan = next(iter(tracer._backward_plans.values()))
        assert len(plan.executor._cache) == 1  # and one executor plan
        loss = fluid.layers.mean(model(dygraph.to_variable(xs[0][:5])))  # another shape
        loss.backward()
        assert len(tracer._backward_plans) == 2


def test_backward_errors_say_where_with_the_variables_names():
    from dask_fluid.dygraph.backward import _real_names

    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(np.array([[1.0, -1.0]]))
        x.stop_gradient = False
        y = fluid.layers.relu(x)
        y._node.out_values[y.name] = None  # a value lost: the grad kernel fails
        with pytest.raises(fluid.ExecutionError,
                           match=r"in the backward pass: op 'reduce_sum_grad'"):
            fluid.layers.reduce_sum(y).backward()
    assert _real_names("reads X='v1', not v12 or v1x", {"v1": "fc_0.tmp_1"}) == \
        "reads X='fc_0.tmp_1', not v12 or v1x"


def test_numpy_numbers_build_ops_and_numpy_defers_to_variables():
    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(np.ones(3, "float32"))
        x.stop_gradient = False
        y = np.float32(2.0) * x + np.int64(1)  # numpy scalars on either side: ops, traced
        assert isinstance(y, dygraph.VarBase)
        np.testing.assert_array_equal(y.numpy(), [3.0, 3.0, 3.0])
        fluid.layers.reduce_sum(y).backward()
        np.testing.assert_array_equal(x.gradient(), [2.0, 2.0, 2.0])
        with pytest.raises(TypeError, match="does not support ufuncs"):
            np.add(x, 1)  # as Fluid 1.8: no silent trip through numpy, which drops the graph
        np.testing.assert_array_equal(np.asarray(x), [1.0, 1.0, 1.0])  # reading it is fine
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        v = fluid.layers.data("v", shape=[3])
        w = np.float64(0.5) * v
    assert isinstance(w, fluid.Variable) and main.global_block().ops[-1].type == "scale"


def test_to_variable_takes_device_arrays_on_either_place(device_xp):
    on_device = device_xp.asarray(np.arange(4, dtype="float32"))
    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(on_device)  # copied to the host for a CPU guard
        assert isinstance(x._value, np.ndarray)
        np.testing.assert_array_equal(x.numpy(), [0, 1, 2, 3])
    with dygraph.guard(fluid.CUDAPlace(0)):
        y = dygraph.to_variable(on_device)
        assert type(y._value).__module__.startswith(type(on_device).__module__.split(".")[0])
        assert y._value is not on_device  # a copy: the caller's array stays the caller's
        np.testing.assert_array_equal((y * 2.0).numpy(), [0, 2, 4, 6])
