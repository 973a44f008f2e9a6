"""Step throughput of several builds of shmatari, interleaved (A/B/...).

Each build runs in its own process with its pool open for the whole run;
the processes take turns running short bursts (each round starting one
build further on), and the script reports medians, spread and per-round
ratios of env steps per second against the first build, and each pool's
trainer CPU (its main thread's ``time.thread_time``) per batch in
microseconds: in an async pool on 2 cores that CPU is taken from the
workers (issue 24). With the built-in
``null`` env (the default: no emulation) the figure is the client's and the
workers' protocol cost; with a game (``--game Breakout``) it is the whole
step, emulation included, under uniformly random actions from a fixed table
(the same in every build), or under a Nature-CNN policy (``--policy``: torch,
CPU, one thread). ``--slow-every N --slow-ms MS`` makes the trainer compute
(a busy loop of NumPy products, one thread) for MS milliseconds before
every Nth batch, as a DQN-style trainer's gradient step every N env steps
would. ``--ceiling SRC`` adds the fast-reset ceiling (shmatari's
core in one process per worker, no IPC; ``shmatari-bench``'s
``ceiling-fast`` row) to the rotation.

    python3 benchmarks/step_throughput_ab.py --a /path/to/old/src --b src \\
        --rounds 15 --burst 1.0 [--game Breakout]
    python3 benchmarks/step_throughput_ab.py --build old=/old/src \\
        --build new=src --build new-fixed=src:ORDER=fixed \\
        --game Breakout --batch-size 4 --policy --json out.json
    python3 benchmarks/step_throughput_ab.py --build new=src --game Breakout \\
        --ceiling src
    python3 benchmarks/step_throughput_ab.py --a old/src --b src --game Breakout \\
        --slow-every 8 --slow-ms 5

A build is ``LABEL=SRC[:NAME=VALUE,...]``: ``SRC`` is a directory put first
on ``sys.path`` (a source tree's ``src`` with its extension built in place);
each ``NAME=VALUE`` is set in that build's environment, except ``ORDER``,
the pool's ``batch_order`` (passed to ``make`` only when given, so that
builds from before ``batch_order`` existed run too). Knobs for experiments
on one source tree: ``ZERO_COPY=1`` (``make(zero_copy=True)``),
``PIN_WORKERS=1`` (worker *w* on the *w*-th core this process may use),
``WORKERS_SCHED_BATCH=1`` / ``TRAINER_SCHED_BATCH=1`` (``SCHED_BATCH`` for
the workers / the trainer), ``CLIENT_SPIN_NS=N`` (the trainer polls N ns
before it sleeps on the futex), ``WORKER_SPIN_NS=N`` (the workers poll N ns,
short and long, before they sleep), ``FOLLOW=1`` (workers pinned as
``PIN_WORKERS``, and the trainer moves to the core of the worker whose batch
comes next before it waits for it: the batch's rows are then in that
core's cache, and the other worker keeps its core). The first build named
(``--a``, then ``--b``, then the ``--build`` options in order) is the
reference. Every pool has 2 workers and seed 0. ``--policy`` and
``--ceiling`` need builds that have ``shmatari._bench_backends``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, shmatari
num_envs, batch_size, game, kind = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
use_policy, order, warmup = sys.argv[6] == "1", sys.argv[7], float(sys.argv[8])
slow_every, slow_s = int(sys.argv[9]), float(sys.argv[10]) / 1e3
order_kw = {"batch_order": order} if order else {}


def ceiling():
    from shmatari import _bench_backends as backends, config
    ceil = backends.Ceiling(config.build_config(game, num_envs, num_workers=2), fast_reset=True)
    print("ready", shmatari.__file__, flush=True)
    for line in sys.stdin:
        out = ceil.burst(warmup, float(line), lambda t: None)
        print(out["env_steps"] / out["seconds"], flush=True)
    ceil.close()


def pool():
    import os
    if os.environ.get("ZERO_COPY") == "1":
        order_kw["zero_copy"] = True
    if os.environ.get("WORKER_SPIN_NS"):  # experiment: the workers' poll
        import shmatari.supervisor as sup
        spin = int(os.environ["WORKER_SPIN_NS"])
        base_policy = sup.spin_policy
        sup.spin_policy = lambda *a: dict(base_policy(*a), worker=(spin, shmatari._core.SPIN_YIELD, spin))
    env = shmatari.make(game, num_envs=num_envs, batch_size=batch_size, num_workers=2, seed=0,
                        **order_kw)
    obs, info = env.reset(seed=0)
    # Experiment knobs (a build's NAME=VALUE environment; see the docstring).
    follow = os.environ.get("FOLLOW") == "1"
    cores = sorted(os.sched_getaffinity(0))
    if os.environ.get("PIN_WORKERS") == "1" or follow:
        for w, pid in enumerate(env.worker_pids):
            os.sched_setaffinity(pid, {sorted(os.sched_getaffinity(0))[w % len(os.sched_getaffinity(0))]})
    if os.environ.get("WORKERS_SCHED_BATCH") == "1":
        for pid in env.worker_pids:
            os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
    if os.environ.get("TRAINER_SCHED_BATCH") == "1":
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    if os.environ.get("CLIENT_SPIN_NS"):
        env._client._seg.spin_ns = int(os.environ["CLIENT_SPIN_NS"])
    n_actions = int(env.single_action_space.n)
    table = np.random.default_rng(12345).integers(0, n_actions, (1024, batch_size))
    if use_policy:
        from shmatari import _bench_backends as backends
        policy = backends.nature_cnn_policy(obs.shape[1], n_actions)
    k = 0
    work = np.random.default_rng(0).random((128, 128))

    def act(obs, m):
        return policy(obs) if use_policy else table[k % len(table)][:m]

    if batch_size != num_envs:  # the reset's first batch back to work; the rest still run
        env.send(act(obs, len(info["env_id"])), info["env_id"])
    print("ready", shmatari.__file__, flush=True)
    for line in sys.stdin:
        burst, n = float(line), 0
        t_start = time.perf_counter() + warmup
        t0, cpu0, batches = None, 0, 0
        while True:
            now = time.perf_counter()
            if t0 is None and now >= t_start:
                t0, n, cpu0, batches = now, 0, time.thread_time_ns(), 0
            if t0 is not None and now - t0 >= burst:
                break
            k += 1
            if slow_every and k % slow_every == 0:
                t_slow = time.perf_counter()
                while time.perf_counter() - t_slow < slow_s:
                    work @ work
            if batch_size == num_envs:
                obs = env.step(act(obs, num_envs))[0]
            else:
                obs, rew, term, trunc, info = env.recv()
                env.send(act(obs, len(info["env_id"])), info["env_id"])
                if follow:  # wait for the next batch on its worker's core
                    w = int(info["env_id"][0]) * 2 // num_envs
                    os.sched_setaffinity(0, {cores[(1 - w) % len(cores)]})
            n += batch_size
            batches += 1
        # env steps/s, and the trainer's CPU (this thread's) per batch in us
        print(n / (now - t0), (time.thread_time_ns() - cpu0) / 1e3 / max(batches, 1), flush=True)
    env.close()


if __name__ == "__main__":
    ceiling() if kind == "ceiling" else pool()
"""


def parse_build(text: str) -> tuple[str, str, dict, str]:
    """``LABEL=SRC[:NAME=VALUE,...]`` -> (label, src, environment, batch_order)."""
    label, sep, rest = text.partition("=")
    if not sep or not label or not rest:
        raise argparse.ArgumentTypeError(f"a build is LABEL=SRC[:NAME=VALUE,...], not {text!r}")
    src, _, assignments = rest.partition(":")
    env = {}
    for item in filter(None, assignments.split(",")):
        name, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{item!r} in {text!r} is not NAME=VALUE")
        env[name] = value
    return label, src, env, env.pop("ORDER", "")


# argparse types of our own: this parent process imports no shmatari build (each
# build runs in its own child, from its own sys.path), so not shmatari._cli.
def _at_least(low: float, kind=float):
    def parse(text: str):
        value = kind(text)
        if not value >= low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {text}")
        return value
    return parse


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _read_line(label: str, proc: subprocess.Popen) -> str:
    """The child's next line; a child that ended says so, with its status."""
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"step_throughput_ab: {label} ended (exit status {proc.wait()}); "
                         f"its errors are above")
    return line.strip()


def _stop(procs: dict) -> None:
    """Closes every child's stdin (they then close their pools), then waits
    for each; one that has not ended after 60 s is killed."""
    for proc in procs.values():
        proc.stdin.close()
    for proc in procs.values():
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", help="shorthand for --build a=A")
    p.add_argument("--b", help="shorthand for --build b=B")
    p.add_argument("--build", action="append", default=[], type=parse_build,
                   help="LABEL=SRC[:NAME=VALUE,...] (repeat; the first build named is the "
                        "reference)")
    p.add_argument("--ceiling", default=None, metavar="SRC",
                   help="add the fast-reset ceiling, run from this source tree")
    p.add_argument("--rounds", type=_at_least(2, int), default=15)
    p.add_argument("--burst", type=_positive, default=1.0, help="measured seconds per burst")
    p.add_argument("--warmup", type=_at_least(0.0), default=0.3,
                   help="unmeasured seconds per burst")
    p.add_argument("--num-envs", type=_at_least(1, int), default=8)
    p.add_argument("--batch-size", type=_at_least(1, int), default=None)
    p.add_argument("--game", default="null", help="'null' (the protocol alone) or a game")
    p.add_argument("--policy", action="store_true", help="a Nature-CNN policy picks the actions")
    p.add_argument("--slow-every", type=_at_least(0, int), default=0, metavar="N",
                   help="the trainer computes for --slow-ms before every Nth batch (0: never)")
    p.add_argument("--slow-ms", type=_at_least(0.0), default=5.0, metavar="MS",
                   help="milliseconds of each --slow-every computation (default 5)")
    p.add_argument("--json", default=None, help="also write every burst as JSON")
    args = p.parse_args()
    try:
        builds = ([parse_build(f"a={args.a}")] if args.a is not None else []) + \
                 ([parse_build(f"b={args.b}")] if args.b is not None else []) + args.build
    except argparse.ArgumentTypeError as exc:
        p.error(str(exc))
    if not builds:
        p.error("name at least one build (--a/--b or --build)")
    if args.ceiling and (args.game == "null" or args.policy or args.slow_every):
        p.error("--ceiling needs a game (--game Breakout) and no --policy or --slow-every "
                "(it emulates alone)")
    labels = [b[0] for b in builds]
    if len(set(labels)) != len(labels) or "ceiling-fast" in labels:
        p.error(f"build labels must be distinct and not 'ceiling-fast': {labels}")
    batch = args.batch_size or args.num_envs
    runs = [(label, src, env, order, "pool") for label, src, env, order in builds]
    if args.ceiling:
        runs.append(("ceiling-fast", args.ceiling, {}, "", "ceiling"))
        labels.append("ceiling-fast")

    with tempfile.TemporaryDirectory() as tmp:
        child = os.path.join(tmp, "child.py")  # a file: the ceiling's processes re-import it
        with open(child, "w") as f:
            f.write(CHILD)
        procs = {}
        try:
            for label, src, env, order, kind in runs:
                procs[label] = subprocess.Popen(
                    [sys.executable, child, src, str(args.num_envs), str(batch), args.game, kind,
                     "1" if args.policy else "0", order, str(args.warmup),
                     str(args.slow_every), str(args.slow_ms)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                    env={**os.environ, **env})
                line = _read_line(label, procs[label])
                if not line.startswith("ready"):
                    raise SystemExit(f"step_throughput_ab: {label} said {line!r}, not 'ready'")
                print(label, line, file=sys.stderr)
            rates = {label: [] for label in labels}
            cpus = {label: [] for label in labels}
            for r in range(args.rounds):
                for i in range(len(labels)):
                    label = labels[(r + i) % len(labels)]
                    procs[label].stdin.write(f"{args.burst}\n")
                    procs[label].stdin.flush()
                    values = _read_line(label, procs[label]).split()
                    rates[label].append(float(values[0]))
                    if len(values) > 1:  # a pool: its trainer's CPU per batch
                        cpus[label].append(float(values[1]))
        finally:
            _stop(procs)

    ref = labels[0]
    out = {}
    for label, xs in rates.items():
        q = statistics.quantiles(xs, n=4)
        per_round = statistics.median(x / y for x, y in zip(xs, rates[ref]))
        out[label] = {"median": statistics.median(xs), "q1": q[0], "q3": q[2], "min": min(xs),
                      "max": max(xs), "n": len(xs),
                      "vs_first": statistics.median(xs) / statistics.median(rates[ref]),
                      "vs_first_per_round": per_round, "bursts": xs}
        if cpus[label]:
            out[label]["trainer_cpu_us_per_batch"] = statistics.median(cpus[label])
            out[label]["trainer_cpu_bursts"] = cpus[label]
        line = (f"{label}: median {out[label]['median']:,.0f} steps/s (IQR {q[0]:,.0f}..{q[2]:,.0f},"
                f" {len(xs)} bursts of {args.burst} s); /{ref} "
                f"{out[label]['median'] / out[ref]['median']:.3f} (per round {per_round:.3f})")
        if cpus[label]:
            line += f"; trainer CPU {out[label]['trainer_cpu_us_per_batch']:.1f} us/batch"
        if args.ceiling:
            ceil = rates["ceiling-fast"]
            line += (f"; /ceiling-fast {out[label]['median'] / statistics.median(ceil):.3f} "
                     f"(per round {statistics.median(x / y for x, y in zip(xs, ceil)):.3f})")
        print(line)
    setting = (f"{args.game}, num_envs {args.num_envs}, batch_size {batch}"
               f"{', Nature-CNN policy' if args.policy else ''}"
               f"{f', {args.slow_ms:g} ms of trainer work every {args.slow_every} batches' if args.slow_every else ''}")
    print(f"({setting})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setting": setting, "args": vars(args),
                       "builds": {b[0]: {"src": b[1], "env": b[2], "batch_order": b[3] or None}
                                  for b in builds},
                       "results": out}, f, indent=1)
    else:
        print(json.dumps({k: {m: v for m, v in d.items() if not m.endswith("bursts")}
                          for k, d in out.items()}))


if __name__ == "__main__":
    main()
