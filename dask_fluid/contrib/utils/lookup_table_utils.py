"""``fluid.contrib.utils.lookup_table_utils`` (Fluid 1.8): loading a distributed lookup
table's saved files (:mod:`dask_fluid.lookup_table_io`, also under ``fluid.io`` here)."""

from __future__ import annotations

from typing import Any, NoReturn

from ...lookup_table_io import load_persistables_for_increment, load_persistables_for_inference

__all__ = ["convert_dist_to_sparse_program", "load_persistables_for_increment",
           "load_persistables_for_inference"]


def convert_dist_to_sparse_program(program: Any) -> NoReturn:
    """Fluid 1.8's rewrite of a trainer program's distributed lookup table into a local
    sparse one; not implemented here.

    Raises
    ------
    NotImplementedError
        Always: transpile the original (untranspiled) program for inference instead, or load
        the table into a local program with ``load_persistables_for_inference``.
    """
    raise NotImplementedError(
        "convert_dist_to_sparse_program is not implemented in dask_fluid: use the program "
        "from before transpile() for inference and load the table with "
        "load_persistables_for_inference")
