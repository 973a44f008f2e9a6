"""``obs_layout="channels_first"``: RGB observations written planar by the
frame kernel, bit-identical to the channels-last ones transposed."""

from __future__ import annotations

import numpy as np
import pytest

import shmatari

pytestmark = pytest.mark.usefixtures("no_leaks")


def _to_first(obs: np.ndarray) -> np.ndarray:
    b, s, h, w, c = obs.shape
    return obs.transpose(0, 1, 4, 2, 3).reshape(b, s * c, h, w)


# One size per path of the kernel: general area (84x84), 2x2 blocks (105x80),
# other integer blocks (70x40), copy (210x160).
@pytest.mark.parametrize("size", [(84, 84), (105, 80), (70, 40), (210, 160)])
def test_channels_first_equals_channels_last_transposed(size):
    opts = dict(num_envs=2, num_workers=1, seed=5, grayscale=False, stack_num=2,
                img_height=size[0], img_width=size[1], max_episode_frames=120,
                autoreset_mode="same_step")
    last = shmatari.make("Breakout", **opts)
    first = shmatari.make("Breakout", obs_layout="channels_first", **opts)
    try:
        assert first.single_observation_space.shape == (6,) + size
        assert first.config.obs_shape == (6,) + size
        a, _ = last.reset()
        b, _ = first.reset()
        assert b.shape == (2, 6) + size and np.array_equal(b, _to_first(a))
        rng = np.random.default_rng(0)
        finals = 0
        for _ in range(40):
            actions = rng.integers(0, 4, 2)
            a, ra, *_, ia = last.step(actions)
            b, rb, *_, ib = first.step(actions)
            assert np.array_equal(b, _to_first(a)) and np.array_equal(ra, rb)
            for i in np.flatnonzero(ia.get("_final_obs", [])):
                finals += 1
                assert np.array_equal(ib["final_obs"][i], _to_first(ia["final_obs"][i][None])[0])
        assert finals >= 2  # the same-step final records are planar too
    finally:
        last.close()
        first.close()


def test_obs_layout_is_checked_and_grayscale_is_unchanged():
    with pytest.raises(ValueError, match="obs_layout must be one of"):
        shmatari.make("null", 1, obs_layout="NCHW")
    with shmatari.make("Pong", 1, num_workers=1, seed=0, obs_layout="channels_first") as env:
        assert env.reset()[0].shape == (1, 4, 84, 84)
