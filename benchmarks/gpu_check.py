"""One-GPU (or more) smoke test of the GPU paths, in one command, in under 5 minutes.

    python benchmarks/gpu_check.py [--max-mb 256] [--iters 20] [--no-tests] [--no-demo]
                                   [--json PATH]

1. **raw CuPy**, world size 1, in this process: ``get_unique_id``, ``NcclCommunicator`` with the
   id as CuPy hands it out and as dask_fluid converts it (:func:`uid_for_cupy`), a grouped
   ``allReduce`` and a ``broadcast`` on a non-blocking stream, polled to completion, ``destroy``;
2. **the project's GPU tests**: ``pytest -m gpu`` (CuPy kernels against numpy, real NCCL);
3. **the demo**: ``dask-fluid demo --mode nccl2`` (Fluid's NCCL2 mode, one worker per GPU);
4. **the backend on a cluster**: one Dask worker per GPU (``dask_cuda.LocalCUDACluster`` when
   installed, else one worker process per ``CUDA_VISIBLE_DEVICES``), the id through the
   scheduler, fused all-reduce and broadcast of known values, training equal to local training;
5. **bandwidth**: all-reduce of 1 MB to 256 MB float32 buffers through
   :class:`NcclCommunicator`, with nccl-tests' definitions: algbw = bytes / time,
   busbw = algbw × 2(n−1)/n (0 with one GPU, where only algbw, the cost of a call, means
   anything).

Prints a table and writes ``benchmarks/results/gpu_check.json``. Without a GPU (or CuPy/NCCL) it
prints "skipped: ..." with the reason, writes that to the JSON and exits 0. Exits 1 if a check
fails.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
import uuid

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


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


def _raw_cupy() -> dict:
    """The CuPy and NCCL calls the backend makes, at world size 1, on device 0."""
    import cupy
    from cupy.cuda import nccl

    from dask_fluid.distributed.collective.nccl_setup import uid_bytes, uid_for_cupy

    out: dict = {"cupy": cupy.__version__, "nccl": nccl.get_version()}
    # an id serves one communicator (its bootstrap root answers once): a fresh one for each
    handed_out = nccl.get_unique_id()
    out["unique_id_type"] = type(handed_out).__name__
    results = []
    for form_name, form in (("as CuPy hands it out", handed_out),
                            ("as dask_fluid converts it",
                             uid_for_cupy(uid_bytes(nccl.get_unique_id())))):
        with cupy.cuda.Device(0):
            comm = nccl.NcclCommunicator(1, form, 0)
            stream = cupy.cuda.Stream(non_blocking=True)
            a = cupy.asarray(np.arange(1024, dtype=np.float32))
            b = cupy.full(16, 7, dtype=np.int64)
            ready = cupy.cuda.Event()
            ready.record()
            stream.wait_event(ready)
            nccl.groupStart()
            comm.allReduce(a.data.ptr, a.data.ptr, a.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM,
                           stream.ptr)
            comm.broadcast(b.data.ptr, b.data.ptr, b.size, nccl.NCCL_INT64, 0, stream.ptr)
            nccl.groupEnd()
            give_up = time.monotonic() + 30
            while not stream.done:
                comm.check_async_error()
                if time.monotonic() > give_up:
                    comm.abort()
                    raise RuntimeError("a world-size-1 all-reduce did not finish in 30 s")
                time.sleep(1e-4)
            ok = bool((cupy.asnumpy(a) == np.arange(1024)).all()) and \
                bool((cupy.asnumpy(b) == 7).all())
            comm.destroy()
        results.append({"form": form_name, "ok": ok})
    out["calls"] = results
    out["ok"] = all(r["ok"] for r in results)
    return out


def _subprocess(cmd: list[str], timeout_s: float) -> dict:
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, text = 124, f"timed out after {timeout_s:g} s\n{exc.stdout or ''}{exc.stderr or ''}"
    tail = [line for line in str(text).splitlines() if line.strip()][-8:]
    return {"command": " ".join(cmd), "rc": rc, "seconds": round(time.perf_counter() - start, 1),
            "tail": tail, "ok": rc == 0}


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
    """One rank: a correctness check and timings, through the backend's communicator."""
    import cupy
    from distributed import get_worker

    from dask_fluid.distributed.collective.nccl import NcclCommunicator

    n = len(addresses)
    out = {"rank": rank}
    with NcclCommunicator(get_worker(), job, rank, addresses, 120.0, session=session) as comm:
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
            start = time.perf_counter()
            for _ in range(iters):
                comm.allreduce([buf])  # returns once the stream finished
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
    blocks = np.array_split(np.arange(len(x)), world)  # rank r: the r-th contiguous block
    for s in range(steps):
        idx = np.concatenate([b[s * batch:(s + 1) * batch] for b in blocks])
        exe.run(ref.main, feed={"x": x[idx], "y": y[idx, None]}, scope=scope)
    err = max(float(np.max(np.abs(v - np.asarray(scope.get(k)))) /
                    max(float(np.max(np.abs(np.asarray(scope.get(k))))), 1e-30))
              for k, v in result.params.items())
    same = len({r["digest"] for r in result.ranks}) == 1
    return {"backend": result.summary.splitlines()[0], "max_rel_err_vs_local": err,
            "identical_ranks": same, "ok": err < 1e-4 and same}


def _on_cluster(n: int, sizes: list[int], iters: int) -> dict:
    from distributed import Client

    from dask_fluid.distributed.collective import nccl as backend

    cluster, kind = _cluster(n)
    report: dict = {"cluster": kind}
    with cluster, Client(cluster) as client:
        client.wait_for_workers(n, timeout=180)
        addresses = sorted(client.scheduler_info(n_workers=-1)["workers"])
        infos = backend.probe_gpus(client, addresses)
        backend.check_nccl(client, addresses, infos)
        report["gpus"] = [f"{infos[a].host} {infos[a].uuid or infos[a].bus_id}"
                          for a in addresses]
        session, job = backend.create_session(client), uuid.uuid4().hex
        try:
            futures = [client.submit(_rank, job, r, addresses, session, sizes, iters,
                                     workers=[w], pure=False) for r, w in enumerate(addresses)]
            ranks = client.gather(futures)
        finally:
            backend.destroy_session(client, session)
        report["allreduce_ok"] = all(r["allreduce_ok"] and r["broadcast_ok"] for r in ranks)
        report["training"] = _training_check(client, n)
    rows = []
    for mb in sizes:
        t = max(r["timings"][mb] for r in ranks)
        alg = mb * (1 << 20) / t / 1e9
        rows.append({"size_mb": mb, "time_ms": 1000 * t, "algbw_GBps": alg,
                     "busbw_GBps": alg * 2 * (n - 1) / n})
    report["bandwidth"] = rows
    report["ok"] = report["allreduce_ok"] and report["training"]["ok"]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-mb", type=int, default=256)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--no-tests", action="store_true", help="skip pytest -m gpu")
    parser.add_argument("--no-demo", action="store_true", help="skip dask-fluid demo")
    parser.add_argument("--json", type=pathlib.Path, default=RESULTS / "gpu_check.json",
                        help="where the report goes (default benchmarks/results/gpu_check.json)")
    args = parser.parse_args(argv)
    out_file = args.json.resolve()
    out_file.parent.mkdir(parents=True, exist_ok=True)
    n, why = _gpus()
    if n == 0:
        print(f"skipped: no GPU ({why})")
        out_file.write_text(json.dumps({"skipped": why}, indent=2))
        return 0
    started = time.perf_counter()
    report: dict = {"gpus": n}
    report["raw_cupy"] = _raw_cupy()
    if not args.no_tests:
        report["gpu_tests"] = _subprocess([sys.executable, "-m", "pytest", "-q", "-m", "gpu",
                                           "-p", "no:cacheprovider", "tests"], 240)
    if not args.no_demo:
        report["demo"] = _subprocess([sys.executable, "-m", "dask_fluid.cli", "demo", "--mode",
                                      "nccl2"], 90)
    sizes = [mb for mb in (1, 4, 16, 64, 256) if mb <= args.max_mb]
    report["cluster"] = _on_cluster(n, sizes, args.iters)
    report["seconds"] = round(time.perf_counter() - started, 1)

    verdict = {True: "ok", False: "FAIL"}
    raw = report["raw_cupy"]
    print(f"GPU check on {n} GPU(s): CuPy {raw['cupy']}, NCCL {raw['nccl']}, "
          f"{report['cluster']['cluster']}")
    print(f"raw CuPy calls (world size 1, id as {raw['unique_id_type']}): {verdict[raw['ok']]}")
    for key, label in (("gpu_tests", "pytest -m gpu"), ("demo", "dask-fluid demo --mode nccl2")):
        if key in report:
            r = report[key]
            print(f"{label}: {verdict[r['ok']]} (rc {r['rc']}, {r['seconds']} s) "
                  f"{r['tail'][-1] if r['tail'] else ''}")
    c = report["cluster"]
    tr = c["training"]
    print(f"backend all-reduce/broadcast on the cluster: {verdict[c['allreduce_ok']]}")
    print(f"training equals local: {verdict[tr['ok']]} (max rel err "
          f"{tr['max_rel_err_vs_local']:.2e})")
    print(f"{'size':>8} {'time ms':>9} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for row in c["bandwidth"]:
        print(f"{row['size_mb']:>6}MB {row['time_ms']:>9.3f} {row['algbw_GBps']:>11.2f} "
              f"{row['busbw_GBps']:>11.2f}")
    if n == 1:
        print("(one GPU: busbw is 0 by nccl-tests' definition; algbw is the cost of a call)")
    print(f"total {report['seconds']} s; JSON in {out_file}")
    out_file.write_text(json.dumps(report, indent=2))
    ok = raw["ok"] and c["ok"] and all(report[k]["ok"] for k in ("gpu_tests", "demo")
                                          if k in report)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
