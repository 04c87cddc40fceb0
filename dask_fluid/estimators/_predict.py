"""Block functions run by ``map_blocks``: the estimators' inference network in numpy or cupy.

They are module-level so they pickle by reference and give readable task names on the
dashboard. Each takes the parameters as plain arrays, so a task needs no Program, no Executor
and no estimator. Arithmetic is float64 (parameters are trained in float32): a row's prediction
then does not depend on how many rows share its block (float32 GEMM and GEMV round
differently), which scikit-learn's invariance checks and users comparing runs expect.
"""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _xp(x: Any) -> Any:
    """numpy, or cupy for cupy arrays (without importing cupy otherwise)."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def _activate(h: Any, activation: str, xp: Any) -> Any:
    if activation == "relu":
        return xp.maximum(h, 0)
    if activation == "tanh":
        return xp.tanh(h)
    if activation == "logistic":
        return 0.5 * (1.0 + xp.tanh(0.5 * h))  # the sigmoid without exp overflow
    return h


def forward(X: Any, coefs: Sequence[np.ndarray], intercepts: Sequence[np.ndarray],
            activation: str) -> Any:
    """Raw outputs (logits or regression values) of the network for rows ``X``."""
    xp = _xp(X)
    h = xp.asarray(X, dtype=xp.float64)
    for i, (W, b) in enumerate(zip(coefs, intercepts, strict=True)):
        h = h @ xp.asarray(W, dtype=xp.float64) + xp.asarray(b, dtype=xp.float64)
        if i < len(coefs) - 1:
            h = _activate(h, activation, xp)
    return h


def log_softmax(z: Any) -> Any:
    xp = _xp(z)
    z = z - z.max(axis=1, keepdims=True) if z.shape[0] else z
    return z - xp.log(xp.exp(z).sum(axis=1, keepdims=True))


def decision_block(X: Any, coefs: Sequence, intercepts: Sequence, activation: str) -> Any:
    """Classifier scores: ``(n,)`` logit difference for two classes, else ``(n, n_classes)``."""
    z = forward(X, coefs, intercepts, activation)
    return z[:, 1] - z[:, 0] if z.shape[1] == 2 else z


def proba_block(X: Any, coefs: Sequence, intercepts: Sequence, activation: str) -> Any:
    """Class probabilities ``(n, n_classes)``."""
    return _xp(X).exp(log_proba_block(X, coefs, intercepts, activation))


def log_proba_block(X: Any, coefs: Sequence, intercepts: Sequence, activation: str) -> Any:
    """Log class probabilities ``(n, n_classes)``."""
    return log_softmax(forward(X, coefs, intercepts, activation))


def predict_class_block(X: Any, coefs: Sequence, intercepts: Sequence, activation: str,
                        classes: np.ndarray) -> Any:
    """Predicted labels ``(n,)``; cupy chunks give cupy labels when ``classes`` is numeric."""
    idx = forward(X, coefs, intercepts, activation).argmax(axis=1)
    xp = _xp(idx)
    if xp is not np and classes.dtype.kind in "biuf":
        return xp.asarray(classes)[idx]
    return classes[idx.get() if xp is not np else idx]


def predict_value_block(X: Any, coefs: Sequence, intercepts: Sequence, activation: str,
                        ravel: bool) -> Any:
    """Regression predictions: ``(n,)`` for one target, else ``(n, n_targets)``."""
    z = forward(X, coefs, intercepts, activation)
    return z[:, 0] if ravel else z


def encode_labels_block(y: Any, classes: np.ndarray) -> np.ndarray:
    """Labels → int64 class indices ``(n, 1)``, the network's label input."""
    y = np.asarray(y.get() if hasattr(y, "get") else y).reshape(-1)
    return np.searchsorted(classes, y).astype(np.int64).reshape(-1, 1)


def as_float32_block(x: Any) -> Any:
    """Features as float32, the dtype of the network's data layers."""
    return x.astype("float32", copy=False)


def matches_block(pred: Any, y: Any) -> Any:
    """1.0 where a prediction equals its label (for a dask accuracy)."""
    return (np.asarray(pred).reshape(-1) == np.asarray(y).reshape(-1)).astype(np.float64)
