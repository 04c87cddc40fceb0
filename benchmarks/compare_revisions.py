"""The benchmarks of this tree against an earlier revision: did anything get slower?

Run: ``python benchmarks/compare_revisions.py --base REV [--only local,pserver] [--rounds 2]``.
Writes ``benchmarks/results/compare_revisions.json`` (or ``--out``) and prints a table.

Each benchmark script of *this* tree runs twice per round: once importing ``dask_fluid`` from
a ``git worktree`` of ``REV`` (through ``PYTHONPATH``, which the LocalCluster's worker processes
inherit) and once from this tree, so both sides run the same measurement and only the library
differs. The order alternates between rounds (base first, then this tree first) so that a
machine getting busier over the run does not favour one side. Each script writes its JSON into
its own copy of ``benchmarks/``; the headline figures below are read from it, the median over
rounds is kept, and each row says how this tree compares: the ratio is this tree's figure over
the base's where more is better and the base's over this tree's where less is better, so above
1 is faster. Rows beyond ``--threshold`` either way are marked; nothing is asserted (these
machines are shared and noisy: rerun before believing a row).

A benchmark that needs an API the base revision lacks fails on that side: its rows say so and
the other benchmarks go on. The worktree is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
HIGHER, LOWER = "higher", "lower"

#: name -> (script arguments, the JSON it writes, headline figures: (path, better));
#: a path is "/"-separated keys, ``*`` matches any one key
BENCHMARKS: dict[str, tuple[list[str], str, list[tuple[str, str]]]] = {
    "local": (["bench_local.py", "--steps", "1000"], "local.json",
              [("samples_per_s", HIGHER)]),
    "collective": (["bench_collective.py", "--steps", "1000", "--repeats", "3"],
                   "collective.json",
                   [("collective_ring_2/samples_per_s", HIGHER), ("median_ratio", HIGHER)]),
    "rpc": (["bench_rpc.py", "--repeat", "3"], "rpc.json", [("results/*", LOWER)]),
    "pserver": (["bench_pserver.py", "--steps", "800", "--repeat", "3"], "pserver.json",
                [("pserver_samples_per_s", HIGHER), ("ring_samples_per_s", HIGHER),
                 ("local_samples_per_s", HIGHER), ("pserver_over_local", HIGHER),
                 ("pserver_over_ring", HIGHER), ("big_model/sync_step_ms", LOWER),
                 ("big_model/step_over_floor", LOWER)]),
    "models": (["bench_models.py", "--steps", "30", "--repeat", "2"], "models.json",
               [("networks/*/local_samples_per_s", HIGHER),
                ("networks/*/pserver_samples_per_s", HIGHER)]),
    "shard_update": (["bench_shard_update.py", "--rounds", "3000", "--repeat", "3"],
                     "shard_update.json", [("models/*/fused_us", LOWER)]),
}


def figures(doc: dict, wanted: list[tuple[str, str]]) -> dict[str, tuple[float, str]]:
    """``path -> (value, better)`` for every numeric leaf of ``doc`` a wanted path matches."""
    out: dict[str, tuple[float, str]] = {}

    def walk(node: object, keys: list[str], pattern: list[str], better: str) -> None:
        if not pattern:
            if isinstance(node, int | float) and not isinstance(node, bool):
                out["/".join(keys)] = (float(node), better)
            return
        if not isinstance(node, dict):
            return
        for key, child in node.items():
            if pattern[0] in ("*", str(key)):
                walk(child, [*keys, str(key)], pattern[1:], better)

    for path, better in wanted:
        walk(doc, [], path.split("/"), better)
    return out


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[pathlib.Path]:
    """A detached worktree of ``rev``, removed afterwards."""
    where = pathlib.Path(tempfile.mkdtemp(prefix="dask-fluid-base-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                    str(where), rev], check=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)],
                       check=False)
        shutil.rmtree(where.parent, ignore_errors=True)


def run_side(scripts: pathlib.Path, library: pathlib.Path, argv: list[str], json_name: str,
             timeout_s: float) -> tuple[dict | None, str]:
    """Run one benchmark with ``dask_fluid`` from ``library``: (its JSON or None, why not)."""
    out = scripts / "results" / json_name
    out.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(library), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        proc = subprocess.run([sys.executable, *argv], cwd=scripts, env=env, timeout=timeout_s,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return None, f"ran past {timeout_s:.0f} s"
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"exit {proc.returncode}: {tail[0][:200]}"
    return json.loads(out.read_text()), ""


def compare(base: dict[str, list[float]], current: dict[str, list[float]],
            better: dict[str, str], threshold: float) -> list[dict]:
    """One row per figure: medians, the speed ratio (> 1: this tree is faster) and a verdict."""
    rows = []
    for key in sorted(set(base) | set(current)):
        b = statistics.median(base[key]) if base.get(key) else None
        c = statistics.median(current[key]) if current.get(key) else None
        ratio = verdict = None
        if b is not None and c is not None and b > 0 and c > 0:
            ratio = c / b if better[key] == HIGHER else b / c
            verdict = ("faster" if ratio > 1 + threshold else
                       "SLOWER" if ratio < 1 - threshold else "same")
        rows.append({"figure": key, "better": better[key], "base": b, "current": c,
                     "speed_ratio": ratio, "verdict": verdict})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--only", default=",".join(BENCHMARKS),
                        help=f"comma-separated benchmarks (default: all of {list(BENCHMARKS)})")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threshold", type=float, default=0.10,
                        help="mark rows this far from 1 (default 0.10)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per script run")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "compare_revisions.json",
                        help="where the JSON goes (default: %(default)s)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; choose from {list(BENCHMARKS)}")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: it must be >= 1")
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--short",
                          f"{args.base}^{{commit}}"], capture_output=True, text=True)
    if rev.returncode != 0:
        parser.error(f"--base {args.base!r} is not a commit of this repository")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True,
                                text=True).stdout.strip())
    values: dict[str, dict[str, dict[str, list[float]]]] = {}
    better: dict[str, dict[str, str]] = {}
    failures: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    with worktree(rev.stdout.strip()) as base_tree, \
            tempfile.TemporaryDirectory(prefix="dask-fluid-bench-") as tmp:
        sides = {"base": (base_tree, pathlib.Path(tmp) / "base"),
                 "current": (ROOT, pathlib.Path(tmp) / "current")}
        for _, scripts in sides.values():  # this tree's scripts on both sides
            shutil.copytree(HERE, scripts, ignore=shutil.ignore_patterns("results",
                                                                         "__pycache__"))
        for r in range(args.rounds):
            order = ["base", "current"] if r % 2 == 0 else ["current", "base"]
            for name in names:
                argv_, json_name, wanted = BENCHMARKS[name]
                for side in order:
                    library, scripts = sides[side]
                    doc, why = run_side(scripts, library, argv_, json_name, args.timeout)
                    print(f"round {r + 1}, {name}, {side}: {'ok' if doc else why}", flush=True)
                    if doc is None:
                        failures.setdefault(name, []).append(f"{side}: {why}")
                        continue
                    for key, (value, how) in figures(doc, wanted).items():
                        values.setdefault(name, {}).setdefault(side, {}).setdefault(
                            key, []).append(value)
                        better.setdefault(name, {})[key] = how
    report = {"base": rev.stdout.strip(), "current": head + (" (uncommitted changes)"
                                                             if dirty else ""),
              "rounds": args.rounds, "threshold": args.threshold,
              "wall_s": time.perf_counter() - t0, "benchmarks": {}}
    print(f"\n{'benchmark':<11} {'figure':<52} {'base':>11} {'current':>11} {'speed':>6}  "
          f"(base {report['base']}, current {report['current']}; speed > 1: current faster)")
    for name in names:
        got = values.get(name, {})
        rows = compare(got.get("base", {}), got.get("current", {}), better.get(name, {}),
                       args.threshold)
        report["benchmarks"][name] = {"rows": rows, "failures": failures.get(name, [])}
        for row in rows:
            def cell(v: float | None) -> str:
                return "-" if v is None else f"{v:.4g}"
            speed = "-" if row["speed_ratio"] is None else f"{row['speed_ratio']:.2f}"
            print(f"{name:<11} {row['figure'][:52]:<52} {cell(row['base']):>11} "
                  f"{cell(row['current']):>11} {speed:>6}  {row['verdict'] or ''}")
        for why in failures.get(name, []):
            print(f"{name:<11} failed on {why}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out} ({report['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
