"""fluid.transpiler.GeoSgdTranspiler: the DistributeTranspiler's GEO-SGD programs under Fluid
1.8's name, with the config GEO-SGD needs."""

from __future__ import annotations

import pytest

import dask_fluid as fluid
from dask_fluid.transpiler import GeoSgdTranspiler

from .models import PSERVERS, config, fluid_test_net, op_types, transpile


def _programs(t, eps):
    return ([op_types(b) for b in t.get_trainer_program().blocks],
            [[op_types(b) for b in t.get_pserver_program(ep).blocks] for ep in eps],
            [op.attrs for op in t.get_trainer_program().global_block().ops if op.type == "send"])


def test_the_programs_are_the_geo_programs_of_the_distribute_transpiler():
    cfg = config(geo_sgd_need_push_nums=5)
    main, startup = fluid_test_net()
    geo = GeoSgdTranspiler(cfg)
    geo.transpile(0, program=main, pservers=PSERVERS, trainers=2, startup_program=startup)
    main2, startup2 = fluid_test_net()
    ref = transpile(main2, startup2, config(
        sync_mode=False, runtime_split_send_recv=True, geo_sgd_mode=True,
        geo_sgd_need_push_nums=5), sync_mode=False)
    eps = PSERVERS.split(",")
    assert _programs(geo, eps) == _programs(ref, eps)
    # the trainer keeps its optimizer (GEO-SGD trains locally)
    assert "sgd" in op_types(geo.get_trainer_program().global_block())
    # the caller's config is left as it was
    assert cfg.sync_mode is True and cfg.geo_sgd_mode is False
    assert isinstance(fluid.transpiler.GeoSgdTranspiler(), fluid.DistributeTranspiler)


def test_geo_sgd_is_asynchronous_and_checks_its_config():
    main, startup = fluid_test_net()
    with pytest.raises(ValueError, match="GEO-SGD is asynchronous"):
        GeoSgdTranspiler().transpile(0, program=main, pservers=PSERVERS, trainers=2,
                                     sync_mode=True, startup_program=startup)
    with pytest.raises(TypeError, match="config must be a DistributeTranspilerConfig"):
        GeoSgdTranspiler(config={"geo_sgd_mode": True})
