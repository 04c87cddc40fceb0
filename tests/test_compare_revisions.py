"""benchmarks/compare_revisions.py: the figures it reads, the ratios it reports, and one real
run of a benchmark against a worktree of HEAD."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "compare_revisions.py"


def _module():
    spec = importlib.util.spec_from_file_location("compare_revisions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_figures_follow_paths_and_wildcards_and_skip_what_is_not_a_number():
    cr = _module()
    doc = {"samples_per_s": 10.0, "flag": True, "name": "x",
           "networks": {"a": {"local_samples_per_s": 1, "other": 2},
                        "b": {"local_samples_per_s": 3.5}},
           "results": {"empty round trip": 0.2, "ring": {"nested": 1.0}}}
    got = cr.figures(doc, [("samples_per_s", cr.HIGHER), ("flag", cr.HIGHER),
                           ("networks/*/local_samples_per_s", cr.HIGHER),
                           ("results/*", cr.LOWER), ("missing/path", cr.LOWER)])
    assert got == {"samples_per_s": (10.0, "higher"),
                   "networks/a/local_samples_per_s": (1.0, "higher"),
                   "networks/b/local_samples_per_s": (3.5, "higher"),
                   "results/empty round trip": (0.2, "lower")}


def test_speed_ratio_is_above_one_when_the_current_tree_is_faster_either_way():
    cr = _module()
    rows = cr.compare({"sps": [100.0, 120.0, 110.0], "ms": [2.0], "gone": [1.0]},
                      {"sps": [150.0], "ms": [2.1], "new": [3.0]},
                      {"sps": "higher", "ms": "lower", "gone": "lower", "new": "higher"},
                      threshold=0.10)
    by = {r["figure"]: r for r in rows}
    assert by["sps"]["base"] == 110.0 and by["sps"]["speed_ratio"] == pytest.approx(150 / 110)
    assert by["sps"]["verdict"] == "faster"
    assert by["ms"]["speed_ratio"] == pytest.approx(2.0 / 2.1) and by["ms"]["verdict"] == "same"
    assert by["gone"]["current"] is None and by["gone"]["verdict"] is None
    assert by["new"]["base"] is None and by["new"]["speed_ratio"] is None
    slower = cr.compare({"ms": [1.0]}, {"ms": [1.5]}, {"ms": "lower"}, threshold=0.10)
    assert slower[0]["verdict"] == "SLOWER"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_bad_arguments_are_refused_before_anything_runs():
    bad_rev = _run("--base", "no-such-revision-xyz")
    assert bad_rev.returncode == 2 and "is not a commit of this repository" in bad_rev.stderr
    bad_name = _run("--base", "HEAD", "--only", "local,nonsense")
    assert bad_name.returncode == 2 and "unknown benchmarks ['nonsense']" in bad_name.stderr


@pytest.mark.slow
def test_the_local_benchmark_against_a_worktree_of_head(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of the repository (it makes a worktree)")
    before = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True,
                            text=True).stdout
    out = tmp_path / "compare.json"
    proc = _run("--base", "HEAD", "--only", "local", "--rounds", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "round 1, local, base: ok" in proc.stdout
    assert "round 1, local, current: ok" in proc.stdout
    report = json.loads(out.read_text())
    (row,) = report["benchmarks"]["local"]["rows"]
    assert row["figure"] == "samples_per_s" and row["better"] == "higher"
    assert row["base"] > 0 and row["current"] > 0 and row["speed_ratio"] > 0
    # the worktree is gone again
    after = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True,
                           text=True).stdout
    assert after == before
