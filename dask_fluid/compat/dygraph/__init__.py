"""``paddle.fluid.dygraph``: Fluid's imperative mode, which dask_fluid does not implement.

Paddle 1.8's test runner (test_dist_base.py) imports ``to_variable`` and ``DataParallel`` at
module level for its dygraph code path, so the names import; using any of them raises
NotImplementedError: dask_fluid implements the static-graph API (Program, fluid.layers,
Executor). ``enabled()`` is honestly False.
"""

from __future__ import annotations

from .._unsupported import DYGRAPH, function
from .base import enabled, guard, no_grad, to_variable
from .layers import Layer
from .nn import BatchNorm, Conv2D, Dropout, Embedding, GRUUnit, LayerNorm, Linear, Pool2D
from .parallel import DataParallel, ParallelEnv, ParallelStrategy, prepare_context

load_dygraph = function("fluid.dygraph.load_dygraph", DYGRAPH, __name__)
save_dygraph = function("fluid.dygraph.save_dygraph", DYGRAPH, __name__)

__all__ = ["BatchNorm", "Conv2D", "DataParallel", "Dropout", "Embedding", "GRUUnit", "Layer",
           "LayerNorm", "Linear", "ParallelEnv", "ParallelStrategy", "Pool2D", "enabled",
           "guard", "load_dygraph", "no_grad", "prepare_context", "save_dygraph",
           "to_variable"]
