"""Deformable convolution and pooling kernels of Fluid 1.8: deformable_conv (v2, with a
mask), deformable_conv_v1 and deformable_psroi_pooling (and their gradients)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, array_module, register, to_host
from .roi_ops import _c_round, _offsets
from .selected_rows import grad_maker, grad_slots

# -- deformable_conv / deformable_conv_v1 (Paddle 1.8's deformable_conv_op.cc/.h,
# deformable_conv_v1_op.cc/.h, deformable_conv_func.h) ------------------------------------------
# Tap t = i·KW + j of output pixel (y, x) samples the input at
# (y·stride_h − pad_h + i·dilation_h + Δh, x·stride_w − pad_w + j·dilation_w + Δw), where Δh and
# Δw are Offset channels g·2K + 2t and g·2K + 2t + 1 of deformable group g (K = KH·KW), and v2
# multiplies the sample by Mask channel g·K + t. Sampling is bilinear, a point counting only when
# −1 < h < H and −1 < w < W and each of its four neighbours only when inside the image (zero
# elsewhere), as DmcnIm2colBilinear. The sampled columns then meet the (grouped) filter as in
# conv2d. The gradients are the exact derivatives of that map (Paddle's col2im, col2im_coord and
# the mask gradient compute the same sums).

_DC_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "dilations": [1, 1], "groups": 1,
             "deformable_groups": 1, "im2col_step": 64}


def _pair_attr(op: str, attrs: dict, name: str, low: int) -> tuple[int, int]:
    values = [int(v) for v in (attrs.get(name) or _DC_ATTRS[name])]
    if len(values) != 2 or min(values) < low:
        raise ValueError(f"{op}: {name} must be 2 ints >= {low}, got {attrs.get(name)!r}")
    return values[0], values[1]


def _dc_geometry(op: str, ins: dict, attrs: dict, modulated: bool) -> dict:
    """Checks the shapes as Paddle's InferShape does; returns the sizes the kernels need."""
    x, offset, filt = ins["Input"][0], ins["Offset"][0], ins["Filter"][0]
    if x.ndim != 4 or filt.ndim != 4:
        raise ValueError(f"{op}: Input and Filter must be 4-D, got shapes {list(x.shape)} and "
                         f"{list(filt.shape)}")
    n, c, h, w = (int(s) for s in x.shape)
    m, cpg, kh, kw = (int(s) for s in filt.shape)
    groups, dg = int(attrs.get("groups", 1)), int(attrs.get("deformable_groups", 1))
    step = int(attrs.get("im2col_step", 64))
    if groups <= 0 or dg <= 0 or step <= 0:
        raise ValueError(f"{op}: groups, deformable_groups and im2col_step must be positive, "
                         f"got {groups}, {dg} and {step}")
    if c != cpg * groups or m % groups:
        raise ValueError(f"{op}: Input's channels ({c}) must equal Filter's channels ({cpg}) "
                         f"times groups ({groups}), and Filter's {m} filters be a multiple of "
                         "groups")
    if m % dg or c % dg:
        raise ValueError(f"{op}: Filter's {m} filters and Input's {c} channels must be "
                         f"multiples of deformable_groups ({dg})")
    if n > step and n % step:
        raise ValueError(f"{op}: the batch size ({n}) must be at most or a multiple of "
                         f"im2col_step ({step})")
    sh, sw = _pair_attr(op, attrs, "strides", 1)
    ph, pw = _pair_attr(op, attrs, "paddings", 0)
    dh, dw = _pair_attr(op, attrs, "dilations", 1)
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"{op}: Input {list(x.shape)} with Filter {list(filt.shape)} leaves no "
                         "output")
    k = kh * kw
    want = [n, 2 * dg * k, oh, ow]
    if list(offset.shape) != want:
        raise ValueError(f"{op}: Offset must have shape {want} (N, 2·deformable_groups·KH·KW, "
                         f"out_h, out_w), got {list(offset.shape)}")
    if modulated:
        mask = ins["Mask"][0]
        want = [n, dg * k, oh, ow]
        if list(mask.shape) != want:
            raise ValueError(f"{op}: Mask must have shape {want} (N, deformable_groups·KH·KW, "
                             f"out_h, out_w), got {list(mask.shape)}")
    return {"n": n, "c": c, "h": h, "w": w, "m": m, "kh": kh, "kw": kw, "groups": groups,
            "dg": dg, "oh": oh, "ow": ow, "sh": sh, "sw": sw, "ph": ph, "pw": pw, "dh": dh,
            "dw": dw}


def _corners(xp: Any, py: Any, px: Any, h: int, w: int) -> list[tuple]:
    """The four bilinear neighbours of points ``(py, px)``: ``(flat index, weight, ∂weight/∂h,
    ∂weight/∂w)``, each zero (index 0) where the point or the neighbour is outside the image."""
    inside = (py > -1) & (px > -1) & (py < h) & (px < w)
    y0, x0 = xp.floor(py), xp.floor(px)
    ly, lx = py - y0, px - x0
    hy, hx = 1 - ly, 1 - lx
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    out = []
    for yy, xx, wt, dwy, dwx in ((y0, x0, hy * hx, -hx, -hy), (y0, x0 + 1, hy * lx, -lx, hy),
                                 (y0 + 1, x0, ly * hx, hx, -ly), (y0 + 1, x0 + 1, ly * lx, lx, ly)):
        ok = inside & (yy >= 0) & (yy <= h - 1) & (xx >= 0) & (xx <= w - 1)
        zero = xp.zeros((), py.dtype)
        out.append((xp.where(ok, yy * w + xx, 0), xp.where(ok, wt, zero),
                    xp.where(ok, dwy, zero), xp.where(ok, dwx, zero)))
    return out


def _taps(xp: Any, offset: Any, g: dict):
    """Per tap ``t``: (t, the sampling rows, the sampling columns), each ``[N, DG, P]``."""
    n, dg, k, p = g["n"], g["dg"], g["kh"] * g["kw"], g["oh"] * g["ow"]
    off = offset.reshape(n, dg, k, 2, p)
    ys = (xp.arange(g["oh"]) * g["sh"] - g["ph"]).astype(offset.dtype)
    xs = (xp.arange(g["ow"]) * g["sw"] - g["pw"]).astype(offset.dtype)
    for t in range(k):
        i, j = divmod(t, g["kw"])
        by = xp.repeat(ys + i * g["dh"], g["ow"])
        bx = xp.tile(xs + j * g["dw"], g["oh"])
        yield t, by + off[:, :, t, 0], bx + off[:, :, t, 1]


def _grouped_input(x: Any, g: dict) -> Any:
    """Input as ``[N, DG, H·W, C / DG]``: a gather by flat position gives channel vectors."""
    n, dg = g["n"], g["dg"]
    return x.reshape(n, dg, g["c"] // dg, g["h"] * g["w"]).transpose(0, 1, 3, 2)


def _dc_columns(xp: Any, x: Any, offset: Any, mask: Any, g: dict) -> Any:
    """The (masked) sampled columns ``[N, groups, C / groups · K, P]``."""
    n, dg, k, p = g["n"], g["dg"], g["kh"] * g["kw"], g["oh"] * g["ow"]
    xg = _grouped_input(x, g)
    ni, gi = xp.arange(n)[:, None, None], xp.arange(dg)[None, :, None]
    mk = None if mask is None else mask.reshape(n, dg, k, p)
    cols = xp.empty((n, dg, g["c"] // dg, k, p), x.dtype)
    for t, py, px in _taps(xp, offset, g):
        val = 0
        for idx, wt, _, _ in _corners(xp, py, px, g["h"], g["w"]):
            val = val + wt[..., None] * xg[ni, gi, idx]
        if mk is not None:
            val = val * mk[:, :, t, :, None]
        cols[:, :, :, t, :] = val.transpose(0, 1, 3, 2)
    return cols.reshape(n, g["groups"], g["c"] // g["groups"] * k, p)


def _dc_forward(op: str, ins: dict, attrs: dict, modulated: bool) -> dict:
    g = _dc_geometry(op, ins, attrs, modulated)
    x, filt = ins["Input"][0], ins["Filter"][0]
    xp = array_module(x)
    mask = ins["Mask"][0] if modulated else None
    cols = _dc_columns(xp, x, ins["Offset"][0], mask, g)
    fm = filt.reshape(g["groups"], g["m"] // g["groups"], -1)
    out = xp.matmul(fm[None], cols).reshape(g["n"], g["m"], g["oh"], g["ow"])
    return {"Output": [out.astype(x.dtype, copy=False)]}


def _dc_backward(op: str, ins: dict, attrs: dict, outs: tuple, modulated: bool) -> dict:
    g = _dc_geometry(op, ins, attrs, modulated)
    x, offset, filt = ins["Input"][0], ins["Offset"][0], ins["Filter"][0]
    xp = array_module(x)
    mask = ins["Mask"][0] if modulated else None
    slots = ("Input", "Offset", "Mask", "Filter") if modulated else ("Input", "Offset", "Filter")
    d = ins["Output" + GRAD][0]
    if d is None:
        zeros = {"Input": x, "Offset": offset, "Mask": mask, "Filter": filt}
        return {s + GRAD: [xp.zeros_like(zeros[s])] for s in slots if s + GRAD in outs}
    n, dg, k, p, groups = g["n"], g["dg"], g["kh"] * g["kw"], g["oh"] * g["ow"], g["groups"]
    cg, hw = g["c"] // dg, g["h"] * g["w"]
    dout = d.reshape(n, groups, g["m"] // groups, p)
    fm = filt.reshape(groups, g["m"] // groups, -1)
    res: dict = {}
    if "Filter" + GRAD in outs:
        cols = _dc_columns(xp, x, offset, mask, g)
        df = xp.matmul(dout, cols.transpose(0, 1, 3, 2)).sum(axis=0)
        res["Filter" + GRAD] = [df.reshape(filt.shape).astype(filt.dtype, copy=False)]
    wants = [s + GRAD in outs for s in ("Input", "Offset", "Mask")]
    wants[2] = wants[2] and modulated
    if not any(wants):
        return res
    dcols = xp.matmul(fm.transpose(0, 2, 1)[None], dout).reshape(n, dg, cg, k, p)
    xg = _grouped_input(x, g)
    ni, gi = xp.arange(n)[:, None, None], xp.arange(dg)[None, :, None]
    mk = None if mask is None else mask.reshape(n, dg, k, p)
    doff = xp.zeros((n, dg, k, 2, p), x.dtype)
    dmask = xp.zeros((n, dg, k, p), x.dtype)
    flats, weights = [], []
    base = ((xp.arange(n)[:, None, None] * dg + xp.arange(dg)[None, :, None]) * hw)
    cgi = xp.arange(cg)
    for t, py, px in _taps(xp, offset, g):
        dval = dcols[:, :, :, t, :].transpose(0, 1, 3, 2)        # [N, DG, P, Cg]
        corners = _corners(xp, py, px, g["h"], g["w"])
        if wants[1] or wants[2]:
            val, dvy, dvx = 0, 0, 0
            for idx, wt, dwy, dwx in corners:
                v = xg[ni, gi, idx]
                val = val + wt[..., None] * v
                dvy = dvy + dwy[..., None] * v
                dvx = dvx + dwx[..., None] * v
            if wants[2]:
                dmask[:, :, t] = (dval * val).sum(axis=-1)
        if mk is not None:
            dval = dval * mk[:, :, t, :, None]
        if wants[1]:
            doff[:, :, t, 0] = (dval * dvy).sum(axis=-1)
            doff[:, :, t, 1] = (dval * dvx).sum(axis=-1)
        if wants[0]:
            for idx, wt, _, _ in corners:
                flats.append(((base + idx)[..., None] * cg + cgi).reshape(-1))
                weights.append((dval * wt[..., None]).reshape(-1))
    if wants[0]:
        dx = xp.bincount(xp.concatenate(flats), weights=xp.concatenate(weights),
                         minlength=n * dg * hw * cg)
        dx = dx.reshape(n, dg, hw, cg).transpose(0, 1, 3, 2).reshape(x.shape)
        res["Input" + GRAD] = [xp.ascontiguousarray(dx).astype(x.dtype, copy=False)]
    if wants[1]:
        res["Offset" + GRAD] = [doff.reshape(offset.shape)]
    if wants[2]:
        res["Mask" + GRAD] = [dmask.reshape(mask.shape)]
    return res


_DC_SLOTS = ("Input", "Offset", "Mask", "Filter")
_DC1_SLOTS = ("Input", "Offset", "Filter")


@register("deformable_conv", _DC_SLOTS, ("Output",), _DC_ATTRS,
          grad=grad_maker(_DC_SLOTS, ("Output",), _DC_SLOTS))
def deformable_conv(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Modulated deformable convolution (v2): ``Output[n, m, y, x] = Σ_{c, t} Filter[m, c, t] ·
    Mask_t · bilinear(Input[n, c], p(y, x) + p_t + Offset_t)``, grouped as conv2d."""
    return _dc_forward("deformable_conv", ins, attrs, True)


@register("deformable_conv_grad", *grad_slots(_DC_SLOTS, ("Output",), _DC_SLOTS), _DC_ATTRS)
def deformable_conv_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Input, Offset, Mask and Filter gradients of ``deformable_conv``."""
    return _dc_backward("deformable_conv_grad", ins, attrs, outs, True)


@register("deformable_conv_v1", _DC1_SLOTS, ("Output",), _DC_ATTRS,
          grad=grad_maker(_DC1_SLOTS, ("Output",), _DC1_SLOTS))
def deformable_conv_v1(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Deformable convolution (v1): ``deformable_conv`` without the mask."""
    return _dc_forward("deformable_conv_v1", ins, attrs, False)


@register("deformable_conv_v1_grad", *grad_slots(_DC1_SLOTS, ("Output",), _DC1_SLOTS),
          _DC_ATTRS)
def deformable_conv_v1_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Input, Offset and Filter gradients of ``deformable_conv_v1``."""
    return _dc_backward("deformable_conv_v1_grad", ins, attrs, outs, False)


# -- deformable_psroi_pooling (Paddle 1.8's deformable_psroi_pooling_op.cc/.h) --------------------
# ROI r (rounded corners, the end included, scaled, shifted by −0.5) splits into pooled_height ×
# pooled_width bins; bin (p, q) of output channel o averages sample_per_part² bilinear samples
# of input channel (o·GH + gh)·GW + gw (gh = ⌊p·GH / PH⌋, gw = ⌊q·GW / PW⌋), its start moved
# by trans_std · Trans[r, 2·class + {0: x, 1: y}, part_h, part_w] times the ROI's width or
# height (class = o // (output_dim / classes), part_h = ⌊p / PH · part_height⌋). A sample
# counts when −0.5 ≤ h ≤ H − 0.5 and −0.5 ≤ w ≤ W − 0.5 and is then clamped into the map;
# TopCount is the number that counted (an empty bin gives 0).

_DPS_ATTRS = {"no_trans": False, "spatial_scale": 1.0, "output_dim": 1, "group_size": [1, 1],
              "pooled_height": 1, "pooled_width": 1, "part_size": [1, 1], "sample_per_part": 1,
              "trans_std": 0.1}
_DPS_FWD = ("Input", "ROIs", "Trans")


def _dps_geometry(op: str, ins: dict, attrs: dict) -> dict:
    x, rois, trans = ins["Input"][0], ins["ROIs"][0], ins["Trans"][0]
    xp = array_module(x)
    if x.ndim != 4:
        raise ValueError(f"{op}: Input must be 4-D NCHW, got shape {list(x.shape)}")
    if rois.ndim != 2 or rois.shape[1] != 4:
        raise ValueError(f"{op}: ROIs must be [num_rois, 4] (x1, y1, x2, y2), got shape "
                         f"{list(rois.shape)}")
    if trans.ndim != 4:
        raise ValueError(f"{op}: Trans must be 4-D [num_rois, 2·classes, part_h, part_w], "
                         f"got shape {list(trans.shape)}")
    n, c, h, w = (int(v) for v in x.shape)
    r = int(rois.shape[0])
    no_trans = bool(attrs.get("no_trans", False))
    scale = float(attrs.get("spatial_scale", 1.0))
    od = int(attrs.get("output_dim", 1))
    grp = [int(v) for v in attrs.get("group_size") or [1, 1]]
    part = [int(v) for v in attrs.get("part_size") or [1, 1]]
    ph, pw = int(attrs.get("pooled_height", 1)), int(attrs.get("pooled_width", 1))
    spp = int(attrs.get("sample_per_part", 1))
    trans_std = float(attrs.get("trans_std", 0.1))
    if len(grp) != 2 or min(grp) <= 0 or len(part) != 2 or min(part) <= 0:
        raise ValueError(f"{op}: group_size and part_size must be 2 positive ints, got "
                         f"{attrs.get('group_size')!r} and {attrs.get('part_size')!r}")
    if min(ph, pw, spp, od) <= 0 or scale <= 0 or trans_std < 0:
        raise ValueError(f"{op}: pooled_height ({ph}), pooled_width ({pw}), sample_per_part "
                         f"({spp}), output_dim ({od}) and spatial_scale ({scale}) must be "
                         f"positive and trans_std ({trans_std}) >= 0")
    if c < od * grp[0] * grp[1]:
        # Paddle checks only C >= output_dim and then reads past the channels
        raise ValueError(f"{op}: Input has {c} channels, fewer than output_dim·group_h·group_w "
                         f"= {od * grp[0] * grp[1]}")
    classes = 1 if no_trans else int(trans.shape[1]) // 2
    if not no_trans:
        if int(trans.shape[0]) != r or trans.shape[1] % 2 or classes == 0 or od % classes:
            raise ValueError(f"{op}: Trans must be [num_rois ({r}), 2·classes, ...] with "
                             f"output_dim ({od}) a multiple of classes, got shape "
                             f"{list(trans.shape)}")
        if part[0] > trans.shape[2] or part[1] > trans.shape[3]:
            raise ValueError(f"{op}: part_size {part} exceeds Trans's spatial size "
                             f"{list(trans.shape[2:])}")
    offsets = _offsets(op, ins, attrs, n, r)
    batch = np.repeat(np.arange(n), np.diff(offsets))
    dt = np.dtype(x.dtype)
    box = _c_round(to_host(rois).astype(dt))
    sw = box[:, 0] * dt.type(scale) - dt.type(0.5)
    sh = box[:, 1] * dt.type(scale) - dt.type(0.5)
    rw = np.maximum((box[:, 2] + 1) * dt.type(scale) - dt.type(0.5) - sw, dt.type(0.1))
    rh = np.maximum((box[:, 3] + 1) * dt.type(scale) - dt.type(0.5) - sh, dt.type(0.1))
    bh, bw = rh / dt.type(ph), rw / dt.type(pw)
    kp, kq = np.arange(ph, dtype=dt), np.arange(pw, dtype=dt)
    part_h = np.floor(kp / dt.type(ph) * dt.type(part[0])).astype(np.int64)
    part_w = np.floor(kq / dt.type(pw) * dt.type(part[1])).astype(np.int64)
    gh = np.clip(np.floor(kp * dt.type(grp[0]) / dt.type(ph)).astype(np.int64), 0, grp[0] - 1)
    gw = np.clip(np.floor(kq * dt.type(grp[1]) / dt.type(pw)).astype(np.int64), 0, grp[1] - 1)
    o = np.arange(od)
    chan = (o[:, None, None] * grp[0] + gh[None, :, None]) * grp[1] + gw[None, None, :]
    cls = o // (od // classes)
    # host geometry as [R, OD, PH, PW] (or broadcastable) device arrays
    dev = {k: xp.asarray(v) for k, v in (
        ("sw", sw[:, None, None, None]), ("sh", sh[:, None, None, None]),
        ("rw", rw[:, None, None, None]), ("rh", rh[:, None, None, None]),
        ("bh", bh[:, None, None, None]), ("bw", bw[:, None, None, None]),
        ("kp", kp[None, None, :, None]), ("kq", kq[None, None, None, :]))}
    tidx = None
    if not no_trans:
        # flat positions of each bin's x shift in Trans; its y shift is one channel further
        t_h, t_w = int(trans.shape[2]), int(trans.shape[3])
        tidx = (((np.arange(r)[:, None, None, None] * trans.shape[1]
                  + 2 * cls[None, :, None, None]) * t_h + part_h[None, None, :, None]) * t_w
                + part_w[None, None, None, :])
    base = (batch[:, None, None, None] * c + chan[None]) * h * w      # [R, OD, PH, PW]
    return {"xp": xp, "dt": dt, "r": r, "od": od, "ph": ph, "pw": pw, "spp": spp, "h": h,
            "w": w, "trans_std": trans_std, "dev": dev, "tidx": tidx,
            "tstride": None if no_trans else int(trans.shape[2]) * int(trans.shape[3]),
            "base": xp.asarray(base), "no_trans": no_trans}


def _dps_samples(x: Any, trans: Any, g: dict) -> dict:
    """Every sample ``[R, OD, PH, PW, S, S]``: validity, the clamped position's corners and
    fractions, and the four corner values."""
    xp, dt, d = g["xp"], g["dt"], g["dev"]
    if g["no_trans"]:
        # full [R, OD, PH, PW] shape: the counts are per output channel too
        tx = ty = xp.zeros(g["base"].shape, dt)
    else:
        flat = trans.reshape(-1)
        tidx = xp.asarray(g["tidx"])
        std = dt.type(g["trans_std"])
        tx = flat[tidx] * std
        ty = flat[tidx + g["tstride"]] * std
    wstart = d["kq"] * d["bw"] + d["sw"] + tx * d["rw"]
    hstart = d["kp"] * d["bh"] + d["sh"] + ty * d["rh"]
    s = xp.arange(g["spp"], dtype=dt)
    wpos = wstart[..., None, None] + s[None, :] * (d["bw"] / dt.type(g["spp"]))[..., None, None]
    hpos = hstart[..., None, None] + s[:, None] * (d["bh"] / dt.type(g["spp"]))[..., None, None]
    h, w = g["h"], g["w"]
    valid = ~((wpos < -0.5) | (wpos > w - 0.5) | (hpos < -0.5) | (hpos > h - 0.5))
    wc = xp.clip(wpos, 0, w - 1)
    hc = xp.clip(hpos, 0, h - 1)
    x0, x1 = xp.floor(wc), xp.ceil(wc)
    y0, y1 = xp.floor(hc), xp.ceil(hc)
    fx, fy = wc - x0, hc - y0
    x0, x1, y0, y1 = (v.astype(np.int64) for v in (x0, x1, y0, y1))
    base = g["base"][..., None, None]
    idx = {k: base + yy * w + xx for k, yy, xx in (("00", y0, x0), ("01", y1, x0),
                                                    ("10", y0, x1), ("11", y1, x1))}
    flat = x.reshape(-1)
    vals = {k: flat[v] for k, v in idx.items()}
    return {"valid": valid, "fx": fx, "fy": fy, "idx": idx, "vals": vals}


@register("deformable_psroi_pooling", _DPS_FWD, ("Output", "TopCount"), _DPS_ATTRS,
          lod="kernel",
          grad=grad_maker(("Input", "ROIs", "Trans", "TopCount"), ("Output",),
                          ("Input", "Trans")))
def deformable_psroi_pooling(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Deformable (position-sensitive) ROI pooling: per bin, the mean of its valid bilinear
    samples (see the section comment); ``TopCount`` (Input's dtype, as Paddle's kernel writes
    it) counts them."""
    x, trans = ins["Input"][0], ins["Trans"][0]
    g = _dps_geometry("deformable_psroi_pooling", ins, attrs)
    xp = g["xp"]
    smp = _dps_samples(x, trans, g)
    fx, fy, v = smp["fx"], smp["fy"], smp["vals"]
    val = ((1 - fx) * (1 - fy) * v["00"] + (1 - fx) * fy * v["01"] + fx * (1 - fy) * v["10"]
           + fx * fy * v["11"])
    valid = smp["valid"]
    total = xp.where(valid, val, xp.zeros((), x.dtype)).sum(axis=(-2, -1))
    count = valid.sum(axis=(-2, -1)).astype(x.dtype)
    out = xp.where(count > 0, total / xp.maximum(count, 1), xp.zeros((), x.dtype))
    return {"Output": [out.astype(x.dtype, copy=False)], "TopCount": [count]}


@register("deformable_psroi_pooling_grad",
          *grad_slots(("Input", "ROIs", "Trans", "TopCount"), ("Output",), ("Input", "Trans")),
          _DPS_ATTRS, lod="kernel")
def deformable_psroi_pooling_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Paddle's backward: each bin's gradient divided by its TopCount goes to the four
    corners of every valid sample with the bilinear weights (Input), and, times trans_std and
    the ROI's width or height, to the bin's Trans cell with the bilinear surface's slope at
    the clamped sample (Trans; Paddle's kernel takes that slope even where clamping makes the
    sample stand still). Paddle's backward computes the Trans column of a bin with
    part_height where its forward uses part_width; this kernel uses the forward's part_width
    (they agree when part_size is square)."""
    x, trans = ins["Input"][0], ins["Trans"][0]
    g = _dps_geometry("deformable_psroi_pooling_grad", ins, attrs)
    xp = g["xp"]
    d = ins["Output" + GRAD][0]
    res: dict = {}
    want_x, want_t = "Input" + GRAD in outs, "Trans" + GRAD in outs
    if d is None or (g["no_trans"] and not want_x):
        if want_x:
            res["Input" + GRAD] = [xp.zeros_like(x)]
        if want_t:
            res["Trans" + GRAD] = [xp.zeros_like(trans)]
        return res
    count = ins["TopCount"][0]
    smp = _dps_samples(x, trans, g)
    zero = xp.zeros((), x.dtype)
    diff = xp.where(count > 0, d / xp.maximum(count, 1), zero)[..., None, None]
    diff = xp.where(smp["valid"], diff, zero)
    fx, fy = smp["fx"], smp["fy"]
    if want_x:
        weights = {"00": (1 - fx) * (1 - fy), "01": (1 - fx) * fy, "10": fx * (1 - fy),
                   "11": fx * fy}
        flat = xp.concatenate([smp["idx"][k].reshape(-1) for k in weights])
        wts = xp.concatenate([(weights[k] * diff).reshape(-1) for k in weights])
        dx = xp.bincount(flat, weights=wts, minlength=x.size)
        res["Input" + GRAD] = [dx.reshape(x.shape).astype(x.dtype, copy=False)]
    if want_t:
        if g["no_trans"]:
            res["Trans" + GRAD] = [xp.zeros_like(trans)]
        else:
            v, dv = smp["vals"], g["dev"]
            std = x.dtype.type(g["trans_std"])
            slope_x = v["11"] * fy + v["10"] * (1 - fy) - v["01"] * fy - v["00"] * (1 - fy)
            slope_y = v["11"] * fx + v["01"] * (1 - fx) - v["10"] * fx - v["00"] * (1 - fx)
            gx = (slope_x * diff).sum(axis=(-2, -1)) * std * dv["rw"]
            gy = (slope_y * diff).sum(axis=(-2, -1)) * std * dv["rh"]
            tidx = xp.asarray(g["tidx"]).reshape(-1)
            flat = xp.concatenate([tidx, tidx + g["tstride"]])
            dt_ = xp.bincount(flat, weights=xp.concatenate([gx.reshape(-1), gy.reshape(-1)]),
                              minlength=trans.size)
            res["Trans" + GRAD] = [dt_.reshape(trans.shape).astype(trans.dtype, copy=False)]
    return res
