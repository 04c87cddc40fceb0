"""``fluid.nets``: Fluid 1.8's composite networks, built from ``fluid.layers``."""

from __future__ import annotations

from typing import Any

from . import layers
from .framework import Variable

__all__ = ["glu", "img_conv_group", "scaled_dot_product_attention", "sequence_conv_pool",
           "simple_img_conv_pool"]


def simple_img_conv_pool(input: Variable, num_filters: int, filter_size: Any, pool_size: Any,
                         pool_stride: Any, pool_padding: Any = 0, pool_type: str = "max",
                         global_pooling: bool = False, conv_stride: Any = 1,
                         conv_padding: Any = 0, conv_dilation: Any = 1, conv_groups: int = 1,
                         param_attr: Any = None, bias_attr: Any = None, act: str | None = None,
                         use_cudnn: bool = True) -> Variable:
    """``conv2d`` (with ``act``) followed by ``pool2d``, as Fluid 1.8's
    ``nets.simple_img_conv_pool``."""
    conv_out = layers.conv2d(input=input, num_filters=num_filters, filter_size=filter_size,
                             stride=conv_stride, padding=conv_padding, dilation=conv_dilation,
                             groups=conv_groups, param_attr=param_attr, bias_attr=bias_attr,
                             act=act, use_cudnn=use_cudnn)
    return layers.pool2d(input=conv_out, pool_size=pool_size, pool_type=pool_type,
                         pool_stride=pool_stride, pool_padding=pool_padding,
                         global_pooling=global_pooling, use_cudnn=use_cudnn)


def sequence_conv_pool(input: Variable, num_filters: int, filter_size: int,
                       param_attr: Any = None, act: str = "sigmoid", pool_type: str = "max",
                       bias_attr: Any = None) -> Variable:
    """``sequence_conv`` (with ``act``) followed by ``sequence_pool``, as Fluid 1.8's
    ``nets.sequence_conv_pool``: one row per sequence."""
    if input.dtype not in ("float32", "float64"):
        raise TypeError(f"sequence_conv_pool: input must be float32 or float64, got "
                        f"{input.dtype}")
    conv_out = layers.sequence_conv(input=input, num_filters=num_filters,
                                    filter_size=filter_size, param_attr=param_attr,
                                    bias_attr=bias_attr, act=act)
    return layers.sequence_pool(input=conv_out, pool_type=pool_type)


def img_conv_group(input: Variable, conv_num_filter: list[int] | tuple[int, ...],
                   pool_size: Any, conv_padding: Any = 1, conv_filter_size: Any = 3,
                   conv_act: str | None = None, param_attr: Any = None,
                   conv_with_batchnorm: Any = False, conv_batchnorm_drop_rate: Any = 0.0,
                   pool_stride: Any = 1, pool_type: str = "max",
                   use_cudnn: bool = True) -> Variable:
    """A VGG-style group: one ``conv2d`` per entry of ``conv_num_filter`` (each optionally
    followed by ``batch_norm`` and ``dropout``), then ``pool2d``, as Fluid 1.8's
    ``nets.img_conv_group``. Per-conv arguments may be single values or lists."""
    if not isinstance(conv_num_filter, (list, tuple)):
        raise TypeError("img_conv_group: conv_num_filter must be a list or tuple of ints")
    n = len(conv_num_filter)

    def each(value: Any, name: str) -> list:
        if not hasattr(value, "__len__") or isinstance(value, str):
            return [value] * n
        if len(value) != n:
            raise ValueError(f"img_conv_group: {name} has {len(value)} entries for {n} convs")
        return list(value)

    paddings, sizes = each(conv_padding, "conv_padding"), each(conv_filter_size,
                                                              "conv_filter_size")
    attrs, with_bn = each(param_attr, "param_attr"), each(conv_with_batchnorm,
                                                         "conv_with_batchnorm")
    drops = each(conv_batchnorm_drop_rate, "conv_batchnorm_drop_rate")
    tmp = input
    for i in range(n):
        tmp = layers.conv2d(input=tmp, num_filters=conv_num_filter[i],
                            filter_size=sizes[i], padding=paddings[i], param_attr=attrs[i],
                            act=None if with_bn[i] else conv_act, use_cudnn=use_cudnn)
        if with_bn[i]:
            tmp = layers.batch_norm(input=tmp, act=conv_act)
            if abs(drops[i]) > 1e-5:
                tmp = layers.dropout(x=tmp, dropout_prob=drops[i])
    return layers.pool2d(input=tmp, pool_size=pool_size, pool_type=pool_type,
                         pool_stride=pool_stride, use_cudnn=use_cudnn)


def glu(input: Variable, dim: int = -1) -> Variable:
    """Gated linear unit: ``a * sigmoid(b)`` for the two halves ``a, b`` of ``input`` along
    ``dim``."""
    a, b = layers.split(input, num_or_sections=2, dim=dim)
    return layers.elementwise_mul(x=a, y=layers.sigmoid(b))


def scaled_dot_product_attention(queries: Variable, keys: Variable, values: Variable,
                                 num_heads: int = 1, dropout_rate: float = 0.0) -> Variable:
    """Multi-head scaled dot-product attention of 3-D ``[batch, length, hidden]`` inputs, as
    Fluid 1.8's ``nets.scaled_dot_product_attention``: with ``num_heads > 1`` each input goes
    through its own ``fc`` first; the output is ``[batch, query length, value hidden]``."""
    if not len(queries.shape) == len(keys.shape) == len(values.shape) == 3:
        raise ValueError("Inputs quries, keys and values should all be 3-D tensors.")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError("The hidden size of queries and keys should be the same.")
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError("The max sequence length in query batch and in key batch should be "
                         "the same.")
    for name, var in (("keys", keys), ("values", values)):
        if var.shape[-1] % num_heads:
            raise ValueError(f"The hidden size of {name} ({var.shape[-1]}) must be divisible "
                             f"by the number of attention heads ({num_heads}).")

    def split_heads(x: Variable) -> Variable:
        if num_heads == 1:
            return x
        hidden = x.shape[-1]
        reshaped = layers.reshape(x, shape=[*list(x.shape[:-1]), num_heads, hidden // num_heads])
        return layers.transpose(reshaped, perm=[0, 2, 1, 3])

    q, k, v = queries, keys, values
    if num_heads > 1:
        q = layers.fc(queries, size=queries.shape[-1], num_flatten_dims=2)
        k = layers.fc(keys, size=keys.shape[-1], num_flatten_dims=2)
        v = layers.fc(values, size=values.shape[-1], num_flatten_dims=2)
    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    scaled_q = layers.scale(q, scale=(keys.shape[-1] // num_heads) ** -0.5)
    product = layers.matmul(scaled_q, k, transpose_y=True)
    weights = layers.reshape(layers.reshape(product, shape=[-1, product.shape[-1]],
                                            act="softmax"), shape=list(product.shape))
    if dropout_rate:
        weights = layers.dropout(weights, dropout_prob=dropout_rate, is_test=False)
    ctx = layers.matmul(weights, v)
    if len(ctx.shape) == 3:
        return ctx
    trans = layers.transpose(ctx, perm=[0, 2, 1, 3])
    return layers.reshape(trans, shape=[int(trans.shape[0]), int(trans.shape[1]),
                                        int(trans.shape[2] * trans.shape[3])])
