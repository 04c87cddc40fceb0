"""Data locality: keep training data on the workers that hold it (the xgboost.dask recipe).

:func:`partition_by_worker` persists the inputs, pairs chunk ``i`` of every input into one part
that lives on one worker, asks the scheduler who holds each part, and returns a
:class:`DataPartition` mapping each worker to its parts. :func:`assign_trainers` then decides
which rows each trainer rank trains on as a pure function of the data (contiguous runs of
chunks, balanced by rows), so that two runs with the same data and seeds are bit-identical
wherever Dask happened to put the chunks; each rank runs on the worker that holds most of its
rows, and only the chunks held elsewhere move (worker to worker). The trainer task gets its parts
as arguments; inside it :func:`local_arrays` concatenates them and :func:`batch_indices` draws
that epoch's batches. Nothing is ever computed on the client.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import is_dask_collection
from distributed import Future, futures_of, wait

from dask_fluid.distributed.comm.rpc import _array_module
from dask_fluid.distributed.errors import DeadlineExceededError

__all__ = ["Assignment", "DataPartition", "assign_trainers", "batch_indices", "group_chunks",
           "local_arrays", "partition_by_worker", "partition_by_worker_async"]


@dataclass(frozen=True)
class DataPartition:
    """Where the parts of the training data live.

    Attributes
    ----------
    names : tuple of str
        The input names, e.g. ``("X", "y")``; each part is a dict with these keys.
    parts : dict of str to list of (int, Future)
        Worker address -> ``(chunk_index, future of the part)`` in chunk order. Workers that hold
        only empty chunks are left out.
    chunk_rows : tuple of int
        Number of rows of each chunk, in chunk order.
    rows_per_worker : dict of str to int
        Worker address -> number of rows it holds.
    """

    names: tuple[str, ...]
    parts: dict[str, list[tuple[int, Future]]]
    chunk_rows: tuple[int, ...]
    rows_per_worker: dict[str, int] = field(default_factory=dict)

    @property
    def workers(self) -> list[str]:
        """Addresses of the workers that hold data, sorted."""
        return sorted(self.parts)

    @property
    def n_rows(self) -> int:
        """Total number of rows."""
        return sum(self.chunk_rows)

    def futures(self, worker: str) -> list[Future]:
        """The part futures held by ``worker``, in chunk order."""
        return [future for _, future in self.parts.get(worker, [])]


async def _bounded_wait(client: Any, futures: list[Future], timeout_s: float | None,
                        what: str) -> None:
    """``wait(futures)``, at most ``timeout_s``: a frozen worker must not hold the job for
    ever. The error names the workers the unfinished tasks wait on."""
    with client.as_current():  # wait() otherwise uses the newest client, which may not be ours
        try:
            await wait(futures, timeout=timeout_s)
        except TimeoutError:
            pending = [f.key for f in futures if not f.done()]
            where = await client.run_on_scheduler(_processing_on, pending)
            raise DeadlineExceededError(
                f"{what} did not finish: {len(pending)} task(s) still running or waiting on "
                f"{where or 'no worker'}", "worker", ", ".join(where) or "?",
                deadline_ms=(timeout_s or 0) * 1000) from None


def _processing_on(keys: list[str], dask_scheduler: Any = None) -> list[str]:
    out = set()
    for key in keys:
        ts = dask_scheduler.tasks.get(key)
        if ts is not None and ts.processing_on is not None:
            out.add(ts.processing_on.address)
        for dep in getattr(ts, "dependencies", ()) or ():
            out.update(ws.address for ws in dep.who_has or ())
    return sorted(out)


async def partition_by_worker_async(
    client: Any,
    arrays: Mapping[str, Any],
    *,
    workers: Sequence[str] | None = None,
    timeout_s: float | None = None,
    min_blocks: int = 1,
) -> DataPartition:
    """Asynchronous :func:`partition_by_worker`: with an asynchronous client, or via client.sync."""
    if not arrays:
        raise ValueError("arrays is empty; pass at least one input, e.g. {'X': X, 'y': y}")
    names = tuple(arrays)
    values = {name: await _as_array(client, name, value) for name, value in arrays.items()}
    n_rows = _check_rows(values)
    row_chunks = await _reference_row_chunks(client, values, n_rows, workers, min_blocks)
    chunk_futures = {}
    for name, value in values.items():
        chunk_futures[name] = await _chunk_futures(client, name, value, row_chunks, workers)
    token = uuid.uuid4().hex
    part_futures = [
        client.submit(
            _make_part, names, *(chunk_futures[name][i] for name in names),
            workers=workers, allow_other_workers=False, pure=False,
            key=f"dask-fluid-part-{token}-{i}",
        )
        for i in range(len(row_chunks))
    ]
    await _bounded_wait(client, part_futures, timeout_s, "placing the training data")
    who_has = await client.who_has(part_futures)
    return _build_partition(names, part_futures, row_chunks, who_has)


def partition_by_worker(
    client: Any,
    arrays: Mapping[str, Any],
    *,
    workers: Sequence[str] | None = None,
    timeout_s: float | None = None,
    min_blocks: int = 1,
) -> DataPartition:
    """Persist ``arrays`` on the cluster with chunk ``i`` of every input on one worker.

    Parameters
    ----------
    client : distributed.Client
    arrays : mapping of str to array
        dask arrays, dask DataFrames/Series, numpy arrays or pandas objects, all with the same
        number of rows. dask arrays are rechunked along rows to the first dask input's row chunks
        (and to one block along every other axis); numpy inputs are split into row blocks and
        scattered; dask DataFrames get their partition lengths computed on the cluster.
    workers : sequence of str, optional
        Keep the data on these workers only (default: any worker).
    timeout_s : float, optional
        Give up (``DeadlineExceededError`` naming the workers) when the parts are not in
        memory after this long (the runtimes pass ``FLAGS_rpc_deadline``).
    min_blocks : int
        numpy-only inputs are split into one row block per worker, or this many when more
        (one per trainer when there are more trainers than workers).

    Returns
    -------
    DataPartition

    Raises
    ------
    ValueError
        If the inputs differ in their number of rows, or a dask array has unknown chunk sizes.
    TypeError
        If an input is not array-like.
    """
    return client.sync(partition_by_worker_async, client, arrays, workers=workers,
                       timeout_s=timeout_s, min_blocks=min_blocks)


@dataclass(frozen=True)
class Assignment:
    """Which rows each trainer rank trains on, and where it runs.

    Attributes
    ----------
    workers : list of str
        Rank -> the worker that runs it (holds its parts).
    chunks : list of list of int
        Rank -> the chunk indices it trains on, in order (a pure function of the data).
    parts : list of list of Future
        Rank -> the futures of its parts, on its worker, in chunk order.
    rows : list of int
        Rank -> number of rows.
    """

    workers: list[str]
    chunks: list[list[int]]
    parts: list[list[Future]]
    rows: list[int]


def group_chunks(chunk_rows: Sequence[int], n: int) -> list[list[int]]:
    """Split the non-empty chunks, in order, into ``n`` contiguous runs of about equal rows.

    Parameters
    ----------
    chunk_rows : sequence of int
        Rows of each chunk, in chunk order.
    n : int
        Number of trainers.

    Returns
    -------
    list of list of int
        Rank -> chunk indices.

    Raises
    ------
    ValueError
        Fewer non-empty chunks than trainers.
    """
    chunks = [i for i, r in enumerate(chunk_rows) if r > 0]
    if n < 1 or len(chunks) < n:
        raise ValueError(f"the data has {len(chunks)} non-empty row chunk(s) for {n} "
                         "trainer(s); rechunk it into at least one chunk per trainer (e.g. "
                         "X.rechunk({0: len(X) // n_trainers})), or use fewer trainers")
    total = sum(chunk_rows[i] for i in chunks)
    groups: list[list[int]] = []
    k, done = 0, 0
    for g in range(n):
        goal = done + (total - done) / (n - g)
        group = [chunks[k]]
        done += chunk_rows[chunks[k]]
        k += 1
        # take more while under the goal, leaving at least one chunk for each later rank
        while (k < len(chunks) and len(chunks) - k > n - g - 1
               and done + chunk_rows[chunks[k]] / 2 <= goal):
            done += chunk_rows[chunks[k]]
            group.append(chunks[k])
            k += 1
        groups.append(group)
    groups[-1].extend(chunks[k:])
    return groups


def _identity(part: Any) -> Any:
    return part


def _by_locality(chunk_rows: Sequence[int], groups: list[list[int]], holder_of: dict[int, str],
                 free: list[str]) -> dict[int, str]:
    """Group -> worker: the largest groups choose first, the worker holding most of their rows.
    With more groups than workers each worker takes at most ``ceil(groups / workers)`` of them
    (several trainer loops on one worker, each on its own rows)."""
    free = list(free)
    slots = dict.fromkeys(free, -(-len(groups) // len(free)))
    local = [{w: sum(chunk_rows[i] for i in g if holder_of[i] == w) for w in free}
             for g in groups]
    where: dict[int, str] = {}
    for g in sorted(range(len(groups)), key=lambda g: (-sum(chunk_rows[i] for i in groups[g]),
                                                       g)):
        best = max((w for w in free if slots[w]), key=lambda w: (local[g][w], slots[w],
                                                                   -free.index(w)))
        where[g] = best
        slots[best] -= 1
    return where


async def assign_trainers_async(client: Any, partition: DataPartition, n: int,
                                workers: Sequence[str],
                                timeout_s: float | None = None, *,
                                in_order: bool = False) -> Assignment:
    """Asynchronous :func:`assign_trainers`."""
    groups = group_chunks(partition.chunk_rows, n)
    future_of = {i: f for parts in partition.parts.values() for i, f in parts}
    holder_of = {i: w for w, parts in partition.parts.items() for i, _ in parts}
    free = list(workers) if in_order else sorted(workers)
    if not free or (in_order and len(free) < n):
        raise ValueError(f"{n} trainers bound to workers need {n} workers; {len(free)} are "
                         f"allowed ({free})")
    where = dict(enumerate(free[:n])) if in_order else \
        _by_locality(partition.chunk_rows, groups, holder_of, free)
    token = uuid.uuid4().hex
    parts: list[list[Future]] = []
    moved = []
    for g, group in enumerate(groups):
        mine = []
        for i in group:
            f = future_of[i]
            if holder_of[i] != where[g]:  # held elsewhere: copied worker to worker
                f = client.submit(_identity, f, workers=[where[g]], allow_other_workers=False,
                                  pure=False, key=f"dask-fluid-move-{token}-{i}")
                moved.append(f)
            mine.append(f)
        parts.append(mine)
    if moved:
        await _bounded_wait(client, moved, timeout_s, "moving data to its trainers")
    return Assignment([where[g] for g in range(n)], groups, parts,
                      [sum(partition.chunk_rows[i] for i in g) for g in groups])


def assign_trainers(client: Any, partition: DataPartition, n: int,
                    workers: Sequence[str], timeout_s: float | None = None, *,
                    in_order: bool = False) -> Assignment:
    """Give ``n`` trainer ranks their rows: rank ``r`` trains on the ``r``-th of
    :func:`group_chunks`' runs, on the allowed worker that holds most of them; chunks held
    elsewhere are copied there.

    Parameters
    ----------
    client : distributed.Client
    partition : DataPartition
    n : int
        Number of trainers.
    workers : sequence of str
        The workers trainers may run on; fewer than ``n`` gives some of them several trainers
        (at most ``ceil(n / len(workers))`` each).
    timeout_s : float, optional
        Bound on the copies (``DeadlineExceededError``).
    in_order : bool
        Rank ``r`` runs on ``workers[r]`` (ranks bound to workers, e.g. Fluid endpoints); its
        chunks are copied there.

    Returns
    -------
    Assignment
    """
    return client.sync(assign_trainers_async, client, partition, n, workers, timeout_s,
                       in_order=in_order)


# --------------------------------------------------------------------------------------------
# Validation and normalisation (client side)
# --------------------------------------------------------------------------------------------


def _is_dask_frame(value: Any) -> bool:
    return is_dask_collection(value) and hasattr(value, "npartitions") and hasattr(
        value, "to_dask_array"
    )


async def _as_array(client: Any, name: str, value: Any) -> Any:
    """Return a dask array or a numpy array for one input."""
    if isinstance(value, da.Array):
        _check_known_chunks(name, value)
        return value
    if _is_dask_frame(value):
        return await _frame_to_array(client, value)
    if is_dask_collection(value):
        raise TypeError(
            f"arrays[{name!r}] is a {type(value).__name__}; pass a dask array, a dask "
            "DataFrame/Series, or a numpy/pandas object"
        )
    to_numpy = getattr(value, "to_numpy", None)
    array = to_numpy() if callable(to_numpy) else np.asarray(value)
    if array.ndim == 0:
        raise ValueError(f"arrays[{name!r}] is a scalar; inputs need one row per sample")
    return array


async def _frame_to_array(client: Any, frame: Any) -> da.Array:
    # Lengths are computed on the cluster from the persisted partitions: only ints come back.
    frame = client.persist(frame)
    sizes = [dask.delayed(len)(part) for part in frame.to_delayed()]
    lengths = await client.gather(client.compute(sizes))
    return frame.to_dask_array(lengths=tuple(int(n) for n in lengths))


def _check_known_chunks(name: str, array: da.Array) -> None:
    if any(math.isnan(c) for chunks in array.chunks for c in chunks):
        raise ValueError(
            f"arrays[{name!r}] has unknown chunk sizes (np.nan), e.g. after boolean indexing or "
            f"from a DataFrame; call {name}.compute_chunk_sizes() (or to_dask_array(lengths=True)) "
            "before fitting"
        )


def _check_rows(values: Mapping[str, Any]) -> int:
    rows = {name: int(value.shape[0]) for name, value in values.items()}
    if len(set(rows.values())) > 1:
        listing = ", ".join(f"{name}: {n}" for name, n in rows.items())
        raise ValueError(
            f"all inputs must have the same number of rows, got {listing}; check that X and y "
            "come from the same samples"
        )
    return next(iter(rows.values()))


async def _reference_row_chunks(
    client: Any, values: Mapping[str, Any], n_rows: int, workers: Sequence[str] | None,
    min_blocks: int = 1,
) -> tuple[int, ...]:
    for value in values.values():
        if isinstance(value, da.Array):
            return tuple(int(c) for c in value.chunks[0])
    # numpy only: one block per worker (or per trainer), never an empty block
    if workers is None:
        identity = await client.scheduler.identity(n_workers=-1)
        workers = list(identity["workers"])
    n_blocks = max(1, min(max(len(workers), int(min_blocks)), n_rows))
    bounds = [n_rows * b // n_blocks for b in range(n_blocks + 1)]
    return tuple(hi - lo for lo, hi in zip(bounds[:-1], bounds[1:], strict=True))


async def _chunk_futures(
    client: Any, name: str, value: Any, row_chunks: tuple[int, ...],
    workers: Sequence[str] | None,
) -> list[Future]:
    """One future per row chunk of ``value``, in chunk order."""
    if isinstance(value, np.ndarray):
        bounds = np.cumsum((0, *row_chunks))
        blocks = [value[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
        return await client.scatter(blocks, workers=workers, hash=False)
    target = (row_chunks,) + tuple((size,) for size in value.shape[1:])
    if value.chunks != target:
        value = value.rechunk(target)
    value = client.persist(value)
    by_key = {future.key: future for future in futures_of(value)}
    keys = value.__dask_keys__()
    for _ in range(value.ndim - 1):  # one block along every other axis: unwrap the nesting
        keys = [k[0] for k in keys]
    return [by_key[k] for k in keys]


def _build_partition(
    names: tuple[str, ...], part_futures: list[Future], row_chunks: tuple[int, ...],
    who_has: Mapping[str, Sequence[str]],
) -> DataPartition:
    parts: dict[str, list[tuple[int, Future]]] = {}
    rows: dict[str, int] = {}
    for index, (future, n) in enumerate(zip(part_futures, row_chunks, strict=True)):
        if n == 0:
            continue  # a trainer with no rows would only slow down its ring
        holders = sorted(who_has.get(future.key, ()))
        if not holders:
            raise RuntimeError(
                f"no worker holds part {index} right after it was computed (was a worker lost?); "
                "call partition_by_worker again"
            )
        parts.setdefault(holders[0], []).append((index, future))
        rows[holders[0]] = rows.get(holders[0], 0) + n
    ordered = {worker: parts[worker] for worker in sorted(parts)}
    return DataPartition(names, ordered, row_chunks, {w: rows[w] for w in sorted(rows)})


# --------------------------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------------------------


def _make_part(names: tuple[str, ...], *chunks: Any) -> dict[str, Any]:
    """Pair chunk ``i`` of every input in one object so that they live on one worker."""
    return dict(zip(names, chunks, strict=True))


def local_arrays(parts: Sequence[Any]) -> dict[str, Any]:
    """Concatenate a worker's parts, in chunk order, into one array per input.

    Parameters
    ----------
    parts : sequence
        The part values (dicts of name -> array) in chunk order, as a task receives them when
        given :meth:`DataPartition.futures`, or ``(chunk_index, part)`` pairs in any order.

    Returns
    -------
    dict of str to ndarray
    """
    if not parts:
        raise ValueError("this worker got no parts; submit trainers only to DataPartition.workers")
    if isinstance(parts[0], tuple):
        parts = [part for _, part in sorted(parts, key=lambda pair: pair[0])]
    if len(parts) == 1:
        return dict(parts[0])
    names = list(parts[0])
    out = {}
    for name in names:
        pieces = [part[name] for part in parts]
        out[name] = _array_module(pieces[0]).concatenate(pieces, axis=0)
    return out


def batch_indices(
    n_rows: int, batch_size: int, epoch: int, seed: int, shuffle: bool = True
) -> list[np.ndarray]:
    """Row indices of every batch of one epoch, the same on every run.

    With ``shuffle`` the rows are visited in the order
    ``np.random.default_rng(seed + epoch).permutation(n_rows)``, so each epoch has its own
    order and a run is reproducible from ``seed``; otherwise in row order. The last batch keeps
    the remaining rows even when there are fewer than ``batch_size``.

    Parameters
    ----------
    n_rows : int
        Number of rows on this worker.
    batch_size : int
        Rows per batch (> 0).
    epoch : int
        Epoch number, from 0.
    seed : int
        Base seed of the job (add the rank to it for different orders on different workers).
    shuffle : bool

    Returns
    -------
    list of ndarray of int64
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size = {batch_size} is not allowed; it must be > 0")
    if n_rows < 0:
        raise ValueError(f"n_rows = {n_rows} is not allowed; it must be >= 0")
    if shuffle:
        order = np.random.default_rng(seed + epoch).permutation(n_rows)
    else:
        order = np.arange(n_rows)
    return [order[start : start + batch_size] for start in range(0, n_rows, batch_size)]
