"""Tensor-building and shape kernels: fill_constant, fill_constant_batch_size_like,
fill_zeros_like, concat, split, reshape2, transpose2, one_hot and label_smooth."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .index_ops import int_tensor_list_values, int_tensor_values
from .math_ops import double_grad_maker, linear_grad_maker
from .registry import (
    GRAD,
    LOD_KEY,
    array_module,
    register,
    set_grad,
    to_host,
)
from .selected_rows import grad_maker, grad_slots, place_module, to_dtype


@register("fill_constant", ("ValueTensor", "ShapeTensor", "ShapeTensorList"), ("Out",),
          {"shape": [], "dtype": "float32", "value": 0.0, "str_value": "", "force_cpu": False},
          optional=("ValueTensor", "ShapeTensor", "ShapeTensorList"))
def fill_constant(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = a tensor of ``shape`` filled with ``value`` (on the op's place).

    As Fluid 1.8's ``FillConstantKernel``: the shape is ``ShapeTensor`` (int32 or int64) when
    given, else the ``[1]`` tensors of ``ShapeTensorList`` (one dim each), else attr
    ``shape``; the value is ``ValueTensor``'s one element when given, else ``str_value`` when
    not empty (the layer writes it so that an int64 or float64 value keeps its precision,
    which the float ``value`` attr would lose), else ``value``.

    ``force_cpu`` is Fluid's hint to keep a small control tensor (a step counter, a decay
    boundary) in host memory, Fluid copying it between places as the ops that read it need.
    Here a kernel reads all its inputs on one place, so the tensor is made where the executor
    runs: on a GPU executor a host tensor would meet device tensors in the next op.

    Raises
    ------
    ValueError
        A ``ShapeTensorList`` item not of shape [1], a ``ValueTensor`` of more than one
        element, or a negative dim.
    TypeError
        A shape tensor that is not int32 or int64.
    """
    dtype = to_dtype(attrs.get("dtype", "float32"))
    if ins.get("ShapeTensor") and ins["ShapeTensor"][0] is not None:
        shape = int_tensor_values(ins["ShapeTensor"][0], "ShapeTensor", "fill_constant")
    elif [t for t in ins.get("ShapeTensorList") or [] if t is not None]:
        shape = int_tensor_list_values(ins["ShapeTensorList"], "ShapeTensorList",
                                       "fill_constant")
    else:
        shape = [int(s) for s in attrs.get("shape", [])]
    str_value = attrs.get("str_value") or ""
    value: Any = attrs.get("value", 0.0)
    if str_value:
        # Fluid parses an int64 output's string as an integer (exact beyond 2**53), any
        # other as a double
        value = int(str_value) if dtype == np.int64 else float(str_value)
    if ins.get("ValueTensor") and ins["ValueTensor"][0] is not None:
        v = to_host(ins["ValueTensor"][0])
        if v.size != 1:
            raise ValueError(f"fill_constant: ValueTensor must hold 1 element, got {v.size}")
        value = v.reshape(-1)[0].item()
    if any(s < 0 for s in shape):
        raise ValueError(f"fill_constant: shape {shape} has a negative dim; the executor must "
                         f"resolve -1 dims before running the op")
    xp = place_module(attrs)
    return {"Out": [xp.full(shape, value, dtype=dtype)]}


_VALUE_ATTRS = {"fp32_values": "float32", "int32_values": "int32", "int64_values": "int64",
                "bool_values": "bool"}


@register("assign_value", (), ("Out",),
          {"shape": [], "dtype": "float32", "fp32_values": [], "int32_values": [],
           "int64_values": [], "bool_values": []})
def assign_value(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the constant the op carries (``NumpyArrayInitializer``, ``layers.assign`` of a
    numpy array): its values in the attr of its dtype, laid out in ``shape``."""
    dtype = to_dtype(attrs.get("dtype", "float32"))
    shape = [int(s) for s in attrs.get("shape", [])]
    slot = next((k for k, v in _VALUE_ATTRS.items() if np.dtype(v) == dtype), None)
    if slot is None:
        raise TypeError(f"assign_value: dtype {dtype} is not one of {list(_VALUE_ATTRS.values())}")
    values = np.asarray(attrs.get(slot, []), dtype=dtype)
    if values.size != int(np.prod(shape)):
        raise ValueError(f"assign_value: {values.size} values in {slot} for shape {shape}")
    xp = place_module(attrs)
    return {"Out": [xp.asarray(values.reshape(shape))]}


@register("rnn_memory_helper", ("X",), ("Out",), {"dtype": "float32"},
          grad=grad_maker(("X", "Out"), ("Out",), ("X",)))
def rnn_memory_helper(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X: the copy of a StaticRNN memory's new value that the recurrent op carries to
    the next step."""
    return {"Out": [ins["X"][0]]}


@register("rnn_memory_helper_grad", *grad_slots(("X", "Out"), ("Out",), ("X",)),
          {"dtype": "float32"}, optional=("Out", "Out" + GRAD))
def rnn_memory_helper_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    d = (ins.get("Out" + GRAD) or [None])[0]
    x = ins["X"][0]
    return {"X" + GRAD: [array_module(x).zeros_like(x) if d is None else d]}


@register("fill_zeros_like", ("X",), ("Out",))
def fill_zeros_like(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = zeros shaped like X."""
    x = ins["X"][0]
    return {"Out": [array_module(x).zeros_like(x)]}


# ---------------------------------------------------------------------------------------------
# concat / split


def _concat_grad_maker(op: Any) -> list[dict]:
    # Fluid's ConcatGradOpMaker: X, the AxisTensor when bound, and dOut
    return grad_maker(("X", "AxisTensor"))(op)


def tensor_axis(ins: dict, attrs: dict, rank: int, op: str) -> int:
    """The axis of Fluid 1.8's concat and split kernels: the ``AxisTensor`` input (int32 or
    int64, its first value; Fluid's ``GetDataFromTensor``) over the ``axis`` attr, a negative
    one counting from the end (``ComputeAxis``).

    Raises
    ------
    TypeError
        An AxisTensor of another dtype.
    ValueError
        An empty AxisTensor, or an axis outside ``[-rank, rank)``.
    """
    axis = int(attrs.get("axis", 0))
    tensor = (ins.get("AxisTensor") or [None])[0]
    if tensor is not None:
        values = int_tensor_values(tensor, "AxisTensor", op)
        if not values:
            raise ValueError(f"{op}: AxisTensor is empty; it must hold the axis (shape [1])")
        axis = values[0]
    if not -rank <= axis < rank:
        raise ValueError(f"{op}: axis {axis} is outside [{-rank}, {rank}) for rank-{rank} "
                         "inputs")
    return axis + rank if axis < 0 else axis


def _concat_shapes_check(xs: list, axis: int) -> None:
    """Fluid's ``ComputeAndCheckShape`` at run time: one rank, equal dims but on ``axis``."""
    first = tuple(xs[0].shape)
    for i, x in enumerate(xs[1:], 1):
        shape = tuple(x.shape)
        if len(shape) != len(first) or any(a != b for j, (a, b) in
                                           enumerate(zip(shape, first, strict=True))
                                           if j != axis):
            raise ValueError(f"concat: input {i} has shape {list(shape)}, input 0 "
                             f"{list(first)}; all dims but axis {axis} must match")


def concat_lod(lods: list, axis: int) -> Any:
    """Out's LoD as Fluid 1.8's ConcatKernel leaves it: X[0]'s (``ShareLoD``) and, joining
    along axis 0 inputs that all have LoDs, the other inputs' sequences appended after it
    (``AppendLoD`` of their length-based LoDs), so every sequence stays one.

    Raises
    ------
    ValueError
        Along axis 0, an input with a LoD of another number of levels than X[0]'s (before
        any input without one: Fluid stops looking there).
    """
    first = lods[0] if lods else None
    if axis != 0 or not first:
        return first
    out = [list(level) for level in first]
    for i, lod in enumerate(lods[1:], 1):
        if not lod:
            return first  # one input without LoD: Fluid keeps X[0]'s
        if len(lod) != len(first):
            raise ValueError(f"concat: input {i} has a LoD of {len(lod)} levels, input 0 of "
                             f"{len(first)}; inputs joined along axis 0 need as many levels")
    for lod in lods[1:]:
        for level, offsets in zip(out, lod, strict=True):
            for a, b in zip(offsets[:-1], offsets[1:], strict=True):
                level.append(level[-1] + (b - a))
    return tuple(tuple(level) for level in out)


@register("concat", ("X", "AxisTensor"), ("Out",), {"axis": 0}, optional=("AxisTensor",),
          grad=_concat_grad_maker, lod="kernel")
def concat(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X[0], X[1], ... joined along ``axis`` (the ``AxisTensor`` when bound, as in
    Fluid 1.8); Out's LoD as :func:`concat_lod` gives it."""
    xs = ins["X"]
    xp = array_module(*xs)
    axis = tensor_axis(ins, attrs, xs[0].ndim, "concat")
    _concat_shapes_check(xs, axis)
    lod = {"Out": [concat_lod(list((attrs.get("_lods") or {}).get("X") or []), axis)]}
    if len(xs) == 1:
        return {"Out": [xs[0].copy()], LOD_KEY: lod}
    return {"Out": [xp.concatenate(xs, axis=axis)], LOD_KEY: lod}


@register("concat_grad", *grad_slots(("X", "AxisTensor")), {"axis": 0},
          optional=("AxisTensor",), lod="kernel")
def concat_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """X@GRAD[i] = the slice of dOut that X[i] filled (views of dOut), with X[i]'s LoD
    (Fluid's ``ShareAllLoD``)."""
    xs = ins["X"]
    d = ins["Out" + GRAD][0]
    xp = array_module(*xs)
    lods = list((attrs.get("_lods") or {}).get("X") or [None] * len(xs))
    res: dict = {LOD_KEY: {"X" + GRAD: lods}}
    if d is None:
        res["X" + GRAD] = [xp.zeros_like(x) for x in xs]
        return res
    axis = tensor_axis(ins, attrs, d.ndim, "concat")
    bounds = np.cumsum([x.shape[axis] for x in xs])[:-1].tolist()
    res["X" + GRAD] = xp.split(d, bounds, axis=axis)
    return res


#: Fluid 1.8's split takes its axis and sections from these too (``layers.split`` with a
#: Variable ``dim``, or sections holding Variables); both are dispensable
_SPLIT_TENSORS = ("AxisTensor", "SectionsTensorList")


def _split_sections(x: Any, ins: dict, attrs: dict, axis: int, nout: int | None) -> list[int]:
    """The sizes of the parts (Fluid 1.8's ``UpdateOutsDims``): ``num`` equal parts when
    ``num`` > 0, else the ``SectionsTensorList`` values over the ``sections`` attr, one of
    which may be -1 (the rest of the dim)."""
    n = x.shape[axis]
    num = int(attrs.get("num", 0) or 0)
    items = [t for t in ins.get("SectionsTensorList") or [] if t is not None]
    if items:
        sections = int_tensor_list_values(items, "SectionsTensorList", "split")
        src = "SectionsTensorList"
    else:
        sections, src = [int(v) for v in attrs.get("sections", []) or []], "sections"
    if num <= 0 and not sections:
        num = nout or 0
    if num > 0:
        if n % num:
            raise ValueError(f"split: cannot split dim {axis} of size {n} into num={num} "
                             f"equal parts; give sections or a num that divides it")
        return [n // num] * num
    if nout is not None and len(sections) != nout:
        raise ValueError(f"split: {src} {sections} gives {len(sections)} parts, but the op "
                         f"has {nout} outputs")
    if sections.count(-1) > 1:
        raise ValueError(f"split: {src} {sections} may contain at most one -1")
    known = sum(v for v in sections if v != -1)
    if -1 in sections:
        if known >= n:
            raise ValueError(f"split: {src} {sections} other than the -1 sum to {known}; "
                             f"that must be less than dim {axis} of X ({n})")
        sections[sections.index(-1)] = n - known
    elif known != n:
        raise ValueError(f"split: {src} {sections} sum to {known}, but dim {axis} of X has "
                         f"size {n}")
    if min(sections) < 0:
        raise ValueError(f"split: {src} {sections} holds a negative size")
    return sections


def _split_grad_maker(op: Any) -> list[dict]:
    # Fluid's SplitGradMaker (a concat of the Out gradients) passes the AxisTensor on; the
    # sections are the Outs' own sizes, so the SectionsTensorList is not needed
    return grad_maker(("X", "Out", "AxisTensor"))(op)


@register("split", ("X",) + _SPLIT_TENSORS, ("Out",), {"sections": [], "num": 0, "axis": 0},
          optional=_SPLIT_TENSORS, grad=_split_grad_maker)
def split(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X cut along ``axis`` into ``sections`` sizes or ``num`` equal parts (views); the
    axis and sections from the ``AxisTensor`` and ``SectionsTensorList`` when bound.

    The number of outputs comes from the attrs, or from ``attrs["_out_counts"]["Out"]`` when
    the executor provides it.
    """
    x = ins["X"][0]
    nout = attrs.get("_out_counts", {}).get("Out")
    axis = tensor_axis(ins, attrs, x.ndim, "split")
    sections = _split_sections(x, ins, attrs, axis, nout)
    bounds = np.cumsum(sections)[:-1].tolist()
    return {"Out": array_module(x).split(x, bounds, axis=axis)}


@register("split_grad", ("X", "Out", "AxisTensor", "Out" + GRAD), ("X" + GRAD,),
          {"sections": [], "num": 0, "axis": 0}, optional=("AxisTensor",))
def split_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = the Out gradients joined back along the split's axis (missing ones as zeros)."""
    x = ins["X"][0]
    xp = array_module(x)
    parts = [d if d is not None else xp.zeros_like(o)
             for o, d in zip(ins["Out"], ins["Out" + GRAD], strict=True)]
    return {"X" + GRAD: [xp.concatenate(parts, axis=tensor_axis(ins, attrs, x.ndim, "split"))]}


# ---------------------------------------------------------------------------------------------
# reshape2 / transpose2 (XShape records the input shape as a zero-size [0, *shape] array)


def _xshape(x: Any) -> Any:
    return array_module(x).empty((0,) + tuple(x.shape), dtype=x.dtype)


def infer_reshape(in_shape: tuple, shape: list[int], op: str = "reshape2") -> tuple:
    """Fluid's reshape rule: 0 copies the input dim at that index, one -1 is inferred."""
    out = [in_shape[i] if s == 0 else int(s) for i, s in enumerate(shape)]
    size = math.prod(in_shape)
    if out.count(-1) > 1:
        raise ValueError(f"{op}: shape {shape} may contain at most one -1")
    if -1 in out:
        known = math.prod(s for s in out if s != -1)
        if known == 0 or size % known:
            raise ValueError(f"{op}: cannot infer the -1 in shape {shape} for an input of "
                             f"shape {list(in_shape)}")
        out[out.index(-1)] = size // known
    if math.prod(out) != size:
        raise ValueError(f"{op}: cannot reshape an input of shape {list(in_shape)} "
                         f"({size} elements) to {shape} -> {out}")
    return tuple(out)


_reshape_grad_maker = grad_maker(("XShape",))


@register("reshape2", ("X", "Shape", "ShapeTensor"), ("Out", "XShape"), {"shape": []},
          optional=("Shape", "ShapeTensor"), grad=_reshape_grad_maker)
def reshape2(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X reshaped (a view); 0 copies a dim, -1 is inferred. The shape comes from
    ``ShapeTensor`` (one value per dim), else ``Shape``, else the ``shape`` attribute."""
    x = ins["X"][0]
    shape = list(attrs.get("shape", []))
    dims = [d for d in ins.get("ShapeTensor") or () if d is not None]
    if dims:
        shape = [_one_int(d, i) for i, d in enumerate(dims)]
    elif ins.get("Shape") and ins["Shape"][0] is not None:
        shape = [int(s) for s in to_host(ins["Shape"][0]).reshape(-1).tolist()]
    res = {"Out": [x.reshape(infer_reshape(tuple(x.shape), shape))]}
    if "XShape" in outs:
        res["XShape"] = [_xshape(x)]
    return res


def _one_int(d: Any, i: int) -> int:
    values = to_host(d).reshape(-1)
    if values.size != 1:
        raise ValueError(f"reshape2: ShapeTensor[{i}] must hold one value (a dim), got shape "
                         f"{list(d.shape)}")
    return int(values[0])


@register("reshape2_grad", *grad_slots(("XShape",)), {"shape": []})
def reshape2_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut reshaped back to the shape XShape recorded."""
    xshape = ins["XShape"][0]
    d = ins["Out" + GRAD][0]
    shape = tuple(xshape.shape[1:])
    if d is None:
        return {"X" + GRAD: [array_module(xshape).zeros(shape, xshape.dtype)]}
    return {"X" + GRAD: [d.reshape(shape)]}


# reshape2_grad is linear in dOut: its grad reshapes DDX to dOut's shape (reshape_op.cc:
# Reshape2DoubleGradMaker, reshape2_grad_grad)
set_grad("reshape2_grad", double_grad_maker("reshape2_grad_grad", {"DOut": "Out" + GRAD},
                                            {"DDX": "X" + GRAD}, {"DDOut": "Out" + GRAD}))


@register("reshape2_grad_grad", ("DOut", "DDX"), ("DDOut",), {"shape": []}, optional=("DDX",))
def reshape2_grad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """DDOut = DDX reshaped to dOut's shape."""
    dout, ddx = ins["DOut"][0], (ins.get("DDX") or [None])[0]
    if ddx is None:
        return {"DDOut": [array_module(dout).zeros(dout.shape, dout.dtype)]}
    return {"DDOut": [ddx.reshape(dout.shape)]}


@register("transpose2", ("X",), ("Out", "XShape"), {"axis": []},
          grad=grad_maker(("XShape",)))
def transpose2(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X with its dims permuted by ``axis`` (a copy, contiguous)."""
    x = ins["X"][0]
    perm = list(attrs.get("axis", []))
    if sorted(p % x.ndim for p in perm) != list(range(x.ndim)):
        raise ValueError(f"transpose2: axis {perm} is not a permutation of the {x.ndim} dims "
                         f"of X (shape {list(x.shape)})")
    xp = array_module(x)
    res = {"Out": [xp.ascontiguousarray(x.transpose(perm))]}
    if "XShape" in outs:
        res["XShape"] = [_xshape(x)]
    return res


@register("transpose2_grad", *grad_slots(("XShape",)), {"axis": []})
def transpose2_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut with the inverse permutation."""
    xshape = ins["XShape"][0]
    d = ins["Out" + GRAD][0]
    xp = array_module(xshape)
    if d is None:
        return {"X" + GRAD: [xp.zeros(xshape.shape[1:], xshape.dtype)]}
    perm = [p % d.ndim for p in attrs.get("axis", [])]
    inverse = np.argsort(perm).tolist()
    return {"X" + GRAD: [xp.ascontiguousarray(d.transpose(inverse))]}


# transpose2_grad is linear in dOut: its grad transposes DDX as the forward op did
# (transpose_op.cc: Transpose2DoubleGradMaker, a transpose2 op)
set_grad("transpose2_grad", linear_grad_maker("transpose2"))


# ---------------------------------------------------------------------------------------------
# fill_constant_batch_size_like, one_hot, label_smooth (Paddle 1.8's ops of those names)


@register("fill_constant_batch_size_like", ("Input",), ("Out",),
          {"shape": [], "dtype": "float32", "value": 0.0, "input_dim_idx": 0,
           "output_dim_idx": 0, "force_cpu": False}, lod="kernel")
def fill_constant_batch_size_like(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = ``shape`` filled with ``value``, its ``output_dim_idx`` dim taken from dim
    ``input_dim_idx`` of Input (the batch size, known only at run time); on Input's place
    (``force_cpu`` as in :func:`fill_constant`). As Fluid's kernel: an Input with a LoD and
    ``input_dim_idx`` 0 gives the number of its sequences (last level) instead of its rows,
    and Out has no LoD."""
    x = ins["Input"][0]
    shape = [int(s) for s in attrs.get("shape", [])]
    out_idx, in_idx = int(attrs.get("output_dim_idx", 0)), int(attrs.get("input_dim_idx", 0))
    if not 0 <= out_idx < len(shape) or not 0 <= in_idx < x.ndim:
        raise ValueError(f"fill_constant_batch_size_like: output_dim_idx={out_idx} must index "
                         f"shape {shape} and input_dim_idx={in_idx} the input's "
                         f"{x.ndim} dims")
    lod = (attrs.get("_lods") or {}).get("Input", [None])[0]
    shape[out_idx] = len(lod[-1]) - 1 if lod and in_idx == 0 else int(x.shape[in_idx])
    xp = array_module(x)
    return {"Out": [xp.full(shape, attrs.get("value", 0.0),
                            dtype=to_dtype(attrs.get("dtype", "float32")))],
            LOD_KEY: {"Out": [None]}}


@register("one_hot", ("X", "depth_tensor"), ("Out",),
          {"depth": -1, "dtype": "float32", "allow_out_of_range": False},
          optional=("depth_tensor",))
def one_hot(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[..., k] = 1 where X == k: X ``[..., 1]`` of ids to ``[..., depth]``; an id outside
    ``[0, depth)`` is an error unless ``allow_out_of_range`` (then its row is zeros)."""
    x = ins["X"][0]
    xp = array_module(x)
    depth = int(attrs.get("depth", -1))
    if ins.get("depth_tensor") and ins["depth_tensor"][0] is not None:
        depth = int(ins["depth_tensor"][0].reshape(-1)[0])
    if depth <= 0:
        raise ValueError(f"one_hot: depth must be > 0, got {depth}")
    if x.shape[-1] != 1:
        raise ValueError(f"one_hot: the last dim of X must be 1, got shape {list(x.shape)}")
    ids = x.reshape(x.shape[:-1]).astype(np.int64)
    bad = (ids < 0) | (ids >= depth)
    if bool(bad.any()) and not attrs.get("allow_out_of_range", False):
        first = ids[bad].reshape(-1)[0]
        raise ValueError(f"one_hot: id {int(first)} is out of range [0, {depth}); pass "
                         "allow_out_of_range=True to give such ids a row of zeros")
    out = (ids[..., None] == xp.arange(depth)).astype(to_dtype(attrs.get("dtype", "float32")))
    return {"Out": [out]}



@register("one_hot_v2", ("X", "depth_tensor"), ("Out",),
          {"depth": -1, "dtype": "float32", "allow_out_of_range": False},
          optional=("depth_tensor",))
def one_hot_v2(ins: dict, attrs: dict, outs: tuple) -> dict:
    """``fluid.one_hot``: ids X of any shape to Out ``X.shape + [depth]`` (one_hot's rule
    for ids outside ``[0, depth)``)."""
    x = ins["X"][0]
    return one_hot({**ins, "X": [x.reshape(tuple(x.shape) + (1,))]}, attrs, outs)

@register("label_smooth", ("X", "PriorDist"), ("Out",), {"epsilon": 0.0},
          optional=("PriorDist",), grad=grad_maker((), in_grads=("X",)))
def label_smooth(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = (1 − ε)·X + ε·PriorDist (the uniform 1/K without one)."""
    x = ins["X"][0]
    eps = x.dtype.type(attrs.get("epsilon", 0.0))
    prior = (ins.get("PriorDist") or [None])[0]
    if prior is None:
        return {"Out": [(1 - eps) * x + eps / x.dtype.type(x.shape[-1])]}
    return {"Out": [(1 - eps) * x + eps * prior.reshape((1,) * (x.ndim - 1) + (-1,))]}


@register("label_smooth_grad", *grad_slots((), ("Out",), ("X",)), {"epsilon": 0.0})
def label_smooth_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = (1 − ε)·dOut."""
    d = ins["Out" + GRAD][0]
    return {"X" + GRAD: [d * d.dtype.type(1 - attrs.get("epsilon", 0.0))]}


@register("is_empty", ("X",), ("Out",))
def is_empty(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = [X has no elements] (a bool of one element)."""
    x = ins["X"][0]
    return {"Out": [array_module(x).asarray([int(x.size) == 0], dtype=bool)]}
