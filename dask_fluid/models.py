"""Ready-made Fluid programs: the reference MLP of the benchmarks, demos and tests."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from . import layers, optimizer, unique_name
from .framework import Program, Variable, program_guard


@dataclass
class ProgramSpec:
    """A built model: its programs and the variables callers feed and fetch."""

    main: Program
    startup: Program
    feeds: list[str]
    loss: Variable
    accuracy: Variable | None
    logits: Variable


def mlp(
    n_features: int = 64,
    hidden: Sequence[int] = (256, 256),
    n_classes: int = 10,
    opt: optimizer.Optimizer | None = None,
    seed: int = 1,
    act: str = "relu",
    fresh_names: bool = True,
) -> ProgramSpec:
    """The reference MLP: ``x → fc(h, act)… → fc(n_classes) → softmax_with_cross_entropy →
    mean``, plus ``accuracy(softmax(logits), y)``; SGD(0.1) unless ``opt`` is given.

    Names start at ``fc_0`` when ``fresh_names`` (a private name counter is used).
    """
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = seed
    guard = unique_name.guard() if fresh_names else contextlib.nullcontext()
    with guard, program_guard(main, startup):
        x = layers.data(name="x", shape=[n_features], dtype="float32")
        y = layers.data(name="y", shape=[1], dtype="int64")
        h = x
        for size in hidden:
            h = layers.fc(h, size, act=act)
        logits = layers.fc(h, n_classes)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        acc = layers.accuracy(layers.softmax(logits), y)
        (opt or optimizer.SGD(0.1)).minimize(loss)
    return ProgramSpec(main, startup, ["x", "y"], loss, acc, logits)



def mnist_cnn(opt: optimizer.Optimizer | None = None, seed: int = 1,
              fresh_names: bool = True) -> ProgramSpec:
    """The CNN of Paddle 1.8's dist_mnist.py: two ``simple_img_conv_pool`` (5x5 conv with 20
    and 50 filters, relu, 2x2 max pool) and a softmax ``fc`` on ``pixel [1, 28, 28]``, with
    ``cross_entropy``; Momentum(0.001, 0.9) unless ``opt`` is given. Names start at
    ``conv2d_0`` when ``fresh_names``."""
    from . import nets  # noqa: PLC0415  (nets builds on layers, like this module)

    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = seed
    guard = unique_name.guard() if fresh_names else contextlib.nullcontext()
    with guard, program_guard(main, startup):
        x = layers.data(name="pixel", shape=[1, 28, 28], dtype="float32")
        y = layers.data(name="label", shape=[1], dtype="int64")
        h = nets.simple_img_conv_pool(x, num_filters=20, filter_size=5, pool_size=2,
                                      pool_stride=2, act="relu")
        h = nets.simple_img_conv_pool(h, num_filters=50, filter_size=5, pool_size=2,
                                      pool_stride=2, act="relu")
        predict = layers.fc(h, 10, act="softmax")
        loss = layers.mean(layers.cross_entropy(predict, y))
        acc = layers.accuracy(predict, y)
        (opt or optimizer.Momentum(0.001, 0.9)).minimize(loss)
    return ProgramSpec(main, startup, ["pixel", "label"], loss, acc, predict)


def resnet_block(channels: int = 16, size: int = 32, n_classes: int = 10,
                 opt: optimizer.Optimizer | None = None, seed: int = 1,
                 fresh_names: bool = True) -> ProgramSpec:
    """A ResNet basic block on ``image [3, size, size]``: a 3x3 conv-bn-relu stem to
    ``channels``, then conv3x3-bn-relu, conv3x3-bn, the identity shortcut, relu, global
    average pooling and a softmax ``fc``; SGD(0.01) unless ``opt`` is given."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = seed
    guard = unique_name.guard() if fresh_names else contextlib.nullcontext()
    with guard, program_guard(main, startup):
        x = layers.data(name="image", shape=[3, size, size], dtype="float32")
        y = layers.data(name="label", shape=[1], dtype="int64")

        def conv_bn(h: Variable, act: str | None) -> Variable:
            h = layers.conv2d(h, channels, 3, padding=1, bias_attr=False)
            return layers.batch_norm(h, act=act)

        stem = conv_bn(x, "relu")
        h = conv_bn(conv_bn(stem, "relu"), None)
        h = layers.elementwise_add(stem, h, act="relu")
        pooled = layers.pool2d(h, pool_type="avg", global_pooling=True)
        predict = layers.fc(pooled, n_classes, act="softmax")
        loss = layers.mean(layers.cross_entropy(predict, y))
        acc = layers.accuracy(predict, y)
        (opt or optimizer.SGD(0.01)).minimize(loss)
    return ProgramSpec(main, startup, ["image", "label"], loss, acc, predict)
