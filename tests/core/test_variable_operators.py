"""A Variable's operators build Fluid 1.8's ops (math_op_patch): a Python number with + - * /
is one scale op, otherwise a constant in the elementwise or compare op; < <= > >= build the
compare ops, and so do == and != (equal / not_equal)."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers


def test_comparison_operators_build_fluids_ops_and_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3])
        y = layers.data("y", [3])
        outs = [x < y, x <= y, x > y, x >= y, x > 0.5, 1.0 <= x]
    types = [op.type for op in main.global_block().ops]
    assert types == ["less_than", "less_equal", "greater_than", "greater_equal",
                     "fill_constant", "greater_than", "fill_constant", "greater_equal"]
    ops = main.global_block().ops
    # a reflected scalar comparison keeps the Variable on the left: 1.0 <= x is x >= 1.0
    assert ops[-1].input("X") == [x.name]
    assert all(o.dtype == "bool" and o.stop_gradient for o in outs)
    xv = np.array([[0.0, 1.0, 2.0]], np.float32)
    yv = np.ones((1, 3), np.float32)
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv, "y": yv}, fetch_list=outs)
    for g, want in zip(got, [xv < yv, xv <= yv, xv > yv, xv >= yv, xv > 0.5, xv >= 1.0],
                       strict=True):
        np.testing.assert_array_equal(g, want)


def test_equality_builds_equal_ops_as_fluid_18():
    # Fluid 1.8's math_op_patch: == and != are the equal / not_equal ops, a number becomes a
    # one-element fill_constant of the Variable's dtype
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [2], dtype="int64")
        y = layers.data("y", [2], dtype="int64")
        outs = [x == y, x != y, x == 3, x != 2.0]
        hits = layers.reduce_sum(layers.cast(x == y, "float32"))
    assert all(o.dtype == "bool" for o in outs)
    assert [op.type for op in main.global_block().ops][:6] == [
        "equal", "not_equal", "fill_constant", "equal", "fill_constant", "not_equal"]
    a, b = np.array([[1, 2], [3, 4]]), np.array([[1, 0], [3, 5]])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got = exe.run(main, feed={"x": a, "y": b}, fetch_list=[*outs, hits])
    for g, want in zip(got, [a == b, a != b, a == 3, a != 2, [2.0]], strict=True):
        np.testing.assert_array_equal(g, want)
    # still hashable by identity, found by identity first; other types compare as Python's
    assert len({x, y}) == 2 and {x: 1, y: 2}[y] == 2 and x in [x] and bool(x)
    # a comparison has no truth value while the program is built (Fluid 1.8: always true)
    for truth in (lambda: bool(x == y), lambda: x in [y], lambda: bool(x < 3)):
        with pytest.raises(TypeError, match="compares Variables of a program: it has a value "
                                            "only when the program runs"):
            truth()
    assert (x == "x") is False and (x != None) is True  # noqa: E711
    with pytest.raises(TypeError, match="got ndarray"):
        x == a  # noqa: B015  (arrays are refused as by +)


def test_arithmetic_with_numbers_and_variables_as_fluid_builds_it():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3])
        y = layers.data("y", [3])
        i = layers.data("i", [3], dtype="int64")
        outs = [x + 1, 2 * x, x - 1.5, 1 - x, x / 4, -x, 2 / x, x ** 2, x // 2, x % 3, x * y,
                x + i]
    ops = main.global_block().ops
    assert [op.type for op in ops] == [
        "scale", "scale", "scale", "scale", "scale", "scale",
        "fill_constant_batch_size_like", "elementwise_div",  # c / x: a constant shaped as x
        "fill_constant", "elementwise_pow", "fill_constant", "elementwise_floordiv",
        "fill_constant", "elementwise_mod", "elementwise_mul", "cast", "elementwise_add"]
    assert [(op.attr("scale"), op.attr("bias")) for op in ops[:6]] == [
        (1.0, 1.0), (2.0, 0.0), (1.0, -1.5), (-1.0, 1.0), (0.25, 0.0), (-1.0, 0.0)]
    # the batch dim of x's shape is unknown: axis 0 aligns two [-1, 3] operands
    assert ops[-3].attr("axis") == 0 and ops[-2].attr("out_dtype") in ("float32", 5)
    assert all(tuple(o.shape) == (-1, 3) for o in outs)
    xv = np.array([[1.0, 2.0, -5.0]], np.float32)
    yv = np.array([[3.0, 0.5, 2.0]], np.float32)
    iv = np.array([[1, 2, 3]], np.int64)
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv, "y": yv, "i": iv},
                                               fetch_list=outs)
    want = [xv + 1, 2 * xv, xv - 1.5, 1 - xv, xv / 4, -xv, 2 / xv, xv ** 2,
            np.trunc(xv / 2), np.mod(xv, 3), xv * yv, xv + iv]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_float_that_is_not_an_integer_meets_an_int_variable():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        i = layers.data("i", [3], dtype="int64")
        assert [op.type for op in (i * 2.0).block.ops][-1] == "scale"
        with pytest.raises(TypeError, match="cannot convert to an integer"):
            _ = i + 0.5
        with pytest.raises(TypeError, match="a Variable meets a Variable or a Python number"):
            _ = i + "1"
