"""TVM's ``tvm.contrib.utils``: a temporary directory that tutorials save modules into."""

from __future__ import annotations

import os
import shutil
import tempfile
from types import TracebackType

__all__ = ["TempDirectory", "tempdir"]


class TempDirectory:
    """A directory removed by :meth:`remove`, on leaving a ``with`` block, or when collected.

    Parameters
    ----------
    custom_path
        Use (and create) this directory instead of a fresh one under the system temp dir.
    keep_for_debug
        Never remove the directory.
    """

    def __init__(self, custom_path: str | None = None, keep_for_debug: bool = False) -> None:
        if custom_path:
            os.makedirs(custom_path, exist_ok=True)
            self.temp_dir = os.path.abspath(custom_path)
        else:
            self.temp_dir = tempfile.mkdtemp(prefix="templtune_")
        self._keep = keep_for_debug

    @property
    def path(self) -> str:
        return self.temp_dir

    def relpath(self, name: str) -> str:
        """The absolute path of ``name`` inside the directory."""
        return os.path.join(self.temp_dir, name)

    def listdir(self) -> list[str]:
        """The names of the directory's entries."""
        return os.listdir(self.temp_dir)

    def remove(self) -> None:
        """Delete the directory and its contents (unless ``keep_for_debug``)."""
        if not self._keep and os.path.isdir(self.temp_dir):
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> TempDirectory:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.remove()

    def __del__(self) -> None:
        self.remove()


def tempdir(custom_path: str | None = None, keep_for_debug: bool = False) -> TempDirectory:
    """A new :class:`TempDirectory` (TVM's ``utils.tempdir()``)."""
    return TempDirectory(custom_path, keep_for_debug)
