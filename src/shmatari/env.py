"""The face of a pool: :func:`make`, :func:`attach` and :class:`ShmVectorEnv`.

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
import math
import numbers
import os
import time
import weakref

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from . import _core, config as _config, seeding, shm
from .client import RESET_TIMEOUT, Client, status_error
from ._vector_extras import VectorExtras
from .errors import AttachError
from .spin import spin_policy
from .supervisor import START_TIMEOUT, Supervisor, _deferred_sigint, _Resources

__all__ = ["make", "attach", "ShmVectorEnv"]

#: Seconds attach() waits for a starting pool, or for a previous client's
#: last commands to finish.
_ATTACH_TIMEOUT = 30.0
#: Seconds between looks for the segment of a server that is still starting.
_ATTACH_RETRY = 0.02
#: ``autoreset_mode`` option -> Gymnasium's enum, for ``metadata``.
GYM_AUTORESET = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
                  "disabled": AutoresetMode.DISABLED}
_now = time.monotonic
_log = logging.getLogger("shmatari")


def make(env_id: str, num_envs: int = 8, *, batch_size: int | None = None,
         num_workers: int | None = None, seed: int | None = None,
         start_method: str | None = None, zero_copy: bool = False,
         restart_workers: bool = False, preset: str | None = None,
         start_timeout: float | None = None, batch_order: str = "first_ready",
         **options) -> "ShmVectorEnv":
    """Creates a pool of Atari envs served by worker processes through shared memory.

    It first removes the segments that pools killed outright left in
    ``/dev/shm`` (:func:`shmatari.shm.sweep_stale`: only those whose owner is
    dead and that no process maps).

    Args:
        env_id: the game: an ale-py ROM id (``"breakout"``) or a usual spelling
            (``"Breakout"``, ``"ALE/Breakout-v5"``; a legacy ``"BreakoutNoFrameskip-v4"``
            gives a warning that only the game is taken from it, the options
            staying shmatari's);
            or ``"null"``, a built-in env that emulates nothing and only
            writes a frame per step (4 actions, never done), to measure the
            cost of the round trip itself.
        num_envs: envs in the pool (>= 1).
        batch_size: results per :meth:`ShmVectorEnv.recv` (1..num_envs; default
            num_envs, which makes the pool synchronous).
        batch_order: which envs a batch of an asynchronous pool
            (``batch_size < num_envs``) holds. ``"first_ready"`` (default):
            the first ``batch_size`` results to finish, as EnvPool's async
            mode; timing decides which envs share a batch, so a policy's
            random draws and a rollout's end depend on it (a training run
            does not replay bit for bit). ``"fixed"``: ``batch_size`` must
            divide ``num_envs``; with ``G = num_envs // batch_size`` groups,
            the k-th batch since the last full reset holds exactly envs
            ``k % G, k % G + G, k % G + 2G, ...`` (``info["env_id"]``, in
            that order), whatever the workers' timing: groups served
            round-robin, each one striped over the workers (which own
            contiguous envs), so every worker steps while the policy runs on
            another group. ``recv()`` waits for that group only, and refuses
            (CallOrderError) when one of its envs was not sent a command.
            Still zero-copy and as fast as first ready when every group is
            sent each round (docs/reproducibility.md). A synchronous pool is
            fixed either way. The default stays first ready because it
            accepts any send pattern (some envs, any subset, a batch_size
            that does not divide num_envs) and is the async contract of
            EnvPool and Gymnasium users' code; make's default pool is
            synchronous, hence reproducible, anyway. Double-buffered
            training that must replay (examples/ppo_atari.py) asks for
            ``"fixed"``.
        num_workers: worker processes (1..num_envs; default: the cores this
            process may use, at most num_envs). Each owns a contiguous group
            of envs.
        seed: the pool seed, an int in [0, 2**256); None draws fresh entropy,
            kept in ``env.seed_entropy``. Env *i* derives its streams from
            ``SeedSequence(seed, spawn_key=(i,))`` (see :mod:`shmatari.seeding`).
        start_method: how worker processes start. ``"zygote"`` (default on
            Linux): forked from shmatari's zygote, a small process started
            once per trainer process from a clean interpreter, which loads
            only ale-py, NumPy and shmatari's core (:mod:`shmatari._zygote`):
            workers carry nothing of the trainer (no torch), the main script
            needs no ``if __name__ == "__main__":`` guard, and scripts from
            stdin, ``python -c``, notebooks, threads and daemonic processes
            (a multiprocessing Pool's worker) all work. ``"spawn"`` (default
            elsewhere), ``"forkserver"`` or ``"fork"``: multiprocessing's
            start methods, with their rules (the guard; spawn and
            forkserver import the main script in every worker).
        start_timeout: seconds the workers may take to build their envs
            before make() raises WorkerError (default: 120 plus 1 per env of
            the largest worker). Progress is logged every 5 s meanwhile
            (logger ``"shmatari"``, level INFO).
        zero_copy: return observations as read-only views into the shared
            ring instead of copies. The ring holds ``ceil(num_envs /
            batch_size) + 1`` batches, so the view returned by a ``recv()``
            (or ``step()``) stays valid through the next ``recv()``; envs
            sent after that one overwrite it, silently: the view then shows
            newer frames. In a synchronous pool: the observation of step *t*
            is valid until step *t + 2* is called. So a view must be used or
            copied before the next-but-one call: kept in a list (as CleanRL's
            async script keeps ``next_obs``) it changes under the caller.
            The views are read-only: ``torch.from_numpy(view)`` warns that
            the array is not writable (writing through such a tensor would
            corrupt the ring). The recipe is one copy into storage of the
            caller's own, e.g. ``np.copyto(buf[t], obs)`` into a writable
            rollout array that torch shares (``torch.from_numpy(buf)``),
            or ``torch.tensor(obs)``. Default False: every returned array
            is the caller's own (writable, never overwritten), as
            :mod:`shmatari.envpool` returns them unless asked otherwise.
        restart_workers: when a worker dies or fails while the pool runs,
            start a new one in its place instead of raising WorkerError
            (a warning is logged to the ``"shmatari"`` logger). Its envs are
            rebuilt, seeded from the pool seed, the env index and the
            worker's restart count (:mod:`shmatari.seeding`), and each
            reports the lost episode as truncated, with
            ``info["worker_restarted"]``, in its next result (a reset's
            result is flagged too, without truncation). Commands in flight
            when the worker died are answered by the new one, so a batch
            still fills. A worker that fails while starting still raises.
        preset: None, ``"dqn"`` or ``"gymnasium"``: a named set of the
            options below (``config.PRESETS``); options given here override
            it. ``"dqn"``: Nature DQN as SB3's AtariWrapper (sticky actions 0,
            episodic_life, use_fire_reset, reward_clip; stack 4 as SB3's
            VecFrameStack). ``"gymnasium"``: the defaults below.
        **options: env options. The defaults are Gymnasium's
            AtariPreprocessing + FrameStackObservation(4) on ALE/<Game>-v5
            (ALE v5: Machado et al., 2018), bit for bit; docs/semantics.md
            gives each rule in full, with its tests and the peers' differences.
            A *frame* is one emulator frame, a *step* one agent step.

            - ``frame_skip=4``: frames per step; the action is repeated and
              the reward summed over the frames actually emulated. A step
              stops at the frame that ends its episode.
            - ``maxpool=True``: each frame of the stack is the pixel-wise max
              of the step's last two frames in ALE's palette (per channel in
              RGB), taken before the resize; a step that emulated one frame
              (``frame_skip=1``, or an episode ending on its first frame) uses
              that frame alone, never an older one. False: the last frame.
            - ``grayscale=True``: ALE's grayscale palette, observations uint8
              ``(num_envs, stack_num, img_height, img_width)``; False: RGB,
              ``(num_envs, stack_num, img_height, img_width, 3)``.
            - ``img_height=84``, ``img_width=84``: at most the game's screen
              (210 x 160; taller for 13 games, listed in docs/semantics.md);
              area resize from that screen, bit-identical to ``cv2.resize(...,
              interpolation=cv2.INTER_AREA)``.
            - ``stack_num=4``: frames per observation, oldest first. A reset
              fills the stack with its first frame; a done step's stack holds
              only frames of the ending episode.
            - ``noop_max=30``: at each new game, n NOOP frames, n uniform in
              [1, noop_max] from env i's no-op generator
              (``seeding.noop_rng(seed, i)``), as Gymnasium's
              AtariPreprocessing and SB3's NoopResetEnv; 0: none. A no-op
              frame that ends the game resets it again.
            - ``use_fire_reset=False``: if True, one step (frame_skip frames) of FIRE
              after the no-ops, and after each lost life with episodic_life,
              on action sets with FIRE at index 1 and at least 3 actions
              (skipped elsewhere, e.g. Freeway). This is the first step of
              SB3's FireResetEnv, without its step of action 2. If FIRE ends
              the game, a fresh reset (no-ops, no FIRE) gives the first
              observation.
            - ``episodic_life=False``: if True, a step whose lives drop (to a value
              above 0) ends the episode with ``terminated`` while the game goes
              on; the next reset continues the game (a NOOP step, then FIRE)
              with a fresh stack, as SB3's EpisodicLifeEnv. ``info["lives"]``
              and ``info["game_over"]`` report the game; the frame cap, the
              step count and the episode statistics cover the whole game.
            - ``reward_clip=False``: if True, the reward is the sign of the step's
              summed reward; ``info["raw_reward"]`` keeps it unclipped and
              ``info["episode"]["r"]`` is the raw score.
            - ``max_episode_frames=108000``: truncate the game when its frame
              count (no-op, FIRE and continuation frames included; ALE's
              episode frame number) reaches this, on that very frame: at step
              27,000 with no no-ops. None: never. A done step always has
              ``terminated`` or ``truncated`` set.
            - ``repeat_action_probability=0.25``: sticky actions, ALE's own
              per-frame mechanism, seeded per env.
            - ``full_action_space=False``: if True, all 18 actions instead of the game's
              minimal set.
            - ``autoreset_mode="next_step"``, ``"same_step"`` or
              ``"disabled"`` (or a ``gymnasium.vector.AutoresetMode``),
              declared in ``env.metadata["autoreset_mode"]``:

              - ``"next_step"`` (Gymnasium 1.x): the step after a done step
                returns the reset observation, reward 0 and both flags false;
                its action is ignored.
              - ``"same_step"``: a done step returns the reset observation at
                once, with the step's reward and flags; the step's own
                observation and info are in ``info["final_obs"]`` and
                ``info["final_info"]`` (masks ``_final_obs``,
                ``_final_info``), as Gymnasium's SyncVectorEnv.
              - ``"disabled"``: stepping an env whose episode ended raises
                CallOrderError; reset it with
                ``reset(options={"reset_mask": mask})``.

            - ``obs_layout="channels_last"``: RGB observations ``(num_envs,
              stack_num, img_height, img_width, 3)``; ``"channels_first"``:
              ``(num_envs, 3 * stack_num, img_height, img_width)``, frame s in
              channels 3s..3s+2 (EnvPool's layout, what SB3's and CleanRL's
              CNNs take), written planar by the frame kernel: the same values,
              no transpose. Grayscale is the same in both.
            - ``render_mode=None``: ``"rgb_array"`` makes :meth:`ShmVectorEnv.render`
              return each env's full-size RGB screen (workers keep the
              last screen of each env in the segment, about 34 KB copied
              per result); None: nothing kept, no cost.
            - ``ram_info=False``: True adds ``info["ram"]``, uint8 ``(n, 128)``:
              each row's console RAM (ALE's ``getRAM``) at the state its
              observation shows (after the reset in a same-step done row),
              as EnvPool's ``info["ram"]`` and ale-py's ``obs_type="ram"``;
              workers copy 128 bytes per result into the segment.
            - ``episode_statistics=True``: when an env ends a game (not a
              life), ``info["episode"]`` holds ``r`` (float64, raw score),
              ``l`` (int32, agent steps), ``t`` (float64, seconds since the
              episode's reset) and ``frames`` (int64), with the mask
              ``info["_episode"]``: the names of Gymnasium's
              RecordEpisodeStatistics. False: neither key (nor in
              ``final_info``), and no timing work in ``recv``, so that the pool
              can be wrapped in ``gymnasium.wrappers.vector.RecordEpisodeStatistics``
              (which refuses an info that has ``episode`` already).
            - ``fast_reset="auto"``: after an env's first reset, a new game
              restores the state that reset left (about 0.1-0.3 ms instead
              of ALE's 5 ms ``reset_game``) where the table of
              :mod:`shmatari.fast_reset` proves it exact for the game's ROM,
              the installed ale-py and the sticky setting; the same streams
              bit for bit. ``"off"``: ALE's reset always.

    Returns:
        ShmVectorEnv: a ``gymnasium.vector.VectorEnv``; call ``reset()`` first.

    Raises:
        TypeError: an argument of the wrong type, or an unknown option.
        ValueError: an unknown game (close names are suggested), a ROM that
            cannot be played single-player or whose file is missing (not in
            ``list_games()``), an
            unknown preset, or an option out of range. All are raised before
            any process starts.
        SharedMemorySpaceError: ``/dev/shm`` is too small for the pool.
        WorkerError: a worker failed while building its envs, or they were
            not all ready within ``start_timeout`` (the message says how far
            they got and what to change).
        RuntimeError: a multiprocessing start method inside a daemonic
            process (use ``"zygote"``).
    """
    if start_timeout is not None:
        if isinstance(start_timeout, bool) or not isinstance(start_timeout, (int, float)):
            raise TypeError(f"start_timeout must be a number of seconds or None, got "
                            f"{type(start_timeout).__name__}")
        if not 0 < start_timeout < math.inf:  # NaN fails both
            raise ValueError(f"start_timeout must be a finite number of seconds > 0, or "
                             f"None, got {start_timeout!r}")
    # Checking the game imports ale-py and loads its ROM: a KeyboardInterrupt
    # raised inside ale-py's native code aborts the process (C++ terminate),
    # so a Ctrl-C then is raised once that is done.
    with _deferred_sigint():
        cfg = _config.build_config(env_id, num_envs, batch_size=batch_size,
                                   num_workers=num_workers, seed=seed,
                                   start_method=start_method, zero_copy=zero_copy,
                                   restart_workers=restart_workers, preset=preset,
                                   batch_order=batch_order, **options)
    return ShmVectorEnv(cfg, start_timeout=start_timeout)


def attach(name: str, *, timeout: float = _ATTACH_TIMEOUT,
           zero_copy: bool = False) -> "ShmVectorEnv":
    """Attaches to a pool that another process serves (``shmatari serve``).

    The pool keeps running in its server; this process becomes its one
    client and drives it through the shared-memory segment, with the same
    API as :func:`make`'s pools (``reset``, ``step``, ``send`` / ``recv``,
    the spaces, ``metadata["autoreset_mode"]``), all read from the segment's
    header. :meth:`ShmVectorEnv.close` detaches and leaves the pool running
    for the next client.

    Attaching makes the pool consistent first: it waits until commands that
    a previous client left running have finished, then drops the results
    nobody took (``shmatari_recover`` in ``shmatari/shmatari.h``; see
    docs/layout.md). Call ``reset()`` before stepping.

    Args:
        name: the pool's name (``"demo"`` for ``shmatari serve ... --name
            demo``, whose segment is ``/dev/shm/shmatari_demo``), or a full
            segment name such as ``env.segment_name``.
        timeout: seconds to wait in all (a finite number >= 0): for a pool
            that is still starting (a warning to the ``"shmatari"`` logger
            says so once, when there is no such segment yet), for the
            segment's in-use lock while another process holds it exclusively
            (only a sweep or a starting server takes it, for microseconds),
            and for a previous client's last commands.
        zero_copy: as :func:`make`'s.

    Returns:
        ShmVectorEnv: the attached pool; ``env.config`` is None.

    Raises:
        AttachError: no such pool (``code="not_found"``), not a shmatari
            segment, another layout ABI major version (``"abi"``), another
            live client (``"busy"``, with its pid in ``client_pid``), a pool
            still starting, or a segment locked by another process, after
            ``timeout`` (``"timeout"``), or a server or worker that died or
            is closing.
        TypeError: ``name`` is not a str, or ``timeout`` not a number
            (None, bool and str are refused).
        ValueError: an empty name, or one with ``/`` or NUL; a ``timeout``
            that is negative, NaN or infinite.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str such as 'demo', got {type(name).__name__}")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds (attach waits at most that "
                        f"long), got {type(timeout).__name__} {timeout!r}")
    if not 0 <= float(timeout) < math.inf:  # NaN fails both
        raise ValueError(f"timeout must be a finite number of seconds >= 0 (attach waits "
                         f"at most that long), got {timeout!r}")
    timeout = float(timeout)
    if "\0" in name:
        raise ValueError(f"name must not contain NUL characters, got {name!r}")
    return ShmVectorEnv._attach(name, timeout, bool(zero_copy))


class ShmVectorEnv(VectorExtras, gym.vector.VectorEnv):
    """Atari envs in worker processes, stepped through one shared-memory segment.

    Observations are uint8 of shape ``(num_envs, stack_num, img_height,
    img_width)`` (``(..., 3)`` with ``grayscale=False``), oldest frame first.
    Rewards are float32 and ``terminated`` / ``truncated`` bool, shape
    ``(num_envs,)``. Arrays returned belong to the caller: later steps do not
    change them.

    The ``info`` dict holds, per env (shape ``(num_envs,)`` or ``(batch_size,)``):
    ``env_id`` (int32), ``lives`` (int32), ``raw_reward`` (float32, before
    clipping), ``game_over`` (bool), ``elapsed_step`` (int32, agent steps
    since the game's reset), ``episode_frame_number`` (int64, frames since
    reset, no-ops included), ``frame_number`` (int64, frames since the env
    began), ``reset`` (bool, the result of a reset), ``worker_restarted``
    (bool, the env's first result since its worker was replaced:
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
            FileExistsError: ``segment_name`` is taken.
            SharedMemorySpaceError, WorkerError: as :func:`make`.
        """
        self.config = config
        self.num_envs = config.num_envs
        self.batch_size = config.batch_size
        self.num_workers = config.num_workers
        self._init_lifetime(owner=True)
        try:
            self._supervisor = Supervisor(config, self._res, start_timeout)
            seg = self._supervisor.start(segment_name or shm.new_name())
            self._seg = seg
            if claim:
                code, _, msg = seg.open_client(os.getpid(), START_TIMEOUT)
                if code != _core.OK:
                    raise status_error(seg, code, msg)[0]
                self._res.client_pid = os.getpid()
            self._bind(Client(self._res.segment, seg, self._res, zero_copy=config.zero_copy,
                              seed_entropy=config.seed, supervisor=self._supervisor,
                              episode_statistics=config.episode_statistics))
        except BaseException:
            self.close()
            raise

    @classmethod
    def _attach(cls, name: str, timeout: float, zero_copy: bool) -> "ShmVectorEnv":
        """The client role, without a supervisor: see :func:`attach`."""
        self = cls.__new__(cls)
        self.config = None
        self._supervisor = None
        self._init_lifetime(owner=False)
        self._name = name
        try:
            seg_name = _core.segment_name(name)
            deadline, told = _now() + timeout, False
            while True:
                # A server that is still starting has no segment yet, or one
                # whose header is still zero: wait for it, up to the timeout.
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
                    if _now() < deadline:
                        if not told:
                            told = True
                            _log.warning(
                                "attach(%r): no pool named %r yet (%s/%s): waiting up to %g s "
                                "for a server to start it (`shmatari serve GAME --name %s`)",
                                name, name, shm.SHM_DIR, seg_name, timeout, name)
                        time.sleep(_ATTACH_RETRY)
                        continue
                    raise AttachError(
                        f"no shmatari pool named {name!r}: {shm.SHM_DIR}/{seg_name} does "
                        f"not exist (waited {timeout:g} s); start one with `shmatari serve "
                        f"GAME --name {name}`", code="not_found") from None
                except OSError as exc:
                    raise AttachError(f"cannot attach to {name!r}: cannot open "
                                      f"{shm.SHM_DIR}/{seg_name}: {exc.strerror or exc}",
                                      code="system") from None
                if _now() < deadline and segment.size >= 8 and \
                        not any(segment.buf[:8]):
                    shm.close_mapping(segment)
                    time.sleep(_ATTACH_RETRY)
                    continue
                break
            self._res.segment = segment
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
            code, holder, msg = seg.open_client(os.getpid(), max(0.0, deadline - _now()))
            if code != _core.OK:
                raise AttachError(f"cannot attach to {name!r}: {msg}",
                                  code=_core.status_name(code), client_pid=holder or None)
            self._res.client_pid = os.getpid()
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
        self.single_action_space = gym.spaces.Discrete(client.n_actions)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space,
                                                         self.batch_size)
        self.single_observation_space = gym.spaces.Box(0, 255, client.obs_shape, np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              self.batch_size)

    @property
    def seed_entropy(self):
        """The pool's seed (the last ``reset(seed=...)``, else :func:`make`'s)."""
        return self._client.seed_entropy

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
                (stopped, or looping inside the emulator).

        Raises:
            StepTimeoutError: ``timeout`` passed; nothing was taken and the
                pool is unchanged.
            CallOrderError: fewer than ``batch_size`` envs are running, or no
                reset yet (the message names the state and the way out).
            TypeError, ValueError: ``timeout`` is not None or a number >= 0.
            WorkerError: a worker failed or died (within about 0.1 s), unless
                ``restart_workers``; then only if a replacement fails to start.
            PoolClosedError: the pool is closed or broken; for an attached
                pool, also when its server died or closed it (within about
                0.1 s).
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
        return self._client.reset(seed, options, timeout)

    def step(self, actions, env_id=None, timeout: float | None = None):
        """Steps the envs once.

        Args:
            actions: integer action indices, shape ``(num_envs,)`` (any integer
                dtype; a list works), ``(batch_size,)`` for the envs of the last
                batch received, or ``(n,)`` with ``env_id``.
            env_id: optional env indices for ``actions`` (as :meth:`send`).
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
            CallOrderError: as :meth:`send` and :meth:`recv`; nothing was
                sent.
            WorkerError: a worker failed or died.
            StepTimeoutError: ``timeout`` passed with every worker alive; the
                actions were sent, and :meth:`recv` collects their results.
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
            XlaBuildError: jax is not installed, or no C++ compiler.
        """
        from . import xla

        return xla.make(self, timeout=timeout)

    # -- lifetime ----------------------------------------------------------------
    def close_extras(self, **kwargs) -> None:
        self._finalizer()

    def close(self, **kwargs) -> None:
        """Stops the workers and removes the segment; for an attached pool,
        detaches and leaves the pool running. Idempotent."""
        if getattr(self, "closed", True) and not hasattr(self, "_finalizer"):
            return
        try:
            self._finalizer()  # a Ctrl-C during it is raised once it is done
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
