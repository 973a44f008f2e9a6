"""Dead workers, dying parents, Ctrl-C, a full /dev/shm: never a hang, never a leak.

Each scenario runs in a fresh Python process with a timeout (a hang fails the
test instead of stalling the suite), prints one ``RESULT {json}`` line, and
the test checks the outcome, that every recorded process is gone and that the
segment has left /dev/shm.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import SHM_DIR, pid_alive, wait_until

from shmatari import _core, shm

HEAD = '''
import hashlib, json, os, signal, sys, time
import numpy as np
import shmatari
from shmatari import _core, shm


def emit(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def wait_dead(pid, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    return
        except (FileNotFoundError, ProcessLookupError):  # reaped between open and read
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} still alive")


def error_fields(err):
    return dict(type=type(err).__name__, runtime=isinstance(err, RuntimeError),
                message=str(err), worker=getattr(err, "worker", None),
                env_ids=list(getattr(err, "env_ids", [])),
                exitcode=getattr(err, "exitcode", None),
                traceback=getattr(err, "worker_traceback", ""))
'''


def run_script(tmp_path, body: str, *args, timeout: float = 120, env=None):
    """Runs HEAD + body as a script; returns (process, parsed RESULT or None)."""
    path = tmp_path / "scenario.py"
    path.write_text(HEAD + textwrap.dedent(body))
    proc = subprocess.run([sys.executable, str(path), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)
    return proc, _result(proc.stdout)


def _result(stdout: str):
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT "):]) if lines else None


def run_plain_script(tmp_path, name: str, text: str, *args, timeout: float = 120):
    """Runs ``text`` (a whole script, no HEAD) as ``name`` in a fresh process;
    returns (parsed RESULT or None, the process's pid: its segments' names
    start ``shmatari_{pid}_``, the process's stdout and stderr)."""
    path = tmp_path / name
    path.write_text(text)
    proc = subprocess.Popen([sys.executable, str(path), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    return _result(out), proc.pid, out + err


def assert_gone(pids, segment):
    """No process of ``pids`` is left (zombies count as gone: their parent
    died) and the segment has left /dev/shm."""
    alive = [p for p in pids if pid_alive(p)]
    assert not alive, f"processes left: {alive}"
    assert not os.path.exists(os.path.join(SHM_DIR, segment)), f"segment left: {segment}"


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (from /proc's parent pids)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return {p for p in out if pid_alive(p)}


# -- 1. a worker dies ------------------------------------------------------------

WORKER_DIES = '''
if __name__ == "__main__":
    sig, batch_size = getattr(signal, sys.argv[1]), int(sys.argv[2])
    num_envs = 6
    env = shmatari.make("Breakout", num_envs=num_envs, num_workers=3, seed=0,
                        batch_size=batch_size)
    out = dict(pids=list(env.worker_pids), segment=env.segment_name)
    env.async_reset()
    for _ in range(5):
        _, _, _, _, info = env.recv()
        env.send(np.zeros(batch_size, np.int64), info["env_id"])
    os.kill(env.worker_pids[1], sig)
    t0 = time.monotonic()
    try:
        # Async pools: the other workers' envs go on filling batches, so the
        # dead worker must be noticed even though no wait times out.
        for _ in range(100_000):
            _, _, _, _, info = env.recv()
            env.send(np.zeros(batch_size, np.int64), info["env_id"])
    except shmatari.WorkerError as err:
        out.update(error_fields(err), elapsed=time.monotonic() - t0)
    try:
        env.step(np.zeros(num_envs, np.int64))
    except Exception as err:
        out["after"] = type(err).__name__
    t0 = time.monotonic()
    env.close()
    out["close_s"] = time.monotonic() - t0
    emit(**out)
'''


@pytest.mark.parametrize("sig,batch_size,expect", [
    ("SIGKILL", 6, "killed by signal 9 (SIGKILL)"),
    ("SIGKILL", 2, "killed by signal 9 (SIGKILL)"),
    ("SIGTERM", 6, "killed by signal 15 (SIGTERM)"),
    ("SIGSEGV", 2, "killed by signal 11 (SIGSEGV)"),
])
def test_dead_worker_raises_worker_error_within_5s(tmp_path, sig, batch_size, expect):
    proc, out = run_script(tmp_path, WORKER_DIES, sig, batch_size)
    assert out is not None, proc.stderr
    assert out["type"] == "WorkerError" and out["runtime"]
    assert out["elapsed"] < 5.0
    assert out["message"].startswith(f"worker 1 (pid {out['pids'][1]}, envs 2..3) died: {expect}")
    assert out["worker"] == 1 and out["env_ids"] == [2, 3]
    assert out["exitcode"] == -getattr(signal, sig)
    if sig == "SIGSEGV":
        # faulthandler's report of where the worker was
        assert "Segmentation fault" in out["traceback"] and "File " in out["traceback"]
        assert "--- worker traceback ---" in out["message"]
    assert out["after"] == "PoolClosedError"
    assert out["close_s"] < 5.0
    assert_gone(out["pids"], out["segment"])


ALE_EXITS = '''
if __name__ == "__main__":
    os.environ["ALE_ROMS_DIR"] = sys.argv[1]  # workers inherit it
    env = shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0,
                        restart_workers=sys.argv[2] == "restart")
    out = dict(pids=list(env.worker_pids), segment=env.segment_name)
    env.reset()
    rom = os.path.join(sys.argv[1], "breakout.bin")
    with open(rom, "wb") as f:
        f.write(b"x" * 100)  # not a cartridge: ALE gives up inside loadROM
    t0 = time.monotonic()
    try:
        if sys.argv[2] == "restart":
            os.kill(env.worker_pids[0], signal.SIGKILL)  # its replacement cannot load the ROM
            env.step([0, 0])
        else:
            env.reset(seed=1)  # re-seeding reloads the ROM
    except shmatari.WorkerError as err:
        out.update(error_fields(err), elapsed=time.monotonic() - t0)
    out["pids"] += env.worker_pids
    env.close()
    emit(**out)
'''


@pytest.mark.parametrize("mode", ["plain", "restart"])
def test_worker_dying_inside_ale_raises_worker_error(tmp_path, mode):
    """ALE exits the process on a bad cartridge; with restart_workers, the
    replacement fails to start (the ROM's checksum) and that raises too."""
    from ale_py import roms

    rom_dir = tmp_path / "roms"
    rom_dir.mkdir()
    shutil.copy(roms.get_rom_path("breakout"), rom_dir)
    proc, out = run_script(tmp_path, ALE_EXITS, rom_dir, mode)
    assert out is not None, proc.stderr
    assert out["type"] == "WorkerError" and out["elapsed"] < 5.0
    if mode == "plain":
        assert out["message"].startswith("worker 0 (pid ") and "died: exit code 1" in out["message"]
        assert "native code" in out["message"]
    else:
        assert "failed while restarting: exit code 1" in out["message"]
        assert "does not match" in out["traceback"]  # ale-py's checksum error, in the worker
    assert_gone(out["pids"], out["segment"])


HOSTILE_CLIENT = '''
if __name__ == "__main__":
    restart = sys.argv[1] == "restart"
    env = shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0, restart_workers=restart)
    out = dict(pids=list(env.worker_pids), segment=env.segment_name)
    env.reset()
    # Another process writes the segment without checking (a buggy C client):
    # env 1's command words (layout.h's shmatari_env_ctrl), action 1000; the
    # worker sees the new req_seq when it next wakes (its poll).
    other = shm.attach(env.segment_name)
    seg = _core.Segment(other.buf)
    ctrl = _core.struct_layout()["shmatari_env_ctrl"]
    words = np.ndarray(ctrl["sizeof"] // 4, np.uint32, other.buf,
                       seg.header()["env_ctrl_offset"] + 1 * ctrl["sizeof"])
    words[ctrl["cmd"] // 4], words[ctrl["action"] // 4] = _core.CMD_STEP, 1000
    words[ctrl["req_seq"] // 4] += 1
    del words
    while seg.worker_state(0) != _core.WORKER_FAILED:
        time.sleep(0.01)
    seg.release()
    other.close()
    t0 = time.monotonic()
    try:
        _, _, _, truncated, info = env.step([0, 0])
        out.update(truncated=truncated.tolist(), restarted=info["worker_restarted"].tolist())
        for _ in range(5):
            env.step([1, 1])
    except shmatari.WorkerError as err:
        out.update(error_fields(err), elapsed=time.monotonic() - t0)
    out["pids"] += env.worker_pids
    env.close()
    emit(**out)
'''


def test_worker_exception_carries_its_traceback(tmp_path):
    proc, out = run_script(tmp_path, HOSTILE_CLIENT, "plain")
    assert out is not None, proc.stderr
    assert out["type"] == "WorkerError" and out["elapsed"] < 5.0
    assert out["message"].startswith("worker 0 (pid ") and "failed: exit code 1" in out["message"]
    tb = out["traceback"]
    assert "Traceback (most recent call last)" in tb and "worker_loop" in tb
    assert "ValueError: env 1 was sent action 1000; its action space is 0..3" in tb
    # every line of it in the message, quoted: none passes for a line of ours
    assert "\n".join("| " + line for line in tb.strip().splitlines()) in out["message"]
    assert_gone(out["pids"], out["segment"])


UNATTACHED = """
import json, sys
import shmatari
sys.modules["ale_py"] = None  # the workers' import of ale_py fails, as in a broken install
out = {}
try:
    shmatari.make("null", num_envs=2, num_workers=2, start_method="fork")
except shmatari.WorkerError as exc:
    out = {"message": str(exc), "traceback": exc.worker_traceback}
print("RESULT " + json.dumps(out))
"""


def test_a_worker_failing_before_it_attaches_reports_its_traceback(tmp_path):
    """A worker whose exception comes before it has the segment (an import,
    the ROM) has no error area to write to: its death was reported as
    "without a Python traceback: it ended in native code", with the real
    traceback on stderr only. It now comes through the fault pipe."""
    out, pid, output = run_plain_script(tmp_path, "unattached.py", UNATTACHED)
    assert out is not None and "message" in out, output
    assert "native code" not in out["message"], out["message"]
    assert "died: exit code 1" in out["message"]
    assert "ModuleNotFoundError: import of ale_py halted" in out["traceback"], out
    assert "| ModuleNotFoundError: import of ale_py halted" in out["message"]
    assert not [n for n in os.listdir(SHM_DIR) if n.startswith(f"shmatari_{pid}_")]


def test_restart_after_a_worker_exception_goes_on(tmp_path):
    """The replacement answers the command that killed its predecessor with
    the restart's result (the action is not run again), so a bad command
    cannot make a worker die over and over."""
    proc, out = run_script(tmp_path, HOSTILE_CLIENT, "restart")
    assert out is not None, proc.stderr
    assert "type" not in out, out.get("message")
    assert out["truncated"] == [True, True] and out["restarted"] == [True, True]
    assert "ValueError: env 1 was sent action 1000" in proc.stderr  # the logged warning
    assert_gone(out["pids"], out["segment"])


# -- 2. restart_workers ----------------------------------------------------------

RESTART_SYNC = '''
def rows(result):
    obs, reward, terminated, truncated, info = result
    return dict(truncated=truncated.tolist(), terminated=terminated.tolist(),
                restarted=info["worker_restarted"].tolist(), reset=info["reset"].tolist(),
                reward=reward.tolist(), obs_set=[bool(o.any()) for o in obs],
                final=info.get("_final_obs", np.zeros(4, bool)).tolist(),
                episode="episode" in info)


def digest(env, steps, env_index):
    h = hashlib.sha256()
    for k in range(steps):
        obs, *_ = env.step(np.full(4, k % 4))
        h.update(obs[env_index].tobytes())
    return h.hexdigest()


def run(mode):
    env = shmatari.make("Breakout", num_envs=4, num_workers=2, seed=7, restart_workers=True,
                        autoreset_mode=mode)
    out = dict(pids=list(env.worker_pids), segment=env.segment_name)
    env.reset()
    out["before"] = digest(env, 10, 2)  # env 2's first steps
    # Killed while idle: the replacement reports it at the next step.
    os.kill(env.worker_pids[1], signal.SIGKILL)
    wait_dead(out["pids"][1])
    out["restart_row"] = rows(env.step(np.ones(4, np.int64)))
    out["next_row"] = rows(env.step(np.ones(4, np.int64)))
    if mode == "next_step":
        out["after"] = digest(env, 10, 2)  # env 2 rebuilt, same actions as "before"
    # Killed with a step in flight: the batch still fills. Stopped first (and
    # seen stopped), so that it cannot answer the step before the kill lands.
    victim = env.worker_pids[0]
    os.kill(victim, signal.SIGSTOP)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with open(f"/proc/{victim}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                break
        time.sleep(0.001)
    env.send(np.ones(4, np.int64))
    os.kill(victim, signal.SIGKILL)
    out["in_flight_row"] = rows(env.recv())
    for _ in range(20):
        env.step(np.zeros(4, np.int64))
    out["new_pids"] = list(env.worker_pids)
    env.close()
    return out


if __name__ == "__main__":
    mode = sys.argv[1]
    first = run(mode)
    if mode == "next_step":
        first["again"] = run(mode)["after"]
    emit(**first)
'''


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_restart_workers_rebuilds_envs_and_the_pool_goes_on(tmp_path, mode):
    proc, out = run_script(tmp_path, RESTART_SYNC, mode)
    assert out is not None, proc.stderr
    assert "restarted it as pid" in proc.stderr  # the warning, on the "shmatari" logger
    killed, other = [False, False, True, True], [True, True, False, False]
    row = out["restart_row"]
    assert row["restarted"] == killed and row["truncated"] == killed
    assert row["terminated"] == [False] * 4 and row["reward"] == [0.0] * 4
    assert all(row["obs_set"]) and not row["episode"]
    nxt = out["next_row"]
    assert nxt["restarted"] == [False] * 4 and nxt["truncated"] == [False] * 4
    if mode == "next_step":
        # as after any truncation: the next step resets the env
        assert nxt["reset"] == killed
        # rebuilt from (seed, env, restart 1): new games, reproducibly
        assert out["after"] != out["before"] and out["after"] == out["again"]
    else:
        # same-step: the restart row is already the reset, with a final record
        assert row["final"] == killed and row["reset"] == killed
        assert nxt["reset"] == [False] * 4
    assert out["in_flight_row"]["restarted"] == other
    assert out["in_flight_row"]["truncated"] == other
    new = out["new_pids"]
    assert new[0] != out["pids"][0] and new[1] != out["pids"][1]
    assert_gone(out["pids"] + new, out["segment"])


RESTART_ASYNC = '''
if __name__ == "__main__":
    env = shmatari.make("Breakout", num_envs=6, num_workers=3, batch_size=2, seed=0,
                        restart_workers=True)
    out = dict(pids=list(env.worker_pids), segment=env.segment_name)
    flagged = {e: [] for e in range(6)}
    counts = [0] * 6
    ended = [False] * 6  # the env's last result ended its game
    env.async_reset()
    for k in range(400):
        obs, reward, terminated, truncated, info = env.recv()
        ids = info["env_id"]
        assert len(set(ids.tolist())) == 2 and obs.any(axis=(1, 2, 3)).all()
        for i, e in enumerate(ids.tolist()):
            counts[e] += 1
            if info["worker_restarted"][i]:
                # A restart answers a STEP in flight with a truncation; but an
                # env whose worker died before answering the async_reset (a
                # worker starved of CPU under xdist load: its second env's
                # first reset took past round 50) gets that reset's result,
                # flagged and not truncated (make()'s restart_workers, _serve
                # in _core_worker.pxi): its first result.
                assert truncated[i] or (info["reset"][i] and counts[e] == 1), dict(
                    k=k, env=e, terminated=bool(terminated[i]), reset=bool(info["reset"][i]),
                    ended=ended[e], counts=counts, pids=list(env.worker_pids),
                    flagged=flagged)
                flagged[e].append(k)
            ended[e] = bool(terminated[i] or truncated[i])
        env.send(np.ones(2, np.int64), ids)
        if k == 50:
            os.kill(env.worker_pids[1], signal.SIGKILL)
        if k == 200:  # two at once
            os.kill(env.worker_pids[0], signal.SIGKILL)
            os.kill(env.worker_pids[2], signal.SIGKILL)
    out.update(flagged=flagged, counts=counts, new_pids=list(env.worker_pids))
    env.close()
    emit(**out)
'''


def test_restart_workers_in_an_async_pool(tmp_path):
    proc, out = run_script(tmp_path, RESTART_ASYNC)
    assert out is not None, proc.stderr
    flagged = {int(e): ks for e, ks in out["flagged"].items()}
    # each env of a killed worker reports the restart once, after its kill
    assert all(len(ks) == 1 for ks in flagged.values()), flagged
    assert all(50 < flagged[e][0] for e in (2, 3))
    assert all(200 < flagged[e][0] for e in (0, 1, 4, 5))
    # and every env goes on being stepped
    assert min(out["counts"]) > 20, out["counts"]
    assert_gone(out["pids"] + out["new_pids"], out["segment"])


RESTART_RESET_IN_FLIGHT = '''
if __name__ == "__main__":
    env = shmatari.make("Breakout", num_envs=6, num_workers=3, batch_size=2, seed=0,
                        restart_workers=True)
    out = dict(pids=list(env.worker_pids), segment=env.segment_name)
    os.kill(env.worker_pids[1], signal.SIGSTOP)  # envs 2 and 3 will not answer the reset
    env.async_reset()
    rows = {e: [] for e in range(6)}
    k, end = 0, time.monotonic() + 60
    # until envs 2 and 3 have stepped on after their replacement's first
    # answer (the restart takes what it takes under load: 130 rounds of the
    # other envs were too few under the whole suite)
    while k <= 20 or min(len(rows[2]), len(rows[3])) <= 5:
        assert time.monotonic() < end, rows
        k += 1
        obs, reward, terminated, truncated, info = env.recv()
        for i, e in enumerate(info["env_id"].tolist()):
            rows[e].append([k, bool(info["reset"][i]), bool(info["worker_restarted"][i]),
                            bool(terminated[i]), bool(truncated[i])])
        env.send(np.ones(2, np.int64), info["env_id"])
        if k == 20:
            os.kill(env.worker_pids[1], signal.SIGKILL)  # resets still in flight
    out.update(rows=rows, new_pids=list(env.worker_pids))
    env.close()
    emit(**out)
'''


def test_a_restart_answers_a_reset_in_flight_with_a_flagged_reset(tmp_path):
    """restart_workers: a worker that dies before answering its envs' reset
    (stopped here; starved of CPU under load in test_restart_workers_in_an_
    async_pool) is replaced, and each env's first result is that reset's,
    flagged worker_restarted and not truncated; then the envs step on."""
    proc, out = run_script(tmp_path, RESTART_RESET_IN_FLIGHT)
    assert out is not None, proc.stderr
    for e in (2, 3):
        rows = out["rows"][str(e)]
        assert len(rows) > 5, rows
        k, reset, restarted, terminated, truncated = rows[0]
        assert k > 20 and reset and restarted and not terminated and not truncated, rows[0]
        assert not any(r[2] for r in rows[1:]), rows
    for e in (0, 1, 4, 5):
        assert not any(r[2] for r in out["rows"][str(e)])
    assert_gone(out["pids"] + out["new_pids"], out["segment"])


def test_a_worker_that_dies_while_another_is_replaced_is_replaced_too():
    """restart_workers: worker 1 killed while worker 0's replacement builds
    its envs (a dead zygote takes its workers a second apart; an OOM killer
    picks two): both are replaced and the pool goes on. It raised 'worker 1
    died while restarting' (an attacker's pass)."""
    import logging

    import numpy as np

    import shmatari

    class KillOnRestart(logging.Handler):
        def __init__(self, pid):
            super().__init__()
            self.pid, self.killed = pid, False

        def emit(self, record):
            if "restarted it as pid" in record.getMessage() and not self.killed:
                self.killed = True  # worker 0's replacement has just been started
                os.kill(self.pid, signal.SIGKILL)

    logger = logging.getLogger("shmatari")
    # Breakout: a replacement takes a while to build its envs (a ROM to load)
    with shmatari.make("Breakout", num_envs=4, num_workers=2, seed=0,
                       restart_workers=True) as env:
        env.reset()
        name, old = env.segment_name, list(env.worker_pids)
        hook = KillOnRestart(old[1])
        logger.addHandler(hook)
        try:
            os.kill(old[0], signal.SIGKILL)
            for _ in range(20):
                obs, *_, info = env.step(np.zeros(4, np.int64), timeout=60)
        finally:
            logger.removeHandler(hook)
        assert hook.killed
        new = list(env.worker_pids)
        assert new[0] != old[0] and new[1] != old[1]
        assert obs.shape[0] == 4
        old = new
    assert_gone(old, name)


def test_restart_workers_gives_up_on_a_crash_loop():
    """A worker killed again and again (a CPU or memory limit that kills each
    replacement) is replaced RESTART_LIMIT times within RESTART_WINDOW
    seconds, then WorkerError says restart_workers gives up; it restarted
    for good (27 times in 30 s, an attacker's pass)."""
    import numpy as np

    import shmatari
    from shmatari import supervisor

    with shmatari.make("null", num_envs=2, num_workers=1, seed=0,
                       restart_workers=True) as env:
        env.reset()
        name, pids = env.segment_name, []
        with pytest.raises(shmatari.WorkerError) as e:
            for _ in range(supervisor.RESTART_LIMIT + 1):
                pids.append(env.worker_pids[0])
                os.kill(pids[-1], signal.SIGKILL)
                env.step(np.zeros(2, np.int64), timeout=60)
        assert len(pids) == supervisor.RESTART_LIMIT + 1
        text = str(e.value)
        assert "killed by signal 9" in text and "restart_workers gives up" in text
        assert f"died {supervisor.RESTART_LIMIT + 1} times within 60 s" in text
    assert_gone(pids, name)


def _stopped_peer_and_a_dead_worker(env):
    """Worker 1 stopped (SIGSTOP) with a step in flight, then worker 0
    killed: a restart must wait for worker 1's command before it can
    rebuild worker 0's envs. Returns (worker 0's pid, worker 1's pid)."""
    import numpy as np

    env.reset(seed=0)
    w0, w1 = env.worker_pids
    os.kill(w1, signal.SIGSTOP)
    env.send(np.zeros(2, np.int64))
    time.sleep(0.3)
    os.kill(w0, signal.SIGKILL)
    return w0, w1


def test_close_from_another_thread_during_a_restart_ends_it_with_pool_closed():
    """close() from another thread while recv() waits inside a restart: the
    restart went on under the close, took the workers the close stopped for
    dead and replaced them, and recv raised a bare IndexError (or WorkerError
    "died while restarting: exit code 0"), with close() waiting 2 s for it
    (a reviewer's pass, 2026-12-06). Now recv raises PoolClosedError at once,
    no replacement starts, and nothing is left."""
    import shmatari

    env = shmatari.make("Pong", num_envs=2, num_workers=2, restart_workers=True,
                        start_timeout=30)
    name = env.segment_name
    w0, w1 = _stopped_peer_and_a_dead_worker(env)
    out = {}

    def call():
        try:
            env.recv(timeout=1)
            out["r"] = "ok"
        except BaseException as exc:  # noqa: BLE001 - what the test checks
            out["r"], out["t"] = exc, time.monotonic()

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(1.0)  # inside the restart, waiting for worker 1's command
    assert thread.is_alive()
    t0 = time.monotonic()
    env.close()
    closed = time.monotonic() - t0
    thread.join(10)
    assert isinstance(out["r"], shmatari.PoolClosedError), repr(out["r"])
    assert "closed while worker(s) [0] were being replaced" in str(out["r"])
    assert out["t"] - t0 < 0.5
    assert closed < 2.0  # the stopped worker 1 needs SIGKILL: about 1.5 s
    assert env.worker_pids == [w0, w1]  # no replacement was started
    assert_gone([w0, w1], name)


def test_a_restart_waits_start_timeout_in_all_and_names_a_stuck_worker():
    """The restart's wait for the other workers' commands in flight, the
    spawn and the wait for READY each had a start_timeout of their own (11 s
    for a start_timeout of 6: a reviewer's pass, 2026-12-06), and a living
    worker that did not finish its command was named only by an env. Now
    one deadline for the whole restart, and the error names the worker, its
    pid and that it is stopped or busy."""
    import shmatari

    env = shmatari.make("Pong", num_envs=2, num_workers=2, restart_workers=True,
                        start_timeout=3)
    name = env.segment_name
    try:
        w0, w1 = _stopped_peer_and_a_dead_worker(env)
        t0 = time.monotonic()
        with pytest.raises(shmatari.WorkerError) as e:
            env.recv(timeout=1)
        waited = time.monotonic() - t0
        text = str(e.value)
        assert f"worker 1 (pid {w1}) has not answered env 1" in text, text
        assert "stopped or busy" in text and "start_timeout=3 s" in text, text
        assert 2.9 < waited < 4.5, waited
    finally:
        env.close()
    assert_gone([w0, w1], name)

    # Worker 1 resumed after 2 s of the 3, the replacement stopped as it
    # starts: the wait for READY has what is left, not 3 s more.
    env = shmatari.make("Pong", num_envs=2, num_workers=2, restart_workers=True,
                        start_timeout=3)
    name = env.segment_name
    stopped = []
    try:
        w0, w1 = _stopped_peer_and_a_dead_worker(env)

        def meddle():
            time.sleep(2.0)
            os.kill(w1, signal.SIGCONT)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                pid = env._supervisor.worker_pids[0]
                if pid != w0:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                    return
                time.sleep(0.001)

        thread = threading.Thread(target=meddle, daemon=True)
        thread.start()
        t0 = time.monotonic()
        with pytest.raises(shmatari.WorkerError) as e:
            env.recv(timeout=1)
        waited = time.monotonic() - t0
        thread.join(10)
        assert stopped, "the replacement never started"
        assert "were not ready within start_timeout=3 s" in str(e.value), str(e.value)
        assert waited < 4.5, waited  # 5 s and more before
    finally:
        env.close()
    assert_gone([w0, w1, *stopped], name)


def test_a_restart_with_too_little_time_left_starts_no_replacement():
    """The wait for a stopped worker's command took all but 0.3 s of
    start_timeout: the replacement was started with what was left (0.0 s,
    under forkserver: multiprocessing's shared fork server killed by the
    watchdog, and blamed: a review, 2026-12-06). Now no replacement starts
    with less than supervisor.SPAWN_FLOOR left, and the error says where the
    time went."""
    import shmatari
    from shmatari import supervisor

    assert supervisor.SPAWN_FLOOR == 0.5
    env = shmatari.make("Pong", num_envs=2, num_workers=2, restart_workers=True,
                        start_timeout=3)
    name = env.segment_name
    try:
        w0, w1 = _stopped_peer_and_a_dead_worker(env)
        threading.Timer(2.7, os.kill, (w1, signal.SIGCONT)).start()
        t0 = time.monotonic()
        with pytest.raises(shmatari.WorkerError) as e:
            env.recv(timeout=1)
        waited = time.monotonic() - t0
        text = str(e.value)
        assert "could not be replaced within start_timeout=3 s" in text, text
        assert "s were left when worker 0's replacement was to start" in text, text
        assert waited < 3.5 and env.worker_pids == [w0, w1]  # none started
    finally:
        env.close()
    assert_gone([w0, w1], name)


def test_a_restart_after_the_segment_file_was_removed_says_so():
    """The segment's file removed from /dev/shm while the pool runs
    (systemd-logind's RemoveIPC at logout, a cleanup script): the pool runs
    on, but a replacement attaches by name, found nothing and exited 0, and
    the restart raised "died while restarting: exit code 0" (a reviewer's
    pass, 2026-12-06). Now the restart says why it cannot replace the worker,
    before it starts one."""
    import numpy as np

    import shmatari

    env = shmatari.make("Pong", num_envs=2, num_workers=2, restart_workers=True)
    name = env.segment_name
    try:
        env.reset(seed=0)
        w0, w1 = env.worker_pids
        os.unlink(os.path.join(SHM_DIR, name))
        env.step(np.zeros(2, np.int64))  # the pool runs on
        os.kill(w0, signal.SIGKILL)
        with pytest.raises(shmatari.WorkerError) as e:
            env.step(np.zeros(2, np.int64), timeout=10)
        text = str(e.value)
        assert "killed by signal 9" in text and "restart_workers cannot replace it" in text
        assert f"{SHM_DIR}/{name} was removed or replaced" in text, text
        assert env.worker_pids == [w0, w1]  # no replacement was started
    finally:
        env.close()
    assert_gone([w0, w1], name)


# -- 3. the parent dies ----------------------------------------------------------

PARENT = '''
if __name__ == "__main__":
    env = shmatari.make("Breakout", num_envs=4, num_workers=2, seed=0,
                        start_method=sys.argv[1])
    env.reset()
    emit(pids=list(env.worker_pids), segment=env.segment_name)
    while True:
        env.step(np.zeros(4, np.int64))
'''

FRESH = '''
if __name__ == "__main__":
    stale = sys.argv[1]
    with shmatari.make("Pong", num_envs=1, seed=0) as env:
        env.reset()
        env.step([0])
    emit(stale_left=os.path.exists(os.path.join("/dev/shm", stale)))
'''


@pytest.mark.parametrize("start_method", ["zygote", "forkserver", "spawn", "fork"])
def test_killed_parent_leaves_no_worker_and_no_segment(tmp_path, start_method):
    path = tmp_path / "parent.py"
    path.write_text(HEAD + textwrap.dedent(PARENT))
    proc = subprocess.Popen([sys.executable, str(path), start_method],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("RESULT "), line + proc.stderr.read()
        out = json.loads(line[len("RESULT "):])
        time.sleep(0.3)  # stepping
        family = descendants(proc.pid)  # workers, and the fork server or resource tracker
        assert set(out["pids"]) <= family
        proc.kill()
        t0 = time.monotonic()
        proc.wait(10)
        while time.monotonic() - t0 < 10 and (
                descendants_alive(family) or os.path.exists(f"{SHM_DIR}/{out['segment']}")):
            time.sleep(0.01)
        elapsed = time.monotonic() - t0
        stderr = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert_gone(family, out["segment"])
    assert elapsed < 3.0
    for word in ("Traceback", "leaked", "resource_tracker"):
        assert word not in stderr, stderr


def descendants_alive(pids) -> bool:
    return any(pid_alive(p) for p in pids)


@pytest.mark.serial  # another xdist worker's make() would sweep its orphans first
def test_make_sweeps_segments_of_dead_owners_only(tmp_path):
    """A segment whose every process died goes at the next make(); one whose
    owner lives, or that a live process maps, stays."""
    orphan = subprocess.run(
        [sys.executable, "-c", "import os; from shmatari import shm; "
         "s = shm.create(shm.new_name(), 4096); print(s.name, flush=True); os._exit(0)"],
        capture_output=True, text=True, timeout=60).stdout.strip()
    mapped = subprocess.run(
        [sys.executable, "-c", "import os; from shmatari import shm; "
         "s = shm.create(shm.new_name(), 4096); print(s.name, flush=True); os._exit(0)"],
        capture_output=True, text=True, timeout=60).stdout.strip()
    live = shm.create(shm.new_name(), 4096)  # owner: this process
    # An older shmatari's segment holds no lock; its owner (this process) lives.
    legacy = shm.new_name()
    with open(os.path.join(SHM_DIR, legacy), "wb") as f:
        f.write(b"\0" * 4096)
    attached = shm.attach(mapped)  # dead owner, but this process maps it
    try:
        # The orphan may already be gone: any make() on the machine sweeps
        # it (serial keeps this suite's own out; another checkout's tests
        # running beside it swept it in a clean-clone run, 2026-12-06); the
        # three that no sweep may take are checked here.
        for name in (mapped, live.name, legacy):
            assert os.path.exists(os.path.join(SHM_DIR, name))
        proc, out = run_script(tmp_path, FRESH, orphan)
        assert out == {"stale_left": False}, proc.stderr
        for name in (mapped, live.name, legacy):
            assert os.path.exists(os.path.join(SHM_DIR, name)), name
        attached.close()
        assert mapped in shm.sweep_stale()  # nobody maps it now
    finally:
        attached.close()
        live.close()
        for name in (orphan, mapped, live.name, legacy):
            shm.unlink(name)


def test_a_named_file_that_is_no_pool_is_left_alone_and_blocks_nothing():
    """A file of this user called shmatari_<name> that is not a pool (notes,
    a server killed before it wrote its header, another ABI's pool): the
    sweep leaves it, and make() goes on. It raised BufferError out of every
    make() (the sweep returned from inside its mmap with a view still
    exported), until someone removed the file by hand."""
    import shmatari

    name = f"shmatari_notes{os.getpid()}"
    path = os.path.join(SHM_DIR, name)
    for content in (b"x" * 4096, b"\0" * 4096):
        with open(path, "wb") as f:
            f.write(content)
        try:
            assert name not in shm.sweep_stale()
            with shmatari.make("null", num_envs=2, num_workers=1, seed=0) as env:
                env.reset()
            assert open(path, "rb").read() == content
        finally:
            os.unlink(path)


def test_a_file_named_like_a_dead_pools_that_is_no_pool_is_left_alone():
    """The sweep removed any file of this user named shmatari_<pid>_<hex>
    whose pid was gone and that nobody locked, a text file included, where
    layout.md says that what is not a pool is never removed (an attacker's
    pass, 2026-12-06). It now removes a file whose first word is the magic
    (a pool of any ABI version, its header whole or half written) or zero
    (a segment its maker died before writing), and leaves the rest."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    magic = _core.MAGIC.to_bytes(8, sys.byteorder)
    files = {shm.new_name(gone.pid): (content, ours) for content, ours in (
        (b"notes\n", False), (b"\x01" + b"\0" * 8191, False), (b"\0" * 8192, True), (b"", True),
        (magic + b"\xff" * 56 + b"\0" * 8128, True))}  # a header cut short, or another ABI's
    try:
        for name, (content, _) in files.items():
            with open(os.path.join(SHM_DIR, name), "wb") as f:
                f.write(content)
            os.chmod(os.path.join(SHM_DIR, name), 0o600)
        removed = shm.sweep_stale()
        for name, (content, ours) in files.items():
            assert (name in removed) is ours, (content[:8], removed)
            assert os.path.exists(os.path.join(SHM_DIR, name)) is not ours
            if not ours:
                assert open(os.path.join(SHM_DIR, name), "rb").read() == content
    finally:
        for name in files:
            shm.unlink(name)


def test_pid_reuse_is_not_taken_for_the_owner():
    me = os.getpid()
    assert shm._owner_alive(me, time.time())
    # This process started long after a segment "created" at the epoch: the
    # pid in such a name was reused, and its owner is gone.
    assert not shm._owner_alive(me, 0.0)


# -- 4. Ctrl-C -------------------------------------------------------------------

CTRL_C = '''
if __name__ == "__main__":
    env = shmatari.make("Breakout", num_envs=4, num_workers=2, seed=0,
                        start_method=sys.argv[1])
    try:
        env.reset()
        emit(pids=list(env.worker_pids), segment=env.segment_name)
        while True:
            env.step(np.zeros(4, np.int64))
    finally:
        env.close()
        print("CLOSED", flush=True)
'''


@pytest.mark.parametrize("start_method", ["zygote", "forkserver", "spawn", "fork"])
def test_ctrl_c_interrupts_the_parent_once_and_close_cleans_up(tmp_path, start_method):
    path = tmp_path / "ctrl_c.py"
    path.write_text(HEAD + textwrap.dedent(CTRL_C))
    # Its own session and process group, as a terminal's foreground job.
    proc = subprocess.Popen([sys.executable, str(path), start_method], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("RESULT "), line + proc.stderr.read()
        out = json.loads(line[len("RESULT "):])
        time.sleep(0.3)
        family = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "CLOSED" in stdout
    assert stderr.count("Traceback") == 1, stderr
    assert stderr.count("KeyboardInterrupt") == 1, stderr
    assert proc.returncode in (-signal.SIGINT, 130, 1)
    t0 = time.monotonic()
    while descendants_alive(family) and time.monotonic() - t0 < 5:
        time.sleep(0.01)  # the fork server and resource tracker see EOF
    assert_gone(family, out["segment"])


# -- 5. /dev/shm too small -------------------------------------------------------

SMALL_SHM = '''
import multiprocessing as mp
if __name__ == "__main__":
    free = shm.free_bytes()
    try:
        shmatari.make("Breakout", num_envs=64, seed=0)
    except shmatari.SharedMemorySpaceError as err:
        out = dict(type=type(err).__name__, oserror=isinstance(err, OSError),
                   message=str(err), needed=err.needed, free=err.free)
    out.update(children=len(mp.active_children()), statvfs_free=free,
               left=[n for n in os.listdir("/dev/shm") if n.startswith("shmatari_")])
    # A pool that fits gets every page committed up front: no SIGBUS later.
    with shmatari.make("Breakout", num_envs=2, seed=0) as env:
        st = os.stat(os.path.join("/dev/shm", env.segment_name))
        out.update(allocated=st.st_blocks * 512, size=st.st_size)
        env.reset()
    out["left_after"] = [n for n in os.listdir("/dev/shm") if n.startswith("shmatari_")]
    emit(**out)
'''


def test_small_dev_shm_fails_before_starting_workers(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to mount a private small /dev/shm")
    path = tmp_path / "small.py"
    path.write_text(HEAD + textwrap.dedent(SMALL_SHM))
    # A private mount namespace with a 2 MB tmpfs on /dev/shm, as in a
    # container; the real /dev/shm is untouched.
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
           f"mount -t tmpfs -o size=2m tmpfs /dev/shm && exec {sys.executable} {path}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and ("Operation not permitted" in proc.stderr
                                 or "permission denied" in proc.stderr.lower()):
        pytest.skip(f"no private mount namespace here: {proc.stderr.strip()}")
    out = _result(proc.stdout)
    assert out is not None, proc.stderr
    assert out["type"] == "SharedMemorySpaceError" and out["oserror"]
    assert out["free"] == out["statvfs_free"] <= 2 * 1024 * 1024 < out["needed"]
    assert f"{out['free']:,} bytes free" in out["message"]
    assert f"needs {out['needed']:,}" in out["message"]
    assert out["children"] == 0 and out["left"] == []
    assert out["allocated"] >= out["size"] > 0
    assert out["left_after"] == []


NO_INODES = """
import os
from shmatari import shm
import shmatari
held = 0
try:
    while True:  # use up the tmpfs' files
        open(f"/dev/shm/filler{held}", "wb").close()
        held += 1
except OSError:
    pass
try:
    shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    print("RESULT made")
except shmatari.SharedMemorySpaceError as err:
    print("RESULT " + repr((type(err).__name__, str(err), held > 0)))
print("LEFT " + repr(sorted(n for n in os.listdir("/dev/shm") if n.startswith("shmatari"))))
"""


def test_a_dev_shm_out_of_files_is_a_shared_memory_space_error(tmp_path):
    """A tmpfs out of inodes (nr_inodes) refuses the segment's file with
    ENOSPC while bytes are free: make() raised a bare OSError naming a
    staged name (an attacker's pass); now SharedMemorySpaceError, as for a
    lack of bytes, saying to look at the files (df -i)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to mount a private /dev/shm")
    path = tmp_path / "inodes.py"
    path.write_text(NO_INODES)
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
           f"mount -t tmpfs -o size=8m,nr_inodes=16 tmpfs /dev/shm && exec {sys.executable} "
           f"{path}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and ("Operation not permitted" in proc.stderr
                                 or "permission denied" in proc.stderr.lower()):
        pytest.skip(f"no private mount namespace here: {proc.stderr.strip()}")
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines()
                 if line.startswith(("RESULT ", "LEFT ")))
    assert "RESULT" in lines, proc.stdout + proc.stderr
    kind, message, filled = eval(lines["RESULT"])  # noqa: S307 - our own repr
    assert kind == "SharedMemorySpaceError" and filled
    assert "could not create the pool's segment" in message and "df -i /dev/shm" in message
    assert lines["LEFT"] == "[]"


FD_LIMIT = """
import os, resource, sys
from shmatari import shm
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
while True:
    try:
        held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        break
for _ in range(int(sys.argv[1])):
    os.close(held.pop())
try:
    shm.create("shmatari_fd" + str(os.getpid()), 4096)
    print("created")
except OSError as exc:
    print("refused", exc.errno)
"""


@pytest.mark.parametrize("free", [1, 2, 3, 5])
def test_no_segment_is_left_when_creating_runs_out_of_file_descriptors(tmp_path, free):
    """``free`` descriptors left: before Python 3.13, SharedMemory made the
    file, then failed to start its resource tracker (EMFILE) before shmatari
    had an object to destroy, and the staged ``shmatari_<pid>_<hex>`` file
    stayed in /dev/shm (``ulimit -n 9; shmatari serve ...`` left one)."""
    path = tmp_path / "fds.py"
    path.write_text(FD_LIMIT)
    proc = subprocess.Popen([sys.executable, str(path), str(free)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert out.split()[:1] in (["refused"], ["created"]), err
    if out.startswith("created"):  # the named segment of a success: not the question
        os.unlink(os.path.join(SHM_DIR, f"shmatari_fd{proc.pid}"))
    left = [n for n in os.listdir(SHM_DIR) if n.startswith(f"shmatari_{proc.pid}_")]
    for n in left:
        os.unlink(os.path.join(SHM_DIR, n))
    assert left == [], f"{left} left behind ({out.strip()})"


MAKE_FD_LIMIT = """
import json, os, resource, signal, sys
import shmatari
limit, restart = int(sys.argv[1]), sys.argv[2] == "restart"
out = {}
try:
    if not restart:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    env = shmatari.make("Pong", num_envs=4, num_workers=4, seed=0, restart_workers=restart)
    out["segment"] = env.segment_name
    out["pids"] = list(env.worker_pids)
    if restart:  # no descriptor to spare: the replacement cannot be started
        env.reset()
        n = len(os.listdir("/proc/self/fd")) - 1
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        os.kill(env.worker_pids[1], signal.SIGKILL)
        try:
            for _ in range(10000):
                env.step([0] * 4)
        except shmatari.ResourceLimitError as exc:
            out["error"] = [type(exc).__name__, exc.errno, exc.resource, exc.limit, str(exc)]
        try:
            env.step([0] * 4)
        except shmatari.PoolClosedError as exc:
            out["after"] = str(exc)
    env.close()
    out["made"] = True
except shmatari.ResourceLimitError as exc:
    out["error"] = [type(exc).__name__, exc.errno, exc.resource, exc.limit, str(exc)]
print("RESULT " + json.dumps(out))
"""


def _run_fd_limit(tmp_path, limit: int, mode: str) -> tuple[dict, int]:
    result, pid, output = run_plain_script(tmp_path, "make_fds.py", MAKE_FD_LIMIT, limit, mode)
    assert result is not None, output
    return result, pid


def _nothing_left(pid: int, result: dict) -> None:
    left = [n for n in os.listdir(SHM_DIR) if n.startswith(f"shmatari_{pid}_")]
    assert left == [], left
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in result.get("pids", [])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in result.get("pids", []))


def test_make_out_of_file_descriptors_is_a_resource_limit_error(tmp_path):
    """make() under ``ulimit -n`` too low for its pool (4 workers) failed with
    Python's bare ``OSError: [Errno 24] Too many open files`` from wherever
    the descriptors ran out (the resource tracker's pipe, a worker's fault
    pipe). Every limit from 6 up to the first that fits now gives
    ResourceLimitError (an OSError, errno EMFILE) naming the limit and how to
    raise it, and leaves no segment or process."""
    failures = 0
    for limit in range(6, 40):
        result, pid = _run_fd_limit(tmp_path, limit, "make")
        _nothing_left(pid, result)
        if result.get("made"):
            break
        kind, code, resource, soft, message = result["error"]
        assert (kind, code, resource, soft) == ("ResourceLimitError", errno.EMFILE,
                                                "open files", limit)
        assert f"may have {limit} open: ulimit -n" in message, message
        failures += 1
    else:
        pytest.fail("no limit up to 39 descriptors let make() start 4 workers")
    assert failures >= 3  # the sweep crossed more than one place where they run out


def test_a_restart_out_of_file_descriptors_breaks_the_pool_clearly(tmp_path):
    """restart_workers with no descriptor to spare for the replacement's fault
    pipe: the step raises ResourceLimitError, the pool is broken (the next
    step says so), close() leaves nothing."""
    result, pid = _run_fd_limit(tmp_path, 0, "restart")
    _nothing_left(pid, result)
    assert result.get("made"), result
    kind, code, resource, _, message = result["error"]
    assert (kind, code, resource) == ("ResourceLimitError", errno.EMFILE, "open files")
    assert message.startswith("[Errno 24] starting worker 1 ran out of file descriptors")
    assert "ulimit -n" in message
    assert "starting worker 1 ran out" in result["after"], result["after"]


MAKE_PROC_LIMIT = """
import importlib, json, os, pkgutil, resource, sys
import shmatari
import ale_py, threadpoolctl  # a worker imports them; the user below may not read them

# Every import a pool needs, done while this process can still read them: the
# user below may not read this package's files (installed under /root, say),
# and a forked worker imports its own modules (shmatari._worker_ale, ...) late.
for module in pkgutil.iter_modules(shmatari.__path__, "shmatari."):
    if module.name not in ("shmatari.ray", "shmatari.sb3"):  # integrations: not a worker's
        importlib.import_module(module.name)
warm = shmatari.make("null", num_envs=4, num_workers=4, seed=0, start_method="fork")
warm.reset()
warm.close()


def tasks(uid):  # what RLIMIT_NPROC counts: every thread of every process of the user
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = open(f"/proc/{pid}/status").read().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status if ":" in line)
        if int(fields["Uid"].split()[0]) == uid:
            n += int(fields["Threads"])
    return n


spare = int(sys.argv[1])
if os.geteuid() == 0:  # root is never held to RLIMIT_NPROC: become nobody
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
limit = tasks(os.getuid()) + spare
resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
out = {"limit": limit}
try:
    env = shmatari.make("null", num_envs=4, num_workers=4, seed=0, start_method="fork")
    out["segment"] = env.segment_name
    out["pids"] = list(env.worker_pids)
    env.reset()
    env.close()
    out["made"] = True
except shmatari.ResourceLimitError as exc:
    out["error"] = [type(exc).__name__, exc.errno, exc.resource, exc.limit, str(exc)]
print("RESULT " + json.dumps(out))
"""


def test_make_out_of_processes_is_a_resource_limit_error(tmp_path):
    """make() under ``ulimit -u`` (RLIMIT_NPROC) too low for its 4 workers:
    the fork that fails raises EAGAIN. Every limit from no process to spare
    up to the first that fits gives ResourceLimitError (errno EAGAIN,
    resource "processes") naming the limit and ``ulimit -u``, and leaves no
    segment or process. As root (never held to the limit) the script drops
    to ``nobody`` first; the pool uses ``start_method="fork"``, since
    ``nobody`` may not be able to run this Python for a zygote."""
    failures = 0
    for spare in range(0, 12):
        result, pid, output = run_plain_script(tmp_path, "make_procs.py", MAKE_PROC_LIMIT, spare)
        assert result is not None, output
        _nothing_left(pid, result)
        if result.get("made"):
            break
        kind, code, resource, soft, message = result["error"]
        assert (kind, code, resource, soft) == ("ResourceLimitError", errno.EAGAIN,
                                                "processes", result["limit"])
        assert f"this user may run {result['limit']}: ulimit -u" in message, message
        assert message.startswith(f"[Errno {errno.EAGAIN}] starting worker "), message
        failures += 1
    else:
        pytest.fail("no limit up to 11 spare processes let make() start 4 workers")
    assert failures >= 4  # one failure per worker that could not be forked, at least


ZYGOTE_PROC_LIMIT = """
import json, os, sys
cgroup = sys.argv[1]
with open(f"{cgroup}/cgroup.procs", "w") as f:
    f.write(str(os.getpid()))
import shmatari
tasks = int(open(f"{cgroup}/pids.current").read())
with open(f"{cgroup}/pids.max", "w") as f:
    f.write(str(tasks + 1))  # room for the zygote, none for a worker
out = {}
try:
    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0, start_method="zygote")
    out["made"] = True
    env.close()
except shmatari.ResourceLimitError as exc:
    out["error"] = [type(exc).__name__, exc.errno, exc.resource, str(exc)]
print("RESULT " + json.dumps(out))
"""


def test_the_zygotes_fork_out_of_processes_is_a_resource_limit_error(tmp_path):
    """The zygote's fork failing with EAGAIN (its pids.max reached: a cgroup's
    limit holds root too, which RLIMIT_NPROC does not, so the test above
    runs without the zygote): make() raises ResourceLimitError naming the
    zygote's fork and the limits, and leaves no segment; the zygote itself
    ends with the trainer, so the cgroup is empty afterwards."""
    root = "/sys/fs/cgroup/pids"  # cgroup v1's pids controller
    if not (os.path.isdir(root) and os.access(root, os.W_OK)):
        pytest.skip(f"no writable {root} (cgroup v1's pids controller, as root)")
    cgroup = f"{root}/shmatari-test-{os.getpid()}"
    os.mkdir(cgroup)
    try:
        result, pid, output = run_plain_script(tmp_path, "zygote_procs.py",
                                               ZYGOTE_PROC_LIMIT, cgroup)
        assert result is not None, output
        _nothing_left(pid, result)
        kind, code, resource, message = result["error"]
        assert (kind, code, resource) == ("ResourceLimitError", errno.EAGAIN, "processes")
        assert "(the zygote's fork)" in message and "pids.max" in message, message
        deadline = time.monotonic() + 10
        while open(f"{cgroup}/pids.current").read().strip() != "0":
            assert time.monotonic() < deadline, "a process of the pool outlived its trainer"
            time.sleep(0.05)
    finally:
        os.rmdir(cgroup)


# -- 6. no resource-tracker noise ------------------------------------------------

TRACKER = '''
import gc
if __name__ == "__main__":
    pids, segments = [], []
    for method in ("zygote", "forkserver", "spawn", "fork"):
        env = shmatari.make("Pong", num_envs=2, num_workers=2, seed=0, start_method=method)
        pids += env.worker_pids
        segments.append(env.segment_name)
        env.reset()
        os.kill(env.worker_pids[0], signal.SIGKILL)  # a failure, then close()
        try:
            while True:
                env.step([0, 0])
        except shmatari.WorkerError:
            pass
        env.close()
        env = shmatari.make("Pong", num_envs=2, seed=0, start_method=method)
        pids += env.worker_pids
        segments.append(env.segment_name)
        env.reset()
        del env  # closed by the garbage collector
        gc.collect()
    emit(pids=pids, segments=segments)
'''


def test_no_resource_tracker_noise_after_failures(tmp_path):
    """Failed and garbage-collected pools under every start method: no
    "leaked shared_memory" warning at exit, nothing left behind."""
    proc, out = run_script(tmp_path, TRACKER)
    assert proc.returncode == 0 and out is not None, proc.stderr
    for word in ("resource_tracker", "leaked", "Traceback", "Warning"):
        assert word not in proc.stderr, proc.stderr
    for segment in out["segments"]:
        assert_gone(out["pids"], segment)


def test_a_stuck_worker_is_caught_by_a_recv_timeout_and_the_pool_recovers():
    """SIGSTOP keeps a worker alive but stuck: liveness checks cannot see it,
    a timeout does, and after SIGCONT the same batch arrives."""
    import numpy as np

    import shmatari

    with shmatari.make("Pong", num_envs=2, num_workers=2, seed=0) as env:
        env.reset()
        os.kill(env.worker_pids[1], signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(shmatari.StepTimeoutError, match="stuck"):
                env.step(np.zeros(2, np.int64), timeout=0.5)
            assert 0.4 < time.monotonic() - t0 < 3.0
            assert isinstance(shmatari.StepTimeoutError("x"), TimeoutError)
        finally:
            os.kill(env.worker_pids[1], signal.SIGCONT)
        obs, reward, terminated, truncated, info = env.recv(timeout=10)
        assert obs.shape == (2, 4, 84, 84) and (info["elapsed_step"] == 1).all()
        obs, *_ = env.step(np.ones(2, np.int64), timeout=10)
        assert obs.shape == (2, 4, 84, 84)


def test_a_timeout_names_only_the_envs_not_answered():
    """A timed-out step names the workers whose envs have not answered, eight
    envs each at most ("and N more"), and not the envs whose results are in
    (the C client's words, shmatari_unanswered_text, which xla() gives too;
    xla() named every env of the batch)."""
    import numpy as np

    import shmatari

    with shmatari.make("null", num_envs=20, num_workers=2, seed=0) as env:
        env.reset()
        pid = env.worker_pids[1]
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(shmatari.StepTimeoutError) as e:
                env.step(np.zeros(20, np.int64), timeout=0.3)
        finally:
            os.kill(pid, signal.SIGCONT)
        text = str(e.value)
        assert (f"with every worker alive: worker 1 (pid {pid}) has not answered envs "
                "10, 11, 12, 13, 14, 15, 16, 17 and 2 more (alive, but stopped or busy") in text
        assert "worker 0" not in text
        obs, *_ = env.recv(timeout=10)
        assert obs.shape[0] == 20


# -- found by trying to break the pool (regressions) ---------------------------------


def test_ctrl_c_during_close_still_removes_everything(tmp_path):
    """SIGINT arriving while close() waits for a (stopped) worker: close()
    completes, then the KeyboardInterrupt is raised; nothing is left."""
    proc, res = run_script(tmp_path, """
        import threading
        if __name__ == "__main__":
            env = shmatari.make("Pong", num_envs=2, num_workers=2, seed=0)
            env.reset()
            name, pids = env.segment_name, list(env.worker_pids)
            os.kill(pids[0], signal.SIGSTOP)
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            interrupted = False
            t0 = time.monotonic()
            try:
                env.close()
            except KeyboardInterrupt:
                interrupted = True
            emit(interrupted=interrupted, seconds=time.monotonic() - t0, name=name, pids=pids,
                 closed=env.closed)
    """)
    assert proc.returncode == 0, proc.stderr
    assert res["interrupted"] and res["closed"] and res["seconds"] < 5.0
    assert_gone(res["pids"], res["name"])


def test_ctrl_c_handed_to_another_thread_ends_a_reset_waiting_for_a_stopped_worker(tmp_path):
    """reset() first waits, in C (shmatari_reset_envs), for the commands in
    flight. A Ctrl-C that the kernel hands to another thread of the trainer
    (torch and JAX run many), or that lands between two slices of that wait,
    never interrupted its sleep: it only set Python's flag, and reset()
    waited out its timeout (60 s by default, for good with timeout=None).
    ``pthread_kill`` hands it to another thread every time. It is raised
    now, with nothing dropped: after SIGCONT the step's results arrive."""
    proc, res = run_script(tmp_path, """
        import threading
        if __name__ == "__main__":
            env = shmatari.make("Pong", num_envs=2, num_workers=2, seed=0)
            env.reset()
            name, pids = env.segment_name, list(env.worker_pids)
            os.kill(pids[0], signal.SIGSTOP)
            env.send(np.ones(2, np.int64))
            threading.Timer(0.5, lambda: signal.pthread_kill(threading.get_ident(),
                                                             signal.SIGINT)).start()
            outcome = "returned"
            t0 = time.monotonic()
            try:
                env.reset(timeout=30)
            except KeyboardInterrupt:
                outcome = "interrupted"
            except shmatari.StepTimeoutError:
                outcome = "timed out"
            seconds = time.monotonic() - t0
            os.kill(pids[0], signal.SIGCONT)
            obs, reward, terminated, truncated, info = env.recv(timeout=10)
            emit(outcome=outcome, seconds=seconds, steps=info["elapsed_step"].tolist(),
                 name=name, pids=pids)
            env.close()
    """)
    assert proc.returncode == 0, proc.stderr
    assert res["outcome"] == "interrupted" and res["seconds"] < 10, res
    assert res["steps"] == [1, 1]  # the step sent before the reset: nothing was dropped
    assert_gone(res["pids"], res["name"])


@pytest.mark.parametrize("restart_workers", [True, False])
def test_reset_after_a_worker_died_with_a_command_in_flight(restart_workers):
    """A worker that dies with a command in flight (a send() not yet
    received, or a step() cut short by Ctrl-C) and then reset(): reset()'s
    drain got the C client's "worker died" and raised the attached pool's
    WorkerError ("of the server", naming the trainer's own pid, no exit
    signal), breaking the pool even with restart_workers=True (a signal
    pass). The owner now answers as recv() does: it replaces the worker and
    the reset goes on, or names the death with its signal."""
    import numpy as np

    import shmatari

    with shmatari.make("Pong", num_envs=4, num_workers=2, seed=0,
                       restart_workers=restart_workers) as env:
        env.reset()
        victim = env.worker_pids[0]
        os.kill(victim, signal.SIGSTOP)
        env.send(np.zeros(4, np.int64))  # worker 0's envs never answer it
        os.kill(victim, signal.SIGKILL)
        assert wait_until(lambda: not pid_alive(victim), 5.0)
        if restart_workers:
            obs, info = env.reset(timeout=30)
            assert obs.shape == (4, 4, 84, 84) and victim not in env.worker_pids
            assert (info["elapsed_step"] == 0).all()
            obs, *_ = env.step(np.ones(4, np.int64))
            assert obs.shape == (4, 4, 84, 84)
        else:
            with pytest.raises(shmatari.WorkerError) as e:
                env.reset(timeout=30)
            text = str(e.value)
            assert f"(pid {victim}" in text and "SIGKILL" in text and "server" not in text, text


def test_close_is_bounded_when_every_worker_is_stopped(tmp_path):
    proc, res = run_script(tmp_path, """
        if __name__ == "__main__":
            env = shmatari.make("null", num_envs=8, num_workers=8, seed=0)
            env.reset()
            name, pids = env.segment_name, list(env.worker_pids)
            for p in pids:
                os.kill(p, signal.SIGSTOP)
            t0 = time.monotonic()
            env.close()
            emit(seconds=time.monotonic() - t0, name=name, pids=pids)
    """)
    assert proc.returncode == 0, proc.stderr
    assert res["seconds"] < 5.0, res
    assert_gone(res["pids"], res["name"])


def test_a_forked_child_exiting_leaves_the_parents_pool_alone(tmp_path):
    proc, res = run_script(tmp_path, """
        if __name__ == "__main__":
            env = shmatari.make("Pong", num_envs=2, num_workers=2, seed=0)
            env.reset()
            pid = os.fork()
            if pid == 0:
                sys.exit(0)   # runs the child's copy of the pool's finalizer
            os.waitpid(pid, 0)
            obs, *_ = env.step([0, 0])
            name, pids = env.segment_name, list(env.worker_pids)
            env.close()
            emit(shape=list(obs.shape), name=name, pids=pids)
    """)
    assert proc.returncode == 0, proc.stderr
    assert res["shape"] == [2, 4, 84, 84]
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert_gone(res["pids"], res["name"])


def test_a_dead_fork_server_does_not_end_the_pool(tmp_path):
    """Under forkserver a worker's parent is the fork server: its death must
    neither kill the workers nor make them remove the live pool's segment."""
    proc, res = run_script(tmp_path, """
        from multiprocessing import forkserver
        if __name__ == "__main__":
            env = shmatari.make("Pong", num_envs=2, num_workers=2, seed=0,
                                start_method="forkserver")
            env.reset()
            os.kill(forkserver._forkserver._forkserver_pid, signal.SIGKILL)
            time.sleep(0.6)   # three of the workers' owner checks
            exists = os.path.exists("/dev/shm/" + env.segment_name)
            obs, *_ = env.step([1, 1])
            name, pids = env.segment_name, list(env.worker_pids)
            env.close()
            emit(exists=exists, shape=list(obs.shape), name=name, pids=pids)
    """)
    assert proc.returncode == 0, proc.stderr
    assert res["exists"] and res["shape"] == [2, 4, 84, 84]
    assert_gone(res["pids"], res["name"])


def test_a_worker_killed_after_its_fork_server_is_named_as_such(tmp_path):
    """With the fork server gone, multiprocessing makes up exit code 255 for
    a worker that is then killed, and the error said it "ended in native
    code (ALE exits on some errors)" (a helper's API pass). It says the exit
    status is unknown because the fork server that started it is gone, as
    for the zygote's workers."""
    proc, res = run_script(tmp_path, """
        from multiprocessing import forkserver
        if __name__ == "__main__":
            env = shmatari.make("null", num_envs=2, num_workers=2, seed=0,
                                start_method="forkserver")
            env.reset()
            server = forkserver._forkserver._forkserver_pid
            os.kill(server, signal.SIGKILL)
            time.sleep(0.3)
            os.kill(env.worker_pids[0], signal.SIGKILL)
            try:
                env.step([0, 0])
                text = None
            except shmatari.WorkerError as exc:
                text = str(exc)
            name, pids = env.segment_name, list(env.worker_pids)
            env.close()
            emit(text=text, server=server, name=name, pids=pids)
    """)
    assert proc.returncode == 0, proc.stderr
    assert (f"died: exit status unknown: multiprocessing's fork server that started it "
            f"(pid {res['server']}) is gone") in res["text"], res["text"]
    assert "native code" not in res["text"]
    assert_gone(res["pids"], res["name"])


def test_a_fifo_under_a_shmatari_name_does_not_hang_make(tmp_path):
    """The stale-segment sweep opened names under /dev/shm for reading, and
    a FIFO there blocked make() forever."""
    # pid 4194303 is past pid_max: no owner; the rest keeps test runs apart
    fifo = os.path.join(SHM_DIR, f"shmatari_4194303_{os.getpid():x}{secrets.token_hex(4)}")
    os.mkfifo(fifo)
    try:
        proc, res = run_script(tmp_path, """
            if __name__ == "__main__":
                with shmatari.make("Pong", num_envs=1, seed=0) as env:
                    env.reset()
                    emit(ok=True)
        """, timeout=60)
        assert proc.returncode == 0 and res == {"ok": True}, proc.stderr
        assert os.path.exists(fifo), "the sweep must not remove what is not a segment"
    finally:
        os.unlink(fifo)


def test_attach_refuses_odd_names_and_files_clearly(tmp_path):
    import shmatari

    with pytest.raises(TypeError, match="str"):
        shmatari.attach(None)
    with pytest.raises(ValueError, match="NUL"):
        shmatari.attach("a\0b")
    path = os.path.join(SHM_DIR, f"shmatari_odd{os.getpid()}")
    for make_file in (lambda: os.mkfifo(path), lambda: open(path, "w").close()):
        make_file()
        try:
            # A FIFO is not a segment; the empty file is refused for its mode
            # 0644 (docs/layout.md, "Trust") before its size is looked at.
            with pytest.raises(shmatari.AttachError,
                               match="not a shared-memory segment|mode 0644 lets other"):
                shmatari.attach(f"odd{os.getpid()}", timeout=0.2)
        finally:
            os.unlink(path)


def test_a_step_that_could_not_fill_a_batch_sends_nothing():
    import numpy as np

    import shmatari

    with shmatari.make("Pong", num_envs=4, seed=0) as env:
        env.reset()
        with pytest.raises(shmatari.CallOrderError, match="nothing was sent"):
            env.step([0, 0], env_id=[0, 1])
        obs, *_ = env.step(np.zeros(4, np.int64))   # the pool is as it was
        assert obs.shape == (4, 4, 84, 84)


def test_make_in_a_forked_child_of_a_fork_server_user_says_what_to_do(tmp_path):
    proc, res = run_script(tmp_path, """
        if __name__ == "__main__":
            with shmatari.make("Pong", num_envs=1, seed=0, start_method="forkserver") as env:
                env.reset()
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                try:
                    shmatari.make("Pong", num_envs=1, seed=0, start_method="forkserver").close()
                    msg = "made"
                except RuntimeError as exc:
                    msg = str(exc)
                os.write(w, msg.encode())
                os._exit(0)
            os.close(w)
            os.waitpid(pid, 0)
            msg = os.read(r, 4096).decode()
            with shmatari.make("Pong", num_envs=1, seed=0, start_method="spawn") as env:
                env.reset()
            emit(msg=msg)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "start_method='zygote'" in res["msg"] or res["msg"] == "made"


@pytest.mark.parametrize("start_method,num_workers", [("fork", 4), ("spawn", 2)])
def test_close_collects_the_workers_multiprocessing_started(tmp_path, start_method, num_workers):
    """close() of a pool whose workers multiprocessing started (fork, spawn,
    forkserver) waited for them to end but never collected them:
    multiprocessing kept each on its list of children with its sentinel
    pipe open until the next make(), and a fork or spawn worker stayed a
    zombie of the trainer until then (a leak pass: 8 fork workers, 13
    pipe descriptors and a <defunct> process after close()). The first
    make()/close() starts what stays (spawn's resource tracker); the second
    is measured."""
    proc, result = run_script(tmp_path, """
        import gc, multiprocessing
        from multiprocessing import process

        def pipes():
            return sum(os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
                       for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}"))

        def cycle():
            env = shmatari.make("Pong", int(sys.argv[2]), num_workers=int(sys.argv[2]),
                                start_method=sys.argv[1])
            env.reset()
            pids = env.worker_pids
            env.close()
            return pids

        if __name__ == "__main__":  # spawn's workers import this script
            cycle()
            multiprocessing.active_children()  # what the old close() left, collected
            gc.collect()
            before = pipes()
            pids = cycle()
            emit(pipes=pipes() - before, children=len(process._children),
                 left=[p for p in pids if os.path.exists(f"/proc/{p}")])
    """, start_method, num_workers, timeout=180)
    assert result == {"pipes": 0, "children": 0, "left": []}, proc.stderr


def test_a_pool_stepped_after_its_exit_finalizer_says_it_is_closed(tmp_path):
    """At interpreter exit the pool's finalizer closes a pool that was not
    closed; an atexit handler (or a __del__) that steps it afterwards got
    CallOrderError "the client is detached: shmatari.attach() first", the
    words for an attached client, not PoolClosedError (a leak pass)."""
    result, pid, output = run_plain_script(tmp_path, "at_exit.py", textwrap.dedent("""
        import atexit, json

        def step_after_the_finalizer():  # registered first: runs last
            try:
                env.step([0, 0])
            except Exception as exc:
                print("RESULT " + json.dumps([type(exc).__name__, str(exc)]), flush=True)

        atexit.register(step_after_the_finalizer)
        import shmatari

        env = shmatari.make("Pong", 2, num_workers=1)
        env.reset()
        env.step([0, 0])
    """))
    assert result[0] == "PoolClosedError", output
    assert result[1].startswith("the env pool is closed: its close() ran (") \
        and "at interpreter exit" in result[1], output
    assert not [n for n in os.listdir(SHM_DIR) if n.startswith(f"shmatari_{pid}_")]


_CLOSE_FROM_ANOTHER_THREAD = r"""
import os, signal, sys, threading, time
import numpy as np
import shmatari
stopped = sys.argv[1] == "stopped"
env = shmatari.make("null", num_envs=2, num_workers=2)
env.reset()
print(env.segment_name, flush=True)
if stopped:  # the other thread's step() waits for this worker
    os.kill(env.worker_pids[0], signal.SIGSTOP)
errors = []

def stepper():
    try:
        while True:
            env.step(np.zeros(2, dtype=np.int64))
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")

t = threading.Thread(target=stepper, daemon=True)
t.start()
time.sleep(0.5)
t0 = time.monotonic()
env.close()
print("closed in %.2f s" % (time.monotonic() - t0), flush=True)
t.join(5)
print("thread alive:", t.is_alive(), flush=True)
print("thread error:", errors, flush=True)
"""


def _run_close_script(tmp_path, source: str, arg: str):
    """Runs a close() script in its own process (a crash there is a failed
    test, not a dead pytest worker): (the completed process, which exited 0;
    the segment's name, its first line of output)."""
    script = tmp_path / "close_script.py"
    script.write_text(source)
    proc = subprocess.run([sys.executable, str(script), arg], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    return proc, proc.stdout.split()[0]


@pytest.mark.parametrize("worker", ["stopped", "running"])
def test_close_from_another_thread_ends_its_wait_and_does_not_crash(tmp_path, worker):
    """close() from one thread while another is inside step() (waiting for a
    stopped worker, or stepping in a loop). close() freed the client and
    unmapped the segment under the waiting thread, and the process died of
    SIGFPE or SIGSEGV (a helper's attacker pass: 10 of 10 and 9 of 10). Now
    the other thread's wait ends with PoolClosedError, and close() frees the
    pool once it has left."""
    proc, name = _run_close_script(tmp_path, _CLOSE_FROM_ANOTHER_THREAD, worker)
    assert "thread alive: False" in proc.stdout, proc.stdout
    # (a running worker's step may also end between two calls: the next one
    # is refused as closed)
    assert "thread error: ['PoolClosedError: the env pool " in proc.stdout, proc.stdout
    if worker == "stopped":
        assert "closed by another thread while step() waited" in proc.stdout, proc.stdout
    seconds = float(proc.stdout.split("closed in ")[1].split()[0])
    assert seconds < 5.0, proc.stdout
    assert not os.path.exists(f"{SHM_DIR}/{name}")


_CLOSE_BETWEEN_CALLS = r"""
import os, random, signal, sys, threading, time
import numpy as np
import shmatari
random.seed(0)
outcomes = set()
for _ in range(int(sys.argv[1])):
    env = shmatari.make("null", num_envs=4, num_workers=2)
    env.reset()

    def stepper():
        try:
            while True:
                env.step(np.zeros(4, np.int64))
                time.sleep(0.001)  # the trainer's own work: outside every call
        except Exception as exc:
            outcomes.add(f"{type(exc).__name__}: {exc}")

    t = threading.Thread(target=stepper)
    t.start()
    time.sleep(random.random() * 0.02)
    env.close()
    t.join(10)
    assert not t.is_alive()
print("outcomes:", sorted(outcomes), flush=True)
"""


def test_close_while_another_thread_steps_between_calls_does_not_crash(tmp_path):
    """close() while another thread steps in a loop with a pause between
    calls: the close() saw no thread inside, and released the client and the
    mapping as the thread came in again; the process died of SIGFPE within
    a few rounds (a helper's pass, 11 of 11), or the call said "the client
    is detached: shmatari.attach() first". The guard now lets no thread in
    once a close() has begun: every such call raises PoolClosedError."""
    script = tmp_path / "close_between_calls.py"
    script.write_text(_CLOSE_BETWEEN_CALLS)
    proc = subprocess.run([sys.executable, str(script), "40"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    outcomes = eval(proc.stdout.split("outcomes: ", 1)[1])
    assert outcomes and all(o.startswith("PoolClosedError: the env pool ") for o in outcomes), \
        outcomes


_CLOSE_FROM_A_HANDLER_WHILE_STEPPING = r"""
import random, signal
import numpy as np
import shmatari
random.seed(1)
outcomes = []
for _ in range(60):
    env = shmatari.make("null", num_envs=4, num_workers=2)
    env.reset()
    signal.signal(signal.SIGALRM, lambda signum, frame: env.close())
    signal.setitimer(signal.ITIMER_REAL, random.random() * 0.02)
    try:
        while True:
            env.step(np.zeros(4, np.int64))
    except Exception as exc:
        outcomes.append(f"{type(exc).__name__}: {exc}")
    signal.setitimer(signal.ITIMER_REAL, 0)
print("outcomes:", sorted(set(outcomes)), flush=True)
"""


def test_close_from_a_signal_handler_anywhere_in_step_is_a_pool_closed_error(tmp_path):
    """A signal handler closes the pool at any point of a step() loop, not
    only during its wait: a close() that landed after the wait (in the copy
    of the batch, say) let the call go on to a released segment and raise
    ValueError: segment released (4 and 13 of 60 runs in a helper's pass).
    Every such call raises PoolClosedError now."""
    script = tmp_path / "close_in_handler.py"
    script.write_text(_CLOSE_FROM_A_HANDLER_WHILE_STEPPING)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    outcomes = eval(proc.stdout.split("outcomes: ", 1)[1])
    assert outcomes and all(o.startswith("PoolClosedError: the env pool ") for o in outcomes), \
        outcomes


_EXCEPTION_DURING_CLOSE = r"""
import os, signal, sys, threading, time
import shmatari
env = shmatari.make("null", num_envs=2, num_workers=2)
env.reset()
print(env.segment_name, flush=True)
pids = env.worker_pids
os.kill(pids[1], signal.SIGSTOP)  # close() waits for it before it kills it
if sys.argv[1] == "once":
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit("SIGTERM"))
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
else:  # a watchdog whose handler raises every 50 ms
    class Tick(Exception):
        pass
    def tick(signum, frame):
        raise Tick("tick")
    signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, 0.3, 0.05)
t0 = time.monotonic()
try:
    env.close()
    signal.setitimer(signal.ITIMER_REAL, 0)
    print("close returned", flush=True)
except BaseException as exc:
    signal.setitimer(signal.ITIMER_REAL, 0)  # first: a tick in the print would escape
    print(f"close raised {type(exc).__name__}: {exc} after %.1f s" % (time.monotonic() - t0),
          flush=True)
def state(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
print("workers:", [state(p) for p in pids], flush=True)
for p in pids:
    try:
        os.kill(p, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


@pytest.mark.parametrize("raises", ["once", "repeatedly"])
def test_an_exception_from_a_signal_handler_during_close_still_stops_every_worker(
        tmp_path, raises):
    """A SIGTERM handler that calls sys.exit lands inside close() (here while
    it waits for a stopped worker). close() raised SystemExit at once and
    left the workers stopped or running until the process exited, and a
    second close() did nothing (a helper's API pass). Now it goes on with
    the shutdown and raises the handler's exception once every worker is
    gone and the segment removed. A handler that raises every 50 ms cut
    each of the shutdown's ten attempts before its SIGKILL, and the stopped
    worker outlived them all (an attacker's pass); a retry kills at once."""
    proc, name = _run_close_script(tmp_path, _EXCEPTION_DURING_CLOSE, raises)
    assert ("close raised SystemExit: SIGTERM" if raises == "once" else
            "close raised Tick: tick") in proc.stdout, proc.stdout
    # dead, each: gone, or a zombie its parent (the zygote, under the default
    # start method) has not collected yet
    states = eval(proc.stdout.split("workers: ", 1)[1].splitlines()[0])
    assert len(states) == 2 and set(states) <= {"gone", "Z"}, proc.stdout
    assert not os.path.exists(f"{SHM_DIR}/{name}")


def test_an_exception_after_a_worker_is_reaped_still_ends_in_a_whole_shutdown(monkeypatch):
    """The shutdown's retry after a signal handler's exception must not trip
    over what the cut-short attempt did: an exception right after _reap
    closed a fork worker's Process made every retry fail on the closed
    Process (ValueError), so the segment and the pipes were never released,
    and the ValueError replaced the handler's exception (a review of this
    stop's change). Simulated by raising as a handler would, once."""
    import shmatari
    from shmatari import supervisor

    real_reap, raised = supervisor._reap, []

    def reap_then_interrupt(procs, seconds):
        real_reap(procs, seconds)
        if not raised:
            raised.append(True)
            raise SystemExit("SIGTERM")

    env = shmatari.make("null", num_envs=2, num_workers=2, start_method="fork")
    env.reset()
    name, pids, res = env.segment_name, env.worker_pids, env._res
    monkeypatch.setattr(supervisor, "_reap", reap_then_interrupt)
    with pytest.raises(SystemExit, match="SIGTERM"):
        env.close()
    assert raised and res.seg is None and res.segment is None and res.fault_pipes == []
    assert not os.path.exists(f"{SHM_DIR}/{name}")
    assert not [p for p in pids if pid_alive(p)]


def test_a_signal_handlers_own_exception_after_close_is_not_renamed():
    """A SIGALRM handler that closes the pool and raises its own exception
    (a timeout): the call gets that exception, not PoolClosedError (the
    guard renamed every error of a call the close() overtook; a review of
    this stop's change)."""
    import shmatari

    class EpisodeTooLong(Exception):
        pass

    def handler(signum, frame):
        env.close()
        raise EpisodeTooLong

    env = shmatari.make("null", num_envs=2, num_workers=1)
    env.reset()
    pid = env.worker_pids[0]
    os.kill(pid, signal.SIGSTOP)  # step() waits until the handler ends it
    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(EpisodeTooLong):
            env.step([0, 0], timeout=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if pid_alive(pid):
            os.kill(pid, signal.SIGCONT)
        env.close()
    assert not pid_alive(pid)


def test_a_second_close_from_another_thread_returns_once_the_first_is_done():
    """close() from two threads, the first waiting for a stopped worker: the
    second returned at once, with the worker still alive and the segment
    still named (a helper's API pass). Now close() returning means the
    workers are gone and the segment removed, from either thread."""
    import threading

    import shmatari

    env = shmatari.make("null", num_envs=2, num_workers=2)
    env.reset()
    pids, name = env.worker_pids, env.segment_name
    os.kill(pids[1], signal.SIGSTOP)  # the first close() waits, then kills it
    first = threading.Thread(target=env.close)
    first.start()
    try:
        # the first close() has begun: its first step removes the name
        assert wait_until(lambda: not os.path.exists(f"{SHM_DIR}/{name}"), 10.0)
        env.close()
        assert not [p for p in pids if pid_alive(p)]
        assert env.segment_name is None
    finally:
        first.join(10)
        for p in pids:
            if pid_alive(p):
                os.kill(p, signal.SIGKILL)


_CLOSE_FROM_A_SIGNAL_HANDLER = """
import os, signal, sys, threading
import numpy as np
import shmatari
call = sys.argv[1]
env = shmatari.make("null", num_envs=2, num_workers=1,
                    **({} if call == "step" else {"batch_size": 1}))
env.reset()
if call != "step":
    env.recv()  # the other env's first observation: both envs wait for actions
print(env.segment_name, flush=True)
pid = env.worker_pids[0]

def handler(signum, frame):  # runs in the main thread, between the wait's slices
    env.close()

signal.signal(signal.SIGUSR1, handler)
os.kill(pid, signal.SIGSTOP)  # the call below waits for this worker
threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1)).start()
try:
    if call == "step":
        env.step(np.zeros(2, np.int64), timeout=30)
    elif call == "recv":
        env.send(np.zeros(1, np.int64), [0])
        env.recv(timeout=30)
    else:  # reset(): drains the command in flight first
        env.send(np.zeros(1, np.int64), [0])
        env.reset(timeout=30)
    print("returned", flush=True)
except Exception as exc:
    print(f"raised {type(exc).__name__}: {exc}", flush=True)
print("worker gone:", not os.path.exists(f"/proc/{pid}") or
      open(f"/proc/{pid}/stat").read().split()[2] == "Z", flush=True)
"""


@pytest.mark.parametrize("call", ["step", "recv", "reset"])
def test_close_from_a_signal_handler_during_a_wait_is_a_pool_closed_error(tmp_path, call):
    """A signal handler in the thread that waits in step(), recv() or
    reset() closes the pool (a trainer's SIGTERM handler, say). The call
    went on with its client detached and raised CallOrderError, "the client
    is detached: shmatari.attach() first", a way out that does not apply
    (left from the attacker's pass). It raises PoolClosedError now, saying
    the pool was closed while it waited, and nothing is left behind."""
    proc, name = _run_close_script(tmp_path, _CLOSE_FROM_A_SIGNAL_HANDLER, call)
    assert "raised PoolClosedError: the env pool was closed while" in proc.stdout, proc.stdout
    assert "by a signal handler in this thread" in proc.stdout, proc.stdout
    assert "worker gone: True" in proc.stdout, proc.stdout
    assert not os.path.exists(f"{SHM_DIR}/{name}")


@pytest.mark.parametrize("where", ["after the link", "after the rename"])
def test_an_exception_while_a_segment_is_published_leaves_neither_name(monkeypatch, where):
    """A signal handler's exception (shmatari serve's stop) as create()
    gives the new segment its name: right after os.link, or right before
    the first name is dropped. One of the two names was left until the next
    sweep (an attacker's pass, 20 of 20)."""
    name = f"shmatari_t{secrets.token_hex(6)}"
    created = []
    real_link, real_unlink = os.link, shm._unlink_name

    def link(src, dst):
        real_link(src, dst)
        created.extend([os.path.basename(src), os.path.basename(dst)])
        if where == "after the link":
            raise KeyboardInterrupt

    def unlink_name(n):
        if where == "after the rename" and n in created[:1] and "raised" not in created:
            created.append("raised")  # once, as one signal
            raise KeyboardInterrupt
        real_unlink(n)

    monkeypatch.setattr(shm.os, "link", link)
    monkeypatch.setattr(shm, "_unlink_name", unlink_name)
    with pytest.raises(KeyboardInterrupt):
        shm.create(name, 1 << 16)
    monkeypatch.undo()
    left = [n for n in created[:2] if os.path.exists(f"{SHM_DIR}/{n}")]
    for n in left:
        shm.unlink(n)
    assert created and created[1] == name
    assert left == []


def _kill_script_and_fork_server(proc, server: int | None) -> None:
    """A forkserver test's cleanup: its script, if it still runs, and the
    fork server it stopped (which nothing else would end)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if server is not None:
        try:
            os.kill(server, signal.SIGKILL)
        except ProcessLookupError:
            pass


_FORKSERVER_STOPPED_AT_EXIT = r"""
import os, signal, sys
import shmatari
from multiprocessing import forkserver
if __name__ == "__main__":
    env = shmatari.make("null", num_envs=2, num_workers=2, start_method="forkserver")
    env.reset()
    server = forkserver._forkserver._forkserver_pid
    print(server, flush=True)
    os.kill(server, signal.SIGSTOP)
    env.close()
    print("closed", flush=True)
"""


def test_a_stopped_fork_server_does_not_keep_the_trainer_from_exiting(tmp_path):
    """start_method="forkserver" with the fork server stopped (SIGSTOP):
    close() returned, but a forkserver worker's exit status comes only from
    the fork server, and multiprocessing's exit handler joined the workers
    for ever: the interpreter never exited (shmatari serve after SIGTERM
    neither: an attacker's pass, 6 of 6). Workers the kernel says are gone
    leave multiprocessing's list of children."""
    script = tmp_path / "forkserver_stopped.py"
    script.write_text(_FORKSERVER_STOPPED_AT_EXIT)
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    # (files, not pipes: the stopped fork server holds the child's stdout and
    # stderr open, so a pipe never ends)
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=o, stderr=e)
    server = None
    try:
        assert wait_until(lambda: out.read_text().count("\n") >= 1, 60)
        server = int(out.read_text().split()[0])
        proc.wait(timeout=20)
        assert proc.returncode == 0, (proc.returncode, err.read_text()[-2000:])
        assert "closed" in out.read_text()
    finally:
        _kill_script_and_fork_server(proc, server)


_FORKSERVER_ENDS_AT_START = r"""
import glob, os
import shmatari
from multiprocessing import forkserver
if __name__ == "__main__":
    def connect(fds):  # as multiprocessing fails when the fork server ends unanswered
        raise EOFError("unexpected EOF")
    forkserver.connect_to_new_process = connect
    try:
        shmatari.make("null", num_envs=2, num_workers=2, start_method="forkserver")
    except Exception as exc:
        print(type(exc).__name__, exc)
    print("left", glob.glob(f"/dev/shm/shmatari_{os.getpid()}_*"))
"""


def test_a_fork_server_that_ends_during_make_is_a_worker_error(tmp_path):
    """make(start_method="forkserver") when the fork server ends before it
    answers: multiprocessing's bare "EOFError: unexpected EOF" came out of
    make() (an attacker's pass: 8 of 12 kills of the fork server during
    make()), which documents WorkerError for a worker that cannot start."""
    script = tmp_path / "forkserver_ends.py"
    script.write_text(_FORKSERVER_ENDS_AT_START)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "WorkerError worker 0 could not be started: multiprocessing's fork server " \
           "ended before it answered" in proc.stdout, proc.stdout
    assert "left []" in proc.stdout, proc.stdout


_FORKSERVER_STOPPED_AT_MAKE = r"""
import glob, os, signal, time
import shmatari
from multiprocessing import forkserver
if __name__ == "__main__":
    shmatari.make("null", num_envs=2, num_workers=2, start_method="forkserver").close()
    server = forkserver._forkserver._forkserver_pid
    print(server, flush=True)
    os.kill(server, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        shmatari.make("null", num_envs=2, num_workers=2, start_method="forkserver",
                      start_timeout=2)
    except Exception as exc:
        print("raised after %.1f s:" % (time.monotonic() - t0), type(exc).__name__, exc,
              flush=True)
    with shmatari.make("null", num_envs=2, num_workers=2, start_method="forkserver") as env:
        env.reset()
        print("a new pool steps", flush=True)
    print("left", glob.glob(f"/dev/shm/shmatari_{os.getpid()}_*"), flush=True)
"""


def test_make_with_a_stopped_fork_server_fails_within_start_timeout(tmp_path):
    """make(start_method="forkserver", start_timeout=2) while the fork server
    is stopped (SIGSTOP): multiprocessing waits for its answer with no
    limit, and make() (a worker's restart too) returned only once the
    server was resumed, start_timeout and Ctrl-C notwithstanding (an
    attacker's pass). Now the server is killed after start_timeout, make()
    raises WorkerError saying so, and the next make() starts a new one."""
    script = tmp_path / "forkserver_stopped_make.py"
    script.write_text(_FORKSERVER_STOPPED_AT_MAKE)
    out = tmp_path / "out.txt"
    with open(out, "w") as o:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=o,
                                stderr=subprocess.STDOUT)
    server = None
    try:
        assert wait_until(lambda: out.read_text().count("\n") >= 1, 60)
        server = int(out.read_text().split()[0])
        proc.wait(timeout=60)
        text = out.read_text()
        assert proc.returncode == 0, text[-2000:]
        assert "WorkerError worker 0 could not be started: multiprocessing's fork server " \
               "did not answer within start_timeout=2 s" in text, text[-2000:]
        seconds = float(text.split("raised after ")[1].split()[0])
        assert seconds < 10, text
        assert "a new pool steps" in text and "left []" in text, text[-2000:]
    finally:
        _kill_script_and_fork_server(proc, server)


_FORKSERVER_KILLED_THEN_MAKE = r"""
import os, signal
import shmatari
from multiprocessing import forkserver
from shmatari.supervisor import _await_fork_server_exit
if __name__ == "__main__":
    gone = []
    for _ in range(5):
        shmatari.make("null", num_envs=2, num_workers=2, start_method="forkserver").close()
        server = forkserver._forkserver._forkserver_pid
        os.kill(server, signal.SIGKILL)
        _await_fork_server_exit()
        # exited (a zombie, not reaped): multiprocessing's waitpid(WNOHANG) sees it
        gone.append(os.waitid(os.P_PID, server, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                    is not None)
        with shmatari.make("null", num_envs=2, num_workers=2, start_method="forkserver") as env:
            env.reset()
        assert forkserver._forkserver._forkserver_pid != server
    print("gone", gone, flush=True)
"""


def test_a_killed_fork_server_is_waited_for_so_the_next_make_starts_a_new_one(tmp_path):
    """A fork server killed (by make()'s start_timeout watchdog, or dead on
    its own) closes its socket before it becomes a zombie; in between,
    multiprocessing takes it for alive and the next make() failed with
    ConnectionRefusedError (1 in 15 of a stopped-server cycle on a loaded
    machine; the flake of the test above). make()'s failure path now waits
    for it to exit (waitid with WNOWAIT, leaving the reaping to
    multiprocessing), and the next make() starts a new server."""
    script = tmp_path / "forkserver_killed_make.py"
    script.write_text(_FORKSERVER_KILLED_THEN_MAKE)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "gone [True, True, True, True, True]" in proc.stdout, proc.stdout


def test_a_stopped_worker_of_a_first_ready_pool_ends_a_recv_with_a_timeout():
    """In a first-ready pool the other workers' results keep filling batches
    while one worker is stopped (SIGSTOP, or an emulator stuck in a loop):
    until 2026-12-06 its envs were dropped from training with no error,
    whatever recv()'s timeout (an attacker's pass: 12,671 results each for
    envs 0 and 1 in 10 s, none for 2 and 3). A worker that holds commands
    and publishes nothing for the timeout now ends the wait
    (shmatari_check_progress), nothing taken; after SIGCONT every env's
    results go on where they stopped."""
    import numpy as np

    import shmatari

    with shmatari.make("Pong", num_envs=4, num_workers=2, batch_size=2, seed=0) as env:
        env.async_reset()
        last = {}  # env -> elapsed_step of its last result

        def take(timeout):
            obs, reward, terminated, truncated, info = env.recv(timeout=timeout)
            for e, k, t, u in zip(info["env_id"], info["elapsed_step"], terminated, truncated):
                e = int(e)
                assert e not in last or k == last[e] + 1 or k == 0, (e, last.get(e), k)
                last[e] = -1 if (t or u) else int(k)
            env.send(np.zeros(2, np.int64), info["env_id"])
            return info["env_id"]

        for _ in range(20):
            take(10)
        pid = env.worker_pids[1]
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            seen = set()
            with pytest.raises(shmatari.StepTimeoutError) as e:
                for _ in range(100_000):
                    seen.update(int(i) for i in take(1.0))
            spent = time.monotonic() - t0
            # called again, the wait counts the silence afresh: a whole
            # timeout more (it raised every 0.1 s: a review, 2026-12-06)
            t1 = time.monotonic()
            with pytest.raises(shmatari.StepTimeoutError):
                for _ in range(100_000):
                    take(1.0)
            again = time.monotonic() - t1
            # and a same-user process that bumps the stopped worker's `steps`
            # word (worker_ctrl offset 24) no longer hides it (the next
            # attacker's pass: 4,464 batches in 6 s and no error)
            steps = np.ndarray((), np.uint64, env._res.segment.buf,
                               env._client._seg.header()["worker_ctrl_offset"] + 64 + 24)
            stop = threading.Event()

            def bump():
                while not stop.wait(0.02):
                    steps[()] += 1

            bumper = threading.Thread(target=bump)
            bumper.start()
            t2 = time.monotonic()
            try:
                with pytest.raises(shmatari.StepTimeoutError):
                    for _ in range(100_000):
                        take(1.0)
            finally:
                stop.set()
                bumper.join()
                del steps
            bumped = time.monotonic() - t2
        finally:
            os.kill(pid, signal.SIGCONT)
        assert 0.9 < spent < 4.0, spent
        assert 0.9 < again < 4.0 and 0.9 < bumped < 4.0, (again, bumped)
        assert seen <= {0, 1, 2, 3} and {0, 1} <= seen  # worker 0's kept coming
        text = str(e.value)
        assert f"worker 1 (pid {pid}, as the segment names it) has answered none" in text, text
        assert "has not answered env" in text and "nothing was taken" in text, text
        assert "worker 0" not in text and "close() the pool" in text, text  # its worker alone
        counts = dict.fromkeys(range(4), 0)
        for _ in range(40):
            for i in take(10):
                counts[int(i)] += 1
        assert counts[2] > 0 and counts[3] > 0, counts


def test_xla_cache_prunes_old_builds_and_only_builds(tmp_path):
    """``~/.cache/shmatari/xla`` kept one build per shmatari and jax version,
    never removed (3.7 MB after a week of commits): a new build removes the
    builds unused for ``PRUNE_DAYS`` days, and those beyond the newest
    ``PRUNE_KEEP`` unused for a day; never the build made, one used within
    the day, a name that is not a key, a symbolic link or a build holding
    anything but files. (The compiler is not needed: ``_prune`` is what
    ``build`` calls after compiling, tested on directories made here.)"""
    from shmatari import xla

    day, now = 86400.0, time.time()
    root = tmp_path / "xla"
    root.mkdir()

    def made(name, days_unused, files=("libshmatari_xla.so",)):
        d = root / name
        d.mkdir()
        for f in files:
            (d / f).write_bytes(b"x")
        os.utime(d, (now - days_unused * day,) * 2)
        return d

    keep = made("f" * 24, 400)  # the build just made: kept whatever its time
    old = made("0" * 24, xla.PRUNE_DAYS + 1)
    recent = [made(f"{i:024x}", 2 + i / 100) for i in range(1, xla.PRUNE_KEEP + 3)]
    today = made("a" * 23 + "b", 0.5)  # used within the day: kept, beyond the newest too
    odd_name = made("not-a-build", 400)
    nested = made("1" * 24, 400)
    (nested / "sub").mkdir()
    os.utime(nested, (now - 400 * day,) * 2)  # (the mkdir made it new)
    target = made("2" * 24, 400)
    link = root / ("3" * 24)
    link.symlink_to(target, target_is_directory=True)
    target.rename(tmp_path / "elsewhere")  # the link now dangles: left alone

    removed = set(xla._prune(root, keep, now=now))
    survivors = {p.name for p in root.iterdir()}
    # the newest PRUNE_KEEP - 1 besides the one made, counting today's build
    kept_recent = {d.name for d in recent[:xla.PRUNE_KEEP - 2]}
    assert removed == {old.name} | {d.name for d in recent[xla.PRUNE_KEEP - 2:]}, removed
    assert survivors == {keep.name, today.name, odd_name.name, nested.name, link.name} \
        | kept_recent, survivors
    assert (keep / "libshmatari_xla.so").exists()
    # a cache that cannot be read prunes nothing and raises nothing
    assert xla._prune(tmp_path / "missing", keep, now=now) == []
