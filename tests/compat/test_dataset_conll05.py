"""paddle.dataset.conll05 on small synthetic dictionaries, embedding and test archive; no network.

The module's five URLs point at closed local ports; the expected samples are computed here from
the synthetic sentences' argument spans (not from the bracket columns the module parses).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dask_fluid.compat.batch import batch
from dask_fluid.compat.dataset import common, conll05
from tests.compat.synthetic_data import go_offline, write_conll05, write_tgz

URL_NAMES = ("DATA_URL", "WORDDICT_URL", "VERBDICT_URL", "TRGDICT_URL", "EMB_URL")

# The synthetic targetDict.txt names the tags V, AM-TMP, A1, A0, A2, AM-LOC, C-A1 in that order.
LABEL_DICT = {
    "B-V": 0, "I-V": 1, "B-AM-TMP": 2, "I-AM-TMP": 3, "B-A1": 4, "I-A1": 5, "B-A0": 6, "I-A0": 7,
    "B-A2": 8, "I-A2": 9, "B-AM-LOC": 10, "I-AM-LOC": 11, "B-C-A1": 12, "I-C-A1": 13, "O": 14,
}


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    go_offline(monkeypatch, conll05, URL_NAMES)


# -- the test's own reading of the synthetic content -------------------------------------------


def iob(n, spans):
    labels = ["O"] * n
    for start, end, tag in spans:
        labels[start] = "B-" + tag
        labels[start + 1 : end] = ["I-" + tag] * (end - start - 1)
    return labels


def expected_corpus(content):
    return [(words, lemma, iob(len(words), spans))
            for words, predicates in content["sentences"]
            for lemma, _, spans in predicates]


def expected_samples(content):
    words_ids = {w: i for i, w in enumerate(content["word_dict"])}
    verbs = {v: i for i, v in enumerate(content["verb_dict"])}
    out = []
    for words, predicates in content["sentences"]:
        n = len(words)
        for lemma, verb_pos, spans in predicates:
            padded = ["bos", "bos", *words, "eos", "eos"]
            ctx = padded[verb_pos : verb_pos + 5]
            mark = [1 if abs(i - verb_pos) <= 2 else 0 for i in range(n)]
            out.append((
                [words_ids.get(w, 0) for w in words],
                *([words_ids.get(w, 0)] * n for w in ctx),
                [verbs.get(lemma)] * n,
                mark,
                [LABEL_DICT[label] for label in iob(n, spans)],
            ))
    return out


def tar_with(path, words, props):
    """A test archive holding the given words and props lines (gzipped, as published)."""

    def gz(lines):
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
            f.write("".join(line + "\n" for line in lines).encode())
        return buf.getvalue()

    write_tgz(path, [(conll05.WORDS_NAME, gz(words)), (conll05.PROPS_NAME, gz(props))])
    return path


def read_corpus(path):
    return list(conll05.corpus_reader(path, conll05.WORDS_NAME, conll05.PROPS_NAME)())


# -- tests --------------------------------------------------------------------------------------


def test_get_dict(data_home):
    content = write_conll05(data_home)
    word_dict, verb_dict, label_dict = conll05.get_dict()
    assert word_dict == {w: i for i, w in enumerate(content["word_dict"])}
    assert word_dict["<unk>"] == conll05.UNK_IDX == 0
    assert word_dict["café"] > 0  # UTF-8
    assert verb_dict == {v: i for i, v in enumerate(content["verb_dict"])}
    # ids by first appearance of the tag; C-A1 (only I-C-A1 in the file) gets both; O last
    assert label_dict == LABEL_DICT


def test_test_reader_samples(data_home):
    content = write_conll05(data_home)
    samples = list(conll05.test()())
    assert samples == expected_samples(content)
    assert len(samples) == sum(len(p) for _, p in content["sentences"]) >= 12
    word_dict = conll05.get_dict()[0]
    # the one-word sentence: the window is bos bos go eos eos; "go" is not a known verb
    go = samples[0]
    assert go[1:6] == ([word_dict["bos"]], [word_dict["bos"]], [word_dict["go"]],
                       [word_dict["eos"]], [word_dict["eos"]])
    assert go[6] == [None] and go[7] == [1] and go[8] == [LABEL_DICT["B-V"]]
    # "zzunknown" reads as UNK_IDX
    sold = samples[2]
    assert sold[0][3] == 0 and sold[7] == [1, 1, 1, 1, 0]
    assert sold[8] == [6, 0, 4, 5, 2]  # A0 V A1 A1 AM-TMP
    assert all(len(part) == len(s[0]) for s in samples for part in s)
    assert list(conll05.test()()) == samples


def test_corpus_reader(data_home):
    content = write_conll05(data_home)
    corpus = read_corpus(content["path"])
    assert corpus == expected_corpus(content)
    # the sentence without predicates gives nothing; the test.brown member is not read
    assert all(words != ["new", "york", "and", "london"] for words, _, _ in corpus)
    assert all(words != ["the", "end"] for words, _, _ in corpus)
    # predicates of one sentence share its word list, as in Paddle
    multi = [c for c in corpus if len(c[0]) == len(content["sentences"][5][0])][:2]
    assert multi[0][0] is multi[1][0]


def test_corpus_reader_edge_cases(tmp_path):
    path = tar_with(tmp_path / "a.tgz", ["He", "ran", "", "", "", "Go", "now"],
                    ["-  (A0*)", "run (V*)", "", "", "", "go (V*)", "-  (AM-TMP*)"])
    # an empty sentence (Paddle: IndexError) is skipped; the last sentence, with no blank line
    # after it, is not read, as in Paddle
    assert read_corpus(path) == [(["He", "ran"], "run", ["B-A0", "B-V"])]
    path = tar_with(tmp_path / "b.tgz", ["a", "b", "c", "d", ""],
                    ["-  (A0*  *", "-  *  (A1*", "v  (V*)  *)", "w  *)  (V*)", ""])
    assert read_corpus(path) == [
        (["a", "b", "c", "d"], "v", ["B-A0", "I-A0", "B-V", "I-V"]),
        (["a", "b", "c", "d"], "w", ["O", "B-A1", "I-A1", "B-V"]),
    ]
    path = tar_with(tmp_path / "c.tgz", ["a", "b", ""], ["v (V*)", "- *))", ""])
    with pytest.raises(RuntimeError, match=r"Unexpected label: \*\)\)"):
        read_corpus(path)


def test_reader_creator(data_home):
    write_conll05(data_home)
    word_dict, verb_dict, label_dict = conll05.get_dict()

    def corpus():
        yield ["the", "company", "said", "it", "would", "buy", "extra"], "say", [
            "B-A0", "I-A0", "B-V", "B-A1", "I-A1", "I-A1", "B-XX"]

    (sample,) = list(conll05.reader_creator(corpus, word_dict, verb_dict, label_dict)())
    ids = [word_dict[w] for w in ("the", "company", "said", "it", "would")]
    assert sample[1:6] == tuple([i] * 7 for i in ids)
    assert sample[6] == [verb_dict["say"]] * 7
    assert sample[7] == [1, 1, 1, 1, 1, 0, 0]
    assert sample[8] == [6, 7, 0, 4, 5, 5, None]  # an unknown label reads as None, as in Paddle
    with pytest.raises(TypeError, match="reader_creator needs predicate_dict, label_dict"):
        conll05.reader_creator(corpus, word_dict)

    def no_verb():
        yield ["a"], "say", ["O"]

    with pytest.raises(ValueError, match="'B-V' is not in list"):
        list(conll05.reader_creator(no_verb, word_dict, verb_dict, label_dict)())


def test_load_dict_keeps_the_last_line_of_a_repeated_entry(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("a\n b \na\n\nc\n", encoding="utf-8")
    assert conll05.load_dict(str(path)) == {"a": 2, "b": 1, "": 3, "c": 4}
    path.write_text("I-X\nO\nB-Y\nB-X\nnoise\n", encoding="utf-8")
    assert conll05.load_label_dict(str(path)) == {"B-X": 0, "I-X": 1, "B-Y": 2, "I-Y": 3, "O": 4}


def test_label_ids_do_not_depend_on_the_hash_seed(data_home):
    write_conll05(data_home)
    code = ("import json; from dask_fluid.compat.dataset import conll05; "
            "print(json.dumps(conll05.get_dict()[2]))")
    outs = []
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "DASK_FLUID_DATA_HOME": data_home, "PYTHONHASHSEED": hash_seed}
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                   text=True, check=True).stdout)
    assert outs[0] == outs[1] == outs[2]
    assert json.loads(outs[0]) == LABEL_DICT


def test_get_embedding(data_home):
    content = write_conll05(data_home)
    path = conll05.get_embedding()
    assert path == os.path.join(data_home, "conll05st", "conll05st%2Femb")
    # as Paddle's label_semantic_roles loads it: skip the 16-byte header, float32 rows of 32
    with open(path, "rb") as f:
        f.read(16)
        emb = np.fromfile(f, dtype=np.float32).reshape(len(conll05.get_dict()[0]), 32)
    np.testing.assert_array_equal(emb, content["emb"])


def test_as_label_semantic_roles_reads_it(data_home):
    write_conll05(data_home)
    word_dict, verb_dict, label_dict = conll05.get_dict()
    batches = list(batch(conll05.test(), batch_size=4)())
    assert [len(b) for b in batches][:-1] == [4] * (len(batches) - 1)
    for sample in (s for b in batches for s in b if s[6][0] is not None):
        assert len(sample) == 9
        assert max(max(part) for part in sample[:6]) < len(word_dict)
        assert sample[6][0] < len(verb_dict) and max(sample[8]) < len(label_dict)


def test_offline_download_error(data_home):
    cached = {name: os.path.join(data_home, "conll05st", getattr(conll05, name).split("/")[-1])
              for name in URL_NAMES}
    for call, name in ((conll05.test, "WORDDICT_URL"), (conll05.get_dict, "WORDDICT_URL"),
                       (conll05.get_embedding, "EMB_URL"), (conll05.fetch, "WORDDICT_URL")):
        with pytest.raises(common.DownloadError) as info:
            call()
        assert info.value.path == cached[name]
        md5 = getattr(conll05, name.replace("URL", "MD5"))
        assert info.value.md5sum == md5 and md5 in str(info.value)
    assert conll05.DATA_MD5 == "387719152ae52d60422c016e92a742fc"
    assert cached["DATA_URL"].endswith(os.sep + "conll05st-tests.tar.gz")
    assert cached["TRGDICT_URL"].endswith(os.sep + "conll05st%2FtargetDict.txt")
    write_conll05(data_home)
    conll05.fetch()


def test_synthetic_files_are_deterministic(tmp_path):
    a = write_conll05(tmp_path / "a")["dir"]
    b = write_conll05(tmp_path / "b")["dir"]
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b)) and len(names) == 10
    for name in names:
        assert common.md5file(os.path.join(a, name)) == common.md5file(os.path.join(b, name))
        assert os.path.getsize(os.path.join(a, name)) < 10_000
