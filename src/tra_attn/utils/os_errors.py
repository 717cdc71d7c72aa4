"""Operating-system errors (a read-only folder, a full disk, a name too long) as one clear line.

``writing(what, path)`` turns an OS error raised while writing into ``WriteFailed``, which names what was
written and where: "writing checkpoint runs/x/checkpoints/step_0000040: No space left on device".
torch and safetensors report OS errors as their own exceptions (a ``RuntimeError`` from torch.save,
``SafetensorError``): ``os_error`` finds the OS error behind them, from the exception chain or the errno
in their message.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# How the C++ and Rust libraries write an errno in their messages: safetensors "(os error 28)", torch
# "open file failed with strerror: File name too long", Python "[Errno 28]".
_ERRNO_NUMBER = re.compile(r"\(os error (\d+)\)|\[Errno (\d+)\]")
_STRERROR = re.compile(r"strerror: ([^.\n]+)")
_BY_STRERROR = {os.strerror(code): code for code in errno.errorcode}
# Errors only a write meets, and the hidden temporary names of files and folders written beside their target
# and renamed over it: ".NAME.PID@HOST.RANDOM.tmp" (utils/atomic.py: files, saved models) or
# ".NAME.<8 random characters>" (checkpoint folders).
_WRITE_ONLY = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_TEMPORARY = re.compile(r"^\.(.+?)\.\d+@[A-Za-z0-9-]+\.[A-Za-z0-9_]+\.(?:tmp|old)$|^\.(.+)\.[a-z0-9_]{8}(?:\.tmp)?$")


class WriteFailed(OSError):
    """Writing ``what`` (e.g. 'checkpoint') at ``filename`` failed; ``errno`` and ``strerror`` say why."""

    def __init__(self, what: str, path: str | os.PathLike, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause), os.fspath(path))
        self.what = what

    def __str__(self) -> str:
        return f"writing {self.what} {self.filename}: {self.strerror}"


@contextmanager
def writing(what: str, path: str | os.PathLike) -> Iterator[None]:
    """Raise ``WriteFailed(what, path)`` for an OS error inside the block (also one that torch or safetensors
    wrapped in their own exception); other exceptions pass unchanged."""
    try:
        yield
    except (WriteFailed, ValueError):  # ValueError: the library's own refusal, already one clear line
        raise
    except Exception as err:
        cause = os_error(err)
        if cause is None:
            raise
        raise WriteFailed(what, path, cause) from err


def os_error(err: BaseException) -> OSError | None:
    """The OS error behind ``err``: ``err`` itself, one it was raised from or while handling, or one named by
    an errno in the message of a library's own exception; None if there is none."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError):
            return err
        code = _errno_in(str(err))
        if code is not None:
            return OSError(code, os.strerror(code))
        err = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    return None


def _errno_in(message: str) -> int | None:
    if found := _ERRNO_NUMBER.search(message):
        return int(found.group(1) or found.group(2))
    if (found := _STRERROR.search(message)) and found.group(1).strip() in _BY_STRERROR:
        return _BY_STRERROR[found.group(1).strip()]
    return None


def describe(err: OSError) -> str:
    """One line for an OS error: what was done (for ``WriteFailed``, or a write seen in the path or the
    reason), the path(s), the reason."""
    reason = err.strerror or f"{type(err).__name__}: {err}"  # numpy's short write has no errno
    if isinstance(err, WriteFailed) or not err.filename:
        return str(err) if isinstance(err, WriteFailed) else reason
    path = Path(os.fspath(err.filename))
    if temporary := _TEMPORARY.match(path.name):  # name the file being written, not its temporary copy
        return f"writing {path.with_name(temporary.group(1) or temporary.group(2))}: {reason}"
    paths = f"{path} -> {os.fspath(err.filename2)}" if err.filename2 else str(path)
    return f"writing {paths}: {reason}" if err.errno in _WRITE_ONLY else f"{paths}: {reason}"
