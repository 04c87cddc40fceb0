"""NCCL2 mode in Fluid's launch style: one unchanged Fluid 1.8 script per trainer, the trainers
from PADDLE_* variables, ``gen_nccl_id`` connecting them (a TCP ring between their endpoints on
CPUs), ``CompiledProgram`` with ``build_strategy.num_trainers`` all-reducing the gradients. Real
processes and real sockets on localhost; Paddle's own check (test_dist_base.py): per step, the
mean of the trainers' losses equals the local loss of the whole batch.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_fluid as fluid
from dask_fluid import unique_name
from dask_fluid.distributed.collective.tcp_ring import EndpointRingCommunicator
from dask_fluid.distributed.collective.trainers import (
    connect_trainers,
    exchange_unique_id,
    nccl_usable,
)
from dask_fluid.distributed.errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
)
from dask_fluid.distributed.launch.script import launch_script
from dask_fluid.models import mlp

from .. import strict_cupy
from . import cluster

SCRIPT = Path(__file__).parent / "nccl2_script.py"
TIMEOUT_S = 120


class _Trainers:
    """A trainer process of the script (``dask-fluid run``) per entry of ``endpoints``,
    PADDLE_* variables each."""

    def __init__(self, tmp: Path, endpoints: list[str], *, env: dict[str, str] | None = None,
                 only: list[int] | None = None, secrets: list[str] | None = None,
                 gpus: bool = False) -> None:
        self.endpoints = endpoints
        n = len(endpoints)
        self.outs = {i: tmp / f"trainer{i}.json" for i in range(n)}
        base = {**os.environ, "CPU_NUM": "1", "FLAGS_rpc_deadline": "30000",
                "DASK_FLUID_JOB_SECRET": "s3cret", **(env or {})}
        self.procs: dict[int, subprocess.Popen] = {}
        for i in only if only is not None else range(n):
            role = {"PADDLE_TRAINER_ID": str(i), "PADDLE_TRAINERS_NUM": str(n),
                    "PADDLE_TRAINER_ENDPOINTS": ",".join(self.endpoints),
                    "PADDLE_CURRENT_ENDPOINT": self.endpoints[i]}
            if secrets is not None:
                role["DASK_FLUID_JOB_SECRET"] = secrets[i]
            if gpus:  # one GPU per trainer, as Paddle's test_dist_base.py gives them
                role.update(SCRIPT_PLACE="gpu", FLAGS_selected_gpus=str(i))
            self.procs[i] = subprocess.Popen(
                cluster.command(SCRIPT, str(self.outs[i]), via_run=True),
                env={**base, **role}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def finish(self, timeout: float = TIMEOUT_S) -> dict[int, tuple[int | None, str]]:
        """Exit code and stderr of every trainer (killed if still running at ``timeout``)."""
        give_up = time.monotonic() + timeout
        result = {}
        try:
            for i, p in self.procs.items():
                try:
                    p.wait(max(0.1, give_up - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
                result[i] = (p.poll(), p.stderr.read().decode(errors="replace")
                             if p.poll() is not None else "")
        finally:
            self.kill()
        return result

    def wait_for_step(self, i: int, step: int) -> None:
        proc = self.procs[i]
        give_up = time.monotonic() + TIMEOUT_S
        while time.monotonic() < give_up:
            line = proc.stdout.readline().decode()
            if line.startswith(f"step {step}"):
                return
            if not line and proc.poll() is not None:
                raise AssertionError(f"trainer {i} ended before step {step}: "
                                     f"{proc.stderr.read().decode()}")
        raise AssertionError(f"trainer {i} never reached step {step}")

    def losses(self, i: int) -> list[float]:
        return json.loads(self.outs[i].read_text())["losses"]

    def kill(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)
            p.stdout.close()
            p.stderr.close()


@pytest.fixture(scope="module")
def local_losses(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "local.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    subprocess.run(cluster.command(SCRIPT, str(out), via_run=True), env={**env, "CPU_NUM": "1"},
                   check=True, timeout=TIMEOUT_S, capture_output=True)
    losses = json.loads(out.read_text())["losses"]
    assert len(losses) == 10 and np.mean(losses[-3:]) < np.mean(losses[:3])  # it learns
    return losses


# -- Fluid's launch style: plain processes ------------------------------------------------------


@pytest.mark.slow
def test_two_trainer_processes_equal_local(tmp_path, local_losses, held_endpoints):
    job = _Trainers(tmp_path, held_endpoints(2))
    codes = job.finish()
    assert all(code == 0 for code, _ in codes.values()), codes
    dist = (np.array(job.losses(0)) + np.array(job.losses(1))) / 2
    np.testing.assert_allclose(dist, local_losses, atol=1e-5, rtol=0)
    assert not any("DASK_FLUID_JOB_SECRET is not set" in err for _, err in codes.values())


@pytest.mark.slow
def test_a_killed_trainer_fails_the_others_within_the_deadline_naming_it(tmp_path,
                                                                         held_endpoints):
    deadline_ms = 6000
    # 3 trainers: trainer 2 reads from the dead one, trainer 0 writes to it and also hears
    # trainer 2's abort notice; both must name the dead endpoint
    job = _Trainers(tmp_path, held_endpoints(3),
                    env={"SCRIPT_STEPS": "100000", "SCRIPT_STEP_SLEEP": "0.01",
                         "FLAGS_rpc_deadline": str(deadline_ms)})
    try:
        job.wait_for_step(0, 3)
        job.procs[1].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        for i in (0, 2):
            job.procs[i].wait(deadline_ms / 1000 + 10)
        assert time.monotonic() - killed_at < deadline_ms / 1000 + 10
        for i in (0, 2):
            assert job.procs[i].returncode != 0
            err = job.procs[i].stderr.read().decode()
            last = err.strip().splitlines()[-1]
            assert job.endpoints[1] in last, (i, err[-2000:])
            assert last.split(":")[0].endswith(("WorkerLostError", "JobAbortedError")), last
    finally:
        job.kill()


@pytest.mark.slow
def test_a_trainer_whose_peer_never_comes_fails_within_the_deadline(tmp_path, held_endpoints):
    start = time.monotonic()
    job = _Trainers(tmp_path, held_endpoints(2), only=[0], env={"FLAGS_rpc_deadline": "3000"})
    (code, err), = job.finish().values()
    assert code != 0 and time.monotonic() - start < 3 + 15
    assert "DeadlineExceededError" in err and job.endpoints[1] in err, err[-2000:]
    assert "is it running" in err


@pytest.mark.slow
def test_trainers_with_different_secrets_refuse_each_other(tmp_path, held_endpoints):
    # the first to dial is refused at once; the other may then find nobody listening and fail
    # at its deadline
    start = time.monotonic()
    job = _Trainers(tmp_path, held_endpoints(2), secrets=["right", "wrong"],
                    env={"FLAGS_rpc_deadline": "4000"})
    codes = job.finish()
    assert all(code not in (0, None) for code, _ in codes.values()), codes
    assert time.monotonic() - start < 4 + 15
    errs = "\n".join(err for _, err in codes.values())
    assert "refused the greeting" in errs and "DASK_FLUID_JOB_SECRET" in errs, errs[-2000:]


# -- dask-fluid launch --mode nccl2 -------------------------------------------------------------


@pytest.mark.slow
def test_launch_nccl2_on_dask_equals_local(tmp_path, local_losses, monkeypatch):
    monkeypatch.setenv("CPU_NUM", "1")
    out, err = io.StringIO(), io.StringIO()
    # in-process workers: each trainer is a child process of its worker anyway
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0", silence_logs=40) as lc, Client(lc) as client:
        results = launch_script(client, str(SCRIPT), [str(tmp_path / "{role}{trainer_id}.json")],
                                trainers=2, mode="nccl2", out=out, err=err)
    assert [r["returncode"] for r in results] == [0, 0]
    t0, t1 = (json.loads((tmp_path / f"trainer{i}.json").read_text())["losses"] for i in (0, 1))
    np.testing.assert_allclose((np.array(t0) + np.array(t1)) / 2, local_losses, atol=1e-5,
                               rtol=0)
    printed = out.getvalue().splitlines()
    assert "[trainer0] step 0" in printed and "[trainer1] step 9" in printed
    assert "DASK_FLUID_JOB_SECRET is not set" not in err.getvalue()  # launch sets one


# -- Paddle 1.8's own runner: test_dist_base.py's check_with_place in nccl2 mode ---------------

UNITTESTS = Path("/work/shared/reference/paddle-1.8/unittests")

_NCCL2_CASE = """
import unittest
from test_dist_base import TestDistBase


class TestDistW2V2x2Nccl2(TestDistBase):
    def _setup_config(self):
        self._sync_mode = True
        self._enforce_place = "CPU"
        self._nccl2_mode = True

    def test_dist_train(self):
        self.check_with_place("dist_word2vec.py", delta=1e-4,
                              need_envs={"DASK_FLUID_DATA_HOME": __DATA_HOME__})


if __name__ == "__main__":
    unittest.main()
"""


@pytest.mark.slow
@pytest.mark.skipif(not UNITTESTS.is_dir(), reason=f"{UNITTESTS} (Paddle 1.8's unittests) is "
                                                   "not in this checkout")
def test_paddle_18_check_with_place_nccl2_on_dist_word2vec(tmp_path):
    # Paddle's runner starts the local run and 2 trainers (--update_method nccl2, CPU_NUM=1)
    # and asserts per step local ~= mean of the trainers to 1e-4, as test_dist_word2vec.py
    pytest.importorskip("six", reason="test_dist_base.py imports six")
    from tests.compat import synthetic_data

    data_home = tmp_path / "data"
    synthetic_data.write_imikolov(data_home)
    for name in ("test_dist_base.py", "dist_word2vec.py"):
        (tmp_path / name).write_text((UNITTESTS / name).read_text())
    case = tmp_path / "test_dist_word2vec_nccl2.py"
    case.write_text(_NCCL2_CASE.replace("__DATA_HOME__", repr(str(data_home))))
    proc = subprocess.run([sys.executable, "-m", "dask_fluid.cli", "run", str(case)],
                          cwd=tmp_path, capture_output=True, timeout=TIMEOUT_S)
    err = proc.stderr.decode(errors="replace")  # the runner logs pickles to stderr
    assert proc.returncode == 0, err[-3000:]
    assert "Ran 1 test" in err and "\nOK" in err, err[-3000:]


# -- in one process: the ring between endpoints, the id exchange, the compiled program ---------


def test_endpoint_ring_reduces_identically_and_broadcasts(held_endpoints):
    eps = held_endpoints(3)
    rng = np.random.default_rng(3)
    inputs = [[rng.standard_normal(5).astype(np.float32), rng.standard_normal((2, 3)),
               np.array([i], dtype=np.int64)] for i in range(3)]

    def rank(i):
        with EndpointRingCommunicator(i, eps, 20.0, secret=b"k") as comm:
            arrays = [a.copy() for a in inputs[i][:2]]
            comm.allreduce(arrays, op="mean")
            total = [inputs[i][2].copy()]
            comm.allreduce(total)
            marker = [np.full(4, i, dtype=np.float64)]
            comm.broadcast(marker, root=1)
            comm.barrier()
            return arrays, total, marker

    results = cluster.in_threads(3, rank)
    for k in range(2):
        expected = np.mean([inp[k].astype(np.float64) for inp in inputs], axis=0)
        np.testing.assert_allclose(results[0][0][k], expected, rtol=1e-6)
        assert all(r[0][k].tobytes() == results[0][0][k].tobytes() for r in results)
    assert all(r[1][0].tolist() == [3] and r[2][0].tolist() == [1.0] * 4 for r in results)
    with EndpointRingCommunicator(0, eps[:1], 1.0) as alone:  # one trainer: nothing to do
        a = [np.ones(2)]
        alone.allreduce(a, op="mean")
        assert a[0].tolist() == [1.0, 1.0]


def test_an_aborting_trainer_tells_every_other_why(held_endpoints):
    eps = held_endpoints(3)

    def rank(i):
        with EndpointRingCommunicator(i, eps, 20.0, secret=b"k") as comm:
            if i == 1:
                time.sleep(0.3)
                comm.abort("trainer 1 gave up: its reader failed")
                return None
            start = time.monotonic()
            with pytest.raises(JobAbortedError, match="trainer 1 gave up: its reader failed"):
                comm.allreduce([np.ones(3)], step=7)
            return time.monotonic() - start

    waited = cluster.in_threads(3, rank)
    assert all(w < 10 for w in (waited[0], waited[2]))  # the notice, not the deadline


def test_unique_id_served_by_trainer_0(held_endpoints):
    eps = held_endpoints(3)
    uid = tuple(range(-64, 64))  # CuPy 13's form: signed chars; the raw bytes travel
    raw = bytes(v & 0xFF for v in uid)
    got = cluster.in_threads(3, lambda i: exchange_unique_id(i, eps, 20.0, secret=b"k",
                                                      make_id=lambda: uid, nccl_version=23203))
    assert got == [(raw, 23203)] * 3
    with pytest.raises(DeadlineExceededError, match=f"trainer {eps[0]} did not accept"):
        exchange_unique_id(1, eps, 0.5, secret=b"k", make_id=lambda: uid)


def _sgd_net(seed: int = 3):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        pred = fluid.layers.fc(input=fluid.layers.fc(input=x, size=8, act="tanh"), size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main, startup, loss


def _batch(step: int, rows: int = 16):
    rng = np.random.RandomState(step)
    x = rng.normal(size=(rows, 6)).astype("float32")
    return x, x[:, :1] * 2 - x[:, 1:2]


def _compiled(main, loss, n, i, scale=None):
    build = fluid.BuildStrategy()
    build.num_trainers, build.trainer_id = n, i
    if scale is not None:
        build.gradient_scale_strategy = scale
    return fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                          build_strategy=build)


def _train_local(lr_scale: float = 1.0, steps: int = 4):
    main, startup, loss = _sgd_net()
    if lr_scale != 1.0:  # the sum of 2 trainers' mean gradients is twice the global mean
        for op in startup.global_block().ops:
            if op.type == "fill_constant" and op.output("Out")[0].startswith("learning_rate"):
                op.attrs["value"] *= lr_scale
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    for s in range(steps):
        x, y = _batch(s)
        exe.run(main, feed={"x": x, "y": y}, scope=scope)
    return {p.name: np.array(scope.get(p.name)) for p in main.all_parameters()}


def _train_two_in_threads(eps: list[str], scale=None, steps: int = 4):
    nets = [_sgd_net() for _ in range(2)]
    for i, (main, startup, _) in enumerate(nets):
        config = fluid.DistributeTranspilerConfig()
        config.mode = "nccl2"
        fluid.DistributeTranspiler(config=config).transpile(
            i, program=main, startup_program=startup, trainers=",".join(eps),
            current_endpoint=eps[i])

    def trainer(i):
        main, startup, loss = nets[i]
        scope, exe = fluid.Scope(), fluid.Executor()
        exe.run(startup, scope=scope)
        binary = _compiled(main, loss, 2, i, scale)
        for s in range(steps):
            x, y = _batch(s)
            exe.run(binary, feed={"x": x[i * 8:(i + 1) * 8], "y": y[i * 8:(i + 1) * 8]},
                    fetch_list=[loss], scope=scope)
        params = {p.name: np.array(scope.get(p.name)) for p in main.all_parameters()}
        assert "fused_allreduce" in [op.type for op in binary._to_run.global_block().ops]
        if i == 0:  # evaluating on one trainer alone needs no collective (it would hang)
            test = fluid.CompiledProgram(main.clone(for_test=True)).with_data_parallel(
                build_strategy=binary._build_strategy, share_vars_from=binary)
            exe.run(test, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        exe.close()  # closes the communicator
        assert scope.get("NCCLID").closed
        with pytest.raises(RuntimeError, match="communicator in NCCLID was closed"):
            exe.run(binary, feed={"x": x[:8], "y": y[:8]}, scope=scope)
        return params

    return cluster.in_threads(2, trainer)


@pytest.mark.parametrize("scale", [None, "One"])
def test_compiled_program_of_two_trainers_equals_local(scale, monkeypatch, held_endpoints):
    monkeypatch.setenv("FLAGS_rpc_deadline", "10000")  # a bug fails, not hangs
    strategy = None if scale is None else fluid.BuildStrategy.GradientScaleStrategy.One
    local = _train_local(2.0 if scale == "One" else 1.0)
    for params in _train_two_in_threads(held_endpoints(2), strategy):
        for name, value in local.items():
            np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-6)


def test_compiled_program_without_a_communicator_says_how_to_get_one():
    main, startup, loss = _sgd_net()
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)  # not transpiled: no gen_nccl_id
    x, y = _batch(0)
    with pytest.raises(RuntimeError, match=r"no NCCL2 communicator in the scope \(variable "
                                           r"NCCLID\).*config.mode = 'nccl2'.*exe.run\(startup"):
        exe.run(_compiled(main, loss, 2, 0), feed={"x": x, "y": y}, scope=scope)


def test_build_strategy_must_agree_with_the_transpiled_trainers(held_endpoints):
    main, startup, loss = _sgd_net()
    [ep] = held_endpoints(1)
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    fluid.DistributeTranspiler(config=config).transpile(
        0, program=main, startup_program=startup, trainers=ep, current_endpoint=ep)
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    x, y = _batch(0)
    with pytest.raises(ValueError, match="says trainer 0 of 2, but the startup program "
                                         "connected trainer 0 of 1"):
        exe.run(_compiled(main, loss, 2, 0), feed={"x": x, "y": y}, scope=scope)
    with pytest.raises(ValueError, match="trainer_id=2 is out of range"):
        exe.run(_compiled(main, loss, 2, 2), feed={"x": x, "y": y}, scope=scope)


# -- on GPUs ------------------------------------------------------------------------------------


@pytest.fixture(params=["13.6.0", "14.2.0"])
def fake_cupy(monkeypatch, request):
    """tests/distributed/fake_cupy.py, imitating CuPy 13 and 14: NCCL as threads sharing memory."""
    from tests.distributed import fake_cupy as fake

    for name, module in fake.modules(request.param).items():
        monkeypatch.setitem(sys.modules, name, module)
    yield fake
    fake.check_released()


@pytest.mark.parametrize("through", ["endpoint", "scheduler"])
def test_gpu_trainers_get_nccl_with_the_id_from_trainer_0_or_the_scheduler(fake_cupy, through,
                                                                          held_endpoints):
    eps = held_endpoints(2)
    with contextlib.ExitStack() as stack:
        scheduler = None
        if through == "scheduler":  # dask-fluid launch: DASK_SCHEDULER_ADDRESS
            lc = stack.enter_context(LocalCluster(n_workers=0, processes=False,
                                                  dashboard_address=":0", silence_logs=40))
            scheduler = lc.scheduler_address

        def trainer(i):
            handle = connect_trainers(i, eps, 20.0, secret=b"k", on_gpu=True,
                                      scheduler=scheduler)
            try:
                arrays = [np.full(3, i + 1, dtype=np.float32)]
                handle.comm.allreduce(arrays, op="mean")
                return handle.backend, arrays[0].tolist()
            finally:
                handle.close()

        assert cluster.in_threads(2, trainer) == [("nccl", [1.5] * 3)] * 2
        if scheduler is not None:  # trainer 0 deleted the session once every trainer joined
            assert lc.scheduler.__dict__.get("_dask_fluid_nccl", {}) == {}



def _gpus() -> int:
    if not nccl_usable():
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 2, reason="needs 2 CUDA GPUs with CuPy and NCCL (one NCCL rank "
                                        "per GPU); this machine has "
                                        f"{_gpus()} usable")
def test_two_gpu_trainer_processes_use_nccl_and_equal_local(tmp_path, local_losses,
                                                            held_endpoints):
    job = _Trainers(tmp_path, held_endpoints(2), gpus=True)
    codes = job.finish()
    assert all(code == 0 for code, _ in codes.values()), codes
    dist = (np.array(job.losses(0)) + np.array(job.losses(1))) / 2
    np.testing.assert_allclose(dist, local_losses, atol=1e-4, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 1, reason="needs a CUDA GPU with CuPy and NCCL; this machine has "
                                        "none usable")
def test_one_gpu_trainer_process_equals_local_on_cpu(tmp_path, held_endpoints):
    # the launch style's GPU path on a one-GPU machine: CUDAPlace(FLAGS_selected_gpus) in a
    # trainer process of one, against the script's local run on CPU with the same batch
    out = tmp_path / "local.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    subprocess.run(cluster.command(SCRIPT, str(out), via_run=True),
                   env={**env, "CPU_NUM": "1", "PADDLE_TRAINERS_NUM": "1"}, check=True,
                   timeout=TIMEOUT_S, capture_output=True)
    job = _Trainers(tmp_path, held_endpoints(1), gpus=True)
    codes = job.finish()
    assert all(code == 0 for code, _ in codes.values()), codes
    np.testing.assert_allclose(job.losses(0), json.loads(out.read_text())["losses"], atol=1e-4,
                               rtol=0)


def test_errors_of_the_ring_name_the_endpoint(held_endpoints):
    # a DistributedTrainingError raised by a rank carries the peer's endpoint as its endpoint
    eps = held_endpoints(2)
    with pytest.raises(DistributedTrainingError) as info:
        EndpointRingCommunicator(0, eps, 0.5, secret=b"k")
    assert info.value.endpoint == eps[1]


def test_gpu_trainers_without_nccl_all_reduce_through_host_memory_as_cpu(monkeypatch, request,
                                                                        held_endpoints):
    # two nccl2 trainers on CUDAPlace in threads, on the strict CPU CuPy (it has no NCCL):
    # device gradients over the TCP ring through host memory, the same steps as on CPUs
    monkeypatch.setenv("DASK_FLUID_JOB_SECRET", "s3cret")
    monkeypatch.setenv("CPU_NUM", "1")
    strict_cupy.device_module("strict", request)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 5)).astype(np.float32), rng.integers(0, 3, (8, 1)))
               for _ in range(3)]

    def job(place):
        eps = held_endpoints(2)

        def trainer(i: int):
            with unique_name.guard():
                spec = mlp(hidden=(8,), n_features=5, n_classes=3, seed=3)
            config = fluid.DistributeTranspilerConfig()
            config.mode = "nccl2"
            fluid.DistributeTranspiler(config=config).transpile(
                i, program=spec.main, startup_program=spec.startup, trainers=",".join(eps),
                current_endpoint=eps[i])
            exe, scope = fluid.Executor(place), fluid.Scope()
            exe.run(spec.startup, scope=scope)
            strategy = fluid.BuildStrategy()
            strategy.num_trainers, strategy.trainer_id = 2, i
            compiled = fluid.CompiledProgram(spec.main).with_data_parallel(
                loss_name=spec.loss.name, build_strategy=strategy)
            losses = [float(exe.run(compiled, feed={"x": x[4 * i:4 * i + 4],
                                                    "y": y[4 * i:4 * i + 4]},
                                    fetch_list=[spec.loss], scope=scope)[0][0])
                      for x, y in batches]
            weight = scope.get("fc_0.w_0")
            return losses, weight.get() if hasattr(weight, "get") else weight

        return cluster.in_threads(2, trainer)

    on_gpu, on_cpu = job(fluid.CUDAPlace(0)), job(fluid.CPUPlace())
    for (gpu_losses, gpu_w), (cpu_losses, cpu_w) in zip(on_gpu, on_cpu, strict=True):
        np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-6)
        np.testing.assert_allclose(gpu_w, cpu_w, rtol=1e-6)
    np.testing.assert_array_equal(on_gpu[0][1], on_gpu[1][1])  # one model on both trainers
