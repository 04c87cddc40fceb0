"""Input checks of the estimators: one entry point for numpy, pandas, dask arrays and frames.

numpy and pandas input goes through scikit-learn's ``validate_data`` so messages match
scikit-learn's own estimators. Dask input is checked on its metadata only (dimensions, dtype,
chunk sizes, lengths, feature count): nothing is computed, so a bad input fails before any work
reaches the cluster. Finiteness of dask input needs the data; :func:`finite_check` returns a
lazy scalar that the estimator computes on the cluster (only a bool comes back) before training.
"""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.validation import _check_feature_names

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn
    def _validate_data(estimator: Any, /, *args: Any, **kwargs: Any) -> Any:
        return estimator._validate_data(*args, **kwargs)

_FLOATS = (np.float64, np.float32)
_RESHAPE_HINT = ("Reshape your data either using array.reshape(-1, 1) if your data has a single "
                 "feature or array.reshape(1, -1) if it contains a single sample.")


def is_dask_array(x: Any) -> bool:
    return type(x).__name__ == "Array" and type(x).__module__.startswith("dask.array")


def is_dask_frame(x: Any) -> bool:
    mod = type(x).__module__
    return mod.startswith("dask.dataframe") or mod.startswith("dask_expr")


def is_dask(x: Any) -> bool:
    return is_dask_array(x) or is_dask_frame(x)


@dataclass
class Checked:
    """Validated input: ``X`` (numpy or dask, 2-D float), ``y`` (aligned, or None)."""

    X: Any
    y: Any = None

    @property
    def lazy(self) -> bool:
        return is_dask_array(self.X)


def check_input(estimator: Any, X: Any, y: Any = "no_validation", *, reset: bool,
                multi_output: bool = False) -> Checked:
    """Validate ``X`` (and ``y`` unless ``"no_validation"``) for ``estimator``.

    ``reset=True`` (``fit``, first ``partial_fit``) records ``n_features_in_`` and
    ``feature_names_in_``; otherwise they are checked against the input.
    """
    if is_dask(X) or (y is not None and is_dask(y) and not isinstance(y, str)):
        return _check_dask(estimator, X, y, reset=reset, multi_output=multi_output)
    if isinstance(y, str) and y == "no_validation":
        return Checked(_validate_data(estimator, X, reset=reset, dtype=_FLOATS))
    X, y = _validate_data(estimator, X, y, reset=reset, dtype=_FLOATS,
                          multi_output=multi_output, y_numeric=multi_output)
    return Checked(X, y)


# -- dask -------------------------------------------------------------------------------------
def _name(estimator: Any) -> str:
    return type(estimator).__name__


def _frame_to_array(estimator: Any, X: Any, reset: bool) -> Any:
    # the frame's empty pandas meta carries the columns: scikit-learn's check reads those
    _check_feature_names(estimator, X._meta, reset=reset)
    # lengths=True computes the partition lengths (a count per partition, not the data)
    return X.to_dask_array(lengths=True)


def _check_dask_X(estimator: Any, X: Any, reset: bool) -> Any:
    import dask.array as da

    if is_dask_frame(X):
        if X.ndim == 1:
            raise ValueError(f"Expected 2D array, got a 1D dask Series instead. {_RESHAPE_HINT}")
        X = _frame_to_array(estimator, X, reset)
    elif not is_dask_array(X):
        X = np.asarray(X)
        X = da.from_array(X, chunks=X.shape or (1,))
        _check_feature_names(estimator, X, reset=reset)
    else:
        _check_feature_names(estimator, X, reset=reset)
    if X.ndim == 1:
        raise ValueError(f"Expected 2D array, got 1D array instead: dask array of shape "
                         f"{X.shape}. {_RESHAPE_HINT}")
    if X.ndim != 2:
        raise ValueError(f"Found array with dim {X.ndim}, while dim <= 2 is required by "
                         f"{_name(estimator)}.")
    if any(np.isnan(c) for c in X.chunks[0]) or any(np.isnan(c) for c in X.chunks[1]):
        raise ValueError(f"X has unknown chunk sizes {X.chunks}: {_name(estimator)} needs to know "
                         "how many rows each block has. Call X.compute_chunk_sizes() first (or "
                         "use to_dask_array(lengths=True) on a dask DataFrame).")
    if X.shape[0] == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 "
                         f"is required by {_name(estimator)}.")
    if X.shape[1] == 0:
        raise ValueError(f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 "
                         f"is required by {_name(estimator)}.")
    if X.dtype.kind == "c":
        raise ValueError("Complex data not supported")
    if X.dtype.kind not in "biuf":
        raise TypeError(f"X has dtype {X.dtype}; {_name(estimator)} needs numeric features: "
                        "encode categorical columns first (e.g. with a OneHotEncoder).")
    _check_n_features(estimator, X.shape[1], reset)
    if X.dtype.kind != "f":
        X = X.astype(np.float64)
    # the network reads whole rows: one block across the feature axis
    return X.rechunk({1: -1}) if len(X.chunks[1]) > 1 else X


def _check_n_features(estimator: Any, n_features: int, reset: bool) -> None:
    if reset:
        estimator.n_features_in_ = int(n_features)
        return
    expected = getattr(estimator, "n_features_in_", None)
    if expected is not None and n_features != expected:
        raise ValueError(f"X has {n_features} features, but {_name(estimator)} is expecting "
                         f"{expected} features as input.")


def _check_dask_y(estimator: Any, X: Any, y: Any, multi_output: bool) -> Any:
    import dask.array as da

    if y is None:
        raise ValueError(f"{_name(estimator)} requires y to be passed, but the target y is None.")
    if is_dask_frame(y):
        y = y.to_dask_array(lengths=True)
    elif not is_dask_array(y):
        y = np.asarray(y)
        if y.shape[:1] == X.shape[:1]:
            y = da.from_array(y, chunks=(X.chunks[0],) + tuple((d,) for d in y.shape[1:]))
        else:
            y = da.from_array(y, chunks=y.shape or (1,))
    if any(np.isnan(c) for c in y.chunks[0]):
        raise ValueError(f"y has unknown chunk sizes {y.chunks}: call y.compute_chunk_sizes() "
                         "first (or use to_dask_array(lengths=True) on a dask Series).")
    if y.shape[0] != X.shape[0]:
        raise ValueError("Found input variables with inconsistent numbers of samples: "
                         f"[{X.shape[0]}, {y.shape[0]}]")
    if y.ndim == 2 and y.shape[1] == 1 and not multi_output:
        warnings.warn("A column-vector y was passed when a 1d array was expected. Please change "
                      "the shape of y to (n_samples, ), for example using ravel().",
                      DataConversionWarning, stacklevel=4)
        y = y[:, 0]
    if y.ndim > (2 if multi_output else 1):
        raise ValueError(f"y should be a 1d array, got a dask array of shape {y.shape} instead.")
    if multi_output and y.dtype.kind not in "biuf":
        raise ValueError(f"y has dtype {y.dtype}; {_name(estimator)} needs numeric targets.")
    # pair row block i of y with row block i of X, so each trainer task gets matching rows
    chunks = (X.chunks[0],) + tuple((d,) for d in y.shape[1:])
    return y.rechunk(chunks) if y.chunks != chunks else y


def _check_dask(estimator: Any, X: Any, y: Any, *, reset: bool, multi_output: bool) -> Checked:
    X = _check_dask_X(estimator, X, reset)
    if isinstance(y, str) and y == "no_validation":
        return Checked(X)
    return Checked(X, _check_dask_y(estimator, X, y, multi_output))


def finite_check(X: Any, y: Any = None) -> Any:
    """Lazy bool scalar: every value of X (and of a float y) is finite."""
    import dask.array as da

    ok = da.isfinite(X).all()
    if y is not None and y.dtype.kind == "f":
        ok = ok & da.isfinite(y).all()
    return ok


def raise_not_finite(X: Any, estimator: Any) -> None:
    raise ValueError(f"Input contains NaN or infinity: {_name(estimator)} does not accept "
                     "missing or infinite values. Impute them first, for example with "
                     "sklearn.impute.SimpleImputer, or drop those rows.")
