"""Does a pool gain from more workers than cores? An 8-env Breakout pool
with 2, 4 and 8 workers, all open at once, bursts of ``--seconds`` in
rotation (the order reversed every other round), random actions; each
one's env steps per second and its per-round ratio to the 2-worker pool.

    python3 benchmarks/sync_workers_ab.py --mode sync --repeat-action-probability 0.25 --rounds 14
    python3 benchmarks/sync_workers_ab.py --mode async --rounds 10
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import shmatari
from shmatari import _cli

WORKERS = (2, 4, 8)


def burst(env, sync: bool, acts: np.ndarray, k: int, warmup: float, seconds: float):
    """Steps ``env`` for ``warmup`` then ``seconds``; (env steps/s, next k)."""
    n = env.num_envs
    t0, steps, end = None, 0, time.perf_counter() + warmup
    while True:
        now = time.perf_counter()
        if t0 is None and now >= end:
            t0, steps = now, 0
        if t0 is not None and now - t0 >= seconds:
            return steps / (now - t0), k
        k += 1
        if sync:
            env.step(acts[k % len(acts)])
            steps += n
        else:
            info = env.recv()[4]
            ids = info["env_id"]
            env.send(acts[k % len(acts)][:len(ids)], ids)
            steps += len(ids)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("sync", "async"), default="sync")
    p.add_argument("--repeat-action-probability", type=float, default=0.25)
    p.add_argument("--rounds", type=_cli.positive_int, default=10)
    p.add_argument("--seconds", type=_cli.positive_float, default=1.5)
    p.add_argument("--warmup", type=_cli.nonnegative_float, default=0.3)
    args = p.parse_args(argv)
    sync, n = args.mode == "sync", 8
    envs = {}
    try:
        for w in WORKERS:
            kw = {} if sync else dict(batch_size=n // 2)
            envs[w] = shmatari.make("Breakout", num_envs=n, num_workers=w, seed=0,
                                    repeat_action_probability=args.repeat_action_probability,
                                    **kw)
            envs[w].reset() if sync else envs[w].async_reset()
        acts = np.random.default_rng(1).integers(0, 4, (4096, n))
        rates, k = {w: [] for w in WORKERS}, 0
        for r in range(args.rounds):
            for w in (WORKERS if r % 2 == 0 else WORKERS[::-1]):
                rate, k = burst(envs[w], sync, acts, k, args.warmup, args.seconds)
                rates[w].append(rate)
    finally:
        for env in envs.values():
            env.close()
    base = np.array(rates[WORKERS[0]])
    for w in WORKERS:
        v = np.array(rates[w])
        print(f"{args.mode} sticky {args.repeat_action_probability} {w} workers: median "
              f"{np.median(v):,.0f} env steps/s (range {v.min():,.0f}-{v.max():,.0f}); "
              f"per-round vs {WORKERS[0]} workers: median {np.median(v / base):.3f} "
              f"(range {np.min(v / base):.2f}-{np.max(v / base):.2f})")


if __name__ == "__main__":
    main()
