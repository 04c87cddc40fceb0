"""The ``recurrent`` op (what ``StaticRNN`` builds) and its gradient ``recurrent_grad``.

``recurrent`` runs its step block once per time step, in a step scope of its own that reads
through to the outer scope (Fluid's step scopes):

- each step input ``inputs[k]`` (``[T, ...]``) is visible in the step under its own name as
  its slice ``[t]``;
- the memories: ``ex_states[k]`` holds ``initial_states[k]`` at the first step and the value
  of ``states[k]`` after the previous step at the others;
- each output is read from the step under its own name and stacked into ``[T, ...]``;
- ``reverse`` runs the steps from ``T - 1`` down to 0.

Its grad maker differentiates the step block into a grad block (the same rules as
:func:`.backward.append_backward`, seeded with the outputs' and the states' gradients), and
``recurrent_grad`` runs that block over the kept step scopes from the last step to the first:
the states' gradients flow from each step to the one before it, the step inputs get their
slices' gradients, and the outer variables the block reads (``parameters``: weights, most
often) get the sum over the steps.
"""

from __future__ import annotations

from typing import Any

from .backward import create_grad_vars, grad_descs
from .executor import RunContext
from .framework import EMPTY_VAR, grad_var_name
from .ops import registry


def _order(steps: int, attrs: dict) -> range:
    return range(steps - 1, -1, -1) if attrs.get("reverse") else range(steps)


def _steps_of(ins: dict, op: Any) -> int:
    xs = [x for x in ins.get("inputs") or [] if x is not None]
    if not xs:
        raise ValueError("recurrent: the step block needs at least one step input "
                         "(StaticRNN.step_input)")
    steps = {int(x.shape[0]) for x in xs}
    if len(steps) != 1:
        raise ValueError(f"recurrent: the step inputs {op.input('inputs')} must have the same "
                         f"number of time steps (dim 0), got {sorted(steps)}")
    return steps.pop()


def _recurrent(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    op = ctx.op
    steps = _steps_of(ins, op)
    ex, st = list(attrs["ex_states"]), list(attrs["states"])
    states = list(ins.get("initial_states") or [])
    if not len(ex) == len(st) == len(states):
        raise ValueError(f"recurrent: ex_states {ex}, states {st} and initial_states "
                         f"{op.input('initial_states')} must pair up one to one")
    block = ctx.program.block(attrs["sub_block"])
    names_in, names_out = op.input("inputs"), op.output("outputs")
    per_step: list[list[Any]] = [[] for _ in range(steps)]
    scopes: list[Any] = [None] * steps
    for t in _order(steps, attrs):
        step = ctx.scope._step_scope()
        for name, x in zip(names_in, ins["inputs"], strict=True):
            step.set(name, x[t])
            step.lods[name] = None  # a time slice has no sequences
        for name, value in zip(ex, states, strict=True):
            step.set(name, value)
        ctx.executor.run_block(ctx.program, block, step)
        states = [step.get(name) for name in st]
        per_step[t] = [step.get(name) for name in names_out]
        scopes[t] = step
    xp = registry.array_module(*ins["inputs"])
    outputs = [xp.stack([per_step[t][k] for t in range(steps)]) for k in range(len(names_out))]
    return {"outputs": outputs, "step_scopes": [scopes]}


def _zeros_like(value: Any) -> Any:
    return registry.array_module(value).zeros_like(value)


def _recurrent_grad(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    op = ctx.op
    steps = _steps_of(ins, op)
    scopes = ins["step_scopes"][0]
    if scopes is None or len(scopes) != steps:
        raise ValueError("recurrent_grad: the forward recurrent op kept no step scopes for "
                         "this run; run the forward and backward ops in one program run")
    block = ctx.program.block(attrs["sub_block"])
    ex, st = list(attrs["ex_states"]), list(attrs["states"])
    names_in, names_out = op.input("inputs"), op.input("outputs")
    params = op.input("parameters")
    d_outs = ins.get("outputs@GRAD") or [None] * len(names_out)
    state_grads: list[Any] = [None] * len(st)
    param_grads: list[Any] = [None] * len(params)
    input_grads: list[list[Any]] = [[None] * steps for _ in names_in]
    for t in reversed(list(_order(steps, attrs))):
        g = scopes[t]._step_scope()
        # the block's grad ops read every seed: zeros for the gradients nothing produced
        for name, d in zip(names_out, d_outs, strict=True):
            g.set(grad_var_name(name), _zeros_like(g.get(name)) if d is None else d[t])
        for name, d in zip(st, state_grads, strict=True):
            g.set(grad_var_name(name), _zeros_like(g.get(name)) if d is None else d)
        ctx.executor.run_block(ctx.program, block, g)
        local = g.vars.maps[0]  # what this step's grad block wrote
        for k, name in enumerate(names_in):
            input_grads[k][t] = local.get(grad_var_name(name))
        state_grads = [local.get(grad_var_name(name)) for name in ex]
        for k, name in enumerate(params):
            d = local.get(grad_var_name(name))
            if d is not None:
                param_grads[k] = d if param_grads[k] is None else param_grads[k] + d
    res: dict = {}
    if "inputs@GRAD" in outs:
        grads = []
        for k, x in enumerate(ins["inputs"]):
            rows = [d if d is not None else _zeros_like(x[t])
                    for t, d in enumerate(input_grads[k])]
            grads.append(registry.array_module(x).stack(rows))
        res["inputs@GRAD"] = grads
    if "initial_states@GRAD" in outs:
        res["initial_states@GRAD"] = [d if d is not None else _zeros_like(s) for d, s in
                                      zip(state_grads, ins["initial_states"], strict=True)]
    if "parameters@GRAD" in outs:
        res["parameters@GRAD"] = [d if d is not None else _zeros_like(p) for d, p in
                                  zip(param_grads, ins["parameters"], strict=True)]
    return res


def _recurrent_grad_maker(op: Any) -> list[dict]:
    """``recurrent_grad`` with the grad block of the step block, built beside it."""
    program = op.block.program
    step_block = program.block(op.attrs["sub_block"])
    outputs = list(op.outputs["outputs"])
    no_grad = {grad_var_name(v.name) for v in step_block.vars.values() if v.stop_gradient}
    for name in op.inputs.get("parameters", []):
        var = op.block._find_var_recursive(name)
        if var is not None and var.stop_gradient:
            no_grad.add(grad_var_name(name))
    seeds = [grad_var_name(n) for n in outputs + list(op.attrs["states"])]
    descs = grad_descs(step_block.ops, no_grad, seeds)
    current = program.current_block_idx
    grad_block = program._create_block(parent_idx=step_block.idx)
    grad_block.forward_block_idx = step_block.idx
    program.current_block_idx = current
    create_grad_vars(grad_block, descs)
    for desc in descs:
        grad_block.append_op(desc["type"], desc["inputs"], desc["outputs"], desc["attrs"])

    def grads(slot: str) -> list[str]:
        return [EMPTY_VAR if grad_var_name(n) in no_grad else grad_var_name(n)
                for n in op.inputs.get(slot, [])]

    inputs = {slot: list(op.inputs.get(slot, []))
              for slot in ("inputs", "initial_states", "parameters")}
    inputs.update(outputs=outputs, step_scopes=list(op.outputs["step_scopes"]))
    inputs["outputs@GRAD"] = [grad_var_name(n) for n in outputs]
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    attrs["sub_block"] = grad_block.idx
    return [{"type": "recurrent_grad", "inputs": inputs,
             "outputs": {slot + "@GRAD": grads(slot)
                         for slot in ("inputs", "initial_states", "parameters")},
             "attrs": attrs}]


registry.set_kernel("recurrent", _recurrent)
registry.set_kernel("recurrent_grad", _recurrent_grad)
registry.set_grad("recurrent", _recurrent_grad_maker)
