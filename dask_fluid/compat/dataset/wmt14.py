"""Paddle 1.8's ``paddle.dataset.wmt14``: a shrunk WMT14 French-English set as id sequences.

The archive ``wmt14.tgz`` is cached under ``DATA_HOME/wmt14/``. It holds two dictionaries, the
members whose names end in ``src.dict`` (French) and ``trg.dict`` (English), one word a line, the
first three lines ``<s>``, ``<e>`` and ``<unk>``, and three splits, the members ending in
``train/train``, ``test/test`` and ``gen/gen``: UTF-8 lines ``source sentence<TAB>target
sentence``, words separated by spaces. Members are found by those suffixes, whatever directory
they are in, as Paddle finds them.

As in Paddle 1.8 on Python 3:

- ``dict_size`` keeps the first ``dict_size`` lines of each dictionary; a word's id is its line
  number. Words are ``str``.
- a sample is ``(src_ids, trg_ids, trg_ids_next)``: ``src_ids`` are the ids of ``<s>``, the source
  words and ``<e>`` in the source dictionary; ``trg_ids`` the id of ``<s>`` then the target
  words', ``trg_ids_next`` the target words' then ``<e>``'s, in the target dictionary. A word
  missing from its dictionary reads as :data:`UNK_IDX` (2), whatever the dictionary holds.
- lines without exactly one tab (after stripping) are skipped, and so are pairs with more than 80
  source ids (the two marks included) or more than 80 target words (marks not included).

``fetch()`` also downloads the trained model Paddle published, ``wmt%2Fwmt14.tgz``.
"""

from __future__ import annotations

import operator
import tarfile
from collections.abc import Iterable, Iterator

from ...sample_readers import Reader
from . import common

__all__ = ["fetch", "gen", "get_dict", "reader_creator", "test", "train"]

# Paddle defines the full dev+test set's URL but reads nothing from it.
URL_DEV_TEST = "http://www-lium.univ-lemans.fr/~schwenk/cslm_joint_paper/data/dev+test.tgz"
MD5_DEV_TEST = "7d7897317ddd8ba0ae5c5fa7248d3ff5"
# the small data set all the readers use
URL_TRAIN = "http://paddlemodels.bj.bcebos.com/wmt/wmt14.tgz"
MD5_TRAIN = "0791583d57d5beb693b9414c5b36798c"
# a model trained on it (BLEU 26.92); cached apart, as wmt%2Fwmt14.tgz
URL_MODEL = "http://paddlemodels.bj.bcebos.com/wmt%2Fwmt14.tgz"
MD5_MODEL = "0cb4a5366189b6acba876491c8724fa3"

START = "<s>"
END = "<e>"
UNK = "<unk>"
UNK_IDX = 2
# the longest source id sequence (marks included) and target word sequence kept
MAX_LENGTH = 80

TRAIN_FILENAME = "train/train"
TEST_FILENAME = "test/test"
GEN_FILENAME = "gen/gen"


def _check_dict_size(dict_size: int) -> int:
    if isinstance(dict_size, bool):
        raise TypeError(f"dict_size must be an int, got {dict_size!r}.")
    try:
        size = operator.index(dict_size)
    except TypeError:
        raise TypeError(
            f"dict_size must be an int, got {type(dict_size).__name__} {dict_size!r}."
        ) from None
    if size < 0:
        # Paddle would read empty dictionaries
        raise ValueError(f"dict_size must be >= 0, got {size}.")
    return size


def _to_dict(lines: Iterable[bytes], size: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for line_count, line in enumerate(lines):
        if line_count >= size:
            break
        # Paddle strips the bytes (ASCII whitespace) before decoding; a repeated word keeps the
        # later line number.
        out[line.strip().decode("utf-8")] = line_count
    return out


def _member(tf: tarfile.TarFile, suffix: str) -> tarfile.TarInfo:
    found = [m for m in tf.getmembers() if m.isfile() and m.name.endswith(suffix)]
    if len(found) != 1:
        raise ValueError(
            f"{tf.name} should hold exactly one member named *{suffix}, found "
            f"{[m.name for m in found]}."
        )
    return found[0]


def _read_dicts(tar_file: str, dict_size: int) -> tuple[dict[str, int], dict[str, int]]:
    """Read the first ``dict_size`` words of the source and target dictionaries of ``tar_file``.

    Parameters
    ----------
    tar_file : str
        The archive ``wmt14.tgz``.
    dict_size : int
        Lines of each dictionary to keep.

    Returns
    -------
    tuple of dict
        ``(src_dict, trg_dict)``, word (str) to id (its line number).

    Raises
    ------
    ValueError
        If the archive does not hold exactly one ``*src.dict`` and one ``*trg.dict`` (Paddle
        asserts this).
    """
    with tarfile.open(tar_file, mode="r") as tf:
        src_dict = _to_dict(tf.extractfile(_member(tf, "src.dict")), dict_size)
        trg_dict = _to_dict(tf.extractfile(_member(tf, "trg.dict")), dict_size)
    return src_dict, trg_dict


def reader_creator(tar_file: str, file_name: str, dict_size: int) -> Reader:
    """Create a reader over the members of ``tar_file`` whose names end with ``file_name``.

    The dictionaries are read each time the reader is called, as in Paddle.

    Parameters
    ----------
    tar_file : str
        The archive ``wmt14.tgz``.
    file_name : str
        :data:`TRAIN_FILENAME`, :data:`TEST_FILENAME` or :data:`GEN_FILENAME`.
    dict_size : int
        Lines of each dictionary to use (its first ``dict_size`` words).

    Returns
    -------
    callable
        A reader yielding ``(src_ids, trg_ids, trg_ids_next)``, three lists of ints (see the
        module docstring).

    Raises
    ------
    KeyError
        From the reader, at the first pair kept, if ``<s>`` or ``<e>`` is not among the
        ``dict_size`` target words (``dict_size < 2``), as in Paddle.
    """
    dict_size = _check_dict_size(dict_size)

    def reader() -> Iterator[tuple[list[int], list[int], list[int]]]:
        src_dict, trg_dict = _read_dicts(tar_file, dict_size)
        with tarfile.open(tar_file, mode="r") as tf:
            names = [m.name for m in tf.getmembers() if m.isfile() and m.name.endswith(file_name)]
            for name in names:
                for raw in tf.extractfile(name):
                    line_split = raw.decode("utf-8").strip().split("\t")
                    if len(line_split) != 2:
                        continue
                    src_words = line_split[0].split()
                    src_ids = [src_dict.get(w, UNK_IDX) for w in [START, *src_words, END]]
                    trg_ids = [trg_dict.get(w, UNK_IDX) for w in line_split[1].split()]
                    # Paddle's cut-off counts the marks on the source side only.
                    if len(src_ids) > MAX_LENGTH or len(trg_ids) > MAX_LENGTH:
                        continue
                    if START not in trg_dict or END not in trg_dict:
                        raise KeyError(
                            f"{START!r} and {END!r} must be among the first {dict_size} words "
                            f"of trg.dict (lines 0 and 1): use dict_size >= 2."
                        )
                    yield src_ids, [trg_dict[START], *trg_ids], [*trg_ids, trg_dict[END]]

    return reader


def _archive() -> str:
    return common.download(URL_TRAIN, "wmt14", MD5_TRAIN)


def train(dict_size: int) -> Reader:
    """The training pairs (``*train/train``), see :func:`reader_creator`."""
    dict_size = _check_dict_size(dict_size)
    return reader_creator(_archive(), TRAIN_FILENAME, dict_size)


def test(dict_size: int) -> Reader:
    """The test pairs (``*test/test``), see :func:`reader_creator`."""
    dict_size = _check_dict_size(dict_size)
    return reader_creator(_archive(), TEST_FILENAME, dict_size)


def gen(dict_size: int) -> Reader:
    """The generation pairs (``*gen/gen``), see :func:`reader_creator`."""
    dict_size = _check_dict_size(dict_size)
    return reader_creator(_archive(), GEN_FILENAME, dict_size)


def get_dict(
    dict_size: int, reverse: bool = True
) -> tuple[dict[int, str], dict[int, str]] | tuple[dict[str, int], dict[str, int]]:
    """The source and target dictionaries, first ``dict_size`` words each.

    Parameters
    ----------
    dict_size : int
        Lines of each dictionary to keep.
    reverse : bool, default True
        True: id to word, as Paddle's default; False: word to id.

    Returns
    -------
    tuple of dict
        ``(src_dict, trg_dict)``.
    """
    dict_size = _check_dict_size(dict_size)
    src_dict, trg_dict = _read_dicts(_archive(), dict_size)
    if reverse:
        return {v: k for k, v in src_dict.items()}, {v: k for k, v in trg_dict.items()}
    return src_dict, trg_dict


def fetch() -> None:
    """Download ``wmt14.tgz`` and the trained model ``wmt%2Fwmt14.tgz`` unless they are cached."""
    common.download(URL_TRAIN, "wmt14", MD5_TRAIN)
    common.download(URL_MODEL, "wmt14", MD5_MODEL)
