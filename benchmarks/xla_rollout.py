"""A jitted JAX rollout (``jax.lax.scan`` over ``step``, a small policy, CPU)
through shmatari's ``xla()`` and EnvPool's ``xla()``, interleaved; and the
per-step cost of shmatari's ``xla()`` against its own Python ``step`` on
the built-in ``null`` env (no emulation: the figure is the protocol's).

Part 1 (``rollout``): for 8 and 16 envs, sync (``batch_size=0``) and async
(``batch_size = num_envs // 2``), both backends are made through EnvPool's
``make`` with the same options (EnvPool's defaults, CleanRL's
``episodic_life=True, reward_clip=True``, ``num_threads`` = the core count),
all four pools of a setting open at once. Each burst is one jitted call
running ``--scan`` steps of a linear policy on 4x4-pooled frames; bursts
rotate between the backends (ABBA order per round), and the script reports
medians and quartiles of env steps per second and the ratio of medians.

Part 2 (``overhead``): one ``null`` pool (2 workers), Python ``env.step``
loop vs a jitted scan of ``step`` with fixed actions, bursts alternating on
the same pool; microseconds per step (one batch) and the difference.

    python3 benchmarks/xla_rollout.py --rounds 5 --json benchmarks/results/xla_rollout.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp

import shmatari
import shmatari.envpool as shm_envpool

OPTIONS = dict(episodic_life=True, reward_clip=True, seed=1)


def _quartiles(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "q1": q[0], "q3": q[2], "n": len(xs)}


def _policy(n_actions: int):
    w = jax.random.normal(jax.random.PRNGKey(0), (4 * 21 * 21, n_actions)) * 0.01

    def act(obs, key):
        b = obs.shape[0]
        x = obs.astype(jnp.float32).reshape(b, 4, 21, 4, 21, 4).mean(axis=(3, 5)) / 255.0
        return jax.random.categorical(key, x.reshape(b, -1) @ w)
    return act


def _rollout_runner(envs, num_envs: int, batch_size: int, scan: int):
    """A function running one burst (a jitted scan of `scan` steps); returns
    env steps done. Async pools: send to the last batch's envs, then recv."""
    B = batch_size or num_envs
    act = _policy(envs.single_action_space.n)
    if batch_size:
        envs.async_reset()
    else:
        envs.reset()
    handle, recv, send, step = envs.xla()

    def body(carry, key):
        handle, obs, env_id = carry
        action = act(obs, key)
        if batch_size:
            handle, (obs, _, _, _, info) = step(handle, action, env_id)
        else:
            handle, (obs, _, _, _, info) = step(handle, action)
        return (handle, obs, info["env_id"]), ()

    @jax.jit
    def run(handle, obs, env_id, key):
        keys = jax.random.split(key, scan)
        return jax.lax.scan(body, (handle, obs, env_id), keys)[0]

    @jax.jit
    def first(handle):
        handle, (obs, _, _, _, info) = recv(handle)
        return handle, obs, info["env_id"]

    if batch_size:
        state = first(handle)
    else:
        obs = jnp.zeros((B,) + envs.single_observation_space.shape, jnp.uint8)
        state = run(handle, obs, jnp.arange(B, dtype=jnp.int32), jax.random.PRNGKey(0))
    state = jax.block_until_ready(run(*state, jax.random.PRNGKey(1)))  # compile + warm
    box = {"state": state, "key": jax.random.PRNGKey(2)}

    def burst() -> int:
        box["key"], sub = jax.random.split(box["key"])
        box["state"] = jax.block_until_ready(run(*box["state"], sub))
        return scan * B
    return burst


def rollout(args) -> dict:
    import envpool

    backends = {"shmatari": shm_envpool, "envpool": envpool}
    out = {}
    cores = os.cpu_count() or 1
    for num_envs in args.num_envs:
        for mode in ("sync", "async"):
            batch_size = 0 if mode == "sync" else num_envs // 2
            pools, runners = {}, {}
            try:
                for name, mod in backends.items():
                    pools[name] = mod.make(args.game, env_type="gymnasium", num_envs=num_envs,
                                           batch_size=batch_size, num_threads=cores, **OPTIONS)
                    runners[name] = _rollout_runner(pools[name], num_envs, batch_size, args.scan)
                rates = {name: [] for name in backends}
                for r in range(args.rounds):
                    order = list(backends) if r % 2 == 0 else list(backends)[::-1]
                    for name in order + order[::-1]:
                        t0, n = time.perf_counter(), 0
                        while time.perf_counter() - t0 < args.burst:
                            n += runners[name]()
                        rates[name].append(n / (time.perf_counter() - t0))
            finally:
                for pool in pools.values():
                    pool.close()
            key = f"{num_envs}envs-{mode}"
            out[key] = {name: _quartiles(xs) for name, xs in rates.items()}
            out[key]["ratio_shmatari_over_envpool"] = (out[key]["shmatari"]["median"]
                                                      / out[key]["envpool"]["median"])
            # Per round (two bursts of each backend, ABBA): the ratio of means.
            per_round = [statistics.fmean(rates["shmatari"][2 * r:2 * r + 2])
                         / statistics.fmean(rates["envpool"][2 * r:2 * r + 2])
                         for r in range(args.rounds)]
            out[key]["per_round_ratio"] = {"median": statistics.median(per_round),
                                           "min": min(per_round), "max": max(per_round)}
            out[key]["raw"] = rates
            s, e = out[key]["shmatari"], out[key]["envpool"]
            print(f"{key:>13}: shmatari {s['median']:8,.0f} env steps/s "
                  f"(IQR {s['q1']:,.0f}..{s['q3']:,.0f})  envpool {e['median']:8,.0f} "
                  f"(IQR {e['q1']:,.0f}..{e['q3']:,.0f})  ratio "
                  f"{out[key]['ratio_shmatari_over_envpool']:.2f} (per round "
                  f"{out[key]['per_round_ratio']['median']:.2f}, "
                  f"{min(per_round):.2f}..{max(per_round):.2f})", flush=True)
    return out


def overhead(args) -> dict:
    out = {}
    for mode in ("sync", "async"):
        num_envs = 8
        batch_size = num_envs if mode == "sync" else num_envs // 2
        env = shmatari.make("null", num_envs=num_envs, batch_size=batch_size, num_workers=2,
                            seed=0)
        try:
            acts = np.zeros(batch_size, np.int64)
            obs, info = env.reset(seed=0)
            ids = info["env_id"]
            handle, recv, send, step = env.xla()

            @jax.jit
            def run(handle, ids):
                def body(carry, _):
                    handle, ids = carry
                    if mode == "sync":
                        handle, (_, _, _, _, info) = step(handle, jnp.zeros(batch_size,
                                                                            jnp.int32))
                    else:
                        handle, (_, _, _, _, info) = step(handle, jnp.zeros(batch_size,
                                                                            jnp.int32), ids)
                    return (handle, info["env_id"]), ()
                return jax.lax.scan(body, (handle, ids), None, length=args.null_scan)[0]

            def python_burst():
                nonlocal ids
                for _ in range(args.null_scan):
                    ids = env.step(acts, None if mode == "sync" else ids)[4]["env_id"]
                return args.null_scan

            def xla_burst():
                nonlocal handle, ids
                handle, ids = jax.block_until_ready(run(handle, ids))
                ids = np.asarray(ids)
                return args.null_scan

            xla_burst()  # compile
            times = {"python_step": [], "xla_step": []}
            burst = {"python_step": python_burst, "xla_step": xla_burst}
            for r in range(args.rounds * 2):
                order = list(times) if r % 2 == 0 else list(times)[::-1]
                for name in order:
                    t0, n = time.perf_counter(), 0
                    while time.perf_counter() - t0 < args.burst / 2:
                        n += burst[name]()
                    times[name].append((time.perf_counter() - t0) / n * 1e6)
        finally:
            env.close()
        res = {name: _quartiles(xs) for name, xs in times.items()}
        res["xla_minus_python_us"] = res["xla_step"]["median"] - res["python_step"]["median"]
        res["raw"] = times
        out[f"null-8envs-{mode}"] = res
        print(f"null 8 envs {mode:>5}: Python step {res['python_step']['median']:6.1f} us "
              f"(IQR {res['python_step']['q1']:.1f}..{res['python_step']['q3']:.1f})  "
              f"xla step {res['xla_step']['median']:6.1f} us "
              f"(IQR {res['xla_step']['q1']:.1f}..{res['xla_step']['q3']:.1f})  "
              f"xla - Python {res['xla_minus_python_us']:+.1f} us per step", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Breakout-v5")
    p.add_argument("--num-envs", type=int, nargs="+", default=[8, 16])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--burst", type=float, default=1.0, help="seconds per burst")
    p.add_argument("--scan", type=int, default=32, help="steps per jitted call (rollout)")
    p.add_argument("--null-scan", type=int, default=256, help="steps per burst call (null)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    load_before = os.getloadavg()
    result = {
        "benchmark": "xla_rollout",
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "settings": {"game": args.game, "num_envs": args.num_envs, "rounds": args.rounds,
                     "burst_s": args.burst, "scan": args.scan, "null_scan": args.null_scan,
                     "env_options": "EnvPool defaults + episodic_life=True, reward_clip=True, "
                                    "num_threads=cores; async: batch_size=num_envs//2",
                     "policy": "linear on 4x4-pooled frames, categorical sample, in the scan"},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "jax": jax.__version__,
                    "loadavg_before": [round(x, 2) for x in load_before]},
    }
    result["overhead"] = overhead(args)
    result["rollout"] = rollout(args)
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    try:
        import envpool
        result["machine"]["envpool"] = envpool.__version__
    except (ImportError, AttributeError):
        pass
    print(f"load average before {result['machine']['loadavg_before']}, after "
          f"{result['machine']['loadavg_after']} on {os.cpu_count()} cores")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
