"""Fetched one-element values convert to Python numbers, as Fluid 1.x scripts expect."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import dygraph
from dask_fluid.fetched import OneValueArray, fetched
from dask_fluid.model_state import _pickle_load


def test_a_fetched_loss_prints_as_fluid_scripts_print_it(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        acc = fluid.layers.reduce_sum(x, dim=1)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    value, rows = exe.run(main, feed={"x": np.ones((4, 3), "float32")}, fetch_list=[loss, acc])
    assert value.shape == (1,) and isinstance(value, np.ndarray)
    assert float(value) == pytest.approx(value[0])
    assert "%.4f" % value == f"{value[0]:.4f}" == f"{value:.4f}"  # noqa: UP031 (as 1.x scripts)
    assert int(fetched(np.array([3]))) == 3
    assert repr(value).startswith("array(")
    assert type(rows) is np.ndarray and rows.shape == (4,)  # only one-element values change
    with pytest.raises(TypeError):
        float(rows)
    # pickled as a plain array: the arrays-only loader of parameter files takes it
    assert type(pickle.loads(pickle.dumps(value))) is np.ndarray
    path = tmp_path / "v.pdparams"
    path.write_bytes(pickle.dumps({"loss": value}, protocol=2))
    assert type(_pickle_load(str(path))["loss"]) is np.ndarray


def test_dygraph_numpy_of_a_loss_converts_too():
    with dygraph.guard(fluid.CPUPlace()):
        loss = fluid.layers.mean(dygraph.to_variable(np.arange(4, dtype="float32")))
        value = loss.numpy()
        assert isinstance(value, OneValueArray) and value.shape == (1,)
        assert "loss at step 0: %f" % value == "loss at step 0: 1.500000"  # noqa: UP031
        assert np.asarray(value * 2).tolist() == [3.0]
