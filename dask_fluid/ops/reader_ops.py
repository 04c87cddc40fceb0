"""Host ops of Fluid 1.8's reader layers (:mod:`dask_fluid.layers.io`): ``read`` and ``load``.

* ``read`` (``Reader`` → ``Out``) marks where ``layers.read_file`` takes a batch, as Fluid's
  program does. The batch itself is fed to ``Out`` before the run by the executor's hook for
  started non-iterable PyReaders (:mod:`dask_fluid.py_reader`): the reader's one read-ahead
  queue, converted and checked as any feed. Reading it here too would be a second data path,
  so the kernel leaves the fed values as they are.
* ``load`` (``Out``; attrs ``file_path``, ``load_as_fp16``) reads one LoDTensor file in Fluid's
  format (what Fluid's ``save`` op and ``fluid.io.save_vars`` write per variable) into ``Out``,
  with its LoD; ``load_as_fp16`` converts it to float16 as Fluid's ``load`` kernel does.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..tensor_file import read_tensor
from .registry import LOD_KEY, register


@register("read", ("Reader",), ("Out",),
          {"throw_eof_exp": True, "infer_out": True, "drop_last": True}, host=True)
def _read(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    # the outputs were fed before the run (see the module docstring): nothing to write
    return {}


@register("load", (), ("Out",), {"file_path": "", "load_as_fp16": False}, host=True,
          lod="kernel")
def _load(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    path = attrs["file_path"]
    if not os.path.isfile(path):
        # Fluid's message (load_op.h): "Cannot open %s to load variables."
        raise FileNotFoundError(f"Cannot open {path!r} to load variables")
    with open(path, "rb") as f:
        # the first tensor of the file, as Fluid's DeserializeFromStream (a save_combine file
        # gives its first variable)
        arr, lod = read_tensor(f)
    if attrs.get("load_as_fp16") and arr.dtype != np.float16:
        arr = arr.astype(np.float16)
    return {"Out": [ctx.executor.to_place(arr)], LOD_KEY: {"Out": [lod or None]}}
