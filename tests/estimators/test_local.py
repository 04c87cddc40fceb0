"""The estimators in local mode: sklearn tooling, pickling, labels, training options, errors."""

from __future__ import annotations

import pickle
import sys
import warnings

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris, make_regression
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from dask_fluid.estimators import (
    LinearClassifier,
    LinearRegressor,
    MLPClassifier,
    MLPRegressor,
    plot_loss_curve,
)

X_IRIS, Y_IRIS = load_iris(return_X_y=True)
X_REG, Y_REG = make_regression(n_samples=200, n_features=5, noise=0.1, random_state=0)
Y_REG = Y_REG / Y_REG.std()
FAST = dict(max_iter=60, learning_rate_init=0.01, random_state=0)

pytestmark = [pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
              pytest.mark.filterwarnings("ignore:Got `batch_size`:UserWarning")]


def test_lazy_export_from_package():
    import dask_fluid

    assert dask_fluid.MLPClassifier is MLPClassifier
    assert dask_fluid.LinearRegressor is LinearRegressor


@pytest.mark.parametrize("activation", ["relu", "tanh", "logistic", "identity"])
@pytest.mark.parametrize("solver", ["sgd", "momentum", "adam"])
def test_mlp_learns_iris(activation, solver):
    clf = make_pipeline(StandardScaler(), MLPClassifier(
        (16,), activation=activation, solver=solver, max_iter=80, learning_rate_init=0.05,
        random_state=0))
    assert clf.fit(X_IRIS, Y_IRIS).score(X_IRIS, Y_IRIS) > 0.85


def test_fitted_attributes_like_sklearn():
    clf = MLPClassifier((8, 4), **FAST).fit(X_IRIS, Y_IRIS)
    assert [c.shape for c in clf.coefs_] == [(4, 8), (8, 4), (4, 3)]
    assert [b.shape for b in clf.intercepts_] == [(8,), (4,), (3,)]
    assert clf.n_features_in_ == 4 and clf.n_iter_ == len(clf.loss_curve_)
    assert clf.t_ == clf.n_iter_ * len(X_IRIS)
    assert clf.loss_curve_[-1] < clf.loss_curve_[0]
    assert clf.best_loss_ == min(clf.loss_curve_)
    assert not hasattr(clf, "program_")


def test_clone_pipeline_gridsearch():
    base = MLPClassifier((8,), **FAST)
    assert clone(base).get_params() == base.get_params()
    grid = GridSearchCV(make_pipeline(StandardScaler(), base),
                        {"mlpclassifier__alpha": [1e-4, 1e-2]}, cv=2).fit(X_IRIS, Y_IRIS)
    assert grid.best_score_ > 0.8
    assert set(grid.best_estimator_.predict(X_IRIS)) <= {0, 1, 2}


def test_string_labels_and_proba():
    labels = np.array(["setosa", "versicolor", "virginica"])[Y_IRIS]
    clf = LinearClassifier(**FAST).fit(StandardScaler().fit_transform(X_IRIS), labels)
    assert list(clf.classes_) == list(labels[[0, 50, 100]])
    proba = clf.predict_proba(X_IRIS[:5])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.log(proba), clf.predict_log_proba(X_IRIS[:5]), atol=1e-10)
    assert clf.predict(X_IRIS[:5]).dtype == labels.dtype


def test_binary_decision_function_is_1d():
    y = (Y_IRIS > 0).astype(int)
    clf = LinearClassifier(**FAST).fit(X_IRIS, y)
    scores = clf.decision_function(X_IRIS)
    assert scores.shape == (150,)
    np.testing.assert_array_equal((scores > 0).astype(int), clf.predict(X_IRIS))


def test_regressors_single_and_multi_output():
    reg = MLPRegressor((16,), **FAST).fit(X_REG, Y_REG)
    assert reg.predict(X_REG).shape == (200,) and reg.score(X_REG, Y_REG) > 0.8
    Y2 = np.c_[Y_REG, -Y_REG]
    lin = LinearRegressor(max_iter=100, learning_rate_init=0.05, random_state=0).fit(X_REG, Y2)
    assert lin.predict(X_REG).shape == (200, 2) and lin.score(X_REG, Y2) > 0.95


def test_pickle_round_trip_has_no_client_and_predicts_on_numpy():
    clf = MLPClassifier((8,), **FAST).fit(X_IRIS, Y_IRIS)
    clf.client = object()  # stands for a Client: it must not travel
    restored = pickle.loads(pickle.dumps(clf))
    assert restored.client is None
    np.testing.assert_array_equal(restored.predict(X_IRIS), clf.predict(X_IRIS))
    assert isinstance(restored.predict(X_IRIS), np.ndarray)


def test_warm_start_continues_and_partial_fit():
    clf = MLPClassifier((8,), warm_start=True, **FAST).fit(X_IRIS, Y_IRIS)
    first = [c.copy() for c in clf.coefs_]
    clf.set_params(max_iter=5).fit(X_IRIS, Y_IRIS)
    assert clf.n_iter_ > 5 and len(clf.loss_curve_) == clf.n_iter_
    # continued from the fitted weights, not a fresh draw: close to where it was
    assert np.abs(clf.coefs_[0] - first[0]).max() < 0.5
    inc = LinearClassifier(**FAST)
    for _ in range(3):
        inc.partial_fit(X_IRIS, Y_IRIS, classes=[0, 1, 2])
    assert inc.n_iter_ == 3 and inc.t_ == 450


def test_partial_fit_errors():
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        MLPClassifier().partial_fit(X_IRIS, Y_IRIS)
    clf = MLPClassifier((4,), **FAST).partial_fit(X_IRIS[:100], Y_IRIS[:100], classes=[0, 1, 2])
    with pytest.raises(ValueError, match=r"y contains labels \[7\] that are not in classes_"):
        clf.partial_fit(X_IRIS[:3], [0, 7, 1])


def test_early_stopping_and_convergence_warning():
    clf = MLPClassifier((16,), early_stopping=True, n_iter_no_change=3, max_iter=300,
                        learning_rate_init=0.05, random_state=0).fit(X_IRIS, Y_IRIS)
    assert clf.n_iter_ < 300 and len(clf.validation_scores_) == clf.n_iter_
    assert clf.best_validation_score_ == max(clf.validation_scores_)
    with pytest.warns(ConvergenceWarning, match="Maximum iterations"):
        MLPClassifier((4,), max_iter=2, random_state=0).fit(X_IRIS, Y_IRIS)


def test_verbose_progress_bar(capsys):
    MLPClassifier((4,), max_iter=3, verbose=True, random_state=0).fit(X_IRIS, Y_IRIS)
    err = capsys.readouterr().err
    assert "MLPClassifier" in err and "3/3" in err and "loss=" in err


def test_plot_loss_curve_without_matplotlib(monkeypatch):
    clf = LinearClassifier(max_iter=3, random_state=0).fit(X_IRIS, Y_IRIS)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'dask-fluid\[plot\]'"):
        plot_loss_curve(clf)
    with pytest.raises(ValueError, match="not fitted"):
        plot_loss_curve(LinearClassifier())


# -- dask input in local mode (dask's threaded scheduler, no cluster) --------------------------
def _dask_iris():
    Xs = StandardScaler().fit_transform(X_IRIS).astype(np.float32)
    return da.from_array(Xs, chunks=(50, 2)), da.from_array(Y_IRIS, chunks=30), Xs


def test_local_mode_dask_array_block_by_block():
    Xd, yd, Xs = _dask_iris()
    clf = MLPClassifier((16,), max_iter=40, learning_rate_init=0.05, random_state=0)
    with dask.config.set(scheduler="sync"):
        clf.fit(Xd, yd)
    pred = clf.predict(Xd)
    assert isinstance(pred, da.Array) and pred.chunks == ((50, 50, 50),)
    assert isinstance(pred._meta, np.ndarray) and pred._meta.dtype == np.int64
    proba = clf.predict_proba(Xd)
    assert proba.shape == (150, 3) and proba.chunks[1] == (3,)
    np.testing.assert_array_equal(pred.compute(), clf.predict(Xs))
    assert clf.score(Xd, yd) > 0.85
    assert clf.t_ == 150 * clf.n_iter_


def test_dask_dataframe_input_keeps_feature_names():
    Xs = StandardScaler().fit_transform(X_IRIS)
    df = pd.DataFrame(Xs, columns=["a", "b", "c", "d"])
    ddf = dd.from_pandas(df, npartitions=3)
    ys = dd.from_pandas(pd.Series(Y_IRIS), npartitions=3)
    clf = LinearClassifier(max_iter=40, learning_rate_init=0.05, random_state=0).fit(ddf, ys)
    assert list(clf.feature_names_in_) == ["a", "b", "c", "d"]
    out = clf.predict(ddf)
    assert isinstance(out, da.Array) and out.shape == (150,)
    np.testing.assert_array_equal(out.compute(), clf.predict(df))


def test_dask_regressor_score_and_early_stopping_blocks():
    Xd = da.from_array(X_REG, chunks=40)
    yd = da.from_array(Y_REG, chunks=40)
    reg = LinearRegressor(max_iter=40, learning_rate_init=0.05, early_stopping=True,
                          random_state=0).fit(Xd, yd)
    assert reg.validation_scores_ and reg.score(Xd, yd) == pytest.approx(
        reg.score(X_REG, Y_REG), rel=1e-6)


# -- errors before any work --------------------------------------------------------------------
BAD_INPUTS = [
    (np.array([[1.0, np.nan], [0.0, 1.0]]), [0, 1], "Input X contains NaN"),
    (np.array([[1.0, np.inf], [0.0, 1.0]]), [0, 1], "Input X contains infinity"),
    (np.arange(4.0), [0, 1, 0, 1], r"(?s)got 1D array instead.*reshape\(-1, 1\)"),
    (np.ones((3, 2)), [0, 1], r"inconsistent numbers of samples: \[3, 2\]"),
    (np.empty((0, 2)), [], r"0 sample\(s\)"),
]


@pytest.mark.parametrize("X, y, match", BAD_INPUTS)
def test_bad_numpy_input(X, y, match):
    with pytest.raises(ValueError, match=match):
        MLPClassifier().fit(X, y)


def test_bad_dask_input_needs_no_compute():
    Xd = da.from_array(np.ones((6, 2)), chunks=3)
    yd = da.from_array(np.array([0, 1] * 3), chunks=3)
    unknown = Xd[Xd[:, 0] > 0]
    clf = MLPClassifier()

    def explode(*args, **kwargs):
        raise AssertionError("validation computed the data")

    with dask.config.set(scheduler=explode):
        with pytest.raises(ValueError, match=r"unknown chunk sizes.*compute_chunk_sizes\(\)"):
            clf.fit(unknown, yd)
        with pytest.raises(ValueError, match="Expected 2D array, got 1D array"):
            clf.fit(Xd[:, 0], yd)
        with pytest.raises(ValueError, match=r"inconsistent numbers of samples: \[6, 3\]"):
            clf.fit(Xd, yd[:3])
        with pytest.raises(ValueError, match=r"0 sample\(s\)"):
            clf.fit(Xd[:0], yd[:0])


def test_dask_nan_detected_before_training():
    Xd = da.from_array(np.array([[1.0, np.nan], [0.0, 1.0]]), chunks=1)
    with pytest.raises(ValueError, match="Input contains NaN or infinity"):
        MLPClassifier().fit(Xd, da.from_array(np.array([0, 1]), chunks=1))


def test_n_features_mismatch_in_predict():
    clf = MLPClassifier((4,), max_iter=2, random_state=0).fit(X_IRIS, Y_IRIS)
    msg = "X has 3 features, but MLPClassifier is expecting 4 features as input."
    with pytest.raises(ValueError, match=msg):
        clf.predict(X_IRIS[:, :3])
    with pytest.raises(ValueError, match=msg):
        clf.predict(da.from_array(X_IRIS[:, :3]))


def test_distributed_mode_without_client_is_a_clear_error():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from distributed import get_client

            get_client()
            pytest.skip("a Dask client is current in this process")
        except ValueError:
            pass
    with pytest.raises(ValueError, match="there is no Dask client"):
        MLPClassifier(mode="pserver").fit(X_IRIS, Y_IRIS)


def test_nccl2_without_gpu_device_raises_first():
    with pytest.raises(ValueError, match="mode='nccl2'.*needs device='gpu'"):
        MLPClassifier(mode="nccl2").fit(X_IRIS, Y_IRIS)


def test_bad_parameters():
    with pytest.raises(ValueError, match="'solver' parameter"):
        MLPClassifier(solver="lbfgs").fit(X_IRIS, Y_IRIS)
    with pytest.raises(ValueError, match="early_stopping=True is supported with mode='local'"):
        MLPClassifier(mode="pserver", early_stopping=True).fit(X_IRIS, Y_IRIS)


def test_fitted_estimator_html_heads_sklearn_display():
    """Issue 17: a fitted estimator shows its network, mode, topology and last loss."""
    clf = MLPClassifier((4,), max_iter=2, random_state=0)
    assert "dask-fluid-fitted" not in clf._repr_mimebundle_()["text/html"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X_IRIS, Y_IRIS)
    page = clf._repr_mimebundle_()["text/html"]
    assert page.startswith("<div class='dask-fluid-fitted'><b>MLPClassifier</b>, fitted")
    assert "4 → 4 relu → 3 softmax" in page and "one process" in page
    assert f"{clf.loss_curve_[-1]:.4f}" in page
    assert "sk-global" in page  # scikit-learn's own display follows
    lin = LinearClassifier(max_iter=2, random_state=0).fit(X_IRIS, Y_IRIS)
    assert "4 → 3 softmax" in lin._repr_mimebundle_()["text/html"]
