"""fluid.contrib.layers.nn: program structure as Fluid 1.8 builds it, values through the
Executor, whole-program gradients, errors."""

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


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), exe, scope


def test_all_names_the_implemented_layers_only():
    assert set(cl.nn.__all__) == {
        "batch_fc", "fused_elemwise_activation", "partial_concat", "partial_sum",
        "rank_attention", "shuffle_batch", "fused_embedding_seq_pool", "match_matrix_tensor",
        "sequence_topk_avg_pooling", "var_conv_2d", "multiclass_nms2", "tree_conv",
        "tdm_child", "tdm_sampler"}
    # Fluid 1.8 has these under contrib.layers; one implementation each, in fluid.layers
    assert cl.tree_conv is fluid.layers.tree_conv
    assert cl.multiclass_nms2 is fluid.layers.multiclass_nms2
    for name in ("search_pyramid_hash",):
        assert not hasattr(cl.nn, name)


def test_fused_elemwise_activation_program_and_values():
    def fn():
        x = fluid.layers.data("x", [3, 4], dtype="float32")
        y = fluid.layers.data("y", [4], dtype="float32", append_batch_size=False)
        return x, y, cl.fused_elemwise_activation(x, y, "elementwise_mul,tanh")
    main, startup, (x, y, out) = _build(fn)
    op = main.global_block().ops[-1]
    assert op.type == "fused_elemwise_activation"
    assert op.attrs["functor_list"] == ["elementwise_mul", "tanh"]
    assert op.attrs["save_intermediate_out"] is True and op.attrs["axis"] == -1
    inter = main.global_block().var(op.outputs["IntermediateOut"][0])
    assert tuple(out.shape) == (-1, 3, 4) and tuple(inter.shape) == (4,)
    xv = np.random.default_rng(0).standard_normal((2, 3, 4)).astype("float32")
    yv = np.linspace(-1, 1, 4).astype("float32")
    (got,), _, _ = _run(main, startup, {"x": xv, "y": yv}, [out])
    np.testing.assert_allclose(got, xv * np.tanh(yv), rtol=1e-6)


def test_fused_elemwise_activation_whole_program_gradient():
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((3, 4))
    for functors, save in ((["elementwise_add", "scale"], True),
                           (["sigmoid", "elementwise_add"], False)):
        def build(functors=functors, save=save):
            x = fluid.layers.data("x", [4], dtype="float64")
            w = fluid.layers.create_parameter([4], "float64", name="w")
            b = fluid.layers.create_parameter([3, 4], "float64", name="b")
            h = cl.fused_elemwise_activation(x, w, functors, scale=1.5,
                                             save_intermediate_out=save)
            h = cl.fused_elemwise_activation(b, h, ["elementwise_mul", "tanh"])
            return fluid.layers.reduce_sum(h * h)
        got = program_grads_and_numeric(build, {"x": xv}, ["w", "b"])
        for p, (a, n) in got.items():
            np.testing.assert_allclose(a, n, rtol=1e-5, atol=1e-7, err_msg=p)


def test_fused_elemwise_activation_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", [3])
        with pytest.raises(ValueError, match="length 2"):
            cl.fused_elemwise_activation(x, x, ["relu"])
        with pytest.raises(ValueError, match="not supported"):
            cl.fused_elemwise_activation(x, x, ["elementwise_add", "softmax"])
        with pytest.raises(TypeError, match="y must be a Variable"):
            cl.fused_elemwise_activation(x, 1.0, ["elementwise_add", "relu"])


def test_shuffle_batch_program_seed_and_values():
    def fn():
        x = fluid.layers.data("x", [2], dtype="float32")
        return x, cl.shuffle_batch(x, seed=2019)
    main, startup, (x, out) = _build(fn)
    op = main.global_block().ops[-1]
    assert op.type == "shuffle_batch" and op.attrs["startup_seed"] == 2019
    seed_name = op.inputs["Seed"][0]
    assert op.outputs["SeedOut"] == [seed_name] and seed_name.startswith("shuffle_batch_seed")
    assert main.global_block().var(seed_name).persistable
    xv = np.arange(16, dtype="float32").reshape(8, 2)
    (a,), exe, scope = _run(main, startup, {"x": xv}, [out])
    assert sorted(a[:, 0].tolist()) == xv[:, 0].tolist() and not np.array_equal(a, xv)
    np.testing.assert_array_equal(a[:, 1] - a[:, 0], np.ones(8))
    (b,) = exe.run(main, feed={"x": xv}, fetch_list=[out], scope=scope)
    assert not np.array_equal(a, b)  # SeedOut moved the seed on
    (again,), _, _ = _run(main, startup, {"x": xv}, [out])
    np.testing.assert_array_equal(again, a)  # the same first seed, the same first shuffle


def test_shuffle_batch_seed_from_program_and_variable():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 33
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [2])
        cl.shuffle_batch(x)
        seed = fluid.layers.fill_constant([1], "int64", 5)
        cl.shuffle_batch(x, seed=seed)
    ops = [op for op in main.global_block().ops if op.type == "shuffle_batch"]
    assert ops[0].attrs["startup_seed"] == 33
    assert ops[1].inputs["Seed"] == [seed.name] and ops[1].outputs["SeedOut"] == [seed.name]
    with fluid.program_guard(main, startup), pytest.raises(TypeError, match="seed must be"):
        cl.shuffle_batch(x, seed="7")


def test_shuffle_batch_gradient_unshuffles():
    rng = np.random.default_rng(2)
    xv = rng.standard_normal((5, 3))
    wv = rng.standard_normal((5, 3))

    def build():
        x = fluid.layers.data("x", [3], dtype="float64")
        r = fluid.layers.data("r", [3], dtype="float64")
        w = fluid.layers.create_parameter([5, 3], "float64", name="w")
        # a seed recomputed every run (an int seed moves on from run to run, which would make
        # the finite differences compare different shuffles)
        seed = fluid.layers.fill_constant([1], "int64", 4)
        s = cl.shuffle_batch(fluid.layers.elementwise_mul(x, w), seed=seed)
        return fluid.layers.reduce_sum(s * r)
    got = program_grads_and_numeric(build, {"x": xv, "r": wv}, ["w"])
    a, n = got["w"]
    np.testing.assert_allclose(a, n, rtol=1e-5, atol=1e-7)


def test_partial_layers_program_values_and_gradient():
    def fn():
        x = fluid.layers.data("x", [5], dtype="float32")
        y = fluid.layers.data("y", [5], dtype="float32")
        return (cl.partial_concat([x, y], start_index=-3, length=2),
                cl.partial_sum([x, y], start_index=1))
    main, startup, (pc, ps) = _build(fn)
    assert tuple(pc.shape) == (-1, 4) and tuple(ps.shape) == (-1, 4)
    ops = main.global_block().ops
    assert [o.type for o in ops] == ["partial_concat", "partial_sum"]
    assert ops[0].attrs["start_index"] == -3 and ops[0].attrs["length"] == 2
    xv = np.arange(10, dtype="float32").reshape(2, 5)
    yv = xv * 10
    (a, b), _, _ = _run(main, startup, {"x": xv, "y": yv}, [pc, ps])
    np.testing.assert_array_equal(a, np.concatenate([xv[:, 2:4], yv[:, 2:4]], axis=1))
    np.testing.assert_array_equal(b, xv[:, 1:] + yv[:, 1:])

    def build():
        w = fluid.layers.create_parameter([2, 5], "float64", name="w")
        v = fluid.layers.create_parameter([2, 5], "float64", name="v")
        c = cl.partial_concat([w, v], 1, 3)
        s = cl.partial_sum([w, v, w], -2)
        return fluid.layers.reduce_sum(c * c) + fluid.layers.reduce_sum(s * s * s)
    for p, (g, n) in program_grads_and_numeric(build, {}, ["w", "v"]).items():
        np.testing.assert_allclose(g, n, rtol=1e-5, atol=1e-7, err_msg=p)


def test_partial_layers_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", [3])
        with pytest.raises(ValueError, match="start_index must be in"):
            cl.partial_concat([x, x], start_index=3)
        with pytest.raises(ValueError, match="exceeds"):
            cl.partial_sum([x], start_index=1, length=5)
        with pytest.raises(TypeError, match="length must be an int"):
            cl.partial_sum([x], length=1.5)
        with pytest.raises(ValueError, match="2-D"):
            cl.partial_concat([fluid.layers.data("z", [2, 3])])


def test_batch_fc_program_values_and_gradient():
    def fn():
        x = fluid.layers.data("x", [3, 2, 4], dtype="float32", append_batch_size=False)
        return cl.batch_fc(x, [3, 4, 5], fluid.ParamAttr(name="bw"), [3, 5],
                           fluid.ParamAttr(name="bb", initializer=fluid.initializer.Constant(
                               0.5)), act="relu")
    main, startup, out = _build(fn)
    ops = [o.type for o in main.global_block().ops]
    assert ops == ["batch_fc", "relu"] and tuple(out.shape) == (3, 2, 5)
    xv = np.random.default_rng(3).standard_normal((3, 2, 4)).astype("float32")
    (got, w, b), _, _ = _run(main, startup, {"x": xv}, [out, "bw", "bb"])
    np.testing.assert_allclose(got, np.maximum(xv @ w + b[:, None, :], 0), rtol=1e-5,
                               atol=1e-6)

    def build():
        x = fluid.layers.data("x", [3, 2, 4], dtype="float64", append_batch_size=False)
        h = cl.batch_fc(x, [3, 4, 5], fluid.ParamAttr(name="w"), [3, 5],
                        fluid.ParamAttr(name="b"), act="tanh")
        return fluid.layers.reduce_sum(h * h)
    got = program_grads_and_numeric(build, {"x": xv.astype("float64")}, ["w", "b"])
    for p, (a, n) in got.items():
        np.testing.assert_allclose(a, n, rtol=1e-5, atol=1e-7, err_msg=p)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", [3, 2, 4], append_batch_size=False)
        with pytest.raises(ValueError, match="must satisfy"):
            cl.batch_fc(x, [3, 4, 5], None, [3, 6], None)
        with pytest.raises(TypeError, match="float32 or float64"):
            cl.batch_fc(fluid.layers.data("i", [3, 2, 4], dtype="int64", append_batch_size=False),
                        [3, 4, 5], None, [3, 5], None)


def test_rank_attention_program_values_and_gradient():
    off = np.array([[1, 1, 0, 2, 1], [2, 1, 0, 2, 1], [-1, -1, -1, -1, -1]], np.int32)
    xv = np.random.default_rng(4).standard_normal((3, 2))

    def fn():
        x = fluid.layers.data("x", [2], dtype="float32")
        o = fluid.layers.data("o", [5], dtype="int32")
        return cl.rank_attention(x, o, [8, 3], fluid.ParamAttr(name="rp"), max_rank=2)
    main, startup, out = _build(fn)
    op = main.global_block().ops[-1]
    assert op.type == "rank_attention" and op.attrs["MaxRank"] == 2
    assert op.attrs["MaxSize"] == 0
    assert tuple(out.shape) == (-1, 3)
    (got, rp), _, _ = _run(main, startup, {"x": xv.astype("float32"), "o": off}, [out, "rp"])
    blocks = rp.reshape(4, 2, 3)
    ref = np.stack([xv[0] @ blocks[0] + xv[1] @ blocks[1], xv[0] @ blocks[2] + xv[1] @ blocks[3],
                    np.zeros(3)])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)

    def build():
        x = fluid.layers.data("x", [2], dtype="float64")
        o = fluid.layers.data("o", [5], dtype="int32")
        h = cl.rank_attention(x, o, [8, 3], fluid.ParamAttr(name="rp"), max_rank=2)
        return fluid.layers.reduce_sum(fluid.layers.tanh(h))
    a, n = program_grads_and_numeric(build, {"x": xv, "o": off}, ["rp"])["rp"]
    np.testing.assert_allclose(a, n, rtol=1e-5, atol=1e-7)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", [2])
        o = fluid.layers.data("o", [5], dtype="int32")
        with pytest.raises(ValueError, match="rank_param_shape"):
            cl.rank_attention(x, o, [9, 3], None, max_rank=2)
