"""Final figures of an examples/ppo_atari.py run, against a random policy's score.

Reads the run's ``--out-dir`` (``episodes.csv``, ``updates.csv``) and the JSON
of benchmarks/random_policy.py; writes a JSON of the figures and the learning
curve with the random policy's mean drawn in. Works on a run still going or
stopped early (it reads what the CSVs hold).

    python benchmarks/ppo_summary.py benchmarks/results/ppo-breakout \\
        --random benchmarks/results/random-breakout.json \\
        --json benchmarks/results/ppo-breakout.json --png benchmarks/results/ppo-breakout.png
"""

from __future__ import annotations

import argparse
import csv
import json
import os

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--random", required=True, help="JSON written by benchmarks/random_policy.py")
    p.add_argument("--json", required=True)
    p.add_argument("--png", required=True)
    args = p.parse_args(argv)

    with open(os.path.join(args.run_dir, "episodes.csv")) as f:
        games = [(int(r["global_step"]), float(r["return"])) for r in csv.DictReader(f)]
    with open(os.path.join(args.run_dir, "updates.csv")) as f:
        updates = list(csv.DictReader(f))
    with open(args.random) as f:
        rnd = json.load(f)
    with open(os.path.join(args.run_dir, "summary.json")) as f:   # rewritten during the run
        run_args = json.load(f)["args"]
    planned = run_args["total_timesteps"] // run_args["rollout_size"]
    last = updates[-1]
    steps = int(last["global_step"])
    returns = np.array([g[1] for g in games])
    last20 = returns[-20:]
    collect_s = sum(float(u["collect_s"]) for u in updates)
    update_s = sum(float(u["update_s"]) for u in updates)
    result = {
        "run_dir": args.run_dir,
        "agent_steps": steps, "total_timesteps": run_args["total_timesteps"],
        "updates": len(updates), "planned_updates": planned, "finished": len(updates) == planned,
        "games": len(games),
        "mean_return_last20": round(float(last20.mean()), 3),
        "sem_return_last20": round(float(last20.std() / np.sqrt(last20.size)), 3),
        "best_game": float(returns.max()),
        "random_policy_mean_return": rnd["mean_return"], "random_policy_sem": rnd["sem_return"],
        "random_policy_games": rnd["games"],
        "sps": float(last["sps"]),
        "sps_during_collection": round(sum(int(u["transitions"]) for u in updates) / collect_s, 1),
        "seconds_collecting": round(collect_s, 1), "seconds_updating": round(update_s, 1),
    }
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.array([g[0] for g in games])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, returns, ".", alpha=0.25, label="game")
    k = min(20, returns.size)
    ax.plot(x[k - 1:], np.convolve(returns, np.ones(k) / k, mode="valid"), label=f"mean of last {k} games")
    ax.axhline(rnd["mean_return"], color="k", ls="--", lw=1,
               label=f"random policy ({rnd['games']} games): {rnd['mean_return']:.2f}")
    ax.set_xlabel("agent steps")
    ax.set_ylabel("game score (raw)")
    ax.set_title(f"PPO (examples/ppo_atari.py), {rnd['env_id']}, 8 envs double-buffered, CPU, seed 1")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(args.png, dpi=100)


if __name__ == "__main__":
    main()
