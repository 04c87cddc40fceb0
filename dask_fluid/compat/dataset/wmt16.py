"""Paddle 1.8's ``paddle.dataset.wmt16``: the WMT16 multimodal (Multi30K) English-German pairs.

The archive is cached under ``DATA_HOME/wmt16/`` as ``wmt16.tar.gz``. Its members
``wmt16/train``, ``wmt16/test`` and ``wmt16/val`` hold UTF-8 lines ``English sentence<TAB>German
sentence``, tokenised (words separated by spaces); lines without exactly one tab (after
stripping) are skipped.

As in Paddle 1.8 on Python 3:

- each language's dictionary is built from the ``wmt16/train`` member and cached as
  ``DATA_HOME/wmt16/<lang>_<dict_size>.dict``: UTF-8, one word a line, ``<s>``, ``<e>`` and
  ``<unk>`` (ids 0, 1, 2) then the training words by decreasing count, ties in the order of
  their first appearance, ``dict_size`` lines in all. A cached file is used while it has exactly
  ``dict_size`` lines and is built again otherwise. Sizes are first capped at the published
  vocabularies, :data:`TOTAL_EN_WORDS` and :data:`TOTAL_DE_WORDS`.
- ``src_lang`` (``"en"`` or ``"de"``) picks the source column; the target is the other language.
  A sample is ``(src_ids, trg_ids, trg_ids_next)``: ``src_ids`` the ids of ``<s>``, the source
  words and ``<e>``; ``trg_ids`` ``<s>`` then the target words; ``trg_ids_next`` the target words
  then ``<e>``. The marks' ids and the id of unknown words (of either language) are those of
  the source dictionary. No length cut-off.
- words and dictionary keys are ``str``.
"""

from __future__ import annotations

import operator
import os
import tarfile
import tempfile
from collections import defaultdict
from collections.abc import Iterator

from ...sample_readers import Reader
from . import common

__all__ = ["fetch", "get_dict", "reader_creator", "test", "train", "validation"]

DATA_URL = "http://paddlemodels.bj.bcebos.com/wmt/wmt16.tar.gz"
DATA_MD5 = "0c38be43600334966403524a40dcd81e"
SAVE_NAME = "wmt16.tar.gz"

TOTAL_EN_WORDS = 11250
TOTAL_DE_WORDS = 19220

START_MARK = "<s>"
END_MARK = "<e>"
UNK_MARK = "<unk>"

TRAIN_FILENAME = "wmt16/train"
TEST_FILENAME = "wmt16/test"
VALIDATION_FILENAME = "wmt16/val"

LANGUAGES = ("en", "de")


def _check_lang(lang: str, what: str = "src_lang") -> None:
    if lang not in LANGUAGES:
        raise ValueError(
            f"An error language type {what}={lang!r}. Only support: en (for English); "
            "de (for Germany)."
        )


def _check_size(size: int, what: str) -> int:
    if isinstance(size, bool):
        raise TypeError(f"{what} must be an int, got {size!r}.")
    try:
        return operator.index(size)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(size).__name__} {size!r}.") from None


def _other(lang: str) -> str:
    return "de" if lang == "en" else "en"


def _cap(lang: str, dict_size: int) -> int:
    return min(dict_size, TOTAL_EN_WORDS if lang == "en" else TOTAL_DE_WORDS)


def _dict_path(lang: str, dict_size: int) -> str:
    return os.path.join(common.DATA_HOME, "wmt16", f"{lang}_{dict_size}.dict")


def _pairs(tf: tarfile.TarFile, file_name: str) -> Iterator[list[str]]:
    """The ``[English, German]`` sentences of the member ``file_name``, well-formed lines only."""
    for raw in tf.extractfile(file_name):
        line_split = raw.decode("utf-8").strip().split("\t")
        if len(line_split) == 2:
            yield line_split


def _build_dict(tar_file: str, dict_size: int, save_path: str, lang: str) -> None:
    word_count: dict[str, int] = defaultdict(int)
    with tarfile.open(tar_file, mode="r") as tf:
        for pair in _pairs(tf, TRAIN_FILENAME):
            for w in pair[0 if lang == "en" else 1].split():
                word_count[w] += 1
    # A stable sort on the count alone: ties keep the dict's order, first appearance (Python 2's
    # dict order made Paddle's ties arbitrary there).
    words = sorted(word_count.items(), key=lambda x: x[1], reverse=True)
    lines = [START_MARK, END_MARK, UNK_MARK]
    for idx, (word, _) in enumerate(words):
        # Paddle's stop test: with dict_size <= 2 it never fires and every word is written.
        if idx + 3 == dict_size:
            break
        lines.append(word)
    # Written under a temporary name and renamed, so a concurrent reader never sees half a file.
    dirname = os.path.dirname(save_path)
    common.must_mkdirs(dirname)
    fd, tmp_name = tempfile.mkstemp(dir=dirname, prefix=os.path.basename(save_path) + ".")
    try:
        with os.fdopen(fd, "wb") as fout:
            fout.write("".join(w + "\n" for w in lines).encode("utf-8"))
        os.chmod(tmp_name, 0o644)  # mkstemp's 0600 would keep other users off a shared cache
        os.replace(tmp_name, save_path)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def _count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _load_dict(
    tar_file: str, dict_size: int, lang: str, reverse: bool = False
) -> dict[str, int] | dict[int, str]:
    dict_path = _dict_path(lang, dict_size)
    # As Paddle: a dictionary shorter than dict_size (a vocabulary smaller than the size asked
    # for) is built again at every load, with the same content.
    if not os.path.exists(dict_path) or _count_lines(dict_path) != dict_size:
        _build_dict(tar_file, dict_size, dict_path, lang)
    word_dict: dict = {}
    with open(dict_path, "rb") as fdict:
        for idx, line in enumerate(fdict):
            # a word on two lines (a corpus word spelled like a mark) keeps the later id
            word = line.strip().decode("utf-8")
            if reverse:
                word_dict[idx] = word
            else:
                word_dict[word] = idx
    return word_dict


def reader_creator(
    tar_file: str, file_name: str, src_dict_size: int, trg_dict_size: int, src_lang: str
) -> Reader:
    """Create a reader over the archive member ``file_name``.

    The dictionaries are loaded (built first if needed) each time the reader is called, as in
    Paddle; the sizes are used as given, not capped.

    Parameters
    ----------
    tar_file : str
        The archive ``wmt16.tar.gz``.
    file_name : str
        :data:`TRAIN_FILENAME`, :data:`TEST_FILENAME` or :data:`VALIDATION_FILENAME`.
    src_dict_size, trg_dict_size : int
        Sizes of the source and target dictionaries.
    src_lang : {"en", "de"}
        The source language.

    Returns
    -------
    callable
        A reader yielding ``(src_ids, trg_ids, trg_ids_next)``, three lists of ints (see the
        module docstring).
    """
    _check_lang(src_lang)
    src_dict_size = _check_size(src_dict_size, "src_dict_size")
    trg_dict_size = _check_size(trg_dict_size, "trg_dict_size")

    def reader() -> Iterator[tuple[list[int], list[int], list[int]]]:
        src_dict = _load_dict(tar_file, src_dict_size, src_lang)
        trg_dict = _load_dict(tar_file, trg_dict_size, _other(src_lang))
        # the marks have the same ids in both dictionaries; Paddle takes the source's
        start_id = src_dict[START_MARK]
        end_id = src_dict[END_MARK]
        unk_id = src_dict[UNK_MARK]
        src_col = 0 if src_lang == "en" else 1
        with tarfile.open(tar_file, mode="r") as tf:
            for pair in _pairs(tf, file_name):
                src_ids = [start_id, *(src_dict.get(w, unk_id) for w in pair[src_col].split())]
                src_ids.append(end_id)
                trg_ids = [trg_dict.get(w, unk_id) for w in pair[1 - src_col].split()]
                yield src_ids, [start_id, *trg_ids], [*trg_ids, end_id]

    return reader


def _creator(file_name: str, src_dict_size: int, trg_dict_size: int, src_lang: str) -> Reader:
    _check_lang(src_lang)
    src_dict_size = _cap(src_lang, _check_size(src_dict_size, "src_dict_size"))
    trg_dict_size = _cap(_other(src_lang), _check_size(trg_dict_size, "trg_dict_size"))
    tar_file = common.download(DATA_URL, "wmt16", DATA_MD5, save_name=SAVE_NAME)
    return reader_creator(tar_file, file_name, src_dict_size, trg_dict_size, src_lang)


def train(src_dict_size: int, trg_dict_size: int, src_lang: str = "en") -> Reader:
    """The training pairs (``wmt16/train``).

    Parameters
    ----------
    src_dict_size, trg_dict_size : int
        Sizes of the source and target dictionaries, the three marks included; capped at the
        language's vocabulary (:data:`TOTAL_EN_WORDS`, :data:`TOTAL_DE_WORDS`). As in Paddle, a
        size below 3 builds a dictionary of the whole training vocabulary.
    src_lang : {"en", "de"}, default "en"
        The source language.

    Returns
    -------
    callable
        The reader, see :func:`reader_creator`.

    Raises
    ------
    ValueError
        If ``src_lang`` is neither ``"en"`` nor ``"de"``.
    TypeError
        If a size is not an int.
    """
    return _creator(TRAIN_FILENAME, src_dict_size, trg_dict_size, src_lang)


def test(src_dict_size: int, trg_dict_size: int, src_lang: str = "en") -> Reader:
    """The test pairs (``wmt16/test``), see :func:`train`."""
    return _creator(TEST_FILENAME, src_dict_size, trg_dict_size, src_lang)


def validation(src_dict_size: int, trg_dict_size: int, src_lang: str = "en") -> Reader:
    """The validation pairs (``wmt16/val``), see :func:`train`."""
    return _creator(VALIDATION_FILENAME, src_dict_size, trg_dict_size, src_lang)


def get_dict(lang: str, dict_size: int, reverse: bool = False) -> dict[str, int] | dict[int, str]:
    """The dictionary of ``lang``, which a reader of that size must have built.

    Parameters
    ----------
    lang : {"en", "de"}
        The language.
    dict_size : int
        Its size, capped as in :func:`train`.
    reverse : bool, default False
        False: word to id; True: id to word.

    Returns
    -------
    dict
        The dictionary.

    Raises
    ------
    FileNotFoundError
        If ``DATA_HOME/wmt16/<lang>_<dict_size>.dict`` does not exist: Paddle asserts it does.
    ValueError
        If ``lang`` is neither ``"en"`` nor ``"de"`` (Paddle does not check, and then finds no
        dictionary).
    TypeError
        If ``dict_size`` is not an int.
    """
    _check_lang(lang, "lang")
    dict_size = _cap(lang, _check_size(dict_size, "dict_size"))
    dict_path = _dict_path(lang, dict_size)
    if not os.path.exists(dict_path):
        raise FileNotFoundError(
            f"Word dictionary {dict_path} does not exist. Please invoke "
            "paddle.dataset.wmt16.train/test/validation first to build the dictionary."
        )
    # Paddle looks for the archive at DATA_HOME/wmt16.tar.gz, where download() never puts it,
    # so its rebuild of a short dictionary fails; this rebuilds from the cached archive.
    return _load_dict(common.cached_path(DATA_URL, "wmt16", SAVE_NAME), dict_size, lang, reverse)


def fetch() -> None:
    """Download ``wmt16.tar.gz`` into the cache unless it is there.

    (Paddle 1.8's ``fetch`` calls a ``paddle.v4`` module that does not exist, so it always
    fails; this downloads what it meant to.)
    """
    common.download(DATA_URL, "wmt16", DATA_MD5, save_name=SAVE_NAME)
