"""The ``dask-fluid`` command: demo in every CPU mode, info, exit codes and one-line errors."""

from __future__ import annotations

import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import urllib.request

import pytest

from dask_fluid import cli
from dask_fluid.distributed.errors import WorkerLostError

SMALL = ["--samples", "20000", "--epochs", "1", "--no-progress"]


def _console_script() -> str:
    """The ``dask-fluid`` script that ``pip install -e .`` put next to this interpreter."""
    here = pathlib.Path(sys.executable).parent / "dask-fluid"
    found = str(here) if here.exists() else shutil.which("dask-fluid")
    assert found, ("the dask-fluid console script is not installed: run "
                   "python3 -m pip install -e . (the README's install command)")
    return found


def _run(*args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([_console_script(), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _check_demo_output(out: str, mode: str, dask_output: bool) -> float:
    """Assert the demo's sections; return the test accuracy it printed."""
    assert f"mode='{mode}'" in out
    assert "Transpiled programs" in out
    assert "epoch   1/1  loss " in out
    assert "test accuracy" in out and "throughput" in out and "elapsed" in out
    assert ("predict returned a dask array" in out) is dask_output
    line = next(x for x in out.splitlines() if x.strip().startswith("test accuracy"))
    return float(line.split()[2])


# ----------------------------------------------------------------------------------------------
# demo
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_demo_console_script_pserver():
    """The README's main job, as installed, with small sizes: pserver mode on 2 workers."""
    proc = _run("demo", *SMALL)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    acc = _check_demo_output(out, "pserver", dask_output=True)
    assert acc > 0.75  # one epoch on 16k rows; the full demo reaches ~0.85
    assert "DistributeTranspiler (pserver mode): 2 pserver(s), 2 trainer(s), sync" in out
    assert "send_barrier" in out and "fetch_barrier" in out  # the trainer program
    assert "sum, scale" in out                                # a pserver optimize block
    assert "LocalCluster, 2 worker process(es)" in out
    assert "What ran where" in out and "trainer 1 on worker" in out
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_demo_in_process_pserver_async_dc_asgd(capsys):
    code = cli.main(["demo", *SMALL, "--async", "--dc-asgd", "--pservers", "1"])
    out = capsys.readouterr().out
    assert code == 0
    _check_demo_output(out, "pserver", dask_output=True)
    assert "sync_mode=False" in out and "enable_dc_asgd=True" in out
    assert "1 pserver(s), 2 trainer(s), async" in out
    assert "ref_by_trainer_id" in out  # DC-ASGD's compensation ops on the pserver


def test_demo_in_process_local(capsys):
    code = cli.main(["demo", "--mode", "local", *SMALL])
    out = capsys.readouterr().out
    assert code == 0
    acc = _check_demo_output(out, "local", dask_output=False)
    assert acc > 0.75
    assert "cluster: none" in out and "local program" in out


@pytest.mark.slow
def test_demo_collective_on_existing_scheduler(capsys):
    """--scheduler connects to a running cluster (and leaves it running)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=40) as cluster:
        code = cli.main(["demo", "--mode", "collective", "--scheduler",
                         cluster.scheduler_address, *SMALL])
        out = capsys.readouterr().out
        assert code == 0
        _check_demo_output(out, "collective", dask_output=True)
        assert f"existing cluster at {cluster.scheduler_address}: 2 worker(s)" in out
        assert "nccl2 mode" in out and "gen_nccl_id" in out
        assert "backend ring" in out
        assert len(cluster.workers) == 2  # the demo did not shut the cluster down


class _AtLine(io.StringIO):
    """Standard output that, at the first line holding ``marker``, runs ``then(line)`` before
    the writer goes on: the demo waits inside that print while ``then`` looks at its cluster
    (whose scheduler and dashboard run on their own event-loop thread)."""

    def __init__(self, marker: str, then) -> None:
        super().__init__()
        self.marker, self.then, self.seen = marker, then, None

    def write(self, text: str) -> int:
        if self.seen is None and self.marker in text:
            self.seen = text
            self.then(text)
        return super().write(text)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return reply.read().decode()


@pytest.mark.slow
def test_demo_dashboard_prints_the_fluid_page_while_it_serves_it(monkeypatch):
    served = {}

    def visit(line: str) -> None:
        url = line.split("dashboard: ", 1)[1].split()[0]
        base = url.rsplit("/", 1)[0]
        served["url"] = url
        served["plots"] = json.loads(_get(f"{base}/individual-plots.json"))
        served["page"] = _get(url)

    out = _AtLine("  dashboard: ", visit)
    monkeypatch.setattr(sys, "stdout", out)
    code = cli.main(["demo", "--dashboard", "--samples", "2000", "--epochs", "1", "--hidden",
                     "16", "--no-progress"])
    assert code == 0, out.getvalue()
    assert served["url"].startswith("http://") and served["url"].endswith(
        "/individual-fluid-training")
    assert served["plots"]["Individual Fluid Training"] == "/individual-fluid-training"
    assert "<title>Dask: Fluid Training</title>" in served["page"]
    assert "test accuracy" in out.getvalue()  # and the demo went on to the end


def test_demo_unreachable_scheduler_exits_1(capsys):
    code = cli.main(["demo", "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "1",
                     *SMALL])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "cannot connect to the scheduler at tcp://127.0.0.1:9" in err


@pytest.mark.slow
def test_impossible_configuration_exits_2(capsys):
    """More collective trainers than workers: refused by the runtime before any work, reported
    as usage. (Pserver mode runs several trainer loops per worker since 3709eaf.)"""
    code = cli.main(["demo", "--mode", "collective", "--workers", "1", "--trainers", "3",
                     *SMALL])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("dask-fluid demo: ValueError: ")
    assert "trainers" in err[0]


def test_training_failure_exits_1_with_one_line(monkeypatch, capsys):
    """A DistributedTrainingError from fit() becomes one line and exit code 1."""
    import dask_fluid.estimators as estimators

    def broken_fit(self, X, y):
        raise WorkerLostError("worker left the cluster", "pserver", "tcp://10.0.0.1:1234", 17)

    monkeypatch.setattr(estimators.MLPClassifier, "fit", broken_fit)
    code = cli.main(["demo", "--mode", "local", *SMALL])
    captured = capsys.readouterr()
    assert code == 1
    assert "Training (1 epoch(s)" in captured.out  # it got as far as training
    err = captured.err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("dask-fluid: training failed: WorkerLostError: pserver "
                             "tcp://10.0.0.1:1234 (step 17)")


# ----------------------------------------------------------------------------------------------
# bad usage: exit code 2, one clear line, nothing started
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--mode", "spark"], "invalid choice: 'spark'"),
        (["demo", "--workers", "0"], "argument --workers: 0 is not allowed"),
        (["demo", "--samples", "many"], "argument --samples: 'many' is not an integer"),
        (["demo", "--samples", "100"], "--samples 100 is too small"),
        (["demo", "--dc-asgd"], "--dc-asgd needs --async"),
        (["demo", "--mode", "collective", "--async"], "apply to --mode pserver only"),
        (["demo", "--sync", "--async"], "not allowed with argument"),
        (["demo", "--mode", "local", "--scheduler", "tcp://127.0.0.1:8786"],
         "--mode local trains in this process"),
        (["demo", "--mode", "nccl2", "--device", "cpu"], "--mode nccl2 runs on GPUs only"),
        (["demo", "--mode", "local", "--dashboard"], "--dashboard shows a cluster's page"),
        (["demo", "--device", "gpu"], "pserver mode runs its kernels on CPUs"),
        (["demo", "--hidden", "256,x"], "not a comma-separated list of layer sizes"),
        (["demo", "--learning-rate", "-1"], "--learning-rate -1.0 must be > 0"),
        (["demo", "--connect-timeout", "5"], "--connect-timeout applies to --scheduler"),
        (["demo", "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "0"],
         "0.0 is not allowed; it must be > 0"),
        (["demo", "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "soon"],
         "'soon' is not a number of seconds"),
        (["train"], "invalid choice: 'train'"),
        (["demo", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_exit_2(argv, message, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    assert code == 2
    err = captured.err.strip().splitlines()
    assert len(err) == 1, captured.err
    assert message in err[0]
    assert err[0].startswith("dask-fluid")
    assert captured.out == ""


def test_nccl2_without_gpu_exits_2_before_any_work(monkeypatch, capsys):
    monkeypatch.setattr(cli, "gpu_status", lambda: {"cupy": None, "gpus": 0, "names": [],
                                                    "nccl": False, "reason": "no CUDA device"})
    code = cli.main(["demo", "--mode", "nccl2"])
    captured = capsys.readouterr()
    assert code == 2
    assert "--mode nccl2 needs a CUDA GPU and CuPy" in captured.err
    assert "use --mode collective or pserver on CPUs" in captured.err
    assert captured.out == ""


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().err


def test_help_and_version_exit_0(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("dask-fluid ")
    assert cli.main(["demo", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--mode", "--workers", "--pservers", "--epochs", "--samples", "--batch-size",
                   "--scheduler", "--async", "--dc-asgd"):
        assert option in out


def test_bad_usage_console_script_exit_2():
    proc = _run("demo", "--mode", "spark", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "invalid choice" in proc.stderr


# ----------------------------------------------------------------------------------------------
# info
# ----------------------------------------------------------------------------------------------


def test_info_in_process(capsys, monkeypatch):
    monkeypatch.delenv("FLAGS_rpc_deadline", raising=False)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dask-fluid 0.")
    for name in ("numpy", "dask", "distributed", "scikit-learn", "cupy", "GPU:"):
        assert name in out
    assert "FLAGS_rpc_deadline" in out and "dask_fluid.rpc.deadline" in out
    assert "FLAGS_rpc_prefetch_thread_num" in out


def test_info_json_reports_sources(monkeypatch, capsys):
    import dask.config

    monkeypatch.setenv("FLAGS_rpc_deadline", "5000")
    with dask.config.set({"dask_fluid.rpc.get-thread-num": 3}):
        assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    flags = {row["flag"]: row for row in data["flags"]}
    assert flags["FLAGS_rpc_deadline"]["value"] == 5000
    assert flags["FLAGS_rpc_deadline"]["source"] == "env"
    assert flags["FLAGS_rpc_get_thread_num"]["value"] == 3
    assert flags["FLAGS_rpc_get_thread_num"]["source"] == "dask.config"
    assert flags["FLAGS_rpc_send_thread_num"] == {
        "flag": "FLAGS_rpc_send_thread_num", "key": "dask_fluid.rpc.send-thread-num",
        "default": 12, "source": "default", "value": 12, "error": ""}
    assert data["gpu"]["gpus"] == len(data["gpu"]["names"])
    assert data["packages"]["numpy"]


def test_info_invalid_flag_exits_2(monkeypatch, capsys):
    monkeypatch.setenv("FLAGS_rpc_deadline", "soon")
    assert cli.main(["info"]) == 2
    captured = capsys.readouterr()
    assert "INVALID" in captured.out
    assert "environment variable FLAGS_rpc_deadline = 'soon' is not allowed" in captured.err


def test_info_console_script():
    proc = _run("info", env={"FLAGS_rpc_deadline": "7000"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "7000  (env;" in proc.stdout


def test_gpu_status_shape():
    status = cli.gpu_status()
    assert set(status) == {"cupy", "gpus", "names", "nccl", "reason"}
    assert (status["gpus"] > 0) == (status["reason"] == "")
