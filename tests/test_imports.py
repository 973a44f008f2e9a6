"""What each process imports: ``import shmatari`` stays light, and a worker
loads only what it runs (no Gymnasium, no pool, no checker)."""

import subprocess
import sys

import pytest

#: Modules a worker process must never import (the trainer's side).
NOT_IN_WORKERS = ("shmatari.env", "shmatari._vector_env", "shmatari.client",
                  "shmatari.supervisor", "shmatari.check", "shmatari.bench",
                  "shmatari.baselines", "shmatari.cli")


def _imported(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def _run(script: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def test_import_shmatari_is_light():
    out = _run(
        "import sys, shmatari\n"
        "print(sorted(m for m in sys.modules if m.startswith(('gymnasium', 'shmatari'))))\n"
        "shmatari.make, shmatari.attach, shmatari.ShmVectorEnv\n"
        "print('gymnasium' in sys.modules, shmatari.make.__module__)\n")
    loaded, after = out.stdout.splitlines()
    assert loaded == "['shmatari', 'shmatari.errors']"
    # the lazy attributes still work, and load the pool when first used
    assert after == "True shmatari.env"


@pytest.mark.parametrize("start_method", ["zygote", "spawn", "forkserver"])
def test_worker_imports_neither_gymnasium_nor_the_pool(start_method):
    # PYTHONPROFILEIMPORTTIME is read when an interpreter starts: set here, it
    # makes every new process (the fork server, spawned workers) report each
    # import on stderr, and not this one, which imports the pool itself.
    out = _run(
        "import os\n"
        "os.environ['PYTHONPROFILEIMPORTTIME'] = '1'\n"
        "import numpy as np, shmatari\n"
        f"with shmatari.make('pong', num_envs=2, num_workers=2, start_method={start_method!r}) "
        "as env:\n"
        "    env.reset(seed=0)\n"
        "    env.step(np.zeros(2, np.int64))\n")
    names = _imported(out.stderr)
    # The workers' imports were recorded: what they run is there.
    assert {"shmatari.worker", "shmatari._core", "shmatari.config", "ale_py"} <= names, names
    # shmatari._worker_ale's blocked attempt shows as a bare "gymnasium"; a
    # real import of it loads gymnasium.core, gymnasium.spaces, ...
    gym = sorted(n for n in names if n.startswith("gymnasium."))
    assert not gym, f"a worker imported {gym[:5]}"
    pool = sorted(names.intersection(NOT_IN_WORKERS))
    assert not pool, f"a worker imported {pool}"


def test_ale_py_in_the_trainer_still_registers_gymnasium_envs():
    # shmatari._worker_ale hides Gymnasium from ale_py in workers only.
    out = _run(
        "import shmatari, gymnasium\n"
        "env = shmatari.make('pong', num_envs=1, num_workers=1, start_method='spawn')\n"
        "env.close()\n"
        "import ale_py\n"
        "print('ALE/Pong-v5' in gymnasium.envs.registry)\n")
    assert out.stdout.strip() == "True"


def test_the_sb3_adapter_without_sb3_says_what_to_install():
    """shmatari does not depend on Stable-Baselines3: importing its adapter
    without it names the package to install, not only the missing module."""
    out = _run(
        "import sys\n"
        "sys.modules['stable_baselines3'] = None  # as if not installed\n"
        "try:\n"
        "    import shmatari.sb3\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name, '|', exc)\n")
    name, message = out.stdout.strip().split(" | ", 1)
    assert name.startswith("stable_baselines3")
    assert "pip install 'stable-baselines3" in message and "integrations" in message


@pytest.mark.parametrize("module,code,hint", [
    ("jax", "import shmatari\nenv = shmatari.make('null', num_envs=2, num_workers=1)\n"
            "try:\n    env.xla()\nfinally:\n    env.close()\n", "pip install jax (from a clone of shmatari: pip install '.[jax]')"),
    ("ray", "import shmatari.ray\n", "pip install ray (from a clone of shmatari: pip install '.[ray]')"),
])
def test_a_missing_extra_says_what_to_install(module, code, hint):
    """xla() without jax and shmatari.ray without Ray raised a bare
    ModuleNotFoundError (a new user's pass); the bench and the train check
    already named what to install."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys\nsys.modules[{module!r}] = None  # not installed\n"
                               + code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError") and hint in last, proc.stderr[-2000:]
