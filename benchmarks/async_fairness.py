"""How evenly an async pool steps its envs: the spread of per-env step counts.

Issue 11's setting: 16 envs on 2 workers, ``batch_size=8``, random actions,
each batch's envs sent their next action at once (EnvPool's
``send(action, env_id)`` loop). After ``--steps`` env steps in all, it
reports per backend the step count of each env and the spread,
``(max - min) / mean``, and the largest deviation from the mean, in %.
EnvPool runs the same loop (``num_threads=2``) when it is installed and
``--envpool`` is given.

    python benchmarks/async_fairness.py --steps 20000 --json benchmarks/results/async_fairness.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--game", default="Breakout")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=20_000, help="env steps in all")
    p.add_argument("--envpool", action="store_true", help="run EnvPool's pool too")
    p.add_argument("--json", default=None, help="write the results here")
    return p.parse_args(argv)


def run(env, steps: int, num_envs: int, n_actions: int, seed: int = 0) -> np.ndarray:
    """Steps an async pool (shmatari's or EnvPool's) ``steps`` env steps; returns
    the steps of each env."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(num_envs, np.int64)
    env.async_reset()
    done = 0
    while done < steps:
        *_, info = env.recv()
        ids = np.asarray(info["env_id"])
        counts[ids] += 1
        done += ids.size
        env.send(rng.integers(0, n_actions, ids.size), ids)
    env.recv()  # the last batch sent, so that the pool closes idle
    return counts - 1  # the reset's result is not a step


def summary(counts: np.ndarray) -> dict:
    mean = counts.mean()
    return {"counts": counts.tolist(), "mean": float(mean),
            "spread_pct": float((counts.max() - counts.min()) / mean * 100),
            "max_dev_pct": float(np.abs(counts - mean).max() / mean * 100)}


def main(argv=None) -> None:
    a = parse_args(argv)
    import shmatari

    out = {"game": a.game, "num_envs": a.num_envs, "num_workers": a.num_workers,
           "batch_size": a.batch_size, "steps": a.steps, "results": {}}
    env = shmatari.make(a.game, a.num_envs, batch_size=a.batch_size,
                        num_workers=a.num_workers, seed=0)
    try:
        t = time.perf_counter()
        counts = run(env, a.steps, a.num_envs, int(env.single_action_space.n))
        out["results"]["shmatari"] = dict(summary(counts), seconds=time.perf_counter() - t)
    finally:
        env.close()
    if a.envpool:
        import envpool

        env = envpool.make(f"{a.game}-v5", env_type="gymnasium", num_envs=a.num_envs,
                           batch_size=a.batch_size, num_threads=a.num_workers, seed=0)
        try:
            t = time.perf_counter()
            counts = run(env, a.steps, a.num_envs, int(env.action_space.n))
            out["results"]["envpool"] = dict(summary(counts), seconds=time.perf_counter() - t)
        finally:
            env.close()
    print(f"{a.game}, {a.num_envs} envs, {a.num_workers} workers, batch {a.batch_size}, "
          f"{a.steps} env steps:")
    for name, r in out["results"].items():
        print(f"{name}: steps per env {r['counts']}; spread (max-min)/mean "
              f"{r['spread_pct']:.2f} %, largest deviation {r['max_dev_pct']:.2f} %")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
