"""Shared Dask clusters for the tests of dask_fluid.distributed.

One LocalCluster of 3 worker processes (one thread each) serves the whole session; tests that
kill workers make their own. Functions and classes that tests ship to workers are pickled by value
(``cloudpickle.register_pickle_by_value``), so workers never need to import the test modules.
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from distributed import Client, LocalCluster

from dask_fluid.distributed.comm.rpc import ensure_plugin
from dask_fluid.distributed.launch.tasks import live_workers

from ..launch.cluster import port_nobody_serves


def make_cluster(n_workers: int = 3) -> LocalCluster:
    """A LocalCluster of ``n_workers`` processes with one thread each, quiet and dashboard-free."""
    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=40,
    )


@pytest.fixture(scope="session")
def dist_cluster():
    with make_cluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def dist_client(dist_cluster):
    with Client(dist_cluster) as client:
        ensure_plugin(client)
        yield client


@pytest.fixture
def workers(dist_client):
    """Sorted addresses of the session cluster's workers (all 3 are up)."""
    dist_client.wait_for_workers(3, timeout=60)
    # a scheduler round trip (scheduler_info() once gave its cached, worker-less identity
    # here in a full run)
    return sorted(live_workers(dist_client))


def _skip_unknown_removals(cluster: LocalCluster) -> None:
    """Keep ``cluster``'s worker watcher alive through a race of distributed's: the watcher's
    view (``scheduler_info``) is now and then replaced by a snapshot taken before a worker its
    nanny restarted (after a test killed one) joined, and the "remove" of that worker, killed
    in turn, then raises KeyError in ``_update_worker_status``. That kills the watcher, and
    the error comes back when the cluster closes (seen once in a full run, at the teardown of
    test_ring's killing tests). A removal of a worker the view never had changes nothing it
    tracks: skip it."""
    update = cluster._update_worker_status

    def update_known(op: str, msg: object) -> None:
        if op == "remove" and msg not in cluster.scheduler_info["workers"]:
            return
        update(op, msg)

    cluster._update_worker_status = update_known


@pytest.fixture(scope="module")
def killable_client():
    """A client of a 3-process cluster of its own, for tests that kill workers."""
    with make_cluster(3) as cluster:
        _skip_unknown_removals(cluster)
        with Client(cluster) as client:
            ensure_plugin(client)
            yield client


@pytest.fixture
def held_port():
    """``held_port()`` gives a port that stays reserved for this test (the pserver or rank
    under test listens on it), so that no test beside it binds the port first."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(port_nobody_serves())
