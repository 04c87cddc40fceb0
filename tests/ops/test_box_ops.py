"""The box kernels (prior_box, density_prior_box, anchor_generator, box_coder,
iou_similarity, box_clip, polygon_box_transform, box_decoder_and_assign) against loop
references written after Paddle's unit tests (``test_prior_box_op.py``,
``test_density_prior_box_op.py``, ``test_anchor_generator_op.py``, ``test_box_coder_op.py``,
``test_iou_similarity_op.py``, ``test_box_clip_op.py``, ``test_polygon_box_transform.py``,
``test_box_decoder_and_assign_op.py``), and their errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_fluid.ops import registry

from . import run_op

# ---------------------------------------------------------------------------------------------
# references, one box at a time


def ref_prior_box(fh, fw, ih, iw, mins, maxs, ars, flip, clip, step, offset, var, order):
    ratios = [1.0]
    for a in ars:
        if all(abs(a - r) >= 1e-6 for r in ratios):
            ratios.append(a)
            if flip:
                ratios.append(1.0 / a)
    n_priors = len(ratios) * len(mins) + len(maxs)
    sw, sh = step if step[0] and step[1] else (iw / fw, ih / fh)
    sizes = []  # (width, height) of each prior, the same at every position
    for s, mn in enumerate(mins):
        big = [(math.sqrt(mn * maxs[s]),) * 2] if maxs else []
        if order:
            sizes += [(mn, mn)] + big + [(mn * math.sqrt(r), mn / math.sqrt(r))
                                         for r in ratios if abs(r - 1.0) > 1e-6]
        else:
            sizes += [(mn * math.sqrt(r), mn / math.sqrt(r)) for r in ratios] + big
    assert len(sizes) == n_priors
    boxes = np.zeros((fh, fw, n_priors, 4))
    for h in range(fh):
        for w in range(fw):
            cx, cy = (w + offset) * sw, (h + offset) * sh
            for k, (bw, bh) in enumerate(sizes):
                boxes[h, w, k] = [(cx - bw / 2) / iw, (cy - bh / 2) / ih,
                                  (cx + bw / 2) / iw, (cy + bh / 2) / ih]
    if clip:
        boxes = np.clip(boxes, 0, 1)
    return boxes, np.tile(np.asarray(var, float), (fh, fw, n_priors, 1))


def _prior_attrs(**kw):
    a = {"min_sizes": [2.0, 4.0], "max_sizes": [5.0, 10.0], "aspect_ratios": [2.0, 3.0],
         "variances": [0.1, 0.1, 0.2, 0.2], "flip": True, "clip": True, "step_w": 0.0,
         "step_h": 0.0, "offset": 0.5, "min_max_aspect_ratios_order": False}
    a.update(kw)
    return a


@pytest.mark.parametrize("kw", [
    {},
    {"min_max_aspect_ratios_order": True},
    {"max_sizes": [], "flip": False, "clip": False, "aspect_ratios": [2.0, 2.0, 0.5]},
    {"step_w": 3.0, "step_h": 2.5, "offset": 0.2, "clip": False},
])
def test_prior_box_matches_loops(kw):
    attrs = _prior_attrs(**kw)
    inp = np.zeros((2, 3, 4, 5), np.float32)
    image = np.zeros((2, 3, 16, 20), np.float32)
    res = run_op("prior_box", {"Input": [inp], "Image": [image]}, attrs)
    want_b, want_v = ref_prior_box(
        4, 5, 16, 20, attrs["min_sizes"], attrs["max_sizes"], attrs["aspect_ratios"],
        attrs["flip"], attrs["clip"], (attrs["step_w"], attrs["step_h"]), attrs["offset"],
        attrs["variances"], attrs["min_max_aspect_ratios_order"])
    assert res["Boxes"][0].dtype == np.float32 and res["Boxes"][0].shape == want_b.shape
    np.testing.assert_allclose(res["Boxes"][0], want_b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["Variances"][0], want_v, rtol=1e-6)


def test_prior_box_errors():
    inp, image = np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 8, 8))
    with pytest.raises(ValueError, match="max_sizes has 1 sizes but min_sizes has 2"):
        run_op("prior_box", {"Input": [inp], "Image": [image]}, _prior_attrs(max_sizes=[5.0]))
    with pytest.raises(ValueError, match=r"max_sizes\[1\] = 3.0 must be greater"):
        run_op("prior_box", {"Input": [inp], "Image": [image]},
               _prior_attrs(max_sizes=[5.0, 3.0]))
    with pytest.raises(ValueError, match="variances must be 4 positive values"):
        run_op("prior_box", {"Input": [inp], "Image": [image]}, _prior_attrs(variances=[0.1]))
    with pytest.raises(ValueError, match="min_sizes must be a non-empty list"):
        run_op("prior_box", {"Input": [inp], "Image": [image]}, _prior_attrs(min_sizes=[]))
    with pytest.raises(ValueError, match="must be NCHW"):
        run_op("prior_box", {"Input": [inp[0]], "Image": [image]}, _prior_attrs())


def test_box_ops_have_no_grad():
    # Fluid 1.8 registers all four with EmptyGradOpMaker
    for op in ("prior_box", "density_prior_box", "anchor_generator", "box_coder",
               "iou_similarity", "box_clip", "polygon_box_transform", "box_decoder_and_assign"):
        assert registry.get(op).grad is None


# ---------------------------------------------------------------------------------------------
# box_coder


def _geom(b, norm):
    """A target box: its centre is the midpoint of its corners."""
    w, h = b[2] - b[0] + norm, b[3] - b[1] + norm
    return w, h, b[0] + w / 2 - norm / 2, b[1] + h / 2 - norm / 2


def _prior_geom(b, norm):
    """A prior box as box_coder_op.h takes it: centre x0 + w / 2, ``w`` counting the end pixel
    when not normalised (half a pixel right of the midpoint)."""
    w, h = b[2] - b[0] + norm, b[3] - b[1] + norm
    return w, h, b[0] + w / 2, b[1] + h / 2


def ref_encode(target, prior, var, normalized):
    norm = 0.0 if normalized else 1.0
    out = np.zeros((len(target), len(prior), 4))
    for i, t in enumerate(target):
        tw, th, tx, ty = _geom(t, norm)
        for j, p in enumerate(prior):
            pw, ph, px, py = _prior_geom(p, norm)
            v = var[j] if var is not None and np.ndim(var) == 2 else (
                var if var is not None else [1, 1, 1, 1])
            out[i, j] = [(tx - px) / pw / v[0], (ty - py) / ph / v[1],
                         math.log(abs(tw / pw)) / v[2], math.log(abs(th / ph)) / v[3]]
    return out


def ref_decode(target, prior, var, normalized, axis):
    norm = 0.0 if normalized else 1.0
    out = np.zeros_like(target)
    for i in range(target.shape[0]):
        for j in range(target.shape[1]):
            k = j if axis == 0 else i
            pw, ph, px, py = _prior_geom(prior[k], norm)
            v = var[k] if var is not None and np.ndim(var) == 2 else (
                var if var is not None else [1, 1, 1, 1])
            d = target[i, j]
            cx, cy = v[0] * d[0] * pw + px, v[1] * d[1] * ph + py
            w, h = math.exp(v[2] * d[2]) * pw, math.exp(v[3] * d[3]) * ph
            out[i, j] = [cx - w / 2, cy - h / 2, cx + w / 2 - norm, cy + h / 2 - norm]
    return out


def _boxes(rng, n, scale=1.0):
    lo = rng.uniform(0, 0.5, (n, 2)) * scale
    return np.concatenate([lo, lo + rng.uniform(0.1, 0.5, (n, 2)) * scale], axis=1)


@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("var_kind", ["tensor", "attr", "none"])
def test_box_coder_encode(normalized, var_kind):
    rng = np.random.default_rng(1)
    scale = 1.0 if normalized else 20.0
    prior, target = _boxes(rng, 5, scale), _boxes(rng, 3, scale)
    pvar = rng.uniform(0.1, 0.3, (5, 4))
    ins = {"PriorBox": [prior], "TargetBox": [target]}
    attrs = {"box_normalized": normalized}
    var = None
    if var_kind == "tensor":
        ins["PriorBoxVar"], var = [pvar], pvar
    elif var_kind == "attr":
        attrs["variance"] = var = [0.1, 0.2, 0.3, 0.4]
    got = run_op("box_coder", ins, attrs)["OutputBox"][0]
    np.testing.assert_allclose(got, ref_encode(target, prior, var, normalized), rtol=1e-10)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("var_kind", ["tensor", "attr", "none"])
@pytest.mark.parametrize("normalized", [True, False])
def test_box_coder_decode(axis, var_kind, normalized):
    rng = np.random.default_rng(2)
    n, m = 3, 4
    k = m if axis == 0 else n
    prior = _boxes(rng, k, 1.0 if normalized else 30.0)
    target = rng.standard_normal((n, m, 4)) * 0.3
    ins = {"PriorBox": [prior], "TargetBox": [target]}
    attrs = {"code_type": "decode_center_size", "axis": axis, "box_normalized": normalized}
    var = None
    if var_kind == "tensor":
        var = rng.uniform(0.1, 0.3, (k, 4))
        ins["PriorBoxVar"] = [var]
    elif var_kind == "attr":
        attrs["variance"] = var = [0.1, 0.1, 0.2, 0.2]
    got = run_op("box_coder", ins, attrs)["OutputBox"][0]
    np.testing.assert_allclose(got, ref_decode(target, prior, var, normalized, axis),
                               rtol=1e-10, atol=1e-12)


def test_box_coder_encode_then_decode_round_trips():
    rng = np.random.default_rng(3)
    prior, target = _boxes(rng, 4), _boxes(rng, 1)
    var = rng.uniform(0.1, 0.3, (4, 4))
    enc = run_op("box_coder", {"PriorBox": [prior], "PriorBoxVar": [var],
                               "TargetBox": [target]})["OutputBox"][0]
    dec = run_op("box_coder", {"PriorBox": [prior], "PriorBoxVar": [var], "TargetBox": [enc]},
                 {"code_type": "decode_center_size"})["OutputBox"][0]
    np.testing.assert_allclose(dec, np.broadcast_to(target[:, None], dec.shape), atol=1e-12)


def test_box_coder_errors():
    prior, t2, t3 = np.zeros((4, 4)), np.zeros((3, 4)), np.zeros((3, 4, 4))
    with pytest.raises(ValueError, match="code_type must be 'encode_center_size'"):
        run_op("box_coder", {"PriorBox": [prior], "TargetBox": [t3]}, {"code_type": "x"})
    with pytest.raises(ValueError, match="axis must be 0 or 1, got 2"):
        run_op("box_coder", {"PriorBox": [prior], "TargetBox": [t3]},
               {"code_type": "decode_center_size", "axis": 2})
    with pytest.raises(ValueError, match=r"with axis=1 TargetBox's dim 0 \(3\) must equal"):
        run_op("box_coder", {"PriorBox": [prior], "TargetBox": [t3]},
               {"code_type": "decode_center_size", "axis": 1})
    with pytest.raises(ValueError, match="encode_center_size needs TargetBox"):
        run_op("box_coder", {"PriorBox": [prior], "TargetBox": [t3]})
    with pytest.raises(ValueError, match="decode_center_size needs TargetBox"):
        run_op("box_coder", {"PriorBox": [prior], "TargetBox": [t2]},
               {"code_type": "decode_center_size"})
    with pytest.raises(ValueError, match="PriorBoxVar.*must have PriorBox's shape"):
        run_op("box_coder", {"PriorBox": [prior], "PriorBoxVar": [t2], "TargetBox": [t2]})
    with pytest.raises(ValueError, match="attr variance must hold 4 values"):
        run_op("box_coder", {"PriorBox": [prior], "TargetBox": [t2]}, {"variance": [0.1]})


# ---------------------------------------------------------------------------------------------
# iou_similarity and box_clip


def ref_iou(x, y, normalized):
    norm = 0.0 if normalized else 1.0
    out = np.zeros((len(x), len(y)))
    for i, a in enumerate(x):
        for j, b in enumerate(y):
            iw = max(min(a[2], b[2]) - max(a[0], b[0]) + norm, 0.0)
            ih = max(min(a[3], b[3]) - max(a[1], b[1]) + norm, 0.0)
            inter = iw * ih
            area_a = (a[2] - a[0] + norm) * (a[3] - a[1] + norm)
            area_b = (b[2] - b[0] + norm) * (b[3] - b[1] + norm)
            out[i, j] = inter / (area_a + area_b - inter)
    return out


@pytest.mark.parametrize("normalized", [True, False])
def test_iou_similarity_matches_loops(normalized):
    rng = np.random.default_rng(4)
    scale = 1.0 if normalized else 10.0
    x, y = _boxes(rng, 6, scale), _boxes(rng, 5, scale)
    y[0] = [5.0, 5.0, 6.0, 6.0]  # disjoint from everything: IoU 0
    got = run_op("iou_similarity", {"X": [x], "Y": [y]},
                 {"box_normalized": normalized})["Out"][0]
    np.testing.assert_allclose(got, ref_iou(x, y, normalized), rtol=1e-12)
    assert got.shape == (6, 5)
    if normalized:
        assert (got[:, 0] == 0).all()
    same = run_op("iou_similarity", {"X": [x], "Y": [x]})["Out"][0]
    np.testing.assert_allclose(np.diag(same), 1.0)
    with pytest.raises(ValueError, match=r"Input\(Y\) must be \[rows, 4\]"):
        run_op("iou_similarity", {"X": [x], "Y": [y[:, :3]]})


def ref_box_clip(boxes, im_info, offsets):
    out = boxes.copy()
    for n in range(len(offsets) - 1):
        h, w, s = im_info[n]
        wl, hl = math.floor(w / s + 0.5) - 1, math.floor(h / s + 0.5) - 1
        for r in range(offsets[n], offsets[n + 1]):
            for idx in np.ndindex(boxes.shape[1:-1]):
                b = out[(r,) + idx]
                b[:] = [min(max(b[0], 0), wl), min(max(b[1], 0), hl),
                        min(max(b[2], 0), wl), min(max(b[3], 0), hl)]
    return out


def test_box_clip_per_image():
    rng = np.random.default_rng(5)
    boxes = rng.uniform(-10, 60, (5, 2, 4))
    im_info = np.array([[30.0, 40.0, 1.0], [50.0, 45.0, 2.0]])
    res = run_op("box_clip", {"Input": [boxes], "ImInfo": [im_info]},
                 {"_lods": {"Input": [((0, 2, 5),)]}})
    np.testing.assert_allclose(res["Output"][0], ref_box_clip(boxes, im_info, [0, 2, 5]))
    assert res["@LOD"] == {"Output": [((0, 2, 5),)]}
    one = run_op("box_clip", {"Input": [boxes[:, 0]], "ImInfo": [im_info[:1]]},
                 {"_lods": {"Input": [None]}})["Output"][0]
    np.testing.assert_allclose(one, ref_box_clip(boxes[:, 0], im_info[:1], [0, 5]))


def test_box_clip_errors():
    boxes, info = np.zeros((3, 4)), np.ones((2, 3))
    with pytest.raises(ValueError, match="Input has no LoD but ImInfo has 2 images"):
        run_op("box_clip", {"Input": [boxes], "ImInfo": [info]}, {"_lods": {}})
    with pytest.raises(ValueError, match="LoD gives 1 images but ImInfo has 2 rows"):
        run_op("box_clip", {"Input": [boxes], "ImInfo": [info]},
               {"_lods": {"Input": [((0, 3),)]}})
    with pytest.raises(ValueError, match="ImInfo must be"):
        run_op("box_clip", {"Input": [boxes], "ImInfo": [np.ones((2, 2))]}, {"_lods": {}})


# ---------------------------------------------------------------------------------------------
# density_prior_box, anchor_generator, polygon_box_transform, box_decoder_and_assign


def ref_density_prior_box(fh, fw, ih, iw, sizes, ratios, dens, step, offset, clip, var):
    sw, sh = step if step[0] and step[1] else (iw / fw, ih / fh)
    avg = int((sw + sh) * 0.5)
    n_priors = len(ratios) * sum(d * d for d in dens)
    boxes = np.zeros((fh, fw, n_priors, 4))
    for h in range(fh):
        for w in range(fw):
            cx, cy = (w + offset) * sw, (h + offset) * sh
            k = 0
            for size, d in zip(sizes, dens, strict=True):
                shift = avg // d
                for r in ratios:
                    bw, bh = size * math.sqrt(r), size / math.sqrt(r)
                    for di in range(d):
                        for dj in range(d):
                            x = cx - avg / 2 + shift / 2 + dj * shift
                            y = cy - avg / 2 + shift / 2 + di * shift
                            boxes[h, w, k] = [max((x - bw / 2) / iw, 0), max((y - bh / 2) / ih, 0),
                                              min((x + bw / 2) / iw, 1), min((y + bh / 2) / ih, 1)]
                            k += 1
    if clip:
        boxes = np.clip(boxes, 0, 1)
    return boxes, np.tile(np.asarray(var, float), (fh, fw, n_priors, 1))


@pytest.mark.parametrize("flatten", [False, True])
@pytest.mark.parametrize("step", [(0.0, 0.0), (7.0, 9.0)])
def test_density_prior_box_matches_loops(flatten, step):
    attrs = {"variances": [0.1, 0.1, 0.2, 0.2], "clip": True, "flatten_to_2d": flatten,
             "step_w": step[0], "step_h": step[1], "offset": 0.5, "fixed_sizes": [8.0, 16.0],
             "fixed_ratios": [1.0, 2.0], "densities": [3, 1]}
    inp, image = np.zeros((1, 2, 3, 4), np.float32), np.zeros((1, 3, 24, 32), np.float32)
    res = run_op("density_prior_box", {"Input": [inp], "Image": [image]}, attrs)
    want_b, want_v = ref_density_prior_box(3, 4, 24, 32, [8.0, 16.0], [1.0, 2.0], [3, 1],
                                           step, 0.5, True, attrs["variances"])
    if flatten:
        want_b, want_v = want_b.reshape(-1, 4), want_v.reshape(-1, 4)
    np.testing.assert_allclose(res["Boxes"][0], want_b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["Variances"][0], want_v, rtol=1e-6)
    with pytest.raises(ValueError, match="fixed_sizes has 2 sizes but densities has 1"):
        run_op("density_prior_box", {"Input": [inp], "Image": [image]},
               dict(attrs, densities=[2]))
    with pytest.raises(ValueError, match="variances must be 4 positive values"):
        run_op("density_prior_box", {"Input": [inp], "Image": [image]},
               dict(attrs, variances=[0.1, 0.0, 0.2, 0.2]))


def ref_anchor_generator(fh, fw, sizes, ratios, stride, offset, var):
    sw, sh = stride
    out = np.zeros((fh, fw, len(sizes) * len(ratios), 4))
    for h in range(fh):
        for w in range(fw):
            xc, yc = w * sw + offset * (sw - 1), h * sh + offset * (sh - 1)
            k = 0
            for ar in ratios:
                for size in sizes:
                    bw = round(math.sqrt(sw * sh / ar))  # no .5 ties in these cases
                    bh = round(bw * ar)
                    aw, ah = size / sw * bw, size / sh * bh
                    out[h, w, k] = [xc - 0.5 * (aw - 1), yc - 0.5 * (ah - 1),
                                    xc + 0.5 * (aw - 1), yc + 0.5 * (ah - 1)]
                    k += 1
    return out, np.tile(np.asarray(var, float), (fh, fw, len(sizes) * len(ratios), 1))


def test_anchor_generator_matches_loops():
    attrs = {"anchor_sizes": [64.0, 128.0, 256.0], "aspect_ratios": [0.5, 1.0, 2.0],
             "variances": [0.1, 0.1, 0.2, 0.2], "stride": [16.0, 8.0], "offset": 0.5}
    inp = np.zeros((2, 3, 4, 5), np.float64)
    res = run_op("anchor_generator", {"Input": [inp]}, attrs)
    want, want_v = ref_anchor_generator(4, 5, attrs["anchor_sizes"], attrs["aspect_ratios"],
                                        (16.0, 8.0), 0.5, attrs["variances"])
    np.testing.assert_allclose(res["Anchors"][0], want, rtol=1e-12)
    np.testing.assert_allclose(res["Variances"][0], want_v)
    with pytest.raises(ValueError, match="stride must be 2 positive values"):
        run_op("anchor_generator", {"Input": [inp]}, dict(attrs, stride=[16.0]))
    with pytest.raises(ValueError, match="anchor_sizes .* must be non-empty"):
        run_op("anchor_generator", {"Input": [inp]}, dict(attrs, anchor_sizes=[]))


def test_polygon_box_transform_matches_loops():
    x = np.random.default_rng(6).standard_normal((2, 4, 3, 5))
    got = run_op("polygon_box_transform", {"Input": [x]})["Output"][0]
    want = np.zeros_like(x)
    for n, c, h, w in np.ndindex(x.shape):
        want[n, c, h, w] = (4 * w if c % 2 == 0 else 4 * h) - x[n, c, h, w]
    np.testing.assert_allclose(got, want)
    with pytest.raises(ValueError, match="with an even C"):
        run_op("polygon_box_transform", {"Input": [x[:, :3]]})


def ref_box_decoder_and_assign(prior, var, target, score, clip):
    n, classes = score.shape
    dec = np.zeros_like(target)
    assign = np.zeros_like(prior)
    for i in range(n):
        pw, ph = prior[i, 2] - prior[i, 0] + 1, prior[i, 3] - prior[i, 1] + 1
        px, py = prior[i, 0] + pw / 2, prior[i, 1] + ph / 2
        for j in range(classes):
            tx, ty, tw, th = target[i, 4 * j:4 * j + 4]
            cx, cy = var[0] * tx * pw + px, var[1] * ty * ph + py
            w = math.exp(min(var[2] * tw, clip)) * pw
            h = math.exp(min(var[3] * th, clip)) * ph
            dec[i, 4 * j:4 * j + 4] = [cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1]
        best, best_score = -1, -1.0
        for j in range(1, classes):
            if score[i, j] > best_score:
                best, best_score = j, score[i, j]
        assign[i] = dec[i, 4 * best:4 * best + 4] if best > 0 else prior[i]
    return dec, assign


def test_box_decoder_and_assign_matches_loops():
    rng = np.random.default_rng(7)
    n, classes = 6, 4
    prior = _boxes(rng, n, 30.0)
    var = np.array([0.1, 0.1, 0.2, 0.2])
    target = rng.standard_normal((n, classes * 4))
    target[0, 2] = 40.0  # past box_clip: the width is clipped
    score = rng.uniform(0, 1, (n, classes))
    score[1, 1:] = -2.0  # no foreground score above -1: the prior box is kept
    score[2, 0] = 5.0  # the background never wins
    res = run_op("box_decoder_and_assign", {"PriorBox": [prior], "PriorBoxVar": [var],
                                            "TargetBox": [target], "BoxScore": [score]},
                 {"box_clip": 4.135})
    want_dec, want_assign = ref_box_decoder_and_assign(prior, var, target, score, 4.135)
    np.testing.assert_allclose(res["DecodeBox"][0], want_dec, rtol=1e-12)
    np.testing.assert_allclose(res["OutputAssignBox"][0], want_assign, rtol=1e-12)
    np.testing.assert_allclose(res["OutputAssignBox"][0][1], prior[1])
    with pytest.raises(ValueError, match=r"PriorBoxVar must be \[4\]"):
        run_op("box_decoder_and_assign", {"PriorBox": [prior], "PriorBoxVar": [var[None]],
                                          "TargetBox": [target], "BoxScore": [score]})
    with pytest.raises(ValueError, match=r"TargetBox must be \[N, classes · 4\]"):
        run_op("box_decoder_and_assign", {"PriorBox": [prior], "PriorBoxVar": [var],
                                          "TargetBox": [target[:, :8]], "BoxScore": [score]})


# ---------------------------------------------------------------------------------------------
# the same kernels on (strict) CuPy


def _device_cases():
    rng = np.random.default_rng(8)
    prior, target = _boxes(rng, 4, 20.0), _boxes(rng, 3, 20.0)
    pvar = rng.uniform(0.1, 0.3, (4, 4))
    feat, image = np.zeros((1, 2, 3, 4)), np.zeros((1, 3, 24, 32))
    score = rng.uniform(0, 1, (4, 3))
    score[0, 1:] = -2.0
    return [
        ("prior_box", {"Input": [feat], "Image": [image]}, _prior_attrs()),
        ("density_prior_box", {"Input": [feat], "Image": [image]},
         {"variances": [0.1, 0.1, 0.2, 0.2], "fixed_sizes": [8.0], "fixed_ratios": [1.0, 2.0],
          "densities": [2]}),
        ("anchor_generator", {"Input": [feat]},
         {"anchor_sizes": [32.0, 64.0], "aspect_ratios": [0.5, 1.0]}),
        ("box_coder", {"PriorBox": [prior], "PriorBoxVar": [pvar], "TargetBox": [target]},
         {"box_normalized": False}),
        ("box_coder", {"PriorBox": [prior], "TargetBox": [rng.standard_normal((3, 4, 4))]},
         {"code_type": "decode_center_size", "variance": [0.1, 0.1, 0.2, 0.2]}),
        ("box_coder", {"PriorBox": [prior[:3]], "PriorBoxVar": [pvar[:3]],
                       "TargetBox": [rng.standard_normal((3, 4, 4))]},
         {"code_type": "decode_center_size", "axis": 1}),
        ("iou_similarity", {"X": [target], "Y": [prior]}, {"box_normalized": False}),
        ("box_clip", {"Input": [rng.uniform(-5, 40, (4, 4))],
                      "ImInfo": [np.array([[20.0, 30.0, 1.0], [40.0, 40.0, 2.0]])]},
         {"_lods": {"Input": [((0, 1, 4),)]}}),
        ("polygon_box_transform", {"Input": [rng.standard_normal((2, 4, 3, 5))]}, {}),
        ("box_decoder_and_assign",
         {"PriorBox": [prior], "PriorBoxVar": [np.array([0.1, 0.1, 0.2, 0.2])],
          "TargetBox": [rng.standard_normal((4, 12))], "BoxScore": [score]}, {}),
    ]


@pytest.mark.parametrize("case", _device_cases(), ids=lambda c: c[0])
def test_box_kernels_on_cupy_match_numpy(device_xp, case):
    cp = device_xp
    op, ins, attrs = case
    cpu = run_op(op, ins, attrs)
    gpu = run_op(op, {k: [cp.asarray(a) for a in v] for k, v in ins.items()}, attrs)
    assert gpu.pop("@LOD", None) == cpu.pop("@LOD", None)
    assert set(gpu) == set(cpu)
    for slot in cpu:
        g, c = gpu[slot][0], cpu[slot][0]
        assert isinstance(g, cp.ndarray) and g.dtype == c.dtype and g.shape == c.shape, slot
        np.testing.assert_allclose(cp.asnumpy(g), c, rtol=1e-9, atol=1e-12, err_msg=slot)
