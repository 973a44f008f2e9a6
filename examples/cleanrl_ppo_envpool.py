"""PPO on an Atari game through EnvPool's API, in CleanRL's single-file style.

Written for EnvPool (``import envpool``). To run it on shmatari, change that
one line to ``import shmatari.envpool as envpool``; nothing else.
``tests/integration/test_cleanrl_loop.py`` runs it both ways, and
``benchmarks/cleanrl_loop.py`` times its rollout and update with both.

Hyper-parameters are CleanRL's ``ppo_atari_envpool.py`` defaults (Huang et
al., 2022, "The 37 Implementation Details of PPO"): 8 envs, 128 steps per
rollout, 4 minibatches, 4 epochs, clip 0.1, Nature CNN (Mnih et al., 2015);
the envs use EnvPool's defaults plus ``episodic_life=True`` and
``reward_clip=True``.

    python examples/cleanrl_ppo_envpool.py --env-id Breakout-v5 --total-timesteps 100000

It needs torch and EnvPool (or shmatari, after the one-line change), even
for ``--help``, as CleanRL's script it follows (``python3 -m pip install
'.[integrations]'``, and ``'.[peers]'`` for EnvPool);
``examples/ppo_atari.py --help`` works without it.
"""

import argparse
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical

import envpool


@dataclass
class Args:
    env_id: str = "Breakout-v5"
    seed: int = 1
    total_timesteps: int = 10_000_000
    learning_rate: float = 2.5e-4
    num_envs: int = 8
    num_steps: int = 128
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.1
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches


class EpisodeReturns(gym.Wrapper):
    """Game returns from EnvPool's ``info["reward"]`` (unclipped) and
    ``info["terminated"]`` (the game, not the life, is over)."""

    def __init__(self, env):
        super().__init__(env)
        self.num_envs = env.num_envs
        self.single_action_space = env.single_action_space
        self.single_observation_space = env.single_observation_space
        self.game_return = np.zeros(self.num_envs)
        self.game_length = np.zeros(self.num_envs, np.int64)

    def reset(self, **kwargs):
        self.game_return[:] = 0
        self.game_length[:] = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_return += info["reward"]
        self.game_length += 1
        over = info["terminated"].astype(bool) | truncated
        info["game_return"] = np.where(over, self.game_return, np.nan)
        info["game_length"] = np.where(over, self.game_length, 0)
        self.game_return[over] = 0
        self.game_length[over] = 0
        return obs, reward, terminated, truncated, info


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Nature CNN torso with a policy and a value head."""

    def __init__(self, n_actions: int, channels: int = 4):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(channels, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def get_value(self, x):
        return self.critic(self.network(x / 255.0))

    def get_action_and_value(self, x, action=None):
        hidden = self.network(x / 255.0)
        probs = Categorical(logits=self.actor(hidden))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)


def make_envs(args: Args):
    envs = envpool.make(args.env_id, env_type="gymnasium", num_envs=args.num_envs,
                        episodic_life=True, reward_clip=True, seed=args.seed)
    envs = EpisodeReturns(envs)
    assert isinstance(envs.action_space, gym.spaces.Discrete), "discrete actions only"
    return envs


class PPO:
    """The rollout and the update of CleanRL's loop, as two calls."""

    def __init__(self, args: Args, envs):
        self.args, self.envs = args, envs
        torch.manual_seed(args.seed)
        self.agent = Agent(envs.single_action_space.n, envs.single_observation_space.shape[0])
        self.optimizer = optim.Adam(self.agent.parameters(), lr=args.learning_rate, eps=1e-5)
        shape = (args.num_steps, args.num_envs)
        self.obs = torch.zeros(shape + envs.single_observation_space.shape)
        self.actions = torch.zeros(shape + envs.single_action_space.shape)
        self.logprobs, self.rewards = torch.zeros(shape), torch.zeros(shape)
        self.dones, self.values = torch.zeros(shape), torch.zeros(shape)
        next_obs, _ = envs.reset()
        self.next_obs = torch.Tensor(next_obs)
        self.next_done = torch.zeros(args.num_envs)
        self.global_step = 0
        self.game_returns: list[float] = []

    def rollout(self) -> None:
        args = self.args
        for step in range(args.num_steps):
            self.global_step += args.num_envs
            self.obs[step] = self.next_obs
            self.dones[step] = self.next_done
            with torch.no_grad():
                action, logprob, _, value = self.agent.get_action_and_value(self.next_obs)
                self.values[step] = value.flatten()
            self.actions[step] = action
            self.logprobs[step] = logprob
            next_obs, reward, terminated, truncated, info = self.envs.step(action.cpu().numpy())
            self.rewards[step] = torch.tensor(reward).view(-1)
            self.next_obs = torch.Tensor(next_obs)
            self.next_done = torch.Tensor(np.logical_or(terminated, truncated).astype(np.float32))
            finished = info["game_return"][~np.isnan(info["game_return"])]
            self.game_returns.extend(finished.tolist())

    def update(self, iteration: int, num_iterations: int) -> dict:
        args, agent = self.args, self.agent
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            self.optimizer.param_groups[0]["lr"] = frac * args.learning_rate
        with torch.no_grad():
            next_value = agent.get_value(self.next_obs).reshape(1, -1)
            advantages = torch.zeros_like(self.rewards)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal, nextvalues = 1.0 - self.next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - self.dones[t + 1], self.values[t + 1]
                delta = self.rewards[t] + args.gamma * nextvalues * nextnonterminal - self.values[t]
                advantages[t] = lastgaelam = (
                    delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam)
            returns = advantages + self.values
        b_obs = self.obs.reshape((-1,) + self.envs.single_observation_space.shape)
        b_logprobs, b_actions = self.logprobs.reshape(-1), self.actions.reshape(-1)
        b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
        b_values = self.values.reshape(-1)
        b_inds = np.arange(args.batch_size)
        for _ in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb = b_inds[start:start + args.minibatch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_obs[mb], b_actions.long()[mb])
                ratio = (newlogprob - b_logprobs[mb]).exp()
                mb_adv = b_advantages[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(
                    ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
                newvalue = newvalue.view(-1)
                v_clipped = b_values[mb] + torch.clamp(
                    newvalue - b_values[mb], -args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2,
                                         (v_clipped - b_returns[mb]) ** 2).mean()
                loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                self.optimizer.step()
        return {"pg_loss": pg_loss.item(), "v_loss": v_loss.item(),
                "entropy": entropy.mean().item()}


def _bool(text: str) -> bool:
    """A bool flag's value: anything but these is refused (a typo such as
    ``--anneal-lr ture`` read as False until 2026-12-06: a newcomer's pass)."""
    value = {"1": True, "true": True, "yes": True, "0": False, "false": False,
             "no": False}.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true/false, 1/0 or yes/no, got {text!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in vars(Args()).items():
        kind = _bool if isinstance(default, bool) else type(default)
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=default)
    args = Args(**vars(parser.parse_args()))
    np.random.seed(args.seed)
    envs = make_envs(args)
    ppo = PPO(args, envs)
    num_iterations = max(1, args.total_timesteps // args.batch_size)
    start = time.time()
    for iteration in range(1, num_iterations + 1):
        ppo.rollout()
        losses = ppo.update(iteration, num_iterations)
        recent = ppo.game_returns[-10:]
        print(f"iteration={iteration} global_step={ppo.global_step} "
              f"SPS={int(ppo.global_step / (time.time() - start))} "
              f"games={len(ppo.game_returns)} "
              f"mean_return={np.mean(recent) if recent else float('nan'):.2f} "
              f"pg_loss={losses['pg_loss']:.4f} v_loss={losses['v_loss']:.4f}", flush=True)
    envs.close()


if __name__ == "__main__":
    main()
