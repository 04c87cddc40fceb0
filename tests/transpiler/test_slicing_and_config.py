"""Slicing (§2), dispatchers (§3), the config and every argument check of transpile()."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.transpiler import (
    DistributeTranspiler,
    DistributeTranspilerConfig,
    HashName,
    PSDispatcher,
    RoundRobin,
    VarBlock,
    parse_endpoints,
    slice_variable,
)

from .models import PSERVERS, config, fluid_test_net, transpile


def shapes(var_shape, eps, min_block=8192):
    return [b.shape for b in slice_variable([("v", var_shape)], eps, min_block)]


# -- §2 worked examples ------------------------------------------------------------------------
@pytest.mark.parametrize("shape,eps,min_block,expected", [
    ((1000, 1000), 2, 8192, [(500, 1000)] * 2),
    ((1000,), 2, 8192, [(1000,)]),
    ((1000, 1000), 2, 1048576, [(1000, 1000)]),
    ((1000, 64), 2, 8192, [(500, 64)] * 2),
    ((37, 1000), 4, 8192, [(10, 1000)] * 3 + [(7, 1000)]),
    ((1003, 17), 3, 8192, [(502, 17), (501, 17)]),
    ((5, 4000), 4, 8192, [(3, 4000), (2, 4000)]),
    ((100000,), 3, 8192, [(33334,), (33334,), (33332,)]),
])
def test_worked_examples(shape, eps, min_block, expected):
    assert shapes(shape, eps, min_block) == expected


def _restated_rule(shape, eps, min_block):
    """§2 in plain words: at most `eps` blocks of at least `min_block` elements, whole rows."""
    numel = int(np.prod(shape))
    count = max(1, min(eps, numel // min_block))
    row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    rows_per_block = math.ceil(math.ceil(numel / count) / row)
    total_rows = numel // row
    out, start = [], 0
    while start < total_rows:
        n = min(rows_per_block, total_rows - start)
        out.append((n,) + tuple(shape[1:]))
        start += n
    return out


def test_random_shapes_follow_the_rule():
    rng = np.random.default_rng(2024)
    for _ in range(20):
        rank = int(rng.integers(1, 4))
        shape = tuple(int(d) for d in rng.integers(1, 400, size=rank))
        eps = int(rng.integers(1, 6))
        got = slice_variable([("v", shape)], eps, 8192)
        assert [b.shape for b in got] == _restated_rule(shape, eps, 8192), shape
        assert sum(b.size for b in got) == math.prod(shape)
        offsets = [b.offset for b in got]
        assert offsets == [sum(b.size for b in got[:i]) for i in range(len(got))]


def test_var_block_geometry():
    b0, b1 = slice_variable([("w", (1000, 64))], 2, 8192)
    assert b1 == VarBlock("w", 1, 32000, 32000, (500, 64), (1000, 64))
    assert (b1.row_offset, b1.rows, b1.width, b1.is_whole) == (500, 500, 64, False)
    assert slice_variable([("b", (10,))], 2, 8192)[0].is_whole


# -- §3 dispatchers ----------------------------------------------------------------------------
def test_round_robin_carries_over_between_calls():
    rr = RoundRobin(["a", "b"])
    assert rr.dispatch(["fc_b"]) + rr.dispatch(["w.block0", "w.block1"]) == ["a", "b", "a"]
    rr.reset()
    assert rr.dispatch(["x"]) == ["a"]


def test_hash_name_is_crc32_of_the_name():
    eps = ["a", "b", "c"]
    names = ["fc_0.w_0.block0", "fc_0.b_0", "x"]
    assert HashName(eps).dispatch(names) == [eps[zlib.crc32(n.encode()) % 3] for n in names]


def test_hash_name_keeps_grads_with_their_params():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(split_method=HashName))
    for pp in t.plan.params:
        assert pp.endpoints == HashName(t.pserver_endpoints).dispatch(pp.param_block_names)
    send = [op for op in main.global_block().ops if op.type == "send"]
    assert {tuple(op.attrs["epmap"]) for op in send} == {
        tuple(eps) for eps in t.param_endpoints.values()}


# -- config ------------------------------------------------------------------------------------
def test_config_defaults():
    cfg = DistributeTranspilerConfig()
    assert (cfg.slice_var_up, cfg.split_method, cfg.min_block_size, cfg.enable_dc_asgd,
            cfg.mode, cfg.print_log, cfg.sync_mode, cfg.wait_port) == (
        True, RoundRobin, 8192, False, "pserver", False, True, True)  # Fluid 1.8: sync_mode True


@pytest.mark.parametrize("field,value,match", [
    ("slice_var_up", 1, r"slice_var_up = 1 .*bool"),
    ("print_log", "yes", r"print_log = 'yes' .*bool"),
    ("enable_dc_asgd", None, r"enable_dc_asgd = None .*bool"),
    ("wait_port", 0, r"wait_port = 0 .*bool"),
    ("sync_mode", "true", r"sync_mode = 'true' .*bool"),
    ("min_block_size", 8191, r"min_block_size = 8191 .*int >= 8192"),
    ("min_block_size", 9000.0, r"min_block_size = 9000.0 .*int >= 8192"),
    ("mode", "ring", r"mode = 'ring' .*\('pserver', 'nccl2', 'collective'\)"),
    ("collective_mode", "dist_fc", r"collective_mode = 'dist_fc' .*'grad_allreduce'"),
    ("split_method", RoundRobin(["a"]), r"split_method = .*RoundRobin or HashName"),
    ("split_method", PSDispatcher, r"split_method = .*class RoundRobin or HashName"),
    ("split_method", str, r"split_method = .*PSDispatcher subclass"),
    ("nccl_comm_num", 0, r"nccl_comm_num = 0 .*int >= 1"),
])
def test_config_rejects_bad_values_at_assignment(field, value, match):
    cfg = DistributeTranspilerConfig()
    with pytest.raises(ValueError, match=match):
        setattr(cfg, field, value)


def test_config_rejects_unknown_field():
    with pytest.raises(AttributeError, match="no field 'slice_var'"):
        DistributeTranspilerConfig().slice_var = True


def test_config_is_checked_again_at_transpile():
    cfg = DistributeTranspilerConfig()
    cfg.__dict__["min_block_size"] = 10
    main, startup = fluid_test_net()
    with pytest.raises(ValueError, match="min_block_size = 10"):
        transpile(main, startup, cfg)


def test_split_method_none_means_round_robin():
    cfg = DistributeTranspilerConfig()
    cfg.split_method = None
    assert cfg.split_method is RoundRobin


def test_config_sync_mode_overrides_the_argument():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(sync_mode=False), sync_mode=True)
    assert t.sync_mode is False
    assert "send_barrier" not in [op.type for op in main.global_block().ops]


def test_constructor_rejects_non_config():
    with pytest.raises(TypeError, match="DistributeTranspilerConfig"):
        DistributeTranspiler({"slice_var_up": True})


# -- endpoints and arguments -------------------------------------------------------------------
def test_endpoints_accept_dask_addresses():
    assert parse_endpoints(" tcp://127.0.0.1:40123, 10.0.0.2:7000", "pservers") == [
        "tcp://127.0.0.1:40123", "10.0.0.2:7000"]


@pytest.mark.parametrize("pservers,match", [
    ("", "pservers is empty"),
    ("127.0.0.1:6174,127.0.0.1:6174", "listed twice"),
    ("127.0.0.1", "not a valid endpoint"),
    ("127.0.0.1:0", "not a valid endpoint"),
    ("127.0.0.1:70000", "port in 1..65535"),
    ("127.0.0.1:61 74", "not a valid endpoint"),
    ("a:1,,b:2", "'' is not a valid endpoint"),
])
def test_bad_pservers(pservers, match):
    main, startup = fluid_test_net()
    with pytest.raises(ValueError, match=match):
        transpile(main, startup, pservers=pservers)


@pytest.mark.parametrize("trainer_id,trainers,exc,match", [
    (2, 2, ValueError, r"trainer_id 2 is out of range: 2 trainers, so it must be in \[0, 1\]"),
    (-1, 2, ValueError, "trainer_id -1 is out of range"),
    (0, 0, ValueError, "trainers must be >= 1"),
    (0, "127.0.0.1:1,127.0.0.1:2", TypeError, "trainer endpoints are for mode='nccl2'"),
    ("0", 2, TypeError, "trainer_id must be an int"),
])
def test_bad_trainers(trainer_id, trainers, exc, match):
    main, startup = fluid_test_net()
    with pytest.raises(exc, match=match):
        transpile(main, startup, trainer_id=trainer_id, trainers=trainers)


def test_program_without_optimize_ops():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        fluid.layers.mean(fluid.layers.fc(fluid.layers.data("x", [4]), 2))
    with pytest.raises(ValueError, match=r"no optimize ops: call optimizer.minimize\(loss\)"):
        transpile(main, startup)


def test_unsupported_optimizer():
    main, startup = fluid_test_net()
    for op in main.global_block().ops:
        if op.type == "sgd":
            op.type = "lamb"
    with pytest.raises(ValueError, match="Not supported optimizer for distributed training: "
                                         "'lamb'; supported: sgd, adam"):
        transpile(main, startup)


def test_dc_asgd_needs_async():
    main, startup = fluid_test_net()
    with pytest.raises(ValueError, match="enable_dc_asgd needs asynchronous training"):
        transpile(main, startup, config(enable_dc_asgd=True), sync_mode=True)


def test_getters_before_transpile_and_unknown_endpoint():
    t = DistributeTranspiler()
    with pytest.raises(RuntimeError, match=r"call transpile\(\) first"):
        t.get_trainer_program()
    with pytest.raises(RuntimeError, match=r"call transpile\(\) first"):
        t.get_pserver_program("127.0.0.1:6174")
    main, startup = fluid_test_net()
    t = transpile(main, startup)
    with pytest.raises(ValueError, match=r"'1.2.3.4:5' is not a pserver .*known endpoints: "
                                         r"\['127.0.0.1:6174', '127.0.0.1:6175'\]"):
        t.get_pserver_program("1.2.3.4:5")
    with pytest.raises(ValueError, match="is not a pserver"):
        t.get_startup_program("1.2.3.4:5")


def test_rpc_thread_flags(monkeypatch):
    # Fluid 1.8: the transpiler's ServerRuntimeConfig reads the flags when it is made, and
    # listen_and_serv carries them
    main, startup = fluid_test_net()
    monkeypatch.setenv("FLAGS_rpc_get_thread_num", "3")
    t = transpile(main, startup)
    serv = t.get_pserver_program(PSERVERS.split(",")[0]).global_block().ops[-1]
    assert (serv.attrs["rpc_get_thread_num"], serv.attrs["rpc_send_thread_num"]) == (3, 12)
    monkeypatch.setenv("FLAGS_rpc_send_thread_num", "many")
    with pytest.raises(ValueError, match="FLAGS_rpc_send_thread_num = 'many' is not allowed"):
        fluid.DistributeTranspiler()


def test_a_server_runtime_config_sets_the_pserver_threads():
    from dask_fluid.transpiler.distribute_transpiler import ServerRuntimeConfig

    main, startup = fluid_test_net()
    config = ServerRuntimeConfig()
    config._rpc_send_thread_num, config._rpc_prefetch_thread_num = 5, 2
    t = fluid.DistributeTranspiler()
    t._set_server_config(config)
    t.transpile(0, program=main, startup_program=startup, pservers=PSERVERS, trainers=2)
    serv = t.get_pserver_program(PSERVERS.split(",")[0]).global_block().ops[-1]
    assert (serv.attrs["rpc_send_thread_num"], serv.attrs["rpc_get_thread_num"],
            serv.attrs["rpc_prefetch_thread_num"]) == (5, 12, 2)
    with pytest.raises(TypeError, match="server_config must be an instance of "
                                        "ServerRuntimeConfig, got dict"):
        t._set_server_config({"_rpc_send_thread_num": 5})
    config._rpc_get_thread_num = 0
    t = fluid.DistributeTranspiler()
    t._set_server_config(config)
    main, startup = fluid_test_net()
    with pytest.raises(ValueError, match="_rpc_get_thread_num must be a positive int, got 0"):
        t.transpile(0, program=main, startup_program=startup, pservers=PSERVERS, trainers=2)
