"""``WeightNormParamAttr`` (Fluid 1.8's ``param_attr.WeightNormParamAttr`` and
``LayerHelperBase._create_weight_normalize``): the ``g``/``v`` parameters, the ops in the
startup and main programs, values against numpy (Paddle's test_weight_normalization.py
reference) and the gradients of ``g`` and ``v`` against central differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.framework import Parameter
from dask_fluid.initializer import ConstantInitializer, NumpyArrayInitializer
from dask_fluid.param_attr import ParamAttr, WeightNormParamAttr

from .numeric_grad import program_grads_and_numeric

L = fluid.layers


def _norm_except(v: np.ndarray, dim: int | None) -> np.ndarray:
    """||v|| over every dim but ``dim`` (all with None), shaped like g."""
    if dim is None:
        return np.sqrt((v ** 2).sum()).reshape([1] * v.ndim)
    axes = tuple(i for i in range(v.ndim) if i != dim)
    return np.sqrt((v ** 2).sum(axis=axes, keepdims=True))


def _fc_program(dim, init=None, name="wn", size=5, in_features=10):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = L.data("x", shape=[in_features])
        out = L.fc(x, size, param_attr=WeightNormParamAttr(dim=dim, name=name,
                                                           initializer=init),
                   bias_attr=False)
        loss = L.reduce_sum(out)
    return main, startup, x, out, loss


# -- structure ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dim, g_shape", [(None, (1, 1)), (0, (10, 1)), (1, (1, 5))])
def test_parameters_g_and_v(dim, g_shape):
    main, startup, _, out, _ = _fc_program(dim)
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert set(params) == {"wn_g", "wn_v"}  # no parameter "wn" itself
    assert params["wn_g"].shape == g_shape and params["wn_v"].shape == (10, 5)
    assert all(isinstance(p, Parameter) and p.trainable for p in params.values())
    # Fluid's default for weight norm: no model averaging
    assert params["wn_g"].do_model_average is False
    svars = startup.global_block().vars
    assert svars["wn_g"].persistable and svars["wn_v"].persistable
    assert out.shape[-1] == 5


def test_ops_dim_none_as_fluid_builds_them():
    main, startup, _, _, _ = _fc_program(None)
    sops = startup.global_block().ops
    assert [op.type for op in sops[1:]] == ["abs", "pow", "reduce_sum", "pow", "reshape2"]
    assert sops[0].output("Out") == ["wn_v"]  # v initialised first
    assert sops[1].input("X") == ["wn_v"]
    assert sops[2].attrs["factor"] == 2.0 and sops[4].attrs["factor"] == 0.5
    assert sops[3].attrs["reduce_all"] is True
    assert sops[4].output("Out") == ["wn_g"]
    assert sops[5].input("X") == ["wn_g"] and sops[5].output("Out") == ["wn_g"]
    assert sops[5].attrs["shape"] == [1, 1]
    mops = [op.type for op in main.global_block().ops]
    assert mops == ["abs", "pow", "reduce_sum", "pow", "elementwise_div", "elementwise_mul",
                    "mul", "reduce_sum"]
    ops = main.global_block().ops
    assert ops[0].input("X") == ["wn_v"]
    assert ops[4].input("X") == ["wn_g"]
    assert ops[5].input("X") == ["wn_v"] and ops[5].attrs["axis"] == -1
    assert ops[6].input("Y") == ops[5].output("Out")


@pytest.mark.parametrize("dim, flat, reduce_dim", [(0, [10, -1], [1]), (1, [-1, 5], [0])])
def test_ops_first_and_last_dim(dim, flat, reduce_dim):
    main, startup, _, _, _ = _fc_program(dim)
    stypes = [op.type for op in startup.global_block().ops]
    assert stypes[1:] == ["reshape2", "abs", "pow", "reduce_sum", "pow", "reshape2", "reshape2"]
    ops = main.global_block().ops
    assert [op.type for op in ops[:9]] == ["reshape2", "abs", "pow", "reduce_sum", "pow",
                                           "reshape2", "elementwise_div", "reshape2",
                                           "elementwise_mul"]
    assert ops[0].attrs["shape"] == flat
    assert ops[3].attrs["dim"] == reduce_dim and ops[3].attrs["reduce_all"] is False
    assert ops[7].attrs["shape"] == [[10, 5][dim]]  # the scale squeezed for the broadcast
    assert ops[8].attrs["axis"] == dim
    # each reshape2 records its own XShape (Fluid shares one "Xshape"; see layer_helper)
    xshapes = [op.output("XShape")[0] for op in ops if op.type == "reshape2"]
    assert len(set(xshapes)) == len(xshapes)


def test_middle_dim_uses_transpose():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        w = L.create_parameter([3, 4, 2], "float32",
                               attr=WeightNormParamAttr(dim=1, name="m"))
    assert main.global_block().var("m_g").shape == (1, 4, 1)
    types = [op.type for op in main.global_block().ops]
    assert types.count("transpose") == 2
    tr = [op for op in main.global_block().ops if op.type == "transpose"]
    assert tr[0].attrs["axis"] == [1, 0, 2]
    assert w.shape == (3, 4, 2)


def test_default_name_and_registry():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = L.data("x", shape=[4])
        before = len(WeightNormParamAttr.params_with_weight_norm)
        L.fc(x, 3, param_attr=WeightNormParamAttr(dim=0))
    names = sorted(p.name for p in main.global_block().all_parameters())
    assert names == ["fc_0.b_0", "fc_0.w_0_g", "fc_0.w_0_v"]
    assert len(WeightNormParamAttr.params_with_weight_norm) == before + 1
    assert isinstance(WeightNormParamAttr(), ParamAttr)


# -- values ------------------------------------------------------------------------------------

def test_paddle_unit_test_reference():
    """Paddle's test_weight_normalization.py: dim=None, v = 1, loss = sum(fc(x))."""
    main, startup, x, _, loss = _fc_program(None, init=ConstantInitializer(1.0),
                                            name="weight_norm_param")
    with fluid.program_guard(main, startup):
        fluid.append_backward(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    xv = np.random.default_rng(0).random((3, 10)).astype("float32")
    g, v, g_grad = exe.run(main, feed={"x": xv}, scope=scope,
                           fetch_list=["weight_norm_param_g", "weight_norm_param_v",
                                       "weight_norm_param_g@GRAD"])
    v_ref = np.ones((10, 5))
    g_ref = np.linalg.norm(v_ref, axis=None, keepdims=True)
    w = g_ref * v_ref / np.linalg.norm(v_ref, axis=None, keepdims=True)
    out = xv @ w
    g_grad_ref = (np.dot(xv.T, np.ones_like(out))
                  * (v_ref / np.linalg.norm(v_ref, axis=None, keepdims=True))).sum(
                      axis=None, keepdims=True)
    for actual, expect in ((g, g_ref), (v, v_ref), (g_grad, g_grad_ref)):
        np.testing.assert_allclose(np.array(actual), expect, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_startup_g_is_norm_of_v_and_forward(dim):
    rng = np.random.default_rng(1)
    v0 = rng.standard_normal((10, 5)).astype("float32")
    main, startup, x, out, _ = _fc_program(dim, init=NumpyArrayInitializer(v0))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    np.testing.assert_allclose(scope.vars["wn_g"], _norm_except(v0, dim), rtol=1e-6)
    # a new g: the weight is g v / ||v||, not v
    g = (rng.random(scope.vars["wn_g"].shape) + 0.5).astype("float32")
    scope.vars["wn_g"] = g
    xv = rng.standard_normal((4, 10)).astype("float32")
    (res,) = exe.run(main, feed={"x": xv}, fetch_list=[out], scope=scope)
    w = g * v0 / _norm_except(v0, dim)
    np.testing.assert_allclose(res, xv @ w, rtol=1e-5, atol=1e-5)


def test_initial_weight_equals_initializer():
    rng = np.random.default_rng(2)
    v0 = rng.standard_normal((3, 4, 2)).astype("float32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        w = L.create_parameter([3, 4, 2], "float32", attr=WeightNormParamAttr(
            dim=1, name="m", initializer=NumpyArrayInitializer(v0)))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    np.testing.assert_allclose(scope.vars["m_g"], _norm_except(v0, 1), rtol=1e-6)
    (res,) = exe.run(main, fetch_list=[w], scope=scope)
    np.testing.assert_allclose(res, v0, rtol=1e-5, atol=1e-6)


# -- gradients ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [None, 0, 1])
def test_fc_gradients_of_g_and_v(dim):
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((3, 4)).astype("float32")

    def build():
        x = L.data("x", shape=[4])
        out = L.fc(x, 3, param_attr=WeightNormParamAttr(dim=dim, name="wn"), bias_attr=False)
        return L.reduce_sum(L.square(out))

    res = program_grads_and_numeric(build, {"x": xv}, ["wn_g", "wn_v"], eps=1e-5)
    for name, (analytic, numeric) in res.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("dim", [None, 0, 1, 2])
def test_rank3_gradients(dim):
    rng = np.random.default_rng(4)
    r = rng.standard_normal((3, 4, 2)).astype("float32")

    def build():
        w = L.create_parameter([3, 4, 2], "float32", attr=WeightNormParamAttr(dim=dim, name="m"))
        rv = L.assign(r)
        return L.reduce_sum(L.square(w * rv))

    res = program_grads_and_numeric(build, {}, ["m_g", "m_v"], eps=1e-5)
    for name, (analytic, numeric) in res.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-4, err_msg=name)


def test_training_updates_g_and_v():
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((8, 4)).astype("float32")
    yv = rng.standard_normal((8, 1)).astype("float32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = L.data("x", shape=[4])
        y = L.data("y", shape=[1])
        pred = L.fc(x, 1, param_attr=WeightNormParamAttr(dim=1, name="wn"))
        loss = L.mean(L.square(pred - y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    g0, v0 = np.array(scope.vars["wn_g"]), np.array(scope.vars["wn_v"])
    losses = [float(exe.run(main, feed={"x": xv, "y": yv}, fetch_list=[loss],
                            scope=scope)[0][0]) for _ in range(20)]
    assert losses[-1] < losses[0]
    assert not np.allclose(scope.vars["wn_g"], g0)
    assert not np.allclose(scope.vars["wn_v"], v0)


# -- errors ------------------------------------------------------------------------------------

def test_errors():
    with pytest.raises(TypeError, match="dim"):
        WeightNormParamAttr(dim=1.5)
    with pytest.raises(TypeError, match="dim"):
        WeightNormParamAttr(dim=True)
    with pytest.raises(TypeError):  # Paddle 2.0's argument, not Fluid 1.8's
        WeightNormParamAttr(need_clip=True)
    with pytest.raises(TypeError):  # not in Fluid 1.8's signature
        WeightNormParamAttr(gradient_clip=None)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = L.data("x", shape=[4])
        with pytest.raises(ValueError, match=r"dim must be None or in \[0, 2\).*got 2"):
            L.fc(x, 3, param_attr=WeightNormParamAttr(dim=2))
        with pytest.raises(ValueError, match="got -1"):
            L.fc(x, 3, param_attr=WeightNormParamAttr(dim=-1))
