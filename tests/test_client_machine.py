"""Hypothesis stateful testing of the client state machine (issue 10, "every
state has a way out"): random sequences of reset / async_reset / masked
resets / send / recv / step / zero timeouts / sends left without a recv (an
interrupted step), on synchronous and asynchronous pools, in all three
autoreset modes, zero_copy on and off, owned and attached pools (and, in
tests/integration/test_ray_pool.py, shmatari.ray pools: a subclass that makes
them).

Invariants:
- a refused call changes nothing (the C client's state, its running count
  and every env's bits are as before);
- the client's state is the one the model predicts, and from it some
  documented call makes progress (the pool is never stuck);
- every returned row matches a replay of the same per-env commands on a
  fresh pool (batch_size 1, same options and seed): env i's trajectory
  depends only on (seed, i, options, its commands).
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import os
import signal

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import shmatari
from shmatari import _core
from shmatari.client import STATE_NAMES
from shmatari.env import ShmVectorEnv

N = 3
SEED = 7
OPTIONS = dict(num_workers=1, max_episode_frames=24, noop_max=3)
#: (batch_size, autoreset_mode, zero_copy, attached): every value of each
#: dimension appears, in 8 pools.
CONFIGS = [
    (N, "next_step", False, False), (2, "next_step", True, False),
    (N, "same_step", True, False), (2, "same_step", False, True),
    (N, "disabled", False, True), (2, "disabled", True, False),
    (2, "next_step", False, True), (N, "next_step", True, True),
]
_pools: dict = {}
_names = itertools.count()
_COMPARED: dict = {}  # rows compared with the replay, by command (a check that checks)


def _close_all():
    for env in _pools.values():
        env.close()
    _pools.clear()


atexit.register(_close_all)


def _pool(batch_size, autoreset, zero_copy, attached):
    key = (batch_size, autoreset, zero_copy, attached)
    if key not in _pools:
        if attached:
            cfg = shmatari.config.build_config("Breakout", N, batch_size=batch_size, seed=SEED,
                                               autoreset_mode=autoreset, **OPTIONS)
            name = f"hm{os.getpid()}x{next(_names)}"
            owner = ShmVectorEnv(cfg, segment_name=_core.segment_name(name), claim=False)
            _pools[key + ("owner",)] = owner
            _pools[key] = shmatari.attach(name, zero_copy=zero_copy)
        else:
            _pools[key] = shmatari.make("Breakout", N, batch_size=batch_size, seed=SEED,
                                        autoreset_mode=autoreset, zero_copy=zero_copy,
                                        **OPTIONS)
    return _pools[key]


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    _close_all()


def _raise_interrupt(*_):
    raise KeyboardInterrupt


def _row(obs, reward, term, trunc, i):
    return (hashlib.blake2b(np.ascontiguousarray(obs[i]).tobytes(), digest_size=8).hexdigest(),
            float(reward[i]), bool(term[i]), bool(trunc[i]))


class ClientMachine(RuleBasedStateMachine):
    """A model of the client: which envs run, which ended (disabled
    autoreset), and each env's commands with the rows they returned.

    A subclass may test other pools: ``CONFIGS`` (its first two items are
    batch_size and autoreset_mode), ``make_pool(*config)`` and ``INTERRUPTIBLE``
    (whether a signal inside recv() leaves the pool as the C wait does)."""

    CONFIGS = CONFIGS
    make_pool = staticmethod(_pool)
    INTERRUPTIBLE = True

    @initialize(data=st.data())
    def start(self, data):
        cfg = data.draw(st.sampled_from(self.CONFIGS), label="config")
        self.cfg = cfg
        self.B, self.autoreset = cfg[0], cfg[1]
        self.env = self.make_pool(*cfg)
        # The client state machine (_core.ClientMachine) the pool drives.
        self.seg = getattr(self.env, "_machine", None) or self.env._client._seg
        self.ended = set()
        # reset(seed) drains what an earlier example left and re-derives
        # every env: each env's log ([cmd, action, row or None]) starts here.
        obs, info = self.env.reset(seed=SEED)
        self.log = {e: [["reseed", 0, None]] for e in range(N)}
        self.running = set(range(N))
        self._take_rows(obs, info["reward"] if "reward" in info else np.zeros(self.B, np.float32),
                        np.zeros(self.B, bool), np.zeros(self.B, bool), info)

    # -- bookkeeping ------------------------------------------------------------

    def _snapshot(self):
        return (self.seg.client_state, self.seg.pending, self.seg.env_flags().tolist())

    def _refused(self, call, exc=shmatari.CallOrderError):
        before = self._snapshot()
        with pytest.raises(exc) as err:
            call()
        assert self._snapshot() == before, f"a refused call changed the client: {err.value}"
        if exc is shmatari.CallOrderError:
            # the way out: the call that leaves the state, or, for an env that
            # ended under autoreset_mode='disabled', the masked reset (13b9845)
            assert "leave" in str(err.value) or (
                "autoreset_mode is 'disabled': reset it first with" in str(err.value)), \
                str(err.value)

    def _take_rows(self, obs, reward, term, trunc, info):
        ids = info["env_id"].tolist()
        assert len(ids) == self.B
        for i, e in enumerate(ids):
            assert e in self.running, f"a row for env {e}, which was not running"
            self.running.discard(e)
            cmd = self.log[e][-1]
            assert cmd[2] is None
            cmd[2] = _row(obs, reward, term, trunc, i)
            if self.autoreset == "disabled" and cmd[0] == "step":
                if term[i] or trunc[i]:
                    self.ended.add(e)
                else:
                    self.ended.discard(e)

    def _recv(self, result):
        self._take_rows(*result)

    def _idle(self):
        return sorted(set(range(N)) - self.running)

    def _sendable(self):
        return [e for e in self._idle() if e not in self.ended]

    def _post(self, envs, cmd, actions=None):
        for k, e in enumerate(envs):
            self.log[e].append([cmd, 0 if actions is None else int(actions[k]), None])
            self.running.add(e)

    def _drop_in_flight(self):
        for e in list(self.running):
            self.log[e][-1][2] = "dropped"  # a drain ran the command, its row is gone
        self.running.clear()

    # -- rules ------------------------------------------------------------------
    @rule()
    def reset(self):
        self._drop_in_flight()
        self.ended.clear()
        result = self.env.reset()
        self._post(range(N), "reset")
        obs, info = result
        self._take_rows(obs, np.zeros(self.B, np.float32), np.zeros(self.B, bool),
                        np.zeros(self.B, bool), info)

    @rule()
    def async_reset(self):
        self._drop_in_flight()
        self.ended.clear()
        self.env.async_reset()
        self._post(range(N), "reset")

    @rule(data=st.data())
    def masked_reset(self, data):
        mask = np.array(data.draw(st.lists(st.booleans(), min_size=N, max_size=N)))
        if not mask.any():
            self._refused(lambda: self.env.async_reset(options={"reset_mask": mask}), ValueError)
            return
        if self.running & set(np.flatnonzero(mask).tolist()):
            self._refused(lambda: self.env.async_reset(options={"reset_mask": mask}))
            return
        self.env.async_reset(options={"reset_mask": mask})
        idle = self._idle()
        masked = [e for e in idle if mask[e]]
        self.ended -= set(masked)
        self._post(masked, "reset")
        self._post([e for e in idle if not mask[e]], "observe")

    @rule(data=st.data())
    def send(self, data):
        sendable = self._sendable()
        # The draws do not depend on the pool's state (which envs a first-ready
        # batch returned depends on timing, and Hypothesis replays a case by
        # its draws): a list of env ids, taken as they are or mapped onto the
        # sendable envs, and an action per env, sliced.
        picks = data.draw(st.lists(st.integers(0, N - 1), unique=True, max_size=N), label="envs")
        if data.draw(st.booleans(), label="only sendable envs") and sendable:
            envs = list(dict.fromkeys(sendable[i % len(sendable)] for i in picks)) or sendable[:1]
        else:
            envs = picks
        actions = data.draw(st.lists(st.integers(0, 3), min_size=N, max_size=N),
                            label="actions")[:len(envs)]
        if set(envs) & (self.running | self.ended):
            self._refused(lambda: self.env.send(actions, envs))
            return
        self.env.send(actions, envs)
        self._post(envs, "step", actions)

    @rule()
    def recv(self):
        if len(self.running) < self.B:
            self._refused(self.env.recv)
            return
        self._recv(self.env.recv())

    @rule()
    def recv_without_waiting(self):
        if len(self.running) < self.B:
            self._refused(lambda: self.env.recv(timeout=0))
            return
        before = self._snapshot()
        try:
            result = self.env.recv(timeout=0)
        except shmatari.StepTimeoutError:
            assert self._snapshot() == before
            return
        self._recv(result)

    @rule()
    def interrupted_recv(self):
        """A real interrupt: SIGALRM's handler raises KeyboardInterrupt while
        recv() runs. Inside the C wait nothing changes; once the batch was
        taken, its rows are lost to the caller (as after Ctrl-C), and the
        model follows the client's bits."""
        if not self.INTERRUPTIBLE or len(self.running) < self.B:
            return
        before = self._snapshot()
        old = signal.signal(signal.SIGALRM, _raise_interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.0001)
            try:
                result = self.env.recv()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except KeyboardInterrupt:
            if self._snapshot() != before:
                flags = self.seg.env_flags()
                for e in list(self.running):
                    if not flags[e] & _core.ENV_RUNNING:
                        self.log[e][-1][2] = "dropped"  # taken, then lost to the interrupt
                        self.running.discard(e)
                        if flags[e] & _core.ENV_ENDED:
                            self.ended.add(e)
                        else:
                            self.ended.discard(e)
            return
        finally:
            signal.signal(signal.SIGALRM, old)
        self._recv(result)

    @rule(data=st.data())
    def step(self, data):
        # Drawn first, whatever the state (see send): the same draws on a replay.
        drawn = data.draw(st.lists(st.integers(0, 3), min_size=N, max_size=N), label="actions")
        envs = self._sendable()
        if self.B == N:
            if len(envs) < N:
                self._refused(lambda: self.env.step([0] * N))
                return
        elif len(self.running) + len(envs) < self.B:
            self._refused(lambda: self.env.step([0] * len(envs), envs))
            return
        actions = drawn[:len(envs)]
        if self.B == N:
            result = self.env.step(actions)
        else:
            result = self.env.step(actions, envs)
        self._post(envs, "step", actions)
        self._recv(result)

    @rule()
    def bad_timeout(self):
        self._refused(lambda: self.env.step([0] * N, timeout="1"), TypeError)

    # -- invariants -----------------------------------------------------------------
    @invariant()
    def state_is_the_models(self):
        if not hasattr(self, "seg"):
            return
        pending = len(self.running)
        assert self.seg.pending == pending
        flags = self.seg.env_flags()
        assert set(np.flatnonzero(flags & _core.ENV_RUNNING).tolist()) == self.running
        assert set(np.flatnonzero(flags & _core.ENV_ENDED).tolist()) == self.ended
        want = "idle" if pending == 0 else "partial" if pending < self.B else "waiting"
        assert STATE_NAMES[self.seg.client_state] == want
        # A way out that drops nothing: waiting -> recv(); otherwise send() to
        # an env that may be stepped, or a masked reset of the ended envs
        # (legal while others run); reset() is never refused.
        assert want == "waiting" or self._sendable() or (self.ended - self.running)

    def teardown(self):
        if not hasattr(self, "log"):
            return
        ref = _pool(1, self.autoreset, False, False)
        for e in range(N):
            rows = _replay(ref, e, self.log[e])
            for (cmd, action, got), want in zip(self.log[e], rows):
                if got not in (None, "dropped"):
                    assert got == want, f"env {e}: {cmd} {action} returned {got}, replay {want}"
                    _COMPARED[cmd] = _COMPARED.get(cmd, 0) + 1


def _replay(ref, e, commands):
    """Replays env e's commands on ref (batch_size 1); returns its rows."""
    rows = []
    mask = np.zeros(N, bool)
    mask[e] = True
    for cmd, action, _ in commands:
        if cmd in ("reseed", "reset"):
            if cmd == "reseed":
                ref.async_reset(seed=SEED)
            else:
                ref.async_reset(options={"reset_mask": mask})
            row = None
            for _ in range(N):
                obs, reward, term, trunc, info = ref.recv()
                if info["env_id"][0] == e:
                    row = _row(obs, reward, term, trunc, 0)
            rows.append(row)
        elif cmd == "observe":
            rows.append(rows[-1][:1] + (0.0, False, False) if rows else None)
        else:
            obs, reward, term, trunc, info = ref.step([action], [e])
            rows.append(_row(obs, reward, term, trunc, 0))
    return rows


ClientMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("SHMATARI_MACHINE_EXAMPLES", 20)), stateful_step_count=20,
    deadline=None, suppress_health_check=list(HealthCheck))
test_client_machine = ClientMachine.TestCase


def test_the_machine_compared_rows_of_every_kind():
    # Runs after test_client_machine (file order): its replays compared rows.
    assert {"reseed", "step", "reset"} <= set(_COMPARED), _COMPARED
