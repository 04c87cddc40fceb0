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
DynamicRNN (a ``while`` loop over LoD-tensor arrays there): the top-level sequences are taken
longest first (stable, Fluid's LoDRankTable at level 0) and step ``t`` sees the ``t``-th
elements of the sequences that have one (lod_tensor_to_array): a row each of a one-level
input, and of a nested one (two or more LoD levels) a sub-sequence each, all its rows, with the
levels below the top as the step value's LoD, so sequence ops (or a nested DynamicRNN) run on
it; ``static_inputs`` are LoD tensors whose top-level sequences (one per step-input sequence,
their lower levels kept) are reordered the same way and cut to the running ones (a static
input without LoD has one row per sequence, as Fluid's ``reorder_lod_tensor_by_rank`` takes
it, and stays without LoD in the step, as its ``shrink_rnn_memory`` leaves it); a memory's rows
follow that order (``need_reorder`` reorders an init given in the sequences' own order) and
lose the rows of sequences that ended (``shrink_rnn_memory``); the outputs are put together as
array_to_lod_tensor does: the sequences in their own order, each one's steps in turn (a row,
or, for a step value with LoD, a top-level sequence, per running sequence), their LoD the step
inputs' top level over the levels the step values carry -- a row per element of a one-level
input gives the input's LoD, a row per sub-sequence of a nested input its top level.

Their grad maker differentiates the step block into a grad block (the same rules as
:func:`.backward.append_backward`, seeded with the outputs' and the states' gradients), and the
grad ops run that block over the kept step scopes from the last step to the first: the states'
gradients flow from each step to the one before it, the step inputs get their rows' gradients
(each output's gradient taken from the rows its step values went to), and the outer variables
the block reads (``parameters``: weights, most often; ``static_inputs``) get the sum over the
steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .backward import append_grad_block
from .executor import RunContext
from .framework import EMPTY_VAR, grad_var_name
from .lod import LoD
from .ops import registry
from .ops.lod_array_ops import append_lod, frozen_lod, sub_lod


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
    """The order of the top-level sequences, by decreasing length (stable, Fluid's
    LoDRankTable at level 0), and how many of them run at each step."""

    offsets: tuple[int, ...]     # the step inputs' top LoD level
    order: np.ndarray            # sequence indices, longest first
    active: list[int]            # per step: how many sequences are still running
    n_seq: int


def _plan(offsets: tuple[int, ...]) -> _Plan:
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    order = np.argsort(-lengths, kind="stable")
    steps = int(lengths.max()) if lengths.size else 0
    active = [int((lengths > t).sum()) for t in range(steps)]
    return _Plan(tuple(offsets), order, active, int(lengths.size))


@dataclass
class _StepRows:
    """A step input at each step (Fluid's lod_tensor_to_array items): its rows, in rank
    order, and their LoD (None for a one-level input: a row per running sequence)."""

    rows: list[np.ndarray]
    lods: list[LoD | None]


def _step_rows(lod: LoD, plan: _Plan) -> _StepRows:
    """Step ``t`` of a running sequence is its ``t``-th element: a row of a one-level input;
    of a nested one a sub-sequence, all its rows, with the LoD levels below the top
    (``GetSubLoDAndAbsoluteOffset`` from level 1, as lod_tensor_to_array)."""
    starts = np.asarray(lod[0][:-1], dtype=np.int64)
    if len(lod) == 1:
        return _StepRows([starts[plan.order[:n]] + t for t, n in enumerate(plan.active)],
                         [None] * len(plan.active))
    rows, lods = [], []
    for t, n in enumerate(plan.active):
        step_lod: list[list[int]] = []
        parts = []
        for k in plan.order[:n]:
            unit = int(starts[k]) + t
            lengths, start, end = sub_lod(lod, unit, unit + 1, 1)
            append_lod(step_lod, lengths)
            parts.append(np.arange(start, end, dtype=np.int64))
        rows.append(np.concatenate(parts))
        lods.append(frozen_lod(step_lod))
    return _StepRows(rows, lods)


def _top_level(lod: Any, name: str, what: str) -> tuple[int, ...]:
    if not lod:
        raise ValueError(f"DynamicRNN: the {what} {name!r} has no LoD; feed it as a LoD tensor "
                         "(lod_level=1, or 2 for sequences of sub-sequences)")
    return tuple(lod[0])


def _dynamic_plan(attrs: dict, op: Any) -> tuple[_Plan, list[_StepRows]]:
    names = op.input("inputs")
    if not names:
        raise ValueError("DynamicRNN needs at least one step_input")
    lods = attrs["_lods"]["inputs"]
    offsets = _top_level(lods[0], names[0], "step input")
    for name, lod in zip(names[1:], lods[1:], strict=True):
        if _top_level(lod, name, "step input") != offsets:
            raise ValueError(f"DynamicRNN: the step inputs {names[0]!r} and {name!r} must have "
                             "sequences of the same lengths (at their top LoD level)")
    plan = _plan(offsets)
    return plan, [_step_rows(lod, plan) for lod in lods]


@dataclass
class _StaticLayout:
    """A static input with its top-level sequences in rank order (Fluid's
    reorder_lod_tensor_by_rank): their rows and LoD, None for a tensor without LoD (one row
    per sequence, and no LoD in the step)."""

    index: np.ndarray
    lod: LoD | None

    def first(self, n: int) -> tuple[np.ndarray, LoD | None]:
        """The rows and LoD of the first ``n`` sequences (what shrink_rnn_memory keeps)."""
        if self.lod is None:
            return self.index[:n], None
        levels, count = [], n
        for offsets in self.lod:
            levels.append(offsets[:count + 1])
            count = offsets[count]
        return self.index[:count], tuple(levels)


def _static_layout(lod: Any, name: str, plan: _Plan, rows: int) -> _StaticLayout:
    if lod:  # a sequence keeps its lower LoD levels
        units = [sub_lod(lod, k, k + 1, 0) for k in range(len(lod[0]) - 1)]
    else:  # Fluid: "a Tensor without lod, such as the output of sequence_pool_op"
        units = [([], r, r + 1) for r in range(rows)]
    if len(units) != plan.n_seq:
        what = "sequences" if lod else "rows (no LoD: one row per sequence)"
        raise ValueError(f"DynamicRNN: the static input {name!r} has {len(units)} {what}, "
                         f"the step inputs {plan.n_seq} sequences")
    new_lod: list[list[int]] = []
    parts = []
    for k in plan.order:
        lengths, start, end = units[k]
        append_lod(new_lod, lengths)
        parts.append(np.arange(start, end, dtype=np.int64))
    index = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return _StaticLayout(index, frozen_lod(new_lod) if lod else None)


def _output_rows(name: str, values: list[Any], lods: list[LoD | None],
                 plan: _Plan) -> tuple[list[np.ndarray], LoD]:
    """Where the rows of each step's value of output ``name`` go, and the output's LoD
    (Fluid's array_to_lod_tensor): the sequences in their own order, each one's steps in
    turn; at step ``t`` the ``r``-th longest sequence owns unit ``r`` of the value (its
    row, or its top-level sequence when the value has LoD). The LoD is the step inputs' top
    level over the levels the values carry."""
    for t, (value, lod, n) in enumerate(zip(values, lods, plan.active, strict=True)):
        rows = int(value.shape[0])
        units = len(lod[0]) - 1 if lod else rows
        if units != n:
            what = f"{units} top-level sequences" if lod else f"{rows} rows"
            raise ValueError(f"DynamicRNN: the output {name!r} has {what} at step {t}; it "
                             f"needs one per running sequence ({n})")
        if lod and lod[-1][-1] != rows:
            raise ValueError(f"DynamicRNN: the output {name!r} has {rows} rows at step {t} "
                             f"but a LoD over {lod[-1][-1]}")
    depths = sorted({len(lod) if lod else 0 for lod in lods})
    if len(depths) > 1:
        raise ValueError(f"DynamicRNN: the output {name!r} has {depths} LoD levels at "
                         "different steps; it needs the same at every step")
    top = np.asarray(plan.offsets, dtype=np.int64)
    if not depths[0]:  # a row per sequence and step: the step inputs' top level
        return [top[plan.order[:n]] + t for t, n in enumerate(plan.active)], (plan.offsets,)
    rank = np.empty(plan.n_seq, dtype=np.int64)
    rank[plan.order] = np.arange(plan.n_seq)
    dest = [np.empty(int(value.shape[0]), dtype=np.int64) for value in values]
    lower: list[list[int]] = []
    row = 0
    for k in range(plan.n_seq):
        r = int(rank[k])
        for t in range(int(top[k + 1] - top[k])):
            lengths, start, end = sub_lod(lods[t], r, r + 1, 0)
            append_lod(lower, lengths)
            dest[t][start:end] = np.arange(row, row + end - start)
            row += end - start
    return dest, (plan.offsets, *(tuple(level) for level in lower))


def _forget_lods(scope: Any, names: list[str]) -> None:
    """Drop the LoD an earlier run left on ``names``, the outputs this op is about to set.
    A step scope reads LoDs through to the outer scope, so a step value named as an output
    (``rnn.output(h)``: ``h``) that the step leaves without LoD would otherwise show that LoD
    to the step's ops, which share an input's LoD with their output by its rows."""
    for name in names:
        scope.lods.pop(name, None)


@dataclass
class _Kept:
    """What the forward op keeps for its gradient: the step scopes and where every step's
    rows came from and went to."""

    scopes: list[Any]
    plan: _Plan
    inputs: list[_StepRows]
    statics: list[_StaticLayout]
    dests: list[list[np.ndarray]]    # per output, per step: its rows in the output


def _dynamic_recurrent(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    op = ctx.op
    plan, steps_in = _dynamic_plan(attrs, op)
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
    names_static = op.input("static_inputs")
    values = ins.get("static_inputs") or []
    layouts = [_static_layout(lod, name, plan, int(x.shape[0])) for name, lod, x in
               zip(names_static, attrs["_lods"].get("static_inputs") or [], values,
                   strict=True)]
    block = ctx.program.block(attrs["sub_block"])
    names_in, names_out = op.input("inputs"), op.output("outputs")
    _forget_lods(ctx.scope, names_out)
    scopes: list[Any] = []
    per_step: list[list[Any]] = []
    per_step_lods: list[list[LoD | None]] = []
    for t, n in enumerate(plan.active):
        step = ctx.scope._step_scope()
        for name, x, rows_of in zip(names_in, ins["inputs"], steps_in, strict=True):
            step.set(name, x[rows_of.rows[t]])
            step.lods[name] = rows_of.lods[t]
        for name, x, layout in zip(names_static, values, layouts, strict=True):
            index, lod = layout.first(n)
            step.set(name, x[index])
            step.lods[name] = lod
        for name, value in zip(ex, states, strict=True):
            step.set(name, value[:n])  # the sequences that ended drop out (shrink_rnn_memory)
            step.lods[name] = None
        ctx.executor.run_block(ctx.program, block, step)
        states = [step.get(name) for name in st]
        per_step.append([step.get(name) for name in names_out])
        own = [step.lods.maps[0].get(name) for name in names_out]
        for name, lod in zip(names_out, own, strict=True):
            # None too: the step's grad ops read it through to the outer scope, which will
            # hold the whole output's LoD
            step.lods[name] = lod
        per_step_lods.append(own)
        scopes.append(step)
    if not per_step and names_out:
        raise ValueError(f"DynamicRNN: no sequence has a step, so the output "
                         f"{names_out[0]!r} has no shape; feed at least one non-empty sequence")
    outputs, dests, out_lods = [], [], []
    for k, name in enumerate(names_out):
        got = [values_t[k] for values_t in per_step]
        dest, lod = _output_rows(name, got, [lods_t[k] for lods_t in per_step_lods], plan)
        like = got[0]
        out = registry.array_module(like).zeros(
            (sum(int(v.shape[0]) for v in got), *like.shape[1:]), dtype=like.dtype)
        for rows, value in zip(dest, got, strict=True):
            out[rows] = value
        outputs.append(out)
        dests.append(dest)
        out_lods.append(lod)
    kept = _Kept(scopes, plan, steps_in, layouts, dests)
    return {"outputs": outputs, "step_scopes": [kept],
            registry.LOD_KEY: {"outputs": out_lods}}


def _dynamic_recurrent_grad(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    op = ctx.op
    kept = ins["step_scopes"][0]
    if kept is None:
        raise ValueError("dynamic_recurrent_grad: the forward op kept no step scopes for this "
                         "run; run the forward and backward ops in one program run")
    plan = kept.plan
    block = ctx.program.block(attrs["sub_block"])
    _forget_lods(ctx.scope, [name for slot in outs for name in ctx.op.output(slot)])
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
        n = plan.active[t]
        g = kept.scopes[t]._step_scope()
        forward_lods = kept.scopes[t].lods.maps[0]
        for name, d, dest in zip(names_out, d_outs, kept.dests, strict=True):
            g.set(grad_var_name(name), _zeros_like(g.get(name)) if d is None else d[dest[t]])
            # the step value's LoD (Fluid's gradients share their variable's), set even when
            # None: the outer scope's entry is the LoD of the whole output's gradient
            g.lods[grad_var_name(name)] = forward_lods.get(name)
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
                input_grads[k][kept.inputs[k].rows[t]] += d
        for k, name in enumerate(names_static):
            d = local.get(grad_var_name(name))
            if d is not None:
                static_grads[k][kept.statics[k].first(n)[0]] += d
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
