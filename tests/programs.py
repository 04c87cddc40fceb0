"""Build a program in fresh programs and run it in a fresh scope: what layer tests repeat."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dask_fluid as fluid


def build(fn: Callable[[], Any]) -> tuple[fluid.Program, fluid.Program, Any]:
    """``(main, startup, fn())`` with ``fn`` run in new programs and a fresh name counter."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        out = fn()
    return main, startup, out


def run(main: fluid.Program, startup: fluid.Program, feed: dict, fetch: list
        ) -> tuple[list, fluid.Scope]:
    """The fetched values of one run of ``main`` after ``startup``, in a new scope, and it."""
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


def run_program(main: fluid.Program, startup: fluid.Program, feed: dict, fetch: list) -> list:
    """:func:`run`'s fetched values alone."""
    return run(main, startup, feed, fetch)[0]
