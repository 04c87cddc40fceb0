"""benchmarks/ctr_job.py, the CTR model of bench_models.py, as a 2+2 Fluid-style job of real
processes: LoD id lists, a distributed lookup table, and the per-step byte counters of the
trainers' pserver clients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).resolve().parents[2] / "benchmarks" / "ctr_job.py"
LR_DIM = 100_000  # benchmarks/ctr_job.py's wide table: [LR_DIM, 1] float32

pytestmark = pytest.mark.slow


def test_ctr_job_trains_and_counts_its_bytes(held_endpoints):
    eps = ",".join(held_endpoints(2))
    base = [sys.executable, str(JOB), "--endpoints", eps, "--trainers", "2", "--steps", "2"]
    env = {**os.environ, "DASK_FLUID_JOB_SECRET": "ctr-test-secret"}
    procs = [subprocess.Popen([*base, "--role", "pserver", "--current_endpoint", ep], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for ep in eps.split(",")]
    trainers = [subprocess.Popen([*base, "--role", "trainer", "--trainer_id", str(i)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(2)]
    try:
        outs = [p.communicate(timeout=120) for p in trainers]
        for p, (_, err) in zip(trainers, outs, strict=True):
            assert p.returncode == 0, err[-3000:]
        for p in procs:
            assert p.wait(timeout=60) == 0, p.stderr.read()[-3000:]
    finally:
        for p in [*procs, *trainers]:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for out, _ in outs:
        figures = json.loads(out.strip().splitlines()[-1])
        assert figures["samples_per_s"] > 0
        # every step pushes the gradients and pulls the dense parameters and the looked-up
        # rows; the sparse wide table stays on the pservers (its rows are prefetched), so a
        # step receives less than that table alone
        assert figures["bytes_sent_per_step"] > 128 * 4 * 64 * 4  # >= 4 rows a sample
        assert 128 * 4 * 64 * 4 < figures["bytes_received_per_step"] < LR_DIM * 4
