"""The reference MLP benchmark (shared/reference/measurements.md) on the local executor.

One process, one BLAS thread, batch 128, 50 warm-up and 1000 timed steps, feeding numpy and
fetching loss and accuracy. Prints a table and writes ``benchmarks/results/local.json``.

    python benchmarks/bench_local.py [--steps 1000]
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

import dask_fluid as fluid  # noqa: E402
from dask_fluid.datasets import reference_blobs  # noqa: E402
from dask_fluid.models import mlp  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"


def fixed_feed_step_ms(main, startup, feed: dict, fetch_list: list, steps: int,
                       warmup: int) -> float:
    """ms per step of ``main`` on a fresh scope of the local executor fed ``feed`` every step
    (the compute alone: no batch is prepared), after ``warmup`` untimed steps."""
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for _ in range(warmup):
        exe.run(main, feed=feed, fetch_list=fetch_list, scope=scope)
    t0 = time.perf_counter()
    for _ in range(steps):
        exe.run(main, feed=feed, fetch_list=fetch_list, scope=scope)
    return 1000 * (time.perf_counter() - t0) / steps


def run_local(steps: int, warmup: int = 50, batch: int = 128) -> dict:
    """Train the reference MLP for ``warmup + steps`` steps and time the last ``steps``."""
    x, y = reference_blobs()
    spec = mlp()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(spec.startup, scope=scope)
    perm = np.random.default_rng(1).permutation(len(x))
    fetch = [spec.loss, spec.accuracy]
    accs = []
    t0 = 0.0
    for s in range(warmup + steps):
        if s == warmup:
            t0 = time.perf_counter()
        lo = (s * batch) % (len(x) - batch)
        idx = perm[lo:lo + batch]
        _, acc = exe.run(spec.main, feed={"x": x[idx], "y": y[idx, None]}, fetch_list=fetch,
                         scope=scope)
        accs.append(float(acc[0]))
    elapsed = time.perf_counter() - t0
    return {"system": "dask_fluid local executor", "steps": steps, "batch": batch,
            "ms_per_step": 1000 * elapsed / steps, "samples_per_s": steps * batch / elapsed,
            "train_accuracy_last_100": float(np.mean(accs[-100:]))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args(argv)
    result = run_local(args.steps)
    print(f"{'system':<28} {'ms/step':>8} {'samples/s':>10} {'train acc':>9}")
    print(f"{result['system']:<28} {result['ms_per_step']:>8.3f} "
          f"{result['samples_per_s']:>10.0f} {result['train_accuracy_last_100']:>9.3f}")
    print("reference (measurements.md): Paddle 3.3.1 77.7k samples/s (1.65 ms), "
          "PyTorch 137k (0.93 ms)")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "local.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
