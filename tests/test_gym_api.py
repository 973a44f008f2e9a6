"""The Gymnasium VectorEnv surface of a plain pool: episode statistics left to
Gymnasium's wrapper, ``call`` / ``get_attr`` / ``set_attr``."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import shmatari

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.mark.parametrize("autoreset_mode", ["next_step", "same_step"])
def test_episode_statistics_false_leaves_episode_to_record_episode_statistics(autoreset_mode):
    # 200 frames with no no-ops: each game is truncated at step 50, so both
    # sides see the same episodes.
    opts = dict(num_envs=2, num_workers=1, seed=3, noop_max=0, max_episode_frames=200,
                autoreset_mode=autoreset_mode)
    plain = shmatari.make("Breakout", episode_statistics=False, **opts)
    own = shmatari.make("Breakout", **opts)
    env = RecordEpisodeStatistics(plain)
    try:
        assert plain.config.episode_statistics is False
        env.reset()
        own.reset()
        ours, theirs = [], []
        for _ in range(110):
            actions = np.array([1, 3])
            _, _, _, _, info = env.step(actions)
            _, _, _, _, mine = own.step(actions)
            assert "episode" not in info.get("final_info", {})
            if "episode" in info:
                theirs += info["episode"]["r"][info["_episode"]].tolist()
            if "episode" in mine:
                ours += mine["episode"]["r"][mine["_episode"]].tolist()
        assert len(ours) == 4 and ours == theirs
    finally:
        env.close()
        own.close()


def test_episode_statistics_must_be_a_bool():
    with pytest.raises(TypeError, match="episode_statistics must be a bool"):
        shmatari.make("null", 1, episode_statistics="no")


def test_call_get_attr_set_attr_answer_what_the_envs_have():
    with shmatari.make("Breakout", 3, num_workers=1, seed=0, frame_skip=3) as env:
        assert env.get_attr("frame_skip") == (3, 3, 3)
        assert env.get_attr("render_mode") == (None,) * 3
        assert env.get_attr("action_space") == (env.single_action_space,) * 3
        assert env.get_attr("observation_space")[0].shape == (4, 84, 84)
        assert env.call("get_action_meanings") == (["NOOP", "FIRE", "RIGHT", "LEFT"],) * 3
        assert env.get_attr("game") == ("breakout",) * 3
        with pytest.raises(AttributeError, match="no attribute 'lives'.*frame_skip"):
            env.get_attr("lives")
        with pytest.raises(TypeError, match="not a method"):
            env.call("frame_skip", 1)
        with pytest.raises(AttributeError, match="fixed when the pool is made"):
            env.set_attr("frame_skip", [2, 2, 2])
        with pytest.raises(AttributeError, match="no attributes to set"):
            env.set_attr("note", "x")
