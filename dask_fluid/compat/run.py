"""``dask-fluid run SCRIPT ARGS...``: ``python SCRIPT ARGS...`` with ``paddle`` resolving to
dask_fluid, in this process and in every Python process the script starts.

This process calls :func:`dask_fluid.compat.install`; child processes get the directory of
:mod:`dask_fluid.compat._autoinstall` first on PYTHONPATH, whose ``sitecustomize`` does the same
at their start-up (and then runs any other ``sitecustomize``). The script runs as ``__main__``
with ``sys.argv == [SCRIPT, *ARGS]`` and its directory first on ``sys.path``, like ``python
SCRIPT``; its exit status is the command's.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from types import TracebackType

from . import install

__all__ = ["AUTOINSTALL_DIR", "export_autoinstall", "run_module", "run_script"]

#: the directory whose sitecustomize installs the compat layer in child processes
AUTOINSTALL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autoinstall")


def export_autoinstall(environ: dict[str, str] | None = None) -> None:
    """Put :data:`AUTOINSTALL_DIR` first on ``PYTHONPATH`` in ``environ`` (default
    ``os.environ``), so that Python processes started from here resolve ``paddle`` too."""
    environ = os.environ if environ is None else environ
    parts = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if AUTOINSTALL_DIR not in parts:
        environ["PYTHONPATH"] = os.pathsep.join([AUTOINSTALL_DIR, *parts])


def _exit_status(code: object) -> int:
    # what the interpreter does with SystemExit's argument
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _script_frames(tb: TracebackType | None, script: str) -> TracebackType | None:
    """The traceback from the script's first frame on (no runpy / dask_fluid frames)."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
        tb = tb.tb_next
    return tb


def run_script(path: str, args: Sequence[str] = ()) -> int:
    """Run the Python file ``path`` as ``python path *args`` would, with compat installed.

    Meant to be the main program of a process (``dask-fluid run``): it installs the compat
    layer, exports it to child processes through ``PYTHONPATH``, and leaves ``sys.argv`` and
    ``sys.path`` as the script left them.

    Parameters
    ----------
    path : str
        The script (a directory or zip file with ``__main__.py`` works too).
    args : sequence of str
        Its command-line arguments, passed untouched.

    Returns
    -------
    int
        The exit status: 0, the script's ``sys.exit`` code, 1 when it raised (the traceback is
        printed on stderr, as Python prints it), 2 when ``path`` does not exist, 130 on Ctrl-C.
    """
    script = os.path.abspath(path)
    if not os.path.exists(script):
        print(f"dask-fluid run: can't open file {script!r}: [Errno 2] No such file or directory",
              file=sys.stderr)
        return 2
    install()
    export_autoinstall()
    # no restoring afterwards: threads and atexit handlers the script left behind still run
    # with its sys.argv and sys.path, as under python
    sys.argv = [path, *args]
    if os.path.isfile(script):
        # python puts the script's (symlink-resolved) directory in place of sys.path[0];
        # run_path adds directories and zip files itself
        sys.path[:1] = [os.path.dirname(os.path.realpath(script))]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return _exit_status(exc.code)
    except KeyboardInterrupt as exc:
        sys.stdout.flush()
        traceback.print_exception(type(exc), exc, _script_frames(exc.__traceback__, script))
        return 130
    except BaseException as exc:  # the script's own error: report it as python would
        sys.stdout.flush()
        traceback.print_exception(type(exc), exc, _script_frames(exc.__traceback__, script))
        return 1
    finally:
        sys.stdout.flush()
    return 0


def run_module(name: str, args: Sequence[str] = ()) -> int:
    """Run the module ``name`` as ``python -m name *args`` would, with compat installed: a
    Paddle name (``paddle.distributed.launch``) runs the dask_fluid module standing for it.

    Returns
    -------
    int
        The exit status, as :func:`run_script`'s.
    """
    from . import _target  # noqa: PLC0415 - the Paddle-name -> module rule of the finder

    install()
    export_autoinstall()
    try:
        target = _target(name) if name == "paddle" or name.startswith("paddle.") else name
    except ModuleNotFoundError as err:
        print(f"dask-fluid run: {err}", file=sys.stderr)
        return 1
    sys.argv = [name, *args]
    sys.path[:1] = [os.getcwd()]  # python -m puts the working directory first
    try:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return _exit_status(exc.code)
    except ImportError as err:
        print(f"dask-fluid run: No module named {name!r} ({err})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
    return 0
