"""Box kernels of Fluid 1.8's detection layers: prior_box, density_prior_box,
anchor_generator, box_coder, iou_similarity, box_clip, polygon_box_transform and
box_decoder_and_assign."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import LOD_KEY, array_module, register, to_host

_EPS = 1e-6


def _lod(attrs: dict, slot: str) -> Any:
    """The LoD of input ``slot`` (``lod="kernel"`` ops), None without one."""
    return (((attrs.get("_lods") or {}).get(slot) or [None])[0]) or None


def expand_aspect_ratios(ratios: list[float], flip: bool) -> list[float]:
    """Fluid's ``ExpandAspectRatios``: 1 first, then each new ratio (duplicates within 1e-6
    dropped) followed by its reciprocal when ``flip``."""
    out = [1.0]
    for ar in ratios:
        if any(abs(ar - o) < _EPS for o in out):
            continue
        out.append(float(ar))
        if flip:
            out.append(1.0 / float(ar))
    return out


def _prior_sizes(attrs: dict) -> list[tuple[float, float]]:
    """The (half width, half height) of each prior at a position, in Fluid's order."""
    mins = [float(v) for v in attrs["min_sizes"]]
    maxs = [float(v) for v in attrs["max_sizes"]]
    ars = expand_aspect_ratios(list(attrs["aspect_ratios"]), bool(attrs["flip"]))
    sizes: list[tuple[float, float]] = []
    for s, mn in enumerate(mins):
        by_ratio = [(mn * np.sqrt(ar) / 2.0, mn / np.sqrt(ar) / 2.0) for ar in ars]
        big = [(np.sqrt(mn * maxs[s]) / 2.0,) * 2] if maxs else []
        if attrs["min_max_aspect_ratios_order"]:
            # Caffe's order: the min square, the max square, then the other ratios
            rest = [wh for ar, wh in zip(ars, by_ratio, strict=True) if abs(ar - 1.0) >= _EPS]
            sizes += [(mn / 2.0, mn / 2.0)] + big + rest
        else:
            sizes += by_ratio + big
    return sizes


def check_prior_attrs(op: str, attrs: dict) -> None:
    """The size and variance rules of prior_box's InferShape (the layer checks them too)."""
    mins, maxs = list(attrs["min_sizes"]), list(attrs["max_sizes"])
    if not mins or any(v <= 0 for v in mins):
        raise ValueError(f"{op}: min_sizes must be a non-empty list of positive sizes, "
                         f"got {mins}")
    if maxs:
        if len(maxs) != len(mins):
            raise ValueError(f"{op}: max_sizes has {len(maxs)} sizes but min_sizes has "
                             f"{len(mins)}; they must be the same")
        for i, (mn, mx) in enumerate(zip(mins, maxs, strict=True)):
            if not mx > mn:
                raise ValueError(f"{op}: max_sizes[{i}] = {mx} must be greater than "
                                 f"min_sizes[{i}] = {mn}")
    var = list(attrs["variances"])
    if len(var) != 4 or any(v <= 0 for v in var):
        raise ValueError(f"{op}: variances must be 4 positive values, got {var}")


def _check_maps(op: str, inp: Any, image: Any) -> None:
    if inp.ndim != 4 or image.ndim != 4:
        raise ValueError(f"{op}: Input and Image must be NCHW (4-D), got shapes "
                         f"{tuple(inp.shape)} and {tuple(image.shape)}")


@register("prior_box", ("Input", "Image"), ("Boxes", "Variances"),
          {"min_sizes": [], "max_sizes": [], "aspect_ratios": [], "variances": [],
           "flip": True, "clip": True, "step_w": 0.0, "step_h": 0.0, "offset": 0.5,
           "min_max_aspect_ratios_order": False, "use_mkldnn": False,
           "use_quantizer": False}, lod="none")
def prior_box(ins: dict, attrs: dict, outs: tuple) -> dict:
    """SSD prior boxes ``[H, W, num_priors, 4]`` (normalised by the image size) centred at
    ``(w + offset) · step_w, (h + offset) · step_h`` of the feature map, and their variances
    broadcast to the same shape."""
    inp, image = ins["Input"][0], ins["Image"][0]
    _check_maps("prior_box", inp, image)
    check_prior_attrs("prior_box", attrs)
    xp = array_module(inp)
    dt = inp.dtype if np.dtype(inp.dtype).kind == "f" else np.dtype(np.float32)
    fh, fw = int(inp.shape[2]), int(inp.shape[3])
    ih, iw = int(image.shape[2]), int(image.shape[3])
    step_w, step_h = float(attrs["step_w"]), float(attrs["step_h"])
    if step_w == 0 or step_h == 0:
        step_w, step_h = iw / fw, ih / fh
    off = float(attrs["offset"])
    half = np.asarray(_prior_sizes(attrs), dtype=np.float64)  # [P, 2]
    cx = ((np.arange(fw) + off) * step_w)[None, :, None]
    cy = ((np.arange(fh) + off) * step_h)[:, None, None]
    hw, hh = half[None, None, :, 0], half[None, None, :, 1]
    boxes = np.stack(np.broadcast_arrays((cx - hw) / iw, (cy - hh) / ih,
                                         (cx + hw) / iw, (cy + hh) / ih), axis=-1)
    if attrs["clip"]:
        boxes = np.clip(boxes, 0.0, 1.0)
    var = np.broadcast_to(np.asarray(attrs["variances"], dtype=np.float64), boxes.shape)
    return {"Boxes": [xp.asarray(boxes.astype(dt))],
            "Variances": [xp.asarray(np.ascontiguousarray(var).astype(dt))]}


def _corners(b: Any, norm: float) -> tuple:
    """Width, height, centre x and centre y of ``[..., 4]`` corner boxes."""
    w = b[..., 2] - b[..., 0] + norm
    h = b[..., 3] - b[..., 1] + norm
    return w, h, (b[..., 2] + b[..., 0]) / 2, (b[..., 3] + b[..., 1]) / 2


def _prior_corners(b: Any, norm: float) -> tuple:
    """Width, height and centre of prior boxes as Fluid's box_coder takes them: the centre is
    ``x0 + w / 2`` with the end pixel counted in ``w``, so not normalised priors sit half a
    pixel right of ``(x0 + x1) / 2`` (targets keep the midpoint; see box_coder_op.h)."""
    w = b[..., 2] - b[..., 0] + norm
    h = b[..., 3] - b[..., 1] + norm
    return w, h, b[..., 0] + w / 2, b[..., 1] + h / 2


@register("box_coder", ("PriorBox", "PriorBoxVar", "TargetBox"), ("OutputBox",),
          {"code_type": "encode_center_size", "box_normalized": True, "axis": 0,
           "variance": []}, optional=("PriorBoxVar",), lod="kernel")
def box_coder(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Encode corner boxes against priors as centre/size offsets (``[N, M, 4]`` for N targets
    and M priors), or decode ``[N, M, 4]`` offsets back to corner boxes, the priors broadcast
    along ``axis``; not normalised boxes count their end pixel (+1)."""
    prior, target = ins["PriorBox"][0], ins["TargetBox"][0]
    pvar = (ins.get("PriorBoxVar") or [None])[0]
    xp = array_module(prior, target)
    code, axis = attrs["code_type"], int(attrs["axis"])
    norm = 0.0 if attrs["box_normalized"] else 1.0
    # a numpy-array attr (as Paddle's own tests pass) has no truth value: flatten it
    raw_var = attrs["variance"]
    variance = [] if raw_var is None else [float(v) for v in np.asarray(raw_var).reshape(-1)]
    if prior.ndim != 2 or prior.shape[1] != 4:
        raise ValueError(f"box_coder: Input(PriorBox) must be [M, 4], got shape "
                         f"{tuple(prior.shape)}")
    if pvar is not None and tuple(pvar.shape) != tuple(prior.shape):
        raise ValueError(f"box_coder: Input(PriorBoxVar) must have PriorBox's shape "
                         f"{tuple(prior.shape)}, got {tuple(pvar.shape)}")
    if pvar is None and variance and len(variance) != 4:
        raise ValueError(f"box_coder: attr variance must hold 4 values, got {variance}")
    if code == "encode_center_size":
        if target.ndim != 2 or target.shape[1] != 4:
            raise ValueError(f"box_coder: encode_center_size needs TargetBox [N, 4], got "
                             f"shape {tuple(target.shape)}")
        pw, ph, pcx, pcy = (v[None, :] for v in _prior_corners(prior, norm))
        tw, th, tcx, tcy = (v[:, None] for v in _corners(target, norm))
        out = xp.stack([(tcx - pcx) / pw, (tcy - pcy) / ph,
                        xp.log(xp.abs(tw / pw)), xp.log(xp.abs(th / ph))], axis=-1)
        if pvar is not None:
            out = out / pvar[None, :, :]
        elif variance:
            out = out / xp.asarray(variance, dtype=out.dtype)
        return {"OutputBox": [out], LOD_KEY: {"OutputBox": [_lod(attrs, "TargetBox")]}}
    if code != "decode_center_size":
        raise ValueError(f"box_coder: code_type must be 'encode_center_size' or "
                         f"'decode_center_size', got {code!r}")
    if target.ndim != 3 or target.shape[2] != 4:
        raise ValueError(f"box_coder: decode_center_size needs TargetBox [N, M, 4], got "
                         f"shape {tuple(target.shape)}")
    if axis not in (0, 1):
        raise ValueError(f"box_coder: axis must be 0 or 1, got {axis}")
    if target.shape[1 - axis] != prior.shape[0]:
        raise ValueError(f"box_coder: with axis={axis} TargetBox's dim {1 - axis} "
                         f"({target.shape[1 - axis]}) must equal PriorBox's rows "
                         f"({prior.shape[0]})")

    def spread(a: Any) -> Any:  # [K, ...] prior rows broadcast along the target's axis
        return a[None] if axis == 0 else a[:, None]

    pw, ph, pcx, pcy = (spread(v) for v in _prior_corners(prior, norm))
    if pvar is not None:
        v = spread(pvar)
    elif variance:
        v = xp.asarray(variance, dtype=target.dtype)
    else:
        v = xp.ones(4, dtype=target.dtype)
    cx = v[..., 0] * target[..., 0] * pw + pcx
    cy = v[..., 1] * target[..., 1] * ph + pcy
    w = xp.exp(v[..., 2] * target[..., 2]) * pw
    h = xp.exp(v[..., 3] * target[..., 3]) * ph
    out = xp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - norm, cy + h / 2 - norm], axis=-1)
    # Fluid: the output shares PriorBox's LoD when the priors run along the rows (axis 1)
    lod = _lod(attrs, "PriorBox" if axis == 1 else "TargetBox")
    return {"OutputBox": [out.astype(target.dtype)], LOD_KEY: {"OutputBox": [lod]}}


@register("iou_similarity", ("X", "Y"), ("Out",), {"box_normalized": True}, lod="kernel")
def iou_similarity(ins: dict, attrs: dict, outs: tuple) -> dict:
    """``Out[i, j]``: intersection over union of box ``X[i]`` and box ``Y[j]`` (corner
    boxes; not normalised ones count their end pixel)."""
    x, y = ins["X"][0], ins["Y"][0]
    for slot, a in (("X", x), ("Y", y)):
        if a.ndim != 2 or a.shape[1] != 4:
            raise ValueError(f"iou_similarity: Input({slot}) must be [rows, 4], got shape "
                             f"{tuple(a.shape)}")
    xp = array_module(x, y)
    norm = 0.0 if attrs["box_normalized"] else 1.0
    a, b = x[:, None, :], y[None, :, :]
    area_a = (a[..., 3] - a[..., 1] + norm) * (a[..., 2] - a[..., 0] + norm)
    area_b = (b[..., 3] - b[..., 1] + norm) * (b[..., 2] - b[..., 0] + norm)
    iw = xp.minimum(a[..., 2], b[..., 2]) - xp.maximum(a[..., 0], b[..., 0]) + norm
    ih = xp.minimum(a[..., 3], b[..., 3]) - xp.maximum(a[..., 1], b[..., 1]) + norm
    inter = xp.maximum(iw, 0) * xp.maximum(ih, 0)
    return {"Out": [(inter / (area_a + area_b - inter)).astype(x.dtype)],
            LOD_KEY: {"Out": [_lod(attrs, "X")]}}


@register("box_clip", ("Input", "ImInfo"), ("Output",), {}, lod="kernel")
def box_clip(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Clip each image's boxes (the rows its LoD gives it) to
    ``[0, round(w / scale) - 1] × [0, round(h / scale) - 1]`` from its ImInfo row
    ``(h, w, scale)``."""
    boxes, im_info = ins["Input"][0], ins["ImInfo"][0]
    xp = array_module(boxes)
    if boxes.shape[-1] != 4:
        raise ValueError(f"box_clip: Input's last dim must be 4, got shape "
                         f"{tuple(boxes.shape)}")
    if im_info.ndim != 2 or im_info.shape[1] != 3:
        raise ValueError(f"box_clip: ImInfo must be [batch, 3], got shape "
                         f"{tuple(im_info.shape)}")
    lod = _lod(attrs, "Input")
    n_rows, batch = int(boxes.shape[0]), int(im_info.shape[0])
    if lod:
        if len(lod) != 1:
            raise ValueError(f"box_clip: Input(Input) supports 1 level of LoD, got "
                             f"{len(lod)} levels")
        offsets = np.asarray(lod[-1], dtype=np.int64)
    elif batch == 1:
        offsets = np.asarray([0, n_rows], dtype=np.int64)  # one image: all rows are its boxes
    else:
        raise ValueError(f"box_clip: Input has no LoD but ImInfo has {batch} images: feed "
                         "Input as a LoD tensor giving each image's boxes")
    if len(offsets) - 1 != batch:
        raise ValueError(f"box_clip: Input's LoD gives {len(offsets) - 1} images but ImInfo "
                         f"has {batch} rows; they must be the same")
    info = to_host(im_info).astype(np.float64)
    # C's round (halves away from zero) of the unscaled image size
    w_lim = np.floor(info[:, 1] / info[:, 2] + 0.5) - 1
    h_lim = np.floor(info[:, 0] / info[:, 2] + 0.5) - 1
    counts = np.diff(offsets)
    row_img = np.repeat(np.arange(batch), counts)
    lims = np.stack([w_lim, h_lim, w_lim, h_lim], axis=1)[row_img]  # [rows, 4]
    lims = xp.asarray(lims.reshape((n_rows,) + (1,) * (boxes.ndim - 2) + (4,)),
                      dtype=boxes.dtype)
    out = xp.maximum(xp.minimum(boxes, lims), 0).astype(boxes.dtype)
    return {"Output": [out], LOD_KEY: {"Output": [lod or None]}}


def _steps(inp: Any, image: Any, attrs: dict) -> tuple[float, float]:
    """The (step_w, step_h) of prior centres: the attrs, or image size / feature size when
    either is 0."""
    step_w, step_h = float(attrs["step_w"]), float(attrs["step_h"])
    if step_w == 0 or step_h == 0:
        return int(image.shape[3]) / int(inp.shape[3]), int(image.shape[2]) / int(inp.shape[2])
    return step_w, step_h


def _out_dtype(inp: Any) -> Any:
    return inp.dtype if np.dtype(inp.dtype).kind == "f" else np.dtype(np.float32)


@register("density_prior_box", ("Input", "Image"), ("Boxes", "Variances"),
          {"variances": [], "clip": True, "flatten_to_2d": False, "step_w": 0.0,
           "step_h": 0.0, "offset": 0.5, "fixed_sizes": [], "fixed_ratios": [],
           "densities": []}, lod="none")
def density_prior_box(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Density prior boxes: for each fixed size (with its density d) and fixed ratio, a
    d × d grid of boxes around each position, shifted by ``int(mean step) // d``; corners
    are always kept inside [0, 1]. ``[H, W, num_priors, 4]``, or ``[H·W·num_priors, 4]``
    with ``flatten_to_2d``."""
    inp, image = ins["Input"][0], ins["Image"][0]
    _check_maps("density_prior_box", inp, image)
    sizes = [float(v) for v in attrs["fixed_sizes"]]
    ratios = [float(v) for v in attrs["fixed_ratios"]]
    dens = [int(v) for v in attrs["densities"]]
    if len(sizes) != len(dens):
        raise ValueError(f"density_prior_box: fixed_sizes has {len(sizes)} sizes but "
                         f"densities has {len(dens)}; they must be the same")
    if any(v <= 0 for v in sizes + ratios + dens):
        raise ValueError(f"density_prior_box: fixed_sizes {sizes}, fixed_ratios {ratios} and "
                         f"densities {dens} must be positive")
    var = list(attrs["variances"])
    if len(var) != 4 or any(v <= 0 for v in var):
        raise ValueError(f"density_prior_box: variances must be 4 positive values, got {var}")
    xp = array_module(inp)
    fh, fw = int(inp.shape[2]), int(inp.shape[3])
    ih, iw = int(image.shape[2]), int(image.shape[3])
    step_w, step_h = _steps(inp, image, attrs)
    avg = int((step_w + step_h) * 0.5)  # truncated, as Fluid's int cast
    # per prior: (x offset from the centre, y offset, half width, half height)
    rel = []
    for size, d in zip(sizes, dens, strict=True):
        shift = avg // d
        for r in ratios:
            hw, hh = size * np.sqrt(r) / 2.0, size / np.sqrt(r) / 2.0
            for di in range(d):
                for dj in range(d):
                    rel.append((-avg / 2.0 + shift / 2.0 + dj * shift,
                                -avg / 2.0 + shift / 2.0 + di * shift, hw, hh))
    rel_a = np.asarray(rel, dtype=np.float64).reshape(-1, 4)
    off = float(attrs["offset"])
    cx = ((np.arange(fw) + off) * step_w)[None, :, None] + rel_a[None, None, :, 0]
    cy = ((np.arange(fh) + off) * step_h)[:, None, None] + rel_a[None, None, :, 1]
    hw, hh = rel_a[None, None, :, 2], rel_a[None, None, :, 3]
    boxes = np.stack(np.broadcast_arrays(np.maximum((cx - hw) / iw, 0.0),
                                         np.maximum((cy - hh) / ih, 0.0),
                                         np.minimum((cx + hw) / iw, 1.0),
                                         np.minimum((cy + hh) / ih, 1.0)), axis=-1)
    if attrs["clip"]:
        boxes = np.clip(boxes, 0.0, 1.0)
    if attrs["flatten_to_2d"]:
        boxes = boxes.reshape(-1, 4)
    variances = np.broadcast_to(np.asarray(var, dtype=np.float64), boxes.shape)
    dt = _out_dtype(inp)
    return {"Boxes": [xp.asarray(boxes.astype(dt))],
            "Variances": [xp.asarray(np.ascontiguousarray(variances).astype(dt))]}


@register("anchor_generator", ("Input",), ("Anchors", "Variances"),
          {"anchor_sizes": [], "aspect_ratios": [], "variances": [0.1, 0.1, 0.2, 0.2],
           "stride": [16.0, 16.0], "offset": 0.5}, lod="none")
def anchor_generator(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Faster R-CNN anchors ``[H, W, len(aspect_ratios) · len(anchor_sizes), 4]`` in pixels
    (end pixel included), ratio-major: the base of stride area is reshaped to each ratio
    (sides rounded) and scaled by size / stride; centres at
    ``w · stride_w + offset · (stride_w - 1)``."""
    inp = ins["Input"][0]
    if inp.ndim != 4:
        raise ValueError(f"anchor_generator: Input must be NCHW (4-D), got shape "
                         f"{tuple(inp.shape)}")
    sizes = [float(v) for v in attrs["anchor_sizes"]]
    ratios = [float(v) for v in attrs["aspect_ratios"]]
    stride = [float(v) for v in attrs["stride"]]
    var = list(attrs["variances"])
    if not sizes or not ratios or any(v <= 0 for v in sizes + ratios):
        raise ValueError(f"anchor_generator: anchor_sizes {sizes} and aspect_ratios {ratios} "
                         "must be non-empty lists of positive values")
    if len(stride) != 2 or any(v <= 0 for v in stride):
        raise ValueError(f"anchor_generator: stride must be 2 positive values (width, "
                         f"height), got {stride}")
    if len(var) != 4 or any(v <= 0 for v in var):
        raise ValueError(f"anchor_generator: variances must be 4 positive values, got {var}")
    xp = array_module(inp)
    sw, sh = stride
    off = float(attrs["offset"])
    whs = []
    for ar in ratios:
        base_w = np.floor(np.sqrt(sw * sh / ar) + 0.5)  # C's round of a positive value
        base_h = np.floor(base_w * ar + 0.5)
        for size in sizes:
            whs.append((size / sw * base_w, size / sh * base_h))
    wh = np.asarray(whs, dtype=np.float64)
    fh, fw = int(inp.shape[2]), int(inp.shape[3])
    cx = (np.arange(fw) * sw + off * (sw - 1))[None, :, None]
    cy = (np.arange(fh) * sh + off * (sh - 1))[:, None, None]
    hw, hh = 0.5 * (wh[None, None, :, 0] - 1), 0.5 * (wh[None, None, :, 1] - 1)
    anchors = np.stack(np.broadcast_arrays(cx - hw, cy - hh, cx + hw, cy + hh), axis=-1)
    variances = np.broadcast_to(np.asarray(var, dtype=np.float64), anchors.shape)
    dt = _out_dtype(inp)
    return {"Anchors": [xp.asarray(anchors.astype(dt))],
            "Variances": [xp.asarray(np.ascontiguousarray(variances).astype(dt))]}


@register("polygon_box_transform", ("Input",), ("Output",), {})
def polygon_box_transform(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Polygon vertex offsets to coordinates: even channels become ``4·w - x``, odd channels
    ``4·h - x`` (the geometry map is at a quarter of the image resolution)."""
    x = ins["Input"][0]
    if x.ndim != 4 or x.shape[1] % 2:
        raise ValueError(f"polygon_box_transform: Input must be [N, C, H, W] with an even C, "
                         f"got shape {tuple(x.shape)}")
    xp = array_module(x)
    h, w = int(x.shape[2]), int(x.shape[3])
    cols = xp.arange(w, dtype=x.dtype)[None, None, None, :] * 4
    rows = xp.arange(h, dtype=x.dtype)[None, None, :, None] * 4
    out = xp.empty_like(x)
    out[:, 0::2] = cols - x[:, 0::2]
    out[:, 1::2] = rows - x[:, 1::2]
    return {"Output": [out]}


@register("box_decoder_and_assign", ("PriorBox", "PriorBoxVar", "TargetBox", "BoxScore"),
          ("DecodeBox", "OutputAssignBox"), {"box_clip": 4.135}, lod="kernel")
def box_decoder_and_assign(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Decode each ROI's per-class deltas ``[N, classes · 4]`` against its prior box (pixel
    boxes, width and height clipped at ``exp(box_clip)``), and assign each ROI the box of
    its best non-background class (score above -1), or its prior box if none."""
    prior, pvar = ins["PriorBox"][0], ins["PriorBoxVar"][0]
    target, score = ins["TargetBox"][0], ins["BoxScore"][0]
    if prior.ndim != 2 or prior.shape[1] != 4:
        raise ValueError(f"box_decoder_and_assign: PriorBox must be [N, 4], got shape "
                         f"{tuple(prior.shape)}")
    if tuple(pvar.shape) != (4,):
        raise ValueError(f"box_decoder_and_assign: PriorBoxVar must be [4], got shape "
                         f"{tuple(pvar.shape)}")
    if (score.ndim != 2 or target.ndim != 2 or score.shape[0] != prior.shape[0]
            or target.shape[0] != prior.shape[0] or target.shape[1] != 4 * score.shape[1]):
        raise ValueError(f"box_decoder_and_assign: TargetBox must be [N, classes · 4] and "
                         f"BoxScore [N, classes] for N = {prior.shape[0]} prior boxes, got "
                         f"shapes {tuple(target.shape)} and {tuple(score.shape)}")
    xp = array_module(prior, target)
    n, classes = int(score.shape[0]), int(score.shape[1])
    d = target.reshape(n, classes, 4)
    pw = (prior[:, 2] - prior[:, 0] + 1)[:, None]
    ph = (prior[:, 3] - prior[:, 1] + 1)[:, None]
    pcx, pcy = prior[:, 0:1] + pw / 2, prior[:, 1:2] + ph / 2
    clip = float(attrs["box_clip"])
    cx = pvar[0] * d[..., 0] * pw + pcx
    cy = pvar[1] * d[..., 1] * ph + pcy
    w = xp.exp(xp.minimum(pvar[2] * d[..., 2], clip)) * pw
    h = xp.exp(xp.minimum(pvar[3] * d[..., 3], clip)) * ph
    dec = xp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1], axis=-1)
    dec = dec.astype(target.dtype)
    # the best class past the background one (class 0), scores above -1 only (Fluid starts
    # its running maximum at -1); ties go to the first
    fg = score[:, 1:] if classes > 1 else xp.full((n, 1), -1, dtype=score.dtype)
    best = xp.argmax(fg, axis=1)
    rows = xp.arange(n)
    found = fg[rows, best] > -1
    picked = dec[rows, xp.minimum(best + 1, classes - 1)] if classes > 1 else prior
    assign = xp.where(found[:, None], picked, prior).astype(target.dtype)
    return {"DecodeBox": [dec.reshape(n, classes * 4)], "OutputAssignBox": [assign],
            LOD_KEY: {"DecodeBox": [_lod(attrs, "TargetBox")],
                      "OutputAssignBox": [_lod(attrs, "PriorBox")]}}
