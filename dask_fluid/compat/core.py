"""``paddle.fluid.core``: the parts of Fluid's C++ core that scripts touch, on numpy/CuPy.

Implemented: :func:`is_compiled_with_cuda` (True when CuPy can use a GPU),
:func:`get_cuda_device_count`, the places, :class:`Scope`, :class:`LoDTensor`
(:mod:`dask_fluid.lod`), :class:`EOFException`, :class:`VarBase` (the dygraph variable,
for ``isinstance`` checks), :func:`grad_var_suffix` and ``VarDesc.VarType`` (a variable's
type and dtype: ``VarDesc.VarType.FP32`` is ``"float32"`` here). Any other name (the inference
predictor: ``PaddleTensor``, ``NativeConfig``, ``create_paddle_predictor`` ...) raises
AttributeError naming it.
"""

from __future__ import annotations

from typing import Any

from ..compiler import _cuda_device_count
from ..dygraph.varbase import VarBase
from ..executor import CPUPlace, CUDAPlace, Scope
from ..framework import GRAD_SUFFIX, VarType
from ..lod import LoDTensor
from ..places import CUDAPinnedPlace
from ..py_reader import EOFException

__all__ = ["CPUPlace", "CUDAPinnedPlace", "CUDAPlace", "EOFException", "LoDTensor", "Place",
           "Scope", "VarBase", "VarDesc", "get_cuda_device_count", "grad_var_suffix",
           "is_compiled_with_cuda"]


class VarDesc:
    """Fluid's ``core.VarDesc``, for its ``VarType`` enum (:class:`.framework.VarType`)."""

    VarType = VarType


class Place:
    """Fluid 1.8's generic ``core.Place``: it holds one of the places (``set_place``) and
    answers for it (``_type``, ``_equals``, ``is_cpu_place`` ...)."""

    def __init__(self) -> None:
        self._held: CPUPlace | CUDAPlace | CUDAPinnedPlace | None = None

    def set_place(self, place: Any) -> None:
        """Hold ``place`` (a CPUPlace, CUDAPlace, CUDAPinnedPlace or another Place)."""
        place = place._held if isinstance(place, Place) else place
        if not isinstance(place, (CPUPlace, CUDAPlace, CUDAPinnedPlace)):
            raise TypeError(f"Place.set_place takes a CPUPlace, CUDAPlace, CUDAPinnedPlace or "
                            f"Place, got {type(place).__name__}")
        self._held = place

    def _place(self) -> CPUPlace | CUDAPlace | CUDAPinnedPlace:
        if self._held is None:
            raise ValueError("this Place holds no place yet: call set_place(place) first")
        return self._held

    def _type(self) -> int:
        return self._place()._type()

    def _equals(self, other: Any) -> bool:
        return self._place()._equals(other)

    def is_cpu_place(self) -> bool:
        return isinstance(self._place(), CPUPlace)

    def is_gpu_place(self) -> bool:
        return isinstance(self._place(), CUDAPlace)

    def is_cuda_pinned_place(self) -> bool:
        return isinstance(self._place(), CUDAPinnedPlace)

    def gpu_device_id(self) -> int:
        """The GPU of a held CUDAPlace (ValueError for another place)."""
        place = self._place()
        if not isinstance(place, CUDAPlace):
            raise ValueError(f"gpu_device_id: this Place holds {place!r}, not a CUDAPlace")
        return place.device_id

    def __repr__(self) -> str:
        return f"Place({self._held!r})"


def is_compiled_with_cuda() -> bool:
    """Whether ``CUDAPlace`` can run here: CuPy is installed and sees a CUDA GPU."""
    return _cuda_device_count() > 0


def get_cuda_device_count() -> int:
    """The number of CUDA GPUs CuPy can use (0 without CuPy or a GPU)."""
    return _cuda_device_count()


def grad_var_suffix() -> str:
    """``"@GRAD"``: what a variable's gradient adds to its name (Fluid's kGradVarSuffix)."""
    return GRAD_SUFFIX


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"paddle.fluid.core.{name} is not implemented in dask_fluid (its core offers "
        f"{', '.join(__all__)}); see docs/migration.md")
