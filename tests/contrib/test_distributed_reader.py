"""fluid.contrib.reader.distributed_batch_reader: each trainer its batches, Fluid 1.8's rule."""

from __future__ import annotations

import pytest

import dask_fluid as fluid


def _batches():
    return iter([[i] for i in range(7)])


@pytest.mark.parametrize(("trainers", "trainer_id", "expected"), [
    (1, 0, [[0], [1], [2], [3], [4], [5], [6]]),
    (2, 0, [[0], [2], [4]]),  # the seventh batch has no partner: dropped on every trainer
    (2, 1, [[1], [3], [5]]),
    (3, 2, [[2], [5]]),
])
def test_each_trainer_takes_its_position_in_every_group(monkeypatch, trainers, trainer_id,
                                                        expected):
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", str(trainers))
    monkeypatch.setenv("PADDLE_TRAINER_ID", str(trainer_id))
    reader = fluid.contrib.reader.distributed_batch_reader(_batches)
    assert list(reader()) == expected
    assert fluid.contrib.distributed_batch_reader is fluid.contrib.reader.distributed_batch_reader


def test_bad_environment_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "2")
    with pytest.raises(ValueError, match=r"PADDLE_TRAINER_ID=2 must be in \[0, "):
        fluid.contrib.reader.distributed_batch_reader(_batches)
    monkeypatch.setenv("PADDLE_TRAINER_ID", "one")
    with pytest.raises(ValueError, match="PADDLE_TRAINER_ID='one' is not an integer"):
        fluid.contrib.reader.distributed_batch_reader(_batches)
