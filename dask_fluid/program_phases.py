"""The phases of a training program: forward and backward, then the optimize ops.

Data parallelism of every kind (several places in one process, NCCL2 trainers, the collective
runtime) runs the first phase once per replica, combines the gradients, then runs the second;
this module finds the border and the gradients to combine.
"""

from __future__ import annotations

from .framework import OP_ROLE_KEY, OP_ROLE_VAR_KEY, OpRole, Program
from .framework import grad_var_name as _grad_var_name

__all__ = ["PROGRAM_ALLREDUCE", "gradient_names", "optimize_start", "split_program"]

#: Fluid 1.8's in-program all-reduce (``fluid.layers.collective._allreduce``): gradients it reads
#: or writes are reduced by the program itself, and Fluid's graph builder adds no all-reduce
#: for them (``NeedCollectiveForGrad``)
PROGRAM_ALLREDUCE = "allreduce"


def optimize_start(main: Program) -> int | None:
    """Index of the first Optimize-role op of the global block, None when there is none."""
    return next((i for i, op in enumerate(main.global_block().ops)
                 if op.attrs.get(OP_ROLE_KEY, 0) & OpRole.Optimize), None)


def gradient_names(main: Program, first: int) -> list[str]:
    """Gradients the ops before ``first`` compute that must be all-reduced, sorted.

    From the backward ops' ``op_role_var`` (param, grad) pairs (Fluid's rule); for programs
    without role vars, every trainable parameter's gradient that is written. Gradients that an
    in-program ``allreduce`` op reads or writes are left out.
    """
    ops = main.global_block().ops[:first]
    grads: set[str] = set()
    for op in ops:
        pairs = op.attrs.get(OP_ROLE_VAR_KEY) or []
        if op.attrs.get(OP_ROLE_KEY, 0) & OpRole.Backward and len(pairs) % 2 == 0:
            grads.update(pairs[1::2])
    if not grads:
        written = {n for op in ops for n in op.output_arg_names}
        grads = {_grad_var_name(p.name) for p in main.all_parameters() if p.trainable} & written
    reduced = {n for op in main.global_block().ops if op.type == PROGRAM_ALLREDUCE
               for n in (*op.input_arg_names, *op.output_arg_names)}
    return sorted(grads - reduced)


def split_program(main: Program) -> tuple[Program, Program, list[str]]:
    """Split ``main`` at its first Optimize-role op.

    Returns
    -------
    compute : Program
        Forward and backward ops (and LR-schedule ops placed before the optimizer).
    optimize : Program
        The first Optimize-role op and every op after it.
    grads : list of str
        Gradient names to all-reduce (:func:`gradient_names`).

    Raises
    ------
    ValueError
        If the program has no optimize op or no gradient.
    """
    first = optimize_start(main)
    if first is None:
        raise ValueError("main_program has no optimize op: build it with optimizer.minimize(loss)"
                         " before collective training")
    grads = gradient_names(main, first)
    if not grads:
        raise ValueError("main_program computes no parameter gradient before its optimize ops")
    compute, optimize = main.clone(), main.clone()
    compute.global_block().ops = compute.global_block().ops[:first]
    optimize.global_block().ops = optimize.global_block().ops[first:]
    return compute, optimize, grads
