"""Gymnasium ids for shmatari pools: ``shmatari/<Game>-v5``, one per ale-py ROM.

Gymnasium 1.x has no plugin loader (its ``gymnasium.envs`` entry-point
group went away in 1.0), so ids exist once a module registers them, as
``import ale_py`` registers ``ALE/...``. Either import this module, or name it
in the id, which Gymnasium imports for you::

    import shmatari.registration
    env = gymnasium.make_vec("shmatari/Breakout-v5", num_envs=8, seed=0)
    env = gymnasium.make_vec("shmatari.registration:shmatari/Breakout-v5", num_envs=8)

Each id has only a vector entry point (:func:`make_vec`):
``gymnasium.make_vec`` builds one pool of ``num_envs`` envs, and its
keywords are :func:`shmatari.make`'s. ``gymnasium.make`` (one env) is not
offered: a pool of one is ``make_vec(..., num_envs=1)``.

Episode statistics: a plain ``make_vec`` env, as Gymnasium's own, leaves them
to ``gymnasium.wrappers.vector.RecordEpisodeStatistics`` (which refuses an
``info`` that has ``episode`` already), so these pools are made with
:func:`shmatari.make`'s option ``episode_statistics=False`` unless
``episode_statistics=True`` is passed.
"""

from __future__ import annotations

import gymnasium as gym

from . import config as _config
from . import games
from .env import ShmVectorEnv

__all__ = ["register_envs", "make_vec", "env_ids"]

NAMESPACE = "shmatari"


def _name(rom: str) -> str:
    return "".join(part.capitalize() for part in rom.split("_"))


def env_ids() -> list[str]:
    """Every id this module registers: ``shmatari/<Game>-v5``."""
    return [f"{NAMESPACE}/{_name(rom)}-v5" for rom in games.list_games()]


def make_vec(num_envs: int = 1, *, game: str, episode_statistics: bool = False,
             **kwargs) -> ShmVectorEnv:
    """The vector entry point of ``shmatari/<Game>-v5``.

    Args:
        num_envs: envs in the pool.
        game: the ROM id (set by the registration).
        episode_statistics: keep shmatari's ``info["episode"]``; False
            (default) leaves it to ``RecordEpisodeStatistics``.
        **kwargs: :func:`shmatari.make`'s arguments (``seed``,
            ``batch_size``, ``frame_skip``, ``autoreset_mode``, ...).

    Returns:
        ShmVectorEnv: a ``gymnasium.vector.VectorEnv``.

    Raises:
        TypeError: ``max_episode_steps`` (shmatari caps frames: use
            ``max_episode_frames``) or an unknown option.
        ValueError, SharedMemorySpaceError, WorkerError: as :func:`shmatari.make`.
    """
    if "max_episode_steps" in kwargs:
        raise TypeError("shmatari caps episodes in emulator frames: use max_episode_frames "
                        "(frame_skip frames per step, no-ops included), not max_episode_steps")
    if not isinstance(episode_statistics, bool):
        raise TypeError(f"episode_statistics must be a bool, got {episode_statistics!r}")
    pool_kwargs = {k: kwargs.pop(k) for k in ("batch_size", "num_workers", "seed",
                                              "start_method", "zero_copy", "restart_workers",
                                              "preset") if k in kwargs}
    cfg = _config.build_config(game, num_envs, **pool_kwargs,
                               episode_statistics=episode_statistics, **kwargs)
    return ShmVectorEnv(cfg)


def register_envs() -> None:
    """Registers ``shmatari/<Game>-v5`` for every ROM ale-py ships (idempotent)."""
    for rom in games.list_games():
        env_id = f"{NAMESPACE}/{_name(rom)}-v5"
        if env_id not in gym.registry:
            gym.register(id=env_id, vector_entry_point=f"{__name__}:make_vec", kwargs={"game": rom})


register_envs()
