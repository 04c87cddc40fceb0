"""Programs shared by the transpiler tests (the nets of Fluid's test_dist_transpiler.py)."""

from __future__ import annotations

import numpy as np

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.transpiler import DistributeTranspiler, DistributeTranspilerConfig

A, B = "127.0.0.1:6174", "127.0.0.1:6175"
PSERVERS = f"{A},{B}"


def fluid_test_net(optimizer=None, bias: bool = True, lr=None, param_clip=None,
                   regularizer=None) -> tuple:
    """x[1000] -> fc(1000, fc_w/fc_b) -> square_error_cost -> mean -> SGD(0.1)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 1
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [1000])
        y_predict = layers.fc(x, 1000, param_attr=fluid.ParamAttr(
            name="fc_w", regularizer=regularizer, gradient_clip=param_clip),
            bias_attr=fluid.ParamAttr(name="fc_b") if bias else False)
        y = layers.data("y", [1])
        cost = layers.mean(layers.square_error_cost(y_predict, y))
        lr_value = lr() if callable(lr) else 0.1
        opt = optimizer(lr_value) if optimizer else fluid.optimizer.SGD(lr_value)
        opt.minimize(cost)
    return main, startup


def reference_mlp(optimizer=None, dtype: str = "float32", l2: float = 0.0) -> tuple:
    """measurements.md's MLP: x[64] -> fc(256, relu) -> fc(256, relu) -> fc(10) -> softmax
    cross entropy -> mean; accuracy(softmax(logits), y); SGD(0.1); random_seed 1."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 1
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [64], dtype=dtype)
        y = layers.data("y", [1], dtype="int64")
        h = layers.fc(x, 256, act="relu")
        h = layers.fc(h, 256, act="relu")
        logits = layers.fc(h, 10)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        layers.accuracy(layers.softmax(logits), y)
        reg = fluid.regularizer.L2Decay(l2) if l2 else None
        opt = optimizer() if optimizer else fluid.optimizer.SGD(0.1, regularization=reg)
        opt.minimize(loss)
    return main, startup, loss


def table_net(is_distributed: bool = True, optimizer=None) -> tuple:
    """Two id inputs looked up in one shared_w [1000, 64] table, added, fc(2), softmax cross
    entropy, mean, Adam(0.003) (Fluid's table test, without sequence_pool)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 1
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        embs = []
        for name in ("ids_a", "ids_b"):
            ids = layers.data(name, [1], dtype="int64")
            embs.append(layers.embedding(ids, [1000, 64], is_sparse=True,
                                         is_distributed=is_distributed,
                                         param_attr=fluid.ParamAttr(name="shared_w")))
        h = layers.elementwise_add(embs[0], embs[1])
        logits = layers.fc(h, 2, param_attr=fluid.ParamAttr(name="fc_w"),
                           bias_attr=fluid.ParamAttr(name="fc_b"))
        label = layers.data("label", [1], dtype="int64")
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        (optimizer or (lambda: fluid.optimizer.Adam(0.003)))().minimize(loss)
    return main, startup


def word_net(loss: str, optimizer=None) -> tuple:
    """A word2vec-like model whose two tables stay on the pservers once transpiled: ids looked
    up in a sparse word_emb [1100, 16], then nce(is_sparse, seed=1) over 1100 classes, or a
    custom-tree hsigmoid(is_sparse) over 1100 nodes fed path_table/path_code [N, 4]. Each
    table is big enough to be sliced over two pservers."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 1
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = layers.data("ids", [1], dtype="int64")
        emb = layers.embedding(ids, [1100, 16], is_sparse=True,
                               param_attr=fluid.ParamAttr(name="word_emb"))
        label = layers.data("label", [1], dtype="int64")
        if loss == "nce":
            cost = layers.nce(emb, label, 1100, num_neg_samples=4, seed=1, is_sparse=True,
                              param_attr=fluid.ParamAttr(name="nce_w"),
                              bias_attr=fluid.ParamAttr(name="nce_b"))
        else:
            path_table = layers.data("path_table", [4], dtype="int64")
            path_code = layers.data("path_code", [4], dtype="int64")
            cost = layers.hsigmoid(emb, label, 1100, path_table=path_table,
                                   path_code=path_code, is_custom=True, is_sparse=True,
                                   param_attr=fluid.ParamAttr(name="hs_w"),
                                   bias_attr=fluid.ParamAttr(name="hs_b"))
        avg = layers.mean(cost)
        (optimizer or (lambda: fluid.optimizer.Adam(0.01)))().minimize(avg)
    return main, startup


def word_data(n: int, seed: int = 0) -> dict:
    """Feeds for :func:`word_net`: ids, labels, and tree paths of 1 to 4 nodes."""
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 1100, (n, 4))
    lengths = rng.integers(1, 5, n)
    table[np.arange(4)[None, :] >= lengths[:, None]] = -1
    return {"ids": rng.integers(0, 1100, (n, 1)), "label": rng.integers(0, 1100, (n, 1)),
            "path_table": table, "path_code": rng.integers(0, 2, (n, 4))}


def transpile(main, startup, config: DistributeTranspilerConfig | None = None,
              trainer_id: int = 0, trainers: int = 2, sync_mode: bool = True,
              pservers: str = PSERVERS) -> DistributeTranspiler:
    t = DistributeTranspiler(config)
    t.transpile(trainer_id, program=main, pservers=pservers, trainers=trainers,
                sync_mode=sync_mode, startup_program=startup)
    return t


def config(**fields) -> DistributeTranspilerConfig:
    cfg = DistributeTranspilerConfig()
    for k, v in fields.items():
        setattr(cfg, k, v)
    return cfg


def op_types(block) -> list[str]:
    return [op.type for op in block.ops]
