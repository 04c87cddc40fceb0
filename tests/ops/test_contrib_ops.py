"""Kernels of dask_fluid.ops.contrib_ops against numpy references ported from Paddle 1.8's
unit tests (test_fused_elemwise_activation_op.py, test_shuffle_batch_op.py,
test_partial_concat_op.py, test_partial_sum_op.py, test_batch_fc_op.py,
test_rank_attention_op.py), and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from . import run_op

rng = np.random.default_rng(3)


# -- fused_elemwise_activation: Paddle's compound references ------------------------------------

def _ref_fused(x, y, functors, scale, axis=-1):
    """(out, intermediate) as test_fused_elemwise_activation_op.py's compute functions."""
    if y.ndim < x.ndim:  # broadcast y at axis as the op's doc describes
        ax = x.ndim - y.ndim if axis == -1 else axis
        yb = y.reshape((1,) * ax + y.shape + (1,) * (x.ndim - ax - y.ndim))
    else:
        yb = y
    unary = {"scale": lambda v: v * scale, "relu": lambda v: np.maximum(v, 0),
             "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}
    binary = {"elementwise_add": np.add, "elementwise_mul": np.multiply}
    if functors[0] in binary:
        inter = unary[functors[1]](y)
        return binary[functors[0]](x, unary[functors[1]](yb)), inter
    inter = binary[functors[1]](x, yb)
    return unary[functors[0]](inter), inter


@pytest.mark.parametrize("functors", [
    ["elementwise_add", "scale"], ["scale", "elementwise_add"], ["elementwise_add", "relu"],
    ["relu", "elementwise_add"], ["elementwise_mul", "scale"], ["tanh", "elementwise_add"],
    ["elementwise_mul", "tanh"], ["elementwise_mul", "sigmoid"]])
@pytest.mark.parametrize("yshape, axis", [((2, 3, 4), -1), ((4,), -1), ((3,), 1)])
def test_fused_elemwise_activation_matches_reference(functors, yshape, axis):
    x = rng.standard_normal((2, 3, 4))
    y = rng.standard_normal(yshape)
    res = run_op("fused_elemwise_activation", {"X": [x], "Y": [y]},
                 {"functor_list": functors, "scale": 0.3, "axis": axis})
    out, inter = _ref_fused(x, y, functors, 0.3, axis)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12)
    np.testing.assert_allclose(res["IntermediateOut"][0], inter, rtol=1e-12)
    assert res["IntermediateOut"][0].shape == inter.shape


def test_fused_elemwise_activation_grad_reads_saved_intermediate():
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    d = rng.standard_normal((3, 4))
    attrs = {"functor_list": ["elementwise_mul_grad", "tanh_grad"], "save_intermediate_out": True}
    inter = np.tanh(y)
    res = run_op("fused_elemwise_activation_grad",
                 {"X": [x], "Y": [y], "Out": [x * inter], "IntermediateOut": [inter],
                  "Out@GRAD": [d]}, attrs)
    np.testing.assert_allclose(res["X@GRAD"][0], d * inter)
    np.testing.assert_allclose(res["Y@GRAD"][0], d * x * (1 - inter ** 2))
    np.testing.assert_allclose(res["IntermediateOut@GRAD"][0], d * x)
    res = run_op("fused_elemwise_activation_grad",
                 {"X": [x], "Y": [y], "Out": [x * inter], "Out@GRAD": [None]}, attrs,
                 outs=("X@GRAD",))
    assert set(res) == {"X@GRAD"} and not res["X@GRAD"][0].any()


def test_fused_elemwise_activation_float32_stays_float32():
    x = rng.standard_normal((2, 3)).astype(np.float32)
    res = run_op("fused_elemwise_activation", {"X": [x], "Y": [x]},
                 {"functor_list": ["scale", "elementwise_add"], "scale": 2.0})
    assert res["Out"][0].dtype == np.float32


@pytest.mark.parametrize("functors, match", [
    (["elementwise_add"], "list of 2"), (["relu", "tanh"], "no binary functor"),
    (["elementwise_add", "gelu"], "'gelu' is not supported"),
    (["elementwise_sub", "relu"], "no binary functor")])
def test_fused_elemwise_activation_rejects_functor_lists(functors, match):
    x = np.ones((2, 2))
    with pytest.raises(ValueError, match=match):
        run_op("fused_elemwise_activation", {"X": [x], "Y": [x]}, {"functor_list": functors})


def test_fused_elemwise_activation_grad_needs_grad_functors():
    x = np.ones((2, 2))
    with pytest.raises(ValueError, match="grad functors"):
        run_op("fused_elemwise_activation_grad", {"X": [x], "Y": [x], "Out@GRAD": [x]},
               {"functor_list": ["elementwise_add", "relu"]})


# -- shuffle_batch -------------------------------------------------------------------------------

def test_shuffle_batch_permutes_rows_and_grad_unshuffles():
    x = rng.standard_normal((4, 3, 2))
    res = run_op("shuffle_batch", {"X": [x]}, {"startup_seed": 2019})
    out, idx = res["Out"][0], res["ShuffleIdx"][0]
    assert sorted(idx.tolist()) == list(range(12)) and idx.dtype == np.int64
    # Paddle's reference: out[idx[i]] = x[i] over the rows of x viewed as [-1, last dim]
    ref = np.empty((12, 2))
    for i, j in enumerate(idx):
        ref[j] = x.reshape(12, 2)[i]
    np.testing.assert_array_equal(out, ref.reshape(x.shape))
    assert res["SeedOut"][0].shape == (1,) and res["SeedOut"][0].dtype == np.int64
    d = rng.standard_normal(x.shape)
    g = run_op("shuffle_batch_grad", {"X": [x], "ShuffleIdx": [idx], "Out@GRAD": [d]})
    np.testing.assert_array_equal(g["X@GRAD"][0].reshape(12, 2), d.reshape(12, 2)[idx])
    # the gradient of Σ out·d is d read back through the permutation
    back = run_op("shuffle_batch_grad", {"X": [x], "ShuffleIdx": [idx], "Out@GRAD": [out]})
    np.testing.assert_array_equal(back["X@GRAD"][0], x)


def test_shuffle_batch_seed_input_wins_and_is_deterministic():
    x = np.arange(20.0).reshape(10, 2)
    a = run_op("shuffle_batch", {"X": [x], "Seed": [np.array([5], np.int64)]},
               {"startup_seed": 1})
    b = run_op("shuffle_batch", {"X": [x]}, {"startup_seed": 5})
    c = run_op("shuffle_batch", {"X": [x]}, {"startup_seed": -5})
    np.testing.assert_array_equal(a["Out"][0], b["Out"][0])
    np.testing.assert_array_equal(a["SeedOut"][0], b["SeedOut"][0])
    assert not np.array_equal(a["ShuffleIdx"][0], c["ShuffleIdx"][0])


# -- partial_concat / partial_sum (test_partial_concat_op.py, test_partial_sum_op.py) -----------

def _ref_partial(xs, start, length, op):
    cols = xs[0].shape[1]
    start = start + cols if start < 0 else start
    end = cols if length < 0 else start + length
    parts = [x[:, start:end] for x in xs]
    return np.concatenate(parts, axis=1) if op == "partial_concat" else np.sum(parts, axis=0)


@pytest.mark.parametrize("op", ["partial_concat", "partial_sum"])
@pytest.mark.parametrize("start, length", [(0, 2), (1, -1), (-3, 2), (4, 1), (-5, -1)])
def test_partial_ops_match_reference(op, start, length):
    xs = [rng.standard_normal((3, 5)) for _ in range(3)]
    out = run_op(op, {"X": xs}, {"start_index": start, "length": length})["Out"][0]
    np.testing.assert_allclose(out, _ref_partial(xs, start, length, op))


def test_partial_ops_ints_and_docstring_example():
    x = np.array([[0, 1, 2], [3, 4, 5]], np.int64)
    y = np.array([[6, 7, 8], [9, 10, 11]], np.int64)
    out = run_op("partial_concat", {"X": [x, y]}, {"start_index": 0, "length": 2})["Out"][0]
    np.testing.assert_array_equal(out, [[0, 1, 6, 7], [3, 4, 9, 10]])
    out = run_op("partial_sum", {"X": [x, y]}, {"start_index": 0, "length": 2})["Out"][0]
    np.testing.assert_array_equal(out, [[6, 8], [12, 14]])
    assert out.dtype == np.int64


def test_partial_grads_place_dout_in_the_slice():
    xs = [np.ones((2, 4)), np.ones((2, 4))]
    d = np.arange(4.0).reshape(2, 2)
    g = run_op("partial_sum_grad", {"X": xs, "Out@GRAD": [d]}, {"start_index": 1, "length": 2})
    np.testing.assert_array_equal(g["X@GRAD"][1], [[0, 0, 1, 0], [0, 2, 3, 0]])
    d = np.arange(4.0).reshape(2, 2)
    g = run_op("partial_concat_grad", {"X": xs, "Out@GRAD": [d]},
               {"start_index": -1, "length": 1})
    np.testing.assert_array_equal(g["X@GRAD"][0], [[0, 0, 0, 0], [0, 0, 0, 2]])
    np.testing.assert_array_equal(g["X@GRAD"][1], [[0, 0, 0, 1], [0, 0, 0, 3]])


@pytest.mark.parametrize("op", ["partial_concat", "partial_sum"])
def test_partial_ops_errors(op):
    x = np.ones((2, 3))
    with pytest.raises(ValueError, match="start_index must be in"):
        run_op(op, {"X": [x]}, {"start_index": 3})
    with pytest.raises(ValueError, match="exceeds"):
        run_op(op, {"X": [x]}, {"start_index": 1, "length": 3})
    with pytest.raises(ValueError, match="same shape"):
        run_op(op, {"X": [x, np.ones((2, 4))]})
    with pytest.raises(ValueError, match="2-D"):
        run_op(op, {"X": [np.ones(3)]})


# -- batch_fc (test_batch_fc_op.py's np_cal_batchfc) ---------------------------------------------

def test_batch_fc_matches_reference():
    inp, w, b = rng.standard_normal((3, 5, 4)), rng.standard_normal((3, 4, 2)), \
        rng.standard_normal((3, 2))
    ref = np.zeros((3, 5, 2))
    for s in range(3):
        ref[s] = np.dot(inp[s], w[s]) + b[s]
    np.testing.assert_allclose(run_op("batch_fc", {"Input": [inp], "W": [w], "Bias": [b]})
                               ["Out"][0], ref)
    with pytest.raises(ValueError, match="Bias must be"):
        run_op("batch_fc", {"Input": [inp], "W": [w], "Bias": [np.ones((3, 3))]})
    with pytest.raises(ValueError, match="must agree"):
        run_op("batch_fc", {"Input": [inp], "W": [np.ones((3, 5, 2))], "Bias": [b]})


# -- rank_attention (test_rank_attention_op.py's np_rank_attention) ------------------------------

def _gen_rank_offset(r, pv_nums, max_rank):
    ins_all, msgs = 0, []
    for _ in range(pv_nums):
        ins_pv = int(r.integers(1, max_rank + 2))
        ranks = list(range(1, ins_pv + 1))
        r.shuffle(ranks)
        ins_all += ins_pv
        msgs.append(ranks)
    off = np.full((ins_all, 2 * max_rank + 1), -1, np.int32)
    index = 0
    for pv in msgs:
        start = index
        for j in range(len(pv)):
            rank = pv[j] if pv[j] <= max_rank else -1
            off[index, 0] = rank
            if rank > 0:
                for k in range(len(pv)):
                    fast = pv[k] if pv[k] <= max_rank else -1
                    if fast > 0:
                        off[index, 2 * (fast - 1) + 1] = pv[k]
                        off[index, 2 * (fast - 1) + 2] = start + k
            index += 1
    return off


def _np_rank_attention(x, off, param, max_rank):
    n, c = x.shape
    help_ = np.zeros((n, max_rank * c))
    out = np.zeros((n, param.shape[1]))
    for i in range(n):
        lower = off[i, 0] - 1
        for k in range(max_rank):
            faster = off[i, 2 * k + 1] - 1
            if lower < 0 or faster < 0:
                continue
            help_[i, k * c:(k + 1) * c] = x[off[i, 2 * k + 2]]
            start = (lower * max_rank + faster) * c
            out[i] += help_[i, k * c:(k + 1) * c] @ param[start:start + c]
    return out, help_


def test_rank_attention_matches_reference_and_grad():
    r = np.random.default_rng(7)
    max_rank, c, p = 3, 4, 5
    off = _gen_rank_offset(r, 12, max_rank)
    x = r.standard_normal((off.shape[0], c))
    param = r.standard_normal((max_rank * max_rank * c, p))
    res = run_op("rank_attention", {"X": [x], "RankOffset": [off], "RankParam": [param]},
                 {"MaxRank": max_rank})
    out, help_ = _np_rank_attention(x, off, param, max_rank)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res["InputHelp"][0], help_)
    np.testing.assert_array_equal(res["InsRank"][0][:, 0], off[:, 0])
    # the gradient of Σ out·d w.r.t. the parameter is linear: build it block by block
    d = r.standard_normal(out.shape)
    ref = np.zeros_like(param)
    for i in range(x.shape[0]):
        for k in range(max_rank):
            lower, faster = off[i, 0] - 1, off[i, 2 * k + 1] - 1
            if lower >= 0 and faster >= 0:
                s = (lower * max_rank + faster) * c
                ref[s:s + c] += np.outer(help_[i, k * c:(k + 1) * c], d[i])
    g = run_op("rank_attention_grad", {"X": [x], "RankOffset": [off], "RankParam": [param],
                                       "Out@GRAD": [d]}, {"MaxRank": max_rank})
    np.testing.assert_allclose(g["RankParam@GRAD"][0], ref, rtol=1e-12, atol=1e-12)


def test_rank_attention_errors():
    x = np.ones((2, 3))
    off = np.full((2, 7), -1, np.int32)
    with pytest.raises(ValueError, match="RankOffset must be"):
        run_op("rank_attention", {"X": [x], "RankOffset": [off[:, :5]],
                                  "RankParam": [np.ones((27, 2))]})
    with pytest.raises(ValueError, match="RankParam must be"):
        run_op("rank_attention", {"X": [x], "RankOffset": [off], "RankParam": [np.ones((9, 2))]})
    off[0, :3] = [1, 1, 5]
    with pytest.raises(ValueError, match="outside X"):
        run_op("rank_attention", {"X": [x], "RankOffset": [off],
                                  "RankParam": [np.ones((27, 2))]})
