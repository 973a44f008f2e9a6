"""The worker process: builds its envs, then serves steps through the segment.

A worker owns a contiguous group of envs. It builds every ``ALEInterface``
itself, after it starts, so nothing emulator-related is inherited from the
parent. It ignores SIGINT (the parent handles Ctrl-C and closes the pool).

How it ends:

- the pool closes (``POOL_CLOSING``): it exits with code 0;
- an exception: it writes the traceback into its error region, marks itself
  FAILED and exits with code 1;
- a fatal signal (SIGSEGV, SIGBUS, SIGABRT, ...): ``faulthandler`` writes the
  Python stack to the pipe the parent gave it, and the signal kills it;
- SIGTERM from anyone but a dying parent: it cleans up, then dies of SIGTERM,
  so the parent reports the signal;
- its owner dies: under ``fork`` and ``spawn`` the owner is its parent, and
  Linux's ``PR_SET_PDEATHSIG`` sends it SIGCONT at once, whose handler, on
  finding its parent gone, ends it as a SIGTERM would. (SIGCONT rather than
  SIGTERM: it also resumes a worker that was stopped, as by a Ctrl-Z of the
  whole job before the trainer was killed, where a SIGTERM would stay
  pending for as long as the worker stays stopped; a SIGCONT while the
  parent lives changes nothing: a stopped job resumed, or the exit of the
  trainer's thread that started the worker, for which Linux sends the
  signal too, though the process lives on.) Under ``zygote``
  its parent is the owner's zygote (:mod:`shmatari._zygote`), which the
  kernel kills with the owner, stopped or not: the worker then gets SIGCONT
  the same way and confirms the owner's death before removing anything.
  Under ``forkserver`` its parent is the fork server, which outlives the owner as
  long as any of its children lives (each holds the owner's end of the
  server's "alive" pipe); there, and on other systems, the worker notices
  within ``poll`` (0.2) seconds, busy or idle, that the owner's pid is gone
  or its parent pid changed (a worker stopped there stays stopped until it
  is resumed). An orphaned worker removes the segment, so a
  killed trainer leaves nothing in ``/dev/shm``; but only the file it maps
  (same device and inode): a new server that took the name meanwhile keeps
  its segment. A trainer killed after creating its segment and before any
  worker maps it (milliseconds: the zygote is started first) leaves the
  file until the next ``make()`` of its user removes it
  (``shm.sweep_stale``: its owner is dead and no process maps it).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback

__all__ = ["worker_main"]


def _set_parent_death_signal(sig: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


class _Terminated(BaseException):
    pass


#: Set by the SIGTERM handler. Python runs a handler wherever the main thread
#: is, and a few places drop what it raises without a word (a C caller that
#: clears the error: seen in an ABC subclass check during an import), so the
#: worker also checks this flag (:func:`_check_terminated`) after building
#: its envs and at every poll of its loop: a SIGTERM is never lost.
_terminating = False


def _on_sigterm(signum, frame):
    """Ends the worker (:class:`_Terminated`), once: a second signal (the
    parent's death signal after a SIGTERM to the whole process tree, as
    ``systemctl stop`` sends) raised again inside the cleanup of the first,
    cut it short and printed a traceback (a review, 2026-12-07); the flag
    stays set for :func:`_check_terminated`."""
    global _terminating
    if _terminating:
        return
    _terminating = True
    raise _Terminated()


def _check_terminated() -> None:
    if _terminating:
        raise _Terminated()


#: The most characters of a failed worker's cause on its text's first line.
CAUSE_CHARS = 400


def failure_text(worker: int, pid: int, exc: BaseException) -> str:
    """What a failed worker writes into its error area (the first
    ``SHMATARI_ERROR_BYTES - 1`` bytes of it, UTF-8): ``"worker W (pid P)
    failed: <cause>"``, the cause cut to :data:`CAUSE_CHARS` with " ...",
    then its traceback (which ends with the cause again), then the
    exception chained to it (``__cause__``, or ``__context__`` unless
    suppressed) with its own chain, so that a huge one is what the area
    cuts. The cause
    comes first because a C client's message holds the first 512 bytes (an
    attacker's pass saw only the traceback's first frames there), and it is
    cut so that a huge one leaves the frames room in the area (a review)."""
    cause = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    if len(cause) > CAUSE_CHARS:
        cause = cause[:CAUSE_CHARS] + " ..."
    # its own traceback before the exceptions chained to it, which Python
    # prints first (a huge chained one pushed the frames out: a review)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, chain=False))
    if exc.__cause__ is not None or (exc.__context__ is not None and
                                     not exc.__suppress_context__):
        chained = exc.__cause__ if exc.__cause__ is not None else exc.__context__
        text += ("\nchained to it (" + ("its cause" if exc.__cause__ is not None else
                                       "raised while handling") + "):\n"
                 + "".join(traceback.format_exception(type(chained), chained,
                                                      chained.__traceback__)))
    return f"worker {worker} (pid {pid}) failed: {cause}\n" + text


def worker_main(shm_name: str, worker: int, config_fields: dict, owner_pid: int,
                spin: tuple[int, int, int], fault_pipe=None, restart: int = 0,
                positions: dict | None = None, parent_is_zygote: bool = False,
                owner_start: int = 0, segment_id: tuple[int, int] | None = None,
                group: tuple[int, int] | None = None) -> None:
    """Entry point of a worker process (the target of ``Process``, or what
    :mod:`shmatari._zygote` runs in a forked child).

    Args:
        shm_name: the pool's segment.
        worker: this worker's index.
        config_fields: the pool's ``EnvConfig`` as a dict.
        owner_pid: the process that owns the pool (with ``owner_start``: how
            the worker tells that it lives).
        spin: (spin_ns, spin_mode, long_spin_ns) for the worker loop
            (:func:`shmatari.spin.spin_policy`).
        fault_pipe: where ``faulthandler`` reports a fatal signal: a writable
            ``multiprocessing`` connection, an fd, or None.
        restart: 0, or how many times this worker has been replaced: its envs
            are then rebuilt from the pool's current seed (``config_fields``'
            seed: the owner's record of the last reseed, not the segment's
            words) and ``restart``
            (:mod:`shmatari.seeding`), and report the restart.
        positions: from ``Segment.recover``: per env of the group, where to
            write its first result and the last command counted as answered.
        parent_is_zygote: the parent is the owner's zygote, which dies with
            the owner: it gets ``PR_SET_PDEATHSIG`` as an owner would.
        owner_start: the owner's start time (``_core.process_start``), from
            the owner itself; 0: unknown (the owner is then judged by its pid).
            The worker judges its owner by these two arguments, never by the
            header's words, which any process that maps the segment can
            rewrite (to keep orphaned workers, and the segment, alive).
        segment_id: (st_dev, st_ino) of the owner's segment
            (:func:`shmatari.shm.identity`). A segment found under
            ``shm_name`` that is another file (the owner died before this
            worker attached, and a new server took the name) is left as it
            is: the worker writes nothing there, removes nothing and exits 0.
            None: not checked.
        group: (env_begin, env_end) of this worker's envs, from the owner's
            own record. The segment's ``env_begin`` / ``env_end`` words,
            which a client reads to know whom to wake, must say the same,
            else the worker fails with a ValueError that names them (a
            replacement worker used to serve whatever envs another process
            wrote there, and left its own unanswered). None: the words,
            read once.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Until its handler is installed, SIGTERM ends the worker quietly (the
    # default action, set here: a trainer that ignores SIGTERM, as under
    # nohup, passes SIG_IGN on through fork and exec, and a
    # SIGTERM would then be lost); from then on everything runs inside the
    # try below.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # The parent blocks SIGINT while it starts workers, so that a Ctrl-C then
    # reaches the parent alone; the mask is inherited through fork and exec
    # (and so is a SIGTERM blocked by the trainer).
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    from . import _core, shm

    initial_ppid = os.getppid()
    # Under fork and spawn the parent is the owner: the kernel tells when it
    # dies. Under zygote the parent dies with the owner (SIGTERM here then).
    # Under forkserver the parent is the fork server, whose death must not
    # end the pool: the owner is watched instead (every 0.2 s).
    parent_is_owner = initial_ppid == owner_pid
    if parent_is_owner or parent_is_zygote:
        # SIGCONT, not SIGTERM: it also wakes a worker that was stopped (a
        # Ctrl-Z of the whole job, then a kill of the trainer), where a
        # SIGTERM would wait, pending, as long as the worker stays stopped.
        # Its handler (below) ends the worker only if the parent is gone.
        _set_parent_death_signal(signal.SIGCONT)

    def parent_alive() -> bool:
        # A dead owner whose parent has not reaped it yet counts as dead, and
        # so does a new process that took the owner's pid.
        if parent_is_owner and os.getppid() != initial_ppid:
            return False
        # The rule of C clients and workers (shmatari_process_alive), on the
        # pid and start time the owner gave this process, not on the
        # header's copy of them: those words are anyone's to rewrite.
        return _core.process_alive(owner_pid, owner_start)

    def owner_gone() -> bool:
        if not parent_alive():
            return True
        if parent_is_zygote and os.getppid() != initial_ppid:
            # The zygote died: it goes when the owner does, whose death may
            # take a moment to show (a process exiting closes its files first).
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                if not parent_alive():
                    return True
                time.sleep(0.01)
        return False

    def on_sigcont(signum, frame):
        # The parent's death (PR_SET_PDEATHSIG: the worker was reparented
        # first), as SIGTERM was. A stopped job resumed, or the exit of the
        # parent's thread that started this worker (Linux sends the signal
        # then too, with the parent process alive), goes on.
        if os.getppid() != initial_ppid:
            _on_sigterm(signum, frame)

    segment = seg = ident = None
    status, exitcode, cores, holder = "failed", 1, [], []
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGCONT, on_sigcont)
    try:
        status = _run(shm_name, worker, config_fields, spin, fault_pipe, restart, positions,
                      parent_alive, cores, holder, segment_id, group)
        exitcode = 0
        if holder:
            segment, seg = holder
            _core.mark_worker(seg, worker, _core.WORKER_EXITED)
    except _Terminated:
        if holder:
            segment, seg = holder
        if owner_gone():
            status = "orphaned"
        elif seg is not None and seg.pool_state() == _core.POOL_CLOSING:
            status = "closed"  # close() ran out of patience: expected
        else:
            status = "terminated"
        exitcode = 0
        if seg is not None:
            _core.mark_worker(seg, worker, _core.WORKER_EXITED)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        text = failure_text(worker, os.getpid(), exc)
        if holder:
            segment, seg = holder
            _core.mark_worker(seg, worker, _core.WORKER_FAILED, error=text)
        else:
            sys.stderr.write(text)
            _report_unattached(fault_pipe, text)
        exitcode = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # cleaning up: nothing more to stop
        signal.signal(signal.SIGCONT, signal.SIG_DFL)
        cores.clear()
        if seg is not None:
            seg.release()
            del seg
        if segment is not None:
            # The file this worker maps: a new server may have taken the name
            # since the owner died, and its segment is not this one's to remove.
            ident = shm.identity(segment)
            segment.close()
        if status == "orphaned":
            shm.unlink_own(shm_name, ident)
    if status == "terminated":
        # Killed by someone else while the pool runs: die of the signal, so
        # that the parent's error names it.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    if exitcode:
        os._exit(exitcode)


def _segment_seed(words) -> int:
    """The pool seed from the segment's ``seed_words`` (read once by the
    caller), checked: below 2**128 (``seeding.check_seed``), since a client
    other than shmatari's own may have written them."""
    from .seeding import check_seed, words_to_seed

    return check_seed(words_to_seed(words), "the segment's seed_words")


#: The most of a traceback a worker that failed before attaching writes to
#: its fault pipe (the end, which names the exception): within PIPE_BUF, so
#: one write that does not block and is not split.
UNATTACHED_TEXT_MAX = 4096


def _report_unattached(fault_pipe, text: str) -> None:
    """A worker that failed before it attached the segment (an import, the
    ROM, the config) has no error area to write to: it writes the end of its
    traceback to the fault pipe, which the parent reads when it reports the
    death (``Supervisor.fault_text``), as it reads faulthandler's. Never
    blocks: a full pipe or a closed one drops the text (stderr has it)."""
    if fault_pipe is None:
        return
    fd = fault_pipe if isinstance(fault_pipe, int) else fault_pipe.fileno()
    data = text.encode("utf-8", "replace")
    if len(data) > UNATTACHED_TEXT_MAX:
        data = b"..." + data[3 - UNATTACHED_TEXT_MAX:]
    try:
        os.set_blocking(fd, False)
        os.write(fd, data)
    except OSError:
        pass


#: The first line worker 0 writes into its fault pipe: its action set, for
#: the owner's private copy (``Supervisor.start``), never a fault's text.
ACTIONS_TAG = b"shmatari-action-set "
#: The line every worker writes into its fault pipe right before it counts
#: itself ready (its first start): the owner's private record that it is,
#: where ``ready_workers`` is any mapping process's to rewrite.
READY_TAG = b"shmatari-ready"


def _run(shm_name, worker, config_fields, spin, fault_pipe, restart, positions,
         parent_alive, cores, holder, segment_id=None, group=None) -> str:
    """The worker's life inside worker_main's try: returns how it ended;
    ``holder`` gets (segment, Segment) once attached, ``cores`` the envs."""
    fault_fd = (None if fault_pipe is None else
                fault_pipe if isinstance(fault_pipe, int) else fault_pipe.fileno())
    if fault_fd is not None:
        import faulthandler

        faulthandler.enable(file=fault_fd, all_threads=False)

    from . import _worker_ale  # noqa: F401  (first: ale_py without Gymnasium)
    from . import _core, atari, shm
    from .config import EnvConfig
    atari.quiet_process()
    config = EnvConfig(**config_fields)

    def reseed(core, index, words):
        atari.reseed_core(core, config.env_index_offset + index, _segment_seed(words))

    try:
        segment = shm.attach(shm_name)
    except FileNotFoundError:
        return "closed"  # the pool was closed before this worker started
    if segment_id is not None and shm.identity(segment) != tuple(segment_id):
        segment.close()  # another pool's, under the name of this one's: not touched
        return "replaced"
    try:
        seg = _core.Segment(segment.buf)
    except BaseException:
        segment.close()
        raise
    holder[:] = [segment, seg]
    _core.mark_worker(seg, worker, _core.WORKER_STARTING, pid=os.getpid())
    if not parent_alive():
        return "orphaned"
    palette = atari.build_palette(config)
    words = seg.worker_group(worker)  # segment words: read once, checked, then used
    begin, end = words if group is None else tuple(group)
    if not 0 <= begin < end <= seg.num_envs:
        raise ValueError(f"worker {worker}'s group is envs [{begin}, {end}) of a pool of "
                         f"{seg.num_envs}: the segment was written by something other "
                         f"than its creator")
    if tuple(words) != (begin, end):
        raise ValueError(f"worker {worker}'s env_begin, env_end words say envs "
                         f"[{words[0]}, {words[1]}), not its group [{begin}, {end}): the "
                         f"segment was written by something other than its creator")
    cores.extend(atari.build_core(config, i, palette, restart=restart)
                 for i in range(begin, end))
    if worker == 0:
        ids = cores[0].action_ids()
        if fault_fd is not None and not restart:
            # The owner's private copy, read once every worker is ready
            # (Supervisor.start), against which it checks the segment's:
            # another process that rewrote the set during start-up changed
            # the trainer's action space (an attacker's pass, 2026-12-06).
            os.write(fault_fd, ACTIONS_TAG + ",".join(map(str, ids)).encode() + b"\n")
        _core.set_num_actions(seg, ids)
    _check_terminated()

    def alive() -> bool:
        _check_terminated()
        return parent_alive()

    _core.mark_worker(seg, worker, _core.WORKER_READY)
    if fault_fd is not None and not restart:
        # Counted in ready_workers, then this line, after which the owner
        # trusts the worker ready (Supervisor._start_lines): ready_workers
        # rewritten to num_workers while the workers built their envs made
        # serve print "ready" with none ready (an attacker's pass, 2026-12-06).
        os.write(fault_fd, READY_TAG + b"\n")
    return _core.worker_loop(seg, worker, cores, reseed, alive, begin,
                             spin_ns=spin[0], spin_mode=spin[1],
                             restarted=restart > 0, positions=positions,
                             long_spin_ns=spin[2])
