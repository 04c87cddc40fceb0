"""Paddle 1.8's dist_transformer.py, unchanged: its inference path ``fast_decode`` (beam
search in a ``While`` loop over tensor arrays, the decoder's caches grown each step and
gathered by ``sequence_expand``, ``beam_search``, ``beam_search_decode``) builds and runs, in
a child process where ``paddle`` resolves to dask_fluid. The model is small and untrained:
what is checked is the shape of the answer (a LoD of sources and hypotheses, each starting
with the start token and scoring no better as it grows, the best first), which only a
complete, correct run of the loop gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

UNITTESTS = Path(__file__).resolve().parents[3] / "shared/reference/paddle-1.8/unittests"

pytestmark = pytest.mark.skipif(
    not UNITTESTS.is_dir(),
    reason=f"{UNITTESTS} (Paddle 1.8's unittests) is not beside this checkout")

BEAM, MAX_OUT, EOS, SOURCES = 3, 6, 1, 2

DRIVER = '''
import json, sys
import numpy as np
from dask_fluid import compat
compat.install()
import paddle.fluid as fluid
import dist_transformer as dt

V, L, H, DK, DM, DI, NL = 30, 16, 2, 4, 8, 16, 2
BEAM, MAX_OUT, EOS, B, S = {beam}, {max_out}, {eos}, {sources}, 5
# the attention biases are declared with the module's 8 heads; this model has H (Fluid's
# build-time broadcast check would refuse [-1, H, ...] + [-1, 8, ...], as ours does)
for key in ("src_slf_attn_bias", "trg_slf_attn_bias", "trg_src_attn_bias"):
    dt.input_descs[key][0] = (dt.input_descs[key][0][0], H) + tuple(dt.input_descs[key][0][2:])
main, startup = fluid.Program(), fluid.Program()
startup.random_seed = 5
with fluid.program_guard(main, startup):
    ids, scores = dt.fast_decode(V, V, L + 1, NL, H, DK, DK, DM, DI, 0.0, True, BEAM, MAX_OUT,
                                 EOS)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(startup)
rng = np.random.default_rng(0)
place = fluid.CPUPlace()
one = [[1] * B, [1] * B]
feed = {{"src_word": rng.integers(2, V, (B, S, 1)).astype("int64"),
        "src_pos": np.tile(np.arange(S).reshape(1, S, 1), (B, 1, 1)).astype("int64"),
        "src_slf_attn_bias": np.zeros((B, H, S, S), "float32"),
        "trg_word": fluid.create_lod_tensor(np.zeros((B, 1), "int64"), one, place),
        "init_score": fluid.create_lod_tensor(np.zeros((B, 1), "float32"), one, place),
        "trg_src_attn_bias": np.zeros((B, H, 1, S), "float32")}}
got_ids, got_scores = exe.run(main, feed=feed, fetch_list=[ids, scores], return_numpy=False)
print(json.dumps({{"lod": got_ids.lod(), "score_lod": got_scores.lod(),
                  "ids": np.array(got_ids).tolist(), "scores": np.array(got_scores).tolist(),
                  "ops": [op.type for op in main.global_block().ops]}}))
'''


def test_paddle_18_fast_decode_runs(tmp_path):
    pytest.importorskip("six", reason="dist_transformer.py imports six")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(beam=BEAM, max_out=MAX_OUT, eos=EOS, sources=SOURCES))
    done = subprocess.run([sys.executable, str(driver)], cwd=UNITTESTS, capture_output=True,
                          text=True, timeout=240,
                          env={**__import__("os").environ, "PYTHONPATH": str(UNITTESTS)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ops"][-2:] == ["while", "beam_search_decode"]
    lod, ids, scores = out["lod"], out["ids"], out["scores"]
    assert out["score_lod"] == lod and len(lod) == 2 and len(lod[0]) == SOURCES + 1
    for src in range(SOURCES):
        hyps = range(lod[0][src], lod[0][src + 1])
        assert 1 <= len(hyps) <= BEAM
        finals = []
        for h in hyps:
            tokens, values = ids[lod[1][h]:lod[1][h + 1]], scores[lod[1][h]:lod[1][h + 1]]
            assert tokens[0] == 0 and values[0] == 0.0  # the start token, its initial score
            assert 2 <= len(tokens) <= MAX_OUT + 1
            assert all(b <= a + 1e-6 for a, b in zip(values, values[1:], strict=False))
            assert EOS not in tokens[:-1]  # an ended hypothesis stops at its end token
            finals.append(values[-1])
        assert finals == sorted(finals, reverse=True)
