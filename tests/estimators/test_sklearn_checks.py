"""scikit-learn's estimator checks for every dask_fluid estimator (local mode)."""

from __future__ import annotations

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from dask_fluid.estimators import (
    LinearClassifier,
    LinearRegressor,
    MLPClassifier,
    MLPRegressor,
)

# small networks and few epochs keep the ~50 checks per estimator fast; the learning rate is
# raised so that check_classifiers_train / check_regressors_train still reach their thresholds
ESTIMATORS = [
    MLPClassifier(hidden_layer_sizes=(16,), max_iter=100, learning_rate_init=0.01,
                  batch_size="auto", random_state=0),
    MLPRegressor(hidden_layer_sizes=(16,), max_iter=100, learning_rate_init=0.01,
                 batch_size="auto", random_state=0),
    LinearClassifier(max_iter=100, learning_rate_init=0.01, batch_size="auto", random_state=0),
    LinearRegressor(max_iter=100, learning_rate_init=0.01, batch_size="auto", random_state=0),
]

#: check name -> why it is expected to fail, per estimator class
EXPECTED_FAILURES: dict[str, dict[str, str]] = {}


def _expected(estimator) -> dict[str, str]:
    return EXPECTED_FAILURES.get(type(estimator).__name__, {})


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected)
def test_sklearn_compatible(estimator, check):
    check(estimator)
