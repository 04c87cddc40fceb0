"""LoD rank tables and LoD-tensor arrays (Fluid 1.8's lod_rank_table, max_sequence_len,
lod_tensor_to_array, array_to_lod_tensor, reorder_lod_tensor_by_rank, shrink_rnn_memory).

These are host ops: a rank table (:class:`~dask_fluid.lod.LoDRankTable`) and a tensor array
(:class:`~dask_fluid.lod.LoDTensorArray`) are values of the scope, not arrays, and the ops
read and write LoDs. Their kernels take ``(ins, attrs, outs, ctx)`` and are set here.

- ``lod_rank_table`` (attr ``level``): the sequences of LoD level ``level`` of ``X`` as
  ``(index, length)`` pairs, stable-sorted by length, longest first, and the levels above
  it (the coarse LoD) -- ``framework/lod_rank_table.cc``;
- ``max_sequence_len``: the first item's length (0 for an empty table), int64 ``[1]``;
- ``lod_tensor_to_array``: step ``t`` of every sequence at least ``t + 1`` long, in rank
  order, as item ``t`` of an array; an item keeps the LoD levels below the ranked one (of
  the rows it takes), the ranked level and those above are dropped;
- ``array_to_lod_tensor``: the inverse: the sequences back in batch order, their LoD the
  table's coarse LoD, the ranked level and the items' lower levels;
- ``reorder_lod_tensor_by_rank``: the top-level sequences of ``X`` (its rows, without LoD)
  in the table's order, with the LoD that gives;
- ``shrink_rnn_memory``: the first rows (top-level sequences) of ``X``, as many as the
  table has sequences longer than ``I``: the batch of a memory at step ``I``.

Gradients as Fluid builds them: ``lod_tensor_to_array``'s is an ``array_to_lod_tensor`` of
the array's gradient and ``array_to_lod_tensor``'s a ``lod_tensor_to_array``;
``reorder_lod_tensor_by_rank_grad`` puts the rows back in batch order;
``shrink_rnn_memory_grad`` is ``Out@GRAD`` padded with zero rows to ``X``'s shape.

Two rules of this executor beside Fluid's: a gradient tensor that carries no LoD is read
with the LoD of the variable it is the gradient of (Fluid shares a forward variable's LoD
with its gradient); and a gradient array holds only the items some gradient reached, so
``array_to_lod_tensor`` of a gradient array (``X`` named ``...@GRAD``) takes zeros for the
missing ones, and ``lod_tensor_to_array`` into a gradient array adds into the items already
there (the array grad ops share one gradient array, see ``dask_fluid.backward``).
"""

from __future__ import annotations

from typing import Any

from ..lod import LoD, LoDRankTable, LoDTensor, LoDTensorArray
from . import registry
from .registry import GRAD, LOD_KEY, array_module, to_host

# -- LoD helpers (Fluid's framework/lod_tensor.cc) ----------------------------------------------


def sub_lod(lod: LoD, start: int, end: int, level: int) -> tuple[list[list[int]], int, int]:
    """Fluid's ``GetSubLoDAndAbsoluteOffset``: the lengths, at levels ``level`` and below, of
    units ``[start, end)`` of level ``level``, and the rows they span."""
    lengths = []
    for offsets in lod[level:]:
        lengths.append([offsets[k + 1] - offsets[k] for k in range(start, end)])
        start, end = offsets[start], offsets[end]
    return lengths, start, end


def append_lod(lod: list[list[int]], lengths: list[list[int]]) -> None:
    """Fluid's ``AppendLoD``: extend the offsets ``lod`` by ``lengths``, level by level."""
    if not lod:
        lod.extend([0] for _ in lengths)
    for level, lens in zip(lod, lengths, strict=False):
        for n in lens:
            level.append(level[-1] + n)


def frozen_lod(lod: list[list[int]]) -> LoD | None:
    """Offsets built by :func:`append_lod` as a LoD (tuples), None when there are none."""
    return tuple(tuple(level) for level in lod) or None


def _strip_grad(name: str) -> str:
    pos = name.find(GRAD)
    return name[:pos] if pos >= 0 else name


def _lod(attrs: dict, ctx: Any, slot: str) -> LoD:
    """The LoD of input ``slot``; for a gradient without one, that of its forward variable
    (Fluid's gradients share their forward variable's LoD; this executor's grad kernels do
    not always pass it on)."""
    lod = attrs["_lods"][slot][0]
    if lod:
        return lod
    name = ctx.op.input(slot)[0]
    if GRAD in name:
        return ctx.scope.lods.get(_strip_grad(name)) or ()
    return ()


def _table(op: str, ctx: Any, value: Any, slot: str = "RankTable") -> LoDRankTable:
    if not isinstance(value, LoDRankTable):
        got = "nothing (not computed before this op)" if value is None else \
            f"a {type(value).__name__}"
        raise TypeError(f"{op}: {slot} {ctx.op.input(slot)[0]!r} holds {got}, not a LoD rank "
                        "table (make it with layers.lod_rank_table)")
    return value


def _tensor(op: str, ctx: Any, value: Any, slot: str = "X") -> Any:
    if value is None or isinstance(value, (LoDTensorArray, LoDRankTable)):
        got = "nothing (not computed before this op)" if value is None else \
            f"a {type(value).__name__}"
        raise TypeError(f"{op}: {slot} {ctx.op.input(slot)[0]!r} holds {got}, not a tensor")
    return value


def _gather(xp: Any, parts: list[tuple[Any, int, int]], like: Any) -> Any:
    """The rows ``[start, end)`` of each ``(array, start, end)``, concatenated."""
    slices = [a[s:e] for a, s, e in parts if e > s]
    if not slices:
        return xp.zeros((0,) + tuple(like.shape[1:]), dtype=like.dtype)
    return xp.ascontiguousarray(xp.concatenate(slices, axis=0))


# -- kernels ------------------------------------------------------------------------------------


def _lod_rank_table(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    _tensor("lod_rank_table", ctx, ins["X"][0])
    level = int(attrs["level"])
    lod = attrs["_lods"]["X"][0] or ()
    if not lod:
        raise ValueError(f"lod_rank_table: X {ctx.op.input('X')[0]!r} has no LoD; the rank "
                         "table ranks the sequences of a LoD tensor")
    return {"Out": [LoDRankTable._of_lod(lod, level)], LOD_KEY: {"Out": [None]}}


def _max_sequence_len(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    items = _table("max_sequence_len", ctx, ins["RankTable"][0]).items()
    return {"Out": [ctx.executor._xp.asarray([items[0][1] if items else 0], dtype="int64")]}


def _to_array(op: str, x: Any, lod: LoD, table: LoDRankTable) -> list[tuple[Any, LoD | None]]:
    """lod_tensor_to_array's items: (rows, LoD) of each step."""
    level = table.level()
    if level >= len(lod):
        raise ValueError(f"{op}: the rank table ranks LoD level {level} but X has "
                         f"{len(lod)} LoD levels")
    items = table.items()
    if any(i >= len(lod[level]) - 1 for i, _ in items):
        raise ValueError(f"{op}: the rank table has {len(items)} sequences at level {level} "
                         f"but X has {len(lod[level]) - 1} there")
    xp = array_module(x)
    steps = items[0][1] if items else 0
    out = []
    for t in range(steps):
        step_lod: list[list[int]] = []
        parts = []
        for index, length in items:
            if t >= length:
                break  # items are longest first
            unit = lod[level][index] + t
            lengths, start, end = sub_lod(lod, unit, unit + 1, level + 1)
            append_lod(step_lod, lengths)
            parts.append((x, start, end))
        out.append((_gather(xp, parts, x), frozen_lod(step_lod)))
    return out


def _lod_tensor_to_array(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    op = "lod_tensor_to_array"
    x = _tensor(op, ctx, ins["X"][0])
    table = _table(op, ctx, ins["RankTable"][0])
    lod = _lod(attrs, ctx, "X")
    if not lod:
        raise ValueError(f"{op}: X {ctx.op.input('X')[0]!r} has no LoD; it splits the "
                         "sequences of a LoD tensor into time steps")
    items = _to_array(op, x, lod, table)
    name = ctx.op.output("Out")[0]
    have = ctx.scope.vars.get(name) if GRAD in name else None
    array = LoDTensorArray()
    for t, (rows, step_lod) in enumerate(items):
        if isinstance(have, LoDTensorArray) and t < len(have) and have[t]._array is not None:
            rows = have[t]._array + rows  # another grad op's part of this gradient array
        array.append(LoDTensor._of(rows, step_lod or (), ctx.executor.place))
    return {"Out": [array]}


def _array_to_lod_tensor(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    op = "array_to_lod_tensor"
    array = ins["X"][0]
    name = ctx.op.input("X")[0]
    table = _table(op, ctx, ins["RankTable"][0])
    items = table.items()
    is_grad = GRAD in name
    if array is None and is_grad:
        array = LoDTensorArray()
    if not isinstance(array, LoDTensorArray):
        raise TypeError(f"{op}: X {name!r} holds {type(array).__name__}, not a tensor array")
    steps = items[0][1] if items else 0
    present = [t._array for t in array if t._array is not None]
    if not present:
        raise ValueError(f"{op}: the tensor array {name!r} holds no written item")
    like = present[0]
    xp = array_module(like)
    values: list[tuple[Any, LoD]] = []
    for t in range(steps):
        item = array[t] if t < len(array) else LoDTensor()
        if item._array is not None:
            values.append((item._array, item._lod))
            continue
        if not is_grad:
            raise ValueError(f"{op}: the rank table's longest sequence has {steps} steps but "
                             f"item {t} of {name!r} (of {len(array)}) was never written")
        if any(v._lod for v in array if v._array is not None):
            raise ValueError(f"{op}: item {t} of the gradient array {name!r} is missing and "
                             "the other items carry LoD, so its rows are unknown")
        rows = sum(1 for _, n in items if n > t)  # no gradient reached this step: zeros
        values.append((xp.zeros((rows,) + tuple(like.shape[1:]), dtype=like.dtype), ()))
    # the sequences in batch order; the rows of sequence `rank` at step t are unit `rank`
    # of item t (every longer sequence comes before it there)
    order = sorted(range(len(items)), key=lambda r: items[r][0])
    level_lod = [0]
    lower: list[list[int]] = []
    parts = []
    for rank in order:
        length = items[rank][1]
        level_lod.append(level_lod[-1] + length)
        for t in range(length):
            a, item_lod = values[t]
            if item_lod:
                lengths, start, end = sub_lod(item_lod, rank, rank + 1, 0)
            else:
                lengths, start, end = [], rank, rank + 1
            if end > int(a.shape[0]):
                raise ValueError(f"{op}: item {t} of {name!r} has {int(a.shape[0])} rows; "
                                 f"the rank table needs at least {end}")
            append_lod(lower, lengths)
            parts.append((a, start, end))
    out = _gather(xp, parts, like)
    lod = [list(level) for level in table.coarse_lod()] + [level_lod] + lower
    return {"Out": [out], LOD_KEY: {"Out": [frozen_lod(lod)]}}


def _units(x: Any, lod: LoD) -> list[tuple[list[list[int]], int, int]]:
    """The top-level units of ``x`` (its sequences, or its rows without LoD): their LoD
    lengths and rows (Fluid's ``GetAbsoluteOffsetAndLengthByLoDRankTable``)."""
    if not lod:
        return [([], r, r + 1) for r in range(int(x.shape[0]))]
    return [sub_lod(lod, k, k + 1, 0) for k in range(len(lod[0]) - 1)]


def _copy_units(x: Any, units: list, order: list[int]) -> tuple[Any, LoD | None]:
    lod: list[list[int]] = []
    for k in order:
        append_lod(lod, units[k][0])
    out = _gather(array_module(x), [(x, units[k][1], units[k][2]) for k in order], x)
    return out, frozen_lod(lod)


def _reorder_lod_tensor_by_rank(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    op = "reorder_lod_tensor_by_rank"
    x = _tensor(op, ctx, ins["X"][0])
    table = _table(op, ctx, ins["RankTable"][0])
    units = _units(x, attrs["_lods"]["X"][0] or ())
    order = [index for index, _ in table.items()]
    bad = [k for k in order if k >= len(units)]
    if bad:
        raise ValueError(f"{op}: the rank table names sequence {bad[0]} but X has "
                         f"{len(units)} top-level sequences (rows without LoD)")
    out, lod = _copy_units(x, units, order)
    return {"Out": [out], LOD_KEY: {"Out": [lod]}}


def _reorder_lod_tensor_by_rank_grad(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    op = "reorder_lod_tensor_by_rank_grad"
    d = _tensor(op, ctx, ins["X"][0])
    table = _table(op, ctx, ins["RankTable"][0])
    units = _units(d, _lod(attrs, ctx, "X"))
    items = table.items()
    if len(units) != len(items):
        raise ValueError(f"{op}: the gradient has {len(units)} top-level sequences but the "
                         f"rank table has {len(items)}")
    # position r of the gradient is sequence items[r].index: back in batch order
    order = sorted(range(len(items)), key=lambda r: items[r][0])
    out, lod = _copy_units(d, units, order)
    return {"Out": [out], LOD_KEY: {"Out": [lod]}}


def _shrink_rnn_memory(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    op = "shrink_rnn_memory"
    x = _tensor(op, ctx, ins["X"][0])
    table = _table(op, ctx, ins["RankTable"][0])
    i = to_host(_tensor(op, ctx, ins["I"][0], "I")).reshape(-1)
    if i.size != 1:
        raise ValueError(f"{op}: I must hold one value, got {i.size}")
    offset = int(i[0])
    if offset < 0:
        raise ValueError(f"{op}: I is {offset}; it must be >= 0")
    # Fluid's lower_bound over the lengths, descending: the sequences longer than I
    rows = sum(1 for _, n in table.items() if n > offset)
    lod = attrs["_lods"]["X"][0] or ()
    out_lod = None
    height = rows
    if lod and len(lod[0]) > rows:
        lengths, _, height = sub_lod(lod, 0, rows, 0)
        built: list[list[int]] = []
        append_lod(built, lengths)
        out_lod = frozen_lod(built)
    if height > int(x.shape[0]):
        raise ValueError(f"{op}: X has {int(x.shape[0])} rows; the rank table has {rows} "
                         f"sequences longer than I={offset}")
    return {"Out": [x[:height].copy()], LOD_KEY: {"Out": [out_lod]}}


def _shrink_rnn_memory_grad(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    op = "shrink_rnn_memory_grad"
    x = _tensor(op, ctx, ins["X"][0])
    d = ins["Out@GRAD"][0]
    xp = array_module(x)
    dx = xp.zeros_like(x)
    if d is not None:
        height = int(d.shape[0])
        if height > int(x.shape[0]):
            raise ValueError(f"{op}: Out@GRAD has {height} rows, more than X's "
                             f"{int(x.shape[0])}")
        dx[:height] = d
    lod = attrs["_lods"]["X"][0] or None
    return {"X@GRAD": [dx], LOD_KEY: {"X@GRAD": [lod]}}


# -- grad makers --------------------------------------------------------------------------------


def _g(name: str) -> str:
    return name + GRAD


def _lod_tensor_to_array_grad_maker(op: Any) -> list[dict]:
    return [{"type": "array_to_lod_tensor",
             "inputs": {"X": [_g(op.outputs["Out"][0])],
                        "RankTable": list(op.inputs["RankTable"])},
             "outputs": {"Out": [_g(op.inputs["X"][0])]}, "attrs": {}}]


def _array_to_lod_tensor_grad_maker(op: Any) -> list[dict]:
    return [{"type": "lod_tensor_to_array",
             "inputs": {"X": [_g(op.outputs["Out"][0])],
                        "RankTable": list(op.inputs["RankTable"])},
             "outputs": {"Out": [_g(op.inputs["X"][0])]}, "attrs": {}}]


def _reorder_grad_maker(op: Any) -> list[dict]:
    return [{"type": "reorder_lod_tensor_by_rank_grad",
             "inputs": {"X": [_g(op.outputs["Out"][0])],
                        "RankTable": list(op.inputs["RankTable"])},
             "outputs": {"Out": [_g(op.inputs["X"][0])]}, "attrs": {}}]


def _shrink_grad_maker(op: Any) -> list[dict]:
    return [{"type": "shrink_rnn_memory_grad",
             "inputs": {"X": list(op.inputs["X"]), "Out@GRAD": [_g(op.outputs["Out"][0])]},
             "outputs": {"X@GRAD": [_g(op.inputs["X"][0])]}, "attrs": {}}]


# -- registration -------------------------------------------------------------------------------

_SIGNATURES = (
    ("lod_rank_table", ("X",), ("Out",), {"level": 0}, (), _lod_rank_table, None),
    ("max_sequence_len", ("RankTable",), ("Out",), {}, (), _max_sequence_len, None),
    ("lod_tensor_to_array", ("X", "RankTable"), ("Out",), {}, (), _lod_tensor_to_array,
     _lod_tensor_to_array_grad_maker),
    ("array_to_lod_tensor", ("X", "RankTable"), ("Out",), {}, (), _array_to_lod_tensor,
     _array_to_lod_tensor_grad_maker),
    ("reorder_lod_tensor_by_rank", ("X", "RankTable"), ("Out",), {}, (),
     _reorder_lod_tensor_by_rank, _reorder_grad_maker),
    ("reorder_lod_tensor_by_rank_grad", ("X", "RankTable"), ("Out",), {}, (),
     _reorder_lod_tensor_by_rank_grad, None),
    ("shrink_rnn_memory", ("X", "RankTable", "I"), ("Out",), {}, (), _shrink_rnn_memory,
     _shrink_grad_maker),
    ("shrink_rnn_memory_grad", ("X", "Out@GRAD"), ("X@GRAD",), {}, ("Out@GRAD",),
     _shrink_rnn_memory_grad, None),
)

for _type, _ins, _outs, _attrs, _optional, _kernel, _grad in _SIGNATURES:
    # host ops (the executor passes them the scope); every one reads its inputs' LoDs
    _lod_rule = "none" if _type == "max_sequence_len" else "kernel"
    registry.register_signature(_type, _ins, _outs, _attrs, optional=_optional, lod=_lod_rule)
    registry.set_kernel(_type, _kernel)
    if _grad is not None:
        registry.set_grad(_type, _grad)
