"""The public estimators: MLP and linear classifiers and regressors on Fluid programs."""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import _check_partial_fit_first_call, check_classification_targets
from sklearn.utils.validation import check_is_fitted

from . import _predict
from ._base import FluidEstimatorBase
from ._validation import Checked, check_input, finite_check, is_dask_array, raise_not_finite


class _FluidClassifier(ClassifierMixin, FluidEstimatorBase):
    """Classification: labels ↔ int64 class indices, softmax outputs."""

    _task = "classification"

    def fit(self, X: Any, y: Any) -> _FluidClassifier:
        """Train on ``X`` (n_samples, n_features) and labels ``y`` (n_samples,).

        Parameters
        ----------
        X : {array-like, dask array, dask DataFrame} of shape (n_samples, n_features)
        y : {array-like, dask array, dask Series} of shape (n_samples,)

        Returns
        -------
        self : object
        """
        return self._fit(X, y, incremental=False)

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> _FluidClassifier:
        """One epoch over ``(X, y)`` in this process, continuing from the current state.

        Runs the Executor in the calling process whatever ``mode`` is, so it works inside a
        Dask task on one block (dask-ml's ``Incremental`` and ``HyperbandSearchCV`` call it
        that way). ``classes`` is required on the first call.

        Parameters
        ----------
        X : {array-like, dask array} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        classes : array-like of shape (n_classes,), default=None
            Every label that ``y`` can hold over all calls.

        Returns
        -------
        self : object
        """
        return self._fit(X, y, incremental=True, classes=classes)

    def _prepare_targets(self, data: Checked, first: bool, incremental: bool,
                         classes: Any) -> tuple[Any, int]:
        y = data.y
        if data.lazy:
            import dask.array as da

            # one small job: a bool and the distinct labels come back, never the data
            ok, labels = self._compute(finite_check(data.X), da.unique(y))
            if not ok:
                raise_not_finite(data.X, self)
            check_classification_targets(labels)
        else:
            check_classification_targets(y)
            labels = np.unique(y)
        if incremental:
            _check_partial_fit_first_call(self, classes)
        elif first:
            self.classes_ = labels
        elif not np.array_equal(labels, self.classes_):
            raise ValueError("warm_start can only be used where `y` has the same classes as in "
                             f"the previous call to fit. Previously got {self.classes_}, `y` "
                             f"has {labels}")
        unseen = np.setdiff1d(labels, self.classes_)
        if unseen.size:
            raise ValueError(f"y contains labels {unseen.tolist()} that are not in classes_ "
                             f"{self.classes_.tolist()}: pass every possible label as "
                             "classes= on the first call to partial_fit.")
        if data.lazy:
            Y = y.map_blocks(_predict.encode_labels_block, self.classes_, dtype=np.int64,
                             chunks=(y.chunks[0], (1,)), new_axis=1,
                             meta=np.empty((0, 1), dtype=np.int64))
        else:
            Y = _predict.encode_labels_block(y, self.classes_)
        return Y, len(self.classes_)

    def decision_function(self, X: Any) -> Any:
        """Class scores (logits).

        Parameters
        ----------
        X : {array-like, dask array, dask DataFrame} of shape (n_samples, n_features)

        Returns
        -------
        scores : ndarray or dask array of shape (n_samples,) or (n_samples, n_classes)
            For two classes, the score of ``classes_[1]`` relative to ``classes_[0]``.
        """
        X = self._checked_X(X)
        n = len(self.classes_)
        return self._apply(X, _predict.decision_block, out_dtype=np.float64,
                           n_out=None if n == 2 else n)

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities, shape (n_samples, n_classes); dask in, dask out."""
        X = self._checked_X(X)
        return self._apply(X, _predict.proba_block, out_dtype=np.float64,
                           n_out=len(self.classes_))

    def predict_log_proba(self, X: Any) -> Any:
        """Log of :meth:`predict_proba`, computed stably."""
        X = self._checked_X(X)
        return self._apply(X, _predict.log_proba_block, out_dtype=np.float64,
                           n_out=len(self.classes_))

    def predict(self, X: Any) -> Any:
        """Predicted labels, shape (n_samples,); dask in, dask out (lazy)."""
        X = self._checked_X(X)
        return self._apply(X, _predict.predict_class_block, out_dtype=self.classes_.dtype,
                           n_out=None, classes=self.classes_)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy; with dask input it is computed on the cluster."""
        if sample_weight is None and (is_dask_array(X) or _is_frame(X)):
            check_is_fitted(self)
            data = check_input(self, X, y, reset=False)
            (accuracy,) = self._compute((self.predict(data.X) == data.y).mean())
            return float(accuracy)
        return super().score(X, y, sample_weight)


class _FluidRegressor(RegressorMixin, FluidEstimatorBase):
    """Regression: float32 targets, one output unit per target."""

    _task = "regression"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X: Any, y: Any) -> _FluidRegressor:
        """Train on ``X`` (n_samples, n_features) and targets ``y``.

        Parameters
        ----------
        X : {array-like, dask array, dask DataFrame} of shape (n_samples, n_features)
        y : {array-like, dask array} of shape (n_samples,) or (n_samples, n_targets)

        Returns
        -------
        self : object
        """
        return self._fit(X, y, incremental=False)

    def partial_fit(self, X: Any, y: Any) -> _FluidRegressor:
        """One epoch over ``(X, y)`` in this process (works inside a Dask task)."""
        return self._fit(X, y, incremental=True)

    def _prepare_targets(self, data: Checked, first: bool, incremental: bool,
                         classes: Any) -> tuple[Any, int]:
        y = data.y
        if data.lazy:
            (ok,) = self._compute(finite_check(data.X, y))
            if not bool(ok):
                raise_not_finite(data.X, self)
        n_outputs = 1 if y.ndim == 1 else int(y.shape[1])
        if first:
            self._y_ravel = y.ndim == 1
        elif n_outputs != self.n_outputs_:
            raise ValueError(f"y has {n_outputs} targets, but {type(self).__name__} was "
                             f"fitted with {self.n_outputs_}.")
        Y = y.reshape(-1, 1) if y.ndim == 1 else y
        if data.lazy and y.ndim == 1:
            Y = y[:, None]
        return Y.astype(np.float32), n_outputs

    def predict(self, X: Any) -> Any:
        """Predictions, shape (n_samples,) or (n_samples, n_targets); dask in, dask out."""
        X = self._checked_X(X)
        ravel = bool(self._y_ravel)
        return self._apply(X, _predict.predict_value_block, out_dtype=np.float64,
                           n_out=None if ravel else self.n_outputs_, ravel=ravel)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """R² (uniform average over targets); with dask input computed on the cluster."""
        if sample_weight is None and (is_dask_array(X) or _is_frame(X)):
            check_is_fitted(self)
            data = check_input(self, X, y, reset=False, multi_output=True)
            pred, yt = self.predict(data.X), data.y.astype(np.float64)
            ss_res = ((yt - pred) ** 2).sum(axis=0)
            ss_tot = ((yt - yt.mean(axis=0)) ** 2).sum(axis=0)
            ss_res, ss_tot = self._compute(ss_res, ss_tot)
            ss_tot = np.where(ss_tot == 0, np.nan, ss_tot)
            r2 = np.where(np.isnan(ss_tot), np.where(ss_res == 0, 1.0, 0.0),
                          1 - ss_res / np.nan_to_num(ss_tot, nan=1.0))
            return float(np.mean(r2))
        return super().score(X, y, sample_weight)


def _is_frame(x: Any) -> bool:
    from ._validation import is_dask_frame

    return is_dask_frame(x)
