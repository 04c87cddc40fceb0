"""Fluid 1.8's build-time input checks (``data_feeder.check_variable_and_dtype`` and
``check_type``) in the layers: a non-Variable input or a dtype outside the layer's list is a
TypeError naming the layer, the argument and what was received, before any shape check; the
checks are off inside ``fluid.dygraph.guard``, as in Fluid."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.layers.checks import check_dtype, check_type, check_variable_and_dtype


def _d(name: str, dtype: str, shape: list[int] | None = None) -> fluid.Variable:
    return fluid.data(name=name, shape=shape or [4, 8], dtype=dtype)


def _lod() -> Any:
    return fluid.create_lod_tensor(np.array([[1.0], [2.0]]), [[1, 1]], fluid.CPUPlace())


_NUMS = "float32, float64, int32 or int64"
_FLOATS = "float16, float32 or float64"
_EW = "float16, float32, float64, int32 or int64"


def _dtype_msg(arg: str, layer: str, allowed: str, got: str) -> str:
    return f"The data type of '{arg}' in {layer} must be {allowed}, but received {got}."


def _type_msg(arg: str, layer: str, allowed: str, got: str) -> str:
    return f"The type of '{arg}' in {layer} must be {allowed}, but received {got}."


# (case id, the call building the layer, the TypeError message), one per check Fluid 1.8's
# layer makes (its lists at 61ec30f0)
CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("softmax-type", lambda: layers.softmax(np.ones((2, 3), "float32")),
     _type_msg("input", "softmax", "Variable", "ndarray")),
    ("softmax-dtype", lambda: layers.softmax(_d("x", "int32")),
     _dtype_msg("input", "softmax", _FLOATS, "int32")),
    ("selu", lambda: layers.selu(_d("x", "float16")),
     _dtype_msg("x", "selu", "float32 or float64", "float16")),
    ("mean", lambda: layers.mean(_d("x", "int32")),
     _dtype_msg("x", "mean", _FLOATS, "int32")),
    ("reduce_sum", lambda: layers.reduce_sum(_d("x", "bool")),
     _dtype_msg("input", "reduce_sum", _NUMS, "bool")),
    ("reduce_mean", lambda: layers.reduce_mean(_d("x", "float16")),
     _dtype_msg("input", "reduce_mean", _NUMS, "float16")),
    ("reduce_all-dtype", lambda: layers.reduce_all(_d("x", "float32")),
     _dtype_msg("input", "reduce_all", "bool", "float32")),
    ("reduce_any-type", lambda: layers.reduce_any(1),
     _type_msg("input", "reduce_any", "Variable", "int")),
    ("elementwise_add-x", lambda: layers.elementwise_add(_d("x", "bool"), _d("y", "bool")),
     _dtype_msg("x", "elementwise_add", _EW, "bool")),
    ("elementwise_mul-y", lambda: layers.elementwise_mul(_d("x", "float32"), _lod()),
     _type_msg("y", "elementwise_mul", "Variable", "LoDTensor")),
    ("elementwise_pow-y", lambda: layers.elementwise_pow(_d("x", "float32"), _d("y", "uint8")),
     _dtype_msg("y", "elementwise_pow", _EW, "uint8")),
    ("mul-x", lambda: layers.mul(_d("x", "int32"), _d("y", "float32", [8, 2])),
     _dtype_msg("x", "mul", _FLOATS, "int32")),
    ("mul-y", lambda: layers.mul(_d("x", "float32"), _lod()),
     _type_msg("y", "mul", "Variable", "LoDTensor")),
    ("prelu", lambda: layers.prelu(_d("x", "int32"), "all"),
     _dtype_msg("x", "prelu", "float32 or float64", "int32")),
    ("smooth_l1-x", lambda: layers.smooth_l1(_d("x", "int32"), _d("y", "float32")),
     _dtype_msg("X", "smooth_l1_loss", "float32 or float64", "int32")),
    ("smooth_l1-y", lambda: layers.smooth_l1(_d("x", "float32"), _d("y", "int64")),
     _dtype_msg("Y", "smooth_l1_loss", "float32 or float64", "int64")),
    ("embedding-input", lambda: layers.embedding(_d("x", "int32", [4, 1]), size=[10, 4]),
     _dtype_msg("input", "fluid.layers.embedding", "int64", "int32")),
    ("embedding-dtype",
     lambda: layers.embedding(_d("x", "int64", [4, 1]), size=[10, 4], dtype="int64"),
     _dtype_msg("dtype", "fluid.layers.embedding", _FLOATS, "int64")),
    ("cross_entropy", lambda: layers.cross_entropy(_d("x", "int32"), _d("y", "int64", [4, 1])),
     _dtype_msg("input", "cross_entropy", _FLOATS, "int32")),
    ("accuracy", lambda: layers.accuracy(_d("x", "int64"), _d("y", "int64", [4, 1])),
     _dtype_msg("input", "accuracy", _FLOATS, "int64")),
    ("matmul-x", lambda: layers.matmul(_d("x", "int32"), _d("y", "float32", [8, 2])),
     _dtype_msg("x", "matmul", _FLOATS, "int32")),
    ("matmul-y", lambda: layers.matmul(_d("x", "float32"), _d("y", "int64", [8, 2])),
     _dtype_msg("y", "matmul", _FLOATS, "int64")),
    ("cos_sim-X", lambda: layers.cos_sim(_d("x", "float64"), _d("y", "float32")),
     _dtype_msg("X", "cos_sim", "float32", "float64")),
    ("cos_sim-Y", lambda: layers.cos_sim(_d("x", "float32"), _lod()),
     _type_msg("Y", "cos_sim", "Variable", "LoDTensor")),
    ("nce-input", lambda: layers.nce(_d("x", "float16"), _d("y", "int64", [4, 1]), 10),
     _dtype_msg("input", "nce", "float32 or float64", "float16")),
    ("nce-label", lambda: layers.nce(_d("x", "float32"), _d("y", "int32", [4, 1]), 10),
     _dtype_msg("label", "nce", "int64", "int32")),
    ("hsigmoid-input", lambda: layers.hsigmoid(_d("x", "int32"), _d("y", "int64", [4, 1]), 6),
     _dtype_msg("input", "hsigmoid", "float32 or float64", "int32")),
    ("hsigmoid-label", lambda: layers.hsigmoid(_d("x", "float32"), _d("y", "int32", [4, 1]), 6),
     _dtype_msg("label", "hsigmoid", "int64", "int32")),
    ("center_loss-input",
     lambda: layers.center_loss(_d("x", "int32"), _d("y", "int64", [4, 1]), 5, 0.1, None),
     _dtype_msg("input", "center_loss", "float32 or float64", "int32")),
    ("center_loss-label",
     lambda: layers.center_loss(_d("x", "float32"), _d("y", "float32", [4, 1]), 5, 0.1, None),
     _dtype_msg("label", "center_loss", "int32 or int64", "float32")),
    ("center_loss-alpha",
     lambda: layers.center_loss(_d("x", "float32"), _d("y", "int64", [4, 1]), 5,
                                _d("a", "int64", [1]), None),
     _dtype_msg("alpha", "center_loss", "float32 or float64", "int64")),
    ("npair_loss-anchor",
     lambda: layers.npair_loss(_d("a", "int32"), _d("p", "float32"), _d("l", "int64", [4])),
     _dtype_msg("anchor", "npair_loss", "float32 or float64", "int32")),
    # Fluid 1.8 names these two checks after the argument, not the layer
    ("npair_loss-positive",
     lambda: layers.npair_loss(_d("a", "float32"), _d("p", "int32"), _d("l", "int64", [4])),
     _dtype_msg("positive", "positive", "float32 or float64", "int32")),
    ("npair_loss-labels",
     lambda: layers.npair_loss(_d("a", "float32"), _d("p", "float32"), _d("l", "int32", [4])),
     _dtype_msg("labels", "labels", "float32, float64 or int64", "int32")),
    ("batch_norm-type", lambda: layers.batch_norm(_lod()),
     _type_msg("input", "batch_norm", "Variable", "LoDTensor")),
    ("batch_norm-dtype", lambda: layers.batch_norm(_d("x", "int32", [2, 3, 4, 4])),
     _dtype_msg("input", "batch_norm", _FLOATS, "int32")),
    ("group_norm", lambda: layers.group_norm(_d("x", "float16", [2, 4, 3, 3]), 2),
     _dtype_msg("input", "group_norm", "float32 or float64", "float16")),
    ("instance_norm", lambda: layers.instance_norm(_d("x", "int64", [2, 4, 3, 3])),
     _dtype_msg("input", "instance_norm", "float32 or float64", "int64")),
    ("lrn", lambda: layers.lrn(_d("x", "float64", [2, 4, 3, 3])),
     _dtype_msg("input", "lrn", "float32", "float64")),
    ("deformable_conv-input",
     lambda: layers.deformable_conv(_d("x", "int32", [1, 2, 4, 4]),
                                    _d("o", "float32", [1, 18, 4, 4]),
                                    _d("m", "float32", [1, 9, 4, 4]), 2, 3, padding=1),
     _dtype_msg("input", "deformable_conv", "float32 or float64", "int32")),
    ("deformable_conv-offset",
     lambda: layers.deformable_conv(_d("x", "float32", [1, 2, 4, 4]),
                                    _d("o", "int32", [1, 18, 4, 4]),
                                    _d("m", "float32", [1, 9, 4, 4]), 2, 3, padding=1),
     _dtype_msg("offset", "deformable_conv", "float32 or float64", "int32")),
    ("deformable_conv-mask",
     lambda: layers.deformable_conv(_d("x", "float32", [1, 2, 4, 4]),
                                    _d("o", "float32", [1, 18, 4, 4]),
                                    np.ones((1, 9, 4, 4), "float32"), 2, 3, padding=1),
     _type_msg("mask", "deformable_conv", "Variable or NoneType", "ndarray")),
    ("maxout", lambda: layers.maxout(_d("x", "int32", [2, 4, 3, 3]), 2),
     _dtype_msg("x", "maxout", "float32 or float64", "int32")),
    ("sequence_reverse", lambda: layers.sequence_reverse(_d("x", "float16")),
     _dtype_msg("x", "fluid.layers.sequence_reverse", "float32, float64, int8, int32 or int64",
                "float16")),
    ("lod_reset-x", lambda: layers.lod_reset(_d("x", "bool"), target_lod=[0, 2, 4]),
     _dtype_msg("x", "lod_reset", _NUMS, "bool")),
    ("lod_reset-y", lambda: layers.lod_reset(_d("x", "float32"), y=_lod()),
     _type_msg("y", "lod_reset", "Variable", "LoDTensor")),
]

_NMS = "locality_aware_nms"


def _nms(boxes: str = "float32", scores: Any = "float32", *args: Any, **kwargs: Any) -> Any:
    b = _d("b", boxes, [-1, 81, 8])
    s = scores if not isinstance(scores, str) else _d("s", scores, [-1, 1, 81])
    # the three required arguments, positional unless a case passes them by keyword
    args = args or (() if kwargs else (0.5, 400, 200))
    return layers.locality_aware_nms(b, s, *args, **kwargs)


CASES += [
    ("nms-bboxes", lambda: _nms("int32"),
     _dtype_msg("bboxes", _NMS, "float32 or float64", "int32")),
    ("nms-scores", lambda: _nms("float32", [1, 2]),
     _type_msg("scores", _NMS, "Variable", "list")),
    # Fluid 1.8 checks these types exactly: an int is no float here
    ("nms-score_threshold", lambda: _nms("float32", "float32", 1, 400, 200),
     _type_msg("score_threshold", _NMS, "float", "int")),
    ("nms-nms_top_k", lambda: _nms("float32", "float32", 0.5, 400.5, 200),
     _type_msg("nms_top_k", _NMS, "int", "float")),
    ("nms-keep_top_k", lambda: _nms("float32", "float32", 0.5, 400, 200.5),
     _type_msg("keep_top_k", _NMS, "int", "float")),
    ("nms-nms_threshold", lambda: _nms(nms_threshold=0, score_threshold=0.5, nms_top_k=400,
                                       keep_top_k=200),
     _type_msg("nms_threshold", _NMS, "float", "int")),
    ("nms-nms_eta", lambda: _nms(nms_eta=1, score_threshold=0.5, nms_top_k=400,
                                 keep_top_k=200),
     _type_msg("nms_eta", _NMS, "float", "int")),
    ("nms-background_label", lambda: _nms(background_label=1.5, score_threshold=0.5,
                                          nms_top_k=400, keep_top_k=200),
     _type_msg("background_label", _NMS, "int", "float")),
    ("nms-normalized", lambda: _nms(normalized=1, score_threshold=0.5, nms_top_k=400,
                                    keep_top_k=200),
     _type_msg("normalized", _NMS, "bool", "int")),
]


_LOGICAL = ("logical_and", "logical_or", "logical_xor")
_ASSIGN_VAR = "float32, float64, int32, int64 or bool"

# Fluid 1.8's sign, _logical_op (the four logical layers), increment and assign
CASES += [
    ("sign-type", lambda: layers.sign(12), _type_msg("x", "sign", "Variable or ndarray", "int")),
    ("sign-dtype", lambda: layers.sign(_d("x", "int32")),
     _dtype_msg("x", "sign", _FLOATS, "int32")),
    ("sign-int64", lambda: layers.sign(_d("x", "int64")),
     _dtype_msg("x", "sign", _FLOATS, "int64")),
    # an array becomes an assign_value constant first: an int32 one is then refused
    ("sign-int-array", lambda: layers.sign(np.array([1, -2], "int32")),
     _dtype_msg("x", "sign", _FLOATS, "int32")),
    *[(f"{op}-{arg}", build, message) for op in _LOGICAL for arg, build, message in (
        ("out", lambda op=op: getattr(layers, op)(_d("x", "bool"), _d("y", "bool"), out=1),
         _type_msg("out", op, "Variable", "int")),
        ("x", lambda op=op: getattr(layers, op)(_d("x", "int32"), _d("y", "bool")),
         _dtype_msg("x", op, "bool", "int32")),
        ("y", lambda op=op: getattr(layers, op)(_d("x", "bool"), _d("y", "int32")),
         _dtype_msg("y", op, "bool", "int32")),
    )],
    ("logical_not-out", lambda: layers.logical_not(_d("x", "bool"), out=1),
     _type_msg("out", "logical_not", "Variable", "int")),
    ("logical_not-x", lambda: layers.logical_not(_d("x", "int32")),
     _dtype_msg("x", "logical_not", "bool", "int32")),
    ("increment-type", lambda: layers.increment([1, 2, 3]),
     _type_msg("x", "increment", "Variable", "list")),
    ("increment-dtype", lambda: layers.increment(_d("x", "bool", [1])),
     _dtype_msg("x", "increment", _NUMS, "bool")),
    ("assign-type", lambda: layers.assign(_lod()),
     _type_msg("input", "assign", "Variable or ndarray", "LoDTensor")),
    ("assign-dtype", lambda: layers.assign(_d("x", "uint8")),
     _dtype_msg("input", "assign", _ASSIGN_VAR, "uint8")
     + " (When the type of input in assign is Variable.)"),
    ("assign-fp16", lambda: layers.assign(_d("x", "float16")),
     _dtype_msg("input", "assign", _ASSIGN_VAR, "float16")),
    *[(f"assign-{dtype}-array", lambda dtype=dtype: layers.assign(np.ones((1, 2), dtype)),
       "When the type of 'input' in assign is numpy.ndarray, the data type of 'input' must be "
       f"bool, float32, int32 or int64, but received {dtype}")
      for dtype in ("float64", "uint8")],
    ("cumsum", lambda: layers.cumsum(np.ones((2, 3), "float32")),
     _type_msg("x", "cumsum", "Variable", "ndarray")),
]

# (layer, Fluid 1.8's list for x as its message words it, a dtype outside it): the activation
# layers of layers/ops.py (generate_activation_fn: abs, exp and square take ints, the others
# floats) and of layers/nn.py, each of which checks x itself
_ACTIVATIONS: list[tuple[str, str, str]] = [
    *[(name, _FLOATS, "int32") for name in (
        "relu", "sigmoid", "tanh", "hard_swish", "brelu", "soft_relu", "stanh", "floor",
        "leaky_relu", "relu6", "elu", "softplus", "softsign", "hard_sigmoid", "swish", "cos",
        "sqrt", "logsigmoid", "tanh_shrink", "softshrink", "hard_shrink", "thresholded_relu",
        "rsqrt", "reciprocal", "ceil", "round", "sin", "acos", "asin", "atan")],
    ("log", "float32 or float64", "int32"),
    *[(name, "int32, int64, float16, float32 or float64", "bool")
      for name in ("abs", "exp", "square")],
    ("pow", "int32, int64, float32 or float64", "float16"),
]
_ACT_IDS = [a[0] for a in _ACTIVATIONS]


@pytest.mark.parametrize("name, allowed, refused", _ACTIVATIONS, ids=_ACT_IDS)
def test_activation_refuses_dtype(name: str, allowed: str, refused: str) -> None:
    """An int32 Variable (for the layers that take ints, a dtype outside their list): Fluid's
    ``*OpError`` and ``*_test_errors`` cases of test_activation_op.py."""
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(TypeError, match=re.escape(_dtype_msg("x", name, allowed, refused))):
            getattr(layers, name)(_d("x", refused))


@pytest.mark.parametrize("name", _ACT_IDS)
@pytest.mark.parametrize("value", [np.ones((4, 8), "float32"), _lod()],
                         ids=["ndarray", "LoDTensor"])
def test_activation_refuses_non_variable(name: str, value: Any) -> None:
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(TypeError, match=re.escape(
                _type_msg("x", name, "Variable", type(value).__name__))):
            getattr(layers, name)(value)


def test_activations_build_and_run_on_float32() -> None:
    """Every checked activation still builds on float32 and runs (one program for all)."""
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = _d("x", "float32")
        outs = [getattr(layers, name)(x) for name in _ACT_IDS]
    value = np.linspace(0.1, 0.9, 32, dtype="float32").reshape(4, 8)  # in every domain
    results = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": value}, fetch_list=outs)
    for name, result in zip(_ACT_IDS, results, strict=True):
        assert result.dtype == np.float32 and result.shape == (4, 8), name
        assert np.isfinite(result).all(), name
    by_name = dict(zip(_ACT_IDS, results, strict=True))
    np.testing.assert_allclose(by_name["sqrt"], np.sqrt(value), rtol=1e-6)
    np.testing.assert_allclose(by_name["log"], np.log(value), rtol=1e-6)
    np.testing.assert_array_equal(by_name["ceil"], np.ones_like(value))


@pytest.mark.parametrize("value", [
    np.array([[2**53 + 1, -(2**62) - 3], [7, 2**63 - 1]], dtype=np.int64),
    np.array([[True, False, True]]),
    np.array([[-1.5, 0.25]], dtype=np.float32),
    np.array([[2**31 - 1, -(2**31)]], dtype=np.int32),
], ids=["int64", "bool", "float32", "int32"])
def test_assign_carries_numpy_values_exactly(value: np.ndarray) -> None:
    """Fluid 1.8's assign of a bool, float32, int32 or int64 array (assign_value's
    ``bool_values`` ... ``int64_values``): the values and dtype come back exactly, int64 ones
    beyond 2**53 included (Paddle's TestAssignApi3/4); into a new variable and into an
    ``output`` one."""
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        new = layers.assign(value)
        given = layers.create_tensor(dtype=str(value.dtype))
        layers.assign(input=value, output=given)
    assert new.dtype == str(value.dtype)
    for result in fluid.Executor(fluid.CPUPlace()).run(main, fetch_list=[new, given]):
        assert result.dtype == value.dtype
        np.testing.assert_array_equal(result, value)


def test_sign_of_numpy_array_and_float16() -> None:
    """Fluid's sign takes a numpy array (made a constant by assign) and a float16 Variable."""
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        assert layers.sign(_d("h", "float16", [4])).dtype == "float16"
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        out = layers.sign(np.array([3.0, 0.0, -2.0], dtype="float32"))
    (result,) = fluid.Executor(fluid.CPUPlace()).run(main, fetch_list=[out])
    np.testing.assert_array_equal(result, [1.0, 0.0, -1.0])


def test_logical_out_increment_and_assign_accept_fluid_inputs() -> None:
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x, y = _d("x", "bool", [2]), _d("y", "bool", [2])
        out = layers.create_tensor("bool")
        layers.logical_and(x, y, out=out)
        neg = layers.logical_not(x, out=layers.create_tensor("bool"))
        counter = layers.fill_constant([1], "int64", 5)
        layers.increment(counter, 2.0)
        copied = layers.assign(_d("z", "bool", [2]))
    feed = {"x": np.array([True, False]), "y": np.array([True, True]),
            "z": np.array([False, True])}
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed,
                                               fetch_list=[out, neg, counter, copied])
    np.testing.assert_array_equal(got[0], [True, False])
    np.testing.assert_array_equal(got[1], [False, True])
    assert got[2].tolist() == [7]
    np.testing.assert_array_equal(got[3], [False, True])


def test_activation_and_assign_checks_are_off_in_dygraph_mode() -> None:
    """As Fluid, the layers check nothing inside the guard: the kernels take an int32 relu,
    floor and increment and a uint8 assign."""
    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(np.array([1, -2], "int32"))
        np.testing.assert_array_equal(layers.relu(x).numpy(), [1, 0])
        np.testing.assert_array_equal(layers.floor(x).numpy(), [1, -2])
        np.testing.assert_array_equal(layers.increment(x, in_place=False).numpy(), [2, -1])
        u8 = fluid.dygraph.to_variable(np.array([3], "uint8"))
        np.testing.assert_array_equal(layers.assign(u8).numpy(), [3])
        np.testing.assert_array_equal(layers.sign(np.array([3.0, -1.0], "float32")).numpy(),
                                      [1.0, -1.0])


@pytest.mark.parametrize("build, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_layer_refuses_input(build: Callable[[], Any], message: str) -> None:
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(TypeError, match=re.escape(message)):
            build()


@pytest.mark.parametrize("op", ["elementwise_add", "elementwise_sub", "elementwise_mul",
                                "elementwise_div", "elementwise_max", "elementwise_min",
                                "elementwise_pow", "elementwise_mod", "elementwise_floordiv"])
def test_every_elementwise_layer_checks(op: str) -> None:
    """Fluid's ``_elementwise_op`` checks both inputs of the nine elementwise layers."""
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(TypeError, match=re.escape(_dtype_msg("x", op, _EW, "int8"))):
            getattr(layers, op)(_d("x", "int8"), _d("y", "int8"))
        with pytest.raises(TypeError, match=re.escape(_type_msg("y", op, "Variable", "list"))):
            getattr(layers, op)(_d("x2", "float32"), [1.0])


def test_variable_operators_skip_the_layer_checks() -> None:
    """A Variable's ``*`` builds its elementwise op without the layer's checks, as Fluid's
    ``math_op_patch`` does: an int8 product builds."""
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x, y = _d("x", "int8"), _d("y", "int8")
        out = x * y
    assert out.dtype == "int8"
    assert [op.type for op in main.global_block().ops] == ["elementwise_mul"]


@pytest.mark.parametrize("build", [
    lambda: layers.mul(_d("x", "float16"), _d("y", "float16", [8, 2])),
    lambda: layers.softmax(_d("x", "float16")),
    lambda: layers.reduce_sum(_d("x", "int64")),
    lambda: layers.reduce_all(_d("x", "bool")),
    lambda: layers.elementwise_add(_d("x", "int32"), _d("y", "int32")),
    lambda: layers.sequence_reverse(_d("x", "int8")),
    lambda: layers.center_loss(_d("x", "float32"), _d("y", "int32", [4, 1]), 5, 0.1, None),
    lambda: layers.lod_reset(_d("x", "int64"), target_lod=[0, 2, 4]),
    lambda: _nms(),
], ids=["mul-fp16", "softmax-fp16", "reduce_sum-int64", "reduce_all-bool", "add-int32",
        "sequence_reverse-int8", "center_loss-int32-label", "lod_reset-int64", "nms"])
def test_layer_accepts_fluid_dtypes(build: Callable[[], Any]) -> None:
    """The dtypes in Fluid's lists build."""
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        build()


def test_dygraph_embedding_checks_static_ids() -> None:
    """``dygraph.Embedding`` outside the guard checks its ids as Fluid's does (int64)."""
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        emb = fluid.dygraph.Embedding(size=[20, 4])
        with pytest.raises(TypeError, match=re.escape(
                _dtype_msg("input", "Embedding", "int64", "int32"))):
            emb(_d("w", "int32", [4, 1]))
        with pytest.raises(TypeError):
            emb(_lod())
        emb(_d("w64", "int64", [4, 1]))


def test_checks_are_off_in_dygraph_mode() -> None:
    """As Fluid's ``check_type``/``check_dtype``, nothing is checked inside the guard."""
    with fluid.dygraph.guard():
        check_type(1, "x", fluid.Variable, "layer")
        check_dtype("int32", "x", ["float32"], "layer")
        check_variable_and_dtype(np.ones(2), "x", ["float32"], "layer")
        x = fluid.dygraph.to_variable(np.ones((2, 3), "int32"))
        assert layers.reduce_sum(x).numpy().item() == 6


def test_check_helpers_messages() -> None:
    with pytest.raises(TypeError, match=re.escape(
            "The type of 'perm' in transpose must be list, but received tuple. see docs")):
        check_type((1, 0), "perm", list, "transpose", "see docs")
    with pytest.raises(TypeError, match=re.escape(_type_msg("x", "op", "int or Variable",
                                                            "float"))):
        check_type(4.1, "x", (int, fluid.Variable), "op")
    with pytest.raises(TypeError, match=re.escape(_dtype_msg("x", "op", "bool", "int32"))):
        check_dtype("int32", "x", "bool", "op")  # Fluid's ('bool'), a str
    check_dtype(np.float32, "x", ["float32"], "op")
