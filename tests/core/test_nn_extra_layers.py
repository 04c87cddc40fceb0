"""``layers.spectral_norm``, ``inplace_abn``, ``sampled_softmax_with_cross_entropy`` and
``tree_conv`` as Fluid 1.8 builds them: ops, parameters and attributes, values through the
executor against numpy, errors, and whole-program gradients against central differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from tests.programs import build as _build
from tests.programs import run as _run

from .numeric_grad import program_grads_and_numeric


def test_spectral_norm_structure_and_values():
    main, startup, out = _build(lambda: layers.spectral_norm(
        layers.data("w", [3, 2, 2], append_batch_size=False), dim=1, power_iters=50))
    op = main.global_block().ops[-1]
    assert op.type == "spectral_norm" and op.attr("dim") == 1 and op.attr("power_iters") == 50
    params = {p.name: p for p in main.global_block().all_parameters()}
    u, v = params[op.input("U")[0]], params[op.input("V")[0]]
    assert u.shape == (2,) and v.shape == (6,)
    # 1.8 creates them with a plain ParamAttr() (trainable) and stop_gradient: no gradient
    assert u.stop_gradient and v.stop_gradient
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init[u.name].type == "gaussian_random" and init[u.name].attr("std") == 1.0
    assert out.shape == (3, 2, 2)
    w = np.random.default_rng(0).standard_normal((3, 2, 2)).astype("float32")
    (got,), scope = _run(main, startup, {"w": w}, [out])
    sigma = np.linalg.svd(np.moveaxis(w, 1, 0).reshape(2, 6), compute_uv=False)[0]
    np.testing.assert_allclose(got, w / sigma, rtol=1e-5)


def test_inplace_abn_structure_and_values():
    def build():
        x = layers.data("x", [3, 4])
        return x, layers.inplace_abn(x, act="leaky_relu", act_alpha=0.2)

    main, startup, (x, y) = _build(build)
    assert y is x  # in place
    op = main.global_block().ops[-1]
    assert op.type == "inplace_abn" and op.output("Y") == [x.name]
    assert op.attr("activation") == "leaky_relu" and op.attr("alpha") == pytest.approx(0.2)
    assert op.output("MeanOut") == op.input("Mean")
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params[op.input("Scale")[0]].shape == (3,)
    assert not params[op.input("Mean")[0]].trainable
    xv = np.random.default_rng(1).standard_normal((5, 3, 4)).astype("float32")
    (got,), _ = _run(main, startup, {"x": xv}, [y])
    m = xv.mean(axis=(0, 2), keepdims=True)
    z = (xv - m) / np.sqrt(xv.var(axis=(0, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, np.where(z > 0, z, 0.2 * z), rtol=1e-4, atol=1e-5)
    main2, _, _ = _build(lambda: layers.inplace_abn(layers.data("x", [3])))
    assert "activation" not in main2.global_block().ops[-1].attrs or \
        main2.global_block().ops[-1].attr("activation") in ("identity", "")


def test_sampled_softmax_with_customized_samples_values():
    logits_v = np.random.default_rng(2).standard_normal((3, 6)).astype("float32")
    label_v = np.array([[1], [4], [0]], np.int64)
    samples_v = np.array([[1, 2, 4, 1], [4, 0, 5, 2], [0, 3, 3, 1]], np.int64)
    probs_v = np.random.default_rng(3).uniform(0.1, 0.9, (3, 4)).astype("float32")

    def build():
        logits = layers.data("logits", [6])
        label = layers.data("label", [1], dtype="int64")
        s = layers.data("s", [4], dtype="int64")
        p = layers.data("p", [4])
        return layers.sampled_softmax_with_cross_entropy(
            logits, label, 3, use_customized_samples=True, customized_samples=s,
            customized_probabilities=p)

    main, startup, loss = _build(build)
    types = [o.type for o in main.global_block().ops]
    assert types[:3] == ["sample_logits", "one_hot", "softmax_with_cross_entropy"]
    sl = main.global_block().ops[0]
    assert sl.attr("uniq") is True and sl.attr("num_samples") == 3
    assert main.global_block().ops[1].attr("depth") == 4
    assert main.global_block().ops[2].attr("soft_label") is True
    (got,), _ = _run(main, startup, {"logits": logits_v, "label": label_v, "s": samples_v,
                                     "p": probs_v}, [loss])
    ref = np.empty((3, 1))
    for i in range(3):
        z = np.array([logits_v[i, k] - np.log(probs_v[i, j])
                      for j, k in enumerate(samples_v[i])], np.float64)
        z[1:][samples_v[i, 1:] == samples_v[i, 0]] -= 1e20
        ref[i, 0] = -(z[0] - np.log(np.exp(z - z.max()).sum()) - z.max())
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_sampled_softmax_sampling_is_deterministic_per_seed():
    def build():
        logits = layers.data("logits", [50])
        label = layers.data("label", [1], dtype="int64")
        return layers.sampled_softmax_with_cross_entropy(logits, label, 10, seed=7)

    main, startup, loss = _build(build)
    feed = {"logits": np.random.default_rng(4).standard_normal((4, 50)).astype("float32"),
            "label": np.array([[1], [2], [3], [4]], np.int64)}
    (a,), _ = _run(main, startup, feed, [loss])
    (b,), _ = _run(main, startup, feed, [loss])
    assert a.shape == (4, 1) and np.all(np.isfinite(a))
    np.testing.assert_array_equal(a, b)


def test_tree_conv_structure_and_values():
    def build():
        nodes = layers.data("nodes", [5, 3])
        edges = layers.data("edges", [4, 2], dtype="int32")
        return layers.tree_conv(nodes, edges, output_size=2, num_filters=2, max_depth=2,
                                act=None, bias_attr=False)

    main, startup, out = _build(build)
    op = main.global_block().ops[-1]
    assert op.type == "tree_conv" and op.attr("max_depth") == 2
    assert list(out.shape) == [-1, 5, 2, 2]
    params = {p.name: p for p in main.global_block().all_parameters()}
    filt = params[op.input("Filter")[0]]
    assert filt.shape == (3, 3, 2, 2)
    nodes = np.random.default_rng(5).standard_normal((1, 5, 3)).astype("float32")
    edges = np.array([[[1, 2], [1, 3], [3, 4], [0, 0]]], np.int32)
    (got,), scope = _run(main, startup, {"nodes": nodes, "edges": edges}, [out])
    w = np.asarray(scope.vars[filt.name]).reshape(9, 4)
    # node 1: itself (eta_t 1) + children 2, 3 at depth 1 (eta_t 0.5, eta_l 0 / 0.5)
    x = nodes[0].astype(np.float64)
    patch1 = np.zeros((3, 3))
    patch1[:, 2] += x[0]
    patch1[:, 0] += 0.0 * x[1]
    patch1[:, 1] += 0.5 * x[1]
    patch1[:, 0] += 0.5 * x[2]
    patch1[:, 1] += 0.5 * 0.5 * x[2]
    patch1[:, 2] += 0.5 * (x[1] + x[2])
    np.testing.assert_allclose(got[0, 0].reshape(4), patch1.reshape(9) @ w, rtol=1e-5)
    np.testing.assert_array_equal(got[0, 4], 0)  # past the 4 nodes


def test_tree_conv_bias_is_over_the_output_dims():
    main, _, out = _build(lambda: layers.tree_conv(
        layers.data("n", [5, 3]), layers.data("e", [4, 2], dtype="int32"), 2, 3))
    types = [o.type for o in main.global_block().ops]
    assert types[-3:] == ["tree_conv", "elementwise_add", "tanh"]
    add = main.global_block().ops[-2]
    assert add.attr("axis") == 1
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params[add.input("Y")[0]].shape == (5, 2, 3)


def test_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        w = layers.data("w", [3, 4], append_batch_size=False)
        with pytest.raises(ValueError, match="dim can only be 0 or 1"):
            layers.spectral_norm(w, dim=2)
        with pytest.raises(TypeError, match="eps must be float"):
            layers.spectral_norm(w, eps=1)
        x = layers.data("x", [3])
        with pytest.raises(ValueError, match="act must be None"):
            layers.inplace_abn(x, act="relu")
        with pytest.raises(ValueError, match="bias_attr should not be False"):
            layers.inplace_abn(x, bias_attr=False)
        with pytest.raises(NotImplementedError, match=r"inplace_abn\(momentum=Variable\)"):
            layers.inplace_abn(x, momentum=layers.data("m", [1]))
        lab = layers.data("lab", [1], dtype="int64")
        with pytest.raises(ValueError, match="num_samples must be a positive int"):
            layers.sampled_softmax_with_cross_entropy(x, lab, 0)
        with pytest.raises(ValueError, match="needs customized_samples"):
            layers.sampled_softmax_with_cross_entropy(x, lab, 2, use_customized_samples=True)
        with pytest.raises(ValueError, match="output_size must be a positive int"):
            layers.tree_conv(layers.data("n", [4, 3]), layers.data("e", [3, 2], dtype="int32"),
                             0)


def test_whole_program_gradients():
    rng = np.random.default_rng(6)
    feed = {"x": rng.standard_normal((4, 3, 2)), "nodes": rng.standard_normal((2, 4, 3)),
            "edges": np.array([[[1, 2], [1, 3], [2, 4]], [[1, 2], [0, 0], [0, 0]]], np.int32)}

    def build():
        x = layers.data("x", [3, 2], dtype="float64")
        h = layers.fc(x, 6, num_flatten_dims=2, param_attr=fluid.ParamAttr(name="fcw"),
                      bias_attr=False)
        h = layers.reshape(h, [-1, 6, 2])
        a = layers.inplace_abn(h, act="elu", act_alpha=0.5,
                               param_attr=fluid.ParamAttr(name="gs"),
                               bias_attr=fluid.ParamAttr(name="gb"))
        wt = layers.create_parameter([3, 2], "float64", name="sw")
        # power_iters=0: U and V are constants, so the exact gradient is the derivative
        sw = layers.spectral_norm(wt, power_iters=0)
        nodes = layers.data("nodes", [4, 3], dtype="float64")
        edges = layers.data("edges", [3, 2], dtype="int32")
        tc = layers.tree_conv(layers.matmul(nodes, sw), edges, 2, 2,
                              param_attr=fluid.ParamAttr(name="tf"),
                              bias_attr=fluid.ParamAttr(name="tb"))
        return layers.elementwise_add(layers.reduce_sum(layers.elementwise_mul(a, a)),
                                      layers.reduce_sum(layers.elementwise_mul(tc, tc)))

    got = program_grads_and_numeric(build, feed, ["fcw", "gs", "gb", "sw", "tf", "tb"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name


def test_sampled_softmax_gradient_with_customized_samples():
    rng = np.random.default_rng(8)
    feed = {"x": rng.standard_normal((3, 4)), "label": np.array([[1], [4], [0]], np.int64),
            "s": np.array([[1, 2, 4, 3], [4, 0, 5, 2], [0, 3, 3, 1]], np.int64),
            "p": rng.uniform(0.1, 0.9, (3, 4))}

    def build():
        logits = layers.fc(layers.data("x", [4], dtype="float64"), 6,
                           param_attr=fluid.ParamAttr(name="w"))
        loss = layers.sampled_softmax_with_cross_entropy(
            logits, layers.data("label", [1], dtype="int64"), 3,
            use_customized_samples=True, customized_samples=layers.data("s", [4], dtype="int64"),
            customized_probabilities=layers.data("p", [4], dtype="float64"))
        return layers.mean(loss)

    got = program_grads_and_numeric(build, feed, ["w"])
    np.testing.assert_allclose(*got["w"], rtol=1e-5, atol=1e-7)
