"""``fluid.io``: Paddle 1.8's LoDTensor files, byte for byte, and the save/load round trips.

The reference bytes are built here by hand from Paddle 1.8's lod_tensor.cc and tensor_util.cc
(a uint32 version, the LoD, a uint32 version, an int32 TensorDesc size, the protobuf, the data)
and a protobuf encoding written out field by field, independent of dask_fluid's writer."""

from __future__ import annotations

import io
import os
import pickle
import struct

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import io as fio
from dask_fluid.models import mlp


def _paddle_bytes(arr: np.ndarray, code: int, lod=()) -> bytes:
    out = struct.pack("<I", 0) + struct.pack("<Q", len(lod))
    for level in lod:
        out += struct.pack("<Q", 8 * len(level)) + struct.pack(f"<{len(level)}Q", *level)
    desc = b"\x08" + bytes([code])
    for d in arr.shape:
        assert d < 128
        desc += b"\x10" + bytes([d])
    return out + struct.pack("<I", 0) + struct.pack("<i", len(desc)) + desc + arr.tobytes()


@pytest.mark.parametrize("dtype,code", [(np.float32, 5), (np.float64, 6), (np.int64, 3),
                                        (np.int32, 2)])
def test_tensor_bytes_are_paddles(dtype, code):
    arr = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    buf = io.BytesIO()
    fio.write_tensor(buf, arr, lod=[[0, 1, 2]])
    assert buf.getvalue() == _paddle_bytes(arr, code, lod=[[0, 1, 2]])
    back, lod = fio.read_tensor(io.BytesIO(buf.getvalue()))
    np.testing.assert_array_equal(back, arr)
    assert back.dtype == dtype and lod == [[0, 1, 2]]


def test_packed_dims_and_damage_are_handled():
    arr = np.ones((3, 2), np.float32)
    desc = b"\x08\x05" + b"\x12\x02\x03\x02"  # dims packed: field 2, length 2
    raw = struct.pack("<IQI", 0, 0, 0) + struct.pack("<i", len(desc)) + desc + arr.tobytes()
    np.testing.assert_array_equal(fio.read_tensor(io.BytesIO(raw))[0], arr)
    with pytest.raises(ValueError, match="ends inside its data"):
        fio.read_tensor(io.BytesIO(raw[:-4]))
    with pytest.raises(ValueError, match="version 7"):
        fio.read_tensor(io.BytesIO(struct.pack("<I", 7) + raw[4:]))


def _trained():
    spec = mlp(hidden=(8,), n_features=5, n_classes=3, opt=fluid.optimizer.Momentum(0.1, 0.9))
    exe = fluid.Executor()
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(spec.startup)
        rng = np.random.default_rng(0)
        exe.run(spec.main, feed={"x": rng.standard_normal((4, 5)).astype(np.float32),
                                 "y": rng.integers(0, 3, (4, 1))})
    return spec, exe, scope


@pytest.mark.parametrize("filename", [None, "params"])
def test_persistables_round_trip_and_files_per_variable(tmp_path, filename):
    spec, exe, scope = _trained()
    with fluid.scope_guard(scope):
        fluid.io.save_persistables(exe, str(tmp_path), spec.main, filename=filename)
    names = sorted(v.name for v in spec.main.list_vars() if fio.is_persistable(v))
    assert any("velocity" in n for n in names)  # optimizer state is persistable too
    if filename is None:
        assert sorted(os.listdir(tmp_path)) == names
        with open(tmp_path / "fc_0.w_0", "rb") as f:
            np.testing.assert_array_equal(fio.read_tensor(f)[0], scope.get("fc_0.w_0"))
    fresh = fluid.Scope()
    with fluid.scope_guard(fresh):
        fluid.io.load_persistables(exe, str(tmp_path), spec.main, filename=filename)
    for n in names:
        np.testing.assert_array_equal(fresh.get(n), np.asarray(scope.get(n)))


def test_a_combined_file_of_paddles_layout_loads_by_sorted_name(tmp_path):
    spec, exe, scope = _trained()
    params = sorted(p.name for p in spec.main.global_block().all_parameters())
    values = {n: np.asarray(scope.get(n)) for n in params}
    with open(tmp_path / "combined", "wb") as f:  # as Paddle's save_combine writes it
        for n in params:
            f.write(_paddle_bytes(values[n].astype(np.float32), 5))
    fresh = fluid.Scope()
    with fluid.scope_guard(fresh):
        fluid.io.load_params(exe, str(tmp_path), spec.main, filename="combined")
    for n in params:
        np.testing.assert_array_equal(fresh.get(n), values[n])
    with open(tmp_path / "short", "wb") as f:
        f.write(_paddle_bytes(values[params[0]].astype(np.float32), 5))
    with fluid.scope_guard(fresh), pytest.raises(ValueError, match="fewer tensors"):
        fluid.io.load_params(exe, str(tmp_path), spec.main, filename="short")


def test_inference_model_round_trip_predicts_the_same(tmp_path):
    spec, exe, scope = _trained()
    x = np.random.default_rng(1).standard_normal((6, 5)).astype(np.float32)
    with fluid.scope_guard(scope):
        expected = exe.run(spec.main.clone(for_test=True), feed={"x": x, "y": np.zeros(
            (6, 1), np.int64)}, fetch_list=[spec.logits])[0]
        fluid.io.save_inference_model(str(tmp_path), ["x"], [spec.logits], exe, spec.main)
    fresh = fluid.Scope()
    with fluid.scope_guard(fresh):
        program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path), exe)
        got = exe.run(program, feed={feeds[0]: x}, fetch_list=fetches)[0]
    assert feeds == ["x"] and fetches[0].name == spec.logits.name
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert not any(op.type in ("momentum", "mean") for op in program.global_block().ops)


def test_inference_model_not_for_deployment_keeps_the_whole_program(tmp_path):
    """Fluid 1.8's ``export_for_deployment=False``: the unpruned program in
    ``__model__.main_program`` and every persistable variable, optimizer state included."""
    spec, exe, scope = _trained()
    with fluid.scope_guard(scope):
        names = fluid.io.save_inference_model(str(tmp_path), ["x"], [spec.logits], exe,
                                              spec.main, export_for_deployment=False)
    assert names == [spec.logits.name]
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["__model__.main_program"] + [v.name for v in spec.main.list_vars()
                                      if fio.is_persistable(v)])
    assert any("velocity" in n for n in os.listdir(tmp_path))  # Momentum's state
    with pytest.raises(FileNotFoundError):  # no deployment model was written, as in Fluid
        fluid.io.load_inference_model(str(tmp_path), exe)
    fresh = fluid.Scope()
    with fluid.scope_guard(fresh):
        program, feeds, fetches = fluid.io.load_inference_model(
            str(tmp_path), exe, model_filename="__model__.main_program")
    assert program == spec.main and feeds == ["x"] and fetches[0].name == spec.logits.name
    for v in spec.main.list_vars():
        if fio.is_persistable(v):
            np.testing.assert_array_equal(np.asarray(fresh.get(v.name)),
                                          np.asarray(scope.get(v.name)))


def test_fluid_save_and_load_with_a_restricted_unpickler(tmp_path):
    spec, exe, scope = _trained()
    path = str(tmp_path / "model")
    with fluid.scope_guard(scope):
        fluid.save(spec.main, path)
    fresh = fluid.Scope()
    with fluid.scope_guard(fresh):
        fluid.load(spec.main, path, exe)
    for p in spec.main.global_block().all_parameters():
        np.testing.assert_array_equal(fresh.get(p.name), np.asarray(scope.get(p.name)))

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with open(path + ".pdparams", "wb") as f:
        pickle.dump({"fc_0.w_0": Boom()}, f)
    with fluid.scope_guard(fresh), pytest.raises(pickle.UnpicklingError, match="not allowed"):
        fluid.load(spec.main, path, exe)


def test_saved_from_and_loaded_onto_the_device(tmp_path, device_xp):
    # saving copies device values to the host; loading with a CUDAPlace executor puts them
    # back on the device, where the next run needs them (a host array there is refused)
    spec = mlp(hidden=(8,), n_features=5, n_classes=3, opt=fluid.optimizer.Momentum(0.1, 0.9))
    exe, scope = fluid.Executor(fluid.CUDAPlace(0)), fluid.Scope()
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((4, 5)).astype(np.float32), "y": rng.integers(0, 3, (4, 1))}
    with fluid.scope_guard(scope):
        exe.run(spec.startup)
        exe.run(spec.main, feed=feed)
        fluid.io.save_persistables(exe, str(tmp_path / "vars"), spec.main)
        fluid.save(spec.main, str(tmp_path / "model"))
        fluid.io.save_inference_model(str(tmp_path / "infer"), ["x"], [spec.logits], exe,
                                      spec.main)
        expected = exe.run(spec.main, feed=feed, fetch_list=[spec.loss])[0]
    for load in (lambda: fluid.io.load_persistables(exe, str(tmp_path / "vars"), spec.main),
                 lambda: fluid.load(spec.main, str(tmp_path / "model"), exe)):
        fresh = fluid.Scope()
        with fluid.scope_guard(fresh):
            load()
            assert all(isinstance(fresh.get(p.name), device_xp.ndarray)
                       for p in spec.main.all_parameters())
            np.testing.assert_allclose(exe.run(spec.main, feed=feed, fetch_list=[spec.loss])[0],
                                       expected, rtol=1e-6)
    with fluid.scope_guard(fluid.Scope()):
        program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path / "infer"), exe)
        assert exe.run(program, feed={"x": feed["x"]}, fetch_list=fetches)[0].shape == (4, 3)
