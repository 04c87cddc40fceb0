"""Sync pserver mode at the scale Fluid users run: step time over trainers x pservers.

Run: ``python benchmarks/bench_scale.py [--grid 2x1,2x4,...] [--processes] [--workers N]
[--steps 20]``. Writes ``benchmarks/results/scale[-processes].json`` and prints a table.

Each case trains a 64-64-10 MLP (the seed's scale example) for ``--steps`` timed sync steps
of 64 rows per trainer (after 3 warm-up steps) with T trainers and P pservers on a LocalCluster
of ``--workers`` workers (default: max(T, P) of the grid in-process, 2 with processes; more
trainers than workers run several trainer loops per worker): in-process (threads, the
default) or worker processes (``--processes``, one thread each). Reported per case: ms per
sync step (the slowest trainer's timed span / its steps), the pserver requests each trainer
makes per step (every request is one round trip; the startup pull and the final "complete"
are spread over the steps), tensor bytes per trainer step, how many pservers hold blocks, and
the step time against the 2 x 2 case of the same run. Targets (issue 16): 50 x 20 in-process
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
    parser.add_argument("--plot", metavar="PNG", default=None,
                        help="also draw ms/step over trainers, a line per pserver count "
                             "(needs matplotlib)")
    args = parser.parse_args(argv)
    grid = [tuple(int(v) for v in case.split("x")) for case in args.grid.split(",")]
    if (2, 2) not in grid:
        grid.insert(0, (2, 2))  # the reference every case is compared with
    workers = args.workers or (2 if args.processes else max(max(t, p) for t, p in grid))
    rows = []
    # no memory limit: the in-process workers share one process, and each would compare the
    # whole process's memory with its 1/workers share, pause, and call gc.collect() over and
    # over (98% of the samples of a 50-worker profile, holding the GIL)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=args.processes,
                      memory_limit=0, dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as client:
        for trainers, pservers in grid:
            rows.append(run_case(client, trainers, pservers, args.steps))
            r = rows[-1]
            print(f"{trainers:>3} trainers x {pservers:>2} pservers: {r['ms_per_step']:8.1f} "
                  f"ms/step, {r['messages_per_trainer_step']:5.1f} requests/trainer step",
                  flush=True)
    base = next(r["ms_per_step"] for r in rows if (r["trainers"], r["pservers"]) == (2, 2))
    for r in rows:
        r["over_2x2"] = r["ms_per_step"] / base
    kind = (f"{workers} worker processes" if args.processes
            else f"in-process (threads), {workers} workers")
    print(f"\nsync step, 64-64-10 MLP, 64 rows per trainer, {kind}:")
    print(f"{'T x P':>8} {'ms/step':>9} {'x 2x2':>7} {'req/trainer':>12} {'bound':>6} "
          f"{'KB sent':>8} {'P with blocks':>14}")
    for r in rows:
        print(f"{r['trainers']:>3} x {r['pservers']:<3} {r['ms_per_step']:>9.1f} "
              f"{r['over_2x2']:>7.1f} {r['messages_per_trainer_step']:>12.1f} "
              f"{r['messages_bound_per_trainer_step']:>6.1f} "
              f"{r['bytes_sent_per_trainer_step'] / 1e3:>8.1f} "
              f"{r['pservers_holding_blocks']:>14}")
    print("targets: 50 x 20 <= 10 x the 2 x 2 step (in-process); requests <= the bound")
    if args.plot:
        plot(rows, kind, args.plot)
    RESULTS.mkdir(exist_ok=True)
    name = "scale-processes.json" if args.processes else "scale.json"
    (RESULTS / name).write_text(json.dumps({"kind": kind, "steps": args.steps, "rows": rows},
                                           indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
