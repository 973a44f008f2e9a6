"""Where examples/ppo_atari.py's collection loop spends its time, per batch.

Runs the example's double-buffered collection (its ``Agent``, ``Rollout`` and
``HostToDevice``; ``num_envs // 2`` envs per batch, fixed order) for
``--batches`` batches with a timer around each part, the first 40 batches
unmeasured, in several settings one after another: the pool alone under
random actions, the example as it is, torch's deterministic flags off, one
torch CPU thread, and fewer workers than cores. The parts, in ms per batch:

- ``recv``: waiting for the batch (the workers' emulation not yet overlapped);
- ``book``: the rollout's bookkeeping (NumPy);
- ``h2d+store``: the host-to-device copy and the store into the rollout;
- ``forward``: the policy's forward pass, as launched (on a GPU, kernels are
  queued; their time shows in ``to_host``);
- ``to_host``: the actions, log-probabilities and values back on the host;
- ``send``: the actions posted to the pool.

The settings run one after another, each once: a rough picture of where the
time goes, not an interleaved comparison.

    python3 benchmarks/ppo_collect_phases.py --device cuda --json phases.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

import shmatari
from shmatari.seeding import seed_everything

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ppo_atari.py"
PARTS = ("recv", "book", "h2d+store", "forward", "to_host", "send")
WARMUP_BATCHES = 40


def load_example():
    spec = importlib.util.spec_from_file_location("ppo_atari_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(ppo, label, device, num_envs, num_workers, batches, *, deterministic=True, threads=None,
        policy=True, default_threads=1):
    """One setting; returns its agent steps per second and ms per batch for each part."""
    args = ppo.parse_args(["--num-envs", str(num_envs), "--device", device, "--total-timesteps", "100000"])
    seed_everything(1, deterministic_torch=deterministic)
    torch.set_num_threads(threads or default_threads)
    dev = torch.device(device)
    batch_size = num_envs // 2
    env = shmatari.make("Breakout", num_envs, batch_size=batch_size, num_workers=num_workers, seed=1,
                        zero_copy=True, preset="dqn", autoreset_mode="same_step", max_episode_frames=108_000)
    try:
        shape = env.single_observation_space.shape
        agent = ppo.Agent(shape[0], env.single_action_space.n).to(dev, memory_format=torch.channels_last)
        ro = ppo.Rollout(args, batch_size, shape, dev)
        to_device = ppo.HostToDevice(batch_size, shape, dev)
        rng = np.random.default_rng(0)
        total = dict.fromkeys(PARTS, 0.0)
        steps, start = 0, None
        env.async_reset()
        for b in range(batches + WARMUP_BATCHES):
            if b == WARMUP_BATCHES:
                total, steps, start = dict.fromkeys(PARTS, 0.0), 0, time.perf_counter()
            t0 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.recv()
            t1 = time.perf_counter()
            ids = info["env_id"].astype(np.int64)
            ro.complete(ids, reward, terminated | truncated)
            rows = ro.t[ids]
            t2 = time.perf_counter()
            if policy:
                x = to_device(obs)
                ro.obs[torch.from_numpy(rows).to(dev), torch.from_numpy(ids).to(dev)] = x
                t3 = time.perf_counter()
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(x)
                t4 = time.perf_counter()
                action, logprob, value = action.cpu().numpy(), logprob.cpu().numpy(), value.cpu().numpy()
            else:
                t3 = t4 = t2
                action = rng.integers(0, env.single_action_space.n, ids.size)
                logprob = value = np.zeros(ids.size, np.float32)
            t5 = time.perf_counter()
            ro.act(ids, action, logprob, value)
            env.send(ro.actions[rows, ids], ids)
            t6 = time.perf_counter()
            for part, seconds in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
                total[part] += seconds
            steps += ids.size
            if ro.t.max() >= ro.capacity - 1:
                ro.restart()
        wall = time.perf_counter() - start
    finally:
        env.close()
    out = {"label": label, "device": device, "num_envs": num_envs, "num_workers": num_workers,
           "deterministic": deterministic, "torch_threads": torch.get_num_threads(), "policy": policy,
           "agent_steps_per_s": round(steps / wall), "ms_per_batch": {k: round(1e3 * v / batches, 3)
                                                                       for k, v in total.items()}}
    print(json.dumps(out), flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--num-envs", type=int, default=64, help="envs in the pool (batches of half)")
    p.add_argument("--batches", type=int, default=360, help="measured batches per setting")
    p.add_argument("--json", help="also write the settings' results here")
    a = p.parse_args(argv)
    ppo = load_example()
    cores = len(os.sched_getaffinity(0))
    fewer = max(1, cores - 2)
    common = dict(default_threads=torch.get_num_threads())
    res = [
        run(ppo, "pool alone, random actions", a.device, a.num_envs, cores, a.batches, policy=False, **common),
        run(ppo, "the example's loop, torch's default threads", a.device, a.num_envs, cores, a.batches, **common),
        run(ppo, "deterministic flags off", a.device, a.num_envs, cores, a.batches, deterministic=False, **common),
        run(ppo, "one torch thread", a.device, a.num_envs, cores, a.batches, threads=1, **common),
        run(ppo, "one torch thread, cores - 2 workers", a.device, a.num_envs, fewer, a.batches, threads=1,
            **common),
        run(ppo, "pool alone, cores - 2 workers", a.device, a.num_envs, fewer, a.batches, policy=False, **common),
    ]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
