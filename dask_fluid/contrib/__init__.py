"""``fluid.contrib`` (Fluid 1.8): layers, optimizer extensions and mixed precision that Fluid
ships outside its core API."""

from . import (  # noqa: F401  (model_stat: fluid.contrib.model_stat.summary, as in Fluid)
    extend_optimizer,
    layers,
    memory_usage_calc,
    mixed_precision,
    model_stat,
    op_frequence,
    reader,
    utils,
)
from .extend_optimizer import *  # noqa: F403
from .layers import *  # noqa: F403
from .memory_usage_calc import *  # noqa: F403
from .mixed_precision import *  # noqa: F403
from .op_frequence import *  # noqa: F403
from .reader import *  # noqa: F403

__all__ = [*extend_optimizer.__all__, *layers.__all__, *memory_usage_calc.__all__,
           *mixed_precision.__all__, *op_frequence.__all__, *reader.__all__]
