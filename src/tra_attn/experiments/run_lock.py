"""The lock that makes a run train once: an exclusive POSIX record lock (``fcntl.lockf``) on ``.lock`` in the run's
store folder, held while the run trains and is evaluated.

POSIX locks are the ones network filesystems carry between machines: NFSv4 has them built in, NFSv3 through its
lock manager (lockd), and Lustre when mounted with ``-o flock``. The kernel drops the lock of a process that dies,
and an NFSv4 server that of a machine that stops answering once its lease runs out, so a stopped worker never
holds a run. The file names the holder (host and process) for the one who waits. Where the filesystem gives no
locks (``ENOLCK``: NFSv3 without lockd), the run is refused rather than trained without one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from pathlib import Path

LOCK_NAME = ".lock"
HELD = (errno.EACCES, errno.EAGAIN)  # what a non-blocking lockf raises while another process holds the lock


@contextlib.contextmanager
def run_lock(directory: Path, waiting):
    """Hold the lock of the run in ``directory``; if another process holds it, call ``waiting(holder)`` (its host
    and process id, as the file says) and wait for it."""
    with open(directory / LOCK_NAME, "a+") as lock:
        try:
            fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in HELD:
                raise _no_locks(directory, err) from None
            lock.seek(0)
            waiting(lock.read().strip() or "unknown")
            fcntl.lockf(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"host {socket.gethostname()}, process {os.getpid()}\n")
        lock.flush()
        yield


def _no_locks(directory: Path, err: OSError) -> OSError:
    if err.errno == errno.ENOLCK:
        return OSError(
            err.errno,
            f"{directory}: the store's filesystem gives no file locks ({err.strerror}), so two workers could train "
            "one run; expected a store on a local disk or on NFS with locking (NFSv4, or NFSv3 with lockd running; "
            "Lustre mounted with -o flock)",
        )
    return err
