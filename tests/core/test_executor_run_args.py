"""``Executor.run``'s Fluid 1.8 arguments beyond program, feed and fetch_list: positions as in
Fluid, ``use_prune`` (and optimize ops in ``fetch_list``), ``return_merged``, the holder names,
and a program edited in place between runs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.compiler import CompiledProgram


def _net():
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4])
        y = layers.data("y", [1])
        h = layers.fc(x, 6, act="relu")
        pred = layers.fc(h, 1)
        loss = layers.mean(layers.square_error_cost(pred, y))
        side = layers.scale(h, scale=2.0)  # computed every step, fetched by nobody
        opt = fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, x, pred, loss, side, opt


def _feed(i=0, n=8):
    rng = np.random.default_rng(i)
    return {"x": rng.random((n, 4), dtype=np.float32), "y": rng.random((n, 1), dtype=np.float32)}


def _started(startup):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe, scope


def test_arguments_sit_where_fluid_puts_them():
    main, startup, _, _, loss, _, _ = _net()
    exe, scope = _started(startup)
    # Fluid 1.8: run(program, feed, fetch_list, feed_var_name, fetch_var_name, scope, ...)
    (positional,) = exe.run(main, _feed(), [loss], "feed", "fetch", scope, True)
    assert positional.shape == (1,)
    with pytest.raises(TypeError, match="feed_var_name must be a string, got Scope"):
        exe.run(main, _feed(), [loss], scope)  # the 1.x habit of passing the scope 4th


def test_use_prune_runs_only_what_the_fetches_and_updates_need():
    main, startup, _, pred, loss, side, opt = _net()
    exe, scope = _started(startup)
    exe.run(main, feed=_feed(), fetch_list=[loss], scope=scope, use_prune=True)
    ran = [k for k in exe._pruned_programs.values()][0].global_block().ops
    # the optimize ops stay (all of them: none were listed), the unfetched scale goes
    assert "scale" not in [op.type for op in ran]
    assert [op.type for op in ran].count("sgd") == 4
    assert side.name not in scope.vars  # never computed

    # the same training as the whole program
    plain_exe, plain_scope = _started(startup)
    pruned_exe, pruned_scope = _started(startup)
    for i in range(3):
        plain_exe.run(main, feed=_feed(i), fetch_list=[loss], scope=plain_scope)
        pruned_exe.run(main, feed=_feed(i), fetch_list=[loss], scope=pruned_scope,
                       use_prune=True)
    for p in main.all_parameters():
        np.testing.assert_array_equal(np.asarray(pruned_scope.vars[p.name]),
                                      np.asarray(plain_scope.vars[p.name]))
    assert len(pruned_exe._pruned_programs) == 1  # made once


def test_optimize_ops_in_the_fetch_list_prune_to_them():
    main, startup, _, pred, loss, side, opt = _net()
    optimize_ops, params_grads = opt
    exe, scope = _started(startup)
    before = {p.name: np.array(scope.vars[p.name]) for p in main.all_parameters()}
    # Fluid's pattern: the minimize tuple in the fetch list; only the loss comes back
    fetched = exe.run(main, feed=_feed(), fetch_list=[loss, opt], scope=scope)
    assert len(fetched) == 1 and fetched[0].shape == (1,)
    after = {p.name: np.array(scope.vars[p.name]) for p in main.all_parameters()}
    assert all(not np.array_equal(before[n], after[n]) for n in before)
    # one optimize op: only its parameter moves
    exe2, scope2 = _started(startup)
    first = optimize_ops[0]
    exe2.run(main, feed=_feed(), fetch_list=[[first]], scope=scope2)
    moved = [n for n in before if not np.array_equal(before[n], np.array(scope2.vars[n]))]
    assert moved == [first.input("Param")[0]]


def test_prune_drops_feeds_it_does_not_use_and_asks_for_those_it_does():
    main, startup, x, pred, loss, side, opt = _net()
    exe, scope = _started(startup)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (got,) = exe.run(main, feed=_feed(), fetch_list=[side], scope=scope, use_prune=True,
                         )
    # fetching `side` still trains (every optimize op is a target), so y is used: no warning
    assert got.shape == (8, 6) and not caught
    # a program without optimize ops: fetching h does not need y, which is dropped with a warning
    test = main.clone(for_test=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe.run(test, feed=_feed(), fetch_list=[side.name], scope=scope, use_prune=True)
    assert [str(w.message) for w in caught] == [
        "The variable y is not found in program. It is not declared or is pruned."]
    with pytest.raises(ValueError, match="Need feed data for variable x"):
        exe.run(test, feed={"y": _feed()["y"]}, fetch_list=[pred], scope=scope,
                use_prune=True)


@pytest.mark.parametrize("bad, match", [
    (["mul"], "not a variable of the program"),
    ([("loss",)], r"fetch_list\[0\] is a tuple"),
    ([3], "must be variables, names or optimize ops, got int"),
])
def test_bad_fetch_lists(bad, match):
    main, startup, *_ = _net()
    exe, scope = _started(startup)
    with pytest.raises((TypeError, ValueError), match=match):
        exe.run(main, feed=_feed(), fetch_list=bad, scope=scope)


def test_a_forward_op_in_the_fetch_list_is_refused():
    main, startup, *_ = _net()
    exe, scope = _started(startup)
    with pytest.raises(TypeError, match="op 'mul', which is not an optimize op"):
        exe.run(main, feed=_feed(), fetch_list=[[main.global_block().ops[0]]], scope=scope)


def test_use_prune_with_a_compiled_program_is_refused_by_name():
    main, startup, _, _, loss, _, _ = _net()
    exe, scope = _started(startup)
    compiled = CompiledProgram(main)
    with pytest.raises(NotImplementedError, match=r"use_prune=True\), or optimize ops in "
                                                  r"fetch_list, with a CompiledProgram"):
        exe.run(compiled, feed=_feed(), fetch_list=[loss], scope=scope, use_prune=True)


@pytest.mark.parametrize("places", [1, 2])
def test_return_merged_false_gives_each_places_values(places):
    main, startup, _, pred, loss, _, _ = _net()
    exe, scope = _started(startup)
    compiled = CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=[fluid.CPUPlace()] * places)
    feed = _feed(n=6)
    merged_exe, merged_scope = _started(startup)
    merged_compiled = CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=[fluid.CPUPlace()] * places)
    (merged,) = merged_exe.run(merged_compiled, feed=feed, fetch_list=[pred], scope=merged_scope)
    (unmerged,) = exe.run(compiled, feed=feed, fetch_list=[pred], scope=scope,
                          return_merged=False)
    assert isinstance(unmerged, list) and len(unmerged) == places
    assert [u.shape for u in unmerged] == [(6 // places, 1)] * places
    np.testing.assert_array_equal(np.concatenate(unmerged), merged)
    for c in (compiled, merged_compiled):
        if hasattr(c, "_close"):
            c._close()


def test_an_attribute_changed_in_place_is_seen_by_the_next_run():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [2])
        out = layers.scale(x, scale=2.0)
    exe, scope = _started(startup)
    ones = {"x": np.ones((1, 2), np.float32)}
    assert exe.run(main, feed=ones, fetch_list=[out], scope=scope)[0].tolist() == [[2.0, 2.0]]
    main.global_block().ops[-1]._set_attr("scale", 5.0)
    assert exe.run(main, feed=ones, fetch_list=[out], scope=scope)[0].tolist() == [[5.0, 5.0]]


def test_prune_of_a_fed_and_fetched_intermediate_and_of_unused_persistables():
    # Fluid 1.8's _prune_with_input: a fed target is its feed (the ops computing it go);
    # prune drops the variables no kept op uses, persistable ones (optimizer state) too
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[2], dtype="float32")
        label = layers.data(name="label", shape=[1], dtype="int64")
        y = layers.fc(input=[x], size=2, act="softmax")
        loss = layers.mean(layers.cross_entropy(input=y, label=label))
        fluid.optimizer.Adam(0.1).minimize(loss)
    pruned = main._prune_with_input([y.name, label.name], [y, loss])
    assert [op.type for op in pruned.global_block().ops] == ["cross_entropy2", "mean"]
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    # (the test program: main's optimize ops would be targets, which need x)
    got_y, got_loss = exe.run(main.clone(for_test=True),
                              feed={y.name: np.full((10, 2), 0.5, "float32"),
                                    "label": np.zeros((10, 1), "int64")},
                              fetch_list=[y.name, loss.name], scope=scope, use_prune=True)
    np.testing.assert_array_equal(got_y, np.full((10, 2), 0.5, "float32"))
    np.testing.assert_allclose(got_loss, np.log(2.0), rtol=1e-6)
    inference = main.clone(for_test=True)._prune_with_input(["x"], [y])
    persistables = sorted(v.name for v in inference.list_vars() if v.persistable)
    assert persistables == ["fc_0.b_0", "fc_0.w_0"]  # no learning rate, no Adam moments
