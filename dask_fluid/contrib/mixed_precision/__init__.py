"""``fluid.contrib.mixed_precision`` (Fluid 1.8): automatic mixed precision.

``decorate(optimizer, ...)`` wraps an optimizer so that training rewrites the program into
float16 and float32 ops by :class:`AutoMixedPrecisionLists` and scales the loss, dynamically
by default. Modules as in Fluid: ``decorator``, ``fp16_lists``, ``fp16_utils``.
"""

from . import decorator, fp16_lists, fp16_utils
from .decorator import *  # noqa: F403
from .fp16_lists import *  # noqa: F403

__all__ = [*decorator.__all__, *fp16_lists.__all__, *fp16_utils.__all__]
