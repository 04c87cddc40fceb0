"""fluid.contrib.model_stat.summary, fluid.contrib.memory_usage and
fluid.contrib.op_freq_statistic on real programs (an MLP and a small CNN), against numbers
computed by hand with Fluid 1.8's formulas."""

from __future__ import annotations

import pytest

import dask_fluid as fluid
from dask_fluid.contrib import model_stat


def _build(fn):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        fn()
    return main


def _mlp():
    x = fluid.layers.data("x", [13])
    h = fluid.layers.fc(x, size=8, act="relu")
    y = fluid.layers.fc(h, size=3, act="tanh")
    fluid.layers.mean(y)


def _cnn():
    img = fluid.layers.data("img", [1, 8, 8])
    c = fluid.layers.conv2d(img, num_filters=4, filter_size=3, padding=1)
    b = fluid.layers.batch_norm(c, act="relu")
    p = fluid.layers.pool2d(b, pool_size=2, pool_stride=2)
    f = fluid.layers.fc(p, size=10, act="softmax")
    fluid.layers.mean(f)


def test_exports():
    assert fluid.contrib.memory_usage is fluid.contrib.memory_usage_calc.memory_usage
    assert fluid.contrib.op_freq_statistic is fluid.contrib.op_frequence.op_freq_statistic
    assert "memory_usage" in fluid.contrib.__all__
    assert "op_freq_statistic" in fluid.contrib.__all__
    assert fluid.contrib.model_stat is model_stat


# -- summary -----------------------------------------------------------------------------------
def test_summary_mlp_table(capsys):
    assert model_stat.summary(_build(_mlp)) is None  # Fluid prints only
    out = capsys.readouterr().out
    # fc: PARAMs = in*out + 1, FLOPs = in*out; activations: the product of the whole input
    # shape, the -1 batch dimension included (negative, as in Fluid)
    assert out == (
        "+-----+------+-------+--------+--------+-------+\n"
        "| No. | TYPE | INPUT | OUTPUT | PARAMs | FLOPs |\n"
        "+-----+------+-------+--------+--------+-------+\n"
        "|   0 |  mul | (13,) |   (8,) |    105 |   104 |\n"
        "|   1 | relu |  (8,) |   (8,) |      0 |    -8 |\n"
        "|   2 |  mul |  (8,) |   (3,) |     25 |    24 |\n"
        "|   3 | tanh |  (3,) |   (3,) |      0 |    -3 |\n"
        "+-----+------+-------+--------+--------+-------+\n"
        "Total PARAMs: 130(0.0001M)\n"
        "Total FLOPs: 117(0.00G)\n"
        "Notice: \n now supported ops include [Conv, DepthwiseConv, FC(mul), BatchNorm, Pool, "
        "Activation(sigmoid, tanh, relu, leaky_relu, prelu)]\n")


def _rows(out):
    return [[c.strip() for c in line.strip("|").split("|")]
            for line in out.splitlines() if line.startswith("|")][1:]


def test_summary_cnn_rows(capsys):
    model_stat.summary(_build(_cnn))
    out = capsys.readouterr().out
    # conv2d: kernel_ops = 3*3*1 = 9, PARAMs = 4*9 = 36, FLOPs = 2*8*8*4*9 = 4608
    # batch_norm: PARAMs = 2*4, FLOPs = 8*8*4*2; relu: -1*4*8*8; pool2d: 4*4*4*(2*2)
    # fc's mul: X (-1, 4, 4, 4) read as in = 64: PARAMs 64*10 + 1, FLOPs 640; softmax and
    # elementwise_add are not counted
    assert _rows(out) == [
        ["0", "conv2d", "(1, 8, 8)", "(4, 8, 8)", "36", "4608"],
        ["1", "batch_norm", "(4, 8, 8)", "(4, 8, 8)", "8", "512"],
        ["2", "relu", "(4, 8, 8)", "(4, 8, 8)", "0", "-256"],
        ["3", "pool2d", "(4, 8, 8)", "(4, 4, 4)", "0", "256"],
        ["4", "mul", "(4, 4, 4)", "(10,)", "641", "640"],
    ]
    assert "Total PARAMs: 685(0.0007M)\n" in out
    assert "Total FLOPs: 5760(0.00G)\n" in out


def test_summary_conv_groups_bias_and_fixed_batch(capsys):
    def fn():
        x = fluid.layers.data("x", [2, 4, 6, 6], append_batch_size=False)
        c = fluid.layers.conv2d(x, num_filters=6, filter_size=3, groups=2, bias_attr=False)
        fluid.layers.sigmoid(c)
        fluid.layers.pool2d(c, global_pooling=True, pool_type="avg")
    main = _build(fn)
    model_stat.summary(main)
    rows = _rows(capsys.readouterr().out)
    # filter [6, 2, 3, 3]: Fluid divides its C_in (2) by groups again: kernel_ops = 9 * 1
    assert rows[0] == ["0", "conv2d", "(4, 6, 6)", "(6, 4, 4)", "54", str(2 * 4 * 4 * 6 * 9)]
    # a fixed batch dimension of 2 counts twice
    assert rows[1] == ["1", "sigmoid", "(6, 4, 4)", "(6, 4, 4)", "0", str(2 * 6 * 4 * 4)]
    ksize = main.global_block().ops[-1].attr("ksize")
    assert rows[2][-1] == str(6 * ksize[0] * ksize[1])


def test_summary_skips_a_mul_outside_fc_and_other_ops(capsys):
    def fn():
        x = fluid.layers.data("x", [4, 3], append_batch_size=False)
        y = fluid.layers.data("y", [3, 2], append_batch_size=False)
        fluid.layers.mul(x, y)
        fluid.layers.softmax(x)
    model_stat.summary(_build(fn))
    out = capsys.readouterr().out
    assert _rows(out) == []
    assert "Total PARAMs: 0(0.0000M)\nTotal FLOPs: 0(0.00G)\n" in out


def test_summary_errors():
    with pytest.raises(TypeError, match="must be a Program"):
        model_stat.summary("main")

    def fn():
        x = fluid.layers.data("x", [4])
        fluid.layers.batch_norm(x)
    with pytest.raises(ValueError, match="batch_norm's X must be 4-D"):
        model_stat.summary(_build(fn))


# -- memory_usage ------------------------------------------------------------------------------
def test_memory_usage_mlp():
    lo, hi, unit = fluid.contrib.memory_usage(_build(_mlp), batch_size=10)
    # mul, elementwise_add, relu: [-1, 8]; mul, elementwise_add, tanh: [-1, 3]; mean: [1]
    total = (3 * 8 * 10 + 3 * 3 * 10 + 1) * 4 / 1024
    assert unit == "KB"
    assert lo == pytest.approx(total * 1.05) and hi == pytest.approx(total * 1.1)


def test_memory_usage_cnn():
    lo, hi, unit = fluid.contrib.memory_usage(_build(_cnn), batch_size=2)
    # per sample: conv, bias add, batch_norm Y, relu (4*8*8 each), pool (4*4*4), the fc's three
    # [-1, 10]; fixed: batch_norm's MeanOut, VarianceOut, SavedMean, SavedVariance (4 each),
    # mean (1)
    total = ((4 * 256 + 64 + 30) * 2 + 4 * 4 + 1) * 4 / 1024
    assert unit == "KB"
    assert (lo, hi) == (pytest.approx(total * 1.05), pytest.approx(total * 1.1))


def test_memory_usage_units_and_each_output_once():
    def small():
        x = fluid.layers.data("x", [5], dtype="int64")
        fluid.layers.cast(x, "float64")
        fluid.layers.cast(x, "int32")
    lo, hi, unit = fluid.contrib.memory_usage(_build(small), batch_size=3)
    assert unit == "B" and lo == pytest.approx(3 * 5 * (8 + 4) * 1.05)

    def big():
        x = fluid.layers.data("x", [512, 1024])
        y = fluid.layers.scale(x, 2.0)
        fluid.layers.assign(x, output=y)  # y written twice: counted once
    lo, hi, unit = fluid.contrib.memory_usage(_build(big), batch_size=2)
    assert unit == "MB" and hi == pytest.approx(4.0 * 1.1)


def test_memory_usage_errors():
    main = _build(_mlp)
    with pytest.raises(TypeError, match="requires Program"):
        fluid.contrib.memory_usage(object(), 1)
    with pytest.raises(ValueError, match="positive"):
        fluid.contrib.memory_usage(main, 0)

    def two_neg():
        x = fluid.layers.data("x", [-1, -1], append_batch_size=False)
        fluid.layers.scale(x, 2.0)
    with pytest.raises(ValueError, match="more than one negative dim"):
        fluid.contrib.memory_usage(_build(two_neg), 4)

    def int8():
        x = fluid.layers.data("x", [3])
        fluid.layers.cast(x, "int8")
    with pytest.raises(NotImplementedError, match="int8"):
        fluid.contrib.memory_usage(_build(int8), 4)


# -- op_freq_statistic -------------------------------------------------------------------------
def test_op_freq_statistic_mlp(capsys):
    uni, adj = fluid.contrib.op_freq_statistic(_build(_mlp))
    assert uni == [("mul", 2), ("elementwise_add", 2), ("relu", 1), ("tanh", 1), ("mean", 1)]
    # pairs grouped by consumer type (first reading order), then sorted by count (stable)
    assert adj == [("mul->elementwise_add", 2), ("elementwise_add->relu", 1),
                   ("relu->mul", 1), ("elementwise_add->tanh", 1), ("tanh->mean", 1)]
    assert capsys.readouterr().out == "Var's generate op is not found,x, mul\n"


def test_op_freq_statistic_training_program(capsys):
    def fn():
        _cnn()
        loss = fluid.default_main_program().global_block().ops[-1].output("Out")[0]
        fluid.optimizer.SGD(0.1).minimize(fluid.default_main_program().global_block().var(loss))
    main = _build(fn)
    uni, adj = fluid.contrib.op_freq_statistic(main)
    counts = dict(uni)
    # sgd writes parameters only: not counted; forward and grad ops are
    assert "sgd" not in counts
    assert counts["elementwise_add"] == 2 and counts["conv2d_grad"] == 1
    assert dict(adj)["batch_norm_grad->sgd"] == 2  # Scale@GRAD and Bias@GRAD
    assert [c for _, c in uni] == sorted((c for _, c in uni), reverse=True)
    capsys.readouterr()
    with pytest.raises(TypeError, match="should be Porgram"):
        fluid.contrib.op_freq_statistic(None)


def test_lookup_table_utils_module_as_fluid_names_it():
    from dask_fluid import compat

    compat.install()
    try:
        from paddle.fluid.contrib.utils import lookup_table_utils

        assert (lookup_table_utils.load_persistables_for_inference
                is fluid.io.load_persistables_for_inference)
        assert (lookup_table_utils.load_persistables_for_increment
                is fluid.io.load_persistables_for_increment)
        with pytest.raises(NotImplementedError, match="convert_dist_to_sparse_program"):
            lookup_table_utils.convert_dist_to_sparse_program(fluid.Program())
    finally:
        compat.uninstall()
