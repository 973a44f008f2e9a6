"""examples/ppo_atari.py: it trains (finite losses, games logged) in both
sampling modes, and its double-buffered rollout stores every result at its
own env's row whatever order the batches come in."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shmatari

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("no_leaks")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ppo_atari.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("ppo_atari_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mode", [[], ["--sync"]], ids=["double-buffered", "sync"])
def test_ppo_example_trains_with_finite_losses_and_logs_games(tmp_path, mode):
    # 4 envs x 128 steps; games are cut at 400 frames (100 agent steps), so
    # every env finishes at least one.
    cmd = [sys.executable, str(EXAMPLE), "--num-envs", "4", "--num-steps", "32",
           "--total-timesteps", "512", "--num-minibatches", "2", "--update-epochs", "1",
           "--max-episode-frames", "400", "--torch-threads", "1", "--num-workers", "2",
           "--out-dir", str(tmp_path), *mode]
    env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    with open(tmp_path / "updates.csv") as f:
        updates = list(csv.DictReader(f))
    assert len(updates) == 512 // (4 * 32)
    for row in updates:
        for key in ("policy_loss", "value_loss", "entropy", "approx_kl"):
            assert math.isfinite(float(row[key])), (key, row)
        assert int(row["transitions"]) >= 4 * 32
    assert int(updates[-1]["global_step"]) >= 512

    with open(tmp_path / "episodes.csv") as f:
        games = list(csv.DictReader(f))
    assert games, "no whole game was logged"
    assert len(games) >= 4
    for g in games:
        assert float(g["return"]) >= 0 and 0 < int(g["length"]) <= 100
    assert "episodic_return=" in proc.stdout

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"] == ("sync" if mode else "double-buffered")
    assert summary["games"] == len(games) and summary["sps"] > 0
    assert (tmp_path / "curve.png").stat().st_size > 1000


@pytest.mark.parametrize("args,needle", [
    (["--total-timesteps", "1000"], "--total-timesteps 1000 is less than one rollout"),
    (["--env-id", "Breakou"], "--env-id: unknown Atari game 'Breakou'"),
])
def test_ppo_example_refuses_what_would_train_nothing_or_fail_later(args, needle):
    """A run shorter than one rollout trained nothing and exited 0; an
    unknown game was a traceback from make() (a newcomer's pass)."""
    proc = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert needle in proc.stderr.splitlines()[-1], proc.stderr


def test_double_buffered_rollout_matches_a_synchronous_replay_of_each_env():
    """Each env's stored observations, rewards and dones are those its own
    actions give in a synchronous pool (trajectories depend only on seed, env
    index and actions), so no result went to another env's row."""
    ex = _load_example()
    args = ex.parse_args(["--num-envs", "6", "--num-steps", "40"])
    torch.manual_seed(0)
    options = dict(seed=3, preset="dqn", autoreset_mode="same_step")
    with shmatari.make("Breakout", 6, batch_size=3, num_workers=3, zero_copy=True, **options) as env:
        obs_shape = env.single_observation_space.shape
        agent = ex.Agent(obs_shape[0], env.single_action_space.n)
        ro = ex.Rollout(args, 3, obs_shape, torch.device("cpu"))
        env.async_reset()
        to_device = ex.HostToDevice(3, obs_shape, torch.device("cpu"))
        collected = ex.collect(env, agent, ro, args.rollout_size, to_device)
    assert collected == args.rollout_size
    lengths = ro.t.copy()
    assert lengths.sum() == args.rollout_size
    n = int(lengths.min())
    assert n > 0

    with shmatari.make("Breakout", 6, num_workers=2, **options) as sync:
        obs, _ = sync.reset()
        np.testing.assert_array_equal(ro.obs[0].numpy(), obs)
        for k in range(n):
            obs, reward, terminated, truncated, _ = sync.step(ro.actions[k])
            np.testing.assert_array_equal(ro.rewards[k], reward)
            np.testing.assert_array_equal(ro.dones[k], terminated | truncated)
            np.testing.assert_array_equal(ro.obs[k + 1].numpy(), obs)


# -- bit-for-bit replay of the double-buffered default (issue 22) ---------------------------

REPLAY_ARGS = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "384",
               "--num-minibatches", "2", "--update-epochs", "2", "--max-episode-frames", "400",
               "--torch-threads", "1", "--seed", "7"]


def _run_example(out_dir, *extra, hog: bool = False) -> dict:
    """Runs the example in its default mode (double-buffered, fixed batch
    order); with ``hog``, a busy-looping process runs beside it throughout."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    cmd = [sys.executable, str(EXAMPLE), *REPLAY_ARGS, "--out-dir", str(out_dir), *extra]
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if hog else None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["mode"] == "double-buffered" and summary["batch_order"] == "fixed"
    assert len(summary["update_losses"]) == 3
    return summary


@pytest.fixture(scope="module")
def replay_reference(tmp_path_factory):
    return _run_example(tmp_path_factory.mktemp("ppo_ref"), "--num-workers", "1")


@pytest.mark.parametrize("extra,hog", [
    (["--num-workers", "2"], False),
    (["--num-workers", "4", "--start-method", "spawn"], True),
    (["--num-workers", "2", "--start-method", "forkserver"], True),
    # the README says "any start method": fork was the one left out (a docs review)
    (["--num-workers", "2", "--start-method", "fork"], False),
], ids=["2-workers", "4-workers-spawn-with-hog", "2-workers-forkserver-with-hog",
        "2-workers-fork"])
def test_double_buffered_ppo_replays_bit_for_bit(tmp_path, replay_reference, extra, hog):
    """Same seed, other layout and load: identical per-update losses, final
    parameters and game returns (the batches come in a fixed order, so no
    timing reaches the policy's random draws or the rollout's ends)."""
    run = _run_example(tmp_path, *extra, hog=hog)
    for k, (a, b) in enumerate(zip(replay_reference["update_losses"], run["update_losses"])):
        assert a == b, f"update {k + 1} differs: {a} vs {b}"
    assert run["params_sha256"] == replay_reference["params_sha256"]
    assert run["returns"] == replay_reference["returns"]
    assert run["agent_steps"] == replay_reference["agent_steps"]


def test_initial_parameters_depend_on_the_seed_not_on_torchs_thread_count():
    """The orthogonal init's QR rounds differently on more CPU threads; the
    example builds its network on one, so a seed gives the same initial
    parameters on a 2-core laptop and a 16-core server (and the thread
    count the caller had set is given back)."""
    ppo = _load_example()
    before = torch.get_num_threads()
    hashes = {}
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            torch.manual_seed(1)
            hashes[threads] = ppo.params_sha256(ppo.Agent(4, 4))
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    assert len(set(hashes.values())) == 1, hashes
