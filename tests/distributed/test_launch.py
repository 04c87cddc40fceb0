"""run_tasks: results in order, events delivered, the first failure aborts every other task."""

import time

import pytest
from distributed import Client, get_worker

from dask_fluid.distributed.comm import rpc
from dask_fluid.distributed.errors import DistributedTrainingError, WorkerLostError
from dask_fluid.distributed.launch import events
from dask_fluid.distributed.launch.tasks import TaskSpec, new_job_id, run_tasks

from .conftest import make_cluster


def _report(job, rank, n):
    worker = get_worker()
    for step in range(n):
        events.publish(worker, job, {"type": "step", "rank": rank, "step": step})
    return rank * 10


def _wait_forever(job, rank):
    """Blocks on a mailbox nobody writes to: only the job's abort can end it."""
    worker = get_worker()
    box = rpc.attach_service(worker, job, "box", rpc.Mailbox())
    return box.get(("never",), timeout=120, endpoint=worker.address)


def _fail(job, rank):
    time.sleep(0.3)
    raise ArithmeticError("trainer blew up")


def _exit_process(job, rank):
    import os

    time.sleep(0.3)
    os._exit(1)


def test_results_and_events(dist_client):
    job = new_job_id()
    workers = sorted(dist_client.scheduler_info()["workers"])
    seen = []
    out = run_tasks(dist_client, job,
                    [TaskSpec(w, _report, (job, r, 3)) for r, w in enumerate(workers)],
                    callbacks=[seen.append])
    assert out == [0, 10, 20]
    deadline = time.time() + 5
    while sum(e["type"] == "step" for e in seen) < 9 and time.time() < deadline:
        time.sleep(0.05)
    # the callbacks also hear the launcher's own job event (what the dashboard lists)
    assert [e["type"] for e in seen if e["type"] != "step"] == ["job"]
    steps = [e for e in seen if e["type"] == "step"]
    assert sorted((e["rank"], e["step"]) for e in steps) == [
        (r, s) for r in range(3) for s in range(3)]


def _report_late(job, rank):
    """Returns at once; its step and ``done`` events go out 0.3 s later (events travel through
    the scheduler, the result does not: this makes the result win the race every time)."""
    import threading

    worker = get_worker()

    def later():
        time.sleep(0.3)
        events.publish(worker, job, {"type": "step", "rank": rank, "step": 0})
        events.publish(worker, job, {"type": "done", "rank": rank})

    threading.Thread(target=later, daemon=True).start()
    return rank


def test_the_last_events_of_a_task_that_reports_done_reach_the_callbacks(dist_client):
    job = new_job_id()
    workers = sorted(dist_client.scheduler_info()["workers"])[:2]
    seen = []
    out = run_tasks(dist_client, job, [TaskSpec(w, _report_late, (job, r), reports_done=True)
                                       for r, w in enumerate(workers)],
                    callbacks=[seen.append])
    assert out == [0, 1]
    # no sleep here: run_tasks returned only once both "done" events had been delivered
    assert sorted((e["type"], e["rank"]) for e in seen if e["type"] != "job") == [
        ("done", 0), ("done", 1), ("step", 0), ("step", 1)]


def test_failure_aborts_blocked_tasks_quickly(dist_client):
    job = new_job_id()
    w0, w1, w2 = sorted(dist_client.scheduler_info()["workers"])
    tasks = [TaskSpec(w0, _wait_forever, (job, 0), endpoint="ep-0"),
             TaskSpec(w1, _wait_forever, (job, 1)),
             TaskSpec(w2, _fail, (job, 2), endpoint="ep-2")]
    t0 = time.time()
    with pytest.raises(DistributedTrainingError, match="trainer ep-2.*ArithmeticError"):
        run_tasks(dist_client, job, tasks)
    assert time.time() - t0 < 8
    # the cluster is usable afterwards
    job2 = new_job_id()
    assert run_tasks(dist_client, job2, [TaskSpec(w0, _report, (job2, 1, 1))]) == [10]


@pytest.mark.slow
def test_worker_death_is_reported():
    with make_cluster(2) as cluster, Client(cluster) as client:
        w0, w1 = sorted(client.scheduler_info()["workers"])
        job = new_job_id()
        t0 = time.time()
        with pytest.raises(WorkerLostError, match="pserver"):
            run_tasks(client, job, [TaskSpec(w0, _wait_forever, (job, 0), role="trainer"),
                                    TaskSpec(w1, _exit_process, (job, 1), role="pserver")])
        assert time.time() - t0 < 15
