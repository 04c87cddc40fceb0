"""Kernels behind Fluid 1.8's layers/rnn.py decoding API: ``gather_tree``.

``gather_tree`` (Paddle 1.8's ``gather_tree_op.h``) backtracks beam search: for each batch
entry and final beam, the id at the last step is kept and each earlier step takes the id of
the beam the later step came from (``Parents``). It has no gradient, as in Fluid.
"""

from __future__ import annotations

from .registry import array_module, register

__all__: list[str] = []


@register("gather_tree", ("Ids", "Parents"), ("Out",), {})
def gather_tree(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[T-1] = Ids[T-1]; going back, Out[t, b, k] = Ids[t, b, p] where p follows Parents
    from the final beam k (Ids and Parents are ``[max_time, batch, beam]`` integers)."""
    ids, parents = ins["Ids"][0], ins["Parents"][0]
    if ids.ndim != 3 or tuple(ids.shape) != tuple(parents.shape):
        raise ValueError(f"gather_tree: Ids and Parents must both be [max_time, batch, beam], "
                         f"got {list(ids.shape)} and {list(parents.shape)}")
    if ids.dtype.kind not in "iu" or parents.dtype.kind not in "iu":
        raise TypeError(f"gather_tree: Ids and Parents must be int32/int64, got {ids.dtype} "
                        f"and {parents.dtype}")
    xp = array_module(ids, parents)
    out = xp.empty_like(ids)
    steps = ids.shape[0]
    if steps == 0:
        return {"Out": [out]}
    if parents.size and (int(parents.min()) < 0 or int(parents.max()) >= ids.shape[2]):
        raise ValueError(f"gather_tree: every parent must be a beam index in [0, "
                         f"{ids.shape[2]}), got values in [{int(parents.min())}, "
                         f"{int(parents.max())}]")
    beam = xp.broadcast_to(xp.arange(ids.shape[2], dtype=parents.dtype), ids.shape[1:])
    out[steps - 1] = ids[steps - 1]
    parent = xp.take_along_axis(parents[steps - 1], beam, axis=1)
    for t in range(steps - 2, -1, -1):  # the beam each step's entry came from, step by step
        out[t] = xp.take_along_axis(ids[t], parent, axis=1)
        parent = xp.take_along_axis(parents[t], parent, axis=1)
    return {"Out": [out]}
