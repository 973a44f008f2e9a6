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
