"""Pserver mode on Dask: the reference MLP benchmark and a 25 MB model's sync step.

Run: ``python benchmarks/bench_pserver.py [--steps 1000] [--repeat 3]``. Writes
``benchmarks/results/pserver.json`` and prints a table.

1. The reference MLP (shared/reference/measurements.md) with 2 pservers and 2 trainers on a
   LocalCluster of 2 single-threaded worker processes (each worker holds one trainer and one
   pserver; pinned one per core, as bench_collective.py pins them, unless ``--no-pin``),
   batch 128 per trainer, loss and accuracy fetched every step, 50 warm-up steps then
   ``--steps`` timed steps; throughput = sum over trainers of timed steps x 128 / the slowest
   trainer's timed span. The local executor and the collective ring (2 trainers, the same
   workers) are measured in the same run, interleaved. Targets (issue 16): >= 1.2 x local and
   >= 0.9 x the ring.
2. A ~25 MB model (1024 -> 2048 -> 2048 -> 10, batch 32) in sync mode, 2 pservers + 2
   trainers: ms per step, the local step of the same model, and the transport floor (each
   trainer pushes its gradients and pulls the parameters: 2 x 25 MB per trainer at the
   loopback ceiling, raw TCP between the two workers, measured in the same run; the floor at
   measurements.md's 2.4 GB/s is printed beside it). Target: step <= 1.3 x floor; also
   reported: (step - local step) / floor, the cost of distribution against the floor.
3. With ``--cpu`` (Linux): where each worker's CPU goes per step, for the pserver job and the
   ring, from the per-thread CPU counters of /proc sampled over a window of a longer run (6000
   steps): the trainer loop, the pserver's connection threads (serving the other trainer),
   the worker's event loop (Dask's heartbeats, profiler and the progress events), and the rest;
   and how busy that makes the worker's core. A job whose cores are busy at every step cannot
   gain from overlapping communication with compute: it can only do less work.

Measured on the 2-core development machine (2026-12-03; medians of 3; the machine is a shared
VM, so runs vary by about 10%): local 133-134k samples/s, pserver 109-111k (0.82-0.83x local);
25 MB model: sync step 35-41 ms, local step 16-18 ms, floor 21.1 ms, so step/floor 1.7-1.9 and
(step - local)/floor 0.9-1.1. Before the direct data path: 60k (0.43x); before the cache-blocked
update and shared-memory payloads: a 44-48 ms step (docs/pserver.md has the steps between).
2026-12-06, two runs: local 145k, pserver 185-186k (1.28x local), ring 224-231k (pserver 0.80-
0.83x the ring); 25 MB model 24.4-25.3 ms, 1.16-1.20x the floor (docs/performance.md). Then,
with the worker's trainer reading the other trainer's requests while it waits, three runs:
local 146-148k, pserver 201-205k (1.35-1.40x local), ring 227-229k (0.88-0.90x the ring); 25 MB
model 24.1-25.0 ms, 1.14-1.19x the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import statistics
import sys
import threading
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

from dask_fluid.datasets import reference_blobs  # noqa: E402
from dask_fluid.distributed import train_pserver  # noqa: E402
from dask_fluid.models import mlp  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_collective import _pin_workers, run_collective  # noqa: E402
from bench_local import fixed_feed_step_ms, run_local  # noqa: E402

from dask_fluid.distributed.launch.data import partition_by_worker  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
LOOPBACK_BYTES_PER_S = 2.4e9  # measurements.md: loopback TCP ceiling


def _timed(result, warmup: int, batch: int) -> dict:
    """Throughput over each trainer's steps after ``warmup`` (event timestamps)."""
    spans, steps = [], 0
    for rank in sorted({e["rank"] for e in result.history}):
        times = [e["time"] for e in result.history if e["rank"] == rank]
        timed = times[warmup:]
        spans.append(timed[-1] - timed[0])
        steps += len(timed) - 1
    slowest = max(spans)
    return {"samples_per_s": steps * batch / slowest,
            "ms_per_step_per_trainer": 1000 * slowest / (steps / len(spans))}


def run_mlp(client, steps: int, warmup: int = 50, batch: int = 128) -> dict:
    x, y = reference_blobs()
    perm = np.random.default_rng(1).permutation(len(x))
    # trainer r takes rows perm[(s*W + r)*128 ...]: the measurements.md split
    rows = [np.concatenate([perm[(2 * s + r) * batch:(2 * s + r + 1) * batch]
                            for s in range(len(x) // (2 * batch))]) for r in (0, 1)]
    parts = [{"x": x[r], "y": y[r]} for r in rows]
    spec = mlp()
    total = warmup + steps + 1
    per_epoch = len(rows[0]) // batch
    epochs = -(-total // per_epoch)
    result = train_pserver(client, spec.main, spec.startup, parts, pservers=2, batch_size=batch,
                           epochs=epochs, steps_per_epoch=min(per_epoch, -(-total // epochs)),
                           shuffle=False, fetch_list=[spec.loss, spec.accuracy])
    out = _timed(result, warmup, batch)
    accs = [e["fetches"][spec.accuracy.name] for e in result.history[-200:]]
    out["train_accuracy_last_100"] = float(np.mean(accs))
    out["summary"] = result.summary
    return out


def _thread_cpu() -> dict[int, tuple[str, float]]:
    """On a worker: thread id -> (name, CPU seconds so far), from /proc (Linux): the
    scheduler's run time (``schedstat``, nanoseconds), or the tick counts of ``stat`` where
    there is no schedstat (those are sampled at the timer tick: a thread that sleeps and wakes
    between ticks, as a ring trainer in ``select`` does, can be under-counted)."""
    import threading  # noqa: PLC0415 - runs on the worker

    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    seconds = int(f.read().split()[0]) / 1e9
            except FileNotFoundError:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                seconds = (int(fields[11]) + int(fields[12])) / tick
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (names.get(int(tid), "?"), seconds)
    return out


def _role(thread_name: str) -> str:
    if "Dask-Default-Threads" in thread_name:
        return "trainer loop"
    if "greet" in thread_name:
        return "pserver connections"
    if thread_name == "MainThread":
        return "event loop"
    return "other"


def cpu_per_step(client, job, window_s: float = 3.0, settle_s: float = 2.5) -> dict:
    """Run ``job()`` (a long run) in a thread; over a window of its steady state, each worker's
    CPU milliseconds per step by thread role, its step time and its busy share."""
    import threading  # noqa: PLC0415

    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(job()))
    runner.start()
    time.sleep(settle_s)
    before, t0 = client.run(_thread_cpu), time.perf_counter()
    time.sleep(window_s)
    after, window = client.run(_thread_cpu), time.perf_counter() - t0
    ended_early = not runner.is_alive()
    runner.join()
    if ended_early:  # the window saw the job's end, not only its steady state
        raise RuntimeError(f"the run ended within the {settle_s + window_s:.1f} s CPU window: "
                           "give it more steps")
    step_ms = result.get("ms_per_step_per_trainer", result.get("ms_per_step"))
    steps = window * 1000 / step_ms
    workers = {}
    for w in after:
        roles: dict[str, float] = {}
        for tid, (name, cpu) in after[w].items():
            spent = cpu - before[w].get(tid, (name, cpu))[1]
            roles[_role(name)] = roles.get(_role(name), 0.0) + 1000 * spent / steps
        workers[w] = {"ms_per_step": roles, "busy": sum(roles.values()) / step_ms}
    return {"step_ms": step_ms, "workers": workers}


def _print_cpu(kind: str, cpu: dict) -> None:
    roles = ("trainer loop", "pserver connections", "event loop", "other")
    for w, info in sorted(cpu["workers"].items()):
        parts = ", ".join(f"{r} {info['ms_per_step'].get(r, 0.0):.3f}" for r in roles)
        print(f"{kind:<8} step {cpu['step_ms']:.3f} ms; CPU ms per step on {w}: {parts}; "
              f"core busy {info['busy']:.0%}")


def _big_model():
    return mlp(n_features=1024, hidden=(2048, 2048), n_classes=10)


def _loopback_sink(nbytes: int, rounds: int, dask_worker=None) -> int:
    """Listen on loopback; a thread reads ``rounds`` messages of ``nbytes`` and acknowledges
    each with one byte. Returns the port."""
    server = socket.create_server(("127.0.0.1", 0))
    buf = memoryview(bytearray(nbytes))

    def serve() -> None:
        with server, server.accept()[0] as conn:
            for _ in range(rounds):
                got = 0
                while got < nbytes:
                    k = conn.recv_into(buf[got:])
                    if not k:
                        return
                    got += k
                conn.sendall(b"k")
    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def _loopback_source(port: int, nbytes: int, rounds: int, dask_worker=None) -> list[float]:
    """Send ``rounds`` messages of ``nbytes`` to the sink; seconds each, until acknowledged."""
    data = np.ones(nbytes, np.uint8)
    times = []
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        for _ in range(rounds):
            t0 = time.perf_counter()
            sock.sendall(data)
            if sock.recv(1) != b"k":
                raise RuntimeError("the loopback sink closed early")
            times.append(time.perf_counter() - t0)
    return times


def measure_loopback(client, nbytes: int, rounds: int = 5) -> float:
    """Bytes per second of raw TCP between the cluster's two workers, measured now (the median
    of ``rounds`` messages of ``nbytes``): the loopback ceiling of measurements.md ("raw TCP
    between two processes"), on this machine and in this run."""
    sink, source = sorted(client.scheduler_info()["workers"])[:2]
    port = client.run(_loopback_sink, nbytes, rounds + 1, workers=[sink])[sink]
    times = client.run(_loopback_source, port, nbytes, rounds + 1, workers=[source])[source]
    return nbytes / statistics.median(times[1:])  # the first warms the socket buffers


def run_big(client, steps: int = 50, batch: int = 32) -> dict:
    rng = np.random.default_rng(0)
    n = batch * (steps + 3)
    parts = [{"x": rng.standard_normal((n, 1024), dtype=np.float32),
              "y": rng.integers(0, 10, n)} for _ in range(2)]
    spec = _big_model()
    nbytes = sum(int(np.prod(p.shape)) * 4 for p in spec.main.global_block().all_parameters())
    result = train_pserver(client, spec.main, spec.startup, parts, pservers=2,
                           batch_size=batch, shuffle=False, fetch_list=[spec.loss])
    timed = _timed(result, 3, batch)
    # the local step of the same model, in this process
    local = _big_model()
    feed = {"x": parts[0]["x"][:batch], "y": parts[0]["y"][:batch, None]}
    local_ms = fixed_feed_step_ms(local.main, local.startup, feed, [local.loss], steps=20,
                                  warmup=3)
    loopback = measure_loopback(client, nbytes // 2)
    floor_ms = 1000 * 2 * nbytes / loopback
    step_ms = timed["ms_per_step_per_trainer"]
    return {"model_mb": nbytes / 1e6, "batch": batch, "sync_step_ms": step_ms,
            "local_step_ms": local_ms, "loopback_gb_per_s": loopback / 1e9,
            "transport_floor_ms": floor_ms, "step_over_floor": step_ms / floor_ms,
            "step_minus_local_over_floor": (step_ms - local_ms) / floor_ms,
            "reference_floor_ms": 1000 * 2 * nbytes / LOOPBACK_BYTES_PER_S}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu", action="store_true",
                        help="also report each worker's CPU per step by thread (Linux, about "
                             "20 s more)")
    parser.add_argument("--no-pin", action="store_true",
                        help="let the OS place the worker processes (default: one per core, "
                             "as bench_collective.py does)")
    args = parser.parse_args(argv)
    runs: dict[str, list] = {"local": [], "pserver": [], "ring": [], "big": []}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as client:
        pinned = not args.no_pin and _pin_workers(client)
        x, y = reference_blobs()
        partition = partition_by_worker(client, {"x": x, "y": y})
        for _ in range(args.repeat):  # interleaved: all three see the same machine load
            runs["local"].append(run_local(args.steps))
            runs["pserver"].append(run_mlp(client, args.steps))
            runs["ring"].append(run_collective(client, partition, args.steps))
        for _ in range(args.repeat):
            runs["big"].append(run_big(client))
        cpu = None
        if args.cpu and os.path.isdir("/proc/self/task"):
            cpu = {"pserver": cpu_per_step(client, lambda: run_mlp(client, 6000)),
                   "ring": cpu_per_step(client, lambda: run_collective(client, partition,
                                                                       6000))}

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[kind])

    local_sps, ps_sps = med("local", "samples_per_s"), med("pserver", "samples_per_s")
    ring_sps = med("ring", "samples_per_s")
    result = {
        "local_samples_per_s": local_sps,
        "local_ms_per_step": med("local", "ms_per_step"),
        "pserver_samples_per_s": ps_sps,
        "pserver_ms_per_step_per_trainer": med("pserver", "ms_per_step_per_trainer"),
        "pserver_over_local": ps_sps / local_sps,
        "ring_samples_per_s": ring_sps,
        "pserver_over_ring": ps_sps / ring_sps,
        "workers_pinned": pinned,
        "pserver_train_accuracy": med("pserver", "train_accuracy_last_100"),
        "targets": {"over_local": 1.2, "over_ring": 0.9, "step_over_floor": 1.3},
        "big_model": {k: med("big", k) for k in runs["big"][0] if k != "batch"},
        "cpu_per_step": cpu,
        "runs": runs,
    }
    print(f"{'system':<44} {'samples/s':>10} {'ms/step':>8} {'acc':>6}")
    print(f"{'local executor (1 process)':<44} {local_sps:>10.0f} "
          f"{result['local_ms_per_step']:>8.2f} "
          f"{med('local', 'train_accuracy_last_100'):>6.3f}")
    print(f"{'pserver sync, 2 pservers + 2 trainers':<44} {ps_sps:>10.0f} "
          f"{result['pserver_ms_per_step_per_trainer']:>8.2f} "
          f"{result['pserver_train_accuracy']:>6.3f}")
    print(f"{'collective ring, 2 trainers (same run)':<44} {ring_sps:>10.0f} "
          f"{med('ring', 'ms_per_step'):>8.2f} {med('ring', 'train_accuracy_last_100'):>6.3f}")
    print(f"pserver / local = {result['pserver_over_local']:.2f} (target >= 1.2), pserver / "
          f"ring = {result['pserver_over_ring']:.2f} (target >= 0.9); workers pinned one per "
          f"core: {pinned}; Fluid 1.8.5: 18.8k-23.5k")
    big = result["big_model"]
    print(f"{big['model_mb']:.1f} MB model, sync step {big['sync_step_ms']:.1f} ms, local step "
          f"{big['local_step_ms']:.1f} ms, transport floor {big['transport_floor_ms']:.1f} ms "
          f"(loopback {big['loopback_gb_per_s']:.2f} GB/s measured in this run; "
          f"{big['reference_floor_ms']:.1f} ms at measurements.md's 2.4 GB/s): "
          f"step/floor {big['step_over_floor']:.2f}, (step - local)/floor "
          f"{big['step_minus_local_over_floor']:.2f} (target 1.3)")
    if cpu is not None:
        for kind in ("pserver", "ring"):
            _print_cpu(kind, cpu[kind])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pserver.json").write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
