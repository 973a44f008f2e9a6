"""Where a vector env's time goes, per env step: CPU accounting of every
process and thread, interleaved like ``shmatari-bench``.

``perf`` has no hardware counters on the shared machines this project runs
on, so this reads the kernel's own accounting instead: for each burst, the
CPU time (user + system) of the trainer's main thread, of every worker
(shmatari: the worker processes; EnvPool / ale-py: the pool's threads) and
their voluntary context switches (sleeps on a futex or a semaphore). Per env
step that gives:

- ``worker_us``: CPU the workers spent per env step (emulation, frame
  kernel, signalling); compare with the ceiling's (shmatari's core in one
  process per core, no IPC at all);
- ``main_us``: CPU the trainer's thread spent per env step (posting actions,
  waiting, copying observations);
- ``worker_busy``: the workers' CPU over (wall time x workers): below 1, the
  workers waited (for actions, or, in sync mode, for the slowest of them);
- ``machine_busy``: all of it over (wall time x cores): below 1, a core sat
  idle (the straggler loss of synchronous stepping, on an idle machine);
- ``main_sleeps_per_step``: the trainer thread's voluntary context switches
  per env step (an async pool's trainer sleeps once a batch while the next
  one fills: 1 / batch_size).

With no idle core (``machine_busy`` near 1) and workers that do as much per
step as the ceiling's processes (``worker_us`` alike), a pool's rate against
ceiling-fast's is its workers' share of the cores against the ceiling's,
and the difference is the trainer's own CPU (``main_us``) and the waits.

    python3 benchmarks/where_time_goes.py --num-envs 8 --rounds 7 --json out.json
    python3 benchmarks/where_time_goes.py --backends shmatari-async,ceiling-fast,ceiling \
        --repeat-action-probability 0
"""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

from shmatari import _bench_backends as backends, _cli, bench, config as _config

TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: str) -> tuple[float, int]:
    """(CPU seconds, voluntary context switches) of a process or thread."""
    with open(f"{path}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    vcs = 0
    with open(f"{path}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches"):
                vcs = int(line.split()[1])
    return cpu, vcs


def _busy_descendants(pid: int) -> list[int]:
    """Descendant processes that have no children of their own (workers; not
    a fork server), except multiprocessing's resource tracker."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            todo.append(c)
            if c in children:
                continue
            try:
                with open(f"/proc/{c}/cmdline", "rb") as f:
                    if b"resource_tracker" in f.read():
                        continue
            except OSError:
                continue
            out.append(c)
    return out


class Accounts:
    """CPU and context switches of the main thread and of the workers: the
    child processes (shmatari, pipe, Gymnasium) or this process's other
    threads (EnvPool, ale-py)."""

    def __init__(self, backend: str):
        self.backend = backend
        self.main_tid = threading.get_native_id()

    def _workers(self) -> list[str]:
        if self.backend.startswith(("shmatari", "pipe", "gymnasium", "ceiling")):
            return [f"/proc/{pid}" for pid in _busy_descendants(os.getpid())]
        return [f"/proc/self/task/{t}" for t in os.listdir("/proc/self/task")
                if int(t) != self.main_tid]

    def read(self) -> dict:
        main = _stat(f"/proc/self/task/{self.main_tid}")
        workers = []
        for path in self._workers():
            try:
                workers.append(_stat(path))
            except OSError:
                pass
        return {"main_cpu": main[0], "main_vcs": main[1],
                "worker_cpu": sum(w[0] for w in workers),
                "worker_vcs": sum(w[1] for w in workers), "workers": len(workers)}


def measure(runner, backend: str, warmup: float, seconds: float) -> dict:
    acc = Accounts(backend)
    if backend in backends.CEILINGS:
        runner.burst(0.0, warmup, lambda t: None)
        a, t0 = acc.read(), time.perf_counter()
        steps = runner.burst(0.0, seconds, lambda t: None)["env_steps"]
    else:
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            runner.loop()
        a, t0, steps = acc.read(), time.perf_counter(), 0
        end = t0 + seconds
        while time.perf_counter() < end:
            steps += runner.loop()
    wall = time.perf_counter() - t0
    b = acc.read()
    return {"env_steps": steps, "seconds": wall, "main_cpu": b["main_cpu"] - a["main_cpu"],
            "main_sleeps": b["main_vcs"] - a["main_vcs"],
            "worker_cpu": b["worker_cpu"] - a["worker_cpu"],
            "worker_sleeps": b["worker_vcs"] - a["worker_vcs"], "workers": b["workers"]}


def summarize(bursts: list[dict], cores: int, num_workers: int) -> dict:
    def med(f):
        return round(float(np.median([f(b) for b in bursts])), 3)

    return {
        "env_steps_per_s": med(lambda b: b["env_steps"] / b["seconds"]),
        "worker_us": med(lambda b: 1e6 * b["worker_cpu"] / b["env_steps"]),
        "main_us": med(lambda b: 1e6 * b["main_cpu"] / b["env_steps"]),
        "worker_busy": med(lambda b: b["worker_cpu"] / (b["seconds"] * num_workers)),
        "machine_busy": med(lambda b: (b["worker_cpu"] + b["main_cpu"]) / (b["seconds"] * cores)),
        "worker_sleeps_per_step": med(lambda b: b["worker_sleeps"] / b["env_steps"]),
        "main_sleeps_per_step": med(lambda b: b["main_sleeps"] / b["env_steps"]),
    }


def main(argv=None) -> int:
    p = _cli.ArgumentParser(prog="where_time_goes.py", description=__doc__.split("\n\n")[0],
                            formatter_class=_cli.HelpFormatter)
    p.add_argument("--game", default="Breakout")
    p.add_argument("--num-envs", type=_cli.positive_int, default=8)
    p.add_argument("--batch-size", type=_cli.positive_int, default=None,
                   help="async batch (default num_envs / 2)")
    p.add_argument("--seconds", type=_cli.positive_float, default=2.0)
    p.add_argument("--warmup", type=_cli.nonnegative_float, default=0.5)
    p.add_argument("--rounds", type=_cli.positive_int, default=5)
    p.add_argument("--backends",
                   default="shmatari,shmatari-async,shmatari-ale-reset,shmatari-async-ale-reset,"
                           "envpool,envpool-async,ceiling,ceiling-fast")
    p.add_argument("--repeat-action-probability", type=_cli.probability, default=None,
                   metavar="P", help="sticky actions on every backend (default: 0.25, as "
                                     "shmatari-bench)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    _cli.check_output_path(p, "--json", args.json)
    cores = _config.available_cores()
    workers = min(args.num_envs, cores)
    cfg = _config.build_config(args.game, args.num_envs, num_workers=workers, seed=0,
                               **backends.options(args.repeat_action_probability))
    batch = args.batch_size or args.num_envs // 2
    names = [b for b in args.backends.split(",") if b]
    runners = {}
    bursts = {n: [] for n in names}
    try:
        for n in names:
            runners[n] = backends.Ceiling(cfg, fast_reset=n != "ceiling",
                                          barrier=n == "ceiling-sync") \
                if n in backends.CEILINGS else backends.open_backend(n, cfg, batch)
        for r in range(args.rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                bursts[n].append(measure(runners[n], n, args.warmup, args.seconds))
                print(f"round {r + 1}/{args.rounds} {n}: "
                      f"{bursts[n][-1]['env_steps'] / bursts[n][-1]['seconds']:.0f} steps/s",
                      file=sys.stderr, flush=True)
    finally:
        if backends.close_all(list(runners.values())):
            raise KeyboardInterrupt  # held back while they closed
    rows = {n: summarize(b, cores, workers) for n, b in bursts.items()}
    print(f"{'backend':<26}{'steps/s':>9}{'worker us/step':>16}{'main us/step':>14}"
          f"{'worker busy':>13}{'machine busy':>14}{'worker sleeps/step':>20}"
          f"{'main sleeps/step':>18}")
    for n, r in rows.items():
        print(f"{n:<26}{r['env_steps_per_s']:>9.0f}{r['worker_us']:>16.0f}{r['main_us']:>14.0f}"
              f"{r['worker_busy']:>13.2f}{r['machine_busy']:>14.2f}"
              f"{r['worker_sleeps_per_step']:>20.2f}{r['main_sleeps_per_step']:>18.2f}")
    if args.json:
        _cli.write_json(args.json, {"benchmark": "where_time_goes", "game": args.game,
                                    "num_envs": args.num_envs, "num_workers": workers,
                                    "batch_size": batch, "rounds": args.rounds,
                                    "repeat_action_probability": cfg.repeat_action_probability,
                                    "seconds": args.seconds, "results": rows, "bursts": bursts,
                                    "machine": bench.machine_info(),
                                    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
