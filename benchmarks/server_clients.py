"""Env steps per second of a C++ client and a Python client on the same server.

Starts one ``shmatari serve`` pool, then, in alternating rounds, steps it with
random actions for ``--seconds`` from the C++ example
(``examples/cpp_trainer/trainer.cpp``, built here with ``g++ -O2`` unless
``--trainer`` names a binary) and from Python (``shmatari.attach`` with
``send`` / ``recv``, which copies every batch out, as the Gymnasium API
does). Both do the same work per batch: draw ``batch_size`` random actions,
post them, wait for the next batch. Each round is preceded by ``--warmup``
unmeasured seconds. Reports the median of the rounds, prints a Markdown table
for the README, and writes JSON with the machine described (``--json``).

    python benchmarks/server_clients.py --num-envs 16 --seconds 5 \\
        --json benchmarks/results/server_clients.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import shmatari
from shmatari import config as _config
from shmatari.bench import machine_info

ROOT = pathlib.Path(__file__).resolve().parents[1]
TRAINER = ROOT / "examples" / "cpp_trainer" / "trainer.cpp"


def build_trainer(out_dir: pathlib.Path) -> tuple[pathlib.Path, str]:
    """Builds the C++ example as its README says; returns (binary, compiler version)."""
    cxx = next((c for c in map(shutil.which, ("g++", "c++", "clang++")) if c), None)
    if cxx is None:
        raise SystemExit("server_clients: no C++ compiler (g++, c++ or clang++); "
                         "install one or pass --trainer")
    exe = out_dir / "trainer"
    subprocess.run([cxx, "-std=c++17", "-O2", f"-I{ROOT / 'csrc' / 'include'}", str(TRAINER),
                    "-o", str(exe)], check=True)
    return exe, compiler_version(cxx)


def compiler_version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0].strip() if out else cxx


def start_server(args, name: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "shmatari.cli", "serve", args.game, "--name", name,
           "--num-envs", str(args.num_envs), "--seed", "0"]
    if args.num_workers:
        cmd += ["--num-workers", str(args.num_workers)]
    if args.batch_size:
        cmd += ["--batch-size", str(args.batch_size)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("ready "):
        proc.kill()
        raise SystemExit(f"server_clients: the server did not start (said {line!r})")
    return proc


def run_cpp(exe: pathlib.Path, name: str, seconds: float) -> dict:
    r = subprocess.run([str(exe), name, "--seconds", str(seconds)], capture_output=True,
                       text=True, timeout=seconds + 120)
    if r.returncode != 0:
        raise SystemExit(f"server_clients: the C++ trainer failed ({r.returncode}): {r.stderr}")
    out = dict(re.findall(r"(\w+)=(\S+)", r.stdout))
    return {"env_steps": int(out["env_steps"]), "seconds": float(out["seconds"])}


def run_python(name: str, seconds: float) -> dict:
    with shmatari.attach(name) as env:
        rng = np.random.default_rng(0)
        actions = rng.integers(0, env.single_action_space.n, (4096, env.batch_size))
        _, info = env.reset()
        steps, k = 0, 0
        t0 = time.perf_counter()
        end = t0 + seconds
        now = t0
        while now < end:
            env.send(actions[k % 4096], env_id=info["env_id"])
            _, _, _, _, info = env.recv()
            steps += env.batch_size
            k += 1
            now = time.perf_counter()
        return {"env_steps": steps, "seconds": now - t0}


def main(argv=None) -> int:
    cores = _config.available_cores()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Breakout")
    p.add_argument("--num-envs", type=int, default=4 * cores,
                   help=f"envs in the pool (default 4 x cores = {4 * cores})")
    p.add_argument("--num-workers", type=int, default=None, help="default: cores")
    p.add_argument("--batch-size", type=int, default=None,
                   help="default num_envs (synchronous)")
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds per run")
    p.add_argument("--rounds", type=int, default=3, help="C++ then Python, this many times")
    p.add_argument("--trainer", default=None, help="a built trainer binary (default: build)")
    p.add_argument("--json", metavar="FILE", default=None)
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        if args.trainer:
            exe, cxx = pathlib.Path(args.trainer), "prebuilt: " + args.trainer
            found = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
            if found:
                cxx = compiler_version(found)
        else:
            exe, cxx = build_trainer(pathlib.Path(tmp))
        name = f"bench{os.getpid()}"
        server = start_server(args, name)
        try:
            with shmatari.attach(name) as env:
                setting = (f"{env.num_envs} envs, batch_size {env.batch_size}, "
                           f"{env.num_workers} workers")
            runs = {"cpp": [], "python": []}
            for _ in range(args.rounds):
                run_cpp(exe, name, args.warmup)
                runs["cpp"].append(run_cpp(exe, name, args.seconds))
                run_python(name, args.warmup)
                runs["python"].append(run_python(name, args.seconds))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)

    results = []
    for client, rows in runs.items():
        rates = [r["env_steps"] / r["seconds"] for r in rows]
        results.append({"client": client, "setting": setting,
                        "env_steps_per_s": round(statistics.median(rates), 1),
                        "rounds": [dict(r, env_steps_per_s=round(x, 1))
                                   for r, x in zip(rows, rates)]})
    machine = machine_info()
    machine["versions"]["c++"] = cxx
    py = results[1]["env_steps_per_s"]
    report = {
        "benchmark": "server_clients",
        "game": shmatari.resolve_game(args.game),
        "config": {"num_envs": args.num_envs, "num_workers": args.num_workers,
                   "batch_size": args.batch_size, "seconds": args.seconds,
                   "warmup": args.warmup, "rounds": args.rounds,
                   "options": dict(_config.OPTION_DEFAULTS)},
        "machine": machine,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": results,
        "cpp_over_python": round(results[0]["env_steps_per_s"] / py, 3) if py else None,
    }
    labels = {"cpp": "C++ (`examples/cpp_trainer`)", "python": "Python (`shmatari.attach`)"}
    print(f"{report['game']}, {setting}; {machine['cores']} cores ({machine['cpu_model']}); "
          f"median of {args.rounds} x {args.seconds:g} s\n")
    print("| client | env steps/s | vs Python |\n|---|---:|---:|")
    for row in results:
        rel = row["env_steps_per_s"] / py if py else 0.0
        print(f"| {labels[row['client']]} | {row['env_steps_per_s']:,.0f} | {rel:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
