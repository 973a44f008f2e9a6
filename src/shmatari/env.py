"""The shared-memory vector env: :func:`make`, :func:`attach` and :class:`ShmVectorEnv`."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
import weakref
from collections.abc import Mapping

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from . import _core, config as _config, results, seeding, shm
from .errors import AttachError, CallOrderError, PoolClosedError, StepTimeoutError, WorkerError

__all__ = ["make", "attach", "ShmVectorEnv"]

_IDLE, _PENDING = 0, 1
#: Names of the arrays ``Segment.collect`` returns, in order.
_COLLECTED = tuple(name for name, _ in _core.FIELDS) + ("_reset", "_restarted")
_log = logging.getLogger("shmatari")

#: Seconds of sleep between liveness checks while waiting for workers.
_POLL = 0.1
#: Seconds a new pool may take to build its envs before make() gives up.
_START_TIMEOUT = 120.0
#: Seconds close() waits for workers to exit before terminating them (then
#: 1 s more before SIGKILL, and 1 s for that: close() returns within 5 s).
_CLOSE_TIMEOUT = 2.0
#: Seconds attach() waits for a starting pool, or for a previous client's
#: last commands to finish.
_ATTACH_TIMEOUT = 30.0
#: ``autoreset_mode`` option -> Gymnasium's enum, for ``metadata``.
_GYM_AUTORESET = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
                  "disabled": AutoresetMode.DISABLED}
#: The header's autoreset_mode word -> the option's name.
_AUTORESET_NAMES = {v: k for k, v in _core.AUTORESET_MODES.items()}


def spin_policy(num_workers: int, cores: int) -> dict:
    """How long workers and the client poll before sleeping on the futex.

    A futex wake-up costs tens of microseconds (more in a VM), more than a
    worker usually waits for its next request when it has a core to itself,
    so a waiter polls first. It polls with ``sched_yield()``: if anything else
    wants the core (a learner's threads, another worker), it gets it at once.
    With more workers than cores a poll only delays the process it waits
    for, so then everyone sleeps at once.

    Returns:
        dict: ``{"worker": (spin_ns, mode), "client": (spin_ns, mode)}``.
    """
    if num_workers < cores:
        return {"worker": (100_000, _core.SPIN_YIELD), "client": (50_000, _core.SPIN_YIELD)}
    if num_workers == cores:
        return {"worker": (50_000, _core.SPIN_YIELD), "client": (0, _core.SPIN_YIELD)}
    return {"worker": (0, _core.SPIN_YIELD), "client": (0, _core.SPIN_YIELD)}


def make(env_id: str, num_envs: int = 8, *, batch_size: int | None = None,
         num_workers: int | None = None, seed: int | None = None,
         start_method: str | None = None, zero_copy: bool = False,
         restart_workers: bool = False, preset: str | None = None,
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
        num_workers: worker processes (1..num_envs; default: the cores this
            process may use, at most num_envs). Each owns a contiguous group
            of envs.
        seed: the pool seed, an int in [0, 2**256); None draws fresh entropy,
            kept in ``env.seed_entropy``. Env *i* derives its streams from
            ``SeedSequence(seed, spawn_key=(i,))`` (see :mod:`shmatari.seeding`).
        start_method: ``"forkserver"`` (default on Linux), ``"spawn"``
            (default elsewhere) or ``"fork"``.
        zero_copy: return observations as read-only views into the shared
            ring instead of copies. The ring holds ``ceil(num_envs /
            batch_size) + 1`` batches, so the view returned by a ``recv()``
            (or ``step()``) stays valid through the next ``recv()``; envs
            sent after that one may overwrite it. In a synchronous pool: the
            observation of step *t* is valid until step *t + 2* is called.
            Copy what must live longer. Default False: every returned array
            is the caller's own.
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

            When an env ends a game (not a life), ``info["episode"]`` holds
            ``r`` (float64, raw score), ``l`` (int32, agent steps) and
            ``frames`` (int64), with the mask ``info["_episode"]``: the names
            of Gymnasium's RecordEpisodeStatistics.

    Returns:
        ShmVectorEnv: a ``gymnasium.vector.VectorEnv``; call ``reset()`` first.

    Raises:
        TypeError: an argument of the wrong type, or an unknown option.
        ValueError: an unknown game (close names are suggested), a ROM that
            cannot be played single-player (not in ``list_games()``), an
            unknown preset, or an option out of range. All are raised before
            any process starts.
        SharedMemorySpaceError: ``/dev/shm`` is too small for the pool.
        WorkerError: a worker failed while building its envs.
    """
    cfg = _config.build_config(env_id, num_envs, batch_size=batch_size,
                               num_workers=num_workers, seed=seed,
                               start_method=start_method, zero_copy=zero_copy,
                               restart_workers=restart_workers, preset=preset, **options)
    return ShmVectorEnv(cfg)


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
        timeout: seconds to wait for a pool that is still starting, or for a
            previous client's last commands.
        zero_copy: as :func:`make`'s.

    Returns:
        ShmVectorEnv: the attached pool; ``env.config`` is None.

    Raises:
        AttachError: no such pool (``code="not_found"``), not a shmatari
            segment, another layout ABI major version (``"abi"``), another
            live client (``"busy"``, with its pid in ``client_pid``), a pool
            still starting after ``timeout`` (``"timeout"``), or a server or
            worker that died or is closing.
        TypeError: ``name`` is not a str.
        ValueError: an empty name, or one with ``/`` or NUL.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str such as 'demo', got {type(name).__name__}")
    if "\0" in name:
        raise ValueError(f"name must not contain NUL characters, got {name!r}")
    return ShmVectorEnv._attach(name, timeout, bool(zero_copy))


class _Resources:
    """What must be released when a pool goes away, held apart from the env
    so that a ``weakref.finalize`` can release it without keeping it alive."""

    def __init__(self, owner: bool):
        self.owner = owner   # the creator: stops the workers and unlinks
        self.pid = os.getpid()  # the process these resources belong to
        self.segment = None  # SharedMemory
        self.seg = None      # _core.Segment
        self.views = []      # NumPy arrays over the segment
        self.processes = []
        self.fault_pipes = []  # per worker: the read end of its faulthandler pipe
        self.client_pid = 0  # set while this process holds the client claim
        _LIVE_RESOURCES.add(self)

    def shutdown(self, timeout: float = _CLOSE_TIMEOUT) -> None:
        """Releases the pool: within about ``timeout`` + 1 s whatever the
        workers do, and whole even if Ctrl-C arrives meanwhile (the
        KeyboardInterrupt comes once it is done)."""
        if os.getpid() != self.pid:
            # A process forked from the owner (os.fork) that exits: the pool is
            # its parent's, so leave it alone (no CLOSING, no unlink, no join).
            return
        with _deferred_sigint():
            self._shutdown(timeout)

    def forget(self) -> None:
        """In a child forked from this process: drop the parent's pool
        without touching it, and keep the child's exit (multiprocessing's
        atexit terminates every daemon child it knows) away from its workers."""
        from multiprocessing import process

        children = getattr(process, "_children", None)
        for p in self.processes:
            if children is not None:
                children.discard(p)
        self.processes, self.views = [], []
        for pipe in self.fault_pipes:
            try:
                pipe.close()
            except OSError:
                pass
        self.fault_pipes = []
        if self.seg is not None:
            self.seg.release()
            self.seg = None
        if self.segment is not None:
            shm.close_mapping(self.segment)
            self.segment = None

    def _shutdown(self, timeout: float) -> None:
        seg, segment = self.seg, self.segment
        if segment is not None and self.owner:
            # The name goes first: if this process dies from here on, nothing
            # is left in /dev/shm (the workers still have their mappings).
            shm.unlink(segment.name)
        if seg is not None:
            try:
                if self.client_pid:
                    seg.release_client(self.client_pid)
                if self.owner:
                    seg.set_pool_state(_core.POOL_CLOSING)
            except ValueError:
                pass
        # Ask, then terminate, then kill, each with one deadline for all
        # workers (a stopped worker only yields to SIGKILL).
        for sig, wait in ((None, timeout - 1.0), (signal.SIGTERM, 0.5), (signal.SIGKILL, 0.5)):
            alive = [p for p in self.processes if _worker_alive(p)]
            if not alive:
                break
            if sig is not None:
                for p in alive:
                    try:
                        os.kill(p.pid, sig)
                    except ProcessLookupError:
                        pass
            _wait_for_exit(alive, max(0.0, wait))
        self.processes = []
        for pipe in self.fault_pipes:
            pipe.close()
        self.fault_pipes = []
        self.views = []
        if seg is not None:
            seg.release()
        self.seg = None
        if segment is not None:
            self.segment = None
            shm.close_mapping(segment)  # zero-copy views kept by the caller stay valid


def _worker_alive(p) -> bool:
    """Whether a worker process runs. Under forkserver a worker whose fork
    server died reports exit code 255 (multiprocessing lost the server that
    would tell it the real one) though it may run on: ask the kernel then."""
    code = p.exitcode
    return code is None or (code == 255 and _core.pid_alive(p.pid))


def _wait_for_exit(procs, seconds: float) -> None:
    end = _now() + seconds
    while True:
        alive = [p for p in procs if _worker_alive(p)]
        if not alive or _now() >= end:
            return
        p = alive[0]
        if p.exitcode is None:
            p.join(min(0.05, max(0.0, end - _now())))
        else:
            time.sleep(0.005)  # known to multiprocessing as gone: poll the kernel


@contextlib.contextmanager
def _deferred_sigint():
    """Holds back Ctrl-C while cleaning up: a SIGINT that arrives meanwhile
    is raised (as its handler would) once the block is done. Python runs
    signal handlers in the main thread only; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    except (ValueError, TypeError):  # not the main interpreter, or no signals
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)


_LIVE_RESOURCES: "weakref.WeakSet[_Resources]" = weakref.WeakSet()


def _forget_pools_in_child() -> None:
    for res in list(_LIVE_RESOURCES):
        res.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)

_now = time.monotonic
#: Seconds between looks for the segment of a server that is still starting.
_ATTACH_RETRY = 0.02


class ShmVectorEnv(gym.vector.VectorEnv):
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
    ``RecordEpisodeStatistics`` gives them (so do not also wrap the pool in
    that wrapper). With ``autoreset_mode="same_step"``, done
    steps add ``final_obs`` / ``_final_obs`` and ``final_info`` /
    ``_final_info`` (see :func:`make` and docs/semantics.md).

    A pool is used by one thread at a time (like Gymnasium's vector envs):
    calls from two threads at once corrupt its bookkeeping.

    Create it with :func:`make` (this process owns the workers and the
    segment, and is the pool's client), or with :func:`attach` (a pool that
    ``shmatari serve`` owns; ``config`` is then None and everything comes
    from the segment's header). It is a context manager; :meth:`close` is
    idempotent, and a pool garbage-collected without it is closed then.
    ``worker_pids`` lists the worker processes' ids (a restarted worker's new
    id replaces the old one).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, config: _config.EnvConfig, *, segment_name: str | None = None,
                 claim: bool = True):
        """Creates the pool described by ``config`` (see :func:`make`).

        Args:
            config: a validated configuration.
            segment_name: the segment's name (default: a fresh
                ``shmatari_<pid>_<hex>``).
            claim: make this process the pool's client. ``shmatari serve``
                passes False, so that another process can attach.

        Raises:
            FileExistsError: ``segment_name`` is taken.
            SharedMemorySpaceError, WorkerError: as :func:`make`.
        """
        self.config = config
        self.num_envs = config.num_envs
        self.batch_size = config.batch_size
        self.num_workers = config.num_workers
        self.seed_entropy = config.seed
        self._init_state(owner=True, zero_copy=config.zero_copy)
        try:
            self._start(segment_name or shm.new_name(), claim)
        except BaseException:
            self.close()
            raise

    @classmethod
    def _attach(cls, name: str, timeout: float, zero_copy: bool) -> "ShmVectorEnv":
        """The client role: see :func:`attach`."""
        self = cls.__new__(cls)
        self.config = None
        self._init_state(owner=False, zero_copy=zero_copy)
        self._name = name
        try:
            seg_name = _core.segment_name(name)
            deadline = _now() + timeout
            while True:
                # A server that is still starting has no segment yet, or one
                # whose header is still zero: wait for it, up to the timeout.
                try:
                    segment = shm.attach(seg_name)
                except (shm.NotASegmentError, IsADirectoryError) as exc:
                    raise AttachError(f"cannot attach to {name!r}: {exc}",
                                      code="not_shmatari") from None
                except FileNotFoundError:
                    if _now() < deadline:
                        time.sleep(_ATTACH_RETRY)
                        continue
                    raise AttachError(
                        f"no shmatari pool named {name!r}: {shm.SHM_DIR}/{seg_name} does "
                        f"not exist (waited {timeout:g} s); start one with `shmatari serve "
                        f"GAME --name {name}`", code="not_found") from None
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
            seg = _core.Segment(segment.buf)
            self._res.seg = seg
            self._seg = seg
            code, holder, msg = seg.open_client(os.getpid(), timeout)
            if code != _core.OK:
                raise AttachError(f"cannot attach to {name!r}: {msg}",
                                  code=_core.status_name(code), client_pid=holder or None)
            self._res.client_pid = os.getpid()
            seg.refresh_groups()
            self._setup(segment, seg)
            seg.spin_ns, seg.spin_mode = spin_policy(
                self.num_workers, _config.available_cores())["client"]
            self.seed_entropy = seeding.words_to_seed(seg.seed_words())
            self.worker_pids = [seg.worker_pid(w) for w in range(self.num_workers)]
            self._groups = [range(*seg.worker_group(w)) for w in range(self.num_workers)]
        except BaseException:
            self.close()
            raise
        return self

    def _init_state(self, owner: bool, zero_copy: bool) -> None:
        self.closed = False
        self._zero_copy = zero_copy
        self._broken: str | None = None
        self._res = _Resources(owner)
        self._finalizer = weakref.finalize(self, self._res.shutdown)
        self._pending = 0
        self._taken = 0
        self._next_check = 0.0
        self._needs_reset = True

    # -- construction ----------------------------------------------------------
    def _start(self, segment_name: str, claim: bool) -> None:
        cfg = self.config
        ring_depth = _core.min_ring_depth(cfg.num_envs, cfg.batch_size)
        header = _core.compute_layout(
            num_envs=cfg.num_envs, num_workers=cfg.num_workers, batch_size=cfg.batch_size,
            ring_depth=ring_depth, stack_num=cfg.stack_num, img_height=cfg.img_height,
            img_width=cfg.img_width, channels=cfg.channels, frame_skip=cfg.frame_skip,
            autoreset_mode=_core.AUTORESET_MODES[cfg.autoreset_mode])
        total = int.from_bytes(header[24:32], "little")
        shm.sweep_stale()
        segment = shm.create(segment_name, total)
        self._res.segment = segment
        segment.buf[:len(header)] = header
        seg = _core.Segment(segment.buf)
        self._res.seg = seg
        self._seg = seg
        seg.clear_slots()
        seg.set_owner(os.getpid())
        seg.set_seed_words(seeding.seed_to_words(cfg.seed))
        self._groups = cfg.worker_groups()
        for w, group in enumerate(self._groups):
            seg.set_worker_group(w, group.start, group.stop)
        seg.refresh_groups()

        self._ctx = mp.get_context(cfg.start_method)
        if cfg.start_method == "forkserver":
            self._ctx.set_forkserver_preload(["shmatari.worker", "shmatari._core", "numpy",
                                              "ale_py"])
        policy = spin_policy(cfg.num_workers, _config.available_cores())
        seg.spin_ns, seg.spin_mode = policy["client"]
        self._worker_spin = policy["worker"]
        self._restarts = [0] * cfg.num_workers
        for w in range(cfg.num_workers):
            self._spawn(w)
        deadline = _now() + _START_TIMEOUT
        while not seg.wait_ready(cfg.num_workers, _POLL):
            self._check_workers()
            if _now() > deadline:
                raise WorkerError(
                    f"workers did not become ready within {_START_TIMEOUT:.0f} s",
                    worker=-1, env_ids=range(cfg.num_envs), exitcode=None)
        self._check_workers()
        seg.set_pool_state(_core.POOL_RUNNING)
        if claim:
            code, _, msg = seg.open_client(os.getpid(), _START_TIMEOUT)
            if code != _core.OK:
                self._raise_for(code, msg)
            self._res.client_pid = os.getpid()
        self._setup(segment, seg)

    def _setup(self, segment, seg) -> None:
        """Sizes, modes, spaces and views, all from the segment's header."""
        hdr = seg.header()
        self.num_envs, self.batch_size = hdr["num_envs"], hdr["batch_size"]
        self.num_workers = hdr["num_workers"]
        self._autoreset = _AUTORESET_NAMES[hdr["autoreset_mode"]]
        self.metadata = dict(type(self).metadata,
                             autoreset_mode=_GYM_AUTORESET[self._autoreset])
        self.autoreset_mode = self.metadata["autoreset_mode"]
        self._state = np.zeros(self.num_envs, np.int8)
        # autoreset_mode="disabled": envs whose last step ended an episode
        self._done = np.zeros(self.num_envs, bool)
        # When each env's episode began (time.perf_counter), for info["episode"]["t"].
        self._episode_start = np.zeros(self.num_envs)
        self._taken = hdr["consumed_batches"]
        obs_shape = (hdr["stack_num"], hdr["img_height"], hdr["img_width"])
        if hdr["channels"] != 1:
            obs_shape += (hdr["channels"],)
        self.action_set = hdr["action_set"]
        n_actions = len(self.action_set)
        self.single_action_space = gym.spaces.Discrete(n_actions)
        self.action_space = gym.spaces.MultiDiscrete(np.full(self.num_envs, n_actions))
        self.single_observation_space = gym.spaces.Box(0, 255, obs_shape, np.uint8)
        self.observation_space = gym.spaces.Box(
            0, 255, (self.num_envs,) + obs_shape, np.uint8)
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
        self._res.views.append(self._ring_obs)

    # -- workers ---------------------------------------------------------------
    def _spawn(self, w: int, restart: int = 0, positions: dict | None = None) -> None:
        """Starts worker ``w`` (or its replacement) in slot ``w`` of the lists.

        SIGINT is blocked meanwhile: a Ctrl-C then is the parent's alone (the
        worker ignores SIGINT before it unblocks it), and is raised here once
        the process is on record, so that close() stops it. The fork server
        is started first, outside the block, so that other users of it do
        not inherit a blocked SIGINT.
        """
        from .worker import worker_main

        cfg = self.config
        fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
        reader, writer = self._ctx.Pipe(duplex=False)
        os.set_blocking(reader.fileno(), False)
        p = self._ctx.Process(target=worker_main, name=f"shmatari-worker-{w}",
                              args=(self._res.segment.name, w, fields, os.getpid(),
                                    self._worker_spin, writer, restart, positions,
                                    shm.process_start_ticks(os.getpid())),
                              daemon=True)
        from .atari import single_threaded_children

        if cfg.start_method == "forkserver":
            from multiprocessing import forkserver

            try:
                with single_threaded_children():
                    forkserver.ensure_running()
            except ChildProcessError as exc:
                raise RuntimeError(
                    "the fork server this process inherited belongs to the process it was "
                    "forked from (os.fork), so it cannot start workers here: make the pool "
                    "with start_method='spawn'") from exc
        masked = hasattr(signal, "pthread_sigmask")
        if masked:
            old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with single_threaded_children():
                p.start()
            if w < len(self._res.processes):
                self._res.fault_pipes[w].close()
                self._res.processes[w], self._res.fault_pipes[w] = p, reader
            else:
                self._res.processes.append(p)
                self._res.fault_pipes.append(reader)
            self.worker_pids = [q.pid for q in self._res.processes]
        finally:
            writer.close()
            if masked:
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    def _dead_workers(self) -> list[int]:
        """Workers that failed, exited or whose process has ended. While the
        pool runs, no worker exits on its own: any exit is a death."""
        seg, gone = self._seg, (_core.WORKER_FAILED, _core.WORKER_EXITED)
        return [w for w, p in enumerate(self._res.processes)
                if not _worker_alive(p) or seg.worker_state(w) in gone]

    def _reap(self, w: int) -> None:
        """Waits for dead worker ``w``'s process to end (a failed worker
        exits by itself), killing it if it does not within a second."""
        p = self._res.processes[w]
        p.join(1.0)
        if p.exitcode is None:
            p.kill()
            p.join(1.0)

    def _fault_text(self, w: int) -> str:
        """What faulthandler wrote for worker ``w`` (a fatal signal), or ""."""
        chunks = []
        try:
            while chunk := os.read(self._res.fault_pipes[w].fileno(), 65536):
                chunks.append(chunk)
        except (BlockingIOError, OSError):
            pass
        return b"".join(chunks).decode("utf-8", "replace")

    def _worker_error(self, w: int, during: str = "") -> WorkerError:
        seg, p, group = self._seg, self._res.processes[w], self._groups[w]
        failed = seg.worker_state(w) == _core.WORKER_FAILED
        self._reap(w)
        text = seg.worker_error(w) or self._fault_text(w)
        code = p.exitcode
        if code is None:
            how = "still running"
        elif code < 0:
            try:
                how = f"killed by signal {-code} ({signal.Signals(-code).name})"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
        msg = (f"worker {w} (pid {p.pid}, envs {group.start}..{group.stop - 1}) "
               f"{'failed' if failed else 'died'}{during}: {how}")
        if text:
            msg += "\n--- worker traceback ---\n" + text.rstrip()
        elif code is not None and code > 0:
            if seg.worker_pid(w) == 0 and self.config.start_method != "fork":
                # It died before running any code of ours: most often, the
                # main script was re-run in the new process and started pools.
                msg += (f" before it could start (its stderr may say more). With start "
                        f"method {self.config.start_method!r} each worker imports your "
                        f"main script again: put the code that creates pools under "
                        f"`if __name__ == \"__main__\":`, and run scripts from a file")
            else:
                msg += (" without a Python traceback: it ended in native code (ALE exits "
                        "on some errors; its stderr may say more)")
        return WorkerError(msg, worker=w, env_ids=group, exitcode=code, worker_traceback=text)

    def _check_workers(self, restart: bool = False) -> None:
        """Raises WorkerError if a worker is dead (and marks the pool
        broken), or with ``restart`` replaces the dead workers."""
        dead = self._dead_workers()
        if not dead:
            return
        try:
            if not restart:
                raise self._worker_error(dead[0])
            self._restart(dead)
        except WorkerError as err:
            self._broken = str(err)
            raise

    def _restart(self, dead: list[int]) -> None:
        """Replaces dead workers while the client waits in recv().

        The others finish their commands first, so that the ring holds only
        complete rows and rows of the dead (``Segment.recover``); then each
        replacement starts, rebuilds its envs and answers their commands in
        flight, and the wait goes on.
        """
        seg, dead = self._seg, set(dead)
        reasons = {}
        deadline = _now() + _START_TIMEOUT
        while True:
            for w in dead - set(reasons):
                reasons[w] = str(self._worker_error(w)).partition("\n")
            busy = seg.in_flight()
            for w in dead:
                busy[self._groups[w].start:self._groups[w].stop] = False
            if not busy.any():
                break
            dead |= set(self._dead_workers())
            if _now() > deadline:
                env = int(np.flatnonzero(busy)[0])
                raise WorkerError(
                    f"while restarting worker(s) {sorted(dead)}: env {env} did not finish "
                    f"its step within {_START_TIMEOUT:.0f} s",
                    worker=-1, env_ids=range(self.num_envs), exitcode=None)
            time.sleep(0.001)
        plan = seg.recover(sorted(dead))
        ready = seg.counts()[0]
        for w in sorted(dead):
            group = self._groups[w]
            seg.reset_worker(w)
            self._restarts[w] += 1
            self._spawn(w, self._restarts[w], {e: plan[e] for e in group if e in plan})
            head, _, traceback = reasons[w]
            _log.warning("%s; restarted it as pid %d (restart %d of this worker)%s", head,
                         self._res.processes[w].pid, self._restarts[w],
                         "\n" + traceback if traceback else "")
        deadline = _now() + _START_TIMEOUT
        while not seg.wait_ready(ready + len(dead), _POLL):
            failed = self._dead_workers()
            if failed:
                raise self._worker_error(failed[0], " while restarting")
            if _now() > deadline:
                raise WorkerError(f"restarted workers {sorted(dead)} were not ready within "
                                  f"{_START_TIMEOUT:.0f} s", worker=-1,
                                  env_ids=range(self.num_envs), exitcode=None)

    def _raise_for(self, code: int, msg: str | None = None) -> None:
        """Raises the error that a failed wait's status ``code`` stands for."""
        seg = self._seg
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
                    self._broken = msg
                    raise WorkerError(msg, worker=w, env_ids=group, exitcode=None,
                                      worker_traceback=text)
        if msg is None:
            _, msg = seg.pool_check()
        self._broken = msg or _core.status_name(code)
        raise PoolClosedError(f"the env pool is gone: {self._broken}")

    def _wait_failed(self, code: int) -> None:
        """After a wait that did not return a batch: returns to wait again
        (a timeout, a signal, a dead worker replaced) or raises what broke
        the pool."""
        if self._res.owner:
            # The owner knows its workers' exit codes: WorkerError names them,
            # or with restart_workers the dead are replaced and the wait goes on.
            self._check_workers(self.config.restart_workers)
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
    def send(self, actions, env_id=None) -> None:
        """Sends actions to envs that are waiting for one.

        Args:
            actions: integer action indices, shape ``(n,)`` (any integer dtype;
                a list works).
            env_id: int env indices, shape ``(n,)``, no duplicates; default all
                envs (then ``n == num_envs``).

        Raises:
            TypeError: non-integer actions or env ids.
            ValueError: wrong shapes, out-of-range actions or ids, duplicates.
            CallOrderError: an env is still running, or the pool needs reset(),
                or (``autoreset_mode="disabled"``) an env's episode has ended
                and it was not reset.
            PoolClosedError: the pool is closed or broken.
        """
        self._usable()
        if self._needs_reset:
            raise CallOrderError("call reset() (or async_reset()) before stepping")
        n_actions = self.single_action_space.n
        if env_id is None:
            acts = _core.check_actions(actions, self.num_envs, n_actions)
            if self._pending:
                busy = np.flatnonzero(self._state != _IDLE).tolist()
                raise CallOrderError(f"env(s) {busy} are still running (a step interrupted "
                                     f"before its results came leaves them so): recv() "
                                     f"their results before sending to them again")
            if self._autoreset == "disabled":
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

    def async_reset(self, seed: int | None = None, options: dict | None = None) -> None:
        """Resets envs without waiting; collect the results with :meth:`recv`.

        Args:
            seed, options: as :meth:`reset`.

        Raises:
            As :meth:`reset`.
        """
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
            CallOrderError: fewer than ``batch_size`` envs are running.
            WorkerError: a worker failed or died (within about 0.1 s), unless
                ``restart_workers``; then only if a replacement fails to start.
            PoolClosedError: the pool is closed or broken; for an attached
                pool, also when its server died or closed it (within about
                0.1 s).
        """
        self._usable()
        if self._pending < self.batch_size:
            raise CallOrderError(f"recv() needs {self.batch_size} running env(s), "
                                 f"{self._pending} are: send() actions first")
        seg, batch = self._seg, self._taken
        if self._res.owner:
            now = _now()
            if now >= self._next_check:
                # Batches may keep coming from the other workers while a dead
                # one's envs wait forever: check every _POLL s, not only when
                # a wait fails.
                self._next_check = now + _POLL
                self._check_workers(self.config.restart_workers)
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
        if self._autoreset == "disabled":
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

    # -- the Gymnasium API -----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
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
                works in every mode. It cannot be combined with ``seed``.

        Returns:
            (obs, info): ``obs`` uint8 of shape ``(num_envs, *single_observation_space.shape)``
            in a synchronous pool; with ``batch_size < num_envs``, as EnvPool,
            the first ``batch_size`` envs ready (see ``info["env_id"]``).

            After an episode ended by a lost life (``episodic_life``) a reset
            continues that game, as SB3's EpisodicLifeEnv; with ``seed`` every
            env starts a new game.

        Raises:
            CallOrderError: envs are still running (async use without recv), or
                a ``reset_mask`` before the first full reset.
            TypeError, ValueError: a bad seed or options.
        """
        self.async_reset(seed=seed, options=options)
        obs, _, _, _, info = self.recv()
        return obs, info

    def step(self, actions, env_id=None, timeout: float | None = None):
        """Steps the envs once.

        Args:
            actions: integer action indices, shape ``(num_envs,)`` (any integer
                dtype; a list works), or ``(n,)`` with ``env_id``.
            env_id: optional env indices for ``actions`` (as :meth:`send`).
            timeout: as :meth:`recv`'s.

        Returns:
            (obs, reward, terminated, truncated, info) in env order for a
            synchronous pool; with ``batch_size < num_envs`` this is
            ``send(actions, env_id)`` then ``recv()``, as EnvPool.

        Raises:
            TypeError: non-integer actions.
            ValueError: wrong shape or an out-of-range action; the pool is
                unchanged.
            CallOrderError: reset() has not been called.
            WorkerError: a worker failed or died.
            StepTimeoutError: ``timeout`` passed with every worker alive; the
                actions were sent, and :meth:`recv` collects their results.
        """
        if env_id is not None and self._pending + np.size(env_id) < self.batch_size:
            raise CallOrderError(
                f"step() would send {np.size(env_id)} action(s) and then wait for a batch of "
                f"{self.batch_size}, of which only {self._pending + np.size(env_id)} would be "
                f"running: send() to more envs first, or make the pool with a smaller "
                f"batch_size; nothing was sent")
        self.send(actions, env_id)
        return self.recv(timeout)

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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

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
