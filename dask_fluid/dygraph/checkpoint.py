"""``fluid.dygraph.save_dygraph`` / ``load_dygraph`` (Fluid 1.8's ``dygraph/checkpoint.py``).

A layer's ``state_dict()`` goes to ``<model_path>.pdparams``, an optimizer's to
``<model_path>.pdopt``: a pickled dict (protocol 2, as 1.8 writes it) of numpy arrays, with
the ``"StructuredToParameterName@@"`` table mapping each key to its variable's name. Files are
read back by an unpickler that admits numpy arrays and plain containers only, so a file
cannot run code when it is loaded.
"""

from __future__ import annotations

import io
import numbers
import os
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..framework import Variable, in_dygraph_mode
from ..model_state import _ArraysOnly
from .varbase import ParamBase

__all__ = ["load_dygraph", "save_dygraph"]

NAME_TABLE_KEY = "StructuredToParameterName@@"
_PARAMS_SUFFIX = ".pdparams"
_OPT_SUFFIX = ".pdopt"


def _dygraph_only(api: str) -> None:
    # Fluid 1.8 decorates both functions with @dygraph_only
    if not in_dygraph_mode():
        raise RuntimeError(f"{api}() works in dygraph mode only: call it inside "
                           "fluid.dygraph.guard()")


def _check_path(model_path: Any) -> str:
    if isinstance(model_path, os.PathLike):
        model_path = os.fspath(model_path)
    if not isinstance(model_path, str):
        raise TypeError(f"model_path must be a str, got {type(model_path).__name__}")
    return model_path


def _plain(key: str, value: Any) -> Any:
    """``value`` as the loader admits it: numpy arrays, numbers, strings, None and
    dicts/lists/tuples of these (what an optimizer's ``"LR_Scheduler"`` state holds)."""
    if isinstance(value, Variable):
        return value.numpy()
    if isinstance(value, (np.ndarray, np.generic, str, bytes, bool, numbers.Number)) or \
            value is None:
        if isinstance(value, np.ndarray) and value.dtype.kind not in "biufc":
            raise TypeError(f"state_dict[{key!r}] is an array of dtype {value.dtype}: only "
                            "numeric arrays are saved")
        return value
    if isinstance(value, Mapping):
        return {k: _plain(f"{key}.{k}", v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(f"{key}[{i}]", v) for i, v in enumerate(value))
    raise TypeError(f"state_dict[{key!r}] is a {type(value).__name__}: save_dygraph saves "
                    "variables, numpy arrays, numbers, strings and lists/dicts of them")


def save_dygraph(state_dict: Mapping[str, Any], model_path: str) -> None:
    """Save a layer's or an optimizer's ``state_dict`` (Fluid 1.8's ``save_dygraph``).

    Parameters
    ----------
    state_dict : dict
        ``Layer.state_dict()`` (its first value a parameter: written to
        ``model_path + ".pdparams"``) or ``Optimizer.state_dict()`` (anything else first:
        ``model_path + ".pdopt"``).
    model_path : str
        ``dirname/file_prefix``; missing directories are created.

    Raises
    ------
    RuntimeError
        Outside ``fluid.dygraph.guard``.
    TypeError
        ``state_dict`` is not a dict, or holds a value that is not saved.
    ValueError
        ``state_dict`` is empty, or ``model_path`` has no file prefix.
    IsADirectoryError
        The file to write is a directory.
    """
    _dygraph_only("save_dygraph")
    model_path = _check_path(model_path)
    if os.path.basename(model_path) == "":
        raise ValueError("The input model_path MUST be format of dirname/filename, but "
                         f"received filename is empty string: {model_path!r}")
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
    if len(state_dict) == 0:
        raise ValueError("state_dict is empty, no need to save")
    # 1.8: the first value decides the suffix
    first = next(iter(state_dict.values()))
    suffix = _PARAMS_SUFFIX if isinstance(first, ParamBase) else _OPT_SUFFIX
    model_dict: dict[str, Any] = {}
    name_table: dict[str, str] = {}
    for key, value in state_dict.items():
        model_dict[key] = _plain(key, value)
        if isinstance(value, Variable):
            name_table[key] = value.name
    model_dict[NAME_TABLE_KEY] = name_table

    file_name = model_path + suffix
    if os.path.isdir(file_name):
        raise IsADirectoryError(f"save_dygraph: {file_name} is a directory")
    directory = os.path.dirname(file_name)
    if directory:
        os.makedirs(directory, exist_ok=True)
    # written beside and renamed, so an interrupted save leaves the old file whole
    tmp = f"{file_name}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            pickle.dump(model_dict, f, protocol=2)
        os.replace(tmp, file_name)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _load_file(path: str) -> dict:
    if os.path.isdir(path):
        raise IsADirectoryError(f"load_dygraph: {path} is a directory, not a saved state")
    with open(path, "rb") as f:
        data = f.read()
    try:
        out = _ArraysOnly(io.BytesIO(data), encoding="latin1").load()
    except pickle.UnpicklingError as err:
        raise pickle.UnpicklingError(f"load_dygraph refused {path}: {err}") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as err:
        raise ValueError(f"load_dygraph: {path} is not a saved state dict (truncated or "
                         f"another format): {err}") from None
    if not isinstance(out, dict):
        raise ValueError(f"load_dygraph: {path} does not hold a dict, it holds a "
                         f"{type(out).__name__}")
    return out


def load_dygraph(model_path: str, keep_name_table: bool = False
                 ) -> tuple[dict | None, dict | None]:
    """Load what :func:`save_dygraph` wrote (Fluid 1.8's ``load_dygraph``).

    Parameters
    ----------
    model_path : str
        The prefix given to ``save_dygraph`` (a ``.pdparams`` or ``.pdopt`` suffix is
        dropped).
    keep_name_table : bool, default False
        Keep the ``"StructuredToParameterName@@"`` table in the parameters' dict.

    Returns
    -------
    (param_dict, optimizer_dict)
        Dicts of numpy arrays (the optimizer's may hold its ``"LR_Scheduler"`` state);
        None for a file that does not exist.

    Raises
    ------
    RuntimeError
        Outside ``fluid.dygraph.guard``.
    FileNotFoundError
        Neither file exists.
    IsADirectoryError
        ``model_path`` (or a file it names) is a directory.
    pickle.UnpicklingError
        A file holds anything but arrays, numbers, strings and containers (nothing in it is
        run).
    ValueError
        A file is not a pickled dict.
    """
    _dygraph_only("load_dygraph")
    prefix = _check_path(model_path)
    for suffix in (_PARAMS_SUFFIX, _OPT_SUFFIX):
        if prefix.endswith(suffix):
            prefix = prefix[:-len(suffix)]
            break
    params_path, opt_path = prefix + _PARAMS_SUFFIX, prefix + _OPT_SUFFIX
    if not os.path.exists(params_path) and not os.path.exists(opt_path):
        if os.path.isdir(prefix):
            raise IsADirectoryError(f"load_dygraph: {prefix} is a directory; give the file "
                                    "prefix save_dygraph was given (dirname/file_prefix)")
        raise FileNotFoundError(f"load_dygraph: neither {params_path} nor {opt_path} exists")
    params = _load_file(params_path) if os.path.exists(params_path) else None
    if params is not None and not keep_name_table:
        params.pop(NAME_TABLE_KEY, None)
    opt = _load_file(opt_path) if os.path.exists(opt_path) else None
    return params, opt
