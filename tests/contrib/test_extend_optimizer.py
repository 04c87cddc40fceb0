"""Fluid 1.8's contrib.extend_with_decoupled_weight_decay: the decay ops as Fluid appends
them (scale, elementwise_sub, assign per parameter, between backward and the update ops),
one step of SGD, Momentum and Adam against numpy, the parameter filter, a Variable
coefficient, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.contrib import extend_with_decoupled_weight_decay
from dask_fluid.framework import OP_NAMESCOPE_KEY, OP_ROLE_KEY, OP_ROLE_VAR_KEY, OpRole

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], np.float32)


@pytest.fixture(autouse=True)
def fresh_names():
    with fluid.unique_name.guard():
        yield


def _program(opt_factory):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.fc(x, 2, bias_attr=fluid.ParamAttr(
            initializer=fluid.initializer.Uniform(-1, 1)))
        loss = fluid.layers.reduce_sum(fluid.layers.square(y))
        opt = opt_factory()
        opt.minimize(loss)
    return main, startup, opt


def _grads_np(w, b):
    # loss = sum((X w + b)^2)
    y = X.astype(np.float64) @ w + b
    return X.T.astype(np.float64) @ (2 * y), (2 * y).sum(0)


def _one_step(main, startup):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    before = {p: np.array(scope.vars[p], np.float64) for p in ("fc_0.w_0", "fc_0.b_0")}
    exe.run(main, feed={"x": X}, scope=scope)
    after = {p: np.array(scope.vars[p], np.float64) for p in ("fc_0.w_0", "fc_0.b_0")}
    return before, after


def test_decay_ops_as_fluid_builds_them():
    coeff = 0.1
    AdamW = extend_with_decoupled_weight_decay(fluid.optimizer.Adam)
    main, _, opt = _program(lambda: AdamW(weight_decay=coeff, learning_rate=0.01))
    assert isinstance(opt, fluid.optimizer.Adam)
    ops = main.global_block().ops
    types = [op.type for op in ops]
    first_decay = types.index("scale", types.index("mul_grad"))
    # after the backward ops: (scale), then (elementwise_sub, assign) per parameter, then adam
    decay = ops[first_decay:types.index("adam")]
    assert [op.type for op in decay] == ["scale", "scale", "elementwise_sub", "assign",
                                         "elementwise_sub", "assign"]
    assert types[types.index("adam"):] == ["adam", "adam"]
    decayed = set()
    for scale_op in decay[:2]:
        assert scale_op.attrs["scale"] == pytest.approx(coeff)
        assert scale_op.attrs.get("bias", 0.0) == 0.0
        decayed.add(scale_op.input("X")[0])
    assert decayed == {"fc_0.w_0", "fc_0.b_0"}
    for sub, assign in zip(decay[2::2], decay[3::2], strict=True):
        param = sub.input("X")[0]
        assert assign.input("X") == sub.output("Out") and assign.output("Out") == [param]
    for op in decay:
        assert op.attrs[OP_ROLE_KEY] & int(OpRole.Optimize)
        assert op.attrs[OP_ROLE_VAR_KEY][0] in decayed
        assert "weight decay" in op.attrs[OP_NAMESCOPE_KEY]
    assert str(opt).startswith("Weight Decay, params:")
    assert set(str(opt).split(": ")[1].split(",")) == decayed


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_one_step_against_numpy(kind):
    coeff, lr = 0.05, 0.1
    if kind == "sgd":
        cls = extend_with_decoupled_weight_decay(fluid.optimizer.SGD)
        kwargs = {}
    elif kind == "momentum":
        cls = extend_with_decoupled_weight_decay(fluid.optimizer.Momentum)
        kwargs = {"momentum": 0.9}
    else:
        cls = extend_with_decoupled_weight_decay(fluid.optimizer.Adam)
        kwargs = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}
    main, startup, _ = _program(lambda: cls(weight_decay=coeff, learning_rate=lr, **kwargs))
    before, after = _one_step(main, startup)
    grads = dict(zip(("fc_0.w_0", "fc_0.b_0"), _grads_np(before["fc_0.w_0"],
                                                          before["fc_0.b_0"]), strict=True))
    for name, p0 in before.items():
        g = grads[name]  # the gradient at the parameter before the decay
        p = p0 - coeff * p0
        if kind == "sgd":
            p = p - lr * g
        elif kind == "momentum":
            p = p - lr * g  # v = 0.9 * 0 + g
        else:
            m1, m2 = 0.1 * g, 0.001 * g * g
            lr_t = lr * np.sqrt(1 - 0.999) / (1 - 0.9)
            p = p - lr_t * m1 / (np.sqrt(m2) + 1e-8 * np.sqrt(1 - 0.999))
        np.testing.assert_allclose(after[name], p, rtol=1e-5, atol=1e-6, err_msg=name)


def test_apply_decay_param_fun_selects_parameters():
    SGDW = extend_with_decoupled_weight_decay(fluid.optimizer.SGD)
    main, startup, opt = _program(lambda: SGDW(
        weight_decay=0.5, learning_rate=0.1,
        apply_decay_param_fun=lambda name: name.endswith(".w_0")))
    assert [op.type for op in main.global_block().ops].count("assign") == 1
    before, after = _one_step(main, startup)
    gw, gb = _grads_np(before["fc_0.w_0"], before["fc_0.b_0"])
    np.testing.assert_allclose(after["fc_0.w_0"], 0.5 * before["fc_0.w_0"] - 0.1 * gw,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after["fc_0.b_0"], before["fc_0.b_0"] - 0.1 * gb,
                               rtol=1e-5, atol=1e-6)
    assert str(opt) == "Weight Decay, params: fc_0.w_0"


def test_variable_coefficient_is_an_elementwise_mul():
    def factory():
        coeff = fluid.layers.create_global_var([1], 0.25, "float32", persistable=True,
                                               name="wd")
        return extend_with_decoupled_weight_decay(fluid.optimizer.SGD)(
            weight_decay=coeff, learning_rate=0.1)

    main, startup, _ = _program(factory)
    muls = [op for op in main.global_block().ops if op.type == "elementwise_mul"]
    assert len(muls) == 2 and all(op.input("Y") == ["wd"] for op in muls)
    before, after = _one_step(main, startup)
    gw, _ = _grads_np(before["fc_0.w_0"], before["fc_0.b_0"])
    np.testing.assert_allclose(after["fc_0.w_0"], 0.75 * before["fc_0.w_0"] - 0.1 * gw,
                               rtol=1e-5, atol=1e-6)


def test_zero_weight_decay_adds_no_decay_ops():
    SGDW = extend_with_decoupled_weight_decay(fluid.optimizer.SGD)
    main, _, _ = _program(lambda: SGDW(weight_decay=0.0, learning_rate=0.1))
    assert "assign" not in [op.type for op in main.global_block().ops]


def test_training_with_adamw_lowers_the_loss():
    AdamW = extend_with_decoupled_weight_decay(fluid.optimizer.Adam)
    main, startup, _ = _program(lambda: AdamW(weight_decay=0.01, learning_rate=0.05))
    loss = [v for v in main.global_block().vars.values() if v.name.startswith("reduce_sum")][0]
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"x": X}, fetch_list=[loss], scope=scope)[0].sum())
              for _ in range(30)]
    assert losses[-1] < 0.2 * losses[0]


def test_errors():
    with pytest.raises(TypeError, match="derived class of Optimizer"):
        extend_with_decoupled_weight_decay(object)
    with pytest.raises(TypeError, match="derived class of Optimizer"):
        extend_with_decoupled_weight_decay(fluid.optimizer.SGD(learning_rate=0.1))
    SGDW = extend_with_decoupled_weight_decay(fluid.optimizer.SGD)
    with pytest.raises(TypeError, match="should be float or Variable, got int"):
        SGDW(weight_decay=1, learning_rate=0.1)
    with pytest.raises(TypeError, match="apply_decay_param_fun must be callable"):
        SGDW(weight_decay=0.1, apply_decay_param_fun="w", learning_rate=0.1)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        opt = SGDW(weight_decay=0.1, learning_rate=0.1)
        opt.minimize(loss)
        with pytest.raises(ValueError, match="already decayed"):
            opt.minimize(loss)
        coeff64 = fluid.layers.create_global_var([1], 0.1, "float64", persistable=True)
        with pytest.raises(TypeError, match="not consistent"):
            SGDW(weight_decay=coeff64, learning_rate=0.1).minimize(loss)
