"""``shmatari-bench``: env steps per second, shmatari against its peers, side by side.

Every backend steps the same game with the same work per step (ALE v5 options:
frame_skip 4, sticky actions 0.25, up to 30 no-ops, 84x84 grayscale, max-pool,
a stack of 4; no episodic life, no reward clipping, no fire reset) under
uniformly random actions, for ``--seconds`` after a warm-up. Optional peers
appear when installed: EnvPool, ale-py's ``AtariVectorEnv`` and Gymnasium's
``AsyncVectorEnv(shared_memory=True)`` with ``AtariPreprocessing`` and
``FrameStackObservation``.

The ceiling row runs the same envs with shmatari's own core in ``num_workers``
processes at once, with no IPC at all, and sums their rates: what the
machine can emulate and preprocess, the bound for any vector env.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from . import config as _config

__all__ = ["main", "run"]

#: Backends in the order they run and print.
BACKENDS = ("shmatari", "pipe", "envpool", "ale_vector", "gymnasium")
_OPTIONS = dict(frame_skip=4, repeat_action_probability=0.25, noop_max=30, stack_num=4,
                img_height=84, img_width=84, grayscale=True, maxpool=True,
                episodic_life=False, use_fire_reset=False, reward_clip=False,
                full_action_space=False, max_episode_frames=108_000)
_ACTION_ROWS = 4096


@dataclass
class Result:
    backend: str
    setting: str
    env_steps: int = 0
    seconds: float = 0.0
    skipped: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def env_steps_per_s(self) -> float:
        return self.env_steps / self.seconds if self.seconds else 0.0


# -- backends ---------------------------------------------------------------------

def _peer_available(name: str) -> str | None:
    """None if the peer can run here, else why not."""
    try:
        if name == "envpool":
            import envpool  # noqa: F401
        elif name == "ale_vector":
            from ale_py.vector_env import AtariVectorEnv  # noqa: F401
        elif name == "gymnasium":
            import cv2  # noqa: F401
            import gymnasium  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "not installed"
        return f"not installed ({type(exc).__name__}: {exc})"
    return None


def _game_title(rom: str) -> str:
    """``"ms_pacman"`` -> ``"MsPacman"`` (the Gymnasium / EnvPool spelling)."""
    return "".join(part.capitalize() for part in rom.split("_"))


def _make_backend(name: str, args, cfg: _config.EnvConfig):
    """Returns (env, step) where step(actions) steps every env once."""
    n, seed = cfg.num_envs, 0
    if name == "shmatari":
        from .env import ShmVectorEnv

        env = ShmVectorEnv(cfg)
        env.reset()
        return env, env.step
    if name == "pipe":
        from .baselines import PipeVectorEnv

        env = PipeVectorEnv(_config.build_config(cfg.game, n, num_workers=n, seed=seed,
                                                 start_method=cfg.start_method, **_OPTIONS))
        env.reset()
        return env, env.step
    if name == "envpool":
        import envpool

        env = envpool.make(f"{_game_title(cfg.game)}-v5", env_type="gymnasium", num_envs=n,
                           num_threads=cfg.num_workers, seed=seed, frame_skip=4,
                           repeat_action_probability=0.25, noop_max=30, stack_num=4,
                           img_height=84, img_width=84, gray_scale=True,
                           use_inter_area_resize=True, episodic_life=False,
                           reward_clip=False, use_fire_reset=False,
                           full_action_space=False, max_episode_steps=27_000)
        env.reset()
        return env, env.step
    if name == "ale_vector":
        from ale_py.vector_env import AtariVectorEnv

        env = AtariVectorEnv(cfg.game, n, num_threads=cfg.num_workers, frameskip=4,
                             repeat_action_probability=0.25, noop_max=30, stack_num=4,
                             img_height=84, img_width=84, grayscale=True, maxpool=True,
                             episodic_life=False, reward_clipping=False,
                             use_fire_reset=False, full_action_space=False,
                             max_num_frames_per_episode=108_000)
        env.reset(seed=seed)
        return env, env.step
    if name == "gymnasium":
        import ale_py
        import gymnasium as gym
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        gym.register_envs(ale_py)
        game_id = f"ALE/{_game_title(cfg.game)}-v5"

        def thunk():
            e = gym.make(game_id, frameskip=1, repeat_action_probability=0.25,
                         full_action_space=False, max_num_frames_per_episode=108_000)
            e = AtariPreprocessing(e, noop_max=30, frame_skip=4, screen_size=84,
                                   terminal_on_life_loss=False, grayscale_obs=True)
            return FrameStackObservation(e, 4)

        env = gym.vector.AsyncVectorEnv([thunk] * n, shared_memory=True,
                                        context=cfg.start_method)
        env.reset(seed=seed)
        return env, env.step
    raise ValueError(f"unknown backend {name!r}")


def _num_actions(env) -> int:
    space = getattr(env, "single_action_space", None) or env.action_space
    return int(space.n)


def _time_backend(name: str, args, cfg, tick) -> Result:
    setting = (f"{cfg.num_envs} envs" + (f", {cfg.num_workers} workers" if name == "shmatari" else
                                        f", {cfg.num_workers} threads" if name in ("envpool", "ale_vector") else
                                        ", 1 process per env"))
    env, step = _make_backend(name, args, cfg)
    try:
        rng = np.random.default_rng(12345)
        actions = rng.integers(0, _num_actions(env), (_ACTION_ROWS, cfg.num_envs))
        warm_end = time.perf_counter() + args.warmup
        k = 0
        while time.perf_counter() < warm_end:
            step(actions[k % _ACTION_ROWS])
            k += 1
        steps, t0 = 0, time.perf_counter()
        end = t0 + args.seconds
        now = t0
        while now < end:
            step(actions[k % _ACTION_ROWS])
            k += 1
            steps += cfg.num_envs
            now = time.perf_counter()
            tick(now - t0)
        return Result(name, setting, steps, now - t0)
    finally:
        env.close()


def _ceiling_worker(fields: dict, indices: list, seconds: float, warmup: float, barrier, queue):
    from . import atari

    atari.quiet_process()
    cfg = _config.EnvConfig(**fields)
    palette = atari.build_palette(cfg)
    cores = [atari.build_core(cfg, i, palette) for i in indices]
    for c in cores:
        c.reset()
    out = np.empty(cfg.obs_shape, np.uint8)
    rng = np.random.default_rng(indices[0])
    acts = rng.integers(0, cores[0].num_actions, (_ACTION_ROWS, len(cores))).tolist()
    barrier.wait()
    steps, k = 0, 0
    t0 = time.perf_counter()
    t_start = t0 + warmup
    end = t_start + seconds
    counting = False
    while True:
        now = time.perf_counter()
        if not counting and now >= t_start:
            counting, steps, t_start = True, 0, now
        if now >= end:
            break
        row = acts[k % _ACTION_ROWS]
        for j, c in enumerate(cores):
            c.step(row[j])
            c.obs_into(out)
        k += 1
        steps += len(cores)
    queue.put((steps, now - t_start))


def _time_ceiling(args, cfg, tick) -> Result:
    ctx = mp.get_context(cfg.start_method)
    fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    groups = cfg.worker_groups()
    barrier, queue = ctx.Barrier(len(groups)), ctx.Queue()
    procs = [ctx.Process(target=_ceiling_worker, daemon=True,
                         args=(fields, list(g), args.seconds, args.warmup, barrier, queue))
             for g in groups]
    for p in procs:
        p.start()
    try:
        t0 = time.perf_counter()
        results = []
        while len(results) < len(procs):
            try:
                results.append(queue.get(timeout=0.1))
            except Exception:  # noqa: BLE001 - queue.Empty
                if any(p.exitcode not in (None, 0) for p in procs):
                    raise RuntimeError("a ceiling process failed") from None
            tick(min(args.seconds, max(0.0, time.perf_counter() - t0 - args.warmup)))
    finally:
        for p in procs:
            p.join(5.0)
            if p.exitcode is None:
                p.kill()
    steps = sum(r[0] for r in results)
    seconds = max(r[1] for r in results)
    return Result("ceiling", f"{len(groups)} processes, no IPC", steps, seconds)


# -- reporting --------------------------------------------------------------------

def machine_info() -> dict:
    """Cores, CPU model, OS and package versions, for the JSON report."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {}
    for pkg in ("shmatari", "ale-py", "numpy", "gymnasium", "envpool", "opencv-python-headless",
                "opencv-python", "Cython"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {"cores": _config.available_cores(), "cpu_count": os.cpu_count(), "cpu_model": cpu,
            "platform": platform.platform(), "python": sys.version.split()[0],
            "versions": versions}


def _rows(results: list[Result], frame_skip: int) -> list[dict]:
    by = {r.backend: r for r in results if not r.skipped}
    pipe = by.get("pipe")
    ceiling = by.get("ceiling")
    rows = []
    for r in results:
        row = {"backend": r.backend, "setting": r.setting}
        if r.skipped:
            row["skipped"] = r.skipped
        else:
            rate = r.env_steps_per_s
            row.update(env_steps=r.env_steps, seconds=round(r.seconds, 3),
                       env_steps_per_s=round(rate, 1),
                       frames_per_s=round(rate * frame_skip, 1))
            if pipe and pipe.env_steps_per_s:
                row["vs_pipe"] = round(rate / pipe.env_steps_per_s, 3)
            if ceiling and ceiling.env_steps_per_s:
                row["vs_ceiling"] = round(rate / ceiling.env_steps_per_s, 3)
        rows.append(row)
    return rows


def _print_table(rows: list[dict], header: str) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(header)
        for row in rows:
            print(row)
        return
    table = Table(title=header)
    for col in ("backend", "setting", "env steps/s", "frames/s", "vs pipe", "vs ceiling"):
        table.add_column(col, justify="left" if col in ("backend", "setting") else "right")
    for row in rows:
        if "skipped" in row:
            table.add_row(row["backend"], row["setting"], "-", "-", "-", row["skipped"][:40])
            continue
        table.add_row(row["backend"], row["setting"], f"{row['env_steps_per_s']:,.0f}",
                      f"{row['frames_per_s']:,.0f}",
                      f"{row['vs_pipe']:.2f}x" if "vs_pipe" in row else "-",
                      f"{row['vs_ceiling']:.2f}x" if "vs_ceiling" in row else "-")
    Console().print(table)


class _Progress:
    """A progress bar per backend (rich when installed, dots otherwise)."""

    def __init__(self, enabled: bool):
        self.rich = None
        if enabled:
            try:
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                self.rich = Progress(TextColumn("{task.description:<12}"), BarColumn(),
                                     TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                                     transient=False)
            except ImportError:
                pass

    def __enter__(self):
        if self.rich:
            self.rich.__enter__()
        return self

    def __exit__(self, *exc):
        if self.rich:
            self.rich.__exit__(*exc)

    def task(self, name: str, total: float):
        if not self.rich:
            print(f"{name} ...", file=sys.stderr, flush=True)
            return lambda done, note="": None
        task_id = self.rich.add_task(name, total=total, note="starting")

        def tick(done, note="measuring"):
            self.rich.update(task_id, completed=min(done, total), note=note)

        return tick


def run(args) -> dict:
    """Runs the benchmark described by parsed ``args``; returns the report."""
    cfg = _config.build_config(args.game, args.num_envs, num_workers=args.num_workers, seed=0,
                               start_method=args.start_method, **_OPTIONS)
    wanted = args.backends.split(",") if args.backends else list(BACKENDS)
    unknown = [b for b in wanted if b not in BACKENDS + ("ceiling",)]
    if unknown:
        raise SystemExit(f"unknown backend(s) {unknown}; choose from {', '.join(BACKENDS)}, ceiling")
    results: list[Result] = []
    with _Progress(not args.quiet) as progress:
        for name in [b for b in BACKENDS if b in wanted]:
            why = _peer_available(name) if name in ("envpool", "ale_vector", "gymnasium") else None
            if why:
                results.append(Result(name, "", skipped=why))
                continue
            tick = progress.task(name, args.seconds)
            try:
                results.append(_time_backend(name, args, cfg, tick))
                tick(args.seconds, "done")
            except Exception as exc:  # noqa: BLE001 - a failing peer must not stop the run
                if name in ("shmatari", "pipe"):
                    raise
                results.append(Result(name, "", skipped=f"failed: {type(exc).__name__}: {exc}"))
                tick(args.seconds, "failed")
        if "ceiling" in wanted or not args.backends:
            tick = progress.task("ceiling", args.seconds)
            results.append(_time_ceiling(args, cfg, tick))
            tick(args.seconds, "done")
    rows = _rows(results, cfg.frame_skip)
    report = {
        "benchmark": "shmatari-bench",
        "game": cfg.game,
        "config": {"num_envs": cfg.num_envs, "num_workers": cfg.num_workers,
                   "seconds": args.seconds, "warmup": args.warmup,
                   "start_method": cfg.start_method, "options": _OPTIONS},
        "machine": machine_info(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": rows,
    }
    return report


def _parser() -> argparse.ArgumentParser:
    cores = _config.available_cores()
    p = argparse.ArgumentParser(prog="shmatari-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Breakout", help="game to step (default Breakout)")
    p.add_argument("--num-envs", type=int, default=4 * cores,
                   help=f"envs per backend (default 4 x cores = {4 * cores})")
    p.add_argument("--num-workers", type=int, default=None,
                   help="shmatari workers, and threads for EnvPool / ale-py (default: cores)")
    p.add_argument("--seconds", type=float, default=4.0, help="measured seconds per backend")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first")
    p.add_argument("--backends", default=None,
                   help=f"comma-separated subset of {','.join(BACKENDS)},ceiling (default all)")
    p.add_argument("--start-method", default=None, choices=_config.START_METHODS)
    p.add_argument("--json", metavar="FILE", default=None, help="also write the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    report = run(args)
    cfg = report["config"]
    m = report["machine"]
    _print_table(report["results"],
                 f"shmatari-bench: {report['game']}, {cfg['num_envs']} envs, "
                 f"{m['cores']} cores ({m['cpu_model']}), {cfg['seconds']:g} s each")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
