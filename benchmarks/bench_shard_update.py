"""A sync pserver's optimize: the fused update against the executor, per round of one shard.

Run: ``python benchmarks/bench_shard_update.py [--rounds 3000] [--repeat 3]``. Writes
``benchmarks/results/shard_update.json`` and prints a table.

The shards of ``bench_pserver.py``'s job (the reference MLP, 2 pservers, 2 trainers, SGD): each
round sums the two trainers' gradients, scales them by 1/2 and applies SGD to every block the
shard holds (four, from 10 to 32 768 values). Timed in one process, with fresh gradients of the
right shapes: the executor running the transpiled optimize blocks op by op, and the
``fused_update`` plans (the path a shard takes for SGD and Momentum). Also the 25 MB model's
shard (1024 -> 2048 -> 2048 -> 10), whose large blocks go through the cache-blocked chunks.
One core, no communication: what a round costs the pserver's core, not a step's time. Compare
ratios within one run (``compare_revisions.py --only shard_update`` against an older tree).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import dask_fluid as fluid  # noqa: E402
from dask_fluid.distributed.pserver.fused_update import plan  # noqa: E402
from dask_fluid.executor import Executor, Scope  # noqa: E402
from dask_fluid.models import mlp  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
PSERVERS = "127.0.0.1:6170,127.0.0.1:6171"


def _shards(spec) -> list:
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=spec.main, pservers=PSERVERS, trainers=2,
                startup_program=spec.startup)
    return [t.get_pserver_programs(ep) for ep in PSERVERS.split(",")]


def _setup(main, startup) -> tuple[Scope, list, list]:
    scope = Scope()
    Executor().run(startup, scope=scope)
    rng = np.random.default_rng(0)
    idxs = main.global_block().ops[-1].attr("optimize_blocks")
    blocks = [main.block(i) for i in idxs]
    for block in blocks:
        p = scope.get(block.ops[-1].input("Param")[0])
        for name in block.ops[0].input("X"):
            scope.vars[name] = (rng.standard_normal(p.shape) * 1e-3).astype(p.dtype)
    return scope, blocks, [plan(b) for b in blocks]


def _per_round_us(fn, rounds: int) -> float:
    for _ in range(min(200, rounds)):
        fn()
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - t0) / rounds * 1e6


def measure(spec, rounds: int) -> list[dict]:
    """One row per shard of ``spec`` (transpiled here: the transpiler rewrites its program)."""
    rows = []
    for index, (main, startup) in enumerate(_shards(spec)):
        scope, blocks, plans = _setup(main, startup)
        if any(p is None for p in plans):
            raise SystemExit(f"shard {index}: a block the fused path does not take")
        exe = Executor()

        def executor_round(exe=exe, main=main, blocks=blocks, scope=scope) -> None:
            for block in blocks:
                exe.run_block(main, block, scope)

        def fused_round(plans=plans, vals=scope.vars) -> None:
            for update in plans:
                if not update.run(vals):
                    raise SystemExit("the fused path refused a block")

        values = sum(int(np.prod(scope.get(p.param).shape)) for p in plans)
        rows.append({"shard": index, "blocks": len(blocks), "values": values,
                     "executor_us": _per_round_us(executor_round, rounds),
                     "fused_us": _per_round_us(fused_round, rounds)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    models = {"reference MLP": (mlp, args.rounds),
              "25 MB model": (lambda: mlp(n_features=1024, hidden=(2048, 2048), n_classes=10),
                              max(10, args.rounds // 100))}
    out: dict = {"rounds": args.rounds, "repeat": args.repeat, "models": {}}
    print(f"{'model':<15}{'shard':>6}{'blocks':>7}{'values':>10}{'executor µs':>13}"
          f"{'fused µs':>10}{'× faster':>10}")
    for label, (model, rounds) in models.items():
        runs = [measure(model(), rounds) for _ in range(args.repeat)]
        rows = []
        for shard_rows in zip(*runs, strict=True):
            row = dict(shard_rows[0])
            for key in ("executor_us", "fused_us"):
                row[key] = statistics.median(r[key] for r in shard_rows)
            row["speedup"] = row["executor_us"] / row["fused_us"]
            rows.append(row)
            print(f"{label:<15}{row['shard']:>6}{row['blocks']:>7}{row['values']:>10}"
                  f"{row['executor_us']:>13.1f}{row['fused_us']:>10.1f}"
                  f"{row['speedup']:>10.2f}")
        out["models"][label] = {"shards": rows,
                                "fused_us": sum(r["fused_us"] for r in rows),
                                "executor_us": sum(r["executor_us"] for r in rows)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "shard_update.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
