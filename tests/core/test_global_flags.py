"""``fluid.set_flags`` / ``fluid.get_flags`` (Fluid 1.8's public flags) and what the flags do
here: the environment-read ones reach the code that reads them, FLAGS_check_nan_inf makes the
executor check every op's outputs, the tuning ones are kept."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.flags import RPCFlags


@pytest.fixture
def restore_flags(monkeypatch):
    for name in ("FLAGS_rpc_deadline", "FLAGS_selected_gpus", "FLAGS_sync_nccl_allreduce"):
        monkeypatch.delenv(name, raising=False)
    saved = fluid.get_flags(["FLAGS_check_nan_inf", "FLAGS_eager_delete_tensor_gb",
                             "FLAGS_cudnn_deterministic"])
    yield
    fluid.set_flags(saved)
    for name in ("FLAGS_rpc_deadline", "FLAGS_selected_gpus", "FLAGS_sync_nccl_allreduce"):
        os.environ.pop(name, None)


def test_defaults_and_tuning_flags_are_kept(restore_flags):
    assert fluid.get_flags(["FLAGS_check_nan_inf", "FLAGS_eager_delete_tensor_gb"]) == {
        "FLAGS_check_nan_inf": False, "FLAGS_eager_delete_tensor_gb": 0.0}
    fluid.set_flags({"FLAGS_eager_delete_tensor_gb": 1, "FLAGS_cudnn_deterministic": "1"})
    assert fluid.get_flags("FLAGS_eager_delete_tensor_gb") == {
        "FLAGS_eager_delete_tensor_gb": 1.0}
    assert fluid.get_flags(("FLAGS_cudnn_deterministic",)) == {
        "FLAGS_cudnn_deterministic": True}


def test_environment_flags_reach_their_readers(restore_flags):
    fluid.set_flags({"FLAGS_rpc_deadline": 5000, "FLAGS_selected_gpus": "1,2",
                     "FLAGS_sync_nccl_allreduce": False})
    assert os.environ["FLAGS_rpc_deadline"] == "5000"
    assert RPCFlags.current().deadline_ms == 5000  # what a job started now ships
    assert os.environ["FLAGS_selected_gpus"] == "1,2"
    assert os.environ["FLAGS_sync_nccl_allreduce"] == "0"
    assert fluid.get_flags(["FLAGS_rpc_deadline", "FLAGS_sync_nccl_allreduce"]) == {
        "FLAGS_rpc_deadline": 5000, "FLAGS_sync_nccl_allreduce": False}


def test_bad_flags_are_refused_and_nothing_is_set(restore_flags):
    with pytest.raises(TypeError, match="should be a dict"):
        fluid.set_flags([("FLAGS_check_nan_inf", True)])
    with pytest.raises(TypeError, match="list, tuple or string"):
        fluid.get_flags(3)
    with pytest.raises(ValueError, match="Flag FLAGS_no_such cannot set its value"):
        fluid.set_flags({"FLAGS_eager_delete_tensor_gb": 2.0, "FLAGS_no_such": 1})
    assert fluid.get_flags("FLAGS_eager_delete_tensor_gb")["FLAGS_eager_delete_tensor_gb"] == 0.0
    with pytest.raises(ValueError, match="Flag FLAGS_no_such cannot get its value"):
        fluid.get_flags(["FLAGS_no_such"])
    with pytest.raises(ValueError, match="takes a bool"):
        fluid.set_flags({"FLAGS_check_nan_inf": "maybe"})
    with pytest.raises(ValueError, match="must be > 0"):
        fluid.set_flags({"FLAGS_rpc_deadline": 0})
    assert "FLAGS_rpc_deadline" not in os.environ
    with pytest.raises(NotImplementedError, match="FLAGS_rpc_retry_times"):
        fluid.set_flags({"FLAGS_rpc_retry_times": 3})


def _log_of(x_value):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [2])
        y = layers.scale(layers.log(x), 2.0)
    return fluid.Executor().run(main, feed={"x": x_value}, fetch_list=[y],
                                scope=fluid.Scope())[0]


@pytest.mark.filterwarnings("ignore:invalid value encountered in log:RuntimeWarning")
def test_check_nan_inf_names_the_op_and_the_variable(restore_flags):
    # numpy warns of the NaN the test makes on purpose
    bad = np.array([[1.0, -1.0]], np.float32)
    assert np.isnan(_log_of(bad)).any()  # off: Fluid's default, the NaN goes on
    fluid.set_flags({"FLAGS_check_nan_inf": True})
    np.testing.assert_allclose(_log_of(np.array([[1.0, 2.0]], np.float32)),
                               [[0.0, 2 * np.log(2.0)]], rtol=1e-6)
    with pytest.raises(fluid.executor.ExecutionError,
                       match=r"op 'log' .* output 'log_\d+.tmp_\d+' .* NaN or Inf"):
        _log_of(bad)


def test_check_nan_inf_from_the_environment_at_start():
    code = ("import numpy as np, dask_fluid as fluid\n"
            "from dask_fluid import layers\n"
            "assert fluid.get_flags('FLAGS_check_nan_inf')['FLAGS_check_nan_inf'] is True\n"
            "main, startup = fluid.Program(), fluid.Program()\n"
            "with fluid.program_guard(main, startup):\n"
            "    y = layers.sqrt(layers.data('x', [1]))\n"
            "try:\n"
            "    fluid.Executor().run(main, feed={'x': np.array([[-1.0]], 'float32')},\n"
            "                         fetch_list=[y])\n"
            "except fluid.executor.ExecutionError as err:\n"
            "    print('raised:', 'sqrt' in str(err))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "FLAGS_check_nan_inf": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "raised: True" in proc.stdout
