"""A Fluid pserver-mode trainer on ``CUDAPlace(0)`` (as Paddle's dist tests run them with
``--use_cuda``), its pserver on the CPU: the gradients it sends are copied to the host, the
parameters it receives are put on its device, and it trains as local training does. On the
strict CPU CuPy everywhere and on the real CuPy with a GPU (``device_xp``)."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.distributed.pserver.client import DirectClient
from dask_fluid.distributed.pserver.ops import CLIENT_KEY
from dask_fluid.executor import Executor, Scope

from ..transpiler.models import reference_mlp
from .test_hostile_clients import FLAGS, SECRET, _local, _pserver


def test_a_device_trainer_of_a_cpu_pserver_trains_as_local(device_xp, held_port):
    ep = f"127.0.0.1:{held_port()}"
    done: dict = {}
    server = _pserver(ep, done)
    main, startup, loss = reference_mlp()
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, startup_program=startup, pservers=ep, trainers=1)
    exe, scope = Executor(fluid.CUDAPlace(0)), Scope()
    exe.host_context[CLIENT_KEY] = DirectClient(0, FLAGS, True, secret=SECRET)
    exe.run(startup, scope=scope)  # its recv ops pull the pserver's initial parameters
    rng = np.random.default_rng(0)
    losses = []
    prog = t.get_trainer_program()
    for _ in range(4):
        feed = {"x": rng.normal(size=(16, 64)).astype(np.float32),
                "y": rng.integers(0, 10, (16, 1))}
        losses.append(float(exe.run(prog, feed=feed, fetch_list=[loss], scope=scope)[0][0]))
        assert isinstance(scope.get("fc_0.w_0"), device_xp.ndarray)
    exe.close()
    server.join(30)
    assert "error" not in done, done.get("error")
    np.testing.assert_allclose(losses, _local(), rtol=1e-5)


def test_a_pserver_program_on_a_device_executor_is_refused_naming_the_fix(device_xp, held_port):
    ep = f"127.0.0.1:{held_port()}"
    main, startup, _ = reference_mlp()
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, startup_program=startup, pservers=ep, trainers=1)
    prog = t.get_pserver_program(ep)
    exe, scope = Executor(fluid.CUDAPlace(0)), Scope()
    exe.run(t.get_startup_program(ep, prog), scope=scope)
    with pytest.raises(fluid.ExecutionError, match=r"NotImplementedError: a pserver program on "
                                                   r"a CUDAPlace executor is not implemented: "
                                                   r".*CPUPlace"):
        exe.run(prog, scope=scope)
