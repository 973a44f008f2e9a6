"""shmatari.puffer: the vector-env contract PufferLib 3.0's trainer relies on
(``PuffeRL`` in ``pufferlib/pufferl.py``), on real pools. PufferLib itself
does not install from the package registries (its sdist downloads raylib
from GitHub while building), so these tests check what PuffeRL reads:
each batch a contiguous run of ids, always the same envs; actions reaching
the env of their row; a done row already holding the next episode's first
observation; episode statistics as a list of flat dicts."""

from __future__ import annotations

import numpy as np
import pytest

import shmatari
import shmatari.puffer
from shmatari.errors import CallOrderError

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_each_batch_is_a_contiguous_run_of_ids_always_the_same_envs():
    with shmatari.puffer.make("Pong", num_envs=8, batch_size=4, seed=0, num_workers=2) as env:
        assert (env.num_agents, env.agents_per_batch) == (8, 4)
        assert env.observation_space.shape == (4, 4, 84, 84)
        assert env.action_space.shape == (4,)
        env.async_reset(seed=1)
        blocks = []
        for t in range(8):
            obs, reward, terminated, truncated, infos, ids, mask = env.recv()
            assert obs.shape == (4, 4, 84, 84) and obs.dtype == np.uint8
            assert reward.dtype == np.float32 and terminated.dtype == bool
            assert ids.dtype == np.int64 and mask.dtype == bool and mask.all()
            assert isinstance(infos, list)
            np.testing.assert_array_equal(ids, np.arange(ids[0], ids[0] + 4))
            blocks.append(int(ids[0]))
            env.send(np.zeros(4, np.int64))
        assert blocks == [0, 4] * 4  # the two groups in turn, each its own block


def test_actions_reach_the_env_of_their_row_as_in_a_plain_pool():
    """The adapter's id ``a`` is pool env ``e`` with ``a = (e % G) * B + e // G``:
    stepped with actions chosen per PufferLib id, every env's observations
    are those of a plain pool (same seed, same options) whose env ``e`` gets
    the same actions. A wrong mapping gives some env another's actions."""
    rng = np.random.default_rng(0)
    table = rng.integers(0, 6, (40, 8))  # [step, PufferLib id]
    kw = dict(num_envs=8, batch_size=4, seed=5, num_workers=2, autoreset_mode="same_step",
              batch_order="fixed")
    with shmatari.puffer.make("Pong", **kw) as env, shmatari.make("Pong", **kw) as plain:
        env.async_reset()
        plain.async_reset()
        steps = np.zeros(8, int)
        for _ in range(40):
            obs, *_, ids, _ = env.recv()
            pobs, _, _, _, pinfo = plain.recv()
            e = pinfo["env_id"]
            np.testing.assert_array_equal(env.agent_ids(e), ids)
            np.testing.assert_array_equal(obs, pobs)
            env.send(table[steps[ids], ids])
            plain.send(table[steps[env.agent_ids(e)], env.agent_ids(e)], e)
            steps[ids] += 1
        assert (steps == 20).all()  # 40 batches of 4 rows over 8 envs
        # env 1 is agent 4: the mapping is not the identity
        assert int(env.agent_ids(np.array([1]))[0]) == 4


def test_a_done_row_holds_the_next_episodes_first_observation():
    """PuffeRL reads ``done[t + 1]`` with the observation of step ``t + 1``:
    the row that ends a game is the new game's first (same-step autoreset);
    the game's statistics come as one flat dict each."""
    with shmatari.puffer.make("Pong", num_envs=4, batch_size=2, seed=0, num_workers=2,
                              max_episode_steps=5) as env:
        env.async_reset()
        games = 0
        for t in range(24):
            obs, reward, terminated, truncated, infos, ids, mask = env.recv()
            done = terminated | truncated
            if done.any():
                # a new game's frame stack: every frame is its first frame
                for row in np.flatnonzero(done):
                    assert all((obs[row, k] == obs[row, -1]).all() for k in range(3))
            assert len(infos) == int(done.sum())
            for info in infos:
                assert set(info) == {"episode_return", "episode_length"}
                assert info["episode_length"] == 5 and isinstance(info["episode_return"], float)
            games += len(infos)
            env.send(np.ones(2, np.int64))
        assert games == 8  # 12 steps per env, a game of 5 ended twice each


def test_what_puffer_cannot_store_is_refused_before_a_pool_starts():
    with pytest.raises(ValueError, match="batch_size must divide num_envs"):
        shmatari.puffer.make("Pong", num_envs=6, batch_size=4)
    # a float was refused as a batch_size that does not divide it (a docs review)
    with pytest.raises(TypeError, match="num_envs must be an int, got float 8.0"):
        shmatari.puffer.make("Pong", num_envs=8.0)
    with pytest.raises(TypeError, match="batch_size must be an int, got str"):
        shmatari.puffer.make("Pong", num_envs=8, batch_size="4")
    with pytest.raises(ValueError, match="autoreset_mode='next_step': PuffeRL needs "
                                         "autoreset_mode='same_step'"):
        shmatari.puffer.make("Pong", num_envs=4, autoreset_mode="next_step")
    with pytest.raises(ValueError, match="batch_order='first_ready'"):
        shmatari.puffer.make("Pong", num_envs=4, batch_size=2, batch_order="first_ready")
    with shmatari.puffer.make("Pong", num_envs=2, seed=0, num_workers=1) as env:
        with pytest.raises(CallOrderError, match="send\\(\\) before recv\\(\\)"):
            env.send(np.zeros(2, np.int64))
        obs, infos = env.reset(seed=0)
        assert obs.shape == (2, 4, 84, 84) and infos == []
        obs, reward, terminated, truncated, infos = env.step(np.zeros(2, np.int64))
        assert reward.shape == (2,)
