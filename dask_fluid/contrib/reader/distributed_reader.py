"""``fluid.contrib.reader.distributed_batch_reader``: each trainer its share of the batches.

Fluid 1.8's data-parallel scripts (dygraph ``DataParallel`` and NCCL2 programs alike) read the
same batch reader on every trainer and keep, of every ``PADDLE_TRAINERS_NUM`` consecutive
batches, the one at position ``PADDLE_TRAINER_ID``; a last group of fewer batches is dropped,
so that every trainer takes the same number of steps.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["distributed_batch_reader"]


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def distributed_batch_reader(batch_reader: Callable[[], Iterable[Any]]
                             ) -> Callable[[], Iterator[Any]]:
    """This trainer's batches of ``batch_reader`` (Fluid 1.8's ``distributed_batch_reader``).

    Parameters
    ----------
    batch_reader : callable
        A batch reader (``paddle.batch(...)``): called, it yields batches.

    Returns
    -------
    callable
        A batch reader yielding batch ``k * n + id`` for ``k = 0, 1, ...``, where ``n`` is
        ``PADDLE_TRAINERS_NUM`` and ``id`` is ``PADDLE_TRAINER_ID`` (read when it is made);
        with one trainer, every batch.

    Raises
    ------
    ValueError
        The variables are not integers, or ``PADDLE_TRAINER_ID`` is not below
        ``PADDLE_TRAINERS_NUM``.
    """
    trainers = _env_int("PADDLE_TRAINERS_NUM", 1)
    trainer_id = _env_int("PADDLE_TRAINER_ID", 0)
    if trainers < 1 or not 0 <= trainer_id < trainers:
        raise ValueError(f"distributed_batch_reader: PADDLE_TRAINER_ID={trainer_id} must be in "
                         f"[0, PADDLE_TRAINERS_NUM={trainers})")

    def this_trainers_batches() -> Iterator[Any]:
        if trainers == 1:
            yield from batch_reader()
            return
        group: list[Any] = []
        for batch in batch_reader():
            group.append(batch)
            if len(group) == trainers:
                yield group[trainer_id]
                group = []

    return this_trainers_batches
