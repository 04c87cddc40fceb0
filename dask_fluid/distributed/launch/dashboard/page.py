"""The "Fluid Training" page of the Dask dashboard (Bokeh), added to a running scheduler.

Distributed builds its dashboard pages once, when the scheduler starts; this page arrives
later, with the first job. :func:`install` makes it the way distributed makes its own
(``distributed.dashboard.core.BokehApplication``, so the same prefix, websocket origins and
settings) and adds it to the scheduler's HTTP application. Distributed's
``individual-plots.json`` (which dask-labextension reads) lists the pages of its own Bokeh
application only, so :func:`install` also puts a handler for that path in front of
distributed's: the same answer, plus this page.

The page's document reads the plugin's :class:`~.plugin.Board` in a periodic callback. Both run
in the scheduler's event loop, so no lock is needed, and a page nobody opened costs nothing.
"""

from __future__ import annotations

import html
import time
from typing import Any

__all__ = ["ROUTE", "install"]

#: the page's path; distributed's listing names it "Individual Fluid Training"
ROUTE = "/individual-fluid-training"
#: how often an open page polls the board
REFRESH_MS = 500
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")


def install(scheduler: Any, board: Any) -> list[str]:
    """Serve the page on ``scheduler``'s dashboard; return its routes (none without one)."""
    from bokeh.server.server import BokehTornado
    from distributed.dashboard.core import BokehApplication
    from tornado.ioloop import IOLoop

    http = getattr(scheduler, "http_application", None)
    ours = [a for a in getattr(http, "applications", ()) if isinstance(a, BokehTornado)]
    if not ours:  # the scheduler runs without a dashboard (dashboard_address=None, no bokeh)
        return []
    prefix = ours[0].prefix or ""

    def doc(scheduler: Any, extra: dict, document: Any) -> None:
        FluidPage(board, document)

    app = BokehApplication({ROUTE: doc}, scheduler, prefix=prefix)
    http.add_application(app)
    app.initialize(IOLoop.current())
    http.add_handlers(r".*$", [(f"{prefix.rstrip('/')}/individual-plots.json",
                                _plots_handler(app), {"dask_server": scheduler})])
    return [ROUTE]


def _plots_handler(app: Any) -> type:
    from distributed.http.scheduler.info import IndividualPlots

    class PlotsWithFluid(IndividualPlots):
        """Distributed's listing of single-plot pages, plus this page."""

        def write(self, chunk: Any) -> None:
            if isinstance(chunk, dict):
                chunk = {**chunk, **{_title(p): p for p in app.app_paths}}
            super().write(chunk)

    return PlotsWithFluid


def _title(path: str) -> str:
    return path.strip("/").replace("-", " ").title()


def _bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f}"


def _elapsed(progress: Any) -> str:
    end = progress.ended if progress.ended is not None else time.time()
    return f"{max(end - progress.started, 0.0):,.1f} s"


class FluidPage:
    """One browser tab's view of the board."""

    def __init__(self, board: Any, doc: Any) -> None:
        from bokeh.layouts import column
        from bokeh.models import ColumnDataSource, DataTable, Div, Select, TableColumn
        from bokeh.plotting import figure

        self.board = board
        self.doc = doc
        self._drawn = -1
        self._job: str | None = None  # the selected job; None follows the newest
        self._tables: dict[int, Any] = {}  # id(source) -> its DataTable

        def table(name: str, columns: list[tuple[str, str]], height: int) -> tuple:
            source = ColumnDataSource({k: [] for k, _ in columns}, name=f"{name}-source")
            view = DataTable(source=source, name=f"{name}-table", index_position=None,
                             columns=[TableColumn(field=k, title=t) for k, t in columns],
                             height=height, sizing_mode="stretch_width")
            self._tables[id(source)] = view
            return source, view

        self.jobs, jobs_view = table("jobs", [
            ("job", "job"), ("kind", "kind"), ("status", "status"), ("steps", "steps"),
            ("epoch", "epoch"), ("loss", "loss"), ("rate", "samples/s"),
            ("elapsed", "elapsed")], 150)
        self.trainers, trainers_view = table("trainers", [
            ("rank", "trainer"), ("worker", "worker"), ("steps", "steps"),
            ("trained", "samples"), ("rate", "samples/s"), ("step_ms", "step ms"),
            ("wait_ms", "barrier wait ms"), ("loss", "loss")], 130)
        self.pservers, pservers_view = table("pservers", [
            ("endpoint", "pserver"), ("worker", "worker"), ("rounds", "steps"),
            ("bytes_in", "bytes in"), ("bytes_out", "bytes out"),
            ("in_step", "in / step"), ("update_ms", "update ms / step")], 130)
        self.select = Select(title="job", options=[], name="job-select", width=320)
        self.select.on_change("value", self._on_select)
        self.loss = ColumnDataSource({"xs": [], "ys": [], "color": [], "label": []},
                                     name="loss-source")
        fig = figure(height=300, sizing_mode="stretch_width", title="loss per trainer",
                     x_axis_label="step", y_axis_label="loss", name="loss-figure",
                     tools="pan,wheel_zoom,box_zoom,reset,save")
        fig.multi_line("xs", "ys", color="color", legend_field="label", source=self.loss,
                       line_width=2)
        self.summary = Div(text="", name="summary", sizing_mode="stretch_width")
        self.header = Div(text="<h3>dask-fluid training</h3>", name="header")
        doc.add_root(column(self.header, jobs_view, self.select, fig,
                            Div(text="<b>trainers</b>"), trainers_view,
                            Div(text="<b>parameter servers</b>"), pservers_view,
                            self.summary, sizing_mode="stretch_width"))
        doc.title = "Dask: Fluid Training"
        self.update()
        doc.add_periodic_callback(self.update, REFRESH_MS)

    def _on_select(self, attr: str, old: Any, new: Any) -> None:
        newest = next(reversed(self.board.jobs), None)
        self._job = None if new == newest else new
        self._drawn = -1
        self.update()

    def update(self) -> None:
        """Redraw from the board if it changed since the last redraw."""
        board = self.board
        if board.version == self._drawn:
            return
        self._drawn = board.version
        jobs = list(board.jobs.items())
        self._set(self.jobs, self._jobs_columns(jobs))
        job = self._job if self._job in board.jobs else (jobs[-1][0] if jobs else None)
        options = [j for j, _ in reversed(jobs)]
        if self.select.options != options:
            self.select.options = options
        if job is not None and self.select.value != job:
            self.select.value = job
        progress = board.jobs.get(job) if job is not None else None
        self._show(progress)

    def _set(self, source: Any, data: dict[str, list]) -> None:
        """Replace a table's rows. BokehJS (3.x) redraws a DataTable when its number of rows
        changes, not when the same number of rows get new values (the view's indices stay
        equal, so no change is signalled): a new ``tags`` value makes it redraw."""
        if data == source.data:
            return
        same_rows = len(next(iter(data.values()), [])) == len(next(iter(source.data.values()),
                                                                   []))
        source.data = data
        if same_rows:
            table = self._tables[id(source)]
            table.tags = [self._drawn]

    @staticmethod
    def _jobs_columns(jobs: list[tuple[str, Any]]) -> dict[str, list]:
        rows = list(reversed(jobs))
        return {
            "job": [j for j, _ in rows],
            "kind": [str(p.info.get("kind", "")) for _, p in rows],
            "status": [p.status for _, p in rows],
            "steps": [f"{p.step}/{p.rounds}" if p.rounds else str(p.step) for _, p in rows],
            "epoch": [str(p.epoch + 1) if p.has_epochs else "" for _, p in rows],
            "loss": ["" if p.loss is None else f"{p.loss:.4f}" for _, p in rows],
            "rate": [f"{p.samples_per_s:,.0f}" for _, p in rows],
            "elapsed": [_elapsed(p) for _, p in rows],
        }

    def _show(self, p: Any) -> None:
        trainers = [] if p is None else sorted(p.trainers.values(), key=lambda t: t.rank)
        pservers = [] if p is None else sorted(p.pservers.values(), key=lambda s: s.endpoint)
        self.loss.data = {
            "xs": [list(t.curve.steps) for t in trainers],
            "ys": [list(t.curve.losses) for t in trainers],
            "color": [COLORS[t.rank % len(COLORS)] for t in trainers],
            "label": [f"trainer {t.rank}" for t in trainers]}
        self._set(self.trainers, {
            "rank": [t.rank for t in trainers], "worker": [t.worker for t in trainers],
            "steps": [t.done_steps for t in trainers],
            "trained": [f"{t.trained:,}" for t in trainers],
            "rate": [f"{t.samples_per_s:,.0f}" for t in trainers],
            "step_ms": [_ms(t.step_s) for t in trainers],
            "wait_ms": [_ms(t.wait_s) for t in trainers],
            "loss": ["" if t.loss is None else f"{t.loss:.4f}" for t in trainers]})
        self._set(self.pservers, {
            "endpoint": [s.endpoint for s in pservers], "worker": [s.worker for s in pservers],
            "rounds": [s.rounds for s in pservers],
            "bytes_in": [_bytes(s.bytes_in) for s in pservers],
            "bytes_out": [_bytes(s.bytes_out) for s in pservers],
            "in_step": [_bytes(s.bytes_in / s.rounds if s.rounds else 0) for s in pservers],
            "update_ms": [_ms(s.update_s) for s in pservers]})
        self.summary.text = "" if p is None else self._summary_html(p)

    @staticmethod
    def _summary_html(p: Any) -> str:
        lines = [f"status: {p.status}"]
        if p.error:
            lines.append(f"error: {p.error}")
        summary = str(p.info.get("summary", ""))
        text = "\n".join(lines) + ("\n\n" + summary if summary else "")
        return f"<b>job</b><pre>{html.escape(text)}</pre>"
