"""Creation and inspection kernels of Fluid 1.8's layers/tensor.py: ``arg_min``, ``argsort``,
``reverse``, ``fill_any_like``, ``isinf``/``isnan``/``isfinite``, ``range``, ``linspace``,
``diag`` and ``eye``.

Semantics follow Paddle 1.8's ops of those names: ``argsort`` returns the sorted values and
their int64 indices along ``axis`` (ties keep their input order here, a stable sort) and its
gradient scatters the output gradient back by those indices; ``reverse`` flips every listed
axis and its gradient is ``reverse`` of the output gradient (Fluid's grad op is ``reverse``
itself); ``isinf``, ``isnan`` and ``isfinite`` reduce the whole tensor to one bool (shape
``[1]``): "any inf", "any nan", "all finite"; ``range`` and ``linspace`` read their bounds from
one-element tensors.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .registry import GRAD, array_module, register, to_host
from .selected_rows import place_module, to_dtype

__all__: list[str] = []


# -- arg_min -------------------------------------------------------------------------------------

def _arg_index_dtype(dtype: Any) -> np.dtype:
    """arg_min/arg_max's index dtype: Fluid 1.8's ``AddAttr<int>("dtype")`` defaults to -1,
    which its ArgMinMaxKernel reads as int64; else a VarType code or a dtype name."""
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool) and dtype < 0:
        return np.dtype(np.int64)
    return to_dtype(dtype)


@register("arg_min", ("X",), ("Out",), {"axis": -1, "keepdims": False, "dtype": "int64"})
def arg_min(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the index of the first minimum along ``axis``."""
    x = ins["X"][0]
    axis = int(attrs.get("axis", -1))
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"arg_min: axis must be in [{-x.ndim}, {x.ndim}), got {axis}")
    out = x.argmin(axis=axis)
    if attrs.get("keepdims"):
        out = array_module(x).expand_dims(out, axis)
    return {"Out": [out.astype(_arg_index_dtype(attrs.get("dtype", "int64")))]}


# -- argsort -------------------------------------------------------------------------------------

def _sort_axis(x: Any, attrs: dict) -> int:
    axis = int(attrs.get("axis", -1))
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"argsort: axis must be in [{-x.ndim}, {x.ndim}), got {axis}")
    return axis % x.ndim


def _argsort_grad_maker(op: Any) -> list[dict]:
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": "argsort_grad",
             "inputs": {"X": list(op.inputs["X"]), "Indices": list(op.outputs["Indices"]),
                        "Out" + GRAD: [n + GRAD for n in op.outputs["Out"]]},
             "outputs": {"X" + GRAD: [n + GRAD for n in op.inputs["X"]]}, "attrs": attrs}]


@register("argsort", ("X",), ("Out", "Indices"), {"axis": -1, "descending": False},
          grad=_argsort_grad_maker)
def argsort(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X sorted along ``axis`` (descending when ``descending``), Indices = where each
    sorted value came from (int64)."""
    x = ins["X"][0]
    xp = array_module(x)
    axis = _sort_axis(x, attrs)
    kw = {"kind": "stable"} if xp is np else {}  # CuPy's argsort is always stable
    if attrs.get("descending"):
        # a stable descending order: the flipped axis sorted ascending, read backwards, so
        # equal values keep their input order
        n = x.shape[axis]
        idx = n - 1 - xp.flip(xp.argsort(xp.flip(x, axis), axis=axis, **kw), axis)
    else:
        idx = xp.argsort(x, axis=axis, **kw)
    vals = xp.take_along_axis(x, idx, axis)
    return {"Out": [vals], "Indices": [idx.astype(np.int64)]}


@register("argsort_grad", ("X", "Indices", "Out" + GRAD), ("X" + GRAD,),
          {"axis": -1, "descending": False})
def argsort_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX[..., Indices[..., j], ...] = dOut[..., j, ...] along ``axis``."""
    x, idx = ins["X"][0], ins["Indices"][0]
    xp = array_module(x)
    axis = _sort_axis(x, attrs)
    d = ins["Out" + GRAD][0]
    if d is None:
        return {"X" + GRAD: [xp.zeros_like(x)]}
    # dX[Indices[j]] = dOut[j]: read dOut through the inverse permutation
    inverse = xp.argsort(idx, axis=axis)
    return {"X" + GRAD: [xp.take_along_axis(d, inverse, axis)]}


# -- reverse -------------------------------------------------------------------------------------

def _reverse_grad_maker(op: Any) -> list[dict]:
    # Fluid's ReverseGradMaker: the gradient is the op itself on Out@GRAD
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": "reverse", "inputs": {"X": [n + GRAD for n in op.outputs["Out"]]},
             "outputs": {"Out": [n + GRAD for n in op.inputs["X"]]}, "attrs": attrs}]


@register("reverse", ("X",), ("Out",), {"axis": []}, grad=_reverse_grad_maker)
def reverse(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X flipped along every dim in ``axis``."""
    x = ins["X"][0]
    axes = [int(a) for a in attrs.get("axis", [])]
    if not axes:
        raise ValueError("reverse: axis must list at least one dim, got []")
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise ValueError(f"reverse: axis {a} is out of range for a {x.ndim}-D X")
    return {"Out": [array_module(x).flip(x, tuple(a % x.ndim for a in axes)).copy()]}


# -- fill_any_like -------------------------------------------------------------------------------

def _check_fill_value(value: Any, dtype: np.dtype, op: str) -> None:
    """Fluid 1.8's FillAnyLikeKernel checks: ``lowest() <= value <= max()`` of the output
    dtype, and value not NaN (numpy would wrap an out-of-range value, or cast NaN to an
    arbitrary integer).

    Raises
    ------
    ValueError
        NaN, or a value outside the dtype's range (bool: [0, 1]).
    """
    if dtype.kind not in "biuf":
        return
    if isinstance(value, np.generic):
        # a Python number: numpy would compare a float32 with int32's max in float32
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        raise ValueError(f"{op}: the filled value must not be NaN")
    if dtype.kind == "b":
        lo, hi = 0, 1
    elif dtype.kind == "f":
        lo, hi = float(np.finfo(dtype).min), float(np.finfo(dtype).max)
    else:
        # exact integer bounds: Fluid compares in float, which lets int32's 2**31 through to
        # an undefined cast
        lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    if not lo <= value <= hi:
        raise ValueError(f"{op}: value {value!r} is out of the range of the output dtype "
                         f"{dtype}, [{lo}, {hi}]; pick a value within it or another dtype")


@register("fill_any_like", ("X",), ("Out",), {"value": 0.0, "dtype": -1})
def fill_any_like(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = ``value`` shaped like X, of X's dtype (or ``dtype`` when it is not -1).

    Raises
    ------
    ValueError
        ``value`` NaN or outside the output dtype's range (Fluid 1.8's check).
    """
    x = ins["X"][0]
    dtype = attrs.get("dtype", -1)
    dtype = x.dtype if dtype in (-1, None) else to_dtype(dtype)
    value = attrs.get("value", 0.0)
    _check_fill_value(value, np.dtype(dtype), "fill_any_like")
    return {"Out": [array_module(x).full(x.shape, value, dtype=dtype)]}


# -- isinf, isnan, isfinite ----------------------------------------------------------------------

def _reduce_flag(name: str, test: str, reduce: str):
    @register(name, ("X",), ("Out",))
    def kernel(ins: dict, attrs: dict, outs: tuple) -> dict:
        x = ins["X"][0]
        xp = array_module(x)
        flags = getattr(xp, test)(x)
        return {"Out": [getattr(flags, reduce)().reshape(1).astype(bool)]}

    kernel.__doc__ = f"Out = [{reduce}({test}(X))]: one bool for the whole tensor."
    return kernel


isinf = _reduce_flag("isinf", "isinf", "any")
isnan = _reduce_flag("isnan", "isnan", "any")
isfinite = _reduce_flag("isfinite", "isfinite", "all")


# -- range, linspace -----------------------------------------------------------------------------

def _scalar(ins: dict, slot: str, op: str) -> Any:
    t = ins[slot][0]
    if t.size != 1:
        raise ValueError(f"{op}: {slot} must hold one value, got shape {list(t.shape)}")
    return to_host(t).reshape(-1)[0]


@register("range", ("Start", "End", "Step"), ("Out",))
def range_(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = start, start + step, ... up to (excluding) end, of Start's dtype."""
    t = ins["Start"][0]
    start, end, step = (_scalar(ins, s, "range") for s in ("Start", "End", "Step"))
    if step == 0:
        raise ValueError("range: Step must not be 0")
    if (start < end and step < 0) or (start > end and step > 0):
        raise ValueError(f"range: Step ({step}) must move Start ({start}) towards End ({end})")
    if t.dtype.kind in "iu":
        size = (abs(int(end) - int(start)) + abs(int(step)) - 1) // abs(int(step))
    else:
        size = math.ceil(abs((float(end) - float(start)) / float(step)))
    xp = array_module(t)
    out = (xp.arange(size, dtype=np.float64 if t.dtype.kind == "f" else np.int64) * step
           + start).astype(t.dtype)
    return {"Out": [out]}


@register("linspace", ("Start", "Stop", "Num"), ("Out",))
def linspace(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = Num evenly spaced values from Start to Stop (both included), of Start's dtype:
    start + i (stop - start) / (num - 1); [start] when Num is 1."""
    t = ins["Start"][0]
    start, stop = _scalar(ins, "Start", "linspace"), _scalar(ins, "Stop", "linspace")
    num = int(_scalar(ins, "Num", "linspace"))
    if num <= 0:
        raise ValueError(f"linspace: Num must be positive, got {num}")
    xp = array_module(t)
    if num == 1:
        return {"Out": [xp.full((1,), start, dtype=t.dtype)]}
    step = (stop - start) / (num - 1) if t.dtype.kind == "f" else \
        (int(stop) - int(start)) // (num - 1)
    return {"Out": [(start + xp.arange(num) * step).astype(t.dtype)]}


# -- diag, eye -----------------------------------------------------------------------------------

@register("diag", ("Diagonal",), ("Out",))
def diag(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = the square matrix with Diagonal (1-D) on its diagonal, zeros elsewhere."""
    d = ins["Diagonal"][0]
    if d.ndim != 1:
        raise ValueError(f"diag: Diagonal must be 1-D, got shape {list(d.shape)}")
    return {"Out": [array_module(d).diag(d)]}


@register("eye", (), ("Out",), {"num_rows": 0, "num_columns": -1, "dtype": "float32"})
def eye(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = a ``num_rows`` x ``num_columns`` matrix with ones on its diagonal (square when
    ``num_columns`` is -1)."""
    rows = int(attrs.get("num_rows", 0))
    cols = int(attrs.get("num_columns", -1))
    cols = rows if cols == -1 else cols
    if rows < 0 or cols < 0:
        raise ValueError(f"eye: num_rows and num_columns must be non-negative, got "
                         f"{rows} and {cols}")
    xp = place_module(attrs)
    return {"Out": [xp.eye(rows, cols, dtype=to_dtype(attrs.get("dtype", "float32")))]}
