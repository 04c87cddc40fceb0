"""Sync pserver mode at the scale Fluid users run: step time over trainers x pservers.

Run: ``python benchmarks/bench_scale.py [--grid 2x1,2x4,...] [--processes] [--workers N]
[--steps 20] [--one-core]``. Writes ``benchmarks/results/scale[-processes|-one-core].json`` and
prints a table.

Each case trains a 64-64-10 MLP (the seed's scale example) for ``--steps`` timed sync steps
of 64 rows per trainer (after 3 warm-up steps) with T trainers and P pservers on a LocalCluster
of ``--workers`` workers (default: max(T, P) of the grid in-process, 2 with processes; more
trainers than workers run several trainer loops per worker): in-process (threads, the
default; ``--one-core`` confines the process to one core) or worker processes
(``--processes``, one thread each, pinned one per core unless ``--no-pin``). Reported per case:
ms per sync step (the slowest trainer's timed span / its steps), the pserver requests each trainer
makes per step (every request is one round trip; the startup pull and the final "complete"
are spread over the steps), tensor bytes per trainer step, how many pservers hold blocks, and
the step time against the 2 x 2 case of the same run and against the floor (one trainer's step
alone on the local executor, times the trainers that share one interpreter: they take turns
holding its lock, whatever the communication costs). Targets (issue 16): 50 x 20 in-process
<= 10 x the 2 x 2 step; messages per step <= 2 x (blocks sent) + trainers, over all trainers.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

from dask_fluid.distributed import train_pserver  # noqa: E402
from dask_fluid.models import mlp  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_collective import _pin_workers  # noqa: E402
from bench_local import fixed_feed_step_ms  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
DEFAULT_GRID = [(t, p) for t in (2, 8, 32, 50) for p in (1, 4, 20)]
WARMUP = 3


def run_case(client, trainers: int, pservers: int, steps: int, batch: int = 64) -> dict:
    rng = np.random.default_rng(0)
    n = batch * (steps + WARMUP)
    parts = [{"x": rng.standard_normal((n, 64)).astype(np.float32),
              "y": rng.integers(0, 10, (n, 1))} for _ in range(trainers)]
    spec = mlp(n_features=64, hidden=(64,), n_classes=10)
    t0 = time.perf_counter()
    result = train_pserver(client, spec.main, spec.startup, parts, pservers=pservers,
                           trainers=trainers, batch_size=batch, shuffle=False,
                           fetch_list=[spec.loss])
    wall = time.perf_counter() - t0
    spans = []
    for rank in range(trainers):
        times = [e["time"] for e in result.history if e["rank"] == rank][WARMUP:]
        spans.append((times[-1] - times[0]) / (len(times) - 1))
    tr, ps = result.stats["trainers"], result.stats["pservers"]
    # requests per step: the startup pull and the final "complete" are spread over the steps
    messages = sum(t["requests"] for t in tr) / (steps + WARMUP) / trainers
    sent = sum(t["bytes_sent"] for t in tr) / (steps + WARMUP) / trainers
    blocks = sum(p["blocks"] for p in ps)
    holding = sum(1 for p in ps if p["blocks"])
    return {"trainers": trainers, "pservers": pservers, "ms_per_step": 1000 * max(spans),
            "messages_per_trainer_step": messages, "bytes_sent_per_trainer_step": sent,
            "blocks": blocks, "pservers_holding_blocks": holding,
            "messages_bound_per_trainer_step": (2 * blocks * trainers + trainers) / trainers,
            "wall_s": wall}


def local_step_ms(steps: int = 300, batch: int = 64) -> float:
    """One trainer's work alone: the same model's step on the local executor in this process
    (forward, backward and SGD; a pserver trainer leaves the SGD to its pservers)."""
    rng = np.random.default_rng(0)
    spec = mlp(n_features=64, hidden=(64,), n_classes=10)
    feed = {"x": rng.standard_normal((batch, 64)).astype(np.float32),
            "y": rng.integers(0, 10, (batch, 1))}
    return fixed_feed_step_ms(spec.main, spec.startup, feed, [spec.loss], steps, warmup=20)


def plot(rows: list[dict], kind: str, path: str) -> None:
    """ms per sync step over trainers, one line per pserver count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    for p in sorted({r["pservers"] for r in rows}):
        pts = sorted((r["trainers"], r["ms_per_step"]) for r in rows if r["pservers"] == p)
        ax.plot(*zip(*pts, strict=True), marker="o", label=f"{p} pserver{'s' * (p > 1)}")
    ax.set_xlabel("trainers")
    ax.set_ylabel("ms per sync step")
    ax.set_title(f"64-64-10 MLP, 64 rows per trainer, {kind}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default=",".join(f"{t}x{p}" for t, p in DEFAULT_GRID),
                        help="comma-separated TxP cases (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--processes", action="store_true",
                        help="worker processes instead of threads")
    parser.add_argument("--workers", type=int, default=None,
                        help="cluster size (default: max(T, P) in-process, 2 with processes)")
    parser.add_argument("--one-core", action="store_true",
                        help="in-process: confine this process (every trainer thread) to one "
                             "core (Linux), to separate the trainers' own work from the cost "
                             "of their threads moving between cores")
    parser.add_argument("--no-pin", action="store_true",
                        help="with --processes, let the OS place the worker processes "
                             "(default: one per core, as bench_collective.py pins them)")
    parser.add_argument("--plot", metavar="PNG", default=None,
                        help="also draw ms/step over trainers, a line per pserver count "
                             "(needs matplotlib)")
    args = parser.parse_args(argv)
    grid = [tuple(int(v) for v in case.split("x")) for case in args.grid.split(",")]
    if (2, 2) not in grid:
        grid.insert(0, (2, 2))  # the reference every case is compared with
    workers = args.workers or (2 if args.processes else max(max(t, p) for t, p in grid))
    one_core = None
    if args.one_core:
        if args.processes or not hasattr(os, "sched_setaffinity"):
            parser.error("--one-core is for in-process runs on Linux")
        one_core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {one_core})  # before the cluster's threads start
    rows = []
    # no memory limit: the in-process workers share one process, and each would compare the
    # whole process's memory with its 1/workers share, pause, and call gc.collect() over and
    # over (98% of the samples of a 50-worker profile, holding the GIL)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=args.processes,
                      memory_limit=0, dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as client:
        pinned = args.processes and not args.no_pin and _pin_workers(client)
        for trainers, pservers in grid:
            rows.append(run_case(client, trainers, pservers, args.steps))
            r = rows[-1]
            print(f"{trainers:>3} trainers x {pservers:>2} pservers: {r['ms_per_step']:8.1f} "
                  f"ms/step, {r['messages_per_trainer_step']:5.1f} requests/trainer step",
                  flush=True)
    base = next(r["ms_per_step"] for r in rows if (r["trainers"], r["pservers"]) == (2, 2))
    # the floor: the trainers of one interpreter take turns (one lock), so T trainers cost at
    # least T single-trainer steps per process, whatever the communication costs
    local = local_step_ms()
    for r in rows:
        r["over_2x2"] = r["ms_per_step"] / base
        per_process = -(-r["trainers"] // workers) if args.processes else r["trainers"]
        r["compute_floor_ms"] = per_process * local
        r["over_floor"] = r["ms_per_step"] / r["compute_floor_ms"]
    kind = (f"{workers} worker processes{', pinned one per core' if pinned else ''}"
            if args.processes else f"in-process (threads), {workers} workers"
            + ("" if one_core is None else f", confined to core {one_core}"))
    print(f"\nsync step, 64-64-10 MLP, 64 rows per trainer, {kind}; one trainer's step alone "
          f"{local:.2f} ms, the floor = that x the trainers per process:")
    print(f"{'T x P':>8} {'ms/step':>9} {'x 2x2':>7} {'floor':>7} {'x floor':>8} "
          f"{'req/trainer':>12} {'bound':>6} {'KB sent':>8} {'P with blocks':>14}")
    for r in rows:
        print(f"{r['trainers']:>3} x {r['pservers']:<3} {r['ms_per_step']:>9.1f} "
              f"{r['over_2x2']:>7.1f} {r['compute_floor_ms']:>7.1f} {r['over_floor']:>8.2f} "
              f"{r['messages_per_trainer_step']:>12.1f} "
              f"{r['messages_bound_per_trainer_step']:>6.1f} "
              f"{r['bytes_sent_per_trainer_step'] / 1e3:>8.1f} "
              f"{r['pservers_holding_blocks']:>14}")
    print("targets: 50 x 20 <= 10 x the 2 x 2 step (in-process); requests <= the bound")
    if args.plot:
        plot(rows, kind, args.plot)
    RESULTS.mkdir(exist_ok=True)
    name = ("scale-processes.json" if args.processes else
            "scale-one-core.json" if one_core is not None else "scale.json")
    (RESULTS / name).write_text(json.dumps({"kind": kind, "steps": args.steps,
                                            "workers_pinned": bool(pinned),
                                            "one_trainer_step_ms": local, "rows": rows},
                                           indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
