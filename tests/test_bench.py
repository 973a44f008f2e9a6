"""shmatari-bench runs end to end and reports what it measured."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("no_leaks")


def _bench(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "shmatari.bench", "--seconds", "0.4",
                           "--warmup", "0.1", "--quiet", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_bench_reports_every_requested_backend(tmp_path):
    out = tmp_path / "bench.json"
    proc = _bench("--num-envs", "4", "--batch-size", "2",
                  "--backends", "shmatari,shmatari-async,pipe,ceiling", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    rows = {r["backend"]: r for r in report["results"]}
    assert set(rows) == {"shmatari", "shmatari-async", "pipe", "ceiling"}
    for row in rows.values():
        assert row["env_steps_per_s"] > 0
        assert row["frames_per_s"] == pytest.approx(4 * row["env_steps_per_s"], rel=1e-3)
    assert rows["pipe"]["vs_pipe"] == 1.0 and rows["ceiling"]["vs_ceiling"] == 1.0
    assert "batch 2" in rows["shmatari-async"]["setting"]
    assert report["machine"]["cores"] >= 1 and report["machine"]["versions"]["ale-py"]
    assert "shmatari" in proc.stdout and "env steps/s" in proc.stdout


def test_null_env_round_trip_report(tmp_path):
    out = tmp_path / "null.json"
    proc = _bench("--env", "null", "--num-workers", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["results"]
    assert {(r["backend"], r["num_envs"]) for r in rows} == {
        ("shmatari", 1), ("shmatari", 2), ("pipe", 1), ("pipe", 2)}
    for r in rows:
        assert 0 < r["median_us"] <= r["p99_us"]
        assert r["round_trips"] > 10
    assert all("pipe_over_shmatari" in r for r in rows if r["backend"] == "pipe")


def test_sweep_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    proc = _bench("--sweep", "--max-envs", "2", "--backends", "shmatari,ceiling",
                  "--json", str(out), "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["results"]
    assert {(r["backend"], r["num_envs"]) for r in rows} == {
        ("shmatari", 1), ("shmatari", 2), ("ceiling", 1), ("ceiling", 2)}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_rejects_unknown_backends():
    proc = _bench("--backends", "nope", timeout=60)
    assert proc.returncode != 0
    assert "unknown backend" in proc.stderr
