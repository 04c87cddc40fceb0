"""``fluid.dygraph``: Fluid 1.8's imperative mode on dask_fluid's ops.

Inside :func:`guard` every op a layer appends runs at once (the same kernels as a program
run), variables hold values, ``loss.backward()`` fills gradients and ``optimizer.minimize``
updates the parameters it is given.
"""

from __future__ import annotations

from . import jit, nn  # noqa: F401  (fluid.dygraph.jit, fluid.dygraph.nn, as in Fluid)
from .backward import BackwardStrategy, grad
from .base import disable_dygraph, enable_dygraph, enabled, guard, no_grad, to_variable
from .checkpoint import load_dygraph, save_dygraph
from .container import LayerList, ParameterList, Sequential
from .jit import (
    ProgramTranslator,
    SaveLoadConfig,
    TracedLayer,
    TranslatedLayer,
    declarative,
    dygraph_to_static_func,
    load,
    save,
    set_code_level,
    set_verbosity,
)
from .layers import Layer
from .learning_rate_scheduler import (
    CosineDecay,
    ExponentialDecay,
    InverseTimeDecay,
    LambdaDecay,
    LearningRateDecay,
    LinearLrWarmup,
    MultiStepDecay,
    NaturalExpDecay,
    NoamDecay,
    PiecewiseDecay,
    PolynomialDecay,
    ReduceLROnPlateau,
    StepDecay,
)
from .nn import (
    NCE,
    BatchNorm,
    BilinearTensorProduct,
    Conv2D,
    Conv2DTranspose,
    Conv3D,
    Conv3DTranspose,
    Dropout,
    Embedding,
    GroupNorm,
    GRUUnit,
    InstanceNorm,
    LayerNorm,
    Linear,
    Pool2D,
    PRelu,
    SpectralNorm,
    TreeConv,
)
from .parallel import DataParallel, Env, ParallelEnv, ParallelStrategy, prepare_context
from .static_runner import StaticModelRunner
from .varbase import ParamBase, VarBase

__all__ = [
    "BackwardStrategy", "BatchNorm", "BilinearTensorProduct", "Conv2D", "Conv2DTranspose",
    "Conv3D", "Conv3DTranspose", "CosineDecay", "DataParallel", "Dropout", "Embedding", "Env",
    "ExponentialDecay", "GRUUnit", "GroupNorm", "InstanceNorm", "InverseTimeDecay", "LambdaDecay",
    "Layer", "LayerList", "LayerNorm", "LearningRateDecay", "Linear", "LinearLrWarmup",
    "MultiStepDecay", "NCE", "NaturalExpDecay", "NoamDecay", "PRelu", "ParallelEnv",
    "ParallelStrategy", "ParamBase", "ParameterList", "PiecewiseDecay", "PolynomialDecay",
    "Pool2D", "ProgramTranslator", "ReduceLROnPlateau", "SaveLoadConfig", "Sequential",
    "SpectralNorm", "StaticModelRunner", "StepDecay", "TracedLayer", "TranslatedLayer",
    "TreeConv", "VarBase", "declarative", "disable_dygraph", "dygraph_to_static_func",
    "enable_dygraph", "enabled", "grad", "guard", "load", "load_dygraph", "no_grad",
    "prepare_context", "save", "save_dygraph", "set_code_level", "set_verbosity",
    "to_variable",
]
