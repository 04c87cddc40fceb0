"""The ``dask-fluid`` command.

``dask-fluid demo``
    The main job of the README: start an embedded LocalCluster (or connect to ``--scheduler``),
    train an ``MLPClassifier`` in pserver mode (or ``--mode collective|nccl2|local``) on the
    reference blobs held as a dask array of 8 chunks, and print the transpiled programs, the
    per-epoch progress, the test accuracy, the throughput and the elapsed time.
    ``--dashboard [ADDRESS]`` starts the cluster's Dask dashboard and prints the URL of its
    Fluid Training page.
``dask-fluid info``
    Versions, GPU/CuPy/NCCL availability, and the resolved ``FLAGS_rpc_*`` values.
``dask-fluid run SCRIPT [ARGS...]``
    ``python SCRIPT ARGS...`` with ``import paddle`` / ``import paddle.fluid as fluid``
    resolving to dask_fluid, in the script and in the Python processes it starts (Paddle 1.8's
    own model files and runners run unchanged; see :mod:`dask_fluid.compat`). ARGS pass
    through untouched; the exit status is the script's (a traceback and 1 when it raises).
``dask-fluid launch [--scheduler ADDR | --workers N] --pservers P --trainers T SCRIPT [ARGS...]``
    Fluid's launch style on Dask: SCRIPT runs once per role (``dask-fluid run`` on the workers,
    an embedded LocalCluster without ``--scheduler``) with each role's ``PADDLE_*`` variables;
    every role's output is printed prefixed with the role, under a progress line of the
    trainers' steps; the first role that fails stops the others (exit 1); Ctrl-C stops
    everything (exit 130). ``--mode nccl2`` runs trainers only.
    See :mod:`dask_fluid.distributed.launch.script`.

Exit codes: 0 success, 1 the training (or the cluster) failed, 2 bad usage or configuration,
130 interrupted. Errors are printed as one line on stderr, without a traceback; set
``DASK_FLUID_DEBUG=1`` to get the traceback as well.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import math
import os
import platform
import re
import sys
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

__all__ = ["UsageError", "build_parser", "gpu_status", "main", "resolved_flags"]

PROG = "dask-fluid"
MODES = ("pserver", "collective", "nccl2", "local")
N_FEATURES = 64
N_CLASSES = 10
TRAIN_CHUNKS = 8
TEST_FRACTION = 0.2
DEFAULT_SAMPLES = 200_000
DEFAULT_EPOCHS = 2
DEFAULT_HIDDEN = (256, 256)
ALPHA = 1e-4  # scikit-learn's default L2 penalty


class UsageError(ValueError):
    """Bad arguments or a configuration that cannot run here (exit code 2)."""


class _ArgumentParser(argparse.ArgumentParser):
    # argparse exits by itself on a bad argument; raising lets main() keep its one-line,
    # exit-code-2 contract and close whatever it opened.
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


# ----------------------------------------------------------------------------------------------
# parser
# ----------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed; it must be >= 1")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} is not allowed; it must be > 0 and finite")
    return value


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of layer sizes, e.g. 256,256") from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: every layer size must be >= 1")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dask-fluid`` (``demo``, ``info``, ``run``, ``launch``)."""
    from . import __version__

    parser = _ArgumentParser(
        prog=PROG,
        description="PaddlePaddle Fluid's distributed training (DistributeTranspiler, pserver "
                    "and NCCL2 modes) on Dask.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{demo,info,run,launch}")

    demo = sub.add_parser(
        "demo", help="train an MLPClassifier on an embedded Dask cluster (the main job)",
        description="Train MLPClassifier(mode=...) on the reference blobs (64 features, 10 "
                    "classes) held as a dask array of 8 chunks, on an embedded LocalCluster or "
                    "on an existing cluster (--scheduler). Prints the transpiled programs, "
                    "progress, test accuracy, throughput and elapsed time.")
    demo.add_argument("--mode", choices=MODES, default="pserver",
                      help="pserver (default): parameter servers on the workers; collective: "
                           "all-reduce between trainers (ring on CPU, NCCL on GPU); nccl2: "
                           "Fluid's NCCL2 mode, one GPU per worker; local: one process, no "
                           "cluster")
    demo.add_argument("--workers", type=_positive_int, default=2,
                      help="worker processes of the embedded cluster, 1 thread each (default 2)")
    demo.add_argument("--pservers", type=_positive_int, default=2,
                      help="parameter servers in pserver mode (default 2)")
    demo.add_argument("--trainers", type=_positive_int, default=None,
                      help="trainers (default: one per worker that holds data)")
    demo.add_argument("--epochs", type=_positive_int, default=DEFAULT_EPOCHS,
                      help=f"passes over the training data (default {DEFAULT_EPOCHS})")
    demo.add_argument("--samples", type=_positive_int, default=DEFAULT_SAMPLES,
                      help=f"rows of the reference blobs, 80%% train / 20%% test "
                           f"(default {DEFAULT_SAMPLES})")
    demo.add_argument("--batch-size", type=_positive_int, default=128,
                      help="mini-batch size (default 128)")
    demo.add_argument("--hidden", type=_hidden, default=DEFAULT_HIDDEN,
                      help="hidden layer sizes, comma-separated (default 256,256)")
    demo.add_argument("--learning-rate", type=float, default=1e-3,
                      help="Adam learning rate (default 0.001)")
    sync = demo.add_mutually_exclusive_group()
    sync.add_argument("--sync", dest="sync", action="store_true", default=True,
                      help="synchronous pserver training (default)")
    sync.add_argument("--async", dest="sync", action="store_false",
                      help="asynchronous pserver training")
    demo.add_argument("--dc-asgd", action="store_true",
                      help="delay-compensated async SGD on the pservers (needs --async)")
    demo.add_argument("--device", choices=("cpu", "gpu"), default=None,
                      help="where the kernels run (default cpu; gpu for --mode nccl2)")
    demo.add_argument("--scheduler", metavar="ADDRESS", default=None,
                      help="connect to this Dask scheduler (e.g. tcp://10.0.0.5:8786) instead "
                           "of starting a LocalCluster")
    demo.add_argument("--connect-timeout", type=_positive_seconds, default=None,
                      metavar="SECONDS",
                      help="with --scheduler: how long to try to reach it (default 10)")
    demo.add_argument("--dashboard", nargs="?", const=":0", default=None, metavar="ADDRESS",
                      help="start the embedded cluster with the Dask dashboard on ADDRESS "
                           "(default :0, a free port) and print the URL of its Fluid Training "
                           "page; with --scheduler, print that cluster's page")
    demo.add_argument("--seed", type=int, default=0, help="data and model seed (default 0)")
    demo.add_argument("--no-progress", dest="progress", action="store_false",
                      help="no progress bar")
    demo.set_defaults(func=_cmd_demo)

    info = sub.add_parser("info", help="versions, GPU availability and FLAGS_rpc_* values",
                          description="Print versions, GPU/CuPy/NCCL availability and the "
                                      "resolved FLAGS_rpc_* settings.")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(func=_cmd_info)

    run = sub.add_parser(
        "run", help="run a Fluid script, with 'import paddle.fluid' resolving to dask_fluid",
        usage=f"{PROG} run [-h] SCRIPT [ARGS...] | {PROG} run -m MODULE [ARGS...]",
        description="Run SCRIPT like 'python SCRIPT ARGS...', with paddle and paddle.fluid "
                    "resolving to dask_fluid in the script and in every Python process it "
                    "starts (PYTHONPATH carries the hook). ARGS are passed to the script "
                    "untouched; the exit status is the script's. '-m MODULE' runs a module as "
                    "'python -m MODULE' would, e.g. -m paddle.distributed.launch "
                    "--selected_gpus=0,1 train.py.")
    # optional for argparse only, so that a missing SCRIPT gets its own message (REMAINDER
    # would be listed as required too)
    run.add_argument("script", nargs="?", metavar="SCRIPT", help="the Python file to run")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="the script's own arguments (e.g. --role pserver)")
    run.set_defaults(func=_cmd_run)

    launch = sub.add_parser(
        "launch", help="run a Fluid script once per role (pservers, trainers) on Dask workers",
        usage=f"{PROG} launch [-h] [--scheduler ADDRESS | --workers N] [--pservers P] "
              "[--trainers T] [--mode {pserver,nccl2}] [--role-args] [--dashboard [ADDRESS]] "
              "[--no-progress] SCRIPT [ARGS...]",
        description="Fluid's launch style on a Dask cluster: SCRIPT runs once per role on the "
                    "workers, with the PADDLE_* variables of both Fluid 1.x naming schemes "
                    "(endpoints on the workers' hosts, free ports), under 'dask-fluid run'. "
                    "{role}, {endpoints}, {trainer_id}, {current_endpoint} and {trainers} in "
                    "ARGS are filled in per role. Each role's output is printed prefixed with "
                    "the role; the first role that fails stops the others.")
    where = launch.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS", default=None,
                       help="run on this Dask cluster instead of an embedded LocalCluster")
    where.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                       help="worker processes of the embedded LocalCluster (default: one per "
                            "role)")
    launch.add_argument("--pservers", type=int, default=None, metavar="P",
                        help="number of pservers (default 2 in pserver mode, 0 in nccl2)")
    launch.add_argument("--trainers", type=_positive_int, default=2, metavar="T",
                        help="number of trainers (default 2)")
    launch.add_argument("--mode", choices=("pserver", "nccl2"), default="pserver",
                        help="pserver (pservers + trainers) or nccl2 (trainers all-reduce)")
    launch.add_argument("--role-args", action="store_true",
                        help="append Paddle-test-style --role, --endpoints, --trainer_id, "
                             "--current_endpoint and --trainers arguments")
    launch.add_argument("--dashboard", nargs="?", const=":0", default=None, metavar="ADDRESS",
                        help="start the embedded cluster with the Dask dashboard on ADDRESS "
                             "(default :0) and print the URL of its Fluid Training page; with "
                             "--scheduler, print that cluster's page")
    launch.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress line (the trainers' steps, samples/s and loss)")
    launch.add_argument("script", nargs="?", metavar="SCRIPT", help="the Python file to run")
    launch.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="the script's own arguments")
    launch.set_defaults(func=_cmd_launch)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dask-fluid`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    Parameters
    ----------
    argv : sequence of str, optional

    Returns
    -------
    int
        0 on success, 1 when training or the cluster failed, 2 on bad usage, 130 on Ctrl-C.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["run", "-m"]:  # argparse would take the module's options for run's
        return _run_module(argv[2:])
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        return int(args.func(args, sys.stdout))
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        return _fail(exc, 2)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except _TrainingFailed as exc:
        return _fail(exc.__cause__ or exc, 1, prefix="training failed: ")
    except Exception as exc:  # the one-line contract holds for every error
        return _fail(exc, 1)


class _TrainingFailed(RuntimeError):
    """Marks an error raised while the cluster was training or evaluating (exit code 1)."""


def _fail(exc: BaseException, code: int, prefix: str = "") -> int:
    sys.stdout.flush()
    if os.environ.get("DASK_FLUID_DEBUG"):
        traceback.print_exception(exc)
    message = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, UsageError):
        message = f"{type(exc).__name__}: {message}"
    if not message.startswith(PROG):
        message = f"{PROG}: {prefix}{message}"
    print(message, file=sys.stderr)
    return code


# ----------------------------------------------------------------------------------------------
# info
# ----------------------------------------------------------------------------------------------

_PACKAGES = ("numpy", "dask", "distributed", "sklearn", "pandas", "tqdm", "cupy", "dask_cuda",
             "dask_jobqueue", "dask_kubernetes", "matplotlib")


def _version_of(module: str) -> str | None:
    try:
        mod = importlib.import_module(module)
    except Exception:  # a broken optional install counts as missing
        return None
    return str(getattr(mod, "__version__", "unknown"))


def gpu_status() -> dict[str, Any]:
    """What CuPy sees: ``{"cupy", "gpus", "names", "nccl", "reason"}``.

    Returns
    -------
    dict
        ``cupy``: CuPy's version or None; ``gpus``: number of usable CUDA devices; ``names``:
        their names; ``nccl``: whether ``cupy.cuda.nccl`` can load libnccl; ``reason``: why
        there is no GPU, or ``""``.
    """
    status: dict[str, Any] = {"cupy": None, "gpus": 0, "names": [], "nccl": False, "reason": ""}
    try:
        import cupy
    except Exception as err:  # ImportError, or a CUDA library missing at import
        status["reason"] = f"CuPy is not installed ({type(err).__name__}); install the 'gpu' " \
                           "extra: pip install 'dask-fluid[gpu]'"
        return status
    status["cupy"] = str(cupy.__version__)
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as err:  # CUDARuntimeError: no driver, no device
        status["reason"] = f"CuPy finds no CUDA device: {' '.join(str(err).split())}"
        return status
    status["gpus"] = count
    for i in range(count):
        try:
            name = cupy.cuda.runtime.getDeviceProperties(i)["name"]
            status["names"].append(name.decode() if isinstance(name, bytes) else str(name))
        except Exception:  # names are cosmetic
            status["names"].append("?")
    if count == 0:
        status["reason"] = "CuPy finds no CUDA device"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cupy warns when libnccl is missing
        try:
            from cupy.cuda import nccl

            status["nccl"] = bool(getattr(nccl, "available", False))
        except Exception:
            status["nccl"] = False
    return status


def resolved_flags() -> list[dict[str, Any]]:
    """Every ``FLAGS_rpc_*`` flag with its value and where the value came from.

    Returns
    -------
    list of dict
        ``{"flag", "key", "default", "value", "source", "error"}``; ``source`` is ``"env"``,
        ``"dask.config"`` or ``"default"``; ``error`` holds the message when the value found is
        invalid (then ``value`` is None).
    """
    import dask.config

    from .flags import FLAGS, read_flag

    rows = []
    for name, (key, default) in FLAGS.items():
        if name in os.environ:
            source = "env"
        elif dask.config.get(key, default) != default:
            source = "dask.config"
        else:
            source = "default"
        row = {"flag": name, "key": key, "default": default, "source": source, "value": None,
               "error": ""}
        try:
            row["value"] = read_flag(name)
        except ValueError as err:
            row["error"] = str(err)
        rows.append(row)
    return rows


def _cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from .compat.run import run_script
    from .distributed.launch.script_steps import install_from_env

    if args.script is None:
        raise UsageError(f"{PROG} run: SCRIPT is required: {PROG} run SCRIPT [ARGS...]")
    install_from_env()  # a trainer role of dask-fluid launch: tell the worker its steps
    return run_script(args.script, args.args)


def _run_module(argv: list[str]) -> int:
    from .compat.run import run_module

    if not argv:
        return _fail(UsageError(f"{PROG} run -m: MODULE is required: {PROG} run -m MODULE "
                                "[ARGS...]"), 2)
    return run_module(argv[0], argv[1:])


def _cmd_launch(args: argparse.Namespace, out: TextIO) -> int:
    if args.script is None:
        raise UsageError(f"{PROG} launch: SCRIPT is required: {PROG} launch --pservers P "
                         "--trainers T SCRIPT [ARGS...]")
    if not os.path.isfile(args.script):
        raise UsageError(f"{PROG} launch: {args.script!r} is not a file")
    pservers = args.pservers if args.pservers is not None else (
        2 if args.mode == "pserver" else 0)
    if args.mode == "pserver" and pservers < 1:
        raise UsageError(f"{PROG} launch: pserver mode needs --pservers >= 1")
    if args.mode == "nccl2" and pservers:
        raise UsageError(f"{PROG} launch: nccl2 mode has no pservers; drop --pservers")
    if args.workers is None:
        args.workers = pservers + args.trainers
    device = "gpu" if args.mode == "nccl2" and gpu_status()["gpus"] else "cpu"
    from ._launch_view import AboveBar, LaunchView
    from .distributed.launch.script import launch_script

    view = LaunchView(f"{os.path.basename(args.script)} ({args.mode})")
    with contextlib.ExitStack() as stack:
        client, workers, desc = _connect(args, device, out, stack)
        print(f"{PROG} launch: {args.script} as {pservers} pserver(s) + {args.trainers} "
              f"trainer(s) ({args.mode}) on {desc}", file=out, flush=True)
        if args.dashboard is not None:
            print(f"{PROG} launch: dashboard {_training_page(client)}", file=out, flush=True)
        try:
            launch_script(client, args.script, args.args, pservers=pservers,
                          trainers=args.trainers, mode=args.mode, role_args=args.role_args,
                          out=AboveBar(out), err=AboveBar(sys.stderr), workers=workers,
                          callbacks=[view] if args.progress else [])
        except (ValueError, TypeError) as err:
            raise UsageError(f"{PROG} launch: {err}") from err
        except Exception as err:
            raise _TrainingFailed(str(err)) from err
        finally:
            view.close()
    _print_launch_totals(view, out)
    return 0


def _print_launch_totals(view: Any, out: TextIO) -> None:
    """What the trainers reported: samples, steps, samples/s, last loss."""
    progress = view.progress
    if progress is None:
        return
    loss = "" if progress.loss is None else f", last loss {progress.loss:.4f}"
    steps = max((t.done_steps for t in progress.trainers.values()), default=0)
    print(f"{PROG} launch: {len(progress.trainers)} trainer(s) trained {progress.trained:,} "
          f"samples in {steps:,} step(s) each at most, {progress.samples_per_s:,.0f} samples/s "
          f"in their training loops{loss}", file=out, flush=True)


def _cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    from . import __version__

    packages = {name: _version_of(name) for name in _PACKAGES}
    gpu = gpu_status()
    flags = resolved_flags()
    if args.json:
        print(json.dumps({"dask_fluid": __version__, "python": platform.python_version(),
                          "platform": platform.platform(), "cpus": os.cpu_count(),
                          "packages": packages, "gpu": gpu, "flags": flags}, indent=2), file=out)
    else:
        print(f"{PROG} {__version__}", file=out)
        print(f"  python    {platform.python_version()} ({sys.executable})", file=out)
        print(f"  platform  {platform.platform()}, {os.cpu_count()} CPUs", file=out)
        print("packages:", file=out)
        for name, version in packages.items():
            label = "scikit-learn" if name == "sklearn" else name.replace("_", "-")
            print(f"  {label:<16}{version or '-- not installed'}", file=out)
        print("GPU:", file=out)
        if gpu["gpus"]:
            for i, name in enumerate(gpu["names"]):
                print(f"  cuda:{i}  {name}", file=out)
            print(f"  NCCL      {'available' if gpu['nccl'] else 'not available'}", file=out)
            print("  modes     local, pserver, collective (device='gpu'), nccl2" if gpu["nccl"]
                  else "  modes     local, pserver, collective (device='gpu'); nccl2 needs "
                       "libnccl (pip install nvidia-nccl-cu12)", file=out)
        else:
            print(f"  none: {gpu['reason']}", file=out)
            print("  modes     local, pserver, collective (ring all-reduce on CPU); nccl2 "
                  "needs CUDA GPUs", file=out)
        print("FLAGS_rpc_* (environment variable > dask.config key > default):", file=out)
        for row in flags:
            value = row["value"] if not row["error"] else "INVALID"
            print(f"  {row['flag']:<30}{value!s:>8}  ({row['source']}; dask.config "
                  f"'{row['key']}', default {row['default']})", file=out)
    bad = [row for row in flags if row["error"]]
    if bad:
        raise UsageError(bad[0]["error"])
    return 0


# ----------------------------------------------------------------------------------------------
# demo
# ----------------------------------------------------------------------------------------------


@dataclass
class _Timer:
    marks: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.marks[name] = self.marks.get(name, 0.0) + time.perf_counter() - t0


def _check_demo_args(args: argparse.Namespace) -> str:
    """Refuse combinations that cannot run; return the device."""
    device = args.device or ("gpu" if args.mode == "nccl2" else "cpu")
    min_samples = TRAIN_CHUNKS * 2 * 10
    if args.samples < min_samples:
        raise UsageError(f"{PROG} demo: --samples {args.samples} is too small; use at least "
                         f"{min_samples} (8 training chunks and a test set)")
    if args.dc_asgd and args.sync:
        raise UsageError(f"{PROG} demo: --dc-asgd needs --async (DC-ASGD compensates for the "
                         "stale parameters of asynchronous training)")
    if args.mode != "pserver" and (args.dc_asgd or not args.sync):
        raise UsageError(f"{PROG} demo: --async and --dc-asgd apply to --mode pserver only")
    if args.mode == "local" and args.dashboard is not None:
        raise UsageError(f"{PROG} demo: --dashboard shows a cluster's page, and --mode local "
                         "trains in this process; drop --dashboard or pick --mode pserver/"
                         "collective/nccl2")
    if args.mode == "local" and args.scheduler:
        raise UsageError(f"{PROG} demo: --mode local trains in this process; drop --scheduler "
                         "or pick --mode pserver/collective/nccl2")
    if args.connect_timeout is not None and not args.scheduler:
        raise UsageError(f"{PROG} demo: --connect-timeout applies to --scheduler (the embedded "
                         "cluster is started, not reached); add --scheduler or drop it")
    if args.mode == "pserver" and device == "gpu":
        raise UsageError(f"{PROG} demo: pserver mode runs its kernels on CPUs; use --mode "
                         "collective or nccl2 to train on GPUs")
    if args.mode == "nccl2" and device != "gpu":
        raise UsageError(f"{PROG} demo: --mode nccl2 runs on GPUs only; use --mode collective "
                         "for all-reduce on CPUs")
    if not math.isfinite(args.learning_rate) or args.learning_rate <= 0:
        raise UsageError(f"{PROG} demo: --learning-rate {args.learning_rate} must be > 0")
    if device == "gpu" and not args.scheduler:
        gpu = gpu_status()
        if not gpu["gpus"]:
            what = "--mode nccl2" if args.mode == "nccl2" else "--device gpu"
            raise UsageError(f"{PROG} demo: {what} needs a CUDA GPU and CuPy, and this machine "
                             f"has none ({gpu['reason']}); use --mode collective or pserver on "
                             "CPUs")
        if args.mode == "nccl2" and not gpu["nccl"]:
            raise UsageError(f"{PROG} demo: --mode nccl2 needs NCCL, and CuPy cannot load "
                             "libnccl; pip install nvidia-nccl-cu12")
    return device


def _quiet_dask() -> None:
    # The demo's output is the point; Dask's INFO chatter (and its shutdown warnings about
    # closing comms) would drown it. Errors still show.
    for name in ("distributed", "dask", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _start_cluster(args: argparse.Namespace, device: str, out: TextIO,
                   stack: contextlib.ExitStack) -> Any:
    from distributed import LocalCluster

    # no dashboard unless asked: it costs the demo's small machine a web server
    common = {"threads_per_worker": 1, "dashboard_address": getattr(args, "dashboard", None),
              "silence_logs": logging.ERROR}
    n_workers = args.workers
    if device == "gpu":
        n_gpus = gpu_status()["gpus"]
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            # Without dask-cuda every worker would see every GPU and pick device 0, and NCCL
            # refuses two ranks on one GPU: one worker is the only correct choice.
            if n_workers > 1:
                print(f"  note: dask-cuda is not installed, so 1 GPU worker instead of "
                      f"{n_workers} (pip install dask-cuda for one worker per GPU)", file=out)
            return stack.enter_context(LocalCluster(n_workers=1, processes=True, **common))
        if n_workers > n_gpus:
            print(f"  note: {n_gpus} GPU(s), so {n_gpus} worker(s) (one per GPU)", file=out)
            n_workers = n_gpus
        return stack.enter_context(LocalCUDACluster(n_workers=n_workers, **common))
    return stack.enter_context(LocalCluster(n_workers=n_workers, processes=True, **common))


def _connect(args: argparse.Namespace, device: str, out: TextIO,
             stack: contextlib.ExitStack) -> tuple[Any, list[str], str]:
    """Start or reach the cluster; return (client, worker addresses, description)."""
    from distributed import Client

    from .distributed.launch.tasks import live_workers

    if args.scheduler:
        try:
            client = stack.enter_context(Client(args.scheduler,
                                                timeout=f"{args.connect_timeout or 10.0}s"))
        except (OSError, TimeoutError) as err:
            raise RuntimeError(f"cannot connect to the scheduler at {args.scheduler}: "
                               f"{' '.join(str(err).split())}") from err
        workers = sorted(live_workers(client))
        if not workers:
            raise RuntimeError(f"the cluster at {args.scheduler} has no workers")
        threads = client.nthreads()
        desc = (f"existing cluster at {args.scheduler}: {len(workers)} worker(s), "
                f"{sum(threads.values())} thread(s)")
        return client, workers, desc
    cluster = _start_cluster(args, device, out, stack)
    client = stack.enter_context(Client(cluster))
    n = len(cluster.workers)
    client.wait_for_workers(n, timeout=120)
    workers = sorted(live_workers(client))
    desc = f"{type(cluster).__name__}, {n} worker process(es) x 1 thread"
    return client, workers, desc


def _training_page(client: Any) -> str:
    """The URL of the cluster's Fluid Training page, served from now on, or why there is
    none."""
    from .distributed.launch.dashboard.page import ROUTE
    from .distributed.launch.dashboard.plugin import ensure_dashboard

    try:
        link = client.dashboard_link
    except KeyError:  # a scheduler without a dashboard has no "dashboard" service
        link = None
    if not link:
        return ("none: the scheduler serves no dashboard (it needs bokeh>=3.1, and a "
                "dashboard address)")
    ensure_dashboard(client)  # the page is there before the first job
    return f"{link.rsplit('/', 1)[0]}{ROUTE} (the Fluid Training page, while the demo runs)"


def _make_data(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    from .datasets import reference_blobs

    X, y = reference_blobs(args.samples, n_features=N_FEATURES, n_classes=N_CLASSES,
                           seed=args.seed)
    n_test = max(1, round(args.samples * TEST_FRACTION))
    return X[:-n_test], y[:-n_test], X[-n_test:], y[-n_test:]


def _scatter_chunks(client: Any, workers: Sequence[str], X: Any, y: Any, n_chunks: int
                    ) -> tuple[Any, Any]:
    """X and y as dask arrays of ``n_chunks`` row chunks, chunk ``i`` of both on one worker.

    Scattering the chunks (instead of ``da.from_array``) keeps 50 MB of data out of the task
    graph, and places the data the way a loader running on the cluster would: spread over the
    workers, X and y of one chunk together.
    """
    import dask
    import dask.array as da

    bounds = np.linspace(0, len(y), n_chunks + 1).astype(int)
    xs, ys = [], []
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        where = [workers[i % len(workers)]]
        fx, fy = client.scatter([X[lo:hi], y[lo:hi]], workers=where, hash=False)
        xs.append(da.from_delayed(dask.delayed(fx), shape=(hi - lo, X.shape[1]), dtype=X.dtype))
        ys.append(da.from_delayed(dask.delayed(fy), shape=(hi - lo,), dtype=y.dtype))
    return da.concatenate(xs), da.concatenate(ys)


def _wrap_ops(types: list[str], indent: str, width: int = 96) -> list[str]:
    """Op types as comma-separated lines, with runs of one type folded (``recv x3``)."""
    folded: list[str] = []
    for t in types:
        if folded and folded[-1].split(" x")[0] == t:
            head, _, count = folded[-1].partition(" x")
            folded[-1] = f"{head} x{int(count or 1) + 1}"
        else:
            folded.append(t)
    lines, line = [], ""
    for item in folded:
        piece = item if not line else f", {item}"
        if line and len(indent) + len(line) + len(piece) > width:
            lines.append(indent + line + ",")
            piece = item
            line = ""
        line += piece
    if line:
        lines.append(indent + line)
    return lines


_BLOCK_LINE = re.compile(r"^(\s*)block (\d+): (.*)$")


def _fold_blocks(lines: list[str]) -> list[str]:
    """Fold runs of optimize blocks with the same ops: ``blocks 1-4: sum, scale, adam``."""
    out: list[str] = []
    run: list[tuple[str, int, str]] = []

    def flush() -> None:
        if run:
            indent, first, ops = run[0]
            last = run[-1][1]
            label = f"block {first}" if first == last else f"blocks {first}-{last}"
            out.append(f"{indent}{label}: {ops}")
            run.clear()

    for line in lines:
        m = _BLOCK_LINE.match(line)
        if m and run and m.group(3) == run[-1][2] and int(m.group(2)) == run[-1][1] + 1:
            run.append((m.group(1), int(m.group(2)), m.group(3)))
            continue
        flush()
        if m:
            run.append((m.group(1), int(m.group(2)), m.group(3)))
        else:
            out.append(line)
    flush()
    return out


def _demo_network(hidden: Sequence[int], learning_rate: float, l2: float) -> tuple[Any, Any]:
    """The estimator's network for the demo data: ``x[64] → fc(h, relu)… → fc(10) →
    softmax_with_cross_entropy → mean``, L2 decay on the weights, Adam. Returns (main, startup).
    """
    from . import layers, optimizer, unique_name
    from .framework import Program, program_guard
    from .param_attr import ParamAttr
    from .regularizer import L2Decay

    main, startup = Program(), Program()
    decay = L2Decay(l2) if l2 > 0 else None
    with unique_name.guard(), program_guard(main, startup):
        h = layers.data(name="x", shape=[N_FEATURES], dtype="float32")
        y = layers.data(name="y", shape=[1], dtype="int64")
        for size in hidden:
            h = layers.fc(h, size, act="relu", param_attr=ParamAttr(regularizer=decay))
        logits = layers.fc(h, N_CLASSES, param_attr=ParamAttr(regularizer=decay))
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        optimizer.Adam(learning_rate).minimize(loss)
    return main, startup


def program_summary(mode: str, hidden: Sequence[int], learning_rate: float,
                    endpoints: Sequence[str], trainers: int, sync: bool = True,
                    dc_asgd: bool = False, l2: float = 0.0) -> str:
    """The demo network transpiled the way the runtime will run it, as printable lines.

    Parameters
    ----------
    mode : {"pserver", "collective", "nccl2", "local"}
    hidden : sequence of int
        Hidden layer sizes of the MLP (64 inputs, 10 classes, Adam).
    learning_rate : float
    endpoints : sequence of str
        pserver endpoints (pserver mode) or trainer endpoints (collective, nccl2); Dask worker
        addresses are accepted.
    trainers : int
    sync, dc_asgd : bool
        pserver mode only.
    l2 : float
        L2 decay of the weights (the estimator's ``alpha / batch_size``).

    Returns
    -------
    str
    """
    from .transpiler import DistributeTranspiler, DistributeTranspilerConfig, summarize

    main, startup = _demo_network(hidden, learning_rate, l2)
    params = main.all_parameters()
    n_params = sum(math.prod(p.shape) for p in params)
    lines = [f"network: x[{N_FEATURES}] -> "
             + " -> ".join(f"fc({h}, relu)" for h in hidden)
             + f" -> fc({N_CLASSES}) -> softmax_with_cross_entropy -> mean; Adam"
               f"{', L2 decay' if l2 > 0 else ''}; {len(params)} parameters, "
               f"{n_params:,} floats"]
    if mode == "local":
        types = [op.type for op in main.global_block().ops]
        lines.append(f"local program ({len(types)} ops, not transpiled):")
        lines += _wrap_ops(types, "  ")
        return "\n".join(lines)
    if mode == "pserver":
        config = DistributeTranspilerConfig()
        config.enable_dc_asgd = dc_asgd
        t = DistributeTranspiler(config)
        t.transpile(0, program=main, startup_program=startup,
                    pservers=",".join(endpoints), trainers=trainers, sync_mode=sync)
        trainer = t.get_trainer_program(wait_port=False)
        types = [op.type for op in trainer.global_block().ops]
        summary = _fold_blocks(summarize(t).splitlines())
        lines.append(f"DistributeTranspiler (pserver mode): {summary[0]}")
        lines += ["  " + line for line in summary[1:]]
        lines.append(f"  trainer program ({len(types)} ops):")
        lines += _wrap_ops(types, "    ")
        return "\n".join(lines)
    # collective and nccl2: the main program is not rewritten (Fluid's nccl2 transpile only
    # annotates it); the runtime all-reduces every gradient, fused into flat buffers.
    config = DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = DistributeTranspiler(config)
    eps = list(endpoints)
    t.transpile(0, program=main, startup_program=startup, trainers=",".join(eps),
                current_endpoint=eps[0])
    startup_types = [op.type for op in startup.global_block().ops]
    how = "NCCL all-reduce" if mode == "nccl2" else "all-reduce (ring on CPU, NCCL on GPU)"
    lines.append(f"DistributeTranspiler (nccl2 mode): {len(eps)} trainer(s); main program not "
                 f"rewritten; {len(params)} gradients ({n_params:,} floats) {how} each step")
    lines.append(f"  trainer startup ({len(startup_types)} ops):")
    lines += _wrap_ops(startup_types, "    ")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    device = _check_demo_args(args)
    _quiet_dask()
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    # Small GEMMs run fastest on one BLAS thread (the benchmarks' setting), and a multi-threaded
    # BLAS spinning on cores that the workers also use made local mode 7x slower on 2 cores.
    # A demo of a few epochs never converges in scikit-learn's sense: no warning for that.
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return _run_demo(args, device, out)


def _run_demo(args: argparse.Namespace, device: str, out: TextIO) -> int:
    timer = _Timer()
    t_start = time.perf_counter()
    with timer("data"):
        X_train, y_train, X_test, y_test = _make_data(args)
    params = dict(hidden_layer_sizes=tuple(args.hidden), solver="adam", alpha=ALPHA,
                  learning_rate_init=args.learning_rate, batch_size=args.batch_size,
                  max_iter=args.epochs, random_state=args.seed, mode=args.mode)
    if args.mode == "pserver":
        params.update(n_pservers=args.pservers, sync_mode=args.sync,
                      enable_dc_asgd=args.dc_asgd)
    if args.mode != "local":
        params.update(n_trainers=args.trainers)
    params["device"] = device
    # the parameters that shape this run; defaults that change nothing are left out
    quiet = {"random_state": None, "alpha": ALPHA, "n_trainers": None, "sync_mode": True,
             "enable_dc_asgd": False, "device": "cpu"}
    shown = ", ".join(f"{k}={v!r}" for k, v in params.items()
                      if k not in quiet or v != quiet[k])
    print(f"{PROG} demo: MLPClassifier({shown})", file=out)
    print(f"  data: reference blobs, {args.samples:,} samples x {N_FEATURES} features, "
          f"{N_CLASSES} classes; train {len(y_train):,}, test {len(y_test):,}", file=out)

    with contextlib.ExitStack() as stack:
        client, workers = None, []
        if args.mode != "local":
            with timer("cluster"):
                client, workers, desc = _connect(args, device, out, stack)
            print(f"  cluster: {desc} ({timer.marks['cluster']:.1f} s to start)", file=out)
            for w in workers:
                print(f"    {w}", file=out)
            if args.dashboard is not None:
                print(f"  dashboard: {_training_page(client)}", file=out, flush=True)
        else:
            print("  cluster: none (local mode trains in this process)", file=out)
        n_trainers = args.trainers or (min(len(workers), TRAIN_CHUNKS) if workers else 1)
        if args.mode == "pserver":
            # the runtime's placement: the first workers, or labels when there are more
            # pservers than workers (several shards then share a worker)
            endpoints = (workers[:args.pservers] if len(workers) >= args.pservers
                         else [f"pserver-{i}:{6174 + i}" for i in range(args.pservers)])
        else:
            endpoints = (workers[:n_trainers] if len(workers) >= n_trainers
                         else [f"127.0.0.1:{6170 + i}" for i in range(n_trainers)])
        print("\nTranspiled programs (what each process will run):", file=out)
        print(program_summary(args.mode, args.hidden, args.learning_rate, endpoints,
                              n_trainers, sync=args.sync, dc_asgd=args.dc_asgd,
                              l2=ALPHA / args.batch_size)
              .replace("\n", "\n  ").join(["  ", ""]), file=out)

        from . import MLPClassifier

        if client is not None:
            X_fit, y_fit = _scatter_chunks(client, workers, X_train, y_train, TRAIN_CHUNKS)
            X_eval, y_eval = _scatter_chunks(client, workers, X_test, y_test, 2)
            params["client"] = client
            kind = f"dask arrays, {X_fit.numblocks[0]} training chunks"
        else:
            X_fit, y_fit, X_eval, y_eval = X_train, y_train, X_test, y_test
            kind = "numpy arrays"
        clf = MLPClassifier(verbose=bool(args.progress), **params)
        print(f"\nTraining ({args.epochs} epoch(s), batch {args.batch_size}, {kind}):",
              file=out, flush=True)
        try:
            with timer("fit"):
                clf.fit(X_fit, y_fit)
            with timer("evaluate"):
                pred = clf.predict(X_eval)
                lazy = type(pred).__module__.startswith("dask")
                accuracy = float(((pred == y_eval).mean()).compute() if lazy
                                 else (pred == y_eval).mean())
        except UsageError:
            raise
        except (TypeError, ValueError) as err:
            # the estimators and runtimes check their arguments before sending any work, so
            # these are configurations that cannot run (e.g. more trainers than workers)
            raise UsageError(f"{PROG} demo: {type(err).__name__}: "
                             f"{' '.join(str(err).split())}") from err
        except Exception as err:
            raise _TrainingFailed(str(err)) from err
        _print_results(clf, args, timer, t_start, accuracy, pred, lazy, len(y_train), out)
    return 0


def _print_results(clf: Any, args: argparse.Namespace, timer: _Timer, t_start: float,
                   accuracy: float, pred: Any, lazy: bool, n_train: int, out: TextIO) -> None:
    curve = list(getattr(clf, "loss_curve_", []) or [])
    epoch_times = list(getattr(clf, "epoch_times_", []) or [])
    for i, loss in enumerate(curve):
        line = f"  epoch {i + 1:>3}/{len(curve)}  loss {loss:.4f}"
        if i < len(epoch_times) and epoch_times[i] > 0:
            line += f"  {n_train / epoch_times[i]:>9,.0f} samples/s  {epoch_times[i]:.1f} s"
        print(line, file=out)
    fit_s = timer.marks["fit"]
    epochs_run = int(getattr(clf, "n_iter_", len(curve) or args.epochs))
    samples = n_train * epochs_run
    summary = (getattr(clf, "fit_summary_", "") or "").splitlines()
    # the transpile part of the runtime's summary was printed before training; what is new
    # is where each role ran and what it did
    runtime = [line for line in summary if line.split(" ", 1)[0] in ("pserver", "trainer",
                                                                     "rank", "backend")]
    if summary:
        print("\nWhat ran where:", file=out)
        for line in runtime or summary:
            print(f"  {line}", file=out)
    print("\nResults:", file=out)
    print(f"  test accuracy  {accuracy:.4f} ({_pct(accuracy)} of {len(pred):,} held-out "
          f"samples; predict returned {'a dask array' if lazy else 'a numpy array'})",
          file=out)
    loop_rate = getattr(clf, "samples_per_s_", None)
    if loop_rate:  # distributed: the trainers' own count and clock, as the progress bar shows
        print(f"  throughput     {loop_rate:,.0f} samples/s in the training loop ({samples:,} "
              f"samples; the fit took {fit_s:.1f} s with data placement and start-up, "
              f"{samples / fit_s:,.0f} samples/s overall)", file=out)
    else:
        print(f"  throughput     {samples / fit_s:,.0f} samples/s ({samples:,} samples in "
              f"{fit_s:.1f} s of fit)", file=out)
    elapsed = time.perf_counter() - t_start
    parts = ", ".join(f"{name} {secs:.1f} s" for name, secs in timer.marks.items())
    print(f"  elapsed        {elapsed:.1f} s ({parts})", file=out, flush=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
