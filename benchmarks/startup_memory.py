"""What a pool costs a trainer: memory (USS of the whole process tree) and start-up time.

Every measurement runs in a fresh trainer process (a script written here),
so that each starts cold, as a training run does:

- **memory**: the script imports torch at module top (``--torch``) or not,
  measures the USS (unique set size: private pages, what the process tree
  would give back on exit) of itself and every process below it, makes the
  pool, resets it and runs 200 steps of random actions, and measures again.
  The growth is what the pool costs. For shmatari the tree holds the zygote
  and the workers; EnvPool and ale-py's ``AtariVectorEnv`` run threads in the
  trainer itself.
- **start-up**: seconds from just before the pool is made (torch not
  imported) to the end of its first ``reset()``; for shmatari this includes
  starting the zygote, as the first ``make()`` of a trainer does.

Backends and sizes are interleaved (every backend at one setting, in a
shuffled order, then the next; ``--rounds`` passes), and the medians are
reported with their range. Options match across backends (Breakout,
frame_skip 4, sticky actions 0.25, no-ops 30, stack 4, 84x84 gray; threads or
workers = cores).

    python benchmarks/startup_memory.py --json benchmarks/results/startup_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

SCRIPT = r'''
import sys, time, json
if sys.argv[3] == "torch":
    import torch  # noqa: F401  (a training script's first lines)
import numpy as np
import psutil

def main():
    backend, n = sys.argv[1], int(sys.argv[2])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    def tree_uss():
        me = psutil.Process()
        total = 0
        for p in [me] + me.children(recursive=True):
            try:
                total += p.memory_full_info().uss
            except psutil.Error:
                pass
        return total

    before = tree_uss()
    t0 = time.perf_counter()
    if backend.startswith("shmatari"):
        import shmatari
        method = backend.partition(":")[2] or None
        env = shmatari.make("Breakout", n, seed=0, start_method=method)
        env.reset()
        step = env.step
    elif backend == "envpool":
        import envpool
        env = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=n, num_threads=cores,
                           seed=0, frame_skip=4, repeat_action_probability=0.25, noop_max=30,
                           stack_num=4, img_height=84, img_width=84, gray_scale=True,
                           use_inter_area_resize=True, episodic_life=False, reward_clip=False,
                           use_fire_reset=False)
        env.reset()
        step = env.step
    else:
        from ale_py import ALEInterface, LoggerMode
        from ale_py.vector_env import AtariVectorEnv
        ALEInterface.setLoggerMode(LoggerMode.Error)
        env = AtariVectorEnv("breakout", n, num_threads=cores, frameskip=4,
                             repeat_action_probability=0.25, noop_max=30, stack_num=4,
                             img_height=84, img_width=84, grayscale=True, maxpool=True,
                             episodic_life=False, reward_clipping=False, use_fire_reset=False)
        env.reset(seed=0)
        step = env.step
    startup = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    for _ in range(200):
        step(rng.integers(0, 4, n))
    after = tree_uss()
    print("RESULT " + json.dumps(dict(startup_s=startup, growth_mib=(after - before) / 2**20)),
          flush=True)
    env.close()


if __name__ == "__main__":  # spawn and forkserver need it
    main()
'''

BACKENDS = ("shmatari", "envpool", "ale_vector")


def run(path: str, backend: str, n: int, torch: bool) -> dict:
    proc = subprocess.run([sys.executable, path, backend, str(n), "torch" if torch else "-"],
                          capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{backend} {n} torch={torch} failed:\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _row(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    return f"{med:{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def main(argv=None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--memory-sizes", default="8,64")
    ap.add_argument("--startup-sizes", default="8,64,256")
    ap.add_argument("--backends", default=",".join(BACKENDS) + ",shmatari:forkserver",
                    help="shmatari, shmatari:<start_method>, envpool, ale_vector")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    backends = args.backends.split(",")
    mem_sizes = [int(x) for x in args.memory_sizes.split(",") if x]
    start_sizes = [int(x) for x in args.startup_sizes.split(",") if x]
    memory: dict = {}
    startup: dict = {}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trainer.py")
        with open(path, "w") as f:
            f.write("import os\n" + SCRIPT)
        for r in range(args.rounds):
            for n in mem_sizes:
                for torch in (False, True):
                    order = backends[:]
                    rng.shuffle(order)
                    for b in order:
                        res = run(path, b, n, torch)
                        memory.setdefault(f"{b}|{n}|{int(torch)}", []).append(res["growth_mib"])
                        print(f"round {r} memory {b:>20} n={n:<3} torch={int(torch)}: "
                              f"+{res['growth_mib']:.0f} MiB", flush=True)
            for n in start_sizes:
                order = [b for b in backends if b != "shmatari:forkserver"]
                rng.shuffle(order)
                for b in order:
                    res = run(path, b, n, False)
                    startup.setdefault(f"{b}|{n}", []).append(res["startup_s"])
                    print(f"round {r} start-up {b:>20} n={n:<3}: {res['startup_s']:.2f} s",
                          flush=True)
    lines = ["", "Memory: USS growth of the process tree, MiB, median (range) over rounds",
             f"| backend | " + " | ".join(f"{n} envs, plain | {n} envs, torch at top"
                                           for n in mem_sizes) + " |",
             "|---|" + "---:|" * (2 * len(mem_sizes))]
    for b in backends:
        cells = [_row(memory[f"{b}|{n}|{t}"], ".0f") for n in mem_sizes for t in (0, 1)]
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    lines += ["", "Start-up: make() + first reset(), s, median (range) over rounds",
              "| backend | " + " | ".join(f"{n} envs" for n in start_sizes) + " |",
              "|---|" + "---:|" * len(start_sizes)]
    for b in [b for b in backends if b != "shmatari:forkserver"]:
        lines.append(f"| {b} | " + " | ".join(_row(startup[f"{b}|{n}"], ".2f")
                                               for n in start_sizes) + " |")
    print("\n".join(lines))
    if args.json:
        from shmatari.bench import machine_info

        with open(args.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "machine": machine_info(),
                       "memory_mib": memory, "startup_s": startup, "rounds": args.rounds},
                      f, indent=1)
        with open(os.path.splitext(args.json)[0] + ".txt", "w") as f:
            f.write(" ".join(["python"] + sys.argv) + "\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
