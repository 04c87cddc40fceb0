"""``layers.scatter_nd_add``, ``scatter_nd``, ``strided_slice``, ``crop``, ``crop_tensor``,
``multiplex``, ``unique``, ``unique_with_counts`` and ``rank`` as Fluid 1.8 builds them: ops,
slots, attributes and static shapes, values against numpy through the executor, the errors
Fluid gives, and a whole program's gradients through them against central differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def _ops(main, type_):
    return [o for o in main.global_block().ops if o.type == type_]


def test_scatter_nd_add_and_scatter_nd():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ref = layers.data("ref", [3, 5, 2], dtype="float32", append_batch_size=False)
        index = layers.data("index", [4, 2], dtype="int32", append_batch_size=False)
        updates = layers.data("updates", [4, 2], dtype="float32", append_batch_size=False)
        added = layers.scatter_nd_add(ref, index, updates, name="sna")
        scattered = layers.scatter_nd(index, updates, [3, 5, 2])
    first, second = _ops(main, "scatter_nd_add")
    assert first.input("X") == ["ref"] and first.input("Index") == ["index"]
    assert first.input("Updates") == ["updates"] and added.name.startswith("sna")
    assert added.shape == (3, 5, 2) and scattered.shape == (3, 5, 2)
    # scatter_nd is scatter_nd_add onto zeros, op for op
    zeros = next(o for o in main.global_block().ops if o.type == "fill_constant")
    assert second.input("X") == zeros.output("Out")
    assert zeros.attr("shape") == [3, 5, 2] and zeros.attr("value") == 0.0
    assert zeros.attr("dtype") == "float32" and zeros.attr("force_cpu") is False
    rng = np.random.default_rng(0)
    rv = rng.standard_normal((3, 5, 2)).astype(np.float32)
    iv = np.array([[0, 4], [2, 1], [0, 4], [1, 0]], np.int32)
    uv = rng.standard_normal((4, 2)).astype(np.float32)
    got_added, got_scattered = _run(main, startup, {"ref": rv, "index": iv, "updates": uv},
                                    [added, scattered])
    want = np.zeros_like(rv)
    for (a, b), u in zip(iv, uv, strict=True):
        want[a, b] += u
    np.testing.assert_allclose(got_scattered, want, rtol=1e-6)
    np.testing.assert_allclose(got_added, rv + want, rtol=1e-6)


def test_scatter_nd_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        ref = layers.data("ref", [4, 3], dtype="float32", append_batch_size=False)
        index = layers.data("index", [2, 1], dtype="int64", append_batch_size=False)
        with pytest.raises(ValueError, match="ref and updates must have the same dtype"):
            layers.scatter_nd_add(ref, index, layers.data("u64", [2, 3], dtype="float64",
                                                          append_batch_size=False))
        with pytest.raises(ValueError, match=r"must have shape .* \[2, 3\], got \[2, 4\]"):
            layers.scatter_nd_add(ref, index, layers.data("u", [2, 4], append_batch_size=False))
        with pytest.raises(TypeError, match="index 'fi' must be int32 or int64, got float32"):
            layers.scatter_nd_add(ref, layers.data("fi", [2, 1], append_batch_size=False),
                                  layers.data("u2", [2, 3], append_batch_size=False))
        with pytest.raises(ValueError, match="rank of Index must be at least 2"):
            layers.scatter_nd_add(ref, layers.data("i1", [2], dtype="int32",
                                                   append_batch_size=False),
                                  layers.data("u3", [2, 3], append_batch_size=False))
        with pytest.raises(TypeError, match="shape must be a list or tuple of ints"):
            layers.scatter_nd(index, layers.data("u4", [2, 3], append_batch_size=False), 5)


def test_strided_slice_builds_fluids_inputs_and_shapes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4, 6, 5])
        plain = layers.strided_slice(x, axes=[1, 2, 3], starts=[-5, 4, 0],
                                     ends=[100, 0, 5], strides=[2, -2, 3])
        start = layers.data("start", [1], dtype="int32", append_batch_size=False)
        mixed = layers.strided_slice(x, axes=[1, 2], starts=[start, 4], ends=[3, -1],
                                     strides=[1, 1])
        whole = layers.data("whole", [2], dtype="int32", append_batch_size=False)
        tensor = layers.strided_slice(x, axes=[1, 2], starts=whole, ends=[3, 6], strides=[1, 1])
    assert plain.shape == (-1, 2, 2, 2)  # [-5:100:2] clamped, 1.8's [4:0:-2] (2 of 6), [0:5:3]
    assert mixed.shape == (-1, -1, 1, 5)
    assert tensor.shape == (-1, -1, -1, -1)
    op_plain, op_mixed, op_tensor = _ops(main, "strided_slice")
    assert op_plain.attr("axes") == [1, 2, 3] and op_plain.attr("starts") == [-5, 4, 0]
    assert op_plain.attr("ends") == [100, 0, 5] and op_plain.attr("strides") == [2, -2, 3]
    assert op_plain.attr("infer_flags") == [1, 1, 1]
    assert op_mixed.attr("starts") == [-1, 4] and op_mixed.attr("infer_flags") == [-1, 1]
    listed = op_mixed.input("StartsTensorList")
    assert listed[0] == "start" and listed[1].startswith("strided_slice_1.tmp")
    const = next(o for o in main.global_block().ops if o.output("Out") == [listed[1]])
    assert const.type == "fill_constant" and const.attr("value") == 4.0
    assert const.attr("dtype") == "int32" and const.attr("force_cpu") is True
    assert op_tensor.input("StartsTensor") == ["whole"] and op_tensor.attr("starts") == []
    assert start.stop_gradient and whole.stop_gradient
    xv = np.arange(2 * 4 * 6 * 5, dtype=np.float32).reshape(2, 4, 6, 5)
    got_plain, got_mixed, got_tensor = _run(
        main, startup, {"x": xv, "start": np.array([1], np.int32),
                        "whole": np.array([2, 1], np.int32)}, [plain, mixed, tensor])
    # 1.8 reads (0, 4] from 1 with step 2, reversed: columns 3, 1 (numpy's [4:0:-2]: 4, 2)
    np.testing.assert_array_equal(got_plain, xv[:, -5:100:2, [3, 1], 0:5:3])
    np.testing.assert_array_equal(got_mixed, xv[:, 1:3, 4:5])
    np.testing.assert_array_equal(got_tensor, xv[:, 2:3, 1:6])


def test_strided_slice_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [4, 6])
        with pytest.raises(TypeError, match="axes must be a list or tuple of ints"):
            layers.strided_slice(x, 1, [0], [1], [1])
        with pytest.raises(TypeError, match="starts must be a list, tuple or Variable"):
            layers.strided_slice(x, [1], 0, [1], [1])
        with pytest.raises(TypeError, match=r"strides\[0\] must be an int or an int32 Variable"):
            layers.strided_slice(x, [1], [0], [1], [1.5])
        with pytest.raises(ValueError, match="ends has 2 values, axes has 1"):
            layers.strided_slice(x, [1], [0], [1, 2], [1])
        with pytest.raises(ValueError, match="a stride must not be 0"):
            layers.strided_slice(x, [1], [0], [3], [0])
        with pytest.raises(ValueError, match="the slice selects nothing"):
            layers.strided_slice(x, [1], [4], [2], [1])
        with pytest.raises(TypeError, match="input 'b' must be one of float32"):
            layers.strided_slice(layers.data("b", [3], dtype="bool"), [1], [0], [1], [1])


def test_crop_builds_fluids_op():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4, 5])
        by_list = layers.crop(x, shape=[-1, 2, 3], offsets=[0, 1, 2])
        y = layers.data("y", [2, 2])
        offsets = layers.data("off", [3], dtype="int32", append_batch_size=False)
        by_var = layers.crop(x, shape=y, offsets=offsets)
        no_offsets = layers.crop(x, shape=[2, 3, 4])
    op_list, op_var, op_none = _ops(main, "crop")
    assert op_list.attr("shape") == [-1, 2, 3] and op_list.attr("offsets") == [0, 1, 2]
    assert op_var.input("Y") == ["y"] and op_var.input("Offsets") == ["off"]
    assert op_var.attr("offsets") == [] and op_var.attr("shape") == []  # the op's defaults
    assert op_none.attr("offsets") == [0, 0, 0]
    assert by_list.shape == (-1, 2, 3) and by_var.shape == (-1, 2, 2)
    assert no_offsets.shape == (2, 3, 4)
    xv = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    got_list, got_var, got_none = _run(
        main, startup, {"x": xv, "y": np.zeros((2, 2, 2), np.float32),
                        "off": np.array([1, 2, 3], np.int32)}, [by_list, by_var, no_offsets])
    np.testing.assert_array_equal(got_list, xv[:, 1:3, 2:5])
    np.testing.assert_array_equal(got_var, xv[1:3, 2:4, 3:5])
    np.testing.assert_array_equal(got_none, xv[:2, :3, :4])


def test_crop_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [4, 5])
        with pytest.raises(TypeError, match="x 'd' must be one of float32, got float64"):
            layers.crop(layers.data("d", [4], dtype="float64"), shape=[1, 2])
        with pytest.raises(TypeError, match="shape must be a list, tuple or Variable, got "
                                            "NoneType"):
            layers.crop(x)
        with pytest.raises(ValueError, match=r"shape \[2, 2\] needs one entry per dim of x"):
            layers.crop(x, shape=[2, 2])
        with pytest.raises(ValueError, match="offsets .* needs one entry per dim of x"):
            layers.crop(x, shape=[2, 2, 2], offsets=[0, 0])
        with pytest.raises(ValueError, match="shape 'y' must have the rank of x"):
            layers.crop(x, shape=layers.data("y", [2]))


def test_crop_tensor_builds_fluids_op():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 8, 8], dtype="float32", append_batch_size=False)
        dim = layers.data("dim", [1], dtype="int32", append_batch_size=False)
        off = layers.data("off", [1], dtype="int32", append_batch_size=False)
        listed = layers.crop_tensor(x, shape=[-1, dim, 4], offsets=[1, off, 2])
        offsets = layers.data("offsets", [3], dtype="int32", append_batch_size=False)
        plain = layers.crop_tensor(x, shape=[2, -1, -1], offsets=offsets)
        shape = layers.data("shape", [3], dtype="int32", append_batch_size=False)
        whole = layers.crop_tensor(x, shape=shape)
        known = layers.crop_tensor(x, shape=[-1, 3, -1], offsets=[1, 0, 6])
    op_listed, op_plain, op_whole, op_known = _ops(main, "crop_tensor")
    assert op_listed.attr("shape") == [-1, 0, 4] and op_listed.attr("offsets") == [1, -1, 2]
    assert op_listed.input("ShapeTensor")[1] == "dim"
    assert op_listed.input("OffsetsTensor")[1] == "off"
    assert op_listed.input("ShapeTensor")[0].startswith("crop_tensor_0.tmp")
    assert listed.shape == (2, -1, 4)  # -1 with a known offset and dim is known
    assert op_plain.input("Offsets") == ["offsets"] and op_plain.attr("offsets") == [-1] * 3
    assert plain.shape == (2, -1, -1)
    assert op_whole.input("Shape") == ["shape"] and op_whole.attr("offsets") == [0, 0, 0]
    assert whole.shape == (-1, -1, -1) and known.shape == (2, 3, 2)
    assert dim.stop_gradient and off.stop_gradient and offsets.stop_gradient
    xv = np.arange(3 * 8 * 8, dtype=np.float32).reshape(3, 8, 8)
    got = _run(main, startup, {"x": xv, "dim": np.array([3], np.int32),
                               "off": np.array([4], np.int32),
                               "offsets": np.array([1, 2, 3], np.int32),
                               "shape": np.array([1, 2, -1], np.int32)},
               [listed, plain, whole, known])
    np.testing.assert_array_equal(got[0], xv[1:, 4:7, 2:6])
    np.testing.assert_array_equal(got[1], xv[1:3, 2:, 3:])
    np.testing.assert_array_equal(got[2], xv[:1, :2, :])
    np.testing.assert_array_equal(got[3], xv[1:, :3, 6:])


def test_crop_tensor_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [2, 3, 6, 6], dtype="float32", append_batch_size=False)
        dim = layers.data("dim", [1], dtype="int32", append_batch_size=False)
        with pytest.raises(TypeError, match="shape must be a list, tuple or Variable, got int"):
            layers.crop_tensor(x, shape=3)
        with pytest.raises(TypeError, match=r"shape\[1\] must be an int or an int32 Variable"):
            layers.crop_tensor(x, shape=[2, 2.0, 3, 3])
        with pytest.raises(ValueError, match=r"shape\[1\] = -2"):
            layers.crop_tensor(x, shape=[2, -2, dim, 3])
        with pytest.raises(ValueError, match=r"shape\[1\] = 0"):
            layers.crop_tensor(x, shape=[2, 0, dim, 3])
        with pytest.raises(TypeError, match="offsets must be a list, tuple, Variable or None"):
            layers.crop_tensor(x, shape=[2, 2, 3, 3], offsets=0)
        with pytest.raises(ValueError, match=r"offsets\[1\] = -1; an offset is >= 0"):
            layers.crop_tensor(x, shape=[2, 2, 3, 3], offsets=[0, -1, dim, 0])
        with pytest.raises(TypeError, match="x 'h' must be one of"):
            layers.crop_tensor(layers.data("h", [2, 3], dtype="float16"), shape=[2, 2, 3])
        with pytest.raises(TypeError, match="shape 'i64' must be int32"):
            layers.crop_tensor(x, shape=layers.data("i64", [4], dtype="int64",
                                                    append_batch_size=False))
        with pytest.raises(ValueError, match="shape needs one entry per dim|needs one entry"):
            layers.crop_tensor(x, shape=[2, 2])


def test_multiplex():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x1, x2 = layers.data("x1", [2]), layers.data("x2", [2])
        index = layers.data("index", [1], dtype="int32")
        out = layers.multiplex(inputs=[x1, x2], index=index)
    (op,) = _ops(main, "multiplex")
    assert op.input("X") == ["x1", "x2"] and op.input("Ids") == ["index"]
    assert out.shape == (-1, 2) and out.dtype == "float32"
    got, = _run(main, startup, {"x1": np.array([[1, 2], [3, 4]], np.float32),
                                "x2": np.array([[5, 6], [7, 8]], np.float32),
                                "index": np.array([[1], [0]], np.int32)}, [out])
    np.testing.assert_array_equal(got, [[5, 6], [3, 4]])  # Fluid 1.8's documented example
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x1, x2 = layers.data("x1", [2]), layers.data("x2", [2])
        index = layers.data("index", [1], dtype="int32")
        with pytest.raises(TypeError, match="inputs must be a list of Variables, got tuple"):
            layers.multiplex((x1, x2), index)
        with pytest.raises(ValueError, match="at least 2 elements, got 1"):
            layers.multiplex([x1], index)
        with pytest.raises(TypeError, match="index 'f' must be int32 or int64"):
            layers.multiplex([x1, x2], layers.data("f", [1]))
        with pytest.raises(ValueError, match="one shape of rank >= 2"):
            layers.multiplex([x1, layers.data("x3", [3])], index)
        with pytest.raises(ValueError, match=r"must have shape \[M, 1\], got \[-1, 2\]"):
            layers.multiplex([x1, x2], layers.data("i2", [2], dtype="int64"))


def test_unique_and_unique_with_counts():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [6], dtype="int64", append_batch_size=False)
        out, index = layers.unique(x)
        out2, index2, count = layers.unique_with_counts(x, dtype="int64")
    op, op2 = _ops(main, "unique")[0], _ops(main, "unique_with_counts")[0]
    assert op.attr("dtype") == "int32" and op2.attr("dtype") == "int64"
    assert set(op.outputs) == {"Out", "Index"}
    assert set(op2.outputs) == {"Out", "Index", "Count"}
    assert out.shape == (-1,) and index.shape == (6,) and count.shape == (-1,)
    assert out.dtype == "int64" and index.dtype == "int32" and count.dtype == "int64"
    xv = np.array([2, 3, 3, 1, 5, 3], np.int64)
    got = _run(main, startup, {"x": xv}, [out, index, out2, index2, count])
    np.testing.assert_array_equal(got[0], [2, 3, 1, 5])  # first occurrences, not sorted
    np.testing.assert_array_equal(got[1], [0, 1, 1, 2, 3, 1])
    assert got[1].dtype == np.int32 and got[3].dtype == np.int64
    np.testing.assert_array_equal(got[4], [1, 3, 1, 1])
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match=r"x 'm' must be 1-D, got shape \[-1, 3\]"):
            layers.unique(layers.data("m", [3]))
        with pytest.raises(TypeError, match="index dtype must be int32 or int64, got float32"):
            layers.unique_with_counts(layers.data("v", [3], append_batch_size=False),
                                      dtype="float32")
        with pytest.raises(TypeError, match="x 'b' must be one of"):
            layers.unique(layers.data("b", [3], dtype="bool", append_batch_size=False))


def test_rank_is_an_assigned_constant():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        r = layers.rank(layers.data("x", [3, 100, 100]))
    (op,) = main.global_block().ops
    assert op.type == "assign_value" and op.attr("shape") == []
    assert op.attr("dtype") == "int32" and op.attr("int32_values") == [4]
    assert r.dtype == "int32" and tuple(r.shape) == ()
    got, = _run(main, startup, {}, [r])
    assert np.asarray(got).dtype == np.int32 and int(np.asarray(got)) == 4
    with pytest.raises(TypeError, match="input must be a Variable"):
        layers.rank(np.zeros(3))


def test_gradients_through_strided_slice_crop_tensor_multiplex_scatter_nd_add_crop():
    """Parameters → strided_slice (a negative stride) and crop_tensor → multiplex →
    scatter_nd_add → crop → a weighted sum: the gradients equal central differences."""
    ids = np.array([[1], [0], [1]], np.int32)
    index = np.array([[2], [0]], np.int32)
    weights = np.random.default_rng(6).standard_normal((2, 2))

    def build():
        w = layers.create_parameter([4, 6], "float32", name="w")
        u = layers.create_parameter([2, 3], "float32", name="u")
        iv = layers.data("ids", [3, 1], dtype="int32", append_batch_size=False)
        jv = layers.data("index", [2, 1], dtype="int32", append_batch_size=False)
        s = layers.strided_slice(w, [0, 1], [3, 0], [0, 6], [-1, 2])  # rows 3, 2, 1; cols 0, 2, 4
        c = layers.crop_tensor(w, shape=[3, -1], offsets=[1, 3])  # rows 1..3, cols 3..5
        m = layers.multiplex([s, c], iv)
        added = layers.scatter_nd_add(m, jv, u)
        cropped = layers.crop(added, shape=[2, 2], offsets=[1, 1])
        wt = layers.data("wt", [2, 2], dtype="float64", append_batch_size=False)
        return layers.reduce_sum(layers.elementwise_mul(cropped, wt))

    got = program_grads_and_numeric(build, {"ids": ids, "index": index, "wt": weights},
                                    ["w", "u"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
    dw = got["w"][0]
    assert np.abs(dw).sum() > 0 and np.abs(got["u"][0]).sum() > 0
    assert np.all(dw[0] == 0)  # row 0 is read by neither slice
