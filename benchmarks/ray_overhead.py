"""What going through Ray costs: shmatari.ray against shmatari.make, interleaved.

Starts a local Ray cluster (``ray.cluster_utils.Cluster``: a head and two
worker nodes, all on this machine) and opens every backend at once:

- ``local``: ``shmatari.make`` (the baseline);
- ``ray-1``: ``shmatari.ray.make(num_nodes=1)``: one actor, on this machine,
  owning a local pool of the same envs (the overhead of going through Ray);
- ``ray-2``: ``num_nodes=2`` (two actors on two nodes of the local cluster,
  half the envs each), synchronous;
- ``ray-2-async``: the same with ``batch_size = num_envs / 2``.

each for Breakout and for the built-in null env (no emulation: the cost of
the round trip itself). Then it steps them in rotation, ``--seconds`` each,
``--rounds`` times, random actions, and reports per backend the median and
the spread (min, max) of env steps/s and of microseconds per batch, and the
bytes per env step that crossed Ray (the arrays' ``nbytes``, counted by the
trainer) and what one reply weighs serialized as Ray serializes it (pickle
protocol 5, the arrays out of band). Then the learner's ingest: the trainer's
CPU time per env step for replies of 8, 64 and 256 envs (null env, one
actor), and the cost of the frame-stack codec alone.

    python benchmarks/ray_overhead.py --num-envs 8 --seconds 2 --rounds 7 \\
        --json benchmarks/results/ray_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import time

import numpy as np


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--game", default="Breakout")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--seconds", type=float, default=2.0, help="length of one burst")
    p.add_argument("--rounds", type=int, default=7, help="bursts per backend")
    p.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before a burst")
    p.add_argument("--no-null", action="store_true", help="skip the null-env backends")
    p.add_argument("--json", help="write the results here")
    return p.parse_args(argv)


class Runner:
    """Steps one open pool for a burst; counts env steps and batches."""

    def __init__(self, name: str, env, sync: bool):
        self.name, self.env, self.sync = name, env, sync
        self.rng = np.random.default_rng(0)
        self.n_actions = env.single_action_space.n
        self.rates, self.us_per_batch, self.cpu_us_per_step = [], [], []
        if sync:
            env.reset(seed=0)
        else:
            env.async_reset(seed=0)

    def burst(self, seconds: float, record: bool = True) -> None:
        env, steps, batches = self.env, 0, 0
        c0 = time.process_time()
        t0 = time.perf_counter()
        end = t0 + seconds
        while True:
            if self.sync:
                env.step(self.rng.integers(0, self.n_actions, env.num_envs))
                steps += env.num_envs
            else:
                _, _, _, _, info = env.recv()
                ids = info["env_id"]
                env.send(self.rng.integers(0, self.n_actions, ids.size), ids)
                steps += ids.size
            batches += 1
            now = time.perf_counter()
            if now >= end:
                break
        if record:
            # the trainer process's own CPU time (all its threads, Ray's included)
            self.cpu_us_per_step.append((time.process_time() - c0) / steps * 1e6)
            self.rates.append(steps / (now - t0))
            self.us_per_batch.append((now - t0) / batches * 1e6)


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "samples": values}


def serialized_reply(game: str, num_envs: int) -> dict:
    """One node's step reply for ``num_envs`` envs, as Ray serializes it."""
    from shmatari.ray import wire_bytes
    from shmatari.ray.node import Node

    node = Node(0, 0, num_envs, dict(game=game, seed=0, num_workers=1, batch_size=num_envs))
    node.start(0)
    try:
        node.reset(None, None, None)  # every env (mask, observe, seed)
        ids = np.arange(num_envs, dtype=np.int32)
        packet = node.step(ids, np.zeros(num_envs, np.int32))
        buffers = []
        head = pickle.dumps(packet, protocol=5, buffer_callback=buffers.append)
        out_of_band = sum(b.raw().nbytes for b in buffers)
        return {"num_envs": num_envs, "arrays_nbytes": wire_bytes(packet),
                "pickle5_inband_bytes": len(head), "pickle5_out_of_band_bytes": out_of_band,
                "serialized_bytes": len(head) + out_of_band,
                "serialized_bytes_per_env_step": (len(head) + out_of_band) / num_envs,
                "fields": {k: [str(v.dtype), list(v.shape)] for k, v in packet.items()}}
    finally:
        node.close()


def codec_cost(num_envs: int = 32, repeats: int = 200) -> dict:
    """Microseconds per env step to code a batch of Breakout-sized stacks on
    the actor (``delta``: compare with the last stacks, pick the code) and
    to rebuild them on the trainer (``apply``), median of ``repeats``."""
    from shmatari.ray.wire import apply, delta

    rng = np.random.default_rng(0)
    old = rng.integers(0, 256, (num_envs, 4, 84, 84), dtype=np.uint8)
    new = np.concatenate([old[:, 1:], rng.integers(0, 256, (num_envs, 1, 84, 84),
                                                    dtype=np.uint8)], axis=1)
    has = np.ones(num_envs, bool)
    enc, dec = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        op, frames, full = delta(new, old, has)
        t1 = time.perf_counter()
        out = apply(op, frames, full, old)
        t2 = time.perf_counter()
        enc.append((t1 - t0) / num_envs * 1e6)
        dec.append((t2 - t1) / num_envs * 1e6)
    assert np.array_equal(out, new)
    return {"num_envs": num_envs, "actor_encode_us_per_env_step": statistics.median(enc),
            "trainer_decode_us_per_env_step": statistics.median(dec)}


def ingest_cost(sray, sizes=(8, 64, 256), seconds: float = 2.0, rounds: int = 3) -> list:
    """The learner's side: one actor serving the null env (which ships the
    same 84x84 frame per env step as Breakout, without emulating), replies of
    ``E`` envs; trainer CPU microseconds per env step (all its threads, Ray's
    included) and env steps/s, median of ``rounds`` interleaved bursts."""
    envs = {e: sray.make("null", e, num_nodes=1, seed=0) for e in sizes}
    try:
        runners = {e: Runner(f"ingest {e}", env, True) for e, env in envs.items()}
        for _ in range(rounds):
            for r in runners.values():
                r.burst(0.3, record=False)
                r.burst(seconds)
        return [{"envs_per_reply": e, "trainer_cpu_us_per_env_step":
                 statistics.median(r.cpu_us_per_step),
                 "env_steps_per_s": statistics.median(r.rates),
                 "us_per_batch": statistics.median(r.us_per_batch)}
                for e, r in runners.items()]
    finally:
        for env in envs.values():
            env.close()


def main(argv=None) -> None:
    args = parse_args(argv)
    import ray
    from ray.cluster_utils import Cluster

    import shmatari
    import shmatari.ray as sray
    from shmatari.bench import machine_info

    n = args.num_envs
    # Ray starts its workers (our actors, hence their pools' workers) at
    # niceness 15 (RayConfig worker_niceness); on a shared machine that
    # starves them next to a local pool at niceness 0. Every backend runs at
    # the same priority here. The variable is read when the raylets start.
    os.environ.setdefault("RAY_worker_niceness", "0")
    # 4 logical CPUs per node: the backends' placement groups take 10
    # one-CPU bundles in all, at most one per node each.
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 4, "object_store_memory": 100 * 2**20, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=4, object_store_memory=100 * 2**20)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    games = [args.game] + ([] if args.no_null else ["null"])
    runners = []
    try:
        for game in games:
            tag = "" if game == args.game else " null"
            runners.append(Runner("local" + tag, shmatari.make(game, n, seed=0), True))
            runners.append(Runner("ray-1" + tag, sray.make(game, n, num_nodes=1, seed=0), True))
            runners.append(Runner("ray-2" + tag, sray.make(game, n, num_nodes=2, seed=0), True))
            runners.append(Runner("ray-2-async" + tag, sray.make(
                game, n, num_nodes=2, batch_size=n // 2, seed=0), False))
        for r in runners:
            r.burst(args.warmup, record=False)
        for k in range(args.rounds):
            order = runners[k % len(runners):] + runners[:k % len(runners)]
            for r in order:
                r.burst(args.warmup, record=False)
                r.burst(args.seconds)
            print(f"round {k + 1}/{args.rounds}: " + ", ".join(
                f"{r.name} {r.rates[-1]:,.0f}" for r in runners), flush=True)
        results = {}
        for r in runners:
            entry = {"env_steps_per_s": summary(r.rates),
                     "us_per_batch": summary(r.us_per_batch),
                     "trainer_cpu_us_per_env_step": summary(r.cpu_us_per_step),
                     "batch_size": r.env.batch_size, "num_envs": r.env.num_envs}
            if hasattr(r.env, "wire_rows") and r.env.wire_rows:
                entry["wire_bytes_per_env_step"] = r.env.wire_bytes / r.env.wire_rows
                entry["nodes"] = [{"node_id": nd["node_id"], "env_ids": [nd["env_ids"].start,
                                   nd["env_ids"].stop]} for nd in r.env.nodes]
            results[r.name] = entry
        reply = serialized_reply(args.game, n // 2)
        for r in runners:
            r.env.close()
        ingest = ingest_cost(sray)
    finally:
        for r in runners:
            r.env.close()
        ray.shutdown()
        cluster.shutdown()
    codec = codec_cost()

    local = results["local"]["env_steps_per_s"]["median"]
    print(f"\n{args.game}, {n} envs, {args.rounds} rounds x {args.seconds:g} s, interleaved "
          f"(median [min, max]):")
    print("| backend | env steps/s | vs local | us per batch | trainer CPU us / env step "
          "| bytes / env step on the wire |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, e in results.items():
        s, u = e["env_steps_per_s"], e["us_per_batch"]
        base = results["local null"] if name.endswith("null") else results["local"]
        ratio = s["median"] / base["env_steps_per_s"]["median"]
        wire = e.get("wire_bytes_per_env_step")
        print(f"| {name} | {s['median']:,.0f} [{s['min']:,.0f}, {s['max']:,.0f}] | {ratio:.2f}x | "
              f"{u['median']:,.0f} [{u['min']:,.0f}, {u['max']:,.0f}] | "
              f"{e['trainer_cpu_us_per_env_step']['median']:,.1f} | "
              f"{'' if wire is None else f'{wire:,.0f}'} |")
    print(f"\none node's step reply for {reply['num_envs']} envs serialized (pickle 5): "
          f"{reply['serialized_bytes']:,} bytes = {reply['serialized_bytes_per_env_step']:,.0f} "
          f"bytes per env step (arrays {reply['arrays_nbytes']:,})")
    print("\nthe learner's ingest (null env, one actor; replies of E envs):")
    for row in ingest:
        print(f"  E={row['envs_per_reply']}: trainer CPU {row['trainer_cpu_us_per_env_step']:.1f} "
              f"us per env step, {row['env_steps_per_s']:,.0f} env steps/s, "
              f"{row['us_per_batch']:,.0f} us per batch")
    print(f"frame-stack codec, {codec['num_envs']} envs: actor encode "
          f"{codec['actor_encode_us_per_env_step']:.1f} us, trainer decode "
          f"{codec['trainer_decode_us_per_env_step']:.1f} us per env step")
    out = {"benchmark": "ray_overhead", "game": args.game, "num_envs": n,
           "seconds": args.seconds, "rounds": args.rounds, "warmup": args.warmup,
           "machine": machine_info() | {"ray": ray.__version__},
           "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "local_env_steps_per_s": local,
           "results": results, "serialized_reply": reply, "codec": codec,
           "ingest": ingest}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
