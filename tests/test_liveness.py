"""One liveness rule for C and Python: the owner is named by pid and start
time (``owner_start``, ABI 1.2), and the same C function
(``shmatari_process_alive``) judges it for workers and clients."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import shmatari
from shmatari import _core, shm
from conftest import build_sanitized, c_compiler

ROOT = pathlib.Path(__file__).resolve().parents[1]
HDR = _core.MEMBERS["shmatari_header"]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")


def _segment() -> tuple[bytearray, _core.Segment]:
    """A segment in private memory (no processes), owned by this process."""
    header = _core.compute_layout(num_envs=2, num_workers=1, batch_size=2, ring_depth=2,
                                  stack_num=1, img_height=2, img_width=2, channels=1,
                                  frame_skip=1)
    buf = bytearray(_core.header_words(header)["total_bytes"])
    buf[:len(header)] = header
    seg = _core.Segment(buf)
    seg.set_worker_group(0, 0, 2)
    seg.refresh_groups()
    seg.set_owner(os.getpid())
    return buf, seg


def _word(buf, name: str) -> np.ndarray:
    offset, dtype, count = HDR[name]
    return np.ndarray((count,), dtype, buf, offset)


@linux_only
def test_start_time_is_read_as_proc_says():
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        start = int(f.read().rsplit(b")", 1)[1].split()[19])
    assert _core.process_start(os.getpid()) == start > 0
    assert _core.process_alive(os.getpid(), start)
    assert _core.process_alive(os.getpid(), 0)
    assert not _core.process_alive(os.getpid(), start + 1)


@linux_only
def test_the_header_names_its_owner_by_pid_and_start_time():
    buf, seg = _segment()
    h = seg.header()
    assert h["owner_pid"] == os.getpid()
    assert h["owner_start"] == _core.process_start(os.getpid()) > 0
    assert seg.owner_alive()
    assert seg.pool_check() == (_core.OK, "")
    # A process that took over the owner's pid started at another time: the
    # owner is gone, for the worker's rule and for the C client's alike (a
    # client attaching now: the words as it reads them then).
    _word(buf, "owner_start")[0] += 1
    other = _core.Segment(buf)
    assert not other.owner_alive()
    code, msg = other.pool_check()
    assert code == _core.STATUS["server_dead"]
    assert f"the server (pid {os.getpid()}) that owns the pool is gone" in msg
    # The words rewritten after the attach: abi_minor to 1, or owner_start to
    # 0, dropped the start time while they were read at every check, so that
    # a process under a dead owner's reused pid passed for it (an attacker's
    # pass). Each client judges by the words it attached to.
    for word, value in (("abi_minor", 1), ("owner_start", 0)):
        saved = int(_word(buf, word)[0])
        _word(buf, word)[0] = value
        assert not other.owner_alive()
        assert other.pool_check()[0] == _core.STATUS["server_dead"]
        _word(buf, word)[0] = saved
    other.release()
    seg.release()
    # A pool of ABI 1.1 has no owner_start (a reserved word): the pid alone.
    _word(buf, "abi_minor")[0] = 1
    old = _core.Segment(buf)
    assert old.owner_alive()
    old.release()


def test_a_dead_or_zombie_owner_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = _core.process_start(child.pid)
        assert _core.process_alive(child.pid, start)
        buf, seg = _segment()
        seg.set_owner(child.pid)
        assert seg.header()["owner_start"] == start
        assert seg.owner_alive()
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _core.process_start(child.pid) != 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        # Not reaped yet: a zombie, which is dead.
        assert not _core.process_alive(child.pid, start)
        assert not _core.pid_alive(child.pid)
        assert not seg.owner_alive()
        assert seg.pool_check()[0] == _core.STATUS["server_dead"]
        seg.release()
    finally:
        child.kill()
        child.wait()
    assert not _core.process_alive(child.pid, start)


@linux_only
@pytest.mark.usefixtures("no_leaks")
def test_workers_judge_their_owner_by_the_identity_it_gave_them():
    """Workers judge their owner by the pid and start time it passed them
    (``worker_main``'s owner_pid and owner_start: a process that reused the
    pid has another start time), not by the header's copy, which any process
    that maps the segment can write: one written over it neither ends the
    workers nor keeps them alive (an attacker's pass;
    test_trust.py::test_orphaned_workers_end_whatever_the_header_says_of_their_owner).
    Before, a header start time that differed ended the workers."""
    env = shmatari.make("null", num_envs=2, num_workers=2, seed=0)
    try:
        env.reset()
        pids = list(env.worker_pids)
        assert env._seg.header()["owner_start"] == _core.process_start(os.getpid())
        _word(env._res.segment.buf, "owner_start")[0] += 1
        time.sleep(1.0)  # five of the workers' owner checks
        assert all(map(_core.pid_alive, pids))
        assert not _core.process_alive(os.getpid(), _core.process_start(os.getpid()) + 1)
    finally:
        env.close()


@linux_only
@pytest.mark.parametrize("lang", ["c", "c++"])
def test_c_judges_processes_by_the_same_rule(lang, tmp_path):
    """tests/c/liveness.c: the C functions on this process, a zombie and a
    reaped child, and a header whose owner_start names another process; the
    start time it reads is the one Python reads."""
    exe = tmp_path / "liveness"
    build_sanitized([*c_compiler(lang), f"-I{ROOT / 'csrc' / 'include'}",
                     str(ROOT / "tests" / "c" / "liveness.c"), "-o", str(exe)])
    p = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    python_says = _core.process_start(p.pid)
    out, _ = p.communicate("\n", timeout=30)
    assert p.returncode == 0, out
    assert out == f"ok {python_says}\n"


def test_a_failed_workers_forged_env_group_is_not_shown_as_its_envs():
    """An attached client's WorkerError named the failed worker's envs from
    its env_begin / env_end words as the segment held them then: another
    process that wrote them made it say "envs 4000000000..4000000000" (an
    attacker's pass; the C client's message checks them). A group outside
    the pool's own env count is "envs unknown"."""
    from shmatari import client

    buf, seg = _segment()
    _core.mark_worker(seg, 0, _core.WORKER_FAILED, error="boom")
    err, _ = client.status_error(seg, _core.STATUS["worker"])
    assert "envs 0..1" in str(err) and err.env_ids == range(0, 2)
    seg.set_worker_group(0, 4_000_000_000, 4_000_000_001)
    err, _ = client.status_error(seg, _core.STATUS["worker"])
    assert "envs unknown" in str(err) and "4000000000" not in str(err)
    assert err.env_ids == range(0)
