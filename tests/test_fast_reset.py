"""Fast resets (shmatari.fast_reset): exact where the verdict table says so,
ALE's reset elsewhere, and today's streams unchanged."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import ale_py
import numpy as np
import pytest

import shmatari
from shmatari import atari, config, fast_reset, games, seeding
from shmatari._core import FLAG_RESET, RESULT_FIELDS, AtariCore
from shmatari.check import stream_hashes

pytestmark = pytest.mark.usefixtures("no_leaks")

#: Stream hashes of pools built before fast resets existed (commit f7d6066,
#: every reset ALE's own): (game, options) -> the first 16 hex digits of the
#: SHA-256 of the two envs' stream_hashes(env, 400) digests, seed 7. The
#: same_step case was re-recorded when stream_hashes began to hash same-step
#: final observations (issue 22): main without fast resets gives the same
#: digest, 19759ff27a6a26af.
RECORDED = {
    ("breakout", ()): "8c14d1441d04a271",
    ("breakout", (("preset", "dqn"),)): "cb25721f99842468",
    ("pong", (("max_episode_frames", 400),)): "f861498e607a88d9",
    ("qbert", (("noop_max", 0), ("repeat_action_probability", 0.0))): "6a2d1a27ac0720a4",
    ("air_raid", (("max_episode_frames", 600), ("noop_max", 0))): "e1822a8436c2eb1a",
    ("space_invaders", (("autoreset_mode", "same_step"),
                        ("max_episode_frames", 500))): "19759ff27a6a26af",
    ("freeway", (("grayscale", False), ("max_episode_frames", 300),
                 ("repeat_action_probability", 0.0))): "c20efe090ef96920",
    ("ms_pacman", (("episodic_life", True), ("full_action_space", True))): "d57daa19af73060d",
}


def _digest(game, opts, steps=400, seed=7):
    opts = {"fast_reset": "auto", **opts}  # the recorded streams, fast where proven
    with shmatari.make(game, num_envs=2, num_workers=1, seed=seed, **opts) as env:
        h = stream_hashes(env, steps)
    return hashlib.sha256("".join(h).encode()).hexdigest()[:16]


@pytest.mark.parametrize("game,opts", list(RECORDED), ids=[g for g, _ in RECORDED])
def test_streams_are_the_ones_recorded_before_fast_resets(game, opts):
    assert _digest(game, dict(opts)) == RECORDED[(game, opts)]


def test_the_recorded_cases_reset_fast_where_the_table_says_so():
    # The recorded streams check fast resets only if some of them use them.
    fast = [g for g, opts in RECORDED
            if fast_reset.use_fast_reset(config.build_config(g, num_envs=1, fast_reset="auto",
                                                             **dict(opts)))]
    if fast_reset.VERDICTS["ale_py"] == ale_py.__version__:
        assert {"breakout", "air_raid"} <= set(fast)


@pytest.mark.parametrize("game,opts,seed", [
    ("breakout", {}, 0),
    ("breakout", {"preset": "dqn", "max_episode_frames": 800}, 1),
    ("air_raid", {"noop_max": 0, "render_mode": "rgb_array", "max_episode_frames": 400}, 2),
    ("alien", {"autoreset_mode": "same_step", "max_episode_frames": 400}, 3),
    # few no-op counts and short games: most new games restore a saved start
    ("breakout", {"noop_max": 3, "max_episode_frames": 120}, 4),
    ("breakout", {"noop_max": 2, "max_episode_frames": 100, "use_fire_reset": True,
                  "repeat_action_probability": 0.0}, 5),
    ("pong", {"noop_max": 4, "max_episode_frames": 90, "render_mode": "rgb_array"}, 6),
    ("space_invaders", {"noop_max": 2, "autoreset_mode": "same_step",
                        "max_episode_frames": 80}, 7),
])
def test_pools_with_fast_resets_on_and_off_give_the_same_streams(game, opts, seed):
    on = _digest(game, {**opts, "fast_reset": "auto"}, steps=250, seed=seed)
    assert on == _digest(game, {**opts, "fast_reset": "off"}, steps=250, seed=seed)


def test_new_games_restore_saved_no_op_starts():
    """With fast resets a new game that draws a no-op count already seen
    restores the start saved then; the streams stay those of ALE's resets."""
    cfg = config.build_config("breakout", num_envs=1, noop_max=3, max_episode_frames=60,
                              fast_reset="auto", seed=3)
    off = config.build_config("breakout", num_envs=1, noop_max=3, max_episode_frames=60,
                              fast_reset="off", seed=3)
    cores = [atari.build_core(c, 0, atari.build_palette(c)) for c in (cfg, off)]
    obs = [np.empty(cfg.obs_shape, np.uint8) for _ in cores]
    games_started = 0
    for t in range(600):  # 15 steps a game: 40 games
        for core, o in zip(cores, obs):
            core.step(t % core.num_actions) if t else core.reset()
            core.obs_into(o)
        assert cores[0].result() == cores[1].result(), t
        assert np.array_equal(*obs), t
        flags = dict(zip(RESULT_FIELDS, cores[0].result()))["flags"]
        games_started += bool(flags & FLAG_RESET)
    assert cores[0].fast_reset and games_started >= 30
    assert cores[0].saved_starts == 3 and cores[1].saved_starts == 0


@pytest.mark.parametrize("p", [0.0, 0.25])
def test_the_first_fast_new_game_saves_every_no_op_start_in_one_pass(p):
    """FastReset.learn_noops: one pass of noop_max NOOP frames saves every
    start (it used to be one start per new count drawn, 1 + 2 + ... + 30
    frames over the first hundred or so games), leaves the env as it was
    (state, generator, frame count), and the pool's streams stay ALE's."""
    path = str(games.rom_path("breakout"))
    ale = fast_reset._new_ale(path, 3, p)
    ale.reset_game()
    fr = fast_reset.FastReset(ale)
    actions = ale.getMinimalActionSet()
    for a in [1, 3, 2, 0, 3] * 20:
        ale.act(actions[a])
    before = ale.cloneState(include_rng=True).serialize()
    screens = fr.learn_noops(30)
    assert fr.learned and len(screens) == 30
    assert all(fr.saved_noops(k) for k in range(1, 31))
    assert ale.cloneState(include_rng=True).serialize() == before
    # a cap inside the pass: only the starts below it (the reset itself
    # counts its own frames in the episode)
    other = fast_reset._new_ale(path, 3, p)
    other.reset_game()
    capped = fast_reset.FastReset(other)
    capped.learn_noops(30, max_episode_frames=other.getEpisodeFrameNumber() + 10)
    assert [k for k in range(1, 31) if capped.saved_noops(k)] == list(range(1, 10))
    # in a pool: all 30 after the second game, and the streams of ALE's resets
    opts = dict(max_episode_frames=200, repeat_action_probability=p)
    cores = [_core("breakout", fast_reset=f, **opts) for f in ("auto", "off")]

    def after_step(games_started):
        if games_started == 2:
            assert cores[0].saved_starts == 30

    assert _same_streams(cores, 400, after_step) >= 4 and cores[1].saved_starts == 0


def _same_streams(cores, steps: int, after_step=lambda games_started: None) -> int:
    """Steps two cores (fast resets and ALE's) alike, asserting the same
    results and observations at every step; returns the games started."""
    obs = [np.empty((4, 84, 84), np.uint8) for _ in cores]
    games_started = 0
    for t in range(steps):
        for core, o in zip(cores, obs):
            core.step(t % core.num_actions) if t else core.reset()
            core.obs_into(o)
        assert cores[0].result() == cores[1].result(), t
        assert np.array_equal(*obs), t
        games_started += bool(dict(zip(RESULT_FIELDS, cores[0].result()))["flags"] & FLAG_RESET)
        after_step(games_started)
    return games_started


def _proven(game, p):
    return fast_reset.proven(game, str(games.rom_path(game)), p)


@pytest.mark.all_games
@pytest.mark.parametrize("p", [0.0, 0.25])
def test_fast_and_real_resets_agree_in_every_game_the_table_proves(p):
    """Every listed game the table proves: a short comparison (six short
    episodes with 1..3 no-ops, so that later ones restore saved starts; a seed of
    its own per game and setting) finds no difference.
    The table itself comes from longer ones (``python -m shmatari.fast_reset``)."""
    if fast_reset.VERDICTS["ale_py"] != ale_py.__version__:
        pytest.skip(f"the verdicts are for ale-py {fast_reset.VERDICTS['ale_py']}")
    differ, proven = {}, 0
    for i, game in enumerate(games.list_games()):
        if _proven(game, p):
            proven += 1
            why = fast_reset.compare(str(games.rom_path(game)), p, i + int(p * 1000),
                                     episodes=6, max_frames=40, noop_max=3)
            if why:
                differ[game] = why
    assert not differ
    assert proven >= 50  # most games (ale-py 0.12.1: see the table)


def test_unproven_games_reset_as_ale_does():
    table = fast_reset.VERDICTS
    for entry in table["differ"]:
        game, key = entry.split()
        p = 0.0 if key == "sticky_0" else 0.25
        assert not fast_reset.use_fast_reset(
            config.build_config(game, num_envs=1, repeat_action_probability=p, fast_reset="auto"))
        break  # one pool's decision; the rest is the lookup:
    for entry in table["differ"]:
        game, key = entry.split()
        assert not _proven(game, 0.0 if key == "sticky_0" else 0.25)


def test_off_and_unproven_settings_reset_as_ale_does():
    base = dict(num_envs=1)
    assert not fast_reset.use_fast_reset(config.build_config("breakout", fast_reset="off", **base))
    # a sticky probability above the primer's first draw
    assert not fast_reset.use_fast_reset(
        config.build_config("breakout", repeat_action_probability=1.0, fast_reset="auto", **base))
    cfg = config.build_config("breakout", fast_reset="auto", **base)
    core = atari.build_core(cfg, 0, atari.build_palette(cfg), preprocessor=object())
    assert not core.fast_reset
    with pytest.raises(ValueError, match="fast_reset needs"):
        AtariCore(core.ale, atari.build_palette(cfg), core.action_ids(), core.rom_path,
                        frame_skip=4, stack_num=4, maxpool=True, noop_max=0,
                        episodic_life=False, use_fire_reset=False, reward_clip=False,
                        max_episode_frames=0, noop_rng=None, same_step=False,
                        preprocessor=object(), fast_reset=True)
    with pytest.raises(ValueError, match="fast_reset"):
        config.build_config("breakout", fast_reset="on", **base)


def test_a_rom_replaced_in_place_is_judged_by_its_new_bytes(tmp_path):
    """The MD5 is cached per file as stat sees it: a ROM rewritten under a
    long-lived process is hashed again (until 2026-12-06 it kept its old
    verdict for the life of the process: a helper's pass)."""
    rom = tmp_path / "breakout.bin"
    good = Path(games.rom_path("breakout")).read_bytes()
    rom.write_bytes(good)
    assert fast_reset.proven("breakout", str(rom), 0.0)
    st = os.stat(rom)
    rom.write_bytes(bytes([good[0] ^ 0xFF]) + good[1:])  # same size
    os.utime(rom, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert not fast_reset.proven("breakout", str(rom), 0.0)
    rom.write_bytes(good)
    os.utime(rom, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000))
    assert fast_reset.proven("breakout", str(rom), 0.0)


def test_a_sticky_probability_is_judged_as_ales_float():
    """ALE keeps repeat_action_probability as a float32: 0.9990137 is below
    the primer's first draw as a double (0.99901371682...) but above it as
    ALE's float (0.99901372194...). Fast resets were used there, the primer
    frame repeated the old game's action, and pools with fast resets on and
    off parted at the first new game (a reproducibility pass)."""
    p, draw = 0.9990137, fast_reset._primer_draw()
    assert p <= draw < float(np.float32(p))  # the window itself
    base = dict(num_envs=1, fast_reset="auto")
    assert not fast_reset.use_fast_reset(
        config.build_config("breakout", repeat_action_probability=p, **base))
    assert fast_reset.use_fast_reset(
        config.build_config("breakout", repeat_action_probability=0.99901, **base))
    # games of 600 frames: nearly every frame repeats the last action, so
    # one that changed it in a game carries over to the next (the old code
    # parts here: its digests differ)
    opts = {"repeat_action_probability": p, "max_episode_steps": 150}
    on = _digest("breakout", {**opts, "fast_reset": "auto"}, steps=320, seed=0)
    assert on == _digest("breakout", {**opts, "fast_reset": "off"}, steps=320, seed=0)


def test_a_sticky_probability_is_judged_as_ale_keeps_it_six_digits():
    """ALE keeps the probability as text with six significant digits:
    0.9990136 is 0.999014 there, above the primer's draw (0.99901372), where
    its float32 is below it. Fast resets were used, the primer frame repeated
    the old game's action, and pools with fast resets on and off parted (a
    review, 2026-12-06). ale_probability is ALE's own value."""
    from ale_py import ALEInterface

    ale = ALEInterface()
    rng = np.random.default_rng(6)
    values = [0.9990136, 0.9990137, 0.99901, 0.2499996, 1e-7, 4.9e-7, 0.1234565, 1.0, 0.0,
              *rng.random(300), *(rng.random(100) * 1e-4)]
    for p in values:
        ale.setFloat("repeat_action_probability", float(p))
        assert fast_reset.ale_probability(p) == ale.getFloat("repeat_action_probability"), p
    base = dict(num_envs=1, fast_reset="auto")
    assert not fast_reset.use_fast_reset(
        config.build_config("breakout", repeat_action_probability=0.9990136, **base))
    opts = {"repeat_action_probability": 0.9990136, "max_episode_frames": 150, "noop_max": 0}
    on = _digest("breakout", {**opts, "fast_reset": "auto"}, steps=200, seed=5)
    assert on == _digest("breakout", {**opts, "fast_reset": "off"}, steps=200, seed=5)


def test_a_fast_reset_leaves_the_generator_and_counters_as_a_real_reset():
    # One env acted on by hand: after a fast reset the env's generator (what
    # sticky frames draw), ALE's frame counts and the remembered action (seen
    # through the next sticky frames) are a real reset's.
    path = str(games.rom_path("breakout"))
    assert fast_reset.compare(path, 0.25, 5, episodes=3, max_frames=300) is None
    assert fast_reset.compare(path, 0.9, 5, episodes=3, max_frames=300) is None


def test_the_followed_generator_is_numpys_mt19937_written_as_ale_writes_it():
    """A fast reset follows ALE's env generator (``_core.MTFollower``: two
    draws per frame emulated) instead of reading it from ALE at each reset.
    It draws as NumPy's MT19937 (the same generator) across twists, and
    writes what ALE's cloneState(include_rng=True) holds after as many
    frames, whatever the index (0, inside a block, 624)."""
    from shmatari._core import MTFollower

    mt = np.random.MT19937()
    mt._legacy_seeding(20261206)  # std::mt19937's seeding
    follower = MTFollower(fast_reset._mt_text(mt))
    assert follower.text() == fast_reset._mt_text(mt)
    for draws in (0, 1, 2, 619, 2, 1, 624, 1247, 3, 624 * 5, 0, 17):
        follower.advance(draws)
        if draws:
            mt.random_raw(draws)
        assert follower.text() == fast_reset._mt_text(mt), draws
        copy = np.random.MT19937()
        copy.state = mt.state
        assert follower.next_draw() == int(copy.random_raw()) / 2**32, draws
        assert follower.text() == fast_reset._mt_text(mt), draws  # the peek took nothing
    for bad in (b"1 2 3", b" ".join([b"1"] * 624 + [b"625"]),
                b" ".join([b"4294967296"] + [b"1"] * 623 + [b"0"])):
        with pytest.raises(ValueError, match="std::mt19937"):
            MTFollower(bad)
    # against ALE: followed over frames acted, as a fast reset follows it
    ale = fast_reset._new_ale(str(games.rom_path("breakout")), 3, 0.25)
    ale.reset_game()
    follower = fast_reset._follower(fast_reset._env_rng(ale))
    for frames in (1, 311, 312, 1, 700):
        for _ in range(frames):
            ale.act(ale.getMinimalActionSet()[frames % 4])
        follower.advance(2 * frames)
        assert fast_reset.FastReset._text(follower) == fast_reset._env_rng(ale), frames


@pytest.mark.parametrize("p", [0.25, 0.75])
def test_a_sticky_fast_reset_primes_only_where_the_next_frame_could_repeat(p):
    """A sticky fast reset acts the primer frame (which sets ALE's remembered
    action to NOOP, as a real reset does) only where the next frame's draw
    would repeat the remembered action: elsewhere that frame takes its new
    action whatever was remembered, and the state is simply restored. Over
    many resets (fast and saved no-op starts, from games cut short at random,
    so the old game's last action varies) both ways are taken, and every
    reset and the frames after it are a real reset's: state, generator,
    screen, reward."""
    path = str(games.rom_path("breakout"))
    real, fast = (fast_reset._new_ale(path, 8, p) for _ in range(2))
    real.reset_game(), fast.reset_game()
    fr = fast_reset.FastReset(fast)
    actions = real.getMinimalActionSet()
    rng = np.random.default_rng(8)
    resets = 0
    for game in range(120):
        for _ in range(int(rng.integers(1, 90))):
            a = actions[int(rng.integers(1, len(actions)))]  # never NOOP: a real action remembered
            assert real.act(a) == fast.act(a)
            if real.game_over():
                break
        noops = int(rng.integers(0, 4))
        real.reset_game()
        for _ in range(noops):
            real.act(actions[0])
        if noops and not fr.learned:
            fr.learn_noops(3)
        fr.restore_noops(noops) if noops else fr.restore()
        resets += 1
        assert fast_reset.comparable(real.cloneState(include_rng=True).serialize()) == \
            fast_reset.comparable(fast.cloneState(include_rng=True).serialize()), game
        for _ in range(3):  # where a remembered action would show
            a = actions[int(rng.integers(len(actions)))]
            assert real.act(a) == fast.act(a), game
            assert np.array_equal(real.getScreen(), fast.getScreen()), game
            assert np.array_equal(real.getRAM(), fast.getRAM()), game
    assert 0.4 * p * resets < fr.primed < min(1.0, 1.6 * p) * resets, fr.primed


def test_the_followed_generator_is_checked_against_ales_as_the_env_runs(monkeypatch):
    """The follower's invariant (two draws a frame, every frame one ``act``
    of one frame) is checked as envs run: the first reset followed and every
    ``CHECK_EVERY``-th read ALE's generator and compare. Here every reset is
    checked: over 40 games none differs; a follower put one draw off (what a
    frame emulated some other way would do) warns at the next reset, which
    goes on from ALE's generator and is a real reset's."""
    import warnings

    monkeypatch.setattr(fast_reset, "CHECK_EVERY", 1)
    path = str(games.rom_path("breakout"))
    real, fast = (fast_reset._new_ale(path, 4, 0.25) for _ in range(2))
    real.reset_game(), fast.reset_game()
    fr = fast_reset.FastReset(fast)
    actions = real.getMinimalActionSet()
    rng = np.random.default_rng(4)
    for game in range(40):
        for _ in range(int(rng.integers(1, 60))):
            a = actions[int(rng.integers(1, len(actions)))]
            assert real.act(a) == fast.act(a)
        real.reset_game()
        if game == 21:
            with pytest.warns(RuntimeWarning, match="followed ALE's generator wrongly"):
                fr.restore()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                fr.restore()
        if game == 20:
            fr._known.advance(1)  # planted: one draw the frames did not make
        assert fast_reset.comparable(real.cloneState(include_rng=True).serialize()) == \
            fast_reset.comparable(fast.cloneState(include_rng=True).serialize()), game
    assert fr.desyncs == 1


def test_the_table_names_its_ale_version_and_rom_hashes():
    table = fast_reset.VERDICTS
    assert set(table) >= {"ale_py", "sticky_0", "sticky", "differ"}
    for key in ("sticky_0", "sticky"):
        for game, md5 in table[key].items():
            assert len(md5) == 32 and game in games.list_games()
    json.dumps(table)


# -- resets prepared ahead (EnvCore.prepare_reset) -------------------------------------

def test_no_op_starts_are_saved_up_to_a_cap_and_larger_draws_are_emulated():
    """A start was saved for every count up to noop_max, about 42 kB each, so
    noop_max=20000 grew a worker by 800 MB (a newcomer's pass). Counts above
    NOOP_STARTS_MAX (64) are emulated after the restore, as an unsaved count
    is, and the streams stay those of ALE's resets."""
    cap = fast_reset.NOOP_STARTS_MAX
    opts = dict(noop_max=3 * cap, max_episode_frames=4 * cap + 200)
    cores = [_core("breakout", fast_reset=f, **opts) for f in ("auto", "off")]
    assert _same_streams(cores, 1200) >= 4
    assert cores[0].saved_starts == cap and cores[1].saved_starts == 0


@pytest.mark.parametrize("game,opts", [
    ("star_gunner", {}),
    ("gravitar", {}),
    ("riverraid", {"noop_max": 64}),
    ("earthworld", {"noop_max": 64}),
    ("star_gunner", {"grayscale": False}),
])
def test_the_no_op_starts_learned_in_one_pass_show_their_own_colours(game, opts):
    """learn_noops saves the starts after 1..noop_max no-ops in one pass, and
    each start's screen holds palette indices the worker's palette learns
    from ALE's conversion of the *current* screen. Learning them after the
    pass read the colours of its last frame instead: in these games a start
    shows an index not seen before, and its observation (and every later
    one with that index, in every env of the worker) came out in other
    colours than with ALE's resets (Star Gunner's whole background)."""
    opts = dict(max_episode_steps=2, **opts)  # a new game every 3 steps
    cfgs = [config.build_config(game, num_envs=1, seed=4, fast_reset=f, **opts)
            for f in ("auto", "off")]
    cores = [atari.build_core(c, 0, atari.build_palette(c)) for c in cfgs]
    assert cores[0].fast_reset and not cores[1].fast_reset
    obs = [np.empty(cfgs[0].obs_shape, np.uint8) for _ in cores]
    for t in range(30):
        for core, o in zip(cores, obs):
            core.step(0) if t else core.reset()
            core.obs_into(o)
        assert cores[0].result() == cores[1].result(), t
        assert np.array_equal(*obs), t
    assert cores[0].saved_starts > 0


def _core(game, **opts):
    cfg = config.build_config(game, num_envs=1, seed=4, **opts)
    return atari.build_core(cfg, 0, atari.build_palette(cfg))


@pytest.mark.parametrize("game,opts", [
    ("breakout", {"max_episode_frames": 300}),
    ("breakout", {"preset": "dqn", "max_episode_frames": 2000}),  # lost lives: next life
    ("pong", {"fast_reset": "off", "max_episode_frames": 200}),
    ("air_raid", {"noop_max": 0, "max_episode_frames": 200, "disabled_reset": True}),
])
def test_a_prepared_reset_is_the_reset_the_next_command_would_make(game, opts):
    import numpy as np

    disabled = opts.pop("disabled_reset", False)
    a, b = _core(game, **opts), _core(game, **opts)
    rng = np.random.default_rng(0)
    obs_a, obs_b = np.empty((4, 84, 84), np.uint8), np.empty((4, 84, 84), np.uint8)
    a.reset(), b.reset()
    prepared = 0
    for t in range(700):
        if a.result()[1] or a.result()[2]:  # terminated or truncated
            a.prepare_reset()
            prepared += 1
            if rng.random() < 0.5:  # an OBSERVE in between shows the done step
                a.observe(), b.observe()
                a.obs_into(obs_a), b.obs_into(obs_b)
                assert a.result() == b.result() and np.array_equal(obs_a, obs_b)
                # its RAM too (ram_info): it showed the prepared game's
                assert a.ram() == b.ram()
            if disabled:
                a.reset(), b.reset()
        action = int(rng.integers(a.num_actions))
        a.step(action), b.step(action)
        a.obs_into(obs_a), b.obs_into(obs_b)
        assert a.result() == b.result(), t
        assert np.array_equal(obs_a, obs_b), t
    assert prepared >= 2


def test_a_reseed_drops_a_prepared_reset_and_its_frames():
    """reset(seed=...) reloads the ROM and drops an episode started ahead:
    the env's frame count is then what it would be had none been started (it
    kept the dropped reset's frames, so info["frame_number"] after a reseed
    depended on whether the idle worker had got to it)."""
    import numpy as np

    a, b = _core("breakout", max_episode_frames=200), _core("breakout", max_episode_frames=200)
    a.reset(), b.reset()
    rng = np.random.default_rng(0)
    while not (a.result()[1] or a.result()[2]):
        action = int(rng.integers(a.num_actions))
        a.step(action), b.step(action)
    a.prepare_reset()
    for core in (a, b):
        core.reseed(seeding.ale_seed(1, 0), seeding.noop_rng(1, 0))
        core.reset()
    assert a.result() == b.result()
    assert a.frame_number == b.frame_number
