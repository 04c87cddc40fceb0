"""Async mode's learning-rate step counter: one counter per trainer, summed on the pservers.

A decay schedule counts steps with ``increment(@LR_DECAY_COUNTER@)``. In async mode the
pservers run the schedule, so Fluid 1.8's ``DistributeTranspiler._get_lr_ops`` turns the
counter into the sum of the trainers' own counters, and the trainer sends its own every step:

- the program gets ``@LR_DECAY_COUNTER@.trainer_{i}`` for every trainer ``i`` (the counter's
  type, shape, dtype and persistability), and the ``increment`` becomes
  ``sum(@LR_DECAY_COUNTER@.trainer_*) -> @LR_DECAY_COUNTER@`` (role LRSched, so it moves to
  the pservers' LR block with the rest of the schedule);
- the startup program inits each per-trainer counter to 1 (``fill_constant`` prepended, as
  Fluid's ``create_var(initializer=Constant(1))``), and the counter itself to ``-trainers``;
- the trainer appends, after its gradient sends, a ``send`` of its own counter to every pserver
  (``merge_add``, ``use_send_handler=False``: Fluid's notify).

A pserver adds each counter it receives to its copy of that trainer's counter and then runs the
LR block (Fluid's ``RequestNotifyHandler``; :meth:`.shard.PServerShard._apply_async`), so the
counter grows by one per step of any trainer: the schedule follows the global step count.
"""

from __future__ import annotations

from ..framework import OP_ROLE_KEY, OpRole, Program
from ..initializer import ConstantInitializer
from .plan import lr_ops

#: the counter's name, and what a pserver looks for in a received variable's name to treat it
#: as a step counter (Fluid's ``LEARNING_RATE_DECAY_COUNTER``)
LR_DECAY_COUNTER = "@LR_DECAY_COUNTER@"


def trainer_counter(counter: str, trainer_id: int) -> str:
    """The name of trainer ``trainer_id``'s own step counter."""
    return f"{counter}.trainer_{trainer_id}"


def split_decay_counter(program: Program, startup: Program, trainer_num: int) -> str | None:
    """Rewrite the schedule's ``increment`` of ``program`` into a sum of per-trainer counters,
    and their inits into ``startup`` (module docstring); returns the counter's name, or None
    when no LR-schedule op increments a counter."""
    block = program.global_block()
    inc = next((op for op in lr_ops(block) if op.type == "increment"), None)
    if inc is None:
        return None
    counter = inc.output("Out")[0]
    var = block.var(counter)
    names = [trainer_counter(counter, i) for i in range(trainer_num)]
    for name in names:
        block.create_var(name=name, type=var.type, shape=var.shape, dtype=var.dtype,
                         persistable=var.persistable)
    sblock = startup.global_block()
    for op in sblock.ops:
        if op.type == "fill_constant" and op.output("Out") == [counter]:
            # overwritten by the pservers' first sum; Fluid sets it all the same
            op.attrs["value"] = float(0.0 - trainer_num)
    for name in names:
        created = sblock.create_var(name=name, type=var.type, shape=var.shape, dtype=var.dtype,
                                    persistable=var.persistable)
        ConstantInitializer(1.0)(created, sblock)
    idx = block.ops.index(inc)
    block._remove_op(idx)
    block._insert_op(idx, "sum", inputs={"X": names}, outputs={"Out": [counter]},
                     attrs={OP_ROLE_KEY: OpRole.LRSched})
    return counter


__all__ = ["LR_DECAY_COUNTER", "split_decay_counter", "trainer_counter"]
