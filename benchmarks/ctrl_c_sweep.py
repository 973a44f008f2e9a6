"""Ctrl-C at any moment of make(): one KeyboardInterrupt, nothing else.

Each trial starts a trainer in its own session (as a terminal's foreground
job), which prints a line just before ``shmatari.make(...)``; after
``delay`` seconds the sweep sends SIGINT to the trainer's process group,
which is what Ctrl-C does. The trial passes when:

- the trainer ends with exactly one ``KeyboardInterrupt`` traceback on
  stderr and nothing else there: stderr is shared by every process the
  trainer starts (zygote, fork server, resource tracker, workers), so any
  of them printing anything fails the trial;
- within 5 s no process started by the trial is left (every one carries
  a tag in its environment) and no segment of the trainer is in /dev/shm.

    python benchmarks/ctrl_c_sweep.py --step 0.05 --until 2.0 \\
        --json benchmarks/results/ctrl_c_sweep.json

tests/test_zygote.py runs a coarse sweep of the same trial.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid

TRAINER = r'''
import sys, time
import numpy as np
import shmatari
if __name__ == "__main__":
    print("GO", flush=True)
    env = shmatari.make("Pong", num_envs=4, num_workers=2, seed=0, start_method=sys.argv[1])
    end = time.monotonic() + 4.0
    env.reset()
    while time.monotonic() < end:
        env.step(np.zeros(4, np.int64))
    env.close()
    print("DONE", flush=True)
'''

METHODS = ("zygote", "forkserver", "spawn", "fork")


def _tagged(tag: str) -> list[int]:
    """Processes whose environment holds ``tag``."""
    found, needle = [], f"SHMATARI_SWEEP_TAG={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    with open(f"/proc/{entry}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] not in "ZX":
                            found.append(int(entry))
        except OSError:
            pass
    return found


def stderr_problem(stderr: str) -> str | None:
    """None if stderr is exactly one KeyboardInterrupt traceback, else why not."""
    lines = stderr.splitlines()
    if stderr.count("Traceback") != 1 or not lines or lines[-1] != "KeyboardInterrupt":
        return "not exactly one KeyboardInterrupt traceback"
    if not lines[0].startswith("Traceback"):
        return "output before the traceback"
    # frames print indented; a frame without source text leaves an empty line
    extra = [ln for ln in lines[1:-1] if ln and not ln.startswith(" ")]
    return f"other lines: {extra[:3]}" if extra else None


def trial(start_method: str, delay: float, script_path: str) -> dict:
    """One Ctrl-C ``delay`` s after the trainer starts make(); see the module doc."""
    tag = uuid.uuid4().hex
    env = dict(os.environ, SHMATARI_SWEEP_TAG=tag)
    proc = subprocess.Popen([sys.executable, script_path, start_method], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    out: dict = {"start_method": start_method, "delay_s": delay}
    try:
        assert proc.stdout.readline().strip() == "GO"
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        out["hang"] = True
        stdout, stderr = "", ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    end = time.monotonic() + 5
    while time.monotonic() < end and (_tagged(tag) or _segments(proc.pid)):
        time.sleep(0.02)
    left = _tagged(tag)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out.update(returncode=proc.returncode, finished="DONE" in stdout,
               problem=stderr_problem(stderr), stderr=stderr[-2000:], orphans=len(left),
               segments=_segments(proc.pid))
    for name in out["segments"]:
        try:
            os.unlink(os.path.join("/dev/shm", name))
        except FileNotFoundError:
            pass
    out["ok"] = (not out.get("hang") and out["problem"] is None and not left
                 and not out["segments"] and not out["finished"])
    return out


def _segments(pid: int) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"shmatari_{pid}_")]


def write_script(folder: str) -> str:
    path = os.path.join(folder, "ctrl_c_trainer.py")
    with open(path, "w") as f:
        f.write(TRAINER)
    return path


def main(argv=None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=float, default=0.05, help="seconds between delays (0.05)")
    ap.add_argument("--until", type=float, default=2.0, help="last delay, seconds (2.0)")
    ap.add_argument("--methods", default=",".join(METHODS), help="start methods (all)")
    ap.add_argument("--json", help="write the trials here")
    args = ap.parse_args(argv)
    # A shell starts background jobs with SIGINT ignored, and trainers would
    # inherit that: give them the disposition a terminal's job has.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    methods = args.methods.split(",")
    delays = [round(i * args.step, 4) for i in range(int(args.until / args.step) + 1)]
    trials = []
    with tempfile.TemporaryDirectory() as folder:
        script = write_script(folder)
        for delay in delays:
            for method in methods:  # interleaved: every method at each delay
                t = trial(method, delay, script)
                trials.append(t)
                if not t["ok"]:
                    print(f"FAIL {method} at {delay:.2f} s: {t['problem']} finished "
                          f"{t['finished']} hang {t.get('hang', False)} orphans "
                          f"{t['orphans']} segments {t['segments']}\n{t['stderr']}", flush=True)
    summary = {m: {"trials": sum(t["start_method"] == m for t in trials),
                   "failed": sum(t["start_method"] == m and not t["ok"] for t in trials)}
               for m in methods}
    for m, s in summary.items():
        print(f"{m:>10}: {s['trials']} trials, {s['failed']} failed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"step_s": args.step, "until_s": args.until, "summary": summary,
                       "trials": trials}, f, indent=1)
    return 1 if any(s["failed"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
