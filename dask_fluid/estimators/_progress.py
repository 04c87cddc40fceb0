"""Training progress: a tqdm.auto bar fed by step events, and a loss-curve plot."""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

import time
from typing import Any


class ProgressBar:
    """Callable that turns runtime ``step`` events into a ``tqdm.auto`` bar over epochs.

    ``tqdm.auto`` renders as a widget in Jupyter and as text in a terminal. The postfix shows
    the epoch, the running mean loss of the epoch and the samples per second of all trainers.
    Disabled (a no-op) when ``enabled`` is False.

    Parameters
    ----------
    epochs : int
        Length of the bar.
    loss_name : str
        Key of the loss in the events' ``fetches``.
    enabled : bool
    desc : str
    """

    def __init__(self, epochs: int, loss_name: str, enabled: bool = True,
                 desc: str = "training") -> None:
        self.loss_name = loss_name
        self.enabled = enabled
        self._bar: Any = None
        self._epoch = -1
        self._loss_sum = self._loss_n = 0.0
        self._samples = 0
        self._start = time.perf_counter()
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=epochs, desc=desc, unit="epoch", leave=True)

    def __call__(self, event: dict) -> None:
        if self._bar is None or event.get("type") != "step":
            return
        epoch = int(event.get("epoch", 0))
        if epoch != self._epoch:
            if self._epoch >= 0:
                self._bar.update(epoch - self._epoch)
            self._epoch, self._loss_sum, self._loss_n = epoch, 0.0, 0.0
        loss = event.get("fetches", {}).get(self.loss_name)
        if loss is not None:
            self._loss_sum += float(loss)
            self._loss_n += 1
        self._samples += int(event.get("samples", 0))
        rate = self._samples / max(time.perf_counter() - self._start, 1e-9)
        self._bar.set_postfix(epoch=epoch + 1,
                              loss=f"{self._loss_sum / max(self._loss_n, 1):.4f}",
                              samples_s=f"{rate:,.0f}", refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            if self._epoch >= 0:
                self._bar.update(self._bar.total - self._bar.n if self._bar.total else 1)
            self._bar.close()
            self._bar = None


def plot_loss_curve(estimator: Any, ax: Any = None, **plot_kwargs: Any) -> Any:
    """Plot ``estimator.loss_curve_`` (and ``validation_scores_`` on a twin axis).

    Parameters
    ----------
    estimator : fitted dask_fluid estimator
    ax : matplotlib Axes, optional
        Created with ``plt.subplots()`` when omitted.
    **plot_kwargs
        Passed to ``ax.plot`` for the loss line.

    Returns
    -------
    ax : matplotlib Axes

    Examples
    --------
    >>> from dask_fluid.estimators import MLPClassifier, plot_loss_curve
    >>> clf = MLPClassifier(max_iter=20).fit(X, y)  # doctest: +SKIP
    >>> plot_loss_curve(clf)  # doctest: +SKIP
    """
    curve = getattr(estimator, "loss_curve_", None)
    if curve is None:
        raise ValueError(f"{type(estimator).__name__} is not fitted: call fit() before "
                         "plot_loss_curve()")
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError("plot_loss_curve needs matplotlib: pip install 'dask-fluid[plot]' "
                          "(or pip install matplotlib)") from err
    if ax is None:
        _, ax = plt.subplots()
    epochs = range(1, len(curve) + 1)
    ax.plot(epochs, curve, label="training loss", **plot_kwargs)
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    scores = getattr(estimator, "validation_scores_", None)
    if scores:
        twin = ax.twinx()
        twin.plot(range(1, len(scores) + 1), scores, color="tab:orange",
                  label="validation score")
        twin.set_ylabel("validation score")
    ax.set_title(type(estimator).__name__)
    return ax
