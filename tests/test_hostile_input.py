"""Hostile input, generated: every bad call raises a clear error and the pool
stays usable (a normal step works after each one)."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from conftest import shm_entries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import shmatari
from shmatari import config

pytestmark = pytest.mark.usefixtures("no_leaks")

NUM_ENVS, BATCH = 4, 2
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def sync_env():
    with shmatari.make("Breakout", num_envs=NUM_ENVS, num_workers=2, seed=0) as env:
        env.reset()
        yield env


class AsyncPool:
    """An async pool and which of its envs wait for an action."""

    def __init__(self, env):
        self.env = env
        env.async_reset()
        self.idle = self._recv()

    def _recv(self) -> set[int]:
        *_, info = self.env.recv()
        assert len(info["env_id"]) == BATCH
        return set(info["env_id"].tolist())

    def cycle(self) -> None:
        """A normal round: step every idle env, take the next batch."""
        ids = sorted(self.idle)
        self.env.send(np.zeros(len(ids), np.int64), ids)
        self.idle = self._recv()


@pytest.fixture(scope="module")
def async_pool():
    with shmatari.make("Breakout", num_envs=NUM_ENVS, num_workers=2, batch_size=BATCH,
                       seed=0) as env:
        yield AsyncPool(env)


def assert_steps(env) -> None:
    """A normal step works: every env answers."""
    obs, reward, terminated, truncated, info = env.step(np.ones(NUM_ENVS, np.int64))
    assert obs.shape == (NUM_ENVS, 4, 84, 84) and reward.shape == (NUM_ENVS,)
    np.testing.assert_array_equal(info["env_id"], np.arange(NUM_ENVS))
    assert not info["reset"].any() or info["elapsed_step"].min() >= 0


# -- actions ---------------------------------------------------------------------

any_dtype = st.one_of(
    hnp.integer_dtypes(endianness="="), hnp.integer_dtypes(endianness=">"),
    hnp.unsigned_integer_dtypes(endianness="="), hnp.unsigned_integer_dtypes(endianness=">"),
    hnp.floating_dtypes(), hnp.complex_number_dtypes(), hnp.boolean_dtypes(),
    hnp.datetime64_dtypes(), hnp.timedelta64_dtypes(), hnp.byte_string_dtypes(),
    hnp.unicode_string_dtypes())
any_array = hnp.arrays(any_dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                   max_side=5))  # floats: NaN and inf too
int_list = st.lists(st.integers(-(2 ** 70), 2 ** 70) | st.integers(-2, 6), max_size=6)
nested = st.lists(st.lists(st.integers(0, 3), max_size=3), max_size=4)  # ragged too


def valid_actions(actions, n: int, n_actions: int) -> bool:
    if isinstance(actions, list):
        return (len(actions) == n and all(isinstance(a, int) for a in actions)
                and all(0 <= a < n_actions for a in actions))
    return (actions.dtype.kind in "iu" and actions.shape == (n,)
            and bool(((actions >= 0) & (actions < n_actions)).all()))


@SETTINGS
@given(actions=any_array | int_list | nested)
def test_any_actions_step_or_raise_and_the_pool_goes_on(sync_env, actions):
    env = sync_env
    if valid_actions(actions, NUM_ENVS, env.single_action_space.n):
        obs, *_ = env.step(actions)
        assert obs.shape == (NUM_ENVS, 4, 84, 84)
    else:
        with pytest.raises((TypeError, ValueError), match="actions"):
            env.step(actions)
    assert_steps(env)


@pytest.mark.parametrize("actions", [None, [None] * NUM_ENVS])
def test_none_for_actions_is_named_as_none(sync_env, actions):
    """``step(None)`` said "objects that are not ints" (NumPy's object array
    of None): the message names None, and the pool goes on (a fuzzer's pass)."""
    with pytest.raises(TypeError, match="actions must be .*(got None|not ints)"):
        sync_env.step(actions)
    if actions is None:
        with pytest.raises(TypeError, match="got None$"):
            sync_env.step(actions)
    assert_steps(sync_env)


def _clamped_int32(values) -> np.ndarray:
    """The conversion as_int32 promises, written plainly: each integer
    clamped to int32's bounds."""
    return np.array([min(max(int(v), -2 ** 31), 2 ** 31 - 1) for v in values], np.int32)


@SETTINGS
@given(data=st.data())
def test_the_step_paths_int32_conversion_matches_the_plain_one(data):
    """as_int32's fast path (1-D native int32/int64 arrays, on every step)
    gives what the general path gives for every integer array: the same
    values clamped to int32, in a new array that shares no memory with the
    caller's (a private copy: the C client checks it, then posts it). Strided
    views, the other byte order and the other integer types take the general
    path and agree too."""
    from shmatari import _core

    dtype = data.draw(st.sampled_from(["<i4", ">i4", "<i8", ">i8", "<u4", "<u8", "i1", "<i2",
                                       "<u2", "u1"]))
    info = np.iinfo(np.dtype(dtype))
    base = data.draw(hnp.arrays(np.dtype(dtype), st.integers(0, 12),
                                elements=st.integers(int(info.min), int(info.max))))
    step = data.draw(st.sampled_from([1, 1, 2, -1]))
    values = base[::step]
    out = _core.as_int32(values, "actions")
    assert out.dtype == np.int32 and out.shape == values.shape and out.flags.c_contiguous
    np.testing.assert_array_equal(out, _clamped_int32(values))
    assert not np.shares_memory(out, values)


# -- send(actions, env_id) -------------------------------------------------------

@SETTINGS
@given(data=st.data())
def test_send_with_bad_env_ids_raises_and_changes_nothing(async_pool, data):
    pool, env = async_pool, async_pool.env
    ids = data.draw(st.lists(st.integers(-2, NUM_ENVS + 1), max_size=NUM_ENVS + 1)
                    | hnp.arrays(st.sampled_from([np.float64, np.bool_, np.int8]),
                                 hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)),
                    label="env_id")
    as_list = ids
    if isinstance(ids, np.ndarray):  # integer 1-D arrays are as good as lists
        as_list = ids.tolist() if ids.dtype.kind in "iu" and ids.ndim == 1 else None
    n = len(as_list) if as_list is not None else 0
    count = data.draw(st.sampled_from([n, n, n + 1, max(n - 1, 0)]), label="len(actions)")
    actions = np.zeros(count, np.int64)
    pending = env._pending
    valid = (as_list is not None and len(set(as_list)) == n
             and all(0 <= e < NUM_ENVS for e in as_list) and set(as_list) <= pool.idle
             and count == n)
    if valid:
        env.send(actions, ids)
        pool.idle -= set(as_list)
    else:
        with pytest.raises((TypeError, ValueError, shmatari.CallOrderError),
                           match="env_id|actions|still running"):
            env.send(actions, ids)
        assert env._pending == pending  # refused: nothing was posted
    pool.cycle()


# -- reset(seed, options) --------------------------------------------------------

masks = hnp.arrays(st.sampled_from([np.bool_, np.int64, np.float32]),
                   st.sampled_from([(NUM_ENVS,), (NUM_ENVS + 1,), (), (2, NUM_ENVS)]))
options_st = st.one_of(
    st.none(), st.just({}), st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), min_size=1, max_size=2),
    st.fixed_dictionaries({"reset_mask": masks | st.lists(st.booleans(), max_size=5)}))
seeds = st.one_of(st.none(), st.integers(-3, 3), st.integers(2 ** 128 - 2, 2 ** 128 + 2),
                  st.floats(allow_nan=True), st.booleans(), st.text(max_size=2))


def valid_reset(seed, options) -> bool:
    seed_ok = seed is None or (isinstance(seed, int) and not isinstance(seed, bool)
                               and 0 <= seed < 2 ** 128)
    if options is None or options == {}:
        return seed_ok
    if not isinstance(options, dict) or set(options) != {"reset_mask"}:
        return False
    mask = options["reset_mask"]
    return (seed is None and isinstance(mask, np.ndarray) and mask.dtype == np.bool_
            and mask.shape == (NUM_ENVS,) and bool(mask.any()))


@SETTINGS
@given(seed=seeds, options=options_st)
def test_reset_with_bad_seed_or_options_raises_and_the_pool_goes_on(sync_env, seed, options):
    env = sync_env
    if valid_reset(seed, options):
        obs, info = env.reset(seed=seed, options=options)
        assert obs.shape == (NUM_ENVS, 4, 84, 84)
    else:
        with pytest.raises((TypeError, ValueError), match="seed|options|reset_mask"):
            env.reset(seed=seed, options=options)
    assert_steps(env)


# -- make() options ---------------------------------------------------------------

#: (low, high) of each int option: config's typed table (whose highs are the
#: layout's limits, e.g. stack_num <= MAX_STACK), except the image sides,
#: which build_config bounds by Breakout's screen (210 x 160).
INT_RANGES = {name: kind[1:] for name, kind in config.OPTION_TYPES.items() if kind[0] is int}
INT_RANGES.update(img_height=(1, 210), img_width=(1, 160))


def valid_option(name: str, value) -> bool:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if name in INT_RANGES:
        lo, hi = INT_RANGES[name]
        if name in ("max_episode_frames", "max_episode_steps") and value is None:
            return True  # no cap
        return is_int and lo <= value <= hi
    if name == "repeat_action_probability":
        return (is_int or isinstance(value, float)) and 0.0 <= value <= 1.0
    if name == "autoreset_mode":
        return isinstance(value, str) and value in config.AUTORESET_MODES
    if name == "obs_layout":
        return isinstance(value, str) and value in config.OBS_LAYOUTS
    if name == "render_mode":
        return value is None or (isinstance(value, str) and value in config.RENDER_MODES)
    if name == "fast_reset":
        return isinstance(value, str) and value in config.FAST_RESET_MODES
    return isinstance(value, bool)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(config.OPTION_DEFAULTS)),
       value=st.one_of(st.integers(-5, 300), st.floats(allow_nan=True), st.booleans(),
                       st.none(), st.text(max_size=10), st.lists(st.integers(), max_size=2),
                       st.sampled_from(config.AUTORESET_MODES),
                       # a 0-d array of a valid name compares elementwise
                       # (a fuzzing pass): refused, not kept as an array
                       st.sampled_from(["auto", "off", "rgb_array", "channels_first",
                                        "same_step"]).map(np.array)))
def test_make_refuses_bad_options_before_any_process_starts(name, value):
    if valid_option(name, value):
        kept = getattr(config.build_config("Breakout", 2, **{name: value}), name)
        # None: no rendering (render_mode), no cap (max_episode_frames, _steps)
        assert kept is not None or name in ("render_mode", *config._CAPS)
        return
    children, segments = {p.pid for p in mp.active_children()}, shm_entries()
    with pytest.raises((TypeError, ValueError), match=name):
        shmatari.make("Breakout", num_envs=2, **{name: value})
    assert {p.pid for p in mp.active_children()} <= children
    assert shm_entries() == segments


@pytest.mark.parametrize("name,value", [("start_method", "fork"), ("batch_order", "fixed")])
def test_a_pool_argument_named_by_a_0d_array_is_refused_naming_it(name, value):
    """A 0-d string array passed ``in`` (elementwise ==), and the pool then
    failed inside its start with ``unhashable type`` (a fuzzing pass)."""
    with pytest.raises(ValueError, match=f"{name} must be one of"):
        config.build_config("Breakout", 2, **{name: np.array(value)})
    kept = getattr(config.build_config("Breakout", 2, **{name: np.str_(value)}), name)
    assert type(kept) is str and kept == value


def test_make_s_own_argument_where_it_is_not_taken_is_named_so():
    """It said "unknown option or argument 'start_timeout' (did you mean
    'start_timeout'?)" (a fuzzing pass)."""
    with pytest.raises(TypeError, match="'start_timeout' is an argument of shmatari.make"):
        config.build_config("Breakout", 2, start_timeout=3)


def test_start_timeout_takes_numpy_numbers_as_every_argument_does():
    with shmatari.make("Pong", 1, start_timeout=np.float32(30)) as env:
        assert env.num_envs == 1
    with pytest.raises(TypeError, match="start_timeout must be a number"):
        shmatari.make("Pong", 1, start_timeout=np.bool_(True))


def test_too_few_actions_get_a_hint_that_works():
    """A new user's pass followed two hints into a second error: "pass env
    ids to address fewer" for a synchronous step (which always steps every
    env), and "pass env_id" for an async step before any reset."""
    with shmatari.make("null", num_envs=4, num_workers=1) as env:
        env.reset()
        with pytest.raises(ValueError, match="a synchronous pool steps every env") as info:
            env.step(np.zeros(3, np.int64))
        assert "env ids" not in str(info.value)
        with pytest.raises(ValueError, match="pass env ids to address fewer"):
            env.send(np.zeros(3, np.int64))  # send can address fewer (with env ids)
        env.send(np.zeros(3, np.int64), np.arange(3))
        env.send(np.zeros(1, np.int64), [3])
        assert env.recv()[0].shape[0] == 4
    with shmatari.make("null", num_envs=4, batch_size=2, num_workers=1) as env:
        with pytest.raises(shmatari.CallOrderError, match=r"reset\(\)") as info:
            env.step(np.zeros(2, np.int64))
        assert "pass env_id" not in str(info.value)
        env.reset()
        assert env.step(np.zeros(2, np.int64))[0].shape[0] == 2
