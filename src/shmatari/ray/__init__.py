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

Rooms
-----
- :mod:`shmatari.ray.wire`: the wire format above (rows as flat arrays, the
  frame codes);
- :mod:`shmatari.ray.node`: the node actor, one local pool per node;
- :mod:`shmatari.ray.cluster`: placement, the envs' split, shutdown;
- :mod:`shmatari.ray.vector`: :func:`make` and :class:`RayVectorEnv`, a
  client whose transport is Ray: its calls are checked and recorded by the
  local client's state machine (``_core.ClientMachine``).

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

try:
    import ray  # noqa: F401
except ModuleNotFoundError as _exc:
    if _exc.name != "ray":
        raise
    raise ModuleNotFoundError("shmatari.ray needs Ray: pip install ray (from a clone "
                              "of shmatari: pip install '.[ray]')", name="ray") from None

from .vector import RayVectorEnv, make
from .wire import OP_FILL, OP_FULL, OP_KEEP, OP_SHIFT, wire_bytes

__all__ = ["make", "RayVectorEnv", "OP_SHIFT", "OP_FILL", "OP_KEEP", "OP_FULL", "wire_bytes"]
