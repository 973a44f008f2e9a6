"""``shmatari-bench``: env steps per second, shmatari against its peers, side by side.

Every backend steps the same game with the same work per step (ALE v5 options:
frame_skip 4, sticky actions 0.25, up to 30 no-ops, 84x84 grayscale, max-pool,
a stack of 4; no episodic life, no reward clipping, no fire reset) under
uniformly random actions (one fixed table) from envs seeded with ``--seed``
(0 by default). ``--repeat-action-probability 0`` turns sticky
actions off on every backend (the Nature DQN's and EnvPool's default).
Optional peers appear when installed: EnvPool, ale-py's ``AtariVectorEnv``
and Gymnasium's ``AsyncVectorEnv(shared_memory=True)`` with
``AtariPreprocessing`` and ``FrameStackObservation``. ``pipe`` is the
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
``-ale-reset`` rows are shmatari with ``fast_reset="off"``.
``ceiling-sync`` is ceiling-fast's processes meeting at a barrier after
every round, each env stepped once; its waiters poll, so the barrier itself
costs next to nothing: what a synchronous pool with those resets could reach
if its signalling were free (a barrier still loses whenever one core runs
slower than another). All take their
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
bursts; in an interleaved run, the rounds that every backend finished, the
bursts of the round cut short left out and counted in the JSON's
``dropped_bursts``) is printed and written to ``--json``; the exit status is then 130
(143 after SIGTERM, which stops it the same way). A shell's background job
(``cmd &`` in a script) starts with SIGINT ignored: stop one with SIGTERM.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time

import numpy as np

from . import _bench_backends as _b, _cli, config as _config, games as _games
from ._bench_backends import BACKENDS, CEILINGS, POLICY_BACKENDS
from ._bench_report import (OtherLoad, Series, _print_report, _rows, _summary,  # noqa: F401
                            busy_warning, few_rounds_note, machine_info,
                            plot_sweep)  # (plot_sweep: re-exported)
from ._progress import Progress

__all__ = ["main", "run", "machine_info"]

#: The largest num_envs of ``--sweep`` unless ``--max-envs`` says otherwise.
SWEEP_MAX_ENVS = 64


def _open(name: str, cfg, batch_size: int, policy_for):
    if name in CEILINGS:
        return _b.Ceiling(cfg, fast_reset=name != "ceiling",
                          barrier=name == "ceiling-sync")
    runner = _b.open_backend(name, cfg, batch_size)
    if policy_for is not None:
        runner.policy = policy_for(runner.n_actions)
    return runner


def _run_point(args, progress, wanted, num_envs: int,
               label: str = "") -> tuple[list, bool, int]:
    """Every wanted backend at one ``num_envs``; returns the series (in
    :data:`BACKENDS` order, the ceiling last), whether Ctrl-C cut it short
    and, if it did (interleaved), how many bursts of the round it cut were
    left out (:func:`_keep_complete_rounds`)."""
    workers = min(num_envs, args.num_workers or _config.available_cores())
    cfg = _config.build_config(args.game, num_envs, num_workers=workers, seed=args.seed,
                               start_method=args.start_method,
                               **_b.options(args.repeat_action_probability))
    batch_size = min(num_envs, args.batch_size or max(1, num_envs // 2))
    order = [b for b in (POLICY_BACKENDS if args.policy else BACKENDS) if b in wanted]
    order += [c for c in CEILINGS if c in wanted]
    series = {}
    for name in order:
        series[name] = Series(name, "", num_envs)
        series[name].skipped = _b.peer_available(name)
        if name in CEILINGS:
            series[name].setting = _b.plural(workers, "process", "processes") + ", no IPC" + (
                ", ALE's reset" if name == "ceiling" else ", fast resets") + (
                ", a barrier per round" if name == "ceiling-sync" else "")
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
        if runner is not None and _b.close_all([runner]):
            raise KeyboardInterrupt  # held back while it closed

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
                if _b.close_all([opened.pop(s.backend)] if s.backend in opened else []):
                    raise KeyboardInterrupt  # held back while it closed
    except KeyboardInterrupt:
        interrupted = True
    finally:
        interrupted = _b.close_all(list(opened.values())) or interrupted
    dropped = _keep_complete_rounds(runnable) if interrupted and args.interleave else 0
    return list(series.values()), interrupted, dropped


def _keep_complete_rounds(series: list) -> int:
    """After a Ctrl-C: the bursts of the round it cut, left out of every
    series that ran, so that each row's median is over the same rounds (the
    interleaving's point; a cut round gave some rows one burst more than
    others, and the header spoke of the most: a newcomer's pass). Series
    that failed are ignored. Nothing is left out where no round was
    complete (each row then has the one burst, or none, of the first
    round). Returns how many bursts were left out."""
    ran = [s for s in series if not s.skipped]
    rounds = [{b["round"] for b in s.bursts} for s in ran]
    complete = set.intersection(*rounds) if rounds else set()
    if not complete:
        return 0
    dropped = 0
    for s in ran:
        kept = [b for b in s.bursts if b["round"] in complete]
        dropped += len(s.bursts) - len(kept)
        s.bursts[:] = kept
    return dropped


def _time_null(name: str, num_envs: int, args, tick) -> tuple[Series, bool]:
    """Round-trip latency of synchronous steps of the null env, and whether
    a Ctrl-C came (held back) while its pool closed."""
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
        series = Series(name, setting, num_envs,
                        [{"round": 0, "env_steps": len(lat) * num_envs, "seconds": now - t0}],
                        extra={"round_trips": len(lat),
                               "median_us": round(float(np.median(lat_us)), 2),
                               "p99_us": round(float(np.percentile(lat_us, 99)), 2)})
    finally:
        held = _b.close_all([runner])
    return series, held


def _run_null(args, progress) -> tuple[list, bool]:
    n = args.num_workers or _config.available_cores()
    results, interrupted = [], False
    try:
        for name in ("shmatari", "pipe"):
            for k in sorted({1, n}):
                bar = progress.bar(1, f"bursts {name} null x{k}")
                series, held = _time_null(name, k, args, lambda t: bar.update(
                    min(1.0, t / args.seconds), f"{name} null x{k}"))
                results.append(series)
                bar.finish_one()
                if held:  # a Ctrl-C while its pool closed: stop, its row kept
                    raise KeyboardInterrupt
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


def _report(args, kind: str, load: OtherLoad, **body) -> dict:
    machine = {**machine_info(), "other_cpu_share": load.share()}
    if kind == "null":  # what a null run uses: one burst per setting, nothing emulated
        config = {"num_workers": args.num_workers, "seconds": args.seconds,
                  "warmup": args.warmup, "start_method": args.start_method}
    else:
        config = {"num_envs": args.num_envs, "num_workers": args.num_workers,
                  "batch_size": args.batch_size, "seconds": args.seconds,
                  "warmup": args.warmup, "rounds": args.rounds,
                  "interleave": args.interleave, "policy": args.policy,
                  "start_method": args.start_method, "max_envs": args.max_envs,
                  "seed": args.seed, "options": _b.options(args.repeat_action_probability)}
    return {"benchmark": "shmatari-bench", "kind": kind, "game": args.game,
            "config": config, "machine": machine,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **body}


def _wanted(args) -> list[str]:
    known = POLICY_BACKENDS if args.policy else BACKENDS + CEILINGS
    if not args.backends:
        return list(known)
    return [b.strip() for b in args.backends.split(",") if b.strip()]


def run(args) -> dict:
    """Runs the benchmark described by parsed ``args``; returns the report
    (``report["interrupted"]`` is True if Ctrl-C cut it short)."""
    load = OtherLoad()
    with Progress(not args.quiet, "shmatari-bench") as progress:
        if args.env == "null":
            rows, interrupted = _run_null(args, progress)
            return _report(args, "null", load, game="null", results=rows,
                           interrupted=interrupted)
        wanted = _wanted(args)
        if args.sweep:
            points, n = [], 1
            while n <= args.max_envs:
                points.append(n)
                n *= 2
            rows, skipped, interrupted, dropped = [], {}, False, 0
            for n in points:
                series, interrupted, dropped = _run_point(args, progress, wanted, n,
                                                          f" @{n}")
                for s in series:
                    # a backend this machine cannot run (not installed, or an
                    # EnvPool too old), not one that failed at a point
                    if s.skipped and s.skipped == _b.peer_available(s.backend):
                        skipped[s.backend] = s.skipped
                rows += [r for r in _rows(series, _b.OPTIONS["frame_skip"])
                         if r["backend"] not in skipped]
                if interrupted:
                    break
            return _report(args, "sweep", load, results=rows, skipped=skipped,
                           interrupted=interrupted, dropped_bursts=dropped,
                           sweep_num_envs=points)
        series, interrupted, dropped = _run_point(args, progress, wanted, args.num_envs)
        return _report(args, "policy" if args.policy else "single", load,
                       results=_rows(series, _b.OPTIONS["frame_skip"]),
                       summary=_summary(series, args.policy), interrupted=interrupted,
                       dropped_bursts=dropped)


def _word_hint(word: str, argv: list) -> str | None:
    """A bare word's hint: a backend's name (``--backends shmatari envpool``)
    or a game's (:func:`_cli.game_word_hint`)."""
    names = [b for b in word.split(",") if b]
    if names and all(b in (*BACKENDS, *CEILINGS) for b in names):
        return "--backends takes one comma-separated list, e.g. --backends shmatari,envpool"
    return _cli.game_word_hint(word, argv)


def _parser() -> argparse.ArgumentParser:
    cores = _config.available_cores()
    doc = _cli.doc_parts(__doc__)
    p = _cli.ArgumentParser(prog="shmatari-bench", description=doc[0],
                                formatter_class=_cli.HelpFormatter, allow_abbrev=False,
                                epilog="\n\n".join(doc[1:]).strip() or None)
    _cli.add_version(p)
    p.word_hint = _word_hint
    p.add_argument("--game", default="Breakout", help="game to step")
    p.add_argument("--env", choices=("atari", "null"), default="atari",
                   help="'null': measure the round trip alone with the built-in null env")
    p.add_argument("--num-envs", type=_cli.positive_int, default=4 * cores,
                   help="envs per backend, by default 4 per core available")
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
    p.add_argument("--repeat-action-probability", type=_cli.probability, default=None,
                   metavar="P",
                   help="sticky actions: the probability that each emulated frame repeats the "
                        "previous action (ALE's own), on every backend; 0 as in the Nature "
                        "DQN, SB3's AtariWrapper and EnvPool's default (default: 0.25, ALE v5)")
    p.add_argument("--seed", type=_cli.nonnegative_int, default=0,
                   help="seed of every backend's envs (shmatari's pool seed, EnvPool's and "
                        "Gymnasium's seed; below 2**31); the random actions are one fixed "
                        "table whatever the seed")
    p.add_argument("--backends", default=None,
                   help=f"comma-separated subset of {','.join(BACKENDS + CEILINGS)} (with "
                        f"--policy: of {','.join(POLICY_BACKENDS)}) (default: all)")
    p.add_argument("--start-method", default=None, choices=_config.START_METHODS,
                   help=f"how shmatari and the pipe baselines start processes (default: "
                        f"{_config.default_start_method()})")
    p.add_argument("--sweep", action="store_true",
                   help="num_envs = 1, 2, 4, ... --max-envs for every backend")
    p.add_argument("--max-envs", type=_cli.positive_int, default=None,
                   help="with --sweep: num_envs runs through the powers of two up to this "
                        f"(default: {SWEEP_MAX_ENVS})")
    p.add_argument("--plot", metavar="FILE", default=None,
                   help="with --sweep: write the PNG plot here (default shmatari-sweep.png)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the report as JSON")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr: neither the bars (on a terminal, with rich) "
                        "nor the lines that replace them elsewhere ('opening BACKEND ...', "
                        "'BACKEND, round i/N ...'); the table, the busy-machine warning and "
                        "errors are printed still")
    return p


def _check_args(parser, args) -> None:
    """Every usage error, before anything starts (``parser.error``: exit 2)."""
    if args.policy and (args.env == "null" or args.sweep):
        parser.error("--policy runs alone: not with --env null or --sweep")
    if args.sweep and args.env == "null":
        parser.error("--sweep does not apply to --env null, which times one round trip")
    if args.max_envs is not None and not args.sweep:
        parser.error("--max-envs goes with --sweep")
    if args.seed >= 2**31:  # EnvPool takes an int32, ale-py's vector env reset() an int
        parser.error(f"--seed must be below 2**31 = {2**31}, as EnvPool's and ale-py's "
                     f"seeds are (got {args.seed})")
    if args.sweep and args.max_envs is None:
        args.max_envs = SWEEP_MAX_ENVS
    if args.env == "null" and args.backends is not None:
        parser.error("--backends does not apply to --env null, which times shmatari's and "
                     "the pipe baseline's round trips")
    if args.env == "null" and args.repeat_action_probability is not None:
        parser.error("--repeat-action-probability does not apply to --env null, which "
                     "emulates nothing")
    if args.env == "null":
        # --rounds and --no-interleave were taken and ignored (a newcomer's
        # pass, 2026-12-06): one burst per setting, one backend at a time
        ignored = [flag for flag, dest in (("--game", "game"), ("--num-envs", "num_envs"),
                                           ("--batch-size", "batch_size"),
                                           ("--rounds", "rounds"),
                                           ("--no-interleave", "interleave"))
                   if getattr(args, dest) != parser.get_default(dest)]
        if ignored:
            parser.error(f"{', '.join(ignored)}: not with --env null, which times one burst "
                         f"of synchronous round trips with 1 and with N envs (N: "
                         f"--num-workers, default the cores)")
    if args.policy:
        missing = _b.torch_missing()
        if missing:
            parser.error(missing)
    known = POLICY_BACKENDS if args.policy else BACKENDS + CEILINGS
    if args.backends is not None:
        wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
        unknown = [b for b in wanted if b not in known]
        if unknown or not wanted:
            # each with the closest name, as every other typo gets one (a
            # newcomer's pass: "envpol" said only "unknown")
            close = {u: difflib.get_close_matches(u, known, n=1, cutoff=0.6) for u in unknown}
            hints = "".join(f" (did you mean {close[u][0]!r} for {u!r}?)"
                            for u in unknown if close[u])
            parser.error(f"--backends: unknown backend(s) {', '.join(unknown) or '(none given)'}"
                         f"{hints}; choose from {','.join(known)}")
        twice = sorted({b for b in wanted if wanted.count(b) > 1}, key=wanted.index)
        if twice:  # each backend is one row, opened once
            parser.error(f"--backends: {', '.join(twice)} given more than once")
    if args.plot and not args.sweep:
        parser.error("--plot goes with --sweep")
    sizes = [args.num_envs] if not args.sweep else [1, args.max_envs]
    if args.batch_size is not None and not args.sweep and args.batch_size > args.num_envs:
        parser.error(f"--batch-size {args.batch_size} must be <= --num-envs {args.num_envs}")
    if args.num_workers is not None and not args.sweep and args.num_workers > args.num_envs:
        # (as make(), shmatari-check and serve; --sweep caps it at each point's envs)
        parser.error(f"--num-workers {args.num_workers} must be <= --num-envs {args.num_envs}")
    if args.policy and args.num_envs < 2:
        parser.error("--policy needs --num-envs >= 2 (the double-buffered pool has two halves)")
    try:
        if args.env == "atari" and _games.legacy_id(args.game):
            # warned once, here; the runs and the report name the game itself (a
            # newcomer's pass: the warning came twice, and the table was titled
            # "BreakoutNoFrameskip-v4 (sticky actions 0.25)")
            args.game = _games.resolve_game(args.game)
        for n in sizes:
            workers = min(n, args.num_workers or _config.available_cores())
            _config.build_config(args.game if args.env == "atari" else _config.NULL_ENV, n,
                                 num_workers=workers, seed=args.seed,
                                 start_method=args.start_method)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    _cli.check_output_path(parser, "--json", args.json)
    _cli.check_output_path(parser, "--plot", args.plot or ("shmatari-sweep.png" if args.sweep
                                                           else None))


def main(argv=None) -> int:
    """The ``shmatari-bench`` console script; returns the exit status (0; 2
    on bad arguments; 130 after Ctrl-C, 143 after SIGTERM, with what finished
    printed and written)."""
    parser = _parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    with _cli.survive_closed_stdout():
        return _main(args)


def _main(args) -> int:
    try:
        with _cli.stop_on_sigterm():
            report = run(args)
    except KeyboardInterrupt:  # between two runs' own handlers
        print("shmatari-bench: interrupted", file=sys.stderr)
        return _cli.interrupted_status()
    warning = busy_warning(report["machine"]["other_cpu_share"], report["machine"]["cpu_count"])
    notes = [n for n in (few_rounds_note(report), warning) if n]
    # under the table, where it is read
    _print_report(args, report, note="\n".join(notes) or None)
    if warning and not _cli.same_output(sys.stdout, sys.stderr):
        # and on stderr, after the progress lines, as before; once where
        # both streams reach one terminal or file (a newcomer saw it twice)
        print(warning, file=sys.stderr)
    if args.json:
        _cli.write_json(args.json, report)
    if report.get("interrupted"):
        print("shmatari-bench: interrupted; the table holds the bursts that finished",
              file=sys.stderr)
        return _cli.interrupted_status()
    return 0


if __name__ == "__main__":
    sys.exit(main())
