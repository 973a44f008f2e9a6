"""Step throughput of two builds of shmatari, interleaved (A/B).

Each build runs in its own process with its pool open for the whole run;
the processes take turns running short bursts, and the script reports
medians and spread of steps per second. With the built-in ``null`` env (the
default: no emulation) the figure is the client's and the workers' protocol
cost; with a game (``--game Breakout``) it is the whole step, emulation
included, under uniformly random actions from a fixed table (the same in
both builds).

    python3 benchmarks/step_throughput_ab.py --a /path/to/old/src --b src \\
        --rounds 15 --burst 1.0 [--game Breakout]

``--a`` / ``--b``: directories to put first on ``sys.path`` (a source tree's
``src`` with its extension built in place).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, shmatari
num_envs, batch_size, game = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
env = shmatari.make(game, num_envs=num_envs, batch_size=batch_size, num_workers=2, seed=0)
obs, info = env.reset(seed=0)
table = np.random.default_rng(12345).integers(0, env.single_action_space.n, (1024, batch_size))
k = 0
acts = table[0]
if batch_size != num_envs:  # the reset's first batch back to work; the rest still run
    env.send(acts, info["env_id"])
print("ready", shmatari.__file__, flush=True)
for line in sys.stdin:
    burst = float(line)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < burst:
        k += 1
        acts = table[k % len(table)]
        if batch_size == num_envs:
            env.step(acts)
        else:
            obs, rew, term, trunc, info = env.recv()
            env.send(acts, info["env_id"])
        n += batch_size
    print(n / (time.perf_counter() - t0), flush=True)
env.close()
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--burst", type=float, default=1.0)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--game", default="null", help="'null' (the protocol alone) or a game")
    args = p.parse_args()
    batch = args.batch_size or args.num_envs
    procs = {}
    for label, path in (("a", args.a), ("b", args.b)):
        procs[label] = subprocess.Popen(
            [sys.executable, "-c", CHILD, path, str(args.num_envs), str(batch), args.game],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        print(label, procs[label].stdout.readline().strip(), file=sys.stderr)
    rates = {"a": [], "b": []}
    try:
        for r in range(args.rounds):
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            for label in order:
                procs[label].stdin.write(f"{args.burst}\n")
                procs[label].stdin.flush()
                rates[label].append(float(procs[label].stdout.readline()))
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait(30)
    out = {}
    for label, xs in rates.items():
        q = statistics.quantiles(xs, n=4)
        out[label] = {"median": statistics.median(xs), "q1": q[0], "q3": q[2], "n": len(xs)}
        print(f"{label}: median {out[label]['median']:,.0f} steps/s "
              f"(IQR {q[0]:,.0f}..{q[2]:,.0f}, {len(xs)} bursts of {args.burst} s)")
    ratio = out["b"]["median"] / out["a"]["median"]
    print(f"b/a: {ratio:.3f}  ({args.game}, num_envs {args.num_envs}, batch_size {batch})")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
