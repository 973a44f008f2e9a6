"""Chaos benchmark: kill a random process of a running pool at a random moment.

Each trial starts a fresh trainer process (``TRAINER`` below) that makes a
pool, reports its worker pids and segment name, and steps it with random
actions. After a random delay (uniform in ``[0, --max-delay)`` seconds from
the moment ``make()`` returned, so the kill may land during the first reset
or anywhere in stepping) the benchmark SIGKILLs either the trainer or one of
its workers, each with probability 1/2 (``--parent-share``), and then checks:

- **a worker killed**: the trainer must catch ``shmatari.WorkerError``; the
  time to error runs from the kill to the moment the trainer caught it (both
  read ``CLOCK_MONOTONIC``, which every process on the machine shares). The
  trainer then closes the pool and exits.
- **the trainer killed**: every worker must exit and the segment must leave
  ``/dev/shm``; the time to error runs from the kill until both are true.

A trial that does not reach its outcome within ``--timeout`` seconds is a
**hang** (its processes are then killed); one whose trainer ends any other
way (another exception) is a **wrong outcome**. After every trial, a segment still
in ``/dev/shm`` is a **leaked segment**, and any process of the trial still
alive (workers, and on Linux the zygote, the fork server and the resource
tracker: every process below the trainer) is an **orphan**. The report gives trials,
hangs, leaks, orphans and the time to error (p50, p99, max) per kind, and the
machine (cores, CPU model, versions), as JSON with ``--json``.

    python benchmarks/chaos.py --trials 200 --json benchmarks/results/chaos.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from shmatari.bench import machine_info

SHM_DIR = "/dev/shm"

TRAINER = r'''
import json, sys, time
import numpy as np
import shmatari

if __name__ == "__main__":
    game, num_envs, num_workers, start_method = sys.argv[1:5]
    env = shmatari.make(game, num_envs=int(num_envs), num_workers=int(num_workers), seed=0,
                        start_method=start_method)
    print(json.dumps({"pids": env.worker_pids, "segment": env.segment_name,
                      "t": time.monotonic()}), flush=True)
    rng = np.random.default_rng(0)
    try:
        env.reset()
        while True:
            env.step(rng.integers(0, env.single_action_space.n, env.num_envs))
    except shmatari.WorkerError as err:
        print(json.dumps({"error": type(err).__name__, "t": time.monotonic(),
                          "message": str(err).splitlines()[0]}), flush=True)
    finally:
        env.close()
'''


def pid_alive(pid: int) -> bool:
    """True for a live process; a zombie counts as dead (its parent died)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def descendants(root: int) -> set[int]:
    """Live processes below ``root`` (Linux /proc; elsewhere an empty set)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return {p for p in out if pid_alive(p)}


class _Lines:
    """JSON lines from a child's stdout, read with a deadline (no buffering
    that a select() could not see)."""

    def __init__(self, stream):
        self.fd, self.buf = stream.fileno(), b""

    def next(self, deadline: float):
        """The next JSON line as a dict; "eof" if the child closed its
        stdout (it exited); "timeout" past the deadline."""
        import select

        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                if line.startswith(b"{"):
                    return json.loads(line)
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            if select.select([self.fd], [], [], min(left, 0.05))[0]:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return "eof"
                self.buf += chunk


def run_trial(args, script: str, rng: random.Random) -> dict:
    proc = subprocess.Popen(
        [sys.executable, script, args.game, str(args.num_envs), str(args.num_workers),
         args.start_method],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    lines = _Lines(proc.stdout)
    trial: dict = {"killed": None, "hang": False, "wrong_outcome": False, "leaked": False,
                   "orphans": 0}
    try:
        ready = lines.next(time.monotonic() + args.timeout)
        if not isinstance(ready, dict):
            trial.update(wrong_outcome=True, note=f"the pool did not start ({ready})")
            return trial
        pids, segment = ready["pids"], ready["segment"]
        delay = rng.uniform(0.0, args.max_delay)
        time.sleep(max(0.0, ready["t"] + delay - time.monotonic()))
        family = descendants(proc.pid) | set(pids)
        parent = rng.random() < args.parent_share
        target = proc.pid if parent else rng.choice(pids)
        trial.update(killed="parent" if parent else "worker", delay_s=round(delay, 4))
        t_kill = time.monotonic()
        os.kill(target, signal.SIGKILL)
        deadline = t_kill + args.timeout
        if parent:
            proc.wait()
            while time.monotonic() < deadline:
                if not any(pid_alive(p) for p in pids) and not os.path.exists(
                        os.path.join(SHM_DIR, segment)):
                    trial["time_to_error_s"] = time.monotonic() - t_kill
                    break
                time.sleep(0.002)
            else:
                trial["hang"] = True
        else:
            out = lines.next(deadline)
            if out == "timeout":
                trial.update(hang=True, note="no error within the timeout")
            elif out == "eof" or out.get("error") != "WorkerError":
                trial.update(wrong_outcome=True, note=f"no WorkerError: {out}")
            else:
                trial["time_to_error_s"] = out["t"] - t_kill
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    trial.update(hang=True, note="close() did not return")
        # Let exiting processes finish (a worker's own cleanup), then count.
        settle = time.monotonic() + 1.0
        while time.monotonic() < settle and any(pid_alive(p) for p in family):
            time.sleep(0.005)
        orphans = [p for p in family if p != proc.pid and pid_alive(p)]
        trial["orphans"] = len(orphans)
        trial["leaked"] = os.path.exists(os.path.join(SHM_DIR, segment))
        for p in orphans:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if trial["leaked"]:
            try:
                os.unlink(os.path.join(SHM_DIR, segment))
            except FileNotFoundError:
                pass
        return trial
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        err = proc.stderr.read().decode("utf-8", "replace")
        if trial["hang"] or trial["wrong_outcome"]:
            trial["stderr"] = err[-2000:]
        proc.stdout.close()
        proc.stderr.close()


def summarize(times: list[float]) -> dict:
    if not times:
        return {"n": 0}
    a = np.asarray(times)
    return {"n": len(times), "p50_s": round(float(np.percentile(a, 50)), 4),
            "p99_s": round(float(np.percentile(a, 99)), 4), "max_s": round(float(a.max()), 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--game", default="Breakout")
    ap.add_argument("--num-envs", type=int, default=4)
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--start-method", default="zygote",
                    choices=["zygote", "forkserver", "spawn", "fork"])
    ap.add_argument("--max-delay", type=float, default=1.0,
                    help="seconds: the kill lands uniformly in [0, max-delay) after make()")
    ap.add_argument("--parent-share", type=float, default=0.5,
                    help="probability that a trial kills the trainer rather than a worker")
    ap.add_argument("--timeout", type=float, default=15.0,
                    help="seconds after the kill before a trial counts as a hang")
    ap.add_argument("--seed", type=int, default=0, help="seeds the choice of victims and delays")
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    trials = []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "trainer.py")
        with open(script, "w") as f:
            f.write(TRAINER)
        t0 = time.monotonic()
        for i in range(args.trials):
            trials.append(run_trial(args, script, rng))
            t = trials[-1]
            if t["hang"] or t["wrong_outcome"] or t["leaked"] or t["orphans"] or (
                    (i + 1) % 10 == 0):
                print(f"[{i + 1}/{args.trials}] {time.monotonic() - t0:.0f} s: last killed "
                      f"{t['killed']}, hang {t['hang']}, wrong outcome {t['wrong_outcome']}, "
                      f"leaked {t['leaked']}, orphans {t['orphans']}", flush=True)
    by_kind = {k: [t["time_to_error_s"] for t in trials if t["killed"] == k and
                   "time_to_error_s" in t] for k in ("worker", "parent")}
    report = {
        "benchmark": "chaos",
        "machine": machine_info(),
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "trials": len(trials),
        "hangs": sum(t["hang"] for t in trials),
        "wrong_outcomes": sum(t["wrong_outcome"] for t in trials),
        "leaked_segments": sum(t["leaked"] for t in trials),
        "orphaned_processes": sum(t["orphans"] for t in trials),
        "time_to_error": {
            "all": summarize(by_kind["worker"] + by_kind["parent"]),
            "worker_killed": summarize(by_kind["worker"]),
            "parent_killed": summarize(by_kind["parent"]),
        },
        "per_trial": trials,
    }
    summary = {k: report[k] for k in ("trials", "hangs", "wrong_outcomes", "leaked_segments",
                                      "orphaned_processes", "time_to_error")}
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0 if not (report["hangs"] or report["wrong_outcomes"] or report["leaked_segments"]
                     or report["orphaned_processes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
