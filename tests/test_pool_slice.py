"""A pool that is a slice of a larger one (``env_index_offset``) and a pool
rebuilt by an outer supervisor (``pool_generation``): the seeding options
that shmatari.ray gives each node's pool."""

from __future__ import annotations

import numpy as np
import pytest

import shmatari
from shmatari import seeding
from shmatari.config import build_config

from conftest import random_actions


def test_slice_replays_those_envs_of_the_whole_pool(no_leaks):
    acts = random_actions(4, 6, 120, seed=2)
    with shmatari.make("Breakout", 6, num_workers=2, seed=3, max_episode_frames=300) as whole, \
            shmatari.make("Breakout", 2, num_workers=1, seed=3, max_episode_frames=300,
                          env_index_offset=4) as part:
        assert np.array_equal(whole.reset()[0][4:], part.reset()[0])
        for t, a in enumerate(acts):
            if t == 60:  # reset(seed=...) re-derives from the offset index too
                assert np.array_equal(whole.reset(seed=5)[0][4:], part.reset(seed=5)[0])
            w, p = whole.step(a), part.step(a[4:])
            assert np.array_equal(w[0][4:], p[0]) and np.array_equal(w[1][4:], p[1])
            assert np.array_equal(w[3][4:], p[3])


def test_pool_generation_changes_every_stream_and_collides_with_none():
    keys = set()
    for i in range(3):
        for restart in range(3):
            for gen in range(3):
                key = seeding._env_key(i, restart, gen)
                keys.add(key)
                keys.add(key + (0,))  # its no-op stream
    assert len(keys) == 3 * 3 * 3 * 2
    assert seeding.ale_seed(0, 1, 0, 1) != seeding.ale_seed(0, 1)
    assert seeding.ale_seed(0, 1, 0, 0) == seeding.ale_seed(0, 1)


def test_seeding_options_are_checked():
    with pytest.raises(ValueError, match="env_index_offset"):
        build_config("Breakout", 4, env_index_offset=2**32 - 3)
    with pytest.raises(TypeError, match="pool_generation"):
        build_config("Breakout", 4, pool_generation=1.5)
    assert build_config("Breakout", 4, env_index_offset=2**32 - 4).env_index_offset == 2**32 - 4
