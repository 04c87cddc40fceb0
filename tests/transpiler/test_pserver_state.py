"""Full values of the original program cut into what each pserver holds, and put back
(``train_pserver(initial_values=...)`` and its result): the cut of the local startup's values
is exactly what each pserver's own startup program makes, and putting the cuts together gives
the full values back."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.distributed.program_values import persistable_names
from dask_fluid.framework import VarType
from dask_fluid.transpiler import HashName
from dask_fluid.transpiler.plan import TRAINER_ID_VAR
from dask_fluid.transpiler.pserver_state import assemble, cut, pserver_pieces

from .models import config, reference_mlp, table_net, transpile

THREE = "127.0.0.1:6170,127.0.0.1:6171,127.0.0.1:6172"


def _adam():
    return fluid.optimizer.Adam(0.01)


CASES = {
    # fc_0.w_0 sliced over both pservers: Adam's moments sliced with it, its beta powers whole
    "adam, round robin": (lambda: reference_mlp(optimizer=_adam)[:2], config(), True, None),
    # three blocks of fc_1.w_0 hashed onto three pservers: two of them land on one pserver,
    # whose accumulators get a .block{k} suffix
    "adam, hash name": (lambda: reference_mlp(optimizer=_adam)[:2],
                        config(split_method=HashName), True, THREE),
    "distributed table": (table_net, config(), True, None),
    # each trainer's backup of each parameter block starts as the block
    "dc-asgd": (lambda: reference_mlp()[:2], config(enable_dc_asgd=True), False, None),
}


def _values(startup) -> dict[str, np.ndarray]:
    scope = fluid.Scope()
    fluid.Executor().run(startup, scope=scope)
    return {n: np.asarray(v) for n, v in scope.vars.items() if isinstance(v, np.ndarray)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cut_of_the_local_start_is_each_pservers_start(case):
    build, cfg, sync, pservers = CASES[case]
    main, startup = build()
    local = _values(startup.clone())
    t = transpile(main, startup, cfg, sync_mode=sync,
                  **({} if pservers is None else {"pservers": pservers}))
    origin = t.plan.origin
    full = {n: local[n] for n in persistable_names(origin)}
    pieces, states = {}, {}
    for ep in t.plan.endpoints:
        prog = t.get_pserver_program(ep)
        pieces[ep] = pserver_pieces(t, ep)
        # every variable the pserver keeps comes from the original program; gradients do not
        kept = {n for n, v in prog.global_block().vars.items()
                if v.persistable and v.type != VarType.RAW and "@GRAD" not in n
                and n != TRAINER_ID_VAR}
        assert set(pieces[ep]) == kept, ep
        states[ep] = cut(pieces[ep], full)
        started = _values(t.get_startup_program(ep, prog))
        assert set(states[ep]) == kept
        for name, value in states[ep].items():
            np.testing.assert_array_equal(value, started[name], err_msg=f"{ep} {name}")
    back = assemble(pieces, states)
    held = {p.origin for on_ep in pieces.values() for p in on_ep.values()}
    assert set(back) == held
    for name in held:
        np.testing.assert_array_equal(back[name], full[name], err_msg=name)
    if case == "adam, hash name":
        assert any(n.endswith(".block1") and "moment" in n for on_ep in pieces.values()
                   for n in on_ep), "no pserver got two blocks of one parameter"
    if case == "dc-asgd":
        assert sum(p.kind == "backup" for on_ep in pieces.values()
                   for p in on_ep.values()) == 2 * sum(len(pp.blocks) for pp in t.plan.params)


def test_put_together_from_changed_blocks():
    # values that differ block by block (a trained state) come back in their places
    main, startup = reference_mlp(optimizer=_adam)[:2]
    t = transpile(main, startup)
    rng = np.random.default_rng(0)
    block = t.plan.origin.global_block()
    full = {n: rng.normal(size=block.var(n).shape).astype(np.float32)
            for n in persistable_names(t.plan.origin)}
    pieces = {ep: pserver_pieces(t, ep) for ep in t.plan.endpoints}
    states = {ep: cut(pieces[ep], full) for ep in pieces}
    sliced = [n for n, p in pieces[t.plan.endpoints[0]].items() if p.kind == "rows"]
    assert "fc_0.w_0_moment1_0" in {pieces[t.plan.endpoints[0]][n].origin for n in sliced}
    back = assemble(pieces, states)
    for name, value in full.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)
