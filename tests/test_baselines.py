"""The pipe baseline agrees with shmatari step for step."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import pid_alive, random_actions

import shmatari
from shmatari.baselines import make_pipe

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
