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

