"""``shmatari-bench``: env steps per second, shmatari against its peers, side by side.

Every backend steps the same game with the same work per step (ALE v5 options:
frame_skip 4, sticky actions 0.25, up to 30 no-ops, 84x84 grayscale, max-pool,
a stack of 4; no episodic life, no reward clipping, no fire reset) under
uniformly random actions. Optional peers appear when installed: EnvPool,
ale-py's ``AtariVectorEnv`` and Gymnasium's ``AsyncVectorEnv(shared_memory=True)``
with ``AtariPreprocessing`` and ``FrameStackObservation``. ``pipe`` is the
classic baseline (one process per env, pickled over pipes, ALE's grayscale +
NumPy + OpenCV in each worker); ``pipe-kernel`` is the same with shmatari's
fused kernel in the workers, so that shmatari and it differ in the IPC alone.
The ``-async`` backends use ``--batch-size`` (EnvPool's ``send``/``recv``
semantics): each ``recv`` returns the first ``batch_size`` envs ready, and the
loop sends their next actions at once.

Interleaved (the default): every backend is open at once and each runs a short
burst (``--warmup`` unmeasured, then ``--seconds`` measured) in turn, for
``--rounds`` rounds, each round starting one backend further on. A machine
whose load changes then slows every backend alike. Each row gives the median
rate over its bursts and their spread (min-max; the JSON keeps every burst
and the quartiles); the "vs" columns are ratios of medians. ``--no-interleave``
runs each backend's bursts back to back instead, one backend open at a time.

The ceiling row runs the same envs with shmatari's own core in ``num_workers``
processes at once, with no IPC at all and ALE's own reset, and sums their
rates: what the machine can emulate and preprocess, the bound for any vector
env that resets as ALE does. ``ceiling-fast`` is the same with shmatari's fast
resets (``fast_reset="auto"``: a saved post-reset state restored where that is
proven exact, :mod:`shmatari.fast_reset`), which shmatari's own rows use; the
``-ale-reset`` rows are shmatari with ``fast_reset="off"``. All take their
bursts in the same rotation. ``--game`` with a game whose random-policy
episodes are long (Pong: about 800 agent steps, against Breakout's 170)
shows the gain where resets are rare.

``--policy`` puts a training loop's inference in the loop: a Nature-CNN
(Mnih et al., 2015) forward pass on CPU (torch, one thread) on every batch of
observations, sampling the actions from its logits. It compares shmatari sync,
shmatari double-buffered (``batch_size`` = num_envs / 2: while the policy runs
on one half's batch, the other half steps) with the halves served first ready
(``shmatari-double``) and in a fixed order (``shmatari-ordered``,
``batch_order="fixed"``: a training run replays), EnvPool sync and EnvPool
async (the same halves), and reports env steps/s and the policy's share of
the time.

``--env null`` measures the round trip alone: a built-in env that emulates
nothing and only writes a frame, stepped synchronously through shmatari and
through the pipe baseline, with 1 worker and with one per core; it reports
microseconds per round trip.

``--sweep`` runs ``num_envs`` = 1, 2, 4, ... ``--max-envs`` for each backend and
the ceiling, writes the JSON (``--json``) and a PNG plot (``--plot``).

Ctrl-C stops the run: every backend is closed, and what finished (whole
bursts) is printed and written to ``--json``; the exit status is then 130.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from . import _bench_backends as _b, _cli, config as _config
from ._bench_backends import BACKENDS, CEILINGS, POLICY_BACKENDS
from ._progress import Progress

__all__ = ["main", "run", "machine_info"]


@dataclass
class Series:
    """One backend's bursts at one ``num_envs``."""

    backend: str
    setting: str = ""
    num_envs: int = 0
    bursts: list = field(default_factory=list)  # dicts: round, env_steps, seconds, ...
    skipped: str | None = None
    extra: dict = field(default_factory=dict)

    def rates(self) -> np.ndarray:
        return np.array([b["env_steps"] / b["seconds"] for b in self.bursts if b["seconds"]])

    @property
    def median(self) -> float:
        r = self.rates()
        return float(np.median(r)) if len(r) else 0.0


def _open(name: str, cfg, batch_size: int, policy_for):
    if name in CEILINGS:
        return _b.Ceiling(cfg, fast_reset=name == "ceiling-fast")
    runner = _b.open_backend(name, cfg, batch_size)
    if policy_for is not None:
        runner.policy = policy_for(runner.n_actions)
    return runner


def _run_point(args, progress, wanted, num_envs: int, label: str = "") -> tuple[list, bool]:
    """Every wanted backend at one ``num_envs``; returns the series (in
    :data:`BACKENDS` order, the ceiling last) and whether Ctrl-C cut it short."""
    workers = min(num_envs, args.num_workers or _config.available_cores())
    cfg = _config.build_config(args.game, num_envs, num_workers=workers, seed=0,
                               start_method=args.start_method, **_b.OPTIONS)
    batch_size = min(num_envs, args.batch_size or max(1, num_envs // 2))
    order = [b for b in (POLICY_BACKENDS if args.policy else BACKENDS) if b in wanted]
    order += [c for c in CEILINGS if c in wanted]
    series = {}
    for name in order:
        series[name] = Series(name, "", num_envs)
        series[name].skipped = _b.peer_available(name)
        if name in CEILINGS:
            series[name].setting = _b.plural(workers, "process", "processes") + ", no IPC" + (
                ", fast resets" if name == "ceiling-fast" else ", ALE's reset")
        elif not series[name].skipped:
            series[name].setting = _b.setting_text(name, cfg, batch_size)
            if args.policy:
                series[name].setting += ", Nature CNN (torch, 1 thread)"
    policies = {}

    def policy_for(n_actions):
        if n_actions not in policies:
            policies[n_actions] = _b.nature_cnn_policy(cfg.stack_num, n_actions)
        return policies[n_actions]

    runnable = [s for s in series.values() if not s.skipped]
    bar = progress.bar(len(runnable) * args.rounds, f"bursts{label}")
    opened = {}
    interrupted = False

    def fail(s: Series, exc: BaseException):
        # A failing peer must not stop the run; a failing shmatari must.
        if s.backend.startswith(("shmatari", "pipe")) or s.backend in CEILINGS:
            raise exc
        s.skipped = f"failed: {type(exc).__name__}: {exc}"
        s.bursts.clear()
        runner = opened.pop(s.backend, None)
        if runner is not None:
            _b.close_all([runner])

    t_run = time.perf_counter()

    def burst(s: Series, r: int):
        done, start = bar.done, time.perf_counter() - t_run
        try:
            b = opened[s.backend].burst(args.warmup, args.seconds,
                                        lambda t: bar.update(done + min(1.0, t / args.seconds),
                                                             f"{s.backend}{label}, round "
                                                             f"{r + 1}/{args.rounds}"))
        except Exception as exc:  # noqa: BLE001 - see fail()
            fail(s, exc)
            return
        b["round"], b["start_s"] = r, start  # start: seconds since this point began
        s.bursts.append(b)
        bar.finish_one()

    def open_one(s: Series) -> bool:
        bar.update(bar.done, f"opening {s.backend}{label}")
        try:
            opened[s.backend] = _open(s.backend, cfg, batch_size,
                                      policy_for if args.policy else None)
        except Exception as exc:  # noqa: BLE001 - see fail()
            fail(s, exc)
            return False
        return True

    try:
        if args.interleave:
            for s in runnable:
                open_one(s)
            for r in range(args.rounds):
                live = [s for s in runnable if s.backend in opened]
                for s in live[r % len(live):] + live[:r % len(live)] if live else []:
                    burst(s, r)
        else:
            for s in runnable:
                if not open_one(s):
                    continue
                for r in range(args.rounds):
                    if s.backend in opened:
                        burst(s, r)
                _b.close_all([opened.pop(s.backend)] if s.backend in opened else [])
    except KeyboardInterrupt:
        interrupted = True
    finally:
        _b.close_all(list(opened.values()))
    return list(series.values()), interrupted


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
                "opencv-python", "Cython", "torch"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {"cores": _config.available_cores(), "cpu_count": os.cpu_count(), "cpu_model": cpu,
            "platform": platform.platform(), "python": sys.version.split()[0],
            "versions": versions}


def _ratio(a: float, b: float | None):
    return round(a / b, 3) if a and b else None


def _row(s: Series, frame_skip: int, medians: dict) -> dict:
    row = {"backend": s.backend, "setting": s.setting, "num_envs": s.num_envs}
    if s.skipped:
        row["skipped"] = s.skipped
        return row
    rates = s.rates()
    if not len(rates):
        row["skipped"] = "interrupted before its first burst"
        return row
    med = float(np.median(rates))
    q1, q3 = np.percentile(rates, [25, 75])
    row.update(env_steps_per_s=round(med, 1), frames_per_s=round(med * frame_skip, 1),
               min=round(float(rates.min()), 1), max=round(float(rates.max()), 1),
               iqr=[round(float(q1), 1), round(float(q3), 1)],
               spread_pct=round(100 * float(rates.max() - rates.min()) / med, 1),
               rounds=len(rates), env_steps=int(sum(b["env_steps"] for b in s.bursts)),
               seconds=round(sum(b["seconds"] for b in s.bursts), 3))
    if any("policy_seconds" in b for b in s.bursts):
        row["policy_share"] = round(sum(b.get("policy_seconds", 0.0) for b in s.bursts)
                                    / row["seconds"], 3)
    for key, ref in (("vs_pipe", "pipe"), ("vs_envpool", "envpool"), ("vs_ceiling", "ceiling"),
                     ("vs_ceiling_fast", "ceiling-fast")):
        ratio = _ratio(med, medians.get(ref))
        if ratio is not None:
            row[key] = ratio
    row["bursts"] = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in b.items()}
                     for b in s.bursts]
    return row


def _paired(series: list[Series], a: str, b: str) -> dict | None:
    """Median and range over rounds of the per-round ratio a / b (both
    bursts of one round ran within seconds of each other)."""
    by = {s.backend: {x["round"]: x["env_steps"] / x["seconds"] for x in s.bursts}
          for s in series if not s.skipped}
    if a not in by or b not in by:
        return None
    ratios = [by[a][r] / by[b][r] for r in by[a] if r in by[b] and by[b][r]]
    if not ratios:
        return None
    return {"median": round(float(np.median(ratios)), 3), "min": round(min(ratios), 3),
            "max": round(max(ratios), 3), "rounds": len(ratios)}


#: The ratios the acceptance goals speak of: (name, numerator, denominator).
_GOALS = (("shmatari_vs_envpool_sync", "shmatari", "envpool"),
          ("shmatari_async_vs_envpool_async", "shmatari-async", "envpool-async"),
          ("shmatari_vs_ceiling", "shmatari", "ceiling"),
          ("shmatari_async_vs_ceiling", "shmatari-async", "ceiling"),
          ("shmatari_vs_ceiling_fast", "shmatari", "ceiling-fast"),
          ("shmatari_async_vs_ceiling_fast", "shmatari-async", "ceiling-fast"),
          ("shmatari_ale_reset_vs_ceiling", "shmatari-ale-reset", "ceiling"),
          ("shmatari_async_ale_reset_vs_ceiling", "shmatari-async-ale-reset", "ceiling"))
_POLICY_GOALS = (("shmatari_double_vs_envpool_sync", "shmatari-double", "envpool"),
                 ("shmatari_ordered_vs_double", "shmatari-ordered", "shmatari-double"),
                 ("shmatari_ordered_vs_envpool_sync", "shmatari-ordered", "envpool"),
                 ("shmatari_double_vs_envpool_async", "shmatari-double", "envpool-async"),
                 ("shmatari_vs_envpool_sync", "shmatari", "envpool"))


def _summary(series: list[Series], policy: bool) -> dict:
    """Ratios of medians, and the same ratio taken round by round, for the goals."""
    medians = {s.backend: s.median for s in series if not s.skipped}
    out = {}
    for name, a, b in _POLICY_GOALS if policy else _GOALS:
        if medians.get(a) and medians.get(b):
            out[name] = {"ratio_of_medians": _ratio(medians[a], medians[b]),
                         "per_round": _paired(series, a, b)}
    return out


def _rows(series: list[Series], frame_skip: int) -> list[dict]:
    medians = {s.backend: s.median for s in series if not s.skipped}
    return [_row(s, frame_skip, medians) for s in series]


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
    table = Table(caption=legend or None, caption_justify="left")
    for i, (title, _, _) in enumerate(columns):
        table.add_column(title, justify="left" if i < 2 else "right", no_wrap=i < 2)
    for row in rows:
        if "skipped" in row:
            table.add_row(row["backend"], f"skipped: {row['skipped']}",
                          *["-"] * (len(columns) - 2))
            continue
        table.add_row(*[_cell(row, key, fmt) for _, key, fmt in columns])
    console = Console()
    if not console.is_terminal:  # a file or a pipe: don't wrap rows at 80 columns
        console = Console(width=160)
    console.print(header, highlight=False, soft_wrap=True)
    console.print(table)


def _cell(row: dict, key: str, fmt: str) -> str:
    if key == "range":
        return f"{row['min']:,.0f} - {row['max']:,.0f}" if "min" in row else "-"
    return fmt.format(row[key]) if row.get(key) is not None else "-"


_LEGEND = (
    "Higher is better. Median over bursts; range: the slowest and fastest burst. The vs "
    "columns are ratios of medians.\nceiling: the same envs stepped in one process per core "
    "with no IPC at all and ALE's own reset, the bound for any vector env that resets as ALE "
    "does; ceiling-fast: the same with shmatari's fast resets (fast_reset='auto', where proven "
    "exact); -ale-reset rows: shmatari with fast_reset='off'.\npipe: the classic baseline (one "
    "process per env, pickled over pipes, OpenCV preprocessing); pipe-kernel: the same "
    "with shmatari's kernel.")

_POLICY_LEGEND = (
    "env steps/s inside a loop that runs a Nature-CNN forward pass (torch, CPU, 1 thread) on "
    "each batch; policy share: the loop's time spent in it.\nshmatari-double, "
    "shmatari-ordered and envpool-async: two halves, one steps while the policy runs on the "
    "other's batch (shmatari-ordered: batch_order='fixed', the halves alternate, so a "
    "training run replays).")

_MAIN_COLUMNS = (("backend", "backend", "{}"), ("setting", "setting", "{}"),
                 ("env steps/s", "env_steps_per_s", "{:,.0f}"),
                 ("range", "range", ""), ("vs pipe", "vs_pipe", "{:.2f}x"),
                 ("vs EnvPool", "vs_envpool", "{:.2f}x"),
                 ("vs ceiling", "vs_ceiling", "{:.2f}x"),
                 ("vs ceiling-fast", "vs_ceiling_fast", "{:.2f}x"))
_POLICY_COLUMNS = (("backend", "backend", "{}"), ("setting", "setting", "{}"),
                   ("env steps/s", "env_steps_per_s", "{:,.0f}"),
                   ("range", "range", ""), ("policy share", "policy_share", "{:.0%}"),
                   ("vs EnvPool", "vs_envpool", "{:.2f}x"))
_NULL_COLUMNS = (("backend", "backend", "{}"), ("setting", "setting", "{}"),
                 ("median us/round trip", "median_us", "{:.1f}"), ("p99 us", "p99_us", "{:.1f}"),
                 ("round trips/s", "round_trips_per_s", "{:,.0f}"),
                 ("pipe / shmatari", "pipe_over_shmatari", "{:.1f}x"))


def _time_null(name: str, num_envs: int, args, tick) -> Series:
    """Round-trip latency of synchronous steps of the null env."""
    cfg = _config.build_config(_config.NULL_ENV, num_envs, num_workers=num_envs, seed=0,
                               start_method=args.start_method)
    runner = _b.open_backend(name, cfg, num_envs)
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
        setting = _b.plural(num_envs, "env") + ", " + (
            _b.plural(num_envs, "worker") if name == "shmatari"
            else _b.plural(num_envs, "process", "processes"))
        return Series(name, setting, num_envs,
                      [{"round": 0, "env_steps": len(lat) * num_envs, "seconds": now - t0}],
                      extra={"round_trips": len(lat),
                             "median_us": round(float(np.median(lat_us)), 2),
                             "p99_us": round(float(np.percentile(lat_us, 99)), 2)})
    finally:
        _b.close_all([runner])


def _run_null(args, progress) -> tuple[list, bool]:
    n = args.num_workers or _config.available_cores()
    results, interrupted = [], False
    try:
        for name in ("shmatari", "pipe"):
            for k in sorted({1, n}):
                bar = progress.bar(1, f"bursts {name} null x{k}")
                results.append(_time_null(name, k, args, lambda t: bar.update(
                    min(1.0, t / args.seconds), f"{name} null x{k}")))
                bar.finish_one()
    except KeyboardInterrupt:
        interrupted = True
    rows = []
    for r in results:
        row = {"backend": r.backend, "setting": r.setting, "num_envs": r.num_envs,
               "env_steps": r.bursts[0]["env_steps"], "seconds": round(r.bursts[0]["seconds"], 3),
               **r.extra}
        row["round_trips_per_s"] = round(r.extra["round_trips"] / r.bursts[0]["seconds"], 1)
        shm = next((x for x in results if x.backend == "shmatari" and x.num_envs == r.num_envs),
                   None)
        if r.backend == "pipe" and shm is not None:
            row["pipe_over_shmatari"] = round(r.extra["median_us"] / shm.extra["median_us"], 2)
        rows.append(row)
    return rows, interrupted


def _report(args, kind: str, **body) -> dict:
    return {"benchmark": "shmatari-bench", "kind": kind, "game": args.game,
            "config": {"num_envs": args.num_envs, "num_workers": args.num_workers,
                       "batch_size": args.batch_size, "seconds": args.seconds,
                       "warmup": args.warmup, "rounds": args.rounds,
                       "interleave": args.interleave, "policy": args.policy,
                       "start_method": args.start_method, "options": _b.OPTIONS},
            "machine": machine_info(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **body}


def _wanted(args) -> list[str]:
    known = POLICY_BACKENDS if args.policy else BACKENDS + CEILINGS
    if not args.backends:
        return list(known)
    return [b.strip() for b in args.backends.split(",") if b.strip()]


def run(args) -> dict:
    """Runs the benchmark described by parsed ``args``; returns the report
    (``report["interrupted"]`` is True if Ctrl-C cut it short)."""
    with Progress(not args.quiet, "shmatari-bench") as progress:
        if args.env == "null":
            rows, interrupted = _run_null(args, progress)
            return _report(args, "null", game="null", results=rows, interrupted=interrupted)
        wanted = _wanted(args)
        if args.sweep:
            points, n = [], 1
            while n <= args.max_envs:
                points.append(n)
                n *= 2
            rows, skipped, interrupted = [], {}, False
            for n in points:
                series, interrupted = _run_point(args, progress, wanted, n, f" @{n}")
                for s in series:
                    if s.skipped and s.skipped.startswith("not installed"):
                        skipped[s.backend] = s.skipped
                rows += [r for r in _rows(series, _b.OPTIONS["frame_skip"])
                         if r["backend"] not in skipped]
                if interrupted:
                    break
            return _report(args, "sweep", results=rows, skipped=skipped,
                           interrupted=interrupted)
        series, interrupted = _run_point(args, progress, wanted, args.num_envs)
        return _report(args, "policy" if args.policy else "single",
                       results=_rows(series, _b.OPTIONS["frame_skip"]),
                       summary=_summary(series, args.policy), interrupted=interrupted)


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
        style = dict(color="black", linestyle="--", linewidth=1.5) if name in CEILINGS else \
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
    doc = _cli.plain(__doc__)
    p = _cli.ArgumentParser(prog="shmatari-bench", description=doc.split("\n\n")[0],
                                formatter_class=_cli.HelpFormatter, allow_abbrev=False,
                                epilog="\n\n".join(doc.split("\n\n")[1:]))
    _cli.add_version(p)
    p.add_argument("--game", default="Breakout", help="game to step")
    p.add_argument("--env", choices=("atari", "null"), default="atari",
                   help="'null': measure the round trip alone with the built-in null env")
    p.add_argument("--num-envs", type=_cli.positive_int, default=4 * cores,
                   help="envs per backend (4 x the cores available)")
    p.add_argument("--num-workers", type=_cli.positive_int, default=None,
                   help=f"shmatari workers, and threads for EnvPool / ale-py (default: the "
                        f"cores available, {cores}, at most num_envs)")
    p.add_argument("--batch-size", type=_cli.positive_int, default=None,
                   help="batch size of the -async backends (default num_envs / 2)")
    p.add_argument("--seconds", type=_cli.positive_float, default=2.0,
                   help="measured seconds per burst")
    p.add_argument("--warmup", type=_cli.nonnegative_float, default=0.5,
                   help="unmeasured seconds at the start of each burst")
    p.add_argument("--rounds", type=_cli.positive_int, default=7,
                   help="bursts per backend")
    p.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=True,
                   help="every backend open at once, bursts in rotation; --no-interleave: "
                        "one backend at a time, its bursts back to back")
    p.add_argument("--policy", action="store_true",
                   help="a Nature-CNN forward pass (torch, CPU, 1 thread) on every batch: "
                        f"{', '.join(POLICY_BACKENDS)}")
    p.add_argument("--backends", default=None,
                   help=f"comma-separated subset of {','.join(BACKENDS + CEILINGS)} (with "
                        f"--policy: of {','.join(POLICY_BACKENDS)}) (default: all)")
    p.add_argument("--start-method", default=None, choices=_config.START_METHODS,
                   help=f"how shmatari and the pipe baselines start processes (default: "
                        f"{_config.default_start_method()})")
    p.add_argument("--sweep", action="store_true",
                   help="num_envs = 1, 2, 4, ... --max-envs for every backend")
    p.add_argument("--max-envs", type=_cli.positive_int, default=64,
                   help="largest num_envs of --sweep")
    p.add_argument("--plot", metavar="FILE", default=None,
                   help="with --sweep: write the PNG plot here (default shmatari-sweep.png)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _check_args(parser, args) -> None:
    """Every usage error, before anything starts (``parser.error``: exit 2)."""
    if args.policy and (args.env == "null" or args.sweep):
        parser.error("--policy runs alone: not with --env null or --sweep")
    if args.policy:
        missing = _b.torch_missing()
        if missing:
            parser.error(missing)
    known = POLICY_BACKENDS if args.policy else BACKENDS + CEILINGS
    if args.backends is not None:
        wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
        unknown = [b for b in wanted if b not in known]
        if unknown or not wanted:
            parser.error(f"--backends: unknown backend(s) {', '.join(unknown) or '(none given)'}"
                         f"; choose from {','.join(known)}")
    if args.plot and not args.sweep:
        parser.error("--plot goes with --sweep")
    sizes = [args.num_envs] if not args.sweep else [1, args.max_envs]
    if args.batch_size is not None and not args.sweep and args.batch_size > args.num_envs:
        parser.error(f"--batch-size {args.batch_size} must be <= --num-envs {args.num_envs}")
    if args.policy and args.num_envs < 2:
        parser.error("--policy needs --num-envs >= 2 (the double-buffered pool has two halves)")
    try:
        for n in sizes:
            workers = min(n, args.num_workers or _config.available_cores())
            _config.build_config(args.game if args.env == "atari" else _config.NULL_ENV, n,
                                 num_workers=workers, seed=0, start_method=args.start_method)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    _cli.check_output_path(parser, "--json", args.json)
    _cli.check_output_path(parser, "--plot", args.plot or ("shmatari-sweep.png" if args.sweep
                                                           else None))


def _print_report(args, report: dict) -> None:
    """The report's table on stdout (and the sweep's plot)."""
    m, n = report["machine"], _b.plural(args.num_envs, "env")
    done = max([r.get("rounds", 0) for r in report["results"]] or [0])
    how = (f"median of {_b.plural(args.rounds, 'burst')}" if not report.get("interrupted")
           else f"interrupted: median of the {_b.plural(done, 'burst')} done")
    how += f" of {args.seconds:g} s" + (", interleaved" if args.interleave
                                         else ", backend after backend")
    where = f"{_b.plural(m['cores'], 'core')} ({m['cpu_model']}), {how}"
    if report["kind"] == "null":
        _print_table(report["results"], f"shmatari-bench --env null: round trip, "
                     f"{_b.plural(m['cores'], 'core')}, {args.seconds:g} s each", _NULL_COLUMNS)
    elif report["kind"] == "sweep":
        skipped = "; ".join(f"{k}: {v}" for k, v in report["skipped"].items())
        _print_table(report["results"], f"shmatari-bench --sweep: {report['game']}, {where}",
                     _MAIN_COLUMNS[:4] + _MAIN_COLUMNS[-1:],
                     f"skipped at every size: {skipped}" if skipped else "")
        if report["results"]:
            plot = args.plot or "shmatari-sweep.png"
            try:
                plot_sweep(report, plot)
                print(f"plot: {plot}")
            except ImportError:
                print("matplotlib is not installed: no plot (pip install 'shmatari[bench]')",
                      file=sys.stderr)
    elif report["kind"] == "policy":
        _print_table(report["results"], f"shmatari-bench --policy: {report['game']}, {n}, "
                     f"{where}", _POLICY_COLUMNS, _POLICY_LEGEND)
    else:
        _print_table(report["results"], f"shmatari-bench: {report['game']}, {n}, {where}",
                     _MAIN_COLUMNS, _LEGEND)


def main(argv=None) -> int:
    """The ``shmatari-bench`` console script; returns the exit status (0; 2
    on bad arguments; 130 after Ctrl-C, with what finished printed)."""
    parser = _parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    try:
        report = run(args)
    except KeyboardInterrupt:  # between two runs' own handlers
        print("shmatari-bench: interrupted", file=sys.stderr)
        return _cli.EXIT_INTERRUPTED
    _print_report(args, report)
    if args.json:
        _cli.write_json(args.json, report)
    if report.get("interrupted"):
        print("shmatari-bench: interrupted; the table holds the bursts that finished",
              file=sys.stderr)
        return _cli.EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
