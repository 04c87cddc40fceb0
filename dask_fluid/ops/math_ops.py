"""Math and activation kernels: ``mul``, ``elementwise_*``, activations, reductions, ``sum``.

Each forward kernel sits next to its grad kernel. Grad kernels may return an input array
itself as an output (``elementwise_add_grad`` hands ``Out@GRAD`` on as ``X@GRAD``): no kernel
writes into its inputs, except the optimizer kernels, which update only parameters and
optimizer state, so sharing is safe and saves a copy on the hot path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .registry import GRAD, array_module, register, set_grad
from .selected_rows import (
    SelectedRows,
    grad_maker,
    grad_slots,
    scatter_add,
    to_dtype,
    xp_of,
)


def _scalar(x: Any, value: float) -> Any:
    """``value`` as a scalar of ``x``'s float dtype, so float32 never silently becomes float64."""
    return x.dtype.type(value) if x.dtype.kind == "f" else value


def _dout(ins: dict, like: Any, slot: str = "Out" + GRAD) -> Any:
    """The output gradient; zeros when the backward pass never produced it."""
    g = ins.get(slot, [None])[0]
    if g is None:
        return array_module(like).zeros(like.shape, dtype=like.dtype)
    return g


def _register_grad(type: str, fwd: tuple, out_grads=("Out",), in_grads=("X",), attrs=None):
    """Register ``type``'s grad op signature and return (maker, decorator for its kernel)."""
    inputs, outputs = grad_slots(fwd, out_grads, in_grads)
    return (grad_maker(fwd, out_grads, in_grads),
            register(type + "_grad", inputs, outputs, attrs))


# ---------------------------------------------------------------------------------------------
# mul


def _flatten2(a: Any, num_col_dims: int) -> Any:
    # math.prod: np.prod of a shape costs microseconds, and every mul op flattens twice
    return a.reshape(math.prod(a.shape[:num_col_dims]), -1)


_MUL_ATTRS = {"x_num_col_dims": 1, "y_num_col_dims": 1}
_mul_grad_maker, _mul_grad_register = _register_grad("mul", ("X", "Y"), in_grads=("X", "Y"),
                                                     attrs=_MUL_ATTRS)


@register("mul", ("X", "Y"), ("Out",), _MUL_ATTRS, grad=_mul_grad_maker)
def mul(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = flatten(X, x_num_col_dims) @ flatten(Y, y_num_col_dims), unflattened."""
    x, y = ins["X"][0], ins["Y"][0]
    xn, yn = attrs.get("x_num_col_dims", 1), attrs.get("y_num_col_dims", 1)
    out = _flatten2(x, xn) @ _flatten2(y, yn)
    if x.ndim != 2 or y.ndim != 2:
        out = out.reshape(tuple(x.shape[:xn]) + tuple(y.shape[yn:]))
    return {"Out": [out]}


@_mul_grad_register
def mul_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut @ Y^T, dY = X^T @ dOut on the flattened matrices."""
    x, y = ins["X"][0], ins["Y"][0]
    xn, yn = attrs.get("x_num_col_dims", 1), attrs.get("y_num_col_dims", 1)
    x2, y2 = _flatten2(x, xn), _flatten2(y, yn)
    d = ins["Out" + GRAD][0]
    if d is None:
        d = array_module(x).zeros((x2.shape[0], y2.shape[1]), dtype=x.dtype)
    d2 = d.reshape(x2.shape[0], y2.shape[1])
    res = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [(d2 @ y2.T).reshape(x.shape)]
    if "Y" + GRAD in outs:
        res["Y" + GRAD] = [(x2.T @ d2).reshape(y.shape)]
    return res


# ---------------------------------------------------------------------------------------------
# elementwise binary ops with Fluid broadcasting


def _aligned(big: tuple, small: tuple, axis: int, op: str, slots: tuple[str, str]) -> tuple:
    """``small`` padded with 1s so that numpy broadcasting puts it at dims
    ``[axis, axis + rank)`` of ``big`` (``axis=-1``: at the end) after dropping its trailing
    1s, as Fluid's ``get_mid_dims``; ``slots`` name the two operands in errors."""
    if axis == -1:
        axis = len(big) - len(small)
    trimmed = list(small)
    while trimmed and trimmed[-1] == 1:
        trimmed.pop()
    tail = len(big) - axis - len(trimmed)
    # Fluid 1.8's common broadcast: an aligned pair is equal or either side is 1 (-1: a
    # dim not known before the run)
    ok = 0 <= axis and tail >= 0 and all(
        t == b or 1 in (t, b) or -1 in (t, b) for t, b in zip(trimmed, big[axis:], strict=False))
    if not ok:
        small_name, big_name = slots
        raise ValueError(f"{op}: {small_name} of shape {list(small)} cannot broadcast with "
                         f"{big_name} of shape {list(big)} at axis {axis}: {small_name}'s dims "
                         f"must equal {big_name}'s dims [axis, axis + rank({small_name})) or "
                         "be 1 on one side")
    return (1,) * axis + tuple(trimmed) + (1,) * tail


def ew_shapes(x_shape: Sequence[int], y_shape: Sequence[int], axis: int, op: str
              ) -> tuple[tuple, tuple]:
    """X's and Y's shapes padded with 1s so that numpy broadcasting gives Fluid's.

    Fluid (``ElementwiseComputeEx``) aligns the operand of lower rank (Y when the ranks are
    equal) with dims ``[axis, axis + rank)`` of the other; each aligned pair of dims is equal
    or has a 1 on either side, so Out may be larger than both (X ``[2, 3, 1]`` + Y
    ``[2, 1, 4]`` is ``[2, 3, 4]``).

    Raises
    ------
    ValueError
        The shapes do not broadcast so.
    """
    return _ew_shapes(tuple(x_shape), tuple(y_shape), int(axis), op)


@functools.lru_cache(maxsize=4096)  # every step asks again for the same few shapes
def _ew_shapes(x_shape: tuple, y_shape: tuple, axis: int, op: str) -> tuple[tuple, tuple]:
    """:func:`ew_shapes` of tuples."""
    if x_shape == y_shape:
        return x_shape, y_shape
    if len(x_shape) >= len(y_shape):
        return x_shape, _aligned(x_shape, y_shape, axis, op, ("Y", "X"))
    return _aligned(y_shape, x_shape, axis, op, ("X", "Y")), y_shape


def ew_out_shape(x_shape: Sequence[int], y_shape: Sequence[int], axis: int, op: str
                 ) -> tuple:
    """Out's shape before the run (Fluid's ``GetBroadcastDimsArrays``: a dim larger than 1 on
    either side wins, -1 stays unknown)."""
    xb, yb = ew_shapes(x_shape, y_shape, axis, op)
    if xb == yb:
        return xb
    return tuple(max(a, b) if a > 1 or b > 1 or a == b == 1 else -1
                 for a, b in zip(xb, yb, strict=True))


def _y_bshape(x_shape: tuple, y_shape: tuple, axis: int, op: str) -> tuple:
    """Y's broadcast shape (:func:`ew_shapes`) where X keeps its own."""
    return ew_shapes(x_shape, y_shape, axis, op)[1]


def _ew_operands(ins: dict, attrs: dict, op: str) -> tuple[Any, Any]:
    """X and Y of an elementwise op, reshaped for numpy broadcasting (:func:`ew_shapes`)."""
    x, y = ins["X"][0], ins["Y"][0]
    xs, ys = ew_shapes(x.shape, y.shape, attrs.get("axis", -1), op)
    return x.reshape(xs), y.reshape(ys)


def _unbroadcast(g: Any, shape: tuple) -> Any:
    """Sum ``g`` over the axes broadcasting added or stretched, down to ``shape``."""
    if tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    return g.sum(axis=axes).reshape(shape)


_EW_ATTRS = {"axis": -1}


def _ew_register(type: str, forward, dx, dy, fwd_slots=("X", "Y"), sparse_x: bool = False):
    """Register ``type`` and ``type_grad``: ``forward(x, yb)``; ``dx/dy(x, yb, out, dout)``.
    ``sparse_x``: X may be SelectedRows with a one-element Y (Paddle's elementwise_mul kernel,
    which a global-norm clip of a sparse gradient runs): the rows' values times Y."""
    maker, grad_register = _register_grad(type, fwd_slots, in_grads=("X", "Y"),
                                          attrs=_EW_ATTRS)

    @register(type, ("X", "Y"), ("Out",), _EW_ATTRS, grad=maker)
    def kernel(ins: dict, attrs: dict, outs: tuple) -> dict:
        x, y = ins["X"][0], ins["Y"][0]
        if sparse_x and isinstance(x, SelectedRows):
            if y.size != 1:
                raise ValueError(f"{type}: if X is sparse (SelectedRows), Y must be a scalar, "
                                 f"got shape {list(y.shape)}")
            return {"Out": [SelectedRows(x.rows, forward(x.value, y.reshape(())), x.height)]}
        xs, ys = ew_shapes(x.shape, y.shape, attrs.get("axis", -1), type)
        return {"Out": [forward(x.reshape(xs), y.reshape(ys))]}

    @grad_register
    def grad(ins: dict, attrs: dict, outs: tuple) -> dict:
        x, y = ins["X"][0], ins["Y"][0]
        xs, ys = ew_shapes(x.shape, y.shape, attrs.get("axis", -1), type)
        xb, yb = x.reshape(xs), y.reshape(ys)
        out = ins.get("Out", [None])[0]
        dout = ins["Out" + GRAD][0]
        if dout is None:
            dout = array_module(x).zeros(np.broadcast_shapes(xs, ys), x.dtype)
        res = {}
        # a gradient has its variable's dtype (an integer pow's dY = dOut·log(X)·Out is
        # truncated, as Fluid's kernel of that dtype computes it)
        if "X" + GRAD in outs:
            res["X" + GRAD] = [_unbroadcast(dx(xb, yb, out, dout), xs).reshape(x.shape)
                               .astype(x.dtype, copy=False)]
        if "Y" + GRAD in outs:
            res["Y" + GRAD] = [_unbroadcast(dy(xb, yb, out, dout), ys).reshape(y.shape)
                               .astype(y.dtype, copy=False)]
        return res

    kernel.__doc__ = f"Fluid's {type} with Fluid's broadcasting (:func:`ew_shapes`)."
    grad.__doc__ = f"Gradients of {type}, summed over the broadcast axes."
    return kernel, grad


_ew_register("elementwise_add", lambda x, y: x + y,
             lambda x, y, o, d: d, lambda x, y, o, d: d)
_ew_register("elementwise_sub", lambda x, y: x - y,
             lambda x, y, o, d: d, lambda x, y, o, d: -d)
_ew_register("elementwise_mul", lambda x, y: x * y,
             lambda x, y, o, d: d * y, lambda x, y, o, d: d * x, sparse_x=True)
def _divide(x: Any, y: Any) -> Any:
    """Fluid's DivFunctor: ``x / y``, truncated for integers (C++ integer division)."""
    if x.dtype.kind not in "iu":
        return x / y
    if not bool((y != 0).all()):
        raise ZeroDivisionError("elementwise_div: Integer division by zero encountered (Y "
                                "holds a zero)")
    return _trunc_div(array_module(x), x, y).astype(x.dtype, copy=False)


_ew_register("elementwise_div", _divide,
             lambda x, y, o, d: d / y, lambda x, y, o, d: -d * o / y,
             fwd_slots=("X", "Y", "Out"))
_ew_register("elementwise_max", lambda x, y: array_module(x).maximum(x, y),
             lambda x, y, o, d: d * (x > y), lambda x, y, o, d: d * (x <= y))
_ew_register("elementwise_min", lambda x, y: array_module(x).minimum(x, y),
             lambda x, y, o, d: d * (x < y), lambda x, y, o, d: d * (x >= y))
_ew_register("elementwise_pow", lambda x, y: x ** y,
             lambda x, y, o, d: d * y * x ** (y - 1),
             lambda x, y, o, d: d * o * array_module(x).log(x),
             fwd_slots=("X", "Y", "Out"))


@register("less_than", ("X", "Y"), ("Out",), {"axis": -1, "force_cpu": False})
def less_than(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X < Y (bool), with elementwise broadcasting."""
    x, y = _ew_operands(ins, attrs, "less_than")
    return {"Out": [x < y]}


@register("equal", ("X", "Y"), ("Out",), {"axis": -1, "force_cpu": False})
def equal(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X == Y (bool), with elementwise broadcasting."""
    x, y = _ew_operands(ins, attrs, "equal")
    return {"Out": [x == y]}


@register("logical_and", ("X", "Y"), ("Out",))
def logical_and(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X and Y (bool)."""
    x, y = ins["X"][0], ins["Y"][0]
    return {"Out": [array_module(x).logical_and(x, y)]}


@register("logical_or", ("X", "Y"), ("Out",))
def logical_or(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X or Y (bool)."""
    x, y = ins["X"][0], ins["Y"][0]
    return {"Out": [array_module(x).logical_or(x, y)]}


@register("logical_xor", ("X", "Y"), ("Out",))
def logical_xor(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X xor Y (bool)."""
    x, y = ins["X"][0], ins["Y"][0]
    return {"Out": [array_module(x).logical_xor(x, y)]}


def _trunc_div(xp: Any, x: Any, y: Any) -> Any:
    """Fluid's ``FloorDivFunctor``: ``trunc(x / y)`` (exact for integers)."""
    if x.dtype.kind not in "iu":
        return xp.trunc(x / y)
    q = xp.floor_divide(x, y)
    return q + ((xp.mod(x, y) != 0) & ((x < 0) != (y < 0)))


for _type, _fn in (("elementwise_mod", "mod"), ("elementwise_floordiv", "trunc_div")):
    def _integer_ew(ins: dict, attrs: dict, outs: tuple, _type: str = _type,
                    _fn: str = _fn) -> dict:
        x, yb = _ew_operands(ins, attrs, _type)
        xp = array_module(x)
        if x.dtype.kind in "iu" and not bool((yb != 0).all()):
            raise ZeroDivisionError(f"{_type}: Integer division by zero encountered (Y holds "
                                    "a zero)")
        out = xp.mod(x, yb) if _fn == "mod" else _trunc_div(xp, x, yb)
        return {"Out": [out.astype(x.dtype, copy=False)]}

    _integer_ew.__doc__ = ("Out = X mod Y, with the sign of Y (Fluid's ModFunctor)" if _fn == "mod"
                           else "Out = trunc(X / Y) (Fluid's FloorDivFunctor)") + \
        ", with Fluid's broadcasting; no gradient, as in Fluid."
    register(_type, ("X", "Y"), ("Out",), {"axis": -1})(_integer_ew)


_norm_maker, _norm_grad_register = _register_grad("norm", ("X", "Norm"), ("Out",),
                                                  attrs={"axis": 1, "epsilon": 1e-10,
                                                         "is_test": False})


@register("norm", ("X",), ("Out", "Norm"), {"axis": 1, "epsilon": 1e-10, "is_test": False},
          grad=_norm_maker)
def norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X / Norm, Norm = sqrt(sum(X^2 over ``axis``) + epsilon) (kept dim), as Fluid's
    ``norm`` op (``layers.l2_normalize``)."""
    x = ins["X"][0]
    xp = array_module(x)
    axis = int(attrs.get("axis", 1)) % x.ndim
    n = xp.sqrt((x * x).sum(axis=axis, keepdims=True) + x.dtype.type(attrs.get("epsilon", 1e-10)))
    return {"Out": [x / n], "Norm": [n]}


@_norm_grad_register
def norm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = (dOut - Out * sum(dOut * Out over ``axis``)) / Norm."""
    x, n = ins["X"][0], ins["Norm"][0]
    axis = int(attrs.get("axis", 1)) % x.ndim
    d = _dout(ins, x)
    y = x / n
    return {"X" + GRAD: [(d - y * (d * y).sum(axis=axis, keepdims=True)) / n]}


@register("logical_not", ("X",), ("Out",))
def logical_not(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = not X (bool)."""
    x = ins["X"][0]
    return {"Out": [array_module(x).logical_not(x)]}


# ---------------------------------------------------------------------------------------------
# unary activations: forward(xp, x) and a gradient from Out or from X


def _unary_register(type: str, forward, backward=None, uses: str = "X",
                    attr_defaults: dict | None = None):
    """Register ``type`` (X→Out) and, when ``backward(xp, v, dout)`` is given, ``type_grad``
    reading ``uses`` (``"X"`` or ``"Out"``, as Fluid's grad op does) and ``Out@GRAD``.

    With ``attr_defaults`` (the op's attributes, e.g. softshrink's ``lambda``) both functions
    get the op's attrs as a last argument: ``forward(xp, x, attrs)``,
    ``backward(xp, v, dout, attrs)``."""
    with_attrs = attr_defaults is not None
    maker = None
    if backward is not None:
        maker, grad_register = _register_grad(type, (uses,), attrs=attr_defaults)

        @grad_register
        def grad(ins: dict, attrs: dict, outs: tuple) -> dict:
            v = ins[uses][0]
            if "X" + GRAD not in outs:
                return {}
            extra = (attrs,) if with_attrs else ()
            return {"X" + GRAD: [backward(array_module(v), v, _dout(ins, v), *extra)]}

        grad.__doc__ = f"Gradient of {type} from {uses} and Out@GRAD."

    @register(type, ("X",), ("Out",), attr_defaults, grad=maker)
    def kernel(ins: dict, attrs: dict, outs: tuple) -> dict:
        x = ins["X"][0]
        extra = (attrs,) if with_attrs else ()
        return {"Out": [forward(array_module(x), x, *extra)]}

    kernel.__doc__ = f"Out = {type}(X)."
    return kernel


def _sigmoid(xp, x):
    # tanh form: no overflow in exp for large |x|, and one transcendental per element
    half = _scalar(x, 0.5)
    return half * xp.tanh(half * x) + half


_unary_register("relu", lambda xp, x: xp.maximum(x, _scalar(x, 0)),
                lambda xp, out, d: d * (out > 0), uses="Out")
_unary_register("sigmoid", _sigmoid,
                lambda xp, out, d: d * out * (1 - out), uses="Out")
_unary_register("tanh", lambda xp, x: xp.tanh(x),
                lambda xp, out, d: d * (1 - out * out), uses="Out")
_unary_register("exp", lambda xp, x: xp.exp(x),
                lambda xp, out, d: d * out, uses="Out")
_unary_register("sqrt", lambda xp, x: xp.sqrt(x),
                lambda xp, out, d: d * _scalar(out, 0.5) / out, uses="Out")
_unary_register("log", lambda xp, x: xp.log(x), lambda xp, x, d: d / x)
_unary_register("square", lambda xp, x: x * x, lambda xp, x, d: d * 2 * x)
_unary_register("abs", lambda xp, x: xp.abs(x), lambda xp, x, d: d * xp.sign(x))
_unary_register("cos", lambda xp, x: xp.cos(x), lambda xp, x, d: -d * xp.sin(x))
_unary_register("sign", lambda xp, x: xp.sign(x))


def _sign_grad_maker(op: Any) -> list[dict]:
    """Fluid 1.8's SignGradMaker: dX = ``scale(dOut, scale=0)``, a zero gradient that still
    flows (parameters before a sign get a zero gradient, not none); it is a ``scale`` op, not
    a ``sign_grad``, so the backward program has Fluid's ops, and an inf or nan in dOut gives
    nan as there."""
    return [{"type": "scale",
             "inputs": {"X": [n + GRAD for n in op.outputs["Out"]]},
             "outputs": {"Out": [n + GRAD for n in op.inputs["X"]]},
             "attrs": {"scale": 0.0}}]


set_grad("sign", _sign_grad_maker)


# ---------------------------------------------------------------------------------------------
# more of Fluid 1.8's activation_op.h (and erf_op, cumsum_op): each grad op reads X or Out as
# Fluid's functor's FwdDeps says


def _logsigmoid(xp, x):
    # log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): exp never sees a positive argument, so
    # no overflow for large |x| (Fluid's functor subtracts max(-x, 0) for the same reason)
    return xp.minimum(x, _scalar(x, 0)) - xp.log1p(xp.exp(-xp.abs(x)))


def _shrink_mask(x, lo, hi):
    # Fluid sums the two comparisons as T: (x > hi) + (x < lo)
    return (x > hi).astype(x.dtype) + (x < lo).astype(x.dtype)


def _softshrink(xp, x, attrs):
    lam = _scalar(x, float(attrs["lambda"]))
    return (x - lam) * (x > lam) + (x + lam) * (x < -lam)


def _hard_shrink(xp, x, attrs):
    t = _scalar(x, float(attrs["threshold"]))
    return x * _shrink_mask(x, -t, t)


def _round_half_away(xp, x):
    # Eigen's round (Fluid's RoundFunctor) rounds halves away from zero, not to even as
    # numpy's round does; x - trunc(x) is exact, so the .5 test is exact too
    t = xp.trunc(x)
    return xp.where(xp.abs(x - t) >= _scalar(x, 0.5), t + xp.sign(x), t)


def _erf(xp, x):
    if xp.__name__ == "cupy":
        from cupyx.scipy.special import erf  # noqa: PLC0415
    else:
        from scipy.special import erf  # noqa: PLC0415
    return erf(x)


def _zero_grad(xp, out, d):
    # Fluid's ZeroGradFunctor: floor/ceil/round pass a zero gradient on (they do not stop it)
    return xp.zeros(d.shape, dtype=d.dtype)


def _logsigmoid_grad(xp, x, d):
    # d * sigmoid(-x) from e = exp(-|x|) <= 1: no overflow, and tiny values keep their digits
    # (the tanh form of sigmoid rounds sigmoid(-40) to 0)
    e = xp.exp(-xp.abs(x))
    return d * xp.where(x >= 0, e, _scalar(x, 1)) / (1 + e)


_unary_register("logsigmoid", _logsigmoid, _logsigmoid_grad)
_unary_register("tanh_shrink", lambda xp, x: x - xp.tanh(x),
                lambda xp, x, d: d * xp.tanh(x) ** 2)
_unary_register("softshrink", _softshrink,
                lambda xp, x, d, a: d * _shrink_mask(x, -_scalar(x, float(a["lambda"])),
                                                     _scalar(x, float(a["lambda"]))),
                attr_defaults={"lambda": 0.5})
_unary_register("hard_shrink", _hard_shrink,
                lambda xp, x, d, a: d * _shrink_mask(x, -_scalar(x, float(a["threshold"])),
                                                     _scalar(x, float(a["threshold"]))),
                attr_defaults={"threshold": 0.5})
_unary_register("thresholded_relu",
                lambda xp, x, a: x * (x > _scalar(x, float(a["threshold"]))),
                lambda xp, x, d, a: d * (x > _scalar(x, float(a["threshold"]))),
                attr_defaults={"threshold": 1.0})
_unary_register("rsqrt", lambda xp, x: 1 / xp.sqrt(x),
                lambda xp, out, d: _scalar(out, -0.5) * d * out * out * out, uses="Out")
_unary_register("reciprocal", lambda xp, x: 1 / x,
                lambda xp, out, d: -d * out * out, uses="Out")
_unary_register("floor", lambda xp, x: xp.floor(x), _zero_grad, uses="Out")
_unary_register("ceil", lambda xp, x: xp.ceil(x), _zero_grad, uses="Out")
_unary_register("round", _round_half_away, _zero_grad, uses="Out")
_unary_register("sin", lambda xp, x: xp.sin(x), lambda xp, x, d: d * xp.cos(x))
_unary_register("acos", lambda xp, x: xp.arccos(x),
                lambda xp, x, d: -d / xp.sqrt(1 - x * x))
_unary_register("asin", lambda xp, x: xp.arcsin(x),
                lambda xp, x, d: d / xp.sqrt(1 - x * x))
_unary_register("atan", lambda xp, x: xp.arctan(x), lambda xp, x, d: d / (1 + x * x))
_unary_register("cosh", lambda xp, x: xp.cosh(x), lambda xp, x, d: d * xp.sinh(x))
_unary_register("sinh", lambda xp, x: xp.sinh(x), lambda xp, x, d: d * xp.cosh(x))
_unary_register("erf", _erf,
                lambda xp, x, d: d * _scalar(x, 2 / np.sqrt(np.pi)) * xp.exp(-x * x))


def _cumsum_grad_maker(op: Any) -> list[dict]:
    """Fluid's CumsumGradMaker: dX is a ``cumsum`` of ``Out@GRAD`` the other way round."""
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    attrs["reverse"] = not attrs.get("reverse", False)
    return [{"type": "cumsum",
             "inputs": {"X": [n + GRAD for n in op.outputs["Out"]]},
             "outputs": {"Out": [n + GRAD for n in op.inputs["X"]]},
             "attrs": attrs}]


@register("cumsum", ("X",), ("Out",), {"axis": -1, "exclusive": False, "reverse": False},
          grad=_cumsum_grad_maker)
def cumsum(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = running sum of X along ``axis``; ``reverse`` sums from the end, ``exclusive``
    leaves each element out of its own sum (Fluid 1.8's cumsum_op)."""
    x = ins["X"][0]
    xp = array_module(x)
    axis = int(attrs.get("axis", -1))
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"cumsum: axis must be in [-{x.ndim}, {x.ndim}) for a {x.ndim}-D X, "
                         f"got {axis}")
    a = xp.flip(x, axis) if attrs.get("reverse", False) else x
    out = xp.cumsum(a, axis=axis, dtype=x.dtype)
    if attrs.get("exclusive", False) and x.shape[axis] > 0:
        # shift by one along axis (exact, unlike out - a): element i gets the sum before it
        keep = [slice(None)] * x.ndim
        keep[axis] = slice(0, x.shape[axis] - 1)
        first = list(x.shape)
        first[axis] = 1
        out = xp.concatenate([xp.zeros(first, dtype=out.dtype), out[tuple(keep)]], axis=axis)
    if attrs.get("reverse", False):
        out = xp.flip(out, axis)
    return {"Out": [out]}


# Fluid's compare_op.cc: the same broadcasting as less_than (Y from ``axis``), bool Out
for _type, _cmp in (("less_equal", lambda x, y: x <= y), ("greater_than", lambda x, y: x > y),
                    ("greater_equal", lambda x, y: x >= y), ("not_equal", lambda x, y: x != y)):

    def _compare_kernel(ins: dict, attrs: dict, outs: tuple, _type=_type, _cmp=_cmp) -> dict:
        x, y = _ew_operands(ins, attrs, _type)
        return {"Out": [_cmp(x, y)]}

    _compare_kernel.__doc__ = f"Out = {_type}(X, Y) (bool), with elementwise broadcasting."
    register(_type, ("X", "Y"), ("Out",), {"axis": -1, "force_cpu": False})(_compare_kernel)


# ---------------------------------------------------------------------------------------------
# scale, assign, increment, cast, clip


def _self_grad_maker(type: str, keep_attrs: bool = True):
    """Fluid's grad for linear unary ops: the same op applied to ``Out@GRAD`` (bias dropped)."""

    def make(op: Any) -> list[dict]:
        attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
        inputs = {"X": [n + GRAD for n in op.outputs["Out"]]}
        if type == "scale":
            # Fluid's ScaleGradMaker: dX = scale·dOut, bias dropped; the scale comes from the
            # same ScaleTensor when the forward op had one (the attr is stale then)
            attrs["bias"] = 0.0
            attrs["bias_after_scale"] = True
            if op.inputs.get("ScaleTensor"):
                inputs["ScaleTensor"] = list(op.inputs["ScaleTensor"])
        return [{"type": type,
                 "inputs": inputs,
                 "outputs": {"Out": [n + GRAD for n in op.inputs["X"]]},
                 "attrs": attrs if keep_attrs else {}}]

    return make


@register("scale", ("X", "ScaleTensor"), ("Out",),
          {"scale": 1.0, "bias": 0.0, "bias_after_scale": True},
          optional=("ScaleTensor",), grad=_self_grad_maker("scale"))
def scale(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = scale·X + bias (or scale·(X + bias)); a SelectedRows X has its values scaled."""
    x = ins["X"][0]
    s = attrs.get("scale", 1.0)
    if ins.get("ScaleTensor") and ins["ScaleTensor"][0] is not None:
        s = float(ins["ScaleTensor"][0].reshape(-1)[0])
    b, after = attrs.get("bias", 0.0), attrs.get("bias_after_scale", True)
    v = x.value if isinstance(x, SelectedRows) else x
    sv, bv = _scalar(v, s), _scalar(v, b)
    if b == 0:
        out = v * sv
    else:
        out = v * sv + bv if after else (v + bv) * sv
    if out.dtype != v.dtype:
        out = out.astype(v.dtype)
    return {"Out": [SelectedRows(x.rows, out, x.height) if isinstance(x, SelectedRows) else out]}


@register("assign", ("X",), ("Out",), grad=_self_grad_maker("assign", keep_attrs=False))
def assign(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = a copy of X."""
    x = ins["X"][0]
    if isinstance(x, SelectedRows):
        return {"Out": [SelectedRows(x.rows.copy(), x.value.copy(), x.height)]}
    return {"Out": [x.copy()]}


# Out = X + step, so dX = dOut: an assign of it. Fluid 1.8's grad maker is an increment by
# -step of the forward value, which gives X no gradient: a loop counter that the body also
# computes with (while_loop's i * i) would then pass none of its later steps' gradient back
@register("increment", ("X",), ("Out",), {"step": 1.0},
          grad=_self_grad_maker("assign", keep_attrs=False))
def increment(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X + step, keeping X's dtype."""
    x = ins["X"][0]
    return {"Out": [x + x.dtype.type(attrs.get("step", 1.0))]}


def _cast_grad_maker(op: Any) -> list[dict]:
    """Fluid's CastOpGradMaker: dX is ``Out@GRAD`` cast back to X's dtype."""
    return [{"type": "cast",
             "inputs": {"X": [n + GRAD for n in op.outputs["Out"]]},
             "outputs": {"Out": [n + GRAD for n in op.inputs["X"]]},
             "attrs": {"in_dtype": op.attrs.get("out_dtype", "float32"),
                       "out_dtype": op.attrs.get("in_dtype", "float32")}}]


@register("cast", ("X",), ("Out",), {"in_dtype": "float32", "out_dtype": "float32"},
          grad=_cast_grad_maker)
def cast(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X converted to ``out_dtype`` (a dtype string or Fluid's integer code)."""
    return {"Out": [ins["X"][0].astype(to_dtype(attrs["out_dtype"]))]}


_CLIP_ATTRS = {"min": -1.0, "max": 1.0}
#: Fluid 1.8's clip op takes its bounds from these ``[1]`` tensors too (dispensable)
_CLIP_TENSORS = ("Min", "Max")


def _clip_bounds(x: Any, ins: dict, attrs: dict) -> tuple[Any, Any]:
    """(min, max) as Fluid 1.8's ClipKernel reads them: the ``Min``/``Max`` tensors over the
    attributes, as scalars of X's dtype.

    Raises
    ------
    TypeError
        A bound tensor of another dtype than X (Fluid reads it as ``data<T>``).
    ValueError
        An empty bound tensor, or min not below max (Fluid's ``PADDLE_ENFORCE_LT``).
    """
    bounds = []
    for slot in _CLIP_TENSORS:
        value = _scalar(x, attrs[slot.lower()])
        t = (ins.get(slot) or [None])[0]
        if t is not None:
            if t.dtype != x.dtype:
                raise TypeError(f"clip: {slot} must have X's dtype {x.dtype}, got {t.dtype}")
            if t.size < 1:
                raise ValueError(f"clip: {slot} is empty; it must hold the bound (shape [1])")
            value = x.dtype.type(t.reshape(-1)[0].item())  # .item(): numpy or cupy
        bounds.append(value)
    lo, hi = bounds
    if not lo < hi:
        raise ValueError(f"clip: max should be greater than min, got min = {lo}, max = {hi}")
    return lo, hi


@register("clip", ("X",) + _CLIP_TENSORS, ("Out",), _CLIP_ATTRS, optional=_CLIP_TENSORS,
          grad=grad_maker(("X",) + _CLIP_TENSORS))
def clip(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = min(max(X, min), max), the bounds from ``Min``/``Max`` or the attributes."""
    x = ins["X"][0]
    lo, hi = _clip_bounds(x, ins, attrs)
    return {"Out": [array_module(x).clip(x, lo, hi)]}


@register("clip_grad", *grad_slots(("X",) + _CLIP_TENSORS), _CLIP_ATTRS,
          optional=_CLIP_TENSORS)
def clip_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut where min < X < max, else 0 (the bounds read as the forward op read them)."""
    x = ins["X"][0]
    lo, hi = _clip_bounds(x, ins, attrs)
    return {"X" + GRAD: [_dout(ins, x) * ((x > lo) & (x < hi))]}


# ---------------------------------------------------------------------------------------------
# mean, reductions, sum

_mean_maker, _mean_grad_register = _register_grad("mean", ("X",))


@register("mean", ("X",), ("Out",), grad=_mean_maker)
def mean(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = mean of all elements of X, shape [1]."""
    x = ins["X"][0]
    return {"Out": [x.mean(keepdims=True).reshape(1)]}


@_mean_grad_register
def mean_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut / numel(X) everywhere."""
    x = ins["X"][0]
    xp = array_module(x)
    g = xp.empty(x.shape, dtype=x.dtype)
    g[...] = _dout(ins, xp.zeros(1, x.dtype)).reshape(()) / x.size
    return {"X" + GRAD: [g]}


#: ``out_dtype`` (a dtype or Fluid's code; -1: X's): X is cast to it before the reduction, as
#: Fluid's ReduceKernel does; ``in_dtype`` is the dtype the gradient goes back in (X's here)
_REDUCE_ATTRS = {"dim": [0], "keep_dim": False, "reduce_all": False, "in_dtype": -1,
                 "out_dtype": -1}


def _reduce_input(x: Any, attrs: dict) -> Any:
    """X in the reduction's dtype (``out_dtype``, when set)."""
    out_dtype = attrs.get("out_dtype", -1)
    if isinstance(out_dtype, (int, np.integer)) and not isinstance(out_dtype, str) and \
            int(out_dtype) < 0:
        return x
    return x.astype(to_dtype(out_dtype), copy=False)


def _reduce_axes(x: Any, attrs: dict) -> tuple[int, ...]:
    dims = attrs.get("dim", [0])
    if isinstance(dims, int):
        dims = [dims]
    if attrs.get("reduce_all", False) or len(dims) == 0:
        return tuple(range(x.ndim))
    return tuple(sorted(d % x.ndim for d in dims))


def _reduce_register(type: str, is_mean: bool):
    maker, grad_register = _register_grad(type, ("X",), attrs=_REDUCE_ATTRS)

    @register(type, ("X",), ("Out",), _REDUCE_ATTRS, grad=maker)
    def kernel(ins: dict, attrs: dict, outs: tuple) -> dict:
        x = _reduce_input(ins["X"][0], attrs)
        axes = _reduce_axes(x, attrs)
        keep = attrs.get("keep_dim", False)
        out = x.mean(axis=axes, keepdims=keep) if is_mean else x.sum(axis=axes, keepdims=keep)
        out = array_module(x).asarray(out)
        if out.ndim == 0:  # Fluid never makes 0-d tensors
            out = out.reshape(1)
        return {"Out": [out]}

    @grad_register
    def grad(ins: dict, attrs: dict, outs: tuple) -> dict:
        x = ins["X"][0]
        axes = _reduce_axes(x, attrs)
        kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        d = _dout(ins, array_module(x).zeros(kept, x.dtype)).reshape(kept)
        if is_mean:
            d = d / math.prod(x.shape[a] for a in axes)
        g = array_module(x).empty(x.shape, dtype=x.dtype)
        g[...] = d
        return {"X" + GRAD: [g]}

    kernel.__doc__ = f"Out = {type} of X over ``dim`` (all dims when ``reduce_all``)."
    grad.__doc__ = f"Gradient of {type}: dOut broadcast back over the reduced dims."


_reduce_register("reduce_sum", is_mean=False)
_reduce_register("reduce_mean", is_mean=True)


def _reduced(x: Any, attrs: dict, fn: str) -> Any:
    x = _reduce_input(x, attrs)
    out = array_module(x).asarray(getattr(x, fn)(axis=_reduce_axes(x, attrs),
                                                 keepdims=attrs.get("keep_dim", False)))
    return out.reshape(1) if out.ndim == 0 else out  # Fluid never makes 0-d tensors


def _kept(x: Any, attrs: dict, value: Any) -> Any:
    """``value`` (an output or its gradient) reshaped to keep the reduced dims as 1s."""
    axes = _reduce_axes(x, attrs)
    return value.reshape(tuple(1 if i in axes else s for i, s in enumerate(x.shape)))


def _extreme_register(type: str, fn: str) -> None:
    """reduce_max / reduce_min; the gradient goes to every element equal to the extreme, as
    Fluid's (``dX = dOut * (X == Out)``)."""
    maker, grad_register = _register_grad(type, ("X", "Out"), attrs=_REDUCE_ATTRS)

    @register(type, ("X",), ("Out",), _REDUCE_ATTRS, grad=maker)
    def kernel(ins: dict, attrs: dict, outs: tuple) -> dict:
        return {"Out": [_reduced(ins["X"][0], attrs, fn)]}

    @grad_register
    def grad(ins: dict, attrs: dict, outs: tuple) -> dict:
        x, out = ins["X"][0], ins["Out"][0]
        d = _kept(x, attrs, _dout(ins, out))
        return {"X" + GRAD: [((x == _kept(x, attrs, out)) * d).astype(x.dtype, copy=False)]}

    kernel.__doc__ = f"Out = the {fn} of X over ``dim`` (all dims when ``reduce_all``)."
    grad.__doc__ = f"dX = dOut where X equals the {fn} (every tie gets it), else 0."


_extreme_register("reduce_max", "max")
_extreme_register("reduce_min", "min")

_prod_maker, _prod_grad_register = _register_grad("reduce_prod", ("X", "Out"),
                                                  attrs=_REDUCE_ATTRS)


@register("reduce_prod", ("X",), ("Out",), _REDUCE_ATTRS, grad=_prod_maker)
def reduce_prod(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the product of X over ``dim`` (all dims when ``reduce_all``)."""
    return {"Out": [_reduced(ins["X"][0], attrs, "prod")]}


@_prod_grad_register
def reduce_prod_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut * Out / X (Fluid's rule: a zero in X gives inf or nan there)."""
    x, out = ins["X"][0], ins["Out"][0]
    g = _kept(x, attrs, _dout(ins, out)) * _kept(x, attrs, out) / x
    return {"X" + GRAD: [g.astype(x.dtype, copy=False)]}


for _type, _fn in (("reduce_all", "all"), ("reduce_any", "any")):
    def _logical(ins: dict, attrs: dict, outs: tuple, _fn: str = _fn) -> dict:
        x = ins["X"][0]
        if x.dtype != np.bool_:
            raise TypeError(f"reduce_{_fn}: X must be bool, got {x.dtype}")
        return {"Out": [_reduced(x, attrs, _fn)]}

    _logical.__doc__ = f"Out = whether {_fn} of X over ``dim`` hold (bool, no gradient)."
    register(_type, ("X",), ("Out",), _REDUCE_ATTRS)(_logical)


def _sum_grad_maker(op: Any) -> list[dict]:
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": "sum_grad",
             "inputs": {"X": list(op.inputs["X"]),
                        "Out" + GRAD: [n + GRAD for n in op.outputs["Out"]]},
             "outputs": {"X" + GRAD: [n + GRAD for n in op.inputs["X"]]},
             "attrs": attrs}]


@register("sum", ("X",), ("Out",), grad=_sum_grad_maker)
def sum_(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the sum of the X list; all-SelectedRows inputs give a SelectedRows (rows and values
    concatenated, duplicates kept), a dense and sparse mix gives a dense tensor."""
    xs = [x for x in ins["X"] if x is not None]
    if not xs:
        raise ValueError("sum: every input of X is unbound")
    dense = [x for x in xs if not isinstance(x, SelectedRows)]
    sparse = [x for x in xs if isinstance(x, SelectedRows)]
    xp = xp_of(*xs)
    if not dense:
        if len(sparse) == 1:
            s = sparse[0]
            return {"Out": [SelectedRows(s.rows.copy(), s.value.copy(), s.height)]}
        return {"Out": [SelectedRows(xp.concatenate([s.rows for s in sparse]),
                                     xp.concatenate([s.value for s in sparse]),
                                     sparse[0].height)]}
    out = dense[0] + dense[1] if len(dense) > 1 else dense[0].copy()
    for x in dense[2:]:
        out += x
    for s in sparse:
        scatter_add(xp, out, s.rows, s.value)
    return {"Out": [out]}


@register("sum_grad", ("X", "Out" + GRAD), ("X" + GRAD,))
def sum_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Every input's gradient is dOut."""
    n = len(ins["X"])
    d = ins["Out" + GRAD][0]
    if d is None:
        like = next(x for x in ins["X"] if x is not None)
        d = xp_of(like).zeros(like.shape, dtype=like.dtype)
    return {"X" + GRAD: [d] * n}


@register("clip_by_norm", ("X",), ("Out",), {"max_norm": 1.0})
def clip_by_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X · max_norm / max(‖X‖₂, max_norm): X itself when its norm is within max_norm."""
    x = ins["X"][0]
    if isinstance(x, SelectedRows):
        x = x.to_dense()
    xp = array_module(x)
    max_norm = _scalar(x, attrs.get("max_norm", 1.0))
    norm = xp.sqrt((x * x).sum())
    return {"Out": [(x * (max_norm / xp.maximum(norm, max_norm))).astype(x.dtype, copy=False)]}


# ---------------------------------------------------------------------------------------------
# double grads: the grad ops of Fluid 1.8's DoubleGradMakers (activation_op.cc, mul_op.cc,
# elementwise_*_op.cc, reduce_mean_op.cc ...), so that a loss over gradients (a gradient
# penalty) can be differentiated again. In a grad op's own grad maker, ``op`` is the grad op:
# its inputs are the forward values and ``Out@GRAD``, its outputs ``X@GRAD``.

#: the grad op description key naming its value slots (read by backward._grad_descs)
VALUE_SLOTS = "value_slots"


def _grads_of(names: list[str]) -> list[str]:
    # an unbound gradient stays unbound (no "@EMPTY@@GRAD" variable)
    return [EMPTY if n == EMPTY else n + GRAD for n in names]


EMPTY = "@EMPTY@"


def double_grad_maker(type: str, values: dict[str, str], ddx: dict[str, str],
                      outputs: dict[str, str]):
    """A grad maker for a grad op, building ``type`` (Fluid's ``*_grad_grad``).

    ``values`` maps a slot of the new op to a slot of the grad op (an input such as ``Out`` or
    ``Out@GRAD``, or an output such as ``X@GRAD``) whose variables it reads as values;
    ``ddx`` maps a slot to a grad op output slot whose gradient it reads (``DDX`` <-
    ``X@GRAD``); ``outputs`` maps a slot to a grad op input slot whose gradient it writes
    (``DDOut`` -> ``Out@GRAD``, ``DX`` -> ``X``). Value slots are marked, so the backward pass
    neither takes an earlier pass's ``Out@GRAD`` for an incoming gradient nor renames it.
    """

    def make(op: Any) -> list[dict]:
        inputs: dict[str, list[str]] = {}
        for slot, src in values.items():
            names = op.inputs.get(src) or op.outputs.get(src)
            if names:
                inputs[slot] = list(names)
        for slot, src in ddx.items():
            if op.outputs.get(src):
                inputs[slot] = _grads_of(op.outputs[src])
        outs = {slot: _grads_of(op.inputs[src]) for slot, src in outputs.items()
                if op.inputs.get(src)}
        attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
        return [{"type": type, "inputs": inputs, "outputs": outs, "attrs": attrs,
                 VALUE_SLOTS: tuple(s for s in values if s in inputs)}]

    return make


def linear_grad_maker(type: str, src: str = "X" + GRAD, dst: str = "Out" + GRAD,
                      in_slot: str = "X", out_slot: str = "Out", attrs: dict | None = None,
                      keep: tuple[str, ...] = ()):
    """The grad maker of a grad op linear in its incoming gradient and independent of the
    forward values (reduce_mean_grad, mean_grad ...): Fluid's DoubleGradMaker runs the forward
    op ``type`` again, on ``DDX`` (the gradient of ``src``) into ``DDOut`` (that of ``dst``),
    with the grad op's attrs updated by ``attrs`` and its inputs of the ``keep`` slots (the
    bound tensors of a slice) passed on."""
    override = dict(attrs or {})

    def make(op: Any) -> list[dict]:
        attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
        attrs.update(override)
        inputs = {in_slot: _grads_of(op.outputs[src])}
        inputs.update({slot: list(op.inputs[slot]) for slot in keep if op.inputs.get(slot)})
        return [{"type": type, "inputs": inputs,
                 "outputs": {out_slot: _grads_of(op.inputs[dst])}, "attrs": attrs}]

    return make


def _opt(ins: dict, slot: str) -> Any:
    return (ins.get(slot) or [None])[0]


def _zeros_or(a: Any, like: Any) -> Any:
    return array_module(like).zeros(like.shape, like.dtype) if a is None else a


# -- activations (activation_op.cc: ReluDoubleGradMaker, SqrtDoubleGradMaker,
# SquareDoubleGradMaker); leaky_relu and elu live in dense_ops

set_grad("relu_grad", double_grad_maker("relu_grad_grad", {"Out": "Out"}, {"DDX": "X" + GRAD},
                                        {"DDOut": "Out" + GRAD}))


@register("relu_grad_grad", ("Out", "DDX"), ("DDOut",), optional=("DDX",))
def relu_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """DDOut = DDX where Out > 0 (relu_grad is linear in dOut; Out's gradient is 0)."""
    out = ins["Out"][0]
    return {"DDOut": [_zeros_or(_opt(ins, "DDX"), out) * (out > 0)]}


set_grad("sqrt_grad", double_grad_maker("sqrt_grad_grad", {"Out": "Out", "DX": "X" + GRAD},
                                        {"DDX": "X" + GRAD},
                                        {"DOut": "Out", "DDOut": "Out" + GRAD}))


@register("sqrt_grad_grad", ("Out", "DX", "DDX"), ("DOut", "DDOut"), optional=("DDX",))
def sqrt_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """sqrt_grad: dX = dOut / (2 Out). DDOut = DDX / (2 Out), DOut = -DDX · dX / Out
    (Fluid's SqrtGradGradFunctor)."""
    out, dx = ins["Out"][0], ins["DX"][0]
    ddx = _zeros_or(_opt(ins, "DDX"), out)
    res = {}
    if "DDOut" in outs:
        res["DDOut"] = [ddx * _scalar(out, 0.5) / out]
    if "DOut" in outs:
        res["DOut"] = [-ddx * dx / out]
    return res


set_grad("square_grad", double_grad_maker("square_grad_grad", {"X": "X", "DOut": "Out" + GRAD},
                                          {"DDX": "X" + GRAD},
                                          {"DX": "X", "DDOut": "Out" + GRAD}))


@register("square_grad_grad", ("X", "DOut", "DDX"), ("DX", "DDOut"), optional=("DOut", "DDX"))
def square_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """square_grad: dX = 2 X dOut. DDOut = 2 X DDX, DX = 2 dOut DDX."""
    x = ins["X"][0]
    ddx = _zeros_or(_opt(ins, "DDX"), x)
    res = {}
    if "DDOut" in outs:
        res["DDOut"] = [2 * x * ddx]
    if "DX" in outs:
        res["DX"] = [2 * _zeros_or(_opt(ins, "DOut"), x) * ddx]
    return res


# -- mul (mul_op.cc: MulDoubleGradMaker, mul_grad_grad)

set_grad("mul_grad", double_grad_maker(
    "mul_grad_grad", {"X": "X", "Y": "Y", "DOut": "Out" + GRAD},
    {"DDX": "X" + GRAD, "DDY": "Y" + GRAD},
    {"DX": "X", "DY": "Y", "DDOut": "Out" + GRAD}))


@register("mul_grad_grad", ("X", "Y", "DOut", "DDX", "DDY"), ("DX", "DY", "DDOut"), _MUL_ATTRS,
          optional=("DOut", "DDX", "DDY"))
def mul_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """On the flattened matrices: DDOut = DDX @ Y + X @ DDY, DX = dOut @ DDY^T,
    DY = DDX^T @ dOut."""
    x, y = ins["X"][0], ins["Y"][0]
    xn, yn = attrs.get("x_num_col_dims", 1), attrs.get("y_num_col_dims", 1)
    x2, y2 = _flatten2(x, xn), _flatten2(y, yn)
    ddx, ddy, dout = _opt(ins, "DDX"), _opt(ins, "DDY"), _opt(ins, "DOut")
    ddx2 = None if ddx is None else ddx.reshape(x2.shape)
    ddy2 = None if ddy is None else ddy.reshape(y2.shape)
    xp = array_module(x, y)
    res = {}
    if "DDOut" in outs:
        dd = xp.zeros((x2.shape[0], y2.shape[1]), dtype=x.dtype)
        if ddx2 is not None:
            dd = dd + ddx2 @ y2
        if ddy2 is not None:
            dd = dd + x2 @ ddy2
        shape = tuple(x.shape[:xn]) + tuple(y.shape[yn:])
        res["DDOut"] = [dd.reshape(shape) if dout is None else dd.reshape(dout.shape)]
    d2 = None if dout is None else dout.reshape(x2.shape[0], y2.shape[1])
    if "DX" in outs:
        res["DX"] = [xp.zeros(x.shape, x.dtype) if d2 is None or ddy2 is None
                     else (d2 @ ddy2.T).reshape(x.shape)]
    if "DY" in outs:
        res["DY"] = [xp.zeros(y.shape, y.dtype) if d2 is None or ddx2 is None
                     else (ddx2.T @ d2).reshape(y.shape)]
    return res


# -- elementwise (elementwise_{add,sub,mul,div}_op.cc: Elementwise*DoubleGradMaker)


def _ew_parts(ins: dict, attrs: dict, op: str) -> tuple:
    """(Y broadcast shape, DDX, DDY reshaped to broadcast into X's shape) of an elementwise
    double grad op; ``X`` or ``DOut`` gives the full shape."""
    y = ins["Y"][0]
    full = (_opt(ins, "X") if _opt(ins, "X") is not None else ins["DOut"][0])
    bshape = _y_bshape(full.shape, y.shape, attrs.get("axis", -1), op)
    ddy = _opt(ins, "DDY")
    return bshape, _opt(ins, "DDX"), None if ddy is None else ddy.reshape(bshape)


def _ew_linear_grad_grad(type: str, sign: float):
    set_grad(type + "_grad", double_grad_maker(
        type + "_grad_grad", {"Y": "Y", "DOut": "Out" + GRAD},
        {"DDX": "X" + GRAD, "DDY": "Y" + GRAD}, {"DDOut": "Out" + GRAD}))

    @register(type + "_grad_grad", ("Y", "DOut", "DDX", "DDY"), ("DDOut",), _EW_ATTRS,
              optional=("DDX", "DDY"))
    def kernel(ins: dict, attrs: dict, outs: tuple) -> dict:
        dout = ins["DOut"][0]
        _, ddx, ddy = _ew_parts(ins, attrs, type)
        dd = array_module(dout).zeros(dout.shape, dout.dtype)
        if ddx is not None:
            dd = dd + ddx
        if ddy is not None:
            dd = dd + ddy if sign > 0 else dd - ddy
        return {"DDOut": [dd]}

    kernel.__doc__ = f"DDOut = DDX {'+' if sign > 0 else '-'} DDY (broadcast as {type})."


_ew_linear_grad_grad("elementwise_add", 1.0)
_ew_linear_grad_grad("elementwise_sub", -1.0)

set_grad("elementwise_mul_grad", double_grad_maker(
    "elementwise_mul_grad_grad", {"X": "X", "Y": "Y", "DOut": "Out" + GRAD},
    {"DDX": "X" + GRAD, "DDY": "Y" + GRAD}, {"DX": "X", "DY": "Y", "DDOut": "Out" + GRAD}))


@register("elementwise_mul_grad_grad", ("X", "Y", "DOut", "DDX", "DDY"), ("DX", "DY", "DDOut"),
          _EW_ATTRS, optional=("DOut", "DDX", "DDY"))
def elementwise_mul_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """DDOut = DDX·Y + X·DDY, DX = dOut·DDY, DY = dOut·DDX (summed over Y's broadcast)."""
    x, y = ins["X"][0], ins["Y"][0]
    bshape, ddx, ddy = _ew_parts(ins, attrs, "elementwise_mul")
    yb = y.reshape(bshape)
    xp = array_module(x, y)
    dout = _opt(ins, "DOut")
    res = {}
    if "DDOut" in outs:
        dd = xp.zeros(np.broadcast_shapes(x.shape, bshape), x.dtype)
        if ddx is not None:
            dd = dd + ddx * yb
        if ddy is not None:
            dd = dd + x * ddy
        res["DDOut"] = [dd]
    if "DX" in outs:
        res["DX"] = [xp.zeros(x.shape, x.dtype) if dout is None or ddy is None
                     else _unbroadcast(dout * ddy, x.shape)]
    if "DY" in outs:
        res["DY"] = [xp.zeros(y.shape, y.dtype) if dout is None or ddx is None
                     else _unbroadcast(dout * ddx, bshape).reshape(y.shape)]
    return res


set_grad("elementwise_div_grad", double_grad_maker(
    "elementwise_div_grad_grad", {"Y": "Y", "Out": "Out", "DX": "X" + GRAD},
    {"DDX": "X" + GRAD, "DDY": "Y" + GRAD},
    {"Y" + GRAD: "Y", "DOut": "Out", "DDOut": "Out" + GRAD}))


@register("elementwise_div_grad_grad", ("Y", "Out", "DX", "DDX", "DDY"),
          ("Y" + GRAD, "DOut", "DDOut"), _EW_ATTRS, optional=("DX", "DDX", "DDY"))
def elementwise_div_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Fluid's ElementwiseDivGradGrad, with dX = dOut / Y: DDOut = (DDX − Out·DDY) / Y,
    DOut = −dX·DDY, dY = (Out·DDY − DDX)·dX / Y (summed over Y's broadcast)."""
    y, out, dx = ins["Y"][0], ins["Out"][0], _opt(ins, "DX")
    bshape = _y_bshape(out.shape, y.shape, attrs.get("axis", -1), "elementwise_div")
    yb = y.reshape(bshape)
    xp = array_module(y, out)
    ddx = _zeros_or(_opt(ins, "DDX"), out)
    ddy = _opt(ins, "DDY")
    ddy = xp.zeros(bshape, y.dtype) if ddy is None else ddy.reshape(bshape)
    if dx is None and ("DOut" in outs or "Y" + GRAD in outs):
        # dX is Fluid's only source of dOut here; without it these gradients are unknown
        raise NotImplementedError(
            "elementwise_div_grad_grad needs DX (the gradient of X of the first backward "
            "pass): differentiate the division with respect to X there too")
    res = {}
    if "DDOut" in outs:
        res["DDOut"] = [(ddx - out * ddy) / yb]
    if "DOut" in outs:
        res["DOut"] = [-dx * ddy]
    if "Y" + GRAD in outs:
        res["Y" + GRAD] = [_unbroadcast((out * ddy - ddx) * dx / yb, bshape).reshape(y.shape)]
    return res


# -- reductions and mean: linear in dOut, so their grad ops' grad is the forward op again
# (reduce_mean_op.cc: ReduceMeanDoubleGradMaker; reduce_sum and mean follow the same rule)

for _type in ("reduce_sum", "reduce_mean", "mean"):
    set_grad(_type + "_grad", linear_grad_maker(_type))


# -- squared_l2_norm, l1_norm, squared_l2_distance ------------------------------------------------
# Fluid 1.8 still registers these, and its code emits them (contrib's ctr_metric_bundle writes
# squared_l2_norm and l1_norm; old saved models hold squared_l2_distance)

def _scalar_dout(ins: dict, like: Any, op: str) -> Any:
    """dOut of a norm (shape [1]) as a scalar of ``like``'s array module; None when unbound."""
    d = ins["Out" + GRAD][0]
    if d is None:
        return None
    if d.size != 1:
        raise ValueError(f"{op}_grad: Out@GRAD must hold one value, got shape {list(d.shape)}")
    return d.reshape(())


@register("squared_l2_norm", ("X",), ("Out",), grad=grad_maker(("X",)), lod="none")
def squared_l2_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = sum(X²), shape [1]."""
    x = ins["X"][0]
    return {"Out": [(x * x).sum().reshape(1).astype(x.dtype)]}


@register("squared_l2_norm_grad", *grad_slots(("X",)))
def squared_l2_norm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = 2·dOut·X."""
    x = ins["X"][0]
    d = _scalar_dout(ins, x, "squared_l2_norm")
    xp = array_module(x)
    return {"X" + GRAD: [xp.zeros_like(x) if d is None else (2 * d * x).astype(x.dtype)]}


@register("l1_norm", ("X",), ("Out",), grad=grad_maker(("X",)), lod="none")
def l1_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = sum(|X|), shape [1]."""
    x = ins["X"][0]
    return {"Out": [array_module(x).abs(x).sum().reshape(1).astype(x.dtype)]}


@register("l1_norm_grad", *grad_slots(("X",)))
def l1_norm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut·sign(X) (0 where X is 0, as Eigen's ``sign``)."""
    x = ins["X"][0]
    d = _scalar_dout(ins, x, "l1_norm")
    xp = array_module(x)
    return {"X" + GRAD: [xp.zeros_like(x) if d is None else (d * xp.sign(x)).astype(x.dtype)]}


def _l2_distance_rows(x: Any, y: Any) -> tuple[Any, Any]:
    """X and Y as matrices of one row per dim-0 entry (Fluid's SquaredL2DistanceOp checks:
    the same size per row, and Y of X's rows or of one row, broadcast)."""
    if x.ndim < 1 or y.ndim < 1 or x.shape[0] == 0:
        raise ValueError(f"squared_l2_distance: X and Y need a dim 0, got shapes "
                         f"{list(x.shape)} and {list(y.shape)}")
    cols = x.size // x.shape[0]
    if y.shape[0] == 0 or y.size // y.shape[0] != cols:
        raise ValueError(f"squared_l2_distance: X {list(x.shape)} and Y {list(y.shape)} must "
                         f"have the same number of elements per row")
    if y.shape[0] not in (1, x.shape[0]):
        raise ValueError(f"squared_l2_distance: Y must have 1 row or as many rows as X "
                         f"({x.shape[0]}), got {y.shape[0]}")
    return x.reshape(x.shape[0], cols), y.reshape(y.shape[0], cols)


@register("squared_l2_distance", ("X", "Y"), ("sub_result", "Out"),
          grad=grad_maker(("X", "Y", "sub_result"), ("Out",), ("X", "Y")))
def squared_l2_distance(ins: dict, attrs: dict, outs: tuple) -> dict:
    """sub_result = X - Y (rows; a one-row Y broadcast), Out[i] = sum_j sub_result[i, j]²,
    shape [rows, 1]."""
    xm, ym = _l2_distance_rows(ins["X"][0], ins["Y"][0])
    sub = (xm - ym).astype(xm.dtype)
    return {"sub_result": [sub], "Out": [(sub * sub).sum(axis=1, keepdims=True)]}


@register("squared_l2_distance_grad",
          *grad_slots(("X", "Y", "sub_result"), ("Out",), ("X", "Y")))
def squared_l2_distance_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = 2·dOut·sub_result; dY = -dX, summed over the rows for a one-row Y."""
    x, y, sub = ins["X"][0], ins["Y"][0], ins["sub_result"][0]
    d = ins["Out" + GRAD][0]
    xp = array_module(x)
    g = xp.zeros_like(sub) if d is None else 2 * d.reshape(-1, 1) * sub
    res = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [g.reshape(x.shape).astype(x.dtype)]
    if "Y" + GRAD in outs:
        gy = -g if y.shape[0] == sub.shape[0] else -g.sum(axis=0, keepdims=True)
        res["Y" + GRAD] = [gy.reshape(y.shape).astype(y.dtype)]
    return res
