"""Start a Fluid-style job as plain processes on localhost: 2 pservers + 2 trainers of one
script, each with the PADDLE_* variables of its role (real processes, real sockets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dask_fluid as fluid
from dask_fluid.distributed.comm.ports import held_ports
from dask_fluid.transpiler import DistributeTranspiler, DistributeTranspilerConfig

HERE = Path(__file__).parent
SCRIPT = HERE / "fluid_script.py"


def dask_fluid_copy(tmp: Path) -> Path:
    """The script with ``import dask_fluid as fluid`` in place of the paddle import."""
    path = tmp / "dask_fluid_script.py"
    path.write_text(SCRIPT.read_text().replace("import paddle.fluid as fluid",
                                               "import dask_fluid as fluid"))
    return path


def command(script: Path, *args: str, via_run: bool) -> list[str]:
    if via_run:  # `dask-fluid run script.py` in place of `python script.py`
        return [sys.executable, "-m", "dask_fluid.cli", "run", str(script), *args]
    return [sys.executable, str(script), *args]


@contextmanager
def port_nobody_serves() -> Iterator[int]:
    """A port held for the ``with`` block (:func:`.held_ports`) that nobody serves:
    connecting to it is refused, and a pserver under test may still listen on it."""
    with held_ports(1) as [port]:
        yield port


@dataclass
class Job:
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    outs: dict[str, Path] = field(default_factory=dict)
    endpoints: list[str] = field(default_factory=list)
    #: the endpoints' ports, held (:func:`held_ports`) until :meth:`kill_all`
    ports: ExitStack = field(default_factory=ExitStack)

    def wait(self, timeout: float) -> dict[str, int]:
        give_up = time.monotonic() + timeout
        codes = {}
        for name, p in self.procs.items():
            try:
                codes[name] = p.wait(max(0.1, give_up - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[name] = None
        return codes

    def stderr(self, name: str) -> str:
        return self.procs[name].stderr.read().decode(errors="replace")

    def losses(self, name: str) -> list[float]:
        return self.output(name)["losses"]

    def output(self, name: str) -> dict:
        """What role ``name`` wrote (fluid_script.py's JSON)."""
        return json.loads(self.outs[name].read_text())

    def kill_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)
            for stream in (p.stdout, p.stderr):
                if stream is not None:
                    stream.close()
        self.ports.close()


def start(tmp: Path, script: Path, mode: str, slicing: str, *, via_run: bool,
          env: dict[str, str] | None = None, scheme: str = "endpoints",
          pservers: int = 2) -> Job:
    """``pservers`` pservers (2; more only with the "endpoints" scheme) and 2 trainers;
    ``scheme`` picks which of Fluid's variable namings to use ("endpoints":
    PADDLE_PSERVER_ENDPOINTS/PADDLE_TRAINERS_NUM/PADDLE_CURRENT_ENDPOINT, "ips":
    PADDLE_PSERVER_IPS+PADDLE_PSERVER_PORT/PADDLE_TRAINERS/PADDLE_CURRENT_IP). The ports are
    held (:func:`held_ports`) until ``kill_all()``, which the caller calls in a ``finally``."""
    job = Job()
    base = {**os.environ, "FLAGS_rpc_deadline": "30000", **(env or {})}
    if scheme == "endpoints":
        job.endpoints = [f"127.0.0.1:{p}"
                         for p in job.ports.enter_context(held_ports(pservers))]
        common = {"PADDLE_PSERVER_ENDPOINTS": ",".join(job.endpoints),
                  "PADDLE_TRAINERS_NUM": "2"}
        current = [{"PADDLE_CURRENT_ENDPOINT": ep} for ep in job.endpoints]
    else:  # one port, two loopback addresses (Fluid's IPS + PORT scheme)
        [port] = job.ports.enter_context(held_ports(1))  # held on every address
        ips = ["127.0.0.1", "127.0.0.2"]
        job.endpoints = [f"{ip}:{port}" for ip in ips]
        common = {"PADDLE_PSERVER_IPS": ",".join(ips), "PADDLE_PSERVER_PORT": str(port),
                  "PADDLE_TRAINERS": "2"}
        current = [{"PADDLE_CURRENT_IP": ip} for ip in ips]
    roles = [(f"pserver{i}", {"PADDLE_TRAINING_ROLE": "PSERVER", **current[i]})
             for i in range(len(job.endpoints))]
    roles += [(f"trainer{i}", {"PADDLE_TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": str(i)})
              for i in range(2)]
    try:
        for name, role_env in roles:
            out = tmp / f"{name}.json"
            job.outs[name] = out
            job.procs[name] = subprocess.Popen(
                command(script, str(out), mode, slicing, via_run=via_run),
                env={**base, **common, **role_env}, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)
    except BaseException:  # no job for the caller to kill: end what started, free the ports
        job.kill_all()
        raise
    return job


def run_local(tmp: Path, script: Path) -> list[float]:
    out = tmp / "local.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    subprocess.run([sys.executable, str(script), str(out), "sync", "noslice"], env=env,
                   check=True, timeout=120)
    return json.loads(out.read_text())["losses"]


def in_threads(n: int, fn) -> list:
    """``[fn(0), ..., fn(n - 1)]``, each called in a thread of its own (trainers that must meet
    each other); the first exception of any is raised."""
    results: list = [None] * n
    errors: list = []

    def run(i: int) -> None:
        try:
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return results


def nccl2_trainer(main, startup, loss, rank: int, endpoints: list[str], **build_fields):
    """``main`` and ``startup`` transpiled in place in nccl2 mode as trainer ``rank`` of
    ``endpoints``, and the ``CompiledProgram`` of ``main`` with those trainers in its build
    strategy (and ``build_fields`` set on it: ``sync_batch_norm=True``...)."""
    config = DistributeTranspilerConfig()
    config.mode = "nccl2"
    DistributeTranspiler(config=config).transpile(
        rank, program=main, startup_program=startup, trainers=",".join(endpoints),
        current_endpoint=endpoints[rank])
    build = fluid.BuildStrategy()
    build.num_trainers, build.trainer_id = len(endpoints), rank
    for name, value in build_fields.items():
        setattr(build, name, value)
    return fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                          build_strategy=build)
