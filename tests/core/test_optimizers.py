"""Each optimizer, wired through minimize() and the Executor, against a numpy reference."""

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

RNG = np.random.default_rng(0)
X = RNG.standard_normal((16, 3))
Y = RNG.standard_normal((16, 1))


def _grads(w, b):
    d = 2.0 * (X @ w + b - Y) / len(X)  # d mean((xw + b - y)^2) / d pred
    return {"w": X.T @ d, "b": d.sum(axis=0)}


def _sgd(lr):
    def step(p, g, s, t):
        return p - lr * g
    return step


def _momentum(lr, mu, nesterov):
    def step(p, g, s, t):
        s["v"] = mu * s.get("v", 0.0) + g
        return p - lr * (g + mu * s["v"]) if nesterov else p - lr * s["v"]
    return step


def _adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    def step(p, g, s, t):
        b1p, b2p = b1 ** (t + 1), b2 ** (t + 1)
        s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0.0) + (1 - b2) * g * g
        lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
        return p - lr_t * s["m"] / (np.sqrt(s["v"]) + eps * np.sqrt(1 - b2p))
    return step


def _adagrad(lr, eps=1e-6):
    def step(p, g, s, t):
        s["m"] = s.get("m", 0.0) + g * g
        return p - lr * g / (np.sqrt(s["m"]) + eps)
    return step


def _rmsprop(lr, rho, eps, mom, centered):
    def step(p, g, s, t):
        s["ms"] = rho * s.get("ms", 0.0) + (1 - rho) * g * g
        if centered:
            s["mg"] = rho * s.get("mg", 0.0) + (1 - rho) * g
            denom = np.sqrt(s["ms"] - s["mg"] ** 2 + eps)
        else:
            denom = np.sqrt(s["ms"] + eps)
        s["mom"] = mom * s.get("mom", 0.0) + lr * g / denom
        return p - s["mom"]
    return step


CASES = {
    "sgd": (lambda: fluid.optimizer.SGD(0.1), _sgd(0.1)),
    "momentum": (lambda: fluid.optimizer.Momentum(0.1, 0.9), _momentum(0.1, 0.9, False)),
    "nesterov": (lambda: fluid.optimizer.Momentum(0.1, 0.9, use_nesterov=True),
                 _momentum(0.1, 0.9, True)),
    "adam": (lambda: fluid.optimizer.Adam(0.1), _adam(0.1)),
    "adagrad": (lambda: fluid.optimizer.Adagrad(0.1), _adagrad(0.1)),
    "rmsprop": (lambda: fluid.optimizer.RMSProp(0.01, rho=0.9, epsilon=1e-6, momentum=0.5),
                _rmsprop(0.01, 0.9, 1e-6, 0.5, False)),
    "rmsprop_centered": (lambda: fluid.optimizer.RMSProp(0.01, rho=0.9, epsilon=1e-6,
                                                         momentum=0.5, centered=True),
                         _rmsprop(0.01, 0.9, 1e-6, 0.5, True)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_matches_numpy_reference_over_5_steps(name):
    make_opt, ref_step = CASES[name]
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 5
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[3], dtype="float64")
        y = layers.data(name="y", shape=[1], dtype="float64")
        pred = layers.fc(x, 1, param_attr=fluid.ParamAttr(name="w"),
                         bias_attr=fluid.ParamAttr(
                             name="b", initializer=fluid.initializer.Constant(0.3)))
        loss = layers.mean(layers.square_error_cost(pred, y))
        make_opt().minimize(loss)
    scope = fluid.Scope()
    exe = fluid.Executor()
    exe.run(startup, scope=scope)
    params = {"w": scope.get("w").copy(), "b": scope.get("b").copy()}
    states = {"w": {}, "b": {}}
    for t in range(5):
        grads = _grads(params["w"], params["b"])
        params = {k: ref_step(params[k], grads[k], states[k], t) for k in params}
        exe.run(main, feed={"x": X, "y": Y}, scope=scope)
        for k in params:
            np.testing.assert_allclose(scope.get(k), params[k], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{name} step {t} param {k}")


def test_l2_decay_and_clip_through_minimize():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[3], dtype="float64")
        y = layers.data(name="y", shape=[1], dtype="float64")
        pred = layers.fc(x, 1, param_attr=fluid.ParamAttr(
            name="w", gradient_clip=fluid.clip.GradientClipByValue(0.05)),
            bias_attr=fluid.ParamAttr(name="b"))
        loss = layers.mean(layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.1, regularization=fluid.regularizer.L2Decay(0.01)).minimize(loss)
    scope = fluid.Scope()
    exe = fluid.Executor()
    exe.run(startup, scope=scope)
    w, b = scope.get("w").copy(), scope.get("b").copy()
    for _ in range(3):
        g = _grads(w, b)
        w = w - 0.1 * (np.clip(g["w"], -0.05, 0.05) + 0.01 * w)
        b = b - 0.1 * (g["b"] + 0.01 * b)
        exe.run(main, feed={"x": X, "y": Y}, scope=scope)
    np.testing.assert_allclose(scope.get("w"), w, rtol=1e-10)
    np.testing.assert_allclose(scope.get("b"), b, rtol=1e-10)


def test_clipping_then_decay_as_fluid_1_8_orders_them_and_its_helpers():
    """apply_gradients as Fluid 1.8's: every clip op (append_gradient_clip_ops), then every
    decay op (append_regularization_ops); both functions are public as in 1.8, and clips
    leave out the pairs without a gradient."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[3], dtype="float64")
        clip = fluid.clip.GradientClipByValue(0.05)
        h = layers.fc(x, 2, param_attr=fluid.ParamAttr(name="w1", gradient_clip=clip),
                      bias_attr=False)
        pred = layers.fc(h, 1, param_attr=fluid.ParamAttr(name="w2", gradient_clip=clip),
                         bias_attr=False)
        loss = layers.mean(pred)
        fluid.optimizer.SGD(0.1, regularization=fluid.regularizer.L2Decay(0.01)).minimize(loss)
    types = [op.type for op in main.global_block().ops]
    tail = [t for t in types[types.index("clip"):] if t in ("clip", "scale", "sum", "sgd")]
    assert tail == ["clip", "clip", "scale", "sum", "scale", "sum", "sgd", "sgd"]

    block = fluid.Program().global_block()
    a = block.create_parameter(name="a", shape=[2, 3], dtype="float32")
    b = block.create_parameter(name="b", shape=[2, 3], dtype="float32")
    for clipper in (fluid.clip.GradientClipByGlobalNorm(1.0), fluid.clip.GradientClipByNorm(1.0),
                    fluid.clip.GradientClipByValue(1.0)):
        assert [p.name for p, _ in clipper([(a, None), (a, b), (b, a)])] == ["a", "b"]
    assert fluid.clip.append_gradient_clip_ops([(a, None), (b, a)]) == [(b, a)]
    decayed = fluid.regularizer.append_regularization_ops(
        [(a, b), (b, None)], fluid.regularizer.L2Decay(0.5))
    assert decayed[1] == (b, None) and decayed[0][1].name.startswith("b@regularized")
    assert fluid.optimizer.append_regularization_ops is fluid.regularizer.append_regularization_ops


@pytest.mark.parametrize("make", [
    lambda: fluid.optimizer.Adamax(0.01),
    lambda: fluid.optimizer.DecayedAdagrad(0.05),
    lambda: fluid.optimizer.Ftrl(0.05, l1=0.0001, l2=0.0001),
    lambda: fluid.optimizer.Lamb(0.01, exclude_from_weight_decay_fn=lambda p: ".b_" in p.name),
    lambda: fluid.optimizer.LarsMomentum(1.0, 0.9, lars_coeff=0.1),
])
def test_the_other_fluid_optimizers_train_the_reference_mlp(make):
    from dask_fluid.models import mlp

    spec = mlp(hidden=(16,), n_features=8, n_classes=3, opt=make())
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(spec.startup, scope=scope)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = (x[:, :1] > 0).astype(np.int64) + (x[:, 1:2] > 0)
    losses = [float(exe.run(spec.main, feed={"x": x, "y": y}, fetch_list=[spec.loss],
                            scope=scope)[0][0]) for _ in range(30)]
    assert losses[-1] < 0.8 * losses[0], losses[::10]


def _one_sgd_step(clip, lr=1.0, per_param=None):
    """One SGD step with ``grad_clip=clip``, or with ``set_gradient_clip(c, [name])`` for each
    ``name: c`` of ``per_param``."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", shape=[3], dtype="float64")
        w = layers.create_parameter([3, 2], "float64", name="w",
                                    default_initializer=fluid.initializer.Constant(0.5))
        b = layers.create_parameter([2], "float64", name="b", is_bias=True,
                                    default_initializer=fluid.initializer.Constant(0.0))
        loss = layers.reduce_sum(layers.elementwise_add(layers.matmul(x, w), b))
        for name, c in (per_param or {}).items():
            fluid.clip.set_gradient_clip(c, [name], program=main)
        fluid.optimizer.SGD(lr, grad_clip=clip).minimize(loss)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 12.0]])}
    exe.run(main, feed=feed, scope=scope)
    # the gradients: dL/dw[i, j] = sum of x[:, i] (3, 4, 12 per row of w), dL/db = 2
    return 0.5 - scope.get("w"), 0.0 - scope.get("b"), main


def test_clip_by_norm_and_by_global_norm_scale_the_gradients_as_fluid():
    gw, gb, _ = _one_sgd_step(None)
    np.testing.assert_allclose(gw, [[3, 3], [4, 4], [12, 12]])
    np.testing.assert_allclose(gb, [2, 2])
    cw, cb, main = _one_sgd_step(fluid.clip.GradientClipByNorm(1.0))
    np.testing.assert_allclose(cw, gw / np.linalg.norm(gw))
    np.testing.assert_allclose(cb, gb / np.linalg.norm(gb))
    assert [op.type for op in main.global_block().ops].count("clip_by_norm") == 2
    global_norm = np.sqrt((gw ** 2).sum() + (gb ** 2).sum())
    cw, cb, main = _one_sgd_step(fluid.clip.GradientClipByGlobalNorm(5.0))
    np.testing.assert_allclose(cw, gw * 5.0 / global_norm)
    np.testing.assert_allclose(cb, gb * 5.0 / global_norm)
    types = [op.type for op in main.global_block().ops]
    assert {"square", "reduce_sum", "sqrt", "elementwise_max", "elementwise_div"} <= set(types)
    big, _, _ = _one_sgd_step(fluid.clip.GradientClipByGlobalNorm(1000.0))
    np.testing.assert_allclose(big, gw)  # within the norm: untouched
    skip, sb, _ = _one_sgd_step(fluid.clip.GradientClipByNorm(
        1.0, need_clip=lambda p: p.name != "b"))
    np.testing.assert_allclose(skip, gw / np.linalg.norm(gw))
    np.testing.assert_allclose(sb, gb)  # need_clip false: not clipped


def test_bad_clips_are_refused():
    with pytest.raises(ValueError, match="clip_norm must be > 0"):
        fluid.clip.GradientClipByGlobalNorm(0.0)
    with pytest.raises(TypeError, match="grad_clip must be"):
        fluid.optimizer.SGD(0.1, grad_clip=3.0)
    with pytest.raises(TypeError, match="GradientClipBy"):
        fluid.clip.set_gradient_clip(1.0)
    with pytest.raises(ValueError, match="same group should be the same"):
        _one_sgd_step(None, per_param={"w": fluid.clip.GradientClipByGlobalNorm(1.0),
                                       "b": fluid.clip.GradientClipByGlobalNorm(2.0)})


def test_set_gradient_clip_by_global_norm_clips_each_group_by_its_norm():
    gw, gb, _ = _one_sgd_step(None)
    both = fluid.clip.GradientClipByGlobalNorm(5.0)
    cw, cb, main = _one_sgd_step(None, per_param={"w": both, "b": both})
    norm = np.sqrt((gw ** 2).sum() + (gb ** 2).sum())
    np.testing.assert_allclose(cw, gw * 5.0 / norm)  # as grad_clip=GradientClipByGlobalNorm
    np.testing.assert_allclose(cb, gb * 5.0 / norm)
    assert [op.type for op in main.global_block().ops].count("sqrt") == 1
    # two groups: each scaled by its own norm
    cw, cb, main = _one_sgd_step(None, per_param={
        "w": fluid.clip.GradientClipByGlobalNorm(5.0, group_name="w"),
        "b": fluid.clip.GradientClipByGlobalNorm(1.0, group_name="b")})
    np.testing.assert_allclose(cw, gw * 5.0 / np.linalg.norm(gw))
    np.testing.assert_allclose(cb, gb * 1.0 / np.linalg.norm(gb))
    assert [op.type for op in main.global_block().ops].count("sqrt") == 2


def test_adam_advances_its_beta_powers_in_the_op_as_fluid_1_8():
    """Fluid 1.8's AdamOptimizer appends one ``adam`` op per parameter, which writes
    Beta1PowOut/Beta2PowOut itself: no ``scale`` ops follow it (Lamb passes the powers and
    never advances them; Adamax still advances its one power with a ``scale``)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[3], dtype="float32")
        loss = layers.mean(layers.fc(x, 2))
        fluid.optimizer.Adam(0.1).minimize(loss)
    ops = main.global_block().ops
    opt = [op.type for op in ops if op.type in ("adam", "scale")]
    assert opt == ["adam", "adam"]
    adam = next(op for op in ops if op.type == "adam")
    assert adam.output("Beta1PowOut") == adam.input("Beta1Pow")
    assert adam.output("Beta2PowOut") == adam.input("Beta2Pow")
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    for _ in range(3):
        exe.run(main, feed={"x": X.astype("float32")}, scope=scope)
    np.testing.assert_allclose(scope.get(adam.input("Beta1Pow")[0]), [0.9 ** 4], rtol=1e-6)
    np.testing.assert_allclose(scope.get(adam.input("Beta2Pow")[0]), [0.999 ** 4], rtol=1e-6)


@pytest.mark.parametrize("make, lr_ratio, want", [
    (lambda: fluid.optimizer.SGD(0.01), 1.1, ["scale", "sgd"]),
    (lambda: fluid.optimizer.Momentum(0.01, 0.9), 1.1, ["scale", "momentum"]),
    (lambda: fluid.optimizer.Adamax(0.01), 1.1, ["scale", "adamax", "scale"]),
    (lambda: fluid.optimizer.Adamax(0.01), 1.0, ["adamax", "scale"]),
])
def test_minimize_returns_every_op_of_the_optimization_pass(make, lr_ratio, want):
    # Fluid 1.8's _create_optimization_pass returns the slice of ops it appended: a
    # parameter's learning-rate scale, the optimizer op, _finish_update's (Adamax's beta1 pow)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [10], dtype="float32")
        y = layers.fc(x, 8, param_attr=fluid.ParamAttr(name="w", learning_rate=lr_ratio),
                      bias_attr=False)
        ops, _ = make().minimize(layers.mean(y))
    assert [op.type for op in ops] == want
    assert ops == main.global_block().ops[-len(want):]
