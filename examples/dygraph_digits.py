"""A Fluid 1.8 dygraph script: a small CNN on scikit-learn's 8x8 digits, optionally data-parallel.

Run it as it is (one process)::

    python examples/dygraph_digits.py --epochs 6

or data-parallel on Dask workers, one trainer process per worker (each takes its share of the
batches, gradients are all-reduced over a ring between the trainers)::

    dask-fluid launch --mode nccl2 --workers 2 --trainers 2 examples/dygraph_digits.py

It is written the way Fluid 1.8's own dygraph examples are (``dygraph/mnist/train.py``):
``fluid.dygraph.guard``, Layer classes from ``dygraph.nn``, ``DataLoader.from_generator``,
``loss.backward()`` and ``minimize``, ``prepare_context`` + ``DataParallel`` when the launcher
set ``PADDLE_TRAINERS_NUM``, and ``save_dygraph`` at the end.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from sklearn.datasets import load_digits

import dask_fluid as fluid
from dask_fluid.dygraph import Conv2D, Linear, Pool2D, to_variable


class DigitsCNN(fluid.dygraph.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = Conv2D(1, 16, 3, padding=1, act="relu")
        self.pool1 = Pool2D(2, "max", 2)
        self.conv2 = Conv2D(16, 32, 3, padding=1, act="relu")
        self.pool2 = Pool2D(2, "max", 2)
        self.fc = Linear(32 * 2 * 2, 10, act="softmax")

    def forward(self, x):
        h = self.pool2(self.conv2(self.pool1(self.conv1(x))))
        return self.fc(fluid.layers.reshape(h, [-1, 32 * 2 * 2]))


def samples(images: np.ndarray, labels: np.ndarray):
    def reader():
        for image, label in zip(images, labels, strict=True):
            yield image.reshape(1, 8, 8), np.array([label], "int64")
    return reader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--save", default="", help="save_dygraph the model here (trainer 0)")
    args = parser.parse_args()

    digits_x, digits_y = load_digits(return_X_y=True)
    digits_x = (digits_x / 16.0).astype("float32")
    train_x, train_y = digits_x[:1500], digits_y[:1500]
    test_x, test_y = digits_x[1500:], digits_y[1500:]
    data_parallel = int(os.environ.get("PADDLE_TRAINERS_NUM", "1")) > 1

    with fluid.dygraph.guard(fluid.CPUPlace()):
        # the same seed on every trainer: DataParallel does not broadcast (as in Fluid 1.8)
        fluid.default_startup_program().random_seed = 33
        fluid.default_main_program().random_seed = 33
        strategy = fluid.dygraph.parallel.prepare_context() if data_parallel else None
        model = DigitsCNN()
        opt = fluid.optimizer.AdamOptimizer(0.01, parameter_list=model.parameters())
        if data_parallel:
            model = fluid.dygraph.parallel.DataParallel(model, strategy)
        batches = fluid.io.batch(samples(train_x, train_y), args.batch_size, drop_last=True)
        if data_parallel:
            batches = fluid.contrib.reader.distributed_batch_reader(batches)
        loader = fluid.io.DataLoader.from_generator(capacity=4, return_list=True)
        loader.set_sample_list_generator(batches)

        for epoch in range(args.epochs):
            model.train()
            losses = []
            for img, label in loader():
                loss = fluid.layers.mean(fluid.layers.cross_entropy(model(img), label))
                losses.append(float(loss.numpy()))  # Fluid's [1] loss, printed as Fluid's are
                if data_parallel:
                    loss = model.scale_loss(loss)
                    loss.backward()
                    model.apply_collective_grads()
                else:
                    loss.backward()
                opt.minimize(loss)
                model.clear_gradients()
            model.eval()
            with fluid.dygraph.no_grad():
                probs = model(to_variable(test_x.reshape(-1, 1, 8, 8))).numpy()
            accuracy = float((probs.argmax(axis=1) == test_y).mean())
            print(f"epoch {epoch}: loss {np.mean(losses):.4f}, test accuracy {accuracy:.4f}")
        print(f"test accuracy: {accuracy:.4f}")
        rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
        if args.save and rank == 0:
            fluid.save_dygraph(model.state_dict(), args.save)
            print(f"saved {args.save}.pdparams")


if __name__ == "__main__":
    main()
