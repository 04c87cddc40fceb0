"""Fluid's DistributeTranspiler: program rewriting for pserver and NCCL2 training.

Pure program rewriting, no cluster: ``transpile()`` turns a single-process program into a
trainer program (sends gradients, receives parameters) and one program per pserver
(``listen_and_serv`` with an optimize block per parameter block); the Dask runtime
(:mod:`dask_fluid.distributed`) executes them.
"""

from .config import DistributeTranspilerConfig, parse_endpoints
from .distribute_transpiler import DistributeTranspiler
from .geo_sgd_transpiler import GeoSgdTranspiler
from .memory_optimization import memory_optimize, release_memory
from .ps_dispatcher import HashName, PSDispatcher, RoundRobin
from .slicing import VarBlock, slice_variable, split_sizes
from .summary import summarize

__all__ = [
    "DistributeTranspiler", "DistributeTranspilerConfig", "GeoSgdTranspiler", "HashName",
    "PSDispatcher", "RoundRobin", "VarBlock", "memory_optimize", "parse_endpoints",
    "release_memory", "slice_variable", "split_sizes", "summarize",
]
