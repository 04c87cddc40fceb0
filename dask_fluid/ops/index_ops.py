"""Indexing kernels of Fluid 1.8: n-d gather and scatter, unique, strided slices, crops and
multiplex (and their gradients).

Semantics follow Paddle 1.8's operators of those names:

- ``gather_nd``: Out[i...] = X[Index[i..., :]]; dX = dOut added back (repeats summed).
- ``scatter_nd_add``: Out = X with each slice ``Updates[i...]`` added at ``X[Index[i..., :]]``
  (repeats accumulate); dX = dOut, dUpdates = dOut gathered back (``gather_nd``).
- ``strided_slice``: 1.8's clamping rules (``StridedSliceOutDims`` and ``StridedSliceFunctor``
  of ``strided_slice_op.h``). A negative stride slices ``[end + 1, start + 1)`` forwards with
  step ``|stride|`` and then reverses it: the grid is aligned on the end, not on the start, so
  when ``|stride| > 1`` does not divide the range the elements differ from numpy's
  ``x[start:end:stride]`` (Paddle 2.x later realigned it on the start). A slice that selects
  nothing is an error, as in 1.8.
- ``crop`` and ``crop_tensor``: Out = the block of X at ``offsets`` of the given shape; their
  gradient pads dOut back with zeros.
- ``multiplex``: row i of Out is row i of ``X[Ids[i]]``; the gradient goes to those rows.
- ``unique`` and ``unique_with_counts``: the distinct values of a 1-D X in the order of their
  first occurrence (Paddle's hash-map kernel, not sorted), Index maps every element of X to
  its value in Out, Count counts them. They have no gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots, scatter_add, to_dtype

__all__ = ["int_tensor_list_values", "int_tensor_values", "scatter_nd_updates_shape",
           "strided_slice_shape"]


# -- int tensors that stand for int attributes ---------------------------------------------------

#: what Fluid 1.8's ``GetDataFromTensor`` reads; an op that reads ``data<int>`` takes int32 only
INT_DTYPES = ("int32", "int64")


def int_tensor_values(t: Any, slot: str, op: str,
                      dtypes: tuple[str, ...] = INT_DTYPES) -> list[int]:
    """The values of a tensor that replaces an int-list attribute (Fluid 1.8's
    ``GetDataFromTensor`` of ``operators/utils.h``: of ``dtypes``, any other refused).

    Raises
    ------
    TypeError
        ``t`` is not of ``dtypes``.
    """
    v = to_host(t)
    if v.dtype.name not in dtypes:
        raise TypeError(f"{op}: {slot} must be an {' or '.join(dtypes)} tensor, got {v.dtype}")
    return [int(i) for i in v.reshape(-1)]


def int_tensor_list_values(items: list, slot: str, op: str,
                           dtypes: tuple[str, ...] = INT_DTYPES) -> list[int]:
    """One value from each ``[1]`` tensor of a list that replaces an int-list attribute
    (Fluid 1.8's ``GetDataFromTensorList``: each of shape [1], of ``dtypes``).

    Raises
    ------
    TypeError
        A tensor that is not of ``dtypes``.
    ValueError
        A tensor whose shape is not [1].
    """
    values = []
    for i, t in enumerate(items):
        v = to_host(t)
        if tuple(v.shape) != (1,):
            raise ValueError(f"{op}: each tensor of {slot} must have shape [1], got "
                             f"{list(v.shape)} at {i}")
        values += int_tensor_values(v, f"{slot}[{i}]", op, dtypes)
    return values


# -- scatter_nd_add ------------------------------------------------------------------------------

def scatter_nd_updates_shape(x_shape: tuple, index_shape: tuple) -> tuple:
    """The shape Updates must have: ``index.shape[:-1] + x.shape[index.shape[-1]:]``, after
    Fluid's InferShape checks (Index of rank >= 2, its last dim at most the rank of X)."""
    if len(index_shape) < 2:
        raise ValueError(f"scatter_nd_add: the rank of Index must be at least 2, got shape "
                         f"{list(index_shape)}")
    k = index_shape[-1]
    if k > len(x_shape):
        raise ValueError(f"scatter_nd_add: Index.shape[-1] ({k}) must be no greater than the "
                         f"rank of X ({len(x_shape)})")
    return tuple(index_shape[:-1]) + tuple(x_shape[k:])


def _nd_rows(x: Any, index: Any, op: str) -> tuple[np.ndarray, int, int]:
    """For X viewed as ``[head, tail]`` (head = the dims Index's last dim addresses): the row
    of X each index addresses, and (head, tail). Indices are checked against X's dims."""
    idx = to_host(index)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{op}: Index must be int32 or int64, got {idx.dtype}")
    k = idx.shape[-1] if idx.ndim else 0
    if k > x.ndim:
        raise ValueError(f"{op}: Index.shape[-1] ({k}) must be no greater than the rank of X "
                         f"({x.ndim})")
    flat = idx.reshape(int(np.prod(idx.shape[:-1], dtype=np.int64)), k).astype(np.int64)
    for d in range(k):
        if flat.size and (int(flat[:, d].min()) < 0 or int(flat[:, d].max()) >= x.shape[d]):
            raise ValueError(f"{op}: Index[..., {d}] must be in [0, {x.shape[d]}), got "
                             f"[{int(flat[:, d].min())}, {int(flat[:, d].max())}]")
    head = int(np.prod(x.shape[:k], dtype=np.int64))
    tail = int(np.prod(x.shape[k:], dtype=np.int64))
    if k == 0:  # an empty index addresses the whole of X
        return np.zeros(flat.shape[0], np.int64), head, tail
    return np.ravel_multi_index(tuple(flat.T), x.shape[:k]).astype(np.int64), head, tail


def _scatter_nd_rows(x: Any, index: Any, updates: Any) -> tuple[np.ndarray, int, int]:
    """:func:`_nd_rows` of scatter_nd_add, whose Updates must fit Index and X."""
    want = scatter_nd_updates_shape(tuple(x.shape), tuple(to_host(index).shape))
    if tuple(updates.shape) != want:
        raise ValueError(f"scatter_nd_add: Updates must have shape index.shape[:-1] + "
                         f"x.shape[index.shape[-1]:] = {list(want)}, got {list(updates.shape)}")
    return _nd_rows(x, index, "scatter_nd_add")


# -- gather_nd -----------------------------------------------------------------------------------

@register("gather_nd", ("X", "Index"), ("Out",),
          grad=grad_maker(("X", "Index"), in_grads=("X",)))
def gather_nd(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[i...] = X[Index[i..., 0], Index[i..., 1], ...] (the trailing dims of X kept)."""
    x, index = ins["X"][0], ins["Index"][0]
    rows, head, tail = _nd_rows(x, index, "gather_nd")
    k = index.shape[-1] if index.ndim else 0
    shape = tuple(index.shape[:-1]) + tuple(x.shape[k:])
    return {"Out": [x.reshape(head, tail)[array_module(x).asarray(rows)].reshape(shape)]}


@register("gather_nd_grad", *grad_slots(("X", "Index"), ("Out",), ("X",)))
def gather_nd_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: dOut added back at the gathered positions (repeats summed)."""
    x = ins["X"][0]
    xp = array_module(x)
    dx = xp.zeros_like(x)
    d = ins["Out" + GRAD][0]
    if d is not None:
        rows, head, tail = _nd_rows(x, ins["Index"][0], "gather_nd")
        scatter_add(xp, dx.reshape(head, tail), xp.asarray(rows), d.reshape(rows.size, tail))
    return {"X" + GRAD: [dx]}


@register("scatter_nd_add", ("X", "Index", "Updates"), ("Out",),
          grad=grad_maker(("Index", "Updates"), ("Out",), ("X", "Updates")))
def scatter_nd_add(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X with Updates[i...] added at X[Index[i..., 0], Index[i..., 1], ...]."""
    x, index, updates = ins["X"][0], ins["Index"][0], ins["Updates"][0]
    if updates.dtype != x.dtype:
        raise TypeError(f"scatter_nd_add: X and Updates must have the same dtype, got "
                        f"{x.dtype} and {updates.dtype}")
    xp = array_module(x)
    rows, head, tail = _scatter_nd_rows(x, index, updates)
    out = xp.array(x, copy=True, order="C")
    scatter_add(xp, out.reshape(head, tail), xp.asarray(rows), updates.reshape(rows.size, tail))
    return {"Out": [out]}


@register("scatter_nd_add_grad", *grad_slots(("Index", "Updates"), ("Out",), ("X", "Updates")))
def scatter_nd_add_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut; dUpdates = dOut at the positions Index addresses (``gather_nd``)."""
    index, updates, d = ins["Index"][0], ins["Updates"][0], ins["Out" + GRAD][0]
    if d is None:  # (the backward pass only runs it with an incoming gradient)
        return {}
    xp = array_module(d)
    res = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [d.copy()]
    if "Updates" + GRAD in outs:
        rows, head, tail = _scatter_nd_rows(d, index, updates)
        res["Updates" + GRAD] = [d.reshape(head, tail)[xp.asarray(rows)].reshape(updates.shape)]
    return res


# -- strided_slice -------------------------------------------------------------------------------

_SS_TENSORS = ("StartsTensor", "EndsTensor", "StridesTensor", "StartsTensorList",
               "EndsTensorList", "StridesTensorList")
_SS_ATTRS = {"axes": [], "starts": [], "ends": [], "strides": [], "infer_flags": [],
             "decrease_axis": []}


def _ss_affect(start: int, end: int, flag: int, decreased: bool) -> bool:
    """1.8's ``decrease_axis_affect``: start -1, end 0 and infer flag -1 on a decreased axis
    (how Fluid writes ``x[-1]``) take the one element at start."""
    return start == -1 and end == 0 and flag == -1 and decreased


def _ss_out_dim(size: int, start: int, end: int, stride: int, flag: int, affect: bool,
                infer: bool) -> int:
    """One dim of the output, as 1.8's ``StridedSliceOutDims`` (-1: unknown)."""
    if affect:
        return 1
    if infer and flag == -1:
        return -1
    if stride == 0:
        raise ValueError("strided_slice: a stride must not be 0")
    if size < 0:
        return -1
    if start < 0:
        start += size
    if end < 0 and not (end == -1 and stride < 0):  # -1 with a negative stride: to the front
        end += size
    if stride < 0:
        start, end = start + 1, end + 1
    if (stride < 0 and start <= end) or (stride > 0 and start >= end):
        raise ValueError(f"strided_slice: the slice selects nothing (start and end must meet "
                         f"the requirement of the stride's sign), got start {start}, end "
                         f"{end} and stride {stride} on a dim of size {size}")
    left, right = max(0, min(start, end)), min(size, max(start, end))
    return (abs(right - left) + abs(stride) - 1) // abs(stride)


def _ss_range(size: int, start: int, end: int, stride: int, affect: bool
              ) -> tuple[int, int, int, bool]:
    """(first index, step, count, reversed) of 1.8's ``StridedSliceFunctor`` followed by
    Eigen's ``stridedSlice`` (which clamps to the dim)."""
    if start < 0:
        start += size
    if end < 0 and not (end == -1 and stride < 0):
        end += size
    if affect:
        end = start - 1 if stride < 0 else start + 1
    reverse = stride < 0
    step = abs(stride)
    if reverse:
        if start > end:
            start, end = start + 1, end + 1
        start, end = end, start
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    count = (end - start + step - 1) // step if end > start else 0
    return start, step, count, reverse


def slice_params(ins: dict, attrs: dict, name: str, op: str) -> list[int]:
    """starts, ends or strides of a slice op, from an int tensor input when one is bound,
    else the attribute. Fluid 1.8's kernels differ in which tensor comes first: ``slice``
    reads the whole ``StartsTensor`` before the ``StartsTensorList`` (one ``[1]`` tensor per
    axis), ``strided_slice`` the list first. (Fluid reads them as ``data<int>``, int32 only;
    int64 is taken here too, as the other ops' ``GetDataFromTensor`` does.)

    Raises
    ------
    TypeError
        A tensor that is not int32 or int64.
    ValueError
        A tensor of the list whose shape is not [1].
    """
    cap = name.capitalize()
    items = [t for t in ins.get(cap + "TensorList") or [] if t is not None]
    whole = [t for t in ins.get(cap + "Tensor") or [] if t is not None]
    if items and not (whole and op == "slice"):
        values = []
        for i, t in enumerate(items):
            if tuple(to_host(t).shape) != (1,):
                raise ValueError(f"{op}: each tensor of {cap}TensorList must have shape [1], "
                                 f"got {list(to_host(t).shape)} at {i}")
            values += int_tensor_values(t, f"{cap}TensorList[{i}]", op)
        return values
    if whole:
        return int_tensor_values(whole[0], cap + "Tensor", op)
    return [int(v) for v in attrs.get(name, [])]


def _ss_check(rank: int, axes: list[int], lengths: dict[str, int]) -> None:
    if rank >= 7:
        raise ValueError(f"strided_slice: the input's rank must be less than 7, got {rank}")
    for name, n in lengths.items():
        if n != len(axes):
            raise ValueError(f"strided_slice: {name} has {n} values, axes has {len(axes)}; "
                             "they must be as many")
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        raise ValueError(f"strided_slice: axes {axes} must be distinct dims of the rank-{rank} "
                         "input")


def _decreased(shape: list[int], decrease_axis: list[int]) -> list[int]:
    out = [d for i, d in enumerate(shape) if i not in set(decrease_axis)]
    return out or [1]


def strided_slice_shape(in_shape: tuple, axes: list[int], starts: list[int] | None,
                        ends: list[int] | None, strides: list[int] | None,
                        infer_flags: list[int], decrease_axis: list[int]) -> list[int]:
    """The output shape Fluid 1.8's InferShape gives when the program is built (-1 unknown).

    ``starts``, ``ends`` or ``strides`` is None when a whole tensor gives it (input
    ``StartsTensor``...): every dim is then unknown, as in Fluid.
    """
    rank = len(in_shape)
    given = {"starts": starts, "ends": ends, "strides": strides}
    _ss_check(rank, axes, {k: len(v) for k, v in given.items() if v is not None})
    if any(v is None for v in given.values()):
        return _decreased([-1] * rank, decrease_axis)
    out = list(in_shape)
    flags = list(infer_flags) + [1] * (len(axes) - len(infer_flags))
    for i, a in enumerate(axes):
        out[a] = _ss_out_dim(in_shape[a], starts[i], ends[i], strides[i], flags[i],
                             _ss_affect(starts[i], ends[i], flags[i], a in decrease_axis),
                             infer=True)
    return _decreased(out, decrease_axis)


def _ss_plan(x: Any, ins: dict, attrs: dict) -> tuple[tuple, list[int], list[int]]:
    """(the basic-index tuple of the slice, its shape, the output shape after
    ``decrease_axis``)."""
    axes = [int(a) for a in attrs.get("axes", [])]
    starts, ends, strides = (slice_params(ins, attrs, n, "strided_slice")
                             for n in ("starts", "ends", "strides"))
    _ss_check(x.ndim, axes, {"starts": len(starts), "ends": len(ends), "strides": len(strides)})
    flags = [int(f) for f in attrs.get("infer_flags", [])]
    flags += [1] * (len(axes) - len(flags))
    decrease = [int(a) for a in attrs.get("decrease_axis", [])]
    index: list[Any] = [slice(None)] * x.ndim
    shape = list(x.shape)
    for i, a in enumerate(axes):
        dec = _ss_affect(starts[i], ends[i], flags[i], a in decrease)
        n = _ss_out_dim(x.shape[a], starts[i], ends[i], strides[i], flags[i], dec, infer=False)
        first, step, count, reverse = _ss_range(x.shape[a], starts[i], ends[i], strides[i], dec)
        if count != n:  # Fluid's output dim and Eigen's slice disagree: 1.8 is undefined here
            raise ValueError(f"strided_slice: start {starts[i]}, end {ends[i]} and stride "
                             f"{strides[i]} fall outside dim {a} (size {x.shape[a]}) of the "
                             "input")
        last = first + step * (n - 1)
        index[a] = (slice(last, first - 1 if first > 0 else None, -step) if reverse
                    else slice(first, last + 1, step))
        shape[a] = n
    for a in decrease:
        if not 0 <= a < x.ndim or shape[a] != 1:
            raise ValueError(f"strided_slice: decrease_axis {decrease} must name dims the slice "
                             f"leaves of size 1, got the slice shape {shape}")
    return tuple(index), shape, _decreased(shape, decrease)


@register("strided_slice", ("Input",) + _SS_TENSORS, ("Out",), _SS_ATTRS, optional=_SS_TENSORS,
          grad=grad_maker(("Input",) + _SS_TENSORS, ("Out",), ("Input",)))
def strided_slice(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = Input sliced ``starts:ends:strides`` along ``axes`` (Fluid 1.8's rules)."""
    x = ins["Input"][0]
    index, _, out_shape = _ss_plan(x, ins, attrs)
    return {"Out": [array_module(x).ascontiguousarray(x[index]).reshape(out_shape)]}


@register("strided_slice_grad", *grad_slots(("Input",) + _SS_TENSORS, ("Out",), ("Input",)),
          _SS_ATTRS, optional=_SS_TENSORS)
def strided_slice_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dInput = zeros with dOut written back where the slice read."""
    x = ins["Input"][0]
    xp = array_module(x)
    index, shape, _ = _ss_plan(x, ins, attrs)
    dx = xp.zeros_like(x)
    d = ins["Out" + GRAD][0]
    if d is not None:
        dx[index] = d.reshape(shape)
    return {"Input" + GRAD: [dx]}


# -- crop, crop_tensor ---------------------------------------------------------------------------

def _ints(a: Any) -> list[int]:
    return [int(v) for v in to_host(a).reshape(-1)]


def _one_each(items: list, slot: str, op: str) -> list[int]:
    values = []
    for i, t in enumerate(items):
        v = _ints(t)
        if len(v) != 1:
            raise ValueError(f"{op}: each tensor of {slot} must have shape [1], got "
                             f"{list(t.shape)} at {i}")
        values.append(v[0])
    return values


def _offsets(ins: dict, attrs: dict, rank: int, op: str) -> list[int]:
    """Offsets: OffsetsTensor (crop_tensor), else Offsets, else the attribute."""
    if ins.get("OffsetsTensor"):
        res = _one_each(ins["OffsetsTensor"], "OffsetsTensor", op)
    elif ins.get("Offsets"):
        # crop forbids the attribute beside the input; crop_tensor's layer sets it to -1s there
        if op == "crop" and attrs.get("offsets"):
            raise ValueError("crop: input Offsets and attribute offsets must not be used at the "
                             "same time")
        t = ins["Offsets"][0]
        if t.ndim != 1:
            raise ValueError(f"{op}: input Offsets must be 1-D, got shape {list(t.shape)}")
        res = _ints(t)
    else:
        res = [int(v) for v in attrs.get("offsets", [])]
    if len(res) != rank:
        raise ValueError(f"{op}: {len(res)} offsets for a rank-{rank} input; give one per dim")
    return res


def _crop_block(x: Any, offsets: list[int], shape: list[int], op: str) -> tuple:
    for i, (o, s, n) in enumerate(zip(offsets, shape, x.shape, strict=True)):
        if o < 0 or s < 0 or o + s > n:
            raise ValueError(f"{op}: offset {o} and size {s} of dim {i} must lie inside the "
                             f"input's {n} (input shape {list(x.shape)}, offsets {offsets}, "
                             f"shape {shape})")
    return tuple(slice(o, o + s) for o, s in zip(offsets, shape, strict=True))


def _check_rank(x: Any, op: str) -> None:
    if not 1 <= x.ndim <= 6:
        raise ValueError(f"{op}: the input must have 1 to 6 dims, got shape {list(x.shape)}")


@register("crop", ("X", "Y", "Offsets"), ("Out",), {"offsets": [], "shape": []},
          optional=("Y", "Offsets"), grad=grad_maker(("X", "Offsets"), ("Out",), ("X",)))
def crop(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the block of X at ``offsets`` with Y's shape or the ``shape`` attribute (a
    leading -1 takes X's first dim)."""
    x = ins["X"][0]
    _check_rank(x, "crop")
    if ins.get("Y"):
        y = ins["Y"][0]
        if y.ndim != x.ndim:
            raise ValueError(f"crop: Y must have the rank of X ({x.ndim}), got shape "
                             f"{list(y.shape)}")
        shape = list(y.shape)
    else:
        shape = [int(s) for s in attrs.get("shape", [])]
        if len(shape) != x.ndim:
            raise ValueError(f"crop: the shape attribute {shape} needs one value per dim of X "
                             f"(shape {list(x.shape)})")
        if shape[0] == -1:  # the batch dim, as the kernel does
            shape[0] = x.shape[0]
    block = _crop_block(x, _offsets(ins, attrs, x.ndim, "crop"), shape, "crop")
    return {"Out": [array_module(x).ascontiguousarray(x[block])]}


def _crop_grad(ins: dict, attrs: dict, op: str) -> dict:
    x = ins["X"][0]
    xp = array_module(x)
    dx = xp.zeros_like(x)
    d = ins["Out" + GRAD][0]
    if d is not None:
        dx[_crop_block(x, _offsets(ins, attrs, x.ndim, op), list(d.shape), op)] = d
    return {"X" + GRAD: [dx]}


@register("crop_grad", *grad_slots(("X", "Offsets"), ("Out",), ("X",)),
          {"offsets": [], "shape": []}, optional=("Offsets",))
def crop_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut padded back to X's shape with zeros."""
    return _crop_grad(ins, attrs, "crop")


_CT_SLOTS = ("Shape", "Offsets", "ShapeTensor", "OffsetsTensor")


@register("crop_tensor", ("X",) + _CT_SLOTS, ("Out",), {"offsets": [], "shape": []},
          optional=_CT_SLOTS,
          grad=grad_maker(("X", "Offsets", "OffsetsTensor"), ("Out",), ("X",)))
def crop_tensor(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the block of X at the offsets (OffsetsTensor, Offsets or ``offsets``) of the
    shape (ShapeTensor, Shape or ``shape``); a size -1 runs to the end of the dim."""
    x = ins["X"][0]
    _check_rank(x, "crop_tensor")
    offsets = _offsets(ins, attrs, x.ndim, "crop_tensor")
    if ins.get("ShapeTensor"):
        shape = _one_each(ins["ShapeTensor"], "ShapeTensor", "crop_tensor")
    elif ins.get("Shape"):
        shape = _ints(ins["Shape"][0])
    else:
        shape = [int(s) for s in attrs.get("shape", [])]
    if len(shape) != x.ndim:
        raise ValueError(f"crop_tensor: {len(shape)} sizes in the shape for a rank-{x.ndim} "
                         "input; give one per dim")
    for i, s in enumerate(shape):
        if s == 0 or s < -1:
            raise ValueError(f"crop_tensor: size {s} of dim {i} in the shape: a size is "
                             "positive, or -1 for the rest of the dim")
    shape = [n - o if s == -1 else s for s, o, n in zip(shape, offsets, x.shape, strict=True)]
    block = _crop_block(x, offsets, shape, "crop_tensor")
    return {"Out": [array_module(x).ascontiguousarray(x[block])]}


@register("crop_tensor_grad", *grad_slots(("X", "Offsets", "OffsetsTensor"), ("Out",), ("X",)),
          {"offsets": [], "shape": []}, optional=("Offsets", "OffsetsTensor"))
def crop_tensor_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut padded back to X's shape with zeros."""
    return _crop_grad(ins, attrs, "crop_tensor")


# -- multiplex -----------------------------------------------------------------------------------

def _multiplex_rows(ins: dict) -> list[np.ndarray]:
    """For each candidate k, the rows of Out that come from X[k] (Fluid's InferShape checks)."""
    xs, ids = ins["X"], ins["Ids"][0]
    if len(xs) < 2:
        raise ValueError(f"multiplex: needs at least 2 candidate tensors in X, got {len(xs)}")
    if xs[0].ndim < 2 or any(tuple(x.shape) != tuple(xs[0].shape) for x in xs):
        raise ValueError(f"multiplex: the candidates must all have one shape of rank >= 2, "
                         f"got {[list(x.shape) for x in xs]}")
    rows = xs[0].shape[0]
    if ids.ndim != 2 or ids.shape[1] != 1 or ids.shape[0] != rows:
        raise ValueError(f"multiplex: Ids must have shape [{rows}, 1] (one index per row of the "
                         f"candidates), got {list(ids.shape)}")
    k = to_host(ids).reshape(-1).astype(np.int64)
    if k.size and (int(k.min()) < 0 or int(k.max()) >= len(xs)):
        raise ValueError(f"multiplex: Ids must be in [0, {len(xs)}) (the number of candidates), "
                         f"got [{int(k.min())}, {int(k.max())}]")
    return [np.flatnonzero(k == j) for j in range(len(xs))]


@register("multiplex", ("Ids", "X"), ("Out",),
          grad=grad_maker(("Ids", "X"), ("Out",), ("X",)))
def multiplex(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[i] = X[Ids[i]][i]."""
    xs = ins["X"]
    xp = array_module(*xs)
    picks = _multiplex_rows(ins)
    out = xp.empty_like(xs[0])
    for x, rows in zip(xs, picks, strict=True):
        if rows.size:
            r = xp.asarray(rows)
            out[r] = x[r]
    return {"Out": [out]}


# Fluid's multiplex_grad reads only Ids and dOut; it reads X here too, for the number and shape
# of the gradients it writes
@register("multiplex_grad", *grad_slots(("Ids", "X"), ("Out",), ("X",)))
def multiplex_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX[k] = dOut in the rows Out took from X[k], zeros elsewhere."""
    xs = ins["X"]
    xp = array_module(*xs)
    dxs = [xp.zeros_like(x) for x in xs]
    d = ins["Out" + GRAD][0]
    if d is not None:
        for dx, rows in zip(dxs, _multiplex_rows(ins), strict=True):
            if rows.size:
                r = xp.asarray(rows)
                dx[r] = d[r]
    return {"X" + GRAD: dxs}


# -- unique, unique_with_counts ------------------------------------------------------------------

def _unique_first(x: Any, dtype: Any, op: str) -> tuple[Any, Any, Any]:
    """(distinct values in order of first occurrence, index into them of each element, count
    of each), computed on the host as Paddle's CPU kernel does."""
    index_dtype = to_dtype(dtype)
    if index_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"{op}: the index dtype must be int32 or int64, got {index_dtype}")
    xh = to_host(x)
    if xh.ndim != 1:
        raise ValueError(f"{op}: X must be 1-D, got shape {list(xh.shape)}")
    if xh.size == 0:
        empty = np.zeros(0, index_dtype)
        return xh.copy(), empty, empty
    # a hash map keyed on the values: NaNs are all distinct, 0.0 and -0.0 are one value
    kw = {"equal_nan": False} if xh.dtype.kind in "fc" else {}
    _, first, inverse, counts = np.unique(xh, return_index=True, return_inverse=True,
                                          return_counts=True, **kw)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return (xh[first[order]], rank[inverse.reshape(-1)].astype(index_dtype),
            counts[order].astype(index_dtype))


@register("unique", ("X",), ("Out", "Index"), {"dtype": "int32"}, lod="none")
def unique(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the distinct values of X in order of first occurrence; Index[i] = the position
    of X[i] in Out (dtype ``dtype``)."""
    x = ins["X"][0]
    xp = array_module(x)
    out, index, _ = _unique_first(x, attrs.get("dtype", "int32"), "unique")
    return {"Out": [xp.asarray(out)], "Index": [xp.asarray(index)]}


@register("unique_with_counts", ("X",), ("Out", "Index", "Count"), {"dtype": "int32"},
          lod="none")
def unique_with_counts(ins: dict, attrs: dict, outs: tuple) -> dict:
    """``unique`` and Count[j] = how many elements of X equal Out[j]."""
    x = ins["X"][0]
    xp = array_module(x)
    out, index, count = _unique_first(x, attrs.get("dtype", "int32"), "unique_with_counts")
    return {"Out": [xp.asarray(out)], "Index": [xp.asarray(index)],
            "Count": [xp.asarray(count)]}
