"""What a fast reset costs, between builds: interleaved rounds of
``reset_share.run`` (shmatari's ``AtariCore`` stepping envs in one process
under random actions, no IPC), each build in a fresh process per round,
rotating builds within each round; per build and sticky setting, the
medians over rounds of the mean time of a reset step (a step that starts a
new game: the fast reset and its saved no-op start, the first observation)
and of an ordinary step, in microseconds, and of the reset steps' extra time
beyond as many ordinary steps, as a share of all the time.

    python3 benchmarks/fast_reset_ab.py --build before=/path/to/old/src \\
        --build after=src --rounds 7 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from shmatari import _cli

HERE = Path(__file__).resolve().parent

#: one round of one build: the steady state after a warm-up phase
CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import reset_share
out = {{}}
for sticky in (0.0, 0.25):
    rows = reset_share.run({game!r}, {num_envs}, sticky, "auto", 2, {steps})
    out[str(sticky)] = rows[-1]
print(json.dumps(out))
"""


def one(path: str, game: str, num_envs: int, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(path).resolve()))
    code = CHILD.format(here=str(HERE), game=game, num_envs=num_envs, steps=steps)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True, timeout=1800)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", action="append", required=True, metavar="NAME=SRC",
                   help="a build's name and its src folder (shmatari importable from it)")
    p.add_argument("--game", default="Breakout")
    p.add_argument("--num-envs", type=_cli.positive_int, default=4)
    p.add_argument("--steps", type=_cli.positive_int, default=2000,
                   help="agent steps per env in each of a round's two phases")
    p.add_argument("--rounds", type=_cli.positive_int, default=7)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    _cli.check_output_path(p, "--json", args.json)
    builds = dict(b.split("=", 1) for b in args.build)
    runs = {name: [] for name in builds}
    for r in range(args.rounds):
        order = list(builds) if r % 2 == 0 else list(reversed(builds))
        for name in order:
            runs[name].append(one(builds[name], args.game, args.num_envs, args.steps))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    summary = {}
    for name, rounds in runs.items():
        for sticky in ("0.0", "0.25"):
            rows = [x[sticky] for x in rounds]
            med = {k: statistics.median(row[k] for row in rows)
                   for k in ("reset_step_us", "other_step_us", "extra")}
            summary[f"{name} sticky {sticky}"] = med
            print(f"{name:>8} sticky {sticky:<4}: reset step {med['reset_step_us']:7.1f} us "
                  f"(rounds {min(row['reset_step_us'] for row in rows):.1f}-"
                  f"{max(row['reset_step_us'] for row in rows):.1f}), other step "
                  f"{med['other_step_us']:6.1f} us, reset extra {100 * med['extra']:.2f} % "
                  f"of the time, {rows[0]['games']} games a round")
    if args.json:
        _cli.write_json(args.json, {"benchmark": "fast_reset_ab", "game": args.game,
                                    "num_envs": args.num_envs, "steps": args.steps,
                                    "rounds": args.rounds, "builds": builds,
                                    "summary": summary, "runs": runs})


if __name__ == "__main__":
    main()
