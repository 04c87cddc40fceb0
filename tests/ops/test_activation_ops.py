"""Forward kernels of Fluid 1.8's extra activations (activation_op.h, erf_op, cumsum_op) and of
the comparisons less_equal / greater_than / greater_equal / not_equal, each against a scalar
reference written element by element with the ``math`` module; and their errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_fluid.ops import registry

from . import run_op


def _scalar_ref(f, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    for i, v in np.ndenumerate(x):
        out[i] = f(float(v))
    return out


def _logsigmoid(v):
    # log(1 / (1 + e^-v)) by cases, so neither branch overflows
    return -math.log1p(math.exp(-v)) if v >= 0 else v - math.log1p(math.exp(v))


def _round_half_away(v):
    return math.copysign(math.floor(abs(v) + 0.5), v) if abs(v) % 1 != 0.5 else \
        math.copysign(abs(v) + 0.5, v)


SCALAR_REFS = {
    "logsigmoid": (_logsigmoid, {}),
    "tanh_shrink": (lambda v: v - math.tanh(v), {}),
    "rsqrt": (lambda v: 1 / math.sqrt(v), {}),
    "reciprocal": (lambda v: 1 / v, {}),
    "ceil": (math.ceil, {}),
    "sin": (math.sin, {}),
    "acos": (math.acos, {}),
    "asin": (math.asin, {}),
    "atan": (math.atan, {}),
    "cosh": (math.cosh, {}),
    "sinh": (math.sinh, {}),
    "erf": (math.erf, {}),
}


def _input_for(op: str, rng) -> np.ndarray:
    if op in ("acos", "asin"):
        return rng.uniform(-0.99, 0.99, (4, 5))
    if op == "rsqrt":
        return rng.uniform(0.1, 5, (4, 5))
    if op == "reciprocal":
        return rng.uniform(0.1, 5, (4, 5)) * np.where(rng.random((4, 5)) < 0.5, -1, 1)
    return rng.standard_normal((4, 5)) * 3


@pytest.mark.parametrize("op", sorted(SCALAR_REFS))
def test_unary_matches_scalar_reference(op):
    f, attrs = SCALAR_REFS[op]
    x = _input_for(op, np.random.default_rng(3))
    got = run_op(op, {"X": [x]}, attrs)["Out"][0]
    assert got.shape == x.shape and got.dtype == x.dtype
    np.testing.assert_allclose(got, _scalar_ref(f, x), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("op", sorted(SCALAR_REFS))
def test_unary_keeps_float32(op):
    x = _input_for(op, np.random.default_rng(4)).astype(np.float32)
    assert run_op(op, {"X": [x]})["Out"][0].dtype == np.float32


def test_logsigmoid_is_stable_for_large_inputs():
    x = np.array([-1e4, -800.0, -40.0, 0.0, 40.0, 800.0, 1e4])
    with np.errstate(over="raise", invalid="raise"):
        got = run_op("logsigmoid", {"X": [x]})["Out"][0]
        g = run_op("logsigmoid_grad", {"X": [x], "Out@GRAD": [np.ones_like(x)]})["X@GRAD"][0]
    np.testing.assert_allclose(got, _scalar_ref(_logsigmoid, x), rtol=1e-14)
    np.testing.assert_allclose(g, [1, 1, 1, 0.5, math.exp(-40), 0, 0], rtol=1e-12, atol=0)
    x32 = x.astype(np.float32)
    with np.errstate(over="raise", invalid="raise"):
        assert np.all(np.isfinite(run_op("logsigmoid", {"X": [x32]})["Out"][0]))


def test_round_rounds_halves_away_from_zero():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999999999999994, -3.7, 3.2, 0.0])
    got = run_op("round", {"X": [x]})["Out"][0]
    np.testing.assert_array_equal(got, [-3, -2, -1, 1, 2, 3, 0, -4, 3, 0])
    np.testing.assert_array_equal(got[:6], [_round_half_away(v) for v in x[:6]])


def test_ceil_and_round_pass_a_zero_gradient():
    x = np.array([[0.3, -1.2], [2.6, 4.0]])
    d = np.ones_like(x)
    for op in ("ceil", "round"):
        out = run_op(op, {"X": [x]})["Out"][0]
        g = run_op(op + "_grad", {"Out": [out], "Out@GRAD": [d]})["X@GRAD"][0]
        np.testing.assert_array_equal(g, np.zeros_like(x))


def _shrink_ref(v, lo, hi, soft):
    if v > hi:
        return v - hi if soft else v
    if v < lo:
        return v - lo if soft else v
    return 0.0


@pytest.mark.parametrize("op, attrs, t", [("softshrink", {}, 0.5),
                                          ("softshrink", {"lambda": 1.2}, 1.2),
                                          ("hard_shrink", {}, 0.5),
                                          ("hard_shrink", {"threshold": 0.9}, 0.9)])
def test_shrinks(op, attrs, t):
    x = np.random.default_rng(5).standard_normal((3, 7)) * 2
    soft = op == "softshrink"
    got = run_op(op, {"X": [x]}, attrs)["Out"][0]
    np.testing.assert_allclose(got, _scalar_ref(lambda v: _shrink_ref(v, -t, t, soft), x),
                               rtol=1e-15, atol=0)
    g = run_op(op + "_grad", {"X": [x], "Out@GRAD": [np.full_like(x, 2.0)]}, attrs)["X@GRAD"][0]
    np.testing.assert_array_equal(g, np.where(np.abs(x) > t, 2.0, 0.0))


@pytest.mark.parametrize("attrs, t", [({}, 1.0), ({"threshold": -0.25}, -0.25)])
def test_thresholded_relu(attrs, t):
    x = np.random.default_rng(6).standard_normal((5, 4)) * 2
    got = run_op("thresholded_relu", {"X": [x]}, attrs)["Out"][0]
    np.testing.assert_array_equal(got, _scalar_ref(lambda v: v if v > t else 0.0, x))


def _cumsum_ref(x, axis, exclusive, reverse):
    out = np.zeros_like(x)
    axis %= x.ndim
    n = x.shape[axis]
    for idx in np.ndindex(*x.shape):
        i = idx[axis]
        js = range(i + 1, n) if reverse else range(i)
        total = 0.0 if exclusive else x[idx]
        for j in js:
            total += x[idx[:axis] + (j,) + idx[axis + 1:]]
        out[idx] = total
    return out


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_matches_loops(axis, exclusive, reverse):
    x = np.random.default_rng(7).standard_normal((3, 4, 2))
    got = run_op("cumsum", {"X": [x]}, {"axis": axis, "exclusive": exclusive,
                                         "reverse": reverse})["Out"][0]
    np.testing.assert_allclose(got, _cumsum_ref(x, axis, exclusive, reverse), rtol=1e-12,
                               atol=1e-14)


def test_cumsum_defaults_and_grad_op():
    assert registry.get("cumsum").attrs == {"axis": -1, "exclusive": False, "reverse": False}
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(run_op("cumsum", {"X": [x]})["Out"][0], [[0, 1, 3], [3, 7, 12]])

    class _Op:  # the grad maker reads only these
        inputs, outputs = {"X": ["x"]}, {"Out": ["y"]}
        attrs = {"axis": 0, "exclusive": True, "reverse": False, "op_role": 1}

    (g,) = registry.get("cumsum").grad(_Op())
    assert g["type"] == "cumsum"
    assert g["inputs"] == {"X": ["y@GRAD"]} and g["outputs"] == {"Out": ["x@GRAD"]}
    assert g["attrs"] == {"axis": 0, "exclusive": True, "reverse": True}


def test_cumsum_bad_axis():
    with pytest.raises(ValueError, match=r"cumsum: axis must be in \[-2, 2\).*got 2"):
        run_op("cumsum", {"X": [np.ones((2, 3))]}, {"axis": 2})


COMPARES = {"less_equal": lambda a, b: a <= b, "greater_than": lambda a, b: a > b,
            "greater_equal": lambda a, b: a >= b, "not_equal": lambda a, b: a != b}


@pytest.mark.parametrize("op", sorted(COMPARES))
def test_compare_with_fluid_broadcasting(op):
    rng = np.random.default_rng(8)
    x = rng.integers(0, 3, (2, 3, 4)).astype(np.float64)
    y = rng.integers(0, 3, (3,)).astype(np.float64)  # meets x's axis 1
    got = run_op(op, {"X": [x], "Y": [y]}, {"axis": 1})["Out"][0]
    assert got.dtype == np.bool_ and got.shape == x.shape
    for (i, j, k), v in np.ndenumerate(got):
        assert v == COMPARES[op](float(x[i, j, k]), float(y[j])), (i, j, k)
    same = run_op(op, {"X": [x], "Y": [x.copy()]})["Out"][0]
    assert same.all() == (op in ("less_equal", "greater_equal")) and same.dtype == np.bool_
    assert registry.get(op).attrs == {"axis": -1, "force_cpu": False}
    assert registry.get(op).grad is None


def test_compare_bad_broadcast():
    with pytest.raises(ValueError, match="greater_than"):
        run_op("greater_than", {"X": [np.ones((2, 3))], "Y": [np.ones(4)]})
