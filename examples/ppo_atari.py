"""PPO on Atari with shmatari, in one file, with double-buffered sampling.

The algorithm and its defaults are those of CleanRL's ``ppo_atari_envpool.py``
(Huang et al., "The 37 implementation details of PPO", 2022): Nature CNN,
8 envs x 128 steps per rollout, 4 epochs of 4 minibatches, clip 0.1, GAE(0.95),
learning rate 2.5e-4 annealed to 0. The envs follow the same Atari conventions
(EnvPool's defaults plus CleanRL's ``episodic_life`` and ``reward_clip``):
shmatari's ``preset="dqn"`` (no sticky actions, up to 30 no-ops, FIRE reset,
a lost life ends the episode, rewards clipped to their sign). Logged returns
are the raw scores of whole games (``info["episode"]["r"]``).

**Double-buffered sampling** (the default). The pool is made with
``batch_size = num_envs // 2``: while the policy computes actions for one
batch, the other half of the envs is stepping in the workers. The pool serves
its batches in a fixed order (``batch_order="fixed"``): envs 0, 2, 4, ...,
then envs 1, 3, 5, ..., and so on, each half striped over the workers, so
which envs share a policy batch, the order of the policy's random draws and
where a rollout ends never depend on timing: **the same seed replays bit for
bit** (losses, parameters, game returns), whatever ``--num-workers``, the
start method or the load on the machine (docs/reproducibility.md; torch
itself must be deterministic too: its deterministic flags on, as here, and on
CPU ``--torch-threads`` fixed, since the network's sums split by thread
count; the initial weights are computed on one thread, so with ``--device
cuda`` the thread count changes nothing). Every result is stored at its env's own
position (``info["env_id"]``), each env keeping its own timeline. A rollout
ends after ``num_steps * num_envs`` transitions in all (GAE runs along each
env's own timeline). When it ends, the half still stepping has one
transition in flight, chosen by the policy before the update: it becomes the
first transition of the next rollout, with its behaviour log-probability,
which is what PPO's ratio needs. ``--batch-order first_ready`` serves
whichever half is ready first instead (EnvPool's async contract, the
previous default): as fast, but a run no longer replays. ``--sync`` makes a
synchronous pool (``batch_size = num_envs``): exactly CleanRL's loop, for
comparison.

**Host-to-device hand-off.** Observations come as read-only views into the
shared ring (``zero_copy=True``). On CPU the policy reads the view directly and
the batch is copied once, into the rollout storage. With ``--device cuda`` the
view is copied once into a reused pinned buffer, then to the GPU with a
non-blocking copy; the rollout storage lives on the GPU. There torch's CPU
work is only these copies, and by default it runs on one thread: torch's
default (one per core) competes with the workers for the cores. On a
16-core H200 machine, 64 envs on 16 workers, collection ran 2.2-2.3x as
fast on one thread as on 16 (one run of each on two machines;
benchmarks/results/many-cores-16core/).

Run::

    PYTHONHASHSEED=0 python examples/ppo_atari.py --env-id Breakout --num-envs 8 \\
        --total-timesteps 500000 --seed 1 --torch-threads 1 --out-dir runs/breakout

(the README's command: PYTHONHASHSEED=0 so that a rerun replays bit for bit,
one torch thread beside the workers on a small machine)

It prints each finished game and each update, and writes into ``--out-dir``:
``episodes.csv`` (agent step, return, length), ``updates.csv`` (losses, SPS),
``summary.json`` (with ``params_sha256``, a hash of the final parameters,
and each update's losses, to compare two runs) and ``curve.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import os
import signal
import time
import warnings
from collections import deque

import numpy as np

import shmatari
from shmatari.seeding import seed_everything


class _DefaultsShown(argparse.HelpFormatter):
    """--help gives each option's default, unless its help already names it
    (flags: their help says what they turn on or off)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.nargs == 0 or action.default is None or "default" in text:
            return text
        return (text + " " if text else "") + "(default: %(default)s)"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=_DefaultsShown)
    p.add_argument("--env-id", default="Breakout", help="the game (an ale-py ROM id or usual spelling)")
    p.add_argument("--num-envs", type=int, default=8, help="envs in the pool (even unless --sync)")
    p.add_argument("--total-timesteps", type=int, default=10_000_000, help="agent steps in all envs")
    p.add_argument("--seed", type=int, default=1, help="the run's one seed (envs, torch, numpy)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the network runs")
    p.add_argument("--sync", action="store_true", help="one synchronous batch of all envs (no overlap)")
    p.add_argument("--num-workers", type=int, default=None, help="worker processes (default: cores)")
    p.add_argument("--batch-order", default="fixed", choices=("fixed", "first_ready"),
                   help="double buffering: halves in a fixed order (replays) or first ready")
    p.add_argument("--start-method", default=None, help="how workers start (shmatari.make; default: its own)")
    p.add_argument("--max-episode-frames", type=int, default=108_000,
                   help="truncate a game after this many emulator frames (EnvPool's 27,000 steps)")
    p.add_argument("--torch-threads", type=int, default=None,
                   help="torch.set_num_threads (default: 1 with --device cuda, where torch's CPU work is "
                        "copies and more threads only compete with the workers; torch's own on CPU)")
    p.add_argument("--out-dir", default="runs/ppo_atari", help="where the CSVs, JSON and PNG go")
    p.add_argument("--write-every", type=int, default=20,
                   help="rewrite summary.json and curve.png every N updates")
    p.add_argument("--no-torch-deterministic", dest="torch_deterministic", action="store_false",
                   help="let torch pick nondeterministic kernels (same seed, different run)")
    # PPO, with CleanRL's defaults
    p.add_argument("--learning-rate", type=float, default=2.5e-4, help="Adam's step size")
    p.add_argument("--num-steps", type=int, default=128, help="steps per env per rollout")
    p.add_argument("--no-anneal-lr", dest="anneal_lr", action="store_false",
                   help="keep the learning rate constant (else linear to 0)")
    p.add_argument("--gamma", type=float, default=0.99, help="discount factor")
    p.add_argument("--gae-lambda", type=float, default=0.95, help="GAE's lambda")
    p.add_argument("--num-minibatches", type=int, default=4, help="minibatches per epoch")
    p.add_argument("--update-epochs", type=int, default=4, help="passes over each rollout")
    p.add_argument("--no-norm-adv", dest="norm_adv", action="store_false",
                   help="do not normalise advantages per minibatch")
    p.add_argument("--clip-coef", type=float, default=0.1, help="PPO's ratio clip")
    p.add_argument("--no-clip-vloss", dest="clip_vloss", action="store_false",
                   help="do not clip the value loss")
    p.add_argument("--ent-coef", type=float, default=0.01, help="entropy bonus weight")
    p.add_argument("--vf-coef", type=float, default=0.5, help="value loss weight")
    p.add_argument("--max-grad-norm", type=float, default=0.5, help="gradient clip (global norm)")
    p.add_argument("--target-kl", type=float, default=None,
                   help="stop an update's epochs past this approximate KL (default: none)")
    args = p.parse_args(argv)
    if not args.sync and args.num_envs % 2:
        p.error(f"--num-envs must be even for double buffering (two halves), got {args.num_envs}")
    args.rollout_size = args.num_envs * args.num_steps
    if args.total_timesteps < args.rollout_size:
        p.error(f"--total-timesteps {args.total_timesteps} is less than one rollout "
                f"(--num-envs {args.num_envs} x --num-steps {args.num_steps} = "
                f"{args.rollout_size} agent steps): nothing would be trained")
    try:  # an unknown game is a usage error here, not a traceback from make()
        # quietly: make() warns about a legacy id's conventions only where the
        # options leave them open (this script's preset="dqn" sets them)
        shmatari.games.resolve_quietly(args.env_id)
    except (TypeError, ValueError) as exc:
        p.error(f"--env-id: {exc}")
    return args


try:  # after parse_args: --help and usage errors need no torch
    import torch
    import torch.nn as nn
    from torch.distributions import Categorical
except ImportError as exc:  # the package does not depend on torch
    if __name__ == "__main__":
        parse_args()
    raise SystemExit(f"examples/ppo_atari.py needs torch ({exc}): python3 -m pip install "
                     f"torch (CPU or CUDA build, see pytorch.org), or the "
                     f"'integrations' extra") from None


def layer_init(layer, std=np.sqrt(2), bias=0.0):
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


@contextlib.contextmanager
def one_torch_thread():
    """Runs the block on one torch CPU thread, then restores the count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class Agent(nn.Module):
    """Nature CNN (Mnih et al., 2015) with a policy and a value head.

    The weights are initialised on one CPU thread: the orthogonal init's QR
    factorisation (LAPACK) rounds differently with torch's thread count, so
    on more threads the initial parameters would depend on the machine's
    cores, not on the seed alone (seed 1: three different
    ``params_sha256`` on 1, 2 and 16 threads).
    """

    def __init__(self, stack_num: int, num_actions: int):
        super().__init__()
        with one_torch_thread():
            self.network = nn.Sequential(
                layer_init(nn.Conv2d(stack_num, 32, 8, stride=4)), nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
            )
            self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
            self.critic = layer_init(nn.Linear(512, 1), std=1)

    def features(self, x):
        """x: uint8, shape (n, stack_num, 84, 84). Returns float32 (n, 512).

        Scaled to [0, 1] in channels-last layout (the one conversion pass
        does both): oneDNN's convolutions run ~1.4x faster on it on CPU.
        """
        return self.network(x.to(torch.float32, memory_format=torch.channels_last).div_(255.0))

    def get_value(self, x):
        """x: uint8, shape (n, stack_num, 84, 84). Returns float32 (n,)."""
        return self.critic(self.features(x)).squeeze(-1)

    def get_action_and_value(self, x, action=None):
        hidden = self.features(x)
        dist = Categorical(logits=self.actor(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(hidden).squeeze(-1)


class Rollout:
    """Per-env timelines: row ``t[e]`` of column ``e`` is env e's transition
    being collected (its observation stored, maybe its action chosen).

    Capacity: a rollout takes ``num_steps * num_envs`` results in batches of
    ``batch_size`` distinct envs, so no env holds more than
    ``num_steps * num_envs / batch_size`` transitions; one more row holds the
    transition in flight (or the next observation) when the rollout ends.
    """

    def __init__(self, args, batch_size: int, obs_shape, device):
        n = args.num_envs
        self.capacity = args.num_steps * n // batch_size + 1
        self.obs = torch.zeros((self.capacity, n, *obs_shape), dtype=torch.uint8, device=device)
        self.actions = np.zeros((self.capacity, n), np.int64)
        self.logprobs = np.zeros((self.capacity, n), np.float32)
        self.values = np.zeros((self.capacity, n), np.float32)
        self.rewards = np.zeros((self.capacity, n), np.float32)
        self.dones = np.zeros((self.capacity, n), np.float32)   # the transition ended its episode
        self.t = np.zeros(n, np.int64)                          # each env's current row
        self.acted = np.zeros(n, bool)                          # an action is in flight for row t

    def complete(self, ids, reward, done):
        """Records the results of the actions in flight for ``ids``; returns how many."""
        acted = self.acted[ids]   # False for a reset's result
        ids = ids[acted]
        rows = self.t[ids]
        self.rewards[rows, ids] = reward[acted]
        self.dones[rows, ids] = done[acted]
        self.t[ids] += 1
        self.acted[ids] = False
        return ids.size

    def act(self, ids, action, logprob, value):
        """Records the actions chosen for the current rows of ``ids``."""
        rows = self.t[ids]
        self.actions[rows, ids] = action
        self.logprobs[rows, ids] = logprob
        self.values[rows, ids] = value
        self.acted[ids] = True

    def restart(self):
        """Moves each env's current row (in flight, or the next observation) to row 0."""
        envs, rows = np.arange(self.t.size), self.t
        dev = self.obs.device
        self.obs[0] = self.obs[torch.from_numpy(rows).to(dev), torch.from_numpy(envs).to(dev)]
        for a in (self.actions, self.logprobs, self.values):
            a[0] = a[rows, envs]
        self.t[:] = 0

    def advantages(self, gamma, lam):
        """GAE along each env's timeline; row ``t[e]`` holds the bootstrap value."""
        adv = np.zeros_like(self.values)
        last = np.zeros(self.t.size, np.float32)
        for i in reversed(range(int(self.t.max()))):
            live = 1.0 - self.dones[i]
            delta = self.rewards[i] + gamma * self.values[i + 1] * live - self.values[i]
            last = np.where(i < self.t, delta + gamma * lam * live * last, 0.0)
            adv[i] = last
        return adv


class HostToDevice:
    """Puts a batch of observations (a read-only view into the ring) on the device.

    CPU: no copy (the view wrapped as a tensor). CUDA: one copy into a reused
    pinned buffer, then a non-blocking copy to the GPU. The pinned buffer is
    reused only after the caller has synchronised with the GPU (the actions'
    ``.cpu()``), so the previous copy out of it has finished.
    """

    def __init__(self, batch_size: int, obs_shape, device):
        self.device = device
        if device.type == "cuda":
            self.pinned = torch.empty((batch_size, *obs_shape), dtype=torch.uint8, pin_memory=True)
            self.on_device = torch.empty((batch_size, *obs_shape), dtype=torch.uint8, device=device)

    def __call__(self, obs: np.ndarray) -> torch.Tensor:
        with warnings.catch_warnings():
            # The ring is read-only; nothing here writes through the tensor.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            host = torch.from_numpy(obs)
        if self.device.type == "cpu":
            return host
        self.pinned.copy_(host)
        return self.on_device.copy_(self.pinned, non_blocking=True)


def collect(env, agent, ro: Rollout, size: int, to_device, log_games=None) -> int:
    """Steps the pool until ``size`` transitions are completed; returns how many.

    Each result is stored at its env's row (``info["env_id"]``), in whatever
    order the batches come. The envs of the last batch are left waiting, their
    value stored as GAE's bootstrap; the other envs keep their action in flight.
    """
    device = ro.obs.device
    collected = 0
    while collected < size:
        obs, reward, terminated, truncated, info = env.recv()
        ids = info["env_id"].astype(np.int64)
        collected += ro.complete(ids, reward, terminated | truncated)
        rows = ro.t[ids]
        x = to_device(obs)
        ro.obs[torch.from_numpy(rows).to(device), torch.from_numpy(ids).to(device)] = x  # the one copy
        if log_games is not None and "episode" in info:
            log_games(info, collected)
        with torch.no_grad():
            if collected >= size:
                ro.values[rows, ids] = agent.get_value(x).cpu().numpy()
                break
            action, logprob, _, value = agent.get_action_and_value(x)
        ro.act(ids, action.cpu().numpy(), logprob.cpu().numpy(), value.cpu().numpy())
        env.send(ro.actions[rows, ids], ids)
    return collected


def ppo_update(agent, optimizer, args, ro: Rollout, device):
    """CleanRL's PPO update on every completed transition of the rollout."""
    adv = ro.advantages(args.gamma, args.gae_lambda)
    valid = np.arange(ro.capacity)[:, None] < ro.t[None, :]
    rows, envs = np.nonzero(valid)
    b_obs = ro.obs[torch.from_numpy(rows).to(device), torch.from_numpy(envs).to(device)]
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a[rows, envs])).to(device)  # noqa: E731
    b_actions, b_logprobs, b_values = as_t(ro.actions), as_t(ro.logprobs), as_t(ro.values)
    b_adv = as_t(adv)
    b_returns = b_adv + b_values
    n = rows.size
    for _ in range(args.update_epochs):
        for mb in np.array_split(np.random.permutation(n), args.num_minibatches):
            mb = torch.from_numpy(mb).to(device)
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions[mb])
            logratio = newlogprob - b_logprobs[mb]
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()
            mb_adv = b_adv[mb]
            if args.norm_adv:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio,
                                -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
            if args.clip_vloss:
                v_clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb],
                                                       -args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2,
                                         (v_clipped - b_returns[mb]) ** 2).mean()
            else:
                v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
            entropy_loss = entropy.mean()
            loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and approx_kl > args.target_kl:
            break
    return {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy_loss.item(),
            "approx_kl": approx_kl.item(), "clipfrac": clipfrac.item(), "transitions": n}


def params_sha256(agent) -> str:
    """SHA-256 of every parameter's bytes, in ``state_dict`` order: two runs
    with equal hashes ended with bit-identical models."""
    h = hashlib.sha256()
    for name, tensor in agent.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def plot_curve(episodes, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    if episodes:
        steps, returns = np.array([e[0] for e in episodes]), np.array([e[1] for e in episodes])
        ax.plot(steps, returns, ".", alpha=0.3, label="game")
        k = min(20, len(returns))
        mean = np.convolve(returns, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1:], mean, label=f"mean of last {k} games")
        ax.legend()
    else:  # a run too short to end a game
        ax.text(0.5, 0.5, "no game ended", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("agent steps")
    ax.set_ylabel("game score (raw)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


LOSS_KEYS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


def _last20_text(last20) -> str:
    """The log's mean return of the last 20 games, rounded, and over how many
    games while fewer than 20 have ended."""
    if not last20:
        return "mean_return_last20=None (no game ended yet)"
    mean = f"mean_return_last20={float(np.mean(last20)):.2f}"
    return mean if len(last20) >= 20 else f"{mean} (over {len(last20)} games)"


def write_outputs(args, episodes, last20, global_step, elapsed, agent=None, losses=()) -> dict:
    """Writes summary.json and curve.png (also during the run, so a stopped run leaves them)."""
    summary = {"env_id": args.env_id, "num_envs": args.num_envs,
               "mode": "sync" if args.sync else "double-buffered",
               "batch_order": "fixed" if args.sync else args.batch_order, "seed": args.seed,
               "device": args.device, "agent_steps": global_step, "seconds": round(elapsed, 1),
               "sps": round(global_step / elapsed, 1) if elapsed else None, "games": len(episodes),
               "mean_return_last20": float(np.mean(last20)) if last20 else None,
               "params_sha256": params_sha256(agent) if agent is not None else None,
               "update_losses": [list(u) for u in losses],
               "returns": [r for _, r in episodes],
               "args": vars(args)}
    with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    plot_curve(episodes, os.path.join(args.out_dir, "curve.png"),
               f"PPO, {args.env_id}, {args.num_envs} envs, {summary['mode']}, seed {args.seed}")
    return summary


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():  # before seeding's warnings
        raise SystemExit("--device cuda: torch sees no CUDA device")
    seed_everything(args.seed, deterministic_torch=args.torch_deterministic)
    if args.torch_threads is None and args.device == "cuda":
        args.torch_threads = 1
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    os.makedirs(args.out_dir, exist_ok=True)
    batch_size = args.num_envs if args.sync else args.num_envs // 2

    env = shmatari.make(args.env_id, args.num_envs, batch_size=batch_size, num_workers=args.num_workers,
                        seed=args.seed, zero_copy=True, preset="dqn", autoreset_mode="same_step",
                        max_episode_frames=args.max_episode_frames, batch_order=args.batch_order,
                        start_method=args.start_method)
    obs_shape = env.single_observation_space.shape
    agent = Agent(obs_shape[0], env.single_action_space.n).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    ro = Rollout(args, batch_size, obs_shape, device)
    to_device = HostToDevice(batch_size, obs_shape, device)
    num_updates = args.total_timesteps // args.rollout_size

    episodes, last20, losses = [], deque(maxlen=20), []
    ep_file = open(os.path.join(args.out_dir, "episodes.csv"), "w", newline="")
    up_file = open(os.path.join(args.out_dir, "updates.csv"), "w", newline="")
    ep_csv, up_csv = csv.writer(ep_file), None
    ep_csv.writerow(["global_step", "return", "length", "seconds"])
    global_step, start = 0, time.perf_counter()

    def log_games(info, collected):
        for i in np.flatnonzero(info["_episode"]):
            r, step = float(info["episode"]["r"][i]), global_step + collected
            episodes.append((step, r))
            last20.append(r)
            ep_csv.writerow([step, r, int(info["episode"]["l"][i]), float(info["episode"]["t"][i])])
            print(f"global_step={step} env={info['env_id'][i]} episodic_return={r:g}", flush=True)

    # A scheduler's SIGTERM stops the run as Ctrl-C does: the outputs are still written.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        env.async_reset()
        for update in range(1, num_updates + 1):
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = (1.0 - (update - 1.0) / num_updates) * args.learning_rate
            t0 = time.perf_counter()
            collected = collect(env, agent, ro, args.rollout_size, to_device, log_games)
            global_step += collected
            t1 = time.perf_counter()
            stats = ppo_update(agent, optimizer, args, ro, device)
            losses.append(tuple(stats[k] for k in LOSS_KEYS))
            stats.update(collect_s=round(t1 - t0, 2), update_s=round(time.perf_counter() - t1, 2))
            ro.restart()
            waiting = np.flatnonzero(~ro.acted)   # the last batch's envs: act with the new policy
            if waiting.size:
                with torch.no_grad():
                    x = ro.obs[0, torch.from_numpy(waiting).to(device)]
                    action, logprob, _, value = agent.get_action_and_value(x)
                ro.act(waiting, action.cpu().numpy(), logprob.cpu().numpy(), value.cpu().numpy())
                env.send(ro.actions[0, waiting], waiting)

            elapsed = time.perf_counter() - start
            row = {"update": update, "global_step": global_step, "sps": round(global_step / elapsed, 1),
                   "lr": optimizer.param_groups[0]["lr"], **stats,
                   "mean_return_last20": float(np.mean(last20)) if last20 else None}
            if up_csv is None:
                up_csv = csv.DictWriter(up_file, fieldnames=list(row))
                up_csv.writeheader()
            up_csv.writerow(row)
            up_file.flush()
            ep_file.flush()
            if update % args.write_every == 0:
                write_outputs(args, episodes, last20, global_step, elapsed, agent, losses)
            print(f"update {update}/{num_updates} global_step={global_step} SPS={row['sps']:.0f} "
                  f"pg_loss={stats['policy_loss']:.4f} v_loss={stats['value_loss']:.4f} "
                  f"entropy={stats['entropy']:.3f} collect={stats['collect_s']}s update={stats['update_s']}s "
                  f"{_last20_text(last20)}", flush=True)
    except KeyboardInterrupt:   # stop early, keep what was learnt so far
        print(f"interrupted at global_step={global_step}", flush=True)
    finally:
        env.close()
        ep_file.close()
        up_file.close()

    summary = write_outputs(args, episodes, last20, global_step, time.perf_counter() - start,
                            agent, losses)
    print(json.dumps({k: v for k, v in summary.items()
                      if k not in ("args", "update_losses", "returns")}), flush=True)
    return summary


if __name__ == "__main__":
    main()
