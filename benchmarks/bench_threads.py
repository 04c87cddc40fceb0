"""Training loops as threads of one interpreter: what they cost on several cores against one.

Run: ``python benchmarks/bench_threads.py [--steps 400] [--threads 1,2,4,8]``. Writes
``benchmarks/results/threads.json`` and prints a table.

k threads each train their own copy of bench_scale.py's model (a 64-64-10 MLP, 64 rows a step,
forward, backward and SGD on the local executor), with no communication at all, first with the
process free to use every core, then confined to one. Reported per case: steps per second over
all threads, and each thread's CPU time per step. The threads take turns holding the
interpreter lock whatever the cores; numpy lets go of it around each array operation, so on
several cores another thread takes it on the other core at almost every operation, and each
hand-over wakes a thread there. That is the cost of several trainer loops in one worker
(``trainers`` above the workers, or an in-process cluster) when the model's operations are
small: docs/performance.md, "Placing many trainer loops".
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import threading
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import dask_fluid as fluid  # noqa: E402
from dask_fluid.models import mlp  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
WARMUP = 30


def _loop(steps: int, start: threading.Barrier, out: list) -> None:
    rng = np.random.default_rng(0)
    spec = mlp(n_features=64, hidden=(64,), n_classes=10)
    feed = {"x": rng.standard_normal((64, 64)).astype(np.float32),
            "y": rng.integers(0, 10, (64, 1))}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(spec.startup, scope=scope)
    for _ in range(WARMUP):
        exe.run(spec.main, feed=feed, fetch_list=[spec.loss], scope=scope)
    start.wait()
    cpu = time.thread_time()
    for _ in range(steps):
        exe.run(spec.main, feed=feed, fetch_list=[spec.loss], scope=scope)
    out.append(1000 * (time.thread_time() - cpu) / steps)


def run_case(k: int, steps: int) -> dict:
    """k training threads at once: total steps/s (from the common start) and CPU ms/step."""
    start, out = threading.Barrier(k + 1), []
    threads = [threading.Thread(target=_loop, args=(steps, start, out)) for _ in range(k)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"threads": k, "steps_per_s": k * steps / wall,
            "cpu_ms_per_step": float(np.mean(out))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--threads", default="1,2,4,8")
    args = parser.parse_args(argv)
    counts = [int(k) for k in args.threads.split(",")]
    if not hasattr(os, "sched_setaffinity"):
        parser.error("needs Linux (os.sched_setaffinity) to confine the process to one core")
    cores = sorted(os.sched_getaffinity(0))
    rows = []
    for placement in ("all cores", "one core"):
        # the whole process (every thread started after this) on the cores of the placement
        os.sched_setaffinity(0, set(cores) if placement == "all cores" else {cores[0]})
        for k in counts:
            rows.append({"placement": placement, "cores": len(os.sched_getaffinity(0)),
                         **run_case(k, args.steps)})
    os.sched_setaffinity(0, set(cores))
    single = {r["placement"]: r["steps_per_s"] for r in rows if r["threads"] == 1}
    print(f"{'placement':<10} {'cores':>5} {'threads':>7} {'steps/s':>8} {'x 1 thread':>10} "
          f"{'CPU ms/step':>11}")
    for r in rows:
        r["over_one_thread"] = r["steps_per_s"] / single.get(r["placement"], r["steps_per_s"])
        print(f"{r['placement']:<10} {r['cores']:>5} {r['threads']:>7} {r['steps_per_s']:>8.0f} "
              f"{r['over_one_thread']:>10.2f} {r['cpu_ms_per_step']:>11.3f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "threads.json").write_text(json.dumps({"steps": args.steps, "rows": rows},
                                                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
