"""The Gymnasium VectorEnv surface of a plain pool: episode statistics left to
Gymnasium's wrapper, ``call`` / ``get_attr`` / ``set_attr``."""

from __future__ import annotations

import gymnasium as gym
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
        # what every Gymnasium env has, as SyncVectorEnv answers it
        assert env.get_attr("metadata") == (env.metadata,) * 3
        assert env.get_attr("spec") == (None,) * 3  # make()'s pool has none, as a hand-built one
        with pytest.raises(ValueError, match="render_mode='rgb_array'"):
            env.call("render")
        with pytest.raises(AttributeError, match="no attribute"):
            env.call(np.array(["render", "x"]))  # a name that is not a str
    with shmatari.make("Breakout", 2, num_workers=1, render_mode="rgb_array") as env:
        env.reset(seed=1)
        frames = env.call("render")
        assert len(frames) == 2 and all(f.shape == (210, 160, 3) for f in frames)
        assert all(np.array_equal(a, b) for a, b in zip(frames, env.render()))
    from shmatari import registration  # noqa: F401  (registers shmatari/<Game>-v5)

    vec = gym.make_vec("shmatari/Breakout-v5", num_envs=2, num_workers=1)
    try:
        assert vec.get_attr("spec") == (vec.spec,) * 2 and vec.spec.id == "shmatari/Breakout-v5"
    finally:
        vec.close()


def test_np_random_follows_the_pools_seed_as_gymnasiums_reset_seeds_it():
    """Gymnasium's VectorEnv.reset(seed=s) sets np_random / np_random_seed
    from s; this pool's reset did not (after reset(seed=0) they were random,
    and two pools seeded alike drew differently: a Gymnasium-API pass,
    2026-12-07). They follow the pool's seed: make()'s, then each
    reset(seed=...), as gymnasium.utils.seeding.np_random gives them."""
    draws = []
    for _ in range(2):
        with shmatari.make("Breakout", 2, num_workers=1, seed=7) as env:
            assert env.np_random_seed == 7
            first = env.np_random.integers(1 << 30, size=4).tolist()
            env.reset(seed=0)
            assert env.np_random_seed == 0
            ref, seed = gym.utils.seeding.np_random(0)
            assert seed == 0
            assert env.np_random.integers(1 << 30, size=4).tolist() == \
                ref.integers(1 << 30, size=4).tolist()
            draws.append(first)
            # assigned: -1, as Gymnasium's; a reset(seed=...) seeds it again,
            # even with the pool's current seed
            env.np_random = np.random.default_rng(1)
            assert env.np_random_seed == -1
            env.reset(seed=0)
            assert env.np_random_seed == 0
    assert draws[0] == draws[1]


def test_gymnasium_make_gives_one_env_with_the_pools_per_env_semantics():
    import gymnasium

    import shmatari.registration  # noqa: F401  (registers shmatari/<Game>-v5)

    # A 100-frame cap without no-ops truncates at step 25, as env 0 of a pool.
    opts = dict(noop_max=0, max_episode_frames=100, repeat_action_probability=0.0)
    env = gymnasium.make("shmatari/Breakout-v5", **opts)
    try:
        assert isinstance(env.unwrapped, shmatari.registration.ShmAtariEnv)
        assert env.observation_space.shape == (4, 84, 84) and env.action_space.n == 4
        obs, info = env.reset(seed=5)
        assert obs.shape == (4, 84, 84) and info["lives"] == 5 and "env_id" not in info
        with shmatari.make("Breakout", 1, seed=5, **opts) as pool:
            pool_obs, _ = pool.reset()
            assert np.array_equal(obs, pool_obs[0])
            for t in range(1, 26):
                obs, reward, terminated, truncated, info = env.step(t % 4)
                p_obs, p_reward, *_ = pool.step(np.array([t % 4]))
                assert np.array_equal(obs, p_obs[0]) and reward == p_reward[0]
                assert isinstance(reward, float) and isinstance(truncated, bool)
                assert truncated == (t == 25) and not terminated
        # No autoreset, as Gymnasium's single envs: reset() after a done step,
        # which the message says (it named the pool's reset_mask, which one
        # env refuses).
        with pytest.raises(shmatari.CallOrderError, match=r"call reset\(\) first") as err:
            env.step(0)
        assert "reset_mask" not in str(err.value)
        obs, info = env.reset()
        assert info["elapsed_step"] == 0
    finally:
        env.close()
    assert env.unwrapped.pool.closed


def test_one_env_with_episode_statistics_gives_each_games_totals():
    """gymnasium.make("shmatari/<Game>-v5", episode_statistics=True) was
    accepted and silently gave no statistics (the one env's info kept only
    arrays; a client-code pass, 2026-12-06): a CleanRL DQN port then logged
    Gymnasium's per-life clipped returns. The game's totals now come on the
    step that ends the game, as scalars, and only there: not at the lives
    lost under episodic_life."""
    import gymnasium

    import shmatari.registration  # noqa: F401

    seen = {True: [], False: []}
    for stats in (True, False):
        env = gymnasium.make("shmatari/Breakout-v5", preset="dqn", episode_statistics=stats,
                             max_episode_frames=400)
        try:
            env.reset(seed=3)
            score = steps = 0
            for t in range(600):
                obs, reward, terminated, truncated, info = env.step(t % 4)
                score, steps = score + info["raw_reward"], steps + 1
                game_end = bool(info["game_over"]) or truncated
                if "episode" in info:
                    seen[stats].append((game_end, info["episode"], score, steps))
                else:
                    assert not (stats and game_end), (t, info)
                if game_end:
                    score = steps = 0
                if terminated or truncated:
                    env.reset()
        finally:
            env.close()
    assert seen[False] == [] and len(seen[True]) >= 1
    for game_end, episode, score, steps in seen[True]:
        assert game_end and set(episode) == {"r", "l", "t", "frames"}
        assert episode["r"] == score and episode["l"] == steps, (episode, score, steps)
        assert isinstance(episode["r"], float) and isinstance(episode["l"], int)


def test_ale_py_argument_names_are_aliases_where_they_mean_the_same():
    from shmatari.registration import ale_kwargs

    opts, ram = ale_kwargs({"frameskip": 3, "max_num_frames_per_episode": 500,
                            "reward_clipping": True, "num_threads": 0, "obs_type": "rgb",
                            "mode": None, "continuous": False}, single=False)
    assert opts == {"frame_skip": 3, "max_episode_frames": 500, "reward_clip": True,
                    "num_workers": None, "grayscale": False} and not ram
    assert ale_kwargs({"obs_type": "ram"}, single=True) == ({}, True)
    for kwargs, error, match in [
            ({"frameskip": (2, 5)}, ValueError, "random frame skip"),
            ({"frameskip": 2, "frame_skip": 2}, TypeError, "give one of them"),
            ({"continuous": True}, ValueError, "discrete actions"),
            ({"mode": 1}, ValueError, "default mode"),
            ({"life_loss_info": True}, ValueError, "episodic_life"),
            ({"obs_type": "ram"}, ValueError, "ram_info"),
            ({"obs_type": "pixels"}, ValueError, "obs_type must be")]:
        with pytest.raises(error, match=match):
            ale_kwargs(kwargs, single=False)
    with pytest.raises(TypeError, match="num_threads"):
        ale_kwargs({"num_threads": 2}, single=True)


def test_gymnasium_make_takes_ale_py_names_and_refuses_pool_options():
    import gymnasium

    import shmatari.registration  # noqa: F401

    env = gymnasium.make("shmatari/Pong-v5", frameskip=2, obs_type="grayscale",
                         max_num_frames_per_episode=1000, render_mode="rgb_array")
    try:
        pool = env.unwrapped.pool
        assert pool.config.frame_skip == 2 and pool.config.max_episode_frames == 1000
        env.reset(seed=0)
        assert env.render().shape == (210, 160, 3)
        assert env.metadata["render_fps"] == 30
    finally:
        env.close()
    with pytest.raises(TypeError, match="apply to pools"):
        gymnasium.make("shmatari/Pong-v5", autoreset_mode="same_step")
    # num_envs too (it gave "make() got multiple values for argument 'num_envs'")
    with pytest.raises(TypeError, match=r"\['num_envs'\] apply to pools"):
        gymnasium.make("shmatari/Pong-v5", num_envs=2)


def test_one_env_passes_gymnasiums_env_checker():
    """Gymnasium's check_env failed: 'Deterministic step info are not
    equivalent for the same seed and action', since info["frame_number"]
    went on counting across reset(seed=...) (ale-py's restarts)."""
    import gymnasium
    from gymnasium.utils.env_checker import check_env

    import shmatari.registration  # noqa: F401

    env = gymnasium.make("shmatari/Pong-v5")
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_wrappers_that_drive_the_emulator_are_told_what_to_use_instead():
    """Wrappers that drive the emulator (SB3's AtariWrapper, whose
    NoopResetEnv reads ``env.unwrapped.ale``; Gymnasium's AtariPreprocessing
    with ``frame_skip=1``) failed at reset with a bare "'ShmAtariEnv' object
    has no attribute 'ale'" (a client-code pass, 2026-12-06). The error now
    says why and what to use."""
    from gymnasium.wrappers import AtariPreprocessing

    import shmatari.registration  # noqa: F401

    env = gym.make("shmatari/Breakout-v5")
    try:
        assert not hasattr(env.unwrapped, "ale")
        wrapped = AtariPreprocessing(env, frame_skip=1, noop_max=30)
        with pytest.raises(AttributeError, match=r"this env has no ale \(ALEInterface\): the "
                                                 r"emulator runs in the env's worker process.*"
                                                 r"preset='dqn'.*shmatari\.sb3\.make_atari_env"):
            wrapped.reset(seed=0)
    finally:
        env.close()


def test_single_spaces_are_read_only_and_say_what_to_do():
    """CleanRL's EnvPool scripts set ``envs.single_action_space =
    envs.action_space`` (one env's space in EnvPool, batched in Gymnasium):
    accepted silently, it made ``single_observation_space`` batched and
    failed far from the cause (a newcomer's pass). It raises at once now,
    as EnvPool does (no setter), and names the way out; assigning the same
    space is a no-op."""
    with shmatari.make("Pong", num_envs=2, seed=0) as env:
        single_action, single_obs = env.single_action_space, env.single_observation_space
        env.single_action_space = gym.spaces.Discrete(single_action.n)  # equal: fine
        with pytest.raises(AttributeError, match=r"shmatari\.envpool\.make"):
            env.single_action_space = env.action_space
        with pytest.raises(AttributeError, match="batched space"):
            env.single_observation_space = env.observation_space
        assert env.single_action_space == single_action
        assert env.single_observation_space == single_obs
        assert env.single_observation_space.shape == (4, 84, 84)


def test_gymnasiums_sync_vector_env_seeds_env_i_with_seed_plus_i_as_the_docs_say():
    """docs/reproducibility.md and migration.md: make_vec with
    vectorization_mode="sync" (Gymnasium's SyncVectorEnv of single envs)
    resets env i with seed + i, so runs seeded 0 and 1 share env streams;
    make_vec without it builds one pool, whose runs share none (a
    reproducibility audit)."""
    import shmatari.registration  # noqa: F401

    def streams(seed, **kwargs):
        env = gym.make_vec("shmatari/Breakout-v5", num_envs=2, **kwargs)
        try:
            obs, _ = env.reset(seed=seed)
            out = [[obs[i].tobytes()] for i in range(2)]
            for a in np.random.default_rng(0).integers(0, 4, 40):
                obs, reward, *_ = env.step(np.full(2, a))
                for i in range(2):
                    out[i].append(obs[i].tobytes() + reward[i].tobytes())
            return [b"".join(x) for x in out]
        finally:
            env.close()

    a, b = streams(0, vectorization_mode="sync"), streams(1, vectorization_mode="sync")
    assert a[1] == b[0] and a[0] != b[1]
    a, b = streams(0), streams(1)
    assert not set(a) & set(b)


def test_a_pool_closed_by_a_discarded_gymnasium_wrapper_says_what_closes_it():
    """Gymnasium's vector wrappers close the env they wrap when they are
    closed or, up to Gymnasium 1.2, garbage-collected (``VectorEnv.__del__``;
    1.3 dropped it); a newcomer who wrapped a pool to try a wrapper, dropped
    the wrapper and stepped the pool got "the env pool is closed" and
    nothing on who closed it (a newcomer's pass). Where the Gymnasium
    installed closes nothing on collection, the pool steps on."""
    import gc

    import gymnasium
    from gymnasium.wrappers.vector import NormalizeReward

    closes_on_gc = "__del__" in gymnasium.vector.VectorEnv.__dict__
    env = shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0)
    try:
        env.reset()
        wrapper = NormalizeReward(env)
        del wrapper
        gc.collect()
        if closes_on_gc:
            with pytest.raises(shmatari.PoolClosedError,
                               match=r"^the env pool is closed: its close\(\) ran \(.*Gymnasium "
                                     r"wrapper around it"):
                env.step(np.zeros(2, np.int64))
        else:
            obs = env.step(np.zeros(2, np.int64))[0]
            assert obs.shape == (2, 4, 84, 84)
        NormalizeReward(env).close()  # every Gymnasium: an explicit close closes the pool
        with pytest.raises(shmatari.PoolClosedError, match="Gymnasium wrapper around it"):
            env.step(np.zeros(2, np.int64))
    finally:
        env.close()
