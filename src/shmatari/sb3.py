"""Stable-Baselines3 on a shmatari pool: a ``VecEnv`` that SB3 accepts.

Importing this module imports SB3 (``import shmatari`` does not)::

    from shmatari.sb3 import make_atari_env           # instead of SB3's
    from stable_baselines3.common.vec_env import VecFrameStack
    env = VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=8, seed=0), n_stack=4)
    PPO("CnnPolicy", env).learn(10_000)

:class:`ShmatariVecEnv` follows SB3's ``VecEnv`` contract (SB3 2.x,
``stable_baselines3/common/vec_env/base_vec_env.py``): envs reset themselves
when done (shmatari's ``autoreset_mode="same_step"`` underneath),
``dones = terminated | truncated``, and each done env's info holds
``terminal_observation`` and ``TimeLimit.truncated``. When a game ends, its
info holds ``episode = {"r", "l", "t"}`` as SB3's ``Monitor`` writes it in
SB3's Atari recipe (``make_atari_env``, where ``Monitor`` wraps the
NoFrameskip env): ``r`` the raw score, ``l`` the game's emulator frames
(no-ops included; agent steps times ``frame_skip``, or fewer on the step
that ends it), ``t`` seconds since the VecEnv was made. So
``env_is_wrapped(Monitor)`` answers True, ``evaluate_policy`` counts games,
not lives, and ``rollout/ep_len_mean`` reads as with SB3's own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import os
import time
import warnings
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
try:
    from stable_baselines3.common.monitor import Monitor, ResultsWriter
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv
except ModuleNotFoundError as exc:  # not a dependency of shmatari itself
    raise ModuleNotFoundError(
        f"shmatari.sb3 needs Stable-Baselines3 ({exc}): python3 -m pip install "
        f"'stable-baselines3>=2.3' (or shmatari's integrations extra)", name=exc.name) from exc

from . import config as _config
from . import seeding
from .config import PRESETS
from .env import ShmVectorEnv
from .env import make as _make

_SYNC_ONLY = ("SB3 steps every env at once: the pool must be synchronous (batch_size == "
              "num_envs), got batch_size={}")

__all__ = ["ShmatariVecEnv", "make_atari_env"]

#: SB3 AtariWrapper keywords -> shmatari options.
_WRAPPER_KWARGS = {
    "noop_max": "noop_max",
    "frame_skip": "frame_skip",
    "terminal_on_life_loss": "episodic_life",
    "clip_reward": "reward_clip",
    "action_repeat_probability": "repeat_action_probability",
}


def _id_settings(env_id: str, env_kwargs: dict) -> tuple[dict, str | None]:
    """What SB3's ``make_atari_env(env_id, env_kwargs=...)`` takes from
    ``env_id`` besides the game: ale-py's registration of the id in Gymnasium
    (``gymnasium.spec(env_id).kwargs``: ``ALE/<Game>-v5`` has
    ``repeat_action_probability=0.25`` and ``frameskip=4``,
    ``<Game>NoFrameskip-v4`` 0.0 and 1), with ``env_kwargs`` over it as
    ``gym.make`` puts them.

    Returns:
        (options, warning): ``{"repeat_action_probability": p}`` (empty for
        an id ale-py does not register, such as ``"Breakout"``), and, where
        the id's env skips frames itself (``frameskip`` not 1) under
        AtariWrapper's skip, what to warn (else None).
    """
    import ale_py

    try:
        gym.register_envs(ale_py)  # ale-py registers its ids on import; idempotent
        spec = gym.spec(env_id.strip())
    except gym.error.Error:
        return {}, None
    if spec.entry_point != "ale_py.env:AtariEnv":
        return {}, None
    options = {}
    if "repeat_action_probability" in spec.kwargs:
        options["repeat_action_probability"] = spec.kwargs["repeat_action_probability"]
    frameskip = env_kwargs.get("frameskip", env_kwargs.get("frame_skip",
                                                          spec.kwargs.get("frameskip", 1)))
    if frameskip == 1:
        return options, None
    return options, (
        f"{env_id!r} is registered with frameskip={frameskip!r} (ale-py): under "
        f"AtariWrapper, which skips frames too, SB3's make_atari_env would act once every "
        f"frameskip x frame_skip frames (16 with the defaults; SB3: 'use this wrapper only "
        f"with Atari v4 without frame skip'). This pool's env skips "
        f"AtariWrapper's frame_skip alone, as with env_kwargs={{'frameskip': 1}}: pass "
        f"that to say so. Its sticky actions are the id's "
        f"(repeat_action_probability={options.get('repeat_action_probability')!r})")


def _step_info(rows: tuple, i: int, time_limit_truncated: bool) -> dict:
    """Row ``i`` of (lives, raw_reward, game_over, episode_frame_number,
    frame_number) as one SB3 info dict, with ``TimeLimit.truncated``."""
    lives, raw, over, episode_frames, frames = rows
    return {"lives": int(lives[i]), "episode_frame_number": int(episode_frames[i]),
            "frame_number": int(frames[i]), "TimeLimit.truncated": time_limit_truncated,
            "raw_reward": float(raw[i]), "game_over": bool(over[i])}


def _reset_info(rows: tuple, i: int) -> dict:
    """Row ``i``'s ``reset_infos`` entry (ale-py's reset info) from the info
    arrays ``rows`` (lives, raw_reward, game_over, episode_frame_number,
    frame_number)."""
    return {"lives": int(rows[0][i]), "episode_frame_number": int(rows[3][i]),
            "frame_number": int(rows[4][i])}


class ShmatariVecEnv(VecEnv):
    """A shmatari pool as an SB3 ``VecEnv``.

    Observations are uint8, channels first: ``(num_envs, stack_num, H, W)``
    in grayscale, ``(num_envs, 3 * stack_num, H, W)`` in RGB (frame i in
    channels 3i..3i+2), as SB3's ``CnnPolicy`` and ``VecFrameStack`` expect.
    With ``obs_layout="channels_last"``: ``(num_envs, H, W, stack_num)``
    and ``(num_envs, H, W, 3 * stack_num)``, the layout of SB3's own
    ``make_atari_env``, which ``VecTransposeImage`` requires.
    Rewards float32, dones bool, shape ``(num_envs,)``; ``infos`` a list of
    ``num_envs`` dicts with ``lives``, ``episode_frame_number`` and
    ``frame_number`` (ale-py's, in emulator frames, no-ops included),
    ``TimeLimit.truncated`` (as SB3's ``DummyVecEnv``), ``raw_reward``
    (unclipped) and ``game_over``; on done steps, those of the step that
    ended the game, ``terminal_observation`` (the done step's own
    observation) and, when the game ended, ``episode``.

    ``seed(s)`` takes effect at the next ``reset()``; env i then derives its
    streams from ``SeedSequence(s, spawn_key=(i,))`` (:mod:`shmatari.seeding`),
    not from ``s + i`` as SB3's own VecEnvs.
    """

    def __init__(self, env: str | ShmVectorEnv, num_envs: int | None = None, *,
                 monitor_dir: str | None = None, monitor_kwargs: dict | None = None,
                 **make_kwargs):
        """Makes a pool (or takes one) for SB3.

        Args:
            env: a game name (then ``shmatari.make(env, num_envs,
                autoreset_mode="same_step", obs_layout="channels_first",
                **make_kwargs)`` is made and owned: RGB frames come planar
                from the workers), or a synchronous pool made with
                ``autoreset_mode="same_step"`` (then ``close()`` closes it;
                observations are channels first).
            num_envs: envs, when ``env`` is a name (default 8); with a
                pool, None or the pool's (another count raises).
            monitor_dir: a folder where env i's finished games go to
                ``<monitor_dir>/<i>.monitor.csv``, written by SB3's own
                ``ResultsWriter`` (what its ``Monitor`` writes, so
                ``load_results`` and ``plot_results`` read it): ``r`` the
                raw score, ``l`` the game's emulator frames (no-ops
                included; SB3's Monitor wraps the NoFrameskip env and counts
                them), ``t`` seconds since the VecEnv was made. Needs
                ``episode_statistics`` (the default).
            monitor_kwargs: ``Monitor``'s ``info_keywords`` (info keys
                written as extra columns), ``override_existing`` and
                ``allow_early_resets`` (no effect); ``reset_keywords``
                must be empty (``reset()`` takes no keywords).
            **make_kwargs: :func:`shmatari.make`'s options; ``obs_layout``
                is the layout of this VecEnv's observations (see the class).

        Raises:
            ValueError: a pool that is asynchronous or not same-step, or an
                ``autoreset_mode`` other than ``"same_step"`` or a
                ``batch_size`` other than ``num_envs`` (before any pool
                starts); a ``monitor_dir`` without ``episode_statistics``;
                ``monitor_kwargs`` without ``monitor_dir``.
            TypeError: an unknown ``monitor_kwargs`` key; a ``monitor_dir``
                that is not a path.
            SharedMemorySpaceError, WorkerError: as :func:`shmatari.make`.
        """
        layout = "channels_first"
        # what can be judged before a pool starts is (a fuzzing pass: a
        # batch_size refused once its pool ran, and left running while the
        # error was held)
        if monitor_dir is not None and not isinstance(monitor_dir, (str, os.PathLike)):
            raise TypeError(f"monitor_dir must be a path (str or os.PathLike), got "
                            f"{type(monitor_dir).__name__}")
        if monitor_dir is None and monitor_kwargs:
            raise ValueError("monitor_kwargs apply only with monitor_dir")
        if isinstance(env, ShmVectorEnv):
            if make_kwargs:
                raise TypeError(f"options {sorted(make_kwargs)} apply only when a game name "
                                f"is given, not a pool")
            if num_envs is not None and num_envs != env.num_envs:
                raise ValueError(f"num_envs={num_envs!r}, but the pool given has "
                                 f"{env.num_envs} envs (leave num_envs out with a pool)")
            pool = env
        else:
            num_envs = 8 if num_envs is None else num_envs
            mode = make_kwargs.pop("autoreset_mode", "same_step")
            if mode != "same_step":
                raise ValueError(f"SB3's VecEnv resets done envs in the same step: "
                                 f"autoreset_mode must be 'same_step', got {mode!r}")
            layout = make_kwargs.setdefault("obs_layout", "channels_first")
            batch_size = make_kwargs.get("batch_size")
            if batch_size is not None and batch_size != num_envs:
                raise ValueError(_SYNC_ONLY.format(batch_size))
            pool = _make(env, num_envs, autoreset_mode="same_step", **make_kwargs)
        if pool.batch_size != pool.num_envs:  # a pool given (one made here is checked above)
            raise ValueError(_SYNC_ONLY.format(pool.batch_size))
        if pool.metadata["autoreset_mode"] != gym.vector.AutoresetMode.SAME_STEP:
            raise ValueError("the pool must be made with autoreset_mode='same_step' (SB3 "
                             "expects done envs reset in the same step)")
        self.pool = pool
        shape = pool.single_observation_space.shape
        # A channels-last RGB pool given by the caller: transposed here
        # (a pool made here is channels first: the kernel writes it so).
        self._rgb = len(shape) == 4
        self._channels_last = layout == "channels_last"
        if self._rgb:
            s, h, w, c = shape
            shape = (h, w, s * c) if self._channels_last else (s * c, h, w)
        elif self._channels_last:
            s, h, w = shape
            shape = (h, w, s)
        self._env_attrs: list[dict] = [{} for _ in range(pool.num_envs)]
        self._spec = None  # get_attr("spec")
        if isinstance(env, str):
            import ale_py

            gym.register_envs(ale_py)  # ale-py's ids; idempotent
            with contextlib.suppress(gym.error.Error):
                self._spec = gym.spec(env.strip())
        self._t_start = time.time()
        self._monitors: list[ResultsWriter] = []
        self._info_keywords: tuple = ()
        try:
            if monitor_dir is not None:
                self._open_monitors(monitor_dir, monitor_kwargs or {},
                                    env if isinstance(env, str) else None)
        except BaseException:
            if not isinstance(env, ShmVectorEnv):
                pool.close()
            raise
        super().__init__(pool.num_envs, gym.spaces.Box(0, 255, shape, np.uint8),
                         pool.single_action_space)

    def _open_monitors(self, monitor_dir: str, kwargs: dict, env_id: str | None) -> None:
        """One SB3 ``ResultsWriter`` per env: ``<monitor_dir>/<i>.monitor.csv``."""
        unknown = sorted(set(kwargs) - {"info_keywords", "override_existing",
                                        "allow_early_resets", "reset_keywords"})
        if unknown:
            raise TypeError(f"unknown monitor_kwargs {unknown}; Monitor's info_keywords, "
                            f"override_existing, allow_early_resets are taken")
        if kwargs.get("reset_keywords"):
            raise ValueError("monitor_kwargs reset_keywords must be empty: reset() takes no "
                             "keywords")
        if self.pool.config is not None and not self.pool.config.episode_statistics:
            raise ValueError("monitor_dir needs the pool's episode statistics: leave "
                             "episode_statistics=True")
        self._info_keywords = tuple(kwargs.get("info_keywords", ()))
        header = {"t_start": self._t_start, "env_id": str(env_id)}
        for i in range(self.pool.num_envs):
            self._monitors.append(ResultsWriter(
                os.path.join(monitor_dir, str(i)), header=header,
                extra_keys=self._info_keywords,
                override_existing=kwargs.get("override_existing", True)))

    # -- observations and infos -------------------------------------------------
    def _obs(self, obs: np.ndarray) -> np.ndarray:
        if self._channels_last:  # the pool's (b, s, h, w[, c]) -> (b, h, w, s * c)
            b, s, h, w = obs.shape[:4]
            order = (0, 2, 3, 1, 4) if self._rgb else (0, 2, 3, 1)
            return np.ascontiguousarray(obs.transpose(order)).reshape(b, h, w, -1)
        if self._rgb:
            b, s, h, w, c = obs.shape
            obs = np.ascontiguousarray(obs.transpose(0, 1, 4, 2, 3)).reshape(b, s * c, h, w)
        return obs

    def _infos(self, info: dict, terminated: np.ndarray, truncated: np.ndarray) -> list[dict]:
        # Each step's keys, as SB3's make_atari_env gives them (ale-py's
        # lives and frame counters; DummyVecEnv's TimeLimit.truncated), and
        # shmatari's raw_reward and game_over. A done row's are its ended
        # game's (final_info), as the step that ended it saw them.
        rows = (info["lives"], info["raw_reward"], info["game_over"],
                info["episode_frame_number"], info["frame_number"])
        infos = [_step_info(rows, i, bool(truncated[i] and not terminated[i]))
                 for i in range(self.num_envs)]
        if "_final_obs" in info:
            fin = info["final_info"]
            ended = (fin["lives"], fin["raw_reward"], fin["game_over"],
                     fin["episode_frame_number"], fin["frame_number"])
            for i in np.flatnonzero(info["_final_obs"]):
                d = infos[i]
                d.update(_step_info(ended, i, d["TimeLimit.truncated"]))
                d["terminal_observation"] = self._obs(info["final_obs"][i][None])[0]
                # the new game's, as DummyVecEnv keeps each autoreset's
                # (until 2026-12-06 only reset() set them: a client-code pass)
                self.reset_infos[i] = _reset_info(rows, i)
        if "_episode" in info:
            ep, t = info["episode"], round(time.time() - self._t_start, 6)
            for i in np.flatnonzero(info["_episode"]):
                # l in frames, as SB3's Monitor around the NoFrameskip env
                infos[i]["episode"] = {"r": round(float(ep["r"][i]), 6),
                                       "l": int(ep["frames"][i]), "t": t}
                if self._monitors:
                    row = dict(infos[i]["episode"])
                    row.update({k: infos[i].get(k) for k in self._info_keywords})
                    self._monitors[i].write_row(row)
        return infos

    # -- the VecEnv API -----------------------------------------------------------
    def seed(self, seed: int | None = None) -> list[int]:
        """Sets the pool seed for the next :meth:`reset` (SB3's ``VecEnv.seed``).

        Args:
            seed: the pool seed; None draws one, as SB3 does.

        Returns:
            list[int]: ``[seed] * num_envs``: every env derives from the one
            pool seed, env i from ``SeedSequence(seed, spawn_key=(i,))``
            (:mod:`shmatari.seeding`); SB3's own VecEnvs return
            ``seed + i``, which is not what seeds env i here.

        Raises:
            TypeError, ValueError: a seed that is not an int in [0, 2**128)
                (nothing is stored).
        """
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        # checked here, not at the next reset (a fuzzing pass: seed(1.5)
        # was stored, and every reset() after it failed)
        seed = seeding.check_seed(seed)
        self._seeds = [seed] * self.num_envs
        return list(self._seeds)

    def reset(self) -> np.ndarray:
        """Resets every env (with the seed given to :meth:`seed`, if any).

        Returns:
            uint8 observations, ``(num_envs, *observation_space.shape)``.
        """
        seed = self._seeds[0]
        obs, info = self.pool.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        rows = (info["lives"], None, None, info["episode_frame_number"], info["frame_number"])
        self.reset_infos = [_reset_info(rows, i) for i in range(self.num_envs)]
        return self._obs(obs)

    def step_async(self, actions: np.ndarray) -> None:
        """Sends one action per env (ints, shape ``(num_envs,)``): the pool
        steps while the caller works, until :meth:`step_wait`.

        Raises:
            TypeError, ValueError: bad actions (nothing was sent), in the
                pool's words but naming ``step()``, the call SB3's users make
                (they named ``send()``, which they never call, until
                2026-12-06: a newcomer's pass).
            As :meth:`shmatari.ShmVectorEnv.send` otherwise.
        """
        try:
            self.pool.send(actions)
        except (TypeError, ValueError) as err:
            text = str(err)
            if not text.startswith("send(): "):
                raise
            raise type(err)("step(): " + text[len("send(): "):]) from None

    def step_wait(self):
        """Waits for the step :meth:`step_async` sent.

        Returns:
            ``(obs, rewards, dones, infos)``: uint8 ``(num_envs,
            *observation_space.shape)``, float32 ``(num_envs,)``, bool
            ``(num_envs,)``, a list of ``num_envs`` dicts.

        Raises:
            As :meth:`shmatari.ShmVectorEnv.recv` (interrupted, it may be
            called again: the step is still in flight).
        """
        obs, reward, terminated, truncated, info = self.pool.recv()
        return (self._obs(obs), reward, terminated | truncated,
                self._infos(info, terminated, truncated))

    def close(self) -> None:
        """Closes the pool and the monitor files (idempotent)."""
        for writer in self._monitors:
            writer.close()
        self._monitors = []
        self.pool.close()

    def _indices(self, indices) -> list[int]:
        """SB3's ``indices``: None (every env), an int or ints, each in
        ``[0, num_envs)`` (IndexError naming the range; a raw IndexError or
        int() error until a fuzzing pass)."""
        if indices is None:
            return list(range(self.num_envs))
        items = [indices] if isinstance(indices, (int, np.integer)) else indices
        try:
            out = [operator.index(i) for i in items]
        except TypeError:
            raise TypeError(f"indices must be None, an int or ints (env indices), got "
                            f"{indices!r}") from None
        bad = [i for i in out if not 0 <= i < self.num_envs]
        if bad:
            raise IndexError(f"indices {bad} are outside the envs 0..{self.num_envs - 1}")
        return out

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        """An attribute per env: what :meth:`set_attr` stored, ``spec`` (the
        id's ``gymnasium.EnvSpec`` where Gymnasium registers it, as SB3's
        own VecEnvs give it; else None), else the pool's
        :meth:`shmatari.ShmVectorEnv.get_attr` (``render_mode``, the options
        such as ``frame_skip``, ``action_set``, the single-env spaces).

        Raises:
            AttributeError: none of those has that name.
        """
        idx = self._indices(indices)
        if all(attr_name in self._env_attrs[i] for i in idx):
            return [self._env_attrs[i][attr_name] for i in idx]
        if attr_name == "spec":
            # what SubprocVecEnv / DummyVecEnv give: each env's EnvSpec (the
            # id's registration in Gymnasium; None for a bare game name, as
            # an env made without gym.make). It raised AttributeError (a
            # client pass, 2026-12-06: env.get_attr("spec")[0].id).
            return [self._spec] * len(idx)
        values = self.pool.get_attr(attr_name)
        return [values[i] for i in idx]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        """Stores ``value`` under a name of the caller's (read back by
        :meth:`get_attr`); the pool's own attributes are fixed.

        Raises:
            AttributeError: ``attr_name`` is one of the pool's attributes
                (:meth:`shmatari.ShmVectorEnv.set_attr` says why), or
                ``num_envs`` / ``seed``.
        """
        if attr_name in ("num_envs", "seed"):
            raise AttributeError(f"{attr_name!r} is fixed when the pool is made: make a new "
                                 f"ShmatariVecEnv with {attr_name}=...")
        if attr_name in self.pool._env_attributes():
            self.pool.set_attr(attr_name, value)
        for i in self._indices(indices):
            self._env_attrs[i][attr_name] = value

    def env_method(self, method_name: str, *method_args, indices=None,
                   **method_kwargs) -> list[Any]:
        """``get_wrapper_attr(name)`` (as :meth:`get_attr`) and the pool's
        :meth:`shmatari.ShmVectorEnv.call` methods (``get_action_meanings``).

        Raises:
            AttributeError: another method.
        """
        idx = self._indices(indices)
        if method_name == "get_wrapper_attr":
            return self.get_attr(*method_args, indices=idx, **method_kwargs)
        if method_name != "get_action_meanings":
            raise AttributeError(f"shmatari envs have no method {method_name!r} (env_method "
                                 f"supports get_wrapper_attr and get_action_meanings)")
        values = self.pool.call(method_name, *method_args, **method_kwargs)
        return [values[i] for i in idx]

    def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
        """True for SB3's ``Monitor`` (the pool reports its ``episode``
        infos), False for any other wrapper."""
        wrapped = isinstance(wrapper_class, type) and issubclass(Monitor, wrapper_class)
        return [wrapped] * len(self._indices(indices))

    def get_images(self) -> Sequence[np.ndarray | None]:
        """The envs' full-size RGB frames (uint8, ``(H, W, 3)`` each), for
        SB3's ``render()`` and ``VecVideoRecorder``: the pool must be made
        with ``render_mode="rgb_array"``.

        Raises:
            ValueError: a pool made without ``render_mode="rgb_array"``.
        """
        return list(self.pool.render())

    def __repr__(self) -> str:
        return f"ShmatariVecEnv({self.pool!r})"


def make_atari_env(env_id: str, n_envs: int = 1, seed: int | None = None,
                   start_index: int = 0, monitor_dir: str | None = None,
                   wrapper_kwargs: dict | None = None, env_kwargs: dict | None = None,
                   vec_env_cls=None, vec_env_kwargs: dict | None = None,
                   monitor_kwargs: dict | None = None, **options) -> ShmatariVecEnv:
    """SB3's ``make_atari_env`` on a shmatari pool (same signature).

    The pool takes ``preset="dqn"`` (SB3's ``AtariWrapper`` defaults: no
    sticky actions, 30 no-ops, frame skip 4, 84x84 grayscale, a lost life
    ends the episode, FIRE reset, clipped rewards) and ``stack_num=1``: add
    ``VecFrameStack(env, n_stack=4)`` as with SB3's. From ``env_id``
    (``"BreakoutNoFrameskip-v4"``, ``"ALE/Breakout-v5"``, ``"Breakout"``) it
    takes the game and, as SB3's env does, the sticky actions ale-py
    registers for the id: none for ``*NoFrameskip-v4``,
    ``repeat_action_probability=0.25`` for ``ALE/*-v5`` (Machado et al.,
    2018), unless given. An id whose env skips frames itself (a v5 id
    without ``env_kwargs={"frameskip": 1}``: SB3's would act every 16
    frames) warns, and skips AtariWrapper's ``frame_skip`` alone.
    Observations are channels first, ``(n_envs, 1, 84, 84)``, unless
    ``obs_layout="channels_last"`` asks for SB3's own layout,
    ``(n_envs, 84, 84, 1)``, which ``VecTransposeImage`` requires.

    Args:
        env_id: the game.
        n_envs: envs in the pool.
        seed: the pool seed (env i: ``SeedSequence(seed, spawn_key=(i,))``).
        start_index: 0 only.
        monitor_dir: where SB3's ``monitor.csv`` files go, one per env
            (``<i>.monitor.csv``; see :class:`ShmatariVecEnv`); None: none
            written (the infos carry Monitor's ``episode`` dicts either way).
        wrapper_kwargs: ``AtariWrapper``'s ``noop_max``, ``frame_skip``,
            ``screen_size``, ``terminal_on_life_loss``, ``clip_reward``,
            ``action_repeat_probability``.
        env_kwargs: what SB3 passes to ale-py's ``AtariEnv``, by ale-py's
            names or shmatari's (:func:`shmatari.registration.ale_kwargs`):
            ``repeat_action_probability``, ``full_action_space``,
            ``render_mode`` (``"rgb_array"``: ``get_images()`` and
            ``VecVideoRecorder`` work), ``max_num_frames_per_episode``, ...;
            ``max_episode_steps`` is ``gym.make``'s ``TimeLimit`` there, in
            emulator frames (no-ops and FIRE included, across lives; the env
            under AtariWrapper steps one frame: a v5 id left at its own
            frameskip, which SB3 steps 4 frames at a time, warns): it caps
            ``max_episode_frames``, whatever else sets that (the lower).
            ``get_attr("spec")`` has it and the other ``env_kwargs``, as
            ``gym.make``'s spec.
        vec_env_cls: None, ``DummyVecEnv`` or ``SubprocVecEnv``: the pool is
            one VecEnv whose envs run in worker processes either way.
        vec_env_kwargs: ``SubprocVecEnv``'s ``start_method`` (the workers'
            start method); nothing else.
        monitor_kwargs: ``Monitor``'s, with ``monitor_dir`` (see
            :class:`ShmatariVecEnv`).
        **options: any other :func:`shmatari.make` argument (``num_workers``,
            ``obs_layout``, ...).

    Raises:
        ValueError: an argument with no shmatari meaning, named.
        TypeError: an unknown keyword.
    """
    from .registration import ale_kwargs

    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str such as 'BreakoutNoFrameskip-v4', got "
                        f"{type(env_id).__name__}")
    for name, value in (("wrapper_kwargs", wrapper_kwargs), ("env_kwargs", env_kwargs),
                        ("vec_env_kwargs", vec_env_kwargs), ("monitor_kwargs", monitor_kwargs)):
        if value is not None and not isinstance(value, dict):
            raise TypeError(f"{name} must be a dict or None, got {type(value).__name__}")
    if vec_env_cls not in (None, DummyVecEnv, SubprocVecEnv):
        raise ValueError(f"vec_env_cls must be None, DummyVecEnv or SubprocVecEnv (the pool is "
                         f"one VecEnv of worker processes), got {vec_env_cls!r}")
    vec_env_kwargs = dict(vec_env_kwargs or {})
    if vec_env_kwargs and (vec_env_cls is not SubprocVecEnv or set(vec_env_kwargs) - {"start_method"}):
        raise ValueError(f"vec_env_kwargs {sorted(vec_env_kwargs)} are not supported: only "
                         f"SubprocVecEnv's start_method (the workers' start method)")
    if start_index:
        raise ValueError("start_index must be 0: env i's seed comes from (seed, i)")
    opts: dict[str, Any] = {"preset": "dqn", "stack_num": 1}
    id_options, skip_warning = _id_settings(env_id, dict(env_kwargs or {}))
    opts.update(id_options)  # under wrapper_kwargs, env_kwargs and options
    if "start_method" in vec_env_kwargs:
        opts["start_method"] = vec_env_kwargs["start_method"]
    for key, value in (wrapper_kwargs or {}).items():
        if key == "screen_size":
            opts["img_height"] = opts["img_width"] = value
        elif key in _WRAPPER_KWARGS:
            opts[_WRAPPER_KWARGS[key]] = value
        else:
            raise TypeError(f"unknown AtariWrapper keyword {key!r}; known: "
                            f"{sorted(_WRAPPER_KWARGS) + ['screen_size']}")
    env_kwargs_given = {k: v for k, v in (env_kwargs or {}).items() if k != "max_episode_steps"}
    env_kwargs = dict(env_kwargs or {})
    for key in ("frameskip", "frame_skip"):
        # frameskip=1 (the usual way to put a v5 id under AtariWrapper) is
        # what this pool's env is: one frame per step, AtariWrapper skipping
        # (an id's own frameskip only warns: _id_settings)
        if key in env_kwargs and not (isinstance(env_kwargs[key], int)
                                      and not isinstance(env_kwargs[key], bool)
                                      and env_kwargs[key] == 1):
            raise ValueError(f"env_kwargs {key}={env_kwargs[key]!r}: SB3's env under "
                             f"AtariWrapper emulates one frame per step (frameskip=1) and "
                             f"AtariWrapper skips; set wrapper_kwargs={{'frame_skip': k}}")
        env_kwargs.pop(key, None)
    # gym.make's max_episode_steps (SB3 passes env_kwargs to gym.make) is a
    # TimeLimit on the one-frame-per-step env, under AtariWrapper: frames,
    # no-op and FIRE frames included, counted across lives (a v5 id left at
    # its own frameskip: SB3's counts its 4-frame steps, but this pool plays
    # one frame per step there too, and warns: frames). It was taken as
    # shmatari's max_episode_steps, agent steps, and episodes ran about 4x
    # longer (a client pass, 2026-12-06): it is a frame cap, the lower of it
    # and the pool's own (ALE's 108,000 under preset="dqn").
    time_limit = env_kwargs.pop("max_episode_steps", None)
    env_opts, ram_obs = ale_kwargs(env_kwargs, single=True)
    if ram_obs:
        raise ValueError("env_kwargs obs_type='ram' is not supported by make_atari_env (its "
                         "wrappers take screens); pass ram_info=True for info['ram']")
    opts.update(env_opts)
    opts.update(options)
    if time_limit is not None:  # gym.make's TimeLimit, in frames under AtariWrapper
        time_limit = _config._int("env_kwargs max_episode_steps", time_limit, 1, None)
        # over every other frame cap, options' included: SB3's TimeLimit
        # holds whatever ALE's cap is (a review, 2026-12-06)
        cap = opts.get("max_episode_frames", PRESETS["dqn"]["max_episode_frames"])
        opts["max_episode_frames"] = time_limit if cap is None else min(time_limit, cap)
    if skip_warning is not None:
        from .games import _caller_stacklevel

        warnings.warn(skip_warning, UserWarning, stacklevel=_caller_stacklevel())
    # preset="dqn": no legacy-name warning (shmatari.config.build_config)
    venv = ShmatariVecEnv(env_id, n_envs, seed=seed, monitor_dir=monitor_dir,
                          monitor_kwargs=monitor_kwargs, **opts)
    if venv._spec is not None:  # the spec gym.make gives SB3's env: env_kwargs in it
        venv._spec = dataclasses.replace(
            venv._spec, kwargs={**venv._spec.kwargs, **(env_kwargs_given or {})},
            max_episode_steps=(venv._spec.max_episode_steps if time_limit is None
                               else time_limit))
    return venv
