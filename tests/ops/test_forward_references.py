"""The forward of the image and dense kernels against independent references: scipy's
correlate2d and plain loops that follow Paddle 1.8's conv_op.cc and math/pooling.cc rules
literally (clipped pooling windows, exclusive averages, ceil_mode, first maximum) for conv2d and
pool2d, scikit-learn's StandardScaler for batch_norm, a loop over the batch for matmul."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid

from . import conv2d_by_loops, run_op

rng = np.random.default_rng(0)


@pytest.mark.parametrize("stride,pads,dilation,groups", [
    ((1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 1), (1, 0, 2, 1), (1, 2), 2),
    ((1, 2), (2, 2, 1, 1), (2, 1), 4),
])
def test_conv2d_matches_direct_loops(stride, pads, dilation, groups):
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((8, 4 // groups, 3, 2))
    out = run_op("conv2d", {"Input": [x], "Filter": [w]},
                 {"strides": list(stride), "paddings": list(pads),
                  "dilations": list(dilation), "groups": groups})["Output"][0]
    np.testing.assert_allclose(out, conv2d_by_loops(x, w, stride, pads, dilation, groups)[0],
                               rtol=1e-10, atol=1e-10)


def test_conv2d_matches_scipy_correlate():
    signal = pytest.importorskip("scipy.signal")
    x = rng.standard_normal((1, 3, 9, 8))
    w = rng.standard_normal((2, 3, 3, 4))
    out = run_op("conv2d", {"Input": [x], "Filter": [w]}, {})["Output"][0]
    for f in range(2):
        ref = sum(signal.correlate2d(x[0, c], w[f, c], mode="valid") for c in range(3))
        np.testing.assert_allclose(out[0, f], ref, rtol=1e-10, atol=1e-10)


def test_conv2d_same_and_valid_padding_algorithms():
    x = rng.standard_normal((1, 2, 7, 5))
    w = rng.standard_normal((3, 2, 3, 3))
    same = run_op("conv2d", {"Input": [x], "Filter": [w]},
                  {"padding_algorithm": "SAME", "strides": [2, 2]})["Output"][0]
    assert same.shape == (1, 3, 4, 3)  # ceil(7 / 2), ceil(5 / 2)
    # SAME pads (total // 2, total - total // 2): 7 -> total 2 -> (1, 1); 5 -> total 2
    np.testing.assert_allclose(same, conv2d_by_loops(x, w, (2, 2), (1, 1, 1, 1), (1, 1), 1)[0])
    valid = run_op("conv2d", {"Input": [x], "Filter": [w]},
                   {"padding_algorithm": "VALID", "paddings": [5, 5]})["Output"][0]
    assert valid.shape == (1, 3, 5, 3)


def _naive_pool(x, kind, k, s, p, ceil_mode, exclusive):
    n, c, h, w = x.shape
    def size(d, kk, ss, pp):
        span = d + 2 * pp - kk
        return (span + ss - 1) // ss + 1 if ceil_mode else span // ss + 1
    oh, ow = size(h, k[0], s[0], p[0]), size(w, k[1], s[1], p[1])
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * s[0] - p[0], j * s[1] - p[1]
            he, we = min(hs + k[0], h), min(ws + k[1], w)
            hs, ws = max(hs, 0), max(ws, 0)
            window = x[:, :, hs:he, ws:we]
            if kind == "max":
                out[:, :, i, j] = window.max(axis=(2, 3))
            else:
                size_ = (he - hs) * (we - ws) if exclusive else k[0] * k[1]
                out[:, :, i, j] = window.sum(axis=(2, 3)) / size_
    return out


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("k,s,p,ceil_mode,exclusive", [
    ((2, 2), (2, 2), (0, 0), False, True),
    ((3, 3), (2, 2), (1, 1), False, True),
    ((3, 2), (2, 1), (1, 0), True, True),
    ((3, 3), (2, 2), (1, 1), True, False),
])
def test_pool2d_matches_paddles_window_rules(kind, k, s, p, ceil_mode, exclusive):
    x = rng.standard_normal((2, 3, 7, 6))
    out = run_op("pool2d", {"X": [x]},
                 {"pooling_type": kind, "ksize": list(k), "strides": list(s),
                  "paddings": list(p), "ceil_mode": ceil_mode,
                  "exclusive": exclusive})["Out"][0]
    np.testing.assert_allclose(out, _naive_pool(x, kind, k, s, p, ceil_mode, exclusive),
                               rtol=1e-12)


def test_global_pooling_and_the_first_maximum_gets_the_gradient():
    x = rng.standard_normal((2, 3, 4, 5))
    g = run_op("pool2d", {"X": [x]}, {"global_pooling": True, "pooling_type": "avg",
                                      "ksize": [1, 1]})["Out"][0]
    np.testing.assert_allclose(g[..., 0, 0], x.mean(axis=(2, 3)))
    tie = np.zeros((1, 1, 2, 2))
    tie[0, 0] = [[1.0, 3.0], [3.0, 0.0]]
    out = run_op("pool2d", {"X": [tie]}, {"ksize": [2, 2], "strides": [2, 2]})["Out"][0]
    grad = run_op("pool2d_grad", {"X": [tie], "Out": [out], "Out@GRAD": [np.ones_like(out)]},
                  {"ksize": [2, 2], "strides": [2, 2]})["X@GRAD"][0]
    np.testing.assert_array_equal(grad[0, 0], [[0.0, 1.0], [0.0, 0.0]])


def test_bad_geometry_is_a_clear_error():
    x = rng.standard_normal((1, 4, 5, 5))
    with pytest.raises(ValueError, match="groups=3"):
        run_op("conv2d", {"Input": [x], "Filter": [rng.standard_normal((3, 1, 3, 3))]},
               {"groups": 3})
    with pytest.raises(ValueError, match="would be"):
        run_op("conv2d", {"Input": [x], "Filter": [rng.standard_normal((2, 4, 7, 7))]}, {})
    with pytest.raises(ValueError, match="data_format must be 'NCHW' or 'NHWC'"):
        run_op("pool2d", {"X": [x]}, {"data_format": "NDHWC"})


def test_batch_norm_forward_matches_sklearns_standard_scaler():
    from sklearn.preprocessing import StandardScaler

    x = rng.standard_normal((4, 3, 5, 2)) * 3 + 1
    scale, bias = rng.uniform(0.5, 2, 3), rng.standard_normal(3)
    mean, var = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    out = run_op("batch_norm", {"X": [x], "Scale": [scale], "Bias": [bias], "Mean": [mean],
                                "Variance": [var]}, {"epsilon": 1e-12, "momentum": 0.8})
    flat = x.transpose(0, 2, 3, 1).reshape(-1, 3)
    ref = StandardScaler().fit_transform(flat) * scale + bias
    np.testing.assert_allclose(out["Y"][0].transpose(0, 2, 3, 1).reshape(-1, 3), ref,
                               rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(out["SavedMean"][0], flat.mean(axis=0))
    np.testing.assert_allclose(out["SavedVariance"][0], 1 / np.sqrt(flat.var(axis=0) + 1e-12))
    np.testing.assert_allclose(out["MeanOut"][0], 0.8 * mean + 0.2 * flat.mean(axis=0))
    np.testing.assert_allclose(out["VarianceOut"][0], 0.8 * var + 0.2 * flat.var(axis=0))
    test = run_op("batch_norm", {"X": [x], "Scale": [scale], "Bias": [bias], "Mean": [mean],
                                 "Variance": [var]}, {"is_test": True})
    expected = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(test["Y"][0], expected * scale.reshape(1, 3, 1, 1)
                               + bias.reshape(1, 3, 1, 1))
    assert test["MeanOut"][0] is mean  # unchanged at test time


# batch dims that numpy would broadcast but Fluid refuses ([2, 1, ..] with [3, ..]) are in
# test_matmul_fluid18.py; here a batch meets a matrix, which both pair the same way
@pytest.mark.parametrize("xs,ys,tx,ty", [
    ((3, 4), (4, 5), False, False), ((2, 3, 4), (2, 5, 4), False, True),
    ((2, 3, 4, 3), (5, 4), True, True), ((4,), (2, 4, 3), False, False),
    ((2, 3, 4), (4,), False, False), ((4,), (4,), False, False),
])
def test_matmul_matches_a_loop_over_the_batch(xs, ys, tx, ty):
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    out = run_op("matmul", {"X": [x], "Y": [y]},
                 {"transpose_X": tx, "transpose_Y": ty, "alpha": 1.5})["Out"][0]
    a = x[None, :] if x.ndim == 1 else (np.swapaxes(x, -1, -2) if tx else x)
    b = y[:, None] if y.ndim == 1 else (np.swapaxes(y, -1, -2) if ty else y)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    ref = np.zeros(batch + (a.shape[-2], b.shape[-1]))
    for idx in np.ndindex(*batch):
        for i in range(a.shape[-2]):
            for j in range(b.shape[-1]):
                ref[idx + (i, j)] = 1.5 * sum(a[idx + (i, k)] * b[idx + (k, j)]
                                              for k in range(a.shape[-1]))
    if x.ndim == 1:
        ref = ref[..., 0, :]
    if y.ndim == 1:
        ref = ref[..., 0]
    assert out.shape == (ref.shape or (1,))
    np.testing.assert_allclose(out, ref.reshape(out.shape), rtol=1e-12)


def test_matmul_layer_infers_fluids_shapes():
    import dask_fluid as fluid

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        q = fluid.layers.data("q", shape=[8, 4, 16], dtype="float32")  # [-1, 8, 4, 16]
        k = fluid.layers.data("k", shape=[8, 6, 16], dtype="float32")
        scores = fluid.layers.matmul(q, k, transpose_y=True, alpha=0.25)
        assert list(scores.shape) == [-1, 8, 4, 6]
        with pytest.raises(ValueError, match="inner dimension"):
            fluid.layers.matmul(q, k)


def test_activations_match_their_textbook_definitions():
    from scipy.special import expit
    from scipy.stats import norm

    x = np.linspace(-5, 5, 41)
    refs = {
        ("leaky_relu", (("alpha", 0.1),)): np.maximum(x, 0.1 * x),
        ("relu6", (("threshold", 6.0),)): np.minimum(np.maximum(x, 0), 6),
        ("elu", (("alpha", 0.7),)): np.where(x > 0, x, 0.7 * np.expm1(x)),
        ("softplus", ()): np.log1p(np.exp(x)),
        ("softsign", ()): x / (1 + np.abs(x)),
        ("hard_sigmoid", (("slope", 0.2), ("offset", 0.5))): np.clip(0.2 * x + 0.5, 0, 1),
        ("swish", (("beta", 1.5),)): x * expit(1.5 * x),
        ("gelu", ()): x * norm.cdf(x),
        ("gelu", (("approximate", True),)): x * norm.cdf(x),
    }
    for (op, attrs), ref in refs.items():
        out = run_op(op, {"X": [x]}, dict(attrs))["Out"][0]
        tol = 2e-3 if dict(attrs).get("approximate") else 1e-12
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol, err_msg=op)
    xpos = np.linspace(0.1, 3, 10)
    np.testing.assert_allclose(run_op("pow", {"X": [xpos]}, {"factor": 2.5})["Out"][0],
                               np.power(xpos, 2.5))


def test_one_hot_label_smooth_and_batch_size_like():
    ids = np.array([[3], [0], [4]])
    out = run_op("one_hot", {"X": [ids]}, {"depth": 5})["Out"][0]
    np.testing.assert_array_equal(out, np.eye(5, dtype=np.float32)[[3, 0, 4]])
    with pytest.raises(ValueError, match="id 7 is out of range"):
        run_op("one_hot", {"X": [np.array([[7]])]}, {"depth": 5})
    zeros = run_op("one_hot", {"X": [np.array([[7]])]},
                   {"depth": 5, "allow_out_of_range": True})["Out"][0]
    np.testing.assert_array_equal(zeros, np.zeros((1, 5), np.float32))
    smooth = run_op("label_smooth", {"X": [out]}, {"epsilon": 0.1})["Out"][0]
    np.testing.assert_allclose(smooth, 0.9 * out + 0.1 / 5, rtol=1e-6)
    assert np.allclose(smooth.sum(axis=1), 1.0)
    prior = np.array([0.5, 0.2, 0.1, 0.1, 0.1], np.float32)
    np.testing.assert_allclose(
        run_op("label_smooth", {"X": [out], "PriorDist": [prior]}, {"epsilon": 0.2})["Out"][0],
        0.8 * out + 0.2 * prior, rtol=1e-6)
    like = run_op("fill_constant_batch_size_like", {"Input": [np.zeros((7, 3))]},
                  {"shape": [-1, 4], "value": 2.5, "dtype": "float32"})["Out"][0]
    assert like.shape == (7, 4) and like.dtype == np.float32 and (like == 2.5).all()


def test_the_transformer_layers_build_with_fluids_shapes():
    import dask_fluid as fluid
    from dask_fluid import layers

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", shape=[6, 32], dtype="float32")  # [-1, 6, 32]
        heads = layers.transpose(layers.reshape(x, [0, 0, 4, 8]), perm=[0, 2, 1, 3])
        assert list(heads.shape) == [-1, 4, 6, 8]
        label = layers.data("label", shape=[1], dtype="int64")
        smooth = layers.label_smooth(layers.one_hot(label, depth=10), epsilon=0.1)
        assert list(smooth.shape) == [-1, 10]
        like = layers.fill_constant_batch_size_like(x, [-1, 3], "float32", 0.0)
        assert list(like.shape) == [-1, 3]
        with pytest.raises(ValueError, match="not a permutation"):
            layers.transpose(x, perm=[0, 0, 1])
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    got = exe.run(main, feed={"x": np.ones((2, 6, 32), np.float32),
                              "label": np.array([[1], [9]])},
                  fetch_list=[heads, smooth, like], scope=scope)
    assert got[0].shape == (2, 4, 6, 8) and got[1].shape == (2, 10) and got[2].shape == (2, 3)


def test_shape_and_index_ops_match_numpy_indexing():
    x = rng.standard_normal((4, 1, 5, 1))
    assert run_op("squeeze2", {"X": [x]}, {"axes": [1]})["Out"][0].shape == (4, 5, 1)
    assert run_op("squeeze2", {"X": [x]}, {})["Out"][0].shape == (4, 5)
    # Fluid 1.8's kernel enforces that a named axis is 1 (squeeze_op.h, GetOutputShape)
    with pytest.raises(ValueError, match="axis 0 of an input of shape \\[4, 1, 5, 1\\] has size 4"):
        run_op("squeeze2", {"X": [x]}, {"axes": [0]})
    assert run_op("unsqueeze2", {"X": [np.ones((2, 3))]},
                  {"axes": [0, 2]})["Out"][0].shape == (1, 2, 1, 3)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    np.testing.assert_array_equal(run_op("stack", {"X": [a, b]}, {"axis": 1})["Y"][0],
                                  np.stack([a, b], axis=1))
    table = rng.standard_normal((5, 3))
    np.testing.assert_array_equal(
        run_op("gather", {"X": [table], "Index": [np.array([4, 0, 4])]})["Out"][0],
        table[[4, 0, 4]])
    with pytest.raises(ValueError, match="outside"):
        run_op("gather", {"X": [table], "Index": [np.array([5])]})
    np.testing.assert_array_equal(
        run_op("expand", {"X": [a]}, {"expand_times": [2, 3]})["Out"][0], np.tile(a, (2, 3)))
    cube = rng.standard_normal((4, 5, 6))
    got = run_op("slice", {"Input": [cube]},
                 {"axes": [0, 2], "starts": [1, -4], "ends": [100, -1]})["Out"][0]
    np.testing.assert_array_equal(got, cube[1:, :, 2:5])
    got = run_op("slice", {"Input": [cube]},
                 {"axes": [1], "starts": [3], "ends": [4], "decrease_axis": [1]})["Out"][0]
    np.testing.assert_array_equal(got, cube[:, 3])
    # bounds from tensors (Fluid 1.8's StartsTensorList/EndsTensor): they win over the attrs
    got = run_op("slice", {"Input": [cube], "StartsTensorList": [np.array([2], np.int32),
                                                                   np.array([-2], np.int64)],
                           "EndsTensor": [np.array([3, 6], np.int32)]},
                 {"axes": [0, 2], "starts": [-1, -1], "ends": [-1, -1]})["Out"][0]
    np.testing.assert_array_equal(got, cube[2:3, :, 4:6])
    ties = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])
    np.testing.assert_array_equal(run_op("arg_max", {"X": [ties]}, {"axis": 1})["Out"][0],
                                  [1, 0])


def test_sigmoid_cross_entropy_matches_the_textbook_form():
    from scipy.special import expit

    x = rng.standard_normal((3, 4)) * 4
    label = rng.uniform(0, 1, (3, 4))
    label[0, 0] = -100.0
    out = run_op("sigmoid_cross_entropy_with_logits", {"X": [x], "Label": [label]})["Out"][0]
    p = expit(x)
    ref = -(label * np.log(p) + (1 - label) * np.log(1 - p))
    ref[0, 0] = 0.0
    np.testing.assert_allclose(out, ref, rtol=1e-9, atol=1e-12)
    norm = run_op("sigmoid_cross_entropy_with_logits", {"X": [x], "Label": [label]},
                  {"normalize": True})["Out"][0]
    np.testing.assert_allclose(norm, ref / 11, rtol=1e-9, atol=1e-12)


def test_the_shape_layers_infer_fluids_shapes():
    import dask_fluid as fluid
    from dask_fluid import layers

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", shape=[1, 6], dtype="float32")  # [-1, 1, 6]
        assert list(layers.squeeze(x, axes=[1]).shape) == [-1, 6]
        assert list(layers.unsqueeze(x, axes=[1]).shape) == [-1, 1, 1, 6]
        assert list(layers.stack([x, x], axis=1).shape) == [-1, 2, 1, 6]
        assert list(layers.expand(x, [1, 3, 2]).shape) == [-1, 3, 12]
        assert list(layers.slice(x, axes=[2], starts=[1], ends=[-1]).shape) == [-1, 1, 4]
        assert list(layers.argmax(x, axis=2).shape) == [-1, 1]
        idx = layers.data("idx", shape=[3], dtype="int64", append_batch_size=False)
        table = layers.data("t", shape=[10, 4], dtype="float32", append_batch_size=False)
        assert list(layers.gather(table, idx).shape) == [3, 4]


def _naive_conv_transpose(x, w, stride, pad, dilation, groups, out_hw):
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    cg = c // groups
    out = np.zeros((n, mg * groups) + tuple(out_hw))
    for b in range(n):
        for ci in range(c):
            g = ci // cg
            for m in range(mg):
                for i in range(h):
                    for j in range(wd):
                        for a in range(kh):
                            for e in range(kw):
                                oi = i * stride[0] + a * dilation[0] - pad[0]
                                oj = j * stride[1] + e * dilation[1] - pad[1]
                                if 0 <= oi < out_hw[0] and 0 <= oj < out_hw[1]:
                                    out[b, g * mg + m, oi, oj] += x[b, ci, i, j] * w[ci, m, a, e]
    return out


@pytest.mark.parametrize("stride,pad,dilation,groups,output_size", [
    ((1, 1), (0, 0), (1, 1), 1, None),
    ((2, 2), (1, 1), (1, 1), 1, None),
    ((2, 1), (0, 1), (2, 1), 2, None),
    ((2, 2), (0, 0), (1, 1), 1, (8, 8)),
])
def test_conv2d_transpose_matches_scattering_each_input(stride, pad, dilation, groups,
                                                        output_size):
    x = rng.standard_normal((2, 4, 3, 4))
    w = rng.standard_normal((4, 3, 3, 2))
    attrs = {"strides": list(stride), "paddings": list(pad), "dilations": list(dilation),
             "groups": groups}
    if output_size:
        attrs["output_size"] = list(output_size)
    out = run_op("conv2d_transpose", {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    hw = output_size or tuple((s - 1) * st - 2 * p + d * (k - 1) + 1 for s, st, p, d, k in
                              zip(x.shape[2:], stride, pad, dilation, w.shape[2:], strict=True))
    np.testing.assert_allclose(out, _naive_conv_transpose(x, w, stride, pad, dilation, groups,
                                                          hw), rtol=1e-10, atol=1e-10)


def test_squeeze_drops_a_named_unknown_dim_from_the_build_time_shape():
    # Fluid 1.8's SqueezeOp::InferShape drops every named axis: a -1 (unknown) dim named goes,
    # and the run checks it is 1 then
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        x = fluid.data("x", [None, -1, 3, 1])
        assert fluid.layers.squeeze(x, axes=[1]).shape == (-1, 3, 1)
        assert fluid.layers.squeeze(x, axes=[1, -1]).shape == (-1, 3)
        assert fluid.layers.squeeze(x, axes=[]).shape == (-1, -1, 3)
        with pytest.raises(ValueError, match="axis 2 .* has size 3; only dims of size 1"):
            fluid.layers.squeeze(x, axes=[2])
