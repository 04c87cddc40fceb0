"""A Fluid 1.8 training script on the collective fleet API, as Fluid users wrote multi-GPU
jobs: ``fleet.init(PaddleCloudRoleMaker(is_collective=True))``, ``fleet.distributed_optimizer``
with a ``DistributedStrategy``, then ``fleet.startup_program`` and ``fleet.main_program``. The
same file runs as every trainer; the role comes from PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS
and PADDLE_CURRENT_ENDPOINT. Without PADDLE_TRAINER_ENDPOINTS it trains locally on the whole
batch with the plain optimizer.

Usage: ``python fleet_collective_script.py OUT.json``; the per-step losses and the final
parameters of this process go to OUT.json (``{trainer_id}`` in it becomes PADDLE_TRAINER_ID: one
command line for every trainer, as ``paddle.distributed.launch`` starts them), and trainer 0
saves its persistables with ``fleet.save_persistables`` under OUT.json's name + ``.model``.

- SCRIPT_FLEET_MODE: the strategy, ``nccl2`` (the default strategy), ``grad_allreduce``
  (``mode = "collective"``) or ``local_sgd`` (``use_local_sgd``);
- SCRIPT_NCCL_COMM_NUM: its ``nccl_comm_num``;
- SCRIPT_RECOMPUTE=1: ``forward_recompute`` with the hidden layer as the checkpoint;
- SCRIPT_FAIL_TRAINER=N: trainer N exits with status 3 before training.
"""

import json
import os
import sys

import numpy as np
import paddle.fluid as fluid
import paddle.fluid.incubate.fleet.base.role_maker as role_maker
from paddle.fluid.incubate.fleet.collective import DistributedStrategy, fleet

STEPS = int(os.getenv("SCRIPT_STEPS", "8"))
BATCH = 16  # per trainer; the local run takes the whole global batch of 2 x BATCH rows


def network():
    x = fluid.layers.data(name="x", shape=[32], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="int64")
    h = fluid.layers.fc(input=x, size=64, act="relu")
    logits = fluid.layers.fc(input=h, size=4)
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
    return loss, h


def global_batch(step, rows):
    rng = np.random.RandomState(step)
    x = rng.normal(size=(rows, 32)).astype("float32")
    y = x[:, :4].argmax(axis=1).astype("int64").reshape(-1, 1)
    return x, y


def main():
    out = sys.argv[1].replace("{trainer_id}", os.getenv("PADDLE_TRAINER_ID", "0"))
    main_program = fluid.default_main_program()
    startup = fluid.default_startup_program()
    main_program.random_seed = startup.random_seed = 7
    loss, hidden = network()
    optimizer = fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9)
    distributed = bool(os.getenv("PADDLE_TRAINER_ENDPOINTS"))
    fail = os.getenv("SCRIPT_FAIL_TRAINER")
    if fail is not None and fail == os.getenv("PADDLE_TRAINER_ID"):
        sys.exit(3)
    trainer_id = 0
    if distributed:
        fleet.init(role_maker.PaddleCloudRoleMaker(is_collective=True))
        strategy = DistributedStrategy()
        mode = os.getenv("SCRIPT_FLEET_MODE", "nccl2")
        if mode == "grad_allreduce":
            strategy.mode = "collective"
            strategy.collective_mode = "grad_allreduce"
        elif mode == "local_sgd":
            strategy.use_local_sgd = True
        strategy.nccl_comm_num = int(os.getenv("SCRIPT_NCCL_COMM_NUM", "1"))
        if os.getenv("SCRIPT_RECOMPUTE"):  # recompute the hidden layer in the backward pass
            strategy.forward_recompute = True
            strategy.recompute_checkpoints = [hidden]
        fleet.distributed_optimizer(optimizer, strategy=strategy).minimize(loss)
        trainer_id = fleet.worker_index()
        to_run, startup = fleet.main_program, fleet.startup_program
    else:
        optimizer.minimize(loss)
        to_run = main_program
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    losses = []
    for step in range(STEPS):
        x, y = global_batch(step, 2 * BATCH)
        mine = slice(trainer_id * BATCH, (trainer_id + 1) * BATCH) if distributed else slice(None)
        value, = exe.run(to_run, feed={"x": x[mine], "y": y[mine]}, fetch_list=[loss.name])
        losses.append(float(value[0]))
    scope = fluid.global_scope()
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()).tolist()
              for p in main_program.global_block().all_parameters()}
    if distributed and fleet.is_first_worker():
        fleet.save_persistables(exe, out + ".model")
    exe.close()
    with open(out, "w") as f:
        json.dump({"trainer_id": trainer_id if distributed else "LOCAL", "losses": losses,
                   "params": params,
                   "ops": [op.type for op in main_program.global_block().ops]}, f)


if __name__ == "__main__":
    main()
