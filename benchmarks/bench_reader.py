"""PyReader's reader thread: batches prepared while the program runs, against on demand.

Run: ``python benchmarks/bench_reader.py [--steps 60] [--io-ms 8]``. Writes
``benchmarks/results/reader.json`` and prints a table.

The source is a batch generator whose every batch waits ``--io-ms`` (a file or network read:
the wait releases the interpreter lock, as reading does) and then builds a batch of 64 images
with numpy; the program is bench_overlap.py's ``cnn_fc_head`` forward and backward (SGD) on
the local executor, one BLAS thread. Three ways to feed it, interleaved, ``--repeat`` times:

- **on demand**: ``for feed in source(): exe.run(feed=feed)`` (what a script without a reader
  does, and what PyReader did before it had its thread);
- **PyReader, iterable**: ``for data in reader(): exe.run(feed=data[0])``;
- **PyReader, non-iterable**: ``reader.start()``, then ``exe.run()`` until ``EOFException``.

Reported: ms per step (median over repeats) and each over on demand. With the thread the step
approaches max(compute, preparation) instead of their sum.

Measured on the 2-core development machine (2026-12-06, three runs): compute alone 47.6-51.2 ms
a step; on demand 56.0-59.3 ms; PyReader 46.9-51.0 ms iterable (0.84-0.86 x) and 47.1-50.2 ms
non-iterable (0.83-0.85 x).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import dask_fluid as fluid  # noqa: E402
from dask_fluid.py_reader import EOFException  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_local import fixed_feed_step_ms  # noqa: E402
from bench_overlap import cnn_fc_head  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
BATCH = 64


def source(steps: int, io_ms: float):
    """The batch generator: a wait of ``io_ms``, then a batch built with numpy."""
    def gen():
        rng = np.random.default_rng(0)
        for _ in range(steps):
            time.sleep(io_ms / 1000)
            yield [rng.random((BATCH, 1, 28, 28), dtype=np.float32),
                   rng.integers(0, 10, (BATCH, 1))]
    return gen


def run(way: str, steps: int, io_ms: float) -> float:
    """ms per step of one way of feeding (after 3 warm-up steps)."""
    main, startup, loss, _ = cnn_fc_head()
    x, y = main.global_block().var("x"), main.global_block().var("y")
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    stamps = []
    if way == "on demand":
        for xs, ys in source(steps, io_ms)():
            exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss], scope=scope)
            stamps.append(time.perf_counter())
    elif way == "PyReader, iterable":
        reader = fluid.io.PyReader(feed_list=[x, y], capacity=4, iterable=True)
        reader.decorate_batch_generator(source(steps, io_ms))
        for data in reader():
            exe.run(main, feed=data[0], fetch_list=[loss], scope=scope)
            stamps.append(time.perf_counter())
    else:
        with fluid.program_guard(main, startup):
            reader = fluid.io.PyReader(feed_list=[x, y], capacity=4, iterable=False)
        reader.decorate_batch_generator(source(steps, io_ms))
        reader.start()
        try:
            while True:
                exe.run(main, fetch_list=[loss], scope=scope)
                stamps.append(time.perf_counter())
        except EOFException:
            reader.reset()
    timed = stamps[3:]
    return 1000 * (timed[-1] - timed[0]) / (len(timed) - 1)


def compute_ms(steps: int) -> float:
    """The step without any preparation: one batch fed again and again."""
    main, startup, loss, _ = cnn_fc_head()
    xs, ys = next(source(1, 0)())
    return fixed_feed_step_ms(main, startup, {"x": xs, "y": ys}, [loss], steps, warmup=1)


WAYS = ["on demand", "PyReader, iterable", "PyReader, non-iterable"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--io-ms", type=float, default=8.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    runs: dict[str, list[float]] = {w: [] for w in WAYS}
    computes = []
    for _ in range(args.repeat):  # interleaved: every way sees the same machine load
        computes.append(compute_ms(args.steps))
        for way in WAYS:
            runs[way].append(run(way, args.steps, args.io_ms))
    compute = statistics.median(computes)
    med = {w: statistics.median(v) for w, v in runs.items()}
    print(f"compute only {compute:.1f} ms/step, preparation {args.io_ms:.1f} ms of waiting + "
          f"building a batch of {BATCH}; sum {compute + args.io_ms:.1f}, max "
          f"{max(compute, args.io_ms):.1f}")
    print(f"{'way':<26} {'ms/step':>8} {'/ on demand':>12}")
    for way in WAYS:
        print(f"{way:<26} {med[way]:>8.1f} {med[way] / med['on demand']:>12.2f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "reader.json").write_text(json.dumps(
        {"steps": args.steps, "io_ms": args.io_ms, "batch": BATCH, "compute_ms": compute,
         "ms_per_step": med, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
