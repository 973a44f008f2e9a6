"""The rollout ``shmatari-check`` hashes: the seeded random policy, and each
env's stream of observations, rewards, flags and info, stepped synchronously or
through the async API. The pairings and verdicts are :mod:`shmatari.check`.
"""

from __future__ import annotations

import hashlib

import numpy as np
from gymnasium.vector import AutoresetMode

from . import seeding

#: What is compared at each step of each env's stream, in this order.
FIELDS = ("obs", "reward", "terminated", "truncated", "info")

#: Info keys a stream leaves out: the env's own index, the same-step
#: records (hashed as the done step's own info, then the new episode's), and
#: ``_episode``, whose presence depends on the other rows of the batch (a row
#: that ended a game is hashed with its ``episode`` ``r`` and ``l``;
#: ``info["episode"]["t"]`` is wall-clock seconds).
_NOT_HASHED = frozenset({"env_id", "final_obs", "_final_obs", "final_info", "_final_info",
                         "_episode"})


def info_row(info: dict | None, j: int, episode: bool = True) -> bytes:
    """Row ``j`` of a batch's info dict as bytes: every per-env array but
    ``env_id`` (lives, frame counts, ``elapsed_step``, ``raw_reward``,
    ``game_over``, ``reset``, ``worker_restarted``, ``ram`` where asked
    for), by key in sorted order, and ``episode``'s ``r`` and ``l`` in a row
    that ended a game; ``b""`` for no info (a stream without it).
    ``episode=False`` leaves ``episode`` out: a same-step result's new
    episode row repeats the ended game's, which its ``final_info`` holds."""
    if info is None:
        return b""
    parts = []
    for key in sorted(info):
        value = info[key]
        if key in _NOT_HASHED:
            continue
        if key == "episode":
            if episode and info["_episode"][j]:
                parts += [b"episode", np.float64(value["r"][j]).tobytes(),
                          np.int64(value["l"][j]).tobytes()]
            continue
        parts += [key.encode(), np.ascontiguousarray(value[j]).tobytes()]
    return b"\0".join(parts)


def policy_actions(num_envs: int, steps: int, n_actions: int, policy_seed: int) -> np.ndarray:
    """The seeded random policy: int64 array of shape ``(num_envs, steps)``.

    Row *i* is ``numpy.random.default_rng(worker_seed(policy_seed, i))
    .integers(0, n_actions, steps)``: env *i*'s actions, in the order it takes them.

    Raises:
        ValueError: ``n_actions`` < 1, or a seed or count out of range.
    """
    return np.stack([np.random.default_rng(s).integers(0, n_actions, steps)
                     for s in seeding.spawn_seeds(policy_seed, num_envs)])


class _Streams:
    """Each env's stream: a SHA-256 over all of it, and an 8-byte digest per
    (step, field) to find where two streams part. ``info``: whether the
    stream holds each step's info (:func:`info_row`); without it the
    ``info`` field is empty in every step and the SHA-256 is that of the
    other four fields alone (:func:`stream_hashes`)."""

    def __init__(self, num_envs: int, steps: int, info: bool = True):
        self.steps, self.info = steps, info
        self.digests = np.zeros((num_envs, steps + 1, len(FIELDS)), np.uint64)
        self.hashes = [hashlib.sha256() for _ in range(num_envs)]
        self.count = np.zeros(num_envs, np.int64)
        #: per env, the steps within the budget that ended an episode
        #: (terminated or truncated): what the streams say about resets
        self.ends = np.zeros(num_envs, np.int64)

    def add(self, env: int, obs, reward, terminated, truncated, next_obs=None,
            info: bytes = b"") -> None:
        """One step of env ``env``. ``next_obs``: the next episode's first
        observation when the mode delivers it with the done step (same-step
        autoreset, or disabled's masked reset); the step's ``obs`` field then
        covers both, the done step's observation first, and ``info`` (the
        rows' :func:`info_row` bytes) both infos likewise."""
        k = self.count[env]
        if k > self.steps:
            return  # past the budget (async keeps every env busy to the end)
        obs = np.ascontiguousarray(obs).tobytes()
        if next_obs is not None:
            obs += np.ascontiguousarray(next_obs).tobytes()
        self.ends[env] += bool(terminated) or bool(truncated)
        parts = (obs, np.float32(reward).tobytes(),
                 bytes([bool(terminated)]), bytes([bool(truncated)]))
        if self.info:
            parts += (info,)
        for f, data in enumerate(parts):
            self.hashes[env].update(data)
            self.digests[env, k, f] = int.from_bytes(
                hashlib.blake2b(data, digest_size=8).digest(), "little")
        self.count[env] = k + 1

    def row(self, info: dict | None, j: int, episode: bool = True) -> bytes:
        """:func:`info_row`, or ``b""`` for a stream without info."""
        return info_row(info, j, episode) if self.info else b""

    def add_reset(self, env: int, obs, info: bytes = b"") -> None:
        # A reset has no reward and no flags: record 0 and False, as Gymnasium.
        self.add(env, obs, 0.0, False, False, info=info)

    def hexdigests(self) -> list[str]:
        return [h.hexdigest() for h in self.hashes]


def _final_obs(info: dict, j: int, env: int):
    """Row ``j``'s final observation in a same-step result (env ``env``'s done step)."""
    final = info.get("final_obs")
    if final is None or not info["_final_obs"][j]:
        raise RuntimeError(f"env {env} ended its episode with autoreset_mode 'same_step' and "
                           f"its info has no final_obs")
    return final[j]


def _final_info(info: dict, j: int, env: int) -> dict:
    """The info of a same-step result's done steps (row ``j``: env ``env``'s)."""
    if "final_info" not in info or not info["_final_info"][j]:
        raise RuntimeError(f"env {env} ended its episode with autoreset_mode 'same_step' and "
                           f"its info has no final_info")
    return info["final_info"]


def _rollout_sync(env, actions: np.ndarray, streams: _Streams, tick,
                  reset_seed: int | None = None) -> None:
    """``reset`` (``reset(seed=reset_seed)`` if given), then ``step`` with
    every env's next action, ``steps`` times.
    The autoreset mode is the env's (``env.metadata["autoreset_mode"]``):
    next-step's reset result is the step after the done step; same-step's
    done step adds its ``final_obs``; disabled resets the done envs with a
    mask (``reset(options={"reset_mask": done})``) before the next step."""
    mode = env.metadata["autoreset_mode"]
    row = streams.row
    obs, info = env.reset() if reset_seed is None else env.reset(seed=reset_seed)
    for e in range(env.num_envs):
        streams.add_reset(e, obs[e], row(info, e))
    for k in range(actions.shape[1]):
        obs, reward, terminated, truncated, info = env.step(actions[:, k])
        done = terminated | truncated
        after = after_info = None
        if done.any() and mode is AutoresetMode.DISABLED:
            after, after_info = env.reset(options={"reset_mask": done})
            for key in ("reward", "terminated", "truncated"):  # the rows' results:
                after_info.pop(key, None)  # in the stream as such (recv() has none)
        for e in range(env.num_envs):
            if not done[e] or mode is AutoresetMode.NEXT_STEP:
                streams.add(e, obs[e], reward[e], terminated[e], truncated[e],
                            info=row(info, e))
            elif mode is AutoresetMode.SAME_STEP:
                streams.add(e, _final_obs(info, e, e), reward[e], terminated[e], truncated[e],
                            next_obs=obs[e],
                            info=row(_final_info(info, e, e), e) + row(info, e, False))
            else:
                streams.add(e, obs[e], reward[e], terminated[e], truncated[e], next_obs=after[e],
                            info=row(info, e) + row(after_info, e))
        tick(k + 1)


def _rollout_async(env, actions: np.ndarray, streams: _Streams, tick) -> None:
    """``async_reset``, then ``recv``/``send`` until every env has taken its
    ``steps``; env *e* is always sent its own next action. Envs past their
    budget keep stepping (``recv`` needs ``batch_size`` running envs), and
    their results are dropped. The autoreset modes as :func:`_rollout_sync`;
    disabled sends a done env ``async_reset`` with a mask of it instead of an
    action, and its done step is recorded when the reset comes back."""
    steps = actions.shape[1]
    mode = env.metadata["autoreset_mode"]
    row = streams.row
    waiting = {}  # disabled: env -> its done step, until its reset's result comes
    env.async_reset()
    while streams.count.min() <= steps:
        obs, reward, terminated, truncated, info = env.recv()
        ids = info["env_id"]
        ended = np.zeros(env.num_envs, bool)
        for j, e in enumerate(ids):
            done = terminated[j] or truncated[j]
            if streams.count[e] == 0:
                streams.add_reset(e, obs[j], row(info, j))
            elif e in waiting:
                *fields, done_info = waiting.pop(e)
                streams.add(e, *fields, next_obs=obs[j], info=done_info + row(info, j))
            elif not done or mode is AutoresetMode.NEXT_STEP:
                streams.add(e, obs[j], reward[j], terminated[j], truncated[j],
                            info=row(info, j))
            elif mode is AutoresetMode.SAME_STEP:
                streams.add(e, _final_obs(info, j, e), reward[j], terminated[j], truncated[j],
                            next_obs=obs[j],
                            info=row(_final_info(info, j, e), j) + row(info, j, False))
            else:
                waiting[e] = (obs[j].copy(), reward[j], terminated[j], truncated[j],
                              row(info, j))
                ended[e] = True
        ids = ids[~ended[ids]]
        if ids.size:
            taken = streams.count[ids] - 1  # agent steps each of these envs has taken
            env.send(np.where(taken < steps, actions[ids, np.minimum(taken, steps - 1)], 0), ids)
        if ended.any():
            # After the send: a masked reset has every idle env it does not
            # reset republish its observation (CMD_OBSERVE), and none is idle now.
            env.async_reset(options={"reset_mask": ended})
        tick(int(streams.count.min()) - 1)


def stream_hashes(env, steps: int, *, policy_seed: int = 0) -> list[str]:
    """Resets a synchronous vector env and hashes each env's stream.

    Env *i* takes the actions of :func:`policy_actions` row *i*; its stream is
    the reset observation, then each step's observation, reward (float32) and
    ``terminated``/``truncated`` flags (not its info, unlike
    ``shmatari-check``'s streams: these hashes are recorded in tests).

    Args:
        env: a synchronous :class:`shmatari.ShmVectorEnv` or pipe baseline.
        steps: agent steps to take.
        policy_seed: the policy's seed.

    Returns:
        list[str]: one SHA-256 hex digest per env.

    Raises:
        WorkerError, PoolClosedError: as the env's ``reset`` and ``step``.
    """
    actions = policy_actions(env.num_envs, steps, int(env.single_action_space.n), policy_seed)
    streams = _Streams(env.num_envs, steps, info=False)
    _rollout_sync(env, actions, streams, lambda done: None)
    return streams.hexdigests()
