"""Dygraph learning-rate decays, save_dygraph/load_dygraph and the optimizers' dygraph state
(Fluid 1.8's ``fluid.dygraph.*Decay``, ``checkpoint.py`` and ``Optimizer.state_dict``)."""

from __future__ import annotations

import math
import os
import pickle

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import dygraph
from dask_fluid.dygraph import learning_rate_scheduler as lrs
from dask_fluid.dygraph.checkpoint import load_dygraph, save_dygraph

N = 12


@pytest.fixture(autouse=True)
def fresh_names():
    with fluid.unique_name.guard():
        yield


def dygraph_rates(make, n=N):
    with dygraph.guard():
        decay = make()
        return [float(decay().numpy()[0]) for _ in range(n)]


def static_rates(build, n=N):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = build()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    return [float(np.asarray(exe.run(main, fetch_list=[lr], scope=scope)[0]).reshape(-1)[0])
            for _ in range(n)]


def f32(values):
    return np.asarray(values, dtype=np.float64).astype(np.float32).astype(np.float64)


# -- the 1.8 formulas, written out in numpy ------------------------------------------------------
def np_ratio(steps, decay_steps, staircase):
    r = steps / decay_steps
    return np.floor(r) if staircase else r


STEPS0 = np.arange(N, dtype=np.float64)          # begin=0
STEPS1 = np.arange(1, N + 1, dtype=np.float64)   # begin=1

CASES = {
    "exponential": (lambda: lrs.ExponentialDecay(0.1, 3, 0.5),
                    0.1 * 0.5 ** np_ratio(STEPS0, 3, False),
                    lambda: fluid.layers.exponential_decay(0.1, 3, 0.5)),
    "exponential_stair": (lambda: lrs.ExponentialDecay(0.1, 3, 0.5, staircase=True),
                          0.1 * 0.5 ** np_ratio(STEPS0, 3, True),
                          lambda: fluid.layers.exponential_decay(0.1, 3, 0.5, True)),
    "natural_exp": (lambda: lrs.NaturalExpDecay(0.2, 4, 0.3),
                    0.2 * np.exp(-0.3 * np_ratio(STEPS0, 4, False)),
                    lambda: fluid.layers.natural_exp_decay(0.2, 4, 0.3)),
    "natural_exp_stair": (lambda: lrs.NaturalExpDecay(0.2, 4, 0.3, staircase=True),
                          0.2 * np.exp(-0.3 * np_ratio(STEPS0, 4, True)),
                          lambda: fluid.layers.natural_exp_decay(0.2, 4, 0.3, True)),
    "inverse_time": (lambda: lrs.InverseTimeDecay(0.5, 2, 0.7),
                     0.5 / (1 + 0.7 * np_ratio(STEPS0, 2, False)),
                     lambda: fluid.layers.inverse_time_decay(0.5, 2, 0.7)),
    "inverse_time_stair": (lambda: lrs.InverseTimeDecay(0.5, 2, 0.7, staircase=True),
                           0.5 / (1 + 0.7 * np_ratio(STEPS0, 2, True)),
                           lambda: fluid.layers.inverse_time_decay(0.5, 2, 0.7, True)),
    "polynomial": (lambda: lrs.PolynomialDecay(0.3, 7, 0.01, power=2.0),
                   (0.3 - 0.01) * (1 - np.minimum(STEPS0, 7) / 7) ** 2 + 0.01,
                   lambda: fluid.layers.polynomial_decay(0.3, 7, 0.01, power=2.0)),
    "polynomial_cycle": (lambda: lrs.PolynomialDecay(0.3, 5, 0.01, power=1.5, cycle=True),
                         (0.3 - 0.01) * (1 - STEPS0 / (5 * np.maximum(np.ceil(STEPS0 / 5), 1)))
                         ** 1.5 + 0.01,
                         lambda: fluid.layers.polynomial_decay(0.3, 5, 0.01, power=1.5,
                                                               cycle=True)),
    "cosine": (lambda: lrs.CosineDecay(0.4, 3, 5),
               0.4 * 0.5 * (np.cos(np.floor(STEPS0 / 3) * np.pi / 5) + 1),
               lambda: fluid.layers.cosine_decay(0.4, 3, 5)),
    "noam": (lambda: lrs.NoamDecay(64, 5, learning_rate=2.0),
             2.0 * 64 ** -0.5 * np.minimum(STEPS1 ** -0.5, 5 ** -1.5 * STEPS1),
             lambda: fluid.layers.noam_decay(64, 5, learning_rate=2.0)),
    "piecewise": (lambda: lrs.PiecewiseDecay([3, 7], [1.0, 0.5, 0.1], 0),
                  np.where(STEPS0 < 3, 1.0, np.where(STEPS0 < 7, 0.5, 0.1)),
                  lambda: fluid.layers.piecewise_decay([3, 7], [1.0, 0.5, 0.1])),
    "piecewise_begin": (lambda: lrs.PiecewiseDecay([3, 7], [1.0, 0.5, 0.1], 2, step=2),
                        np.where(2 + 2 * STEPS0 < 3, 1.0,
                                 np.where(2 + 2 * STEPS0 < 7, 0.5, 0.1)),
                        None),
    "warmup": (lambda: lrs.LinearLrWarmup(0.3, 4, 0.0, 0.2),
               np.where(STEPS1 < 4, 0.2 / 4 * STEPS1, 0.3),
               None),
    "warmup_of_decay": (lambda: lrs.LinearLrWarmup(lrs.ExponentialDecay(0.3, 2, 0.5), 4,
                                                   0.1, 0.2, begin=0),
                        # 1.8: the wrapped decay is called (and advances) every step
                        np.where(STEPS0 < 4, 0.1 + 0.1 / 4 * STEPS0,
                                 0.3 * 0.5 ** (STEPS0 / 2)),
                        None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_decay_matches_the_18_formula(case):
    make, expected, _ = CASES[case]
    got = dygraph_rates(make)
    np.testing.assert_allclose(got, f32(expected), rtol=1e-6, atol=0)


@pytest.mark.parametrize("case", sorted(c for c in CASES if CASES[c][2] is not None))
def test_decay_matches_the_static_layer(case):
    make, _, build = CASES[case]
    np.testing.assert_allclose(dygraph_rates(make), static_rates(build), rtol=2e-6, atol=1e-9)


def test_decay_returns_a_shape1_variable_of_its_dtype_and_advances_by_step():
    with dygraph.guard():
        decay = lrs.ExponentialDecay(1.0, 1, 0.5, begin=2, step=3, dtype="float64")
        lr = decay()
        assert isinstance(lr, dygraph.VarBase)
        assert lr.shape == [1] and lr.dtype == "float64"
        assert lr.numpy()[0] == 0.25
        assert decay.step_num == 5
        assert decay.step().numpy()[0] == 0.5 ** 5  # step() does not advance
        assert decay.step_num == 5


def test_decay_accepts_a_variable_learning_rate():
    with dygraph.guard():
        base = dygraph.to_variable(np.array([0.8], dtype="float32"))
        decay = lrs.InverseTimeDecay(base, 1, 1.0)
        assert [float(decay()) for _ in range(3)] == pytest.approx([0.8, 0.4, 0.8 / 3])


def test_epoch_decays():
    with dygraph.guard():
        step = lrs.StepDecay(0.5, step_size=3)
        multi = lrs.MultiStepDecay(0.5, milestones=[3, 5], decay_rate=0.2)
        lam = lrs.LambdaDecay(0.5, lr_lambda=lambda e: 0.95 ** e)
        got = {"step": [], "multi": [], "lam": []}
        for _ in range(8):
            for name, sched in (("step", step), ("multi", multi), ("lam", lam)):
                a, b = sched(), sched()  # calls within an epoch change nothing
                assert float(a) == float(b)
                got[name].append(float(a))
                sched.epoch()
        epochs = np.arange(8)
        np.testing.assert_allclose(got["step"], f32(0.5 * 0.1 ** (epochs // 3)), rtol=1e-6)
        np.testing.assert_allclose(got["multi"], f32(0.5 * 0.2 ** np.searchsorted(
            [3, 5], epochs, side="right")), rtol=1e-6)
        np.testing.assert_allclose(got["lam"], f32(0.5 * 0.95 ** epochs), rtol=1e-6)
        step.epoch(7)
        assert float(step()) == pytest.approx(0.5 * 0.1 ** 2)


def test_reduce_lr_on_plateau():
    losses = [5, 4, 4, 4, 4, 3.99999] + [4] * 12
    with dygraph.guard():
        sched = lrs.ReduceLROnPlateau(1.0, decay_rate=0.5, patience=2, cooldown=1,
                                      min_lr=0.2)
        got = []
        for loss in losses:
            sched.step(dygraph.to_variable(np.array([loss], dtype="float32")))
            got.append(float(sched()))
    # numpy model of 1.8's rule: rel threshold 1e-4, min mode
    lr, best, bad, cool, expected = 1.0, None, 0, 0, []
    for loss in f32(losses):
        if cool > 0:
            cool -= 1
        else:
            if best is None or loss < best - best * 1e-4:
                best, bad = loss, 0
            else:
                bad += 1
            if bad > 2:
                cool, bad = 1, 0
                new = max(lr * 0.5, 0.2)
                if lr - new > 1e-8:
                    lr = new
        expected.append(lr)
    np.testing.assert_allclose(got, f32(expected), rtol=1e-6)
    assert expected[-1] == 0.2 and expected[0] == 1.0  # both a reduction and the floor


def test_decay_state_dict_round_trip():
    with dygraph.guard():
        decay = lrs.NoamDecay(16, 4)
        for _ in range(5):
            decay()
        state = decay.state_dict()
        assert state == {"step_num": 6}
        other = lrs.NoamDecay(16, 4)
        other.set_dict(state)
        assert float(other()) == float(decay())
        with pytest.raises(RuntimeError, match="step_num"):
            other.set_dict({})
        with pytest.warns(UserWarning, match="unused"):
            other.set_dict({"step_num": 1, "extra": 2})

        plateau = lrs.ReduceLROnPlateau(1.0, patience=0)
        for loss in (1.0, 2.0):
            plateau.step(dygraph.to_variable(np.array([loss], dtype="float32")))
        state = plateau.state_dict()
        assert state["learning_rate"] == pytest.approx(0.1) and state["best_loss"] == 1.0
        again = lrs.ReduceLROnPlateau(1.0, patience=0)
        again.set_dict(state)
        assert float(again()) == pytest.approx(0.1)

        step = lrs.StepDecay(0.5, 2)
        for _ in range(3):
            step.epoch()
        assert step.state_dict() == {"epoch_num": 3, "learning_rate": pytest.approx(0.05)}


@pytest.mark.parametrize("make, error", [
    (lambda: lrs.ExponentialDecay(0.1, 0, 0.5), ValueError),
    (lambda: lrs.NaturalExpDecay("0.1", 2, 0.5), TypeError),
    (lambda: lrs.InverseTimeDecay(0.1, 2, 0.5, dtype="int32"), ValueError),
    (lambda: lrs.PolynomialDecay(0.1, -1), ValueError),
    (lambda: lrs.CosineDecay(0.1, 3, 0), ValueError),
    (lambda: lrs.NoamDecay(16, 4, begin=0), ValueError),
    (lambda: lrs.PiecewiseDecay([1, 2], [1.0, 0.5], 0), ValueError),
    (lambda: lrs.PiecewiseDecay([3, 1], [1.0, 0.5, 0.1], 0), ValueError),
    (lambda: lrs.LinearLrWarmup("x", 3, 0.0, 0.1), TypeError),
    (lambda: lrs.LinearLrWarmup(0.1, 3, 0.2, 0.1), ValueError),
    (lambda: lrs.ReduceLROnPlateau(0.1, mode="mean"), ValueError),
    (lambda: lrs.ReduceLROnPlateau(0.1, decay_rate=1.5), ValueError),
    (lambda: lrs.ReduceLROnPlateau(0.1, threshold_mode="pct"), ValueError),
    (lambda: lrs.ReduceLROnPlateau("0.1"), TypeError),
    (lambda: lrs.StepDecay(0.1, 2.5), TypeError),
    (lambda: lrs.StepDecay(0.1, 2, decay_rate=1.0), ValueError),
    (lambda: lrs.StepDecay(-0.1, 2), ValueError),
    (lambda: lrs.MultiStepDecay(0.1, [3, 3]), ValueError),
    (lambda: lrs.MultiStepDecay(0.1, 3), TypeError),
    (lambda: lrs.LambdaDecay(0.1, 0.95), TypeError),
])
def test_decay_argument_errors(make, error):
    with pytest.raises(error):
        make()


def test_decay_call_errors():
    decay = lrs.ExponentialDecay(0.1, 2, 0.5)
    with pytest.raises(RuntimeError, match="guard"):
        decay()  # outside dygraph mode
    with dygraph.guard():
        plateau = lrs.ReduceLROnPlateau(0.1)
        with pytest.raises(TypeError, match="Variable"):
            plateau.step(1.0)
        with pytest.raises(ValueError, match="one value"):
            plateau.step(dygraph.to_variable(np.ones(2, dtype="float32")))
    with pytest.raises(NotImplementedError, match="LearningRateDecay"):
        lrs.LearningRateDecay().step()


# -- the optimizers with a decay ---------------------------------------------------------------
class Net(dygraph.Layer):
    def __init__(self):
        super().__init__()
        self.w = self.create_parameter([4, 3])
        self.b = self.create_parameter([3], is_bias=True)

    def forward(self, x):
        return fluid.layers.elementwise_add(fluid.layers.matmul(x, self.w), self.b)


X = np.random.RandomState(0).rand(8, 4).astype("float32")


def train_step(model, opt):
    out = model(dygraph.to_variable(X))
    loss = fluid.layers.mean(fluid.layers.square(out))
    loss.backward()
    opt.minimize(loss)
    model.clear_gradients()


def test_sgd_steps_by_each_rate_of_the_decay():
    with dygraph.guard():
        w = dygraph.Layer()
        w.p = w.create_parameter([3], default_initializer=fluid.initializer.Constant(1.0))
        c = np.array([1.0, -2.0, 0.5], dtype="float32")
        opt = fluid.optimizer.SGD(lrs.PiecewiseDecay([2, 4], [0.1, 0.05, 0.01], 0),
                                  parameter_list=w.parameters())
        rates = []
        for _ in range(6):
            before = w.p.numpy()
            loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(
                w.p, dygraph.to_variable(c)))
            loss.backward()
            opt.minimize(loss)
            w.clear_gradients()
            rates.append(((before - w.p.numpy()) / c).mean())
            assert opt.current_step_lr() == pytest.approx(rates[-1], rel=1e-5)
    np.testing.assert_allclose(rates, [0.1, 0.1, 0.05, 0.05, 0.01, 0.01], rtol=1e-5)


@pytest.mark.parametrize("make_opt", [
    lambda lr, ps: fluid.optimizer.Adam(lr, parameter_list=ps),
    lambda lr, ps: fluid.optimizer.Momentum(lr, 0.9, parameter_list=ps),
], ids=["adam", "momentum"])
def test_decay_equals_setting_each_rate_by_hand(make_opt):
    """A decay gives the same training as set_lr(rate of that step) before each step."""
    def run(use_decay):
        with dygraph.guard():
            fluid.default_main_program().random_seed = 4
            model = Net()
            decay = lrs.CosineDecay(0.1, 2, 4)
            opt = make_opt(decay if use_decay else 0.1, model.parameters())
            for i in range(5):
                if not use_decay:
                    opt.set_lr(float(f32(0.05 * (math.cos(math.floor(i / 2) * math.pi / 4)
                                                 + 1))))
                train_step(model, opt)
                assert opt.current_step_lr() == pytest.approx(
                    0.05 * (math.cos(math.floor(i / 2) * math.pi / 4) + 1), rel=1e-6)
            return [p.numpy() for p in model.parameters()]
    for a, b in zip(run(True), run(False), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_epoch_decay_with_optimizer():
    with dygraph.guard():
        model = Net()
        sched = lrs.StepDecay(0.5, step_size=2)
        opt = fluid.optimizer.SGD(sched, parameter_list=model.parameters())
        assert opt.current_step_lr() == 0.5  # before any minimize
        seen = []
        for _ in range(5):
            train_step(model, opt)
            seen.append(opt.current_step_lr())
            sched.epoch()
        np.testing.assert_allclose(seen, f32([0.5, 0.5, 0.05, 0.05, 0.005]), rtol=1e-6)
        assert "global_step" not in opt.state_dict()  # an epoch decay has no step counter
        assert opt.state_dict()["LR_Scheduler"]["epoch_num"] == 5


def test_current_step_lr_and_set_lr():
    with dygraph.guard():
        model = Net()
        opt = fluid.optimizer.SGD(0.25, parameter_list=model.parameters())
        assert opt.current_step_lr() == 0.25
        train_step(model, opt)
        opt.set_lr(0.125)
        assert opt.current_step_lr() == 0.125
        before = model.b.numpy()
        out = model(dygraph.to_variable(X))
        loss = fluid.layers.mean(out)
        loss.backward()
        grad = model.b.gradient()
        opt.minimize(loss)
        np.testing.assert_allclose(model.b.numpy(), before - 0.125 * grad, rtol=1e-6)
        model.clear_gradients()
        var = dygraph.to_variable(np.array([0.5], dtype="float32"))
        opt.set_lr(var)
        assert opt.current_step_lr() == 0.5
        with pytest.raises(TypeError, match="float, Variable"):
            opt.set_lr(1)
        with pytest.raises(ValueError, match="shape"):
            opt.set_lr(dygraph.to_variable(np.ones(2, dtype="float32")))
        decayed = fluid.optimizer.SGD(lrs.ExponentialDecay(0.1, 2, 0.5),
                                      parameter_list=model.parameters())
        with pytest.raises(RuntimeError, match="LearningRateDecay"):
            decayed.set_lr(0.1)
        assert decayed.current_step_lr() == pytest.approx(0.1)
        assert decayed._learning_rate.step_num == 0  # asking did not advance the decay


def test_optimizer_state_methods_are_dygraph_only():
    opt = fluid.optimizer.SGD(0.1)
    for call in (opt.state_dict, lambda: opt.set_dict({}), opt.current_step_lr,
                 lambda: opt.set_lr(0.2)):
        with pytest.raises(RuntimeError, match="dygraph"):
            call()


# -- checkpoints -------------------------------------------------------------------------------
def train(steps, load_from=None, save_to=None, seed=7, restore_opt=True):
    with dygraph.guard():
        fluid.default_main_program().random_seed = seed
        model = Net()
        opt = fluid.optimizer.Adam(lrs.ExponentialDecay(0.05, 2, 0.7),
                                   parameter_list=model.parameters())
        if load_from is not None:
            params, opt_state = load_dygraph(load_from)
            model.set_dict(params)
            if restore_opt:
                opt.set_dict(opt_state)
        for _ in range(steps):
            train_step(model, opt)
        if save_to is not None:
            save_dygraph(model.state_dict(), save_to)
            save_dygraph(opt.state_dict(), save_to)
        return {k: v.numpy() for k, v in model.state_dict().items()}, opt.current_step_lr()


def test_resumed_training_equals_uninterrupted(tmp_path):
    whole, whole_lr = train(6)
    path = str(tmp_path / "ckpt" / "model")
    train(3, save_to=path)
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["model.pdopt", "model.pdparams"]
    resumed, resumed_lr = train(3, load_from=path, seed=123)  # other initial values
    assert resumed_lr == whole_lr
    for key in whole:
        np.testing.assert_allclose(resumed[key], whole[key], rtol=1e-6, atol=1e-7)
    # the optimizer's state matters: without it the result differs
    cold, cold_lr = train(3, load_from=path, seed=123, restore_opt=False)
    assert cold_lr != whole_lr
    assert not np.allclose(cold["w"], whole["w"], rtol=1e-6, atol=1e-7)


def test_set_dict_restores_existing_accumulators(tmp_path):
    with dygraph.guard():
        model = Net()
        opt = fluid.optimizer.Momentum(0.1, 0.9, parameter_list=model.parameters())
        train_step(model, opt)
        state = {k: v.numpy() for k, v in opt.state_dict().items()}
        train_step(model, opt)
        opt.set_dict(state)
        for k, v in opt.state_dict().items():
            np.testing.assert_array_equal(v.numpy(), state[k])
        bad = dict(state)
        bad.pop(next(iter(bad)))
        with pytest.raises(RuntimeError, match="not found"):
            opt.set_dict(bad)
        wrong = {k: np.zeros([2], "float32") for k in state}
        with pytest.raises(ValueError, match="shape"):
            opt.set_dict(wrong)
        with pytest.raises(TypeError, match="dict"):
            opt.set_dict([1])
        decayed = fluid.optimizer.SGD(lrs.NoamDecay(8, 2), parameter_list=model.parameters())
        with pytest.raises(RuntimeError, match="LR_Scheduler"):
            decayed.set_dict({})
        with pytest.raises(RuntimeError, match="global_step"):
            decayed.set_dict({"LR_Scheduler": {"step_num": 3}})


def test_files_as_18_writes_them(tmp_path):
    with dygraph.guard():
        model = Net()
        opt = fluid.optimizer.Adam(lrs.NoamDecay(8, 2), parameter_list=model.parameters())
        train_step(model, opt)
        train_step(model, opt)
        save_dygraph(model.state_dict(), str(tmp_path / "m"))
        save_dygraph(opt.state_dict(), str(tmp_path / "m"))
        with open(tmp_path / "m.pdparams", "rb") as f:
            raw = pickle.load(f)  # a plain pickle anyone can read, as 1.8's
        assert raw["StructuredToParameterName@@"] == {"w": model.w.name, "b": model.b.name}
        np.testing.assert_array_equal(raw["w"], model.w.numpy())
        assert isinstance(raw["b"], np.ndarray)
        params, opt_state = load_dygraph(str(tmp_path / "m"))
        assert set(params) == {"w", "b"}
        kept, _ = load_dygraph(str(tmp_path / "m.pdparams"), keep_name_table=True)
        assert "StructuredToParameterName@@" in kept
        assert opt_state["LR_Scheduler"] == {"step_num": 3}
        np.testing.assert_array_equal(opt_state["global_step"], np.array([3], "int32"))
        acc = f"{model.w.name}_moment1_0"
        assert opt_state["StructuredToParameterName@@"][acc] == acc
        np.testing.assert_array_equal(opt_state[acc], opt._accumulators["moment1"][
            model.w.name].numpy())
        os.remove(tmp_path / "m.pdopt")
        assert load_dygraph(str(tmp_path / "m"))[1] is None


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("suffix", [".pdparams", ".pdopt"])
def test_malicious_pickle_is_refused_without_running(tmp_path, suffix):
    marker = tmp_path / "pwned"
    with open(tmp_path / f"m{suffix}", "wb") as f:
        pickle.dump({"w": np.ones(2), "x": _Evil(marker)}, f, protocol=2)
    with dygraph.guard(), pytest.raises(pickle.UnpicklingError, match="system"):
        load_dygraph(str(tmp_path / "m"))
    assert not marker.exists()


def test_checkpoint_errors(tmp_path):
    with pytest.raises(RuntimeError, match="dygraph"):
        save_dygraph({"a": np.ones(1)}, str(tmp_path / "x"))
    with dygraph.guard():
        model = Net()
        with pytest.raises(ValueError, match="empty"):
            save_dygraph({}, str(tmp_path / "x"))
        with pytest.raises(ValueError, match="filename"):
            save_dygraph(model.state_dict(), str(tmp_path) + os.sep)
        (tmp_path / "d.pdparams").mkdir()
        with pytest.raises(IsADirectoryError):
            save_dygraph(model.state_dict(), str(tmp_path / "d"))
        with pytest.raises(IsADirectoryError):
            load_dygraph(str(tmp_path / "d"))
        with pytest.raises(IsADirectoryError, match="prefix"):
            load_dygraph(str(tmp_path))
        with pytest.raises(FileNotFoundError):
            load_dygraph(str(tmp_path / "missing"))
        with pytest.raises(TypeError, match="model_path"):
            save_dygraph(model.state_dict(), 3)
        with pytest.raises(TypeError, match="function"):
            save_dygraph({"f": len}, str(tmp_path / "y"))
        (tmp_path / "t.pdparams").write_bytes(b"\x80\x02}q\x00")  # truncated pickle
        with pytest.raises(ValueError, match="truncated"):
            load_dygraph(str(tmp_path / "t"))
        (tmp_path / "l.pdparams").write_bytes(pickle.dumps([1, 2], protocol=2))
        with pytest.raises(ValueError, match="dict"):
            load_dygraph(str(tmp_path / "l"))
