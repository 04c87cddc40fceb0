"""Image resizing kernels of Fluid 1.8: ``bilinear_interp``, ``nearest_interp``,
``trilinear_interp`` and ``bicubic_interp``, with their gradients (Paddle 1.8's
``interpolate_op.cc/.h``).

The output size comes from, in this order of priority: ``SizeTensor`` (a list of int32 ``[1]``
tensors, one per spatial dim), ``OutSize`` (an int32 tensor of the spatial sizes), the
``Scale`` tensor or the ``scale`` attribute (``int(in · scale)`` per spatial dim, when > 0),
and last the ``out_d``/``out_h``/``out_w`` attributes.

Each output position ``k`` of a spatial dim reads the input at a source position given by
``ratio = (in − 1) / (out − 1)`` (``align_corners``) or ``in / out`` (otherwise), 0 when
``out`` is 1:

- nearest: ``int(ratio·k + 0.5)`` with ``align_corners``, else ``int(ratio·k)``;
- bicubic: the four taps around ``ratio·k`` (``align_corners``) or ``ratio·(k + 0.5) − 0.5``
  (otherwise, whatever ``align_mode``), clamped to the edges, with Keys' cubic coefficients
  (``A = −0.75``); Paddle interpolates along W, then H;
- bilinear/trilinear: the lower neighbour ``int(ratio·k)`` and the weight of the upper one
  ``ratio·k − lower``, except with ``align_corners=False, align_mode=0`` (half-pixel centres):
  source ``ratio·(k + 0.5) − 0.5`` clamped at 0. The upper neighbour is ``min(lower + 1,
  in − 1)``.

As Paddle's kernel does, ratios and weights are computed in float32 (its ``float``), so the
neighbours picked match Paddle's to the last rounding. When every spatial size is unchanged the
input is copied. The gradient adds each output gradient into the input positions the forward
read, with the forward's weights (positions read several times get the sum).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .registry import GRAD, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots

__all__ = ["interp_out_size"]

_ATTRS = {"out_d": 0, "out_h": 0, "out_w": 0, "scale": 0.0, "interp_method": "bilinear",
          "align_corners": True, "align_mode": 1, "data_layout": "NCHW"}
_INPUTS = ("X", "OutSize", "SizeTensor", "Scale")
_OPTIONAL = ("OutSize", "SizeTensor", "Scale")
# Paddle 1.8's grad maker passes X and whichever size inputs the forward op has
_GRAD_FWD = ("X", "OutSize", "SizeTensor", "Scale")
_SIZE_ATTRS = ("out_d", "out_h", "out_w")
_F32 = np.float32


def _spatial_axes(x: Any, op: str, attrs: dict) -> tuple[int, ...]:
    """The spatial axes of X (D, H, W or H, W), checked against the method and layout."""
    layout = attrs.get("data_layout", "NCHW")
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"{op}: data_layout must be 'NCHW' or 'NHWC', got {layout!r}")
    if x.ndim not in (4, 5):
        raise ValueError(f"{op}: Input(X) dimension must be 4 or 5, got shape {list(x.shape)}")
    method = attrs.get("interp_method", "bilinear")
    if x.ndim == 4 and method not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"{op}: interp_method can only be 'bilinear', 'nearest' or 'bicubic' "
                         f"when Input(X) dimension is 4, got {method!r}")
    if x.ndim == 5 and method != "trilinear":
        raise ValueError(f"{op}: interp_method can only be 'trilinear' when Input(X) "
                         f"dimension is 5, got {method!r}")
    first = 2 if layout == "NCHW" else 1
    return tuple(range(first, first + x.ndim - 2))


def _scalar(t: Any, what: str, op: str) -> Any:
    h = to_host(t)
    if h.size != 1:
        raise ValueError(f"{op}: {what} must hold one value (shape [1]), got shape "
                         f"{list(h.shape)}")
    return h.reshape(-1)[0]


def _int_tensor(h: np.ndarray, what: str, op: str) -> None:
    if h.dtype.kind not in "iu":
        raise TypeError(f"{op}: {what} must be an int32 tensor, got dtype {h.dtype}")


def interp_out_size(ins: dict, attrs: dict, in_sizes: tuple[int, ...],
                    op: str = "interpolate") -> tuple[int, ...]:
    """The spatial output sizes of an interp op with inputs ``ins`` (arrays) and ``attrs``,
    for spatial input sizes ``in_sizes``, by Paddle 1.8's priority (see the module doc)."""
    k = len(in_sizes)
    names = _SIZE_ATTRS[3 - k:]
    size_tensors = [t for t in (ins.get("SizeTensor") or []) if t is not None]
    if size_tensors:
        if len(size_tensors) != k:
            raise ValueError(f"{op}: Input(SizeTensor) must hold {k} tensors for a "
                             f"{k + 2}-D input, got {len(size_tensors)}")
        sizes = []
        for t in size_tensors:
            _int_tensor(to_host(t), "each SizeTensor", op)
            sizes.append(int(_scalar(t, "each SizeTensor", op)))
    else:
        sizes = [int(attrs.get(n, 0)) for n in names]
        scale_t = (ins.get("Scale") or [None])[0]
        # Paddle reads the scale as a C++ float and multiplies it by the int size in float
        scale = (_F32(_scalar(scale_t, "Input(Scale)", op)) if scale_t is not None
                 else _F32(attrs.get("scale", 0.0)))
        if scale > 0:
            sizes = [int(_F32(s) * scale) for s in in_sizes]
        out_size = (ins.get("OutSize") or [None])[0]
        if out_size is not None:
            h = to_host(out_size)
            _int_tensor(h, "Input(OutSize)", op)
            if h.size != k:
                raise ValueError(f"{op}: Input(OutSize) must hold {k} sizes for a {k + 2}-D "
                                 f"input, got shape {list(h.shape)}")
            sizes = [int(v) for v in h.reshape(-1)]
    for name, s in zip(names, sizes, strict=True):
        if s <= 0:
            raise ValueError(f"{op}: {name} of the output (from Attr(out_shape), OutSize, "
                             f"SizeTensor or scale) must be greater than 0, got {s}")
    return tuple(sizes)


def _ratio(n_in: int, n_out: int, align_corners: bool) -> np.float32:
    if n_out <= 1:
        return _F32(0.0)
    if align_corners:
        return _F32(n_in - 1) / _F32(n_out - 1)
    return _F32(n_in) / _F32(n_out)


def _nearest_index(n_in: int, n_out: int, align_corners: bool) -> np.ndarray:
    """Source index of each output position (Paddle's float ``ratio·k``, + 0.5 in double)."""
    pos = _ratio(n_in, n_out, align_corners) * np.arange(n_out, dtype=_F32)
    if align_corners:
        return (pos.astype(np.float64) + 0.5).astype(np.int64)
    return pos.astype(np.int64)


def _linear_plan(n_in: int, n_out: int, align_corners: bool, align_mode: int):
    """(lower index, upper index, lower weight, upper weight) of each output position along
    one spatial dim, the weights float32 as in Paddle's kernel."""
    ratio = _ratio(n_in, n_out, align_corners)
    k = np.arange(n_out)
    half_pixel = align_mode == 0 and not align_corners
    scaled = ratio * k.astype(_F32)  # float · int: float32
    centre = np.float64(ratio) * (k + 0.5) - 0.5  # float · double: double
    lo = centre.astype(np.int64) if half_pixel else scaled.astype(np.int64)
    lo = np.maximum(lo, 0)
    hi = np.minimum(lo + 1, n_in - 1)
    if half_pixel:
        w_hi = np.maximum(centre.astype(_F32), _F32(0)) - lo.astype(_F32)
    else:
        w_hi = scaled - lo.astype(_F32)
    return lo, hi, _F32(1) - w_hi, w_hi


#: Paddle's cubic convolution constant (``get_cubic_upsample_coefficients``)
_CUBIC_A = _F32(-0.75)


def _cubic_matrix(n_in: int, n_out: int, align_corners: bool,
                  dtype: Any = np.float32) -> np.ndarray:
    """``M[k, i]``: the weight of input position i in output position k along one dim of a
    bicubic resize: the four taps around ``ratio·k`` (``ratio·(k + 0.5) − 0.5`` without
    ``align_corners``), clamped to the edges (a clamped tap adds to the edge's weight), with
    Keys' coefficients for ``A = −0.75``.

    As Paddle's ``BicubicInterpolation<T>``: the position is the float ``ratio·k`` (or the
    double ``ratio·(k + 0.5) − 0.5``) cast to T, the tap ``floorf`` of it (a float), and the
    fraction and the coefficients are computed in T, the kernel's dtype ``dtype``: a float64
    resize carries no float32 rounding in its weights."""
    t_dtype = np.dtype(dtype) if np.dtype(dtype).kind == "f" else np.dtype(_F32)
    ratio = _ratio(n_in, n_out, align_corners)
    k = np.arange(n_out)
    if align_corners:
        src = (ratio * k.astype(_F32)).astype(t_dtype)
    else:
        src = (np.float64(ratio) * (k + 0.5) - 0.5).astype(t_dtype)
    base = np.floor(src.astype(_F32)).astype(np.int64)  # floorf: the position as a float
    t = src - base.astype(t_dtype)
    a, one = t_dtype.type(_CUBIC_A), t_dtype.type(1)

    def near(x):  # |x| <= 1: cubic_convolution1
        return ((a + 2) * x - (a + 3)) * x * x + one

    def far(x):  # 1 < |x| < 2: cubic_convolution2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    coeffs = (far(t + one), near(t), near(one - t), far(one - t + one))
    m = np.zeros((n_out, n_in), dtype=t_dtype)
    for tap, c in enumerate(coeffs):
        np.add.at(m, (k, np.clip(base - 1 + tap, 0, n_in - 1)), c)
    return m


def _bshape(ndim: int, axis: int, n: int) -> tuple[int, ...]:
    shape = [1] * ndim
    shape[axis] = n
    return tuple(shape)


def _prepare(ins: dict, attrs: dict, op: str):
    x = ins["X"][0]
    axes = _spatial_axes(x, op, attrs)
    in_sizes = tuple(int(x.shape[a]) for a in axes)
    out_sizes = interp_out_size(ins, attrs, in_sizes, op)
    return x, axes, in_sizes, out_sizes


def _interp_forward(ins: dict, attrs: dict, op: str) -> dict:
    x, axes, in_sizes, out_sizes = _prepare(ins, attrs, op)
    xp = array_module(x)
    if in_sizes == out_sizes:
        return {"Out": [x.copy()]}
    align_corners = bool(attrs.get("align_corners", True))
    method = attrs.get("interp_method", "bilinear")
    if method == "nearest":
        out = x
        for a, n_in, n_out in zip(axes, in_sizes, out_sizes, strict=True):
            out = xp.take(out, xp.asarray(_nearest_index(n_in, n_out, align_corners)), axis=a)
        return {"Out": [out]}
    if method == "bicubic":  # along W, then H, as Paddle's kernel; one product per dim
        dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
        out = x.astype(dtype, copy=False)
        for a, n_in, n_out in reversed(list(zip(axes, in_sizes, out_sizes, strict=True))):
            m = xp.asarray(_cubic_matrix(n_in, n_out, align_corners, dtype))
            out = xp.moveaxis(xp.tensordot(out, m, axes=([a], [1])), -1, a)
        return {"Out": [xp.ascontiguousarray(out).astype(x.dtype, copy=False)]}
    align_mode = int(attrs.get("align_mode", 1))
    plans = []
    for a, n_in, n_out in zip(axes, in_sizes, out_sizes, strict=True):
        lo, hi, w_lo, w_hi = _linear_plan(n_in, n_out, align_corners, align_mode)
        shape = _bshape(x.ndim, a, n_out)
        plans.append(((xp.asarray(lo), xp.asarray(hi)),
                      (xp.asarray(w_lo.reshape(shape)), xp.asarray(w_hi.reshape(shape)))))
    # the corner values: gathered once per choice of lower/upper along the dims so far
    corners: dict[tuple[int, ...], Any] = {(): x}
    for a, (idx, _) in zip(axes, plans, strict=True):
        corners = {key + (c,): xp.take(v, idx[c], axis=a)
                   for key, v in corners.items() for c in (0, 1)}
    # Paddle's order of the terms: D outermost, then H, W innermost for trilinear; W outer and
    # H inner for bilinear; each term is value · weight(D) · weight(H) · weight(W)
    order = list(itertools.product((0, 1), repeat=len(axes)))
    if len(axes) == 2:
        order = [(cy, cx) for cx in (0, 1) for cy in (0, 1)]
    out = None
    for key in order:
        term = corners[key]
        for (_, weights), c in zip(plans, key, strict=True):
            term = term * weights[c]
        out = term if out is None else out + term
    return {"Out": [out.astype(x.dtype, copy=False)]}


def _adjoint_matrix(n_in: int, n_out: int, attrs: dict, dtype: Any) -> np.ndarray:
    """``M[k, i]``: the weight of input position i in output position k along one dim."""
    align_corners = bool(attrs.get("align_corners", True))
    m = np.zeros((n_out, n_in), dtype=np.float64)
    k = np.arange(n_out)
    method = attrs.get("interp_method", "bilinear")
    if method == "nearest":
        m[k, _nearest_index(n_in, n_out, align_corners)] = 1.0
    elif method == "bicubic":
        m = _cubic_matrix(n_in, n_out, align_corners, dtype)
    else:
        lo, hi, w_lo, w_hi = _linear_plan(n_in, n_out, align_corners,
                                          int(attrs.get("align_mode", 1)))
        np.add.at(m, (k, lo), w_lo.astype(np.float64))
        np.add.at(m, (k, hi), w_hi.astype(np.float64))
    return m.astype(dtype)


def _interp_backward(ins: dict, attrs: dict, outs: tuple, op: str) -> dict:
    if "X" + GRAD not in outs:
        return {}
    x, axes, in_sizes, out_sizes = _prepare(ins, attrs, op)
    xp = array_module(x)
    dy = ins["Out" + GRAD][0]
    dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
    if dy is None:
        return {"X" + GRAD: [xp.zeros(x.shape, dtype=dtype)]}
    want = list(x.shape)
    for a, n in zip(axes, out_sizes, strict=True):
        want[a] = n
    if list(dy.shape) != want:
        raise ValueError(f"{op}: Out@GRAD has shape {list(dy.shape)}, the output is {want}")
    if in_sizes == out_sizes:
        return {"X" + GRAD: [dy.copy()]}
    dx = dy
    for a, n_in, n_out in zip(axes, in_sizes, out_sizes, strict=True):
        m = xp.asarray(_adjoint_matrix(n_in, n_out, attrs, dy.dtype))
        # Σ_k dy[.., k, ..] · M[k, i]: the scatter-add of the forward's reads along this dim
        dx = xp.moveaxis(xp.tensordot(dx, m, axes=([a], [0])), -1, a)
    return {"X" + GRAD: [xp.ascontiguousarray(dx).astype(dy.dtype, copy=False)]}


def _register(op: str) -> None:
    def forward(ins: dict, attrs: dict, outs: tuple) -> dict:
        return _interp_forward(ins, attrs, op)

    def backward(ins: dict, attrs: dict, outs: tuple) -> dict:
        return _interp_backward(ins, attrs, outs, op)

    forward.__name__, backward.__name__ = op, op + "_grad"
    forward.__doc__ = (f"Fluid 1.8's ``{op}``: X resized to the output size (see the module "
                       "docstring for the size priority and the source positions).")
    backward.__doc__ = f"The gradient of ``{op}``: Out@GRAD scatter-added with its weights."
    register(op, _INPUTS, ("Out",), _ATTRS, optional=_OPTIONAL,
             grad=grad_maker(_GRAD_FWD, ("Out",), ("X",)))(forward)
    register(op + "_grad", *grad_slots(_GRAD_FWD, ("Out",), ("X",)), _ATTRS,
             optional=_OPTIONAL)(backward)


for _op in ("bilinear_interp", "nearest_interp", "trilinear_interp", "bicubic_interp"):
    _register(_op)
