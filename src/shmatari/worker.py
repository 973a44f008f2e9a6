"""The worker process: builds its envs, then serves steps through the segment.

A worker owns a contiguous group of envs. It builds every ``ALEInterface``
itself, after it starts, so nothing emulator-related is inherited from the
parent. It ignores SIGINT (the parent handles Ctrl-C and closes the pool),
exits on SIGTERM, and exits by itself when its parent dies: Linux's
``PR_SET_PDEATHSIG`` sends it SIGTERM, and elsewhere it notices within
``poll`` seconds. A worker that finds itself orphaned removes the segment.
"""

from __future__ import annotations

import os
import signal
import sys
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


def _on_sigterm(signum, frame):
    raise _Terminated()


def worker_main(shm_name: str, worker: int, config_fields: dict, owner_pid: int,
                spin: tuple[int, int]) -> None:
    """Entry point of a worker process (the target of ``Process``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    initial_ppid = os.getppid()
    _set_parent_death_signal(signal.SIGTERM)

    from . import _core, atari, shm
    from .config import EnvConfig

    atari.quiet_process()
    config = EnvConfig(**config_fields)

    def parent_alive() -> bool:
        # A dead owner whose parent has not reaped it yet counts as dead.
        return os.getppid() == initial_ppid and _core.pid_alive(owner_pid)

    def reseed(core, index, words):
        from .seeding import words_to_seed

        atari.reseed_core(core, index, words_to_seed(words))

    try:
        segment = shm.attach(shm_name)
    except FileNotFoundError:
        return  # the pool was closed before this worker started
    seg = _core.Segment(segment.buf)
    status, exitcode, cores = "failed", 1, []
    try:
        _core.mark_worker(seg, worker, _core.WORKER_STARTING, pid=os.getpid())
        if not parent_alive():
            status, exitcode = "orphaned", 0
            return
        palette = atari.build_palette(config)
        begin, end = seg.worker_group(worker)
        cores = [atari.build_core(config, i, palette) for i in range(begin, end)]
        if worker == 0:
            _core.set_num_actions(seg, cores[0].action_ids())
        _core.mark_worker(seg, worker, _core.WORKER_READY)
        status = _core.worker_loop(seg, worker, cores, reseed, parent_alive,
                                   spin_ns=spin[0], spin_mode=spin[1])
        exitcode = 0
        _core.mark_worker(seg, worker, _core.WORKER_EXITED)
    except _Terminated:
        status, exitcode = ("orphaned" if not parent_alive() else "terminated"), 0
        _core.mark_worker(seg, worker, _core.WORKER_EXITED)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        text = (f"worker {worker} (pid {os.getpid()}) failed:\n"
                + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        _core.mark_worker(seg, worker, _core.WORKER_FAILED, error=text)
        exitcode = 1
    finally:
        cores.clear()
        seg.release()
        del seg
        segment.close()
        if status == "orphaned":
            shm.unlink(shm_name)
    if exitcode:
        os._exit(exitcode)
