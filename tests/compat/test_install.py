"""dask_fluid.compat.install(): ``paddle`` / ``paddle.fluid`` resolve to dask_fluid, and only then.

Also the Fluid 1.8 names that are importable but not implemented (the collective fleet, the
profiler), paddle.fluid.dygraph, paddle.fluid.core, paddle.compat, the role makers, and Paddle
1.8's own test_dist_base.py / dist_word2vec.py importing under the compat layer.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dask_fluid
from dask_fluid import compat

UNITTESTS = pathlib.Path("/work/shared/reference/paddle-1.8/unittests")


def _real_paddle_exists() -> bool:
    compat.uninstall()
    return importlib.util.find_spec("paddle") is not None


@pytest.fixture
def paddle():
    compat.install()
    try:
        yield importlib.import_module("paddle")
    finally:
        compat.uninstall()


# -- resolution ----------------------------------------------------------------------------


def test_fluid_names_are_dask_fluid_objects(paddle):
    import paddle.fluid as fluid
    from paddle.fluid import compiler, framework, initializer, layers, optimizer, transpiler

    assert paddle.fluid is fluid
    assert layers is dask_fluid.layers and fluid.layers.fc is dask_fluid.layers.fc
    assert fluid.Executor is dask_fluid.Executor
    assert fluid.DistributeTranspiler is dask_fluid.DistributeTranspiler
    assert fluid.DistributeTranspilerConfig is dask_fluid.DistributeTranspilerConfig
    assert fluid.default_main_program is dask_fluid.default_main_program
    assert fluid.default_main_program() is dask_fluid.default_main_program()
    assert compiler is dask_fluid.compiler and fluid.CompiledProgram is compiler.CompiledProgram
    assert fluid.DataFeeder is dask_fluid.DataFeeder
    assert fluid.ExecutionStrategy is dask_fluid.ExecutionStrategy
    assert fluid.BuildStrategy.ReduceStrategy.Reduce == 1
    assert framework is dask_fluid.framework and optimizer is dask_fluid.optimizer
    assert initializer is dask_fluid.initializer
    assert transpiler is importlib.import_module("dask_fluid.transpiler")


def test_submodule_imports_resolve_to_the_same_modules(paddle):
    import paddle.fluid.layers as layers
    from paddle.fluid.transpiler.distribute_transpiler import DistributeTranspilerConfig

    assert layers is dask_fluid.layers
    assert DistributeTranspilerConfig is dask_fluid.DistributeTranspilerConfig
    assert sys.modules["paddle.fluid.layers"] is dask_fluid.layers
    # the module keeps its own spec: reload() and pickling still see dask_fluid names
    assert dask_fluid.layers.__spec__.name == "dask_fluid.layers"


def test_fluid_reader_is_the_py_reader_module(paddle):
    from paddle.fluid.reader import DataLoader, GeneratorLoader, PyReader

    import dask_fluid.py_reader as py_reader
    assert (DataLoader, GeneratorLoader, PyReader) == (
        py_reader.DataLoader, py_reader.GeneratorLoader, py_reader.PyReader)
    fluid = importlib.import_module("paddle.fluid")
    assert fluid.io.DataLoader is DataLoader
    # as attributes too, without importing them first (Fluid's package imports them)
    assert fluid.reader is py_reader
    assert fluid.dataset.DatasetFactory is importlib.import_module(
        "dask_fluid.queue_dataset").DatasetFactory
    # Fluid 1.8's paddle.fluid.lod_tensor module
    lod = importlib.import_module("dask_fluid.lod")
    assert fluid.lod_tensor.create_lod_tensor is lod.create_lod_tensor
    assert importlib.import_module("paddle.fluid.lod_tensor") is lod


def test_layers_rnn_stays_the_function_and_layers_utils_is_fluids(paddle):
    # Fluid 1.8: paddle.fluid.layers.rnn is a module (the cells live there) and
    # fluid.layers.rnn the function; importing the module must not replace the function
    import dask_fluid.layers.rnn_cells as cells
    module = importlib.import_module("paddle.fluid.layers.rnn")
    assert module.LSTMCell is cells.LSTMCell and module.GRUCell is cells.GRUCell
    layers = importlib.import_module("paddle.fluid.layers")
    assert layers.rnn is cells.rnn  # (after the module's import, as in Paddle's test)
    utils = importlib.import_module("paddle.fluid.layers.utils")
    nest = {"b": (1, 2), "a": [3]}
    assert utils.flatten(nest) == [3, 1, 2]
    assert utils.map_structure(lambda v: v * 10, nest) == {"a": [30], "b": (10, 20)}
    utils.assert_same_structure(nest, {"a": [0], "b": (0, 0)})
    with pytest.raises(ValueError, match="same number of elements"):
        utils.assert_same_structure(nest, {"a": [0], "b": (0,)})
    with pytest.raises(TypeError, match="same sequence type"):
        utils.assert_same_structure(nest, {"a": (0,), "b": (0, 0)})


def test_uninstall_removes_finder_and_aliases(paddle):
    import paddle.fluid  # noqa: F401
    import paddle.fluid.core  # noqa: F401

    compat.uninstall()
    assert not compat.is_installed()
    assert not [name for name in sys.modules if name == "paddle" or name.startswith("paddle.")]
    if importlib.util.find_spec("paddle") is None:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("paddle")
    compat.install()  # idempotent round trip
    assert importlib.import_module("paddle.fluid").Executor is dask_fluid.Executor


def test_install_is_idempotent(paddle):
    finder = compat.install()
    assert compat.install() is finder
    assert sum(f is finder for f in sys.meta_path) == 1


def test_nothing_named_paddle_is_installed():
    if _real_paddle_exists():
        pytest.skip("a real paddle is installed in this environment")
    out = subprocess.run([sys.executable, "-c", "import paddle"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert "ModuleNotFoundError: No module named 'paddle'" in out.stderr


def test_missing_fluid_modules_and_names_say_so(paddle):
    import paddle.fluid as fluid

    with pytest.raises(ModuleNotFoundError, match="Paddle 1.8 has no module paddle.fluid.nope"):
        importlib.import_module("paddle.fluid.nope")
    with pytest.raises(ModuleNotFoundError, match="paddle.fluid.distributed is not implemented"):
        importlib.import_module("paddle.fluid.distributed")
    with pytest.raises(ModuleNotFoundError, match="paddle.utils is not part of Fluid 1.8"):
        importlib.import_module("paddle.utils")
    with pytest.raises(AttributeError, match="paddle.fluid.no_such_name is not implemented"):
        fluid.no_such_name  # noqa: B018
    with pytest.raises(ImportError, match="no_such_name"):
        exec("from paddle.fluid import no_such_name", {})
    assert fluid.DatasetFactory is dask_fluid.DatasetFactory
    assert fluid.ParallelExecutor is dask_fluid.ParallelExecutor
    assert fluid.in_dygraph_mode() is False


def test_paddle_helpers_resolve_when_present(paddle):
    for name in ("reader", "batch", "dataset"):
        if importlib.util.find_spec(f"dask_fluid.compat.{name}") is None:
            pytest.skip(f"dask_fluid.compat.{name} is not there yet")
    import paddle.dataset.mnist
    import paddle.reader

    assert paddle.batch is importlib.import_module("dask_fluid.compat.batch").batch
    assert paddle.reader is importlib.import_module("dask_fluid.sample_readers")
    assert paddle.dataset.mnist is importlib.import_module("dask_fluid.compat.dataset.mnist")
    import paddle.batch  # noqa: F811 (binds the module; paddle.batch stays the function)

    assert callable(paddle.batch) and not isinstance(paddle.batch, type(sys))


# -- not implemented, importable -------------------------------------------------------------


def test_dygraph_is_dask_fluids(paddle):
    import paddle.fluid as fluid
    import paddle.fluid.dygraph as dygraph
    from paddle.fluid.dygraph.base import to_variable

    assert dygraph is dask_fluid.dygraph
    assert dygraph.enabled() is False
    with pytest.raises(RuntimeError, match=r"to_variable works in dygraph mode only"):
        to_variable(np.zeros(2))
    with dygraph.guard(fluid.CPUPlace()):
        assert fluid.in_dygraph_mode() and dygraph.enabled()
        x = to_variable(np.arange(3, dtype="float32"))
        np.testing.assert_array_equal((x * 2.0).numpy(), [0.0, 2.0, 4.0])
    assert fluid.in_dygraph_mode() is False


def test_profiler_raises_naming_the_call(paddle):
    import paddle.fluid.profiler as profiler

    for name in ("profiler", "start_profiler", "stop_profiler", "reset_profiler",
                 "cuda_profiler"):
        with pytest.raises(NotImplementedError, match=rf"fluid\.profiler\.{name} is not"):
            getattr(profiler, name)("CPU")


def test_collective_fleet_is_fluids(paddle):
    from paddle.fluid.incubate.fleet.base.fleet_base import Fleet
    from paddle.fluid.incubate.fleet.collective import DistributedStrategy, fleet

    strategy = DistributedStrategy()
    assert strategy.mode == "nccl2" and strategy.nccl_comm_num == 1
    assert strategy.reduce_strategy == strategy.ReduceStrategy.AllReduce
    assert isinstance(fleet, Fleet) and fleet.main_program is None
    with pytest.raises(ValueError, match=r"fleet\.init"):
        fleet.worker_index()


# -- paddle.fluid.core -----------------------------------------------------------------------


def test_core_cuda_and_places(paddle):
    from paddle.fluid import core

    try:
        import cupy

        gpus = int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        gpus = 0
    assert core.is_compiled_with_cuda() is (gpus > 0)
    assert core.get_cuda_device_count() == gpus
    assert core.CPUPlace is dask_fluid.CPUPlace and core.Scope is dask_fluid.Scope
    with pytest.raises(AttributeError, match=r"paddle\.fluid\.core\.OpDesc is not implemented"):
        core.OpDesc  # noqa: B018


def test_core_vardesc_vartype_reads_as_in_fluid(paddle):
    # scripts compare and pass dtypes as core.VarDesc.VarType members, and convert numpy
    # dtypes with framework.convert_np_dtype_to_dtype_
    from paddle.fluid import core
    from paddle.fluid.framework import convert_np_dtype_to_dtype_

    VarType = core.VarDesc.VarType
    with paddle.fluid.program_guard(paddle.fluid.Program(), paddle.fluid.Program()):
        x = paddle.fluid.layers.data("x", shape=[3], dtype="float32")
        y = paddle.fluid.layers.cast(x, VarType.INT64)
        assert x.dtype == VarType.FP32 and y.dtype == VarType.INT64 == "int64"
        assert x.type == VarType.LOD_TENSOR
        assert paddle.fluid.layers.fill_constant([2], VarType.FP64, 1.0).dtype == "float64"
    assert convert_np_dtype_to_dtype_(np.float16) == VarType.FP16
    # int() gives Fluid's enum code, which op attrs carry (reduce's out_dtype, cast's ...)
    assert int(VarType.FP32) == 5 and int(convert_np_dtype_to_dtype_(np.int64)) == 3
    assert int(VarType.LOD_TENSOR) == 7 and int(VarType.UINT8) == 20
    import pickle

    assert int(pickle.loads(pickle.dumps(VarType.FP64))) == 6
    assert convert_np_dtype_to_dtype_(np.dtype("int32")) == VarType.INT32
    with pytest.raises(TypeError, match="not supported"):
        convert_np_dtype_to_dtype_(np.complex64)


def test_core_lod_tensor_is_dask_fluids(paddle):
    from paddle.fluid import core

    t = core.LoDTensor()
    with pytest.raises(ValueError, match="holds no data"):
        t.shape()
    t.set(np.arange(6, dtype="int64").reshape(2, 3), core.CPUPlace())
    assert t.shape() == [2, 3]
    np.testing.assert_array_equal(np.array(t), [[0, 1, 2], [3, 4, 5]])
    assert np.array(t).dtype == np.int64
    assert t.lod() == [] and t.recursive_sequence_lengths() == []
    t.set_lod([[0, 1, 2]])  # tests/core/test_lod.py covers LoD itself
    assert t.recursive_sequence_lengths() == [[1, 1]]
    assert paddle.fluid.LoDTensor is core.LoDTensor is dask_fluid.LoDTensor


# -- paddle.compat ---------------------------------------------------------------------------


def test_paddle_compat_helpers(paddle):
    import paddle.compat as cpt

    assert cpt.to_text(b"abc") == "abc" and cpt.to_text("abc") == "abc"
    assert cpt.to_text(None) is None and cpt.to_text(3) == 3
    assert cpt.to_text([b"a", "b"]) == ["a", "b"]
    assert cpt.to_text({b"a", b"b"}) == {"a", "b"}
    assert cpt.to_text({b"k": b"v"}) == {"k": "v"}
    items = [b"x"]
    assert cpt.to_text(items, inplace=True) is items and items == ["x"]
    assert cpt.to_bytes("é") == "é".encode() and cpt.to_bytes(["a"]) == [b"a"]
    # half away from zero, as Python 2 rounded (Python 3's round(2.5) is 2)
    assert cpt.round(2.5) == 3.0 and cpt.round(-2.5) == -3.0 and cpt.round(1.25, 1) == 1.3
    assert cpt.round(0.0) == 0.0 and cpt.floor_division(7, 2) == 3
    assert cpt.get_exception_message(ValueError("boom")) == "boom"
    assert cpt.long_type is int and cpt.int_type is int


# -- role makers -----------------------------------------------------------------------------


def test_paddle_cloud_role_maker_pserver_mode(paddle, monkeypatch):
    import paddle.fluid.incubate.fleet.base.role_maker as role_maker

    monkeypatch.setenv("PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:6170,127.0.0.1:6171")
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    monkeypatch.setenv("TRAINING_ROLE", "PSERVER")
    monkeypatch.setenv("POD_IP", "127.0.0.1")
    monkeypatch.setenv("PADDLE_PORT", "6171")
    role = role_maker.PaddleCloudRoleMaker()
    assert role.is_server() and not role.is_worker()
    assert role.server_index() == 1 and role.worker_num() == 2
    assert role.get_pserver_endpoints() == ["127.0.0.1:6170", "127.0.0.1:6171"]

    monkeypatch.setenv("TRAINING_ROLE", "TRAINER")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    role = role_maker.PaddleCloudRoleMaker()
    assert role.is_worker() and role.worker_index() == 1 and not role.is_first_worker()
    with pytest.raises(NotImplementedError, match="barrier_worker"):
        role.barrier_worker()

    monkeypatch.delenv("PADDLE_TRAINERS_NUM")
    with pytest.raises(ValueError, match="PADDLE_TRAINERS_NUM is not set"):
        role_maker.PaddleCloudRoleMaker().is_worker()


def test_paddle_cloud_role_maker_collective_and_user_defined(paddle, monkeypatch):
    import paddle.fluid.incubate.fleet.base.role_maker as role_maker

    monkeypatch.setenv("PADDLE_TRAINER_ID", "0")
    monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,127.0.0.1:6171")
    monkeypatch.setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:6170")
    role = role_maker.PaddleCloudRoleMaker(is_collective=True)
    assert role.is_first_worker() and role.worker_num() == 2
    assert role.get_local_endpoint() == "127.0.0.1:6170"

    user = role_maker.UserDefinedRoleMaker(current_id=0, role=role_maker.Role.SERVER,
                                           worker_num=2, server_endpoints=["127.0.0.1:6170"])
    assert user.is_server() and user.server_index() == 0 and user.worker_num() == 2
    with pytest.raises(ValueError, match="current_id must be less"):
        role_maker.UserDefinedRoleMaker(current_id=1, role=role_maker.Role.SERVER,
                                        worker_num=2, server_endpoints=["127.0.0.1:6170"])
    coll = role_maker.UserDefinedCollectiveRoleMaker(1, ["a:1", "b:2"])
    assert coll.worker_index() == 1 and coll.worker_num() == 2
    with pytest.raises(NotImplementedError, match="MPISymetricRoleMaker"):
        role_maker.MPISymetricRoleMaker()


# -- Paddle 1.8's own files ------------------------------------------------------------------


@pytest.mark.skipif(not UNITTESTS.is_dir(), reason=f"{UNITTESTS} (Paddle 1.8's unittests) is "
                                                   "not in this checkout")
def test_paddle_18_test_dist_base_and_dist_word2vec_import():
    pytest.importorskip("six", reason="test_dist_base.py imports six")
    # a fresh interpreter: dist_word2vec.py sets the default programs' random seeds at import
    code = textwrap.dedent(f"""
        import sys
        from dask_fluid import compat
        compat.install()
        sys.path.insert(0, {str(UNITTESTS)!r})
        import test_dist_base, dist_word2vec
        import dask_fluid
        assert test_dist_base.fluid.DistributeTranspiler is dask_fluid.DistributeTranspiler
        assert test_dist_base.compiler is dask_fluid.compiler
        assert issubclass(dist_word2vec.TestDistWord2vec2x2, test_dist_base.TestDistRunnerBase)
        assert dask_fluid.default_startup_program().random_seed == 1
        print("imported")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=UNITTESTS)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "imported"


# -- Fluid 1.8's small top-level names -------------------------------------------------------


def test_version_and_require_version(paddle):
    import paddle.fluid as fluid

    assert paddle.__version__ == compat.FLUID_VERSION == "1.8.5"
    fluid.require_version("1.6")
    fluid.require_version("1.8.0", "1.8.5")
    fluid.require_version("1.8.5.0", max_version="2")
    with pytest.raises(Exception, match="VersionError: PaddlePaddle version 2.0 or higher is "
                                        "required, but 1.8.5 installed"):
        fluid.require_version("2.0")
    with pytest.raises(Exception, match=r"VersionError: .*in \[1.5, 1.8.4\] required"):
        fluid.require_version("1.5", "1.8.4")
    with pytest.raises(ValueError, match="must be in format"):
        fluid.require_version("1.x")
    with pytest.raises(TypeError, match="'max_version' in require_version must be str"):
        fluid.require_version("1.0", 2)


def test_small_names_tensor_cuda_op_library_dataset_module(paddle):
    import paddle.fluid as fluid
    import paddle.fluid.dataset as fluid_dataset

    assert fluid.Tensor is dask_fluid.LoDTensor
    assert fluid.is_compiled_with_cuda() == fluid.core.is_compiled_with_cuda()
    with pytest.raises(NotImplementedError, match="custom C\\+\\+ operators cannot be loaded"):
        fluid.load_op_library("my_ops.so")
    assert fluid_dataset.DatasetFactory is dask_fluid.DatasetFactory
    assert fluid_dataset.InMemoryDataset is fluid.DatasetFactory().create_dataset(
        "InMemoryDataset").__class__


def test_install_check_trains_and_says_so(paddle, capsys):
    import paddle.fluid as fluid

    fluid.install_check.run_check()
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Running Verify Fluid Program ... "
    assert "Your Paddle Fluid is installed successfully!" in out
