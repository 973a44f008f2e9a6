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
logic (frame skip, no-ops, FIRE, lives, caps, autoreset, statistics) is
shmatari's own :class:`shmatari._core.AtariCore`, compiled, so the baseline is
if anything faster than a pure-Python one. It is neither slowed on purpose nor
given shared memory. ``preprocess="kernel"`` runs shmatari's fused kernel in
the workers instead: then the two differ only in how data crosses processes.
"""

from __future__ import annotations

import multiprocessing as mp
import signal

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from . import _core, atari, config as _config, results, seeding
from ._vector_extras import Closing
from .errors import CallOrderError, PoolClosedError, WorkerError

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
    try:
        pre = OpenCVPreprocessing(cfg) if preprocess == "opencv" else None
        core = atari.build_core(cfg, index, atari.build_palette(cfg), preprocessor=pre)
        obs = np.empty(cfg.obs_shape, np.uint8)
        conn.send(("ready", core.action_ids()))
        while True:
            cmd, arg = conn.recv()
            if cmd == "step":
                core.step(arg)
            elif cmd == "reset":
                core.reset()
            elif cmd == "reseed":
                atari.reseed_core(core, cfg.env_index_offset + index, arg)
                core.reset()
            elif cmd == "close":
                break
            core.obs_into(obs)
            conn.send(("ok", obs, core.result()))
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
        As :func:`shmatari.make`; ValueError for an ``autoreset_mode`` other
        than ``"next_step"`` (the only one the baseline implements) or an
        unknown ``preprocess``; ImportError for ``"opencv"`` without OpenCV.
    """
    cfg = _config.build_config(env_id, num_envs, seed=seed, start_method=start_method,
                               num_workers=num_envs, preset=preset, **options)
    if cfg.autoreset_mode != "next_step":
        raise ValueError(f"the pipe baseline implements autoreset_mode='next_step' only, "
                         f"got {cfg.autoreset_mode!r}")
    return PipeVectorEnv(cfg, preprocess=preprocess)


class PipeVectorEnv(Closing, gym.vector.VectorEnv):
    """The pipe-based baseline, with :class:`shmatari.ShmVectorEnv`'s API, spaces,
    options, seeding and results (synchronous ``reset`` and ``step`` only).

    Args:
        config: a validated configuration (:func:`make_pipe` builds one).
        preprocess: ``"opencv"`` or ``"kernel"`` (see the module docstring).

    Raises:
        ValueError: an unknown ``preprocess``.
        ImportError: ``"opencv"`` without OpenCV installed.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, config: _config.EnvConfig, preprocess: str = "opencv"):
        self._conns, self._procs = [], []
        self.closed = True  # until the workers exist
        if preprocess not in PREPROCESSING:
            raise ValueError(f"preprocess must be one of {PREPROCESSING}, got {preprocess!r}")
        if preprocess == "opencv" and config.game != _config.NULL_ENV:
            import cv2  # noqa: F401 - fail here, not in every worker
        self.preprocess = preprocess
        self.config = config
        self.num_envs = config.num_envs
        self.seed_entropy = config.seed
        self.closed = False
        self._needs_reset = True
        ctx = mp.get_context(_config.mp_start_method(config.start_method))
        fields = {f: getattr(config, f) for f in config.__dataclass_fields__}
        try:
            for i in range(config.num_envs):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_pipe_worker, args=(child, fields, i, preprocess),
                                daemon=True,
                                name=f"shmatari-pipe-{i}")
                with atari.single_threaded_children():
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

    def _gather(self):
        replies = [self._receive(i) for i in range(self.num_envs)]
        obs = np.stack([r[1] for r in replies])
        cols = zip(*(r[2] for r in replies))
        dtypes = dict(_core.FIELDS)
        fields = {name: np.asarray(col, dtypes[name])
                  for name, col in zip(_core.RESULT_FIELDS, cols)}
        fields["env_id"] = np.arange(self.num_envs, dtype=dtypes["env_id"])
        return (obs, fields["reward"], fields["terminated"].astype(bool),
                fields["truncated"].astype(bool), results.build_info(fields))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Resets every env; ``seed`` as :meth:`shmatari.ShmVectorEnv.reset`."""
        if self.closed:
            raise PoolClosedError("the env pool is closed")
        if options:
            raise ValueError(f"reset() takes no options, got {sorted(options)}")
        if seed is None:
            msg = ("reset", None)
        else:
            seed = seeding.check_seed(seed)
            self.seed_entropy = seed
            msg = ("reseed", seed)
        for c in self._conns:
            c.send(msg)
        obs, _, _, _, info = self._gather()
        self._needs_reset = False
        return obs, info

    def step(self, actions):
        """Steps every env; arguments, results and errors as
        :meth:`shmatari.ShmVectorEnv.step`."""
        if self.closed:
            raise PoolClosedError("the env pool is closed")
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
        for c, act in zip(self._conns, a.tolist()):
            c.send(("step", act))
        return self._gather()

    def close_extras(self, **kwargs) -> None:
        for c in self._conns:
            try:
                c.send(("close", None))
            except OSError:
                pass
        for p in self._procs:
            p.join(2.0)
            if p.exitcode is None:
                p.terminate()
                p.join(1.0)
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
