"""``fluid.contrib.reader`` (Fluid 1.8): ``distributed_batch_reader``."""

from __future__ import annotations

from .distributed_reader import distributed_batch_reader

__all__ = ["distributed_batch_reader"]
