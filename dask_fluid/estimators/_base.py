"""Shared machinery of the dask_fluid estimators: parameter rules, the fit loops, prediction."""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

import logging
import os
import warnings
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ..executor import CPUPlace, CUDAPlace, Executor, Scope
from ..ops.registry import to_host
from . import _predict
from ._network import ACTIVATIONS, FEATURES, LABEL, NetSpec, build
from ._progress import ProgressBar
from ._repr import fitted_html
from ._validation import Checked, check_input, is_dask_array

logger = logging.getLogger(__name__)

MODES = ("local", "pserver", "collective", "nccl2")
_DISTRIBUTED = ("pserver", "collective", "nccl2")


class _Session:
    """A training program, its Executor and Scope, restored from a saved state."""

    def __init__(self, spec: NetSpec, state: dict[str, np.ndarray] | None, device: str) -> None:
        self.net = build(spec)
        self.exe = Executor(CUDAPlace(0) if device == "gpu" else CPUPlace())
        self.scope = Scope()
        self.exe.run(self.net.startup, scope=self.scope)
        self.persistables = [v.name for v in self.net.main.list_vars() if v.persistable]
        for name, value in (state or {}).items():
            # a state saved under another solver or shape is skipped: the startup value stays
            if name in self.scope and np.shape(self.scope.get(name)) == np.shape(value):
                self.scope.set(name, self.exe.to_place(np.array(value, copy=True)))

    def step(self, xb: np.ndarray, yb: np.ndarray) -> float:
        (loss,) = self.exe.run(self.net.main, feed={FEATURES: xb, LABEL: yb},
                               fetch_list=[self.net.loss], scope=self.scope)
        return float(loss.reshape(-1)[0])

    def get(self, name: str) -> np.ndarray:
        value = self.scope.get(name)
        return np.array(to_host(value), copy=True)

    def params(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return ([self.get(n) for n in self.net.weights], [self.get(n) for n in self.net.biases])

    def state(self) -> dict[str, np.ndarray]:
        return {name: self.get(name) for name in self.persistables}


class FluidEstimatorBase(BaseEstimator):
    """Base class of the estimators; subclasses set ``_task`` and the public ``__init__``."""

    _task = "classification"
    _parameter_constraints: dict = {
        "solver": [StrOptions({"sgd", "momentum", "adam"})],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "batch_size": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "learning_rate_init": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
        "momentum": [Interval(Real, 0, 1, closed="both")],
        "nesterovs_momentum": ["boolean"],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "beta_1": [Interval(Real, 0, 1, closed="left")],
        "beta_2": [Interval(Real, 0, 1, closed="left")],
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "mode": [StrOptions(set(MODES))],
        "n_pservers": [Interval(Integral, 1, None, closed="left")],
        "n_trainers": [Interval(Integral, 1, None, closed="left"), None],
        "sync_mode": ["boolean"],
        "slice_var_up": ["boolean"],
        "split_method": [StrOptions({"RoundRobin", "HashName"}), type],
        "min_block_size": [Interval(Integral, 8192, None, closed="left")],
        "enable_dc_asgd": ["boolean"],
        "backend": [StrOptions({"auto", "ring", "nccl"})],
        "device": [StrOptions({"cpu", "gpu"})],
        "elastic": ["boolean"],
        "min_trainers": [Interval(Integral, 1, None, closed="left")],
        "checkpoint_dir": [str, os.PathLike, None],
        "checkpoint_every": [StrOptions({"epoch"}), Interval(Integral, 1, None, closed="left"),
                             None],
        "client": "no_validation",
    }

    # -- Jupyter ----------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        """scikit-learn's display, headed by what the fit did when fitted (issue 17)."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if hasattr(self, "coefs_") and "text/html" in bundle:
            bundle["text/html"] = fitted_html(self) + bundle["text/html"]
        return bundle

    # -- pickling ---------------------------------------------------------------------------
    def __getstate__(self) -> dict:
        # a fitted estimator travels to workers and to disk without the client (xgboost does
        # the same): predictions need only the numpy parameters
        state = super().__getstate__() if hasattr(super(), "__getstate__") else dict(vars(self))
        state = dict(state)
        state["client"] = None
        return state

    # -- network description ----------------------------------------------------------------
    def _hidden(self) -> tuple[int, ...]:
        sizes = getattr(self, "hidden_layer_sizes", ())
        sizes = (sizes,) if isinstance(sizes, Integral) else tuple(sizes)
        if any(not isinstance(s, Integral) or s <= 0 for s in sizes):
            raise ValueError(f"hidden_layer_sizes must be positive ints, got {sizes}.")
        return tuple(int(s) for s in sizes)

    def _activation(self) -> str:
        return getattr(self, "activation", "identity")

    def _batch_size(self, n_samples: int) -> int:
        if self.batch_size == "auto":
            return min(200, n_samples)
        if self.batch_size > n_samples and self.mode == "local":
            warnings.warn("Got `batch_size` less than 1 or larger than sample size. It is going "
                          "to be clipped", stacklevel=4)
        return max(1, min(int(self.batch_size), n_samples))

    def _seed(self) -> int:
        return int(check_random_state(self.random_state).randint(1, 2**31 - 1))

    def _spec(self, n_outputs: int, batch_size: int, seed: int) -> NetSpec:
        return NetSpec(
            n_features=self.n_features_in_, hidden=self._hidden(), n_outputs=n_outputs,
            task=self._task, activation=self._activation(), solver=self.solver,
            learning_rate=float(self.learning_rate_init), momentum=float(self.momentum),
            nesterov=bool(self.nesterovs_momentum), beta_1=float(self.beta_1),
            beta_2=float(self.beta_2), epsilon=float(self.epsilon),
            # scikit-learn adds alpha/(2 n) ||W||² to each batch's loss, i.e. an L2 decay of
            # alpha / batch_size on the weights (not the biases)
            l2=float(self.alpha) / batch_size, seed=seed)

    # -- checks before any work -------------------------------------------------------------
    def _check_mode(self, incremental: bool) -> None:
        if self._activation() not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got "
                             f"{self._activation()!r}.")
        self._hidden()
        where = "partial_fit" if incremental else f"mode={self.mode!r}"
        if (self.mode == "local" or incremental) and (
                self.checkpoint_dir is not None or self.checkpoint_every is not None):
            raise NotImplementedError(f"checkpoint_dir and checkpoint_every are implemented "
                                      f"for fit with a distributed mode ('pserver', "
                                      f"'collective', 'nccl2'), not {where}")
        if self.elastic and (self.mode == "local" or incremental):
            raise NotImplementedError(f"elastic is implemented for fit with a distributed "
                                      f"mode ('pserver', 'collective', 'nccl2'), not {where}")
        if incremental or self.mode == "local":
            return
        if self.early_stopping:
            raise ValueError(f"early_stopping=True is supported with mode='local' only: the "
                             f"{self.mode} runtime trains max_iter epochs in one job. Use "
                             "mode='local', or pick max_iter from a validation curve.")
        if self.mode == "nccl2" and self.device != "gpu":
            raise ValueError("mode='nccl2' all-reduces with NCCL between GPUs and needs "
                             "device='gpu' and one GPU per worker (dask-cuda's LocalCUDACluster)."
                             " On CPU workers use mode='collective' (ring all-reduce) or "
                             "mode='pserver'.")

    def _compute(self, *collections: Any) -> tuple:
        """Compute small results (checks, scores) on the estimator's own client when it has
        one, so that a second client in the session never receives the work."""
        if self.client is not None:
            return tuple(self.client.compute(list(collections), sync=True))
        import dask

        return dask.compute(*collections)

    def _resolve_client(self) -> Any:
        if self.client is not None:
            return self.client
        try:
            from distributed import get_client

            return get_client()
        except (ImportError, ValueError) as err:
            raise ValueError(
                f"mode={self.mode!r} trains on a Dask cluster but there is no Dask client: "
                "create one first (from distributed import Client, LocalCluster; "
                "client = Client(LocalCluster())) or pass client=..., or use mode='local'."
            ) from err

    def _check_cluster(self, client: Any) -> None:
        """GPUs present for nccl2, asked of the workers before any task runs.

        The nccl backend's own probe (``client.run``, no task): Dask's NVML metrics are not
        a test, as NVML may be absent where CUDA works."""
        if self.mode != "nccl2":
            return
        from ..distributed.collective.nccl_setup import probe_gpus

        infos = probe_gpus(client)
        if not any(not info.problem for info in infos.values()):
            problems = sorted({info.problem for info in infos.values()})
            raise RuntimeError(
                f"mode='nccl2' needs GPU workers, but none of the {len(infos)} workers of "
                f"the cluster can run an NCCL rank ({'; '.join(problems) or 'no workers'}). "
                "Start the cluster with dask-cuda (LocalCUDACluster, one worker per GPU), or "
                "use mode='collective' or mode='pserver' on CPU workers.")

    # -- targets (overridden) ---------------------------------------------------------------
    def _prepare_targets(self, data: Checked, first: bool, incremental: bool,
                         classes: Any) -> tuple[Any, int]:
        raise NotImplementedError

    # -- fit --------------------------------------------------------------------------------
    def _fit(self, X: Any, y: Any, incremental: bool, classes: Any = None) -> FluidEstimatorBase:
        self._validate_params()
        self._check_mode(incremental)
        first = not hasattr(self, "coefs_") or not (incremental or self.warm_start)
        distributed = self.mode in _DISTRIBUTED and not incremental
        data = check_input(self, X, y, reset=first, multi_output=self._task == "regression")
        client = None
        if distributed:
            client = self._resolve_client()
            self._check_cluster(client)
        Y, n_outputs = self._prepare_targets(data, first, incremental, classes)
        n_samples = data.X.shape[0]
        batch_size = self._batch_size(n_samples)
        seed = self._seed()
        spec = self._spec(n_outputs, batch_size, seed)
        if first:
            self._init_progress_attrs()
        if distributed:
            self._fit_distributed(client, data.X, Y, spec, batch_size, seed)
        else:
            self._fit_local(data.X, Y, spec, batch_size, seed, incremental, first)
        return self

    def _init_progress_attrs(self) -> None:
        self.loss_curve_: list[float] = []
        self.n_iter_ = 0
        self.t_ = 0
        self.best_loss_: float | None = np.inf
        self._no_improvement_count = 0
        self.validation_scores_: list[float] | None = None
        self.best_validation_score_: float | None = None
        self._state: dict[str, np.ndarray] | None = None

    def _set_params_from(self, coefs: list[np.ndarray], intercepts: list[np.ndarray]) -> None:
        self.coefs_ = [np.asarray(c) for c in coefs]
        self.intercepts_ = [np.asarray(b).reshape(-1) for b in intercepts]
        self.n_layers_ = len(self.coefs_) + 1
        self.n_outputs_ = int(self.coefs_[-1].shape[1])
        self.out_activation_ = "softmax" if self._task == "classification" else "identity"

    # -- local ------------------------------------------------------------------------------
    def _fit_local(self, X: Any, Y: Any, spec: NetSpec, batch_size: int, seed: int,
                   incremental: bool, first: bool) -> None:
        session = _Session(spec, None if first else self._state, self.device)
        rng = np.random.default_rng(seed)
        early = self.early_stopping and not incremental
        lazy = is_dask_array(X)
        X_val = Y_val = None
        if early:
            X, Y, X_val, Y_val = self._validation_split(X, Y, seed)
            self.validation_scores_ = self.validation_scores_ or []
            if self.best_validation_score_ is None:
                self.best_validation_score_ = -np.inf
            self.best_loss_ = None
        elif not lazy:
            X = np.ascontiguousarray(X, dtype=np.float32)
        epochs = 1 if incremental else self.max_iter
        per_epoch = _steps_per_epoch(X, batch_size)
        progress = ProgressBar(session.net.loss.name, enabled=bool(self.verbose),
                               desc=type(self).__name__,
                               total_steps=None if per_epoch is None else epochs * per_epoch)
        best = None
        step = 0  # global, as the distributed runtimes count
        try:
            for epoch in range(epochs):
                total, seen = 0.0, 0
                for xb, yb in self._batches(X, Y, batch_size, rng, lazy):
                    loss = session.step(xb, yb)
                    total += loss * len(xb)
                    seen += len(xb)
                    step += 1
                    progress({"type": "step", "rank": 0, "epoch": epoch, "step": step - 1,
                              "samples": len(xb),
                              "fetches": {session.net.loss.name: loss}})
                self.t_ += seen
                self.n_iter_ += 1
                penalty = 0.5 * spec.l2 * sum(float((session.get(w) ** 2).sum())
                                              for w in session.net.weights)
                self.loss_curve_.append(total / max(seen, 1) + penalty)
                if incremental:
                    self.best_loss_ = min(self.best_loss_ or np.inf, self.loss_curve_[-1])
                    continue
                improved = self._update_no_improvement_count(session, X_val, Y_val, early)
                if improved and early:
                    best = session.params()
                if self._no_improvement_count > self.n_iter_no_change:
                    what = "Validation score" if early else "Training loss"
                    logger.info("%s did not improve more than tol=%f for %d consecutive "
                                "epochs. Stopping.", what, self.tol, self.n_iter_no_change)
                    break
                if epoch == epochs - 1:
                    warnings.warn(f"Stochastic Optimizer: Maximum iterations ({self.max_iter}) "
                                  "reached and the optimization hasn't converged yet.",
                                  ConvergenceWarning, stacklevel=3)
        finally:
            progress.close()
        self._state = session.state()
        coefs, intercepts = best if best is not None else session.params()
        self._set_params_from(coefs, intercepts)

    def _batches(self, X: Any, Y: Any, batch_size: int, rng: np.random.Generator,
                 lazy: bool):
        """Minibatches of one epoch. Dask input: one block at a time, pulled in a shuffled
        block order, so the whole dataset never sits in this process."""
        if not lazy:
            yield from _numpy_batches(X, Y, batch_size, rng, self.shuffle)
            return
        order = rng.permutation(X.numblocks[0]) if self.shuffle else range(X.numblocks[0])
        for i in order:
            xb, yb = self._compute(X.blocks[int(i)], Y.blocks[int(i)])
            yield from _numpy_batches(np.asarray(xb, dtype=np.float32), np.asarray(yb),
                                      batch_size, rng, self.shuffle)

    def _validation_split(self, X: Any, Y: Any, seed: int) -> tuple:
        if is_dask_array(X):
            n_blocks = X.numblocks[0]
            if n_blocks < 2:
                raise ValueError("early_stopping with a dask array in mode='local' holds out "
                                 "whole blocks for validation and needs at least 2 row blocks;"
                                 f" got {n_blocks}. Rechunk X, or pass numpy arrays.")
            n_val = min(n_blocks - 1, max(1, round(self.validation_fraction * n_blocks)))
            order = np.random.default_rng(seed).permutation(n_blocks)
            val, train = np.sort(order[:n_val]), np.sort(order[n_val:])
            return X.blocks[train], Y.blocks[train], X.blocks[val], Y.blocks[val]
        stratify = Y.reshape(-1) if self._task == "classification" else None
        try:
            X, X_val, Y, Y_val = train_test_split(
                X, Y, test_size=self.validation_fraction, random_state=seed % (2**31),
                stratify=stratify)
        except ValueError as err:
            raise ValueError(f"early_stopping could not hold out validation_fraction="
                             f"{self.validation_fraction} of the samples: {err}") from err
        return np.ascontiguousarray(X, dtype=np.float32), Y, X_val, Y_val

    def _update_no_improvement_count(self, session: _Session, X_val: Any, Y_val: Any,
                                     early: bool) -> bool:
        """scikit-learn's rule; returns whether this epoch is the best so far."""
        if early:
            score = self._validation_score(session, X_val, Y_val)
            self.validation_scores_.append(score)
            if score < self.best_validation_score_ + self.tol:
                self._no_improvement_count += 1
            else:
                self._no_improvement_count = 0
            if score > self.best_validation_score_:
                self.best_validation_score_ = score
                return True
            return False
        last = self.loss_curve_[-1]
        if last > self.best_loss_ - self.tol:
            self._no_improvement_count += 1
        else:
            self._no_improvement_count = 0
        if last < self.best_loss_:
            self.best_loss_ = last
            return True
        return False

    def _validation_score(self, session: _Session, X_val: Any, Y_val: Any) -> float:
        coefs, intercepts = session.params()
        act = self._activation()
        if is_dask_array(X_val):
            blocks = [self._compute(X_val.blocks[i], Y_val.blocks[i])
                      for i in range(X_val.numblocks[0])]
            outs = [_predict.forward(xb, coefs, intercepts, act) for xb, _ in blocks]
            z, Y_val = np.concatenate(outs), np.concatenate([yb for _, yb in blocks])
        else:
            z = _predict.forward(X_val, coefs, intercepts, act)
        if self._task == "classification":
            return float(np.mean(z.argmax(axis=1) == Y_val.reshape(-1)))
        return float(r2_score(Y_val, z))

    # -- distributed ------------------------------------------------------------------------
    def _fit_distributed(self, client: Any, X: Any, Y: Any, spec: NetSpec, batch_size: int,
                         seed: int) -> None:
        net = build(spec)
        feed = {FEATURES: X.astype(np.float32), LABEL: Y}
        loss_name = net.loss.name
        progress = ProgressBar(loss_name, enabled=bool(self.verbose),
                               desc=f"{type(self).__name__} ({self.mode})")
        # what both runtimes take alike; warm_start: the last fit's parameters and optimizer
        # state, as in local mode
        common = dict(epochs=self.max_iter, batch_size=batch_size, fetch_list=(loss_name,),
                      shuffle=self.shuffle, seed=seed, callbacks=(progress,),
                      trainers=self.n_trainers, elastic=self.elastic,
                      min_trainers=self.min_trainers, checkpoint_dir=self.checkpoint_dir,
                      checkpoint_every=self.checkpoint_every,
                      initial_values=self._state if self.warm_start and hasattr(
                          self, "coefs_") else None)
        try:
            if self.mode == "pserver":
                from ..distributed.launch.pserver_runtime import train_pserver

                result = train_pserver(client, net.main, net.startup, feed,
                                       config=self._transpiler_config(),
                                       pservers=self.n_pservers, sync_mode=self.sync_mode,
                                       **common)
            else:
                from ..distributed.collective.runtime import train_collective

                backend = "nccl" if self.mode == "nccl2" else self.backend
                result = train_collective(client, net.main, net.startup, feed,
                                          backend=backend, device=self.device, **common)
        finally:
            progress.close()
        self._set_params_from([result.params[n] for n in net.weights],
                              [result.params[n] for n in net.biases])
        self._state = {n: np.asarray(v) for n, v in result.params.items()}
        self.loss_curve_ = _epoch_losses(result.history, loss_name, self.max_iter)
        penalty = 0.5 * spec.l2 * sum(float((c.astype(np.float64) ** 2).sum())
                                      for c in self.coefs_)
        self.loss_curve_ = [v + penalty for v in self.loss_curve_]
        self.n_iter_ = self.max_iter
        self.t_ = int(result.samples)
        self.best_loss_ = min(self.loss_curve_) if self.loss_curve_ else None
        self.fit_summary_ = result.summary
        self.samples_per_s_ = float(result.samples_per_s)

    def _transpiler_config(self) -> Any:
        from ..transpiler import DistributeTranspilerConfig, HashName, RoundRobin

        config = DistributeTranspilerConfig()
        config.slice_var_up = bool(self.slice_var_up)
        split = self.split_method
        config.split_method = {"RoundRobin": RoundRobin, "HashName": HashName}.get(split, split)
        config.min_block_size = int(self.min_block_size)
        config.enable_dc_asgd = bool(self.enable_dc_asgd)
        return config

    # -- prediction -------------------------------------------------------------------------
    def _checked_X(self, X: Any) -> Any:
        check_is_fitted(self)
        return check_input(self, X, reset=False).X

    def _params(self) -> tuple[list[np.ndarray], list[np.ndarray], str]:
        return self.coefs_, self.intercepts_, self._activation()

    def _apply(self, X: Any, func: Any, *, out_dtype: Any, n_out: int | None,
               **kwargs: Any) -> Any:
        """Run ``func`` on numpy input, or lazily on every row block of a dask array.

        ``n_out=None`` makes a 1-D result (``drop_axis=1``); otherwise ``(n, n_out)``.
        """
        coefs, intercepts, act = self._params()
        if not is_dask_array(X):
            return func(X, coefs, intercepts, act, **kwargs)
        meta_like = X._meta
        if np.dtype(out_dtype).kind in "OUS":
            meta_like = np.empty((0,))  # labels that are strings or objects stay numpy
        shape = (0,) if n_out is None else (0, n_out)
        meta = np.empty_like(meta_like, shape=shape, dtype=out_dtype)
        if n_out is None:
            return X.map_blocks(func, coefs, intercepts, act, dtype=out_dtype, drop_axis=1,
                                meta=meta, **kwargs)
        return X.map_blocks(func, coefs, intercepts, act, dtype=out_dtype,
                            chunks=(X.chunks[0], (n_out,)), meta=meta, **kwargs)


def _numpy_batches(X: np.ndarray, Y: np.ndarray, batch_size: int, rng: np.random.Generator,
                   shuffle: bool):
    n = X.shape[0]
    # shuffle indices, not the arrays, so no copy of the data is made per epoch
    idx = rng.permutation(n) if shuffle else np.arange(n)
    for start in range(0, n, batch_size):
        b = idx[start:start + batch_size]
        yield X[b], Y[b]


def _steps_per_epoch(X: Any, batch_size: int) -> int | None:
    """Steps of one local epoch (dask input: batched block by block); None if unknown."""
    chunks = X.chunks[0] if is_dask_array(X) else (len(X),)
    if any(c != c for c in chunks):  # unknown chunk sizes are nan
        return None
    return sum(-(-int(c) // batch_size) for c in chunks)


def _epoch_losses(history: list[dict], loss_name: str, epochs: int) -> list[float]:
    """Sample-weighted mean loss per epoch over all trainers' step events."""
    sums = np.zeros(epochs)
    counts = np.zeros(epochs)
    for event in history:
        if event.get("type", "step") != "step" or loss_name not in event.get("fetches", {}):
            continue
        e = int(event.get("epoch", 0))
        if 0 <= e < epochs:
            w = float(event.get("samples", 1)) or 1.0
            sums[e] += w * float(event["fetches"][loss_name])
            counts[e] += w
    return [float(s / c) for s, c in zip(sums, counts, strict=True) if c > 0]
