"""``shmatari-check --train`` without torch: a clear message and exit status 2,
before any pool is made (the training check itself is tested in
tests/integration/test_training_replay.py)."""

from __future__ import annotations

import subprocess
import sys


def test_check_train_without_torch_says_so():
    script = ("import sys\n"
              "sys.modules['torch'] = None  # as if torch were not installed\n"
              "from shmatari.check import main\n"
              "sys.exit(main(['--train', '--quiet']))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "--train trains a small PPO with torch, which is not installed" in proc.stderr
    assert "pip install torch" in proc.stderr
    assert "Traceback" not in proc.stderr
