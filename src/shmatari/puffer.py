"""PufferLib on a shmatari pool: the vector env its trainer drives.

PufferLib's trainer (``PuffeRL`` in ``pufferlib/pufferl.py``, PufferLib
3.0) talks to a vectorized env through ``async_reset(seed)``, ``recv()``,
``send(actions)`` and ``close()``, and reads ``num_agents``,
``agents_per_batch``, ``single_observation_space``,
``single_action_space`` and ``driver_env``. Importing this module does not
import PufferLib::

    import pufferlib.pufferl as pl
    import shmatari.puffer

    vecenv = shmatari.puffer.make("Breakout", num_envs=16, batch_size=8, seed=0)
    trainer = pl.PuffeRL(config, vecenv, policy)   # config["use_rnn"] as you wish
    try:
        while trainer.global_step < config["total_timesteps"]:
            trainer.evaluate()
            trainer.train()
    finally:
        vecenv.close()
        trainer.utilization.stop()  # PuffeRL's thread; the process waits on it

What the trainer takes for granted, and what this class makes true
(PufferLib 3.0.0, read in its source):

- **Contiguous env ids.** ``recv()``'s ``env_id`` becomes
  ``slice(env_id[0], env_id[-1] + 1)`` of the trainer's storage, so a batch
  must be an ascending run of ids and the same envs each time it comes
  back. An asynchronous pool (``batch_size < num_envs``) is therefore made
  with ``batch_order="fixed"``, whose group ``g`` holds envs ``g, g + G,
  g + 2G, ...`` (``G = num_envs // batch_size``), and ``recv()`` names pool
  env ``e`` as ``(e % G) * batch_size + e // G``: group ``g`` is ids
  ``g * batch_size`` to ``(g + 1) * batch_size - 1``. A synchronous pool's
  ids are the pool's. ``send(actions)`` takes the actions in the rows'
  order, as PuffeRL sends them, and gives each to its pool env.
- **Same-step autoreset.** PuffeRL's advantage reads ``done[t + 1]`` with
  the observation of step ``t + 1``: a row that ends an episode must
  already hold the next episode's first observation. The pool is made with
  ``autoreset_mode="same_step"``; under shmatari's default (``next_step``)
  every game would add a transition from the final observation to the
  reset one, with an action the env ignored.
- **Episode statistics as a list of flat dicts.** ``infos`` is a list with
  one dict ``{"episode_return": r, "episode_length": l}`` per game that
  ended in the batch (``r`` the raw score, ``l`` agent steps, as
  PufferLib's own Atari ``EpisodeStats``); PuffeRL averages each key. A
  dict of arrays (the pool's ``info``) logs nothing there, silently.
- ``terminated`` and ``truncated`` are the pool's; PuffeRL 3.0 stores
  ``terminated`` only (truncation is its TODO), so a game cut by
  ``max_episode_frames`` bootstraps across the reset there.
  ``reward`` is unclipped unless ``reward_clip=True``; PuffeRL clamps to
  [-1, 1] itself.

Not covered: PufferLib's own vectorization (``pufferlib.vector.make``:
this class *is* the vector env) and ``puffer eval``, which takes only its
Serial backend.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from . import config as _config
from .env import ShmVectorEnv
from .env import make as _make
from .errors import CallOrderError

__all__ = ["ShmatariPufferEnv", "make"]


class ShmatariPufferEnv:
    """A shmatari pool with the vector-env API of PufferLib's trainer.

    Args:
        env_id, num_envs, batch_size, seed, **kwargs: as
            :func:`shmatari.make`; ``batch_size`` (default ``num_envs``)
            must divide ``num_envs``. ``autoreset_mode`` defaults to
            ``"same_step"`` and ``batch_order`` to ``"fixed"``, the only
            values taken. With ``episode_statistics=False`` ``infos`` is
            always empty, and PuffeRL logs no episode statistics.

    Attributes:
        num_agents: ``num_envs`` (PufferLib's total agents).
        agents_per_batch: ``batch_size``.
        single_observation_space, single_action_space: the pool's (uint8
            ``(stack_num, img_height, img_width)``, ``Discrete``).
        observation_space, action_space: batched over ``batch_size``.
        pool: the :class:`shmatari.ShmVectorEnv` underneath.

    Raises:
        TypeError: ``num_envs`` or ``batch_size`` is not an int.
        ValueError: either is below 1, ``batch_size`` does not divide ``num_envs``, or
            ``autoreset_mode`` / ``batch_order`` other than the above.
        Whatever :func:`shmatari.make` raises.
    """

    emulated = False  # PufferLib's flag for its own emulation layer

    def __init__(self, env_id: str, num_envs: int = 8, batch_size: int | None = None,
                 seed: int | None = None, **kwargs):
        # make()'s checks first: a float num_envs was refused as a batch_size
        # that does not divide it (a docs review, 2026-12-06)
        num_envs = _config._int("num_envs", num_envs, 1)
        batch_size = num_envs if batch_size is None else _config._int("batch_size", batch_size, 1)
        if num_envs % batch_size:
            raise ValueError(f"batch_size must divide num_envs (PuffeRL stores each batch as "
                             f"a block of the same envs), got batch_size={batch_size!r}, "
                             f"num_envs={num_envs!r}")
        for name, value in (("autoreset_mode", "same_step"), ("batch_order", "fixed")):
            kwargs.setdefault(name, value)
            if kwargs[name] != value:
                raise ValueError(f"{name}={kwargs[name]!r}: PuffeRL needs {name}={value!r} "
                                 f"(see shmatari.puffer's docstring)")
        self.pool: ShmVectorEnv = _make(env_id, num_envs, batch_size=batch_size, seed=seed,
                                        **kwargs)
        self.num_agents = int(num_envs)
        self.agents_per_batch = int(batch_size)
        self._groups = self.num_agents // self.agents_per_batch
        self.single_observation_space = self.pool.single_observation_space
        self.single_action_space = self.pool.single_action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              self.agents_per_batch)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space,
                                                         self.agents_per_batch)
        self._mask = np.ones(self.agents_per_batch, bool)
        self._pool_ids: np.ndarray | None = None  # the last batch's, in row order

    @property
    def driver_env(self) -> "ShmatariPufferEnv":
        """What PufferLib's ``load_policy`` and policies read the spaces from."""
        return self

    def agent_ids(self, env_id: np.ndarray) -> np.ndarray:
        """PufferLib's ids (int64, contiguous per batch) of pool envs ``env_id``."""
        e = np.asarray(env_id, np.int64)
        return (e % self._groups) * self.agents_per_batch + e // self._groups

    def async_reset(self, seed: int | None = None) -> None:
        """Resets every env (``seed``: as :meth:`shmatari.ShmVectorEnv.reset`,
        None continues each env's streams); collect with :meth:`recv`."""
        self._pool_ids = None
        self.pool.async_reset(seed=seed)

    def reset(self, seed: int | None = None):
        """:meth:`async_reset` then :meth:`recv`; returns ``(obs, infos)``."""
        self.async_reset(seed)
        obs, _, _, _, infos, _, _ = self.recv()
        return obs, infos

    def recv(self):
        """Waits for the next batch.

        Returns:
            ``(obs, reward, terminated, truncated, infos, env_id, mask)``:
            uint8 ``(batch_size, *single_observation_space.shape)``, float32,
            bool, bool (each ``(batch_size,)``), a list of one dict per game
            that ended (``episode_return`` float, ``episode_length`` agent
            steps), int64 ids (ascending and contiguous), and an all-True
            bool mask.

        Raises:
            As :meth:`shmatari.ShmVectorEnv.recv`.
        """
        obs, reward, terminated, truncated, info = self.pool.recv()
        self._pool_ids = info["env_id"]
        infos = []
        if "_episode" in info:
            ep = info["episode"]
            infos = [{"episode_return": float(ep["r"][i]), "episode_length": int(ep["l"][i])}
                     for i in np.flatnonzero(info["_episode"])]
        return (obs, reward, terminated, truncated, infos, self.agent_ids(self._pool_ids),
                self._mask)

    def send(self, actions) -> None:
        """Sends one action per row of the last batch received, in its order
        (shape ``(batch_size,)``, integers; a torch or NumPy array).

        Raises:
            CallOrderError: no batch received since the last send or reset.
            As :meth:`shmatari.ShmVectorEnv.send` for bad actions (nothing
            sent).
        """
        if self._pool_ids is None:
            raise CallOrderError("send() before recv(): PuffeRL's order is async_reset(), "
                                 "then recv() and send() in turn")
        self.pool.send(np.asarray(actions).reshape(-1), self._pool_ids)
        self._pool_ids = None

    def step(self, actions):
        """:meth:`send` then :meth:`recv`'s first five items, as PufferLib's
        own ``vector.step``: in an asynchronous pool the rows are the next
        group's, whose ids only :meth:`recv` gives."""
        self.send(actions)
        return self.recv()[:5]

    def close(self) -> None:
        """Closes the pool (idempotent)."""
        self.pool.close()

    def __enter__(self) -> "ShmatariPufferEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make(env_id: str, num_envs: int = 8, batch_size: int | None = None,
         seed: int | None = None, **kwargs) -> ShmatariPufferEnv:
    """A :class:`ShmatariPufferEnv` (same arguments)."""
    return ShmatariPufferEnv(env_id, num_envs, batch_size, seed, **kwargs)
