"""Fluid-style unique names: ``fc_0``, ``fc_0.w_0``, ``learning_rate_0``."""

from __future__ import annotations

import contextlib
import contextvars
from collections import defaultdict
from collections.abc import Iterator

__all__ = ["NameGenerator", "UniqueNameGenerator", "generate", "guard", "switch"]


class NameGenerator:
    """Counts how often each key was used and appends the count, as Fluid does; every name
    starts with ``prefix`` (Fluid's ``UniqueNameGenerator``)."""

    def __init__(self, prefix: str | None = None) -> None:
        self._ids: defaultdict[str, int] = defaultdict(int)
        self.prefix = prefix or ""

    def __call__(self, key: str) -> str:
        n = self._ids[key]
        self._ids[key] += 1
        return f"{self.prefix}{key}_{n}"


#: Fluid's name for it
UniqueNameGenerator = NameGenerator


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


def switch(new_generator: NameGenerator | None = None,
           new_para_name_checker: None = None) -> tuple[NameGenerator, None]:
    """Use ``new_generator`` (a fresh one by default) from now on; return the one in use
    before, to switch back to (Fluid's ``unique_name.switch``; :func:`guard` is the managed
    form).

    Returns
    -------
    (NameGenerator, None)
        The previous generator, and None where Fluid also returns its dygraph parameter-name
        checker (dask_fluid has none: pass it back as it came).
    """
    if new_para_name_checker is not None:
        raise NotImplementedError("unique_name.switch(new_para_name_checker=...): dask_fluid "
                                  "keeps no dygraph parameter-name checker; pass None")
    old = _current()
    _generator.set(new_generator if new_generator is not None else NameGenerator())
    return old, None


@contextlib.contextmanager
def guard(new_generator: NameGenerator | str | bytes | None = None) -> Iterator[None]:
    """Use a fresh name counter inside the block (Fluid's ``unique_name.guard``); a str or
    bytes is the prefix of every name generated in it."""
    if isinstance(new_generator, bytes):
        new_generator = new_generator.decode()
    if isinstance(new_generator, str):
        new_generator = NameGenerator(new_generator)
    token = _generator.set(new_generator or NameGenerator())
    try:
        yield
    finally:
        _generator.reset(token)
