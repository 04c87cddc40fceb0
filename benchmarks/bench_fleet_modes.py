"""Fluid's collective training modes as 2 trainer processes, against one local process.

The reference MLP (64-256-256-10, SGD 0.1, batch 128 per trainer) trained the way a Fluid 1.8
collective-fleet script trains it, one process per trainer with PADDLE_* variables and a TCP
ring between their endpoints (each process pinned to its own core where the machine has two):

- ``local``: one process, the plain optimizer, batch 128 (the work of one trainer);
- ``nccl2``: the fleet's default strategy, a ``CompiledProgram`` that all-reduces every
  gradient in one fused exchange between backward and optimize;
- ``grad_allreduce``: ``strategy.mode = "collective"``, a ``c_allreduce_sum`` op per gradient
  (6 exchanges a step here);
- ``local_sgd``: ``use_local_sgd``, a ``c_allreduce_sum`` of each parameter's move after the
  optimizer.

Each process times ``--steps`` steps after 50 warm-up steps; a job's figure is the slowest
trainer's. Prints a table (ms per step, samples per second of the job, against local) and
writes ``benchmarks/results/fleet_modes.json``.

    python benchmarks/bench_fleet_modes.py [--steps 600] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

from dask_fluid.compat.distributed.launch import free_ports

RESULTS = pathlib.Path(__file__).parent / "results"
MODES = ("local", "nccl2", "grad_allreduce", "local_sgd")
BATCH = 128
WARMUP = 50


def _trainer(mode: str, steps: int) -> None:
    """One process of a job (``--trainer``): train, print one JSON line."""
    import dask_fluid as fluid
    from dask_fluid.compat.incubate.fleet.base.role_maker import PaddleCloudRoleMaker
    from dask_fluid.compat.incubate.fleet.collective import DistributedStrategy, fleet
    from dask_fluid.datasets import reference_blobs
    from dask_fluid.models import mlp

    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    x, y = reference_blobs(n=BATCH * 2 * 64, seed=0)
    y = y.reshape(-1, 1)
    if mode == "local":
        spec = mlp()
        to_run, startup = spec.main, spec.startup
    else:
        fleet.init(PaddleCloudRoleMaker(is_collective=True))
        strategy = DistributedStrategy()
        if mode == "grad_allreduce":
            strategy.mode, strategy.collective_mode = "collective", "grad_allreduce"
        elif mode == "local_sgd":
            strategy.use_local_sgd = True
        # mlp() minimises inside its program guard: with the fleet's optimizer here
        spec = mlp(opt=fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy))
        to_run, startup = fleet.main_program, fleet.startup_program
    loss = spec.loss
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    batches = len(x) // (2 * BATCH)

    def feed(step: int) -> dict:
        start = (step % batches) * 2 * BATCH + rank * BATCH
        return {"x": x[start:start + BATCH], "y": y[start:start + BATCH]}

    for step in range(WARMUP):
        exe.run(to_run, feed=feed(step), fetch_list=[loss])
    t0 = time.perf_counter()
    for step in range(steps):
        exe.run(to_run, feed=feed(step), fetch_list=[loss])
    seconds = time.perf_counter() - t0
    exe.close()
    print(json.dumps({"rank": rank, "ms_per_step": 1000 * seconds / steps}), flush=True)


def _job(mode: str, steps: int) -> float:
    """ms per step of the job (its slowest trainer)."""
    n = 1 if mode == "local" else 2
    endpoints = [f"127.0.0.1:{p}" for p in free_ports(n)]
    base = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    base.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                CPU_NUM="1", DASK_FLUID_JOB_SECRET="bench")
    procs = []
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    for i in range(n):
        env = dict(base)
        if mode != "local":
            env.update(PADDLE_TRAINER_ID=str(i), PADDLE_TRAINERS_NUM=str(n),
                       PADDLE_TRAINER_ENDPOINTS=",".join(endpoints),
                       PADDLE_CURRENT_ENDPOINT=endpoints[i])
        cmd = [sys.executable, __file__, "--trainer", mode, "--steps", str(steps)]
        if len(cores) >= n and n > 1 and os.path.exists("/usr/bin/taskset"):
            cmd = ["taskset", "-c", str(sorted(cores)[i]), *cmd]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    times = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode:
            raise RuntimeError(f"{mode} trainer failed: {err[-2000:]}")
        times.append(json.loads(out.strip().splitlines()[-1])["ms_per_step"])
    return max(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trainer", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trainer:
        _trainer(args.trainer, args.steps)
        return 0
    runs: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(args.repeat):  # interleaved: every mode sees the same machine load
        for mode in MODES:
            runs[mode].append(_job(mode, args.steps))
    local = statistics.median(runs["local"])
    rows = {}
    print(f"{'mode':<16} {'ms/step':>8} {'samples/s':>10} {'/ local':>8}")
    for mode in MODES:
        ms = statistics.median(runs[mode])
        samples = (1 if mode == "local" else 2) * BATCH * 1000 / ms
        ratio = samples / (BATCH * 1000 / local)
        rows[mode] = {"ms_per_step": ms, "samples_per_s": samples, "over_local": ratio,
                      "runs_ms": runs[mode]}
        print(f"{mode:<16} {ms:>8.2f} {samples:>10.0f} {ratio:>8.2f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fleet_modes.json").write_text(json.dumps(
        {"steps": args.steps, "repeat": args.repeat, "batch_per_trainer": BATCH,
         "modes": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
