"""Fetched values of one element that still convert to a Python number.

A Fluid 1.x script reads its loss as an array of shape ``[1]`` (``exe.run(fetch_list=[loss])``,
``loss.numpy()`` in dygraph mode) and prints it with ``float(loss)`` or ``"%f" % loss``. numpy
deprecated that conversion for arrays with dimensions in 1.25 and refuses it since 2.x, so
those lines, in Fluid's own scripts too, stop with ``TypeError: only 0-dimensional arrays can
be converted to Python scalars``. The values keep Fluid's shape and are numpy arrays in every
other respect; they only convert to a number as numpy 1.x converted them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["OneValueArray", "fetched"]


class OneValueArray(np.ndarray):
    """An ndarray of one element (Fluid's ``[1]`` losses and metrics) that ``float()``,
    ``int()``, ``complex()`` and format specs accept, as numpy 1.x's did."""

    def _item(self) -> Any:
        if self.size != 1:  # a view or result of another shape
            raise TypeError(f"only arrays of one element convert to a Python number, this "
                            f"one has shape {list(self.shape)}")
        return np.ndarray.item(self)

    def __float__(self) -> float:
        return float(self._item())

    def __int__(self) -> int:
        return int(self._item())

    def __complex__(self) -> complex:
        return complex(self._item())

    def __repr__(self) -> str:  # as the ndarray it is
        return repr(np.asarray(self))

    def __reduce__(self) -> Any:
        # pickled (saved, sent to another process) as a plain ndarray: the arrays-only
        # unpickling of parameter files takes it, and readers need not import dask_fluid
        return np.asarray(self).__reduce__()

    def __format__(self, spec: str) -> str:
        return format(self._item(), spec) if spec and self.size == 1 else \
            np.ndarray.__format__(np.asarray(self), spec)


def fetched(value: np.ndarray) -> np.ndarray:
    """``value`` as a :class:`OneValueArray` when it holds one element in one or more
    dimensions (a view, no copy); unchanged otherwise."""
    if value.size == 1 and value.ndim > 0 and type(value) is np.ndarray:
        return value.view(OneValueArray)
    return value
