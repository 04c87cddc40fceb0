"""The examples run as they are (with small sizes): each script in a subprocess, and the notebook's
code cells concatenated in order into one script."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.slow


def _run_python(args: list[str], cwd: pathlib.Path, timeout: float = 240
                ) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def _value(out: str, prefix: str) -> float:
    line = next(x for x in out.splitlines() if x.startswith(prefix))
    return float(line[len(prefix):].split()[0])


def test_fluid_style_example():
    proc = _run_python([str(EXAMPLES / "fluid_style.py"), "--samples", "10000", "--epochs", "2"],
                       cwd=EXAMPLES)
    out = proc.stdout
    assert out.startswith("transpiled: 2 pserver(s), 2 trainer(s), sync")
    assert "block 1: sum, scale, adam, scale, scale" in out
    assert "trainer 0 finished epoch 2" in out
    assert "epoch 2: loss " in out
    assert "samples/s in the training loop" in out
    assert _value(out, "test accuracy: ") > 0.7


def test_estimator_example():
    proc = _run_python([str(EXAMPLES / "estimator.py"), "--samples", "10000", "--epochs", "2"],
                       cwd=EXAMPLES)
    out = proc.stdout
    assert "fit: 2 epochs" in out
    assert "classes_: ['class-0', 'class-1', 'class-2'] ... (10 classes)" in out
    assert "predict returned dask.array.core.Array with" in out
    assert "first predictions: ['class-" in out
    assert _value(out, "test accuracy (score): ") > 0.7
    assert _value(out, "unpickled estimator, numpy input, no cluster: accuracy ") > 0.7


def _notebook_script(path: pathlib.Path, replacements: dict[str, str]) -> str:
    nb = json.loads(path.read_text())
    assert nb["nbformat"] == 4
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        assert cell["outputs"] == [] and cell["execution_count"] is None, "outputs are stored"
        source = "".join(cell["source"])
        if "plot_loss_curve" in source and not has_matplotlib:
            continue  # the plot is optional (the 'plot' extra); everything else must run
        cells.append(source)
    script = "\n\n".join(cells)
    for old, new in replacements.items():
        assert old in script, f"the notebook no longer contains {old!r}"
        script = script.replace(old, new)
    return script


def test_notebook_runs(tmp_path):
    small = {"N_SAMPLES = 40_000": "N_SAMPLES = 10_000", "EPOCHS = 5": "EPOCHS = 2"}
    script = _notebook_script(EXAMPLES / "notebook.ipynb", small)
    # Run as "python -c": like a Jupyter kernel, the code has no __main__ file, so the worker
    # processes that LocalCluster spawns do not re-run it (a script file would need an
    # ``if __name__ == "__main__":`` guard, which notebooks never have).
    proc = _run_python(["-c", script], cwd=tmp_path)
    assert "dask.array" in proc.stdout
    assert _value(proc.stdout, "test accuracy: ") > 0.7
    # verbose=True drew a progress bar (tqdm writes to stderr outside Jupyter)
    assert "MLPClassifier (pserver)" in proc.stderr and "2/2" in proc.stderr
