"""Paddle 1.8's ``paddle.dataset.imdb``: IMDB movie reviews as ``(word ids, label)`` samples.

The archive ``aclImdb_v1.tar.gz`` is cached under ``DATA_HOME/imdb/`` as
``imdb%2FaclImdb_v1.tar.gz``. Reviews are its members ``aclImdb/{train,test}/{pos,neg}/*.txt``,
read in archive order. A review is tokenised as Paddle does: trailing newlines stripped, ASCII
punctuation deleted, lower-cased, split on whitespace; tokens are ``bytes``, and so are the keys
of the dictionary, except ``"<unk>"``. Label 0 is a positive review, 1 a negative one.
"""

from __future__ import annotations

import collections
import re
import string
import tarfile
from collections.abc import Iterator

from ...sample_readers import Reader
from . import common

__all__ = ["build_dict", "fetch", "reader_creator", "test", "tokenize", "train", "word_dict"]

URL = "https://dataset.bj.bcebos.com/imdb%2FaclImdb_v1.tar.gz"
MD5 = "7c2ac02c03563afcf9b574c7e56c153a"

_PUNCTUATION = string.punctuation.encode("latin-1")


def tokenize(pattern: re.Pattern) -> Iterator[list[bytes]]:
    """Yield the tokens of every archive member whose name matches ``pattern``.

    Parameters
    ----------
    pattern : re.Pattern
        Matched (:meth:`re.Pattern.match`, from the start) against member names.

    Yields
    ------
    list of bytes
        One review's tokens.
    """
    with tarfile.open(common.download(URL, "imdb", MD5)) as tarf:
        # Sequential access (next()), not extractfile(name): the archive is read once, in order.
        tf = tarf.next()
        while tf is not None:
            if pattern.match(tf.name):
                text = tarf.extractfile(tf).read()
                yield text.rstrip(b"\n\r").translate(None, _PUNCTUATION).lower().split()
            tf = tarf.next()


def build_dict(pattern: re.Pattern, cutoff: int) -> dict[bytes | str, int]:
    """Build a dictionary of the words of the reviews matching ``pattern``.

    Words seen more than ``cutoff`` times get ids ``0, 1, ...`` by decreasing count, ties broken by
    the word; ``"<unk>"`` gets the last id.

    Parameters
    ----------
    pattern : re.Pattern
        Which members to read, see :func:`tokenize`.
    cutoff : int
        Words seen this many times or fewer are left out.

    Returns
    -------
    dict
        Word (bytes) to id, plus ``"<unk>"``.
    """
    word_freq: dict[bytes, int] = collections.defaultdict(int)
    for doc in tokenize(pattern):
        for word in doc:
            word_freq[word] += 1
    kept = [x for x in word_freq.items() if x[1] > cutoff]
    words = [w for w, _ in sorted(kept, key=lambda x: (-x[1], x[0]))]
    word_idx: dict[bytes | str, int] = {w: i for i, w in enumerate(words)}
    word_idx["<unk>"] = len(words)
    return word_idx


def reader_creator(
    pos_pattern: re.Pattern, neg_pattern: re.Pattern, word_idx: dict[bytes | str, int]
) -> Reader:
    """Read the matching reviews now and return a reader over them, positive ones first.

    Parameters
    ----------
    pos_pattern, neg_pattern : re.Pattern
        The positive (label 0) and negative (label 1) reviews.
    word_idx : dict
        Word to id; other words read as ``word_idx["<unk>"]``.

    Returns
    -------
    callable
        A reader yielding ``(ids, label)``: a list of ints and an int.
    """
    unk = word_idx["<unk>"]
    ins: list[tuple[list[int], int]] = []
    for pattern, label in ((pos_pattern, 0), (neg_pattern, 1)):
        for doc in tokenize(pattern):
            ins.append(([word_idx.get(w, unk) for w in doc], label))

    def reader() -> Iterator[tuple[list[int], int]]:
        yield from ins

    return reader


def train(word_idx: dict[bytes | str, int]) -> Reader:
    """The 25,000 training reviews, see :func:`reader_creator`."""
    return reader_creator(
        re.compile(r"aclImdb/train/pos/.*\.txt$"), re.compile(r"aclImdb/train/neg/.*\.txt$"),
        word_idx,
    )


def test(word_idx: dict[bytes | str, int]) -> Reader:
    """The 25,000 test reviews, see :func:`reader_creator`."""
    return reader_creator(
        re.compile(r"aclImdb/test/pos/.*\.txt$"), re.compile(r"aclImdb/test/neg/.*\.txt$"),
        word_idx,
    )


def word_dict() -> dict[bytes | str, int]:
    """The dictionary of all training and test reviews, words seen more than 150 times."""
    return build_dict(re.compile(r"aclImdb/((train)|(test))/((pos)|(neg))/.*\.txt$"), 150)


def fetch() -> None:
    """Download ``aclImdb_v1.tar.gz`` into the cache unless it is there."""
    common.download(URL, "imdb", MD5)
