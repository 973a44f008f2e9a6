"""The shared-memory vector env: :func:`make`, :func:`attach` and :class:`ShmVectorEnv`."""

from __future__ import annotations

import multiprocessing as mp
import os
import weakref

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from . import _core, config as _config, seeding, shm
from .errors import AttachError, CallOrderError, PoolClosedError, WorkerError

__all__ = ["make", "attach", "ShmVectorEnv"]

_IDLE, _PENDING = 0, 1

#: Seconds of sleep between liveness checks while waiting for workers.
_POLL = 0.1
#: Seconds a new pool may take to build its envs before make() gives up.
_START_TIMEOUT = 120.0
#: Seconds close() waits for workers to exit before terminating them.
_CLOSE_TIMEOUT = 3.0
#: Seconds attach() waits for a starting pool, or for a previous client's
#: last commands to finish.
_ATTACH_TIMEOUT = 30.0


def make(env_id: str, num_envs: int = 8, *, batch_size: int | None = None,
         num_workers: int | None = None, seed: int | None = None,
         start_method: str | None = None, **options) -> "ShmVectorEnv":
    """Creates a pool of Atari envs served by worker processes through shared memory.

    Args:
        env_id: the game: an ale-py ROM id (``"breakout"``) or a usual spelling
            (``"Breakout"``, ``"ALE/Breakout-v5"``, ``"BreakoutNoFrameskip-v4"``).
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
        **options: env options; defaults follow ALE v5 (Machado et al., 2018):

            - ``frame_skip=4``: emulator frames per agent step; the action is
              repeated and rewards summed over the frames emulated.
            - ``repeat_action_probability=0.25``: sticky actions, ALE's own
              per-frame mechanism.
            - ``noop_max=30``: at reset, 1..noop_max NOOP frames drawn from the
              env's seeded stream (0: none), as Gymnasium's AtariPreprocessing.
            - ``stack_num=4``: frames per observation, oldest first.
            - ``img_height=84``, ``img_width=84``: observation size in pixels,
              at most the screen's 210 x 160 (area resize, bit-identical to
              ``cv2.resize(..., interpolation=cv2.INTER_AREA)``).
            - ``grayscale=True``: ALE's grayscale palette; False gives RGB with
              a trailing channel axis.
            - ``maxpool=True``: each frame is the pixel-wise maximum of the
              last two frames emulated in the step (one frame alone when the
              step emulated only one).
            - ``episodic_life=False``: a lost life ends the episode
              (``terminated``) while the game goes on.
            - ``use_fire_reset=False``: press FIRE for one step after reset, on
              games whose action 1 is FIRE (with at least 3 actions).
            - ``reward_clip=False``: the reward is its sign.
            - ``full_action_space=False``: all 18 actions instead of the game's
              minimal set.
            - ``max_episode_frames=108000``: truncate after this many frames,
              no-op frames included (None: never).
            - ``autoreset_mode="next_step"``: after a done step, the next step
              resets that env and returns its first observation with reward 0
              and both flags false (Gymnasium 1.x ``NEXT_STEP``).

    Returns:
        ShmVectorEnv: a ``gymnasium.vector.VectorEnv``; call ``reset()`` first.

    Raises:
        TypeError: an argument of the wrong type, or an unknown option.
        ValueError: an unknown game (close names are suggested) or an option
            out of range. Both are raised before any process starts.
        SharedMemorySpaceError: ``/dev/shm`` is too small for the pool.
        WorkerError: a worker failed while building its envs.
    """
    cfg = _config.build_config(env_id, num_envs, batch_size=batch_size,
                               num_workers=num_workers, seed=seed,
                               start_method=start_method, **options)
    return ShmVectorEnv(cfg)


def attach(name: str, *, timeout: float = _ATTACH_TIMEOUT) -> "ShmVectorEnv":
    """Attaches to a pool that another process serves (``shmatari serve``).

    The pool keeps running in its server; this process becomes its one
    client and drives it through the shared-memory segment, with the same
    API as :func:`make`'s pools (``reset``, ``step``, ``send`` / ``recv``,
    the spaces), all read from the segment's header. :meth:`ShmVectorEnv.close`
    detaches and leaves the pool running for the next client.

    Attaching makes the pool consistent first: it waits until commands that
    a previous client left running have finished, then drops the results
    nobody took (see ``shmatari_recover`` in ``shmatari/shmatari.h``). Call
    ``reset()`` before stepping.

    Args:
        name: the pool's name (``"demo"`` for ``shmatari serve ... --name
            demo``, whose segment is ``/dev/shm/shmatari_demo``), or a full
            segment name such as ``env.segment_name``.
        timeout: seconds to wait for a pool that is still starting, or for a
            previous client's last commands.

    Returns:
        ShmVectorEnv: the attached pool; ``env.config`` is None.

    Raises:
        AttachError: no such pool (``code="not_found"``), not a shmatari
            segment, another layout ABI major version (``"abi"``), another
            live client (``"busy"``, with its pid in ``client_pid``), a pool
            still starting after ``timeout`` (``"timeout"``), or a server or
            worker that died or is closing.
        ValueError: an empty name, or one with ``/``.
    """
    return ShmVectorEnv._attach(name, timeout)


class _Resources:
    """What must be released when a pool goes away, held apart from the env
    so that a ``weakref.finalize`` can release it without keeping it alive."""

    def __init__(self, owner: bool):
        self.owner = owner   # the creator: stops the workers and unlinks
        self.segment = None  # SharedMemory
        self.seg = None      # _core.Segment
        self.views = []      # NumPy arrays over the segment
        self.processes = []
        self.client_pid = 0  # set while this process holds the client claim

    def shutdown(self, timeout: float = _CLOSE_TIMEOUT) -> None:
        seg, segment = self.seg, self.segment
        if seg is not None:
            try:
                if self.client_pid:
                    seg.release_client(self.client_pid)
                if self.owner:
                    seg.set_pool_state(_core.POOL_CLOSING)
            except ValueError:
                pass
        deadline = _now() + timeout
        for p in self.processes:
            p.join(max(0.0, deadline - _now()))
        for p in self.processes:
            if p.exitcode is None:
                p.terminate()
        for p in self.processes:
            p.join(1.0)
            if p.exitcode is None:
                p.kill()
                p.join(1.0)
        self.processes = []
        self.views = []
        if seg is not None:
            seg.release()
        self.seg = None
        if segment is not None:
            self.segment = None
            try:
                segment.close()
            except BufferError:
                pass  # a caller still holds a zero-copy view; the name goes anyway
            if self.owner:
                shm.unlink(segment.name)


def _now() -> float:
    import time

    return time.monotonic()


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
    began), ``reset`` (bool, the result of a reset); and, when some env ended
    a game, ``episode`` = ``{"r": float64 raw score, "l": int32 agent steps,
    "frames": int64}`` with the mask ``_episode`` (bool), as Gymnasium's
    ``RecordEpisodeStatistics``.

    Create it with :func:`make` (this process owns the workers and the
    segment, and is the pool's client), or with :func:`attach` (a pool that
    ``shmatari serve`` owns; ``config`` is then None and everything comes
    from the segment's header). It is a context manager; :meth:`close` is
    idempotent, and a pool garbage-collected without it is closed then.
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
        self._init_state(owner=True)
        try:
            self._start(segment_name or shm.new_name(), claim)
        except BaseException:
            self.close()
            raise

    @classmethod
    def _attach(cls, name: str, timeout: float) -> "ShmVectorEnv":
        """The client role: see :func:`attach`."""
        self = cls.__new__(cls)
        self.config = None
        self._init_state(owner=False)
        self._name = name
        try:
            seg_name = _core.segment_name(name)
            try:
                segment = shm.attach(seg_name)
            except FileNotFoundError:
                raise AttachError(
                    f"no shmatari pool named {name!r}: {shm.SHM_DIR}/{seg_name} does not "
                    f"exist; start one with `shmatari serve GAME --name {name}`",
                    code="not_found") from None
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
            self.seed_entropy = seeding.words_to_seed(seg.seed_words())
            self.worker_pids = [seg.worker_pid(w) for w in range(self.num_workers)]
            self._groups = [range(*seg.worker_group(w)) for w in range(self.num_workers)]
        except BaseException:
            self.close()
            raise
        return self

    def _init_state(self, owner: bool) -> None:
        self.closed = False
        self._broken: str | None = None
        self._res = _Resources(owner)
        self._finalizer = weakref.finalize(self, self._res.shutdown)
        self._pending = 0
        self._taken = 0
        self._needs_reset = True

    # -- construction ----------------------------------------------------------
    def _start(self, segment_name: str, claim: bool) -> None:
        cfg = self.config
        ring_depth = _core.min_ring_depth(cfg.num_envs, cfg.batch_size)
        header = _core.compute_layout(
            num_envs=cfg.num_envs, num_workers=cfg.num_workers, batch_size=cfg.batch_size,
            ring_depth=ring_depth, stack_num=cfg.stack_num, img_height=cfg.img_height,
            img_width=cfg.img_width, channels=cfg.channels, frame_skip=cfg.frame_skip)
        total = int.from_bytes(header[24:32], "little")
        segment = shm.create(segment_name, total)
        self._res.segment = segment
        segment.buf[:len(header)] = header
        seg = _core.Segment(segment.buf)
        self._res.seg = seg
        self._seg = seg
        seg.set_owner(os.getpid())
        seg.set_seed_words(seeding.seed_to_words(cfg.seed))
        self._groups = cfg.worker_groups()
        for w, group in enumerate(self._groups):
            seg.set_worker_group(w, group.start, group.stop)
        seg.refresh_groups()

        ctx = mp.get_context(cfg.start_method)
        if cfg.start_method == "forkserver":
            ctx.set_forkserver_preload(["shmatari.worker", "shmatari._core", "numpy", "ale_py"])
        spin = 200 if cfg.num_workers < _config.available_cores() else 0
        fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
        for w in range(cfg.num_workers):
            from .worker import worker_main

            p = ctx.Process(target=worker_main, name=f"shmatari-worker-{w}",
                            args=(segment.name, w, fields, os.getpid(), spin), daemon=True)
            p.start()
            self._res.processes.append(p)
        self.worker_pids = [p.pid for p in self._res.processes]
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
        """Sizes, spaces and views, all from the segment's header."""
        hdr = seg.header()
        self.num_envs, self.batch_size = hdr["num_envs"], hdr["batch_size"]
        self.num_workers = hdr["num_workers"]
        self._state = np.zeros(self.num_envs, np.int8)
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
        B = self.batch_size
        self._slots = []
        for s in range(hdr["ring_depth"]):
            base = seg.slot_offset(s)
            fields = {}
            for f, (name, dtype) in enumerate(_core.FIELDS):
                fields[name] = np.ndarray((B,), dtype, segment.buf,
                                          base + hdr["slot_field_offset"][f])
            obs = np.ndarray((B,) + obs_shape, np.uint8, segment.buf,
                             base + hdr["slot_obs_offset"])
            self._slots.append((fields, obs))
            self._res.views.append((fields, obs))

    # -- liveness --------------------------------------------------------------
    def _check_workers(self) -> None:
        seg = self._seg
        for w, p in enumerate(self._res.processes):
            state = seg.worker_state(w)
            failed = state == _core.WORKER_FAILED
            if not failed and p.exitcode is None:
                continue
            if not failed and state == _core.WORKER_EXITED and p.exitcode == 0:
                continue
            group = self._groups[w]
            text = seg.worker_error(w)
            if p.exitcode is None:
                p.join(1.0)
            code = p.exitcode
            how = ("still running" if code is None else
                   f"killed by signal {-code}" if code < 0 else f"exit code {code}")
            msg = (f"worker {w} (pid {p.pid}, envs {group.start}..{group.stop - 1}) "
                   f"{'failed' if failed else 'died'}: {how}")
            if text:
                msg += "\n--- worker traceback ---\n" + text.rstrip()
            self._broken = msg
            raise WorkerError(msg, worker=w, env_ids=group, exitcode=code,
                              worker_traceback=text)

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
        (a timeout, a signal) or raises what broke the pool."""
        if self._res.owner:
            self._check_workers()
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
    def _check_actions(self, actions, n: int) -> np.ndarray:
        a = np.asarray(actions)
        if a.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers (action indices), got dtype {a.dtype}")
        if a.shape != (n,):
            raise ValueError(f"actions must have shape ({n},), got {a.shape}")
        n_actions = self.single_action_space.n
        if n and (a.min() < 0 or a.max() >= n_actions):
            bad = int(np.flatnonzero((a < 0) | (a >= n_actions))[0])
            raise ValueError(f"action {a[bad]} at position {bad} is out of range: "
                             f"this game has actions 0..{n_actions - 1}")
        return np.ascontiguousarray(a, np.int32)

    def _check_env_ids(self, env_ids, n_actions: int | None) -> np.ndarray:
        ids = np.asarray(env_ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"env_id must be integers, got dtype {ids.dtype}")
        if ids.ndim != 1:
            raise ValueError(f"env_id must be 1-D, got shape {ids.shape}")
        if n_actions is not None and ids.shape[0] != n_actions:
            raise ValueError(f"{n_actions} actions for {ids.shape[0]} env ids")
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
    def _post(self, env_ids: np.ndarray, actions, cmd: int) -> None:
        self._seg.post(env_ids, actions, cmd)
        self._state[env_ids] = _PENDING
        self._pending += env_ids.size

    def send(self, actions, env_id=None) -> None:
        """Sends actions to envs that are waiting for one.

        Args:
            actions: integer action indices, shape ``(n,)``.
            env_id: int env indices, shape ``(n,)``, no duplicates; default all
                envs (then ``n == num_envs``).

        Raises:
            TypeError: non-integer actions or env ids.
            ValueError: wrong shapes, out-of-range actions or ids, duplicates.
            CallOrderError: an env is still running, or the pool needs reset().
            PoolClosedError: the pool is closed or broken.
        """
        self._usable()
        if self._needs_reset:
            raise CallOrderError("call reset() (or async_reset()) before stepping")
        if env_id is None:
            env_ids = np.arange(self.num_envs, dtype=np.uint32)
            acts = self._check_actions(actions, self.num_envs)
            busy = np.flatnonzero(self._state != _IDLE)
            if busy.size:
                raise CallOrderError(f"env(s) {busy.tolist()} are still running: recv() "
                                     f"their results before sending to them again")
        else:
            env_ids = self._check_env_ids(env_id, None)
            acts = self._check_actions(actions, env_ids.size)
        self._post(env_ids, acts, _core.CMD_STEP)

    def async_reset(self, seed: int | None = None) -> None:
        """Resets every env without waiting; collect the results with :meth:`recv`."""
        self._usable()
        if self._pending:
            raise CallOrderError(f"{self._pending} env(s) are still running: recv() "
                                 f"their results before resetting")
        cmd = _core.CMD_RESET
        if seed is not None:
            seed = seeding.check_seed(seed)
            self._seg.set_seed_words(seeding.seed_to_words(seed))
            self.seed_entropy = seed
            cmd = _core.CMD_RESEED
        self._post(np.arange(self.num_envs, dtype=np.uint32), None, cmd)
        self._needs_reset = False

    def recv(self):
        """Waits for the next batch of ``batch_size`` results.

        Returns:
            (obs, reward, terminated, truncated, info): ``obs`` uint8 of shape
            ``(batch_size, *single_observation_space.shape)``, ``reward``
            float32, the flags bool, each ``(batch_size,)``; ``info["env_id"]``
            (int32) says which env each row belongs to. In a synchronous pool
            rows are in env order.

        Raises:
            CallOrderError: fewer than ``batch_size`` envs are running.
            WorkerError: a worker failed or died (within about 0.1 s).
            PoolClosedError: the pool is closed or broken; for an attached
                pool, also when its server died or closed it (within about
                0.1 s).
        """
        self._usable()
        if self._pending < self.batch_size:
            raise CallOrderError(f"recv() needs {self.batch_size} running env(s), "
                                 f"{self._pending} are: send() actions first")
        seg, batch = self._seg, self._taken
        while True:
            code = seg.wait_batch(batch, 0, _POLL)
            if code == _core.OK:
                break
            self._wait_failed(code)
        fields, obs_view = self._slots[batch % len(self._slots)]
        obs = obs_view.copy()
        env_id = fields["env_id"].copy()
        reward = fields["reward"].copy()
        terminated = fields["terminated"].astype(bool)
        truncated = fields["truncated"].astype(bool)
        info = self._info(fields, env_id)
        seg.take_batch(batch)
        self._taken = batch + 1
        self._state[env_id] = _IDLE
        self._pending -= env_id.size
        return obs, reward, terminated, truncated, info

    @staticmethod
    def _info(fields, env_id) -> dict:
        info = {
            "env_id": env_id,
            "lives": fields["lives"].copy(),
            "raw_reward": fields["raw_reward"].copy(),
            "game_over": fields["game_over"].astype(bool),
            "elapsed_step": fields["elapsed_step"].copy(),
            "episode_frame_number": fields["episode_frames"].copy(),
            "frame_number": fields["frame_number"].copy(),
            "reset": (fields["flags"] & _core.FLAG_RESET).astype(bool),
        }
        done = fields["episode_done"].astype(bool)
        if done.any():
            info["episode"] = {
                "r": np.where(done, fields["episode_return"], 0.0),
                "l": np.where(done, fields["elapsed_step"], 0).astype(np.int32),
                "frames": np.where(done, fields["episode_frames"], 0),
            }
            info["_episode"] = done
        return info

    # -- the Gymnasium API -----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Resets every env.

        Args:
            seed: None continues each env's random streams; an int re-derives
                every env from it, as :func:`make`'s ``seed`` does.
            options: must be None or empty.

        Returns:
            (obs, info): ``obs`` uint8 of shape ``(num_envs, *single_observation_space.shape)``
            in a synchronous pool; with ``batch_size < num_envs``, as EnvPool,
            the first ``batch_size`` envs ready (see ``info["env_id"]``).

        Raises:
            CallOrderError: envs are still running (async use without recv).
            TypeError, ValueError: a bad seed or options.
        """
        if options:
            raise ValueError(f"reset() takes no options, got {sorted(options)}")
        self.async_reset(seed=seed)
        obs, _, _, _, info = self.recv()
        return obs, info

    def step(self, actions, env_id=None):
        """Steps the envs once.

        Args:
            actions: integer action indices, shape ``(num_envs,)`` (any integer
                dtype; a list works), or ``(n,)`` with ``env_id``.
            env_id: optional env indices for ``actions`` (as :meth:`send`).

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
        """
        self.send(actions, env_id)
        return self.recv()

    # -- lifetime ----------------------------------------------------------------
    def close_extras(self, **kwargs) -> None:
        self._finalizer()

    def close(self, **kwargs) -> None:
        """Stops the workers and removes the segment; for an attached pool,
        detaches and leaves the pool running. Idempotent."""
        if getattr(self, "closed", True) and not hasattr(self, "_finalizer"):
            return
        self._finalizer()
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
