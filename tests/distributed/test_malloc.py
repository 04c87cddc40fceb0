"""training_malloc: under Dask's nanny environment (MALLOC_TRIM_THRESHOLD_ set, which freezes
glibc's mmap threshold at 128 KiB) step-sized arrays come from the heap while a training task
runs, and the worker's thresholds come back afterwards. Checked in a fresh interpreter with
the nanny's variable, counting glibc's mmapped blocks (mallinfo2)."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys

import dask
import pytest

from dask_fluid.distributed.launch import malloc

_LIBC = ctypes.util.find_library("c")
glibc = pytest.mark.skipif(
    _LIBC is None or not hasattr(ctypes.CDLL(_LIBC), "mallinfo2"),
    reason="needs glibc >= 2.33 (mallinfo2) to count mmapped blocks",
)

_PROBE = r"""
import ctypes, ctypes.util, json
import numpy as np
from dask_fluid.distributed.launch.malloc import training_malloc

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2

def mmapped_blocks_for_a_300k_array():
    before = libc.mallinfo2().hblks
    a = np.ones(300 * 1024 // 8)
    during = libc.mallinfo2().hblks
    del a
    return during - before

out = {"outside": mmapped_blocks_for_a_300k_array()}
with training_malloc(True) as changed:
    out["changed"] = changed
    with training_malloc(True):  # nested: a pserver and a trainer on one worker
        pass
    out["inside"] = mmapped_blocks_for_a_300k_array()
out["after"] = mmapped_blocks_for_a_300k_array()
with training_malloc(False) as changed:
    out["disabled_changed"] = changed
    out["disabled"] = mmapped_blocks_for_a_300k_array()
print(json.dumps(out))
"""


def _probe(env_extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@glibc
def test_heap_arrays_inside_a_training_task_under_the_nanny_environment():
    out = _probe({"MALLOC_TRIM_THRESHOLD_": "65536"})
    assert out["outside"] == 1  # frozen 128 KiB threshold: a fresh mmap per array
    assert out["changed"] is True
    assert out["inside"] == 0  # heap
    assert out["after"] == 1  # the worker's thresholds are back (nested use kept them raised)
    assert out["disabled_changed"] is False and out["disabled"] == 1


@glibc
def test_workers_without_fixed_thresholds_are_left_alone():
    out = _probe({})
    assert out["changed"] is False and out["disabled_changed"] is False


def test_the_setting_is_read_from_dask_config_and_checked():
    assert malloc.enabled() is True
    with dask.config.set({malloc.CONFIG_KEY: False}):
        assert malloc.enabled() is False
    with dask.config.set({malloc.CONFIG_KEY: "False"}):  # from the environment
        assert malloc.enabled() is False
    with dask.config.set({malloc.CONFIG_KEY: "sometimes"}), \
            pytest.raises(ValueError, match="tune-malloc = 'sometimes' is not allowed"):
        malloc.enabled()
