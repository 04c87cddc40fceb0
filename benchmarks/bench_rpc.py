"""Benchmark of dask_fluid's worker-to-worker transport (rpc.py and ring.py).

Run: ``python benchmarks/bench_rpc.py [--repeat 3]``. Starts a LocalCluster of 2 worker processes
(one thread each), prints a table and writes ``benchmarks/results/rpc.json``. Figures are medians
over calls (and the median of ``--repeat`` runs); compare ratios within one run, these machines
are noisy. The reference figures of shared/reference/measurements.md are printed alongside.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path

import numpy as np
from distributed import Client, LocalCluster, get_worker
from distributed.protocol import to_serialize
from distributed.utils import sync

from dask_fluid.distributed.collective.ring import RingCommunicator
from dask_fluid.distributed.comm import rpc

RESULTS = Path(__file__).parent / "results" / "rpc.json"

# measurements.md, "The engine" table (ms)
REFERENCE_MS = {
    "empty round trip, async (raw handler)": 0.27,
    "empty round trip, async": 0.27,
    "empty round trip, thread (run_coroutine_threadsafe)": 0.41,
    "empty round trip, thread (distributed.utils.sync)": 0.41,
    "4 MB push, async": 1.9,
    "4 MB push, thread": 2.1,
    "32 MB push, async": 14.7,
    "32 MB push, thread": 12.9,
}


class Sink(rpc.Service):
    """The service under test: answers at once, keeps nothing."""

    def ping(self):
        return None

    def push(self, x=None, **arrays):
        return None

    def push_packed(self, meta, buffer):
        rpc.unpack_arrays(meta, buffer)
        return None


def _setup(job, dask_worker):
    rpc.attach_service(dask_worker, job, "sink", Sink())

    async def raw_ping():
        return None

    dask_worker.handlers["dask_fluid_bench_ping"] = raw_ping


def _teardown(job, dask_worker):
    rpc.detach_job(dask_worker, job)
    dask_worker.handlers.pop("dask_fluid_bench_ping", None)


def _median_ms(samples):
    return statistics.median(samples) * 1000


async def _async_suite(peer, job, dask_worker):
    """Round trips from async code on a worker (the event loop)."""
    kw = dict(deadline_s=60, role="pserver")
    out = {}

    async def timed(n, make_call):
        await make_call()  # warm the pooled connection
        samples = []
        for _ in range(n):
            t = time.perf_counter()
            await make_call()
            samples.append(time.perf_counter() - t)
        return _median_ms(samples)

    out["empty round trip, async (raw handler)"] = await timed(
        300, lambda: dask_worker.rpc(peer).dask_fluid_bench_ping())
    out["empty round trip, async"] = await timed(
        300, lambda: rpc.call(dask_worker, peer, job, "sink", "ping", **kw))
    for mb, n in ((4, 30), (32, 8)):
        x = np.ones(mb * 2**20 // 4, dtype=np.float32)
        out[f"{mb} MB push, async"] = await timed(
            n, lambda x=x: rpc.call(dask_worker, peer, job, "sink", "push", x=x, **kw))

    small = {f"g{i}": np.ones(64 + 37 * i, dtype=np.float32) for i in range(20)}
    out["20 small arrays, to_serialize each"] = await timed(100, lambda: dask_worker.rpc(
        peer).dask_fluid_call(job=job, service="sink", method="push",
                              payload={k: to_serialize(v) for k, v in small.items()}))
    out["20 small arrays, one pickled dict (default)"] = await timed(
        100, lambda: rpc.call(dask_worker, peer, job, "sink", "push", **small, **kw))

    async def packed():
        meta, buffer = rpc.pack_arrays(small)
        return await rpc.call(dask_worker, peer, job, "sink", "push_packed", meta=meta,
                              buffer=buffer, **kw)

    out["20 small arrays, pack_arrays (one buffer)"] = await timed(100, packed)
    return out


def _thread_suite(peer, job):
    """Round trips from a task thread, through the worker's event loop."""
    worker = get_worker()
    kw = dict(deadline_s=60, role="pserver")
    out = {}

    def timed(n, make_call):
        make_call()
        samples = []
        for _ in range(n):
            t = time.perf_counter()
            make_call()
            samples.append(time.perf_counter() - t)
        return _median_ms(samples)

    out["empty round trip, thread (run_coroutine_threadsafe)"] = timed(
        300, lambda: rpc.call_sync(worker, peer, job, "sink", "ping", **kw))
    out["empty round trip, thread (distributed.utils.sync)"] = timed(
        300, lambda: sync(worker.loop, rpc.call, worker, peer, job, "sink", "ping", **kw))
    for mb, n in ((4, 30), (32, 8)):
        x = np.ones(mb * 2**20 // 4, dtype=np.float32)
        out[f"{mb} MB push, thread"] = timed(
            n, lambda x=x: rpc.call_sync(worker, peer, job, "sink", "push", x=x, **kw))
    return out


def _ring_rank(job, rank, addresses, sizes_bytes, n):
    worker = get_worker()
    out = {}
    with RingCommunicator(worker, job, rank, addresses, 60.0) as comm:
        for nbytes in sizes_bytes:
            # a model's gradients: a few tensors, fused by the communicator
            sizes = [nbytes // 4 // 8] * 8
            grads = [np.ones(s, dtype=np.float32) for s in sizes]
            comm.allreduce(grads, op="mean")
            samples = []
            for _ in range(n):
                comm.barrier()  # start together, so each sample is the collective itself
                t = time.perf_counter()
                comm.allreduce(grads, op="mean")
                samples.append(time.perf_counter() - t)
            out[nbytes] = _median_ms(samples)
    return out


def run_once(client: Client) -> dict[str, float]:
    a, b = sorted(client.scheduler_info(n_workers=-1)["workers"])
    job = uuid.uuid4().hex
    client.run(_setup, job)
    try:
        results = client.run(_async_suite, b, job, workers=[a])[a]
        results.update(client.submit(_thread_suite, b, job, workers=[a], pure=False).result())
    finally:
        client.run(_teardown, job)
    ring_job = uuid.uuid4().hex
    sizes = {300 * 1024: "300 KB", 25 * 2**20: "25 MB"}
    futures = [
        client.submit(_ring_rank, ring_job, rank, [a, b], list(sizes), 20, workers=[addr],
                      allow_other_workers=False, pure=False)
        for rank, addr in enumerate([a, b])
    ]
    per_rank = client.gather(futures)
    for nbytes, label in sizes.items():
        results[f"ring all-reduce {label}, 2 ranks"] = max(r[nbytes] for r in per_rank)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs; the median is reported")
    args = parser.parse_args()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        rpc.ensure_plugin(client)
        runs = [run_once(client) for _ in range(args.repeat)]
    summary = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    print(f"{'path':55s} {'ms':>9s} {'reference ms':>13s}")
    for key, value in summary.items():
        ref = REFERENCE_MS.get(key)
        print(f"{key:55s} {value:9.3f} {'' if ref is None else f'{ref:13.2f}'}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(
        {"unit": "ms (median)", "repeats": args.repeat, "results": summary,
         "reference_ms": REFERENCE_MS, "runs": runs}, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
