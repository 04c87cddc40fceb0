"""The indexing kernels (``scatter_nd_add``, ``strided_slice``, ``crop``, ``crop_tensor``,
``multiplex``, ``unique``, ``unique_with_counts``) against references written element by
element, Paddle 1.8's documented examples, and the errors they give. Their gradients are
checked against finite differences in ``test_grad_check``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from . import run_op

I32 = np.int32


# -- scatter_nd_add ------------------------------------------------------------------------------

def scatter_nd_add_by_loops(x, index, updates):
    out = x.copy()
    k = index.shape[-1]
    for pos in itertools.product(*(range(d) for d in index.shape[:-1])):
        target = tuple(int(v) for v in index[pos])
        assert len(target) == k
        out[target] += updates[pos]
    return out


def test_scatter_nd_add_paddle_examples():
    got = run_op("scatter_nd_add", {"X": [np.arange(6.0)],
                                    "Index": [np.array([[1], [2], [3], [1]])],
                                    "Updates": [np.array([9.0, 10, 11, 12])]})["Out"][0]
    np.testing.assert_array_equal(got, [0, 22, 12, 14, 4, 5])
    got = run_op("scatter_nd_add", {
        "X": [np.array([[65.0, 17], [-14, -25]])], "Index": [np.zeros((2, 0), np.int64)],
        "Updates": [np.array([[[-1.0, -2], [1, 2]], [[3, 4], [-3, -4]]])]})["Out"][0]
    np.testing.assert_array_equal(got, [[67, 19], [-16, -27]])


@pytest.mark.parametrize("xshape, ishape", [((5, 4, 3), (7, 1)), ((5, 4, 3), (2, 3, 2)),
                                            ((5, 4, 3), (6, 3)), ((4, 3), (2, 2, 0))])
def test_scatter_nd_add_matches_loops(xshape, ishape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xshape)
    k = ishape[-1]
    index = np.stack([rng.integers(0, xshape[d], ishape[:-1]) for d in range(k)], axis=-1) \
        if k else np.zeros(ishape, np.int64)
    index = index.astype(I32)
    updates = rng.standard_normal(ishape[:-1] + xshape[k:])
    got = run_op("scatter_nd_add", {"X": [x], "Index": [index], "Updates": [updates]})["Out"][0]
    np.testing.assert_allclose(got, scatter_nd_add_by_loops(x, index, updates), rtol=1e-12)
    assert got.dtype == x.dtype and not np.shares_memory(got, x)


def test_scatter_nd_add_errors():
    x = np.zeros((4, 3))
    with pytest.raises(ValueError, match=r"Updates must have shape .* \[2, 3\], got \[2, 2\]"):
        run_op("scatter_nd_add", {"X": [x], "Index": [np.array([[0], [1]])],
                                  "Updates": [np.zeros((2, 2))]})
    with pytest.raises(ValueError, match=r"Index\[..., 0\] must be in \[0, 4\), got \[1, 4\]"):
        run_op("scatter_nd_add", {"X": [x], "Index": [np.array([[1], [4]])],
                                  "Updates": [np.zeros((2, 3))]})
    with pytest.raises(ValueError, match="rank of Index must be at least 2"):
        run_op("scatter_nd_add", {"X": [x], "Index": [np.array([1, 2])],
                                  "Updates": [np.zeros((2, 3))]})
    with pytest.raises(ValueError, match=r"Index.shape\[-1\] \(3\) must be no greater than"):
        run_op("scatter_nd_add", {"X": [x], "Index": [np.zeros((1, 3), I32)],
                                  "Updates": [np.zeros(1)]})
    with pytest.raises(TypeError, match="X and Updates must have the same dtype"):
        run_op("scatter_nd_add", {"X": [x], "Index": [np.array([[0]])],
                                  "Updates": [np.zeros((1, 3), np.float32)]})
    with pytest.raises(TypeError, match="Index must be int32 or int64, got float64"):
        run_op("scatter_nd_add", {"X": [x], "Index": [np.array([[0.0]])],
                                  "Updates": [np.zeros((1, 3))]})


def test_scatter_nd_add_grad_gathers():
    d = np.arange(12.0).reshape(4, 3)
    index = np.array([[3], [0], [3]])
    res = run_op("scatter_nd_add_grad", {"Index": [index], "Updates": [np.zeros((3, 3))],
                                         "Out@GRAD": [d]})
    np.testing.assert_array_equal(res["X@GRAD"][0], d)
    np.testing.assert_array_equal(res["Updates@GRAD"][0], d[[3, 0, 3]])
    only = run_op("scatter_nd_add_grad", {"Index": [index], "Updates": [np.zeros((3, 3))],
                                          "Out@GRAD": [d]}, outs=("Updates@GRAD",))
    assert set(only) == {"Updates@GRAD"}


# -- strided_slice -------------------------------------------------------------------------------

def paddle18_positions(size, start, end, stride):
    """The indices Paddle 1.8's strided_slice reads along one dim, by its rules: negative
    bounds count from the end (an end of -1 with a negative stride means "past the front"),
    a positive stride walks [start, end) clamped to the dim, a negative one walks the range
    (end, start] forwards from end + 1 and is then reversed."""
    if start < 0:
        start += size
    if end < 0 and not (end == -1 and stride < 0):
        end += size
    picked = []
    if stride > 0:
        i = max(start, 0)
        while i < min(end, size):
            picked.append(i)
            i += stride
        return picked
    lo, hi = max(end + 1, 0), min(start + 1, size)
    i = lo
    while i < hi:
        picked.append(i)
        i += -stride
    return picked[::-1]


def strided_slice_by_loops(x, axes, starts, ends, strides):
    per_dim = [list(range(n)) for n in x.shape]
    for a, s, e, st in zip(axes, starts, ends, strides, strict=True):
        per_dim[a] = paddle18_positions(x.shape[a], s, e, st)
    out = np.empty([len(p) for p in per_dim], x.dtype)
    for pos in itertools.product(*(range(len(p)) for p in per_dim)):
        out[pos] = x[tuple(per_dim[d][i] for d, i in enumerate(pos))]
    return out


# Paddle's own test cases (test_strided_slice_op.py): numpy slicing agrees with 1.8 on them
PADDLE_CASES = [
    ((100,), [0], [-4], [-3], [1]), ((100,), [0], [3], [8], [1]), ((100,), [0], [5], [0], [-1]),
    ((100,), [0], [-1], [-3], [-1]), ((3, 4, 10), [0, 1, 2], [0, -1, 0], [2, -3, 5], [1, -1, 1]),
    ((5, 5, 5), [0, 1, 2], [1, -1, 0], [2, -3, 3], [1, -1, 1]),
    ((1, 100, 1), [1], [-1], [-2], [-1]),
    ((3, 3, 3, 4), [0, 1, 2, 3], [1, 0, 0, 0], [2, 2, 3, 4], [1, 1, 1, 2]),
    ((3, 3, 3, 6, 7, 8), [0, 1, 2, 3, 4, 5], [1, 0, 0, 0, 1, 2], [2, 2, 3, 1, 2, 8],
     [1, 1, 1, 1, 1, 2]),
    ((4, 4, 4, 4), [1, 2, 3], [-5, 0, -7], [-1, 2, 4], [1, 1, 1]),
]


@pytest.mark.parametrize("shape, axes, starts, ends, strides", PADDLE_CASES)
def test_strided_slice_paddle_cases(shape, axes, starts, ends, strides):
    x = np.random.default_rng(1).standard_normal(shape)
    got = run_op("strided_slice", {"Input": [x]}, {
        "axes": axes, "starts": starts, "ends": ends, "strides": strides,
        "infer_flags": [1] * len(axes)})["Out"][0]
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, strides, strict=True):
        index[a] = slice(s, e, st)
    np.testing.assert_array_equal(got, x[tuple(index)])


@pytest.mark.parametrize("start, end, stride", [
    (0, 9, 2), (-7, 100, 3), (-100, 4, 1), (2, -1, 1), (8, 0, -2), (9, 0, -2), (6, -1, -3),
    (-1, -10, -4), (100, 2, -1), (5, -100, -2), (7, 1, -5)])
def test_strided_slice_matches_loops(start, end, stride):
    x = np.arange(9 * 2.0).reshape(9, 2)
    got = run_op("strided_slice", {"Input": [x]}, {
        "axes": [0], "starts": [start], "ends": [end], "strides": [stride]})["Out"][0]
    np.testing.assert_array_equal(got, strided_slice_by_loops(x, [0], [start], [end], [stride]))


def test_strided_slice_negative_stride_aligns_on_the_end_as_fluid_18():
    """1.8 slices (end, start] from end + 1 and reverses: x[8:0:-2] reads 7, 5, 3, 1 where
    numpy reads 8, 6, 4, 2 (Paddle 2.x later changed this)."""
    x = np.arange(10.0)
    got = run_op("strided_slice", {"Input": [x]}, {
        "axes": [0], "starts": [8], "ends": [0], "strides": [-2]})["Out"][0]
    np.testing.assert_array_equal(got, [7, 5, 3, 1])
    assert list(x[8:0:-2]) == [8, 6, 4, 2]


def test_strided_slice_tensor_inputs_and_precedence():
    x = np.arange(4 * 6.0).reshape(4, 6)
    base = {"axes": [0, 1], "starts": [0, 0], "ends": [4, 6], "strides": [1, 1],
            "infer_flags": [-1, -1]}
    # a tensor list beats the tensor, which beats the attribute
    got = run_op("strided_slice", {
        "Input": [x], "StartsTensor": [np.array([2, 2], I32)],
        "StartsTensorList": [np.array([1], I32), np.array([3], I32)],
        "EndsTensor": [np.array([3, 0], I32)], "StridesTensor": [np.array([1, -1], I32)]},
        base)["Out"][0]
    np.testing.assert_array_equal(got, x[1:3, 3:0:-1])
    got = run_op("strided_slice", {"Input": [x], "StartsTensor": [np.array([2, 2], I32)]},
                 base)["Out"][0]
    np.testing.assert_array_equal(got, x[2:, 2:])


def test_strided_slice_decrease_axis():
    x = np.arange(3 * 4.0).reshape(3, 4)
    got = run_op("strided_slice", {"Input": [x]}, {
        "axes": [0], "starts": [1], "ends": [2], "strides": [1], "decrease_axis": [0]})["Out"][0]
    np.testing.assert_array_equal(got, x[1])
    # Fluid's x[-1]: start -1, end 0, infer flag -1 on a decreased axis picks the last row
    got = run_op("strided_slice", {"Input": [x]}, {
        "axes": [0], "starts": [-1], "ends": [0], "strides": [1], "infer_flags": [-1],
        "decrease_axis": [0]})["Out"][0]
    np.testing.assert_array_equal(got, x[-1])
    got = run_op("strided_slice", {"Input": [np.arange(3.0)]}, {
        "axes": [0], "starts": [2], "ends": [3], "strides": [1], "decrease_axis": [0]})["Out"][0]
    assert got.shape == (1,) and got[0] == 2.0


def test_strided_slice_grad_scatters_back():
    x = np.zeros((3, 6))
    d = np.arange(1, 7.0).reshape(2, 3)
    dx = run_op("strided_slice_grad", {"Input": [x], "Out@GRAD": [d]}, {
        "axes": [0, 1], "starts": [0, 5], "ends": [3, 0], "strides": [2, -2]})["Input@GRAD"][0]
    want = np.zeros((3, 6))
    want[np.ix_([0, 2], [5, 3, 1])] = d
    np.testing.assert_array_equal(dx, want)


@pytest.mark.parametrize("attrs, match", [
    ({"starts": [0], "ends": [3], "strides": [0]}, "a stride must not be 0"),
    ({"starts": [3], "ends": [1], "strides": [1]}, "the slice selects nothing"),
    ({"starts": [1], "ends": [3], "strides": [-1]}, "the slice selects nothing"),
    ({"starts": [7], "ends": [9], "strides": [1]}, r"fall outside dim 0 \(size 5\)"),
    ({"starts": [0, 1], "ends": [3], "strides": [1]}, "starts has 2 values, axes has 1"),
    ({"axes": [2], "starts": [0], "ends": [1], "strides": [1]}, "must be distinct dims"),
    ({"starts": [0], "ends": [3], "strides": [1], "decrease_axis": [0]},
     "must name dims the slice leaves of size 1"),
])
def test_strided_slice_errors(attrs, match):
    with pytest.raises(ValueError, match=match):
        run_op("strided_slice", {"Input": [np.zeros((5, 2))]}, {"axes": [0], **attrs})


# -- crop, crop_tensor ---------------------------------------------------------------------------

def crop_by_flat_index(x, offsets, shape):
    """Paddle's test reference: keep each element whose multi-index lies in the block."""
    kept = [v for i, v in enumerate(x.ravel())
            if all(o <= j < o + s for j, o, s in
                   zip(np.unravel_index(i, x.shape), offsets, shape, strict=True))]
    return np.array(kept).reshape(shape)


def test_crop_paddle_examples_and_reference():
    x = np.array([[0, 1, 2, 0, 0], [0, 3, 4, 0, 0], [0, 0, 0, 0, 0]], np.float32)
    got = run_op("crop", {"X": [x]}, {"shape": [2, 2], "offsets": [0, 1]})["Out"][0]
    np.testing.assert_array_equal(got, [[1, 2], [3, 4]])
    x = np.random.default_rng(2).standard_normal((4, 5, 6))
    got = run_op("crop", {"X": [x], "Y": [np.zeros((2, 3, 4))],
                          "Offsets": [np.array([1, 2, 0], I32)]})["Out"][0]
    np.testing.assert_array_equal(got, crop_by_flat_index(x, [1, 2, 0], [2, 3, 4]))
    got = run_op("crop", {"X": [x]}, {"shape": [-1, 2, 2], "offsets": [0, 3, 4]})["Out"][0]
    np.testing.assert_array_equal(got, crop_by_flat_index(x, [0, 3, 4], [4, 2, 2]))


def test_crop_errors():
    x = np.zeros((3, 4))
    with pytest.raises(ValueError, match=r"offset 2 and size 3 of dim 1 must lie inside"):
        run_op("crop", {"X": [x]}, {"shape": [2, 3], "offsets": [0, 2]})
    with pytest.raises(ValueError, match="must not be used at the same time"):
        run_op("crop", {"X": [x], "Offsets": [np.array([0, 0], I32)]},
               {"shape": [2, 3], "offsets": [0, 1]})
    with pytest.raises(ValueError, match=r"shape attribute \[2\] needs one value per dim"):
        run_op("crop", {"X": [x]}, {"shape": [2], "offsets": [0, 0]})
    with pytest.raises(ValueError, match="1 offsets for a rank-2 input"):
        run_op("crop", {"X": [x]}, {"shape": [2, 2], "offsets": [0]})
    with pytest.raises(ValueError, match="Y must have the rank of X"):
        run_op("crop", {"X": [x], "Y": [np.zeros(2)]}, {"offsets": [0, 0]})


def test_crop_tensor_sources_and_minus_one():
    x = np.random.default_rng(3).standard_normal((4, 6, 5))
    got = run_op("crop_tensor", {"X": [x]}, {"shape": [2, -1, 3], "offsets": [1, 2, 0]})
    np.testing.assert_array_equal(got["Out"][0], crop_by_flat_index(x, [1, 2, 0], [2, 4, 3]))
    # ShapeTensor beats Shape beats the attribute; OffsetsTensor beats Offsets
    got = run_op("crop_tensor", {
        "X": [x], "ShapeTensor": [np.array([v], I32) for v in (1, 2, -1)],
        "Shape": [np.array([3, 3, 3], I32)],
        "OffsetsTensor": [np.array([v], I32) for v in (3, 1, 2)],
        "Offsets": [np.array([0, 0, 0], I32)]}, {"shape": [4, 4, 4], "offsets": [-1, -1, -1]})
    np.testing.assert_array_equal(got["Out"][0], crop_by_flat_index(x, [3, 1, 2], [1, 2, 3]))
    got = run_op("crop_tensor", {"X": [x], "Shape": [np.array([2, 2, -1], I32)],
                                 "Offsets": [np.array([2, 4, 1], I32)]},
                 {"offsets": [-1, -1, -1]})
    np.testing.assert_array_equal(got["Out"][0], crop_by_flat_index(x, [2, 4, 1], [2, 2, 4]))


@pytest.mark.parametrize("ins, attrs, match", [
    ({}, {"shape": [2, 0], "offsets": [0, 0]}, "size 0 of dim 1"),
    ({}, {"shape": [2, -2], "offsets": [0, 0]}, "size -2 of dim 1"),
    ({}, {"shape": [2, 3], "offsets": [2, 0]}, r"offset 2 and size 2 of dim 0 must lie inside"),
    ({}, {"shape": [2], "offsets": [0, 0]}, "1 sizes in the shape for a rank-2 input"),
    ({"ShapeTensor": [np.array([1, 2], I32), np.array([1], I32)]}, {"offsets": [0, 0]},
     "each tensor of ShapeTensor must have shape"),
    ({"Offsets": [np.array([[0, 0]], I32)]}, {"shape": [1, 1]}, "input Offsets must be 1-D"),
])
def test_crop_tensor_errors(ins, attrs, match):
    with pytest.raises(ValueError, match=match):
        run_op("crop_tensor", {"X": [np.zeros((3, 4))], **ins}, attrs)


# -- multiplex -----------------------------------------------------------------------------------

def test_multiplex_paddle_example_and_loops():
    xs = [np.array([[k, 0, 3, 4], [k, 1, 7, 8], [k, 2, 4, 2], [k, 3, 3, 4]], np.float32)
          for k in range(4)]
    got = run_op("multiplex", {"X": xs, "Ids": [np.array([[3], [0], [1], [2]], I32)]})["Out"][0]
    np.testing.assert_array_equal(got, [[3, 0, 3, 4], [0, 1, 7, 8], [1, 2, 4, 2], [2, 3, 3, 4]])
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((6, 2, 3)) for _ in range(3)]
    ids = rng.integers(0, 3, (6, 1))
    got = run_op("multiplex", {"X": xs, "Ids": [ids]})["Out"][0]
    for i in range(6):
        np.testing.assert_array_equal(got[i], xs[int(ids[i, 0])][i])
    grads = run_op("multiplex_grad", {"X": xs, "Ids": [ids], "Out@GRAD": [got]})["X@GRAD"]
    for k, g in enumerate(grads):
        for i in range(6):
            np.testing.assert_array_equal(g[i], got[i] if ids[i, 0] == k else 0)


@pytest.mark.parametrize("xs, ids, match", [
    ([np.zeros((2, 3))], [[0], [0]], "at least 2 candidate tensors"),
    ([np.zeros((2, 3)), np.zeros((2, 4))], [[0], [0]], "one shape of rank >= 2"),
    ([np.zeros(2), np.zeros(2)], [[0], [0]], "one shape of rank >= 2"),
    ([np.zeros((2, 3)), np.zeros((2, 3))], [0, 1], r"Ids must have shape \[2, 1\]"),
    ([np.zeros((2, 3)), np.zeros((2, 3))], [[0], [2]], r"Ids must be in \[0, 2\)"),
])
def test_multiplex_errors(xs, ids, match):
    with pytest.raises(ValueError, match=match):
        run_op("multiplex", {"X": xs, "Ids": [np.array(ids, I32)]})


# -- unique, unique_with_counts ------------------------------------------------------------------

def unique_by_dict(x):
    """Paddle's kernel: a hash map from value to its position among the first occurrences."""
    seen, out, index = {}, [], []
    for v in x.tolist():
        if v not in seen:
            seen[v] = len(out)
            out.append(v)
        index.append(seen[v])
    counts = [index.count(j) for j in range(len(out))]
    return np.array(out, x.dtype), np.array(index), np.array(counts)


def test_unique_paddle_example():
    x = np.array([2, 3, 3, 1, 5, 3], I32)
    res = run_op("unique_with_counts", {"X": [x]})
    np.testing.assert_array_equal(res["Out"][0], [2, 3, 1, 5])
    np.testing.assert_array_equal(res["Index"][0], [0, 1, 1, 2, 3, 1])
    np.testing.assert_array_equal(res["Count"][0], [1, 3, 1, 1])
    assert res["Out"][0].dtype == I32 and res["Index"][0].dtype == I32


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.float64])
def test_unique_matches_dict_reference(dtype):
    x = np.random.default_rng(5).integers(-4, 5, 40).astype(dtype)
    want_out, want_index, want_count = unique_by_dict(x)
    res = run_op("unique_with_counts", {"X": [x]}, {"dtype": "int64"})
    np.testing.assert_array_equal(res["Out"][0], want_out)
    np.testing.assert_array_equal(res["Index"][0], want_index)
    np.testing.assert_array_equal(res["Count"][0], want_count)
    assert res["Index"][0].dtype == np.int64 and res["Count"][0].dtype == np.int64
    plain = run_op("unique", {"X": [x]}, {"dtype": 3})  # Fluid's code for int64
    assert set(plain) == {"Out", "Index"} and plain["Index"][0].dtype == np.int64
    np.testing.assert_array_equal(plain["Out"][0], want_out)


def test_unique_floats_as_a_hash_map():
    x = np.array([np.nan, -0.0, 0.0, np.nan, 1.0, -0.0])
    res = run_op("unique_with_counts", {"X": [x]})
    out = res["Out"][0]
    assert out.shape == (4,) and np.isnan(out[0]) and np.isnan(out[2]) and out[3] == 1.0
    assert out[1] == 0.0 and np.signbit(out[1])  # the first occurrence's value
    np.testing.assert_array_equal(res["Index"][0], [0, 1, 1, 2, 3, 1])
    np.testing.assert_array_equal(res["Count"][0], [1, 3, 1, 1])
    empty = run_op("unique_with_counts", {"X": [np.zeros(0, I32)]})
    assert all(v[0].size == 0 for v in empty.values())


def test_unique_errors():
    with pytest.raises(ValueError, match=r"unique: X must be 1-D, got shape \[2, 2\]"):
        run_op("unique", {"X": [np.zeros((2, 2))]})
    with pytest.raises(TypeError, match="index dtype must be int32 or int64, got float32"):
        run_op("unique_with_counts", {"X": [np.zeros(3)]}, {"dtype": "float32"})


def test_unique_on_the_device(device_xp):
    xp = device_xp
    x = np.array([4, 1, 4, 4, 0, 1], np.int64)
    res = run_op("unique_with_counts", {"X": [xp.asarray(x)]}, {"dtype": "int64"})
    for slot, want in zip(("Out", "Index", "Count"), unique_by_dict(x), strict=True):
        assert isinstance(res[slot][0], xp.ndarray), slot
        np.testing.assert_array_equal(xp.asnumpy(res[slot][0]), want)
