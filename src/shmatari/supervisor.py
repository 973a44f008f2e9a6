"""The owner's side of a pool: its worker processes and everything it must release.

Owns: creating the segment (after sweeping stale ones), starting the workers
and waiting until they are ready, their liveness (pid, exit code, the
worker state word), the WorkerError text (traceback, signal, exit code),
restarting dead workers (``restart_workers``), and the pool's resource
lifetime: :class:`_Resources` (released by a ``weakref.finalize``, Ctrl-C
deferred while it runs, forgotten in a forked child).

A process that attaches to another's pool has no :class:`Supervisor`; it
still holds a :class:`_Resources` (``owner=False``: it detaches and leaves
the segment and workers alone). Nothing here runs in a worker.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import select
import socket
import signal
import threading
import time
import weakref

import numpy as np

from . import _core, config as _config, seeding, shm
from ._sigint import deferred_sigint as _deferred_sigint
from .errors import PoolClosedError, WorkerError, resource_limit_error
from .spin import spin_policy

_log = logging.getLogger("shmatari")
_now = time.monotonic

#: Seconds of sleep between liveness checks while waiting for workers.
POLL = 0.1
#: Seconds a new pool may take to build its envs before make() gives up, by
#: default: START_TIMEOUT + START_TIMEOUT_PER_ENV x the envs of one worker.
START_TIMEOUT = 120.0
START_TIMEOUT_PER_ENV = 1.0
#: Seconds between progress reports (logger "shmatari", INFO) while workers start.
PROGRESS_EVERY = 5.0
#: restart_workers gives up on a worker that dies again after RESTART_LIMIT
#: restarts within RESTART_WINDOW seconds (its RESTART_LIMIT + 1-th death: a
#: crash loop, a CPU or memory limit that kills every replacement):
#: WorkerError, rather than restarting for good.
RESTART_LIMIT = 5
RESTART_WINDOW = 60.0
#: The least of ``start_timeout`` a restart must have left to start a
#: replacement (seconds): a zygote or fork server answers in milliseconds.
SPAWN_FLOOR = 0.5


def default_start_timeout(config) -> float:
    """make()'s default ``start_timeout``: 120 s plus 1 s per env of the
    largest worker (one ALE ``loadROM`` takes ~0.1 s on an idle core)."""
    per_worker = max(g.stop - g.start for g in config.worker_groups())
    return START_TIMEOUT + START_TIMEOUT_PER_ENV * per_worker
#: Seconds close() waits for workers to exit before terminating them (then
#: 1 s more before SIGKILL, and 1 s for that: close() returns within 5 s).
CLOSE_TIMEOUT = 2.0
#: Seconds close() gives another thread inside a call on the pool to leave
#: (its wait ends within POLL once told; _Resources._other_thread_leaves).
OTHER_THREAD_TIMEOUT = 2.0


#: How many times a shutdown that an exception cut short starts again (each
#: attempt goes on from where the last one was) before it gives up.
_SHUTDOWN_ATTEMPTS = 10


class _Resources:
    """What must be released when a pool goes away, held apart from the env
    so that a ``weakref.finalize`` can release it without keeping it alive."""

    def __init__(self, owner: bool):
        _release_kept()  # a pool closed under a jitted call that has left since
        self.owner = owner   # the creator: stops the workers and unlinks
        self.pid = os.getpid()  # the process these resources belong to
        self.segment = None  # SharedMemory
        self.ident = None    # (st_dev, st_ino) of the segment file it created
        self.seg = None      # _core.Segment
        # NumPy arrays over the segment, by name (the client's ring_obs,
        # render and ram): held here alone, so that dropping them lets the
        # mapping go (the caller's zero-copy observations keep it alive).
        self.views = {}
        self.processes = []
        self.fault_pipes = []  # per worker: the read end of its faulthandler pipe
        self.client_pid = 0  # set while this process holds the client claim
        # Set by xla(): jitted calls on this pool's client may still run
        # (jax dispatches asynchronously) when the pool is released.
        self.xla = False
        # (library, serial) of each xla() on this pool: taken out of the
        # handlers' table as the client is released (shmatari_xla_unregister)
        self.xla_serials = []
        # Set by the Client: its call guard (_core.CallGuard) and the function
        # that ends its waits, for a close() from another thread.
        self.guard = None
        self.stop_calls = None
        # The one shutdown: claimed without blocking (a signal handler's
        # close() in the thread that runs it must not wait for itself), the
        # thread that runs it, and its end: a close() from another thread
        # meanwhile waits for it (wait_shutdown), and so does the exit hook.
        self._claim = threading.Lock()
        self.shutting_down_in = 0
        self.shut_down = threading.Event()
        _LIVE_RESOURCES.add(self)

    def shutdown(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Releases the pool: within about ``timeout`` + 1 s whatever the
        workers do, and whole even if Ctrl-C or another signal handler's
        exception arrives meanwhile (the exception comes once it is done)."""
        if os.getpid() != self.pid:
            # A process forked from the owner (os.fork) that exits: the pool is
            # its parent's, so leave it alone (no CLOSING, no unlink, no join).
            return
        if not self._claim.acquire(blocking=False):
            self.wait_shutdown()  # another's (the exit hook's, a close()'s)
            return
        self.shutting_down_in = threading.get_ident()
        try:
            self._shutdown_whole(timeout)
        finally:
            self.shut_down.set()

    def wait_shutdown(self) -> None:
        """A close() whose pool another thread is closing: returns once that
        shutdown is over, so that close() returning means the workers are
        gone, from any thread. A second close() returned at once while the
        first still waited for a stopped worker (a helper's API pass,
        2026-12-05). It waits while the thread that runs the shutdown lives
        (a daemon thread stopped at exit never ends it); nothing in that
        thread itself (a signal handler's close() inside close()), in a
        forked child, or if none has begun."""
        if self.shut_down.is_set():
            # over (the usual case): no module global needed, since a close()
            # at interpreter exit (Gymnasium's __del__) runs after module
            # teardown set them to None, and os.getpid below raised
            # AttributeError under JAX (a client-code pass, 2026-12-06)
            return
        running = self.shutting_down_in
        if os.getpid() != self.pid or running in (0, threading.get_ident()):
            return
        while not self.shut_down.wait(0.1):
            if not any(t.ident == running and t.is_alive() for t in threading.enumerate()):
                return

    def _shutdown_whole(self, timeout: float) -> None:
        with _deferred_sigint():
            # Another signal handler's exception (a SIGTERM handler calling
            # sys.exit, a SIGALRM timeout) also lands anywhere in here, and
            # close() cannot run again (its finalizer has run): the shutdown
            # goes on from where it is, and the first exception is raised
            # once it is done. It left workers running, or stopped, until the
            # process exited (a helper's API pass, 2026-12-05). Each retry
            # waits less before it kills (_shutdown's attempt): a handler
            # that raised again and again (a SIGALRM every 50 ms) cut every
            # attempt's waits before SIGKILL, and a stopped worker outlived
            # all ten (an attacker's pass, 2026-12-05).
            pending = None
            for attempt in range(_SHUTDOWN_ATTEMPTS):
                try:
                    self._shutdown(timeout, attempt)
                    break
                except BaseException as exc:  # noqa: BLE001 - raised below
                    pending = exc if pending is None else pending
            if pending is not None:
                raise pending

    def _wait_for_jitted_calls(self, seg, attempt: int = 0) -> None:
        """Waits for the jitted xla() calls this thread dispatched and that
        may still run on the client (jax dispatches asynchronously; its
        runtime tokens are per thread), before the client struct is zeroed
        and the segment unmapped under them (a close() right after a jitted
        lax.scan, without block_until_ready, crashed the process with
        SIGFPE).

        They run to their end first, as if the close() had come after them
        (JAX's program order, and EnvPool's: a rollout dispatched, then
        close(), then its results read, read them; until 2026-12-07 the
        pool was marked CLOSING first and the rollout failed with "the pool
        is closing", a JAX user's pass), for as long as the pool makes
        progress: a watcher marks an owner's pool CLOSING once no batch has
        been published for ``OTHER_THREAD_TIMEOUT`` (a stopped worker under
        a call with no timeout), and the calls left fail within
        SHMATARI_POLL_NS, so close() stays bounded. Where no thread can be
        started (Python 3.12's exit handlers refuse one) and in a retry
        (``attempt`` > 0: a signal handler's exception cut the first short),
        the pool is marked CLOSING first, as before. Another thread's calls
        are not this thread's to wait for: the CLOSING that follows fails
        them at their next step (their error is their results'). Only the
        calls' own failures are caught here: a signal handler's exception
        goes on to :meth:`_shutdown_whole`, which raises it once the
        shutdown is done (caught here, it was lost: a review)."""
        import sys

        jax = sys.modules.get("jax")
        if jax is None:
            return
        errors = getattr(jax, "errors", None)
        failed = getattr(errors, "JaxRuntimeError", None) or getattr(
            errors, "XlaRuntimeError", Exception)
        watcher = None
        if self.owner and seg is not None and attempt == 0:
            done = threading.Event()
            watcher = threading.Thread(target=self._close_if_stalled, args=(seg, done),
                                       name="shmatari-close-watch", daemon=True)
            try:
                watcher.start()
            except RuntimeError:  # "can't create new thread at interpreter shutdown"
                watcher = None
        if watcher is not None:
            try:
                jax.effects_barrier()
            except failed:  # the failed call's error is its results'
                _forget_closing_tokens()
            finally:
                done.set()
                watcher.join()
        self._mark_closing(seg)
        try:
            jax.effects_barrier()
        except failed:  # the failed call's error is its results'
            _forget_closing_tokens()

    def _close_if_stalled(self, seg, done: threading.Event) -> None:
        """While ``done`` is not set: marks the pool CLOSING once its
        ``main_seq`` (bumped at every batch a worker publishes) has not moved
        for ``OTHER_THREAD_TIMEOUT`` seconds (:meth:`_wait_for_jitted_calls`)."""
        try:
            seen, since = seg.header()["main_seq"], time.monotonic()
            while not done.wait(0.05):
                now_seq = seg.header()["main_seq"]
                if now_seq != seen:
                    seen, since = now_seq, time.monotonic()
                elif time.monotonic() - since >= OTHER_THREAD_TIMEOUT:
                    self._mark_closing(seg)
                    return
        except ValueError:  # the segment is gone or broken: end the calls
            self._mark_closing(seg)

    def forget(self) -> None:
        """In a child forked from this process: drop the parent's pool
        without touching it, and keep the child's exit (multiprocessing's
        atexit terminates every daemon child it knows) away from its workers."""
        from multiprocessing import process

        children = getattr(process, "_children", None)
        for p in self.processes:
            if children is not None:
                children.discard(p)
        self.processes, self.views = [], {}
        for pipe in self.fault_pipes:
            try:
                pipe.close()
            except OSError:
                pass
        self.fault_pipes = []
        if self.seg is not None:
            self.seg.release()
            self.seg = None
        if self.segment is not None:
            shm.close_mapping(self.segment)
            self.segment = None

    def _other_thread_leaves(self, seg, seconds: float) -> bool:
        """A close() (or the exit finalizer) while another thread is inside a
        call on this pool, waiting for a batch: its wait is ended (the
        client's ``_stop_calls``; an owner also marks the pool CLOSING, which
        ends a wait inside C within ``SHMATARI_POLL_NS``) and the thread is
        given ``seconds`` to leave. Freeing the client and the mapping under
        it crashed the process (SIGFPE or SIGSEGV: a helper's attacker pass,
        10 of 10). Returns whether no other thread is inside now."""
        guard, me = self.guard, threading.get_ident()

        def other_inside() -> bool:
            return guard is not None and guard.held_by not in (0, me)

        # Shut first: no thread comes in again, so that none is inside when
        # this close() releases the client and the mapping (one that was
        # between two calls when it looked crashed the process with SIGFPE
        # on its next call: a helper's pass, 2026-12-05).
        if guard is None or guard.shut():
            return True
        if self.stop_calls is not None:
            self.stop_calls()
        self._mark_closing(seg)
        deadline = time.monotonic() + seconds
        while other_inside() and time.monotonic() < deadline:
            time.sleep(0.002)
        return not other_inside()

    def _mark_closing(self, seg) -> None:
        """An owner's pool: its state CLOSING, which ends every wait on it
        (a jitted call's, a client thread's, a worker's) within
        ``SHMATARI_POLL_NS``. Nothing for an attached pool, or none."""
        if self.owner and seg is not None:
            try:
                seg.set_pool_state(_core.POOL_CLOSING)
            except ValueError:
                pass

    def _shutdown(self, timeout: float, attempt: int = 0) -> None:
        """One attempt at the whole shutdown, from where the last one was
        cut (every step may run again). ``attempt`` 0: the workers are
        asked, then sent SIGTERM, then SIGKILL; 1 (a retry after a signal
        handler's exception): SIGTERM, then SIGKILL, and no wait for another
        thread inside a call; 2 or more: SIGKILL at once."""
        seg, segment = self.seg, self.segment
        _release_kept()
        # Another thread still inside after the bound: its client and mapping
        # are left to it (it releases them as it leaves: CallGuard.defer);
        # the rest is done.
        left = self._other_thread_leaves(seg, 0.0 if attempt else OTHER_THREAD_TIMEOUT)
        if segment is not None and self.owner:
            # The name goes first: if this process dies from here on, nothing
            # is left in /dev/shm (the workers still have their mappings).
            # Only if it still names this pool's file: another server may
            # have taken the name (shmatari serve --name) after removing ours.
            shm.unlink_own(segment.name, self.ident or shm.identity(segment))
        if self.xla and seg is not None:
            self._wait_for_jitted_calls(seg, attempt)
        # Before the client goes: a jitted call another thread dispatched may
        # be inside a handler (an owner's CLOSING ends its wait within
        # SHMATARI_POLL_NS); unregister waits for it to leave. One still
        # inside after the bound keeps the client and the mapping for as
        # long as this process lives (a close() from another thread freed
        # them under it: a reviewer's pass, 2026-12-06).
        wait_ns = int((0.0 if attempt else OTHER_THREAD_TIMEOUT) * 1e9)
        inside = [(lib, serial) for lib, serial in self.xla_serials
                  if not lib.shmatari_xla_unregister(serial, wait_ns)]
        jitted_inside = bool(inside)
        self.xla_serials = []
        if seg is not None:
            try:
                if self.client_pid and left and not jitted_inside:
                    seg.release_client(self.client_pid)
            except ValueError:
                pass
            self._mark_closing(seg)
        # Ask, then terminate, then kill, each with one deadline for all
        # workers (a stopped worker only yields to SIGKILL).
        steps = ((None, timeout - 1.0), (signal.SIGTERM, 0.5),
                 (signal.SIGKILL, 0.5))[min(attempt, 2):]
        for sig, wait in steps:
            alive = [p for p in self.processes if _worker_alive(p)]
            if not alive:
                break
            if sig is not None:
                for p in alive:
                    try:
                        os.kill(p.pid, sig)
                    except ProcessLookupError:
                        pass
            _wait_for_exit(alive, max(0.0, wait))
        _reap(self.processes, 0.5)
        self.processes = []
        for pipe in self.fault_pipes:
            pipe.close()
        self.fault_pipes = []
        self.views = {}
        # Released (or left to the thread inside) before the references go,
        # so that a retry after an exception here releases them again (each
        # release may run twice) rather than finding nothing to release.
        if jitted_inside:
            # released by the next pool made or attached in this process (or
            # close()d) once the handlers have left (_release_kept)
            _KEPT_FOR_JITTED_CALLS.append((inside, seg, segment,
                                           self.client_pid if left else 0))
        elif left:
            _release_mapping(seg, segment, 0)
        elif seg is not None or segment is not None:
            # The thread still inside releases the claim and the mapping as
            # it leaves its call (it raises PoolClosedError there, at its next
            # wait slice): nothing did, ever, and an attached pool's claim
            # kept every other client out while this process lived (an
            # attacker's pass, 2026-12-05).
            client_pid, pid = self.client_pid, self.pid

            def release():
                if os.getpid() == pid:  # not in a child forked inside the call
                    with _deferred_sigint():  # whole, even if Ctrl-C lands
                        _release_mapping(seg, segment, client_pid)

            if not self.guard.defer(release):
                _release_mapping(seg, segment, client_pid)  # it left meanwhile
        self.seg = self.segment = None


#: ([(library, serial)], segment access, mapping, client pid) of pools
#: closed while a jitted xla() call was still inside a handler after the
#: bound (another thread's, or the closing thread's own, where a signal
#: handler ran close() inside the handler's wait): its client and the ring it
#: reads stay valid until :func:`_release_kept` finds the handlers gone.
_KEPT_FOR_JITTED_CALLS: list = []


def _release_kept() -> None:
    """Releases the claim and mapping of each pool in
    :data:`_KEPT_FOR_JITTED_CALLS` whose handlers have all left (an
    attached pool's claim was kept until the process ended, and no client
    could attach again, this process included: a reviewer's pass,
    2026-12-06). Called as a pool is made or attached, and by close()."""
    for entry in list(_KEPT_FOR_JITTED_CALLS):
        serials, seg, segment, client_pid = entry
        if all(lib.shmatari_xla_unregister(serial, 0) for lib, serial in serials):
            _KEPT_FOR_JITTED_CALLS.remove(entry)
            _release_mapping(seg, segment, client_pid)


def _release_mapping(seg, segment, client_pid: int) -> None:
    """Gives back the client claim of ``client_pid`` (0: none to give back),
    then releases the segment's typed access and the mapping. Zero-copy views
    the caller kept stay valid (they hold the mapping)."""
    if seg is not None:
        if client_pid:
            try:
                seg.release_client(client_pid)
            except ValueError:
                pass
        seg.release()
    if segment is not None:
        shm.close_mapping(segment)


#: The starts of the errors a jitted call fails with on a pool that is
#: closing, or closed under it (csrc/xla/shmatari_xla.cc: ``StatusError``
#: with ``SHMATARI_ERR_CLOSED``, ``ClientOf`` once the client is released).
_XLA_CLOSING = ("shmatari xla: the pool is closing", "shmatari xla: the pool is closed")


def _forget_closing_tokens() -> None:
    """Drops from jax's runtime tokens (this thread's) those of the jitted
    calls that failed because this close() marked the pool CLOSING, after
    waiting for every token once.

    jax keeps a failed computation's token, and its own exit handlers
    (``clean_up``, ``wait_for_tokens``) wait on every token again: each
    printed "Exception ignored in atexit callback" with the closing error
    after a Ctrl-C in CleanRL's ``ppo_atari_envpool_xla_jax_scan.py`` (whose
    KeyboardInterrupt arrives in ``jax.device_get`` while its scan still
    runs, so the pool's exit finalizer closes it under the scan). The
    calls' error stays in their results. Other tokens, and other errors,
    are left as they are; so is everything if jax's ``RuntimeTokenSet``
    (private, checked with jax 0.10) is not as expected."""
    try:
        from jax._src import dispatch

        tokens = dispatch.runtime_tokens
        kinds = (tokens.current_tokens, tokens.output_runtime_tokens)
    except (ImportError, AttributeError):
        return
    for kind in kinds:
        if not isinstance(kind, dict):
            continue
        for key, token in list(kind.items()):
            try:
                token.block_until_ready()
            except Exception as exc:  # noqa: BLE001 - only ours is dropped
                if any(text in str(exc) for text in _XLA_CLOSING):
                    kind.pop(key, None)


def _owner_start() -> int:
    """This process's start time (``_core.process_start``), which a worker
    keeps with its owner's pid: how it tells its owner lives (worker_main)."""
    return _core.process_start(os.getpid())


def _check_can_start_children(start_method: str) -> None:
    """multiprocessing cannot start workers from a daemonic process (a
    multiprocessing Pool's worker): say what works instead of its bare
    AssertionError."""
    if mp.current_process().daemon:
        raise RuntimeError(
            f"start_method={start_method!r} cannot start workers inside a daemonic process "
            f"(such as a multiprocessing Pool's worker): multiprocessing forbids it. Use "
            f"start_method='zygote' (the default on Linux), which starts them through "
            f"shmatari's own zygote process")


class _ForkServerWatchdog:
    """Kills multiprocessing's fork server if it has not answered a start
    within ``seconds`` (a ``threading.Timer``; :meth:`cancel` once answered)."""

    def __init__(self, seconds: float):
        self.fired = False
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        from multiprocessing import forkserver

        # read now: the server the start waits on (p.start() restarts one
        # that died before it connected)
        pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
                self.fired = True
            except OSError:
                pass

    def cancel(self) -> None:
        self.timer.cancel()


def _await_fork_server_exit(seconds: float = 5.0) -> None:
    """Waits (at most ``seconds``) until multiprocessing's fork server, which
    has just died or been killed, has exited, without reaping it.

    A killed process closes its socket before it becomes a zombie; until it
    is one, ``forkserver.ensure_running()`` (``waitpid(WNOHANG)`` answering 0)
    takes it for alive, and the next ``make()`` failed with
    ``ConnectionRefusedError`` on its closed socket (seen under load). Once
    it is a zombie, that ``waitpid`` reaps it and a new server is started.
    ``waitid(WNOWAIT)`` leaves the reaping to multiprocessing."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if not pid:
        return
    deadline = time.monotonic() + seconds
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return
        except OSError:  # not our child, or already reaped
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(0.005)


def _worker_alive(p) -> bool:
    """Whether a worker process runs: its exit code not known yet, and the
    kernel's word that the pid runs (not a zombie). Under forkserver a worker
    whose fork server died reports exit code 255 (multiprocessing lost the
    server that would tell it the real one) though it may run on; and a
    zygote that is stopped (SIGSTOP) reports no exit at all, so a worker
    that died under it would otherwise count as alive, and a wait for it
    would never end: the kernel decides both."""
    try:
        code = p.exitcode
    except ValueError:  # closed by _reap (a shutdown that an exception cut short)
        return False
    return (code is None or code == 255) and _core.pid_alive(p.pid)


def _reap(procs, seconds: float) -> None:
    """Collects the workers multiprocessing started (fork, forkserver,
    spawn) that have ended: ``join`` (a fork or spawn worker is a child of
    this process and stays a zombie until waited for) and ``close`` (each
    keeps its sentinel pipe open, and multiprocessing keeps it on its list
    of children until its next ``start()``). Without it, close() left a
    pool's workers as zombies and their pipes open (8 workers: 13 pipe
    descriptors) until the next make(). One deadline for all; a worker
    still running after close()'s SIGKILL (a stopped zygote's) is left to
    multiprocessing."""
    end = _now() + seconds
    for p in procs:
        if not isinstance(p, mp.process.BaseProcess) or _worker_alive(p):
            continue
        try:
            p.join(max(0.0, end - _now()))
            if p.exitcode is not None:
                p.close()
            elif type(getattr(p, "_popen", None)).__module__.endswith("popen_forkserver"):
                # Gone by the kernel's word, but its exit status comes only from
                # the fork server, which is stopped (or gone): multiprocessing's
                # exit handler would join it for ever, and the interpreter never
                # exited (shmatari serve after SIGTERM too: an attacker's pass,
                # 6 of 6). Off multiprocessing's list of children, as forget().
                children = getattr(mp.process, "_children", None)
                if children is not None:
                    children.discard(p)
        except (ValueError, AssertionError):  # closed already; not this process's child
            pass


def _wait_for_exit(procs, seconds: float) -> None:
    end = _now() + seconds
    while True:
        alive = [p for p in procs if _worker_alive(p)]
        if not alive or _now() >= end:
            return
        p = alive[0]
        if p.exitcode is None:
            p.join(min(0.05, max(0.0, end - _now())))
        else:
            time.sleep(0.005)  # known to multiprocessing as gone: poll the kernel


_LIVE_RESOURCES: "weakref.WeakSet[_Resources]" = weakref.WeakSet()


def _forget_pools_in_child() -> None:
    for res in list(_LIVE_RESOURCES):
        res.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)


def _action_set_of(lines: dict, num_workers: int) -> list:
    """Worker 0's action set from every worker's start-up lines (the lines
    before its ready line, ``worker.READY_TAG``: ``{worker: [line, ...]}``),
    the owner's private copy, which the client compares with the
    segment's. Worker 0 writes one line, ``worker.ACTIONS_TAG`` and the
    set; every other worker, none.

    Raises:
        WorkerError: any other lines (a line another process wrote into a
            worker's pipe: until 2026-12-06 the first action-set line was
            taken, and one that did not parse skipped the comparison).
    """
    from .worker import ACTIONS_TAG

    for w in range(num_workers):
        got = lines.get(w, [])
        ok = not got if w else (len(got) == 1 and got[0].startswith(ACTIONS_TAG))
        if ok and w == 0:
            try:
                actions = [int(a) for a in got[0][len(ACTIONS_TAG):].split(b",")]
            except ValueError:
                ok = False
        if not ok:
            raise WorkerError(
                f"worker {w}'s start-up channel held {len(got)} line(s) before its ready "
                f"line ({_core.printable(repr(b''.join(got[:2])[:120]))}), where it writes "
                f"{'its action set alone' if w == 0 else 'none'}: another process wrote "
                f"into it", worker=w, env_ids=range(0), exitcode=None)
    return actions


def _fault_channel() -> tuple[int, int]:
    """(read end, write end) of a worker's fault channel: a connected pair
    of ``AF_UNIX`` stream sockets (close-on-exec), not a pipe. A pipe's end
    can be opened again through ``/proc/<pid>/fd/<n>`` by any process of
    the same user, which wrote a forged action-set line into it before
    worker 0's own, and make() then gave the trainer that set (an attacker's
    pass, 2026-12-06); a socket's cannot (``ENXIO``)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.shutdown(socket.SHUT_WR)  # the owner only reads
    b.shutdown(socket.SHUT_RD)  # the worker only writes
    return a.detach(), b.detach()


class Supervisor:
    """Starts and watches a pool's workers; the owner's side only.

    Args:
        config: the pool's validated configuration.
        res: the pool's resources; the segment, the Segment and the
            processes are recorded there as they are made, so that a failure
            halfway releases them.
    """

    def __init__(self, config: _config.EnvConfig, res: _Resources,
                 start_timeout: float | None = None):
        self.config = config
        self.start_timeout = (default_start_timeout(config) if start_timeout is None
                              else float(start_timeout))
        self.res = res
        self.seg = None
        self.groups = config.worker_groups()
        self.worker_pids: list[int] = []
        #: worker -> the state word dead_workers read when it found it dead
        self._dead_state: dict[int, int] = {}
        #: why the pool cannot go on after a worker's start was cut short, or None
        self.interrupted_start: str | None = None
        #: worker 0's action set from its fault pipe (start), or None
        self.action_set: list | None = None
        #: per worker: its fault pipe's bytes read past its start-up lines
        self._fault_kept: dict[int, bytes] = {}

    def start(self, segment_name: str) -> "_core.Segment":
        """Creates the segment, starts the workers, waits until all are
        ready and marks the pool running.

        Returns:
            _core.Segment: the pool's segment.

        Raises:
            FileExistsError: ``segment_name`` is taken.
            SharedMemorySpaceError: ``/dev/shm`` is too small.
            WorkerError: a worker failed, or not all were ready within
                ``start_timeout`` s.
        """
        cfg = self.config
        ring_depth = _core.min_ring_depth(cfg.num_envs, cfg.batch_size)
        header = _core.compute_layout(
            num_envs=cfg.num_envs, num_workers=cfg.num_workers, batch_size=cfg.batch_size,
            ring_depth=ring_depth, stack_num=cfg.stack_num, img_height=cfg.img_height,
            img_width=cfg.img_width, channels=cfg.channels, frame_skip=cfg.frame_skip,
            autoreset_mode=_core.AUTORESET_MODES[cfg.autoreset_mode],
            obs_layout=_core.OBS_LAYOUTS[cfg.obs_layout],
            batch_order=_core.BATCH_ORDERS[cfg.batch_order],
            **(dict(zip(("screen_height", "screen_width"), cfg.screen_shape))
               if cfg.render_mode == "rgb_array" else {}),
            ram_bytes=_core.RAM_BYTES if cfg.ram_info else 0)
        total = _core.header_words(header)["total_bytes"]
        #: the header as computed here, before anything was written, and
        #: the owner's start time written into it: the server's own record
        #: of the words written once (serve compares the segment's with it)
        self.header = bytes(header)
        self.owner_start = _owner_start()
        if cfg.start_method == "zygote":
            # Started (on a process's first make: up to a second) before the
            # segment exists: from its creation to the first worker mapping
            # it, nobody would remove it if this process were killed, so
            # that window is kept to milliseconds. (A segment left by a kill
            # there is removed by the next make() of this user: sweep_stale.)
            from . import _zygote

            _zygote.get()
        def prepare(buf):  # the whole header, before a named pool's name is published
            buf[:len(header)] = header
            first = _core.Segment(buf)
            try:
                first.clear_slots()
                first.set_owner(os.getpid(), self.owner_start)
                first.set_seed_words(seeding.seed_to_words(cfg.seed))
                for w, group in enumerate(self.groups):
                    first.set_worker_group(w, group.start, group.stop)
                first.refresh_groups()
            finally:
                first.release()

        shm.sweep_stale()
        segment = shm.create(segment_name, total, prepare)
        self.res.segment = segment
        self.res.ident = shm.identity(segment)
        seg = _core.Segment(segment.buf)
        self.res.seg = seg
        self.seg = seg

        self.ctx = None if cfg.start_method == "zygote" else mp.get_context(cfg.start_method)
        if cfg.start_method == "forkserver":
            # shmatari._worker_ale: ale_py without Gymnasium (a worker never imports it)
            self.ctx.set_forkserver_preload(["shmatari._forkserver_init", "shmatari.worker",
                                             "shmatari._core", "numpy", "numpy.random",
                                             "shmatari._worker_ale"])
        policy = spin_policy(cfg.num_workers, _config.available_cores())
        seg.spin_ns, seg.spin_mode = policy["client"]
        self.worker_spin = policy["worker"]
        self.restarts = [0] * cfg.num_workers
        #: the pool seed a replacement worker builds its envs with: the
        #: config's, then each reseed's (the client sets it as it writes the
        #: seed words); the owner's own record, never the segment's words
        self.pool_seed = cfg.seed
        #: per worker, when its last restarts happened (within RESTART_WINDOW)
        self.restart_times = [[] for _ in range(cfg.num_workers)]
        begin = _now()
        for w in range(cfg.num_workers):
            self.spawn(w)
        lines = self._start_lines(begin)
        self.check()
        self.action_set = _action_set_of(lines, cfg.num_workers)
        ready, failed = seg.counts()  # each read once, every worker ready
        if ready != cfg.num_workers or failed != 0:
            word, value = (("ready_workers", ready) if ready != cfg.num_workers
                           else ("failed_workers", failed))
            raise WorkerError(
                f"make({cfg.game!r}, num_envs={cfg.num_envs}): the segment's {word} word "
                f"is {value} with all {cfg.num_workers} workers ready (each said so "
                f"through its own pipe): another process wrote it while the pool "
                f"started", worker=-1, env_ids=range(cfg.num_envs), exitcode=None)
        seg.set_pool_state(_core.POOL_RUNNING)
        return seg

    def _start_lines(self, begin: float) -> dict:
        """Waits until every worker has written its ready line
        (``worker.READY_TAG``, right after it counted itself in
        ``ready_workers``) into its fault pipe, and returns each worker's
        lines before it (worker 0's action set, ``worker.ACTIONS_TAG``).
        ``ready_workers`` is any mapping process's to rewrite: these lines
        are the owner's own record (the word rewritten to ``num_workers``
        while the workers built their envs made ``serve`` print "ready"
        with none ready; rewritten lower, the wait ran into its time limit).

        Raises:
            WorkerError: a worker died or failed, or not all were ready
                within ``start_timeout`` s.
        """
        from .worker import READY_TAG

        cfg, tag = self.config, READY_TAG + b"\n"
        deadline, report = begin + self.start_timeout, begin + PROGRESS_EVERY
        # What each pipe gave so far is kept where fault_text finds it: a
        # worker that dies before its ready line wrote its traceback there
        # (an import that failed), and check() below names it with that text.
        kept = self._fault_kept
        pending = set(range(cfg.num_workers))
        lines: dict[int, list] = {}
        gone: set = set()
        poller = select.poll()
        for w in pending:
            kept[w] = b""
            poller.register(self.res.fault_pipes[w].fileno(), select.POLLIN)
        while True:
            for w in sorted(pending):
                fd, ended = self.res.fault_pipes[w].fileno(), False
                try:
                    while tag not in kept[w] and (chunk := os.read(fd, 4096)):
                        kept[w] += chunk
                    ended = tag not in kept[w]  # read b"": its process closed it
                except (BlockingIOError, InterruptedError):
                    pass
                head, found, rest = kept[w].partition(tag)
                if found:
                    lines[w] = head.split(b"\n")[:-1]
                    kept[w] = rest  # a fault's text after it: fault_text's
                    pending.discard(w)
                    poller.unregister(fd)
                elif ended:  # closed before its ready line: gone; check() names it
                    pending.discard(w)
                    poller.unregister(fd)
                    gone.add(w)
            if not pending and not gone:
                return lines
            self.check()
            now = _now()
            if now > report:
                report = now + PROGRESS_EVERY
                _log.info("make(%r, num_envs=%d): %s after %.0f s (limit %.0f s)", cfg.game,
                          cfg.num_envs, self._progress(), now - begin, self.start_timeout)
            if now > deadline:
                raise WorkerError(self._slow_start_message(now - begin), worker=-1,
                                  env_ids=range(cfg.num_envs), exitcode=None)
            poller.poll(POLL * 1000)

    def _progress(self) -> str:
        states = [self.seg.worker_state(w) for w in range(self.config.num_workers)]
        ready = sum(s == _core.WORKER_READY for s in states)
        started = sum(s == _core.WORKER_STARTING for s in states)
        return (f"{ready} of {len(states)} workers ready, {started} building their envs, "
                f"{len(states) - ready - started} not started yet")

    def _slow_start_message(self, waited: float) -> str:
        cfg = self.config
        per_worker = max(g.stop - g.start for g in self.groups)
        return (f"make({cfg.game!r}, num_envs={cfg.num_envs}): the workers did not become "
                f"ready within start_timeout={self.start_timeout:g} s ({self._progress()}; "
                f"each builds up to {per_worker} envs, about 0.1 s each on an idle core). "
                f"Pass a larger start_timeout to make(), or more num_workers (now "
                f"{cfg.num_workers}) so that each builds fewer envs; a machine busy with other "
                f"work starts them more slowly")

    def spawn(self, w: int, restart: int = 0, positions: dict | None = None,
              timeout: float | None = None) -> None:
        """Starts worker ``w`` (or its replacement) in slot ``w`` of the lists,
        waiting up to ``timeout`` s (None: ``start_timeout``) for the zygote's
        or the fork server's answer.

        A Ctrl-C meanwhile is held back until the worker is on record: a
        blocked mask alone does not do it, since other threads of this
        process (BLAS pools) may take the signal. Under ``zygote`` it is
        raised while the zygote has not answered (``_spawn_from_zygote``).
        """
        with _deferred_sigint() as deliver:
            try:
                self._spawn(w, restart, positions, deliver,
                            timeout=self.start_timeout if timeout is None else timeout)
            except OSError as exc:
                limit = resource_limit_error(exc, f"starting worker {w}")
                if limit is None:
                    raise
                raise limit from exc

    def _spawn(self, w: int, restart: int, positions: dict | None, deliver=None, *,
               timeout: float) -> None:
        """spawn()'s body.

        SIGINT is blocked meanwhile: a Ctrl-C then is the parent's alone (the
        worker ignores SIGINT before it unblocks it), and is raised here once
        the process is on record, so that close() stops it. The fork server
        is started first in a block of its own, and unblocks SIGINT (to
        ignore it) once its first preload runs (``shmatari._forkserver_init``).
        Under ``zygote`` the zygote forks the worker (``_spawn_from_zygote``).
        """
        from .worker import worker_main

        cfg = self.config
        fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
        if restart:
            # the pool's current seed from the owner's record: a replacement
            # read the segment's seed_words, which another process could
            # write before killing a worker (an attacker's pass, 2026-12-06)
            fields["seed"] = getattr(self, "pool_seed", cfg.seed)
        if cfg.start_method == "zygote":
            self._spawn_from_zygote(w, fields, restart, positions, deliver, timeout=timeout)
            return
        _check_can_start_children(cfg.start_method)
        # a socket pair (duplex), not a pipe, whose ends /proc cannot reopen (_fault_channel)
        reader, writer = self.ctx.Pipe(duplex=True)
        os.set_blocking(reader.fileno(), False)
        p = self.ctx.Process(target=worker_main, name=f"shmatari-worker-{w}",
                              args=(self.res.segment.name, w, fields, os.getpid(),
                                    self.worker_spin, writer, restart, positions),
                              kwargs={"owner_start": _owner_start(),
                                      "segment_id": shm.identity(self.res.segment),
                                      "group": (self.groups[w].start, self.groups[w].stop)},
                              daemon=True)
        from .atari import child_environment

        # multiprocessing starts its resource tracker at the first spawn or
        # fork server, and unblocks SIGINT once it has (CPython's
        # resource_tracker.ensure_running): started inside the blocks below,
        # it let a Ctrl-C reach a worker still importing. Started here, it is
        # running before they block SIGINT.
        from multiprocessing import resource_tracker

        with child_environment():
            resource_tracker.ensure_running()
        if cfg.start_method == "forkserver":
            from multiprocessing import forkserver

            masked = hasattr(signal, "pthread_sigmask")
            if masked:  # the server unblocks it in shmatari._forkserver_init
                old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                with child_environment():
                    forkserver.ensure_running()
            except ChildProcessError as exc:
                raise RuntimeError(
                    "the fork server this process inherited belongs to the process it was "
                    "forked from (os.fork), so it cannot start workers here: make the pool "
                    "with start_method='zygote' (the default on Linux) or 'spawn'") from exc
            finally:
                if masked:
                    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        masked = hasattr(signal, "pthread_sigmask")
        if masked:
            old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        watchdog = None
        if cfg.start_method == "forkserver":
            # multiprocessing waits for the fork server's answer with no limit
            # (popen_forkserver reads the new pid from its pipe): a stopped
            # server held make(), a restart and Ctrl-C for as long as it stayed
            # stopped (an attacker's pass). After start_timeout it is killed,
            # and the read ends.
            watchdog = _ForkServerWatchdog(timeout)
        try:
            try:
                with child_environment():
                    p.start()
            except (EOFError, ConnectionError) as exc:
                if cfg.start_method != "forkserver":
                    raise
                # The fork server died before it answered (multiprocessing's
                # bare "EOFError: unexpected EOF": an attacker's pass, 8 of 12).
                reader.close()
                _await_fork_server_exit()
                within = (f"start_timeout={timeout:g} s" if timeout == self.start_timeout else
                          f"the {timeout:.1f} s left of start_timeout={self.start_timeout:g} s")
                why = (f"did not answer within {within} "
                       f"(stopped?), and was killed" if watchdog.fired else
                       f"ended before it answered ({type(exc).__name__}: {exc})")
                raise WorkerError(
                    f"worker {w} could not be started: multiprocessing's fork server "
                    f"{why}; make() the pool again, or use start_method='zygote'", worker=w,
                    env_ids=self.groups[w], exitcode=None) from None
            if cfg.start_method == "forkserver":
                from multiprocessing import forkserver

                # the server that forked it: its exit status goes through it
                p.shmatari_server = getattr(forkserver._forkserver, "_forkserver_pid", None)
            self._install(w, p, reader)
        finally:
            if watchdog is not None:
                watchdog.cancel()
            writer.close()
            if masked:
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    def _install(self, w: int, p, reader) -> None:
        """Records worker w's process and fault pipe (replacing a dead one's)."""
        if w < len(self.res.processes):
            self.res.fault_pipes[w].close()
            self.res.processes[w], self.res.fault_pipes[w] = p, reader
        else:
            self.res.processes.append(p)
            self.res.fault_pipes.append(reader)
        self.worker_pids = [q.pid for q in self.res.processes]

    def _spawn_from_zygote(self, w: int, fields: dict, restart: int,
                           positions: dict | None, deliver=None, *,
                           timeout: float) -> None:
        """spawn() under ``zygote``: the zygote forks the worker
        (:mod:`shmatari._zygote`); its faulthandler pipe goes as an fd.

        A Ctrl-C held back meanwhile is raised while it waits for the
        zygote's answer (``deliver``), not after ``start_timeout``: a zygote
        that does not answer (stopped) held it back that long. The request
        is then given up (``_Zygote.start_worker``); during a restart the
        pool is broken (``interrupted_start``), since the zygote may still
        fork the worker, which nobody would record."""
        from . import _zygote

        kwargs = dict(shm_name=self.res.segment.name, worker=w, config_fields=fields,
                      owner_pid=os.getpid(), owner_start=_owner_start(),
                      segment_id=shm.identity(self.res.segment),
                      group=(self.groups[w].start, self.groups[w].stop),
                      spin=self.worker_spin, restart=restart, positions=positions)
        zygote = _zygote.get()  # started outside the block below: it can take a second
        read_fd, write_fd = _fault_channel()
        os.set_blocking(read_fd, False)
        reader = open(read_fd, "rb", buffering=0)  # noqa: SIM115 - closed with the pool
        # SIGINT is not blocked here (the zygote, which ignores it, forks the
        # worker): blocked, a Ctrl-C sent to this thread, or to the process
        # when no other thread takes it, stayed pending until the zygote
        # answered, and deliver() never saw it.
        try:
            try:
                p = zygote.start_worker(kwargs, [write_fd], timeout, deliver)
            except _zygote.ZygoteError as exc:
                reader.close()
                limit = (None if exc.errno is None else
                         resource_limit_error(OSError(exc.errno, os.strerror(exc.errno)),
                                              f"starting worker {w} (the zygote's fork)",
                                              forked=True))
                if limit is not None:
                    raise limit from None
                left = "" if timeout == self.start_timeout else f", {timeout:.1f} s of it left"
                hint = (f" (start_timeout={self.start_timeout:g} s{left}: pass a larger "
                        f"start_timeout)" if "did not answer" in str(exc)
                        and "is stopped" not in str(exc) else "")
                raise WorkerError(f"worker {w} could not be started: {exc}{hint}", worker=w,
                                  env_ids=self.groups[w], exitcode=None) from None
            except BaseException:  # a Ctrl-C's handler raised while it waited
                reader.close()
                self.interrupted_start = (
                    f"the start of worker {w} was interrupted while the zygote (pid "
                    f"{zygote.proc.pid}) had not answered")
                raise
            self._install(w, p, reader)
        finally:
            os.close(write_fd)

    def dead_workers(self) -> list[int]:
        """Workers that failed, exited or whose process has ended. While the
        pool runs, no worker exits on its own: any exit is a death. Each
        state word is read once, and kept for :meth:`worker_error` (which
        says what this read saw)."""
        seg, gone = self.seg, (_core.WORKER_FAILED, _core.WORKER_EXITED)
        dead = []
        for w, p in enumerate(self.res.processes):
            alive = _worker_alive(p)  # first: a worker writes FAILED, then exits
            state = seg.worker_state(w)
            if not alive or state in gone:
                self._dead_state[w] = state
                dead.append(w)
        return dead

    def reap(self, w: int) -> bool:
        """Waits for dead worker ``w``'s process to end (a failed worker
        exits by itself), killing it if it does not within a second.
        Returns True if it killed it."""
        p = self.res.processes[w]
        # Gone for the kernel (a zombie whose stopped zygote does not reap
        # it): only a short wait for the exit code.
        p.join(1.0 if _core.pid_alive(p.pid) else 0.2)
        if p.exitcode is None and _core.pid_alive(p.pid):
            p.kill()
            p.join(1.0)
            # killed by this SIGKILL, not one that ended on its own meanwhile
            return p.exitcode == -signal.SIGKILL
        return False

    def fault_text(self, w: int) -> str:
        """What faulthandler wrote for worker ``w`` (a fatal signal), or ""
        (the start-up lines, ``worker.ACTIONS_TAG`` and ``worker.READY_TAG``,
        left out)."""
        from .worker import ACTIONS_TAG, READY_TAG

        chunks = [self._fault_kept.pop(w, b"")]  # what _start_lines read past them
        try:
            while chunk := os.read(self.res.fault_pipes[w].fileno(), 65536):
                chunks.append(chunk)
        except (BlockingIOError, OSError):
            pass
        text = b"".join(chunks)
        for tag in (ACTIONS_TAG, READY_TAG):  # died before start() read them
            if text.startswith(tag):
                text = text.partition(b"\n")[2]
        return text.decode("utf-8", "replace")

    def worker_error(self, w: int, during: str = "") -> WorkerError:
        seg, p, group = self.seg, self.res.processes[w], self.groups[w]
        # the state that made the worker dead (dead_workers' read), else read once here
        state = self._dead_state.pop(w, None)
        state = seg.worker_state(w) if state is None else state
        failed = state == _core.WORKER_FAILED
        killed = self.reap(w)
        text = seg.worker_error(w) or _core.printable(self.fault_text(w))
        code = p.exitcode
        zygote = getattr(p, "lost_with_zygote", lambda: None)()  # zygote's workers only
        server = getattr(p, "shmatari_server", None)  # forkserver's workers only
        lost = zygote is not None or (code == 255 and bool(server)
                                      and not _core.pid_alive(server))
        word = {_core.WORKER_FAILED: "FAILED", _core.WORKER_EXITED: "EXITED"}.get(state)
        if killed and word is not None:
            # The pool's own SIGKILL is not a cause: say what the pool saw
            # (an attacker's pass: one write of EXITED into a live worker's
            # record read "died: killed by signal 9 (SIGKILL)").
            how = (f"its state word read {word} while its process ran on, and the process "
                   f"had not ended a second later, so the pool killed it (SIGKILL); a worker "
                   f"writes {word} only as it stops, so it hung while stopping or another "
                   f"process wrote the word")
        elif zygote is not None:  # its exit status went with the zygote: the 255 is made up
            how = (f"exit status unknown: the zygote that started it (pid {zygote}) is "
                   f"gone, killed before or with it")
        elif lost:  # multiprocessing makes up 255 when the fork server is gone
            how = (f"exit status unknown: multiprocessing's fork server that started it "
                   f"(pid {server}) is gone, killed before or with it")
        elif code is None:
            how = ("still running" if _core.pid_alive(p.pid) else
                   "its process has ended, exit status unknown (the process that "
                   "started it has not reported it: stopped?)")
        elif code < 0:
            try:
                how = f"killed by signal {-code} ({signal.Signals(-code).name})"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
            if code == 0 and not self.res.shutting_down_in and \
                    seg.pool_state() == _core.POOL_CLOSING:  # read once
                # A worker ends with status 0 when it reads the pool as
                # CLOSING; its owner, not closing it, did not write that (a
                # write during start-up read "died: exit code 0", naming the
                # worker: an attacker's pass, 2026-12-06).
                how += (": a worker ends so when it reads the pool's state as CLOSING, "
                        "which its owner, not closing the pool, did not write: another "
                        "process wrote pool_state")
        what = f"{'failed' if failed else 'died'}{during}: {how}"
        if not text and code is not None and code > 0 and not lost:
            if seg.worker_pid(w) == 0 and self.config.start_method in ("spawn", "forkserver"):
                # It died before running any code of ours: most often, the
                # main script was re-run in the new process and started pools.
                what += (f" before it could start (its stderr may say more). With start "
                         f"method {self.config.start_method!r} each worker imports your "
                         f"main script again: put the code that creates pools under "
                         f"`if __name__ == \"__main__\":`, and run scripts from a file; or "
                         f"use start_method='zygote' (the default on Linux), which needs neither")
            else:
                what += (" without a Python traceback: it ended in native code (ALE exits "
                         "on some errors; its stderr may say more)")
        return WorkerError.of(f"worker {w}", p.pid, group, what, worker=w, exitcode=code,
                              traceback=text)

    def check(self, restart: bool = False) -> None:
        """Raises WorkerError if a worker is dead, or with ``restart``
        replaces the dead workers (WorkerError if that fails;
        PoolClosedError if the pool is closed meanwhile)."""
        dead = self.dead_workers()
        if not dead:
            return
        if restart:
            self._stop_if_closing(dead)
        if not restart or (not self.res.shutting_down_in and
                           self.seg.pool_state() == _core.POOL_CLOSING):
            # A pool that reads CLOSING while its owner is not closing it:
            # a replacement would read it too and end at once (six restarts
            # in a row, then "gives up"; an attacker's pass, 2026-12-06).
            # The error names the word (worker_error).
            raise self.worker_error(dead[0])
        self.restart(dead)

    def _stop_if_closing(self, dead) -> None:
        """PoolClosedError once the pool is being closed (a close() from
        another thread, the exit hook, a signal handler's close()) while the
        workers ``dead`` are to be replaced. A restart went on under such a
        close(): the workers it stopped read as dead, were replaced (up to
        three new workers while the pool closed), and the call raised a
        WorkerError "died while restarting: exit code 0", or a bare
        IndexError once the close had emptied the process list; that close()
        waited its whole 2 s for the call to leave (a reviewer's pass,
        2026-12-06)."""
        if self.res.shutting_down_in:
            raise PoolClosedError(
                f"the env pool was closed while worker(s) {sorted(dead)} were being "
                f"replaced (restart_workers); nothing more was received")

    def restart(self, dead: list[int]) -> None:
        """Replaces dead workers while the client waits in recv().

        The others finish their commands first, so that the ring holds only
        complete rows and rows of the dead (``Segment.recover``); then each
        replacement starts, rebuilds its envs and answers their commands in
        flight, and the wait goes on. A worker that dies meanwhile (another
        one, killed by the same cause: a dead zygote takes its workers with
        it a second apart) is replaced in turn; a replacement that dies or
        fails before it is ready raises, as does a worker that dies again
        after ``RESTART_LIMIT`` restarts within ``RESTART_WINDOW`` seconds.
        All of it, every round, within one ``start_timeout`` (until
        2026-12-06 the wait for the commands in flight, the zygote's answer
        and the wait for READY each had a ``start_timeout`` of their own, in
        each round: a reviewer's pass). A close() of the pool meanwhile ends
        it with PoolClosedError (``_stop_if_closing``).
        """
        # The count from the pool's own record, not the segment's word: every
        # worker reached READY once, and so did each replacement so far (a
        # restart waits for it). The word rewritten to 2**32 - 1 by another
        # process made the sum below overflow wait_ready's uint32, and step()
        # raised a bare OverflowError (an attacker's pass, 2026-12-06).
        dead, ready = set(dead), len(self.restarts) + sum(self.restarts)
        replacements = set()  # every worker replaced by this call, added by each round
        deadline = _now() + self.start_timeout
        while dead:
            dead, ready = self._restart_round(dead, ready, replacements, deadline)

    def _restart_round(self, dead: set, ready: int, replacements: set,
                       deadline: float) -> tuple[set, int]:
        """One round of :meth:`restart`, after which ``ready`` workers will
        have reached READY (a count that only grows) once every replacement
        so far is (``replacements``, to which this round adds its own): returns
        the workers that died while ``dead``'s replacements started, and the
        count once these are ready too. ``deadline``: the restart's
        (``_now()``'s clock)."""
        seg = self.seg
        self._count_deaths(dead)
        self._check_name(dead)
        reasons = {}
        while True:
            self._stop_if_closing(dead)
            for w in dead - set(reasons):
                reasons[w] = str(self.worker_error(w)).partition("\n")
            busy = seg.in_flight()
            for w in dead:
                busy[self.groups[w].start:self.groups[w].stop] = False
            if not busy.any():
                break
            more = set(self.dead_workers()) - dead
            if more:  # counted too (they escaped RESTART_LIMIT: a reviewer's pass)
                self._count_deaths(more)
                dead |= more
            if _now() > deadline:
                raise self._stuck_error(dead, int(np.flatnonzero(busy)[0]))
            time.sleep(0.001)
        try:
            plan = seg.recover([self.groups[w] for w in sorted(dead)])  # its own record
        except RuntimeError as err:
            # Holes in the ring that no dead env explains: the ring's words
            # (alloc_pos, ...) were rewritten. It escaped as a bare
            # RuntimeError, at every recv(), the dead worker never replaced
            # and the pool not broken (an attacker's pass, 2026-12-06).
            raise WorkerError(
                f"while restarting worker(s) {sorted(dead)}: {err} (another process "
                f"rewrote the ring's words, such as alloc_pos); the pool cannot go on: "
                f"close() it", worker=-1, env_ids=range(self.config.num_envs),
                exitcode=None) from None
        ready += len(dead)
        replacements |= dead  # as it is now: workers found dead above included
        for w in sorted(dead):
            self._stop_if_closing(dead)
            left = deadline - _now()
            if left < SPAWN_FLOOR:
                # Not a start cut short (under forkserver its watchdog killed
                # multiprocessing's shared fork server and blamed it: a review,
                # 2026-12-06): the restart's own time is up.
                raise WorkerError(
                    f"worker(s) {sorted(dead)} could not be replaced within "
                    f"start_timeout={self.start_timeout:g} s: {max(left, 0.0):.1f} s were left "
                    f"when worker {w}'s replacement was to start (the wait for the other "
                    f"workers' commands in flight, and any earlier replacements, took the "
                    f"rest)", worker=-1,
                    env_ids=range(self.config.num_envs), exitcode=None)
            group = self.groups[w]
            seg.reset_worker(w)
            self.restarts[w] += 1
            self.spawn(w, self.restarts[w], {e: plan[e] for e in group}, left)
            head, _, traceback = reasons[w]
            _log.warning("%s; restarted it as pid %d (restart %d of this worker)%s", head,
                         self.res.processes[w].pid, self.restarts[w],
                         "\n" + traceback if traceback else "")
        # Every replacement's own state READY (this round's and earlier
        # rounds') will do too: the count word is any process's to rewrite
        # (to 0, it would never reach ``ready``).
        while not seg.wait_ready(ready, POLL) and \
                not all(seg.worker_state(w) == _core.WORKER_READY for w in replacements):
            self._stop_if_closing(dead)
            failed = self.dead_workers()
            replaced = [w for w in failed if w in dead]
            if replaced:
                raise self.worker_error(replaced[0], " while restarting")
            if failed:  # others died meanwhile: replaced next, once these are ready
                return set(failed), ready
            if _now() > deadline:
                raise WorkerError(f"restarted workers {sorted(dead)} were not ready within "
                                  f"start_timeout={self.start_timeout:g} s ({self._progress()})",
                                  worker=-1, env_ids=range(self.config.num_envs),
                                  exitcode=None)
        return set(self.dead_workers()), ready

    def _count_deaths(self, dead: set) -> None:
        """Records a death of each worker in ``dead``; WorkerError (the
        restarts give up) for one that died ``RESTART_LIMIT`` times already
        within ``RESTART_WINDOW`` seconds."""
        now = _now()
        for w in sorted(dead):
            recent = [t for t in self.restart_times[w] if now - t < RESTART_WINDOW]
            if len(recent) >= RESTART_LIMIT:
                err = self.worker_error(w)
                raise WorkerError(
                    f"{str(err).partition(chr(10))[0]}; restart_workers gives up: worker "
                    f"{w} died {len(recent) + 1} times within {RESTART_WINDOW:.0f} s "
                    f"(restarted {self.restarts[w]} times in all)",
                    worker=w, env_ids=self.groups[w], exitcode=err.exitcode,
                    worker_traceback=err.worker_traceback)
            self.restart_times[w] = recent + [now]

    def _check_name(self, dead: set) -> None:
        """WorkerError if the segment's name no longer names this pool's file:
        a replacement attaches by the name, and found none (or another
        pool's), and exited 0 with no word, reported as "died while
        restarting: exit code 0" (a reviewer's pass, 2026-12-06). The running
        workers and the client hold the file open, so the pool ran on until
        a worker had to be replaced."""
        segment, ident = self.res.segment, self.res.ident
        if segment is None or ident is None or not os.path.isdir(shm.SHM_DIR):
            return
        if shm.named_identity(segment.name) != ident:
            w = min(dead)
            head = str(self.worker_error(w)).partition("\n")[0]
            raise WorkerError(
                f"{head}; restart_workers cannot replace it: the segment's file "
                f"{os.path.join(shm.SHM_DIR, segment.name)} was removed or replaced while "
                f"the pool ran (systemd-logind's RemoveIPC=yes at the user's logout, a "
                f"cleanup of {shm.SHM_DIR}), and a replacement attaches by that name; the "
                f"pool cannot go on: close() it and make a new one",
                worker=w, env_ids=self.groups[w], exitcode=self.res.processes[w].exitcode)

    def _stuck_error(self, dead: set, env: int) -> WorkerError:
        """The restart's error when env ``env``, of a worker still alive, has
        not finished its command by the deadline: the ring cannot be
        recovered under it. It names that worker, its pid and its state
        (``Segment.unanswered``: stopped, or busy), not only the env (a
        reviewer's pass, 2026-12-06)."""
        w = next(i for i, g in enumerate(self.groups) if g.start <= env < g.stop)
        try:
            who = self.seg.unanswered(w)
        except ValueError:  # no client open on this segment
            who = f"worker {w} has not answered env {env}"
        return WorkerError(
            f"while restarting worker(s) {sorted(dead)}: {who}, within "
            f"start_timeout={self.start_timeout:g} s; the others' commands in flight must "
            f"finish before the dead workers' envs are rebuilt",
            worker=-1, env_ids=range(self.config.num_envs), exitcode=None)
