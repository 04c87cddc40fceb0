"""Data locality: chunk i of every input lands on one worker; values and order survive."""

import sys

import cloudpickle
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import Client, LocalCluster, get_worker

from dask_fluid.distributed.launch.data import (
    DataPartition,
    batch_indices,
    local_arrays,
    partition_by_worker,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

RNG = np.random.default_rng(0)
X_NP = RNG.standard_normal((1000, 5)).astype(np.float32)
Y_NP = np.arange(1000, dtype=np.int64)


def _gather_local(client, partition: DataPartition):
    """Run local_arrays on each data-holding worker and return {worker: arrays}."""

    def on_worker(parts):
        return get_worker().address, local_arrays(parts)

    futures = [
        client.submit(on_worker, partition.futures(w), workers=[w], allow_other_workers=False,
                      pure=False)
        for w in partition.workers
    ]
    return dict(client.gather(futures))


def _check_round_trip(client, partition, x, y):
    local = _gather_local(client, partition)
    assert sorted(local) == partition.workers  # each ran where its data is
    for worker, arrays in local.items():
        assert len(arrays["y"]) == partition.rows_per_worker[worker]
        rows = arrays["y"]
        assert np.all(np.diff(rows) > 0)  # chunk order within a worker
        np.testing.assert_array_equal(arrays["X"], x[rows])  # X and y rows stayed paired
    all_rows = np.sort(np.concatenate([a["y"] for a in local.values()]))
    np.testing.assert_array_equal(all_rows, y)


def test_dask_arrays_with_misaligned_chunks_are_rechunked(dist_client, workers):
    x = da.from_array(X_NP, chunks=(90, 2))  # column blocks too
    y = da.from_array(Y_NP, chunks=333)
    partition = partition_by_worker(dist_client, {"X": x, "y": y})
    assert partition.names == ("X", "y")
    assert partition.chunk_rows == (90,) * 11 + (10,)
    assert partition.n_rows == 1000
    assert sum(partition.rows_per_worker.values()) == 1000
    _check_round_trip(dist_client, partition, X_NP, Y_NP)


def test_chunk_pairs_are_co_located(dist_client, workers):
    x = da.from_array(X_NP, chunks=(100, 5))
    y = da.from_array(Y_NP, chunks=100)
    partition = partition_by_worker(dist_client, {"X": x, "y": y})
    indices = sorted(i for parts in partition.parts.values() for i, _ in parts)
    assert indices == list(range(10))
    for worker, parts in partition.parts.items():
        assert [i for i, _ in parts] == sorted(i for i, _ in parts)
        who_has = dist_client.who_has([f for _, f in parts])
        assert all(worker in holders for holders in who_has.values())

    def parts_here(parts):
        return [sorted(p) for p in parts]  # one object per chunk holding both X_i and y_i

    some_worker = partition.workers[0]
    kinds = dist_client.submit(parts_here, partition.futures(some_worker),
                               workers=[some_worker]).result()
    assert all(k == ["X", "y"] for k in kinds)


def test_numpy_inputs_are_scattered_in_one_block_per_worker(dist_client, workers):
    partition = partition_by_worker(dist_client, {"X": X_NP, "y": Y_NP})
    assert len(partition.chunk_rows) == len(workers)
    assert partition.chunk_rows == (333, 333, 334)
    _check_round_trip(dist_client, partition, X_NP, Y_NP)


def test_numpy_and_dask_inputs_mix(dist_client, workers):
    y = da.from_array(Y_NP, chunks=250)
    partition = partition_by_worker(dist_client, {"X": X_NP, "y": y})
    assert partition.chunk_rows == (250,) * 4
    _check_round_trip(dist_client, partition, X_NP, Y_NP)


def test_the_given_client_is_used_even_when_a_newer_client_exists(dist_client, workers):
    # distributed.wait() would go through the newest client and block our client's event loop
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0",
                      silence_logs=40) as other, Client(other):
        partition = partition_by_worker(dist_client, {"X": X_NP, "y": Y_NP})
        assert set(partition.workers) == set(workers)
    _check_round_trip(dist_client, partition, X_NP, Y_NP)


def test_restricting_to_some_workers(dist_client, workers):
    x = da.from_array(X_NP, chunks=(200, 5))
    partition = partition_by_worker(dist_client, {"X": x, "y": Y_NP}, workers=workers[:2])
    assert set(partition.workers) <= set(workers[:2])
    _check_round_trip(dist_client, partition, X_NP, Y_NP)


def test_dask_dataframe_inputs(dist_client, workers):
    frame = pd.DataFrame(X_NP, columns=list("abcde"))
    frame["y"] = Y_NP
    ddf = dd.from_pandas(frame, npartitions=4)
    partition = partition_by_worker(dist_client, {"X": ddf[list("abcde")], "y": ddf["y"]})
    assert sum(partition.chunk_rows) == 1000 and len(partition.chunk_rows) == 4
    _check_round_trip(dist_client, partition, X_NP, Y_NP)


def test_unknown_chunk_sizes_are_refused(dist_client, workers):
    x = da.from_array(X_NP, chunks=(100, 5))
    filtered = x[x[:, 0] > 0]
    with pytest.raises(ValueError, match=r"unknown chunk sizes.*compute_chunk_sizes\(\)"):
        partition_by_worker(dist_client, {"X": filtered})


def test_row_count_mismatch_is_refused(dist_client, workers):
    with pytest.raises(ValueError, match="same number of rows, got X: 1000, y: 999"):
        partition_by_worker(dist_client, {"X": X_NP, "y": Y_NP[:-1]})
    with pytest.raises(ValueError, match="arrays is empty"):
        partition_by_worker(dist_client, {})


def test_local_arrays_orders_pairs_by_chunk_index():
    parts = [(1, {"y": np.array([2, 3])}), (0, {"y": np.array([0, 1])})]
    np.testing.assert_array_equal(local_arrays(parts)["y"], [0, 1, 2, 3])
    with pytest.raises(ValueError, match="no parts"):
        local_arrays([])


def test_batch_indices_are_seeded_per_epoch_and_keep_the_last_partial_batch():
    batches = batch_indices(10, 4, epoch=0, seed=1, shuffle=True)
    assert [len(b) for b in batches] == [4, 4, 2]
    perm = np.random.default_rng(1).permutation(10)
    np.testing.assert_array_equal(np.concatenate(batches), perm)
    again = batch_indices(10, 4, epoch=0, seed=1, shuffle=True)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))
    next_epoch = np.concatenate(batch_indices(10, 4, epoch=1, seed=1, shuffle=True))
    np.testing.assert_array_equal(next_epoch, np.random.default_rng(2).permutation(10))
    plain = batch_indices(5, 2, epoch=3, seed=0, shuffle=False)
    assert [b.tolist() for b in plain] == [[0, 1], [2, 3], [4]]
    assert batch_indices(0, 2, epoch=0, seed=0) == []
    with pytest.raises(ValueError, match="batch_size = 0"):
        batch_indices(5, 0, epoch=0, seed=0)


def test_group_chunks_is_contiguous_balanced_and_pure():
    from dask_fluid.distributed.launch.data import group_chunks

    assert group_chunks([100] * 10, 3) == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert group_chunks([5, 0, 100, 3], 3) == [[0], [2], [3]]  # empty chunks train nowhere
    assert group_chunks([90] * 11 + [10], 2) == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    with pytest.raises(ValueError, match="1 non-empty row chunk.* for 2 trainer"):
        group_chunks([7, 0], 2)


def test_assign_trainers_moves_only_what_is_held_elsewhere(dist_client, workers):
    from dask_fluid.distributed.launch.data import assign_trainers

    x = da.from_array(X_NP, chunks=(100, 5))
    y = da.from_array(Y_NP, chunks=100)
    x, y = dist_client.persist([x, y], workers=workers[:1])  # all on one worker
    partition = partition_by_worker(dist_client, {"X": x, "y": y}, workers=workers[:1])
    assert partition.workers == workers[:1]
    a = assign_trainers(dist_client, partition, 3, workers)
    assert a.chunks == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]] and a.rows == [300, 400, 300]
    assert sorted(a.workers) == workers and a.workers[1] == workers[0]  # largest stays put
    for rank, (w, futures) in enumerate(zip(a.workers, a.parts, strict=True)):
        holders = dist_client.who_has(futures)
        assert all(w in h for h in holders.values())

        def rows_here(parts):
            return local_arrays(parts)["y"]

        got = dist_client.submit(rows_here, futures, workers=[w], allow_other_workers=False,
                                 pure=False).result()
        lo = [0, 300, 700][rank]
        np.testing.assert_array_equal(got, Y_NP[lo:lo + a.rows[rank]])
