"""Training runs that must replay bit for bit (issue 22, docs/reproducibility.md):
``shmatari-check --train``, SB3's PPO on shmatari.sb3's VecEnv, and a torch
policy driving shmatari.envpool synchronously and with batch_order="fixed",
each across worker counts and with a busy-looping process beside one run."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import shmatari.envpool  # noqa: E402
from shmatari import seeding  # noqa: E402

pytestmark = [pytest.mark.usefixtures("no_leaks"),
              pytest.mark.filterwarnings("ignore:PYTHONHASHSEED is not set")]


class _Hog:
    """A busy-looping process beside the run, for the length of a with block."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def test_check_train_passes_with_fixed_batches(tmp_path):
    out = tmp_path / "train.json"
    proc = subprocess.run(
        [sys.executable, "-m", "shmatari.check", "--train", "--train-updates", "2",
         "--num-envs", "4", "--num-workers", "2", "--quiet", "--json", str(out)],
        capture_output=True, text=True, timeout=900, env=dict(os.environ, PYTHONHASHSEED="0"))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["ok"] and report["batch_order"] == "fixed"
    assert [r["name"] for r in report["runs"]] == ["reference", "workers", "load"]
    assert len({r["params_sha256"] for r in report["runs"]}) == 1
    assert all(len(r["losses"]) == 2 for r in report["runs"])
    assert "every run replays the reference bit for bit" in proc.stdout


def test_train_report_names_the_first_differing_update():
    from shmatari.train_check import TrainReport, TrainRun

    ref = TrainRun("reference", 1, False, [[0.1, 0.2, 1.3, 0.0], [0.3, 0.1, 1.2, 0.0]], "aa")
    same = TrainRun("workers", 2, False, [list(x) for x in ref.losses], "aa")
    other = TrainRun("load", 2, True, [ref.losses[0], [0.3, 0.15, 1.2, 0.0]], "bb")
    report = TrainReport("Breakout", "fixed", [ref, same, other],
                         {"workers": None, "load": 2})
    assert not report.ok
    text = "\n".join(report.lines())
    assert "workers" in text and "OK" in text
    assert "update 2 first differs (value_loss 0.1 vs 0.15)" in text
    # floats that agree in their first 6 digits are printed so as to differ
    ref = TrainRun("reference", 1, False, [[0.3, 0.1, 1.3858601, 0.0]], "aa")
    close = TrainRun("load", 2, True, [[0.3, 0.1, 1.3858601 + 1e-13, 0.0]], "bb")
    text = "\n".join(TrainReport("Breakout", "fixed", [ref, close], {"load": 1}).lines())
    assert "update 1 first differs (entropy 1.3858601 vs 1.3858601000000998)" in text


def test_check_training_gives_the_caller_its_generators_and_torch_flags_back():
    """check_training() seeds every generator and turns torch's deterministic
    mode on in each run; called at the start of a training script, it left
    them so (one thread, deterministic algorithms on, reseeded generators),
    and the script's own run changed (a reproducibility audit)."""
    import random

    from shmatari.train_check import check_training

    random.seed(11)
    np.random.seed(12)
    torch.manual_seed(13)
    threads = max(2, torch.get_num_threads())
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)  # an earlier test's seed_everything set it
    cublas = os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    try:
        expected = (random.random(), np.random.rand(), torch.rand(1).item())
        random.seed(11)
        np.random.seed(12)
        torch.manual_seed(13)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = check_training("Breakout", num_envs=2, updates=1, num_steps=8)
        assert report.ok, "\n".join(report.lines())
        # its runs share one hash seed: no PYTHONHASHSEED advice for the caller
        assert not [w for w in caught if issubclass(w.category, seeding.ReproducibilityWarning)]
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
        assert torch.get_num_threads() == threads
        assert not torch.are_deterministic_algorithms_enabled()
        assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    finally:
        if cublas is not None:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas


def _sb3_params(num_workers: int, hog: bool) -> str:
    from stable_baselines3 import PPO

    from shmatari.sb3 import make_atari_env

    seeding.seed_everything(0)
    torch.set_num_threads(1)
    env = make_atari_env("Breakout", n_envs=4, seed=0, num_workers=num_workers)
    try:
        model = PPO("CnnPolicy", env, n_steps=32, batch_size=64, n_epochs=2, seed=0,
                    device="cpu")
        if hog:
            with _Hog():
                model.learn(total_timesteps=256)
        else:
            model.learn(total_timesteps=256)
        h = hashlib.sha256()
        for name, tensor in model.policy.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().contiguous().numpy().tobytes())
        return h.hexdigest()
    finally:
        env.close()


def test_sb3_ppo_on_the_vecenv_replays_across_workers_and_load():
    """SB3 steps every env at once (a synchronous pool): its training replays."""
    pytest.importorskip("stable_baselines3")
    ref = _sb3_params(1, hog=False)
    assert _sb3_params(2, hog=True) == ref


def _envpool_rollout(num_workers: int, batch_size: int, hog: bool, **kwargs) -> str:
    """A seeded torch policy (random conv net, sampled actions) driving
    shmatari.envpool for 60 batches; a digest of every batch's env ids,
    actions, rewards and observations."""
    seeding.seed_everything(1)
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 8, stride=8), torch.nn.Flatten(),
                              torch.nn.LazyLinear(4))
    h = hashlib.sha256()
    env = shmatari.envpool.make("Breakout-v5", num_envs=4, batch_size=batch_size, seed=3,
                                num_workers=num_workers, max_episode_steps=100, **kwargs)
    try:
        env.async_reset()
        with (_Hog() if hog else _Nothing()):
            for _ in range(60):
                obs, reward, _, _, info = env.recv()
                ids = info["env_id"]
                with torch.no_grad():
                    logits = net(torch.from_numpy(np.array(obs)).float() / 255.0)
                action = torch.distributions.Categorical(logits=logits).sample().numpy()
                for a in (ids, action, reward, np.array(obs)):
                    h.update(np.ascontiguousarray(a).tobytes())
                env.send(action, ids)
    finally:
        env.close()
    return h.hexdigest()


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.mark.parametrize("batch_size,kwargs", [(4, {}), (2, {"batch_order": "fixed"})],
                         ids=["sync", "async-fixed"])
def test_envpool_paths_that_should_replay_do(batch_size, kwargs):
    ref = _envpool_rollout(1, batch_size, False, **kwargs)
    assert _envpool_rollout(2, batch_size, True, **kwargs) == ref
    assert _envpool_rollout(4, batch_size, False, **kwargs) == ref
