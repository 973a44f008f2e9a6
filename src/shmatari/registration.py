"""Gymnasium ids for shmatari pools: ``shmatari/<Game>-v5``, one per ale-py ROM.

Gymnasium 1.x has no plugin loader (its ``gymnasium.envs`` entry-point
group went away in 1.0), so ids exist once a module registers them, as
``import ale_py`` registers ``ALE/...``. Either import this module, or name it
in the id, which Gymnasium imports for you::

    import shmatari.registration
    env = gymnasium.make_vec("shmatari/Breakout-v5", num_envs=8, seed=0)
    env = gymnasium.make_vec("shmatari.registration:shmatari/Breakout-v5", num_envs=8)

Each id has two entry points:

- ``gymnasium.make_vec(id, num_envs)`` (:func:`make_vec`, the vector entry
  point) builds one pool of ``num_envs`` envs; its keywords are
  :func:`shmatari.make`'s.
- ``gymnasium.make(id)`` (:func:`make_env`) gives one env,
  :class:`ShmAtariEnv`: a plain ``gymnasium.Env`` over a pool of one, with
  the pool's per-env semantics. So ``make_vec(id, n,
  vectorization_mode="sync" | "async")`` (Gymnasium's own vector envs of
  single envs) and TorchRL's ``GymEnv(id, num_envs=n)`` work too.

Both take ale-py's argument names where they mean the same as shmatari's
(``frameskip``, ``max_num_frames_per_episode``, ``reward_clipping``,
``num_threads``, ``obs_type``, ...: :data:`ALE_ALIASES`) and refuse, naming
the alternative, those that do not (:func:`ale_kwargs`).

Episode statistics: a plain ``make_vec`` env, as Gymnasium's own, leaves them
to ``gymnasium.wrappers.vector.RecordEpisodeStatistics`` (which refuses an
``info`` that has ``episode`` already), so these pools are made with
:func:`shmatari.make`'s option ``episode_statistics=False`` unless
``episode_statistics=True`` is passed.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from . import games
from .env import ShmVectorEnv
from .errors import CallOrderError
from .env import make as _make

__all__ = ["register_envs", "make_vec", "make_env", "env_ids", "ShmAtariEnv", "ale_kwargs",
           "ALE_ALIASES"]

NAMESPACE = "shmatari"


def _name(rom: str) -> str:
    return "".join(part.capitalize() for part in rom.split("_"))


def env_ids() -> list[str]:
    """Every id this module registers: ``shmatari/<Game>-v5``."""
    return [f"{NAMESPACE}/{_name(rom)}-v5" for rom in games.list_games()]


#: ale-py's argument names (``AtariEnv``, ``AtariVectorEnv``, ale-py 0.11+)
#: that mean what a shmatari option means, and that option.
#: ``reward_clipping`` (AtariVectorEnv) is the sign of the reward, as
#: ``reward_clip``; ``num_threads`` (AtariVectorEnv: threads, 0 = one per
#: core) becomes ``num_workers`` (worker processes; 0 = the default, one per
#: core). Names both take (``repeat_action_probability``,
#: ``full_action_space``, ``render_mode``, ``grayscale``, ``stack_num``,
#: ``img_height``, ``img_width``, ``noop_max``, ``maxpool``,
#: ``episodic_life``, ``use_fire_reset``, ``batch_size``,
#: ``autoreset_mode``) need no alias.
ALE_ALIASES = {
    "frameskip": "frame_skip",
    "max_num_frames_per_episode": "max_episode_frames",
    "reward_clipping": "reward_clip",
    "num_threads": "num_workers",
}

#: ale-py arguments whose only value shmatari has is the default (the value
#: allowed, and what to do instead).
_ALE_DEFAULT_ONLY = {
    "mode": (None, "shmatari plays each game's default mode"),
    "difficulty": (None, "shmatari plays each game's default difficulty"),
    "continuous": (False, "shmatari has discrete actions only"),
    "sound_obs": (False, "shmatari has no sound observations"),
    "life_loss_info": (False, "use episodic_life=True (a lost life ends the episode with "
                              "terminated, as SB3's EpisodicLifeEnv)"),
    "thread_affinity_offset": (-1, "pin workers with shmatari.envpool.make(..., "
                                   "thread_affinity_offset=k)"),
}


def ale_kwargs(kwargs: dict, *, single: bool) -> tuple[dict, bool]:
    """ale-py's argument names translated to shmatari's options.

    Args:
        kwargs: keywords for :func:`shmatari.make` that may use ale-py's
            names (:data:`ALE_ALIASES`) and ``obs_type``.
        single: for one env (``AtariEnv``'s names) rather than a pool.

    Returns:
        (options, ram_obs): shmatari's options, and whether
        ``obs_type="ram"`` asked for RAM observations (one env only).

    Raises:
        TypeError: an alias and its shmatari name both given, or
            ``num_threads`` for one env.
        ValueError: an ale-py argument whose meaning shmatari does not have
            (a tuple ``frameskip``, ``continuous=True``, a ``mode``, ...),
            naming the alternative.
    """
    out = dict(kwargs)
    for ale_name, name in ALE_ALIASES.items():
        if ale_name not in out:
            continue
        if name in out:
            raise TypeError(f"{ale_name!r} is ale-py's name for {name!r}: give one of them")
        value = out.pop(ale_name)
        if ale_name == "num_threads":
            if single:
                raise TypeError("num_threads is an AtariVectorEnv argument; one env has one "
                                "worker process")
            value = value or None  # 0: one per core, shmatari's default
        if ale_name == "frameskip" and not isinstance(value, (int, np.integer)):
            raise ValueError(f"frameskip={value!r}: shmatari skips a fixed number of frames "
                             f"(an int); ale-py's random frame skip (a tuple) is not supported")
        out[name] = value
    for ale_name, (allowed, instead) in _ALE_DEFAULT_ONLY.items():
        if ale_name in out and out.pop(ale_name) != allowed:
            raise ValueError(f"{ale_name}={kwargs[ale_name]!r} is not supported: {instead}")
    out.pop("continuous_action_threshold", None)  # no meaning without continuous
    ram_obs = False
    if "obs_type" in out:
        obs_type = out.pop("obs_type")
        if obs_type in ("rgb", "grayscale"):
            # ale-py's full-size screen; shmatari's frames are resized
            # (img_height x img_width) and stacked either way.
            if "grayscale" in out:
                raise TypeError("obs_type and grayscale both given: give one of them")
            out["grayscale"] = obs_type == "grayscale"
        elif obs_type == "ram" and single:
            ram_obs = True
        elif obs_type == "ram":
            raise ValueError("obs_type='ram' is for one env (gymnasium.make); a pool gives "
                             "RAM in info['ram'] with ram_info=True")
        else:
            raise ValueError(f"obs_type must be 'rgb', 'grayscale' or 'ram', got {obs_type!r}")
    return out, ram_obs


def make_vec(num_envs: int = 1, *, game: str, episode_statistics: bool = False,
             **kwargs) -> ShmVectorEnv:
    """The vector entry point of ``shmatari/<Game>-v5``.

    Args:
        num_envs: envs in the pool.
        game: the ROM id (set by the registration).
        episode_statistics: keep shmatari's ``info["episode"]``; False
            (default) leaves it to ``RecordEpisodeStatistics``. With
            ``autoreset_mode="same_step"`` pass True and do not wrap:
            Gymnasium 1.2's and 1.3's wrapper (not 1.4's) counts every
            episode after an env's first one step short there
            (docs/migration.md).
        **kwargs: :func:`shmatari.make`'s arguments (``seed``,
            ``batch_size``, ``frame_skip``, ``autoreset_mode``, ...), or
            ale-py's names for them (:func:`ale_kwargs`).

    Returns:
        ShmVectorEnv: a ``gymnasium.vector.VectorEnv``.

    Raises:
        TypeError: an unknown option.
        ValueError, SharedMemorySpaceError, WorkerError: as :func:`shmatari.make`
            and :func:`ale_kwargs`.
    """
    kwargs, _ = ale_kwargs(kwargs, single=False)
    if not isinstance(episode_statistics, bool):
        raise TypeError(f"episode_statistics must be a bool, got {episode_statistics!r}")
    # every argument of make() (start_timeout and batch_order were refused
    # here: a fuzzing pass)
    return _make(game, num_envs, episode_statistics=episode_statistics, **kwargs)


def make_env(*, game: str, **kwargs) -> "ShmAtariEnv":
    """The entry point of ``gymnasium.make("shmatari/<Game>-v5", **kwargs)``:
    ``ShmAtariEnv(game, **kwargs)``."""
    return ShmAtariEnv(game, **kwargs)


class ShmAtariEnv(gym.Env):
    """One Atari env: a ``gymnasium.Env`` over a shmatari pool of one env
    (one worker process), with the pool's per-env semantics (docs/semantics.md).

    ``reset()`` returns ``(obs, info)``, ``step(action)`` returns ``(obs,
    reward, terminated, truncated, info)``: ``obs`` uint8 ``(stack_num,
    img_height, img_width)`` (``(..., 3)`` in RGB; with ``obs_type="ram"``
    the console RAM, uint8 ``(128,)``), ``reward`` a float, the flags bools,
    ``info`` the pool's info keys for this env, as scalars (``lives``,
    ``raw_reward``, ``game_over``, ``elapsed_step``, ...). There is no
    autoreset, as with Gymnasium's single envs: after a done step call
    ``reset()`` (stepping first raises CallOrderError). Episode statistics
    are left to ``gymnasium.wrappers.RecordEpisodeStatistics``, which counts
    *episodes*: under ``episodic_life`` (``preset="dqn"``) each life, with
    clipped rewards. With ``episode_statistics=True`` the env gives the
    game's own totals instead, ``info["episode"] = {"r", "l", "t",
    "frames"}`` (raw score, agent steps, seconds, frames) on the step that
    ended the game, CleanRL's ``episodic_return`` (do not add
    ``RecordEpisodeStatistics`` then: it refuses an ``info`` that has
    ``episode`` already).
    ``reset(seed=s)`` seeds the env as env 0 of a pool seeded with ``s``
    (``SeedSequence(s, spawn_key=(0,))``, :mod:`shmatari.seeding`).

    Its observations are preprocessed already (frame skip, max-pool,
    resize, frame stack: the options): Gymnasium's ``AtariPreprocessing``
    refuses it ("Disable frame-skipping in the original env", whatever
    ``frameskip`` was passed; with its own ``frame_skip=1`` it fails at
    ``reset``, the env having no ``ale``) and ``FrameStackObservation``
    would stack the stacks; set ``frame_skip``, ``stack_num``,
    ``img_height``, ... instead.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}

    @property
    def ale(self):
        """Refused, naming what to use instead: the emulator runs in the
        env's worker process. Wrappers that drive it (SB3's ``AtariWrapper``,
        whose ``NoopResetEnv`` read ``env.unwrapped.ale`` at the first
        ``reset()``, Gymnasium's ``AtariPreprocessing``) failed with a bare
        "object has no attribute 'ale'" (a client-code pass, 2026-12-06).

        Raises:
            AttributeError: always.
        """
        raise AttributeError(
            "this env has no ale (ALEInterface): the emulator runs in the env's worker "
            "process, which preprocesses the frames itself (frame skip, max-pool, resize, "
            "stack). Wrappers that drive the emulator, such as Stable-Baselines3's "
            "AtariWrapper (NoopResetEnv, MaxAndSkipEnv, EpisodicLifeEnv, FireResetEnv, "
            "ClipRewardEnv) or Gymnasium's AtariPreprocessing, do not apply: pass "
            "preset='dqn' (no-op starts, episodic life, FIRE reset, clipped rewards) or "
            "the options themselves, or use shmatari.sb3.make_atari_env")

    def __init__(self, game: str, *, seed: int | None = None, start_method: str | None = None,
                 **options):
        """Makes the env's pool of one.

        Args:
            game: the game (any spelling :func:`shmatari.resolve_game` takes).
            seed: the pool seed until ``reset(seed=...)`` gives another
                (None: fresh entropy).
            start_method: as :func:`shmatari.make`'s.
            **options: :func:`shmatari.make`'s env options (not
                ``autoreset_mode``, ``batch_size``, ``num_workers``), or
                ale-py's ``AtariEnv`` names for them (:func:`ale_kwargs`:
                ``frameskip``, ``max_num_frames_per_episode``,
                ``obs_type``, ...).

        Raises:
            TypeError: a pool-only or unknown option.
            ValueError, SharedMemorySpaceError, WorkerError: as
                :func:`shmatari.make` and :func:`ale_kwargs`.
        """
        options, self._ram_obs = ale_kwargs(options, single=True)
        pool_only = sorted({"num_envs", "autoreset_mode", "batch_size", "num_workers",
                            "zero_copy", "restart_workers"} & set(options))
        if pool_only:
            raise TypeError(f"{pool_only} apply to pools: one env has no autoreset and one "
                            f"worker (use gymnasium.make_vec or shmatari.make for a pool)")
        options.setdefault("episode_statistics", False)
        if self._ram_obs:
            options["ram_info"] = True
        self.pool = _make(game, 1, num_workers=1, seed=seed, start_method=start_method,
                          autoreset_mode="disabled", **options)
        self.action_space = self.pool.single_action_space
        self.observation_space = (gym.spaces.Box(0, 255, (128,), np.uint8) if self._ram_obs
                                  else self.pool.single_observation_space)
        self._ended = False
        self.render_mode = self.pool.render_mode
        self.metadata = dict(type(self).metadata, render_fps=self.pool.metadata["render_fps"])

    def _out(self, obs: np.ndarray, info: dict) -> tuple:
        one = {k: v[0] for k, v in info.items() if isinstance(v, np.ndarray)}
        one.pop("env_id", None)
        one.pop("_episode", None)
        episode = info.get("episode")
        if isinstance(episode, dict) and bool(info.get("_episode", [False])[0]):
            # episode_statistics=True: the game's totals on the step that
            # ended it, as scalars, where Gymnasium's single-env
            # RecordEpisodeStatistics puts them (they were dropped, and
            # the option was silently ignored: a client-code pass, 2026-12-06)
            one["episode"] = {k: v[0].item() for k, v in episode.items()}
        return (one["ram"] if self._ram_obs else obs[0]), one

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Starts the env's next episode (after a life lost under
        ``episodic_life``, the game goes on, as the pool's reset).

        Args:
            seed: None continues the env's random streams; an int re-derives them.
            options: None only.

        Returns:
            (obs, info).

        Raises:
            ValueError: options given.
            TypeError: a bad seed.
            WorkerError, PoolClosedError: as :meth:`shmatari.ShmVectorEnv.reset`.
        """
        super().reset(seed=seed)
        if options:
            raise ValueError(f"reset() of one shmatari env takes no options, got {options!r}")
        obs, info = self.pool.reset(seed=seed)
        self._ended = False
        return self._out(obs, info)

    def step(self, action):
        """One agent step with ``action`` (an int in ``action_space``).

        Returns:
            (obs, reward, terminated, truncated, info).

        Raises:
            ValueError, TypeError: an action outside ``action_space``.
            CallOrderError: before ``reset()``, or after a done step.
            WorkerError, PoolClosedError: as :meth:`shmatari.ShmVectorEnv.step`.
        """
        if self._ended:
            raise CallOrderError("step(): the episode ended (terminated or truncated) at the "
                                 "last step, and one env does not reset itself (as "
                                 "Gymnasium's single envs): call reset() first")
        obs, reward, terminated, truncated, info = self.pool.step(
            np.asarray(action).reshape(1))
        obs, info = self._out(obs, info)
        self._ended = bool(terminated[0]) or bool(truncated[0])
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def render(self) -> np.ndarray:
        """The full-size RGB screen (uint8 ``(H, W, 3)``), with
        ``render_mode="rgb_array"``.

        Raises:
            ValueError: made without ``render_mode="rgb_array"``.
        """
        return self.pool.render()[0]

    def get_action_meanings(self) -> list[str]:
        """ALE's name of each action index, as ale-py's ``AtariEnv``."""
        return self.pool.get_action_meanings()

    def close(self) -> None:
        """Stops the env's worker and removes its segment; idempotent."""
        self.pool.close()

    def __repr__(self) -> str:
        return f"ShmAtariEnv({self.pool.config.game!r})"


def register_envs() -> None:
    """Registers ``shmatari/<Game>-v5`` for every ROM ale-py ships (idempotent)."""
    for rom in games.list_games():
        env_id = f"{NAMESPACE}/{_name(rom)}-v5"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=f"{__name__}:make_env",
                         vector_entry_point=f"{__name__}:make_vec", kwargs={"game": rom})


register_envs()
