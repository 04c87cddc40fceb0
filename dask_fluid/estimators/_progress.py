"""Training progress: a live view fed by the runtime's events, and a loss-curve plot.

In Jupyter (an IPython kernel with ipywidgets) the view is a widget with a progress bar, the
numbers and a live loss curve per trainer (:mod:`._widget`); elsewhere, and in Jupyter without
ipywidgets, a text ``tqdm`` bar. Both read one
:class:`~dask_fluid.distributed.launch.progress.JobProgress`, so the samples/s shown are the
samples the trainers report having trained, and both redraw at most every
:data:`REFRESH_S` however many events arrive.
"""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

import time
from typing import Any

from ..distributed.launch.progress import JobProgress

#: the view redraws at most this often (the last state is always drawn on close)
REFRESH_S = 0.2


def in_notebook() -> bool:
    """Whether this runs in an IPython kernel that can show ipywidgets."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


class _TextView:
    """A ``tqdm`` bar over steps; the postfix has the epoch, loss, samples/s, step time and
    the slowest trainer."""

    def __init__(self, desc: str) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=None, desc=desc, unit="step", leave=True)

    def render(self, progress: JobProgress, final: bool = False) -> None:
        bar = self._bar
        if progress.rounds and bar.total != progress.rounds:
            bar.total = progress.rounds
        step = progress.step if not progress.rounds else min(progress.step, progress.rounds)
        bar.set_postfix(progress.describe(), refresh=False)
        if step > bar.n:
            bar.update(step - bar.n)  # redraws (tqdm's own mininterval applies)
        else:
            bar.refresh()

    def close(self) -> None:
        self._bar.close()


class ProgressBar:
    """Callable that turns runtime events into a live progress view.

    Every event is folded into :attr:`progress` (a ``JobProgress``); the view redraws at most
    every :data:`REFRESH_S`. Disabled (the events are still folded, nothing is shown) when
    ``enabled`` is False.

    Parameters
    ----------
    loss_name : str, optional
        Key of the loss in the events' ``fetches`` (default: the first fetched value).
    enabled : bool
    desc : str
    total_steps : int, optional
        Steps of the whole fit when the caller knows them (local training); distributed jobs
        announce theirs in their ``job`` event.
    widget : bool, optional
        True: the Jupyter widget; False: the text bar; None: the widget where it can show.
    """

    def __init__(self, loss_name: str | None, enabled: bool = True,
                 desc: str = "training", total_steps: int | None = None,
                 widget: bool | None = None) -> None:
        self.progress = JobProgress(loss_name, rounds=total_steps)
        self._view: Any = None
        self._drawn = 0.0
        if enabled:
            if widget if widget is not None else in_notebook():
                from ._widget import WidgetView

                self._view = WidgetView(desc)
            else:
                self._view = _TextView(desc)

    def __call__(self, event: dict) -> None:
        self.progress(event)
        if self._view is None or event.get("type") not in ("step", "job", "done"):
            return
        now = time.perf_counter()
        if now - self._drawn >= REFRESH_S:
            self._drawn = now
            self._view.render(self.progress)

    def close(self) -> None:
        """Draw the final state and release the view."""
        if self._view is not None:
            self._view.render(self.progress, final=True)
            self._view.close()
            self._view = None


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
