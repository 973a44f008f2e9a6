"""Every game ale-py ships: the playable list, each game's screen, and the
ROMs refused before any process starts."""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

import gymnasium as gym
import numpy as np
import psutil
import pytest
from ale_py import roms
from conftest import TALL_SCREENS, pid_alive, random_actions, shm_entries

import shmatari
from shmatari import config, games
from shmatari.baselines import make_pipe

pytestmark = pytest.mark.usefixtures("no_leaks")

#: The ROMs ale-py 0.12 ships for multi-player play only.
MULTIPLAYER_ONLY = ["combat", "joust", "maze_craze", "warlords"]


def _alepy_v5_games() -> set[str]:
    """The games ale-py's own Gymnasium registration offers as ALE/<Game>-v5."""
    import ale_py

    gym.register_envs(ale_py)
    return {spec.kwargs["game"] for env_id, spec in gym.registry.items()
            if env_id.startswith("ALE/") and env_id.endswith("-v5")
            and spec.entry_point == "ale_py.env:AtariEnv"}


def _children() -> set[int]:
    """This process's live descendants (a fork server included)."""
    return {p.pid for p in psutil.Process().children(recursive=True) if pid_alive(p.pid)}


def test_list_games_is_exactly_the_games_alepy_registers_for_single_player():
    listed = shmatari.list_games()
    assert listed == sorted(listed) and len(listed) == len(set(listed))
    assert set(listed) == _alepy_v5_games()
    assert set(roms.get_all_rom_ids()) - set(listed) == set(MULTIPLAYER_ONLY)


@pytest.mark.parametrize("name", MULTIPLAYER_ONLY + ["ALE/Combat-v5", "MazeCraze"])
def test_multiplayer_only_rom_is_refused_before_any_process_starts(name):
    """ALE would exit the process loading these ROMs: make(), the pipe baseline
    and games.screen_shape refuse them up front, naming the game."""
    children, segments = _children(), shm_entries()
    for call in (lambda: shmatari.make(name, num_envs=2, seed=0),
                 lambda: make_pipe(name, num_envs=2, seed=0),
                 lambda: games.screen_shape(name)):
        with pytest.raises(ValueError, match="cannot be played") as err:
            call()
        message = str(err.value)
        assert repr(name) in message and "list_games()" in message
        assert "single-player" in message
    assert _children() == children
    assert shm_entries() == segments


def test_unknown_game_suggests_only_playable_games():
    with pytest.raises(ValueError, match="did you mean 'pacman'") as err:
        shmatari.make("pacmn", num_envs=1)
    assert f"lists all {len(shmatari.list_games())}" in str(err.value)


@pytest.mark.parametrize("env_id", ["Pong\x00", "../breakout", "breakout.bin", "pong;ls",
                                    "Ms\tPacman"])
def test_a_name_with_characters_no_game_id_has_is_refused(env_id):
    """Characters were dropped as "_" and "-" are, so a NUL or a path named
    a game (a fuzzing pass)."""
    with pytest.raises(ValueError, match="holds characters no game id has"):
        shmatari.resolve_game(env_id)


def test_game_ids_are_read_whatever_their_case_and_long_names_are_cut():
    assert shmatari.resolve_game("Breakout-V5") == "breakout"  # the version's v too
    assert shmatari.resolve_game(" Ms Pacman ") == "ms_pacman"
    with pytest.raises(ValueError, match="did you mean 'null'"):
        shmatari.resolve_game("Null")
    with pytest.raises(ValueError) as info:
        shmatari.resolve_game("a" * 10_000)
    assert len(str(info.value)) < 300


def test_image_size_is_bounded_by_the_games_own_screen():
    """img_height may reach a tall screen's height (250 for Pac-Man), no more;
    210 x 160 games stop at 210 x 160. The error names the screen."""
    cfg = config.build_config("pacman", 1, seed=0, img_height=250, img_width=160)
    assert cfg.screen_shape == (250, 160) and cfg.obs_shape == (4, 250, 160)
    with pytest.raises(ValueError, match=r"img_height must be <= 250.*pacman's 250 x 160"):
        config.build_config("pacman", 1, seed=0, img_height=251)
    with pytest.raises(ValueError, match=r"img_height must be <= 210.*breakout's 210 x 160"):
        config.build_config("breakout", 1, seed=0, img_height=211)
    with pytest.raises(ValueError, match=r"img_width must be <= 160.*carnival's 214 x 160"):
        config.build_config("carnival", 1, seed=0, img_width=161)


def test_a_full_height_pacman_frame_through_the_pool_and_the_pipe_baseline():
    """A 250 x 160 observation is the screen itself (the identity resize), in
    a pool and in both pipe baselines, step for step."""
    with shmatari.make("pacman", num_envs=2, num_workers=1, seed=3, img_height=250,
                       img_width=160) as shm_env, \
            make_pipe("pacman", num_envs=2, seed=3, img_height=250, img_width=160) as cv_env, \
            make_pipe("pacman", num_envs=2, seed=3, img_height=250, img_width=160,
                      preprocess="kernel") as kernel_env:
        envs = (shm_env, cv_env, kernel_env)
        first = [env.reset()[0] for env in envs]
        assert first[0].shape == (2, 4, 250, 160)
        for other in first[1:]:
            np.testing.assert_array_equal(first[0], other)
        for step, a in enumerate(random_actions(shm_env.single_action_space.n, 2, 60, 5)):
            results = [env.step(a) for env in envs]
            for other in results[1:]:
                for x, y in zip(results[0][:4], other[:4]):
                    np.testing.assert_array_equal(x, y, err_msg=f"step {step}")
        # the bottom rows, below 210, are part of the frame and not blank
        assert results[0][0][:, -1, 210:].any()


def _play(game_list: list[str], steps: int) -> dict[str, tuple[int, int]]:
    """Makes each game in the default and the RGB mode (2 envs, one worker),
    steps it with random actions and checks shapes; returns each game's
    screen. Runs in a separate process (see the test below)."""
    screens = {}
    for game in game_list:
        for grayscale in (True, False):
            with shmatari.make(game, num_envs=2, num_workers=1, seed=1,
                               grayscale=grayscale) as env:
                shape = (2, 4, 84, 84) + (() if grayscale else (3,))
                assert env.observation_space.shape == shape, game
                obs, _ = env.reset()
                assert obs.shape == shape and obs.dtype == np.uint8, game
                rng = np.random.default_rng(0)
                for _ in range(steps):
                    obs, reward, terminated, truncated, info = env.step(
                        rng.integers(0, env.single_action_space.n, 2))
                    assert obs.shape == shape and reward.shape == (2,), game
                assert obs.any(), f"{game}: every frame is black"
                screens[game] = env.config.screen_shape
    assert not shm_entries(), "a pool left its segment behind"
    return screens


@pytest.mark.all_games
def test_every_listed_game_plays_in_default_and_rgb_modes():
    """make() then 24 steps of every game in list_games(), grayscale and RGB,
    spread over two processes; each game's screen is 210 x 160 or the one
    TALL_SCREENS (and docs/semantics.md) lists."""
    listed = shmatari.list_games()
    chunks = [listed[i::8] for i in range(8)]
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(2, min(8, config.available_cores())),
                             mp_context=ctx) as pool:
        results = list(pool.map(_play, chunks, [24] * len(chunks)))
    screens = {game: tuple(shape) for part in results for game, shape in part.items()}
    assert sorted(screens) == listed
    tall = {game: shape for game, shape in screens.items() if shape != (210, 160)}
    assert tall == TALL_SCREENS


@pytest.mark.parametrize("env_id", ["ALE/Pong-v99", "Pong-v1", "BreakoutNoFrameskip-v3"])
def test_a_version_no_atari_env_has_is_an_unknown_game(env_id):
    """Gym and ale-py gave Atari ids versions v0, v4 and v5 only: another was
    taken for a legacy one and played, with a warning about Gym's
    conventions (a helper's API pass). It is refused, naming the v5 id."""
    import re

    game = re.sub(r"^ALE/|(NoFrameskip)?-v\d+$", "", env_id)  # Pong, Breakout
    with pytest.raises(ValueError, match=rf"no Atari env has version v\d+ .*use '{game}-v5'"):
        games.resolve_game(env_id)
