"""Creating, attaching and removing shmatari's shared-memory segments.

Segments are ``multiprocessing.shared_memory.SharedMemory`` objects named
``shmatari_<owner pid>_<random hex>``. The resource tracker is kept out of
it (``track=False`` on Python >= 3.13, an immediate unregister before): the
pool unlinks its own segment, and a tracker that unlinks it too, or warns
about it at exit, is noise.
"""

from __future__ import annotations

import os
import secrets
import sys
from multiprocessing import shared_memory

from .errors import SharedMemorySpaceError

__all__ = ["PREFIX", "new_name", "create", "attach", "unlink", "free_bytes", "SHM_DIR"]

PREFIX = "shmatari_"
SHM_DIR = "/dev/shm"
_TRACK_KW = sys.version_info >= (3, 13)


def new_name(pid: int | None = None) -> str:
    """A fresh segment name: ``shmatari_<pid>_<8 hex digits>`` (short enough
    for macOS's 31-character limit)."""
    return f"{PREFIX}{os.getpid() if pid is None else pid}_{secrets.token_hex(4)}"


def _untrack(shm: shared_memory.SharedMemory) -> None:
    if not _TRACK_KW:
        from multiprocessing import resource_tracker

        resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001


class _Attached:
    """A segment mapped by a process that does not own it (Python < 3.13).

    ``SharedMemory(name)`` registers even a mere attach with the resource
    tracker there, and a creator and its forked worker registering and
    unregistering the same name race inside the tracker (``KeyError`` noise,
    or an unlink by a process that only attached). This maps the segment the
    way ``SharedMemory`` does (``shm_open`` then ``mmap``) without the tracker.
    """

    def __init__(self, name: str):
        import mmap

        import _posixshmem  # the module SharedMemory itself is built on

        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            size = os.fstat(fd).st_size
            self._mmap = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.name, self.size = name, size
        self.buf = memoryview(self._mmap)

    def close(self) -> None:
        if self.buf is not None:
            self.buf.release()
            self.buf = None
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None


def _open(name: str, create: bool, size: int):
    if _TRACK_KW:
        return shared_memory.SharedMemory(name=name, create=create, size=size, track=False)
    if not create:
        return _Attached(name)
    shm = shared_memory.SharedMemory(name=name, create=True, size=size)
    _untrack(shm)
    return shm


def free_bytes(path: str = SHM_DIR) -> int | None:
    """Bytes free to unprivileged users under ``path``, or None if unknown."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def create(name: str, size: int) -> shared_memory.SharedMemory:
    """Creates a segment of ``size`` bytes with every page committed.

    Pages are reserved up front (``posix_fallocate``), so that a full
    ``/dev/shm`` shows here and not later as a SIGBUS in a worker.

    Raises:
        SharedMemorySpaceError: too little room; nothing is left behind.
        FileExistsError: the name is taken.
    """
    free = free_bytes()
    if free is not None and free < size:
        raise SharedMemorySpaceError(
            f"/dev/shm has {free:,} bytes free but the pool needs {size:,}: "
            f"use fewer envs or a smaller observation, or enlarge /dev/shm "
            f"(docker run --shm-size=...)", needed=size, free=free)
    shm = _open(name, True, size)
    try:
        fd = getattr(shm, "_fd", -1)
        if fd >= 0 and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        _destroy(shm)
        free = free_bytes() or 0
        raise SharedMemorySpaceError(
            f"could not reserve {size:,} bytes in /dev/shm ({free:,} free): {exc}",
            needed=size, free=free) from exc
    except BaseException:
        _destroy(shm)
        raise
    return shm


def _destroy(shm: shared_memory.SharedMemory) -> None:
    try:
        shm.close()
    finally:
        try:
            shm.unlink() if _TRACK_KW else _unlink_name(shm.name)
        except FileNotFoundError:
            pass


def attach(name: str):
    """Maps an existing segment without taking ownership of it (and without
    the resource tracker). The result has ``name``, ``size``, ``buf`` and
    ``close()``, like ``SharedMemory``.

    Raises:
        FileNotFoundError: no segment of that name.
    """
    return _open(name, False, 0)


def _unlink_name(name: str) -> None:
    import _posixshmem  # the module SharedMemory itself uses

    _posixshmem.shm_unlink("/" + name if not name.startswith("/") else name)


def unlink(name: str) -> bool:
    """Removes a segment's name; True if it existed."""
    try:
        _unlink_name(name)
        return True
    except FileNotFoundError:
        return False
