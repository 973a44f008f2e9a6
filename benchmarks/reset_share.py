"""How much of an env's time its resets take, game after game, in one
process (no IPC): shmatari's core (``AtariCore``) stepping ``--num-envs``
envs under random actions with the bench's options, timed step by step.

With next-step autoreset the step after a game's end is its reset. Per
phase of ``--steps`` steps per env this prints the no-op starts each env
has saved (``AtariCore.saved_starts``: fast resets restore a saved start
instead of emulating its no-op frames), the games started, the mean time
of a reset step and of any other step, and ``extra``: the reset steps'
time beyond that of as many ordinary steps, as a share of all the time.
Phase 0 includes each env's first games (ALE's own reset, then the
starts being saved); the later phases show the steady state.

    python3 benchmarks/reset_share.py --game Breakout --phases 4 --json out.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from shmatari import _bench_backends as backends, _cli, atari, config as _config


def run(game: str, num_envs: int, sticky: float, fast_reset: str, phases: int,
        steps: int) -> list:
    opts = dict(backends.OPTIONS, repeat_action_probability=sticky)
    opts.pop("fast_reset", None)
    cfg = _config.build_config(game, num_envs, num_workers=1, fast_reset=fast_reset, **opts)
    palette = atari.build_palette(cfg)
    cores = [atari.build_core(cfg, i, palette) for i in range(num_envs)]
    for c in cores:
        c.reset()
    acts = np.random.default_rng(0).integers(0, cores[0].num_actions,
                                             (backends.ACTION_ROWS, num_envs)).tolist()
    out, done, k = [], [False] * num_envs, 0
    for phase in range(phases):
        reset_ns, other_ns = [], []
        for _ in range(steps):
            row = acts[k % backends.ACTION_ROWS]
            k += 1
            for j, c in enumerate(cores):
                t = time.perf_counter_ns()
                c.step(row[j])
                (reset_ns if done[j] else other_ns).append(time.perf_counter_ns() - t)
                done[j] = bool(c.episode_done)
        total = sum(reset_ns) + sum(other_ns)
        other_mean = float(np.mean(other_ns))
        out.append({"phase": phase, "saved_starts": [c.saved_starts for c in cores],
                    "games": len(reset_ns),
                    "reset_step_us": float(np.mean(reset_ns)) / 1e3 if reset_ns else None,
                    "other_step_us": other_mean / 1e3,
                    "extra": (sum(reset_ns) - len(reset_ns) * other_mean) / total})
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Breakout")
    p.add_argument("--num-envs", type=_cli.positive_int, default=4)
    p.add_argument("--phases", type=_cli.positive_int, default=4)
    p.add_argument("--steps", type=_cli.positive_int, default=6000,
                   help="agent steps per env in each phase")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    _cli.check_output_path(p, "--json", args.json)
    results = []
    for sticky in (0.0, 0.25):
        for fast in ("auto", "off"):
            rows = run(args.game, args.num_envs, sticky, fast, args.phases, args.steps)
            for r in rows:
                print(f"sticky {sticky} fast_reset={fast} phase {r['phase']}: saved starts "
                      f"{r['saved_starts']}, {r['games']} games, reset step "
                      f"{r['reset_step_us'] or 0:.0f} us, other step {r['other_step_us']:.0f} us, "
                      f"extra {100 * r['extra']:.2f} % of the time", flush=True)
            results.append({"sticky": sticky, "fast_reset": fast, "phases": rows})
    if args.json:
        _cli.write_json(args.json, {"benchmark": "reset_share", "game": args.game,
                                    "num_envs": args.num_envs, "steps": args.steps,
                                    "results": results})


if __name__ == "__main__":
    main()
