"""Regression tests of issue 25 (an attacker's and a new user's pass): no
foreign unlink, every wait bounded and its timeout checked, clean errors
for the command line's extremes and for crafted action sets, and messages
that name the right thing. Real servers, workers and shared memory."""

from __future__ import annotations

import fcntl
import math
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import pid_alive, shm_entries
from test_cli import assert_usage_error, run
from test_server import Server, _segment_path, _wait_until

import shmatari
from shmatari import _core
from shmatari.config import build_config
from shmatari.env import ShmVectorEnv

pytestmark = pytest.mark.usefixtures("no_leaks")
LINUX = sys.platform.startswith("linux")
HEADER = _core.struct_layout()["shmatari_header"]


# -- item 2: a stale worker never removes a new server's segment --------------------

@pytest.mark.skipif(not LINUX, reason="PR_SET_PDEATHSIG and /dev/shm inodes (Linux)")
def test_stale_worker_of_a_killed_server_leaves_the_new_servers_segment(tmp_path):
    """Server A's owner is killed -9 while its worker is busy (stopped here,
    as a huge noop_max would keep it); server B takes the name; A's worker,
    running again, finds its owner gone and must remove only A's segment
    (already unlinked by B), not B's, which has the same name. Under
    forkserver, whose workers have no parent-death signal: under the other
    start methods that signal (SIGCONT) resumes a stopped worker at once."""
    a = Server(tmp_path, "--start-method", "forkserver", num_envs=1, num_workers=1)
    worker = a.worker_pids[0]
    b = None
    try:
        os.kill(worker, signal.SIGSTOP)
        a.proc.kill()
        a.proc.wait()
        b = Server(tmp_path, num_envs=1, num_workers=1, name=a.name)
        assert "left by a server that is gone" in b.stderr()
        os.kill(worker, signal.SIGCONT)
        _wait_until(lambda: not pid_alive(worker), 60.0, "the old worker did not exit")
        assert _segment_path(b.segment).exists(), "the old worker removed the new segment"
        with shmatari.attach(b.name, timeout=30) as env:
            obs, _ = env.reset()
            assert obs.shape[0] == 1
        assert b.stop(signal.SIGINT) == 0, b.stderr()
        b.assert_gone()
    finally:
        if pid_alive(worker):
            os.kill(worker, signal.SIGCONT)
        a.stop(signal.SIGKILL)
        if b is not None:
            b.stop(signal.SIGKILL)
            b.assert_gone()


def test_unlink_own_leaves_a_file_that_replaced_the_name(tmp_path):
    """The rule itself: only the inode this process holds is removed."""
    from shmatari import shm

    name = f"shmatari_{os.getpid()}_0ddf11e5"
    first = shm.create(name, 4096)
    ident = shm.identity(first)
    try:
        assert shm.unlink(name)  # as serve's stale-name removal does
        second = shm.create(name, 4096)
        try:
            assert not shm.unlink_own(name, ident)
            assert _segment_path(name).exists()
            assert shm.unlink_own(name, shm.identity(second))
            assert not _segment_path(name).exists()
        finally:
            second.close()
    finally:
        first.close()
    assert name not in shm_entries()


# -- item 3: every wait bounded, every timeout checked --------------------------------

def test_reset_after_a_step_timeout_on_a_stopped_worker_is_bounded_and_names_it():
    with shmatari.make("Breakout", 4, num_workers=2, seed=1) as env:
        env.reset()
        stuck = env.worker_pids[0]
        os.kill(stuck, signal.SIGSTOP)
        try:
            with pytest.raises(shmatari.StepTimeoutError, match=f"pid {stuck}") as info:
                env.step(np.zeros(4, np.int64), timeout=0.2)
            # in the words of the call made (it said recv(), a newcomer's pass)
            text = str(info.value)
            assert text.startswith("step() got no batch of 4 result(s) within 0.2 s"), text
            assert "its actions were sent and the pool is unchanged: recv() to go on" in text
            with pytest.raises(shmatari.StepTimeoutError) as info:
                env.recv(timeout=0)
            assert str(info.value).startswith("recv(timeout=0): no batch of 4 result(s) is "
                                              "ready yet; the pool is unchanged: recv() again")
            with pytest.raises(shmatari.StepTimeoutError) as info:
                env.reset(timeout=0.5)
            text = str(info.value)
            assert f"worker 0 (pid {stuck})" in text and "envs 0, 1" in text, text
            assert "nothing was dropped" in text
            with pytest.raises(shmatari.StepTimeoutError, match=f"pid {stuck}"):
                env.reset(seed=3, timeout=0)  # the seed is put back: nothing changed
            assert env.seed_entropy == 1
        finally:
            os.kill(stuck, signal.SIGCONT)
        obs, info = env.reset()  # the default bound; the worker answers again
        assert obs.shape[0] == 4 and list(info["env_id"]) == [0, 1, 2, 3]


def _first_frame_numbers(seed: int) -> np.ndarray:
    with shmatari.make("Breakout", 8, num_workers=1, seed=0) as env:
        return env.reset(seed=seed)[1]["episode_frame_number"]


def test_a_reseed_that_timed_out_or_was_interrupted_changes_no_envs_stream():
    """reset(seed=2) that times out says nothing was reset, so no env may
    follow seed 2's streams. Until 2026-12-05 (an attacker's pass) the new
    seed words were written before the wait for the commands in flight:
    reseeds still in flight from async_reset(seed=1), served during that
    wait, derived their streams from seed 2, and the words were then put
    back to 1. Here worker 0 (envs 0-3) is resumed during the wait and worker
    1 (envs 4-7) stays stopped past it. Envs are told apart by their no-op
    counts (episode_frame_number of the first observation). A signal
    handler's exception during the wait changes nothing either."""
    import threading

    ref1, ref2 = _first_frame_numbers(1), _first_frame_numbers(2)
    assert not np.array_equal(ref1[:4], ref2[:4])  # the test can see a wrong seed
    with shmatari.make("Breakout", 8, num_workers=2, seed=0) as env:
        env.reset()
        w0, w1 = env.worker_pids
        os.kill(w0, signal.SIGSTOP)
        os.kill(w1, signal.SIGSTOP)
        try:
            env.async_reset(seed=1)
            timer = threading.Timer(0.3, os.kill, (w0, signal.SIGCONT))
            timer.start()
            try:
                with pytest.raises(shmatari.StepTimeoutError, match="nothing was dropped"):
                    env.reset(seed=2, timeout=3.0)
            finally:
                timer.join()

            class Interrupt(Exception):
                pass

            def interrupt(signum, frame):
                raise Interrupt

            old = signal.signal(signal.SIGALRM, interrupt)
            try:
                signal.setitimer(signal.ITIMER_REAL, 0.3)
                with pytest.raises(Interrupt):
                    env.reset(seed=3, timeout=None)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
            assert env.seed_entropy == 1
        finally:
            os.kill(w0, signal.SIGCONT)
            os.kill(w1, signal.SIGCONT)
        info = env.recv(timeout=60)[4]
        order = np.argsort(info["env_id"])
        np.testing.assert_array_equal(info["episode_frame_number"][order], ref1)


@pytest.mark.parametrize("timeout, error", [
    (-1, ValueError), (math.nan, ValueError), (math.inf, ValueError), (-math.inf, ValueError),
    (True, TypeError), ("1", TypeError), (None, TypeError)])
def test_attach_timeout_is_checked_before_anything(timeout, error):
    with pytest.raises(error, match="timeout must be"):
        shmatari.attach("nosuchpool", timeout=timeout)


@pytest.mark.parametrize("start_timeout", [0, -1, math.nan, math.inf])
def test_make_start_timeout_must_be_finite_and_positive(start_timeout):
    with pytest.raises(ValueError, match="start_timeout must be a finite number"):
        shmatari.make("null", 1, start_timeout=start_timeout)


@pytest.mark.parametrize("timeout", [-1, math.nan, True, "1"])
def test_step_recv_reset_timeouts_are_checked(timeout):
    with shmatari.make("null", 2, num_workers=1) as env:
        env.reset()
        for call in (lambda: env.reset(timeout=timeout), lambda: env.async_reset(timeout=timeout),
                     lambda: env.step([0, 0], timeout=timeout), lambda: env.recv(timeout=timeout)):
            with pytest.raises((TypeError, ValueError), match="timeout must be"):
                call()
        assert env.reset()[0].shape[0] == 2  # nothing was changed


@pytest.mark.parametrize("seconds", [math.nan, -1.0, -1e-9])
def test_nan_and_negative_never_reach_the_c_waits(seconds):
    with pytest.raises(ValueError, match="timeout must be"):
        _core.timeout_to_ns(seconds)
    assert _core.timeout_to_ns(math.inf) == -1 and _core.timeout_to_ns(1.5) == 1_500_000_000


@pytest.mark.skipif(not LINUX, reason="flock on /dev/shm files (Linux)")
def test_attach_is_bounded_while_another_process_holds_an_exclusive_lock():
    name = f"lock{os.getpid()}"
    path = _segment_path(_core.segment_name(name))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, bytes(4096))
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A subprocess: a regression would hang it, not the suite.
        code = textwrap.dedent(f"""
            import shmatari
            try:
                shmatari.attach({name!r}, timeout=0.3)
            except shmatari.AttachError as e:
                print(e.code, e)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120)
        assert out.stdout.startswith("timeout "), (out.stdout, out.stderr)
        assert "locked exclusively by another process" in out.stdout
    finally:
        os.close(fd)
        path.unlink()


# -- item 5: clean errors for the command line's extremes and crafted action sets -----

@pytest.mark.parametrize("flag, value, needle", [
    ("--frame-skip", "1025", "frame_skip must be <= 1024"),
    ("--stack-num", "257", "stack_num must be <= 256"),
    ("--num-envs", "65537", "num_envs must be <= 65536")])
def test_serve_refuses_layout_extremes_with_a_usage_error(flag, value, needle):
    proc = subprocess.Popen([sys.executable, "-m", "shmatari.cli", "serve", "Breakout", flag,
                             value], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert_usage_error(subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
                       "shmatari serve: error:", needle)
    assert not shm_entries(proc.pid)


@pytest.mark.parametrize("case", ["no_actions", "unknown_action_id", "repeated_action_id"])
def test_crafted_action_set_gives_attach_error(case):
    name = f"act{os.getpid()}{case[:3]}"
    owner = ShmVectorEnv(build_config("null", 2, num_workers=1),
                         segment_name=_core.segment_name(name), claim=False)
    try:
        buf = owner._res.segment.buf
        if case == "no_actions":
            np.ndarray((), np.uint32, buffer=buf, offset=HEADER["num_actions"])[...] = 0
        else:
            ids = np.ndarray((2,), np.int32, buffer=buf, offset=HEADER["action_set"])
            ids[0] = 99 if case == "unknown_action_id" else ids[1]
        with pytest.raises(shmatari.AttachError, match="action set") as info:
            shmatari.attach(name, timeout=30)
        assert info.value.code == "not_shmatari"
        if case == "no_actions":  # refused by the C client's open, as a C trainer is
            assert "its action set has 0 actions, not 1 to 18" in str(info.value)
    finally:
        owner.close()


def test_num_actions_changed_after_the_c_client_read_it_changes_nothing(monkeypatch):
    """The action space comes from the count the C client read once at
    attach (which bounds the actions it accepts), not from a second read of
    the header: a writer that changes ``num_actions`` between the two reads
    (here, just before the Python client reads the header) cannot make the
    space disagree with the actions accepted (before: Discrete(2), while
    action 3 was accepted)."""
    from shmatari import _vector_env

    name = f"actn{os.getpid()}"
    owner = ShmVectorEnv(build_config("null", 2, num_workers=1),
                         segment_name=_core.segment_name(name), claim=False)
    buf = owner._res.segment.buf
    word = np.ndarray((), np.uint32, buffer=buf, offset=HEADER["num_actions"])
    assert int(word) == 4

    class RacedClient(_vector_env.Client):
        def __init__(self, *args, **kwargs):
            word[...] = 2  # a valid count, with a valid action set
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(_vector_env, "Client", RacedClient)
    try:
        with shmatari.attach(name, timeout=30) as env:
            assert env.single_action_space.n == 4
            assert list(env.action_set) == [0, 1, 2, 3]
            env.reset()
            env.step(np.full(2, 3))  # accepted, as the space says
            with pytest.raises(ValueError, match="out of range"):
                env.step(np.full(2, 4))
    finally:
        owner.close()


def test_get_action_meanings_labels_ids_ale_does_not_know():
    with shmatari.make("null", 1, num_workers=1) as env:
        env.action_set = [0, 1, 99]
        assert env.get_action_meanings() == ["NOOP", "FIRE", "UNKNOWN_99"]


# -- item 6: messages that name the right thing ----------------------------------------

@pytest.mark.parametrize("n", [1, 3])
def test_async_step_with_a_wrong_count_names_both_accepted_shapes(n):
    with shmatari.make("null", 4, batch_size=2, num_workers=1) as env:
        env.reset()
        with pytest.raises(ValueError) as info:
            env.step(np.zeros(n, np.int64))
        assert "(4,)" in str(info.value) and "(2,)" in str(info.value), info.value


def test_envpool_step_with_fewer_actions_than_env_ids_is_a_value_error():
    import shmatari.envpool as envpool

    with envpool.make("Pong-v5", num_envs=3, num_threads=1) as env:
        env.reset()
        with pytest.raises(ValueError, match=r"shape \(3,\)"):
            env.step(np.zeros(2, np.int64), np.arange(3))


def test_step_before_reset_of_a_made_pool_says_it_was_not_reset_yet():
    with shmatari.make("null", 2, num_workers=1) as env:
        with pytest.raises(shmatari.CallOrderError) as info:
            env.step([0, 0])
        assert "not been reset yet" in str(info.value)
        assert "attached:" not in str(info.value)


def test_check_num_envs_0_names_the_real_minimum():
    proc = run("shmatari-check", "--num-envs", "0")
    assert_usage_error(proc, "num_envs must be >= 2")
    proc = run("shmatari-check", "--num-envs", "0", "--pairings", "rerun")
    assert_usage_error(proc, "num_envs must be >= 1")


def test_refused_second_server_is_not_logged_as_an_attach_by_the_first(tmp_path):
    first = Server(tmp_path, num_envs=2, num_workers=1)
    try:
        proc = subprocess.run([sys.executable, "-m", "shmatari.cli", "serve", "Breakout",
                               "--name", first.name], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 1 and "the name is taken" in proc.stderr, proc.stderr
        me = os.getpid()
        with shmatari.attach(first.name, timeout=30):  # events the first server sees after
            _wait_until(lambda: f"client pid {me} attached" in first.stderr(), 30.0,
                        "no attach logged", log=first.stderr)
        _wait_until(lambda: f"client pid {me} detached" in first.stderr(), 30.0,
                    "no detach logged", log=first.stderr)
        assert first.stop(signal.SIGINT) == 0
        assert "without being seen" not in first.stderr(), first.stderr()
        first.assert_gone()
    finally:
        first.stop(signal.SIGKILL)
