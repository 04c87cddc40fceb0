"""Nested structures of variables (Fluid 1.8's ``fluid.layers.utils``): lists, tuples,
namedtuples and dicts (by sorted key) of leaves, as the RNN cells and decoders take their
states."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["assert_same_structure", "flatten", "is_sequence", "map_structure",
           "pack_sequence_as"]


def is_sequence(x: Any) -> bool:
    """Whether ``x`` is a structure (list, tuple or dict) rather than a leaf."""
    return isinstance(x, (list, tuple, dict))


def flatten(nest: Any) -> list:
    """The leaves of ``nest`` in order (a dict's by sorted key)."""
    if isinstance(nest, dict):
        return [y for k in sorted(nest) for y in flatten(nest[k])]
    if isinstance(nest, (list, tuple)):
        return [y for e in nest for y in flatten(e)]
    return [nest]


def pack_sequence_as(structure: Any, flat_sequence: Sequence[Any]) -> Any:
    """``flat_sequence``'s items in the shape of ``structure`` (inverse of :func:`flatten`)."""
    it = iter(flat_sequence)

    def pack(s: Any) -> Any:
        if isinstance(s, dict):
            return {k: pack(s[k]) for k in sorted(s)}
        if isinstance(s, tuple) and hasattr(s, "_fields"):  # a namedtuple: fields by position
            return type(s)(*[pack(e) for e in s])
        if isinstance(s, (list, tuple)):
            return type(s)(pack(e) for e in s)
        return next(it)

    return pack(structure)


def map_structure(func: Callable, *structure: Any) -> Any:
    """``func`` of the leaves at each position of ``structure`` (alike structures), in the
    shape of the first.

    Raises
    ------
    ValueError
        The structures have different numbers of leaves.
    """
    flats = [flatten(s) for s in structure]
    for s, f in zip(structure[1:], flats[1:], strict=True):
        if len(f) != len(flats[0]):
            raise ValueError(f"structures do not match: {structure[0]!r} and {s!r}")
    return pack_sequence_as(structure[0], [func(*args) for args in zip(*flats, strict=True)])


def assert_same_structure(nest1: Any, nest2: Any, check_types: bool = True) -> None:
    """Check that ``nest1`` and ``nest2`` nest alike (Fluid 1.8's checks and messages).

    Raises
    ------
    ValueError
        Different numbers of leaves, a leaf against a structure, or dicts with other keys.
    TypeError
        ``check_types`` and two structures at one place of different types.
    """
    n1 = len(flatten(nest1)) if is_sequence(nest1) else 1
    n2 = len(flatten(nest2)) if is_sequence(nest2) else 1
    if n1 != n2:
        raise ValueError(f"The two structures don't have the same number of elements.\n\n"
                         f"First structure ({n1} elements): {nest1}\n\nSecond structure "
                         f"({n2} elements): {nest2}")
    _assert_alike(nest1, nest2, check_types)


def _assert_alike(nest1: Any, nest2: Any, check_types: bool) -> None:
    if is_sequence(nest1) != is_sequence(nest2):
        raise ValueError(f"The two structures don't have the same nested structure.\n\n"
                         f"First structure: {nest1}\n\nSecond structure: {nest2}.")
    if not is_sequence(nest1):
        return
    if check_types:
        if type(nest1) is not type(nest2):
            raise TypeError(f"The two structures don't have the same sequence type. First "
                            f"structure has type {type(nest1)}, while second structure has "
                            f"type {type(nest2)}.")
        if isinstance(nest1, dict) and set(nest1) != set(nest2):
            raise ValueError(f"The two dictionaries don't have the same set of keys. First "
                             f"structure has keys {set(nest1)}, while second structure has "
                             f"keys {set(nest2)}.")
    items1 = [nest1[k] for k in sorted(nest1)] if isinstance(nest1, dict) else list(nest1)
    items2 = [nest2[k] for k in sorted(nest2)] if isinstance(nest2, dict) else list(nest2)
    for a, b in zip(items1, items2, strict=False):
        _assert_alike(a, b, check_types)
