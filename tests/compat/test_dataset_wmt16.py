"""paddle.dataset.wmt16 on a small synthetic ``wmt16.tar.gz``; no network.

The module's URL points at a closed local port; the expected dictionaries and samples are
computed here from the synthetic content itself.
"""

from __future__ import annotations

import collections
import os

import pytest

from dask_fluid.compat.dataset import common, wmt16
from tests.compat.synthetic_data import go_offline, write_wmt16

MARKS = ["<s>", "<e>", "<unk>"]


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    go_offline(monkeypatch, wmt16, ("DATA_URL",))


# -- the test's own reading of the synthetic content -------------------------------------------


def pairs(lines):
    return [f for f in (line.strip().split("\t") for line in lines) if len(f) == 2]


def expected_words(content: dict, lang: str, dict_size: int) -> list[str]:
    """The dictionary's lines: marks, then train words by count, ties by first appearance."""
    col = 0 if lang == "en" else 1
    counts: collections.Counter = collections.Counter()
    first: dict[str, int] = {}
    for pair in pairs(content["train"]):
        for w in pair[col].split():
            counts[w] += 1
            first.setdefault(w, len(first))
    words = [*MARKS, *sorted(counts, key=lambda w: (-counts[w], first[w]))]
    return words[:dict_size] if dict_size >= 3 else words


def expected_samples(content, split, src_words, trg_words, src_lang="en"):
    src = {w: i for i, w in enumerate(src_words)}
    trg = {w: i for i, w in enumerate(trg_words)}
    col = 0 if src_lang == "en" else 1
    out = []
    for pair in pairs(content[split]):
        s = [src.get(w, 2) for w in pair[col].split()]
        t = [trg.get(w, 2) for w in pair[1 - col].split()]
        out.append(([0, *s, 1], [0, *t], [*t, 1]))
    return out


def dict_file(data_home, lang, size):
    return os.path.join(data_home, "wmt16", f"{lang}_{size}.dict")


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


# -- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("src_lang", ["en", "de"])
def test_train_builds_and_caches_the_dictionaries(data_home, src_lang):
    content = write_wmt16(data_home)
    trg_lang = "de" if src_lang == "en" else "en"
    reader = wmt16.train(15, 20, src_lang=src_lang)
    assert not os.path.exists(dict_file(data_home, src_lang, 15))  # built when read
    samples = list(reader())
    src_words = expected_words(content, src_lang, 15)
    trg_words = expected_words(content, trg_lang, 20)
    assert samples == expected_samples(content, "train", src_words, trg_words, src_lang)
    assert len(samples) == 61  # the malformed lines are skipped
    # Paddle's cache files: UTF-8, one word a line
    for lang, size, words in ((src_lang, 15, src_words), (trg_lang, 20, trg_words)):
        assert read_bytes(dict_file(data_home, lang, size)) == "".join(
            w + "\n" for w in words).encode("utf-8")
    assert list(reader()) == samples


def test_dictionary_order_counts_and_ties(data_home):
    content = write_wmt16(data_home)
    list(wmt16.train(1000, 1000)())
    en = wmt16.get_dict("en", 1000)
    assert list(en) == expected_words(content, "en", 1000)
    assert en["<s>"] == 0 and en["<e>"] == 1 and en["<unk>"] == 2
    # ties keep the order of first appearance: zebra (seen first) before apple
    assert en["zebra"] < en["apple"]
    assert "onlyinbadline" not in en
    de = wmt16.get_dict("de", 1000)
    assert "straße" in de and "mädchen" in de  # decoded UTF-8


def test_test_and_validation(data_home):
    content = write_wmt16(data_home)
    en, de = expected_words(content, "en", 12), expected_words(content, "de", 1000)
    for creator, split in ((wmt16.test, "test"), (wmt16.validation, "val")):
        samples = list(creator(12, 1000)())
        assert samples == expected_samples(content, split, en, de)
        assert any(2 in s[0] for s in samples) and any(2 in s[1] for s in samples)
    # German source: the marks and <unk> ids come from the German dictionary
    samples = list(wmt16.validation(1000, 12, src_lang="de")())
    assert samples == expected_samples(content, "val", de, en, src_lang="de")


def test_sizes_are_capped_at_the_published_vocabularies(data_home):
    content = write_wmt16(data_home)
    samples = list(wmt16.train(10**6, 10**6)())
    assert os.path.exists(dict_file(data_home, "en", 11250))
    assert os.path.exists(dict_file(data_home, "de", 19220))
    en, de = expected_words(content, "en", 11250), expected_words(content, "de", 19220)
    assert samples == expected_samples(content, "train", en, de)
    list(wmt16.train(10**6, 10**6, src_lang="de")())
    assert sorted(os.listdir(os.path.join(data_home, "wmt16"))) == [
        "de_19220.dict", "en_11250.dict", "wmt16.tar.gz", "wmt16.tar.gz.substitute-md5"]
    assert wmt16.get_dict("en", 10**6) == {w: i for i, w in enumerate(en)}


def test_a_cached_dictionary_of_the_right_length_is_used(data_home):
    content = write_wmt16(data_home)
    # a hand-made en_5.dict (5 lines): used as it is
    path = dict_file(data_home, "en", 5)
    with open(path, "wb") as f:
        f.write(b"<s>\n<e>\n<unk>\nwoman\nman\n")
    de = expected_words(content, "de", 8)
    samples = list(wmt16.train(5, 8)())
    assert samples == expected_samples(content, "train", MARKS + ["woman", "man"], de)
    # a file of another length is built again
    with open(path, "wb") as f:
        f.write(b"<s>\n<e>\n<unk>\n")
    list(wmt16.train(5, 8)())
    assert read_bytes(path).decode().split() == expected_words(content, "en", 5)


def test_small_sizes(data_home):
    content = write_wmt16(data_home)
    # 3: the marks alone, every word reads as <unk>
    src, trg, nxt = next(iter(wmt16.train(3, 3)()))
    assert src[0] == 0 and src[-1] == 1 and set(src[1:-1]) == {2} and set(trg[1:]) == {2}
    # Paddle's quirk: below 3 its build never stops, the whole vocabulary is written
    list(wmt16.train(2, 0)())
    assert read_bytes(dict_file(data_home, "en", 2)).decode().split() == expected_words(
        content, "en", 10**6)
    assert len(wmt16.get_dict("de", 0)) == len(expected_words(content, "de", 10**6))


def test_get_dict(data_home):
    content = write_wmt16(data_home)
    with pytest.raises(FileNotFoundError, match="Word dictionary .* does not exist"):
        wmt16.get_dict("en", 15)
    list(wmt16.test(15, 25)())
    words = expected_words(content, "en", 15)
    assert wmt16.get_dict("en", 15) == {w: i for i, w in enumerate(words)}
    assert wmt16.get_dict("en", 15, reverse=True) == dict(enumerate(words))
    assert wmt16.get_dict("de", 25, True) == dict(enumerate(expected_words(content, "de", 25)))
    # a dictionary shorter than its size (a small vocabulary) is rebuilt from the cached archive
    list(wmt16.train(500, 500)())
    assert len(wmt16.get_dict("en", 500)) == len(expected_words(content, "en", 500)) < 500


def test_offline_download_error(data_home):
    for call in (lambda: wmt16.train(10, 10), lambda: wmt16.test(10, 10, "de"),
                 lambda: wmt16.validation(10, 10), wmt16.fetch):
        with pytest.raises(common.DownloadError) as info:
            call()
        assert info.value.path == os.path.join(data_home, "wmt16", "wmt16.tar.gz")
        assert info.value.md5sum == wmt16.DATA_MD5 == "0c38be43600334966403524a40dcd81e"
        assert wmt16.DATA_MD5 in str(info.value)
    write_wmt16(data_home)
    wmt16.fetch()


def test_bad_arguments(data_home):
    # the language is checked before the download: no archive is needed to see the error
    for creator in (wmt16.train, wmt16.test, wmt16.validation):
        with pytest.raises(ValueError, match="src_lang='fr'. Only support: en .* de"):
            creator(10, 10, src_lang="fr")
    with pytest.raises(ValueError, match="lang='EN'. Only support"):
        wmt16.get_dict("EN", 10)
    with pytest.raises(TypeError, match="src_dict_size must be an int, got float 1.5"):
        wmt16.train(1.5, 10)
    with pytest.raises(TypeError, match="trg_dict_size must be an int"):
        wmt16.validation(10, None)
    with pytest.raises(TypeError, match="dict_size must be an int"):
        wmt16.get_dict("en", "10")


def test_synthetic_archive_is_deterministic(tmp_path):
    a = write_wmt16(tmp_path / "a")["path"]
    b = write_wmt16(tmp_path / "b")["path"]
    assert common.md5file(a) == common.md5file(b)
    assert os.path.getsize(a) < 10_000
