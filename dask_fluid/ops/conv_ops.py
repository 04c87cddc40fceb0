"""Image kernels: ``conv2d`` (and ``depthwise_conv2d``) and ``pool2d``, with their gradients.

Layout NCHW, as Fluid 1.8's defaults. Convolution is im2col + one matrix product per group:
the padded input is viewed (no copy) as windows with strides and dilation, copied once into
the column matrix, and multiplied by the filter. On the CPU the images go in batches that keep
the column matrix within a few MiB (it stays in cache). With stride 1 a column-matrix row is a
run of whole padded input rows (long copies; the product carries a few unread columns), and
the input gradient is a convolution too: the output gradient with the flipped, channel-swapped
filter. Otherwise the column gradient is scattered back window offset by window offset
(``KH * KW`` strided adds). The same code runs on numpy and CuPy
(:func:`~.registry.array_module`); ``tests/ops/test_conv_paths.py`` runs every route.

Semantics follow Paddle 1.8's ``conv_op.cc`` and ``math/pooling.cc``:

- ``paddings`` has 2 (``[ph, pw]``) or 4 (``[top, bottom, left, right]``) entries;
  ``padding_algorithm`` ``"SAME"`` pads so that ``OH = ceil(H / stride)`` and resets the
  dilations to 1 (``UpdatePaddingAndDilation``), ``"VALID"`` pads nothing;
- a pooling window is clipped to the input (padding is never part of a max), an ``exclusive``
  average divides by the clipped window's size and a non-exclusive one by ``KH * KW``;
  ``ceil_mode`` rounds the output size up; ``global_pooling`` pools the whole map;
- ``adaptive`` pooling makes ``ksize`` the output size, window ``i`` spanning
  ``[floor(i * H / OH), ceil((i + 1) * H / OH))`` (an average divides by its size);
- the max-pool gradient goes to the first maximum of each window, as Paddle's loop does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .math_ops import double_grad_maker
from .registry import GRAD, array_module, register, set_grad
from .selected_rows import grad_maker, grad_slots

__all__ = ["adaptive_bounds", "conv_output_size", "effective_dilations", "pool_output_size",
           "resolve_paddings"]


def _pair(value: Any, name: str) -> tuple[int, int]:
    values = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value, value])]
    if len(values) != 2:
        raise ValueError(f"{name} must have 2 entries (height, width), got {list(values)}")
    return values[0], values[1]


def resolve_paddings(paddings: Sequence[int], algorithm: str, in_hw: Sequence[int],
                     kernel_hw: Sequence[int], strides: Sequence[int]
                     ) -> tuple[int, int, int, int]:
    """``(top, bottom, left, right)`` from Fluid's ``paddings`` and ``padding_algorithm``.

    As Paddle 1.8's ``UpdatePaddingAndDilation``: ``"SAME"`` spreads ``max((ceil(I / s) - 1)
    * s + k - I, 0)`` with the smaller half first, ``k`` the undilated kernel, because SAME
    also resets a convolution's dilations to 1 (see :func:`effective_dilations`).

    Parameters
    ----------
    paddings : sequence of int
        2 (``[ph, pw]``) or 4 (``[top, bottom, left, right]``) entries (EXPLICIT only).
    algorithm : str
        ``"EXPLICIT"``, ``"SAME"`` or ``"VALID"``.
    in_hw, kernel_hw, strides : sequence of int
        The input's spatial size, the kernel's (undilated) and the strides.

    Returns
    -------
    tuple of int
        ``(top, bottom, left, right)``.
    """
    if algorithm == "VALID":
        return 0, 0, 0, 0
    if algorithm == "SAME":
        out = []
        for size, k, s in zip(in_hw, kernel_hw, strides, strict=True):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
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


def effective_dilations(attrs: dict) -> tuple[int, int]:
    """A convolution's ``(dh, dw)``: the ``dilations`` attr, or ``(1, 1)`` under
    ``padding_algorithm="SAME"`` (Paddle 1.8's ``UpdatePaddingAndDilation`` resets them there:
    a dilated SAME conv computes as an undilated one)."""
    if attrs.get("padding_algorithm", "EXPLICIT") == "SAME":
        return 1, 1
    return _pair(attrs.get("dilations", [1, 1]), "dilations")


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
# channels-last data: the kernels below compute in NCHW; an op whose data_format is "NHWC"
# (Fluid 1.8's conv2d, pool2d and conv2d_transpose take it) has its 4-D tensors transposed to
# NCHW on the way in and back on the way out. Filters keep their [M, C/groups, KH, KW] layout
# whatever the data's, as in Fluid.


def _check_format(op: str, attrs: dict) -> None:
    if attrs.get("data_format", "NCHW") not in ("NCHW", "AnyLayout"):
        raise ValueError(f"{op}: data_format must be 'NCHW' or 'NHWC', got "
                         f"{attrs['data_format']!r}")


def channels_last(kernel: Any, data_in: tuple[str, ...], data_out: tuple[str, ...]) -> Any:
    """``kernel`` (NCHW) for ops whose ``data_format`` may be ``"NHWC"``: the arrays of slots
    ``data_in`` are given to it as NCHW, those it returns in ``data_out`` come back NHWC."""
    def run(ins: dict, attrs: dict, outs: tuple) -> dict:
        if attrs.get("data_format", "NCHW") != "NHWC":
            return kernel(ins, attrs, outs)
        moved = {slot: [_nchw(v) if slot in data_in else v for v in values]
                 for slot, values in ins.items()}
        res = kernel(moved, {**attrs, "data_format": "NCHW"}, outs)
        return {slot: [_nhwc(v) if slot in data_out else v for v in values]
                for slot, values in res.items()}

    run.__doc__ = kernel.__doc__
    return run


def _nchw(a: Any) -> Any:
    if a is None or getattr(a, "ndim", 0) != 4:
        return a
    return array_module(a).ascontiguousarray(a.transpose(0, 3, 1, 2))


def _nhwc(a: Any) -> Any:
    if a is None or getattr(a, "ndim", 0) != 4:
        return a
    return array_module(a).ascontiguousarray(a.transpose(0, 2, 3, 1))


# ---------------------------------------------------------------------------------------------
# conv2d

_CONV_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "EXPLICIT",
               "groups": 1, "dilations": [1, 1], "use_cudnn": True, "data_format": "NCHW",
               "use_mkldnn": False, "exhaustive_search": False, "workspace_size_MB": 512,
               "fuse_relu_before_depthwise_conv": False}


class _ConvGeometry:
    """Everything a conv kernel derives from its input, filter and attrs."""

    def __init__(self, x_shape: tuple, w_shape: tuple, attrs: dict) -> None:
        _check_format("conv2d", attrs)
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
        self.dh, self.dw = effective_dilations(attrs)
        self.pads = resolve_paddings(attrs.get("paddings", [0, 0]),
                                     attrs.get("padding_algorithm", "EXPLICIT"),
                                     (self.h, self.w), (self.kh, self.kw), (self.sh, self.sw))
        self.oh = conv_output_size(self.h, self.kh, self.pads[0], self.pads[1], self.sh,
                                   self.dh)
        self.ow = conv_output_size(self.w, self.kw, self.pads[2], self.pads[3], self.sw,
                                   self.dw)
        if self.oh <= 0 or self.ow <= 0:
            raise ValueError(f"conv2d: the output of input {list(x_shape)} with filter "
                             f"{list(w_shape)} would be {self.oh}x{self.ow}; check the "
                             "filter size, paddings, strides and dilations")
        top, bottom, left, right = self.pads
        self.hp, self.wp = self.h + top + bottom, self.w + left + right
        #: the columns of one output row: OW, or with stride 1 (and few wasted columns) the
        #: padded input's width, so that each column-matrix row is a run of whole padded
        #: input rows (a long copy instead of OW-long ones: 2x faster on 32x32 maps); the
        #: products then carry ``wp - ow`` columns per row that nobody reads
        self.row = (self.wp if (self.sh, self.sw) == (1, 1) and self.wp <= self.ow * _ROW_RATIO
                    else self.ow)

    def columns(self, xp: Any, x: Any) -> Any:
        """``[G, C/G*KH*KW, n*OH*row]`` for ``x`` of ``n`` images: the windows of each group as
        columns. The copy walks the input along its rows, which is what makes it fast."""
        n = x.shape[0]
        if self.row != self.ow:
            return self._row_columns(xp, x)
        xp_ = _pad(xp, x, self.pads)
        win = _windows(xp, xp_, self.oh, self.ow, self.kh, self.kw, self.sh, self.sw, self.dh,
                       self.dw)
        g, cg = self.groups, self.c // self.groups
        win = win.reshape(n, g, cg, self.oh, self.ow, self.kh, self.kw)
        cols = win.transpose(1, 2, 5, 6, 0, 3, 4)  # G, C/G, KH, KW, n, OH, OW
        return xp.ascontiguousarray(cols).reshape(g, cg * self.kh * self.kw,
                                                  n * self.oh * self.ow)

    def _row_columns(self, xp: Any, x: Any) -> Any:
        """Stride 1: column ``(h, w)`` of window offset ``(i, j)`` is padded input element
        ``h * wp + w + i*dh*wp + j*dw``, so each row of the matrix is one strided run per
        image. The runs of the last window offsets reach ``dw*(KW-1)`` elements past an
        image (into the next channel, or a zeroed tail): only the unread columns see them."""
        n, (top, bottom, left, right) = x.shape[0], self.pads
        hp, wp, size = self.hp, self.wp, self.c * self.hp * self.wp
        tail = self.dw * (self.kw - 1)
        buf = xp.empty(n * size + tail, dtype=x.dtype)
        img = buf[:n * size].reshape(n, self.c, hp, wp)
        img[:, :, :top] = 0
        img[:, :, hp - bottom:] = 0
        img[:, :, :, :left] = 0
        img[:, :, :, wp - right:] = 0
        buf[n * size:] = 0
        img[:, :, top:top + self.h, left:left + self.w] = x
        it = buf.itemsize
        g, cg = self.groups, self.c // self.groups
        runs = xp.lib.stride_tricks.as_strided(
            buf, (g, cg, self.kh, self.kw, n, self.oh * wp),
            (cg * hp * wp * it, hp * wp * it, self.dh * wp * it, self.dw * it, size * it, it))
        return xp.ascontiguousarray(runs).reshape(g, cg * self.kh * self.kw,
                                                  n * self.oh * wp)

    def batches(self, xp: Any, itemsize: int) -> list[slice]:
        """The images taken together: on the CPU, as many as keep a column matrix within
        :data:`_COLUMN_BYTES` (it and its product stay in cache, and freed blocks are reused
        instead of faulted in afresh: a 16-channel 3x3 conv of 32 images goes in 6 batches,
        25% faster than in one); on a GPU, all of them."""
        per_image = self.c * self.kh * self.kw * self.oh * self.row * itemsize
        step = self.n if xp is not np else max(1, _COLUMN_BYTES // per_image)
        return [slice(i, min(i + step, self.n)) for i in range(0, self.n, step)]

    def filters(self, w: Any) -> Any:
        """``[G, M/G, C/G*KH*KW]``."""
        return w.reshape(self.groups, self.m // self.groups, -1)

    def output_grad(self, xp: Any, dout: Any) -> Any:
        """NCHW ``[n, M, OH, OW]`` as ``[G, M/G, n*OH*row]`` (zeros in the unread columns)."""
        d = dout.transpose(1, 0, 2, 3)
        if self.row == self.ow:
            d = xp.ascontiguousarray(d)
        else:
            wide = xp.zeros((self.m, dout.shape[0], self.oh, self.row), dtype=dout.dtype)
            wide[..., :self.ow] = d
            d = wide
        return d.reshape(self.groups, self.m // self.groups, -1)

    def output(self, part: Any) -> Any:
        """A product ``[G, M/G, n*OH*row]`` as NCHW ``[n, M, OH, OW]`` (a view)."""
        out = part.reshape(self.m, -1, self.oh, self.row)[..., :self.ow]
        return out.transpose(1, 0, 2, 3)


#: the input gradient is a convolution while the input's area is at most this many times the
#: output's (see :func:`_input_grad_as_conv`)
_AS_CONV_AREA = 1.5
#: whole padded rows make the columns while the padded width is at most this many times the
#: output's (see :attr:`_ConvGeometry.row`)
_ROW_RATIO = 1.1
#: the most bytes of a CPU column matrix (see :meth:`_ConvGeometry.batches`)
_COLUMN_BYTES = 4 << 20

_conv_grad_maker = grad_maker(("Input", "Filter"), out_grads=("Output",),
                              in_grads=("Input", "Filter"))
_CONV_GRAD_SLOTS = grad_slots(("Input", "Filter"), ("Output",), ("Input", "Filter"))


def _correlate(xp: Any, geo: _ConvGeometry, x: Any, w: Any) -> Any:
    """NCHW ``[N, M, OH, OW]``: ``x`` correlated with ``w`` as ``geo`` says, one column
    matrix and one product per batch of images."""
    f = geo.filters(w)
    out = xp.empty((geo.n, geo.m, geo.oh, geo.ow), dtype=xp.result_type(x.dtype, w.dtype))
    for b in geo.batches(xp, x.dtype.itemsize):
        out[b] = geo.output(xp.matmul(f, geo.columns(xp, x[b])))
    return out


def _conv2d(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Output = conv(Input, Filter): NCHW input, ``[M, C/groups, KH, KW]`` filter."""
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    return {"Output": [_correlate(xp, _ConvGeometry(x.shape, w.shape, attrs), x, w)]}


def _conv2d_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    geo = _ConvGeometry(x.shape, w.shape, attrs)
    dout = ins["Output" + GRAD][0]
    if dout is None:
        dout = xp.zeros((geo.n, geo.m, geo.oh, geo.ow), dtype=x.dtype)
    res = {}
    if "Filter" + GRAD in outs:
        dw = xp.zeros((geo.groups, geo.m // geo.groups, w[0].size), dtype=w.dtype)
        for b in geo.batches(xp, x.dtype.itemsize):
            dw += xp.matmul(geo.output_grad(xp, dout[b]),
                            geo.columns(xp, x[b]).transpose(0, 2, 1))
        res["Filter" + GRAD] = [dw.reshape(w.shape)]
    if "Input" + GRAD in outs:
        dx = _input_grad_as_conv(xp, dout, w, geo)
        res["Input" + GRAD] = [_input_grad_scattered(xp, dout, w, geo) if dx is None else dx]
    return res


def _input_grad_as_conv(xp: Any, dout: Any, w: Any, geo: _ConvGeometry) -> Any | None:
    """With stride 1 the input gradient is itself a convolution: ``dout`` correlated with the
    filter flipped in space and with its channel axes swapped per group, padded by the
    kernel's extent less the forward padding. That is one column matrix and one product
    instead of ``KH * KW`` strided adds of short rows (4x faster on a 16-channel 3x3 conv).
    None where it does not apply (a stride, or a padding wider than the kernel's extent) or
    does not pay (an output much smaller than the input: see :data:`_AS_CONV_AREA`)."""
    if (geo.sh, geo.sw) != (1, 1):
        return None
    top, bottom, left, right = geo.pads
    eh, ew = geo.dh * (geo.kh - 1), geo.dw * (geo.kw - 1)
    pads = [eh - top, eh - bottom, ew - left, ew - right]
    # the padded gradient is larger than the output: past a point, multiplying its zeros
    # costs more than the scatter's short adds (dist_mnist's 5x5 conv of an 8x8 map)
    if min(pads) < 0 or geo.h * geo.w > _AS_CONV_AREA * geo.oh * geo.ow:
        return None
    g = geo.groups
    # [M, C/G, KH, KW] -> [G, C/G, M/G, KH, KW] -> [C, M/G, KH, KW], flipped
    flipped = w.reshape(g, geo.m // g, geo.c // g, geo.kh, geo.kw).transpose(0, 2, 1, 3, 4)
    flipped = xp.ascontiguousarray(
        flipped.reshape(geo.c, geo.m // g, geo.kh, geo.kw)[:, :, ::-1, ::-1])
    back = _ConvGeometry(dout.shape, flipped.shape,
                         {"groups": g, "paddings": pads, "dilations": [geo.dh, geo.dw]})
    return _correlate(xp, back, dout, flipped)


def _input_grad_scattered(xp: Any, dout: Any, w: Any, geo: _ConvGeometry) -> Any:
    """The input gradient of a strided conv: the column gradient scattered back, window
    offset by window offset."""
    g, cg = geo.groups, geo.c // geo.groups
    dcols = xp.matmul(geo.filters(w).transpose(0, 2, 1),
                      geo.output_grad(xp, dout))  # G, C/G*KH*KW, N*OH*row
    dcols = dcols.reshape(g * cg, geo.kh, geo.kw, geo.n, geo.oh, geo.row)[..., :geo.ow]
    top, bottom, left, right = geo.pads
    # scatter in the columns' [C, N, H, W] order (contiguous adds), transpose once
    dxp = xp.zeros((geo.c, geo.n, geo.h + top + bottom, geo.w + left + right), dtype=dout.dtype)
    for i in range(geo.kh):
        for j in range(geo.kw):
            hi, wj = i * geo.dh, j * geo.dw
            dxp[:, :, hi:hi + geo.sh * (geo.oh - 1) + 1:geo.sh,
                wj:wj + geo.sw * (geo.ow - 1) + 1:geo.sw] += dcols[:, i, j]
    dx = dxp[:, :, top:top + geo.h, left:left + geo.w].transpose(1, 0, 2, 3)
    return xp.ascontiguousarray(dx)


_conv2d_any = channels_last(_conv2d, ("Input",), ("Output",))
_conv2d_grad_any = channels_last(_conv2d_grad, ("Input", "Output" + GRAD), ("Input" + GRAD,))
for _type in ("conv2d", "depthwise_conv2d"):
    register(_type, ("Input", "Filter"), ("Output",), _CONV_ATTRS, optional=("Bias",),
             grad=_conv_grad_maker)(_conv2d_any)
    register(_type + "_grad", *_CONV_GRAD_SLOTS, _CONV_ATTRS)(_conv2d_grad_any)


def register_conv_grad_grad(type: str, conv: Any, conv_grad: Any, attrs: dict) -> None:
    """Give ``<type>_grad`` its grad op ``<type>_grad_grad`` (conv_op.cc's
    Conv2DDoubleGradMaker / Conv3DDoubleGradMaker), computed by the forward and grad kernels
    ``conv`` and ``conv_grad`` (any data_format: they handle it).

    conv_grad is bilinear: dInput = conv^T(dOutput, Filter), dFilter = corr(Input, dOutput).
    So DDOutput = conv(DDInput, Filter) + conv(Input, DDFilter), DInput = conv^T(dOutput,
    DDFilter), DFilter = corr(DDInput, dOutput)."""
    def grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
        x, w = ins["Input"][0], ins["Filter"][0]
        xp = array_module(x, w)
        ddx, ddw = (ins.get("DDInput") or [None])[0], (ins.get("DDFilter") or [None])[0]
        dout = (ins.get("DOutput") or [None])[0]
        res = {}
        if "DDOutput" in outs:
            parts = [conv({"Input": [a], "Filter": [b]}, attrs, ("Output",))["Output"][0]
                     for a, b in ((ddx, w), (x, ddw)) if a is not None and b is not None]
            if not parts:  # neither gradient reached: the shape from a conv of zeros
                parts = [xp.zeros_like(conv({"Input": [x], "Filter": [w]}, attrs,
                                            ("Output",))["Output"][0])]
            res["DDOutput"] = [sum(parts[1:], parts[0])]
        if "DInput" in outs:
            res["DInput"] = [xp.zeros(x.shape, x.dtype) if ddw is None or dout is None else
                             conv_grad({"Input": [x], "Filter": [ddw], "Output" + GRAD: [dout]},
                                       attrs, ("Input" + GRAD,))["Input" + GRAD][0]]
        if "DFilter" in outs:
            res["DFilter"] = [xp.zeros(w.shape, w.dtype) if ddx is None or dout is None else
                              conv_grad({"Input": [ddx], "Filter": [w],
                                         "Output" + GRAD: [dout]},
                                        attrs, ("Filter" + GRAD,))["Filter" + GRAD][0]]
        return res

    set_grad(type + "_grad", double_grad_maker(
        type + "_grad_grad",
        {"Input": "Input", "Filter": "Filter", "DOutput": "Output" + GRAD},
        {"DDInput": "Input" + GRAD, "DDFilter": "Filter" + GRAD},
        {"DDOutput": "Output" + GRAD, "DInput": "Input", "DFilter": "Filter"}))
    register(type + "_grad_grad", ("Input", "Filter", "DOutput", "DDInput", "DDFilter"),
             ("DDOutput", "DInput", "DFilter"), attrs,
             optional=("DOutput", "DDInput", "DDFilter"))(grad_grad)


for _type in ("conv2d", "depthwise_conv2d"):
    register_conv_grad_grad(_type, _conv2d_any, _conv2d_grad_any, _CONV_ATTRS)


# ---------------------------------------------------------------------------------------------
# pool2d

_POOL_ATTRS = {"pooling_type": "max", "ksize": [1, 1], "global_pooling": False,
               "strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "EXPLICIT",
               "exclusive": True, "adaptive": False, "ceil_mode": False, "use_cudnn": True,
               "data_format": "NCHW", "use_mkldnn": False, "use_quantizer": False}


class _PoolGeometry:
    def __init__(self, x_shape: tuple, attrs: dict) -> None:
        _check_format("pool2d", attrs)
        if len(x_shape) != 4:
            raise ValueError(f"pool2d needs a 4-D NCHW input, got {list(x_shape)}")
        self.type = attrs.get("pooling_type", "max")
        if self.type not in ("max", "avg"):
            raise ValueError(f"pooling_type must be 'max' or 'avg', got {self.type!r}")
        self.n, self.c, self.h, self.w = (int(d) for d in x_shape)
        self.adaptive = bool(attrs.get("adaptive", False))
        self.exclusive = bool(attrs.get("exclusive", True))
        if self.adaptive:
            # Paddle's InferShape: the output is ksize (the whole map's size under
            # global_pooling); strides, paddings and ceil_mode play no part
            if attrs.get("global_pooling"):
                self.oh, self.ow = self.h, self.w
            else:
                self.oh, self.ow = _pair(attrs.get("ksize", [1, 1]), "ksize")
            if self.oh <= 0 or self.ow <= 0:
                raise ValueError(f"pool2d: adaptive pooling needs a positive output size "
                                 f"(ksize), got {[self.oh, self.ow]}")
            self.kh, self.kw, self.sh, self.sw = self.oh, self.ow, 1, 1
            self.pads = (0, 0, 0, 0)
            self.rows = adaptive_bounds(self.h, self.oh)
            self.cols = adaptive_bounds(self.w, self.ow)
            return
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
        top, _, left, _ = self.pads
        # the padded extent every window fits in (ceil_mode windows may reach past the padding)
        self.ph = max(self.h + top + self.pads[1], (self.oh - 1) * self.sh + self.kh)
        self.pw = max(self.w + left + self.pads[3], (self.ow - 1) * self.sw + self.kw)

    def padded(self, xp: Any, x: Any, value: float) -> Any:
        top, _, left, _ = self.pads
        return _pad(xp, x, (top, self.ph - self.h - top, left, self.pw - self.w - left), value)

    def whole(self) -> bool:
        """One window that is the whole map (global pooling, or a kernel that size)."""
        if self.adaptive:
            return (self.oh, self.ow) == (1, 1)
        return (self.kh, self.kw, self.oh, self.ow) == (self.h, self.w, 1, 1) and \
            not any(self.pads)

    def adaptive_windows(self) -> list[tuple[int, int, slice, slice]]:
        """``(i, j, rows, cols)`` of every adaptive window, in output order."""
        return [(i, j, slice(*self.rows[i]), slice(*self.cols[j]))
                for i in range(self.oh) for j in range(self.ow)]

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


def adaptive_bounds(size: int, out: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each of the ``out`` adaptive windows over ``size`` positions, as
    Paddle 1.8's ``AdaptStartIndex`` / ``AdaptEndIndex``: ``floor(i * size / out)`` to
    ``ceil((i + 1) * size / out)`` (neighbouring windows may overlap)."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _adaptive_forward(xp: Any, x: Any, geo: _PoolGeometry) -> Any:
    """Adaptive max or average pooling: one reduction per output position (the windows
    differ in size, so no strided view covers them). The average divides by the window's
    size, as Paddle does whatever ``exclusive`` says."""
    out = xp.empty((geo.n, geo.c, geo.oh, geo.ow), dtype=x.dtype)
    for i, j, rows, cols in geo.adaptive_windows():
        win = x[:, :, rows, cols]
        out[:, :, i, j] = win.max(axis=(2, 3)) if geo.type == "max" else win.mean(axis=(2, 3))
    return out


def _adaptive_backward(xp: Any, x: Any, dout: Any, geo: _PoolGeometry) -> Any:
    """The input gradient of adaptive pooling: a max window's gradient goes to its first
    maximum in row-major order (Paddle's loop stops there), an average window's is shared
    evenly; overlapping windows add up."""
    dx = xp.zeros_like(x)
    for i, j, rows, cols in geo.adaptive_windows():
        d = dout[:, :, i, j]
        if geo.type == "max":
            win = x[:, :, rows, cols]
            flat = win.reshape(geo.n, geo.c, -1)
            hit = xp.zeros_like(flat)
            xp.put_along_axis(hit, flat.argmax(axis=2)[..., None], d[..., None], axis=2)
            dx[:, :, rows, cols] += hit.reshape(win.shape)
        else:
            size = (rows.stop - rows.start) * (cols.stop - cols.start)
            dx[:, :, rows, cols] += (d / x.dtype.type(size))[:, :, None, None]
    return dx


def _lowest(dtype: Any) -> float:
    return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min


def pool2d(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Max or average pooling of an NCHW input (see the module docstring for the rules)."""
    x = ins["X"][0]
    xp = array_module(x)
    geo = _PoolGeometry(x.shape, attrs)
    if geo.whole():
        reduce = x.max if geo.type == "max" else x.mean
        return {"Out": [reduce(axis=(2, 3), keepdims=True)]}
    if geo.adaptive:
        return {"Out": [_adaptive_forward(xp, x, geo)]}
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
    if geo.adaptive:
        return {"X" + GRAD: [_adaptive_backward(xp, x, dout, geo)]}
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


register("pool2d", ("X",), ("Out",), _POOL_ATTRS, grad=grad_maker(("X", "Out"), in_grads=("X",)))(
    channels_last(pool2d, ("X",), ("Out",)))
register("pool2d_grad", *grad_slots(("X", "Out"), ("Out",), ("X",)), _POOL_ATTRS)(
    channels_last(pool2d_grad, ("X", "Out", "Out" + GRAD), ("X" + GRAD,)))


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
    dh, dw = effective_dilations(attrs)
    kh, kw = int(w.shape[2]), int(w.shape[3])
    # SAME pads by the transposed op's input (the small side), as conv_transpose_op.cc
    pads = resolve_paddings(attrs.get("paddings", [0, 0]), attrs.get("padding_algorithm",
                                                                     "EXPLICIT"),
                            (h, wd), (kh, kw), (sh, sw))
    oh = conv_transpose_output_size(h, kh, pads[0], pads[1], sh, dh)
    ow = conv_transpose_output_size(wd, kw, pads[2], pads[3], sw, dw)
    want = [int(v) for v in attrs.get("output_size", []) or []]
    if want:
        if len(want) != 2 or not (oh <= want[0] < oh + sh and ow <= want[1] < ow + sw):
            raise ValueError(f"conv2d_transpose: output_size {want} must be within "
                             f"[{oh}, {oh + sh}) x [{ow}, {ow + sw}) for this input, filter "
                             "and stride")
        oh, ow = want
    conv_attrs = {**attrs, "paddings": list(pads), "padding_algorithm": "EXPLICIT",
                  "dilations": [dh, dw]}
    return (n, m, oh, ow), conv_attrs


_convt_grad_maker = grad_maker(("Input", "Filter"), out_grads=("Output",),
                               in_grads=("Input", "Filter"))


def conv2d_transpose(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Output = the transposed convolution of Input (NCHW) with Filter ``[C, M/groups, KH,
    KW]``: the input gradient of the conv2d that maps Output back to Input."""
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    shape, conv_attrs = _transpose_geometry(x, w, attrs)
    dx = _conv2d_grad({"Input": [xp.empty(shape, dtype=x.dtype)], "Filter": [w],
                       "Output" + GRAD: [x]}, conv_attrs, ("Input" + GRAD,))
    return {"Output": [dx["Input" + GRAD][0]]}


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


# depthwise_conv2d_transpose is what Fluid 1.8's layers.conv2d_transpose emits for groups ==
# input channels == num_filters without cuDNN; its CPU kernels are conv2d_transpose's
# (conv_transpose_op.cc registers GemmConvTransposeKernel for both), so is its math here
for _type in ("conv2d_transpose", "depthwise_conv2d_transpose"):
    register(_type, ("Input", "Filter"), ("Output",), _CONVT_ATTRS, optional=("Bias",),
             grad=_convt_grad_maker)(channels_last(conv2d_transpose, ("Input",), ("Output",)))
    register(_type + "_grad", *grad_slots(("Input", "Filter"), ("Output",),
                                          ("Input", "Filter")), _CONVT_ATTRS)(
        channels_last(conv2d_transpose_grad, ("Input", "Output" + GRAD), ("Input" + GRAD,)))
