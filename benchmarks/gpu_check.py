"""End-to-end check of the nccl backend on a GPU machine, in one command.

    python benchmarks/gpu_check.py [--max-mb 256] [--iters 20]

1. starts one Dask worker per GPU: ``dask_cuda.LocalCUDACluster`` when dask-cuda is installed,
   else worker processes each with its own ``CUDA_VISIBLE_DEVICES``;
2. creates an NCCL unique id on the scheduler and checks that every rank fetched the same id
   back (as a tuple);
3. all-reduces known values (float32 and float64, fused, cupy and numpy inputs) and checks them;
4. trains a small MLP with ``train_collective(backend="nccl", device="gpu")`` and compares the
   parameters with local training on the global batch;
5. times all-reduce of 1 MB to 256 MB float32 buffers and prints algorithm and bus bandwidth
   (nccl-tests' definition: bus = alg × 2(n−1)/n; with one GPU there is no bus, so only the
   algorithm bandwidth, i.e. the cost of a world-size-1 call, is meaningful).

Writes ``benchmarks/results/gpu_check.json``. Without a GPU (or without CuPy/NCCL) it prints
"skipped: ..." and exits 0.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import uuid

import numpy as np

RESULTS = pathlib.Path(__file__).parent / "results"


def _gpus() -> tuple[int, str]:
    try:
        import cupy
        from cupy.cuda import nccl
    except Exception as exc:  # noqa: BLE001
        return 0, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    if not getattr(nccl, "available", False):
        return 0, "CuPy cannot load NCCL (cupy.cuda.nccl.available is False)"
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001
        return 0, f"no usable CUDA GPU ({type(exc).__name__}: {exc})"
    return n, "" if n else "no CUDA GPU is visible"


def _cluster(n: int):
    try:
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(n_workers=n, threads_per_worker=1, dashboard_address=":0"), \
            "dask_cuda.LocalCUDACluster"
    except ImportError:
        from distributed import Nanny, Scheduler, SpecCluster

        workers = {f"gpu{i}": {"cls": Nanny, "options": {
            "nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": str(i)}}} for i in range(n)}
        return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {
            "dashboard_address": ":0"}}, silence_logs=40), \
            "SpecCluster, one Nanny per GPU with CUDA_VISIBLE_DEVICES"


def _rank(job, rank, addresses, session, sizes_mb, iters):
    """One rank: the id it fetched, a correctness check, and timings."""
    import cupy
    from distributed import get_worker

    from dask_fluid.distributed.collective.nccl import NcclCommunicator, fetch_unique_id

    worker = get_worker()
    n = len(addresses)
    uid = fetch_unique_id(session, rank, n, 60.0)
    out = {"rank": rank, "uid_is_tuple": isinstance(uid, tuple), "uid_hash": hash(uid),
           "device": cupy.cuda.Device(0).pci_bus_id}
    with NcclCommunicator(worker, job, rank, addresses, 120.0, session=session) as comm:
        dev = [cupy.full(1_000_003, rank + 1, dtype=cupy.float32),
               cupy.arange(7, dtype=cupy.float64) * rank]
        host = [np.full(5, rank, dtype=np.float32)]
        comm.allreduce(dev + host, op="sum")
        comm.broadcast(host, root=n - 1)
        want = n * (n + 1) / 2
        out["allreduce_ok"] = bool((dev[0] == want).all()) and bool(
            (cupy.asnumpy(dev[1]) == np.arange(7) * n * (n - 1) / 2).all())
        out["broadcast_ok"] = bool((host[0] == n * (n - 1) / 2).all())
        timings = {}
        for mb in sizes_mb:
            buf = cupy.ones(mb * (1 << 20) // 4, dtype=cupy.float32)
            comm.allreduce([buf])  # warm-up
            comm.barrier()
            cupy.cuda.runtime.deviceSynchronize()
            start = time.perf_counter()
            for _ in range(iters):
                comm.allreduce([buf])
            cupy.cuda.runtime.deviceSynchronize()
            timings[mb] = (time.perf_counter() - start) / iters
            del buf
        out["timings"] = timings
    return out


def _training_check(client, world: int) -> dict:
    import dask_fluid as fluid
    from dask_fluid.datasets import reference_blobs
    from dask_fluid.distributed import train_collective
    from dask_fluid.models import mlp

    batch, steps = 32, 10
    x, y = reference_blobs(world * batch * steps, n_features=16, n_classes=4, seed=3)
    spec = mlp(n_features=16, hidden=(32,), n_classes=4, seed=7)
    result = train_collective(client, spec.main, spec.startup, (x, y), backend="nccl",
                              device="gpu", batch_size=batch, shuffle=False)
    ref = mlp(n_features=16, hidden=(32,), n_classes=4, seed=7)
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(ref.startup, scope=scope)
    # numpy inputs are split into one contiguous block per worker, in worker order
    blocks = np.array_split(np.arange(len(x)), world)
    order = [r["address"] for r in result.ranks]
    for s in range(steps):
        idx = np.concatenate([blocks[i][s * batch:(s + 1) * batch] for i in range(len(order))])
        exe.run(ref.main, feed={"x": x[idx], "y": y[idx, None]}, scope=scope)
    err = max(float(np.max(np.abs(v - np.asarray(scope.get(k)))) /
                    max(float(np.max(np.abs(np.asarray(scope.get(k))))), 1e-30))
              for k, v in result.params.items())
    return {"backend": result.summary.splitlines()[0], "max_rel_err_vs_local": err,
            "identical_ranks": len({r["digest"] for r in result.ranks}) == 1,
            "ok": err < 1e-4 and len({r["digest"] for r in result.ranks}) == 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-mb", type=int, default=256)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args(argv)
    n, why = _gpus()
    if n == 0:
        print(f"skipped: no GPU ({why})")
        return 0
    from distributed import Client

    from dask_fluid.distributed.collective import nccl as backend

    sizes = [mb for mb in (1, 4, 16, 64, 256) if mb <= args.max_mb]
    cluster, kind = _cluster(n)
    report: dict = {"gpus": n, "cluster": kind}
    with cluster, Client(cluster) as client:
        client.wait_for_workers(n, timeout=180)
        addresses = sorted(client.scheduler_info(n_workers=-1)["workers"])
        backend.check_nccl(client, addresses)
        session, job = backend.create_session(client), uuid.uuid4().hex
        try:
            futures = [client.submit(_rank, job, r, addresses, session, sizes, args.iters,
                                     workers=[w], pure=False) for r, w in enumerate(addresses)]
            ranks = client.gather(futures)
        finally:
            backend.destroy_session(client, session)
        report["uid_through_scheduler_ok"] = (len({r["uid_hash"] for r in ranks}) == 1
                                              and all(r["uid_is_tuple"] for r in ranks))
        report["allreduce_ok"] = all(r["allreduce_ok"] and r["broadcast_ok"] for r in ranks)
        report["devices"] = [r["device"] for r in ranks]
        report["training"] = _training_check(client, n)
    rows = []
    for mb in sizes:
        t = max(r["timings"][mb] for r in ranks)
        alg = mb * (1 << 20) / t / 1e9
        rows.append({"size_mb": mb, "time_ms": 1000 * t, "algbw_GBps": alg,
                     "busbw_GBps": alg * 2 * (n - 1) / n})
    report["bandwidth"] = rows
    print(f"nccl backend on {n} GPU(s) via {kind}")
    tr = report["training"]
    verdict = {True: "ok", False: "FAIL"}
    print(f"unique id through the scheduler: {verdict[report['uid_through_scheduler_ok']]}")
    print(f"all-reduce/broadcast results:    {verdict[report['allreduce_ok']]}")
    print(f"training equals local:           {verdict[tr['ok']]} (max rel err "
          f"{tr['max_rel_err_vs_local']:.2e}, identical ranks {tr['identical_ranks']})")
    print(f"{'size':>8} {'time ms':>9} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for row in rows:
        print(f"{row['size_mb']:>6}MB {row['time_ms']:>9.3f} {row['algbw_GBps']:>11.2f} "
              f"{row['busbw_GBps']:>11.2f}")
    if n == 1:
        print("(one GPU: no bus; busbw is 0 by definition, algbw is the cost of a 1-rank call)")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "gpu_check.json").write_text(json.dumps(report, indent=2))
    ok = report["uid_through_scheduler_ok"] and report["allreduce_ok"] and tr["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
