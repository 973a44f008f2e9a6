"""shmatari's exceptions.

Every exception shmatari raises on purpose derives from :class:`ShmatariError`
and from the builtin a caller would catch without knowing shmatari
(``ValueError``, ``RuntimeError``, ``OSError``).
"""

from __future__ import annotations

import errno as _errno

__all__ = [
    "ShmatariError",
    "WorkerError",
    "PoolClosedError",
    "CallOrderError",
    "SharedMemorySpaceError",
    "ResourceLimitError",
    "AttachError",
    "StepTimeoutError",
]


class ShmatariError(Exception):
    """Base class of shmatari's exceptions."""


class WorkerError(ShmatariError, RuntimeError):
    """A worker process failed or died.

    Attributes:
        worker: the worker's index.
        env_ids: the envs it owned, ``range(begin, end)``.
        exitcode: its exit code; negative is the signal that killed it
            (``multiprocessing`` convention); None if it is still running,
            or not known (a worker of an attached pool: the text says how it
            ended).
        worker_traceback: the traceback text the worker left, or "". In an
            attached pool whose server found a worker dead, the server's
            line on how it ended, then what the worker left (faulthandler's
            dump of a fatal signal).
    """

    def __init__(self, message: str, *, worker: int, env_ids: range,
                 exitcode: int | None, worker_traceback: str = ""):
        super().__init__(message)
        self.worker = worker
        self.env_ids = env_ids
        self.exitcode = exitcode
        self.worker_traceback = worker_traceback

    @classmethod
    def of(cls, who: str, pid: int | None, env_ids: range, what: str, *, worker: int,
           exitcode: int | None = None, traceback: str = "", where: str = "",
           label: str = "worker") -> "WorkerError":
        """The one place a WorkerError's text is built, for a local pool's
        worker (:mod:`shmatari.supervisor`), an attached pool's
        (:mod:`shmatari.client`) and a Ray node (:mod:`shmatari.ray`):
        ``"<who> (pid <pid>, envs <a>..<b>)<where> <what>"``, then the
        traceback the process left, under ``--- <label> traceback ---``,
        each of its lines after ``"| "``: the text comes from another
        process (a worker's from the segment, which any process of the user
        may write), and a line of it must not pass for a line of the log or
        message around it (``shmatari_quote_lines`` does the same in C).

        Args:
            who: ``"worker 3"``, ``"node 1"``.
            pid: its process id.
            env_ids: the envs it owned (empty: not known; "envs unknown").
            what: what happened (``"died: exit code 1"``).
            worker, exitcode: as the attributes.
            traceback: the traceback text it left, or "".
            where: where it ran, after the parenthesis (``" of the server (pid 7)"``).
            label: the traceback's heading.
        """
        envs = f"{env_ids.start}..{env_ids.stop - 1}" if env_ids else "unknown"
        msg = f"{who} (pid {pid}, envs {envs}){where} {what}"
        if traceback.strip():
            msg += f"\n--- {label} traceback ---\n" + "\n".join(
                "| " + line for line in traceback.rstrip().splitlines())
        return cls(msg, worker=worker, env_ids=env_ids, exitcode=exitcode,
                   worker_traceback=traceback)


class StepTimeoutError(ShmatariError, TimeoutError):
    """``recv`` / ``step`` waited longer than its ``timeout`` while every
    worker was alive: one is stuck (stopped, or looping inside the emulator).
    Nothing was taken: the pool is unchanged, and a later ``recv`` gets the
    batch if it completes."""


class PoolClosedError(ShmatariError, RuntimeError):
    """The env pool was closed, or broke after a worker failure."""


#: PoolClosedError's words for a call on a pool that close() closed. Before,
#: "the env pool is closed" alone: a newcomer whose discarded Gymnasium
#: wrapper had closed the pool on garbage collection could not tell why.
CLOSED = ("the env pool is closed: its close() ran (called by this code, at the end of "
          "a with block, at interpreter exit, or by a Gymnasium wrapper around it, whose "
          "close() closes the env it wraps, and up to Gymnasium 1.2 its garbage collection "
          "too); make a new pool to go on")


def check_usable(closed: bool, broken: str | None) -> None:
    """Raises PoolClosedError if a pool is closed, or broken (``broken``: the
    failure that broke it); what every call of a local or Ray pool checks first."""
    if closed:
        raise PoolClosedError(CLOSED)
    if broken:
        raise PoolClosedError(f"the env pool is broken: {broken.splitlines()[0]}; "
                              f"close it and make a new one")


class CallOrderError(ShmatariError, RuntimeError):
    """A call came out of order (``step`` before ``reset``, ``recv`` with
    nothing pending, ``send`` to an env that is still running). The pool is
    unchanged and stays usable."""


class SharedMemorySpaceError(ShmatariError, OSError):
    """``/dev/shm`` has too little room for the pool's segment.

    Attributes:
        needed: bytes the segment needs.
        free: bytes free where it would be created.
    """

    def __init__(self, message: str, *, needed: int, free: int):
        super().__init__(message)
        self.needed = needed
        self.free = free


class ResourceLimitError(ShmatariError, OSError):
    """This process, or the system, ran out of file descriptors or processes
    while a pool started or replaced a worker. Nothing is left behind (the
    pool is closed, or broken if it was running).

    ``errno`` is the system's: ``EMFILE`` (this process's limit,
    ``RLIMIT_NOFILE``), ``ENFILE`` (the system's) or ``EAGAIN`` (a process
    could not be started: ``RLIMIT_NPROC`` or the system's pid limit).

    Attributes:
        resource: ``"open files"`` or ``"processes"``.
        limit: this process's soft limit on that resource, or None when
            unlimited or unknown.
    """

    def __init__(self, code: int, message: str, *, resource: str, limit: int | None):
        super().__init__(code, message)
        self.resource = resource
        self.limit = limit


#: The Python functions that call fork() itself (os.fork, _posixsubprocess):
#: an EAGAIN raised in one of them is a process that could not be started.
_FORKING = frozenset({"_launch", "spawnv_passfds", "_execute_child"})


def _soft_limit(name: str) -> int | None:
    try:
        import resource
        soft = resource.getrlimit(getattr(resource, name))[0]
    except (ImportError, AttributeError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _raised_in(exc: BaseException) -> str:
    """The name of the innermost Python function ``exc`` went through."""
    tb, name = exc.__traceback__, ""
    while tb is not None:
        name, tb = tb.tb_frame.f_code.co_name, tb.tb_next
    return name


def resource_limit_error(exc: OSError, doing: str,
                         forked: bool | None = None) -> ResourceLimitError | None:
    """The clear error for ``exc`` when it says this process or the system ran
    out of file descriptors (``EMFILE``, ``ENFILE``) or could not start a
    process (``EAGAIN`` from fork), else None. ``doing`` names what failed
    (``"make()"``, ``"starting worker 3"``); ``forked``: whether ``exc`` came
    from fork() (None: from where it was raised). A ResourceLimitError is
    already the clear error: None."""
    if isinstance(exc, ResourceLimitError):
        return None
    code = exc.errno
    if code == _errno.EMFILE:
        limit = _soft_limit("RLIMIT_NOFILE")
        have = f"this process may have {limit} open" if limit is not None else "its limit"
        return ResourceLimitError(
            code, f"{doing} ran out of file descriptors ({have}: ulimit -n, RLIMIT_NOFILE); "
                  f"a pool holds a few, plus one or two per worker; raise the limit "
                  f"(ulimit -n 4096, or resource.setrlimit(resource.RLIMIT_NOFILE, ...)) or "
                  f"close files this process no longer needs ({exc.strerror})",
            resource="open files", limit=limit)
    if code == _errno.ENFILE:
        return ResourceLimitError(
            code, f"{doing}: the system's table of open files is full (ENFILE: "
                  f"/proc/sys/fs/file-max); close files, or raise that limit ({exc.strerror})",
            resource="open files", limit=_soft_limit("RLIMIT_NOFILE"))
    if forked is None:
        forked = _raised_in(exc) in _FORKING
    if code == _errno.EAGAIN and forked:
        limit = _soft_limit("RLIMIT_NPROC")
        have = f"this user may run {limit}" if limit is not None else "no per-user limit is set"
        return ResourceLimitError(
            code, f"{doing} could not start a process: fork() failed with EAGAIN, the limit on "
                  f"processes ({have}: ulimit -u, RLIMIT_NPROC) or the system's "
                  f"(/proc/sys/kernel/pid_max, threads-max, a cgroup's pids.max) is reached; "
                  f"stop processes, raise the limit, or use fewer workers ({exc.strerror})",
            resource="processes", limit=limit)
    return None


class AttachError(ShmatariError, RuntimeError):
    """:func:`shmatari.attach` could not attach to a pool.

    Attributes:
        code: why, as the C client's status name (``shmatari._core.STATUS``):
            ``"not_found"`` (no such pool), ``"not_shmatari"``, ``"abi"``
            (another layout ABI major version), ``"busy"`` (another client is
            attached), ``"timeout"``, ``"server_dead"``, ``"worker"``,
            ``"closed"``, ``"invalid"`` (C's attach, for a bad name:
            Python's :func:`shmatari.attach` raises ``ValueError`` there
            first), ``"untrusted"`` (the
            segment is another user's, a symbolic link, open to other users
            or sparse: docs/layout.md, "Trust") or ``"system"``.
        client_pid: with ``code == "busy"``, the current client's pid; else None.
    """

    def __init__(self, message: str, *, code: str, client_pid: int | None = None):
        super().__init__(message)
        self.code = code
        self.client_pid = client_pid
