"""Beam search over LoD tensors: ``beam_search`` (one step) and ``beam_search_decode`` (the
sentences out of every step's tensor array), as Fluid 1.8's CPU kernels (beam_search.cc,
beam_search_decode_op.h). Neither has a gradient.

One step's tensors carry a LoD of two levels: level 0 gives each source sentence its
prefixes (the hypotheses it keeps), level 1 gives each prefix its candidates. ``beam_search``
takes, per source, the ``beam_size`` best candidates over all its prefixes: a prefix that
ended (its id is ``end_id``) offers only ``end_id`` again with its own score; the others offer
their ``ids`` with their ``scores`` (accumulated, or ``pre_score + log(score)``). Ties go to
the later prefix, then to the candidate seen first, as Fluid's ``Item`` order. A source whose
prefixes have all ended, each choosing ``end_id`` again, is dropped (no candidates). The
selected candidates come out grouped by prefix, best first, with the LoD ``[level 0 of the
input, each prefix's count]``, and ``parent_idx`` the prefix each came from.

``beam_search_decode`` walks the steps backwards from each source's last one and rebuilds its
hypotheses: a hypothesis's tokens and scores, its repeated end tokens dropped, the hypotheses of
a source best first (by their final score); the LoD is ``[hypotheses per source, tokens per
hypothesis]``.
"""

from __future__ import annotations

import numpy as np

from .registry import LOD_KEY, array_module, register, to_host


def _lod(attrs: dict, slot: str, op: str, levels: int = 2) -> tuple:
    lod = (attrs.get("_lods") or {}).get(slot, [None])[0]
    if not lod or len(lod) < levels:
        raise ValueError(f"{op}: {slot} must carry a LoD of {levels} levels (sources, then "
                         f"prefixes), got {[list(level) for level in lod or ()]}")
    return tuple(tuple(int(v) for v in level) for level in lod)


def _absolute(lod: tuple) -> tuple:
    """Fluid's ``ToAbsOffset``: every level's offsets in rows of the tensor (the upper levels
    of a LoD count the entries of the level below)."""
    out = [list(level) for level in lod]
    for level in range(len(lod) - 2, -1, -1):
        out[level] = [out[level + 1][i] for i in lod[level]]
    return tuple(tuple(level) for level in out)


@register("beam_search", ("pre_ids", "pre_scores", "ids", "scores"),
          ("selected_ids", "selected_scores", "parent_idx"),
          {"level": 0, "beam_size": 1, "end_id": 0, "is_accumulated": True},
          optional=("ids",), lod="kernel")
def beam_search(ins: dict, attrs: dict, outs: tuple) -> dict:
    """One step of beam search (module docstring)."""
    level, beam = int(attrs.get("level", 0)), int(attrs["beam_size"])
    end_id, accumulated = int(attrs["end_id"]), bool(attrs.get("is_accumulated", True))
    if beam < 1:
        raise ValueError(f"beam_search: beam_size must be >= 1, got {beam}")
    scores_in = ins["scores"][0]
    xp = array_module(scores_in)
    pre_ids = to_host(ins["pre_ids"][0]).reshape(-1).astype(np.int64)
    pre_scores = to_host(ins["pre_scores"][0]).reshape(-1)
    scores = to_host(scores_in)
    ids_in = (ins.get("ids") or [None])[0]
    ids = None if ids_in is None else to_host(ids_in).reshape(scores.shape[0], -1)
    scores = scores.reshape(scores.shape[0], -1)
    high = _absolute(_lod(attrs, "scores", "beam_search", level + 1))[level]
    if high[-1] != len(pre_ids) or scores.shape[0] != len(pre_ids):
        raise ValueError(f"beam_search: {len(pre_ids)} prefixes in pre_ids, {scores.shape[0]} "
                         f"rows of scores and {high[-1]} prefixes in the LoD must agree")
    per_prefix: list[list[tuple]] = [[] for _ in range(high[-1])]
    for src in range(len(high) - 1):
        top: list[tuple] = []  # (score, offset, id), best first
        for offset in range(high[src], high[src + 1]):
            if pre_ids[offset] == end_id:
                _insert(top, (float(pre_scores[offset]), offset, end_id), beam)
                continue
            for k in range(scores.shape[1]):
                s = scores[offset, k]
                score = float(s) if accumulated else float(pre_scores[offset] + np.log(s))
                token = int(ids[offset, k]) if ids is not None else k
                _insert(top, (score, offset, token), beam)
        for item in top:
            per_prefix[item[1]].append(item)
        # Fluid's PruneEndBeams: every item selected came from an ended prefix and ends again
        ended = all(pre_ids[o] == end_id and t == end_id
                    for o in range(high[src], high[src + 1]) for _, _, t in per_prefix[o])
        if ended:
            for o in range(high[src], high[src + 1]):
                per_prefix[o] = []
    counts = [len(items) for items in per_prefix]
    low = tuple(int(v) for v in np.concatenate([[0], np.cumsum(counts)]))
    flat = [item for items in per_prefix for item in items]
    out_lod = (tuple(high), low)
    selected_ids = np.array([t for _, _, t in flat], dtype=np.int64).reshape(-1, 1)
    selected_scores = np.array([s for s, _, _ in flat],
                               dtype=scores.dtype).reshape(-1, 1)
    parents = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    return {"selected_ids": [xp.asarray(selected_ids)],
            "selected_scores": [xp.asarray(selected_scores)],
            "parent_idx": [xp.asarray(parents)],
            LOD_KEY: {"selected_ids": [out_lod], "selected_scores": [out_lod],
                      "parent_idx": [None]}}


def _insert(top: list[tuple], item: tuple, beam: int) -> None:
    """Fluid's ``Insert``: keep the ``beam`` largest items by (score, offset), an equal one
    after those already kept; when full, the new item takes the last one's slot unless it is
    smaller."""
    key = item[:2]
    if len(top) == beam:
        if key < top[-1][:2]:
            return
        del top[-1]
    at = len(top)
    while at > 0 and top[at - 1][:2] < key:
        at -= 1
    top.insert(at, item)


@register("beam_search_decode", ("Ids", "Scores"), ("SentenceIds", "SentenceScores"),
          {"beam_size": 1, "end_id": 0}, lod="kernel")
def beam_search_decode(ins: dict, attrs: dict, outs: tuple) -> dict:
    """The hypotheses of every source out of the steps' tensor arrays (module docstring)."""
    step_ids, step_scores = ins["Ids"][0], ins["Scores"][0]
    end_id = int(attrs["end_id"])
    if not isinstance(step_ids, list) or not isinstance(step_scores, list):
        raise ValueError("beam_search_decode: Ids and Scores must be tensor arrays (what "
                         "array_write fills with each beam_search step)")
    if not step_ids or len(step_ids) != len(step_scores):
        raise ValueError(f"beam_search_decode: {len(step_ids)} steps of ids and "
                         f"{len(step_scores)} of scores; both must be the same, and not 0")
    steps = []
    for i, (tid, tsc) in enumerate(zip(step_ids, step_scores, strict=True)):
        lod = tuple(tuple(int(v) for v in level) for level in (tid._lod or ()))
        if len(lod) < 2:
            raise ValueError(f"beam_search_decode: step {i} of Ids has a LoD of {len(lod)} "
                             "levels; each step needs 2 (sources, then prefixes)")
        steps.append((lod, to_host(tid._require()).reshape(-1),
                      to_host(tsc._require()).reshape(-1)))
    n_src = len(steps[0][0][0]) - 1
    sentences: list[list[tuple[list, list]]] = [[] for _ in range(n_src)]
    prefix_of: list[list[int]] = [[] for _ in range(n_src)]
    for lod, ids, scores in reversed(steps):
        src_level, sent_level = lod[0], lod[1]
        for src in range(n_src):
            start, end = src_level[src], src_level[src + 1]
            kept, found = sentences[src], prefix_of[src]
            if not found:  # this source's last step (it ended and was pruned after it)
                for prefix in range(start, end):
                    for cand in range(sent_level[prefix], sent_level[prefix + 1]):
                        found.append(prefix)
                        kept.append(([int(ids[cand])], [float(scores[cand])]))
                continue
            src_first = sent_level[start]
            prefix, seen = start, sent_level[start + 1] - sent_level[start]
            for j, cand in enumerate(found):
                token, score = int(ids[cand]), float(scores[cand])
                if token != end_id or not kept[j][0]:  # the repeated end tokens go
                    kept[j][0].append(token)
                    kept[j][1].append(score)
                while src_first + seen <= cand:  # the prefix this candidate extended
                    prefix += 1
                    seen += sent_level[prefix + 1] - sent_level[prefix]
                found[j] = prefix
    src_lod, sent_lod, all_ids, all_scores = [0], [0], [], []
    score_dtype = steps[0][2].dtype
    for kept in sentences:
        ranked = sorted((s for s in kept if s[0]), key=lambda s: -s[1][0])
        for tokens, scores in ranked:
            all_ids += tokens[::-1]
            all_scores += scores[::-1]
            sent_lod.append(sent_lod[-1] + len(tokens))
        src_lod.append(src_lod[-1] + len(ranked))
    lod = (tuple(src_lod), tuple(sent_lod))
    first = step_ids[0]._require()
    xp = array_module(first)
    return {"SentenceIds": [xp.asarray(np.array(all_ids, dtype=np.int64))],
            "SentenceScores": [xp.asarray(np.array(all_scores, dtype=score_dtype))],
            LOD_KEY: {"SentenceIds": [lod], "SentenceScores": [lod]}}
