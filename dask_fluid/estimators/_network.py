"""The Fluid programs behind the estimators: an MLP (or a linear model) with its loss."""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import layers, optimizer, unique_name
from ..framework import Program, Variable, program_guard
from ..param_attr import ParamAttr
from ..regularizer import L2Decay

#: scikit-learn activation name -> Fluid op (None: identity)
ACTIVATIONS: dict[str, str | None] = {
    "relu": "relu", "tanh": "tanh", "logistic": "sigmoid", "identity": None,
}
FEATURES, LABEL = "x", "y"


@dataclass(frozen=True)
class NetSpec:
    """Everything that shapes the program; equal specs build programs with equal names."""

    n_features: int
    hidden: tuple[int, ...]
    n_outputs: int
    task: str  # "classification" | "regression"
    activation: str = "relu"
    solver: str = "adam"
    learning_rate: float = 1e-3
    momentum: float = 0.9
    nesterov: bool = True
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-8
    l2: float = 0.0
    seed: int = 1


@dataclass
class Network:
    """A built training program and the names callers feed, fetch and read back."""

    main: Program
    startup: Program
    loss: Variable
    output: Variable
    weights: list[str] = field(default_factory=list)
    biases: list[str] = field(default_factory=list)

    @property
    def feeds(self) -> list[str]:
        return [FEATURES, LABEL]


def make_optimizer(spec: NetSpec) -> optimizer.Optimizer:
    """Fluid optimizer of ``spec.solver``.

    ``"sgd"`` with ``momentum > 0`` is Fluid's Momentum optimizer, which is what scikit-learn's
    ``solver="sgd"`` computes (its velocity update is the same recurrence up to the sign of
    ``v``); ``"momentum"`` always uses it, ``"sgd"`` with ``momentum == 0`` is plain SGD.
    """
    if spec.solver == "adam":
        return optimizer.AdamOptimizer(spec.learning_rate, beta1=spec.beta_1,
                                       beta2=spec.beta_2, epsilon=spec.epsilon)
    if spec.solver == "momentum" or spec.momentum > 0:
        return optimizer.MomentumOptimizer(spec.learning_rate, spec.momentum,
                                           use_nesterov=spec.nesterov)
    return optimizer.SGDOptimizer(spec.learning_rate)


def build(spec: NetSpec) -> Network:
    """Build ``x → fc(h, act)… → fc(n_outputs) → loss`` and its optimizer ops.

    Classification: ``softmax_with_cross_entropy`` on int64 class indices (binary problems use
    two softmax outputs, so ``coefs_[-1]`` has two columns, unlike scikit-learn's single
    logistic unit). Regression: half the mean squared error, as scikit-learn, so learning rates
    transfer. Weights (not biases) carry an L2Decay of ``spec.l2``.
    """
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = spec.seed
    decay = L2Decay(spec.l2) if spec.l2 > 0 else None
    weights: list[str] = []
    biases: list[str] = []
    with unique_name.guard(), program_guard(main, startup):
        x = layers.data(name=FEATURES, shape=[spec.n_features], dtype="float32")
        classify = spec.task == "classification"
        y = layers.data(name=LABEL, shape=[1 if classify else spec.n_outputs],
                        dtype="int64" if classify else "float32")
        h = x
        sizes: Sequence[int] = (*spec.hidden, spec.n_outputs)
        for i, size in enumerate(sizes):
            last = i == len(sizes) - 1
            h = layers.fc(h, size, act=None if last else ACTIVATIONS[spec.activation],
                          param_attr=ParamAttr(regularizer=decay))
        if classify:
            loss = layers.mean(layers.softmax_with_cross_entropy(h, y))
        else:
            # elementwise_mul by a constant, not the scale op: backward.py skips scale's
            # gradient (its grad maker reads slot "X", which is not an @GRAD slot)
            half = layers.fill_constant([1], "float32", 0.5)
            loss = layers.elementwise_mul(layers.mean(layers.square_error_cost(h, y)), half)
        for p in main.global_block().all_parameters():
            (biases if ".b_" in p.name else weights).append(p.name)
        make_optimizer(spec).minimize(loss)
    # fc names parameters fc_<i>.w_0 / fc_<i>.b_0: sorting by layer index gives layer order
    key = _layer_index
    return Network(main, startup, loss, h, sorted(weights, key=key), sorted(biases, key=key))


def _layer_index(name: str) -> int:
    return int(name.split(".")[0].rsplit("_", 1)[1])
