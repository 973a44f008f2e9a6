"""RLlib's PPO (new API stack) trains on shmatari pools, as docs/migration.md's
"From RLlib" recipe makes them: one pool of ``num_envs_per_env_runner`` envs
per EnvRunner (``gym_env_vectorize_mode="vector_entry_point"``), next-step
autoreset (what SingleAgentEnvRunner expects), frames moved channels last and
scaled to float32 for RLlib's CNN encoder."""

from __future__ import annotations

import os

import numpy as np
import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
torch = pytest.importorskip("torch")
# ray.rllib imports ray.tune, which raises ImportError (not ModuleNotFoundError)
# when ray[rllib]'s own dependencies (pandas, pyarrow, ...) are missing.
pytest.importorskip("ray.rllib.algorithms.ppo", exc_type=ImportError)

import gymnasium as gym  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.tune.registry import register_env  # noqa: E402

import shmatari  # noqa: E402
from shmatari.seeding import worker_seed  # noqa: E402
from conftest import pid_alive, shm_entries, wait_until  # noqa: E402

SEED = 3
#: Envs per EnvRunner, steps each per iteration: 200 env steps an iteration.
NUM_ENVS, FRAGMENT = 4, 50
#: 100 frames at 4 a step and no no-ops: every episode is truncated at step 25.
EPISODE_STEPS = 25


@pytest.fixture
def local_ray():
    # address="local": a Ray instance of this test's own, never a cluster
    # another process on the machine happens to run.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ppo_trains_on_shmatari_pools_and_stop_leaves_nothing(local_ray):
    class PoolSeed(gym.vector.VectorWrapper):
        """docs/migration.md's: RLlib's SEED + w becomes worker_seed(SEED, w)
        (defined here: RLlib's actors unpickle it by value, not from this
        test module, which they cannot import)."""

        def __init__(self, env, base):
            super().__init__(env)
            self.base = base

        def reset(self, *, seed=None, options=None):
            if seed is not None:
                seed = worker_seed(self.base, seed - self.base)
            return self.env.reset(seed=seed, options=options)

    def make_pool(config):
        # RLlib calls this once per EnvRunner with env_config plus num_envs.
        pool = shmatari.make("Breakout", num_envs=config["num_envs"], num_workers=1,
                             noop_max=0, max_episode_frames=4 * EPISODE_STEPS,
                             episode_statistics=False)
        space = gym.spaces.Box(0.0, 1.0, (84, 84, 4), np.float32)
        return PoolSeed(gym.wrappers.vector.TransformObservation(
            pool, lambda obs: np.moveaxis(obs, 1, -1).astype(np.float32) / 255.0,
            single_observation_space=space), config["seed"])

    register_env("shmatari-breakout", make_pool)
    config = (
        PPOConfig()
        .environment("shmatari-breakout", env_config={"seed": SEED})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=NUM_ENVS,
                     gym_env_vectorize_mode="vector_entry_point",
                     rollout_fragment_length=FRAGMENT)
        .training(train_batch_size_per_learner=NUM_ENVS * FRAGMENT, minibatch_size=100,
                  num_epochs=1)
        .debugging(seed=SEED)
    )
    algo = config.build_algo()
    try:
        ((runner_pid, segment, worker_pids, shape),) = algo.env_runner_group.foreach_env_runner(
            lambda r: (os.getpid(), r.env.unwrapped.segment_name, r.env.unwrapped.worker_pids,
                       r.env.single_observation_space.shape),
            local_env_runner=False)
        assert runner_pid != os.getpid()              # the pool lives in the EnvRunner actor
        assert segment in shm_entries(runner_pid) and len(worker_pids) == 1
        assert shape == (84, 84, 4)
        owned = [p.pid for p in psutil.Process(runner_pid).children(recursive=True)]
        assert set(worker_pids) <= set(owned)
        # RLlib's CNN reads (H, W, C): the stack must be its 4 input channels
        # (channels first, it would take 84 channels of 4 x 84 images, silently).
        conv = next(m for m in algo.get_module().modules() if isinstance(m, torch.nn.Conv2d))
        assert conv.in_channels == 4

        results = [algo.train() for _ in range(2)]
        for r in results:
            assert r["env_runners"]["num_env_steps_sampled"] == NUM_ENVS * FRAGMENT
            assert np.isfinite(r["learners"]["default_policy"]["total_loss"])
        runners = results[-1]["env_runners"]
        assert runners["num_env_steps_sampled_lifetime"] == 2 * NUM_ENVS * FRAGMENT
        # Next-step autoreset: RLlib takes the step after a done step as the
        # next episode's reset, so every episode has its 25 steps (under
        # same_step it would lose the first step of every later episode).
        assert runners["num_episodes_lifetime"] == 2 * NUM_ENVS * FRAGMENT // EPISODE_STEPS
        assert runners["episode_len_min"] == runners["episode_len_max"] == EPISODE_STEPS
        # The pool played the recipe's seed, not RLlib's SEED + worker_index
        # (runner 1 of this run and runner 0 of a run with SEED + 1 alike).
        ((index, played),) = algo.env_runner_group.foreach_env_runner(
            lambda r: (r.worker_index, r.env.unwrapped.seed_entropy), local_env_runner=False)
        assert index == 1 and played == worker_seed(SEED, 1) != SEED + 1
    finally:
        algo.stop()
    # stop() closes each EnvRunner's env: its segment and its processes go.
    assert wait_until(lambda: not shm_entries(runner_pid), 10), shm_entries(runner_pid)
    assert wait_until(lambda: not any(map(pid_alive, owned)), 10), \
        [p for p in owned if pid_alive(p)]
