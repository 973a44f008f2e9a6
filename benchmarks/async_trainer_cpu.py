"""The trainer's own CPU time in an async pool, by phase, per batch.

An async ``recv()`` / ``send()`` pair is: wait for the next batch
(``wait``: the futex sleep and wake-up, when the batch is not ready yet),
copy it out of the ring (``collect``: the observations, written by the
workers on the other cores), build ``info`` (``info``), post the actions
(``send``). This runs those parts of the client's own path
(``client_next_batch``, ``Segment.collect``, ``results.batch_info``,
``Client._send``) under random actions with the thread's CPU clock
(``time.thread_time_ns``) and the wall clock around each, for ``--batches``
batches, ``--sittings`` times, and reports the mean microseconds per batch
and the trainer's share of the machine's cores (its CPU time over the wall
time times the cores): what a pool with no trainer (the ceilings of
``shmatari-bench``) does not pay.

Then, for comparison, the same work with a warm cache (``warm``): one
batch held, its ``collect`` and ``info`` repeated back to back, and the
Python half of ``send`` (its arguments' conversion, ``send_args``), in the
same process with nothing else between them. In the loop the trainer wakes
from its futex on a core a worker was using; what the loop's figures cost
beyond the warm ones is the refill of its caches and the observations
fetched from the other core.

    python3 benchmarks/async_trainer_cpu.py --game Breakout --num-envs 8 --batch-size 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from shmatari import _cli, _core, config as _config, results
from shmatari.client import send_args
from shmatari.env import ShmVectorEnv

PHASES = ("wait", "collect", "info", "send")


def timed_batches(env: ShmVectorEnv, batches: int, table: np.ndarray, k0: int) -> dict:
    """Mean CPU and wall microseconds of each phase per batch, and the
    sitting's wall seconds."""
    client = env._client
    seg = client._seg
    cpu = dict.fromkeys(PHASES, 0)
    wall = dict.fromkeys(PHASES, 0)
    start = time.perf_counter_ns()
    for k in range(k0, k0 + batches):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        while seg.client_next_batch(0.2) != _core.OK:
            pass
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        obs = np.empty(client._batch_obs_shape, np.uint8)
        fields, bits = seg.collect(seg.taken, obs)
        w2, c2 = time.perf_counter_ns(), time.thread_time_ns()
        seg.client_release()
        client._last_ids = fields["env_id"]
        results.batch_info(fields, bits, client._episode_statistics)
        w3, c3 = time.perf_counter_ns(), time.thread_time_ns()
        client._send(table[k % len(table)], fields["env_id"])
        w4, c4 = time.perf_counter_ns(), time.thread_time_ns()
        for p, (wa, wb, ca, cb) in zip(PHASES, ((w0, w1, c0, c1), (w1, w2, c1, c2),
                                                (w2, w3, c2, c3), (w3, w4, c3, c4))):
            wall[p] += wb - wa
            cpu[p] += cb - ca
    seconds = (time.perf_counter_ns() - start) / 1e9
    return {"cpu_us": {p: v / batches / 1000 for p, v in cpu.items()},
            "wall_us": {p: v / batches / 1000 for p, v in wall.items()},
            "seconds": seconds, "batches": batches}


def warm_phases(env: ShmVectorEnv, table: np.ndarray, repeats: int = 5000) -> dict:
    """CPU microseconds of ``collect``, ``info`` and ``send_args`` on one
    held batch, each repeated ``repeats`` times back to back (warm caches)."""
    client = env._client
    seg = client._seg
    while seg.client_next_batch(0.2) != _core.OK:
        pass
    out = {}
    try:
        obs = np.empty(client._batch_obs_shape, np.uint8)
        c0 = time.thread_time_ns()
        for _ in range(repeats):
            fields, bits = seg.collect(seg.taken, obs)
        out["collect"] = (time.thread_time_ns() - c0) / repeats / 1000
        c0 = time.thread_time_ns()
        for _ in range(repeats):
            results.batch_info(fields, bits, client._episode_statistics)
        out["info"] = (time.thread_time_ns() - c0) / repeats / 1000
        ids = fields["env_id"]
        c0 = time.thread_time_ns()
        for k in range(repeats):
            send_args(table[k % len(table)], ids, env.num_envs, client.batch_size, ids)
        out["send_args"] = (time.thread_time_ns() - c0) / repeats / 1000
    finally:
        seg.client_release()
        client._last_ids = fields["env_id"]
        client._send(table[0], fields["env_id"])  # the batch's envs go on
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Breakout")
    p.add_argument("--num-envs", type=_cli.positive_int, default=8)
    p.add_argument("--batch-size", type=_cli.positive_int, default=4)
    p.add_argument("--batches", type=_cli.positive_int, default=3000,
                   help="timed batches per sitting")
    p.add_argument("--sittings", type=_cli.positive_int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    cfg = _config.build_config(args.game, args.num_envs, num_workers=2,
                               batch_size=args.batch_size)
    cores = len(os.sched_getaffinity(0))
    env = ShmVectorEnv(cfg)
    try:
        env.async_reset(seed=0)
        table = np.random.default_rng(1).integers(0, env.single_action_space.n,
                                                  (4096, args.batch_size))
        timed_batches(env, 300, table, 0)  # warm-up
        out = {"game": args.game, "num_envs": args.num_envs, "batch_size": args.batch_size,
               "cores": cores, "sittings": []}
        for s in range(args.sittings):
            r = timed_batches(env, args.batches, table, (s + 1) * args.batches)
            total = sum(r["cpu_us"].values())
            r["cpu_us_total"] = total
            r["share_of_cores"] = total * r["batches"] / 1e6 / r["seconds"] / cores
            r["env_steps_per_s"] = r["batches"] * args.batch_size / r["seconds"]
            out["sittings"].append(r)
            print(s, "CPU us/batch", {k: round(v, 1) for k, v in r["cpu_us"].items()},
                  f"total {total:.1f}; wall us/batch",
                  {k: round(v, 1) for k, v in r["wall_us"].items()},
                  f"; {r['env_steps_per_s']:.0f} env steps/s; trainer "
                  f"{100 * r['share_of_cores']:.1f} % of {cores} cores", flush=True)
        out["warm_cpu_us"] = warm_phases(env, table)
        print("warm (one batch held, each part repeated): CPU us",
              {k: round(v, 1) for k, v in out["warm_cpu_us"].items()}, flush=True)
    finally:
        env.close()
    med = statistics.median(s["cpu_us_total"] for s in out["sittings"])
    share = statistics.median(s["share_of_cores"] for s in out["sittings"])
    print(f"median of the sittings: trainer CPU {med:.1f} us per batch of "
          f"{args.batch_size}, {100 * share:.1f} % of {cores} cores")
    if args.json:
        _cli.write_json(args.json, out)


if __name__ == "__main__":
    main()
