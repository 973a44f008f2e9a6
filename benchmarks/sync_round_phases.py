"""Where a synchronous round's time goes, from the trainer's side, beside the
fast-reset ceiling in the same sitting.

A synchronous ``step()`` is: post the actions (``send``), wait until every
env has answered (``wait``: the workers' emulation, the slower worker, the
wake-ups), copy the batch out of the ring (``collect``), build the result
arrays and ``info`` (``rest``). This runs those four parts of the client's
own ``step`` path (``Client._send``, ``client_next_batch``, ``collect``,
``results.batch_info``) with a timer around each, for ``--rounds`` rounds
under random actions, then one ``ceiling-fast`` burst (shmatari-bench's
row: the same envs in one process per worker, no IPC, fast resets), and
repeats ``--sittings`` times. A round of the ceiling is ``num_envs`` over
its rate: the time each of its processes takes for its share of a round.

    python3 benchmarks/sync_round_phases.py --game Breakout --json out.json
    python3 benchmarks/sync_round_phases.py --game Breakout -o noop_max=0
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from shmatari import _bench_backends as backends, _cli, _core, config as _config, results
from shmatari.env import ShmVectorEnv

PHASES = ("send", "wait", "collect", "rest", "round")


def timed_rounds(env: ShmVectorEnv, rounds: int, table: np.ndarray, k0: int) -> dict:
    """Mean microseconds of each phase over ``rounds`` synchronous rounds."""
    client = env._client
    seg = client._seg
    spent = {p: [] for p in PHASES}
    t_prev = None
    for k in range(k0, k0 + rounds):
        t0 = time.perf_counter_ns()
        client._send(table[k % len(table)], None, step=True)
        t1 = time.perf_counter_ns()
        while seg.client_next_batch(0.2) != _core.OK:
            pass
        t2 = time.perf_counter_ns()
        obs = np.empty(client._batch_obs_shape, np.uint8)
        fields, bits = seg.collect(seg.taken, obs)
        t3 = time.perf_counter_ns()
        seg.client_release()
        client._last_ids = fields["env_id"]
        results.batch_info(fields, bits, client._episode_statistics)
        t4 = time.perf_counter_ns()
        if t_prev is not None:
            for p, dt in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t0 - t_prev)):
                spent[p].append(dt)
        t_prev = t0
    return {p: float(np.mean(v)) / 1000 for p, v in spent.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Breakout")
    p.add_argument("--num-envs", type=_cli.positive_int, default=8)
    p.add_argument("--rounds", type=_cli.positive_int, default=3000,
                   help="timed rounds per sitting")
    p.add_argument("--sittings", type=_cli.positive_int, default=4)
    p.add_argument("--ceiling-seconds", type=_cli.positive_float, default=4.0)
    p.add_argument("-o", "--option", action="append", type=_cli.env_option, default=[],
                   metavar="KEY=VALUE", help="an env option, parsed by its type, e.g. noop_max=0")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    options = dict(args.option)
    n = args.num_envs
    cfg = _config.build_config(args.game, n, num_workers=2, **options)
    env = ShmVectorEnv(cfg)
    ceiling = None
    try:
        env.reset(seed=0)
        table = np.random.default_rng(1).integers(0, env.single_action_space.n, (1024, n))
        ceiling = backends.Ceiling(cfg, fast_reset=True)
        timed_rounds(env, 300, table, 0)  # warm-up
        out = {"game": args.game, "num_envs": n, "options": options, "pool": [],
               "ceiling_fast_round_us": []}
        for s in range(args.sittings):
            out["pool"].append(timed_rounds(env, args.rounds, table, (s + 1) * args.rounds))
            burst = ceiling.burst(0.3, args.ceiling_seconds, lambda t: None)
            out["ceiling_fast_round_us"].append(n / (burst["env_steps"] / burst["seconds"]) * 1e6)
            print(s, {k: round(v, 1) for k, v in out["pool"][-1].items()},
                  f"ceiling-fast round {out['ceiling_fast_round_us'][-1]:.1f}", flush=True)
    finally:
        if ceiling is not None:
            ceiling.close()
        env.close()
    med = {k: statistics.median(s[k] for s in out["pool"]) for k in PHASES}
    ceil = statistics.median(out["ceiling_fast_round_us"])
    print("median of the sittings' means (us): " +
          ", ".join(f"{k} {v:.1f}" for k, v in med.items()) +
          f"; ceiling-fast round {ceil:.1f}; sync's rate / ceiling-fast's {ceil / med['round']:.3f}")
    if args.json:
        _cli.write_json(args.json, out)


if __name__ == "__main__":
    main()
