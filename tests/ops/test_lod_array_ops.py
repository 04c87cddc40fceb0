"""The LoD rank-table ops (lod_rank_table, max_sequence_len, lod_tensor_to_array,
array_to_lod_tensor, reorder_lod_tensor_by_rank, shrink_rnn_memory and their grads), run
through the executor (they are host ops) with the values of Fluid 1.8's unit tests
(test_lod_rank_table.py, test_lod_tensor_array_ops.py), and their kernels on device arrays."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.executor import ExecutionError
from dask_fluid.lod import LoDRankTable, LoDTensor, LoDTensorArray, lengths_to_offsets
from dask_fluid.ops import registry


def _lod_tensor(data: np.ndarray, lengths: list[list[int]]) -> LoDTensor:
    return fluid.create_lod_tensor(data, lengths, fluid.CPUPlace())


def test_signatures_are_fluids():
    for op, ins, outs, attrs in (
            ("lod_rank_table", ("X",), ("Out",), {"level": 0}),
            ("max_sequence_len", ("RankTable",), ("Out",), {}),
            ("lod_tensor_to_array", ("X", "RankTable"), ("Out",), {}),
            ("array_to_lod_tensor", ("X", "RankTable"), ("Out",), {}),
            ("reorder_lod_tensor_by_rank", ("X", "RankTable"), ("Out",), {}),
            ("reorder_lod_tensor_by_rank_grad", ("X", "RankTable"), ("Out",), {}),
            ("shrink_rnn_memory", ("X", "RankTable", "I"), ("Out",), {}),
            ("shrink_rnn_memory_grad", ("X", "Out@GRAD"), ("X@GRAD",), {})):
        d = registry.get(op)
        assert (d.inputs, d.outputs, d.attrs, d.host) == (ins, outs, attrs, True), op


def test_rank_table_of_level_1():
    """test_lod_rank_table.py: level 1 of [[1, 2], [5, 1, 1], ...] is (0, 5), (1, 1), (2, 1)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [100], dtype="float64", lod_level=3)
        table = layers.lod_rank_table(x, level=1)
        n = layers.max_sequence_len(table)
    scope = fluid.Scope()
    x_t = _lod_tensor(np.random.default_rng(0).random((17, 100)),
                      [[1, 2], [5, 1, 1], [3, 1, 5, 1, 3, 3, 1]])
    got, got_n = fluid.Executor().run(main, feed={"x": x_t}, fetch_list=[table, n], scope=scope)
    value = scope.vars[table.name]
    assert isinstance(value, LoDRankTable)
    assert value.items() == [(0, 5), (1, 1), (2, 1)]
    assert value.coarse_lod() == [[0, 1, 3]] and value.level() == 1
    # fetched: the (index, length) pairs as int64
    np.testing.assert_array_equal(got, [[0, 5], [1, 1], [2, 1]])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got_n, [5])
    assert got_n.dtype == np.int64


def test_rank_table_is_a_stable_sort_longest_first():
    table = LoDRankTable._of_lod(lengths_to_offsets([[2, 5, 2, 0, 5]]), 0)
    assert table.items() == [(1, 5), (4, 5), (0, 2), (2, 2), (3, 0)]
    assert LoDRankTable._of_lod(lengths_to_offsets([[]]), 0).items() == []
    with pytest.raises(ValueError, match="level 1 is out of range"):
        LoDRankTable._of_lod(lengths_to_offsets([[2, 3]]), 1)


def _round_trip(data, lengths, level):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [1], dtype="int32", lod_level=len(lengths))
        table = layers.lod_rank_table(x, level=level)
        n = layers.max_sequence_len(table)
        arr = layers.lod_tensor_to_array(x, table)
        back = layers.array_to_lod_tensor(arr, table)
    scope = fluid.Scope()
    got_n, got_back = fluid.Executor().run(main, feed={"x": _lod_tensor(data, lengths)},
                                           fetch_list=[n, back], scope=scope,
                                           return_numpy=False)
    return int(np.array(got_n)[0]), scope.vars[arr.name], got_back


# (lengths, level, expected items, their LoDs as lengths, max length) from
# test_lod_tensor_array_ops.py
CASES = [
    ([[3, 6, 1]], 0, [[3, 0, 9], [4, 1], [5, 2], [6], [7], [8]], [[]] * 6, 6),
    ([[3, 6, 0, 1]], 0, [[3, 0, 9], [4, 1], [5, 2], [6], [7], [8]], [[]] * 6, 6),
    ([[2, 3], [3, 6, 2, 6, 3]], 0,
     [[9, 10, 0, 1, 2], [11, 12, 13, 14, 15, 16, 3, 4, 5, 6, 7, 8], [17, 18, 19]],
     [[[2, 3]], [[6, 6]], [[3]]], 3),
    ([[3, 2, 4, 2], [3, 4, 4, 0, 1, 5, 2, 2, 2, 7, 1]], 0,
     [[12, 13, 14, 15, 16, 0, 1, 2, 23, 24, 25, 26, 27, 28, 29],
      [17, 18, 3, 4, 5, 6, 11, 30], [19, 20, 7, 8, 9, 10], [21, 22]],
     [[[5, 3, 0, 7]], [[2, 4, 1, 1]], [[2, 4]], [[2]]], 4),
    ([[2, 3, 1], [2, 3, 1, 4, 2, 1], [3, 4, 4, 6, 4, 1, 1, 4, 4, 8, 6, 1, 4]], 0,
     [[21, 0, 1, 2, 3, 4, 5, 6, 46, 47, 48, 49], [*range(22, 39), *range(7, 21)],
      [*range(39, 46)]],
     [[[1, 2, 1], [1, 3, 4, 4]], [[4, 3], [1, 4, 4, 8, 4, 6, 4]], [[2], [6, 1]]], 3),
    # ranked at level 1 of three levels: a round trip (test ..._level_2_skip_level)
    ([[2, 3, 1], [2, 3, 1, 4, 2, 1], [3, 4, 4, 6, 4, 1, 1, 4, 4, 8, 6, 1, 4]], 1,
     None, None, 4),
]


@pytest.mark.parametrize("lengths, level, expect, expect_lod, max_len", CASES)
def test_lod_tensor_to_array_and_back(lengths, level, expect, expect_lod, max_len):
    rows = sum(lengths[-1])
    data = np.arange(rows, dtype="int32").reshape(rows, 1)
    got_n, arr, back = _round_trip(data, lengths, level)
    assert got_n == max_len
    assert isinstance(arr, LoDTensorArray) and len(arr) == max_len
    if expect is not None:
        for item, values, lod in zip(arr, expect, expect_lod, strict=True):
            np.testing.assert_array_equal(np.array(item).ravel(), values)
            assert item.recursive_sequence_lengths() == lod
    # array_to_lod_tensor gives the tensor back, LoD included
    np.testing.assert_array_equal(np.array(back), data)
    assert back.recursive_sequence_lengths() == lengths


def _reorder_program(lod_level):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ref = layers.data("ref", [1], dtype="float64", lod_level=1)
        x = layers.data("x", [2], dtype="float64", lod_level=lod_level)
        table = layers.lod_rank_table(ref)
        out = layers.reorder_lod_tensor_by_rank(x, table)
    return main, out


def test_reorder_lod_tensor_by_rank_reorders_sequences_with_lod():
    """The sequences of X in the order of another tensor's rank table, lower levels kept."""
    main, out = _reorder_program(2)
    ref = _lod_tensor(np.zeros((6, 1)), [[1, 3, 0, 2]])  # rank: 1, 3, 0, 2
    x_lengths = [[2, 1, 0, 1], [1, 2, 3, 1]]
    x = np.arange(14, dtype="float64").reshape(7, 2)
    got = fluid.Executor().run(main, feed={"ref": ref, "x": _lod_tensor(x, x_lengths)},
                               fetch_list=[out], return_numpy=False)[0]
    # sequence k of X: its rows by the lower level
    seqs = [[0, 1, 2], [3, 4, 5], [], [6]]
    np.testing.assert_array_equal(np.array(got), x[seqs[1] + seqs[3] + seqs[0] + seqs[2]])
    assert got.recursive_sequence_lengths() == [[1, 1, 2, 0], [3, 1, 1, 2]]


def test_reorder_lod_tensor_by_rank_reorders_rows_without_lod():
    main, out = _reorder_program(0)
    ref = _lod_tensor(np.zeros((6, 1)), [[1, 3, 0, 2]])
    x = np.arange(8, dtype="float64").reshape(4, 2)
    got = fluid.Executor().run(main, feed={"ref": ref, "x": x}, fetch_list=[out])[0]
    np.testing.assert_array_equal(got, x[[1, 3, 0, 2]])
    # a table naming more sequences than X has is refused
    with pytest.raises(ExecutionError, match="names sequence 3 but X has 3"):
        fluid.Executor().run(main, feed={"ref": ref, "x": x[:3]}, fetch_list=[out])


def test_shrink_rnn_memory_keeps_the_running_sequences():
    """Step i keeps the rows of the sequences longer than i (test_shrink_rnn_memory.py)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ref = layers.data("ref", [1], dtype="float64", lod_level=1)
        x = layers.data("x", [3], dtype="float64")
        table = layers.lod_rank_table(ref)
        i = layers.fill_constant([1], "int64", 0)
        outs = []
        for _ in range(4):
            outs.append(layers.shrink_memory(x, i, table))
            i = layers.increment(i, in_place=False)
    ref_t = _lod_tensor(np.zeros((9, 1)), [[2, 4, 3]])
    xv = np.random.default_rng(1).random((3, 3))
    got = fluid.Executor().run(main, feed={"ref": ref_t, "x": xv}, fetch_list=outs)
    for g, rows in zip(got, [3, 3, 2, 1], strict=True):
        np.testing.assert_array_equal(g, xv[:rows])


def _table_ctx(lods, vars_=None, out="out", ins=None):
    op = SimpleNamespace(input=lambda s: [(ins or {}).get(s, s.lower())],
                         output=lambda s: [out])
    return SimpleNamespace(op=op, scope=SimpleNamespace(vars=vars_ or {}, lods=lods),
                           executor=SimpleNamespace(place=None, _xp=np))


def test_kernels_on_device_arrays(device_xp):
    """The kernels on device arrays (strict CuPy everywhere, real CuPy on a GPU): no host
    copies, numpy's values, and the grads: shrink pads zeros, reorder's undoes the order,
    the array ones invert each other."""
    from dask_fluid.ops import lod_array_ops as k

    cp = device_xp
    lod = tuple(tuple(v) for v in lengths_to_offsets([[2, 3], [3, 6, 2, 6, 3]]))
    x = np.arange(40, dtype="float32").reshape(20, 2)
    table = LoDRankTable._of_lod(lod, 0)
    ctx = _table_ctx({})
    attrs = {"_lods": {"X": [lod], "RankTable": [None], "I": [None]}}
    arr = k._lod_tensor_to_array({"X": [cp.asarray(x)], "RankTable": [table]}, attrs,
                                 ("Out",), ctx)["Out"][0]
    rows = [[9, 10, 0, 1, 2], [11, 12, 13, 14, 15, 16, 3, 4, 5, 6, 7, 8], [17, 18, 19]]
    for item, r in zip(arr, rows, strict=True):
        np.testing.assert_array_equal(cp.asnumpy(item._array), x[r])
    back = k._array_to_lod_tensor({"X": [arr], "RankTable": [table]}, attrs, ("Out",), ctx)
    np.testing.assert_array_equal(cp.asnumpy(back["Out"][0]), x)
    assert back["@LOD"]["Out"][0] == lod
    # reorder and its grad
    top = LoDRankTable._of_lod(((0, 1, 4, 6),), 0)  # lengths 1, 3, 2: order 1, 2, 0
    xs = cp.asarray(x[:3])
    out = k._reorder_lod_tensor_by_rank({"X": [xs], "RankTable": [top]},
                                        {"_lods": {"X": [None]}}, ("Out",), ctx)["Out"][0]
    np.testing.assert_array_equal(cp.asnumpy(out), x[[1, 2, 0]])
    gctx = _table_ctx({}, ins={"X": "y@GRAD"})
    dx = k._reorder_lod_tensor_by_rank_grad({"X": [out], "RankTable": [top]},
                                            {"_lods": {"X": [None]}}, ("Out",), gctx)["Out"][0]
    np.testing.assert_array_equal(cp.asnumpy(dx), x[:3])
    # shrink and its grad
    i = cp.asarray(np.array([2], dtype="int64"))
    s = k._shrink_rnn_memory({"X": [xs], "RankTable": [top], "I": [i]},
                             {"_lods": {"X": [None]}}, ("Out",), ctx)["Out"][0]
    np.testing.assert_array_equal(cp.asnumpy(s), x[:1])
    ds = k._shrink_rnn_memory_grad({"X": [xs], "Out@GRAD": [s]}, {"_lods": {"X": [None]}},
                                   ("X@GRAD",), ctx)["X@GRAD"][0]
    np.testing.assert_array_equal(cp.asnumpy(ds), np.concatenate([x[:1], np.zeros((2, 2))]))


def test_gradient_array_with_missing_items_gives_zeros():
    """array_to_lod_tensor of a gradient array: steps no gradient reached are zeros; of a
    forward array, a missing item is an error."""
    from dask_fluid.ops import lod_array_ops as k

    table = LoDRankTable._of_lod(((0, 2, 5),), 0)  # (1, 3), (0, 2)
    grads = LoDTensorArray([LoDTensor._of(np.ones((2, 1)), ())])
    attrs = {"_lods": {"X": [None], "RankTable": [None]}}
    out = k._array_to_lod_tensor({"X": [grads], "RankTable": [table]}, attrs, ("Out",),
                                 _table_ctx({}, ins={"X": "arr@GRAD"}))
    np.testing.assert_array_equal(out["Out"][0].ravel(), [1, 0, 1, 0, 0])
    with pytest.raises(ValueError, match="item 1 of 'arr' .* was never written"):
        k._array_to_lod_tensor({"X": [grads], "RankTable": [table]}, attrs, ("Out",),
                               _table_ctx({}, ins={"X": "arr"}))


def test_errors_name_what_is_wrong():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [1], dtype="float32")
        layers.lod_rank_table(x)
    with pytest.raises(ExecutionError, match="has no LoD"):
        fluid.Executor().run(main, feed={"x": np.zeros((3, 1), "float32")})
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [1], dtype="float32", lod_level=1)
        table = layers.lod_rank_table(x, level=0)
        y = layers.data("y", [1], dtype="float32")
        layers.lod_tensor_to_array(y, table)
    feed = {"x": _lod_tensor(np.zeros((3, 1), "float32"), [[1, 2]]),
            "y": np.zeros((3, 1), "float32")}
    with pytest.raises(ExecutionError, match="lod_tensor_to_array: X 'y' has no LoD"):
        fluid.Executor().run(main, feed=feed)
