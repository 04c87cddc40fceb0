"""Small synthetic stand-ins for Paddle's dataset files, written into a dataset cache directory.

Each ``write_*`` function writes files in exactly the published format, at the path
``paddle.dataset.common.download`` expects under ``data_home`` (``<data_home>/<module>/<name from
the URL>``), and registers each as a local substitute (``common.register_substitute``), so the
dataset readers accept them without network access and without patching any md5. Point the
readers at ``data_home`` with ``monkeypatch.setattr(common, "DATA_HOME", data_home)`` in-process,
or with the environment variable ``DASK_FLUID_DATA_HOME`` for a subprocess.

Everything is deterministic for a given ``seed`` and takes milliseconds.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
import tarfile
from collections.abc import Sequence

import numpy as np

from dask_fluid.compat.dataset import (
    cifar,
    common,
    conll05,
    flowers,
    imdb,
    imikolov,
    mnist,
    movielens,
    uci_housing,
    wmt14,
    wmt16,
)

__all__ = [
    "closed_port_url", "go_offline", "write_cifar", "write_conll05", "write_flowers", "write_imdb",
    "write_imikolov", "write_mnist", "write_movielens", "write_tgz", "write_uci_housing",
    "write_wmt14", "write_wmt16",
]


def go_offline(monkeypatch, module, names) -> None:
    """Point each URL constant ``names`` of a dataset ``module`` at a closed local port, with
    the same file name (so the cache paths do not change)."""
    for name in names:
        url = getattr(module, name)
        monkeypatch.setattr(module, name, closed_port_url(url.split("/")[-1]))


def closed_port_url(name: str) -> str:
    """A URL on 127.0.0.1 where nothing listens: port 1 (tcpmux), which nothing here serves
    and, being privileged, no test binds (a port found free and released could be taken by
    a test running beside this one)."""
    return f"http://127.0.0.1:1/{name}"


def _cache_file(data_home: str | os.PathLike, module: str, url: str) -> str:
    dirname = os.path.join(os.fspath(data_home), module)
    os.makedirs(dirname, exist_ok=True)
    return os.path.join(dirname, url.split("/")[-1])


def _write_gzip(path: str, payload: bytes) -> None:
    # mtime=0: the same bytes (and md5) on every run
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(payload)


def write_tgz(path: str, members: Sequence[tuple[str, bytes | None]]) -> None:
    """A gzipped tar of ``(name, data)`` members; ``data`` None makes a directory."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.mtime = 0
                if data is None:
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
                else:
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


# -- mnist ------------------------------------------------------------------------------------


def _idx_images(images: np.ndarray) -> bytes:
    n, rows, cols = images.shape
    header = np.array([mnist.IMAGE_MAGIC, n, rows, cols], dtype=">u4").tobytes()
    return header + images.astype(np.uint8).tobytes()


def _idx_labels(labels: np.ndarray) -> bytes:
    header = np.array([mnist.LABEL_MAGIC, len(labels)], dtype=">u4").tobytes()
    return header + labels.astype(np.uint8).tobytes()


def write_mnist(
    data_home: str | os.PathLike, n_train: int = 200, n_test: int = 100, seed: int = 0
) -> str:
    """Write the four MNIST IDX files (28x28 digits) under ``data_home/mnist``.

    Images are noise plus a bright bar whose position depends on the label, so a model can learn
    them; every pixel value 0..255 is possible.

    Parameters
    ----------
    data_home : path
        The dataset cache directory.
    n_train, n_test : int
        Samples in each set. Paddle reads 100 at a time; any count works here.
    seed : int
        Seed of the generator.

    Returns
    -------
    str
        The directory ``data_home/mnist``.
    """
    rng = np.random.default_rng(seed)
    files = (
        (n_train, mnist.TRAIN_IMAGE_URL, mnist.TRAIN_LABEL_URL),
        (n_test, mnist.TEST_IMAGE_URL, mnist.TEST_LABEL_URL),
    )
    for n, image_url, label_url in files:
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 96, (n, 28, 28))
        for i, label in enumerate(labels):
            images[i, 2 + 2 * label : 4 + 2 * label, 4:24] = rng.integers(200, 256, (2, 20))
        for url, payload in ((image_url, _idx_images(images)), (label_url, _idx_labels(labels))):
            path = _cache_file(data_home, "mnist", url)
            _write_gzip(path, payload)
            common.register_substitute(path)
    return os.path.join(os.fspath(data_home), "mnist")


# -- uci_housing ------------------------------------------------------------------------------

# Plausible ranges of the 13 features and the price, after the real file.
_HOUSING_RANGES = (
    (0.006, 89.0), (0.0, 100.0), (0.46, 27.7), (0.0, 1.0), (0.385, 0.871), (3.56, 8.78),
    (2.9, 100.0), (1.13, 12.1), (1.0, 24.0), (187.0, 711.0), (12.6, 22.0), (0.32, 396.9),
    (1.73, 37.97), (5.0, 50.0),
)


def write_uci_housing(data_home: str | os.PathLike, n_rows: int = 50, seed: int = 0) -> str:
    """Write ``housing.data`` (``n_rows`` rows of 13 features and a price) under ``data_home``.

    Rows are fixed-width, space-separated, as in the published file; CHAS is 0 or 1 and RAD an
    integer, like theirs.

    Returns
    -------
    str
        The path of the file.
    """
    rng = np.random.default_rng(seed)
    lows, highs = np.array(_HOUSING_RANGES).T
    data = lows + rng.random((n_rows, len(_HOUSING_RANGES))) * (highs - lows)
    data[:, 3] = rng.integers(0, 2, n_rows)
    data[:, 8] = np.round(data[:, 8])
    lines = [" ".join(f"{v:8.4f}" for v in row) for row in data]
    path = _cache_file(data_home, "uci_housing", uci_housing.URL)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    common.register_substitute(path)
    return path


# -- imikolov ---------------------------------------------------------------------------------


def write_imikolov(
    data_home: str | os.PathLike,
    n_train_lines: int = 300,
    n_valid_lines: int = 60,
    vocab: Sequence[str] | None = None,
    n_rare: int = 40,
    seed: int = 0,
) -> str:
    """Write ``simple-examples.tgz`` (PTB-style text) under ``data_home/imikolov``.

    The corpus (train and valid lines together) holds each ``vocab`` word ``60 + 7 k`` times (k
    its position), ``n_rare`` rare words 3 times each and 70 ``<unk>`` tokens, shuffled and cut
    into lines of random length. So ``build_dict()`` (``min_word_freq=50``) keeps exactly the
    ``vocab`` words, ``b"<unk>"``, ``<s>``, ``<e>`` plus ``"<unk>"`` (34 entries with the default
    30 words) and ``train(word_dict, 5)`` yields about 3,500 5-grams; the archive is ~15 KB.

    Parameters
    ----------
    data_home : path
        The dataset cache directory.
    n_train_lines, n_valid_lines : int
        Lines of ``ptb.train.txt`` and ``ptb.valid.txt``.
    vocab : sequence of str, optional
        The frequent words (default ``word00`` ... ``word29``).
    n_rare : int
        Number of words seen 3 times, which read as ``<unk>``.
    seed : int
        Seed of the generator.

    Returns
    -------
    str
        The path of the archive.
    """
    rng = np.random.default_rng(seed)
    vocab = [f"word{k:02d}" for k in range(30)] if vocab is None else list(vocab)
    n_lines = n_train_lines + n_valid_lines
    tokens: list[str] = []
    for k, word in enumerate(vocab):
        count = 60 + 7 * k
        # No word as frequent as <s> and <e> (one a line): Paddle could not sort such a tie.
        count += count == n_lines
        tokens += [word] * count
    for k in range(n_rare):
        tokens += [f"rare{k:02d}"] * 3
    tokens += ["<unk>"] * 70
    tokens = [tokens[i] for i in rng.permutation(len(tokens))]
    if n_lines > len(tokens):
        raise ValueError(f"{n_lines} lines need more than the {len(tokens)} tokens written.")
    cuts = np.sort(rng.choice(np.arange(1, len(tokens)), n_lines - 1, replace=False))
    lines = [" " + " ".join(part) + " \n" for part in np.split(np.array(tokens), cuts)]
    text = {
        "train": "".join(lines[:n_train_lines]).encode(),
        "valid": "".join(lines[n_train_lines:]).encode(),
        "test": "".join(lines[:5]).encode(),
    }
    path = _cache_file(data_home, "imikolov", imikolov.URL)
    write_tgz(
        path,
        [
            ("./simple-examples/README", b"synthetic stand-in for simple-examples.tgz\n"),
            (imikolov.TRAIN_FILENAME, text["train"]),
            (imikolov.TEST_FILENAME, text["valid"]),
            ("./simple-examples/data/ptb.test.txt", text["test"]),
        ],
    )
    common.register_substitute(path)
    return path


# -- imdb -------------------------------------------------------------------------------------

_IMDB_WORDS = (
    "the a and of to is it this movie film was in that i but for with as good bad great plot "
    "acting story characters boring terrible wonderful awful best worst love hate fun scenes "
    "director ending music script"
).split()


def write_imdb(
    data_home: str | os.PathLike, n_per_class: int = 20, n_words: int = 60, seed: int = 0
) -> str:
    """Write ``aclImdb_v1.tar.gz`` under ``data_home/imdb``.

    ``n_per_class`` reviews in each of ``aclImdb/{train,test}/{pos,neg}/`` (named
    ``<id>_<rating>.txt``), plus members the readers must skip (``train/unsup``, ``imdb.vocab``,
    ``README``). Reviews mix capitals, punctuation and ``<br />`` as real ones do; words are drawn
    with Zipf-like frequencies, so ``word_dict()`` (cutoff 150) keeps the few commonest ones.

    Returns
    -------
    str
        The path of the archive.
    """
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(_IMDB_WORDS) + 1)
    weights /= weights.sum()
    decorations = ("", "", "", ",", ".", "!", "'s", "?")

    def review() -> bytes:
        words = rng.choice(_IMDB_WORDS, n_words, p=weights)
        out = []
        for i, w in enumerate(words):
            w = w.capitalize() if rng.random() < 0.2 else str(w)
            out.append(w + decorations[rng.integers(len(decorations))])
            if i == n_words // 2:
                out.append("<br /><br />")
        return (" ".join(out) + "\n").encode()

    members = [("aclImdb/README", b"synthetic stand-in for aclImdb_v1\n")]
    members.append(("aclImdb/imdb.vocab", "\n".join(_IMDB_WORDS).encode()))
    for split in ("train", "test"):
        for label, ratings in (("pos", (7, 10)), ("neg", (1, 4))):
            for i in range(n_per_class):
                rating = rng.integers(ratings[0], ratings[1] + 1)
                members.append((f"aclImdb/{split}/{label}/{i}_{rating}.txt", review()))
        if split == "train":
            members.append(("aclImdb/train/unsup/0_0.txt", review()))
    path = _cache_file(data_home, "imdb", imdb.URL)
    write_tgz(path, members)
    common.register_substitute(path)
    return path


# -- flowers ----------------------------------------------------------------------------------


def write_flowers(data_home: str | os.PathLike, n_images: int = 30, seed: int = 0) -> str:
    """Write ``102flowers.tgz`` (JPEGs of a few sizes, portrait and landscape), and the two
    ``.mat`` files (labels 1..102; ``trnid``, ``tstid`` and ``valid`` a third of the images
    each) under ``data_home/flowers``. Needs Pillow and scipy.

    Returns
    -------
    str
        The directory ``data_home/flowers``.
    """
    from PIL import Image
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    members = []
    for i in range(1, n_images + 1):
        w, h = (300, 260) if i % 2 else (250, 320)
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        members.append((f"jpg/image_{i:05d}.jpg", buf.getvalue()))
    labels = rng.integers(1, 103, n_images)
    ids = np.arange(1, n_images + 1)
    third = n_images // 3
    paths = [_cache_file(data_home, "flowers", url)
             for url in (flowers.DATA_URL, flowers.LABEL_URL, flowers.SETID_URL)]
    write_tgz(paths[0], members)
    for path, content in ((paths[1], {"labels": labels[None, :]}),
                          (paths[2], {"trnid": ids[None, :third],
                                      "tstid": ids[None, third:2 * third],
                                      "valid": ids[None, 2 * third:]})):
        with open(path, "wb") as f:
            savemat(f, content)
    for path in paths:
        common.register_substitute(path)
    return os.path.join(os.fspath(data_home), "flowers")


# -- cifar ------------------------------------------------------------------------------------


class Py2Pickler(pickle._Pickler):
    """Pickles as Python 2's cPickle wrote the published CIFAR batches (protocol 2): text and
    bytes as Python 2 ``str`` (read back as bytes with ``encoding="bytes"``), numpy's array
    reconstruction under its numpy 1 name ``numpy.core.multiarray``."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj) -> None:
        data = obj.encode("latin-1") if isinstance(obj, str) else obj
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str
    dispatch[str] = save_py2_str

    def save_global(self, obj, name=None) -> None:
        if getattr(obj, "__name__", None) == "_reconstruct":
            self.write(pickle.GLOBAL + b"numpy.core.multiarray\n_reconstruct\n")
            self.memoize(obj)
        else:
            super().save_global(obj, name)


def py2_pickle(obj) -> bytes:
    """``obj`` pickled as Python 2 would (see :class:`Py2Pickler`)."""
    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def write_cifar(data_home: str | os.PathLike, n_per_batch: int = 20, seed: int = 0) -> str:
    """Write ``cifar-10-python.tar.gz`` and ``cifar-100-python.tar.gz`` under
    ``data_home/cifar``, laid out as the published archives.

    CIFAR-10: ``cifar-10-batches-py/`` with ``batches.meta``, ``data_batch_1`` ... ``_5``,
    ``readme.html`` and ``test_batch``; CIFAR-100: ``cifar-100-python/`` with ``file.txt~``,
    ``meta``, ``test`` and ``train``. Every batch holds ``n_per_batch`` random images
    (``b"data"``, uint8 ``(n, 3072)``) and the published keys (``b"labels"``, or
    ``b"fine_labels"`` and ``b"coarse_labels"``, ``b"filenames"``, ``b"batch_label"``), pickled
    as Python 2 wrote them. The training set of CIFAR-100 holds ``2 * n_per_batch`` images.

    Returns
    -------
    str
        The directory ``data_home/cifar``.
    """
    rng = np.random.default_rng(seed)

    def batch(n: int, label_keys: dict[str, int], name: str) -> bytes:
        content: dict = {"batch_label": name}
        for key, n_classes in label_keys.items():
            content[key] = [int(v) for v in rng.integers(0, n_classes, n)]
        content["data"] = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        content["filenames"] = [f"image_{name}_{i}.png" for i in range(n)]
        return py2_pickle({k.encode(): v for k, v in content.items()})

    ten = "cifar-10-batches-py"
    members10: list[tuple[str, bytes | None]] = [
        (ten, None),
        (f"{ten}/batches.meta", py2_pickle({b"label_names": [f"c{k}" for k in range(10)]})),
    ]
    members10 += [(f"{ten}/data_batch_{k}", batch(n_per_batch, {"labels": 10},
                                                  f"training batch {k} of 5"))
                  for k in range(1, 6)]
    members10 += [(f"{ten}/readme.html", b"<html>synthetic CIFAR-10</html>\n"),
                  (f"{ten}/test_batch", batch(n_per_batch, {"labels": 10}, "testing batch 1"))]
    hundred = "cifar-100-python"
    labels100 = {"fine_labels": 100, "coarse_labels": 20}
    members100: list[tuple[str, bytes | None]] = [
        (hundred, None),
        (f"{hundred}/file.txt~", b""),
        (f"{hundred}/meta", py2_pickle({b"fine_label_names": [f"f{k}" for k in range(100)]})),
        (f"{hundred}/test", batch(n_per_batch, labels100, "testing")),
        (f"{hundred}/train", batch(2 * n_per_batch, labels100, "training")),
    ]
    for url, members in ((cifar.CIFAR10_URL, members10), (cifar.CIFAR100_URL, members100)):
        path = _cache_file(data_home, "cifar", url)
        write_tgz(path, members)
        common.register_substitute(path)
    return os.path.join(os.fspath(data_home), "cifar")


# -- dist_transformer.py's WMT16 en-de files ---------------------------------------------------

#: the files dist_transformer.py reads from ``<data_home>/test_dist_transformer/``
#: ``ModelHyperParams`` of dist_transformer.py for the tests: its structure (encoder and decoder
#: stacks, 8 heads, weight sharing, parameters sliced over the pservers) at a size a 2-core CI
#: runs in seconds. Paddle's 6 layers of d_model 512 (42 M
#: parameters, Adam over all of them) made its files' four tests 2.5 min of a 13 min suite.
#: The ops and the program are the same at every size; the runners set these before
#: ``update_args()``, as Paddle's own ``merge_cfg_from_list`` does.
TRANSFORMER_TEST_SIZES = {"d_model": 256, "d_key": 32, "d_value": 32, "d_inner_hid": 512,
                          "n_layer": 2}

TRANSFORMER_FILES = ("vocab.bpe.32000", "train.tok.clean.bpe.32000.en-de",
                     "train.tok.clean.bpe.32000.en-de.train_0",
                     "train.tok.clean.bpe.32000.en-de.train_1",
                     "newstest2013.tok.bpe.32000.en-de.cut")


def write_transformer(data_home: str | os.PathLike, n_batches: int = 6, local_batch: int = 20,
                      n_words: int = 29, n_val: int = 10, seed: int = 0) -> str:
    """Write the BPE vocabulary, train, per-trainer train and cut test files of Paddle's
    ``test_dist_transformer`` (``src tokens<TAB>trg tokens`` lines) under
    ``data_home/test_dist_transformer``.

    The local file's batch ``b`` of ``local_batch`` lines is trainer 0's batch ``b`` (first
    half) followed by trainer 1's (second half), so that the runner's local run (batch 20) and
    2-trainer run (batch 10 each, its own file) see the same samples at every step. Sentences
    have 2 to 6 tokens of ``n_words`` words; the vocabulary starts ``<s>``, ``<e>``, ``<unk>``.

    Returns
    -------
    str
        The directory.
    """
    rng = np.random.default_rng(seed)
    words = [f"w{k:02d}@@" if k % 3 == 0 else f"w{k:02d}" for k in range(n_words)]
    vocab = ["<s>", "<e>", "<unk>", *words]

    def sentence() -> str:
        return " ".join(rng.choice(words, int(rng.integers(2, 7))))

    def lines(n: int) -> list[str]:
        return [f"{sentence()}\t{sentence()}\n" for _ in range(n)]

    half = local_batch // 2
    train = lines(n_batches * local_batch)
    shards: tuple[list[str], list[str]] = ([], [])
    for b in range(n_batches):
        batch = train[b * local_batch:(b + 1) * local_batch]
        shards[0].extend(batch[:half])
        shards[1].extend(batch[half:])
    directory = os.path.join(os.fspath(data_home), "test_dist_transformer")
    os.makedirs(directory, exist_ok=True)
    contents = ("".join(w + "\n" for w in vocab), "".join(train), "".join(shards[0]),
                "".join(shards[1]), "".join(lines(n_val)))
    for name, text in zip(TRANSFORMER_FILES, contents, strict=True):
        with open(os.path.join(directory, name), "w") as f:
            f.write(text)
    return directory


# -- dist_simnet_bow.py's simnet.train.1000 ----------------------------------------------------

SIMNET_URL = "http://paddle-dist-ce-data.bj.bcebos.com/simnet.train.1000"


def write_simnet(data_home: str | os.PathLike, n_lines: int = 120, dict_dim: int = 1500,
                 seed: int = 0) -> str:
    """Write ``simnet/train``: one query a line with its positive and negative titles, as
    ``<id>;<n_pos> <n_neg>;<query ids>;<pos ids>...;<neg ids>...;`` (the layout
    dist_simnet_bow.py parses), ids below ``dict_dim``; registered as a substitute.

    Returns
    -------
    str
        The path of the file.
    """
    rng = np.random.default_rng(seed)

    def ids() -> str:
        return " ".join(str(int(i)) for i in rng.integers(0, dict_dim, int(rng.integers(2, 8))))

    lines = []
    for k in range(n_lines):
        n_pos, n_neg = int(rng.integers(1, 3)), int(rng.integers(1, 4))
        fields = [str(k), f"{n_pos} {n_neg}", ids(), *(ids() for _ in range(n_pos + n_neg))]
        lines.append(";".join(fields) + ";\n")
    path = _cache_file(data_home, "simnet", SIMNET_URL)
    path = os.path.join(os.path.dirname(path), "train")
    with open(path, "w") as f:
        f.write("".join(lines))
    common.register_substitute(path)
    return path


# -- dist_text_classification.py's imdb.vocab and text_classification.tar.gz -------------------

TEXT_CLASSIFICATION_URLS = ("http://paddle-dist-ce-data.bj.bcebos.com/imdb.vocab",
                            "http://paddle-dist-ce-data.bj.bcebos.com/text_classification.tar.gz")


def write_text_classification(data_home: str | os.PathLike, n_per_class: int = 24,
                              seed: int = 0) -> str:
    """Write ``text_classification/imdb.vocab`` (a word a line) and
    ``text_classification/text_classification.tar.gz`` (``train/pos/*.txt``,
    ``train/neg/*.txt``, ``test/...``: reviews of 3 to 12 words with punctuation and capitals,
    which the reader strips), both registered as substitutes.

    Returns
    -------
    str
        The directory.
    """
    rng = np.random.default_rng(seed)
    words = _IMDB_WORDS
    members = []
    for split in ("train", "test"):
        for label in ("pos", "neg"):
            for i in range(n_per_class):
                picked = rng.choice(words, int(rng.integers(3, 13)))
                text = " ".join(picked).capitalize() + ", really!\n"
                members.append((f"{split}/{label}/{i}_{int(rng.integers(1, 11))}.txt",
                                text.encode()))
    vocab_path = _cache_file(data_home, "text_classification", TEXT_CLASSIFICATION_URLS[0])
    with open(vocab_path, "w") as f:
        f.write("".join(w + "\n" for w in words[:-5]))  # a few words read as <unk>
    tar_path = _cache_file(data_home, "text_classification", TEXT_CLASSIFICATION_URLS[1])
    write_tgz(tar_path, members)
    for path in (vocab_path, tar_path):
        common.register_substitute(path)
    return os.path.dirname(tar_path)


# -- dist_ctr.py's avazu_ctr_data.tgz ----------------------------------------------------------

AVAZU_URL = "http://paddle-ctr-data.bj.bcebos.com/avazu_ctr_data.tgz"


def write_avazu_ctr(data_home: str | os.PathLike, n_lines: int = 80, dnn_dim: int = 600,
                    lr_dim: int = 900, seed: int = 0) -> str:
    """Write ``avazu_ctr_data/avazu_ctr_data.tgz``: ``train.txt``, ``test.txt`` and
    ``infer.txt`` (``<dnn ids>\\t<lr id:value ...>\\t<click>`` lines, a few ids each) and
    ``data.meta.txt`` (``dnn_input_dim: ...``, ``lr_input_dim: ...``), registered as a
    substitute. Returns the archive's path."""
    rng = np.random.default_rng(seed)

    def lines(n: int, with_click: bool = True) -> bytes:
        out = []
        for _ in range(n):
            dnn = " ".join(str(int(i)) for i in rng.integers(0, dnn_dim, int(rng.integers(2, 9))))
            lr = " ".join(f"{int(i)}:1" for i in rng.integers(0, lr_dim, int(rng.integers(1, 6))))
            fields = [dnn, lr] + ([str(int(rng.integers(0, 2)))] if with_click else [])
            out.append("\t".join(fields) + "\n")
        return "".join(out).encode()

    meta = f"dnn_input_dim: {dnn_dim}\nlr_input_dim: {lr_dim}\n".encode()
    path = _cache_file(data_home, "avazu_ctr_data", AVAZU_URL)
    write_tgz(path, [("avazu_ctr_data/train.txt", lines(n_lines)),
                      ("avazu_ctr_data/test.txt", lines(n_lines // 4)),
                      ("avazu_ctr_data/infer.txt", lines(n_lines // 4, with_click=False)),
                      ("avazu_ctr_data/data.meta.txt", meta)])
    common.register_substitute(path)
    return path


# -- wmt14 and wmt16 ---------------------------------------------------------------------------

_WMT_MARKS = ["<s>", "<e>", "<unk>"]
_EN_WORDS = (
    "a the man woman dog girl boy is are in on with and of street water playing two people "
    "young red blue wearing shirt sitting standing black white"
).split()
_DE_WORDS = (
    "ein eine der die das mann frau hund mädchen junge ist sind in auf mit und straße wasser "
    "spielt zwei leute jung rot blau trägt hemd sitzt steht schwarz weiß über"
).split()


def write_wmt14(
    data_home: str | os.PathLike,
    n_train: int = 40,
    n_test: int = 10,
    n_gen: int = 5,
    n_words: int = 27,
    with_model: bool = True,
    seed: int = 0,
) -> dict:
    """Write ``wmt14.tgz`` (and a stand-in for the model ``wmt%2Fwmt14.tgz``) under
    ``data_home/wmt14``, both registered as substitutes.

    Layout of the published archive: ``wmt14/src.dict`` and ``wmt14/trg.dict`` (``<s>``, ``<e>``,
    ``<unk>``, then ``n_words`` words, one a line), ``wmt14/{train/train,test/test,gen/gen}``
    (``source<TAB>target`` lines, UTF-8, accented words included). The training split also has
    the length boundary cases (80 source ids with the marks, kept; 81, dropped; 80 target words,
    kept; 81, dropped), malformed lines (no tab, two tabs, empty) and words outside both
    dictionaries.

    Returns
    -------
    dict
        ``path``, ``model_path``, ``src.dict`` and ``trg.dict`` (lists of words, marks first)
        and ``train``, ``test``, ``gen`` (the lines of each split, newline included).
    """
    rng = np.random.default_rng(seed)
    src_vocab = [*_WMT_MARKS, "été", "garçon", *(f"fr{k:02d}" for k in range(n_words - 2))]
    trg_vocab = [*_WMT_MARKS, "naïve", "café", *(f"en{k:02d}" for k in range(n_words - 2))]
    src_pool = [*src_vocab[3:], "oovfr1", "oovfr2"]
    trg_pool = [*trg_vocab[3:], "ooven1", "ooven2"]

    def sentence(pool: list[str], n: int | None = None) -> str:
        n = int(rng.integers(1, 13)) if n is None else n
        return " ".join(str(w) for w in rng.choice(pool, n))

    def lines(n: int) -> list[str]:
        return [f"{sentence(src_pool)}\t{sentence(trg_pool)}\n" for _ in range(n)]

    content: dict = {"src.dict": src_vocab, "trg.dict": trg_vocab}
    train = lines(n_train)
    specials = [
        f"{sentence(src_pool, 78)}\t{sentence(trg_pool)}\n",  # 80 source ids: kept
        f"{sentence(src_pool, 79)}\t{sentence(trg_pool)}\n",  # 81: dropped
        f"{sentence(src_pool)}\t{sentence(trg_pool, 80)}\n",  # 80 target words: kept
        f"{sentence(src_pool)}\t{sentence(trg_pool, 81)}\n",  # 81: dropped
        f"{sentence(src_pool)} {sentence(trg_pool)}\n",  # no tab
        f"{sentence(src_pool)}\t{sentence(trg_pool)}\t{sentence(trg_pool)}\n",  # two tabs
        "\n",
        f"  {sentence(src_pool)}\t{sentence(trg_pool)}  \r\n",  # stripped, kept
    ]
    for k, line in enumerate(specials):
        train.insert(3 + 4 * k, line)
    content.update(train=train, test=lines(n_test), gen=lines(n_gen))

    path = _cache_file(data_home, "wmt14", wmt14.URL_TRAIN)
    write_tgz(
        path,
        [
            ("wmt14", None),
            ("wmt14/README", b"synthetic stand-in for wmt14.tgz\n"),
            ("wmt14/src.dict", "".join(w + "\n" for w in src_vocab).encode()),
            ("wmt14/trg.dict", "".join(w + "\n" for w in trg_vocab).encode()),
            ("wmt14/train", None),
            ("wmt14/train/train", "".join(content["train"]).encode()),
            ("wmt14/test", None),
            ("wmt14/test/test", "".join(content["test"]).encode()),
            ("wmt14/gen", None),
            ("wmt14/gen/gen", "".join(content["gen"]).encode()),
        ],
    )
    common.register_substitute(path)
    content["path"] = path
    if with_model:
        model_path = _cache_file(data_home, "wmt14", wmt14.URL_MODEL)
        write_tgz(model_path, [("README", b"synthetic stand-in for the wmt14 model\n")])
        common.register_substitute(model_path)
        content["model_path"] = model_path
    return content


def write_wmt16(
    data_home: str | os.PathLike, n_train: int = 60, n_test: int = 15, n_val: int = 12,
    seed: int = 0,
) -> dict:
    """Write ``wmt16.tar.gz`` under ``data_home/wmt16``, registered as a substitute.

    Layout of the published archive: members ``wmt16/train``, ``wmt16/test`` and ``wmt16/val`` of
    UTF-8 lines ``English<TAB>German`` (lower-case tokens, umlauts and ß included). Words are drawn
    with Zipf-like frequencies, so counts tie; the training split starts with ``zebra apple``
    (each word seen once: a tie whose first-appearance order is not the alphabetical one) and
    holds malformed lines (no tab, two tabs, empty) whose words must not be counted. Test and
    validation lines often use a word the training split lacks.

    Returns
    -------
    dict
        ``path`` and ``train``, ``test``, ``val``: the lines of each member, newline included.
    """
    rng = np.random.default_rng(seed)

    def sentence(words: list[str], extra: Sequence[str] = ()) -> str:
        pool = [*extra, *words]
        weights = 1.0 / np.arange(1, len(pool) + 1)
        picked = rng.choice(pool, int(rng.integers(2, 10)), p=weights / weights.sum())
        return " ".join(str(w) for w in picked)

    def lines(n: int, extra_en: Sequence[str] = (), extra_de: Sequence[str] = ()) -> list[str]:
        return [f"{sentence(_EN_WORDS, extra_en)}\t{sentence(_DE_WORDS, extra_de)}\n"
                for _ in range(n)]

    train = ["zebra apple\tzebra apfel\n", *lines(n_train)]
    for k, bad in enumerate(["onlyinbadline a man\n", "a\tb\tc onlyinbadline\n", "\n"]):
        train.insert(5 + 7 * k, bad)
    content = {
        "train": train,
        "test": lines(n_test, ["unseen"], ["ungesehen"]),
        "val": lines(n_val, ["unseen"], ["ungesehen"]),
    }
    path = os.path.join(os.path.dirname(_cache_file(data_home, "wmt16", wmt16.DATA_URL)),
                        wmt16.SAVE_NAME)
    write_tgz(path, [("wmt16", None), *((f"wmt16/{name}", "".join(text).encode())
                                         for name, text in content.items())])
    common.register_substitute(path)
    return {"path": path, **content}


# -- movielens ---------------------------------------------------------------------------------

_ML_GENRES = (
    "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
    "War", "Western",
)
_ML_WORDS = (
    "Story", "Toy", "Heat", "Night", "City", "Lost", "Children", "Love", "Dead", "Man", "Star",
    "Wars", "Return", "Jumanji", "Casino", "Sabrina", "Nixon", "Babe", "Fargo", "Sense",
)


def _write_zip(path: str, members: Sequence[tuple[str, bytes | None]]) -> None:
    """A zip of ``(name, data)`` members (``data`` None: a directory), the same bytes each run."""
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(2003, 3, 1, 0, 0, 0))
            if data is None:
                info.external_attr = (0o40755 << 16) | 0x10
                zf.writestr(info, b"")
            else:
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)


def write_movielens(
    data_home: str | os.PathLike, n_movies: int = 14, n_users: int = 10, n_ratings: int = 300,
    seed: int = 0,
) -> dict:
    """Write ``movielens%2Fml-1m.zip`` under ``data_home/movielens``, registered as a substitute.

    Layout of the published archive: ``ml-1m/`` with ``README``, ``movies.dat``
    (``MovieID::Title (Year)::Genre|Genre``), ``users.dat``
    (``UserID::Gender::Age::Occupation::Zip-code``) and ``ratings.dat``
    (``UserID::MovieID::Rating::Timestamp``), latin-1, ``\\n``-terminated lines. Movie ids have
    gaps; titles mix capitals, a trailing ``, The``, an alternative title in brackets and
    latin-1 letters (``Cité``, ``été``, which are not UTF-8 in the file); the first titles use
    words in an order that is not alphabetical. Every user and movie is rated.

    Returns
    -------
    dict
        ``path`` and ``movies``, ``users``, ``ratings``: the lines of each file as ``str``,
        without their newline.
    """
    rng = np.random.default_rng(seed)
    movie_ids = sorted(int(i) for i in rng.choice(np.arange(1, 4 * n_movies), n_movies,
                                                  replace=False))
    specials = [
        "Toy Story (1995)",
        "City of Lost Children, The (Cité des enfants perdus, La) (1995)",
        "Heat (1995)",
        "été Night of the Dead (1978)",
    ]
    movies = []
    for k, movie_id in enumerate(movie_ids):
        if k < len(specials):
            title = specials[k]
        else:
            words = rng.choice(_ML_WORDS, int(rng.integers(1, 4)), replace=False)
            title = f"{' '.join(str(w) for w in words)} ({int(rng.integers(1930, 2001))})"
        genres = rng.choice(_ML_GENRES, int(rng.integers(1, 4)), replace=False)
        movies.append(f"{movie_id}::{title}::{'|'.join(str(g) for g in genres)}")
    users = []
    for uid in range(1, n_users + 1):
        gender = "F" if rng.random() < 0.4 else "M"
        age = (1, 18, 25, 35, 45, 50, 56)[int(rng.integers(7))]
        job = int(rng.integers(0, 21))
        zipcode = f"{int(rng.integers(10000, 99999))}" + ("-1234" if uid == 3 else "")
        users.append(f"{uid}::{gender}::{age}::{job}::{zipcode}")
    ratings = []
    for k in range(n_ratings):
        # the first lines rate every movie and every user once
        uid = k + 1 if k < n_users else int(rng.integers(1, n_users + 1))
        movie_id = movie_ids[k] if k < n_movies else int(rng.choice(movie_ids))
        rating = int(rng.integers(1, 6))
        ratings.append(f"{uid}::{movie_id}::{rating}::{978300000 + 37 * k}")

    def text(lines: list[str]) -> bytes:
        return "".join(line + "\n" for line in lines).encode("latin-1")

    path = _cache_file(data_home, "movielens", movielens.URL)
    _write_zip(path, [
        ("ml-1m/", None),
        ("ml-1m/README", b"synthetic stand-in for MovieLens 1M\n"),
        ("ml-1m/movies.dat", text(movies)),
        ("ml-1m/ratings.dat", text(ratings)),
        ("ml-1m/users.dat", text(users)),
    ])
    common.register_substitute(path)
    return {"path": path, "movies": movies, "users": users, "ratings": ratings}


# -- conll05 -----------------------------------------------------------------------------------

_CONLL_WORDS = (
    "the company said it would buy shares of a bank in new york for million dollars "
    "yesterday investors sold their stock after market closed and analysts expect profits"
).split()
# lemma -> the word the sentences use for it
_CONLL_VERBS = {"say": "said", "buy": "buy", "sell": "sold", "close": "closed",
                "expect": "expect", "go": "go"}
_CONLL_TAGS = ("A0", "A1", "AM-TMP", "A2", "AM-LOC", "C-A1")


def _props_lines(words: list[str], predicates: list[tuple[str, int, list]]) -> list[str]:
    """The props lines of one sentence: the lemma column then one bracket column a predicate."""
    columns = [["-"] * len(words)]
    for lemma, verb_pos, spans in predicates:
        columns[0][verb_pos] = lemma
        col = ["*"] * len(words)
        for start, end, tag in spans:  # end exclusive
            if end - start == 1:
                col[start] = f"({tag}*)"
            else:
                col[start] = f"({tag}*"
                col[end - 1] = "*)"
        columns.append(col)
    return ["   ".join(c[i].ljust(8) for c in columns).rstrip() for i in range(len(words))]


def write_conll05(data_home: str | os.PathLike, n_sentences: int = 10, seed: int = 0) -> dict:
    """Write the five files of paddle.dataset.conll05 under ``data_home/conll05st``, each
    registered as a substitute.

    - ``conll05st-tests.tar.gz``: ``conll05st-release/`` with a README, the gzipped
      ``test.wsj/words/test.wsj.words.gz`` (a word a line) and ``test.wsj/props/test.wsj.props.gz``
      (the lemma column, ``-`` or the predicate's lemma, then one column of bracketed arguments
      per predicate, space-aligned), a blank line after each sentence, and a ``test.brown`` pair
      the module does not read. Sentences are random, 0 to 3 predicates each, arguments
      ``(A0*`` ... ``*)`` or ``(A0*)`` around the verb ``(V*)``; fixed ones put the verb first,
      last, alone in a one-word sentence, use a UTF-8 word (``café``), words outside the
      dictionary and the lemma ``go``, which is not in the verb dictionary.
    - ``conll05st%2FwordDict.txt``: ``<unk>`` (id 0), ``bos``, ``eos``, then most corpus words;
    - ``conll05st%2FverbDict.txt``: the lemmas but ``go``;
    - ``conll05st%2FtargetDict.txt``: labels, ``O`` first, tags in a non-alphabetical order,
      ``C-A1`` only as ``I-C-A1``;
    - ``conll05st%2Femb``: a 16-byte header and a float32 row of 32 per dictionary word.

    Returns
    -------
    dict
        ``path`` (the archive), ``dir``, ``word_dict``, ``verb_dict``, ``target_dict`` (lines),
        ``emb`` (the float32 matrix) and ``sentences``: ``(words, predicates)`` with each
        predicate ``(lemma, verb position, [(start, end exclusive, tag), ...])``, the verb's own
        span ``V`` included.
    """
    rng = np.random.default_rng(seed)
    lemmas = sorted(_CONLL_VERBS)
    sentences: list[tuple[list[str], list]] = [
        (["go"], [("go", 0, [(0, 1, "V")])]),
        (["said", "the", "company"], [("say", 0, [(0, 1, "V"), (1, 3, "A0")])]),
        (["investors", "sold", "café", "zzunknown", "yesterday"],
         [("sell", 1, [(0, 1, "A0"), (1, 2, "V"), (2, 4, "A1"), (4, 5, "AM-TMP")])]),
        (["the", "market", "closed"], [("close", 2, [(0, 2, "A1"), (2, 3, "V")])]),
        (["new", "york", "and", "london"], []),
    ]
    while len(sentences) < n_sentences:
        n = int(rng.integers(4, 13))
        words = [str(w) for w in rng.choice(_CONLL_WORDS, n)]
        positions = sorted(int(p) for p in rng.choice(n, int(rng.integers(1, 4)), replace=False))
        predicates = []
        for verb_pos in positions:
            lemma = str(rng.choice([lemma for lemma in lemmas if lemma != "go"]))
            words[verb_pos] = _CONLL_VERBS[lemma]
            spans = [(verb_pos, verb_pos + 1, "V")]
            # an argument before and one after the verb, when there is room
            if verb_pos > 0:
                start = int(rng.integers(0, verb_pos))
                spans.insert(0, (start, verb_pos, str(rng.choice(_CONLL_TAGS))))
            if verb_pos + 1 < n:
                end = int(rng.integers(verb_pos + 2, n + 1))
                spans.append((verb_pos + 1, end, str(rng.choice(_CONLL_TAGS))))
            predicates.append((lemma, verb_pos, spans))
        sentences.append((words, predicates))

    words_lines: list[str] = []
    props: list[str] = []
    for words, predicates in sentences:
        words_lines += [*words, ""]
        props += [*_props_lines(words, predicates), ""]
    corpus_words = list(dict.fromkeys(w for words, _ in sentences for w in words))
    word_dict = ["<unk>", "bos", "eos", *(w for w in corpus_words if w != "zzunknown"),
                 "extra"]
    verb_dict = [lemma for lemma in lemmas if lemma != "go"]
    target_dict = ["O", "B-V", "I-V", "B-AM-TMP", "I-AM-TMP", "B-A1", "I-A1", "B-A0", "I-A0",
                   "B-A2", "I-A2", "B-AM-LOC", "I-AM-LOC", "I-C-A1"]
    emb = rng.standard_normal((len(word_dict), 32)).astype(np.float32)

    def gz(lines: list[str]) -> bytes:
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
            f.write("".join(line + "\n" for line in lines).encode("utf-8"))
        return buf.getvalue()

    paths = {name: _cache_file(data_home, "conll05st", getattr(conll05, name)) for name in (
        "DATA_URL", "WORDDICT_URL", "VERBDICT_URL", "TRGDICT_URL", "EMB_URL")}
    release = "conll05st-release"
    write_tgz(paths["DATA_URL"], [
        (release, None),
        (f"{release}/README", b"synthetic stand-in for the CoNLL-2005 test sets\n"),
        (f"{release}/test.brown", None),
        (f"{release}/test.brown/words", None),
        (f"{release}/test.brown/words/test.brown.words.gz", gz(["the", "end", ""])),
        (f"{release}/test.brown/props", None),
        (f"{release}/test.brown/props/test.brown.props.gz", gz(["-   *", "-   *", ""])),
        (f"{release}/test.wsj", None),
        (f"{release}/test.wsj/words", None),
        (f"{release}/test.wsj/words/test.wsj.words.gz", gz(words_lines)),
        (f"{release}/test.wsj/props", None),
        (f"{release}/test.wsj/props/test.wsj.props.gz", gz(props)),
    ])
    for name, lines in (("WORDDICT_URL", word_dict), ("VERBDICT_URL", verb_dict),
                        ("TRGDICT_URL", target_dict)):
        with open(paths[name], "wb") as f:
            f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    header = np.array([0, 4], dtype="<u4").tobytes() + np.array([emb.size], "<u8").tobytes()
    with open(paths["EMB_URL"], "wb") as f:
        f.write(header + emb.tobytes())
    for path in paths.values():
        common.register_substitute(path)
    return {"path": paths["DATA_URL"], "dir": os.path.dirname(paths["EMB_URL"]),
            "word_dict": word_dict, "verb_dict": verb_dict, "target_dict": target_dict,
            "emb": emb, "sentences": sentences}
