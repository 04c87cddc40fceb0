"""Fluid 1.8's extra activation layers (layers/ops.py: logsigmoid ... cumsum) and comparison
layers (control_flow.py: less_equal, greater_than, greater_equal, not_equal) as Fluid builds
them: op types, slots, recorded attributes, static shapes, values through the executor, errors,
and a whole program's gradients through the differentiable ones against central differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric

UNARY = ["logsigmoid", "tanh_shrink", "rsqrt", "ceil", "round", "reciprocal", "sin", "acos",
         "asin", "atan", "cosh", "sinh", "erf"]


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def _ops(main, type_):
    return [o for o in main.global_block().ops if o.type == type_]


@pytest.mark.parametrize("op", UNARY)
def test_unary_layer_builds_one_op(op):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        y = getattr(layers, op)(x)
        named = getattr(layers, op)(x, name="mine")
    (o, o2) = _ops(main, op)
    assert o.input("X") == [x.name] and o.output("Out") == [y.name]
    assert o2.output("Out") == [named.name]
    assert y.shape == (-1, 3, 4) and y.dtype == x.dtype
    assert op in fluid.layers.__all__


def _feed(op):
    rng = np.random.default_rng(11)
    if op in ("acos", "asin"):
        return rng.uniform(-0.95, 0.95, (2, 3, 4))
    if op in ("rsqrt", "reciprocal"):
        return rng.uniform(0.2, 3.0, (2, 3, 4))
    return rng.standard_normal((2, 3, 4)) * 2


NUMPY = {"logsigmoid": lambda v: -np.log1p(np.exp(-v)), "tanh_shrink": lambda v: v - np.tanh(v),
         "rsqrt": lambda v: v ** -0.5, "ceil": np.ceil,
         "round": lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5), "reciprocal": lambda v: 1 / v,
         "sin": np.sin, "acos": np.arccos, "asin": np.arcsin, "atan": np.arctan,
         "cosh": np.cosh, "sinh": np.sinh,
         "erf": np.vectorize(math.erf)}


@pytest.mark.parametrize("op", UNARY)
def test_unary_layer_values(op):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4], dtype="float64")
        y = getattr(layers, op)(x)
    xv = _feed(op)
    (got,) = _run(main, startup, {"x": xv}, [y])
    np.testing.assert_allclose(got, NUMPY[op](xv), rtol=1e-12, atol=1e-14)


def test_attr_layers_record_only_given_attributes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [5])
        s0, s1 = layers.softshrink(x), layers.softshrink(x, alpha=0.25)
        h0, h1 = layers.hard_shrink(x), layers.hard_shrink(x, threshold=2)
        t0, t1 = layers.thresholded_relu(x), layers.thresholded_relu(x, threshold=0.5)
        c0, c1 = layers.cumsum(x), layers.cumsum(x, axis=0, exclusive=True, reverse=False)
    for op, (a, b, default) in {"softshrink": ("lambda", 0.25, 0.5),
                                "hard_shrink": ("threshold", 2.0, 0.5),
                                "thresholded_relu": ("threshold", 0.5, 1.0)}.items():
        o0, o1 = _ops(main, op)
        assert o0.attr(a) == default  # None: the op's default applies, as Fluid's layer
        assert o1.attr(a) == b and isinstance(o1.attr(a), float)
    o0, o1 = _ops(main, "cumsum")
    assert (o0.attr("axis"), o0.attr("exclusive"), o0.attr("reverse")) == (-1, False, False)
    assert (o1.attr("axis"), o1.attr("exclusive"), o1.attr("reverse")) == (0, True, False)
    for v in (s0, s1, h0, h1, t0, t1, c0, c1):
        assert v.shape == (-1, 5)


def test_attr_layer_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [6], dtype="float64")
        outs = [layers.softshrink(x), layers.softshrink(x, alpha=1.0), layers.hard_shrink(x),
                layers.hard_shrink(x, threshold=1.0), layers.thresholded_relu(x),
                layers.thresholded_relu(x, threshold=-0.5), layers.cumsum(x),
                layers.cumsum(x, axis=0), layers.cumsum(x, exclusive=True, reverse=True)]
    xv = np.array([[-2.0, -0.7, -0.2, 0.3, 0.8, 1.5], [0.1, 2.5, -1.2, 0.6, -0.4, 1.1]])
    got = _run(main, startup, {"x": xv}, outs)

    def soft(lam):
        return np.where(xv > lam, xv - lam, np.where(xv < -lam, xv + lam, 0.0))

    expect = [soft(0.5), soft(1.0), np.where(np.abs(xv) > 0.5, xv, 0),
              np.where(np.abs(xv) > 1.0, xv, 0), np.where(xv > 1.0, xv, 0),
              np.where(xv > -0.5, xv, 0), np.cumsum(xv, 1), np.cumsum(xv, 0),
              np.cumsum(xv[:, ::-1], 1)[:, ::-1] - xv]
    for i, (g, e) in enumerate(zip(got, expect, strict=True)):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12, err_msg=str(i))


def test_activation_layer_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3, 4])
        with pytest.raises(TypeError, match="'x' in logsigmoid must be Variable"):
            layers.logsigmoid(np.ones(3))
        with pytest.raises(TypeError, match="softshrink: alpha must be a float or None, got str"):
            layers.softshrink(x, alpha="0.5")
        with pytest.raises(TypeError, match="hard_shrink: threshold must be a float"):
            layers.hard_shrink(x, threshold=[1.0])
        with pytest.raises(TypeError, match="cumsum: axis must be an int or None, got float"):
            layers.cumsum(x, axis=1.0)
        with pytest.raises(ValueError, match=r"cumsum: axis must be in \[-3, 3\).*got 3"):
            layers.cumsum(x, axis=3)


COMPARE = {"less_equal": np.less_equal, "greater_than": np.greater,
           "greater_equal": np.greater_equal, "not_equal": np.not_equal}


@pytest.mark.parametrize("op", sorted(COMPARE))
def test_compare_layers(op):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4], dtype="float64")
        y = layers.data("y", [4], dtype="float64")
        out = getattr(layers, op)(x, y)
        given = layers.create_tensor("bool")
        same = getattr(layers, op)(x, y, cond=given)
    o = _ops(main, op)[0]
    assert o.input("X") == [x.name] and o.input("Y") == [y.name] and o.output("Out") == [out.name]
    assert out.dtype in ("bool", np.bool_) or str(out.dtype) == "bool"
    assert out.stop_gradient and out.shape == (-1, 4)
    assert same is given and _ops(main, op)[1].output("Out") == [given.name]
    rng = np.random.default_rng(2)
    xv = rng.integers(0, 3, (3, 4)).astype(np.float64)
    yv = rng.integers(0, 3, (3, 4)).astype(np.float64)
    got, got2 = _run(main, startup, {"x": xv, "y": yv}, [out, same])
    np.testing.assert_array_equal(got, COMPARE[op](xv, yv))
    np.testing.assert_array_equal(got2, COMPARE[op](xv, yv))
    assert got.dtype == np.bool_


def test_compare_layer_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [4])
        with pytest.raises(TypeError, match="greater_equal: y must be a Variable"):
            layers.greater_equal(x, 1.0)
        with pytest.raises(TypeError, match="not_equal: x must be a Variable"):
            layers.not_equal([1.0], x)


def test_whole_program_gradient_through_activations():
    rng = np.random.default_rng(9)
    xv = rng.uniform(0.2, 0.8, (2, 5))

    def build():
        x = layers.data("x", [5], dtype="float64")
        w = layers.create_parameter([5], "float64", name="w",
                                    default_initializer=fluid.initializer.Uniform(0.3, 0.9))
        h = layers.elementwise_mul(x, w)  # in (0.06, 0.72): inside every domain below
        parts = [layers.logsigmoid(h), layers.tanh_shrink(h), layers.rsqrt(h),
                 layers.reciprocal(h), layers.sin(h), layers.acos(h), layers.asin(h),
                 layers.atan(h), layers.cosh(h), layers.sinh(h), layers.erf(h),
                 layers.softshrink(h, alpha=0.02), layers.hard_shrink(h, threshold=0.01),
                 layers.thresholded_relu(h, threshold=0.0),
                 layers.cumsum(h, axis=1, reverse=True), layers.cumsum(h, exclusive=True),
                 layers.ceil(h), layers.round(h)]
        total = parts[0]
        for i, p in enumerate(parts[1:]):
            total = layers.elementwise_add(total, layers.scale(p, scale=1.0 + 0.1 * i))
        return layers.reduce_sum(layers.elementwise_mul(total, total))

    got = program_grads_and_numeric(build, {"x": xv}, ["w"])
    analytic, numeric = got["w"]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)
    assert np.abs(analytic).sum() > 0
