"""``layers.row_conv``, ``im2sequence``, ``sequence_scatter`` and ``chunk_eval`` as Fluid 1.8
builds them: ops, slots, attributes, parameters and static shapes; values through the executor
with LoD feeds against numpy loops; the errors; a whole program's gradients through
im2sequence, row_conv and sequence_scatter against central differences; and chunk_eval behind
a CRF tagger's ``crf_decoding`` as the label_semantic_roles book model uses it."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric

PLACE = fluid.CPUPlace()


def _ops(program, type_):
    return [o for o in program.global_block().ops if o.type == type_]


def _row_conv_loops(x, lengths, w):
    out, start = np.zeros_like(x), 0
    for length in lengths:
        for t in range(length):
            for k in range(w.shape[0]):
                if t + k < length:
                    out[start + t] += w[k] * x[start + t + k]
        start += length
    return out


# ---------------------------------------------------------------------------------------------
# row_conv


def test_row_conv_builds_fluids_parameter_and_op_and_computes_by_sequence():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4], lod_level=1)
        y = layers.row_conv(x, future_context_size=2, act="tanh")
        padded = layers.data("p", [5, 3])
        z = layers.row_conv(padded, 1, param_attr=fluid.ParamAttr(name="pad_w"))
    op = _ops(main, "row_conv")[0]
    assert op.input("X") == ["x"] and op.input("Filter") == ["row_conv_0.w_0"]
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params["row_conv_0.w_0"].shape == (3, 4) and params["pad_w"].shape == (2, 3)
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init["row_conv_0.w_0"].type == "uniform_random"  # Xavier, create_parameter's default
    assert main.global_block().ops[1].type == "tanh"
    assert y.shape == (-1, 4) and z.shape == (-1, 5, 3)
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((6, 4)).astype(np.float32)
    pv = rng.standard_normal((2, 5, 3)).astype(np.float32)
    exe, scope = fluid.Executor(PLACE), fluid.Scope()
    exe.run(startup, scope=scope)
    got, gz = exe.run(main, feed={"x": fluid.create_lod_tensor(xv, [[1, 3, 2]], PLACE), "p": pv},
                      fetch_list=[y, z], scope=scope, return_numpy=False)
    assert got.lod() == [[0, 1, 4, 6]]
    w = np.array(scope.vars["row_conv_0.w_0"])
    np.testing.assert_allclose(np.array(got), np.tanh(_row_conv_loops(xv, [1, 3, 2], w)),
                               rtol=1e-5, atol=1e-6)
    wp = np.array(scope.vars["pad_w"])
    want = _row_conv_loops(pv.reshape(10, 3), [5, 5], wp).reshape(2, 5, 3)
    np.testing.assert_allclose(np.array(gz), want, rtol=1e-5, atol=1e-6)


def test_row_conv_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [4], lod_level=1)
        with pytest.raises(ValueError, match="future_context_size must be an int >= 0, got -1"):
            layers.row_conv(x, -1)
        with pytest.raises(ValueError, match="param_attr=False leaves no filter"):
            layers.row_conv(x, 1, param_attr=False)
        with pytest.raises(TypeError, match="input must have dtype in"):
            layers.row_conv(layers.data("i", [4], dtype="int64"), 1)
        with pytest.raises(TypeError, match="row_conv: input must be a Variable"):
            layers.row_conv(np.ones((2, 4)), 1)


# ---------------------------------------------------------------------------------------------
# im2sequence


def _patches(img, oh, ow, k, s, pads):
    c, h, w = img.shape
    rows = []
    for i in range(oh):
        for j in range(ow):
            row = []
            for ch in range(c):
                for a in range(k[0]):
                    for e in range(k[1]):
                        r, q = i * s[0] + a - pads[0], j * s[1] + e - pads[1]
                        row.append(img[ch, r, q] if 0 <= r < h and 0 <= q < w else 0.0)
            rows.append(row)
    return np.array(rows)


def test_im2sequence_builds_fluids_op_and_extracts_patches():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        img = layers.data("img", [2, 4, 5])
        seq = layers.im2sequence(img, filter_size=[2, 3], stride=[2, 1], padding=[1, 0])
        real = layers.data("real", [2])
        sized = layers.im2sequence(img, filter_size=2, input_image_size=real, out_stride=2)
    op, op2 = _ops(main, "im2sequence")
    assert op.attr("kernels") == [2, 3] and op.attr("strides") == [2, 1]
    assert op.attr("paddings") == [1, 0, 1, 0]  # (pad_h, pad_w) -> up, left, down, right
    assert "Y" not in op.inputs or not op.input("Y")
    assert op2.input("Y") == ["real"] and op2.attr("out_stride") == [2, 2]
    assert op2.attr("paddings") == [0, 0, 0, 0]
    assert seq.shape == (-1, 12) and sized.shape == (-1, 8)
    rng = np.random.default_rng(1)
    iv = rng.standard_normal((2, 2, 4, 5)).astype(np.float32)
    rv = np.array([[3, 4], [8, 10]], np.float32)
    exe, scope = fluid.Executor(PLACE), fluid.Scope()
    exe.run(startup, scope=scope)
    a, b = exe.run(main, feed={"img": iv, "real": rv}, fetch_list=[seq, sized], scope=scope,
                   return_numpy=False)
    # (4 + 2 - 2) / 2 + 1 = 3 rows by (5 - 3) / 1 + 1 = 3 columns of patches an image
    assert a.lod() == [[0, 9, 18]]
    want = np.concatenate([_patches(iv[n], 3, 3, (2, 3), (2, 1), (1, 0)) for n in range(2)])
    np.testing.assert_allclose(np.array(a), want, rtol=1e-6)
    # real sizes / 2, rounded up: 2x2 -> 1x1 patches; 4x5 -> 3x4
    assert b.lod() == [[0, 1, 13]]
    want = np.concatenate([_patches(iv[0], 1, 1, (2, 2), (1, 1), (0, 0)),
                           _patches(iv[1], 3, 4, (2, 2), (1, 1), (0, 0))])
    np.testing.assert_allclose(np.array(b), want, rtol=1e-6)


def test_im2sequence_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        img = layers.data("img", [2, 4, 5])
        with pytest.raises(ValueError, match="input must be 4-D NCHW"):
            layers.im2sequence(layers.data("v", [3]), filter_size=2)
        with pytest.raises(ValueError, match="filter_size must be a positive int or a pair"):
            layers.im2sequence(img, filter_size=[2, 2, 2])
        with pytest.raises(ValueError, match="padding must be an int >= 0, or 2 or 4"):
            layers.im2sequence(img, padding=[1, 1, 1])
        with pytest.raises(ValueError, match="stride must be a positive int"):
            layers.im2sequence(img, stride=0)


# ---------------------------------------------------------------------------------------------
# sequence_scatter


def test_sequence_scatter_builds_fluids_op_and_adds_by_sequence():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 6], append_batch_size=False)
        ids = layers.data("ids", [1], dtype="int64", lod_level=1)
        upd = layers.data("upd", [1], lod_level=1)
        out = layers.sequence_scatter(x, ids, upd)
        with pytest.raises(TypeError, match="index must have dtype in"):
            layers.sequence_scatter(x, upd, upd)
    op = _ops(main, "sequence_scatter")[0]
    assert op.input("X") == ["x"] and op.input("Ids") == ["ids"] and op.input("Updates") == ["upd"]
    assert out.shape == (3, 6)
    xv = np.ones((3, 6), np.float32)
    idv = np.array([[0], [1], [2], [5], [4], [3], [2], [1], [3], [2], [5], [4]], np.int64)
    uv = np.array([[.3], [.3], [.4], [.1], [.2], [.3], [.4], [0], [.2], [.3], [.1], [.4]],
                  np.float32)
    exe = fluid.Executor(PLACE)
    exe.run(startup)
    got, = exe.run(main, feed={"x": xv, "ids": fluid.create_lod_tensor(idv, [[3, 5, 4]], PLACE),
                               "upd": fluid.create_lod_tensor(uv, [[3, 5, 4]], PLACE)},
                   fetch_list=[out])
    # the example of Fluid's sequence_scatter documentation
    np.testing.assert_allclose(got, [[1.3, 1.3, 1.4, 1.0, 1.0, 1.0],
                                     [1.0, 1.0, 1.4, 1.3, 1.2, 1.1],
                                     [1.0, 1.0, 1.3, 1.2, 1.4, 1.1]], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# the gradients of a program through im2sequence, row_conv and sequence_scatter


def test_program_gradients_through_im2sequence_row_conv_and_sequence_scatter():
    rng = np.random.default_rng(2)
    img = rng.standard_normal((2, 1, 3, 3))
    upd = rng.standard_normal((5, 2))
    ids = np.array([[2], [0], [3], [3], [1]], np.int64)
    weights = rng.standard_normal((2, 4))

    def build():
        image = layers.data("img", [1, 3, 3], dtype="float64")
        seq = layers.im2sequence(image, filter_size=2)  # 2 images x 4 patches of 4
        rc = layers.row_conv(seq, 2, param_attr=fluid.ParamAttr(name="rc"), act="tanh")
        base = layers.create_parameter([2, 4], "float64", name="base")
        u = layers.data("u", [2], dtype="float64", lod_level=1)
        i = layers.data("i", [1], dtype="int64", lod_level=1)
        col = layers.fc(u, 1, param_attr=fluid.ParamAttr(name="uw"), bias_attr=False)
        scattered = layers.sequence_scatter(base, i, col)
        w = layers.data("wt", [2, 4], dtype="float64", append_batch_size=False)
        return layers.elementwise_add(
            layers.reduce_sum(layers.square(rc)),
            layers.reduce_sum(layers.elementwise_mul(layers.tanh(scattered), w)))

    feed = {"img": img, "wt": weights,
            "u": fluid.create_lod_tensor(upd, [[3, 2]], PLACE),
            "i": fluid.create_lod_tensor(ids, [[3, 2]], PLACE)}
    got = program_grads_and_numeric(build, feed, ["rc", "base", "uw"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name


# ---------------------------------------------------------------------------------------------
# chunk_eval


def _iob_chunks(tags, num_types):
    """(begin, end, type) of IOB tags ``type * 2 + (0 for B, 1 for I)``, O = num_types * 2:
    a chunk starts at a B, or at an I that does not continue a chunk of its type."""
    found, begin, kind = set(), None, None
    for pos, t in enumerate([*tags, num_types * 2]):
        cont = t != num_types * 2 and t % 2 == 1 and begin is not None and t // 2 == kind
        if begin is not None and not cont:
            found.add((begin, pos - 1, kind))
            begin = None
        if t != num_types * 2 and begin is None:
            begin, kind = pos, t // 2
    return found


def test_chunk_eval_builds_fluids_op_and_counts():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        inf = layers.data("inf", [1], dtype="int64", lod_level=1)
        lab = layers.data("lab", [1], dtype="int64", lod_level=1)
        outs = layers.chunk_eval(inf, lab, "IOB", num_chunk_types=3, excluded_chunk_types=[2])
        with pytest.raises(TypeError, match="input must have dtype in \\['int64'\\]"):
            layers.chunk_eval(layers.data("f", [1], lod_level=1), lab, "IOB", 3)
        with pytest.raises(ValueError, match="chunk_scheme must be one of"):
            layers.chunk_eval(inf, lab, "BIO", 3)
        with pytest.raises(ValueError, match="num_chunk_types must be a positive int"):
            layers.chunk_eval(inf, lab, "IOB", 0)
    op = _ops(main, "chunk_eval")[0]
    assert op.attr("chunk_scheme") == "IOB" and op.attr("num_chunk_types") == 3
    assert op.attr("excluded_chunk_types") == [2]
    assert [op.output(s)[0] for s in ("Precision", "Recall", "F1-Score", "NumInferChunks",
                                      "NumLabelChunks", "NumCorrectChunks")] == \
        [v.name for v in outs]
    assert [str(v.dtype) for v in outs] == ["float32"] * 3 + ["int64"] * 3
    assert all(v.shape == (1,) for v in outs)
    # B-ORG 0 I-ORG 1 B-PER 2 I-PER 3 B-LOC 4 I-LOC 5 O 6 (LOC excluded)
    iv = np.array([[2], [3], [6], [6], [0], [1], [1], [1], [6], [4], [0], [1]], np.int64)
    lv = np.array([[2], [3], [6], [6], [0], [1], [6], [1], [6], [4], [0], [1]], np.int64)
    exe = fluid.Executor(PLACE)
    got = exe.run(main, feed={"inf": fluid.create_lod_tensor(iv, [[10, 2]], PLACE),
                              "lab": fluid.create_lod_tensor(lv, [[10, 2]], PLACE)},
                  fetch_list=list(outs))
    # infer: PER, ORG(4-7), ORG(10-11); label: PER, ORG(4-5), ORG(7), ORG(10-11)
    assert [int(g[0]) for g in got[3:]] == [3, 4, 2]
    np.testing.assert_allclose([g[0] for g in got[:3]], [2 / 3, 0.5, 4 / 7], rtol=1e-6)


def test_chunk_eval_behind_crf_decoding_as_in_label_semantic_roles():
    # a tiny tagger: emissions from an fc over word vectors, the CRF's transitions trained by
    # its likelihood for a few steps, Viterbi paths decoded and scored by chunk_eval (IOB, 2
    # chunk types: label_dict_len 5 -> num_chunk_types = (5 - 1) / 2)
    rng = np.random.default_rng(5)
    lengths = [5, 3, 6, 4]
    words = rng.integers(0, 6, sum(lengths))
    tags = np.where(words < 4, words, 4)  # word w < 4 is tag w (B/I of type w // 2), else O
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        word = layers.data("word", [1], dtype="int64", lod_level=1)
        target = layers.data("target", [1], dtype="int64", lod_level=1)
        emission = layers.fc(layers.embedding(word, size=[6, 8]), 5)
        crf_cost = layers.linear_chain_crf(emission, target,
                                           param_attr=fluid.ParamAttr(name="crfw"))
        loss = layers.mean(crf_cost)
        fluid.optimizer.Adam(0.05).minimize(loss)
        decoded = layers.crf_decoding(emission, param_attr=fluid.ParamAttr(name="crfw"))
        metrics = layers.chunk_eval(decoded, target, chunk_scheme="IOB", num_chunk_types=2)
    exe, scope = fluid.Executor(PLACE), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"word": fluid.create_lod_tensor(words[:, None].astype(np.int64), [lengths], PLACE),
            "target": fluid.create_lod_tensor(tags[:, None].astype(np.int64), [lengths], PLACE)}
    seen_partial = False
    for _ in range(12):
        path, *got = exe.run(main, feed=feed, fetch_list=[decoded, *metrics], scope=scope,
                             return_numpy=False)
        pred = np.array(path)[:, 0]
        n_inf = n_lab = n_cor = 0
        start = 0
        for length in lengths:
            ci = _iob_chunks(pred[start:start + length].tolist(), 2)
            cl = _iob_chunks(tags[start:start + length].tolist(), 2)
            n_inf, n_lab, n_cor = n_inf + len(ci), n_lab + len(cl), n_cor + len(ci & cl)
            start += length
        assert [int(np.array(g)[0]) for g in got[3:]] == [n_inf, n_lab, n_cor]
        p = n_cor / n_inf if n_inf else 0.0
        r = n_cor / n_lab if n_lab else 0.0
        np.testing.assert_allclose([np.array(g)[0] for g in got[:3]],
                                   [p, r, 2 * p * r / (p + r) if n_cor else 0.0], rtol=1e-6)
        seen_partial |= 0 < n_cor < n_lab
    assert n_lab > 0 and n_cor > 0
    assert seen_partial or n_cor == n_lab
