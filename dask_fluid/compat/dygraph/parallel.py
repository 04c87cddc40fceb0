"""``paddle.fluid.dygraph.parallel``: importable; dygraph data parallelism is not implemented."""

from __future__ import annotations

from .._unsupported import DYGRAPH, cls, function

__all__ = ["DataParallel", "ParallelEnv", "ParallelStrategy", "prepare_context"]

DataParallel = cls("fluid.dygraph.DataParallel", DYGRAPH, __name__)
ParallelEnv = cls("fluid.dygraph.ParallelEnv", DYGRAPH, __name__)
ParallelStrategy = cls("fluid.dygraph.ParallelStrategy", DYGRAPH, __name__)
prepare_context = function("fluid.dygraph.prepare_context", DYGRAPH, __name__)
