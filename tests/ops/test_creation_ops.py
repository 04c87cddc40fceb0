"""Kernels of Fluid 1.8's creation and inspection ops (dask_fluid/ops/creation_ops.py) against
references written with explicit loops, and their errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from . import run_op


def _lines(shape: tuple, axis: int):
    """Every index tuple of a line along ``axis`` (a slice object at ``axis``)."""
    others = [range(s) for i, s in enumerate(shape) if i != axis]
    for rest in itertools.product(*others):
        idx = list(rest)
        idx.insert(axis, slice(None))
        yield tuple(idx)


def test_arg_min_is_the_first_minimum_along_axis():
    x = np.array([[3, 1, 1, 5], [0, 2, 0, -1], [7, 7, 7, 7]], np.float32)
    got = run_op("arg_min", {"X": [x]}, {"axis": 1})["Out"][0]
    want = []
    for row in x:  # the first position holding the smallest value
        best = 0
        for j in range(len(row)):
            if row[j] < row[best]:
                best = j
        want.append(best)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int64
    kept = run_op("arg_min", {"X": [x]}, {"axis": 0, "keepdims": True, "dtype": "int32"})
    np.testing.assert_array_equal(kept["Out"][0], [[1, 0, 1, 1]])
    assert kept["Out"][0].dtype == np.int32
    with pytest.raises(ValueError, match="arg_min: axis must be in"):
        run_op("arg_min", {"X": [x]}, {"axis": 2})


@pytest.mark.parametrize("axis, descending", [(-1, False), (0, True), (1, False), (1, True)])
def test_argsort_sorts_each_line_and_gives_the_source_indices(axis, descending):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 5, (3, 4, 5)).astype(np.float64)  # ties: kept in input order
    res = run_op("argsort", {"X": [x]}, {"axis": axis, "descending": descending})
    out, ids = res["Out"][0], res["Indices"][0]
    assert ids.dtype == np.int64 and out.shape == ids.shape == x.shape
    for line in _lines(x.shape, axis % 3):
        vals = list(x[line])
        # insertion sort of (value, position): stable, so equal values keep their order
        order: list[int] = []
        for j in range(len(vals)):
            k = len(order)
            while k > 0 and ((vals[order[k - 1]] < vals[j]) if descending
                             else (vals[order[k - 1]] > vals[j])):
                k -= 1
            order.insert(k, j)
        np.testing.assert_array_equal(ids[line], order)
        np.testing.assert_array_equal(out[line], [vals[j] for j in order])
    with pytest.raises(ValueError, match="argsort: axis must be in"):
        run_op("argsort", {"X": [x]}, {"axis": 3})


def test_argsort_grad_scatters_back_by_indices():
    x = np.array([[0.3, -1.0, 2.0], [5.0, 4.0, 1.0]])
    ids = run_op("argsort", {"X": [x]}, {"axis": 1})["Indices"][0]
    d = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    got = run_op("argsort_grad", {"X": [x], "Indices": [ids], "Out@GRAD": [d]},
                 {"axis": 1})["X@GRAD"][0]
    want = np.zeros_like(x)
    for i in range(2):
        for j in range(3):
            want[i, ids[i, j]] += d[i, j]
    np.testing.assert_array_equal(got, want)
    none = run_op("argsort_grad", {"X": [x], "Indices": [ids], "Out@GRAD": [None]}, {"axis": 1})
    np.testing.assert_array_equal(none["X@GRAD"][0], np.zeros_like(x))


def test_reverse_flips_the_listed_axes():
    x = np.arange(24).reshape(2, 3, 4)
    got = run_op("reverse", {"X": [x]}, {"axis": [0, -1]})["Out"][0]
    for i, j, k in itertools.product(range(2), range(3), range(4)):
        assert got[i, j, k] == x[1 - i, j, 3 - k]
    with pytest.raises(ValueError, match="reverse: axis 3 is out of range"):
        run_op("reverse", {"X": [x]}, {"axis": [3]})
    with pytest.raises(ValueError, match="at least one dim"):
        run_op("reverse", {"X": [x]}, {"axis": []})


def test_fill_any_like_fills_with_value_and_dtype():
    x = np.zeros((2, 3), np.float32)
    got = run_op("fill_any_like", {"X": [x]}, {"value": 1.0})["Out"][0]
    assert got.dtype == np.float32 and got.shape == (2, 3) and (got == 1).all()
    as_int = run_op("fill_any_like", {"X": [x]}, {"value": 7.0, "dtype": "int64"})["Out"][0]
    assert as_int.dtype == np.int64 and (as_int == 7).all()


@pytest.mark.parametrize("value, dtype", [
    (1e100, "int32"),  # numpy alone would give -2147483648
    (2.0**31, "int32"),  # Fluid's float comparison lets it through to an undefined cast
    (-(2.0**31) - 1, "int32"),
    (2.0**63, "int64"),
    (70000.0, "float16"),
    (1e100, "float32"),
    (float("inf"), "float64"),
    (-float("inf"), "float32"),
    (2.0, "bool"),
    (-1.0, "uint8"),
])
def test_fill_any_like_refuses_a_value_outside_the_dtype_range(value, dtype):
    # Fluid 1.8's FillAnyLikeKernel: lowest() <= value <= max() of the output type
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=rf"fill_any_like: value .* out of the range of the "
                                         rf"output dtype {dtype}, \["):
        run_op("fill_any_like", {"X": [x]}, {"value": value, "dtype": dtype})
    with pytest.raises(ValueError, match=f"output dtype {dtype}"):  # X's dtype, dtype -1
        run_op("fill_any_like", {"X": [x.astype(dtype)]}, {"value": value})


def test_fill_any_like_refuses_nan():
    with pytest.raises(ValueError, match="fill_any_like: the filled value must not be NaN"):
        run_op("fill_any_like", {"X": [np.zeros(2)]}, {"value": float("nan")})


@pytest.mark.parametrize("value, dtype", [
    (2147483647, "int32"), (-2147483648, "int32"), (-2.0**31, "int32"),
    (2**63 - 1, "int64"), (65504.0, "float16"), (-3.4028234663852886e38, "float32"),
    (1e100, "float64"), (1.0, "bool"), (0.0, "bool"), (255.0, "uint8"),
    (np.float32(3.5), "int32"), (2.7, 2),  # Fluid's VarType code 2: int32; truncated
])
def test_fill_any_like_keeps_values_within_the_range(value, dtype):
    got = run_op("fill_any_like", {"X": [np.zeros((2, 2), np.float32)]},
                 {"value": value, "dtype": dtype})["Out"][0]
    want = np.dtype("int32" if dtype == 2 else dtype)
    assert got.dtype == want and got.shape == (2, 2)
    assert (got == want.type(int(value) if want.kind in "iu" else value)).all()


@pytest.mark.parametrize("op", ["arg_min", "arg_max"])
@pytest.mark.parametrize("dtype, want", [(-1, np.int64), (2, np.int32), (3, np.int64),
                                         ("int32", np.int32), ("int64", np.int64)])
def test_arg_min_max_take_fluids_dtype_codes(op, dtype, want):
    # Fluid 1.8: AddAttr<int>("dtype").SetDefault(-1), and the kernel reads -1 as int64
    x = np.array([[3.0, 1.0, 4.0], [1.0, 5.0, 9.0]])
    got = run_op(op, {"X": [x]}, {"axis": 1, "dtype": dtype})["Out"][0]
    assert got.dtype == want
    np.testing.assert_array_equal(got, [1, 0] if op == "arg_min" else [2, 2])


def test_isinf_isnan_isfinite_reduce_to_one_bool():
    clean = np.array([[1.0, -2.0], [0.0, 3.0]])
    cases = {"inf": np.array([1.0, np.inf, 2.0]), "nan": np.array([np.nan, 1.0]),
             "clean": clean}
    for name, x in cases.items():
        has_inf = any(v in (np.inf, -np.inf) for v in x.flat)
        has_nan = any(v != v for v in x.flat)
        for op, want in (("isinf", has_inf), ("isnan", has_nan),
                         ("isfinite", not (has_inf or has_nan))):
            got = run_op(op, {"X": [x]})["Out"][0]
            assert got.shape == (1,) and got.dtype == np.bool_, (op, name)
            assert bool(got[0]) == want, (op, name)
    ints = run_op("isfinite", {"X": [np.array([1, 2], np.int32)]})["Out"][0]
    assert bool(ints[0])


@pytest.mark.parametrize("start, end, step, dtype", [
    (0, 10, 3, np.int64), (10, 1, -2, np.int32), (0.5, 2.0, 0.4, np.float32),
    (1.0, -1.0, -0.5, np.float64), (3, 3, 1, np.int64)])
def test_range_steps_from_start_to_end(start, end, step, dtype):
    got = run_op("range", {"Start": [np.array([start], dtype)], "End": [np.array([end], dtype)],
                           "Step": [np.array([step], dtype)]})["Out"][0]
    want = []
    v = start
    while (v < end) if step > 0 else (v > end):
        want.append(v)
        v += step
    assert got.dtype == dtype
    np.testing.assert_allclose(got, np.array(want, dtype), rtol=1e-6)


def test_range_errors():
    one = [np.array([1], np.int64)]
    with pytest.raises(ValueError, match="Step must not be 0"):
        run_op("range", {"Start": one, "End": one, "Step": [np.array([0], np.int64)]})
    with pytest.raises(ValueError, match="must move Start"):
        run_op("range", {"Start": one, "End": [np.array([5], np.int64)],
                         "Step": [np.array([-1], np.int64)]})


def test_linspace_includes_both_ends():
    got = run_op("linspace", {"Start": [np.array([0.0], np.float32)],
                              "Stop": [np.array([10.0], np.float32)],
                              "Num": [np.array([5], np.int32)]})["Out"][0]
    np.testing.assert_allclose(got, [0.0, 2.5, 5.0, 7.5, 10.0])
    assert got.dtype == np.float32
    single = run_op("linspace", {"Start": [np.array([3.0])], "Stop": [np.array([9.0])],
                                 "Num": [np.array([1], np.int32)]})["Out"][0]
    np.testing.assert_array_equal(single, [3.0])
    with pytest.raises(ValueError, match="linspace: Num must be positive, got 0"):
        run_op("linspace", {"Start": [np.array([0.0])], "Stop": [np.array([1.0])],
                            "Num": [np.array([0], np.int32)]})


def test_diag_and_eye():
    d = np.array([3, 4, 5], np.int32)
    got = run_op("diag", {"Diagonal": [d]})["Out"][0]
    for i, j in itertools.product(range(3), range(3)):
        assert got[i, j] == (d[i] if i == j else 0)
    with pytest.raises(ValueError, match="diag: Diagonal must be 1-D"):
        run_op("diag", {"Diagonal": [np.ones((2, 2))]})
    e = run_op("eye", {}, {"num_rows": 2, "num_columns": 3, "dtype": "int32"})["Out"][0]
    assert e.dtype == np.int32 and e.shape == (2, 3)
    for i, j in itertools.product(range(2), range(3)):
        assert e[i, j] == (i == j)
    square = run_op("eye", {}, {"num_rows": 3})["Out"][0]
    assert square.shape == (3, 3) and square.dtype == np.float32
    with pytest.raises(ValueError, match="eye: num_rows and num_columns must be non-negative"):
        run_op("eye", {}, {"num_rows": -2, "num_columns": 2})
