"""shmatari-bench --policy: a Nature-CNN forward pass (torch, CPU, one thread)
on every batch, in the same interleaved rotation as the plain bench."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_policy_bench_measures_every_backend_with_the_policy_in_the_loop(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("envpool")
    out = tmp_path / "policy.json"
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from shmatari.bench import main; sys.exit(main())",
         "--policy", "--num-envs", "4", "--seconds", "0.3", "--warmup", "0.1", "--rounds", "2",
         "--quiet", "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(out.read_text())
    assert report["kind"] == "policy" and report["config"]["policy"] is True
    rows = {r["backend"]: r for r in report["results"]}
    assert list(rows) == ["shmatari", "shmatari-double", "shmatari-ordered", "envpool",
                          "envpool-async"]
    for row in rows.values():
        assert "skipped" not in row, row
        assert len(row["bursts"]) == 2 and row["env_steps_per_s"] > 0
        # the policy ran on every batch, and took part of the loop's time, not all of it
        assert all(0 < b["policy_seconds"] < b["seconds"] for b in row["bursts"])
        assert 0 < row["policy_share"] < 1
        assert "Nature CNN" in row["setting"]
    assert "2 halves of 2, first ready" in rows["shmatari-double"]["setting"]
    assert "2 halves of 2, fixed order" in rows["shmatari-ordered"]["setting"]
    assert "batch 2" in rows["envpool-async"]["setting"]
    summary = report["summary"]
    assert summary["shmatari_double_vs_envpool_sync"]["ratio_of_medians"] == pytest.approx(
        rows["shmatari-double"]["env_steps_per_s"] / rows["envpool"]["env_steps_per_s"],
        rel=1e-2)
    assert summary["shmatari_ordered_vs_double"]["per_round"]["rounds"] == 2
    assert "policy share" in proc.stdout
