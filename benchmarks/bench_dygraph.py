"""Dygraph mode against the static executor: the same models, the same kernels.

Run: ``python benchmarks/bench_dygraph.py [--steps 60] [--repeat 3]``. Writes
``benchmarks/results/dygraph.json`` and prints a table.

Two models, each trained with SGD on one fixed batch, one BLAS thread:

- **mlp**: 784 -> 128 (relu) -> 10, batch 64 (``fluid.layers.fc`` / ``dygraph.Linear``);
- **cnn**: two 5x5 conv (20, 50 filters) + 2x2 max-pool layers and a 10-way fc on 1x28x28
  images, batch 32 (``fluid.nets.simple_img_conv_pool`` / ``dygraph.Conv2D`` +
  ``dygraph.Pool2D``: the 1.8 MNIST model).

Reported: ms per step of the static program (one ``exe.run``), of dygraph (forward,
``loss.backward()``, ``minimize``, ``clear_gradients``), of dygraph with the model and loss in a
``@declarative`` forward (one ``run_program`` op and its gradient op), their ratios to static,
and how the dygraph step divides: the forward ops traced one by one, the backward pass
(building its program, planning and running it) and the optimizer's ops (median over
``--repeat`` interleaved runs).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import dask_fluid as fluid  # noqa: E402
from dask_fluid import dygraph  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"


def batch(model: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    if model == "mlp":
        x = rng.random((64, 784), dtype=np.float32)
    else:
        x = rng.random((32, 1, 28, 28), dtype=np.float32)
    return x, rng.integers(0, 10, (len(x), 1))


def static_ms(model: str, steps: int) -> float:
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        if model == "mlp":
            x = fluid.layers.data("x", shape=[784])
            h = fluid.layers.fc(x, 128, act="relu")
        else:
            x = fluid.layers.data("x", shape=[1, 28, 28])
            h = fluid.nets.simple_img_conv_pool(x, 20, 5, 2, 2, act="relu")
            h = fluid.nets.simple_img_conv_pool(h, 50, 5, 2, 2, act="relu")
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        logits = fluid.layers.fc(h, 10)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.SGD(0.01).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    xs, ys = batch(model)
    feed = {"x": xs, "y": ys}
    for _ in range(3):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    t0 = time.perf_counter()
    for _ in range(steps):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    return 1000 * (time.perf_counter() - t0) / steps


class _MLP(dygraph.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = dygraph.Linear(784, 128, act="relu")
        self.fc2 = dygraph.Linear(128, 10)

    def forward(self, x):
        return self.fc2(self.fc1(x))


class _CNN(dygraph.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = dygraph.Conv2D(1, 20, 5, act="relu")
        self.pool1 = dygraph.Pool2D(2, "max", 2)
        self.conv2 = dygraph.Conv2D(20, 50, 5, act="relu")
        self.pool2 = dygraph.Pool2D(2, "max", 2)
        self.fc = dygraph.Linear(50 * 4 * 4, 10)

    def forward(self, x):
        h = self.pool2(self.conv2(self.pool1(self.conv1(x))))
        return self.fc(fluid.layers.reshape(h, [h.shape[0], -1]))


def dygraph_ms(model: str, steps: int) -> dict[str, float]:
    """ms per step, and the forward / backward / optimizer parts of it."""
    xs, ys = batch(model)
    parts = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    with dygraph.guard(fluid.CPUPlace()):
        net = _MLP() if model == "mlp" else _CNN()
        opt = fluid.optimizer.SGD(0.01, parameter_list=net.parameters())

        def step(timed: bool) -> None:
            t0 = time.perf_counter()
            logits = net(dygraph.to_variable(xs))
            loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
                logits, dygraph.to_variable(ys)))
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.minimize(loss)
            net.clear_gradients()
            if timed:
                parts["forward"] += t1 - t0
                parts["backward"] += t2 - t1
                parts["optimizer"] += time.perf_counter() - t2

        for _ in range(3):
            step(False)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(True)
        total = 1000 * (time.perf_counter() - t0) / steps
    return {"step": total, **{k: 1000 * v / steps for k, v in parts.items()}}


class _Translated(dygraph.Layer):
    """The model and its loss as one ``@declarative`` forward: a program run as one op."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.net = _MLP() if model == "mlp" else _CNN()

    @dygraph.declarative
    def forward(self, x, y):
        logits = self.net(x)
        return fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))


def declarative_ms(model: str, steps: int) -> float:
    """ms per step with the forward translated to a program (``@declarative``)."""
    xs, ys = batch(model)
    with dygraph.guard(fluid.CPUPlace()):
        net = _Translated(model)
        opt = fluid.optimizer.SGD(0.01, parameter_list=net.parameters())

        def step() -> None:
            loss = net(dygraph.to_variable(xs), dygraph.to_variable(ys))
            loss.backward()
            opt.minimize(loss)
            net.clear_gradients()

        for _ in range(3):
            step()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return 1000 * (time.perf_counter() - t0) / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rows = {}
    for model in ("mlp", "cnn"):
        statics, dys, translated = [], [], []
        for _ in range(args.repeat):  # interleaved: all see the same machine load
            statics.append(static_ms(model, args.steps))
            dys.append(dygraph_ms(model, args.steps))
            translated.append(declarative_ms(model, args.steps))
        rows[model] = {
            "static_ms": statistics.median(statics),
            "declarative_ms": statistics.median(translated),
            **{f"dygraph_{k}_ms": statistics.median(d[k] for d in dys) for k in dys[0]},
            "runs": {"static": statics, "dygraph": dys, "declarative": translated},
        }
    print(f"{'model':<6} {'static ms':>10} {'dygraph ms':>11} {'/ static':>9} "
          f"{'forward':>8} {'backward':>9} {'optimizer':>10} {'declarative':>12} {'/ static':>9}")
    for model, r in rows.items():
        print(f"{model:<6} {r['static_ms']:>10.2f} {r['dygraph_step_ms']:>11.2f} "
              f"{r['dygraph_step_ms'] / r['static_ms']:>9.2f} {r['dygraph_forward_ms']:>8.2f} "
              f"{r['dygraph_backward_ms']:>9.2f} {r['dygraph_optimizer_ms']:>10.2f} "
              f"{r['declarative_ms']:>12.2f} {r['declarative_ms'] / r['static_ms']:>9.2f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dygraph.json").write_text(json.dumps(
        {"steps": args.steps, "repeat": args.repeat, "models": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
