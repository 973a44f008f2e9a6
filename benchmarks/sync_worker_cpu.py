"""How much CPU a synchronous pool's workers spend per env step, against the
same core stepped in the trainer's own process, interleaved.

``where_time_goes.py`` shows a synchronous Breakout pool's workers spending
more CPU per env step than the ceiling's processes (about 470 against 343
us on this repository's 2-core VM). This tells apart three suspects, each a
pool open for the whole run, with bursts in rotation:

- ``1w``: one worker with 4 envs, so the trainer has the other core;
- ``2w``: two workers with 4 envs each, sharing the two cores with the
  trainer (the bench's setting), with the default spin policy;
- ``2w-nospin``: the same with workers that sleep at once instead of
  polling first (``shmatari.spin``): whether polling is the extra CPU;

and after each burst, the same 4 envs' cores stepped in this process
(``in-process``: CPU per env step with no IPC and no other process).
Reported per variant: env steps/s, the workers' CPU per env step (from
``/proc``, user + system) and the trainer's.

    python3 benchmarks/sync_worker_cpu.py --rounds 6 --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from shmatari import _bench_backends as backends, _cli, atari, config as _config, supervisor
from shmatari.env import ShmVectorEnv
from where_time_goes import _stat


def _open(game: str, num_workers: int, worker_spin: tuple | None):
    cfg = _config.build_config(game, 4 * num_workers, num_workers=num_workers,
                               **backends.OPTIONS)
    policy = supervisor.spin_policy
    if worker_spin is not None:
        supervisor.spin_policy = lambda nw, cores: dict(policy(nw, cores), worker=worker_spin)
    try:
        env = ShmVectorEnv(cfg)
    finally:
        supervisor.spin_policy = policy
    return backends.Runner(env, cfg.num_envs, sync=True), cfg


def _worker_cpu(env) -> float:
    return sum(_stat(f"/proc/{pid}")[0] for pid in env.worker_pids)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Breakout")
    p.add_argument("--rounds", type=_cli.positive_int, default=6)
    p.add_argument("--seconds", type=_cli.positive_float, default=2.0)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    variants = {"1w": (1, None), "2w": (2, None), "2w-nospin": (2, (0, 1, 0))}
    runners = {}
    try:
        for name, (nw, spin) in variants.items():
            runners[name], cfg = _open(args.game, nw, spin)
        cores = [atari.build_core(cfg, i, atari.build_palette(cfg)) for i in range(4)]
        for c in cores:
            c.reset()
        acts = np.random.default_rng(5).integers(0, cores[0].num_actions, (4096, 4)).tolist()
        out = {k: [] for k in [*variants, "in-process"]}
        names = list(variants)
        for r in range(args.rounds):
            for i in range(len(names)):
                name = names[(i + r) % len(names)]
                run = runners[name]
                run.burst(0.3, 0.01, lambda t: None)
                w0, m0 = _worker_cpu(run.env), time.thread_time()
                b = run.burst(0.0, args.seconds, lambda t: None)
                steps = b["env_steps"]
                out[name].append({"steps_per_s": steps / b["seconds"],
                                  "worker_us": 1e6 * (_worker_cpu(run.env) - w0) / steps,
                                  "trainer_us": 1e6 * (time.thread_time() - m0) / steps})
            k, steps, t0, c0 = 0, 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - t0 < args.seconds:
                row = acts[k % len(acts)]
                k += 1
                for j, c in enumerate(cores):
                    c.step(row[j])
                steps += 4
            out["in-process"].append({"steps_per_s": steps / (time.perf_counter() - t0),
                                      "worker_us": 1e6 * (time.process_time() - c0) / steps,
                                      "trainer_us": 0.0})
            print(f"round {r + 1}/{args.rounds}", flush=True)
    finally:
        for run in runners.values():
            run.env.close()
    print(f"{args.game}, median of {args.rounds} bursts of {args.seconds:g} s")
    print(f"{'variant':<12}{'env steps/s':>12}{'worker us/step':>16}{'trainer us/step':>17}")
    for name, bursts in out.items():
        med = {k: statistics.median(b[k] for b in bursts) for k in bursts[0]}
        print(f"{name:<12}{med['steps_per_s']:>12,.0f}{med['worker_us']:>16.0f}"
              f"{med['trainer_us']:>17.0f}")
    if args.json:
        _cli.write_json(args.json, {"game": args.game, "seconds": args.seconds, "bursts": out})


if __name__ == "__main__":
    main()
