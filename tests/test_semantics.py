"""Atari semantics: every option of docs/semantics.md pinned on real ROMs, and
parity with Gymnasium's AtariPreprocessing + FrameStackObservation."""

from __future__ import annotations

import cv2
import gymnasium as gym
import numpy as np
import pytest
from ale_py import ALEInterface, LoggerMode, roms
from conftest import TALL_SCREENS, random_actions
from scipy import stats

import shmatari
from shmatari import atari, config, seeding
from shmatari.baselines import make_pipe

pytestmark = pytest.mark.usefixtures("no_leaks")

SEED = 20240


def make1(game: str, **options):
    """A one-env, one-worker pool (the code path every pool uses)."""
    return shmatari.make(game, num_envs=1, num_workers=1, seed=SEED, **options)


def build_core(game: str, **options):
    """Env 0 of a pool seeded SEED, stepped in this process."""
    cfg = config.build_config(game, 1, seed=SEED, **options)
    core = atari.build_core(cfg, 0, atari.build_palette(cfg))
    return core, np.empty(cfg.obs_shape, np.uint8)


class PlainAle:
    """ALE alone, seeded as env 0 of a pool seeded SEED, one frame at a time:
    the screens a core must have seen, from nothing but ale-py."""

    def __init__(self, game: str):
        ALEInterface.setLoggerMode(LoggerMode.Error)
        self.ale = ALEInterface()
        self.ale.setInt("random_seed", seeding.ale_seed(SEED, 0))
        self.ale.setFloat("repeat_action_probability", 0.0)
        self.ale.loadROM(roms.get_rom_path(game))
        self.actions = [a.value for a in self.ale.getMinimalActionSet()]
        self.ale.reset_game()

    def frame(self, action_index: int) -> tuple[int, np.ndarray]:
        reward = self.ale.act(self.actions[action_index])
        return reward, self.ale.getScreenGrayscale()


def resize(frame: np.ndarray) -> np.ndarray:
    return cv2.resize(frame, (84, 84), interpolation=cv2.INTER_AREA)


# -- parity with Gymnasium ---------------------------------------------------------

def gymnasium_reference(game: str, *, grayscale: bool, repeat_action_probability: float,
                        max_frames: int):
    """Gymnasium's own preprocessing on ``ALE/<game>-v5`` with frameskip=1,
    given the ALE seed and no-op generator of shmatari's env 0 (seed SEED)."""
    import ale_py

    gym.register_envs(ale_py)
    base = gym.make(f"ALE/{game}-v5", frameskip=1,
                    repeat_action_probability=repeat_action_probability,
                    max_num_frames_per_episode=max_frames)
    env = gym.wrappers.FrameStackObservation(
        gym.wrappers.AtariPreprocessing(base, noop_max=30, frame_skip=4, screen_size=84,
                                        grayscale_obs=grayscale), 4)
    ale_env = base.unwrapped
    ale_env.ale.setInt("random_seed", seeding.ale_seed(SEED, 0))
    ale_env.load_game()
    ale_env.np_random = seeding.noop_rng(SEED, 0)
    return env


def _assert_parity(game: str, steps: int, grayscale: bool, sticky: float,
                   max_frames: int) -> int:
    """Steps a one-env pool and Gymnasium's reference side by side (see
    test_parity_with_gymnasium_atari_preprocessing); returns the done count."""
    ref = gymnasium_reference(game, grayscale=grayscale, repeat_action_probability=sticky,
                              max_frames=max_frames)
    with make1(game, preset="gymnasium", repeat_action_probability=sticky,
               grayscale=grayscale, max_episode_frames=max_frames) as env:
        obs, info = env.reset()
        ref_obs, ref_info = ref.reset()
        np.testing.assert_array_equal(obs[0], ref_obs)
        assert info["episode_frame_number"][0] == ref_info["episode_frame_number"]
        assert info["frame_number"][0] == ref_info["frame_number"]
        ref_done, dones = False, 0
        for step, a in enumerate(random_actions(env.single_action_space.n, 1, steps, 11)):
            obs, reward, term, trunc, info = env.step(a)
            if ref_done:
                ref_obs, ref_info = ref.reset()
                ref_reward, ref_term, ref_trunc = 0.0, False, False
            else:
                ref_obs, ref_reward, ref_term, ref_trunc, ref_info = ref.step(int(a[0]))
            where = f"{game} step {step}"
            assert (reward[0], term[0], trunc[0]) == (ref_reward, ref_term, ref_trunc), where
            assert info["lives"][0] == ref_info["lives"], where
            assert info["episode_frame_number"][0] == ref_info["episode_frame_number"], where
            # ALE's getFrameNumber, the starting frames some games' resets
            # emulate included (AirRaid: 8; left out until 2026-12-06)
            assert info["frame_number"][0] == ref_info["frame_number"], where
            ref_done = ref_term or ref_trunc
            if ref_done:
                dones += 1
                np.testing.assert_array_equal(obs[0][:-1], ref_obs[:-1], err_msg=where)
            else:
                np.testing.assert_array_equal(obs[0], ref_obs, err_msg=where)
    ref.close()
    return dones


@pytest.mark.parametrize("game,steps,grayscale,sticky,max_frames", [
    ("Breakout", 2000, True, 0.0, 108_000),
    ("Pong", 2000, True, 0.0, 108_000),
    ("MsPacman", 2000, True, 0.0, 108_000),
    ("Breakout", 600, False, 0.0, 108_000),   # RGB
    ("Breakout", 1000, True, 0.25, 108_000),  # ALE's own sticky actions
    ("Pong", 800, True, 0.0, 400),            # truncation by the frame cap
    ("AirRaid", 1500, True, 0.0, 108_000),    # a reset that emulates starting frames
])
def test_parity_with_gymnasium_atari_preprocessing(game, steps, grayscale, sticky, max_frames):
    """Bit-identical observations, rewards, flags, lives and episode frame
    counts (the episode's and the env's) with Gymnasium's AtariPreprocessing(noop_max=30, frame_skip=4,
    screen_size=84) + FrameStackObservation(4) on ALE/<game>-v5 (frameskip=1),
    under the same random actions, through a real one-env pool.

    Where the conventions differ, this test aligns or skips them, and says so:
    - Random streams: Gymnasium draws the no-op count from the env's
      ``np_random`` and seeds ALE from ``SeedSequence(seed)``; shmatari from
      ``SeedSequence(seed, spawn_key=(i,))``. The Gymnasium env is given
      shmatari env 0's ALE seed and no-op generator (gymnasium_reference).
    - Done steps: AtariPreprocessing stops before capturing the last frame, so
      its newest frame on a done step is a stale buffer. There the older
      ``stack_num - 1`` frames are compared; shmatari's newest frame on done
      steps is pinned by test_episode_ending_mid_skip_pools_the_last_frames.
    - Episode boundaries: shmatari autoresets on the next step (its action is
      ignored); the Gymnasium env is reset by this test at the same point.
    """
    dones = _assert_parity(game, steps, grayscale, sticky, max_frames)
    assert dones >= 1, "the run should cross an episode boundary"


@pytest.mark.parametrize("rom", sorted(TALL_SCREENS))
def test_parity_with_gymnasium_on_every_screen_taller_than_210(rom):
    """The 13 games whose screen is not 210 x 160 (250, 230, 220 or 214 rows):
    bit-identical with Gymnasium's AtariPreprocessing + FrameStackObservation
    (as test_parity_with_gymnasium_atari_preprocessing) for 500 steps, resized
    from the whole screen, with sticky actions and a 1,000-frame cap so each
    run crosses an episode boundary; RGB on one game of each height."""
    from ale_py.registration import rom_id_to_name

    game = rom_id_to_name(rom)
    grayscale = rom not in ("pacman", "journey_escape", "pooyan", "carnival")
    assert shmatari.games.screen_shape(rom) == TALL_SCREENS[rom]
    dones = _assert_parity(game, 500, grayscale, 0.25, 1000)
    assert dones >= 1, "the run should cross an episode boundary"


# -- frame_skip and maxpool ---------------------------------------------------------

def test_episode_ending_mid_skip_pools_the_last_frames_emulated():
    """A cap of 402 frames ends step 101 after 2 of its 4 frames: reward and
    frames count only those 2, and the newest frame pools frames 401 and 402,
    not a buffer left from step 100."""
    core, out = build_core("Breakout", noop_max=0, repeat_action_probability=0.0,
                           max_episode_frames=402)
    plain = PlainAle("breakout")
    core.reset()
    screens = [plain.ale.getScreenGrayscale()]
    actions = random_actions(core.num_actions, 1, 101, 5)[:, 0]
    for step, a in enumerate(actions):
        core.step(int(a))
        frames = 4 if step < 100 else 2
        reward = 0
        for _ in range(frames):
            r, screen = plain.frame(int(a))
            reward += r
            screens.append(screen)
        assert core.raw_reward == reward
        assert (core.terminated, core.truncated) == (False, step == 100)
    assert core.episode_frame_number == 402 == len(screens) - 1
    core.obs_into(out)
    np.testing.assert_array_equal(out[-1], resize(np.maximum(screens[-2], screens[-1])))
    np.testing.assert_array_equal(out[-2], resize(np.maximum(screens[-4], screens[-3])))
    assert not np.array_equal(out[-1], out[-2])


def test_life_lost_mid_skip_pools_the_frames_of_that_step_only():
    """With episodic_life, a step that loses a life after k of its 4 frames
    stops there; its newest frame pools frames k-1 and k of the step, or is
    frame 1 alone when k == 1 (never the previous step's last frame). Each
    done step is replayed from ALE's cloned state on a second ALE."""
    core, out = build_core("Breakout", noop_max=0, repeat_action_probability=0.0,
                           episodic_life=True, use_fire_reset=True)
    replay = PlainAle("breakout")
    core.reset()
    rng = np.random.default_rng(2)
    seen = set()
    while seen != {1, 2, 3, 4} and core.frame_number < 60_000:
        state, before = core.ale.cloneState(), core.episode_frame_number
        a = int(rng.integers(core.num_actions))
        core.step(a)
        if not core.terminated:
            continue
        k = core.episode_frame_number - before
        replay.ale.restoreState(state)
        screens = [replay.frame(a)[1] for _ in range(k)]
        expected = resize(screens[0] if k == 1 else np.maximum(screens[-2], screens[-1]))
        core.obs_into(out)
        np.testing.assert_array_equal(out[-1], expected, err_msg=f"life lost after {k} frames")
        seen.add(k)
        if core.game_over:
            core.step(0)
    assert seen == {1, 2, 3, 4}, f"life losses after {sorted(seen)} frames only"


def test_frame_skip_1_has_no_ghost_of_an_older_frame():
    """frame_skip=1 with maxpool=True: each frame is the current screen alone
    (Space Invaders flickers, so pooling two frames would show)."""
    core, out = build_core("SpaceInvaders", noop_max=0, repeat_action_probability=0.0,
                           frame_skip=1, stack_num=2)
    plain = PlainAle("space_invaders")
    core.reset()
    prev = plain.ale.getScreenGrayscale()
    ghosts = 0
    for a in random_actions(core.num_actions, 1, 300, 9)[:, 0]:
        core.step(int(a))
        _, screen = plain.frame(int(a))
        core.obs_into(out)
        np.testing.assert_array_equal(out[-1], resize(screen))
        ghosts += not np.array_equal(resize(np.maximum(prev, screen)), resize(screen))
        prev = screen
    assert ghosts > 50, "the game should flicker, or this test shows nothing"


def test_maxpool_off_keeps_the_last_frame_only():
    core, out = build_core("SpaceInvaders", noop_max=0, repeat_action_probability=0.0,
                           maxpool=False, stack_num=1)
    plain = PlainAle("space_invaders")
    core.reset()
    for a in random_actions(core.num_actions, 1, 100, 4)[:, 0]:
        core.step(int(a))
        for _ in range(4):
            _, screen = plain.frame(int(a))
        core.obs_into(out)
        np.testing.assert_array_equal(out[0], resize(screen))


# -- noop_max ---------------------------------------------------------------------

def _reset_counts(noop_max: int, resets: int, num_envs: int = 4, **options) -> np.ndarray:
    with shmatari.make("Pong", num_envs=num_envs, num_workers=1, seed=SEED,
                       noop_max=noop_max, **options) as env:
        return np.array([env.reset()[1]["episode_frame_number"] for _ in range(resets)])


def test_noop_counts_are_uniform_seeded_and_from_the_documented_stream():
    counts = _reset_counts(30, 100)  # 100 resets of 4 envs: 400 counts
    assert counts.min() >= 1 and counts.max() <= 30
    observed = np.bincount(counts.ravel(), minlength=31)[1:]
    assert stats.chisquare(observed).pvalue > 1e-3
    np.testing.assert_array_equal(counts, _reset_counts(30, 100))
    expected = np.array([seeding.noop_rng(SEED, i).integers(1, 31, 100) for i in range(4)]).T
    np.testing.assert_array_equal(counts, expected)
    assert (_reset_counts(0, 3) == 0).all()


def test_noop_that_ends_the_episode_resets_again():
    """A cap of 7 frames is reached during the no-ops: the game is reset and
    the remaining no-ops go on, so each reset ends count % 7 frames in."""
    counts = _reset_counts(30, 20, max_episode_frames=7)
    expected = np.array([seeding.noop_rng(SEED, i).integers(1, 31, 20) for i in range(4)]).T
    np.testing.assert_array_equal(counts, expected % 7)


# -- use_fire_reset ---------------------------------------------------------------

def _first_frames(game: str, steps: int, **options):
    with make1(game, noop_max=0, repeat_action_probability=0.0, **options) as env:
        obs, info = env.reset()
        out = [(obs[0], int(info["episode_frame_number"][0]))]
        for _ in range(steps):
            obs, _, _, _, info = env.step([0])
            out.append((obs[0], int(info["episode_frame_number"][0])))
        return out


def test_fire_reset_presses_fire_for_one_step_on_breakout():
    fired = _first_frames("Breakout", 8, use_fire_reset=True)
    plain = _first_frames("Breakout", 8, use_fire_reset=False)
    assert fired[0][1] == 4 and plain[0][1] == 0  # one agent step of FIRE
    # The ball is served only after FIRE: with NOOPs the screens part ways.
    assert any(not np.array_equal(f[0], p[0]) for f, p in zip(fired[1:], plain[1:]))
    # The same, by hand: FIRE for 4 frames then NOOP steps.
    core, out = build_core("Breakout", noop_max=0, repeat_action_probability=0.0)
    core.reset()
    core.step(1)
    core.step(0)
    core.obs_into(out)
    np.testing.assert_array_equal(out[-1], fired[1][0][-1])


def test_fire_reset_is_skipped_on_freeway():
    core, _ = build_core("Freeway", use_fire_reset=True)
    assert not core.fire_ok and core.action_ids()[1] != 1
    fired = _first_frames("Freeway", 5, use_fire_reset=True)
    plain = _first_frames("Freeway", 5, use_fire_reset=False)
    assert fired[0][1] == 0
    for (a, fa), (b, fb) in zip(fired, plain):
        np.testing.assert_array_equal(a, b)
        assert fa == fb


def test_fire_step_that_ends_the_episode_returns_a_fresh_reset():
    """A cap of 4 frames is reached by the FIRE step itself: the game is
    reset again (no-ops, no FIRE) and that is the first observation."""
    ended = _first_frames("Breakout", 1, use_fire_reset=True, max_episode_frames=4)
    kept = _first_frames("Breakout", 1, use_fire_reset=True, max_episode_frames=5)
    fresh = _first_frames("Breakout", 1, use_fire_reset=False, max_episode_frames=4)
    assert (ended[0][1], kept[0][1]) == (0, 4)
    np.testing.assert_array_equal(ended[0][0], fresh[0][0])


# -- episodic_life, reward_clip, episode statistics -----------------------------------

def test_episodic_life_terminates_per_life_and_the_game_goes_on():
    with make1("Breakout", episodic_life=True, use_fire_reset=True, reward_clip=True,
               repeat_action_probability=0.0) as env:
        obs, info = env.reset()
        lives = [int(info["lives"][0])]
        frames, steps, after_loss = int(info["episode_frame_number"][0]), 0, False
        raw_sum = float(info["raw_reward"][0])
        rng = np.random.default_rng(0)
        while True:
            obs, reward, term, trunc, info = env.step([rng.integers(4)])
            raw = float(info["raw_reward"][0])
            raw_sum += raw
            if info["reset"][0]:
                # The reset after a lost life continues the game: a fresh stack
                # of its newest frame, counters going on.
                assert after_loss and reward[0] == 0 and not (term[0] or trunc[0])
                assert all((obs[0][k] == obs[0][0]).all() for k in range(4))
                assert info["elapsed_step"][0] == steps
                assert info["episode_frame_number"][0] > frames
                after_loss = False
            else:
                steps += 1
                assert info["elapsed_step"][0] == steps
                assert reward[0] == np.sign(raw)
            frames = int(info["episode_frame_number"][0])
            assert not trunc[0]
            if term[0] and not info["game_over"][0]:
                assert "episode" not in info  # a life, not the game
                assert info["lives"][0] == lives[-1] - 1
                lives.append(int(info["lives"][0]))
                after_loss = True
            elif term[0]:
                break
        assert lives == [5, 4, 3, 2, 1]
        assert info["game_over"][0] and info["_episode"][0]
        ep = info["episode"]
        assert ep["l"][0] == steps and ep["frames"][0] == frames
        assert ep["r"][0] == raw_sum > 0


def test_reset_after_a_lost_life_continues_the_game():
    """reset() after a lost life (episodic_life) continues the game, as SB3's
    EpisodicLifeEnv, whether the reset is masked or not; reset(seed=...)
    starts new games."""
    with make1("Breakout", autoreset_mode="disabled", episodic_life=True, use_fire_reset=True,
               repeat_action_probability=0.0) as env:
        env.reset()
        rng = np.random.default_rng(4)
        for reset in (lambda: env.reset(options={"reset_mask": np.array([True])}), env.reset):
            steps = 0
            while True:
                _, _, term, trunc, info = env.step([rng.integers(4)])
                steps += 1
                if term[0]:
                    break
            assert not info["game_over"][0] and not trunc[0]
            lives, frames, elapsed = info["lives"][0], info["episode_frame_number"][0], \
                info["elapsed_step"][0]
            obs, info = reset()
            assert info["reset"][0] and info["lives"][0] == lives
            assert info["elapsed_step"][0] == elapsed
            assert info["episode_frame_number"][0] == frames + 8  # a NOOP step and FIRE
        _, info = env.reset(seed=SEED)
        assert info["lives"][0] == 5 and info["elapsed_step"][0] == 0


def _episodic_run(max_episode_frames: int, steps: int):
    with make1("Breakout", episodic_life=True, use_fire_reset=True, noop_max=0,
               repeat_action_probability=0.0, max_episode_frames=max_episode_frames) as env:
        env.reset()
        out, rng = [], np.random.default_rng(3)
        for _ in range(steps):
            _, _, term, trunc, info = env.step([rng.integers(4)])
            out.append((bool(term[0]), bool(trunc[0]), info))
            if trunc[0]:
                break
        return out


def test_episode_cap_counts_the_whole_game_under_episodic_life():
    free = _episodic_run(108_000, 200)
    losses = [info["episode_frame_number"][0] for term, _, info in free if term]
    assert len(losses) >= 2 and not any(trunc for _, trunc, _ in free)
    # A cap between the second and third lost lives: the frames of every life
    # count, and the truncation is exact.
    capped = _episodic_run(losses[1] + 40, 300)
    assert sum(term for term, _, _ in capped) == 2
    term, trunc, info = capped[-1]
    assert trunc and not term
    assert info["episode_frame_number"][0] == losses[1] + 40 == info["episode"]["frames"][0]
    # A cap inside the no-op + FIRE frames that follow a lost life: they stop
    # there, and the next step truncates at once, emulating nothing.
    capped = _episodic_run(losses[0] + 3, 300)
    assert [(t, r) for t, r, _ in capped[-3:]] == [(True, False), (False, False), (False, True)]
    before, last = capped[-2][2], capped[-1][2]
    assert before["reset"][0] and before["episode_frame_number"][0] == losses[0] + 3
    assert last["episode_frame_number"][0] == losses[0] + 3 == last["episode"]["frames"][0]
    assert last["episode"]["l"][0] == before["elapsed_step"][0] + 1


def test_a_life_lost_on_the_step_that_reaches_the_cap_ends_the_game():
    """The cap counts the whole game, so a life lost on the step that reaches
    it gives both flags, and the next episode is a new game, not the game
    continued (undocumented until a pixel auditor's pass modelled it the
    other way)."""
    free = _episodic_run(108_000, 200)
    first = next(info["episode_frame_number"][0] for term, _, info in free if term)
    with make1("Breakout", episodic_life=True, use_fire_reset=True, noop_max=0,
               repeat_action_probability=0.0, max_episode_frames=first) as env:
        env.reset()
        rng = np.random.default_rng(3)  # _episodic_run's actions
        for _ in range(200):
            _, _, term, trunc, info = env.step([rng.integers(4)])
            if term[0] or trunc[0]:
                break
        assert term[0] and trunc[0] and not info["game_over"][0]
        lives = info["lives"][0]
        _, _, _, _, info = env.step([0])  # next-step autoreset: a new game
        assert info["reset"][0] and info["elapsed_step"][0] == 0 and info["lives"][0] > lives


def test_episode_statistics_are_the_sum_of_raw_rewards():
    import time

    with shmatari.make("Breakout", num_envs=2, num_workers=1, seed=SEED, preset="dqn",
                       episodic_life=False, max_episode_frames=3000) as env:
        began = [np.full(2, time.perf_counter())]
        env.reset()
        began.append(np.full(2, time.perf_counter()))  # an episode began between these
        totals, lengths, episodes = np.zeros(2), np.zeros(2, int), []
        for a in random_actions(4, 2, 1700, 8):
            before = time.perf_counter()
            _, reward, term, trunc, info = env.step(a)
            after = time.perf_counter()
            began[0][info["reset"]], began[1][info["reset"]] = before, after
            totals += info["raw_reward"]
            lengths += ~info["reset"]
            np.testing.assert_array_equal(reward, np.sign(info["raw_reward"]))
            done = term | trunc
            if "episode" in info:
                np.testing.assert_array_equal(info["_episode"], done)
                for i in np.flatnonzero(done):
                    assert info["episode"]["r"][i] == totals[i]
                    assert info["episode"]["l"][i] == lengths[i]
                    # Wall-clock seconds, as RecordEpisodeStatistics's "t".
                    t = info["episode"]["t"][i]
                    assert before - began[1][i] - 1e-6 <= t <= after - began[0][i] + 1e-6
                    episodes.append(totals[i])
                totals[done], lengths[done] = 0, 0
            else:
                assert not done.any()
        assert len(episodes) >= 2 and max(episodes) > 0



def test_episode_statistics_under_episodic_life_time_the_whole_game():
    """A lost life ends an episode (terminated, a reset row) but the game goes
    on: ``l`` and ``t`` are the whole game's, not the last life's."""
    import time

    with shmatari.make("Breakout", num_envs=2, num_workers=1, seed=SEED, preset="dqn",
                       max_episode_frames=3000) as env:
        env.reset()
        began = np.full(2, time.perf_counter())  # at or after each game's first row
        steps, lives_lost, games = np.zeros(2, int), np.zeros(2, int), 0
        for a in random_actions(4, 2, 1500, 9):
            before = time.perf_counter()
            _, _, term, trunc, info = env.step(a)
            after = time.perf_counter()
            new_game = info["reset"] & (info["elapsed_step"] == 0)
            lives_lost += info["reset"] & ~new_game
            steps += ~info["reset"]  # a reset row, new game or next life, is no step
            if "episode" in info:
                for i in np.flatnonzero(info["_episode"]):
                    assert info["episode"]["l"][i] == steps[i]
                    # the game's clock started before `began` and stops after
                    # `before`, whatever the lives lost in between
                    assert info["episode"]["t"][i] >= before - began[i] - 1e-5
                    games += lives_lost[i] > 0
            steps[new_game], lives_lost[new_game] = 0, 0
            began[new_game] = after
        assert games >= 1  # a game with a lost life before its end was checked

# -- max_episode_frames ----------------------------------------------------------------

@pytest.mark.parametrize("noop_max", [0, 30])
def test_truncation_at_exactly_the_frame_cap(noop_max):
    with make1("Pong", noop_max=noop_max, max_episode_frames=400,
               repeat_action_probability=0.0) as env:
        _, info = env.reset()
        noops = int(info["episode_frame_number"][0])
        last = -(-(400 - noops) // 4)  # the step that reaches frame 400
        for step in range(1, last + 2):
            _, reward, term, trunc, info = env.step([0])
            done = term[0] or trunc[0]
            if step < last:
                assert not done and info["episode_frame_number"][0] == noops + 4 * step
            elif step == last:
                assert trunc[0] and not term[0]
                assert info["episode_frame_number"][0] == 400 == info["episode"]["frames"][0]
                assert info["episode"]["l"][0] == last
            else:
                assert info["reset"][0] and not done and reward[0] == 0
    if noop_max == 0:
        assert last == 100  # so the default 108,000 frames truncate at step 27,000
    assert config.OPTION_DEFAULTS["max_episode_frames"] == 4 * 27_000


@pytest.mark.parametrize("options", [dict(noop_max=30),
                                     dict(noop_max=30, use_fire_reset=True),
                                     dict(noop_max=1, episodic_life=True, use_fire_reset=True)])
def test_truncation_at_exactly_the_step_cap(options):
    """``max_episode_steps``: the step whose ``elapsed_step`` reaches the cap
    is truncated, whatever no-op and FIRE frames began the game (not
    counted), and the count goes on across lost lives under
    ``episodic_life``: EnvPool's ``elapsed_step >= max_episode_steps``
    (atari_env.h), which CleanRL's async scripts test. A frame cap, also
    set, comes first where it is lower."""
    cap = 60
    with shmatari.make("Breakout", num_envs=2, num_workers=1, seed=3, max_episode_steps=cap,
                       max_episode_frames=None, **options) as env:
        env.reset(seed=3)
        rng = np.random.default_rng(0)
        truncations = 0
        for _ in range(3 * cap):
            _, _, term, trunc, info = env.step(rng.integers(0, 4, 2))
            steps = info["elapsed_step"]
            np.testing.assert_array_equal(trunc, steps == cap)  # there, and only there
            assert (steps <= cap).all()
            truncations += int(trunc.sum())
        assert truncations >= 2
    with make1("Pong", noop_max=0, max_episode_frames=40, max_episode_steps=cap,
               repeat_action_probability=0.0) as env:
        env.reset()
        trunc = [env.step([0])[3][0] for _ in range(10)]
        assert trunc == [False] * 9 + [True]  # the frame cap, at step 10


def test_no_cap_is_none_in_the_public_config_as_documented():
    """The default ``max_episode_steps`` (and ``max_episode_frames=None``)
    is None in ``env.config`` as in the docs and ``get_attr``: a 0 there
    made CleanRL's ``elapsed_step >= max_episode_steps`` truncate every step.
    The core still sees no cap (nothing truncates)."""
    with shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0,
                       max_episode_frames=None) as env:
        assert env.config.max_episode_steps is None and env.config.max_episode_frames is None
        assert env.get_attr("max_episode_steps") == (None, None)
        assert env.get_attr("max_episode_frames") == (None, None)
        env.reset(seed=0)
        for _ in range(20):
            _, _, term, trunc, _ = env.step(np.zeros(2, np.int64))
            assert not trunc.any() and not term.any()
    with shmatari.make("Breakout", num_envs=1, seed=0) as env:
        assert env.config.max_episode_steps is None
        assert env.config.max_episode_frames == config.OPTION_DEFAULTS["max_episode_frames"]


def test_frame_count_includes_the_starting_frames_of_a_games_reset():
    """ALE's reset_game emulates starting frames for some games (Air Raid
    among them): the count and the cap include them, as ALE's
    getEpisodeFrameNumber and Gymnasium do."""
    with make1("AirRaid", noop_max=0, repeat_action_probability=0.0) as env:
        _, info = env.reset()
        start = int(info["episode_frame_number"][0])
    core, _ = build_core("AirRaid", noop_max=0, repeat_action_probability=0.0)
    core.reset()
    assert start == core.episode_frame_number == core.ale.getEpisodeFrameNumber() > 0
    with make1("AirRaid", noop_max=0, repeat_action_probability=0.0,
               max_episode_frames=start + 4) as env:
        env.reset()
        _, _, term, trunc, info = env.step([0])
        assert trunc[0] and info["episode"]["frames"][0] == start + 4


# -- sticky actions, action space --------------------------------------------------------

def test_sticky_actions_with_probability_one_never_take_an_action():
    """ALE's own per-frame stickiness: at 1.0 every frame repeats the previous
    one, which starts as NOOP, so no action ever reaches the game."""
    def run(actions, rap):
        with make1("Breakout", noop_max=0, repeat_action_probability=rap,
                   use_fire_reset=True) as env:
            env.reset()
            return [env.step([a])[0][0] for a in actions]
    acts = random_actions(4, 1, 60, 1)[:, 0]
    for x, y in zip(run(acts, 1.0), run(np.zeros(60, int), 1.0)):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(run(acts, 0.0), run(np.zeros(60, int), 0.0)))


def test_full_action_space():
    with make1("Breakout", full_action_space=True) as env:
        assert env.single_action_space.n == 18 and env.action_set == list(range(18))
    with make1("Breakout") as env:
        assert env.single_action_space.n == 4 and env.action_set == [0, 1, 3, 4]


# -- autoreset modes ------------------------------------------------------------------

#: A seed whose envs 0 and 1 draw 8 and 27 no-ops at their first reset, so
#: that with a 400-frame cap their episodes end on different steps (98, 94).
BOUNDARY_SEED = 2


def test_boundary_seed_draws_different_noop_counts():
    assert [seeding.noop_rng(BOUNDARY_SEED, i).integers(1, 31) for i in range(2)] == [8, 27]


def _boundary_run(mode: str, steps: int, action_at_reset: int = 0):
    """Two Pong envs capped at 400 frames, NOOP actions except
    ``action_at_reset`` sent to an env on the step after its episode ended;
    every step's results."""
    with shmatari.make("Pong", num_envs=2, num_workers=1, seed=BOUNDARY_SEED, autoreset_mode=mode,
                       max_episode_frames=400, repeat_action_probability=0.0) as env:
        out = [(*env.reset(), None, None, None)]
        done = np.zeros(2, bool)
        for _ in range(steps):
            out.append(env.step(np.where(done, action_at_reset, 0)))
            done = out[-1][2] | out[-1][3]
        return env.metadata["autoreset_mode"], out


def _per_env(run, same_step: bool):
    """Each env's own sequence of (obs, reward, terminated, truncated,
    episode_frame_number); a same-step done result counts as its final
    record followed by the reset."""
    seqs = [[], []]
    for obs, reward, term, trunc, info in run[1:]:
        for i in range(2):
            row = (obs[i], reward[i], term[i], trunc[i], info["episode_frame_number"][i])
            if same_step and (term[i] or trunc[i]):
                fin = info["final_info"]
                seqs[i].append((info["final_obs"][i], reward[i], term[i], trunc[i],
                                fin["episode_frame_number"][i]))
                row = (obs[i], 0.0, False, False, info["episode_frame_number"][i])
            seqs[i].append(row)
    return seqs


def _assert_same_sequences(a, b):
    n = min(len(a), len(b))
    assert n >= 100
    for k, (x, y) in enumerate(zip(a[:n], b[:n])):
        np.testing.assert_array_equal(x[0], y[0], err_msg=f"result {k}")
        assert tuple(map(float, x[1:])) == tuple(map(float, y[1:])), f"result {k}"


def test_next_step_autoreset_at_the_boundary():
    mode, run = _boundary_run("next_step", 120)
    other = _boundary_run("next_step", 120, action_at_reset=3)[1]
    assert mode == gym.vector.AutoresetMode.NEXT_STEP
    t = next(t for t in range(1, len(run)) if (run[t][2] | run[t][3]).any())
    i = int(np.flatnonzero(run[t][3])[0])
    assert run[t][4]["_episode"][i] and run[t][4]["episode"]["frames"][i] == 400
    obs, reward, term, trunc, info = run[t + 1]
    assert info["reset"][i] and reward[i] == 0 and not term[i] and not trunc[i]
    assert info["elapsed_step"][i] == 0
    assert "episode" not in info or not info["_episode"][i]
    # The new episode's first stack holds none of the old frames...
    assert all((obs[i][k] == obs[i][0]).all() for k in range(4))
    assert not any((obs[i][0] == f).all() for f in run[t][0][i])
    # ...and the terminal stack only the ending episode's.
    np.testing.assert_array_equal(run[t][0][i][:-1], run[t - 1][0][i][1:])
    # The action sent with the reset step is ignored.
    for x, y in zip(_per_env(run, False), _per_env(other, False)):
        _assert_same_sequences(x, y)


def test_same_step_autoreset_at_the_boundary():
    mode, same = _boundary_run("same_step", 120)
    nxt = _boundary_run("next_step", 120)[1]
    assert mode == gym.vector.AutoresetMode.SAME_STEP
    # Env by env, same-step results are next-step results with each done
    # step and the reset after it folded into one.
    for x, y in zip(_per_env(same, True), _per_env(nxt, False)):
        _assert_same_sequences(x, y)
    finals = 0
    for obs, reward, term, trunc, info in same[1:]:
        done = term | trunc
        if not done.any():
            assert "final_obs" not in info and "final_info" not in info
            continue
        finals += 1
        np.testing.assert_array_equal(info["_final_obs"], done)
        np.testing.assert_array_equal(info["_final_info"], done)
        np.testing.assert_array_equal(info["_episode"], done)
        np.testing.assert_array_equal(info["final_info"]["_episode"], done)
        for i in range(2):
            if done[i]:
                assert info["reset"][i] and not info["final_info"]["reset"][i]
                assert info["elapsed_step"][i] == 0
                assert info["final_info"]["episode_frame_number"][i] == 400
                assert info["episode"]["frames"][i] == 400 == info["final_info"]["episode"]["frames"][i]
                assert info["episode"]["l"][i] == info["final_info"]["elapsed_step"][i]
                # the same statistics at both levels, the wall time too (its
                # "t" was missing from final_info: a newcomer's pass)
                assert set(info["final_info"]["episode"]) == set(info["episode"])
                assert info["final_info"]["episode"]["t"][i] == info["episode"]["t"][i] > 0
                assert all((obs[i][k] == obs[i][0]).all() for k in range(4))
            else:
                assert info["final_obs"][i] is None and not info["reset"][i]
    assert finals >= 2


def test_same_step_final_records_in_an_async_pool():
    """Results in arrival order (batch_size 1) carry their own final record."""
    with shmatari.make("Pong", num_envs=2, num_workers=1, batch_size=1, seed=BOUNDARY_SEED,
                       autoreset_mode="same_step", max_episode_frames=400,
                       repeat_action_probability=0.0) as env:
        env.async_reset()
        env.recv()
        env.recv()
        env.send([0, 0], env_id=[0, 1])
        finals = set()
        for _ in range(400):
            obs, _, term, trunc, info = env.recv()
            i = int(info["env_id"][0])
            if trunc[0]:
                assert info["_final_obs"][0] and info["final_obs"][0].shape == obs[0].shape
                assert info["final_info"]["episode_frame_number"][0] == 400
                assert info["final_info"]["env_id"][0] == i and info["reset"][0]
                assert not np.array_equal(info["final_obs"][0], obs[0])
                finals.add(i)
            else:
                assert "final_obs" not in info
            if finals == {0, 1}:
                break
            env.send([0], env_id=[i])
        assert finals == {0, 1}


def test_disabled_autoreset_needs_a_masked_reset():
    with shmatari.make("Pong", num_envs=2, num_workers=1, seed=BOUNDARY_SEED,
                       autoreset_mode="disabled",
                       max_episode_frames=400, repeat_action_probability=0.0) as env:
        assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.DISABLED
        with pytest.raises(shmatari.CallOrderError, match="first reset"):
            env.reset(options={"reset_mask": np.array([True, False])})
        env.reset()
        while True:
            obs, _, term, trunc, info = env.step([0, 0])
            done = term | trunc
            if done.any():
                break
        np.testing.assert_array_equal(done, [False, True])
        i, j = int(np.flatnonzero(done)[0]), int(np.flatnonzero(~done)[0])
        with pytest.raises(shmatari.CallOrderError, match="reset_mask") as refused:
            env.step([0, 0])
        # the way out is that reset alone (send() would be refused the same way)
        assert "send()" not in str(refused.value), refused.value
        kept = obs.copy()
        obs, info = env.reset(options={"reset_mask": done})
        assert info["reset"][i] and not info["reset"][j]
        assert info["episode_frame_number"][i] < 31
        np.testing.assert_array_equal(obs[j], kept[j])
        assert all((obs[i][k] == obs[i][0]).all() for k in range(4))
        obs2, _, term, trunc, info = env.step([0, 0])
        assert not info["reset"].any()
        assert info["elapsed_step"][i] == 1


@pytest.mark.parametrize("options,exc,match", [
    ({"reset_mask": [True, False]}, TypeError, "numpy array"),
    ({"reset_mask": np.array([1, 0])}, TypeError, "dtype bool"),
    ({"reset_mask": np.array([True])}, ValueError, r"shape \(2,\)"),
    ({"reset_mask": np.array([False, False])}, ValueError, "at least one True"),
    ({"other": 1}, ValueError, "only the option 'reset_mask'"),
])
def test_bad_reset_options_are_refused(options, exc, match):
    with shmatari.make("Pong", num_envs=2, num_workers=1, seed=SEED) as env:
        env.reset()
        with pytest.raises(exc, match=match):
            env.reset(options=options)
        with pytest.raises(ValueError, match="seed"):
            env.reset(seed=1, options={"reset_mask": np.array([True, False])})
        env.reset(options={"reset_mask": np.array([False, True])})
        env.step([0, 0])


def test_autoreset_mode_accepts_gymnasium_enum():
    cfg = config.build_config("Pong", 1, seed=0, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    assert cfg.autoreset_mode == "same_step"
    # The pipe baseline implements every mode (tests/test_baselines.py) and declares it.
    with make_pipe("Pong", 1, seed=0, autoreset_mode=gym.vector.AutoresetMode.DISABLED) as env:
        assert env.metadata["autoreset_mode"] is gym.vector.AutoresetMode.DISABLED


# -- presets -------------------------------------------------------------------------

def test_presets_set_what_they_document_and_explicit_options_win():
    dqn = config.build_config("Breakout", 1, seed=0, preset="dqn")
    assert (dqn.repeat_action_probability, dqn.episodic_life, dqn.use_fire_reset,
            dqn.reward_clip, dqn.noop_max, dqn.frame_skip, dqn.img_height) == \
        (0.0, True, True, True, 30, 4, 84)
    assert config.build_config("Breakout", 1, seed=0, preset="dqn", reward_clip=False).reward_clip \
        is False
    gymn = config.build_config("Breakout", 1, seed=0, preset="gymnasium")
    assert gymn.repeat_action_probability == 0.25 and not gymn.episodic_life
    for name, preset in config.PRESETS.items():
        cfg = config.build_config("Breakout", 1, seed=0, preset=name)
        assert {k: getattr(cfg, k) for k in preset} == preset
    with pytest.raises(ValueError, match="preset must be one of"):
        shmatari.make("Breakout", preset="nature")
