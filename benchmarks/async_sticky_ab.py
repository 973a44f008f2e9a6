"""Issue 24: does async lose more to the fast-reset ceiling at sticky 0.25
than at sticky 0? Both settings in one rotation.

In the bench's sittings (one sticky setting per run) async / ceiling-fast
came out lower at sticky 0.25 than at 0; this opens, at once, for each
setting, shmatari's async pool (batch num_envs / 2) and the two ceilings
(ALE's reset, fast resets), and runs short bursts of all six in rotation,
so that the machine's drift falls on both settings alike.

    python3 benchmarks/async_sticky_ab.py [--rounds 9] [--num-envs 8] [--json FILE]

Prints each row's median env steps/s and range, then per setting async /
ceiling-fast, ceiling-fast / ceiling and async / ceiling (ratios of medians).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

from shmatari import _bench_backends as B, config as _config
from shmatari.env import ShmVectorEnv

STICKY = (0.0, 0.25)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    n = args.num_envs
    runs = {}
    try:
        for s in STICKY:
            c = _config.build_config("Breakout", n, num_workers=2, **B.options(s))
            runs[f"ceiling-fast {s}"] = B.Ceiling(c, fast_reset=True)
            runs[f"ceiling {s}"] = B.Ceiling(c, fast_reset=False)
            runs[f"async {s}"] = B.Runner(ShmVectorEnv(dataclasses.replace(c, batch_size=n // 2)),
                                          n, sync=False)
        out = {k: [] for k in runs}
        names = list(runs)
        for r in range(args.rounds):
            for i in range(len(names)):
                name = names[(i + r) % len(names)]
                runs[name].burst(0.3, 0.01, lambda *a: None)  # warm-up
                b = runs[name].burst(0.0, args.seconds, lambda *a: None)
                out[name].append(b["env_steps"] / b["seconds"])
    finally:
        for run in runs.values():
            run.close()
    med = {k: statistics.median(v) for k, v in out.items()}
    for k, v in out.items():
        print(f"{k:<18} {med[k]:7.0f} env steps/s  range {min(v):.0f}-{max(v):.0f}")
    ratios = {}
    for s in STICKY:
        ratios[str(s)] = {"async_vs_ceiling_fast": med[f"async {s}"] / med[f"ceiling-fast {s}"],
                          "ceiling_fast_vs_ceiling": med[f"ceiling-fast {s}"] / med[f"ceiling {s}"],
                          "async_vs_ceiling": med[f"async {s}"] / med[f"ceiling {s}"]}
        print(f"sticky {s}: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios[str(s)].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"num_envs": n, "rounds": args.rounds, "seconds": args.seconds,
                       "rates": out, "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
