"""``layers.Print`` (Fluid 1.8's ``print`` op): what it prints forward and backward, ``first_n``
and ``print_phase``, the op's attributes, and training through it unchanged."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers


def _net(printed=True, **print_args):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 4
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3])
        h = layers.fc(x, 2, param_attr="w", bias_attr="b")
        if printed:
            h = layers.Print(h, **print_args)
        loss = layers.mean(h)
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


X = np.arange(6, dtype=np.float32).reshape(2, 3) / 6


def _train(main, startup, loss, steps=2):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for _ in range(steps):
        exe.run(main, feed={"x": X}, fetch_list=[loss], scope=scope)
    return np.array(scope.vars["w"])


def test_the_op_is_fluids():
    main, _, _ = _net(message="hi", summarize=3, print_phase="forward")
    ops = [op for op in main.global_block().ops if op.type == "print"]
    assert len(ops) == 2  # forward, and its gradient op
    fwd, bwd = ops
    assert fwd.input("In") == ["fc_0.tmp_1"]
    assert {k: fwd.attr(k) for k in ("first_n", "summarize", "message", "print_phase",
                                     "print_tensor_name", "print_tensor_lod")} == {
        "first_n": -1, "summarize": 3, "message": "hi", "print_phase": "FORWARD",
        "print_tensor_name": True, "print_tensor_lod": True}
    assert fwd.attr("is_forward") is True and bwd.attr("is_forward") is False
    assert bwd.input("In") == [fwd.output("Out")[0] + "@GRAD"]
    assert bwd.output("Out") == ["fc_0.tmp_1@GRAD"]


def test_forward_and_backward_printing(capsys):
    main, startup, loss = _net(message="hidden", summarize=3)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    exe.run(main, feed={"x": X}, fetch_list=[loss], scope=scope)
    out = capsys.readouterr().out.splitlines()
    assert out[:6] == ["Variable: fc_0.tmp_1", "  - message: hidden", "  - lod: {}",
                       "  - place: CPUPlace()", "  - shape: [2, 2]", "  - dtype: float32"]
    assert out[6].startswith("  - data: [") and len(out[6][11:-1].split()) == 3
    assert out[7].startswith("Variable: ") and out[7].endswith("@GRAD")
    assert out[13] == "  - data: [0.25 0.25 0.25]"  # d mean / d h for 4 values
    assert len(out) == 14


def test_first_n_and_phase(capsys):
    main, startup, loss = _net(first_n=2, print_phase="backward", print_tensor_lod=False,
                               print_tensor_type=False, summarize=-1)
    _train(main, startup, loss, steps=4)
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("Variable")] == [
        "Variable: print_fc_0.tmp_1_0.tmp_0@GRAD"] * 2  # backward only, twice
    assert not any("lod" in line or "dtype" in line for line in out)
    assert out[-1] == "  - data: [0.25 0.25 0.25 0.25]"


def test_training_through_print_is_unchanged(capsys):
    printed = _train(*_net(message="m"))
    plain = _train(*_net(printed=False))
    np.testing.assert_array_equal(printed, plain)


def test_lod_is_printed_and_kept():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        words = layers.data("words", [1], lod_level=1)
        shown = layers.Print(words, print_tensor_name=False)
        pooled = layers.sequence_pool(shown, "sum")
    seq = fluid.create_lod_tensor(np.arange(5, dtype=np.float32).reshape(5, 1), [[2, 3]],
                                  fluid.CPUPlace())
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        (got,) = exe.run(main, feed={"words": seq}, fetch_list=[pooled])
    assert buf.getvalue().splitlines()[0] == "  - lod: {{0, 2, 5}}"
    np.testing.assert_array_equal(got, [[1], [9]])


def test_bad_arguments():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3])
        with pytest.raises(ValueError, match="print_phase must be 'forward', 'backward' or "
                                             "'both', got 'sideways'"):
            layers.Print(x, print_phase="sideways")
        with pytest.raises(TypeError, match="input must be a Variable of"):
            layers.Print(np.ones(3))
