"""Indexing layers of ``fluid.layers`` (in Fluid 1.8's ``layers/nn.py``): ``gather_nd``,
``scatter_nd_add``, ``scatter_nd``, ``strided_slice``, ``crop``, ``crop_tensor``,
``multiplex``, ``unique``, ``unique_with_counts`` and ``rank`` (the kernels are in
:mod:`dask_fluid.ops.index_ops` and :mod:`dask_fluid.ops.shape_ops`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..framework import Variable, convert_dtype, install_hook
from ..layer_helper import LayerHelper
from .tensor import (
    _check_var,
    _shape_tensor_list,
    _slice_bounds_input,
    _slice_shape,
    assign,
    zeros,
)

__all__ = ["crop", "crop_tensor", "gather_nd", "multiplex", "rank", "scatter_nd",
           "scatter_nd_add", "strided_slice", "unique", "unique_with_counts"]


def gather_nd(input: Variable, index: Variable, name: str | None = None) -> Variable:
    """``input[index[..., 0], index[..., 1], ...]``: the output is ``index.shape[:-1] +
    input.shape[index.shape[-1]:]`` (Fluid 1.8's ``layers.gather_nd``)."""
    _check_var(input, "input", "gather_nd")
    _check_var(index, "index", "gather_nd")
    if index.dtype not in ("int32", "int64"):
        raise TypeError(f"gather_nd: index {index.name!r} must be int32 or int64, got "
                        f"{index.dtype}")
    shape = None
    if input.shape is not None and index.shape:
        k = index.shape[-1]
        if k > len(input.shape):
            raise ValueError(f"gather_nd: the last dim of index {index.name!r} ({k}) exceeds "
                             f"the rank of {input.name!r} ({len(input.shape)})")
        shape = [*index.shape[:-1], *input.shape[k:]] if k >= 0 else None
    helper = LayerHelper("gather_nd", name)
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op("gather_nd", inputs={"X": [input], "Index": [index]},
                     outputs={"Out": [out]})
    return out


def _int_dtype(v: Variable, arg: str, layer: str, dtypes: tuple[str, ...] = ("int32", "int64")
               ) -> None:
    if v.dtype not in dtypes:
        raise TypeError(f"{layer}: {arg} {v.name!r} must be {' or '.join(dtypes)}, got {v.dtype}")


def _float_or_int(x: Variable, arg: str, layer: str,
                  dtypes: tuple[str, ...] = ("float32", "float64", "int32", "int64")) -> None:
    if x.dtype not in dtypes:
        raise TypeError(f"{layer}: {arg} {x.name!r} must be one of {', '.join(dtypes)}, got "
                        f"{x.dtype}")


def scatter_nd_add(ref: Variable, index: Variable, updates: Variable,
                   name: str | None = None) -> Variable:
    """``ref`` with each slice ``updates[i...]`` added at ``ref[index[i..., 0], index[i..., 1],
    ...]`` (repeated positions accumulate): op ``scatter_nd_add``, as Fluid 1.8's
    ``layers.scatter_nd_add``.

    ``index`` has rank >= 2 and its last dim Q is at most the rank of ``ref``; ``updates`` has
    shape ``index.shape[:-1] + ref.shape[Q:]``. The output has ``ref``'s shape and dtype.

    Raises
    ------
    ValueError
        ``ref`` and ``updates`` differ in dtype, or the shapes break the rule above.
    TypeError
        An argument is not a Variable, or ``index`` is not int32 or int64.
    """
    from ..ops.index_ops import scatter_nd_updates_shape  # noqa: PLC0415

    for v, arg in ((ref, "ref"), (index, "index"), (updates, "updates")):
        _check_var(v, arg, "scatter_nd_add")
    if ref.dtype != updates.dtype:
        raise ValueError(f"scatter_nd_add: ref and updates must have the same dtype, got "
                         f"{ref.dtype} and {updates.dtype}")
    _int_dtype(index, "index", "scatter_nd_add")
    if ref.shape is not None and index.shape is not None and updates.shape is not None:
        if len(index.shape) < 2 or index.shape[-1] >= 0:  # a known Q: Fluid's InferShape
            want = scatter_nd_updates_shape(tuple(ref.shape), tuple(index.shape))
            if len(want) != len(updates.shape) or any(
                    w != u and w >= 0 and u >= 0 for w, u in zip(want, updates.shape, strict=True)):
                raise ValueError(f"scatter_nd_add: updates {updates.name!r} must have shape "
                                 f"index.shape[:-1] + ref.shape[index.shape[-1]:] = "
                                 f"{list(want)}, got {list(updates.shape)}")
    helper = LayerHelper("scatter_nd_add", name)
    out = helper.create_tmp(dtype=ref.dtype, shape=ref.shape)
    helper.append_op("scatter_nd_add", inputs={"X": [ref], "Index": [index],
                                               "Updates": [updates]}, outputs={"Out": [out]})
    return out


def scatter_nd(index: Variable, updates: Variable, shape: Sequence[int],
               name: str | None = None) -> Variable:
    """``updates`` scattered into zeros of ``shape`` (repeated positions accumulate): as Fluid
    1.8's ``layers.scatter_nd``, ``scatter_nd_add(zeros(shape, updates.dtype), index,
    updates)``, op for op.

    Raises
    ------
    TypeError
        ``shape`` is not a list or tuple of ints.
    """
    _check_var(updates, "updates", "scatter_nd")
    if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, (int, np.integer)) for d in shape):
        raise TypeError(f"scatter_nd: shape must be a list or tuple of ints, got {shape!r}")
    return scatter_nd_add(zeros([int(d) for d in shape], updates.dtype), index, updates, name)


def strided_slice(input: Variable, axes: Sequence[int],  # noqa: A002 (Fluid's name)
                  starts: Sequence[int | Variable] | Variable,
                  ends: Sequence[int | Variable] | Variable,
                  strides: Sequence[int | Variable] | Variable) -> Variable:
    """``input[starts:ends:strides]`` along ``axes`` (op ``strided_slice``), as Fluid 1.8's
    ``layers.strided_slice``.

    Negative starts and ends count from the end of the dim and values past it are clamped; a
    negative stride walks backwards (Fluid 1.8's rules: see :mod:`dask_fluid.ops.index_ops`).
    ``starts``, ``ends`` and ``strides`` are each a list of ints, a list mixing ints and
    one-element int32 Variables (input ``StartsTensorList``...: the ints become int32
    constants, the attribute holds -1 and the dim is unknown until run time) or one int32
    Variable (input ``StartsTensor``...: every dim of the output is then unknown until run
    time). As in Fluid 1.8, the Variables' int32 dtype is checked when the op runs (a
    ``layers.data`` declared float32 but fed int32 values works).

    Raises
    ------
    TypeError
        ``input`` is not a float32, float64, int32 or int64 Variable, ``axes`` not a list of
        ints, or ``starts``/``ends``/``strides`` not a list, tuple or Variable.
    ValueError
        The lists are not as long as ``axes``, an axis is out of range, a stride is 0 or a
        slice known when the program is built selects nothing.
    """
    from ..ops.index_ops import strided_slice_shape  # noqa: PLC0415

    _check_var(input, "input", "strided_slice")
    _float_or_int(input, "input", "strided_slice")
    if not isinstance(axes, (list, tuple)) or not all(
            isinstance(a, (int, np.integer)) for a in axes):
        raise TypeError(f"strided_slice: axes must be a list or tuple of ints, got {axes!r}")
    helper = LayerHelper("strided_slice")
    axes = [int(a) for a in axes]
    inputs: dict[str, list[Variable]] = {"Input": [input]}
    attrs: dict[str, Any] = {"axes": axes}
    infer_flags = [1] * len(axes)
    known: dict[str, list[int] | None] = {}
    for arg, value in (("starts", starts), ("ends", ends), ("strides", strides)):
        cap = arg.capitalize()
        # as Fluid 1.8, a Variable's declared dtype is not checked here: the kernel refuses
        # a tensor that is not int32 when it runs (a layers.data declared float32 and fed
        # int32 values is fine, as in Fluid)
        if isinstance(value, Variable):
            value.stop_gradient = True
            inputs[cap + "Tensor"] = [value]
            known[arg] = None
            continue
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"strided_slice: {arg} must be a list, tuple or Variable, got "
                            f"{type(value).__name__}")
        for i, v in enumerate(value):
            if not isinstance(v, (int, np.integer, Variable)):
                raise TypeError(f"strided_slice: {arg}[{i}] must be an int or an int32 "
                                f"Variable, got {v!r}")
        if any(isinstance(v, Variable) for v in value):
            inputs[cap + "TensorList"] = _shape_tensor_list(value, helper)
            for i, v in enumerate(value):
                if isinstance(v, Variable) and i < len(infer_flags):
                    infer_flags[i] = -1
        attrs[arg] = [-1 if isinstance(v, Variable) else int(v) for v in value]
        known[arg] = attrs[arg]
    attrs["infer_flags"] = infer_flags
    shape = None
    if input.shape is not None:
        shape = strided_slice_shape(tuple(input.shape), axes, known["starts"], known["ends"],
                                    known["strides"], infer_flags, [])
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op("strided_slice", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def crop(x: Variable, shape: Sequence[int] | Variable | None = None,
         offsets: Sequence[int] | Variable | None = None, name: str | None = None) -> Variable:
    """The block of ``x`` at ``offsets`` (0s when None) with ``shape`` (op ``crop``), as Fluid
    1.8's deprecated ``layers.crop``.

    ``shape`` is a list of ints (attribute ``shape``; a leading -1 takes ``x``'s batch size) or
    a Variable of ``x``'s rank whose shape (not values) is the output's (input ``Y``);
    ``offsets`` a list of ints (attribute) or a 1-D int32 Variable (input ``Offsets``).

    Raises
    ------
    TypeError
        ``x`` is not a float32 Variable (Fluid 1.8 checks that), or ``shape``/``offsets`` are
        not a list, tuple or Variable.
    ValueError
        ``shape`` or ``offsets`` do not have one entry per dim of ``x``.
    """
    _check_var(x, "x", "crop")
    _float_or_int(x, "x", "crop", ("float32",))
    if not isinstance(shape, (list, tuple, Variable)):
        raise TypeError(f"crop: shape must be a list, tuple or Variable, got "
                        f"{type(shape).__name__}")
    rank = len(x.shape) if x.shape is not None else None
    if offsets is None:
        offsets = [0] * (rank or 0)
    inputs: dict[str, list[Variable]] = {"X": [x]}
    attrs: dict[str, Any] = {}
    if isinstance(shape, Variable):
        if rank is not None and shape.shape is not None and len(shape.shape) != rank:
            raise ValueError(f"crop: shape {shape.name!r} must have the rank of x ({rank}), got "
                             f"shape {list(shape.shape)}")
        inputs["Y"] = [shape]
        out_shape = shape.shape
    else:
        if not all(isinstance(d, (int, np.integer)) for d in shape):
            raise TypeError(f"crop: shape must hold ints, got {list(shape)}")
        if rank is not None and len(shape) != rank:
            raise ValueError(f"crop: shape {list(shape)} needs one entry per dim of x (rank "
                             f"{rank})")
        attrs["shape"] = [int(d) for d in shape]
        out_shape = attrs["shape"]
    if isinstance(offsets, Variable):
        _int_dtype(offsets, "offsets", "crop", ("int32",))
        inputs["Offsets"] = [offsets]
    elif isinstance(offsets, (list, tuple)):
        if not all(isinstance(o, (int, np.integer)) for o in offsets):
            raise TypeError(f"crop: offsets must hold ints, got {list(offsets)}")
        if rank is not None and len(offsets) != rank:
            raise ValueError(f"crop: offsets {list(offsets)} needs one entry per dim of x "
                             f"(rank {rank})")
        attrs["offsets"] = [int(o) for o in offsets]
    else:
        raise TypeError(f"crop: offsets must be a list, tuple, Variable or None, got "
                        f"{type(offsets).__name__}")
    helper = LayerHelper("crop", name)
    out = helper.create_tmp(dtype=x.dtype, shape=out_shape)
    helper.append_op("crop", inputs=inputs, outputs={"Out": [out]}, attrs=attrs or None)
    return out


def crop_tensor(x: Variable, shape: Sequence[int | Variable] | Variable | None = None,
                offsets: Sequence[int | Variable] | Variable | None = None,
                name: str | None = None) -> Variable:
    """The block of ``x`` at ``offsets`` (0s when None) of size ``shape`` (op
    ``crop_tensor``), as Fluid 1.8's ``layers.crop_tensor``.

    ``shape`` is a list of ints (a size -1 runs to the end of the dim), a list mixing ints and
    one-element int32 Variables (input ``ShapeTensor``) or a 1-D int32 Variable (input
    ``Shape``); ``offsets`` likewise (inputs ``OffsetsTensor`` and ``Offsets``; the attribute
    holds -1 for each offset known only at run time).

    Raises
    ------
    TypeError
        ``x`` is not float32, float64, int32 or int64, ``shape``/``offsets`` are not a list,
        tuple or Variable, an item is neither an int nor a Variable, or a Variable is not int32.
    ValueError
        A size is 0 or below -1, an offset is negative, or the lists do not have one entry per
        dim of ``x``.
    """
    _check_var(x, "x", "crop_tensor")
    _float_or_int(x, "x", "crop_tensor")
    if not isinstance(shape, (list, tuple, Variable)):
        raise TypeError(f"crop_tensor: shape must be a list, tuple or Variable, got "
                        f"{type(shape).__name__}")
    if not isinstance(offsets, (list, tuple, Variable, type(None))):
        raise TypeError(f"crop_tensor: offsets must be a list, tuple, Variable or None, got "
                        f"{type(offsets).__name__}")
    rank = len(x.shape)
    if offsets is None:
        offsets = [0] * rank
    helper = LayerHelper("crop_tensor", name)
    inputs: dict[str, list[Variable]] = {"X": [x]}
    attrs: dict[str, Any] = {}

    def check_items(values: Sequence[Any], arg: str) -> None:
        if len(values) != rank:
            raise ValueError(f"crop_tensor: {arg} {list(values)} needs one entry per dim of x "
                             f"(rank {rank})")
        for i, v in enumerate(values):
            if isinstance(v, Variable):
                _int_dtype(v, f"{arg}[{i}]", "crop_tensor", ("int32",))
            elif not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise TypeError(f"crop_tensor: {arg}[{i}] must be an int or an int32 Variable, "
                                f"got {v!r}")
            elif arg == "shape" and (v == 0 or v < -1):
                raise ValueError(f"crop_tensor: shape[{i}] = {v}; a size is positive or -1 (the "
                                 "rest of the dim)")
            elif arg == "offsets" and v < 0:
                raise ValueError(f"crop_tensor: offsets[{i}] = {v}; an offset is >= 0")

    if isinstance(offsets, Variable):
        _int_dtype(offsets, "offsets", "crop_tensor", ("int32",))
        offsets.stop_gradient = True
        inputs["Offsets"] = [offsets]
        attrs["offsets"] = [-1] * rank
    else:
        check_items(offsets, "offsets")
        if any(isinstance(v, Variable) for v in offsets):
            inputs["OffsetsTensor"] = _shape_tensor_list(offsets, helper)
        attrs["offsets"] = [-1 if isinstance(v, Variable) else int(v) for v in offsets]
    if isinstance(shape, Variable):
        _int_dtype(shape, "shape", "crop_tensor", ("int32",))
        if shape.shape is not None and (len(shape.shape) != 1 or shape.shape[0] not in (rank, -1)):
            raise ValueError(f"crop_tensor: shape {shape.name!r} must be 1-D with one size per "
                             f"dim of x ({rank}), got shape {list(shape.shape)}")
        shape.stop_gradient = True
        inputs["Shape"] = [shape]
        out_shape = [-1] * rank
    else:
        check_items(shape, "shape")
        if any(isinstance(v, Variable) for v in shape):
            inputs["ShapeTensor"] = _shape_tensor_list(shape, helper)
            attrs["shape"] = [0 if isinstance(v, Variable) else int(v) for v in shape]
        else:
            attrs["shape"] = [int(v) for v in shape]
        # Fluid's InferShape: a known size, or -1 with a known offset and dim, is known
        out_shape = []
        for s, o, d in zip(attrs["shape"], attrs["offsets"], x.shape, strict=True):
            known = s == -1 and o != -1 and d is not None and d >= 0
            out_shape.append(s if s > 0 else (d - o if known else -1))
    out = helper.create_tmp(dtype=x.dtype, shape=out_shape)
    helper.append_op("crop_tensor", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def multiplex(inputs: Sequence[Variable], index: Variable) -> Variable:
    """Row i of the output is row i of ``inputs[index[i]]`` (op ``multiplex``), as Fluid 1.8's
    ``layers.multiplex``; ``index`` is an int32 or int64 ``[M, 1]`` tensor.

    Raises
    ------
    TypeError
        ``inputs`` is not a list, an input is not a float32, float64, int32 or int64 Variable,
        or ``index`` is not an int32 or int64 Variable.
    ValueError
        Fewer than 2 inputs, inputs of different shapes or of rank < 2, or an ``index`` not of
        shape ``[M, 1]``.
    """
    if not isinstance(inputs, list):
        raise TypeError(f"multiplex: inputs must be a list of Variables, got "
                        f"{type(inputs).__name__}")
    if len(inputs) < 2:
        raise ValueError(f"multiplex: inputs should be a list with at least 2 elements, got "
                         f"{len(inputs)}")
    for i, x in enumerate(inputs):
        _check_var(x, f"inputs[{i}]", "multiplex")
        _float_or_int(x, f"inputs[{i}]", "multiplex")
    _check_var(index, "index", "multiplex")
    _int_dtype(index, "index", "multiplex")
    shape = inputs[0].shape
    if shape is not None:
        if len(shape) < 2 or any(x.shape is not None and tuple(x.shape) != tuple(shape)
                                 for x in inputs):
            raise ValueError(f"multiplex: the inputs must all have one shape of rank >= 2, got "
                             f"{[list(x.shape) if x.shape is not None else None for x in inputs]}")
    if index.shape is not None and (len(index.shape) != 2 or index.shape[1] != 1):
        raise ValueError(f"multiplex: index {index.name!r} must have shape [M, 1], got "
                         f"{list(index.shape)}")
    helper = LayerHelper("multiplex")
    out = helper.create_tmp(dtype=inputs[0].dtype, shape=shape)
    helper.append_op("multiplex", inputs={"X": list(inputs), "Ids": [index]},
                     outputs={"Out": [out]})
    return out


def _unique(op_type: str, x: Variable, dtype: Any, outputs: tuple[str, ...]
            ) -> tuple[Variable, ...]:
    _check_var(x, "x", op_type)
    _float_or_int(x, "x", op_type)
    dtype = convert_dtype(dtype)
    if dtype not in ("int32", "int64"):
        raise TypeError(f"{op_type}: the index dtype must be int32 or int64, got {dtype}")
    if x.shape is None or len(x.shape) != 1:
        raise ValueError(f"{op_type}: x {x.name!r} must be 1-D, got shape "
                         f"{None if x.shape is None else list(x.shape)}")
    helper = LayerHelper(op_type)
    shapes = {"Out": [-1], "Index": list(x.shape), "Count": [-1]}
    made = {slot: helper.create_tmp(dtype=x.dtype if slot == "Out" else dtype,
                                    shape=shapes[slot]) for slot in outputs}
    helper.append_op(op_type, inputs={"X": [x]},
                     outputs={slot: [v] for slot, v in made.items()}, attrs={"dtype": dtype})
    return tuple(made[slot] for slot in outputs)


def unique(x: Variable, dtype: Any = "int32") -> tuple[Variable, Variable]:
    """``(out, index)``: the distinct values of the 1-D ``x`` in order of first occurrence
    (not sorted) and, for each element of ``x``, its position in ``out`` (``dtype``), as Fluid
    1.8's ``layers.unique``. ``out`` has shape ``[-1]`` until run time.

    Raises
    ------
    TypeError
        ``x`` is not a float32, float64, int32 or int64 Variable, or ``dtype`` is not int32 or
        int64.
    ValueError
        ``x`` is not 1-D.
    """
    return _unique("unique", x, dtype, ("Out", "Index"))


def unique_with_counts(x: Variable, dtype: Any = "int32"
                       ) -> tuple[Variable, Variable, Variable]:
    """``(out, index, count)``: :func:`unique` and how many times each value of ``out``
    occurs in ``x`` (``dtype``), as Fluid 1.8's ``layers.unique_with_counts``.

    Raises
    ------
    TypeError
        ``x`` is not a float32, float64, int32 or int64 Variable, or ``dtype`` is not int32 or
        int64.
    ValueError
        ``x`` is not 1-D.
    """
    return _unique("unique_with_counts", x, dtype, ("Out", "Index", "Count"))


def rank(input: Variable) -> Variable:  # noqa: A002 (Fluid's name)
    """The number of dims of ``input``, known when the program is built: as Fluid 1.8's
    ``layers.rank``, ``assign(np.array(len(input.shape), 'int32'))``, a 0-d int32 constant
    (op ``assign_value`` with shape ``[]``)."""
    _check_var(input, "input", "rank")
    if input.shape is None:
        raise ValueError(f"rank: the shape of {input.name!r} is unknown when the program is "
                         "built")
    return assign(np.array(len(input.shape), dtype=np.int32))


#: Fluid 1.8's ``_getitem_impl_`` end for "to the end of the dim"
_TO_END = 10000000


def _bound(value: Any) -> int | Variable:
    return value if isinstance(value, Variable) else int(value)


def _check_index_var(var: Variable, index: Variable) -> None:
    if not convert_dtype(index.dtype).startswith("int") or (
            index.shape is not None and int(np.prod([abs(d) for d in index.shape])) != 1):
        raise TypeError(f"indexing {var.name!r} with {index.name!r}: an index Variable holds "
                        f"one int (shape [1]), got {index.dtype} of shape "
                        f"{None if index.shape is None else list(index.shape)}")


def _getitem(var: Variable, item: Any) -> Variable:
    """``var[item]`` as Fluid 1.8's ``_getitem_impl_``: ints and slices per dim (an int drops
    its dim: ``decrease_axis``), one ``slice`` op, or ``strided_slice`` when a step is not 1,
    and ``reverse`` for a whole dim taken backwards (``::-1``).

    Raises
    ------
    TypeError
        An index that is not an int or a slice (Ellipsis, None, lists, Variables).
    IndexError
        More indices than dims, or an int outside a known dim.
    """
    items = item if isinstance(item, tuple) else (item,)
    shape = var.shape
    if shape is not None and len(items) > len(shape):
        raise IndexError(f"too many indices for {var.name!r} of shape {list(shape)}: "
                         f"{len(items)}")
    axes, starts, ends, steps, decrease, reverse_axes = [], [], [], [], [], []
    for dim, each in enumerate(items):
        if isinstance(each, slice):
            start, stop, step = each.start, each.stop, each.step
            if start is None and stop is None and step is None:
                continue
            step = 1 if step is None else step
            if isinstance(step, Variable):
                # Fluid 1.8 passes a Variable step on to strided_slice (StridesTensorList)
                _check_index_var(var, step)
                if start is None and stop is None:
                    raise TypeError(f"indexing {var.name!r}: a whole dim taken with a Variable "
                                    "step (only ::-1 is supported, as in Fluid)")
            elif start is None and stop is None and step == -1:
                reverse_axes.append(dim)
                continue
            elif start is None and stop is None and step < 0:
                # Fluid 1.8 asserts step == -1 here; a positive step goes to strided_slice
                raise TypeError(f"indexing {var.name!r}: a whole dim taken with step {step} "
                                "(backwards, only ::-1 is supported, as in Fluid)")
            for v in (start, stop):
                if v is not None and not isinstance(v, (int, np.integer, Variable)):
                    raise TypeError(f"indexing {var.name!r}: slice bounds must be ints or int "
                                    f"Variables, got {type(v).__name__}")
            if not isinstance(step, (int, np.integer, Variable)):
                raise TypeError(f"indexing {var.name!r}: a slice step must be an int or an int "
                                f"Variable, got {type(step).__name__}")
            if not isinstance(step, Variable) and step == 0:
                raise ValueError(f"indexing {var.name!r}: slice step cannot be zero")
            axes.append(dim)
            starts.append(0 if start is None else _bound(start))
            ends.append(_TO_END if stop is None else _bound(stop))
            steps.append(_bound(step))
        elif isinstance(each, Variable):
            # Fluid 1.8: start i, end i + 1 (an op), the dim dropped; known when the program runs
            _check_index_var(var, each)
            axes.append(dim)
            starts.append(each)
            ends.append(each + 1)
            steps.append(1)
            decrease.append(dim)
        elif isinstance(each, (int, np.integer)) and not isinstance(each, bool):
            index = int(each)
            size = shape[dim] if shape is not None else -1
            if size > 0 and not -size <= index < size:
                raise IndexError(f"index {index} is out of bounds for dim {dim} of "
                                 f"{var.name!r}, of size {size}")
            axes.append(dim)
            starts.append(index)
            ends.append(_TO_END if index == -1 else index + 1)
            steps.append(1)
            decrease.append(dim)
        else:
            raise TypeError(f"indexing {var.name!r}: only ints, int Variables and slices are "
                            f"supported (as in Fluid 1.8), got {type(each).__name__}")
    out = var
    if axes:
        strided = any(isinstance(s, Variable) or s != 1 for s in steps)
        op_type = "strided_slice" if strided else "slice"
        helper = LayerHelper(op_type)
        inputs: dict[str, list[Variable]] = {"Input": [var]}
        attrs: dict[str, Any] = {"axes": axes, "decrease_axis": decrease,
                                 "infer_flags": [1] * len(axes)}
        bounds = {}
        for name, given in (("starts", starts), ("ends", ends)):
            attrs[name], bounds[name] = _slice_bounds_input(given, name, len(axes), inputs,
                                                            attrs["infer_flags"])
        if strided:
            attrs["strides"], _ = _slice_bounds_input(steps, "strides", len(axes), inputs,
                                                      attrs["infer_flags"])
        result_shape = None if strided else _slice_shape(shape, axes, bounds["starts"],
                                                         bounds["ends"], decrease)
        out = helper.create_tmp(dtype=var.dtype, shape=result_shape)
        helper.append_op(op_type, inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    if reverse_axes:
        helper = LayerHelper("reverse")
        flipped = helper.create_tmp(dtype=var.dtype, shape=out.shape)
        helper.append_op("reverse", inputs={"X": [out]}, outputs={"Out": [flipped]},
                         attrs={"axis": reverse_axes})
        out = flipped
    return out


install_hook("getitem", _getitem)  # a Variable's [] builds these ops
