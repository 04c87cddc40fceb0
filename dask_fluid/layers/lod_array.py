"""Layers over LoD rank tables and LoD-tensor arrays (Fluid 1.8's ``layers.control_flow``):
``lod_rank_table``, ``max_sequence_len``, ``lod_tensor_to_array``, ``array_to_lod_tensor``,
``reorder_lod_tensor_by_rank`` and ``shrink_memory`` -- the pieces of Fluid's DynamicRNN
written by hand with ``While``. Ops and kernels in :mod:`dask_fluid.ops.lod_array_ops`."""

from __future__ import annotations

from typing import Any

from .. import unique_name
from ..framework import Variable, VarType
from ..layer_helper import LayerHelper
from ..lod import LOD_RANK_TABLE

__all__ = ["array_to_lod_tensor", "lod_rank_table", "lod_tensor_to_array",
           "max_sequence_len", "reorder_lod_tensor_by_rank", "shrink_memory"]


def _one_var(value: Any, arg: str, layer: str) -> Variable:
    """``value`` as one Variable: Fluid's layers also take a list holding one."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise TypeError(f"{layer}: {arg} must be a Variable or a list of one Variable, got "
                            f"a list of {len(value)}")
        value = value[0]
    if not isinstance(value, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(value).__name__}")
    return value


def _rank_table(value: Any, arg: str, layer: str) -> Variable:
    table = _one_var(value, arg, layer)
    if table.type != LOD_RANK_TABLE:
        raise TypeError(f"{layer}: {arg} must be a LoD rank table (layers.lod_rank_table), "
                        f"got {table.name!r} of type {table.type}")
    return table


def _tensor(value: Any, arg: str, layer: str) -> Variable:
    x = _one_var(value, arg, layer)
    if x.type != VarType.LOD_TENSOR:
        raise TypeError(f"{layer}: {arg} must be a LoD tensor, got {x.name!r} of type {x.type}")
    return x


def lod_rank_table(x: Variable | list, level: int = 0) -> Variable:
    """The sequences of LoD level ``level`` of ``x`` ranked by length (Fluid 1.8's
    ``layers.lod_rank_table``, op ``lod_rank_table``).

    Parameters
    ----------
    x : Variable
        A LoD tensor (or a list holding one, as Fluid takes).
    level : int
        The LoD level whose sequences are ranked.

    Returns
    -------
    Variable
        Of type ``LOD_RANK_TABLE``: at run time a :class:`~dask_fluid.lod.LoDRankTable`,
        ``(index, length)`` pairs stable-sorted by length, longest first, and the LoD levels
        above ``level``. Fetched, it is an int64 ``[n, 2]`` array of the pairs.

    Raises
    ------
    TypeError
        ``x`` is not a tensor Variable, or ``level`` not an int.
    ValueError
        ``level`` is negative.
    """
    x = _tensor(x, "x", "lod_rank_table")
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"lod_rank_table: level must be an int, got {type(level).__name__}")
    if level < 0:
        raise ValueError(f"lod_rank_table: level must be >= 0, got {level}")
    helper = LayerHelper("lod_rank_table")
    # a host value, never differentiated: stop_gradient keeps it out of While's gradients
    table = helper.main_program.current_block().create_var(
        name=unique_name.generate("lod_rank_table"), type=LOD_RANK_TABLE, dtype="int64",
        stop_gradient=True)
    helper.append_op("lod_rank_table", inputs={"X": [x]}, outputs={"Out": [table]},
                     attrs={"level": level})
    return table


def max_sequence_len(rank_table: Variable) -> Variable:
    """The length of the longest sequence of ``rank_table`` (Fluid 1.8's
    ``layers.max_sequence_len``, op ``max_sequence_len``): an int64 ``[1]`` tensor, 0 for a
    table without sequences.

    Raises
    ------
    TypeError
        ``rank_table`` is not a ``lod_rank_table`` Variable.
    """
    table = _rank_table(rank_table, "rank_table", "max_sequence_len")
    helper = LayerHelper("max_seqence_len")  # sic: Fluid's layer name
    out = helper.create_tmp(dtype="int64", shape=[1], stop_gradient=True)
    helper.append_op("max_sequence_len", inputs={"RankTable": [table]},
                     outputs={"Out": [out]})
    return out


def lod_tensor_to_array(x: Variable, table: Variable) -> Variable:
    """``x``'s sequences split into time steps (Fluid 1.8's ``layers.lod_tensor_to_array``,
    op ``lod_tensor_to_array``).

    Item ``t`` of the result holds step ``t`` of every sequence (of the table's level) at
    least ``t + 1`` long, in the table's order (longest first); it keeps the LoD levels of
    ``x`` below the table's level for its rows.

    Parameters
    ----------
    x : Variable
        A LoD tensor with at least ``table``'s level + 1 LoD levels.
    table : Variable
        A ``lod_rank_table`` of ``x`` (or of a tensor with the same sequences).

    Returns
    -------
    Variable
        A tensor array of ``x``'s dtype.

    Raises
    ------
    TypeError
        ``x`` is not a tensor Variable or ``table`` not a rank table.
    """
    x = _tensor(x, "x", "lod_tensor_to_array")
    table = _rank_table(table, "table", "lod_tensor_to_array")
    helper = LayerHelper("lod_tensor_to_array")
    array = helper.main_program.current_block().create_var(
        name=unique_name.generate("lod_tensor_to_array"), type=VarType.LOD_TENSOR_ARRAY,
        dtype=x.dtype)
    helper.append_op("lod_tensor_to_array", inputs={"X": [x], "RankTable": [table]},
                     outputs={"Out": [array]})
    array.shape = x.shape
    return array


def array_to_lod_tensor(x: Variable, table: Variable) -> Variable:
    """The inverse of :func:`lod_tensor_to_array` (Fluid 1.8's ``layers.array_to_lod_tensor``,
    op ``array_to_lod_tensor``): the steps of ``x`` gathered back into sequences in batch
    order, with the LoD the table's coarse levels, the ranked level and the items' LoD give.

    Parameters
    ----------
    x : Variable
        A tensor array whose item ``t`` holds step ``t`` of the sequences longer than ``t``,
        in ``table``'s order.
    table : Variable
        The ``lod_rank_table`` the steps follow.

    Raises
    ------
    TypeError
        ``x`` is not a tensor array Variable or ``table`` not a rank table.
    """
    x = _one_var(x, "x", "array_to_lod_tensor")
    if x.type != VarType.LOD_TENSOR_ARRAY:
        raise TypeError(f"array_to_lod_tensor: x must be a tensor array, got {x.name!r} of "
                        f"type {x.type}")
    table = _rank_table(table, "table", "array_to_lod_tensor")
    helper = LayerHelper("array_to_lod_tensor")
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op("array_to_lod_tensor", inputs={"X": [x], "RankTable": [table]},
                     outputs={"Out": [out]})
    return out


def reorder_lod_tensor_by_rank(x: Variable, rank_table: Variable) -> Variable:
    """The top-level sequences of ``x`` (its rows, when it has no LoD) in ``rank_table``'s
    order (Fluid 1.8's ``layers.reorder_lod_tensor_by_rank``, op
    ``reorder_lod_tensor_by_rank``); the result's LoD follows the new order.

    Raises
    ------
    TypeError
        ``x`` is not a tensor Variable, or ``rank_table`` not of type ``LOD_RANK_TABLE``.
    """
    x = _tensor(x, "x", "reorder_lod_tensor_by_rank")
    table = _rank_table(rank_table, "rank_table", "reorder_lod_tensor_by_rank")
    helper = LayerHelper("reorder_lod_tensor_by_rank")
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op("reorder_lod_tensor_by_rank", inputs={"X": [x], "RankTable": [table]},
                     outputs={"Out": [out]})
    return out


def shrink_memory(x: Variable, i: Variable, table: Variable) -> Variable:
    """The first rows of ``x`` (its first top-level sequences, with LoD): as many as
    ``table`` has sequences longer than ``i`` (Fluid 1.8's ``layers.shrink_memory``, op
    ``shrink_rnn_memory``) -- an RNN memory cut to the batch still running at step ``i``
    when the batch is in the table's order.

    Parameters
    ----------
    x : Variable
        The memory, its rows in ``table``'s order.
    i : Variable
        The step: an integer tensor of one element.
    table : Variable
        A ``lod_rank_table``.

    Raises
    ------
    TypeError
        ``x`` is not a tensor Variable, ``i`` not an integer Variable or ``table`` not a
        rank table.
    """
    x = _tensor(x, "x", "shrink_memory")
    i = _one_var(i, "i", "shrink_memory")
    if i.dtype not in ("int64", "int32"):
        raise TypeError(f"shrink_memory: i must be an integer tensor, got {i.dtype}")
    table = _rank_table(table, "table", "shrink_memory")
    helper = LayerHelper("shrink_memory")
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    helper.append_op("shrink_rnn_memory",
                     inputs={"X": [x], "I": [i], "RankTable": [table]},
                     outputs={"Out": [out]})
    return out
