"""Paddle 1.8's ``paddle.dataset.imikolov``: the Penn Treebank text of Mikolov's simple-examples.

The archive ``simple-examples.tgz`` is cached under ``DATA_HOME/imikolov/`` as
``imikolov%2Fsimple-examples.tgz`` (the last part of its URL, as Paddle names it). The training
text is its member ``./simple-examples/data/ptb.train.txt``, the test text
``./simple-examples/data/ptb.valid.txt``; one sentence per line, words separated by spaces.

As in Paddle 1.8 on Python 3, the archive's lines are read as bytes, so the words of the corpus
are ``bytes`` keys of the dictionary (``b"the"``), while the markers ``"<s>"``, ``"<e>"`` and
``"<unk>"`` are ``str`` keys. The corpus's own ``<unk>`` tokens are therefore the word
``b"<unk>"``, with an id of its own when frequent enough (in PTB it is), while ``"<unk>"`` (the
last id) is what words missing from the dictionary read as.
"""

from __future__ import annotations

import collections
import tarfile
from collections.abc import Iterable, Iterator

from ...sample_readers import Reader
from . import common

__all__ = ["DataType", "build_dict", "fetch", "reader_creator", "test", "train", "word_count"]

URL = "https://dataset.bj.bcebos.com/imikolov%2Fsimple-examples.tgz"
MD5 = "30177ea32e27c525793142b6bf2c8e2d"

TRAIN_FILENAME = "./simple-examples/data/ptb.train.txt"
TEST_FILENAME = "./simple-examples/data/ptb.valid.txt"

Word = bytes | str


class DataType:
    """What the readers yield: ``NGRAM`` sliding windows or ``SEQ`` (source, target) pairs."""

    NGRAM = 1
    SEQ = 2


def word_count(
    f: Iterable[bytes], word_freq: dict[Word, int] | None = None
) -> dict[Word, int]:
    """Count the words of the lines ``f`` into ``word_freq``, plus one ``<s>`` and ``<e>`` a line.

    Parameters
    ----------
    f : iterable of bytes
        Lines of text.
    word_freq : dict, optional
        Counts to add to (a :class:`collections.defaultdict` of int); a new one if omitted.

    Returns
    -------
    dict
        ``word_freq``.
    """
    if word_freq is None:
        word_freq = collections.defaultdict(int)
    for line in f:
        for w in line.strip().split():
            word_freq[w] += 1
        word_freq["<s>"] += 1
        word_freq["<e>"] += 1
    return word_freq


def _open_archive() -> tarfile.TarFile:
    return tarfile.open(common.download(URL, "imikolov", MD5))


def _sort_key(item: tuple[Word, int]) -> tuple[int, bytes]:
    # Paddle sorts by (-count, word). On Python 3 its words mix bytes and the str markers, which
    # cannot be compared; comparing the markers as ASCII bytes gives Paddle's order wherever
    # Paddle does not fail.
    word, count = item
    return -count, word.encode("ascii") if isinstance(word, str) else word


def build_dict(min_word_freq: int = 50) -> dict[Word, int]:
    """Build the word dictionary from the training and test text.

    Words seen more than ``min_word_freq`` times (``<s>`` and ``<e>`` count once per line) get
    ids ``0, 1, ...`` by decreasing count, ties broken by the word; ``"<unk>"`` gets the last id.

    Parameters
    ----------
    min_word_freq : int, default 50
        Words seen this many times or fewer are left out (they read as ``<unk>``).

    Returns
    -------
    dict
        Word (bytes, or str for the markers) to id.
    """
    with _open_archive() as tf:
        trainf = tf.extractfile(TRAIN_FILENAME)
        testf = tf.extractfile(TEST_FILENAME)
        word_freq = word_count(testf, word_count(trainf))
    # "<unk>" takes the last id. Like Paddle on Python 3 this removes only the str key: the
    # corpus's own b"<unk>" tokens stay a word of their own, so ids match Paddle's.
    word_freq.pop("<unk>", None)
    kept = [x for x in word_freq.items() if x[1] > min_word_freq]
    words = [w for w, _ in sorted(kept, key=_sort_key)]
    word_idx: dict[Word, int] = {w: i for i, w in enumerate(words)}
    word_idx["<unk>"] = len(words)
    return word_idx


def reader_creator(filename: str, word_idx: dict[Word, int], n: int, data_type: int) -> Reader:
    """Create a reader over the archive member ``filename``.

    Parameters
    ----------
    filename : str
        :data:`TRAIN_FILENAME` or :data:`TEST_FILENAME`.
    word_idx : dict
        The dictionary from :func:`build_dict`; unknown words read as ``word_idx["<unk>"]``.
    n : int
        ``NGRAM``: the window size; lines shorter than ``n`` with their ``<s>`` and ``<e>`` are
        skipped. ``SEQ``: the longest source sequence kept (``n <= 0``: no limit).
    data_type : int
        :attr:`DataType.NGRAM` or :attr:`DataType.SEQ`.

    Returns
    -------
    callable
        ``NGRAM``: a reader yielding tuples of ``n`` ids over ``<s> words <e>``. ``SEQ``: a reader
        yielding ``([<s>] + ids, ids + [<e>])`` as two lists.

    Raises
    ------
    ValueError
        From the reader, if ``n < 0`` for ``NGRAM`` or ``data_type`` is neither type.
    """

    def reader() -> Iterator[tuple[int, ...] | tuple[list[int], list[int]]]:
        with _open_archive() as tf:
            f = tf.extractfile(filename)
            unk = word_idx["<unk>"]
            for line in f:
                if data_type == DataType.NGRAM:
                    if n < 0:
                        raise ValueError(f"Invalid gram length: n={n}, it must be >= 0.")
                    words = ["<s>", *line.strip().split(), "<e>"]
                    if len(words) >= n:
                        ids = [word_idx.get(w, unk) for w in words]
                        for i in range(n, len(ids) + 1):
                            yield tuple(ids[i - n : i])
                elif data_type == DataType.SEQ:
                    ids = [word_idx.get(w, unk) for w in line.strip().split()]
                    src_seq = [word_idx["<s>"], *ids]
                    trg_seq = [*ids, word_idx["<e>"]]
                    if n > 0 and len(src_seq) > n:
                        continue
                    yield src_seq, trg_seq
                else:
                    raise ValueError(
                        f"Unknown data type {data_type!r}: use DataType.NGRAM or DataType.SEQ."
                    )

    return reader


def train(word_idx: dict[Word, int], n: int, data_type: int = DataType.NGRAM) -> Reader:
    """The training text (``ptb.train.txt``), see :func:`reader_creator`."""
    return reader_creator(TRAIN_FILENAME, word_idx, n, data_type)


def test(word_idx: dict[Word, int], n: int, data_type: int = DataType.NGRAM) -> Reader:
    """The test text (``ptb.valid.txt``), see :func:`reader_creator`."""
    return reader_creator(TEST_FILENAME, word_idx, n, data_type)


def fetch() -> None:
    """Download ``simple-examples.tgz`` into the cache unless it is there."""
    common.download(URL, "imikolov", MD5)
