"""dask_fluid: PaddlePaddle Fluid's distributed training on Dask.

Import it the way Fluid scripts import ``paddle.fluid``::

    import dask_fluid as fluid

    x = fluid.layers.data(name="x", shape=[64])
    ...
    fluid.optimizer.SGD(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
"""

from . import (
    average,
    backward,
    clip,
    compiler,
    contrib,
    control_flow_ops,  # noqa: F401  (the control-flow ops' kernels and gradient rules)
    dygraph,
    evaluator,
    initializer,
    io,
    layers,
    metrics,
    nets,
    optimizer,
    recurrent_op,  # noqa: F401  (the recurrent op's kernels and gradient rule)
    regularizer,
    unique_name,
)
from .backward import append_backward, gradients
from .compiler import (
    BuildStrategy,
    CompiledProgram,
    ExecutionStrategy,
    cpu_places,
    cuda_pinned_places,
    cuda_places,
)
from .data import data
from .data_feeder import DataFeeder
from .dygraph import disable_dygraph, enable_dygraph, load_dygraph, save_dygraph

# Fluid 1.8's fluid/__init__.py does ``from .dygraph.layers import *`` and ``from .dygraph.nn
# import *``: ``fluid.Layer``, ``fluid.Linear``, ``fluid.Conv2D`` ... (left out of its __all__)
from .dygraph.layers import Layer  # noqa: F401
from .dygraph.nn import *  # noqa: F403
from .executor import (
    CPUPlace,
    CUDAPlace,
    ExecutionError,
    Executor,
    Scope,
    global_scope,
    scope_guard,
)
from .framework import (
    Block,
    Operator,
    OpRole,
    Parameter,
    Program,
    Variable,
    default_main_program,
    default_startup_program,
    device_guard,
    in_dygraph_mode,
    name_scope,
    program_guard,
)
from .global_flags import get_flags, set_flags
from .input import embedding, one_hot
from .io import load, load_program_state, save, set_program_state
from .lod import LoDTensor, LoDTensorArray, create_lod_tensor, create_random_int_lodtensor
from .parallel_executor import ParallelExecutor
from .param_attr import ParamAttr, WeightNormParamAttr
from .places import CUDAPinnedPlace
from .queue_dataset import DatasetFactory, InMemoryDataset, QueueDataset

__version__ = "0.1.0"

#: Fluid 1.8's other names of enable_dygraph / disable_dygraph
enable_imperative = enable_dygraph
disable_imperative = disable_dygraph

_LAZY = {
    "DistributeTranspiler": "dask_fluid.transpiler",
    "DistributeTranspilerConfig": "dask_fluid.transpiler",
    "memory_optimize": "dask_fluid.transpiler",
    "release_memory": "dask_fluid.transpiler",
    "transpiler": "dask_fluid.transpiler",
    "MLPClassifier": "dask_fluid.estimators",
    "MLPRegressor": "dask_fluid.estimators",
    "LinearClassifier": "dask_fluid.estimators",
    "LinearRegressor": "dask_fluid.estimators",
}


def __getattr__(name: str):
    # The transpiler and the estimators (which pull in dask and scikit-learn) load on first use.
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        return module if name == "transpiler" else getattr(module, name)
    raise AttributeError(f"module 'dask_fluid' has no attribute {name!r}")


__all__ = [
    "Block", "BuildStrategy", "CPUPlace", "CUDAPinnedPlace", "CUDAPlace", "CompiledProgram",
    "DataFeeder",
    "DatasetFactory", "ExecutionError", "ExecutionStrategy", "Executor", "InMemoryDataset",
    "LoDTensor", "QueueDataset",
    "LoDTensorArray", "OpRole", "Operator", "ParallelExecutor", "ParamAttr", "Parameter",
    "Program", "Scope", "Variable", "WeightNormParamAttr", "append_backward", "average",
    "backward", "clip", "compiler", "contrib", "cpu_places", "create_lod_tensor",
    "create_random_int_lodtensor", "cuda_pinned_places", "cuda_places", "data",
    "default_main_program",
    "default_startup_program", "device_guard", "disable_dygraph", "disable_imperative", "dygraph",
    "embedding", "enable_dygraph", "enable_imperative", "evaluator", "get_flags", "global_scope",
    "gradients",
    "in_dygraph_mode", "initializer", "io", "layers", "load", "load_dygraph", "load_program_state",
    "metrics", "name_scope", "nets", "one_hot", "optimizer", "program_guard", "regularizer",
    "save", "save_dygraph", "scope_guard", "set_flags", "set_program_state", "unique_name",
    *_LAZY,
]
