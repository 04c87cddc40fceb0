"""The ops that run a step block over time steps: ``recurrent`` (what ``StaticRNN`` builds),
``dynamic_recurrent`` (``DynamicRNN``) and their gradients.

``recurrent`` runs its step block once per time step, in a step scope of its own that reads
through to the outer scope (Fluid's step scopes):

- each step input ``inputs[k]`` (``[T, ...]``) is visible in the step under its own name as
  its slice ``[t]``;
- the memories: ``ex_states[k]`` holds ``initial_states[k]`` at the first step and the value
  of ``states[k]`` after the previous step at the others;
- each output is read from the step under its own name and stacked into ``[T, ...]``;
- ``reverse`` runs the steps from ``T - 1`` down to 0.

``dynamic_recurrent`` does the same over the sequences of LoD step inputs, as Fluid's
DynamicRNN (a ``while`` loop over LoD-tensor arrays there): the sequences are taken longest
first (stable, Fluid's LoDRankTable) and step ``t`` sees the ``t``-th rows of the sequences
that have one; ``static_inputs`` are LoD tensors whose sequences (one per step-input sequence)
are reordered the same way and cut to the running ones (a static input without LoD has one row
per sequence, as Fluid's ``reorder_lod_tensor_by_rank`` takes it, and stays without LoD in the
step, as its ``shrink_rnn_memory`` leaves it); a memory's rows follow that order
(``need_reorder`` reorders an init given in the sequences' own order) and lose the rows of
sequences that ended (``shrink_rnn_memory``); each output row goes back where its input row
was, so the outputs have the step inputs' LoD.

Their grad maker differentiates the step block into a grad block (the same rules as
:func:`.backward.append_backward`, seeded with the outputs' and the states' gradients), and
the grad ops run that block over the kept step scopes from the last step to the first: the
states' gradients flow from each step to the one before it, the step inputs get their
rows' gradients, and the outer variables the block reads (``parameters``: weights, most
often; ``static_inputs``) get the sum over the steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .backward import append_grad_block
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


def _add_param_grads(sums: list[Any], local: dict, params: list[str]) -> None:
    """Add one step's gradients of the outer variables the block reads to ``sums``."""
    for k, name in enumerate(params):
        d = local.get(grad_var_name(name))
        if d is not None:
            sums[k] = d if sums[k] is None else sums[k] + d


def _param_grads(sums: list[Any], values: list[Any]) -> list[Any]:
    """The summed gradients, zeros for an outer variable no step's gradient reached."""
    return [d if d is not None else _zeros_like(p) for d, p in zip(sums, values, strict=True)]


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
        _add_param_grads(param_grads, local, params)
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
        res["parameters@GRAD"] = _param_grads(param_grads, ins["parameters"])
    return res


# -- dynamic_recurrent: DynamicRNN over the sequences of LoD inputs ------------------------------


@dataclass
class _Plan:
    """Where each step's rows come from: the sequences by decreasing length (stable, Fluid's
    LoDRankTable), and per step the rows of the sequences still running."""

    order: np.ndarray            # sequence indices, longest first
    active: list[int]            # per step: how many sequences are still running
    rows: list[np.ndarray]       # per step: the input rows of those sequences, in rank order
    n_seq: int


def _plan(offsets: tuple[int, ...]) -> _Plan:
    starts = np.asarray(offsets[:-1], dtype=np.int64)
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    order = np.argsort(-lengths, kind="stable")
    steps = int(lengths.max()) if lengths.size else 0
    active = [int((lengths > t).sum()) for t in range(steps)]
    rows = [starts[order[:n]] + t for t, n in enumerate(active)]
    return _Plan(order, active, rows, int(lengths.size))


def _level0(lod: Any, name: str, what: str) -> tuple[int, ...]:
    if not lod:
        raise ValueError(f"DynamicRNN: the {what} {name!r} has no LoD; feed it as a LoD tensor "
                         "(lod_level=1)")
    if len(lod) != 1:
        raise NotImplementedError(f"DynamicRNN: the {what} {name!r} has {len(lod)} LoD levels; "
                                  "only one-level LoD tensors are supported")
    return tuple(lod[0])


def _dynamic_plan(ins: dict, attrs: dict, op: Any) -> tuple[_Plan, tuple[int, ...]]:
    names = op.input("inputs")
    if not names:
        raise ValueError("DynamicRNN needs at least one step_input")
    lods = attrs["_lods"]["inputs"]
    offsets = _level0(lods[0], names[0], "step input")
    for name, lod in zip(names[1:], lods[1:], strict=True):
        if _level0(lod, name, "step input") != offsets:
            raise ValueError(f"DynamicRNN: the step inputs {names[0]!r} and {name!r} must have "
                             "sequences of the same lengths")
    return _plan(offsets), offsets


def _static_layout(lod: Any, name: str, plan: _Plan,
                   rows: int) -> tuple[np.ndarray, list[int], bool]:
    """The rows of a static input in rank order, the offsets of its reordered sequences, and
    whether the step sees them as sequences (False: a tensor without LoD, one row each)."""
    if lod:
        offsets = np.asarray(_level0(lod, name, "static input"), dtype=np.int64)
    else:  # Fluid: "a Tensor without lod, such as the output of sequence_pool_op"
        offsets = np.arange(rows + 1, dtype=np.int64)
    if len(offsets) - 1 != plan.n_seq:
        what = "sequences" if lod else "rows (no LoD: one row per sequence)"
        raise ValueError(f"DynamicRNN: the static input {name!r} has {len(offsets) - 1} "
                         f"{what}, the step inputs {plan.n_seq} sequences")
    parts = [np.arange(offsets[k], offsets[k + 1]) for k in plan.order]
    index = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    lengths = [len(p) for p in parts]
    return index, [0, *np.cumsum(lengths).tolist()], bool(lod)


def _dynamic_recurrent(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    op = ctx.op
    plan, offsets = _dynamic_plan(ins, attrs, op)
    ex, st = list(attrs["ex_states"]), list(attrs["states"])
    inits = list(ins.get("initial_states") or [])
    reorder = list(attrs["need_reorder"])
    if not len(ex) == len(st) == len(inits) == len(reorder):
        raise ValueError(f"dynamic_recurrent: ex_states {ex}, states {st}, need_reorder "
                         f"{reorder} and initial_states {op.input('initial_states')} must pair "
                         "up one to one")
    states = []
    for name, init, again in zip(op.input("initial_states"), inits, reorder, strict=True):
        rows = int(init.shape[0])
        need = plan.n_seq if again else (plan.active[0] if plan.active else 0)
        if rows < need:
            raise ValueError(f"DynamicRNN: the memory's init {name!r} has {rows} rows; it needs "
                             f"one per sequence ({plan.n_seq})")
        states.append(init[plan.order] if again else init)
    values = ins.get("static_inputs") or []
    layouts = [_static_layout(lod, name, plan, int(x.shape[0])) for name, lod, x in
               zip(op.input("static_inputs"), attrs["_lods"].get("static_inputs") or [],
                   values, strict=True)]
    statics = [(name, x, *layout) for name, x, layout in
               zip(op.input("static_inputs"), values, layouts, strict=True)]
    block = ctx.program.block(attrs["sub_block"])
    names_in, names_out = op.input("inputs"), op.output("outputs")
    scopes: list[Any] = []
    per_step: list[list[Any]] = []
    for t, n in enumerate(plan.active):
        step = ctx.scope._step_scope()
        for name, x in zip(names_in, ins["inputs"], strict=True):
            step.set(name, x[plan.rows[t]])
            step.lods[name] = None  # one row per running sequence: no sequences
        for name, x, index, soff, seq in statics:
            step.set(name, x[index[:soff[n]]])
            step.lods[name] = (tuple(soff[:n + 1]),) if seq else None
        for name, value in zip(ex, states, strict=True):
            step.set(name, value[:n])  # the sequences that ended drop out (shrink_rnn_memory)
            step.lods[name] = None
        ctx.executor.run_block(ctx.program, block, step)
        states = [step.get(name) for name in st]
        got = [step.get(name) for name in names_out]
        for name, value in zip(names_out, got, strict=True):
            if int(value.shape[0]) != n:
                raise ValueError(f"DynamicRNN: the output {name!r} has {value.shape[0]} rows at "
                                 f"step {t}; it needs one per running sequence ({n})")
        per_step.append(got)
        scopes.append(step)
    outputs = []
    for k, name in enumerate(names_out):
        like = per_step[0][k] if per_step else None
        if like is None:
            raise ValueError(f"DynamicRNN: no sequence has a step, so the output {name!r} has "
                             "no shape; feed at least one non-empty sequence")
        xp = registry.array_module(like)
        out = xp.zeros((offsets[-1], *like.shape[1:]), dtype=like.dtype)
        for t, values in enumerate(per_step):
            out[plan.rows[t]] = values[k]
        outputs.append(out)
    lod = (tuple(offsets),)
    return {"outputs": outputs, "step_scopes": [(scopes, plan, layouts)],
            registry.LOD_KEY: {"outputs": [lod] * len(outputs)}}


def _dynamic_recurrent_grad(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    op = ctx.op
    kept = ins["step_scopes"][0]
    if kept is None:
        raise ValueError("dynamic_recurrent_grad: the forward op kept no step scopes for this "
                         "run; run the forward and backward ops in one program run")
    scopes, plan, layouts = kept
    block = ctx.program.block(attrs["sub_block"])
    ex, st = list(attrs["ex_states"]), list(attrs["states"])
    names_in, names_out = op.input("inputs"), op.input("outputs")
    names_static, params = op.input("static_inputs"), op.input("parameters")
    d_outs = ins.get("outputs@GRAD") or [None] * len(names_out)
    xs = ins["inputs"]
    input_grads = [registry.array_module(x).zeros_like(x) for x in xs]
    static_grads = [registry.array_module(x).zeros_like(x) for x in ins.get("static_inputs") or []]
    param_grads: list[Any] = [None] * len(params)
    state_grads: list[Any] = [None] * len(st)
    for t in range(len(plan.active) - 1, -1, -1):
        n, rows = plan.active[t], plan.rows[t]
        g = scopes[t]._step_scope()
        for name, d in zip(names_out, d_outs, strict=True):
            g.set(grad_var_name(name), _zeros_like(g.get(name)) if d is None else d[rows])
        for name, d in zip(st, state_grads, strict=True):
            value = g.get(name)
            full = _zeros_like(value)
            if d is not None:  # the next step read only its running sequences' rows
                full[:d.shape[0]] = d
            g.set(grad_var_name(name), full)
        ctx.executor.run_block(ctx.program, block, g)
        local = g.vars.maps[0]
        for k, name in enumerate(names_in):
            d = local.get(grad_var_name(name))
            if d is not None:
                input_grads[k][rows] += d
        for k, name in enumerate(names_static):
            d = local.get(grad_var_name(name))
            if d is not None:
                index, soff, _ = layouts[k]
                static_grads[k][index[:soff[n]]] += d
        state_grads = [local.get(grad_var_name(name)) for name in ex]
        _add_param_grads(param_grads, local, params)
    lods = attrs["_lods"]
    # the gradients of LoD inputs keep the inputs' LoD
    res: dict = {registry.LOD_KEY: {"inputs@GRAD": list(lods["inputs"]),
                                    "static_inputs@GRAD": list(lods.get("static_inputs") or [])}}
    if "inputs@GRAD" in outs:
        res["inputs@GRAD"] = input_grads
    if "static_inputs@GRAD" in outs:
        res["static_inputs@GRAD"] = static_grads
    if "initial_states@GRAD" in outs:
        grads = []
        for init, d, again in zip(ins["initial_states"], state_grads, attrs["need_reorder"],
                                  strict=True):
            full = _zeros_like(init)
            if d is not None:
                if again:  # rank order back to the sequences' own order
                    full[plan.order[:d.shape[0]]] = d
                else:
                    full[:d.shape[0]] = d
            grads.append(full)
        res["initial_states@GRAD"] = grads
    if "parameters@GRAD" in outs:
        res["parameters@GRAD"] = _param_grads(param_grads, ins["parameters"])
    return res


def _step_grad_maker(op: Any) -> list[dict]:
    """``<op>_grad`` with the grad block of the step block, built beside it (``recurrent`` and
    ``dynamic_recurrent`` alike: every input slot but the kept scopes gets a gradient)."""
    program = op.block.program
    step_block = program.block(op.attrs["sub_block"])
    outputs = list(op.outputs["outputs"])
    no_grad = {grad_var_name(v.name) for v in step_block.vars.values() if v.stop_gradient}
    slots = [slot for slot in op.inputs if op.inputs[slot]]
    for slot in slots:
        for name in op.inputs[slot]:
            var = op.block._find_var_recursive(name)
            if var is not None and var.stop_gradient:
                no_grad.add(grad_var_name(name))
    seeds = [grad_var_name(n) for n in outputs + list(op.attrs["states"])]
    grad_block = append_grad_block(step_block, no_grad, seeds)

    def grads(slot: str) -> list[str]:
        return [EMPTY_VAR if grad_var_name(n) in no_grad else grad_var_name(n)
                for n in op.inputs.get(slot, [])]

    inputs = {slot: list(op.inputs[slot]) for slot in slots}
    inputs.update(outputs=outputs, step_scopes=list(op.outputs["step_scopes"]))
    inputs["outputs@GRAD"] = [grad_var_name(n) for n in outputs]
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    attrs["sub_block"] = grad_block.idx
    return [{"type": f"{op.type}_grad", "inputs": inputs,
             "outputs": {slot + "@GRAD": grads(slot) for slot in slots},
             "attrs": attrs}]


registry.set_kernel("recurrent", _recurrent)
registry.set_kernel("recurrent_grad", _recurrent_grad)
registry.set_grad("recurrent", _step_grad_maker)
registry.set_kernel("dynamic_recurrent", _dynamic_recurrent)
registry.set_kernel("dynamic_recurrent_grad", _dynamic_recurrent_grad)
registry.set_grad("dynamic_recurrent", _step_grad_maker)
