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

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
import weakref

import numpy as np

from . import _core, config as _config, seeding, shm
from .errors import WorkerError
from .spin import spin_policy

_log = logging.getLogger("shmatari")
_now = time.monotonic

#: Seconds of sleep between liveness checks while waiting for workers.
POLL = 0.1
#: Seconds a new pool may take to build its envs before make() gives up.
START_TIMEOUT = 120.0
#: Seconds close() waits for workers to exit before terminating them (then
#: 1 s more before SIGKILL, and 1 s for that: close() returns within 5 s).
CLOSE_TIMEOUT = 2.0


class _Resources:
    """What must be released when a pool goes away, held apart from the env
    so that a ``weakref.finalize`` can release it without keeping it alive."""

    def __init__(self, owner: bool):
        self.owner = owner   # the creator: stops the workers and unlinks
        self.pid = os.getpid()  # the process these resources belong to
        self.segment = None  # SharedMemory
        self.seg = None      # _core.Segment
        self.views = []      # NumPy arrays over the segment
        self.processes = []
        self.fault_pipes = []  # per worker: the read end of its faulthandler pipe
        self.client_pid = 0  # set while this process holds the client claim
        _LIVE_RESOURCES.add(self)

    def shutdown(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Releases the pool: within about ``timeout`` + 1 s whatever the
        workers do, and whole even if Ctrl-C arrives meanwhile (the
        KeyboardInterrupt comes once it is done)."""
        if os.getpid() != self.pid:
            # A process forked from the owner (os.fork) that exits: the pool is
            # its parent's, so leave it alone (no CLOSING, no unlink, no join).
            return
        with _deferred_sigint():
            self._shutdown(timeout)

    def forget(self) -> None:
        """In a child forked from this process: drop the parent's pool
        without touching it, and keep the child's exit (multiprocessing's
        atexit terminates every daemon child it knows) away from its workers."""
        from multiprocessing import process

        children = getattr(process, "_children", None)
        for p in self.processes:
            if children is not None:
                children.discard(p)
        self.processes, self.views = [], []
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

    def _shutdown(self, timeout: float) -> None:
        seg, segment = self.seg, self.segment
        if segment is not None and self.owner:
            # The name goes first: if this process dies from here on, nothing
            # is left in /dev/shm (the workers still have their mappings).
            shm.unlink(segment.name)
        if seg is not None:
            try:
                if self.client_pid:
                    seg.release_client(self.client_pid)
                if self.owner:
                    seg.set_pool_state(_core.POOL_CLOSING)
            except ValueError:
                pass
        # Ask, then terminate, then kill, each with one deadline for all
        # workers (a stopped worker only yields to SIGKILL).
        for sig, wait in ((None, timeout - 1.0), (signal.SIGTERM, 0.5), (signal.SIGKILL, 0.5)):
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
        self.processes = []
        for pipe in self.fault_pipes:
            pipe.close()
        self.fault_pipes = []
        self.views = []
        if seg is not None:
            seg.release()
        self.seg = None
        if segment is not None:
            self.segment = None
            shm.close_mapping(segment)  # zero-copy views kept by the caller stay valid


def _worker_alive(p) -> bool:
    """Whether a worker process runs. Under forkserver a worker whose fork
    server died reports exit code 255 (multiprocessing lost the server that
    would tell it the real one) though it may run on: ask the kernel then."""
    code = p.exitcode
    return code is None or (code == 255 and _core.pid_alive(p.pid))


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


@contextlib.contextmanager
def _deferred_sigint():
    """Holds back Ctrl-C while cleaning up: a SIGINT that arrives meanwhile
    is raised (as its handler would) once the block is done. Python runs
    signal handlers in the main thread only; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    except (ValueError, TypeError):  # not the main interpreter, or no signals
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)


_LIVE_RESOURCES: "weakref.WeakSet[_Resources]" = weakref.WeakSet()


def _forget_pools_in_child() -> None:
    for res in list(_LIVE_RESOURCES):
        res.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)


class Supervisor:
    """Starts and watches a pool's workers; the owner's side only.

    Args:
        config: the pool's validated configuration.
        res: the pool's resources; the segment, the Segment and the
            processes are recorded there as they are made, so that a failure
            halfway releases them.
    """

    def __init__(self, config: _config.EnvConfig, res: _Resources):
        self.config = config
        self.res = res
        self.seg = None
        self.groups = config.worker_groups()
        self.worker_pids: list[int] = []

    def start(self, segment_name: str) -> "_core.Segment":
        """Creates the segment, starts the workers, waits until all are
        ready and marks the pool running.

        Returns:
            _core.Segment: the pool's segment.

        Raises:
            FileExistsError: ``segment_name`` is taken.
            SharedMemorySpaceError: ``/dev/shm`` is too small.
            WorkerError: a worker failed, or none were ready within
                ``START_TIMEOUT`` s.
        """
        cfg = self.config
        ring_depth = _core.min_ring_depth(cfg.num_envs, cfg.batch_size)
        header = _core.compute_layout(
            num_envs=cfg.num_envs, num_workers=cfg.num_workers, batch_size=cfg.batch_size,
            ring_depth=ring_depth, stack_num=cfg.stack_num, img_height=cfg.img_height,
            img_width=cfg.img_width, channels=cfg.channels, frame_skip=cfg.frame_skip,
            autoreset_mode=_core.AUTORESET_MODES[cfg.autoreset_mode])
        total = _core.header_words(header)["total_bytes"]
        shm.sweep_stale()
        segment = shm.create(segment_name, total)
        self.res.segment = segment
        segment.buf[:len(header)] = header
        seg = _core.Segment(segment.buf)
        self.res.seg = seg
        self.seg = seg
        seg.clear_slots()
        seg.set_owner(os.getpid())
        seg.set_seed_words(seeding.seed_to_words(cfg.seed))
        for w, group in enumerate(self.groups):
            seg.set_worker_group(w, group.start, group.stop)
        seg.refresh_groups()

        self.ctx = mp.get_context(cfg.start_method)
        if cfg.start_method == "forkserver":
            # shmatari._worker_ale: ale_py without Gymnasium (a worker never imports it)
            self.ctx.set_forkserver_preload(["shmatari.worker", "shmatari._core", "numpy",
                                             "shmatari._worker_ale"])
        policy = spin_policy(cfg.num_workers, _config.available_cores())
        seg.spin_ns, seg.spin_mode = policy["client"]
        self.worker_spin = policy["worker"]
        self.restarts = [0] * cfg.num_workers
        for w in range(cfg.num_workers):
            self.spawn(w)
        deadline = _now() + START_TIMEOUT
        while not seg.wait_ready(cfg.num_workers, POLL):
            self.check()
            if _now() > deadline:
                raise WorkerError(
                    f"workers did not become ready within {START_TIMEOUT:.0f} s",
                    worker=-1, env_ids=range(cfg.num_envs), exitcode=None)
        self.check()
        seg.set_pool_state(_core.POOL_RUNNING)
        return seg

    def spawn(self, w: int, restart: int = 0, positions: dict | None = None) -> None:
        """Starts worker ``w`` (or its replacement) in slot ``w`` of the lists.

        SIGINT is blocked meanwhile: a Ctrl-C then is the parent's alone (the
        worker ignores SIGINT before it unblocks it), and is raised here once
        the process is on record, so that close() stops it. The fork server
        is started first, outside the block, so that other users of it do
        not inherit a blocked SIGINT.
        """
        from .worker import worker_main

        cfg = self.config
        fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
        reader, writer = self.ctx.Pipe(duplex=False)
        os.set_blocking(reader.fileno(), False)
        p = self.ctx.Process(target=worker_main, name=f"shmatari-worker-{w}",
                              args=(self.res.segment.name, w, fields, os.getpid(),
                                    self.worker_spin, writer, restart, positions),
                              daemon=True)
        from .atari import single_threaded_children

        if cfg.start_method == "forkserver":
            from multiprocessing import forkserver

            try:
                with single_threaded_children():
                    forkserver.ensure_running()
            except ChildProcessError as exc:
                raise RuntimeError(
                    "the fork server this process inherited belongs to the process it was "
                    "forked from (os.fork), so it cannot start workers here: make the pool "
                    "with start_method='spawn'") from exc
        masked = hasattr(signal, "pthread_sigmask")
        if masked:
            old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with single_threaded_children():
                p.start()
            if w < len(self.res.processes):
                self.res.fault_pipes[w].close()
                self.res.processes[w], self.res.fault_pipes[w] = p, reader
            else:
                self.res.processes.append(p)
                self.res.fault_pipes.append(reader)
            self.worker_pids = [q.pid for q in self.res.processes]
        finally:
            writer.close()
            if masked:
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    def dead_workers(self) -> list[int]:
        """Workers that failed, exited or whose process has ended. While the
        pool runs, no worker exits on its own: any exit is a death."""
        seg, gone = self.seg, (_core.WORKER_FAILED, _core.WORKER_EXITED)
        return [w for w, p in enumerate(self.res.processes)
                if not _worker_alive(p) or seg.worker_state(w) in gone]

    def reap(self, w: int) -> None:
        """Waits for dead worker ``w``'s process to end (a failed worker
        exits by itself), killing it if it does not within a second."""
        p = self.res.processes[w]
        p.join(1.0)
        if p.exitcode is None:
            p.kill()
            p.join(1.0)

    def fault_text(self, w: int) -> str:
        """What faulthandler wrote for worker ``w`` (a fatal signal), or ""."""
        chunks = []
        try:
            while chunk := os.read(self.res.fault_pipes[w].fileno(), 65536):
                chunks.append(chunk)
        except (BlockingIOError, OSError):
            pass
        return b"".join(chunks).decode("utf-8", "replace")

    def worker_error(self, w: int, during: str = "") -> WorkerError:
        seg, p, group = self.seg, self.res.processes[w], self.groups[w]
        failed = seg.worker_state(w) == _core.WORKER_FAILED
        self.reap(w)
        text = seg.worker_error(w) or self.fault_text(w)
        code = p.exitcode
        if code is None:
            how = "still running"
        elif code < 0:
            try:
                how = f"killed by signal {-code} ({signal.Signals(-code).name})"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
        msg = (f"worker {w} (pid {p.pid}, envs {group.start}..{group.stop - 1}) "
               f"{'failed' if failed else 'died'}{during}: {how}")
        if text:
            msg += "\n--- worker traceback ---\n" + text.rstrip()
        elif code is not None and code > 0:
            if seg.worker_pid(w) == 0 and self.config.start_method != "fork":
                # It died before running any code of ours: most often, the
                # main script was re-run in the new process and started pools.
                msg += (f" before it could start (its stderr may say more). With start "
                        f"method {self.config.start_method!r} each worker imports your "
                        f"main script again: put the code that creates pools under "
                        f"`if __name__ == \"__main__\":`, and run scripts from a file")
            else:
                msg += (" without a Python traceback: it ended in native code (ALE exits "
                        "on some errors; its stderr may say more)")
        return WorkerError(msg, worker=w, env_ids=group, exitcode=code, worker_traceback=text)

    def check(self, restart: bool = False) -> None:
        """Raises WorkerError if a worker is dead, or with ``restart``
        replaces the dead workers (WorkerError if that fails)."""
        dead = self.dead_workers()
        if not dead:
            return
        if not restart:
            raise self.worker_error(dead[0])
        self.restart(dead)

    def restart(self, dead: list[int]) -> None:
        """Replaces dead workers while the client waits in recv().

        The others finish their commands first, so that the ring holds only
        complete rows and rows of the dead (``Segment.recover``); then each
        replacement starts, rebuilds its envs and answers their commands in
        flight, and the wait goes on.
        """
        seg, dead = self.seg, set(dead)
        reasons = {}
        deadline = _now() + START_TIMEOUT
        while True:
            for w in dead - set(reasons):
                reasons[w] = str(self.worker_error(w)).partition("\n")
            busy = seg.in_flight()
            for w in dead:
                busy[self.groups[w].start:self.groups[w].stop] = False
            if not busy.any():
                break
            dead |= set(self.dead_workers())
            if _now() > deadline:
                env = int(np.flatnonzero(busy)[0])
                raise WorkerError(
                    f"while restarting worker(s) {sorted(dead)}: env {env} did not finish "
                    f"its step within {START_TIMEOUT:.0f} s",
                    worker=-1, env_ids=range(self.config.num_envs), exitcode=None)
            time.sleep(0.001)
        plan = seg.recover(sorted(dead))
        ready = seg.counts()[0]
        for w in sorted(dead):
            group = self.groups[w]
            seg.reset_worker(w)
            self.restarts[w] += 1
            self.spawn(w, self.restarts[w], {e: plan[e] for e in group if e in plan})
            head, _, traceback = reasons[w]
            _log.warning("%s; restarted it as pid %d (restart %d of this worker)%s", head,
                         self.res.processes[w].pid, self.restarts[w],
                         "\n" + traceback if traceback else "")
        deadline = _now() + START_TIMEOUT
        while not seg.wait_ready(ready + len(dead), POLL):
            failed = self.dead_workers()
            if failed:
                raise self.worker_error(failed[0], " while restarting")
            if _now() > deadline:
                raise WorkerError(f"restarted workers {sorted(dead)} were not ready within "
                                  f"{START_TIMEOUT:.0f} s", worker=-1,
                                  env_ids=range(self.config.num_envs), exitcode=None)
