"""Building ALE envs inside a worker process.

The same functions build the envs of shmatari's workers, of the pipe baseline
and of the benchmark's ceiling, so all of them do the same work per step.
"""

from __future__ import annotations

import contextlib
import os

from . import _core, fast_reset, games, seeding
from .config import NULL_ENV, EnvConfig

__all__ = ["quiet_process", "build_palette", "build_core", "reseed_core"]

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


#: Set in the environment of the processes a pool starts, unless the parent
#: set them itself: the thread-pool variables, and ``PYTHONSAFEPATH``.
_CHILD_VARS = _THREAD_VARS + ("PYTHONSAFEPATH",)


@contextlib.contextmanager
def child_environment():
    """While it is open, processes started (and a fork server or resource
    tracker started) get, where the parent has not set them:

    - the thread-pool variables set to 1, so that NumPy's BLAS, imported
      before the worker runs any code of ours, starts no extra threads;
    - ``PYTHONSAFEPATH=1`` (Python >= 3.11, as the zygote's ``-P``):
      multiprocessing starts its spawn and forkserver workers, its fork
      server and its resource tracker as ``python -c ...``, whose
      ``sys.path`` otherwise begins with the current folder, so that a
      ``multiprocessing`` package planted in a folder others can write, a
      pool started from there, ran in those processes as the trainer's
      user (an attacker's pass).

    The parent's own environment is restored afterwards; variables it set
    itself are kept.
    """
    saved = {var: os.environ.get(var) for var in _CHILD_VARS}
    for var, value in saved.items():
        if value is None:
            os.environ[var] = "1"
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)


def quiet_process() -> None:
    """Keeps a worker to one thread and silences ALE's banner and logs.

    BLAS and OpenMP pools that NumPy (or anything else) already started are
    limited to one thread with threadpoolctl; the variables cover libraries
    loaded later, and OpenCV, if loaded, gets one thread too.
    """
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    import sys

    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)
    cv2 = sys.modules.get("cv2")  # None where an import of it was blocked
    if cv2 is not None:
        cv2.setNumThreads(1)
    from ale_py import ALEInterface, LoggerMode

    ALEInterface.setLoggerMode(LoggerMode.Error)


def build_palette(config: EnvConfig) -> _core.Palette:
    """The frame processor shared by the envs of one process: from the game's
    screen (``config.screen_shape``) to the observation's frame size, planar
    with ``obs_layout="channels_first"``."""
    return _core.Palette(config.screen_shape, (config.img_height, config.img_width),
                         grayscale=config.grayscale,
                         planar=config.obs_layout == "channels_first")


_RENDER_PALETTES: dict = {}


def render_palette(config: EnvConfig) -> _core.Palette | None:
    """The RGB palette that ``render_mode="rgb_array"`` envs of one process
    share (the observations' own when they are RGB), or None.

    Keyed by screen size, not by game: ALE colours an index by the ROM's TV
    standard, and in ale-py 0.12 that follows the screen: the 250-row games
    (PAL ROMs) colour some indices unlike the 210-row ones. Checked on
    2026-12-05 over the 104 listed games, 400 frames each: no two games of
    one screen size colour a shown index differently. (A worker hosts one
    game anyway.)"""
    if config.render_mode is None:
        return None
    key = tuple(config.screen_shape)
    if key not in _RENDER_PALETTES:
        _RENDER_PALETTES[key] = _core.Palette(key, key, grayscale=False)
    return _RENDER_PALETTES[key]


def _new_ale(config: EnvConfig, index: int, seed: int, restart: int = 0, generation: int = 0):
    from ale_py import ALEInterface

    ale = ALEInterface()
    ale.setInt("random_seed", seeding.ale_seed(seed, index, restart, generation))
    ale.setFloat("repeat_action_probability", config.repeat_action_probability)
    ale.setInt("frame_skip", 1)
    ale.loadROM(games.rom_path(config.game))
    if tuple(ale.getScreenDims()) != tuple(config.screen_shape):
        raise RuntimeError(f"{config.game}: ALE's screen is {tuple(ale.getScreenDims())}, but "
                           f"the pool was configured for {tuple(config.screen_shape)}")
    return ale


def build_core(config: EnvConfig, index: int, palette: _core.Palette,
               preprocessor=None, restart: int = 0) -> _core.EnvCore:
    """Env ``index`` of a pool: its own ``ALEInterface``, seeded from
    (config.seed, index), or after its worker's ``restart``-th restart from
    (config.seed, index, restart), as :mod:`shmatari.seeding` documents; or a
    :class:`shmatari._core.NullCore` for the null env. ``preprocessor``
    replaces shmatari's frame kernel (see :class:`shmatari._core.AtariCore`).
    Seeds take ``config.env_index_offset + index`` as the env's index, and
    ``config.pool_generation`` (both 0 unless the pool is a slice of a larger
    one, as :mod:`shmatari.ray` builds)."""
    if config.game == NULL_ENV:
        return _core.NullCore(config.obs_shape[1:], stack_num=config.stack_num)
    index += config.env_index_offset
    gen = config.pool_generation
    ale = _new_ale(config, index, config.seed, restart, gen)
    action_set = ale.getLegalActionSet() if config.full_action_space else ale.getMinimalActionSet()
    return _core.AtariCore(
        ale, palette, action_set, games.rom_path(config.game),
        frame_skip=config.frame_skip, stack_num=config.stack_num,
        maxpool=config.maxpool, noop_max=config.noop_max,
        episodic_life=config.episodic_life, use_fire_reset=config.use_fire_reset,
        reward_clip=config.reward_clip,
        # None (no cap) in the config is 0 in the core's int64 fields
        max_episode_frames=config.max_episode_frames or 0,
        max_episode_steps=config.max_episode_steps or 0,
        noop_rng=seeding.noop_rng(config.seed, index, restart, gen),
        same_step=config.autoreset_mode == "same_step", preprocessor=preprocessor,
        render_palette=palette if config.render_mode and not config.grayscale
        else render_palette(config),
        fast_reset=fast_reset.use_fast_reset(config, preprocessor))


def reseed_core(core: _core.EnvCore, index: int, seed: int) -> None:
    """Re-derives env ``index``'s streams from a new pool seed (``index``
    counts ``env_index_offset`` in: the caller adds it)."""
    if isinstance(core, _core.AtariCore):
        core.reseed(seeding.ale_seed(seed, index), seeding.noop_rng(seed, index))
