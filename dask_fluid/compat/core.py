"""``paddle.fluid.core``: the parts of Fluid's C++ core that scripts touch, on numpy/CuPy.

Implemented: :func:`is_compiled_with_cuda` (True when CuPy can use a GPU),
:func:`get_cuda_device_count`, the places, :class:`Scope`, :class:`LoDTensor` (a tensor holder
without LoD) and :class:`EOFException`. Any other name raises AttributeError naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..compiler import _cuda_device_count
from ..executor import CPUPlace, CUDAPlace, Scope

__all__ = ["CPUPlace", "CUDAPlace", "EOFException", "LoDTensor", "Scope",
           "get_cuda_device_count", "is_compiled_with_cuda"]


def is_compiled_with_cuda() -> bool:
    """Whether ``CUDAPlace`` can run here: CuPy is installed and sees a CUDA GPU."""
    return _cuda_device_count() > 0


def get_cuda_device_count() -> int:
    """The number of CUDA GPUs CuPy can use (0 without CuPy or a GPU)."""
    return _cuda_device_count()


class EOFException(Exception):
    """Fluid's end-of-data signal of ``py_reader``/``DataLoader`` loops.

    dask_fluid has no in-program readers, so nothing raises it; scripts that catch it still run.
    """


def _lod_not_implemented(method: str) -> NotImplementedError:
    return NotImplementedError(
        f"LoDTensor.{method} with a non-empty LoD is not implemented in dask_fluid yet: LoD "
        "(variable-length sequence) tensors are issue 15; only lod_level 0 tensors are held")


class LoDTensor:
    """A tensor holder (Fluid's ``core.LoDTensor``) for tensors without LoD.

    ``set(array, place)`` stores a copy on the place (numpy on CPUPlace, CuPy on CUDAPlace);
    ``np.array(tensor)`` reads it back. Setting a non-empty LoD raises NotImplementedError
    (issue 15).
    """

    def __init__(self) -> None:
        self._array: Any = None
        self._place: CPUPlace | CUDAPlace | None = None

    def set(self, array: Any, place: CPUPlace | CUDAPlace) -> None:
        """Store a copy of ``array`` on ``place``."""
        if isinstance(place, CUDAPlace):
            import cupy

            with cupy.cuda.Device(place.device_id):
                self._array = cupy.array(array)
        elif isinstance(place, CPUPlace):
            self._array = np.array(array.get() if hasattr(array, "get") else array)
        else:
            raise TypeError(f"LoDTensor.set: place must be a CPUPlace or CUDAPlace, got "
                            f"{type(place).__name__}")
        self._place = place

    def _require(self) -> Any:
        if self._array is None:
            raise ValueError("LoDTensor holds no data yet: call set(array, place) first")
        return self._array

    def shape(self) -> list[int]:
        """The tensor's shape, as a list (Fluid's method, not an attribute)."""
        return list(self._require().shape)

    def _dtype(self) -> np.dtype:
        return np.dtype(self._require().dtype)

    def _place_of(self) -> CPUPlace | CUDAPlace | None:
        return self._place

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self._require()
        arr = arr.get() if hasattr(arr, "get") else arr
        return np.asarray(arr, dtype=dtype)

    # -- LoD: only the empty LoD of lod_level 0 ---------------------------------------------
    def lod(self) -> list[list[int]]:
        """The LoD offsets: always ``[]`` (no LoD)."""
        return []

    def set_lod(self, lod: list[list[int]]) -> None:
        """Accept only the empty LoD; a non-empty one raises NotImplementedError (issue 15)."""
        if lod:
            raise _lod_not_implemented("set_lod")

    def recursive_sequence_lengths(self) -> list[list[int]]:
        """The sequence lengths: always ``[]`` (no LoD)."""
        return []

    def set_recursive_sequence_lengths(self, lengths: list[list[int]]) -> None:
        """Accept only ``[]``; sequence lengths raise NotImplementedError (issue 15)."""
        if lengths:
            raise _lod_not_implemented("set_recursive_sequence_lengths")

    def has_valid_recursive_sequence_lengths(self) -> bool:
        """True: a tensor without LoD is always valid."""
        return True

    def __repr__(self) -> str:
        if self._array is None:
            return "LoDTensor(empty)"
        return f"LoDTensor(shape={self.shape()}, dtype={self._dtype()}, place={self._place!r})"


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"paddle.fluid.core.{name} is not implemented in dask_fluid (its core offers "
        f"{', '.join(__all__)}); see docs/migration.md")
