"""Which table a program looks up with ``is_distributed=True`` (Fluid's
``find_distributed_lookup_table``).

Both the optimizer (which gives that table a plain ``sgd`` of its own) and the transpiler
(which shards it over the pservers) ask; this module answers for both.
"""

from __future__ import annotations

from .framework import Block

LOOKUP_TABLE_TYPE = "lookup_table"


def distributed_table_name(block: Block) -> str | None:
    """The one table looked up with ``is_distributed=True`` in ``block`` (None if none).

    Raises
    ------
    RuntimeError
        If several tables are looked up with ``is_distributed=True``.
    """
    tables = sorted({op.input("W")[0] for op in block.ops
                     if op.type == LOOKUP_TABLE_TYPE and op.attrs.get("is_distributed")})
    if len(tables) > 1:
        raise RuntimeError(f"only one distributed lookup table is supported, found {tables}")
    return tables[0] if tables else None


__all__ = ["LOOKUP_TABLE_TYPE", "distributed_table_name"]
