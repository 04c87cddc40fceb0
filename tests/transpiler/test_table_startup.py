"""The distributed table's shards start as the id % P rows of the local table."""

import numpy as np

import dask_fluid as fluid

from .models import PSERVERS, table_net, transpile


def test_table_shards_are_modulo_rows_of_local_init():
    main, startup = table_net()
    local = fluid.Scope()
    fluid.Executor().run(startup.clone(), scope=local)
    full = local.get("shared_w")
    t = transpile(main, startup)
    eps = PSERVERS.split(",")
    for k, ep in enumerate(eps):
        prog = t.get_pserver_program(ep)
        scope = fluid.Scope()
        fluid.Executor().run(t.get_startup_program(ep, prog), scope=scope)
        shard = scope.get("shared_w")
        rows = full[k::len(eps)]
        np.testing.assert_array_equal(shard[:len(rows)], rows)
        assert shard.shape[0] == -(-full.shape[0] // len(eps))
