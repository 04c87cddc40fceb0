"""``layers.center_loss`` as Fluid 1.8 builds it: the centers parameter (updated in place by
the op), the ``centerloss_alpha`` variable, shapes and attributes, values over two runs that
show the center update, whole-program gradients against central differences, and errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.initializer import ConstantInitializer, NumpyArrayInitializer

from .numeric_grad import program_grads_and_numeric


def test_center_loss_program_structure():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3])
        y = layers.data("y", [1], dtype="int64")
        loss = layers.center_loss(x, y, num_classes=4, alpha=0.25,
                                  param_attr=ConstantInitializer(0.5))
        rate = layers.fill_constant([1], "float32", 0.5)
        fixed = layers.center_loss(x, y, 2, rate, fluid.ParamAttr(name="ctr"),
                                   update_center=False)
    ops = [o for o in main.global_block().ops if o.type == "center_loss"]
    assert len(ops) == 2
    op = ops[0]
    assert op.input("X") == [x.name] and op.input("Label") == [y.name]
    assert op.input("Centers") == ["center_loss_0.w_0"]
    assert op.output("CentersOut") == ["center_loss_0.w_0"]
    assert op.input("CenterUpdateRate") == ["centerloss_alpha"]
    assert op.output("Loss") == [loss.name]
    assert op.attr("cluster_num") == 4 and op.attr("need_update") is True
    assert ops[1].attr("need_update") is False and ops[1].input("CenterUpdateRate") == [rate.name]
    assert ops[1].input("Centers") == ["ctr"]
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params["center_loss_0.w_0"].shape == (4, 3) and params["ctr"].shape == (2, 3)
    assert params["center_loss_0.w_0"].stop_gradient
    alpha = main.global_block().var("centerloss_alpha")
    assert alpha.persistable and alpha.shape == (1,) and alpha.dtype == "float32"
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init["centerloss_alpha"].type == "fill_constant"
    assert init["centerloss_alpha"].attr("value") == pytest.approx(0.25)
    assert init["center_loss_0.w_0"].attr("value") == pytest.approx(0.5)
    assert init["ctr"].type != "fill_constant"  # Xavier by default
    assert loss.shape == (-1, 1) and fixed.shape == (-1, 1)


def test_center_loss_values_and_update_over_two_runs():
    rng = np.random.default_rng(5)
    centers0 = rng.standard_normal((3, 2)).astype(np.float32)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [2])
        y = layers.data("y", [1], dtype="int64")
        loss = layers.center_loss(x, y, 3, 0.5, fluid.ParamAttr(
            name="centers", initializer=NumpyArrayInitializer(centers0)))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    xv = rng.standard_normal((4, 2)).astype(np.float32)
    yv = np.array([[2], [0], [2], [2]], np.int64)
    centers = centers0.astype(np.float64)
    for _ in range(2):
        got, = exe.run(main, feed={"x": xv, "y": yv}, fetch_list=[loss], scope=scope)
        diff = xv - centers[yv[:, 0]]
        np.testing.assert_allclose(got, 0.5 * (diff ** 2).sum(1, keepdims=True), rtol=1e-5)
        for c in range(3):  # Paddle's rule: count starts at 1
            rows = yv[:, 0] == c
            centers[c] = centers[c] + 0.5 * diff[rows].sum(0) / (1 + rows.sum())
        np.testing.assert_allclose(np.asarray(scope.vars["centers"]), centers, rtol=1e-5)
    assert not np.allclose(centers[[0, 2]], centers0[[0, 2]])
    np.testing.assert_allclose(centers[1], centers0[1])  # class 1 never seen


def test_center_loss_gradient_matches_central_differences():
    rng = np.random.default_rng(6)
    p0 = rng.standard_normal((4, 3))
    weights = rng.standard_normal((4, 1)).astype(np.float32)

    def build():
        p = layers.create_parameter([4, 3], "float32", name="p",
                                    default_initializer=NumpyArrayInitializer(p0))
        y = layers.data("y", [4, 1], dtype="int64", append_batch_size=False)
        w = layers.data("w", [4, 1], append_batch_size=False)
        # update_center=False: the centers must stay put while differences are taken
        loss = layers.center_loss(layers.tanh(p), y, 3, 0.1, fluid.ParamAttr(
            name="c", initializer=NumpyArrayInitializer(rng.standard_normal((3, 3)))),
            update_center=False)
        return layers.reduce_sum(layers.elementwise_mul(loss, w))

    feed = {"y": np.array([[1], [0], [1], [2]], np.int64), "w": weights}
    got = program_grads_and_numeric(build, feed, ["p"])
    analytic, numeric = got["p"]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)
    assert np.abs(analytic).sum() > 0


def test_center_loss_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3])
        y = layers.data("y", [1], dtype="int64")
        with pytest.raises(TypeError, match="alpha must be a float or a Variable, got int"):
            layers.center_loss(x, y, 2, 1, None)
        with pytest.raises(ValueError, match="num_classes must be a positive int, got 0"):
            layers.center_loss(x, y, 0, 0.1, None)
        with pytest.raises(ValueError, match="input must be 2-D"):
            layers.center_loss(layers.data("z", [2, 3]), y, 2, 0.1, None)
        with pytest.raises(ValueError, match="param_attr=False"):
            layers.center_loss(x, y, 2, 0.1, False)
        with pytest.raises(TypeError, match="input"):
            layers.center_loss(np.ones((2, 3)), y, 2, 0.1, None)
