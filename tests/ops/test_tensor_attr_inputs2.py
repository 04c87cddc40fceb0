"""Fluid 1.8's tensor-valued attribute inputs, second round: scale's ``ScaleTensor`` (and its
gradient), unsqueeze's ``AxesTensor``/``AxesTensorList``, split's ``AxisTensor``/
``SectionsTensorList``, slice's tensor bounds (``x[-1]`` by a Variable, the order of the
tensors), strided_slice fed int32 through a float32-declared ``layers.data``, uniform_random's
diagonal, unique's integer dtype code, and the v1 ops ``squeeze``/``unsqueeze``/``flatten``
and the norms ``squared_l2_norm``/``l1_norm``/``squared_l2_distance``.

References are plain numpy; gradients are checked against central differences with the
machinery of ``test_grad_check`` (through ``grad_check`` of ``test_tensor_attr_inputs``).
"""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.ops import registry

from . import run_op
from .test_grad_check import forward
from .test_tensor_attr_inputs import grad_check, run_program

I32, I64 = np.int32, np.int64
GRAD = registry.GRAD


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# scale


def test_scale_grad_reads_the_scale_tensor():
    x = _rng(1).standard_normal((3, 4))
    ins = {"X": [x], "ScaleTensor": [np.array([-2.5])]}
    attrs = {"scale": 7.0, "bias": 0.5, "bias_after_scale": False}
    assert grad_check("scale", ins, attrs) == 1
    op, _ = forward("scale", ins, attrs)
    (desc,) = registry.get("scale").grad(op)
    assert desc["inputs"]["ScaleTensor"] == op.inputs["ScaleTensor"]
    assert desc["attrs"]["bias"] == 0.0 and desc["attrs"]["bias_after_scale"] is True


def test_scale_layer_with_a_variable_scale_backprops_through_it():
    main, startup = fluid.Program(), fluid.Program()
    xv = _rng(2).standard_normal((2, 3)).astype("float32")
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [2, 3], append_batch_size=False, stop_gradient=False)
        s = fluid.layers.data("s", [1], append_batch_size=False)
        y = fluid.layers.scale(x, scale=s, bias=1.0)
        loss = fluid.layers.reduce_sum(y)
        (dx,) = fluid.gradients(loss, [x])
    got_y, got_dx = run_program(main, startup, {"x": xv, "s": np.array([3.0], "float32")},
                                [y, dx])
    np.testing.assert_allclose(got_y, 3.0 * xv + 1.0, rtol=1e-6)
    np.testing.assert_allclose(got_dx, np.full_like(xv, 3.0))


# ---------------------------------------------------------------------------------------------
# unsqueeze2 / unsqueeze


def test_unsqueeze2_axes_from_tensors_and_attr_first():
    x = _rng(3).standard_normal((3, 2, 5))
    ref = x.reshape(3, 1, 1, 2, 5, 1)
    for ins in ({"AxesTensor": [np.array([3, 1, 1], I32)]},
                {"AxesTensor": [np.array([3, 1, 1], I64)]},
                {"AxesTensorList": [np.array([3], I32), np.array([1], I64),
                                    np.array([1], I32)]}):
        out = run_op("unsqueeze2", {"X": [x], **ins})
        np.testing.assert_array_equal(out["Out"][0], ref)
        assert out["XShape"][0].shape == (0, 3, 2, 5)
    # a non-empty attr wins over the tensors (UnsqueezeKernel reads them only without it)
    out = run_op("unsqueeze2", {"X": [x], "AxesTensor": [np.array([0], I32)]}, {"axes": [3]})
    np.testing.assert_array_equal(out["Out"][0], x.reshape(3, 2, 5, 1))


@pytest.mark.parametrize("ins, err, match", [
    ({"AxesTensor": [np.array([1.0])]}, TypeError, "int32 or int64"),
    ({"AxesTensorList": [np.array([1, 2], I32)]}, ValueError, r"shape \[1\]"),
    ({"AxesTensor": [np.array([[1]], I32)]}, ValueError, "1-D"),
    ({"AxesTensor": [np.array([0, 0, 0, 0], I32)]}, ValueError, "at most 6"),
])
def test_unsqueeze2_bad_axes_tensors(ins, err, match):
    with pytest.raises(err, match=match):
        run_op("unsqueeze2", {"X": [np.ones((2, 3, 4))], **ins})


def test_unsqueeze2_grad_with_tensor_axes():
    x = _rng(4).standard_normal((3, 4))
    assert grad_check("unsqueeze2", {"X": [x], "AxesTensor": [np.array([2, 0], I32)]}, {}) == 1


def test_unsqueeze_layer_builds_the_tensor_inputs_and_runs():
    main, startup = fluid.Program(), fluid.Program()
    xv = _rng(5).standard_normal((3, 2, 5))
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [3, 2, 5], append_batch_size=False, dtype="float64")
        three = fluid.layers.fill_constant([1], "int32", 3)
        one = fluid.layers.fill_constant([1], "int64", 1)
        axes = fluid.layers.data("axes", [3], append_batch_size=False, dtype="int32")
        a = fluid.layers.unsqueeze(x, axes=[3, 1, 1])
        b = fluid.layers.unsqueeze(x, axes=[three, one, 1])
        c = fluid.layers.unsqueeze(x, axes=axes)
        d = fluid.layers.unsqueeze(x, axes=3)
        with pytest.raises(TypeError, match="axes must be an int, a list"):
            fluid.layers.unsqueeze(x, axes=2.1)
    assert list(b.shape) == [-1] * 6 and list(c.shape) == [-1] * 6
    assert list(d.shape) == [3, 2, 5, 1]
    got = run_program(main, startup, {"x": xv, "axes": np.array([3, 1, 1], I32)},
                      [a, b, c, d])
    ref = xv.reshape(3, 1, 1, 2, 5, 1)
    for g in got[:3]:
        np.testing.assert_array_equal(g, ref)
    np.testing.assert_array_equal(got[3], xv.reshape(3, 2, 5, 1))
    kinds = [set(op.inputs) for op in main.global_block().ops if op.type == "unsqueeze2"]
    assert {"X", "AxesTensorList"} in kinds and {"X", "AxesTensor"} in kinds


# ---------------------------------------------------------------------------------------------
# v1 squeeze / unsqueeze / flatten (no XShape; their grad reads X)


def test_v1_shape_ops_forward_and_grad():
    x = _rng(6).standard_normal((3, 1, 4, 1))
    out = run_op("squeeze", {"X": [x]}, {"axes": [1]})
    assert set(out) == {"Out"}
    np.testing.assert_array_equal(out["Out"][0], x.reshape(3, 4, 1))
    y = _rng(7).standard_normal((3, 4))
    out = run_op("unsqueeze", {"X": [y], "AxesTensorList": [np.array([0], I32)]})
    np.testing.assert_array_equal(out["Out"][0], y[None])
    z = _rng(8).standard_normal((2, 3, 4))
    np.testing.assert_array_equal(run_op("flatten", {"X": [z]}, {"axis": 2})["Out"][0],
                                  z.reshape(6, 4))
    for op_type, ins, attrs in (("squeeze", {"X": [x]}, {"axes": [3]}),
                                ("unsqueeze", {"X": [y]}, {"axes": [1]}),
                                ("flatten", {"X": [z]}, {"axis": 1})):
        assert grad_check(op_type, ins, attrs) == 1
        op, _ = forward(op_type, ins, attrs)
        (desc,) = registry.get(op_type).grad(op)
        assert desc["type"] == op_type + "_grad" and "X" in desc["inputs"]


# ---------------------------------------------------------------------------------------------
# split


def test_split_axis_tensor_and_sections_tensor_list():
    x = _rng(9).standard_normal((4, 6, 2))
    out = run_op("split", {"X": [x], "AxisTensor": [np.array([1], I64)]},
                 {"num": 3, "axis": 0, "_out_counts": {"Out": 3}})
    for got, ref in zip(out["Out"], np.split(x, 3, axis=1), strict=True):
        np.testing.assert_array_equal(got, ref)
    out = run_op("split", {"X": [x], "SectionsTensorList": [np.array([1], I32),
                                                            np.array([-1], I32)]},
                 {"sections": [-1, -1], "axis": 1, "_out_counts": {"Out": 2}})
    for got, ref in zip(out["Out"], np.split(x, [1], axis=1), strict=True):
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("ins, attrs, err, match", [
    ({"AxisTensor": [np.array([1.0])]}, {"num": 2}, TypeError, "int32 or int64"),
    ({"AxisTensor": [np.array([3], I32)]}, {"num": 2}, ValueError, "outside"),
    ({"SectionsTensorList": [np.array([4], I32), np.array([-1], I32)]}, {"sections": [-1, -1]},
     ValueError, "less than"),
    ({"SectionsTensorList": [np.array([1], I32), np.array([1], I32)]}, {"sections": [-1, -1]},
     ValueError, "sum to 2"),
])
def test_split_bad_tensors(ins, attrs, err, match):
    with pytest.raises(err, match=match):
        run_op("split", {"X": [np.ones((4, 2))], **ins}, {"_out_counts": {"Out": 2}, **attrs})


def test_split_grad_uses_the_axis_tensor():
    x = _rng(10).standard_normal((4, 6))
    ins = {"X": [x], "AxisTensor": [np.array([1], I32)]}
    attrs = {"num": 2, "axis": 0, "_out_counts": {"Out": 2}}
    assert grad_check("split", ins, attrs) == 1
    op, _ = forward("split", ins, attrs)
    (desc,) = registry.get("split").grad(op)
    assert desc["inputs"]["AxisTensor"] == op.inputs["AxisTensor"]
    assert set(desc["outputs"]) == {"X" + GRAD}  # no gradient for the int tensors


def test_split_layer_with_variables():
    main, startup = fluid.Program(), fluid.Program()
    xv = _rng(11).standard_normal((4, 6, 5)).astype("float32")
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [4, 6, 5], append_batch_size=False)
        two = fluid.layers.fill_constant([1], "int32", 2)
        dim = fluid.layers.fill_constant([1], "int32", 1)
        a = fluid.layers.split(x, num_or_sections=[2, two, -1], dim=dim)
        b = fluid.layers.split(x, num_or_sections=[1, -1], dim=-1)
    assert list(a[0].shape) == [-1, -1, -1] and list(b[1].shape) == [4, 6, 4]
    got = run_program(main, startup, {"x": xv}, [*a, *b])
    for g, ref in zip(got, np.split(xv, [2, 4], axis=1) + np.split(xv, [1], axis=2),
                      strict=True):
        np.testing.assert_array_equal(g, ref)


# ---------------------------------------------------------------------------------------------
# slice / strided_slice


def test_slice_tensor_over_list_and_index_minus_one():
    x = _rng(12).standard_normal((4, 5))
    # slice reads StartsTensor before StartsTensorList (SliceKernel; strided_slice the other way)
    out = run_op("slice", {"Input": [x], "StartsTensor": [np.array([2], I32)],
                           "StartsTensorList": [np.array([0], I32)]},
                 {"axes": [0], "starts": [-1], "ends": [4], "infer_flags": [-1]})
    np.testing.assert_array_equal(out["Out"][0], x[2:4])
    # x[i] with i a Variable: end = i + 1; i = -1 gives end 0, the last row
    out = run_op("slice", {"Input": [x], "StartsTensorList": [np.array([-1], I32)],
                           "EndsTensorList": [np.array([0], I32)]},
                 {"axes": [0], "starts": [-1], "ends": [-1], "infer_flags": [-1],
                  "decrease_axis": [0]})
    np.testing.assert_array_equal(out["Out"][0], x[-1])
    with pytest.raises(ValueError, match="greater than the start"):
        run_op("slice", {"Input": [x], "StartsTensor": [np.array([3], I32)],
                         "EndsTensor": [np.array([1], I32)]}, {"axes": [0]})
    with pytest.raises(TypeError, match="int32 or int64"):
        run_op("slice", {"Input": [x], "StartsTensor": [np.array([1.0])]},
               {"axes": [0], "ends": [3]})


def test_getitem_with_variables_and_strided_slice_fed_int32():
    main, startup = fluid.Program(), fluid.Program()
    xv = _rng(13).standard_normal((3, 4, 5, 6))
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [3, 4, 5, 6], append_batch_size=False, dtype="float64")
        m1 = fluid.layers.fill_constant([1], "int32", -1)
        m3 = fluid.layers.fill_constant([1], "int32", -3)
        # declared float32 (the layers.data default) and fed int32, as Paddle's own tests do
        starts = fluid.layers.data("starts", [3], append_batch_size=False)
        ends = fluid.layers.data("ends", [3], append_batch_size=False)
        strides = fluid.layers.data("strides", [3], append_batch_size=False)
        a = fluid.layers.strided_slice(x, [0, 1, 2], starts, ends, strides)
        b = x[m1, 0:100, :, 2:m1]
        c = x[m3:3:1, 0:100:2, :, m1:2:m1]
    got = run_program(main, startup, {"x": xv, "starts": np.array([-3, 0, 2], I32),
                                      "ends": np.array([3, 100, -1], I32),
                                      "strides": np.array([1, 1, 1], I32)}, [a, b, c])
    np.testing.assert_array_equal(got[0], xv[-3:3, 0:100, 2:-1])
    np.testing.assert_array_equal(got[1], xv[-1, 0:100, :, 2:-1])
    np.testing.assert_array_equal(got[2], xv[-3:3, 0:100:2, :, -1:2:-1])


def test_strided_slice_refuses_float_tensors_when_it_runs():
    with pytest.raises(TypeError, match="StartsTensor must be an int32 or int64"):
        run_op("strided_slice", {"Input": [np.ones((4, 3))],
                                 "StartsTensor": [np.array([1.0], np.float32)]},
               {"axes": [0], "ends": [3], "strides": [1], "infer_flags": [-1]})


# ---------------------------------------------------------------------------------------------
# uniform_random's diagonal, unique's dtype code, the norms


def test_uniform_random_diag_and_initializer():
    attrs = {"shape": [20, 30], "min": 5.0, "max": 10.0, "seed": 3, "diag_num": 10,
             "diag_step": 3, "diag_val": -1.0, "rng_key": "w"}
    flat = run_op("uniform_random", {}, attrs)["Out"][0].reshape(-1)
    pos = np.arange(10) * 4
    np.testing.assert_array_equal(flat[pos], -1.0)
    rest = np.delete(flat, pos)
    assert rest.min() >= 5.0 and rest.max() < 10.0
    with pytest.raises(ValueError, match="reaches"):
        run_op("uniform_random", {}, {**attrs, "shape": [2, 3]})
    with pytest.raises(ValueError, match="both be positive"):
        fluid.initializer.UniformInitializer(diag_num=2)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        w = fluid.layers.create_parameter(
            [4, 4], "float32", default_initializer=fluid.initializer.UniformInitializer(
                low=0.0, high=0.5, diag_num=4, diag_step=4, diag_val=9.0))
        r = fluid.layers.nn.uniform_random([2, 3], min=0.0, max=1.0)
    got_w, got_r = run_program(main, startup, {}, [w, r])
    np.testing.assert_array_equal(np.diag(got_w), 9.0)
    assert got_r.shape == (2, 3)


def test_unique_takes_fluid_dtype_codes():
    x = np.array([2, 3, 3, 1, 5, 3], I64)
    for code, dtype in ((2, I32), (3, I64)):
        out = run_op("unique_with_counts", {"X": [x]}, {"dtype": code})
        np.testing.assert_array_equal(out["Out"][0], [2, 3, 1, 5])
        assert out["Index"][0].dtype == dtype
        np.testing.assert_array_equal(out["Index"][0], [0, 1, 1, 2, 3, 1])
        np.testing.assert_array_equal(out["Count"][0], [1, 3, 1, 1])


def test_norm_ops_forward_and_grad():
    x = _rng(14).standard_normal((3, 4))
    np.testing.assert_allclose(run_op("squared_l2_norm", {"X": [x]})["Out"][0],
                               [np.sum(x ** 2)])
    np.testing.assert_allclose(run_op("l1_norm", {"X": [x]})["Out"][0], [np.abs(x).sum()])
    y = _rng(15).standard_normal((1, 4))
    out = run_op("squared_l2_distance", {"X": [x], "Y": [y]})
    np.testing.assert_allclose(out["sub_result"][0], x - y)
    np.testing.assert_allclose(out["Out"][0], ((x - y) ** 2).sum(1, keepdims=True))
    assert grad_check("squared_l2_norm", {"X": [x]}, {}) == 1
    assert grad_check("squared_l2_distance", {"X": [x], "Y": [y]}, {}) == 2
    with pytest.raises(ValueError, match="1 row or as many rows"):
        run_op("squared_l2_distance", {"X": [x], "Y": [np.ones((2, 4))]})
