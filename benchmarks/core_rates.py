"""How evenly this machine's cores run at the same time: one process pinned
to each core, all stepping the same envs, each reporting its rate over
short windows.

A synchronous pool waits at every round for its slowest worker; processes
that never wait (``shmatari-bench``'s ceilings) sum their rates. When the
cores run at different speeds at the same time (a neighbour on a sibling
hyperthread or a shared cache, on a shared VM), a barrier loses what the
faster cores could have done. Per window this prints each core's env steps
per second and ``min x cores / sum``: the share of the summed rate that
processes meeting at a barrier after every step could reach, if every
process had the same work (the barrier's own cost not counted). Then the
same share over the whole run, with the windows merged 1, 5 and 25 at a
time (one run seen at three time scales).
Short windows are quantised: 4 Breakout envs per core step about 11 rounds
in 20 ms, so a rate there moves in steps of about 200 env steps/s.

    python3 benchmarks/core_rates.py --seconds 20 --window 0.02 --json out.json
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

import numpy as np

from shmatari import _bench_backends as backends, _cli, atari, config as _config


def _pinned(core: int, rank: int, game: str, num_envs: int, start: float, windows: int,
            window: float, conn) -> None:
    os.sched_setaffinity(0, {core})
    cfg = _config.build_config(game, num_envs, num_workers=1, **backends.OPTIONS)
    palette = atari.build_palette(cfg)
    cores = [atari.build_core(cfg, i, palette) for i in range(num_envs)]
    for c in cores:
        c.reset()
    acts = np.random.default_rng(rank).integers(0, cores[0].num_actions,
                                                (backends.ACTION_ROWS, num_envs)).tolist()
    k, rates = 0, []
    if time.time() >= start:
        conn.send(f"building the envs on core {core} took past the common start: the "
                  f"windows would not line up across cores")
        return
    while time.time() < start:  # every process starts its windows together
        time.sleep(0.001)
    t0 = time.perf_counter()
    for w in range(windows):
        steps, end = 0, t0 + (w + 1) * window
        while time.perf_counter() < end:
            row = acts[k % backends.ACTION_ROWS]
            k += 1
            for j, c in enumerate(cores):
                c.step(row[j])
            steps += num_envs
        rates.append(steps / window)
    conn.send(rates)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Breakout", help="the game every process steps")
    p.add_argument("--num-envs", type=_cli.positive_int, default=4, help="envs per core")
    p.add_argument("--seconds", type=_cli.positive_float, default=20.0,
                   help="length of the measured run, in seconds")
    p.add_argument("--window", type=_cli.positive_float, default=0.1,
                   help="length of one window, in seconds (the shortest time scale)")
    p.add_argument("--json", default=None,
                   help="also write every window's rates per core and the shares as JSON")
    args = p.parse_args()
    windows = round(args.seconds / args.window)
    if windows < 2:
        p.error(f"--seconds {args.seconds:g} holds fewer than 2 windows of {args.window:g} s")
    cpus = sorted(os.sched_getaffinity(0))
    ctx = mp.get_context("spawn")
    start = time.time() + 8.0  # time to build the envs
    pipes, procs = [], []
    for rank, cpu in enumerate(cpus):
        parent, child = ctx.Pipe()
        procs.append(ctx.Process(target=_pinned, args=(cpu, rank, args.game, args.num_envs,
                                                       start, windows, args.window, child)))
        procs[-1].start()
        pipes.append(parent)
    rates = [conn.recv() for conn in pipes]
    for proc in procs:
        proc.join()
    late = [r for r in rates if isinstance(r, str)]
    if late:
        raise SystemExit("core_rates: " + late[0])
    shares = [min(col) * len(col) / sum(col) for col in zip(*rates)]
    print(f"{args.game}, {args.num_envs} envs per core, cores {cpus}, windows of "
          f"{args.window:g} s")
    print(f"{'window':>8}  " + "  ".join(f"{'core ' + str(c):>8}" for c in cpus)
          + "   barrier share (env steps/s per core)")
    for i, col in enumerate(zip(*rates)):
        print(f"{i * args.window:7.2f}s  " + "  ".join(f"{r:8,.0f}" for r in col)
              + f"   {shares[i]:.3f}")
    q = statistics.quantiles(shares, n=4)
    print(f"barrier share per window: median {statistics.median(shares):.3f} (quartiles "
          f"{q[0]:.3f}..{q[2]:.3f}, min {min(shares):.3f}); per-core medians "
          + ", ".join(f"{statistics.median(r):,.0f}" for r in rates))
    overall = {}
    for merge in (1, 5, 25):
        merged = [[sum(r[i:i + merge]) for i in range(0, len(r) - merge + 1, merge)]
                  for r in rates]
        if merged[0]:
            overall[f"{merge * args.window:g}"] = (
                sum(min(col) * len(col) for col in zip(*merged)) / sum(map(sum, merged)))
    print("over the whole run, the share with windows of "
          + ", ".join(f"{w} s: {v:.3f}" for w, v in overall.items())
          + " (every window's slowest core times the cores, over the sum of all)")
    if args.json:
        _cli.write_json(args.json, {"game": args.game, "num_envs_per_core": args.num_envs,
                                    "cpus": cpus, "window_s": args.window, "rates": rates,
                                    "barrier_share": shares, "overall_share": overall})


if __name__ == "__main__":
    main()
