"""What each pserver holds of the original program's persistable variables: full arrays cut
into the pservers' variables, and the pservers' variables put back together.

A job that starts from given values (``train_pserver(initial_values=...)``, the estimators'
``warm_start``) cuts them; a job's result puts the pservers' parameters and optimizer state
back into full arrays, named as the original program names them.

A pserver variable comes from one variable of the original program in one of four ways
(:class:`Piece`):

- ``whole``: a parameter that is not sliced, the accumulators of a whole parameter, a sliced
  parameter's beta powers, the learning rate and its schedule's counters (every pserver
  holding one of these keeps it equal in sync mode; the result takes the first pserver's);
- ``rows``: a parameter block, and the accumulators sliced with it, a run of dim-0 rows
  (:class:`~.slicing.VarBlock`);
- ``stride``: the distributed lookup table's shard ``k`` of ``P``, rows ``k, k + P, ...``
  (its last rows may lie past the table's and stay zero);
- ``backup``: DC-ASGD's copy of a parameter block per trainer (the block as that trainer last
  pulled it), which starts as the block itself and is never part of the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .slicing import VarBlock

__all__ = ["Piece", "assemble", "cut", "pserver_pieces"]


@dataclass(frozen=True)
class Piece:
    """How one pserver variable comes from the original variable ``origin``."""

    origin: str
    kind: str
    #: ``rows`` and ``backup``: the rows of the block
    block: VarBlock | None = None
    #: ``stride``: shard ``k`` of ``p``, ``rows`` rows (``ceil(table_rows / p)``)
    k: int = 0
    p: int = 1
    rows: int = 0
    table_rows: int = 0


def pserver_pieces(transpiler: Any, endpoint: str) -> dict[str, Piece]:
    """Every persistable variable of the pserver program at ``endpoint`` that comes from a
    persistable variable of the original program (gradients and scratch do not), by name."""
    plan = transpiler.plan
    build = transpiler._build(endpoint)
    origin = plan.origin.global_block()
    table = plan.table
    pieces: dict[str, Piece] = {}
    for name, (orig, geometry) in build.origin_of.items():
        var = origin._var_recursive(orig)
        if not var.persistable:
            continue
        if table is not None and orig == table.name:
            pieces[name] = Piece(orig, "stride", k=list(table.endpoints).index(endpoint),
                                 p=len(table.endpoints), rows=table.shard_rows,
                                 table_rows=table.shape[0])
        elif geometry is not None:
            pieces[name] = Piece(orig, "rows", geometry)
        else:
            pieces[name] = Piece(orig, "whole")
    for block_name, backup in build.dc_asgd_backups:
        source = pieces[block_name]
        pieces[backup] = Piece(source.origin, "backup", source.block)
    return pieces


def cut(pieces: Mapping[str, Piece], values: Mapping[str, np.ndarray]
        ) -> dict[str, np.ndarray]:
    """The pserver's variables whose original variable is in ``values`` (full arrays of the
    original program's shapes), cut as ``pieces`` says."""
    out = {}
    for name, piece in pieces.items():
        if piece.origin not in values:
            continue
        full = np.asarray(values[piece.origin])
        if piece.kind == "stride":
            shard = np.zeros((piece.rows,) + full.shape[1:], dtype=full.dtype)
            mine = full[piece.k::piece.p]
            shard[:len(mine)] = mine
            out[name] = shard
        elif piece.block is not None:
            b = piece.block
            out[name] = full.reshape(-1)[b.offset:b.offset + b.size].reshape(b.shape).copy()
        else:  # a whole variable, or the backup of a whole parameter
            out[name] = np.array(full, copy=True)
    return out


def assemble(pieces: Mapping[str, Mapping[str, Piece]],
             states: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The original program's variables put together from each pserver's ``states`` (by
    endpoint, as :func:`pserver_pieces` gives their ``pieces``); a whole variable several
    pservers hold is taken from the first endpoint."""
    out: dict[str, np.ndarray] = {}
    for endpoint, state in states.items():
        for name, piece in pieces[endpoint].items():
            if piece.kind == "backup" or name not in state:
                continue
            value = np.asarray(state[name])
            if piece.kind == "stride":
                full = out.get(piece.origin)
                if full is None:
                    full = out[piece.origin] = np.zeros(
                        (piece.table_rows,) + value.shape[1:], dtype=value.dtype)
                mine = full[piece.k::piece.p]
                mine[...] = value[:len(mine)]
            elif piece.kind == "rows":
                b = piece.block
                full = out.get(piece.origin)
                if full is None:
                    full = out[piece.origin] = np.zeros(b.full_shape, dtype=value.dtype)
                full.reshape(-1)[b.offset:b.offset + b.size] = value.reshape(-1)
            else:
                out.setdefault(piece.origin, np.array(value, copy=True))
    return out
