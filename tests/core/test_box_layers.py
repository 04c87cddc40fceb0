"""``layers.prior_box``, ``density_prior_box``, ``anchor_generator``, ``box_coder``,
``iou_similarity``, ``box_clip``, ``polygon_box_transform`` and ``box_decoder_and_assign``
as Fluid 1.8 builds them: op slots and attributes, static shapes, values through the
executor against the loop references of tests/ops/test_box_ops.py, the errors Fluid gives,
LoD kept, and a program's gradients with the (non-differentiable) box ops in it."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from ..ops.test_box_ops import (
    ref_anchor_generator,
    ref_box_clip,
    ref_box_decoder_and_assign,
    ref_decode,
    ref_density_prior_box,
    ref_encode,
    ref_iou,
    ref_prior_box,
)
from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch, **kw):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope, **kw)


def _ops(main, type):
    return [o for o in main.global_block().ops if o.type == type]


def test_prior_box_builds_fluids_op_and_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        feat = layers.data("feat", [3, 4, 5])
        img = layers.data("img", [3, 16, 20])
        box, var = layers.prior_box(feat, img, [2.0, 4], max_sizes=[5.0, 10.0],
                                    aspect_ratios=[2.0], flip=True, clip=True)
        box2, var2 = layers.prior_box(feat, img, 3.0, max_sizes=[-1.0], aspect_ratios=2.0,
                                      steps=[3.0, 2.0], offset=0.3,
                                      min_max_aspect_ratios_order=True)
    op, op2 = _ops(main, "prior_box")
    assert op.input("Input") == [feat.name] and op.input("Image") == [img.name]
    assert op.output("Boxes") == [box.name] and op.output("Variances") == [var.name]
    assert op.attr("min_sizes") == [2.0, 4.0] and op.attr("max_sizes") == [5.0, 10.0]
    assert op.attr("aspect_ratios") == [2.0] and op.attr("variances") == [0.1, 0.1, 0.2, 0.2]
    assert op.attr("flip") is True and op.attr("clip") is True
    assert op.attr("step_w") == 0.0 and op.attr("offset") == 0.5
    # a non-positive first max size means "no max sizes": Fluid leaves the attr unset
    assert "max_sizes" not in op2.attrs or op2.attr("max_sizes") == []
    assert op2.attr("step_w") == 3.0 and op2.attr("step_h") == 2.0
    assert tuple(box.shape) == (4, 5, 8, 4) and tuple(var.shape) == (4, 5, 8, 4)
    assert tuple(box2.shape) == (4, 5, 2, 4)  # ratios 1 and 2, no flip, no max
    assert box.stop_gradient and var.stop_gradient
    feed = {"feat": np.zeros((1, 3, 4, 5), np.float32), "img": np.zeros((1, 3, 16, 20),
                                                                         np.float32)}
    got = _run(main, startup, feed, [box, var, box2])
    want, want_var = ref_prior_box(4, 5, 16, 20, [2.0, 4.0], [5.0, 10.0], [2.0], True, True,
                                   (0, 0), 0.5, [0.1, 0.1, 0.2, 0.2], False)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want_var, rtol=1e-6)
    want2, _ = ref_prior_box(4, 5, 16, 20, [3.0], [], [2.0], False, False, (3.0, 2.0), 0.3,
                             [0.1, 0.1, 0.2, 0.2], True)
    np.testing.assert_allclose(got[2], want2, rtol=1e-5, atol=1e-6)


def test_prior_box_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        feat, img = layers.data("feat", [3, 4, 5]), layers.data("img", [3, 16, 20])
        with pytest.raises(ValueError, match="steps must be a list or tuple of length 2"):
            layers.prior_box(feat, img, [2.0], steps=[1.0])
        with pytest.raises(ValueError, match="max_sizes has 1 sizes but min_sizes has 2"):
            layers.prior_box(feat, img, [2.0, 3.0], max_sizes=[5.0])
        with pytest.raises(ValueError, match=r"max_sizes\[0\] = 2.0 must be greater"):
            layers.prior_box(feat, img, [3.0], max_sizes=[2.0])
        with pytest.raises(ValueError, match="variance must be 4 positive values"):
            layers.prior_box(feat, img, [2.0], variance=[0.1, 0.2])
        with pytest.raises(ValueError, match="the height of input .4. must be smaller"):
            layers.prior_box(feat, layers.data("small", [3, 4, 20]), [2.0])
        with pytest.raises(TypeError, match="input must be a Variable"):
            layers.prior_box(np.zeros((1, 3, 4, 5)), img, [2.0])
        with pytest.raises(NotImplementedError, match=r"prior_box\(input=<uint8>\)"):
            layers.prior_box(layers.data("q", [3, 4, 5], dtype="uint8"), img, [2.0])


def test_box_coder_builds_fluids_op_and_values():
    rng = np.random.default_rng(0)
    pv = np.concatenate([lo := rng.uniform(0, 0.5, (4, 2)), lo + 0.3], axis=1)
    tv = np.concatenate([lo2 := rng.uniform(0, 0.5, (3, 2)), lo2 + 0.2], axis=1)
    varv = rng.uniform(0.1, 0.3, (4, 4))
    dv = rng.standard_normal((3, 4, 4)) * 0.3
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        prior = layers.data("prior", [4, 4], dtype="float64", append_batch_size=False)
        pvar = layers.data("pvar", [4, 4], dtype="float64", append_batch_size=False)
        target = layers.data("target", [4], dtype="float64")
        deltas = layers.data("deltas", [3, 4, 4], dtype="float64", append_batch_size=False)
        enc = layers.box_coder(prior, pvar, target)
        dec = layers.box_coder(prior, [0.1, 0.1, 0.2, 0.2], deltas,
                               code_type="decode_center_size", box_normalized=False)
    o_enc, o_dec = _ops(main, "box_coder")
    assert o_enc.input("PriorBoxVar") == [pvar.name] and o_enc.attr("variance") == []
    assert o_enc.attr("code_type") == "encode_center_size" and o_enc.attr("axis") == 0
    assert o_enc.attr("box_normalized") is True
    assert not o_dec.inputs.get("PriorBoxVar") and o_dec.attr("variance") == [0.1, 0.1, 0.2,
                                                                               0.2]
    assert o_dec.attr("box_normalized") is False
    assert tuple(enc.shape) == (-1, 4, 4) and tuple(dec.shape) == (3, 4, 4)
    got = _run(main, startup, {"prior": pv, "pvar": varv, "target": tv, "deltas": dv},
               [enc, dec])
    np.testing.assert_allclose(got[0], ref_encode(tv, pv, varv, True), rtol=1e-10)
    np.testing.assert_allclose(got[1], ref_decode(dv, pv, [0.1, 0.1, 0.2, 0.2], False, 0),
                               rtol=1e-10)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        p = layers.data("p", [4, 4], append_batch_size=False)
        t = layers.data("t", [4])
        with pytest.raises(TypeError, match="prior_box_var must be a Variable or a list"):
            layers.box_coder(p, None, t)
        with pytest.raises(ValueError, match="axis must be 0 or 1, got 2"):
            layers.box_coder(p, [0.1] * 4, t, axis=2)
        with pytest.raises(ValueError, match="code_type must be 'encode_center_size'"):
            layers.box_coder(p, [0.1] * 4, t, code_type="center")
        with pytest.raises(ValueError, match="decode_center_size needs target_box"):
            layers.box_coder(p, [0.1] * 4, t, code_type="decode_center_size")
        with pytest.raises(ValueError, match="must hold 4 variances"):
            layers.box_coder(p, [0.1], t)
        with pytest.raises(TypeError, match="prior_box .* must be float32 or float64"):
            layers.box_coder(layers.data("pi", [4, 4], dtype="int32"), [0.1] * 4, t)


def test_box_coder_axis1_values():
    rng = np.random.default_rng(1)
    pv = np.concatenate([lo := rng.uniform(0, 0.5, (3, 2)), lo + 0.3], axis=1)
    varv, dv = rng.uniform(0.1, 0.3, (3, 4)), rng.standard_normal((3, 4, 4)) * 0.3
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        prior = layers.data("prior", [3, 4], dtype="float64", append_batch_size=False)
        pvar = layers.data("pvar", [3, 4], dtype="float64", append_batch_size=False)
        deltas = layers.data("deltas", [3, 4, 4], dtype="float64", append_batch_size=False)
        dec = layers.box_coder(prior, pvar, deltas, code_type="decode_center_size", axis=1)
    assert main.global_block().ops[-1].attr("axis") == 1 and tuple(dec.shape) == (3, 4, 4)
    (got,) = _run(main, startup, {"prior": pv, "pvar": varv, "deltas": dv}, [dec])
    np.testing.assert_allclose(got, ref_decode(dv, pv, varv, True, 1), rtol=1e-10)


def test_iou_similarity_and_box_clip_keep_lod():
    rng = np.random.default_rng(2)
    xv = np.concatenate([lo := rng.uniform(0, 20, (5, 2)), lo + 8], axis=1).astype(np.float32)
    yv = np.concatenate([lo2 := rng.uniform(0, 20, (3, 2)), lo2 + 6], axis=1).astype(np.float32)
    info = np.array([[20.0, 25.0, 1.0], [30.0, 30.0, 2.0]], np.float32)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4], lod_level=1)
        y = layers.data("y", [3, 4], append_batch_size=False)
        im = layers.data("im", [3])
        iou = layers.iou_similarity(x, y, box_normalized=False)
        clipped = layers.box_clip(x, im)
    (op,) = _ops(main, "iou_similarity")
    assert op.input("X") == [x.name] and op.input("Y") == [y.name]
    assert op.attr("box_normalized") is False and tuple(iou.shape) == (-1, 3)
    (cop,) = _ops(main, "box_clip")
    assert cop.input("Input") == [x.name] and cop.input("ImInfo") == [im.name]
    assert cop.output("Output") == [clipped.name] and tuple(clipped.shape) == (-1, 4)
    feed = {"x": fluid.create_lod_tensor(xv, [[2, 3]], fluid.CPUPlace()), "y": yv, "im": info}
    got_iou, got_clip = _run(main, startup, feed, [iou, clipped], return_numpy=False)
    assert got_iou.lod() == [[0, 2, 5]] and got_clip.lod() == [[0, 2, 5]]
    np.testing.assert_allclose(np.array(got_iou), ref_iou(xv.astype(float), yv, False),
                               rtol=1e-5)
    np.testing.assert_allclose(np.array(got_clip), ref_box_clip(xv, info, [0, 2, 5]))
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="x and y must be \\[rows, 4\\]"):
            layers.iou_similarity(layers.data("a", [2, 4]), y)
        with pytest.raises(TypeError, match="im_info .* must be float32 or float64"):
            layers.box_clip(x, layers.data("b", [3], dtype="int64"))


def test_program_gradients_through_box_weights():
    # the box ops have no gradient (as in Fluid): backward skips them and the fc weights'
    # gradient treats the IoU and decoded boxes as constants
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((3, 5))
    boxes = np.concatenate([lo := rng.uniform(0, 0.5, (3, 2)), lo + 0.3], axis=1)
    pv = np.concatenate([lo2 := rng.uniform(0, 0.5, (4, 2)), lo2 + 0.25], axis=1)

    def build():
        x = layers.data("x", [5], dtype="float64")
        b = layers.data("b", [4], dtype="float64")
        p = layers.data("p", [4, 4], dtype="float64", append_batch_size=False)
        h = layers.fc(x, 4)
        iou = layers.iou_similarity(b, p)
        enc = layers.box_coder(p, [0.1, 0.1, 0.2, 0.2], b)
        w = layers.reduce_sum(enc, dim=2)
        return layers.reduce_sum(h * h * iou + h * w)

    res = program_grads_and_numeric(build, {"x": xv, "b": boxes, "p": pv},
                                    ["fc_0.w_0", "fc_0.b_0"])
    for analytic, numeric in res.values():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-6)


def test_density_prior_box_and_anchor_generator_layers():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        feat = layers.data("feat", [2, 3, 4])
        img = layers.data("img", [3, 24, 32])
        box, var = layers.density_prior_box(feat, img, densities=[3, 1],
                                            fixed_sizes=[8.0, 16], fixed_ratios=[1.0, 2.0],
                                            clip=True)
        flat, _ = layers.density_prior_box(feat, img, [2], [8.0], [1.0], steps=[7.0, 9.0],
                                           flatten_to_2d=True)
        anchors, avar = layers.anchor_generator(feat, [64, 128.0], [0.5, 1.0, 2.0],
                                                stride=[16.0, 8.0])
    dop = _ops(main, "density_prior_box")[0]
    assert dop.input("Input") == [feat.name] and dop.input("Image") == [img.name]
    assert dop.attr("densities") == [3, 1] and dop.attr("fixed_sizes") == [8.0, 16.0]
    assert dop.attr("fixed_ratios") == [1.0, 2.0] and dop.attr("flatten_to_2d") is False
    assert dop.attr("variances") == [0.1, 0.1, 0.2, 0.2] and dop.attr("clip") is True
    assert tuple(box.shape) == (3, 4, 20, 4) and tuple(flat.shape) == (48, 4)
    assert box.stop_gradient and var.stop_gradient
    (aop,) = _ops(main, "anchor_generator")
    assert aop.output("Anchors") == [anchors.name] and aop.output("Variances") == [avar.name]
    assert aop.attr("anchor_sizes") == [64.0, 128.0] and aop.attr("stride") == [16.0, 8.0]
    assert aop.attr("offset") == 0.5 and tuple(anchors.shape) == (3, 4, 6, 4)
    feed = {"feat": np.zeros((1, 2, 3, 4), np.float32),
            "img": np.zeros((1, 3, 24, 32), np.float32)}
    got = _run(main, startup, feed, [box, var, flat, anchors, avar])
    want, want_var = ref_density_prior_box(3, 4, 24, 32, [8.0, 16.0], [1.0, 2.0], [3, 1],
                                           (0, 0), 0.5, True, [0.1, 0.1, 0.2, 0.2])
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want_var, rtol=1e-6)
    want_flat, _ = ref_density_prior_box(3, 4, 24, 32, [8.0], [1.0], [2], (7.0, 9.0), 0.5,
                                         False, [0.1, 0.1, 0.2, 0.2])
    np.testing.assert_allclose(got[2], want_flat.reshape(-1, 4), rtol=1e-5, atol=1e-6)
    want_a, want_av = ref_anchor_generator(3, 4, [64.0, 128.0], [0.5, 1.0, 2.0], (16.0, 8.0),
                                           0.5, [0.1, 0.1, 0.2, 0.2])
    np.testing.assert_allclose(got[3], want_a, rtol=1e-6)
    np.testing.assert_allclose(got[4], want_av, rtol=1e-6)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        f, i = layers.data("f", [2, 3, 4]), layers.data("i", [3, 24, 32])
        with pytest.raises(ValueError, match="densities .1. and fixed_sizes .2. must have"):
            layers.density_prior_box(f, i, [1], [8.0, 4.0], [1.0])
        with pytest.raises(TypeError, match="densities must be a list or tuple"):
            layers.density_prior_box(f, i, None, [8.0], [1.0])
        with pytest.raises(ValueError, match="stride must be a list or tuple of length 2"):
            layers.anchor_generator(f, [64.0], [1.0], stride=None)
        with pytest.raises(ValueError, match="anchor_sizes and aspect_ratios must be given"):
            layers.anchor_generator(f, stride=[16.0, 16.0])


def test_polygon_box_transform_and_box_decoder_and_assign_layers():
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((2, 4, 3, 5)).astype(np.float32)
    n, classes = 5, 3
    pv = np.concatenate([lo := rng.uniform(0, 20, (n, 2)), lo + 10], axis=1).astype(np.float32)
    tv = rng.standard_normal((n, classes * 4)).astype(np.float32)
    sv = rng.uniform(0, 1, (n, classes)).astype(np.float32)
    varv = np.array([0.1, 0.1, 0.2, 0.2], np.float32)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4, 3, 5])
        out = layers.polygon_box_transform(x)
        prior = layers.data("prior", [4])
        var = layers.data("var", [4], append_batch_size=False)
        target = layers.data("target", [classes * 4])
        score = layers.data("score", [classes])
        dec, assign = layers.box_decoder_and_assign(prior, var, target, score, 4.135)
    (pop,) = _ops(main, "polygon_box_transform")
    assert pop.input("Input") == [x.name] and tuple(out.shape) == (-1, 4, 3, 5)
    (bop,) = _ops(main, "box_decoder_and_assign")
    assert bop.input("PriorBoxVar") == [var.name] and bop.input("BoxScore") == [score.name]
    assert bop.output("DecodeBox") == [dec.name] and bop.output("OutputAssignBox") == [
        assign.name]
    assert bop.attr("box_clip") == pytest.approx(4.135)
    assert tuple(dec.shape) == (-1, classes * 4) and tuple(assign.shape) == (-1, 4)
    got = _run(main, startup, {"x": xv, "prior": pv, "var": varv, "target": tv, "score": sv},
               [out, dec, assign])
    h_idx = np.arange(3)[None, None, :, None]
    w_idx = np.arange(5)[None, None, None, :]
    want = np.where(np.arange(4)[None, :, None, None] % 2 == 0, 4 * w_idx, 4 * h_idx) - xv
    np.testing.assert_allclose(got[0], want, rtol=1e-6)
    want_dec, want_assign = ref_box_decoder_and_assign(pv.astype(float), varv.astype(float),
                                                       tv.astype(float), sv, 4.135)
    np.testing.assert_allclose(got[1], want_dec, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[2], want_assign, rtol=1e-5, atol=1e-4)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="with an even C"):
            layers.polygon_box_transform(layers.data("odd", [3, 3, 5]))
        with pytest.raises(TypeError, match="box_clip must be a float"):
            layers.box_decoder_and_assign(prior, var, target, score, "4")


def test_box_coder_and_decoder_and_assign_share_fluids_lods():
    rng = np.random.default_rng(5)
    pv = np.concatenate([lo := rng.uniform(0, 0.5, (3, 2)), lo + 0.3], axis=1)
    tv = np.concatenate([lo2 := rng.uniform(0, 0.5, (3, 2)), lo2 + 0.2], axis=1)
    dv = rng.standard_normal((3, 3, 4)) * 0.3
    place = fluid.CPUPlace()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        prior = layers.data("prior", [4], dtype="float64", lod_level=1)
        target = layers.data("target", [4], dtype="float64", lod_level=1)
        deltas = layers.data("deltas", [3, 4], dtype="float64", lod_level=1)
        enc = layers.box_coder(prior, [0.1, 0.1, 0.2, 0.2], target)
        dec0 = layers.box_coder(prior, [0.1, 0.1, 0.2, 0.2], deltas,
                                code_type="decode_center_size")
        dec1 = layers.box_coder(prior, [0.1, 0.1, 0.2, 0.2], deltas,
                                code_type="decode_center_size", axis=1)
        score = layers.data("score", [2], dtype="float64", lod_level=1)
        tb = layers.data("tb", [8], dtype="float64", lod_level=1)
        var = layers.data("var", [4], dtype="float64", append_batch_size=False)
        dba, assign = layers.box_decoder_and_assign(prior, var, tb, score, 4.135)
    feed = {"prior": fluid.create_lod_tensor(pv, [[1, 2]], place),
            "target": fluid.create_lod_tensor(tv, [[2, 1]], place),
            "deltas": fluid.create_lod_tensor(dv, [[3]], place),
            "score": fluid.create_lod_tensor(rng.uniform(0, 1, (3, 2)), [[2, 1]], place),
            "tb": fluid.create_lod_tensor(rng.standard_normal((3, 8)), [[2, 1]], place),
            "var": np.array([0.1, 0.1, 0.2, 0.2])}
    got = _run(main, startup, feed, [enc, dec0, dec1, dba, assign], return_numpy=False)
    assert got[0].lod() == [[0, 2, 3]]  # TargetBox's
    assert got[1].lod() == [[0, 3]]  # TargetBox's (axis 0)
    assert got[2].lod() == [[0, 1, 3]]  # PriorBox's (axis 1)
    assert got[3].lod() == [[0, 2, 3]] and got[4].lod() == [[0, 1, 3]]
    np.testing.assert_allclose(np.array(got[2]),
                               ref_decode(dv, pv, [0.1, 0.1, 0.2, 0.2], True, 1), rtol=1e-10)
