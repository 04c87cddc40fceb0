"""The examples run as they are (with small sizes): each script in a subprocess, and the notebook
in a real IPython kernel (nbclient)."""

from __future__ import annotations

import os
import pathlib
import re
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
    assert "block 1: sum, scale, adam\n" in out
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


def _widget_values(nb) -> list[str]:
    """The ``value`` of every widget whose state the notebook stored (nbclient stores it)."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return [str(m["state"].get("value", "")) for m in state.get("state", {}).values()]


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def test_notebook_runs_in_a_kernel(tmp_path):
    """examples/notebook.ipynb, top to bottom in a real IPython kernel (issue 17): the live
    widget drew, its samples/s agrees with the fit's, the loss curve plotted."""
    nbformat = pytest.importorskip("nbformat", reason="the test extra has nbformat")
    nbclient = pytest.importorskip("nbclient", reason="the test extra has nbclient")
    pytest.importorskip("ipykernel", reason="the test extra has ipykernel")
    pytest.importorskip("ipywidgets", reason="the test extra has ipywidgets")
    nb = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    small = {"N_SAMPLES = 40_000": "N_SAMPLES = 10_000", "EPOCHS = 5": "EPOCHS = 2"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, "outputs are stored"
            for old, new in small.items():
                cell.source = cell.source.replace(old, new)
    assert all(new in "".join(c.source for c in nb.cells) for new in small.values())
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}},
                                     store_widget_state=True)
    client.execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    fit = next(c for c in code if "clf.fit(" in c.source)
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for o in fit.outputs), "verbose=True drew no widget in the kernel"
    stats = [v for v in _widget_values(nb) if "data-samples-per-s" in v]
    assert stats, "the progress widget stored no numbers"
    shown = float(re.search(r'data-samples-per-s="([\d.]+)"', stats[-1]).group(1))
    curve = [v for v in _widget_values(nb) if "<polyline" in v]
    assert curve and "trainer 1" in curve[-1], "no live loss curve per trainer"
    out = "\n".join(_text(c) for c in code)
    line = next(x for x in out.splitlines() if x.startswith("samples/s in the training loop: "))
    reported = float(line.rsplit(" ", 1)[1].replace(",", ""))
    assert shown == pytest.approx(reported, rel=0.2)
    assert _value(out, "test accuracy: ") > 0.7
    plot = next(c for c in code if "plot_loss_curve(clf)" in c.source)
    assert any("image/png" in o.get("data", {}) for o in plot.outputs), "no loss-curve plot"
    assert "/individual-fluid-training" in out


def test_dygraph_digits_example():
    proc = _run_python([str(EXAMPLES / "dygraph_digits.py"), "--epochs", "6"], cwd=EXAMPLES)
    assert _value(proc.stdout, "test accuracy: ") > 0.85


def test_dygraph_digits_example_data_parallel_on_dask():
    # Fluid's launch style on Dask workers: two trainer processes, DataParallel over a ring
    proc = subprocess.run(
        [sys.executable, "-m", "dask_fluid.cli", "launch", "--mode", "nccl2", "--workers", "2",
         "--trainers", "2", str(EXAMPLES / "dygraph_digits.py"), "--epochs", "3"],
        capture_output=True, text=True, cwd=EXAMPLES, timeout=240,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    accs = {line.split("]")[0] + "]": float(line.rsplit(" ", 1)[1])
            for line in proc.stdout.splitlines() if "] test accuracy: " in line}
    assert set(accs) == {"[trainer0]", "[trainer1]"}, proc.stdout
    assert accs["[trainer0]"] == accs["[trainer1]"] > 0.8  # one model on both trainers
    # the launcher counted the dygraph steps (each minimize): 1500 digits in batches of 32,
    # 23 batches an epoch for each of the 2 trainers, 3 epochs
    assert "2 trainer(s) trained 4,416 samples in 69 step(s)" in proc.stdout + proc.stderr
