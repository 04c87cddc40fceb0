"""paddle.dataset.wmt14 on a small synthetic ``wmt14.tgz``; no network.

The module's URLs point at a closed local port (same file names, so the cache paths do not
change); the expected samples are computed here from the synthetic content itself.
"""

from __future__ import annotations

import os

import pytest

from dask_fluid.compat.dataset import common, wmt14
from tests.compat.synthetic_data import go_offline, write_tgz, write_wmt14

MARKS = ["<s>", "<e>", "<unk>"]

# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    go_offline(monkeypatch, wmt14, ("URL_TRAIN", "URL_MODEL", "URL_DEV_TEST"))


# -- the test's own reading of the synthetic content -------------------------------------------


def expected_samples(content: dict, split: str, dict_size: int) -> list:
    src = {w: i for i, w in enumerate(content["src.dict"][:dict_size])}
    trg = {w: i for i, w in enumerate(content["trg.dict"][:dict_size])}
    out = []
    for line in content[split]:
        fields = line.strip().split("\t")
        if len(fields) != 2:
            continue
        src_ids = [src.get(w, 2) for w in ["<s>", *fields[0].split(), "<e>"]]
        trg_ids = [trg.get(w, 2) for w in fields[1].split()]
        if len(src_ids) <= 80 and len(trg_ids) <= 80:
            out.append((src_ids, [trg["<s>"], *trg_ids], [*trg_ids, trg["<e>"]]))
    return out


# -- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dict_size", [30, 12, 1000])
def test_train_test_gen(data_home, dict_size):
    content = write_wmt14(data_home)
    for creator, split in ((wmt14.train, "train"), (wmt14.test, "test"), (wmt14.gen, "gen")):
        reader = creator(dict_size)
        samples = list(reader())
        assert samples == expected_samples(content, split, dict_size)
        assert list(reader()) == samples  # a reader can be read again
    n_kept = len(list(wmt14.train(dict_size)()))
    assert n_kept == 40 + 3  # the 80-long source and target and the stripped line


def test_sample_layout_and_unknown_words(data_home):
    content = write_wmt14(data_home)
    src_words, trg_words = content["train"][0].rstrip("\n").split("\t")
    src_ids, trg_ids, trg_next = next(iter(wmt14.train(30)()))
    src_vocab, trg_vocab = content["src.dict"], content["trg.dict"]
    want_src = [0] + [src_vocab.index(w) if w in src_vocab else 2 for w in src_words.split()] + [1]
    want_trg = [trg_vocab.index(w) if w in trg_vocab else 2 for w in trg_words.split()]
    assert src_ids == want_src
    assert trg_ids == [0, *want_trg] and trg_next == [*want_trg, 1]
    # with 12 words per dictionary, the later words read as <unk> (2)
    small = next(iter(wmt14.train(12)()))
    assert small[0] == [i if i < 12 else 2 for i in want_src]


def test_length_cut_off(data_home):
    write_wmt14(data_home)
    samples = list(wmt14.train(30)())
    assert max(len(s[0]) for s in samples) == 80  # <s> + 78 words + <e>
    assert max(len(s[1]) for s in samples) == 81  # <s> + 80 words
    assert all(len(s[1]) == len(s[2]) for s in samples)


def test_get_dict(data_home):
    content = write_wmt14(data_home)
    src, trg = wmt14.get_dict(30)  # reverse=True by default: id -> word
    assert src == dict(enumerate(content["src.dict"][:30]))
    assert trg == dict(enumerate(content["trg.dict"][:30]))
    assert src[3] == "été" and trg[3] == "naïve"  # decoded UTF-8
    src, trg = wmt14.get_dict(5, reverse=False)
    assert src == {"<s>": 0, "<e>": 1, "<unk>": 2, "été": 3, "garçon": 4}
    assert trg == {"<s>": 0, "<e>": 1, "<unk>": 2, "naïve": 3, "café": 4}
    assert wmt14.get_dict(0) == ({}, {})


def test_tiny_dictionaries(data_home):
    write_wmt14(data_home)
    # 2 words: every word reads as UNK_IDX 2, outside the dictionary, as in Paddle
    src_ids, trg_ids, trg_next = next(iter(wmt14.train(2)()))
    assert src_ids[0] == 0 and src_ids[-1] == 1 and set(src_ids[1:-1]) == {2}
    assert trg_ids[0] == 0 and set(trg_ids[1:]) == {2} and trg_next[-1] == 1
    for size in (0, 1):
        with pytest.raises(KeyError, match="use dict_size >= 2"):
            next(iter(wmt14.train(size)()))


def test_offline_download_error(data_home):
    with pytest.raises(common.DownloadError) as info:
        wmt14.train(30)
    assert info.value.path == os.path.join(data_home, "wmt14", "wmt14.tgz")
    assert info.value.md5sum == wmt14.MD5_TRAIN == "0791583d57d5beb693b9414c5b36798c"
    assert wmt14.MD5_TRAIN in str(info.value)
    for call in (lambda: wmt14.test(30), lambda: wmt14.gen(30), lambda: wmt14.get_dict(30)):
        with pytest.raises(common.DownloadError):
            call()
    # fetch() also wants the trained model, cached under its own URL name
    write_wmt14(data_home, with_model=False)
    with pytest.raises(common.DownloadError) as info:
        wmt14.fetch()
    assert info.value.path == os.path.join(data_home, "wmt14", "wmt%2Fwmt14.tgz")
    assert info.value.md5sum == wmt14.MD5_MODEL


def test_fetch_with_the_substitutes(data_home):
    content = write_wmt14(data_home)
    wmt14.fetch()
    assert os.path.exists(content["model_path"])


@pytest.mark.parametrize("bad, error", [(3.5, TypeError), (None, TypeError), ("30", TypeError),
                                        (True, TypeError), (-1, ValueError)])
def test_bad_dict_size(data_home, bad, error):
    # checked before the download: no archive is needed to see the error
    for call in (wmt14.train, wmt14.test, wmt14.gen, wmt14.get_dict):
        with pytest.raises(error, match="dict_size must be"):
            call(bad)


def test_archive_without_a_dictionary(data_home):
    path = os.path.join(data_home, "wmt14", "wmt14.tgz")
    os.makedirs(os.path.dirname(path))
    write_tgz(path, [("wmt14/trg.dict", b"<s>\n<e>\n<unk>\n"), ("wmt14/train/train", b"a\tb\n")])
    common.register_substitute(path)
    with pytest.raises(ValueError, match=r"exactly one member named \*src.dict"):
        next(iter(wmt14.train(10)()))


def test_synthetic_archive_is_deterministic(tmp_path):
    a = write_wmt14(tmp_path / "a")["path"]
    b = write_wmt14(tmp_path / "b")["path"]
    assert common.md5file(a) == common.md5file(b)
    assert os.path.getsize(a) < 20_000
