"""Fluid 1.8's ``paddle.fluid.average``: a weighted average computed in Python.

Follows ``python/paddle/fluid/average.py`` of Paddle 1.8: it changes no program and is
deprecated there in favour of ``fluid.metrics.Accuracy``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .lod import LoDTensor

__all__ = ["WeightedAverage"]


def _is_number_(var: Any) -> bool:
    # Fluid 1.8's test: Python ints and floats (np.float64 is a float) or a one-value array.
    return isinstance(var, (int, float)) or (isinstance(var, np.ndarray) and var.shape == (1,))


def _is_number_or_matrix_(var: Any) -> bool:
    return _is_number_(var) or isinstance(var, np.ndarray)


class WeightedAverage:
    """Weighted average of values added one at a time (Fluid 1.8's
    ``fluid.average.WeightedAverage``).

    Examples
    --------
    >>> avg = WeightedAverage()
    >>> avg.add(value=2.0, weight=1)
    >>> avg.add(value=4.0, weight=2)
    >>> avg.eval()  # (2.0 * 1 + 4.0 * 2) / (1 + 2)
    3.3333333333333335
    """

    def __init__(self) -> None:
        warnings.warn(f"The {self.__class__.__name__} is deprecated, please use "
                      "fluid.metrics.Accuracy instead.", Warning, stacklevel=2)
        self.reset()

    def reset(self) -> None:
        """Forget everything added."""
        self.numerator: Any = None
        self.denominator: Any = None

    def add(self, value: Any, weight: Any) -> None:
        """Add ``value`` (a number or numpy array) with ``weight`` (a number or a numpy
        array of one value).

        Raises
        ------
        ValueError
            ``value`` or ``weight`` of the wrong type.
        """
        # A LoDTensor fetched with return_numpy=False reads as its array.
        if isinstance(value, LoDTensor):
            value = np.array(value)
        if isinstance(weight, LoDTensor):
            weight = np.array(weight)
        if not _is_number_or_matrix_(value):
            raise ValueError("The 'value' must be a number(int, float) or a numpy ndarray.")
        if not _is_number_(weight):
            raise ValueError("The 'weight' must be a number(int, float).")
        if self.numerator is None or self.denominator is None:
            self.numerator = value * weight
            self.denominator = weight
        else:
            self.numerator += value * weight
            self.denominator += weight

    def eval(self) -> Any:
        """The weighted average of what was added.

        Raises
        ------
        ValueError
            Nothing was added since the last reset.
        """
        if self.numerator is None or self.denominator is None:
            raise ValueError("There is no data to be averaged in WeightedAverage.")
        return self.numerator / self.denominator
