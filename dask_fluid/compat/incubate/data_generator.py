"""``paddle.fluid.incubate.data_generator``: Fluid 1.8's data generators, the programs that a
``QueueDataset``'s ``pipe_command`` runs to turn text lines into MultiSlot records.

Subclass :class:`MultiSlotDataGenerator` (or :class:`MultiSlotStringDataGenerator`), define
``generate_sample(line)`` returning a generator function of samples, each a sequence of
``(slot_name, [values])`` pairs, and call ``run_from_stdin()``: every sample becomes one line,
``<n> v1 .. vn <m> w1 .. wm ...``, on standard output, as in Fluid.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["DataGenerator", "MultiSlotDataGenerator", "MultiSlotStringDataGenerator"]


class DataGenerator:
    """The base of the generators (Fluid's ``DataGenerator``)."""

    def __init__(self) -> None:
        self._proto_info: list[tuple[str, str]] | None = None
        self.batch_size_ = 32

    def set_batch(self, batch_size: int) -> None:
        """How many samples ``generate_batch`` sees at once."""
        self.batch_size_ = int(batch_size)

    def run_from_memory(self) -> None:
        """Write the samples of ``generate_sample(None)`` (Fluid's in-memory variant)."""
        for sample in self.generate_sample(None)():
            if sample is not None:
                sys.stdout.write(self._gen_str(sample))

    def run_from_stdin(self) -> None:
        """Read lines from standard input and write one MultiSlot line per sample."""
        batch: list = []
        for line in sys.stdin:
            for sample in self.generate_sample(line)():
                if sample is None:
                    continue
                batch.append(sample)
                if len(batch) == self.batch_size_:
                    self._write_batch(batch)
                    batch = []
        if batch:
            self._write_batch(batch)

    def _write_batch(self, batch: list) -> None:
        for sample in self.generate_batch(batch)():
            sys.stdout.write(self._gen_str(sample))

    def generate_sample(self, line: str | None) -> Callable[[], Iterable[Any]]:
        """The samples of one input line; subclasses define it."""
        raise NotImplementedError("Please rewrite this function to return a list or tuple: "
                                  "[(name, [feasign, ...]), ...]")

    def generate_batch(self, samples: list) -> Callable[[], Iterator[Any]]:
        """Samples of a batch, as they are (override to change them together)."""
        def local_iter() -> Iterator[Any]:
            yield from samples

        return local_iter

    def _gen_str(self, line: Any) -> str:
        raise NotImplementedError("please use MultiSlotDataGenerator or "
                                  "MultiSlotStringDataGenerator")


class MultiSlotStringDataGenerator(DataGenerator):
    """Values written as given (strings)."""

    def _gen_str(self, line: Any) -> str:
        if not isinstance(line, list | tuple):
            raise ValueError("the output of process() must be in list or tuple type")
        out = []
        for _, elements in line:
            out.append(str(len(elements)))
            out.extend(str(e) for e in elements)
        return " ".join(out) + "\n"


class MultiSlotDataGenerator(DataGenerator):
    """Integer (uint64) or float slots, checked as Fluid checks them."""

    def _gen_str(self, line: Any) -> str:
        if not isinstance(line, list | tuple):
            raise ValueError("the output of process() must be in list or tuple type")
        first = self._proto_info is None
        if first:
            self._proto_info = []
        elif len(line) != len(self._proto_info):
            raise ValueError(f"the complete field set of two given line are inconsistent: "
                             f"{len(line)} slots, then {len(self._proto_info)}")
        out = []
        for index, item in enumerate(line):
            name, elements = item
            if not isinstance(name, str):
                raise ValueError(f"name{type(name)} must be in str type")
            if not isinstance(elements, list):
                raise ValueError(f"elements{type(elements)} must be in list type")
            if not elements:
                raise ValueError("the elements of each field can not be empty, you need "
                                 "padding it in process().")
            if first:
                self._proto_info.append((name, "uint64"))
            elif name != self._proto_info[index][0]:
                raise ValueError(f"the field name of two given line are not match: require<"
                                 f"{self._proto_info[index][0]}>, get<{name}>.")
            out.append(str(len(elements)))
            for elem in elements:
                if isinstance(elem, float):
                    self._proto_info[index] = (name, "float")
                elif not isinstance(elem, int) or isinstance(elem, bool):
                    raise ValueError(f"the type of element{type(elem)} must be in int or float")
                out.append(str(elem))
        return " ".join(out) + "\n"
