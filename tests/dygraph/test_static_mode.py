"""The dygraph layer classes (``fluid.dygraph.nn``) building static programs, as in Fluid 1.8.

Outside ``fluid.dygraph.guard`` calling a layer appends its ops to the default main program.
Each of the 18 classes is built once in dygraph mode and once in a static program from the
same seeds (parameters are drawn from the seed and their name, so the names must coincide)
and must give the same outputs and the same parameter (and input) gradients of
``reduce_sum(out * fixed)``. Every variable a layer's ops write in the static program has a
declared shape: the shape of the value the executor computes, ``-1`` only at the batch dim
the inputs leave unknown.
"""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import dygraph, layers
from dask_fluid.dygraph import nn

SEED = 33


def _rand(shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _ids(shape, high, seed=0):
    return np.random.default_rng(seed).integers(0, high, shape).astype("int64")


_EDGES = np.array([[[1, 2], [1, 3], [2, 4], [2, 5], [0, 0]],
                   [[1, 2], [2, 3], [3, 4], [1, 5], [5, 6]]], dtype="int32")

#: id -> (make the layer, inputs, indices of the inputs with a batch dim (-1 in the static
#: program), indices of the inputs whose gradients are compared)
CASES = {
    "Linear": (lambda: nn.Linear(4, 3, act="tanh"), [_rand([5, 4])], (0,), (0,)),
    "Linear3d": (lambda: nn.Linear(4, 3), [_rand([2, 5, 4])], (0,), (0,)),
    "Conv2D": (lambda: nn.Conv2D(2, 3, 3, stride=2, padding=1, act="relu"),
               [_rand([2, 2, 7, 6])], (0,), (0,)),
    "Conv2DDepthwise": (lambda: nn.Conv2D(2, 4, 3, groups=2, use_cudnn=False),
                        [_rand([2, 2, 5, 5])], (0,), (0,)),
    "Conv2DTranspose": (lambda: nn.Conv2DTranspose(2, 3, 3, stride=2, padding=1),
                        [_rand([2, 2, 4, 3])], (0,), (0,)),
    "Conv2DTransposeOutputSize": (
        lambda: nn.Conv2DTranspose(2, 3, 3, output_size=[8, 6], stride=2, padding=1,
                                   act="sigmoid"),
        [_rand([2, 2, 4, 3])], (0,), (0,)),
    "Pool2D": (lambda: nn.Pool2D(3, "avg", 2, pool_padding=1, ceil_mode=True),
               [_rand([2, 3, 7, 6])], (0,), (0,)),
    "Pool2DGlobal": (lambda: nn.Pool2D(global_pooling=True, pool_type="max"),
                     [_rand([2, 3, 5, 4])], (0,), (0,)),
    "BatchNorm": (lambda: nn.BatchNorm(3, act="relu"), [_rand([4, 3, 2, 2])], (0,), (0,)),
    "BatchNormNHWC": (lambda: nn.BatchNorm(3, data_layout="NHWC"), [_rand([4, 2, 2, 3])],
                      (0,), (0,)),
    "Embedding": (lambda: nn.Embedding([10, 4], padding_idx=2), [_ids([3, 5], 10)], (0,), ()),
    "LayerNorm": (lambda: nn.LayerNorm([3, 4], act="tanh"), [_rand([2, 5, 3, 4])], (0,), (0,)),
    "Dropout": (lambda: nn.Dropout(0.0), [_rand([3, 4])], (0,), (0,)),
    "PRelu": (lambda: nn.PRelu("channel", channel=3), [_rand([2, 3, 2, 2])], (0,), (0,)),
    "PReluElement": (lambda: nn.PRelu("element", input_shape=[2, 3, 2]),
                     [_rand([4, 3, 2])], (0,), (0,)),
    "GroupNorm": (lambda: nn.GroupNorm(4, 2), [_rand([2, 4, 3, 3])], (0,), (0,)),
    "InstanceNorm": (lambda: nn.InstanceNorm(3), [_rand([2, 3, 4, 2])], (0,), (0,)),
    "GRUUnit": (lambda: nn.GRUUnit(9), [_rand([4, 9]), _rand([4, 3], 1)], (0, 1), (0, 1)),
    "BilinearTensorProduct": (lambda: nn.BilinearTensorProduct(3, 4, 2, act="tanh"),
                              [_rand([5, 3]), _rand([5, 4], 1)], (0, 1), (0, 1)),
    "Conv3D": (lambda: nn.Conv3D(2, 3, 3, padding=1, stride=(1, 2, 2)),
               [_rand([2, 2, 3, 4, 5])], (0,), (0,)),
    "Conv3DTranspose": (lambda: nn.Conv3DTranspose(2, 3, 2, stride=2, bias_attr=True,
                                                   act="relu"),
                        [_rand([2, 2, 2, 3, 2])], (0,), (0,)),
    "SpectralNorm": (lambda: nn.SpectralNorm([3, 4, 2], dim=1, power_iters=2),
                     [_rand([3, 4, 2])], (), (0,)),
    "NCE": (lambda: nn.NCE(10, 5, num_neg_samples=3, seed=11, bias_attr=True),
            [_rand([4, 5]), _ids([4, 1], 10)], (0, 1), (0,)),
    "TreeConv": (lambda: nn.TreeConv(5, 4, num_filters=2, max_depth=2),
                 [_rand([2, 6, 5]), _EDGES], (0, 1), (0,)),
}

LAYER_CLASSES = {"Linear", "Conv2D", "Conv2DTranspose", "Pool2D", "BatchNorm", "Embedding",
                 "LayerNorm", "Dropout", "PRelu", "GroupNorm", "InstanceNorm", "GRUUnit",
                 "BilinearTensorProduct", "Conv3D", "Conv3DTranspose", "SpectralNorm", "NCE",
                 "TreeConv"}


def _outs(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _fixed(shape):
    return _rand(list(shape), seed=99)


def _run_dygraph(case):
    make, inputs, _, grad_inputs = CASES[case]
    with dygraph.guard(fluid.CPUPlace()), fluid.unique_name.guard():
        fluid.default_startup_program().random_seed = SEED
        fluid.default_main_program().random_seed = SEED
        layer = make()
        initial = {p.name: p.numpy() for p in layer.parameters()}
        args = []
        for i, a in enumerate(inputs):
            var = dygraph.to_variable(a)
            var.stop_gradient = i not in grad_inputs
            args.append(var)
        outs = _outs(layer(*args))
        fixed = _fixed(outs[0].shape)
        loss = layers.reduce_sum(outs[0] * dygraph.to_variable(fixed))
        loss.backward()
        grads = {p.name: p.gradient() for p in layer.parameters()}
        return {
            "outs": [o.numpy() for o in outs],
            "fixed": fixed,
            "params": initial,
            # after the call: BatchNorm's moving statistics have moved
            "after": {p.name: p.numpy() for p in layer.parameters()},
            "grads": {n: g for n, g in grads.items() if g is not None},
            "input_grads": [args[i].gradient() for i in grad_inputs],
        }


def _build_static(case, unknown_batch=True):
    """The layer's static program: ``(main, startup, layer, input vars, outputs, the
    variables its ops write)``."""
    make, inputs, batched, grad_inputs = CASES[case]
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = SEED
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        layer = make()
        args = []
        for i, a in enumerate(inputs):
            shape = list(a.shape)
            if unknown_batch and i in batched:
                shape[0] = -1
            args.append(layers.data(f"in{i}", shape, dtype=str(a.dtype),
                                    append_batch_size=False,
                                    stop_gradient=i not in grad_inputs))
        first = len(main.global_block().ops)
        outs = _outs(layer(*args))
        written = []
        for op in main.global_block().ops[first:]:
            for names in op.outputs.values():
                written += [n for n in names if n not in written]
    return main, startup, layer, args, outs, written


def _run_static(case, fixed, unknown_batch=True):
    inputs = CASES[case][1]
    main, startup, layer, args, outs, written = _build_static(case, unknown_batch)
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        fw = layers.data("fixed_w", list(outs[0].shape), dtype=str(fixed.dtype),
                         append_batch_size=False)
        loss = layers.reduce_sum(layers.elementwise_mul(outs[0], fw))
        pairs = fluid.backward.append_backward(loss)
    block = main.global_block()
    grad_names = [p.name + "@GRAD" for p, _ in pairs]
    input_grads = [a.name + "@GRAD" for a in args if not a.stop_gradient]
    written_vars = [block.var(n) for n in written]
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    params = {p.name: np.array(scope.get(p.name)) for p in layer.parameters()}
    feed = {a.name: v for a, v in zip(args, inputs, strict=True)}
    got = exe.run(main, feed={**feed, "fixed_w": fixed},
                  fetch_list=[*outs, *written_vars, *grad_names, *input_grads], scope=scope)
    after = {p.name: np.array(scope.get(p.name)) for p in layer.parameters()}
    n, w, g = len(outs), len(written_vars), len(grad_names)
    return {
        "outs": got[:n],
        "out_vars": outs,
        "written": list(zip(written_vars, got[n:n + w], strict=True)),
        "params": params,
        "after": after,
        "grads": dict(zip([p.name for p, _ in pairs], got[n + w:n + w + g], strict=True)),
        "input_grads": got[n + w + g:],
        "main": main,
    }


def test_every_layer_class_has_a_case():
    assert LAYER_CLASSES == set(nn.__all__)
    assert {type(CASES[c][0]()).__name__ for c in CASES} == LAYER_CLASSES


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_layer_class_gives_the_same_outputs_and_gradients_in_both_modes(case):
    dy = _run_dygraph(case)
    st = _run_static(case, dy["fixed"])
    # the same names, so the same initial values (each drawn from the seed and its name)
    assert sorted(st["params"]) == sorted(dy["params"])
    for name, value in dy["params"].items():
        np.testing.assert_allclose(st["params"][name], value, rtol=1e-6, err_msg=name)
    for name, value in dy["after"].items():
        np.testing.assert_allclose(st["after"][name], value, rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    assert len(st["outs"]) == len(dy["outs"])
    for a, b in zip(st["outs"], dy["outs"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert sorted(st["grads"]) == sorted(dy["grads"])
    if case not in ("Pool2D", "Pool2DGlobal", "Dropout", "SpectralNorm"):
        assert dy["grads"], "a layer with trainable parameters got no gradients"
    for name, grad in dy["grads"].items():
        np.testing.assert_allclose(st["grads"][name], grad, rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    for a, b in zip(st["input_grads"], dy["input_grads"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def _assert_declared(var, value, batch_unknown):
    """``var``'s declared shape is ``value``'s, with ``-1`` at most at dim 0 (and only
    where the batch is unknown)."""
    declared, actual = list(var.shape), list(np.shape(value))
    assert len(declared) == len(actual), (var.name, declared, actual)
    for i, (d, a) in enumerate(zip(declared, actual, strict=True)):
        if d == -1:
            assert i == 0 and batch_unknown, (var.name, declared, actual)
        else:
            assert d == a, (var.name, declared, actual)


@pytest.mark.parametrize("unknown_batch", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_variable_a_layer_writes_declares_the_computed_shape(case, unknown_batch):
    inputs = CASES[case][1]
    main, startup, layer, args, outs, written = _build_static(case, unknown_batch)
    batch_unknown = unknown_batch and bool(CASES[case][2])
    for out, batched in ((o, batch_unknown) for o in outs):
        # the outputs keep the batch dim -1 where the input had it
        assert out.shape is not None and len(out.shape) > 0
        if batched:
            assert out.shape[0] == -1, (out.name, out.shape)
    block = main.global_block()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {a.name: v for a, v in zip(args, inputs, strict=True)}
    got = exe.run(main, feed=feed, fetch_list=[block.var(n) for n in written], scope=scope)
    assert {o.name for o in outs} <= set(written)
    for name, value in zip(written, got, strict=True):
        _assert_declared(block.var(name), value, batch_unknown)


def test_a_static_fc_after_a_layer_class_works():
    x = _rand([3, 2, 6, 6])
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = layers.data("img", [2, 6, 6])
        conv = nn.Conv2D(2, 4, 3, act="relu")
        pool = nn.Pool2D(2, "max", 2)
        h = pool(conv(img))
        assert list(h.shape) == [-1, 4, 2, 2]
        out = layers.fc(h, size=5, act="softmax")
        assert list(out.shape) == [-1, 5]
        emb = nn.Embedding([7, 3])(layers.data("ids", [4], dtype="int64"))
        both = layers.fc(emb, size=2, num_flatten_dims=2)
        assert list(both.shape) == [-1, 4, 2]
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    got, got2 = exe.run(main, feed={"img": x, "ids": _ids([3, 4], 7)}, fetch_list=[out, both],
                        scope=scope)
    assert got.shape == (3, 5) and got2.shape == (3, 4, 2)
    np.testing.assert_allclose(got.sum(axis=1), np.ones(3), rtol=1e-5)


@pytest.mark.parametrize("training", [True, False])
def test_dropout_builds_the_op_with_is_test_from_the_layer_mode(training):
    x = _rand([4, 6])
    with dygraph.guard(fluid.CPUPlace()):
        layer = nn.Dropout(0.5, dropout_implementation="downgrade_in_infer")
        if not training:
            layer.eval()
        dy = layer(dygraph.to_variable(x)).numpy()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        layer = nn.Dropout(0.5, seed=3)
        if not training:
            layer.eval()
        out = layer(layers.data("x", [6]))
    (op,) = [op for op in main.global_block().ops if op.type == "dropout"]
    assert op.attrs["is_test"] is (not training)
    assert op.attrs["dropout_prob"] == 0.5 and op.attrs["fix_seed"] and op.attrs["seed"] == 3
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    (st,) = exe.run(main, feed={"x": x}, fetch_list=[out])
    if training:  # each element dropped or kept unchanged
        assert np.all((st == 0) | np.isclose(st, x)) and (st == 0).any()
    else:  # eval: both modes scale by 1 - p
        np.testing.assert_allclose(st, x * 0.5, rtol=1e-6)
        np.testing.assert_allclose(dy, x * 0.5, rtol=1e-6)


class _SmallNet(dygraph.Layer):
    """Fluid 1.8's test_imperative_mnist pattern: one class, built in either mode."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2D(2, 3, 3, padding=1, act="relu")
        self.pool = nn.Pool2D(2, "avg", 2)
        self.norm = nn.BatchNorm(3, act="tanh")
        self.fc = nn.Linear(3 * 3 * 3, 4)

    def forward(self, x):
        h = self.norm(self.pool(self.conv(x)))
        return self.fc(layers.reshape(h, [-1, 3 * 3 * 3]))


def test_a_model_class_trains_to_the_same_parameters_in_both_modes():
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((6, 2, 6, 6)).astype("float32") for _ in range(3)]
    ys = [rng.integers(0, 4, (6, 1)).astype("int64") for _ in range(3)]
    with dygraph.guard(fluid.CPUPlace()), fluid.unique_name.guard():
        fluid.default_startup_program().random_seed = SEED
        fluid.default_main_program().random_seed = SEED
        model = _SmallNet()
        opt = fluid.optimizer.SGD(0.2, parameter_list=model.parameters())
        for x, y in zip(xs, ys, strict=True):
            loss = layers.mean(layers.softmax_with_cross_entropy(
                model(dygraph.to_variable(x)), dygraph.to_variable(y)))
            loss.backward()
            opt.minimize(loss)
            model.clear_gradients()
        dy_params = {p.name: p.numpy() for p in model.parameters()}

    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = SEED
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        model = _SmallNet()
        img = layers.data("img", [2, 6, 6])
        label = layers.data("label", [1], dtype="int64")
        logits = model(img)
        assert list(logits.shape) == [-1, 4]
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.SGD(0.2).minimize(loss)
    assert sorted(p.name for p in model.parameters()) == sorted(dy_params)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    start = {n: np.array(scope.get(n)) for n in dy_params}
    for x, y in zip(xs, ys, strict=True):
        exe.run(main, feed={"img": x, "label": y}, scope=scope)
    moved = 0
    for name, value in dy_params.items():
        got = np.array(scope.get(name))
        np.testing.assert_allclose(got, value, rtol=1e-4, atol=1e-6, err_msg=name)
        moved += not np.allclose(got, start[name])
    assert moved >= 6  # the trainable parameters and the moving statistics all moved


@pytest.mark.parametrize("make,shape,error,match", [
    (lambda: nn.Conv2D(3, 2, 3), [-1, 2, 5, 5], ValueError,
     "has 2 channels, the layer was built for num_channels=3"),
    (lambda: nn.Conv2D(3, 2, 3), [-1, 3, 5], ValueError, "must have rank 4"),
    (lambda: nn.Conv2D(3, 2, 7), [-1, 3, 5, 5], ValueError, "leaves no output"),
    (lambda: nn.Pool2D(2), [-1, 3, 5], ValueError, "must have rank 4"),
    (lambda: nn.BatchNorm(4), [-1, 3, 2, 2], ValueError, "has 3 channels"),
    (lambda: nn.Linear(4, 2), [-1, 5], ValueError, "last dim must be input_dim=4"),
    (lambda: nn.LayerNorm([3, 4]), [-1, 4, 3], ValueError, "normalized_shape"),
    (lambda: nn.InstanceNorm(3), [-1, 4, 2, 2], ValueError, "has 4 channels"),
    (lambda: nn.GroupNorm(4, 2), [-1, 3, 2, 2], ValueError, "must have 4 channels"),
    (lambda: nn.PRelu("channel", channel=3), [-1, 2, 2], ValueError, "3 channels"),
    (lambda: nn.Conv3D(2, 3, 2), [-1, 3, 4, 4, 4], ValueError, "NCDHW with 2 channels"),
    (lambda: nn.Conv3D(2, 3, 2), [-1, 2, 4, 4], ValueError, "must have rank 5"),
    (lambda: nn.Conv3DTranspose(2, 3, 2), [-1, 2, 4, 4], ValueError, "must have rank 5"),
    (lambda: nn.SpectralNorm([3, 4]), [4, 3], ValueError, "weight_shape"),
])
def test_static_inputs_of_the_wrong_rank_or_channels_raise_the_dygraph_errors(
        make, shape, error, match):
    for static in (True, False):
        if static:
            main, startup = fluid.Program(), fluid.Program()
            with fluid.program_guard(main, startup), fluid.unique_name.guard():
                layer = make()
                x = layers.data("x", shape, append_batch_size=False)
                with pytest.raises(error, match=match):
                    layer(x)
        else:
            with dygraph.guard(fluid.CPUPlace()):
                layer = make()
                x = dygraph.to_variable(np.zeros([2 if d < 0 else d for d in shape],
                                                 "float32"))
                with pytest.raises(error, match=match):
                    layer(x)


def test_unknown_non_batch_dims_are_left_to_the_kernels():
    # a static dim of -1 cannot be checked when the program is built: accepted, and the
    # declared output keeps it unknown
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data("x", [-1, 3, -1, -1], append_batch_size=False)
        conv = nn.Conv2D(3, 2, 3)(x)
        pool = nn.Pool2D(2, pool_stride=2)(conv)
        bn = nn.BatchNorm(2)(pool)
        assert list(conv.shape) == [-1, 2, -1, -1]
        assert list(pool.shape) == list(bn.shape) == [-1, 2, -1, -1]
        y = layers.data("y", [4, -1], append_batch_size=False)
        lin = nn.Linear(5, 2)(y)
        assert list(lin.shape) == [4, 2]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got, got2 = exe.run(main, feed={"x": _rand([2, 3, 6, 8]), "y": _rand([4, 5])},
                        fetch_list=[bn, lin])
    assert got.shape == (2, 2, 2, 3) and got2.shape == (4, 2)


def test_a_non_variable_input_names_both_kinds_of_variable():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        with pytest.raises(TypeError, match="a Variable of the program, got ndarray"):
            nn.Conv2D(1, 1, 1)(np.zeros((1, 1, 2, 2), "float32"))
        with pytest.raises(TypeError, match="a Variable of the program, got ndarray"):
            nn.GRUUnit(3)(np.zeros((1, 3), "float32"), np.zeros((1, 1), "float32"))
