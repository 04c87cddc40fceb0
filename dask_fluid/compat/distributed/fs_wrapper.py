"""``paddle.distributed.fs_wrapper``: the file systems Fluid 1.8's collective fleet keeps its
checkpoints on (``fleet.save_check_point(..., fs=LocalFS())``).

:class:`LocalFS` is the local file system, as Fluid's. :class:`BDFS` (Baidu's HDFS client,
through ``hadoop fs`` commands) is not implemented and says so when made: keep checkpoints on a
local or mounted path with :class:`LocalFS`.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from .._unsupported import not_implemented

__all__ = ["BDFS", "FS", "LocalFS"]


class FS:
    """What the checkpoints ask of a file system (Fluid's abstract ``FS``)."""

    def list_dirs(self, fs_path: str) -> list[str]:
        raise NotImplementedError(f"{type(self).__name__}.list_dirs")

    def ls_dir(self, fs_path: str) -> list[str]:
        raise NotImplementedError(f"{type(self).__name__}.ls_dir")

    def stat(self, fs_path: str) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.stat")

    def upload(self, local_path: str, fs_path: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.upload")

    def download(self, fs_path: str, local_path: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.download")

    def mkdir(self, fs_path: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.mkdir")

    def mv(self, fs_src_path: str, fs_dst_path: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.mv")

    def rmr(self, fs_path: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.rmr")

    def rm(self, fs_path: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.rm")

    def delete(self, fs_path: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.delete")

    def need_upload_download(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.need_upload_download")


class LocalFS(FS):
    """The local file system (Fluid 1.8's ``LocalFS``): paths are read and written in place,
    with nothing to upload or download."""

    def list_dirs(self, fs_path: str) -> list[str]:
        """The directories in ``fs_path`` (none when it does not exist)."""
        if not self.stat(fs_path):
            return []
        return [f for f in os.listdir(fs_path) if os.path.isdir(os.path.join(fs_path, f))]

    def ls_dir(self, fs_path: str) -> list[str]:
        return list(os.listdir(fs_path))

    def stat(self, fs_path: str) -> bool:
        return os.path.exists(fs_path)

    def mkdir(self, fs_path: str) -> None:
        """Make ``fs_path`` and its parents (Fluid runs ``mkdir -p``)."""
        if os.path.isfile(fs_path):
            raise FileExistsError(f"{fs_path} is already a file")
        os.makedirs(fs_path, exist_ok=True)

    def mv(self, fs_src_path: str, fs_dst_path: str) -> None:
        os.rename(fs_src_path, fs_dst_path)

    def rmr(self, fs_path: str) -> None:
        shutil.rmtree(fs_path)

    def rm(self, fs_path: str) -> None:
        os.remove(fs_path)

    def delete(self, fs_path: str) -> None:
        """Remove a file or a directory tree; nothing when ``fs_path`` does not exist."""
        if not self.stat(fs_path):
            return
        if os.path.isfile(fs_path):
            self.rm(fs_path)
        else:
            self.rmr(fs_path)

    def need_upload_download(self) -> bool:
        return False


class BDFS(FS):
    """Fluid 1.8's HDFS client (``hadoop fs`` commands with a name node and a ugi): not
    implemented."""

    def __init__(self, hdfs_name: str, hdfs_ugi: str, time_out: int = 20 * 60 * 1000,
                 sleep_inter: int = 1000, *args: Any, **kwargs: Any) -> None:
        raise not_implemented(
            "paddle.distributed.fs_wrapper.BDFS",
            "checkpoints on HDFS are not part of dask_fluid; keep them on a local or "
            "mounted path with LocalFS")
