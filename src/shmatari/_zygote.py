"""The zygote: a clean process that forks shmatari's workers.

With ``start_method="zygote"`` (the default on Linux) a trainer's workers do
not come from the trainer's own interpreter (``fork``: everything it holds)
nor from a fresh one that imports its main script again (``spawn``,
``forkserver``: ``import torch`` and the rest, in every worker, and the
``if __name__ == "__main__":`` guard). They come from the zygote: started
once per trainer process, at its first :func:`shmatari.make`, as
``python -P -m shmatari._zygote`` through :mod:`subprocess` (``close_fds``,
its own session, so that a Ctrl-C at the terminal reaches the trainer
alone), it imports only ale-py (without Gymnasium), NumPy and the compiled
core, then forks a worker for each request it gets.

Protocol (one ``AF_UNIX`` ``SOCK_SEQPACKET`` pair, pickled tuples, trusted:
both ends are this package, the socket is private to the two processes):

- trainer -> zygote: ``("fork", request_id, worker_main_kwargs)``, with the
  worker's faulthandler pipe passed as an fd (``SCM_RIGHTS``);
- zygote -> trainer: ``("started", request_id, pid)`` or
  ``("failed", request_id, text)``, and ``("exit", pid, code)`` when a
  worker ends (``code`` as ``Process.exitcode``: the exit status, or minus
  the signal that killed it). The zygote reaps its children; the trainer's
  :class:`WorkerProcess` reads their exit codes from these messages.

Lifetime: the zygote ends when the trainer does: ``PR_SET_PDEATHSIG``
(SIGKILL; only when started from the trainer's main thread, since Linux
ties it to the thread that started the child), the socket's end of file
(the kernel closes the trainer's end when it dies), and a parent-pid check
every 0.2 s. Its workers get SIGCONT when it dies (``PR_SET_PDEATHSIG``) and
watch the trainer themselves (:func:`shmatari.worker.worker_main`). A
process forked from the trainer (``os.fork``) starts its own zygote.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import select
import signal
import socket
import sys

__all__ = ["get", "WorkerProcess", "ZygoteError"]

#: Largest message either side sends (bytes).
_MSG = 1 << 18
#: Seconds between the zygote's checks that its trainer still lives.
_POLL = 0.2
#: Seconds a start waits for a zygote seen stopped (SIGSTOP, a debugger)
#: all that time before it fails, whatever start_timeout: every make()
#: waited its whole start_timeout, 122 s by default (an attacker's pass,
#: 2026-12-06). An honest start is answered in milliseconds.
STOPPED_SECONDS = 2.0


class ZygoteError(RuntimeError):
    """The zygote could not start a worker (it died, or fork failed).

    Attributes:
        errno: the zygote's fork() failure's errno, else None.
    """

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


def _set_parent_death_signal(sig: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG


# -- the zygote process --------------------------------------------------------------

def _fork_worker(sock, kwargs: dict, fds: list[int], wakeup: tuple[int, int]) -> int:
    """Forks a worker running ``worker_main(**kwargs)``; returns its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in wakeup:
            os.close(fd)
        from .worker import worker_main

        worker_main(fault_pipe=fds[0] if fds else None, parent_is_zygote=True, **kwargs)
        code = 0
    except BaseException:  # noqa: BLE001 - worker_main reports its own failures
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _reap(sock, children: set) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, ("exit", pid, os.waitstatus_to_exitcode(status)))


def _send(sock, msg, fds=()) -> None:
    try:
        socket.send_fds(sock, [pickle.dumps(msg)], list(fds))
    except OSError:
        pass  # the trainer is gone: the loop sees end of file next


def _serve(sock, owner: int) -> None:
    wakeup = os.pipe()
    for fd in wakeup:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock, wakeup[0]], [], [], _POLL)
        if wakeup[0] in ready:
            try:
                while os.read(wakeup[0], 512):
                    pass
            except BlockingIOError:
                pass
        _reap(sock, children)
        if sock in ready:
            try:
                msg, fds, _, _ = socket.recv_fds(sock, _MSG, 4)
            except OSError:  # reset: the trainer closed with our replies unread
                msg, fds = b"", []
            if not msg:
                return  # the trainer closed its end or died
            kind, rid, kwargs = pickle.loads(msg)
            try:
                pid = _fork_worker(sock, kwargs, fds, wakeup)
            except OSError as exc:
                _send(sock, ("failed", rid, (exc.errno, f"fork failed: {exc}")))
            else:
                children.add(pid)
                _send(sock, ("started", rid, pid))
            finally:
                for fd in fds:
                    os.close(fd)
        if os.getppid() != owner:
            return


def main(argv: list[str] | None = None) -> None:
    """The zygote's entry point: ``python -m shmatari._zygote FD OWNER_PID PDEATHSIG``."""
    # SIGINT is the trainer's alone; SIGTERM gets its default (a quiet death)
    # even where the trainer ignores or blocks it (under nohup or a supervisor
    # that does): both are inherited through exec, and a worker forked
    # before it installs its own handler would otherwise not die of a SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    fd, owner, pdeath = (int(a) for a in (argv or sys.argv[1:4]))
    if pdeath:
        _set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != owner:
        return  # the trainer died before we could watch it
    sock = socket.socket(fileno=fd)
    # What a worker runs, loaded once here and shared by every fork.
    # (`import a.b` rather than `from . import b`: the package's lazy
    # __getattr__ would load them through importlib, out of -X importtime's sight.)
    import shmatari._worker_ale  # noqa: F401  (first: ale_py without Gymnasium)
    import numpy.random  # noqa: F401  (NumPy loads it lazily: in every worker, else)
    import shmatari._core  # noqa: F401
    import shmatari.atari
    import shmatari.config  # noqa: F401
    import shmatari.seeding  # noqa: F401
    import shmatari.shm  # noqa: F401
    import shmatari.worker  # noqa: F401

    shmatari.atari.quiet_process()
    shmatari.shm.standard_fds_open()  # before its pipes and the workers' segments
    with sock:  # closed when the zygote ends (python -X dev warns of it otherwise)
        _serve(sock, owner)


# -- the trainer's side ------------------------------------------------------------

class _Zygote:
    """The trainer's handle on its zygote: start it, ask it for workers, and
    collect their exit codes."""

    def __init__(self):
        import subprocess
        import threading

        from .atari import child_environment

        self.owner = os.getpid()
        self.lock = threading.RLock()
        #: exit codes of workers whose WorkerProcess is still held, by the
        #: request that started them (not by pid: a pid another worker took
        #: over since keeps the first one's exit apart); dropped when the
        #: handle is collected (kept for every worker, by pid, before
        #: 2026-12-07: the dict grew by one entry per worker for the
        #: trainer's life, a soak test's make/close loop)
        self.exits: dict[int, int] = {}
        #: pid -> the request that started the worker running under it now
        #: (not given up on): its exit is filed under that request
        self.owners: dict[int, int] = {}
        #: (pid, request) of WorkerProcess objects collected, appended by
        #: their finalizers without the lock (a finalizer runs inside the
        #: garbage collector, in any thread), handled in _pump
        self.released: collections.deque = collections.deque()
        self.replies: dict[int, tuple] = {}
        self.next_id = 0
        #: requests given up on (a timeout, a Ctrl-C): a worker the zygote
        #: forks for one later is killed as its answer is read (_pump)
        self.abandoned: set[int] = set()
        self.dead = False
        from .shm import standard_fds_open

        standard_fds_open()  # the socket must not take a closed fd 0, 1 or 2
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        pdeath = int(threading.current_thread() is threading.main_thread())
        # -P (3.11+): not the current folder first in sys.path, where a
        # user's own numpy.py or shmatari/ could shadow ours.
        cmd = [sys.executable] + (["-P"] if sys.version_info >= (3, 11) else []) + [
            "-m", "shmatari._zygote", str(theirs.fileno()), str(os.getpid()), str(pdeath)]
        masked = hasattr(signal, "pthread_sigmask")
        try:
            with child_environment():
                env = dict(os.environ)
            path = env.get("PYTHONPATH")
            env["PYTHONPATH"] = package_root + (os.pathsep + path if path else "")
            from ._sigint import deferred_sigint as _deferred_sigint

            if masked:  # a Ctrl-C now is the trainer's; the zygote ignores SIGINT
                old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                with _deferred_sigint():  # raised once the zygote is on record
                    self.proc = subprocess.Popen(cmd, pass_fds=[theirs.fileno()],
                                                 close_fds=True,
                                                 stdin=subprocess.DEVNULL, env=env,
                                                 start_new_session=True)
            finally:
                if masked:
                    signal.pthread_sigmask(signal.SIG_SETMASK, old)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.sock = mine

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def _pump(self, timeout: float) -> None:
        """Reads what the zygote sent, waiting up to ``timeout`` s for a first message."""
        while self.released:
            pid, rid = self.released.popleft()
            if self.owners.get(pid) == rid:  # not a later worker with that pid
                del self.owners[pid]
            self.exits.pop(rid, None)
        if self.dead:
            return
        if timeout > 0:
            select.select([self.sock], [], [], timeout)
        while True:
            try:
                msg = self.sock.recv(_MSG, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                msg = b""
            if not msg:
                self.dead = True
                return
            kind, key, value = pickle.loads(msg)
            if kind == "exit":
                rid = self.owners.pop(key, None)
                if rid is not None:  # else nobody will ask (a worker given up on)
                    self.exits[rid] = value
            else:
                # In the messages' order: a worker's "started" comes before
                # its exit, which may come in the same read; the zygote
                # reaps a worker (its exit sent) before a pid can be reused.
                if kind == "started" and key not in self.abandoned:
                    self.owners[value] = key
                if key in self.abandoned:
                    self.abandoned.discard(key)
                    self._drop(kind, value)
                    continue
                self.replies[key] = (kind, value)

    @staticmethod
    def _drop(kind: str, value) -> None:
        """A reply to a request given up: a worker started for it is killed.
        Nobody waits for it nor records it, and it would serve its slot
        beside the worker started in its place."""
        if kind == "started":
            with contextlib.suppress(ProcessLookupError):
                os.kill(value, signal.SIGKILL)

    def start_worker(self, kwargs: dict, fds: list[int], timeout: float,
                     deliver=None) -> "WorkerProcess":
        """Asks the zygote to fork a worker running ``worker_main(**kwargs)``.

        ``deliver``: called every 0.1 s while it waits (``deferred_sigint``'s:
        runs a held-back Ctrl-C's handler). If it raises, or the wait times
        out, the request is given up: a worker the zygote forks for it later
        is killed as soon as its answer is read.

        Raises:
            ZygoteError: the zygote died, fork failed, or no answer within ``timeout`` s.
        """
        import time

        with self.lock:
            self.next_id += 1
            rid = self.next_id
            try:
                socket.send_fds(self.sock, [pickle.dumps(("fork", rid, kwargs))], fds)
            except OSError as exc:
                self.dead = True
                raise ZygoteError(f"shmatari's zygote process is gone ({exc})") from None
            begin = time.monotonic()
            end = begin + timeout
            # when the zygote was first seen stopped, in samples at most 0.5 s
            # apart (a trainer suspended itself, a whole job's SIGSTOP, does
            # not count its own pause as the zygote's), and the last sample
            stopped_since = seen = None
            try:
                while rid not in self.replies:
                    now = time.monotonic()
                    stopped = False
                    if now - begin > 0.2:  # an honest start answers in milliseconds
                        stopped = self._stopped()
                        if not stopped or seen is None or now - seen > 0.5:
                            stopped_since = now if stopped else None
                        seen = now
                    if self.dead or now > end or (
                            stopped_since is not None and now - stopped_since >= STOPPED_SECONDS):
                        code = self.proc.poll()
                        raise ZygoteError(
                            "shmatari's zygote process " + (
                                f"ended (exit code {code}; its stderr may say why)" if self.dead
                                else self._no_answer(min(timeout, now - begin),
                                                     stopped or self._stopped())))
                    self._pump(min(0.1, max(0.0, end - time.monotonic())))
                    if deliver is not None and rid not in self.replies:
                        deliver()
            except BaseException:
                reply = self.replies.pop(rid, None)
                if reply is None:
                    self.abandoned.add(rid)
                else:
                    if reply[0] == "started" and self.owners.get(reply[1]) == rid:
                        del self.owners[reply[1]]  # no handle will ask for its exit
                    self.exits.pop(rid, None)
                    self._drop(*reply)
                raise
            kind, value = self.replies.pop(rid)
            if kind != "started":
                code, text = value
                raise ZygoteError(f"shmatari's zygote could not start a worker: {text}", code)
            return WorkerProcess(self, value, rid)

    def _stopped(self) -> bool:
        """Whether the zygote is stopped (a SIGSTOP, or traced and stopped
        by a debugger), from its ``/proc/<pid>/stat`` state (T or t)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state in (b"T", b"t")

    def _no_answer(self, timeout: float, stopped: bool) -> str:
        """Why the zygote did not answer within ``timeout`` s, for the
        error: ``stopped`` (a SIGSTOP, a debugger: a longer wait cannot
        help, and every later start would wait as long; a helper's API pass,
        2026-12-05), or busy."""
        pid = self.proc.pid
        if stopped:
            return (f"(pid {pid}) is stopped and did not answer within {timeout:.3g} s: resume "
                    f"it (kill -CONT {pid}), or end it (kill -KILL {pid}; the workers it "
                    f"started end with it) and the next make() starts a new one")
        return f"(pid {pid}) did not answer within {timeout:.3g} s"

    def exitcode(self, request: int, timeout: float = 0.0):
        """The exit code of the worker started for ``request``, None while
        it runs (waiting up to ``timeout`` s for it), 255 if the zygote died."""
        with self.lock:
            self._pump(0.0)
            if request not in self.exits and timeout > 0 and not self.dead:
                self._pump(timeout)
            if request in self.exits:
                return self.exits[request]
        if self.dead:
            # The zygote is gone, and with it the exit status: as
            # multiprocessing's forkserver does then, 255, and the kernel decides.
            return 255
        return None

    def close(self) -> None:
        """Ends the zygote (it exits at end of file) and reaps it."""
        import subprocess

        with self.lock:
            self.forget()
            try:
                self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def forget(self) -> None:
        """In a forked child: drop the parent's zygote without a word to it.
        The zygote is not this process's child: its ``Popen`` is marked
        ended, so that dropping it neither waits for it nor warns
        ("ResourceWarning: subprocess ... is still running", under ``-W
        default`` in each child multiprocessing forked after a ``make()``)."""
        try:
            self.sock.close()
        except OSError:
            pass
        if getattr(self, "proc", None) is not None and self.proc.returncode is None:
            self.proc.returncode = 0
        self.dead = True


class WorkerProcess:
    """A worker forked by the zygote, with the part of
    ``multiprocessing.Process``'s interface the supervisor uses."""

    def __init__(self, zygote: _Zygote, pid: int, request: int):
        import weakref

        self._zygote = zygote
        self.pid = pid
        self._request = request
        # Collected: its exit code is dropped from the zygote's table (at
        # the zygote's next read; a later worker with the same pid keeps its own).
        fin = weakref.finalize(self, zygote.released.append, (pid, request))
        fin.atexit = False

    @property
    def exitcode(self):
        """None while it runs; its exit status, or minus the signal that ended it;
        255 when unknown (the zygote died)."""
        return self._zygote.exitcode(self._request)

    def lost_with_zygote(self) -> int | None:
        """The dead zygote's pid if this worker's exit status went with it
        (:attr:`exitcode` then says 255, a made-up status), else None."""
        code = self.exitcode
        z = self._zygote
        with z.lock:
            lost = code is not None and z.dead and self._request not in z.exits
        return z.proc.pid if lost else None

    def is_alive(self) -> bool:
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        import time

        end = None if timeout is None else time.monotonic() + timeout
        while self._zygote.exitcode(self._request) is None:
            left = 0.1 if end is None else end - time.monotonic()
            if left <= 0:
                return
            self._zygote.exitcode(self._request, min(left, 0.1))

    def kill(self) -> None:
        if self.exitcode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


_zygote: _Zygote | None = None
_lock = None
_exit_hooked = False


def get() -> _Zygote:
    """This process's zygote, started on first use (or again if it died)."""
    global _zygote, _lock, _exit_hooked
    import threading

    if _lock is None:
        _lock = threading.Lock()
    with _lock:
        z = _zygote
        if z is None or z.owner != os.getpid() or not z.alive():
            if z is not None and z.owner == os.getpid():
                z.forget()
            if not _exit_hooked:
                import atexit

                atexit.register(_close_at_exit)
                _exit_hooked = True
            _zygote = z = _Zygote()
        return z


def _close_at_exit() -> None:
    """At interpreter exit: the pools this process owns first (their workers
    report their exits through the zygote), then the zygote."""
    z = _zygote
    if z is None or z.owner != os.getpid():
        return
    supervisor = sys.modules.get("shmatari.supervisor")
    if supervisor is not None:
        for res in list(supervisor._LIVE_RESOURCES):  # noqa: SLF001
            if res.owner and res.pid == os.getpid():
                res.shutdown()
    z.close()


def _forget_in_child() -> None:
    global _zygote, _lock
    if _zygote is not None:
        _zygote.forget()
    _zygote = None
    _lock = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


if __name__ == "__main__":
    main()
