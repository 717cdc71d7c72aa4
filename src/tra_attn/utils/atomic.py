"""Atomic file writes: write to a temporary file in the same directory, then rename over the target."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)``, then atomically replace ``path``; on failure ``path`` is untouched."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, usual_mode(0o666))  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def usual_mode(base: int) -> int:
    """``base`` (0o666 for files, 0o777 for directories) minus the process umask."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def make_directory(path: str | os.PathLike, what: str) -> Path:
    """``mkdir -p path``, or a ValueError naming ``what`` (e.g. '--out x') and why it cannot be a folder."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is a file; expected a directory (new or existing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{what} {path}: cannot create it ({err.strerror}); expected a writable directory") from None
    return path
