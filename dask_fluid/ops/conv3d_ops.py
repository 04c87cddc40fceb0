"""3-D convolution and pooling kernels of Fluid 1.8: conv3d, conv3d_transpose, pool3d and
max_pool3d_with_index (and their gradients).

Layout NCDHW (``NDHWC`` inputs are transposed to it and back). The maths follow Paddle 1.8's
``conv_op.h`` (vol2col + one matrix product per group), ``conv_transpose_op.h`` (col2vol),
``pool_op.h`` and ``math/pooling.cc``:

- ``paddings`` has 3 (``[pd, ph, pw]``) or 6 (``[front, back, top, bottom, left, right]``)
  entries; ``padding_algorithm`` ``"SAME"`` pads so that ``O = ceil(I / stride)`` and, for the
  convolutions, resets the dilations to 1 (``UpdatePaddingAndDilation``); ``"VALID"`` pads
  nothing; global and adaptive pooling ignore the paddings (``UpdatePadding``);
- the convolution is im2col: the padded input is viewed (no copy) as ``[N, C, OD, OH, OW,
  KD, KH, KW]`` windows, copied once into the column matrix and multiplied by the filter;
  its input gradient scatters the column gradient back kernel offset by kernel offset;
- a pooling window ``o`` of a dim spans ``[max(o*s - p, 0), min(o*s - p + k, size))`` (the
  padding is never part of a max, only the leading padding places the windows, as Paddle's
  loop does), or ``[floor(o*size/O), ceil((o+1)*size/O))`` when ``adaptive``;
- an average divides by the clipped window's size (``exclusive`` or ``adaptive``) or by
  ``KD*KH*KW``: both are products of one factor per dim, so an average pooling is three
  small matrix products, one per spatial dim, and its gradient the transposed products;
- a max takes the first maximum of its window in ``(d, h, w)`` row-major order (Paddle's
  ``MaxPool3dGradFunctor`` stops there, ``MaxPool3dWithIndexFunctor`` keeps the first
  strictly greater element): the windows are gathered, padded to the longest window of each
  dim by repeating its last element, and reduced with ``argmax``; the gradient is one
  weighted ``bincount`` of those positions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .conv_ops import (
    adaptive_bounds,
    conv_output_size,
    conv_transpose_output_size,
    pool_output_size,
    register_conv_grad_grad,
)
from .registry import GRAD, array_module, register
from .selected_rows import grad_maker, grad_slots

__all__ = ["resolve_paddings_3d"]

_DIMS = 3
_CHANNEL_FIRST = ("NCDHW", "NCHW", "AnyLayout")
_CHANNEL_LAST = ("NDHWC", "NHWC")
#: the most bytes of a CPU column matrix (see :meth:`_Geometry.batches`)
_COLUMN_BYTES = 16 << 20


def _triple(value: Any, name: str, op: str) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * _DIMS
    if len(values) != _DIMS:
        raise ValueError(f"{op}: {name} must have {_DIMS} entries (depth, height, width), got "
                         f"{values}")
    return [int(v) for v in values]


def resolve_paddings_3d(paddings: Sequence[int], algorithm: str, sizes: Sequence[int],
                        ksize: Sequence[int], strides: Sequence[int],
                        op: str = "conv3d") -> list[tuple[int, int]]:
    """``[(front, back), (top, bottom), (left, right)]`` from Fluid's ``paddings`` (3 or 6
    entries) and ``padding_algorithm``, as Paddle 1.8's ``UpdatePaddingAndDilation``:
    ``"SAME"`` spreads ``max((ceil(I/s) - 1)*s + k - I, 0)`` with the smaller half first
    (``ksize`` is the undilated kernel: SAME also resets the dilations to 1)."""
    if algorithm == "VALID":
        return [(0, 0)] * _DIMS
    if algorithm == "SAME":
        out = []
        for size, k, s in zip(sizes, ksize, strides, strict=True):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            out.append((total // 2, total - total // 2))
        return out
    if algorithm != "EXPLICIT":
        raise ValueError(f"{op}: padding_algorithm must be 'EXPLICIT', 'SAME' or 'VALID', got "
                         f"{algorithm!r}")
    p = [int(v) for v in paddings]
    if len(p) == _DIMS:
        return [(v, v) for v in p]
    if len(p) == 2 * _DIMS:
        return [(p[2 * i], p[2 * i + 1]) for i in range(_DIMS)]
    raise ValueError(f"{op}: paddings must have 3 or 6 entries, got {p}")


def _channel_last(attrs: dict, op: str) -> bool:
    fmt = attrs.get("data_format", "NCDHW")
    if fmt in _CHANNEL_FIRST:
        return False
    if fmt in _CHANNEL_LAST:
        return True
    raise ValueError(f"{op}: data_format must be 'NCDHW' or 'NDHWC', got {fmt!r}")


def _first(a: Any) -> Any:
    """NDHWC -> NCDHW (a view)."""
    return a.transpose(0, 4, 1, 2, 3)


def _last(xp: Any, a: Any) -> Any:
    """NCDHW -> NDHWC."""
    return xp.ascontiguousarray(a.transpose(0, 2, 3, 4, 1))


def _offsets(ks: Sequence[int]) -> list[tuple[int, ...]]:
    """Kernel offsets in Paddle's row-major order."""
    return list(itertools.product(*(range(k) for k in ks)))


# ---------------------------------------------------------------------------------------------
# conv3d

_CONV_ATTRS = {"strides": [1, 1, 1], "paddings": [0, 0, 0], "padding_algorithm": "EXPLICIT",
               "groups": 1, "dilations": [1, 1, 1], "use_cudnn": True, "data_format": "NCDHW",
               "use_mkldnn": False, "exhaustive_search": False, "workspace_size_MB": 512}


class _Geometry:
    """A grouped, strided, dilated 3-D correlation of ``[N, C, *S]`` with ``[M, C/G, *K]``
    (channel-first shapes) and resolved paddings."""

    def __init__(self, x_shape: tuple, w_shape: tuple, groups: int, strides: list[int],
                 dilations: list[int], pads: list[tuple[int, int]], op: str) -> None:
        if len(x_shape) != 2 + _DIMS or len(w_shape) != 2 + _DIMS:
            raise ValueError(f"{op} needs a 5-D input and filter, got shapes {list(x_shape)} "
                             f"and {list(w_shape)}")
        self.n, self.c, *self.sizes = (int(d) for d in x_shape)
        self.m, cg, *self.ks = (int(d) for d in w_shape)
        self.groups = groups
        if groups <= 0 or self.c % groups or self.m % groups or cg != self.c // groups:
            raise ValueError(f"{op}: input channels {self.c} and filters {self.m} must split "
                             f"into groups={groups}, and the filter's channels ({cg}) must be "
                             f"{self.c} / groups")
        self.strides, self.dilations, self.pads = strides, dilations, pads
        self.outs = [conv_output_size(i, k, b, a, s, d) for i, k, (b, a), s, d in
                     zip(self.sizes, self.ks, pads, strides, dilations, strict=True)]
        if min(self.outs) <= 0:
            raise ValueError(f"{op}: input {list(x_shape)} with filter {list(w_shape)}, "
                             f"paddings {pads}, strides {strides} and dilations {dilations} "
                             f"leaves an output of {self.outs}")

    @classmethod
    def from_attrs(cls, x_shape: tuple, w_shape: tuple, attrs: dict, op: str) -> _Geometry:
        strides = _triple(attrs.get("strides", [1, 1, 1]), "strides", op)
        dilations = _triple(attrs.get("dilations", [1, 1, 1]), "dilations", op)
        algorithm = attrs.get("padding_algorithm", "EXPLICIT")
        sizes, ks = [int(d) for d in x_shape[2:]], [int(d) for d in w_shape[2:]]
        pads = resolve_paddings_3d(attrs.get("paddings", [0, 0, 0]), algorithm, sizes, ks,
                                   strides, op)
        if algorithm == "SAME":
            dilations = [1] * _DIMS
        return cls(x_shape, w_shape, int(attrs.get("groups", 1) or 1), strides, dilations,
                   pads, op)

    def columns(self, xp: Any, x: Any) -> Any:
        """``[G, C/G*KD*KH*KW, N*OD*OH*OW]``: every window of each group as a column."""
        xpad = xp.pad(x, ((0, 0), (0, 0), *self.pads)) if any(map(any, self.pads)) else \
            xp.ascontiguousarray(x)
        st = xpad.strides
        win = xp.lib.stride_tricks.as_strided(
            xpad, (x.shape[0], self.c, *self.outs, *self.ks),
            (st[0], st[1], *(st[2 + i] * self.strides[i] for i in range(_DIMS)),
             *(st[2 + i] * self.dilations[i] for i in range(_DIMS))))
        g, n = self.groups, x.shape[0]
        win = win.reshape(n, g, self.c // g, *self.outs, *self.ks)
        cols = win.transpose(1, 2, 6, 7, 8, 0, 3, 4, 5)  # G, C/G, KD, KH, KW, N, OD, OH, OW
        return xp.ascontiguousarray(cols).reshape(g, -1, n * math.prod(self.outs))

    def filters(self, w: Any) -> Any:
        return w.reshape(self.groups, self.m // self.groups, -1)

    def grouped_output(self, xp: Any, dout: Any) -> Any:
        """``[N, M, *O]`` as ``[G, M/G, N*OD*OH*OW]``."""
        d = xp.ascontiguousarray(dout.transpose(1, 0, 2, 3, 4))
        return d.reshape(self.groups, self.m // self.groups, -1)

    def batches(self, xp: Any, itemsize: int) -> list[slice]:
        """The images taken together: on the CPU as many as keep a column matrix within
        :data:`_COLUMN_BYTES` (a 3-D column matrix is ``KD*KH*KW`` times the input: one of
        a whole batch would not fit in memory), on a GPU all of them."""
        per_image = self.c * math.prod(self.ks) * math.prod(self.outs) * itemsize
        step = self.n if xp is not np else max(1, _COLUMN_BYTES // per_image)
        return [slice(i, min(i + step, self.n)) for i in range(0, self.n, step)]

    def forward(self, xp: Any, x: Any, w: Any) -> Any:
        out = xp.empty((self.n, self.m, *self.outs), dtype=xp.result_type(x.dtype, w.dtype))
        for b in self.batches(xp, x.dtype.itemsize):
            prod = xp.matmul(self.filters(w), self.columns(xp, x[b]))
            out[b] = prod.reshape(self.m, -1, *self.outs).transpose(1, 0, 2, 3, 4)
        return out

    def filter_grad(self, xp: Any, x: Any, dout: Any, w_shape: tuple) -> Any:
        dw = None
        for b in self.batches(xp, x.dtype.itemsize):
            part = xp.matmul(self.grouped_output(xp, dout[b]),
                             self.columns(xp, x[b]).transpose(0, 2, 1))
            dw = part if dw is None else dw + part
        return dw.reshape(w_shape)

    def input_grad(self, xp: Any, dout: Any, w: Any) -> Any:
        dx = xp.empty((self.n, self.c, *self.sizes), dtype=xp.result_type(dout.dtype, w.dtype))
        for b in self.batches(xp, dout.dtype.itemsize):
            dx[b] = self._input_grad(xp, dout[b], w)
        return dx

    def _input_grad(self, xp: Any, dout: Any, w: Any) -> Any:
        """The column gradient scattered back (Paddle's col2vol), kernel offset by offset."""
        n = dout.shape[0]
        dcols = xp.matmul(self.filters(w).transpose(0, 2, 1), self.grouped_output(xp, dout))
        dcols = dcols.reshape(self.c, *self.ks, n, *self.outs)
        padded = [s + b + a for s, (b, a) in zip(self.sizes, self.pads, strict=True)]
        # scatter in the columns' [C, N, ...] order (contiguous adds), transpose once
        dxp = xp.zeros((self.c, n, *padded), dtype=dcols.dtype)
        for off in _offsets(self.ks):
            idx = tuple(slice(o * d, o * d + s * (n - 1) + 1, s) for o, d, s, n in
                        zip(off, self.dilations, self.strides, self.outs, strict=True))
            dxp[(slice(None), slice(None), *idx)] += dcols[(slice(None), *off)]
        crop = tuple(slice(b, b + s) for s, (b, _) in zip(self.sizes, self.pads, strict=True))
        return dxp[(slice(None), slice(None), *crop)].transpose(1, 0, 2, 3, 4)


def _out_grad(ins: dict, slot: str, shape: tuple, xp: Any, dtype: Any) -> Any:
    d = ins.get(slot + GRAD, [None])[0]
    return xp.zeros(shape, dtype=dtype) if d is None else d


@register("conv3d", ("Input", "Filter"), ("Output",), _CONV_ATTRS,
          grad=grad_maker(("Input", "Filter"), ("Output",), ("Input", "Filter")))
def conv3d(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Output = Input (NCDHW) correlated with Filter ``[M, C/groups, KD, KH, KW]``."""
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    last = _channel_last(attrs, "conv3d")
    x = _first(x) if last else x
    out = _Geometry.from_attrs(x.shape, w.shape, attrs, "conv3d").forward(xp, x, w)
    return {"Output": [_last(xp, out) if last else out]}


@register("conv3d_grad", *grad_slots(("Input", "Filter"), ("Output",), ("Input", "Filter")),
          _CONV_ATTRS)
def conv3d_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    last = _channel_last(attrs, "conv3d")
    x = _first(x) if last else x
    geo = _Geometry.from_attrs(x.shape, w.shape, attrs, "conv3d")
    dout = _out_grad(ins, "Output", (geo.n, geo.m, *geo.outs), xp, x.dtype)
    dout = _first(dout) if last and ins.get("Output" + GRAD, [None])[0] is not None else dout
    res = {}
    if "Filter" + GRAD in outs:
        res["Filter" + GRAD] = [geo.filter_grad(xp, x, dout, w.shape)]
    if "Input" + GRAD in outs:
        dx = geo.input_grad(xp, dout, w)
        res["Input" + GRAD] = [_last(xp, dx) if last else dx]
    return res


# conv3d_grad's grad op as conv2d's (conv_op.cc: Conv3DDoubleGradMaker, conv3d_grad_grad, in
# Paddle since 1.6)
register_conv_grad_grad("conv3d", conv3d, conv3d_grad, _CONV_ATTRS)


# ---------------------------------------------------------------------------------------------
# conv3d_transpose: the input gradient of a conv3d, as an op (Paddle 1.8's conv_transpose_op)

_CONVT_ATTRS = {"strides": [1, 1, 1], "paddings": [0, 0, 0], "padding_algorithm": "EXPLICIT",
                "groups": 1, "dilations": [1, 1, 1], "output_size": [], "use_cudnn": True,
                "data_format": "AnyLayout", "use_mkldnn": False, "workspace_size_MB": 512}


def _transpose_geometry(x_shape: tuple, w_shape: tuple, attrs: dict) -> _Geometry:
    """The conv3d that maps this op's Output (``[N, M, *O]``) back to its Input: the filter
    ``[C, M/groups, *K]`` is that conv's ``[M', C'/groups, *K]``. ``O = (I - 1)*s - pads +
    d*(k - 1) + 1``, or ``output_size`` within ``[that, that + s)`` (conv_transpose_op.cc's
    InferShape)."""
    op = "conv3d_transpose"
    if len(x_shape) != 2 + _DIMS or len(w_shape) != 2 + _DIMS:
        raise ValueError(f"{op} needs a 5-D input and filter, got shapes {list(x_shape)} and "
                         f"{list(w_shape)}")
    n, c, *sizes = (int(d) for d in x_shape)
    if int(w_shape[0]) != c:
        raise ValueError(f"{op}: the filter's first dim ({w_shape[0]}) must be the input's {c} "
                         "channels")
    groups = int(attrs.get("groups", 1) or 1)
    ks = [int(k) for k in w_shape[2:]]
    strides = _triple(attrs.get("strides", [1, 1, 1]), "strides", op)
    dilations = _triple(attrs.get("dilations", [1, 1, 1]), "dilations", op)
    algorithm = attrs.get("padding_algorithm", "EXPLICIT")
    pads = resolve_paddings_3d(attrs.get("paddings", [0, 0, 0]), algorithm, sizes, ks, strides,
                               op)
    if algorithm == "SAME":
        dilations = [1] * _DIMS
    outs = [conv_transpose_output_size(i, k, b, a, s, d) for i, k, (b, a), s, d in
            zip(sizes, ks, pads, strides, dilations, strict=True)]
    want = [int(v) for v in attrs.get("output_size", []) or []]
    if want:
        if len(want) != _DIMS or not all(o <= v < o + s for v, o, s in
                                         zip(want, outs, strides, strict=True)):
            raise ValueError(f"{op}: output_size {want} must be within [{outs}, "
                             f"{[o + s for o, s in zip(outs, strides, strict=True)]}) for "
                             "this input, filter and stride")
        outs = want
    if min(outs) <= 0:
        raise ValueError(f"{op}: input {list(x_shape)} with filter {list(w_shape)} and "
                         f"paddings {pads} leaves an output of {outs}")
    geo = _Geometry((n, int(w_shape[1]) * groups, *outs), w_shape, groups, strides, dilations,
                    pads, op)
    assert geo.outs == sizes, (geo.outs, sizes)
    return geo


@register("conv3d_transpose", ("Input", "Filter"), ("Output",), _CONVT_ATTRS,
          grad=grad_maker(("Input", "Filter"), ("Output",), ("Input", "Filter")))
def conv3d_transpose(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Output = the transposed convolution of Input (NCDHW) with Filter ``[C, M/groups, KD,
    KH, KW]``: the input gradient of the conv3d that maps Output back to Input."""
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    last = _channel_last(attrs, "conv3d_transpose")
    x = _first(x) if last else x
    out = _transpose_geometry(x.shape, w.shape, attrs).input_grad(xp, x, w)
    return {"Output": [_last(xp, out) if last else out]}


@register("conv3d_transpose_grad",
          *grad_slots(("Input", "Filter"), ("Output",), ("Input", "Filter")), _CONVT_ATTRS)
def conv3d_transpose_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dInput = conv3d(dOutput, Filter); dFilter = that conv3d's filter gradient."""
    x, w = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x, w)
    last = _channel_last(attrs, "conv3d_transpose")
    x = _first(x) if last else x
    geo = _transpose_geometry(x.shape, w.shape, attrs)
    d = _out_grad(ins, "Output", (geo.n, geo.c, *geo.sizes), xp, x.dtype)
    d = _first(d) if last and ins.get("Output" + GRAD, [None])[0] is not None else d
    res = {}
    if "Input" + GRAD in outs:
        dx = geo.forward(xp, d, w)
        res["Input" + GRAD] = [_last(xp, dx) if last else dx]
    if "Filter" + GRAD in outs:
        res["Filter" + GRAD] = [geo.filter_grad(xp, d, x, w.shape)]
    return res


# ---------------------------------------------------------------------------------------------
# pool3d and max_pool3d_with_index

_POOL_ATTRS = {"pooling_type": "max", "ksize": [1, 1, 1], "global_pooling": False,
               "strides": [1, 1, 1], "paddings": [0, 0, 0], "padding_algorithm": "EXPLICIT",
               "exclusive": True, "adaptive": False, "ceil_mode": False, "use_cudnn": True,
               "data_format": "NCDHW", "use_mkldnn": False}


class _Windows:
    """The ``[start, end)`` window of every output position along each spatial dim of a
    channel-first ``[N, C, D, H, W]`` input."""

    def __init__(self, x_shape: tuple, bounds: list[list[tuple[int, int]]], op: str) -> None:
        self.n, self.c, *self.sizes = (int(d) for d in x_shape)
        self.bounds = bounds
        self.outs = [len(b) for b in bounds]
        # a window can lie wholly in the trailing padding (ceil_mode, or paddings >= ksize):
        # Paddle's loops then pool nothing, giving -FLT_MAX (max), 0/0 (exclusive average)
        # and no gradient; ``empty`` marks those outputs, [OD, OH, OW] (host)
        marks = [np.array([e <= s for s, e in b]) for b in bounds]
        self.empty = marks[0][:, None, None] | marks[1][None, :, None] | marks[2][None, None, :]

    def averaging(self, xp: Any, dtype: Any, divisors: list[int] | None,
                  forward: bool = True) -> list[Any]:
        """Per dim, ``[O, I]`` with ``1/div`` over each window: ``div`` the window's clipped
        length, or the given kernel length (non-exclusive averages). An empty exclusive
        window's row is NaN going forward (Paddle's 0/0) and zeros going back."""
        mats = []
        for i, (size, b) in enumerate(zip(self.sizes, self.bounds, strict=True)):
            a = np.zeros((len(b), size), dtype=dtype)
            for o, (s, e) in enumerate(b):
                if e > s:
                    a[o, s:e] = 1.0 / (e - s if divisors is None else divisors[i])
                elif divisors is None and forward:
                    a[o, :] = np.nan
            mats.append(xp.asarray(a))
        return mats

    def average(self, xp: Any, x: Any, mats: list[Any]) -> Any:
        ad, ah, aw = mats
        n, c, od, oh, ow = self.n, self.c, *self.outs
        t = xp.matmul(x, aw.T)                          # N, C, D, H, OW
        t = xp.matmul(ah, t)                            # N, C, D, OH, OW
        t = xp.matmul(ad, t.reshape(n, c, -1, oh * ow))  # N, C, OD, OH*OW
        return t.reshape(n, c, od, oh, ow)

    def average_grad(self, xp: Any, dout: Any, mats: list[Any]) -> Any:
        ad, ah, aw = mats
        n, c, (d, _, _), (_, oh, ow) = self.n, self.c, self.sizes, self.outs
        t = xp.matmul(ad.T, xp.ascontiguousarray(dout).reshape(n, c, -1, oh * ow))
        t = xp.matmul(ah.T, t.reshape(n, c, d, oh, ow))  # N, C, D, H, OW
        return xp.ascontiguousarray(xp.matmul(t, aw))

    def first_max(self, xp: Any, x: Any) -> tuple[Any, Any]:
        """``(max, position)`` of every window, the position ``(d*H + h)*W + w`` of its first
        maximum in row-major order. The windows are gathered ``[N, C, OD, OH, OW, LD, LH,
        LW]`` with each dim's index run padded to the longest window by repeating its last
        index: a repeat comes after the original in every order, so ``argmax`` (the first
        maximum) never picks it."""
        idx = []
        for size, b in zip(self.sizes, self.bounds, strict=True):
            longest = max(e - s for s, e in b)
            starts = np.array([s for s, _ in b])[:, None]
            ends = np.array([e for _, e in b])[:, None]
            run = np.minimum(starts + np.arange(max(longest, 1))[None, :], ends - 1)
            idx.append(np.clip(run, starts, size - 1))  # an empty window reads a stand-in
        ld, lh, lw = (i.shape[1] for i in idx)
        di = idx[0].reshape(-1, 1, 1, ld, 1, 1)
        hi = idx[1].reshape(1, -1, 1, 1, lh, 1)
        wi = idx[2].reshape(1, 1, -1, 1, 1, lw)
        win = x[:, :, xp.asarray(di), xp.asarray(hi), xp.asarray(wi)]
        win = win.reshape(self.n, self.c, *self.outs, ld * lh * lw)
        first = win.argmax(axis=-1)
        best = xp.take_along_axis(win, first[..., None], axis=-1)[..., 0]
        _, h, w = self.sizes
        # the map position of every gathered element, [OD*OH*OW * LD*LH*LW] (host-built)
        flat = np.broadcast_to((di * h + hi) * w + wi, (*self.outs, ld, lh, lw)).reshape(-1)
        cell = np.arange(math.prod(self.outs)).reshape(self.outs) * (ld * lh * lw)
        pos = xp.asarray(flat)[xp.asarray(cell) + first]
        if self.empty.any():
            empty = xp.asarray(self.empty)
            best, pos = best.copy(), pos.copy()
            best[:, :, empty] = _lowest_max(best.dtype)
            pos[:, :, empty] = -1
        return best, pos

    def scatter(self, xp: Any, pos: Any, dout: Any, dtype: Any) -> Any:
        """``dout`` added at the map positions ``pos`` (overlapping windows add up; a
        negative position, an empty window's, takes nothing)."""
        size = math.prod(self.sizes)
        base = (xp.arange(self.n * self.c, dtype=np.int64) * size).reshape(
            self.n, self.c, 1, 1, 1)
        pos = pos.astype(np.int64)
        weights = xp.where(pos < 0, 0, dout)
        flat = (xp.maximum(pos, 0) + base).reshape(-1)
        dx = xp.bincount(flat, weights=xp.ascontiguousarray(weights).reshape(-1),
                         minlength=self.n * self.c * size)
        return dx.reshape(self.n, self.c, *self.sizes).astype(dtype, copy=False)


def _lowest_max(dtype: Any) -> float:
    """What Paddle's max of an empty window gives: its start value ``-FLT_MAX``."""
    return float(-np.finfo(np.float32).max) if np.dtype(dtype).kind == "f" else \
        np.iinfo(dtype).min


def _clipped_bounds(size: int, k: int, s: int, before: int, out: int) -> list[tuple[int, int]]:
    """Paddle's ``start = o*s - p; end = min(start + k, size); start = max(start, 0)``."""
    return [(max(o * s - before, 0), min(o * s - before + k, size)) for o in range(out)]


class _PoolGeometry(_Windows):
    def __init__(self, x_shape: tuple, attrs: dict) -> None:
        op = "pool3d"
        if len(x_shape) != 2 + _DIMS:
            raise ValueError(f"{op} needs a 5-D input, got shape {list(x_shape)}")
        self.type = attrs.get("pooling_type", "max")
        if self.type not in ("max", "avg"):
            raise ValueError(f"{op}: pooling_type must be 'max' or 'avg', got {self.type!r}")
        sizes = [int(d) for d in x_shape[2:]]
        ksize = _triple(attrs.get("ksize", [1, 1, 1]), "ksize", op)
        self.adaptive = bool(attrs.get("adaptive", False))
        glob = bool(attrs.get("global_pooling", False))
        if glob:
            ksize = list(sizes)
        self.ksize = ksize
        if self.adaptive:
            # InferShape: the output is ksize (the input's size under global_pooling)
            if min(ksize) <= 0:
                raise ValueError(f"{op}: adaptive pooling needs a positive output size "
                                 f"(ksize), got {ksize}")
            bounds = [adaptive_bounds(i, o) for i, o in zip(sizes, ksize, strict=True)]
        else:
            strides = _triple(attrs.get("strides", [1, 1, 1]), "strides", op)
            pads = [(0, 0)] * _DIMS if glob else resolve_paddings_3d(
                attrs.get("paddings", [0, 0, 0]), attrs.get("padding_algorithm", "EXPLICIT"),
                sizes, ksize, strides, op)
            ceil = bool(attrs.get("ceil_mode", False))
            outs = [pool_output_size(i, k, b, a, s, ceil) for i, k, (b, a), s in
                    zip(sizes, ksize, pads, strides, strict=True)]
            if min(outs) <= 0:
                raise ValueError(f"{op}: input {list(x_shape)} with ksize {ksize}, paddings "
                                 f"{pads} and strides {strides} leaves an output of {outs}")
            bounds = [_clipped_bounds(i, k, s, b, o) for i, k, s, (b, _), o in
                      zip(sizes, ksize, strides, pads, outs, strict=True)]
        super().__init__(x_shape, bounds, op)
        # exclusive (and adaptive) averages divide by the clipped window, the others by KD*KH*KW
        self.divisors = None if self.adaptive or attrs.get("exclusive", True) else ksize


@register("pool3d", ("X",), ("Out",), _POOL_ATTRS,
          grad=grad_maker(("X", "Out"), ("Out",), ("X",)))
def pool3d(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Max or average pooling of an NCDHW input (see the module docstring for the rules)."""
    x = ins["X"][0]
    xp = array_module(x)
    last = _channel_last(attrs, "pool3d")
    x = _first(x) if last else x
    geo = _PoolGeometry(x.shape, attrs)
    if geo.type == "max":
        out = geo.first_max(xp, x)[0]
    else:
        out = geo.average(xp, x, geo.averaging(xp, x.dtype, geo.divisors))
    return {"Out": [_last(xp, out) if last else xp.ascontiguousarray(out)]}


@register("pool3d_grad", *grad_slots(("X", "Out"), ("Out",), ("X",)), _POOL_ATTRS)
def pool3d_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: a max window's gradient goes to its first maximum, an average's is shared by the
    window's elements (both add up where windows overlap)."""
    x = ins["X"][0]
    xp = array_module(x)
    last = _channel_last(attrs, "pool3d")
    x = _first(x) if last else x
    geo = _PoolGeometry(x.shape, attrs)
    dout = _out_grad(ins, "Out", (geo.n, geo.c, *geo.outs), xp, x.dtype)
    dout = _first(dout) if last and ins.get("Out" + GRAD, [None])[0] is not None else dout
    if geo.type == "max":
        dx = geo.scatter(xp, geo.first_max(xp, x)[1], dout, x.dtype)
    else:
        dx = geo.average_grad(xp, dout, geo.averaging(xp, x.dtype, geo.divisors, False))
    return {"X" + GRAD: [_last(xp, dx) if last else dx]}


_MPI_ATTRS = {"ksize": [1, 1, 1], "global_pooling": False, "strides": [1, 1, 1],
              "paddings": [0, 0, 0], "adaptive": False}


def _index_windows(x_shape: tuple, attrs: dict) -> _Windows:
    """Paddle 1.8's MaxPool3dWithIndexFunctor windows: adaptive, or strided with symmetric
    ``paddings`` ``[pd, ph, pw]`` clipped to the input; ``O = (I - k + 2p)/s + 1``."""
    op = "max_pool3d_with_index"
    if len(x_shape) != 2 + _DIMS:
        raise ValueError(f"{op} needs a 5-D NCDHW input, got shape {list(x_shape)}")
    sizes = [int(d) for d in x_shape[2:]]
    ksize = _triple(attrs.get("ksize", [1, 1, 1]), "ksize", op)
    glob = bool(attrs.get("global_pooling", False))
    if glob:
        ksize = list(sizes)
    if attrs.get("adaptive"):
        if min(ksize) <= 0:
            raise ValueError(f"{op}: adaptive pooling needs a positive output size (ksize), "
                             f"got {ksize}")
        return _Windows(x_shape, [adaptive_bounds(i, o) for i, o in
                                  zip(sizes, ksize, strict=True)], op)
    strides = _triple(attrs.get("strides", [1, 1, 1]), "strides", op)
    pads = [0] * _DIMS if glob else _triple(attrs.get("paddings", [0, 0, 0]), "paddings", op)
    outs = [(i - k + 2 * p) // s + 1 for i, k, p, s in zip(sizes, ksize, pads, strides,
                                                            strict=True)]
    if min(outs) <= 0:
        raise ValueError(f"{op}: input {list(x_shape)} with ksize {ksize}, paddings {pads} "
                         f"and strides {strides} leaves an output of {outs}")
    return _Windows(x_shape, [_clipped_bounds(i, k, s, p, o) for i, k, s, p, o in
                              zip(sizes, ksize, strides, pads, outs, strict=True)], op)


@register("max_pool3d_with_index", ("X",), ("Out", "Mask"), _MPI_ATTRS,
          grad=grad_maker(("X", "Mask"), ("Out",), ("X",)))
def max_pool3d_with_index(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the maximum of each window; Mask (int32) = its position ``(d*H + h)*W + w`` in
    the input map, the first maximum in row-major order."""
    x = ins["X"][0]
    xp = array_module(x)
    best, pos = _index_windows(x.shape, attrs).first_max(xp, x)
    return {"Out": [xp.ascontiguousarray(best)], "Mask": [pos.astype(np.int32)]}


@register("max_pool3d_with_index_grad", *grad_slots(("X", "Mask"), ("Out",), ("X",)),
          _MPI_ATTRS)
def max_pool3d_with_index_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: each window's output gradient added at the position its Mask names."""
    x, mask = ins["X"][0], ins["Mask"][0]
    xp = array_module(x)
    win = _index_windows(x.shape, attrs)
    dout = _out_grad(ins, "Out", mask.shape, xp, x.dtype)
    return {"X" + GRAD: [win.scatter(xp, mask, dout, x.dtype)]}
