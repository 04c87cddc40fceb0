"""Per-channel image kernels: Fluid 1.8's lrn, instance_norm, affine_channel, shuffle_channel
and space_to_depth (and their gradients), and ``max_pool2d_with_index``, the op
``layers.adaptive_pool2d`` builds for max pooling.

Semantics follow Paddle 1.8's ``lrn_op.cc`` (``MidOut = k + alpha * Σ x²`` over the ``n``
channels centred on each channel; ``Out = X * MidOut^-beta``), ``instance_norm_op.cc``
(``SavedVariance`` holds the inverse standard deviation ``1 / sqrt(var + epsilon)``),
``affine_channel_op.cc``, ``shuffle_channel_op.h``, ``space_to_depth_op.h`` (its own index
mapping, not TensorFlow's) and ``pool_with_index_op.cc`` / ``math/pooling.cc``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .conv_ops import adaptive_bounds
from .registry import GRAD, array_module, register
from .selected_rows import grad_maker, grad_slots


def _d(ins: dict, shape: tuple, xp: Any, dtype: Any, slot: str = "Out") -> Any:
    d = ins[slot + GRAD][0]
    return xp.zeros(shape, dtype=dtype) if d is None else d


# -- lrn -------------------------------------------------------------------------------------

_LRN_ATTRS = {"n": 5, "k": 2.0, "alpha": 1e-4, "beta": 0.75, "use_mkldnn": False,
              "data_format": "AnyLayout", "is_test": False}


def _lrn_setup(x: Any, attrs: dict) -> tuple[int, bool, Any, Any, Any]:
    """(n, channels_last, k, alpha, beta), checked as Paddle's op does."""
    if x.ndim != 4:
        raise ValueError(f"lrn needs a 4-D input, got shape {list(x.shape)}")
    n = int(attrs.get("n", 5))
    if n <= 0 or n % 2 != 1:
        raise ValueError(f"lrn: n must be a positive odd int, got {n}")
    fmt = attrs.get("data_format", "AnyLayout")
    if fmt not in ("NCHW", "NHWC", "AnyLayout"):
        raise ValueError(f"lrn: data_format must be 'NCHW' or 'NHWC', got {fmt!r}")
    t = x.dtype.type
    k, alpha, beta = (t(attrs.get(a, _LRN_ATTRS[a])) for a in ("k", "alpha", "beta"))
    for name, v in (("k", k), ("alpha", alpha), ("beta", beta)):
        if not v > 0:
            raise ValueError(f"lrn: {name} must be > 0, got {float(v)}")
    # Paddle's kernel: every layout but NHWC is channel-first (AnyLayout included)
    return n, fmt == "NHWC", k, alpha, beta


def _window_sum(xp: Any, a: Any, n: int) -> Any:
    """``Σ a[:, c + o]`` over ``o`` in ``[-(n-1)/2, (n-1)/2]`` (channels outside count 0),
    for a channel-first ``a``: ``n`` shifted adds of a zero-padded copy."""
    half = (n - 1) // 2
    c = a.shape[1]
    padded = xp.zeros((a.shape[0], c + 2 * half) + a.shape[2:], dtype=a.dtype)
    padded[:, half:half + c] = a
    total = padded[:, 0:c].copy()
    for o in range(1, n):
        total += padded[:, o:o + c]
    return total


def _cf(a: Any, last: bool) -> Any:
    return array_module(a).moveaxis(a, -1, 1) if last else a


def _cl(a: Any, last: bool) -> Any:
    xp = array_module(a)
    return xp.ascontiguousarray(xp.moveaxis(a, 1, -1)) if last else a


@register("lrn", ("X",), ("Out", "MidOut"), _LRN_ATTRS,
          grad=grad_maker(("X", "Out", "MidOut"), ("Out",), ("X",)))
def lrn(ins: dict, attrs: dict, outs: tuple) -> dict:
    """MidOut = k + alpha · Σ X² over the n channels centred on each channel;
    Out = X · MidOut^-beta."""
    x0 = ins["X"][0]
    xp = array_module(x0)
    n, last, k, alpha, beta = _lrn_setup(x0, attrs)
    x = _cf(x0, last)
    mid = k + alpha * _window_sum(xp, x * x, n)
    out = x * mid ** (-beta)
    return {"Out": [_cl(out, last).astype(x0.dtype, copy=False)],
            "MidOut": [_cl(mid, last).astype(x0.dtype, copy=False)]}


@register("lrn_grad", *grad_slots(("X", "Out", "MidOut"), ("Out",), ("X",)), _LRN_ATTRS)
def lrn_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Paddle's LRNGradFunctor: dX[i] = MidOut[i]^-beta · dOut[i]
    − 2 alpha beta · X[i] · Σ_{c in window(i)} dOut[c] · Out[c] / MidOut[c]."""
    x0 = ins["X"][0]
    xp = array_module(x0)
    if attrs.get("is_test"):
        raise ValueError("lrn_grad: is_test must be False when training (the gradient of an "
                         "lrn with is_test=True was asked for)")
    n, last, _, alpha, beta = _lrn_setup(x0, attrs)
    x, out, mid = (_cf(a, last) for a in (x0, ins["Out"][0], ins["MidOut"][0]))
    dout = _cf(_d(ins, x0.shape, xp, x0.dtype), last)
    ratio = x0.dtype.type(-2) * alpha * beta
    dx = mid ** (-beta) * dout + ratio * x * _window_sum(xp, dout * out / mid, n)
    return {"X" + GRAD: [_cl(dx, last).astype(x0.dtype, copy=False)]}


# -- instance_norm -----------------------------------------------------------------------------

_IN_ATTRS = {"epsilon": 1e-5}
_IN_FWD = ("X", "Scale", "SavedMean", "SavedVariance")


def _in_setup(x: Any, attrs: dict, scale: Any = None, bias: Any = None) -> tuple[int, int, Any]:
    if not 2 <= x.ndim <= 5:
        raise ValueError(f"instance_norm needs an input of rank 2 to 5, got shape "
                         f"{list(x.shape)}")
    eps = float(attrs.get("epsilon", 1e-5))
    if not 0.0 <= eps <= 0.001:
        raise ValueError(f"instance_norm: epsilon must be between 0.0 and 0.001, got {eps}")
    n, c = int(x.shape[0]), int(x.shape[1])
    for slot, p in (("Scale", scale), ("Bias", bias)):
        if p is not None and tuple(p.shape) != (c,):
            raise ValueError(f"instance_norm: {slot} must have shape [{c}] (the channels of "
                             f"X), got {list(p.shape)}")
    return n, c, x.dtype.type(eps)


@register("instance_norm", ("X", "Scale", "Bias"), ("Y", "SavedMean", "SavedVariance"),
          _IN_ATTRS, optional=("Scale", "Bias"),
          grad=grad_maker(_IN_FWD, ("Y",), ("X", "Scale", "Bias")))
def instance_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y = (X − mean) · inv_std · Scale + Bias, the statistics over each sample's channel
    (all positions); SavedMean and SavedVariance (= inv_std = 1 / sqrt(var + ε)) are
    ``[N * C]``."""
    x = ins["X"][0]
    xp = array_module(x)
    scale = (ins.get("Scale") or [None])[0]
    bias = (ins.get("Bias") or [None])[0]
    n, c, eps = _in_setup(x, attrs, scale, bias)
    rows = x.reshape(n, c, -1)
    mean = rows.mean(axis=2)
    centred = rows - mean[:, :, None]
    inv_std = 1.0 / xp.sqrt((centred * centred).mean(axis=2) + eps)
    y = centred * inv_std[:, :, None]
    if scale is not None:
        y = y * scale[None, :, None]
    if bias is not None:
        y = y + bias[None, :, None]
    return {"Y": [y.reshape(x.shape).astype(x.dtype, copy=False)],
            "SavedMean": [mean.reshape(-1).astype(x.dtype, copy=False)],
            "SavedVariance": [inv_std.reshape(-1).astype(x.dtype, copy=False)]}


@register("instance_norm_grad", *grad_slots(_IN_FWD, ("Y",), ("X", "Scale", "Bias")),
          _IN_ATTRS, optional=("Scale",))
def instance_norm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dBias = Σ dY, dScale = Σ dY · x̂ per channel; with g = dY · Scale,
    dX = inv_std · (g − mean(g) − x̂ · mean(g · x̂)) over each sample's channel."""
    x = ins["X"][0]
    xp = array_module(x)
    scale = (ins.get("Scale") or [None])[0]
    n, c, _ = _in_setup(x, attrs, scale)
    rows = x.reshape(n, c, -1)
    dy = _d(ins, x.shape, xp, x.dtype, "Y").reshape(rows.shape)
    mean = ins["SavedMean"][0].reshape(n, c, 1)
    inv_std = ins["SavedVariance"][0].reshape(n, c, 1)
    x_hat = (rows - mean) * inv_std
    res = {}
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [dy.sum(axis=(0, 2))]
    if "Scale" + GRAD in outs:
        res["Scale" + GRAD] = [(dy * x_hat).sum(axis=(0, 2))]
    if "X" + GRAD in outs:
        g = dy * scale[None, :, None] if scale is not None else dy
        dx = inv_std * (g - g.mean(axis=2, keepdims=True)
                        - x_hat * (g * x_hat).mean(axis=2, keepdims=True))
        res["X" + GRAD] = [dx.reshape(x.shape).astype(x.dtype, copy=False)]
    return res


# -- affine_channel ----------------------------------------------------------------------------

_AC_ATTRS = {"data_layout": "AnyLayout"}


def _ac_bshape(x: Any, attrs: dict, *params: Any) -> tuple[tuple[int, ...], int]:
    """The broadcast shape of a per-channel vector, and the channel axis. As in Paddle's
    kernel, only ``NCHW`` puts the channels on axis 1: every other layout (``AnyLayout``
    too) has them last."""
    layout = attrs.get("data_layout", "AnyLayout")
    if layout not in ("NCHW", "NHWC", "AnyLayout"):
        raise ValueError(f"affine_channel: data_layout must be 'NCHW' or 'NHWC', got "
                         f"{layout!r}")
    if x.ndim < 2:
        raise ValueError(f"affine_channel needs an input of rank >= 2, got shape "
                         f"{list(x.shape)}")
    axis = 1 if layout == "NCHW" else x.ndim - 1
    c = int(x.shape[axis])
    for p in params:
        if p is not None and tuple(p.shape) != (c,):
            raise ValueError(f"affine_channel: Scale and Bias must have shape [{c}] (the "
                             f"channels of X), got {list(p.shape)}")
    shape = [1] * x.ndim
    shape[axis] = c
    return tuple(shape), axis


@register("affine_channel", ("X", "Scale", "Bias"), ("Out",), _AC_ATTRS,
          grad=grad_maker(("X", "Scale"), ("Out",), ("X", "Scale", "Bias")))
def affine_channel(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X · Scale + Bias, per channel."""
    x, scale, bias = ins["X"][0], ins["Scale"][0], ins["Bias"][0]
    b, _ = _ac_bshape(x, attrs, scale, bias)
    return {"Out": [(x * scale.reshape(b) + bias.reshape(b)).astype(x.dtype, copy=False)]}


@register("affine_channel_grad", *grad_slots(("X", "Scale"), ("Out",), ("X", "Scale", "Bias")),
          _AC_ATTRS)
def affine_channel_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut · Scale; dScale = Σ dOut · X and dBias = Σ dOut per channel."""
    x, scale = ins["X"][0], ins["Scale"][0]
    xp = array_module(x)
    b, axis = _ac_bshape(x, attrs, scale)
    dy = _d(ins, x.shape, xp, x.dtype)
    axes = tuple(i for i in range(x.ndim) if i != axis)
    res = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [(dy * scale.reshape(b)).astype(x.dtype, copy=False)]
    if "Scale" + GRAD in outs:
        res["Scale" + GRAD] = [(dy * x).sum(axis=axes).reshape(-1)]
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [dy.sum(axis=axes).reshape(-1)]
    return res


# -- shuffle_channel ---------------------------------------------------------------------------

def _groups(x: Any, attrs: dict) -> tuple[int, int]:
    if x.ndim != 4:
        raise ValueError(f"shuffle_channel needs a 4-D NCHW input, got shape {list(x.shape)}")
    group, c = int(attrs.get("group", 1)), int(x.shape[1])
    if group < 1 or c % group:
        raise ValueError(f"shuffle_channel: group ({group}) must be a positive divisor of the "
                         f"{c} channels")
    return group, c // group


# X is read only for its shape, where the output gradient is missing (Paddle's grad op
# reads Out@GRAD alone)
@register("shuffle_channel", ("X",), ("Out",), {"group": 1},
          grad=grad_maker(("X",), ("Out",), ("X",)))
def shuffle_channel(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[:, j * group + i] = X[:, i * (C / group) + j]: the channels as a ``[group, C /
    group]`` matrix, transposed."""
    x = ins["X"][0]
    g, per = _groups(x, attrs)
    n, c, h, w = x.shape
    return {"Out": [x.reshape(n, g, per, h, w).transpose(0, 2, 1, 3, 4).reshape(x.shape)]}


@register("shuffle_channel_grad", *grad_slots(("X",), ("Out",), ("X",)), {"group": 1})
def shuffle_channel_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: dOut shuffled back."""
    x = ins["X"][0]
    g, per = _groups(x, attrs)
    n, c, h, w = x.shape
    d = _d(ins, x.shape, array_module(x), x.dtype)
    return {"X" + GRAD: [d.reshape(n, per, g, h, w).transpose(0, 2, 1, 3, 4).reshape(x.shape)]}


# -- space_to_depth ----------------------------------------------------------------------------

def _blocks(x: Any, attrs: dict) -> tuple[int, int]:
    """(blocksize, C / blocksize²), checked as Paddle's InferShape does."""
    bs = int(attrs.get("blocksize", 2))
    if x.ndim != 4:
        raise ValueError(f"space_to_depth needs a 4-D NCHW input, got shape {list(x.shape)}")
    if bs <= 1:
        raise ValueError(f"space_to_depth: blocksize must be > 1, got {bs}")
    _, c, h, w = (int(d) for d in x.shape)
    if c % (bs * bs) or h % bs or w % bs:
        raise ValueError(f"space_to_depth: the channels ({c}) must be divisible by "
                         f"blocksize² ({bs * bs}) and the height ({h}) and width ({w}) by "
                         f"blocksize ({bs})")
    return bs, c // (bs * bs)


@register("space_to_depth", ("X",), ("Out",), {"blocksize": 2},
          grad=grad_maker(("X",), ("Out",), ("X",)))
def space_to_depth(ins: dict, attrs: dict, outs: tuple) -> dict:
    """``[B, C, H, W]`` → ``[B, C·bs², H/bs, W/bs]`` with Paddle's own (YOLOv2 reorg) index
    map: with ``C2 = C / bs²`` and input channel ``k = (oy·bs + ox)·C2 + c2``, element
    ``(b, k, j, i)`` lands at ``(b, c2, j·bs + oy, i·bs + ox)`` of a ``[B, C2, H·bs, W·bs]``
    buffer, which is then read as the output's shape. (Not TensorFlow's space_to_depth.)"""
    x = ins["X"][0]
    bs, c2 = _blocks(x, attrs)
    b, c, h, w = x.shape
    buf = x.reshape(b, bs, bs, c2, h, w).transpose(0, 3, 4, 1, 5, 2)  # b, c2, j, oy, i, ox
    return {"Out": [buf.reshape(b, c * bs * bs, h // bs, w // bs)]}


@register("space_to_depth_grad", *grad_slots(("X",), ("Out",), ("X",)), {"blocksize": 2})
def space_to_depth_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: dOut through the inverse map."""
    x = ins["X"][0]
    bs, c2 = _blocks(x, attrs)
    b, c, h, w = x.shape
    d = _d(ins, (b, c * bs * bs, h // bs, w // bs), array_module(x), x.dtype)
    return {"X" + GRAD: [d.reshape(b, c2, h, bs, w, bs).transpose(0, 3, 5, 1, 2, 4)
                         .reshape(x.shape)]}


# -- max_pool2d_with_index ---------------------------------------------------------------------

_MPI_ATTRS = {"ksize": [1, 1], "global_pooling": False, "strides": [1, 1], "paddings": [0, 0],
              "adaptive": False}


def _pair_attr(attrs: dict, name: str, default: list[int]) -> tuple[int, int]:
    v = [int(e) for e in attrs.get(name, default)]
    if len(v) != 2:
        raise ValueError(f"max_pool2d_with_index: {name} must have 2 entries, got {v}")
    return v[0], v[1]


def _index_windows(x: Any, attrs: dict) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The ``[start, end)`` rows and columns of each output's window, as Paddle's
    MaxPool2dWithIndexFunctor: adaptive windows, or strided ones clipped to the input."""
    if x.ndim != 4:
        raise ValueError(f"max_pool2d_with_index needs a 4-D NCHW input, got shape "
                         f"{list(x.shape)}")
    h, w = int(x.shape[2]), int(x.shape[3])
    kh, kw = _pair_attr(attrs, "ksize", [1, 1])
    if attrs.get("global_pooling"):
        kh, kw = h, w
    if attrs.get("adaptive"):
        if kh <= 0 or kw <= 0:
            raise ValueError(f"max_pool2d_with_index: adaptive pooling needs a positive output "
                             f"size (ksize), got {[kh, kw]}")
        return adaptive_bounds(h, kh), adaptive_bounds(w, kw)
    sh, sw = _pair_attr(attrs, "strides", [1, 1])
    ph, pw = (0, 0) if attrs.get("global_pooling") else _pair_attr(attrs, "paddings", [0, 0])
    bounds = []
    for size, k, s, p in ((h, kh, sh, ph), (w, kw, sw, pw)):
        out = (size - k + 2 * p) // s + 1
        if out <= 0 or k <= p:
            raise ValueError(f"max_pool2d_with_index: input size {size} with ksize {k}, "
                             f"stride {s} and padding {p} leaves no output (or empty windows)")
        bounds.append([(max(i * s - p, 0), min(i * s - p + k, size)) for i in range(out)])
    return bounds[0], bounds[1]


@register("max_pool2d_with_index", ("X",), ("Out", "Mask"), _MPI_ATTRS,
          grad=grad_maker(("X", "Mask"), ("Out",), ("X",)))
def max_pool2d_with_index(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the maximum of each window; Mask (int32) = its position ``h * W + w`` in the
    input map, the first maximum in row-major order."""
    x = ins["X"][0]
    xp = array_module(x)
    rows, cols = _index_windows(x, attrs)
    n, c, _, w = x.shape
    out = xp.empty((n, c, len(rows), len(cols)), dtype=x.dtype)
    mask = xp.empty((n, c, len(rows), len(cols)), dtype=np.int32)
    for i, (h0, h1) in enumerate(rows):
        for j, (w0, w1) in enumerate(cols):
            win = x[:, :, h0:h1, w0:w1].reshape(n, c, -1)
            first = win.argmax(axis=2)
            out[:, :, i, j] = xp.take_along_axis(win, first[..., None], axis=2)[..., 0]
            mask[:, :, i, j] = (h0 + first // (w1 - w0)) * w + w0 + first % (w1 - w0)
    return {"Out": [out], "Mask": [mask]}


@register("max_pool2d_with_index_grad", *grad_slots(("X", "Mask"), ("Out",), ("X",)),
          _MPI_ATTRS)
def max_pool2d_with_index_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: each window's output gradient added at the position its Mask names."""
    x, mask = ins["X"][0], ins["Mask"][0]
    xp = array_module(x)
    n, c, h, w = x.shape
    d = _d(ins, mask.shape, xp, x.dtype)
    # flat positions over all maps: one weighted bincount adds overlapping windows' shares
    base = (xp.arange(n * c, dtype=np.int64) * (h * w)).reshape(n, c, 1, 1)
    flat = (mask.astype(np.int64) + base).reshape(-1)
    dx = xp.bincount(flat, weights=d.reshape(-1), minlength=n * c * h * w)
    return {"X" + GRAD: [dx.reshape(x.shape).astype(x.dtype, copy=False)]}
