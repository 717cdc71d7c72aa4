"""Atomic writes of files and folders: write a hidden temporary sibling, then rename it over the target.

A temporary sibling of ``target`` is named ``.target.PID@HOST.RANDOM.tmp`` (``.old`` for a folder being
replaced), so a write killed half-way leaves a temporary that says whose it was. The next write to the same
target removes its temporaries whose process is gone (``remove_stale_temps``): never one of a live process,
and never one written from another machine (a shared file system), whose processes cannot be checked.
Outputs get the permissions of the user's umask (``tempfile`` creates private 0600 files and 0700 folders).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from .os_errors import WriteFailed

_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _temp_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}@{_HOST}."


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temps(folder: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Remove the temporaries of interrupted writes in ``folder`` (of the target ``name`` only, if given) whose
    process, on this machine, is no longer alive; returns them. A folder's old copy left by a replacement
    killed between its two renames (``name.….old`` while ``name`` is missing) is renamed back instead."""
    folder = Path(folder)
    target = re.escape(name) if name is not None else r".+"
    pattern = re.compile(rf"^\.(?P<name>{target})\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9-]+)\.[A-Za-z0-9_]+\.(tmp|old)$")
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    stale = []
    for path in sorted(entries):
        match = pattern.match(path.name)
        if not match or match["host"] != _HOST or _is_alive(int(match["pid"])):
            continue
        original = folder / match["name"]
        if path.suffix == ".old" and not original.exists():
            path.rename(original)
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        stale.append(path)
    return stale


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)``, then atomically replace ``path``; on failure ``path`` is untouched."""
    path = Path(path)
    remove_stale_temps(path.parent, path.name)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, usual_mode(0o666))  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_directory(path: str | os.PathLike, write: Callable[[Path], None], keep_others: bool = True) -> Path:
    """Write the folder ``path`` as a whole: ``write(tmp)`` fills a new hidden sibling, which then takes the
    place of ``path``; on failure ``path`` is untouched.

    An existing ``path`` is renamed away first and removed last, so ``path`` is at every moment the old folder
    or the new one, never a mix (a crash between the two renames leaves ``path`` missing and the old folder
    beside it, which the next write restores first). With ``keep_others`` the old folder's entries that
    ``write`` did not create are carried over (hard links where the file system allows, else copies).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent, path.name)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent))
    try:
        write(tmp)
        if keep_others and path.is_dir():
            for entry in path.iterdir():
                if not (tmp / entry.name).exists():
                    _carry(entry, tmp / entry.name)
        set_usual_modes(tmp)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=_temp_prefix(path), suffix=".old", dir=path.parent))
            os.replace(path, old)  # a directory renamed over an empty directory
            try:
                os.rename(tmp, path)
            except BaseException:
                os.replace(old, path)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _carry(source: Path, destination: Path) -> None:
    """``source`` at ``destination`` too: a hard link (a folder: a tree of them), or a copy."""
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, destination, copy_function=_link_or_copy, symlinks=True)
    else:
        _link_or_copy(source, destination)


def _link_or_copy(source, destination) -> None:
    try:
        os.link(source, destination, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, destination, follow_symlinks=False)


def set_usual_modes(folder: Path) -> None:
    """Give ``folder`` and everything in it the permissions the umask gives new files and folders."""
    folder.chmod(usual_mode(0o777))
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            Path(root, name).chmod(usual_mode(0o777))
        for name in files:
            if not Path(root, name).is_symlink():
                Path(root, name).chmod(usual_mode(0o666))


def usual_mode(base: int) -> int:
    """``base`` (0o666 for files, 0o777 for directories) minus the process umask."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def make_directory(path: str | os.PathLike, what: str) -> Path:
    """``mkdir -p path``, or an error naming ``what`` (e.g. '--out x'): a ValueError when the path cannot be a folder
    (a file on the way: bad input), ``WriteFailed`` when the machine refuses the write (a read-only or immutable
    folder, no permission, a full disk: exit 1, as every other write)."""
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise ValueError(f"{what} {path} is a file; expected a directory (new or existing)")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        if err.errno in (errno.EROFS, errno.EPERM, errno.EACCES, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG):
            raise WriteFailed(what, path, err) from None
        raise ValueError(f"{what} {path}: cannot create it ({err.strerror}); expected a writable directory") from None
    return path
