"""Fluid 1.8's ``fluid.set_flags`` / ``fluid.get_flags``: the public ``FLAGS_*`` of the process.

Fluid reads each flag from its environment variable when it starts (``FLAGS_check_nan_inf=1
python train.py``) and lets a script change the public ones with ``set_flags``. Here every
public flag of Fluid 1.8 is known, in one of three kinds:

- read by dask_fluid from the environment when it is needed (``FLAGS_rpc_*``,
  ``FLAGS_selected_gpus``, ``FLAGS_sync_nccl_allreduce``): ``set_flags`` writes the variable, so
  the jobs and processes started afterwards see the value;
- ``FLAGS_check_nan_inf``: the executor checks the floating outputs of every op it runs and
  raises naming the op and the variable that holds a NaN or an infinity (Fluid's
  ``CheckOpHasNanOrInf``);
- tuning flags of Fluid's C++ core (allocators, garbage collection, cuDNN algorithm search,
  thread counts, profiling files): kept, so ``get_flags`` returns what was set, without effect on
  any result here (numpy and CuPy manage the memory; the kernels are deterministic, which is
  what ``FLAGS_cudnn_deterministic`` and ``FLAGS_cpu_deterministic`` ask for).

``FLAGS_rpc_retry_times`` is refused (:mod:`dask_fluid.flags` says why); any other name raises
``ValueError`` as Fluid's ("Flag ... cannot set its value through this function.").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from .flags import FLAGS as RPC_FLAGS
from .flags import read_flag

__all__ = ["check_nan_inf", "get_flags", "set_flags"]

#: flags dask_fluid reads from the environment when it needs them: name -> default
_FROM_ENV: dict[str, Any] = {
    **{name: default for name, (_, default) in RPC_FLAGS.items()},
    "FLAGS_selected_gpus": "",
    "FLAGS_sync_nccl_allreduce": True,
}
#: flags that change what runs: name -> default
_ACTIVE: dict[str, Any] = {"FLAGS_check_nan_inf": False}
#: Fluid 1.8's public tuning flags and their defaults (global_value_getter_setter.cc)
_TUNING: dict[str, Any] = {
    "FLAGS_allocator_strategy": "auto_growth",
    "FLAGS_benchmark": False,
    "FLAGS_conv_workspace_size_limit": 512,
    "FLAGS_cpu_deterministic": False,
    "FLAGS_cudnn_batchnorm_spatial_persistent": False,
    "FLAGS_cudnn_deterministic": False,
    "FLAGS_cudnn_exhaustive_search": False,
    "FLAGS_eager_delete_scope": True,
    "FLAGS_eager_delete_tensor_gb": 0.0,
    "FLAGS_enable_cublas_tensor_op_math": False,
    "FLAGS_enable_parallel_graph": False,
    "FLAGS_enable_rpc_profiler": False,
    "FLAGS_fast_eager_deletion_mode": True,
    "FLAGS_fraction_of_cpu_memory_to_use": 1.0,
    "FLAGS_fraction_of_cuda_pinned_memory_to_use": 0.5,
    "FLAGS_fraction_of_gpu_memory_to_use": 0.92,
    "FLAGS_fuse_parameter_groups_size": 3,
    "FLAGS_fuse_parameter_memory_size": -1.0,
    "FLAGS_init_allocated_mem": False,
    "FLAGS_initial_cpu_memory_in_mb": 500,
    "FLAGS_initial_gpu_memory_in_mb": 0,
    "FLAGS_inner_op_parallelism": 0,
    "FLAGS_memory_fraction_of_eager_deletion": 1.0,
    "FLAGS_multiple_of_cupti_buffer_size": 1,
    "FLAGS_paddle_num_threads": 1,
    "FLAGS_pe_profile_fname": "",
    "FLAGS_print_sub_graph_dir": "",
    "FLAGS_reader_queue_speed_test_mode": False,
    "FLAGS_reallocate_gpu_memory_in_mb": 0,
    "FLAGS_rpc_disable_reuse_port": False,
    "FLAGS_tracer_profile_fname": "",
    "FLAGS_use_pinned_memory": True,
    "FLAGS_use_system_allocator": False,
}
_REFUSED = {
    "FLAGS_rpc_retry_times": "dask_fluid bounds every remote call by FLAGS_rpc_deadline "
                             "instead of retrying it (dask's comm layer retries connecting)",
}
_DEFAULTS = {**_FROM_ENV, **_ACTIVE, **_TUNING}

_lock = threading.Lock()
#: the values of the active and tuning flags (the environment at import, then set_flags)
_values: dict[str, Any] = {}


def _parse(name: str, value: Any, source: str) -> Any:
    """``value`` as the type of flag ``name``'s default; ValueError naming ``source``."""
    default = _DEFAULTS[name]
    if isinstance(default, bool):
        if isinstance(value, str) and value.strip().lower() in ("1", "true", "0", "false"):
            return value.strip().lower() in ("1", "true")
        if isinstance(value, (bool, int)) and value in (0, 1):
            return bool(value)
    elif isinstance(default, int):
        try:
            if not isinstance(value, bool) and float(value) == int(float(value)):
                return int(float(value))
        except (TypeError, ValueError):
            pass
    elif isinstance(default, float):
        try:
            if not isinstance(value, bool):
                return float(value)
        except (TypeError, ValueError):
            pass
    elif isinstance(value, str):
        return value
    raise ValueError(f"{source}: {name} takes a {type(default).__name__} (default "
                     f"{default!r}), got {value!r}")


def _check_public(name: Any, verb: str) -> None:
    if name in _REFUSED:
        raise NotImplementedError(f"{name} is not supported in dask_fluid: {_REFUSED[name]}")
    if not isinstance(name, str) or name not in _DEFAULTS:
        raise ValueError(f"Flag {name} cannot {verb} its value through this function.")


for _name in (*_ACTIVE, *_TUNING):  # what the environment set when the process started
    _raw = os.environ.get(_name)
    _values[_name] = _DEFAULTS[_name] if _raw is None else _parse(
        _name, _raw, f"environment variable {_name}")


def set_flags(flags: dict[str, Any]) -> None:
    """Set public flags (Fluid 1.8's ``fluid.set_flags``; see the module docstring for what
    each kind does here).

    Parameters
    ----------
    flags : dict
        ``{"FLAGS_name": value}``.

    Raises
    ------
    TypeError
        ``flags`` is not a dict.
    ValueError
        An unknown or private flag, or a value of the wrong type.
    NotImplementedError
        ``FLAGS_rpc_retry_times``.
    """
    if not isinstance(flags, dict):
        raise TypeError("flags in set_flags should be a dict")
    parsed = {}
    for name, value in flags.items():  # all checked before any is set
        _check_public(name, "set")
        parsed[name] = _parse(name, value, "set_flags")
        if name in RPC_FLAGS and parsed[name] <= 0:
            raise ValueError(f"set_flags: {name} must be > 0, got {value!r}")
    with _lock:
        for name, value in parsed.items():
            if name in _FROM_ENV:
                os.environ[name] = ("1" if value else "0") if isinstance(value, bool) \
                    else str(value)
            else:
                _values[name] = value


def get_flags(flags: str | Sequence[str]) -> dict[str, Any]:
    """The values of public flags (Fluid 1.8's ``fluid.get_flags``).

    Parameters
    ----------
    flags : str or list of str

    Returns
    -------
    dict
        ``{"FLAGS_name": value}``.
    """
    if isinstance(flags, str):
        names = [flags]
    elif isinstance(flags, (list, tuple)):
        names = list(flags)
    else:
        raise TypeError("Flags in get_flags should be a list, tuple or string.")
    out = {}
    for name in names:
        _check_public(name, "get")
        if name in RPC_FLAGS:  # the environment, else dask.config, else the default
            out[name] = read_flag(name)
        elif name in _FROM_ENV:
            raw = os.environ.get(name)
            out[name] = _DEFAULTS[name] if raw is None else _parse(
                name, raw, f"environment variable {name}")
        else:
            out[name] = _values[name]
    return out


def check_nan_inf() -> bool:
    """Whether ``FLAGS_check_nan_inf`` is on (the executor checks every op's outputs)."""
    return bool(_values["FLAGS_check_nan_inf"])
