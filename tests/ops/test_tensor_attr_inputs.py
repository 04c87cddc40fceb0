"""Fluid 1.8's tensor-valued attribute inputs and the layers that build them: expand's
``ExpandTimes``/``expand_times_tensor``, concat's ``AxisTensor`` (and its LoD rule), clip's
``Min``/``Max``, dropout's ``Seed``, adam's ``Beta1Tensor``/``Beta2Tensor`` (and
``AdamOptimizer(beta1=Variable)``), and ``fc(num_flatten_dims=-1)``.

References are plain numpy (``np.tile``, ``np.concatenate``, ``np.clip``, a hand-written Adam
step); gradients are checked against central differences with the machinery of
``test_grad_check``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.ops import registry
from tests.programs import run_program

from . import run_op
from .test_grad_check import TOL, analytic_grads, forward, max_rel_err, numeric_grad

I32 = np.int32
LOD = registry.LOD_KEY


def grad_check(op_type: str, ins: dict, attrs: dict) -> int:
    """The finite-difference check of test_grad_check for one case; the number of float
    inputs whose gradient was checked."""
    ins = {s: [a.copy() for a in v] for s, v in ins.items()}
    op, env = forward(op_type, ins, attrs)
    descs = registry.get(op_type).grad(op)
    read = {n for d in descs for names in d["inputs"].values() for n in names}
    rng = np.random.default_rng(1)
    seeds = {n: rng.standard_normal(env[n].shape) for names in op.outputs.values()
             for n in names if n + registry.GRAD in read}
    grads = analytic_grads(op, env, seeds)
    checked = 0
    for slot, names in op.inputs.items():
        for i, name in enumerate(names):
            if name in grads and ins[slot][i].dtype.kind == "f":
                err = max_rel_err(grads[name], numeric_grad(op, ins, attrs, seeds, slot, i))
                assert err <= TOL, f"{op_type} d{name}: max rel err {err:.2e}"
                checked += 1
    return checked




# ---------------------------------------------------------------------------------------------
# expand


def test_expand_times_tensor_over_list_over_attr():
    x = np.random.default_rng(0).standard_normal((3, 4))
    # ExpandTimes first, then the list, then the attr (Fluid's get_expand_times)
    out = run_op("expand", {"X": [x], "ExpandTimes": [np.array([2, 1], I32)],
                            "expand_times_tensor": [np.array([5], I32), np.array([5], I32)]},
                 {"expand_times": [3, 3]})
    np.testing.assert_array_equal(out["Out"][0], np.tile(x, (2, 1)))
    out = run_op("expand", {"X": [x], "expand_times_tensor": [np.array([1], I32),
                                                              np.array([3], I32)]},
                 {"expand_times": [-1, 3]})
    np.testing.assert_array_equal(out["Out"][0], np.tile(x, (1, 3)))
    out = run_op("expand", {"X": [x]}, {"expand_times": [2, 2]})
    np.testing.assert_array_equal(out["Out"][0], np.tile(x, (2, 2)))


@pytest.mark.parametrize("ins, attrs, err, match", [
    ({"ExpandTimes": [np.array([2, 1, 1], I32)]}, {}, ValueError, "gives 3 values"),
    ({"expand_times_tensor": [np.array([2], I32)]}, {}, ValueError, "rank 2"),
    ({"ExpandTimes": [np.array([2, 1], np.int64)]}, {}, TypeError, "int32"),
    ({"expand_times_tensor": [np.array([2, 2], I32), np.array([1], I32)]}, {}, ValueError,
     r"shape \[1\]"),
    ({"ExpandTimes": [np.array([0, 1], I32)]}, {}, ValueError, "at least 1"),
    ({}, {"expand_times": [-1, 2]}, ValueError, "at least 1"),
])
def test_expand_bad_times(ins, attrs, err, match):
    with pytest.raises(err, match=match):
        run_op("expand", {"X": [np.ones((2, 3))], **ins}, attrs)


@pytest.mark.parametrize("ins, attrs", [
    ({"ExpandTimes": [np.array([2, 3], I32)]}, {}),
    ({"expand_times_tensor": [np.array([3], I32), np.array([1], I32)]},
     {"expand_times": [-1, 1]}),
])
def test_expand_grad_reads_the_tensors(ins, attrs):
    x = np.random.default_rng(2).standard_normal((2, 3))
    assert grad_check("expand", {"X": [x], **ins}, attrs) == 1
    # and the grad op gets the tensors (the sum runs over their tiles, not the attr's)
    op, _ = forward("expand", {"X": [x], **ins}, attrs)
    (desc,) = registry.get("expand").grad(op)
    assert set(ins) <= set(desc["inputs"])


def test_expand_lod_follows_the_attr_as_fluid_infershape():
    x = np.ones((3, 2))
    lod = ((0, 1, 3),)
    out = run_op("expand", {"X": [x]}, {"expand_times": [1, 2], "_lods": {"X": [lod]}})
    assert out[LOD]["Out"] == [lod]
    out = run_op("expand", {"X": [x], "ExpandTimes": [np.array([1, 2], I32)]},
                 {"_lods": {"X": [lod]}})
    assert out[LOD]["Out"] == [None]  # no attr: dim 0 is -1 when Fluid infers the shape


def test_expand_layer_builds_the_tensor_inputs_and_runs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [3, 4], append_batch_size=False)
        two = fluid.layers.fill_constant([1], "int32", 2)
        times = fluid.layers.data("times", [2], append_batch_size=False, dtype="int32")
        a = fluid.layers.expand(x, [2, 3])
        b = fluid.layers.expand(x, [two, 3])
        c = fluid.layers.expand(x, times)
    ops = [op for op in main.global_block().ops if op.type == "expand"]
    assert ops[0].attrs["expand_times"] == [2, 3] and "expand_times_tensor" not in ops[0].inputs
    assert ops[1].attrs["expand_times"] == [-1, 3]
    assert len(ops[1].input("expand_times_tensor")) == 2
    assert ops[2].input("ExpandTimes") == [times.name]
    assert not ops[2].attrs.get("expand_times")  # the layer sets none (Fluid's default [])
    assert list(a.shape) == [6, 12] and list(b.shape) == [-1, 12] and list(c.shape) == [-1, -1]
    assert times.stop_gradient and two.stop_gradient
    xv = np.random.default_rng(3).random((3, 4)).astype("float32")
    ra, rb, rc = run_program(main, startup, {"x": xv, "times": np.array([1, 3], I32)},
                             [a, b, c])
    np.testing.assert_array_equal(ra, np.tile(xv, (2, 3)))
    np.testing.assert_array_equal(rb, np.tile(xv, (2, 3)))
    np.testing.assert_array_equal(rc, np.tile(xv, (1, 3)))


def test_expand_layer_gradient_with_a_variable_times():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [2, 3], append_batch_size=False)
        x.stop_gradient = False
        out = fluid.layers.expand(x, [fluid.layers.fill_constant([1], "int32", 2), 3])
        (gx,) = fluid.gradients(fluid.layers.reduce_sum(out), x)
    (g,) = run_program(main, startup, {"x": np.ones((2, 3), "float32")}, [gx])
    np.testing.assert_array_equal(g, np.full((2, 3), 6.0))


def test_expand_layer_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        u8 = fluid.layers.data("u8", [4], dtype="uint8")
        with pytest.raises(TypeError, match="uint8"):
            fluid.layers.expand(u8, [2, 2])
        b = fluid.layers.data("b", [4], dtype="bool")
        with pytest.raises(ValueError, match="stop_gradient"):
            fluid.layers.expand(b, [2, 2])
        x = fluid.layers.data("x", [4])
        with pytest.raises(TypeError, match="list, a tuple or a Variable"):
            fluid.layers.expand(x, 2)
        with pytest.raises(ValueError, match="rank 2"):
            fluid.layers.expand(x, [2, 2, 2])
        with pytest.raises(ValueError, match="positive"):
            fluid.layers.expand(x, [0, 2])


# ---------------------------------------------------------------------------------------------
# concat


def _xs(rng, shapes):
    return [rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_concat_axis_tensor_over_attr(dtype):
    xs = _xs(np.random.default_rng(4), [(2, 1, 3), (2, 2, 3)])
    out = run_op("concat", {"X": xs, "AxisTensor": [np.array([-2], dtype)]}, {"axis": 0})
    np.testing.assert_array_equal(out["Out"][0], np.concatenate(xs, axis=1))


@pytest.mark.parametrize("axis, err, match", [
    (np.array([3], I32), ValueError, r"outside \[-3, 3\)"),
    (np.array([1.0], np.float32), TypeError, "int32 or int64"),
])
def test_concat_bad_axis_tensor(axis, err, match):
    xs = _xs(np.random.default_rng(5), [(2, 1, 3), (2, 2, 3)])
    with pytest.raises(err, match=match):
        run_op("concat", {"X": xs, "AxisTensor": [axis]})


def test_concat_mismatched_shapes_name_the_input():
    with pytest.raises(ValueError, match="input 1 has shape"):
        run_op("concat", {"X": [np.ones((2, 3)), np.ones((3, 3))]}, {"axis": 1})


def test_concat_grad_with_axis_tensor():
    xs = _xs(np.random.default_rng(6), [(2, 1, 3), (2, 2, 3), (2, 3, 3)])
    assert grad_check("concat", {"X": xs, "AxisTensor": [np.array([1], I32)]}, {}) == 3


def test_concat_lod_appends_the_sequences_along_axis0():
    xs = [np.ones((100,))] * 3
    lod = ((0, 20, 100),)
    out = run_op("concat", {"X": xs}, {"axis": 0, "_lods": {"X": [lod] * 3}})
    # Paddle's TestConcatOp6: lengths [[20, 80, 20, 80, 20, 80]]
    assert out[LOD]["Out"] == [((0, 20, 100, 120, 200, 220, 300),)]
    two = ((0, 1, 2), (0, 2, 5))
    other = ((0, 2), (0, 1, 4))
    out = run_op("concat", {"X": [np.ones((5, 1)), np.ones((4, 1))]},
                 {"axis": 0, "_lods": {"X": [two, other]}})
    assert out[LOD]["Out"] == [((0, 1, 2, 4), (0, 2, 5, 6, 9))]


def test_concat_lod_keeps_the_first_where_fluid_does():
    lod = ((0, 1, 3),)
    xs = [np.ones((3, 2)), np.ones((3, 2))]
    out = run_op("concat", {"X": xs}, {"axis": 1, "_lods": {"X": [lod, lod]}})
    assert out[LOD]["Out"] == [lod]  # not along axis 0
    out = run_op("concat", {"X": xs}, {"axis": 0, "_lods": {"X": [lod, None]}})
    assert out[LOD]["Out"] == [lod]  # one input without LoD
    with pytest.raises(ValueError, match="levels"):
        run_op("concat", {"X": xs}, {"axis": 0, "_lods": {"X": [lod, ((0, 1), (0, 3))]}})


def test_concat_grad_shares_each_inputs_lod():
    lods = [((0, 1, 3),), ((0, 2),)]
    res = run_op("concat_grad", {"X": [np.ones((3, 2)), np.ones((2, 2))],
                                 "Out@GRAD": [np.ones((5, 2))]},
                 {"axis": 0, "_lods": {"X": lods}})
    assert res[LOD]["X@GRAD"] == lods


def test_concat_layer_with_a_variable_axis_and_lod_through_the_executor():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        a = fluid.layers.data("a", [2, 1, 4], append_batch_size=False, dtype="int32")
        b = fluid.layers.data("b", [2, 2, 4], append_batch_size=False, dtype="int32")
        axis = fluid.layers.fill_constant([1], "int64", 1)
        out = fluid.layers.concat([a, b], axis=axis)
        s = fluid.layers.data("s", [1], lod_level=1)
        joined = fluid.layers.concat([s, s, s])
    (op,) = [op for op in main.global_block().ops if op.type == "concat"][:1]
    assert op.input("AxisTensor") == [axis.name]
    assert list(out.shape) == [-1, -1, -1]
    av = np.arange(8, dtype=I32).reshape(2, 1, 4)
    bv = np.arange(16, dtype=I32).reshape(2, 2, 4)
    seq = fluid.create_lod_tensor(np.ones((3, 1), "float32"), [[1, 2]], fluid.CPUPlace())
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        r, j = exe.run(main, feed={"a": av, "b": bv, "s": seq}, fetch_list=[out, joined],
                       return_numpy=False)
    np.testing.assert_array_equal(np.asarray(r), np.concatenate([av, bv], axis=1))
    assert j.recursive_sequence_lengths() == [[1, 2, 1, 2, 1, 2]]


def test_concat_layer_errors_and_a_single_variable():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", [4], dtype="float32")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = fluid.layers.concat(x)
        assert out.shape == x.shape and caught
        u8 = fluid.layers.data("u8", [4], dtype="uint8")
        with pytest.raises(TypeError, match="uint8"):
            fluid.layers.concat([u8, u8])
        with pytest.raises(TypeError, match="axis must be an int or a Variable"):
            fluid.layers.concat([x, x], 3.2)
        with pytest.raises(TypeError, match="Variable"):
            fluid.layers.concat([np.ones((1, 1))])


# ---------------------------------------------------------------------------------------------
# clip


def test_clip_min_max_tensors_over_attrs():
    x = np.linspace(-1, 1, 21).reshape(3, 7)
    out = run_op("clip", {"X": [x], "Min": [np.array([0.1])], "Max": [np.array([0.8])]},
                 {"min": 0.3, "max": 0.35})
    np.testing.assert_array_equal(out["Out"][0], np.clip(x, 0.1, 0.8))
    out = run_op("clip", {"X": [x], "Max": [np.array([0.5])]}, {"min": -0.2, "max": 0.9})
    np.testing.assert_array_equal(out["Out"][0], np.clip(x, -0.2, 0.5))


@pytest.mark.parametrize("ins, attrs, err, match", [
    ({"Min": [np.array([0.1], np.float32)]}, {}, TypeError, "dtype float64"),
    ({"Min": [np.array([0.9])]}, {"max": 0.5}, ValueError, "greater than min"),
    ({}, {"min": 0.5, "max": 0.5}, ValueError, "greater than min"),
])
def test_clip_bad_bounds(ins, attrs, err, match):
    with pytest.raises(err, match=match):
        run_op("clip", {"X": [np.ones((2, 2))], **ins}, attrs)


def test_clip_grad_uses_the_tensor_bounds():
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (4, 5))
    for p in (-0.2, 0.6):
        x[np.abs(x - p) < 0.05] = p + 0.1  # no element at a kink
    ins = {"X": [x], "Min": [np.array([-0.2])], "Max": [np.array([0.6])]}
    assert grad_check("clip", ins, {"min": -0.9, "max": 0.9}) == 1
    g = run_op("clip_grad", {**ins, "Out@GRAD": [np.ones_like(x)]}, {"min": -0.9, "max": 0.9})
    np.testing.assert_array_equal(g["X@GRAD"][0], ((x > -0.2) & (x < 0.6)).astype(float))


# ---------------------------------------------------------------------------------------------
# dropout


def test_dropout_seed_input_over_attrs_and_stream():
    x = np.ones((8, 16), np.float32)
    seed = np.array([125], I32)
    ref = (np.random.default_rng(125).random(x.shape) >= 0.5).astype(np.float32)
    for attrs in ({"fix_seed": True, "seed": 7}, {"_rng": np.random.default_rng(3)}, {}):
        out = run_op("dropout", {"X": [x], "Seed": [seed]}, {"dropout_prob": 0.5, **attrs})
        np.testing.assert_array_equal(out["Mask"][0], ref)
        np.testing.assert_array_equal(out["Out"][0], x * ref)
    with pytest.raises(TypeError, match="int32"):
        run_op("dropout", {"X": [x], "Seed": [np.array([1], np.int64)]})


# ---------------------------------------------------------------------------------------------
# adam


def _adam_ref(p, g, m1, m2, lr, b1p, b2p, b1, b2, eps):
    m1 = b1 * m1 + (1 - b1) * g
    m2 = b2 * m2 + (1 - b2) * g * g
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    return p - lr_t * m1 / (np.sqrt(m2) + eps * np.sqrt(1 - b2p)), m1, m2


def test_adam_beta_tensors_over_attrs():
    rng = np.random.default_rng(8)
    p, g, m1 = (rng.uniform(-1, 1, (4, 3)) for _ in range(3))
    m2 = rng.random((4, 3))
    b1, b2 = 0.85, 0.95
    ins = {"Param": [p.copy()], "Grad": [g], "Moment1": [m1.copy()], "Moment2": [m2.copy()],
           "LearningRate": [np.array([0.01])], "Beta1Pow": [np.array([b1 ** 3])],
           "Beta2Pow": [np.array([b2 ** 3])],
           "Beta1Tensor": [np.array([b1], np.float32)],
           "Beta2Tensor": [np.array([b2], np.float32)]}
    out = run_op("adam", ins, {"beta1": 0.5, "beta2": 0.6, "epsilon": 1e-8})
    fb1, fb2 = float(np.float32(b1)), float(np.float32(b2))  # read as float32, as Fluid
    rp, rm1, rm2 = _adam_ref(p, g, m1, m2, 0.01, b1 ** 3, b2 ** 3, fb1, fb2, 1e-8)
    np.testing.assert_allclose(out["ParamOut"][0], rp, rtol=1e-12)
    np.testing.assert_allclose(out["Moment1Out"][0], rm1, rtol=1e-12)
    np.testing.assert_allclose(out["Moment2Out"][0], rm2, rtol=1e-12)
    np.testing.assert_allclose(out["Beta1PowOut"][0], [b1 ** 3 * fb1], rtol=1e-12)
    np.testing.assert_allclose(out["Beta2PowOut"][0], [b2 ** 3 * fb2], rtol=1e-12)


@pytest.mark.parametrize("tensor, err, match", [
    (np.array([0.9]), TypeError, "float32"),
    (np.array([0.9, 0.9], np.float32), ValueError, "1 element"),
])
def test_adam_bad_beta_tensor(tensor, err, match):
    p = np.ones((2, 2))
    ins = {"Param": [p], "Grad": [p], "Moment1": [p * 0], "Moment2": [p * 0],
           "LearningRate": [np.array([0.1])], "Beta1Pow": [np.array([0.9])],
           "Beta2Pow": [np.array([0.999])], "Beta1Tensor": [tensor]}
    with pytest.raises(err, match=match):
        run_op("adam", ins)


def test_adam_optimizer_with_variable_betas():
    main, startup = fluid.Program(), fluid.Program()
    w0 = np.random.default_rng(9).uniform(-1, 1, (3, 1)).astype("float32")
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3], dtype="float32")
        y = fluid.layers.fc(x, 1, bias_attr=False,
                            param_attr=fluid.ParamAttr(
                                name="w", initializer=fluid.initializer.NumpyArrayInitializer(
                                    w0)))
        loss = fluid.layers.reduce_mean(y)
        beta1 = fluid.layers.create_global_var([1], 0.85, "float32", persistable=True)
        beta2 = fluid.layers.create_global_var([1], 0.95, "float32", persistable=True)
        fluid.optimizer.Adam(learning_rate=0.1, beta1=beta1, beta2=beta2).minimize(loss)
    (op,) = [op for op in main.global_block().ops if op.type == "adam"]
    assert op.input("Beta1Tensor") == [beta1.name] and op.input("Beta2Tensor") == [beta2.name]
    xv = np.random.default_rng(10).random((4, 3)).astype("float32")
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()) as _:
        scope = fluid.global_scope()
        exe.run(startup)
        exe.run(main, feed={"x": xv}, fetch_list=[loss])
        w = np.asarray(scope.find_var("w").get_tensor())
        pows = {n: float(np.asarray(scope.find_var(n).get_tensor())[0])
                for n in op.output("Beta1PowOut") + op.output("Beta2PowOut")}
    g = xv.mean(axis=0).reshape(3, 1).astype(np.float64)
    b1, b2 = float(np.float32(0.85)), float(np.float32(0.95))
    # Fluid 1.8: the powers of a Variable beta start at 0.9 and 0.999
    rp, _, _ = _adam_ref(w0.astype(np.float64), g, 0.0, 0.0, 0.1, 0.9, 0.999, b1, b2, 1e-8)
    np.testing.assert_allclose(w, rp, rtol=1e-5)
    np.testing.assert_allclose(sorted(pows.values()), sorted([0.9 * b1, 0.999 * b2]),
                               rtol=1e-6)


def test_lamb_refuses_variable_betas():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        beta1 = fluid.layers.create_global_var([1], 0.85, "float32", persistable=True)
        with pytest.raises(TypeError, match="beta1"):
            fluid.optimizer.Lamb(learning_rate=0.1, beta1=beta1)


# ---------------------------------------------------------------------------------------------
# fc(num_flatten_dims=-1)


def test_fc_num_flatten_dims_minus_one_is_rank_minus_one():
    w = np.random.default_rng(11).uniform(-1, 1, (25, 1)).astype("float32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [2, 2, 25], append_batch_size=False)
        outs = [fluid.layers.fc(x, 1, num_flatten_dims=n,
                                param_attr=fluid.ParamAttr(
                                    initializer=fluid.initializer.NumpyArrayInitializer(w)),
                                bias_attr=fluid.ParamAttr(
                                    initializer=fluid.initializer.ConstantInitializer(0.5)))
                for n in (-1, 2)]
    muls = [op for op in main.global_block().ops if op.type == "mul"]
    adds = [op for op in main.global_block().ops if op.type == "elementwise_add"]
    assert [op.attrs["x_num_col_dims"] for op in muls] == [2, 2]  # never -1, as Fluid
    assert [op.attrs["axis"] for op in adds] == [2, 2]
    assert list(outs[0].shape) == [2, 2, 1]
    xv = np.random.default_rng(12).random((2, 2, 25)).astype("float32")
    r1, r2 = run_program(main, startup, {"x": xv}, outs)
    np.testing.assert_allclose(r1, xv @ w + 0.5, rtol=1e-5)
    np.testing.assert_array_equal(r1, r2)


def test_fc_minus_one_resolved_at_the_first_input():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        a = fluid.layers.data("a", [2, 3, 4], append_batch_size=False)
        b = fluid.layers.data("b", [2, 3, 2, 2], append_batch_size=False)
        out = fluid.layers.fc([a, b], 5, num_flatten_dims=-1)
        muls = [op for op in out.block.ops if op.type == "mul"]
    # Fluid 1.8 keeps a's rank - 1 = 2 for b too (b's features: 2 * 2)
    assert [op.attrs["x_num_col_dims"] for op in muls] == [2, 2]
    assert list(out.shape) == [2, 3, 5]


def test_fc_clip_dropout_refuse_non_float_inputs():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        i = fluid.layers.data("i", [4], dtype="int32")
        for call in (lambda: fluid.layers.fc(i, 1), lambda: fluid.layers.clip(i, -1.0, 1.0),
                     lambda: fluid.layers.dropout(i, 0.5)):
            with pytest.raises(TypeError, match="int32"):
                call()
        with pytest.raises(TypeError, match="Variable"):
            fluid.layers.clip(np.ones((2, 2), "float32"), -1.0, 1.0)


def test_adam_dygraph_reads_a_variable_beta_as_its_value():
    with fluid.dygraph.guard():
        lin = fluid.dygraph.Linear(3, 1, bias_attr=False)
        w0 = lin.weight.numpy().astype(np.float64)
        beta1 = fluid.dygraph.to_variable(np.array([0.85], "float32"))
        opt = fluid.optimizer.Adam(learning_rate=0.1, beta1=beta1, beta2=0.95,
                                   parameter_list=lin.parameters())
        xv = np.random.default_rng(13).random((2, 3)).astype("float32")
        loss = fluid.layers.reduce_mean(lin(fluid.dygraph.to_variable(xv)))
        loss.backward()
        opt.minimize(loss)
        w = lin.weight.numpy()
        (power,) = opt._accumulators["beta1_pow_acc"].values()
        power = float(power.numpy()[0])
    g = xv.mean(axis=0).reshape(3, 1).astype(np.float64)
    rp, _, _ = _adam_ref(w0, g, 0.0, 0.0, 0.1, 0.9, 0.95, 0.85, 0.95, 1e-8)
    np.testing.assert_allclose(w, rp, rtol=1e-5)
    np.testing.assert_allclose(power, 0.9 * 0.85, rtol=1e-6)  # starts at 0.9, as Fluid
