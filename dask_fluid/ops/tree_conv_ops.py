"""``tree_conv``: the tree-based convolution of Fluid 1.8 (``tree_conv_op.h`` and
``math/tree2col.cc``, after Mou et al.'s TBCNN), with its gradient.

For each sample, the edges ``EdgeSet[b]`` (``[max_edges, 2]`` int pairs ``(parent, child)``,
node ids from 1, read up to the first pair with a 0) give each node its ordered children. The
patch of node ``p`` is ``p`` and its descendants less than ``max_depth`` levels below. A patch
member at depth ``d`` (0 for ``p``), the ``i``-th (from 1) of its parent's ``n`` children,
weighs in with the continuous binary tree coefficients

- ``eta_t = (max_depth − d) / max_depth``,
- ``eta_l = (1 − eta_t) · ((i − 1) / (n − 1), or 0.5 when n = 1)``,
- ``eta_r = (1 − eta_t) · (1 − eta_l)`` (Paddle's formula: ``eta_l`` already holds the
  ``1 − eta_t`` factor),

and ``patch[p, f, k] = Σ eta_k · NodesVector[b, member − 1, f]`` for ``k`` = (l, r, t).
``Out[b, p − 1] = patch[p] · Filter`` with Filter ``[feature, 3, output_size, num_filters]``;
rows past the node count (``#edges + 1``) stay zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots

_TC_ATTRS = {"max_depth": 2}


def _children(edges: np.ndarray) -> tuple[list[list[int]], int]:
    """Each node's children (index = node id) and the node count, as Paddle's
    Tree2ColUtil::construct_tree: the count is the number of non-zero pairs plus one."""
    nonzero = (edges[:, 0] != 0) & (edges[:, 1] != 0)
    count = int(nonzero.sum()) + 1
    tree: list[list[int]] = [[] for _ in range(count + 1)]
    for u, v in edges.tolist():
        if u == 0 or v == 0:
            break
        if not (0 < u <= count and 0 < v <= count):
            raise ValueError(f"tree_conv: edge ({u}, {v}) names a node outside [1, {count}]")
        tree[u].append(v)
    return tree, count


def _patch_weights(edges: np.ndarray, max_depth: int) -> tuple[np.ndarray, int]:
    """``E [count, count, 3]``: E[p − 1, v − 1, k] = the eta_k of node v in p's patch."""
    tree, count = _children(edges)
    e = np.zeros((count, count, 3))
    md = float(max_depth)
    for root in range(1, count + 1):
        # (node, position among siblings from 1, sibling count, depth)
        stack = [(root, 1, 1, 0)]
        seen = {root}
        while stack:
            node, idx, n, depth = stack.pop()
            eta_t = (md - depth) / md
            eta_l = (1.0 - eta_t) * (0.5 if n == 1 else (idx - 1.0) / (n - 1.0))
            eta_r = (1.0 - eta_t) * (1.0 - eta_l)
            e[root - 1, node - 1] += (eta_l, eta_r, eta_t)
            if depth + 1 < max_depth:
                kids = tree[node]
                for i, child in enumerate(kids):
                    if child not in seen:
                        seen.add(child)
                        stack.append((child, i + 1, len(kids), depth + 1))
    return e, count


def _check(nodes: Any, edges: Any, filt: Any, attrs: dict) -> int:
    """Paddle's TreeConvOp::InferShape; returns max_depth."""
    if nodes.ndim != 3 or edges.ndim != 3 or edges.shape[2] != 2 or filt.ndim != 4:
        raise ValueError(f"tree_conv: NodesVector must be [batch, max_nodes, feature], EdgeSet "
                         f"[batch, max_edges, 2] and Filter [feature, 3, output_size, "
                         f"num_filters], got {list(nodes.shape)}, {list(edges.shape)} and "
                         f"{list(filt.shape)}")
    if filt.shape[0] != nodes.shape[2] or filt.shape[1] != 3:
        raise ValueError(f"tree_conv: Filter must be [{nodes.shape[2]}, 3, output_size, "
                         f"num_filters] for NodesVector {list(nodes.shape)}, got "
                         f"{list(filt.shape)}")
    if edges.shape[0] != nodes.shape[0]:
        raise ValueError(f"tree_conv: NodesVector and EdgeSet must have the same batch size, "
                         f"got {nodes.shape[0]} and {edges.shape[0]}")
    max_depth = int(attrs.get("max_depth", 2))
    if max_depth < 1:
        raise ValueError(f"tree_conv: max_depth must be >= 1, got {max_depth}")
    return max_depth


def _weights(nodes: Any, edges: Any, max_depth: int) -> list[tuple[np.ndarray, int]]:
    host = to_host(edges).astype(np.int64)
    res = []
    for b in range(host.shape[0]):
        e, count = _patch_weights(host[b], max_depth)
        if count > nodes.shape[1]:
            raise ValueError(f"tree_conv: sample {b}'s edges make {count} nodes, more than "
                             f"NodesVector's {nodes.shape[1]} rows")
        res.append((e, count))
    return res


@register("tree_conv", ("NodesVector", "EdgeSet", "Filter"), ("Out",), _TC_ATTRS, lod="none",
          grad=grad_maker(("NodesVector", "EdgeSet", "Filter"), ("Out",),
                          ("NodesVector", "Filter")))
def tree_conv(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[b, p − 1, o, m] = Σ_{v, f, k} E_b[p, v, k] · NodesVector[b, v − 1, f] ·
    Filter[f, k, o, m] (see the module docstring for E)."""
    nodes, edges, filt = ins["NodesVector"][0], ins["EdgeSet"][0], ins["Filter"][0]
    max_depth = _check(nodes, edges, filt, attrs)
    xp = array_module(nodes)
    out = xp.zeros((nodes.shape[0], nodes.shape[1], filt.shape[2], filt.shape[3]), nodes.dtype)
    for b, (e, count) in enumerate(_weights(nodes, edges, max_depth)):
        ed = xp.asarray(e.astype(nodes.dtype))
        patch = xp.einsum("pvk,vf->pfk", ed, nodes[b, :count])
        out[b, :count] = xp.tensordot(patch, filt, axes=([1, 2], [0, 1]))
    return {"Out": [out]}


@register("tree_conv_grad",
          *grad_slots(("NodesVector", "EdgeSet", "Filter"), ("Out",), ("NodesVector", "Filter")),
          _TC_ATTRS)
def tree_conv_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dFilter[f, k, o, m] = Σ_b Σ_p patch_b[p, f, k] · dOut[b, p − 1, o, m];
    dNodesVector[b, v − 1, f] = Σ_{p, k} E_b[p, v, k] Σ_{o, m} dOut[b, p − 1, o, m] ·
    Filter[f, k, o, m].

    Paddle's kernel pairs the col2tree buffer (laid out ``[output, 3]``) with the filter
    flattened as ``[feature, 3 · output]``, which mixes up the (k, output) layout unless
    output_size · num_filters is 1; this kernel keeps the exact derivative."""
    nodes, edges, filt = ins["NodesVector"][0], ins["EdgeSet"][0], ins["Filter"][0]
    max_depth = _check(nodes, edges, filt, attrs)
    xp = array_module(nodes)
    d = ins["Out" + GRAD][0]
    d = xp.zeros((nodes.shape[0], nodes.shape[1], filt.shape[2], filt.shape[3]),
                 nodes.dtype) if d is None else d
    dnodes = xp.zeros_like(nodes)
    dfilt = xp.zeros_like(filt)
    for b, (e, count) in enumerate(_weights(nodes, edges, max_depth)):
        ed = xp.asarray(e.astype(nodes.dtype))
        db = d[b, :count]
        if "Filter" + GRAD in outs:
            patch = xp.einsum("pvk,vf->pfk", ed, nodes[b, :count])
            dfilt += xp.tensordot(patch, db, axes=([0], [0]))
        if "NodesVector" + GRAD in outs:
            dpatch = xp.tensordot(db, filt, axes=([1, 2], [2, 3]))  # [p, f, k]
            dnodes[b, :count] = xp.einsum("pvk,pfk->vf", ed, dpatch)
    res = {}
    if "NodesVector" + GRAD in outs:
        res["NodesVector" + GRAD] = [dnodes]
    if "Filter" + GRAD in outs:
        res["Filter" + GRAD] = [dfilt]
    return res
