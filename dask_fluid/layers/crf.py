"""Linear-chain CRF layers of ``fluid.layers`` (Fluid 1.8's signatures; the kernels are in
:mod:`dask_fluid.ops.crf_ops`)."""

from __future__ import annotations

from typing import Any

from ..framework import Parameter, Variable
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .tensor import _check_var

__all__ = ["crf_decoding", "linear_chain_crf"]


def linear_chain_crf(input: Variable, label: Variable, param_attr: Any = None,
                     length: Variable | None = None) -> Variable:
    """The negative log-likelihood of each tag sequence under a linear-chain CRF.

    Parameters
    ----------
    input : Variable
        The emission scores: ``[T, D]`` with LoD (one chain a sequence), or ``[N, S, D]``
        padded, with ``length``.
    label : Variable
        The tags, int64, one a row of ``input``.
    param_attr : ParamAttr, optional
        The transition parameter ``[D + 2, D]`` (start scores, end scores, then tag to tag);
        name it to decode with :func:`crf_decoding`.
    length : Variable, optional
        ``[N]`` int64, the length of each padded chain.

    Returns
    -------
    Variable
        ``[num_chains, 1]``: ``log Z - score(label)`` of each chain.
    """
    _check_var(input, "input", "linear_chain_crf")
    _check_var(label, "label", "linear_chain_crf")
    helper = LayerHelper("linear_chain_crf")
    size = input.shape[2] if length is not None else input.shape[1]
    transition = helper.create_parameter(ParamAttr._to_attr(param_attr), [size + 2, size],
                                         input.dtype)
    inputs = {"Emission": [input], "Transition": [transition], "Label": [label]}
    if length is not None:
        inputs["Length"] = [length]
    outs = {"Alpha": [helper.create_tmp(input.dtype, list(input.shape), stop_gradient=True)],
            "EmissionExps": [helper.create_tmp(input.dtype, list(input.shape),
                                               stop_gradient=True)],
            "TransitionExps": [helper.create_tmp(input.dtype, [size + 2, size],
                                                 stop_gradient=True)],
            "LogLikelihood": [helper.create_tmp(input.dtype, [-1, 1])]}
    helper.append_op("linear_chain_crf", inputs=inputs, outputs=outs)
    return outs["LogLikelihood"][0]


def crf_decoding(input: Variable, param_attr: Any, label: Variable | None = None,
                 length: Variable | None = None) -> Variable:
    """The best tag sequence of each chain (Viterbi) under the transition parameter that
    ``param_attr`` names (the one :func:`linear_chain_crf` trained).

    Returns
    -------
    Variable
        int64 ``[T, 1]`` with ``input``'s LoD (``[N, S]`` when padded); with ``label``, 1
        where the best tag equals the label and 0 elsewhere.
    """
    _check_var(input, "input", "crf_decoding")
    attr = ParamAttr._to_attr(param_attr)
    name = getattr(attr, "name", None)
    block = LayerHelper("crf_decoding").main_program.global_block()
    if not name or not isinstance(block.vars.get(name), Parameter):
        raise ValueError(f"crf_decoding: param_attr must name the transition parameter of a "
                         f"linear_chain_crf in this program, got {param_attr!r}")
    helper = LayerHelper("crf_decoding")
    inputs = {"Emission": [input], "Transition": [block.vars[name]]}
    if label is not None:
        inputs["Label"] = [label]
    if length is not None:
        inputs["Length"] = [length]
    shape = list(input.shape[:2]) if length is not None else [input.shape[0], 1]
    path = helper.create_tmp("int64", shape, stop_gradient=True)
    helper.append_op("crf_decoding", inputs=inputs, outputs={"ViterbiPath": [path]})
    return path
