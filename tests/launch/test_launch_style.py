"""Fluid's launch style on plain processes: one script, its role from PADDLE_* variables, the
transpiled programs run by the executor (``listen_and_serv``, ``send``/``recv``...), real
sockets on localhost. Paddle's own check (test_dist_base.py): per step, the mean of the two
trainers' losses equals the local loss."""

from __future__ import annotations

import json
import signal
import sys
import time

import numpy as np
import pytest

from . import cluster

pytestmark = pytest.mark.slow

TIMEOUT_S = 120


def _finish(job: cluster.Job) -> dict[str, int]:
    try:
        codes = job.wait(TIMEOUT_S)
        errors = {n: job.stderr(n) for n, c in codes.items() if c != 0}
        assert all(c == 0 for c in codes.values()), (codes, errors)
        return codes
    finally:
        job.kill_all()


@pytest.fixture(scope="module")
def local_losses(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local")
    return cluster.run_local(tmp, cluster.dask_fluid_copy(tmp))


@pytest.mark.parametrize("slicing", ["noslice", "slice"])
def test_sync_2x2_processes_equal_local_and_pservers_exit_by_themselves(tmp_path, local_losses,
                                                                        slicing):
    job = cluster.start(tmp_path, cluster.dask_fluid_copy(tmp_path), "sync", slicing,
                        via_run=False, scheme="endpoints" if slicing == "slice" else "ips")
    _finish(job)  # every process, the pservers included, exited 0 on its own
    dist = (np.array(job.losses("trainer0")) + np.array(job.losses("trainer1"))) / 2
    assert len(dist) == len(local_losses) == 12
    np.testing.assert_allclose(dist, local_losses, atol=1e-5, rtol=0)
    assert np.mean(local_losses[-3:]) < np.mean(local_losses[:3])  # and it does learn


def test_a_pserver_holding_no_block_serves_until_the_trainers_complete(tmp_path, local_losses):
    # four unsliced parameters dispatched round-robin over five pservers: the fifth holds
    # nothing, takes no step (only a ping and the trainers' complete) and exits 0 on its own
    job = cluster.start(tmp_path, cluster.dask_fluid_copy(tmp_path), "sync", "noslice",
                        via_run=False, pservers=5)
    _finish(job)
    dist = (np.array(job.losses("trainer0")) + np.array(job.losses("trainer1"))) / 2
    np.testing.assert_allclose(dist, local_losses, atol=1e-5, rtol=0)


def test_the_unchanged_paddle_script_under_dask_fluid_run(tmp_path, local_losses):
    job = cluster.start(tmp_path, cluster.SCRIPT, "sync", "slice", via_run=True)
    _finish(job)
    dist = (np.array(job.losses("trainer0")) + np.array(job.losses("trainer1"))) / 2
    np.testing.assert_allclose(dist, local_losses, atol=1e-5, rtol=0)


def test_async_2x2_processes_train(tmp_path):
    job = cluster.start(tmp_path, cluster.dask_fluid_copy(tmp_path), "async", "noslice",
                        via_run=False, env={"SCRIPT_STEPS": "40"})
    _finish(job)
    for name in ("trainer0", "trainer1"):
        losses = job.losses(name)
        assert len(losses) == 40 and np.mean(losses[-5:]) < np.mean(losses[:5])


def test_without_a_secret_the_processes_say_they_are_unauthenticated(tmp_path):
    job = cluster.start(tmp_path, cluster.dask_fluid_copy(tmp_path), "sync", "noslice",
                        via_run=False, env={"SCRIPT_STEPS": "2"})
    try:
        codes = job.wait(TIMEOUT_S)
        assert set(codes.values()) == {0}
        for name in job.procs:
            assert job.stderr(name).count("DASK_FLUID_JOB_SECRET is not set") == 1
    finally:
        job.kill_all()


def test_a_trainer_with_the_wrong_secret_is_refused(tmp_path):
    job = cluster.start(tmp_path, cluster.dask_fluid_copy(tmp_path), "sync", "noslice",
                        via_run=False, env={"DASK_FLUID_JOB_SECRET": "right",
                                            "FLAGS_rpc_deadline": "8000"})
    # replace trainer 1 by one that holds another secret
    job.procs.pop("trainer1").kill()
    import os
    import subprocess
    bad = subprocess.Popen(
        cluster.command(cluster.dask_fluid_copy(tmp_path), str(tmp_path / "bad.json"), "sync",
                        "noslice", via_run=False),
        env={**os.environ, "FLAGS_rpc_deadline": "8000", "DASK_FLUID_JOB_SECRET": "wrong",
             "PADDLE_PSERVER_ENDPOINTS": ",".join(job.endpoints), "PADDLE_TRAINERS_NUM": "2",
             "PADDLE_TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert bad.wait(TIMEOUT_S) != 0
        err = bad.stderr.read().decode()
        assert "refused trainer 1" in err and "job secret" in err, err
    finally:
        bad.kill()
        bad.wait()
        bad.stdout.close()
        bad.stderr.close()
        job.kill_all()


def _wait_for_step(job: cluster.Job, name: str, step: int) -> None:
    proc = job.procs[name]
    give_up = time.monotonic() + TIMEOUT_S
    while time.monotonic() < give_up:
        line = proc.stdout.readline().decode()
        if line.startswith(f"step {step}"):
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"{name} ended before step {step}: {job.stderr(name)}")
    raise AssertionError(f"{name} never reached step {step}")


@pytest.mark.parametrize("victim", ["trainer1", "pserver1"])
def test_killing_a_role_ends_the_others_within_the_deadline_naming_it(tmp_path, victim):
    deadline_ms = 6000
    job = cluster.start(tmp_path, cluster.dask_fluid_copy(tmp_path), "sync", "noslice",
                        via_run=False, env={"SCRIPT_STEPS": "1000", "SCRIPT_STEP_SLEEP": "0.02",
                                            "FLAGS_rpc_deadline": str(deadline_ms)})
    try:
        _wait_for_step(job, "trainer0", 3)
        job.procs[victim].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        others = [n for n in job.procs if n != victim]
        codes = {}
        for name in others:
            codes[name] = job.procs[name].wait(deadline_ms / 1000 + 10)
        elapsed = time.monotonic() - killed_at
        assert elapsed < deadline_ms / 1000 + 10, elapsed
        assert all(c != 0 for c in codes.values()), codes
        # every survivor names what died: the lost trainer's id, or the dead pserver's endpoint
        dead = "trainer 1" if victim == "trainer1" else job.endpoints[1]
        for name in others:
            err = job.stderr(name)
            assert dead in err, (name, err[-2000:])
    finally:
        job.kill_all()


def test_a_trainer_whose_pserver_never_comes_fails_within_the_deadline(tmp_path):
    script = cluster.dask_fluid_copy(tmp_path)
    import os
    import subprocess
    out = tmp_path / "t.json"
    start = time.monotonic()
    with cluster.port_nobody_serves() as port:
        proc = subprocess.run(
            [sys.executable, str(script), str(out), "sync", "noslice"],
            env={**os.environ, "FLAGS_rpc_deadline": "3000", "PADDLE_TRAINING_ROLE": "TRAINER",
                 "PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "1",
                 "PADDLE_PSERVER_ENDPOINTS": f"127.0.0.1:{port}"},
            capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode != 0
    assert time.monotonic() - start < 3 + 15
    err = proc.stderr.decode()
    assert f"pserver 127.0.0.1:{port} did not accept" in err and "DeadlineExceededError" in err


def test_a_pserver_whose_trainers_never_come_fails_within_the_deadline(tmp_path):
    script = cluster.dask_fluid_copy(tmp_path)
    import os
    import subprocess
    start = time.monotonic()
    with cluster.port_nobody_serves() as port:  # the pserver listens on it (SO_REUSEADDR)
        proc = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "p.json"), "sync", "noslice"],
            env={**os.environ, "FLAGS_rpc_deadline": "3000", "PADDLE_TRAINING_ROLE": "PSERVER",
                 "PADDLE_TRAINERS_NUM": "2", "PADDLE_PSERVER_ENDPOINTS": f"127.0.0.1:{port}",
                 "PADDLE_CURRENT_ENDPOINT": f"127.0.0.1:{port}"},
            capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode != 0
    assert time.monotonic() - start < 3 + 15
    err = proc.stderr.decode()
    assert "heard nothing from trainer 0" in err and "DeadlineExceededError" in err
    assert not (tmp_path / "p.json").exists() or json.loads(
        (tmp_path / "p.json").read_text())["role"] == "PSERVER"
