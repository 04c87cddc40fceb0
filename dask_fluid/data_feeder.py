"""fluid.DataFeeder: mini-batches of samples (tuples) into the ``feed`` dict of Executor.run.

A reader yields a mini-batch as a list of samples, one tuple per sample whose fields follow the
data layers of ``feed_list``. :meth:`DataFeeder.feed` stacks each field into one array with its
variable's dtype and shape, as Fluid 1.8 does: when the stacked array has fewer dimensions than
the variable (a scalar label for ``shape=[-1, 1]``) it is reshaped; otherwise every fixed
dimension must match. A variable-length field (a data layer with ``lod_level >= 1``) holds a
sequence per sample (a sequence of sequences for ``lod_level=2``): its items are stacked the
same way and the sequence lengths become the LoD of its tensor.

As in Fluid 1.8 (``DataToLoDTensorConverter.done``), every field becomes a
:class:`~dask_fluid.lod.LoDTensor` (``.shape()``, ``.lod()``, ``np.array(t)``), with an empty LoD
for ``lod_level=0``. The tensor wraps the stacked array without copying it; the executor moves
it to its place when it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .compiler import _cpu_num, _cuda_device_count
from .executor import CPUPlace, CUDAPlace
from .framework import Program, Variable, default_main_program
from .lod import LoDTensor, lengths_to_offsets

__all__ = ["DataFeeder"]


class DataFeeder:
    """Convert mini-batches of samples into Executor feeds (Fluid's ``fluid.DataFeeder``).

    Parameters
    ----------
    feed_list : list of Variable or str
        The data layers, in the order of the fields of each sample; names are looked up in
        ``program``'s global block.
    place : CPUPlace or CUDAPlace
        Where the program runs (the executor moves the arrays there).
    program : Program, optional
        Defaults to :func:`default_main_program`.

    Attributes
    ----------
    feed_names, feed_dtypes, feed_shapes, feed_lod_level : list
        One entry per data layer.

    Raises
    ------
    TypeError
        When ``feed_list`` holds something other than Variables and names.

    Examples
    --------
    >>> feeder = fluid.DataFeeder(feed_list=[image, label], place=fluid.CPUPlace())
    >>> exe.run(feed=feeder.feed([(img0, 3), (img1, 7)]), fetch_list=[loss])
    """

    def __init__(self, feed_list: Sequence[Variable | str], place: CPUPlace | CUDAPlace,
                 program: Program | None = None) -> None:
        program = program if program is not None else default_main_program()
        self.feed_dtypes: list[str] = []
        self.feed_names: list[str] = []
        self.feed_shapes: list[tuple[int, ...] | None] = []
        self.feed_lod_level: list[int] = []
        for var in feed_list:
            if isinstance(var, str):
                var = program.global_block().var(var)
            if not isinstance(var, Variable):
                raise TypeError("Feed list should contain a list of variable or variable "
                                f"names, got {type(var).__name__}")
            self.feed_dtypes.append(var.dtype)
            self.feed_names.append(var.name)
            self.feed_shapes.append(var.shape)
            self.feed_lod_level.append(var.lod_level)
        self.place = place

    def feed(self, iterable: Iterable[Sequence[Any]]) -> dict[str, LoDTensor]:
        """One mini-batch as ``{name: LoDTensor}`` (Fluid's ``DataFeeder.feed``).

        Parameters
        ----------
        iterable : iterable of tuple
            The samples; sample ``i`` has one field per data layer of ``feed_list``.

        Returns
        -------
        dict of str to LoDTensor
            Each tensor has its variable's dtype and shape (the batch dimension is the number of
            samples, or of items for a LoD field), and the field's sequence lengths as its LoD
            when ``lod_level >= 1`` (an empty LoD otherwise).

        Raises
        ------
        ValueError
            When a sample has the wrong number of fields, or a field does not fit its
            variable's shape.
        """
        columns: list[list[Any]] = [[] for _ in self.feed_names]
        for sample in iterable:
            if len(sample) != len(columns):
                raise ValueError(f"The number of fields in data ({len(sample)}) does not match "
                                 f"len(feed_list) ({len(columns)})")
            for column, value in zip(columns, sample, strict=True):
                column.append(value)
        out: dict[str, LoDTensor] = {}
        for name, column, dtype, shape, level in zip(self.feed_names, columns, self.feed_dtypes,
                                                     self.feed_shapes, self.feed_lod_level,
                                                     strict=True):
            if level == 0:
                out[name] = LoDTensor._of(self._stack(name, column, dtype, shape), (),
                                          self.place)
                continue
            items: list[Any] = []
            lengths: list[list[int]] = [[] for _ in range(level)]
            for value in column:
                _flatten(name, value, level, items, lengths)
            arr = self._stack(name, items, dtype, shape)
            out[name] = LoDTensor._of(arr, lengths_to_offsets(lengths), self.place)
        return out

    @staticmethod
    def _stack(name: str, column: list[Any], dtype: str,
               shape: tuple[int, ...] | None) -> np.ndarray:
        try:
            arr = np.array(column, dtype=dtype)
        except ValueError as err:
            raise ValueError(
                f"DataFeeder: the samples of {name!r} do not form a regular {dtype} array "
                f"({err}); a variable-length field needs a data layer with lod_level >= 1"
            ) from err
        # Fluid checks nothing when more than one dimension is free
        if shape is None or sum(d < 0 for d in shape) > 1:
            return arr
        if arr.ndim != len(shape):
            try:
                return arr.reshape(shape)
            except ValueError:
                raise ValueError(f"Reshape error. What is defined in data layer {name!r} is "
                                 f"{list(shape)}, but receive {list(arr.shape)}") from None
        for want, got in zip(shape, arr.shape, strict=True):
            if want >= 0 and want != got:
                raise ValueError(f"Shape not match. What is defined in data layer {name!r} is "
                                 f"{list(shape)}, but receive {list(arr.shape)}")
        return arr

    def feed_parallel(self, iterable: Sequence[Iterable[Sequence[Any]]],
                      num_places: int | None = None) -> Iterator[dict[str, LoDTensor]]:
        """One feed per place from one mini-batch per place (Fluid's ``feed_parallel``).

        Parameters
        ----------
        iterable : sequence of mini-batches
            As many mini-batches as places.
        num_places : int, optional
            Default: ``CPU_NUM`` on CPU, the number of GPUs on CUDA.

        Yields
        ------
        dict of str to LoDTensor
            :meth:`feed` of each mini-batch.
        """
        count = self._get_number_of_places_(num_places)
        if len(iterable) != count:
            raise ValueError("feed_parallel takes multiple mini-batches. Each mini-batch will "
                             "be feed on each device. The number of devices and number of "
                             f"mini-batches must be same: {count} places, {len(iterable)} "
                             "mini-batches.")
        for batch in iterable:
            yield self.feed(batch)

    def _get_number_of_places_(self, num_places: int | None = None) -> int:
        if num_places is not None:
            return int(num_places)
        if isinstance(self.place, CUDAPlace):
            return _cuda_device_count()
        return _cpu_num()

    def decorate_reader(self, reader: Callable[[], Iterable[Any]], multi_devices: bool,
                        num_places: int | None = None, drop_last: bool = True
                        ) -> Callable[[], Iterator[Any]]:
        """A reader of feeds from a reader of mini-batches (Fluid's ``decorate_reader``).

        Parameters
        ----------
        reader : callable
            Returns an iterable of mini-batches.
        multi_devices : bool
            Yield a list of one feed per place (of ``num_places`` mini-batches) instead of one
            feed.
        num_places : int, optional
        drop_last : bool
            Only True is implemented (as in Fluid): leftover mini-batches are dropped.

        Returns
        -------
        callable
        """
        def reader_of_feeds() -> Iterator[Any]:
            if not multi_devices:
                for batch in reader():
                    yield self.feed(batch)
                return
            count = self._get_number_of_places_(num_places)
            pending: list[Any] = []
            for batch in reader():
                pending.append(batch)
                if len(pending) == count:
                    yield list(self.feed_parallel(pending, count))
                    pending = []
            if not drop_last and pending:
                raise ValueError("The data batch which cannot fit for devices will be dropped "
                                 "is not implementation. Other strategies are not implemented")

        return reader_of_feeds


def _flatten(name: str, value: Any, level: int, items: list, lengths: list) -> None:
    """Append the items of one sample's ``level``-deep sequence, and its lengths (Fluid's
    ``DataToLoDTensorConverter._feed_impl_``)."""
    if level == 0:
        items.append(value)
        return
    try:
        count = len(value)
    except TypeError:
        raise ValueError(f"DataFeeder: {name!r} has lod_level {len(lengths)}, so each sample "
                         f"holds a sequence; got {type(value).__name__} {value!r}") from None
    lengths[0].append(count)
    for each in value:
        _flatten(name, each, level - 1, items, lengths[1:])
