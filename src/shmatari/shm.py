"""Creating, attaching and removing shmatari's shared-memory segments.

Segments are POSIX shared-memory files named ``shmatari_<owner pid>_<random
hex>``, made and mapped as ``multiprocessing.shared_memory.SharedMemory``
makes them (``shm_open``, ``ftruncate``, ``mmap``) but without its resource
tracker, on every Python version: the pool unlinks its own segment, and a
tracker that unlinks it too, or warns about it at exit, is noise. Before
Python 3.13 ``SharedMemory`` registers each segment it makes, which starts
the tracker: a ``python -c`` process, whose ``sys.path`` begins with the
current folder, so that a ``multiprocessing`` package planted in the folder
a pool was started from ran in it (an attacker's pass, as root).

Stale segments
--------------
A pool's segment is removed by its owner's ``close()``, by the garbage
collector, or, when the owner is killed, by its workers (see
:mod:`shmatari.worker`). If every process of a pool dies at once (SIGKILL of
the whole process group, the OOM killer), nobody is left to remove it, so
every :func:`shmatari.make` first calls :func:`sweep_stale`. The rule that
says a segment is stale must never take a live pool's segment:

- every process that maps a segment (its creator and each process that
  attaches it) holds a shared ``flock`` on it for as long as it has it open,
  and the kernel drops that lock when the process dies, however it dies;
- a segment is stale only if its name is ``shmatari_<pid>_<hex>``, it belongs
  to this user, no process holds its lock (the sweep's own exclusive,
  non-blocking ``flock`` succeeds), *and* the owner named in it is gone: no
  live process has that pid, or the one that has it started after the
  segment was created (the pid was reused); *and* its first word is
  shmatari's magic or zero (a pool of any version, or one its maker died
  before writing: :func:`_magic_or_zero`);
- or it is a named pool's ``shmatari_<name>`` (``shmatari serve --name``),
  of this user, whose lock nobody holds, with a valid header whose owner is
  not alive (its pid and start time: :func:`_sweep_named`).

The lock test works across PID namespaces (two containers sharing
``/dev/shm``), where pids mean nothing; the pid test keeps the sweep off a
segment that its creator is still setting up, and off segments of older
shmatari versions, which hold no lock. The sweep lists ``/dev/shm``, so it
runs on Linux only.
"""

from __future__ import annotations

import _posixshmem  # what multiprocessing.shared_memory is built on (POSIX)
import errno
import logging
import mmap
import os
import re
import secrets
import stat
import sys

from . import _core
from .errors import SharedMemorySpaceError

__all__ = ["PREFIX", "new_name", "create", "attach", "unlink", "unlink_own", "identity",
           "free_bytes", "sweep_stale", "SHM_DIR", "LOCK_TIMEOUT", "SegmentLockedError"]

PREFIX = _core.NAME_PREFIX  # "shmatari_" (SHMATARI_NAME_PREFIX)
SHM_DIR = "/dev/shm"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)_[0-9a-f]+")
_log = logging.getLogger("shmatari")


#: Seconds :func:`attach` waits by default for the shared lock while another
#: process holds an exclusive one. Only a sweep or a starting server takes
#: it, for microseconds (a non-blocking try); held longer, it is a process
#: of this user that keeps the segment from being used.
LOCK_TIMEOUT = 2.0
#: Seconds between tries of the shared lock (``flock`` has no timed wait).
_LOCK_RETRY = 0.005


class SegmentLockedError(TimeoutError):
    """Another process has held an exclusive lock on a segment for longer
    than the lock timeout (see :func:`attach`)."""


def _lock_shared(fd: int, timeout: float | None = None, path: str = "") -> None:
    """Takes the shared lock that marks a segment as in use (see above),
    waiting up to ``timeout`` seconds (None: without waiting more than a
    first try) while another process holds an exclusive one.

    Raises:
        SegmentLockedError: the lock stayed exclusive for ``timeout`` s.
    """
    try:
        import fcntl
    except ImportError:  # Windows: no sweep there
        return
    import time

    deadline = time.monotonic() + (timeout or 0.0)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise SegmentLockedError(
                    f"{path or 'the segment'} is locked exclusively by another process of "
                    f"this user (waited {timeout or 0.0:g} s for the shared lock that every "
                    f"process mapping a segment holds); stop that process, or serve the "
                    f"pool under another name") from None
            time.sleep(_LOCK_RETRY)


def identity(segment) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the segment file that ``segment`` (a
    segment this process created or attached) holds open, or None when its
    descriptor is closed or there is none (not Linux/POSIX)."""
    fd = getattr(segment, "_fd", -1)
    if fd is None or fd < 0:
        return None
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def named_identity(name: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file segment ``name`` names now in
    ``SHM_DIR`` (``lstat``: a link is its own file), or None if there is none;
    compared with :func:`identity` to tell whether the name still names the
    segment a process holds."""
    try:
        st = os.lstat(os.path.join(SHM_DIR, name))
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def unlink_own(name: str, ident: tuple[int, int] | None) -> bool:
    """Removes segment ``name`` only if the file the name points to now is
    the one this process holds (``ident``, from :func:`identity`): a stale
    process must never remove a segment that a new server created under
    the same name. True if it was removed.

    Where segments are not files under ``/dev/shm`` (macOS), there is no
    name to compare, and the name is removed (the old behaviour). With
    ``ident`` None (the descriptor is closed), it is left alone.
    """
    if not sys.platform.startswith("linux"):
        return unlink(name)
    if ident is None:
        return False
    named = named_identity(name)
    if named is None:
        return False
    if named != tuple(ident):
        _log.info("left %s alone: it is no longer the segment this process created "
                  "(another pool took the name)", name)
        return False
    # A new segment created between this check and the unlink below would
    # still be removed: the window is this one call; sweep_stale has it too.
    return unlink(name)


def is_automatic_name(name: str) -> bool:
    """Whether segment ``name`` has the form of :func:`new_name`'s names."""
    return _NAME.fullmatch(name) is not None


def new_name(pid: int | None = None) -> str:
    """A fresh segment name: ``shmatari_<pid>_<8 hex digits>`` (short enough
    for macOS's 31-character limit)."""
    return f"{PREFIX}{os.getpid() if pid is None else pid}_{secrets.token_hex(4)}"


class NotASegmentError(ValueError):
    """A name in /dev/shm that is not a mappable segment (empty, a FIFO, ...)."""


class UntrustedSegmentError(PermissionError):
    """A segment this process must not map: a symbolic link, not a regular
    file, another user's, readable or writable by group or others, or sparse
    (docs/layout.md, "Trust"). The message, the C client's own
    (``shmatari_trust_fd``), names the owner and the mode and says what to do."""


def _refuse(code: int, msg: str, exc: BaseException | None = None) -> None:
    """Raises what a trust check's status says (nothing for ``OK``)."""
    if code == _core.STATUS["untrusted"]:
        raise UntrustedSegmentError(msg)
    if code != _core.OK:
        raise exc if exc is not None else OSError(msg)


def standard_fds_open() -> None:
    """Opens ``/dev/null`` on each of descriptors 0, 1 and 2 that is closed,
    before this process opens a segment or a socket: a process started with
    ``>&-`` (or ``2>&-``) had its first open take that number, so a worker's
    segment became its fd 1 and the server's zygote socket its fd 1, and any
    C-level write to standard output (a library's message) would have gone
    into the pool's header or the zygote's requests (an attacker's pass,
    2026-12-06)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: fd
            if null != fd:
                os.dup2(null, fd, inheritable=True)
                os.close(null)
            else:
                os.set_inheritable(fd, True)


def _open_trusted(name: str, readonly: bool = False) -> tuple[int, int]:
    """Opens segment ``name`` read-write without following a symbolic link and
    checks it with the C client's policy (``shmatari_trust_fd`` in
    ``shmatari/attach.h``, through ``_core.trust_fd``: the one statement of
    who may attach, docs/layout.md "Trust"): a regular file, not a symbolic
    link, owned by this process's effective uid, with no group or other
    permission bits, with every byte allocated and no hole. There is no
    opt-in for sharing a pool with a group: client and server are one user.

    Args:
        name: the segment's name under ``/dev/shm``.
        readonly: open it read-only (a look at the header only).

    Returns:
        (int, int): the descriptor, and the size to map (from the ``fstat``
        the check judged).

    Raises:
        FileNotFoundError: no such segment.
        UntrustedSegmentError: the check refused it (the message names the
            owner and the mode and says what to do).
        OSError: another failure to open it.
    """
    standard_fds_open()
    if sys.platform.startswith("linux"):
        path = os.path.join(SHM_DIR, name)
        flags = (os.O_RDONLY if readonly else os.O_RDWR) | os.O_NOFOLLOW | os.O_CLOEXEC | \
            os.O_NONBLOCK
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            raise
        except OSError as exc:
            # ELOOP: a symbolic link; EACCES: another user's; ENXIO: a socket.
            code, msg = _core.trust_path(path)
            _refuse(code, msg, exc)
            raise
    else:
        path = "/" + name
        fd = _posixshmem.shm_open(path, (os.O_RDONLY if readonly else os.O_RDWR) |
                                  os.O_NONBLOCK, mode=0o600)
    try:
        code, msg, size = _core.trust_fd(path, fd)
        _refuse(code, msg)
    except BaseException:
        os.close(fd)
        raise
    return fd, size


class _Mapped:
    """A segment file mapped whole, read-write or read-only, from descriptor
    ``fd``, which it keeps open (it holds the in-use lock) and closes with
    the mapping: ``name``, ``size``, ``buf`` and ``close()``, as
    ``SharedMemory`` has, and no resource tracker."""

    def __init__(self, name: str, fd: int, size: int, readonly: bool = False):
        self._fd, self._mmap, self.buf = fd, None, None
        self.name, self.size = name, size
        self._mmap = mmap.mmap(fd, size, access=mmap.ACCESS_READ if readonly else
                               mmap.ACCESS_DEFAULT)
        self.buf = memoryview(self._mmap)

    def close(self) -> None:
        if self.buf is not None:
            self.buf.release()
            self.buf = None
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _Attached(_Mapped):
    """A segment mapped by a process that does not own it.

    ``SharedMemory(name)`` registers even a mere attach with the resource
    tracker before Python 3.13, and a creator and its forked worker
    registering and unregistering the same name race inside the tracker
    (``KeyError`` noise, or an unlink by a process that only attached); and it
    follows symbolic links and maps whatever it finds. This maps the segment
    the way ``SharedMemory`` does (open, then ``mmap``) without the tracker,
    after the checks of :func:`_open_trusted`.
    """

    def __init__(self, name: str, lock_timeout: float = LOCK_TIMEOUT, readonly: bool = False):
        fd, size = _open_trusted(name, readonly)  # the size the trust check judged
        self._fd, self._mmap, self.buf = fd, None, None
        try:
            if size == 0:
                raise NotASegmentError(f"{SHM_DIR}/{name} is not a shared-memory segment "
                                       f"(an empty or special file)")
            super().__init__(name, fd, size, readonly)
            _lock_shared(fd, lock_timeout, f"{SHM_DIR}/{name}")
        except BaseException:
            self.close()  # the view, the mapping, the descriptor
            raise


class _Created(_Mapped):
    """A segment this process makes: ``shm_open(O_CREAT | O_EXCL)`` with mode
    0600, ``ftruncate`` to ``size`` bytes, ``mmap``, as
    ``SharedMemory(create=True)`` does, without the resource tracker (see
    the module's docstring). A failure after the file was made removes it
    (the file this process made, by :func:`unlink_own`).

    Raises:
        FileExistsError: the name is taken.
        OSError: another failure (``ENOSPC``, ``EMFILE``, ...).
    """

    def __init__(self, name: str, size: int):
        standard_fds_open()
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        self._fd, self._mmap, self.buf, ident = fd, None, None, None
        try:
            ident = identity(self)  # the file made here: the only one to remove
            os.ftruncate(fd, size)
            super().__init__(name, fd, size)
        except BaseException:
            self.close()  # the view, the mapping, the descriptor
            unlink_own(name, ident)
            raise


def close_mapping(segment) -> bool:
    """Closes a segment's mapping (one this process created or attached).

    If the caller still holds arrays over it (zero-copy observations), the
    mapping cannot be unmapped under them: it is left to those arrays, and
    unmapped when the last of them goes (they hold a buffer export on it).
    The handle lets go of it either way, so its destructor does not try
    again. Returns True if the mapping was unmapped now.
    """
    try:
        segment.close()
        return True
    except BufferError:
        segment.buf = None
        segment._mmap = None
        fd = getattr(segment, "_fd", -1)
        if fd >= 0:
            os.close(fd)
            segment._fd = -1
        return False


def _open(name: str, create: bool, size: int, lock_timeout: float = LOCK_TIMEOUT,
          readonly: bool = False):
    if not create:
        return _Attached(name, lock_timeout, readonly)
    shm = _Created(name, size)
    try:
        _lock_shared(shm._fd, LOCK_TIMEOUT, f"{SHM_DIR}/{name}")  # noqa: SLF001
    except BaseException:
        _destroy(shm)
        raise
    return shm


def free_bytes(path: str = SHM_DIR) -> int | None:
    """Bytes free to unprivileged users under ``path``, or None if unknown."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _write_every_page(fd: int, size: int) -> None:
    """Writes zeros over the whole file. On tmpfs a page that was only
    fallocated reads as a hole (``lseek(SEEK_HOLE)``), and a client refuses a
    segment with a hole (``shmatari_trust_fd``: a hole padded with blocks past
    the end of the file passes a count of allocated blocks)."""
    chunk = memoryview(bytes(min(size, 1 << 20)))
    off = 0
    while off < size:
        off += os.pwrite(fd, chunk[:min(len(chunk), size - off)], off)


def _publish(shm: _Mapped, name: str) -> None:
    """Gives the segment ``shm`` (created under a name of this process) the
    name ``name``, which must be free (``FileExistsError`` otherwise), and
    drops its first name.

    An exception on the way (a signal handler's: ``shmatari serve`` raises
    its stop there) leaves neither name: the caller's cleanup removes
    ``shm.name``, and the other name goes here if it still points to this
    segment's file. (Between the link and the unlink one of the two was left
    until the next sweep: an attacker's pass, 20 of 20 with the signal sent
    from inside the call.)"""
    staged = shm.name
    try:
        os.link(os.path.join(SHM_DIR, staged), os.path.join(SHM_DIR, name))
        shm.name = name
        _unlink_name(staged)
    except BaseException:
        ident = identity(shm)
        try:
            unlink_own(name if shm.name == staged else staged, ident)
        except OSError:
            pass
        raise


def create(name: str, size: int, prepare=None) -> _Mapped:
    """Creates a segment of ``size`` bytes with every page committed and
    written, and takes its in-use lock (held until ``close()``).
    ``prepare(buf)``, when given, writes the segment's first contents (its
    header) before ``name`` is published: a creator killed at any point
    leaves under ``name`` either nothing or a whole header naming it as the
    owner (which the next sweep removes once it is gone), never a file of
    zeros that nothing would ever remove. ``prepare`` must release any view
    of ``buf`` it takes.

    Pages are reserved up front (``posix_fallocate``), so that a full
    ``/dev/shm`` shows here and not later as a SIGBUS in a worker, and then
    written once (zeros), so that the file has no hole (what a client checks,
    docs/layout.md "Trust"). On Linux this happens under a fresh name of this
    process (``new_name()``), linked to ``name`` once done: no client can see
    ``name`` with pages still unwritten.

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
    staged = sys.platform.startswith("linux") and os.path.isdir(SHM_DIR) and \
        not _NAME.fullmatch(name)
    first = new_name() if staged else name
    try:
        shm = _open(first, True, size)
    except FileExistsError:  # another's file: left alone
        raise
    except BaseException as exc:
        # The file was made, then something failed (_Created removes its own
        # file; this covers a failure between the two). A name of this
        # process only: nobody else's.
        m = _NAME.fullmatch(first)
        if m is not None and m.group(1) == str(os.getpid()):
            try:
                _unlink_name(first)
            except OSError:
                pass
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            # no file at all: out of inodes (tmpfs nr_inodes), or of bytes
            free = free_bytes() or 0
            raise SharedMemorySpaceError(
                f"could not create the pool's segment {name!r} in {SHM_DIR} ({free:,} bytes "
                f"free; its files may be used up too: df -i {SHM_DIR}): {exc.strerror}",
                needed=size, free=free) from exc
        raise
    try:
        fd = getattr(shm, "_fd", -1)
        if fd >= 0 and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        if fd >= 0:
            _write_every_page(fd, size)
        if prepare is not None:
            prepare(shm.buf)
        if staged:
            _publish(shm, name)
    except FileExistsError:
        _destroy(shm)
        raise
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


def _destroy(shm: _Mapped) -> None:
    ident = identity(shm)
    try:
        shm.close()
    finally:
        unlink_own(shm.name, ident)


def attach(name: str, lock_timeout: float = LOCK_TIMEOUT, readonly: bool = False):
    """Maps an existing segment without taking ownership of it (and without
    the resource tracker), and holds its in-use lock until ``close()``. The
    result has ``name``, ``size``, ``buf`` and ``close()``, like ``SharedMemory``.

    Args:
        name: the segment's name under ``/dev/shm``.
        lock_timeout: seconds to wait for the shared in-use lock while
            another process holds it exclusively (default
            :data:`LOCK_TIMEOUT`, 2 s).
        readonly: open and map it read-only (a look at its header that a
            server watching its file does not count as a client: see
            ``shmatari.cli._OpenWatch``).

    Raises:
        SegmentLockedError: the lock stayed exclusive for ``lock_timeout`` s.
        FileNotFoundError: no segment of that name.
        UntrustedSegmentError: a symbolic link, another user's file, a file
            others may read or write, or a sparse file (:func:`_open_trusted`).
        NotASegmentError: an empty or special file.
    """
    return _open(name, False, 0, lock_timeout, readonly)


def _unlink_name(name: str) -> None:
    _posixshmem.shm_unlink("/" + name if not name.startswith("/") else name)


def unlink(name: str) -> bool:
    """Removes a segment's name; True if it existed."""
    try:
        _unlink_name(name)
        return True
    except FileNotFoundError:
        return False


def _start_time(pid: int) -> float | None:
    """Wall-clock second at which process ``pid`` started (Linux ``/proc``),
    None if it is gone or a zombie; raises OSError if ``/proc`` is unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except FileNotFoundError:
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    with open("/proc/stat", "rb") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def _owner_alive(pid: int, created: float) -> bool:
    """Whether ``pid`` may still be the process that created a segment at
    wall-clock time ``created``: alive, and started before it (within the
    1 s resolution of the kernel's boot time)."""
    try:
        started = _start_time(pid)
    except (OSError, StopIteration, IndexError, ValueError):
        try:  # no /proc: the pid alone
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    return started is not None and started <= created + 1.0


def sweep_stale(directory: str = SHM_DIR) -> list[str]:
    """Removes the segments of pools whose processes are all gone.

    A segment is removed only if its owner is dead and no process maps it;
    the module docstring gives the rule. Segments of other users, and names
    that are not shmatari's, are never touched.

    Returns:
        list[str]: the names removed.
    """
    try:
        import fcntl

        names = os.listdir(directory)
    except (ImportError, OSError):
        return []
    removed = []
    me, uid = os.getpid(), os.getuid()
    for name in names:
        m = _NAME.fullmatch(name)
        if m is None:
            if name.startswith(PREFIX) and _sweep_named(directory, name, uid):
                removed.append(name)
            continue
        if int(m[1]) == me:
            continue
        path = os.path.join(directory, name)
        try:
            # Non-blocking, and regular files only: opening a FIFO someone put
            # there under a shmatari name would otherwise block forever.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue  # gone already, or not ours to open
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or \
                    _owner_alive(int(m[1]), st.st_ctime):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live process maps it
            # A pool (of any version, in any state of its header), or one
            # its maker died before writing: anything else under such a
            # name is not ours (a text file named like one was removed: an
            # attacker's pass, 2026-12-06).
            if not _magic_or_zero(fd):
                continue
            if os.stat(path).st_ino == st.st_ino and unlink(name):
                removed.append(name)
                _log.info("removed stale shared-memory segment %s (owner pid %s is gone)",
                          name, m[1])
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def _magic_or_zero(fd: int) -> bool:
    """Whether a file's first word is shmatari's magic (a pool of any ABI
    version, its header whole or being written: the magic goes first) or
    zero, or the file is shorter than a word and all zero (a segment whose
    maker died between making and writing it). Read with ``pread``, never
    mapped (a sparse file on a full tmpfs would SIGBUS a reader of its
    map)."""
    word = os.pread(fd, 8, 0)
    if len(word) < 8:
        return not any(word)
    return int.from_bytes(word, sys.byteorder) in (0, _core.MAGIC)


def _pool_owner(path: str, fd: int, st: os.stat_result):
    """``(owner_pid, alive)`` from the header of the pool in ``fd`` (this
    user's regular file ``path``, stat ``st``), or None if it is not one.
    Checked first as every attach checks a segment (a sparse file, say,
    would SIGBUS this reader once the tmpfs is full), then mapped read-only
    and parsed (``Segment``; ``Segment.owner_alive``: the pid and its start
    time)."""
    import mmap

    if st.st_size < _core.HEADER_BYTES:
        return None
    code, _, size = _core.trust_fd(path, fd)
    if code != _core.OK or size != st.st_size:
        return None
    with mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ) as mapped:
        view = memoryview(mapped)
        try:  # the view released before the map closes, whatever happens
            try:
                seg = _core.Segment(view)
            except ValueError:
                return None
            try:
                return seg.header()["owner_pid"], seg.owner_alive()
            finally:
                seg.release()
                del seg
        finally:
            view.release()


def _sweep_named(directory: str, name: str, uid: int) -> bool:
    """Removes the segment of a named pool (``shmatari serve --name``,
    ``shmatari_<name>``) whose server is gone: this user's regular file, that
    no process maps (the sweep's exclusive ``flock`` succeeds: a server
    links the name only once it holds its shared lock), whose header names
    an owner that is not alive (``Segment.owner_alive``: the pid and its
    start time). A server killed while it started its workers left such a
    file for good: its workers, which would have removed it, did not run
    yet, and only a later ``serve`` of the same name looked at it. Anything
    else (not a pool, a live owner, another user's file) is left alone.
    Returns whether it was removed."""
    import fcntl

    path = os.path.join(directory, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or \
                st.st_size < _core.HEADER_BYTES:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live process maps it
        found = _pool_owner(path, fd, st)
        if found is None:
            return False  # not a pool (serve's _free_name says so by name)
        owner, alive = found
        if alive or os.stat(path).st_ino != st.st_ino or not unlink(name):
            return False
        _log.info("removed stale shared-memory segment %s (its server, pid %s, is gone)",
                  name, owner)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
