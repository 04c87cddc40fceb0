"""Fluid 1.8's training modes run on the Dask runtime (train_pserver on a threads LocalCluster)
and do what each promises, checked where the outcome is deterministic:

- completely_not_async (sync through the runtime split) equals local training on the global
  batch, like sync mode;
- half-async with the runtime split, one trainer: the trainer waits for its own exchange, so it
  equals local training;
- async with the runtime split (the Communicator), one trainer: one exchange in flight, so each
  step uses the parameters from before the previous step's gradient (one step stale);
- GEO-SGD, one trainer: equals local training, including the steps after the last exchange;
  two trainers exchanging once at their last step: the pservers end with the mean of the two
  local models (each sends half its change);
- wait_port, for a trainer process started by hand: True retries until FLAGS_rpc_deadline,
  False fails at once naming the pserver.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_fluid as fluid
from dask_fluid.distributed import train_pserver
from dask_fluid.distributed.errors import DeadlineExceededError, DistributedTrainingError
from dask_fluid.distributed.program_values import persistable_names
from dask_fluid.transpiler import DistributeTranspiler

from ..launch.cluster import port_nobody_serves
from ..transpiler.models import config, reference_mlp, table_net

BATCH = 32
SGD = lambda: fluid.optimizer.SGD(0.1)  # noqa: E731
MOMENTUM = lambda: fluid.optimizer.Momentum(0.05, 0.9)  # noqa: E731
ASYNC_SPLIT = {"sync_mode": False, "runtime_split_send_recv": True}


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as c:
        yield c


def _data(steps: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(steps * BATCH, 64)),
            "y": rng.integers(0, 10, size=(steps * BATCH, 1))}


def _batches(data: dict) -> list[dict]:
    n = len(next(iter(data.values()))) // BATCH
    return [{k: v[s * BATCH:(s + 1) * BATCH] for k, v in data.items()} for s in range(n)]


def _local(data: dict, optimizer) -> dict:
    """Every persistable variable (parameters and the optimizer's state) after training one
    process on ``data``, batch after batch."""
    main, startup, _ = reference_mlp(optimizer=optimizer, dtype="float64")
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    for feed in _batches(data):
        exe.run(main, feed=feed, scope=scope)
    return {n: np.array(scope.get(n)) for n in persistable_names(main)}


def _train(client, data, fields: dict, optimizer, pservers: int = 2, **kw):
    main, startup, loss = reference_mlp(optimizer=optimizer, dtype="float64")
    return train_pserver(client, main, startup, data, config=config(**fields),
                         pservers=pservers, batch_size=kw.pop("batch_size", BATCH),
                         shuffle=False, fetch_list=[loss], **kw)


def _assert_close(params: dict, expected: dict, tol: float = 1e-9) -> None:
    assert params.keys() == expected.keys()
    for name, value in params.items():
        np.testing.assert_allclose(value, expected[name], rtol=0, atol=tol, err_msg=name)


def test_completely_not_async_equals_local_on_the_global_batch(client):
    steps = 4
    data = _data(steps)
    halves = [{k: np.concatenate([v[s * BATCH + r * BATCH // 2:s * BATCH + (r + 1) * BATCH // 2]
                                  for s in range(steps)]) for k, v in data.items()}
              for r in (0, 1)]
    fields = {**ASYNC_SPLIT, "half_async": True, "completely_not_async": True}
    result = _train(client, halves, fields, MOMENTUM, pservers=3, batch_size=BATCH // 2)
    _assert_close(result.params, _local(data, MOMENTUM), 1e-6)
    assert "sync (runtime split)" in result.summary


def test_half_async_runtime_split_one_trainer_waits_for_its_exchange(client):
    data = _data(6)
    result = _train(client, [data], {**ASYNC_SPLIT, "half_async": True}, MOMENTUM)
    _assert_close(result.params, _local(data, MOMENTUM))
    assert "async (half-async, runtime split)" in result.summary


def _one_step_stale(data: dict, lr: float = 0.1) -> tuple[dict, list[float]]:
    """SGD where the gradient of step t is taken at the parameters the pservers had before
    step t - 1's gradient (the step 0 and 1 gradients both at the start)."""
    main, startup, loss = reference_mlp(optimizer=SGD, dtype="float64")
    names = [p.name for p in main.global_block().all_parameters()]
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    server = {n: np.array(scope.get(n)) for n in names}
    used, reply, losses = dict(server), None, []
    for feed in _batches(data):
        for n in names:
            scope.set(n, used[n].copy())
        out = exe.run(main, feed=feed, fetch_list=[loss] + [f"{n}@GRAD" for n in names],
                      scope=scope)
        losses.append(float(out[0][0]))
        if reply is not None:  # this step's recv: the previous exchange's parameters
            used = reply
        server = {n: server[n] - lr * g for n, g in zip(names, out[1:], strict=True)}
        reply = dict(server)  # what this step's exchange will bring back
    return {**server, "learning_rate_0": np.array(scope.get("learning_rate_0"))}, losses


def test_async_runtime_split_keeps_one_exchange_in_flight(client):
    data = _data(6)
    result = _train(client, [data], ASYNC_SPLIT, SGD)
    expected, losses = _one_step_stale(data)
    _assert_close(result.params, expected)
    np.testing.assert_allclose([e["fetches"][next(iter(e["fetches"]))] for e in result.history],
                               losses, rtol=1e-12)
    assert not np.allclose(result.params["fc_0.w_0"],
                           _local(data, SGD)["fc_0.w_0"])  # staleness shows


@pytest.mark.parametrize("steps", [9, 10])  # 10: one step after the last exchange
def test_geo_one_trainer_equals_local(client, steps):
    data = _data(steps)
    fields = {**ASYNC_SPLIT, "geo_sgd_mode": True, "geo_sgd_need_push_nums": 3}
    result = _train(client, [data], fields, MOMENTUM)
    _assert_close(result.params, _local(data, MOMENTUM))
    assert "async (GEO-SGD, every 3 steps)" in result.summary


def test_geo_two_trainers_one_exchange_average_their_models(client):
    steps = 4
    parts = [_data(steps, seed=1), _data(steps, seed=2)]
    fields = {**ASYNC_SPLIT, "geo_sgd_mode": True, "geo_sgd_need_push_nums": steps}
    result = _train(client, parts, fields, MOMENTUM, pservers=3)
    models = [_local(p, MOMENTUM) for p in parts]
    # the pservers average the parameters; each trainer keeps its own optimizer state, and
    # the result has trainer 0's
    params = {p.name for p in reference_mlp()[0].global_block().all_parameters()}
    _assert_close(result.params, {n: (models[0][n] + models[1][n]) / 2 if n in params
                                  else models[0][n] for n in models[0]}, 1e-12)


# -- wait_port: a trainer started by hand ------------------------------------------------------
def _trainer_startup(wait_port: bool | None, port: int):
    main, startup, _ = reference_mlp()
    t = DistributeTranspiler(config(wait_port=wait_port) if wait_port is not None else None)
    t.transpile(0, program=main, pservers=f"127.0.0.1:{port}", trainers=1,
                startup_program=startup)
    t.get_trainer_program(wait_port=True if wait_port is None else wait_port)
    return startup


def test_wait_port_false_fails_at_once_naming_the_pserver(monkeypatch):
    monkeypatch.setenv("FLAGS_rpc_deadline", "60000")
    exe = fluid.Executor()
    start = time.monotonic()
    with port_nobody_serves() as port, pytest.raises(
            DistributedTrainingError,
            match=rf"pserver 127.0.0.1:{port} did not accept .*wait_port=False"):
        exe.run(_trainer_startup(False, port), scope=fluid.Scope())
    assert time.monotonic() - start < 10
    exe.close()


def test_wait_port_true_waits_until_the_deadline(monkeypatch):
    monkeypatch.setenv("FLAGS_rpc_deadline", "1500")
    exe = fluid.Executor()
    start = time.monotonic()
    with port_nobody_serves() as port, pytest.raises(
            DeadlineExceededError, match=rf"pserver 127.0.0.1:{port} did not accept"):
        exe.run(_trainer_startup(None, port), scope=fluid.Scope())
    assert time.monotonic() - start >= 1.4
    exe.close()


def test_async_runtime_split_prefetches_with_an_exchange_in_flight(client):
    # the table's prefetch (forward) needs the connections while the previous step's exchange
    # is in flight: it is finished first, and its parameters still reach the next recv
    steps, rng = 8, np.random.default_rng(0)
    data = {"ids_a": rng.integers(0, 1000, size=(steps * BATCH, 1)),
            "ids_b": rng.integers(0, 1000, size=(steps * BATCH, 1)),
            "label": rng.integers(0, 2, size=(steps * BATCH, 1))}
    main, startup = table_net(optimizer=lambda: fluid.optimizer.SGD(0.5))
    result = train_pserver(client, main, startup, [data], config=config(**ASYNC_SPLIT),
                           pservers=2, batch_size=BATCH, shuffle=False)
    assert result.steps == steps
    assert all(np.isfinite(v).all() for v in result.params.values())
    # every step's gradients were pushed, to both pservers (each holds a table shard)
    lines = [ln for ln in result.summary.splitlines() if ln.startswith("pserver ")]
    assert len(lines) == 2 and all(f" {steps} pushes, " in ln for ln in lines), lines


def test_runtime_split_cuts_a_sparse_gradient_by_row(client):
    # a local table of 1000 rows on 2 pservers: the SelectedRows gradient is cut by the runtime
    steps, rng = 5, np.random.default_rng(1)
    data = {"ids_a": rng.integers(0, 1000, size=(steps * BATCH, 1)),
            "ids_b": rng.integers(0, 1000, size=(steps * BATCH, 1)),
            "label": rng.integers(0, 2, size=(steps * BATCH, 1))}
    sgd = lambda: fluid.optimizer.SGD(0.5)  # noqa: E731
    main, startup = table_net(is_distributed=False, optimizer=sgd)
    result = train_pserver(client, main, startup, [data],
                           config=config(**ASYNC_SPLIT, half_async=True), pservers=2,
                           batch_size=BATCH, shuffle=False)
    lmain, lstartup = table_net(is_distributed=False, optimizer=sgd)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(lstartup, scope=scope)
    for feed in _batches(data):
        exe.run(lmain, feed=feed, scope=scope)
    _assert_close(result.params, {n: np.array(scope.get(n)) for n in result.params}, 1e-6)
