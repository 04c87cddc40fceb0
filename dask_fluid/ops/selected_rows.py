"""SelectedRows, Fluid's sparse row tensor, and the small helpers every kernel module shares.

A :class:`SelectedRows` is a dense ``value`` block holding only some rows of a conceptual
``[height, ...]`` tensor; ``rows[i]`` is the row index of ``value[i]``. Sparse gradients
(``lookup_table_grad`` with ``is_sparse``) and their splits for the pservers travel in this form.
Rows may repeat: they add up (:meth:`SelectedRows.merged` sums them).

The helpers below (array module detection through SelectedRows, scatter-add on numpy and cupy,
dtype parsing, the array module for a place, and the grad-op maker used by the kernel modules)
live here because this module is the one every kernel module may import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .registry import GRAD, array_module


@dataclass
class SelectedRows:
    """Rows ``rows`` (int64, 1-D) of a ``[height, *value.shape[1:]]`` tensor, values ``value``.

    Parameters
    ----------
    rows : array of int64, shape [k]
        Row index of each value row; duplicates mean "add up".
    value : array, shape [k, ...]
        The values of those rows (numpy or cupy).
    height : int
        Number of rows of the dense tensor this represents.
    """

    rows: Any
    value: Any
    height: int

    def __post_init__(self) -> None:
        if len(self.rows) != len(self.value):
            raise ValueError(
                f"SelectedRows needs one value row per row index: got {len(self.rows)} rows "
                f"and value of shape {tuple(self.value.shape)}"
            )
        self.height = int(self.height)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.height, *self.value.shape[1:])

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def xp(self):
        """numpy or cupy, following ``value``."""
        return array_module(self.value)

    def to_dense(self) -> Any:
        """The dense ``[height, ...]`` tensor (duplicate rows add up)."""
        xp = self.xp
        out = xp.zeros(self.shape, dtype=self.value.dtype)
        scatter_add(xp, out, self.rows, self.value)
        return out

    def merged(self) -> SelectedRows:
        """Unique sorted rows with summed values (row order never depends on input order)."""
        xp = self.xp
        uniq, inverse = xp.unique(self.rows, return_inverse=True)
        if len(uniq) == len(self.rows) and bool((uniq == self.rows).all()):
            return self
        value = xp.zeros((len(uniq), *self.value.shape[1:]), dtype=self.value.dtype)
        scatter_add(xp, value, inverse.reshape(-1), self.value)
        return SelectedRows(uniq.astype(np.int64), value, self.height)

    def __repr__(self) -> str:
        return (f"SelectedRows(height={self.height}, rows={len(self.rows)}, "
                f"value_shape={tuple(self.value.shape)}, dtype={self.value.dtype})")


# ---------------------------------------------------------------------------------------------
# helpers shared by the kernel modules


def xp_of(*arrays: Any):
    """numpy or cupy from arrays that may be SelectedRows or None."""
    return array_module(*(a.value if isinstance(a, SelectedRows) else a for a in arrays))


#: numpy's ``add.at`` takes ~0.5 µs a row; below this many rows, or rows narrower than
#: :data:`_LAYER_MIN_WIDTH` elements, or an index repeated more than :data:`_LAYER_MAX_REPEAT`
#: times, it is the faster way and :func:`scatter_add` uses it
_LAYER_MIN_ROWS = 64
_LAYER_MIN_WIDTH = 8
_LAYER_MAX_REPEAT = 16


def scatter_add(xp: Any, a: Any, idx: Any, v: Any) -> None:
    """``a[idx] += v`` with repeated indices adding up, in place, on numpy or cupy.

    On numpy, for many wide rows (an embedding's gradient), the rows are added in layers: the
    first occurrence of every index, then the second, ..., each layer one fancy-indexed add
    without repeats. Each element of ``a`` receives the same additions in the same order as
    with ``np.add.at`` (the input order), so the result is bit-identical, 5-8 times faster.
    """
    if xp is not np:  # cupy's ufunc.at (CuPy 12+; cupyx.scatter_add is deprecated in 14)
        xp.add.at(a, idx, v)
        return
    idx = np.asarray(idx)
    v = np.asarray(v)
    if (idx.ndim != 1 or idx.size < _LAYER_MIN_ROWS or idx.dtype.kind not in "iu"
            or v.shape != (idx.size, *a.shape[1:]) or v.size < _LAYER_MIN_WIDTH * idx.size
            or idx.min() < 0):  # a negative index names the same row as its positive twin
        np.add.at(a, idx, v)
        return
    order = np.argsort(idx, kind="stable")  # stable: equal indices keep their input order
    ordered = idx[order]
    first = np.empty(ordered.size, bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    repeats = np.diff(starts, append=ordered.size)
    if int(repeats.max()) > _LAYER_MAX_REPEAT:
        np.add.at(a, idx, v)
        return
    for k in range(int(repeats.max())):
        at = starts[repeats > k] + k  # the k-th occurrence of every index that has one
        a[ordered[at]] += v[order[at]]


# Fluid's VarType enum values, for programs that carry dtypes as ints.
_FLUID_DTYPE_CODES = {0: "bool", 1: "int16", 2: "int32", 3: "int64", 4: "float16",
                      5: "float32", 6: "float64", 20: "uint8", 21: "int8"}


def to_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype from a dtype string, numpy dtype or Fluid's integer dtype code."""
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        try:
            dtype = _FLUID_DTYPE_CODES[int(dtype)]
        except KeyError:
            raise ValueError(f"unknown Fluid dtype code {dtype}; known: "
                             f"{_FLUID_DTYPE_CODES}") from None
    return np.dtype(dtype)


def place_module(attrs: dict):
    """The array module for ops without inputs: cupy when the executor set ``_place='gpu'``."""
    if attrs.get("_place") == "gpu":
        import cupy

        return cupy
    return np


def to_place(host_array: np.ndarray, attrs: dict) -> Any:
    """Move a host array to the op's place (see :func:`place_module`)."""
    xp = place_module(attrs)
    return host_array if xp is np else xp.asarray(host_array)


def grad_maker(fwd: Sequence[str], out_grads: Sequence[str] = ("Out",),
               in_grads: Sequence[str] = ("X",), type: str | None = None):
    """A grad maker for ``<type>_grad`` reading only the listed forward slots.

    ``fwd`` names forward input or output slots the grad op reads, ``out_grads`` the forward
    output slots whose gradients it reads (``Out`` → ``Out@GRAD``) and ``in_grads`` the forward
    input slots whose gradients it writes. Slots the forward op does not bind are left out.
    """

    def make(op: Any) -> list[dict]:
        inputs: dict[str, list[str]] = {}
        for slot in fwd:
            names = op.inputs.get(slot) or op.outputs.get(slot)
            if names:
                inputs[slot] = list(names)
        for slot in out_grads:
            if op.outputs.get(slot):
                inputs[slot + GRAD] = [n + GRAD for n in op.outputs[slot]]
        outputs = {slot + GRAD: [n + GRAD for n in op.inputs[slot]]
                   for slot in in_grads if op.inputs.get(slot)}
        attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
        return [{"type": type or op.type + "_grad", "inputs": inputs, "outputs": outputs,
                 "attrs": attrs}]

    return make


def grad_slots(fwd: Sequence[str], out_grads: Sequence[str] = ("Out",),
               in_grads: Sequence[str] = ("X",)) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (inputs, outputs) signature of the grad op :func:`grad_maker` builds."""
    return (tuple(fwd) + tuple(s + GRAD for s in out_grads),
            tuple(s + GRAD for s in in_grads))
