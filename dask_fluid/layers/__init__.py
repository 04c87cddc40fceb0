"""Fluid-style layer builders (``dask_fluid.layers``)."""

from .control_flow import ConditionalBlock, Switch
from .learning_rate_scheduler import (
    autoincreased_step_counter,
    exponential_decay,
    piecewise_decay,
)
from .nn import (
    _binary_op,
    accuracy,
    clip,
    cross_entropy,
    dropout,
    elementwise_add,
    elementwise_div,
    elementwise_mul,
    elementwise_pow,
    elementwise_sub,
    embedding,
    fc,
    floor,
    mean,
    reduce_mean,
    reduce_sum,
    relu,
    scale,
    sigmoid,
    softmax,
    softmax_with_cross_entropy,
    square,
    square_error_cost,
    tanh,
    topk,
)
from .tensor import (
    assign,
    cast,
    concat,
    create_global_var,
    data,
    fill_constant,
    increment,
    less_than,
    logical_and,
    logical_not,
    ones,
    reshape,
    sums,
    zeros,
)

__all__ = [
    "ConditionalBlock", "Switch", "accuracy", "assign", "autoincreased_step_counter", "cast",
    "clip", "concat", "create_global_var", "cross_entropy", "data", "dropout",
    "elementwise_add", "elementwise_div", "elementwise_mul", "elementwise_pow",
    "elementwise_sub", "embedding", "exponential_decay", "fc", "fill_constant", "floor",
    "increment", "less_than", "logical_and", "logical_not", "mean", "ones", "piecewise_decay",
    "reduce_mean", "reduce_sum", "relu", "reshape", "scale", "sigmoid", "softmax",
    "softmax_with_cross_entropy", "square", "square_error_cost", "sums", "tanh", "topk",
    "zeros", "_binary_op",
]
