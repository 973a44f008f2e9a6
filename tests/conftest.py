"""Shared fixtures: real ROMs, real processes, real shared memory."""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

SHM_DIR = "/dev/shm"

# A shell starts a background job (`pytest &`, nohup) with SIGINT ignored, and
# Python then keeps it ignored; every process the tests start would inherit
# that, and the Ctrl-C tests would test nothing. Give the suite Python's usual
# SIGINT handler (its children get the default action again at exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def shm_entries(pid: int | None = None) -> set[str]:
    """Names under /dev/shm of segments created by process ``pid`` (default:
    this one); shmatari names them ``shmatari_<owner pid>_<hex>``. Filtering
    by owner keeps tests running side by side from seeing each other's."""
    prefix = f"shmatari_{os.getpid() if pid is None else pid}_"
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith(prefix)}
    except FileNotFoundError:
        return set()


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live process (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def wait_until(cond, seconds: float) -> bool:
    """Polls ``cond()`` every 0.1 s for up to ``seconds``: whether it held."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


#: AddressSanitizer and UBSan, stopping at the first report.
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]


def c_compiler(lang: str) -> list[str]:
    """The start of a strict compile command for ``lang`` ("c": C11, "c++":
    the same source as C++11) with the first compiler found; skips the test
    where there is none."""
    names = ("cc", "gcc", "clang") if lang == "c" else ("c++", "g++", "clang++")
    cc = next((c for c in map(shutil.which, names) if c), None)
    if cc is None:
        pytest.skip(f"no {lang} compiler on this machine")
    std = ["-std=c11"] if lang == "c" else ["-x", "c++", "-std=c++11"]
    return [cc, *std, "-Wall", "-Wextra", "-Werror", "-pedantic"]


def build_sanitized(cmd: list[str]) -> bool:
    """Runs the compiler command line ``cmd`` with :data:`SANITIZE` added,
    so that the C client programs the tests run also check that they read
    and write only their own memory; where the compiler has no sanitizers,
    builds as is. Returns whether the build is sanitized."""
    if subprocess.run(cmd + SANITIZE, capture_output=True).returncode == 0:
        return True
    subprocess.run(cmd, check=True)
    return False


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves shmatari segments behind."""
    before = shm_entries()
    yield
    leaked = shm_entries() - before
    assert not leaked, f"segments left in /dev/shm: {sorted(leaked)}"


@pytest.fixture
def keep_global_rngs():
    """Restores Python's and NumPy's global generators after the test."""
    saved = random.getstate(), np.random.get_state()
    yield
    random.setstate(saved[0])
    np.random.set_state(saved[1])


#: The games whose screen is not 210 x 160 (ale-py 0.12), (height, width) as
#: ALE's getScreenDims reports them; docs/semantics.md lists the same.
#: test_every_listed_game_plays_in_default_and_rgb_modes checks this table
#: against every listed game.
TALL_SCREENS = {
    **dict.fromkeys(["adventure", "air_raid", "keystone_kapers", "king_kong", "klax",
                     "laser_gates", "mr_do", "pacman", "sir_lancelot", "space_war"],
                    (250, 160)),
    "journey_escape": (230, 160),
    "pooyan": (220, 160),
    "carnival": (214, 160),
}


def random_actions(n_actions: int, num_envs: int, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_actions, (steps, num_envs))


@pytest.fixture(scope="session")
def _serial_locks(tmp_path_factory):
    """Two lock files shared by this session's pytest-xdist workers (in the
    directory above each worker's own temporary one): see
    :func:`_serial_tests_run_alone`."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    with open(root / "serial-turnstile.lock", "a") as turnstile, \
            open(root / "serial.lock", "a") as held:
        yield turnstile, held


@pytest.fixture(autouse=True)
def _serial_tests_run_alone(request, _serial_locks):
    """A test marked ``serial`` runs with no other test of the session beside
    it: every test holds ``serial.lock`` shared, a serial one exclusive, and
    each takes the turnstile first, so that the other worker waits at its
    next test while a serial one waits for the current one to end (flock,
    no starvation). Its timings (the workers' polls, CPU shares) assume cores
    that no other test is using; under pytest-xdist the other worker always
    is."""
    turnstile, held = _serial_locks
    serial = request.node.get_closest_marker("serial") is not None
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    try:
        fcntl.flock(held, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
    finally:
        fcntl.flock(turnstile, fcntl.LOCK_UN)
    try:
        yield
    finally:
        fcntl.flock(held, fcntl.LOCK_UN)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: runs with no other test beside it under pytest-xdist "
                   "(timings that assume otherwise idle cores: tests/conftest.py)")
    config.addinivalue_line(
        "markers", "all_games: plays every game in list_games() (about a minute on 2 cores; "
                   "part of the core suite, deselect with -m 'not integration and not all_games')")


def pytest_ignore_collect(collection_path, config):
    """tests/integration is not even collected by the core command (``python3
    -m pytest``: its modules import torch, SB3, ... and would only print
    SKIPPED lines): only when a path under it is given, or a ``-m``
    expression that selects ``integration``."""
    here = Path(__file__).resolve().parent / "integration"
    path = Path(collection_path).resolve()
    if path != here and here not in path.parents:
        return None
    return None if _integration_selected(config) else True


def _integration_selected(config) -> bool:
    """Whether this run asks for tests/integration: a path under it, or a
    ``-m`` expression that selects ``integration``."""
    here = Path(__file__).resolve().parent / "integration"
    for arg in config.args:
        target = Path(str(arg).split("::")[0]).resolve()
        if target == here or here in target.parents:
            return True
    markexpr = (config.getoption("markexpr", "") or "").replace(" ", "")
    return "integration" in markexpr and "notintegration" not in markexpr


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """pyproject's ``-n auto --maxprocesses 2`` (pytest-xdist): the core suite
    on two workers, the integration suite in this process alone (0: xdist
    off). Its trainings and Ray clusters each take the machine, and their
    replay tests compare runs made one after the other. None: xdist's own
    count (the CPUs), which ``--maxprocesses`` caps."""
    return 0 if _integration_selected(config) else None


def pytest_collection_modifyitems(config, items):
    """Marks every test under tests/integration ``integration``: the second test
    command (``python3 -m pytest -m integration tests/integration``, after
    ``pip install '.[integrations]'``) runs them; the first deselects them."""
    for item in items:
        if "/tests/integration/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)
