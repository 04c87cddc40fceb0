"""Paddle 1.8's ``paddle.dataset.common``: the dataset cache, its downloader and file splitting.

Every dataset module keeps its files under ``DATA_HOME/<module name>/``, named after the last
part of the URL (``~/.cache/paddle/dataset/mnist/train-images-idx3-ubyte.gz``), exactly where
Paddle 1.8 keeps them, so a cache filled by Paddle is used as is. :func:`download` returns the
cached file when its md5 is right and fetches it otherwise; without network access it raises
:class:`DownloadError`, which names the path, the URL and the md5, so the file can be put there
by hand.

Two additions to Paddle:

- the environment variable ``DASK_FLUID_DATA_HOME``, if set, replaces ``~/.cache/paddle/dataset``
  (read once, at import; a test may also set the module attribute ``DATA_HOME``);
- a file made locally (a small synthetic data set, for tests) can stand in for the published one:
  :func:`register_substitute` records its md5 next to it, in ``<file>.substitute-md5``, and
  :func:`download` then accepts exactly that content at that path.
"""

from __future__ import annotations

import glob
import hashlib
import importlib
import logging
import os
import pickle
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from typing import IO, Any

from ...sample_readers import Reader

__all__ = [
    "DATA_HOME",
    "DownloadError",
    "cached_path",
    "cluster_files_reader",
    "download",
    "fetch_all",
    "md5file",
    "must_mkdirs",
    "register_substitute",
    "split",
]

logger = logging.getLogger(__name__)

DATA_HOME = os.environ.get("DASK_FLUID_DATA_HOME") or os.path.expanduser(
    "~/.cache/paddle/dataset"
)

# Paddle tries a download three times before giving up.
RETRY_LIMIT = 3
# Seconds a connection attempt or a read may block, so that a machine without network fails fast.
DOWNLOAD_TIMEOUT_S = 15.0
SUBSTITUTE_SUFFIX = ".substitute-md5"

_DATASET_MODULES = (
    "mnist", "uci_housing", "imikolov", "imdb", "cifar", "flowers", "wmt14", "wmt16", "movielens",
    "conll05",
)


class DownloadError(RuntimeError):
    """A dataset file is not in the cache and could not be downloaded.

    A :class:`RuntimeError`, as Paddle's download failure is.

    Attributes
    ----------
    url : str
        Where the file is published.
    path : str
        Where :func:`download` expects it.
    md5sum : str
        The md5 it must have.
    """

    def __init__(self, url: str, path: str, md5sum: str, reason: str) -> None:
        self.url = url
        self.path = path
        self.md5sum = md5sum
        super().__init__(
            f"Cannot download {url} within retry limit {RETRY_LIMIT} ({reason}). "
            f"The dataset file is expected at {path} with md5 {md5sum}. "
            f"Without network access, fetch it from {url} on another machine and copy it to "
            f"{path}."
        )


def md5file(fname: str | os.PathLike) -> str:
    """Return the hex md5 digest of the file ``fname``."""
    hash_md5 = hashlib.md5()
    with open(fname, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            hash_md5.update(chunk)
    return hash_md5.hexdigest()


def must_mkdirs(path: str | os.PathLike) -> None:
    """Create the directory ``path`` unless it exists (safe when processes race to create it)."""
    os.makedirs(path, exist_ok=True)


def cached_path(url: str, module_name: str, save_name: str | None = None) -> str:
    """Return where :func:`download` keeps the file of ``url`` for ``module_name``.

    Parameters
    ----------
    url : str
        The file's URL; its last ``/``-separated part, kept verbatim (``%2F`` included), is the
        file name unless ``save_name`` is given.
    module_name : str
        The dataset's directory under ``DATA_HOME``.
    save_name : str, optional
        The file name to use instead.

    Returns
    -------
    str
        ``DATA_HOME/module_name/<file name>``.
    """
    name = url.split("/")[-1] if save_name is None else save_name
    return os.path.join(DATA_HOME, module_name, name)


def register_substitute(path: str | os.PathLike) -> str:
    """Let the file now at ``path`` stand in for the published file :func:`download` expects there.

    Writes the file's md5 to ``<path>.substitute-md5``. :func:`download` accepts the file while
    its content keeps that md5, even though it differs from the published one.

    Parameters
    ----------
    path : str or path-like
        A file in the cache, at the path :func:`cached_path` gives for its dataset.

    Returns
    -------
    str
        The md5 recorded.
    """
    digest = md5file(path)
    with open(os.fspath(path) + SUBSTITUTE_SUFFIX, "w") as f:
        f.write(digest + "\n")
    return digest


def _is_substitute(filename: str, actual_md5: str) -> bool:
    try:
        with open(filename + SUBSTITUTE_SUFFIX) as f:
            return f.read().strip() == actual_md5
    except FileNotFoundError:
        return False


def _fetch(url: str, filename: str, md5sum: str) -> str:
    """Download ``url``; keep it as ``filename`` if its md5 is ``md5sum``; return the md5 received.

    The download goes to a temporary file renamed into place only when complete and right, so a
    failed, corrupt or concurrent download never leaves a bad file under the final name.
    """
    dirname, basename = os.path.split(filename)
    hash_md5 = hashlib.md5()
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
        fd, tmp_name = tempfile.mkstemp(dir=dirname, prefix=basename + ".", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as tmp:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    hash_md5.update(chunk)
                    tmp.write(chunk)
            if hash_md5.hexdigest() == md5sum:
                os.replace(tmp_name, filename)
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)
    return hash_md5.hexdigest()


def download(url: str, module_name: str, md5sum: str, save_name: str | None = None) -> str:
    """Return the cached dataset file of ``url``, downloading it first if needed.

    Parameters
    ----------
    url : str
        Where the file is published.
    module_name : str
        The dataset's directory under ``DATA_HOME``.
    md5sum : str
        The md5 the file must have.
    save_name : str, optional
        File name in the cache, instead of the last part of ``url``.

    Returns
    -------
    str
        The path of the file, ``DATA_HOME/module_name/<file name>``.

    Raises
    ------
    DownloadError
        If the file is not cached with the right md5 and :data:`RETRY_LIMIT` downloads failed
        (no network, or wrong content). The message names the path, the URL and the md5.
    """
    filename = cached_path(url, module_name, save_name)
    if os.path.exists(filename):
        actual = md5file(filename)
        if actual == md5sum:
            return filename
        if _is_substitute(filename, actual):
            logger.info("using the local substitute %s for %s", filename, url)
            return filename
        reasons = [f"the cached file's md5 is {actual}"]
    else:
        reasons = []
    must_mkdirs(os.path.dirname(filename))

    for attempt in range(1, RETRY_LIMIT + 1):
        logger.warning(
            "Cache file %s not found, downloading %s (attempt %d of %d)",
            filename, url, attempt, RETRY_LIMIT,
        )
        try:
            received = _fetch(url, filename, md5sum)
        except (OSError, ValueError) as err:  # URLError and timeouts are OSErrors
            reason = f"attempt {attempt}: {type(err).__name__}: {err}"
            last_error: BaseException | None = err
        else:
            if received == md5sum:
                return filename
            reason = f"attempt {attempt}: received a file with md5 {received}"
            last_error = None
        reasons.append(reason)
    raise DownloadError(url, filename, md5sum, "; ".join(reasons)) from last_error


def fetch_all() -> None:
    """Download the files of every dataset module here (see ``_DATASET_MODULES``)."""
    package = __name__.rsplit(".", 1)[0]
    for name in _DATASET_MODULES:
        importlib.import_module(f"{package}.{name}").fetch()


def split(
    reader: Reader,
    line_count: int,
    suffix: str = "%05d.pickle",
    dumper: Callable[[Any, IO[bytes]], Any] = pickle.dump,
) -> None:
    """Write ``reader``'s samples into numbered files, about ``line_count`` samples per file.

    Each file holds one list of samples written by ``dumper(samples, f)``. The boundaries are
    Paddle's: a file is closed after sample ``i`` whenever ``i >= line_count`` and
    ``i % line_count == 0``, so the first file gets ``line_count + 1`` samples and the next ones
    ``line_count``; the rest goes to a last file.

    Parameters
    ----------
    reader : callable
        The samples to write.
    line_count : int
        Samples per file (see above).
    suffix : str, default "%05d.pickle"
        Path of each file, with ``%d`` standing for the file's number.
    dumper : callable, default pickle.dump
        Writes an object to a file opened in binary mode.

    Raises
    ------
    TypeError
        If ``dumper`` is not callable.
    """
    if not callable(dumper):
        raise TypeError("dumper should be callable.")
    lines: list[Any] = []
    indx_f = 0
    for i, d in enumerate(reader()):
        lines.append(d)
        if i >= line_count and i % line_count == 0:
            with open(suffix % indx_f, "wb") as f:
                dumper(lines, f)
            lines = []
            indx_f += 1
    if lines:
        with open(suffix % indx_f, "wb") as f:
            dumper(lines, f)


def cluster_files_reader(
    files_pattern: str,
    trainer_count: int,
    trainer_id: int,
    loader: Callable[[IO[bytes]], Any] = pickle.load,
) -> Reader:
    """Read this trainer's share of the files written by :func:`split`.

    The files matching ``files_pattern`` are sorted by name; trainer ``trainer_id`` reads those
    whose position ``p`` has ``p % trainer_count == trainer_id`` and yields every sample of each.

    Parameters
    ----------
    files_pattern : str
        A :mod:`glob` pattern.
    trainer_count : int
        Number of trainers sharing the files.
    trainer_id : int
        This trainer's rank, in ``[0, trainer_count)``.
    loader : callable, default pickle.load
        Reads the list of samples from a file opened in binary mode.

    Returns
    -------
    callable
        The reader.

    Raises
    ------
    TypeError
        If ``loader`` is not callable.
    """
    if not callable(loader):
        raise TypeError("loader should be callable.")

    def reader() -> Iterator[Any]:
        file_list = sorted(glob.glob(files_pattern))
        my_file_list = [fn for idx, fn in enumerate(file_list) if idx % trainer_count == trainer_id]
        for fn in my_file_list:
            logger.info("append file: %s", fn)
        for fn in my_file_list:
            with open(fn, "rb") as f:
                yield from loader(f)

    return reader
