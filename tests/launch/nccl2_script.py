"""A Fluid 1.8 NCCL2-mode training script, written the way Paddle's test_dist_base.py runs its
trainers with ``--update_method nccl2``: the same file runs as every trainer, which transpiles
with ``config.mode = "nccl2"``, runs the startup program (its ``gen_nccl_id`` op connects the
trainers), and trains a ``CompiledProgram`` whose build strategy says how many trainers there
are; gradients are all-reduced between the trainers before the optimizer. The trainers come from
PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS and PADDLE_CURRENT_ENDPOINT. Without
PADDLE_TRAINER_ENDPOINTS it trains locally on the whole batch.

Usage: ``python nccl2_script.py OUT.json``; the per-step losses of this process are written to
OUT.json.
"""

import json
import os
import sys
import time

import numpy as np
import paddle.fluid as fluid

STEPS = int(os.getenv("SCRIPT_STEPS", "10"))
STEP_SLEEP_S = float(os.getenv("SCRIPT_STEP_SLEEP", "0"))  # the kill tests stretch the run
BATCH = 16  # per trainer; the local run takes the whole global batch of 2 x BATCH rows


def network():
    x = fluid.layers.data(name="x", shape=[32], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="int64")
    h = fluid.layers.fc(input=x, size=64, act="relu")
    logits = fluid.layers.fc(input=h, size=4)
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
    fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    return loss


def global_batch(step, rows):
    rng = np.random.RandomState(step)
    x = rng.normal(size=(rows, 32)).astype("float32")
    y = x[:, :4].argmax(axis=1).astype("int64").reshape(-1, 1)
    return x, y


def main():
    out = sys.argv[1]
    main_program = fluid.default_main_program()
    startup = fluid.default_startup_program()
    main_program.random_seed = startup.random_seed = 7
    loss = network()
    endpoints = os.getenv("PADDLE_TRAINER_ENDPOINTS")
    trainers = len(endpoints.split(",")) if endpoints else 1
    trainer_id = int(os.getenv("PADDLE_TRAINER_ID", "0"))
    world = int(os.getenv("PADDLE_TRAINERS_NUM", "2"))  # whose share of the global batch
    if endpoints:
        config = fluid.DistributeTranspilerConfig()
        config.mode = "nccl2"
        t = fluid.DistributeTranspiler(config=config)
        t.transpile(trainer_id, program=main_program, startup_program=startup,
                    trainers=endpoints, current_endpoint=os.environ["PADDLE_CURRENT_ENDPOINT"])
    if os.getenv("SCRIPT_PLACE") == "gpu":  # as test_dist_base.py picks its GPU
        place = fluid.CUDAPlace(int(os.getenv("FLAGS_selected_gpus", "0")))
    else:
        place = fluid.CPUPlace()
    exe = fluid.Executor(place)
    exe.run(startup)

    exec_strategy = fluid.ExecutionStrategy()
    exec_strategy.num_threads = 1
    build_stra = fluid.BuildStrategy()
    build_stra.enable_inplace = False
    build_stra.memory_optimize = False
    build_stra.num_trainers = trainers
    build_stra.trainer_id = trainer_id
    binary = fluid.compiler.CompiledProgram(main_program).with_data_parallel(
        loss_name=loss.name, build_strategy=build_stra, exec_strategy=exec_strategy)

    losses = []
    for step in range(STEPS):
        x, y = global_batch(step, world * BATCH)
        mine = slice(trainer_id * BATCH, (trainer_id + 1) * BATCH) if endpoints else slice(None)
        value, = exe.run(binary, feed={"x": x[mine], "y": y[mine]}, fetch_list=[loss.name])
        losses.append(float(value[0]))
        print(f"step {step}", flush=True)
        time.sleep(STEP_SLEEP_S)
    exe.close()
    with open(out, "w") as f:
        json.dump({"trainer_id": trainer_id if endpoints else "LOCAL", "losses": losses}, f)


if __name__ == "__main__":
    main()
