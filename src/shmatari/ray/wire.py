"""shmatari.ray's wire format: one node's reply as flat NumPy arrays.

An actor ships only each env's newest frame plus the result's rewards,
flags and info fields, one array per field per call (nothing is pickled per
env); the trainer keeps each env's frame stack and rebuilds the observation
from a one-byte code per row (``OP_*``; the package docstring describes them).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["OP_SHIFT", "OP_FILL", "OP_KEEP", "OP_FULL", "wire_bytes"]

#: How a row's observation is rebuilt from the env's previous one (a uint8 per row).
OP_SHIFT, OP_FILL, OP_KEEP, OP_FULL = 0, 1, 2, 3
#: Info fields an observed (not reset) env repeats from its last result.
KEPT_FIELDS = ("lives", "elapsed_step", "episode_frame_number", "frame_number")


def flatten(info: Mapping, prefix: str = "") -> dict:
    """``info`` as ``{"a/b": array}``; ``final_obs`` (an object array) is left out."""
    flat = {}
    for key, value in info.items():
        if key == "final_obs" and not prefix:
            continue
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}/"))
        else:
            flat[prefix + key] = np.asarray(value)
    return flat


def unflatten(flat: Mapping) -> dict:
    info = {}
    for key, value in flat.items():
        *path, leaf = key.split("/")
        node = info
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return info


def rows(obs, reward, terminated, truncated, info) -> dict:
    """One local ``recv()``'s rows: ``{"ids", "obs", "fobs", "cols"}``; ``cols``
    holds the result (``~reward``, ``~terminated``, ``~truncated``) and the
    flat info; ``fobs`` the same-step final observations (dense, rows
    without one are zero) or None. A row the node made up for an observed
    env (``Node._observed``) adds ``~observed`` (True), which the trainer's
    client state machine reads as ``FLAG_OBSERVED``."""
    cols = {"~reward": np.asarray(reward), "~terminated": np.asarray(terminated),
            "~truncated": np.asarray(truncated)}
    cols.update(flatten(info))
    fobs = None
    if "final_obs" in info:
        fobs = np.zeros_like(obs)
        for j in np.flatnonzero(info["_final_obs"]):
            fobs[j] = info["final_obs"][j]
    return {"ids": np.asarray(info["env_id"], np.int64), "obs": obs, "fobs": fobs, "cols": cols}


def merge(parts: list, dtypes: dict | None = None) -> dict:
    """Rows of several parts as one part (fields a part lacks are zero)."""
    if len(parts) == 1:
        return parts[0]
    dtypes = dict(dtypes or {})
    like: dict = {}
    for p in parts:
        for k, v in p["cols"].items():
            dtypes.setdefault(k, v.dtype)
            like.setdefault(k, v)
    cols = {k: np.concatenate([p["cols"].get(k, zeros(len(p["ids"]), like[k], dt))
                               for p in parts])
            for k, dt in dtypes.items() if k in like}
    fobs = None
    if any(p["fobs"] is not None for p in parts):
        fobs = np.concatenate([p["obs"] * 0 if p["fobs"] is None else p["fobs"] for p in parts])
    return {"ids": np.concatenate([p["ids"] for p in parts]),
            "obs": np.concatenate([p["obs"] for p in parts]), "fobs": fobs, "cols": cols}


def zeros(n: int, like: np.ndarray, dtype=None) -> np.ndarray:
    """``n`` zero rows shaped as ``like``'s rows (``info["ram"]``'s are
    ``(128,)``; a flat zero column for it broke the merge)."""
    return np.zeros((n,) + like.shape[1:], like.dtype if dtype is None else dtype)


def take(part: dict, idx) -> dict:
    return {"ids": part["ids"][idx], "obs": part["obs"][idx],
            "fobs": None if part["fobs"] is None else part["fobs"][idx],
            "cols": {k: v[idx] for k, v in part["cols"].items()}}


def order(part: dict, ids: np.ndarray) -> dict:
    """The rows of ``part`` in the order of ``ids`` (each present once)."""
    where = np.empty(int(part["ids"].max()) + 1, np.int64)
    where[part["ids"]] = np.arange(len(part["ids"]))
    return take(part, where[ids])


def delta(new: np.ndarray, old: np.ndarray, has_old: np.ndarray):
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


def apply(op, frames, full, old: np.ndarray) -> np.ndarray:
    """Rebuilds the stacks that :func:`delta` coded; ``old`` (n, stack, ...)."""
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
