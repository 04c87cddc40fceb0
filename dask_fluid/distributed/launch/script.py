"""``dask-fluid launch``: run one Fluid-style script once per role on the Dask workers.

Fluid's launch style is "the same script on every node, the role from the environment". This
module is the node manager: it picks a worker for each role (pservers first, then trainers,
round-robin over the workers), gives every pserver (and, for nccl2, every trainer) a
``host:port`` endpoint on its worker's host, and runs the script there as a child process of
the worker (``dask-fluid run SCRIPT ARGS``: ``import paddle.fluid`` resolves to dask_fluid) with
the ``PADDLE_*`` variables of both of Fluid 1.x's naming schemes and a fresh job secret. Each
role's output comes back to the client as events, line by line, prefixed with the role, and
so do each trainer's steps (the runs of its training program, counted in its process:
:mod:`.script_steps`), as the same ``step`` events as the other runtimes'. The
first role that fails (non-zero exit) aborts the job: every other role's process is killed, and
:func:`launch_script` raises that role's error. The pservers exit by themselves once every
trainer has closed (:mod:`..pserver.ops`).

Variables set for each role (Fluid 1.x reads one scheme or the other, fleet reads a third):

================================  =============================================================
``PADDLE_TRAINING_ROLE``,         ``PSERVER`` or ``TRAINER``
``TRAINING_ROLE``
``PADDLE_PSERVER_ENDPOINTS``,     every pserver's ``host:port``, comma-separated
``PADDLE_PSERVERS_IP_PORT_LIST``
``PADDLE_PSERVER_IPS``,           the pservers' hosts and their common port (one free port is
``PADDLE_PSERVER_PORT``           chosen for all of them; pservers sharing a loopback host get
                                  127.0.0.1, 127.0.0.2, ...)
``PADDLE_TRAINERS_NUM``,          the number of trainers
``PADDLE_TRAINERS``
``PADDLE_TRAINER_ID``             the trainer's rank (0 for pservers)
``PADDLE_CURRENT_ENDPOINT``,      this role's own endpoint (pservers: the one to serve)
``PADDLE_CURRENT_IP``, ``POD_IP``,
``PADDLE_PORT``
``PADDLE_TRAINER_ENDPOINTS``      every trainer's endpoint (nccl2)
``DASK_FLUID_JOB_SECRET``         32 random bytes (hex) that authenticate the job's connections
``DASK_SCHEDULER_ADDRESS``        the cluster, for the nccl2 id exchange through the scheduler
================================  =============================================================

Scripts that take Paddle-test-style arguments instead get them with ``role_args=True``
(``--role pserver|trainer --endpoints ... --trainer_id N --current_endpoint ... --trainers T``,
appended), or by writing ``{role}``, ``{endpoints}``, ``{trainer_id}``, ``{current_endpoint}``,
``{trainers}`` in their arguments.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import urlsplit

from ..comm import rpc, tls
from ..comm.auth import SECRET_ENV, new_secret
from ..errors import DistributedTrainingError, JobAbortedError
from . import events
from .script_steps import STEP_FD_ENV, read_steps
from .tasks import TaskSpec, live_workers, new_job_id, run_tasks

__all__ = ["Role", "launch_script", "plan_roles"]

MODES = ("pserver", "nccl2")
#: a role's output goes to the client at most this often (lines are batched in between)
OUTPUT_INTERVAL_S = 0.1
#: a role's process gets this long to exit after SIGTERM before it is killed
KILL_GRACE_S = 5.0
#: the last lines of a failed role's stderr that its error carries
TAIL_LINES = 20
_PLACEHOLDERS = ("role", "endpoints", "trainer_id", "current_endpoint", "trainers")


@dataclass(frozen=True)
class Role:
    """One process of the job: where it runs, its endpoint, its environment and arguments."""

    name: str
    kind: str  # "pserver" or "trainer"
    index: int
    worker: str
    endpoint: str
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()


def _host(address: str) -> str:
    parts = urlsplit(address)
    if parts.scheme == "inproc":  # workers inside the client's process: this machine
        return "127.0.0.1"
    return parts.hostname or "127.0.0.1"


def _is_loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.")


def _bindable(pairs: list[tuple[str, int]]) -> bool:
    """Whether every ``(host, port)`` can be bound (run on a worker)."""
    for host, port in pairs:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((host, port))
        except OSError:
            return False
    return True


def _endpoints(client: Any, workers: list[str], avoid: set[int]) -> list[str]:
    """One endpoint per entry of ``workers`` (a worker may appear several times), on one
    common port where possible: roles sharing a loopback host get 127.0.0.1, 127.0.0.2, ...;
    roles sharing another host get consecutive ports (that host has one address)."""
    slots: list[tuple[str, int]] = []  # (host, offset from the common port)
    seen: dict[str, int] = {}
    for w in workers:
        host = _host(w)
        k = seen.get(host, 0)
        seen[host] = k + 1
        slots.append((f"127.0.0.{k + 1}", 0) if _is_loopback(host) else (host, k))
    rng = random.Random()
    for _ in range(50):
        port = rng.randrange(20000, 60000)
        if any(port + k in avoid for _, k in slots):
            continue
        per_worker: dict[str, list[tuple[str, int]]] = {}
        for w, (host, k) in zip(workers, slots, strict=True):
            per_worker.setdefault(w, []).append((host, port + k))
        if all(client.run(_bindable, pairs, workers=[w])[w] for w, pairs in per_worker.items()):
            return [f"{host}:{port + k}" for host, k in slots]
    raise RuntimeError("no port is free on all the workers that run the roles; free some "
                       "ports in 20000-60000 and launch again")


def plan_roles(client: Any, script_args: Sequence[str], *, pservers: int, trainers: int,
               mode: str = "pserver", role_args: bool = False,
               workers: Sequence[str] | None = None) -> list[Role]:
    """Decide where each role runs, its endpoint, its ``PADDLE_*`` variables and arguments.

    Parameters
    ----------
    client : distributed.Client
    script_args : sequence of str
        The script's own arguments (``{placeholders}`` are filled per role).
    pservers, trainers : int
        ``pservers`` must be 0 in nccl2 mode and at least 1 in pserver mode.
    mode : {"pserver", "nccl2"}
    role_args : bool
        Append Paddle-test-style ``--role ... --trainers T`` arguments.
    workers : sequence of str, optional
        The workers to use (default: every worker, in address order).

    Returns
    -------
    list of Role
    """
    if mode not in MODES:
        raise ValueError(f"mode = {mode!r} is not allowed: use one of {MODES}")
    for name, value, low in (("pservers", pservers, 1 if mode == "pserver" else 0),
                             ("trainers", trainers, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} = {value!r} is not allowed: it must be an int >= {low}")
    if mode == "nccl2" and pservers:
        raise ValueError("nccl2 mode has no pservers: launch it with --pservers 0 (or leave "
                         "--pservers out)")
    pool = sorted(workers) if workers is not None else sorted(live_workers(client))
    if not pool:
        raise ValueError("the cluster has no workers")
    kinds = [("pserver", i) for i in range(pservers)] + [("trainer", i) for i in range(trainers)]
    where = [pool[k % len(pool)] for k in range(len(kinds))]
    ps_eps = _endpoints(client, where[:pservers], set()) if pservers else []
    used = {int(ep.rsplit(":", 1)[1]) for ep in ps_eps}  # trainers listen elsewhere
    tr_eps = _endpoints(client, where[pservers:], used)
    secret = new_secret()
    scheduler = client.scheduler.address
    common = {
        "PADDLE_PSERVER_ENDPOINTS": ",".join(ps_eps),
        "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(ps_eps),
        "PADDLE_TRAINERS_NUM": str(trainers), "PADDLE_TRAINERS": str(trainers),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(tr_eps),
        SECRET_ENV: secret, "DASK_SCHEDULER_ADDRESS": scheduler,
    }
    if ps_eps:
        ips, ports = zip(*(ep.rsplit(":", 1) for ep in ps_eps), strict=True)
        if len(set(ports)) == 1:  # Fluid's IPS + PORT scheme needs one port for all
            common.update(PADDLE_PSERVER_IPS=",".join(ips), PADDLE_PSERVER_PORT=ports[0])
    roles = []
    for (kind, i), worker, ep in zip(kinds, where, ps_eps + tr_eps, strict=True):
        host, port = ep.rsplit(":", 1)
        env = dict(common, PADDLE_TRAINING_ROLE=kind.upper(), TRAINING_ROLE=kind.upper(),
                   PADDLE_TRAINER_ID=str(i if kind == "trainer" else 0),
                   PADDLE_CURRENT_ENDPOINT=ep, PADDLE_CURRENT_IP=host, POD_IP=host,
                   PADDLE_PORT=port)
        values = {"role": kind, "endpoints": ",".join(ps_eps if mode == "pserver" else tr_eps),
                  "trainer_id": str(i if kind == "trainer" else 0), "current_endpoint": ep,
                  "trainers": str(trainers)}
        args = [_fill(a, values) for a in script_args]
        if role_args:
            args += ["--role", kind, "--endpoints", values["endpoints"], "--trainer_id",
                     values["trainer_id"], "--current_endpoint", ep, "--trainers",
                     str(trainers)]
        roles.append(Role(f"{kind}{i}", kind, i, worker, ep, env, tuple(args)))
    return roles


def _fill(arg: str, values: dict[str, str]) -> str:
    for key in _PLACEHOLDERS:
        arg = arg.replace("{" + key + "}", values[key])
    return arg


# --------------------------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------------------------


class _RoleProcess(rpc.Service):
    """A role's child process, as a job service: an abort of the job terminates it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.aborted: str | None = None

    def abort(self, reason: str) -> None:
        self.aborted = reason
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            _terminate(self.proc)


def _terminate(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the script and whatever it started
    except (ProcessLookupError, PermissionError):
        return
    try:
        proc.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _pump(stream: Any, name: str, kind: str, sink: Callable[[str, str], None],
          tail: list[str] | None) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        sink(kind, line)
        if tail is not None:
            tail.append(line)
            del tail[:-TAIL_LINES]
    stream.close()


def _pump_steps(stream: Any, worker: Any, job: str, role: Role, out: dict) -> None:
    """Publish the trainer's step records as its events; keep the last in ``out``."""
    with stream:
        out["last"] = read_steps(stream, role.index,
                                 lambda event: events.publish(worker, job, event))


def _publish_done(worker: Any, job: str, role: Role, last: dict | None) -> None:
    """The trainer's ``done`` event, unless its script sent one (it exits through atexit):
    from its last step's totals, or without totals when it reported no step."""
    if last is not None and last.get("type") == "done":
        return
    done: dict[str, Any] = {"type": "done", "rank": role.index}
    if last is not None and "trained" in last:
        done.update(steps=last["done_steps"], samples=last["trained"], elapsed=last["elapsed"])
    events.publish(worker, job, done)


def run_role(job: str, role: Role, script: str, script_text: str | None) -> dict:
    """The task of one role: run the script as a child process of this worker until it exits.

    Returns ``{"role", "returncode"}``; a non-zero exit raises a DistributedTrainingError
    carrying the last lines of the role's stderr.
    """
    from distributed import get_worker, secede

    worker = get_worker()
    secede()  # a role runs for the whole job: leave the worker's thread slot to others
    path = script
    if not os.path.exists(path):  # a remote worker without the client's files: ship the text
        if script_text is None:
            raise FileNotFoundError(f"{script} is not on worker {worker.address}")
        tmp = os.path.join(worker.local_directory, f"dask-fluid-{job}")
        os.makedirs(tmp, exist_ok=True)
        path = os.path.join(tmp, os.path.basename(script))
        with open(path, "w") as f:
            f.write(script_text)
    command = [sys.executable, "-m", "dask_fluid.cli", "run", path, *role.args]
    private = tempfile.mkdtemp(prefix=f"dask-fluid-{job}-{role.name}-")  # 0700
    env = {**os.environ, **role.env, **tls.export_env(worker, private), "PYTHONUNBUFFERED": "1"}
    env.pop(STEP_FD_ENV, None)
    steps_r = steps_w = None
    if role.kind == "trainer":  # its steps come back on a pipe (script_steps)
        steps_r, steps_w = os.pipe()
        env[STEP_FD_ENV] = str(steps_w)
    try:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=os.path.dirname(os.path.abspath(path)),
                                start_new_session=True,
                                pass_fds=() if steps_w is None else (steps_w,))
    except BaseException:
        if steps_r is not None:
            os.close(steps_r)
        raise
    finally:
        if steps_w is not None:
            os.close(steps_w)  # the script holds the only write end: EOF when it exits
    service = rpc.attach_service(worker, job, f"role/{role.name}", _RoleProcess(proc))
    pending: list[tuple[str, str]] = []
    lock = threading.Lock()

    def sink(stream: str, line: str) -> None:
        with lock:
            pending.append((stream, line))

    def flush() -> None:
        with lock:
            batch, pending[:] = list(pending), []
        if batch:
            events.publish(worker, job, {"type": "output", "role": role.name,
                                         "lines": [[s, line] for s, line in batch]})

    tail: list[str] = []
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, role.name, "stdout", sink, None),
                              daemon=True),
             threading.Thread(target=_pump, args=(proc.stderr, role.name, "stderr", sink, tail),
                              daemon=True)]
    steps: dict[str, Any] = {}
    if steps_r is not None:
        pumps.append(threading.Thread(target=_pump_steps, daemon=True,
                                      args=(os.fdopen(steps_r), worker, job, role, steps)))
    for t in pumps:
        t.start()
    try:
        while proc.poll() is None:
            time.sleep(OUTPUT_INTERVAL_S)
            flush()
        for t in pumps:
            t.join(KILL_GRACE_S)
        flush()
        if role.kind == "trainer":
            _publish_done(worker, job, role, steps.get("last"))
    finally:
        if proc.poll() is None:
            _terminate(proc)
        shutil.rmtree(private, ignore_errors=True)  # the key files live no longer than the role
    code = proc.returncode
    if code != 0:
        if service.aborted is not None:
            raise JobAbortedError(f"{role.name} was stopped: {service.aborted}", role.kind,
                                  role.endpoint)
        last = "\n".join(tail[-TAIL_LINES:])
        raise DistributedTrainingError(f"{role.name} ({' '.join(role.args) or 'no arguments'})"
                                       f" exited with code {code}; its last output:\n{last}",
                                       role.kind, role.endpoint)
    return {"role": role.name, "returncode": code}


# --------------------------------------------------------------------------------------------
# client side
# --------------------------------------------------------------------------------------------


def _printer(out: TextIO, err: TextIO) -> Callable[[dict], None]:
    def show(event: dict) -> None:
        if event.get("type") != "output":
            return
        for stream, line in event["lines"]:
            target = err if stream == "stderr" else out
            print(f"[{event['role']}] {line}", file=target, flush=True)
    return show


def launch_script(client: Any, script: str, args: Sequence[str] = (), *, pservers: int = 0,
                  trainers: int = 1, mode: str = "pserver", role_args: bool = False,
                  out: TextIO | None = None, err: TextIO | None = None,
                  workers: Sequence[str] | None = None,
                  callbacks: Iterable[events.Callback] = ()) -> list[dict]:
    """Run ``script`` once per role on the cluster of ``client`` (``dask-fluid launch``).

    Parameters
    ----------
    client : distributed.Client
    script : str
        Path of the script (shipped to workers that do not see it).
    args : sequence of str
        Its arguments; see :func:`plan_roles` for ``{placeholders}``.
    pservers, trainers : int
    mode : {"pserver", "nccl2"}
    role_args : bool
        Append Paddle-test-style role arguments.
    out, err : text streams, optional
        Where the roles' stdout and stderr lines go, prefixed ``[pserver0]``... (default: this
        process's).
    workers : sequence of str, optional
    callbacks : iterable of callable
        Called on the client with every event of the job: the roles' ``output``, and each
        trainer's ``step`` events (the runs of its training program, throttled; see
        :mod:`.script_steps`) and ``done``, e.g. a
        :class:`~dask_fluid.distributed.launch.progress.JobProgress`.

    Returns
    -------
    list of dict
        ``{"role", "returncode"}`` per role, pservers first.

    Raises
    ------
    DistributedTrainingError
        The first role that failed, with the end of its output; the others were stopped.
    """
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"script {script!r} does not exist")
    with open(path) as f:
        text = f.read()
    roles = plan_roles(client, args, pservers=pservers, trainers=trainers, mode=mode,
                       role_args=role_args, workers=workers)
    job = new_job_id()
    tasks = [TaskSpec(r.worker, run_role, (job, r, path, text), role=r.kind,
                      endpoint=r.endpoint, reports_done=r.kind == "trainer") for r in roles]
    show = _printer(out or sys.stdout, err or sys.stderr)
    return run_tasks(client, job, tasks, callbacks=[show, *callbacks],
                     info={"kind": "launch", "mode": mode,
                           "summary": f"{os.path.basename(path)}: {len(roles)} role(s)"})
