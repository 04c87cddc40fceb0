"""A Fluid 1.8 distributed training script, written the way Fluid users write them: the same
file runs as every role, the role and the cluster come from PADDLE_* environment variables, a
pserver runs ``exe.run(pserver_program)``, a trainer runs its program step after step and
``exe.close()`` at the end. Without PADDLE_TRAINING_ROLE it trains locally on the whole batch.

Usage: ``python fluid_script.py OUT.json MODE [slice|noslice]``; the per-step losses of this
process are written to OUT.json. MODE is ``sync`` or ``async`` (``transpile(sync_mode=...)``
with the default config), or one of Fluid 1.8's config-driven modes: ``sync_split``
(completely_not_async, fleet's SyncStrategy), ``half_async`` and ``async_split``
(runtime_split_send_recv with and without half_async), ``geo`` (GEO-SGD, pushing every
SCRIPT_GEO_PUSH steps). SCRIPT_WAIT_PORT=0 makes the trainer program with wait_port=False.
"""

import json
import os
import sys
import time

import numpy as np
import paddle.fluid as fluid

STEPS = int(os.getenv("SCRIPT_STEPS", "12"))
STEP_SLEEP_S = float(os.getenv("SCRIPT_STEP_SLEEP", "0"))  # the kill tests stretch the run
BATCH = 16  # per trainer; the local run takes TRAINERS x BATCH rows per step


def network():
    x = fluid.layers.data(name="x", shape=[32], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="int64")
    h = fluid.layers.fc(input=x, size=512, act="relu")
    logits = fluid.layers.fc(input=h, size=4)
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
    fluid.optimizer.Momentum(learning_rate=0.02, momentum=0.9).minimize(loss)
    return loss


def global_batch(step, rows):
    rng = np.random.RandomState(step)
    x = rng.normal(size=(rows, 32)).astype("float32")
    y = x[:, :4].argmax(axis=1).astype("int64").reshape(-1, 1)
    return x, y


def main():
    out, mode, slicing = sys.argv[1], sys.argv[2], sys.argv[3]
    fluid.default_startup_program().random_seed = 7
    fluid.default_main_program().random_seed = 7
    loss = network()
    role = os.getenv("PADDLE_TRAINING_ROLE")
    trainers = int(os.getenv("PADDLE_TRAINERS_NUM") or os.getenv("PADDLE_TRAINERS") or "1")
    exe = fluid.Executor(fluid.CPUPlace())
    losses = []
    early_pushes = 0
    if role is None:  # local: the whole global batch
        exe.run(fluid.default_startup_program())
        for step in range(STEPS):
            x, y = global_batch(step, 2 * BATCH)
            losses.append(float(exe.run(feed={"x": x, "y": y}, fetch_list=[loss])[0][0]))
    else:
        endpoints = os.getenv("PADDLE_PSERVER_ENDPOINTS") or ",".join(
            f"{ip}:{os.environ['PADDLE_PSERVER_PORT']}"
            for ip in os.environ["PADDLE_PSERVER_IPS"].split(","))
        trainer_id = int(os.getenv("PADDLE_TRAINER_ID", "0"))
        config = fluid.DistributeTranspilerConfig()
        config.slice_var_up = slicing == "slice"
        wait_port = os.getenv("SCRIPT_WAIT_PORT") != "0"
        config.wait_port = wait_port  # the startup's pull runs before get_trainer_program
        if mode not in ("sync", "async"):  # Fluid 1.8: sync_mode=False before the rest
            config.sync_mode = False
            config.runtime_split_send_recv = True
            config.half_async = mode in ("half_async", "sync_split")
            config.completely_not_async = mode == "sync_split"
            config.geo_sgd_mode = mode == "geo"
            config.geo_sgd_need_push_nums = int(os.getenv("SCRIPT_GEO_PUSH", "4"))
        t = fluid.DistributeTranspiler(config=config)
        t.transpile(trainer_id, pservers=endpoints, trainers=trainers,
                    sync_mode=mode == "sync")
        if role == "PSERVER":
            current = os.getenv("PADDLE_CURRENT_ENDPOINT") or (
                f"{os.environ['PADDLE_CURRENT_IP']}:{os.environ['PADDLE_PSERVER_PORT']}")
            pserver_program = t.get_pserver_program(current)
            exe.run(t.get_startup_program(current, pserver_program))
            exe.run(pserver_program)  # serves until every trainer has closed
        else:
            exe.run(fluid.default_startup_program())
            program = t.get_trainer_program(wait_port=wait_port)
            for step in range(STEPS):
                x, y = global_batch(step, trainers * BATCH)
                mine = slice(trainer_id * BATCH, (trainer_id + 1) * BATCH)
                losses.append(float(exe.run(program, feed={"x": x[mine], "y": y[mine]},
                                            fetch_list=[loss])[0][0]))
                print(f"step {step}", flush=True)
                time.sleep(STEP_SLEEP_S)
            # (not a Fluid API: the tests read how many gradients went out ahead of the barrier)
            from dask_fluid.distributed.pserver.ops import CLIENT_KEY
            client = exe.host_context.get(CLIENT_KEY)
            early_pushes = client.early_pushes if client is not None else 0
            exe.close()
    with open(out, "w") as f:
        json.dump({"role": role or "LOCAL", "losses": losses, "early_pushes": early_pushes,
                   "tls": sorted(k for k in os.environ if k.startswith("DASK_FLUID_TLS_"))}, f)


if __name__ == "__main__":
    main()
