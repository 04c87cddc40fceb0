"""``split_lod_tensor`` / ``merge_lod_tensor`` (IfElse's parting and merging) against a
reference that walks the items one by one, for rows and for LoD sequences; merging the split
parts gives X back; the errors."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops.registry import LOD_KEY

from . import run_op


def _items(x, lod):
    offs = lod[0] if lod else range(len(x) + 1)
    return [x[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]


@pytest.mark.parametrize("lod", [None, ((0, 2, 2, 5, 6),)])
def test_split_then_merge(lod):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    n = len(lod[0]) - 1 if lod else len(x)
    mask = rng.random(n) < 0.5
    mask[0], mask[1] = True, False
    out = run_op("split_lod_tensor", {"X": [x], "Mask": [mask[:, None]]},
                 {"_lods": {"X": [lod], "Mask": [None]}})
    items = _items(x, lod)
    for slot, side in (("OutTrue", True), ("OutFalse", False)):
        chosen = [it for it, m in zip(items, mask, strict=True) if m == side]
        np.testing.assert_array_equal(out[slot][0], np.concatenate(chosen))
        want_lod = (tuple(np.concatenate([[0], np.cumsum([len(c) for c in chosen])])),) \
            if lod else None
        assert out[LOD_KEY][slot][0] == want_lod
    merged = run_op("merge_lod_tensor",
                    {"X": [mask[:, None]], "Mask": [mask[:, None]],
                     "InTrue": out["OutTrue"], "InFalse": out["OutFalse"]},
                    {"_lods": {"InTrue": out[LOD_KEY]["OutTrue"],
                               "InFalse": out[LOD_KEY]["OutFalse"]}})
    np.testing.assert_array_equal(merged["Out"][0], x)
    assert merged[LOD_KEY]["Out"][0] == lod


def test_one_side_empty():
    x = np.arange(4, dtype=np.float32)[:, None]
    mask = np.ones((4, 1), bool)
    out = run_op("split_lod_tensor", {"X": [x], "Mask": [mask]}, {"_lods": {}})
    assert out["OutFalse"][0].shape == (0, 1)
    merged = run_op("merge_lod_tensor", {"X": [mask], "Mask": [mask],
                                         "InTrue": [x * 2], "InFalse": out["OutFalse"]},
                    {"_lods": {}})
    np.testing.assert_array_equal(merged["Out"][0], x * 2)


def test_errors():
    x = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="Mask has 2 entries for 3 rows of X"):
        run_op("split_lod_tensor", {"X": [x], "Mask": [np.ones(2, bool)]}, {"_lods": {}})
    with pytest.raises(TypeError, match="Mask must be bool"):
        run_op("split_lod_tensor", {"X": [x], "Mask": [np.ones(3)]}, {"_lods": {}})
    with pytest.raises(NotImplementedError, match="a LoD of 2 levels is not implemented"):
        run_op("split_lod_tensor", {"X": [x], "Mask": [np.ones(1, bool)]},
               {"_lods": {"X": [((0, 1), (0, 3))]}})
    with pytest.raises(ValueError, match="the mask has 2 true entries but InTrue has 1 items"):
        run_op("merge_lod_tensor", {"X": [x], "Mask": [np.array([True, True, False])],
                                    "InTrue": [x[:1]], "InFalse": [x[:1]]}, {"_lods": {}})
