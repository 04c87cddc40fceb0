"""The reference data set of the benchmarks (shared/reference/measurements.md)."""

from __future__ import annotations

import numpy as np


def reference_blobs(n: int = 200_000, n_features: int = 64, n_classes: int = 10,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs: ``centers = N(0,1)·0.35``, ``x = centers[y] + N(0,1)``.

    Returns
    -------
    X : ndarray of shape (n, n_features), float32
    y : ndarray of shape (n,), int64
    """
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_classes, n_features)) * 0.35
    y = rng.integers(0, n_classes, n)
    x = centers[y] + rng.standard_normal((n, n_features))
    return x.astype(np.float32), y.astype(np.int64)
