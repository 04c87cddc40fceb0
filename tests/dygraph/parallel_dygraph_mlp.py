"""A dygraph MLP for Paddle 1.8's ``TestParallelDyGraphRunnerBase`` (test_dist_base.py), in the
style of Paddle 1.8's ``parallel_dygraph_mnist.py``: run as

    dask-fluid run parallel_dygraph_mlp.py --role trainer [--update_method nccl2
        --endpoints A,B --trainer_id I --current_endpoint A]

next to Paddle's ``test_dist_base.py``; the runner trains it for 5 steps (each nccl2 trainer on
its half of every batch, through ``prepare_context``/``DataParallel``) and writes the pickled
losses to stdout. The data are synthetic (no downloads): 4 features, 3 classes.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.fluid as fluid
from paddle.fluid.dygraph.base import to_variable
from test_dist_base import TestParallelDyGraphRunnerBase, runtime_main

BATCH_SIZE = 4
N_FEATURES = 4
N_CLASSES = 3


class Dense(fluid.dygraph.Layer):
    """``act(x @ weight + bias)``."""

    def __init__(self, n_in: int, n_out: int, act: str | None = None) -> None:
        super().__init__()
        self.weight = self.create_parameter([n_in, n_out])
        self.bias = self.create_parameter([n_out], is_bias=True)
        self._act = act

    def forward(self, x):
        y = fluid.layers.elementwise_add(fluid.layers.matmul(x, self.weight), self.bias)
        return fluid.layers.relu(y) if self._act == "relu" else y


class MLP(fluid.dygraph.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = Dense(N_FEATURES, 16, act="relu")
        self.out = Dense(16, N_CLASSES)

    def forward(self, x):
        return self.out(self.hidden(x))


def synthetic_reader(samples: int = 64, seed: int = 7):
    """Samples ``(features float32[4], label int)``, the same every time."""

    def reader():
        rng = np.random.RandomState(seed)
        for _ in range(samples):
            x = rng.rand(N_FEATURES).astype("float32")
            yield x, int(x.sum() * 3) % N_CLASSES

    return reader


class TestMLP(TestParallelDyGraphRunnerBase):
    def get_model(self):
        model = MLP()
        train_reader = paddle.batch(synthetic_reader(), batch_size=BATCH_SIZE, drop_last=True)
        opt = fluid.optimizer.SGD(learning_rate=0.5, parameter_list=model.parameters())
        return model, train_reader, opt

    def run_one_loop(self, model, opt, data):
        batch_size = len(data)
        x = np.array([item[0] for item in data]).astype("float32")
        y = np.array([item[1] for item in data]).astype("int64").reshape(batch_size, 1)
        label = to_variable(y)
        label.stop_gradient = True
        logits = model(to_variable(x))
        loss = fluid.layers.softmax_with_cross_entropy(logits, label)
        # Fluid's [1] loss: the runner logs it with "%f" % loss.numpy() (dask_fluid's
        # one-element arrays convert to a number, as numpy 1.x's did)
        return fluid.layers.mean(loss)


if __name__ == "__main__":
    runtime_main(TestMLP)
