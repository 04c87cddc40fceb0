"""MLPClassifier, MLPRegressor, LinearClassifier, LinearRegressor: parameters and docs."""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

from numbers import Integral
from typing import Any

from sklearn.utils._param_validation import Interval, StrOptions

from ._base import FluidEstimatorBase
from ._classes import _FluidClassifier, _FluidRegressor

_MLP_PARAMS_DOC = """
    hidden_layer_sizes : tuple of int, default=(100,)
        Units of each hidden layer.
    activation : {"relu", "tanh", "logistic", "identity"}, default="relu"
        Activation of the hidden layers (Fluid ops ``relu``, ``tanh``, ``sigmoid``, none)."""

_COMMON_PARAMS_DOC = """
    solver : {"sgd", "momentum", "adam"}, default="adam"
        Fluid optimizer. ``"sgd"`` follows scikit-learn: with ``momentum > 0`` it is Fluid's
        Momentum optimizer (Nesterov when ``nesterovs_momentum``), with ``momentum=0`` plain
        SGD. ``"momentum"`` always uses the Momentum optimizer.
    alpha : float, default=0.0001
        L2 penalty. Applied as Fluid's ``L2Decay(alpha / batch_size)`` on the weights (not the
        biases), which is the gradient of scikit-learn's ``alpha / (2 n) ||W||²`` batch term.
    batch_size : int or "auto", default=200
        Minibatch size; ``"auto"`` is ``min(200, n_samples)``. In the distributed modes it is
        the batch of **each trainer**: a synchronous step sees ``batch_size * n_trainers`` rows.
    learning_rate_init : float, default=0.001
        Constant learning rate.
    max_iter : int, default=200
        Epochs (passes over the data).
    shuffle : bool, default=True
        Shuffle the samples every epoch (dask input in local mode: the block order and the
        rows within each block).
    random_state : int, RandomState instance or None, default=None
        Seeds the parameter initialisation (the program's ``random_seed``), the shuffling and
        the validation split.
    tol : float, default=1e-4
        Improvement of the loss (or validation score) below which an epoch counts as "no
        improvement" (local mode).
    verbose : bool, default=False
        Show a ``tqdm.auto`` progress bar (epoch, loss, samples/s) fed by the step events.
    warm_start : bool, default=False
        ``fit`` continues from the current parameters and optimizer state, in every mode
        (``pserver``: each pserver starts from its blocks of them).
    momentum : float, default=0.9
        Momentum of ``solver="sgd"``/``"momentum"``.
    nesterovs_momentum : bool, default=True
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the data and stop when the validation score stops
        improving; the best parameters are kept (local mode; dask input holds out whole
        blocks).
    validation_fraction : float, default=0.1
    beta_1, beta_2, epsilon : float, default=0.9, 0.999, 1e-8
        Adam's parameters.
    n_iter_no_change : int, default=10
        Epochs without improvement before stopping (local mode).
    mode : {"local", "pserver", "collective", "nccl2"}, default="local"
        ``"local"``: the Executor in this process; dask input is trained block by block, one
        block pulled at a time (the dataset is never gathered). ``"pserver"``: the program is
        transpiled and run by parameter servers and trainers on the Dask workers next to the
        data. ``"collective"``: all-reduce data parallelism (``backend``). ``"nccl2"``: the
        collective mode over NCCL on GPU workers (needs ``device="gpu"``).
    n_pservers : int, default=2
        Parameter servers (pserver mode).
    n_trainers : int or None, default=None
        Trainers; None = one per worker holding data. In pserver mode more trainers than
        workers run several trainer loops per worker (the data needs a row chunk per trainer).
    sync_mode : bool, default=True
        Synchronous pserver training (False: asynchronous).
    slice_var_up : bool, default=True
        Split parameters into blocks over the pservers (DistributeTranspilerConfig).
    split_method : {"RoundRobin", "HashName"} or PSDispatcher subclass, default="RoundRobin"
    min_block_size : int, default=8192
        Minimum elements per parameter block (>= 8192).
    enable_dc_asgd : bool, default=False
        Delay-compensated async SGD (with ``sync_mode=False``).
    backend : {"auto", "ring", "nccl"}, default="auto"
        All-reduce of ``mode="collective"``.
    device : {"cpu", "gpu"}, default="cpu"
        Where kernels run (``"gpu"`` needs CuPy and a CUDA GPU).
    elastic : bool, default=False
        Distributed modes: carry on within ``fit`` when a worker is lost. A lost trainer's rows
        go to the others and training restarts from the pservers' state (pserver mode) or
        from the variables of the rank that got furthest (collective and nccl2 modes); a lost
        pserver comes back from the latest round in ``checkpoint_dir``. See
        docs/reliability.md.
    min_trainers : int, default=1
        With ``elastic``: fail when fewer trainers would be left.
    checkpoint_dir : str or None, default=None
        Distributed modes: where a checkpoint is written every ``checkpoint_every`` steps
        (pserver mode, sync: by every pserver, what ``elastic`` restores a lost pserver from;
        collective and nccl2 modes: rank 0's variables in Fluid's files, which
        ``train_collective(resume_from=...)`` and ``fluid.io.load_persistables`` read).
    checkpoint_every : int, "epoch" or None, default=None
    client : distributed.Client or None, default=None
        Cluster of the distributed modes; None uses the current client
        (``distributed.get_client()``). A distributed mode without any client raises
        ValueError. Dropped when the estimator is pickled."""

_ATTRIBUTES_DOC = """
    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Column names of pandas or dask DataFrame input.
    coefs_ : list of ndarray
        Weight matrix of each layer, ``(n_in, n_out)``, as numpy.
    intercepts_ : list of ndarray
        Bias vector of each layer.
    loss_curve_ : list of float
        Mean training loss of each epoch (plus the L2 term).
    validation_scores_ : list of float or None
        Validation score of each epoch (``early_stopping=True``).
    best_loss_ : float or None
    n_iter_ : int
        Epochs run.
    t_ : int
        Training samples seen.
    n_outputs_ : int
        Units of the output layer.

    Notes
    -----
    The estimator keeps parameters as numpy arrays only (never a Program, an Executor or a
    client): it pickles small, and ``predict`` on numpy needs no Dask. ``predict`` on a dask
    array returns a lazy dask array (``map_blocks`` with an explicit ``meta``; cupy chunks
    give cupy results). Binary classifiers use two softmax outputs, so ``coefs_[-1]`` has two
    columns where scikit-learn has one logistic unit."""


def _doc(summary: str, *parts: str, example: str) -> str:
    return (summary + "\n\n    Parameters\n    ----------" + "".join(parts) + "\n"
            + _ATTRIBUTES_DOC + "\n\n    Examples\n    --------\n" + example)


def _common_init(self: FluidEstimatorBase, params: dict[str, Any]) -> None:
    for name, value in params.items():
        if name not in ("self", "__class__"):
            setattr(self, name, value)


_MLP_CONSTRAINTS = {
    **FluidEstimatorBase._parameter_constraints,
    "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
    "activation": [StrOptions({"relu", "tanh", "logistic", "identity"})],
}


class MLPClassifier(_FluidClassifier):
    _parameter_constraints = _MLP_CONSTRAINTS

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, solver="adam",
                 alpha=0.0001, batch_size=200, learning_rate_init=0.001, max_iter=200,
                 shuffle=True, random_state=None, tol=1e-4, verbose=False, warm_start=False,
                 momentum=0.9, nesterovs_momentum=True, early_stopping=False,
                 validation_fraction=0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 n_iter_no_change=10, mode="local", n_pservers=2, n_trainers=None,
                 sync_mode=True, slice_var_up=True, split_method="RoundRobin",
                 min_block_size=8192, enable_dc_asgd=False, backend="auto", device="cpu",
                 elastic=False, min_trainers=1, checkpoint_dir=None, checkpoint_every=None,
                 client=None):
        _common_init(self, locals())


class MLPRegressor(_FluidRegressor):
    _parameter_constraints = _MLP_CONSTRAINTS

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, solver="adam",
                 alpha=0.0001, batch_size=200, learning_rate_init=0.001, max_iter=200,
                 shuffle=True, random_state=None, tol=1e-4, verbose=False, warm_start=False,
                 momentum=0.9, nesterovs_momentum=True, early_stopping=False,
                 validation_fraction=0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 n_iter_no_change=10, mode="local", n_pservers=2, n_trainers=None,
                 sync_mode=True, slice_var_up=True, split_method="RoundRobin",
                 min_block_size=8192, enable_dc_asgd=False, backend="auto", device="cpu",
                 elastic=False, min_trainers=1, checkpoint_dir=None, checkpoint_every=None,
                 client=None):
        _common_init(self, locals())


class LinearClassifier(_FluidClassifier):
    def __init__(self, *, solver="adam", alpha=0.0001, batch_size=200,
                 learning_rate_init=0.001, max_iter=200, shuffle=True, random_state=None,
                 tol=1e-4, verbose=False, warm_start=False, momentum=0.9,
                 nesterovs_momentum=True, early_stopping=False, validation_fraction=0.1,
                 beta_1=0.9, beta_2=0.999, epsilon=1e-8, n_iter_no_change=10, mode="local",
                 n_pservers=2, n_trainers=None, sync_mode=True, slice_var_up=True,
                 split_method="RoundRobin", min_block_size=8192, enable_dc_asgd=False,
                 backend="auto", device="cpu", elastic=False, min_trainers=1,
                 checkpoint_dir=None, checkpoint_every=None, client=None):
        _common_init(self, locals())


class LinearRegressor(_FluidRegressor):
    def __init__(self, *, solver="adam", alpha=0.0001, batch_size=200,
                 learning_rate_init=0.001, max_iter=200, shuffle=True, random_state=None,
                 tol=1e-4, verbose=False, warm_start=False, momentum=0.9,
                 nesterovs_momentum=True, early_stopping=False, validation_fraction=0.1,
                 beta_1=0.9, beta_2=0.999, epsilon=1e-8, n_iter_no_change=10, mode="local",
                 n_pservers=2, n_trainers=None, sync_mode=True, slice_var_up=True,
                 split_method="RoundRobin", min_block_size=8192, enable_dc_asgd=False,
                 backend="auto", device="cpu", elastic=False, min_trainers=1,
                 checkpoint_dir=None, checkpoint_every=None, client=None):
        _common_init(self, locals())


MLPClassifier.__doc__ = _doc(
    "Multi-layer perceptron classifier trained as a Fluid program, locally or on Dask.",
    _MLP_PARAMS_DOC, _COMMON_PARAMS_DOC,
    example="""    >>> from sklearn.datasets import load_digits
    >>> from dask_fluid.estimators import MLPClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=5, random_state=0).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
""")
MLPRegressor.__doc__ = _doc(
    "Multi-layer perceptron regressor (half mean squared error) as a Fluid program.",
    _MLP_PARAMS_DOC, _COMMON_PARAMS_DOC,
    example="""    >>> import numpy as np
    >>> from dask_fluid.estimators import MLPRegressor
    >>> X = np.random.default_rng(0).normal(size=(100, 3)); y = X.sum(axis=1)
    >>> MLPRegressor(max_iter=5, random_state=0).fit(X, y).predict(X[:2]).shape
    (2,)
""")
LinearClassifier.__doc__ = _doc(
    "Multinomial logistic regression (no hidden layer) trained as a Fluid program.",
    _COMMON_PARAMS_DOC,
    example="""    >>> from sklearn.datasets import load_iris
    >>> from dask_fluid.estimators import LinearClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> LinearClassifier(max_iter=5, random_state=0).fit(X, y).decision_function(X).shape
    (150, 3)
""")
LinearRegressor.__doc__ = _doc(
    "Linear least-squares regression trained by SGD/Adam as a Fluid program.",
    _COMMON_PARAMS_DOC,
    example="""    >>> import numpy as np
    >>> from dask_fluid.estimators import LinearRegressor
    >>> X = np.random.default_rng(0).normal(size=(100, 3)); y = X @ [1.0, 2.0, 3.0]
    >>> LinearRegressor(max_iter=5, random_state=0).fit(X, y).coefs_[0].shape
    (3, 1)
""")
