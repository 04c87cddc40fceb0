"""Generate docs/api.md from the code: public classes and functions, signatures, one-line summaries.

    python docs/gen_api.py            # rewrite docs/api.md
    python docs/gen_api.py --check    # exit 1 if docs/api.md is out of date

The public names of a module are its ``__all__`` (or, without one, the names that do not start
with an underscore and are defined in that module). For a class, its public methods and
properties defined in the class itself are listed too.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pathlib
import re
import sys
from typing import Any

OUT = pathlib.Path(__file__).with_name("api.md")

#: (module, heading blurb) in the order of the reference
MODULES: list[tuple[str, str]] = [
    ("dask_fluid.framework", "Programs, blocks, variables, operators"),
    ("dask_fluid.layers", "Layer builders (`dask_fluid.layers`)"),
    ("dask_fluid.nets", "Composite networks (`fluid.nets`)"),
    ("dask_fluid.data", "`fluid.data`"),
    ("dask_fluid.input", "`fluid.embedding` and `fluid.one_hot`"),
    ("dask_fluid.contrib", "`fluid.contrib`: layers, decoupled weight decay"),
    ("dask_fluid.contrib.mixed_precision", "Mixed precision (`contrib.mixed_precision`)"),
    ("dask_fluid.contrib.reader", "`contrib.reader.distributed_batch_reader`"),
    ("dask_fluid.initializer", "Parameter initialisers"),
    ("dask_fluid.param_attr", "Parameter attributes"),
    ("dask_fluid.backward", "Backward"),
    ("dask_fluid.optimizer", "Optimizers"),
    ("dask_fluid.regularizer", "Regularizers"),
    ("dask_fluid.clip", "Gradient clipping"),
    ("dask_fluid.places", "Places: where kernels run"),
    ("dask_fluid.executor", "Executor and scopes"),
    ("dask_fluid.fetched", "Fetched one-element values"),
    ("dask_fluid.lod", "LoD tensors (variable-length sequences)"),
    ("dask_fluid.py_reader", "PyReader and DataLoader.from_generator"),
    ("dask_fluid.queue_dataset", "File datasets and train_from_dataset"),
    ("dask_fluid.compiler", "CompiledProgram and the build strategies"),
    ("dask_fluid.parallel_executor", "ParallelExecutor"),
    ("dask_fluid.multi_place", "Data parallelism over the places of one process"),
    ("dask_fluid.ir_passes", "IR passes as program rewrites"),
    ("dask_fluid.io", "fluid.io: saving and loading variables and inference models"),
    ("dask_fluid.metrics", "`fluid.metrics`"),
    ("dask_fluid.evaluator", "`fluid.evaluator` (deprecated in Fluid 1.8)"),
    ("dask_fluid.average", "`fluid.average`"),
    ("dask_fluid.install_check", "`fluid.install_check`"),
    ("dask_fluid.transpiler", "The DistributeTranspiler"),
    ("dask_fluid.distributed.launch.pserver_runtime", "pserver runtime"),
    ("dask_fluid.distributed.collective.runtime", "Collective runtime"),
    ("dask_fluid.distributed.launch.data", "Data placement"),
    ("dask_fluid.distributed.launch.events", "Progress events and results"),
    ("dask_fluid.distributed.launch.elastic", "Elastic training: restart state"),
    ("dask_fluid.distributed.comm.tls", "TLS for the direct connections"),
    ("dask_fluid.distributed.errors", "Errors of distributed training"),
    ("dask_fluid.distributed.collective.nccl_setup", "NCCL backend: probing and the unique id"),
    ("dask_fluid.distributed.collective.nccl", "NCCL backend: the communicator"),
    ("dask_fluid.flags", "FLAGS_rpc_* settings"),
    ("dask_fluid.estimators", "scikit-learn estimators"),
    ("dask_fluid.dygraph.base", "Dygraph mode: guard, to_variable, no_grad"),
    ("dask_fluid.dygraph.varbase", "Dygraph variables"),
    ("dask_fluid.dygraph.backward", "Dygraph backward and fluid.dygraph.grad"),
    ("dask_fluid.dygraph.layers", "Dygraph Layer"),
    ("dask_fluid.dygraph.nn", "Dygraph layers (fluid.dygraph.nn)"),
    ("dask_fluid.dygraph.nn_extra", "Dygraph layers: recurrent, 3-D, sampled"),
    ("dask_fluid.dygraph.layer_checks", "Dygraph layers' argument checks"),
    ("dask_fluid.dygraph.container", "Dygraph containers"),
    ("dask_fluid.dygraph.learning_rate_scheduler", "Dygraph learning-rate decays"),
    ("dask_fluid.dygraph.checkpoint", "save_dygraph and load_dygraph"),
    ("dask_fluid.dygraph.jit", "TracedLayer"),
    ("dask_fluid.dygraph.static_runner", "StaticModelRunner"),
    ("dask_fluid.dygraph.parallel", "Dygraph data parallelism"),
    ("dask_fluid.models", "Ready-made programs"),
    ("dask_fluid.datasets", "Data sets"),
    ("dask_fluid.cli", "The `dask-fluid` command"),
]


def summary(obj: Any) -> str:
    """The first paragraph of the docstring, on one line ("" without a docstring)."""
    doc = inspect.getdoc(obj) or ""
    first = doc.strip().split("\n\n", 1)[0]
    return " ".join(first.split())


def _item(text: str, doc: str) -> str:
    return f"{text}: {doc}" if doc else text


class _Raw:
    """An annotation written as text (``from __future__ import annotations``), shown unquoted."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _unquote(annotation: Any) -> Any:
    return _Raw(annotation) if isinstance(annotation, str) else annotation


def signature(obj: Any, name: str) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name}(...)"
    params = [p.replace(annotation=_unquote(p.annotation)) for p in sig.parameters.values()]
    returns = (inspect.Signature.empty if inspect.isclass(obj)
               else _unquote(sig.return_annotation))
    sig = str(sig.replace(parameters=params, return_annotation=returns))
    # addresses of default objects differ from run to run; keep the output stable
    sig = re.sub(r" at 0x[0-9a-f]+", "", sig)
    return f"{name}{sig}"


def public_names(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items()
                 if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
                 and (inspect.isclass(v) or inspect.isfunction(v))]
    return sorted({n for n in names if not n.startswith("_")}, key=str.lower)


def class_members(cls: type) -> list[tuple[str, Any]]:
    members = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            members.append((name, value))
        elif isinstance(value, (staticmethod, classmethod)):
            members.append((name, value.__func__))
        elif inspect.isfunction(value):
            members.append((name, value))
    return members


def render_module(modname: str, blurb: str) -> list[str]:
    module = importlib.import_module(modname)
    lines = [f"## `{modname}` — {blurb}", ""]
    if summary(module):
        lines += [summary(module), ""]
    for name in public_names(module):
        obj = getattr(module, name, None)
        if obj is None:
            continue
        if inspect.ismodule(obj):
            continue
        if inspect.isclass(obj):
            lines += [f"### class `{signature(obj, name)}`", ""]
            if summary(obj):
                lines += [summary(obj), ""]
            for mname, member in class_members(obj):
                if isinstance(member, property):
                    lines.append(_item(f"- property `{mname}`", summary(member)))
                else:
                    lines.append(_item(f"- `{signature(member, mname)}`", summary(member)))
            lines.append("")
        elif callable(obj):
            lines += [f"### `{signature(obj, name)}`", ""]
            if summary(obj):
                lines += [summary(obj), ""]
        else:
            text = re.sub(r" at 0x[0-9a-f]+", "", repr(obj))  # ids change from run to run
            lines += [f"### `{name}`", "", f"A constant: `{text}`." if len(text) < 200
                      else "A constant.", ""]
    return lines


def render() -> str:
    lines = [
        "# API reference",
        "",
        "Generated by `python docs/gen_api.py` from the docstrings; do not edit by hand. The "
        "full docstrings (parameters, returns, raises) are in the code and in `help()`.",
        "",
        "`import dask_fluid as fluid` gives the Fluid-style namespace: `fluid.Program`, "
        "`fluid.layers`, `fluid.optimizer`, `fluid.Executor`, `fluid.CPUPlace`, "
        "`fluid.DistributeTranspiler`, `fluid.DistributeTranspilerConfig`, and the estimators "
        "`fluid.MLPClassifier`, `fluid.MLPRegressor`, `fluid.LinearClassifier`, "
        "`fluid.LinearRegressor`.",
        "",
        "Contents: " + ", ".join(f"[`{m}`](#{m.replace('.', '')})" for m, _ in MODULES),
        "",
    ]
    for modname, blurb in MODULES:
        lines += render_module(modname, blurb)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/api.md differs from what would be generated")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run python docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
