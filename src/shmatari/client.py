"""The client side of a pool: driving it through its segment.

The client's state machine (which envs are running or ended, the next batch
to take, the state enum and every call-order and range check) is written
once, in C: ``shmatari/client_state.h``, which ``_core.ClientMachine`` wraps
(``_core.Segment`` is one whose transport is the segment; :mod:`shmatari.ray`
makes one whose transport is Ray) and C/C++ clients call directly. This
module keeps what is Python's own: converting the arguments' types
(:func:`send_args`, :func:`check_timeout`, :func:`check_reset_options`),
copying batches out, and the mapping of the C client's status codes to
shmatari's exceptions (:func:`refusal`: a refused call is a
:class:`~shmatari.errors.CallOrderError` whose text names the pool's state
and the call that leaves it). Each public call passes the thread guard and
the usable-pool check once; ``step`` and ``reset`` then run the unguarded
``_send`` / ``_async_reset`` and ``_recv``. The C wait watches the workers'
liveness (every ``SHMATARI_POLL_NS``); the supervisor is asked only when it
reports one gone.

A pool this process owns has a :class:`~shmatari.supervisor.Supervisor`,
which the client asks about its workers while it waits; an attached pool
has none (its server watches the workers).
"""

from __future__ import annotations

import math
import numbers
import functools
import os
import time
from collections.abc import Mapping

import numpy as np

from . import _core, results, seeding
from .errors import (CLOSED, CallOrderError, PoolClosedError, ResourceLimitError,
                     StepTimeoutError, WorkerError, check_usable)

STATE_NAMES = {v: k for k, v in _core.CLIENT_STATES.items()}
#: Seconds a wait sleeps at most before it checks the deadline again.
_POLL = 0.1
#: Seconds ``reset()`` waits by default, in all, for the commands in flight
#: to finish and for the first observations: far above an honest reset
#: (ALE v5's noop_max=30 takes milliseconds; noop_max in the millions of
#: frames takes tens of seconds, and needs ``timeout=None``), so that only a
#: stuck worker (stopped, or looping) reaches it.
RESET_TIMEOUT = 60.0
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
        # a FAILED worker first, with its error text (or the server's record
        # of its death): the others exit as the server stops the pool, and
        # worker 0's "exited" was named for worker 1's death (a new user's pass)
        words = [(w, seg.worker_pid(w), seg.worker_state(w)) for w in range(seg.num_workers)]
        words.sort(key=lambda x: x[2] != _core.WORKER_FAILED)
        for w, pid, state in words:
            gone = state in (_core.WORKER_FAILED, _core.WORKER_EXITED)
            if gone or (pid and not _core.pid_alive(pid)):
                how = {_core.WORKER_FAILED: "failed", _core.WORKER_EXITED: "exited"}
                # read once and checked against the pool's own count: any
                # process that maps the segment may have written them
                begin, end = seg.worker_group(w)
                envs = range(begin, end) if 0 <= begin < end <= seg.num_envs else range(0)
                err = WorkerError.of(f"worker {w}", pid, envs,
                                     how.get(state, "died"), worker=w,
                                     traceback=seg.worker_error(w),
                                     where=f" of the server (pid {seg.header()['owner_pid']})")
                return err, str(err)
    if msg is None:
        _, msg = seg.pool_check()
    broken = msg or _core.status_name(code)
    if code == _core.STATUS["not_shmatari"]:  # words no worker writes (shmatari_check_stall)
        return PoolClosedError(f"the env pool cannot go on: {broken}"), broken
    return PoolClosedError(f"the env pool is gone: {broken}"), broken


def refusal(machine, code: int) -> Exception | None:
    """The exception of a call that the client state machine ``machine``
    (a ``_core.ClientMachine``) refused with status ``code``, in its words:
    CallOrderError (out of order), ValueError (a bad argument); None for
    any other code."""
    if code == _core.ERR_STATE:
        return CallOrderError(machine.client_error)
    if code == _core.ERR_INVALID:
        return ValueError(machine.client_error)
    return None


def send_args(actions, env_id, num_envs: int, batch_size: int, last_ids):
    """Converts ``send(actions, env_id)``'s arguments for the C client, which
    checks their values (ranges, duplicates, counts, the envs' states).

    ``batch_size`` actions without ``env_id`` in a pool with fewer envs per
    batch than envs go to the envs of the last batch received
    (``last_ids``), as the batch-sized ``action_space`` says.

    Returns:
        (actions int32 (n,), env_id int32 (n,) or None: every env).

    Raises:
        TypeError: actions or env ids that are not integers.
        ValueError: not one-dimensional.
        CallOrderError: batch-sized actions, and no batch received yet.
    """
    if env_id is not None:  # the step path's case (a trainer's recv() gave the ids)
        ids = _core.as_int32(env_id, "env_id")
        return _core.as_int32(actions, "actions", ids.size), ids
    if batch_size < num_envs and np.shape(actions) == (batch_size,):
        env_id = last_ids
        if env_id is None:
            raise CallOrderError(
                f"{batch_size} actions without env_id go to the envs of the last "
                f"batch received, and none was: reset() (or async_reset() and recv()) "
                f"first")
    if env_id is None and batch_size < num_envs and np.ndim(actions) == 1 and \
            np.shape(actions)[0] != num_envs:
        raise ValueError(
            f"actions must have shape ({num_envs},) (every env) or ({batch_size},) (the "
            f"envs of the last batch received), got {np.shape(actions)}")
    ids = None if env_id is None else _core.as_int32(env_id, "env_id")
    return _core.as_int32(actions, "actions", num_envs if ids is None else ids.size), ids


def _refuse_other_thread(inside: str, name: str, same_thread: bool = False) -> CallOrderError:
    if same_thread:
        return CallOrderError(
            f"{name}() was called while this thread is inside {inside}() on this pool "
            f"(from a signal handler, say): only close() may be called there; {name}() "
            f"did nothing")
    return CallOrderError(
        f"another thread is inside {inside}() on this pool: a pool is used by one "
        f"thread at a time (give each thread its own pool, or a lock around its "
        f"calls); {name}() did nothing")


def _forked_call(pid: int) -> PoolClosedError:
    """The error of a call made in a process forked from the pool's owner
    (``pid``)."""
    return PoolClosedError(
        f"this pool belongs to process {pid}, which this process was forked "
        f"from: a forked child cannot use it; make its own pool, or attach to a "
        f"served one (shmatari.attach)")


def _closed_call(name: str, error: Exception | None) -> Exception:
    """The error of a call on a pool closed before it came in (``error``
    None: it did nothing), or closed under it by a signal handler in its
    thread, when it failed with ``error`` because the pool was released
    (the CallGuard's ``closed``): the segment's "segment released", or the
    C client's "detached". Any other error is the call's own and is raised
    as it is (a handler's ``env.close(); raise TimeoutError``, a worker's
    death)."""
    if error is None:
        return PoolClosedError(CLOSED)
    released = (isinstance(error, ValueError) and "released" in str(error)) or (
        isinstance(error, CallOrderError) and "detached" in str(error))
    if not released:
        return error
    return PoolClosedError(f"the env pool was closed while {name}() ran (by a signal handler "
                           f"in this thread); nothing more was received")


def _one_thread(method):
    """The per-pool guard of the public calls (as sqlite3's
    ``check_same_thread``, but per call): a second thread calling in while
    one is inside gets CallOrderError at once, and the pool is unchanged; so
    does a call from a signal handler in the thread inside (no public call
    runs another), close() aside. A process forked from the pool's
    owner gets PoolClosedError. The guard is ``_core.CallGuard``: taken and
    given back in C, so that a Ctrl-C cannot leave it held."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        return self._guard.run(name, method, self, args, kwargs)
    name = method.__name__
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
        episode_statistics: add ``info["episode"]`` (False: leave it to
            Gymnasium's ``RecordEpisodeStatistics``, and time nothing).
    """

    def __init__(self, segment, seg, res, *, zero_copy: bool, seed_entropy,
                 supervisor=None, episode_statistics: bool = True):
        self.supervisor = supervisor
        self.closed = False
        self._pid = os.getpid()
        self._guard = _core.CallGuard(_refuse_other_thread, _closed_call, _forked_call)
        # Set by a close() from another thread while this thread is inside a
        # call (_Resources._other_thread_leaves): its wait ends at the next slice.
        self._closing = False
        res.guard, res.stop_calls = self._guard, self._stop_calls
        self.seed_entropy = seed_entropy
        self._seg = seg
        self._zero_copy = zero_copy
        self._episode_statistics = episode_statistics
        self._broken: str | None = None
        # env_id of the last batch received (where batch-sized actions go).
        self._last_ids: np.ndarray | None = None
        # (call, batches taken then): the call ("step", "reset", "recv")
        # whose wait a signal handler's exception (Ctrl-C) ended; None once
        # a reset of every env drops what is in flight. A refusal while no
        # batch has been taken since (by any path: xla() too) says so.
        self._interrupted: tuple[str, int] | None = None
        hdr = seg.header()
        self.num_envs, self.batch_size = hdr["num_envs"], hdr["batch_size"]
        self.num_workers = hdr["num_workers"]
        self.frame_skip = hdr["frame_skip"]
        self.autoreset = AUTORESET_NAMES[hdr["autoreset_mode"]]
        #: ``"fixed"`` or ``"first_ready"`` (layout.h's batch_order, 1.3)
        self.batch_order = ("fixed" if hdr["batch_order"] == _core.BATCH_ORDERS["fixed"]
                            else "first_ready")
        # When each env's episode began (time.perf_counter), for info["episode"]["t"].
        self._episode_start = np.zeros(self.num_envs)
        self.obs_shape = obs_shape = seg.obs_shape
        # Cut to the count the C client read once at open (1..18), which
        # bounds the actions it accepts: never the header's num_actions again.
        self.action_set = seg.client_action_set()
        self.n_actions = len(self.action_set)
        # Worker-written words: checked before use. ALE's actions are 0..17
        # (ale_py.Action).
        bad = [a for a in self.action_set if not 0 <= a < _core.MAX_ACTIONS]
        if self.n_actions == 0 or bad or len(set(self.action_set)) != self.n_actions:
            raise ValueError(
                f"the segment's action set {list(self.action_set)} is not 1 to "
                f"{_core.MAX_ACTIONS} distinct ALE action ids (0..{_core.MAX_ACTIONS - 1}): it "
                f"was written by something other than the pool's workers")
        private = None if supervisor is None else supervisor.action_set
        if private is not None and list(self.action_set) != private:
            # worker 0's own, from its pipe: the segment's was rewritten
            # between its write and this read (an attacker's pass, 2026-12-06)
            raise ValueError(
                f"the segment's action set {list(self.action_set)} is not the one worker 0 "
                f"built ({private}): another process rewrote it while the pool started")
        B = hdr["batch_size"]
        # Same-step pools: each slot also holds the final records (layout.h).
        self._has_final = hdr["slot_final_offset"] != 0
        self._batch_obs_shape = (B,) + obs_shape
        # Zero-copy views. np.frombuffer holds a buffer export on the mapping
        # itself, so that closing the pool cannot unmap it under a view the
        # caller kept (np.ndarray(buffer=...) holds none: reading such a view
        # after close() crashed); and they come from a read-only view of the
        # mapping, so that nobody can make them writable.
        # The views live in ``res.views`` only, never in an attribute of
        # this client: close() drops them there, and the mapping can then be
        # unmapped at once (a view of the client's own, kept while the env
        # object lived, held the mapping and its file open after close()).
        readonly = segment.buf.toreadonly()
        count = int(np.prod(self._batch_obs_shape))
        self._res = res
        res.views["ring_obs"] = [
            np.frombuffer(readonly, np.uint8, count, seg.slot_offset(s) + hdr["slot_obs_offset"])
            .reshape(self._batch_obs_shape)
            for s in range(hdr["ring_depth"])]
        # render_mode: each env's palette and last screen (layout.h's render area)
        self.screen_shape = (hdr["screen_height"], hdr["screen_width"])
        if hdr["render_offset"]:
            res.views["render"] = np.frombuffer(
                readonly, np.uint8, self.num_envs * hdr["render_env_bytes"],
                hdr["render_offset"]).reshape(self.num_envs, hdr["render_env_bytes"])
        # ram_info: each env's console RAM (layout.h's RAM area, ABI 1.3)
        self._has_ram = bool(hdr.get("ram_offset"))
        if self._has_ram:
            res.views["ram"] = np.frombuffer(
                readonly, np.uint8, self.num_envs * hdr["ram_bytes"],
                hdr["ram_offset"]).reshape(self.num_envs, hdr["ram_bytes"])
        readonly.release()

    @property
    def _pending(self) -> int:
        """Envs with a command whose result was not returned (the C client's count)."""
        return self._seg.pending

    @property
    def state(self) -> str:
        """The client's state, a key of ``_core.CLIENT_STATES``."""
        return STATE_NAMES[self._seg.client_state]

    def _break(self, why: str) -> None:
        self._broken = why
        self._seg.client_break()

    def _raise_for(self, code: int, msg: str | None = None) -> None:
        """Raises the error that a failed wait's status ``code`` stands for,
        and marks the pool broken."""
        err, broken = status_error(self._seg, code, msg)
        self._break(broken)
        raise err

    def _closed_under(self, what: str) -> None:
        """PoolClosedError if close() ran while a call was under way (``what``:
        "recv() waited"): from another thread (``_stop_calls``), or from a
        signal handler in this thread (the handler runs between the wait's
        slices, and the call then found its client detached: a
        CallOrderError saying "attach() first" until 2026-12-05)."""
        if self._closing:
            raise PoolClosedError(f"the env pool was closed by another thread while {what}; "
                                  f"nothing more was received")
        if self.closed or self._res.seg is None:
            raise PoolClosedError(f"the env pool was closed while {what} (by a signal handler "
                                  f"in this thread, or at exit); nothing more was received")

    def _refused(self, code: int) -> None:
        """Raises what a refused client call's status ``code`` stands for:
        :func:`refusal`'s error, or the liveness error; PoolClosedError if
        the pool was closed while the call ran (``_closed_under``)."""
        self._closed_under("the call ran")
        err = refusal(self._seg, code)
        if err is not None and code == _core.ERR_STATE and self._interrupted is not None \
                and self._interrupted[1] == self._seg.taken:
            # "env 0 is still running" puzzled a synchronous pool's user who
            # never called send() (a newcomer's pass, 2026-12-05)
            err = CallOrderError(f"{err}; the last {self._interrupted[0]}() was interrupted "
                                 f"while it waited, and no batch has been taken since")
        if err is not None:
            raise err
        self._raise_for(code, self._seg.client_error or None)

    def check_workers(self, restart: bool = False) -> None:
        """The owner's liveness check (see :meth:`Supervisor.check`); a
        WorkerError marks the pool broken."""
        try:
            self.supervisor.check(restart)
        except BaseException as err:
            if self._closing and isinstance(err, Exception) and \
                    not isinstance(err, (PoolClosedError, MemoryError)):
                # close() from another thread under a restart: what the
                # restart met once the close stopped the workers (their exits,
                # the emptied process list) is the close's doing (a bare
                # IndexError until 2026-12-06: a reviewer's pass)
                raise PoolClosedError("the env pool was closed by another thread while a "
                                      "dead worker was being replaced; nothing more was "
                                      "received") from None
            if isinstance(err, (WorkerError, ResourceLimitError)):
                self._break(str(err))
            elif self.supervisor.interrupted_start:
                # a Ctrl-C while the zygote had not answered for a replacement
                # (supervisor._spawn_from_zygote): it may still fork it, unrecorded
                self._break(self.supervisor.interrupted_start)
            raise

    def _stop_calls(self) -> None:
        """close() from another thread: the call waiting here raises
        PoolClosedError within a wait slice (``_POLL``) instead of waiting on,
        a reset's drain for the commands in flight included (inside C: the
        segment's ``stop_waits``)."""
        self._closing = True
        self._seg.stop_waits()

    def _wait_failed(self, code: int) -> None:
        """After a wait that did not return a batch: returns to wait again
        (a timeout, a signal, a dead worker replaced) or raises what broke
        the pool."""
        if code == _core.STATUS["not_shmatari"]:
            # a batch that no worker will fill (shmatari_check_stall), in the
            # wait's words; the C client is broken: no worker is replaced
            self._raise_for(code, self._seg.client_error)
        if self.supervisor is not None:
            # The owner knows its workers' exit codes: WorkerError names them,
            # or with restart_workers the dead are replaced and the wait goes on.
            self.check_workers(self.supervisor.config.restart_workers)
            if code == _core.STATUS["worker"]:
                return
        if code in (_core.ERR_TIMEOUT, _core.ERR_INTERRUPTED):
            return
        if code == _core.STATUS["closed"] and self.supervisor is not None and \
                not self._closing:
            # The owner is this process, and it is not closing: the C text
            # named this process as the one closing the pool (an attacker's
            # pass, 2026-12-06, under restart_workers).
            self._raise_for(code, f"the pool's state word, pool_state, reads CLOSING, but its "
                                  f"owner (this process, pid {os.getpid()}) is not closing it: "
                                  f"another process wrote pool_state")
        self._raise_for(code)

    def _usable(self) -> None:
        # res.seg is None once the pool's finalizer has run without close():
        # at interpreter exit, before a __del__ or an atexit handler that
        # still steps the pool (the C client then said "detached: attach()")
        check_usable(self.closed or self._res.seg is None, self._broken)

    def _check_owner(self) -> None:
        """PoolClosedError in a process forked from the pool's owner (as the
        guard of the public calls checks, in C)."""
        if os.getpid() != self._pid:
            raise _forked_call(self._pid)

    def _view(self, name: str):
        """The named view over the segment (``res.views``); PoolClosedError
        once close() has dropped it (a close() from another thread, or
        a forked child's, whose resources forgot the parent's pool)."""
        view = self._res.views.get(name)
        if view is None:
            raise PoolClosedError(CLOSED)
        return view

    # -- the async API -----------------------------------------------------------
    @_one_thread
    def send(self, actions, env_id=None) -> None:
        """See :meth:`ShmVectorEnv.send`."""
        if self.closed or self._broken or self._res.seg is None:
            self._usable()  # raises
        self._send(actions, env_id)

    def _send(self, actions, env_id, step: bool = False) -> None:
        acts, ids = send_args(actions, env_id, self.num_envs, self.batch_size, self._last_ids)
        code = self._seg.client_send(acts, ids, step)
        if code != _core.OK:
            try:
                self._refused(code)
            except CallOrderError as err:
                if env_id is None and ids is None and self.batch_size < self.num_envs \
                        and "is still running" in str(err):
                    # num_envs actions without env_id: every env, where an
                    # async loop meant the batch's (a client-code pass:
                    # CleanRL's loop passes info["env_id"])
                    raise CallOrderError(
                        f"{err}; {acts.size} actions without env_id go to every env: to "
                        f"send to the envs of a batch received, pass its "
                        f"info['env_id']") from None
                raise

    @_one_thread
    def async_reset(self, seed: int | None = None, options: dict | None = None,
                    timeout: float | None = RESET_TIMEOUT) -> None:
        """See :meth:`ShmVectorEnv.async_reset`."""
        timeout = check_timeout(timeout)
        self._usable()
        self._async_reset(seed, options, timeout)

    def _async_reset(self, seed, options, timeout) -> None:
        cmd, mask, seed = reset_args(seed, options, self.num_envs)
        # The seed words are written by the C call once nothing is in flight
        # (shmatari_reseed): a reseed still in flight reads them when served.
        # Until 2026-12-05 they were written first, and put back when the
        # wait timed out: reseeds served during it took the new seed (an
        # attacker's pass).
        words = None if seed is None else seeding.seed_to_words(seed)
        deadline = None if timeout is None else _now() + timeout
        while True:
            code = self._seg.client_reset(cmd, mask, math.inf if deadline is None
                                          else max(0.0, deadline - _now()), words)
            if code != _core.STATUS["worker"] or self.supervisor is None or \
                    not self.supervisor.dead_workers():
                break
            # A worker died with commands in flight (after a Ctrl-C in step()
            # or recv(), or a send() without recv()): the owner names it
            # (WorkerError, its exit code), or with restart_workers replaces
            # it, and the drain goes on, as recv()'s wait does (_wait_failed).
            # Until 2026-12-05 reset() raised the attached pool's WorkerError
            # here ("of the server", no exit code) and broke the pool.
            self.check_workers(self.supervisor.config.restart_workers)
        if code != _core.OK:
            self._closed_under("the reset waited")
        if code == _core.ERR_TIMEOUT:
            raise StepTimeoutError(
                f"reset() waited {timeout:g} s for the commands in flight to finish, and "
                f"{self._stuck()}; nothing was dropped or reset: reset() again to wait "
                f"longer (timeout=None: no limit), or close() the pool")
        if code != _core.OK:
            self._refused(code)
        if seed is not None:
            self.seed_entropy = seed
            if self.supervisor is not None:  # what a replacement worker seeds with
                self.supervisor.pool_seed = seed
        if mask is None:
            self._interrupted = None  # what was in flight is dropped

    def _stuck(self) -> str:
        """Which workers have commands not answered, by index, pid and envs
        (``Segment.unanswered``, the C client's words): what a timeout names
        (alive, since a dead worker is reported as one)."""
        return self._seg.unanswered()

    @_one_thread
    def recv(self, timeout: float | None = None):
        """See :meth:`ShmVectorEnv.recv`."""
        if self.closed or self._broken or self._res.seg is None:
            self._usable()  # raises
        return self._recv(None if timeout is None else check_timeout(timeout))

    def _recv(self, timeout: float | None, caller: str = "recv"):
        seg = self._seg
        deadline = None if timeout is None else _now() + timeout
        # In a first-ready pool, a worker that holds commands and answers
        # none for `timeout` ends the wait too (shmatari_check_progress):
        # the other workers' results kept filling batches, and a stopped
        # worker's envs were dropped from training with no error until
        # 2026-12-06 (an attacker's pass). timeout=0 polls: no such limit.
        stall = timeout if timeout else -1.0
        while True:
            try:
                code = seg.client_next_batch(_POLL if deadline is None
                                             else max(0.0, min(_POLL, deadline - _now())),
                                             stall)
            except BaseException:  # a signal handler's: nothing taken, commands in flight
                self._interrupted = (caller, seg.taken)
                raise
            if code == _core.OK:
                break
            if code == _core.ERR_TIMEOUT and seg.client_stalled:
                again = "again " if caller == "recv" else ""
                sent = "" if caller == "recv" else "its actions were sent, "
                raise StepTimeoutError(
                    f"{caller}(timeout={timeout:g}): {seg.client_error}: "
                    f"{seg.unanswered(seg.client_stalled_worker)}; {sent}nothing was taken "
                    f"and the pool is unchanged: recv() {again}to go on waiting (the "
                    f"worker's silence is counted afresh, and a first-ready pool hands out "
                    f"the other workers' results meanwhile), or close() the pool (reset() "
                    f"waits for the commands in flight first)")
            self._closed_under(f"{caller}() waited")
            if code == _core.ERR_STATE:
                self._refused(code)  # the refusal, in the C client's words
            self._wait_failed(code)
            if deadline is not None and _now() >= deadline:
                why = (f"{caller}(timeout=0): no batch of {self.batch_size} result(s) is "
                       f"ready yet" if timeout == 0 else
                       f"{caller}() got no batch of {self.batch_size} result(s) within "
                       f"{timeout:g} s with every worker alive: {self._stuck()}")
                sent = "" if caller == "recv" else "its actions were sent and "
                again = "again " if caller == "recv" else ""
                raise StepTimeoutError(f"{why}; {sent}the pool is unchanged: recv() {again}to "
                                       f"go on waiting, or reset() to drop the commands in "
                                       f"flight")
        batch = seg.taken
        final = final_obs = None
        try:
            if self._zero_copy:
                f, bits = seg.collect(batch, None)
                ring = self._view("ring_obs")
                obs = ring[batch % len(ring)]
            else:
                obs = np.empty(self._batch_obs_shape, np.uint8)
                f, bits = seg.collect(batch, obs)
            if self._has_final and bits & _core.BATCH_FINAL:
                final_obs = np.empty(self._batch_obs_shape, np.uint8)
                final = seg.collect(batch, final_obs, True, f["env_id"], f["_final"])[0]
        except ValueError as err:
            # rows that another process wrote, found once the batch was
            # taken: its results cannot be handed out, and the client's
            # state machine has counted them answered; the pool is broken,
            # as for a batch no worker fills (a ValueError that left the
            # pool usable and out of step until 2026-12-06: an attacker's pass)
            self._break(str(err))
            raise PoolClosedError(f"the env pool cannot go on: {err}") from None
        seg.client_release()
        self._last_ids = f["env_id"]
        if final is None:
            info = results.batch_info(f, bits, self._episode_statistics)
        else:
            info = results.build_info(f, final, final_obs, bits,
                                      episode_statistics=self._episode_statistics)
        if self._has_ram:  # a copy, taken before anything is sent again
            info["ram"] = self._view("ram")[f["env_id"]]
        if bits and self._episode_statistics:
            self._time_episodes(info, f["env_id"], bits)
        return obs, f["reward"], f["terminated"], f["truncated"], info

    def _time_episodes(self, info: dict, env_id: np.ndarray, bits: int) -> None:
        """``info["episode"]["t"]``: seconds from the reset that began each
        finished episode to the result that ended it, rounded to microseconds,
        as Gymnasium's ``RecordEpisodeStatistics`` reports it. Under
        ``episodic_life`` the statistics are the whole game's, and so is the
        clock: a row that goes on after a lost life is flagged reset too, but
        its ``elapsed_step`` goes on counting; a new game's first row has 0."""
        now = time.perf_counter()
        episode = info.get("episode")
        if episode is not None:
            elapsed = np.round(now - self._episode_start[env_id], 6)
            episode["t"] = np.where(info["_episode"], elapsed, 0.0)
            final_episode = info.get("final_info", {}).get("episode")
            if final_episode is not None:  # same_step: the done step's own info too
                final_episode["t"] = np.where(info["final_info"]["_episode"], elapsed, 0.0)
        if bits & _core.BATCH_RESET:
            new_game = info["reset"] & (info["elapsed_step"] == 0)
            self._episode_start[env_id[new_game]] = now

    def render(self) -> tuple:
        """See :meth:`ShmVectorEnv.render`."""
        self._check_owner()
        self._usable()
        h, w = self.screen_shape
        n = _core.RENDER_PALETTE_BYTES
        out = np.empty((self.num_envs, h, w, 3), np.uint8)
        for i, area in enumerate(self._view("render")):
            np.take(area[:n].reshape(256, 3), area[n:n + h * w].reshape(h, w), axis=0,
                    out=out[i])
        return tuple(out)

    @_one_thread
    def reset(self, seed, options, timeout=RESET_TIMEOUT):
        """See :meth:`ShmVectorEnv.reset`."""
        timeout = check_timeout(timeout)
        self._usable()
        deadline = None if timeout is None else _now() + timeout
        self._async_reset(seed, options, timeout)
        try:
            obs, reward, terminated, truncated, info = self._recv(
                None if deadline is None else max(0.0, deadline - _now()), "reset")
        except StepTimeoutError:
            raise StepTimeoutError(
                f"reset() got no first observations within {timeout:g} s: {self._stuck()}; "
                f"the resets are in flight: recv() collects them, reset() again waits for "
                f"them and resets anew (timeout=None: no limit), or close() the pool") from None
        add_row_results(info, options, reward, terminated, truncated)
        return obs, info

    @_one_thread
    def step(self, actions, env_id, timeout):
        """See :meth:`ShmVectorEnv.step`: one thread guard, one usable check,
        one timeout check; the C client refuses (nothing sent) a step whose
        wait could not return."""
        # every argument checked before anything is sent
        timeout = None if timeout is None else check_timeout(timeout)
        if self.closed or self._broken or self._res.seg is None:
            self._usable()  # raises
        self._send(actions, env_id, step=True)
        return self._recv(timeout, "step")


def add_row_results(info: dict, options, reward, terminated, truncated) -> None:
    """For a masked reset (``options`` holds a ``reset_mask``; checked
    already), puts each row's ``reward``, ``terminated`` and ``truncated``
    into ``info`` under those names: the rows of envs that were running are
    their step results, which ``reset()``'s ``(obs, info)`` had no place for
    (0 and False for the envs reset and for those that only republished
    their observation, ended or not). Without them an env that ended in such
    a row was known to have ended only when ``send()`` to it was refused (a
    newcomer's pass, 2026-12-05). Nothing for a reset without a mask."""
    if options is not None and options.get("reset_mask") is not None:
        info["reward"], info["terminated"], info["truncated"] = reward, terminated, truncated


def reset_args(seed, options, num_envs: int):
    """Converts ``reset(seed, options)``'s arguments for the C client
    (:func:`check_reset_options`, ``seeding.check_seed``).

    Returns:
        (cmd, mask, seed): ``CMD_RESET``, or ``CMD_RESEED`` with a seed; the
        reset mask as uint8, shape (num_envs,), or None (every env); the
        checked seed or None.

    Raises:
        As :func:`check_reset_options` and ``seeding.check_seed``.
    """
    mask = check_reset_options(seed, options, num_envs)
    if seed is not None:
        return _core.CMD_RESEED, None, seeding.check_seed(seed)
    return _core.CMD_RESET, None if mask is None else mask.view(np.uint8), None


def check_reset_options(seed, options, num_envs: int) -> np.ndarray | None:
    """Validates ``reset(seed, options)`` of a pool of ``num_envs`` envs (local
    or :mod:`shmatari.ray`): the only option is ``reset_mask``, a bool array of
    shape (num_envs,) with at least one True, not combined with a seed.

    Returns:
        np.ndarray | None: the mask (C-contiguous), or None for every env.

    Raises:
        TypeError: options is not a mapping, or the mask not a bool array.
        ValueError: another option, a wrong shape, no True, or a seed with a mask.
    """
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
    if mask.shape != (num_envs,):
        raise ValueError(f"options['reset_mask'] must have shape ({num_envs},), "
                         f"got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"options['reset_mask'] must have dtype bool, got {mask.dtype}")
    if not mask.any():
        raise ValueError("options['reset_mask'] must hold at least one True value")
    if seed is not None:
        raise ValueError("reset(seed=...) re-derives every env from the seed; it cannot "
                         "be combined with options['reset_mask']")
    return np.ascontiguousarray(mask)


def check_timeout(timeout) -> float | None:
    """Validates a ``timeout`` argument: None (no limit) or seconds >= 0.

    Raises:
        TypeError: not a real number (bool and str are refused).
        ValueError: negative or NaN.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be None or a number of seconds, got "
                        f"{type(timeout).__name__} {timeout!r}")
    timeout = float(timeout)
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
    return timeout

