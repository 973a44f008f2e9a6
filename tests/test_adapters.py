"""shmatari.envpool and shmatari.registration without the peers installed:
EnvPool's names, defaults and units; Gymnasium's make_vec and its episode
statistics wrapper. Parity with EnvPool itself is in
tests/integration/test_envpool_parity.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import gymnasium
import numpy as np
import pytest

import shmatari
import shmatari.envpool as envpool

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_envpool_defaults_become_shmatari_options():
    # EnvPool 1.2.5 atari_env.h: sticky actions 0, FIRE reset on, noop_max 30
    # counted with the FIRE frame, max_episode_steps=27000 agent steps.
    with envpool.make("Breakout-v5", num_envs=2, num_threads=1) as env:
        cfg = env.pool.config
        assert cfg.repeat_action_probability == 0.0
        assert cfg.use_fire_reset is True
        assert cfg.noop_max == 29              # EnvPool: 0..29 no-ops, then FIRE
        assert cfg.max_episode_steps == 27000 and cfg.max_episode_frames is None  # no frame cap
        assert cfg.episodic_life is False and cfg.reward_clip is False
        assert cfg.num_workers == 1 and cfg.seed == 42
        assert cfg.autoreset_mode == "next_step"
        assert env.config["num_envs"] == 2 and env.config["batch_size"] == 2
        assert env.spec.config.use_fire_reset is True


def test_envpool_noop_max_1_with_fire_reset_means_no_noop():
    spec_kwargs = dict(num_envs=1, noop_max=1)
    with envpool.make("Breakout-v5", **spec_kwargs) as env:
        assert env.pool.config.noop_max == 0 and env.pool.config.use_fire_reset
    # No FIRE in the action set (Freeway): EnvPool draws 1..noop_max no-ops.
    with envpool.make("Freeway-v5", **spec_kwargs) as env:
        assert env.pool.config.noop_max == 1 and not env.pool.config.use_fire_reset


def test_envpool_spaces_info_keys_and_cleanrl_assignments():
    with envpool.make("Breakout-v5", env_type="gymnasium", num_envs=3, seed=1) as env:
        assert env.action_space == gymnasium.spaces.Discrete(4)
        assert env.observation_space.shape == (4, 84, 84)
        # CleanRL's EnvPool scripts assign these; the single space stays single.
        env.num_envs = 3
        env.single_action_space = env.action_space
        assert env.single_action_space.n == 4
        obs, info = env.reset()
        assert obs.shape == (3, 4, 84, 84)
        assert set(info) == {"env_id", "players", "lives", "reward", "terminated", "elapsed_step"}
        obs, reward, terminated, truncated, info = env.step(np.ones(3, np.int64))
        assert info["terminated"].dtype == np.int32 and info["reward"].dtype == np.float32
        assert info["elapsed_step"].tolist() == [1, 1, 1]
        assert np.array_equal(info["players"]["env_id"], [0, 1, 2])
        # reset(env_id): those envs' rows, in that order, as EnvPool's sync pool.
        obs, info = env.reset(np.array([2, 0]))
        assert obs.shape == (2, 4, 84, 84) and info["env_id"].tolist() == [2, 0]
        assert info["elapsed_step"].tolist() == [0, 0]


def test_envpool_reset_mask_is_checked_as_the_pools():
    """A mask of the wrong length was taken as given (a 1-long mask reset env
    0 of 3; an attacker's pass): now the pool's own rules, a bool mask of
    shape (num_envs,) with a True (a list of bools too)."""
    with envpool.make("Breakout-v5", env_type="gymnasium", num_envs=3, seed=1) as env:
        env.reset()
        env.step(np.ones(3, np.int64))
        for mask, exc, match in (([True], ValueError, r"shape \(3,\)"),
                                 (np.ones(4, bool), ValueError, r"shape \(3,\)"),
                                 (np.array([1, 0, 0]), TypeError, "dtype bool"),
                                 (np.zeros(3, bool), ValueError, "at least one True")):
            with pytest.raises(exc, match=match):
                env.reset(options={"reset_mask": mask})
        with pytest.raises(ValueError, match="only the option 'reset_mask'"):
            env.reset(options={"seed": 1})
        # nothing was reset: the envs go on
        assert env.step(np.ones(3, np.int64))[4]["elapsed_step"].tolist() == [2, 2, 2]
        obs, info = env.reset(options={"reset_mask": [False, True, False]})
        assert info["env_id"].tolist() == [1] and info["elapsed_step"].tolist() == [0]


def test_envpool_rgb_is_channels_first_and_async_batches():
    with envpool.make("Pong-v5", num_envs=4, batch_size=2, gray_scale=False, stack_num=2,
                      seed=0) as env:
        assert env.observation_space.shape == (6, 84, 84)
        # Written planar by the workers, not transposed by the adapter.
        assert env.pool.config.obs_layout == "channels_first"
        env.async_reset()
        obs, reward, terminated, truncated, info = env.recv()
        assert obs.shape == (2, 6, 84, 84) and info["env_id"].shape == (2,)
        # Frame i of the stack is channels 3i..3i+2: both frames equal after a reset.
        assert np.array_equal(obs[:, 0:3], obs[:, 3:6])
        env.send(np.zeros(2, np.int64), info["env_id"])
        obs, info = env.recv(reset=True)
        assert obs.shape == (2, 6, 84, 84)
        with pytest.raises(shmatari.CallOrderError, match="async"):
            env.reset(np.array([0]))


def test_envpool_thread_affinity_offset_pins_workers():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no sched_setaffinity here")
    cores = os.cpu_count()
    with envpool.make("Pong-v5", num_envs=2, num_threads=2, thread_affinity_offset=1) as env:
        got = [os.sched_getaffinity(pid) for pid in env.pool.worker_pids]
        assert got == [{1 % cores}, {2 % cores}]


@pytest.mark.parametrize("kwargs, match", [
    ({"use_inter_area_resize": False}, "INTER_AREA"),
    ({"seed": [1, 2]}, "one int seed"),
    ({"render_mode": "rgb_array"}, "render"),
    ({"mode": 2}, "mode"),
    ({"noop_max": 0}, "noop_max"),
    ({"gym_reset_return_info": False}, "env_type='gym'"),
])
def test_envpool_options_without_a_shmatari_rule_name_the_alternative(kwargs, match):
    with pytest.raises(ValueError, match=match):
        envpool.make("Breakout-v5", num_envs=1, **kwargs)


@pytest.mark.parametrize("name", ["episodic_life", "reward_clip", "use_fire_reset",
                                  "full_action_space", "gray_scale", "use_inter_area_resize",
                                  "zero_discount_on_life_loss"])
@pytest.mark.parametrize("value", ["False", "no", 0, 1, None])
def test_envpool_yes_no_options_take_bools_only(name, value):
    """EnvPool's bindings refuse a string or a number for a bool option; the
    adapter judged them by truth, so episodic_life="False" (a config read
    from text) made a pool with episodic lives (a client-code pass)."""
    with pytest.raises(TypeError, match=f"{name} must be a bool"):
        envpool.make_spec("Breakout-v5", num_envs=1, **{name: value})


@pytest.mark.parametrize("kwargs,err,match", [
    ({"stack_num": 0}, ValueError, "stack_num must be >= 1"),
    ({"stack_num": 2.5}, TypeError, "stack_num must be an int"),
    ({"img_height": 1000}, ValueError, "img_height must be <= 210"),
    ({"frame_skip": 0}, ValueError, "frame_skip must be >= 1"),
    ({"repeat_action_probability": 2.0}, ValueError, "repeat_action_probability"),
    ({"num_envs": 10**6}, ValueError, "num_envs must be <="),
    ({"start_method": "bad"}, ValueError, "start_method must be one of"),
    ({"zero_copy": 1}, TypeError, "zero_copy must be a bool"),
])
def test_envpool_make_spec_checks_every_option_as_make_does(kwargs, err, match):
    """make_spec returned specs that make() refuses (a stack of 0 frames, a
    1000-row image), or failed inside Gymnasium naming no option (a fuzzing
    pass); it checks them as make() does, with no pool started."""
    with pytest.raises(err, match=match):
        envpool.make_spec("Pong-v5", **kwargs)


def test_envpool_make_takes_shmatari_s_start_timeout():
    env = envpool.make("Pong-v5", num_envs=2, num_workers=1, start_timeout=np.int64(30))
    env.close()


def test_envpool_bool_options_keep_their_meaning_as_bools():
    spec = envpool.make_spec("Breakout-v5", num_envs=1, episodic_life=np.bool_(True),
                             gray_scale=False)
    assert spec.config.episodic_life is True and spec.config.gray_scale is False


@pytest.mark.parametrize("task_id", ["BreakoutNoFrameskip-v4", "ALE/Breakout-v5", "Breakout",
                                     "breakout-v5", "Breakout-v4"])
def test_envpool_takes_envpool_task_ids_only(task_id, recwarn):
    """EnvPool refuses ids that are not its own; the adapter took them, with
    a warning about ALE v5 options and preset='dqn' that the adapter has
    neither of (its options are EnvPool's)."""
    with pytest.raises(ValueError, match=r"not an EnvPool task id: .*'Breakout-v5'"):
        envpool.make(task_id, num_envs=1)
    assert not [w for w in recwarn if "preset" in str(w.message)]


@pytest.mark.parametrize("env_type", ["gym", "gymnasium"])
def test_envpool_adapter_takes_only_what_it_holds_for_its_sizes_and_spaces(env_type):
    """CleanRL's lines (``envs.num_envs = args.num_envs``,
    ``envs.single_action_space = envs.action_space``) assign what the
    adapter holds: accepted. Another value was accepted too, and the
    adapter failed later, far from the cause (a client-code pass); EnvPool's
    properties have no setter, and here another value raises at once."""
    import gymnasium

    with envpool.make("Breakout-v5", env_type=env_type, num_envs=2, seed=0) as env:
        env.num_envs = 2
        env.single_action_space = env.action_space
        env.single_observation_space = env.observation_space
        with pytest.raises(AttributeError, match="num_envs is 2 and cannot be set to 8"):
            env.num_envs = 8
        for name in ("action_space", "single_action_space"):
            with pytest.raises(AttributeError, match=f"{name} is Discrete"):
                setattr(env, name, gymnasium.spaces.Discrete(6))
        with pytest.raises(AttributeError, match="single_observation_space"):
            env.single_observation_space = gymnasium.spaces.Box(0, 255, (2, 84, 84), np.uint8)
        assert env.num_envs == 2 and env.action_space.n == 4
        env.reset()
        env.step(np.zeros(2, np.int64))


def test_envpool_max_episode_steps_is_checked_under_its_own_name():
    with pytest.raises(ValueError, match="max_episode_steps must be >= 1"):
        envpool.make_spec("Breakout-v5", num_envs=1, max_episode_steps=0)


def test_envpool_gym_api_is_the_gym_02x_contract_cleanrl_scripts_use():
    # EnvPool 0.6-0.8's env_type="gym": obs-only reset, a 4-tuple step whose
    # dones include truncation, info["TimeLimit.truncated"]; next-step autoreset.
    # 60 frames at most, no-ops and FIRE included: every game is cut short.
    with envpool.make("Breakout-v5", env_type="gym", num_envs=3, seed=1,
                      max_episode_steps=15) as env:
        assert isinstance(env, envpool.GymEnvPoolAdapter)
        assert env.config["gym_reset_return_info"] is False
        assert env.action_space.n == 4  # gym's Discrete when gym is installed, else Gymnasium's
        env.num_envs = 3
        env.single_action_space = env.action_space
        obs = env.reset()
        assert isinstance(obs, np.ndarray) and obs.shape == (3, 4, 84, 84)
        seen_done = np.zeros(3, bool)
        for _ in range(16):
            out = env.step(np.zeros(3, np.int64))
            assert len(out) == 4
            obs, reward, done, info = out
            assert done.dtype == bool and reward.dtype == np.float32
            trunc = info["TimeLimit.truncated"]
            assert trunc.dtype == bool and trunc.shape == (3,)
            # No game ends by NOOPs within 15 steps: every done is the cap.
            assert np.array_equal(done, trunc) and not info["terminated"].any()
            seen_done |= done
        assert seen_done.all()
    with envpool.make_gym("Pong-v5", num_envs=2, gym_reset_return_info=True,
                          ram_info=True) as env:
        obs, info = env.reset()
        assert obs.shape == (2, 4, 84, 84) and info["TimeLimit.truncated"].tolist() == [0, 0]
        assert info["ram"].shape == (2, 128) and info["ram"].dtype == np.uint8  # EnvPool's key
        *_, info = env.step(np.zeros(2, np.int64))
        assert info["ram"].shape == (2, 128)


def test_envpool_gym_api_warns_that_it_is_not_envpool_1x_gym_api():
    """Code written for EnvPool 1.x's env_type="gym" (a 2-tuple reset, a
    5-tuple step) unpacked this adapter's obs-only reset with no error at
    num_envs=2 (obs, info = the two envs' stacks), then failed at step (a
    newcomer's pass). make() and make_gym() now warn, naming the caller's
    line, unless gym_reset_return_info says which API is meant."""
    import warnings

    if envpool._old_gym():
        pytest.skip("gym < 0.26 is installed here: CleanRL's setup, where make() does not warn")
    for call in (lambda: envpool.make("Pong-v5", env_type="gym", num_envs=1),
                 lambda: envpool.make_gym("Pong-v5", num_envs=1)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call().close()
        mine = [w for w in caught if "EnvPool 1.x's env_type='gym'" in str(w.message)]
        assert len(mine) == 1 and "env_type='gymnasium'" in str(mine[0].message)
        assert mine[0].filename == __file__, mine[0].filename
    for flag in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            envpool.make("Pong-v5", env_type="gym", num_envs=1,
                         gym_reset_return_info=flag).close()
            envpool.make("Pong-v5", num_envs=1).close()  # env_type="gymnasium"
        assert not [w for w in caught if "EnvPool 1.x" in str(w.message)]


def test_envpool_gym_api_does_not_warn_beside_cleanrls_gym(tmp_path, monkeypatch):
    """CleanRL's EnvPool scripts pin gym 0.23.1 and call make(env_type="gym")
    unchanged: the warning above came at every run of them (a client-code
    pass). Where the installed gym is older than 0.26 (its metadata on the
    path, as pip leaves it), there is none; with a newer gym there is."""
    import warnings

    for version, warned in (("0.23.1", False), ("0.26.2", True)):
        site = tmp_path / version
        (site / f"gym-{version}.dist-info").mkdir(parents=True)
        (site / f"gym-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: gym\nVersion: {version}\n")
        with monkeypatch.context() as m:
            m.syspath_prepend(str(site))
            assert envpool._old_gym() is not warned
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                envpool.make_gym("Pong-v5", num_envs=1).close()
        assert bool([w for w in caught if "EnvPool 1.x" in str(w.message)]) is warned, version


def test_envpool_gym_api_has_gym_spaces_when_gym_is_installed():
    gym = pytest.importorskip("gym")
    with envpool.make("Pong-v5", env_type="gym", num_envs=1) as env:
        assert isinstance(env.action_space, gym.spaces.Discrete) and env.action_space.n == 6
        assert isinstance(env.observation_space, gym.spaces.Box)
        assert env.observation_space.shape == (4, 84, 84)


def test_envpool_gym_api_falls_back_to_gymnasium_spaces_under_a_gym_folder(tmp_path):
    # A client pass: a gym/ folder beside the script (no gym installed) is
    # imported as a namespace package with no gym.spaces; make() raised
    # AttributeError: module 'gym' has no attribute 'spaces'.
    if importlib.util.find_spec("gym") is not None:
        pytest.skip("gym is installed: a gym/ folder does not shadow it")
    (tmp_path / "gym").mkdir()
    src = os.path.dirname(os.path.dirname(shmatari.__file__))
    script = ("import gymnasium, shmatari.envpool as envpool\n"
              "with envpool.make('Pong-v5', env_type='gym', num_envs=1) as env:\n"
              "    assert isinstance(env.action_space, gymnasium.spaces.Discrete)\n"
              "    assert isinstance(env.observation_space, gymnasium.spaces.Box)\n"
              "    print(type(env.action_space).__module__, env.reset().shape)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=src + os.pathsep
                                  + os.environ.get("PYTHONPATH", "")))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["gymnasium.spaces.discrete", "(1,", "4,", "84,", "84)"]


def test_envpool_gym_api_async_recv_reports_truncation():
    # CleanRL's async JAX script: async_reset, then recv() -> 4-tuple, send by env_id.
    with envpool.make("Pong-v5", env_type="gym", num_envs=4, batch_size=2, seed=0,
                      noop_max=1, max_episode_steps=5) as env:
        env.async_reset()
        truncated = np.zeros(4, bool)
        # First ready: which envs share a batch depends on timing, so go on
        # until every env was seen truncated (6 results each), within a bound.
        for _ in range(200):
            obs, reward, done, info = env.recv()
            assert obs.shape == (2, 4, 84, 84) and done.shape == (2,)
            assert np.array_equal(done, info["TimeLimit.truncated"])
            truncated[info["env_id"]] |= info["TimeLimit.truncated"]
            env.send(np.zeros(2, np.int64), info["env_id"])
            if truncated.all():
                break
        env.recv()
        assert truncated.all()


def _envpool_streams(first_reset, env_type="gymnasium", steps=30) -> list:
    """Each env's observations (hashed) over ``steps`` steps after
    ``first_reset(env)`` and a full reset."""
    import hashlib

    env = envpool.make("Breakout-v5", env_type=env_type, num_envs=4, seed=3,
                       repeat_action_probability=0.25, gym_reset_return_info=True)
    try:
        first_reset(env)
        env.reset()
        digests = [hashlib.sha256() for _ in range(4)]
        for t in range(steps):
            obs = env.step(np.full(4, t % 4))[0]
            for i, d in enumerate(digests):
                d.update(obs[i].tobytes())
        return [d.hexdigest() for d in digests]
    finally:
        env.close()


@pytest.mark.parametrize("env_type", ["gymnasium", "gym"])
def test_envpool_partial_first_reset_leaves_the_other_envs_streams_as_a_plain_reset(env_type):
    """A first reset(env_id) must reset the whole pool; the envs it did not
    name then got a second game at the next reset(), so their streams
    differed from a plain reset()'s (a reproducibility pass, 2026-12-06:
    env i's stream must depend only on the seed, i, the options and its own
    actions). Their next reset now only observes the game the pool began."""
    plain = _envpool_streams(lambda env: None, env_type)
    partial = _envpool_streams(lambda env: env.reset(np.array([1])), env_type)
    assert partial[0] == plain[0] and partial[2:] == plain[2:]
    assert partial[1] != plain[1]  # reset twice, as in EnvPool
    # naming only fresh envs in the next partial reset returns their rows as they were
    env = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=4, seed=3)
    try:
        env.reset(np.array([1]))
        obs, info = env.reset(np.array([2, 0]))
        other = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=4, seed=3)
        try:
            again, _ = other.reset()
        finally:
            other.close()
        assert np.array_equal(obs, again[[2, 0]]) and info["env_id"].tolist() == [2, 0]
    finally:
        env.close()


@pytest.mark.parametrize("env_type", ["gymnasium", "gym"])
def test_envpool_sync_rows_come_in_env_id_order_and_dict_actions_are_taken(env_type):
    """A synchronous pool's step(action, env_id) and send(env_id) + recv()
    return the rows in env_id's order, as EnvPool does (they came in env
    order: code that filed row k under env_id[k] filed another env's result,
    with no error; an EnvPool-parity pass, 2026-12-07). Checked against a
    twin pool of the same seed stepped in env order. EnvPool's dict actions,
    {"action": a, "env_id": ids}, are taken; other keys are refused."""
    opts = dict(env_type=env_type, num_envs=3, seed=5, noop_max=1,
                repeat_action_probability=0.0)
    if env_type == "gym":
        opts["gym_reset_return_info"] = True
    rng = np.random.default_rng(5)
    with envpool.make("Breakout-v5", **opts) as env, \
            envpool.make("Breakout-v5", **opts) as twin:
        env.reset(), twin.reset()
        for t in range(40):
            ids = rng.permutation(3)
            actions = rng.integers(0, 4, 3)
            way = t % 4
            if way == 0:
                out = env.step(actions, ids)
            elif way == 1:
                env.send(actions, ids)
                out = env.recv()
            elif way == 2:
                out = env.step({"action": actions, "env_id": ids})
            else:
                env.send({"action": actions, "env_id": ids})
                out = env.recv()
            order = np.argsort(ids)
            ref = twin.step(actions[order])  # env order: row i is env i
            info, ref_info = out[-1], ref[-1]
            assert info["env_id"].tolist() == ids.tolist(), t
            assert info["players"]["env_id"].tolist() == ids.tolist(), t
            for got, want in zip(out[:-1], ref[:-1]):
                assert np.array_equal(got, want[ids]), t
            for key in ("lives", "reward", "terminated", "elapsed_step"):
                assert np.array_equal(info[key], ref_info[key][ids]), (t, key)
        # env order given, or none: the pool's order, nothing taken
        assert env.step(np.zeros(3, int), np.arange(3))[-1]["env_id"].tolist() == [0, 1, 2]
        env.send({"action": np.zeros(3, int)})
        assert env.recv()[-1]["env_id"].tolist() == [0, 1, 2]
        with pytest.raises(ValueError, match="a dict action takes 'action'"):
            env.step({"actions": np.zeros(3, int)})
        assert env.is_vector_env


def test_envpool_sync_step_interrupted_after_its_send_leaves_its_row_order_to_recv():
    """A step(action, env_id) interrupted while it waits (its actions sent:
    Ctrl-C, or a signal handler's exception) leaves its results to the next
    recv(), which gives them in env_id's order too (they came in env order:
    a review of the row-order fix)."""
    import signal

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted

    ids = np.array([2, 0, 3, 1])
    with envpool.make("Breakout-v5", env_type="gymnasium", num_envs=4, seed=2,
                      num_workers=1) as env:
        env.reset()
        old = signal.signal(signal.SIGALRM, interrupt)
        pids = env.pool.worker_pids
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(Interrupted):
                env.step(np.zeros(4, int), ids)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
            signal.signal(signal.SIGALRM, old)
        assert env.recv()[-1]["env_id"].tolist() == ids.tolist()
        # and a step refused before anything was sent leaves no order behind
        with pytest.raises(ValueError):
            env.step(np.zeros(4, int), np.array([0, 0, 1, 2]))
        assert env.step(np.zeros(4, int))[-1]["env_id"].tolist() == [0, 1, 2, 3]


def test_envpool_adapter_declares_next_step_autoreset():
    # What TorchRL's GymWrapper reads to refuse it with its own clear error.
    with envpool.make("Pong-v5", num_envs=1) as env:
        assert env.autoreset_mode == gymnasium.vector.AutoresetMode.NEXT_STEP
        # it said "shmatari pools do not render yet": they do, the adapter does not
        with pytest.raises(NotImplementedError,
                           match=r"shmatari.envpool pools do not render; shmatari's own "
                                 r"pool does: shmatari.make\(game, num_envs, "
                                 r"render_mode='rgb_array'\).render\(\)"):
            env.render()


def test_envpool_unknown_task_and_option():
    with pytest.raises(ValueError, match="Atari tasks only"):
        envpool.make("CartPole-v1", num_envs=1)
    with pytest.raises(TypeError, match="unknown EnvPool option"):
        envpool.make("Pong-v5", num_envs=1, grayscale=True)
    # suggestions in EnvPool's own spellings (before: none for an option, and
    # the ROM id 'breakout' for a task)
    with pytest.raises(TypeError, match="did you mean 'episodic_life' for 'episodic_lfe'"):
        envpool.make("Pong-v5", num_envs=1, episodic_lfe=True)
    with pytest.raises(ValueError, match=r"unknown task 'Breakuot-v5' \(did you mean "
                                         r"'Breakout-v5'"):
        envpool.make("Breakuot-v5", num_envs=1)
    with pytest.raises(ValueError, match="dm"):
        envpool.make_dm("Pong-v5")
    assert "Breakout-v5" in envpool.list_all_envs()
    assert "MsPacman-v5" in envpool.list_all_envs()


def test_make_vec_builds_a_pool_and_record_episode_statistics_works():
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    import shmatari.registration  # noqa: F401  (registers shmatari/<Game>-v5)

    env = gymnasium.make_vec("shmatari/Breakout-v5", num_envs=2, seed=0, num_workers=1,
                             max_episode_frames=200)
    assert isinstance(env, shmatari.ShmVectorEnv) and env.spec.id == "shmatari/Breakout-v5"
    env = RecordEpisodeStatistics(env)
    try:
        env.reset(seed=0)
        lengths = []
        for _ in range(60):
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            if "episode" in info:
                lengths += info["episode"]["l"][info["_episode"]].tolist()
        # 200 frames, no-ops included: each env's first game ends by step 50.
        assert len(lengths) >= 2 and all(40 <= n <= 50 for n in lengths)
    finally:
        env.close()


def test_make_vec_takes_every_argument_of_make():
    """gymnasium.make_vec refused start_timeout ("did you mean
    'start_timeout'?") and batch_order (a fuzzing pass): it takes every
    argument of shmatari.make."""
    import shmatari.registration  # noqa: F401  (registers shmatari/<Game>-v5)

    env = gymnasium.make_vec("shmatari/Pong-v5", num_envs=2, num_workers=1, batch_size=1,
                             batch_order="fixed", start_timeout=30.0)
    try:
        assert env.batch_size == 1 and env.config.batch_order == "fixed"
    finally:
        env.close()
    with pytest.raises(TypeError, match="did you mean 'start_timeout'"):
        gymnasium.make_vec("shmatari/Pong-v5", num_envs=2, start_timout=30.0)


def test_make_vec_same_step_pool_counts_every_episode_with_its_own_statistics():
    # docs/migration.md: under same_step, Gymnasium 1.2's RecordEpisodeStatistics
    # counts every episode after the first one step short (a client pass);
    # the pool's own statistics, which the docs advise there, count each whole.
    env = gymnasium.make_vec("shmatari.registration:shmatari/Breakout-v5", num_envs=2, seed=0,
                             autoreset_mode="same_step", episode_statistics=True,
                             max_episode_steps=30)
    try:
        env.reset(seed=0)
        lengths, truncations = [], 0
        for _ in range(100):
            _, _, terminated, truncated, info = env.step(np.zeros(2, np.int64))
            truncations += int(truncated.sum())
            if "episode" in info:
                lengths += info["episode"]["l"][info["_episode"]].tolist()
        assert truncations == 6 and lengths == [30] * 6  # 3 episodes per env, each whole
    finally:
        env.close()


def test_make_vec_keeps_shmatari_statistics_on_request_and_names_the_frame_cap():
    env = gymnasium.make_vec("shmatari.registration:shmatari/Pong-v5", num_envs=1,
                             episode_statistics=True, max_episode_frames=40, noop_max=0)
    try:
        env.reset(seed=0)
        for _ in range(10):
            *_, info = env.step(np.zeros(1, np.int64))
        assert info["episode"]["frames"].tolist() == [40]
    finally:
        env.close()
    # max_episode_steps: agent steps, as Gymnasium's TimeLimit counts them
    # (no-ops not counted): the step whose elapsed_step is 5 is truncated
    env = gymnasium.make_vec("shmatari/Pong-v5", num_envs=1, max_episode_steps=5, noop_max=30)
    try:
        env.reset(seed=0)
        truncated = [env.step(np.zeros(1, np.int64))[3][0] for _ in range(5)]
        assert truncated == [False] * 4 + [True]
    finally:
        env.close()


def test_envpool_adapter_returns_arrays_of_the_callers_own_by_default():
    # CleanRL's async script keeps next_obs across recv() calls and hands them
    # to torch.from_numpy: they must be writable and never overwritten.
    with envpool.make("Pong-v5", num_envs=2, batch_size=1, seed=0) as env:
        env.async_reset()
        kept = []
        for _ in range(6):
            obs, *_, info = env.recv()
            assert obs.flags.writeable
            kept.append((obs, obs.copy()))
            env.send(np.zeros(1, np.int64), info["env_id"])
        env.recv()
        assert all(np.array_equal(a, b) for a, b in kept)
