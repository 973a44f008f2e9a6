"""The pipe baseline agrees with shmatari step for step."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import pid_alive, random_actions

import shmatari
from shmatari.baselines import make_pipe
from shmatari.errors import CallOrderError

pytestmark = pytest.mark.usefixtures("no_leaks")


def _agree(game: str, steps: int, preprocess: str, **options) -> int:
    """Steps shmatari and the pipe baseline side by side; returns the done count."""
    with shmatari.make(game, num_envs=4, num_workers=2, seed=42, **options) as shm_env, \
            make_pipe(game, num_envs=4, seed=42, preprocess=preprocess, **options) as pipe_env:
        obs_a, _ = shm_env.reset()
        obs_b, _ = pipe_env.reset()
        np.testing.assert_array_equal(obs_a, obs_b)
        dones = 0
        for step, a in enumerate(random_actions(shm_env.single_action_space.n, 4, steps, 3)):
            ra = shm_env.step(a)
            rb = pipe_env.step(a)
            for x, y, name in zip(ra[:4], rb[:4], ("obs", "reward", "terminated", "truncated")):
                np.testing.assert_array_equal(x, y, err_msg=f"{game} step {step}: {name}")
            for key in ("lives", "elapsed_step", "frame_number", "episode_frame_number",
                        "raw_reward"):
                np.testing.assert_array_equal(ra[4][key], rb[4][key], err_msg=key)
            dones += int(ra[2].sum() + ra[3].sum())
        return dones


@pytest.mark.parametrize("game", ["Breakout", "Pong"])
def test_classic_pipe_baseline_matches_shmatari_for_1000_steps(game):
    """The classic baseline (ALE's grayscale, NumPy, OpenCV in each worker)
    and shmatari's fused kernel give the same results, step for step."""
    dones = _agree(game, 1000, "opencv")
    assert dones > 0 or game == "Pong"


def test_kernel_pipe_baseline_matches_shmatari():
    assert _agree("Breakout", 300, "kernel") >= 0


def test_classic_pipe_baseline_matches_with_dqn_options_rgb_and_a_frame_cap():
    dones = _agree("Breakout", 400, "opencv", preset="dqn", grayscale=False,
                   max_episode_frames=600)
    assert dones > 0


def test_classic_pipe_baseline_matches_with_channels_first_rgb():
    """The baseline transposes its channels-last stack with NumPy; shmatari's
    kernel writes the channels-first layout planar: the same bytes."""
    assert _agree("Breakout", 200, "opencv", grayscale=False, obs_layout="channels_first") >= 0


def _same_info(a: dict, b: dict, where: str) -> None:
    """Two info dicts agree on every key, values and dtypes (final_obs row by
    row), but the episode's wall time ``t``, which only shmatari measures."""
    assert set(a) - {"t"} == set(b) - {"t"}, where
    for key in set(b) - {"t"}:
        if key == "final_obs":
            for x, y in zip(a[key], b[key]):
                assert (x is None) == (y is None), where
                if x is not None:
                    np.testing.assert_array_equal(x, y, err_msg=f"{where}: final_obs")
        elif isinstance(b[key], dict):
            _same_info(a[key], b[key], f"{where}: {key}")
        else:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{where}: {key}")
            # the same dtypes too (the baseline's uint8 game_over becomes bool)
            assert np.asarray(a[key]).dtype == np.asarray(b[key]).dtype, f"{where}: {key}"


def _same_results(ra, rb, where: str) -> None:
    for x, y, name in zip(ra[:-1], rb[:-1], ("obs", "reward", "terminated", "truncated")):
        np.testing.assert_array_equal(x, y, err_msg=f"{where}: {name}")
    _same_info(ra[-1], rb[-1], where)


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_pipe_baseline_autoreset_modes_match_shmatari_infos_included(mode):
    """The baseline does each autoreset mode in its parent process, as
    Gymnasium's SyncVectorEnv; shmatari does it in its workers. Lost lives
    (terminated) and a frame cap (truncated) end episodes; every result,
    final_obs and final_info included, agrees; in disabled mode a step with
    an ended env is refused by both and masked resets agree."""
    opts = dict(autoreset_mode=mode, episodic_life=True, max_episode_frames=500)
    with shmatari.make("Breakout", num_envs=3, num_workers=2, seed=5, **opts) as shm_env, \
            make_pipe("Breakout", num_envs=3, seed=5, **opts) as pipe_env:
        assert pipe_env.metadata["autoreset_mode"] == shm_env.metadata["autoreset_mode"]
        _same_results(shm_env.reset(), pipe_env.reset(), "reset")
        terminated = truncated = 0
        for step, a in enumerate(random_actions(shm_env.single_action_space.n, 3, 300, 7)):
            ra = shm_env.step(a)
            _same_results(ra, pipe_env.step(a), f"{mode} step {step}")
            done = ra[2] | ra[3]
            terminated, truncated = terminated + ra[2].sum(), truncated + ra[3].sum()
            if mode == "same_step":
                assert (ra[-1].get("_final_obs", np.zeros(3, bool)) == done).all()
            if mode == "disabled" and done.any():
                for env in (shm_env, pipe_env):
                    with pytest.raises(CallOrderError, match="disabled"):
                        env.step(a)
                _same_results(shm_env.reset(options={"reset_mask": done}),
                              pipe_env.reset(options={"reset_mask": done}),
                              f"masked reset after step {step}")
        assert terminated > 0 and truncated > 0


def test_pipe_baseline_refuses_render_mode_and_an_early_masked_reset():
    with pytest.raises(ValueError, match="render"):
        make_pipe("Pong", num_envs=1, seed=0, render_mode="rgb_array")
    with make_pipe("Pong", num_envs=2, seed=0) as env:
        with pytest.raises(CallOrderError, match="reset"):
            env.reset(options={"reset_mask": np.array([True, False])})
        env.reset()
        with pytest.raises(ValueError, match="seed"):
            env.reset(seed=1, options={"reset_mask": np.array([True, False])})
        obs = env.step([0, 1])[0]
        again, info = env.reset(options={"reset_mask": np.array([False, True])})
        np.testing.assert_array_equal(again[0], obs[0])  # env 0: observed, not reset
        assert info["reset"].tolist() == [False, True]


def test_pipe_baseline_refuses_unknown_preprocessing():
    with pytest.raises(ValueError, match="preprocess"):
        make_pipe("Pong", num_envs=1, seed=0, preprocess="pillow")


def test_pipe_baseline_closes_its_processes():
    env = make_pipe("Pong", num_envs=2, seed=0)
    pids = list(env.worker_pids)
    env.reset()
    env.step([0, 1])
    env.close()
    assert not any(pid_alive(p) for p in pids)
    with pytest.raises(TypeError, match="stack_num"):
        make_pipe("Pong", num_envs=2, seed=0, stack_numm=3)


def test_pipe_baseline_close_ends_a_stopped_worker_and_the_interpreter_exits(tmp_path):
    """close() with a pipe worker stopped (SIGSTOP) sent it SIGTERM, which a
    stopped process keeps pending, so it lived on, and multiprocessing's
    exit handler joined it without a limit: the interpreter never exited
    (``shmatari-bench --backends pipe`` after Ctrl-C, a signal pass). A
    worker still alive after SIGTERM is killed now."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "stopped_pipe.py"
    script.write_text(
        "import os, signal\n"
        "from shmatari.baselines import make_pipe\n"
        "if __name__ == '__main__':\n"
        "    env = make_pipe('Pong', num_envs=2, seed=0)\n"
        "    env.reset()\n"
        "    print(*env.worker_pids, flush=True)\n"
        "    os.kill(env.worker_pids[0], signal.SIGSTOP)\n"
        "    env.close()\n")
    pids_file = tmp_path / "pids"
    with open(pids_file, "w") as out:  # not a pipe: a stopped worker would hold it open
        proc = subprocess.Popen([sys.executable, str(script)], stdout=out,
                                stderr=subprocess.DEVNULL)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        pids = [int(p) for p in pids_file.read_text().split()]
        for pid in pids if proc.poll() is None else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, "the interpreter did not exit within 30 s"
    assert len(pids) == 2 and not any(pid_alive(p) for p in pids)
