"""The shared-memory vector env: API, seeding, cleanliness, bad input."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import multiprocessing as mp
import os
import signal
import sys
import threading

import gymnasium as gym
import numpy as np
import pytest
from conftest import SHM_DIR, pid_alive, random_actions, shm_entries

import shmatari
from shmatari import config

pytestmark = pytest.mark.usefixtures("no_leaks")


def rollout(env, steps: int, seed: int = 0, reset_seed: int | None = None) -> list:
    """Observations, rewards and flags of a seeded random walk, per step."""
    obs, _ = env.reset(seed=reset_seed)
    out = [obs]
    for a in random_actions(env.single_action_space.n, env.num_envs, steps, seed):
        obs, reward, terminated, truncated, _ = env.step(a)
        out.append((obs, reward, terminated, truncated))
    return out


def per_env_digests(trace) -> list[str]:
    """One SHA-256 per env over its whole stream of obs, rewards and flags."""
    n = trace[0].shape[0]
    digests = [hashlib.sha256() for _ in range(n)]
    for i, d in enumerate(digests):
        d.update(trace[0][i].tobytes())
    for obs, reward, term, trunc in trace[1:]:
        for i, d in enumerate(digests):
            d.update(obs[i].tobytes())
            d.update(reward[i:i + 1].tobytes())
            d.update(bytes([int(term[i]), int(trunc[i])]))
    return [d.hexdigest() for d in digests]


def test_api_shapes_dtypes_and_spaces():
    with shmatari.make("Breakout", num_envs=3, num_workers=2, seed=0) as env:
        assert isinstance(env, gym.vector.VectorEnv)
        assert env.single_observation_space.shape == (4, 84, 84)
        assert env.observation_space.shape == (3, 4, 84, 84)
        assert env.single_action_space == gym.spaces.Discrete(4)
        assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
        obs, info = env.reset()
        assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
        assert env.observation_space.contains(obs)
        np.testing.assert_array_equal(info["env_id"], [0, 1, 2])
        assert info["reset"].all()
        # The first stack is the first frame repeated.
        assert all((obs[:, k] == obs[:, 0]).all() for k in range(4))
        obs, reward, terminated, truncated, info = env.step([0, 1, 2])
        assert reward.shape == (3,) and reward.dtype == np.float32
        assert terminated.dtype == bool and truncated.dtype == bool
        assert info["lives"].tolist() == [5, 5, 5]
        assert (info["elapsed_step"] == 1).all()
        assert (info["frame_number"] > 4).all()


def test_a_reseeded_pool_gives_a_fresh_pools_results_info_included():
    """reset(seed=S) mid-run gave a fresh pool's observations, rewards and
    flags, but info["frame_number"] went on counting (86 instead of 1 after
    20 Pong steps; ale-py's reset(seed=...) reloads the ROM and its count
    starts again), so Gymnasium's check_env found the one-env env's step
    info not deterministic. Every info key now matches."""
    def run(env, warm: int):
        if warm:
            env.reset(seed=9)
            for _ in range(warm):
                env.step([0, 1])
        out = [env.reset(seed=3)]
        for k in range(40):
            out.append(env.step([k % 2, 1]))
        return out

    with shmatari.make("Pong", num_envs=2, seed=0, num_workers=1) as a, \
            shmatari.make("Pong", num_envs=2, seed=0, num_workers=1) as b:
        fresh, reseeded = run(a, 0), run(b, 20)
    for x, y in zip(fresh, reseeded):
        for part_x, part_y in zip(x[:-1], y[:-1]):
            np.testing.assert_array_equal(part_x, part_y)
        assert sorted(x[-1]) == sorted(y[-1])
        for key in x[-1]:
            np.testing.assert_array_equal(x[-1][key], y[-1][key], err_msg=key)


def test_rgb_observations():
    with shmatari.make("Pong", num_envs=2, seed=0, grayscale=False, img_height=60,
                       img_width=50, stack_num=2) as env:
        obs, _ = env.reset()
        assert obs.shape == (2, 2, 60, 50, 3)
        obs, *_ = env.step([0, 0])
        assert obs.shape == (2, 2, 60, 50, 3) and obs.std() > 0


@pytest.mark.parametrize("name", ["Breakout", "breakout", "ALE/Breakout-v5", "Breakout-v5"])
def test_game_name_spellings(name):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert shmatari.resolve_game(name) == "breakout"


@pytest.mark.parametrize("name", ["BreakoutNoFrameskip-v4", "BreakoutDeterministic-v4",
                                  "ALE/Breakout-v4", "Breakout-v0"])
def test_legacy_gym_names_warn_that_only_the_game_is_taken(name):
    with pytest.warns(UserWarning, match="only the game"):
        assert shmatari.resolve_game(name) == "breakout"


@pytest.mark.parametrize("name,conventions", [
    ("Breakout-v0", "a frame skip drawn from 2..4 each step, sticky actions 0.25"),
    ("BreakoutNoFrameskip-v0", "no frame skip, sticky actions 0.25"),
    ("Breakout-v4", "a frame skip drawn from 2..4 each step, no sticky actions"),
    ("BreakoutNoFrameskip-v4", "no frame skip, no sticky actions"),
    ("BreakoutDeterministic-v4", "a frame skip of 4, no sticky actions"),
    # Gym registered SpaceInvaders' Deterministic ids with a frame skip of 3
    # (every Deterministic id's warning said "4 (3 in SpaceInvaders)")
    ("SpaceInvadersDeterministic-v4", "a frame skip of 3, no sticky actions"),
    ("SpaceInvadersDeterministic-v0", "a frame skip of 3, sticky actions 0.25"),
])
def test_the_legacy_name_warning_says_what_the_name_stood_for(name, conventions):
    """Every legacy id was said to have "no sticky actions", v0 ids too,
    which Gym and ale-py register with sticky actions 0.25 (a newcomer's
    pass). Checked against ale-py's own registrations where it still has
    them."""
    import ale_py

    with pytest.warns(UserWarning) as caught:
        shmatari.resolve_game(name)
    assert f"names Gym's legacy conventions ({conventions}), but" in str(caught[0].message)
    assert shmatari.games.legacy_id(name) and not shmatari.games.legacy_id("ALE/Breakout-v5")
    gym.register_envs(ale_py)
    if "Deterministic" not in name:  # ale-py registers no Deterministic ids any more
        kwargs = gym.spec(name).kwargs
        sticky = kwargs["repeat_action_probability"]
        assert ("sticky actions 0.25" if sticky == 0.25 else "no sticky actions") in conventions
        skip = kwargs["frameskip"]
        assert ("no frame skip" if skip == 1 else "2..4" if skip == (2, 5) else "?") in conventions


def test_a_legacy_name_whose_conventions_the_caller_set_is_not_warned():
    """``make("BreakoutNoFrameskip-v4", preset="dqn")``, SB3's own spelling
    with SB3's conventions, was warned that its options follow ALE v5 (a
    newcomer's pass). A preset, or both frame_skip and
    repeat_action_probability, set them; one of the two does not."""
    import warnings

    for kwargs in ({"preset": "dqn"}, {"preset": "gymnasium"},
                   {"frame_skip": 4, "repeat_action_probability": 0.0}):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cfg = shmatari.config.build_config("BreakoutNoFrameskip-v4", 1, seed=0, **kwargs)
        assert cfg.game == "breakout"
    for kwargs in ({}, {"frame_skip": 4}, {"repeat_action_probability": 0.0}):
        with pytest.warns(UserWarning, match="names Gym's legacy conventions"):
            shmatari.config.build_config("BreakoutNoFrameskip-v4", 1, seed=0, **kwargs)
    with pytest.warns(UserWarning, match="names Gym's legacy conventions"):
        shmatari.resolve_game("BreakoutNoFrameskip-v4")


def test_the_legacy_name_warning_names_the_callers_line():
    """resolve_game's warning was reported at ``sys:1`` (a fixed stacklevel
    fit for make() only); make() and resolve_game() both name this file."""
    import warnings

    for call in (lambda: shmatari.resolve_game("BreakoutNoFrameskip-v4"),
                 lambda: shmatari.config.build_config("BreakoutNoFrameskip-v4", 1, seed=0)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        assert [w.category for w in caught] == [UserWarning]
        assert caught[0].filename == __file__, caught[0].filename
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shmatari.make("BreakoutNoFrameskip-v4", num_envs=1, num_workers=1, seed=0).close()
    assert [w.filename for w in caught] == [__file__]


def test_dir_of_the_package_lists_no_module_it_used():
    assert "importlib" not in dir(shmatari)
    assert {"make", "resolve_game", "seeding"} <= set(dir(shmatari))


def test_game_names_with_underscores_and_digits():
    assert shmatari.resolve_game("MsPacman") == "ms_pacman"
    assert shmatari.resolve_game("ALE/MsPacman-v5") == "ms_pacman"
    # the id shmatari.registration gives it ("did you mean 'breakout'" before)
    assert shmatari.resolve_game("shmatari/MsPacman-v5") == "ms_pacman"
    assert shmatari.resolve_game("TicTacToe3D") == "tic_tac_toe_3d"
    assert shmatari.resolve_game("Pacman") == "pacman"


def test_returned_arrays_belong_to_the_caller():
    with shmatari.make("Pong", num_envs=2, seed=1) as env:
        obs0, _ = env.reset()
        kept = obs0.copy()
        obs1, reward, term, trunc, info = env.step([1, 1])
        snapshot = [obs1.copy(), reward.copy(), term.copy(), info["lives"].copy()]
        for _ in range(20):
            env.step([2, 3])
        np.testing.assert_array_equal(obs0, kept)
        np.testing.assert_array_equal(obs1, snapshot[0])
        np.testing.assert_array_equal(reward, snapshot[1])
        np.testing.assert_array_equal(info["lives"], snapshot[3])
        assert obs1.flags.owndata or obs1.base is not None and obs1.base.flags.owndata


@pytest.fixture(scope="module")
def reference_trace():
    with shmatari.make("Breakout", num_envs=8, num_workers=2, seed=123) as env:
        return per_env_digests(rollout(env, 500))


@pytest.mark.parametrize("num_workers,start_method", [
    (1, "zygote"), (4, "forkserver"), (2, "fork"), (2, "spawn"), (8, "zygote")])
def test_trajectories_do_not_depend_on_workers_or_start_method(
        reference_trace, num_workers, start_method):
    with shmatari.make("Breakout", num_envs=8, num_workers=num_workers, seed=123,
                       start_method=start_method) as env:
        assert per_env_digests(rollout(env, 500)) == reference_trace


def test_same_seed_same_run_and_envs_differ_with_sticky_actions(reference_trace):
    # With sticky actions on, every env index plays a different game even under
    # identical actions.
    with shmatari.make("Breakout", num_envs=8, seed=123) as env:
        env.reset()
        acts = np.zeros(8, np.int64)
        obs_hashes = set()
        for k in range(300):
            acts[:] = k % 4
            obs, *_ = env.step(acts)
        obs_hashes = {hashlib.sha256(o.tobytes()).hexdigest() for o in obs}
        assert len(obs_hashes) == 8
    assert len(set(reference_trace)) == 8


def test_seed_none_draws_entropy_that_replays_the_run():
    with shmatari.make("Pong", num_envs=2, seed=None) as env:
        entropy = env.seed_entropy
        assert isinstance(entropy, int) and entropy > 0
        first = per_env_digests(rollout(env, 120))
    with shmatari.make("Pong", num_envs=2, seed=entropy) as env:
        assert per_env_digests(rollout(env, 120)) == first


def test_reset_with_seed_rederives_every_env_and_reset_without_continues():
    with shmatari.make("Breakout", num_envs=2, seed=9) as env:
        fresh = per_env_digests(rollout(env, 100))
        continued = per_env_digests(rollout(env, 100))
        reseeded = per_env_digests(rollout(env, 100, reset_seed=9))
        other = per_env_digests(rollout(env, 100, reset_seed=10))
    assert continued != fresh
    assert reseeded == fresh
    assert other != fresh
    with shmatari.make("Breakout", num_envs=2, seed=5) as env:
        assert env.seed_entropy == 5
        assert per_env_digests(rollout(env, 100, reset_seed=9)) == fresh
        assert env.seed_entropy == 9


def test_close_removes_segment_and_workers():
    before = shm_entries()
    env = shmatari.make("Breakout", num_envs=4, num_workers=2, seed=0)
    name, pids = env.segment_name, list(env.worker_pids)
    assert name in shm_entries() - before
    env.reset()
    env.close()
    env.close()  # idempotent
    assert name not in shm_entries()
    assert not any(pid_alive(p) for p in pids)
    with pytest.raises(shmatari.PoolClosedError):
        env.step([0, 0, 0, 0])


def _mapped(name: str) -> tuple[int, bool]:
    """This process's open descriptors of /dev/shm/<name>, and whether it is mapped."""
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += os.readlink(f"/proc/self/fd/{fd}").startswith(f"{SHM_DIR}/{name}")
        except OSError:
            pass
    with open("/proc/self/maps") as maps:
        return fds, f"{SHM_DIR}/{name}" in maps.read()


def test_a_close_at_interpreter_exit_needs_no_module_globals(monkeypatch):
    """Gymnasium's ``VectorEnv.__del__`` calls close() at interpreter exit,
    after module teardown set the modules' globals to None: close() waited
    for the shutdown with ``os.getpid()`` and printed "AttributeError:
    'NoneType' object has no attribute 'getpid'" after a JAX script's own
    traceback (a client-code pass, 2026-12-06). A shutdown that is over
    needs none of them."""
    from shmatari import supervisor

    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    env.reset()
    env.close()
    monkeypatch.setattr(supervisor, "os", None)  # as module teardown leaves them
    monkeypatch.setattr(supervisor, "threading", None)
    env._res.wait_shutdown()
    env.close()


@pytest.mark.parametrize("ram_info", [False, True])
def test_close_lets_the_mapping_go_while_the_env_object_lives(ram_info):
    """close() unmaps the segment and closes its file at once, not when the
    env object is collected (the client's own ring views held both: a pool
    kept in a list, a ``with`` variable or a traceback kept its memory)."""
    env = shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0, ram_info=ram_info,
                        render_mode="rgb_array")
    name = env.segment_name
    env.reset()
    env.step([0, 0])
    fds, mapped = _mapped(name)
    assert fds >= 1 and mapped  # SharedMemory's descriptor, and mmap's own copy
    env.close()
    assert _mapped(name) == (0, False)
    assert env.closed  # the object lives on


def test_close_keeps_the_mapping_for_zero_copy_views_the_caller_holds():
    env = shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0, zero_copy=True)
    name = env.segment_name
    obs, _ = env.reset()
    env.close()
    assert _mapped(name)[1] and int(obs.sum()) >= 0  # still readable
    del obs
    gc.collect()
    assert _mapped(name) == (0, False)


def test_render_in_a_forked_child_says_the_pool_is_the_parents():
    """render() is refused in a forked child as step() is (it raised a bare
    KeyError once the child's resources had forgotten the parent's views)."""
    with shmatari.make("Breakout", num_envs=1, num_workers=1, seed=0,
                       render_mode="rgb_array") as env:
        env.reset()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without cleanup
            try:
                env.render()
                msg = b"no error"
            except shmatari.PoolClosedError as exc:
                msg = b"PoolClosedError " + str(exc).encode()[:200]
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                msg = type(exc).__name__.encode()
            os.write(w, msg)
            os._exit(0)
        os.close(w)
        msg = os.read(r, 4096)
        os.close(r)
        os.waitpid(pid, 0)
        assert msg.startswith(b"PoolClosedError") and b"forked" in msg, msg
        assert env.render()[0].shape == (210, 160, 3)  # the parent's pool is untouched


def test_every_call_in_a_forked_child_says_the_pool_is_the_parents():
    """reset, step, send, recv and async_reset in a forked child raise
    PoolClosedError naming the fork, before anything is sent: the call
    guard checks the process (in C since 2026-12-05, once per call)."""
    with shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0) as env:
        env.reset()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without cleanup
            msgs = []
            for call in (env.reset, lambda: env.step([0, 0]), lambda: env.send([0, 0]),
                         env.recv, env.async_reset):
                try:
                    call()
                    msgs.append("no error")
                except shmatari.PoolClosedError as exc:
                    msgs.append("PoolClosedError " + str(exc)[:120])
                except BaseException as exc:  # noqa: BLE001 - reported to the parent
                    msgs.append(type(exc).__name__)
            os.write(w, "\n".join(msgs).encode())
            os._exit(0)
        os.close(w)
        msgs = os.read(r, 65536).decode().split("\n")
        os.close(r)
        os.waitpid(pid, 0)
        assert len(msgs) == 5 and all(m.startswith("PoolClosedError") and
                                      f"process {os.getpid()}" in m and "forked" in m
                                      for m in msgs), msgs
        obs, *_ = env.step([0, 0])  # the parent's pool is untouched
        assert obs.shape == (2, 4, 84, 84)


def test_garbage_collected_pool_cleans_up():
    env = shmatari.make("Pong", num_envs=2, seed=0)
    name, pids = env.segment_name, list(env.worker_pids)
    env.reset()
    del env
    gc.collect()
    assert name not in shm_entries()
    for p in mp.active_children():
        p.join(2.0)
    assert not any(pid_alive(p) for p in pids)


def test_failure_inside_make_leaves_nothing_behind():
    cfg = config.build_config("Breakout", 2, seed=0)
    before = shm_entries()
    with pytest.raises(shmatari.WorkerError) as err:
        shmatari.ShmVectorEnv(dataclasses.replace(cfg, game="no_such_rom"))
    assert "worker traceback" in str(err.value)
    assert err.value.worker_traceback
    assert shm_entries() == before


# -- bad input -------------------------------------------------------------------

def _children() -> set[int]:
    return {p.pid for p in mp.active_children()}


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(env_id="Breakoot"), ValueError, "did you mean 'breakout'"),
    (dict(env_id="NotAGame"), ValueError, "unknown Atari game"),
    (dict(env_id=42), TypeError, "must be a str"),
    (dict(num_envs=0), ValueError, "num_envs must be >= 1"),
    (dict(num_envs=2.5), TypeError, "num_envs must be an int"),
    (dict(num_envs=2, num_workers=3), ValueError, "num_workers must be <= num_envs"),
    (dict(batch_size=9), ValueError, "batch_size must be <= num_envs"),
    (dict(frame_skipp=4), TypeError, "did you mean 'frame_skip'"),
    # make()'s own arguments are matched too: "unknown option 'num_env'",
    # listing only the env options (a newcomer's pass)
    (dict(num_env=8), TypeError, r"unknown option or argument 'num_env' \(did you mean "
                                 r"'num_envs'\?\).*the pool's own arguments: num_envs, "),
    (dict(start_timout=5), TypeError, "did you mean 'start_timeout'"),
    (dict(n_envs=8), TypeError, "n_envs is Stable-Baselines3's spelling: use num_envs"),
    (dict(sticky_actions=0.0), TypeError, "use repeat_action_probability"),
    (dict(mode=0), TypeError, "mode is ale-py's game mode: not an option"),
    (dict(difficulty=0), TypeError, "difficulty is ale-py's"),
    (dict(thread_affinity_offset=0), TypeError, "thread_affinity_offset is EnvPool's"),
    (dict(clip_reward=True), TypeError, "use reward_clip"),
    (dict(life_loss_info=True), TypeError, "life_loss_info is ale-py's: use episodic_life=True"),
    (dict(reward_clipping=True), TypeError, "reward_clipping is ale-py's AtariVectorEnv's: use "
                                            "reward_clip"),
    (dict(zero_discount_on_life_loss=True), TypeError, "zero_discount_on_life_loss is "
                                                       "EnvPool's: not an option"),
    (dict(frameskip=4), TypeError, "frameskip is ale-py's spelling"),
    (dict(stack_size=4), TypeError, "stack_size is Gymnasium's FrameStackObservation's: "
                                    "use stack_num"),
    (dict(frame_stack=4), TypeError, "use stack_num"),
    (dict(use_inter_area_resize=True), TypeError, "use_inter_area_resize is EnvPool's"),
    (dict(env_type="gymnasium"), TypeError, r"env_type is EnvPool's: .*shmatari.envpool.make"),
    (dict(render_mode="human"), ValueError, r"render_mode='rgb_array' and show"),
    (dict(repeat_action_probability=1.5), ValueError, "repeat_action_probability"),
    (dict(img_height=211), ValueError, "img_height"),
    (dict(grayscale="yes"), TypeError, "grayscale must be a bool"),
    (dict(grayscale=np.int64(1)), TypeError, "grayscale must be a bool"),
    (dict(fast_reset=False), ValueError, r"fast_reset='off' for False"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=1.0), TypeError, "seed"),
    (dict(start_method="thread"), ValueError, "start_method"),
    (dict(autoreset_mode="sometimes"), ValueError, "autoreset_mode"),
])
def test_bad_make_arguments_fail_before_any_process_starts(kwargs, exc, match):
    args = dict(env_id="Breakout", num_envs=8)
    args.update(kwargs)
    before_children, before_shm = _children(), shm_entries()
    with pytest.raises(exc, match=match):
        shmatari.make(**args)
    assert _children() <= before_children
    assert shm_entries() == before_shm


def test_shmvectorenv_made_from_a_game_name_points_to_make_and_leaves_nothing():
    """ShmVectorEnv("Breakout") ended in "'str' object has no attribute
    'num_envs'", and the half-made object's close() at collection printed an
    AttributeError (a newcomer's pass, 2026-12-06)."""
    import gc

    before_shm, before = shm_entries(), _children()
    unraisable, hook = [], sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        for config in ("Breakout", None):
            with pytest.raises(TypeError, match=r"ShmVectorEnv takes an EnvConfig.*shmatari\."
                                                r"make\('Breakout', num_envs=\.\.\.\)"):
                shmatari.ShmVectorEnv(config)
        gc.collect()  # the refused objects' __del__ (close()) runs, quietly
    finally:
        sys.unraisablehook = hook
    assert not unraisable, [u.exc_value for u in unraisable]
    assert shm_entries() == before_shm and _children() == before


def test_numpy_bools_are_bools():
    """np.True_ (what a NumPy comparison or a config array gives) was refused
    as 'must be a bool, got bool np.True_': the check looked for a type
    named ``bool_``, NumPy 1's name for it. NumPy ints and floats were
    already accepted for the other options."""
    cfg = shmatari.config.build_config("Pong", 2, episodic_life=np.True_, grayscale=np.False_,
                                       ram_info=np.bool_(True))
    assert (cfg.episodic_life, cfg.grayscale, cfg.ram_info) == (True, False, True)
    assert all(type(v) is bool for v in (cfg.episodic_life, cfg.grayscale, cfg.ram_info))


def test_bad_actions_are_refused_and_the_pool_stays_usable():
    with shmatari.make("Breakout", num_envs=2, seed=0) as env:
        with pytest.raises(shmatari.CallOrderError, match="reset"):
            env.step([0, 0])
        env.reset()
        cases = [
            ([0, 0, 0], ValueError, r"shape \(2,\)"),
            ([[0, 0]], ValueError, r"shape \(2,\)"),
            ([0.0, 1.0], TypeError, "integers"),
            (np.array([0, np.nan]), TypeError, "integers"),
            ([True, False], TypeError, "integers"),
            ([0, 4], ValueError, "out of range"),
            ([-1, 0], ValueError, "out of range"),
            # wider than int32: the text names the bound it was clamped to
            (np.array([2**40, 0]), ValueError, "action 2147483647 or more at position 0"),
            (np.array([0, -2**40]), ValueError, "action -2147483648 or less at position 1"),
            (["a", "b"], TypeError, "integers"),
        ]
        for actions, exc, match in cases:
            with pytest.raises(exc, match=match):
                env.step(actions)
        obs, reward, term, trunc, info = env.step(np.array([1, 2], np.uint8))
        assert obs.shape == (2, 4, 84, 84)
        assert (info["elapsed_step"] == 1).all()


def test_env_ids_wider_than_int32_are_named_by_the_bound_they_were_clamped_to():
    """env_ids beyond int32 are clamped, as actions are; the refusal said
    "env_ids[1] = 2147483647 is out of range" of an id of 2**63, a value
    never given (a helper's API pass). It says "or more" / "or less" now."""
    with shmatari.make("null", num_envs=4, num_workers=2, batch_size=2, seed=0) as env:
        first = env.reset()[1]["env_id"]  # the first ready: any two of the four
        e = int(first[0])  # position 0 an env that may be sent to: 1 is checked
        for ids, text in [(np.array([e, 2**63], np.uint64), "2147483647 or more"),
                          (np.array([e, -2**40], np.int64), "-2147483648 or less"),
                          (np.array([e, 7], np.int64), "7")]:
            with pytest.raises(ValueError, match=rf"^send\(\): env_ids\[1\] = {text} is out "
                                                 rf"of range 0\.\.3$"):
                env.send([0, 0], ids)
        env.send([0, 0], first)  # refused sends changed nothing: the pool goes on
        ids = [*env.recv(timeout=30)[4]["env_id"], *env.recv(timeout=30)[4]["env_id"]]
        assert sorted(ids) == [0, 1, 2, 3]


_TRACKER_SCRIPT = """
import numpy as np
import shmatari
if __name__ == "__main__":
    for method in ("fork", "fork", "fork", "forkserver", "spawn"):
        with shmatari.make("Pong", num_envs=8, num_workers=8, seed=0,
                           start_method=method) as env:
            env.reset()
            env.step(np.zeros(8, np.int64))
    print("done")
"""


def test_no_resource_tracker_noise(tmp_path):
    """Pools under every start method, with 8 workers attaching at once, leave
    stderr clean. (Workers once registered their attach with the resource
    tracker, whose set of names made concurrent register/unregister pairs
    print KeyError tracebacks now and then; attaching no longer registers.)"""
    import subprocess
    import sys

    script = tmp_path / "tracker.py"
    script.write_text(_TRACKER_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    for word in ("resource_tracker", "leaked", "Traceback", "Warning"):
        assert word not in proc.stderr, proc.stderr


def test_script_without_main_guard_gets_told_what_to_do(tmp_path):
    """A script that makes a pool at module level with start_method="spawn":
    each worker re-imports it and dies before running shmatari's code; the
    error must say so rather than blame native code. (The default, zygote,
    needs no guard: tests/test_zygote.py.)"""
    import subprocess
    import sys

    script = tmp_path / "noguard.py"
    script.write_text("import shmatari\nenv = shmatari.make('Pong', num_envs=1, seed=0, "
                      "start_method='spawn')\nenv.close()\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert 'if __name__ == "__main__":' in proc.stderr.splitlines()[-1]


def test_ram_info_is_ale_pys_ram_observation_step_for_step():
    # ale-py's obs_type="ram" env, with no randomness on either side (no
    # sticky actions, no no-ops): the same actions give the same RAM.
    import ale_py

    gym.register_envs(ale_py)
    ref = gym.make("ALE/Breakout-v5", obs_type="ram", frameskip=4, repeat_action_probability=0.0)
    opts = dict(seed=0, noop_max=0, repeat_action_probability=0.0, ram_info=True)
    try:
        ram, _ = ref.reset(seed=0)
        with shmatari.make("Breakout", 2, num_workers=1, **opts) as env:
            _, info = env.reset()
            assert info["ram"].dtype == np.uint8 and info["ram"].shape == (2, 128)
            assert np.array_equal(info["ram"][0], ram) and np.array_equal(info["ram"][1], ram)
            rng = np.random.default_rng(0)
            for _ in range(150):
                a = int(rng.integers(4))
                ram, *_ = ref.step(a)
                _, _, terminated, _, info = env.step(np.array([a, 0]))
                assert np.array_equal(info["ram"][0], ram)
                assert not terminated[0]
            assert not np.array_equal(info["ram"][0], info["ram"][1])  # each env its own
    finally:
        ref.close()
    with shmatari.make("Breakout", 2, num_workers=1, seed=0) as env:
        assert "ram" not in env.reset()[1]                # only on request


def test_ram_info_follows_each_row_in_async_and_same_step_pools():
    # Async: each row's RAM is its own env's (envs in lockstep on NOOP stay equal).
    with shmatari.make("Pong", 3, batch_size=1, num_workers=3, seed=0, noop_max=0,
                       repeat_action_probability=0.0, ram_info=True) as env:
        env.async_reset()
        rams = {}
        for _ in range(3):
            *_, info = env.recv()
            rams[int(info["env_id"][0])] = info["ram"][0]
        assert sorted(rams) == [0, 1, 2]
        assert all(np.array_equal(rams[0], r) for r in rams.values())
    # Same step: a done row's RAM is the reset's, as its observation.
    with shmatari.make("Pong", 1, seed=0, noop_max=0, repeat_action_probability=0.0,
                       autoreset_mode="same_step", max_episode_frames=40, ram_info=True) as env:
        _, first = env.reset()
        for _ in range(10):
            *_, truncated, info = env.step(np.zeros(1, np.int64))
        assert truncated[0] and np.array_equal(info["ram"], first["ram"])


def test_gymnasium_make_obs_type_ram_gives_ram_observations():
    import shmatari.registration  # noqa: F401

    env = gym.make("shmatari/Breakout-v5", obs_type="ram", noop_max=0,
                   repeat_action_probability=0.0)
    try:
        assert env.observation_space == gym.spaces.Box(0, 255, (128,), np.uint8)
        obs, info = env.reset(seed=0)
        assert obs.shape == (128,) and np.array_equal(obs, info["ram"])
        obs, *_ = env.step(1)
        assert env.observation_space.contains(obs)
    finally:
        env.close()


def test_a_step_of_too_few_envs_says_how_many_it_needs():
    """A synchronous pool stepped with a subset: the message said "(or make
    the pool with a smaller batch_size)" with nothing before the "or", then
    that the idle pool leaves that state with send() or a reset, neither of
    which is the way (a newcomer's pass)."""
    with shmatari.make("Pong", num_envs=4, num_workers=2, seed=0) as env:
        env.reset()
        with pytest.raises(shmatari.CallOrderError) as err:
            env.step(np.zeros(2, np.int64), np.array([0, 1]))
        text = str(err.value)
        # this call's way out first, then the state's words (every refusal
        # names a way out of its state: test_client_machine.py)
        assert text.startswith("step() would send 2 action(s) and wait for a batch of 4 "
                               "results, but only 2 env(s) would then be running; nothing was "
                               "sent: give actions to at least 4 env(s), or make the pool with "
                               "batch_size <= 2; "), text
        assert "leave" in text
        env.step(np.zeros(4, np.int64))  # nothing was sent: the pool goes on
    # As step()'s docstring says: a subset is accepted where it and the envs
    # already running make a batch (here 1 + 2 >= batch_size 2).
    with shmatari.make("Pong", num_envs=4, batch_size=2, num_workers=2, seed=0) as env:
        env.async_reset()
        *_, info = env.recv()  # the other two envs' resets are still running
        *_, info = env.step(np.zeros(1, np.int64), info["env_id"][:1])
        assert info["env_id"].shape == (2,)


_PLANTED = """
import os
with open(os.environ["PLANTED_MARKER"], "a") as f:
    f.write(f"{os.getpid()}\\n")
raise ImportError("planted")
"""

_FROM_FOLDER_SCRIPT = """
import sys
import threading
import numpy as np
import shmatari
if __name__ == "__main__":
    with shmatari.make("Pong", num_envs=2, num_workers=2, seed=0,
                       start_method=sys.argv[1]) as env:
        env.reset()
        env.step(np.zeros(2, np.int64))
    print("done")
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH is Python 3.11's")
@pytest.mark.parametrize("method", ["zygote", "forkserver", "spawn"])
def test_a_module_planted_in_the_current_folder_runs_in_no_process_of_the_pool(
        tmp_path, method):
    """A pool started from a folder others can write (/tmp): a
    ``multiprocessing`` package planted there ran in the resource tracker
    that ``SharedMemory(create=True)`` started (a ``python -c`` process,
    whose sys.path begins with the current folder: an attacker's pass, as
    root), and in spawn and forkserver workers. Segments are now made
    without the tracker, and the pool's children start with PYTHONSAFEPATH
    set; the planted module runs nowhere and the pool works."""
    import subprocess

    folder = tmp_path / "shared"
    (folder / "multiprocessing").mkdir(parents=True)
    (folder / "multiprocessing" / "__init__.py").write_text(_PLANTED)
    marker = tmp_path / "ran"
    script = tmp_path / "trainer.py"  # elsewhere: the script's folder is not the current one
    script.write_text(_FROM_FOLDER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    env["PLANTED_MARKER"] = str(marker)
    proc = subprocess.run([sys.executable, str(script), method], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-3000:]
    assert not marker.exists(), f"the planted module ran in pid(s) {marker.read_text().split()}"


@pytest.mark.usefixtures("no_leaks")
def test_a_refusal_after_an_interrupted_step_says_the_step_was_interrupted():
    """A Ctrl-C that ends step()'s wait leaves its commands in flight, and
    the next step() is refused: "env 0 is still running (its result was not
    received) ... recv() leaves that state", which puzzled a synchronous
    pool's user who never called send() (a newcomer's pass). The refusal now
    says the last step() was interrupted; once a batch is taken it no longer
    does."""
    from shmatari.errors import CallOrderError

    class Interrupt(Exception):
        pass

    def handler(signum, frame):
        raise Interrupt

    with shmatari.make("null", num_envs=2, num_workers=1, seed=0) as env:
        env.reset(timeout=30)
        pid = env.worker_pids[0]
        os.kill(pid, signal.SIGSTOP)  # the step's wait is sure to be under way
        previous = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(Interrupt):
                env.step(np.zeros(2, np.int64), timeout=30)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            os.kill(pid, signal.SIGCONT)
        with pytest.raises(CallOrderError, match=r"env 0 is still running.*; the last step\(\) "
                                                 r"was interrupted while it waited, and no "
                                                 r"batch has been taken since$"):
            env.step(np.zeros(2, np.int64), timeout=30)
        env.recv(timeout=30)
        env.send(np.zeros(2, np.int64))
        with pytest.raises(CallOrderError) as refused:
            env.step(np.zeros(2, np.int64), timeout=30)
        assert "interrupted" not in str(refused.value)


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("call", ["reset", "async_reset", "recv"])
def test_a_signal_handlers_call_inside_step_is_refused_and_step_goes_on(call):
    """A signal handler that calls reset() or async_reset() (or recv())
    while its thread waits in step(). The guard let the same thread in, as
    if the call were nested: async_reset() dropped the step's commands and
    step() returned the reset's rows as its own; reset() made step() fail
    with "recv() refused; the pool is idle" (a helper's API pass). Now the
    handler's call is refused, does nothing, and step() returns its own
    batch once the worker answers."""
    from shmatari.errors import CallOrderError

    refusals = []

    def handler(signum, frame):
        try:
            getattr(env, call)()
        except CallOrderError as exc:
            refusals.append(str(exc))

    with shmatari.make("null", num_envs=2, num_workers=1, seed=0) as env:
        env.reset(timeout=30)
        pid = env.worker_pids[0]
        os.kill(pid, signal.SIGSTOP)  # step() waits until the timer resumes it
        previous = signal.signal(signal.SIGALRM, handler)
        resume = threading.Timer(0.6, os.kill, (pid, signal.SIGCONT))
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            resume.start()
            obs, reward, terminated, truncated, info = env.step(np.ones(2, np.int64),
                                                                timeout=30)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            resume.join()
            os.kill(pid, signal.SIGCONT)
        assert refusals == [f"{call}() was called while this thread is inside step() on "
                            f"this pool (from a signal handler, say): only close() may be "
                            f"called there; {call}() did nothing"]
        assert not info["reset"].any() and (info["elapsed_step"] == 1).all(), info
