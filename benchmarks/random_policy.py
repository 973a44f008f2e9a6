"""A uniformly random policy's score on a game, with the options of examples/ppo_atari.py.

The baseline the PPO learning curve is judged against: the same pool options
(``preset="dqn"``: no sticky actions, up to 30 no-ops, FIRE reset, episodic
life, clipped rewards; ``autoreset_mode="same_step"``), actions uniform over
the game's minimal action set, and the raw score of each whole game
(``info["episode"]["r"]``), as the example logs it.

    python benchmarks/random_policy.py --env-id Breakout --num-envs 8 --games 100 --seed 1 \\
        --json benchmarks/results/random-breakout.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

import shmatari


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-id", default="Breakout")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--games", type=int, default=100, help="whole games to play (at least)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-workers", type=int, default=None)
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    returns, lengths = [], []
    start = time.perf_counter()
    with shmatari.make(args.env_id, args.num_envs, num_workers=args.num_workers, seed=args.seed,
                       preset="dqn", autoreset_mode="same_step") as env:
        env.reset()
        n = env.single_action_space.n
        while len(returns) < args.games:
            _, _, _, _, info = env.step(rng.integers(0, n, size=args.num_envs))
            if "episode" in info:
                done = info["_episode"]
                returns += info["episode"]["r"][done].tolist()
                lengths += info["episode"]["l"][done].tolist()
    r = np.array(returns)
    result = {
        "env_id": args.env_id, "policy": "uniform random", "num_envs": args.num_envs, "seed": args.seed,
        "options": "preset='dqn', autoreset_mode='same_step' (as examples/ppo_atari.py)",
        "games": int(r.size), "mean_return": round(float(r.mean()), 3),
        "std_return": round(float(r.std()), 3), "sem_return": round(float(r.std() / np.sqrt(r.size)), 3),
        "min_return": float(r.min()), "max_return": float(r.max()),
        "mean_length_agent_steps": round(float(np.mean(lengths)), 1),
        "seconds": round(time.perf_counter() - start, 1), "python": platform.python_version(),
        "returns": returns,
    }
    print(f"{args.env_id}, uniform random policy, {r.size} games: mean return {r.mean():.3f} "
          f"(std {r.std():.3f}, sem {result['sem_return']:.3f}, min {r.min():g}, max {r.max():g}), "
          f"mean length {result['mean_length_agent_steps']} agent steps")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
