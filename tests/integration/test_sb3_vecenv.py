"""shmatari.sb3: SB3's PPO, VecFrameStack, VecMonitor, VecNormalize and
evaluate_policy on a shmatari pool, and the VecEnv contract they rely on."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import (  # noqa: E402
    VecFrameStack,
    VecMonitor,
    VecNormalize,
)

from shmatari.sb3 import ShmatariVecEnv, make_atari_env  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_leaks")


# VecMonitor warns that it replaces the Monitor statistics the pool reports.
@pytest.mark.filterwarnings("ignore:The environment is already wrapped with a `Monitor`")
def test_ppo_cnn_policy_learns_through_the_vec_wrappers():
    env = make_atari_env("BreakoutNoFrameskip-v4", n_envs=4, seed=0, num_workers=2)
    assert env.observation_space.shape == (1, 84, 84)
    stacked = VecNormalize(VecMonitor(VecFrameStack(env, n_stack=4)), norm_obs=False)
    try:
        assert stacked.observation_space.shape == (4, 84, 84)
        model = PPO("CnnPolicy", stacked, n_steps=32, batch_size=64, n_epochs=1, seed=0,
                    device="cpu")
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=256)                     # two updates of 4 x 32 steps
        assert model.num_timesteps >= 256
        changed = [not np.array_equal(a.numpy(), p.detach().numpy())
                   for a, p in zip(before, model.policy.parameters())]
        assert any(changed)
        rewards, lengths = evaluate_policy(model, stacked, n_eval_episodes=2, deterministic=False,
                                           return_episode_rewards=True, warn=False)
        assert len(rewards) == 2 and all(n > 0 for n in lengths)
    finally:
        stacked.close()


def test_done_steps_carry_terminal_observation_truncation_and_monitor_episode():
    # A 120-frame cap truncates each game at step 30 (no no-ops).
    env = ShmatariVecEnv("Pong", 2, seed=0, num_workers=1, noop_max=0, max_episode_frames=120,
                         grayscale=False, stack_num=2)
    try:
        assert env.observation_space.shape == (6, 84, 84)    # RGB channels first
        assert env.pool.config.obs_layout == "channels_first"  # written planar
        assert env.env_is_wrapped(Monitor) == [True, True]
        assert env.get_attr("frame_skip") == [4, 4] and env.get_attr("render_mode") == [None] * 2
        env.set_attr("note", "x", indices=[1])
        assert env.get_attr("note", indices=1) == ["x"]
        with pytest.raises(AttributeError, match="fixed"):
            env.set_attr("frame_skip", 2)
        assert env.env_method("get_action_meanings", indices=0)[0][:2] == ["NOOP", "FIRE"]
        # the one pool seed every env derives from, not SB3's seed + i (issue 25)
        assert env.seed(7) == [7, 7]
        first = env.reset()
        assert first.shape == (2, 6, 84, 84)
        for step in range(1, 31):
            obs, rewards, dones, infos = env.step(np.zeros(2, np.int64))
            assert dones.tolist() == [step == 30] * 2
        for info in infos:
            assert info["TimeLimit.truncated"] is True
            assert info["episode_frame_number"] == 120  # the ended game's, as its step saw it
            assert info["terminal_observation"].shape == (6, 84, 84)
            # frames, as SB3's Monitor around the NoFrameskip env counts them
            assert info["episode"]["l"] == 120 and "t" in info["episode"]
        assert not np.array_equal(infos[0]["terminal_observation"], obs[0])
        # the new games' reset info, as DummyVecEnv refreshes it at each
        # autoreset (it stayed the first reset's: a client-code pass)
        assert [r["episode_frame_number"] for r in env.reset_infos] == [0, 0]
        assert [r["frame_number"] for r in env.reset_infos] == [120, 120]  # was [0, 0]
        env.seed(7)
        assert np.array_equal(env.reset(), first)             # seed() replays at reset()
    finally:
        env.close()


def test_a_pool_that_is_not_same_step_is_refused():
    import shmatari

    with shmatari.make("Pong", 2, num_workers=1) as pool:
        with pytest.raises(ValueError, match="same_step"):
            ShmatariVecEnv(pool)


def test_what_a_pool_cannot_change_is_refused_before_one_starts(tmp_path):
    """An asynchronous batch_size, monitor_kwargs without monitor_dir and a
    monitor_dir that is not a path are refused before a pool starts: no
    worker runs while the error is held (a fuzzing pass: the batch_size was
    refused once its pool ran, and the pool stayed up while the exception
    was referenced, as a notebook's last error is)."""
    from conftest import shm_entries

    before = shm_entries()
    for kwargs, err, match in [
            (dict(batch_size=1), ValueError, "batch_size=1"),
            (dict(monitor_kwargs={"info_keywords": ()}), ValueError, "only with monitor_dir"),
            (dict(monitor_dir=5), TypeError, "monitor_dir must be a path")]:
        with pytest.raises(err, match=match) as caught:
            ShmatariVecEnv("Pong", 2, num_workers=1, **kwargs)
        assert shm_entries() == before, kwargs  # no segment while `caught` holds the error
        assert caught.value.__traceback__ is not None


def test_indices_pool_counts_and_kwargs_are_checked_naming_the_argument():
    """From a fuzzing pass: get_attr(indices=5) raised a bare IndexError,
    indices='x' an int() error; a num_envs that disagrees with the pool given
    was ignored; make_atari_env(None) and env_kwargs=5 failed inside with an
    AttributeError or 'not iterable'."""
    import shmatari

    with shmatari.make("Pong", 2, num_workers=1, autoreset_mode="same_step") as pool:
        with pytest.raises(ValueError, match="pool given has 2 envs"):
            ShmatariVecEnv(pool, 3)
        env = ShmatariVecEnv(pool)
        assert env.get_attr("render_mode", indices=[1]) == [None]
        with pytest.raises(IndexError, match=r"indices \[5\] are outside the envs 0..1"):
            env.get_attr("render_mode", indices=5)
        with pytest.raises(IndexError, match="outside"):
            env.env_is_wrapped(Monitor, indices=[0, -1])
        with pytest.raises(TypeError, match="indices must be None, an int or ints"):
            env.env_method("render", indices="x")
    with pytest.raises(TypeError, match="env_id must be a str"):
        make_atari_env(None)
    with pytest.raises(TypeError, match="env_kwargs must be a dict"):
        make_atari_env("PongNoFrameskip-v4", env_kwargs=5)
    with pytest.raises(TypeError, match="wrapper_kwargs must be a dict"):
        make_atari_env("PongNoFrameskip-v4", wrapper_kwargs=[1])


def test_seed_refuses_what_reset_cannot_take_and_stores_nothing():
    """VecEnv.seed(1.5) was stored and every reset() after it failed (a
    fuzzing pass): the seed is checked where it is given."""
    env = ShmatariVecEnv("Pong", 2, num_workers=1)
    try:
        env.seed(3)
        first = env.reset()
        for bad, err in [(1.5, TypeError), (-1, ValueError), (True, TypeError)]:
            with pytest.raises(err, match="seed"):
                env.seed(bad)
        env.seed(3)
        assert np.array_equal(env.reset(), first)  # the pool seeds as before
    finally:
        env.close()


def test_a_bad_action_is_refused_as_step_and_nothing_is_sent():
    """SB3's users call ``env.step`` (or ``learn``), never ``send()``: the
    error names ``step()``, and the pool steps on afterwards as if the bad
    call had not been made (a newcomer's pass, 2026-12-06)."""
    from shmatari.errors import CallOrderError

    env = make_atari_env("Breakout", n_envs=2, seed=0)
    try:
        env.reset()
        with pytest.raises(ValueError, match=r"^step\(\): action 7 at position 0 is out of "
                                             r"range: this game has actions 0\.\.3"):
            env.step(np.array([7, 0]))
        with pytest.raises(CallOrderError):  # nothing was sent: nothing to wait for
            env.step_wait()
        obs, reward, done, infos = env.step(np.array([1, 0]))
        assert obs.shape == (2, 1, 84, 84) and len(infos) == 2
        # one step of 4 frames since the reset: the refused one did nothing
        assert [i["episode_frame_number"] for i in infos] == [
            f + 4 for f in [r["episode_frame_number"] for r in env.reset_infos]]
    finally:
        env.close()


def test_get_images_gives_the_full_size_frames():
    env = ShmatariVecEnv("Pong", 2, seed=0, num_workers=1, render_mode="rgb_array")
    try:
        env.reset()
        images = env.get_images()
        assert len(images) == 2 and images[0].shape == (210, 160, 3)
        assert env.render(mode="rgb_array").shape[-1] == 3  # SB3 tiles them
    finally:
        env.close()


def test_monitor_dir_channels_last_and_env_kwargs_as_sb3s_make_atari_env(tmp_path):
    import csv
    import json

    from stable_baselines3.common.vec_env import SubprocVecEnv, VecTransposeImage

    # SB3's recipe: VecTransposeImage(VecFrameStack(make_atari_env(...))) needs
    # channels last. A 200-frame cap ends each game within 60 steps.
    env = make_atari_env("BreakoutNoFrameskip-v4", n_envs=2, seed=0, num_workers=1,
                         obs_layout="channels_last", monitor_dir=str(tmp_path),
                         monitor_kwargs={"info_keywords": ("lives",)},
                         env_kwargs={"render_mode": "rgb_array",
                                     "max_num_frames_per_episode": 200},
                         vec_env_cls=SubprocVecEnv, vec_env_kwargs={"start_method": "spawn"})
    assert env.observation_space.shape == (84, 84, 1)
    assert env.pool.config.start_method == "spawn"
    wrapped = VecTransposeImage(VecFrameStack(env, n_stack=4))
    try:
        assert wrapped.observation_space.shape == (4, 84, 84)
        obs = wrapped.reset()
        assert obs.shape == (2, 4, 84, 84)
        raw = env.pool.step(np.zeros(2, np.int64))[0]      # (2, 1, 84, 84) from the pool
        assert np.array_equal(env._obs(raw)[..., 0], raw[:, 0])
        games = 0
        for _ in range(60):
            obs, _, dones, infos = wrapped.step(np.ones(2, np.int64))
            games += sum("episode" in info for info in infos)
        assert games >= 2
        assert wrapped.get_images()[0].shape == (210, 160, 3)
    finally:
        wrapped.close()
    for i in range(2):
        with open(tmp_path / f"{i}.monitor.csv") as f:
            header = json.loads(f.readline()[1:])
            rows = list(csv.DictReader(f))
        assert header["env_id"] == "BreakoutNoFrameskip-v4" and "t_start" in header
        assert rows and all(int(r["l"]) == 200 for r in rows)   # frames, as SB3's Monitor
        assert all(set(r) == {"r", "l", "t", "lives"} for r in rows)


def test_make_atari_env_refuses_what_has_no_meaning_here():
    from stable_baselines3.common.vec_env import VecEnv

    with pytest.raises(ValueError, match="vec_env_cls"):
        make_atari_env("Pong", n_envs=1, vec_env_cls=VecEnv)
    with pytest.raises(ValueError, match="wrapper_kwargs"):
        make_atari_env("Pong", n_envs=1, env_kwargs={"frameskip": 4})


def test_make_atari_env_takes_frameskip_1_as_sb3_does():
    """``env_kwargs={"frameskip": 1}`` (a v5 id under AtariWrapper, which
    skips) is what the pool's env is: accepted, and the same pool as without
    it (it raised before: a newcomer's pass)."""
    import numpy as np

    plain = one = None
    try:
        # SB3's would act every 16 frames here: the pool warns (2026-12-05)
        with pytest.warns(UserWarning, match=r"frameskip=4 \(ale-py\).*16 with the defaults"):
            plain = make_atari_env("ALE/Pong-v5", n_envs=2, seed=3)
        one = make_atari_env("ALE/Pong-v5", n_envs=2, seed=3, env_kwargs={"frameskip": 1})
        np.testing.assert_array_equal(plain.reset(), one.reset())
        for _ in range(20):
            plain.step_async(np.array([2, 3]))
            one.step_async(np.array([2, 3]))
            a, b = plain.step_wait(), one.step_wait()
            for x, y in zip(a[:3], b[:3]):
                np.testing.assert_array_equal(x, y)
    finally:
        for env in (plain, one):
            if env is not None:
                env.close()
    with pytest.raises(ValueError, match="episode_statistics"):
        make_atari_env("Pong", n_envs=1, monitor_dir="/tmp/x", episode_statistics=False)


@pytest.mark.parametrize("env_id, env_kwargs", [
    ("ALE/Pong-v5", {"frameskip": 1}), ("PongNoFrameskip-v4", {}),
    ("ALE/Pong-v5", {"frameskip": 1, "repeat_action_probability": 0.1})])
def test_make_atari_env_takes_the_ids_sticky_actions_as_sb3s_own(env_id, env_kwargs):
    """The sticky actions ale-py registers for the id (0.25 in v5 ids, none
    in NoFrameskip-v4), as SB3's own make_atari_env gets them. Until
    2026-12-05 only the game was taken: a v5 id under make_atari_env played
    without sticky actions, silently (a client-code pass)."""
    from stable_baselines3.common.env_util import make_atari_env as sb3_make_atari_env

    real = sb3_make_atari_env(env_id, n_envs=1, seed=0, env_kwargs=dict(env_kwargs))
    ours = make_atari_env(env_id, n_envs=1, seed=0, env_kwargs=dict(env_kwargs))
    try:
        want = real.envs[0].unwrapped.ale.getFloat("repeat_action_probability")
        assert ours.get_attr("repeat_action_probability")[0] == pytest.approx(want)
    finally:
        real.close()
        ours.close()


def test_step_infos_have_the_keys_of_sb3s_own_make_atari_env():
    """Every step's infos hold what SB3's make_atari_env's hold (ale-py's
    lives and frame counters, DummyVecEnv's TimeLimit.truncated), with the
    same types; found missing by a client-code pass."""
    from stable_baselines3.common.env_util import make_atari_env as sb3_make_atari_env

    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    real = sb3_make_atari_env("BreakoutNoFrameskip-v4", n_envs=2, seed=0)
    ours = make_atari_env("BreakoutNoFrameskip-v4", n_envs=2, seed=0)
    try:
        real.reset()
        ours.reset()
        assert set(ours.reset_infos[0]) >= {"lives", "episode_frame_number", "frame_number"}
        for _ in range(3):
            *_, real_infos = real.step(np.zeros(2, np.int64))
            *_, our_infos = ours.step(np.zeros(2, np.int64))
        for theirs, mine in zip(real_infos, our_infos):
            assert set(theirs) <= set(mine), set(theirs) - set(mine)
            assert {k: type(v) for k, v in theirs.items()} == {k: type(mine[k]) for k in theirs}
        for key in ("episode_frame_number", "frame_number"):  # 3 steps of 4 frames
            assert [i[key] - r[key] for i, r in zip(our_infos, ours.reset_infos)] == [12, 12]
    finally:
        real.close()
        ours.close()


def test_env_kwargs_max_episode_steps_is_gym_makes_time_limit_in_frames():
    """SB3 passes env_kwargs to gym.make, whose max_episode_steps is a
    TimeLimit on the one-frame-per-step NoFrameskip env: frames. It was
    taken as shmatari's max_episode_steps (agent steps), and games ran about
    four times longer, silently (a client pass, 2026-12-06: Monitor's l 805
    where SB3's is 200)."""
    from stable_baselines3.common.env_util import make_atari_env as sb3_make_atari_env

    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)

    def first_ends(env):
        env.reset()
        ends = {}
        for step in range(1, 400):
            _, _, dones, infos = env.step(np.zeros(env.num_envs, np.int64))
            for i in np.flatnonzero(dones):
                ends.setdefault(int(i), (infos[i]["TimeLimit.truncated"],
                                         infos[i]["episode"]["l"], step))
            if len(ends) == env.num_envs:
                return ends
        raise AssertionError(f"no end within 400 steps: {ends}")

    kwargs = dict(n_envs=2, seed=0, env_kwargs={"max_episode_steps": 200})
    real = sb3_make_atari_env("PongNoFrameskip-v4", **kwargs)
    ours = make_atari_env("PongNoFrameskip-v4", **kwargs)
    try:
        want, got = first_ends(real), first_ends(ours)
    finally:
        real.close()
        ours.close()
    for ends in (want, got):  # truncated by the limit, at 200 frames, in ~50 agent steps
        assert all(t and l == 200 and step < 60 for t, l, step in ends.values()), (want, got)
    with pytest.raises(ValueError, match="env_kwargs max_episode_steps must be >= 1"):
        make_atari_env("PongNoFrameskip-v4", n_envs=1, env_kwargs={"max_episode_steps": 0})
    # a frame cap given as an option does not lift it (SB3's TimeLimit holds
    # whatever ALE's cap is: a review), and the spec says it, as gym.make's
    for cap in (None, 5000, 150):
        env = make_atari_env("PongNoFrameskip-v4", n_envs=1, max_episode_frames=cap,
                             env_kwargs={"max_episode_steps": 200})
        try:
            assert env.get_attr("max_episode_frames") == [min(200, cap or 200)]
            assert env.get_attr("spec")[0].max_episode_steps == 200
        finally:
            env.close()


def test_get_attr_spec_is_the_ids_envspec_as_sb3s_own():
    """SubprocVecEnv / DummyVecEnv code reads env.get_attr("spec")[0].id;
    it raised AttributeError (a client pass, 2026-12-06)."""
    from stable_baselines3.common.env_util import make_atari_env as sb3_make_atari_env

    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    real = sb3_make_atari_env("BreakoutNoFrameskip-v4", n_envs=2, seed=0)
    ours = make_atari_env("BreakoutNoFrameskip-v4", n_envs=2, seed=0)
    try:
        assert [s.id for s in ours.get_attr("spec")] == [s.id for s in real.get_attr("spec")]
        assert ours.env_method("get_wrapper_attr", "spec", indices=[1])[0].id == \
            "BreakoutNoFrameskip-v4"
    finally:
        real.close()
        ours.close()
    bare = make_atari_env("Breakout", n_envs=1)  # no registration: None, as gym's
    try:
        assert bare.get_attr("spec") == [None]
    finally:
        bare.close()
