"""``CUDAPinnedPlace`` and ``cuda_pinned_places`` (Fluid 1.8): tensors staged in page-locked host
memory feed a program on ``CUDAPlace`` as any host array does; no kernel runs there; without
CuPy and a GPU they are clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.compiler import _cuda_device_count


def test_the_place_itself():
    assert repr(fluid.CUDAPinnedPlace()) == "CUDAPinnedPlace"
    assert fluid.CUDAPinnedPlace() == fluid.CUDAPinnedPlace() != fluid.CPUPlace()
    with pytest.raises(TypeError, match="no kernel runs in pinned host memory"):
        fluid.Executor(fluid.CUDAPinnedPlace())
    with pytest.raises(TypeError, match="CPUPlace, CUDAPlace or CUDAPinnedPlace"):
        fluid.LoDTensor().set(np.zeros(2), "cpu")


@pytest.mark.skipif(_cuda_device_count() > 0, reason="this machine has a GPU")
def test_without_a_gpu_it_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDAPinnedPlace needs CuPy and a CUDA GPU"):
        fluid.LoDTensor().set(np.zeros(2, np.float32), fluid.CUDAPinnedPlace())
    with pytest.raises(RuntimeError, match="cuda_pinned_places: CuPy finds no CUDA GPU"):
        fluid.cuda_pinned_places()


def test_a_pinned_tensor_feeds_a_device_program(device_xp, monkeypatch):
    monkeypatch.delenv("FLAGS_selected_gpus", raising=False)
    places = fluid.cuda_pinned_places()
    assert places == [fluid.CUDAPinnedPlace()] * len(fluid.cuda_places())
    assert fluid.cuda_pinned_places(3) == [fluid.CUDAPinnedPlace()] * 3
    x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    staged = fluid.LoDTensor()
    staged.set(x, places[0])
    held = np.array(staged)
    assert isinstance(staged._require(), np.ndarray)  # host memory, not a device array
    np.testing.assert_array_equal(held, x)
    losses = {}
    for place, feed in ((fluid.CPUPlace(), x), (fluid.CUDAPlace(0), staged)):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 3
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            loss = layers.mean(layers.fc(layers.data("x", [4]), 2))
            fluid.optimizer.SGD(0.1).minimize(loss)
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(startup, scope=scope)
        losses[type(place).__name__] = [
            float(np.array(exe.run(main, feed={"x": feed}, fetch_list=[loss],
                                   scope=scope)[0]).reshape(-1)[0])
            for _ in range(3)]
    np.testing.assert_allclose(losses["CUDAPlace"], losses["CPUPlace"], rtol=1e-5)
