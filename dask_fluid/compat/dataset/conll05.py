"""Paddle 1.8's ``paddle.dataset.conll05``: CoNLL-2005 semantic role labelling, WSJ test set.

The CoNLL-2005 training set is not public, so Paddle, and this module, read only the public test
set, ``conll05st-tests.tar.gz``; Paddle's examples train on it. Five files are cached under
``DATA_HOME/conll05st/``, named after their URLs:

- ``conll05st-tests.tar.gz``, whose members
  ``conll05st-release/test.wsj/words/test.wsj.words.gz`` (one word a line) and
  ``conll05st-release/test.wsj/props/test.wsj.props.gz`` (the same lines: the predicate column,
  the verb's lemma or ``-``, then one column of bracketed arguments per predicate, ``(A0*``,
  ``*``, ``*)``, ``(V*)``...) are read; a blank line ends a sentence;
- ``conll05st%2FwordDict.txt`` and ``conll05st%2FverbDict.txt``, one word or verb a line, its id
  the line number (id 0, :data:`UNK_IDX`, stands for unknown words);
- ``conll05st%2FtargetDict.txt``, the labels (``B-A0``, ``I-A0``, ..., ``O``);
- ``conll05st%2Femb``, a word embedding trained on Wikipedia (Paddle's parameter file: a 16-byte
  header, then one float32 row of 32 per word of the word dictionary), which
  :func:`get_embedding` only locates.

As in Paddle 1.8 on Python 3, words, verbs and labels are ``str`` (UTF-8), and each predicate of
a sentence gives one sample of nine lists as long as the sentence: the word ids; the ids of the
words two before, one before, at, one after and two after the predicate (``bos`` and ``eos``
past the ends), each repeated; the predicate's id in the verb dictionary, repeated; the mark
(1 on the five positions of that window that lie in the sentence, else 0); the label ids, from
the IOB labels of the predicate's column (see :func:`corpus_reader`). Unknown words read as
:data:`UNK_IDX`; an unknown predicate or label reads as None, as in Paddle. A last sentence not
followed by a blank line is not read, as in Paddle.

Deviations, each where Paddle's behaviour is an accident of its implementation:

- :func:`load_label_dict` numbers the argument types in the order of their first appearance in
  the file. Paddle numbers them in the iteration order of a ``set`` of strings, which Python 3
  randomises per process (``PYTHONHASHSEED``), so its label ids changed from run to run.
- the dictionaries are read as UTF-8, whatever the locale (Paddle uses the locale's encoding).
- an empty sentence (two blank lines in a row) is skipped; Paddle fails with an IndexError.
- :func:`reader_creator` checks that it is given the three dictionaries; Paddle fails only when
  the reader runs.
"""

from __future__ import annotations

import gzip
import tarfile
from collections.abc import Iterator

from ...sample_readers import Reader
from . import common

__all__ = [
    "corpus_reader",
    "fetch",
    "get_dict",
    "get_embedding",
    "load_dict",
    "load_label_dict",
    "reader_creator",
    "test",
]

DATA_URL = "http://paddlemodels.bj.bcebos.com/conll05st/conll05st-tests.tar.gz"
DATA_MD5 = "387719152ae52d60422c016e92a742fc"
WORDDICT_URL = "http://paddlemodels.bj.bcebos.com/conll05st%2FwordDict.txt"
WORDDICT_MD5 = "ea7fb7d4c75cc6254716f0177a506baa"
VERBDICT_URL = "http://paddlemodels.bj.bcebos.com/conll05st%2FverbDict.txt"
VERBDICT_MD5 = "0d2977293bbb6cbefab5b0f97db1e77c"
TRGDICT_URL = "http://paddlemodels.bj.bcebos.com/conll05st%2FtargetDict.txt"
TRGDICT_MD5 = "d8c7f03ceb5fc2e5a0fa7503a4353751"
EMB_URL = "http://paddlemodels.bj.bcebos.com/conll05st%2Femb"
EMB_MD5 = "bf436eb0faa1f6f9103017f8be57cdb7"

UNK_IDX = 0

WORDS_NAME = "conll05st-release/test.wsj/words/test.wsj.words.gz"
PROPS_NAME = "conll05st-release/test.wsj/props/test.wsj.props.gz"

_Sample = tuple[list[int], list[int], list[int], list[int], list[int], list[int], list[int | None],
               list[int], list[int | None]]


def load_label_dict(filename: str) -> dict[str, int]:
    """Read a label dictionary: ``B-<tag>`` and ``I-<tag>`` for every tag named in the file.

    Every line ``B-<tag>`` or ``I-<tag>`` names a tag; other lines are ignored. Tag ``k`` (in the
    order of first appearance) gets ``B-<tag>`` = ``2k`` and ``I-<tag>`` = ``2k + 1``; ``"O"``
    gets the last id.

    Parameters
    ----------
    filename : str
        The file, UTF-8, one label a line.

    Returns
    -------
    dict
        Label to id.
    """
    tags: dict[str, None] = {}  # an ordered set, see the module docstring
    with open(filename, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith(("B-", "I-")):
                tags[line[2:]] = None
    d: dict[str, int] = {}
    for k, tag in enumerate(tags):
        d["B-" + tag] = 2 * k
        d["I-" + tag] = 2 * k + 1
    d["O"] = 2 * len(tags)
    return d


def load_dict(filename: str) -> dict[str, int]:
    """Read a dictionary, one entry a line (stripped), its id the line number.

    A repeated entry keeps its last line number, as in Paddle.
    """
    with open(filename, encoding="utf-8") as f:
        return {line.strip(): i for i, line in enumerate(f)}


def _iob(column: list[str]) -> list[str]:
    """Turn one predicate's column of bracketed arguments into IOB labels, as Paddle does."""
    cur_tag = "O"
    is_in_bracket = False
    lbl_seq = []
    for l in column:
        if l == "*":
            lbl_seq.append("I-" + cur_tag if is_in_bracket else "O")
        elif l == "*)":
            lbl_seq.append("I-" + cur_tag)
            is_in_bracket = False
        elif "(" in l:
            # "(A0*" opens an argument, "(A0*)" is one word long
            cur_tag = l[1 : l.find("*")]
            lbl_seq.append("B-" + cur_tag)
            is_in_bracket = ")" not in l
        else:
            raise RuntimeError(f"Unexpected label: {l}")
    return lbl_seq


def corpus_reader(data_path: str, words_name: str, props_name: str) -> Reader:
    """Create a reader of the predicates of a CoNLL-2005 words/props pair in a tar archive.

    The members are gzipped text read line by line together; a blank props line ends a sentence.
    In a props column, ``(T*`` opens an argument of type ``T``, ``*)`` closes it and ``(T*)`` is
    a one-word argument; they become ``B-T``, then ``I-T`` up to the closing word, and ``O``
    outside arguments.

    Parameters
    ----------
    data_path : str
        The tar archive.
    words_name, props_name : str
        The members holding the words and the props.

    Returns
    -------
    callable
        A reader yielding ``(sentence, predicate, labels)`` for each predicate of each sentence:
        the sentence's words (the same list for all its predicates), the predicate's lemma and
        its IOB labels, all ``str``.

    Raises
    ------
    RuntimeError
        When read, for a props entry that is none of the above (``Unexpected label: ...``).
    """

    def reader() -> Iterator[tuple[list[str], str, list[str]]]:
        with tarfile.open(data_path) as tf:
            wf = tf.extractfile(words_name)
            pf = tf.extractfile(props_name)
            with gzip.GzipFile(fileobj=wf) as words_file, gzip.GzipFile(fileobj=pf) as props_file:
                sentences: list[str] = []
                one_seg: list[list[str]] = []
                # as Paddle: the shorter member ends the corpus
                for word, label in zip(words_file, props_file, strict=False):
                    fields = [x.decode("utf-8") for x in label.strip().split()]
                    if fields:
                        sentences.append(word.strip().decode("utf-8"))
                        one_seg.append(fields)
                        continue
                    # end of sentence: columns are the predicate lemmas, then one per predicate
                    if one_seg:
                        labels = [[x[i] for x in one_seg] for i in range(len(one_seg[0]))]
                        verb_list = [x for x in labels[0] if x != "-"]
                        for i, lbl in enumerate(labels[1:]):
                            yield sentences, verb_list[i], _iob(lbl)
                    sentences = []
                    one_seg = []

    return reader


def _window(
    sentence: list[str], verb_index: int, length: int
) -> tuple[list[str], list[int]]:
    """The words from two before to two after the predicate, and the mark of those positions.

    Past the ends (``length`` is the label count, as in Paddle) the words are ``bos`` and
    ``eos`` and nothing is marked.
    """
    mark = [0] * length
    ctx = []
    for pos in range(verb_index - 2, verb_index + 3):
        if pos < 0:
            ctx.append("bos")
        elif pos >= length:
            ctx.append("eos")
        else:
            mark[pos] = 1
            ctx.append(sentence[pos])
    return ctx, mark


def reader_creator(
    corpus_reader: Reader,
    word_dict: dict[str, int] | None = None,
    predicate_dict: dict[str, int] | None = None,
    label_dict: dict[str, int] | None = None,
) -> Reader:
    """Turn ``(sentence, predicate, labels)`` samples into the nine id lists of the SRL models.

    Parameters
    ----------
    corpus_reader : callable
        A reader like :func:`corpus_reader`'s; each label list must hold ``"B-V"``.
    word_dict, predicate_dict, label_dict : dict
        Word, verb and label to id (see :func:`get_dict`). Required, despite the defaults
        (Paddle's signature).

    Returns
    -------
    callable
        A reader yielding ``(word_idx, ctx_n2_idx, ctx_n1_idx, ctx_0_idx, ctx_p1_idx,
        ctx_p2_idx, pred_idx, mark, label_idx)`` (see the module docstring).

    Raises
    ------
    TypeError
        If a dictionary is missing.
    """
    missing = [name for name, d in (("word_dict", word_dict), ("predicate_dict", predicate_dict),
                                    ("label_dict", label_dict)) if d is None]
    if missing:
        raise TypeError(
            f"reader_creator needs {', '.join(missing)}; paddle.dataset.conll05.get_dict() "
            "returns the three dictionaries."
        )

    def reader() -> Iterator[_Sample]:
        for sentence, predicate, labels in corpus_reader():
            sen_len = len(sentence)
            ctx, mark = _window(sentence, labels.index("B-V"), len(labels))
            word_idx = [word_dict.get(w, UNK_IDX) for w in sentence]
            ctx_idx = [[word_dict.get(w, UNK_IDX)] * sen_len for w in ctx]
            pred_idx = [predicate_dict.get(predicate)] * sen_len
            label_idx = [label_dict.get(w) for w in labels]
            yield (word_idx, *ctx_idx, pred_idx, mark, label_idx)

    return reader


def get_dict() -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Download if needed and read the word, verb and label dictionaries.

    Returns
    -------
    tuple of dict
        ``(word_dict, verb_dict, label_dict)``, see :func:`load_dict` and
        :func:`load_label_dict`.
    """
    word_dict = load_dict(common.download(WORDDICT_URL, "conll05st", WORDDICT_MD5))
    verb_dict = load_dict(common.download(VERBDICT_URL, "conll05st", VERBDICT_MD5))
    label_dict = load_label_dict(common.download(TRGDICT_URL, "conll05st", TRGDICT_MD5))
    return word_dict, verb_dict, label_dict


def get_embedding() -> str:
    """Download if needed and return the path of the Wikipedia word embedding file."""
    return common.download(EMB_URL, "conll05st", EMB_MD5)


def test() -> Reader:
    """The WSJ test set, the one set Paddle offers (and trains on).

    Downloads the dictionaries and the archive now, if needed; the archive is read when the
    reader is iterated.

    Returns
    -------
    callable
        A reader of nine-list samples, see :func:`reader_creator`.
    """
    word_dict, verb_dict, label_dict = get_dict()
    reader = corpus_reader(
        common.download(DATA_URL, "conll05st", DATA_MD5),
        words_name=WORDS_NAME,
        props_name=PROPS_NAME,
    )
    return reader_creator(reader, word_dict, verb_dict, label_dict)


def fetch() -> None:
    """Download the three dictionaries, the embedding and the test archive unless cached."""
    common.download(WORDDICT_URL, "conll05st", WORDDICT_MD5)
    common.download(VERBDICT_URL, "conll05st", VERBDICT_MD5)
    common.download(TRGDICT_URL, "conll05st", TRGDICT_MD5)
    common.download(EMB_URL, "conll05st", EMB_MD5)
    common.download(DATA_URL, "conll05st", DATA_MD5)
