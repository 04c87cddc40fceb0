"""Central differences of a scalar function of one array, for the tests that check a whole
program's gradients through the executor (StaticRNN, DynamicRNN)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def numeric_gradient(f: Callable[[], float], get: Callable[[], np.ndarray],
                     put: Callable[[np.ndarray], None], eps: float = 1e-6) -> np.ndarray:
    """d f / d x by (f(x + eps) - f(x - eps)) / 2 eps per element, where ``get()`` reads x
    and ``put(v)`` sets it; x is restored afterwards."""
    base = np.array(get(), dtype=np.float64)
    g = np.zeros_like(base)
    for j in range(base.size):
        for sign in (1, -1):
            bumped = base.copy()
            bumped.flat[j] += sign * eps
            put(bumped)
            g.flat[j] += sign * f() / (2 * eps)
    put(base)
    return g
