"""The source translation of ``@declarative`` (dask_fluid.dygraph.dygraph_to_static).

Each function is run twice: as written, in dygraph mode (Python's own control flow on the
values: the independent reference), and translated into a static program that the executor
runs; both must give the same values on inputs that take each branch.
"""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.dygraph.dygraph_to_static.ast_transform import (
    TranslationError,
    translated_code,
)
from dask_fluid.dygraph.dygraph_to_static.convert_operators import Undefined, translate

L = fluid.layers
RNG = np.random.default_rng(0)


def _dygraph(func, arrays):
    with fluid.dygraph.guard():
        out = func(*[fluid.dygraph.to_variable(a) for a in arrays])
        return [np.array(o.numpy()) if hasattr(o, "numpy") else np.asarray(o)
                for o in (out if isinstance(out, (list, tuple)) else [out])]


def _static(func, arrays):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        feeds = [fluid.data(f"in{i}", list(a.shape), str(a.dtype)) for i, a in enumerate(arrays)]
        out = translate(func)(*feeds)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    values = exe.run(main, feed={f"in{i}": a for i, a in enumerate(arrays)}, fetch_list=outs)
    return values, main


def _check(func, *arrays, control_flow=True):
    expected = _dygraph(func, arrays)
    got, program = _static(func, arrays)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5, atol=1e-6)
    types = {op.type for block in program.blocks for op in block.ops}
    if control_flow:
        assert types & {"conditional_block", "while"}, types
    return program


def _x(*shape, sign=1.0):
    return (sign * (RNG.random(shape) + 0.1)).astype("float32")


# -- if / else ------------------------------------------------------------------------------------
def if_elif(x):
    m = L.reduce_mean(x)
    if m > 1.0:
        y = x * 3.0
    elif m > 0.0:
        y = x + 1.0
        z = y * 2.0
        y = z - x
    else:
        y = L.relu(x) - 2.0
    return y


@pytest.mark.parametrize("shift", [2.0, 0.0, -2.0])
def test_if_elif_else_on_a_tensor_takes_the_branch_of_the_values(shift):
    _check(if_elif, _x(3, 4) + np.float32(shift))


def early_return(x, y):
    if L.reduce_sum(x) > L.reduce_sum(y):
        return x - y
    t = x * y
    if L.reduce_max(t) < 0.5:
        return t
    return t + 1.0


@pytest.mark.parametrize("a,b", [(1.0, 0.0), (0.0, 1.0), (0.0, 10.0)])
def test_early_returns_become_one_return(a, b):
    x, y = _x(2, 2) * 0.1 + np.float32(a), _x(2, 2) * 0.1 + np.float32(b)
    _check(early_return, x, y)


def python_flag(x, double=True):
    if double:
        return x * 2.0
    return x


def test_conditions_on_python_values_stay_python():
    got, program = _static(python_flag, [_x(2)])
    assert {op.type for op in program.global_block().ops} == {"scale"} or not any(
        op.type == "conditional_block" for op in program.global_block().ops)


def one_sided(x):
    if L.reduce_mean(x) > 0:
        tmp = x * 2.0
        x = tmp + 1.0
    return x


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_variable_assigned_in_one_branch_only_is_fine_when_unused(sign):
    _check(one_sided, _x(3, sign=sign))


def one_sided_used(x):
    if L.reduce_mean(x) > 0:
        tmp = x * 2.0
    return tmp


def test_a_variable_set_in_one_branch_and_read_after_works_when_that_branch_runs():
    # as in Fluid 1.8: the value of the branch that ran; a run that takes the other branch
    # fails, naming the variable
    program = _check(one_sided_used, _x(3))
    exe = fluid.Executor()
    with pytest.raises(fluid.executor.ExecutionError,
                       match=r"tmp@not_set_when_the_if_at_test_dygraph_to_static.py:\d+_is_"
                             r"false.*was not computed"):
        exe.run(program, feed={"in0": -_x(3)}, fetch_list=[program.global_block().ops[-1]
                                                           .output_arg_names[0]])


class _Holder:
    value = None


def attribute_store(x, holder):
    if L.reduce_mean(x) > 0:
        holder.value = x
    return x


def test_an_attribute_assigned_in_a_program_branch_is_refused():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [3], "float32")
        with pytest.raises(NotImplementedError, match=r"holder.value"):
            translate(attribute_store)(x, _Holder())


def mixed_branch_values(x):
    if L.reduce_mean(x) > 0:
        y = x
    else:
        y = "text"
    return y


def test_branches_leaving_a_variable_and_a_string_are_refused():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [3], "float32")
        with pytest.raises(TypeError, match=r"'y' is a Variable after one branch and a str"):
            translate(mixed_branch_values)(x)


def many_values_condition(x):
    if x > 0:
        x = x + 1.0
    return x


def test_a_condition_of_several_values_is_a_clear_error():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [3], "float32")
        with pytest.raises(TypeError, match=r"has shape \[3\]; a condition must hold one value"):
            translate(many_values_condition)(x)


# -- loops ----------------------------------------------------------------------------------------
def while_tensor(x, limit):
    i = L.fill_constant([1], "int64", 0)
    s = L.fill_constant([1], "float32", 0.0)
    while i < limit:
        s = s + L.reduce_sum(x)
        i = i + 1
    return s, i


@pytest.mark.parametrize("n", [0, 1, 4])
def test_while_on_a_tensor_condition(n):
    _check(while_tensor, _x(2, 3), np.array([n], "int64"))


def while_break(x, limit):
    i = L.fill_constant([1], "int64", 0)
    s = L.fill_constant([1], "float32", 0.0)
    while i < limit:
        s = s + L.reduce_mean(x) * 2.0
        if s > 3.0:
            break
        i = i + 1
    return s, i


@pytest.mark.parametrize("n", [2, 10])
def test_break_in_a_program_loop(n):
    _check(while_break, _x(4), np.array([n], "int64"))


def for_range_continue(x, n):
    s = x * 0.0
    for _ in range(n):
        if L.reduce_mean(s) > 2.0:
            continue
        s = s + x
    return s


@pytest.mark.parametrize("n", [0, 3, 12])
def test_for_range_over_a_tensor_bound_with_continue(n):
    _check(for_range_continue, _x(3), np.array([n], "int64"))


def for_python_range(x):
    s = x
    for k in range(3):
        if k == 1:
            continue
        s = s * 2.0 + k
    return s


def test_for_over_a_python_range_is_unrolled():
    _check(for_python_range, _x(2), control_flow=False)


def for_items(x):
    outs = []
    for scale in [1.0, 2.0, 3.0]:
        outs.append(x * scale)
    return L.concat(outs, axis=0)


def test_for_over_a_python_list():
    _check(for_items, _x(2), control_flow=False)


def nested(x, n):
    i = L.fill_constant([1], "int64", 0)
    while i < n:
        if L.reduce_mean(x) > 1.0:
            x = x * 0.5
        else:
            x = x + 0.3
        i = i + 1
    return x


def test_an_if_inside_a_program_loop():
    _check(nested, _x(3), np.array([6], "int64"))


def return_in_loop(x):
    for _ in range(3):
        return x
    return x


def test_return_inside_a_loop_is_refused():
    with pytest.raises(TranslationError, match=r"return inside a for"):
        translate(return_in_loop)


# -- operators and builtins --------------------------------------------------------------------
def logical(x, y):
    mx, my = L.reduce_mean(x), L.reduce_mean(y)
    if mx > 0 and not my > 0:
        return x
    if mx > 0 or my > 0:
        return y
    return x + y


@pytest.mark.parametrize("a,b", [(1, -1), (-1, 1), (1, 1), (-1, -1)])
def test_and_or_not_on_tensors(a, b):
    _check(logical, _x(2, sign=a), _x(2, sign=b))


def equality(x, k):
    if k == 2:
        return x * 2.0
    if k != 1:
        return x * 3.0
    return x


@pytest.mark.parametrize("k", [1, 2, 3])
def test_equality_on_tensors_compares_values(k):
    # (a dygraph variable's == is Python's identity here, so numpy gives the reference)
    x = _x(2)
    got, program = _static(equality, [x, np.array([k], "int64")])
    np.testing.assert_allclose(got[0], x * {1: 1.0, 2: 2.0, 3: 3.0}[k], rtol=1e-6)
    types = [op.type for block in program.blocks for op in block.ops]
    assert "equal" in types and "not_equal" in types


def chained(x):
    m = L.reduce_mean(x)
    if 0.2 < m < 0.8:
        return x
    return -x


@pytest.mark.parametrize("shift", [0.0, 2.0])
def test_chained_comparisons(shift):
    _check(chained, np.full([2], 0.5 + shift, "float32"))


def uses_len(x):
    return x * float(len(x))


def test_len_of_a_known_dimension():
    _check(uses_len, _x(3, 2), control_flow=False)


def _helper(x):
    if L.reduce_mean(x) > 0.5:
        return x * 10.0
    return x


def calls_helper(x):
    return _helper(x) + 1.0


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_the_users_own_functions_are_translated_too(shift):
    _check(calls_helper, _x(3) * 0.1 + np.float32(shift))


def printing(x):
    y = x * 2.0
    print(y)
    return y


def test_print_of_a_variable_is_a_print_op(capsys):
    _, program = _static(printing, [_x(2)])
    assert "print" in [op.type for op in program.global_block().ops]


def test_the_translated_code_is_readable_python():
    code = translated_code(early_return)
    assert "convert_ifelse" in code and code.count("return") >= 1
    compile(code, "<check>", "exec")


def test_functions_without_source_are_refused():
    with pytest.raises(TranslationError, match="lambda"):
        translate(lambda x: x)
    namespace = {}
    exec("def typed(x):\n    return x\n", namespace)  # noqa: S102
    with pytest.raises(TranslationError, match="source"):
        translate(namespace["typed"])


def test_undefined_says_what_happened():
    value = Undefined("t", "the if at f.py:3 gives it a value only when ...")
    with pytest.raises(NameError, match="'t' has no value here: the if at f.py:3"):
        value + 1
    with pytest.raises(NameError):
        bool(value)


# -- expressions, asserts and containers ----------------------------------------------------------
def if_expression(x):
    m = L.reduce_mean(x)
    y = x * 2.0 if m > 0 else x * -3.0
    return y + (1.0 if m > 100 else 0.0)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_conditional_expressions_on_tensors(sign):
    _check(if_expression, _x(3, sign=sign))


def asserting(x):
    assert L.reduce_min(x) > 0, "x must be positive"
    return x * 2.0


def test_assert_on_a_tensor_is_an_assert_op():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [3], "float32")
        y = translate(asserting)(x)
    assert "assert" in [op.type for op in main.global_block().ops]
    exe = fluid.Executor()
    good = _x(3)
    np.testing.assert_allclose(exe.run(main, feed={"x": good}, fetch_list=[y])[0], good * 2)
    with pytest.raises(fluid.executor.ExecutionError, match="AssertOp must be true"):
        exe.run(main, feed={"x": -good}, fetch_list=[y])


def python_assert(x, n=3):
    assert n > 0, f"n is {n}"
    return x * float(n)


def test_assert_on_python_values_is_pythons():
    _check(python_assert, _x(2), control_flow=False)
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [2], "float32")
        with pytest.raises(AssertionError, match="n is 0"):
            translate(python_assert)(x, 0)


def grows_a_list_in_a_program_loop(x, n):
    outs = [x]
    i = L.fill_constant([1], "int64", 0)
    while i < n:
        outs.append(x * L.cast(i + 2, "float32"))
        i = i + 1
    return L.concat(outs), L.stack(outs, axis=1), len(outs)


def test_a_list_grown_in_a_program_loop_is_a_tensor_array():
    # Fluid 1.8's ListTransformer: the list becomes create_array, append an array_write at its
    # length; concat, stack and len take the array (tensor_array_to_tensor, array_length)
    program = _check(grows_a_list_in_a_program_loop, _x(3), np.array([3], "int64"))
    types = [op.type for block in program.blocks for op in block.ops]
    assert types.count("write_to_array") == 2  # the item before the loop, the one in it
    assert types.count("tensor_array_to_tensor") == 2 and "lod_array_length" in types
    code = translated_code(grows_a_list_in_a_program_loop)
    assert "outs = _jst.convert_append(outs, " in code


def starts_empty(x, n):
    outs = []
    i = L.fill_constant([1], "int64", 0)
    while i < n:
        outs.append(x + L.cast(i, "float32"))
        i = i + 1
    return L.stack(outs)


def test_an_empty_list_grown_in_a_program_loop():
    _check(starts_empty, _x(2, 3), np.array([4], "int64"))


def appends_in_a_program_branch(x):
    outs = [x]
    if L.reduce_mean(x) > 0.5:
        outs.append(x * 2.0)
    return L.concat(outs)


def appends_in_nested_branches(x):
    outs = []
    m = L.reduce_mean(x)
    if m > 0.0:
        outs.append(x + 1.0)
        if m > 1.5:
            outs.append(x * 3.0)
    else:
        outs.append(L.relu(x))
    outs.append(x - 1.0)
    return L.stack(outs), len(outs)


@pytest.mark.parametrize("shift", [2.0, 0.0, -2.0])
def test_a_list_grown_in_a_program_branch_is_a_tensor_array(shift):
    # Fluid 1.8's ListTransformer: the list becomes a tensor array before the if, and the
    # branch that runs writes at its end
    x = _x(2, 3) + shift
    program = _check(appends_in_a_program_branch, x)
    types = [op.type for block in program.blocks for op in block.ops]
    assert "write_to_array" in types and "tensor_array_to_tensor" in types
    _check(appends_in_nested_branches, x)
    code = translated_code(appends_in_nested_branches)
    assert "('outs',)" in code  # the outer if knows the list its branches grow


def test_gradients_flow_through_a_list_grown_in_a_program_branch():
    # d/dx mean(concat([x, 2x])) = 3/12 where the branch runs, 1/6 where it does not
    for shift, expected in ((1.0, 3.0 / 12), (-2.0, 1.0 / 6)):
        x = _x(2, 3) + shift
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            xv = fluid.data("x", [2, 3], "float32")
            xv.stop_gradient = False
            loss = L.reduce_mean(translate(appends_in_a_program_branch)(xv))
            grad, = fluid.backward.gradients([loss], [xv])
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        got, = exe.run(main, feed={"x": x}, fetch_list=[grad])
        np.testing.assert_allclose(got, np.full((2, 3), expected), rtol=1e-6)


LOG = []


def appends_to_a_global_in_a_program_loop(x, n):
    i = L.fill_constant([1], "int64", 0)
    while i < n:
        LOG.append(x)
        i = i + 1
    return x


def appends_a_number_in_a_program_loop(x, n):
    outs = []
    i = L.fill_constant([1], "int64", 0)
    while i < n:
        outs.append(1.0)
        i = i + 1
    return outs


def test_lists_that_a_program_cannot_grow_are_refused():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [2], "float32")
        n = fluid.data("n", [1], "int64")
        # not the function's own name: appending stays a change of a Python object
        with pytest.raises(NotImplementedError, match=r"LOG.append\(...\)"):
            translate(appends_to_a_global_in_a_program_loop)(x, n)
        with pytest.raises(TypeError, match=r"holds float items|append a Variable"):
            translate(appends_a_number_in_a_program_loop)(x, n)
    assert LOG == []
    # on Python values the same functions run as written
    with fluid.dygraph.guard():
        v = fluid.dygraph.to_variable(_x(2))
        assert len(translate(appends_a_number_in_a_program_loop)(v, 2)) == 2


def over_rows_of_unknown_count(x):
    total = L.fill_constant([3], "float32", 0.0)
    rows = []
    for row in x:  # x's first dim is -1: a program loop over layers.shape(x)[0]
        total = total + row * 2.0
        rows.append(L.relu(row - 5.0))
    return total, L.stack(rows), len(x)


def test_for_over_a_variable_whose_first_dim_is_unknown_is_a_program_loop():
    # Fluid 1.8's for x in var: len is the dim when the program runs, x[i] a slice with
    # tensor bounds
    x = np.arange(12, dtype="float32").reshape(4, 3)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        outs = translate(over_rows_of_unknown_count)(fluid.data("x", [-1, 3], "float32"))
    total, stacked, n = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": x},
                                                             fetch_list=list(outs))
    np.testing.assert_allclose(total, x.sum(axis=0) * 2.0)
    np.testing.assert_allclose(stacked, np.maximum(x - 5.0, 0.0))
    assert list(n) == [4] and "while" in {op.type for op in main.global_block().ops}
    expected = _dygraph(over_rows_of_unknown_count, [x])  # as written, eagerly
    np.testing.assert_allclose(total, expected[0])
    np.testing.assert_allclose(stacked, expected[1])


def list_inside_a_program_loop(x, n):
    i = L.fill_constant([1], "int64", 0)
    while i < n:
        parts = []
        for k in range(2):
            parts.append(x * float(k + 1))
        x = L.sums(parts) * 0.5
        i = i + 1
    return x


def test_a_list_made_and_used_inside_one_pass_of_a_program_loop_is_fine():
    _check(list_inside_a_program_loop, _x(3), np.array([3], "int64"))


def tensor_array_decode(x, n):
    arr = L.create_array("float32")
    i = L.fill_constant([1], "int64", 0)
    h = x
    while i < n:
        h = L.tanh(h * 1.5 + 0.1)
        L.array_write(h, i, arr)
        i = i + 1
    out, _ = L.tensor_array_to_tensor(arr, axis=0)
    return out


def test_a_tensor_array_written_in_a_program_loop():
    x = _x(1, 3)
    got, program = _static(tensor_array_decode, [x, np.array([4], "int64")])
    expected, h = [], x
    for _ in range(4):
        h = np.tanh(h * 1.5 + 0.1)
        expected.append(h)
    np.testing.assert_allclose(got[0], np.concatenate(expected), rtol=1e-5)


# -- the dygraph idioms of Fluid 1.8 scripts ------------------------------------------------------
def numpy_in_conditions(x, label=None):
    if L.reduce_mean(x).numpy()[0] > 0.5:
        x = x - 1.0
    else:
        x = x + 1.0
    if label is not None:  # a Python condition beside a program one
        return x * label
    return x


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_numpy_of_a_tensor_in_a_condition_compares_in_the_program(shift):
    _check(numpy_in_conditions, _x(2, 3) * 0.1 + np.float32(shift))


def number_as_condition(x):
    m = L.reduce_sum(x)
    if m:  # true when not zero
        x = x + 1.0
    return x


@pytest.mark.parametrize("scale", [0.0, 1.0])
def test_a_number_as_a_condition_is_true_when_not_zero(scale):
    _check(number_as_condition, _x(3) * np.float32(scale))


def mixes_python_and_tensors(x, y=None):
    batch = L.shape(x)
    if x is not None and batch[0] > 1 and y is None:
        x = x + 1.0
    if y is not None or batch[0] > 100:
        x = x - 1.0
    return x


def test_python_operands_beside_tensor_ones_in_and_or():
    _check(mixes_python_and_tensors, _x(2, 3))


def loops_inside_a_tensor_branch(x):
    mean = L.reduce_mean(x)
    if mean > 0.5:
        for i in range(0, 10):
            if i > 5:
                x = x + 1.0
                break
            x = x + 1.0
    else:
        for _ in range(0, 37):
            x = x + 2.0
            break
    if not (mean > 0.7 and x[0] > 3.0):
        x = x * 2.0
    return x


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_python_loops_with_break_inside_a_tensor_branch(shift):
    _check(loops_inside_a_tensor_branch, _x(3) * 0.1 + np.float32(shift))


def makes_variables(x):
    bias = fluid.dygraph.to_variable(np.ones([3], "float32"))
    return x + bias


def test_to_variable_inside_a_translated_function_is_a_constant():
    _check(makes_variables, _x(3), control_flow=False)


def number_or_tensor(x):
    if L.reduce_mean(x) > 0.5:
        scale = x * 2.0
    else:
        scale = 0.5  # a Python number on this side: a constant of the program
    return x * scale


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_a_variable_on_one_side_and_a_number_on_the_other(shift):
    _check(number_or_tensor, _x(3) * 0.1 + np.float32(shift))


SCALE = 1.0


def scaled(x):
    return x * SCALE


def test_translated_code_reads_the_modules_globals_as_they_are_now():
    global SCALE
    translated = translate(scaled)
    try:
        SCALE = 3.0  # after the translation: the translated function sees it
        got, _ = _static(translated, [np.ones(2, "float32")])
    finally:
        SCALE = 1.0
    np.testing.assert_array_equal(got[0], [3.0, 3.0])
    assert translated.__globals__ is globals()  # no copy of the module's names (nor of its objects)
