"""``dask-fluid launch``: the same unchanged Fluid script, once per role, on Dask workers."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_fluid.distributed.errors import DistributedTrainingError
from dask_fluid.distributed.launch.script import launch_script, plan_roles

from . import cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client():
    # in-process workers: each role is a child process of its worker anyway
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=False,
                      dashboard_address=":0", silence_logs=40) as lc, Client(lc) as c:
        yield c


@pytest.fixture(scope="module")
def local_losses(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local")
    return cluster.run_local(tmp, cluster.dask_fluid_copy(tmp))


def test_roles_get_both_fluid_naming_schemes(client):
    roles = plan_roles(client, ["{role}", "{trainer_id}"], pservers=2, trainers=2,
                       role_args=True)
    assert [r.name for r in roles] == ["pserver0", "pserver1", "trainer0", "trainer1"]
    assert len({r.worker for r in roles}) == 4  # round-robin over the 4 workers
    ps, tr = roles[0].env, roles[3].env
    eps = ps["PADDLE_PSERVER_ENDPOINTS"].split(",")
    assert eps == [roles[0].endpoint, roles[1].endpoint]
    assert ps["PADDLE_PSERVERS_IP_PORT_LIST"] == ps["PADDLE_PSERVER_ENDPOINTS"]
    # one port for every pserver (Fluid's IPS + PORT), distinct loopback hosts
    assert [f"{ip}:{ps['PADDLE_PSERVER_PORT']}" for ip in ps["PADDLE_PSERVER_IPS"].split(",")] \
        == eps
    assert ps["PADDLE_TRAINING_ROLE"] == ps["TRAINING_ROLE"] == "PSERVER"
    assert ps["PADDLE_CURRENT_ENDPOINT"] == eps[0]
    assert tr["PADDLE_TRAINING_ROLE"] == "TRAINER" and tr["PADDLE_TRAINER_ID"] == "1"
    assert tr["PADDLE_TRAINERS_NUM"] == tr["PADDLE_TRAINERS"] == "2"
    assert len(tr["DASK_FLUID_JOB_SECRET"]) == 64 and tr["DASK_FLUID_JOB_SECRET"] == \
        ps["DASK_FLUID_JOB_SECRET"]
    assert roles[3].args == ("trainer", "1", "--role", "trainer", "--endpoints", ",".join(eps),
                             "--trainer_id", "1", "--current_endpoint", roles[3].endpoint,
                             "--trainers", "2")
    with pytest.raises(ValueError, match="nccl2 mode has no pservers"):
        plan_roles(client, [], pservers=1, trainers=2, mode="nccl2")
    with pytest.raises(ValueError, match="pservers = 0 is not allowed"):
        plan_roles(client, [], pservers=0, trainers=2)


def test_launch_2x2_on_dask_equals_local(client, tmp_path, local_losses):
    out, err = io.StringIO(), io.StringIO()
    results = launch_script(client, str(cluster.SCRIPT),
                            [str(tmp_path / "{role}{trainer_id}.json"), "sync", "slice"],
                            pservers=2, trainers=2, out=out, err=err)
    assert [r["returncode"] for r in results] == [0, 0, 0, 0]
    t0 = json.loads((tmp_path / "trainer0.json").read_text())["losses"]
    t1 = json.loads((tmp_path / "trainer1.json").read_text())["losses"]
    np.testing.assert_allclose((np.array(t0) + np.array(t1)) / 2, local_losses, atol=1e-5,
                               rtol=0)
    printed = out.getvalue().splitlines()
    assert "[trainer0] step 0" in printed and "[trainer1] step 11" in printed
    assert "DASK_FLUID_JOB_SECRET is not set" not in err.getvalue()  # launch sets one


def test_the_first_failing_role_stops_the_others(client, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(cluster.SCRIPT.read_text().replace(
        "            exe.close()",
        "            if trainer_id == 1:\n                raise SystemExit(3)\n"
        "            exe.close()"))
    with pytest.raises(DistributedTrainingError, match="trainer1 .* exited with code 3") as info:
        launch_script(client, str(bad), [str(tmp_path / "o{role}.json"), "sync", "noslice"],
                      pservers=2, trainers=2, out=io.StringIO(), err=io.StringIO())
    assert info.value.role == "trainer"
    # the cluster is fine afterwards
    assert client.submit(sum, [1, 2]).result() == 3


def test_dask_fluid_launch_command(tmp_path, local_losses):
    proc = subprocess.run(
        [sys.executable, "-m", "dask_fluid.cli", "launch", "--workers", "4", "--pservers", "2",
         "--trainers", "2", str(cluster.SCRIPT), str(tmp_path / "{role}{trainer_id}.json"),
         "sync", "noslice"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    t0 = json.loads((tmp_path / "trainer0.json").read_text())["losses"]
    t1 = json.loads((tmp_path / "trainer1.json").read_text())["losses"]
    np.testing.assert_allclose((np.array(t0) + np.array(t1)) / 2, local_losses, atol=1e-5,
                               rtol=0)
    assert "[trainer1] step 11" in proc.stdout
    # the trainers' steps, counted where the script ran exe.run: 2 x 12 steps of 16 rows
    assert "2 trainer(s) trained 384 samples in 12 step(s) each at most" in proc.stdout
    assert "fluid_script.py (pserver): 12step" in proc.stderr  # the progress line's last state


def test_dask_fluid_launch_exits_non_zero_when_a_role_fails(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os, sys\nif os.environ['PADDLE_TRAINING_ROLE'] == 'TRAINER':\n"
                   "    sys.exit('trainer gave up')\nimport time\ntime.sleep(600)\n")
    proc = subprocess.run(
        [sys.executable, "-m", "dask_fluid.cli", "launch", "--workers", "2", "--pservers", "1",
         "--trainers", "1", str(bad)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "trainer0" in proc.stderr and "trainer gave up" in proc.stderr


def test_launch_on_a_tls_cluster_gives_the_roles_tls_and_equals_local(tmp_path, local_losses):
    pytest.importorskip("cryptography", reason="Security.temporary() needs cryptography")
    from distributed.security import Security

    security = Security.temporary()
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=False, security=security,
                      dashboard_address=":0", silence_logs=40) as lc, \
            Client(lc, security=security) as c:
        assert all(w.startswith("tls://") for w in c.scheduler_info()["workers"])
        results = launch_script(c, str(cluster.SCRIPT),
                                [str(tmp_path / "{role}{trainer_id}.json"), "sync", "slice"],
                                pservers=2, trainers=2, out=io.StringIO(), err=io.StringIO())
    assert [r["returncode"] for r in results] == [0, 0, 0, 0]
    t0 = json.loads((tmp_path / "trainer0.json").read_text())
    t1 = json.loads((tmp_path / "trainer1.json").read_text())
    np.testing.assert_allclose((np.array(t0["losses"]) + np.array(t1["losses"])) / 2,
                               local_losses, atol=1e-5, rtol=0)
    # every role had its worker's certificate (its pservers, trainers and links use TLS)
    assert t0["tls"] == t1["tls"] == ["DASK_FLUID_TLS_CA_FILE", "DASK_FLUID_TLS_CERT",
                                      "DASK_FLUID_TLS_KEY"]
