"""``fluid.io``: saving and loading variables, parameters, inference models and program state,
and reading data (Fluid 1.8's ``fluid.io`` namespace).

What it holds comes from modules with one job each: :mod:`dask_fluid.var_io` (variables in
Paddle 1.8's LoDTensor file layout, so files move both ways with real Fluid 1.8),
:mod:`dask_fluid.inference_model`, :mod:`dask_fluid.lookup_table_io`,
:mod:`dask_fluid.model_state` (``fluid.save``/``fluid.load``, the program state),
:mod:`dask_fluid.py_reader` (PyReader, DataLoader) and :mod:`dask_fluid.sample_readers` (the
reader decorators and ``batch``, which Fluid 1.8's ``fluid.io`` re-exports from
``paddle.reader``).
"""

from __future__ import annotations

from .inference_model import (
    MODEL_FILENAME,
    append_fetch_ops,
    get_inference_program,
    load_inference_model,
    prepend_feed_ops,
    save_inference_model,
)
from .lookup_table_io import (
    LOOKUP_TABLE_DIR,
    load_persistables_for_increment,
    load_persistables_for_inference,
    write_selected_rows,
)
from .model_state import (
    get_program_parameter,
    get_program_persistable_vars,
    load,
    load_program_state,
    save,
    set_program_state,
)
from .py_reader import DataLoader, PyReader
from .sample_readers import (
    ComposeNotAligned,
    batch,
    buffered,
    cache,
    chain,
    compose,
    firstn,
    map_readers,
    multiprocess_reader,
    shuffle,
    xmap_readers,
)
from .tensor_file import read_tensor, write_tensor
from .var_io import (
    get_parameter_value,
    get_parameter_value_by_name,
    is_belong_to_optimizer,
    is_parameter,
    is_persistable,
    load_params,
    load_persistables,
    load_vars,
    save_params,
    save_persistables,
    save_vars,
)

__all__ = [
    # Fluid 1.8's fluid.io re-exports paddle.reader's decorators and paddle.batch
    "ComposeNotAligned", "batch", "buffered", "cache", "chain", "compose", "firstn",
    "map_readers", "multiprocess_reader", "shuffle", "xmap_readers",
    "DataLoader", "PyReader", "get_program_parameter", "get_program_persistable_vars",
    "is_parameter", "is_persistable", "load", "load_inference_model", "load_params",
    "load_persistables", "load_program_state", "load_vars", "read_tensor", "save",
    "set_program_state",
    "save_inference_model", "save_params", "save_persistables", "save_vars", "write_tensor",
    # Fluid 1.8's fluid.io has these too, outside its __all__ (fluid.io.<name> reaches them)
    "append_fetch_ops", "get_inference_program", "get_parameter_value",
    "get_parameter_value_by_name", "is_belong_to_optimizer", "prepend_feed_ops",
    # Fluid 1.8 keeps these two in fluid.contrib.utils.lookup_table_utils
    "load_persistables_for_increment", "load_persistables_for_inference",
    # dask_fluid's: the model file's and the table directory's names, a table file's writer
    "LOOKUP_TABLE_DIR", "MODEL_FILENAME", "write_selected_rows",
]
