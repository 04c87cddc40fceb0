"""Loading a distributed lookup table's SelectedRows files (Fluid 1.8's
``contrib.utils.lookup_table_utils``: ``load_persistables_for_increment``,
``load_persistables_for_inference``); ``fluid.io`` re-exports them.
"""

from __future__ import annotations

import io as _io
import os
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from .executor import Executor
from .framework import (
    Program,
    Variable,
    VarType,
)
from .inference_model import MODEL_FILENAME, _read_model
from .tensor_file import read_tensor, write_tensor
from .var_io import _load_distributed_persistables, _placed, _scope_of, load_vars

#: where a distributed lookup table's SelectedRows files lie under a saved model
LOOKUP_TABLE_DIR = "__lookup_table__"


def _read_selected_rows(path: str) -> tuple[np.ndarray, np.ndarray, int]:
    """``(rows, value, height)`` of a file in Paddle's SelectedRows layout (what a pserver's
    ``save`` of its lookup table writes: uint32 version 0, uint64 row count, the int64 rows,
    int64 height, then the value as a Tensor record)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 12:
        raise ValueError(f"{path} is not a SelectedRows file (only {len(data)} bytes)")
    version, count = struct.unpack_from("<IQ", data, 0)
    end = 12 + 8 * count + 8
    if version != 0 or len(data) < end:
        raise ValueError(f"{path} is not a SelectedRows file of version 0")
    rows = np.frombuffer(data, "<i8", count, 12).astype(np.int64)
    (height,) = struct.unpack_from("<q", data, end - 8)
    # the value is a Tensor record: a LoDTensor record without its version and LoD count
    value = read_tensor(_io.BytesIO(b"\0" * 12 + data[end:]))[0]
    if value.shape[:1] != (count,):
        raise ValueError(f"{path} lists {count} rows but holds {value.shape[0]} values")
    return rows, value, int(height)


def write_selected_rows(f: Any, rows: Sequence[int], value: Any, height: int) -> None:
    """Write a SelectedRows record in Paddle's layout (see :func:`_read_selected_rows`)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    value = np.asarray(value)
    if value.shape[:1] != rows.shape:
        raise ValueError(f"{rows.size} rows but {value.shape[:1]} values")
    f.write(struct.pack("<IQ", 0, rows.size))
    f.write(rows.astype("<i8").tobytes())
    f.write(struct.pack("<q", int(height)))
    buf = _io.BytesIO()
    write_tensor(buf, value)
    f.write(buf.getvalue()[12:])


def load_persistables_for_increment(dirname: str, executor: Executor | None,
                                    program: Program, lookup_table_var: str,
                                    lookup_table_var_path: str) -> None:
    """Load a pserver program for incremental training with a distributed lookup table
    (Fluid 1.8's ``fluid.contrib.utils.lookup_table_utils.load_persistables_for_increment``):
    the parameter blocks and optimizer state this pserver holds, cut from the whole
    variables' files under ``dirname`` (as :func:`load_persistables`), then this pserver's
    part of the table from ``lookup_table_var_path``, a SelectedRows file (global ids).

    dask_fluid keeps a pserver's part of the table dense, the ids ``id % P == k`` of pserver
    ``k`` at row ``id // P`` (:mod:`dask_fluid.transpiler.lookup_table`): the file's rows are
    placed there, the rows it lacks are zero.

    Raises
    ------
    ValueError
        ``dirname`` is not a directory, ``lookup_table_var_path`` does not exist, ``program``
        is not a transpiled pserver program serving the table ``lookup_table_var``, or the file
        holds ids of another pserver's part or rows that do not fit.
    """
    if not os.path.isdir(dirname):
        raise ValueError(f"There is no directory named {dirname!r}")
    if not os.path.exists(lookup_table_var_path):
        raise ValueError(f"There is no file named {lookup_table_var_path!r}")
    if not isinstance(program, Program):
        raise ValueError("program must be an instance of fluid.Program")
    overview = getattr(program, "_parameters_on_pservers", None)
    if not getattr(program, "_is_distributed", False) or overview is None:
        raise ValueError("load_persistables_for_increment needs a pserver program "
                         "(DistributeTranspiler.get_pserver_program)")
    shard = None
    for op in program.global_block().ops:
        entry = op.attrs.get("lookup_table_shard") if op.type == "listen_and_serv" else None
        if entry:
            name, _grad, parts, rows = entry
            shard = (str(name), int(parts), int(op.attrs.get("pserver_id", 0)), int(rows))
    if shard is None or shard[0] != lookup_table_var:
        raise ValueError(f"program is not a pserver program serving the distributed lookup "
                         f"table {lookup_table_var!r} (it serves "
                         f"{shard[0] if shard else 'none'!r})")
    _load_distributed_persistables(executor, dirname, program, overview)
    name, parts, index, shard_rows = shard
    ids, value, _height = _read_selected_rows(lookup_table_var_path)
    if ids.size and ((ids % parts != index).any() or (ids // parts >= shard_rows).any()
                     or (ids < 0).any()):
        raise ValueError(f"{lookup_table_var_path} holds ids that pserver {index} of {parts} "
                         f"does not serve (its ids are id % {parts} == {index}, below "
                         f"{parts * shard_rows})")
    block = program.global_block()
    declared = block.var(name).shape if block.has_var(name) else None
    width = tuple(value.shape[1:])
    if declared is not None and tuple(declared[1:]) != width:
        raise ValueError(f"table {name!r} rows are {list(declared[1:])} in the program but "
                         f"{list(width)} in {lookup_table_var_path}")
    dense = np.zeros((shard_rows, *width), dtype=value.dtype)
    dense[ids // parts] = value
    scope = _scope_of(executor)
    scope.set(name, _placed(executor, scope, name, dense))


def load_persistables_for_inference(dirname: str, executor: Executor | None,
                                    program: Program | None,
                                    lookup_table_var_name: str) -> Program:
    """Load a model trained with a distributed lookup table for local inference (Fluid 1.8's
    ``fluid.contrib.utils.lookup_table_utils.load_persistables_for_inference``).

    The persistable variables (not gradients, pserver blocks ``.block``/``.trainer_``,
    ``tmp_`` variables, nor the table) are loaded from their files under ``dirname``; the
    pservers' table files ``<dirname>/__lookup_table__/<table>_<i>`` (SelectedRows, global
    ids) are merged (``merge_sparse_lookup_table``), written to
    ``__lookup_table__/<table>`` and set in the scope as the dense ``[height, ...]`` table a
    local ``lookup_table`` reads (rows no file holds are zero). ``program`` None reads
    ``<dirname>/__model__`` (:func:`save_inference_model`'s file). Returns the program.

    Raises
    ------
    ValueError
        ``dirname`` is not a directory, ``program`` is not a Program, there is no table file,
        or the parts disagree (row width, an id twice, an id beyond the table).
    """
    if not os.path.isdir(dirname):
        raise ValueError(f"There is no directory named {dirname!r}")
    if program is not None:
        if not isinstance(program, Program):
            raise ValueError("program must be an instance of fluid.Program")
    else:
        path = os.path.join(dirname, MODEL_FILENAME)
        with open(path, "rb") as f:
            program = Program._from_dict(_read_model(f.read(), path)["program"])

    def checkpoint_var(var: Variable) -> bool:
        # Fluid's _is_checkpoint_var: what a checkpoint holds, the table apart
        return (var.type not in (VarType.RAW,) and "@GRAD" not in var.name
                and ".trainer_" not in var.name and ".block" not in var.name
                and "tmp_" not in var.name and var.name != lookup_table_var_name
                and bool(var.persistable))

    load_vars(executor, dirname, program, predicate=checkpoint_var)
    table_dir = os.path.join(dirname, LOOKUP_TABLE_DIR)
    if not os.path.isdir(table_dir):
        raise ValueError(f"There is no directory named {table_dir!r} (the pservers' table "
                         "files)")
    # Fluid counts the files whose name holds the table's name and reads <table>_0 .. _{n-1};
    # only the numbered parts are counted here, so a merged file of an earlier run is skipped
    prefix = lookup_table_var_name + "_"
    count = sum(1 for n in os.listdir(table_dir)
                if n.startswith(prefix) and n[len(prefix):].isdigit())
    if count == 0:
        raise ValueError(f"{table_dir} holds no part of table {lookup_table_var_name!r} "
                         f"({prefix}0, ...)")
    parts = [_read_selected_rows(os.path.join(table_dir, f"{prefix}{i}")) for i in range(count)]
    widths = {tuple(v.shape[1:]) for _, v, _ in parts}
    if len(widths) != 1:
        raise ValueError(f"the parts of table {lookup_table_var_name!r} have rows of "
                         f"different shapes {sorted(widths)}")
    rows = np.concatenate([r for r, _, _ in parts])
    value = np.concatenate([v for _, v, _ in parts])
    height = max(h for _, _, h in parts)
    if np.unique(rows).size != rows.size:
        raise ValueError(f"the parts of table {lookup_table_var_name!r} hold an id twice")
    with open(os.path.join(table_dir, lookup_table_var_name), "wb") as f:
        write_selected_rows(f, rows, value, height)
    block = program.global_block()
    declared = block.var(lookup_table_var_name).shape if block.has_var(
        lookup_table_var_name) else None
    total = declared[0] if declared is not None and declared[0] >= 0 else height
    if rows.size and (rows.min() < 0 or rows.max() >= total):
        raise ValueError(f"table {lookup_table_var_name!r} has {total} rows, its parts hold "
                         f"ids up to {int(rows.max())}")
    dense = np.zeros((total, *value.shape[1:]), dtype=value.dtype)
    dense[rows] = value
    scope = _scope_of(executor)
    scope.set(lookup_table_var_name, _placed(executor, scope, lookup_table_var_name, dense))
    return program
