"""``paddle.fluid.dygraph.nn``: the dygraph layer classes, importable and not implemented."""

from __future__ import annotations

from .._unsupported import DYGRAPH, cls

__all__ = ["BatchNorm", "Conv2D", "Dropout", "Embedding", "GRUUnit", "LayerNorm", "Linear",
           "Pool2D"]

BatchNorm = cls("fluid.dygraph.BatchNorm", DYGRAPH, __name__)
Conv2D = cls("fluid.dygraph.Conv2D", DYGRAPH, __name__)
Dropout = cls("fluid.dygraph.Dropout", DYGRAPH, __name__)
Embedding = cls("fluid.dygraph.Embedding", DYGRAPH, __name__)
GRUUnit = cls("fluid.dygraph.GRUUnit", DYGRAPH, __name__)
LayerNorm = cls("fluid.dygraph.LayerNorm", DYGRAPH, __name__)
Linear = cls("fluid.dygraph.Linear", DYGRAPH, __name__)
Pool2D = cls("fluid.dygraph.Pool2D", DYGRAPH, __name__)
