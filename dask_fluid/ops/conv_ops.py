"""Image kernels: ``conv2d`` (and ``depthwise_conv2d``) and ``pool2d``, with their gradients.

Layout NCHW, as Fluid 1.8's defaults. Convolution is im2col + one matrix product per group: the
padded input is viewed (no copy) as windows ``[N, C, OH, OW, KH, KW]`` with strides and
dilation, copied once into the column matrix, and multiplied by the filter; its gradient
scatters the column gradient back window offset by window offset (``KH * KW`` strided adds).
The same code runs on numpy and CuPy (:func:`~.registry.array_module`).

Semantics follow Paddle 1.8's ``conv_op.cc`` and ``math/pooling.cc``:

- ``paddings`` has 2 (``[ph, pw]``) or 4 (``[top, bottom, left, right]``) entries;
  ``padding_algorithm`` ``"SAME"`` pads so that ``OH = ceil(H / stride)``, ``"VALID"`` pads
  nothing;
- a pooling window is clipped to the input (padding is never part of a max), an ``exclusive``
  average divides by the clipped window's size and a non-exclusive one by ``KH * KW``;
  ``ceil_mode`` rounds the output size up; ``global_pooling`` pools the whole map;
- the max-pool gradient goes to the first maximum of each window, as Paddle's loop does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .registry import GRAD, array_module, register
from .selected_rows import grad_maker, grad_slots

__all__ = ["conv_output_size", "pool_output_size", "resolve_paddings"]


def _pair(value: Any, name: str) -> tuple[int, int]:
    values = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value, value])]
    if len(values) != 2:
        raise ValueError(f"{name} must have 2 entries (height, width), got {list(values)}")
    return values[0], values[1]


def resolve_paddings(paddings: Sequence[int], algorithm: str, in_hw: Sequence[int],
                     kernel_hw: Sequence[int], strides: Sequence[int],
                     dilations: Sequence[int] = (1, 1)) -> tuple[int, int, int, int]:
    """``(top, bottom, left, right)`` from Fluid's ``paddings`` and ``padding_algorithm``."""
    if algorithm == "VALID":
        return 0, 0, 0, 0
    if algorithm == "SAME":
        out = []
        for size, k, s, d in zip(in_hw, kernel_hw, strides, dilations, strict=True):
            eff = d * (k - 1) + 1
            total = max((math.ceil(size / s) - 1) * s + eff - size, 0)
            out += [total // 2, total - total // 2]
        return out[0], out[1], out[2], out[3]
    if algorithm != "EXPLICIT":
        raise ValueError(f"padding_algorithm must be 'EXPLICIT', 'SAME' or 'VALID', got "
                         f"{algorithm!r}")
    p = [int(v) for v in paddings]
    if len(p) == 2:
        return p[0], p[0], p[1], p[1]
    if len(p) == 4:
        return p[0], p[1], p[2], p[3]
    raise ValueError(f"paddings must have 2 or 4 entries, got {p}")


def conv_output_size(size: int, k: int, pad_before: int, pad_after: int, stride: int,
                     dilation: int) -> int:
    """One spatial output size of a convolution (``-1`` stays ``-1``: unknown)."""
    if size < 0:
        return -1
    return (size + pad_before + pad_after - (dilation * (k - 1) + 1)) // stride + 1


def pool_output_size(size: int, k: int, pad_before: int, pad_after: int, stride: int,
                     ceil_mode: bool) -> int:
    """One spatial output size of a pooling (``-1`` stays ``-1``)."""
    if size < 0:
        return -1
    span = size + pad_before + pad_after - k
    return (span + stride - 1) // stride + 1 if ceil_mode else span // stride + 1


def _windows(xp: Any, x: Any, oh: int, ow: int, kh: int, kw: int, sh: int, sw: int,
             dh: int, dw: int) -> Any:
    """A view ``[N, C, OH, OW, KH, KW]`` of the (padded) ``x``: window ``(i, j)`` of output
    ``(h, w)`` is ``x[..., h*sh + i*dh, w*sw + j*dw]``."""
    n, c = x.shape[:2]
    s = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, (n, c, oh, ow, kh, kw), (s[0], s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw))


def _pad(xp: Any, x: Any, pads: tuple[int, int, int, int], value: float = 0.0) -> Any:
    top, bottom, left, right = pads
    if not any(pads):
        return xp.ascontiguousarray(x)
    return xp.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


# ---------------------------------------------------------------------------------------------
# conv2d

_CONV_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "EXPLICIT",
               "groups": 1, "dilations": [1, 1], "use_cudnn": True, "data_format": "NCHW",
               "use_mkldnn": False, "exhaustive_search": False, "workspace_size_MB": 512,
               "fuse_relu_before_depthwise_conv": False}


class _ConvGeometry:
    """Everything a conv kernel derives from its input, filter and attrs."""

    def __init__(self, x_shape: tuple, w_shape: tuple, attrs: dict) -> None:
        if attrs.get("data_format", "NCHW") not in ("NCHW", "AnyLayout"):
            raise NotImplementedError(f"conv2d with data_format={attrs['data_format']!r}: "
                                      "only NCHW is implemented")
        if len(x_shape) != 4 or len(w_shape) != 4:
            raise ValueError(f"conv2d needs a 4-D input and filter (NCHW, MCKK), got "
                             f"{list(x_shape)} and {list(w_shape)}")
        self.n, self.c, self.h, self.w = (int(d) for d in x_shape)
        self.m, cg, self.kh, self.kw = (int(d) for d in w_shape)
        self.groups = int(attrs.get("groups", 1) or 1)
        if self.c % self.groups or self.m % self.groups or cg != self.c // self.groups:
            raise ValueError(f"conv2d: input channels {self.c} and filters {self.m} must split "
                             f"into groups={self.groups}, and the filter's channels ({cg}) must "
                             f"be {self.c} / groups")
        self.sh, self.sw = _pair(attrs.get("strides", [1, 1]), "strides")
        self.dh, self.dw = _pair(attrs.get("dilations", [1, 1]), "dilations")
        self.pads = resolve_paddings(attrs.get("paddings", [0, 0]),
                                     attrs.get("padding_algorithm", "EXPLICIT"),
                                     (self.h, self.w), (self.kh, self.kw), (self.sh, self.sw),
                                     (self.dh, self.dw))
        self.oh = conv_output_size(self.h, self.kh, self.pads[0], self.pads[1], self.sh,
                                   self.dh)
        self.ow = conv_output_size(self.w, self.kw, self.pads[2], self.pads[3], self.sw,
                                   self.dw)
        if self.oh <= 0 or self.ow <= 0:
            raise ValueError(f"conv2d: the output of input {list(x_shape)} with filter "
                             f"{list(w_shape)} would be {self.oh}x{self.ow}; check the "
                             "filter size, paddings, strides and dilations")

    def columns(self, xp: Any, x: Any) -> Any:
        """``[G, C/G*KH*KW, N*OH*OW]``: the windows of each group as columns. The copy walks
        the input along its rows (OW innermost), which is what makes it fast."""
        xp_ = _pad(xp, x, self.pads)
        win = _windows(xp, xp_, self.oh, self.ow, self.kh, self.kw, self.sh, self.sw, self.dh,
                       self.dw)
        g, cg = self.groups, self.c // self.groups
        win = win.reshape(self.n, g, cg, self.oh, self.ow, self.kh, self.kw)
        cols = win.transpose(1, 2, 5, 6, 0, 3, 4)  # G, C/G, KH, KW, N, OH, OW
        return xp.ascontiguousarray(cols).reshape(g, cg * self.kh * self.kw,
                                                  self.n * self.oh * self.ow)

    def filters(self, w: Any) -> Any:
        """``[G, M/G, C/G*KH*KW]``."""
        return w.reshape(self.groups, self.m // self.groups, -1)

    def output(self, xp: Any, out: Any) -> Any:
        """``[G, M/G, N*OH*OW]`` as NCHW ``[N, M, OH, OW]``."""
        out = out.reshape(self.m, self.n, self.oh, self.ow)
        return xp.ascontiguousarray(out.transpose(1, 0, 2, 3))

    def output_grad(self, xp: Any, dout: Any) -> Any:
        """NCHW ``[N, M, OH, OW]`` as ``[G, M/G, N*OH*OW]``."""
        d = xp.ascontiguousarray(dout.transpose(1, 0, 2, 3))
        return d.reshape(self.groups, self.m // self.groups, -1)


_conv_grad_maker = grad_maker(("Input", "Filter"), out_grads=("Output",),
                              in_grads=("Input", "Filter"))
_CONV_GRAD_SLOTS = grad_slots(("Input", "Filter"), ("Output",), ("Input", "Filter"))


def _conv2d(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Output = conv(Input, Filter): NCHW input, ``[M, C/groups, KH, KW]`` filter."""
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    geo = _ConvGeometry(x.shape, w.shape, attrs)
    return {"Output": [geo.output(xp, xp.matmul(geo.filters(w), geo.columns(xp, x)))]}


def _conv2d_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    geo = _ConvGeometry(x.shape, w.shape, attrs)
    dout = ins["Output" + GRAD][0]
    if dout is None:
        dout = xp.zeros((geo.n, geo.m, geo.oh, geo.ow), dtype=x.dtype)
    g, cg = geo.groups, geo.c // geo.groups
    d2 = geo.output_grad(xp, dout)  # G, M/G, N*OH*OW
    res = {}
    if "Filter" + GRAD in outs:
        cols = geo.columns(xp, x)
        res["Filter" + GRAD] = [xp.matmul(d2, cols.transpose(0, 2, 1)).reshape(w.shape)]
    if "Input" + GRAD in outs:
        dcols = xp.matmul(geo.filters(w).transpose(0, 2, 1), d2)  # G, C/G*KH*KW, N*OH*OW
        dcols = dcols.reshape(g * cg, geo.kh, geo.kw, geo.n, geo.oh, geo.ow)
        top, bottom, left, right = geo.pads
        # scatter in the columns' [C, N, H, W] order (contiguous adds), transpose once
        dxp = xp.zeros((geo.c, geo.n, geo.h + top + bottom, geo.w + left + right),
                       dtype=x.dtype)
        for i in range(geo.kh):
            for j in range(geo.kw):
                hi, wj = i * geo.dh, j * geo.dw
                dxp[:, :, hi:hi + geo.sh * (geo.oh - 1) + 1:geo.sh,
                    wj:wj + geo.sw * (geo.ow - 1) + 1:geo.sw] += dcols[:, i, j]
        dx = dxp[:, :, top:top + geo.h, left:left + geo.w].transpose(1, 0, 2, 3)
        res["Input" + GRAD] = [xp.ascontiguousarray(dx)]
    return res


for _type in ("conv2d", "depthwise_conv2d"):
    register(_type, ("Input", "Filter"), ("Output",), _CONV_ATTRS, optional=("Bias",),
             grad=_conv_grad_maker)(_conv2d)
    register(_type + "_grad", *_CONV_GRAD_SLOTS, _CONV_ATTRS)(_conv2d_grad)


# ---------------------------------------------------------------------------------------------
# pool2d

_POOL_ATTRS = {"pooling_type": "max", "ksize": [1, 1], "global_pooling": False,
               "strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "EXPLICIT",
               "exclusive": True, "adaptive": False, "ceil_mode": False, "use_cudnn": True,
               "data_format": "NCHW", "use_mkldnn": False, "use_quantizer": False}


class _PoolGeometry:
    def __init__(self, x_shape: tuple, attrs: dict) -> None:
        if attrs.get("data_format", "NCHW") not in ("NCHW", "AnyLayout"):
            raise NotImplementedError(f"pool2d with data_format={attrs['data_format']!r}: "
                                      "only NCHW is implemented")
        if attrs.get("adaptive"):
            raise NotImplementedError("pool2d with adaptive=True is not implemented")
        if len(x_shape) != 4:
            raise ValueError(f"pool2d needs a 4-D NCHW input, got {list(x_shape)}")
        self.type = attrs.get("pooling_type", "max")
        if self.type not in ("max", "avg"):
            raise ValueError(f"pooling_type must be 'max' or 'avg', got {self.type!r}")
        self.n, self.c, self.h, self.w = (int(d) for d in x_shape)
        if attrs.get("global_pooling"):
            self.kh, self.kw, self.sh, self.sw = self.h, self.w, 1, 1
            self.pads = (0, 0, 0, 0)
        else:
            self.kh, self.kw = _pair(attrs.get("ksize", [1, 1]), "ksize")
            self.sh, self.sw = _pair(attrs.get("strides", [1, 1]), "strides")
            self.pads = resolve_paddings(attrs.get("paddings", [0, 0]),
                                         attrs.get("padding_algorithm", "EXPLICIT"),
                                         (self.h, self.w), (self.kh, self.kw),
                                         (self.sh, self.sw))
        ceil = bool(attrs.get("ceil_mode", False)) and not attrs.get("global_pooling")
        self.oh = pool_output_size(self.h, self.kh, self.pads[0], self.pads[1], self.sh, ceil)
        self.ow = pool_output_size(self.w, self.kw, self.pads[2], self.pads[3], self.sw, ceil)
        if self.oh <= 0 or self.ow <= 0:
            raise ValueError(f"pool2d: the output of input {list(x_shape)} with ksize "
                             f"{[self.kh, self.kw]} would be {self.oh}x{self.ow}")
        self.exclusive = bool(attrs.get("exclusive", True))
        top, _, left, _ = self.pads
        # the padded extent every window fits in (ceil_mode windows may reach past the padding)
        self.ph = max(self.h + top + self.pads[1], (self.oh - 1) * self.sh + self.kh)
        self.pw = max(self.w + left + self.pads[3], (self.ow - 1) * self.sw + self.kw)

    def padded(self, xp: Any, x: Any, value: float) -> Any:
        top, _, left, _ = self.pads
        return _pad(xp, x, (top, self.ph - self.h - top, left, self.pw - self.w - left), value)

    def whole(self) -> bool:
        """One window that is the whole map (global pooling, or a kernel that size)."""
        return (self.kh, self.kw, self.oh, self.ow) == (self.h, self.w, 1, 1) and \
            not any(self.pads)

    def offsets(self) -> list[tuple[int, int]]:
        """Window offsets in Paddle's (row-major) order."""
        return [(i, j) for i in range(self.kh) for j in range(self.kw)]

    def offset_view(self, xpad: Any, i: int, j: int) -> Any:
        """``[N, C, OH, OW]``: element ``(i, j)`` of every window of the padded input."""
        return xpad[:, :, i:i + self.sh * (self.oh - 1) + 1:self.sh,
                    j:j + self.sw * (self.ow - 1) + 1:self.sw]

    def counts(self, xp: Any, dtype: Any) -> Any:
        """Elements of each (clipped) window that lie in the input, ``[OH, OW]``."""
        top, _, left, _ = self.pads
        rows = np.clip(np.arange(self.oh) * self.sh - top + self.kh, None, self.h) - \
            np.clip(np.arange(self.oh) * self.sh - top, 0, None)
        cols = np.clip(np.arange(self.ow) * self.sw - left + self.kw, None, self.w) - \
            np.clip(np.arange(self.ow) * self.sw - left, 0, None)
        return xp.asarray(np.outer(rows, cols).astype(dtype))


def _lowest(dtype: Any) -> float:
    return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min


@register("pool2d", ("X",), ("Out",), _POOL_ATTRS,
          grad=grad_maker(("X", "Out"), in_grads=("X",)))
def pool2d(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Max or average pooling of an NCHW input (see the module docstring for the rules)."""
    x = ins["X"][0]
    xp = array_module(x)
    geo = _PoolGeometry(x.shape, attrs)
    if geo.whole():
        reduce = x.max if geo.type == "max" else x.mean
        return {"Out": [reduce(axis=(2, 3), keepdims=True)]}
    # one strided slice per window offset, combined elementwise: far faster than reducing a
    # 6-D strided view of the windows
    if geo.type == "max":
        xpad = geo.padded(xp, x, _lowest(x.dtype))
        out = None
        for i, j in geo.offsets():
            view = geo.offset_view(xpad, i, j)
            out = view.copy() if out is None else xp.maximum(out, view, out=out)
        return {"Out": [out]}
    xpad = geo.padded(xp, x, 0.0)
    total = xp.zeros((geo.n, geo.c, geo.oh, geo.ow), dtype=x.dtype)
    for i, j in geo.offsets():
        total += geo.offset_view(xpad, i, j)
    div = geo.counts(xp, x.dtype) if geo.exclusive else x.dtype.type(geo.kh * geo.kw)
    return {"Out": [total / div]}


@register("pool2d_grad", *grad_slots(("X", "Out"), ("Out",), ("X",)), _POOL_ATTRS)
def pool2d_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    x = ins["X"][0]
    xp = array_module(x)
    geo = _PoolGeometry(x.shape, attrs)
    dout = ins["Out" + GRAD][0]
    if dout is None:
        dout = xp.zeros((geo.n, geo.c, geo.oh, geo.ow), dtype=x.dtype)
    if geo.whole():
        if geo.type == "avg":
            return {"X" + GRAD: [xp.broadcast_to(dout / x.dtype.type(geo.h * geo.w),
                                                 x.shape).copy()]}
        flat = x.reshape(geo.n, geo.c, -1)
        first = flat.argmax(axis=2)  # the first maximum, in row-major order as Paddle
        dx = xp.zeros_like(flat)
        xp.put_along_axis(dx, first[..., None], dout.reshape(geo.n, geo.c, 1), axis=2)
        return {"X" + GRAD: [dx.reshape(x.shape)]}
    dpad = xp.zeros((geo.n, geo.c, geo.ph, geo.pw), dtype=x.dtype)
    if geo.type == "max":
        xpad = geo.padded(xp, x, _lowest(x.dtype))
        out = ins["Out"][0]
        open_ = xp.ones(out.shape, dtype=bool)  # windows whose maximum has no gradient yet
        for i, j in geo.offsets():
            # the first maximum in Paddle's row-major window order takes the gradient
            hit = (geo.offset_view(xpad, i, j) == out) & open_
            open_ &= ~hit
            geo.offset_view(dpad, i, j)[...] += dout * hit
    else:
        div = geo.counts(xp, x.dtype) if geo.exclusive else x.dtype.type(geo.kh * geo.kw)
        share = dout / div
        for i, j in geo.offsets():
            geo.offset_view(dpad, i, j)[...] += share
    top, _, left, _ = geo.pads
    # what fell on padding is dropped: the windows were clipped to the input
    return {"X" + GRAD: [xp.ascontiguousarray(dpad[:, :, top:top + geo.h,
                                                   left:left + geo.w])]}


# ---------------------------------------------------------------------------------------------
# conv2d_transpose: the input gradient of a conv2d, as an op (Paddle 1.8's conv_transpose_op)

_CONVT_ATTRS = {**_CONV_ATTRS, "output_size": []}


def conv_transpose_output_size(size: int, k: int, pad_before: int, pad_after: int,
                               stride: int, dilation: int) -> int:
    """One spatial output size of ``conv2d_transpose`` without ``output_size``."""
    if size < 0:
        return -1
    return (size - 1) * stride - pad_before - pad_after + dilation * (k - 1) + 1


def _transpose_geometry(x: Any, w: Any, attrs: dict) -> tuple[tuple, dict]:
    """The shape of the conv2d input this op produces, and that conv2d's attrs."""
    n, c, h, wd = (int(d) for d in x.shape)
    if w.shape[0] != c:
        raise ValueError(f"conv2d_transpose: the filter's first dim ({w.shape[0]}) must be the "
                         f"input's {c} channels")
    groups = int(attrs.get("groups", 1) or 1)
    m = int(w.shape[1]) * groups
    sh, sw = _pair(attrs.get("strides", [1, 1]), "strides")
    dh, dw = _pair(attrs.get("dilations", [1, 1]), "dilations")
    kh, kw = int(w.shape[2]), int(w.shape[3])
    pads = resolve_paddings(attrs.get("paddings", [0, 0]), attrs.get("padding_algorithm",
                                                                     "EXPLICIT"),
                            (h, wd), (kh, kw), (sh, sw), (dh, dw))
    oh = conv_transpose_output_size(h, kh, pads[0], pads[1], sh, dh)
    ow = conv_transpose_output_size(wd, kw, pads[2], pads[3], sw, dw)
    want = [int(v) for v in attrs.get("output_size", []) or []]
    if want:
        if len(want) != 2 or not (oh <= want[0] < oh + sh and ow <= want[1] < ow + sw):
            raise ValueError(f"conv2d_transpose: output_size {want} must be within "
                             f"[{oh}, {oh + sh}) x [{ow}, {ow + sw}) for this input, filter "
                             "and stride")
        oh, ow = want
    conv_attrs = {**attrs, "paddings": list(pads), "padding_algorithm": "EXPLICIT"}
    return (n, m, oh, ow), conv_attrs


_convt_grad_maker = grad_maker(("Input", "Filter"), out_grads=("Output",),
                               in_grads=("Input", "Filter"))


@register("conv2d_transpose", ("Input", "Filter"), ("Output",), _CONVT_ATTRS,
          optional=("Bias",), grad=_convt_grad_maker)
def conv2d_transpose(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Output = the transposed convolution of Input (NCHW) with Filter ``[C, M/groups, KH,
    KW]``: the input gradient of the conv2d that maps Output back to Input."""
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    shape, conv_attrs = _transpose_geometry(x, w, attrs)
    dx = _conv2d_grad({"Input": [xp.empty(shape, dtype=x.dtype)], "Filter": [w],
                       "Output" + GRAD: [x]}, conv_attrs, ("Input" + GRAD,))
    return {"Output": [dx["Input" + GRAD][0]]}


@register("conv2d_transpose_grad", *grad_slots(("Input", "Filter"), ("Output",),
                                               ("Input", "Filter")), _CONVT_ATTRS)
def conv2d_transpose_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dInput = conv2d(dOutput, Filter); dFilter = that conv2d's filter gradient."""
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    shape, conv_attrs = _transpose_geometry(x, w, attrs)
    d = ins["Output" + GRAD][0]
    d = xp.zeros(shape, dtype=x.dtype) if d is None else d
    res = {}
    if "Input" + GRAD in outs:
        res["Input" + GRAD] = _conv2d({"Input": [d], "Filter": [w]}, conv_attrs,
                                      ("Output",))["Output"]
    if "Filter" + GRAD in outs:
        res["Filter" + GRAD] = _conv2d_grad({"Input": [d], "Filter": [w], "Output" + GRAD: [x]},
                                            conv_attrs, ("Filter" + GRAD,))["Filter" + GRAD]
    return res
