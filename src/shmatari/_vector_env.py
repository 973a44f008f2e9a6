"""The pool's class, :class:`ShmVectorEnv`: a Gymnasium vector env over one
shared-memory segment. :func:`shmatari.make` creates one (it owns the
workers) and :func:`shmatari.attach` attaches one to a served pool; both, and
this class, are importable from :mod:`shmatari.env`.

Owns the Gymnasium surface only (the spaces, ``metadata``, the documented
``reset`` / ``step`` / ``send`` / ``recv`` / ``async_reset`` / ``close``), and
wires the two parts a pool is made of:

- :mod:`shmatari.client`: this process's end of the segment (state, argument
  checks, commands and batches, status codes to exceptions);
- :mod:`shmatari.supervisor`: the owner's side (worker processes, liveness,
  restarts, resource lifetime). :func:`make` has one; :func:`attach` does not.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
import weakref

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from . import _core, config as _config, games, seeding, shm
from .client import RESET_TIMEOUT, Client, status_error
from ._vector_extras import VectorExtras
from .errors import AttachError, resource_limit_error
from .spin import spin_policy
from .supervisor import START_TIMEOUT, Supervisor, _Resources

#: Seconds between looks for the segment of a server that is still starting.
_ATTACH_RETRY = 0.02
#: Seconds an attach waits for a missing pool before it says that it waits:
#: a shorter wait that fails says so in its error alone (both said the same
#: thing, the log line through logging's last resort: a newcomer's pass).
_ATTACH_TELL_AFTER = 1.0
#: ``autoreset_mode`` option -> Gymnasium's enum, for ``metadata``.
GYM_AUTORESET = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
                  "disabled": AutoresetMode.DISABLED}
_now = time.monotonic
_log = logging.getLogger("shmatari")


def _name_texts(name: str, seg_name: str) -> tuple[str, str, bool]:
    """For attach's messages: the segment's path (quoted if it holds control
    characters: a name is the caller's text), how to start such a pool
    (``shmatari serve --name`` takes only NAME_RE's names), and whether a
    server could still be starting one (only under such a name: a make()
    pool's automatic name exists from before make() returns)."""
    from .cli import NAME_RE

    path = f"{shm.SHM_DIR}/{seg_name}"
    if not path.isprintable():
        path = repr(path)
    if shm.is_automatic_name(seg_name):
        return path, "an automatic name: that make()'s pool is closed, or never was", False
    bare = seg_name[len(shm.PREFIX):]
    if NAME_RE.fullmatch(bare):
        return path, f"start one with `shmatari serve GAME --name {bare}`", True
    return path, ("no server can start a pool under that name: `shmatari serve --name` "
                  "takes a letter then up to 19 letters, digits, '_' or '-'"), False


class ShmVectorEnv(VectorExtras, gym.vector.VectorEnv):
    """Atari envs in worker processes, stepped through one shared-memory segment.

    Observations are uint8 of shape ``(num_envs, stack_num, img_height,
    img_width)`` (``(..., 3)`` with ``grayscale=False``; with
    ``obs_layout="channels_first"`` as well, ``(num_envs, 3 * stack_num,
    img_height, img_width)``), oldest frame first; in an asynchronous pool
    (``batch_size < num_envs``) ``recv()``'s have ``batch_size`` rows where
    this says ``num_envs``. Rewards are float32 and ``terminated`` /
    ``truncated`` bool, shape ``(num_envs,)`` (``(batch_size,)`` from
    ``recv()`` there). Arrays returned belong to the caller: later steps do
    not change them.

    The ``info`` dict holds, per env (shape ``(num_envs,)`` or ``(batch_size,)``):
    ``env_id`` (int32), ``lives`` (int32), ``raw_reward`` (float32, before
    clipping), ``game_over`` (bool), ``elapsed_step`` (int32, agent steps
    since the game's reset), ``episode_frame_number`` (int64, frames since
    reset, no-ops included), ``frame_number`` (int64, frames since the env
    began, as ALE's ``getFrameNumber``), ``reset`` (bool, the result of a
    reset), ``worker_restarted`` (bool, the env's first result since its
    worker was replaced:
    ``restart_workers``); and, when some env ended a game, ``episode`` =
    ``{"r": float64 raw score, "l": int32 agent steps, "t": float64 seconds,
    "frames": int64}`` with the mask ``_episode`` (bool), as Gymnasium's
    ``RecordEpisodeStatistics`` gives them (``episode_statistics=False``
    leaves them out, for that wrapper). With ``autoreset_mode="same_step"``, done
    steps add ``final_obs`` / ``_final_obs`` and ``final_info`` /
    ``_final_info`` (see :func:`make` and docs/semantics.md).

    A pool is used by one thread at a time (like Gymnasium's vector envs): a
    call from a second thread while one is inside ``reset`` / ``step`` /
    ``send`` / ``recv`` / ``async_reset`` raises CallOrderError at once and
    changes nothing. A process forked from the owner (``os.fork``) gets
    PoolClosedError from the parent's pool. A pool cannot be copied or
    pickled (TypeError): another process uses :func:`attach`.

    Create it with :func:`make` (this process owns the workers and the
    segment, and is the pool's client), or with :func:`attach` (a pool that
    ``shmatari serve`` owns; ``config`` is then None and everything comes
    from the segment's header). It is a context manager; :meth:`close` is
    idempotent, and a pool garbage-collected without it is closed then.
    ``worker_pids`` lists the worker processes' ids (a restarted worker's new
    id replaces the old one).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"]}

    def __init__(self, config: _config.EnvConfig, *, segment_name: str | None = None,
                 claim: bool = True, start_timeout: float | None = None):
        """Creates the pool described by ``config`` (see :func:`make`).

        Args:
            config: a validated configuration.
            segment_name: the segment's name (default: a fresh
                ``shmatari_<pid>_<hex>``).
            claim: make this process the pool's client. ``shmatari serve``
                passes False, so that another process can attach.
            start_timeout: as :func:`make`'s.

        Raises:
            TypeError: ``config`` is not an ``EnvConfig`` (a game name: the
                pool is made by :func:`shmatari.make` or
                :func:`shmatari.attach`).
            FileExistsError: ``segment_name`` is taken.
            SharedMemorySpaceError, ResourceLimitError, WorkerError: as :func:`make`.

        Warns:
            UserWarning: first-ready batches would step worker groups of
                different sizes unevenly (:func:`shmatari.config.uneven_groups`).
        """
        if not isinstance(config, _config.EnvConfig):
            # ShmVectorEnv("Breakout") ended in "'str' object has no
            # attribute 'num_envs'" (a newcomer's pass, 2026-12-06)
            game = repr(config) if isinstance(config, str) else "'Breakout'"
            raise TypeError(f"ShmVectorEnv takes an EnvConfig, got {type(config).__name__} "
                            f"{config!r}: make a pool with shmatari.make({game}, "
                            f"num_envs=...) or attach to a served one with "
                            f"shmatari.attach(name)")
        self.config = config
        self.num_envs = config.num_envs
        self.batch_size = config.batch_size
        self.num_workers = config.num_workers
        self._claimed = claim  # this process is the pool's one client for good
        self._init_lifetime(owner=True)
        try:
            uneven = _config.uneven_groups(config)
            if uneven is not None:  # before any process starts
                warnings.warn(uneven, UserWarning, stacklevel=games._caller_stacklevel())
            self._supervisor = Supervisor(config, self._res, start_timeout)
            seg = self._supervisor.start(segment_name or shm.new_name())
            self._seg = seg
            if claim:  # the claim recorded in the call itself: as in _attach
                code, _, msg = seg.open_client(os.getpid(), START_TIMEOUT, self._res)
                if code != _core.OK:
                    raise status_error(seg, code, msg)[0]
            self._bind(Client(self._res.segment, seg, self._res, zero_copy=config.zero_copy,
                              seed_entropy=config.seed, supervisor=self._supervisor,
                              episode_statistics=config.episode_statistics))
        except BaseException as exc:
            self.close()
            limit = resource_limit_error(exc, "make()") if isinstance(exc, OSError) else None
            if limit is None:
                raise
            raise limit from exc

    @classmethod
    def _attach(cls, name: str, timeout: float, zero_copy: bool) -> "ShmVectorEnv":
        """The client role, without a supervisor: see :func:`attach`."""
        self = cls.__new__(cls)
        self.config = None
        self._supervisor = None
        self._init_lifetime(owner=False)
        self._name = name
        try:
            try:
                seg_name = _core.segment_name(name)
            except UnicodeEncodeError:  # a lone surrogate: no file can have that name
                raise ValueError(f"invalid pool name {name!r}: it is not valid UTF-8 "
                                 f"text") from None
            path, how, may_start = _name_texts(name, seg_name)
            begin = _now()
            deadline, told, zero_since = begin + timeout, False, None
            while True:
                # A server that is still starting has no segment yet (wait for
                # it, up to the timeout), or one whose header is still zero
                # (up to ZERO_HEADER_SECONDS of the timeout).
                try:
                    segment = shm.attach(seg_name, lock_timeout=max(0.0, deadline - _now()))
                except shm.SegmentLockedError as exc:
                    raise AttachError(f"cannot attach to {name!r}: {exc}",
                                      code="timeout") from None
                except shm.UntrustedSegmentError as exc:
                    raise AttachError(f"cannot attach to {name!r}: {exc}",
                                      code="untrusted") from None
                except (shm.NotASegmentError, IsADirectoryError) as exc:
                    raise AttachError(f"cannot attach to {name!r}: {exc}",
                                      code="not_shmatari") from None
                except FileNotFoundError:
                    if not may_start:
                        raise AttachError(
                            f"no shmatari pool named {name!r}: {path} does not exist; {how}",
                            code="not_found") from None
                    if _now() < deadline:
                        if not told and _now() - begin >= _ATTACH_TELL_AFTER:
                            told = True
                            _log.warning(
                                "attach(%r): no pool named %r yet (%s): waiting up to %g s "
                                "in all for a server to start it (%s)", name, name, path,
                                timeout, how)
                        time.sleep(_ATTACH_RETRY)
                        continue
                    raise AttachError(
                        f"no shmatari pool named {name!r}: {path} does not exist (waited "
                        f"{timeout:g} s); {how}", code="not_found") from None
                except OSError as exc:
                    raise AttachError(f"cannot attach to {name!r}: cannot open "
                                      f"{shm.SHM_DIR}/{seg_name}: {exc.strerror or exc}",
                                      code="system") from None
                # read once: the test and the decision use this copy
                zero = segment.size >= 8 and not any(bytes(segment.buf[:8]))
                if zero:
                    zero_since = _now() if zero_since is None else zero_since
                    # a header still being written, but only for as long as C's
                    # attach waits (SHMATARI_ZERO_HEADER_NS): a server publishes
                    # its name with the header written (an attacker's pass: a
                    # file of zeros held this wait for the whole timeout)
                    if _now() < deadline and _now() - zero_since < _core.ZERO_HEADER_SECONDS:
                        shm.close_mapping(segment)
                        time.sleep(_ATTACH_RETRY)
                        continue
                break
            self._res.segment = segment
            if zero:  # the last look's decision, on its copy
                raise AttachError(
                    f"cannot attach to {name!r}: not a shmatari segment: {path}'s magic "
                    f"word stayed 0 for {_now() - zero_since:.1f} s (a server publishes its "
                    f"name with the header written; an attach looks again for "
                    f"{_core.ZERO_HEADER_SECONDS:g} s at most, or until its timeout)",
                    code="not_shmatari")
            code, msg = _core.check_header(segment.buf)
            if code != _core.OK:
                raise AttachError(f"cannot attach to {name!r}: {msg}",
                                  code=_core.status_name(code))
            try:  # checks the header again, and copies its geometry once
                seg = _core.Segment(segment.buf)
            except ValueError as exc:  # rewritten since check_header
                raise AttachError(f"cannot attach to {name!r}: {exc}",
                                  code="not_shmatari") from None
            self._res.seg = seg
            self._seg = seg
            # The claim is recorded (for close()) inside open_client, as it
            # is taken: a Ctrl-C that lands while open_client waits for the
            # previous client's commands is raised there, the claim given
            # back; one raised just after it returns leaves the claim to
            # close(). A call that claimed nothing records nothing: the claim
            # word may hold this pid for another handle of this process (a
            # second attach() here), which close() must leave alone, even if
            # a Ctrl-C lands right after that answer (until 2026-12-04 the
            # pid was recorded before the call and cleared after it).
            code, holder, msg = seg.open_client(os.getpid(), max(0.0, deadline - _now()),
                                                self._res)
            if code != _core.OK:
                raise AttachError(f"cannot attach to {name!r}: {msg}",
                                  code=_core.status_name(code), client_pid=holder or None)
            try:
                seg.refresh_groups()
            except ValueError as exc:
                raise AttachError(f"cannot attach to {name!r}: {exc}",
                                  code="not_shmatari") from None
            try:
                client = Client(segment, seg, self._res, zero_copy=zero_copy,
                                seed_entropy=seeding.words_to_seed(seg.seed_words()))
            except ValueError as exc:  # header words its workers would not write
                raise AttachError(f"cannot attach to {name!r}: {exc}",
                                  code="not_shmatari") from None
            seg.spin_ns, seg.spin_mode = spin_policy(
                client.num_workers, _config.available_cores())["client"]
            self._attached_pids = [seg.worker_pid(w) for w in range(client.num_workers)]
            self._bind(client)
        except BaseException:
            self.close()
            raise
        return self

    def _init_lifetime(self, owner: bool) -> None:
        self.closed = False
        self._client = None
        self._res = _Resources(owner)
        self._finalizer = weakref.finalize(self, self._res.shutdown)

    def _bind(self, client: Client) -> None:
        """Sizes, modes and spaces, all from the segment's header (through the client)."""
        self._client = client
        self.num_envs, self.batch_size = client.num_envs, client.batch_size
        self.batch_order = client.batch_order
        self.num_workers = client.num_workers
        self.metadata = dict(type(self).metadata,
                             autoreset_mode=GYM_AUTORESET[client.autoreset],
                             # ALE emulates 60 frames a second; one frame per step
                             render_fps=max(1, round(60 / client.frame_skip)))
        self.autoreset_mode = self.metadata["autoreset_mode"]
        self.render_mode = "rgb_array" if client.screen_shape[0] else None
        self.action_set = client.action_set
        # The batched spaces hold what one call returns and takes: batch_size
        # envs (all of them in a synchronous pool), as ale-py's AtariVectorEnv
        # batches its spaces in async mode; so observation_space.contains(obs)
        # holds for reset()/recv() results and step(action_space.sample())
        # works.
        self._single_action_space = gym.spaces.Discrete(client.n_actions)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space,
                                                         self.batch_size)
        self._single_observation_space = gym.spaces.Box(0, 255, client.obs_shape, np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              self.batch_size)

    @property
    def single_action_space(self) -> gym.spaces.Discrete:
        """One env's action space: ``Discrete(n)``, n the game's actions
        (minimal set unless ``full_action_space``). Read-only, as EnvPool's."""
        return self._single_action_space

    @single_action_space.setter
    def single_action_space(self, space) -> None:
        self._refuse_space("single_action_space", space, "action_space")

    @property
    def single_observation_space(self) -> gym.spaces.Box:
        """One env's observation space: ``Box(0, 255, obs_shape, uint8)``.
        Read-only, as EnvPool's."""
        return self._single_observation_space

    @single_observation_space.setter
    def single_observation_space(self, space) -> None:
        self._refuse_space("single_observation_space", space, "observation_space")

    def _refuse_space(self, name: str, space, batched: str) -> None:
        """The spaces follow the segment: assigning the same space is a
        no-op, anything else (CleanRL's EnvPool scripts assign the batched
        space, which is one env's in EnvPool) raises AttributeError."""
        if space == getattr(self, name):
            return
        raise AttributeError(
            f"{name} is one env's space ({getattr(self, name)}) and cannot be set; "
            f"make()'s {batched} is Gymnasium's batched space ({getattr(self, batched)}), "
            f"not one env's as in EnvPool: drop the assignment, or use "
            f"shmatari.envpool.make(...) for a script written for EnvPool (docs/migration.md)")

    @property
    def seed_entropy(self):
        """The pool's seed (the last ``reset(seed=...)``, else :func:`make`'s)."""
        return self._client.seed_entropy

    # Gymnasium's VectorEnv.np_random / np_random_seed: its reset(seed=...)
    # seeds them (seeding.np_random(seed)), which this pool's reset did not:
    # after reset(seed=0) they were random (a Gymnasium-API pass, 2026-12-07).
    # Here they follow the pool's seed, make()'s or the last reset's; the
    # envs' own streams never draw from them.
    @property
    def np_random_seed(self) -> int:
        """The seed of :attr:`np_random`: the pool's seed (:attr:`seed_entropy`),
        as Gymnasium's ``reset(seed=...)`` sets it; -1 after ``np_random``
        was assigned, as Gymnasium's."""
        self._follow_pool_seed()
        return self._np_random_seed

    @property
    def np_random(self) -> np.random.Generator:
        """Gymnasium's vector-level generator, ``gymnasium.utils.seeding.np_random``
        of the pool's seed (anew at each ``reset(seed=...)``): for the
        trainer's own draws; the envs' streams do not use it."""
        self._follow_pool_seed()
        return self._np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._np_random, self._np_random_seed = value, -1
        self._np_random_from = self.seed_entropy

    def _follow_pool_seed(self) -> None:
        seed = self.seed_entropy
        if getattr(self, "_np_random_from", None) != seed or self._np_random is None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(int(seed))
            self._np_random_from = seed

    @property
    def worker_pids(self) -> list[int]:
        """The worker processes' ids (a restarted worker's new id replaces the old one)."""
        if self._supervisor is not None:
            return self._supervisor.worker_pids
        return self._attached_pids

    @property
    def _pending(self) -> int:
        """How many envs are running (sent to, results not yet taken)."""
        return self._client._pending

    def _check_workers(self, restart: bool = False) -> None:
        """The owner's liveness check: raises WorkerError (and marks the pool
        broken) if a worker is dead, or with ``restart`` replaces it."""
        self._client.check_workers(restart)

    # -- the async API -----------------------------------------------------------
    def send(self, actions, env_id=None) -> None:
        """Sends actions to envs that are waiting for one.

        Args:
            actions: integer action indices, shape ``(n,)`` (any integer dtype;
                a list works).
            env_id: int env indices, shape ``(n,)``, no duplicates; default all
                envs (then ``n == num_envs``), or, with ``n == batch_size <
                num_envs`` (an element of ``action_space``), the envs of the
                last batch received (as ale-py's async ``AtariVectorEnv``).

        Raises:
            TypeError: non-integer actions or env ids.
            ValueError: wrong shapes, out-of-range actions or ids, duplicates.
            CallOrderError: an env is still running, or the pool needs reset(),
                or (``autoreset_mode="disabled"``) an env's episode has ended
                and it was not reset.
            PoolClosedError: the pool is closed or broken.
        """
        self._client.send(actions, env_id)

    def async_reset(self, seed: int | None = None, options: dict | None = None,
                    timeout: float | None = RESET_TIMEOUT) -> None:
        """Resets envs without waiting for their observations; collect them
        with :meth:`recv`.

        Args:
            seed, options: as :meth:`reset`.
            timeout: seconds to wait at most for the commands in flight to
                finish (a reset without a mask waits for them first); None:
                no limit. Default :data:`shmatari.client.RESET_TIMEOUT` (60 s).

        Raises:
            As :meth:`reset`.
        """
        self._client.async_reset(seed, options, timeout)
        if seed is not None:  # np_random anew, as reset(seed=...)
            self._np_random_from = None

    def recv(self, timeout: float | None = None):
        """Waits for the next batch of ``batch_size`` results.

        Returns:
            (obs, reward, terminated, truncated, info): ``obs`` uint8 of shape
            ``(batch_size, *single_observation_space.shape)``, ``reward``
            float32, the flags bool, each ``(batch_size,)``; ``info["env_id"]``
            (int32) says which env each row belongs to. In a synchronous pool
            rows are in env order. With ``zero_copy=True`` ``obs`` is a
            read-only view into the ring (see :func:`make`).

        Args:
            timeout: seconds to wait at most (None: as long as the workers
                are alive). A dead worker is always reported within about
                0.1 s; a timeout also catches one that is alive but stuck
                (stopped, or looping inside the emulator). Under
                ``restart_workers`` the replacement of a dead worker is not
                counted in it: a restart may add up to ``start_timeout``
                (:func:`make`'s) to the wait, which then goes on.

        Raises:
            StepTimeoutError: ``timeout`` passed; nothing was taken and the
                pool is unchanged. In a first-ready pool, also when a worker
                that holds commands has published nothing for ``timeout``
                seconds while the others fill batches (the message names it).
            CallOrderError: fewer than ``batch_size`` envs are running, or no
                reset yet (the message names the state and the way out).
            TypeError, ValueError: ``timeout`` is not None or a number >= 0.
            WorkerError: a worker failed or died (within about 0.1 s), unless
                ``restart_workers``; then only if a replacement fails to start.
            ResourceLimitError: with ``restart_workers``, no file descriptor
                or process was left to start a replacement (the pool is
                then broken).
            PoolClosedError: the pool is closed or broken; for an attached
                pool, also when its server died or closed it (within about
                0.1 s); and, whatever ``timeout``, within about 0.1 s of
                every env in flight having answered while the batch is still
                short ("the env pool cannot go on": another process wrote
                where results go; the pool is then broken).
        """
        return self._client.recv(timeout)

    # -- the Gymnasium API -----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None,
              timeout: float | None = RESET_TIMEOUT):
        """Resets every env.

        Args:
            seed: None continues each env's random streams; an int re-derives
                every env from it, as :func:`make`'s ``seed`` does.
            options: None, or ``{"reset_mask": mask}`` with ``mask`` a bool
                array of shape ``(num_envs,)`` holding at least one True, as
                Gymnasium's vector envs: only the envs in ``mask`` are reset;
                the others return their current observation unchanged,
                nothing emulated (``info["reset"]`` tells them apart). This is
                how envs are reset under ``autoreset_mode="disabled"``, and it
                works in every mode, while other envs run (they keep running;
                no masked env may be running). It cannot be combined with
                ``seed``. Without a mask, the commands in flight (after an
                interrupted ``recv()``, or ``send()`` without ``recv()``) are
                waited for and their results dropped first.
            timeout: seconds the whole reset may take at most: waiting for the
                commands in flight, then for the first observations. Default
                :data:`shmatari.client.RESET_TIMEOUT`, 60 s, far above an
                honest reset (noop_max=30: milliseconds); a ``noop_max`` of
                millions of frames needs more, or None (no limit).

        Returns:
            (obs, info): ``obs`` uint8 of shape ``(num_envs, *single_observation_space.shape)``
            in a synchronous pool; with ``batch_size < num_envs``, as EnvPool,
            the first ``batch_size`` envs ready (see ``info["env_id"]``).

            With a ``reset_mask``, the rows of envs that were running are
            their step results, and ``info`` also holds every row's
            ``reward`` (float32), ``terminated`` and ``truncated`` (bool),
            each of shape ``(rows,)``, as :meth:`recv` returns them. The
            envs reset (``info["reset"]``) and the envs neither masked nor
            running (which return their current observation) have 0 and
            False there, whatever their episode's state: an env left out
            of the mask while ended stays ended.

            After an episode ended by a lost life (``episodic_life``) a reset
            continues that game, as SB3's EpisodicLifeEnv; with ``seed`` every
            env starts a new game.

        Raises:
            CallOrderError: a ``reset_mask`` holding an env still running, or
                before the first full reset; the message names the pool's
                state and the call that leaves it.
            TypeError, ValueError: a bad seed or options, or a ``timeout``
                that is not None or a number >= 0 (NaN is refused).
            StepTimeoutError: ``timeout`` passed with every worker alive; the
                message names the workers (index, pid) and envs that did not
                answer. Waiting for the commands in flight, nothing was
                dropped or reset; waiting for the first observations, the
                resets are in flight (``recv()`` or ``reset()`` again).
            WorkerError, PoolClosedError: as :meth:`recv`.
        """
        out = self._client.reset(seed, options, timeout)
        if seed is not None:  # np_random anew, as Gymnasium's reset(seed=...)
            self._np_random_from = None
        return out

    def step(self, actions, env_id=None, timeout: float | None = None):
        """Steps the envs once.

        Args:
            actions: integer action indices (any integer dtype; a list
                works), of shape

                - ``(num_envs,)``: one per env;
                - ``(batch_size,)`` with ``batch_size < num_envs`` and no
                  ``env_id``: for the envs of the last batch received
                  (:meth:`recv`, :meth:`reset` or :meth:`step`), which must
                  not have been sent actions since;
                - ``(n,)`` with ``env_id``: accepted only where the ``n``
                  envs and those already running (sent, not yet received)
                  make at least ``batch_size``, so that the wait can return.
                  A synchronous pool (``batch_size == num_envs``, the
                  default) has none running between steps, so it needs every
                  env (``n == num_envs``, in any order); for a subset, make
                  the pool with ``batch_size <= n``.
            env_id: optional int env indices for ``actions``, shape ``(n,)``,
                no duplicates (as :meth:`send`).
            timeout: as :meth:`recv`'s.

        Returns:
            (obs, reward, terminated, truncated, info) in env order for a
            synchronous pool; with ``batch_size < num_envs`` this is
            ``send(actions, env_id)`` then ``recv()``, as EnvPool.

        Raises:
            TypeError: non-integer actions, or a ``timeout`` that is not None
                or a number.
            ValueError: wrong shape or an out-of-range action, or a negative
                ``timeout``; every argument is checked before anything is
                sent, and the pool is unchanged.
            CallOrderError: nothing was sent: fewer than ``batch_size`` envs
                would be running (a subset of a synchronous pool; the message
                says how many envs to give, or the ``batch_size`` to make the
                pool with); ``(batch_size,)`` actions without ``env_id`` and
                no batch received yet, or its envs already sent actions; an
                env in ``env_id`` still running; or as :meth:`send` and
                :meth:`recv` otherwise.
            WorkerError: a worker failed or died.
            StepTimeoutError: ``timeout`` passed with every worker alive (in a
                first-ready pool, also: a worker that holds commands answered
                none for ``timeout`` seconds); the actions were sent, and
                :meth:`recv` collects their results.
        """
        return self._client.step(actions, env_id, timeout)

    def xla(self, timeout: float | None = None):
        """EnvPool's ``xla()``: ``handle, recv, send, step``, pure functions of
        the handle for ``jax.jit`` / ``jax.lax.scan`` (CPU), which drive this
        pool through XLA FFI handlers with no Python on the step path.
        :mod:`shmatari.xla` documents the contract, the results and limits.

        Args:
            timeout: seconds a jitted ``recv`` / ``step`` waits for a batch
                (None: no limit).

        Raises:
            PoolClosedError: the pool is closed or broken.
            NotImplementedError: ``autoreset_mode="same_step"``.
            TypeError, ValueError: a timeout that is not None or seconds >= 0.
            ModuleNotFoundError: jax is not installed (the message says what
                to install).
            XlaBuildError: no C++ compiler, or the handlers did not build.
        """
        from . import xla

        return xla.make(self, timeout=timeout)

    # -- lifetime ----------------------------------------------------------------
    def close_extras(self, **kwargs) -> None:
        self._finalizer()

    def close(self, **kwargs) -> None:
        """Stops the workers and removes the segment; for an attached pool,
        detaches and leaves the pool running. Idempotent."""
        if not hasattr(self, "_finalizer"):
            # __init__ refused before it made anything (Gymnasium's VectorEnv
            # has a class attribute closed = False, so that is no sign)
            return
        try:
            self._finalizer()  # a Ctrl-C during it is raised once it is done
            self._res.wait_shutdown()  # another thread's close(), if it runs it
        finally:
            self.closed = True
            if self._client is not None:
                self._client.closed = True

    def __repr__(self) -> str:
        c = self.config
        what = repr(c.game) if c is not None else f"attached to {self._name!r}"
        return (f"ShmVectorEnv({what}, num_envs={self.num_envs}, batch_size={self.batch_size}, "
                f"num_workers={self.num_workers}, {'closed' if self.closed else 'open'})")

    @property
    def segment_name(self) -> str | None:
        """The shared-memory segment's name (under /dev/shm), None once closed."""
        seg = self._res.segment
        return None if seg is None else seg.name
