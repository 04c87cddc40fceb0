"""Adadelta, Dpsgd, ModelAverage and ExponentialMovingAverage (Fluid 1.8's
``fluid.optimizer``): their kernels against numpy references ported from Paddle's op tests
(test_adadelta_op.py, test_dpsgd_op.py, test_average_accumulates_op.py), on numpy and on the
strict CuPy, the programs they build, apply/restore over a short training, and their errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import executor as executor_module
from dask_fluid import layers
from dask_fluid.ops import SelectedRows

from ..ops import run_op

RNG = np.random.default_rng(0)
X = RNG.standard_normal((16, 3))
Y = RNG.standard_normal((16, 1))


def _grads(w, b):
    d = 2.0 * (X @ w + b - Y) / len(X)  # d mean((xw + b - y)^2) / d pred
    return {"w": X.T @ d, "b": d.sum(axis=0)}


def _linear(make_opt, dtype="float64", seed=5):
    """A linear regression on X, Y with parameters w and b, optimized by ``make_opt()``; the
    callable gets the loss, so it may also build averaging objects."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = seed
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[3], dtype=dtype)
        y = layers.data(name="y", shape=[1], dtype=dtype)
        pred = layers.fc(x, 1, param_attr=fluid.ParamAttr(name="w"),
                         bias_attr=fluid.ParamAttr(
                             name="b", initializer=fluid.initializer.Constant(0.3)))
        loss = layers.mean(layers.square_error_cost(pred, y))
        extra = make_opt(loss)
    return main, startup, extra


# -- numpy references (Paddle's op tests) ------------------------------------------------------

def _adadelta_ref(p, g, g2, u2, rho, eps):
    """test_adadelta_op.py's reference."""
    g2 = rho * g2 + (1 - rho) * g * g
    update = -np.sqrt((u2 + eps) / (g2 + eps)) * g
    u2 = rho * u2 + (1 - rho) * update * update
    return p + update, g2, u2


def _dpsgd_ref(p, g, lr, clip, batch_size, noise):
    """Paddle 1.8's dpsgd_op.h: the gradient scaled to norm ``clip``, one scalar noise."""
    norm = np.sqrt((g.astype(np.float32) ** 2).sum())
    scale = norm / clip if norm > clip else 1.0
    return p - lr * (g / scale + noise / batch_size)


class _Window:
    """average_accumulates_op.h step by step, in place as in a program (out_* is in_*)."""

    def __init__(self, shape, rate, min_w, max_w, n_upd=0):
        self.s = [np.zeros(shape) for _ in range(3)]
        self.n_acc, self.old, self.n_upd = 0, 0, n_upd
        self.rate, self.min_w, self.max_w = rate, min_w, max_w

    def step(self, p):
        s1, s2, s3 = self.s
        self.n_upd += 1
        self.n_acc += 1
        s1 += p
        if self.n_upd % 16384 == 0:
            s2 += s1
            s1[...] = 0
        window = min(self.max_w, int(np.float32(self.n_upd) * np.float32(self.rate)))
        if self.n_acc >= self.min_w and self.n_acc >= window:
            s3[...] = s1 + s2
            s1[...] = 0
            s2[...] = 0
            self.old, self.n_acc = self.n_acc, 0

    def average(self):
        return sum(self.s) / (self.n_acc + self.old)


# -- adadelta -----------------------------------------------------------------------------------

def test_adadelta_kernel_matches_paddles_reference():
    rng = np.random.default_rng(1)
    p, g = rng.uniform(-1, 1, (10, 12)), rng.uniform(-1, 1, (10, 12))
    g2, u2 = rng.random((10, 12)), rng.random((10, 12))
    ref = _adadelta_ref(p, g, g2, u2, 0.95, 1e-6)
    ins = {"Param": [p.copy()], "Grad": [g], "AvgSquaredGrad": [g2.copy()],
           "AvgSquaredUpdate": [u2.copy()]}
    out = run_op("adadelta", ins, {"rho": 0.95, "epsilon": 1e-6})
    assert out["ParamOut"][0] is ins["Param"][0]  # in place
    for slot, want in zip(("ParamOut", "AvgSquaredGradOut", "AvgSquaredUpdateOut"), ref,
                          strict=True):
        np.testing.assert_allclose(out[slot][0], want, rtol=1e-12, err_msg=slot)


def test_adadelta_trains_as_the_reference_over_5_steps():
    opt = fluid.optimizer.Adadelta(learning_rate=0.5, epsilon=1e-6, rho=0.9)
    main, startup, _ = _linear(lambda loss: opt.minimize(loss))
    assert [op.type for op in main.global_block().ops if op.type == "adadelta"] == \
        ["adadelta", "adadelta"]
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    params = {"w": scope.get("w").copy(), "b": scope.get("b").copy()}
    state = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in params.items()}
    for t in range(5):
        grads = _grads(params["w"], params["b"])
        for k in params:
            params[k], *state[k] = _adadelta_ref(params[k], grads[k], *state[k], 0.9, 1e-6)
        exe.run(main, feed={"x": X, "y": Y}, scope=scope)
        for k in params:
            np.testing.assert_allclose(scope.get(k), params[k], rtol=1e-10, atol=1e-12,
                                       err_msg=f"step {t} {k}")


def test_adadelta_program_structure_as_fluid():
    opt = fluid.optimizer.AdadeltaOptimizer(0.01)
    main, startup, _ = _linear(lambda loss: opt.minimize(loss))
    block = main.global_block()
    op = next(o for o in block.ops if o.type == "adadelta" and o.input("Param") == ["w"])
    assert op.input("AvgSquaredGrad") == ["w__avg_squared_grad_0"]
    assert op.input("AvgSquaredUpdate") == ["w__avg_squared_update_0"]
    assert op.output("ParamOut") == ["w"]
    assert op.output("AvgSquaredGradOut") == op.input("AvgSquaredGrad")
    assert "LearningRate" not in op.inputs  # Paddle 1.8's op has none
    assert op.attrs["rho"] == 0.95 and op.attrs["epsilon"] == 1e-6
    for name in ("w__avg_squared_grad_0", "w__avg_squared_update_0"):
        var = block.var(name)
        assert var.persistable and list(var.shape) == [3, 1] and var.dtype == "float64"
    assert list(block.var("b__avg_squared_grad_0").shape) == [1]
    assert {o.type for o in startup.global_block().ops} >= {"fill_constant"}


def test_adadelta_parameter_list_restricts_minimize():
    opt = fluid.optimizer.Adadelta(0.01, parameter_list=["w"])
    main, startup, _ = _linear(lambda loss: opt.minimize(loss))
    updated = [o.input("Param")[0] for o in main.global_block().ops if o.type == "adadelta"]
    assert updated == ["w"]


# -- dpsgd --------------------------------------------------------------------------------------

def test_dpsgd_kernel_clips_and_adds_one_scalar_noise():
    rng = np.random.default_rng(2)
    p, g = rng.uniform(-1, 1, (6, 4)), rng.uniform(-1, 1, (6, 4))
    attrs = {"clip": 0.5, "batch_size": 4.0, "sigma": 0.3}
    out = run_op("dpsgd", {"Param": [p.copy()], "Grad": [g], "LearningRate": [np.array([0.1])]},
                 {**attrs, "_rng": np.random.default_rng(7)})["ParamOut"][0]
    noise = float(np.random.default_rng(7).standard_normal()) * 0.3
    np.testing.assert_allclose(out, _dpsgd_ref(p, g, 0.1, 0.5, 4.0, noise), rtol=1e-12)
    # short gradients are not scaled (test_dpsgd_op.py: sigma ~ 0, a large clip: plain SGD)
    out = run_op("dpsgd", {"Param": [p.copy()], "Grad": [g], "LearningRate": [np.array([0.1])]},
                 {"clip": 10000.0, "batch_size": 16.0, "sigma": 0.0})["ParamOut"][0]
    np.testing.assert_allclose(out, p - 0.1 * g, rtol=1e-12)


def test_dpsgd_kernel_with_a_seed_draws_the_same_noise_every_run():
    """Paddle re-seeds its engine from ``seed`` on every run."""
    p, g = np.zeros(5), np.zeros(5)
    ins = {"Param": [p], "Grad": [g], "LearningRate": [np.array([1.0])]}
    first = run_op("dpsgd", ins, {"sigma": 1.0, "batch_size": 1.0, "seed": 11})["ParamOut"][0]
    step = first.copy()
    second = run_op("dpsgd", ins, {"sigma": 1.0, "batch_size": 1.0, "seed": 11})["ParamOut"][0]
    np.testing.assert_allclose(second, 2 * step)
    assert np.all(step == step[0]) and step[0] != 0  # one scalar for the tensor


def test_dpsgd_trains_as_the_reference_without_noise():
    opt = fluid.optimizer.Dpsgd(learning_rate=0.1, clip=0.2, batch_size=8.0, sigma=0.0)
    main, startup, _ = _linear(lambda loss: opt.minimize(loss))
    op = next(o for o in main.global_block().ops if o.type == "dpsgd")
    assert op.attrs["clip"] == 0.2 and op.attrs["batch_size"] == 8.0 and op.attrs["seed"] == 0
    assert set(op.inputs) == {"Param", "Grad", "LearningRate"}
    assert set(op.outputs) == {"ParamOut"}
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    params = {"w": scope.get("w").copy(), "b": scope.get("b").copy()}
    for t in range(4):
        grads = _grads(params["w"], params["b"])
        params = {k: _dpsgd_ref(params[k], grads[k], 0.1, 0.2, 8.0, 0.0) for k in params}
        exe.run(main, feed={"x": X, "y": Y}, scope=scope)
        for k in params:
            np.testing.assert_allclose(scope.get(k), params[k], rtol=1e-10,
                                       err_msg=f"step {t} {k}")


def _dpsgd_run(seed: int) -> np.ndarray:
    opt = fluid.optimizer.Dpsgd(learning_rate=0.1, clip=1.0, batch_size=2.0, sigma=0.5)
    with fluid.unique_name.guard():
        main, startup, _ = _linear(lambda loss: opt.minimize(loss), seed=seed)
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    for _ in range(3):
        exe.run(main, feed={"x": X, "y": Y}, scope=scope)
    return scope.get("w").copy()


@pytest.mark.skipif("dpsgd" not in executor_module._SAMPLERS,
                    reason="the executor does not yet give dpsgd its per-op random stream")
def test_dpsgd_noise_is_reproducible_per_program_random_seed():
    a, b, c = _dpsgd_run(5), _dpsgd_run(5), _dpsgd_run(6)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


# -- average_accumulates and ModelAverage -------------------------------------------------------

@pytest.mark.parametrize("rate, min_w, max_w, start", [
    (0.5, 2, 5, 0),        # window grows with the updates, then is capped
    (0.15, 3, 3, 0),       # fixed window
    (1.0, 2, 100, 16380),  # crosses Paddle's kMaxNumAccumulates (16384)
])
def test_average_accumulates_kernel_over_many_steps(rate, min_w, max_w, start):
    rng = np.random.default_rng(3)
    ref = _Window((2, 3), rate, min_w, max_w, n_upd=start)
    state = {"in_sum_1": [np.zeros((2, 3))], "in_sum_2": [np.zeros((2, 3))],
             "in_sum_3": [np.zeros((2, 3))], "in_num_accumulates": [np.zeros(1, np.int64)],
             "in_old_num_accumulates": [np.zeros(1, np.int64)],
             "in_num_updates": [np.full(1, start, np.int64)]}
    attrs = {"average_window": rate, "min_average_window": min_w, "max_average_window": max_w}
    for t in range(12):
        p = rng.standard_normal((2, 3))
        ref.step(p)
        out = run_op("average_accumulates", {"param": [p], **state}, attrs)
        for i in (1, 2, 3):
            assert out[f"out_sum_{i}"][0] is state[f"in_sum_{i}"][0]
            np.testing.assert_allclose(out[f"out_sum_{i}"][0], ref.s[i - 1], rtol=1e-12,
                                       err_msg=f"step {t} sum_{i}")
        assert int(out["out_num_accumulates"][0][0]) == ref.n_acc, t
        assert int(out["out_old_num_accumulates"][0][0]) == ref.old, t
        assert int(out["out_num_updates"][0][0]) == ref.n_upd, t
        assert out["out_num_updates"][0].dtype == np.int64


def test_model_average_program_structure_as_fluid():
    def build(loss):
        fluid.optimizer.SGD(0.1).minimize(loss)
        return fluid.optimizer.ModelAverage(0.15, min_average_window=3, max_average_window=5)

    main, startup, avg = _linear(build)
    block = main.global_block()
    ops = [o for o in block.ops if o.type == "average_accumulates"]
    assert [o.input("param") for o in ops] == [["w"], ["b"]]
    w_op = ops[0]
    for acc in ("sum_1", "sum_2", "sum_3"):
        name = f"w_{acc}_0"
        assert w_op.input(f"in_{acc}") == [name] and w_op.output(f"out_{acc}") == [name]
        assert list(block.var(name).shape) == [3, 1] and block.var(name).persistable
    for acc in ("num_accumulates", "old_num_accumulates", "num_updates"):
        var = block.var(f"w_{acc}_0")
        assert var.dtype == "int64" and list(var.shape) == [1] and var.persistable
    assert w_op.attrs["average_window"] == 0.15
    assert w_op.attrs["min_average_window"] == 3 and w_op.attrs["max_average_window"] == 5
    assert [o.type for o in avg.apply_program.global_block().ops] == \
        ["assign", "sum", "sum", "cast", "cast", "elementwise_div"] * 2
    assert [o.type for o in avg.restore_program.global_block().ops] == ["assign", "assign"]
    assert not block.var("w.tmp_0").persistable
    assert avg.apply_program.global_block().var("w.tmp_0").persistable


@pytest.mark.parametrize("rate, min_w, max_w", [(0.5, 2, 4), (0.15, 3, 3)])
def test_model_average_apply_and_restore_over_a_short_training(rate, min_w, max_w):
    def build(loss):
        fluid.optimizer.SGD(0.1).minimize(loss)
        return fluid.optimizer.ModelAverage(rate, min_average_window=min_w,
                                            max_average_window=max_w)

    main, startup, avg = _linear(build)
    scope, exe = fluid.Scope(), fluid.Executor()
    with fluid.scope_guard(scope):
        exe.run(startup)
        refs = {k: _Window(scope.get(k).shape, rate, min_w, max_w) for k in ("w", "b")}
        for _ in range(9):
            exe.run(main, feed={"x": X, "y": Y})
            for k, ref in refs.items():  # the op runs after sgd: it sums the new values
                ref.step(scope.get(k))
        trained = {k: scope.get(k).copy() for k in refs}
        with avg.apply(exe):
            for k, ref in refs.items():
                np.testing.assert_allclose(scope.get(k), ref.average(), rtol=1e-12, err_msg=k)
        for k in refs:
            np.testing.assert_array_equal(scope.get(k), trained[k])
        with avg.apply(exe, need_restore=False):
            pass
        np.testing.assert_allclose(scope.get("w"), refs["w"].average(), rtol=1e-12)
        avg.restore(exe)
        np.testing.assert_array_equal(scope.get("w"), trained["w"])


def test_model_average_skips_parameters_with_do_model_average_false():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[3], dtype="float32")
        pred = layers.fc(x, 1, param_attr=fluid.ParamAttr(name="w"),
                         bias_attr=fluid.ParamAttr(name="b", do_model_average=False))
        fluid.optimizer.SGD(0.1).minimize(layers.mean(pred))
        fluid.optimizer.ModelAverage(0.5, 2, 4)
    ops = [o for o in main.global_block().ops if o.type == "average_accumulates"]
    assert [o.input("param") for o in ops] == [["w"]]


# -- ExponentialMovingAverage -------------------------------------------------------------------

def test_ema_program_structure_as_fluid():
    def build(loss):
        fluid.optimizer.SGD(0.1).minimize(loss)
        ema = fluid.optimizer.ExponentialMovingAverage(0.9)
        ema.update()
        return ema

    main, startup, ema = _linear(build)
    block = main.global_block()
    assert block.ops[0].type == "increment"
    assert block.ops[0].input("X") == ["@EMA_STEP_COUNTER@"]
    assert block.var("scheduled_ema_decay_rate").persistable
    for k in ("w", "b"):
        var = block.var(f"{k}_ema_0")
        assert var.persistable and var.dtype == "float64"
    assert list(block.var("w_ema_0").shape) == [3, 1]
    assigns = [o for o in block.ops if o.type == "assign" and o.output("Out") == ["w_ema_0"]]
    assert len(assigns) == 1
    assert [o.type for o in ema.restore_program.global_block().ops] == ["assign", "assign"]


@pytest.mark.parametrize("thres", [False, True])
def test_ema_apply_and_restore_over_a_short_training(thres):
    decay = 0.9

    def build(loss):
        fluid.optimizer.SGD(0.1).minimize(loss)
        steps = layers.autoincreased_step_counter() if thres else None
        ema = fluid.optimizer.ExponentialMovingAverage(decay, thres_steps=steps)
        ema.update()
        return ema

    main, startup, ema = _linear(build)
    scope, exe = fluid.Scope(), fluid.Executor()
    n = 6
    with fluid.scope_guard(scope):
        exe.run(startup)
        refs = {"w": np.zeros((3, 1)), "b": np.zeros(1)}
        d = decay
        for t in range(1, n + 1):
            # thres_steps (a counter from 1) at step t: min(decay, (1 + t) / (10 + t))
            d = min(decay, (1.0 + t) / (10.0 + t)) if thres else decay
            d = float(np.float32(d))  # the decay variable is float32
            exe.run(main, feed={"x": X, "y": Y})
            for k in refs:
                refs[k] = refs[k] * d + scope.get(k) * (1 - d)
        trained = {k: scope.get(k).copy() for k in refs}
        corrected = {k: v / (1 - np.float32(d) ** np.float32(n)) for k, v in refs.items()}
        with ema.apply(exe):
            for k in refs:
                np.testing.assert_allclose(scope.get(k), corrected[k], rtol=1e-6, err_msg=k)
                # Fluid 1.8 writes the corrected average back into the EMA variable
                np.testing.assert_allclose(scope.get(f"{k}_ema_0"), corrected[k], rtol=1e-6)
        for k in refs:
            np.testing.assert_array_equal(scope.get(k), trained[k])


def test_ema_apply_before_any_step_writes_the_zero_average():
    def build(loss):
        fluid.optimizer.SGD(0.1).minimize(loss)
        ema = fluid.optimizer.ExponentialMovingAverage(0.99)
        ema.update()
        return ema

    main, startup, ema = _linear(build)
    scope, exe = fluid.Scope(), fluid.Executor()
    with fluid.scope_guard(scope):
        exe.run(startup)
        w = scope.get("w").copy()
        with ema.apply(exe):  # no bias correction at step 0 (Fluid's Switch)
            np.testing.assert_array_equal(scope.get("w"), np.zeros_like(w))
        np.testing.assert_array_equal(scope.get("w"), w)


# -- errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("make, exc, words", [
    (lambda: fluid.optimizer.Adadelta(0.1, rho=1.0), ValueError, "rho"),
    (lambda: fluid.optimizer.Adadelta(0.1, epsilon=0.0), ValueError, "epsilon"),
    (lambda: fluid.optimizer.Adadelta(-1.0), ValueError, "learning_rate"),
    (lambda: fluid.optimizer.Adadelta(0.1, parameter_list="w"), TypeError, "parameter_list"),
    (lambda: fluid.optimizer.Dpsgd(clip=0.0), ValueError, "clip"),
    (lambda: fluid.optimizer.Dpsgd(batch_size=-2.0), ValueError, "batch_size"),
    (lambda: fluid.optimizer.Dpsgd(sigma="x"), TypeError, "sigma"),
    (lambda: fluid.optimizer.ModelAverage(0.0), ValueError, "average_window_rate"),
    (lambda: fluid.optimizer.ModelAverage(0.1, 10, 5), ValueError, "min_average_window"),
    (lambda: fluid.optimizer.ModelAverage(0.1, 2.5, 5), TypeError, "min_average_window"),
    (lambda: fluid.optimizer.ExponentialMovingAverage(1.0), ValueError, "decay"),
    (lambda: fluid.optimizer.ExponentialMovingAverage(0.9, thres_steps=3), TypeError,
     "thres_steps"),
])
def test_bad_arguments_are_refused(make, exc, words):
    with pytest.raises(exc, match=words):
        make()


def test_averaging_without_parameters_and_bad_executor_are_refused():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="no parameter"):
            fluid.optimizer.ModelAverage(0.1)
        with pytest.raises(ValueError, match="no parameter"):
            fluid.optimizer.ExponentialMovingAverage(0.9)

    def build(loss):
        fluid.optimizer.SGD(0.1).minimize(loss)
        return fluid.optimizer.ModelAverage(0.1)

    _, _, avg = _linear(build)
    with pytest.raises(TypeError, match="executor"), avg.apply(object()):
        pass


def test_ema_update_twice_is_refused():
    def build(loss):
        fluid.optimizer.SGD(0.1).minimize(loss)
        ema = fluid.optimizer.ExponentialMovingAverage(0.9)
        ema.update()
        with pytest.raises(ValueError, match="already"):
            ema.update()

    _linear(build)


@pytest.mark.parametrize("op", ["adadelta", "dpsgd"])
def test_sparse_gradients_are_not_implemented(op):
    ins: dict[str, Any] = {"Param": [np.zeros((4, 2))], "LearningRate": [np.array([0.1])],
                           "AvgSquaredGrad": [np.zeros((4, 2))],
                           "AvgSquaredUpdate": [np.zeros((4, 2))],
                           "Grad": [SelectedRows(np.array([1]), np.ones((1, 2)), 4)]}
    with pytest.raises(NotImplementedError, match=op):
        run_op(op, ins, {})


# -- the strict CuPy (and the real one on a GPU) ------------------------------------------------

def _to(cp, ins):
    return {k: [cp.asarray(v) for v in vs] for k, vs in ins.items()}


def _same(cp, dev: dict, host: dict) -> None:
    assert set(dev) == set(host)
    for slot in host:
        for d, h in zip(dev[slot], host[slot], strict=True):
            assert isinstance(d, cp.ndarray) and d.dtype == h.dtype and d.shape == h.shape
            np.testing.assert_allclose(cp.asnumpy(d), h, rtol=1e-9, atol=1e-12, err_msg=slot)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernels_on_the_device_match_numpy(device_xp, dtype):
    cp = device_xp
    rng = np.random.default_rng(4)

    def arr(*shape):
        return rng.uniform(-1, 1, shape).astype(dtype)

    cases = [
        ("adadelta", {"Param": [arr(6, 3)], "Grad": [arr(6, 3)],
                      "AvgSquaredGrad": [np.abs(arr(6, 3))],
                      "AvgSquaredUpdate": [np.abs(arr(6, 3))]}, {"rho": 0.9}),
        ("dpsgd", {"Param": [arr(6, 3)], "Grad": [arr(6, 3)],
                   "LearningRate": [np.array([0.1], dtype)]},
         {"clip": 0.5, "sigma": 0.2, "batch_size": 4.0, "seed": 3}),
    ]
    for op, ins, attrs in cases:
        dev_ins = _to(cp, ins)
        dev = run_op(op, dev_ins, attrs)
        host = run_op(op, {k: [v.copy() for v in vs] for k, vs in ins.items()}, attrs)
        assert dev["ParamOut"][0] is dev_ins["Param"][0]
        _same(cp, dev, host)
    # average_accumulates over a few steps, window restarts included
    state = {"in_sum_1": [np.zeros((2, 2), dtype)], "in_sum_2": [np.zeros((2, 2), dtype)],
             "in_sum_3": [np.zeros((2, 2), dtype)],
             "in_num_accumulates": [np.zeros(1, np.int64)],
             "in_old_num_accumulates": [np.zeros(1, np.int64)],
             "in_num_updates": [np.zeros(1, np.int64)]}
    dev_state = _to(cp, state)
    attrs = {"average_window": 0.5, "min_average_window": 2, "max_average_window": 3}
    for _ in range(5):
        p = arr(2, 2)
        host = run_op("average_accumulates", {"param": [p], **state}, attrs)
        dev = run_op("average_accumulates", {"param": [cp.asarray(p)], **dev_state}, attrs)
        _same(cp, dev, host)


def test_model_average_refuses_a_regularization_no_op_would_apply():
    with pytest.raises(NotImplementedError, match="no op reads it"):
        fluid.optimizer.ModelAverage(0.15, regularization=fluid.regularizer.L2Decay(1e-4))


def _transpiled(make_opt):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4])
        make_opt().minimize(layers.mean(layers.fc(x, 3)))
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, pservers="127.0.0.1:1,127.0.0.1:2", trainers=2,
                startup_program=startup)
    return t


def test_dpsgd_in_pserver_mode_and_adadelta_refused_by_name():
    t = _transpiled(lambda: fluid.optimizer.Dpsgd(0.1))
    ops = [op.type for ep in ("127.0.0.1:1", "127.0.0.1:2")
           for block in t.get_pserver_program(ep).blocks for op in block.ops]
    assert "dpsgd" in ops
    with pytest.raises(NotImplementedError, match="distributed training with adadelta"):
        _transpiled(lambda: fluid.optimizer.Adadelta(0.1))
