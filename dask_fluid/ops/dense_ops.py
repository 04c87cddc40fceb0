"""Dense-network kernels of Fluid 1.8 beyond the basics: ``matmul`` and the activations with
attributes (``leaky_relu``, ``relu6``, ``elu``, ``softplus``, ``softsign``, ``hard_sigmoid``,
``swish``, ``gelu``, ``pow``).

``matmul`` follows Paddle 1.8's matmul_op: ``Out = alpha · op(X) @ op(Y)`` where ``op``
transposes the last two dims when ``transpose_X`` / ``transpose_Y``. The dims before the
last two do not broadcast as numpy's: Fluid folds them into one batch whose size is their
product (blas.cc's CreateMatrixDescriptor; 0, no batch, for a 1-D or 2-D operand), and the two
batch sizes must be equal or one of them 0 (MatMulOp::InferShape at run time). So X
``[2, 3, M, K]`` and Y ``[6, K, N]`` pair their six matrices in order, while X ``[1, M, K]``
and Y ``[4, K, N]`` are refused; Out has X's leading dims when X is batched, else Y's. A
2-D operand against a batched one is used by every matrix of the batch (its gradient sums
over the batch). A 1-D operand becomes a matrix *before* the transpose, as Fluid's
RowMatrixFromVector / ColumnMatrixFromVector do: ``X [K]`` is the row ``[1, K]`` (so
``op(X)`` is the column ``[K, 1]`` when transposed) and ``Y [K]`` the column ``[K, 1]``
(the row ``[1, K]`` when transposed). Out then loses X's row dim only where X is 1-D and
that dim is 1, and Y's column dim only where Y is 1-D and that dim is 1 (MatMulOp's
InferShape), so two vectors give ``[1]`` and ``[M]ᵀ @ [1, N]`` gives ``[M, N]``.

``head_number`` > 1 is Fluid's multi-head matmul (Blas::MatMulWithHead, the MKLML CPU
kernel): ``op(X)``'s columns split into ``head_number`` heads; when ``op(Y)``'s height
equals ``op(X)``'s width its rows split the same way and the heads' products are laid side by
side (Out ``[.., M, head_number · N]``), otherwise (``op(Y)``'s height is a head's width) its
columns split and Out is ``[.., M, N]``. Fluid 1.8's matmul_grad ignores the heads (it
multiplies the un-split matrices), so there is no gradient for ``head_number`` > 1.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .math_ops import double_grad_maker
from .registry import GRAD, array_module, register, set_grad, to_host
from .selected_rows import grad_maker, grad_slots

__all__ = ["matmul_out_shape", "matmul_shape"]

_MATMUL_ATTRS = {"transpose_X": False, "transpose_Y": False, "alpha": 1.0, "head_number": 1}


def _as_matrices(x_shape: tuple, y_shape: tuple) -> tuple[tuple, tuple]:
    """X's and Y's shapes as (batched) matrices before any transpose: a 1-D X is the row
    ``[1, K]``, a 1-D Y the column ``[K, 1]`` (matmul_op.cc's Row/ColumnMatrixFromVector)."""
    if len(x_shape) == 1:
        x_shape = (1, x_shape[0])
    if len(y_shape) == 1:
        y_shape = (y_shape[0], 1)
    return x_shape, y_shape


def _batch_size(dims: tuple) -> int | None:
    """The one batch Fluid folds the leading dims ``dims`` into: their product (blas.cc's
    CreateMatrixDescriptor), None where one of them is unknown (-1) at build time."""
    if any(d < 0 for d in dims):
        return None
    return math.prod(dims)


def _check_batches(x_shape: tuple, y_shape: tuple, bx: tuple, by: tuple) -> None:
    """MatMulOp::InferShape's check: X's and Y's batch sizes equal, or one operand without
    batch dims (``bx`` / ``by`` empty). A size not known yet (-1) passes: the run checks it.

    Raises
    ------
    ValueError
        Both operands are batched and their batch sizes differ.
    """
    if not bx or not by:
        return
    p, q = _batch_size(bx), _batch_size(by)
    if p is not None and q is not None and p != q:
        raise ValueError(
            f"matmul: X {list(x_shape)} and Y {list(y_shape)} have batch sizes {p} and {q}. "
            f"Fluid 1.8's matmul folds the dims before the last two into one batch (their "
            f"product) and needs the two batch sizes equal, or one operand 1-D or 2-D; it does "
            f"not broadcast batch dims as numpy does (reshape or expand an operand to match)")


def _drop_vector_dims(out: list, x_ndim: int, y_ndim: int) -> list:
    """MatMulOp::InferShape's last step: drop Out's row dim where X is 1-D and it is 1, then
    its column dim where Y is 1-D and it is 1; ``[1]`` when nothing is left."""
    if x_ndim == 1 and out[-2] == 1:
        del out[-2]
    if y_ndim == 1 and out[-1] == 1:
        del out[-1]
    return out or [1]


def matmul_out_shape(x_shape: tuple, y_shape: tuple, transpose_x: bool = False,
                     transpose_y: bool = False, head_number: int = 1) -> list[int]:
    """The shape of ``matmul``'s Out as Fluid 1.8's MatMulOp::InferShape gives it.

    Parameters
    ----------
    x_shape, y_shape : tuple
        X's and Y's shapes; ``-1`` marks a dim unknown at build time.
    transpose_x, transpose_y : bool
        The op's ``transpose_X`` / ``transpose_Y``.
    head_number : int
        The op's ``head_number`` (multi-head matmul when > 1).

    Returns
    -------
    list of int
        Out's shape (``-1`` where unknown).

    Raises
    ------
    ValueError
        When the inner dims differ (with one head) or both operands are batched and their
        batch sizes (the products of their leading dims), where known, differ.
    """
    xs, ys = _as_matrices(tuple(x_shape), tuple(y_shape))
    m, kx = (xs[-1], xs[-2]) if transpose_x else (xs[-2], xs[-1])
    ky, n = (ys[-1], ys[-2]) if transpose_y else (ys[-2], ys[-1])
    # InferShape fills an unknown inner dim from the other operand's
    if kx == -1:
        kx = ky
    if ky == -1:
        ky = kx
    if head_number > 1:
        # MatMulWithHead: Y's rows split with X's columns when the inner dims agree (the
        # heads' outputs side by side), else Y's columns split (Out keeps Y's width)
        if kx == ky and n >= 0:
            n = head_number * n
    elif kx != ky:
        raise ValueError(f"matmul: X {list(x_shape)} (transpose_X={transpose_x}) and Y "
                         f"{list(y_shape)} (transpose_Y={transpose_y}) do not agree on the "
                         f"inner dimension ({kx} vs {ky})")
    bx, by = xs[:-2], ys[:-2]
    # Fluid checks the batch sizes only at run time; where both are known the answer is
    # already certain, so the program is refused when it is built
    _check_batches(tuple(x_shape), tuple(y_shape), bx, by)
    # Out keeps X's leading dims when X is batched, else Y's (InferShape's dim_out)
    return _drop_vector_dims([*(bx or by), m, n], len(x_shape), len(y_shape))


def matmul_shape(x_shape: tuple, y_shape: tuple, tx: bool, ty: bool) -> list[int]:
    """The output shape of ``matmul`` with one head (see :func:`matmul_out_shape`)."""
    return matmul_out_shape(x_shape, y_shape, tx, ty)


def _mt(a: Any) -> Any:
    return a.swapaxes(-1, -2)


def _folded(v: Any, shape: tuple) -> Any:
    """``v`` (of matrix form ``shape``) as Fluid's kernel reads it: ``[batch size, H, W]``
    when batched, else ``[H, W]``."""
    return v.reshape(((math.prod(shape[:-2]),) if len(shape) > 2 else ()) + shape[-2:])


def _prepared(ins: dict, attrs: dict) -> tuple[Any, Any, Any, Any, tuple]:
    """X, Y, op(X) and op(Y) with their batch dims folded into one, and Out's batch dims.

    Raises
    ------
    ValueError
        Both operands are batched and their batch sizes differ.
    """
    x, y = ins["X"][0], ins["Y"][0]
    tx, ty = bool(attrs.get("transpose_X")), bool(attrs.get("transpose_Y"))
    xs, ys = _as_matrices(x.shape, y.shape)
    _check_batches(x.shape, y.shape, xs[:-2], ys[:-2])
    # folding, not broadcasting, is how Fluid pairs batches of the same size but different
    # shapes ([2, 3, M, K] with [6, K, N]): matrix i of X with matrix i of Y in memory order
    xm, ym = _folded(x, xs), _folded(y, ys)
    return x, y, (_mt(xm) if tx else xm), (_mt(ym) if ty else ym), xs[:-2] or ys[:-2]


def _matmul_with_head(xp: Any, a: Any, b: Any, heads: int) -> Any:
    """Blas::MatMulWithHead on op(X) ``a`` [.., M, W1] and op(Y) ``b`` [.., H2, W2]."""
    w1 = a.shape[-1]
    h2, w2 = b.shape[-2:]
    if w1 % heads:
        raise ValueError(f"matmul: head_number {heads} does not divide X's width {w1}")
    sub = w1 // heads
    # a's heads: [.., M, H, sub] -> [.., H, M, sub]
    ah = xp.moveaxis(a.reshape(a.shape[:-1] + (heads, sub)), -2, -3)
    if w1 == h2:
        # Y's rows split with X's columns; Out [.., M, H · W2]
        bh = b.reshape(b.shape[:-2] + (heads, sub, w2))
    else:
        if h2 != sub or w2 % heads:
            raise ValueError(f"matmul: with head_number {heads}, Y's height {h2} must be "
                             f"X's width / head_number ({sub}) and its width {w2} a multiple "
                             f"of head_number")
        # Y's columns split; Out [.., M, W2]
        bh = xp.moveaxis(b.reshape(b.shape[:-1] + (heads, w2 // heads)), -2, -3)
    out = xp.matmul(ah, bh)  # [.., H, M, n]
    out = xp.moveaxis(out, -3, -2)  # [.., M, H, n]
    return out.reshape(out.shape[:-2] + (-1,))


@register("matmul", ("X", "Y"), ("Out",), _MATMUL_ATTRS,
          grad=grad_maker(("X", "Y"), in_grads=("X", "Y")))
def matmul(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = alpha · op(X) @ op(Y) (see the module docstring)."""
    x, y, a, b, batch = _prepared(ins, attrs)
    xp = array_module(x, y)
    heads = int(attrs.get("head_number", 1) or 1)
    out = xp.matmul(a, b) if heads <= 1 else _matmul_with_head(xp, a, b, heads)
    alpha = attrs.get("alpha", 1.0)
    if alpha != 1.0:
        out = out * out.dtype.type(alpha)
    out = out.reshape(_drop_vector_dims([*batch, *out.shape[-2:]], x.ndim, y.ndim))
    return {"Out": [out]}


@register("matmul_grad", *grad_slots(("X", "Y"), ("Out",), ("X", "Y")), _MATMUL_ATTRS)
def matmul_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dop(X) = alpha · dOut @ op(Y)ᵀ, dop(Y) = alpha · op(X)ᵀ @ dOut on the folded batch,
    undone through the transposes and the 1-D promotions; the gradient of an operand without
    batch dims against a batched one sums over the batch (MatMulGradKernel's FoldInitDims)."""
    if int(attrs.get("head_number", 1) or 1) > 1:
        # matmul_op.cc's MatMulGradKernel multiplies the un-split matrices whatever the heads
        # (its result does not even have X's / Y's size), so Fluid 1.8 has no such gradient
        raise NotImplementedError("matmul_grad: Fluid 1.8 has no gradient for head_number > 1")
    x, y, a, b, _ = _prepared(ins, attrs)
    xp = array_module(x, y)
    tx, ty = bool(attrs.get("transpose_X")), bool(attrs.get("transpose_Y"))
    # the folded output shape, before Out's batch dims and vector dims are restored
    full = (a.shape[:-2] or b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    d = ins["Out" + GRAD][0]
    d = xp.zeros(full, dtype=x.dtype) if d is None else d.reshape(full)
    alpha = attrs.get("alpha", 1.0)
    if alpha != 1.0:
        d = d * d.dtype.type(alpha)
    res = {}
    if "X" + GRAD in outs:
        da = xp.matmul(d, _mt(b))
        if da.ndim > a.ndim:  # X served every matrix of Y's batch
            da = da.sum(axis=0)
        da = _mt(da) if tx else da
        res["X" + GRAD] = [da.reshape(x.shape)]
    if "Y" + GRAD in outs:
        db = xp.matmul(_mt(a), d)
        if db.ndim > b.ndim:  # Y served every matrix of X's batch
            db = db.sum(axis=0)
        db = _mt(db) if ty else db
        res["Y" + GRAD] = [db.reshape(y.shape)]
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


# pow: an activation whose factor may come from a tensor (activation_op.h's
# ActivationKernel/ActivationGradKernel read FactorTensor for it)


def _pow_factor(ins: dict, attrs: dict, x: Any) -> Any:
    """The exponent in ``x``'s dtype: ``FactorTensor``'s one float when bound (it wins over
    the attr, as Fluid), else attr ``factor``; either is a C float in Fluid.

    Raises
    ------
    ValueError
        ``FactorTensor`` does not hold exactly one value.
    """
    t = (ins.get("FactorTensor") or [None])[0]
    if t is None:
        return x.dtype.type(np.float32(attrs.get("factor", 1.0)))
    v = to_host(t).reshape(-1)
    if v.size != 1:
        raise ValueError(f"pow: the shape of factor(tensor) must be [1] rather than {v.size}")
    return x.dtype.type(np.float32(v[0]))


@register("pow", ("X", "FactorTensor"), ("Out",), {"factor": 1.0},
          optional=("FactorTensor",),
          grad=grad_maker(("X", "FactorTensor"), in_grads=("X",)))
def pow_(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X ** factor, ``factor`` the attr or ``FactorTensor`` (Paddle 1.8's pow)."""
    x = ins["X"][0]
    return {"Out": [x ** _pow_factor(ins, attrs, x)]}


@register("pow_grad", *grad_slots(("X", "FactorTensor"), ("Out",), ("X",)), {"factor": 1.0},
          optional=("FactorTensor",))
def pow_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """X@GRAD = Out@GRAD · factor · X ** (factor − 1); FactorTensor gets no gradient, as in
    Fluid (its grad op maker writes only X@GRAD)."""
    if "X" + GRAD not in outs:
        return {}
    x = ins["X"][0]
    xp = array_module(x)
    d = ins["Out" + GRAD][0]
    d = xp.zeros_like(x) if d is None else d
    f = _pow_factor(ins, attrs, x)
    return {"X" + GRAD: [(d * f * x ** (f - 1)).astype(x.dtype, copy=False)]}


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
