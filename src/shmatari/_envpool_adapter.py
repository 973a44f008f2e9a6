"""What :func:`shmatari.envpool.make` returns: :class:`EnvPoolAdapter` (EnvPool's
Gymnasium API on a :class:`shmatari.ShmVectorEnv`), :class:`GymEnvPoolAdapter`
(EnvPool 0.6-0.8's gym 0.2x API), and the :class:`EnvSpec` both carry. All are
importable from :mod:`shmatari.envpool`, where the options are documented.
"""

from __future__ import annotations

import collections
import os
import warnings
from collections.abc import Mapping

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

__all__ = ["EnvSpec", "EnvPoolAdapter", "GymEnvPoolAdapter"]


class EnvSpec:
    """EnvPool's ``EnvSpec`` as far as scripts read it: ``config`` (a named
    tuple of every option, EnvPool's names), the single-env
    ``observation_space`` / ``action_space`` (and their ``gymnasium_`` twins),
    ``reward_threshold`` (None).
    """

    reward_threshold = None

    def __init__(self, task_id: str, config: dict, n_actions: int):
        self.task_id = self.id = task_id
        self.config = collections.namedtuple("Config", list(config))(**config)
        c = config
        channels = 1 if c["gray_scale"] else 3
        self.observation_space = gym.spaces.Box(
            0, 255, (c["stack_num"] * channels, c["img_height"], c["img_width"]), np.uint8)
        self.action_space = gym.spaces.Discrete(n_actions)
        self.gymnasium_observation_space = self.observation_space
        self.gymnasium_action_space = self.action_space

    def __repr__(self) -> str:
        return f"EnvSpec({self.task_id!r}, {self.config})"


_UNSET = object()


def _same_value(held, value) -> bool:
    """``value`` is what ``held`` is: equal, or the same space in gym's and
    Gymnasium's classes (the gym API's spaces are gym's where it is
    installed)."""
    try:
        if held == value:
            return True
    except Exception:  # an array-valued comparison: not the same value
        return False
    return (hasattr(held, "contains") and hasattr(value, "contains")  # spaces
            and type(held).__name__ == type(value).__name__
            and getattr(held, "n", None) == getattr(value, "n", None)
            and getattr(held, "shape", None) == getattr(value, "shape", None)
            and str(getattr(held, "dtype", None)) == str(getattr(value, "dtype", None)))


class EnvPoolAdapter(gym.vector.VectorEnv, gym.Env):
    """A shmatari pool with EnvPool's Gymnasium interface.

    ``action_space`` and ``observation_space`` are one env's, as EnvPool's
    (and ``single_*`` the same); ``num_envs``, the spaces and ``single_*``
    may be assigned what they hold, as CleanRL's scripts do
    (``envs.num_envs = args.num_envs``, ``envs.single_action_space =
    envs.action_space``); another value raises AttributeError, as EnvPool's
    read-only properties do. Observations: uint8 ``(batch, stack_num, H, W)``
    (grayscale) or ``(batch, 3 * stack_num, H, W)`` (RGB, channels first);
    rewards float32, flags bool, shape ``(batch,)``; ``info`` per env:
    ``env_id`` int32, ``players`` ``{"env_id": int32}``, ``lives`` int32,
    ``reward`` float32 (unclipped), ``terminated`` int32 (the game is over),
    ``elapsed_step`` int32 (agent steps since the game began); ``ram`` uint8
    ``(batch, 128)`` when made with ``ram_info=True``. ``terminated`` excludes ``truncated``, as
    EnvPool (``done & ~trunc``).

    It is a ``gymnasium.Env`` too, as EnvPool's class, so ``gymnasium.Wrapper``
    subclasses (CleanRL's ``RecordEpisodeStatistics``) accept it.
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}
    #: EnvPool's flag (gym 0.2x's wrappers read it)
    is_vector_env = True

    #: What the pool fixes: assigned once when made, then only their own value.
    _FIXED = ("num_envs", "action_space", "observation_space", "single_action_space",
              "single_observation_space")

    def __setattr__(self, name, value):
        held = self.__dict__.get(name, _UNSET) if name in self._FIXED else _UNSET
        if held is not _UNSET and not _same_value(held, value):
            raise AttributeError(
                f"{name} is {held} and cannot be set to {value}: the pool fixes it when "
                f"made (EnvPool's is read-only too); make a pool with what you need")
        super().__setattr__(name, value)

    def __init__(self, pool, spec: EnvSpec, thread_affinity_offset: int = -1):
        """Wraps ``pool`` (a next-step :class:`shmatari.ShmVectorEnv`)."""
        self.pool = pool
        self.spec = spec
        self.num_envs = pool.num_envs
        self.batch_size = pool.batch_size
        self.action_space = self.single_action_space = spec.action_space
        self.observation_space = self.single_observation_space = spec.observation_space
        # What TorchRL's GymWrapper reads: NEXT_STEP, which it refuses with
        # its own clear error, as for a plain next-step pool.
        self.autoreset_mode = AutoresetMode.NEXT_STEP
        self.all_env_ids = np.arange(self.num_envs, dtype=np.int32)
        self._was_reset = False
        # Envs whose first game the pool began without being asked: a first
        # reset(env_id) must reset every env of the pool, and the envs it did
        # not name are left in that game, untouched, until they are reset or
        # stepped; their next reset only observes them, so that their streams
        # are those of a plain reset() (they began a second game, and a
        # partial first reset changed the streams of envs it never named: a
        # reproducibility pass, 2026-12-06). With their rows of that reset.
        self._fresh = np.zeros(self.num_envs, bool)
        self._fresh_rows = None
        # the row order of the next recv() (_rows), from send()
        self._recv_rows = None
        if thread_affinity_offset >= 0:
            self._pin(thread_affinity_offset)

    def _pin(self, offset: int) -> None:
        if not hasattr(os, "sched_setaffinity"):
            warnings.warn("thread_affinity_offset is ignored: this platform cannot pin "
                          "processes (os.sched_setaffinity)", UserWarning, stacklevel=3)
            return
        cores = os.cpu_count() or 1
        for w, pid in enumerate(self.pool.worker_pids):
            os.sched_setaffinity(pid, {(offset + w) % cores})

    # -- EnvPool's properties --------------------------------------------------
    @property
    def config(self) -> dict:
        """Every option by EnvPool's name (a new dict each call, as EnvPool)."""
        return self.spec.config._asdict()

    @property
    def is_async(self) -> bool:
        """Whether ``batch_size < num_envs``."""
        return self.batch_size != self.num_envs

    @property
    def render_mode(self) -> None:
        return None

    def __len__(self) -> int:
        return self.num_envs

    # -- conversion ----------------------------------------------------------
    @staticmethod
    def _info(info: dict) -> dict:
        env_id = info["env_id"]
        return {
            "env_id": env_id,
            "players": {"env_id": env_id},
            "lives": info["lives"],
            "reward": info["raw_reward"],
            "terminated": info["game_over"].astype(np.int32),
            "elapsed_step": info["elapsed_step"],
            **({"ram": info["ram"]} if "ram" in info else {}),
        }

    def _result(self, out, rows=None):
        """The pool's result in EnvPool's terms; ``rows`` (a synchronous
        pool's ``env_id`` out of env order): its rows in that order."""
        obs, reward, terminated, truncated, info = out
        out = obs, reward, terminated & ~truncated, truncated, self._info(info)
        return out if rows is None else _take_rows(out, rows)

    def _rows(self, env_id):
        """The rows of a synchronous pool's result (env order: the pool's)
        that give EnvPool's order, ``env_id``'s (which the pool checked: every
        env once); None where that is env order, or in an async pool (rows
        come as envs finish, ``info["env_id"]`` saying whose). Until
        2026-12-07 they came in env order: code that filed row k under
        ``env_id[k]`` filed other envs' results (an EnvPool-parity pass)."""
        if env_id is None or self.is_async:
            return None
        try:
            ids = np.asarray(env_id)
        except Exception:  # the pool's own check names what is wrong
            return None
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or (
                ids.size > 1 and bool((np.diff(ids) > 0).all())):
            return None
        return ids.astype(np.intp)

    @staticmethod
    def _unpack(action, env_id):
        """EnvPool's dict form of an action, ``{"action": a, "env_id": ids}``
        (``env_id`` optional, the argument's first; ``players`` ignored: one
        player): ``(a, ids)``; anything else as given."""
        if not isinstance(action, Mapping):
            return action, env_id
        extra = set(action) - {"action", "env_id", "players"}
        if "action" not in action or extra:
            raise ValueError(f"a dict action takes 'action' and optionally 'env_id' (EnvPool's "
                             f"keys), got keys {sorted(map(str, action))}")
        return action["action"], action.get("env_id") if env_id is None else env_id

    # -- EnvPool's methods -----------------------------------------------------
    def reset(self, env_id=None, *, seed=None, options=None):
        """Resets envs; returns ``(obs, info)``.

        Args:
            env_id: None (every env), or int env ids (EnvPool's way to reset
                some envs): their rows come back, in that order. Only in a
                synchronous pool; EnvPool leaves it undefined in async mode.
            seed: ignored with a warning, as EnvPool (seed at make()).
            options: ``{"reset_mask": mask}`` as Gymnasium's, or None.

        Raises:
            ValueError: bad env ids or options (a mask not of shape
                ``(num_envs,)`` or with no True), or both given.
            TypeError: options not a dict, or a mask not of bools.
            CallOrderError: ``env_id`` in an async pool.
        """
        from .errors import CallOrderError

        if seed is not None:
            warnings.warn("reset(seed=...) is ignored, as in EnvPool: pass seed to make()",
                          UserWarning, stacklevel=2)
        if options is not None:
            from .client import check_reset_options

            if isinstance(options, Mapping) and options.get("reset_mask") is not None:
                # a list of bools too; then as the pool's reset: bool, shape
                # (num_envs,), at least one True (it was taken as given: a
                # mask of 1 for 4 envs reset env 0)
                options = {**options, "reset_mask": np.asarray(options["reset_mask"])}
            mask = check_reset_options(None, options, self.num_envs)
            if mask is not None:
                if env_id is not None:
                    raise ValueError("pass either env_id or options['reset_mask'], not both")
                env_id = np.flatnonzero(mask)
        if env_id is None:
            fresh = self._fresh.copy()
            obs, info = self.pool.reset(options={"reset_mask": ~fresh} if fresh.any() else None)
            self._fresh[:] = False
            self._was_reset = True
            self._recv_rows = None  # what was sent, the reset waited for and dropped
            return obs, self._info(info)
        ids = np.atleast_1d(np.asarray(env_id))
        if ids.dtype.kind not in "iu" or ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"env_id must be a non-empty 1-D array of ints, got {env_id!r}")
        if ids.min() < 0 or ids.max() >= self.num_envs or np.unique(ids).size != ids.size:
            raise ValueError(f"env_id must be distinct ints in 0..{self.num_envs - 1}, "
                             f"got {ids.tolist()}")
        if self.is_async:
            raise CallOrderError("reset(env_id) in an async pool (batch_size < num_envs) is "
                                 "not supported (EnvPool leaves it undefined): call "
                                 "async_reset() once, then send()/recv()")
        mask = np.zeros(self.num_envs, bool)
        mask[ids] = True
        rows = ids  # a synchronous pool returns rows in env order
        if not self._was_reset:
            # The pool's first reset must reset every env: those not named
            # are fresh (above), their rows kept for their own first reset.
            obs, info = self.pool.reset()
            self._fresh = ~mask
            info = {k: v for k, v in info.items()
                    if isinstance(v, np.ndarray) and v.shape[:1] == (self.num_envs,)}
            self._fresh_rows = (obs.copy(), {k: v.copy() for k, v in info.items()})
        elif (mask & ~self._fresh).any():
            obs, info = self.pool.reset(options={"reset_mask": mask & ~self._fresh})
        else:  # only fresh envs named: their game is as its reset left it
            obs, info = self._fresh_rows
        self._fresh &= ~mask
        self._was_reset = True
        self._recv_rows = None
        obs = obs[rows]
        info = {k: v[rows] for k, v in info.items()
                if isinstance(v, np.ndarray) and v.shape[:1] == (self.num_envs,)}
        return obs, self._info(info)

    def step(self, action, env_id=None):
        """``send(action, env_id)`` then ``recv()``: ``(obs, reward,
        terminated, truncated, info)``, shapes ``(batch_size, ...)``; in a
        synchronous pool the rows in ``env_id``'s order, as EnvPool's.
        ``action`` may be EnvPool's dict, ``{"action": a, "env_id": ids}``."""
        action, env_id = self._unpack(action, env_id)
        # the order set before the wait: a step interrupted once its actions
        # were sent (Ctrl-C) leaves it to the recv() that collects them
        self._recv_rows = self._rows(env_id)
        out = self._result(self.pool.step(action, env_id), self._take_recv_rows())
        self._played(env_id)
        return out

    def send(self, action, env_id=None) -> None:
        """Sends actions (int, shape ``(n,)``, or EnvPool's dict ``{"action":
        a, "env_id": ids}``) to envs ``env_id`` (default all); a synchronous
        pool's next :meth:`recv` gives their rows in ``env_id``'s order."""
        action, env_id = self._unpack(action, env_id)
        self.pool.send(action, env_id)
        self._recv_rows = self._rows(env_id)
        self._played(env_id)

    def _played(self, env_id) -> None:
        """Envs stepped are no longer fresh (their first game goes on)."""
        if self._fresh.any():
            self._fresh[slice(None) if env_id is None else np.asarray(env_id)] = False

    def recv(self, reset: bool = False, return_info: bool = True):
        """The next ``batch_size`` results: a 5-tuple, or ``(obs, info)`` with
        ``reset=True`` (EnvPool's signature)."""
        out = self._result(self.pool.recv(), self._take_recv_rows())
        if reset:
            return out[0], out[4]
        return out

    def _take_recv_rows(self):
        rows, self._recv_rows = self._recv_rows, None
        return rows

    def async_reset(self) -> None:
        """Resets every env without waiting; collect with :meth:`recv`."""
        fresh = self._fresh.copy()
        self.pool.async_reset(options={"reset_mask": ~fresh} if fresh.any() else None)
        self._recv_rows = None
        self._fresh[:] = False
        self._was_reset = True

    def seed(self, seed=None) -> None:
        """Does nothing, with EnvPool's warning: seed at make()."""
        warnings.warn("The `seed` function in envpool is abandoned. You can set seed by "
                      "envpool.make(..., seed=seed) instead.", UserWarning, stacklevel=2)

    def xla(self):
        """EnvPool's ``xla()``: ``handle, recv, send, step`` for ``jax.jit`` /
        ``jax.lax.scan``, returning this adapter's results (as :meth:`recv`:
        EnvPool's ``info`` keys). :mod:`shmatari.xla` documents the contract.

        Raises:
            PoolClosedError: the pool is closed.
            ModuleNotFoundError: jax is not installed (the message says what
                to install).
            XlaBuildError: no C++ compiler, or the handlers did not build.
        """
        from . import xla

        handle, recv, send, step = xla.make(self.pool, convert=self._result)
        is_async = self.is_async

        def adapter_send(handle, action, env_id=None):
            # EnvPool's dict actions too
            return send(handle, *self._unpack(action, env_id))

        def adapter_step(handle, action, env_id=None):
            action, env_id = self._unpack(action, env_id)
            handle, out = step(handle, action, env_id)
            if env_id is None or is_async:
                return handle, out
            # a synchronous pool's rows in env_id's order, as step()'s
            import jax
            import jax.numpy as jnp

            rows = jnp.asarray(env_id)
            return handle, jax.tree_util.tree_map(lambda x: jnp.take(x, rows, axis=0), out)

        adapter_send.pool = adapter_step.pool = step.pool
        return handle, recv, adapter_send, adapter_step

    def render(self, *args, **kwargs):
        """Not there: EnvPool's ``render`` needs ``render_mode`` at make,
        which this adapter refuses (docs/migration.md).

        Raises:
            NotImplementedError: always, naming shmatari's own pool, which renders.
        """
        raise NotImplementedError(
            "shmatari.envpool pools do not render; shmatari's own pool does: "
            "shmatari.make(game, num_envs, render_mode='rgb_array').render() gives every "
            "env's full-size RGB frame")

    def close(self, **kwargs) -> None:
        """Stops the pool's workers and removes its segment; idempotent."""
        self.pool.close()

    @property
    def closed(self) -> bool:
        return self.pool.closed

    @closed.setter
    def closed(self, value) -> None:  # VectorEnv.__del__ reads/sets it
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.config.items() if k != "task")
        return f"EnvPoolAdapter({self.spec.task_id!r}, {cfg})"

    __str__ = __repr__


def _take_rows(tree, rows):
    """Every array of a result (tuples and dicts of NumPy arrays, shape
    ``(batch, ...)``) with its rows taken in ``rows``' order."""
    if isinstance(tree, dict):
        return {k: _take_rows(v, rows) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_take_rows(v, rows) for v in tree)
    return tree[rows]


def _gym_spaces(spec: EnvSpec) -> tuple:
    """One env's (action_space, observation_space) as ``gym.spaces`` when
    ``gym`` is installed (so ``isinstance(space, gym.spaces.Discrete)``
    holds in scripts that ``import gym``), else Gymnasium's: also where
    ``gym`` imports but is not gym (a ``gym/`` folder next to the script,
    which Python imports as a namespace package, has no ``gym.spaces``)."""
    try:
        from gym import spaces as legacy_spaces
        discrete, box = legacy_spaces.Discrete, legacy_spaces.Box
    except (ImportError, AttributeError):
        return spec.action_space, spec.observation_space
    obs = spec.observation_space
    return discrete(int(spec.action_space.n)), box(0, 255, obs.shape, np.uint8)


class GymEnvPoolAdapter(EnvPoolAdapter):
    """A shmatari pool with the gym 0.2x API of EnvPool 0.6-0.8's
    ``env_type="gym"``, which CleanRL's EnvPool scripts use.

    - ``reset()`` returns ``obs`` alone (``(obs, info)`` when made with
      ``gym_reset_return_info=True``); ``reset(env_id)`` as
      :meth:`EnvPoolAdapter.reset`.
    - ``step(action, env_id=None)`` and ``recv()`` return ``(obs, reward,
      done, info)``: ``done = terminated | truncated`` (bool, shape
      ``(batch,)``), ``info`` has :class:`EnvPoolAdapter`'s keys plus
      ``"TimeLimit.truncated"`` (bool, ``(batch,)``: the episode hit
      ``max_episode_steps``), as gym's ``TimeLimit`` and EnvPool 0.x.
      ``info["terminated"]`` (int32) is the game being over, so CleanRL's
      ``RecordEpisodeStatistics`` counts whole games under ``episodic_life``.
    - ``recv(reset=True)`` returns ``(obs, info)`` (``obs`` alone with
      ``return_info=False``), EnvPool 0.x's signature.
    - ``action_space`` / ``observation_space`` are ``gym.spaces`` when
      ``gym`` is installed, else Gymnasium's.

    Autoreset is next-step, as EnvPool's: the step after a done step
    returns the reset observation (reward 0, done False) and ignores its
    action.
    """

    def __init__(self, pool, spec: EnvSpec, thread_affinity_offset: int = -1):
        """Wraps ``pool`` (a next-step :class:`shmatari.ShmVectorEnv`)."""
        super().__init__(pool, spec, thread_affinity_offset)
        self.action_space, self.observation_space = _gym_spaces(spec)
        self.single_action_space = self.action_space
        self.single_observation_space = self.observation_space
        self._reset_info = bool(spec.config.gym_reset_return_info)

    def _gym_result(self, out, rows=None):
        obs, reward, terminated, truncated, info = self._result(out, rows)
        info["TimeLimit.truncated"] = truncated
        return obs, reward, terminated | truncated, info

    def reset(self, env_id=None, *, seed=None, options=None):
        """Resets envs (as :meth:`EnvPoolAdapter.reset`); returns ``obs``
        (uint8, ``(n, stack_num, H, W)``), or ``(obs, info)`` if made with
        ``gym_reset_return_info=True``.

        Raises:
            As :meth:`EnvPoolAdapter.reset`.
        """
        obs, info = super().reset(env_id, seed=seed, options=options)
        if self._reset_info:
            info["TimeLimit.truncated"] = np.zeros(len(obs), bool)
            return obs, info
        return obs

    def step(self, action, env_id=None):
        """``send(action, env_id)`` then ``recv()``: ``(obs, reward, done,
        info)``, shapes ``(batch_size, ...)``.

        Raises:
            As :meth:`shmatari.ShmVectorEnv.step`.
        """
        action, env_id = self._unpack(action, env_id)
        self._recv_rows = self._rows(env_id)  # as EnvPoolAdapter.step
        out = self._gym_result(self.pool.step(action, env_id), self._take_recv_rows())
        self._played(env_id)
        return out

    def recv(self, reset: bool = False, return_info: bool = True):
        """The next ``batch_size`` results: ``(obs, reward, done, info)``;
        with ``reset=True``, ``(obs, info)`` (``obs`` with ``return_info=False``).

        Raises:
            As :meth:`shmatari.ShmVectorEnv.recv`.
        """
        obs, reward, done, info = self._gym_result(self.pool.recv(), self._take_recv_rows())
        if reset:
            return (obs, info) if return_info else obs
        return obs, reward, done, info

    def xla(self):
        """EnvPool 0.x's ``xla()`` for the gym API: :meth:`EnvPoolAdapter.xla`'s
        ``(handle, recv, send, step)`` (EnvPool's contract), with ``recv`` and
        ``step`` returning ``(handle, (obs, reward, done, info))`` as
        CleanRL's ``ppo_atari_envpool_xla_jax*.py`` unpack them: ``done =
        terminated | truncated`` and ``info["TimeLimit.truncated"]`` added.
        Pure functions of their arguments, as the underlying ones, so they
        can be jitted and scanned.

        Raises:
            As :meth:`EnvPoolAdapter.xla`.
        """
        handle, recv, send, step = super().xla()

        def gym_result(out):
            obs, reward, terminated, truncated, info = out
            return obs, reward, terminated | truncated, dict(info, **{"TimeLimit.truncated":
                                                                      truncated})

        def gym_recv(handle):
            handle, out = recv(handle)
            return handle, gym_result(out)

        def gym_step(handle, action, env_id=None):
            handle, out = step(handle, action, env_id)
            return handle, gym_result(out)

        return handle, gym_recv, send, gym_step
