"""Normalisation kernels: ``batch_norm`` (Paddle 1.8's batch_norm_op.cc) and ``layer_norm``,
with their gradients.

Training (``is_test`` and ``use_global_stats`` off) normalises with the batch's statistics over
every axis but the channel axis (axis 1 for NCHW, the last for NHWC): ``SavedMean`` is the
batch mean and ``SavedVariance`` the inverse standard deviation ``1 / sqrt(var + epsilon)``
(the biased variance, as Paddle's CPU kernel stores it), and the moving statistics become
``moving * momentum + batch * (1 - momentum)``. At test time (or with ``use_global_stats``) the
moving mean and variance normalise and stay as they are.
"""

from __future__ import annotations

from typing import Any

from . import image_channel_ops  # noqa: F401  (instance_norm_grad, given a grad maker below)
from .math_ops import double_grad_maker
from .registry import GRAD, array_module, register, set_grad, to_host
from .selected_rows import grad_maker, grad_slots

BN_ATTRS = {"momentum": 0.9, "epsilon": 1e-5, "is_test": False, "data_layout": "NCHW",
             "use_mkldnn": False, "fuse_with_relu": False, "use_global_stats": False,
             "trainable_statistics": False}


def _layout(x: Any, attrs: dict) -> tuple[int, tuple[int, ...]]:
    """(channel axis, the broadcast shape of a per-channel vector)."""
    layout = attrs.get("data_layout", "NCHW")
    if layout not in ("NCHW", "NHWC", "AnyLayout"):
        raise ValueError(f"batch_norm: data_layout must be 'NCHW' or 'NHWC', got {layout!r}")
    if x.ndim < 2:
        raise ValueError(f"batch_norm needs an input of rank >= 2, got shape {list(x.shape)}")
    axis = x.ndim - 1 if layout == "NHWC" else 1
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return axis, tuple(shape)


def _uses_global_stats(attrs: dict) -> bool:
    return bool(attrs.get("is_test")) or bool(attrs.get("use_global_stats"))


BN_GRAD_IN, BN_GRAD_OUT = grad_slots(
    ("X", "Scale", "Bias", "Mean", "Variance", "SavedMean", "SavedVariance"), ("Y",),
    ("X", "Scale", "Bias"))


def bn_grad_maker(op: Any) -> list[dict]:
    inputs = {slot: list(op.inputs[slot]) for slot in ("X", "Scale", "Bias", "Mean",
                                                       "Variance") if op.inputs.get(slot)}
    for slot in ("SavedMean", "SavedVariance"):
        inputs[slot] = list(op.outputs[slot])
    inputs["Y" + GRAD] = [n + GRAD for n in op.outputs["Y"]]
    outputs = {slot + GRAD: [n + GRAD for n in op.inputs[slot]]
               for slot in ("X", "Scale", "Bias") if op.inputs.get(slot)}
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": "batch_norm_grad", "inputs": inputs, "outputs": outputs, "attrs": attrs}]


def _per_channel(xp: Any, axis: int, a: Any, b: Any = None) -> Any:
    """``Σ a`` (or ``Σ a·b``) over every axis but the channel axis ``axis``, as one
    contraction over a ``[N, C, S]`` (or ``[S, C]``) view: 3x faster than ``sum(axis=...)``
    over a 4-D map, and no ``a·b`` temporary."""
    shape = (a.shape[0], a.shape[1], -1) if axis == 1 else (-1, a.shape[-1])
    spec = "ncs" if axis == 1 else "sc"
    if b is None:
        return xp.einsum(f"{spec}->c", a.reshape(shape))
    return xp.einsum(f"{spec},{spec}->c", a.reshape(shape), b.reshape(shape))


@register("batch_norm", ("X", "Scale", "Bias", "Mean", "Variance", "MomentumTensor"),
          ("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"), BN_ATTRS,
          optional=("MomentumTensor",), grad=bn_grad_maker)
def batch_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y = (X − mean) / sqrt(var + ε) · Scale + Bias per channel (see the module docstring)."""
    x, scale, bias = ins["X"][0], ins["Scale"][0], ins["Bias"][0]
    mean, var = ins["Mean"][0], ins["Variance"][0]
    xp = array_module(x)
    axis, shape = _layout(x, attrs)
    eps = x.dtype.type(attrs.get("epsilon", 1e-5))
    if _uses_global_stats(attrs):
        inv_std = 1.0 / xp.sqrt(var + eps)
        y = (x - mean.reshape(shape)) * (inv_std * scale).reshape(shape) + bias.reshape(shape)
        return {"Y": [y.astype(x.dtype, copy=False)], "MeanOut": [mean], "VarianceOut": [var],
                "SavedMean": [mean], "SavedVariance": [inv_std.astype(x.dtype, copy=False)]}
    count = x.dtype.type(x.size // x.shape[axis])
    batch_mean = _per_channel(xp, axis, x) / count
    y = x - batch_mean.reshape(shape)  # centred, then scaled and shifted in place
    batch_var = _per_channel(xp, axis, y, y) / count
    inv_std = (1.0 / xp.sqrt(batch_var + eps)).astype(x.dtype, copy=False)
    y *= (inv_std * scale).reshape(shape).astype(y.dtype, copy=False)
    y += bias.reshape(shape).astype(y.dtype, copy=False)
    m = x.dtype.type(attrs.get("momentum", 0.9))
    if ins.get("MomentumTensor") and ins["MomentumTensor"][0] is not None:  # as Fluid's kernel
        m = x.dtype.type(to_host(ins["MomentumTensor"][0]).reshape(-1)[0])
    mean_out = (mean * m + batch_mean * (1 - m)).astype(mean.dtype, copy=False)
    var_out = (var * m + batch_var * (1 - m)).astype(var.dtype, copy=False)
    return {"Y": [y.astype(x.dtype, copy=False)], "MeanOut": [mean_out],
            "VarianceOut": [var_out], "SavedMean": [batch_mean.astype(x.dtype, copy=False)],
            "SavedVariance": [inv_std]}


@register("batch_norm_grad", BN_GRAD_IN, BN_GRAD_OUT, BN_ATTRS)
def batch_norm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dBias = Σ dY, dScale = Σ dY · x̂, dX = Scale · inv_std / m · (m·dY − dBias − x̂·dScale)
    in training; dX = dY · Scale · inv_std with the global statistics.

    With x̂ = (X − mean)·inv_std, dScale = inv_std·Σ dY·(X − mean) and dX is
    ``dY·a + (X − mean)·b + c`` for per-channel ``a, b, c``: one centred map, no x̂."""
    x, scale = ins["X"][0], ins["Scale"][0]
    xp = array_module(x)
    axis, shape = _layout(x, attrs)
    dy = ins["Y" + GRAD][0]
    if dy is None:
        dy = xp.zeros_like(x)
    if _uses_global_stats(attrs):
        eps = x.dtype.type(attrs.get("epsilon", 1e-5))
        mean = ins["Mean"][0]
        inv_std = (1.0 / xp.sqrt(ins["Variance"][0] + eps)).astype(x.dtype, copy=False)
    else:
        mean, inv_std = ins["SavedMean"][0], ins["SavedVariance"][0]
    # centred before the products (not Σ dY·X − mean·Σ dY): no cancellation when the
    # mean is large against the spread
    centred = x - mean.reshape(shape).astype(x.dtype, copy=False)
    dbias = _per_channel(xp, axis, dy)
    dscale = inv_std * _per_channel(xp, axis, dy, centred)
    res = {}
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [dbias]
    if "Scale" + GRAD in outs:
        res["Scale" + GRAD] = [dscale.astype(x.dtype, copy=False)]
    if "X" + GRAD in outs:
        a = scale * inv_std
        if _uses_global_stats(attrs):
            dx = dy * a.reshape(shape).astype(x.dtype, copy=False)
        else:
            m = x.dtype.type(x.size // x.shape[axis])
            dx = centred
            dx *= (-a * inv_std * dscale / m).reshape(shape).astype(x.dtype, copy=False)
            dx += dy * a.reshape(shape).astype(x.dtype, copy=False)
            dx += (-a * dbias / m).reshape(shape).astype(x.dtype, copy=False)
        res["X" + GRAD] = [dx.astype(x.dtype, copy=False)]
    return res


# ---------------------------------------------------------------------------------------------
# layer_norm (Paddle 1.8's layer_norm_op): X flattened to [left, right] at begin_norm_axis;
# Mean and Variance (biased, not inverted) are [left]; Scale and Bias are [right]

_LN_ATTRS = {"epsilon": 1e-5, "begin_norm_axis": 1}


def _ln_split(x: Any, attrs: dict) -> tuple[int, int]:
    axis = int(attrs.get("begin_norm_axis", 1))
    if not 0 < axis < x.ndim:
        raise ValueError(f"layer_norm: begin_norm_axis={axis} must be in [1, {x.ndim}) for an "
                         f"input of shape {list(x.shape)}")
    left = 1
    for d in x.shape[:axis]:
        left *= int(d)
    return left, x.size // left


def _ln_grad_maker(op: Any) -> list[dict]:
    inputs = {slot: list(op.inputs[slot]) for slot in ("X", "Scale", "Bias")
              if op.inputs.get(slot)}
    inputs.update({slot: list(op.outputs[slot]) for slot in ("Mean", "Variance")})
    inputs["Y" + GRAD] = [n + GRAD for n in op.outputs["Y"]]
    outputs = {slot + GRAD: [n + GRAD for n in op.inputs[slot]]
               for slot in ("X", "Scale", "Bias") if op.inputs.get(slot)}
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": "layer_norm_grad", "inputs": inputs, "outputs": outputs, "attrs": attrs}]


@register("layer_norm", ("X", "Scale", "Bias"), ("Y", "Mean", "Variance"), _LN_ATTRS,
          optional=("Scale", "Bias"), grad=_ln_grad_maker)
def layer_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y = (X − mean) / sqrt(var + ε) · Scale + Bias over the dims from begin_norm_axis."""
    x = ins["X"][0]
    xp = array_module(x)
    left, right = _ln_split(x, attrs)
    x2 = x.reshape(left, right)
    mean = x2.mean(axis=1)
    centred = x2 - mean[:, None]
    var = (centred * centred).mean(axis=1)
    eps = x.dtype.type(attrs.get("epsilon", 1e-5))
    y = centred / xp.sqrt(var + eps)[:, None]
    scale = (ins.get("Scale") or [None])[0]
    bias = (ins.get("Bias") or [None])[0]
    if scale is not None:
        y = y * scale.reshape(1, right)
    if bias is not None:
        y = y + bias.reshape(1, right)
    return {"Y": [y.reshape(x.shape).astype(x.dtype, copy=False)],
            "Mean": [mean.astype(x.dtype, copy=False)],
            "Variance": [var.astype(x.dtype, copy=False)]}


_LN_GRAD_IN, _LN_GRAD_OUT = grad_slots(("X", "Scale", "Bias", "Mean", "Variance"), ("Y",),
                                       ("X", "Scale", "Bias"))


@register("layer_norm_grad", _LN_GRAD_IN, _LN_GRAD_OUT, _LN_ATTRS, optional=("Scale", "Bias"))
def layer_norm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dBias = Σ_rows dY, dScale = Σ_rows dY · x̂; with g = dY · Scale,
    dX = inv_std · (g − mean(g) − x̂ · mean(g · x̂)) per row."""
    x = ins["X"][0]
    xp = array_module(x)
    left, right = _ln_split(x, attrs)
    dy = ins["Y" + GRAD][0]
    dy = xp.zeros((left, right), dtype=x.dtype) if dy is None else dy.reshape(left, right)
    eps = x.dtype.type(attrs.get("epsilon", 1e-5))
    inv_std = 1.0 / xp.sqrt(ins["Variance"][0] + eps)
    x_hat = (x.reshape(left, right) - ins["Mean"][0][:, None]) * inv_std[:, None]
    scale = (ins.get("Scale") or [None])[0]
    res = {}
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [dy.sum(axis=0)]
    if "Scale" + GRAD in outs:
        res["Scale" + GRAD] = [(dy * x_hat).sum(axis=0)]
    if "X" + GRAD in outs:
        g = dy * scale.reshape(1, right) if scale is not None else dy
        dx = inv_std[:, None] * (g - g.mean(axis=1, keepdims=True)
                                 - x_hat * (g * x_hat).mean(axis=1, keepdims=True))
        res["X" + GRAD] = [dx.reshape(x.shape).astype(x.dtype, copy=False)]
    return res


# -- group_norm ----------------------------------------------------------------------------------

_GN_ATTRS = {"epsilon": 1e-5, "groups": 1, "data_layout": "NCHW"}


def _gn_groups(x: Any, attrs: dict) -> tuple[int, int, int, bool]:
    """(batch, groups, channels, channels_last) of the input, checked."""
    layout = attrs.get("data_layout", "NCHW")
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"group_norm: data_layout must be 'NCHW' or 'NHWC', got {layout!r}")
    last = layout == "NHWC" and x.ndim > 2
    groups, c = int(attrs.get("groups", 1)), int(x.shape[-1] if last else x.shape[1])
    if groups < 1 or c % groups:
        raise ValueError(f"group_norm: groups ({groups}) must divide the {c} channels")
    return int(x.shape[0]), groups, c, last


def _channels_first(a: Any, last: bool) -> Any:
    return array_module(a).moveaxis(a, -1, 1) if last else a


def _channels_back(a: Any, last: bool) -> Any:
    return array_module(a).ascontiguousarray(array_module(a).moveaxis(a, 1, -1)) if last else a


@register("group_norm", ("X", "Scale", "Bias"), ("Y", "Mean", "Variance"), _GN_ATTRS,
          optional=("Scale", "Bias"),
          grad=grad_maker(("X", "Scale", "Bias", "Y", "Mean", "Variance"), ("Y",),
                          ("X", "Scale", "Bias")))
def group_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y = (X − mean) / sqrt(var + ε) over each sample's groups of channels (and all their
    positions), then · Scale + Bias per channel; Mean and Variance are ``[N, groups]``."""
    x0 = ins["X"][0]
    xp = array_module(x0)
    n, groups, c, last = _gn_groups(x0, attrs)
    x = _channels_first(x0, last)
    xg = x.reshape(n, groups, -1)
    mean = xg.mean(axis=2)
    centred = xg - mean[:, :, None]
    var = (centred * centred).mean(axis=2)
    eps = x.dtype.type(attrs.get("epsilon", 1e-5))
    y = (centred / xp.sqrt(var + eps)[:, :, None]).reshape(x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    scale = (ins.get("Scale") or [None])[0]
    bias = (ins.get("Bias") or [None])[0]
    if scale is not None:
        y = y * scale.reshape(bshape)
    if bias is not None:
        y = y + bias.reshape(bshape)
    return {"Y": [_channels_back(y, last).astype(x.dtype, copy=False)],
            "Mean": [mean.astype(x.dtype, copy=False)],
            "Variance": [var.astype(x.dtype, copy=False)]}


@register("group_norm_grad",
          *grad_slots(("X", "Scale", "Bias", "Y", "Mean", "Variance"), ("Y",),
                      ("X", "Scale", "Bias")), _GN_ATTRS, optional=("Scale", "Bias", "Y"))
def group_norm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dBias = Σ dY, dScale = Σ dY · x̂ per channel; with g = dY · Scale,
    dX = inv_std · (g − mean(g) − x̂ · mean(g · x̂)) over each group."""
    x0 = ins["X"][0]
    xp = array_module(x0)
    n, groups, c, last = _gn_groups(x0, attrs)
    x = _channels_first(x0, last)
    dy = ins["Y" + GRAD][0]
    dy = xp.zeros_like(x) if dy is None else _channels_first(dy, last)
    eps = x.dtype.type(attrs.get("epsilon", 1e-5))
    inv_std = 1.0 / xp.sqrt(ins["Variance"][0] + eps)
    x_hat = ((x.reshape(n, groups, -1) - ins["Mean"][0][:, :, None]) * inv_std[:, :, None]
             ).reshape(x.shape)
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, c) + (1,) * (x.ndim - 2)
    scale = (ins.get("Scale") or [None])[0]
    res = {}
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [dy.sum(axis=axes)]
    if "Scale" + GRAD in outs:
        res["Scale" + GRAD] = [(dy * x_hat).sum(axis=axes)]
    if "X" + GRAD in outs:
        g = (dy * scale.reshape(bshape) if scale is not None else dy).reshape(n, groups, -1)
        xh = x_hat.reshape(n, groups, -1)
        dx = inv_std[:, :, None] * (g - g.mean(axis=2, keepdims=True)
                                    - xh * (g * xh).mean(axis=2, keepdims=True))
        res["X" + GRAD] = [_channels_back(dx.reshape(x.shape), last).astype(x.dtype, copy=False)]
    return res


# -- spectral_norm (Paddle 1.8's spectral_norm_op.h) ---------------------------------------------
# Weight is viewed as the matrix W [h, w]: dim moved first, the rest flattened. U [h] and V [w]
# start the power iteration (v = Wᵀu / (‖Wᵀu‖ + eps), u = Wv / (‖Wv‖ + eps), power_iters
# times) on copies: 1.8 never writes the iterated U and V back (UOut/VOut came after 1.8), so
# every run starts from the same U and V. Out = Weight / σ with σ = uᵀWv.

_SN_ATTRS = {"dim": 0, "power_iters": 1, "eps": 1e-12}


def _sn_matrix(weight: Any, u: Any, v: Any, attrs: dict) -> tuple[Any, int]:
    """(W [h, w], dim) checked as Paddle's SpectralNormOp::InferShape."""
    dim = int(attrs.get("dim", 0))
    if not 2 <= weight.ndim <= 5:
        raise ValueError(f"spectral_norm: Weight must have rank 2 to 5, got shape "
                         f"{list(weight.shape)}")
    if dim not in (0, 1):
        raise ValueError(f"spectral_norm: dim can only be 0 or 1, got {dim}")
    if int(attrs.get("power_iters", 1)) < 0:
        raise ValueError(f"spectral_norm: power_iters must be >= 0, got "
                         f"{attrs.get('power_iters')}")
    xp = array_module(weight)
    mat = xp.moveaxis(weight, dim, 0).reshape(weight.shape[dim], -1)
    if u.size != mat.shape[0] or v.size != mat.shape[1]:
        raise ValueError(f"spectral_norm: U must have {mat.shape[0]} elements and V "
                         f"{mat.shape[1]} (Weight {list(weight.shape)} with dim={dim}), got "
                         f"{list(u.shape)} and {list(v.shape)}")
    return mat, dim


def _sn_sigma(mat: Any, u: Any, v: Any, attrs: dict) -> tuple[Any, Any, Any]:
    """(σ, u, v) after the power iterations, from copies of U and V."""
    xp = array_module(mat)
    eps = mat.dtype.type(attrs.get("eps", 1e-12))
    u = u.reshape(-1).astype(mat.dtype, copy=True)
    v = v.reshape(-1).astype(mat.dtype, copy=True)
    for _ in range(int(attrs.get("power_iters", 1))):
        v = mat.T @ u
        v = v / (xp.sqrt((v * v).sum()) + eps)
        u = mat @ v
        u = u / (xp.sqrt((u * u).sum()) + eps)
    return u @ (mat @ v), u, v


@register("spectral_norm", ("Weight", "U", "V"), ("Out",), _SN_ATTRS,
          grad=grad_maker(("Weight", "U", "V"), ("Out",), ("Weight",)))
def spectral_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = Weight / σ(W), σ = uᵀWv after ``power_iters`` power iterations from U and V."""
    weight, u, v = ins["Weight"][0], ins["U"][0], ins["V"][0]
    mat, _ = _sn_matrix(weight, u, v, attrs)
    sigma, _, _ = _sn_sigma(mat, u, v, attrs)
    return {"Out": [(weight / sigma).astype(weight.dtype, copy=False)]}


@register("spectral_norm_grad", *grad_slots(("Weight", "U", "V"), ("Out",), ("Weight",)),
          _SN_ATTRS)
def spectral_norm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dW = (dOut − (Σ dOut ⊙ Out) · u vᵀ) / σ: the gradient of W / (uᵀWv) with the iterated
    u and v held constant (Paddle's kernel reruns the iterations and treats them so).

    Paddle's kernel writes ``dOut ⊙ (1 − u vᵀ · Σ Out) / σ`` instead, which equals this only
    when dOut is uniform (the mean loss of its own unit test); this kernel keeps the exact
    derivative, which matches finite differences whenever u and v do not move with W
    (``power_iters`` = 0)."""
    weight, u, v = ins["Weight"][0], ins["U"][0], ins["V"][0]
    xp = array_module(weight)
    d = ins["Out" + GRAD][0]
    if "Weight" + GRAD not in outs:
        return {}
    if d is None:
        return {"Weight" + GRAD: [xp.zeros_like(weight)]}
    mat, dim = _sn_matrix(weight, u, v, attrs)
    sigma, uu, vv = _sn_sigma(mat, u, v, attrs)
    dmat = xp.moveaxis(d, dim, 0).reshape(mat.shape)
    proj = (dmat * mat).sum() / sigma
    gmat = (dmat - proj * xp.outer(uu, vv)) / sigma
    moved = [weight.shape[dim]] + [s for i, s in enumerate(weight.shape) if i != dim]
    grad = xp.moveaxis(gmat.reshape(moved), 0, dim)
    return {"Weight" + GRAD: [xp.ascontiguousarray(grad).astype(weight.dtype, copy=False)]}


# -- inplace_abn (Paddle 1.8's inplace_abn_op.cc/.h) ----------------------------------------------
# batch_norm then an activation (identity, leaky_relu or elu with ``alpha``), in place: the
# layer binds Y to X's variable. The grad op therefore reads Y, not X (1.8's
# InplaceABNOpGradMaker): it inverts the activation to get the normalised value, inverts the
# affine normalisation to get X back, and runs batch_norm_grad on the activation's gradient.

_ABN_ACTS = ("identity", "leaky_relu", "elu")
_ABN_ATTRS = {**BN_ATTRS, "activation": "identity", "alpha": 1.0}


def _abn_act(attrs: dict) -> tuple[str, float]:
    act = attrs.get("activation") or "identity"
    if act not in _ABN_ACTS:
        raise ValueError(f"inplace_abn: activation must be one of {_ABN_ACTS}, got {act!r}")
    alpha = float(attrs.get("alpha", 1.0))
    if act != "identity" and alpha <= 0:
        # the grad op inverts the activation from Y: that needs alpha > 0
        raise ValueError(f"inplace_abn: alpha must be > 0 for {act}, got {alpha}")
    return act, alpha


def _abn_grad_maker(op: Any) -> list[dict]:
    inputs = {slot: list(op.inputs[slot]) for slot in ("Scale", "Bias") if op.inputs.get(slot)}
    if _uses_global_stats(op.attrs):
        inputs["Mean"] = list(op.outputs["MeanOut"])
        inputs["Variance"] = list(op.outputs["VarianceOut"])
    for slot in ("Y", "SavedMean", "SavedVariance"):
        inputs[slot] = list(op.outputs[slot])
    inputs["Y" + GRAD] = [n + GRAD for n in op.outputs["Y"]]
    outputs = {slot + GRAD: [n + GRAD for n in op.inputs[slot]]
               for slot in ("X", "Scale", "Bias") if op.inputs.get(slot)}
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": "inplace_abn_grad", "inputs": inputs, "outputs": outputs, "attrs": attrs}]


@register("inplace_abn", ("X", "Scale", "Bias", "Mean", "Variance"),
          ("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"), _ABN_ATTRS,
          grad=_abn_grad_maker)
def inplace_abn(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y = act(batch_norm(X)): the ``batch_norm`` kernel, then identity,
    ``leaky_relu`` (x if x > 0 else alpha·x) or ``elu`` (x if x > 0 else alpha·(eˣ − 1))."""
    act, alpha = _abn_act(attrs)
    res = batch_norm(ins, attrs, outs)
    z = res["Y"][0]
    xp = array_module(z)
    a = z.dtype.type(alpha)
    if act == "leaky_relu":
        res["Y"] = [xp.where(z > 0, z, a * z)]
    elif act == "elu":
        res["Y"] = [xp.where(z > 0, z, a * xp.expm1(xp.minimum(z, 0)))]
    return res


@register("inplace_abn_grad",
          ("Y", "Scale", "Bias", "Mean", "Variance", "SavedMean", "SavedVariance", "Y" + GRAD),
          ("X" + GRAD, "Scale" + GRAD, "Bias" + GRAD), _ABN_ATTRS,
          optional=("Mean", "Variance"))
def inplace_abn_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """With z = act⁻¹(Y) (leaky_relu: Y / alpha below 0; elu: log(1 + Y / alpha) below 0),
    dz = act'(z) · dY, X = (z − Bias) / (Scale · inv_std) + mean, then ``batch_norm_grad``
    (its kernel, called) on X and dz."""
    act, alpha = _abn_act(attrs)
    y, scale, bias = ins["Y"][0], ins["Scale"][0], ins["Bias"][0]
    xp = array_module(y)
    dy = ins["Y" + GRAD][0]
    dy = xp.zeros_like(y) if dy is None else dy
    a = y.dtype.type(alpha)
    if act == "leaky_relu":
        z = xp.where(y > 0, y, y / a)
        dz = dy * xp.where(y > 0, y.dtype.type(1), a)
    elif act == "elu":
        z = xp.where(y > 0, y, xp.log1p(xp.minimum(y, 0) / a))
        dz = dy * xp.where(y > 0, y.dtype.type(1), y + a)
    else:
        z, dz = y, dy
    axis, shape = _layout(y, attrs)
    if _uses_global_stats(attrs):
        eps = y.dtype.type(attrs.get("epsilon", 1e-5))
        mean = ins["Mean"][0]
        inv_std = 1.0 / xp.sqrt(ins["Variance"][0] + eps)
    else:
        mean, inv_std = ins["SavedMean"][0], ins["SavedVariance"][0]
    x = ((z - bias.reshape(shape)) / (scale * inv_std).reshape(shape)
         + mean.reshape(shape)).astype(y.dtype, copy=False)
    bn_ins = {"X": [x], "Scale": [scale], "Bias": [bias],
              "Mean": ins.get("Mean") or [None], "Variance": ins.get("Variance") or [None],
              "SavedMean": ins["SavedMean"], "SavedVariance": ins["SavedVariance"],
              "Y" + GRAD: [dz]}
    return batch_norm_grad(bn_ins, attrs, outs)


# -- second-order gradients of batch_norm and instance_norm --------------------------------------
# Paddle 1.8's BatchNormDoubleGradMaker / InstanceNormDoubleGradMaker (batch_norm_op.cc,
# instance_norm_op.cc): the grad op of ``*_grad`` reads X, Scale, SavedMean, SavedVariance (and
# Mean, Variance with use_global_stats), DY (the first pass's Y@GRAD, a value) and the gradients
# DDX, DDScale, DDBias of the grad op's outputs; it writes DX, DScale and DDY (no DBias: Bias
# does not enter the first-order gradients). In training the statistics are functions of X, so
# DX is the total derivative through them, as Paddle's kernels compute it.


def _norm_grad_grad(ins: dict, outs: tuple, x3: Any, dy3: Any, mean: Any, r: Any,
                    scale: Any, stat_axes: tuple[int, ...], count: int,
                    global_stats: bool) -> dict:
    """The double grad of ``dX = S·r·(dY − mean(dY) − x̂·mean(dY·x̂))``, ``dScale = Σ dY·x̂``,
    ``dBias = Σ dY`` on a ``[A, C, B]`` view ``x3`` whose statistics (``mean``, ``r`` = inv_std,
    broadcastable) reduce over ``stat_axes`` (``count`` elements each); per channel parameters
    have shape ``[1, C, 1]``. With ``global_stats`` the statistics are constants:
    ``dX = S·r·dY``.

    With L = Σ DDX·dX + DDScale·dScale + DDBias·dBias (the second pass's incoming gradient):
    DDY = ∂L/∂dY = P(S·DDX) + DDScale·x̂ + DDBias where P(g) = r·(g − mean(g) − x̂·mean(g·x̂))
    is dX's (self-adjoint) map; DScale = Σ DDX·P(dY); DX = Pᵀ(∂L/∂x̂) + ∂L/∂r · ∂r/∂x with
    ∂x̂/∂x = P and ∂r/∂x = −r²·x̂ / count."""
    xp = array_module(x3)
    dt = x3.dtype
    ddx = (ins.get("DDX") or [None])[0]
    dds = (ins.get("DDScale") or [None])[0]
    ddb = (ins.get("DDBias") or [None])[0]
    c = x3.shape[1]
    ddx = None if ddx is None else ddx.reshape(x3.shape)
    dds = None if dds is None else dds.reshape(1, c, 1)
    ddb = None if ddb is None else ddb.reshape(1, c, 1)
    s = xp.ones((1, c, 1), dtype=dt) if scale is None else scale.reshape(1, c, 1).astype(dt)
    xh = (x3 - mean) * r
    m = dt.type(count)
    chan_axes = (0, 2)

    def msum(a: Any) -> Any:
        return a.sum(axis=stat_axes, keepdims=True)

    def proj(g: Any) -> Any:
        return r * (g - msum(g) / m - xh * (msum(g * xh) / m))

    res = {}
    if "DDY" in outs:
        ddy = xp.zeros(x3.shape, dtype=dt)
        if ddx is not None:
            ddy = ddy + (s * r * ddx if global_stats else proj(s * ddx))
        if dds is not None:
            ddy = ddy + dds * xh
        if ddb is not None:
            ddy = ddy + ddb
        res["DDY"] = ddy
    if "DScale" in outs:
        if ddx is None or dy3 is None:
            res["DScale"] = xp.zeros((c,), dtype=dt)
        else:
            part = r * dy3 if global_stats else proj(dy3)
            res["DScale"] = (ddx * part).sum(axis=chan_axes)
    if "DX" in outs:
        dx = xp.zeros(x3.shape, dtype=dt)
        if dy3 is not None:
            if global_stats:
                if dds is not None:
                    dx = dds * r * dy3
            else:
                b = msum(dy3 * xh) / m
                g_xh = xp.zeros(x3.shape, dtype=dt) if dds is None else dds * dy3
                g_r = xp.zeros(b.shape, dtype=dt)
                if ddx is not None:
                    a2 = msum(ddx * xh)
                    a1 = msum(ddx * (dy3 - msum(dy3) / m))
                    g_xh = g_xh - s * r * (ddx * b + a2 * dy3 / m)
                    g_r = s * (a1 - a2 * b)
                dx = proj(g_xh) - g_r * r * r * xh / m
        res["DX"] = dx
    return res


def _bn_double_grad_maker(op: Any) -> list[dict]:
    # Mean and Variance only with use_global_stats, as Paddle's maker
    values = {"X": "X", "Scale": "Scale", "SavedMean": "SavedMean",
              "SavedVariance": "SavedVariance", "DY": "Y" + GRAD}
    if op.attrs.get("use_global_stats"):
        values.update({"Mean": "Mean", "Variance": "Variance"})
    return double_grad_maker(
        "batch_norm_grad_grad", values,
        {"DDX": "X" + GRAD, "DDScale": "Scale" + GRAD, "DDBias": "Bias" + GRAD},
        {"DX": "X", "DScale": "Scale", "DDY": "Y" + GRAD})(op)


set_grad("batch_norm_grad", _bn_double_grad_maker)

_NORM_GG_OPTIONAL = ("DY", "DDX", "DDScale", "DDBias")


@register("batch_norm_grad_grad",
          ("X", "Scale", "SavedMean", "SavedVariance", "Mean", "Variance", "DY", "DDX",
           "DDScale", "DDBias"), ("DX", "DScale", "DDY"), BN_ATTRS,
          optional=("Mean", "Variance", *_NORM_GG_OPTIONAL))
def batch_norm_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Paddle 1.8's batch_norm_grad_grad: DX, DScale and DDY from DDX, DDScale, DDBias (see
    :func:`_norm_grad_grad`). Training uses SavedMean and SavedVariance (inv_std) and
    differentiates through them; ``use_global_stats`` uses Mean and Variance as constants.
    ``is_test`` is refused, as Paddle's kernel refuses it."""
    if attrs.get("is_test"):
        raise ValueError("batch_norm_grad_grad: is_test=True cannot be used in a training "
                         "program (as in Fluid); set use_global_stats=True to normalise with "
                         "the moving statistics")
    x = ins["X"][0]
    xp = array_module(x)
    axis, _ = _layout(x, attrs)
    c = int(x.shape[axis])
    view = (x.shape[0], c, -1) if axis == 1 else (-1, c, 1)
    x3 = x.reshape(view)
    dy = (ins.get("DY") or [None])[0]
    dy3 = None if dy is None else dy.reshape(x3.shape)
    glob = bool(attrs.get("use_global_stats"))
    if glob:
        mean = ins["Mean"][0]
        r = 1.0 / xp.sqrt(ins["Variance"][0] + x.dtype.type(attrs.get("epsilon", 1e-5)))
    else:
        mean, r = ins["SavedMean"][0], ins["SavedVariance"][0]
    res = _norm_grad_grad(ins, outs, x3, dy3, mean.reshape(1, c, 1).astype(x.dtype),
                          r.reshape(1, c, 1).astype(x.dtype), ins["Scale"][0], (0, 2),
                          x.size // c, glob)
    for slot in ("DX", "DDY"):
        if slot in res:
            res[slot] = res[slot].reshape(x.shape)
    return {k: [v.astype(x.dtype, copy=False)] for k, v in res.items()}


set_grad("instance_norm_grad", double_grad_maker(
    "instance_norm_grad_grad",
    {"X": "X", "Scale": "Scale", "SavedMean": "SavedMean", "SavedVariance": "SavedVariance",
     "DY": "Y" + GRAD},
    {"DDX": "X" + GRAD, "DDScale": "Scale" + GRAD, "DDBias": "Bias" + GRAD},
    {"DX": "X", "DScale": "Scale", "DDY": "Y" + GRAD}))


@register("instance_norm_grad_grad",
          ("X", "Scale", "SavedMean", "SavedVariance", "DY", "DDX", "DDScale", "DDBias"),
          ("DX", "DScale", "DDY"), {"epsilon": 1e-5},
          optional=("Scale", *_NORM_GG_OPTIONAL))
def instance_norm_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Paddle 1.8's instance_norm_grad_grad: DX, DScale and DDY from DDX, DDScale, DDBias,
    the statistics (SavedMean, SavedVariance = inv_std, ``[N * C]``) over each sample's
    channel and differentiated through (see :func:`_norm_grad_grad`); DScale sums over the
    batch. Without Scale (``param_attr=False``) the scale is 1 and there is no DScale."""
    x = ins["X"][0]
    n, c = int(x.shape[0]), int(x.shape[1])
    x3 = x.reshape(n, c, -1)
    dy = (ins.get("DY") or [None])[0]
    scale = (ins.get("Scale") or [None])[0]
    if scale is None:
        outs = tuple(o for o in outs if o != "DScale")
    res = _norm_grad_grad(ins, outs, x3, None if dy is None else dy.reshape(x3.shape),
                          ins["SavedMean"][0].reshape(n, c, 1).astype(x.dtype),
                          ins["SavedVariance"][0].reshape(n, c, 1).astype(x.dtype), scale,
                          (2,), x3.shape[2], False)
    for slot in ("DX", "DDY"):
        if slot in res:
            res[slot] = res[slot].reshape(x.shape)
    return {k: [v.astype(x.dtype, copy=False)] for k, v in res.items()}
