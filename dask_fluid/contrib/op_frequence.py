"""``fluid.contrib.op_frequence`` (Fluid 1.8): :func:`op_freq_statistic`, how often each op
type and each producer→consumer pair of op types occur, computed as
python/paddle/fluid/contrib/op_frequence.py computes them."""

from __future__ import annotations

from ..framework import Program

__all__: list[str] = ["op_freq_statistic"]


def op_freq_statistic(program: Program) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Count op types and adjacent op-type pairs of a program's global block, as Fluid 1.8's
    ``fluid.contrib.op_freq_statistic``.

    An op counts toward its type when it writes at least one variable that is not a
    parameter. For each input of an op that is not a parameter, the type of the last op that
    wrote it before gives a pair ``"<producer>-><consumer>"``; an input no earlier op wrote
    (fed data, a parameter's initial value) prints Fluid's ``Var's generate op is not found``
    line instead. Fluid 1.8's code is Python 2's (``dict.has_key``); this is its Python 3
    equivalent.

    Parameters
    ----------
    program : Program
        The program whose global block is counted.

    Returns
    -------
    tuple of (list, list)
        ``(uni_op_freq, adj_2_op_freq)``: lists of ``(op type, count)`` and
        ``("producer->consumer", count)``, most frequent first (ties in first-seen order), as
        Fluid returns them (sorted items, not dicts). The pairs are grouped by consumer type
        in the order the consumer types first read a produced variable.

    Raises
    ------
    TypeError
        ``program`` is not a Program.
    """
    if not isinstance(program, Program):
        raise TypeError(f"The input type should be Porgram. But you passed in {type(program)}")
    parameters = {p.name for p in program.blocks[0].all_parameters()}
    ops = program.global_block().ops
    uni: dict[str, int] = {}
    for op in ops:
        if any(n not in parameters for n in op.output_arg_names):
            uni[op.type] = uni.get(op.type, 0) + 1
    var_gen_op: dict[str, list[str]] = {}
    op_in_ops: dict[str, list[str]] = {}
    for op in ops:
        for name in op.input_arg_names:
            if name in parameters:
                continue
            if name in var_gen_op:
                op_in_ops.setdefault(op.type, []).append(var_gen_op[name][-1])
            else:
                print(f"Var's generate op is not found,{name}, {op.type}")
        for name in op.output_arg_names:
            var_gen_op.setdefault(name, []).append(op.type)
    adj: dict[str, int] = {}
    for op_type, in_ops in op_in_ops.items():
        for in_op in in_ops:
            key = f"{in_op}->{op_type}"
            adj[key] = adj.get(key, 0) + 1
    return (sorted(uni.items(), key=lambda kv: kv[1], reverse=True),
            sorted(adj.items(), key=lambda kv: kv[1], reverse=True))
