"""shmatari.ray's placement on the cluster: where the node actors go, how the
envs divide between them, and how they are shut down."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

#: Seconds the nodes may take to start (placement, actors, their pools).
START_TIMEOUT = 300.0
#: Seconds close() waits for the nodes to close their pools before killing them.
CLOSE_TIMEOUT = 10.0


def check_count(name, value, lo=1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    return int(value)


def split(num_envs: int, num_nodes: int, envs_per_node) -> list[int]:
    if envs_per_node is None:
        q, r = divmod(num_envs, num_nodes)
        sizes = [q + (1 if k < r else 0) for k in range(num_nodes)]
    elif isinstance(envs_per_node, numbers.Integral) and not isinstance(envs_per_node, bool):
        sizes = [check_count("envs_per_node", envs_per_node)] * num_nodes
    elif isinstance(envs_per_node, Sequence):
        sizes = [check_count("envs_per_node[k]", n) for n in envs_per_node]
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


def alive_nodes() -> list[dict]:
    return [n for n in ray.nodes() if n.get("Alive")]


def placement(num_nodes, num_cpus: float, timeout: float):
    """(strategies, placement group we made or None) for ``num_nodes``."""
    if isinstance(num_nodes, PlacementGroup):
        return [PlacementGroupSchedulingStrategy(num_nodes, placement_group_bundle_index=k)
                for k in range(num_nodes.bundle_count)], None
    if isinstance(num_nodes, (list, tuple)):
        if not num_nodes or not all(isinstance(n, str) for n in num_nodes):
            raise TypeError("num_nodes as a placement must be a non-empty list of Ray node ids "
                            f"(hex str, ray.nodes()[k]['NodeID']), got {num_nodes!r}")
        alive = {n["NodeID"] for n in alive_nodes()}
        unknown = [n for n in num_nodes if n not in alive]
        if unknown:
            raise ValueError(f"num_nodes names node(s) that are not alive in this cluster: "
                             f"{unknown}; alive: {sorted(alive)}")
        return [NodeAffinitySchedulingStrategy(n, soft=False) for n in num_nodes], None
    alive = [n for n in alive_nodes() if n.get("Resources", {}).get("CPU", 0) >= num_cpus]
    if num_nodes is None:
        num_nodes = len(alive)
    num_nodes = check_count("num_nodes", num_nodes)
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


def shutdown(actors: list, pg, timeout: float, created: list | None = None) -> None:
    """Closes the nodes' pools (waiting up to ``timeout`` seconds), kills the
    actors, removes the placement group.

    ``created``: each actor's answer to its first call (``Node.ready``), in
    actor order, or None (every actor is closed): an actor that has not
    answered it was never created (Ray could not schedule it) and has no
    pool; it is killed without waiting for a close it would never run (close()
    waited the whole ``timeout`` for it)."""
    if not ray.is_initialized():
        return
    started = range(len(actors))
    if created:
        try:
            ready = set(ray.wait(created, num_returns=len(created), timeout=0)[0])
            started = [k for k, r in enumerate(created) if r in ready]
        except Exception:  # noqa: BLE001 - Ray refused: close every actor, as before
            pass
    refs = []
    for k in started:
        try:
            refs.append(actors[k].close.remote())
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
    if created is not None:
        created.clear()
    if pg is not None:
        try:
            remove_placement_group(pg)
        except Exception:  # noqa: BLE001
            pass
