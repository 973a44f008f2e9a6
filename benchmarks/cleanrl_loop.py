"""A CleanRL-style PPO loop on shmatari.envpool and on EnvPool, interleaved.

Both backends run examples/cleanrl_ppo_envpool.py's loop (Nature CNN, torch
on CPU, CleanRL's hyper-parameters: 8 envs, 128 steps per rollout, 4 epochs
of 4 minibatches) with the same options (EnvPool's defaults plus
``episodic_life=True``, ``reward_clip=True``), both open at once, in
segments of ``--iters`` iterations in A-B-B-A order, so that both see the
same machine load. Per iteration it records:

- rollout SPS: env steps / seconds of the rollout (policy forward + env.step);
- env.step SPS: env steps / seconds spent inside ``envs.step`` alone;
- loop SPS: env steps / seconds of rollout + update.

torch runs on ``--torch-threads`` threads (default 1, the same for both).

It prints medians and spreads, the ratio of the medians and the median of
the per-round ratios (shmatari's mean over EnvPool's within each A-B-B-A
round), and writes them all to ``--json``. Run::

    nice -n 10 python3 benchmarks/cleanrl_loop.py --rounds 3 --json benchmarks/results/cleanrl_loop.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cleanrl_ppo_envpool.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("cleanrl_ppo_envpool", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _StepTimer:
    """Wraps ``envs.step`` and adds up the seconds spent inside it."""

    def __init__(self, envs):
        self.envs, self.seconds = envs, 0.0
        self._step = envs.step
        envs.step = self

    def __call__(self, action):
        t = time.perf_counter()
        out = self._step(action)
        self.seconds += time.perf_counter() - t
        return out


def _iteration(ppo, timer, it: int, n_iters: int) -> dict:
    steps = ppo.args.num_envs * ppo.args.num_steps
    timer.seconds = 0.0
    t0 = time.perf_counter()
    ppo.rollout()
    t1 = time.perf_counter()
    ppo.update(it, n_iters)
    t2 = time.perf_counter()
    return {"rollout_sps": steps / (t1 - t0), "env_step_sps": steps / timer.seconds,
            "loop_sps": steps / (t2 - t0)}


def _summary(rows: list[dict]) -> dict:
    out = {}
    for key in ("rollout_sps", "env_step_sps", "loop_sps"):
        vals = [r[key] for r in rows]
        med = statistics.median(vals)
        out[key] = {"median": round(med, 1), "min": round(min(vals), 1),
                    "max": round(max(vals), 1),
                    "spread_pct": round(100 * (max(vals) - min(vals)) / med, 1)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="Breakout-v5")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3, help="A-B-B-A rounds")
    p.add_argument("--iters", type=int, default=1, help="iterations per segment")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch's intra-op threads (1: steadier on a shared machine; 0: torch's default)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)

    import envpool
    import torch

    import shmatari.envpool

    if a.torch_threads:
        torch.set_num_threads(a.torch_threads)
    example = _load_example()
    args = example.Args(env_id=a.env_id, num_envs=a.num_envs, num_steps=a.num_steps,
                        seed=a.seed)
    backends = {}
    for name, module in (("shmatari", shmatari.envpool), ("envpool", envpool)):
        example.envpool = module          # the script's one import line, swapped
        envs = example.make_envs(args)
        ppo = example.PPO(args, envs)
        backends[name] = (ppo, _StepTimer(envs.env))
    order = []
    for r in range(a.rounds):
        order += ["shmatari", "envpool", "envpool", "shmatari"] if r % 2 == 0 else \
                 ["envpool", "shmatari", "shmatari", "envpool"]
    n_iters = 1 + len(order) * a.iters
    load_before = os.getloadavg()
    rows = {name: [] for name in backends}
    for name, (ppo, timer) in backends.items():     # warm-up, not counted
        _iteration(ppo, timer, 1, n_iters)
    for seg, name in enumerate(order):
        ppo, timer = backends[name]
        for k in range(a.iters):
            row = _iteration(ppo, timer, 2 + seg * a.iters + k, n_iters)
            rows[name].append(row)
            print(f"segment {seg:2d} {name:8s} rollout {row['rollout_sps']:7.1f} "
                  f"env.step {row['env_step_sps']:7.1f} loop {row['loop_sps']:7.1f} SPS",
                  flush=True)
    load_after = os.getloadavg()
    for ppo, _ in backends.values():
        ppo.envs.close()
    summary = {name: _summary(r) for name, r in rows.items()}
    # Per A-B-B-A round: mean of shmatari's segments over mean of EnvPool's,
    # which cancels a load that drifts linearly within the round.
    per_round = {key: [] for key in ("rollout_sps", "env_step_sps", "loop_sps")}
    seen = {name: 0 for name in backends}
    for r in range(a.rounds):
        got = {}
        for name in order[4 * r:4 * r + 4]:
            got.setdefault(name, []).extend(rows[name][seen[name]:seen[name] + a.iters])
            seen[name] += a.iters
        for key in per_round:
            mean = {n: statistics.mean(x[key] for x in v) for n, v in got.items()}
            per_round[key].append(round(mean["shmatari"] / mean["envpool"], 3))
    ratios = {key: round(summary["shmatari"][key]["median"] / summary["envpool"][key]["median"], 3)
              for key in ("rollout_sps", "env_step_sps", "loop_sps")}
    print()
    print(f"{'':10s} {'rollout SPS':>22s} {'env.step SPS':>22s} {'loop SPS':>22s}")
    for name, s in summary.items():
        cells = [f"{s[k]['median']:8.1f} ({s[k]['min']:.0f}-{s[k]['max']:.0f})"
                 for k in ("rollout_sps", "env_step_sps", "loop_sps")]
        print(f"{name:10s} " + " ".join(f"{c:>22s}" for c in cells))
    print(f"{'ratio':10s} " + " ".join(f"{ratios[k]:>22.3f}"
                                      for k in ("rollout_sps", "env_step_sps", "loop_sps")))
    paired = {k: statistics.median(v) for k, v in per_round.items()}
    print(f"{'per round':10s} " + " ".join(
        f"{paired[k]:>8.3f} ({min(per_round[k]):.2f}-{max(per_round[k]):.2f})".rjust(22)
        for k in ("rollout_sps", "env_step_sps", "loop_sps")))
    result = {
        "benchmark": "cleanrl_loop",
        "command": "python3 benchmarks/cleanrl_loop.py " + " ".join(argv or sys.argv[1:]),
        "settings": {"env_id": a.env_id, "num_envs": a.num_envs, "num_steps": a.num_steps,
                     "rounds": a.rounds, "iters_per_segment": a.iters, "order": order,
                     "env_options": "EnvPool defaults + episodic_life=True, reward_clip=True",
                     "torch_threads": torch.get_num_threads()},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "envpool": envpool.__version__,
                    "loadavg_before": [round(x, 2) for x in load_before],
                    "loadavg_after": [round(x, 2) for x in load_after]},
        "per_iteration": rows,
        "summary": summary,
        "ratio_shmatari_over_envpool": ratios,
        "ratio_per_round": per_round,
        "ratio_per_round_median": {k: statistics.median(v) for k, v in per_round.items()},
    }
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
