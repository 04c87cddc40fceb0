"""Cutting parameters and gradients into blocks (Fluid's ``slice_variable``).

A :class:`VarBlock` is a dataclass, not Fluid's ``"name:idx:size"`` string: the runtime and the
pserver startup need the block's row offset and shape, which the string would make them
recompute.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class VarBlock:
    """One contiguous run of dim-0 rows of a variable.

    Attributes
    ----------
    varname : str
        The unsliced variable (a parameter or its gradient).
    index : int
        Block number inside ``varname`` (``P.block{index}``).
    offset : int
        First element of the block in the flattened variable.
    size : int
        Number of elements.
    shape : tuple of int
        Block shape: ``(size // width,) + full_shape[1:]``.
    full_shape : tuple of int
        Shape of the unsliced variable.
    """

    varname: str
    index: int
    offset: int
    size: int
    shape: tuple[int, ...]
    full_shape: tuple[int, ...]

    @property
    def width(self) -> int:
        """Elements per dim-0 row (1 for a rank-1 variable)."""
        return math.prod(self.full_shape[1:])

    @property
    def row_offset(self) -> int:
        """First dim-0 row of the block in the unsliced variable."""
        return self.offset // self.width

    @property
    def rows(self) -> int:
        """Number of dim-0 rows."""
        return self.shape[0]

    @property
    def is_whole(self) -> bool:
        """True when the block is the entire variable (it was not split)."""
        return self.shape == self.full_shape


def split_sizes(shape: Sequence[int], slice_count: int, min_block_size: int) -> list[int]:
    """Element counts of the blocks of a variable of ``shape`` (Fluid's rule, §2).

    At most ``slice_count`` blocks, each of at least ``min_block_size`` elements (except the
    last), rounded up to whole dim-0 rows.
    """
    numel = math.prod(shape)
    if numel <= 0:
        raise ValueError(f"cannot slice a variable of shape {list(shape)}: it must have a fully "
                         "known positive shape")
    max_count = numel // min_block_size or 1
    count = min(slice_count, max_count)
    block_size = math.ceil(numel / count)
    if len(shape) >= 2:
        width = math.prod(shape[1:])
        block_size = math.ceil(block_size / width) * width
    count = math.ceil(numel / block_size)
    return [min(block_size, numel - i * block_size) for i in range(count)]


def slice_variable(var_list: Iterable, slice_count: int, min_block_size: int) -> list[VarBlock]:
    """Cut each variable into blocks.

    Parameters
    ----------
    var_list : iterable of Variable or (name, shape) pairs
    slice_count : int
        Number of pservers when ``slice_var_up`` is on, else 1.
    min_block_size : int
        Minimum number of elements of a block.

    Returns
    -------
    list of VarBlock
        The blocks of every variable, in order.
    """
    blocks: list[VarBlock] = []
    for var in var_list:
        name, shape = (var.name, var.shape) if hasattr(var, "name") else var
        shape = tuple(int(d) for d in shape)
        width = math.prod(shape[1:])
        offset = 0
        for i, size in enumerate(split_sizes(shape, slice_count, min_block_size)):
            blocks.append(VarBlock(name, i, offset, size, (size // width,) + shape[1:], shape))
            offset += size
    return blocks
