"""What ``dask-fluid launch`` shows while a job runs: a progress line from the trainers' steps,
with the roles' output printed above it."""

from __future__ import annotations

import io
from typing import TextIO

from .distributed.launch.progress import JobProgress
from .estimators._progress import ProgressBar

__all__ = ["AboveBar", "LaunchView"]


class LaunchView:
    """An event callback: a text progress bar over the launched job's steps.

    The bar appears with the first ``step`` event, so a script that trains with no executor
    (or a job that fails before training) leaves no empty bar behind.

    Parameters
    ----------
    desc : str
        The bar's label.
    """

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self.bar: ProgressBar | None = None
        self._before: list[dict] = []  # the job event, folded once the bar exists

    def __call__(self, event: dict) -> None:
        kind = event.get("type")
        if self.bar is None:
            if kind != "step":
                if kind == "job":
                    self._before.append(event)
                return
            self.bar = ProgressBar(None, desc=self.desc, widget=False)
            for early in self._before:  # folded, not drawn: the first drawing shows a step
                self.bar.progress(early)
        if kind != "output":
            self.bar(event)

    @property
    def progress(self) -> JobProgress | None:
        """What the trainers reported (None before their first step)."""
        return None if self.bar is None else self.bar.progress

    def close(self) -> None:
        """Draw the final state."""
        if self.bar is not None:
            self.bar.close()


class AboveBar(io.TextIOBase):
    """A text stream that writes whole lines above any live ``tqdm`` bar (``tqdm.write``), so
    that the roles' output and the progress line do not overwrite each other."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        from tqdm import tqdm

        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            tqdm.write(line, file=self.stream)
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self.write("\n")
        self.stream.flush()
