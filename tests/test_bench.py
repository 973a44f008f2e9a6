"""shmatari-bench runs end to end and reports what it measured."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_bench_cli_reports_every_requested_backend(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "shmatari.bench", "--seconds", "0.5", "--warmup", "0.2",
         "--num-envs", "4", "--backends", "shmatari,pipe,ceiling", "--quiet",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    rows = {r["backend"]: r for r in report["results"]}
    assert set(rows) == {"shmatari", "pipe", "ceiling"}
    for row in rows.values():
        assert row["env_steps_per_s"] > 0
        assert row["frames_per_s"] == pytest.approx(4 * row["env_steps_per_s"], rel=1e-3)
    assert rows["pipe"]["vs_pipe"] == 1.0
    assert report["machine"]["cores"] >= 1 and report["machine"]["versions"]["ale-py"]
    assert "shmatari" in proc.stdout and "env steps/s" in proc.stdout


def test_bench_rejects_unknown_backends():
    proc = subprocess.run([sys.executable, "-m", "shmatari.bench", "--backends", "nope",
                           "--quiet"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "unknown backend" in proc.stderr
