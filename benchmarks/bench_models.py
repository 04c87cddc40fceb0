"""Image networks (dist_mnist's CNN, a ResNet basic block) and a CTR model, local and pserver.

Run: ``python benchmarks/bench_models.py [--steps 30] [--repeat 2]``. Writes
``benchmarks/results/models.json`` and prints a table.

For each network (``dask_fluid.models.mnist_cnn``: batch 64 of 1x28x28; ``resnet_block``:
batch 32 of 3x32x32, 16 channels):

- **local**: the Executor in this process, one BLAS thread, after 3 warm-up steps;
- **pserver 2+2**: ``train_pserver`` with 2 pservers and 2 trainers (batch as above per
  trainer) on a LocalCluster of 2 single-threaded worker processes; throughput = timed steps
  of both trainers x batch / the slowest trainer's span (the first 3 steps not timed);
- **torch**: the same network (same layers, shapes, loss and optimizer) in PyTorch on one
  thread, when torch is installed (skipped, and said so, otherwise).

Target (issue 14): local >= 0.5 x torch's CPU throughput. Measured on the 2-core machine
(2026-12-06, torch 2.14, two runs): mnist_cnn 0.79 / 0.78, resnet_block 0.57 / 0.55
(docs/performance.md).

The CTR model (``benchmarks/ctr_job.py``: LoD id lists, a distributed lookup table of 200k x 64,
a sparse wide embedding, ``sequence_pool``; batch 128 per trainer): **local** samples/s in this
process, and **pserver 2+2** as a Fluid-style job of 4 processes on this machine (2 pservers, 2
trainers, real sockets): samples/s of both trainers together and the tensor bytes a trainer
sends to and receives from the pservers per step.

Ratios are what to compare: the machine is shared, so run it twice before believing a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import dask_fluid as fluid  # noqa: E402
from dask_fluid.distributed import train_pserver  # noqa: E402
from dask_fluid.models import mnist_cnn, resnet_block  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
WARMUP = 3

#: name -> (builder, input shape without the batch, batch size)
NETWORKS = {
    "mnist_cnn": (mnist_cnn, (1, 28, 28), 64),
    "resnet_block": (resnet_block, (3, 32, 32), 32),
}


def _data(shape: tuple, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *shape), dtype=np.float32), rng.integers(0, 10, (n, 1))


def run_local(name: str, steps: int) -> dict:
    build, shape, batch = NETWORKS[name]
    spec = build()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(spec.startup, scope=scope)
    x, y = _data(shape, batch)
    feed = {spec.feeds[0]: x, spec.feeds[1]: y}
    for _ in range(WARMUP):
        exe.run(spec.main, feed=feed, scope=scope)
    t0 = time.perf_counter()
    for _ in range(steps):
        exe.run(spec.main, feed=feed, fetch_list=[spec.loss], scope=scope)
    dt = (time.perf_counter() - t0) / steps
    return {"samples_per_s": batch / dt, "ms_per_step": 1000 * dt}


def run_pserver(client, name: str, steps: int) -> dict:
    build, shape, batch = NETWORKS[name]
    spec = build()
    n = batch * (steps + WARMUP)
    parts = []
    for r in range(2):
        x, y = _data(shape, n, seed=r)
        parts.append({spec.feeds[0]: x, spec.feeds[1]: y})
    result = train_pserver(client, spec.main, spec.startup, parts, pservers=2,
                           batch_size=batch, shuffle=False, fetch_list=[spec.loss])
    spans, timed = [], 0
    for rank in sorted({e["rank"] for e in result.history}):
        times = [e["time"] for e in result.history if e["rank"] == rank][WARMUP:]
        spans.append(times[-1] - times[0])
        timed += len(times) - 1
    slowest = max(spans)
    return {"samples_per_s": timed * batch / slowest,
            "ms_per_step_per_trainer": 1000 * slowest / (timed / len(spans))}


def run_ctr_local(steps: int) -> dict:
    import ctr_job  # beside this file

    main, startup, loss = ctr_job.build()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    return {"samples_per_s": ctr_job.run_steps(exe, main, loss, steps, seed=0, scope=scope)}


def run_ctr_pserver(steps: int) -> dict:
    socks = [socket.socket() for _ in range(2)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    eps = [f"127.0.0.1:{sock.getsockname()[1]}" for sock in socks]
    for sock in socks:
        sock.close()
    job = [sys.executable, str(pathlib.Path(__file__).parent / "ctr_job.py"), "--endpoints",
           ",".join(eps), "--trainers", "2", "--steps", str(steps)]
    env = {**os.environ, "DASK_FLUID_JOB_SECRET": os.urandom(16).hex()}
    pservers = [subprocess.Popen([*job, "--role", "pserver", "--current_endpoint", ep],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for ep in eps]
    trainers = [subprocess.Popen([*job, "--role", "trainer", "--trainer_id", str(i)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(2)]
    try:
        outs = [p.communicate(timeout=600) for p in trainers]
        for p, (_, err) in zip(trainers, outs, strict=True):
            if p.returncode != 0:
                raise RuntimeError(f"a CTR trainer failed: {err[-2000:]}")
        for p in pservers:
            p.wait(timeout=60)
    finally:
        for p in [*pservers, *trainers]:
            if p.poll() is None:
                p.kill()
    figures = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    return {"samples_per_s": sum(f["samples_per_s"] for f in figures),
            "bytes_sent_per_step": statistics.mean(f["bytes_sent_per_step"] for f in figures),
            "bytes_received_per_step": statistics.mean(f["bytes_received_per_step"]
                                                       for f in figures)}


def _torch_net(name: str):
    import torch
    from torch import nn

    if name == "mnist_cnn":
        return nn.Sequential(
            nn.Conv2d(1, 20, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(20, 50, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten(), nn.Linear(800, 10)), torch.optim.SGD, {"lr": 0.001, "momentum": 0.9}

    class Block(nn.Module):
        def __init__(self, c: int = 16) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(c), nn.ReLU())
            self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(c), nn.ReLU(),
                                      nn.Conv2d(c, c, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(c))
            self.fc = nn.Linear(c, 10)

        def forward(self, x):
            s = self.stem(x)
            h = torch.relu(s + self.body(s))
            return self.fc(h.mean(dim=(2, 3)))

    return Block(), torch.optim.SGD, {"lr": 0.01}


def run_torch(name: str, steps: int) -> dict | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    _, shape, batch = NETWORKS[name]
    net, opt_cls, opt_args = _torch_net(name)
    opt = opt_cls(net.parameters(), **opt_args)
    x, y = _data(shape, batch)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y[:, 0])
    loss_fn = torch.nn.CrossEntropyLoss()  # softmax + cross entropy, as the Fluid networks

    def step() -> None:
        opt.zero_grad()
        loss_fn(net(xt), yt).backward()
        opt.step()

    for _ in range(WARMUP):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dt = (time.perf_counter() - t0) / steps
    return {"samples_per_s": batch / dt, "ms_per_step": 1000 * dt,
            "version": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    runs: dict[str, dict[str, list]] = {n: {"local": [], "pserver": [], "torch": []}
                                        for n in NETWORKS}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as client:
        for _ in range(args.repeat):
            for name in NETWORKS:
                runs[name]["local"].append(run_local(name, args.steps))
                runs[name]["pserver"].append(run_pserver(client, name, args.steps))
                t = run_torch(name, args.steps)
                if t is not None:
                    runs[name]["torch"].append(t)
    result: dict = {"target_local_over_torch": 0.5, "steps": args.steps,
                    "repeat": args.repeat, "networks": {}}
    print(f"{'network':<14} {'local':>10} {'pserver 2+2':>12} {'torch':>10} "
          f"{'local/torch':>12} {'pserver/local':>14}   (samples/s, medians)")
    for name, kinds in runs.items():
        med = {k: statistics.median(r["samples_per_s"] for r in v) if v else None
               for k, v in kinds.items()}
        entry = {f"{k}_samples_per_s": v for k, v in med.items()}
        entry["local_over_torch"] = med["local"] / med["torch"] if med["torch"] else None
        entry["pserver_over_local"] = med["pserver"] / med["local"]
        entry["runs"] = kinds
        result["networks"][name] = entry
        torch_s = f"{med['torch']:>10.0f}" if med["torch"] else f"{'(absent)':>10}"
        ratio = f"{entry['local_over_torch']:>12.2f}" if med["torch"] else f"{'-':>12}"
        print(f"{name:<14} {med['local']:>10.0f} {med['pserver']:>12.0f} {torch_s} {ratio} "
              f"{entry['pserver_over_local']:>14.2f}")
    if not any(k["torch"] for k in runs.values()):
        print("torch is not installed: the PyTorch column was skipped (pip install torch)")
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    ctr_local = [run_ctr_local(args.steps) for _ in range(args.repeat)]
    ctr_ps = [run_ctr_pserver(args.steps) for _ in range(args.repeat)]
    med_local = statistics.median(r["samples_per_s"] for r in ctr_local)
    med_ps = statistics.median(r["samples_per_s"] for r in ctr_ps)
    sent = statistics.median(r["bytes_sent_per_step"] for r in ctr_ps)
    received = statistics.median(r["bytes_received_per_step"] for r in ctr_ps)
    result["ctr"] = {"local_samples_per_s": med_local, "pserver_samples_per_s": med_ps,
                     "pserver_over_local": med_ps / med_local,
                     "bytes_sent_per_step": sent, "bytes_received_per_step": received,
                     "runs": {"local": ctr_local, "pserver": ctr_ps}}
    print(f"\n{'ctr':<14} {'local':>10} {'pserver 2+2':>12} {'pserver/local':>14} "
          f"{'sent/step':>12} {'received/step':>14}   (samples/s; bytes per trainer)")
    print(f"{'':<14} {med_local:>10.0f} {med_ps:>12.0f} {med_ps / med_local:>14.2f} "
          f"{sent:>12.0f} {received:>14.0f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "models.json").write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
