"""Neural-network layers. Each expands into the ops Fluid uses, op for op."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import unique_name
from ..framework import Variable, in_dygraph_mode, install_hook
from ..initializer import ConstantInitializer, NumpyArrayInitializer
from ..layer_helper import LayerHelper
from ..ops.math_ops import ew_out_shape
from ..param_attr import ParamAttr
from .checks import check_dtype, check_type, check_variable_and_dtype

# Fluid 1.8 defines its random layers in layers/nn.py (``fluid.layers.nn.uniform_random``);
# here they live in .sampling, and this module names them too
from .sampling import (  # noqa: F401
    gaussian_random,
    gaussian_random_batch_size_like,
    random_crop,
    sampling_id,
    uniform_random,
    uniform_random_batch_size_like,
)
from .tensor import (
    _check_float,
    _check_var,
    _compare,
    _known,
    assign,
    cast,
    fill_constant,
    fill_constant_batch_size_like,
)

__all__ = [
    "_binary_op", "abs", "accuracy", "add_position_encoding", "auc", "bilinear_tensor_product",
    "brelu", "clip", "clip_by_norm", "cos", "cos_sim", "cross_entropy", "dropout",
    "elementwise_add", "elementwise_div", "elementwise_floordiv", "elementwise_max",
    "elementwise_min", "elementwise_mod", "elementwise_mul", "elementwise_pow", "elementwise_sub",
    "elu", "embedding", "exp", "fc", "floor", "gelu", "hard_sigmoid", "hard_swish", "hsigmoid",
    "huber_loss", "kldiv_loss", "l2_normalize", "leaky_relu", "log", "log_loss", "matmul", "mean",
    "mse_loss", "mul", "nce", "pad", "pad2d", "pow", "prelu", "reduce_all", "reduce_any",
    "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum", "relu", "relu6",
    "scale", "selu", "sigmoid", "sigmoid_cross_entropy_with_logits", "sign", "smooth_l1",
    "soft_relu", "softmax", "softmax_with_cross_entropy", "softplus", "softsign", "sqrt", "square",
    "square_error_cost", "stanh", "swish", "tanh", "topk", "tree_conv",
]

_FLOATS = ("float16", "float32", "float64")
# the dtypes of Fluid 1.8's check_variable_and_dtype lists, by the layers that use them
_F32_64 = ("float32", "float64")
_NUMBERS = ("float32", "float64", "int32", "int64")
_EW_DTYPES = ("float16", "float32", "float64", "int32", "int64")  # Fluid's _elementwise_op
# generate_activation_fn's list for abs, exp and square, whose kernels take ints (its other
# activations take _FLOATS); in Fluid's order, as the messages list it
_GENERATED_INTS = ("int32", "int64", "float16", "float32", "float64")
_POW_DTYPES = ("int32", "int64", "float32", "float64")


def _unary(op_type: str, x: Variable, name: str | None = None,
           extra_inputs: dict | None = None, **attrs: Any) -> Variable:
    """``op_type`` of ``x`` (and ``extra_inputs``, slot -> variables) into a new variable of
    ``x``'s shape and dtype."""
    _check_var(x, "x", op_type)
    helper = LayerHelper(op_type, name)
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op(op_type, inputs={"X": [x], **(extra_inputs or {})}, outputs={"Out": [out]},
                     attrs=attrs)
    return out


def relu(x: Variable, name: str | None = None) -> Variable:
    """``max(x, 0)``."""
    check_variable_and_dtype(x, "x", _FLOATS, "relu")
    return _unary("relu", x, name)


def sigmoid(x: Variable, name: str | None = None) -> Variable:
    """``1 / (1 + exp(-x))``."""
    check_variable_and_dtype(x, "x", _FLOATS, "sigmoid")
    return _unary("sigmoid", x, name)


def tanh(x: Variable, name: str | None = None) -> Variable:
    """Hyperbolic tangent."""
    check_variable_and_dtype(x, "x", _FLOATS, "tanh")
    return _unary("tanh", x, name)


def softmax(input: Variable, use_cudnn: bool = False, name: str | None = None,
            axis: int = -1) -> Variable:
    """Softmax along ``axis`` (``use_cudnn`` is recorded on the op, as in Fluid)."""
    check_variable_and_dtype(input, "input", _FLOATS, "softmax")
    return _unary("softmax", input, name, axis=axis, use_cudnn=bool(use_cudnn))


def abs(x: Variable, name: str | None = None) -> Variable:  # noqa: A001 (Fluid's name)
    """Element-wise absolute value."""
    check_variable_and_dtype(x, "x", _GENERATED_INTS, "abs")
    return _unary("abs", x, name)


def sign(x: Variable | np.ndarray) -> Variable:
    """Element-wise sign (-1, 0 or 1; a zero gradient, as Fluid 1.8's ``scale`` by 0).

    As Fluid 1.8's ``layers.sign``, ``x`` is a float Variable or a numpy array, which
    becomes a constant of the program first (:func:`assign`; of the arrays it takes, only
    float32 passes the dtype check).

    Raises
    ------
    TypeError
        ``x`` is neither, or not float16, float32 or float64 (outside dygraph mode).
    """
    check_type(x, "x", (Variable, np.ndarray), "sign")
    if isinstance(x, np.ndarray):
        x = assign(x)
    check_dtype(x.dtype, "x", _FLOATS, "sign")
    return _unary("sign", x)


def selu(x: Variable, scale: float | None = None, alpha: float | None = None,
         name: str | None = None) -> Variable:
    """``scale * (x if x > 0 else alpha * (exp(x) - 1))`` (Fluid's defaults when None)."""
    check_variable_and_dtype(x, "x", _F32_64, "selu")
    attrs = {k: float(v) for k, v in (("scale", scale), ("alpha", alpha)) if v is not None}
    return _unary("selu", x, name, **attrs)


def hard_swish(x: Variable, threshold: float = 6.0, scale: float = 6.0, offset: float = 3.0,
               name: str | None = None) -> Variable:
    """``x * min(max(x + offset, 0), threshold) / scale``."""
    check_variable_and_dtype(x, "x", _FLOATS, "hard_swish")
    return _unary("hard_swish", x, name, threshold=float(threshold), scale=float(scale),
                  offset=float(offset))


def brelu(x: Variable, t_min: float = 0.0, t_max: float = 24.0,
          name: str | None = None) -> Variable:
    """``x`` clipped into ``[t_min, t_max]``."""
    check_variable_and_dtype(x, "x", _FLOATS, "brelu")
    return _unary("brelu", x, name, t_min=float(t_min), t_max=float(t_max))


def soft_relu(x: Variable, threshold: float = 40.0, name: str | None = None) -> Variable:
    """``log(1 + exp(clip(x, -threshold, threshold)))``."""
    check_variable_and_dtype(x, "x", _FLOATS, "soft_relu")
    return _unary("soft_relu", x, name, threshold=float(threshold))


def stanh(x: Variable, scale_a: float = 0.67, scale_b: float = 1.7159,
          name: str | None = None) -> Variable:
    """``scale_b * tanh(scale_a * x)``."""
    check_variable_and_dtype(x, "x", _FLOATS, "stanh")
    return _unary("stanh", x, name, scale_a=float(scale_a), scale_b=float(scale_b))


def log(x: Variable, name: str | None = None) -> Variable:
    """Natural logarithm, element-wise."""
    check_variable_and_dtype(x, "x", _F32_64, "log")
    return _unary("log", x, name)


def square(x: Variable, name: str | None = None) -> Variable:
    """``x * x``."""
    check_variable_and_dtype(x, "x", _GENERATED_INTS, "square")
    return _unary("square", x, name)


def floor(x: Variable, name: str | None = None) -> Variable:
    """Element-wise floor (no gradient)."""
    check_variable_and_dtype(x, "x", _FLOATS, "floor")
    return _unary("floor", x, name)


def clip(x: Variable, min: float, max: float, name: str | None = None) -> Variable:
    """Clip into ``[min, max]`` (a float ``x``, as Fluid 1.8)."""
    _check_float(x, "x", "clip")
    if not min < max:
        raise ValueError(f"clip needs min < max, got min={min}, max={max}")
    return _unary("clip", x, name, min=float(min), max=float(max))


def scale(x: Variable, scale: float | Variable = 1.0, bias: float = 0.0,
          bias_after_scale: bool = True, act: str | None = None,
          name: str | None = None) -> Variable:
    """``scale * x + bias`` (or ``scale * (x + bias)``); a ``scale`` Variable of one element
    is read at run time (the op's ``ScaleTensor``, as Fluid 1.8)."""
    helper = LayerHelper("scale", name)
    by_tensor = isinstance(scale, Variable)
    out = _unary("scale", x, None, {"ScaleTensor": [scale]} if by_tensor else None,
                 scale=1.0 if by_tensor else float(scale), bias=float(bias),
                 bias_after_scale=bool(bias_after_scale))
    return helper.append_activation(out, act)


def mean(x: Variable, name: str | None = None) -> Variable:
    """Mean of all elements, shape ``[1]``."""
    check_variable_and_dtype(x, "x", _FLOATS, "mean")
    _check_var(x, "x", "mean")
    helper = LayerHelper("mean", name)
    out = helper.create_tmp(dtype=x.dtype, shape=[1])
    helper.append_op("mean", inputs={"X": [x]}, outputs={"Out": [out]})
    return out


def _reduce(op_type: str, input: Variable, dim: Any, keep_dim: bool, name: str | None
            ) -> Variable:
    helper = LayerHelper(op_type, name)
    reduce_all = dim is None
    dims = [0] if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    shape = None
    if input.shape is not None:  # Fluid's ReduceOp::InferShape
        rank = len(input.shape)
        axes = set(range(rank)) if reduce_all else {d % rank for d in dims}
        shape = [1 if i in axes else s for i, s in enumerate(input.shape)]
        if not keep_dim:
            shape = [s for i, s in enumerate(shape) if i not in axes] or [1]
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op(op_type, inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"dim": dims, "keep_dim": keep_dim, "reduce_all": reduce_all})
    return out


def reduce_sum(input: Variable, dim: Any = None, keep_dim: bool = False,
               name: str | None = None) -> Variable:
    """Sum over ``dim`` (all dims when None)."""
    check_variable_and_dtype(input, "input", _NUMBERS, "reduce_sum")
    return _reduce("reduce_sum", input, dim, keep_dim, name)


def reduce_mean(input: Variable, dim: Any = None, keep_dim: bool = False,
                name: str | None = None) -> Variable:
    """Mean over ``dim`` (all dims when None)."""
    check_variable_and_dtype(input, "input", _NUMBERS, "reduce_mean")
    return _reduce("reduce_mean", input, dim, keep_dim, name)


def reduce_max(input: Variable, dim: Any = None, keep_dim: bool = False,
               name: str | None = None) -> Variable:
    """Maximum over ``dim`` (all dims when None); the gradient goes to every maximum."""
    return _reduce("reduce_max", input, dim, keep_dim, name)


def reduce_min(input: Variable, dim: Any = None, keep_dim: bool = False,
               name: str | None = None) -> Variable:
    """Minimum over ``dim`` (all dims when None); the gradient goes to every minimum."""
    return _reduce("reduce_min", input, dim, keep_dim, name)


def reduce_prod(input: Variable, dim: Any = None, keep_dim: bool = False,
                name: str | None = None) -> Variable:
    """Product over ``dim`` (all dims when None)."""
    return _reduce("reduce_prod", input, dim, keep_dim, name)


def reduce_all(input: Variable, dim: Any = None, keep_dim: bool = False,
               name: str | None = None) -> Variable:
    """Whether every element of a bool ``input`` over ``dim`` is true (all dims when None)."""
    check_variable_and_dtype(input, "input", ("bool",), "reduce_all")
    out = _reduce("reduce_all", input, dim, keep_dim, name)
    out.stop_gradient = True
    return out


def reduce_any(input: Variable, dim: Any = None, keep_dim: bool = False,
               name: str | None = None) -> Variable:
    """Whether any element of a bool ``input`` over ``dim`` is true (all dims when None)."""
    check_variable_and_dtype(input, "input", ("bool",), "reduce_any")
    out = _reduce("reduce_any", input, dim, keep_dim, name)
    out.stop_gradient = True
    return out


def _elementwise(op_type: str, x: Variable, y: Variable, axis: int, act: str | None,
                 name: str | None, checked: bool = True) -> Variable:
    """The op ``op_type`` of ``x`` and ``y``; ``checked``: Fluid's ``_elementwise_op`` dtype
    checks of the ``elementwise_*`` layers, which a Variable's operators skip (Fluid's
    ``math_op_patch`` appends its op without them)."""
    if checked:
        check_variable_and_dtype(x, "x", _EW_DTYPES, op_type)
        check_variable_and_dtype(y, "y", _EW_DTYPES, op_type)
    _check_var(x, "x", op_type)
    _check_var(y, "y", op_type)
    helper = LayerHelper(op_type, name)
    shape = x.shape
    if x.shape is not None and y.shape is not None:  # Fluid's InferShape: the broadcast shape
        shape = ew_out_shape(x.shape, y.shape, axis, op_type)
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    helper.append_op(op_type, inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                     attrs={"axis": axis})
    return helper.append_activation(out, act)


def elementwise_mod(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
                    name: str | None = None) -> Variable:
    """``x mod y`` (the sign of ``y``), Fluid broadcasting; no gradient."""
    return _elementwise("elementwise_mod", x, y, axis, act, name)


def elementwise_floordiv(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
                         name: str | None = None) -> Variable:
    """``trunc(x / y)`` (Fluid 1.8's kernel), Fluid broadcasting; no gradient."""
    return _elementwise("elementwise_floordiv", x, y, axis, act, name)


def mul(x: Variable, y: Variable, x_num_col_dims: int = 1, y_num_col_dims: int = 1,
        name: str | None = None) -> Variable:
    """Matrix product of ``x`` and ``y`` flattened to matrices at ``x_num_col_dims`` and
    ``y_num_col_dims`` (op ``mul``, what ``fc`` uses)."""
    check_variable_and_dtype(x, "x", _FLOATS, "mul")
    check_variable_and_dtype(y, "y", _FLOATS, "mul")
    _check_var(x, "x", "mul")
    _check_var(y, "y", "mul")
    helper = LayerHelper("mul", name)
    shape = None
    if x.shape is not None and y.shape is not None:
        shape = list(x.shape[:x_num_col_dims]) + list(y.shape[y_num_col_dims:])
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    helper.append_op("mul", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                     attrs={"x_num_col_dims": int(x_num_col_dims),
                            "y_num_col_dims": int(y_num_col_dims)})
    return out


def l2_normalize(x: Variable, axis: int, epsilon: float = 1e-12,
                 name: str | None = None) -> Variable:
    """``x / sqrt(sum(x^2 over axis) + epsilon)`` (op ``norm``, as Fluid 1.8's)."""
    _check_var(x, "x", "l2_normalize")
    if x.shape is not None and len(x.shape) == 1:
        axis = 0
    helper = LayerHelper("l2_normalize", name)
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    norm = helper.create_tmp(dtype=x.dtype)
    helper.append_op("norm", inputs={"X": [x]}, outputs={"Out": [out], "Norm": [norm]},
                     attrs={"axis": 1 if axis is None else int(axis),
                            "epsilon": float(epsilon)})
    return out


def clip_by_norm(x: Variable, max_norm: float, name: str | None = None) -> Variable:
    """``x`` scaled down to an L2 norm of at most ``max_norm``."""
    return _unary("clip_by_norm", x, name, max_norm=float(max_norm))


def log_loss(input: Variable, label: Variable, epsilon: float = 1e-4,
             name: str | None = None) -> Variable:
    """The negative log likelihood of probabilities ``input`` for 0/1 ``label`` (per row)."""
    _check_var(input, "input", "log_loss")
    _check_var(label, "label", "log_loss")
    helper = LayerHelper("log_loss", name)
    loss = helper.create_tmp(dtype=input.dtype, shape=input.shape)
    helper.append_op("log_loss", inputs={"Predicted": [input], "Labels": [label]},
                     outputs={"Loss": [loss]}, attrs={"epsilon": float(epsilon)})
    return loss


def huber_loss(input: Variable, label: Variable, delta: float) -> Variable:
    """Huber's loss of ``label - input``: quadratic within ``delta``, linear beyond."""
    _check_var(input, "input", "huber_loss")
    _check_var(label, "label", "huber_loss")
    helper = LayerHelper("huber_loss")
    out = helper.create_tmp(dtype=input.dtype, shape=input.shape)
    residual = helper.create_tmp(dtype=input.dtype, shape=input.shape, stop_gradient=True)
    helper.append_op("huber_loss", inputs={"X": [input], "Y": [label]},
                     outputs={"Out": [out], "Residual": [residual]},
                     attrs={"delta": float(delta)})
    return out


def prelu(x: Variable, mode: str, param_attr: Any = None, name: str | None = None) -> Variable:
    """``x`` where positive, else ``alpha * x``, with ``alpha`` a parameter (0.25 at first):
    one value (``"all"``), one per channel (``"channel"``) or one per element of a sample
    (``"element"``), as Fluid 1.8's.

    Raises
    ------
    ValueError
        ``mode`` is none of the three.
    """
    check_variable_and_dtype(x, "x", _F32_64, "prelu")
    _check_var(x, "x", "prelu")
    if mode not in ("all", "channel", "element"):
        raise ValueError("mode should be one of all, channel, element.")
    shape = [1]
    if mode == "channel":
        shape = [1, x.shape[1], 1, 1]
    elif mode == "element":
        shape = [1, *x.shape[1:]]
    helper = LayerHelper("prelu", name)
    alpha = helper.create_parameter(ParamAttr._to_attr(param_attr), shape, "float32",
                                    default_initializer=ConstantInitializer(0.25))
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op("prelu", inputs={"X": [x], "Alpha": [alpha]}, outputs={"Out": [out]},
                     attrs={"mode": mode})
    return out


def kldiv_loss(x: Variable, target: Variable, reduction: str = "mean",
               name: str | None = None) -> Variable:
    """The KL divergence of ``target`` from ``exp(x)`` (``x`` log-probabilities), reduced by
    ``reduction`` (``"none"``, ``"batchmean"``, ``"mean"``, ``"sum"``).

    Raises
    ------
    ValueError
        ``reduction`` is none of the four.
    """
    if reduction not in ("none", "batchmean", "mean", "sum"):
        raise ValueError(f"kldiv_loss: reduction must be 'none', 'batchmean', 'mean' or "
                         f"'sum', got {reduction!r}")
    _check_var(x, "x", "kldiv_loss")
    helper = LayerHelper("kldiv_loss", name)
    loss = helper.create_tmp(dtype=x.dtype, shape=x.shape if reduction == "none" else [1])
    helper.append_op("kldiv_loss", inputs={"X": [x], "Target": [target]},
                     outputs={"Loss": [loss]}, attrs={"reduction": reduction})
    return loss


def smooth_l1(x: Variable, y: Variable, inside_weight: Variable | None = None,
              outside_weight: Variable | None = None, sigma: float | None = None) -> Variable:
    """The smooth L1 loss of ``x - y`` per sample (``[N, 1]``), op ``smooth_l1_loss``."""
    check_variable_and_dtype(x, "X", _F32_64, "smooth_l1_loss")
    check_variable_and_dtype(y, "Y", _F32_64, "smooth_l1_loss")
    _check_var(x, "x", "smooth_l1")
    _check_var(y, "y", "smooth_l1")
    helper = LayerHelper("smooth_l1_loss")
    diff = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    loss = helper.create_tmp(dtype=x.dtype, shape=None if x.shape is None else [x.shape[0], 1])
    inputs = {"X": [x], "Y": [y]}
    if inside_weight is not None:
        inputs["InsideWeight"] = [inside_weight]
    if outside_weight is not None:
        inputs["OutsideWeight"] = [outside_weight]
    helper.append_op("smooth_l1_loss", inputs=inputs, outputs={"Diff": [diff], "Out": [loss]},
                     attrs={"sigma": 1.0 if sigma is None else float(sigma)})
    return loss


def pad(x: Variable, paddings: Sequence[int], pad_value: float = 0.0,
        name: str | None = None) -> Variable:
    """``x`` with ``paddings`` (before and after each dim) of ``pad_value`` around it."""
    _check_var(x, "x", "pad")
    helper = LayerHelper("pad", name)
    shape = None
    if x.shape is not None and len(paddings) == 2 * len(x.shape):
        shape = [s if s < 0 else s + int(paddings[2 * i]) + int(paddings[2 * i + 1])
                 for i, s in enumerate(x.shape)]
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    helper.append_op("pad", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"paddings": [int(p) for p in paddings],
                            "pad_value": float(pad_value)})
    return out


def pad2d(input: Variable, paddings: Sequence[int] = (0, 0, 0, 0), mode: str = "constant",
          pad_value: float = 0.0, data_format: str = "NCHW",
          name: str | None = None) -> Variable:
    """Height and width padding of a 4-D ``input`` (``paddings`` = top, bottom, left,
    right): ``pad_value`` (``"constant"``), a mirror without the edge (``"reflect"``) or the
    edge repeated (``"edge"``).

    Raises
    ------
    ValueError
        ``mode`` or ``data_format`` is not one of Fluid's.
    """
    _check_var(input, "input", "pad2d")
    if mode not in ("reflect", "edge", "constant"):
        raise ValueError("mode should be one of constant, reflect, edge.")
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError(f"pad2d: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
    helper = LayerHelper("pad2d", name)
    inputs, shape = {"X": [input]}, None
    given = isinstance(paddings, Variable)
    if given:  # read at run time (Fluid 1.8: the Paddings input, the attr left empty)
        inputs["Paddings"] = [paddings]
    if input.shape is not None and len(input.shape) == 4:
        top, bottom, left, right = (-1,) * 4 if given else (int(p) for p in paddings)
        h, w = (2, 3) if data_format == "NCHW" else (1, 2)
        shape = list(input.shape)
        shape[h] = -1 if shape[h] < 0 or given else shape[h] + top + bottom
        shape[w] = -1 if shape[w] < 0 or given else shape[w] + left + right
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op("pad2d", inputs=inputs, outputs={"Out": [out]},
                     attrs={"paddings": [] if given else [int(p) for p in paddings],
                            "mode": mode, "pad_value": float(pad_value),
                            "data_format": data_format})
    return out


def mse_loss(input: Variable, label: Variable) -> Variable:
    """The mean of ``(input - label)^2`` (Fluid 1.8: ``reduce_mean(square_error_cost)``)."""
    return reduce_mean(square_error_cost(input, label))


def elementwise_add(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
                    name: str | None = None) -> Variable:
    """``x + y`` with Fluid broadcasting of ``y`` from ``axis``."""
    return _elementwise("elementwise_add", x, y, axis, act, name)


def elementwise_sub(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
                    name: str | None = None) -> Variable:
    """``x - y`` with Fluid broadcasting of ``y`` from ``axis``."""
    return _elementwise("elementwise_sub", x, y, axis, act, name)


def elementwise_mul(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
                    name: str | None = None) -> Variable:
    """``x * y`` with Fluid broadcasting of ``y`` from ``axis``."""
    return _elementwise("elementwise_mul", x, y, axis, act, name)


def elementwise_div(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
                    name: str | None = None) -> Variable:
    """``x / y`` with Fluid broadcasting of ``y`` from ``axis``."""
    return _elementwise("elementwise_div", x, y, axis, act, name)


def elementwise_pow(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
                    name: str | None = None) -> Variable:
    """``x ** y`` with Fluid broadcasting of ``y`` from ``axis``."""
    return _elementwise("elementwise_pow", x, y, axis, act, name)


_COMPARE_OPS = frozenset({"less_than", "less_equal", "greater_than", "greater_equal", "equal",
                          "not_equal"})
_INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8"})


def _scalar_op(x: Variable, c: float, op_type: str, reverse: bool) -> Variable | None:
    """Fluid 1.8's ``_scalar_elementwise_*_``: ``x + c``, ``x - c``, ``c - x``, ``x * c`` and
    ``x / c`` are one ``scale`` op; None where Fluid builds an elementwise op instead
    (``c / x``, powers, and a division of integers)."""
    if op_type == "elementwise_div" and (reverse or x.dtype in _INT_DTYPES):
        return None
    scale_bias = {"elementwise_add": (1.0, c), "elementwise_mul": (c, 0.0),
                  "elementwise_sub": (-1.0, c) if reverse else (1.0, -c),
                  "elementwise_div": (None, 0.0)}.get(op_type)
    if scale_bias is None:
        return None
    factor = 1.0 / c if op_type == "elementwise_div" else scale_bias[0]
    return scale(x, scale=factor, bias=scale_bias[1])


def _constant_like(x: Variable, value: Any, reverse: bool) -> Variable:
    """Fluid 1.8's constant for the other operand: one element on the right
    (``create_scalar``); on the left, ``x``'s shape, through
    ``fill_constant_batch_size_like`` when the batch size is unknown."""
    if not reverse:
        return fill_constant([1], x.dtype, value)
    shape = list(x.shape or ())
    if any(d < 0 for d in shape):
        return fill_constant_batch_size_like(x, shape, x.dtype, value)
    return fill_constant(shape, x.dtype, value)


def _binary_op(x: Variable, other: Any, op_type: str, reverse: bool) -> Variable:
    """A Variable's operators as Fluid 1.8's ``math_op_patch`` builds them: a Python number
    with ``+ - * /`` becomes a ``scale`` op, otherwise a constant (of the Variable's dtype) in
    the elementwise or compare op; a Variable of another dtype is cast to ``x``'s; the
    elementwise ``axis`` is 0 when the right operand's first dim is unknown, else -1."""
    if isinstance(other, np.generic) and other.ndim == 0 and other.dtype.kind in "iuf":
        other = other.item()  # a numpy number is a number (np.float32(2) * x)
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        if isinstance(other, float) and x.dtype in _INT_DTYPES and other != int(other):
            raise TypeError(f"{x.name!r} is {x.dtype}: the float {other} in its {op_type} "
                            "cannot convert to an integer (cast the Variable first)")
        out = _scalar_op(x, float(other), op_type, reverse)
        if out is not None:
            return out
    if not isinstance(other, Variable):
        if isinstance(other, bool) or not isinstance(other, (int, float)):
            raise TypeError(f"{op_type}: a Variable meets a Variable or a Python number, got "
                            f"{type(other).__name__}")
        other = _constant_like(x, other, reverse)
    elif other.dtype != x.dtype:
        other = cast(other, x.dtype)
    a, b = (other, x) if reverse else (x, other)
    if op_type in _COMPARE_OPS:
        out = _compare(op_type, a, b)
        out._compared = True  # no truth value while the program is built (Variable.__bool__)
        return out
    axis = 0 if b.shape and b.shape[0] == -1 else -1
    return _elementwise(op_type, a, b, axis, None, None, checked=False)


install_hook("binary_op", _binary_op)  # a Variable's + - * / build these ops


def fc(input: Variable | Sequence[Variable], size: int, num_flatten_dims: int = 1,
       param_attr: Any = None, bias_attr: Any = None, act: str | None = None,
       name: str | None = None) -> Variable:
    """Fully connected layer: ``mul`` (+ ``sum`` for several inputs) + ``elementwise_add``
    + activation, with weights ``<name>.w_N`` (Xavier) and bias ``<name>.b_N`` (zeros).

    Parameters
    ----------
    input : Variable or list of Variable
    size : int
        Number of output units.
    num_flatten_dims : int
        Leading dims of the input kept as rows; the rest are flattened into the features.
        -1, as in Fluid 1.8, is the first input's rank minus 1 (only its last dim is
        features), and that number then serves every input, the ops' attrs and the bias.
    param_attr, bias_attr : ParamAttr, str, Initializer, None or False
        ``bias_attr=False`` drops the bias.
    act : str, optional
        ``"relu"``, ``"sigmoid"``, ``"tanh"``, ``"softmax"``...
    """
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"fc: size must be a positive int, got {size!r}")
    helper = LayerHelper("fc", name)
    inputs = [input] if isinstance(input, Variable) else list(input)
    attrs = param_attr if isinstance(param_attr, (list, tuple)) else [param_attr] * len(inputs)
    muls = []
    for x, pattr in zip(inputs, attrs, strict=False):
        _check_float(x, "input", "fc")
        if num_flatten_dims == -1 and x.shape is not None:
            # Fluid 1.8 resolves -1 at the first input and keeps the number: the mul and
            # elementwise_add ops get it, never -1
            num_flatten_dims = len(x.shape) - 1
        if x.shape is None or any(d <= 0 for d in x.shape[num_flatten_dims:]):
            raise ValueError(f"fc: input {x.name!r} needs known feature dims after "
                             f"num_flatten_dims={num_flatten_dims}, got shape {x.shape}")
        in_features = math.prod(x.shape[num_flatten_dims:])
        w = helper.create_parameter(ParamAttr._to_attr(pattr), [in_features, size], x.dtype)
        out = helper.create_tmp(dtype=x.dtype, shape=list(x.shape[:num_flatten_dims]) + [size])
        helper.append_op("mul", inputs={"X": [x], "Y": [w]}, outputs={"Out": [out]},
                         attrs={"x_num_col_dims": num_flatten_dims, "y_num_col_dims": 1})
        muls.append(out)
    pre_bias = muls[0]
    if len(muls) > 1:
        pre_bias = helper.create_tmp(dtype=muls[0].dtype, shape=muls[0].shape)
        helper.append_op("sum", inputs={"X": muls}, outputs={"Out": [pre_bias]})
    battr = ParamAttr._to_attr(bias_attr)
    pre_act = pre_bias
    if battr is not False:
        b = helper.create_parameter(battr, [size], pre_bias.dtype, is_bias=True,
                                    default_initializer=ConstantInitializer(0.0))
        pre_act = helper.create_tmp(dtype=pre_bias.dtype, shape=pre_bias.shape)
        helper.append_op("elementwise_add", inputs={"X": [pre_bias], "Y": [b]},
                         outputs={"Out": [pre_act]}, attrs={"axis": num_flatten_dims})
    return helper.append_activation(pre_act, act)


def embedding(input: Variable, size: Sequence[int], is_sparse: bool = False,
              is_distributed: bool = False, padding_idx: int | None = None,
              param_attr: Any = None, dtype: str = "float32") -> Variable:
    """Look up rows of a ``size = [vocab, dim]`` table (``lookup_table``).

    ``is_sparse`` makes the gradient a SelectedRows (only the looked-up rows);
    ``is_distributed`` asks the transpiler to shard the table over the pservers.
    """
    check_variable_and_dtype(input, "input", ("int64",), "fluid.layers.embedding")
    check_dtype(dtype, "dtype", _FLOATS, "fluid.layers.embedding")
    _check_var(input, "input", "embedding")
    if len(size) != 2 or min(size) <= 0:
        raise ValueError(f"embedding: size must be [vocab_size, dim], got {list(size)}")
    helper = LayerHelper("embedding")
    w = helper.create_parameter(ParamAttr._to_attr(param_attr), list(size), dtype)
    if padding_idx is None:
        padding_idx = -1
    elif padding_idx < 0:
        padding_idx += size[0]
    shape = None
    if input.shape is not None:
        base = list(input.shape[:-1]) if input.shape[-1] == 1 else list(input.shape)
        shape = base + [size[1]]
    out = helper.create_tmp(dtype=dtype, shape=shape)
    helper.append_op("lookup_table", inputs={"W": [w], "Ids": [input]}, outputs={"Out": [out]},
                     attrs={"is_sparse": bool(is_sparse), "is_distributed": bool(is_distributed),
                            # Fluid 1.8: a sparse table that is not distributed is looked up
                            # on the pservers once transpiled (its rows, not the whole table)
                            "remote_prefetch": bool(is_sparse) and not bool(is_distributed),
                            "padding_idx": int(padding_idx)})
    return out


def cross_entropy(input: Variable, label: Variable, soft_label: bool = False,
                  ignore_index: int = -100) -> Variable:
    """``-log(input[label])`` per row, shape ``[..., 1]``; ``input`` holds probabilities.

    Hard labels build Fluid 1.8's ``cross_entropy2`` op (gradient ``cross_entropy_grad2``);
    ``soft_label=True`` builds ``cross_entropy``, as Fluid does. The loss takes the label's
    shape, its last dim 1 (a hard label without its trailing 1 gives a loss without it too).
    """
    check_variable_and_dtype(input, "input", _FLOATS, "cross_entropy")
    helper = LayerHelper("cross_entropy")
    shape = [*input.shape[:-1], 1] if input.shape else None
    if input.shape and label.shape and len(label.shape) == len(input.shape) - 1:
        shape = list(label.shape)  # CrossEntropyOpBase::InferShape: Y is Label's shape
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    if soft_label:
        helper.append_op("cross_entropy", inputs={"X": [input], "Label": [label]},
                         outputs={"Y": [out]},
                         attrs={"soft_label": True, "ignore_index": ignore_index})
        return out
    match_x = helper.create_tmp(dtype=input.dtype, shape=shape, stop_gradient=True)
    xshape = helper.create_tmp(dtype=input.dtype,
                               shape=[0, *input.shape] if input.shape else None,
                               stop_gradient=True)
    helper.append_op("cross_entropy2", inputs={"X": [input], "Label": [label]},
                     outputs={"Y": [out], "MatchX": [match_x], "XShape": [xshape]},
                     attrs={"ignore_index": ignore_index})
    return out


def softmax_with_cross_entropy(logits: Variable, label: Variable, soft_label: bool = False,
                               ignore_index: int = -100, numeric_stable_mode: bool = True,
                               return_softmax: bool = False, axis: int = -1) -> Any:
    """Fused, numerically stable softmax + cross entropy; loss shape ``[N, 1]``."""
    helper = LayerHelper("softmax_with_cross_entropy")
    softmax_out = helper.create_tmp(dtype=logits.dtype, shape=logits.shape)
    loss = helper.create_tmp(dtype=logits.dtype, shape=[logits.shape[0], 1])
    helper.append_op("softmax_with_cross_entropy",
                     inputs={"Logits": [logits], "Label": [label]},
                     outputs={"Softmax": [softmax_out], "Loss": [loss]},
                     attrs={"soft_label": soft_label, "ignore_index": ignore_index,
                            # Fluid records it; its CPU kernel, as this one, is always stable
                            "numeric_stable_mode": bool(numeric_stable_mode), "axis": axis})
    return (loss, softmax_out) if return_softmax else loss


def square_error_cost(input: Variable, label: Variable) -> Variable:
    """``(input - label) ** 2``: ``elementwise_sub`` then ``square``."""
    helper = LayerHelper("square_error_cost")
    minus = helper.create_tmp(dtype=input.dtype, shape=input.shape)
    helper.append_op("elementwise_sub", inputs={"X": [input], "Y": [label]},
                     outputs={"Out": [minus]})
    out = helper.create_tmp(dtype=input.dtype, shape=input.shape)
    helper.append_op("square", inputs={"X": [minus]}, outputs={"Out": [out]})
    return out


def topk(input: Variable, k: int, name: str | None = None) -> tuple[Variable, Variable]:
    """The ``k`` largest values along the last axis and their indices."""
    helper = LayerHelper("top_k", name)
    shape = None if input.shape is None else list(input.shape[:-1]) + [k]
    values = helper.create_tmp(dtype=input.dtype, shape=shape, stop_gradient=True)
    indices = helper.create_tmp(dtype="int64", shape=shape, stop_gradient=True)
    helper.append_op("top_k", inputs={"X": [input]},
                     outputs={"Out": [values], "Indices": [indices]}, attrs={"k": int(k)})
    return values, indices


def accuracy(input: Variable, label: Variable, k: int = 1, correct: Variable | None = None,
             total: Variable | None = None) -> Variable:
    """Top-``k`` accuracy of ``input`` (scores) against int64 ``label`` ``[N, 1]``."""
    check_variable_and_dtype(input, "input", _FLOATS, "accuracy")
    helper = LayerHelper("accuracy")
    values, indices = topk(input, k)
    acc = helper.create_tmp(dtype="float32", shape=[1], stop_gradient=True)
    correct = correct or helper.create_tmp(dtype="int32", shape=[1], stop_gradient=True)
    total = total or helper.create_tmp(dtype="int32", shape=[1], stop_gradient=True)
    helper.append_op("accuracy",
                     inputs={"Out": [values], "Indices": [indices], "Label": [label]},
                     outputs={"Accuracy": [acc], "Correct": [correct], "Total": [total]})
    return acc


def auc(input: Variable, label: Variable, curve: str = "ROC", num_thresholds: int = 2**12 - 1,
        topk: int = 1, slide_steps: int = 1) -> tuple[Variable, Variable, list[Variable]]:
    """Area under the ROC curve of ``input``'s positive-class probability (its last column)
    against ``label`` (Fluid 1.8's ``layers.auc``).

    Two ``auc`` ops share the batch: one over the last ``slide_steps`` batches, one over every
    batch so far. Their counts are persistable int64 variables initialised to 0 by the startup
    program; they stay on the trainer (the transpiler only moves parameters).

    Returns
    -------
    auc_out, batch_auc_out : Variable
        float64 ``[1]``.
    states : list of Variable
        ``[batch_stat_pos, batch_stat_neg, stat_pos, stat_neg]``.
    """
    if topk != 1:
        raise NotImplementedError(f"auc: topk={topk} is not implemented (Fluid supports 1)")
    if slide_steps < 0:
        raise ValueError(f"auc: slide_steps must be >= 0, got {slide_steps}")
    helper = LayerHelper("auc")
    block = helper.main_program.global_block()
    auc_out = helper.create_tmp(dtype="float64", shape=[1], stop_gradient=True)
    batch_auc_out = helper.create_tmp(dtype="float64", shape=[1], stop_gradient=True)

    def state(shape: list[int]) -> Variable:
        var = block.create_var(name=unique_name.generate("auc_state"), shape=shape,
                               dtype="int64", persistable=True, stop_gradient=True)
        helper.set_variable_initializer(var, ConstantInitializer(0.0))
        return var

    batch_len = (1 + slide_steps) * (num_thresholds + 1) + 1
    batch_pos, batch_neg = state([batch_len]), state([batch_len])
    stat_pos, stat_neg = state([1, num_thresholds + 1]), state([1, num_thresholds + 1])
    for out, pos, neg, steps in ((batch_auc_out, batch_pos, batch_neg, slide_steps),
                                 (auc_out, stat_pos, stat_neg, 0)):
        helper.append_op("auc", inputs={"Predict": [input], "Label": [label],
                                        "StatPos": [pos], "StatNeg": [neg]},
                         outputs={"AUC": [out], "StatPosOut": [pos], "StatNegOut": [neg]},
                         attrs={"curve": curve, "num_thresholds": int(num_thresholds),
                                "slide_steps": int(steps)})
    return auc_out, batch_auc_out, [batch_pos, batch_neg, stat_pos, stat_neg]


def dropout(x: Variable, dropout_prob: float, is_test: bool = False, seed: int | None = None,
            name: str | None = None,
            dropout_implementation: str = "downgrade_in_infer") -> Variable:
    """Zero each element with probability ``dropout_prob``; seeded and reproducible.

    As Fluid 1.8's: without a ``seed`` (None or 0), the main program's ``random_seed``, when
    set, is the op's fixed seed (``fix_seed``), so every run draws the same mask; with neither,
    each run draws a new one. ``x`` must be a float Variable (Fluid 1.8's dtype check)."""
    _check_float(x, "x", "dropout")
    if not 0.0 <= dropout_prob < 1.0:
        raise ValueError(f"dropout_prob must be in [0, 1), got {dropout_prob}")
    if dropout_implementation not in ("downgrade_in_infer", "upscale_in_train"):
        raise ValueError("dropout_implementation must be 'downgrade_in_infer' or "
                         f"'upscale_in_train', got {dropout_implementation!r}")
    helper = LayerHelper("dropout", name)
    if not seed and helper.main_program.random_seed:
        # Fluid 1.8: a program's random_seed becomes the op's fixed seed, so every run (and
        # dygraph and static alike) draws the same mask
        seed = helper.main_program.random_seed
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    mask = helper.create_tmp(dtype="uint8", shape=x.shape, stop_gradient=True)
    helper.append_op("dropout", inputs={"X": [x]}, outputs={"Out": [out], "Mask": [mask]},
                     attrs={"dropout_prob": float(dropout_prob), "is_test": bool(is_test),
                            "fix_seed": seed is not None, "seed": int(seed or 0),
                            "dropout_implementation": dropout_implementation})
    return out


def _check_matmul_leading_dims(x_shape: tuple, y_shape: tuple, transpose_x: bool,
                               transpose_y: bool) -> None:
    """The batch check of Fluid 1.8's ``layers.matmul`` (paddle.tensor.linalg.matmul's
    ``__check_input``), stricter than the op's equal batch sizes: when both inputs have more
    than 2 dims, X's leading dims must equal Y's dims at the same positions, counted from the
    left, a -1 on either side passing. As in Fluid, op(Y)'s shape is compared (its last two
    dims swapped by ``transpose_y``), so where X has more leading dims than Y they meet
    op(Y)'s matrix dims, and past Y's last dim (Fluid's IndexError) X is refused too.

    Raises
    ------
    ValueError
        A leading dim of X differs from Y's dim at its position, or Y has no dim there.
    """
    xs, ys = list(x_shape), list(y_shape)
    if len(xs) <= 2 or len(ys) <= 2:  # a 1-D input is a matrix here: no check either
        return
    if transpose_x:
        xs[-2], xs[-1] = xs[-1], xs[-2]
    if transpose_y:
        ys[-2], ys[-1] = ys[-1], ys[-2]
    for i, dim_x in enumerate(xs[:-2]):
        if i >= len(ys):
            raise ValueError(
                f"matmul: X {list(x_shape)} has more leading dims than Y {list(y_shape)} has "
                f"dims; when both have more than 2 dims, Fluid 1.8's layers.matmul compares "
                f"X's leading dims with Y's dims at the same positions")
        if dim_x < 0 or ys[i] < 0:  # unknown until the program runs, as Fluid skips them
            continue
        if dim_x != ys[i]:
            raise ValueError(
                f"matmul: when both inputs have more than 2 dims, Fluid 1.8's layers.matmul "
                f"needs X's leading dims equal to Y's dims at the same positions, but X "
                f"{list(x_shape)} has {dim_x} at dim {i} and Y {list(y_shape)} "
                f"(transpose_y={bool(transpose_y)}) has {ys[i]}")


def matmul(x: Variable, y: Variable, transpose_x: bool = False, transpose_y: bool = False,
           alpha: float = 1.0, name: str | None = None) -> Variable:
    """``alpha * op(x) @ op(y)``, batched over the leading dims (Fluid 1.8's
    ``layers.matmul``; 1-D inputs and the batch rule as in :mod:`dask_fluid.ops.dense_ops`).

    The dims before the last two are folded into one batch (their product), not broadcast:
    X ``[B, M, K]`` with Y ``[K, N]`` or ``[B, K, N]`` gives ``[B, M, N]``, and Y ``[1, K, N]``
    with X ``[4, M, K]`` is refused. When the program is built, Fluid 1.8's layer also
    requires, where both inputs have more than 2 dims, X's leading dims to equal Y's at the
    same positions (-1 passes), so X ``[2, 3, M, K]`` with Y ``[6, K, N]``, which the op runs
    (Out ``[2, 3, M, N]``), is refused here but not in dygraph mode, where Fluid skips the
    layer's checks.

    Raises
    ------
    ValueError
        The inner dims differ, both inputs are batched with different batch sizes, or (outside
        dygraph mode) the leading dims differ position by position.
    """
    from ..ops.dense_ops import matmul_shape  # noqa: PLC0415  (the shape rule lives with the op)

    # Fluid 1.8's paddle.tensor.linalg.matmul, which fluid.layers.matmul calls
    check_variable_and_dtype(x, "x", _FLOATS, "matmul")
    check_variable_and_dtype(y, "y", _FLOATS, "matmul")
    _check_var(x, "x", "matmul")
    _check_var(y, "y", "matmul")
    x_shape, y_shape = tuple(x.shape or ()), tuple(y.shape or ())
    shape = matmul_shape(x_shape, y_shape, transpose_x, transpose_y)
    if not in_dygraph_mode():
        _check_matmul_leading_dims(x_shape, y_shape, transpose_x, transpose_y)
    helper = LayerHelper("matmul", name)
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    helper.append_op("matmul", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                     attrs={"transpose_X": bool(transpose_x), "transpose_Y": bool(transpose_y),
                            "alpha": float(alpha)})
    return out


def leaky_relu(x: Variable, alpha: float = 0.02, name: str | None = None) -> Variable:
    """``x`` where positive, ``alpha * x`` elsewhere."""
    check_variable_and_dtype(x, "x", _FLOATS, "leaky_relu")
    return _unary("leaky_relu", x, name, alpha=float(alpha))


def relu6(x: Variable, threshold: float = 6.0, name: str | None = None) -> Variable:
    """``min(max(x, 0), threshold)``."""
    check_variable_and_dtype(x, "x", _FLOATS, "relu6")
    return _unary("relu6", x, name, threshold=float(threshold))


def elu(x: Variable, alpha: float = 1.0, name: str | None = None) -> Variable:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""
    check_variable_and_dtype(x, "x", _FLOATS, "elu")
    return _unary("elu", x, name, alpha=float(alpha))


def softplus(x: Variable, name: str | None = None) -> Variable:
    """``log(1 + exp(x))``."""
    check_variable_and_dtype(x, "x", _FLOATS, "softplus")
    return _unary("softplus", x, name)


def cos_sim(X: Variable, Y: Variable) -> Variable:
    """Cosine similarity of each row of ``X`` with the row of ``Y`` (or with ``Y``'s one row):
    ``[N, 1]``."""
    check_variable_and_dtype(X, "X", ("float32",), "cos_sim")
    check_variable_and_dtype(Y, "Y", ("float32",), "cos_sim")
    helper = LayerHelper("cos_sim")
    shape = [X.shape[0], 1] if X.shape else None
    out = helper.create_tmp(dtype=X.dtype, shape=shape)
    xnorm = helper.create_tmp(dtype=X.dtype, shape=shape, stop_gradient=True)
    ynorm = helper.create_tmp(dtype=X.dtype, shape=[Y.shape[0], 1] if Y.shape else None,
                              stop_gradient=True)
    helper.append_op("cos_sim", inputs={"X": [X], "Y": [Y]},
                     outputs={"Out": [out], "XNorm": [xnorm], "YNorm": [ynorm]})
    return out


def softsign(x: Variable, name: str | None = None) -> Variable:
    """``x / (1 + |x|)``."""
    check_variable_and_dtype(x, "x", _FLOATS, "softsign")
    return _unary("softsign", x, name)


def hard_sigmoid(x: Variable, slope: float = 0.2, offset: float = 0.5,
                 name: str | None = None) -> Variable:
    """``clip(slope * x + offset, 0, 1)``."""
    check_variable_and_dtype(x, "x", _FLOATS, "hard_sigmoid")
    return _unary("hard_sigmoid", x, name, slope=float(slope), offset=float(offset))


def swish(x: Variable, beta: float = 1.0, name: str | None = None) -> Variable:
    """``x * sigmoid(beta * x)``."""
    check_variable_and_dtype(x, "x", _FLOATS, "swish")
    return _unary("swish", x, name, beta=float(beta))


def gelu(x: Variable, approximate: bool = False) -> Variable:
    """``x * Phi(x)`` (``approximate``: the tanh form)."""
    return _unary("gelu", x, None, approximate=bool(approximate))


def pow(x: Variable, factor: float | Variable = 1.0,  # noqa: A001
        name: str | None = None) -> Variable:
    """``x ** factor``; ``factor`` a number (attr ``factor``) or, as in Fluid 1.8, a ``[1]``
    float32 Variable (input ``FactorTensor``, set ``stop_gradient``)."""
    check_variable_and_dtype(x, "x", _POW_DTYPES, "pow")
    if isinstance(factor, Variable):
        check_variable_and_dtype(factor, "factor", ["float32"], "pow")
        factor.stop_gradient = True
        return _unary("pow", x, name, extra_inputs={"FactorTensor": [factor]})
    return _unary("pow", x, name, factor=float(factor))


def elementwise_max(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
                    name: str | None = None) -> Variable:
    """``max(x, y)`` with Fluid broadcasting of ``y`` from ``axis``."""
    return _elementwise("elementwise_max", x, y, axis, act, name)


def elementwise_min(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
                    name: str | None = None) -> Variable:
    """``min(x, y)`` with Fluid broadcasting of ``y`` from ``axis``."""
    return _elementwise("elementwise_min", x, y, axis, act, name)


def exp(x: Variable, name: str | None = None) -> Variable:
    """``e ** x``."""
    check_variable_and_dtype(x, "x", _GENERATED_INTS, "exp")
    return _unary("exp", x, name)


def cos(x: Variable, name: str | None = None) -> Variable:
    """Cosine."""
    check_variable_and_dtype(x, "x", _FLOATS, "cos")
    return _unary("cos", x, name)


def sigmoid_cross_entropy_with_logits(x: Variable, label: Variable, ignore_index: int = -100,
                                      name: str | None = None,
                                      normalize: bool = False) -> Variable:
    """Elementwise binary cross entropy of ``sigmoid(x)`` against ``label`` (numerically
    stable in ``x``); elements whose label is ``ignore_index`` give 0."""
    _check_var(x, "x", "sigmoid_cross_entropy_with_logits")
    _check_var(label, "label", "sigmoid_cross_entropy_with_logits")
    helper = LayerHelper("sigmoid_cross_entropy_with_logits", name)
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op("sigmoid_cross_entropy_with_logits",
                     inputs={"X": [x], "Label": [label]}, outputs={"Out": [out]},
                     attrs={"ignore_index": int(ignore_index), "normalize": bool(normalize)})
    return out


def sqrt(x: Variable, name: str | None = None) -> Variable:
    """Square root."""
    check_variable_and_dtype(x, "x", _FLOATS, "sqrt")
    return _unary("sqrt", x, name)


_NCE_SAMPLERS = {"uniform": 0, "log_uniform": 1, "custom_dist": 2}


def _alias_table(dist: Sequence[float]) -> tuple[list[float], list[int]]:
    """Walker's alias table of ``dist`` (Fluid's nce layer builds the same one): for each
    column, the probability of keeping its own class and the class it otherwise gives
    (-1: none)."""
    n = len(dist)
    keep, alias = [0.0] * n, [0] * n
    bigs, littles = [], []
    for i, p in enumerate(dist):
        scaled = p * n
        if scaled > 1.0:
            bigs.append((i, scaled))
        elif scaled < 1.0:
            littles.append((i, scaled))
        else:
            keep[i], alias[i] = scaled, -1
    while bigs and littles:
        (big, big_p), (little, little_p) = bigs.pop(0), littles.pop(0)
        keep[little], alias[little] = little_p, big
        left = big_p + little_p - 1.0
        if left > 1.0:
            bigs.append((big, left))
        elif left < 1.0:
            littles.append((big, left))
        else:
            keep[big], alias[big] = left, -1
    for i, _ in bigs[:1] + littles[:1]:  # what rounding left over keeps its column
        keep[i], alias[i] = 1.0, -1
    return keep, alias


def nce(input: Variable, label: Variable, num_total_classes: int,
        sample_weight: Variable | None = None, param_attr: Any = None, bias_attr: Any = None,
        num_neg_samples: int | None = None, name: str | None = None, sampler: str = "uniform",
        custom_dist: Sequence[float] | None = None, seed: int = 0,
        is_sparse: bool = False) -> Variable:
    """Noise-contrastive estimation loss over ``num_total_classes`` classes (op ``nce``).

    Each row of ``input`` (``[N, D]``) is scored against its ``label`` classes (``[N, T]``,
    int64) and ``num_neg_samples`` (default 10) negative classes drawn by ``sampler``:
    ``"uniform"``, ``"log_uniform"`` (Zipfian) or ``"custom_dist"`` (the probabilities
    ``custom_dist``, one per class). A non-zero ``seed`` draws the same negatives at every
    step. ``is_sparse`` makes the weight's gradient a SelectedRows of the sampled rows and,
    once transpiled, reads those rows from the pservers. Returns the cost ``[N, 1]`` divided
    by ``num_neg_samples + 1``, as Fluid does.
    """
    check_variable_and_dtype(input, "input", _F32_64, "nce")
    check_variable_and_dtype(label, "label", ("int64",), "nce")
    _check_var(input, "input", "nce")
    _check_var(label, "label", "nce")
    if str(label.dtype) != "int64":  # dygraph mode, where Fluid's checks are off
        raise TypeError(f"nce: label must be int64, got {label.dtype}")
    if input.shape is None or len(input.shape) != 2 or label.shape is None:
        raise ValueError(f"nce: input must be [N, D] and label [N, T]; got input "
                         f"{input.shape}, label {label.shape}")
    if sampler not in _NCE_SAMPLERS:
        raise ValueError(f"nce: sampler {sampler!r} is not one of {list(_NCE_SAMPLERS)}")
    helper = LayerHelper("nce", name=name)
    dim = input.shape[1]
    w = helper.create_parameter(ParamAttr._to_attr(param_attr), [num_total_classes, dim],
                                input.dtype)
    inputs: dict[str, list] = {"Input": [input], "Label": [label], "Weight": [w],
                               "SampleWeight": [sample_weight] if sample_weight is not None
                               else []}
    if bias_attr is not False:
        inputs["Bias"] = [helper.create_parameter(ParamAttr._to_attr(bias_attr),
                                                  [num_total_classes, 1], input.dtype,
                                                  is_bias=True)]
    if sampler == "custom_dist":
        if custom_dist is None or len(custom_dist) != num_total_classes:
            raise ValueError(f"nce: the custom_dist sampler needs custom_dist with "
                             f"num_total_classes={num_total_classes} probabilities")
        keep, alias = _alias_table(custom_dist)
        for slot, values, dtype in (("CustomDistProbs", custom_dist, "float32"),
                                    ("CustomDistAlias", alias, "int32"),
                                    ("CustomDistAliasProbs", keep, "float32")):
            table = np.asarray(values, dtype=dtype)
            var = helper.create_parameter(ParamAttr(), list(table.shape), dtype,
                                          default_initializer=NumpyArrayInitializer(table))
            var.stop_gradient = True
            inputs[slot] = [var]
    num_neg_samples = 10 if num_neg_samples is None else int(num_neg_samples)
    cost = helper.create_tmp(dtype=input.dtype, shape=[input.shape[0], 1])
    width = [input.shape[0], label.shape[-1] + num_neg_samples]
    logits = helper.create_tmp(dtype=input.dtype, shape=width, stop_gradient=True)
    samples = helper.create_tmp(dtype="int64", shape=width, stop_gradient=True)
    helper.append_op("nce", inputs=inputs,
                     outputs={"Cost": [cost], "SampleLogits": [logits],
                              "SampleLabels": [samples]},
                     attrs={"num_total_classes": int(num_total_classes),
                            "num_neg_samples": num_neg_samples, "seed": int(seed),
                            "sampler": _NCE_SAMPLERS[sampler], "is_sparse": bool(is_sparse),
                            # Fluid 1.8: a sparse nce weight is read on the pservers
                            "remote_prefetch": bool(is_sparse)})
    return cost / (num_neg_samples + 1)


def hsigmoid(input: Variable, label: Variable, num_classes: int, param_attr: Any = None,
             bias_attr: Any = None, name: str | None = None, path_table: Variable | None = None,
             path_code: Variable | None = None, is_custom: bool = False,
             is_sparse: bool = False) -> Variable:
    """Hierarchical sigmoid loss (op ``hierarchical_sigmoid``), ``[N, 1]``.

    Without ``is_custom`` the classes are the leaves of a complete binary tree (``W`` is
    ``[num_classes - 1, D]``); with it, ``path_table`` and ``path_code`` (``[N, L]`` int64,
    paths ending at the first -1) give each row's tree nodes and branches, and ``W`` is
    ``[num_classes, D]``. ``is_sparse`` (custom trees only, as in Fluid) makes W's gradient a
    SelectedRows and, once transpiled, reads W's rows from the pservers.
    """
    check_variable_and_dtype(input, "input", _F32_64, "hsigmoid")
    check_variable_and_dtype(label, "label", ("int64",), "hsigmoid")
    _check_var(input, "input", "hsigmoid")
    _check_var(label, "label", "hsigmoid")
    if not is_custom:
        if num_classes is None or num_classes < 2:
            raise ValueError("hsigmoid: num_classes must not be less than 2 with the default "
                             "tree")
        if path_table is not None or path_code is not None:
            raise ValueError("hsigmoid: path_table and path_code need is_custom=True; the "
                             "default tree takes only num_classes")
        # Fluid turns is_sparse off without a custom tree
        is_sparse = False
    elif path_table is None or path_code is None or num_classes is None:
        raise ValueError("hsigmoid: a custom tree (is_custom=True) needs path_table, "
                         "path_code and num_classes")
    helper = LayerHelper("hierarchical_sigmoid", name=name)
    nodes = num_classes if is_custom else num_classes - 1
    dim = input.shape[1]
    w = helper.create_parameter(ParamAttr._to_attr(param_attr), [nodes, dim], input.dtype)
    inputs: dict[str, list] = {"X": [input], "W": [w], "Label": [label]}
    if is_custom:
        inputs["PathTable"], inputs["PathCode"] = [path_table], [path_code]
    if bias_attr is not False:
        inputs["Bias"] = [helper.create_parameter(ParamAttr._to_attr(bias_attr), [nodes, 1],
                                                  input.dtype, is_bias=True)]
    width = path_table.shape[-1] if is_custom else (num_classes - 1).bit_length()
    out = helper.create_tmp(dtype=input.dtype, shape=[input.shape[0], 1])
    pre_out = helper.create_tmp(dtype=input.dtype, shape=[input.shape[0], width],
                                stop_gradient=True)
    helper.append_op("hierarchical_sigmoid", inputs=inputs,
                     outputs={"Out": [out], "PreOut": [pre_out], "W_Out": [w]},
                     attrs={"num_classes": int(num_classes), "is_sparse": bool(is_sparse),
                            "remote_prefetch": bool(is_sparse)})
    return out


# -- bilinear_tensor_product, add_position_encoding ----------------------------------------------

def _named_out(helper: LayerHelper, name: str | None, dtype: str, shape: Any) -> Variable:
    """Fluid names the output ``name`` itself when one is given, else a temporary."""
    if name is None:
        return helper.create_tmp(dtype=dtype, shape=shape)
    return helper.main_program.current_block().create_var(name=name, dtype=dtype, shape=shape)


def bilinear_tensor_product(x: Variable, y: Variable, size: int, act: str | None = None,
                            name: str | None = None, param_attr: Any = None,
                            bias_attr: Any = None) -> Variable:
    """``out[:, i] = x W_i yᵀ + b_i`` for ``x`` ``[N, M]`` and ``y`` ``[N, P]`` (Fluid 1.8's
    ``layers.bilinear_tensor_product``): a weight ``[size, M, P]`` (Xavier) and a bias
    ``[1, size]`` (zeros; none when ``bias_attr`` is False), then ``act``; ``[N, size]``.

    Raises
    ------
    ValueError
        ``size`` is not a positive int, or ``x`` / ``y`` are not 2-D with known second dims.
    """
    _check_var(x, "x", "bilinear_tensor_product")
    _check_var(y, "y", "bilinear_tensor_product")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"bilinear_tensor_product: size must be a positive int, got {size!r}")
    xs, ys = list(x.shape or ()), list(y.shape or ())
    if len(xs) != 2 or len(ys) != 2 or not (_known(xs[1]) and xs[1] > 0) \
            or not (_known(ys[1]) and ys[1] > 0):
        raise ValueError(f"bilinear_tensor_product: x and y must be 2-D with known second "
                         f"dims, got {xs} and {ys}")
    if _known(xs[0]) and _known(ys[0]) and xs[0] != ys[0]:
        raise ValueError(f"bilinear_tensor_product: x and y must have the same batch size, got "
                         f"{xs[0]} and {ys[0]}")
    helper = LayerHelper("bilinear_tensor_product", name)
    w = helper.create_parameter(ParamAttr._to_attr(param_attr), [size, xs[1], ys[1]], x.dtype)
    inputs: dict[str, list[Variable]] = {"X": [x], "Y": [y], "Weight": [w]}
    b_attr = ParamAttr._to_attr(bias_attr)
    if b_attr is not False:
        inputs["Bias"] = [helper.create_parameter(b_attr, [1, size], x.dtype, is_bias=True)]
    out = _named_out(helper, name, x.dtype, [xs[0], size])
    helper.append_op("bilinear_tensor_product", inputs=inputs, outputs={"Out": [out]})
    return helper.append_activation(out, act)


def add_position_encoding(input: Variable, alpha: float, beta: float,
                          name: str | None = None) -> Variable:
    """``alpha * input + beta * PE`` with Transformer sinusoids over the hidden dim (Fluid
    1.8's ``layers.add_position_encoding``): for position j and k < D / 2 (h = D / 2),
    ``PE[..., k] = sin(j / 10000^(k / (h - 1)))`` and ``PE[..., h + k]`` the cosine. A dense
    ``[B, T, D]`` input counts positions along T; a ``[rows, D]`` input with a 1-level LoD
    restarts them at every sequence.

    Raises
    ------
    ValueError
        ``alpha`` or ``beta`` negative, an input that is neither 3-D nor 2-D with a LoD, or an
        odd hidden size.
    """
    _check_var(input, "input", "add_position_encoding")
    for arg, v in (("alpha", alpha), ("beta", beta)):
        if float(v) < 0:
            raise ValueError(f"add_position_encoding: {arg} must be >= 0, got {v!r}")
    shape = list(input.shape or ())
    if input.shape is not None:
        if len(shape) not in (2, 3) or (len(shape) == 2 and input.lod_level != 1):
            raise ValueError(f"add_position_encoding: input {input.name!r} must be 3-D [batch, "
                             f"seq_len, hidden] or 2-D with lod_level 1, got shape {shape} "
                             f"(lod_level {input.lod_level})")
        if _known(shape[-1]) and shape[-1] % 2:
            raise ValueError(f"add_position_encoding: the hidden size must be even, got "
                             f"{shape[-1]}")
    helper = LayerHelper("add_position_encoding", name)
    out = _named_out(helper, name, input.dtype, input.shape)
    helper.append_op("add_position_encoding", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"alpha": float(alpha), "beta": float(beta)})
    return out


# -- tree_conv -------------------------------------------------------------------------------------

def tree_conv(nodes_vector: Variable, edge_set: Variable, output_size: int,
              num_filters: int = 1, max_depth: int = 2, act: str | None = "tanh",
              param_attr: Any = None, bias_attr: Any = None,
              name: str | None = None) -> Variable:
    """Tree-based convolution (Fluid 1.8's ``layers.tree_conv``): ``nodes_vector``
    ``[N, max_nodes, F]`` and ``edge_set`` ``[N, max_edges, 2]`` (int32 parent/child ids
    from 1) through a filter ``[F, 3, output_size, num_filters]`` (Xavier) with the
    continuous binary tree weights, then a bias ``[max_nodes, output_size, num_filters]``
    added from axis 1 (none when ``bias_attr`` is False) and ``act``:
    ``[N, max_nodes, output_size, num_filters]``.

    Raises
    ------
    ValueError
        non-positive ``output_size`` / ``num_filters`` / ``max_depth``, or inputs of the wrong
        rank or an unknown feature size.
    """
    _check_var(nodes_vector, "nodes_vector", "tree_conv")
    _check_var(edge_set, "edge_set", "tree_conv")
    for arg, v in (("output_size", output_size), ("num_filters", num_filters),
                   ("max_depth", max_depth)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"tree_conv: {arg} must be a positive int, got {v!r}")
    nshape, eshape = list(nodes_vector.shape or ()), list(edge_set.shape or ())
    if len(nshape) != 3 or not _known(nshape[2]) or nshape[2] == 0:
        raise ValueError(f"tree_conv: nodes_vector must be [batch, max_nodes, feature] with a "
                         f"known feature size, got {nshape}")
    if len(eshape) != 3 or (_known(eshape[2]) and eshape[2] != 2):
        raise ValueError(f"tree_conv: edge_set must be [batch, max_edges, 2], got {eshape}")
    helper = LayerHelper("tree_conv", name)
    dtype = nodes_vector.dtype
    w = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                [nshape[2], 3, output_size, num_filters], dtype)
    out = helper.create_tmp(dtype=dtype, shape=[nshape[0], nshape[1], output_size, num_filters])
    helper.append_op("tree_conv",
                     inputs={"NodesVector": [nodes_vector], "EdgeSet": [edge_set],
                             "Filter": [w]},
                     outputs={"Out": [out]}, attrs={"max_depth": max_depth})
    b_attr = ParamAttr._to_attr(bias_attr)
    pre = out
    if b_attr is not False:
        # Fluid's LayerHelper.append_bias_op(out): a bias over out.shape[1:], added at axis 1
        if not _known(nshape[1]):
            raise ValueError(f"tree_conv: a bias needs a known max_nodes dim, got {nshape}")
        b = helper.create_parameter(b_attr, [nshape[1], output_size, num_filters], dtype,
                                    is_bias=True)
        pre = helper.create_tmp(dtype=dtype, shape=out.shape)
        helper.append_op("elementwise_add", inputs={"X": [out], "Y": [b]},
                         outputs={"Out": [pre]}, attrs={"axis": 1})
    return helper.append_activation(pre, act)
