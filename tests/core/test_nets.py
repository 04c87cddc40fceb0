"""``fluid.nets`` against numpy written from their definitions: glu, scaled dot-product
attention (one head and several, with the heads' fc weights read back from the scope), and
the ops img_conv_group expands into."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers, nets


def _run(build, feed):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        out = build()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0], main, scope


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_glu_is_a_times_sigmoid_b():
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    out, _, _ = _run(lambda: nets.glu(layers.data("x", shape=[6], dtype="float32")), {"x": x})
    np.testing.assert_allclose(out, x[:, :3] / (1 + np.exp(-x[:, 3:])), rtol=1e-5)


def test_single_head_attention_is_softmax_of_scaled_scores():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, n, 8)).astype(np.float32) for n in (3, 5, 5))

    def build():
        return nets.scaled_dot_product_attention(
            layers.data("q", shape=[3, 8], dtype="float32"),
            layers.data("k", shape=[5, 8], dtype="float32"),
            layers.data("v", shape=[5, 8], dtype="float32"))

    out, _, _ = _run(build, {"q": q, "k": k, "v": v})
    ref = _softmax(q @ k.transpose(0, 2, 1) / np.sqrt(8)) @ v
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_multi_head_attention_splits_projected_heads():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, n, 8)).astype(np.float32) for n in (3, 4, 4))

    def build():
        return nets.scaled_dot_product_attention(
            layers.data("q", shape=[3, 8], dtype="float32"),
            layers.data("k", shape=[4, 8], dtype="float32"),
            layers.data("v", shape=[4, 8], dtype="float32"), num_heads=2)

    out, main, scope = _run(build, {"q": q, "k": k, "v": v})
    assert out.shape == (2, 3, 8)
    w = [scope.get(f"fc_{i}.w_0") for i in range(3)]
    b = [scope.get(f"fc_{i}.b_0") for i in range(3)]
    pq, pk, pv = (x @ wi + bi for x, wi, bi in zip((q, k, v), w, b, strict=True))

    def heads(x):  # [B, L, 8] -> [B, 2, L, 4]
        return x.reshape(x.shape[0], x.shape[1], 2, 4).transpose(0, 2, 1, 3)

    ctx = _softmax(heads(pq) @ heads(pk).transpose(0, 1, 3, 2) / np.sqrt(4)) @ heads(pv)
    ref = ctx.transpose(0, 2, 1, 3).reshape(2, 3, 8)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="divisible"):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            nets.scaled_dot_product_attention(
                layers.data("q2", shape=[3, 8], dtype="float32"),
                layers.data("k2", shape=[4, 8], dtype="float32"),
                layers.data("v2", shape=[4, 8], dtype="float32"), num_heads=3)


def test_img_conv_group_expands_as_fluid():
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)

    def build():
        return nets.img_conv_group(layers.data("img", shape=[3, 8, 8], dtype="float32"),
                                   conv_num_filter=[4, 6], pool_size=2, pool_stride=2,
                                   conv_act="relu", conv_with_batchnorm=[True, False],
                                   conv_batchnorm_drop_rate=[0.5, 0.0])

    out, main, _ = _run(build, {"img": x})
    assert out.shape == (2, 6, 4, 4)
    types = [op.type for op in main.global_block().ops]
    assert types == ["conv2d", "elementwise_add", "batch_norm", "relu", "dropout", "conv2d",
                     "elementwise_add", "relu", "pool2d"]


def test_conv2d_transpose_layer_shapes_and_training():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        img = layers.data("img", shape=[3, 4, 4], dtype="float32")
        up = layers.conv2d_transpose(img, num_filters=5, filter_size=3, stride=2, padding=1)
        assert list(up.shape) == [-1, 5, 7, 7]
        sized = layers.conv2d_transpose(img, num_filters=2, output_size=8, stride=2)
        assert list(sized.shape) == [-1, 2, 8, 8]
        loss = layers.mean(layers.square(up)) + layers.mean(layers.square(sized))
        fluid.optimizer.SGD(0.05).minimize(loss)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"img": x}, fetch_list=[loss], scope=scope)[0][0])
              for _ in range(5)]
    assert losses[-1] < losses[0]
    w = scope.get([p.name for p in main.global_block().all_parameters()
                   if p.name.startswith("conv2d_transpose_1.w")][0])
    assert w.shape == (3, 2, 2, 2)  # filter size from output_size: (8 - 3 * 2 + 0 - 1) + 1
