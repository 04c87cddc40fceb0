"""Fluid 1.8's config-driven training modes in the launch style: 2 pservers + 2 trainers as
plain processes, the modes set on DistributeTranspilerConfig as Fluid 1.8 scripts set them
(sync_mode=False first, then runtime_split_send_recv, half_async, completely_not_async,
geo_sgd_mode), and wait_port=False for a trainer whose pserver is not there."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from . import cluster
from .test_launch_style import TIMEOUT_S, _finish

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_losses(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local")
    return cluster.run_local(tmp, cluster.dask_fluid_copy(tmp))


def test_completely_not_async_2x2_processes_equal_local(tmp_path, local_losses):
    job = cluster.start(tmp_path, cluster.dask_fluid_copy(tmp_path), "sync_split", "slice",
                        via_run=False)
    _finish(job)
    dist = (np.array(job.losses("trainer0")) + np.array(job.losses("trainer1"))) / 2
    np.testing.assert_allclose(dist, local_losses, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["sync", "sync_split"])
def test_early_pushes_over_the_socket_2x2_processes_equal_local(tmp_path, local_losses, mode):
    # every gradient goes out ahead of the barrier, over the socket (no shared memory)
    job = cluster.start(tmp_path, cluster.dask_fluid_copy(tmp_path), mode, "slice",
                        via_run=False, env={"DASK_FLUID_SHM_DISABLE": "1",
                                            "DASK_DASK_FLUID__PSERVER__EARLY_PUSH_BYTES": "0"})
    _finish(job)
    dist = (np.array(job.losses("trainer0")) + np.array(job.losses("trainer1"))) / 2
    np.testing.assert_allclose(dist, local_losses, atol=1e-5, rtol=0)
    for name in ("trainer0", "trainer1"):
        # at least one per pserver and step (12 steps, 2 pservers)
        assert job.output(name)["early_pushes"] >= 24, job.output(name)


@pytest.mark.parametrize("mode", ["half_async", "async_split", "geo"])
def test_async_modes_2x2_processes_train(tmp_path, mode):
    # a short sleep per step interleaves the two trainers on a small machine
    job = cluster.start(tmp_path, cluster.dask_fluid_copy(tmp_path), mode, "slice",
                        via_run=False, env={"SCRIPT_STEPS": "40", "SCRIPT_STEP_SLEEP": "0.005",
                                            "SCRIPT_GEO_PUSH": "4"})
    _finish(job)
    for name in ("trainer0", "trainer1"):
        losses = job.losses(name)
        assert len(losses) == 40 and np.mean(losses[-5:]) < np.mean(losses[:5]), (name, losses)


def test_wait_port_false_fails_at_once_when_the_pserver_is_not_there(tmp_path):
    script = cluster.dask_fluid_copy(tmp_path)
    start = time.monotonic()
    with cluster.port_nobody_serves() as port:
        proc = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "t.json"), "sync", "noslice"],
            env={**os.environ, "FLAGS_rpc_deadline": "60000", "SCRIPT_WAIT_PORT": "0",
                 "PADDLE_TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0",
                 "PADDLE_TRAINERS_NUM": "1", "PADDLE_PSERVER_ENDPOINTS": f"127.0.0.1:{port}"},
            capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode != 0
    assert time.monotonic() - start < 30  # far less than the 60 s deadline
    err = proc.stderr.decode()
    assert f"pserver 127.0.0.1:{port} did not accept" in err and "wait_port=False" in err, err
