"""A CleanRL-style PPO script written for EnvPool (examples/cleanrl_ppo_envpool.py)
runs on shmatari with only its import line changed, and on EnvPool as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "cleanrl_ppo_envpool.py"
ARGS = ["--total-timesteps", "256", "--num-envs", "4", "--num-steps", "32",
        "--update-epochs", "1", "--num-minibatches", "2"]


def _run(path: Path) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(path), *ARGS], capture_output=True, text=True,
                         timeout=300, env=env, cwd=path.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.parametrize("backend", ["shmatari.envpool", "envpool"])
def test_cleanrl_style_ppo_runs_with_only_the_import_changed(backend, tmp_path):
    source = SCRIPT.read_text()
    assert source.count("\nimport envpool\n") == 1
    if backend == "envpool":
        pytest.importorskip("envpool")
        path = SCRIPT
    else:
        path = tmp_path / "ppo_shmatari.py"
        path.write_text(source.replace("\nimport envpool\n",
                                       "\nimport shmatari.envpool as envpool\n"))
    stdout = _run(path)
    lines = re.findall(r"iteration=(\d+) global_step=(\d+) SPS=(\d+)", stdout)
    assert [int(it) for it, _, _ in lines] == [1, 2]
    assert int(lines[-1][1]) == 256 and int(lines[-1][2]) > 0
    assert "pg_loss=nan" not in stdout
