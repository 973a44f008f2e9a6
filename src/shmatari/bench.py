"""``shmatari-bench``: env steps per second, shmatari against its peers, side by side.

Every backend steps the same game with the same work per step (ALE v5 options:
frame_skip 4, sticky actions 0.25, up to 30 no-ops, 84x84 grayscale, max-pool,
a stack of 4; no episodic life, no reward clipping, no fire reset) under
uniformly random actions, for ``--seconds`` after a warm-up. Optional peers
appear when installed: EnvPool, ale-py's ``AtariVectorEnv`` and Gymnasium's
``AsyncVectorEnv(shared_memory=True)`` with ``AtariPreprocessing`` and
``FrameStackObservation``. ``pipe`` is the classic baseline (one process per
env, pickled over pipes, ALE's grayscale + NumPy + OpenCV in each worker);
``pipe-kernel`` is the same with shmatari's fused kernel in the workers, so
that shmatari and it differ in the IPC alone. The ``-async`` backends use ``--batch-size``
(EnvPool's ``send``/``recv`` semantics): each ``recv`` returns the first
``batch_size`` envs ready, and the loop sends their next actions at once.

The ceiling row runs the same envs with shmatari's own core in ``num_workers``
processes at once, with no IPC at all, and sums their rates: what the machine
can emulate and preprocess, the bound for any vector env.

``--env null`` measures the round trip alone: a built-in env that emulates
nothing and only writes a frame, stepped synchronously through shmatari and
through the pipe baseline, with 1 worker and with one per core; it reports
microseconds per round trip.

``--sweep`` runs ``num_envs`` = 1, 2, 4, ... ``--max-envs`` for each backend and
the ceiling, writes the JSON (``--json``) and a PNG plot (``--plot``).
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

__all__ = ["main", "run", "machine_info"]

#: Backends in the order they run and print.
BACKENDS = ("shmatari", "shmatari-async", "pipe", "pipe-kernel", "envpool", "envpool-async",
            "ale_vector", "gymnasium")
_PEER_MODULE = {"envpool": "envpool", "envpool-async": "envpool",
                "ale_vector": "ale_vector", "gymnasium": "gymnasium"}
_OPTIONS = dict(frame_skip=4, repeat_action_probability=0.25, noop_max=30, stack_num=4,
                img_height=84, img_width=84, grayscale=True, maxpool=True,
                episodic_life=False, use_fire_reset=False, reward_clip=False,
                full_action_space=False, max_episode_frames=108_000)
_ACTION_ROWS = 4096


@dataclass
class Result:
    backend: str
    setting: str
    num_envs: int = 0
    env_steps: int = 0
    seconds: float = 0.0
    skipped: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def env_steps_per_s(self) -> float:
        return self.env_steps / self.seconds if self.seconds else 0.0


# -- backends ---------------------------------------------------------------------

def _peer_available(name: str) -> str | None:
    """None if the backend can run here, else why not."""
    peer = _PEER_MODULE.get(name)
    try:
        if peer == "envpool":
            import envpool  # noqa: F401
        elif peer == "ale_vector":
            from ale_py.vector_env import AtariVectorEnv  # noqa: F401
        elif peer == "gymnasium":
            import cv2  # noqa: F401
            import gymnasium  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not installed"
        return "not installed" + (" (pip install envpool)" if peer == "envpool" else "")
    return None


def _game_title(rom: str) -> str:
    """``"ms_pacman"`` -> ``"MsPacman"`` (the Gymnasium / EnvPool spelling)."""
    return "".join(part.capitalize() for part in rom.split("_"))


class _Runner:
    """Steps one backend: ``loop()`` performs one iteration and returns the
    env steps it completed."""

    def __init__(self, env, n_actions: int, num_envs: int, *, step=None, recv=None, send=None,
                 first=None):
        self.env, self.step, self.recv, self.send = env, step, recv, send
        self.num_envs = num_envs
        self.actions = np.random.default_rng(12345).integers(0, n_actions,
                                                             (_ACTION_ROWS, num_envs))
        self.k = 0
        if first is not None:
            first()

    def loop(self) -> int:
        self.k += 1
        row = self.actions[self.k % _ACTION_ROWS]
        if self.step is not None:
            self.step(row)
            return self.num_envs
        obs, _, _, _, info = self.recv()
        ids = info["env_id"]
        self.send(row[:len(ids)], ids)
        return len(ids)

    def close(self):
        self.env.close()


def _n_actions(env) -> int:
    space = getattr(env, "single_action_space", None) or env.action_space
    return int(space.n)


def _open_backend(name: str, cfg: _config.EnvConfig, batch_size: int) -> _Runner:
    n, seed = cfg.num_envs, 0
    if name in ("shmatari", "shmatari-async"):
        from .env import ShmVectorEnv

        if name == "shmatari-async":
            import dataclasses

            env = ShmVectorEnv(dataclasses.replace(cfg, batch_size=batch_size))
            return _Runner(env, _n_actions(env), n, recv=env.recv, send=env.send,
                           first=env.async_reset)
        env = ShmVectorEnv(cfg)
        env.reset()
        return _Runner(env, _n_actions(env), n, step=env.step)
    if name in ("pipe", "pipe-kernel"):
        from .baselines import PipeVectorEnv

        env = PipeVectorEnv(_config.build_config(cfg.game, n, num_workers=n, seed=seed,
                                                 start_method=cfg.start_method,
                                                 **cfg.env_options()),
                            preprocess="kernel" if name == "pipe-kernel" else "opencv")
        env.reset()
        return _Runner(env, _n_actions(env), n, step=env.step)
    if name in ("envpool", "envpool-async"):
        import envpool

        kw = dict(batch_size=batch_size) if name == "envpool-async" else {}
        env = envpool.make(f"{_game_title(cfg.game)}-v5", env_type="gymnasium", num_envs=n,
                           num_threads=cfg.num_workers, seed=seed, frame_skip=4,
                           repeat_action_probability=0.25, noop_max=30, stack_num=4,
                           img_height=84, img_width=84, gray_scale=True,
                           use_inter_area_resize=True, episodic_life=False,
                           reward_clip=False, use_fire_reset=False,
                           full_action_space=False, max_episode_steps=27_000, **kw)
        if kw:
            return _Runner(env, _n_actions(env), n, recv=env.recv, send=env.send,
                           first=env.async_reset)
        env.reset()
        return _Runner(env, _n_actions(env), n, step=env.step)
    if name == "ale_vector":
        from ale_py import ALEInterface, LoggerMode
        from ale_py.vector_env import AtariVectorEnv

        ALEInterface.setLoggerMode(LoggerMode.Error)
        env = AtariVectorEnv(cfg.game, n, num_threads=cfg.num_workers, frameskip=4,
                             repeat_action_probability=0.25, noop_max=30, stack_num=4,
                             img_height=84, img_width=84, grayscale=True, maxpool=True,
                             episodic_life=False, reward_clipping=False,
                             use_fire_reset=False, full_action_space=False,
                             max_num_frames_per_episode=108_000)
        env.reset(seed=seed)
        return _Runner(env, _n_actions(env), n, step=env.step)
    if name == "gymnasium":
        import ale_py
        import gymnasium as gym
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        gym.register_envs(ale_py)
        game_id = f"ALE/{_game_title(cfg.game)}-v5"

        def thunk():
            ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
            e = gym.make(game_id, frameskip=1, repeat_action_probability=0.25,
                         full_action_space=False, max_num_frames_per_episode=108_000)
            e = AtariPreprocessing(e, noop_max=30, frame_skip=4, screen_size=84,
                                   terminal_on_life_loss=False, grayscale_obs=True)
            return FrameStackObservation(e, 4)

        env = gym.vector.AsyncVectorEnv([thunk] * n, shared_memory=True,
                                        context=_config.mp_start_method(cfg.start_method))
        env.reset(seed=seed)
        return _Runner(env, _n_actions(env), n, step=env.step)
    raise ValueError(f"unknown backend {name!r}")


def _setting(name: str, cfg: _config.EnvConfig, batch_size: int) -> str:
    s = f"{cfg.num_envs} envs"
    if name.endswith("-async"):
        s += f", batch {batch_size}"
    if name.startswith("shmatari"):
        return s + f", {cfg.num_workers} workers"
    if name.startswith(("envpool", "ale_vector")):
        return s + f", {cfg.num_workers} threads"
    if name == "pipe-kernel":
        return s + ", 1 process per env, shmatari's kernel"
    return s + ", 1 process per env"


def _time_backend(name: str, args, cfg, batch_size: int, tick) -> Result:
    runner = _open_backend(name, cfg, batch_size)
    try:
        warm_end = time.perf_counter() + args.warmup
        while time.perf_counter() < warm_end:
            runner.loop()
        steps, t0 = 0, time.perf_counter()
        end, now = t0 + args.seconds, t0
        while now < end:
            steps += runner.loop()
            now = time.perf_counter()
            tick(now - t0)
        return Result(name, _setting(name, cfg, batch_size), cfg.num_envs, steps, now - t0)
    finally:
        runner.close()


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
    t_start = time.perf_counter() + warmup
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
    ctx = mp.get_context(_config.mp_start_method(cfg.start_method))
    fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    groups = cfg.worker_groups()
    barrier, queue = ctx.Barrier(len(groups)), ctx.Queue()
    procs = [ctx.Process(target=_ceiling_worker, daemon=True,
                         args=(fields, list(g), args.seconds, args.warmup, barrier, queue))
             for g in groups]
    from .atari import single_threaded_children

    with single_threaded_children():
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
    return Result("ceiling", f"{len(groups)} processes, no IPC", cfg.num_envs, steps, seconds)


def _time_null(name: str, num_envs: int, args, tick) -> Result:
    """Round-trip latency of synchronous steps of the null env."""
    cfg = _config.build_config(_config.NULL_ENV, num_envs, num_workers=num_envs, seed=0,
                               start_method=args.start_method)
    runner = _open_backend(name, cfg, num_envs)
    try:
        lat = []
        warm_end = time.perf_counter() + args.warmup
        while time.perf_counter() < warm_end:
            runner.loop()
        t0 = time.perf_counter()
        end = t0 + args.seconds
        now = t0
        while now < end:
            a = time.perf_counter_ns()
            runner.loop()
            lat.append(time.perf_counter_ns() - a)
            now = time.perf_counter()
            tick(now - t0)
        lat_us = np.array(lat) / 1e3
        setting = f"{num_envs} env{'s' if num_envs > 1 else ''}, " + (
            f"{num_envs} worker{'s' if num_envs > 1 else ''}" if name == "shmatari"
            else f"{num_envs} process{'es' if num_envs > 1 else ''}")
        return Result(name, setting, num_envs, len(lat) * num_envs, now - t0,
                      extra={"round_trips": len(lat),
                             "median_us": round(float(np.median(lat_us)), 2),
                             "p99_us": round(float(np.percentile(lat_us, 99)), 2)})
    finally:
        runner.close()


# -- reporting --------------------------------------------------------------------

def machine_info() -> dict:
    """Cores, CPU model, OS and package versions, for JSON reports."""
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


def _row(r: Result, frame_skip: int, pipe: Result | None, ceiling: Result | None) -> dict:
    row = {"backend": r.backend, "setting": r.setting, "num_envs": r.num_envs}
    if r.skipped:
        row["skipped"] = r.skipped
        return row
    rate = r.env_steps_per_s
    row.update(env_steps=r.env_steps, seconds=round(r.seconds, 3),
               env_steps_per_s=round(rate, 1), frames_per_s=round(rate * frame_skip, 1))
    row.update(r.extra)
    if pipe and pipe.env_steps_per_s:
        row["vs_pipe"] = round(rate / pipe.env_steps_per_s, 3)
    if ceiling and ceiling.env_steps_per_s:
        row["vs_ceiling"] = round(rate / ceiling.env_steps_per_s, 3)
    return row


def _rows(results: list[Result], frame_skip: int) -> list[dict]:
    by = {r.backend: r for r in results if not r.skipped}
    return [_row(r, frame_skip, by.get("pipe"), by.get("ceiling")) for r in results]


def _print_table(rows: list[dict], header: str, columns, legend: str = "") -> None:
    """``columns``: (title, key, format) triples; ``legend``: printed below."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(header)
        for row in rows:
            print({k: row.get(k) for _, k, _ in columns} | ({"skipped": row["skipped"]}
                                                            if "skipped" in row else {}))
        print(legend)
        return
    table = Table(title=header, caption=legend or None, caption_justify="left")
    for i, (title, _, _) in enumerate(columns):
        table.add_column(title, justify="left" if i < 2 else "right", no_wrap=i < 2)
    for row in rows:
        if "skipped" in row:
            table.add_row(row["backend"], f"skipped: {row['skipped']}",
                          *["-"] * (len(columns) - 2))
            continue
        table.add_row(*[(fmt.format(row[key]) if key in row else "-")
                        for _, key, fmt in columns])
    console = Console()
    if not console.is_terminal:  # a file or a pipe: don't wrap rows at 80 columns
        console = Console(width=140)
    console.print(table)


_LEGEND = (
    "Higher is better. ceiling: the same envs stepped in one process per core with no IPC "
    "at all, the bound for any vector env.\npipe: the classic baseline (one process per "
    "env, pickled over pipes, OpenCV preprocessing); pipe-kernel: the same with shmatari's "
    "kernel.\nBackends run one after another: a ratio above 1.00x vs ceiling means the "
    "machine's load changed between runs; repeat on a quiet machine.")


_MAIN_COLUMNS = (("backend", "backend", "{}"), ("setting", "setting", "{}"),
                 ("env steps/s", "env_steps_per_s", "{:,.0f}"),
                 ("frames/s", "frames_per_s", "{:,.0f}"), ("vs pipe", "vs_pipe", "{:.2f}x"),
                 ("vs ceiling", "vs_ceiling", "{:.2f}x"))
_NULL_COLUMNS = (("backend", "backend", "{}"), ("setting", "setting", "{}"),
                 ("median us/round trip", "median_us", "{:.1f}"), ("p99 us", "p99_us", "{:.1f}"),
                 ("round trips/s", "round_trips_per_s", "{:,.0f}"),
                 ("pipe / shmatari", "pipe_over_shmatari", "{:.1f}x"))


class _Progress:
    """A progress bar per run (rich when installed, a line on stderr otherwise)."""

    def __init__(self, enabled: bool):
        self.rich = None
        self.enabled = enabled
        if enabled:
            try:
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                self.rich = Progress(TextColumn("{task.description:<22}"), BarColumn(),
                                     TextColumn("{task.fields[note]}"), TimeElapsedColumn())
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
            if self.enabled:
                print(f"{name} ...", file=sys.stderr, flush=True)
            return lambda done, note="": None
        task_id = self.rich.add_task(name, total=total, note="starting")

        def tick(done, note="measuring"):
            self.rich.update(task_id, completed=min(done, total), note=note)

        return tick


def _wanted(args) -> list[str]:
    if not args.backends:
        return list(BACKENDS) + ["ceiling"]
    wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in wanted if b not in BACKENDS + ("ceiling",)]
    if unknown:
        raise SystemExit(f"shmatari-bench: unknown backend(s) {unknown}; choose from "
                         f"{', '.join(BACKENDS)}, ceiling")
    return wanted


def _run_point(args, progress, wanted, num_envs: int, label: str = "") -> list[Result]:
    """All wanted backends at one ``num_envs``."""
    workers = min(num_envs, args.num_workers or _config.available_cores())
    cfg = _config.build_config(args.game, num_envs, num_workers=workers, seed=0,
                               start_method=args.start_method, **_OPTIONS)
    batch_size = args.batch_size or max(1, num_envs // 2)
    if batch_size > num_envs:
        raise SystemExit(f"shmatari-bench: --batch-size {batch_size} > --num-envs {num_envs}")
    results = []
    for name in [b for b in BACKENDS if b in wanted]:
        why = _peer_available(name)
        if why:
            results.append(Result(name, "", num_envs, skipped=why))
            continue
        tick = progress.task(f"{name}{label}", args.seconds)
        try:
            results.append(_time_backend(name, args, cfg, batch_size, tick))
            tick(args.seconds, "done")
        except Exception as exc:  # noqa: BLE001 - a failing peer must not stop the run
            if name.startswith(("shmatari", "pipe")):
                raise
            results.append(Result(name, "", num_envs,
                                  skipped=f"failed: {type(exc).__name__}: {exc}"))
            tick(args.seconds, "failed")
    if "ceiling" in wanted:
        tick = progress.task(f"ceiling{label}", args.seconds)
        results.append(_time_ceiling(args, cfg, tick))
        tick(args.seconds, "done")
    return results


def _report(args, kind: str, **body) -> dict:
    return {"benchmark": "shmatari-bench", "kind": kind, "game": args.game,
            "config": {"num_envs": args.num_envs, "num_workers": args.num_workers,
                       "batch_size": args.batch_size, "seconds": args.seconds,
                       "warmup": args.warmup, "start_method": args.start_method,
                       "options": _OPTIONS},
            "machine": machine_info(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **body}


def run(args) -> dict:
    """Runs the benchmark described by parsed ``args``; returns the report."""
    with _Progress(not args.quiet) as progress:
        if args.env == "null":
            n = args.num_workers or _config.available_cores()
            results = []
            for name in ("shmatari", "pipe"):
                for k in sorted({1, n}):
                    tick = progress.task(f"{name} null x{k}", args.seconds)
                    results.append(_time_null(name, k, args, tick))
                    tick(args.seconds, "done")
            rows = []
            for r in results:
                row = _row(r, 1, None, None)
                row["round_trips_per_s"] = round(r.extra["round_trips"] / r.seconds, 1)
                if r.backend == "pipe":
                    shm = next(x for x in results
                               if x.backend == "shmatari" and x.num_envs == r.num_envs)
                    row["pipe_over_shmatari"] = round(
                        r.extra["median_us"] / shm.extra["median_us"], 2)
                rows.append(row)
            return _report(args, "null", game="null", results=rows)
        wanted = _wanted(args)
        if args.sweep:
            points, n = [], 1
            while n <= args.max_envs:
                points.append(n)
                n *= 2
            rows = []
            for n in points:
                rows += _rows(_run_point(args, progress, wanted, n, f" @{n}"), _OPTIONS["frame_skip"])
            return _report(args, "sweep", results=rows)
        rows = _rows(_run_point(args, progress, wanted, args.num_envs), _OPTIONS["frame_skip"])
        return _report(args, "single", results=rows)


def plot_sweep(report: dict, path: str) -> None:
    """Env steps/s against num_envs, a line per backend and the ceiling, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list] = {}
    for row in report["results"]:
        if "env_steps_per_s" in row:
            series.setdefault(row["backend"], []).append((row["num_envs"], row["env_steps_per_s"]))
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for name, pts in series.items():
        xs, ys = zip(*sorted(pts))
        style = dict(color="black", linestyle="--", linewidth=1.5) if name == "ceiling" else \
            dict(marker="o", linewidth=2 if name.startswith("shmatari") else 1.2)
        ax.plot(xs, ys, label=name, **style)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("num_envs")
    ax.set_ylabel("env steps / s (frames / s = 4x)")
    m = report["machine"]
    ax.set_title(f"{report['game']}: {m['cores']} cores, {m['cpu_model']}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    cores = _config.available_cores()
    p = argparse.ArgumentParser(prog="shmatari-bench",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--game", default="Breakout", help="game to step (default Breakout)")
    p.add_argument("--env", choices=("atari", "null"), default="atari",
                   help="'null': measure the round trip alone with the built-in null env")
    p.add_argument("--num-envs", type=int, default=4 * cores,
                   help=f"envs per backend (default 4 x cores = {4 * cores})")
    p.add_argument("--num-workers", type=int, default=None,
                   help="shmatari workers, and threads for EnvPool / ale-py (default: cores)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="batch size of the -async backends (default num_envs / 2)")
    p.add_argument("--seconds", type=float, default=4.0, help="measured seconds per backend")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first")
    p.add_argument("--backends", default=None,
                   help=f"comma-separated subset of {','.join(BACKENDS)},ceiling (default all)")
    p.add_argument("--start-method", default=None, choices=_config.START_METHODS)
    p.add_argument("--sweep", action="store_true",
                   help="num_envs = 1, 2, 4, ... --max-envs for every backend")
    p.add_argument("--max-envs", type=int, default=64, help="largest num_envs of --sweep")
    p.add_argument("--plot", metavar="FILE", default=None,
                   help="with --sweep: write the PNG plot here (default shmatari-sweep.png)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        _config.build_config(args.game, max(1, args.num_envs), seed=0,
                             start_method=args.start_method)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    report = run(args)
    m = report["machine"]
    where = f"{m['cores']} cores ({m['cpu_model']}), {args.seconds:g} s each"
    if report["kind"] == "null":
        _print_table(report["results"], f"shmatari-bench --env null: round trip, {where}",
                     _NULL_COLUMNS)
    elif report["kind"] == "sweep":
        _print_table(report["results"], f"shmatari-bench --sweep: {report['game']}, {where}",
                     (("backend", "backend", "{}"), ("setting", "setting", "{}"),
                      ("env steps/s", "env_steps_per_s", "{:,.0f}"),
                      ("vs ceiling", "vs_ceiling", "{:.2f}x")))
        plot = args.plot or "shmatari-sweep.png"
        try:
            plot_sweep(report, plot)
            print(f"plot: {plot}")
        except ImportError:
            print("matplotlib is not installed: no plot (pip install 'shmatari[bench]')",
                  file=sys.stderr)
    else:
        _print_table(report["results"],
                     f"shmatari-bench: {report['game']}, {args.num_envs} envs, {where}",
                     _MAIN_COLUMNS, _LEGEND)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
