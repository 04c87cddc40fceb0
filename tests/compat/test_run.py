"""``dask-fluid run SCRIPT ARGS``: the script runs as under python, paddle resolving to
dask_fluid in it and in the Python processes it starts; exit codes and tracebacks pass through.
All real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# a Fluid script: builds and trains a tiny program through paddle.fluid, plain and compiled,
# then starts a child the way test_dist_base.py does (sys.executable, an env with only PATH,
# PYTHONPATH and LD_LIBRARY_PATH) that imports paddle.fluid too
FLUID_SCRIPT = """
import json, os, subprocess, sys
import numpy as np
import paddle
import paddle.fluid as fluid
from paddle.fluid import compiler
import dask_fluid

x = fluid.layers.data(name="x", shape=[3])
y = fluid.layers.data(name="y", shape=[1])
loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
fluid.optimizer.SGD(0.1).minimize(loss)
exe = fluid.Executor(fluid.CPUPlace())
fluid.default_startup_program().random_seed = 1
exe.run(fluid.default_startup_program())
feeder = fluid.DataFeeder([x, y], fluid.CPUPlace())
batch = [([1.0, 2.0, 3.0], [1.0]), ([0.0, 1.0, 0.0], [0.0])]
plain, = exe.run(feed=feeder.feed(batch), fetch_list=[loss])
binary = compiler.CompiledProgram(fluid.default_main_program()).with_data_parallel(
    loss_name=loss.name)
compiled, = exe.run(binary, feed=feeder.feed(batch), fetch_list=[loss.name])

env = {k: os.getenv(k, "") for k in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")}
child = subprocess.run(
    [sys.executable, "-c", "import paddle.fluid as f, dask_fluid; "
     "print(f.layers.fc is dask_fluid.layers.fc, f.core.is_compiled_with_cuda() in (0, 1))"],
    env=env, capture_output=True, text=True, timeout=120)
print(json.dumps({
    "same": fluid.Executor is dask_fluid.Executor, "argv": sys.argv, "name": __name__,
    "path0": sys.path[0], "losses": [float(plain[0]), float(compiled[0])],
    "child": child.stdout.strip(), "child_err": child.stderr[-2000:], "rc": child.returncode,
}))
"""


def _run(*args: str, cwd: str | None = None, env: dict | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dask_fluid.cli", "run", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **(env or {})})


def _write(path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_fluid_script_runs_and_its_children_resolve_paddle(tmp_path):
    script = _write(tmp_path / "train.py", FLUID_SCRIPT)
    out = _run(script, "--role", "pserver", "--sync_mode", "-h", env={"CPU_NUM": "1"})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["same"] is True and report["name"] == "__main__"
    # arguments pass through untouched, options that look like dask-fluid's included
    assert report["argv"][1:] == ["--role", "pserver", "--sync_mode", "-h"]
    assert report["path0"] == str(tmp_path.resolve())
    plain, compiled = report["losses"]
    assert plain > compiled > 0  # one SGD step between the two runs lowered the loss
    assert report["rc"] == 0, report["child_err"]
    assert report["child"] == "True True"


def test_script_dir_first_on_sys_path(tmp_path):
    (tmp_path / "helper_mod.py").write_text("VALUE = 42\n")
    script = _write(tmp_path / "main.py", "import helper_mod\nprint(helper_mod.VALUE)\n")
    out = _run(script, cwd=str(tmp_path.parent))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "42"


@pytest.mark.parametrize("body, code, stderr", [
    ("import sys\nsys.exit(3)\n", 3, ""),
    ("import sys\nsys.exit()\n", 0, ""),
    ("import sys\nsys.exit('bad config')\n", 1, "bad config"),
])
def test_exit_status_passes_through(tmp_path, body, code, stderr):
    out = _run(_write(tmp_path / "s.py", body))
    assert out.returncode == code
    assert out.stderr.strip() == stderr


def test_exception_prints_a_normal_traceback_and_exits_1(tmp_path):
    script = _write(tmp_path / "boom.py", """
        def fail():
            raise ValueError("boom")

        fail()
    """)
    out = _run(script)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    # starts at the script, as python's does: no runpy or dask_fluid frames
    assert f'File "{script}", line 5, in <module>' in lines[1]
    assert "runpy" not in out.stderr and "dask_fluid" not in out.stderr
    assert lines[-1] == "ValueError: boom"


def test_syntax_error_and_missing_script(tmp_path):
    out = _run(_write(tmp_path / "bad.py", "def (:\n"))
    assert out.returncode == 1 and "SyntaxError" in out.stderr
    out = _run(str(tmp_path / "absent.py"))
    assert out.returncode == 2 and "can't open file" in out.stderr
    out = subprocess.run([sys.executable, "-m", "dask_fluid.cli", "run"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "SCRIPT is required" in out.stderr


def test_other_sitecustomize_still_runs_in_children(tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "sitecustomize.py").write_text("import os\nos.environ['SITE_MARK'] = 'ran'\n")
    script = _write(tmp_path / "parent.py", """
        import os, subprocess, sys
        code = ("import os, paddle.fluid as f, dask_fluid; "
                "print(os.environ.get('SITE_MARK'), f.Executor is dask_fluid.Executor)")
        env = {k: os.getenv(k, "") for k in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")}
        child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True)
        print(child.stdout.strip(), child.stderr)
    """)
    out = _run(script, env={"PYTHONPATH": str(site_dir)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ran True"


def test_children_that_never_import_paddle_do_not_import_dask_fluid(tmp_path):
    script = _write(tmp_path / "parent.py", """
        import subprocess, sys
        code = "import sys; print('dask_fluid' in sys.modules)"
        print(subprocess.run([sys.executable, "-c", code], capture_output=True,
                             text=True).stdout.strip())
    """)
    out = _run(script)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_console_script_entry_point(tmp_path):
    import pathlib
    import shutil

    here = pathlib.Path(sys.executable).parent / "dask-fluid"
    found = str(here) if here.exists() else shutil.which("dask-fluid")
    if not found:
        pytest.skip("the dask-fluid console script is not installed (pip install -e .)")
    (tmp_path / "helper_mod.py").write_text("VALUE = 7\n")
    script = _write(tmp_path / "main.py", """
        import sys, helper_mod
        import paddle.fluid as fluid
        print(helper_mod.VALUE, fluid.__name__, sys.argv[1:])
    """)
    out = subprocess.run([found, "run", script, "--trainers", "2"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "7 dask_fluid.compat._fluid ['--trainers', '2']"


def test_run_m_runs_a_module_as_python_m_with_paddle_resolving(tmp_path):
    # a module of the working directory (python -m puts it first on sys.path)
    _write(tmp_path / "trainmod.py", """
        import json, sys
        import paddle.fluid as fluid
        import dask_fluid
        print(json.dumps({"same": fluid.Executor is dask_fluid.Executor, "argv": sys.argv[1:],
                          "name": __name__}))
        sys.exit(4)
        """)
    proc = _run("-m", "trainmod", "--lr", "0.1", cwd=str(tmp_path))
    assert proc.returncode == 4, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"same": True, "argv": ["--lr", "0.1"], "name": "__main__"}
    proc = _run("-m")
    assert proc.returncode == 2 and "MODULE is required" in proc.stderr
    proc = _run("-m", "paddle.fluid.no_such_module")
    assert proc.returncode == 1 and "no_such_module" in proc.stderr
