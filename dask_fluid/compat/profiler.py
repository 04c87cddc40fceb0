"""``paddle.fluid.profiler``: importable; every profiler entry point raises NotImplementedError.

Fluid's profiler times C++ kernels and CUDA events; dask_fluid's kernels are numpy/CuPy calls,
which Python's own profilers measure (``python -m cProfile``, or ``dask-fluid run`` under
``py-spy``), and the Dask dashboard shows where distributed time goes.
"""

from __future__ import annotations

from . import _unsupported

__all__ = ["cuda_profiler", "profiler", "reset_profiler", "start_profiler", "stop_profiler"]

_WHY = ("dask_fluid has no C++ kernel profiler; profile with cProfile or py-spy, and use the "
        "Dask dashboard for distributed runs")

cuda_profiler = _unsupported.function("fluid.profiler.cuda_profiler", _WHY, __name__)
profiler = _unsupported.function("fluid.profiler.profiler", _WHY, __name__)
reset_profiler = _unsupported.function("fluid.profiler.reset_profiler", _WHY, __name__)
start_profiler = _unsupported.function("fluid.profiler.start_profiler", _WHY, __name__)
stop_profiler = _unsupported.function("fluid.profiler.stop_profiler", _WHY, __name__)
