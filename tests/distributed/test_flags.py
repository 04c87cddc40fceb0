"""FLAGS_rpc_*: environment first, then dask.config, then defaults; bad values are refused."""

import pickle

import dask.config
import pytest

from dask_fluid.flags import FLAGS, RPCFlags, read_flag


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in FLAGS:
        monkeypatch.delenv(name, raising=False)


def test_defaults():
    flags = RPCFlags.current()
    assert flags == RPCFlags(180000, 12, 12, 12)
    assert flags.deadline_s == 180.0


def test_defaults_are_registered_in_dask_config():
    assert dask.config.get("dask_fluid.rpc.deadline") == 180000
    assert dask.config.get("dask_fluid.rpc.send-thread-num") == 12
    assert dask.config.get("dask_fluid.rpc.prefetch_thread_num") == 12  # _ and - are equivalent


def test_config_key_is_used():
    with dask.config.set({"dask_fluid.rpc.deadline": 3000, "dask_fluid.rpc.get-thread-num": 4}):
        flags = RPCFlags.current()
    assert flags.deadline_ms == 3000
    assert flags.deadline_s == 3.0
    assert flags.get_thread_num == 4
    assert flags.send_thread_num == 12


def test_environment_beats_config(monkeypatch):
    monkeypatch.setenv("FLAGS_rpc_deadline", "5000")
    monkeypatch.setenv("FLAGS_rpc_send_thread_num", "3")
    with dask.config.set({"dask_fluid.rpc.deadline": 3000}):
        flags = RPCFlags.current()
    assert (flags.deadline_ms, flags.send_thread_num) == (5000, 3)


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5", ""])
def test_bad_environment_value(monkeypatch, value):
    monkeypatch.setenv("FLAGS_rpc_deadline", value)
    with pytest.raises(ValueError, match=f"environment variable FLAGS_rpc_deadline = '{value}'"):
        RPCFlags.current()


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "soon"])
def test_bad_config_value(value):
    with dask.config.set({"dask_fluid.rpc.prefetch-thread-num": value}):
        with pytest.raises(ValueError, match="prefetch-thread-num.*positive integer"):
            RPCFlags.current()


def test_integral_float_and_string_config_values_are_accepted():
    config = {"dask_fluid.rpc.deadline": 2000.0, "dask_fluid.rpc.send-thread-num": "7"}
    with dask.config.set(config):
        flags = RPCFlags.current()
    assert (flags.deadline_ms, flags.send_thread_num) == (2000, 7)


def test_unknown_flag():
    with pytest.raises(KeyError, match="FLAGS_rpc_retry_times"):
        read_flag("FLAGS_rpc_retry_times")


def test_rpcflags_validates_and_is_frozen_and_picklable():
    with pytest.raises(ValueError, match="RPCFlags.deadline_ms"):
        RPCFlags(deadline_ms=0)
    flags = RPCFlags(1000, 1, 2, 3)
    with pytest.raises(AttributeError):
        flags.deadline_ms = 5  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(flags)) == flags
