"""The client's state machine (``shmatari_client`` in shmatari.h, wrapped by
``_core.Segment``): every state has a way out, every refusal names the state
and the call that leaves it, every argument is checked before anything is
sent, and the batched spaces hold what one call returns."""

from __future__ import annotations

import signal

import numpy as np
import pytest

import shmatari



def _state(env) -> str:
    return env._client.state


def test_disabled_autoreset_with_ended_and_running_envs_has_a_way_out():
    # The dead end: envs 0 and 2 ended, env 1 running, batch of 2.
    with shmatari.make("Breakout", num_envs=3, batch_size=2, num_workers=1, seed=0,
                       autoreset_mode="disabled", noop_max=0, max_episode_frames=8,
                       repeat_action_probability=0.0) as env:
        for _attempt in range(10):
            # Batches come in whatever order the worker answers: if the last
            # two envs end in one batch (three ended, none running), retry.
            _, info = env.reset()
            env.send([0, 0], info["env_id"])
            ended = set()
            while len(ended) < 2 and env._pending >= 2:
                _, _, term, trunc, info = env.recv()
                for e, d in zip(info["env_id"].tolist(), (term | trunc).tolist()):
                    if d:
                        ended.add(e)
                    elif len(ended) < 2:
                        env.send([0], [e])
            running = np.flatnonzero(env._client._seg.env_flags() & shmatari._core.ENV_RUNNING)
            if len(ended) == 2 and len(running) == 1:
                break
        assert len(ended) == 2 and len(running) == 1 and _state(env) == "partial"
        with pytest.raises(shmatari.CallOrderError, match=r"recv\(\) refused; the pool has 1"):
            env.recv()
        with pytest.raises(shmatari.CallOrderError, match="reset_mask"):
            env.send([0], [sorted(ended)[0]])
        mask = np.zeros(3, bool)
        mask[sorted(ended)] = True
        obs, info = env.reset(options={"reset_mask": mask})  # the way out
        assert obs.shape == (2, 4, 84, 84)
        assert info["reset"].sum() >= 1  # an ended env's first observation came
        # The running env's row is its step's result, flags and reward
        # included (reset() dropped them: a newcomer's pass); a row whose
        # episode ended refuses a send, one that did not takes it.
        for key, dtype in (("reward", np.float32), ("terminated", bool), ("truncated", bool)):
            assert info[key].shape == (2,) and info[key].dtype == dtype, key
        done = info["terminated"] | info["truncated"]
        assert not done[info["reset"]].any() and not info["reward"][info["reset"]].any()
        for e in info["env_id"][~info["reset"] & done]:
            with pytest.raises(shmatari.CallOrderError, match="reset it first"):
                env.send([0], [e])
        seen = set(info["env_id"].tolist())
        fresh = info["env_id"][info["reset"]]  # the running env's row is its step's
        env.send([0] * fresh.size, fresh)
        _, _, _, _, info = env.recv()
        seen |= set(info["env_id"].tolist())
        assert seen == {0, 1, 2}


def test_step_after_send_names_the_real_cause():
    with shmatari.make("Breakout", num_envs=4, batch_size=2, num_workers=1, seed=0) as env:
        _, info = env.reset()
        env.send([0, 0], info["env_id"])
        with pytest.raises(shmatari.CallOrderError) as err:
            env.step([0, 0], info["env_id"])
        text = str(err.value)
        assert "interrupted" not in text
        assert "still running" in text and "recv()" in text and "4 env(s) running" in text


@pytest.mark.parametrize("timeout, exc", [("1", TypeError), (True, TypeError),
                                          (-1, ValueError), (float("nan"), ValueError)])
def test_step_checks_timeout_before_sending(timeout, exc):
    with shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0) as env:
        env.reset()
        with pytest.raises(exc, match="timeout"):
            env.step([0, 0], timeout=timeout)
        assert env._pending == 0 and _state(env) == "idle"  # nothing was sent
        env.step([0, 0])


def test_zero_timeout_polls_and_says_the_pool_is_unchanged():
    with shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0) as env:
        env.reset()
        env.send([0, 0])
        try:
            env.recv(timeout=0)
        except shmatari.StepTimeoutError as err:
            assert "stuck" not in str(err) and "unchanged" in str(err)
            env.recv()
        assert _state(env) == "idle"


@pytest.mark.parametrize("zero_copy", [False, True])
def test_reset_drops_what_an_interrupted_step_left_in_flight(zero_copy):
    with shmatari.make("Breakout", num_envs=4, batch_size=2, num_workers=1, seed=0,
                       zero_copy=zero_copy) as env:
        env.reset()
        # A real interrupt: SIGALRM's handler raises KeyboardInterrupt while
        # recv() waits (retry until one lands during a wait).
        old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
        try:
            for _ in range(200):
                if env._pending < 2:
                    env.send([0] * (4 - env._pending),
                             np.flatnonzero(env._client._seg.env_flags() == 0))
                signal.setitimer(signal.ITIMER_REAL, 0.0002)
                try:
                    env.recv()
                except KeyboardInterrupt:
                    break
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            else:
                pytest.skip("no interrupt landed during a wait")
        finally:
            signal.signal(signal.SIGALRM, old)
        # Wherever it landed (in the wait: nothing changed; after it: the
        # batch was taken and lost), the client is consistent; leave every
        # env with a step in flight, as an interrupted step() does.
        idle = np.flatnonzero(env._client._seg.env_flags() == 0)
        assert env._pending + idle.size == 4
        if idle.size:
            env.send([0] * idle.size, idle)
        assert env._pending == 4 and _state(env) == "waiting"
        obs, info = env.reset()  # drains what is in flight, then resets
        assert obs.shape == (2, 4, 84, 84) and info["reset"].all()
        _, _, _, _, info = env.recv()
        assert info["reset"].all() and _state(env) == "idle"


def test_every_refusal_names_the_state_and_the_call_that_leaves_it():
    with shmatari.make("Breakout", num_envs=4, batch_size=2, num_workers=1, seed=0) as env:
        texts = []
        for call in (lambda: env.send([0, 0], [0, 1]), env.recv,
                     lambda: env.step([0], [0])):
            with pytest.raises(shmatari.CallOrderError) as err:
                call()
            texts.append(str(err.value))
        env.reset()
        running = int(np.flatnonzero(env._client._seg.env_flags())[0])
        for call in (lambda: env.send([0], [running]),
                     lambda: env.reset(options={"reset_mask": np.ones(4, bool)})):
            with pytest.raises(shmatari.CallOrderError) as err:
                call()
            texts.append(str(err.value))
        assert len(texts) == 5
        for text in texts:
            assert "the pool" in text and ("leaves that state" in text
                                           or "leave that state" in text), text


def test_async_spaces_hold_what_is_returned():
    with shmatari.make("Breakout", num_envs=4, batch_size=2, num_workers=1, seed=0) as env:
        assert env.single_observation_space.shape == (4, 84, 84)
        assert env.observation_space.shape == (2, 4, 84, 84)
        assert env.action_space.shape == (2,) and env.single_action_space.n == 4
        obs, info = env.reset()
        assert env.observation_space.contains(obs)
        for _ in range(5):
            obs, _, _, _, info = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs)
        env.send(env.action_space.sample(), info["env_id"])
        obs, *_ = env.recv()
        assert env.observation_space.contains(obs)


def test_step_without_env_id_steps_the_last_batch_only_while_it_waits():
    """README: ``env.step(env.action_space.sample())`` in an async pool steps
    the envs of the last batch received, provided none of them was sent an
    action since; otherwise CallOrderError, and nothing was sent."""
    with shmatari.make("Breakout", num_envs=4, batch_size=2, num_workers=1, seed=0) as env:
        env.async_reset()
        with pytest.raises(shmatari.CallOrderError, match="none was"):
            env.step(env.action_space.sample())  # no batch received yet
        *_, info = env.recv()
        *_, info = env.step(env.action_space.sample())  # right after a recv()
        env.send(env.action_space.sample(), info["env_id"])
        with pytest.raises(shmatari.CallOrderError, match="still running"):
            env.step(env.action_space.sample())  # that batch was sent actions
        *_, info = env.recv()
        *_, info = env.step(env.action_space.sample())
        assert info["env_id"].shape == (2,)



    """Interrupts at random points of step() (SIGALRM raising KeyboardInterrupt,
    as Ctrl-C does), each followed by reset(), the documented way on. A
    Python lock taken before the call's ``try`` and given back in its
    ``finally`` was left held by about one interrupt in 25-50, and every
    later call was refused as "another thread is inside"; the guard is now
    taken and given back in C."""
    rng = np.random.default_rng(0)
    with shmatari.make("null", num_envs=4, num_workers=2, seed=0) as env:
        env.reset()
        old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
        interrupts = 0
        try:
            while interrupts < 400:
                try:
                    signal.setitimer(signal.ITIMER_REAL, float(rng.uniform(1e-5, 4e-4)))
                    for _ in range(3):
                        env.step(np.zeros(4, int), timeout=5)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                except KeyboardInterrupt:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    interrupts += 1
                    assert not env._client._guard.held, f"held after interrupt {interrupts}"
                    try:
                        env.reset(timeout=5)
                    except KeyboardInterrupt:  # a late alarm, inside reset()
                        env.reset(timeout=5)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        obs, _, _, _, _ = env.step(np.zeros(4, int), timeout=5)
        assert obs.shape[0] == 4
