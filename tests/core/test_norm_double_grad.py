"""Second-order gradients of batch_norm and instance_norm: Fluid 1.8's batch_norm_grad_grad and
instance_norm_grad_grad (the grad makers of batch_norm_grad and instance_norm_grad).

In training the statistics are functions of X, so the double grad op's DX is the total
derivative through them: the kernels are checked here against central differences of the
forward op followed by its grad op (the statistics recomputed at every step), and a WGAN-GP
penalty through a conv + norm critic against central differences of the whole program."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.ops import registry

from ..ops import run_op
from .numeric_grad import numeric_gradient, program_grads_and_numeric


def _diff(f, a):
    box = [a]

    def put(v):
        a[...] = v

    return numeric_gradient(f, lambda: box[0], put)


def _check(gg, f, wrt):
    for slot, a in wrt.items():
        num = _diff(f, a)
        assert np.abs(num).max() > 1e-3, slot
        np.testing.assert_allclose(gg[slot][0], num, rtol=1e-6, atol=1e-7, err_msg=slot)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("glob", [False, True], ids=["train", "global_stats"])
def test_batch_norm_grad_grad_is_the_total_derivative(layout, glob):
    rng = np.random.default_rng(0)
    shape = (3, 2, 2, 3) if layout == "NCHW" else (3, 2, 3, 2)
    x, dy = rng.standard_normal(shape), rng.standard_normal(shape)
    s, b, mean = rng.standard_normal(2), rng.standard_normal(2), rng.standard_normal(2)
    var = rng.uniform(0.5, 2.0, 2)
    ddx, dds, ddb = rng.standard_normal(shape), rng.standard_normal(2), rng.standard_normal(2)
    attrs = {"data_layout": layout, "use_global_stats": glob}
    fwd_ins = {"X": [x], "Scale": [s], "Bias": [b], "Mean": [mean], "Variance": [var]}

    def first():
        f = run_op("batch_norm", fwd_ins, attrs)
        g = run_op("batch_norm_grad", {**fwd_ins, "SavedMean": f["SavedMean"],
                                       "SavedVariance": f["SavedVariance"], "Y@GRAD": [dy]},
                   attrs)
        return f, g

    def objective():
        g = first()[1]
        return float((g["X@GRAD"][0] * ddx).sum() + (g["Scale@GRAD"][0] * dds).sum()
                     + (g["Bias@GRAD"][0] * ddb).sum())

    f = first()[0]
    gg = run_op("batch_norm_grad_grad",
                {"X": [x], "Scale": [s], "SavedMean": f["SavedMean"],
                 "SavedVariance": f["SavedVariance"], "Mean": [mean], "Variance": [var],
                 "DY": [dy], "DDX": [ddx], "DDScale": [dds], "DDBias": [ddb]}, attrs)
    _check(gg, objective, {"DX": x, "DScale": s, "DDY": dy})


@pytest.mark.parametrize("with_scale", [True, False], ids=["scale", "no_scale"])
def test_instance_norm_grad_grad_is_the_total_derivative(with_scale):
    rng = np.random.default_rng(1)
    shape = (2, 3, 2, 3)
    x, dy, ddx = (rng.standard_normal(shape) for _ in range(3))
    s, b, dds, ddb = (rng.standard_normal(3) for _ in range(4))
    fwd_ins = {"X": [x], **({"Scale": [s], "Bias": [b]} if with_scale else {})}
    outs = ("X@GRAD", "Scale@GRAD", "Bias@GRAD") if with_scale else ("X@GRAD",)

    def first():
        f = run_op("instance_norm", fwd_ins)
        g = run_op("instance_norm_grad",
                   {"X": [x], **({"Scale": [s]} if with_scale else {}),
                    "SavedMean": f["SavedMean"], "SavedVariance": f["SavedVariance"],
                    "Y@GRAD": [dy]}, outs=outs)
        return f, g

    def objective():
        g = first()[1]
        total = (g["X@GRAD"][0] * ddx).sum()
        if with_scale:
            total += (g["Scale@GRAD"][0] * dds).sum() + (g["Bias@GRAD"][0] * ddb).sum()
        return float(total)

    f = first()[0]
    ins = {"X": [x], "SavedMean": f["SavedMean"], "SavedVariance": f["SavedVariance"],
           "DY": [dy], "DDX": [ddx]}
    if with_scale:
        ins.update({"Scale": [s], "DDScale": [dds], "DDBias": [ddb]})
    gg = run_op("instance_norm_grad_grad", ins,
                outs=("DX", "DScale", "DDY") if with_scale else ("DX", "DDY"))
    _check(gg, objective, {"DX": x, "DDY": dy, **({"DScale": s} if with_scale else {})})


def test_missing_second_order_inputs_count_as_zero():
    rng = np.random.default_rng(2)
    x, dy = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    ins = {"X": [x], "Scale": [np.ones(2)], "SavedMean": [x.mean(0)],
           "SavedVariance": [1 / np.sqrt(x.var(0) + 1e-5)], "DY": [dy]}
    gg = run_op("batch_norm_grad_grad", ins)
    for slot, shape in (("DX", (4, 2)), ("DScale", (2,)), ("DDY", (4, 2))):
        np.testing.assert_array_equal(gg[slot][0], np.zeros(shape))


def test_batch_norm_grad_grad_refuses_is_test_as_fluid():
    x = np.ones((2, 2))
    with pytest.raises(ValueError, match="is_test=True.*use_global_stats"):
        run_op("batch_norm_grad_grad", {"X": [x], "Scale": [np.ones(2)],
                                        "SavedMean": [np.zeros(2)],
                                        "SavedVariance": [np.ones(2)], "DY": [x]},
               {"is_test": True})


def test_makers_give_fluids_slots():
    from types import SimpleNamespace

    def grad_op(glob):
        op = SimpleNamespace(
            type="batch_norm_grad",
            inputs={"X": ["x"], "Scale": ["s"], "Bias": ["b"], "Mean": ["m"], "Variance": ["v"],
                    "SavedMean": ["sm"], "SavedVariance": ["sv"], "Y@GRAD": ["y@GRAD"]},
            outputs={"X@GRAD": ["x@GRAD"], "Scale@GRAD": ["s@GRAD"], "Bias@GRAD": ["b@GRAD"]},
            attrs={"use_global_stats": glob, "op_role": 1})
        return registry.get("batch_norm_grad").grad(op)[0]

    train, glob = grad_op(False), grad_op(True)
    assert train["type"] == "batch_norm_grad_grad"
    assert set(train["inputs"]) == {"X", "Scale", "SavedMean", "SavedVariance", "DY", "DDX",
                                    "DDScale", "DDBias"}
    assert set(glob["inputs"]) - set(train["inputs"]) == {"Mean", "Variance"}
    assert train["outputs"] == {"DX": ["x@GRAD"], "DScale": ["s@GRAD"],
                                "DDY": ["y@GRAD@GRAD"]}
    assert train["inputs"]["DDX"] == ["x@GRAD@GRAD"] and train["inputs"]["DY"] == ["y@GRAD"]


# -- a WGAN-GP penalty through conv + norm critics ----------------------------------------------

def _penalty(d_out, x):
    gx, = fluid.gradients(d_out, x)
    norm = layers.sqrt(layers.reduce_sum(layers.square(layers.reshape(gx, [2, -1])), dim=1))
    return layers.mean(layers.square(norm - 1.0))


# smooth activations (elu): through piecewise linear ones the penalty has no gradient for the
# biases
def _head(h):
    h = layers.conv2d(h, num_filters=2, filter_size=3, stride=2, padding=1)
    h = layers.reshape(layers.elu(h, alpha=0.7), [-1, 8])
    return layers.reduce_mean(layers.fc(h, 1), dim=1)


def _bn_critic(x):
    h = layers.conv2d(x, num_filters=3, filter_size=3, padding=1, bias_attr=False)
    h = layers.batch_norm(h, act="elu")  # training: the batch's statistics
    return _head(h)


def _in_critic(x):
    h = layers.conv2d(x, num_filters=3, filter_size=3, padding=1, bias_attr=False)
    h = layers.elu(layers.instance_norm(h), alpha=1.2)
    return _head(h)


@pytest.mark.parametrize("critic, op", [(_bn_critic, "batch_norm_grad_grad"),
                                        (_in_critic, "instance_norm_grad_grad")],
                         ids=["batch_norm", "instance_norm"])
def test_gradient_penalty_through_norm_matches_differences(critic, op):
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((2, 2, 4, 4))

    def build():
        x = fluid.data("x", [2, 2, 4, 4], "float64")
        x.stop_gradient = False
        return _penalty(critic(x), x)

    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        fluid.append_backward(build())
    assert {op, "conv2d_grad_grad", "elu_grad_grad"} <= {
        o.type for o in main.global_block().ops}
    # the fc's bias shifts D(x) only, not its gradient: the penalty has none for it
    params = [p.name for p in main.global_block().all_parameters() if p.trainable]
    params = [p for p in params if not (p.startswith("fc") and p.endswith(".b_0"))]
    assert any("batch_norm" in p or "instance_norm" in p for p in params)
    for name, (analytic, numeric) in program_grads_and_numeric(build, {"x": xv},
                                                                params).items():
        assert np.abs(analytic).max() > 1e-4, name
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
