"""The op lists of automatic mixed precision, as Fluid 1.8's
``python/paddle/fluid/contrib/mixed_precision/fp16_lists.py``.

Fluid's lists are about numerical safety on its fp16 CUDA kernels. dask_fluid's kernels are
numpy/CuPy code that runs float16 wherever numpy does, so the lists are Fluid's unchanged:
``mean``, ``sum``, ``softmax`` and the losses stay float32 (black), ``conv2d``, ``matmul`` and
``mul`` run float16 (white), and the gray ops follow the ops that feed them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

__all__ = ["AutoMixedPrecisionLists"]

#: ops that support fp16 and are numerically safe and performance-critical: always fp16
white_list = {
    "conv2d",
    "matmul",
    "mul",
}

#: ops that are numerically dangerous in fp16 and whose effects may also be seen downstream:
#: always fp32
black_list = {
    "exp",
    "square",
    "log",
    "mean",
    "sum",
    "cos_sim",
    "softmax",
    "softmax_with_cross_entropy",
    "sigmoid_cross_entropy_with_logits",
    "cross_entropy",
    "cross_entropy2",
}

#: ops that support fp16: numerically safe ones that an upstream black op may make unsafe, and
#: ones with no numerical effect (reshape, stack). They run in the precision of the ops that
#: feed them: fp32 after a black op, otherwise fp16 after a white op.
gray_list = {
    "elementwise_add",
    "elementwise_sub",
    "elementwise_mul",
    "elementwise_div",
    "elementwise_max",
    "elementwise_min",
    "elementwise_pow",
    "elementwise_mod",
    "elementwise_floordiv",
    "batch_norm",
    "tanh",
    "sigmoid",
    "lookup_table",
    "top_k",
    "pool2d",
    "pool3d",
    "dropout",
    "relu",
    "relu6",
    "leaky_relu",
    "soft_relu",
    "flatten2",
    "stack",
    "unstack",
    "uniform_random_batch_size_like",
    "gaussian_random",
    "gaussian_random_batch_size_like",
    "slice",
    "rank",
    "scale",
    "transpose2",
    "reshape2",
    "gather",
    "fill_constant",
    "get_tensor_from_selected_rows",
    "sign",
    "cast",
}


def _names(value: Iterable[str] | None, arg: str) -> set[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        # a bare string would be split into its characters by set(); Fluid takes a set
        raise TypeError(f"AutoMixedPrecisionLists: {arg} must be a set or list of op names, "
                        f"got the string {value!r}")
    return set(value)


class AutoMixedPrecisionLists:
    """The white, black and gray op lists that decide which ops run in float16, with the
    user's additions, as Fluid 1.8's
    ``fluid.contrib.mixed_precision.AutoMixedPrecisionLists``.

    Parameters
    ----------
    custom_white_list : set of str, optional
        Ops to run in float16; they leave the black and gray lists.
    custom_black_list : set of str, optional
        Ops to keep in float32; they leave the white and gray lists.
    custom_black_varnames : set of str, optional
        Variables whose every reader and writer is kept in float32.

    Attributes
    ----------
    white_list, black_list, gray_list : set of str
    black_varnames : set of str or None

    Raises
    ------
    ValueError
        An op is in both custom lists.
    """

    def __init__(self, custom_white_list: Iterable[str] | None = None,
                 custom_black_list: Iterable[str] | None = None,
                 custom_black_varnames: Iterable[str] | None = None) -> None:
        self._custom_white_list = _names(custom_white_list, "custom_white_list")
        self._custom_black_list = _names(custom_black_list, "custom_black_list")
        self.white_list = copy.copy(white_list)
        self.black_list = copy.copy(black_list)
        self.gray_list = copy.copy(gray_list)
        self.black_varnames = _names(custom_black_varnames, "custom_black_varnames")
        self._update_list()

    def _update_list(self) -> None:
        """Move the custom ops to their lists (Fluid's ``_update_list``)."""
        if self._custom_white_list and self._custom_black_list:
            both = self._custom_white_list & self._custom_black_list
            if both:
                raise ValueError(f"Custom white list overlap custom black list: "
                                 f"{sorted(both)}")
        for op_name in self._custom_white_list or ():
            self.black_list.discard(op_name)
            self.gray_list.discard(op_name)
            self.white_list.add(op_name)
        for op_name in self._custom_black_list or ():
            self.white_list.discard(op_name)
            self.gray_list.discard(op_name)
            self.black_list.add(op_name)
