"""Elastic training: a worker killed mid-fit (SIGKILL) does not end ``train_pserver`` or
``train_collective``. A lost trainer's rows go to the others and training restarts from the
pservers' state (sync: the interrupted step replayed with the same global batch; async: where
the slowest trainer was) or, collective, from the variables of the rank that got furthest; a
lost pserver's shards come back from the latest checkpoint round on another worker. The
accuracy stays within a point of an uninterrupted run."""

from __future__ import annotations

import math
import os
import signal
import threading

import numpy as np
import pytest
from distributed import Client

import dask_fluid as fluid
from dask_fluid.datasets import reference_blobs
from dask_fluid.distributed import WorkerLostError, train_pserver
from dask_fluid.models import mlp

from .conftest import make_cluster

pytestmark = pytest.mark.slow

X, Y = reference_blobs(8000, seed=3)
X_TEST, Y_TEST = X[6000:], Y[6000:]
DATA = {"x": X[:6000], "y": Y[:6000]}
HIDDEN = (64,)


@pytest.fixture
def client():
    # a cluster per test: each one kills a worker (the nanny starts a new one)
    with make_cluster(3) as cluster, Client(cluster) as c:
        c.wait_for_workers(3, timeout=60)
        yield c


def _workers(client) -> list[str]:
    return sorted(client.scheduler_info(n_workers=-1)["workers"])


def _accuracy(params: dict) -> float:
    h = X_TEST
    for k in range(len(HIDDEN)):
        h = np.maximum(h @ params[f"fc_{k}.w_0"] + params[f"fc_{k}.b_0"], 0)
    logits = h @ params[f"fc_{len(HIDDEN)}.w_0"] + params[f"fc_{len(HIDDEN)}.b_0"]
    return float(np.mean(logits.argmax(axis=1) == Y_TEST))


def _killer(client, victim: str, at_step: int, trainers: int = 1):
    """A callback that SIGKILLs ``victim``'s process at the first event of ``at_step`` once
    ``trainers`` ranks have each finished a step (so every survivor has pushed a round: on a
    loaded machine one trainer can start late), and the list of the recovery events it saw."""
    pid = client.run(os.getpid, workers=[victim])[victim]
    killed, recoveries = [], []
    stepped: set[int] = set()
    lock = threading.Lock()

    def on_event(event):
        with lock:
            if event.get("type") == "recovery":
                recoveries.append(event)
            elif event.get("type") == "step":
                stepped.add(event["rank"])
                if event["step"] >= at_step and len(stepped) >= trainers and not killed:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(event["step"])

    return on_event, killed, recoveries


def _rounds(epochs: int, trainers: int, batch_size: int = 32) -> int:
    """The steps of a job on DATA split over ``trainers``."""
    return epochs * math.ceil(len(DATA["x"]) / trainers / batch_size)


def _train(client, lr=0.05, epochs=5, **kw):
    spec = mlp(hidden=HIDDEN, opt=fluid.optimizer.SGD(lr))
    args = dict(batch_size=32, epochs=epochs, shuffle=True, seed=0, fetch_list=[spec.loss])
    args.update(kw)
    return train_pserver(client, spec.main, spec.startup, DATA, **args)


@pytest.mark.parametrize("sync", [True, False])
def test_a_lost_trainer_worker_does_not_end_an_elastic_fit(client, sync):
    w = _workers(client)
    # async: a small rate over more epochs, where runs differ by ~0.1 points (measured)
    opt = {} if sync else {"lr": 0.02, "epochs": 8}
    baseline = _accuracy(_train(client, trainers=3, pservers=[w[0]], sync_mode=sync,
                                **opt).params)
    on_event, killed, recoveries = _killer(client, w[2], at_step=40, trainers=3)
    result = _train(client, trainers=3, pservers=[w[0]], sync_mode=sync, elastic=True,
                    callbacks=[on_event], **opt)
    assert killed, "the worker was never killed"
    assert len(result.recoveries) == 1 and recoveries == result.recoveries
    event = result.recoveries[0]
    assert event["lost"] == [w[2]] and event["source"] == "the pservers' state", event
    # the restart is after the start and within the job; in sync mode not before the step
    # whose event triggered the kill (the pservers had finished that round). How far after
    # depends on how far the step events lagged the trainers: 31 rounds under load once, 99
    # on a loaded CI machine, so it is no bound
    rounds = _rounds(opt.get("epochs", 5), trainers=3)
    low = killed[0] if sync else 1  # async: where the slowest trainer was
    assert low <= event["start_round"] < rounds, (event, killed)
    assert "recovered: lost trainer worker" in result.summary
    accuracy = _accuracy(result.params)
    assert accuracy >= baseline - 0.01, (accuracy, baseline)


def test_a_lost_pserver_worker_comes_back_from_the_latest_checkpoint(client, tmp_path):
    w = _workers(client)
    common = dict(trainers=w[:2], pservers=[w[2]], checkpoint_dir=str(tmp_path),
                  checkpoint_every=10)
    baseline = _accuracy(_train(client, **common).params)
    on_event, killed, recoveries = _killer(client, w[2], at_step=45)
    result = _train(client, elastic=True, callbacks=[on_event],
                    **dict(common, checkpoint_dir=str(tmp_path / "elastic")))
    assert killed and len(result.recoveries) == 1
    event = result.recoveries[0]
    assert event["lost"] == [w[2]] and event["source"].startswith("checkpoint round-"), event
    # a checkpoint round at or after the last one before the step whose event triggered the
    # kill (the events lag the trainers, so no upper bound short of the job's end)
    assert event["start_round"] % 10 == 0, event
    assert killed[0] - 10 < event["start_round"] < _rounds(5, trainers=2), (event, killed)
    assert w[2] not in result.summary.split("recovered:")[0]  # the pserver moved
    accuracy = _accuracy(result.params)
    assert accuracy >= baseline - 0.01, (accuracy, baseline)


def test_elastic_ends_as_without_it_when_too_few_trainers_are_left(client):
    w = _workers(client)
    on_event, killed, _ = _killer(client, w[2], at_step=20)
    with pytest.raises(WorkerLostError):
        _train(client, trainers=w, pservers=[w[0]], elastic=True, min_trainers=3,
               callbacks=[on_event])
    assert killed


def test_elastic_arguments_are_checked_before_anything_runs(client):
    with pytest.raises(ValueError, match="min_trainers = 0"):
        _train(client, elastic=True, min_trainers=0)
    spec = mlp(hidden=HIDDEN)
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=spec.main, startup_program=spec.startup, pservers="127.0.0.1:1",
                trainers=1)
    with pytest.raises(ValueError, match="elastic=True re-transpiles"):
        train_pserver(client, data=DATA, transpiler=t, elastic=True)


@pytest.mark.parametrize("mode", ["pserver", "collective"])
def test_an_elastic_estimator_fit_survives_a_lost_trainer_worker(client, mode):
    from dask_fluid.estimators import MLPClassifier

    pids = client.run(os.getpid)
    done, victims = threading.Event(), []

    def kill_once_training():
        # a worker that runs a trainer but not the pserver (whose shards would need a
        # checkpoint) has trained for a moment: kill it mid-fit. The fit trains for about
        # 2 s (20 epochs of 63 steps): at 6 epochs a faster step once let the kill land after
        # the job's last step, when there was nothing left to recover
        while not done.is_set():
            for worker, keys in client.processing().items():
                keys = [str(k) for k in keys]
                if any(k.startswith("dask-fluid-trainer") for k in keys) and not any(
                        k.startswith("dask-fluid-pserver") for k in keys):
                    done.wait(0.5)
                    os.kill(pids[worker], signal.SIGKILL)
                    victims.append(worker)
                    return
            done.wait(0.02)

    est = dict(hidden_layer_sizes=HIDDEN, mode=mode, n_trainers=3, max_iter=20, batch_size=32,
               solver="sgd", learning_rate_init=0.05, momentum=0.0, random_state=0,
               client=client, **({"n_pservers": 1} if mode == "pserver" else {}))
    baseline = MLPClassifier(**est).fit(X[:6000], Y[:6000]).score(X_TEST, Y_TEST)
    killer = threading.Thread(target=kill_once_training, daemon=True)
    killer.start()
    try:
        clf = MLPClassifier(elastic=True, **est).fit(X[:6000], Y[:6000])
    finally:
        done.set()
        killer.join(5)
    assert victims and victims[0] not in _workers(client)  # killed during the fit
    assert clf.score(X_TEST, Y_TEST) >= baseline - 0.01


def test_elastic_and_checkpoints_where_they_do_not_apply_are_refused(client):
    from dask_fluid.distributed import train_collective
    from dask_fluid.distributed.launch.data import partition_by_worker
    from dask_fluid.estimators import MLPClassifier

    with pytest.raises(NotImplementedError, match="elastic is implemented for fit with a "
                                                  "distributed mode"):
        MLPClassifier(max_iter=1, mode="local", elastic=True).fit(X[:100], Y[:100])
    with pytest.raises(NotImplementedError, match="checkpoint_dir and checkpoint_every are "
                                                  "implemented for fit with a distributed mode"):
        MLPClassifier(max_iter=1, mode="local", checkpoint_dir="/tmp/x").fit(X[:100], Y[:100])
    with pytest.raises(ValueError, match="checkpoint_dir needs checkpoint_every"):
        MLPClassifier(max_iter=1, mode="collective", checkpoint_dir="/tmp/x",
                      client=client).fit(X[:100], Y[:100])
    spec = mlp(hidden=HIDDEN)
    with pytest.raises(ValueError, match="min_trainers = 0"):
        train_collective(client, spec.main, spec.startup, DATA, elastic=True, min_trainers=0)
    t = fluid.DistributeTranspiler(config=fluid.DistributeTranspilerConfig())
    t.config.mode = "nccl2"
    t.transpile(0, program=spec.main, startup_program=spec.startup,
                trainers="127.0.0.1:1,127.0.0.1:2", current_endpoint="127.0.0.1:1")
    with pytest.raises(ValueError, match="a transpiler's endpoints fix the trainers"):
        train_collective(client, data=DATA, transpiler=t, elastic=True)
    with pytest.raises(ValueError, match="DataPartition"):
        train_collective(client, spec.main, spec.startup,
                         partition_by_worker(client, DATA), elastic=True)


# -- collective (ring) training -------------------------------------------------------------------
def _train_ring(client, **kw):
    from dask_fluid.distributed import train_collective

    spec = mlp(hidden=HIDDEN, opt=fluid.optimizer.SGD(0.05))
    args = dict(batch_size=32, epochs=5, shuffle=True, seed=0, fetch_list=[spec.loss],
                backend="ring")
    args.update(kw)
    return train_collective(client, spec.main, spec.startup, DATA, **args)


def test_a_lost_rank_does_not_end_an_elastic_collective_fit(client):
    w = _workers(client)
    baseline = _accuracy(_train_ring(client, trainers=3).params)
    on_event, killed, recoveries = _killer(client, w[2], at_step=40, trainers=3)
    result = _train_ring(client, trainers=3, elastic=True, callbacks=[on_event])
    assert killed, "the worker was never killed"
    assert len(result.recoveries) == 1 and recoveries == result.recoveries
    event = result.recoveries[0]
    assert event["lost"] == [w[2]] and event["source"].startswith("rank "), event
    # the restart continues after the step whose event triggered the kill (every rank had
    # applied it), within the job; how far after depends on how far the events lagged
    assert killed[0] < event["start_round"] < _rounds(5, trainers=3), (event, killed)
    assert "recovered: lost trainer worker" in result.summary
    assert len(result.ranks) == 2 and w[2] not in {r["address"] for r in result.ranks}
    assert len({r["digest"] for r in result.ranks}) == 1  # one model on the ranks left
    accuracy = _accuracy(result.params)
    assert accuracy >= baseline - 0.01, (accuracy, baseline)


def test_elastic_collective_ends_as_without_it_when_too_few_ranks_are_left(client):
    w = _workers(client)
    on_event, killed, _ = _killer(client, w[2], at_step=20, trainers=3)
    with pytest.raises(WorkerLostError):
        _train_ring(client, trainers=3, elastic=True, min_trainers=3, callbacks=[on_event])
    assert killed


def test_the_restart_point_leaves_out_the_pservers_that_hold_nothing():
    from dask_fluid.distributed.launch.elastic import restart_point

    w = {"w": np.ones(2)}
    working = {"pserver_id": 0, "sync": True, "round": 7, "arrays": w,
               "previous": (6, {"w": np.zeros(2)}), "pushed": {}, "idle": False}
    other = dict(working, pserver_id=2, round=6, previous=(5, w))
    idle = {"pserver_id": 1, "sync": True, "round": -1, "arrays": {}, "previous": None,
            "pushed": {}, "idle": True}
    done, chosen = restart_point({0: working, 1: idle, 2: other}, 3, [0, 1])
    # the newest round both working pservers have: 6 (pserver 0's previous state)
    assert done == 6 and chosen[1] == {} and chosen[2] is w
    np.testing.assert_array_equal(chosen[0]["w"], np.zeros(2))
    assert restart_point({0: working, 1: idle}, 3, [0]) is None  # pserver 2 is missing
