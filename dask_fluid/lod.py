"""LoD (level of detail): Fluid's variable-length sequences in one tensor.

A LoD tensor is a dense array whose first dimension concatenates sequences, plus its LoD: a
list of levels, each a list of offsets. ``[[0, 2, 5]]`` says rows 0-1 are sequence 0 and rows
2-4 sequence 1; with two levels, ``[[0, 2, 3], [0, 2, 5, 9]]`` groups the 3 sequences of the
second level into 2 (e.g. paragraphs of sentences), the last level indexing rows. Fluid's
users also write LoDs as *recursive sequence lengths*: ``[[2, 3]]`` for ``[[0, 2, 5]]``.

In dask_fluid a scope holds a LoD tensor as its array (``scope.vars``) and its LoD
(``scope.lods``, tuples of offsets); the executor moves LoD through the ops (see
:func:`dask_fluid.executor.Executor.run_block`). :class:`LoDTensor` is what scripts feed and
what ``Executor.run(..., return_numpy=False)`` returns for a fetched LoD variable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .places import CPUPlace, CUDAPinnedPlace, CUDAPlace, pinned_copy

__all__ = ["LoD", "LoDTensor", "LoDTensorArray", "check_lod", "create_lod_tensor",
           "create_random_int_lodtensor", "lengths_to_offsets", "offsets_to_lengths"]

#: a LoD as the executor stores it: a tuple of levels, each a tuple of int offsets
LoD = tuple[tuple[int, ...], ...]


def lengths_to_offsets(lengths: Sequence[Sequence[int]]) -> LoD:
    """Recursive sequence lengths (``[[2, 3]]``) as offsets (``((0, 2, 5),)``)."""
    out = []
    for level in lengths:
        offsets = [0]
        for n in level:
            if int(n) < 0:
                raise ValueError(f"sequence lengths must be >= 0, got {list(level)}")
            offsets.append(offsets[-1] + int(n))
        out.append(tuple(offsets))
    return tuple(out)


def offsets_to_lengths(lod: Sequence[Sequence[int]]) -> list[list[int]]:
    """Offsets (``[[0, 2, 5]]``) as recursive sequence lengths (``[[2, 3]]``)."""
    return [[int(b) - int(a) for a, b in zip(level[:-1], level[1:], strict=True)]
            for level in lod]


def check_lod(lod: Sequence[Sequence[int]], rows: int, what: str = "the tensor") -> LoD:
    """``lod`` as a :data:`LoD` after Fluid's validity rules, for a tensor of ``rows`` rows.

    Every level starts at 0 and never decreases; each level ends at the number of sequences of
    the next one, and the last at ``rows``.

    Raises
    ------
    ValueError
        Naming the level that breaks a rule.
    """
    levels = tuple(tuple(int(v) for v in level) for level in lod)
    for i, level in enumerate(levels):
        if len(level) < 1 or level[0] != 0:
            raise ValueError(f"LoD of {what}: level {i} must start at offset 0, got "
                             f"{list(level)}")
        if any(b < a for a, b in zip(level[:-1], level[1:], strict=True)):
            raise ValueError(f"LoD of {what}: level {i} offsets must not decrease, got "
                             f"{list(level)}")
        end = rows if i == len(levels) - 1 else len(levels[i + 1]) - 1
        if level[-1] != end:
            whose = (f"the first dimension ({rows} rows)" if i == len(levels) - 1
                     else f"the {end} sequences of level {i + 1}")
            raise ValueError(f"LoD of {what}: level {i} ends at {level[-1]}, but must end at "
                             f"{whose}; lod={[list(v) for v in levels]}")
    return levels


class LoDTensor:
    """A tensor and its LoD (Fluid's ``core.LoDTensor``).

    ``set(array, place)`` stores a copy on the place (numpy on CPUPlace, CuPy on CUDAPlace);
    ``np.array(tensor)`` reads it back; ``set_lod`` / ``set_recursive_sequence_lengths`` give it
    sequences.

    Parameters
    ----------
    recursive_sequence_lengths : sequence of sequences of int, optional
        The sequence lengths to start with, before any data (Fluid 1.8's second constructor,
        ``core.LoDTensor([[2, 3]])``); their structure is checked as ``set_lod`` checks it.
    """

    def __init__(self, recursive_sequence_lengths: Sequence[Sequence[int]] | None = None
                 ) -> None:
        self._array: Any = None
        self._where: Any = None  # the place it was set on (_place())
        self._lod: LoD = ()
        if recursive_sequence_lengths is not None:
            self.set_recursive_sequence_lengths(recursive_sequence_lengths)

    @classmethod
    def _of(cls, array: Any, lod: LoD, place: Any = None) -> LoDTensor:
        """Wrap ``array`` (not copied) with ``lod``: what a fetch returns."""
        t = cls()
        t._array, t._lod, t._where = array, tuple(lod), place
        return t

    def set(self, array: Any, place: Any) -> None:
        """Store a copy of ``array`` on ``place`` (``CPUPlace``, ``CUDAPlace`` or
        ``CUDAPinnedPlace``)."""
        if isinstance(place, CUDAPlace):
            import cupy

            with cupy.cuda.Device(place.device_id):
                self._array = cupy.array(array)
        elif isinstance(place, CPUPlace):
            self._array = np.array(array.get() if hasattr(array, "get") else array)
        elif isinstance(place, CUDAPinnedPlace):
            self._array = pinned_copy(array)
        else:
            raise TypeError(f"LoDTensor.set: place must be a CPUPlace, CUDAPlace or "
                            f"CUDAPinnedPlace, got {type(place).__name__}")
        self._where = place

    def _require(self) -> Any:
        if self._array is None:
            raise ValueError("LoDTensor holds no data yet: call set(array, place) first")
        return self._array

    def shape(self) -> list[int]:
        """The tensor's shape, as a list (Fluid's method, not an attribute)."""
        return list(self._require().shape)

    def _dtype(self) -> np.dtype:
        return np.dtype(self._require().dtype)

    def _place(self) -> Any:
        """The place the tensor was set on (Fluid's ``LoDTensor._place()``).

        Raises
        ------
        ValueError
            The tensor holds no data yet (as Fluid's ``Tensor::place``).
        """
        array = self._require()
        if self._where is not None:
            return self._where
        device = getattr(array, "device", None)  # a wrapped fetch: where its array lives
        return CUDAPlace(device.id) if hasattr(device, "id") else CPUPlace()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        # np.array(tensor) is a snapshot, as in Fluid (numpy asks for copy=True): the executor
        # updates parameters in place, so a view would change under the caller at the next run.
        # np.asarray(tensor) (copy=None) may share the memory, like Fluid's buffer protocol.
        arr = self._require()
        if hasattr(arr, "get"):  # a CuPy array: the host copy is already the caller's own
            return np.asarray(arr.get(), dtype=dtype)
        if copy:
            return np.array(arr, dtype=dtype, copy=True)
        if copy is False and dtype is not None and np.dtype(dtype) != arr.dtype:
            raise ValueError(f"LoDTensor of {arr.dtype} cannot become {np.dtype(dtype)} without "
                             "a copy")
        return np.asarray(arr, dtype=dtype)

    # -- LoD ------------------------------------------------------------------------------------
    def lod(self) -> list[list[int]]:
        """The LoD as offsets, e.g. ``[[0, 2, 5]]`` (``[]`` without sequences)."""
        return [list(level) for level in self._lod]

    def set_lod(self, lod: Sequence[Sequence[int]]) -> None:
        """Set the LoD as offsets; checked against the rows when the tensor holds data, and
        for its structure alone when it holds none yet (Fluid checks the LoD either way)."""
        levels = tuple(tuple(int(v) for v in level) for level in lod)
        if self._array is not None:
            levels = check_lod(levels, int(self._array.shape[0]))
        elif levels:
            levels = check_lod(levels, levels[-1][-1] if levels[-1] else 0)
        self._lod = levels

    def recursive_sequence_lengths(self) -> list[list[int]]:
        """The LoD as sequence lengths, e.g. ``[[2, 3]]``."""
        return offsets_to_lengths(self._lod)

    def set_recursive_sequence_lengths(self, lengths: Sequence[Sequence[int]]) -> None:
        """Set the LoD from sequence lengths (``[[2, 3]]`` is ``[[0, 2, 5]]``)."""
        self.set_lod(lengths_to_offsets(lengths))

    def has_valid_recursive_sequence_lengths(self) -> bool:
        """Whether the LoD fits the tensor (Fluid's check)."""
        try:
            check_lod(self._lod, int(self._require().shape[0]))
        except ValueError:
            return False
        return True

    def __repr__(self) -> str:
        if self._array is None:
            return "LoDTensor(empty)"
        lod = f", lod={self.lod()}" if self._lod else ""
        return (f"LoDTensor(shape={self.shape()}, dtype={self._dtype()}{lod}, "
                f"place={self._where!r})")


class LoDTensorArray(list):
    """A list of :class:`LoDTensor` (Fluid's ``core.LoDTensorArray``): the value of a tensor
    array variable (``layers.create_array``), written and read by index inside loops."""

    def append(self, tensor: LoDTensor) -> None:
        """Add ``tensor`` at the end (Fluid's ``LoDTensorArray.append``)."""
        if not isinstance(tensor, LoDTensor):
            raise TypeError(f"a LoDTensorArray holds LoDTensors, got {type(tensor).__name__}")
        super().append(tensor)


def create_lod_tensor(data: Any, recursive_seq_lens: Sequence[Sequence[int]],
                      place: Any) -> LoDTensor:
    """A LoDTensor from ``data`` and sequence lengths (Fluid's ``fluid.create_lod_tensor``).

    Parameters
    ----------
    data : numpy.ndarray, list of sequences, or LoDTensor
        A list is a list of sequences of ids (``[[1, 2], [3, 4, 5]]``), made an int64 column
        ``[N, 1]``; its lengths must equal ``recursive_seq_lens``' last level.
    recursive_seq_lens : list of list of int
    place : CPUPlace or CUDAPlace

    Returns
    -------
    LoDTensor
    """
    if isinstance(data, LoDTensor):
        return create_lod_tensor(np.array(data), recursive_seq_lens, place)
    if isinstance(data, list):
        lengths = [len(seq) for seq in data]
        if lengths != [int(n) for n in recursive_seq_lens[-1]]:
            raise ValueError(f"create_lod_tensor: the sequences have lengths {lengths}, but "
                             f"recursive_seq_lens ends with {list(recursive_seq_lens[-1])}")
        flat = np.concatenate([np.asarray(seq, dtype=np.int64).reshape(-1) for seq in data]) \
            if data else np.zeros(0, np.int64)
        data = flat.reshape(-1, 1)
    tensor = LoDTensor()
    tensor.set(np.asarray(data), place)
    tensor.set_recursive_sequence_lengths(recursive_seq_lens)
    return tensor


def create_random_int_lodtensor(recursive_seq_lens: Sequence[Sequence[int]],
                                base_shape: Sequence[int], place: Any, low: int,
                                high: int) -> LoDTensor:
    """A LoDTensor of random int64 in ``[low, high]`` of shape ``[sum of the last level's
    lengths] + base_shape`` (Fluid's ``fluid.create_random_int_lodtensor``)."""
    rows = sum(int(n) for n in recursive_seq_lens[-1])
    data = np.random.randint(low, high + 1, [rows, *base_shape]).astype(np.int64)
    return create_lod_tensor(data, recursive_seq_lens, place)


#: the type of a variable that holds a :class:`LoDRankTable` (Fluid's
#: ``VarDesc.VarType.LOD_RANK_TABLE``; dask_fluid.framework.VarType has no member for it)
LOD_RANK_TABLE = "lod_rank_table"


class LoDRankTable:
    """The sequences of one LoD level sorted by length, longest first (Fluid's
    ``core.LodRankTable``, what ``layers.lod_rank_table`` computes).

    ``items()`` are ``(index, length)`` pairs: the sequence's position in the batch and its
    length, in the order of a stable sort by length, descending (ties keep batch order, as
    Fluid's ``std::stable_sort``). ``coarse_lod()`` holds the LoD levels above the ranked one,
    which ``array_to_lod_tensor`` puts back.

    ``np.array(table)`` is an int64 ``[len(items), 2]`` array of the pairs (what a fetch of
    the table gives); the table itself lives on the host.
    """

    def __init__(self, items: Sequence[tuple[int, int]] = (),
                 coarse_lod: Sequence[Sequence[int]] = ()) -> None:
        self._items = tuple((int(i), int(n)) for i, n in items)
        self._coarse_lod: LoD = tuple(tuple(int(v) for v in level) for level in coarse_lod)

    @classmethod
    def _of_lod(cls, lod: LoD, level: int) -> LoDRankTable:
        """Fluid's ``LoDRankTable::Reset(lod, level)``."""
        if not 0 <= level < len(lod):
            raise ValueError(f"lod_rank_table: level {level} is out of range for an input with "
                             f"{len(lod)} LoD levels; expected in [0, {len(lod)})")
        offsets = lod[level]
        items = [(i, offsets[i + 1] - offsets[i]) for i in range(len(offsets) - 1)]
        items.sort(key=lambda item: -item[1])  # list.sort is stable, as std::stable_sort
        return cls(items, lod[:level])

    def items(self) -> list[tuple[int, int]]:
        """The ``(index, length)`` pairs, longest sequence first."""
        return list(self._items)

    def level(self) -> int:
        """The ranked LoD level (the number of coarse levels above it)."""
        return len(self._coarse_lod)

    def coarse_lod(self) -> list[list[int]]:
        """The LoD levels above the ranked one, as offsets."""
        return [list(level) for level in self._coarse_lod]

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self._items), 2)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype("int64")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(np.array(self._items, dtype=np.int64).reshape(-1, 2), dtype=dtype)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, LoDRankTable) and self._items == other._items
                and self._coarse_lod == other._coarse_lod)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        coarse = f", coarse_lod={self.coarse_lod()}" if self._coarse_lod else ""
        return f"LoDRankTable(items={self.items()}{coarse})"
