"""``paddle.fluid.dygraph.base``: importable; dygraph mode is not implemented."""

from __future__ import annotations

from .._unsupported import DYGRAPH, function

__all__ = ["enabled", "guard", "no_grad", "to_variable"]

guard = function("fluid.dygraph.guard", DYGRAPH, __name__)
no_grad = function("fluid.dygraph.no_grad", DYGRAPH, __name__)
to_variable = function("fluid.dygraph.to_variable", DYGRAPH, __name__)


def enabled() -> bool:
    """False: dygraph mode is never on in dask_fluid (``guard`` raises)."""
    return False
