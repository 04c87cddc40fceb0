"""Paddle 1.8's ``paddle.dataset.image``: decoding, resizing, cropping and flipping images.

Images follow OpenCV's conventions, which Paddle decodes with: a colour image is a ``uint8``
array of shape ``(height, width, 3)`` in **BGR** order (HWC), a grey one ``(height, width)``.
:func:`to_chw` makes the CHW layout Paddle's layers take, and :func:`simple_transform` chains
resize, crop, flip, CHW and mean subtraction into a ``float32`` array of shape
``(3, crop, crop)`` (``(crop, crop)`` for grey).

Paddle decodes with ``cv2``; here Pillow decodes (``pip install pillow``) and resizes:

- images are rotated as their EXIF orientation says, as ``cv2.imread``/``imdecode`` do;
- a grey image (``is_color=False``) is Pillow's luma of the RGB decode
  (``L = R * 299/1000 + G * 587/1000 + B * 114/1000``), which may differ from OpenCV's grey
  decode by a grey level;
- :func:`resize_short` resizes with Pillow's bicubic filter for ``cv2.INTER_CUBIC``; the two
  filters differ slightly (Pillow's also smooths when shrinking);
- an image that cannot be decoded raises :class:`ValueError` (a missing file
  :class:`FileNotFoundError`) where ``cv2`` returns ``None``.

:func:`random_crop` and :func:`simple_transform` draw from numpy's global generator as Paddle
does (``np.random.seed`` makes them repeat), or from ``rng`` if given (an addition).

:func:`batch_images_from_tar` writes its batch files with :func:`numpy.savez` instead of
pickle, and :func:`load_image_batch` (an addition) reads one back without unpickling.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

__all__ = [
    "batch_images_from_tar", "center_crop", "left_right_flip", "load_and_transform",
    "load_image", "load_image_batch", "load_image_bytes", "random_crop", "resize_short",
    "simple_transform", "to_chw",
]


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("paddle.dataset.image decodes and resizes images with Pillow, which "
                          "is not installed: pip install pillow") from None
    return Image


def _randint(rng: np.random.Generator | None, high: int) -> int:
    """An int in ``[0, high)``: from numpy's global generator (as Paddle) unless ``rng``."""
    if rng is None:
        return int(np.random.randint(0, high))
    return int(rng.integers(0, high))


def _decode(file: IO[bytes], is_color: bool, source: str) -> np.ndarray:
    """Decode an encoded image as ``cv2`` does with flag 1 (BGR HWC) or 0 (grey HW)."""
    Image = _pil()
    from PIL import ImageOps

    try:
        with Image.open(file) as image:
            image = ImageOps.exif_transpose(image)  # cv2 rotates as the EXIF orientation says
            if is_color:
                return np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1])
            return np.asarray(image.convert("L")).copy()
    except OSError as err:  # PIL.UnidentifiedImageError and truncated files are OSErrors
        raise ValueError(f"Cannot decode {source} as an image: {err}") from err


def load_image_bytes(bytes: bytes, is_color: bool = True) -> np.ndarray:
    """Decode an encoded image (JPEG, PNG, ...) held in memory.

    Parameters
    ----------
    bytes : bytes
        The encoded image (the argument keeps Paddle's name).
    is_color : bool, default True
        Decode in colour (BGR) or grey.

    Returns
    -------
    ndarray of uint8, of shape (height, width, 3), or (height, width) if not ``is_color``

    Raises
    ------
    ValueError
        If the bytes are not an image Pillow can decode.
    """
    return _decode(io.BytesIO(bytes), is_color, f"an image of {len(bytes)} bytes")


def load_image(file: str | os.PathLike, is_color: bool = True) -> np.ndarray:
    """Decode an image file (see :func:`load_image_bytes`).

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        If the file is not an image Pillow can decode.
    """
    with open(file, "rb") as f:
        return _decode(f, is_color, os.fspath(file))


def _resize(im: np.ndarray, width: int, height: int) -> np.ndarray:
    """``cv2.resize(im, (width, height), interpolation=cv2.INTER_CUBIC)`` with Pillow's bicubic.

    Each channel is resized alone (a ``uint8`` colour image at once, which is the same); other
    dtypes than ``uint8`` go through 32-bit float and are cast back, integers rounded and clipped.
    """
    Image = _pil()
    if im.dtype == np.uint8 and im.ndim == 3 and im.shape[2] == 3:
        return np.asarray(Image.fromarray(im).resize((width, height), resample=Image.BICUBIC))
    planes = im[:, :, None] if im.ndim == 2 else im
    out = []
    for c in range(planes.shape[2]):
        plane = planes[:, :, c]
        plane = plane if plane.dtype == np.uint8 else plane.astype(np.float32)
        plane = Image.fromarray(np.ascontiguousarray(plane))
        out.append(np.asarray(plane.resize((width, height), resample=Image.BICUBIC)))
    resized = np.stack(out, axis=2)
    if np.issubdtype(im.dtype, np.integer) and im.dtype != np.uint8:
        info = np.iinfo(im.dtype)
        resized = np.clip(np.rint(resized), info.min, info.max)
    resized = resized.astype(im.dtype, copy=False)
    return resized[:, :, 0] if im.ndim == 2 else resized


def resize_short(im: np.ndarray, size: int) -> np.ndarray:
    """Resize an HWC (or HW) image so that its shorter side is ``size`` (bicubic).

    The longer side becomes ``size * long // short`` (Paddle's integer arithmetic); a square
    image becomes ``size`` x ``size``.

    Parameters
    ----------
    im : ndarray of shape (height, width, channels) or (height, width)
    size : int
        The new length of the shorter side.

    Returns
    -------
    ndarray of the same dtype and number of channels
    """
    h, w = im.shape[:2]
    h_new, w_new = size, size
    if h > w:
        h_new = size * h // w
    else:
        w_new = size * w // h
    return _resize(im, w_new, h_new)


def to_chw(im: np.ndarray, order: Sequence[int] = (2, 0, 1)) -> np.ndarray:
    """Transpose an HWC image to CHW (or to any ``order`` of its axes).

    Raises
    ------
    ValueError
        If ``order`` does not have one entry per axis of ``im``.
    """
    if im.ndim != len(order):
        raise ValueError(f"to_chw needs one entry of order per axis of the image: the image "
                         f"has shape {im.shape}, order is {tuple(order)}.")
    return im.transpose(order)


def _crop(im: np.ndarray, size: int, h_start: int, w_start: int) -> np.ndarray:
    return im[h_start:h_start + size, w_start:w_start + size]


def _check_crop(im: np.ndarray, size: int, what: str) -> None:
    h, w = im.shape[:2]
    if size > h or size > w:
        raise ValueError(f"{what} of {size} x {size} needs an image at least that large; got "
                         f"{h} x {w}. Resize it first (resize_short(im, {size})).")


def center_crop(im: np.ndarray, size: int, is_color: bool = True) -> np.ndarray:
    """The centred ``size`` x ``size`` part of an HWC (or HW) image.

    The crop starts at row ``(height - size) // 2`` and column ``(width - size) // 2``.
    ``is_color`` is Paddle's; the crop works for both layouts either way.

    Raises
    ------
    ValueError
        If the image is smaller than ``size`` on a side.
    """
    _check_crop(im, size, "A centre crop")
    h, w = im.shape[:2]
    return _crop(im, size, (h - size) // 2, (w - size) // 2)


def random_crop(im: np.ndarray, size: int, is_color: bool = True,
                rng: np.random.Generator | None = None) -> np.ndarray:
    """A ``size`` x ``size`` part of an HWC (or HW) image at a random place.

    The first row is drawn in ``[0, height - size]``, then the first column in
    ``[0, width - size]``, from ``rng`` or, as in Paddle, numpy's global generator.

    Raises
    ------
    ValueError
        If the image is smaller than ``size`` on a side.
    """
    _check_crop(im, size, "A random crop")
    h, w = im.shape[:2]
    h_start = _randint(rng, h - size + 1)
    w_start = _randint(rng, w - size + 1)
    return _crop(im, size, h_start, w_start)


def left_right_flip(im: np.ndarray, is_color: bool = True) -> np.ndarray:
    """The image mirrored left to right (a view; HWC or HW)."""
    return im[:, ::-1]


def simple_transform(im: np.ndarray, resize_size: int, crop_size: int, is_train: bool,
                     is_color: bool = True, mean: Any = None,
                     rng: np.random.Generator | None = None) -> np.ndarray:
    """Resize, crop, (for training) flip, lay out CHW and subtract the mean.

    The shorter side is resized to ``resize_size``; then training takes a random
    ``crop_size`` crop, mirrored with probability 1/2 (when a draw in ``{0, 1}`` is 0), and
    testing the centre crop. A colour image is then laid out CHW.

    Parameters
    ----------
    im : ndarray of shape (height, width, 3) or (height, width)
        The decoded image.
    resize_size, crop_size : int
    is_train : bool
    is_color : bool, default True
        Whether a one-dimensional ``mean`` is one value per channel.
    mean : array-like, optional
        One value per channel (with ``is_color``), or values broadcast against the result (an
        array of its shape for an element-wise mean).
    rng : numpy.random.Generator, optional
        Draws the crop and the flip instead of numpy's global generator.

    Returns
    -------
    ndarray of float32, of shape (3, crop_size, crop_size) or (crop_size, crop_size)

    Raises
    ------
    ValueError
        If ``mean`` has more than one axis but not as many as the result.
    """
    im = resize_short(im, resize_size)
    if is_train:
        im = random_crop(im, crop_size, is_color=is_color, rng=rng)
        if _randint(rng, 2) == 0:
            im = left_right_flip(im, is_color)
    else:
        im = center_crop(im, crop_size, is_color=is_color)
    if im.ndim == 3:
        im = to_chw(im)
    im = im.astype(np.float32)
    if mean is not None:
        mean = np.array(mean, dtype=np.float32)
        if mean.ndim == 1 and is_color:
            mean = mean[:, np.newaxis, np.newaxis]  # one value per channel
        elif mean.ndim > 1 and mean.ndim != im.ndim:
            raise ValueError(f"An element-wise mean needs the shape of the transformed image "
                             f"{im.shape}; got a mean of shape {mean.shape}.")
        im -= mean
    return im


def load_and_transform(filename: str | os.PathLike, resize_size: int, crop_size: int,
                       is_train: bool, is_color: bool = True, mean: Any = None,
                       rng: np.random.Generator | None = None) -> np.ndarray:
    """:func:`load_image` then :func:`simple_transform` (see there)."""
    im = load_image(filename, is_color)
    return simple_transform(im, resize_size, crop_size, is_train, is_color, mean, rng)


def _write_batch(path: str, data: list[bytes], labels: list) -> None:
    label_array = np.asarray(labels)
    if label_array.dtype.hasobject:
        raise TypeError(f"batch_images_from_tar stores labels as a numpy array; the labels of "
                        f"{path} ({labels[:3]}...) make an object array, which would need "
                        f"pickle. Use numbers or strings.")
    offsets = np.cumsum([0] + [len(d) for d in data], dtype=np.int64)
    blob = np.frombuffer(b"".join(data), dtype=np.uint8)
    with open(path, "wb") as f:  # a file object: savez adds no ".npz" to Paddle's name
        np.savez(f, label=label_array, data=blob, offsets=offsets)


def batch_images_from_tar(data_file: str, dataset_name: str, img2label: dict[str, Any],
                          num_per_batch: int = 1024) -> str:
    """Copy the encoded images of a tar archive listed in ``img2label`` into batch files.

    As in Paddle, the batches go to ``<data_file>_batch/<dataset_name>/batch_<k>`` (``k`` from
    0), ``num_per_batch`` images each in archive order (the last one fewer), and the absolute
    paths of the batch files are appended to ``<data_file>_batch/<dataset_name>.txt``, one a
    line (here in batch order; Paddle lists the directory). If the batch directory exists
    already, nothing is written.

    Unlike Paddle, which pickles ``{"label": [...], "data": [bytes, ...]}`` into each file, a
    batch file here is a :func:`numpy.savez` archive (despite the name without ``.npz``):
    ``label`` (the labels as an array), ``data`` (the images' bytes, concatenated, as uint8)
    and ``offsets`` (int64, image ``i`` is ``data[offsets[i]:offsets[i + 1]]``). Read one back
    with :func:`load_image_batch`, which returns Paddle's dict without unpickling anything.

    Parameters
    ----------
    data_file : str
        The tar archive.
    dataset_name : str
        Name of the batch directory (``"train"``, ``"test"`` or ``"valid"``).
    img2label : dict
        Member name -> label (a number or string) of each image to keep.
    num_per_batch : int, default 1024

    Returns
    -------
    str
        The path of the list file, ``<data_file>_batch/<dataset_name>.txt``.

    Raises
    ------
    TypeError
        If the labels of a batch do not make a numeric or string array.
    """
    batch_dir = data_file + "_batch"
    out_path = os.path.join(batch_dir, dataset_name)
    meta_file = os.path.join(batch_dir, dataset_name + ".txt")
    if os.path.exists(out_path):
        return meta_file
    os.makedirs(out_path)

    paths: list[str] = []
    data: list[bytes] = []
    labels: list[Any] = []

    def flush() -> None:
        path = os.path.join(out_path, f"batch_{len(paths)}")
        _write_batch(path, data, labels)
        paths.append(os.path.abspath(path))
        data.clear()
        labels.clear()

    with tarfile.open(data_file) as tf:
        for mem in tf.getmembers():
            if mem.name in img2label and mem.isfile():
                data.append(tf.extractfile(mem).read())
                labels.append(img2label[mem.name])
                if len(data) == num_per_batch:
                    flush()
    if data:
        flush()
    with open(meta_file, "a") as meta:
        meta.writelines(path + "\n" for path in paths)
    return meta_file


def load_image_batch(path: str | os.PathLike) -> dict[str, list]:
    """Read a batch file of :func:`batch_images_from_tar` (an addition to Paddle).

    Returns
    -------
    dict
        ``{"label": [label, ...], "data": [encoded image bytes, ...]}``, what Paddle's batch
        files unpickle to.
    """
    with np.load(path, allow_pickle=False) as batch:
        offsets = batch["offsets"]
        blob = batch["data"].tobytes()
        labels = batch["label"].tolist()
    data = [blob[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    return {"label": labels, "data": data}
