"""fluid.io's distributed save and load (Fluid 1.8's _save/_load_distributed_persistables):
a transpiled trainer saves whole parameters, each pserver loads the blocks it holds."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid

EPS = "127.0.0.1:6170,127.0.0.1:6171"


def _transpiled(optimizer):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 5
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[300])
        y = fluid.layers.data(name="y", shape=[1])
        h = fluid.layers.fc(x, 100, param_attr=fluid.ParamAttr(name="big_w"))  # 30000: sliced
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        optimizer().minimize(loss)
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, pservers=EPS, trainers=2, startup_program=startup)
    return t, t.get_trainer_program(wait_port=False), startup


def test_each_pserver_loads_its_blocks_from_the_trainers_files(tmp_path):
    t, trainer, startup = _transpiled(lambda: fluid.optimizer.SGD(0.1))
    saved = fluid.Scope()
    with fluid.scope_guard(saved):
        # the trainer's parameters as its startup would have received them
        for p in trainer.all_parameters():
            saved.set(p.name, np.random.default_rng(len(p.name)).standard_normal(
                p.shape).astype(np.float32))
        fluid.io.save_persistables(None, str(tmp_path), trainer)
    whole = np.array(saved.vars["big_w"])
    assert (tmp_path / "big_w").exists() and not list(tmp_path.glob("*.block*"))
    rows = 0
    for ep in EPS.split(","):
        pserver = t.get_pserver_program(ep)
        scope = fluid.Scope()
        with fluid.scope_guard(scope):
            fluid.io.load_persistables(None, str(tmp_path), pserver)
        blocks = [v for v in pserver._parameters_on_pservers.get_distributed_vars_by_ep(ep)
                  if v.origin.name == "big_w"]
        assert len(blocks) == 1 and blocks[0].is_slice
        got = np.array(scope.vars[blocks[0].slice.name])
        start = blocks[0].offset // 100
        np.testing.assert_array_equal(got, whole[start:start + got.shape[0]])
        rows += got.shape[0]
    assert rows == 300  # the two blocks make the parameter


def test_optimizer_state_is_listed_and_loaded_block_by_block(tmp_path):
    # Fluid's overview lists each pserver's optimizer state ("Optimizer"): a cut moment has
    # the parameter block's rows and offset, a beta power is whole on every pserver
    t, trainer, _ = _transpiled(lambda: fluid.optimizer.Adam(0.01))
    overview = trainer._parameters_on_pservers
    state = overview.get_distributed_vars_by_vtypes(["Optimizer"], groupby=True)
    moment = next(n for n in state if n.startswith("big_w_moment1"))
    parts = sorted(state[moment], key=lambda v: v.block_id)
    assert [p.is_slice for p in parts] == [True, True]
    assert sum(p.slice.shape[0] for p in parts) == 300 and parts[1].offset == \
        parts[0].slice.shape[0] * 100
    beta = next(n for n in state if n.startswith("big_w_beta1_pow"))
    assert all(not p.is_slice and p.slice.shape == (1,) for p in state[beta])
    # what the chief writes (whole variables) each pserver loads as its blocks
    rng = np.random.default_rng(0)
    whole = {v.name: rng.standard_normal(v.shape).astype(np.float32)
             for v in trainer.list_vars() if v.persistable and v.shape and -1 not in v.shape}
    for name, parts_ in state.items():
        whole[name] = rng.standard_normal(parts_[0].origin.shape).astype(np.float32)
    for name, value in whole.items():
        with open(tmp_path / name, "wb") as f:
            fluid.io.write_tensor(f, value)
    ep = EPS.split(",")[1]
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        fluid.io.load_persistables(None, str(tmp_path), t.get_pserver_program(ep))
    mine = next(p for p in state[moment] if p.endpoint == ep)
    start = mine.offset // 100
    np.testing.assert_array_equal(scope.vars[mine.slice.name],
                                  whole[moment][start:start + mine.slice.shape[0]])
    np.testing.assert_array_equal(scope.vars[beta], whole[beta])


def test_a_missing_parameter_file_names_the_block(tmp_path):
    t, _, _ = _transpiled(lambda: fluid.optimizer.SGD(0.1))
    pserver = t.get_pserver_program(EPS.split(",")[0])
    with pytest.raises(FileNotFoundError, match=r"no saved value of variable 'big_w' .*holds "
                                                r"its block 'big_w\.block0'"):
        fluid.io.load_persistables(None, str(tmp_path), pserver)
