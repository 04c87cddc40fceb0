"""The trainer side of pserver mode (§4.1): send gradients, receive parameters.

Right after the op that last writes each gradient: ``split_byref`` (or
``split_selected_rows``) when the gradient has several blocks, then one ``send``. At the end:
``send_barrier`` (sync), one ``recv`` per parameter, ``fetch_barrier`` (sync) and ``concat`` for
split parameters. The trainer startup receives the initial parameters the same way.

Every RPC op carries what a runtime needs to run it without the transpiler object:

- ``send``: ``epmap`` (endpoint per input), ``send_varnames`` (the names the pserver expects,
  equal to the inputs), ``sync_mode``, ``trainer_id``;
- ``recv``: ``epmap`` (endpoint per output), ``recv_varnames`` (pserver-side names, equal to the
  outputs), ``trainer_id``, ``sync_mode``;
- ``send_barrier`` / ``fetch_barrier``: ``endpoints`` (all pservers), ``trainer_id``;
- all of them: ``distributed_mode`` (Fluid 1.8's enum, as on ``listen_and_serv``: how the
  runtime runs the op) and ``wait_port`` (whether the trainer waits for a pserver that does
  not accept its connection yet).

With ``runtime_split_send_recv`` (Fluid's Communicator) the program carries whole variables:
each ``send`` has the whole gradient as ``X``, ``sections`` (rows per block) and the block
names as ``send_varnames``; each ``recv`` has the whole parameter as ``Out`` and the block
names as ``recv_varnames``; no ``split_byref``, ``concat`` or ``fetch_barrier``; a
``send_barrier(half_async=True)`` ends the sends in the half-async and sync variants.

GEO-SGD keeps the whole single-process program (the optimizer included) and appends, per
parameter, a ``send`` of the parameter (``send_varnames`` = its ``.delta`` block names,
``geo_sgd_need_push_nums``) and a ``recv`` into it; the trainer startup ends with Fluid's
``send`` of ``param_init``, which records the parameters the first deltas are taken against.
Fluid keeps that bookkeeping in its GeoSgdCommunicator, set up out of band by fleet; here the
programs carry it, so that they run by themselves.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from ..framework import OP_ROLE_KEY, OP_ROLE_VAR_KEY, Block, OpRole, Program, VarType
from .lr_counter import trainer_counter
from .plan import RPC_OP_TYPES, ParamPlan, TranspilePlan, lr_ops, optimize_ops

CONTROL_VAR_PREFIX = "__control_var@"


class ControlVars:
    """Deterministic names for the dummy variables that order RPC ops (Fluid draws random
    ones; fixed names keep programs reproducible and comparable)."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def new(self, block: Block) -> str:
        name = f"{CONTROL_VAR_PREFIX}{next(self._counter)}"
        block.create_var(name=name, type=VarType.RAW, dtype="float32", stop_gradient=True)
        return name


def rename_var(block: Block, old: str, new: str) -> None:
    """Rename a variable of ``block`` and every use of it by the block's ops."""
    var = block.vars.pop(old)
    var.name = new
    block.vars[new] = var
    for op in block.ops:
        op._rename_input(old, new)
        op._rename_output(old, new)


def last_writer(block: Block, name: str) -> int:
    """Index of the last op of ``block`` writing ``name``, or -1."""
    for i in range(len(block.ops) - 1, -1, -1):
        if name in block.ops[i].output_arg_names:
            return i
    return -1


#: the ``send_varnames`` of the GEO trainer startup's last op (Fluid's name)
GEO_PARAM_INIT = "param_init"


def _rpc_attrs(plan: TranspilePlan, startup: bool = False, **extra) -> dict:
    # the startup's pull is the same in every mode: its ops carry no distributed_mode
    mode = {} if startup else {"distributed_mode": int(plan.mode.distributed_mode)}
    return {OP_ROLE_KEY: OpRole.RPC, "trainer_id": plan.trainer_id, **mode, **extra}


def set_wait_port(program: Program, wait_port: bool) -> None:
    """Record on every RPC op of ``program`` whether the trainer waits for its pservers."""
    for op in program.global_block().ops:
        if op.type in RPC_OP_TYPES:
            op.attrs["wait_port"] = bool(wait_port)


def create_trainer_vars(program: Program, plan: TranspilePlan) -> None:
    """Declare the block variables and give whole gradients their per-trainer name."""
    block = program.global_block()
    if plan.mode.runtime_split:  # the program keeps whole variables; the runtime cuts them
        return
    for pp in plan.params:
        grad = block.var(pp.grad)
        param = block.var(pp.param)
        send_names = pp.trainer_grad_names(plan.trainer_id)
        if not pp.split:
            if send_names[0] != pp.grad:
                rename_var(block, pp.grad, send_names[0])
            continue
        for b, pname, gname in zip(pp.blocks, pp.param_block_names, send_names, strict=True):
            block.create_var(name=pname, shape=b.shape, dtype=param.dtype, persistable=False)
            block.create_var(name=gname, shape=b.shape, dtype=grad.dtype, type=grad.type)


def insert_sends(program: Program, plan: TranspilePlan, order: list[ParamPlan],
                 control: ControlVars, log: Callable[..., None]) -> dict[str, str]:
    """Insert split + send after the last writer of each gradient; returns param -> the send's
    control output."""
    block = program.global_block()
    dummies: dict[str, str] = {}
    split = not plan.mode.runtime_split
    for pp in order:
        send_names = pp.trainer_grad_names(plan.trainer_id)
        source = pp.grad if pp.split or not split else send_names[0]
        idx = last_writer(block, source)
        if idx < 0:
            raise ValueError(f"no op of the program writes the gradient {source!r} of parameter "
                             f"{pp.param!r}: was the backward pass appended (minimize)?")
        role_var = [pp.param, source]
        if pp.split and split:
            if pp.sparse:
                block._insert_op(idx + 1, "split_selected_rows", inputs={"X": [source]},
                                 outputs={"Out": send_names},
                                 attrs={"height_sections": pp.sections,
                                        OP_ROLE_KEY: OpRole.Dist, OP_ROLE_VAR_KEY: role_var})
            else:
                block._insert_op(idx + 1, "split_byref", inputs={"X": [source]},
                                 outputs={"Out": send_names},
                                 attrs={"sections": pp.sections, "num": 0, "axis": 0,
                                        OP_ROLE_KEY: OpRole.Dist, OP_ROLE_VAR_KEY: role_var})
            idx += 1
        dummy = control.new(block)
        # runtime split: the whole gradient goes in, the runtime cuts it by ``sections``
        inputs = send_names if split else [source]
        block._insert_op(idx + 1, "send", inputs={"X": inputs}, outputs={"Out": [dummy]},
                         attrs=_rpc_attrs(plan, epmap=list(pp.endpoints),
                                          send_varnames=list(send_names),
                                          sections=[] if split else pp.sections,
                                          sync_mode=plan.sync_mode,
                                          **{OP_ROLE_VAR_KEY: role_var}))
        dummies[pp.param] = dummy
        log("trainer %d: send %s -> %s", plan.trainer_id, send_names, pp.endpoints)
    return dummies


def append_counter_send(program: Program, plan: TranspilePlan,
                        control: ControlVars) -> dict[str, str]:
    """Async mode with a decay schedule: append Fluid's ``send`` of this trainer's own step
    counter to every pserver (:mod:`.lr_counter`); returns {counter: the send's control
    output}, which the ``send_barrier`` of the runtime split's half-async variant waits for."""
    block = program.global_block()
    counter = trainer_counter(plan.decay_counter, plan.trainer_id)
    dummy = control.new(block)
    # with the runtime split, Fluid hands the counter to the Communicator by name
    names = [counter] if plan.mode.runtime_split else []
    block.append_op("send", inputs={"X": [counter]}, outputs={"Out": [dummy]},
                    attrs=_rpc_attrs(plan, epmap=list(plan.endpoints), sections=[],
                                     send_varnames=names, merge_add=True,
                                     use_send_handler=False, sync_mode=plan.sync_mode,
                                     **{OP_ROLE_VAR_KEY: [counter, counter]}))
    return {counter: dummy}


def append_param_fetch(program: Program, plan: TranspilePlan, control: ControlVars,
                       send_dummies: dict[str, str] | None) -> None:
    """Append (send_barrier,) recv per parameter, (fetch_barrier,) concat of split params.

    ``send_dummies`` is None for the trainer startup: no barrier before the recvs, and the
    fetch_barrier is always appended (as Fluid) so every trainer starts from the same values;
    the startup always receives the blocks and concatenates them, runtime split or not.
    Neither receives a remote-prefetch table: its lookups ask the pservers for their rows, and
    the trainer startup initialises it with ``fake_init`` (:func:`strip_optimizer`), as Fluid
    1.8's ``_get_trainer_startup_program`` skips its sparse tables.
    """
    block = program.global_block()
    startup = send_dummies is None
    mode = plan.mode
    split = startup or not mode.runtime_split
    barrier_out = None
    if not startup and (mode.barriers or mode.half_async):
        barrier_out = control.new(block)
        block.append_op("send_barrier", inputs={"X": list(send_dummies.values())},
                        outputs={"Out": [barrier_out]},
                        attrs=_rpc_attrs(plan, endpoints=list(plan.endpoints),
                                         half_async=not mode.barriers,
                                         sync_mode=plan.sync_mode))
    recv_outputs: list[str] = []
    fetched = [pp for pp in plan.params if not pp.remote]
    for pp in fetched:
        names = pp.param_block_names
        if startup:
            param = block.var(pp.param)
            for b, name in zip(pp.blocks, names, strict=True):
                if not block.has_var(name):
                    block.create_var(name=name, shape=b.shape, dtype=param.dtype)
            deps: list[str] = []
        elif barrier_out is not None:
            deps = [barrier_out]
        else:
            deps = [send_dummies[pp.param]]
        outs = names if split else [pp.param]
        block.append_op("recv", inputs={"X": deps}, outputs={"Out": outs},
                        attrs=_rpc_attrs(plan, startup, epmap=list(pp.endpoints),
                                         recv_varnames=list(names), sync_mode=plan.sync_mode,
                                         with_barrier=mode.barriers,
                                         **{OP_ROLE_VAR_KEY: [pp.param, names[0]]}))
        recv_outputs += outs
    if startup or mode.barriers:
        block.append_op("fetch_barrier", inputs={"X": recv_outputs},
                        outputs={"Out": [control.new(block)]},
                        attrs=_rpc_attrs(plan, startup, endpoints=list(plan.endpoints)))
    for pp in fetched:
        if pp.split and split:
            block.append_op("concat", inputs={"X": pp.param_block_names},
                            outputs={"Out": [pp.param]},
                            attrs={"axis": 0, OP_ROLE_KEY: OpRole.Dist})


def append_geo_exchange(program: Program, plan: TranspilePlan, control: ControlVars) -> None:
    """GEO-SGD trainer: after the whole step (optimizer included), one ``send`` per parameter
    (its delta, due every ``geo_sgd_need_push_nums`` steps), then one ``recv`` per parameter
    (the pservers' values merged into it). The sends come first so that one exchange per
    pserver carries every delta of the step."""
    block = program.global_block()
    n = plan.mode.geo_push_nums
    dummies = {}
    for pp in plan.params:
        dummies[pp.param] = control.new(block)
        block.append_op("send", inputs={"X": [pp.param]}, outputs={"Out": [dummies[pp.param]]},
                        attrs=_rpc_attrs(plan, epmap=list(pp.endpoints),
                                         send_varnames=pp.delta_names, sections=pp.sections,
                                         sync_mode=False, geo_sgd_need_push_nums=n,
                                         trainers=plan.trainer_num,
                                         **{OP_ROLE_VAR_KEY: [pp.param, pp.param]}))
    for pp in plan.params:
        block.append_op("recv", inputs={"X": [dummies[pp.param]]}, outputs={"Out": [pp.param]},
                        attrs=_rpc_attrs(plan, epmap=list(pp.endpoints),
                                         recv_varnames=pp.param_block_names, sync_mode=False,
                                         with_barrier=False, geo_sgd_need_push_nums=n,
                                         **{OP_ROLE_VAR_KEY: [pp.param, pp.param]}))


def append_geo_param_init(startup: Program, plan: TranspilePlan, control: ControlVars) -> None:
    """GEO-SGD trainer startup: Fluid's ``send`` of ``param_init`` after the parameters were
    received, here with the parameters as inputs: the runtime keeps a copy of each, the values
    the first deltas are taken against."""
    block = startup.global_block()
    block.append_op("send", inputs={"X": [pp.param for pp in plan.params]},
                    outputs={"Out": [control.new(block)]},
                    attrs=_rpc_attrs(plan, epmap=[], send_varnames=[GEO_PARAM_INIT],
                                     sections=[], sync_mode=False, trainers=plan.trainer_num,
                                     geo_sgd_need_push_nums=plan.mode.geo_push_nums))


def set_program_attrs(program: Program, plan: TranspilePlan, current_endpoint: str) -> None:
    """The attributes Fluid sets on a transpiled trainer program, plus the runtime's."""
    program._is_distributed = True
    program._endpoints = list(plan.endpoints)
    program._ps_endpoint = current_endpoint
    program._is_chief = plan.trainer_id == 0
    program._distributed_lookup_table = plan.table.name if plan.table else None
    program._trainer_id = plan.trainer_id
    program._num_trainers = plan.trainer_num
    program._sync_mode = plan.sync_mode


def _delete_ops(block: Block, ops: list) -> None:
    ids = {id(op) for op in ops}
    block.ops = [op for op in block.ops if id(op) not in ids]


def strip_optimizer(program: Program, startup: Program, fake_init_tables: list[str],
                    log: Callable[..., None]) -> None:
    """Fluid 1.8's ``get_trainer_program`` on the trainer and its startup: remove the optimize
    and LR ops from the trainer, and the optimizer-only variables (learning rate,
    accumulators: what the optimize ops read besides their parameters and gradients) from both
    programs, their init ops included (``_delete_trainer_optimizer(is_startup=True)``: real
    Fluid 1.8.5's trainer startup has no ``learning_rate_0`` init); the init of each table the
    trainer never holds (``fake_init_tables``) becomes a ``fake_init`` appended to the startup
    (``_fake_init_sparsetable``). Idempotent."""
    block = program.global_block()
    opt = optimize_ops(block)
    lr = lr_ops(block)
    role_vars: set[str] = set()
    inputs: set[str] = set()
    for op in opt:
        role_vars.update(op.attrs.get(OP_ROLE_VAR_KEY) or [])
        inputs.update(op.input_arg_names)
    _delete_ops(block, opt + lr)
    still_read = {n for op in block.ops for n in op.input_arg_names + op.output_arg_names}
    dead = sorted(n for n in inputs - role_vars if n not in still_read)
    for name in dead:
        block._remove_var(name)
    if opt or lr:
        log("trainer: removed %d optimize and %d LR ops; optimizer-only vars %s",
            len(opt), len(lr), dead)
    sblock = startup.global_block()
    inits = [op for op in sblock.ops if set(op.output_arg_names) & set(dead)]
    _delete_ops(sblock, inits)
    for name in dead:
        if sblock.has_var(name):
            sblock._remove_var(name)
    if inits:
        log("trainer startup: removed the inits of optimizer-only vars %s",
            sorted({n for op in inits for n in op.output_arg_names}))
    for table in fake_init_tables:
        inits = [op for op in sblock.ops if table in op.output_arg_names]
        if len(inits) == 1 and inits[0].type == "fake_init":
            continue
        if len(inits) != 1:
            raise ValueError(f"the sparse table {table!r} must have exactly 1 init op in the "
                             f"startup program, found {len(inits)}")
        shape = list(inits[0].attrs.get("shape", sblock.var(table).shape))
        sblock._remove_op(sblock.ops.index(inits[0]))
        sblock.append_op("fake_init", outputs={"Out": [table]},
                         attrs={"shape": shape, "dtype": sblock.var(table).dtype})
        log("trainer startup: %s initialised by fake_init (it lives on the pservers)", table)
