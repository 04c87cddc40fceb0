"""Paddle 1.8's ``paddle.batch``: turn a sample reader into a mini-batch reader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .reader import Reader

__all__ = ["batch"]


def batch(reader: Reader, batch_size: int, drop_last: bool = False) -> Reader:
    """Group ``reader``'s samples into lists of ``batch_size``.

    Parameters
    ----------
    reader : callable
        The sample reader.
    batch_size : int
        Samples per batch. Converted with :func:`int` first, as Paddle does, so ``"32"`` and
        ``32.0`` are accepted.
    drop_last : bool, default False
        Drop the last batch when it has fewer than ``batch_size`` samples.

    Returns
    -------
    callable
        A reader yielding lists of samples.

    Raises
    ------
    ValueError
        If ``batch_size`` is not positive (or :func:`int` rejects it).

    Examples
    --------
    >>> def reader():
    ...     yield from range(5)
    >>> list(batch(reader, 2)())
    [[0, 1], [2, 3], [4]]
    """
    # Checked here, not in the returned reader, so a bad size fails where the reader is built.
    batch_size = int(batch_size)
    if batch_size <= 0:
        # Paddle 1.8's wording, "integeral" included, for code that matches on it.
        raise ValueError(
            "batch_size should be a positive integeral value, "
            f"but got batch_size={batch_size}"
        )

    def batch_reader() -> Iterator[list[Any]]:
        b: list[Any] = []
        for instance in reader():
            b.append(instance)
            if len(b) == batch_size:
                yield b
                b = []
        if not drop_last and b:
            yield b

    return batch_reader
