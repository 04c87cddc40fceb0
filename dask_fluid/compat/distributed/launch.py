"""``python -m paddle.distributed.launch``: Paddle 1.8's launcher of collective (nccl2) jobs,
one trainer process per selected GPU of this node (``dask-fluid run -m
paddle.distributed.launch [options] train.py [args]``).

Each process runs ``python -u train.py args`` (``paddle`` resolving to dask_fluid in it) with
the variables a Fluid 1.8 nccl2 or collective-fleet script reads: ``FLAGS_selected_gpus``,
``PADDLE_TRAINER_ID``, ``PADDLE_CURRENT_ENDPOINT``, ``PADDLE_TRAINERS_NUM`` and
``PADDLE_TRAINER_ENDPOINTS``. The trainers of all nodes are ``--cluster_node_ips`` ×
``--selected_gpus``: trainer ``node_rank × gpus + i`` listens on ``node_ip:started_port + i``
(free ports on one node without ``--started_port``). On a machine without GPUs
``--selected_gpus=0,1`` still starts two trainers; a script on ``CPUPlace`` trains on CPUs
(the trainers' ring is TCP there).

The launcher watches its processes: when one exits with an error it stops the others and exits
with status 1, naming the trainer; with ``--log_dir`` each process writes
``log_dir/workerlog.N`` and the first one's log is copied to the launcher's output as it grows.
On one node without ``DASK_FLUID_JOB_SECRET`` the launcher gives its trainers one secret
(several nodes must share theirs: set it on every node).
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import IO

from dask_fluid.distributed.comm.ports import held_ports

__all__ = ["Trainer", "free_ports", "get_cluster", "get_gpus", "launch", "main"]

logger = logging.getLogger("paddle.distributed.launch")

#: how often the launcher looks at its trainers (Paddle 1.8: every 3 s)
POLL_S = 0.2
#: how long a stopped trainer has between SIGTERM and SIGKILL
TERMINATE_S = 5.0


@dataclass
class Trainer:
    """One trainer of the job: its rank, endpoint and GPUs (``FLAGS_selected_gpus``)."""

    rank: int
    endpoint: str
    gpus: list[str]
    proc: subprocess.Popen | None = None
    log: IO[bytes] | None = None
    log_path: str | None = None
    log_offset: int = 0
    env: dict[str, str] = field(default_factory=dict)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m paddle.distributed.launch",
        description="start paddle training using multi-process mode (one process per "
                    "selected GPU); the script reads FLAGS_selected_gpus, PADDLE_TRAINER_ID, "
                    "PADDLE_CURRENT_ENDPOINT, PADDLE_TRAINERS_NUM and PADDLE_TRAINER_ENDPOINTS")
    parser.add_argument("--cluster_node_ips", type=str, default="127.0.0.1",
                        help="Paddle cluster nodes ips, such as 192.168.0.16,192.168.0.17..")
    parser.add_argument("--node_ip", type=str, default="127.0.0.1",
                        help="The current node ip.")
    parser.add_argument("--use_paddlecloud", action="store_true",
                        help="take the nodes from PaddleCloud's PADDLE_TRAINERS, POD_IP, "
                             "PADDLE_PORT and PADDLE_TRAINERS_NUM")
    parser.add_argument("--started_port", type=int, default=None,
                        help="The trainer's started port on a single node")
    # type=bool as Paddle 1.8's: any non-empty value is True
    parser.add_argument("--print_config", type=bool, default=True,
                        help="Print the config or not")
    parser.add_argument("--selected_gpus", type=str, default=None,
                        help="one training process per selected GPU (default: every GPU)")
    parser.add_argument("--log_level", type=int, default=20,
                        help="Logging level, default is logging.INFO")
    parser.add_argument("--log_dir", type=str, default=None,
                        help="each process's log as LOG_DIR/workerlog.N (default: this "
                             "launcher's output)")
    parser.add_argument("training_script", type=str,
                        help="the training script, followed by its arguments")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser


def get_gpus(selected_gpus: str | None) -> list[str]:
    """The GPU ids the trainers get (Paddle 1.8's rule): every GPU when None; else the list,
    as indices into ``CUDA_VISIBLE_DEVICES`` when that is set.

    Raises
    ------
    ValueError
        No GPU found and none selected, or a selected GPU missing from
        ``CUDA_VISIBLE_DEVICES``.
    """
    if selected_gpus is None:
        from dask_fluid.compat.core import get_cuda_device_count  # noqa: PLC0415

        count = get_cuda_device_count()
        if count == 0:
            raise ValueError("no GPU found: pass --selected_gpus=0,1,... (one trainer process "
                             "per id; on CPUs the script's CPUPlace trains)")
        return [str(i) for i in range(count)]
    wanted = [g.strip() for g in selected_gpus.split(",") if g.strip()]
    if not wanted:
        raise ValueError(f"--selected_gpus={selected_gpus!r} names no GPU")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if not visible:
        return wanted
    visible_list = [v.strip() for v in visible.split(",")]
    for g in wanted:
        if g not in visible_list:
            raise ValueError(f"Can't find your selected_gpus {g} in "
                             f"CUDA_VISIBLE_DEVICES[{visible}].")
    return [str(visible_list.index(g)) for g in wanted]


def free_ports(n: int) -> list[int]:
    """``n`` ports free on this host now (Paddle's ``find_free_ports``; :func:`launch` holds
    its ports until the trainers exit instead, :func:`.held_ports`)."""
    with held_ports(n) as ports:
        return ports


def get_cluster(node_ips: Sequence[str], node_ip: str, ports: Sequence[int],
                gpus: Sequence[str]) -> tuple[list[str], list[Trainer]]:
    """Every trainer endpoint of the job, and this node's trainers.

    Raises
    ------
    ValueError
        ``node_ip`` is not one of ``node_ips``, or ports and GPUs differ in number.
    """
    if node_ip not in node_ips:
        raise ValueError(f"--node_ip {node_ip} is not one of --cluster_node_ips "
                         f"{','.join(node_ips)}")
    if len(ports) != len(gpus):
        raise ValueError(f"{len(ports)} ports for {len(gpus)} GPUs")
    endpoints = [f"{ip}:{port}" for ip in node_ips for port in ports]
    node_rank = list(node_ips).index(node_ip)
    mine = [Trainer(node_rank * len(gpus) + i, f"{node_ip}:{port}", [str(gpu)])
            for i, (port, gpu) in enumerate(zip(ports, gpus, strict=True))]
    return endpoints, mine


def _cluster_from_args(args: argparse.Namespace, gpus: list[str], hold: ExitStack
                       ) -> tuple[list[str], list[Trainer]]:
    node_ips = [ip.strip() for ip in args.cluster_node_ips.split(",") if ip.strip()]
    node_ip, started = args.node_ip, args.started_port
    if args.use_paddlecloud and int(os.environ.get("PADDLE_TRAINERS_NUM", "1")) != 1:
        missing = [v for v in ("PADDLE_TRAINERS", "POD_IP", "PADDLE_PORT")
                   if not os.environ.get(v)]
        if missing:
            raise ValueError(f"--use_paddlecloud: {', '.join(missing)} not set")
        node_ips = [ip.strip() for ip in os.environ["PADDLE_TRAINERS"].split(",")]
        node_ip, started = os.environ["POD_IP"], int(os.environ["PADDLE_PORT"])
    if len(node_ips) <= 1 and started is None:
        # held while the job runs: another process's bind(0) cannot take one before its
        # trainer listens (the trainers' servers bind with SO_REUSEADDR)
        ports = hold.enter_context(held_ports(len(gpus)))
    else:
        first = 6070 if started is None else started
        ports = list(range(first, first + len(gpus)))
    return get_cluster(node_ips, node_ip, ports, gpus)


def _start(trainers: list[Trainer], endpoints: list[str], script: str, script_args: list[str],
           log_dir: str | None, single_node: bool) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("http_proxy", "https_proxy")}
    if single_node and not base.get("DASK_FLUID_JOB_SECRET"):
        base["DASK_FLUID_JOB_SECRET"] = secrets.token_hex(16)  # one job, one secret
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
    for i, t in enumerate(trainers):
        t.env = {**base, "FLAGS_selected_gpus": ",".join(t.gpus),
                 "PADDLE_TRAINER_ID": str(t.rank), "PADDLE_CURRENT_ENDPOINT": t.endpoint,
                 "PADDLE_TRAINERS_NUM": str(len(endpoints)),
                 "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints)}
        cmd = [sys.executable, "-u", script, *script_args]
        if log_dir:
            t.log_path = os.path.join(log_dir, f"workerlog.{i}")
            t.log = open(t.log_path, "ab")  # noqa: SIM115 - open while the process runs
            t.proc = subprocess.Popen(cmd, env=t.env, stdout=t.log, stderr=t.log)
        else:
            t.proc = subprocess.Popen(cmd, env=t.env)


def _pull_log(trainer: Trainer, out: IO[str]) -> None:
    """Copy what the first trainer's log gained since the last look (Paddle's
    pull_worker_log)."""
    if not trainer.log_path:
        return
    with open(trainer.log_path, "rb") as f:
        f.seek(trainer.log_offset)
        data = f.read()
    if data:
        trainer.log_offset += len(data)
        out.write(data.decode(errors="replace"))
        out.flush()


def _terminate(trainers: list[Trainer]) -> None:
    for t in trainers:
        if t.proc is not None and t.proc.poll() is None:
            t.proc.send_signal(signal.SIGTERM)
    give_up = time.monotonic() + TERMINATE_S
    for t in trainers:
        if t.proc is None:
            continue
        try:
            t.proc.wait(max(0.0, give_up - time.monotonic()))
        except subprocess.TimeoutExpired:
            t.proc.kill()
            t.proc.wait()


def _watch(trainers: list[Trainer], nranks: int, out: IO[str]) -> int:
    """Wait until every trainer has exited (0), or one failed (1: the others are stopped)."""
    try:
        while True:
            _pull_log(trainers[0], out)
            codes = [t.proc.poll() for t in trainers]
            failed = [t.rank for t, c in zip(trainers, codes, strict=True)
                      if c is not None and c != 0]
            if failed:
                logger.error("ABORT!!! Out of all %d trainers, the trainer process with "
                             "rank=%s was aborted. Please check its log.", nranks, failed)
                print(f"paddle.distributed.launch: trainer(s) {failed} of {nranks} failed "
                      f"(exit status {[c for c in codes if c not in (None, 0)]}); the other "
                      "trainers of this node were stopped", file=sys.stderr)
                _terminate(trainers)
                return 1
            if all(c == 0 for c in codes):
                _pull_log(trainers[0], out)
                return 0
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        logger.warning("KeyboardInterrupt, exit")
        _terminate(trainers)
        raise
    finally:
        for t in trainers:
            if t.log is not None:
                t.log.close()


def launch(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    """Start this node's trainers and watch them; the exit status of the job on this node."""
    out = sys.stdout if out is None else out
    gpus = get_gpus(args.selected_gpus)
    with ExitStack() as hold:
        endpoints, trainers = _cluster_from_args(args, gpus, hold)
        logger.info("trainers %s; this node: %s", endpoints, [t.endpoint for t in trainers])
        if not os.path.exists(args.training_script):
            raise ValueError(f"training script {args.training_script!r} does not exist")
        _start(trainers, endpoints, args.training_script, list(args.training_script_args),
               args.log_dir, single_node=len({e.rsplit(":", 1)[0] for e in endpoints}) == 1)
        return _watch(trainers, len(endpoints), out)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m paddle.distributed.launch``: parse ``argv`` and :func:`launch`."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(asctime)s %(message)s")
    if args.print_config:
        print("-----------  Configuration Arguments -----------")
        for key, value in sorted(vars(args).items()):
            print(f"{key}: {value}")
        print("------------------------------------------------", flush=True)
    try:
        return launch(args)
    except ValueError as err:
        print(f"paddle.distributed.launch: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
