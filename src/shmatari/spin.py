"""The spin policy: how long workers and the client poll before sleeping on the futex.

Read by the supervisor (for the workers and its own client) and by an
attaching client; the numbers are passed to ``_core`` (``Segment.spin_ns``,
``worker_loop``), which does the waiting.
"""

from __future__ import annotations

from . import _core

__all__ = ["spin_policy", "LONG_SPIN_NS"]

#: The longest a worker polls while its recent waits have been short (ns).
LONG_SPIN_NS = 2_000_000


def spin_policy(num_workers: int, cores: int) -> dict:
    """How long workers and the client poll before sleeping on the futex.

    A futex wake-up costs tens of microseconds (more in a VM), more than a
    worker usually waits for its next request when it has a core to itself,
    so a waiter polls first. It polls with ``sched_yield()``: if anything else
    wants the core (a learner's threads, another worker), it gets it at once.
    With more workers than cores a poll only delays the process it waits
    for, so then everyone sleeps at once.

    Unless there are more workers than cores, a worker also polls longer, up
    to ``long_spin_ns`` (2 ms), while the client has answered it quickly of
    late: the client's longest recent share of a wait, fading by 1/8 a wait,
    under 1 ms. The client's share runs from the moment the round's batch
    filled (the worker sees ``main_seq`` move while it polls, or before its
    wait begins) to the next request; a wait for a slower worker of the same
    round does not count. A trainer that answers at once (a synchronous
    loop, a double-buffered one) gets workers that keep their core between
    rounds instead of handing it back to the hypervisor and waiting to get
    it again, which on a shared VM costs more than the futex itself. A
    trainer whose answers take longer (a policy of several milliseconds
    between steps, an idle pool), or are slow now and then (a gradient step
    every few env steps: one 5 ms answer keeps the worker from polling long
    for the next 13 waits), gets workers that sleep after the short poll,
    and keeps the cores for its own work.

    Measured interleaved on this project's 2-core VM, Breakout, 8 envs, 2
    workers, two sittings (``benchmarks/step_throughput_ab.py``,
    ``benchmarks/results/adaptive-poll-ab.txt``), against the 50 us poll
    alone: 1.06-1.07x the env steps/s synchronous (per-round medians
    1.08-1.11x); with a Nature-CNN policy between batches 1.08x
    double-buffered (1.02-1.10x) and 1.02-1.08x synchronous (0.99x);
    async 1.00-1.02x (0.98-1.03x). The fading maximum against the first
    version's average of the waits
    (``benchmarks/results/adaptive-poll-fading-ab.txt``): sync 0.94-1.02x,
    with the policy 0.95-0.99x, within the noise. Counting the client's
    share alone, against the whole wait
    (``benchmarks/results/client-share-poll-ab.txt``): sync 1.06x at 8
    envs (per round 1.06x) and 1.00x at 16 (1.04x); async 1.03x; with the
    policy 0.99x sync and 0.97x double-buffered (per round 1.03x, 0.99x);
    with 5 ms of trainer work every 8 batches 1.01x (0.99x).

    Returns:
        dict: ``{"worker": (spin_ns, mode, long_spin_ns), "client": (spin_ns, mode)}``.
    """
    if num_workers < cores:
        return {"worker": (100_000, _core.SPIN_YIELD, LONG_SPIN_NS),
                "client": (50_000, _core.SPIN_YIELD)}
    if num_workers == cores:
        return {"worker": (50_000, _core.SPIN_YIELD, LONG_SPIN_NS),
                "client": (0, _core.SPIN_YIELD)}
    return {"worker": (0, _core.SPIN_YIELD, 0), "client": (0, _core.SPIN_YIELD)}
