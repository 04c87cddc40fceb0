"""Region-of-interest pooling kernels of Fluid 1.8: roi_pool, roi_align, psroi_pool,
prroi_pool (and their gradients).

Every op takes ``X`` (NCHW) and ``ROIs`` (``[R, 4]``: x1, y1, x2, y2 in input-image
coordinates) whose one-level LoD says which image each ROI belongs to (``roi_pool`` and
``roi_align`` may get the offsets as a ``RoisLod`` tensor instead, ``prroi_pool`` the ROI count
per image as ``BatchRoINums``). They are registered with ``lod="kernel"`` so that they receive
the ROIs' LoD; their outputs have none, as in Fluid.

The ROIs are small: their bin geometry is worked out on the host in X's dtype (so the floors,
ceils and roundings are Paddle's), and the averaging ops become per-bin weight vectors along
each axis, ``Out[r, c, p, q] = Σ_ji Ay[r, p, j] · X[b_r, c, j, i] · Ax[r, q, i]``: the bilinear
sampling of roi_align, the box average of psroi_pool and the bilinear-surface integral of
prroi_pool are all separable. Only those weights cross to the device; the products run there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .registry import GRAD, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots, scatter_add

# ---------------------------------------------------------------------------------------------
# shared helpers

_ROI_ATTRS = {"spatial_scale": 1.0, "pooled_height": 1, "pooled_width": 1}
#: elements of the gathered windows roi_pool holds at once (ROIs are processed in chunks)
_CHUNK = 1 << 24


def _check(op: str, x: Any, rois: Any, attrs: dict) -> tuple[int, int, Any]:
    """(pooled_height, pooled_width, spatial_scale as X's dtype), after Fluid's InferShape
    checks of the shapes and attributes."""
    if x.ndim != 4:
        raise ValueError(f"{op}: Input(X) must be 4-D NCHW, got shape {list(x.shape)}")
    if rois.ndim != 2 or rois.shape[1] != 4:
        raise ValueError(f"{op}: Input(ROIs) must be a 2-D LoDTensor of shape [num_rois, 4] "
                         f"given as [[x1, y1, x2, y2], ...], got shape {list(rois.shape)}")
    ph, pw = int(attrs.get("pooled_height", 1)), int(attrs.get("pooled_width", 1))
    if ph <= 0 or pw <= 0:
        raise ValueError(f"{op}: pooled_height and pooled_width must be greater than 0, got "
                         f"{ph} and {pw}")
    scale = float(attrs.get("spatial_scale", 1.0))
    if not scale > 0:
        raise ValueError(f"{op}: spatial_scale must be greater than 0, got {scale}")
    # the attribute is a C++ float: its float32 value, promoted to X's dtype
    return ph, pw, np.asarray(np.float32(scale), dtype=_host_dtype(x))


def _host_dtype(x: Any) -> np.dtype:
    return np.dtype(x.dtype) if np.dtype(x.dtype).kind == "f" else np.dtype(np.float64)


def _offsets(op: str, ins: dict, attrs: dict, batch: int, n_rois: int,
             lod_slot: str | None = None, counts_slot: str | None = None) -> np.ndarray:
    """The ROI offsets per image (``[batch + 1]``, host int64), from ``RoisLod``,
    ``BatchRoINums`` or the LoD of ROIs, checked against X's batch and the ROI count."""
    lods = ((attrs.get("_lods") or {}).get("ROIs") or [None])
    lod = lods[0] if lods else None
    if lod_slot is not None and (ins.get(lod_slot) or [None])[0] is not None:
        offsets = to_host(ins[lod_slot][0]).astype(np.int64).reshape(-1)
        source = f"Input({lod_slot})"
    elif counts_slot is not None and ((ins.get(counts_slot) or [None])[0] is not None
                                      or not lod):
        counts = (ins.get(counts_slot) or [None])[0]
        if counts is None:
            raise ValueError(f"{op}: Input(ROIs) has no LoD and Input({counts_slot}) is not "
                             "given: feed ROIs as a LoD tensor or pass the ROI count per image")
        offsets = np.concatenate([[0], np.cumsum(to_host(counts).astype(np.int64).reshape(-1))])
        source = f"Input({counts_slot})"
    else:
        if not lod:
            raise ValueError(
                f"{op}: Input(ROIs) has no LoD: feed it as a LoD tensor "
                "(fluid.create_lod_tensor) whose LoD gives the ROIs of each image")
        offsets = np.asarray(lod[-1], dtype=np.int64)
        source = "the LoD of Input(ROIs)"
    if len(offsets) - 1 != batch:
        raise ValueError(f"{op}: {source} gives ROIs for {len(offsets) - 1} images but "
                         f"Input(X) has a batch of {batch}; they must be the same")
    if offsets[0] != 0 or offsets[-1] != n_rois or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{op}: {source} covers {int(offsets[-1] - offsets[0])} ROIs "
                         f"(offsets {offsets.tolist()}) but Input(ROIs) has {n_rois} rows")
    return offsets


def _c_round(v: np.ndarray) -> np.ndarray:
    """C's ``round``: halves away from zero (numpy's rounds them to even)."""
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _dout(ins: dict, shape: tuple, xp: Any, dtype: Any) -> Any:
    d = ins["Out" + GRAD][0]
    return xp.zeros(shape, dtype=dtype) if d is None else d


def _separable_forward(x: Any, offsets: np.ndarray, ay: np.ndarray, ax: np.ndarray) -> Any:
    """``Out[r, c] = Ay[r] · X[b_r, c] · Ax[r]ᵀ`` for each image's ROIs."""
    xp = array_module(x)
    r, ph, pw = ay.shape[0], ay.shape[1], ax.shape[1]
    out = xp.zeros((r, x.shape[1], ph, pw), dtype=x.dtype)
    ay_d, ax_d = xp.asarray(ay, dtype=x.dtype), xp.asarray(ax, dtype=x.dtype)
    for n in range(len(offsets) - 1):
        lo, hi = int(offsets[n]), int(offsets[n + 1])
        if hi > lo:
            rows = xp.matmul(ay_d[lo:hi, None], x[n][None])  # [r, C, ph, W]
            out[lo:hi] = xp.matmul(rows, xp.swapaxes(ax_d[lo:hi], 1, 2)[:, None])
    return out


def _separable_grad(x: Any, offsets: np.ndarray, ay: np.ndarray, ax: np.ndarray,
                    dout: Any) -> Any:
    """The adjoint of :func:`_separable_forward`: ``dX[b] = Σ_r Ay[r]ᵀ · dOut[r] · Ax[r]``."""
    xp = array_module(x)
    dx = xp.zeros(x.shape, dtype=x.dtype)
    ay_d, ax_d = xp.asarray(ay, dtype=x.dtype), xp.asarray(ax, dtype=x.dtype)
    for n in range(len(offsets) - 1):
        lo, hi = int(offsets[n]), int(offsets[n + 1])
        if hi > lo:
            cols = xp.matmul(dout[lo:hi], ax_d[lo:hi, None])  # [r, C, ph, W]
            dx[n] = xp.einsum("rpj,rcpi->cji", ay_d[lo:hi], cols)
    return dx


# ---------------------------------------------------------------------------------------------
# roi_pool


def _roi_pool_bins(rois: np.ndarray, ph: int, pw: int, scale: Any, h: int, w: int):
    """Each bin's ``[start, end)`` rows ``[R, ph]`` and columns ``[R, pw]``, computed as
    Paddle's CPU kernel does (rounded ROI corners, float32 bin sizes, floor/ceil, clipping)."""
    box = _c_round(rois * scale).astype(np.int64)  # round(x · spatial_scale)
    start_w, start_h, end_w, end_h = box[:, 0], box[:, 1], box[:, 2], box[:, 3]
    # malformed ROIs are forced to 1 x 1
    roi_h = np.maximum(end_h - start_h + 1, 1).astype(np.float32)
    roi_w = np.maximum(end_w - start_w + 1, 1).astype(np.float32)
    bin_h, bin_w = roi_h / np.float32(ph), roi_w / np.float32(pw)

    def bounds(bins: np.ndarray, count: int, start: np.ndarray, size: int):
        k = np.arange(count, dtype=np.float32)
        lo = np.floor(k[None] * bins[:, None]).astype(np.int64) + start[:, None]
        hi = np.ceil((k[None] + np.float32(1)) * bins[:, None]).astype(np.int64) + start[:, None]
        return np.clip(lo, 0, size), np.clip(hi, 0, size)

    hs, he = bounds(bin_h, ph, start_h, h)
    ws, we = bounds(bin_w, pw, start_w, w)
    return hs, he, ws, we


def _window(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Padded indices ``[..., K]`` of each ``[start, end)`` range and their validity mask."""
    k = max(int((end - start).max(initial=0)), 1)
    idx = start[..., None] + np.arange(k)
    valid = idx < end[..., None]
    return np.where(valid, idx, 0), valid


@register("roi_pool", ("X", "ROIs", "RoisLod"), ("Out", "Argmax"), _ROI_ATTRS,
          optional=("RoisLod",), lod="kernel",
          grad=grad_maker(("X", "ROIs", "RoisLod", "Argmax"), ("Out",), ("X",)))
def roi_pool(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Max pooling of each ROI's ``pooled_height × pooled_width`` bins; an empty bin gives 0
    and Argmax -1, otherwise Argmax is the ``h · W + w`` of the first maximum in row-major
    order (Paddle's strict ``>`` scan)."""
    x, rois = ins["X"][0], ins["ROIs"][0]
    xp = array_module(x)
    ph, pw, scale = _check("roi_pool", x, rois, attrs)
    n, c, h, w = (int(d) for d in x.shape)
    r = int(rois.shape[0])
    offsets = _offsets("roi_pool", ins, attrs, n, r, lod_slot="RoisLod")
    out = xp.zeros((r, c, ph, pw), dtype=x.dtype)
    argmax = xp.full((r, c, ph, pw), -1, dtype=np.int64)
    if r == 0:
        return {"Out": [out], "Argmax": [argmax]}
    hs, he, ws, we = _roi_pool_bins(to_host(rois).astype(_host_dtype(x)), ph, pw, scale, h, w)
    ih, mh = _window(hs, he)  # [R, ph, Kh]
    iw, mw = _window(ws, we)  # [R, pw, Kw]
    kh, kw = ih.shape[2], iw.shape[2]
    batch = np.repeat(np.arange(n), np.diff(offsets))
    lowest = (-np.finfo(x.dtype).max if np.dtype(x.dtype).kind == "f"
              else np.iinfo(x.dtype).min)
    xt = xp.transpose(x, (0, 2, 3, 1))  # [N, H, W, C]: gathers keep channels together
    step = max(1, _CHUNK // max(1, ph * kh * pw * kw * c))
    for lo in range(0, r, step):
        hi = min(r, lo + step)
        b = xp.asarray(batch[lo:hi, None, None, None, None])
        rows = xp.asarray(ih[lo:hi, :, :, None, None])
        cols = xp.asarray(iw[lo:hi, None, None, :, :])
        valid = xp.asarray(mh[lo:hi, :, :, None, None] & mw[lo:hi, None, None, :, :])
        vals = xt[b, rows, cols]  # [r, ph, Kh, pw, Kw, C]
        vals = xp.where(valid[..., None], vals, xp.asarray(-np.inf, dtype=x.dtype))
        vals = xp.transpose(vals, (0, 5, 1, 3, 2, 4)).reshape(hi - lo, c, ph, pw, kh * kw)
        k = xp.argmax(vals, axis=-1)  # the first maximum: row-major order of the window
        best = xp.take_along_axis(vals, k[..., None], axis=-1)[..., 0]
        pos = xp.broadcast_to(_positions(xp, ih, iw, lo, hi, w), vals.shape)
        pos = xp.take_along_axis(pos, k[..., None], axis=-1)[..., 0]
        nonempty = xp.asarray(((he - hs) > 0)[lo:hi, None, :, None]
                              & ((we - ws) > 0)[lo:hi, None, None, :])
        found = best > lowest
        out[lo:hi] = xp.where(found, best, xp.where(nonempty, xp.asarray(lowest, x.dtype),
                                                    xp.zeros((), x.dtype)))
        argmax[lo:hi] = xp.where(found, pos, -1)
    return {"Out": [out], "Argmax": [argmax]}


def _positions(xp: Any, ih: np.ndarray, iw: np.ndarray, lo: int, hi: int, w: int) -> Any:
    """``h · W + w`` of every window element, ``[r, 1, ph, pw, Kh · Kw]`` (row-major)."""
    pos = ih[lo:hi, :, None, :, None] * w + iw[lo:hi, None, :, None, :]  # [r, ph, pw, Kh, Kw]
    return xp.asarray(pos.reshape(hi - lo, 1, ih.shape[1], iw.shape[1], -1))


@register("roi_pool_grad", *grad_slots(("X", "ROIs", "RoisLod", "Argmax"), ("Out",), ("X",)),
          _ROI_ATTRS, optional=("RoisLod",), lod="kernel")
def roi_pool_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: each output gradient added at its bin's Argmax position (none for empty bins)."""
    x, rois, argmax = ins["X"][0], ins["ROIs"][0], ins["Argmax"][0]
    xp = array_module(x)
    n, c, h, w = (int(d) for d in x.shape)
    r = int(rois.shape[0])
    offsets = _offsets("roi_pool_grad", ins, attrs, n, r, lod_slot="RoisLod")
    dout = _dout(ins, tuple(argmax.shape), xp, x.dtype)
    dx = xp.zeros(n * c * h * w, dtype=x.dtype)
    if r:
        batch = xp.asarray(np.repeat(np.arange(n), np.diff(offsets)))
        plane = (batch[:, None] * c + xp.arange(c)[None]) * (h * w)  # [R, C]
        hit = argmax >= 0
        idx = xp.where(hit, plane[:, :, None, None] + argmax, 0).reshape(-1)
        scatter_add(xp, dx, idx, xp.where(hit, dout, xp.zeros((), x.dtype)).reshape(-1))
    return {"X" + GRAD: [dx.reshape(x.shape)]}


# ---------------------------------------------------------------------------------------------
# roi_align


def _bilinear_axis(coords: np.ndarray, size: int, dt: np.dtype):
    """Per sample coordinate: (inside, low index, high index, weight low, weight high) along
    one axis, with Paddle's rules: outside ``[-1, size]`` the sample is 0, below 0 it is
    clamped to 0, from ``size - 1`` on both corners are the last pixel."""
    inside = (coords >= -1.0) & (coords <= size)
    v = np.where(coords <= 0, dt.type(0), coords)
    low = v.astype(np.int64)
    last = low >= size - 1
    low = np.where(last, size - 1, low)
    high = np.where(last, size - 1, low + 1)
    v = np.where(last, low.astype(dt), v)
    frac = (v - low).astype(dt)
    return inside, low, high, (dt.type(1) - frac).astype(dt), frac


def _roi_align_weights(rois: np.ndarray, ph: int, pw: int, scale: Any, ratio: int,
                       h: int, w: int, dt: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Ay ``[R, ph, H]`` and Ax ``[R, pw, W]``: Σ over a bin's sample rows (columns) of their
    bilinear weights, so that Ay · X · Axᵀ / count is Paddle's average of the samples."""
    r = rois.shape[0]
    ay, ax = np.zeros((r, ph, h), dt), np.zeros((r, pw, w), dt)
    one = dt.type(1)
    for k in range(r):
        xmin, ymin, xmax, ymax = (rois[k] * scale).astype(dt)
        roi_w, roi_h = max(xmax - xmin, one), max(ymax - ymin, one)
        bin_h, bin_w = dt.type(roi_h / dt.type(ph)), dt.type(roi_w / dt.type(pw))
        gh = ratio if ratio > 0 else int(math.ceil(roi_h / dt.type(ph)))
        gw = ratio if ratio > 0 else int(math.ceil(roi_w / dt.type(pw)))
        count = dt.type(gh * gw)
        for weights, start, size, bins, grid, pooled in (
                (ay[k], ymin, h, bin_h, gh, ph), (ax[k], xmin, w, bin_w, gw, pw)):
            p = np.arange(pooled, dtype=dt)[:, None]
            s = np.arange(grid, dtype=dt)[None] + dt.type(0.5)
            coords = (start + p * bins + s * bins / dt.type(grid)).astype(dt)  # [pooled, grid]
            inside, low, high, w_low, w_high = _bilinear_axis(coords, size, dt)
            rows = np.broadcast_to(np.arange(pooled)[:, None], coords.shape)
            np.add.at(weights, (rows, low), np.where(inside, w_low, 0))
            np.add.at(weights, (rows, high), np.where(inside, w_high, 0))
        ay[k] /= count  # the average over the gh · gw samples
    return ay, ax


def _roi_align_setup(op: str, ins: dict, attrs: dict):
    x, rois = ins["X"][0], ins["ROIs"][0]
    ph, pw, scale = _check(op, x, rois, attrs)
    n, _, h, w = (int(d) for d in x.shape)
    offsets = _offsets(op, ins, attrs, n, int(rois.shape[0]), lod_slot="RoisLod")
    dt = _host_dtype(x)
    ay, ax = _roi_align_weights(to_host(rois).astype(dt), ph, pw, scale,
                                int(attrs.get("sampling_ratio", -1)), h, w, dt)
    return x, offsets, ay, ax


_ALIGN_ATTRS = {**_ROI_ATTRS, "sampling_ratio": -1}


@register("roi_align", ("X", "ROIs", "RoisLod"), ("Out",), _ALIGN_ATTRS,
          optional=("RoisLod",), lod="kernel",
          grad=grad_maker(("X", "ROIs", "RoisLod"), ("Out",), ("X",)))
def roi_align(ins: dict, attrs: dict, outs: tuple) -> dict:
    """The average of each bin's ``sampling_ratio²`` (adaptive: ``ceil(roi / pooled)`` per
    axis) bilinearly interpolated samples at the centres of a regular grid."""
    x, offsets, ay, ax = _roi_align_setup("roi_align", ins, attrs)
    return {"Out": [_separable_forward(x, offsets, ay, ax)]}


@register("roi_align_grad", *grad_slots(("X", "ROIs", "RoisLod"), ("Out",), ("X",)),
          _ALIGN_ATTRS, optional=("RoisLod",), lod="kernel")
def roi_align_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: each output gradient spread over its samples' four pixels by their bilinear
    weights, divided by the sample count."""
    x, offsets, ay, ax = _roi_align_setup("roi_align_grad", ins, attrs)
    dout = _dout(ins, (ay.shape[0], x.shape[1], ay.shape[1], ax.shape[1]),
                 array_module(x), x.dtype)
    return {"X" + GRAD: [_separable_grad(x, offsets, ay, ax, dout)]}


# ---------------------------------------------------------------------------------------------
# psroi_pool

_PS_ATTRS = {"output_channels": 1, **_ROI_ATTRS}


def _psroi_setup(op: str, ins: dict, attrs: dict):
    x, rois = ins["X"][0], ins["ROIs"][0]
    ph, pw, scale = _check(op, x, rois, attrs)
    n, c, h, w = (int(d) for d in x.shape)
    oc = int(attrs.get("output_channels", 1))
    if oc <= 0 or c != oc * ph * pw:
        raise ValueError(f"{op}: the {c} channels of Input(X) must equal output_channels × "
                         f"pooled_height × pooled_width = {oc} × {ph} × {pw}")
    offsets = _offsets(op, ins, attrs, n, int(rois.shape[0]))
    dt = _host_dtype(x)
    rh = to_host(rois).astype(dt)
    r = rh.shape[0]
    ay, ax = np.zeros((r, ph, h), dt), np.zeros((r, pw, w), dt)
    rounded = _c_round(rh).astype(dt)
    start_w, start_h = rounded[:, 0] * scale, rounded[:, 1] * scale
    end_w, end_h = (rounded[:, 2] + 1) * scale, (rounded[:, 3] + 1) * scale
    # too small ROIs are forced to 0.1 (avoids 0)
    roi_h = np.maximum(end_h - start_h, dt.type(0.1))
    roi_w = np.maximum(end_w - start_w, dt.type(0.1))
    for weights, start, extent, pooled, size in ((ay, start_h, roi_h, ph, h),
                                                 (ax, start_w, roi_w, pw, w)):
        bins = extent / dt.type(pooled)
        k = np.arange(pooled, dtype=dt)[None]
        lo = np.clip(np.floor(k * bins[:, None] + start[:, None]).astype(np.int64), 0, size)
        hi = np.clip(np.ceil((k + 1) * bins[:, None] + start[:, None]).astype(np.int64),
                     0, size)
        span = np.arange(size)[None, None]
        inside = (span >= lo[..., None]) & (span < hi[..., None])
        # the box average: 1 / (rows · columns) splits into 1/rows · 1/columns (0 if empty)
        weights[...] = inside / np.maximum(hi - lo, 1)[..., None]
    return x, offsets, oc, ay, ax


@register("psroi_pool", ("X", "ROIs"), ("Out",), _PS_ATTRS, lod="kernel",
          grad=grad_maker(("X", "ROIs"), ("Out",), ("X",)))
def psroi_pool(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Position-sensitive average pooling: output channel c of bin (p, q) averages input
    channel ``(c · ph + p) · pw + q`` over the bin (rounded ROI corners, the end corner
    included); an empty bin gives 0."""
    x, offsets, oc, ay, ax = _psroi_setup("psroi_pool", ins, attrs)
    xp = array_module(x)
    ph, pw, (h, w) = ay.shape[1], ax.shape[1], x.shape[2:]
    out = xp.zeros((ay.shape[0], oc, ph, pw), dtype=x.dtype)
    ay_d, ax_d = xp.asarray(ay, dtype=x.dtype), xp.asarray(ax, dtype=x.dtype)
    for n in range(len(offsets) - 1):
        lo, hi = int(offsets[n]), int(offsets[n + 1])
        if hi > lo:
            x5 = x[n].reshape(oc, ph, pw, h, w)
            rows = xp.einsum("rpj,cpqji->rcpqi", ay_d[lo:hi], x5)
            out[lo:hi] = xp.einsum("rcpqi,rqi->rcpq", rows, ax_d[lo:hi])
    return {"Out": [out]}


@register("psroi_pool_grad", *grad_slots(("X", "ROIs"), ("Out",), ("X",)), _PS_ATTRS,
          lod="kernel")
def psroi_pool_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: each output gradient spread evenly over its bin in its input channel."""
    x, offsets, oc, ay, ax = _psroi_setup("psroi_pool_grad", ins, attrs)
    xp = array_module(x)
    ph, pw, (h, w) = ay.shape[1], ax.shape[1], x.shape[2:]
    dout = _dout(ins, (ay.shape[0], oc, ph, pw), xp, x.dtype)
    dx = xp.zeros(x.shape, dtype=x.dtype)
    ay_d, ax_d = xp.asarray(ay, dtype=x.dtype), xp.asarray(ax, dtype=x.dtype)
    for n in range(len(offsets) - 1):
        lo, hi = int(offsets[n]), int(offsets[n + 1])
        if hi > lo:
            cols = xp.einsum("rcpq,rqi->rcpqi", dout[lo:hi], ax_d[lo:hi])
            dx[n] = xp.einsum("rpj,rcpqi->cpqji", ay_d[lo:hi], cols).reshape(-1, h, w)
    return {"X" + GRAD: [dx]}


# ---------------------------------------------------------------------------------------------
# prroi_pool


def _tent_integral(a: np.ndarray, b: np.ndarray, size: int, dt: np.dtype) -> np.ndarray:
    """``∫_a^b max(0, 1 − |t − i|) dt`` for every grid index i in ``[0, size)``: the weight of
    pixel i in the integral of the bilinear surface over ``[a, b]`` along one axis (pixels
    outside the map are 0, as PrRoIPoolingGetData reads them)."""
    i = np.arange(size, dtype=dt)

    def prim(t: np.ndarray) -> np.ndarray:  # the tent's antiderivative, 0 at -inf
        return np.where(t <= -1, 0, np.where(t <= 0, 0.5 * (t + 1) ** 2,
                                             np.where(t <= 1, 1 - 0.5 * (1 - t) ** 2, 1)))

    return (prim(b[..., None] - i) - prim(a[..., None] - i)).astype(dt)


def _tent(t: np.ndarray, size: int, dt: np.dtype) -> np.ndarray:
    """``max(0, 1 − |t − i|)`` for every grid index i: the bilinear weights of a point."""
    return np.maximum(0, 1 - np.abs(t[..., None] - np.arange(size, dtype=dt))).astype(dt)


def _prroi_geometry(rois: np.ndarray, ph: int, pw: int, scale: Any, dt: np.dtype):
    """Window starts/ends ``[R, ph]``, ``[R, pw]``, bin sizes ``[R]`` and window areas."""
    sw, sh, ew, eh = (rois * scale).astype(dt).T
    roi_w, roi_h = np.maximum(ew - sw, dt.type(0)), np.maximum(eh - sh, dt.type(0))
    bin_h, bin_w = roi_h / dt.type(ph), roi_w / dt.type(pw)
    ys = np.arange(ph, dtype=dt)[None] * bin_h[:, None] + sh[:, None]
    xs = np.arange(pw, dtype=dt)[None] * bin_w[:, None] + sw[:, None]
    area = np.maximum(dt.type(0), bin_w * bin_h)
    return ys, ys + bin_h[:, None], xs, xs + bin_w[:, None], bin_h, bin_w, area


def _prroi_setup(op: str, ins: dict, attrs: dict):
    x, rois = ins["X"][0], ins["ROIs"][0]
    ph, pw, scale = _check(op, x, rois, attrs)
    n, _, h, w = (int(d) for d in x.shape)
    offsets = _offsets(op, ins, attrs, n, int(rois.shape[0]), counts_slot="BatchRoINums")
    dt = _host_dtype(x)
    geo = _prroi_geometry(to_host(rois).astype(dt), ph, pw, scale, dt)
    ys, ye, xs, xe, _, _, area = geo
    ay = _tent_integral(ys, ye, h, dt)
    ax = _tent_integral(xs, xe, w, dt)
    # Out = integral / window area; an empty window gives 0
    ay *= np.where(area > 0, 1 / np.where(area > 0, area, 1), 0).astype(dt)[:, None, None]
    return x, offsets, ay, ax, geo, scale


@register("prroi_pool", ("X", "ROIs", "BatchRoINums"), ("Out",), _ROI_ATTRS,
          optional=("BatchRoINums",), lod="kernel",
          grad=grad_maker(("X", "Out", "ROIs", "BatchRoINums"), ("Out",), ("X", "ROIs")))
def prroi_pool(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Precise ROI pooling: the integral of the bilinearly interpolated input over each bin
    (no sampling, no rounding), divided by the bin's area; the channels are kept."""
    x, offsets, ay, ax, _, _ = _prroi_setup("prroi_pool", ins, attrs)
    return {"Out": [_separable_forward(x, offsets, ay, ax)]}


@register("prroi_pool_grad",
          *grad_slots(("X", "Out", "ROIs", "BatchRoINums"), ("Out",), ("X", "ROIs")),
          _ROI_ATTRS, optional=("BatchRoINums", "Out"), lod="kernel")
def prroi_pool_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: each output gradient spread by the bilinear-integral weights over its bin. dROIs:
    the derivative of each bin's average with respect to its window edges (minus the input
    integrated along the edge, plus the average times the edge length, over the area),
    carried to the ROI corners through the bin's share of the ROI and spatial_scale."""
    x, offsets, ay, ax, geo, scale = _prroi_setup("prroi_pool_grad", ins, attrs)
    xp = array_module(x)
    r, ph, pw = ay.shape[0], ay.shape[1], ax.shape[1]
    dout = _dout(ins, (r, x.shape[1], ph, pw), xp, x.dtype)
    res: dict = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [_separable_grad(x, offsets, ay, ax, dout)]
    if "ROIs" + GRAD in outs:
        res["ROIs" + GRAD] = [_prroi_rois_grad(x, offsets, geo, scale, dout, ins)]
    return res


def _prroi_rois_grad(x: Any, offsets: np.ndarray, geo: tuple, scale: Any, dout: Any,
                     ins: dict) -> Any:
    xp = array_module(x)
    dt = _host_dtype(x)
    h, w = int(x.shape[2]), int(x.shape[3])
    ys, ye, xs, xe, bin_h, bin_w, area = geo
    r, ph, pw = ys.shape[0], ys.shape[1], xs.shape[1]
    if r == 0:
        return xp.zeros((0, 4), dtype=x.dtype)
    iy, ix = _tent_integral(ys, ye, h, dt), _tent_integral(xs, xe, w, dt)  # unnormalised
    ok = area > 0
    inv = np.where(ok, 1 / np.where(ok, area, 1), 0).astype(dt)
    out = (ins.get("Out") or [None])[0]
    if out is None:
        out = _separable_forward(x, offsets, iy * inv[:, None, None], ix)

    def along(wy: np.ndarray, wx: np.ndarray) -> Any:
        return _separable_forward(x, offsets, wy, wx)

    # the input integrated along each window edge, [R, C, ph, pw]
    g_x1 = along(iy, _tent(xs, w, dt))
    g_x2 = along(iy, _tent(xe, w, dt))
    g_y1 = along(_tent(ys, h, dt), ix)
    g_y2 = along(_tent(ye, h, dt), ix)
    k = (inv * scale).astype(dt)
    d = xp.asarray(k, dtype=x.dtype)[:, None, None, None] * dout
    bh = xp.asarray(bin_h, dtype=x.dtype)[:, None, None, None]
    bw = xp.asarray(bin_w, dtype=x.dtype)[:, None, None, None]
    px1 = ((-g_x1 + bh * out) * d).sum(axis=1)  # ∂/∂(window x start), · dOut, [R, ph, pw]
    px2 = ((g_x2 - bh * out) * d).sum(axis=1)
    py1 = ((-g_y1 + bw * out) * d).sum(axis=1)
    py2 = ((g_y2 - bw * out) * d).sum(axis=1)
    # window q of pw starts at x1 + (x2 − x1) · q / pw and ends at x1 + (x2 − x1) · (q+1) / pw
    fq0 = xp.asarray(np.arange(pw, dtype=dt) / dt.type(pw))[None, None]
    fq1 = xp.asarray(np.arange(1, pw + 1, dtype=dt) / dt.type(pw))[None, None]
    fp0 = xp.asarray(np.arange(ph, dtype=dt) / dt.type(ph))[None, :, None]
    fp1 = xp.asarray(np.arange(1, ph + 1, dtype=dt) / dt.type(ph))[None, :, None]
    cols = [
        (px1 * (1 - fq0) + px2 * (1 - fq1)).sum(axis=(1, 2)),
        (py1 * (1 - fp0) + py2 * (1 - fp1)).sum(axis=(1, 2)),
        (px1 * fq0 + px2 * fq1).sum(axis=(1, 2)),
        (py1 * fp0 + py2 * fp1).sum(axis=(1, 2)),
    ]
    return xp.stack(cols, axis=1).astype(x.dtype)
