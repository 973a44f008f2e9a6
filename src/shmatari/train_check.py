"""``shmatari-check --train``: does a short training run replay bit for bit?

A short PPO (Schulman et al., 2017, with CleanRL's Atari settings: the Nature
CNN, clip 0.1, GAE(0.95), Adam 2.5e-4; examples/ppo_atari.py is the full
script) is trained several times from one seed, each time under another
layout or load, with double-buffered sampling: the pool serves two halves
of its envs alternately (``batch_size = num_envs // 2``) while the policy
acts on the other half. Each run records every update's losses and a
SHA-256 of the final parameters; every run is compared with the first, and
a difference names the first update whose losses differ.

The runs (:data:`TRAIN_RUNS`):

- ``reference``: 1 worker;
- ``workers``: N workers (default: the cores, at least 2, at most num_envs);
- ``load``: N workers with a busy-looping process beside the run (the
  machine loaded, so the workers' timing changes).

With ``batch_order="fixed"`` (the default) every run must agree. With
``"first_ready"`` (EnvPool's async contract) which envs share a policy
batch depends on timing, so runs usually differ from the first update on:
that is what the check is for. Torch must be deterministic too: each run
calls :func:`shmatari.seeding.seed_everything` (torch's deterministic
flags) and ``torch.set_num_threads(torch_threads)``; see
docs/reproducibility.md for the other sources of nondeterminism.

Needs torch (``pip install torch``); :func:`check_training` raises
ImportError saying so when it is missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import random
import subprocess
import sys

import numpy as np

from . import config as _config, seeding

__all__ = ["check_training", "TrainReport", "TrainRun", "TRAIN_RUNS", "LOSSES"]

#: The runs, in order; the first is the reference.
TRAIN_RUNS = ("reference", "workers", "load")
#: The losses recorded per update, in this order.
LOSSES = ("policy_loss", "value_loss", "entropy", "approx_kl")


@dataclasses.dataclass
class TrainRun:
    """One training run: its layout, each update's losses and the final parameters' hash."""

    name: str
    num_workers: int
    load: bool
    losses: list = dataclasses.field(default_factory=list)
    params_sha256: str = ""
    returns: list = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class TrainReport:
    """The runs and, for each run after the first, the first differing
    update (1-based; 0: the parameters differ with equal losses; None: identical)."""

    game: str
    batch_order: str
    runs: list
    first_difference: dict

    @property
    def ok(self) -> bool:
        return all(v is None for v in self.first_difference.values())

    def lines(self) -> list[str]:
        ref = self.runs[0]
        out = [f"train {ref.name:<9} {ref.num_workers} worker(s), batch_order "
               f"{self.batch_order!r}: {_updates(len(ref.losses))}, params "
               f"{ref.params_sha256[:16]}"]
        for run in self.runs[1:]:
            what = f"{run.num_workers} worker(s){' + a busy loop' if run.load else ''}"
            k = self.first_difference[run.name]
            if k is None:
                verdict = (f"OK: identical losses in {_updates(len(run.losses))}, params "
                           f"{run.params_sha256[:16]}")
            elif k == 0:
                verdict = (f"DIFFERENT: equal losses but other final params "
                           f"({run.params_sha256[:16]} vs {ref.params_sha256[:16]})")
            else:
                a, b = ref.losses[k - 1], run.losses[k - 1]
                # repr: the shortest text that tells the two floats apart
                # (.6g printed "entropy 1.38586 vs 1.38586" as a difference)
                names = ", ".join(f"{n} {x!r} vs {y!r}"
                                  for n, x, y in zip(LOSSES, a, b) if x != y)
                verdict = f"DIFFERENT: update {k} first differs ({names})"
            out.append(f"train {run.name:<9} {what}: {verdict}")
        out.append("train: every run replays the reference bit for bit" if self.ok else
                   "train: runs differ (docs/reproducibility.md says what else breaks "
                   "determinism and how to tell)")
        return out

    def as_dict(self) -> dict:
        return {"game": self.game, "batch_order": self.batch_order, "ok": self.ok,
                "runs": [r.as_dict() for r in self.runs],
                "first_difference": self.first_difference}


def _import_torch():
    try:
        import torch
    except ImportError as exc:
        raise ImportError(f"shmatari-check --train trains a small PPO with torch, which is not "
                          f"installed ({exc}): pip install torch") from None
    return torch


@contextlib.contextmanager
def _callers_state_kept(torch):
    """Gives the caller back what each run changes in the process: the
    generators of ``random``, NumPy's global ``RandomState`` and torch (CPU,
    and every CUDA device's where CUDA is available), torch's thread count,
    its deterministic-algorithms mode, cuDNN's ``deterministic`` and
    ``benchmark`` flags, and ``CUBLAS_WORKSPACE_CONFIG``
    (:func:`shmatari.seeding.seed_everything` and ``torch.set_num_threads``
    set them all). Called at the start of a training script, the check left
    them as its last run had (one thread, deterministic algorithms on,
    reseeded generators), and so changed the run that followed."""
    cuda = torch.cuda.is_available()
    saved = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
             torch.cuda.get_rng_state_all() if cuda else None, torch.get_num_threads(),
             torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    try:
        yield
    finally:
        (py, np_state, cpu, devices, threads, deterministic, warn_only, cudnn_deterministic,
         cudnn_benchmark, cublas) = saved
        random.setstate(py)
        np.random.set_state(np_state)
        torch.set_rng_state(cpu)
        if devices is not None:
            torch.cuda.set_rng_state_all(devices)
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.backends.cudnn.deterministic = cudnn_deterministic
        torch.backends.cudnn.benchmark = cudnn_benchmark
        if cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas


def _params_sha256(model) -> str:
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _agent(torch, stack: int, n_actions: int):
    nn = torch.nn

    def init(layer, std=float(np.sqrt(2))):
        nn.init.orthogonal_(layer.weight, std)
        nn.init.constant_(layer.bias, 0.0)
        return layer

    trunk = nn.Sequential(init(nn.Conv2d(stack, 32, 8, stride=4)), nn.ReLU(),
                          init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
                          init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(),
                          init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU())
    return nn.ModuleDict({"trunk": trunk, "actor": init(nn.Linear(512, n_actions), 0.01),
                          "critic": init(nn.Linear(512, 1), 1.0)})


def _train(game: str, *, num_envs: int, num_workers: int, updates: int, num_steps: int,
           seed: int, batch_order: str, torch_threads: int, start_method) -> TrainRun:
    """One double-buffered PPO run; returns its losses, returns and parameter hash."""
    import shmatari

    torch = _import_torch()
    # seed_everything without its PYTHONHASHSEED warning: the runs compared
    # share this process's hash seed, so it cannot tell them apart, and the
    # warning ("launch the program as PYTHONHASHSEED=0 shmatari-check ...")
    # made a passing check read as a doubtful one (a newcomer's pass)
    seeding._seed_all(seed, True, warn_hashseed=False)
    torch.set_num_threads(torch_threads)
    Categorical = torch.distributions.Categorical
    half = num_envs // 2
    run = TrainRun(name="", num_workers=num_workers, load=False)
    with shmatari.make(game, num_envs, batch_size=half, num_workers=num_workers, seed=seed,
                       batch_order=batch_order, start_method=start_method, preset="dqn",
                       autoreset_mode="same_step", max_episode_frames=400) as env:
        agent = _agent(torch, env.single_observation_space.shape[0], env.single_action_space.n)
        opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)

        def policy(x):
            hidden = agent["trunk"](x.float() / 255.0)
            return Categorical(logits=agent["actor"](hidden)), agent["critic"](hidden).squeeze(-1)

        env.async_reset()
        pending = {}  # env -> (obs, action, logprob, value) of its action in flight
        for _ in range(updates):
            # one rollout: each env's transitions in its own list
            traj = {e: [] for e in range(num_envs)}
            last_obs = {}
            done_steps = 0
            while done_steps < num_steps * num_envs:
                obs, reward, term, trunc, info = env.recv()
                ids = info["env_id"]
                x = torch.from_numpy(np.array(obs))
                for row, e in enumerate(ids.tolist()):
                    if e in pending:
                        traj[e].append((*pending.pop(e), float(reward[row]),
                                        bool(term[row] or trunc[row])))
                        done_steps += 1
                    last_obs[e] = x[row]
                if "episode" in info:
                    run.returns += [float(r) for r in info["episode"]["r"][info["_episode"]]]
                with torch.no_grad():
                    dist, value = policy(x)
                    action = dist.sample()
                    logp = dist.log_prob(action)
                for row, e in enumerate(ids.tolist()):
                    pending[e] = (x[row], int(action[row]), float(logp[row]), float(value[row]))
                env.send(action.numpy(), ids)
            # GAE(0.95), gamma 0.99, bootstrapped from each env's pending value
            obs_l, act_l, logp_l, adv_l, ret_l, val_l = [], [], [], [], [], []
            for e in range(num_envs):
                nxt = pending[e][3] if e in pending else 0.0
                gae = 0.0
                advs = []
                for o, a, lp, v, r, d in reversed(traj[e]):
                    live = 0.0 if d else 1.0
                    delta = r + 0.99 * nxt * live - v
                    gae = delta + 0.99 * 0.95 * live * gae
                    advs.append(gae)
                    nxt = v
                for (o, a, lp, v, _, _), adv in zip(traj[e], reversed(advs)):
                    obs_l.append(o)
                    act_l.append(a)
                    logp_l.append(lp)
                    adv_l.append(adv)
                    ret_l.append(adv + v)
                    val_l.append(v)
            b_obs = torch.stack(obs_l)
            b_act = torch.tensor(act_l)
            b_logp, b_adv = torch.tensor(logp_l), torch.tensor(adv_l)
            b_ret = torch.tensor(ret_l)
            n = b_obs.shape[0]
            for _ in range(2):  # epochs
                for mb in np.array_split(np.random.permutation(n), 2):
                    mb = torch.from_numpy(mb)
                    dist, value = policy(b_obs[mb])
                    logratio = dist.log_prob(b_act[mb]) - b_logp[mb]
                    ratio = logratio.exp()
                    adv = b_adv[mb]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    pg = torch.max(-adv * ratio, -adv * ratio.clamp(0.9, 1.1)).mean()
                    v_loss = 0.5 * ((value - b_ret[mb]) ** 2).mean()
                    ent = dist.entropy().mean()
                    loss = pg - 0.01 * ent + 0.5 * v_loss
                    opt.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                    opt.step()
                    kl = ((ratio - 1) - logratio).mean()
            run.losses.append([pg.item(), v_loss.item(), ent.item(), kl.item()])
        run.params_sha256 = _params_sha256(agent)
    return run


def _updates(n: int) -> str:
    return f"{n} update" + ("" if n == 1 else "s")


#: The ``load`` run's busy loop: spins until its parent (the check) is gone,
#: looking every few milliseconds, so that a check killed by SIGKILL or
#: SIGTERM (which skip its ``finally``) leaves no process spinning.
_BUSY_LOOP = ("import os, sys\n"
              "parent = int(sys.argv[1])\n"
              "while os.getppid() == parent:\n"
              "    for _ in range(100_000):\n"
              "        pass\n")


def start_busy_loop() -> subprocess.Popen:
    """A process that keeps one core busy while this process lives (it ends
    within milliseconds of this process's death, however it dies)."""
    import os

    # -I: no folder of the caller's on sys.path, as every child of a pool
    # (atari.child_environment); it imports only modules loaded at start-up
    return subprocess.Popen([sys.executable, "-I", "-c", _BUSY_LOOP, str(os.getpid())])


def check_training(game: str = "Breakout", *, num_envs: int = 4, updates: int = 3,
                   num_steps: int = 32, seed: int = 0, num_workers: int | None = None,
                   batch_order: str = "fixed", torch_threads: int = 1,
                   start_method: str | None = None, progress=None) -> TrainReport:
    """Trains a short PPO under each of :data:`TRAIN_RUNS` and compares them.

    Args:
        game: the game.
        num_envs: envs (even, >= 2): two halves served alternately.
        updates: PPO updates per run (each ``num_steps * num_envs`` agent steps).
        num_steps: steps per env per rollout.
        seed: the pool's and the trainer's seed (:func:`seeding.seed_everything`).
        num_workers: workers of the ``workers`` and ``load`` runs (default:
            the cores, at least 2, at most num_envs); the reference has 1.
        batch_order: ``"fixed"`` (must replay) or ``"first_ready"`` (usually
            does not: shows what the check detects).
        torch_threads: ``torch.set_num_threads`` in every run.
        start_method: as :func:`shmatari.make`.
        progress: a callable given each run's name as it starts, or None.

    The caller's generators (``random``, NumPy's global one, torch's), torch's
    thread count and deterministic flags and ``CUBLAS_WORKSPACE_CONFIG``
    are as they were when it returns (each run sets them); TensorFlow's
    global seed, where TensorFlow is installed, stays as the last run set it.

    Returns:
        TrainReport: ``ok`` when every run matches the reference; ``lines()``
        says which update first differs.

    Raises:
        ImportError: torch is not installed.
        ValueError: an odd or too small num_envs, or a bad argument of make().
    """
    torch = _import_torch()
    if num_envs < 2 or num_envs % 2:
        raise ValueError(f"--train needs an even num_envs >= 2 (two halves), got {num_envs}")
    if num_workers is None:
        num_workers = min(num_envs, max(2, _config.available_cores()))
    runs = []
    with _callers_state_kept(torch):
        for name, workers, load in (("reference", 1, False), ("workers", num_workers, False),
                                    ("load", num_workers, True)):
            if progress is not None:
                progress(name)
            burner = start_busy_loop() if load else None
            try:
                run = _train(game, num_envs=num_envs, num_workers=workers, updates=updates,
                             num_steps=num_steps, seed=seed, batch_order=batch_order,
                             torch_threads=torch_threads, start_method=start_method)
            finally:
                if burner is not None:
                    burner.kill()
                    burner.wait()
            run.name, run.load = name, load
            runs.append(run)
    ref, first = runs[0], {}
    for run in runs[1:]:
        k = next((i + 1 for i, (a, b) in enumerate(zip(ref.losses, run.losses)) if a != b),
                 None)
        if k is None and (run.params_sha256 != ref.params_sha256
                          or len(run.losses) != len(ref.losses)):
            k = 0
        first[run.name] = k
    return TrainReport(game=game, batch_order=batch_order, runs=runs, first_difference=first)
