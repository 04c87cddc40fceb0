"""``fluid.contrib.layers`` (Fluid 1.8): ``nn`` and ``rnn_impl``."""

from . import nn, rnn_impl
from .nn import *  # noqa: F403
from .rnn_impl import *  # noqa: F403

__all__ = [*nn.__all__, *rnn_impl.__all__]
