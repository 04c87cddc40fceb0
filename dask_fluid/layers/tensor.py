"""Tensor layers: constants, globals, assign, cast, concat, reshape, sums, comparisons."""

from __future__ import annotations

import builtins  # this module defines Fluid's layers.sum and layers.range
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import unique_name
from ..framework import Variable, VarType, convert_dtype, default_main_program, in_dygraph_mode
from ..initializer import ConstantInitializer, force_init_on_cpu
from ..layer_helper import LayerHelper
from .checks import ArgumentAssertionError, check_dtype, check_type, check_variable_and_dtype

__all__ = [
    "argmax", "argmin", "argsort", "assign", "cast", "concat", "create_global_var",
    "create_parameter", "create_tensor",
    "data", "equal", "expand", "expand_as", "fill_constant", "fill_constant_batch_size_like",
    "flatten", "gather", "increment", "label_smooth", "less_than", "logical_and", "logical_not",
    "logical_or", "logical_xor", "one_hot", "ones", "reshape", "scatter", "shape", "slice",
    "split", "squeeze", "stack", "sum", "sums", "transpose", "unsqueeze", "unstack", "where",
    "zeros", "diag", "eye", "has_inf", "has_nan", "isfinite", "linspace", "lod_append",
    "ones_like", "range",
    "reverse", "zeros_like", "size",
]


def _known(d: int | None) -> bool:
    """A static dim that is known (not None, not -1)."""
    return d is not None and d >= 0


def _check_var(x: Any, arg: str, layer: str) -> Variable:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")
    return x


def _check_float(x: Any, arg: str, layer: str) -> Variable:
    """``x`` a Variable of a float dtype, as Fluid 1.8's ``check_variable_and_dtype`` of the
    layers that take only those (conv2d, fc, clip, dropout): a TypeError before any shape
    check, in dygraph mode too."""
    _check_var(x, arg, layer)
    dtype = convert_dtype(x.dtype)
    if dtype not in ("float16", "float32", "float64"):
        raise TypeError(f"{layer}: {arg} {x.name!r} must be float16, float32 or float64, "
                        f"got {dtype}")
    return x


def data(name: str, shape: Sequence[int], append_batch_size: bool = True,
         dtype: Any = "float32", lod_level: int = 0, type: str = VarType.LOD_TENSOR,
         stop_gradient: bool = True) -> Variable:
    """Declare an input fed at run time; ``-1`` is prepended for the batch dimension.

    Fluid 1.8's signature, in its order: the third positional argument is
    ``append_batch_size`` (a dtype there is refused; pass ``dtype=`` by keyword).

    Parameters
    ----------
    name : str
        The key of this input in ``Executor.run(feed=...)`` and in the distributed runtimes.
    shape : list or tuple of int or None
        Per-example shape (``append_batch_size=True``) or the full shape. As in Fluid, a
        None (read as -1) or negative dim turns ``append_batch_size`` off: the shape is then
        the full shape.
    dtype : str
    lod_level : int
    append_batch_size : bool
        Prepend the batch dimension ``-1``. With ``False`` the shape is the whole shape and,
        as in Fluid, its dims may be placeholders (a maximum sequence length).
    type : str
        ``VarType.LOD_TENSOR`` (the default), or another variable type of Fluid's.
    stop_gradient : bool

    As in Fluid 1.8, what is fed is not checked against the declared shape and dtype (that is
    ``fluid.data``'s): it goes in as it is, a float of another width taking the declared one.
    """
    if not isinstance(name, str):
        raise TypeError(f"data: name must be a str, got {name.__class__.__name__}")
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"data {name!r}: shape must be a list or tuple, got "
                        f"{shape.__class__.__name__}")
    if not isinstance(append_batch_size, (bool, np.bool_)):
        raise TypeError(f"data {name!r}: append_batch_size must be a bool, got "
                        f"{append_batch_size!r}; Fluid's layers.data takes (name, shape, "
                        "append_batch_size, dtype, ...): pass dtype= by keyword")
    # as Fluid 1.8: a None or negative dim means the shape already holds the batch dim
    shape = [-1 if d is None else int(d) for d in shape]
    if any(d < 0 for d in shape):
        append_batch_size = False
    if append_batch_size:
        shape = [-1] + shape
    block = default_main_program().global_block()
    return block.create_var(name=name, shape=shape, dtype=dtype, lod_level=lod_level,
                            type=type, stop_gradient=stop_gradient, is_data=True,
                            need_check_feed=False)  # Fluid's: only fluid.data checks feeds


def fill_constant(shape: Sequence[int | Variable] | Variable, dtype: Any,
                  value: float | Variable, force_cpu: bool = False,
                  out: Variable | None = None) -> Variable:
    """A tensor of ``shape`` filled with ``value``, ``stop_gradient`` True.

    As Fluid 1.8's layer: ``shape`` is a list or tuple of ints (attr ``shape``), a list
    mixing ints and ``[1]`` int32/int64 Variables (input ``ShapeTensorList``: the ints become
    int32 constants on the CPU, an int64 Variable is cast to int32, and the attr holds -1 for
    each Variable) or one 1-D int32/int64 Variable (input ``ShapeTensor``, cast to int32 when
    int64). ``value`` is a number (attr ``value`` and, so that an int64 or float64 value
    keeps its precision, ``str_value``) or a ``[1]`` Variable (input ``ValueTensor``).

    Parameters
    ----------
    shape : list or tuple of int or Variable, or Variable
    dtype : str or numpy dtype
    value : float, int, bool or Variable
    force_cpu : bool
        Keep the tensor in host memory (also inside ``initializer.init_on_cpu()``).
    out : Variable, optional
        The variable to fill; a new one when None.

    Raises
    ------
    TypeError
        ``dtype`` is not bool, float16, float32, float64, int32 or int64; ``out`` is not a
        Variable of ``dtype``; ``shape`` is not a list, tuple or Variable, or a shape Variable
        is not int32 or int64.
    ArgumentAssertionError
        ``shape`` is an empty list (Fluid asserts; a ValueError and an AssertionError).
    """
    helper = LayerHelper("fill_constant")
    dtype = convert_dtype(dtype)
    check_dtype(dtype, "dtype", ["bool", "float16", "float32", "float64", "int32", "int64"],
                "fill_constant")
    if out is not None:
        check_variable_and_dtype(out, "out", [dtype], "fill_constant")
    inputs: dict[str, list[Variable]] = {}
    attrs: dict[str, Any] = {"force_cpu": bool(force_cpu) or force_init_on_cpu(),
                             "dtype": dtype}
    if isinstance(value, Variable):
        inputs["ValueTensor"] = [value]
        attrs["value"] = 0.0
    else:
        attrs["value"] = float(value)
        attrs["str_value"] = (str(int(value)) if dtype in ("int64", "int32")
                              else str(float(value)))
    check_type(shape, "shape", (Variable, list, tuple), "fill_constant")
    var_shape: list[int] | None
    if isinstance(shape, Variable):
        check_dtype(shape.dtype, "shape", ["int32", "int64"], "fill_constant",
                    "(When type of shape in fill_constant is Variable.)")
        shape.stop_gradient = True
        if shape.dtype == "int64":
            shape = cast(shape, "int32")
        inputs["ShapeTensor"] = [shape]
        attrs["shape"] = []
        n = shape.shape[0] if shape.shape is not None and len(shape.shape) == 1 else None
        var_shape = None if n is None or n < 0 else [-1] * n
    else:
        if len(shape) == 0:
            raise ArgumentAssertionError("The size of 'shape' in fill_constant can't be zero, "
                                         "but received 0.")
        attrs["shape"] = [-1 if isinstance(d, Variable) else int(d) for d in shape]
        var_shape = list(attrs["shape"])
        if any(isinstance(d, Variable) for d in shape):
            given = []
            for i, d in enumerate(shape):
                if isinstance(d, Variable):
                    check_dtype(d.dtype, f"shape[{i}]", ["int32", "int64"], "fill_constant",
                                "(When type of shape in fill_constant is list or tuple.)")
                    d.stop_gradient = True
                    d = cast(d, "int32") if d.dtype == "int64" else d
                given.append(d)
            inputs["ShapeTensorList"] = _shape_tensor_list(given)
    if out is None:
        out = helper.create_tmp(dtype=dtype, shape=var_shape, stop_gradient=True)
    attrs["dtype"] = out.dtype
    helper.append_op("fill_constant", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    out.stop_gradient = True
    return out


def create_global_var(shape: Sequence[int], value: float, dtype: Any,
                      persistable: bool = False, force_cpu: bool = False,
                      name: str | None = None) -> Variable:
    """A global-block variable initialised to ``value`` by the startup program."""
    helper = LayerHelper("global_var")
    name = name or unique_name.generate("global_var")
    var = helper.main_program.global_block().create_var(
        name=name, shape=list(shape), dtype=dtype, persistable=persistable, stop_gradient=True)
    helper.set_variable_initializer(var, ConstantInitializer(float(value), force_cpu=force_cpu))
    return var


#: Fluid 1.8's ``assign`` of a numpy array: the dtypes its ``assign_value`` op carries there
_ASSIGN_SLOTS = {"bool": "bool_values", "float32": "fp32_values", "int32": "int32_values",
                 "int64": "int64_values"}
#: and the dtypes it copies from a Variable (op ``assign``)
_ASSIGN_VAR_DTYPES = ("float32", "float64", "int32", "int64", "bool")
#: and the most values it carries in the program (larger arrays belong in a file)
_ASSIGN_MAX_VALUES = 1024 * 1024


def assign(input: Variable | np.ndarray, output: Variable | None = None) -> Variable:
    """Copy ``input`` into ``output`` (a new variable when None).

    As Fluid 1.8's ``layers.assign``, ``input`` is a float32, float64, int32, int64 or bool
    Variable (op ``assign``), or a bool, float32, int32 or int64 numpy array of at most 1M
    values, which the program carries as a constant (op ``assign_value``; int64 values stay
    exact beyond 2**53).

    Raises
    ------
    TypeError
        ``input`` is neither, a Variable of another dtype (outside dygraph mode), or an array
        of another dtype.
    ValueError
        The array has more than 1M values.
    """
    helper = LayerHelper("assign")
    check_type(input, "input", (Variable, np.ndarray), "assign")
    if isinstance(input, np.ndarray):
        slot = _ASSIGN_SLOTS.get(str(input.dtype))
        if slot is None:  # Fluid raises this one in dygraph mode too
            raise TypeError(f"When the type of 'input' in assign is numpy.ndarray, the data "
                            f"type of 'input' must be bool, float32, int32 or int64, but "
                            f"received {convert_dtype(input.dtype)}; convert it with "
                            f".astype()")
        if input.size > _ASSIGN_MAX_VALUES:
            raise ValueError(f"assign: the array has {input.size} values, more than a program "
                             f"carries ({_ASSIGN_MAX_VALUES}); save it to a file and load it")
        if output is None:
            output = helper.create_tmp(dtype=str(input.dtype), shape=list(input.shape))
        helper.append_op("assign_value", outputs={"Out": [output]},
                         attrs={"dtype": str(input.dtype), "shape": list(input.shape),
                                slot: input.reshape(-1).tolist()})
        return output
    if not isinstance(input, Variable):  # in dygraph mode, where check_type passes it
        raise TypeError(f"assign: input must be a Variable or a numpy array, got "
                        f"{type(input).__name__}")
    check_dtype(input.dtype, "input", _ASSIGN_VAR_DTYPES, "assign",
                "(When the type of input in assign is Variable.)")
    if output is None:
        output = helper.create_tmp(dtype=input.dtype, shape=input.shape)
    helper.append_op("assign", inputs={"X": [input]}, outputs={"Out": [output]})
    return output


def cast(x: Variable, dtype: Any) -> Variable:
    """Convert ``x`` to ``dtype``."""
    helper = LayerHelper("cast")
    dtype = convert_dtype(dtype)
    out = helper.create_tmp(dtype=dtype, shape=x.shape)
    helper.append_op("cast", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"in_dtype": x.dtype, "out_dtype": dtype})
    return out


def tensor_array_to_tensor(input: Variable, axis: int = 1, name: str | None = None,
                           use_stack: bool = False) -> tuple[Variable, Variable]:
    """The items of the tensor array ``input`` concatenated along ``axis`` (stacked on a new
    dimension ``axis`` with ``use_stack``), and an int32 tensor of each item's size along
    ``axis`` (1 each when stacked): Fluid 1.8's ``layers.tensor_array_to_tensor``.

    As Fluid's shape inference, the output takes the array's item shape (that of the last
    ``array_write``) with -1 at ``axis`` (inserted there with ``use_stack``). It trains:
    the gradient goes back to the array's items.

    In dygraph mode the array is the list ``create_array`` gives there, and ``out_index`` an
    int64 tensor of the sizes, as Fluid 1.8's dygraph branch computes them.

    Returns
    -------
    tuple of Variable
        ``(out, out_index)``.
    """
    if in_dygraph_mode():
        if not isinstance(input, list):
            raise TypeError("tensor_array_to_tensor: in dygraph mode the input must be the "
                            f"list create_array gives, got {type(input).__name__}")
        out = (stack if use_stack else concat)(input, axis=axis)
        # as Fluid 1.8's dygraph branch: each item's size along axis, stacked or not
        # (int64 as Fluid's numpy array; assign carries int32, as Fluid 1.8's does)
        sizes = assign(np.array([int(x.shape[axis]) for x in input], dtype=np.int32))
        return out, cast(sizes, "int64")
    if not isinstance(input, Variable) or input.type != VarType.LOD_TENSOR_ARRAY:
        raise TypeError("tensor_array_to_tensor: input must be a tensor array Variable "
                        f"(layers.create_array), got {input!r}")
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"tensor_array_to_tensor: axis must be an int, got {axis!r}")
    shape = None
    if input.shape is not None:
        dims = list(input.shape)
        n = len(dims) + 1 if use_stack else len(dims)
        if not -n <= axis < n:
            raise ValueError(f"tensor_array_to_tensor: axis {axis} is out of range for items "
                             f"of shape {dims} (use_stack={use_stack}); expected in "
                             f"[{-n}, {n})")
        k = axis + n if axis < 0 else axis
        if use_stack:
            dims.insert(k, -1)
        else:
            dims[k] = -1
        shape = dims
    helper = LayerHelper("tensor_array_to_tensor", name)
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    out_index = helper.create_tmp(dtype="int32", shape=[-1], stop_gradient=True)
    helper.append_op("tensor_array_to_tensor", inputs={"X": [input]},
                     outputs={"Out": [out], "OutIndex": [out_index]},
                     attrs={"axis": axis, "use_stack": bool(use_stack)})
    return out, out_index


def _the_array(items: Any, layer: str) -> Variable | None:
    """The tensor array that ``items`` is (or is the only item of), else None."""
    seq = [items] if isinstance(items, Variable) else list(items) if isinstance(
        items, (list, tuple)) else []
    if not any(isinstance(v, Variable) and v.type == VarType.LOD_TENSOR_ARRAY for v in seq):
        return None
    if len(seq) != 1:
        raise ValueError(f"{layer}: a tensor array must be the only input (its items are "
                         f"joined), got {len(seq)} inputs")
    return seq[0]


def concat(input: Sequence[Variable] | Variable, axis: int | Variable = 0,
           name: str | None = None) -> Variable:
    """Join tensors along ``axis`` (the ``concat`` op).

    As in Fluid 1.8: ``axis`` is an int or a ``[1]`` int32/int64 Variable (the op's
    ``AxisTensor``, read at run time, so every dim of the result is unknown (-1) until then);
    a single Variable for ``input`` is taken as a list of it (with a warning); the items of a
    tensor array (``input`` the array, or a list of that one array) are joined through
    ``tensor_array_to_tensor``.

    Raises
    ------
    TypeError
        An item that is not a Variable or not float16, float32, float64, int32 or int64; an
        ``axis`` neither an int nor a Variable.
    """
    array = _the_array(input, "concat")
    if array is not None:
        if isinstance(axis, Variable):
            raise TypeError("concat: the axis of a tensor array's items must be an int")
        return tensor_array_to_tensor(array, axis, name)[0]
    if isinstance(input, Variable):
        # Fluid 1.8 warns and takes the one Variable as the list
        warnings.warn(f"The type of input in concat should be list, but received "
                      f"{type(input)}.", stacklevel=2)
        input = [input]
    elif not isinstance(input, list):
        input = list(input)  # a tuple: taken as its items here (Fluid 1.8 refuses it)
    if not input:
        raise ValueError("concat needs at least one input")
    for i, v in enumerate(input):
        _check_var(v, f"input[{i}]", "concat")
        if convert_dtype(v.dtype) not in ("float16", "float32", "float64", "int32", "int64"):
            raise TypeError(f"concat: input[{i}] must be float16, float32, float64, int32 or "
                            f"int64, got {convert_dtype(v.dtype)}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer, Variable)):
        raise TypeError(f"concat: axis must be an int or a Variable, got "
                        f"{type(axis).__name__}")
    helper = LayerHelper("concat", name)
    inputs: dict[str, list[Variable]] = {"X": list(input)}
    attrs: dict[str, Any] = {}
    shape = None
    if isinstance(axis, Variable):
        axis.stop_gradient = True
        inputs["AxisTensor"] = [axis]
        if input[0].shape is not None:  # Fluid's InferShape with an AxisTensor
            shape = [-1] * len(input[0].shape)
    else:
        attrs["axis"] = int(axis)
        if all(v.shape is not None for v in input):
            shape = list(input[0].shape)
            ax = int(axis) % len(shape)
            sizes = [v.shape[ax] for v in input]
            shape[ax] = -1 if any(s < 0 for s in sizes) else builtins.sum(sizes)
    out = helper.create_tmp(dtype=input[0].dtype, shape=shape)
    helper.append_op("concat", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


#: the dtypes Fluid 1.8's layers.sums and layers.sum check their inputs for
_SUM_DTYPES = ("float32", "float64", "int32", "int64")


def _check_summands(input: Any, arg: str, layer: str) -> None:
    """Fluid 1.8's checks of the two sum layers: a Variable or a list or tuple of them, each
    of :data:`_SUM_DTYPES`."""
    check_type(input, arg, (Variable, tuple, list), layer)
    for item in input if isinstance(input, (list, tuple)) else [input]:
        check_variable_and_dtype(item, arg, _SUM_DTYPES, layer)


def _append_sum(input: Sequence[Variable], out: Variable | None) -> Variable:
    helper = LayerHelper("sum")
    if out is None:
        out = helper.create_tmp(dtype=input[0].dtype, shape=input[0].shape)
    helper.append_op("sum", inputs={"X": list(input)}, outputs={"Out": [out]})
    return out


def sums(input: Sequence[Variable], out: Variable | None = None) -> Variable:
    """Element-wise sum of a list of tensors."""
    _check_summands(input, "input", "sums")
    if out is not None:
        check_variable_and_dtype(out, "out", _SUM_DTYPES, "sums")
    return _append_sum([input] if isinstance(input, Variable) else input, out)


def reshape(x: Variable, shape: Sequence[int | Variable] | Variable,
            actual_shape: Variable | None = None, act: str | None = None,
            inplace: bool = False, name: str | None = None) -> Variable:
    """Reshape (``reshape2``): 0 copies the input dim, one -1 is inferred.

    As in Fluid 1.8, the shape can come from the graph: ``shape`` may be an int Variable (the
    whole shape, input ``Shape``) or a list whose items are ints or one-element int Variables
    (input ``ShapeTensor``); ``actual_shape``, an int Variable, overrides a list of ints at run
    time (input ``Shape``; the list still gives the shape known when the program is built).
    At run time ``ShapeTensor`` comes first, then ``Shape``, then the ``shape`` attribute.
    With ``inplace=True`` the result is ``x`` itself (Fluid's in-place reshape): ``x`` holds
    the reshaped tensor after the op.

    Raises
    ------
    TypeError
        ``shape`` is not a list, tuple or Variable, or ``actual_shape`` is not a Variable.
    ArgumentAssertionError
        More than one -1, a 0 past the input's rank, a negative dimension, an item of the list
        neither an int nor a Variable, or an empty shape (Fluid asserts; a ValueError and an
        AssertionError).
    """
    check_variable_and_dtype(x, "x", ("float16", "float32", "float64", "int32", "int64"),
                             "reshape")
    check_type(shape, "shape", (list, tuple, Variable), "reshape")
    _check_var(x, "x", "reshape")
    if not isinstance(shape, (list, tuple, Variable)):
        raise TypeError(f"reshape: shape must be a list, tuple or Variable, got "
                        f"{type(shape).__name__}")
    if actual_shape is not None and not isinstance(actual_shape, Variable):
        raise TypeError(f"reshape: actual_shape must be a Variable or None, got "
                        f"{type(actual_shape).__name__}")
    helper = LayerHelper("reshape2", name)
    inputs: dict[str, list[Variable]] = {"X": [x]}
    attrs: dict[str, Any] = {}
    if isinstance(shape, Variable):
        shape.stop_gradient = True
        inputs["Shape"] = [shape]
        # the rank is the number of values Shape holds; every dim is known at run time only
        rank = int(shape.shape[0]) if shape.shape and len(shape.shape) == 1 else -1
        out_shape = [-1] * rank if rank >= 0 else None
    else:
        attrs["shape"] = _reshape_attr(shape, x)
        if any(isinstance(d, Variable) for d in shape):
            inputs["ShapeTensor"] = _shape_tensor_list(shape)
        elif actual_shape is not None:
            actual_shape.stop_gradient = True
            inputs["Shape"] = [actual_shape]
        out_shape = None
        if x.shape is not None:
            out_shape = [x.shape[i] if d == 0 else d for i, d in enumerate(attrs["shape"])]
    if inplace:
        out = x
        out.shape = tuple(out_shape) if out_shape is not None else None
    else:
        out = helper.create_tmp(dtype=x.dtype, shape=out_shape)
    xshape = helper.create_tmp(dtype=x.dtype, stop_gradient=True)
    helper.append_op("reshape2", inputs=inputs, outputs={"Out": [out], "XShape": [xshape]},
                     attrs=attrs)
    return helper.append_activation(out, act)


def _reshape_attr(shape: Sequence[int | Variable], x: Variable) -> list[int]:
    """The ``shape`` attribute: ints as given, -1 for each Variable (Fluid's rules checked)."""
    if len(shape) == 0:
        raise ArgumentAssertionError("reshape: shape must not be empty")
    out: list[int] = []
    inferred = False  # a Variable's -1 is a placeholder, not the dim to infer
    for i, d in enumerate(shape):
        if isinstance(d, Variable):
            out.append(-1)
            continue
        if not isinstance(d, numbers.Integral) or isinstance(d, bool):
            raise ArgumentAssertionError(f"reshape: shape[{i}] = {d!r} is neither an int nor a "
                                         "Variable")
        d = int(d)
        if d == -1:
            if inferred:
                raise ArgumentAssertionError(f"reshape: at most one dimension may be -1, got "
                                             f"{list(shape)}")
            inferred = True
        if d == 0 and x.shape is not None and i >= len(x.shape):
            raise ArgumentAssertionError(f"reshape: shape[{i}] is 0 (copy the input's dim), "
                                         f"but the input has only {len(x.shape)} dims")
        if d < -1:
            raise ArgumentAssertionError(f"reshape: shape[{i}] = {d}; a dimension is positive, "
                                         "0 (copy) or the one -1 (inferred)")
        out.append(d)
    return out


def _shape_tensor_list(shape: Sequence[int | Variable],
                       helper: LayerHelper | None = None) -> list[Variable]:
    """A list of one-element int tensors, as Fluid 1.8 passes a list holding Variables
    (``ShapeTensor``, ``StartsTensorList``, ...): each Variable as it is, each int as a
    one-element int32 constant on the CPU (in a temporary of ``helper``'s layer when given,
    as strided_slice and crop_tensor name it)."""
    items = []
    for d in shape:
        if isinstance(d, Variable):
            d.stop_gradient = True
            items.append(d)
        else:
            out = None if helper is None else helper.create_tmp(dtype="int32", shape=[1],
                                                                 stop_gradient=True)
            items.append(fill_constant([1], "int32", int(d), force_cpu=True, out=out))
    return items


def increment(x: Variable, value: float = 1.0, in_place: bool = True) -> Variable:
    """``x + value`` (in place by default) of a float32, float64, int32 or int64 ``x``, as
    Fluid 1.8's ``layers.increment``."""
    check_variable_and_dtype(x, "x", ("float32", "float64", "int32", "int64"), "increment")
    helper = LayerHelper("increment")
    out = x if in_place else helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op("increment", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"step": float(value)})
    return out


def _compare(op_type: str, x: Variable, y: Variable, cond: Variable | None = None,
             attrs: dict[str, Any] | None = None) -> Variable:
    helper = LayerHelper(op_type)
    if cond is None:
        cond = helper.create_tmp(dtype="bool", shape=x.shape, stop_gradient=True)
    helper.append_op(op_type, inputs={"X": [x], "Y": [y]}, outputs={"Out": [cond]},
                     attrs=attrs)
    return cond


def less_than(x: Variable, y: Variable, force_cpu: Any = None, cond: Variable | None = None
              ) -> Variable:
    """Element-wise ``x < y`` (bool); ``force_cpu``, when given, is recorded on the op as in
    Fluid."""
    attrs = {} if force_cpu is None else {"force_cpu": bool(force_cpu)}
    return _compare("less_than", x, y, cond, attrs)


def equal(x: Variable, y: Variable, cond: Variable | None = None) -> Variable:
    """Element-wise ``x == y`` (bool)."""
    return _compare("equal", x, y, cond)


def _check_logical(op_type: str, x: Any, y: Any, out: Any) -> None:
    """Fluid 1.8's ``_logical_op`` checks: bool ``x`` (and ``y``, None for logical_not), and
    an ``out`` Variable when given."""
    check_variable_and_dtype(x, "x", ("bool",), op_type)
    if y is not None:
        check_variable_and_dtype(y, "y", ("bool",), op_type)
    if out is not None:
        check_type(out, "out", Variable, op_type)


def logical_and(x: Variable, y: Variable, out: Variable | None = None) -> Variable:
    """Element-wise ``x and y`` of bool ``x`` and ``y``."""
    _check_logical("logical_and", x, y, out)
    return _compare("logical_and", x, y, out)


def logical_or(x: Variable, y: Variable, out: Variable | None = None) -> Variable:
    """Element-wise ``x or y`` of bool ``x`` and ``y``."""
    _check_logical("logical_or", x, y, out)
    return _compare("logical_or", x, y, out)


def logical_xor(x: Variable, y: Variable, out: Variable | None = None) -> Variable:
    """Element-wise ``x xor y`` of bool ``x`` and ``y``."""
    _check_logical("logical_xor", x, y, out)
    return _compare("logical_xor", x, y, out)


def flatten(x: Variable, axis: int = 1, name: str | None = None) -> Variable:
    """``x`` as a matrix: the dims before ``axis`` make the rows, the rest the columns
    (op ``flatten2``, as Fluid 1.8's ``layers.flatten``).

    Raises
    ------
    ValueError
        ``axis`` is not in ``[0, rank]``.
    """
    _check_var(x, "x", "flatten")
    rank = len(x.shape) if x.shape is not None else None
    if not isinstance(axis, int) or axis < 0 or (rank is not None and axis > rank):
        raise ValueError(f"flatten: the axis should be a int, and in range [0, rank(x)], got "
                         f"{axis}")
    helper = LayerHelper("flatten2", name)
    shape = None
    if x.shape is not None:
        def size(dims: Sequence[int]) -> int:
            return -1 if any(d < 0 for d in dims) else int(np.prod(dims, dtype=np.int64))
        shape = [size(x.shape[:axis]), size(x.shape[axis:])]
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    xshape = helper.create_tmp(dtype=x.dtype, stop_gradient=True)
    helper.append_op("flatten2", inputs={"X": [x]}, outputs={"Out": [out], "XShape": [xshape]},
                     attrs={"axis": axis})
    return out


def shape(input: Variable) -> Variable:
    """The shape of ``input`` at run time (int32 ``[rank]``)."""
    _check_var(input, "input", "shape")
    helper = LayerHelper("shape")
    rank = len(input.shape) if input.shape is not None else -1
    out = helper.create_tmp(dtype="int32", shape=[rank], stop_gradient=True)
    helper.append_op("shape", inputs={"Input": [input]}, outputs={"Out": [out]})
    return out


def sum(x: Variable | Sequence[Variable]) -> Variable:  # noqa: A001 (Fluid's name)
    """The element-wise sum of ``x`` (a Variable or a list), op ``sum`` (Fluid 1.8's
    ``layers.sum``; :func:`sums` with an ``out``)."""
    # Fluid 1.8's layers.sum is paddle.elementwise_sum, whose checks name it so
    _check_summands(x, "inputs", "elementwise_sum")
    return _append_sum([x] if isinstance(x, Variable) else list(x), None)


def unstack(x: Variable, axis: int = 0, num: int | None = None) -> list[Variable]:
    """``x`` cut along ``axis`` into its slices (op ``unstack``); ``num`` defaults to that
    dim's size, which must then be known.

    Raises
    ------
    ValueError
        The number of slices is unknown (give ``num``).
    """
    _check_var(x, "x", "unstack")
    rank = len(x.shape) if x.shape is not None else None
    axis = axis % rank if rank else axis
    if num is None:
        num = x.shape[axis] if x.shape is not None else -1
    if num is None or num < 0:
        raise ValueError(f"unstack: the size of dim {axis} of {x.name!r} is unknown; give num")
    helper = LayerHelper("unstack")
    part = None if x.shape is None else [s for i, s in enumerate(x.shape) if i != axis]
    outs = [helper.create_tmp(dtype=x.dtype, shape=part) for _ in builtins.range(num)]
    helper.append_op("unstack", inputs={"X": [x]}, outputs={"Y": outs},
                     attrs={"axis": axis, "num": num})
    return outs


def expand_as(x: Variable, target_tensor: Variable, name: str | None = None) -> Variable:
    """``x`` tiled to ``target_tensor``'s shape (each of its dims a multiple of ``x``'s)."""
    _check_var(x, "x", "expand_as")
    _check_var(target_tensor, "target_tensor", "expand_as")
    helper = LayerHelper("expand_as", name)
    out = helper.create_tmp(dtype=x.dtype, shape=target_tensor.shape)
    helper.append_op("expand_as", inputs={"X": [x], "target_tensor": [target_tensor]},
                     outputs={"Out": [out]})
    return out


def where(condition: Variable) -> Variable:
    """The coordinates of the true elements of a bool ``condition`` (int64 ``[N, rank]``)."""
    _check_var(condition, "condition", "where")
    helper = LayerHelper("where_index")
    rank = len(condition.shape) if condition.shape is not None else -1
    out = helper.create_tmp(dtype="int64", shape=[-1, rank], stop_gradient=True)
    helper.append_op("where_index", inputs={"Condition": [condition]}, outputs={"Out": [out]})
    return out


def scatter(input: Variable, index: Variable, updates: Variable, name: str | None = None,
            overwrite: bool = True) -> Variable:
    """``input`` with its rows ``index`` set to ``updates`` (``overwrite``) or, not
    overwriting, to the sum of the updates aimed at each row (op ``scatter``)."""
    _check_var(input, "input", "scatter")
    helper = LayerHelper("scatter", name)
    out = helper.create_tmp(dtype=input.dtype, shape=input.shape)
    helper.append_op("scatter", inputs={"X": [input], "Ids": [index], "Updates": [updates]},
                     outputs={"Out": [out]}, attrs={"overwrite": bool(overwrite)})
    return out


def logical_not(x: Variable, out: Variable | None = None) -> Variable:
    """Element-wise ``not x`` of a bool ``x``."""
    _check_logical("logical_not", x, None, out)
    helper = LayerHelper("logical_not")
    if out is None:
        out = helper.create_tmp(dtype="bool", shape=x.shape, stop_gradient=True)
    helper.append_op("logical_not", inputs={"X": [x]}, outputs={"Out": [out]})
    return out


def zeros(shape: Sequence[int], dtype: Any, force_cpu: bool = False) -> Variable:
    """A tensor of zeros."""
    return fill_constant(shape, dtype, 0.0, force_cpu)


def ones(shape: Sequence[int], dtype: Any, force_cpu: bool = False) -> Variable:
    """A tensor of ones."""
    return fill_constant(shape, dtype, 1.0, force_cpu)


def create_tensor(dtype: str, name: str | None = None, persistable: bool = False) -> Variable:
    """An empty variable of ``dtype`` for an op to write into (``layers.create_tensor``)."""
    helper = LayerHelper("create_tensor", name)
    return helper.main_program.current_block().create_var(
        name=helper.name, dtype=dtype, persistable=persistable)


def transpose(x: Variable, perm: Sequence[int], name: str | None = None) -> Variable:
    """Permute the dims of ``x`` (``transpose2``)."""
    check_variable_and_dtype(x, "x", ("float16", "float32", "float64", "int32", "int64"),
                             "transpose")
    check_type(perm, "perm", list, "transpose")  # Fluid 1.8: a list, not a tuple
    _check_var(x, "x", "transpose")
    perm = [int(p) for p in perm]
    if x.shape is not None and sorted(perm) != list(builtins.range(len(x.shape))):
        raise ValueError(f"transpose: perm {perm} is not a permutation of the {len(x.shape)} "
                         f"dims of {x.name!r}")
    helper = LayerHelper("transpose2", name)
    shape = [x.shape[p] for p in perm] if x.shape is not None else None
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    xshape = helper.create_tmp(dtype=x.dtype, stop_gradient=True)
    helper.append_op("transpose2", inputs={"X": [x]}, outputs={"Out": [out], "XShape": [xshape]},
                     attrs={"axis": perm})
    return out


def one_hot(input: Variable, depth: int | Variable, allow_out_of_range: bool = False
            ) -> Variable:
    """Ids ``[..., 1]`` as float32 one-hot rows ``[..., depth]`` (``one_hot``); a ``depth``
    Variable of one element is read at run time (the op's ``depth_tensor``, as Fluid 1.8)."""
    check_variable_and_dtype(input, "input", ("int32", "int64"), "one_hot")
    check_type(depth, "depth", (int, Variable), "one_hot")
    _check_var(input, "input", "one_hot")
    by_tensor = isinstance(depth, Variable)
    if not by_tensor and (not isinstance(depth, int) or depth <= 0):
        raise ValueError(f"one_hot: depth must be a positive int or a Variable, got {depth!r}")
    shape = list(input.shape or ())
    if shape and shape[-1] != 1:
        raise ValueError(f"one_hot: the last dim of {input.name!r} must be 1, got {shape}")
    helper = LayerHelper("one_hot")
    out = helper.create_tmp(dtype="float32", shape=shape[:-1] + [-1 if by_tensor else depth],
                            stop_gradient=True)
    inputs = {"X": [input]}
    attrs: dict[str, Any] = {"allow_out_of_range": bool(allow_out_of_range)}
    if by_tensor:
        depth.stop_gradient = True
        inputs["depth_tensor"] = [depth]
    else:
        attrs["depth"] = depth
    helper.append_op("one_hot", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def label_smooth(label: Variable, prior_dist: Variable | None = None, epsilon: float = 0.1,
                 dtype: str = "float32", name: str | None = None) -> Variable:
    """``(1 - epsilon) * label + epsilon * prior`` (uniform ``1 / K`` without a prior)."""
    _check_var(label, "label", "label_smooth")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"label_smooth: epsilon must be in [0, 1], got {epsilon}")
    helper = LayerHelper("label_smooth", name)
    out = helper.create_tmp(dtype=dtype, shape=label.shape)
    inputs = {"X": [label]}
    if prior_dist is not None:
        inputs["PriorDist"] = [prior_dist]
    helper.append_op("label_smooth", inputs=inputs, outputs={"Out": [out]},
                     attrs={"epsilon": float(epsilon)})
    return out


def fill_constant_batch_size_like(input: Variable, shape: Sequence[int], dtype: str,
                                  value: float, input_dim_idx: int = 0,
                                  output_dim_idx: int = 0, force_cpu: bool = False) -> Variable:
    """``shape`` filled with ``value``, dim ``output_dim_idx`` set at run time to dim
    ``input_dim_idx`` of ``input`` (the batch size)."""
    _check_var(input, "input", "fill_constant_batch_size_like")
    helper = LayerHelper("fill_constant_batch_size_like")
    out_shape = [int(s) for s in shape]
    out_shape[output_dim_idx] = -1
    out = helper.create_tmp(dtype=convert_dtype(dtype), shape=out_shape, stop_gradient=True)
    helper.append_op("fill_constant_batch_size_like", inputs={"Input": [input]},
                     outputs={"Out": [out]},
                     attrs={"shape": [int(s) for s in shape], "dtype": convert_dtype(dtype),
                            "value": float(value), "input_dim_idx": int(input_dim_idx),
                            "output_dim_idx": int(output_dim_idx),
                            "force_cpu": bool(force_cpu)})
    return out


def _shape_op(op_type: str, x: Variable, shape: list[int] | None, attrs: dict,
              name: str | None = None, extra: dict | None = None) -> Variable:
    """An op X -> (Out, XShape) whose gradient reshapes back (squeeze2, unsqueeze2);
    ``extra`` holds more input slots (unsqueeze2's axes tensors)."""
    helper = LayerHelper(op_type, name)
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    xshape = helper.create_tmp(dtype=x.dtype, stop_gradient=True)
    helper.append_op(op_type, inputs={"X": [x], **(extra or {})},
                     outputs={"Out": [out], "XShape": [xshape]},
                     attrs=attrs)
    return out


def squeeze(input: Variable, axes: Sequence[int], name: str | None = None) -> Variable:
    """Drop the dims of size 1 listed in ``axes`` (``squeeze2``)."""
    from ..ops.shape_ops import squeeze_shape  # noqa: PLC0415

    _check_var(input, "input", "squeeze")
    axes = [int(a) for a in axes]
    shape = list(squeeze_shape(tuple(input.shape), axes)) if input.shape else None
    return _shape_op("squeeze2", input, shape, {"axes": axes}, name)


def unsqueeze(input: Variable, axes: int | Sequence[int | Variable] | Variable,
              name: str | None = None) -> Variable:
    """Insert dims of size 1 at ``axes``, one after the other (``unsqueeze2``).

    As in Fluid 1.8, ``axes`` is an int, a list or tuple of ints (the ``axes`` attr), a list
    mixing ints and ``[1]`` int Variables (input ``AxesTensorList``: the ints become int32
    constants) or one 1-D int32/int64 Variable (input ``AxesTensor``); with a Variable every
    dim of the output is unknown (-1) until the program runs.

    Parameters
    ----------
    input : Variable
    axes : int, list or tuple of int or Variable, or Variable
    name : str, optional

    Raises
    ------
    TypeError
        ``input`` not a Variable; ``axes`` of another type.
    """
    from ..ops.shape_ops import unsqueeze_shape  # noqa: PLC0415

    _check_var(input, "input", "unsqueeze")
    if isinstance(axes, bool) or not isinstance(axes, (int, list, tuple, Variable)):
        raise TypeError(f"unsqueeze: axes must be an int, a list, a tuple or a Variable, got "
                        f"{type(axes).__name__}")
    if isinstance(axes, int):
        axes = [axes]
    rank = None if input.shape is None else len(input.shape)
    if isinstance(axes, Variable):
        axes.stop_gradient = True
        n = axes.shape[0] if axes.shape is not None and len(axes.shape) == 1 else None
        shape = None if rank is None or n is None or n < 0 else [-1] * (rank + n)
        return _shape_op("unsqueeze2", input, shape, {}, name, {"AxesTensor": [axes]})
    if any(isinstance(a, Variable) for a in axes):
        shape = None if rank is None else [-1] * (rank + len(axes))
        return _shape_op("unsqueeze2", input, shape, {}, name,
                         {"AxesTensorList": _shape_tensor_list(list(axes))})
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"unsqueeze: each of axes must be an int or a Variable, got "
                            f"{type(a).__name__}")
    axes = [int(a) for a in axes]
    shape = list(unsqueeze_shape(tuple(input.shape), axes)) if input.shape else None
    return _shape_op("unsqueeze2", input, shape, {"axes": axes}, name)


def stack(x: Sequence[Variable] | Variable, axis: int = 0) -> Variable:
    """Stack same-shaped variables along a new dim ``axis``; the items of a tensor array
    (``x`` the array, or a list of that one array), as Fluid 1.8 does, through
    ``tensor_array_to_tensor(use_stack=True)``."""
    array = _the_array(x, "stack")
    if array is not None:
        return tensor_array_to_tensor(array, axis, use_stack=True)[0]
    xs = [x] if isinstance(x, Variable) else list(x)
    for v in xs:
        _check_var(v, "x", "stack")
    helper = LayerHelper("stack")
    shape = list(xs[0].shape) if xs[0].shape is not None else None
    if shape is not None:
        shape.insert(axis if axis >= 0 else len(shape) + 1 + axis, len(xs))
    out = helper.create_tmp(dtype=xs[0].dtype, shape=shape)
    helper.append_op("stack", inputs={"X": xs}, outputs={"Y": [out]}, attrs={"axis": int(axis)})
    return out


def gather(input: Variable, index: Variable, overwrite: bool = True) -> Variable:
    """Rows ``index`` (1-D ints) of ``input``."""
    _check_var(input, "input", "gather")
    _check_var(index, "index", "gather")
    helper = LayerHelper("gather")
    shape = None
    if input.shape is not None and index.shape is not None:
        shape = [index.shape[0], *input.shape[1:]]
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    helper.append_op("gather", inputs={"X": [input], "Index": [index]}, outputs={"Out": [out]},
                     attrs={"overwrite": bool(overwrite)})
    return out


def expand(x: Variable, expand_times: Sequence[int | Variable] | Variable,
           name: str | None = None) -> Variable:
    """Tile ``x`` ``expand_times`` along each dim (the ``expand`` op).

    As in Fluid 1.8, ``expand_times`` is a list of ints, a list mixing ints and ``[1]`` int32
    Variables (input ``expand_times_tensor``: the ints become int32 constants, and the attr
    holds -1 where a Variable goes) or one 1-D int32 Variable (input ``ExpandTimes``); a dim
    whose times is a Variable is unknown (-1) until the program runs.

    Parameters
    ----------
    x : Variable
        bool, float32, float64, int32 or int64; a bool ``x`` must have ``stop_gradient``
        False, as Fluid 1.8 requires.
    expand_times : list or tuple of int or Variable, or Variable
        One positive times per dim of ``x``.
    name : str, optional

    Raises
    ------
    TypeError
        ``x`` not a Variable or of another dtype; ``expand_times`` of another type.
    ValueError
        A bool ``x`` that stops gradients; a times below 1; not one times per dim.
    """
    _check_var(x, "x", "expand")
    dtype = convert_dtype(x.dtype)
    if dtype not in ("bool", "float32", "float64", "int32", "int64"):
        raise TypeError(f"expand: x must be bool, float32, float64, int32 or int64, got "
                        f"{dtype}")
    if not isinstance(expand_times, (list, tuple, Variable)):
        raise TypeError(f"expand: expand_times must be a list, a tuple or a Variable, got "
                        f"{type(expand_times).__name__}")
    if dtype == "bool" and x.stop_gradient:
        raise ValueError("expand: a bool x must have stop_gradient set to False (as Fluid 1.8 "
                         "requires)")
    inputs: dict[str, list[Variable]] = {"X": [x]}
    attrs: dict[str, Any] = {}
    rank = None if x.shape is None else len(x.shape)
    if isinstance(expand_times, Variable):
        expand_times.stop_gradient = True
        inputs["ExpandTimes"] = [expand_times]
        # Fluid's InferShape: no attr, every dim unknown until the op runs
        known: list[int | None] = [None] * (rank or 0)
    else:
        known = [None if isinstance(t, Variable) else int(t) for t in expand_times]
        if any(t is not None and t < 1 for t in known):
            raise ValueError(f"expand: each element of expand_times must be positive, got "
                             f"{[-1 if t is None else t for t in known]}")
        if rank is not None and len(known) != rank:
            raise ValueError(f"expand: expand_times has {len(known)} values, but {x.name!r} "
                             f"has rank {rank} (shape {list(x.shape)}); give one per dim")
        attrs["expand_times"] = [-1 if t is None else t for t in known]
        if None in known:
            inputs["expand_times_tensor"] = _shape_tensor_list(list(expand_times))
    helper = LayerHelper("expand", name)
    shape = None if x.shape is None else [
        d * t if t is not None and d >= 0 else -1 for d, t in zip(x.shape, known, strict=True)]
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    helper.append_op("expand", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def slice(input: Variable, axes: Sequence[int],  # noqa: A001
          starts: Sequence[int | Variable] | Variable,
          ends: Sequence[int | Variable] | Variable) -> Variable:
    """``input[starts:ends]`` along ``axes`` (clamped to each dim; negatives from its end).

    As in Fluid 1.8, ``starts`` and ``ends`` are each a list of ints, a list mixing ints and
    one-element int Variables (input ``StartsTensorList``/``EndsTensorList``: the ints become
    int32 constants) or one int Variable (``StartsTensor``/``EndsTensor``); a dim whose bound
    is a Variable is unknown (-1) until the program runs.
    """
    _check_var(input, "input", "slice")
    axes = [int(a) for a in axes]
    inputs: dict[str, list[Variable]] = {"Input": [input]}
    attrs: dict[str, Any] = {"axes": axes, "infer_flags": [1] * len(axes), "decrease_axis": []}
    bounds = {}
    for name, given in (("starts", starts), ("ends", ends)):
        attrs[name], bounds[name] = _slice_bounds_input(given, name, len(axes), inputs,
                                                        attrs["infer_flags"])
    helper = LayerHelper("slice")
    out = helper.create_tmp(dtype=input.dtype, shape=_slice_shape(
        input.shape, axes, bounds["starts"], bounds["ends"], []))
    helper.append_op("slice", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def _slice_bounds_input(given: Any, name: str, n_axes: int, inputs: dict, flags: list[int]
                        ) -> tuple[list[int], list[int | None]]:
    """The attribute of a slice's ``starts``/``ends`` and each bound as known now (None:
    a Variable); binds the Variables as the op's inputs and marks their axes' infer flags."""
    cap = name.capitalize()
    if isinstance(given, Variable):
        given.stop_gradient = True
        inputs[cap + "Tensor"] = [given]
        flags[:] = [-1] * n_axes
        return [-1] * n_axes, [None] * n_axes
    given = list(given)
    if len(given) != n_axes:
        raise ValueError(f"slice: {name} has {len(given)} values, axes has {n_axes}; they must "
                         "be as many")
    known = [None if isinstance(v, Variable) else int(v) for v in given]
    if None in known:
        inputs[cap + "TensorList"] = _shape_tensor_list(given)
        for i, k in enumerate(known):
            if k is None:
                flags[i] = -1
    return [-1 if k is None else k for k in known], known


def _slice_shape(shape: Sequence[int] | None, axes: list[int], starts: list[int | None],
                 ends: list[int | None], decrease: list[int]) -> list[int] | None:
    """The output shape a slice gives when the program is built (-1 unknown: a dim whose
    size is unknown, or whose bound is a Variable)."""
    from ..ops.shape_ops import slice_bounds  # noqa: PLC0415

    if shape is None:
        return None
    out = list(shape)
    for a, st, en in zip(axes, starts, ends, strict=True):
        if st is None or en is None or out[a] < 0:
            out[a] = -1
        else:
            sl = slice_bounds((out[a],), [0], [st], [en])[0]
            out[a] = sl.stop - sl.start
    return [d for i, d in enumerate(out) if i not in set(decrease)] or [1]


def argmax(x: Variable, axis: int = 0) -> Variable:
    """The int64 index of the first maximum along ``axis`` (``arg_max``)."""
    _check_var(x, "x", "argmax")
    helper = LayerHelper("arg_max")
    shape = None
    if x.shape is not None:
        shape = [d for i, d in enumerate(x.shape) if i != (axis % len(x.shape))] or [1]
    out = helper.create_tmp(dtype="int64", shape=shape, stop_gradient=True)
    helper.append_op("arg_max", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"axis": int(axis), "keepdims": False, "dtype": "int64"})
    return out


def create_parameter(shape: Sequence[int], dtype: str, name: str | None = None,
                     attr: Any = None, is_bias: bool = False,
                     default_initializer: Any = None) -> Variable:
    """A parameter of ``shape`` (Xavier, or zeros for a bias, unless an initializer is
    given), as Fluid 1.8's ``layers.create_parameter``."""
    from ..param_attr import ParamAttr  # noqa: PLC0415

    attr = ParamAttr._to_attr(attr)
    if attr is False:
        raise ValueError("create_parameter: attr=False creates no parameter")
    if name is not None:
        attr.name = name
    helper = LayerHelper("create_parameter")
    return helper.create_parameter(attr, [int(d) for d in shape], convert_dtype(dtype),
                                   is_bias=is_bias, default_initializer=default_initializer)


def split(input: Variable, num_or_sections: int | Sequence[int | Variable],
          dim: int | Variable = -1, name: str | None = None) -> list[Variable]:
    """Cut ``input`` along ``dim`` into ``num_or_sections`` equal parts, or parts of the
    given sizes (one may be -1), as Fluid 1.8's ``layers.split``.

    Sections may hold ``[1]`` int Variables (input ``SectionsTensorList``: the ints become
    int32 constants and the ``sections`` attr holds -1 where a Variable goes), and ``dim`` may
    be a ``[1]`` int Variable (input ``AxisTensor``); a size or axis from a Variable is
    unknown (-1) until the program runs.

    Parameters
    ----------
    input : Variable
    num_or_sections : int, or list or tuple of int or Variable
    dim : int or Variable
    name : str, optional

    Raises
    ------
    TypeError
        ``input``, ``num_or_sections`` or ``dim`` of another type.
    ValueError
        Parts that do not fit the dim.
    """
    _check_var(input, "input", "split")
    if isinstance(num_or_sections, bool) or not isinstance(num_or_sections, (int, list, tuple)):
        raise TypeError(f"split: num_or_sections must be an int, a list or a tuple, got "
                        f"{type(num_or_sections).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, (int, Variable)):
        raise TypeError(f"split: dim must be an int or a Variable, got {type(dim).__name__}")
    shape = list(input.shape) if input.shape is not None else None
    inputs: dict[str, list[Variable]] = {"X": [input]}
    if isinstance(dim, Variable):
        dim.stop_gradient = True
        inputs["AxisTensor"] = [dim]
        axis = None
        attrs: dict[str, Any] = {"axis": 0}
    else:
        axis = dim % len(shape) if shape else dim
        attrs = {"axis": axis}
    size = shape[axis] if shape and axis is not None else -1
    if isinstance(num_or_sections, int):
        if num_or_sections <= 1:
            raise ValueError(f"split: num_or_sections must be more than 1, got "
                             f"{num_or_sections}")
        if size > 0 and size % num_or_sections:
            raise ValueError(f"split: dim {dim} of {input.name!r} ({size}) does not split into "
                             f"{num_or_sections} equal parts")
        sizes = [size // num_or_sections if size > 0 else -1] * num_or_sections
        attrs.update(num=num_or_sections, sections=[])
    else:
        by_var = any(isinstance(n, Variable) for n in num_or_sections)
        sizes = [-1 if isinstance(n, Variable) else int(n) for n in num_or_sections]
        if size > 0 and len(sizes) > size:
            raise ValueError(f"split: {len(sizes)} sections are more than dim {dim} of "
                             f"{input.name!r} ({size})")
        if builtins.sum(not isinstance(n, Variable) and n == -1 for n in num_or_sections) > 1:
            raise ValueError(f"split: at most one section may be -1, got {sizes}")
        attrs.update(num=0, sections=list(sizes))
        if by_var:
            inputs["SectionsTensorList"] = _shape_tensor_list(list(num_or_sections))
        elif size > 0:
            if -1 in sizes:
                sizes[sizes.index(-1)] = size - builtins.sum(n for n in sizes if n != -1)
            if builtins.sum(sizes) != size or min(sizes) < 0:
                raise ValueError(f"split: sections {list(num_or_sections)} do not add up to "
                                 f"dim {dim} of {input.name!r} ({size})")
    helper = LayerHelper("split", name)
    outs = []
    for n in sizes:
        if shape is None:
            out_shape = None
        elif axis is None:  # Fluid's InferShape with an AxisTensor: every dim unknown
            out_shape = [-1] * len(shape)
        else:
            out_shape = shape[:axis] + [n] + shape[axis + 1:]
        outs.append(helper.create_tmp(dtype=input.dtype, shape=out_shape))
    helper.append_op("split", inputs=inputs, outputs={"Out": outs}, attrs=attrs)
    return outs


# -- creation and inspection layers of Fluid 1.8's layers/tensor.py ------------------------------

def argmin(x: Variable, axis: int = 0) -> Variable:
    """The int64 index of the first minimum along ``axis`` (op ``arg_min``), as Fluid 1.8's
    ``layers.argmin``."""
    _check_var(x, "x", "argmin")
    helper = LayerHelper("arg_min")
    shape = None
    if x.shape is not None:
        if not -len(x.shape) <= axis < len(x.shape):
            raise ValueError(f"argmin: axis must be in [{-len(x.shape)}, {len(x.shape)}) for "
                             f"{x.name!r} (shape {list(x.shape)}), got {axis}")
        shape = [d for i, d in enumerate(x.shape) if i != (axis % len(x.shape))] or [1]
    out = helper.create_tmp(dtype="int64", shape=shape, stop_gradient=True)
    helper.append_op("arg_min", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"axis": int(axis), "keepdims": False, "dtype": "int64"})
    return out


def argsort(input: Variable, axis: int = -1, descending: bool = False,
            name: str | None = None) -> tuple[Variable, Variable]:
    """``input`` sorted along ``axis`` and the int64 indices the sorted values came from
    (op ``argsort``), as Fluid 1.8's ``layers.argsort``.

    As in Fluid 1.8 both outputs are created with ``stop_gradient=True``; set
    ``out.stop_gradient = False`` to back-propagate through the sort (``argsort_grad``).
    """
    _check_var(input, "input", "argsort")
    if input.shape is not None and not -len(input.shape) <= axis < len(input.shape):
        raise ValueError(f"argsort: axis must be in [{-len(input.shape)}, {len(input.shape)}) "
                         f"for {input.name!r} (shape {list(input.shape)}), got {axis}")
    helper = LayerHelper("argsort", name)
    shape = list(input.shape) if input.shape is not None else None
    out = helper.create_tmp(dtype=input.dtype, shape=shape, stop_gradient=True)
    ids = helper.create_tmp(dtype="int64", shape=shape, stop_gradient=True)
    helper.append_op("argsort", inputs={"X": [input]}, outputs={"Out": [out], "Indices": [ids]},
                     attrs={"axis": int(axis), "descending": bool(descending)})
    return out, ids


def reverse(x: Variable, axis: int | Sequence[int]) -> Variable:
    """``x`` flipped along ``axis`` (an int or a list of ints; op ``reverse``), as Fluid 1.8's
    ``layers.reverse`` on a tensor. A LoDTensorArray input is not implemented."""
    _check_var(x, "x", "reverse")
    if x.type == VarType.LOD_TENSOR_ARRAY:
        raise NotImplementedError("reverse(x=<LoDTensorArray>) is not implemented in dask_fluid")
    if isinstance(axis, bool) or not isinstance(axis, (int, list, tuple)):
        raise TypeError(f"reverse: axis must be an int, list or tuple, got "
                        f"{type(axis).__name__}")
    axes = [int(axis)] if isinstance(axis, int) else [int(a) for a in axis]
    if x.shape is not None:
        for a in axes:
            if not -len(x.shape) <= a < len(x.shape):
                raise ValueError(f"reverse: axis {a} is out of range for {x.name!r} "
                                 f"(shape {list(x.shape)})")
    helper = LayerHelper("reverse")
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op("reverse", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"axis": axes})
    return out


def zeros_like(x: Variable, out: Variable | None = None) -> Variable:
    """Zeros of ``x``'s shape and dtype (op ``fill_zeros_like``), as Fluid 1.8's
    ``layers.zeros_like``; the result stops gradients."""
    _check_var(x, "x", "zeros_like")
    helper = LayerHelper("zeros_like")
    if out is None:
        out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    else:
        _check_var(out, "out", "zeros_like")
    helper.append_op("fill_zeros_like", inputs={"X": [x]}, outputs={"Out": [out]})
    out.stop_gradient = True
    return out


def ones_like(x: Variable, out: Variable | None = None) -> Variable:
    """Ones of ``x``'s shape and dtype (op ``fill_any_like`` with value 1), as Fluid 1.8's
    ``layers.ones_like``."""
    _check_var(x, "x", "ones_like")
    helper = LayerHelper("ones_like")
    if out is None:
        out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    else:
        _check_var(out, "out", "ones_like")
    helper.append_op("fill_any_like", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"value": 1.0})
    return out


def _bound_tensor(v: Any, dtype: str, arg: str, layer: str) -> Variable:
    """A one-element tensor of ``dtype``: a number as a constant, a Variable cast when its
    dtype differs (Fluid 1.8's range)."""
    if isinstance(v, Variable):
        return v if v.dtype == dtype else cast(v, dtype)
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{layer}: {arg} must be a number or a Variable, got "
                        f"{type(v).__name__}")
    return fill_constant([1], dtype, v)


def range(start: float | Variable, end: float | Variable, step: float | Variable,  # noqa: A001
          dtype: Any) -> Variable:
    """``[start, start + step, ...)`` up to (excluding) ``end`` (op ``range``), as Fluid 1.8's
    ``layers.range``: each bound is a number or a one-element Variable (cast to ``dtype``)."""
    dtype = convert_dtype(dtype)
    if dtype not in ("float32", "float64", "int32", "int64"):
        raise TypeError(f"range: dtype must be float32, float64, int32 or int64, got {dtype}")
    size = -1
    if not any(isinstance(v, Variable) for v in (start, end, step)):
        if step == 0:
            raise ValueError("range: step must not be 0")
        size = builtins.max(0, int(np.ceil((end - start) / step)))
    tensors = [_bound_tensor(v, dtype, a, "range")
               for v, a in ((start, "start"), (end, "end"), (step, "step"))]
    helper = LayerHelper("range")
    out = helper.create_tmp(dtype=dtype, shape=[size], stop_gradient=True)
    helper.append_op("range", inputs={"Start": [tensors[0]], "End": [tensors[1]],
                                      "Step": [tensors[2]]}, outputs={"Out": [out]})
    out.stop_gradient = True
    return out



def linspace(start: float | Variable, stop: float | Variable, num: int | Variable,
             dtype: Any) -> Variable:
    """``num`` evenly spaced values from ``start`` to ``stop``, both included (op
    ``linspace``), as Fluid 1.8's ``layers.linspace``; the output has the dtype of the
    ``Start`` tensor (``dtype`` for a number)."""
    dtype = convert_dtype(dtype)
    if dtype not in ("float32", "float64"):
        raise TypeError(f"linspace: dtype must be float32 or float64, got {dtype}")
    if isinstance(num, Variable):
        num_t = num
    elif isinstance(num, bool) or not isinstance(num, (int, np.integer)):
        raise TypeError(f"linspace: num must be an int or a Variable, got {type(num).__name__}")
    elif num <= 0:
        raise ValueError(f"linspace: num must be positive, got {num}")
    else:
        num_t = fill_constant([1], "int32", int(num))
    start_t = start if isinstance(start, Variable) else _bound_tensor(start, dtype, "start",
                                                                      "linspace")
    stop_t = stop if isinstance(stop, Variable) else _bound_tensor(stop, dtype, "stop",
                                                                   "linspace")
    helper = LayerHelper("linspace")
    out = helper.create_tmp(dtype=start_t.dtype,
                            shape=[int(num) if not isinstance(num, Variable) else -1])
    helper.append_op("linspace", inputs={"Start": [start_t], "Stop": [stop_t], "Num": [num_t]},
                     outputs={"Out": [out]})
    return out


def diag(diagonal: Variable | np.ndarray) -> Variable:
    """The square matrix with the 1-D ``diagonal`` on its diagonal (op ``diag``), as Fluid
    1.8's ``layers.diag``; a numpy array is first made a constant with ``assign``."""
    if isinstance(diagonal, np.ndarray):
        diagonal = assign(diagonal)
    _check_var(diagonal, "diagonal", "diag")
    if diagonal.shape is not None and len(diagonal.shape) != 1:
        raise ValueError(f"diag: diagonal must be 1-D, got shape {list(diagonal.shape)}")
    helper = LayerHelper("diag")
    n = diagonal.shape[0] if diagonal.shape is not None else -1
    out = helper.create_tmp(dtype=diagonal.dtype, shape=[n, n], stop_gradient=True)
    helper.append_op("diag", inputs={"Diagonal": [diagonal]}, outputs={"Out": [out]})
    out.stop_gradient = True
    return out


def eye(num_rows: int, num_columns: int | None = None, batch_shape: list[int] | None = None,
        dtype: Any = "float32") -> Variable:
    """A ``num_rows`` x ``num_columns`` identity (op ``eye``), repeated over ``batch_shape``
    with ``reshape`` and ``expand`` as Fluid 1.8's ``layers.eye`` does."""
    if isinstance(num_rows, bool) or not isinstance(num_rows, int) or num_rows < 0:
        raise TypeError(f"eye: num_rows should be a non-negative int, got {num_rows!r}")
    if num_columns is None:
        num_columns = num_rows
    elif isinstance(num_columns, bool) or not isinstance(num_columns, int) or num_columns < 0:
        raise TypeError(f"eye: num_columns should be a non-negative int, got {num_columns!r}")
    dtype = convert_dtype(dtype)
    helper = LayerHelper("eye")
    out = helper.create_tmp(dtype=dtype, shape=[num_rows, num_columns], stop_gradient=True)
    helper.append_op("eye", outputs={"Out": [out]},
                     attrs={"num_rows": num_rows, "num_columns": num_columns, "dtype": dtype})
    if batch_shape is not None:
        if not isinstance(batch_shape, list):
            raise TypeError(f"eye: batch_shape should be a list, got "
                            f"{type(batch_shape).__name__}")
        if any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 for b in batch_shape):
            raise TypeError(f"eye: batch_shape should be a list of positive ints, got "
                            f"{batch_shape}")
        out = reshape(out, [1] * len(batch_shape) + [num_rows, num_columns])
        out = expand(out, batch_shape + [1, 1])
    out.stop_gradient = True
    return out


def _flag_layer(x: Variable, op: str, layer: str) -> Variable:
    _check_var(x, "x", layer)
    helper = LayerHelper(op)
    out = helper.create_tmp(dtype="bool", shape=[1], stop_gradient=True)
    helper.append_op(op, inputs={"X": [x]}, outputs={"Out": [out]})
    return out


def has_inf(x: Variable) -> Variable:
    """A one-element bool: whether ``x`` holds an infinity (op ``isinf``), as Fluid 1.8's
    ``layers.has_inf``."""
    return _flag_layer(x, "isinf", "has_inf")


def has_nan(x: Variable) -> Variable:
    """A one-element bool: whether ``x`` holds a NaN (op ``isnan``), as Fluid 1.8's
    ``layers.has_nan``."""
    return _flag_layer(x, "isnan", "has_nan")


def isfinite(x: Variable) -> Variable:
    """A one-element bool: whether every value of ``x`` is finite (op ``isfinite``), as Fluid
    1.8's ``layers.isfinite``."""
    check_variable_and_dtype(x, "x", ("float32", "float64", "int32", "int64"), "isfinite")
    return _flag_layer(x, "isfinite", "isfinite")


def lod_append(x: Variable, level: Sequence[int] | Variable) -> Variable:
    """``x`` with one more LoD level below its own: the offsets ``level`` (a list) or a
    Variable's LoD or values (op ``lod_reset`` with ``append=True``), as Fluid 1.8's
    ``layers.lod_append``."""
    check_variable_and_dtype(x, "x", ("float32", "float64", "int32", "int64"), "lod_append")
    _check_var(x, "x", "lod_append")
    helper = LayerHelper("lod_append")
    out = helper.create_tmp(dtype=x.dtype, shape=list(x.shape) if x.shape else None)
    inputs: dict[str, list[Variable]] = {"X": [x]}
    attrs: dict[str, Any] = {"append": True}
    if isinstance(level, Variable):
        inputs["Y"] = [level]
    elif isinstance(level, (list, tuple)):
        if any(isinstance(v, (list, tuple)) for v in level):
            raise ValueError(f"lod_append: level must be one level of offsets (a flat list), "
                             f"got {level}")
        attrs["target_lod"] = [int(v) for v in level]
    else:
        raise ValueError(f"lod_append: level must be a list, tuple or Variable, got "
                         f"{type(level).__name__}")
    helper.append_op("lod_reset", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def size(input: Variable) -> Variable:
    """The number of elements of ``input``: an int64 tensor of shape [1] (op ``size``), as
    Fluid 1.8's ``layers.size``. It has no gradient; ``input``'s LoD does not matter (its
    rows are counted as they are).

    Raises
    ------
    TypeError
        ``input`` is not a Variable of bool, float16, float32, float64, int32 or int64.
    """
    _check_var(input, "input", "size")
    if input.dtype not in ("bool", "float16", "float32", "float64", "int32", "int64"):
        raise TypeError(f"size: input must be bool, float16, float32, float64, int32 or "
                        f"int64, got {input.dtype}")
    helper = LayerHelper("size")
    out = helper.create_tmp(dtype="int64", shape=[1], stop_gradient=True)
    helper.append_op("size", inputs={"Input": [input]}, outputs={"Out": [out]})
    return out
