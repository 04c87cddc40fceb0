"""Dense-network kernels of Fluid 1.8 beyond the basics: ``matmul`` and the activations with
attributes (``leaky_relu``, ``relu6``, ``elu``, ``softplus``, ``softsign``, ``hard_sigmoid``,
``swish``, ``gelu``, ``pow``).

``matmul`` follows Paddle 1.8's matmul_op: ``Out = alpha · op(X) @ op(Y)`` where ``op``
transposes the last two dims when ``transpose_X`` / ``transpose_Y``; leading (batch) dims
broadcast as numpy's; a 1-D ``X`` is a row ``[1, K]`` (a column when transposed) and a 1-D
``Y`` a column ``[K, 1]`` (a row when transposed), and those added dims are dropped from the
output, so two vectors give ``[1]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .math_ops import _unbroadcast, double_grad_maker
from .registry import GRAD, array_module, register, set_grad
from .selected_rows import grad_maker, grad_slots

__all__ = ["matmul_shape"]

_MATMUL_ATTRS = {"transpose_X": False, "transpose_Y": False, "alpha": 1.0}


def _as_matrices(x_shape: tuple, y_shape: tuple, tx: bool, ty: bool
                 ) -> tuple[tuple, tuple, list[int]]:
    """X's and Y's shapes as (batched) matrices, and the output dims to drop afterwards."""
    drop = []
    if len(x_shape) == 1:
        x_shape = (x_shape[0], 1) if tx else (1, x_shape[0])
        drop.append(-2)
    if len(y_shape) == 1:
        y_shape = (1, y_shape[0]) if ty else (y_shape[0], 1)
        drop.append(-1)
    return x_shape, y_shape, drop


def matmul_shape(x_shape: tuple, y_shape: tuple, tx: bool, ty: bool) -> list[int]:
    """The output shape of ``matmul`` (``-1`` dims pass through); ValueError on a mismatch."""
    xs, ys, drop = _as_matrices(tuple(x_shape), tuple(y_shape), tx, ty)
    m, kx = (xs[-1], xs[-2]) if tx else (xs[-2], xs[-1])
    ky, n = (ys[-1], ys[-2]) if ty else (ys[-2], ys[-1])
    if kx >= 0 and ky >= 0 and kx != ky:
        raise ValueError(f"matmul: X {list(x_shape)} (transpose_X={tx}) and Y "
                         f"{list(y_shape)} (transpose_Y={ty}) do not agree on the inner "
                         f"dimension ({kx} vs {ky})")
    bx, by = xs[:-2], ys[:-2]
    batch = []
    for i in range(max(len(bx), len(by))):
        a = bx[len(bx) - 1 - i] if i < len(bx) else 1
        b = by[len(by) - 1 - i] if i < len(by) else 1
        if a != b and 1 not in (a, b) and -1 not in (a, b):
            raise ValueError(f"matmul: the batch dims of X {list(x_shape)} and Y "
                             f"{list(y_shape)} do not broadcast")
        batch.insert(0, b if a == 1 else a)
    out = [*batch, m, n]
    for axis in sorted(drop):
        del out[axis]
    return out or [1]


def _mt(a: Any) -> Any:
    return a.swapaxes(-1, -2)


def _prepared(ins: dict, attrs: dict) -> tuple[Any, Any, Any, Any, list[int]]:
    x, y = ins["X"][0], ins["Y"][0]
    tx, ty = bool(attrs.get("transpose_X")), bool(attrs.get("transpose_Y"))
    xs, ys, drop = _as_matrices(x.shape, y.shape, tx, ty)
    xm, ym = x.reshape(xs), y.reshape(ys)
    return x, y, (_mt(xm) if tx else xm), (_mt(ym) if ty else ym), drop


@register("matmul", ("X", "Y"), ("Out",), _MATMUL_ATTRS,
          grad=grad_maker(("X", "Y"), in_grads=("X", "Y")))
def matmul(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = alpha · op(X) @ op(Y) (see the module docstring)."""
    x, y, a, b, drop = _prepared(ins, attrs)
    xp = array_module(x, y)
    out = xp.matmul(a, b)
    alpha = attrs.get("alpha", 1.0)
    if alpha != 1.0:
        out = out * out.dtype.type(alpha)
    shape = matmul_shape(x.shape, y.shape, bool(attrs.get("transpose_X")),
                         bool(attrs.get("transpose_Y")))
    return {"Out": [out.reshape(shape)]}


@register("matmul_grad", *grad_slots(("X", "Y"), ("Out",), ("X", "Y")), _MATMUL_ATTRS)
def matmul_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dop(X) = alpha · dOut @ op(Y)ᵀ, dop(Y) = alpha · op(X)ᵀ @ dOut, undone through the
    transposes, the 1-D promotions and the batch broadcasting."""
    x, y, a, b, _ = _prepared(ins, attrs)
    xp = array_module(x, y)
    tx, ty = bool(attrs.get("transpose_X")), bool(attrs.get("transpose_Y"))
    full = xp.matmul(a, b).shape  # the un-dropped output shape
    d = ins["Out" + GRAD][0]
    d = xp.zeros(full, dtype=x.dtype) if d is None else d.reshape(full)
    alpha = attrs.get("alpha", 1.0)
    if alpha != 1.0:
        d = d * d.dtype.type(alpha)
    res = {}
    if "X" + GRAD in outs:
        da = xp.matmul(d, _mt(b))
        da = _mt(da) if tx else da
        xs = _as_matrices(x.shape, y.shape, tx, ty)[0]
        res["X" + GRAD] = [_unbroadcast(da, xs).reshape(x.shape)]
    if "Y" + GRAD in outs:
        db = xp.matmul(_mt(a), d)
        db = _mt(db) if ty else db
        ys = _as_matrices(x.shape, y.shape, tx, ty)[1]
        res["Y" + GRAD] = [_unbroadcast(db, ys).reshape(y.shape)]
    return res


# ---------------------------------------------------------------------------------------------
# activations with attributes (Paddle 1.8's activation_op.h); the grad op reads X, or Out
# where Paddle's does (relu6, hard_sigmoid)


def _erf(xp: Any, x: Any) -> Any:
    if xp.__name__ == "cupy":
        from cupyx.scipy.special import erf  # noqa: PLC0415
    else:
        from scipy.special import erf  # noqa: PLC0415
    return erf(x)


def _sig(xp: Any, x: Any) -> Any:
    half = x.dtype.type(0.5)
    return half * xp.tanh(half * x) + half


def _gelu(xp: Any, x: Any, a: dict) -> Any:
    if a.get("approximate"):
        c = x.dtype.type(np.sqrt(2.0 / np.pi))
        return 0.5 * x * (1 + xp.tanh(c * (x + x.dtype.type(0.044715) * x ** 3)))
    return 0.5 * x * (1 + _erf(xp, x / x.dtype.type(np.sqrt(2.0))))


def _gelu_grad(xp: Any, x: Any, out: Any, d: Any, a: dict) -> Any:
    if a.get("approximate"):
        c = x.dtype.type(np.sqrt(2.0 / np.pi))
        k = x.dtype.type(0.044715)
        t = xp.tanh(c * (x + k * x ** 3))
        return d * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x))
    cdf = 0.5 * (1 + _erf(xp, x / x.dtype.type(np.sqrt(2.0))))
    pdf = xp.exp(-0.5 * x * x) / x.dtype.type(np.sqrt(2.0 * np.pi))
    return d * (cdf + x * pdf)


def _f(x: Any, a: dict, name: str) -> Any:
    return x.dtype.type(a[name])


#: type -> (attrs, grad reads, forward(xp, x, attrs), backward(xp, x, out, dout, attrs))
_ACTIVATIONS: dict[str, tuple] = {
    "leaky_relu": ({"alpha": 0.02}, "X",
                   lambda xp, x, a: xp.where(x > 0, x, _f(x, a, "alpha") * x),
                   lambda xp, x, o, d, a: d * xp.where(x > 0, x.dtype.type(1),
                                                       _f(x, a, "alpha"))),
    "relu6": ({"threshold": 6.0}, "Out",
              lambda xp, x, a: xp.clip(x, x.dtype.type(0), _f(x, a, "threshold")),
              lambda xp, x, o, d, a: d * ((o > 0) & (o < _f(o, a, "threshold")))),
    "elu": ({"alpha": 1.0}, "X",
            lambda xp, x, a: xp.where(x > 0, x, _f(x, a, "alpha") * (xp.exp(xp.minimum(x, 0))
                                                                     - 1)),
            lambda xp, x, o, d, a: d * xp.where(x > 0, x.dtype.type(1),
                                                _f(x, a, "alpha") * xp.exp(xp.minimum(x, 0)))),
    "softplus": ({}, "X", lambda xp, x, a: xp.logaddexp(x.dtype.type(0), x),
                 lambda xp, x, o, d, a: d * _sig(xp, x)),
    "softsign": ({}, "X", lambda xp, x, a: x / (1 + xp.abs(x)),
                 lambda xp, x, o, d, a: d / (1 + xp.abs(x)) ** 2),
    "hard_sigmoid": ({"slope": 0.2, "offset": 0.5}, "Out",
                     lambda xp, x, a: xp.clip(_f(x, a, "slope") * x + _f(x, a, "offset"),
                                              x.dtype.type(0), x.dtype.type(1)),
                     lambda xp, x, o, d, a: d * _f(o, a, "slope") * ((o > 0) & (o < 1))),
    "swish": ({"beta": 1.0}, "X",
              lambda xp, x, a: x * _sig(xp, _f(x, a, "beta") * x),
              lambda xp, x, o, d, a: d * (_sig(xp, _f(x, a, "beta") * x) * (
                  1 + _f(x, a, "beta") * x * (1 - _sig(xp, _f(x, a, "beta") * x))))),
    "gelu": ({"approximate": False}, "X", _gelu, _gelu_grad),
    "selu": ({"scale": 1.0507009873554805, "alpha": 1.6732632423543772}, "X",
             lambda xp, x, a: _f(x, a, "scale") * xp.where(
                 x > 0, x, _f(x, a, "alpha") * (xp.exp(xp.minimum(x, 0)) - 1)),
             lambda xp, x, o, d, a: d * _f(x, a, "scale") * xp.where(
                 x > 0, x.dtype.type(1), _f(x, a, "alpha") * xp.exp(xp.minimum(x, 0)))),
    "hard_swish": ({"threshold": 6.0, "scale": 6.0, "offset": 3.0}, "X",
                   lambda xp, x, a: x * xp.clip(x + _f(x, a, "offset"), x.dtype.type(0),
                                                _f(x, a, "threshold")) / _f(x, a, "scale"),
                   # Fluid 1.8's gradient: 1 where saturated (exact when threshold == scale)
                   lambda xp, x, o, d, a: d * xp.where(
                       x + _f(x, a, "offset") <= 0, x.dtype.type(0),
                       xp.where(x + _f(x, a, "offset") >= _f(x, a, "threshold"),
                                x.dtype.type(1),
                                (2 * x + _f(x, a, "offset")) / _f(x, a, "scale")))),
    "brelu": ({"t_min": 0.0, "t_max": 24.0}, "X",
              lambda xp, x, a: xp.clip(x, _f(x, a, "t_min"), _f(x, a, "t_max")),
              lambda xp, x, o, d, a: d * ((x > _f(x, a, "t_min")) & (x < _f(x, a, "t_max")))),
    "soft_relu": ({"threshold": 40.0}, "Out",
                  lambda xp, x, a: xp.log1p(xp.exp(xp.clip(x, -_f(x, a, "threshold"),
                                                           _f(x, a, "threshold")))),
                  lambda xp, x, o, d, a: d * (1 - xp.exp(-o)) * (
                      (x > -_f(x, a, "threshold")) & (x < _f(x, a, "threshold")))),
    "stanh": ({"scale_a": 0.67, "scale_b": 1.7159}, "X",
              lambda xp, x, a: _f(x, a, "scale_b") * xp.tanh(_f(x, a, "scale_a") * x),
              lambda xp, x, o, d, a: d * _f(x, a, "scale_a") * _f(x, a, "scale_b") * (
                  1 - xp.tanh(_f(x, a, "scale_a") * x) ** 2)),
    "pow": ({"factor": 1.0}, "X", lambda xp, x, a: x ** _f(x, a, "factor"),
            lambda xp, x, o, d, a: d * _f(x, a, "factor") * x ** (_f(x, a, "factor") - 1)),
}


def _register_activation(type: str, attrs: dict, reads: str, forward: Any,
                         backward: Any) -> None:
    fwd_slots = ("X", "Out") if reads == "Out" else ("X",)

    def kernel(ins: dict, a: dict, outs: tuple) -> dict:
        x = ins["X"][0]
        return {"Out": [forward(array_module(x), x, {**attrs, **a})]}

    def grad(ins: dict, a: dict, outs: tuple) -> dict:
        if "X" + GRAD not in outs:
            return {}
        x = ins["X"][0]
        xp = array_module(x)
        out = ins["Out"][0] if reads == "Out" else None
        d = ins["Out" + GRAD][0]
        d = xp.zeros_like(x) if d is None else d
        return {"X" + GRAD: [backward(xp, x, out, d, {**attrs, **a}).astype(x.dtype,
                                                                          copy=False)]}

    kernel.__doc__ = f"Out = {type}(X) (Paddle 1.8's activation_op)."
    grad.__doc__ = f"Gradient of {type}."
    register(type, ("X",), ("Out",), attrs,
             grad=grad_maker(fwd_slots, in_grads=("X",)))(kernel)
    register(type + "_grad", *grad_slots(fwd_slots, ("Out",), ("X",)), attrs)(grad)


for _name, _spec in _ACTIVATIONS.items():
    _register_activation(_name, *_spec)


# double grads (activation_op.cc: LeakyReluDoubleGradMaker, ELUDoubleGradMaker)

set_grad("leaky_relu_grad", double_grad_maker(
    "leaky_relu_grad_grad", {"X": "X"}, {"DDX": "X" + GRAD}, {"DDOut": "Out" + GRAD}))


@register("leaky_relu_grad_grad", ("X", "DDX"), ("DDOut",), _ACTIVATIONS["leaky_relu"][0],
          optional=("DDX",))
def leaky_relu_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """DDOut = DDX where X > 0, alpha·DDX elsewhere (X's gradient is 0)."""
    x = ins["X"][0]
    xp = array_module(x)
    ddx = ins["DDX"][0] if ins.get("DDX") else None
    ddx = xp.zeros_like(x) if ddx is None else ddx
    return {"DDOut": [ddx * xp.where(x > 0, x.dtype.type(1), _f(x, attrs, "alpha"))]}


set_grad("elu_grad", double_grad_maker(
    "elu_grad_grad", {"X": "X", "DOut": "Out" + GRAD}, {"DDX": "X" + GRAD},
    {"DX": "X", "DDOut": "Out" + GRAD}))


@register("elu_grad_grad", ("X", "DOut", "DDX"), ("DX", "DDOut"), _ACTIVATIONS["elu"][0],
          optional=("DOut", "DDX"))
def elu_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """elu_grad: dX = dOut · (1 if X > 0 else alpha·eˣ). DDOut = DDX · that factor,
    DX = DDX · dOut · alpha·eˣ where X ≤ 0 (Fluid's ELUGradGradFunctor)."""
    x = ins["X"][0]
    xp = array_module(x)
    ddx = ins["DDX"][0] if ins.get("DDX") else None
    ddx = xp.zeros_like(x) if ddx is None else ddx
    curve = _f(x, attrs, "alpha") * xp.exp(xp.minimum(x, 0))
    res = {}
    if "DDOut" in outs:
        res["DDOut"] = [ddx * xp.where(x > 0, x.dtype.type(1), curve)]
    if "DX" in outs:
        dout = ins["DOut"][0] if ins.get("DOut") else None
        dout = xp.zeros_like(x) if dout is None else dout
        res["DX"] = [ddx * dout * xp.where(x > 0, x.dtype.type(0), curve)]
    return res
