"""``paddle.fluid.core``: the parts of Fluid's C++ core that scripts touch, on numpy/CuPy.

Implemented: :func:`is_compiled_with_cuda` (True when CuPy can use a GPU),
:func:`get_cuda_device_count`, the places, :class:`Scope`, :class:`LoDTensor`
(:mod:`dask_fluid.lod`), :class:`EOFException`, :class:`VarBase` (the dygraph variable,
for ``isinstance`` checks) and :func:`grad_var_suffix`. Any other name (the inference
predictor: ``PaddleTensor``, ``NativeConfig``, ``create_paddle_predictor`` ...) raises
AttributeError naming it.
"""

from __future__ import annotations

from typing import Any

from ..compiler import _cuda_device_count
from ..dygraph.varbase import VarBase
from ..executor import CPUPlace, CUDAPlace, Scope
from ..framework import GRAD_SUFFIX
from ..lod import LoDTensor
from ..places import CUDAPinnedPlace
from ..py_reader import EOFException

__all__ = ["CPUPlace", "CUDAPinnedPlace", "CUDAPlace", "EOFException", "LoDTensor", "Scope",
           "VarBase", "get_cuda_device_count", "grad_var_suffix", "is_compiled_with_cuda"]


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
