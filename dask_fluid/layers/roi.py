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

__all__: list[str] = ["roi_pool", "roi_align", "psroi_pool", "prroi_pool"]


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
