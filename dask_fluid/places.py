"""Where kernels run: :class:`CPUPlace` (numpy) and :class:`CUDAPlace` (cupy on one GPU).

Their own module, below :mod:`.lod` and :mod:`.executor`, which both need them (a LoDTensor is
set on a place; the executor runs on one)."""

from __future__ import annotations

from typing import Any

__all__ = ["CPUPlace", "CUDAPlace", "cupy_for"]


class CPUPlace:
    """Run kernels on numpy."""

    xp_name = "numpy"

    def __repr__(self) -> str:
        return "CPUPlace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUPlace)

    __hash__ = object.__hash__


class CUDAPlace:
    """Run kernels on cupy, on GPU ``device_id``."""

    xp_name = "cupy"

    def __init__(self, device_id: int = 0) -> None:
        self.device_id = int(device_id)

    def __repr__(self) -> str:
        return f"CUDAPlace({self.device_id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CUDAPlace) and other.device_id == self.device_id

    __hash__ = object.__hash__


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
