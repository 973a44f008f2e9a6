"""shmatari-bench runs end to end and reports what it measured."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("no_leaks")

FAST = ("--seconds", "0.2", "--warmup", "0.05", "--quiet")


def _bench(*args, timeout=300):
    rounds = () if "null" in args else ("--rounds", "2")  # a null run takes no --rounds
    return subprocess.run([sys.executable, "-m", "shmatari.bench", *FAST, *rounds, *args],
                          capture_output=True, text=True, timeout=timeout)


def test_interleaved_bench_keeps_every_burst_and_compares_medians(tmp_path):
    out = tmp_path / "bench.json"
    proc = _bench("--num-envs", "4", "--batch-size", "2",
                  "--backends", "shmatari,shmatari-async,pipe,ceiling", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["config"]["interleave"] is True and report["config"]["rounds"] == 2
    assert report["interrupted"] is False
    rows = {r["backend"]: r for r in report["results"]}
    assert set(rows) == {"shmatari", "shmatari-async", "pipe", "ceiling"}
    for row in rows.values():
        rates = [b["env_steps"] / b["seconds"] for b in row["bursts"]]
        assert [b["round"] for b in row["bursts"]] == [0, 1]
        assert min(rates) > 0
        # the row's figure is the median of its bursts, its spread their range
        assert row["env_steps_per_s"] == pytest.approx(sorted(rates)[0] / 2 + sorted(rates)[1] / 2,
                                                       rel=1e-3)
        assert row["min"] == pytest.approx(min(rates), rel=1e-3)
        assert row["max"] == pytest.approx(max(rates), rel=1e-3)
        assert row["frames_per_s"] == pytest.approx(4 * row["env_steps_per_s"], rel=1e-3)
        assert row["vs_pipe"] == pytest.approx(
            row["env_steps_per_s"] / rows["pipe"]["env_steps_per_s"], rel=1e-2)
    assert rows["pipe"]["vs_pipe"] == 1.0 and rows["ceiling"]["vs_ceiling"] == 1.0
    assert "batch 2" in rows["shmatari-async"]["setting"]
    assert report["machine"]["cores"] >= 1 and report["machine"]["versions"]["ale-py"]
    assert "shmatari" in proc.stdout and "env steps/s" in proc.stdout
    assert "interleaved" in proc.stdout
    # two bursts: under the table, the note that they rank nothing
    table_end = proc.stdout.rindex("env steps/s")
    assert "shmatari-bench: 2 bursts per backend: too few to rank backends" in \
        " ".join(proc.stdout[table_end:].split())


def test_a_ctrl_c_while_a_backend_closes_is_held_back_and_reported():
    """``close_all`` ignored a Ctrl-C while it closed the backends: a bench
    stopped then went on with its next backend (``--no-interleave``), or,
    stopped while its last one closed, reported ``"interrupted": false``.
    It now holds the Ctrl-C back until every backend is closed and says it
    came."""
    import os
    import signal
    import time

    from shmatari import _bench_backends as backends
    from shmatari import config

    class SignalsOnClose:  # a Ctrl-C landing while the backends close
        def close(self):
            os.kill(os.getpid(), signal.SIGINT)

    cfg = config.build_config("Breakout", 2, num_workers=1, seed=0)
    runner = backends.open_backend("shmatari", cfg, 2)
    workers = list(runner.env.worker_pids)
    assert backends.close_all([SignalsOnClose(), runner]) is True
    assert runner.env.closed  # closed after the Ctrl-C came, not left open
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert backends.close_all([]) is False
    # A bench started as a background job ignores SIGINT: so does its close.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert backends.close_all([SignalsOnClose()]) is False
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    with pytest.raises(KeyboardInterrupt):  # the handler before is back
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)


def test_the_few_rounds_note_comes_below_three_bursts_only():
    """A newcomer's ``--rounds 2`` table put ceiling-sync above ceiling-fast
    (the bound above the bounded) with nothing said but the busy-machine
    line."""
    from shmatari._bench_report import few_rounds_note

    assert "1 burst per backend" in few_rounds_note(
        {"kind": "main", "results": [{"rounds": 7}, {"rounds": 1}]})
    assert few_rounds_note({"kind": "main", "results": [{"rounds": 3}, {"rounds": 7}]}) is None
    assert few_rounds_note({"kind": "policy", "results": [{"rounds": 2}]})
    assert few_rounds_note({"kind": "null", "results": [{"rounds": 1}]}) is None


def test_fast_reset_rows_sit_beside_the_real_reset_ceiling(tmp_path):
    out = tmp_path / "bench.json"
    proc = _bench("--num-envs", "2", "--rounds", "1", "--backends",
                  "shmatari,shmatari-ale-reset,ceiling,ceiling-fast", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    rows = {r["backend"]: r for r in report["results"]}
    assert list(rows) == ["shmatari", "shmatari-ale-reset", "ceiling", "ceiling-fast"]
    assert "ALE's reset" in rows["ceiling"]["setting"]
    assert "fast resets" in rows["ceiling-fast"]["setting"]
    assert "ALE's reset" in rows["shmatari-ale-reset"]["setting"]
    assert rows["ceiling-fast"]["vs_ceiling_fast"] == 1.0 and rows["ceiling"]["vs_ceiling"] == 1.0
    assert "shmatari_vs_ceiling_fast" in report["summary"]
    assert report["config"]["options"]["fast_reset"] == "auto"
    # neither pipe nor EnvPool ran: no columns of ratios to them
    assert "vs ceiling-fast" in proc.stdout
    assert "vs pipe" not in proc.stdout and "vs EnvPool" not in proc.stdout


def test_sticky_actions_are_set_on_every_backend(tmp_path):
    """--repeat-action-probability reaches shmatari, the pipe baseline, the
    ceilings and the peers alike (each asked back through its own API
    where it has one), and the report and its title say it."""
    from shmatari import _bench_backends as b, config as _config

    out = tmp_path / "bench.json"
    proc = _bench("--num-envs", "2", "--rounds", "1", "--repeat-action-probability", "0",
                  "--backends", "shmatari,pipe,ceiling", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["config"]["options"]["repeat_action_probability"] == 0.0
    assert "(sticky actions 0)" in proc.stdout

    cfg = _config.build_config("Breakout", 2, num_workers=1, seed=0, **b.options(0.0))
    assert b.options()["repeat_action_probability"] == 0.25 and b.OPTIONS == b.options(0.25)
    seen = {}
    for name in ("shmatari", "pipe", "envpool", "gymnasium"):
        if b.peer_available(name):
            continue
        runner = b.open_backend(name, cfg, 1)
        try:
            env = runner.env
            seen[name] = (env.spec.config.repeat_action_probability if name == "envpool"
                          else env.get_attr("spec")[0].kwargs["repeat_action_probability"]
                          if name == "gymnasium" else env.config.repeat_action_probability)
        finally:
            runner.close()
    assert seen and set(seen.values()) == {0.0}, seen
    ceiling = b.Ceiling(cfg)
    try:
        assert ceiling.config.repeat_action_probability == 0.0
    finally:
        ceiling.close()


def test_the_seed_reaches_every_backend(tmp_path):
    """--seed (default 0) seeds shmatari, the pipe baseline, the ceilings and
    EnvPool alike (each asked back through its own API), and the report
    records it."""
    from shmatari import _bench_backends as b, config as _config

    out = tmp_path / "bench.json"
    proc = _bench("--num-envs", "2", "--rounds", "1", "--seed", "7",
                  "--backends", "shmatari,ceiling", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["config"]["seed"] == 7
    for seed in ("-1", str(2**31)):  # EnvPool takes an int32 (a review, 2026-12-06)
        bad = _bench("--seed", seed)
        assert bad.returncode == 2 and "--seed" in bad.stderr, bad.stderr
    cfg = _config.build_config("Breakout", 2, num_workers=1, seed=7, **b.options())
    seen = {}
    for name in ("shmatari", "pipe", "envpool"):
        if b.peer_available(name):
            continue
        runner = b.open_backend(name, cfg, 1)
        try:
            env = runner.env
            seen[name] = env.spec.config.seed if name == "envpool" else env.config.seed
        finally:
            runner.close()
    assert seen and set(seen.values()) == {7}, seen
    ceiling = b.Ceiling(cfg)
    try:
        assert ceiling.config.seed == 7
    finally:
        ceiling.close()


def _report_rows():
    """Rows as the bench makes them: every column filled, one skipped peer."""
    from shmatari import _bench_report as rep

    return rep._rows(_report_series() + [rep.Series("gymnasium", "", 8,
                                                    skipped="not installed")], 4)


def _report_series():
    """The measured series behind :func:`_report_rows`."""
    from shmatari import _bench_report as rep

    series = []
    for k, (name, setting) in enumerate((
            ("shmatari-async-ale-reset", "8 envs, batch 4, 2 workers, ALE's reset"),
            ("pipe", "8 envs, 1 process per env"), ("envpool", "8 envs, 2 threads"),
            ("ceiling", "2 processes, no IPC, ALE's reset"),
            ("ceiling-fast", "2 processes, no IPC, fast resets"),
            ("ceiling-sync", "2 processes, no IPC, fast resets, a barrier per round"))):
        s = rep.Series(name, setting, 8)
        s.bursts = [{"round": r, "env_steps": 1000 * (k + 2) + 7 * r, "seconds": 1.0}
                    for r in range(3)]
        series.append(s)
    return series


@pytest.mark.parametrize("width", [60, 80, 120, 250])
def test_the_table_keeps_every_number_in_a_narrow_terminal(width):
    """Whatever the terminal's width, every rate, range and ratio is printed
    whole (a squeezed table once showed none of them at 80 columns); where
    the table does not fit, the settings go below it."""
    import io
    import re

    from rich.console import Console

    from shmatari import _bench_report as rep

    rows = _report_rows()
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    rep._print_table(rows, "title", rep._MAIN_COLUMNS, rep._legend(rows), console=console)
    text = out.getvalue()
    for row in rows:
        if "skipped" in row:
            assert "skipped: not installed" in text
            continue
        cells = [f"{row['env_steps_per_s']:,.0f}", f"{row['min']:,.0f} - {row['max']:,.0f}"]
        cells += [f"{row[k]:.2f}x" for k in ("vs_pipe", "vs_envpool_mode", "vs_ceiling",
                                             "vs_ceiling_fast", "vs_ceiling_sync")
                  if row.get(k) is not None]  # an async row has no EnvPool async here
        line = next(ln for ln in text.splitlines()
                    if ln.startswith("│") and ln.strip("│ ").startswith(row["backend"] + " "))
        for cell in cells:
            assert re.search(rf"(?<![\d,.]){re.escape(cell)}", line), (cell, line)
        assert row["setting"] in " ".join(text.split())
    for header in ("vs EnvPool, same mode", "vs ceiling-fast", "vs ceiling-sync"):
        assert header in text


def test_the_legend_explains_the_rows_in_the_table():
    from shmatari import _bench_report as rep

    rows = _report_rows()
    full = rep._legend(rows)
    assert "ceiling-sync:" in full and "pipe:" in full and "-ale-reset rows" in full
    assert "vs EnvPool, same mode" in full and "to EnvPool's async row" in full
    only = rep._legend([r for r in rows if r["backend"] in ("envpool", "ceiling")])
    assert "ceiling:" in only and "ceiling-sync" not in only and "pipe:" not in only
    assert "ceiling-fast" not in only and "-ale-reset" not in only
    # shmatari's rows beside the ALE-reset ceiling: the legend says why they
    # can pass it (they read as above their own bound: a newcomer's pass)
    assert "fast resets" not in only and "shmatari's rows start" not in full
    assert "shmatari's rows start new games with its fast resets" in rep._legend(
        rows + [{"backend": "shmatari-async"}])
    ale_only = rep._legend([{"backend": "shmatari-ale-reset"}, {"backend": "ceiling"}])
    assert "shmatari's rows start new games" not in ale_only
    # a row not in the table is not explained (pipe-kernel was, with pipe)
    pipe_only = rep._legend([r for r in rows if r["backend"] in ("pipe", "shmatari")]
                            + [{"backend": "pipe"}])
    assert "pipe:" in pipe_only and "pipe-kernel" not in pipe_only
    # EnvPool not installed: no "vs EnvPool sync" column, and the legend
    # does not explain one (it did)
    no_envpool = rep._rows([s for s in _report_series() if s.backend != "envpool"]
                           + [rep.Series("envpool", "", 8, skipped="not installed")], 4)
    assert all(r.get("vs_envpool") is None and r.get("vs_envpool_mode") is None
               for r in no_envpool)
    assert "EnvPool" not in rep._legend(no_envpool)
    # the sweep's table has no "vs EnvPool sync" column, EnvPool or not
    assert "EnvPool" not in rep._legend(rows, rep._SWEEP_COLUMNS)
    # one backend: no ratio column is printed, and the legend names none
    # (it ended with "The vs columns are ratios of medians.")
    alone = [r for r in rows if r["backend"] == "shmatari"]
    assert not any(k.startswith("vs_") for _, k, _ in rep._printed(alone, rep._MAIN_COLUMNS))
    assert "vs columns" not in rep._legend(alone) and "Higher is better" in rep._legend(alone)
    assert "vs columns are ratios of medians" in full


def test_each_row_is_compared_with_envpool_in_its_own_mode():
    """The table's one EnvPool column compared every row with EnvPool sync,
    so an async row read as beating EnvPool where EnvPool's async row was
    faster (a newcomer's pass): an async row is compared with EnvPool's async
    row, a sync one with EnvPool's sync row; the JSON keeps vs_envpool (to
    EnvPool sync, every row) as before."""
    from shmatari import _bench_report as rep

    series = []
    for name, rate in (("shmatari", 3000), ("shmatari-async", 1500), ("envpool", 1400),
                       ("envpool-async", 2400), ("pipe", 700)):
        s = rep.Series(name, "", 8)
        s.bursts = [{"round": r, "env_steps": rate, "seconds": 1.0} for r in range(3)]
        series.append(s)
    rows = {r["backend"]: r for r in rep._rows(series, 4)}
    assert rows["shmatari-async"]["vs_envpool_mode"] == pytest.approx(1500 / 2400, rel=1e-3)
    assert rows["shmatari-async"]["vs_envpool"] == pytest.approx(1500 / 1400, rel=1e-3)
    assert rows["shmatari"]["vs_envpool_mode"] == pytest.approx(3000 / 1400, rel=1e-3)
    assert rows["envpool-async"]["vs_envpool_mode"] == pytest.approx(1.0)
    assert rows["pipe"]["vs_envpool_mode"] == pytest.approx(700 / 1400, rel=1e-3)


def test_interleaved_rounds_start_one_backend_further_on(tmp_path):
    """Bursts rotate: round r starts with backend r (mod the number open), so
    no backend always runs first after the others' bursts."""
    out = tmp_path / "bench.json"
    proc = _bench("--num-envs", "2", "--rounds", "3", "--backends", "shmatari,pipe",
                  "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    shm, pipe = ([b["start_s"] for b in rows[k]["bursts"]] for k in ("shmatari", "pipe"))
    assert len(shm) == len(pipe) == 3
    assert shm[0] < pipe[0] < pipe[1] < shm[1] < shm[2] < pipe[2]


def test_sequential_mode_still_runs(tmp_path):
    out = tmp_path / "bench.json"
    proc = _bench("--num-envs", "2", "--no-interleave", "--backends", "shmatari,pipe",
                  "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["config"]["interleave"] is False
    assert all(len(r["bursts"]) == 2 for r in report["results"])
    assert "backend after backend" in proc.stdout


def test_summary_gives_the_goal_ratios_as_ratios_of_medians(tmp_path):
    out = tmp_path / "bench.json"
    proc = _bench("--num-envs", "4", "--backends", "shmatari,shmatari-async,envpool,"
                  "envpool-async", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    rows = {r["backend"]: r for r in report["results"]}
    if "skipped" in rows["envpool"]:
        pytest.skip(f"EnvPool: {rows['envpool']['skipped']}")
    goal = report["summary"]["shmatari_vs_envpool_sync"]
    assert goal["ratio_of_medians"] == pytest.approx(
        rows["shmatari"]["env_steps_per_s"] / rows["envpool"]["env_steps_per_s"], rel=1e-2)
    assert goal["per_round"]["rounds"] == 2
    assert goal["per_round"]["min"] <= goal["per_round"]["median"] <= goal["per_round"]["max"]
    assert rows["shmatari"]["vs_envpool"] == pytest.approx(goal["ratio_of_medians"], rel=1e-2)


def test_null_env_round_trip_report(tmp_path):
    out = tmp_path / "null.json"
    proc = _bench("--env", "null", "--num-workers", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    rows = report["results"]
    # only what a null run uses (it listed rounds and the Atari options too)
    assert set(report["config"]) == {"num_workers", "seconds", "warmup", "start_method"}
    assert {(r["backend"], r["num_envs"]) for r in rows} == {
        ("shmatari", 1), ("shmatari", 2), ("pipe", 1), ("pipe", 2)}
    for r in rows:
        assert 0 < r["median_us"] <= r["p99_us"]
        assert r["round_trips"] > 10
    assert all("pipe_over_shmatari" in r for r in rows if r["backend"] == "pipe")
    assert {r["setting"] for r in rows if r["num_envs"] == 1} == {"1 env, 1 worker",
                                                                  "1 env, 1 process"}


def test_sweep_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    proc = _bench("--sweep", "--max-envs", "2", "--backends", "shmatari,ceiling,ceiling-fast",
                  "--json", str(out), "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["results"]
    assert {(r["backend"], r["num_envs"]) for r in rows} == {
        (b, n) for b in ("shmatari", "ceiling", "ceiling-fast") for n in (1, 2)}
    # the ratios to the ceilings that ran, picked by name (not the last column)
    header = next(line for line in proc.stdout.splitlines() if "env steps/s" in line)
    assert "vs ceiling " in header and "vs ceiling-fast" in header
    assert "vs ceiling-sync" not in header
    report = json.loads(out.read_text())
    assert report["sweep_num_envs"] == [1, 2] and report["config"]["max_envs"] == 2
    assert "ceiling-fast: the same with shmatari's fast resets" in " ".join(proc.stdout.split())
    assert {r["setting"] for r in rows if r["num_envs"] == 1} == {
        "1 env, 1 worker", "1 process, no IPC, ALE's reset", "1 process, no IPC, fast resets"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_rejects_unknown_backends():
    proc = _bench("--backends", "nope", timeout=60)
    assert proc.returncode == 2
    assert "unknown backend(s) nope" in proc.stderr and "Traceback" not in proc.stderr


def test_bench_refuses_a_backend_given_twice():
    """Each backend is one row, opened once: a backend listed twice is an
    error naming it (it was dropped silently)."""
    proc = _bench("--backends", "shmatari,ceiling,shmatari", timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--backends: shmatari given more than once" in proc.stderr


def test_the_sync_ceiling_steps_its_processes_in_lock_step(tmp_path):
    """ceiling-sync: every process steps each of its envs once per round and
    waits for the others, so a process with 2 envs and one with 1 run the
    same number of rounds (without the barrier the smaller one runs more,
    about twice as many on an idle machine); the row sits beside the other
    ceilings."""
    from shmatari import _bench_backends as backends, config

    cfg = config.build_config("Breakout", 3, num_workers=2, **backends.OPTIONS)
    sizes = [len(g) for g in cfg.worker_groups()]
    assert sorted(sizes) == [1, 2]
    for barrier in (True, False):
        ceil = backends.Ceiling(cfg, fast_reset=True, barrier=barrier)
        try:
            b = ceil.burst(0.05, 0.3, lambda t: None)
        finally:
            ceil.close()
        rounds = [steps // n for steps, n in zip(b["per_process"], sizes)]
        assert all(steps % n == 0 for steps, n in zip(b["per_process"], sizes))
        if barrier:
            assert rounds[0] == rounds[1] > 0, rounds
        else:  # free-running, the 1-env process runs more rounds
            assert rounds[sizes.index(1)] > rounds[sizes.index(2)], rounds

    out = tmp_path / "bench.json"
    proc = _bench("--num-envs", "2", "--rounds", "1", "--backends",
                  "shmatari,ceiling-fast,ceiling-sync", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    rows = {r["backend"]: r for r in report["results"]}
    assert list(rows) == ["shmatari", "ceiling-fast", "ceiling-sync"]
    assert "fast resets, a barrier per round" in rows["ceiling-sync"]["setting"]
    assert rows["ceiling-sync"]["vs_ceiling_sync"] == 1.0
    assert "shmatari_vs_ceiling_sync" in report["summary"]
    assert "vs ceiling-sync" in proc.stdout and "vs ceiling " not in proc.stdout


@pytest.mark.parametrize("when", ["before", "during"])
def test_a_sync_ceiling_whose_process_dies_fails_the_burst_without_hanging(when):
    """A ceiling-sync process killed before a burst, or in the middle of
    one: the burst raises within about a second, naming the exit codes, and
    its partner stops polling at the barrier at once (the barrier is
    aborted), not after BARRIER_TIMEOUT."""
    import signal
    import threading
    import time

    from shmatari import _bench_backends as backends, config

    cfg = config.build_config("Breakout", 2, num_workers=2, **backends.OPTIONS)
    ceil = backends.Ceiling(cfg, fast_reset=True, barrier=True)
    procs = list(ceil.procs)
    try:
        if when == "before":
            ceil.procs[1].kill()
            ceil.procs[1].join(5)
        else:
            threading.Timer(1.0, ceil.procs[1].kill).start()
        t0 = time.perf_counter()
        with pytest.raises(RuntimeError, match=r"a ceiling process failed: exit codes \[.*-9"):
            ceil.burst(0.0, 20.0, lambda t: None)
        assert time.perf_counter() - t0 < (2.0 if when == "before" else 4.0)
        procs[0].join(3.0)  # the survivor left the barrier (aborted) and ended
        assert procs[0].exitcode is not None
    finally:
        ceil.close()
    assert all(p.exitcode is not None for p in procs)
    assert procs[1].exitcode == -signal.SIGKILL


def test_a_ceiling_process_that_stops_answering_fails_the_burst_at_its_deadline(monkeypatch):
    """A ceiling process stopped (SIGSTOP) neither answers nor dies: the
    burst raises after its warm-up, seconds and ANSWER_SLACK, naming the
    pids, instead of waiting forever."""
    import os
    import signal
    import time

    from shmatari import _bench_backends as backends, config

    monkeypatch.setattr(backends, "ANSWER_SLACK", 1.0)
    cfg = config.build_config("Breakout", 2, num_workers=2, **backends.OPTIONS)
    ceil = backends.Ceiling(cfg, fast_reset=True)
    try:
        os.kill(ceil.procs[0].pid, signal.SIGSTOP)
        t0 = time.perf_counter()
        with pytest.raises(RuntimeError, match="did not answer in time"):
            ceil.burst(0.0, 0.5, lambda t: None)
        assert 1.4 < time.perf_counter() - t0 < 5.0
        os.kill(ceil.procs[0].pid, signal.SIGCONT)
    finally:
        ceil.close()


def test_a_spin_barrier_waiter_alone_times_out(monkeypatch):
    """ceiling-sync's barrier: a process whose partner never arrives raises
    TimeoutError after BARRIER_TIMEOUT instead of polling forever; one
    whose partner has arrived passes at once with the leader's phase."""
    import multiprocessing as mp
    import time

    from shmatari import _bench_backends as backends

    monkeypatch.setattr(backends, "BARRIER_TIMEOUT", 0.3)
    barrier = backends.SpinBarrier(mp.get_context("fork"), 2)
    aborted = backends.SpinBarrier(mp.get_context("fork"), 2)
    aborted.abort()
    with pytest.raises(RuntimeError, match="aborted"):
        aborted.wait(0, 1)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="waited 0.3 s at the barrier"):
        barrier.wait(1, 1)
    assert 0.3 <= time.monotonic() - t0 < 5.0
    # rank 1 has arrived (above); the leader's arrival 1 passes, and rank 1's
    # next look sees the leader's phase for arrival 1
    assert barrier.wait(0, 1, 2) == 2
    assert barrier.wait(1, 1) == 2


def test_bench_says_when_other_processes_kept_the_cores_busy(tmp_path):
    """A process spinning on one core for the whole bench (not one of the
    bench's own): the JSON's machine.other_cpu_share counts it, and the bench
    says on stderr that its figures come from a busy machine (a newcomer's
    pass: a run on a shared machine gave EnvPool ahead of shmatari, and
    nothing said the machine was busy). The bench's own workers and
    ceiling processes are not counted as other load."""
    import psutil

    out = tmp_path / "busy.json"
    log = tmp_path / "both.log"
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        proc = _bench("--num-envs", "2", "--backends", "shmatari,ceiling", "--json", str(out))
        # stdout and stderr into one file (as `> log 2>&1`, or a terminal):
        # the warning once, under the table (it showed twice)
        with open(log, "w") as f:
            both = subprocess.run([sys.executable, "-m", "shmatari.bench", *FAST, "--rounds",
                                   "1", "--num-envs", "2", "--backends", "ceiling"],
                                  stdout=f, stderr=subprocess.STDOUT, timeout=300)
    finally:
        spinner.kill()
        spinner.wait()
    assert proc.returncode == 0, proc.stderr
    share = json.loads(out.read_text())["machine"]["other_cpu_share"]
    cores = psutil.cpu_count()
    # the spinner's core (less what the bench's own processes took from it)
    assert 0.3 / cores <= share <= 1.0, share
    warning = f"other processes kept {share:.0%} of this machine's"
    assert warning in proc.stderr, proc.stderr
    # and right under the table on stdout, where a newcomer reads the figures
    # (on stderr alone it came among the progress lines, and was missed)
    table_end = proc.stdout.rindex("env steps/s")
    assert warning in proc.stdout[table_end:], proc.stdout
    assert warning not in out.read_text()  # the JSON is unchanged: the share only
    text = log.read_text()
    assert both.returncode == 0, text
    assert text.count("other processes kept") == 1, text
    assert text.index("other processes kept") > text.rindex("env steps/s"), text


def test_quiet_silences_the_progress_lines_and_nothing_else(tmp_path):
    """--quiet's help said "no progress bars"; where stderr is not a terminal
    the bench prints a line per step of progress instead, and --quiet
    silences those too, but not the table (its help says so now)."""
    args = ("--num-envs", "2", "--rounds", "1", "--backends", "shmatari")
    loud = subprocess.run([sys.executable, "-m", "shmatari.bench", "--seconds", "0.2",
                           "--warmup", "0.05", *args], capture_output=True, text=True,
                          timeout=300)
    quiet = _bench(*args)
    assert loud.returncode == quiet.returncode == 0, (loud.stderr, quiet.stderr)
    assert "shmatari-bench: opening shmatari ..." in loud.stderr, loud.stderr
    assert "shmatari-bench: shmatari, round 1/1 ..." in loud.stderr, loud.stderr
    assert "opening" not in quiet.stderr and "round" not in quiet.stderr, quiet.stderr
    assert "env steps/s" in quiet.stdout
    help_text = subprocess.run([sys.executable, "-m", "shmatari.bench", "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    assert "'opening BACKEND ...'" in " ".join(help_text.split()), help_text


_PLANTED = """
import os
with open(os.environ["PLANTED_MARKER"], "a") as f:
    f.write(f"{os.getpid()}\\n")
raise ImportError("planted")
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH is Python 3.11's")
def test_a_module_planted_in_the_current_folder_runs_in_no_process_of_the_gymnasium_backend(
        tmp_path):
    """shmatari-bench run from a folder others can write (/tmp), as the
    gymnasium backend alone: its AsyncVectorEnv started the resource tracker,
    the fork server and its workers as ``python -c`` processes outside
    ``atari.child_environment``, whose sys.path begins with the current
    folder, so that a ``multiprocessing`` package planted there ran as the
    user of the bench (test_env's test of the same for shmatari's pools)."""
    import os

    from shmatari._bench_backends import peer_available

    if peer_available("gymnasium"):
        pytest.skip(f"gymnasium backend: {peer_available('gymnasium')}")
    folder = tmp_path / "shared"
    (folder / "multiprocessing").mkdir(parents=True)
    (folder / "multiprocessing" / "__init__.py").write_text(_PLANTED)
    marker = tmp_path / "ran"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    env["PLANTED_MARKER"] = str(marker)
    # A script elsewhere, as the console script is: the bench's own sys.path
    # leaves the folder out (and no -P, which multiprocessing passes on to
    # its children); only the processes it starts could import from it.
    script = tmp_path / "shmatari-bench"
    script.write_text("import sys\nfrom shmatari.bench import main\nsys.exit(main())\n")
    proc = subprocess.run([sys.executable, str(script), *FAST,
                           "--rounds", "1", "--num-envs", "2", "--backends", "gymnasium"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists(), f"the planted module ran in pid(s) {marker.read_text().split()}"


def test_a_burst_updates_the_progress_bar_a_few_times_a_second_not_every_loop():
    """The bench's own work in a burst is the backend's loop: the progress
    bar is updated at most every TICK_SECONDS (as the ceiling's parent does),
    not after every batch, where it took CPU from the workers it measured
    (about 3 us a batch) and not from the ceiling's processes."""
    from shmatari import _bench_backends as backends, config

    cfg = config.build_config(config.NULL_ENV, 2, num_workers=2, seed=0)
    runner = backends.open_backend("shmatari", cfg, 2)
    try:
        ticks = []
        out = runner.burst(0.05, 0.5, ticks.append)
    finally:
        runner.close()
    assert out["env_steps"] // 2 > 200  # loops: the null env steps in microseconds
    assert 1 <= len(ticks) <= 0.5 / backends.TICK_SECONDS + 2
    assert ticks == sorted(ticks) and 0 <= ticks[0] and ticks[-1] <= out["seconds"]


def test_a_legacy_game_id_warns_once_and_the_report_names_the_game(tmp_path):
    """``--game BreakoutNoFrameskip-v4`` warned twice (the arguments' check,
    then the run) and titled the table "BreakoutNoFrameskip-v4 (sticky
    actions 0.25)", a name that stands for no sticky actions (a newcomer's
    pass). It warns once now, and the report names the game."""
    out = tmp_path / "bench.json"
    proc = _bench("--game", "BreakoutNoFrameskip-v4", "--num-envs", "2", "--rounds", "1",
                  "--backends", "shmatari", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("names Gym's legacy conventions (no frame skip, no sticky "
                             "actions)") == 1, proc.stderr
    assert json.loads(out.read_text())["game"] == "breakout"
