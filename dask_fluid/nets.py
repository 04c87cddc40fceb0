"""``fluid.nets``: Fluid 1.8's composite networks, built from ``fluid.layers``."""

from __future__ import annotations

from typing import Any

from . import layers
from .framework import Variable

__all__ = ["simple_img_conv_pool"]


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
