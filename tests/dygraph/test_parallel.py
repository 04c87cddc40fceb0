"""``fluid.dygraph.parallel``: prepare_context, DataParallel, ParallelEnv, ParallelStrategy.

Decision: sync distributed training reproduces local training. Two trainer processes on CPU,
each on its half of every batch through ``scale_loss``/``apply_collective_grads``, end with the
parameters of one process trained on the whole batches; and Paddle 1.8's own dygraph runner
(``TestParallelDyGraphRunnerBase`` of test_dist_base.py) gives the local losses as the mean of
the two nccl2 trainers' losses.
"""

from __future__ import annotations

import os
import pickle
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import dygraph
from dask_fluid.distributed.collective.trainers import TrainerComm
from dask_fluid.distributed.errors import DeadlineExceededError
from dask_fluid.dygraph import parallel
from dask_fluid.dygraph.parallel import (
    DataParallel,
    Env,
    ParallelEnv,
    ParallelStrategy,
    prepare_context,
)
from dask_fluid.ops.selected_rows import SelectedRows

from ..launch.cluster import held_ports

ROOT = Path(__file__).resolve().parents[2]
UNITTESTS = ROOT.parent / "shared/reference/paddle-1.8/unittests"
MODEL = Path(__file__).with_name("parallel_dygraph_mlp.py")
TIMEOUT_S = 60
PADDLE_VARS = ("PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT",
               "PADDLE_TRAINER_ENDPOINTS", "FLAGS_selected_gpus")


@pytest.fixture
def held_endpoints() -> Iterator[Callable[[int], list[str]]]:
    """``held_endpoints(n)``: ``n`` endpoints on 127.0.0.1 whose ports stay held until the test
    ends, so that no test running beside (pytest-xdist) takes one before our trainers listen
    on it (tests/launch/conftest.py has the same fixture for the launch tests)."""
    with ExitStack() as stack:
        yield lambda n: [f"127.0.0.1:{p}" for p in stack.enter_context(held_ports(n))]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PADDLE_VARS}
    return {**env, "CPU_NUM": "1", **extra}


def _run_all(procs: list[subprocess.Popen], timeout: float = TIMEOUT_S
             ) -> list[tuple[int | None, bytes, str]]:
    """Exit code, stdout and stderr of every process; every one is killed at the end."""
    give_up = time.monotonic() + timeout
    out = []
    try:
        for p in procs:
            try:
                stdout, stderr = p.communicate(timeout=max(0.1, give_up - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, stderr = p.communicate(timeout=10)
            out.append((p.returncode, stdout, stderr.decode(errors="replace")))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    return out


class Dense(dygraph.Layer):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = self.create_parameter([n_in, n_out])
        self.bias = self.create_parameter([n_out], is_bias=True)

    def forward(self, x):
        return fluid.layers.elementwise_add(fluid.layers.matmul(x, self.weight), self.bias)


class Net(dygraph.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = Dense(4, 8)
        self.fc2 = Dense(8, 3)

    def forward(self, x):
        return self.fc2(fluid.layers.relu(self.fc1(x)))


# -- 1. two real trainer processes against one local process --------------------------------------

TRAINER = """
import sys
import numpy as np
import dask_fluid as fluid
from dask_fluid import dygraph
from dask_fluid.dygraph.parallel import DataParallel, ParallelEnv, prepare_context

out, steps, rows = sys.argv[1], int(sys.argv[2]), 16
sparse = len(sys.argv) > 3 and sys.argv[3] == "sparse"  # a sparse embedding in front, SGD
# declarative: the forward translated, with a program loop and a program if (one run_program
# op a step, whose parameter gradients DataParallel sums as any others)
translated = len(sys.argv) > 3 and sys.argv[3] == "declarative"
env = ParallelEnv()
n, rank = env.nranks, env.local_rank


class Dense(dygraph.Layer):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = self.create_parameter([n_in, n_out])
        self.bias = self.create_parameter([n_out], is_bias=True)

    def forward(self, x):
        return fluid.layers.elementwise_add(fluid.layers.matmul(x, self.weight), self.bias)


class MLP(dygraph.Layer):
    def __init__(self):
        super().__init__()
        self.emb = dygraph.Embedding([20, 4], is_sparse=True) if sparse else None
        self.fc1 = Dense(8 if sparse else 4, 16)
        self.fc2 = Dense(16, 3)

    def forward(self, x):
        if self.emb is not None:  # each row's id picks an embedding row (a sparse gradient)
            # lookup_table_v2 (1.8's dygraph Embedding): ids [N] give rows [N, 4]
            ids = dygraph.to_variable((x[:, 0].numpy() * 20).astype("int64") % 20)
            x = fluid.layers.concat([x, self.emb(ids)], axis=1)
        return self.fc2(fluid.layers.relu(self.fc1(x)))


class Translated(MLP):
    @dygraph.declarative
    def forward(self, x):
        h = fluid.layers.relu(self.fc1(x))
        i = fluid.layers.fill_constant([1], "int64", 0)
        while i < 2:
            h = fluid.layers.tanh(h) * 1.5
            i = i + 1
        if fluid.layers.reduce_max(self.fc2.weight) > 0:  # the same on every trainer
            h = h * 0.5
        return self.fc2(h)


with dygraph.guard(fluid.CPUPlace()):
    fluid.default_main_program().random_seed = 5
    fluid.default_startup_program().random_seed = 5
    model = Translated() if translated else MLP()
    keys = list(model.state_dict())
    opt = (fluid.optimizer.SGD(0.5, parameter_list=model.parameters()) if sparse else
           fluid.optimizer.Momentum(0.2, 0.9, parameter_list=model.parameters()))
    strategy = prepare_context()
    if strategy is not None:
        model = DataParallel(model, strategy)
        assert list(model.state_dict()) == keys, (list(model.state_dict()), keys)
    losses = []
    for step in range(steps):
        rng = np.random.RandomState(100 + step)  # the same global batch on every trainer
        x = rng.rand(rows, 4).astype("float32")
        y = ((x.sum(1) * 3).astype("int64") % 3).reshape(-1, 1)
        lo, hi = rank * rows // n, (rank + 1) * rows // n
        logits = model(dygraph.to_variable(x[lo:hi]))
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            logits, dygraph.to_variable(y[lo:hi])))
        losses.append(float(loss))
        if strategy is not None:
            loss = model.scale_loss(loss)
        loss.backward()
        if strategy is not None:
            model.apply_collective_grads()
        opt.minimize(loss)
        model.clear_gradients()
    np.savez(out, losses=np.array(losses), **{k: v.numpy() for k, v in model.state_dict().items()})
"""


@pytest.mark.slow
@pytest.mark.parametrize("model", ["dense", "sparse", "declarative"])
def test_two_trainer_processes_reproduce_local_training(tmp_path, model, held_endpoints):
    # sparse: an Embedding(is_sparse=True) whose row gradients are summed over the trainers;
    # declarative: the forward a translated program (a while op and a conditional block)
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    steps = 6
    endpoints = held_endpoints(2)
    secret = secrets.token_hex(16)
    procs = []
    try:
        procs.append(subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "local.npz"), str(steps), model],
            env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        for i in range(2):  # what Paddle's launcher sets
            role = {"PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ID": str(i),
                    "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
                    "PADDLE_CURRENT_ENDPOINT": endpoints[i], "FLAGS_selected_gpus": "0",
                    "DASK_FLUID_JOB_SECRET": secret, "FLAGS_rpc_deadline": "30000"}
            procs.append(subprocess.Popen(
                [sys.executable, str(script), str(tmp_path / f"trainer{i}.npz"), str(steps),
                 model],
                env=_clean_env(**role), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    finally:
        results = _run_all(procs)
    for code, _, err in results:
        assert code == 0, err[-3000:]
    local = np.load(tmp_path / "local.npz")
    t0, t1 = np.load(tmp_path / "trainer0.npz"), np.load(tmp_path / "trainer1.npz")
    names = sorted(k for k in local.files if k != "losses")
    assert names == sorted(k for k in t0.files if k != "losses")  # no DataParallel prefix
    assert names and (model != "sparse" or "emb.weight" in names)
    for name in names:
        np.testing.assert_array_equal(t0[name], t1[name])  # one model on both trainers
        np.testing.assert_allclose(t0[name], local[name], rtol=1e-5, atol=1e-6)
    # each trainer's loss is the mean over its half: their mean is the local loss
    np.testing.assert_allclose((t0["losses"] + t1["losses"]) / 2, local["losses"], rtol=1e-5)
    assert not np.allclose(local["losses"][0], local["losses"][-1])  # it did train


# -- 2. Paddle 1.8's own dygraph runner -----------------------------------------------------------

STRICT_CUPY_SITE = """
import sys
sys.path.insert(0, {root!r})
from tests import strict_cupy
sys.modules.update(strict_cupy.modules())
"""


@pytest.mark.slow
@pytest.mark.skipif(not (UNITTESTS / "test_dist_base.py").exists(),
                    reason=f"{UNITTESTS} (Paddle 1.8's unittests) is not beside this checkout")
def test_paddle_18_dygraph_runner_nccl2_matches_local(tmp_path, held_endpoints):
    pytest.importorskip("six", reason="test_dist_base.py imports six")
    for src in (UNITTESTS / "test_dist_base.py", MODEL):
        shutil.copy(src, tmp_path / src.name)
    # the runner trains on fluid.CUDAPlace(FLAGS_selected_gpus): as the static models'
    # device tests do on a CPU-only machine, tests/strict_cupy.py stands in for CuPy in every
    # process (it has no NCCL: the trainers all-reduce through host memory over the TCP ring)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STRICT_CUPY_SITE.format(root=str(ROOT)))
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    base = _clean_env(PYTHONPATH=pythonpath, FLAGS_rpc_deadline="30000",
                      DASK_FLUID_JOB_SECRET=secrets.token_hex(16))
    run = [sys.executable, "-u", "-m", "dask_fluid.cli", "run", MODEL.name, "--role", "trainer",
           "--lr", "0.001"]
    endpoints = held_endpoints(2)
    procs = []
    try:  # TestDistBase._run_local and _get_nccl2_trainer_cmd with use_cuda
        procs.append(subprocess.Popen(
            [*run, "--use_cuda"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**base, "CUDA_VISIBLE_DEVICES": "0", "PADDLE_TRAINERS_NUM": "1",
                 "PADDLE_TRAINER_ID": "0"}))
        for i in range(2):
            procs.append(subprocess.Popen(
                [*run, "--endpoints", ",".join(endpoints), "--trainer_id", str(i),
                 "--current_endpoint", endpoints[i], "--update_method", "nccl2", "--use_cuda"],
                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env={**base, "CUDA_VISIBLE_DEVICES": str(i % 2), "PADDLE_TRAINERS_NUM": "2",
                     "PADDLE_TRAINER_ID": str(i), "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
                     "PADDLE_CURRENT_ENDPOINT": endpoints[i]}))
    finally:
        results = _run_all(procs)
    for code, _, err in results:
        assert code == 0, err[-3000:]
    local, tr0, tr1 = (pickle.loads(out) for _, out, _ in results)
    assert len(local) == len(tr0) == len(tr1) == 5  # the runner's RUN_STEP
    local = np.array(local, dtype=np.float64).ravel()
    mean = (np.array(tr0, dtype=np.float64).ravel() + np.array(tr1, dtype=np.float64).ravel()) / 2
    np.testing.assert_allclose(mean, local, rtol=1e-5)  # Paddle: delta=1e-5 per step
    assert not np.allclose(local[0], local[-1])


# -- 3. errors ----------------------------------------------------------------------------------

def test_data_parallel_wraps_layers_only():
    with dygraph.guard(fluid.CPUPlace()):
        with pytest.raises(TypeError, match="Layer"):
            DataParallel(lambda x: x, ParallelStrategy())
        with pytest.raises(TypeError, match="ParallelStrategy"):
            DataParallel(Net(), {"nranks": 2})


def test_data_parallel_before_prepare_context_fails(held_endpoints):
    strategy = ParallelStrategy()
    strategy.nranks, strategy.local_rank = 2, 0
    strategy.trainer_endpoints = held_endpoints(2)
    with dygraph.guard(fluid.CPUPlace()):
        with pytest.raises(RuntimeError, match="prepare_context"):
            DataParallel(Net(), strategy)


def test_prepare_context_checks_its_strategy(held_endpoints):
    strategy = ParallelStrategy()
    strategy.nranks, strategy.local_rank = 2, 0
    strategy.trainer_endpoints = held_endpoints(2)
    with pytest.raises(RuntimeError, match="dygraph"):
        prepare_context(strategy)  # outside a guard
    with dygraph.guard(fluid.CPUPlace()):
        strategy.trainer_endpoints = strategy.trainer_endpoints[:1]
        with pytest.raises(ValueError, match="trainer_endpoints"):
            prepare_context(strategy)
        strategy.trainer_endpoints, strategy.local_rank = held_endpoints(2), 2
        with pytest.raises(ValueError, match="out of range"):
            prepare_context(strategy)
        strategy.local_rank, strategy.current_endpoint = 0, "127.0.0.1:1"
        with pytest.raises(ValueError, match="current_endpoint"):
            prepare_context(strategy)
        with pytest.raises(TypeError, match="ParallelStrategy"):
            prepare_context("2 trainers")


@pytest.mark.slow
def test_a_peer_that_never_comes_up_fails_within_the_deadline(monkeypatch, held_endpoints):
    monkeypatch.setenv("FLAGS_rpc_deadline", "1500")
    monkeypatch.setenv("DASK_FLUID_JOB_SECRET", secrets.token_hex(8))
    strategy = ParallelStrategy()
    strategy.nranks, strategy.local_rank = 2, 0
    strategy.trainer_endpoints = held_endpoints(2)  # nobody ever listens on the second
    strategy.current_endpoint = strategy.trainer_endpoints[0]
    start = time.monotonic()
    with dygraph.guard(fluid.CPUPlace()), pytest.raises(DeadlineExceededError) as info:
        prepare_context(strategy)
    assert time.monotonic() - start < 1.5 + 10
    assert strategy.trainer_endpoints[1] in str(info.value)
    assert parallel._parallel_context() is None  # nothing half set up stays behind


# -- the pieces, in one process -------------------------------------------------------------------

def test_parallel_env_reads_the_launcher_variables(monkeypatch):
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "4")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "3")
    monkeypatch.setenv("PADDLE_CURRENT_ENDPOINT", "10.0.0.4:6170")
    monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", "a:1,b:2,c:3,10.0.0.4:6170")
    monkeypatch.setenv("FLAGS_selected_gpus", "2,3")
    env = ParallelEnv()
    assert (env.nranks, env.local_rank, env.dev_id) == (4, 3, 2)
    assert env.current_endpoint == "10.0.0.4:6170"
    assert env.trainer_endpoints == ["a:1", "b:2", "c:3", "10.0.0.4:6170"]
    assert Env is ParallelEnv
    monkeypatch.setenv("PADDLE_TRAINER_ID", "one")
    with pytest.raises(ValueError, match="PADDLE_TRAINER_ID"):
        ParallelEnv()


def test_defaults_without_a_launcher(monkeypatch):
    for var in PADDLE_VARS:
        monkeypatch.delenv(var, raising=False)
    env = ParallelEnv()
    assert (env.nranks, env.local_rank, env.dev_id, env.current_endpoint) == (1, 0, 0, "")
    s = ParallelStrategy()
    assert (s.nranks, s.local_rank, s.trainer_endpoints, s.current_endpoint) == (1, 0, [], "")
    with dygraph.guard(fluid.CPUPlace()):
        assert prepare_context() is None  # one trainer: nothing to set up, as Fluid 1.8


def test_one_trainer_data_parallel_is_the_model():
    with dygraph.guard(fluid.CPUPlace()):
        fluid.default_main_program().random_seed = 1
        net = Net()
        model = DataParallel(net, ParallelStrategy())
        x = dygraph.to_variable(np.random.RandomState(0).rand(5, 4).astype("float32"))
        np.testing.assert_array_equal(model(x).numpy(), net(x).numpy())
        assert [p.name for p in model.parameters()] == [p.name for p in net.parameters()]
        assert list(model.state_dict()) == list(net.state_dict()) == [
            "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
        loss = fluid.layers.mean(model(x))
        assert model.scale_loss(loss) is loss
        loss.backward()
        before = net.fc1.weight.gradient()
        model.apply_collective_grads()  # one trainer: nothing to do
        np.testing.assert_array_equal(net.fc1.weight.gradient(), before)
        state = {k: v.numpy() * 0 + 1 for k, v in model.state_dict().items()}
        model.set_dict(state)
        np.testing.assert_array_equal(net.fc2.bias.numpy(), np.ones(3, "float32"))


class _TwiceComm:
    """A communicator of 2 ranks whose other rank holds the same arrays: sum = 2x."""

    rank, nranks = 0, 2

    def __init__(self) -> None:
        self.calls: list[list[np.ndarray]] = []

    def allreduce(self, arrays, *, op="sum", step=None):
        assert op == "sum"
        self.calls.append(list(arrays))
        for a in arrays:
            a *= 2

    def close(self) -> None:
        pass


def test_apply_collective_grads_sums_dense_and_sparse_gradients(monkeypatch, held_endpoints):
    eps = held_endpoints(2)
    comm = _TwiceComm()
    monkeypatch.setattr(parallel, "_context", TrainerComm(comm, "ring", 0, 2, eps))
    strategy = ParallelStrategy()
    strategy.nranks, strategy.trainer_endpoints, strategy.current_endpoint = 2, eps, eps[0]
    with dygraph.guard(fluid.CPUPlace()):
        net = Net()
        model = DataParallel(net, strategy)
        x = dygraph.to_variable(np.ones((2, 4), "float32"))
        loss = fluid.layers.mean(model(x))
        scaled = model.scale_loss(loss)
        np.testing.assert_allclose(float(scaled), float(loss) / 2, rtol=1e-6)
        scaled.backward()
        dense = {p.name: p.gradient() for p in net.parameters()}
        rows = SelectedRows(np.array([0, 2]), np.ones((2, 3), "float32"), 8)
        net.fc2.weight._grad = rows  # a sparse gradient, summed dense
        shared = net.fc1.bias._grad
        kept = shared.copy()
        model.apply_collective_grads()
        assert len(comm.calls) == 1 and len(comm.calls[0]) == 4  # one fused group
        np.testing.assert_array_equal(shared, kept)  # the traced values are not written
        for p in (net.fc1.weight, net.fc1.bias, net.fc2.bias):
            np.testing.assert_allclose(p.gradient(), 2 * dense[p.name])
        expected = np.zeros((8, 3), "float32")
        expected[[0, 2]] = 2
        np.testing.assert_array_equal(net.fc2.weight.gradient(), expected)
        net.fc1.weight.trainable = False  # frozen parameters are not reduced
        net.fc1.bias.clear_gradient()  # nor those without a gradient
        model.apply_collective_grads()
        assert len(comm.calls[1]) == 2


def test_gradients_are_grouped_by_dtype_and_size(monkeypatch):
    with dygraph.guard(fluid.CPUPlace()):
        net = Net()
        params = net.parameters()
        for p in params:
            p._grad = np.zeros(p.shape, "float32")
        params[2]._grad = params[2]._grad.astype("float64")
        groups = list(parallel._groups(params, 1 << 30))
        assert [len(g) for g in groups] == [2, 1, 1]
        groups = list(parallel._groups(params, 1))  # every group full at once
        assert [len(g) for g in groups] == [1, 1, 1, 1]


def test_prepare_context_connects_once_per_process(monkeypatch, held_endpoints):
    eps = held_endpoints(2)
    monkeypatch.setattr(parallel, "_context", TrainerComm(_TwiceComm(), "ring", 0, 2, eps))
    strategy = ParallelStrategy()
    strategy.nranks, strategy.trainer_endpoints = 2, eps
    with dygraph.guard(fluid.CPUPlace()):
        assert prepare_context(strategy) is strategy  # the same job again: the same comm
        strategy.trainer_endpoints = held_endpoints(2)
        with pytest.raises(RuntimeError, match="one data-parallel job"):
            prepare_context(strategy)


# -- 3. the same script on Dask workers: dask-fluid launch --mode nccl2 ----------------------------


@pytest.mark.slow
def test_launch_nccl2_runs_a_dygraph_data_parallel_script_on_dask(tmp_path):
    from distributed import Client, LocalCluster

    from dask_fluid.distributed.launch.script import launch_script

    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    steps = 4
    local = subprocess.run([sys.executable, str(script), str(tmp_path / "local.npz"), str(steps)],
                           env=_clean_env(), capture_output=True, timeout=TIMEOUT_S)
    assert local.returncode == 0, local.stderr.decode()[-3000:]
    # in-process workers: each trainer is a child process of its worker anyway
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0", silence_logs=40) as lc, Client(lc) as client:
        results = launch_script(client, str(script),
                                [str(tmp_path / "{role}{trainer_id}.npz"), str(steps)],
                                trainers=2, mode="nccl2")
    assert [r["returncode"] for r in results] == [0, 0]
    ref = np.load(tmp_path / "local.npz")
    t0, t1 = np.load(tmp_path / "trainer0.npz"), np.load(tmp_path / "trainer1.npz")
    np.testing.assert_allclose((t0["losses"] + t1["losses"]) / 2, ref["losses"], rtol=1e-5)
    for name in (k for k in ref.files if k != "losses"):
        np.testing.assert_allclose(t0[name], ref[name], rtol=1e-5, atol=1e-6)
