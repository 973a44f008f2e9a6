"""The classic baseline: one process per env, commands and results pickled over pipes.

:class:`PipeVectorEnv` is built the way ``SubprocVecEnv``-style vector envs
are (Stable-Baselines3, Gymnasium's ``AsyncVectorEnv`` without shared memory):
the parent sends each worker a command over a ``multiprocessing.Pipe`` and
reads back the pickled observation and scalars.

Each worker preprocesses frames the classic way (``preprocess="opencv"``, the
default), as Gymnasium's ``AtariPreprocessing`` does: ALE's own
``getScreenGrayscale`` (or ``getScreenRGB``) after each frame, ``np.maximum``
of the last two, ``cv2.resize(..., INTER_AREA)``. That is bit for bit what
shmatari's fused kernel computes, so observations are identical. The episode
logic of one env (frame skip, no-ops, FIRE, lives, caps, statistics) is
shmatari's own :class:`shmatari._core.AtariCore`, compiled, so the baseline is
if anything faster than a pure-Python one. It is neither slowed on purpose nor
given shared memory. ``preprocess="kernel"`` runs shmatari's fused kernel in
the workers instead: then the two differ only in how data crosses processes.

What the baseline does on its own, as an independent reference for
``shmatari-check``: the three autoreset modes, in the parent, as Gymnasium
1.x's ``SyncVectorEnv`` implements its ``AutoresetMode`` (each core only ever
steps and resets when told), masked resets (``reset(options={"reset_mask":
mask})``), and ``obs_layout="channels_first"``, a NumPy transpose of the
channels-last stack in the worker (shmatari's kernel writes that layout
planar). It does not render (``render_mode`` is refused).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import signal
import time

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from . import _core, atari, config as _config, results, seeding
from .client import add_row_results, check_reset_options
from ._vector_extras import Closing
from .errors import CLOSED, CallOrderError, PoolClosedError, WorkerError

__all__ = ["PipeVectorEnv", "make_pipe", "OpenCVPreprocessing", "PREPROCESSING"]

#: ``preprocess`` choices of the pipe baseline.
PREPROCESSING = ("opencv", "kernel")


class OpenCVPreprocessing:
    """Classic per-frame preprocessing, as Gymnasium's ``AtariPreprocessing``:
    ALE's grayscale (or RGB) screen after every frame, the pixel-wise maximum
    of the last two captured, an OpenCV ``INTER_AREA`` resize.

    A hook of :class:`shmatari._core.AtariCore` (``preprocessor=``). It
    captures every frame (not only the last two of a step, as Gymnasium does)
    because an episode that ends mid-skip pools the last two frames actually
    emulated.

    Raises:
        ImportError: OpenCV is not installed.
    """

    def __init__(self, config: _config.EnvConfig):
        import cv2

        self._resize = cv2.resize
        self._inter = cv2.INTER_AREA
        shape = tuple(config.screen_shape) + (() if config.grayscale else (3,))
        self._grayscale = config.grayscale
        self._screens = [np.zeros(shape, np.uint8), np.zeros(shape, np.uint8)]
        self._cur = 0
        self._size = (config.img_width, config.img_height)

    def capture(self, ale) -> None:
        self._cur ^= 1
        if self._grayscale:
            ale.getScreenGrayscale(self._screens[self._cur])
        else:
            ale.getScreenRGB(self._screens[self._cur])

    def emit(self, pool: bool, out: np.ndarray) -> None:
        frame = self._screens[self._cur]
        if pool:
            frame = np.maximum(frame, self._screens[self._cur ^ 1])
        out[...] = self._resize(frame, self._size, interpolation=self._inter)


def _pipe_worker(conn, config_fields: dict, index: int, preprocess: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from . import atari
    from .worker import _set_parent_death_signal

    _set_parent_death_signal(signal.SIGTERM)
    atari.quiet_process()
    cfg = _config.EnvConfig(**config_fields)
    # The core steps and resets only when told (the parent does the autoreset
    # modes) and writes channels-last stacks (the transpose is done here).
    core_cfg = dataclasses.replace(cfg, autoreset_mode="next_step", obs_layout="channels_last")
    channels_first = not cfg.grayscale and cfg.obs_layout == "channels_first"
    try:
        pre = OpenCVPreprocessing(core_cfg) if preprocess == "opencv" else None
        core = atari.build_core(core_cfg, index, atari.build_palette(core_cfg), preprocessor=pre)
        obs = np.empty(core_cfg.obs_shape, np.uint8)
        conn.send(("ready", core.action_ids()))
        while True:
            cmd, arg = conn.recv()
            if cmd == "step":
                core.step(arg)
            elif cmd == "reset":
                core.reset()
            elif cmd == "observe":
                core.observe()
            elif cmd == "reseed":
                atari.reseed_core(core, cfg.env_index_offset + index, arg)
                core.reset()
            elif cmd == "close":
                break
            core.obs_into(obs)
            if channels_first:  # (stack, H, W, 3) -> (3 * stack, H, W): frame s in 3s..3s+2
                out = obs.transpose(0, 3, 1, 2).reshape(cfg.obs_shape)
            else:
                out = obs
            conn.send(("ok", out, core.result(), core.ram() if cfg.ram_info else None))
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        import traceback

        try:
            conn.send(("error", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))))
        except OSError:
            pass
    finally:
        conn.close()


def make_pipe(env_id: str, num_envs: int = 8, *, seed: int | None = None,
              start_method: str | None = None, preset: str | None = None,
              preprocess: str = "opencv", **options) -> "PipeVectorEnv":
    """Creates a :class:`PipeVectorEnv`; arguments and options as :func:`shmatari.make`
    (``batch_size`` and ``num_workers`` do not apply: one process per env).

    Args:
        preprocess: ``"opencv"`` (classic: ALE's grayscale, NumPy, OpenCV) or
            ``"kernel"`` (shmatari's fused kernel); see the module docstring.

    Raises:
        As :func:`shmatari.make`; ValueError for a ``render_mode`` (the
        baseline does not render) or an unknown ``preprocess``; ImportError
        for ``"opencv"`` without OpenCV.
    """
    cfg = _config.build_config(env_id, num_envs, seed=seed, start_method=start_method,
                               num_workers=num_envs, preset=preset, **options)
    return PipeVectorEnv(cfg, preprocess=preprocess)


class PipeVectorEnv(Closing, gym.vector.VectorEnv):
    """The pipe-based baseline, with :class:`shmatari.ShmVectorEnv`'s API, spaces,
    options, seeding and results (synchronous ``reset`` and ``step`` only).

    The autoreset modes are Gymnasium 1.x's ``AutoresetMode``, done here as
    ``gymnasium.vector.SyncVectorEnv`` does them, with shmatari's results
    (docs/semantics.md): ``"next_step"`` resets an env in the step after its
    done step (reward 0, both flags false, the action ignored);
    ``"same_step"`` resets it within its done step, whose own observation
    and info go to ``info["final_obs"]`` and ``info["final_info"]`` (masks
    ``_final_obs``, ``_final_info``); ``"disabled"`` raises CallOrderError
    on a step while an env's episode has ended: reset it with
    ``reset(options={"reset_mask": mask})``.

    Args:
        config: a validated configuration (:func:`make_pipe` builds one).
        preprocess: ``"opencv"`` or ``"kernel"`` (see the module docstring).

    Raises:
        ValueError: an unknown ``preprocess``, or a ``render_mode``.
        ImportError: ``"opencv"`` without OpenCV installed.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, config: _config.EnvConfig, preprocess: str = "opencv"):
        self._conns, self._procs = [], []
        self.closed = True  # until the workers exist
        if preprocess not in PREPROCESSING:
            raise ValueError(f"preprocess must be one of {PREPROCESSING}, got {preprocess!r}")
        if config.render_mode is not None:
            raise ValueError(f"the pipe baseline does not render: render_mode must be None, "
                             f"got {config.render_mode!r}")
        if preprocess == "opencv" and config.game != _config.NULL_ENV:
            import cv2  # noqa: F401 - fail here, not in every worker
        self.preprocess = preprocess
        self.config = config
        self.num_envs = config.num_envs
        self.seed_entropy = config.seed
        self.autoreset_mode = AutoresetMode[config.autoreset_mode.upper()]
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        self.closed = False
        self._needs_reset = True
        # Envs whose last step ended their episode (SyncVectorEnv's _autoreset_envs).
        self._ended = np.zeros(config.num_envs, bool)
        ctx = mp.get_context(_config.mp_start_method(config.start_method))
        fields = {f: getattr(config, f) for f in config.__dataclass_fields__}
        try:
            for i in range(config.num_envs):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_pipe_worker, args=(child, fields, i, preprocess),
                                daemon=True,
                                name=f"shmatari-pipe-{i}")
                with atari.child_environment():
                    p.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(p)
            self.worker_pids = [p.pid for p in self._procs]
            replies = [self._receive(i) for i in range(config.num_envs)]
        except BaseException:
            self.close()
            raise
        n = len(replies[0][1])
        self.single_action_space = gym.spaces.Discrete(n)
        self.action_space = gym.spaces.MultiDiscrete(np.full(config.num_envs, n))
        self.single_observation_space = gym.spaces.Box(0, 255, config.obs_shape, np.uint8)
        self.observation_space = gym.spaces.Box(0, 255, (config.num_envs,) + config.obs_shape,
                                                np.uint8)

    def _receive(self, i: int):
        try:
            msg = self._conns[i].recv()
        except (EOFError, ConnectionResetError, OSError) as exc:
            p = self._procs[i]
            p.join(1.0)
            raise WorkerError.of(f"pipe worker {i}", p.pid, range(i, i + 1),
                                 f"died: exit code {p.exitcode}", worker=i,
                                 exitcode=p.exitcode) from exc
        if msg[0] == "error":
            raise WorkerError.of(f"pipe worker {i}", self._procs[i].pid, range(i, i + 1),
                                 "failed", worker=i, traceback=msg[1])
        return msg

    def _gather(self, envs):
        """The replies of ``envs``, in order: their observations, shape
        ``(len(envs), *obs_shape)``, and result fields by name (with
        ``ram_info``, ``"ram"``: uint8, shape ``(len(envs), 128)``)."""
        replies = [self._receive(i) for i in envs]
        obs = np.stack([r[1] for r in replies])
        cols = zip(*(r[2] for r in replies))
        dtypes = dict(_core.FIELDS)
        fields = {name: np.asarray(col, dtypes[name])
                  for name, col in zip(_core.RESULT_FIELDS, cols)}
        fields["env_id"] = np.asarray(envs, dtype=dtypes["env_id"])
        if self.config.ram_info:
            fields["ram"] = np.frombuffer(b"".join(r[3] for r in replies),
                                          np.uint8).reshape(len(envs), -1).copy()
        return obs, fields

    def _results(self, obs, fields, final=None, final_obs=None):
        fields = dict(fields)
        ram = fields.pop("ram", None)
        if final is not None:
            final = {k: v for k, v in final.items() if k != "ram"}
        info = results.build_info(fields, final, final_obs,
                                  episode_statistics=self.config.episode_statistics)
        if ram is not None:
            info["ram"] = ram
        return (obs, fields["reward"], fields["terminated"].astype(bool),
                fields["truncated"].astype(bool), info)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Resets every env, or with ``options={"reset_mask": mask}`` the envs
        in ``mask`` (the others return their current observation, nothing
        emulated, ``info["reset"]`` False; ``info`` then also holds each
        row's ``reward``, ``terminated`` and ``truncated``); ``seed`` and
        ``options`` as :meth:`shmatari.ShmVectorEnv.reset`.

        Raises:
            TypeError, ValueError: a bad seed or options (checked as
                :meth:`shmatari.ShmVectorEnv.reset` checks them).
            CallOrderError: a ``reset_mask`` before the first full reset.
            WorkerError, PoolClosedError: a worker failed, or the env is closed.
        """
        if self.closed:
            raise PoolClosedError(CLOSED)
        mask = check_reset_options(seed, options, self.num_envs)
        if mask is not None:
            if self._needs_reset:
                raise CallOrderError("reset(options={'reset_mask': ...}) resets some envs "
                                     "of a running pool: call reset() without one first")
            msgs = [("reset", None) if m else ("observe", None) for m in mask]
        elif seed is None:
            msgs = [("reset", None)] * self.num_envs
        else:
            seed = seeding.check_seed(seed)
            self.seed_entropy = seed
            msgs = [("reseed", seed)] * self.num_envs
        for c, msg in zip(self._conns, msgs):
            c.send(msg)
        obs, fields = self._gather(range(self.num_envs))
        if mask is None:
            self._needs_reset = False
            self._ended[:] = False
        else:
            self._ended &= ~mask
        obs, reward, terminated, truncated, info = self._results(obs, fields)
        add_row_results(info, options, reward, terminated, truncated)  # as a pool's
        return obs, info

    def step(self, actions):
        """Steps every env; arguments, results and errors as
        :meth:`shmatari.ShmVectorEnv.step` (the autoreset mode: see the class
        docstring).

        Raises:
            CallOrderError: before the first reset; or with
                ``autoreset_mode="disabled"``, an env whose episode has ended
                (nothing is sent).
        """
        if self.closed:
            raise PoolClosedError(CLOSED)
        if self._needs_reset:
            raise CallOrderError("call reset() before stepping")
        a = np.asarray(actions)
        if a.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers (action indices), got dtype {a.dtype}")
        if a.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), got {a.shape}")
        n = self.single_action_space.n
        if a.min() < 0 or a.max() >= n:
            raise ValueError(f"actions must be in 0..{n - 1}, got {a.tolist()}")
        mode = self.autoreset_mode
        if mode is AutoresetMode.DISABLED and self._ended.any():
            raise CallOrderError(
                f"env(s) {np.flatnonzero(self._ended).tolist()} ended their episode and "
                f"autoreset_mode is 'disabled': reset them first with "
                f"reset(options={{'reset_mask': mask}})")
        for c, act, ended in zip(self._conns, a.tolist(), self._ended):
            # next_step: an env whose last step ended its episode resets now, its action ignored.
            c.send(("reset", None) if ended and mode is AutoresetMode.NEXT_STEP
                   else ("step", act))
        obs, fields = self._gather(range(self.num_envs))
        done = fields["terminated"].astype(bool) | fields["truncated"].astype(bool)
        final = final_obs = None
        if mode is AutoresetMode.SAME_STEP and done.any():
            # The done envs reset within this step; the step's own result is the final one.
            ended = np.flatnonzero(done).tolist()
            for i in ended:
                self._conns[i].send(("reset", None))
            reset_obs, reset_fields = self._gather(ended)
            final, final_obs = fields, obs
            obs = obs.copy()
            obs[ended] = reset_obs
            fields = {k: v.copy() for k, v in fields.items()}
            for k, v in reset_fields.items():
                if k not in ("reward", "terminated", "truncated"):
                    fields[k][ended] = v
            fields["flags"][ended] |= _core.FLAG_FINAL
            done[:] = False
        self._ended = done
        return self._results(obs, fields, final, final_obs)

    def close_extras(self, **kwargs) -> None:
        for c in self._conns:
            try:
                c.send(("close", None))
            except OSError:
                pass
        # One deadline for all, then SIGTERM, then SIGKILL: a stopped process
        # ignores SIGTERM until resumed, and multiprocessing's exit handler
        # then joined it without a limit (the interpreter never exited), after
        # 3 s per process here.
        for sig, seconds in ((None, 2.0), ("terminate", 1.0), ("kill", 1.0)):
            alive = [p for p in self._procs if p.exitcode is None]
            if not alive:
                break
            for p in alive if sig else ():
                getattr(p, sig)()
            end = time.monotonic() + seconds
            for p in alive:
                p.join(max(0.0, end - time.monotonic()))
        for c in self._conns:
            c.close()
        self._conns, self._procs = [], []

    def close(self, **kwargs) -> None:
        if not self.closed:
            self.close_extras()
            self.closed = True

    def __del__(self):
        if not getattr(self, "closed", True):
            self.close()
