"""Pools spread over a Ray cluster: one ordinary shmatari pool per node.

:func:`make` places one Ray actor on each node (a placement group with
``STRICT_SPREAD``); each actor owns a local pool made with
:func:`shmatari.make` (its workers and its shared memory stay on that node)
for a contiguous slice of the envs. The trainer gets the same vector env API
as a local pool: ``reset`` / ``step``, ``async_reset`` / ``send`` / ``recv``
with ``info["env_id"]``, the spaces and ``info["episode"]``.

Wire format
-----------
An actor ships only each env's newest frame (uint8, ``(img_height,
img_width[, 3])``: 7,056 bytes at 84x84 grayscale) plus the result's
rewards, flags and info fields as NumPy arrays, one array per field per
call, so nothing is pickled per env. The trainer keeps each env's frame
stack and rebuilds the observation from a one-byte code per row:

- ``SHIFT``: drop the oldest frame, append the new one (a step);
- ``FILL``: every frame is the new one (a reset);
- ``KEEP``: the stack is unchanged (an env observed, not reset, by
  ``reset(options={"reset_mask": ...})``);
- ``FULL``: the whole stack follows in an extra array (the actor uses it
  when neither of the others reproduces the stack; none of shmatari's rules
  needs it today).

The actor picks the code by comparing the new stack with the one it last
shipped, so the rebuilt observation equals the local pool's byte for byte,
whatever the autoreset mode or episode rule (tests compare them). See
docs/distributed.md for the bytes per env step and the scaling model.

Seeding
-------
Node *k*'s pool is made with ``env_index_offset`` = its first env and the
pool seed, so env *i* has the streams of env *i* of ``shmatari.make(...,
seed=seed)`` on one machine, whatever the number of nodes.

Faults
------
A dead actor (or a node failure that kills it) surfaces in ``recv`` /
``step`` as :class:`shmatari.WorkerError` naming the node and its envs, as
soon as Ray reports the actor dead. With ``restart_workers=True`` Ray
restarts the actor (``max_restarts``); the new actor rebuilds the node's
pool with ``pool_generation`` = the node's restart count, so its envs play
new, reproducible games, and each env's next result reports the lost
episode as truncated with ``info["worker_restarted"]``, as a local pool
reports a replaced worker. Inside a node, the local pool replaces its own
workers as usual.
"""

from __future__ import annotations

import logging
import numbers
import time
import weakref
from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np
import ray
from gymnasium.vector import AutoresetMode
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from . import config as _config
from . import seeding
from .errors import (CallOrderError, StepTimeoutError, WorkerError,
                     check_usable)

__all__ = ["make", "RayVectorEnv", "OP_SHIFT", "OP_FILL", "OP_KEEP", "OP_FULL"]

_log = logging.getLogger("shmatari")

#: How a row's observation is rebuilt from the env's previous one (a uint8 per row).
OP_SHIFT, OP_FILL, OP_KEEP, OP_FULL = 0, 1, 2, 3
#: Seconds the nodes may take to start (placement, actors, their pools).
_START_TIMEOUT = 300.0
#: Seconds close() waits for the nodes to close their pools before killing them.
_CLOSE_TIMEOUT = 10.0
#: Seconds between checks of the deadline while waiting for results.
_POLL = 0.5
#: Info fields an observed (not reset) env repeats from its last result.
_KEPT_FIELDS = ("lives", "elapsed_step", "episode_frame_number", "frame_number")
_GYM_AUTORESET = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
                  "disabled": AutoresetMode.DISABLED}
_IDLE, _PENDING = 0, 1
#: Restart phases of an env on its node (see _Node).
_LIVE, _AFTER_RESTART_ROW, _FRESH = 0, 1, 2


# -- rows: one result per env, as flat arrays --------------------------------------

def _flatten(info: Mapping, prefix: str = "") -> dict:
    """``info`` as ``{"a/b": array}``; ``final_obs`` (an object array) is left out."""
    flat = {}
    for key, value in info.items():
        if key == "final_obs" and not prefix:
            continue
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[prefix + key] = np.asarray(value)
    return flat


def _unflatten(flat: Mapping) -> dict:
    info = {}
    for key, value in flat.items():
        *path, leaf = key.split("/")
        node = info
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return info


def _rows(obs, reward, terminated, truncated, info) -> dict:
    """One local ``recv()``'s rows: ``{"ids", "obs", "fobs", "cols"}``; ``cols``
    holds the result (``~reward``, ``~terminated``, ``~truncated``) and the
    flat info; ``fobs`` the same-step final observations (dense, rows
    without one are zero) or None."""
    cols = {"~reward": np.asarray(reward), "~terminated": np.asarray(terminated),
            "~truncated": np.asarray(truncated)}
    cols.update(_flatten(info))
    fobs = None
    if "final_obs" in info:
        fobs = np.zeros_like(obs)
        for j in np.flatnonzero(info["_final_obs"]):
            fobs[j] = info["final_obs"][j]
    return {"ids": np.asarray(info["env_id"], np.int64), "obs": obs, "fobs": fobs, "cols": cols}


def _merge(parts: list, dtypes: dict | None = None) -> dict:
    """Rows of several parts as one part (fields a part lacks are zero)."""
    if len(parts) == 1:
        return parts[0]
    dtypes = dict(dtypes or {})
    for p in parts:
        for k, v in p["cols"].items():
            dtypes.setdefault(k, v.dtype)
    cols = {k: np.concatenate([p["cols"].get(k, np.zeros(len(p["ids"]), dt)) for p in parts])
            for k, dt in dtypes.items() if any(k in p["cols"] for p in parts)}
    fobs = None
    if any(p["fobs"] is not None for p in parts):
        fobs = np.concatenate([p["obs"] * 0 if p["fobs"] is None else p["fobs"] for p in parts])
    return {"ids": np.concatenate([p["ids"] for p in parts]),
            "obs": np.concatenate([p["obs"] for p in parts]), "fobs": fobs, "cols": cols}


def _take(part: dict, idx) -> dict:
    return {"ids": part["ids"][idx], "obs": part["obs"][idx],
            "fobs": None if part["fobs"] is None else part["fobs"][idx],
            "cols": {k: v[idx] for k, v in part["cols"].items()}}


def _order(part: dict, ids: np.ndarray) -> dict:
    """The rows of ``part`` in the order of ``ids`` (each present once)."""
    where = np.empty(int(part["ids"].max()) + 1, np.int64)
    where[part["ids"]] = np.arange(len(part["ids"]))
    return _take(part, where[ids])


def _delta(new: np.ndarray, old: np.ndarray, has_old: np.ndarray):
    """Codes each row of ``new`` (n, stack, ...) against ``old``.

    Returns:
        (op uint8 (n,), frames uint8 (n, *frame_shape): each row's newest
        frame, full uint8 (m, stack, ...): the rows coded ``OP_FULL``).
    """
    n = len(new)
    op = np.full(n, OP_FULL, np.uint8)
    if n:
        shift = has_old & (new[:, :-1] == old[:, 1:]).reshape(n, -1).all(1)
        op[shift] = OP_SHIFT
        rest = np.flatnonzero(~shift)
        if rest.size:
            r = new[rest]
            fill = (r == r[:, -1:]).reshape(rest.size, -1).all(1)
            op[rest[fill]] = OP_FILL
            rest = rest[~fill]
        if rest.size:
            keep = has_old[rest] & (new[rest] == old[rest]).reshape(rest.size, -1).all(1)
            op[rest[keep]] = OP_KEEP
    return op, np.ascontiguousarray(new[:, -1]), np.ascontiguousarray(new[op == OP_FULL])


def _apply(op, frames, full, old: np.ndarray) -> np.ndarray:
    """Rebuilds the stacks that :func:`_delta` coded; ``old`` (n, stack, ...)."""
    new = np.empty_like(old)
    # Shift every row (the common case, two plain slice copies), then
    # overwrite the few rows coded otherwise.
    new[:, :-1] = old[:, 1:]
    new[:, -1] = frames
    if (op == OP_SHIFT).all():
        return new
    f = op == OP_FILL
    new[f] = frames[f][:, None]
    k = op == OP_KEEP
    new[k] = old[k]
    u = op == OP_FULL
    if u.any():
        new[u] = full
    return new


def wire_bytes(packet: Mapping) -> int:
    """Bytes of the arrays in one actor reply (their ``nbytes``; Ray adds a few
    hundred bytes of metadata per reply, not per env)."""
    return sum(v.nbytes for v in packet.values() if isinstance(v, np.ndarray))


# -- the actor: one node's pool ------------------------------------------------------

def _reported(method):
    """Re-raises what a node's method raises as a plain RuntimeError holding
    its type, message and traceback: shmatari's exceptions take keyword
    arguments, which Ray cannot rebuild on the trainer's side."""
    import functools
    import traceback

    @functools.wraps(method)
    def wrapper(self, *args):
        try:
            return method(self, *args)
        except Exception as exc:  # noqa: BLE001 - sent to the trainer
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            raise RuntimeError(f"{type(exc).__name__}: {exc}\n--- traceback ---\n{text}") \
                from None
    return wrapper


class _Node:
    """One node's local pool, served to the trainer (runs inside a Ray actor).

    Its methods run one at a time (a Ray actor's default), each answering
    with one packet: a dict of NumPy arrays (see the module docstring).
    """

    def __init__(self, node: int, begin: int, count: int, pool_args: dict):
        self.node, self.begin, self.count = node, begin, count
        self.args = dict(pool_args)
        self.env = None

    # The pool's workers start with the local pool's default, forkserver. In
    # an actor, __main__ is Ray's worker script (ray/_private/workers/
    # default_worker.py), which forkserver and spawn import again in each
    # worker as __mp_main__: that script keeps its body under
    # `if __name__ == "__main__":`, so the import runs nothing (tested).
    # fork is avoided: the actor runs Ray's threads (gRPC, the core worker),
    # and a child forked from a threaded process may inherit a held lock.

    @_reported
    def start(self, generation: int) -> dict:
        """Builds the pool (again, after a restart: ``generation`` >= 1).

        Returns:
            dict: the spaces and where the node runs (``node_id``, ``ip``,
            ``pid``, ``worker_pids``, ``segment_name``).
        """
        import shmatari

        if self.env is not None:
            self.env.close()
        args = dict(self.args)
        game = args.pop("game")
        self.env = shmatari.make(game, self.count, env_index_offset=self.begin,
                                 pool_generation=generation, **args)
        self.autoreset = self.env.config.autoreset_mode
        shape = self.env.single_observation_space.shape
        self.prev = np.zeros((self.count,) + shape, np.uint8)
        self.has_prev = np.zeros(self.count, bool)
        self.last = {k: np.zeros(self.count, np.int64) for k in _KEPT_FIELDS}
        self.dtypes: dict = {}
        self.phase = np.full(self.count, _FRESH if generation else _LIVE, np.int8)
        if generation:
            # A restarted node answers each env's next command as a local
            # pool's replaced worker does: row A (the new game's first
            # observation) ends the lost episode, truncated; row B is the
            # reset that follows it (next-step autoreset) or a reset command.
            self.rows_a = self._merged(self._reset_local(None))
            self.rows_b = self._merged(self._reset_local(None))
        ctx = ray.get_runtime_context()
        import os

        return {"obs_shape": tuple(shape), "n_actions": int(self.env.single_action_space.n),
                "node_id": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(),
                "pid": os.getpid(), "worker_pids": list(self.env.worker_pids),
                "segment_name": self.env.segment_name}

    def close(self) -> None:
        """Closes the pool: its workers stop and its segment is removed."""
        if self.env is not None:
            self.env.close()
            self.env = None

    def pool_info(self) -> dict:
        """Where the pool runs now (for tests and logs)."""
        import os

        return {"pid": os.getpid(), "worker_pids": list(self.env.worker_pids),
                "segment_name": self.env.segment_name}

    # -- commands ----------------------------------------------------------------
    @_reported
    def reset(self, mask, seed) -> dict:
        """Resets the envs in ``mask`` (bool (count,), or None: all) and
        observes the others; with ``seed``, re-derives every env."""
        n = self.count
        every = np.arange(n)
        if seed is not None:
            self.env.async_reset(seed=seed)
            part = self._merged(self._collect(n))
            part["cols"]["worker_restarted"] = part["cols"]["worker_restarted"] | (
                self.phase[part["ids"]] == _FRESH)
            self.phase[:] = _LIVE
            return self._encode(_order(part, every))
        mask = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
        parts = []
        live = mask & (self.phase == _LIVE)
        if live.any():
            local = self._merged(self._reset_local(None if live.all() else live))
            parts.append(_take(local, np.flatnonzero(live[local["ids"]])))
        pre = np.flatnonzero(mask & (self.phase != _LIVE))
        if pre.size:
            rows = _take(self.rows_b, pre)
            rows["cols"]["worker_restarted"] = self.phase[pre] == _FRESH
            self.phase[pre] = _LIVE
            parts.append(rows)
        parts += self._observed(np.flatnonzero(~mask))
        return self._encode(_order(self._merged(parts), every))

    @_reported
    def step(self, ids, actions) -> dict:
        """Steps envs ``ids`` (local indices, int32 (n,)) with ``actions``."""
        ids = np.asarray(ids, np.int64)
        actions = np.asarray(actions)
        phase = self.phase[ids]
        parts = []
        live = phase == _LIVE
        if live.any():
            if live.all() and ids.size == self.count and self.env.batch_size == self.count:
                order = np.argsort(ids)
                self.env.send(actions[order])  # a synchronous pool steps every env
            else:
                self.env.send(actions[live], ids[live])
            parts += self._collect(int(live.sum()))
        parts += self._restart_rows(ids[phase == _FRESH])
        done_b = ids[phase == _AFTER_RESTART_ROW]
        if done_b.size:
            parts.append(_take(self.rows_b, done_b))
            self.phase[done_b] = _LIVE
        return self._encode(_order(self._merged(parts), ids))

    # -- helpers -----------------------------------------------------------------
    def _collect(self, n: int) -> list:
        parts, got = [], 0
        while got < n:
            part = _rows(*self.env.recv())
            for k, v in part["cols"].items():
                self.dtypes.setdefault(k, v.dtype)
            parts.append(part)
            got += len(part["ids"])
        return parts

    def _merged(self, parts: list) -> dict:
        return _merge(parts, self.dtypes)

    def _reset_local(self, mask) -> list:
        self.env.async_reset(options=None if mask is None else {"reset_mask": mask})
        return self._collect(self.count)

    def _observed(self, ids: np.ndarray) -> list:
        """Rows of envs that a masked reset leaves alone: the current
        observation again, reward 0 and every flag false (as the local pool's
        ``CMD_OBSERVE``); a restarted env gives its restart row instead."""
        fresh = ids[self.phase[ids] == _FRESH]
        ids = ids[self.phase[ids] != _FRESH]
        parts = self._restart_rows(fresh)
        if ids.size:
            cols = {k: np.zeros(ids.size, dt) for k, dt in self.dtypes.items()
                    if "/" not in k and not k.startswith("_")}
            cols["env_id"] = ids.astype(self.dtypes["env_id"])
            for k in _KEPT_FIELDS:
                cols[k] = self.last[k][ids].astype(self.dtypes[k])
            parts.append({"ids": ids, "obs": self.prev[ids], "fobs": None, "cols": cols})
        return parts

    def _restart_rows(self, ids: np.ndarray) -> list:
        """The first result of envs whose node was restarted, answering a
        step: the lost episode ends, truncated, with ``worker_restarted``."""
        if not ids.size:
            return []
        rows = _take(self.rows_a, ids)
        cols = rows["cols"]
        for k in list(cols):
            if k.startswith("episode/") or k.startswith("_") or k.startswith("final_info"):
                del cols[k]
        for k in ("~reward", "raw_reward"):
            cols[k] = np.zeros_like(cols[k])
        for k in ("~terminated", "game_over", "reset"):
            cols[k] = np.zeros_like(cols[k])
        cols["~truncated"] = np.ones_like(cols["~truncated"])
        cols["worker_restarted"] = np.ones_like(cols["worker_restarted"])
        if self.autoreset == "next_step":
            self.phase[ids] = _AFTER_RESTART_ROW
            return [rows]
        self.phase[ids] = _LIVE
        if self.autoreset == "disabled":
            return [rows]
        # same_step: the row is already the next game's reset (row B), and
        # the truncation is its final record.
        b = _take(self.rows_b, ids)
        final = {"final_info/" + k: v for k, v in cols.items() if not k.startswith("~")}
        bc = dict(b["cols"])
        bc.update(final)
        bc["~reward"], bc["~terminated"] = cols["~reward"], cols["~terminated"]
        bc["~truncated"], bc["worker_restarted"] = cols["~truncated"], cols["worker_restarted"]
        bc["_final_obs"] = np.ones(ids.size, bool)
        bc["_final_info"] = np.ones(ids.size, bool)
        return [{"ids": ids, "obs": b["obs"], "fobs": rows["obs"], "cols": bc}]

    def _encode(self, part: dict) -> dict:
        """The packet for ``part``'s rows; remembers what the trainer now holds."""
        ids, obs, cols = part["ids"], part["obs"], part["cols"]
        old, has_old = self.prev[ids], self.has_prev[ids]
        op, frames, full = _delta(obs, old, has_old)
        packet = dict(cols)
        packet["env_id"] = (ids + self.begin).astype(np.int32)
        packet["~op"], packet["~frames"] = op, frames
        if full.size:
            packet["~full"] = full
        if part["fobs"] is not None and cols["_final_obs"].any():
            m = np.flatnonzero(cols["_final_obs"])
            fop, fframes, ffull = _delta(part["fobs"][m], old[m], has_old[m])
            packet["~fop"], packet["~fframes"] = fop, fframes
            if ffull.size:
                packet["~ffull"] = ffull
            fid = packet["final_info/env_id"].astype(np.int64)
            packet["final_info/env_id"] = np.where(cols["_final_info"], fid + self.begin,
                                                   0).astype(np.int32)
        else:
            for k in [k for k in packet if k.startswith("final_info/") or
                      k in ("_final_obs", "_final_info")]:
                del packet[k]
        if "_episode" in packet and not packet["_episode"].any():
            for k in [k for k in packet if k.startswith("episode/") or k == "_episode"]:
                del packet[k]
        self.prev[ids] = obs
        self.has_prev[ids] = True
        for k in _KEPT_FIELDS:
            self.last[k][ids] = cols[k]
        return packet


# -- the trainer's side ------------------------------------------------------------

def _count(name, value, lo=1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    return int(value)


def _split(num_envs: int, num_nodes: int, envs_per_node) -> list[int]:
    if envs_per_node is None:
        q, r = divmod(num_envs, num_nodes)
        sizes = [q + (1 if k < r else 0) for k in range(num_nodes)]
    elif isinstance(envs_per_node, numbers.Integral) and not isinstance(envs_per_node, bool):
        sizes = [_count("envs_per_node", envs_per_node)] * num_nodes
    elif isinstance(envs_per_node, Sequence):
        sizes = [_count("envs_per_node[k]", n) for n in envs_per_node]
        if len(sizes) != num_nodes:
            raise ValueError(f"envs_per_node must give one count per node ({num_nodes}), "
                             f"got {len(sizes)}")
    else:
        raise TypeError(f"envs_per_node must be None, an int or a list of ints, got "
                        f"{type(envs_per_node).__name__}")
    if sum(sizes) != num_envs:
        raise ValueError(f"envs_per_node gives {sum(sizes)} envs in all, num_envs is {num_envs}")
    if min(sizes) < 1:
        raise ValueError(f"every node needs at least one env: {num_envs} envs cannot be spread "
                         f"over {num_nodes} nodes")
    return sizes


def _alive_nodes() -> list[dict]:
    return [n for n in ray.nodes() if n.get("Alive")]


def _placement(num_nodes, num_cpus: float, timeout: float):
    """(strategies, placement group we made or None) for ``num_nodes``."""
    if isinstance(num_nodes, PlacementGroup):
        return [PlacementGroupSchedulingStrategy(num_nodes, placement_group_bundle_index=k)
                for k in range(num_nodes.bundle_count)], None
    if isinstance(num_nodes, (list, tuple)):
        if not num_nodes or not all(isinstance(n, str) for n in num_nodes):
            raise TypeError("num_nodes as a placement must be a non-empty list of Ray node ids "
                            f"(hex str, ray.nodes()[k]['NodeID']), got {num_nodes!r}")
        alive = {n["NodeID"] for n in _alive_nodes()}
        unknown = [n for n in num_nodes if n not in alive]
        if unknown:
            raise ValueError(f"num_nodes names node(s) that are not alive in this cluster: "
                             f"{unknown}; alive: {sorted(alive)}")
        return [NodeAffinitySchedulingStrategy(n, soft=False) for n in num_nodes], None
    alive = [n for n in _alive_nodes() if n.get("Resources", {}).get("CPU", 0) >= num_cpus]
    if num_nodes is None:
        num_nodes = len(alive)
    num_nodes = _count("num_nodes", num_nodes)
    if num_nodes > len(alive):
        raise ValueError(f"num_nodes={num_nodes}, but the cluster has {len(alive)} alive node(s) "
                         f"with {num_cpus:g} CPU(s) or more (STRICT_SPREAD puts one actor on "
                         f"each node)")
    pg = placement_group([{"CPU": num_cpus}] * num_nodes, strategy="STRICT_SPREAD")
    try:
        ray.get(pg.ready(), timeout=timeout)
    except BaseException:
        remove_placement_group(pg)
        raise
    return [PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=k)
            for k in range(num_nodes)], pg


def make(game: str, num_envs: int = 8, *, num_nodes=None, envs_per_node=None,
         batch_size: int | None = None, seed: int | None = None,
         restart_workers: bool = False, num_cpus_per_node: float = 1,
         max_restarts: int = -1, start_timeout: float = _START_TIMEOUT,
         **options) -> "RayVectorEnv":
    """Creates a pool of Atari envs spread over the nodes of a Ray cluster.

    Connects to the cluster (``ray.init()``, which joins ``RAY_ADDRESS`` or
    starts a local one) if this process has not yet. Then one actor per node
    builds an ordinary local pool (:func:`shmatari.make`) of that node's envs.

    Args:
        game: as :func:`shmatari.make`'s ``env_id``.
        num_envs: envs in all (>= the number of nodes).
        num_nodes: where the actors go:

            - None (default): one actor on each alive node with at least
              ``num_cpus_per_node`` CPUs (a ``STRICT_SPREAD`` placement group);
            - an int: that many actors, one per node (``STRICT_SPREAD``);
            - a ``ray.util.placement_group.PlacementGroup``: one actor per
              bundle, in bundle order (each bundle must hold
              ``num_cpus_per_node`` CPUs);
            - a list of Ray node ids (``ray.nodes()[k]["NodeID"]``): one actor
              on each (hard node affinity).
        envs_per_node: None (default: divided evenly, in contiguous slices,
            sizes differing by at most 1), an int (every node; the product
            must be ``num_envs``) or a list of ints, one per node.
        batch_size: results per :meth:`RayVectorEnv.recv` (default
            ``num_envs``: synchronous). ``recv`` returns whichever envs'
            results reach the trainer first, from any node.
        seed: the pool seed, as :func:`shmatari.make`'s: env *i* has the
            streams of env *i* of a local pool with this seed, on any number
            of nodes. None draws fresh entropy once (``env.seed_entropy``).
        restart_workers: a dead actor is restarted by Ray (``max_restarts``)
            and rebuilds its pool; the local pools also replace their dead
            workers (see :func:`shmatari.make`). False: a dead actor raises
            WorkerError.
        num_cpus_per_node: CPUs each actor reserves (its placement bundle).
        max_restarts: with ``restart_workers``, Ray's ``max_restarts`` for
            each actor (-1: no limit).
        start_timeout: seconds to wait for the placement and the nodes' pools.
        **options: the env options and the local pools' ``num_workers``
            (per node; default the node's cores) and ``start_method``, as
            :func:`shmatari.make` takes them. ``zero_copy`` is refused
            (observations are rebuilt on the trainer).

    Returns:
        RayVectorEnv: a ``gymnasium.vector.VectorEnv``; call ``reset()`` first.

    Raises:
        TypeError, ValueError: a bad argument or option (before any actor
            starts), ``num_nodes`` above the cluster's alive nodes, or
            envs that do not divide as ``envs_per_node`` says.
        GetTimeoutError: the placement group was not ready in time.
        WorkerError: a node failed to build its pool.
    """
    if "zero_copy" in options:
        raise TypeError("zero_copy does not apply to shmatari.ray pools: observations are "
                        "rebuilt on the trainer from the frames the nodes send")
    for name in ("env_index_offset", "pool_generation"):
        if name in options:
            raise TypeError(f"{name} is set by shmatari.ray for each node")
    num_workers = options.pop("num_workers", None)
    cfg = _config.build_config(game, num_envs, batch_size=batch_size, seed=seed,
                               restart_workers=restart_workers, **options)
    if num_workers is not None:
        _count("num_workers", num_workers)
    max_restarts = int(max_restarts)
    if not ray.is_initialized():
        ray.init()
    strategies, pg = _placement(num_nodes, num_cpus_per_node, start_timeout)
    try:
        sizes = _split(cfg.num_envs, len(strategies), envs_per_node)
    except BaseException:
        if pg is not None:
            remove_placement_group(pg)
        raise
    return RayVectorEnv(cfg, sizes, strategies, pg, num_workers=num_workers,
                        num_cpus=num_cpus_per_node, max_restarts=max_restarts,
                        options=options, start_timeout=start_timeout)


def _shutdown(actors: list, pg, timeout: float) -> None:
    """Closes the nodes' pools, kills the actors, removes the placement group."""
    if not ray.is_initialized():
        return
    refs = []
    for a in actors:
        try:
            refs.append(a.close.remote())
        except Exception:  # noqa: BLE001 - a dead actor has nothing to close
            pass
    if refs:
        try:
            ray.wait(refs, num_returns=len(refs), timeout=timeout)
        except Exception:  # noqa: BLE001
            pass
    for a in actors:
        try:
            ray.kill(a, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
    actors.clear()
    if pg is not None:
        try:
            remove_placement_group(pg)
        except Exception:  # noqa: BLE001
            pass


class RayVectorEnv(gym.vector.VectorEnv):
    """Atari envs on the nodes of a Ray cluster, one local pool per node.

    The API, shapes and dtypes are :class:`shmatari.ShmVectorEnv`'s:
    observations uint8 ``(n, stack_num, img_height, img_width)`` (``(...,
    3)`` in RGB), oldest frame first; ``reward`` float32, ``terminated`` /
    ``truncated`` bool, ``(n,)``; the same ``info`` keys (``env_id`` int32
    global env indices, ``episode`` with ``_episode``, ``final_obs`` in
    same-step pools, ...). Every array returned is the caller's own.

    ``nodes`` describes each node: ``{"node": k, "env_ids": range, "node_id",
    "ip", "pid", "worker_pids", "segment_name", "restarts"}``. Use it from one
    thread at a time. Make it with :func:`make`.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, cfg: _config.EnvConfig, sizes: list[int], strategies: list, pg,
                 *, num_workers, num_cpus, max_restarts, options, start_timeout):
        self.config = cfg
        self.num_envs, self.batch_size = cfg.num_envs, cfg.batch_size
        self.seed_entropy = cfg.seed
        self.closed = False
        self._broken: str | None = None
        self._actors: list = []
        self._finalizer = weakref.finalize(self, _shutdown, self._actors, pg, _CLOSE_TIMEOUT)
        self._restart = cfg.restart_workers
        self._start_timeout = start_timeout
        self._autoreset = cfg.autoreset_mode
        self.metadata = dict(type(self).metadata, autoreset_mode=_GYM_AUTORESET[self._autoreset])
        self.autoreset_mode = self.metadata["autoreset_mode"]
        bounds = np.cumsum([0] + sizes)
        self._bounds = bounds
        sync = cfg.batch_size == cfg.num_envs and not cfg.restart_workers
        remote = ray.remote(_Node)
        try:
            for k, (strategy, n) in enumerate(zip(strategies, sizes)):
                args = dict(options, game=cfg.game, seed=cfg.seed,
                            restart_workers=cfg.restart_workers,
                            # A node answers a call only when all its envs in
                            # it are done; a synchronous pool steps them in one
                            # batch, else it takes them as they come.
                            batch_size=n if sync else 1,
                            num_workers=None if num_workers is None else min(num_workers, n))
                self._actors.append(remote.options(
                    num_cpus=num_cpus, scheduling_strategy=strategy,
                    max_restarts=max_restarts if cfg.restart_workers else 0,
                    max_task_retries=0).remote(k, int(bounds[k]), n, args))
            metas = self._get([a.start.remote(0) for a in self._actors], "starting")
        except BaseException:
            self.close()
            raise
        self.nodes = [dict(m, node=k, env_ids=range(int(bounds[k]), int(bounds[k + 1])),
                           restarts=0) for k, m in enumerate(metas)]
        shape, n_actions = tuple(metas[0]["obs_shape"]), metas[0]["n_actions"]
        self.single_observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.observation_space = gym.spaces.Box(0, 255, (self.num_envs,) + shape, np.uint8)
        self.single_action_space = gym.spaces.Discrete(n_actions)
        self.action_space = gym.spaces.MultiDiscrete(np.full(self.num_envs, n_actions))
        self._stacks = np.zeros((self.num_envs,) + shape, np.uint8)
        self._state = np.zeros(self.num_envs, np.int8)
        self._done = np.zeros(self.num_envs, bool)
        self._pending = 0
        self._needs_reset = True
        self._inflight: dict = {}   # ObjectRef -> (seq, node, kind, args)
        self._seq = 0
        self._ready: list = []      # decoded rows not yet returned
        self._ready_count = 0
        self.wire_bytes = 0         # bytes of arrays received from the nodes
        self.wire_rows = 0          # rows (env results) received

    # -- helpers -----------------------------------------------------------------
    def _get(self, refs: list, during: str):
        try:
            return ray.get(refs, timeout=self._start_timeout)
        except ray.exceptions.RayError as exc:
            k = self._node_of_error(exc, refs)
            raise self._node_error(k, exc, during) from None

    def _node_of_error(self, exc, refs) -> int:
        for k, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=0)
            except ray.exceptions.GetTimeoutError:
                continue
            except Exception:  # noqa: BLE001 - the one that failed
                return k
        return -1

    def _node_error(self, k: int, exc: BaseException, during: str = "") -> WorkerError:
        if k < 0:
            return WorkerError(f"a node failed {during}: {exc}", worker=-1,
                               env_ids=range(self.num_envs), exitcode=None,
                               worker_traceback=str(exc))
        begin, end = int(self._bounds[k]), int(self._bounds[k + 1])
        where = ""
        nodes = getattr(self, "nodes", None)
        if nodes:
            n = nodes[k]
            where = f" on Ray node {n['node_id']} ({n['ip']}), actor pid {n['pid']}"
        died = isinstance(exc, ray.exceptions.RayActorError)
        cause = getattr(exc, "cause", None)
        text = str(cause if cause is not None else exc).strip()
        head = text.splitlines()[0] if text else type(exc).__name__
        msg = (f"node {k}{where}, envs {begin}..{end - 1}, "
               f"{'died' if died else 'failed'}{' while ' + during if during else ''}: ")
        if died:
            msg += head
        else:
            # The node's own error, its env indices local to the node's pool.
            msg += f"its pool raised {head}\n--- node traceback ---\n{text}"
        return WorkerError(msg, worker=k, env_ids=range(begin, end), exitcode=None,
                           worker_traceback=text)

    def _usable(self) -> None:
        check_usable(self.closed, self._broken)

    def _submit(self, k: int, kind: str, args: tuple, seq: int | None = None) -> None:
        actor = self._actors[k]
        ref = actor.step.remote(*args) if kind == "step" else actor.reset.remote(*args)
        if seq is None:
            seq = self._seq = self._seq + 1
        self._inflight[ref] = (seq, k, kind, args)

    # -- the async API -------------------------------------------------------------
    def send(self, actions, env_id=None) -> None:
        """Sends actions to envs that are waiting for one.

        Args:
            actions: integer action indices, shape ``(n,)``.
            env_id: int env indices ``(n,)`` (global), no duplicates; default
                every env.

        Raises:
            TypeError: non-integer actions or env ids.
            ValueError: wrong shapes, out-of-range actions or ids, duplicates.
            CallOrderError: an env is still running, reset() was not called,
                or (``autoreset_mode="disabled"``) an env's episode ended.
            PoolClosedError: the pool is closed or broken.
        """
        self._usable()
        if self._needs_reset:
            raise CallOrderError("call reset() (or async_reset()) before stepping")
        ids = np.arange(self.num_envs) if env_id is None else self._check_env_ids(env_id)
        acts = self._check_actions(actions, ids.size)
        busy = ids[self._state[ids] != _IDLE]
        if busy.size:
            raise CallOrderError(f"env(s) {busy.tolist()} are still running: recv() "
                                 f"their results before sending to them again")
        if self._autoreset == "disabled" and self._done[ids].any():
            raise CallOrderError(
                f"env(s) {ids[self._done[ids]].tolist()} ended an episode and autoreset_mode "
                f"is 'disabled': reset them first with reset(options={{'reset_mask': mask}})")
        node = np.searchsorted(self._bounds, ids, side="right") - 1
        for k in np.unique(node):
            sel = node == k
            local = (ids[sel] - self._bounds[k]).astype(np.int32)
            self._submit(int(k), "step", (local, acts[sel]))
        self._state[ids] = _PENDING
        self._pending += ids.size

    def _check_env_ids(self, env_ids) -> np.ndarray:
        try:
            ids = np.asarray(env_ids)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"env_id must be a 1-D array of integers: {exc}") from exc
        if ids.shape == (0,):
            ids = ids.astype(np.int64)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"env_id must be integers, got dtype {ids.dtype}")
        if ids.ndim != 1:
            raise ValueError(f"env_id must be 1-D, got shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_envs):
            raise ValueError(f"env_id out of range 0..{self.num_envs - 1}: {ids.tolist()}")
        if np.unique(ids).size != ids.size:
            raise ValueError(f"env_id holds duplicates: {ids.tolist()}")
        return ids.astype(np.int64)

    def _check_actions(self, actions, n: int) -> np.ndarray:
        try:
            acts = np.asarray(actions)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"actions must be an array of integers: {exc}") from exc
        if acts.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers, got dtype {acts.dtype}")
        if acts.shape != (n,):
            raise ValueError(f"actions must have shape ({n},), got {acts.shape}")
        high = self.single_action_space.n
        if n and (acts.min() < 0 or acts.max() >= high):
            raise ValueError(f"actions must be in 0..{high - 1}, got {acts.tolist()}")
        return acts.astype(np.int32)

    def async_reset(self, seed: int | None = None, options: dict | None = None) -> None:
        """Resets envs without waiting; collect the results with :meth:`recv`.

        Raises:
            As :meth:`reset`.
        """
        self._usable()
        mask = self._check_reset_options(seed, options)
        if self._pending:
            raise CallOrderError(f"{self._pending} env(s) are still running: recv() "
                                 f"their results before resetting")
        if seed is not None:
            seed = seeding.check_seed(seed)
            self.seed_entropy = seed
        for k in range(len(self._actors)):
            b, e = self._bounds[k], self._bounds[k + 1]
            self._submit(k, "reset", (None if mask is None else mask[b:e], seed))
        if mask is None:
            self._done[:] = False
        else:
            self._done[mask] = False
        self._state[:] = _PENDING
        self._pending = self.num_envs
        self._needs_reset = False

    def _check_reset_options(self, seed, options):
        from .client import check_reset_options

        mask = check_reset_options(seed, options, self.num_envs)
        if mask is None:
            return None
        if self._needs_reset and not mask.all():
            raise CallOrderError("the first reset must reset every env: call reset() "
                                 "without 'reset_mask'")
        return mask.copy()

    def recv(self, timeout: float | None = None):
        """Waits for the next ``batch_size`` results, from whichever nodes answer first.

        Returns:
            (obs, reward, terminated, truncated, info): as
            :meth:`shmatari.ShmVectorEnv.recv`; ``obs`` uint8 ``(batch_size,
            *single_observation_space.shape)``; in a synchronous pool rows
            are in env order, else ``info["env_id"]`` (int32) names them.

        Args:
            timeout: seconds to wait at most (None: until results come or a
                node is reported dead).

        Raises:
            StepTimeoutError: ``timeout`` passed; nothing was taken.
            TypeError, ValueError: ``timeout`` is not None or a number >= 0
                (NaN is refused).
            CallOrderError: fewer than ``batch_size`` envs are running.
            WorkerError: a node's actor died (as soon as Ray reports it), or
                its pool failed, naming the node and its envs; with
                ``restart_workers`` only if its restart fails.
            PoolClosedError: the pool is closed or broken.
        """
        from .client import check_timeout

        timeout = check_timeout(timeout)  # NaN would never pass, a negative at once
        self._usable()
        if self._pending < self.batch_size:
            raise CallOrderError(f"recv() needs {self.batch_size} running env(s), "
                                 f"{self._pending} are: send() actions first")
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._ready_count < self.batch_size:
            wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))
            done, _ = ray.wait(list(self._inflight), num_returns=1, timeout=wait)
            if done and len(self._inflight) > 1:
                done = sorted(ray.wait(list(self._inflight), num_returns=len(self._inflight),
                                       timeout=0)[0], key=lambda r: self._inflight[r][0])
            for ref in done:
                if ref in self._inflight:
                    self._receive(ref)
            if not done and deadline is not None and time.monotonic() >= deadline:
                raise StepTimeoutError(
                    f"recv() waited {timeout:g} s for {self.batch_size} result(s); the pool is "
                    f"unchanged (recv() again, or close() it)")
        return self._take_batch()

    def _receive(self, ref) -> None:
        seq, k, kind, args = self._inflight.pop(ref)
        try:
            packet = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError,
                ray.exceptions.OwnerDiedError) as exc:
            self._node_died(k, exc, (seq, kind, args))
            return
        except ray.exceptions.RayError as exc:  # the node's method raised
            err = self._node_error(k, exc)
            self._broken = str(err)
            raise err from None
        self.wire_bytes += wire_bytes(packet)
        self.wire_rows += len(packet["env_id"])
        self._decode(packet, kind, args)

    def _node_died(self, k: int, exc: BaseException, call: tuple) -> None:
        """Raises WorkerError, or restarts node ``k`` and resends its calls."""
        err = self._node_error(k, exc)
        if not self._restart:
            self._broken = str(err)
            raise err
        calls = [call] + [(s, kind, a) for r, (s, n, kind, a) in self._inflight.items() if n == k]
        for r in [r for r, v in self._inflight.items() if v[1] == k]:
            del self._inflight[r]
        node = self.nodes[k]
        node["restarts"] += 1
        _log.warning("%s; Ray restarts it (restart %d of this node)",
                     str(err).partition("\n")[0], node["restarts"])
        deadline = time.monotonic() + self._start_timeout
        while True:
            try:
                meta = ray.get(self._actors[k].start.remote(node["restarts"]),
                               timeout=max(1.0, deadline - time.monotonic()))
                break
            except ray.exceptions.ActorUnavailableError as again:
                # Still restarting: Ray refuses calls for a moment.
                if time.monotonic() > deadline:
                    self._broken = str(err)
                    raise self._node_error(k, again, "restarting") from None
                time.sleep(0.1)
            except ray.exceptions.RayActorError as again:
                # Out of restarts (max_restarts), or it died again while starting.
                self._broken = str(err)
                raise self._node_error(k, again, "restarting") from None
            except ray.exceptions.RayError as again:
                self._broken = str(err)
                raise self._node_error(k, again, "restarting") from None
        node.update(meta)
        for seq, kind, args in sorted(calls, key=lambda c: c[0]):
            self._submit(k, kind, args, seq)

    def _decode(self, packet: dict, kind: str, args: tuple) -> None:
        ids = packet.pop("env_id").astype(np.int64)
        # A node's envs in order (every synchronous reply): a view, no gather.
        where = ids
        if ids.size and ids[-1] - ids[0] + 1 == ids.size and (np.diff(ids) == 1).all():
            where = slice(int(ids[0]), int(ids[-1]) + 1)
        old = self._stacks[where]
        obs = _apply(packet.pop("~op"), packet.pop("~frames"), packet.pop("~full", None), old)
        final = None
        if "~fop" in packet:
            m = packet["_final_obs"]
            final = np.zeros_like(obs)
            final[m] = _apply(packet.pop("~fop"), packet.pop("~fframes"),
                              packet.pop("~ffull", None), old[m])
        self._stacks[where] = obs
        if kind == "step" and self._autoreset == "disabled":
            self._done[ids] = packet["~terminated"] | packet["~truncated"]
        packet["env_id"] = ids.astype(np.int32)
        self._ready.append({"obs": obs, "final": final, "cols": packet})
        self._ready_count += len(ids)

    def _take_batch(self):
        chunks, self._ready = self._ready, []
        dtypes = {}
        for c in chunks:
            for k, v in c["cols"].items():
                dtypes.setdefault(k, v.dtype)
        if len(chunks) == 1:
            cols, obs, fobs = dict(chunks[0]["cols"]), chunks[0]["obs"], chunks[0]["final"]
        else:
            n = [len(c["obs"]) for c in chunks]
            cols = {k: np.concatenate([c["cols"].get(k, np.zeros(m, dt))
                                       for c, m in zip(chunks, n)])
                    for k, dt in dtypes.items()}
            obs = np.concatenate([c["obs"] for c in chunks])
            has_final = any(c["final"] is not None for c in chunks)
            fobs = np.concatenate([np.zeros_like(c["obs"]) if c["final"] is None else c["final"]
                                   for c in chunks]) if has_final else None
        B = self.batch_size
        if B == self.num_envs and (np.diff(cols["env_id"]) < 0).any():
            order = np.argsort(cols["env_id"], kind="stable")
            cols = {k: v[order] for k, v in cols.items()}
            obs = obs[order]
            fobs = None if fobs is None else fobs[order]
        rest = obs.shape[0] - B
        if rest:
            self._ready = [{"obs": obs[B:], "final": None if fobs is None else fobs[B:],
                            "cols": {k: v[B:] for k, v in cols.items()}}]
            obs, fobs = obs[:B], None if fobs is None else fobs[:B]
            cols = {k: v[:B] for k, v in cols.items()}
        self._ready_count = rest
        env_id = cols["env_id"]
        self._state[env_id] = _IDLE
        self._pending -= B
        reward = cols.pop("~reward")
        terminated, truncated = cols.pop("~terminated"), cols.pop("~truncated")
        if "_episode" in cols and not cols["_episode"].any():
            cols = {k: v for k, v in cols.items()
                    if not (k.startswith("episode/") or k == "_episode")}
        if "_final_obs" in cols and not cols["_final_obs"].any():
            cols = {k: v for k, v in cols.items()
                    if not (k.startswith("final_info/") or k in ("_final_obs", "_final_info"))}
        info = _unflatten(cols)
        if "_final_obs" in info:
            objs = np.full(B, None, dtype=object)
            for j in np.flatnonzero(info["_final_obs"]):
                objs[j] = fobs[j]
            info["final_obs"] = objs
        return obs, reward, terminated, truncated, info

    # -- the Gymnasium API -----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Resets every env (or those in ``options["reset_mask"]``), as
        :meth:`shmatari.ShmVectorEnv.reset`.

        Returns:
            (obs, info): ``obs`` uint8 ``(num_envs, *single_observation_space.shape)``
            in a synchronous pool; else the first ``batch_size`` envs ready.

        Raises:
            CallOrderError: envs are still running, or a ``reset_mask``
                before the first full reset.
            TypeError, ValueError: a bad seed or options.
            WorkerError: a node died or failed.
        """
        self.async_reset(seed=seed, options=options)
        obs, _, _, _, info = self.recv()
        return obs, info

    def step(self, actions, env_id=None, timeout: float | None = None):
        """Steps the envs once: ``send(actions, env_id)`` then ``recv(timeout)``.

        Returns:
            (obs, reward, terminated, truncated, info), as :meth:`recv`.

        Raises:
            As :meth:`send` and :meth:`recv`.
        """
        self.send(actions, env_id)
        return self.recv(timeout)

    # -- lifetime ------------------------------------------------------------------
    def close(self, **kwargs) -> None:
        """Closes every node's pool (workers stopped, segments removed), kills
        the actors and removes the placement group this pool made. Idempotent."""
        self.closed = True
        self._finalizer()

    def close_extras(self, **kwargs) -> None:
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self) -> str:
        return (f"RayVectorEnv({self.config.game!r}, num_envs={self.num_envs}, "
                f"batch_size={self.batch_size}, nodes={len(self._bounds) - 1}, "
                f"{'closed' if self.closed else 'open'})")

    @property
    def actors(self) -> list:
        """The nodes' Ray actor handles, in node order."""
        return list(self._actors)
