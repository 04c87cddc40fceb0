"""Watching training (issue 17): honest progress from the trainers' own totals, the pservers'
counters, and the dashboard page that the scheduler plugin serves.

Non-regression for issue 17: the progress bar summed the ``samples`` of the step events that
reached the client, but trainers publish only a few step events per second, so it showed
2,845-3,644 samples/s for a fit that ran at ~60k.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import urllib.request

import dask.array as da
import numpy as np
import pytest

from dask_fluid.datasets import reference_blobs
from dask_fluid.distributed import train_collective, train_pserver
from dask_fluid.distributed.launch.dashboard.plugin import PLUGIN_NAME, Board
from dask_fluid.distributed.launch.events import StepMeter, TrainResult
from dask_fluid.distributed.launch.progress import JobProgress, LossCurve
from dask_fluid.distributed.launch.script import launch_script
from dask_fluid.distributed.launch.script_steps import (
    STEP_FD_ENV,
    StepReporter,
    install_from_env,
    read_steps,
)
from dask_fluid.executor import Executor, Scope
from dask_fluid.models import mlp

from ..launch import cluster as launch_cluster

pytestmark = pytest.mark.slow

X, Y = reference_blobs(8_000)


def _data(n_chunks: int = 2) -> dict:
    chunk = len(X) // n_chunks
    return {"x": da.from_array(X, chunks=(chunk, 64)),
            "y": da.from_array(Y[:, None].astype(np.int64), chunks=(chunk, 1))}


# -- pure parts ---------------------------------------------------------------------------------


def test_loss_curve_stays_bounded_and_keeps_the_latest_steps():
    curve = LossCurve(max_points=8)
    for step in range(100):
        curve.add(step, 1.0 / (step + 1))
    assert 4 <= len(curve) < 8
    assert curve.steps == sorted(curve.steps) and curve.steps[0] == 0
    assert curve.steps[-1] >= 100 - 16  # the stride is at most 16 after four halvings


def test_step_meter_averages_over_the_steps_since_the_last_event():
    meter = StepMeter(interval_s=3600)
    for _ in range(4):
        meter.step(32, wait_s=0.001)
    assert not meter.due() and meter.due(last=True)
    fields = meter.fields()
    assert fields["trained"] == 128 and fields["done_steps"] == 4
    assert fields["wait_s"] == pytest.approx(0.001)
    assert fields["step_s"] == pytest.approx(fields["elapsed"] / 4)
    meter.step(32)
    assert meter.fields()["wait_s"] == 0.0  # a new window


def test_job_progress_counts_what_the_trainers_trained_not_the_events():
    p = JobProgress("loss")
    p({"type": "job", "job": "j", "rounds": 100, "trainers": ["w0", "w1"],
       "pservers": {"ep0": "w0"}, "time": 1.0})
    # two events arrive, but each trainer reports 50 steps of 128 samples in 0.5 s
    for rank in (0, 1):
        p({"type": "step", "rank": rank, "epoch": 0, "step": 49, "samples": 128,
           "trained": 6400, "done_steps": 50, "elapsed": 0.5 + 0.5 * rank, "step_s": 0.01,
           "wait_s": 0.004 * (1 - rank), "fetches": {"loss": 1.0 + rank}})
    p({"type": "pserver", "endpoint": "ep0", "rounds": 50, "optimize_s": 0.1,
       "bytes_in": 1000, "bytes_out": 2000})
    assert p.trained == 12800
    assert p.samples_per_s == pytest.approx(12800 / 1.0)  # the slowest trainer's clock
    assert p.step == 50 and p.rounds == 100 and p.loss == pytest.approx(1.5)
    assert p.slowest.rank == 1  # most compute per step
    assert p.pservers["ep0"].update_s == pytest.approx(0.002)
    assert p.trainers[1].worker == "w1" and len(p.trainers[0].curve) == 1
    assert p.describe()["samples/s"] == "12,800"
    assert p.describe()["slowest"] == "trainer 1 (10.0 ms compute)"


def test_the_event_interval_comes_from_the_workers_environment_and_is_checked():
    probe = ("from dask_fluid.distributed.launch import events, pserver_tasks\n"
             "from dask_fluid.distributed.collective import runtime\n"
             "print(events.PUBLISH_INTERVAL_S, events.StepMeter().interval_s, "
             "pserver_tasks.PUBLISH_INTERVAL_S, runtime.PUBLISH_INTERVAL_S)")

    def run(value):
        env = {k: v for k, v in os.environ.items() if k != "DASK_FLUID_EVENT_INTERVAL"}
        if value is not None:
            env["DASK_FLUID_EVENT_INTERVAL"] = value
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                              text=True, timeout=120)

    assert run(None).stdout.split() == ["0.2"] * 4
    assert run("0.5").stdout.split() == ["0.5"] * 4
    for bad in ("fast", "-1", "inf", "nan"):
        out = run(bad)
        assert out.returncode != 0
        assert f"DASK_FLUID_EVENT_INTERVAL='{bad}' is not allowed" in out.stderr


def test_board_keeps_running_jobs_and_drops_the_oldest_finished():
    board = Board(max_jobs=2)
    for i in range(4):
        board({"type": "job", "job": f"j{i}"})
        board({"type": "job_end", "job": f"j{i}", "status": "finished"})
    board({"type": "job", "job": "live"})
    assert "live" in board.jobs and len(board.jobs) <= 3
    assert "j0" not in board.jobs
    board({"type": "done", "job": "j0", "rank": 0})  # the tail of a dropped job
    assert "j0" not in board.jobs


def test_train_result_renders_in_jupyter():
    result = TrainResult(params={"w": np.zeros((3, 4), np.float32)}, steps=10, samples=1280,
                         epochs=[{"epoch": 0, "loss": 1.0}, {"epoch": 1, "loss": 0.5}],
                         elapsed_s=0.5, samples_per_s=2560.0, summary="pserver <a> on w0")
    page = result._repr_html_()
    assert "<td>2,560</td>" in page and "<td>0.5000</td>" in page
    assert "pserver &lt;a&gt; on w0" in page  # escaped


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_step_reporter_counts_the_training_runs_their_rows_and_the_loss(tmp_path):
    spec = mlp(hidden=(8,))
    exe, scope = Executor(), Scope()
    out = tmp_path / "steps.jsonl"
    reporter = StepReporter(out.open("w"), interval_s=3600).install()
    try:
        exe.run(spec.startup, scope=scope)  # no backward ops: not a step
        losses = [float(exe.run(spec.main, feed={"x": X[:32], "y": Y[:32, None]},
                                fetch_list=[spec.loss], scope=scope)[0][0]) for _ in range(5)]
        exe.run(spec.main.clone(for_test=True), feed={"x": X[:7], "y": Y[:7, None]},
                fetch_list=[spec.loss], scope=scope)  # a test program: not a step
    finally:
        reporter.close()
    exe.run(spec.main, feed={"x": X[:32], "y": Y[:32, None]}, scope=scope)  # closed: unheard
    step, done = _records(out)  # the throttle held back all but the last step
    assert step["type"] == "step" and step["step"] == 4 and step["samples"] == 32
    assert step["trained"] == 5 * 32 and step["done_steps"] == 5
    assert step["fetches"] == {spec.loss.name: pytest.approx(losses[-1])}
    assert step["step_s"] == pytest.approx(step["elapsed"] / 5)  # from the first run's start
    assert done == {"type": "done", "steps": 5, "samples": 160, "elapsed": step["elapsed"]}
    # the worker side publishes them as trainer 3's events
    published = []
    assert read_steps(io.StringIO(out.read_text()), 3, published.append)["type"] == "done"
    assert [e["rank"] for e in published] == [3, 3]


def test_step_reporter_from_the_environment_hides_the_pipe_from_the_script(tmp_path):
    r, w = os.pipe()
    environ = {STEP_FD_ENV: str(w)}
    reporter = install_from_env(environ)
    assert reporter is not None and STEP_FD_ENV not in environ  # not seen by its children
    assert not os.get_inheritable(w)
    reporter.close()  # no step: nothing written, and the write end closed
    with os.fdopen(r) as stream:
        assert stream.read() == ""
    assert install_from_env({}) is None


# -- on the session cluster ---------------------------------------------------------------------


def _board(client) -> dict:
    def read(dask_scheduler=None):
        board = dask_scheduler.plugins[PLUGIN_NAME].board
        return {job: {"status": p.status, "kind": p.info.get("kind"), "step": p.step,
                      "rounds": p.rounds, "rate": p.samples_per_s,
                      "points": {r: len(t.curve) for r, t in p.trainers.items()},
                      "bytes": {e: (s.bytes_in, s.bytes_out, s.rounds)
                                for e, s in p.pservers.items()},
                      "summary": p.info.get("summary", "")}
                for job, p in board.jobs.items()}

    return client.run_on_scheduler(read)


def _finished_board(client, job: str, attempts: int = 600) -> dict:
    """The board's view of ``job`` once its end reached the scheduler (the launcher's events go
    through the client's batched stream, run_on_scheduler through another connection)."""
    for _ in range(attempts):
        b = _board(client).get(job)
        if b is not None and b["status"] != "running":
            return b
        time.sleep(0.05)
    raise AssertionError(f"job {job} never ended on the board: {_board(client).get(job)}")


def test_pserver_progress_equals_the_result_and_reaches_the_board(dist_client, workers):
    spec = mlp(hidden=(32,))
    seen = JobProgress()
    result = train_pserver(dist_client, spec.main, spec.startup, _data(), pservers=workers[:2],
                           trainers=workers[:2], epochs=2, batch_size=64,
                           fetch_list=[spec.loss], callbacks=[seen])
    # the trainers' "done" totals reached the callbacks before train_pserver returned
    assert seen.trained == result.samples == 2 * len(X)
    assert seen.samples_per_s == pytest.approx(result.samples_per_s, rel=1e-6)
    assert seen.step == seen.rounds == 2 * (len(X) // 2 // 64 + 1)
    assert seen.info["kind"] == "pserver" and "pserver(s)" in seen.info["summary"]

    b = _finished_board(dist_client, seen.job)
    assert b["status"] == "finished" and b["step"] == seen.rounds
    assert set(b["points"]) == {0, 1} and min(b["points"].values()) > 0
    # every round each trainer pushes the gradients of the pserver's blocks and pulls them
    # back: bytes in == bytes out, both non-zero, on both pservers
    assert len(b["bytes"]) == 2
    for bytes_in, bytes_out, rounds in b["bytes"].values():
        assert rounds == seen.rounds and bytes_in > 0 and bytes_out >= bytes_in


@pytest.mark.parametrize("kind", ["pserver", "collective"])
def test_a_job_shorter_than_the_event_interval_still_shows_its_steps(dist_client, workers,
                                                                      kind):
    # 2 epochs of 2 steps train in well under the 0.2 s event interval: each trainer's step
    # events are then only its epochs' last steps, and they must reach the callbacks before
    # the job returns (once, they came after it and the notebook's loss curve stayed empty)
    spec = mlp(hidden=(8,))
    data = {"x": X[:256], "y": Y[:256]}
    events: list[dict] = []
    if kind == "pserver":
        train_pserver(dist_client, spec.main, spec.startup, data, pservers=workers[:1],
                      trainers=workers[:2], epochs=2, batch_size=64, shuffle=False,
                      fetch_list=[spec.loss], callbacks=[events.append])
    else:
        train_collective(dist_client, spec.main, spec.startup, data, trainers=workers[:2],
                         epochs=2, batch_size=64, fetch_list=[spec.loss],
                         callbacks=[events.append])
    for rank in (0, 1):
        steps = [e for e in events if e["type"] == "step" and e["rank"] == rank]
        assert {e["epoch"] for e in steps} == {0, 1}, (rank, steps)
        assert all(spec.loss.name in e["fetches"] for e in steps)
        assert [e for e in events if e["type"] == "done" and e["rank"] == rank]


def test_collective_progress_equals_the_result(dist_client, workers):
    spec = mlp(hidden=(32,))
    seen = JobProgress()
    result = train_collective(dist_client, spec.main, spec.startup, _data(),
                              trainers=workers[:2], epochs=1, batch_size=64,
                              fetch_list=[spec.loss], callbacks=[seen])
    assert seen.trained == result.samples
    assert seen.samples_per_s == pytest.approx(result.samples_per_s, rel=1e-6)
    assert seen.info["kind"] == "collective" and seen.step == seen.rounds
    assert all(t.step_s > 0 for t in seen.trainers.values())


def test_dashboard_lists_and_serves_the_fluid_page(dist_client, workers):
    spec = mlp(hidden=(16,))
    train_pserver(dist_client, spec.main, spec.startup, _data(), pservers=workers[:1],
                  trainers=workers[:2], epochs=1, batch_size=256, fetch_list=[spec.loss])
    base = dist_client.dashboard_link.rsplit("/", 1)[0]
    with urllib.request.urlopen(f"{base}/individual-plots.json", timeout=30) as reply:
        plots = json.loads(reply.read())
    fluid = {name: path for name, path in plots.items() if "fluid" in name.lower()}
    assert fluid == {"Individual Fluid Training": "/individual-fluid-training"}
    assert "Individual Task Stream" in plots  # distributed's own pages are still listed
    with urllib.request.urlopen(f"{base}{fluid['Individual Fluid Training']}",
                                timeout=30) as reply:
        page = reply.read().decode()
    assert "<title>Dask: Fluid Training</title>" in page


def test_launched_script_reports_its_steps_and_loss_to_the_progress_and_the_board(
        dist_client, workers, tmp_path):
    """``dask-fluid launch`` runs the user's script, which calls exe.run itself: its trainers'
    steps reach the callbacks and the dashboard page all the same."""
    seen = JobProgress()
    launch_script(dist_client, str(launch_cluster.SCRIPT),
                  [str(tmp_path / "{role}{trainer_id}.json"), "sync", "noslice"], pservers=1,
                  trainers=2, out=io.StringIO(), err=io.StringIO(), workers=workers,
                  callbacks=[seen])
    assert seen.info["kind"] == "launch" and sorted(seen.trainers) == [0, 1]
    for rank, t in seen.trainers.items():
        losses = json.loads((tmp_path / f"trainer{rank}.json").read_text())["losses"]
        # 12 steps of 16 rows each (fluid_script.py), the loss the script fetched last
        assert t.done and t.done_steps == len(losses) == 12 and t.trained == 12 * 16
        assert t.loss == pytest.approx(losses[-1]) and t.elapsed > 0
    assert seen.step == 12 and not seen.has_epochs and "epoch" not in seen.describe()
    assert seen.describe()["slowest"].endswith("ms a step)")  # no wait: not called compute

    b = _finished_board(dist_client, seen.job)
    assert b["status"] == "finished" and b["kind"] == "launch" and b["step"] == 12
    assert set(b["points"]) == {0, 1} and min(b["points"].values()) > 0
    assert b["rate"] == pytest.approx(seen.samples_per_s, rel=1e-6)


def test_step_reporter_counts_dygraph_training_steps(tmp_path):
    import dask_fluid as fluid
    from dask_fluid import dygraph

    out = tmp_path / "steps.jsonl"
    reporter = StepReporter(out.open("w"), interval_s=3600).install()
    try:
        with dygraph.guard(fluid.CPUPlace()):
            model = dygraph.Linear(3, 2)
            opt = fluid.optimizer.SGD(0.1, parameter_list=model.parameters())
            for rows in (8, 8, 6):
                x = dygraph.to_variable(np.ones((rows, 3), "float32"))
                loss = fluid.layers.mean(model(x)) / dygraph.to_variable(
                    np.array([2.0], "float32"))  # a constant of one row: not the batch
                loss.backward()
                opt.minimize(loss)
                model.clear_gradients()
            model(x)  # a forward pass alone is no step
    finally:
        reporter.close()
    step, done = _records(out)
    assert step["step"] == 2 and step["samples"] == 6 and step["trained"] == 22
    assert step["fetches"] == {loss.name: pytest.approx(float(loss.numpy()))}
    assert done["steps"] == 3 and done["samples"] == 22
