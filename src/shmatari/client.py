"""The client side of a pool: driving it through its segment.

Owns the client's state (which envs are running, which ended under
``autoreset_mode="disabled"``, the next batch to take, whether a reset is
due, whether the pool is broken), the checks of every argument of
``send`` / ``recv`` / ``async_reset`` / ``reset`` / ``step``, posting commands
and collecting batches through ``_core.Segment``, and the mapping of the C
client's status codes to shmatari's exceptions.

A pool this process owns has a :class:`~shmatari.supervisor.Supervisor`,
which the client asks about its workers while it waits; an attached pool
has none (its server watches the workers).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Mapping

import numpy as np

from . import _core, results, seeding
from .errors import CallOrderError, PoolClosedError, StepTimeoutError, WorkerError

_IDLE, _PENDING = 0, 1
#: Names of the arrays ``Segment.collect`` returns, in order.
_COLLECTED = tuple(name for name, _ in _core.FIELDS) + ("_reset", "_restarted")
#: Seconds between liveness checks while waiting for a batch.
_POLL = 0.1
_now = time.monotonic
#: The header's autoreset_mode word -> the option's name.
AUTORESET_NAMES = {v: k for k, v in _core.AUTORESET_MODES.items()}


def status_error(seg, code: int, msg: str | None = None):
    """The error that a failed wait's status ``code`` stands for.

    Returns:
        (exception, broken): the exception to raise and the text that marks
        the pool broken.
    """
    if code == _core.STATUS["worker"]:
        for w in range(seg.num_workers):
            pid = seg.worker_pid(w)
            failed = seg.worker_state(w) == _core.WORKER_FAILED
            if failed or (pid and not _core.pid_alive(pid)):
                group = range(*seg.worker_group(w))
                text = seg.worker_error(w)
                how = "failed" if failed else "died"
                msg = (f"worker {w} (pid {pid}, envs {group.start}..{group.stop - 1}) "
                       f"of the server (pid {seg.header()['owner_pid']}) {how}")
                if text:
                    msg += "\n--- worker traceback ---\n" + text.rstrip()
                return WorkerError(msg, worker=w, env_ids=group, exitcode=None,
                                   worker_traceback=text), msg
    if msg is None:
        _, msg = seg.pool_check()
    broken = msg or _core.status_name(code)
    return PoolClosedError(f"the env pool is gone: {broken}"), broken


def _one_thread(method):
    """The per-pool guard of the public calls (as sqlite3's
    ``check_same_thread``, but per call): a second thread calling in while
    one is inside gets CallOrderError at once, and the pool is unchanged; the
    same thread may nest (reset -> recv). A process forked from the pool's
    owner gets PoolClosedError."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        if os.getpid() != self._pid:
            raise PoolClosedError(
                f"this pool belongs to process {self._pid}, which this process was forked "
                f"from: a forked child cannot use it; make its own pool, or attach to a "
                f"served one (shmatari.attach)")
        me = threading.get_ident()
        if not self._guard.acquire(blocking=False):
            if self._guard_thread == me:
                return method(self, *args, **kwargs)
            raise CallOrderError(
                f"another thread is inside {self._guard_call}() on this pool: a pool is used "
                f"by one thread at a time (give each thread its own pool, or a lock around "
                f"its calls); {method.__name__}() did nothing")
        self._guard_thread, self._guard_call = me, method.__name__
        try:
            return method(self, *args, **kwargs)
        finally:
            self._guard_thread = None
            self._guard.release()
    return guarded


class Client:
    """This process's end of a pool's segment: one per pool, used by one
    thread at a time. :class:`~shmatari.env.ShmVectorEnv` documents the calls.

    Args:
        segment: the mapped segment (``SharedMemory``).
        seg: the ``_core.Segment`` over it, with this process's client claim.
        res: the pool's resources (zero-copy views are recorded there).
        zero_copy: hand out observations as read-only views into the ring.
        seed_entropy: the pool's seed.
        supervisor: the owner's supervisor, or None for an attached pool.
    """

    def __init__(self, segment, seg, res, *, zero_copy: bool, seed_entropy,
                 supervisor=None):
        self.supervisor = supervisor
        self.closed = False
        self._pid = os.getpid()
        self._guard, self._guard_thread, self._guard_call = threading.Lock(), None, ""
        self.seed_entropy = seed_entropy
        self._seg = seg
        self._zero_copy = zero_copy
        self._broken: str | None = None
        self._pending = 0
        self._next_check = 0.0
        self._needs_reset = True
        hdr = seg.header()
        self.num_envs, self.batch_size = hdr["num_envs"], hdr["batch_size"]
        self.num_workers = hdr["num_workers"]
        self.autoreset = AUTORESET_NAMES[hdr["autoreset_mode"]]
        self._state = np.zeros(self.num_envs, np.int8)
        # autoreset_mode="disabled": envs whose last step ended an episode
        self._done = np.zeros(self.num_envs, bool)
        # When each env's episode began (time.perf_counter), for info["episode"]["t"].
        self._episode_start = np.zeros(self.num_envs)
        self._taken = hdr["consumed_batches"]
        obs_shape = (hdr["stack_num"], hdr["img_height"], hdr["img_width"])
        if hdr["channels"] != 1:
            obs_shape += (hdr["channels"],)
        self.obs_shape = obs_shape
        self.action_set = hdr["action_set"]
        self.n_actions = len(self.action_set)
        B = hdr["batch_size"]
        # Same-step pools: each slot also holds the final records (layout.h).
        self._has_final = hdr["slot_final_offset"] != 0
        self._batch_obs_shape = (B,) + obs_shape
        # Zero-copy views. np.frombuffer holds a buffer export on the mapping
        # itself, so that closing the pool cannot unmap it under a view the
        # caller kept (np.ndarray(buffer=...) holds none: reading such a view
        # after close() crashed); and they come from a read-only view of the
        # mapping, so that nobody can make them writable.
        readonly = segment.buf.toreadonly()
        count = int(np.prod(self._batch_obs_shape))
        self._ring_obs = [
            np.frombuffer(readonly, np.uint8, count, seg.slot_offset(s) + hdr["slot_obs_offset"])
            .reshape(self._batch_obs_shape)
            for s in range(hdr["ring_depth"])]
        readonly.release()
        res.views.append(self._ring_obs)

    def _raise_for(self, code: int, msg: str | None = None) -> None:
        """Raises the error that a failed wait's status ``code`` stands for,
        and marks the pool broken."""
        err, self._broken = status_error(self._seg, code, msg)
        raise err

    def check_workers(self, restart: bool = False) -> None:
        """The owner's liveness check (see :meth:`Supervisor.check`); a
        WorkerError marks the pool broken."""
        try:
            self.supervisor.check(restart)
        except WorkerError as err:
            self._broken = str(err)
            raise

    def _wait_failed(self, code: int) -> None:
        """After a wait that did not return a batch: returns to wait again
        (a timeout, a signal, a dead worker replaced) or raises what broke
        the pool."""
        if self.supervisor is not None:
            # The owner knows its workers' exit codes: WorkerError names them,
            # or with restart_workers the dead are replaced and the wait goes on.
            self.check_workers(self.supervisor.config.restart_workers)
            if code == _core.STATUS["worker"]:
                return
        if code in (_core.ERR_TIMEOUT, _core.ERR_INTERRUPTED):
            return
        self._raise_for(code)

    def _usable(self) -> None:
        if self.closed:
            raise PoolClosedError("the env pool is closed")
        if self._broken:
            raise PoolClosedError(f"the env pool is broken: {self._broken.splitlines()[0]}; "
                                  f"close it and make a new one")

    # -- validation ------------------------------------------------------------
    def _check_env_ids(self, env_ids) -> np.ndarray:
        try:
            ids = np.asarray(env_ids)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"env_id must be a 1-D array of integers, got "
                            f"{type(env_ids).__name__}: {exc}") from exc
        if ids.shape == (0,):
            ids = ids.astype(np.int64)  # ``[]`` is float64: no values to check
        if ids.dtype.kind not in "iu":
            raise TypeError(f"env_id must be integers, got dtype {ids.dtype}")
        if ids.ndim != 1:
            raise ValueError(f"env_id must be 1-D, got shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_envs):
            raise ValueError(f"env_id out of range 0..{self.num_envs - 1}: {ids.tolist()}")
        if np.unique(ids).size != ids.size:
            raise ValueError(f"env_id holds duplicates: {ids.tolist()}")
        busy = ids[self._state[ids] != _IDLE]
        if busy.size:
            raise CallOrderError(f"env(s) {busy.tolist()} are still running: recv() "
                                 f"their results before sending to them again")
        return np.ascontiguousarray(ids, np.uint32)

    # -- the async API -----------------------------------------------------------
    @_one_thread
    def send(self, actions, env_id=None) -> None:
        """See :meth:`ShmVectorEnv.send`."""
        self._usable()
        if self._needs_reset:
            raise CallOrderError("call reset() (or async_reset()) before stepping")
        n_actions = self.n_actions
        if env_id is None:
            acts = _core.check_actions(actions, self.num_envs, n_actions)
            if self._pending:
                busy = np.flatnonzero(self._state != _IDLE).tolist()
                raise CallOrderError(f"env(s) {busy} are still running (a step interrupted "
                                     f"before its results came leaves them so): recv() "
                                     f"their results before sending to them again")
            if self.autoreset == "disabled":
                self._check_not_done(self._done)
            self._seg.post_all(acts, _core.CMD_STEP)
            self._state.fill(_PENDING)
            self._pending = self.num_envs
            return
        env_ids = self._check_env_ids(env_id)
        acts = _core.check_actions(actions, env_ids.size, n_actions)
        self._check_not_done(self._done[env_ids], env_ids)
        self._seg.post(env_ids, acts, _core.CMD_STEP)
        self._state[env_ids] = _PENDING
        self._pending += env_ids.size

    def _check_not_done(self, done: np.ndarray, env_ids: np.ndarray | None = None) -> None:
        if done.any():
            ended = np.flatnonzero(done) if env_ids is None else env_ids[done]
            raise CallOrderError(
                f"env(s) {ended.tolist()} ended an episode and autoreset_mode is "
                f"'disabled': reset them first with reset(options={{'reset_mask': mask}})")

    @_one_thread
    def async_reset(self, seed: int | None = None, options: dict | None = None) -> None:
        """See :meth:`ShmVectorEnv.async_reset`."""
        self._usable()
        mask = self._check_reset_options(seed, options)
        if self._pending:
            raise CallOrderError(f"{self._pending} env(s) are still running: recv() "
                                 f"their results before resetting")
        cmd = _core.CMD_RESET
        if seed is not None:
            seed = seeding.check_seed(seed)
            self._seg.set_seed_words(seeding.seed_to_words(seed))
            self.seed_entropy = seed
            cmd = _core.CMD_RESEED
        if mask is None:
            self._seg.post_all(None, cmd)
            self._done[:] = False
        else:
            # Every env publishes one result per round: the others republish
            # their current observation.
            all_envs = np.arange(self.num_envs, dtype=np.uint32)
            self._seg.post(all_envs[mask], None, cmd)
            self._seg.post(all_envs[~mask], None, _core.CMD_OBSERVE)
            self._done[mask] = False
        self._state.fill(_PENDING)
        self._pending = self.num_envs
        self._needs_reset = False

    def _check_reset_options(self, seed, options) -> np.ndarray | None:
        """Validates reset()'s options; returns the reset mask or None (all envs)."""
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"reset() takes only the option 'reset_mask', got {sorted(options)}")
        if mask is None:
            return None
        if not isinstance(mask, np.ndarray):
            raise TypeError(f"options['reset_mask'] must be a numpy array, got {type(mask).__name__}")
        if mask.shape != (self.num_envs,):
            raise ValueError(f"options['reset_mask'] must have shape ({self.num_envs},), "
                             f"got {mask.shape}")
        if mask.dtype != np.bool_:
            raise TypeError(f"options['reset_mask'] must have dtype bool, got {mask.dtype}")
        if not mask.any():
            raise ValueError("options['reset_mask'] must hold at least one True value")
        if seed is not None:
            raise ValueError("reset(seed=...) re-derives every env from the seed; it cannot "
                             "be combined with options['reset_mask']")
        if self._needs_reset and not mask.all():
            raise CallOrderError("the first reset must reset every env: call reset() "
                                 "without 'reset_mask'")
        return mask.copy()

    @_one_thread
    def recv(self, timeout: float | None = None):
        """See :meth:`ShmVectorEnv.recv`."""
        self._usable()
        if self._pending < self.batch_size:
            raise CallOrderError(f"recv() needs {self.batch_size} running env(s), "
                                 f"{self._pending} are: send() actions first")
        seg, batch = self._seg, self._taken
        if self.supervisor is not None:
            now = _now()
            if now >= self._next_check:
                # Batches may keep coming from the other workers while a dead
                # one's envs wait forever: check every _POLL s, not only when
                # a wait fails.
                self._next_check = now + _POLL
                self.check_workers(self.supervisor.config.restart_workers)
        deadline = None if timeout is None else _now() + timeout
        while True:
            code = seg.wait_batch(batch, _POLL if deadline is None
                                  else max(0.0, min(_POLL, deadline - _now())))
            if code == _core.OK:
                break
            self._wait_failed(code)
            if deadline is not None and _now() >= deadline:
                raise StepTimeoutError(
                    f"recv() waited {timeout:g} s for {self.batch_size} result(s) with every "
                    f"worker alive: one is stuck; the pool is unchanged (recv() again, "
                    f"or close() it)")
        if self._zero_copy:
            views, bits = seg.collect(batch, None)
            obs = self._ring_obs[batch % len(self._ring_obs)]
        else:
            obs = np.empty(self._batch_obs_shape, np.uint8)
            views, bits = seg.collect(batch, obs.reshape(-1))
        f = dict(zip(_COLLECTED, views))
        final = final_obs = None
        if self._has_final and bits & 2:
            final_obs = np.empty(self._batch_obs_shape, np.uint8)
            final = dict(zip(_COLLECTED, seg.collect(batch, final_obs.reshape(-1), True)[0]))
        seg.take_batch(batch)
        self._taken = batch + 1
        env_id = f["env_id"]
        if self.batch_size == self.num_envs:
            self._state.fill(_IDLE)
        else:
            self._state[env_id] = _IDLE
        self._pending -= self.batch_size
        terminated, truncated = f["terminated"], f["truncated"]
        if self.autoreset == "disabled":
            stepped = (f["flags"] & _core.FLAG_OBSERVED) == 0
            self._done[env_id[stepped]] = (terminated | truncated)[stepped]
        info = results.build_info(f, final, final_obs, any_done=bool(bits & 1))
        if bits & 7:
            self._time_episodes(info, env_id, bits)
        return obs, f["reward"], terminated, truncated, info

    def _time_episodes(self, info: dict, env_id: np.ndarray, bits: int) -> None:
        """``info["episode"]["t"]``: seconds from the reset that began each
        finished episode to the result that ended it, rounded to microseconds,
        as Gymnasium's ``RecordEpisodeStatistics`` reports it."""
        now = time.perf_counter()
        episode = info.get("episode")
        if episode is not None:
            episode["t"] = np.where(info["_episode"],
                                    np.round(now - self._episode_start[env_id], 6), 0.0)
        if bits & 4:
            self._episode_start[env_id[info["reset"]]] = now

    @_one_thread
    def reset(self, seed, options):
        """See :meth:`ShmVectorEnv.reset`."""
        self.async_reset(seed=seed, options=options)
        obs, _, _, _, info = self.recv()
        return obs, info

    @_one_thread
    def step(self, actions, env_id, timeout):
        """See :meth:`ShmVectorEnv.step`."""
        if env_id is not None and self._pending + np.size(env_id) < self.batch_size:
            raise CallOrderError(
                f"step() would send {np.size(env_id)} action(s) and then wait for a batch of "
                f"{self.batch_size}, of which only {self._pending + np.size(env_id)} would be "
                f"running: send() to more envs first, or make the pool with a smaller "
                f"batch_size; nothing was sent")
        self.send(actions, env_id)
        return self.recv(timeout)
