"""The Jupyter view of training progress: an ipywidgets box with a live loss curve.

The curve is inline SVG in an ``HTML`` widget: it needs no plotting library and no JavaScript
extension, and the notebook keeps it in the widget state after the run.
"""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

import contextvars
import html
import threading

from ..distributed.launch.progress import JobProgress

#: one colour per trainer (Bokeh's Category10, as on the dashboard page)
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
WIDTH, HEIGHT, PAD = 420, 150, 34


def loss_svg(progress: JobProgress) -> str:
    """An SVG line chart of each trainer's loss against the step."""
    curves = [(t.rank, t.curve) for t in sorted(progress.trainers.values(),
                                                key=lambda t: t.rank) if len(t.curve)]
    if not curves:
        return '<svg class="dask-fluid-loss" width="0" height="0"></svg>'
    xs = [x for _, c in curves for x in c.steps]
    ys = [y for _, c in curves for y in c.losses]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(ys), max(ys)
    y1 = y1 if y1 > y0 else y0 + 1.0
    w, h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def px(x: float) -> float:
        return PAD + (x - x0) / (x1 - x0) * w

    def py(y: float) -> float:
        return PAD + (1.0 - (y - y0) / (y1 - y0)) * h

    lines = []
    for rank, curve in curves:
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(curve.steps, curve.losses,
                                                                       strict=True))
        color = COLORS[rank % len(COLORS)]
        lines.append(f'<polyline class="trainer-{rank}" data-points="{len(curve)}" '
                     f'fill="none" stroke="{color}" stroke-width="1.5" points="{points}"/>')
        lines.append(f'<text x="{WIDTH - PAD}" y="{PAD - 6 - 12 * rank}" text-anchor="end" '
                     f'font-size="11" fill="{color}">trainer {rank}</text>')
    axes = (f'<line x1="{PAD}" y1="{PAD + h}" x2="{PAD + w}" y2="{PAD + h}" stroke="#999"/>'
            f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{PAD + h}" stroke="#999"/>'
            f'<text x="{PAD - 4}" y="{PAD + 4}" text-anchor="end" font-size="10">{y1:.3g}</text>'
            f'<text x="{PAD - 4}" y="{PAD + h}" text-anchor="end" font-size="10">{y0:.3g}</text>'
            f'<text x="{PAD}" y="{PAD + h + 14}" font-size="10">step {x0}</text>'
            f'<text x="{PAD + w}" y="{PAD + h + 14}" text-anchor="end" font-size="10">{x1}</text>'
            f'<text x="{PAD}" y="{PAD - 20}" font-size="11">loss</text>')
    return (f'<svg class="dask-fluid-loss" width="{WIDTH}" height="{HEIGHT}" '
            f'xmlns="http://www.w3.org/2000/svg">{axes}{"".join(lines)}</svg>')


def stats_html(progress: JobProgress) -> str:
    """One line of numbers; the exact samples/s also as a data attribute (tests read it)."""
    parts = [f"{html.escape(k)} <b>{html.escape(v)}</b>" for k, v in
             progress.describe().items()]
    rate = progress.samples_per_s
    return (f'<span class="dask-fluid-stats" data-samples-per-s="{rate:.1f}" '
            f'data-trained="{progress.trained}">{" &middot; ".join(parts)}</span>')


class WidgetView:
    """A progress bar, the numbers and the loss curve, displayed once and updated in place."""

    def __init__(self, desc: str) -> None:
        import ipywidgets as widgets
        from IPython.display import display

        self._bar = widgets.IntProgress(value=0, min=0, max=1, description="",
                                        bar_style="info")
        self._title = widgets.HTML(f"<b>{html.escape(desc)}</b>")
        self._stats = widgets.HTML("waiting for the first step...")
        self._curve = widgets.HTML("")
        self.box = widgets.VBox([widgets.HBox([self._title, self._bar]), self._stats,
                                 self._curve])
        display(self.box)
        # The kernel tags every message with the request it answers, from a context variable.
        # Renders come from Dask's event-loop thread, whose context belongs to whichever cell
        # started it: run them in this cell's context, or a notebook runner (nbclient,
        # nbconvert --execute) files the updates under another cell and keeps none of them.
        self._context = contextvars.copy_context()
        self._lock = threading.Lock()  # a context runs in one thread at a time

    def render(self, progress: JobProgress, final: bool = False) -> None:
        with self._lock:
            self._context.run(self._render, progress, final)

    def _render(self, progress: JobProgress, final: bool) -> None:
        rounds = progress.rounds or max(progress.step, 1)
        self._bar.max = rounds
        self._bar.value = min(progress.step, rounds)
        self._bar.description = f"{min(progress.step, rounds)}/{rounds}"
        self._stats.value = stats_html(progress)
        self._curve.value = loss_svg(progress)
        if final:
            self._bar.bar_style = "success" if progress.step >= rounds else "warning"

    def close(self) -> None:
        """Nothing to release: the widget stays in the notebook with its final state."""
