"""The CTR model of benchmarks/bench_models.py, and its roles as a Fluid-style job.

A wide-and-deep click model as Paddle 1.8's dist_ctr.py builds it: a deep part (an embedding of
the sample's id list, ``is_distributed=True``: the distributed lookup table; ``sequence_pool``
sum; fc 64 -> 32 -> 16) and a wide part (a sparse ``[lr_dim, 1]`` embedding pooled the same
way), a softmax over 2 classes, SGD. The ids are LoD sequences of 4 to 12 ids per sample.

``python benchmarks/ctr_job.py --role pserver|trainer --endpoints A,B --trainer_id i
--current_endpoint E --trainers 2 --steps N`` runs one role; a trainer prints one JSON line:
samples/s over its timed steps and the tensor bytes it sent to and received from the pservers
per step (``DirectClient.bytes_sent``/``bytes_received``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import dask_fluid as fluid  # noqa: E402

DNN_DIM, LR_DIM, BATCH, WARMUP = 200_000, 100_000, 128, 3


def build(distributed: bool = True) -> tuple:
    """``(main, startup, loss)`` of the CTR model."""
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = main.random_seed = 1
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        dnn = fluid.layers.data(name="dnn_data", shape=[-1, 1], dtype="int64", lod_level=1,
                                append_batch_size=False)
        wide = fluid.layers.data(name="lr_data", shape=[-1, 1], dtype="int64", lod_level=1,
                                 append_batch_size=False)
        label = fluid.layers.data(name="click", shape=[-1, 1], dtype="int64",
                                  append_batch_size=False)
        emb = fluid.layers.embedding(dnn, size=[DNN_DIM, 64], is_sparse=True,
                                     is_distributed=distributed,
                                     param_attr=fluid.ParamAttr(name="deep_embedding"))
        out = fluid.layers.sequence_pool(emb, "sum")
        for dim in (32, 16):
            out = fluid.layers.fc(out, dim, act="relu")
        wide_emb = fluid.layers.embedding(wide, size=[LR_DIM, 1], is_sparse=True,
                                          param_attr=fluid.ParamAttr(name="wide_embedding"))
        merged = fluid.layers.concat([out, fluid.layers.sequence_pool(wide_emb, "sum")], axis=1)
        predict = fluid.layers.fc(merged, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(predict, label))
        fluid.optimizer.SGD(0.01).minimize(loss)
    return main, startup, loss


def batch(step: int, seed: int = 0) -> dict:
    """One batch of LoD id lists and clicks, the same for a (step, seed)."""
    rng = np.random.default_rng([seed, step])
    feed = {}
    for name, dim in (("dnn_data", DNN_DIM), ("lr_data", LR_DIM)):
        lengths = rng.integers(4, 13, BATCH)
        ids = rng.integers(0, dim, int(lengths.sum())).reshape(-1, 1)
        feed[name] = fluid.create_lod_tensor(ids, [lengths.tolist()], fluid.CPUPlace())
    feed["click"] = rng.integers(0, 2, (BATCH, 1))
    return feed


def run_steps(exe: fluid.Executor, program: fluid.Program, loss, steps: int, seed: int,
              scope: fluid.Scope | None = None) -> float:
    """Samples/s over ``steps`` steps after the warm-up."""
    feeds = [batch(i, seed) for i in range(WARMUP + steps)]
    for feed in feeds[:WARMUP]:
        exe.run(program, feed=feed, fetch_list=[loss], scope=scope)
    t0 = time.perf_counter()
    for feed in feeds[WARMUP:]:
        exe.run(program, feed=feed, fetch_list=[loss], scope=scope)
    return steps * BATCH / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["pserver", "trainer"], required=True)
    parser.add_argument("--endpoints", required=True)
    parser.add_argument("--trainer_id", type=int, default=0)
    parser.add_argument("--current_endpoint", default="")
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    main_prog, startup, loss = build()
    t = fluid.DistributeTranspiler()
    t.transpile(args.trainer_id, program=main_prog, pservers=args.endpoints,
                trainers=args.trainers, startup_program=startup)
    exe = fluid.Executor()
    if args.role == "pserver":
        pserver = t.get_pserver_program(args.current_endpoint)
        exe.run(t.get_startup_program(args.current_endpoint, pserver))
        exe.run(pserver)
        return 0
    trainer = t.get_trainer_program()
    exe.run(startup)
    from dask_fluid.distributed.pserver.ops import CLIENT_KEY  # the process's client

    feeds = [batch(i, args.trainer_id) for i in range(WARMUP + args.steps)]
    for feed in feeds[:WARMUP]:
        exe.run(trainer, feed=feed, fetch_list=[loss])
    client = exe.host_context[CLIENT_KEY]
    sent, received = client.bytes_sent, client.bytes_received
    t0 = time.perf_counter()
    for feed in feeds[WARMUP:]:
        exe.run(trainer, feed=feed, fetch_list=[loss])
    dt = time.perf_counter() - t0
    print(json.dumps({"samples_per_s": args.steps * BATCH / dt,
                      "bytes_sent_per_step": (client.bytes_sent - sent) / args.steps,
                      "bytes_received_per_step": (client.bytes_received - received)
                      / args.steps}))
    exe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
