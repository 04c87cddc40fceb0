"""``fluid.contrib`` (Fluid 1.8): layers, optimizer extensions and mixed precision that Fluid
ships outside its core API."""

from . import extend_optimizer, layers, mixed_precision
from .extend_optimizer import *  # noqa: F403
from .layers import *  # noqa: F403
from .mixed_precision import *  # noqa: F403

__all__ = [*extend_optimizer.__all__, *layers.__all__, *mixed_precision.__all__]
