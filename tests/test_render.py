"""``render_mode="rgb_array"``: each env's full-size RGB screen, for
``RecordVideo``-style tools."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import shmatari

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_render_is_the_last_screen_of_each_env():
    # A full-size RGB observation of one frame, not pooled, is the screen
    # itself (through the palette learned from ALE's getScreenRGB): render()
    # must show exactly that, in an RGB pool and in a grayscale one.
    opts = dict(num_envs=2, num_workers=1, seed=1, frame_skip=3, noop_max=0,
                render_mode="rgb_array")
    rgb = shmatari.make("Breakout", grayscale=False, img_height=210, img_width=160,
                        stack_num=1, maxpool=False, **opts)
    gray = shmatari.make("Breakout", **opts)
    try:
        assert rgb.render_mode == "rgb_array" and "rgb_array" in rgb.metadata["render_modes"]
        assert gray.get_attr("render_mode") == ("rgb_array",) * 2
        assert all((f == 0).all() for f in rgb.render())  # black before reset
        obs, _ = rgb.reset()
        gray.reset()
        rng = np.random.default_rng(0)
        changed, before = 0, None
        for _ in range(30):
            frames = rgb.render()
            # Gymnasium's RecordVideo asserts a Sequence of num_envs frames.
            assert isinstance(frames, Sequence) and len(frames) == 2
            assert frames[0].shape == (210, 160, 3)
            assert frames[0].dtype == np.uint8
            assert np.array_equal(np.stack(frames), obs[:, 0])
            assert np.array_equal(np.stack(gray.render()), obs[:, 0])
            actions = rng.integers(0, 4, 2)
            obs, *_ = rgb.step(actions)
            gray.step(actions)
            changed += before is not None and not np.array_equal(before, frames[0])
            before = frames[0]
        assert changed >= 10  # the ball moves
    finally:
        rgb.close()
        gray.close()


def test_render_needs_render_mode_and_a_tall_screen_keeps_its_size():
    with shmatari.make("Pong", 1, num_workers=1, seed=0) as env:
        assert env.render_mode is None
        with pytest.raises(ValueError, match="render_mode='rgb_array'"):
            env.render()
        assert env.segment_name  # no render area: the layout is unchanged
    with pytest.raises(ValueError, match="render_mode must be one of"):
        shmatari.make("null", 1, render_mode="human")
    # Games with a taller screen than 210 render at their own size.
    game = next(g for g in shmatari.list_games()
                if shmatari.games.screen_shape(g) != (210, 160))
    with shmatari.make(game, 1, num_workers=1, seed=0, render_mode="rgb_array") as env:
        env.reset()
        assert env.render()[0].shape == shmatari.games.screen_shape(game) + (3,)

