"""Through shmatari.envpool, EnvPool's options give EnvPool's observations,
rewards, flags and info, where EnvPool's rules and shmatari's are the same.

Settings where both are deterministic and follow the same rules:
``repeat_action_probability=0`` (EnvPool's sticky-action stream is ALE's,
seeded ``seed + i``; shmatari seeds ALE from ``SeedSequence(seed, (i,))``),
``noop_max=1`` without FIRE reset (one no-op frame in both: EnvPool's no-op
count comes from its own std::mt19937, shmatari's from a seeded PCG64),
``episodic_life=False`` (EnvPool finishes the frame skip after a lost life,
shmatari stops at that frame). Different by design, and so not compared:
the observation of a done step (EnvPool shows its max-pool buffer, stale when
the game ends before the last two frames; shmatari pools the last frames
emulated, docs/semantics.md), and ``info["ram"]`` (shmatari gives none).
"""

from __future__ import annotations

import numpy as np
import pytest

import shmatari.envpool as shm_envpool

envpool = pytest.importorskip("envpool")

pytestmark = pytest.mark.usefixtures("no_leaks")

PARITY = dict(num_envs=4, seed=3, noop_max=1, use_fire_reset=False,
              repeat_action_probability=0.0, episodic_life=False)


@pytest.mark.parametrize("task_id, reward_clip", [("Breakout-v5", True), ("Pong-v5", False)])
def test_same_observations_rewards_flags_and_info_as_envpool(task_id, reward_clip):
    theirs = envpool.make(task_id, env_type="gymnasium", reward_clip=reward_clip, **PARITY)
    ours = shm_envpool.make(task_id, env_type="gymnasium", reward_clip=reward_clip, **PARITY)
    try:
        assert ours.action_space == theirs.action_space
        assert ours.observation_space == theirs.observation_space
        obs_a, info_a = theirs.reset()
        obs_b, info_b = ours.reset()
        assert np.array_equal(obs_a, obs_b)
        assert set(info_b) == set(info_a) - {"ram"}
        actions = np.random.default_rng(0).integers(0, ours.action_space.n, (1000, 4))
        dones = 0
        for t, act in enumerate(actions):
            a, b = theirs.step(act), ours.step(act)
            for k, name in ((1, "reward"), (2, "terminated"), (3, "truncated")):
                assert a[k].dtype == b[k].dtype, name
                assert np.array_equal(a[k], b[k]), f"step {t}: {name} {a[k]} != {b[k]}"
            for key in ("env_id", "lives", "reward", "terminated", "elapsed_step"):
                assert a[4][key].dtype == b[4][key].dtype, key
                assert np.array_equal(a[4][key], b[4][key]), f"step {t}: info[{key!r}]"
            done = a[2] | a[3]
            assert np.array_equal(a[0][~done], b[0][~done]), f"step {t}: observations"
            dones += int(done.sum())
        assert dones >= 1  # the comparison crossed at least one game boundary
    finally:
        theirs.close()
        ours.close()


@pytest.mark.parametrize("options", [{}, dict(episodic_life=True),
                                     dict(noop_max=1, repeat_action_probability=0.25,
                                          full_action_space=True)])
def test_truncation_comes_where_envpool_puts_it(options):
    """EnvPool truncates at ``elapsed_step >= max_episode_steps`` (agent
    steps; its no-op and FIRE reset frames not counted), and CleanRL's async
    scripts test exactly that instead of the flag. shmatari's adapter capped
    frames (``max_episode_steps * frame_skip``, no-ops included), so it
    truncated up to 8 steps earlier and that test never held (a client-code
    pass); now the same steps truncate, with EnvPool's defaults (FIRE reset
    on), under ``episodic_life`` and with the Machado settings."""
    kw = dict(num_envs=4, seed=1, max_episode_steps=40, **options)
    for make in (envpool.make, shm_envpool.make):
        env = make("Breakout-v5", env_type="gymnasium", **kw)
        try:
            env.reset()
            at, seen = set(), 0
            for t in range(300):
                act = np.random.default_rng(t).integers(0, env.action_space.n, 4)
                *_, truncated, info = env.step(act)
                at |= set(info["elapsed_step"][truncated].tolist())
                seen += int(truncated.sum())
                # CleanRL's test of a truncation, on every step
                cleanrl = info["elapsed_step"] >= env.spec.config.max_episode_steps
                assert np.array_equal(cleanrl, truncated), (make, t)
            assert seen >= 8 and at == {40}, (make, seen, at)
        finally:
            env.close()


def test_defaults_and_spec_match_envpool():
    theirs = envpool.make_spec("Breakout-v5").config._asdict()
    ours = shm_envpool.make_spec("Breakout-v5").config._asdict()
    for key, value in shm_envpool.DEFAULT_CONFIG.items():
        if key == "batch_size":  # 0 stands for num_envs; the spec shows num_envs
            assert theirs[key] == ours[key] == 1
            continue
        assert theirs[key] == pytest.approx(value), key
    for key in ("stack_num", "img_height", "noop_max", "use_fire_reset", "max_episode_steps"):
        assert ours[key] == theirs[key]
    # Every Atari task of EnvPool's is here; ale-py ships a few ROMs more.
    from envpool.atari.registration import atari_game_list

    theirs_atari = {"".join(p.capitalize() for p in g.split("_")) + "-v5" for g in atari_game_list}
    assert theirs_atari <= set(shm_envpool.list_all_envs())


def test_zero_discount_on_life_loss_changes_nothing_in_the_gymnasium_api():
    # It sets dm_env's discount only; EnvPool's Gymnasium step returns no discount.
    kw = dict(num_envs=2, seed=0, episodic_life=True)
    a = envpool.make("Breakout-v5", env_type="gymnasium", zero_discount_on_life_loss=True, **kw)
    b = envpool.make("Breakout-v5", env_type="gymnasium", **kw)
    try:
        a.reset(), b.reset()
        acts = np.random.default_rng(1).integers(0, 4, (300, 2))
        for act in acts:
            ra, rb = a.step(act), b.step(act)
            for k in range(4):
                assert np.array_equal(ra[k], rb[k])
    finally:
        a.close()
        b.close()
