"""Paddle 1.8's ``paddle.dataset.flowers``: Oxford's 102 flower categories as ``(image, label)``.

Three files are cached under ``DATA_HOME/flowers/``: ``102flowers.tgz`` (the JPEGs, as
``jpg/image_NNNNN.jpg``), ``imagelabels.mat`` (label 1..102 of every image) and ``setid.mat``
(the image numbers of each split). As Paddle 1.8 does, ``train()`` reads the split the readme
calls ``tstid`` and ``test()`` the one it calls ``trnid`` (the test split is the larger), and
``valid()`` reads ``valid``.

Each sample is mapped as Paddle's ``default_mapper``: the JPEG decoded in colour as BGR (the
channel order of OpenCV, which Paddle decodes with), its short side resized to 256 (bicubic),
a 224 x 224 crop (centred for test and valid, random and randomly mirrored for train), laid out
CHW, minus the mean ``[103.94, 116.78, 123.68]``, flattened to float32; the label is an int in
``[0, 101]``. Decoding needs Pillow (``pip install pillow``); the ``.mat`` files need scipy.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ...sample_readers import Reader
from . import common, image

__all__ = ["default_mapper", "fetch", "reader_creator", "test", "train", "valid"]

DATA_URL = "http://paddlemodels.bj.bcebos.com/flowers/102flowers.tgz"
LABEL_URL = "http://paddlemodels.bj.bcebos.com/flowers/imagelabels.mat"
SETID_URL = "http://paddlemodels.bj.bcebos.com/flowers/setid.mat"
DATA_MD5 = "52808999861908f626f3c1f4e79d11fa"
LABEL_MD5 = "e0620be6f572b9609742df49c70aed4d"
SETID_MD5 = "a5357ecc9cb78c4bef273ce3793fc85c"

# Paddle swaps the readme's train and test splits (the test split is the larger one)
TRAIN_FLAG = "tstid"
TEST_FLAG = "trnid"
VALID_FLAG = "valid"

MEAN_BGR = np.array([103.94, 116.78, 123.68], np.float32)
RESIZE_SHORT = 256
CROP = 224


def _loadmat(path: str) -> dict:
    try:
        from scipy.io import loadmat
    except ImportError:
        raise ImportError("paddle.dataset.flowers reads its .mat files with scipy, which is "
                          "not installed: pip install scipy") from None
    return loadmat(path)


def default_mapper(is_train: bool, sample: tuple[bytes, int],
                   rng: np.random.Generator | None = None) -> tuple[np.ndarray, int]:
    """One ``(jpeg bytes, label)`` as ``(flat float32 CHW image, label)`` (see the module
    docstring), through :mod:`.image` as Paddle's; ``rng`` draws the training crop and mirror
    (default: numpy's global generator, as in Paddle)."""
    data, label = sample
    im = image.load_image_bytes(data)
    im = image.simple_transform(im, RESIZE_SHORT, CROP, is_train, mean=MEAN_BGR, rng=rng)
    return im.flatten().astype(np.float32), label


def reader_creator(data_file: str, label_file: str, setid_file: str, dataset_name: str,
                   mapper: Callable[[tuple[bytes, int]], Any], buffered_size: int = 1024,
                   use_xmap: bool = True, cycle: bool = False) -> Reader:
    """A reader over the images of split ``dataset_name`` in the archive's order.

    Parameters
    ----------
    data_file, label_file, setid_file : str
        The three cached files.
    dataset_name : str
        ``"tstid"``, ``"trnid"`` or ``"valid"``.
    mapper : callable
        ``(jpeg bytes, label) -> sample``.
    buffered_size, use_xmap
        Paddle maps samples in worker threads with ``use_xmap``; here they are mapped in
        order, in the reading thread, either way.
    cycle : bool
        Start over at the end instead of stopping.
    """
    labels = _loadmat(label_file)["labels"][0]
    indexes = _loadmat(setid_file)[dataset_name][0]
    img2label = {f"jpg/image_{int(i):05d}.jpg": int(labels[int(i) - 1]) for i in indexes}

    def reader() -> Iterator[Any]:
        while True:
            with tarfile.open(data_file) as tar:
                for member in tar:
                    name = member.name[2:] if member.name.startswith("./") else member.name
                    if name in img2label:
                        data = tar.extractfile(member).read()
                        yield mapper((data, img2label[name] - 1))
            if not cycle:
                break

    return reader


def _files() -> tuple[str, str, str]:
    return (common.download(DATA_URL, "flowers", DATA_MD5),
            common.download(LABEL_URL, "flowers", LABEL_MD5),
            common.download(SETID_URL, "flowers", SETID_MD5))


def train(mapper: Callable | None = None, buffered_size: int = 1024, use_xmap: bool = True,
          cycle: bool = False) -> Reader:
    """The training reader (random crops and mirrors, from numpy's global generator as in
    Paddle: ``np.random.seed`` repeats them)."""
    mapper = mapper or (lambda s: default_mapper(True, s))
    return reader_creator(*_files(), TRAIN_FLAG, mapper, buffered_size, use_xmap, cycle)


def test(mapper: Callable | None = None, buffered_size: int = 1024, use_xmap: bool = True,
         cycle: bool = False) -> Reader:
    """The test reader (centred crops)."""
    mapper = mapper or (lambda s: default_mapper(False, s))
    return reader_creator(*_files(), TEST_FLAG, mapper, buffered_size, use_xmap, cycle)


def valid(mapper: Callable | None = None, buffered_size: int = 1024,
          use_xmap: bool = True) -> Reader:
    """The validation reader (centred crops)."""
    mapper = mapper or (lambda s: default_mapper(False, s))
    return reader_creator(*_files(), VALID_FLAG, mapper, buffered_size, use_xmap)


def fetch() -> None:
    """Download (or check) the three files."""
    _files()
