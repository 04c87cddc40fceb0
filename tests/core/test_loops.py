"""``layers.While`` and the tensor arrays (Fluid 1.8's ``while``, ``write_to_array``,
``read_from_array``, ``lod_array_length``): program structure as Fluid builds it, a decoding
loop against a numpy reference, LoD through the arrays, fresh arrays per run, fetches, the
device paths, and the errors (including the backward pass, which is not implemented)."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.framework import VarType


def _doubling(n_steps=None):
    """x written at 0, then each step reads item i, doubles it and writes it at i + 1."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3])
        n = layers.data("n", [1], dtype="int64", append_batch_size=False)
        i = layers.fill_constant([1], "int64", 0)
        arr = layers.create_array("float32")
        layers.array_write(x, i, array=arr)
        cond = layers.less_than(i, n)
        loop = layers.While(cond)
        with loop.block():
            nxt = layers.scale(layers.array_read(arr, i), scale=2.0)
            layers.increment(i)
            layers.array_write(nxt, i, array=arr)
            layers.less_than(i, n, cond=cond)
        length = layers.array_length(arr)
        last = layers.array_read(arr, i)
    return main, startup, arr, i, length, last


def _run(main, startup, feed, fetch, place=None, **kw):
    exe, scope = fluid.Executor(place or fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe, scope, exe.run(main, feed=feed, fetch_list=fetch, scope=scope, **kw)


def test_program_structure_is_fluids():
    main, _, arr, i, _, _ = _doubling()
    assert arr.name == "array_0.out" and arr.type == VarType.LOD_TENSOR_ARRAY
    ops = main.global_block().ops
    loop = next(op for op in ops if op.type == "while")
    body = main.block(loop.attr("sub_block"))
    assert body.parent_idx == 0
    assert [op.type for op in body.ops] == [
        "read_from_array", "scale", "increment", "write_to_array", "less_than"]
    # Fluid: X = what the body reads before writing it; Out = what it writes that the
    # enclosing blocks declare (the condition first); one StepScopes variable
    assert loop.input("X") == [arr.name, i.name, "n"]
    cond = next(op for op in ops if op.type == "less_than").output("Out")
    assert loop.input("Condition") == cond
    assert set(loop.output("Out")) == {loop.input("Condition")[0], i.name, arr.name}
    assert loop.attr("is_test") is False and len(loop.output("StepScopes")) == 1
    write = next(op for op in ops if op.type == "write_to_array")
    assert write.input("X") == ["x"] and write.input("I") == [i.name]
    assert write.output("Out") == [arr.name]
    assert main.to_string(True)  # every name declared


def test_doubling_loop_against_numpy_and_fresh_arrays_each_run():
    main, startup, arr, i, length, last = _doubling()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    exe, scope, (n_items, got_last, items, got_i) = _run(
        main, startup, {"x": x, "n": np.array([4])}, [length, last, arr, i])
    assert n_items.tolist() == [5] and got_i.tolist() == [4]
    np.testing.assert_array_equal(got_last, x * 16)
    assert len(items) == 5
    for k, item in enumerate(items):
        np.testing.assert_array_equal(item, x * 2 ** k)
    # a second run with fewer steps starts from an empty array, as Fluid's run scope does
    exe.run(startup, scope=scope)
    n_items, items = exe.run(main, feed={"x": x, "n": np.array([1])}, fetch_list=[length, arr],
                             scope=scope)
    assert n_items.tolist() == [2] and len(items) == 2


def test_a_loop_that_never_runs_leaves_its_variables_as_they_were():
    main, startup, arr, i, length, last = _doubling()
    _, _, (n_items, got_i) = _run(main, startup, {"x": np.ones((1, 3), np.float32),
                                                  "n": np.array([0])}, [length, i])
    assert n_items.tolist() == [1] and got_i.tolist() == [0]


def test_greedy_decoding_with_parameters_against_numpy():
    """An inference loop: each step feeds the previous output through an fc layer and takes
    the argmax, as a greedy decoder does; the parameters are read inside the loop."""
    steps, width = 5, 4
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 11
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        start = layers.data("start", [width])
        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", steps)
        states = layers.array_write(start, i)
        picks = layers.create_array("int64")
        cond = layers.less_than(i, n)
        loop = layers.While(cond, is_test=True)
        with loop.block():
            h = layers.array_read(states, i)
            logits = layers.fc(h, width, act="tanh", param_attr="w", bias_attr="b")
            pick = layers.argmax(logits, axis=1)
            layers.array_write(pick, i, array=picks)
            layers.increment(i)
            layers.array_write(logits, i, array=states)
            layers.less_than(i, n, cond=cond)
    x = np.random.default_rng(2).standard_normal((3, width)).astype(np.float32)
    exe, scope, (got_picks, got_states) = _run(main, startup, {"start": x}, [picks, states])
    w, b = np.array(scope.vars["w"]), np.array(scope.vars["b"])
    h, want = x, []
    for _ in range(steps):
        h = np.tanh(h @ w + b)
        want.append(h.argmax(axis=1))
    assert len(got_picks) == steps and len(got_states) == steps + 1
    for got, expected in zip(got_picks, want, strict=True):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(got_states[-1], h, rtol=1e-5, atol=1e-6)


def test_lod_goes_through_the_array():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        words = layers.data("words", [2], lod_level=1)
        zero = layers.fill_constant([1], "int64", 0)
        arr = layers.array_write(words, zero)
        back = layers.array_read(arr, zero)
        pooled = layers.sequence_pool(back, "sum")
    seq = fluid.create_lod_tensor(np.arange(10, dtype=np.float32).reshape(5, 2), [[2, 3]],
                                  fluid.CPUPlace())
    _, _, (got_back, got_pool, got_arr) = _run(main, startup, {"words": seq},
                                               [back, pooled, arr], return_numpy=False)
    assert got_back.lod() == [[0, 2, 5]]
    np.testing.assert_array_equal(np.array(got_pool), [[2, 4], [18, 21]])
    assert isinstance(got_arr, fluid.LoDTensorArray) and got_arr[0].lod() == [[0, 2, 5]]
    with pytest.raises(RuntimeError, match="item 0 holds LoD information"):
        _run(main, startup, {"words": seq}, [arr])


def test_loops_on_the_device(device_xp):
    main, startup, arr, i, length, last = _doubling()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _, _, (n_items, got_last, items) = _run(main, startup, {"x": x, "n": np.array([3])},
                                            [length, last, arr], place=fluid.CUDAPlace(0))
    assert n_items.tolist() == [4]
    np.testing.assert_array_equal(got_last, x * 8)
    np.testing.assert_array_equal(items[2], x * 4)


def test_building_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3])
        i = layers.fill_constant([1], "int64", 0)
        with pytest.raises(TypeError, match="cond must be a bool Variable, got float32"):
            layers.While(x)
        wide = layers.less_than(layers.fill_constant([2], "int64", 0),
                                layers.fill_constant([2], "int64", 1))
        with pytest.raises(TypeError, match=r"condition expected shape as \[\], but given "
                                            r"shape as \[2\]"):
            layers.While(wide)
        with pytest.raises(TypeError, match="i must be a Variable"):
            layers.array_write(x, 0)
        with pytest.raises(TypeError, match="i must be an integer tensor, got float32"):
            layers.array_write(x, layers.fill_constant([1], "float32", 0))
        with pytest.raises(TypeError, match="array must be a tensor array"):
            layers.array_read(x, i)
        with pytest.raises(TypeError, match="array must be a tensor array"):
            layers.array_write(x, i, array=x)


def test_reading_past_the_end_names_the_index_and_the_size():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3])
        arr = layers.array_write(x, layers.fill_constant([1], "int64", 0))
        gap = layers.array_write(x, layers.fill_constant([1], "int64", 2), array=arr)
        past = layers.array_read(arr, layers.fill_constant([1], "int64", 3))
        hole = layers.array_read(gap, layers.fill_constant([1], "int64", 1))
    feed = {"x": np.ones((1, 3), np.float32)}
    with pytest.raises(fluid.ExecutionError, match="index 3 of 'array_write_0.out', which "
                                                   "holds 3 items"):
        _run(main, startup, feed, [past])
    main.global_block().ops = [op for op in main.global_block().ops
                               if op.output_arg_names != [past.name]]
    with pytest.raises(fluid.ExecutionError, match=r"\(item 1 was never written\)"):
        _run(main, startup, feed, [hole])


def test_array_write_and_read_outside_a_loop_train():
    """The arrays' gradients in the global block: an item read twice sums both reads'
    gradients; an item overwritten gives its first writer none."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3])
        i, j = (layers.fill_constant([1], "int64", k) for k in (0, 1))
        h = layers.fc(x, 3, param_attr="w", bias_attr=False)
        arr = layers.array_write(layers.scale(h, 5.0), i)
        layers.array_write(h, i, array=arr)  # overwrites item 0: the 5 h term is gone
        layers.array_write(layers.scale(h, 2.0), j, array=arr)
        twice = layers.elementwise_add(layers.array_read(arr, i), layers.array_read(arr, i))
        loss = layers.mean(layers.elementwise_add(twice, layers.array_read(arr, j)))
        fluid.append_backward(loss)
    types = [op.type for op in main.global_block().ops]
    assert "read_from_array_grad" in types and "write_to_array_grad" in types
    xv = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    (dw,) = exe.run(main, feed={"x": xv}, fetch_list=["w@GRAD"], scope=scope)
    # loss = mean((2 + 2) h) over [2, 3]: dW = x^T 4 / 6
    np.testing.assert_allclose(dw, xv.T @ np.full((2, 3), 4 / 6), rtol=1e-5)


def test_while_loop_as_fluid_documents_it():
    """Fluid 1.8's while_loop example: i from 0 to 10, and a value doubled each step."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        i = layers.fill_constant([1], "int64", 0)
        ten = layers.fill_constant([1], "int64", 10)
        acc = layers.fill_constant([1], "float32", 1.0)
        out_i, out_acc = layers.while_loop(
            lambda i, a: layers.less_than(i, ten),
            lambda i, a: [layers.increment(i, in_place=False), layers.scale(a, scale=2.0)],
            [i, acc])
    assert (out_i, out_acc) == (i, acc)  # the loop variables, updated in place
    loop = next(op for op in main.global_block().ops if op.type == "while")
    assert [op.type for op in main.block(loop.attr("sub_block")).ops] == [
        "increment", "scale", "less_than", "assign", "assign", "assign"]
    _, _, (got_i, got_acc) = _run(main, startup, {}, [i, acc])
    assert got_i.tolist() == [10] and got_acc.tolist() == [1024.0]


def test_while_loop_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        i = layers.fill_constant([1], "int64", 0)
        ok = lambda i: layers.less_than(i, i)  # noqa: E731
        with pytest.raises(TypeError, match="cond in while_loop should be callable"):
            layers.while_loop(None, lambda i: i, [i])
        with pytest.raises(TypeError, match="body in while_loop should be callable"):
            layers.while_loop(ok, None, [i])
        with pytest.raises(ValueError, match="should not be empty"):
            layers.while_loop(ok, lambda: [], [])
        with pytest.raises(TypeError, match="must be a bool Variable"):
            layers.while_loop(lambda i: i, lambda i: i, [i])
        with pytest.raises(ValueError, match="the same arity"):
            layers.while_loop(ok, lambda i: [i, i], [i])


def test_while_loop_carries_nested_lists_and_dicts():
    """loop_vars may nest lists and dicts (Fluid 1.8 flattens them, a dict by key); body may
    change the copies it gets in place, and the loop still assigns to the originals."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        i = layers.fill_constant([1], "int64", 0)
        three = layers.fill_constant([1], "int64", 3)
        state = {"b": layers.fill_constant([2], "float32", 1.0),
                 "a": [layers.fill_constant([1], "float32", 0.5)]}

        def body(i, state):
            state["b"] = layers.scale(state["b"], scale=3.0)  # in place on the copy
            state["a"][0] = layers.elementwise_add(state["a"][0], state["a"][0])
            return [layers.increment(i, in_place=False), state]

        out_i, out_state = layers.while_loop(lambda i, s: layers.less_than(i, three), body,
                                             [i, state])
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="same arity .* structure"):
            layers.while_loop(lambda i, s: layers.less_than(i, three),
                              lambda i, s: [i, [s["b"], s["a"][0]]], [i, state])
        with pytest.raises(TypeError, match="must hold Variables .* got a float"):
            layers.while_loop(lambda i, s: layers.less_than(i, three), body, [i, {"b": 1.0}])
    assert out_i is i and out_state is state
    assert isinstance(state["b"], fluid.Variable) and state["b"].name.startswith("fill_constant")
    _, _, (got_i, got_b, got_a) = _run(main, startup, {}, [i, state["b"], state["a"][0]])
    assert got_i.tolist() == [3] and got_b.tolist() == [27.0, 27.0] and got_a.tolist() == [4.0]


def test_tensor_arrays_in_dygraph_mode_are_lists():
    """Fluid 1.8: create_array gives [], array_write sets or appends, array_read indexes,
    array_length is len."""
    from dask_fluid import dygraph

    with dygraph.guard(fluid.CPUPlace()):
        x = dygraph.to_variable(np.arange(3, dtype="float32"))
        i0, i1, i3 = (layers.fill_constant([1], "int64", v) for v in (0, 1, 3))
        arr = layers.create_array("float32")
        assert arr == []
        assert layers.array_write(x, i0, arr) is arr
        layers.array_write(x * 2, i1, arr)
        layers.array_write(x * 3, i0, arr)  # replaces item 0
        assert layers.array_length(arr) == 2
        np.testing.assert_array_equal(layers.array_read(arr, i0).numpy(), [0, 3, 6])
        np.testing.assert_array_equal(layers.array_read(arr, i1).numpy(), [0, 2, 4])
        assert len(layers.array_write(x, i0)) == 1  # a new list
        with pytest.raises(IndexError, match="index 3 is past the end of an array of 2"):
            layers.array_write(x, i3, arr)
        with pytest.raises(IndexError, match="index 3 is out of range for an array of 2"):
            layers.array_read(arr, i3)
        with pytest.raises(TypeError, match="must be a list in dygraph mode"):
            layers.array_length(x)
