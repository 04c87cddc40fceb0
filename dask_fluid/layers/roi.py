"""Region-of-interest layers of ``fluid.layers``: ``roi_pool``, ``roi_align``, ``psroi_pool``
and ``prroi_pool`` (Fluid 1.8's signatures; the kernels are in :mod:`dask_fluid.ops.roi_ops`).

``rois`` is a ``[num_rois, 4]`` tensor of ``(x1, y1, x2, y2)`` boxes in input-image
coordinates; its one-level LoD (feed it with ``fluid.create_lod_tensor``) says which image of
the batch each box belongs to (``prroi_pool`` may take the box count per image as
``batch_roi_nums`` instead).
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .tensor import _check_var

__all__: list[str] = ["roi_pool", "roi_align", "psroi_pool", "prroi_pool",
                     "deformable_roi_pooling"]


def _check_float(x: Any, arg: str, layer: str, dtypes: tuple[str, ...]) -> Variable:
    _check_var(x, arg, layer)
    if x.dtype not in dtypes:
        raise TypeError(f"{layer}: {arg} {x.name!r} must be {' or '.join(dtypes)}, got "
                        f"{x.dtype}")
    return x


def _check_maps(input: Variable, rois: Variable, layer: str) -> tuple[int, int]:
    """(rows of rois, channels of input), -1 where unknown, after the rank checks."""
    shape = list(input.shape or ())
    if len(shape) != 4:
        raise ValueError(f"{layer}: input {input.name!r} must be 4-D NCHW, got shape {shape}")
    rshape = list(rois.shape or ())
    if len(rshape) != 2 or rshape[1] not in (4, -1):
        raise ValueError(f"{layer}: rois {rois.name!r} must be 2-D [num_rois, 4] "
                         f"(x1, y1, x2, y2), got shape {rshape}")
    return rshape[0], shape[1]


def _check_int(value: Any, arg: str, layer: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{layer}: {arg} must be an int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{layer}: {arg} must be greater than 0, got {value}")
    return value


def _check_scale(value: Any, layer: str, strict: bool) -> float:
    """spatial_scale: psroi_pool and prroi_pool reject a non-float (Fluid's TypeError)."""
    if strict and not isinstance(value, float):
        raise TypeError(f"{layer}: spatial_scale must be a float, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{layer}: spatial_scale must be a float, got {value!r}")
    if not value > 0:
        raise ValueError(f"{layer}: spatial_scale must be greater than 0, got {value}")
    return float(value)


def roi_pool(input: Variable, rois: Variable, pooled_height: int = 1, pooled_width: int = 1,
             spatial_scale: float = 1.0) -> Variable:
    """Max pooling of each ROI divided into ``pooled_height × pooled_width`` bins (ROI
    corners rounded after scaling; an empty bin gives 0): ``[num_rois, C, pooled_height,
    pooled_width]``. Op ``roi_pool`` (its ``Argmax`` output is int64), as Fluid 1.8's
    ``layers.roi_pool``; input and rois are float32, as Fluid checks."""
    _check_float(input, "input", "roi_pool", ("float32",))
    _check_float(rois, "rois", "roi_pool", ("float32",))
    n_rois, channels = _check_maps(input, rois, "roi_pool")
    ph = _check_int(pooled_height, "pooled_height", "roi_pool")
    pw = _check_int(pooled_width, "pooled_width", "roi_pool")
    scale = _check_scale(spatial_scale, "roi_pool", strict=False)
    helper = LayerHelper("roi_pool")
    out = helper.create_tmp(dtype=input.dtype, shape=[n_rois, channels, ph, pw])
    argmax = helper.create_tmp(dtype="int64", shape=[n_rois, channels, ph, pw],
                               stop_gradient=True)
    helper.append_op("roi_pool", inputs={"X": [input], "ROIs": [rois]},
                     outputs={"Out": [out], "Argmax": [argmax]},
                     attrs={"pooled_height": ph, "pooled_width": pw, "spatial_scale": scale})
    return out


def roi_align(input: Variable, rois: Variable, pooled_height: int = 1, pooled_width: int = 1,
              spatial_scale: float = 1.0, sampling_ratio: int = -1,
              name: str | None = None) -> Variable:
    """RoIAlign: each bin of each ROI is the average of ``sampling_ratio²`` bilinearly
    interpolated samples (``sampling_ratio <= 0``: ``ceil(roi size / pooled size)`` per
    axis), no rounding: ``[num_rois, C, pooled_height, pooled_width]``. Op ``roi_align``, as
    Fluid 1.8's ``layers.roi_align``."""
    _check_float(input, "input", "roi_align", ("float32", "float64"))
    _check_float(rois, "rois", "roi_align", ("float32", "float64"))
    n_rois, channels = _check_maps(input, rois, "roi_align")
    ph = _check_int(pooled_height, "pooled_height", "roi_align")
    pw = _check_int(pooled_width, "pooled_width", "roi_align")
    scale = _check_scale(spatial_scale, "roi_align", strict=False)
    if isinstance(sampling_ratio, bool) or not isinstance(sampling_ratio, int):
        raise TypeError(f"roi_align: sampling_ratio must be an int, got {sampling_ratio!r}")
    helper = LayerHelper("roi_align", name)
    out = helper.create_tmp(dtype=input.dtype, shape=[n_rois, channels, ph, pw])
    helper.append_op("roi_align", inputs={"X": [input], "ROIs": [rois]},
                     outputs={"Out": [out]},
                     attrs={"pooled_height": ph, "pooled_width": pw, "spatial_scale": scale,
                            "sampling_ratio": sampling_ratio})
    return out


def psroi_pool(input: Variable, rois: Variable, output_channels: int, spatial_scale: float,
               pooled_height: int, pooled_width: int, name: str | None = None) -> Variable:
    """Position-sensitive ROI average pooling (R-FCN): output channel c of bin (i, j) averages
    input channel ``(c · pooled_height + i) · pooled_width + j`` over the bin, so the input
    has ``output_channels · pooled_height · pooled_width`` channels: ``[num_rois,
    output_channels, pooled_height, pooled_width]``. Op ``psroi_pool``, as Fluid 1.8's
    ``layers.psroi_pool`` (which rejects a non-int size and a non-float scale)."""
    _check_var(input, "input", "psroi_pool")
    _check_var(rois, "rois", "psroi_pool")
    n_rois, channels = _check_maps(input, rois, "psroi_pool")
    oc = _check_int(output_channels, "output_channels", "psroi_pool")
    scale = _check_scale(spatial_scale, "psroi_pool", strict=True)
    ph = _check_int(pooled_height, "pooled_height", "psroi_pool")
    pw = _check_int(pooled_width, "pooled_width", "psroi_pool")
    if channels > 0 and channels != oc * ph * pw:
        raise ValueError(f"psroi_pool: input {input.name!r} has {channels} channels; it must "
                         f"have output_channels × pooled_height × pooled_width = "
                         f"{oc * ph * pw}")
    helper = LayerHelper("psroi_pool", name)
    out = helper.create_tmp(dtype=input.dtype, shape=[n_rois, oc, ph, pw])
    helper.append_op("psroi_pool", inputs={"X": [input], "ROIs": [rois]},
                     outputs={"Out": [out]},
                     attrs={"output_channels": oc, "spatial_scale": scale,
                            "pooled_height": ph, "pooled_width": pw})
    return out


def prroi_pool(input: Variable, rois: Variable, spatial_scale: float = 1.0,
               pooled_height: int = 1, pooled_width: int = 1,
               batch_roi_nums: Variable | None = None, name: str | None = None) -> Variable:
    """Precise ROI pooling (PrRoIPool): each bin is the integral of the bilinearly
    interpolated input over the bin divided by its area, differentiable in the ROI
    coordinates too: ``[num_rois, C, pooled_height, pooled_width]``. ``batch_roi_nums`` (int64
    ``[N]``, ROIs per image) replaces the LoD of ``rois``. Op ``prroi_pool``, as Fluid 1.8's
    ``layers.prroi_pool`` (float32 input and rois, a float scale and int sizes)."""
    _check_float(input, "input", "prroi_pool", ("float32",))
    _check_float(rois, "rois", "prroi_pool", ("float32",))
    n_rois, channels = _check_maps(input, rois, "prroi_pool")
    scale = _check_scale(spatial_scale, "prroi_pool", strict=True)
    ph = _check_int(pooled_height, "pooled_height", "prroi_pool")
    pw = _check_int(pooled_width, "pooled_width", "prroi_pool")
    inputs = {"X": [input], "ROIs": [rois]}
    if batch_roi_nums is not None:
        _check_float(batch_roi_nums, "batch_roi_nums", "prroi_pool", ("int64",))
        inputs["BatchRoINums"] = [batch_roi_nums]
    helper = LayerHelper("prroi_pool", name)
    out = helper.create_tmp(dtype=input.dtype, shape=[n_rois, channels, ph, pw])
    helper.append_op("prroi_pool", inputs=inputs, outputs={"Out": [out]},
                     attrs={"spatial_scale": scale, "pooled_height": ph,
                            "pooled_width": pw})
    return out


def deformable_roi_pooling(input: Variable, rois: Variable, trans: Variable,
                           no_trans: bool = False, spatial_scale: float = 1.0,
                           group_size: Any = (1, 1), pooled_height: int = 1,
                           pooled_width: int = 1, part_size: Any = None,
                           sample_per_part: int = 1, trans_std: float = 0.1,
                           position_sensitive: bool = False,
                           name: str | None = None) -> Variable:
    """Deformable (position-sensitive) ROI pooling, as Fluid 1.8's
    ``layers.deformable_roi_pooling`` (op ``deformable_psroi_pooling``).

    Each ROI (one-level LoD: the ROIs of each image) splits into ``pooled_height ×
    pooled_width`` bins; a bin averages ``sample_per_part²`` bilinear samples, its start moved
    by ``trans_std ·`` ``trans`` ``[num_rois, 2·classes, part_h, part_w]`` times the ROI's size
    (none with ``no_trans``); samples outside the map are dropped. Output channel ``o`` of bin
    ``(p, q)`` reads input channel ``(o·GH + gh)·GW + gw`` of its ``group_size`` cell. The
    output has the input's channels, or with ``position_sensitive`` the input's channels /
    (pooled_height · pooled_width): ``[num_rois, output_dim, pooled_height, pooled_width]``.
    ``part_size`` defaults to ``[pooled_height, pooled_width]``.
    """
    layer = "deformable_roi_pooling"
    _check_float(input, "input", layer, ("float32", "float64"))
    _check_float(rois, "rois", layer, ("float32", "float64"))
    _check_float(trans, "trans", layer, ("float32", "float64"))
    n_rois, channels = _check_maps(input, rois, layer)
    if len(trans.shape or ()) != 4:
        raise ValueError(f"{layer}: trans {trans.name!r} must be 4-D [num_rois, 2·classes, "
                         f"part_h, part_w], got shape {list(trans.shape or ())}")
    if not isinstance(no_trans, bool) or not isinstance(position_sensitive, bool):
        raise TypeError(f"{layer}: no_trans and position_sensitive must be bools, got "
                        f"{no_trans!r} and {position_sensitive!r}")
    ph = _check_int(pooled_height, "pooled_height", layer)
    pw = _check_int(pooled_width, "pooled_width", layer)
    spp = _check_int(sample_per_part, "sample_per_part", layer)
    scale = _check_scale(spatial_scale, layer, strict=False)
    if isinstance(trans_std, bool) or not isinstance(trans_std, (int, float)) or trans_std < 0:
        raise ValueError(f"{layer}: trans_std must be a float >= 0, got {trans_std!r}")
    pairs = []
    for arg, value in (("group_size", group_size),
                       ("part_size", [ph, pw] if part_size is None else part_size)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{layer}: {arg} must be a list or tuple of 2 ints, got {value!r}")
        if len(value) != 2:
            raise ValueError(f"{layer}: {arg} must hold 2 ints, got {value!r}")
        pairs.append([_check_int(v, arg, layer) for v in value])
    groups, parts = pairs
    if channels < 0:
        raise ValueError(f"{layer}: the channels of input {input.name!r} must be known")
    if position_sensitive:
        if channels % (ph * pw):
            raise ValueError(f"{layer}: with position_sensitive the input's {channels} "
                             f"channels must be a multiple of pooled_height × pooled_width = "
                             f"{ph * pw}")
        output_dim = channels // (ph * pw)
    else:
        output_dim = channels
    helper = LayerHelper("deformable_psroi_pooling", name)
    out = helper.create_tmp(dtype=input.dtype, shape=[n_rois, output_dim, ph, pw])
    # Fluid declares TopCount int32; its kernel writes the input's dtype, as here
    top_count = helper.create_tmp(dtype=input.dtype, shape=[n_rois, output_dim, ph, pw],
                                  stop_gradient=True)
    helper.append_op("deformable_psroi_pooling",
                     inputs={"Input": [input], "ROIs": [rois], "Trans": [trans]},
                     outputs={"Output": [out], "TopCount": [top_count]},
                     attrs={"no_trans": no_trans, "spatial_scale": scale,
                            "output_dim": output_dim, "group_size": groups,
                            "pooled_height": ph, "pooled_width": pw, "part_size": parts,
                            "sample_per_part": spp, "trans_std": float(trans_std)})
    return out
