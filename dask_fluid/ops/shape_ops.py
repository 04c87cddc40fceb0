"""Shape and indexing kernels of Fluid 1.8: ``stack``, ``squeeze2``, ``unsqueeze2``, ``gather``,
``expand``, ``slice`` and ``arg_max``, with their gradients (``arg_max`` has none).

Semantics follow Paddle 1.8's ops of those names: ``squeeze2`` with no ``axes`` drops every
dim of size 1 (and a listed dim that is not 1 stays); ``unsqueeze2`` inserts dims one after the
other in the order given; ``slice`` clamps ``starts`` and ``ends`` to the dim (negative values
count from its end) and ``decrease_axis`` drops the sliced dims of size 1; ``gather`` picks
rows of X by a 1-D Index and its gradient adds the output gradient into those rows (a row
picked twice gets both); ``expand`` tiles X ``expand_times`` along each dim, the times from
the ``ExpandTimes`` tensor, the ``expand_times_tensor`` list or the attribute, in that order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .creation_ops import _arg_index_dtype
from .index_ops import int_tensor_list_values, int_tensor_values, slice_params
from .math_ops import linear_grad_maker
from .registry import GRAD, LOD_KEY, array_module, register, set_grad, to_host
from .selected_rows import grad_maker, grad_slots, scatter_add
from .tensor_ops import _xshape

__all__ = ["expand_times", "slice_bounds", "squeeze_shape", "unsqueeze_shape"]


def _d(ins: dict, like_shape: tuple, xp: Any, dtype: Any, slot: str = "Out") -> Any:
    d = ins[slot + GRAD][0]
    return xp.zeros(like_shape, dtype=dtype) if d is None else d


# -- stack -------------------------------------------------------------------------------------

@register("stack", ("X",), ("Y",), {"axis": 0}, grad=grad_maker(("X",), ("Y",), ("X",)))
def stack(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y = the X tensors stacked along a new dim ``axis``."""
    xs = ins["X"]
    if len({tuple(x.shape) for x in xs}) != 1:
        raise ValueError(f"stack: every input must have the same shape, got "
                         f"{[list(x.shape) for x in xs]}")
    return {"Y": [array_module(*xs).stack(xs, axis=int(attrs.get("axis", 0)))]}


@register("stack_grad", *grad_slots(("X",), ("Y",), ("X",)), {"axis": 0})
def stack_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX_i = dY taken at index i of ``axis``."""
    xs = ins["X"]
    d = ins["Y" + GRAD][0]
    xp = array_module(*xs)
    if d is None:
        return {"X" + GRAD: [xp.zeros_like(x) for x in xs]}
    axis = int(attrs.get("axis", 0))
    return {"X" + GRAD: [xp.ascontiguousarray(xp.take(d, i, axis=axis))
                         for i in range(len(xs))]}


# -- squeeze2 / unsqueeze2 ---------------------------------------------------------------------

def squeeze_shape(shape: tuple, axes: list[int]) -> tuple:
    """Paddle 1.8's squeeze rule (``SqueezeOp::GetOutputShape``): without ``axes`` every dim
    of 1 goes; named axes go whatever their size, so a ``-1`` (unknown) dim named leaves the
    build-time shape. A named dim known to be other than 1 is an error here (Fluid 1.8 drops
    it and fails later, when the kernel reshapes)."""
    rank = len(shape)
    if not axes:
        return tuple(d for d in shape if d != 1)
    drop = {a + rank if a < 0 else a for a in axes}
    if any(not 0 <= a < rank for a in drop):
        raise ValueError(f"squeeze: axes {axes} out of range for a rank-{rank} input")
    wrong = sorted(a for a in drop if shape[a] not in (1, -1, None))
    if wrong:
        raise ValueError(f"squeeze: axis {wrong[0]} of an input of shape {list(shape)} has "
                         f"size {shape[wrong[0]]}; only dims of size 1 can be squeezed")
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def unsqueeze_shape(shape: tuple, axes: list[int]) -> tuple:
    """Paddle 1.8's unsqueeze rule: insert a 1 at each axis in turn (negative axes count in
    the growing rank); the result has rank 6 at most (``UnsqueezeOp::GetOutputShape``)."""
    out = list(shape)
    if len(out) + len(axes) > 6:
        raise ValueError(f"unsqueeze: the output's rank must be at most 6, got "
                         f"{len(out)} + {len(axes)} axes {list(axes)}")
    for a in axes:
        cur = len(out) + 1
        a = a + cur if a < 0 else a
        if not 0 <= a < cur:
            raise ValueError(f"unsqueeze: axis {a} out of range for a rank-{cur - 1} input")
        out.insert(a, 1)
    return tuple(out)


#: Fluid 1.8's unsqueeze and unsqueeze2 take their axes from these too (``layers.unsqueeze``
#: with a Variable, or a list holding Variables); both are dispensable
_UNSQUEEZE_TENSORS = ("AxesTensor", "AxesTensorList")


def unsqueeze_axes(ins: dict, attrs: dict, op: str) -> list[int]:
    """The axes of Fluid 1.8's ``UnsqueezeKernel``: the ``axes`` attr when it is not empty,
    else the ``AxesTensorList`` (one ``[1]`` int tensor per axis), else the ``AxesTensor``
    (1-D, int32 or int64)."""
    axes = [int(a) for a in attrs.get("axes") or []]
    if axes:
        return axes
    items = [t for t in ins.get("AxesTensorList") or [] if t is not None]
    if items:
        return int_tensor_list_values(items, "AxesTensorList", op)
    whole = (ins.get("AxesTensor") or [None])[0]
    if whole is not None:
        if to_host(whole).ndim != 1:
            raise ValueError(f"{op}: AxesTensor must be 1-D, got shape "
                             f"{list(to_host(whole).shape)}")
        return int_tensor_values(whole, "AxesTensor", op)
    return []


def _reshape_back(ins: dict, attrs: dict, outs: tuple) -> dict:
    xshape = ins["XShape"][0]
    shape = tuple(xshape.shape[1:])
    d = ins["Out" + GRAD][0]
    xp = array_module(xshape)
    return {"X" + GRAD: [xp.zeros(shape, xshape.dtype) if d is None else d.reshape(shape)]}


def _reshape_to_x(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut in X's shape: the grad of the v1 ops squeeze, unsqueeze and flatten, which
    read X itself (only its shape) where their v2 forms read XShape."""
    x = ins["X"][0]
    d = ins["Out" + GRAD][0]
    xp = array_module(x)
    return {"X" + GRAD: [xp.zeros(x.shape, x.dtype) if d is None else d.reshape(x.shape)]}


def _squeeze_out(ins: dict, attrs: dict, op: str) -> Any:
    x = ins["X"][0]
    return x.reshape(squeeze_shape(tuple(x.shape), [int(a) for a in attrs.get("axes", [])]))


def _unsqueeze_out(ins: dict, attrs: dict, op: str) -> Any:
    x = ins["X"][0]
    return x.reshape(unsqueeze_shape(tuple(x.shape), unsqueeze_axes(ins, attrs, op)))


for _type, _out, _tensors in (("squeeze", _squeeze_out, ()),
                              ("unsqueeze", _unsqueeze_out, _UNSQUEEZE_TENSORS)):
    def _kernel(ins: dict, attrs: dict, outs: tuple, _out=_out, _type=_type + "2") -> dict:
        x = ins["X"][0]
        res = {"Out": [_out(ins, attrs, _type)]}
        if "XShape" in outs:
            res["XShape"] = [_xshape(x)]
        return res

    _kernel.__doc__ = f"Out = X with dims {'removed' if 'un' not in _type else 'inserted'}."
    register(_type + "2", ("X",) + _tensors, ("Out", "XShape"), {"axes": []},
             optional=_tensors, grad=grad_maker(("XShape",)))(_kernel)
    register(_type + "2_grad", *grad_slots(("XShape",)), {"axes": []})(_reshape_back)
    # squeeze2_grad / unsqueeze2_grad are linear in dOut: their grad runs the forward op again
    # on DDX (squeeze_op.cc / unsqueeze_op.cc: Squeeze2DoubleGradOpMaker,
    # Unsqueeze2DoubleGradOpMaker, PR #27810, cherry-picked to release/1.8 in PR #27843).
    # Fluid's maker also writes the forward XShape again; nothing reads that copy, so it is
    # left out here
    set_grad(_type + "2_grad", linear_grad_maker(_type + "2"))

    # the v1 ops (no XShape), which Fluid 1.8 still registers and old saved models hold; their
    # grad reads X for its shape (SqueezeGradOpMaker / UnsqueezeGradOpMaker)
    def _kernel_v1(ins: dict, attrs: dict, outs: tuple, _out=_out, _type=_type) -> dict:
        return {"Out": [_out(ins, attrs, _type)]}

    _kernel_v1.__doc__ = _kernel.__doc__ + " (the v1 op: no XShape)"
    register(_type, ("X",) + _tensors, ("Out",), {"axes": []}, optional=_tensors,
             grad=grad_maker(("X",)))(_kernel_v1)
    register(_type + "_grad", *grad_slots(("X",)), {"axes": []})(_reshape_to_x)


# -- gather ------------------------------------------------------------------------------------

@register("gather", ("X", "Index"), ("Out",), {"overwrite": True},
          grad=grad_maker(("X", "Index"), in_grads=("X",)))
def gather(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X[Index] (rows of X)."""
    x, index = ins["X"][0], ins["Index"][0]
    idx = index.reshape(-1).astype(np.int64)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= x.shape[0]):
        raise ValueError(f"gather: an index is outside [0, {x.shape[0]}) (X has "
                         f"{x.shape[0]} rows)")
    return {"Out": [x[idx]]}


@register("gather_grad", *grad_slots(("X", "Index"), ("Out",), ("X",)), {"overwrite": True})
def gather_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = zeros with dOut added into the gathered rows."""
    x, index = ins["X"][0], ins["Index"][0]
    xp = array_module(x)
    idx = index.reshape(-1).astype(np.int64)
    d = _d(ins, (idx.size,) + tuple(x.shape[1:]), xp, x.dtype)
    dx = xp.zeros_like(x)
    scatter_add(xp, dx, idx, d)
    return {"X" + GRAD: [dx]}


# -- expand ------------------------------------------------------------------------------------

#: Fluid 1.8's expand takes its times from these too (``layers.expand`` with a Variable, or a
#: list holding Variables); both are dispensable
_EXPAND_TENSORS = ("ExpandTimes", "expand_times_tensor")


def expand_times(x: Any, ins: dict, attrs: dict) -> list[int]:
    """The expand times of Fluid 1.8's ``get_expand_times``: the ``ExpandTimes`` tensor, else
    the ``expand_times_tensor`` list (one ``[1]`` tensor per dim), else the attribute (which,
    when the layer built the list, holds -1 where a Variable goes).

    Raises
    ------
    TypeError
        A times tensor that is not int32.
    ValueError
        Not one time per dim of ``x``, a ``[1]`` tensor of another size, or a time below 1.
    """
    whole = (ins.get("ExpandTimes") or [None])[0]
    items = [t for t in ins.get("expand_times_tensor") or [] if t is not None]
    # Fluid's get_expand_times reads them as data<int>: int32 only
    if whole is not None:
        times = int_tensor_values(whole, "ExpandTimes", "expand", ("int32",))
        src = "ExpandTimes"
    elif items:
        times = int_tensor_list_values(items, "expand_times_tensor", "expand", ("int32",))
        src = "expand_times_tensor"
    else:
        times, src = [int(t) for t in attrs.get("expand_times", [])], "expand_times"
    if len(times) != x.ndim:
        raise ValueError(f"expand: {src} gives {len(times)} values {times}, but X has rank "
                         f"{x.ndim} (shape {list(x.shape)}); give one per dim")
    if min(times, default=1) < 1:
        raise ValueError(f"expand: every value of {src} must be at least 1, got {times}")
    return times


def _expand_lod(x: Any, attrs: dict) -> Any:
    """X's LoD where Fluid's ``ExpandOp::InferShape`` shares it: the ``expand_times`` attr
    (never a tensor) keeps the number of rows, so dim 0 is not a -1 there."""
    attr = [int(t) for t in attrs.get("expand_times", [])]
    lod = ((attrs.get("_lods") or {}).get("X") or [None])[0]
    rows = x.shape[0] if x.ndim else 1
    if not attr or attr[0] == -1 or rows * attr[0] != rows:
        return None
    return lod


@register("expand", ("X",) + _EXPAND_TENSORS, ("Out",), {"expand_times": []},
          optional=_EXPAND_TENSORS, lod="kernel",
          grad=grad_maker(("X",) + _EXPAND_TENSORS, in_grads=("X",)))
def expand(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X tiled along each dim, the times from ``ExpandTimes``, ``expand_times_tensor``
    or the ``expand_times`` attr, in that order (:func:`expand_times`)."""
    x = ins["X"][0]
    times = expand_times(x, ins, attrs)
    return {"Out": [array_module(x).tile(x, times)], LOD_KEY: {"Out": [_expand_lod(x, attrs)]}}


@register("expand_grad", *grad_slots(("X",) + _EXPAND_TENSORS, ("Out",), ("X",)),
          {"expand_times": []}, optional=_EXPAND_TENSORS)
def expand_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = the sum of dOut over the tiles (the times read as the forward op read them)."""
    x = ins["X"][0]
    xp = array_module(x)
    times = expand_times(x, ins, attrs)
    d = _d(ins, tuple(s * t for s, t in zip(x.shape, times, strict=True)), xp, x.dtype)
    split = []
    for t, s in zip(times, x.shape, strict=True):
        split += [t, s]
    axes = tuple(range(0, 2 * x.ndim, 2))
    return {"X" + GRAD: [d.reshape(split).sum(axis=axes)]}


# -- slice -------------------------------------------------------------------------------------

def slice_bounds(shape: tuple, axes: list[int], starts: list[int], ends: list[int]
                 ) -> tuple[slice, ...]:
    """The index of Paddle's slice: starts/ends clamped to each dim, negatives from its end."""
    if not len(axes) == len(starts) == len(ends):
        raise ValueError(f"slice: axes {axes}, starts {starts} and ends {ends} must have the "
                         "same length")
    index = [slice(None)] * len(shape)
    for a, s, e in zip(axes, starts, ends, strict=True):
        dim = shape[a]
        s = max(0, min(s + dim if s < 0 else s, dim))
        e = max(0, min(e + dim if e < 0 else e, dim))
        index[a] = slice(s, max(s, e))
    return tuple(index)


#: the end ``Variable.__getitem__`` gives ``x[-1]`` (Fluid 1.8's ``SliceKernel`` uses it too)
_TO_END = 10000000

_SLICE_ATTRS = {"axes": [], "starts": [], "ends": [], "decrease_axis": [], "infer_flags": []}


def _decreased(shape: tuple, attrs: dict) -> tuple:
    drop = {int(a) for a in attrs.get("decrease_axis", [])}
    out = tuple(d for i, d in enumerate(shape) if i not in drop)
    return out or (1,)


#: Fluid 1.8's slice op takes its starts and ends from these too (a Variable index or bound)
_SLICE_TENSORS = ("StartsTensor", "EndsTensor", "StartsTensorList", "EndsTensorList")


def _slice_index(x: Any, ins: dict, attrs: dict) -> tuple[slice, ...]:
    """The index of Fluid 1.8's ``SliceKernel``. With a bound tensor (``need_infer``) the
    bounds are checked there: as many as the axes, start -1 / end 0 on a decreased axis whose
    infer flag is -1 is ``x[-1]`` (how ``Variable.__getitem__`` writes an index Variable: end
    = index + 1), and each slice must keep at least one element."""
    axes = [int(a) for a in attrs["axes"]]
    starts, ends = (slice_params(ins, attrs, n, "slice") for n in ("starts", "ends"))
    if not any(ins.get(s) for s in _SLICE_TENSORS):
        return slice_bounds(x.shape, axes, starts, ends)
    for what, values in (("starts", starts), ("ends", ends)):
        if len(values) != len(axes):
            raise ValueError(f"slice: {what} has {len(values)} values {values}, axes "
                             f"{axes} has {len(axes)}; they must be as many")
    flags = [int(f) for f in attrs.get("infer_flags") or []]
    flags += [1] * (len(axes) - len(flags))
    decrease = {int(a) for a in attrs.get("decrease_axis") or []}
    ends = [_TO_END if s == -1 and e == 0 and f == -1 and a in decrease else e
            for a, s, e, f in zip(axes, starts, ends, flags, strict=True)]
    index = slice_bounds(x.shape, axes, starts, ends)
    for a, s, e in zip(axes, starts, ends, strict=True):
        if x.shape[a] > 0 and index[a].stop <= index[a].start:
            raise ValueError(f"slice: start {s} and end {e} select nothing of dim {a} (size "
                             f"{x.shape[a]}); the end must be greater than the start")
    return index


@register("slice", ("Input",) + _SLICE_TENSORS, ("Out",), _SLICE_ATTRS,
          optional=_SLICE_TENSORS,
          grad=grad_maker(("Input",) + _SLICE_TENSORS, in_grads=("Input",)))
def slice_(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = Input[starts:ends] along ``axes`` (clamped; ``decrease_axis`` dims dropped);
    starts and ends from the attributes or from the optional int tensors."""
    x = ins["Input"][0]
    out = x[_slice_index(x, ins, attrs)]
    if attrs.get("decrease_axis"):
        out = out.reshape(_decreased(out.shape, attrs))
    return {"Out": [array_module(x).ascontiguousarray(out)]}


@register("slice_grad", *grad_slots(("Input",) + _SLICE_TENSORS, ("Out",), ("Input",)),
          _SLICE_ATTRS, optional=_SLICE_TENSORS)
def slice_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dInput = zeros with dOut in the sliced region."""
    x = ins["Input"][0]
    xp = array_module(x)
    index = _slice_index(x, ins, attrs)
    region = xp.zeros_like(x)[index].shape
    d = _d(ins, region, xp, x.dtype)
    dx = xp.zeros_like(x)
    dx[index] = d.reshape(region)
    return {"Input" + GRAD: [dx]}


# slice_grad is linear in dOut: its grad slices DDInput as the forward op did (slice_op.cc:
# SliceDoubleOpGradMaker, a slice op; PR #22166, in Paddle since 1.7)
set_grad("slice_grad", linear_grad_maker("slice", src="Input" + GRAD, in_slot="Input",
                                        keep=_SLICE_TENSORS))


# -- arg_max -----------------------------------------------------------------------------------

@register("arg_max", ("X",), ("Out",), {"axis": -1, "keepdims": False, "dtype": "int64"})
def arg_max(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the index of the first maximum along ``axis``."""
    x = ins["X"][0]
    axis = int(attrs.get("axis", -1))
    out = x.argmax(axis=axis)
    if attrs.get("keepdims"):
        out = array_module(x).expand_dims(out, axis)
    return {"Out": [out.astype(_arg_index_dtype(attrs.get("dtype", "int64")))]}


# -- flatten2, shape ------------------------------------------------------------------------------

def _flatten_out(x: Any, attrs: dict, op: str) -> Any:
    axis = int(attrs.get("axis", 1))
    if not 0 <= axis <= x.ndim:
        raise ValueError(f"{op}: axis must be in [0, {x.ndim}], got {axis}")
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(rows, -1 if rows else int(np.prod(x.shape[axis:])))


@register("flatten2", ("X",), ("Out", "XShape"), {"axis": 1}, grad=grad_maker(("XShape",)))
def flatten2(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X as a matrix: the dims before ``axis`` make the rows, the rest the columns."""
    x = ins["X"][0]
    res = {"Out": [_flatten_out(x, attrs, "flatten2")]}
    if "XShape" in outs:
        res["XShape"] = [array_module(x).empty((0,) + tuple(x.shape), dtype=x.dtype)]
    return res


register("flatten2_grad", *grad_slots(("XShape",)), {"axis": 1})(_reshape_back)


@register("flatten", ("X",), ("Out",), {"axis": 1}, grad=grad_maker(("X",)))
def flatten(ins: dict, attrs: dict, outs: tuple) -> dict:
    """flatten2 without XShape: the v1 op that Fluid 1.8 still registers (old saved models
    hold it); its grad reads X for its shape (FlattenGradOpMaker)."""
    return {"Out": [_flatten_out(ins["X"][0], attrs, "flatten")]}


register("flatten_grad", *grad_slots(("X",)), {"axis": 1})(_reshape_to_x)


@register("shape", ("Input",), ("Out",))
def shape(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the shape of Input (int32)."""
    x = ins["Input"][0]
    return {"Out": [array_module(x).asarray(np.array(x.shape, dtype=np.int32))]}


# -- unstack, expand_as, where_index, scatter --------------------------------------------------

@register("unstack", ("X",), ("Y",), {"axis": 0, "num": 0},
          grad=grad_maker(("X",), ("Y",), ("X",)))
def unstack(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y_i = X taken at index i of ``axis``."""
    x = ins["X"][0]
    xp = array_module(x)
    axis = int(attrs.get("axis", 0)) % x.ndim
    return {"Y": [xp.ascontiguousarray(xp.take(x, i, axis=axis)) for i in range(x.shape[axis])]}


@register("unstack_grad", *grad_slots(("X",), ("Y",), ("X",)), {"axis": 0, "num": 0})
def unstack_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = the dY_i stacked back along ``axis`` (zeros for one never produced)."""
    x = ins["X"][0]
    xp = array_module(x)
    axis = int(attrs.get("axis", 0)) % x.ndim
    part = tuple(s for i, s in enumerate(x.shape) if i != axis)
    ds = [xp.zeros(part, x.dtype) if d is None else d for d in ins["Y" + GRAD]]
    return {"X" + GRAD: [xp.stack(ds, axis=axis)]}


def _expand_as_times(x: Any, target: Any) -> list[int]:
    if x.ndim != target.ndim or any(t % s for s, t in zip(x.shape, target.shape, strict=True)):
        raise ValueError(f"expand_as: every dim of target_tensor (shape {list(target.shape)}) "
                         f"must be a multiple of X's (shape {list(x.shape)})")
    return [t // s for s, t in zip(x.shape, target.shape, strict=True)]


@register("expand_as", ("X", "target_tensor"), ("Out",),
          grad=grad_maker(("X", "target_tensor"), in_grads=("X",)))
def expand_as(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X tiled to target_tensor's shape."""
    x = ins["X"][0]
    return {"Out": [array_module(x).tile(x, _expand_as_times(x, ins["target_tensor"][0]))]}


@register("expand_as_grad", *grad_slots(("X", "target_tensor"), ("Out",), ("X",)))
def expand_as_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = the sum of dOut over the tiles."""
    x = ins["X"][0]
    times = _expand_as_times(x, ins["target_tensor"][0])
    return expand_grad({"X": [x], "Out" + GRAD: ins["Out" + GRAD]},
                       {"expand_times": times}, outs)


@register("where_index", ("Condition",), ("Out",))
def where_index(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the coordinates of the true elements of Condition (int64 ``[N, rank]``)."""
    c = ins["Condition"][0]
    xp = array_module(c)
    return {"Out": [xp.argwhere(c.astype(bool)).astype(np.int64)]}


@register("scatter", ("X", "Ids", "Updates"), ("Out",), {"overwrite": True},
          grad=grad_maker(("Ids",), ("Out",), ("X", "Updates")))
def scatter(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X with rows Ids replaced by Updates (``overwrite``: the last of repeated ids
    wins) or, not overwriting, zeroed and then accumulated, as Fluid 1.8's."""
    x, ids, updates = ins["X"][0], ins["Ids"][0], ins["Updates"][0]
    xp = array_module(x)
    idx = ids.reshape(-1).astype(np.int64)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= x.shape[0]):
        raise ValueError(f"scatter: Ids must be in [0, {x.shape[0]}), got "
                         f"[{int(idx.min())}, {int(idx.max())}]")
    if updates.shape[0] != idx.size or tuple(updates.shape[1:]) != tuple(x.shape[1:]):
        raise ValueError(f"scatter: Updates must be [{idx.size}, {list(x.shape[1:])}...], "
                         f"got {list(updates.shape)}")
    out = x.copy()
    if attrs.get("overwrite", True):
        out[idx] = updates  # numpy assigns repeated ids in order: the last one wins
    else:
        out[idx] = 0
        scatter_add(xp, out, idx, updates)
    return {"Out": [out]}


@register("scatter_grad", *grad_slots(("Ids",), ("Out",), ("X", "Updates")), {"overwrite": True})
def scatter_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut with the scattered rows zeroed; dUpdates = dOut at Ids."""
    ids, d = ins["Ids"][0], ins["Out" + GRAD][0]
    if d is None:  # (the backward pass only runs it with an incoming gradient)
        return {}
    idx = ids.reshape(-1).astype(np.int64)
    res = {}
    if "X" + GRAD in outs:
        dx = d.copy()
        dx[idx] = 0
        res["X" + GRAD] = [dx]
    if "Updates" + GRAD in outs:
        res["Updates" + GRAD] = [d[idx]]
    return res


# -- pad, pad2d --------------------------------------------------------------------------------

def _pairs(paddings: list, rank: int, op: str) -> list[tuple[int, int]]:
    p = [int(v) for v in paddings]
    if len(p) != 2 * rank or min(p, default=0) < 0:
        raise ValueError(f"{op}: paddings needs 2 non-negative ints per dim of X ({rank} dims), "
                         f"got {p}")
    return [(p[2 * i], p[2 * i + 1]) for i in range(rank)]


@register("pad", ("X",), ("Out",), {"paddings": [], "pad_value": 0.0},
          grad=grad_maker(("X",), in_grads=("X",)))
def pad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X with ``paddings`` (before, after per dim) of ``pad_value`` around it."""
    x = ins["X"][0]
    pairs = _pairs(attrs.get("paddings", []), x.ndim, "pad")
    return {"Out": [array_module(x).pad(x, pairs, mode="constant",
                                        constant_values=x.dtype.type(attrs.get("pad_value", 0)))]}


@register("pad_grad", *grad_slots(("X",), ("Out",), ("X",)), {"paddings": [], "pad_value": 0.0})
def pad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut without the padding."""
    x = ins["X"][0]
    pairs = _pairs(attrs.get("paddings", []), x.ndim, "pad_grad")
    d = _d(ins, tuple(s + a + b for s, (a, b) in zip(x.shape, pairs, strict=True)),
           array_module(x), x.dtype)
    return {"X" + GRAD: [d[tuple(slice(a, a + s) for s, (a, _) in
                                 zip(x.shape, pairs, strict=True))].copy()]}


# pad_grad is linear in dOut: its grad pads DDX (pad_op.cc: PadOpDoubleGradMaker, a pad op);
# with zeros, whatever the forward pad_value: a constant border has no gradient
set_grad("pad_grad", linear_grad_maker("pad", attrs={"pad_value": 0.0}))


_PAD2D = {"paddings": [0, 0, 0, 0], "mode": "constant", "pad_value": 0.0,
          "data_format": "NCHW"}


def _pad2d_sources(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """For each padded position along one dim, the input index it copies (-1: the value)."""
    if mode == "constant":
        return np.pad(np.arange(size), (before, after), mode="constant", constant_values=-1)
    if mode == "reflect" and (before >= size or after >= size):
        raise ValueError(f"pad2d: reflect padding must be smaller than the dim ({size}), got "
                         f"{before} and {after}")
    if mode not in ("reflect", "edge"):
        raise ValueError(f"pad2d: mode must be 'constant', 'reflect' or 'edge', got {mode!r}")
    return np.pad(np.arange(size), (before, after), mode=mode)


def _pad2d_axes(x: Any, attrs: dict) -> tuple[int, int]:
    fmt = attrs.get("data_format", "NCHW")
    if fmt not in ("NCHW", "NHWC") or x.ndim != 4:
        raise ValueError(f"pad2d: a 4-D input in NCHW or NHWC, got shape {list(x.shape)} and "
                         f"{fmt!r}")
    return (2, 3) if fmt == "NCHW" else (1, 2)


def _pad2d_plan(x: Any, attrs: dict, ins: dict) -> tuple[int, int, np.ndarray, np.ndarray, str]:
    """(height axis, width axis, source row of each padded row, source column of each padded
    column, mode); the paddings from the ``Paddings`` tensor when the op has one (Fluid 1.8's
    ``pad2d(paddings=Variable)``), else from the attr."""
    h_axis, w_axis = _pad2d_axes(x, attrs)
    given = (ins.get("Paddings") or [None])[0]
    if given is not None:
        values = to_host(given).reshape(-1)
        if values.size != 4 or (values < 0).any():
            raise ValueError(f"pad2d: the Paddings tensor must hold 4 values >= 0 (top, bottom, "
                             f"left, right), got {values.tolist()}")
    else:
        values = attrs.get("paddings", [0, 0, 0, 0])
    top, bottom, left, right = (int(v) for v in values)
    mode = attrs.get("mode", "constant")
    return (h_axis, w_axis, _pad2d_sources(x.shape[h_axis], top, bottom, mode),
            _pad2d_sources(x.shape[w_axis], left, right, mode), mode)


@register("pad2d", ("X", "Paddings"), ("Out",), _PAD2D, optional=("Paddings",),
          grad=grad_maker(("X", "Paddings"), in_grads=("X",)))
def pad2d(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X padded in height and width (``paddings`` = top, bottom, left, right) with
    ``pad_value`` (constant) or by reflecting or repeating the edges."""
    x = ins["X"][0]
    xp = array_module(x)
    h_axis, w_axis, rows, cols, mode = _pad2d_plan(x, attrs, ins)
    out = xp.take(xp.take(x, xp.asarray(np.maximum(rows, 0)), axis=h_axis),
                  xp.asarray(np.maximum(cols, 0)), axis=w_axis)
    if mode == "constant":
        shape = [1] * 4
        shape[h_axis], shape[w_axis] = len(rows), len(cols)
        inside = xp.asarray(((rows >= 0)[:, None] & (cols >= 0)[None, :]).reshape(shape))
        out = xp.where(inside, out, x.dtype.type(attrs.get("pad_value", 0.0)))
    return {"Out": [out]}


@register("pad2d_grad", *grad_slots(("X", "Paddings"), ("Out",), ("X",)), _PAD2D,
          optional=("Paddings",))
def pad2d_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: every padded position's gradient added to the input position it copied."""
    x = ins["X"][0]
    xp = array_module(x)
    h_axis, w_axis, rows, cols, _ = _pad2d_plan(x, attrs, ins)
    out_shape = list(x.shape)
    out_shape[h_axis], out_shape[w_axis] = len(rows), len(cols)
    d = _d(ins, tuple(out_shape), xp, x.dtype)
    # one-hot maps: dX = R^T dOut C over (height, width), the copies summed
    r = np.zeros((len(rows), x.shape[h_axis]), x.dtype)
    r[np.flatnonzero(rows >= 0), rows[rows >= 0]] = 1
    c = np.zeros((len(cols), x.shape[w_axis]), x.dtype)
    c[np.flatnonzero(cols >= 0), cols[cols >= 0]] = 1
    dm = xp.moveaxis(d, (h_axis, w_axis), (2, 3))
    dx = xp.asarray(r.T) @ dm @ xp.asarray(c)
    return {"X" + GRAD: [xp.ascontiguousarray(xp.moveaxis(dx, (2, 3), (h_axis, w_axis)))]}


# -- pixel_shuffle, maxout ----------------------------------------------------------------------

@register("pixel_shuffle", ("X",), ("Out",), {"upscale_factor": 1},
          grad=grad_maker(("X",), in_grads=("X",)))
def pixel_shuffle(ins: dict, attrs: dict, outs: tuple) -> dict:
    """``[N, C r², H, W]`` → ``[N, C, H r, W r]``: Out[n, c, h r + i, w r + j] =
    X[n, c r² + i r + j, h, w]."""
    x = ins["X"][0]
    r = int(attrs.get("upscale_factor", 1))
    n, cr2, h, w = x.shape
    if r < 1 or cr2 % (r * r):
        raise ValueError(f"pixel_shuffle: the {cr2} channels must be a multiple of "
                         f"upscale_factor² ({r * r})")
    c = cr2 // (r * r)
    return {"Out": [x.reshape(n, c, r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
                    .reshape(n, c, h * r, w * r)]}


@register("pixel_shuffle_grad", *grad_slots(("X",), ("Out",), ("X",)), {"upscale_factor": 1})
def pixel_shuffle_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: dOut shuffled back."""
    x = ins["X"][0]
    r = int(attrs.get("upscale_factor", 1))
    n, cr2, h, w = x.shape
    c = cr2 // (r * r)
    d = _d(ins, (n, c, h * r, w * r), array_module(x), x.dtype)
    return {"X" + GRAD: [d.reshape(n, c, h, r, w, r).transpose(0, 1, 3, 5, 2, 4)
                         .reshape(x.shape)]}


def _maxout_view(x: Any, attrs: dict) -> tuple[Any, int]:
    groups = int(attrs.get("groups", 1))
    # Fluid 1.8's MaxOutOp::InferShape: a 4-D X (NCHW or NHWC) and groups > 1
    if x.ndim != 4:
        raise ValueError(f"maxout: X must be 4-D (NCHW or NHWC), got shape {list(x.shape)}")
    axis = int(attrs.get("axis", 1)) % x.ndim
    if groups <= 1 or x.shape[axis] % groups:
        raise ValueError(f"maxout: groups ({groups}) must be larger than 1 and divide dim "
                         f"{axis} of X ({x.shape[axis]})")
    shape = x.shape[:axis] + (x.shape[axis] // groups, groups) + x.shape[axis + 1:]
    return x.reshape(shape), axis + 1


@register("maxout", ("X",), ("Out",), {"groups": 1, "axis": 1},
          grad=grad_maker(("X", "Out"), in_grads=("X",)))
def maxout(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the maximum of each run of ``groups`` channels along ``axis``."""
    view, axis = _maxout_view(ins["X"][0], attrs)
    return {"Out": [view.max(axis=axis)]}


@register("maxout_grad", *grad_slots(("X", "Out"), ("Out",), ("X",)), {"groups": 1, "axis": 1})
def maxout_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut at the first maximum of each group (Fluid's rule), 0 elsewhere."""
    x = ins["X"][0]
    xp = array_module(x)
    view, axis = _maxout_view(x, attrs)
    first = xp.argmax(view, axis=axis)
    hit = xp.expand_dims(first, axis) == xp.arange(view.shape[axis]).reshape(
        (1,) * axis + (-1,) + (1,) * (view.ndim - axis - 1))
    d = _d(ins, ins["Out"][0].shape, xp, x.dtype)
    return {"X" + GRAD: [(hit * xp.expand_dims(d, axis)).reshape(x.shape)]}


# -- transpose (Fluid's first version, without XShape), size ------------------------------------

@register("transpose", ("X",), ("Out",), {"axis": []}, grad=grad_maker(("X",)))
def transpose(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X with its dims permuted by ``axis``: Fluid 1.8's ``transpose`` op, which
    ``WeightNormParamAttr`` still appends (``layers.transpose`` appends ``transpose2``)."""
    x = ins["X"][0]
    perm = [int(p) for p in attrs.get("axis", [])]
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"transpose: axis {perm} is not a permutation of the {x.ndim} dims "
                         f"of X (shape {list(x.shape)})")
    return {"Out": [array_module(x).ascontiguousarray(x.transpose(perm))]}


@register("transpose_grad", *grad_slots(("X",)), {"axis": []})
def transpose_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut with the inverse permutation."""
    x = ins["X"][0]
    xp = array_module(x)
    d = _d(ins, tuple(x.shape[p] for p in attrs.get("axis", [])), xp, x.dtype)
    inverse = np.argsort([int(p) for p in attrs.get("axis", [])]).tolist()
    return {"X" + GRAD: [xp.ascontiguousarray(d.transpose(inverse))]}


@register("size", ("Input",), ("Out",), {}, lod="none")
def size(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the number of elements of Input, int64 of shape [1] (Fluid 1.8's ``size`` op;
    no gradient). Only the shape of Input is read; Out is made where Input lives."""
    x = ins["Input"][0]
    return {"Out": [array_module(x).asarray([int(np.prod(x.shape))], dtype=np.int64)]}
