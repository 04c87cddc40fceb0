"""The LoD rank-table layers composed as Fluid 1.8's DynamicRNN written by hand
(test_dyn_rnn.py's plain While program): lod_rank_table, lod_tensor_to_array,
max_sequence_len, a While loop of array_read / shrink_memory / array_write, then
array_to_lod_tensor; its values equal a numpy recurrence over each sequence, and its
gradients (through lod_tensor_to_array, shrink_rnn_memory, array_to_lod_tensor and
reorder_lod_tensor_by_rank) equal central differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.lod import LOD_RANK_TABLE

from .numeric_grad import program_grads_and_numeric

D, H = 3, 4
LENGTHS = [2, 4, 1, 4]  # a tie (4, 4): the stable sort keeps sequence 1 before 3
RNG = np.random.default_rng(7)
XS = RNG.standard_normal((sum(LENGTHS), D))
COEF = RNG.standard_normal((len(LENGTHS), H))


def _feed():
    return {"x": fluid.create_lod_tensor(XS, [LENGTHS], fluid.CPUPlace()), "coef": COEF}


def _plain_while_rnn():
    """Fluid's test_dyn_rnn.py ``test_plain_while_op``, with an input projection (so the
    gradient crosses lod_tensor_to_array) and a reorder by rank in the loss."""
    x = layers.data("x", [D], dtype="float64", lod_level=1)
    coef = layers.data("coef", [H], dtype="float64")
    proj = layers.fc(x, D, param_attr="wi", bias_attr=False)
    table = layers.lod_rank_table(proj)
    x_arr = layers.lod_tensor_to_array(proj, table)
    n = layers.max_sequence_len(table)
    i = layers.fill_constant([1], "int64", 0)
    boot = layers.fill_constant_batch_size_like(layers.array_read(x_arr, i), [-1, H],
                                                "float64", 0.0)
    boot.stop_gradient = True  # a constant: no gradient to give it (dask_fluid refuses one)
    mem_arr = layers.array_write(boot, i)
    out = layers.create_array("float64")
    cond = layers.less_than(i, n)
    loop = layers.While(cond)
    with loop.block():
        mem = layers.array_read(mem_arr, i)
        xt = layers.array_read(x_arr, i)
        mem = layers.shrink_memory(mem, i, table)
        h = layers.fc([xt, mem], H, act="tanh", param_attr=["wx", "wh"], bias_attr="b")
        layers.array_write(h, i, array=out)
        layers.increment(i, in_place=True)
        layers.array_write(h, i, array=mem_arr)
        layers.less_than(i, n, cond=cond)
    steps = layers.array_to_lod_tensor(out, table)
    last = layers.sequence_last_step(steps)
    ranked = layers.reorder_lod_tensor_by_rank(last, table)
    loss = layers.elementwise_add(layers.mean(layers.square(steps)),
                                  layers.mean(layers.elementwise_mul(ranked, coef)))
    return loss, steps, last, ranked, table, n


def _numpy_rnn(p):
    """Each sequence on its own: h_t = tanh(x_t Wi Wx + h_{t-1} Wh + b)."""
    offsets = np.cumsum([0, *LENGTHS])
    steps, lasts = [], []
    for k in range(len(LENGTHS)):
        h = np.zeros(H)
        for row in XS[offsets[k]:offsets[k + 1]]:
            h = np.tanh(row @ p["wi"] @ p["wx"] + h @ p["wh"] + p["b"])
            steps.append(h)
        lasts.append(h)
    return np.array(steps), np.array(lasts)


def test_the_hand_written_dynamic_rnn_computes_the_recurrence():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        loss, steps, last, ranked, table, n = _plain_while_rnn()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    got_steps, got_last, got_ranked, got_table, got_n = exe.run(
        main, feed=_feed(), fetch_list=[steps, last, ranked, table, n], scope=scope,
        return_numpy=False)
    want_steps, want_last = _numpy_rnn({k: np.array(scope.vars[k])
                                        for k in ("wi", "wx", "wh", "b")})
    np.testing.assert_allclose(np.array(got_steps), want_steps, rtol=1e-12)
    assert got_steps.recursive_sequence_lengths() == [LENGTHS]
    np.testing.assert_allclose(np.array(got_last), want_last, rtol=1e-12)
    order = [1, 3, 0, 2]  # longest first, ties in batch order
    np.testing.assert_allclose(np.array(got_ranked), want_last[order], rtol=1e-12)
    np.testing.assert_array_equal(np.array(got_table), [[1, 4], [3, 4], [0, 2], [2, 1]])
    np.testing.assert_array_equal(np.array(got_n), [4])
    assert table.type == LOD_RANK_TABLE and table.stop_gradient


def test_the_hand_written_dynamic_rnn_gradients_equal_central_differences():
    got = program_grads_and_numeric(lambda: _plain_while_rnn()[0], _feed(),
                                    ["wi", "wx", "wh", "b"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9, err_msg=name)
        assert np.abs(analytic).max() > 1e-3, name


def test_the_program_has_fluids_grad_ops():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        loss = _plain_while_rnn()[0]
        fluid.append_backward(loss)
    types = [op.type for op in main.global_block().ops]
    # array_to_lod_tensor's gradient is a lod_tensor_to_array and the other way round
    assert types.count("lod_tensor_to_array") == 2
    assert types.count("array_to_lod_tensor") == 2
    assert "reorder_lod_tensor_by_rank_grad" in types
    body_grads = [op.type for b in main.blocks for op in b.ops]
    assert "shrink_rnn_memory_grad" in body_grads


def test_a_level_1_rank_table_keeps_the_coarse_lod_through_the_arrays():
    """Ranked at level 1: the arrays' items drop the coarse level, array_to_lod_tensor puts
    it back from the table; a gradient through the round trip is the identity."""
    lengths = [[2, 1], [3, 1, 2]]
    data = RNG.standard_normal((6, 2))

    def build():
        x = layers.data("x", [2], dtype="float64", lod_level=2)
        y = layers.fc(x, 2, param_attr="w", bias_attr=False)
        table = layers.lod_rank_table(y, level=1)
        back = layers.array_to_lod_tensor(layers.lod_tensor_to_array(y, table), table)
        return layers.mean(layers.square(back)), back

    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        _, back = build()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": fluid.create_lod_tensor(data, lengths, fluid.CPUPlace())}
    got = exe.run(main, feed=feed, fetch_list=[back], scope=scope, return_numpy=False)[0]
    np.testing.assert_allclose(np.array(got), data @ np.array(scope.vars["w"]))
    assert got.recursive_sequence_lengths() == lengths
    res = program_grads_and_numeric(lambda: build()[0], feed, ["w"])
    np.testing.assert_allclose(*res["w"], rtol=1e-6, atol=1e-9)


def test_layers_check_their_arguments():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [2], dtype="float32", lod_level=1)
        table = layers.lod_rank_table([x])  # Fluid takes a list of one too
        arr = layers.lod_tensor_to_array(x, table)
        i = layers.fill_constant([1], "int64", 0)
        with pytest.raises(TypeError, match="rank_table must be a LoD rank table"):
            layers.reorder_lod_tensor_by_rank(x, x)
        with pytest.raises(TypeError, match="table must be a LoD rank table"):
            layers.lod_tensor_to_array(x, x)
        with pytest.raises(TypeError, match="x must be a tensor array"):
            layers.array_to_lod_tensor(x, table)
        with pytest.raises(TypeError, match="x must be a LoD tensor"):
            layers.lod_tensor_to_array(arr, table)
        with pytest.raises(TypeError, match="i must be an integer tensor"):
            layers.shrink_memory(x, layers.fill_constant([1], "float32", 0), table)
        with pytest.raises(ValueError, match="level must be >= 0, got -1"):
            layers.lod_rank_table(x, level=-1)
        with pytest.raises(TypeError, match="level must be an int"):
            layers.lod_rank_table(x, level=1.0)
        with pytest.raises(TypeError, match="a list of 2"):
            layers.lod_rank_table([x, x])
        layers.shrink_memory(x, i, table)
    assert [op.type for op in main.global_block().ops][:2] == ["lod_rank_table",
                                                               "lod_tensor_to_array"]
    assert main.global_block().ops[0].attrs["level"] == 0


def test_reorder_by_rank_of_sequences_trains():
    """reorder_lod_tensor_by_rank_grad puts the sequences' gradients back in batch order
    (its input gradient read with the LoD of the reordered tensor)."""
    lengths = [[1, 3, 2]]
    data = RNG.standard_normal((6, 2))
    weights = RNG.standard_normal((6, 2))

    def build():
        x = layers.data("x", [2], dtype="float64", lod_level=1)
        w = layers.data("weights", [2], dtype="float64")
        y = layers.fc(x, 2, param_attr="w", bias_attr=False, act="tanh")
        ranked = layers.reorder_lod_tensor_by_rank(y, layers.lod_rank_table(y))
        return layers.mean(layers.elementwise_mul(ranked, w))

    feed = {"x": fluid.create_lod_tensor(data, lengths, fluid.CPUPlace()), "weights": weights}
    res = program_grads_and_numeric(build, feed, ["w"])
    np.testing.assert_allclose(*res["w"], rtol=1e-6, atol=1e-9)


def test_split_and_merge_lod_tensor_layers_and_control_flow_names():
    # Fluid 1.8's scripts import these from layers.control_flow
    from dask_fluid.layers.control_flow import (
        array_to_lod_tensor,
        lod_rank_table,
        lod_tensor_to_array,
        max_sequence_len,
        merge_lod_tensor,
        shrink_memory,
        split_lod_tensor,
    )

    assert lod_rank_table is fluid.layers.lod_rank_table and callable(shrink_memory)
    assert callable(array_to_lod_tensor) and callable(lod_tensor_to_array)
    assert callable(max_sequence_len)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[1], dtype="float32", lod_level=1)
        mask = fluid.layers.data("mask", shape=[1], dtype="bool")
        t, f = split_lod_tensor(x, mask, level=0)
        out = merge_lod_tensor(t, f, x, mask, level=0)
        with pytest.raises(TypeError, match="'mask' in fluid.layers.split_lod_tensor"):
            split_lod_tensor(x, [True, False])
    xs = fluid.create_lod_tensor(np.arange(6, dtype="float32").reshape(6, 1), [[2, 1, 3]],
                                 fluid.CPUPlace())
    got_t, got_f, merged = fluid.Executor(fluid.CPUPlace()).run(
        main, feed={"x": xs, "mask": np.array([[True], [False], [True]])},
        fetch_list=[t, f, out], return_numpy=False)
    np.testing.assert_array_equal(np.array(got_t).ravel(), [0, 1, 3, 4, 5])
    assert got_t.recursive_sequence_lengths() == [[2, 3]]
    np.testing.assert_array_equal(np.array(got_f).ravel(), [2])
    np.testing.assert_array_equal(np.array(merged).ravel(), np.arange(6))
