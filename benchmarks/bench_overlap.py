"""Early pushes on a network link: a sync step with and without sending gradients ahead.

Run (Linux, as root: it shapes the loopback interface): ``python benchmarks/bench_overlap.py
[--rate 10gbit] [--steps 40] [--repeat 2]``. Writes ``benchmarks/results/overlap.json`` and
prints a table.

Why shaping. On one machine the pserver connections go through shared memory, and even over
loopback TCP the "wire" is a copy by a busy core: the 2 cores are 90 % busy in a sync step
(``bench_pserver.py --cpu``), so overlapping communication with compute has nothing to gain
there. Between hosts the wire is the cost. To measure that here, the run

- keeps the worker processes off shared memory (``DASK_FLUID_SHM_DISABLE=1``), so each trainer
  reaches the pserver on the other worker over TCP, as it would on another host;
- puts a token-bucket filter on ``lo`` (``tc qdisc add dev lo root tbf rate RATE``: a real
  link of that rate, shared by every flow on the interface, both directions), and removes it
  at the end, whatever happens. It refuses to run when ``lo`` already has a root qdisc (it
  would not know what to put back), and says why it cannot run without ``tc`` or root.

Each model trains in sync mode with 2 pservers and 2 trainers on 2 single-threaded worker
processes, one per core, with ``dask_fluid.pserver.early-push-bytes`` None (every gradient goes
with the step's barrier) and 1 MiB (the default: a pserver's staged gradients go out as soon
as they reach 1 MiB), interleaved, on the shaped link and on the plain loopback:

- ``cnn_fc_head``: two 5x5 conv-pool layers (32, 64 filters) on 1x28x28 images and a
  1024 -> 4096 -> 10 head, 17 MB of parameters, batch 32 per trainer. The head's 16 MB of
  gradients come first in the backward pass and go out while the convolutions' gradients are
  computed: the case overlap is for.
- ``mlp_25mb``: bench_pserver.py's 1024 -> 2048 -> 2048 -> 10 MLP, batch 32. Only the first
  layer's backward is left to hide the others' pushes behind.

Reported: ms per step (the slowest trainer's, after 3 warm-up steps; median over
``--repeat``) and early / barrier-only; the parameters' transfer time on the link.

Measured on the 2-core development machine (2026-12-06, 10gbit, two runs, medians of 2 and 3):
cnn_fc_head 53.1-53.7 ms with the barrier only, 49.9-51.4 ms with early pushes (0.93-0.97 x);
mlp_25mb 55.1-55.3 -> 54.0-54.5 ms (0.98-0.99 x); on the unshaped loopback 1.00-1.02 x. An
exploratory script gave 0.85-0.90 x for cnn_fc_head before this one existed. What is left of
the step's exchange is the pull of the updated parameters, which waits for every trainer's last
gradient (sync).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ["DASK_FLUID_SHM_DISABLE"] = "1"  # before any worker process starts

import dask.config  # noqa: E402
import numpy as np  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import dask_fluid as fluid  # noqa: E402
from dask_fluid import layers, nets, optimizer  # noqa: E402
from dask_fluid.distributed import train_pserver  # noqa: E402
from dask_fluid.distributed.pserver.client import EARLY_PUSH_KEY  # noqa: E402
from dask_fluid.models import mlp  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_collective import _pin_workers  # noqa: E402
from bench_pserver import _timed  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
WARMUP = 3
SETTINGS = {"barrier only": None, "early pushes": 1 << 20}


def cnn_fc_head() -> tuple:
    """Conv-pool x 2 and a 1024 -> 4096 -> 10 head: ``(main, startup, loss, feed maker)``."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[1, 28, 28], dtype="float32")
        y = layers.data(name="y", shape=[1], dtype="int64")
        h = nets.simple_img_conv_pool(x, num_filters=32, filter_size=5, pool_size=2,
                                      pool_stride=2, act="relu")
        h = nets.simple_img_conv_pool(h, num_filters=64, filter_size=5, pool_size=2,
                                      pool_stride=2, act="relu")
        h = layers.fc(h, 4096, act="relu")
        loss = layers.mean(layers.cross_entropy(layers.fc(h, 10, act="softmax"), y))
        optimizer.SGD(0.01).minimize(loss)

    def feed(rng: np.random.Generator, n: int) -> dict:
        return {"x": rng.random((n, 1, 28, 28), dtype=np.float32),
                "y": rng.integers(0, 10, n)}
    return main, startup, loss, feed


def mlp_25mb() -> tuple:
    """bench_pserver.py's 25 MB MLP: ``(main, startup, loss, feed maker)``."""
    spec = mlp(n_features=1024, hidden=(2048, 2048), n_classes=10)

    def feed(rng: np.random.Generator, n: int) -> dict:
        return {"x": rng.standard_normal((n, 1024), dtype=np.float32),
                "y": rng.integers(0, 10, n)}
    return spec.main, spec.startup, spec.loss, feed


MODELS = {"cnn_fc_head": cnn_fc_head, "mlp_25mb": mlp_25mb}


def run(client: Client, model: str, steps: int, batch: int = 32) -> dict:
    main, startup, loss, feed = MODELS[model]()
    nbytes = sum(int(np.prod(p.shape)) * 4 for p in main.global_block().all_parameters())
    rng = np.random.default_rng(0)
    parts = [feed(rng, batch * (steps + WARMUP)) for _ in range(2)]
    result = train_pserver(client, main, startup, parts, pservers=2, batch_size=batch,
                           shuffle=False, fetch_list=[loss])
    early = sum(p["early_pushes"] for p in result.stats["pservers"])
    return {"ms_per_step": _timed(result, WARMUP, batch)["ms_per_step_per_trainer"],
            "model_mb": nbytes / 1e6, "early_pushes": early}


class ShapedLoopback:
    """``tc qdisc add dev lo root tbf rate RATE`` for the ``with`` block (None: unshaped)."""

    def __init__(self, rate: str | None) -> None:
        self.rate = rate

    def __enter__(self) -> ShapedLoopback:
        if self.rate is not None:
            subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", self.rate,
                            "burst", "2mb", "latency", "50ms"], check=True, capture_output=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.rate is not None:
            subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)


def cannot_shape() -> str | None:
    """Why this machine cannot shape ``lo``, or None."""
    if sys.platform != "linux":
        return "shaping the loopback interface needs Linux (tc)"
    if shutil.which("tc") is None:
        return "no tc on PATH (Debian: apt-get install iproute2)"
    if os.geteuid() != 0:
        return "tc needs root to shape the loopback interface"
    shown = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True)
    if shown.returncode != 0:
        return f"tc qdisc show dev lo failed: {shown.stderr.strip()}"
    if "root" in shown.stdout and "noqueue" not in shown.stdout:
        return f"lo already has a root qdisc ({shown.stdout.strip()}); not touching it"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="10gbit", help="the link's rate, as tc writes it")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args(argv)
    models = args.models.split(",")
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {sorted(MODELS)}")
    why = cannot_shape()
    if why is not None:
        print(f"bench_overlap: not run: {why}")
        return 0
    # a kill still unwinds the with blocks: lo is never left shaped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=40, env={"DASK_FLUID_SHM_DISABLE": "1"}) as cluster, \
            Client(cluster) as client:
        pinned = _pin_workers(client)
        for link in (args.rate, None):
            with ShapedLoopback(link):
                for model in models:
                    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
                    for _ in range(args.repeat):  # interleaved: both see the same load
                        for name, early in SETTINGS.items():
                            with dask.config.set({EARLY_PUSH_KEY: early}):
                                runs[name].append(run(client, model, args.steps))
                    ms = {name: statistics.median(r["ms_per_step"] for r in rs)
                          for name, rs in runs.items()}
                    rows.append({"model": model, "link": link or "loopback",
                                 "model_mb": runs["barrier only"][0]["model_mb"],
                                 "barrier_only_ms": ms["barrier only"],
                                 "early_ms": ms["early pushes"],
                                 "early_over_barrier": ms["early pushes"] / ms["barrier only"],
                                 "early_pushes": runs["early pushes"][0]["early_pushes"],
                                 "runs": runs})
    print(f"{'model':<12} {'MB':>5} {'link':<9} {'barrier only':>13} {'early pushes':>13} "
          f"{'ratio':>6}")
    for r in rows:
        print(f"{r['model']:<12} {r['model_mb']:>5.1f} {r['link']:<9} "
              f"{r['barrier_only_ms']:>10.1f} ms {r['early_ms']:>10.1f} ms "
              f"{r['early_over_barrier']:>6.2f}")
    print(f"ms per sync step, 2 pservers + 2 trainers over TCP (no shared memory), workers "
          f"pinned one per core: {pinned}; median of {args.repeat}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "overlap.json").write_text(json.dumps(
        {"rate": args.rate, "steps": args.steps, "workers_pinned": pinned, "rows": rows},
        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
