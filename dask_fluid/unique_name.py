"""Fluid-style unique names: ``fc_0``, ``fc_0.w_0``, ``learning_rate_0``."""

from __future__ import annotations

import contextlib
import contextvars
from collections import defaultdict
from collections.abc import Iterator


class NameGenerator:
    """Counts how often each key was used and appends the count, as Fluid does."""

    def __init__(self) -> None:
        self._ids: defaultdict[str, int] = defaultdict(int)

    def __call__(self, key: str) -> str:
        n = self._ids[key]
        self._ids[key] += 1
        return f"{key}_{n}"


_generator: contextvars.ContextVar[NameGenerator | None] = contextvars.ContextVar(
    "dask_fluid_name_generator", default=None
)


def _current() -> NameGenerator:
    gen = _generator.get()
    if gen is None:
        gen = NameGenerator()
        _generator.set(gen)
    return gen


def generate(key: str) -> str:
    """Return ``key_N`` with N the number of earlier calls with the same key.

    Parameters
    ----------
    key : str
        Prefix such as ``"fc"`` or ``"fc_0.w"``.

    Returns
    -------
    str
        A name unique within the current :func:`guard`.
    """
    return _current()(key)


@contextlib.contextmanager
def guard(generator: NameGenerator | None = None) -> Iterator[None]:
    """Use a fresh name counter inside the block (Fluid's ``unique_name.guard``)."""
    token = _generator.set(generator or NameGenerator())
    try:
        yield
    finally:
        _generator.reset(token)
