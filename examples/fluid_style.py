"""Fluid-style distributed training on Dask: layers -> optimizer -> DistributeTranspiler ->
train_pserver on a LocalCluster -> evaluate with the returned parameters.

    python examples/fluid_style.py [--samples 40000] [--epochs 2] [--workers 2] [--pservers 2]

This is a Fluid 1.x pserver script with the ``PADDLE_*`` environment variables replaced by a Dask
cluster (see docs/migration.md): the program is built and transpiled exactly as in Fluid, and one
call runs every pserver and trainer on the workers that hold the data.
"""

from __future__ import annotations

import argparse
import time

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster

import dask_fluid as fluid
from dask_fluid.datasets import reference_blobs
from dask_fluid.distributed.launch.pserver_runtime import train_pserver
from dask_fluid.transpiler import summarize


def build_program(n_features: int, n_classes: int, hidden: int, seed: int):
    """The model, Fluid style: returns (main, startup, test program, loss, accuracy)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[n_features], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        h = fluid.layers.fc(x, size=hidden, act="relu")
        logits = fluid.layers.fc(h, size=n_classes)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        acc = fluid.layers.accuracy(fluid.layers.softmax(logits), y)
        test_program = main.clone(for_test=True)  # forward only, for evaluation
        fluid.optimizer.Adam(learning_rate=0.001).minimize(loss)
    return main, startup, test_program, loss, acc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pservers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args(argv)

    # Data: the reference blobs (64 features, 10 classes); 80 % train as a dask array of 8
    # chunks, 20 % test kept in numpy for the local evaluation.
    X, y = reference_blobs(args.samples)
    n_train = int(0.8 * len(X))
    chunk = -(-n_train // 8)
    X_train = da.from_array(X[:n_train], chunks=(chunk, X.shape[1]))
    y_train = da.from_array(y[:n_train, None], chunks=(chunk, 1))  # data layer y is [-1, 1]
    X_test, y_test = X[n_train:], y[n_train:, None]

    main_prog, startup, test_prog, loss, acc = build_program(X.shape[1], 10, 128, seed=1)

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])

        # Transpile exactly as in Fluid. The pserver endpoints are Dask worker addresses
        # (Fluid-style "127.0.0.1:6174" labels would be mapped onto the workers too).
        config = fluid.DistributeTranspilerConfig()
        config.slice_var_up = True
        t = fluid.DistributeTranspiler(config=config)
        t.transpile(trainer_id=0, program=main_prog, startup_program=startup,
                    pservers=",".join(workers[:args.pservers]), trainers=len(workers),
                    sync_mode=True)
        print("transpiled:", summarize(t).replace("\n", "\n  "))

        def on_event(event: dict) -> None:
            # every trainer publishes step and epoch_end events while training runs
            if event["type"] == "epoch_end" and event["rank"] == 0:
                print(f"  trainer 0 finished epoch {event['epoch'] + 1} "
                      f"(after {event['steps']} steps)")

        t0 = time.perf_counter()
        result = train_pserver(client, data={"x": X_train, "y": y_train}, transpiler=t,
                               epochs=args.epochs, batch_size=args.batch_size,
                               fetch_list=[loss, acc], callbacks=[on_event], seed=0)
        elapsed = time.perf_counter() - t0
        label = {loss.name: "loss", acc.name: "train accuracy"}
        for i, epoch in enumerate(result.epochs):
            print(f"epoch {i + 1}: " + ", ".join(f"{label[k]} {v:.4f}" for k, v in epoch.items()
                                                 if k in label))
        print(f"trained {result.samples} samples in {elapsed:.1f} s "
              f"({result.samples_per_s:,.0f} samples/s in the training loop)")

    # Evaluate on the client with the full (unsliced) parameters the pservers held at the end.
    scope = fluid.Scope()
    for name, value in result.params.items():
        scope.set(name, value)
    exe = fluid.Executor(fluid.CPUPlace())
    (test_acc,) = exe.run(test_prog, feed={"x": X_test, "y": y_test}, fetch_list=[acc],
                          scope=scope)
    print(f"test accuracy: {float(np.asarray(test_acc).mean()):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
