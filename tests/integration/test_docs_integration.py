"""The docs' blocks that need torch, SB3, TorchRL or Ray (marked
``<!-- docs-test: integration -->``; tests/docs_blocks.py) run as written,
with the directives' shortenings: Python blocks as scripts in a fresh
interpreter, shell commands for real (README's training command, for a
few thousand steps)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
from test_docs import check_commands, run_script

import docs_blocks
from docs_blocks import ROOT

BLOCKS = [b for b in docs_blocks.blocks() if b.suite == "integration"]

#: Parts of the integrations extra that an install from before they joined it
#: lacks: a block that imports one is skipped there, as test_rllib_ppo.py is.
OPTIONAL = {"ray.rllib": "ray[rllib]",
            # test_ray_pool.py skips without ray; so do the blocks that import it
            # (a Gymnasium >= 1.3 venv cannot hold ray[rllib] 2.60, which pins 1.2.2)
            "ray": "ray"}


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "python"],
                         ids=lambda b: b.id)
def test_python_block_runs(block, tmp_path):
    for module, package in OPTIONAL.items():
        if f"from {module}" in block.code or f"import {module}" in block.code:
            try:
                importlib.import_module(module)
            except ImportError as exc:  # ray.rllib raises ImportError, not ModuleNotFoundError
                pytest.skip(f"needs {package} (the integrations extra): {exc}")
    run_script(block.script(str(tmp_path)), tmp_path)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language in ("bash", "sh", "shell")],
                         ids=lambda b: b.id)
def test_shell_block_runs(block, tmp_path):
    """Each command takes its flags (``--help``), then runs, shortened by the
    block's directives, from the repository's root as the README says; the
    training command prints no ReproducibilityWarning (it sets
    PYTHONHASHSEED)."""
    check_commands(block)
    for line in block.script(str(tmp_path)).splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        env = dict(os.environ)
        env.pop("PYTHONHASHSEED", None)  # the line sets what it needs
        proc = subprocess.run(["bash", "-c", line.replace("python ", f"{sys.executable} ", 1)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-4000:]}"
        assert "ReproducibilityWarning" not in proc.stderr, proc.stderr[-2000:]
