"""Async pserver mode and DC-ASGD train the reference MLP (measurements.md, smaller n) to within
one point of local training's accuracy with the same budget of samples.

Accuracy is the mean training accuracy over the steps of the last epoch (as the benchmarks'
"train accuracy"): the accuracy of one final iterate of SGD at learning rate 0.1 varies by more
than a point between shuffles even for local training, the mean over an epoch does not."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.datasets import reference_blobs
from dask_fluid.distributed import train_pserver
from dask_fluid.models import mlp

from ..transpiler.models import config

N, BATCH, EPOCHS = 12_000, 64, 2


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def blobs():
    return reference_blobs(N)


def _accuracy(params: dict, x: np.ndarray, y: np.ndarray) -> float:
    h = x
    for i in range(3):
        h = h @ params[f"fc_{i}.w_0"] + params[f"fc_{i}.b_0"]
        if i < 2:
            h = np.maximum(h, 0)
    return float((h.argmax(axis=1) == y).mean())


@pytest.fixture(scope="module")
def local_accuracy(blobs):
    x, y = blobs
    spec = mlp()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(spec.startup, scope=scope)
    accs = []
    for epoch in range(EPOCHS):
        order = np.random.default_rng(epoch).permutation(N)
        for s in range(0, N, BATCH):
            idx = order[s:s + BATCH]
            (acc,) = exe.run(spec.main, feed={"x": x[idx], "y": y[idx, None]},
                             fetch_list=[spec.accuracy], scope=scope)
            if epoch == EPOCHS - 1:
                accs.append(float(acc[0]))
    return float(np.mean(accs))


@pytest.mark.slow
@pytest.mark.parametrize("dc_asgd", [False, True])
def test_async_training_reaches_local_accuracy(client, blobs, local_accuracy, dc_asgd):
    x, y = blobs
    spec = mlp()
    events = []
    result = train_pserver(client, spec.main, spec.startup, {"x": x, "y": y}, pservers=2,
                           sync_mode=False, config=config(enable_dc_asgd=dc_asgd),
                           batch_size=BATCH, epochs=EPOCHS, fetch_list=[spec.accuracy],
                           callbacks=[events.append])
    accuracy = result.epochs[-1][spec.accuracy.name]
    assert local_accuracy > 0.8
    assert abs(accuracy - local_accuracy) <= 0.01, (accuracy, local_accuracy)
    assert 0.8 < _accuracy(result.params, x, y) <= 1.0
    assert result.samples == EPOCHS * N
    assert "async" in result.summary
    if dc_asgd:
        assert "ref_by_trainer_id" in result.summary
    assert any(e["type"] == "step" for e in events)


DECAY_ROWS, DECAY_BATCH, DECAY_STEPS = 256, 16, 5


@pytest.mark.parametrize("pservers", [1, 2])
def test_async_decay_follows_the_global_steps(client, pservers):
    # Fluid 1.8's async step counters (tests/transpiler/test_async_lr_decay.py: the programs)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4])
        y = layers.data("y", [1])
        cost = layers.mean(layers.square_error_cost(layers.fc(x, 1), y))
        lr = layers.exponential_decay(learning_rate=0.1, decay_steps=DECAY_STEPS,
                                      decay_rate=0.5)
        fluid.optimizer.SGD(lr).minimize(cost)
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(size=(DECAY_ROWS, 4)).astype("float32"),
            "y": rng.normal(size=(DECAY_ROWS, 1)).astype("float32")}
    result = train_pserver(client, main, startup, data, pservers=pservers, trainers=2,
                           sync_mode=False, batch_size=DECAY_BATCH)
    steps = [t["steps"] for t in result.stats["trainers"]]
    assert sum(steps) == DECAY_ROWS // DECAY_BATCH and all(steps)
    # each pserver's counter of trainer i starts at 1 and adds 1 per step of trainer i: the
    # counter is the sum, the global steps plus the trainers' initial ones (as in Fluid)
    for i, n in enumerate(steps):
        assert int(result.params[f"@LR_DECAY_COUNTER@.trainer_{i}"][0]) == 1 + n
    assert int(result.params["@LR_DECAY_COUNTER@"][0]) == 2 + sum(steps)
