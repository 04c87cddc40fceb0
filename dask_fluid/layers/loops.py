"""Loops: ``While`` and the tensor arrays it writes (``create_array``, ``array_write``,
``array_read``, ``array_length``), as Fluid 1.8 builds them (ops ``while``,
``write_to_array``, ``read_from_array``, ``lod_array_length``; kernels in
:mod:`dask_fluid.control_flow_ops`, which also says what is not implemented: the backward
pass through them)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..framework import Variable, VarType, in_dygraph_mode
from ..layer_helper import LayerHelper
from .control_flow import sub_block
from .tensor import assign
from .utils import assert_same_structure, flatten, is_sequence, pack_sequence_as

__all__ = ["While", "array_length", "array_read", "array_write", "beam_search",
           "beam_search_decode", "create_array", "is_empty", "while_loop"]


def _check_index(i: Variable, layer: str) -> None:
    if not isinstance(i, Variable):
        raise TypeError(f"{layer}: i must be a Variable (an int64 tensor of one element, e.g. "
                        f"layers.fill_constant([1], 'int64', 0)), got {type(i).__name__}")
    if i.dtype not in ("int64", "int32"):
        raise TypeError(f"{layer}: i must be an integer tensor, got {i.dtype}")


def _dygraph_index(i: Variable, layer: str) -> int:
    """The value of a dygraph index ``i`` (a Variable of shape [1], as Fluid 1.8 asks)."""
    _check_index(i, layer)
    if list(i.shape) != [1]:
        raise ValueError(f"{layer}: the index i must have shape [1] in dygraph mode, got "
                         f"{list(i.shape)}")
    index = int(i.numpy().reshape(-1)[0])
    if index < 0:
        raise IndexError(f"{layer}: the index i is {index}; it must be >= 0")
    return index


class While:
    """Run the ops of :meth:`block` while ``cond`` holds (Fluid's ``layers.While``).

    The block must update ``cond`` (e.g. ``layers.less_than(i, n, cond=cond)``); it runs in
    the enclosing scope, so the variables it writes keep their last values after the loop.

    Parameters
    ----------
    cond : Variable
        A bool tensor of one element.
    is_test : bool
        Recorded on the op, as in Fluid.
    name : str, optional

    Raises
    ------
    TypeError
        ``cond`` is not a bool Variable of one element.

    Examples
    --------
    >>> i = layers.fill_constant([1], "int64", 0)
    >>> n = layers.fill_constant([1], "int64", 10)
    >>> cond = layers.less_than(i, n)
    >>> loop = layers.While(cond)
    >>> with loop.block():
    ...     layers.increment(i)
    ...     layers.less_than(i, n, cond=cond)
    """

    def __init__(self, cond: Variable, is_test: bool = False, name: str | None = None) -> None:
        if not isinstance(cond, Variable) or cond.dtype != "bool":
            got = cond.dtype if isinstance(cond, Variable) else type(cond).__name__
            raise TypeError(f"While: cond must be a bool Variable, got {got}")
        if cond.shape is not None and int(np.prod(cond.shape)) != 1:
            raise TypeError(f"While: condition expected shape as [], but given shape as "
                            f"{list(cond.shape)}")
        self.helper = LayerHelper("while", name)
        self.cond_var = cond
        self.is_test = bool(is_test)

    def block(self) -> contextlib.AbstractContextManager:
        """The loop's body: ops appended inside run at every iteration."""
        return sub_block(self._complete)

    def _complete(self) -> None:
        program = self.helper.main_program
        body = program.current_block()
        parent = program.block(body.parent_idx)
        written = {self.cond_var.name}
        read: dict[str, None] = {}
        for op in body.ops:
            for name in op.input_arg_names:
                if name not in written:
                    read[name] = None
            written.update(op.output_arg_names)
        outs = [v for v in (parent._find_var_recursive(n) for n in dict.fromkeys(
            [self.cond_var.name, *(n for op in body.ops for n in op.output_arg_names)]))
            if v is not None]
        steps = parent.create_var(name=f"_while_scopes_{body.idx}", type=VarType.STEP_SCOPES)
        parent.append_op("while",
                         inputs={"X": [parent._var_recursive(n) for n in read],
                                 "Condition": [self.cond_var]},
                         outputs={"Out": outs, "StepScopes": [steps]},
                         attrs={"sub_block": body.idx, "is_test": self.is_test})


def while_loop(cond: Callable[..., Variable], body: Callable[..., Any],
               loop_vars: Sequence[Any], is_test: bool = False,
               name: str | None = None) -> list[Any]:
    """``while cond(*loop_vars): loop_vars = body(*loop_vars)`` as a :class:`While` loop
    (Fluid 1.8's ``layers.while_loop``): ``body`` builds the ops of one iteration and returns
    the new values, which are assigned to ``loop_vars`` at its end; returns ``loop_vars``.

    ``loop_vars`` may nest lists, tuples and dicts of Variables (a dict's by key, as
    :mod:`.utils` flattens them); ``body`` returns the same structure. Such a structure is
    copied before ``body`` sees it, as Fluid does, so that ``body`` changing it in place does
    not change what the loop assigns to.

    Raises
    ------
    TypeError
        ``cond`` or ``body`` is not callable, ``loop_vars`` is not a list or tuple, one of its
        leaves is not a Variable, or ``cond`` does not give a bool of one element.
    ValueError
        ``loop_vars`` is empty, or ``body`` returns another structure or number of values.
    """
    if not callable(cond):
        raise TypeError("cond in while_loop should be callable")
    if not callable(body):
        raise TypeError("body in while_loop should be callable")
    if not isinstance(loop_vars, (list, tuple)):
        raise TypeError(f"loop_vars in while_loop must be a list or tuple, got "
                        f"{type(loop_vars).__name__}")
    if len(loop_vars) == 0:
        raise ValueError("loop_vars in while_loop should not be empty")
    leaves = flatten(loop_vars)
    wrong = next((v for v in leaves if not isinstance(v, Variable)), None)
    if wrong is not None:
        raise TypeError(f"loop_vars in while_loop must hold Variables (in lists, tuples or "
                        f"dicts), got a {type(wrong).__name__}")
    pre_cond = cond(*loop_vars)
    if not isinstance(pre_cond, Variable) or pre_cond.dtype != "bool":
        raise TypeError("the variable returned by cond in while_loop must be a bool Variable")
    if pre_cond.shape is not None and int(np.prod(pre_cond.shape)) != 1:
        raise TypeError(f"the shape of the variable returned by cond should be [1],but given "
                        f"shape as {list(pre_cond.shape)}.")
    if in_dygraph_mode():  # Fluid 1.8: a Python loop on the values
        while bool(pre_cond):
            outputs = body(*loop_vars)
            outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            if len(outputs) != len(loop_vars):
                raise ValueError("body in while_loop should return the same arity (length "
                                 "and structure) and types as loop_vars")
            loop_vars, pre_cond = outputs, cond(*outputs)
        return list(loop_vars)
    loop = While(pre_cond, is_test, name)
    with loop.block():
        # a fresh copy of any list or dict in loop_vars: body may change it in place
        given = pack_sequence_as(loop_vars, leaves) if any(map(is_sequence, loop_vars)) \
            else loop_vars
        outputs = body(*given)
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        try:
            assert_same_structure(outputs, list(loop_vars), check_types=False)
        except ValueError as exc:
            raise ValueError(f"body in while_loop should return the same arity (length and "
                             f"structure) as loop_vars: {exc}") from None
        now_cond = cond(*outputs)
        for out, var in zip(flatten(outputs), leaves, strict=True):
            if out is not var:
                assign(out, var)
        assign(now_cond, pre_cond)
    return list(loop_vars)


def create_array(dtype: str) -> Variable | list:
    """An empty tensor array of ``dtype`` items (Fluid's ``create_array``); in dygraph mode
    a Python list, as Fluid 1.8's."""
    if in_dygraph_mode():
        return []
    helper = LayerHelper("array")
    return helper.main_program.current_block().create_var(
        name=f"{helper.name}.out", type=VarType.LOD_TENSOR_ARRAY, dtype=str(np.dtype(dtype)))


def array_write(x: Variable, i: Variable,
                array: Variable | list | None = None) -> Variable | list:
    """Write ``x`` at index ``i`` of ``array`` (a new array when None), growing it as needed;
    returns the array. As Fluid's shape inference, the array takes ``x``'s shape, which
    :func:`array_read` gives its output. In dygraph mode ``array`` is a Python list, which
    ``x`` replaces item ``i`` of, or is appended to at its end."""
    if in_dygraph_mode():
        if not isinstance(x, Variable):
            raise TypeError(f"array_write: x must be a Variable in dygraph mode, got "
                            f"{type(x).__name__}")
        index = _dygraph_index(i, "array_write")
        array = [] if array is None else array
        if not isinstance(array, list):
            raise TypeError(f"array_write: array must be a list in dygraph mode, got "
                            f"{type(array).__name__}")
        if index > len(array):
            raise IndexError(f"array_write: index {index} is past the end of an array of "
                             f"{len(array)} items (dygraph mode writes at most at its end)")
        if index < len(array):
            array[index] = x
        else:
            array.append(x)
        return array
    _check_index(i, "array_write")
    helper = LayerHelper("array_write")
    if array is None:
        array = helper.main_program.current_block().create_var(
            name=f"{helper.name}.out", type=VarType.LOD_TENSOR_ARRAY, dtype=x.dtype)
    elif array.type != VarType.LOD_TENSOR_ARRAY:
        raise TypeError(f"array_write: array must be a tensor array (layers.create_array), "
                        f"got {array.name!r} of type {array.type}")
    helper.append_op("write_to_array", inputs={"X": [x], "I": [i]}, outputs={"Out": [array]})
    array.shape = x.shape
    return array


def array_read(array: Variable | list, i: Variable) -> Variable:
    """Item ``i`` of ``array`` (with its LoD); of a Python list in dygraph mode."""
    if in_dygraph_mode():
        if not isinstance(array, list):
            raise TypeError(f"array_read: array must be a list in dygraph mode, got "
                            f"{type(array).__name__}")
        index = _dygraph_index(i, "array_read")
        if index >= len(array):
            raise IndexError(f"array_read: index {index} is out of range for an array of "
                             f"{len(array)} items")
        return array[index]
    _check_index(i, "array_read")
    if not isinstance(array, Variable) or array.type != VarType.LOD_TENSOR_ARRAY:
        raise TypeError("array_read: array must be a tensor array Variable "
                        "(layers.create_array or array_write)")
    helper = LayerHelper("array_read")
    out = helper.create_tmp(dtype=array.dtype, shape=array.shape)
    helper.append_op("read_from_array", inputs={"X": [array], "I": [i]},
                     outputs={"Out": [out]})
    return out


def array_length(array: Variable | list) -> Variable | int:
    """The number of items of ``array`` (an int64 tensor ``[1]``; a Python int of a list in
    dygraph mode, as Fluid 1.8)."""
    if in_dygraph_mode():
        if not isinstance(array, list):
            raise TypeError(f"array_length: array must be a list in dygraph mode, got "
                            f"{type(array).__name__}")
        return len(array)
    if not isinstance(array, Variable) or array.type != VarType.LOD_TENSOR_ARRAY:
        raise TypeError("array_length: array must be a tensor array Variable")
    helper = LayerHelper("array_length")
    out = helper.create_tmp(dtype="int64", shape=[1], stop_gradient=True)
    helper.append_op("lod_array_length", inputs={"X": [array]}, outputs={"Out": [out]})
    return out


def is_empty(x: Variable, cond: Variable | None = None) -> Variable:
    """Whether ``x`` has no elements (a bool ``[1]``; into ``cond`` when given), e.g. to stop
    a decoding loop once beam search has no candidates left."""
    if not isinstance(x, Variable):
        raise TypeError(f"is_empty: x must be a Variable, got {type(x).__name__}")
    helper = LayerHelper("is_empty")
    if cond is None:
        cond = helper.create_tmp(dtype="bool", shape=[1], stop_gradient=True)
    elif cond.dtype != "bool":
        raise TypeError(f"is_empty: cond must be bool, got {cond.dtype}")
    helper.append_op("is_empty", inputs={"X": [x]}, outputs={"Out": [cond]})
    return cond


def beam_search(pre_ids: Variable, pre_scores: Variable, ids: Variable | None,
                scores: Variable, beam_size: int, end_id: int, level: int = 0,
                is_accumulated: bool = True, name: str | None = None,
                return_parent_idx: bool = False) -> tuple[Variable, ...]:
    """One step of beam search (Fluid 1.8's ``layers.beam_search``; the rules are in
    :mod:`dask_fluid.ops.beam_search_ops`).

    Parameters
    ----------
    pre_ids, pre_scores : Variable
        The previous step's selection (int64 and float ``[N, 1]``, LoD of 2 levels).
    ids : Variable or None
        The candidates' ids ``[N, K]`` (None: the column index is the id).
    scores : Variable
        The candidates' scores ``[N, K]``, with the LoD of ``pre_ids``.
    beam_size, end_id : int
    level : int
        The LoD level that gives each source its prefixes.
    is_accumulated : bool
        ``scores`` are already total scores; else ``pre_score + log(score)`` is used.
    return_parent_idx : bool
        Also return each selected candidate's prefix index (int32).

    Returns
    -------
    tuple of Variable
        ``(selected_ids, selected_scores)`` (``[M, 1]``, LoD of 2 levels), and
        ``parent_idx`` with ``return_parent_idx``.

    Raises
    ------
    TypeError
        An input is not a Variable of the dtype Fluid asks for.
    """
    for arg, var, dtypes in (("pre_ids", pre_ids, ("int64",)),
                             ("pre_scores", pre_scores, ("float32", "float64")),
                             ("scores", scores, ("float32", "float64"))):
        if not isinstance(var, Variable) or var.dtype not in dtypes:
            got = var.dtype if isinstance(var, Variable) else type(var).__name__
            raise TypeError(f"beam_search: {arg} must be a Variable of {list(dtypes)}, got {got}")
    if ids is not None and not isinstance(ids, Variable):
        raise TypeError(f"beam_search: ids must be a Variable or None, got {type(ids).__name__}")
    helper = LayerHelper("beam_search", name)
    inputs = {"pre_ids": [pre_ids], "pre_scores": [pre_scores], "scores": [scores]}
    if ids is not None:
        inputs["ids"] = [ids]
    selected_scores = helper.create_tmp(dtype=pre_scores.dtype, shape=[-1, 1],
                                        stop_gradient=True)
    selected_ids = helper.create_tmp(dtype=pre_ids.dtype, shape=[-1, 1], stop_gradient=True)
    parent_idx = helper.create_tmp(dtype="int32", shape=[-1], stop_gradient=True)
    helper.append_op("beam_search", inputs=inputs,
                     outputs={"selected_ids": [selected_ids],
                              "selected_scores": [selected_scores],
                              "parent_idx": [parent_idx]},
                     attrs={"level": int(level), "beam_size": int(beam_size),
                            "end_id": int(end_id), "is_accumulated": bool(is_accumulated)})
    if return_parent_idx:
        return selected_ids, selected_scores, parent_idx
    return selected_ids, selected_scores


def beam_search_decode(ids: Variable, scores: Variable, beam_size: int, end_id: int,
                       name: str | None = None) -> tuple[Variable, Variable]:
    """The hypotheses out of every step of a beam search (Fluid 1.8's
    ``layers.beam_search_decode``): ``ids`` and ``scores`` are the tensor arrays the loop
    wrote each step's selection to. Returns ``(sentence_ids, sentence_scores)``, 1-D with a
    LoD of 2 levels: the hypotheses of each source (best first), the tokens of each."""
    for arg, var in (("ids", ids), ("scores", scores)):
        if not isinstance(var, Variable) or var.type != VarType.LOD_TENSOR_ARRAY:
            raise TypeError(f"beam_search_decode: {arg} must be a tensor array Variable "
                            "(what array_write fills)")
    helper = LayerHelper("beam_search_decode", name)
    sentence_ids = helper.create_tmp(dtype=ids.dtype, shape=[-1], stop_gradient=True)
    sentence_scores = helper.create_tmp(dtype=scores.dtype, shape=[-1], stop_gradient=True)
    helper.append_op("beam_search_decode", inputs={"Ids": [ids], "Scores": [scores]},
                     outputs={"SentenceIds": [sentence_ids],
                              "SentenceScores": [sentence_scores]},
                     attrs={"beam_size": int(beam_size), "end_id": int(end_id)})
    return sentence_ids, sentence_scores
