"""Activation layers of Fluid 1.8's layers/ops.py not in nn.py (logsigmoid, tanh_shrink,
softshrink, hard_shrink, rsqrt, ceil, round, reciprocal, sin, acos, asin, atan, cosh, sinh, erf,
thresholded_relu, cumsum)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .checks import check_type, check_variable_and_dtype
from .tensor import _check_var

__all__: list[str] = [
    "acos", "asin", "atan", "ceil", "cosh", "cumsum", "erf", "hard_shrink", "logsigmoid",
    "reciprocal", "round", "rsqrt", "sin", "sinh", "softshrink", "tanh_shrink",
    "thresholded_relu",
]


#: the dtypes Fluid 1.8 checks ``x`` against in these layers (``generate_activation_fn`` and
#: the hand-written softshrink, hard_shrink and thresholded_relu of layers/ops.py)
_FLOATS = ("float16", "float32", "float64")


def _act(op_type: str, x: Any, name: str | None = None, **attrs: Any) -> Variable:
    """One ``op_type`` op X→Out with ``x``'s dtype and shape; like Fluid's generated layers,
    only the attributes given (not None) are recorded, the others keep the op's defaults."""
    _check_var(x, "x", op_type)
    helper = LayerHelper(op_type, name)
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op(op_type, inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={k: v for k, v in attrs.items() if v is not None})
    return out


def _float_attr(layer: str, arg: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{layer}: {arg} must be a float or None, got {type(value).__name__}")
    return float(value)


def logsigmoid(x: Variable, name: str | None = None) -> Variable:
    """``log(1 / (1 + exp(-x)))``, computed without overflow for large ``|x|``
    (Fluid 1.8's ``layers.logsigmoid``)."""
    check_variable_and_dtype(x, "x", _FLOATS, "logsigmoid")
    return _act("logsigmoid", x, name)


def tanh_shrink(x: Variable, name: str | None = None) -> Variable:
    """``x - tanh(x)`` (Fluid 1.8's ``layers.tanh_shrink``)."""
    check_variable_and_dtype(x, "x", _FLOATS, "tanh_shrink")
    return _act("tanh_shrink", x, name)


def softshrink(x: Variable, alpha: float | None = None) -> Variable:
    """``x - alpha`` where ``x > alpha``, ``x + alpha`` where ``x < -alpha``, else 0
    (Fluid 1.8's ``layers.softshrink``; ``alpha`` is the op's ``lambda`` attribute, 0.5 when
    None)."""
    check_variable_and_dtype(x, "x", _FLOATS, "softshrink")
    return _act("softshrink", x, None, **{"lambda": _float_attr("softshrink", "alpha", alpha)})


def hard_shrink(x: Variable, threshold: float | None = None) -> Variable:
    """``x`` where ``|x| > threshold``, else 0 (Fluid 1.8's ``layers.hard_shrink``; the op's
    ``threshold`` is 0.5 when None)."""
    check_variable_and_dtype(x, "x", _FLOATS, "hard_shrink")
    return _act("hard_shrink", x, None,
                threshold=_float_attr("hard_shrink", "threshold", threshold))


def thresholded_relu(x: Variable, threshold: float | None = None) -> Variable:
    """``x`` where ``x > threshold``, else 0 (Fluid 1.8's ``layers.thresholded_relu``; the
    op's ``threshold`` is 1.0 when None)."""
    check_variable_and_dtype(x, "x", _FLOATS, "thresholded_relu")
    return _act("thresholded_relu", x, None,
                threshold=_float_attr("thresholded_relu", "threshold", threshold))


def rsqrt(x: Variable, name: str | None = None) -> Variable:
    """``1 / sqrt(x)`` (Fluid 1.8's ``layers.rsqrt``)."""
    check_variable_and_dtype(x, "x", _FLOATS, "rsqrt")
    return _act("rsqrt", x, name)


def reciprocal(x: Variable, name: str | None = None) -> Variable:
    """``1 / x`` (Fluid 1.8's ``layers.reciprocal``)."""
    check_variable_and_dtype(x, "x", _FLOATS, "reciprocal")
    return _act("reciprocal", x, name)


def ceil(x: Variable, name: str | None = None) -> Variable:
    """Element-wise ceiling; its gradient is zero, as Fluid 1.8's ``layers.ceil``."""
    check_variable_and_dtype(x, "x", _FLOATS, "ceil")
    return _act("ceil", x, name)


def round(x: Variable, name: str | None = None) -> Variable:  # noqa: A001 (Fluid's name)
    """Round to the nearest integer, halves away from zero; its gradient is zero, as Fluid
    1.8's ``layers.round``."""
    check_variable_and_dtype(x, "x", _FLOATS, "round")
    return _act("round", x, name)


def sin(x: Variable, name: str | None = None) -> Variable:
    """Sine (Fluid 1.8's ``layers.sin``)."""
    check_variable_and_dtype(x, "x", _FLOATS, "sin")
    return _act("sin", x, name)


def acos(x: Variable, name: str | None = None) -> Variable:
    """Arc cosine (Fluid 1.8's ``layers.acos``)."""
    check_variable_and_dtype(x, "x", _FLOATS, "acos")
    return _act("acos", x, name)


def asin(x: Variable, name: str | None = None) -> Variable:
    """Arc sine (Fluid 1.8's ``layers.asin``)."""
    check_variable_and_dtype(x, "x", _FLOATS, "asin")
    return _act("asin", x, name)


def atan(x: Variable, name: str | None = None) -> Variable:
    """Arc tangent (Fluid 1.8's ``layers.atan``)."""
    check_variable_and_dtype(x, "x", _FLOATS, "atan")
    return _act("atan", x, name)


def cosh(x: Variable, name: str | None = None) -> Variable:
    """Hyperbolic cosine (Fluid 1.8's ``layers.cosh``)."""
    return _act("cosh", x, name)


def sinh(x: Variable, name: str | None = None) -> Variable:
    """Hyperbolic sine (Fluid 1.8's ``layers.sinh``)."""
    return _act("sinh", x, name)


def erf(x: Variable, name: str | None = None) -> Variable:
    """The error function (Fluid 1.8's ``layers.erf``)."""
    return _act("erf", x, name)


def cumsum(x: Variable, axis: int | None = None, exclusive: bool | None = None,
           reverse: bool | None = None) -> Variable:
    """Running sum of ``x`` along ``axis`` (the op's default -1 when None); ``exclusive``
    leaves each element out of its own sum, ``reverse`` sums from the end. Follows Fluid 1.8's
    ``layers.cumsum``: only the arguments given are recorded on the op.

    Raises
    ------
    TypeError
        ``axis`` is not an int.
    ValueError
        ``axis`` is outside ``[-rank, rank)``.
    """
    check_type(x, "x", Variable, "cumsum")
    _check_var(x, "x", "cumsum")
    if axis is not None:
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise TypeError(f"cumsum: axis must be an int or None, got {type(axis).__name__}")
        rank = len(x.shape) if x.shape is not None else None
        if rank is not None and not -rank <= axis < rank:
            raise ValueError(f"cumsum: axis must be in [-{rank}, {rank}) for a {rank}-D x, "
                             f"got {axis}")
    return _act("cumsum", x, None, axis=axis,
                exclusive=None if exclusive is None else bool(exclusive),
                reverse=None if reverse is None else bool(reverse))
