"""paddle.dataset: the cache and downloader, and each dataset reader on a synthetic file.

No test contacts any host but 127.0.0.1: every dataset URL is pointed at a closed local port for
the whole module (same file names, so the cache paths do not change), and the download tests
serve files from a local HTTP server.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import http.server
import importlib
import os
import re
import string
import struct
import subprocess
import sys
import tarfile
import threading

import numpy as np
import pytest

from dask_fluid import compat
from dask_fluid.compat.batch import batch
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
from tests.compat import synthetic_data
from tests.compat.synthetic_data import closed_port_url, go_offline

DATASET_URLS = {
    mnist: ["TRAIN_IMAGE_URL", "TRAIN_LABEL_URL", "TEST_IMAGE_URL", "TEST_LABEL_URL"],
    uci_housing: ["URL"],
    imikolov: ["URL"],
    imdb: ["URL"],
    cifar: ["CIFAR10_URL", "CIFAR100_URL"],
    flowers: ["DATA_URL", "LABEL_URL", "SETID_URL"],
    wmt14: ["URL_TRAIN", "URL_MODEL", "URL_DEV_TEST"],
    wmt16: ["DATA_URL"],
    movielens: ["URL"],
    conll05: ["DATA_URL", "WORDDICT_URL", "VERBDICT_URL", "TRGDICT_URL", "EMB_URL"],
}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    for module, names in DATASET_URLS.items():
        go_offline(monkeypatch, module, names)


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "DATA_HOME", str(tmp_path))
    # uci_housing keeps what it loaded in module globals, as Paddle does
    monkeypatch.setattr(uci_housing, "UCI_TRAIN_DATA", None)
    monkeypatch.setattr(uci_housing, "UCI_TEST_DATA", None)
    return str(tmp_path)


class FileServer:
    """Serve ``files`` (name -> bytes) on 127.0.0.1 and count the requests per name."""

    def __init__(self, files):
        self.files = files
        self.requests = collections.Counter()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                name = self.path.lstrip("/")
                server.requests[name] += 1
                if name not in server.files:
                    self.send_error(404)
                    return
                body = server.files[name]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, name):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def file_server():
    servers = []

    def start(files):
        servers.append(FileServer(files))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


# -- common -----------------------------------------------------------------------------------


@pytest.mark.parametrize("override", [None, "/some/where/else"])
def test_data_home_is_paddles_unless_overridden(override):
    # In a fresh interpreter: DATA_HOME is read once, at import.
    env = {k: v for k, v in os.environ.items() if k != "DASK_FLUID_DATA_HOME"}
    if override is not None:
        env["DASK_FLUID_DATA_HOME"] = override
    code = "from dask_fluid.compat.dataset import common; print(common.DATA_HOME)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == (override or os.path.expanduser("~/.cache/paddle/dataset"))


def test_md5file(tmp_path):
    path = tmp_path / "hello"
    path.write_text("Hello\n")
    assert common.md5file(path) == "09f7e02f1290be211da707a266f153b3"


def test_cached_path_keeps_the_url_name_verbatim(data_home):
    assert common.cached_path(
        "https://dataset.bj.bcebos.com/imikolov%2Fsimple-examples.tgz", "imikolov"
    ) == os.path.join(data_home, "imikolov", "imikolov%2Fsimple-examples.tgz")
    assert common.cached_path("http://h/x/y.tgz", "simnet", "train") == os.path.join(
        data_home, "simnet", "train"
    )


def test_download_returns_the_cached_file_without_network(data_home):
    path = os.path.join(data_home, "text", "vocab.txt")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"a\nb\n")
    url = closed_port_url("vocab.txt")
    assert common.download(url, "text", md5(b"a\nb\n")) == path


def test_download_offline_error_names_path_url_and_md5(data_home):
    url = closed_port_url("data.tgz")
    want = "0123456789abcdef0123456789abcdef"
    path = os.path.join(data_home, "somedata", "data.tgz")
    with pytest.raises(common.DownloadError) as info:
        common.download(url, "somedata", want)
    err = info.value
    assert isinstance(err, RuntimeError)  # what Paddle raises
    msg = str(err)
    assert f"Cannot download {url} within retry limit 3" in msg
    assert path in msg and want in msg and "Connection refused" in msg
    assert (err.url, err.path, err.md5sum) == (url, path, want)
    assert msg.count("attempt ") == 3
    assert not os.path.exists(path)
    assert os.listdir(os.path.dirname(path)) == []  # no partial download left behind


def test_download_offline_with_a_corrupt_cached_file(data_home):
    path = os.path.join(data_home, "somedata", "data.tgz")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"truncated")
    with pytest.raises(common.DownloadError, match=f"the cached file's md5 is {md5(b'truncated')}"):
        common.download(closed_port_url("data.tgz"), "somedata", md5(b"the real content"))


def test_download_fetches_and_checks_md5(data_home, file_server):
    body = os.urandom(3 * (1 << 20) + 17)  # several read chunks
    server = file_server({"big.bin": body})
    path = common.download(server.url("big.bin"), "fetched", md5(body))
    assert path == os.path.join(data_home, "fetched", "big.bin")
    with open(path, "rb") as f:
        assert f.read() == body
    # now cached: no second request
    assert common.download(server.url("big.bin"), "fetched", md5(body)) == path
    assert server.requests["big.bin"] == 1


def test_download_save_name(data_home, file_server):
    server = file_server({"x.bin": b"xyz"})
    path = common.download(server.url("x.bin"), "fetched", md5(b"xyz"), save_name="train")
    assert path == os.path.join(data_home, "fetched", "train")


def test_download_retries_wrong_content_three_times(data_home, file_server):
    server = file_server({"bad.bin": b"not what was published"})
    want = md5(b"what was published")
    with pytest.raises(common.DownloadError, match="received a file with md5") as info:
        common.download(server.url("bad.bin"), "fetched", want)
    assert server.requests["bad.bin"] == 3
    assert want in str(info.value)
    assert os.listdir(os.path.join(data_home, "fetched")) == []


def test_register_substitute(data_home):
    path = os.path.join(data_home, "somedata", "data.tgz")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"synthetic")
    url = closed_port_url("data.tgz")
    published = "0123456789abcdef0123456789abcdef"
    with pytest.raises(common.DownloadError):
        common.download(url, "somedata", published)
    assert common.register_substitute(path) == md5(b"synthetic")
    assert common.download(url, "somedata", published) == path
    # the substitute is bound to its content: changed, it is rejected again
    with open(path, "ab") as f:
        f.write(b"!")
    with pytest.raises(common.DownloadError):
        common.download(url, "somedata", published)


def test_split_and_cluster_files_reader(tmp_path):
    def reader():
        yield from range(10)

    common.split(reader, 4, suffix=str(tmp_path / "part-%05d.pickle"))
    files = sorted(os.listdir(tmp_path))
    assert files == ["part-00000.pickle", "part-00001.pickle", "part-00002.pickle"]
    pattern = str(tmp_path / "part-*.pickle")
    # Paddle's boundaries: the first file closes after sample 4, then every 4 samples
    assert list(common.cluster_files_reader(pattern, 1, 0)()) == list(range(10))
    assert list(common.cluster_files_reader(pattern, 2, 0)()) == [0, 1, 2, 3, 4, 9]
    assert list(common.cluster_files_reader(pattern, 2, 1)()) == [5, 6, 7, 8]
    with pytest.raises(TypeError, match="dumper should be callable."):
        common.split(reader, 4, dumper=None)
    with pytest.raises(TypeError, match="loader should be callable."):
        common.cluster_files_reader(pattern, 1, 0, loader=None)


def test_fetch_all_uses_the_substitutes(data_home):
    synthetic_data.write_mnist(data_home)
    synthetic_data.write_uci_housing(data_home)
    synthetic_data.write_imikolov(data_home)
    synthetic_data.write_imdb(data_home)
    synthetic_data.write_cifar(data_home)
    synthetic_data.write_flowers(data_home, n_images=3)
    synthetic_data.write_wmt14(data_home)
    synthetic_data.write_wmt16(data_home)
    synthetic_data.write_movielens(data_home)
    synthetic_data.write_conll05(data_home)
    common.fetch_all()


@pytest.mark.parametrize(
    "call, module, md5sum",
    [
        (lambda: mnist.train(), "mnist", mnist.TRAIN_IMAGE_MD5),
        (lambda: mnist.fetch(), "mnist", mnist.TRAIN_IMAGE_MD5),
        (lambda: uci_housing.train(), "uci_housing", uci_housing.MD5),
        (lambda: imikolov.build_dict(), "imikolov", imikolov.MD5),
        (lambda: imdb.word_dict(), "imdb", imdb.MD5),
    ],
)
def test_dataset_offline_error(data_home, call, module, md5sum):
    with pytest.raises(common.DownloadError) as info:
        call()
    assert info.value.path.startswith(os.path.join(data_home, module) + os.sep)
    assert info.value.md5sum == md5sum
    assert md5sum in str(info.value)


def test_synthetic_files_are_deterministic(tmp_path):
    a = synthetic_data.write_imikolov(tmp_path / "a")
    b = synthetic_data.write_imikolov(tmp_path / "b")
    assert common.md5file(a) == common.md5file(b)
    assert os.path.getsize(a) < 100_000


# -- mnist ------------------------------------------------------------------------------------


def decode_idx(path):
    """The test's own IDX decoder: (array of items, dims)."""
    with gzip.open(path, "rb") as f:
        buf = f.read()
    magic = struct.unpack(">I", buf[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, buf[4 : 4 + 4 * ndim])
    return list(buf[4 + 4 * ndim :]), dims


@pytest.mark.parametrize("n_train", [200, 150])
def test_mnist_train_and_test(data_home, n_train):
    directory = synthetic_data.write_mnist(data_home, n_train=n_train, n_test=100)
    for reader, prefix, n in ((mnist.train(), "train", n_train), (mnist.test(), "t10k", 100)):
        pixels, (count, rows, cols) = decode_idx(
            os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz")
        )
        labels, (label_count,) = decode_idx(
            os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz")
        )
        assert (count, rows, cols, label_count) == (n, 28, 28, n)
        samples = list(reader())
        assert len(samples) == n
        for i, (image, label) in enumerate(samples):
            assert image.dtype == np.float32 and image.shape == (784,)
            assert type(label) is int and label == labels[i]
            raw = np.array(pixels[i * 784 : (i + 1) * 784], dtype=np.float32)
            np.testing.assert_array_equal(image, raw / np.float32(255) * 2 - 1)
        images = np.stack([s[0] for s in samples])
        assert images.min() >= -1.0 and images.max() <= 1.0


def test_mnist_as_dist_mnist_reads_it(data_home):
    synthetic_data.write_mnist(data_home)
    mnist.fetch()
    batches = list(batch(mnist.test(), batch_size=64)())
    assert [len(b) for b in batches] == [64, 36]
    image = np.array([b[0] for b in batches[0]]).reshape(-1, 1, 28, 28)
    assert image.shape == (64, 1, 28, 28)


def test_mnist_rejects_a_non_idx_file(data_home):
    directory = synthetic_data.write_mnist(data_home)
    images = os.path.join(directory, "t10k-images-idx3-ubyte.gz")
    labels = os.path.join(directory, "t10k-labels-idx1-ubyte.gz")
    with pytest.raises(ValueError, match="should be IDX image and label files"):
        list(mnist.reader_creator(labels, images, 100)())


# -- uci_housing ------------------------------------------------------------------------------


def test_uci_housing(data_home):
    path = synthetic_data.write_uci_housing(data_home, n_rows=50)
    with open(path) as f:
        rows = [[float(v) for v in line.split()] for line in f if line.strip()]
    data = np.array(rows)
    assert data.shape == (50, 14)
    expected = data.copy()
    for i in range(13):
        column = data[:, i]
        expected[:, i] = (column - column.sum() / 50) / (column.max() - column.min())
    train = list(uci_housing.train()())
    test = list(uci_housing.test()())
    assert (len(train), len(test)) == (40, 10)  # int(50 * 0.8)
    for (features, price), row in zip(train + test, expected, strict=True):
        assert features.shape == (13,) and price.shape == (1,)
        assert features.dtype == np.float64
        np.testing.assert_allclose(features, row[:13], rtol=0, atol=1e-12)
        assert price[0] == row[13]  # the price is not normalised
    assert len(uci_housing.feature_names) == 13
    np.testing.assert_array_equal(uci_housing.predict_reader()[0], test[0][0])


def test_uci_housing_loads_once_per_process(data_home):
    path = synthetic_data.write_uci_housing(data_home, n_rows=50, seed=0)
    first = [f.copy() for f, _ in uci_housing.train()()]
    synthetic_data.write_uci_housing(data_home, n_rows=50, seed=1)
    # Paddle keeps the first load in UCI_TRAIN_DATA / UCI_TEST_DATA
    np.testing.assert_array_equal([f for f, _ in uci_housing.train()()], first)
    uci_housing.UCI_TRAIN_DATA = uci_housing.UCI_TEST_DATA = None
    assert not np.array_equal([f for f, _ in uci_housing.train()()], first)
    assert os.path.exists(path)


# -- imikolov ---------------------------------------------------------------------------------


def ptb_lines(path, member):
    with tarfile.open(path) as tf:
        return tf.extractfile(member).read().decode().splitlines()


def expected_imikolov_dict(path, min_word_freq):
    counts = collections.Counter()
    for member in ("./simple-examples/data/ptb.train.txt", "./simple-examples/data/ptb.valid.txt"):
        for line in ptb_lines(path, member):
            counts.update(w.encode() for w in line.split())
            counts["<s>"] += 1
            counts["<e>"] += 1
    kept = [(w, c) for w, c in counts.items() if c > min_word_freq]
    order = sorted(kept, key=lambda x: (-x[1], x[0] if isinstance(x[0], bytes) else x[0].encode()))
    word_idx = {w: i for i, (w, _) in enumerate(order)}
    word_idx["<unk>"] = len(order)
    return word_idx, counts


def test_imikolov_build_dict(data_home):
    path = synthetic_data.write_imikolov(data_home)
    word_dict = imikolov.build_dict()
    expected, counts = expected_imikolov_dict(path, 50)
    assert word_dict == expected
    assert 20 <= len(word_dict) <= 60
    assert word_dict["<unk>"] == len(word_dict) - 1 == max(word_dict.values())
    # as in Paddle 1.8 on Python 3: corpus words are bytes, the corpus's <unk> is one of them
    assert b"word00" in word_dict and "word00" not in word_dict
    assert b"<unk>" in word_dict and counts[b"<unk>"] > 50
    assert all(counts[w] > 50 for w in word_dict if w != "<unk>")
    assert b"rare00" not in word_dict
    assert len(imikolov.build_dict(min_word_freq=0)) > len(word_dict)


def test_imikolov_ngrams(data_home):
    path = synthetic_data.write_imikolov(data_home)
    word_dict = imikolov.build_dict()
    unk = word_dict["<unk>"]
    for reader, member in (
        (imikolov.train(word_dict, 5), "./simple-examples/data/ptb.train.txt"),
        (imikolov.test(word_dict, 5), "./simple-examples/data/ptb.valid.txt"),
    ):
        expected = []
        for line in ptb_lines(path, member):
            ids = [word_dict.get(w, unk) for w in ["<s>", *[w.encode() for w in line.split()]]]
            ids.append(word_dict["<e>"])
            expected += [tuple(ids[i - 5 : i]) for i in range(5, len(ids) + 1)]
        assert list(reader()) == expected
    assert len(expected) > 100
    assert len(list(imikolov.train(word_dict, 5)())) >= 500


def test_imikolov_seq(data_home):
    path = synthetic_data.write_imikolov(data_home)
    word_dict = imikolov.build_dict()
    unk = word_dict["<unk>"]
    lines = ptb_lines(path, "./simple-examples/data/ptb.train.txt")
    samples = list(imikolov.train(word_dict, -1, data_type=imikolov.DataType.SEQ)())
    assert len(samples) == len(lines)
    for (src, trg), line in zip(samples, lines, strict=True):
        ids = [word_dict.get(w.encode(), unk) for w in line.split()]
        assert src == [word_dict["<s>"], *ids] and trg == [*ids, word_dict["<e>"]]
    short = list(imikolov.train(word_dict, 8, data_type=imikolov.DataType.SEQ)())
    assert short == [s for s in samples if len(s[0]) <= 8]


def test_imikolov_bad_arguments(data_home):
    synthetic_data.write_imikolov(data_home)
    word_dict = imikolov.build_dict()
    with pytest.raises(ValueError, match="Invalid gram length"):
        next(iter(imikolov.train(word_dict, -1)()))
    with pytest.raises(ValueError, match="Unknown data type 3"):
        next(iter(imikolov.train(word_dict, 5, data_type=3)()))


def test_imikolov_as_dist_word2vec_reads_it(data_home):
    synthetic_data.write_imikolov(data_home)
    word_dict = imikolov.build_dict()
    first = next(iter(batch(imikolov.train(word_dict, 5), 20)()))
    assert len(first) == 20
    assert all(len(t) == 5 and all(0 <= i < len(word_dict) for i in t) for t in first)
    assert first[0][0] == word_dict["<s>"]


# -- imdb -------------------------------------------------------------------------------------


def imdb_reviews(path, split, label):
    """The test's own tokeniser, on str: punctuation deleted, lower case, whitespace split."""
    table = str.maketrans("", "", string.punctuation)
    name = re.compile(rf"aclImdb/{split}/{label}/.*\.txt$")
    with tarfile.open(path) as tf:
        return [
            [w.encode() for w in tf.extractfile(m).read().decode().translate(table).lower().split()]
            for m in tf.getmembers()
            if name.match(m.name)
        ]


def test_imdb_word_dict_and_readers(data_home):
    path = synthetic_data.write_imdb(data_home, n_per_class=20)
    docs = {
        (split, label): imdb_reviews(path, split, label)
        for split in ("train", "test")
        for label in ("pos", "neg")
    }
    counts = collections.Counter(w for group in docs.values() for doc in group for w in doc)
    kept = sorted(((w, c) for w, c in counts.items() if c > 150), key=lambda x: (-x[1], x[0]))
    expected = {w: i for i, (w, _) in enumerate(kept)}
    expected["<unk>"] = len(kept)

    word_dict = imdb.word_dict()
    assert word_dict == expected
    assert 3 <= len(word_dict) < len(counts)
    assert b"br" in counts  # "<br />" loses its punctuation, as in Paddle

    unk = word_dict["<unk>"]
    for reader, split in ((imdb.train(word_dict), "train"), (imdb.test(word_dict), "test")):
        samples = list(reader())
        want = [([word_dict.get(w, unk) for w in d], 0) for d in docs[(split, "pos")]]
        want += [([word_dict.get(w, unk) for w in d], 1) for d in docs[(split, "neg")]]
        assert samples == want
        assert len(samples) == 40  # unsup/ and imdb.vocab are not read


def test_imdb_build_dict_pattern_and_cutoff(data_home):
    path = synthetic_data.write_imdb(data_home)
    pos = imdb_reviews(path, "train", "pos")
    counts = collections.Counter(w for doc in pos for w in doc)
    word_dict = imdb.build_dict(re.compile(r"aclImdb/train/pos/.*\.txt$"), 0)
    assert len(word_dict) == len(counts) + 1
    top = max(counts.items(), key=lambda x: (x[1], [-b for b in x[0]]))[0]
    assert word_dict[top] == 0


# -- flowers ----------------------------------------------------------------------------------


def test_flowers_splits_labels_and_the_test_mapping(data_home):
    pytest.importorskip("PIL", reason="paddle.dataset.flowers decodes JPEGs with Pillow")
    from PIL import Image
    from scipy.io import loadmat

    directory = synthetic_data.write_flowers(data_home, n_images=9)
    labels = loadmat(os.path.join(directory, "imagelabels.mat"))["labels"][0]
    # Paddle swaps the readme's splits: test() reads trnid (images 1..3 here), train() tstid
    test = list(flowers.test()())
    assert [label for _, label in test] == [int(v) - 1 for v in labels[:3]]
    assert len(list(flowers.train()())) == 3 and len(list(flowers.valid()())) == 3
    # the training crops and mirrors come from numpy's global generator, as in Paddle
    np.random.seed(5)
    first = [im for im, _ in flowers.train(use_xmap=False)()]
    np.random.seed(5)
    again = [im for im, _ in flowers.train(use_xmap=False)()]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    image, _ = test[0]
    assert image.dtype == np.float32 and image.shape == (3 * 224 * 224,)
    # an independent decode of image 1 (300 x 260): short side to 256, centre crop, BGR, CHW
    with tarfile.open(os.path.join(directory, "102flowers.tgz")) as tar:
        raw = Image.open(tar.extractfile("jpg/image_00001.jpg")).convert("RGB")
    resized = np.asarray(raw.resize((256 * 300 // 260, 256), resample=Image.BICUBIC),
                         np.float32)
    top, left = (256 - 224) // 2, (resized.shape[1] - 224) // 2
    expected = resized[top:top + 224, left:left + 224, ::-1].transpose(2, 0, 1) - \
        np.array([103.94, 116.78, 123.68], np.float32)[:, None, None]
    np.testing.assert_allclose(image.reshape(3, 224, 224), expected, rtol=1e-6, atol=1e-4)
    crops = {tuple(flowers.default_mapper(True, (tar_bytes, 0))[0][:5])
             for tar_bytes in [_jpeg_bytes(directory)] * 6}
    assert len(crops) > 1  # training crops and mirrors are random


def _jpeg_bytes(directory):
    with tarfile.open(os.path.join(directory, "102flowers.tgz")) as tar:
        return tar.extractfile("jpg/image_00002.jpg").read()


@pytest.mark.parametrize("name", sorted({*common._DATASET_MODULES, "image"}))
def test_every_dataset_module_imports_as_paddle_dataset(name):
    compat.install()
    try:
        module = importlib.import_module(f"paddle.dataset.{name}")
        assert module is importlib.import_module(f"dask_fluid.compat.dataset.{name}")
    finally:
        compat.uninstall()
