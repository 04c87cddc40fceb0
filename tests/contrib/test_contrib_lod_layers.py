"""fluid.contrib.layers' LoD layers (match_matrix_tensor, sequence_topk_avg_pooling,
var_conv_2d, fused_embedding_seq_pool): program structure as Fluid 1.8 builds it, values
through the Executor with LoD feeds, whole-program gradients, an MMDNN-style model that trains,
errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.contrib import layers as cl

from ..core.numeric_grad import program_grads_and_numeric


def _build(fn):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        out = fn()
    return main, startup, out


def _run(main, startup, feed, fetch, return_numpy=True):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope,
                   return_numpy=return_numpy), scope


def _lod(data, lens):
    return fluid.create_lod_tensor(np.asarray(data), [list(lens)], fluid.CPUPlace())


def _offsets(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(int)


def test_all_names_the_lod_layers():
    for name in ("match_matrix_tensor", "sequence_topk_avg_pooling", "var_conv_2d",
                 "fused_embedding_seq_pool"):
        assert name in cl.nn.__all__ and getattr(cl, name) is getattr(cl.nn, name)


# -- match_matrix_tensor -------------------------------------------------------------------------

def test_match_matrix_tensor_program_and_values():
    def fn():
        x = fluid.layers.data("x", [2], dtype="float32", lod_level=1)
        y = fluid.layers.data("y", [2], dtype="float32", lod_level=1)
        return cl.match_matrix_tensor(x, y, channel_num=2, act="tanh")
    main, startup, (out, tmp) = _build(fn)
    ops = main.global_block().ops
    assert [op.type for op in ops] == ["match_matrix_tensor", "tanh"]
    mm = ops[0]
    assert mm.inputs == {"X": ["x"], "Y": ["y"], "W": ["match_matrix_tensor_0.w_0"]}
    assert set(mm.outputs) == {"Out", "Tmp"} and mm.outputs["Tmp"] == [tmp.name]
    assert mm.attrs["dim_t"] == 2
    w = main.global_block().var("match_matrix_tensor_0.w_0")
    assert tuple(w.shape) == (2, 2, 2) and tmp.stop_gradient
    # Fluid's doc example: x.lod [[2, 3]], y.lod [[3, 1]] -> out.lod [[12, 6]], [18, 1]
    rng = np.random.default_rng(0)
    xv, yv = rng.random((5, 2)).astype("float32"), rng.random((4, 2)).astype("float32")
    (got,), scope = _run(main, startup, {"x": _lod(xv, [2, 3]), "y": _lod(yv, [3, 1])}, [out],
                         return_numpy=False)
    assert got.recursive_sequence_lengths() == [[12, 6]]
    wv = np.asarray(scope.vars["match_matrix_tensor_0.w_0"])
    ref = np.concatenate([(xv[0:2] @ wv[:, t] @ yv[0:3].T).ravel() for t in range(2)]
                         + [(xv[2:5] @ wv[:, t] @ yv[3:4].T).ravel() for t in range(2)])
    np.testing.assert_allclose(np.asarray(got).ravel(), np.tanh(ref), rtol=1e-5)


def test_match_matrix_tensor_errors():
    def fn(lod_level=1, y_width=2, channel_num=2):
        x = fluid.layers.data("x", [2], dtype="float32", lod_level=lod_level)
        y = fluid.layers.data("y", [y_width], dtype="float32", lod_level=1)
        return cl.match_matrix_tensor(x, y, channel_num=channel_num)
    with pytest.raises(ValueError, match="lod_level >= 1"):
        _build(lambda: fn(lod_level=0))
    with pytest.raises(ValueError, match="same width"):
        _build(lambda: fn(y_width=3))
    with pytest.raises(ValueError, match="channel_num"):
        _build(lambda: fn(channel_num=0))


# -- sequence_topk_avg_pooling -------------------------------------------------------------------

def test_sequence_topk_avg_pooling_program_and_values():
    def fn():
        x = fluid.layers.data("x", [1], dtype="float32", lod_level=1)
        row = fluid.layers.data("row", [10], dtype="float32", lod_level=1)
        col = fluid.layers.data("col", [10], dtype="float32", lod_level=1)
        return cl.sequence_topk_avg_pooling(x, row, col, topks=[1, 3, 5], channel_num=5)
    main, startup, out = _build(fn)
    (op,) = main.global_block().ops
    assert op.type == "sequence_topk_avg_pooling"
    assert op.inputs == {"X": ["x"], "ROW": ["row"], "COLUMN": ["col"]}
    assert set(op.outputs) == {"Out", "pos"}
    assert op.attrs["topks"] == [1, 3, 5] and op.attrs["channel_num"] == 5
    assert main.global_block().var(op.outputs["pos"][0]).stop_gradient
    assert tuple(out.shape) == (-1, 15)
    # Paddle's test_api: x [45, 1] lod [[30, 15]], row lod [[2, 3]], col lod [[3, 1]]
    rng = np.random.default_rng(1)
    xv = rng.random((45, 1)).astype("float32")
    feed = {"x": _lod(xv, [30, 15]), "row": _lod(rng.random((5, 10)).astype("float32"), [2, 3]),
            "col": _lod(rng.random((4, 10)).astype("float32"), [3, 1])}
    (got,), _ = _run(main, startup, feed, [out], return_numpy=False)
    assert got.recursive_sequence_lengths() == [[2, 3]]
    got = np.asarray(got)
    assert got.shape == (5, 15)
    # image 0 (2 x 3), channel 4, row 1: its top-1 / top-3 / top-5 averages
    vals = np.sort(xv[4 * 6 + 3:4 * 6 + 6, 0])[::-1]
    np.testing.assert_allclose(got[1, 12:15], [vals[0], vals.sum() / 3, vals.sum() / 5],
                               rtol=1e-6)


def test_sequence_topk_avg_pooling_errors():
    def fn(topks, channel_num=1):
        x = fluid.layers.data("x", [1], dtype="float32", lod_level=1)
        return cl.sequence_topk_avg_pooling(x, x, x, topks=topks, channel_num=channel_num)
    for bad in ([3, 1], [], [0, 2]):
        with pytest.raises(ValueError, match="increasing"):
            _build(lambda bad=bad: fn(bad))
    with pytest.raises(ValueError, match="channel_num"):
        _build(lambda: fn([1], 0))


# -- var_conv_2d ---------------------------------------------------------------------------------

def test_var_conv_2d_program_and_values():
    def fn():
        x = fluid.layers.data("x", [1], dtype="float32", lod_level=1)
        row = fluid.layers.data("row", [6], dtype="float32", lod_level=1)
        col = fluid.layers.data("col", [6], dtype="float32", lod_level=1)
        return cl.var_conv_2d(x, row, col, input_channel=2, output_channel=3,
                              filter_size=[3, 3], stride=1, act="relu")
    main, startup, out = _build(fn)
    ops = main.global_block().ops
    assert [op.type for op in ops] == ["var_conv_2d", "relu"]
    op = ops[0]
    assert op.inputs == {"X": ["x"], "ROW": ["row"], "COLUMN": ["col"],
                         "W": ["var_conv_2d_0.w_0"]}
    assert set(op.outputs) == {"Out", "Col"}
    assert main.global_block().var(op.outputs["Col"][0]).stop_gradient
    assert op.attrs == {**op.attrs, "InputChannel": 2, "OutputChannel": 3, "StrideH": 1,
                        "StrideW": 1, "KernelH": 3, "KernelW": 3}
    assert tuple(main.global_block().var("var_conv_2d_0.w_0").shape) == (3, 18)
    # Fluid's doc: row.lod [[5, 4]], col.lod [[6, 7]], x.lod [[60, 56]] -> out.lod [[90, 84]]
    rng = np.random.default_rng(2)
    xv = rng.standard_normal((116, 1)).astype("float32")
    feed = {"x": _lod(xv, [60, 56]), "row": _lod(np.zeros((9, 6), "float32"), [5, 4]),
            "col": _lod(np.zeros((13, 6), "float32"), [6, 7])}
    (got,), scope = _run(main, startup, feed, [out], return_numpy=False)
    assert got.recursive_sequence_lengths() == [[90, 84]]
    got = np.asarray(got).ravel()
    # image 0's output channel 1 at (2, 3): a plain 3x3 correlation of the zero-padded image
    w = np.asarray(scope.vars["var_conv_2d_0.w_0"]).reshape(3, 2, 3, 3)
    img = np.pad(xv[:60, 0].reshape(2, 5, 6), ((0, 0), (1, 1), (1, 1)))
    ref = (w[1] * img[:, 2:5, 3:6]).sum()
    np.testing.assert_allclose(got[1 * 30 + 2 * 6 + 3], max(ref, 0.0), rtol=1e-5, atol=1e-6)


def test_var_conv_2d_errors():
    def fn(**kw):
        x = fluid.layers.data("x", [1], dtype="float32", lod_level=1)
        args = {"input_channel": 1, "output_channel": 1, "filter_size": 3, **kw}
        return cl.var_conv_2d(x, x, x, **args)
    with pytest.raises(ValueError, match="filter_size"):
        _build(lambda: fn(filter_size=[1, 2, 3]))
    with pytest.raises(ValueError, match="stride"):
        _build(lambda: fn(stride="2"))
    with pytest.raises(ValueError, match="output_channel"):
        _build(lambda: fn(output_channel=0))


# -- fused_embedding_seq_pool --------------------------------------------------------------------

def test_fused_embedding_seq_pool_program_and_values():
    def fn():
        ids = fluid.layers.data("ids", [1], dtype="int64", lod_level=1)
        return cl.fused_embedding_seq_pool(ids, size=[20, 4], padding_idx=-2,
                                           param_attr="w", is_sparse=True)
    main, startup, out = _build(fn)
    (op,) = main.global_block().ops
    assert op.type == "fused_embedding_seq_pool"
    assert op.inputs == {"Ids": ["ids"], "W": ["w"]}
    assert op.attrs["padding_idx"] == 18 and op.attrs["combiner"] == "sum"
    assert op.attrs["is_sparse"] is True
    assert tuple(main.global_block().var("w").shape) == (20, 4) and tuple(out.shape) == (-1, 4)
    ids = np.array([[3], [18], [3], [7], [0]], np.int64)
    (got,), scope = _run(main, startup, {"ids": _lod(ids, [3, 2])}, [out])
    w = np.asarray(scope.vars["w"])
    np.testing.assert_allclose(got, np.stack([2 * w[3], w[7] + w[0]]), rtol=1e-6)


def test_fused_embedding_seq_pool_sparse_gradient_trains():
    def build():
        ids = fluid.layers.data("ids", [1], dtype="int64", lod_level=1)
        out = cl.fused_embedding_seq_pool(ids, size=[10, 3], is_sparse=True, param_attr="w")
        loss = fluid.layers.mean(out)
        fluid.optimizer.SGD(0.5).minimize(loss)
        return loss
    main, startup, loss = _build(build)
    grad_op = next(op for op in main.global_block().ops
                   if op.type == "fused_embedding_seq_pool_grad")
    assert set(grad_op.inputs) == {"Ids", "W", "Out@GRAD"}
    assert grad_op.outputs == {"W@GRAD": ["w@GRAD"]}
    assert main.global_block().var("w@GRAD").type == "selected_rows"
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    before = np.array(scope.vars["w"])
    ids = np.array([[1], [4], [1], [2]], np.int64)
    exe.run(main, feed={"ids": _lod(ids, [1, 3])}, fetch_list=[loss], scope=scope)
    after = np.asarray(scope.vars["w"])
    # mean over 2 x 3 outputs: each id's row moves by 0.5 / 6 per occurrence
    step = np.zeros_like(before)
    for i in (1, 4, 1, 2):
        step[i] += 0.5 / 6
    np.testing.assert_allclose(after, before - step, rtol=1e-5, atol=1e-7)


def test_fused_embedding_seq_pool_errors():
    def fn(**kw):
        ids = fluid.layers.data("ids", [1], dtype="int64", lod_level=kw.pop("lod_level", 1))
        return cl.fused_embedding_seq_pool(ids, size=[10, 3], **kw)
    with pytest.raises(NotImplementedError, match=r"combiner='mean'\) is not implemented"):
        _build(lambda: fn(combiner="mean"))
    with pytest.raises(ValueError, match="lod_level 1"):
        _build(lambda: fn(lod_level=0))
    with pytest.raises(ValueError, match="padding_idx"):
        _build(lambda: fn(padding_idx=10))


# -- whole programs ------------------------------------------------------------------------------

_XL, _YL, _DIM_T = [2, 3], [3, 2], 2


def _mmdnn(dtype="float64", train=False):
    """MMDNN's matching block: match_matrix_tensor -> var_conv_2d -> topk pooling -> fc."""
    x = fluid.layers.data("x", [3], dtype=dtype, lod_level=1)
    y = fluid.layers.data("y", [3], dtype=dtype, lod_level=1)
    row = fluid.layers.data("row", [1], dtype=dtype, lod_level=1)
    col = fluid.layers.data("col", [1], dtype=dtype, lod_level=1)
    mm, _ = cl.match_matrix_tensor(x, y, channel_num=_DIM_T, act="tanh", dtype=dtype,
                                   param_attr="mm_w")
    conv = cl.var_conv_2d(mm, row, col, input_channel=_DIM_T, output_channel=2,
                          filter_size=[3, 2], stride=1, act="relu", dtype=dtype,
                          param_attr="conv_w")
    pooled = cl.sequence_topk_avg_pooling(conv, row, col, topks=[1, 2], channel_num=2)
    # one score a query row, summed per pair
    score = fluid.layers.sequence_pool(fluid.layers.fc(pooled, 1, param_attr="fc_w"), "sum")
    return fluid.layers.mean(fluid.layers.square(score - 1.0))


def _mmdnn_feed(rng, dtype="float64"):
    return {"x": _lod(rng.standard_normal((5, 3)).astype(dtype), _XL),
            "y": _lod(rng.standard_normal((5, 3)).astype(dtype), _YL),
            "row": _lod(np.zeros((5, 1), dtype), _XL),
            "col": _lod(np.zeros((5, 1), dtype), _YL)}


def test_mmdnn_whole_program_gradient():
    feed = _mmdnn_feed(np.random.default_rng(3))
    res = program_grads_and_numeric(_mmdnn, feed, ["mm_w", "conv_w", "fc_w"])
    for name, (analytic, numeric) in res.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)


def test_mmdnn_trains():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        loss = _mmdnn("float32")
        fluid.optimizer.Adam(0.05).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = _mmdnn_feed(np.random.default_rng(4), "float32")
    losses = [float(np.asarray(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]).sum())
              for _ in range(30)]
    assert losses[-1] < 0.1 * losses[0], losses
