"""The frame kernel against OpenCV, bit for bit."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from ale_py import ALEInterface, LoggerMode, roms
from hypothesis import given, settings
from hypothesis import strategies as st

from shmatari import _core

GAMES = ["breakout", "pong", "ms_pacman", "seaquest", "space_invaders", "qbert", "enduro"]


def reference(src, h, w):
    return cv2.resize(src, (w, h), interpolation=cv2.INTER_AREA)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_resize_matches_opencv_on_random_arrays(data):
    sh = data.draw(st.integers(1, 210), label="src_h")
    sw = data.draw(st.integers(1, 160), label="src_w")
    dh = data.draw(st.integers(1, sh), label="dst_h")
    dw = data.draw(st.integers(1, sw), label="dst_w")
    rgb = data.draw(st.booleans(), label="rgb")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    shape = (sh, sw, 3) if rgb else (sh, sw)
    src = rng.integers(0, 256, shape, dtype=np.uint8)
    out = _core.Resizer((sh, sw), (dh, dw), 3 if rgb else 1).resize(src)
    np.testing.assert_array_equal(out, reference(src, dh, dw))


@pytest.mark.parametrize("dst", [(84, 84), (84, 64), (64, 84), (105, 80), (70, 80), (42, 32),
                                 (110, 84), (210, 160), (1, 1), (209, 159), (21, 16)])
@pytest.mark.parametrize("rgb", [False, True])
def test_resize_matches_opencv_on_named_sizes(dst, rgb):
    rng = np.random.default_rng(sum(dst))
    shape = (210, 160, 3) if rgb else (210, 160)
    for src in (rng.integers(0, 256, shape, dtype=np.uint8),
                (rng.integers(0, 4, shape) * 85).astype(np.uint8),
                np.repeat(rng.integers(0, 256, (105,) + shape[1:], dtype=np.uint8), 2, axis=0)):
        out = _core.Resizer((210, 160), dst, 3 if rgb else 1).resize(src)
        np.testing.assert_array_equal(out, reference(src, *dst))


def test_resizer_rejects_upscale_and_bad_channels():
    with pytest.raises(ValueError, match="no upscale"):
        _core.Resizer((210, 160), (211, 84))
    with pytest.raises(ValueError, match="channels"):
        _core.Resizer((210, 160), (84, 84), channels=2)


def _frames(game: str, count: int, rgb: bool = False, seed: int = 0):
    """Pairs of consecutive raw screens (palette indices) and ALE's own
    conversion of each, from a random walk through the game."""
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setInt("random_seed", seed)
    ale.loadROM(roms.get_rom_path(game))
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count * 8):
        ale.act(actions[rng.integers(len(actions))])
        if ale.game_over():
            ale.reset_game()
        if i % 8 in (6, 7):
            idx = np.empty((210, 160), np.uint8)
            ale.getScreen(idx)
            conv = np.empty((210, 160, 3) if rgb else (210, 160), np.uint8)
            (ale.getScreenRGB if rgb else ale.getScreenGrayscale)(conv)
            out.append((idx, conv))
    return list(zip(out[0::2], out[1::2]))


@pytest.mark.parametrize("game", GAMES)
@pytest.mark.parametrize("rgb", [False, True])
def test_fused_kernel_matches_opencv_on_real_frames(game, rgb):
    pairs = _frames(game, 60, rgb=rgb)
    lut = np.zeros((256, 3) if rgb else (256,), np.uint8)
    for (ia, ca), (ib, cb) in pairs:
        lut[ia] = ca
        lut[ib] = cb
    for dst in ((84, 84), (96, 72)):
        rs = _core.Resizer((210, 160), dst, 3 if rgb else 1)
        for (ia, ca), (ib, cb) in pairs:
            expected = reference(np.maximum(ca, cb), *dst)
            np.testing.assert_array_equal(rs.frame(ia, ib, lut), expected)
            np.testing.assert_array_equal(rs.frame(ib, None, lut), reference(cb, *dst))


@pytest.mark.parametrize("game,grayscale,size", [
    ("breakout", True, (84, 84)), ("pong", True, (84, 84)), ("ms_pacman", True, (84, 84)),
    ("seaquest", False, (84, 84)), ("qbert", True, (105, 80)), ("enduro", True, (110, 84)),
    # taller screens: 250 x 160 kept whole (only they allow img_height > 210), 214 x 160 in RGB
    ("pacman", True, (250, 160)), ("carnival", False, (107, 80)),
])
def test_core_matches_plain_reference(game, grayscale, size):
    """The compiled per-env step (palette learned from ALE, fused kernel, frame
    stack, autoreset) equals a plain Python implementation that uses ALE's own
    grayscale/RGB conversion and cv2, on real games over many steps."""
    from reference import ReferenceAtari

    from shmatari import atari, config

    cfg = config.build_config(game, 1, seed=7, img_height=size[0], img_width=size[1],
                              grayscale=grayscale, max_episode_frames=2000)
    core = atari.build_core(cfg, 0, atari.build_palette(cfg))
    ref = ReferenceAtari(game, 0, 7, img_height=size[0], img_width=size[1],
                         grayscale=grayscale, max_episode_frames=2000)
    out = np.empty(cfg.obs_shape, np.uint8)
    core.reset()
    core.obs_into(out)
    np.testing.assert_array_equal(out, ref.reset())
    rng = np.random.default_rng(1)
    dones = 0
    for step in range(700):
        a = int(rng.integers(core.num_actions))
        core.step(a)
        core.obs_into(out)
        obs, reward, terminated, truncated = ref.step(a)
        np.testing.assert_array_equal(out, obs, err_msg=f"{game} step {step}")
        assert (core.reward, core.terminated, core.truncated) == (reward, terminated, truncated)
        dones += terminated or truncated
    assert dones >= 1, "the walk should cross an episode boundary"
