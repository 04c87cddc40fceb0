"""Sequence (LoD) layers of ``fluid.layers`` (Fluid 1.8's ``layers/sequence_lod.py``
signatures and defaults; the kernels are in :mod:`dask_fluid.ops.sequence_ops`)."""

from __future__ import annotations

from ..framework import Variable
from ..layer_helper import LayerHelper
from .tensor import _check_var

__all__ = ["sequence_first_step", "sequence_last_step", "sequence_pool"]

_POOL_TYPES = ("average", "sum", "sqrt", "max", "last", "first")


def sequence_pool(input: Variable, pool_type: str, is_test: bool = False,
                  pad_value: float = 0.0) -> Variable:
    """Pool every sequence of ``input``'s last LoD level into one row.

    Parameters
    ----------
    input : Variable
        A LoD tensor (``lod_level`` 1 or 2), ``[N, ...]``.
    pool_type : str
        ``"average"``, ``"sum"``, ``"sqrt"``, ``"max"``, ``"last"`` or ``"first"``.
    is_test : bool
    pad_value : float
        The output row of an empty sequence.

    Returns
    -------
    Variable
        ``[num_sequences, ...]``; with a 2-level input, a LoD tensor of the top level.
    """
    _check_var(input, "input", "sequence_pool")
    if str(pool_type).lower() not in _POOL_TYPES:
        raise ValueError(f"sequence_pool: pool_type must be one of {_POOL_TYPES}, got "
                         f"{pool_type!r}")
    helper = LayerHelper("sequence_pool")
    shape = list(input.shape) if input.shape is not None else None
    if shape:
        shape[0] = -1
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    max_index = helper.create_tmp(dtype=input.dtype, shape=shape, stop_gradient=True)
    helper.append_op("sequence_pool", inputs={"X": [input]},
                     outputs={"Out": [out], "MaxIndex": [max_index]},
                     attrs={"pooltype": str(pool_type).upper(), "is_test": bool(is_test),
                            "pad_value": float(pad_value)})
    return out


def sequence_first_step(input: Variable) -> Variable:
    """The first row of every sequence (``sequence_pool(input, "first")``)."""
    return sequence_pool(input=input, pool_type="first")


def sequence_last_step(input: Variable) -> Variable:
    """The last row of every sequence (``sequence_pool(input, "last")``)."""
    return sequence_pool(input=input, pool_type="last")
