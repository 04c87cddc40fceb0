"""Where kernels run: :class:`CPUPlace` (numpy) and :class:`CUDAPlace` (cupy on one GPU); and
:class:`CUDAPinnedPlace`, page-locked host memory that tensors can be set in (no kernel runs
there).

Their own module, below :mod:`.lod` and :mod:`.executor`, which both need them (a LoDTensor is
set on a place; the executor runs on one)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CPUPlace", "CUDAPinnedPlace", "CUDAPlace", "cupy_for", "pinned_copy"]


class _PlaceKind:
    """What Fluid 1.8's places share: ``_type()`` (the index of the kind in Fluid's
    ``platform::Place`` variant) and ``_equals`` (the same kind and device)."""

    _kind = -1

    def _type(self) -> int:
        return self._kind

    def _equals(self, other: Any) -> bool:
        """Whether ``other`` (a place, or a ``core.Place`` holding one) is this place."""
        return self == getattr(other, "_held", other)


class CPUPlace(_PlaceKind):
    """Run kernels on numpy."""

    xp_name = "numpy"
    _kind = 1

    def __repr__(self) -> str:
        return "CPUPlace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUPlace)

    __hash__ = object.__hash__


class CUDAPlace(_PlaceKind):
    """Run kernels on cupy, on GPU ``device_id``."""

    xp_name = "cupy"
    _kind = 0

    def __init__(self, device_id: int = 0) -> None:
        self.device_id = int(device_id)

    def __repr__(self) -> str:
        return f"CUDAPlace({self.device_id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CUDAPlace) and other.device_id == self.device_id

    __hash__ = object.__hash__


class CUDAPinnedPlace(_PlaceKind):
    """Page-locked host memory (Fluid 1.8's ``CUDAPinnedPlace``): what a ``LoDTensor`` set
    there holds is a numpy array in CUDA pinned memory, which copies to a GPU fastest. No
    kernel runs here: an executor runs on a :class:`CPUPlace` or a :class:`CUDAPlace`."""

    xp_name = "numpy"
    _kind = 2

    def __repr__(self) -> str:
        return "CUDAPinnedPlace"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CUDAPinnedPlace)

    __hash__ = object.__hash__


def pinned_copy(array: Any) -> np.ndarray:
    """A copy of ``array`` (host or device) in CUDA pinned host memory, as a numpy array.

    Raises
    ------
    RuntimeError
        Without CuPy and a CUDA GPU (pinned memory is CUDA's).
    """
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # ImportError, CUDARuntimeError: both mean "no usable GPU"
        raise RuntimeError(
            "CUDAPinnedPlace needs CuPy and a CUDA GPU: pinned (page-locked) host memory is "
            f"CUDA's; use CPUPlace() on this machine ({err})") from err
    if count == 0:
        raise RuntimeError("CUDAPinnedPlace needs a CUDA GPU, and CuPy sees none: use CPUPlace()")
    host = np.asarray(array.get() if hasattr(array, "get") else array)
    memory = cupy.cuda.alloc_pinned_memory(max(host.nbytes, 1))
    # the array keeps the pinned buffer alive (its base)
    out = np.frombuffer(memory, dtype=host.dtype, count=host.size).reshape(host.shape)
    out[...] = host
    return out


def cupy_for(place: CUDAPlace) -> Any:
    """The cupy module, checked: CuPy imports and ``place``'s device exists."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # ImportError, CUDARuntimeError: both mean "no usable GPU"
        raise RuntimeError(
            "CUDAPlace needs CuPy and a CUDA GPU: install the 'gpu' extra "
            f"(pip install 'dask-fluid[gpu]') on a machine with a GPU ({err})") from err
    if not 0 <= place.device_id < count:
        raise ValueError(f"{place!r}: this process sees {count} CUDA device(s), numbered "
                         f"0..{count - 1} (CUDA_VISIBLE_DEVICES renumbers them)")
    return cupy
