"""Client code of the gym era and Gymnasium's own vector envs on shmatari:
a script in CleanRL's EnvPool style (gym 0.2x API: env_type="gym", 4-tuple
step, obs-only reset, info["TimeLimit.truncated"]) runs with only its import
changed; gymnasium.make_vec's "sync" and "async" modes of the single-env id.
Our own code, written in the style of CleanRL's ppo_atari_envpool.py /
pqn_atari_envpool.py (not a copy)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import gymnasium
import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("no_leaks")

# Written against EnvPool 0.6-0.8's gym API; `gym` when installed, else
# Gymnasium under that name (the spaces follow: gym's, else Gymnasium's).
SCRIPT = textwrap.dedent('''
    import numpy as np
    import torch
    import envpool
    try:
        import gym
    except ImportError:
        import gymnasium as gym


    class RecordEpisodeStatistics(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.num_envs = getattr(env, "num_envs", 1)

        def reset(self, **kwargs):
            observations = super().reset(**kwargs)
            self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
            self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)
            return observations

        def step(self, action):
            observations, rewards, dones, infos = super().step(action)
            self.episode_returns += infos["reward"]
            self.episode_lengths += 1
            infos["r"] = self.episode_returns.copy()
            infos["l"] = self.episode_lengths.copy()
            self.episode_returns *= 1 - infos["terminated"]
            self.episode_lengths *= 1 - infos["terminated"]
            return observations, rewards, dones, infos


    num_envs, num_steps = 4, 64
    envs = envpool.make("Breakout-v5", env_type="gym", num_envs=num_envs, episodic_life=True,
                        reward_clip=True, seed=1, max_episode_steps=40)
    envs.num_envs = num_envs
    envs.single_action_space = envs.action_space
    envs.single_observation_space = envs.observation_space
    # (Gymnasium's Wrapper, unlike gym's, forwards no other attribute: take them first.)
    single_action_space, single_observation_space = envs.action_space, envs.observation_space
    envs = RecordEpisodeStatistics(envs)
    assert isinstance(envs.action_space, gym.spaces.Discrete), "only discrete action space is supported"
    policy = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 84 * 84, single_action_space.n))
    obs = torch.zeros((num_steps, num_envs) + single_observation_space.shape)
    dones = torch.zeros((num_steps, num_envs))
    next_obs = torch.Tensor(envs.reset())
    next_done = torch.zeros(num_envs)
    games = truncations = 0
    for step in range(num_steps):
        obs[step], dones[step] = next_obs, next_done
        with torch.no_grad():
            action = torch.distributions.Categorical(logits=policy(next_obs / 255.0)).sample()
        next_obs, reward, done, info = envs.step(action.cpu().numpy())
        next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(done)
        truncations += int(info["TimeLimit.truncated"].sum())
        for idx, d in enumerate(done):
            if d and (info["lives"][idx] == 0 or info["TimeLimit.truncated"][idx]):
                games += 1
                print(f"episodic_return={info['r'][idx]} episodic_length={info['l'][idx]}")
    envs.close()
    print(f"steps={num_steps * num_envs} games={games} truncations={truncations} dones={int(dones.sum())}")
''')


def test_cleanrl_style_gym_api_script_runs_with_only_the_import_changed(tmp_path):
    path = tmp_path / "gym_api_shmatari.py"
    source = SCRIPT.replace("\nimport envpool\n", "\nimport shmatari.envpool as envpool\n")
    assert source != SCRIPT
    path.write_text(source)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    counts = dict(kv.split("=") for kv in last.split())
    # 40 steps at most (160 frames, no-ops and FIRE included): every env's
    # first episode is cut short within the 64 steps.
    assert int(counts["steps"]) == 256
    assert int(counts["truncations"]) >= 4 and int(counts["games"]) >= 4
    assert "episodic_return=" in out.stdout


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_sync_and_async_modes_of_the_single_env_id(mode):
    import shmatari.registration  # noqa: F401

    # 100 frames, no no-ops: each env's game is truncated at step 25, and
    # Gymnasium's next-step autoreset resets it at step 26.
    env = gymnasium.make_vec("shmatari/Breakout-v5", num_envs=2, vectorization_mode=mode,
                             noop_max=0, max_num_frames_per_episode=100,
                             repeat_action_probability=0.0)
    try:
        assert type(env).__name__ == ("SyncVectorEnv" if mode == "sync" else "AsyncVectorEnv")
        obs, info = env.reset(seed=3)
        assert obs.shape == (2, 4, 84, 84) and info["lives"].tolist() == [5, 5]
        for t in range(1, 27):
            obs, reward, terminated, truncated, info = env.step(np.array([1, 3]))
            assert truncated.tolist() == [t == 25] * 2 and not terminated.any()
        assert info["elapsed_step"].tolist() == [0, 0]           # step 26: the reset
        assert all(np.array_equal(obs[i, 0], obs[i, 3]) for i in range(2))
    finally:
        env.close()
