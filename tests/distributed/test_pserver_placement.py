"""Mapping pserver endpoints onto Dask workers (pure, no cluster)."""

from __future__ import annotations

import pytest

from dask_fluid.distributed.launch.placement import place_pservers

W = ["tcp://10.0.0.1:4001", "tcp://10.0.0.1:4002", "tcp://10.0.0.2:4001"]


def test_a_count_uses_the_preferred_workers_first_and_their_addresses():
    p = place_pservers(2, W, preferred=[W[2]])
    assert p.endpoints == [W[2], W[0]] and p.workers == [W[2], W[0]]


def test_more_pservers_than_workers_get_labels_and_share_workers():
    p = place_pservers(4, W)
    assert p.endpoints == [f"pserver-{i}:{6174 + i}" for i in range(4)]
    assert p.workers == [W[0], W[1], W[2], W[0]]


def test_inproc_workers_get_labels():
    p = place_pservers(1, ["inproc://192.0.2.2/1/2"])
    assert p.endpoints == ["pserver-0:6174"] and p.workers == ["inproc://192.0.2.2/1/2"]


def test_worker_addresses_with_or_without_scheme():
    p = place_pservers([W[1], "10.0.0.2:4001"], W)
    assert p.workers == [W[1], W[2]] and p.endpoints == [W[1], "10.0.0.2:4001"]
    assert p.worker_of("10.0.0.2:4001") == W[2]


def test_fluid_endpoints_are_mapped_by_host_in_order():
    p = place_pservers("10.0.0.1:6174,10.0.0.2:6174,10.0.0.1:6175,10.0.0.1:6176", W)
    assert p.workers == [W[0], W[2], W[1], W[0]]


def test_fluid_endpoints_on_foreign_hosts_are_assigned_in_order():
    p = place_pservers("127.0.0.1:6174,127.0.0.1:6175,127.0.0.1:6176,127.0.0.1:6177", W)
    assert p.workers == [W[0], W[1], W[2], W[0]]
    assert p.endpoints[0] == "127.0.0.1:6174"


@pytest.mark.parametrize("pservers,match", [
    ("10.0.0.1:6174,10.9.9.9:6174", r"name hosts where no Dask worker runs.*workers are"),
    ("tcp://10.0.0.7:4001", r"no such worker is in the cluster; the cluster's workers are"),
    ("10.0.0.1:6174,10.0.0.1:6174", "listed twice"),
    ("nonsense", "not a valid endpoint"),
    (0, "at least 1 pserver"),
])
def test_unmappable_endpoints_raise_listing_the_workers(pservers, match):
    with pytest.raises(ValueError, match=match):
        place_pservers(pservers, W)


def test_no_workers_and_bad_types():
    with pytest.raises(ValueError, match="no workers"):
        place_pservers(1, [])
    with pytest.raises(TypeError, match="count, worker addresses or endpoints"):
        place_pservers(True, W)
