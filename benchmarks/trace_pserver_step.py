"""Where a sync step of the 2 + 2 pserver job goes, against the ring: a timeline per step.

Run: ``python benchmarks/trace_pserver_step.py [--steps 1500]``. Writes
``benchmarks/results/pserver_trace.json`` and prints a table.

The reference MLP job of ``bench_pserver.py`` (2 pservers + 2 trainers on 2 worker processes
pinned one per core), then the collective ring on the same workers. In each worker, timestamps
(``time.perf_counter_ns``: one clock for both processes of the machine) are taken around the
pieces of a step by wrapping them for the run: the executor run, the ``send_barrier`` op, the
client's push (``_start``), the serving of the other trainer's push (``_serve_one``), the
shard's optimize, its reply (``_send``), the reading of a reply (``_unwrap``); for the ring, its
``reduce_gradients``. Steps are matched across the two workers by index, so each step has a
later worker L (the one that reaches its exchange last) and an earlier one E; the table gives
the median over the timed steps of each interval, and the critical path: from L's exchange
start to the end of both exchanges. A diagnostic, not a throughput figure: the wrappers cost a
few microseconds per call.

Measured on the 2-core machine (2026-12-07; a slow day, the local step at half of 12-06's
speed): docs/performance.md, "Where the pserver step goes".
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from distributed import Client, LocalCluster  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_collective import _pin_workers, run_collective  # noqa: E402
from bench_pserver import run_mlp  # noqa: E402

from dask_fluid.datasets import reference_blobs  # noqa: E402
from dask_fluid.distributed.launch.data import partition_by_worker  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
WARMUP = 200  # steps left out at the start (connections, caches)

#: (label, event the interval starts at, event it ends at); "L." / "E." pick the worker
PSERVER_ROWS = [
    ("E reaches its exchange ahead of L by", "E.sb0", "L.sb0"),
    ("L's push: written to E's shard, then its own shard's", "L.start0", "L.start1"),
    ("L: push sent -> it starts reading E's push", "L.start1", "L.serve0"),
    ("L reads and stores E's push", "L.serve0", "L.opt0"),
    ("L's shard optimizes its blocks", "L.opt0", "L.opt1"),
    ("L writes its reply to E", "L.opt1", "L.reply1"),
    ("E: L's push sent -> E starts reading it", "L.start1", "E.serve0"),
    ("E reads and stores L's push", "E.serve0", "E.opt0"),
    ("E's shard optimizes its blocks", "E.opt0", "E.opt1"),
    ("E writes its reply to L", "E.opt1", "E.reply1"),
    ("L: E's reply written -> L has read it", "E.reply1", "L.unwrap1"),
    ("L: reply read -> exchange done", "L.unwrap1", "L.sb1"),
    ("L: exchange done -> run done (recv, concat, fetch)", "L.sb1", "L.run1"),
]
RING_ROWS = [
    ("E reaches its exchange ahead of L by", "E.reduce0", "L.reduce0"),
    ("L's all-reduce", "L.reduce0", "L.reduce1"),
    ("E's all-reduce", "E.reduce0", "E.reduce1"),
    ("L: all-reduce done -> optimize run done", "L.reduce1", "L.run1"),
]


def _install(kind: str, dask_worker: Any = None) -> None:
    """On a worker: wrap the pieces of a step so that each call logs (event, time)."""
    import threading  # noqa: PLC0415 - runs on the worker
    from time import perf_counter_ns  # noqa: PLC0415

    from dask_fluid import executor  # noqa: PLC0415
    from dask_fluid.distributed.collective import runtime  # noqa: PLC0415
    from dask_fluid.distributed.pserver import client, ops, shard, shard_server  # noqa: PLC0415
    from dask_fluid.ops import registry  # noqa: PLC0415

    log: list = []
    dask_worker._dask_fluid_trace = log
    depth = threading.local()

    def timed(fn: Any, tag: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            log.append((tag + "0", perf_counter_ns()))
            try:
                return fn(*args, **kwargs)
            finally:
                log.append((tag + "1", perf_counter_ns()))
        return wrapper

    run = executor.Executor.run

    def outer_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(depth, "inside", False):  # a run within a run (control flow)
            return run(self, *args, **kwargs)
        depth.inside = True
        try:
            return timed(run, "run")(self, *args, **kwargs)
        finally:
            depth.inside = False

    executor.Executor.run = outer_run
    if kind == "pserver":
        registry.get("send_barrier").kernel = timed(ops._send_barrier, "sb")
        for owner, name, tag in ((client.PServerClient, "_start", "start"),
                                 (client.PServerClient, "_unwrap", "unwrap"),
                                 (shard_server.ShardServer, "_serve_one", "serve"),
                                 (shard_server.ShardServer, "_send", "reply"),
                                 (shard.PServerShard, "_optimize", "opt")):
            setattr(owner, name, timed(getattr(owner, name), tag))
    else:
        runtime.reduce_gradients = timed(runtime.reduce_gradients, "reduce")


def _collect(dask_worker: Any = None) -> list:
    return dask_worker._dask_fluid_trace


def _pserver_steps(log: list) -> list[dict[str, int]]:
    """The log cut into executor runs, each with the first time of every event in it; the
    runs with a ``send_barrier`` are the training steps."""
    steps, current = [], None
    for tag, t in log:
        if tag == "run0":
            current = {"run0": t}
            steps.append(current)
        elif current is not None:
            current.setdefault(tag, t)
    return [s for s in steps if "sb0" in s and "run1" in s]


def _ring_steps(log: list) -> list[dict[str, int]]:
    """A ring step is a compute run, ``reduce_gradients`` and an optimize run: cut at each
    all-reduce, with the end of the run after it."""
    steps, current = [], None
    for tag, t in log:
        if tag == "reduce0":
            current = {"reduce0": t}
            steps.append(current)
        elif current is not None and tag == "reduce1":
            current["reduce1"] = t
        elif current is not None and tag == "run1" and "reduce1" in current:
            current.setdefault("run1", t)
    return [s for s in steps if "run1" in s]


def timeline(logs: dict[str, list], kind: str) -> dict[str, Any]:
    """Median µs of each row's interval over the steps both workers logged."""
    workers = sorted(logs)
    if kind == "pserver":
        a, b = (_pserver_steps(logs[w]) for w in workers)
        marker, end, rows = "sb0", "sb1", PSERVER_ROWS
    else:
        a, b = (_ring_steps(logs[w]) for w in workers)
        marker, end, rows = "reduce0", "reduce1", RING_ROWS
    n = min(len(a), len(b))
    out: dict[str, list[float]] = {label: [] for label, _, _ in rows}
    critical, later = [], []
    for i in range(WARMUP, n - 1):
        x, y = a[i], b[i]
        late, early = (x, y) if x[marker] >= y[marker] else (y, x)
        later.append(workers[0] if late is x else workers[1])
        ends = {"L": late, "E": early}
        for label, start, stop in rows:
            (ws, es), (we, ee) = start.split("."), stop.split(".")
            if es in ends[ws] and ee in ends[we]:
                out[label].append((ends[we][ee] - ends[ws][es]) / 1000)
        critical.append((max(late[end], early[end]) - late[marker]) / 1000)
    table = {label: statistics.median(v) for label, v in out.items() if v}
    table["critical path: L's exchange start -> both exchanges done"] = statistics.median(
        critical)
    table["step (one exchange start to the next)"] = statistics.median(
        (a[i + 1][marker] - a[i][marker]) / 1000 for i in range(WARMUP, n - 1))
    most = max(set(later), key=later.count)
    return {"steps": len(critical), "table_us": table,
            "share_of_steps_with_the_same_later_worker": later.count(most) / len(later)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args(argv)
    if args.steps < 2 * WARMUP:
        parser.error(f"--steps must be at least {2 * WARMUP}: the first {WARMUP} are left out")
    result: dict[str, Any] = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as client:
        pinned = _pin_workers(client)
        client.run(_install, "pserver")
        ps = run_mlp(client, args.steps)
        result["pserver"] = {"samples_per_s": ps["samples_per_s"],
                             **timeline(client.run(_collect), "pserver")}
    # a fresh cluster: the ring's workers carry no pserver wrappers
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as client:
        _pin_workers(client)
        client.run(_install, "ring")
        x, y = reference_blobs()
        ring = run_collective(client, partition_by_worker(client, {"x": x, "y": y}),
                              args.steps)
        result["ring"] = {"samples_per_s": ring["samples_per_s"],
                          **timeline(client.run(_collect), "ring")}
    result["workers_pinned"] = pinned
    for kind in ("pserver", "ring"):
        r = result[kind]
        print(f"{kind}: {r['samples_per_s']:.0f} samples/s with the timers; median µs per step "
              f"over {r['steps']} steps (L: the later worker, the same one in "
              f"{r['share_of_steps_with_the_same_later_worker']:.0%} of them)")
        for label, us in r["table_us"].items():
            print(f"  {label:<58} {us:8.1f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pserver_trace.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
