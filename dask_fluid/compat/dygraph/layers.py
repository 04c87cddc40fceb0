"""``paddle.fluid.dygraph.layers``: ``Layer`` can be subclassed, not instantiated."""

from __future__ import annotations

from .._unsupported import DYGRAPH, cls

__all__ = ["Layer"]

Layer = cls("fluid.dygraph.Layer", DYGRAPH, __name__)
