"""``shmatari-bench``'s report: each backend's bursts (:class:`Series`), the rows
and ratios they give, the machine they ran on, the tables printed and the
sweep's plot. The measuring loop is :mod:`shmatari.bench`.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from . import _bench_backends as _b, _cli, config as _config
from ._bench_backends import CEILINGS


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


#: The share of the machine's cores that other processes may keep busy during
#: a bench before it says so (``OtherLoad``).
BUSY_SHARE = 0.10


class OtherLoad:
    """CPU time the rest of the machine used while a bench ran: the machine's
    busy time (``psutil.cpu_times``: user, nice, system, irq, softirq) less
    this process tree's (itself, its reaped children and its live
    descendants: workers, zygote, ceiling processes, EnvPool's threads), as a
    share of all cores over the wall time. A bench measures what the cores
    give; where other work took some of them, its rates are lower and its
    ratios less sure (interleaving spreads the loss over every backend, but
    a load that comes and goes does not spread evenly). Unknown (None)
    without psutil."""

    def __init__(self):
        self.start = self._sample()

    @staticmethod
    def _sample():
        try:
            import psutil
        except ImportError:
            return None
        t = psutil.cpu_times()
        busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
        me = psutil.Process()
        tree = sum(me.cpu_times()[:4])  # user, system, children_user, children_system
        for p in me.children(recursive=True):
            try:
                tree += sum(p.cpu_times()[:4])
            except psutil.Error:  # it ended in between: its parent counts it
                pass
        return time.monotonic(), busy, tree, psutil.cpu_count() or 1

    def share(self) -> float | None:
        """Other processes' CPU time since this was made, over (wall time x
        cores): 0 on a quiet machine, 0.5 with one of two cores taken."""
        end = self._sample()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return None
        other = (end[1] - self.start[1]) - (end[2] - self.start[2])
        return round(max(0.0, other / ((end[0] - self.start[0]) * end[3])), 3)


def busy_warning(share: float | None, cores: int) -> str | None:
    """What the bench says when other processes took more than
    :data:`BUSY_SHARE` of the machine (``OtherLoad.share``); None if not."""
    if share is None or share <= BUSY_SHARE:
        return None
    return (f"shmatari-bench: other processes kept {share:.0%} of this machine's "
            f"{_b.plural(cores, 'core')} busy while it ran (its own processes aside): the "
            f"rates are lower than on a quiet machine, and the ratios between backends, "
            f"even which is faster, may not hold; run it again with the machine quiet")


#: Fewer bursts per backend than this: the table says its medians are too
#: few to rank backends by (:func:`few_rounds_note`).
FEW_ROUNDS = 3


def few_rounds_note(report: dict) -> str | None:
    """What the bench says under a table of rates from fewer than
    :data:`FEW_ROUNDS` bursts per backend: a median of one or two bursts is
    a sample of the machine's noise, in which a row can land above its
    ceiling (``ceiling-sync`` above ``ceiling-fast``, ``--rounds 2`` in a
    newcomer's pass). None for more rounds, and for ``--env null`` (its
    medians are over every round trip)."""
    if report["kind"] == "null":
        return None
    done = [r.get("rounds", 0) for r in report["results"] if r.get("rounds")]
    if not done or min(done) >= FEW_ROUNDS:
        return None
    return (f"shmatari-bench: {_b.plural(min(done), 'burst')} per backend: too few to rank "
            f"backends or to quote a ratio, since one burst's noise can reorder rows (a "
            f"ceiling under the row it bounds); the README's figures take 7 to 15 rounds "
            f"(--rounds 7)")


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
                     ("vs_ceiling_fast", "ceiling-fast"), ("vs_ceiling_sync", "ceiling-sync")):
        ratio = _ratio(med, medians.get(ref))
        if ratio is not None:
            row[key] = ratio
    # like with like: an async row against EnvPool's async row (the table's
    # only EnvPool column compared every row with EnvPool sync, and read as
    # async beating EnvPool where EnvPool's async was faster: a newcomer's pass)
    same = "envpool-async" if s.backend in _b.ASYNC_BACKENDS else "envpool"
    ratio = _ratio(med, medians.get(same))
    if ratio is not None:
        row["vs_envpool_mode"] = ratio
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
          ("shmatari_vs_ceiling_sync", "shmatari", "ceiling-sync"),
          ("ceiling_sync_vs_ceiling", "ceiling-sync", "ceiling"),
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


def _print_table(rows: list[dict], header: str, columns, legend: str = "",
                 console=None) -> None:
    """``columns``: (title, key, format) triples; ``legend``: printed below.
    A ratio column ("vs ...") whose reference was not run (no row has a
    value in it) is left out. Every number is printed whatever the
    terminal's width: where the table does not fit, the settings move below
    it, and a table still too wide is printed at its own width (the
    terminal wraps its lines) rather than squeezed. ``console``: where to
    print (a ``rich`` console; default stdout, 200 columns wide when stdout
    is a file or a pipe)."""
    columns = _printed(rows, columns)
    try:
        from rich.console import Console
    except ImportError:
        print(header)
        for row in rows:
            print({k: row.get(k) for _, k, _ in columns} | ({"skipped": row["skipped"]}
                                                            if "skipped" in row else {}))
        print(legend)
        return
    if console is None:
        console = Console()
        if not console.is_terminal:  # a file or a pipe: don't wrap rows at 80 columns
            console = Console(width=200)
    table = _table(rows, columns, legend)
    width = _natural_width(console, table)
    if width > console.width and any(c[1] == "setting" for c in columns):
        settings = "\n".join(f"{row['backend']}: {_cell(row, 'setting', '{}')}"
                             for row in rows)
        table = _table(rows, [c for c in columns if c[1] != "setting"],
                       settings + ("\n" + legend if legend else ""))
        width = _natural_width(console, table)
    console.print(header, highlight=False, soft_wrap=True)
    narrow = console.width
    console.width = max(narrow, width)  # rich squeezes to the console's width otherwise
    try:
        console.print(table)
    finally:
        console.width = narrow


def _table(rows: list[dict], columns, legend: str):
    from rich.table import Table

    table = Table(caption=legend or None, caption_justify="left")
    for title, key, _ in columns:
        table.add_column(title, justify="left" if key in ("backend", "setting") else "right",
                         no_wrap=key != "setting")
    for row in rows:  # a skipped row: its reason as the setting, "-" elsewhere (_cell)
        table.add_row(*[_cell(row, key, fmt) for _, key, fmt in columns])
    return table


def _natural_width(console, table) -> int:
    """The width ``table`` takes when nothing is squeezed (its caption
    aside, which wraps)."""
    caption, table.caption = table.caption, None
    try:
        return console.measure(table, options=console.options.update_width(10_000)).maximum
    finally:
        table.caption = caption


def _cell(row: dict, key: str, fmt: str) -> str:
    if key == "range":
        return f"{row['min']:,.0f} - {row['max']:,.0f}" if "min" in row else "-"
    if key == "setting" and "skipped" in row:
        return f"skipped: {row['skipped']}"
    return fmt.format(row[key]) if row.get(key) is not None else "-"


def _printed(rows: list[dict], columns) -> list:
    """The columns a table prints: a ratio column ("vs ...") only where its
    reference ran (some row has a value in it)."""
    return [c for c in columns if not c[1].startswith("vs_")
            or any(row.get(c[1]) is not None for row in rows)]


def _legend(rows: list[dict], columns=None) -> str:
    """What the table's rows and columns mean, for the rows it has and the
    ``columns`` it prints (default ``_MAIN_COLUMNS``)."""
    names = {row["backend"] for row in rows}
    printed = [key for _, key, _ in _printed(rows, columns or _MAIN_COLUMNS)]
    first = "Higher is better. Median over bursts; range: the slowest and fastest burst."
    if "vs_envpool_mode" in printed:
        first += (" The vs columns are ratios of medians (vs EnvPool, same mode: a "
                  "synchronous row to EnvPool's synchronous row, an asynchronous one "
                  "(-async, -double, -ordered) to EnvPool's async row).")
    elif any(key.startswith("vs_") for key in printed):
        first += " The vs columns are ratios of medians."
    parts = [first]
    ceilings = []
    if names & {"ceiling", "ceiling-fast", "ceiling-sync"}:
        fast = any(n.startswith("shmatari") and not n.endswith("-ale-reset") for n in names)
        ceilings.append("ceiling: the same envs stepped in one process per core with no IPC at "
                        "all and ALE's own reset, the bound for any vector env that resets as "
                        "ALE does" + (" (shmatari's rows start new games with its fast resets, "
                                      "where proven to change no bit, so they can pass it)"
                                      if fast else ""))
    if names & {"ceiling-fast", "ceiling-sync"}:
        ceilings.append("ceiling-fast: the same with shmatari's fast resets (fast_reset='auto', "
                        "where proven exact)")
    if "ceiling-sync" in names:
        ceilings.append("ceiling-sync: ceiling-fast's processes meeting at a polling barrier "
                        "after every round, what a synchronous pool with those resets could "
                        "reach if its signalling were free")
    if any(n.endswith("-ale-reset") for n in names):
        ceilings.append("-ale-reset rows: shmatari with fast_reset='off'")
    if ceilings:
        parts.append("; ".join(ceilings) + ".")
    pipes = []  # only the rows shown (a newcomer's pass)
    if "pipe" in names:
        pipes.append("pipe: the classic baseline (one process per env, pickled over pipes, "
                     "OpenCV preprocessing)")
    if "pipe-kernel" in names:
        pipes.append("pipe-kernel: the classic baseline with shmatari's kernel")
    if pipes:
        parts.append("; ".join(pipes) + ".")
    return "\n".join(parts)


_POLICY_LEGEND = (
    "env steps/s inside a loop that runs a Nature-CNN forward pass (torch, CPU, 1 thread) on "
    "each batch; policy share: the loop's time spent in it.\nshmatari-double, "
    "shmatari-ordered and envpool-async: two halves, one steps while the policy runs on the "
    "other's batch (shmatari-ordered: batch_order='fixed', the halves alternate, so a "
    "training run replays).")

_MAIN_COLUMNS = (("backend", "backend", "{}"), ("setting", "setting", "{}"),
                 ("env steps/s", "env_steps_per_s", "{:,.0f}"),
                 ("range", "range", ""), ("vs pipe", "vs_pipe", "{:.2f}x"),
                 ("vs EnvPool, same mode", "vs_envpool_mode", "{:.2f}x"),
                 ("vs ceiling", "vs_ceiling", "{:.2f}x"),
                 ("vs ceiling-fast", "vs_ceiling_fast", "{:.2f}x"),
                 ("vs ceiling-sync", "vs_ceiling_sync", "{:.2f}x"))
#: the sweep's: the rate and its ratios to the ceilings (picked by key)
_SWEEP_COLUMNS = _MAIN_COLUMNS[:4] + tuple(
    c for c in _MAIN_COLUMNS if c[1] in ("vs_ceiling", "vs_ceiling_fast", "vs_ceiling_sync"))
_POLICY_COLUMNS = (("backend", "backend", "{}"), ("setting", "setting", "{}"),
                   ("env steps/s", "env_steps_per_s", "{:,.0f}"),
                   ("range", "range", ""), ("policy share", "policy_share", "{:.0%}"),
                   ("vs EnvPool, same mode", "vs_envpool_mode", "{:.2f}x"))
_NULL_COLUMNS = (("backend", "backend", "{}"), ("setting", "setting", "{}"),
                 ("median us/round trip", "median_us", "{:.1f}"), ("p99 us", "p99_us", "{:.1f}"),
                 ("round trips/s", "round_trips_per_s", "{:,.0f}"),
                 ("pipe / shmatari", "pipe_over_shmatari", "{:.1f}x"))


def plot_sweep(report: dict, path: str) -> None:
    """Env steps/s against num_envs, a line per backend and the ceiling, as PNG
    (or the format ``path``'s extension names).

    Raises:
        PermissionError: another user's link on the way
            (:func:`shmatari._cli.resolve_output_path`).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list] = {}
    for row in report["results"]:
        if "env_steps_per_s" in row:
            series.setdefault(row["backend"], []).append((row["num_envs"], row["env_steps_per_s"]))
    fig, ax = plt.subplots(figsize=(8.5, 4.5), dpi=120)
    ceiling_lines = {"ceiling": "--", "ceiling-fast": "-.", "ceiling-sync": ":"}
    for name, pts in series.items():
        xs, ys = zip(*sorted(pts))
        style = dict(color="black", linestyle=ceiling_lines.get(name, "--"), linewidth=1.5) \
            if name in CEILINGS else \
            dict(marker="o", linewidth=2 if name.startswith("shmatari") else 1.2)
        ax.plot(xs, ys, label=name, **style)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("num_envs")
    ax.set_ylabel("env steps / s (frames / s = 4x)")
    m = report["machine"]
    ax.set_title(f"{report['game']}: {m['cores']} cores, {m['cpu_model']}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the lines
    fig.tight_layout()
    ext = os.path.splitext(path)[1]
    try:  # written whole, through the path as it is now (_cli.write_output)
        _cli.write_output(path, lambda f: fig.savefig(f, format=ext[1:] or None), ext)
    finally:
        plt.close(fig)


def _print_report(args, report: dict, note: str | None = None) -> None:
    """The report's table on stdout, ``note`` (the busy-machine warning, or
    None) right under it, and the sweep's plot."""
    m, n = report["machine"], _b.plural(args.num_envs, "env")
    done = sorted({r["rounds"] for r in report["results"] if r.get("rounds")})
    dropped = report.get("dropped_bursts", 0)
    if not report.get("interrupted"):
        how = f"median of {_b.plural(args.rounds, 'burst')}"
    elif not done:
        how = "interrupted before any burst"
    elif len(done) == 1:
        how = (f"interrupted: median of the {_b.plural(done[0], 'burst')} done"
               if args.interleave else
               f"interrupted: median of {_b.plural(done[0], 'burst')} a row")
    else:  # backend after backend, or no round complete: per row
        how = f"interrupted: median of {done[0]} to {_b.plural(done[-1], 'burst')} a row"
    how += f" of {args.seconds:g} s" + (", interleaved" if args.interleave
                                         else ", backend after backend")
    if dropped:
        how += f" ({_b.plural(dropped, 'burst')} of the round cut short left out)"
    where = f"{_b.plural(m['cores'], 'core')} ({m['cpu_model']}), {how}"
    options = report["config"].get("options")  # none in a null run's config
    if options is not None:
        game = f"{report['game']} (sticky actions {options['repeat_action_probability']:g})"
    if report["kind"] == "null":
        _print_table(report["results"], f"shmatari-bench --env null: round trip, "
                     f"{_b.plural(m['cores'], 'core')}, {args.seconds:g} s each", _NULL_COLUMNS)
    elif report["kind"] == "sweep":
        skipped = "; ".join(f"{k}: {v}" for k, v in report["skipped"].items())
        _print_table(report["results"], f"shmatari-bench --sweep: {game}, {where}",
                     _SWEEP_COLUMNS, _legend(report["results"], _SWEEP_COLUMNS)
                     + (f"\nskipped at every size: {skipped}" if skipped else ""))
    elif report["kind"] == "policy":
        _print_table(report["results"], f"shmatari-bench --policy: {game}, {n}, "
                     f"{where}", _POLICY_COLUMNS, _POLICY_LEGEND)
    else:
        _print_table(report["results"], f"shmatari-bench: {game}, {n}, {where}",
                     _MAIN_COLUMNS, _legend(report["results"]))
    if note:
        print(note, flush=True)
    if report["kind"] == "sweep" and report["results"]:
        plot = args.plot or "shmatari-sweep.png"
        try:
            plot_sweep(report, plot)
            print(f"plot: {plot}")
        except ImportError:
            print("matplotlib is not installed: no plot (pip install matplotlib)",
                  file=sys.stderr)
