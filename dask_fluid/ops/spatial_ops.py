"""Spatial sampling and rearrangement kernels of Fluid 1.8: affine_grid, grid_sampler,
temporal_shift, unfold, pad_constant_like, fsp (``layers.fsp_matrix``) and similarity_focus
(and their gradients).

Semantics follow Paddle 1.8's operators of those names:

- ``affine_grid``: Output[n, h, w] = Theta[n] · (x_w, y_h, 1) with x_w and y_h evenly spaced
  over [-1, 1] (the pixel centres of the corners at ±1: 1.8 has no ``align_corners``); the size
  comes from the ``output_shape`` attribute ``[N, C, H, W]`` or, when it is empty, from the
  int32 ``OutputShape`` tensor.
- ``grid_sampler``: bilinear sampling of X at Grid with 1.8's convention x = (g + 1) (W − 1) / 2
  (align_corners true) and zero padding: each of the four neighbours that lies outside X adds
  nothing. The output has X's shape, so Grid must be ``[N, H, W, 2]`` with X's H and W.
- ``temporal_shift``: channels ``[0, c1)`` take the previous segment, ``[c1, c2)`` the next,
  the rest stay, with c1 = int(C · ratio), c2 = int(C · 2 · ratio) in float32 as the kernel.
- ``unfold``: im2col, Y[n, (c kh + i) kw + j, oh OW + ow] = X[n, c, oh sh + i dh − top,
  ow sw + j dw − left] (0 outside X); ``paddings`` is [top, left, bottom, right].
- ``pad_constant_like``: Y padded at the end of each dim with ``pad_value`` to X's shape.
- ``fsp``: Out[n] = X[n] Y[n]ᵀ / (H W) with X, Y as ``[C, H W]`` matrices.
- ``similarity_focus``: per sample and per index of ``indexes``, the 2-D slice at that index of
  ``axis`` is scanned from its largest value down; a value whose row and column are both still
  free marks its row and column used and sets the mask to 1 along the whole ``axis`` at that
  position, until min(rows, cols) values are picked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots

__all__: list[str] = []


def _dout(ins: dict, slot: str, shape: tuple, xp: Any, dtype: Any) -> Any:
    d = ins[slot + GRAD][0]
    return xp.zeros(shape, dtype=dtype) if d is None else d


def _four_d(x: Any, op: str, arg: str = "X") -> tuple[int, int, int, int]:
    if x.ndim != 4:
        raise ValueError(f"{op}: Input({arg}) must be a 4-D tensor, got shape {list(x.shape)}")
    return tuple(int(d) for d in x.shape)


# -- affine_grid -------------------------------------------------------------------------------

_AG_ATTRS = {"output_shape": [], "use_cudnn": True}


def _affine_hw(ins: dict, attrs: dict) -> tuple[int, int]:
    """H and W of the grid: from ``output_shape`` or, when it is empty, ``OutputShape``."""
    raw = attrs.get("output_shape")
    # the attr may arrive as a numpy array (Fluid's proto turns any int sequence into a list),
    # whose truth value is ambiguous: test its length, not the array
    size = [] if raw is None else [int(v) for v in np.asarray(raw).reshape(-1)]
    if not size:
        shape_t = (ins.get("OutputShape") or [None])[0]
        if shape_t is None:
            raise ValueError("affine_grid: Input(OutputShape) must be given when attr "
                             "output_shape is empty")
        size = [int(v) for v in to_host(shape_t).reshape(-1)]
    if len(size) != 4:
        raise ValueError(f"affine_grid: the output shape must have 4 values [N, C, H, W], got "
                         f"{size}")
    if size[2] < 1 or size[3] < 1:
        raise ValueError(f"affine_grid: H and W of the output shape must be positive, got "
                         f"{size}")
    return size[2], size[3]


def _affine_base(h: int, w: int, xp: Any, dtype: Any) -> Any:
    """``[H W, 3]`` rows (x, y, 1), x running along W fastest (Paddle's GetIdxMap).

    Paddle's Linspace divides by ``count − 1``, which is NaN for a size of 1; numpy's
    linspace gives -1 there instead (a deliberate deviation from that degenerate case)."""
    ys = xp.linspace(-1.0, 1.0, h, dtype=dtype)
    xs = xp.linspace(-1.0, 1.0, w, dtype=dtype)
    gx = xp.broadcast_to(xs[None, :], (h, w))
    gy = xp.broadcast_to(ys[:, None], (h, w))
    return xp.stack([gx, gy, xp.ones((h, w), dtype=dtype)], axis=-1).reshape(h * w, 3)


@register("affine_grid", ("Theta", "OutputShape"), ("Output",), _AG_ATTRS,
          optional=("OutputShape",),
          grad=grad_maker(("Theta", "OutputShape"), ("Output",), ("Theta",)))
def affine_grid(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Output ``[N, H, W, 2]`` = base grid ``[H W, 3]`` · Theta[n]ᵀ per sample."""
    theta = ins["Theta"][0]
    if theta.ndim != 3 or tuple(theta.shape[1:]) != (2, 3):
        raise ValueError(f"affine_grid: Input(Theta) must have shape [N, 2, 3], got "
                         f"{list(theta.shape)}")
    xp = array_module(theta)
    h, w = _affine_hw(ins, attrs)
    base = _affine_base(h, w, xp, theta.dtype)
    out = xp.matmul(base[None], xp.swapaxes(theta, 1, 2))
    return {"Output": [out.reshape(theta.shape[0], h, w, 2)]}


@register("affine_grid_grad", *grad_slots(("Theta", "OutputShape"), ("Output",), ("Theta",)),
          _AG_ATTRS, optional=("OutputShape",))
def affine_grid_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dTheta[n] = dOutput[n]ᵀ · base grid (``[2, H W] · [H W, 3]``)."""
    theta = ins["Theta"][0]
    xp = array_module(theta)
    h, w = _affine_hw(ins, attrs)
    n = theta.shape[0]
    d = _dout(ins, "Output", (n, h, w, 2), xp, theta.dtype)
    base = _affine_base(h, w, xp, theta.dtype)
    return {"Theta" + GRAD: [xp.matmul(xp.swapaxes(d.reshape(n, h * w, 2), 1, 2), base[None])]}


# -- grid_sampler ------------------------------------------------------------------------------

def _gs_setup(x: Any, grid: Any) -> dict:
    """The four neighbours of each sample point, their distances and values (NHWC gathers)."""
    n, c, h, w = _four_d(x, "grid_sampler")
    if grid.ndim != 4 or grid.shape[3] != 2:
        raise ValueError(f"grid_sampler: Input(Grid) must have shape [N, H, W, 2], got "
                         f"{list(grid.shape)}")
    if tuple(grid.shape[:3]) != (n, h, w):
        # Fluid 1.8's output has X's shape: Grid gives one point per pixel of X
        raise ValueError(f"grid_sampler: Input(Grid) {list(grid.shape)} must be [N, H, W, 2] "
                         f"with X's N, H and W ({[n, h, w]})")
    xp = array_module(x, grid)
    x_max, y_max = w - 1, h - 1
    # 1.8's CalcGridLocations: 0.5 * ((g + 1) * max), the corners of X at ±1
    gx = 0.5 * ((grid[..., 0] + 1) * x_max)
    gy = 0.5 * ((grid[..., 1] + 1) * y_max)
    x_w = xp.floor(gx)
    y_n = xp.floor(gy)
    x_e, y_s = x_w + 1, y_n + 1
    s = {"d_w": gx - x_w, "d_e": x_e - gx, "d_n": gy - y_n, "d_s": y_s - gy,
         "xp": xp, "shape": (n, c, h, w), "b": xp.arange(n).reshape(n, 1, 1)}
    xt = xp.moveaxis(x, 1, -1)  # [N, H, W, C]
    for name, cx, cy in (("wn", x_w, y_n), ("en", x_e, y_n), ("ws", x_w, y_s),
                         ("es", x_e, y_s)):
        valid = (cx >= 0) & (cx <= x_max) & (cy >= 0) & (cy <= y_max)
        ix = xp.clip(cx, 0, x_max).astype(xp.int64)
        iy = xp.clip(cy, 0, y_max).astype(xp.int64)
        s["i_" + name] = (iy, ix, valid)
        # a neighbour outside X reads 0 (zero padding)
        s["v_" + name] = xt[s["b"], iy, ix] * valid[..., None].astype(x.dtype)  # [N, H, W, C]
    return s


@register("grid_sampler", ("X", "Grid"), ("Output",), {"use_cudnn": True},
          grad=grad_maker(("X", "Grid"), ("Output",), ("X", "Grid")))
def grid_sampler(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Output[n, :, h, w] = bilinear interpolation of X[n] at Grid[n, h, w] (see the module
    docstring for the coordinate convention)."""
    x = ins["X"][0]
    s = _gs_setup(x, ins["Grid"][0])
    out = (s["v_wn"] * (s["d_e"] * s["d_s"])[..., None]
           + s["v_en"] * (s["d_w"] * s["d_s"])[..., None]
           + s["v_ws"] * (s["d_e"] * s["d_n"])[..., None]
           + s["v_es"] * (s["d_w"] * s["d_n"])[..., None])
    xp = s["xp"]
    return {"Output": [xp.ascontiguousarray(xp.moveaxis(out, -1, 1)).astype(x.dtype,
                                                                             copy=False)]}


@register("grid_sampler_grad", *grad_slots(("X", "Grid"), ("Output",), ("X", "Grid")),
          {"use_cudnn": True})
def grid_sampler_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: dOutput scattered to the four neighbours with their bilinear weights (those in
    X only); dGrid: the derivative of the interpolation along x and y, times (W − 1) / 2 and
    (H − 1) / 2."""
    x, grid = ins["X"][0], ins["Grid"][0]
    s = _gs_setup(x, grid)
    xp = s["xp"]
    n, c, h, w = s["shape"]
    d = _dout(ins, "Output", x.shape, xp, x.dtype)
    dt = xp.moveaxis(d, 1, -1)  # [N, H, W, C]
    res = {}
    if "X" + GRAD in outs:
        dxt = xp.zeros((n, h, w, c), dtype=x.dtype)
        for name, w1, w2 in (("wn", "d_e", "d_s"), ("ws", "d_e", "d_n"),
                             ("en", "d_w", "d_s"), ("es", "d_w", "d_n")):
            iy, ix, valid = s["i_" + name]
            weight = s[w1] * s[w2] * valid.astype(x.dtype)
            xp.add.at(dxt, (s["b"], iy, ix), dt * weight[..., None])
        res["X" + GRAD] = [xp.ascontiguousarray(xp.moveaxis(dxt, -1, 1))]
    if "Grid" + GRAD in outs:
        gx = (((s["v_en"] - s["v_wn"]) * s["d_s"][..., None]
               + (s["v_es"] - s["v_ws"]) * s["d_n"][..., None]) * dt).sum(axis=-1)
        gy = (((s["v_ws"] - s["v_wn"]) * s["d_e"][..., None]
               + (s["v_es"] - s["v_en"]) * s["d_w"][..., None]) * dt).sum(axis=-1)
        res["Grid" + GRAD] = [xp.stack([gx * ((w - 1) / 2), gy * ((h - 1) / 2)],
                                       axis=-1).astype(grid.dtype, copy=False)]
    return res


# -- temporal_shift ----------------------------------------------------------------------------

_TS_ATTRS = {"seg_num": 1, "shift_ratio": 0.25}


def _ts_setup(shape: tuple, attrs: dict) -> tuple[int, int, int]:
    """(seg_num, c1, c2) after Fluid's checks."""
    if len(shape) != 4:
        raise ValueError(f"temporal_shift: Input(X) must be 4-D [N*T, C, H, W], got shape "
                         f"{list(shape)}")
    t = int(attrs.get("seg_num", 1))
    ratio = float(attrs.get("shift_ratio", 0.25))
    if t <= 0:
        raise ValueError(f"temporal_shift: attr seg_num must be greater than 0, got {t}")
    if not 0.0 < ratio < 0.5:
        raise ValueError(f"temporal_shift: attr shift_ratio must be in (0, 0.5), got {ratio}")
    if shape[0] % t:
        raise ValueError(f"temporal_shift: Input(X) dims[0] ({shape[0]}) must be divisible by "
                         f"seg_num ({t})")
    c = int(shape[1])
    # the kernel's static_cast<int>(c * shift_ratio), in float32 as the float attribute
    r = np.float32(ratio)
    c1 = int(np.float32(c) * r)
    c2 = int(np.float32(c * 2) * r)
    return t, c1, c2


@register("temporal_shift", ("X",), ("Out",), _TS_ATTRS,
          grad=grad_maker(("X",), ("Out",), ("X",)))
def temporal_shift(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[n, t, c] = X[n, t − 1, c] for c < c1, X[n, t + 1, c] for c1 ≤ c < c2, X[n, t, c]
    otherwise (0 past the ends of the segment axis)."""
    x = ins["X"][0]
    t, c1, c2 = _ts_setup(x.shape, attrs)
    xp = array_module(x)
    x5 = x.reshape((-1, t) + tuple(x.shape[1:]))
    out = xp.zeros_like(x5)
    out[:, 1:, :c1] = x5[:, :-1, :c1]
    out[:, :-1, c1:c2] = x5[:, 1:, c1:c2]
    out[:, :, c2:] = x5[:, :, c2:]
    return {"Out": [out.reshape(x.shape)]}


@register("temporal_shift_grad", *grad_slots(("X",), ("Out",), ("X",)), _TS_ATTRS)
def temporal_shift_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: dOut shifted back (the parts shifted past the ends get nothing)."""
    x = ins["X"][0]
    t, c1, c2 = _ts_setup(x.shape, attrs)
    xp = array_module(x)
    d = _dout(ins, "Out", x.shape, xp, x.dtype).reshape((-1, t) + tuple(x.shape[1:]))
    dx = xp.zeros_like(d)
    dx[:, :-1, :c1] = d[:, 1:, :c1]
    dx[:, 1:, c1:c2] = d[:, :-1, c1:c2]
    dx[:, :, c2:] = d[:, :, c2:]
    return {"X" + GRAD: [dx.reshape(x.shape)]}


# -- unfold ------------------------------------------------------------------------------------

_UNFOLD_ATTRS = {"kernel_sizes": [1, 1], "strides": [1, 1], "paddings": [0, 0, 0, 0],
                 "dilations": [1, 1]}


def _unfold_setup(shape: tuple, attrs: dict) -> dict:
    """Kernel, strides, paddings [top, left, bottom, right], dilations and the output size."""
    if len(shape) != 4:
        raise ValueError(f"unfold: Input(X) must be a 4-D tensor [N, C, H, W], got shape "
                         f"{list(shape)}")
    k = [int(v) for v in attrs.get("kernel_sizes", [])]
    st = [int(v) for v in attrs.get("strides", [])]
    pd = [int(v) for v in attrs.get("paddings", [])]
    dl = [int(v) for v in attrs.get("dilations", [])]
    if len(k) != 2 or len(st) != 2 or len(dl) != 2 or len(pd) != 4:
        raise ValueError(f"unfold: kernel_sizes, strides and dilations must have 2 values and "
                         f"paddings 4, got kernel_sizes={k}, strides={st}, paddings={pd}, "
                         f"dilations={dl}")
    for name, vals in (("kernel_sizes", k), ("strides", st), ("dilations", dl)):
        if min(vals) <= 0:
            raise ValueError(f"unfold: {name} must be greater than zero, got {vals}")
    if min(pd) < 0:
        raise ValueError(f"unfold: paddings must be >= 0, got {pd}")
    oh = (shape[2] + pd[0] + pd[2] - (dl[0] * (k[0] - 1) + 1)) // st[0] + 1
    ow = (shape[3] + pd[1] + pd[3] - (dl[1] * (k[1] - 1) + 1)) // st[1] + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"unfold: the sliding blocks of input size {list(shape[2:])} with "
                         f"kernel_sizes {k}, strides {st}, paddings {pd}, dilations {dl} are "
                         f"({oh}, {ow}), which must be positive")
    return {"k": k, "s": st, "p": pd, "d": dl, "oh": oh, "ow": ow}


def _unfold_windows(u: dict) -> list[tuple[int, int, slice, slice]]:
    """(i, j, rows, cols) of each kernel tap in the padded input."""
    (kh, kw), (sh, sw), (dh, dw) = u["k"], u["s"], u["d"]
    return [(i, j, slice(i * dh, i * dh + sh * (u["oh"] - 1) + 1, sh),
             slice(j * dw, j * dw + sw * (u["ow"] - 1) + 1, sw))
            for i in range(kh) for j in range(kw)]


def _padded_size(shape: tuple, u: dict) -> tuple[int, int]:
    # at least the input plus its padding, and as far as the last window reaches
    (kh, kw), (sh, sw), (dh, dw) = u["k"], u["s"], u["d"]
    hp = max(shape[2] + u["p"][0] + u["p"][2], (u["oh"] - 1) * sh + (kh - 1) * dh + 1)
    wp = max(shape[3] + u["p"][1] + u["p"][3], (u["ow"] - 1) * sw + (kw - 1) * dw + 1)
    return hp, wp


@register("unfold", ("X",), ("Y",), _UNFOLD_ATTRS, grad=grad_maker(("X",), ("Y",), ("X",)))
def unfold(ins: dict, attrs: dict, outs: tuple) -> dict:
    """im2col: Y ``[N, C kh kw, OH OW]``, Y[n, (c kh + i) kw + j, oh OW + ow] = X[n, c,
    oh sh + i dh − top, ow sw + j dw − left], 0 in the padding."""
    x = ins["X"][0]
    u = _unfold_setup(x.shape, attrs)
    xp = array_module(x)
    n, c, h, w = x.shape
    hp, wp = _padded_size(x.shape, u)
    top, left = u["p"][0], u["p"][1]
    xpad = xp.zeros((n, c, hp, wp), dtype=x.dtype)
    xpad[:, :, top:top + h, left:left + w] = x
    cols = xp.stack([xpad[:, :, rows, cs] for _, _, rows, cs in _unfold_windows(u)], axis=2)
    return {"Y": [cols.reshape(n, c * u["k"][0] * u["k"][1], u["oh"] * u["ow"])]}


@register("unfold_grad", *grad_slots(("X",), ("Y",), ("X",)), _UNFOLD_ATTRS)
def unfold_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """col2im: dX[n, c, h, w] = the sum of the dY entries that read X[n, c, h, w]."""
    x = ins["X"][0]
    u = _unfold_setup(x.shape, attrs)
    xp = array_module(x)
    n, c, h, w = x.shape
    kk = u["k"][0] * u["k"][1]
    d = _dout(ins, "Y", (n, c * kk, u["oh"] * u["ow"]), xp, x.dtype)
    d = d.reshape(n, c, kk, u["oh"], u["ow"])
    hp, wp = _padded_size(x.shape, u)
    dpad = xp.zeros((n, c, hp, wp), dtype=x.dtype)
    for t, (_, _, rows, cs) in enumerate(_unfold_windows(u)):
        # one tap's positions are distinct, so += accumulates correctly
        dpad[:, :, rows, cs] += d[:, :, t]
    top, left = u["p"][0], u["p"][1]
    return {"X" + GRAD: [xp.ascontiguousarray(dpad[:, :, top:top + h, left:left + w])]}


# -- pad_constant_like -------------------------------------------------------------------------

def _pcl_check(x_shape: tuple, y_shape: tuple, what: str) -> None:
    if len(x_shape) != len(y_shape):
        raise ValueError(f"pad_constant_like: {what} and Y must have the same rank, got "
                         f"{list(x_shape)} and {list(y_shape)}")
    for i, (a, b) in enumerate(zip(x_shape, y_shape, strict=True)):
        if a < b:
            raise ValueError(f"pad_constant_like: expected {what}.dim[{i}] >= Y.dim[{i}], got "
                             f"{a} < {b} ({what} {list(x_shape)}, Y {list(y_shape)})")


@register("pad_constant_like", ("X", "Y"), ("Out",), {"pad_value": 0.0},
          grad=grad_maker(("Y",), ("Out",), ("Y",)))
def pad_constant_like(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out (X's shape, Y's dtype) = Y in its leading corner, ``pad_value`` elsewhere."""
    x, y = ins["X"][0], ins["Y"][0]
    _pcl_check(x.shape, y.shape, "X")
    xp = array_module(x, y)
    out = xp.full(x.shape, attrs.get("pad_value", 0.0), dtype=y.dtype)
    out[tuple(slice(0, s) for s in y.shape)] = y
    return {"Out": [out]}


@register("pad_constant_like_grad", *grad_slots(("Y",), ("Out",), ("Y",)), {"pad_value": 0.0})
def pad_constant_like_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dY = dOut's leading corner of Y's shape."""
    y = ins["Y"][0]
    xp = array_module(y)
    d = ins["Out" + GRAD][0]
    if d is None:
        return {"Y" + GRAD: [xp.zeros_like(y)]}
    _pcl_check(d.shape, y.shape, "Out@GRAD")
    return {"Y" + GRAD: [xp.ascontiguousarray(d[tuple(slice(0, s) for s in y.shape)])]}


# -- fsp (layers.fsp_matrix) -------------------------------------------------------------------

def _fsp_mats(x: Any, y: Any) -> tuple[Any, Any, int]:
    xn, xc, xh, xw = _four_d(x, "fsp", "X")
    yn, yc, yh, yw = _four_d(y, "fsp", "Y")
    if (xh, xw) != (yh, yw) or xn != yn:
        raise ValueError(f"fsp: Input(X) {list(x.shape)} and Input(Y) {list(y.shape)} must have "
                         "the same batch size, height and width")
    return x.reshape(xn, xc, xh * xw), y.reshape(yn, yc, yh * yw), xh * xw


@register("fsp", ("X", "Y"), ("Out",), grad=grad_maker(("X", "Y"), ("Out",), ("X", "Y")))
def fsp(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out ``[N, C1, C2]`` = X Yᵀ / (H W) per sample (the FSP matrix)."""
    x, y = ins["X"][0], ins["Y"][0]
    xm, ym, hw = _fsp_mats(x, y)
    xp = array_module(x, y)
    return {"Out": [(xp.matmul(xm, xp.swapaxes(ym, 1, 2)) / hw).astype(x.dtype, copy=False)]}


@register("fsp_grad", *grad_slots(("X", "Y"), ("Out",), ("X", "Y")))
def fsp_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut Y / (H W), dY = dOutᵀ X / (H W)."""
    x, y = ins["X"][0], ins["Y"][0]
    xm, ym, hw = _fsp_mats(x, y)
    xp = array_module(x, y)
    d = _dout(ins, "Out", (x.shape[0], x.shape[1], y.shape[1]), xp, x.dtype)
    res = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [(xp.matmul(d, ym) / hw).reshape(x.shape).astype(x.dtype,
                                                                           copy=False)]
    if "Y" + GRAD in outs:
        res["Y" + GRAD] = [(xp.matmul(xp.swapaxes(d, 1, 2), xm) / hw).reshape(y.shape)
                           .astype(y.dtype, copy=False)]
    return res


# -- similarity_focus --------------------------------------------------------------------------

@register("similarity_focus", ("X",), ("Out",), {"axis": 1, "indexes": []})
def similarity_focus(ins: dict, attrs: dict, outs: tuple) -> dict:
    """The 0/1 mask of Paddle's greedy row/column selection (module docstring); no gradient.

    Equal values are taken in increasing flat position of the slice (Paddle's std::sort
    leaves the order of ties unspecified)."""
    x = ins["X"][0]
    if x.ndim != 4:
        raise ValueError(f"similarity_focus: Input(X) must be a 4-D tensor, got shape "
                         f"{list(x.shape)}")
    axis = int(attrs.get("axis", 1))
    indexes = [int(i) for i in attrs.get("indexes", [])]
    if axis not in (1, 2, 3):
        raise ValueError(f"similarity_focus: attr axis must be 1, 2 or 3, got {axis}")
    if not indexes:
        raise ValueError("similarity_focus: attr indexes must not be empty")
    for i, idx in enumerate(indexes):
        if not 0 <= idx < x.shape[axis]:
            raise ValueError(f"similarity_focus: indexes[{i}] = {idx} must be in [0, "
                             f"{x.shape[axis]}) (X.dim[{axis}])")
    xh = to_host(x)  # a sequential greedy scan: done on the host
    mask = np.zeros(xh.shape, dtype=xh.dtype)
    others = [d for d in (1, 2, 3) if d != axis]
    rows, cols = xh.shape[others[0]], xh.shape[others[1]]
    for b in range(xh.shape[0]):
        for idx in indexes:
            plane = np.take(xh[b], idx, axis=axis - 1)  # [rows, cols]
            order = np.argsort(-plane.reshape(-1), kind="stable")
            used_r = np.zeros(rows, bool)
            used_c = np.zeros(cols, bool)
            picked = 0
            for flat in order:
                r, cc = divmod(int(flat), cols)
                if used_r[r] or used_c[cc]:
                    continue
                used_r[r] = used_c[cc] = True
                pos: list[Any] = [b, 0, 0, 0]
                pos[axis] = slice(None)
                pos[others[0]], pos[others[1]] = r, cc
                mask[tuple(pos)] = 1
                picked += 1
                if picked == min(rows, cols):
                    break
    return {"Out": [array_module(x).asarray(mask)]}
