"""paddle.dataset.cifar on small synthetic archives, and paddle.dataset.image; no network.

The CIFAR URLs point at a closed local port. Expected samples are computed here from the
synthetic archives (the test's own pickles, so plain ``pickle.loads`` is safe on them), and
expected images from Pillow and numpy directly.
"""

from __future__ import annotations

import io
import itertools
import os
import pickle
import tarfile

import numpy as np
import pytest

from dask_fluid.compat.dataset import cifar, common, flowers, image
from tests.compat.synthetic_data import go_offline, py2_pickle, write_cifar, write_tgz

Image = pytest.importorskip("PIL.Image", reason="paddle.dataset.image decodes with Pillow")

N = 7  # images per synthetic CIFAR batch


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    go_offline(monkeypatch, cifar, ("CIFAR10_URL", "CIFAR100_URL"))


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "DATA_HOME", str(tmp_path))
    return str(tmp_path)


# -- cifar: the test's own reading of the synthetic archives -----------------------------------


def expected_cifar(path, sub_name):
    """``(data / 255.0 as float32, label)`` of every member containing ``sub_name``."""
    out = []
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if sub_name in member.name and member.isfile():
                batch = pickle.loads(tar.extractfile(member).read(), encoding="bytes")
                labels = batch.get(b"labels", batch.get(b"fine_labels"))
                for row, label in zip(batch[b"data"], labels, strict=True):
                    out.append(((row.astype(np.float64) / 255.0).astype(np.float32), label))
    return out


def assert_samples_equal(got, expected):
    assert len(got) == len(expected)
    for (image_got, label_got), (image_exp, label_exp) in zip(got, expected, strict=True):
        assert type(label_got) is int and label_got == label_exp
        assert image_got.dtype == np.float32 and image_got.shape == (3072,)
        np.testing.assert_array_equal(image_got, image_exp)


def test_cifar_urls_and_md5s_are_paddles():
    # the URL constants themselves point at a closed port here (go_offline), same file names
    assert cifar.URL_PREFIX == "https://dataset.bj.bcebos.com/cifar/"
    assert cifar.CIFAR10_URL.endswith("/cifar-10-python.tar.gz")
    assert cifar.CIFAR10_MD5 == "c58f30108f718f92721af3b95e74349a"
    assert cifar.CIFAR100_URL.endswith("/cifar-100-python.tar.gz")
    assert cifar.CIFAR100_MD5 == "eb9058c3a382ffc7106e4002c42a8d85"


@pytest.mark.parametrize(
    "creator, archive, sub_name, n",
    [
        (cifar.train10, "cifar-10-python.tar.gz", "data_batch", 5 * N),
        (cifar.test10, "cifar-10-python.tar.gz", "test_batch", N),
        (cifar.train100, "cifar-100-python.tar.gz", "train", 2 * N),
        (cifar.test100, "cifar-100-python.tar.gz", "test", N),
    ],
)
def test_cifar_splits_formats_and_values(data_home, creator, archive, sub_name, n):
    directory = write_cifar(data_home, n_per_batch=N)
    got = list(creator()())
    expected = expected_cifar(os.path.join(directory, archive), sub_name)
    assert len(expected) == n  # only the batches: not batches.meta, readme.html, meta, file.txt~
    assert_samples_equal(got, expected)
    labels = {label for _, label in got}
    assert labels <= set(range(10 if "10-" in archive else 100))
    assert all(0.0 <= im.min() and im.max() <= 1.0 for im, _ in got)


def test_cifar_train10_reads_the_five_batches_in_order(data_home):
    directory = write_cifar(data_home, n_per_batch=N)
    path = os.path.join(directory, "cifar-10-python.tar.gz")
    got = list(cifar.train10()())
    for k in range(5):
        batch = expected_cifar(path, f"data_batch_{k + 1}")
        assert_samples_equal(got[k * N:(k + 1) * N], batch)


@pytest.mark.parametrize("creator", [cifar.train10, cifar.test10, cifar.train100, cifar.test100])
def test_cifar_cycle_starts_over(data_home, creator):
    write_cifar(data_home, n_per_batch=N)
    once = list(creator()())
    cycled = list(itertools.islice(creator(cycle=True)(), 2 * len(once) + 3))
    assert_samples_equal(cycled, once + once + once[:3])


def test_cifar_offline_error_names_path_url_and_md5(data_home):
    for call, md5sum in ((cifar.train10, cifar.CIFAR10_MD5), (cifar.test100, cifar.CIFAR100_MD5),
                         (cifar.fetch, cifar.CIFAR10_MD5)):
        with pytest.raises(common.DownloadError) as info:
            call()
        assert info.value.path.startswith(os.path.join(data_home, "cifar") + os.sep)
        assert info.value.md5sum == md5sum and md5sum in str(info.value)


def test_cifar_fetch_uses_the_substitutes(data_home):
    write_cifar(data_home)
    cifar.fetch()


def test_cifar_reads_an_array_pickled_by_numpy_2(tmp_path):
    # numpy 2 names its reconstruction numpy._core.multiarray; protocol 4, bytes keys
    data = np.arange(2 * 3072).reshape(2, 3072).astype(np.uint8)
    payload = pickle.dumps({b"data": data, b"labels": [3, 9]}, protocol=4)
    path = str(tmp_path / "c.tar.gz")
    write_tgz(path, [("x/data_batch_1", payload)])
    got = list(cifar.reader_creator(path, "data_batch")())
    assert [label for _, label in got] == [3, 9]
    np.testing.assert_array_equal(got[1][0], (data[1] / 255.0).astype(np.float32))


# -- cifar: hostile pickles are refused, and nothing they name runs ----------------------------


class RunsACommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class CallsEval:
    def __reduce__(self):
        return eval, ("__import__('os').getcwd()",)


def hostile_archive(tmp_path, payload):
    path = str(tmp_path / "cifar-10-python.tar.gz")
    write_tgz(path, [("cifar-10-batches-py/data_batch_1", payload)])
    return path


@pytest.mark.parametrize("protocol", [2, 4])
def test_cifar_refuses_a_pickle_that_runs_a_command(tmp_path, protocol):
    marker = tmp_path / "ran"
    batch = {b"data": RunsACommand(marker), b"labels": [0]}
    payload = py2_pickle(batch) if protocol == 2 else pickle.dumps(batch, protocol=protocol)
    path = hostile_archive(tmp_path, payload)
    with pytest.raises(pickle.UnpicklingError,
                       match=r"cifar-10-python\.tar\.gz:cifar-10-batches-py/data_batch_1 is not "
                             r"a CIFAR batch: its pickle refers to (posix|nt|os)\.system") as info:
        list(cifar.reader_creator(path, "data_batch")())
    assert "was not unpickled" in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload, name",
    [
        (pickle.dumps(CallsEval(), protocol=2), "__builtin__.eval"),  # Python 2's name
        (pickle.dumps(CallsEval(), protocol=4), "builtins.eval"),
        (pickle.dumps({b"data": b"x"}, protocol=2), "_codecs.encode"),  # Python 3's bytes
        (py2_pickle({b"data": io.BytesIO(b"x")}), "_io.BytesIO"),
        (b"\x80\x02cnumpy\nload\nq\x00.", "numpy.load"),
    ],
)
def test_cifar_refuses_any_other_global(tmp_path, payload, name):
    path = hostile_archive(tmp_path, payload)
    with pytest.raises(pickle.UnpicklingError, match=f"refers to {name.replace('.', r'.')}"):
        list(cifar.reader_creator(path, "data_batch")())


def test_cifar_restricted_unpickler_refuses_persistent_ids(tmp_path):
    path = hostile_archive(tmp_path, b"\x80\x02X\x01\x00\x00\x00xQ.")  # BINPERSID
    with pytest.raises(pickle.UnpicklingError, match="persistent id"):
        list(cifar.reader_creator(path, "data_batch")())


@pytest.mark.parametrize("content", [[1, 2, 3], {b"data": np.zeros((2, 3072), np.uint8)},
                                     {b"data": b"raw", b"labels": [0]}])
def test_cifar_rejects_a_pickle_that_is_no_batch(tmp_path, content):
    path = hostile_archive(tmp_path, py2_pickle(content))
    with pytest.raises(ValueError, match="data_batch_1 should hold a dict with b'data'"):
        list(cifar.reader_creator(path, "data_batch")())


# -- image: decoding ------------------------------------------------------------------------


def encode(pixels, fmt="PNG", **kwargs):
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **kwargs)
    return buf.getvalue()


@pytest.fixture
def rgb():
    return np.random.default_rng(0).integers(0, 256, (30, 41, 3), dtype=np.uint8)


def test_load_image_bytes_is_bgr_hwc_or_grey(rgb):
    data = encode(rgb)
    im = image.load_image_bytes(data)
    assert im.dtype == np.uint8 and im.shape == (30, 41, 3) and im.flags.c_contiguous
    np.testing.assert_array_equal(im, rgb[:, :, ::-1])
    grey = image.load_image_bytes(data, is_color=False)
    assert grey.shape == (30, 41)
    # ITU-R 601-2 luma, as Pillow (and, to a grey level, OpenCV) computes it
    luma = rgb.astype(np.int64) @ np.array([299, 587, 114])
    assert np.abs(grey.astype(np.int64) - luma / 1000).max() <= 0.5 + 1e-9
    # a grey file decoded in colour: the grey value in all three channels
    grey_file = image.load_image_bytes(encode(grey))
    np.testing.assert_array_equal(grey_file, np.repeat(grey[:, :, None], 3, axis=2))


def test_load_image_bytes_applies_the_exif_orientation(rgb):
    exif = Image.Exif()
    exif[0x0112] = 3  # orientation: rotated 180 degrees
    im = image.load_image_bytes(encode(rgb, exif=exif.tobytes()))
    np.testing.assert_array_equal(im, rgb[::-1, ::-1, ::-1])


def test_load_image_and_its_errors(tmp_path, rgb):
    path = tmp_path / "a.png"
    path.write_bytes(encode(rgb))
    np.testing.assert_array_equal(image.load_image(str(path)), rgb[:, :, ::-1])
    np.testing.assert_array_equal(image.load_image(path, is_color=False),
                                  image.load_image_bytes(encode(rgb), is_color=False))
    with pytest.raises(FileNotFoundError):
        image.load_image(str(tmp_path / "missing.jpg"))
    (tmp_path / "bad.jpg").write_bytes(b"not an image")
    with pytest.raises(ValueError, match=r"Cannot decode .*bad\.jpg as an image"):
        image.load_image(str(tmp_path / "bad.jpg"))
    with pytest.raises(ValueError, match="Cannot decode an image of 3 bytes"):
        image.load_image_bytes(b"abc")


# -- image: geometry --------------------------------------------------------------------------


@pytest.mark.parametrize("h, w, size, expected", [(30, 41, 20, (20, 27)), (41, 30, 20, (27, 20)),
                                                  (25, 25, 16, (16, 16)), (260, 300, 256,
                                                                           (256, 295))])
def test_resize_short_shapes_and_values(h, w, size, expected):
    bgr = np.random.default_rng(1).integers(0, 256, (h, w, 3), dtype=np.uint8)
    out = image.resize_short(bgr, size)
    assert out.shape == (*expected, 3) and out.dtype == np.uint8
    # bicubic per channel: the same as resizing the RGB image and swapping channels
    rgb = Image.fromarray(np.ascontiguousarray(bgr[:, :, ::-1]))
    want = np.asarray(rgb.resize(expected[::-1], resample=Image.BICUBIC))[:, :, ::-1]
    np.testing.assert_array_equal(out, want)
    grey = image.resize_short(bgr[:, :, 0].copy(), size)
    assert grey.shape == expected
    np.testing.assert_array_equal(grey, out[:, :, 0])


def test_resize_short_other_dtypes_and_channels():
    bgr = np.random.default_rng(2).integers(0, 256, (30, 41, 3), dtype=np.uint8)
    as_float = image.resize_short(bgr.astype(np.float32), 20)
    assert as_float.dtype == np.float32 and as_float.shape == (20, 27, 3)
    # on a smooth image (no overshoot clipped in 8 bits) float and uint8 agree but for the
    # rounding of uint8 after each of the two passes
    smooth = (np.add.outer(np.arange(30), np.arange(41)) * 3)[:, :, None].repeat(3, axis=2)
    smooth_float = image.resize_short(smooth.astype(np.float32), 20)
    assert np.abs(smooth_float - image.resize_short(smooth.astype(np.uint8), 20)).max() <= 1.0
    four = image.resize_short(np.concatenate([bgr, bgr[:, :, :1]], axis=2), 20)
    assert four.shape == (20, 27, 4)
    np.testing.assert_array_equal(four[:, :, 3], four[:, :, 0])
    wide = image.resize_short(bgr.astype(np.int16) * 100, 20)
    assert wide.dtype == np.int16


def test_to_chw_and_flip(rgb):
    assert image.to_chw(rgb).shape == (3, 30, 41)
    np.testing.assert_array_equal(image.to_chw(rgb)[2], rgb[:, :, 2])
    assert image.to_chw(rgb, order=(1, 0, 2)).shape == (41, 30, 3)
    with pytest.raises(ValueError, match=r"shape \(30, 41\), order is \(2, 0, 1\)"):
        image.to_chw(rgb[:, :, 0])
    np.testing.assert_array_equal(image.left_right_flip(rgb), rgb[:, ::-1, :])
    np.testing.assert_array_equal(image.left_right_flip(rgb[:, :, 0], is_color=False),
                                  rgb[:, ::-1, 0])


def test_center_crop(rgb):
    np.testing.assert_array_equal(image.center_crop(rgb, 20), rgb[5:25, 10:30])
    np.testing.assert_array_equal(image.center_crop(rgb[:, :, 1], 20, is_color=False),
                                  rgb[5:25, 10:30, 1])
    with pytest.raises(ValueError, match=r"centre crop of 31 x 31 .* got 30 x 41"):
        image.center_crop(rgb, 31)


def test_random_crop_draws_from_numpys_global_generator_as_paddle(rgb):
    np.random.seed(5)
    top, left = np.random.randint(0, 30 - 20 + 1), np.random.randint(0, 41 - 20 + 1)
    np.random.seed(5)
    np.testing.assert_array_equal(image.random_crop(rgb, 20),
                                  rgb[top:top + 20, left:left + 20])
    rng = np.random.default_rng(7)
    top, left = rng.integers(0, 11), rng.integers(0, 22)
    np.testing.assert_array_equal(image.random_crop(rgb, 20, rng=np.random.default_rng(7)),
                                  rgb[top:top + 20, left:left + 20])
    with pytest.raises(ValueError, match="random crop of 42 x 42"):
        image.random_crop(rgb, 42)


def test_simple_transform_test_mode_and_means(rgb):
    bgr = rgb[:, :, ::-1]
    resized = image.resize_short(bgr, 24)  # 24 x 32
    crop = resized[2:22, 6:26].transpose(2, 0, 1).astype(np.float32)
    out = image.simple_transform(bgr, 24, 20, False)
    assert out.dtype == np.float32 and out.shape == (3, 20, 20)
    np.testing.assert_array_equal(out, crop)
    mean = [10.5, 20.0, 30.25]
    np.testing.assert_array_equal(image.simple_transform(bgr, 24, 20, False, mean=mean),
                                  crop - np.array(mean, np.float32)[:, None, None])
    elementwise = np.full((3, 20, 20), 2.0)
    np.testing.assert_array_equal(
        image.simple_transform(bgr, 24, 20, False, mean=elementwise), crop - 2.0)
    with pytest.raises(ValueError, match=r"image \(3, 20, 20\); got a mean of shape \(20, 20\)"):
        image.simple_transform(bgr, 24, 20, False, mean=np.zeros((20, 20)))
    grey = image.simple_transform(bgr[:, :, 0].copy(), 24, 20, False, is_color=False, mean=[1.0])
    assert grey.shape == (20, 20)
    np.testing.assert_array_equal(grey, image.resize_short(bgr[:, :, 0].copy(), 24)[2:22, 6:26]
                                  .astype(np.float32) - 1.0)


@pytest.mark.parametrize("seed", range(4))
def test_simple_transform_train_mode_repeats_under_np_random_seed(rgb, seed):
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    resized = image.resize_short(bgr, 24)
    np.random.seed(seed)
    top, left = np.random.randint(0, 5), np.random.randint(0, 13)
    crop = resized[top:top + 20, left:left + 20]
    if np.random.randint(2) == 0:
        crop = crop[:, ::-1]
    np.random.seed(seed)
    out = image.simple_transform(bgr, 24, 20, True)
    np.testing.assert_array_equal(out, crop.transpose(2, 0, 1).astype(np.float32))


def test_load_and_transform(tmp_path, rgb):
    path = tmp_path / "a.png"
    path.write_bytes(encode(rgb))
    got = image.load_and_transform(str(path), 24, 20, False, mean=[1, 2, 3])
    np.testing.assert_array_equal(
        got, image.simple_transform(rgb[:, :, ::-1], 24, 20, False, mean=[1, 2, 3]))


def test_flowers_maps_through_image(rgb):
    data = encode(np.random.default_rng(3).integers(0, 256, (260, 300, 3), dtype=np.uint8),
                  fmt="JPEG", quality=90)
    expected = image.simple_transform(image.load_image_bytes(data), 256, 224, False,
                                      mean=[103.94, 116.78, 123.68])
    got, label = flowers.default_mapper(False, (data, 4))
    assert label == 4 and got.shape == (3 * 224 * 224,)
    np.testing.assert_array_equal(got, expected.reshape(-1))
    np.random.seed(11)
    first = flowers.default_mapper(True, (data, 0))[0]
    np.random.seed(11)
    np.testing.assert_array_equal(flowers.default_mapper(True, (data, 0))[0], first)


# -- image: batch files -----------------------------------------------------------------------


def test_batch_images_from_tar_writes_safe_batches(tmp_path):
    members = [(f"jpg/image_{i}.jpg", bytes([i]) * (i + 3)) for i in range(5)]
    members += [("jpg", None), ("jpg/unlisted.jpg", b"zz")]
    data_file = str(tmp_path / "images.tgz")
    write_tgz(data_file, members)
    img2label = {f"jpg/image_{i}.jpg": 10 + i for i in range(5)}
    meta = image.batch_images_from_tar(data_file, "train", img2label, num_per_batch=2)
    assert meta == data_file + "_batch/train.txt"
    with open(meta) as f:
        paths = f.read().splitlines()
    assert paths == [os.path.abspath(f"{data_file}_batch/train/batch_{k}") for k in range(3)]
    batches = [image.load_image_batch(p) for p in paths]
    assert [b["label"] for b in batches] == [[10, 11], [12, 13], [14]]
    assert [d for b in batches for d in b["data"]] == [data for _, data in members[:5]]
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(2) == b"PK"  # a zip of .npy arrays, not a pickle
        with pytest.raises(pickle.UnpicklingError):
            with open(p, "rb") as f:
                pickle.load(f)  # the file is a zip: pickle cannot read it
    # done once: a second call finds the directory and writes nothing
    assert image.batch_images_from_tar(data_file, "train", {}, num_per_batch=1) == meta
    with open(meta) as f:
        assert f.read().splitlines() == paths


def test_batch_images_from_tar_refuses_labels_that_need_pickle(tmp_path):
    data_file = str(tmp_path / "images.tgz")
    write_tgz(data_file, [("a.jpg", b"x")])
    with pytest.raises(TypeError, match="object array, which would need pickle"):
        image.batch_images_from_tar(data_file, "test", {"a.jpg": {"not": "a number"}})
