"""The spin policy: how long workers and the client poll before sleeping on the futex.

Read by the supervisor (for the workers and its own client) and by an
attaching client; the numbers are passed to ``_core`` (``Segment.spin_ns``,
``worker_loop``), which does the waiting.
"""

from __future__ import annotations

from . import _core

__all__ = ["spin_policy"]


def spin_policy(num_workers: int, cores: int) -> dict:
    """How long workers and the client poll before sleeping on the futex.

    A futex wake-up costs tens of microseconds (more in a VM), more than a
    worker usually waits for its next request when it has a core to itself,
    so a waiter polls first. It polls with ``sched_yield()``: if anything else
    wants the core (a learner's threads, another worker), it gets it at once.
    With more workers than cores a poll only delays the process it waits
    for, so then everyone sleeps at once.

    Returns:
        dict: ``{"worker": (spin_ns, mode), "client": (spin_ns, mode)}``.
    """
    if num_workers < cores:
        return {"worker": (100_000, _core.SPIN_YIELD), "client": (50_000, _core.SPIN_YIELD)}
    if num_workers == cores:
        return {"worker": (50_000, _core.SPIN_YIELD), "client": (0, _core.SPIN_YIELD)}
    return {"worker": (0, _core.SPIN_YIELD), "client": (0, _core.SPIN_YIELD)}
