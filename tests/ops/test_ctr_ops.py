"""Kernels of the CTR ops (cvm, data_norm, filter_by_instag, shard_index, hash, the
SelectedRows helpers) and mean_iou against loop references ported from Paddle's unit tests."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_fluid.ops import SelectedRows
from dask_fluid.ops.ctr_ops import xxh64

from . import run_op

# -- cvm


def cvm_by_loops(x, use_cvm):
    rows = []
    for r in x:
        if use_cvm:
            s = math.log(r[0] + 1)
            rows.append([s, math.log(r[1] + 1) - s, *r[2:]])
        else:
            rows.append(list(r[2:]))
    return np.array(rows)


@pytest.mark.parametrize("use_cvm", [True, False])
def test_cvm_forward(use_cvm):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, (6, 5))
    y = run_op("cvm", {"X": [x], "CVM": [rng.uniform(0, 1, (6, 2))]}, {"use_cvm": use_cvm})
    np.testing.assert_allclose(y["Y"][0], cvm_by_loops(x, use_cvm), rtol=1e-12)


@pytest.mark.parametrize("use_cvm", [True, False])
def test_cvm_grad_writes_cvm_into_first_columns(use_cvm):
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 10, (4, 5))
    cvm = rng.uniform(0, 5, (4, 2))
    dy = rng.standard_normal((4, 5 if use_cvm else 3))
    dx = run_op("cvm_grad", {"X": [x], "CVM": [cvm], "Y@GRAD": [dy]},
                {"use_cvm": use_cvm})["X@GRAD"][0]
    for i in range(4):
        assert dx[i, 0] == cvm[i, 0] and dx[i, 1] == cvm[i, 1]
        for j in range(2, 5):
            assert dx[i, j] == dy[i, j if use_cvm else j - 2]


def test_cvm_grad_with_lod_shares_a_cvm_row_per_sequence():
    x = np.ones((5, 3))
    cvm = np.array([[1.0, 2.0], [3.0, 4.0]])
    res = run_op("cvm_grad", {"X": [x], "CVM": [cvm], "Y@GRAD": [np.ones((5, 3))]},
                 {"_lods": {"X": [((0, 2, 5),)]}})
    dx = res["X@GRAD"][0]
    np.testing.assert_array_equal(dx[:, :2], [[1, 2], [1, 2], [3, 4], [3, 4], [3, 4]])
    assert res["@LOD"]["X@GRAD"] == [((0, 2, 5),)]


def test_cvm_errors():
    with pytest.raises(ValueError, match=r"CVM must be \[N, 2\]"):
        run_op("cvm", {"X": [np.ones((2, 4))], "CVM": [np.ones((2, 3))]})
    with pytest.raises(ValueError, match="X must be 2-D"):
        run_op("cvm", {"X": [np.ones(4)], "CVM": [np.ones((2, 2))]})


# -- data_norm


def data_norm_by_loops(x, size, total, square, eps, slot_dim=-1):
    """(Y, Means, Scales, dBatchSize, dBatchSum, dBatchSquareSum) element by element."""
    n, c = x.shape
    means = [total[j] / size[j] for j in range(c)]
    scales = [math.sqrt(size[j] / square[j]) for j in range(c)]
    y = np.zeros_like(x)
    d_size, d_sum, d_sq = np.zeros(c), np.zeros(c), np.zeros(c)
    for i in range(n):
        for j in range(c):
            show = x[i, (j // slot_dim) * slot_dim] if slot_dim > 0 else 1.0
            if slot_dim > 0 and abs(show) < 1e-7:
                continue
            y[i, j] = (x[i, j] - means[j]) * scales[j]
            d_size[j] += 1
            d_sum[j] += x[i, j]
            d_sq[j] += (x[i, j] - means[j]) ** 2
    for j in range(c):
        if slot_dim > 0:
            if d_size[j] >= 1:
                d_sum[j] /= d_size[j]
                d_sq[j] = d_sq[j] / d_size[j] + d_size[j] * eps
                d_size[j] = 1
        else:
            d_sq[j] += n * eps
    return y, np.array(means), np.array(scales), d_size, d_sum, d_sq


@pytest.mark.parametrize("slot_dim", [-1, 2, 3])
def test_data_norm_forward_and_statistics(slot_dim):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 6))
    if slot_dim > 0:
        x[1, 0] = 0.0  # an empty slot in row 1
        x[3, slot_dim] = 0.0
    size = rng.uniform(1e3, 1e4, 6)
    total = rng.standard_normal(6) * 100
    square = rng.uniform(1e3, 1e4, 6)
    ins = {"X": [x], "BatchSize": [size], "BatchSum": [total], "BatchSquareSum": [square]}
    attrs = {"epsilon": 1e-4, "slot_dim": slot_dim}
    res = run_op("data_norm", ins, attrs)
    y, means, scales, d_size, d_sum, d_sq = data_norm_by_loops(x, size, total, square, 1e-4,
                                                               slot_dim)
    np.testing.assert_allclose(res["Y"][0], y, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res["Means"][0], means, rtol=1e-12)
    np.testing.assert_allclose(res["Scales"][0], scales, rtol=1e-12)
    dy = rng.standard_normal(x.shape)
    g = run_op("data_norm_grad", {"X": [x], "Means": res["Means"], "Scales": res["Scales"],
                                  "Y@GRAD": [dy]}, attrs)
    # Fluid's CPU kernel: dX = dY · Scales, empty slots included
    np.testing.assert_allclose(g["X@GRAD"][0], dy * scales, rtol=1e-12)
    np.testing.assert_allclose(g["BatchSize@GRAD"][0], d_size, rtol=1e-12)
    np.testing.assert_allclose(g["BatchSum@GRAD"][0], d_sum, rtol=1e-12)
    np.testing.assert_allclose(g["BatchSquareSum@GRAD"][0], d_sq, rtol=1e-12)


def test_data_norm_paddle_case():
    # Paddle's test_data_norm_op.py: x uniform in float32, stats 1e4 / 0 / 1e4 -> y = x
    x = np.random.default_rng(3).random((2, 3)).astype(np.float32)
    res = run_op("data_norm", {"X": [x], "BatchSize": [np.full(3, 1e4, np.float32)],
                               "BatchSum": [np.zeros(3, np.float32)],
                               "BatchSquareSum": [np.full(3, 1e4, np.float32)]})
    assert res["Y"][0].dtype == np.float32
    np.testing.assert_allclose(res["Y"][0], x, rtol=1e-6)
    np.testing.assert_array_equal(res["Scales"][0], np.ones(3, np.float32))


def test_data_norm_errors():
    ins = {"X": [np.ones((2, 3))], "BatchSize": [np.ones(3)], "BatchSum": [np.ones(3)],
           "BatchSquareSum": [np.ones(3)]}
    with pytest.raises(NotImplementedError, match="sync_stats=True"):
        run_op("data_norm", ins, {"sync_stats": True})
    with pytest.raises(ValueError, match="slot_dim"):
        run_op("data_norm", ins, {"slot_dim": 2})
    with pytest.raises(ValueError, match=r"BatchSum must have shape \[3\]"):
        run_op("data_norm", {**ins, "BatchSum": [np.ones(4)]})
    with pytest.raises(ValueError, match="must be 2-D"):
        run_op("data_norm", {**ins, "X": [np.ones((2, 3, 1))]})


# -- filter_by_instag


def filter_by_instag_by_loops(ins, ins_off, tags, tag_off, wanted):
    rows, imap = [], []
    for i in range(len(tag_off) - 1):
        if set(tags[tag_off[i]:tag_off[i + 1]].ravel()) & set(wanted):
            imap.append([len(rows), ins_off[i], ins_off[i + 1] - ins_off[i]])
            rows.extend(ins[ins_off[i]:ins_off[i + 1]])
    return np.array(rows), np.array(imap)


def test_filter_by_instag_lod():
    # Paddle's test_filter_by_instag_op.py (TestFilterByInstag1-like): 4 instances
    x = np.arange(24, dtype=np.float64).reshape(8, 3)
    ins_off = (0, 1, 3, 6, 8)
    tags = np.array([[0], [1], [2], [1], [3], [2]], np.int64)
    tag_off = (0, 1, 3, 5, 6)
    res = run_op("filter_by_instag",
                 {"Ins": [x], "Ins_tag": [tags], "Filter_tag": [np.array([1, 2], np.int64)]},
                 {"is_lod": True, "_lods": {"Ins": [(ins_off,)], "Ins_tag": [(tag_off,)]}})
    out, imap = filter_by_instag_by_loops(x, ins_off, tags, tag_off, [1, 2])
    np.testing.assert_array_equal(res["Out"][0], out)
    np.testing.assert_array_equal(res["IndexMap"][0], imap)
    np.testing.assert_array_equal(res["LossWeight"][0], np.ones((3, 1), np.float32))
    assert res["LossWeight"][0].dtype == np.float32
    assert res["@LOD"]["Out"] == [((0, 2, 5, 7),)]
    assert res["@LOD"]["IndexMap"] == [((0, 1, 2, 3),)]
    dout = np.random.default_rng(4).standard_normal(out.shape)
    g = run_op("filter_by_instag_grad", {"IndexMap": res["IndexMap"], "Ins": [x],
                                         "LossWeight": res["LossWeight"], "Out@GRAD": [dout]},
               {"_lods": {"Ins": [(ins_off,)]}})
    expect = np.zeros_like(x)
    for o, s, r in imap:
        expect[s:s + r] = dout[o:o + r]
    np.testing.assert_array_equal(g["Ins@GRAD"][0], expect)


def test_filter_by_instag_empty_uses_out_val_if_empty():
    x = np.ones((3, 2))
    res = run_op("filter_by_instag", {"Ins": [x], "Ins_tag": [np.array([[1], [2], [3]])],
                                      "Filter_tag": [np.array([9], np.int64)]},
                 {"is_lod": False, "out_val_if_empty": 7,
                  "_lods": {"Ins_tag": [((0, 1, 2, 3),)]}})
    np.testing.assert_array_equal(res["Out"][0], [[7.0, 7.0]])
    np.testing.assert_array_equal(res["IndexMap"][0], [[0, 1, 1]])
    np.testing.assert_array_equal(res["LossWeight"][0], [[0.0]])
    g = run_op("filter_by_instag_grad", {"IndexMap": res["IndexMap"], "Ins": [x],
                                         "LossWeight": res["LossWeight"],
                                         "Out@GRAD": [np.ones((1, 2))]})
    np.testing.assert_array_equal(g["Ins@GRAD"][0], np.zeros((3, 2)))


def test_filter_by_instag_errors():
    ins = {"Ins": [np.ones((3, 2))], "Ins_tag": [np.array([[1], [2], [3]])],
           "Filter_tag": [np.array([1])]}
    with pytest.raises(ValueError, match="Ins_tag must be a LoD tensor"):
        run_op("filter_by_instag", ins, {"is_lod": False})
    with pytest.raises(ValueError, match="is_lod=True but Ins has no LoD"):
        run_op("filter_by_instag", ins, {"is_lod": True, "_lods": {"Ins_tag": [((0, 3),)]}})


# -- shard_index


@pytest.mark.parametrize("shard_id", [0, 1, 2])
def test_shard_index(shard_id):
    # Paddle's test_shard_index_op.py: index_num 20, nshards 3, ignore_value -1
    x = np.random.default_rng(5).integers(0, 20, (10, 1)).astype(np.int64)
    out = run_op("shard_index", {"X": [x]}, {"index_num": 20, "nshards": 3,
                                             "shard_id": shard_id, "ignore_value": -1})["Out"][0]
    size = 7  # ceil(20 / 3)
    for i in range(10):
        v = int(x[i, 0])
        assert out[i, 0] == (v % size if v // size == shard_id else -1)
    assert out.dtype == np.int64


def test_shard_index_errors():
    x = np.array([[3]], np.int64)
    with pytest.raises(ValueError, match=r"shard_id must be in \[0, 2\)"):
        run_op("shard_index", {"X": [x]}, {"index_num": 5, "nshards": 2, "shard_id": 2})
    with pytest.raises(ValueError, match=r"X values must be in \[0, 3\)"):
        run_op("shard_index", {"X": [x]}, {"index_num": 3, "nshards": 2, "shard_id": 0})
    with pytest.raises(ValueError, match="last dimension 1"):
        run_op("shard_index", {"X": [np.ones((2, 2), np.int64)]},
               {"index_num": 5, "nshards": 2, "shard_id": 0})


# -- hash


def test_xxh64_published_vectors():
    def h(data: bytes, seed: int = 0) -> int:
        return int(xxh64(np.frombuffer(data, np.uint8).reshape(1, -1), seed)[0])

    assert int(xxh64(np.zeros((1, 0), np.uint8), 0)[0]) == 0xEF46DB3751D8E999
    assert h(b"a") == 0xD24EC4F1A98C6E5B
    assert h(b"abc") == 0x44BC2CF5AD770999
    assert h(b"Nobody inspects the spammish repetition") == 0xFBCEA83C8A378BF1  # >= 32 bytes


def test_xxh64_of_int64_rows_matches_paddle_values():
    # Paddle 1.8's TestHashOp2/3 values hash all 8 bytes of an int64: the XXH64 itself
    d = np.array([1, 2**32 + 1], np.int64).view(np.uint8).reshape(2, 8)
    got = [int(xxh64(d, k)[i] % 10000) for i in range(2) for k in range(2)]
    assert got == [1269, 9609, 3868, 7268]
    d = np.array([10, 5], np.int64).view(np.uint8).reshape(2, 8)
    got = [int(xxh64(d, k)[i] % 2**32) for i in range(2) for k in range(2)]
    assert got == [1204014882, 393011615, 3586283837, 2814821595]


def test_hash_paddle_values():
    np.random.seed(1)  # Paddle's test_hash_op.py input
    x = np.random.randint(0, 10, (8, 1)).astype("int32")
    out = run_op("hash", {"X": [x]}, {"num_hash": 2, "mod_by": 10000})["Out"][0]
    expect = [[[3481], [7475]], [[1719], [5986]], [[8473], [694]], [[3481], [7475]],
              [[4372], [9456]], [[4372], [9456]], [[6897], [3218]], [[9038], [7951]]]
    np.testing.assert_array_equal(out, expect)
    assert out.dtype == np.int32 and out.shape == (8, 2, 1)


def test_hash_int64_hashes_all_eight_bytes_as_fluid_1_8():
    # hash_op.h's HashKernel<int64_t> hashes sizeof(T) · last_dim bytes: Paddle 1.8's
    # TestHashOp2/3 values (ids sharing their low 32 bits hash apart)
    x = np.array([[1], [2**32 + 1]], np.int64)
    out = run_op("hash", {"X": [x]}, {"num_hash": 2, "mod_by": 10000})["Out"][0]
    np.testing.assert_array_equal(out, [[[1269], [9609]], [[3868], [7268]]])
    assert out.dtype == np.int64
    x = np.array([[10], [5]], np.int64)
    out = run_op("hash", {"X": [x]}, {"num_hash": 2, "mod_by": 2**32})["Out"][0]
    np.testing.assert_array_equal(out.ravel(), [1204014882, 393011615, 3586283837, 2814821595])
    # a wider row: all its 8 · 3 little-endian bytes, seed = the hash's index
    x = np.array([[7, 2**40, -3], [1, 2, 3]], np.int64)
    out = run_op("hash", {"X": [x]}, {"num_hash": 3, "mod_by": 997})["Out"][0]
    for i, row in enumerate(x):
        data = np.frombuffer(row.astype("<i8").tobytes(), np.uint8).reshape(1, 24)
        assert [int(out[i, k, 0]) for k in range(3)] == [int(xxh64(data, k)[0] % 997)
                                                          for k in range(3)]


def test_hash_errors():
    with pytest.raises(TypeError, match="int32 or int64"):
        run_op("hash", {"X": [np.ones((2, 1))]})
    with pytest.raises(ValueError, match="num_hash must be > 0"):
        run_op("hash", {"X": [np.ones((2, 1), np.int32)]}, {"num_hash": 0})


# -- SelectedRows


def test_merge_selected_rows():
    # Paddle's test_merge_selected_rows_op.py: rows [0, 5, 5, 7], height 10
    value = np.arange(8, dtype=np.float32).reshape(4, 2)
    x = SelectedRows(np.array([7, 5, 0, 5], np.int64), value, 10)
    out = run_op("merge_selected_rows", {"X": [x]})["Out"][0]
    assert isinstance(out, SelectedRows) and out.height == 10
    merged = {}
    for r, v in zip([7, 5, 0, 5], value, strict=True):
        merged[r] = merged.get(r, 0) + v
    np.testing.assert_array_equal(out.rows, sorted(merged))
    np.testing.assert_array_equal(out.value, [merged[r] for r in sorted(merged)])
    np.testing.assert_array_equal(out.to_dense(), x.to_dense())


def test_get_tensor_from_selected_rows():
    value = np.arange(6.0).reshape(3, 2)
    x = SelectedRows(np.array([4, 1, 4], np.int64), value, 6)
    out = run_op("get_tensor_from_selected_rows", {"X": [x]})["Out"][0]
    np.testing.assert_array_equal(out, value)
    assert out is not value
    with pytest.raises(TypeError, match="X must be a SelectedRows"):
        run_op("get_tensor_from_selected_rows", {"X": [value]})
    with pytest.raises(TypeError, match="X must be a SelectedRows"):
        run_op("merge_selected_rows", {"X": [value]})


# -- mean_iou


def mean_iou_by_loops(pred, label, num_classes, wrongs=(), corrects=(), ious=()):
    wrong = [0] * num_classes
    correct = [0] * num_classes
    for w in wrongs:
        wrong = [a + int(b) for a, b in zip(wrong, w, strict=True)]
    for c in corrects:
        correct = [a + int(b) for a, b in zip(correct, c, strict=True)]
    for p, lab in zip(pred.ravel(), label.ravel(), strict=True):
        if p == lab:
            correct[p] += 1
        else:
            wrong[p] += 1
            wrong[lab] += 1
    valid = sum(1 for k in range(num_classes) if wrong[k] + correct[k] > 0)
    iou = sum(correct[k] / max(wrong[k] + correct[k], 1) for k in range(num_classes)) / valid
    return iou + sum(float(i[0]) for i in ious), wrong, correct


@pytest.mark.parametrize("extra", [0, 2])
def test_mean_iou(extra):
    rng = np.random.default_rng(6)
    k = 5
    pred = rng.integers(0, k, (20, 16)).astype(np.int32)
    label = rng.integers(0, k, (20, 16)).astype(np.int32)
    wrongs = [rng.integers(0, 10, k).astype(np.int32) for _ in range(extra)]
    corrects = [rng.integers(0, 10, k).astype(np.int32) for _ in range(extra)]
    ious = [rng.uniform(0, 1, 1).astype(np.float32) for _ in range(extra)]
    ins = {"Predictions": [pred], "Labels": [label]}
    if extra:
        ins.update(InWrongs=wrongs, InCorrects=corrects, InMeanIou=ious)
    res = run_op("mean_iou", ins, {"num_classes": k})
    iou, wrong, correct = mean_iou_by_loops(pred, label, k, wrongs, corrects, ious)
    np.testing.assert_allclose(res["OutMeanIou"][0], [iou], rtol=1e-6)
    np.testing.assert_array_equal(res["OutWrong"][0], wrong)
    np.testing.assert_array_equal(res["OutCorrect"][0], correct)
    assert res["OutMeanIou"][0].dtype == np.float32 and res["OutWrong"][0].dtype == np.int32


def test_mean_iou_unseen_classes_are_left_out():
    res = run_op("mean_iou", {"Predictions": [np.array([0, 0, 1])],
                              "Labels": [np.array([0, 0, 0])]}, {"num_classes": 4})
    # class 0: 2 / 3, class 1: 0 / 1, classes 2 and 3 unseen
    np.testing.assert_allclose(res["OutMeanIou"][0], [(2 / 3) / 2], rtol=1e-6)


def test_mean_iou_errors():
    with pytest.raises(ValueError, match=r"Labels must be class ids in \[0, 3\)"):
        run_op("mean_iou", {"Predictions": [np.array([0])], "Labels": [np.array([3])]},
               {"num_classes": 3})
    with pytest.raises(TypeError, match="Predictions must be int32 or int64"):
        run_op("mean_iou", {"Predictions": [np.array([0.0])], "Labels": [np.array([0])]},
               {"num_classes": 3})
