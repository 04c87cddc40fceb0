"""Spatial layers of ``fluid.layers``: ``affine_grid``, ``grid_sampler``, ``temporal_shift``,
``unfold``, ``pad_constant_like``, ``fsp_matrix`` and ``similarity_focus`` (Fluid 1.8's
signatures; the kernels are in :mod:`dask_fluid.ops.spatial_ops`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .tensor import _check_var

__all__: list[str] = ["affine_grid", "fsp_matrix", "grid_sampler", "pad_constant_like",
                      "similarity_focus", "temporal_shift", "unfold"]

_FLOATS = ("float32", "float64")


def _dtype(x: Variable, arg: str, layer: str, allowed: tuple[str, ...] = _FLOATS) -> None:
    if str(x.dtype) not in allowed:
        raise TypeError(f"{layer}: {arg} {x.name!r} must have dtype in {list(allowed)}, got "
                        f"{x.dtype}")


def _rank(x: Variable, arg: str, layer: str, rank: int, what: str) -> list[int]:
    shape = list(x.shape or ())
    if len(shape) != rank:
        raise ValueError(f"{layer}: {arg} {x.name!r} must be {rank}-D {what}, got shape {shape}")
    return shape


def affine_grid(theta: Variable, out_shape: Sequence[int] | Variable,
                name: str | None = None) -> Variable:
    """The sampling grid ``[N, H, W, 2]`` of the affine maps ``theta`` ``[N, 2, 3]``:
    Output[n, h, w] = theta[n] · (x_w, y_h, 1) with x and y evenly spaced over [-1, 1]
    (Fluid 1.8's ``layers.affine_grid``; op ``affine_grid``).

    ``out_shape`` is the target shape ``[N, C, H, W]``: a list or tuple of 4 ints (attribute
    ``output_shape``) or a 1-D int32 Variable (input ``OutputShape``; H and W are then unknown
    until run time).
    """
    _check_var(theta, "theta", "affine_grid")
    _dtype(theta, "theta", "affine_grid")
    tshape = _rank(theta, "theta", "affine_grid", 3, "[N, 2, 3]")
    if tshape[1:] != [2, 3]:
        raise ValueError(f"affine_grid: theta {theta.name!r} must have shape [N, 2, 3], got "
                         f"{tshape}")
    helper = LayerHelper("affine_grid", name)
    inputs: dict[str, list[Variable]] = {"Theta": [theta]}
    attrs: dict[str, Any] = {}
    if isinstance(out_shape, Variable):
        _dtype(out_shape, "out_shape", "affine_grid", ("int32",))
        inputs["OutputShape"] = [out_shape]
        h = w = -1
    elif isinstance(out_shape, (list, tuple)):
        if len(out_shape) != 4 or not all(isinstance(v, int) for v in out_shape):
            raise ValueError(f"affine_grid: out_shape must be a list of 4 ints [N, C, H, W] or "
                             f"an int32 Variable, got {out_shape!r}")
        attrs["output_shape"] = [int(v) for v in out_shape]
        h, w = int(out_shape[2]), int(out_shape[3])
    else:
        raise ValueError(f"affine_grid: out_shape must be a list, tuple or Variable, got "
                         f"{type(out_shape).__name__}")
    out = helper.create_tmp(dtype=theta.dtype, shape=[tshape[0], h, w, 2])
    helper.append_op("affine_grid", inputs=inputs, outputs={"Output": [out]}, attrs=attrs)
    return out


def grid_sampler(x: Variable, grid: Variable, name: str | None = None) -> Variable:
    """Bilinear samples of ``x`` ``[N, C, H, W]`` at the points ``grid`` ``[N, H, W, 2]``
    (``(x, y)`` in [-1, 1] with ±1 at the centres of the corner pixels, zero outside ``x``):
    the output has ``x``'s shape (Fluid 1.8's ``layers.grid_sampler``; op ``grid_sampler``).
    """
    _check_var(x, "x", "grid_sampler")
    _check_var(grid, "grid", "grid_sampler")
    _dtype(x, "x", "grid_sampler")
    _dtype(grid, "grid", "grid_sampler")
    xs = _rank(x, "x", "grid_sampler", 4, "NCHW")
    gs = _rank(grid, "grid", "grid_sampler", 4, "[N, H, W, 2]")
    if gs[3] > 0 and gs[3] != 2:
        raise ValueError(f"grid_sampler: the last dim of grid {grid.name!r} must be 2, got "
                         f"shape {gs}")
    for gd, xd, what in ((gs[1], xs[2], "H"), (gs[2], xs[3], "W")):
        if gd > 0 and xd > 0 and gd != xd:
            raise ValueError(f"grid_sampler: grid {grid.name!r} {gs} must have x's {what} "
                             f"({xd}): the output has x's shape {xs}")
    helper = LayerHelper("grid_sampler", name)
    out = helper.create_tmp(dtype=x.dtype, shape=xs)
    helper.append_op("grid_sampler", inputs={"X": [x], "Grid": [grid]},
                     outputs={"Output": [out]}, attrs={"use_cudnn": True})
    return out


def temporal_shift(x: Variable, seg_num: int, shift_ratio: float = 0.25,
                   name: str | None = None) -> Variable:
    """The temporal shift of ``x`` ``[N·T, C, H, W]`` with ``T = seg_num``: the first
    ``shift_ratio`` of the channels come from the previous segment, the next ``shift_ratio``
    from the following one, 0 past the ends (Fluid 1.8's ``layers.temporal_shift``; op
    ``temporal_shift``)."""
    _check_var(x, "x", "temporal_shift")
    _dtype(x, "x", "temporal_shift")
    if not isinstance(seg_num, int) or isinstance(seg_num, bool):
        raise TypeError(f"temporal_shift: seg_num must be an int, got {seg_num!r}")
    if not isinstance(shift_ratio, float):
        raise TypeError(f"temporal_shift: shift_ratio must be a float, got {shift_ratio!r}")
    shape = _rank(x, "x", "temporal_shift", 4, "[N*T, C, H, W]")
    if seg_num <= 0:
        raise ValueError(f"temporal_shift: seg_num must be greater than 0, got {seg_num}")
    if not 0.0 < shift_ratio < 0.5:
        raise ValueError(f"temporal_shift: shift_ratio must be in (0, 0.5), got {shift_ratio}")
    if shape[0] > 0 and shape[0] % seg_num:
        raise ValueError(f"temporal_shift: dim 0 of x {x.name!r} ({shape[0]}) must be "
                         f"divisible by seg_num ({seg_num})")
    helper = LayerHelper("temporal_shift", name)
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    helper.append_op("temporal_shift", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"seg_num": seg_num, "shift_ratio": shift_ratio})
    return out


def _ints(value: Any, count: int, arg: str, what: str) -> list[int]:
    values = [value] * count if isinstance(value, int) else value
    if (not isinstance(values, (list, tuple)) or len(values) != count
            or not all(isinstance(v, int) for v in values)):
        raise ValueError(f"unfold: {arg} must be {what}, got {value!r}")
    return [int(v) for v in values]


def unfold(x: Variable, kernel_sizes: int | Sequence[int], strides: int | Sequence[int] = 1,
           paddings: int | Sequence[int] = 0, dilations: int | Sequence[int] = 1,
           name: str | None = None) -> Variable:
    """im2col: the sliding ``kernel_sizes`` blocks of ``x`` ``[N, C, H, W]`` as columns of
    ``[N, C·kh·kw, L]``, L the number of blocks (Fluid 1.8's ``layers.unfold``; op
    ``unfold``).

    ``kernel_sizes``, ``strides`` and ``dilations`` are an int or 2 ints ``[h, w]``;
    ``paddings`` an int (all four sides), 2 ints ``[h, w]`` (Fluid repeats them to ``[h, w,
    h, w]``) or 4 ints ``[top, left, bottom, right]``.
    """
    _check_var(x, "x", "unfold")
    _dtype(x, "x", "unfold")
    shape = _rank(x, "x", "unfold", 4, "[N, C, H, W]")
    k = _ints(kernel_sizes, 2, "kernel_sizes", "an int or a list of two ints")
    s = _ints(strides, 2, "strides", "an int or a list of two ints")
    d = _ints(dilations, 2, "dilations", "an int or a list of two ints")
    if isinstance(paddings, int):
        p = [paddings] * 4
    elif isinstance(paddings, (list, tuple)) and len(paddings) in (2, 4) and all(
            isinstance(v, int) for v in paddings):
        p = list(paddings) * 2 if len(paddings) == 2 else list(paddings)
    else:
        raise ValueError(f"unfold: paddings must be an int or a list of 2 or 4 ints, got "
                         f"{paddings!r}")
    for arg, vals in (("kernel_sizes", k), ("strides", s), ("dilations", d)):
        if min(vals) <= 0:
            raise ValueError(f"unfold: {arg} must be greater than zero, got {vals}")
    if min(p) < 0:
        raise ValueError(f"unfold: paddings must be >= 0, got {p}")
    length = -1
    if shape[2] > 0 and shape[3] > 0:
        oh = (shape[2] + p[0] + p[2] - (d[0] * (k[0] - 1) + 1)) // s[0] + 1
        ow = (shape[3] + p[1] + p[3] - (d[1] * (k[1] - 1) + 1)) // s[1] + 1
        if oh <= 0 or ow <= 0:
            raise ValueError(f"unfold: the sliding blocks of x {x.name!r} (H, W = "
                             f"{shape[2:]}) with kernel_sizes {k}, strides {s}, paddings {p}, "
                             f"dilations {d} are ({oh}, {ow}), which must be positive")
        length = oh * ow
    helper = LayerHelper("unfold", name)
    out = helper.create_tmp(dtype=x.dtype, shape=[
        shape[0], shape[1] * k[0] * k[1] if shape[1] > 0 else -1, length])
    helper.append_op("unfold", inputs={"X": [x]}, outputs={"Y": [out]},
                     attrs={"kernel_sizes": k, "strides": s, "paddings": p, "dilations": d})
    return out


def pad_constant_like(x: Variable, y: Variable, pad_value: float = 0.0,
                      name: str | None = None) -> Variable:
    """``y`` padded at the end of each dim with ``pad_value`` to the shape of ``x`` (Fluid
    1.8's ``layers.pad_constant_like``; op ``pad_constant_like``). The output variable takes
    ``x``'s dtype as Fluid declares it (the kernel computes in ``y``'s)."""
    _check_var(x, "x", "pad_constant_like")
    _check_var(y, "y", "pad_constant_like")
    _dtype(y, "y", "pad_constant_like", ("float32", "float64", "int32", "int64"))
    xs, ys = list(x.shape or ()), list(y.shape or ())
    if len(xs) != len(ys):
        raise ValueError(f"pad_constant_like: x {x.name!r} {xs} and y {y.name!r} {ys} must "
                         "have the same rank")
    for i, (a, b) in enumerate(zip(xs, ys, strict=True)):
        if a >= 0 and b >= 0 and a < b:
            raise ValueError(f"pad_constant_like: dim {i} of x ({a}) must be >= that of y "
                             f"({b}); x {xs}, y {ys}")
    helper = LayerHelper("pad_constant_like", name)
    out = helper.create_tmp(dtype=x.dtype, shape=xs)
    helper.append_op("pad_constant_like", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                     attrs={"pad_value": float(pad_value)})
    return out


def fsp_matrix(x: Variable, y: Variable) -> Variable:
    """The FSP matrix ``[N, C1, C2]`` of ``x`` ``[N, C1, H, W]`` and ``y`` ``[N, C2, H, W]``:
    x yᵀ / (H·W) over the positions (Fluid 1.8's ``layers.fsp_matrix``; op ``fsp``)."""
    _check_var(x, "x", "fsp_matrix")
    _check_var(y, "y", "fsp_matrix")
    _dtype(x, "x", "fsp_matrix")
    _dtype(y, "y", "fsp_matrix")
    xs = _rank(x, "x", "fsp_matrix", 4, "[N, C, H, W]")
    ys = _rank(y, "y", "fsp_matrix", 4, "[N, C, H, W]")
    if xs[2:] != ys[2:]:
        raise ValueError(f"fsp_matrix: x {x.name!r} {xs} and y {y.name!r} {ys} must have the "
                         "same height and width")
    helper = LayerHelper("fsp_matrix")
    out = helper.create_tmp(dtype=x.dtype, shape=[xs[0], xs[1], ys[1]])
    helper.append_op("fsp", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]})
    return out


def similarity_focus(input: Variable, axis: int, indexes: list[int],  # noqa: A002 (Fluid's)
                     name: str | None = None) -> Variable:
    """The 0/1 similarity-focus mask of ``input`` ``[N, A, B, C]`` (same shape): for each
    index of ``indexes`` the slice at that index of ``axis`` is scanned from its largest
    value down, a value whose row and column are still free sets the mask to 1 along all of
    ``axis`` there (Fluid 1.8's ``layers.similarity_focus``; op ``similarity_focus``; no
    gradient)."""
    _check_var(input, "input", "similarity_focus")
    _dtype(input, "input", "similarity_focus")
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"similarity_focus: axis must be an int, got {axis!r}")
    if not isinstance(indexes, list) or not all(isinstance(i, int) for i in indexes):
        raise TypeError(f"similarity_focus: indexes must be a list of ints, got {indexes!r}")
    if axis not in (1, 2, 3):
        raise ValueError(f"similarity_focus: axis must be 1, 2 or 3, got {axis}")
    if not indexes:
        raise ValueError("similarity_focus: indexes can not be empty")
    shape = _rank(input, "input", "similarity_focus", 4, "[N, A, B, C]")
    for i in indexes:
        if i < 0 or (shape[axis] > 0 and i >= shape[axis]):
            raise ValueError(f"similarity_focus: each of indexes must be in [0, dim {axis} of "
                             f"input ({shape[axis]})), got {indexes}")
    helper = LayerHelper("similarity_focus", name)
    out = helper.create_tmp(dtype=input.dtype, shape=shape, stop_gradient=True)
    helper.append_op("similarity_focus", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"axis": axis, "indexes": list(indexes)})
    return out
