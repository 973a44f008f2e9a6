"""``shmatari-check``: proves that a seeded rollout replays bit for bit, however it is run.

One rollout (a game, a pool seed, a number of agent steps, a seeded random
policy, env options) is run several ways, and each env's stream of
observations, rewards, ``terminated``/``truncated`` flags and info
(``_check_rollout.info_row``: every per-env array but ``env_id``, and
``episode``'s ``r`` and ``l``) is hashed:

- ``rerun``: twice as is;
- ``workers``: with ``num_workers`` N and 1;
- ``fork``, ``spawn``: with those start methods against the default one;
- ``async``: synchronously and through the async API (``batch_size`` <
  ``num_envs``, results in completion order, reassembled by ``env_id``);
- ``fixed``: the same async run with ``batch_order="fixed"`` (the order a
  training run replays in; left out by default where ``batch_size`` does
  not divide ``num_envs``);
- ``reseed``: a pool made with seed S + 1 that plays ``RESEED_WARMUP``
  steps (an episode ends in most, so a next game is prepared), then
  ``reset(seed=S)``, against the pool made with seed S: the path of
  Stable-Baselines3's and PufferLib's seeded resets;
- ``fast_reset``: fast resets (:mod:`shmatari.fast_reset`: a saved
  post-reset state and saved no-op starts restored) on and off, with games
  cut at :data:`FAST_RESET_EPISODE_STEPS` agent steps so that each env
  starts many (two runs of their own, not the reference; ``n/a`` where no
  reset would be fast: the game's fast reset not proven here, or
  ``fast_reset="off"`` in the options);
- ``pipe``: through shmatari and through the pipe baseline (which resets as
  ALE does; it needs OpenCV);
- ``seed``: the other way round, that the streams do depend on the pool
  seed: two runs, pool seeds S and S + 1, every env given env 0's actions,
  must show no pattern of alike streams (:func:`seed_pairing_verdict`). It
  catches the classic seeding bugs: a seed the envs ignore (env *i* plays
  one stream under both seeds), ``seed + i`` (env *i* + 1 under S plays env
  *i*'s under S + 1), an env index that does not reach the seeds, and a
  random state the workers inherit from the parent (envs of the same rank
  in different workers alike). Where the options draw two things from the
  seed, sticky actions (``repeat_action_probability`` > 0) and no-op starts
  (``noop_max`` > 1), the pairing also runs each source alone (two runs
  with ``noop_max=0``, with at least :data:`SEED_SOURCE_ENVS` envs, and two
  with ``repeat_action_probability=0``), so that a source that ignored the
  seed could not pass behind the other (a reproducibility audit,
  2026-12-07: an ALE seed or a no-op generator that ignored the pool seed
  passed the pairing, the streams told apart by the other source).

Every other variant is compared with the reference run (shmatari,
synchronous, N workers, the default start method), one verdict line per
pairing. Each run makes its pool with the parent's global ``random`` and
``numpy.random`` state set differently (and put back after), so a stream
that depended on it would differ. On a difference the line names the first
agent step, env and field that diverge (step 0 is the reset observation).
The summary counts the reference run's episode ends: only with some do the
streams cover autoreset, the resets after the first and the episode
statistics, and a ``NOTE`` line says so when there are none. The exit
status is 0 only when every pairing holds (agrees, or is not applicable);
``--json FILE`` writes the report.

The policy: env *i*'s *k*-th action is the *k*-th draw of
``numpy.random.default_rng(shmatari.seeding.worker_seed(policy_seed, i))``
over the game's actions, so the action an env receives does not depend on
the order in which results arrive.

Every env option works, ``preset`` too. The autoreset mode is the pool's:
with ``"next_step"`` the reset result is the step after a done step; with
``"same_step"`` a done step's ``obs`` field hashes its ``final_obs`` and then
the next episode's first observation; with ``"disabled"`` the rollout resets
the ended envs with ``reset(options={"reset_mask": done})`` (``async_reset``
in the async run) and hashes the same two observations, so same-step and
disabled streams are identical. The pipe baseline implements each mode
itself; it does not render, so its run leaves ``render_mode`` out
(observations do not depend on it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import random as _random
import sys
import zlib
import time
import types
import warnings
from collections.abc import Sequence

import numpy as np
from gymnasium.vector import AutoresetMode

from . import _cli, config as _config, seeding
from ._bench_backends import peer_available, plural
from ._check_rollout import (FIELDS, _rollout_async, _rollout_sync, _Streams, policy_actions,
                             stream_hashes)
from ._progress import Progress

__all__ = ["check_reproducibility", "stream_hashes", "policy_actions", "first_divergence",
           "CheckReport", "RunResult", "PairingResult", "PAIRINGS", "FIELDS", "main"]

#: The pairings, by key: each compares the reference run with one variant.
PAIRINGS = ("rerun", "workers", "fork", "spawn", "async", "fixed", "reseed", "fast_reset", "pipe",
            "seed")

#: Verdicts of a pairing that holds: its streams agree (for ``seed``: no
#: pattern of them is alike), or (``"n/a"``) the options leave nothing random
#: for a seed to change, or too few envs to tell chance from a pattern.
PASSING = ("agree", "n/a")

#: Steps the reseed pairing's pool plays under its first seed before
#: ``reset(seed=S)``: random play ends a Breakout game in about 170.
RESEED_WARMUP = 200

#: The fast_reset pairing's episode cap (``max_episode_steps``, or the
#: options' own where lower): a game every 10 agent steps gives each env
#: about 30 new games in the default 300 steps, each a fast reset and a
#: restored no-op start (a reproducibility pass, 2026-12-06, planted three
#: one-line bugs in fast_reset.py that the default run's four episode ends
#: let through).
FAST_RESET_EPISODE_STEPS = 10


# -- comparing ------------------------------------------------------------------------

def first_divergence(a: np.ndarray, b: np.ndarray) -> dict | None:
    """Where two runs' streams first differ.

    Args:
        a, b: per-(env, step, field) digests, shape ``(num_envs, steps + 1,
            len(FIELDS))``; step 0 is the reset.

    Returns:
        None if they agree, else ``{"step", "env", "field"}``: the earliest
        step at which any env differs, the lowest such env, and its first
        differing field in :data:`FIELDS` order.
    """
    diff = a != b
    if not diff.any():
        return None
    step = int(np.flatnonzero(diff.any(axis=(0, 2)))[0])
    env = int(np.flatnonzero(diff[:, step].any(axis=1))[0])
    field = FIELDS[int(np.flatnonzero(diff[env, step])[0])]
    return {"step": step, "env": env, "field": field}


@dataclasses.dataclass(frozen=True)
class _Plan:
    name: str
    label: str
    backend: str = "shmatari"
    num_workers: int | None = None
    start_method: str | None = None
    batch_size: int | None = None
    drop: tuple = ()  # env options this run leaves out
    seed: int | None = None  # the pool seed, where not the check's
    same_actions: bool = False  # every env given env 0's actions
    batch_order: str | None = None  # make()'s, where not its default
    reseed_from: int | None = None  # made with this seed, played, then reset(seed=the check's)
    overrides: tuple = ()  # (option, value) pairs over the check's options
    num_envs: int | None = None  # the run's envs, where not the check's


@dataclasses.dataclass
class RunResult:
    """One way of running the rollout.

    Attributes:
        name: ``reference``, ``rerun``, ``one_worker``, ``fork``, ``spawn``,
            ``async`` or ``pipe``.
        label: how it ran, in words.
        env_hashes: each env's stream SHA-256 (hex); None if the run failed.
        seconds: wall time, pool start and close included.
        error: the exception, as text, if the run failed.
        unseeded_policy: True if its actions came from the global NumPy RNG.
        episode_ends: per env, the steps of its stream that ended an episode
            (terminated or truncated); None if the run failed.
    """

    name: str
    label: str
    env_hashes: list | None = None
    seconds: float = 0.0
    error: str | None = None
    unseeded_policy: bool = False
    digests: np.ndarray | None = dataclasses.field(default=None, repr=False)
    episode_ends: list | None = None

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("label", "env_hashes", "error", "episode_ends")}
        d["seconds"] = round(self.seconds, 3)
        if self.unseeded_policy:
            d["unseeded_policy"] = True
        return d


@dataclasses.dataclass
class PairingResult:
    """The verdict on one pairing.

    Attributes:
        key: one of :data:`PAIRINGS`.
        title: the pairing in words.
        runs: the runs' names (reference first; the ``seed`` pairing's
            two, then two per random source run alone).
        verdict: ``"agree"``, ``"differ"`` or ``"error"``; the ``seed``
            pairing's: ``"agree"`` (no pattern of alike streams), ``"shared"`` or
            ``"n/a"`` (:func:`seed_pairing_verdict`); the ``fast_reset``
            pairing's ``"n/a"`` where no reset would be fast (``note`` says
            why; neither run is made).
        first_divergence: ``{"step", "env", "field"}`` when they differ (step
            0 is the reset observation, step *k* follows the *k*-th action).
        differing_envs: the envs whose whole streams differ.
        error: why the pairing could not be judged.
        shared: the ``seed`` pairing's alike streams, ``[seed, env, seed,
            env]`` each.
        note: the ``seed`` pairing's verdict in words; why a pairing is
            ``"n/a"``.
    """

    key: str
    title: str
    runs: tuple
    verdict: str
    first_divergence: dict | None = None
    differing_envs: list = dataclasses.field(default_factory=list)
    error: str | None = None
    shared: list = dataclasses.field(default_factory=list)
    note: str | None = None

    def line(self, num_envs: int) -> str:
        """The verdict as one line of text."""
        if self.key == "seed" and self.verdict != "error":
            label = {"agree": "agree", "n/a": "n/a", "shared": "SHARED"}[self.verdict]
            return f"{label:<8}{self.title}: {self.note}"
        if self.verdict == "n/a":
            return f"n/a     {self.title}: {self.note}"
        if self.verdict == "agree":
            return (f"agree   {self.title}: "
                    + ("the env stream is identical" if num_envs == 1 else
                       f"all {num_envs} env streams identical"))
        if self.verdict == "error":
            return f"ERROR   {self.title}: {self.error}"
        d = self.first_divergence
        where = "at reset" if d["step"] == 0 else f"at agent step {d['step']}"
        return (f"DIFFER  {self.title}: first divergence {where}, env {d['env']}, field "
                f"{d['field']}; {len(self.differing_envs)} of {num_envs} env streams differ")

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["runs"] = list(self.runs)
        return d


@dataclasses.dataclass
class CheckReport:
    """What :func:`check_reproducibility` found.

    Attributes:
        config: the rollout (game, seeds, steps, options, pool shapes).
        runs: :class:`RunResult` by name.
        pairings: one :class:`PairingResult` per pairing, in order.
        seconds: wall time of the whole check.
        interrupted: True if Ctrl-C stopped it; ``pairings`` then holds the
            pairings whose two runs had finished.
        planned: how many pairings were asked for.
    """

    config: dict
    runs: dict
    pairings: list
    seconds: float
    interrupted: bool = False
    planned: int | None = None

    @property
    def ok(self) -> bool:
        """True when every pairing ran and holds (:data:`PASSING`)."""
        return not self.interrupted and all(p.verdict in PASSING for p in self.pairings)

    @property
    def episode_ends(self) -> int | None:
        """How many steps of the reference run ended an episode, all envs
        together (where only the fast_reset or seed pairing ran, of its
        first run; None if none ran): with 0, the streams compared hold no
        autoreset, no reset after the first and no episode statistic."""
        ref = next((self.runs[n] for n in ("reference", "fast_on", "seed_a") if n in self.runs),
                   None)
        return None if ref is None or ref.episode_ends is None else int(sum(ref.episode_ends))

    def lines(self) -> list[str]:
        """One verdict line per pairing, a note for a default pairing left
        out and one if no episode ended, then a summary line."""
        n = self.config["num_envs"]
        out = [p.line(n) for p in self.pairings]
        agree = sum(p.verdict == "agree" for p in self.pairings)
        na = sum(p.verdict == "n/a" for p in self.pairings)
        failed = sum(p.verdict == "error" for p in self.pairings)
        c = self.config
        ends = self.episode_ends
        left_out = c.get("left_out")
        if left_out:
            out.append(f"NOTE    not run: {left_out}")
        if ends == 0:
            out.append(f"NOTE    no env ended an episode in {c['steps']} step"
                       f"{'s' * (c['steps'] != 1)}: no autoreset, no later reset and no "
                       f"episode statistic was compared; raise --steps (steps=) until the "
                       f"summary counts episode ends, or cap episodes with "
                       f"-o max_episode_steps=N")
        what = (f"{c['game']}, {n} env{'s' * (n != 1)} x {c['steps']} step"
                f"{'s' * (c['steps'] != 1)}, "
                + ("" if ends is None else f"{ends} episode end{'s' * (ends != 1)}, ")
                + f"seed {c['seed']}, {self.seconds:.1f} s")
        total = len(self.pairings)
        if self.interrupted:
            out.append(f"shmatari-check: interrupted after {total} of "
                       f"{self.planned or total} pairing{'s' * ((self.planned or total) != 1)}"
                       f" ({agree} agree; {what})")
        elif self.ok and na:
            out.append(f"shmatari-check: {agree} of {total} pairing{'s' * (total > 1)} "
                       f"{'agree' if agree != 1 else 'agrees'}, {na} not applicable ({what})")
        elif self.ok:
            out.append(f"shmatari-check: {'all ' * (total > 1)}{total} pairing"
                       f"{'s agree' if total > 1 else ' agrees'} ({what})")
        else:
            differ = total - agree - na - failed
            bad = ([f"{differ} of {total} pairing{'s' * (total > 1)} "
                    f"{'does' if differ == 1 else 'do'} not agree"] if differ else [])
            if failed:
                noun = "" if differ else f" pairing{'s' * (total > 1)}"
                bad.append(f"{failed} of {total}{noun} could not run")
            out.append(f"shmatari-check: {', '.join(bad)} ({what})")
        return out

    def as_dict(self) -> dict:
        """The report as JSON-ready types, with the machine it ran on."""
        from . import __version__
        from .bench import machine_info

        return {
            "tool": "shmatari-check",
            "shmatari": __version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "ok": self.ok,
            "interrupted": self.interrupted,
            "episode_ends": self.episode_ends,
            "config": self.config,
            "step_meaning": "step 0 is the reset observation; step k follows the k-th action",
            "fields": list(FIELDS),
            "pairings": [p.as_dict() for p in self.pairings],
            "runs": {name: r.as_dict() for name, r in self.runs.items()},
            "seconds": round(self.seconds, 3),
            "machine": machine_info(),
        }


@contextlib.contextmanager
def _no_group_warning():
    """Silences a pool's warning about uneven worker groups in first-ready
    batches (``config.uneven_groups``): how often each env is stepped does not change its
    stream, which is all the check compares."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"num_envs=\d+ over num_workers=")
        yield


def _plans(num_workers: int, batch_size: int, pairings: Sequence[str], options: dict,
           seeds: tuple = (0, 1), seed_sources: Sequence[tuple] = ()):
    """The runs needed and the (key, title, variant) of each pairing (the
    ``seed`` and ``fast_reset`` pairings' variant is the second of their
    two runs; ``seed_sources``: :func:`_seed_sources`, each a pair of runs
    more for the ``seed`` pairing)."""
    # The pipe baseline does not render; rendering changes no observation, so
    # its run leaves render_mode out and the pairing still compares the streams.
    no_render = options.get("render_mode") is not None
    default = _config.default_start_method()
    ref = _Plan("reference", f"shmatari, sync, {num_workers} workers, {default}",
                num_workers=num_workers, start_method=default)
    variants = {
        "rerun": ("twice as is", dataclasses.replace(ref, name="rerun")),
        "workers": (f"num_workers {num_workers} vs 1",
                    _Plan("one_worker", f"shmatari, sync, 1 worker, {default}",
                          num_workers=1, start_method=default)),
        "fork": (f"start method {default} vs fork",
                 _Plan("fork", f"shmatari, sync, {num_workers} workers, fork",
                       num_workers=num_workers, start_method="fork")),
        "spawn": (f"start method {default} vs spawn",
                  _Plan("spawn", f"shmatari, sync, {num_workers} workers, spawn",
                        num_workers=num_workers, start_method="spawn")),
        "async": (f"sync vs async (batch_size {batch_size})",
                  _Plan("async", f"shmatari, async, batch_size {batch_size}, "
                                 f"{num_workers} workers, {default}",
                        num_workers=num_workers, start_method=default, batch_size=batch_size)),
        "fixed": (f"sync vs async in fixed order (batch_size {batch_size})",
                  _Plan("fixed", f"shmatari, async, batch_size {batch_size}, batch_order "
                                 f"fixed, {num_workers} workers, {default}",
                        num_workers=num_workers, start_method=default, batch_size=batch_size,
                        batch_order="fixed")),
        "reseed": (f"make(seed={seeds[0]}) vs make(seed={seeds[1]}), {RESEED_WARMUP} steps, "
                   f"reset(seed={seeds[0]})",
                   dataclasses.replace(ref, name="reseed", reseed_from=seeds[1],
                                       label=f"shmatari, sync, {num_workers} workers, seed "
                                             f"{seeds[1]}, {RESEED_WARMUP} steps, then "
                                             f"reset(seed={seeds[0]})")),
        "fast_reset": _fast_reset_pair(ref, num_workers, options),
        "pipe": ("shmatari vs pipe baseline",
                 _Plan("pipe", f"pipe baseline, 1 process per env, {default}"
                               + (", without render_mode (it does not render)" * no_render),
                       backend="pipe", start_method=default,
                       drop=("render_mode",) * no_render)),
        "seed": (f"pool seeds {seeds[0]} and {seeds[1]}, every env given env 0's actions",
                 dataclasses.replace(ref, name="seed_b", seed=seeds[1], same_actions=True,
                                     label=f"shmatari, sync, {num_workers} workers, seed "
                                           f"{seeds[1]}, env 0's actions in every env")),
    }
    pairs = [(key, variants[key][0], variants[key][1]) for key in PAIRINGS if key in pairings]
    # the reference, where a pairing compares with it (seed and fast_reset
    # have two runs of their own: alone, a reference run was made for
    # nothing, and its episode ends were counted: a review, 2026-12-06)
    runs = [ref] if any(key not in ("seed", "fast_reset") for key, _, _ in pairs) else []
    for key, _, plan in pairs:
        if key == "fast_reset":
            runs.append(dataclasses.replace(
                plan, name="fast_on", label=plan.label.replace("fast_reset='off'",
                                                               "fast_reset='auto'"),
                overrides=(("fast_reset", "auto"),) + plan.overrides[1:]))
        if key == "seed":
            runs.append(dataclasses.replace(plan, name="seed_a", seed=seeds[0], label=(
                f"shmatari, sync, {num_workers} workers, seed {seeds[0]}, env 0's actions "
                f"in every env")))
        runs.append(plan)
        if key == "seed":
            for name, what, overrides, n in seed_sources:
                for tag, s in zip("ab", seeds):
                    runs.append(dataclasses.replace(
                        plan, name=f"seed_{name}_{tag}", seed=s, overrides=overrides,
                        num_envs=n, label=f"shmatari, sync, {num_workers} workers, "
                                          f"{n} envs, seed {s}, {what}, env 0's actions in "
                                          f"every env"))
    return runs, pairs


#: The least envs of the seed pairing's run of sticky actions alone: two
#: streams are alike by chance at most once in 2 there, and a pattern must
#: be one chance makes at most :data:`SEED_FALSE_ALARM` of the time.
SEED_SOURCE_ENVS = 14

#: Sticky repeats a stream must be expected to hold (steps x frame_skip x
#: repeat_action_probability) before streams of sticky actions alone are
#: judged: with fewer, most are alike whatever the seed (a review: one
#: step, or repeat_action_probability 1e-4, failed a correct build).
SEED_STICKY_MIN_REPEATS = 20


def _sticky_repeats(cfg: _config.EnvConfig, steps: int) -> float:
    """The sticky repeats a stream of ``steps`` agent steps is expected to hold."""
    return steps * cfg.frame_skip * cfg.repeat_action_probability


def _seed_sources(cfg: _config.EnvConfig, steps: int) -> list[tuple]:
    """The seed pairing's runs of one random source alone, ``(name, in
    words, overrides, num_envs)`` each: none unless the options draw both
    sticky actions and no-op counts from the seed; sticky actions alone
    only where a stream is expected to show :data:`SEED_STICKY_MIN_REPEATS`
    repeats."""
    if cfg.game == _config.NULL_ENV or cfg.repeat_action_probability <= 0 or cfg.noop_max <= 1:
        return []
    sources = [("noops", "no-op starts alone (repeat_action_probability 0)",
                (("repeat_action_probability", 0.0),), cfg.num_envs)]
    if _sticky_repeats(cfg, steps) >= SEED_STICKY_MIN_REPEATS:
        sources.insert(0, ("sticky", "sticky actions alone (noop_max 0)", (("noop_max", 0),),
                           max(cfg.num_envs, SEED_SOURCE_ENVS)))
    return sources


def _fast_reset_episode_steps(options: dict) -> int:
    """The fast_reset pairing's ``max_episode_steps``: the options' own
    where lower than :data:`FAST_RESET_EPISODE_STEPS`."""
    own = options.get("max_episode_steps")
    return FAST_RESET_EPISODE_STEPS if own is None else min(int(own), FAST_RESET_EPISODE_STEPS)


def _fast_reset_pair(ref: _Plan, num_workers: int, options: dict) -> tuple:
    """The fast_reset pairing's title and second run (fast resets off; its
    first, ``fast_on``, is the same with ``fast_reset="auto"``): games cut
    short (:data:`FAST_RESET_EPISODE_STEPS`) so that each env makes many
    new games from varied states."""
    k = _fast_reset_episode_steps(options)
    return (f"fast resets on vs off, games cut at {k} agent steps",
            dataclasses.replace(ref, name="fast_off", overrides=(
                ("fast_reset", "off"), ("max_episode_steps", k)),
                label=f"shmatari, sync, {num_workers} workers, max_episode_steps {k}, "
                      f"fast_reset='off'"))


def _fast_reset_unused(cfg: _config.EnvConfig) -> str | None:
    """Why no reset of the check's pools would be fast (the fast_reset
    pairing is then n/a), or None."""
    from . import fast_reset

    if cfg.game == _config.NULL_ENV:
        return "the null env emulates nothing: no reset to make fast"
    if cfg.fast_reset == "off":
        return "the options turn fast resets off (fast_reset='off')"
    if not fast_reset.use_fast_reset(cfg):  # the pool's own rule
        return (f"{cfg.game} resets as ALE does here: its fast reset is not proven for this "
                f"ROM, ale-py version and repeat_action_probability "
                f"{cfg.repeat_action_probability:g} (shmatari.fast_reset)")
    return None


@contextlib.contextmanager
def _main_script_hidden():
    """Hides the caller's ``__main__`` module from the processes the check starts.

    multiprocessing's spawn and forkserver children run the parent's main
    script again (``multiprocessing.spawn.get_preparation_data`` names it by
    its ``__spec__`` or ``__file__``): a script that called the check without
    an ``if __name__ == "__main__":`` guard ran the whole check again in every
    worker of the spawn run and every process of the pipe run. The check's
    runs need nothing of that script (their options are plain values, and
    every process runs shmatari's own functions), so while they run,
    ``sys.modules["__main__"]`` is a bare module with neither: the children
    start from shmatari's modules alone, as the zygote's workers do.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is None:  # an embedding interpreter may have none
            sys.modules.pop("__main__", None)
        else:
            sys.modules["__main__"] = main


def _ticker(bar, before: int, label: str):
    """``tick(steps_done_in_this_run)`` for a run that starts after ``before`` steps."""
    return lambda done: bar.update(before + done, label)


@contextlib.contextmanager
def _parent_random_state(name: str):
    """The global ``random`` and ``numpy.random`` states seeded from the run's
    ``name`` while its pool starts, and put back after: each run's workers
    start from a different parent state (one a fork copies), so a stream
    that depended on it would differ between the runs."""
    saved = _random.getstate(), np.random.get_state()
    k = zlib.crc32(name.encode())
    _random.seed(k)
    np.random.seed(k)
    try:
        yield
    finally:
        _random.setstate(saved[0])
        np.random.set_state(saved[1])


def _execute(plan: _Plan, game: str, num_envs: int, seed: int, steps: int,
             options: dict, policy, tick) -> RunResult:
    from .baselines import make_pipe
    from .env import make

    result = RunResult(plan.name, plan.label)
    options = {k: v for k, v in options.items() if k not in plan.drop}
    options.update(plan.overrides)
    seed = seed if plan.seed is None else plan.seed
    num_envs = num_envs if plan.num_envs is None else plan.num_envs
    t0 = time.perf_counter()
    try:
        with _parent_random_state(plan.name):
            if plan.backend == "pipe":
                env = make_pipe(game, num_envs, seed=seed, start_method=plan.start_method,
                                **options)
            else:
                order = {} if plan.batch_order is None else {"batch_order": plan.batch_order}
                with _no_group_warning():
                    env = make(game, num_envs,
                               seed=seed if plan.reseed_from is None else plan.reseed_from,
                               num_workers=plan.num_workers, batch_size=plan.batch_size,
                               start_method=plan.start_method, **order, **options)
        with env:
            actions = policy(int(env.single_action_space.n))
            if plan.same_actions:
                actions = np.repeat(actions[:1], num_envs, axis=0)
            streams = _Streams(num_envs, steps)
            reset_seed = None
            if plan.reseed_from is not None:
                # games under the other seed first, with actions of their own
                _play(env, np.random.default_rng(plan.reseed_from).integers(
                    0, int(env.single_action_space.n), (num_envs, RESEED_WARMUP)))
                reset_seed = seed
            if plan.batch_size is not None and plan.batch_size < num_envs:
                _rollout_async(env, actions, streams, tick)
            else:
                _rollout_sync(env, actions, streams, tick, reset_seed=reset_seed)
        result.env_hashes, result.digests = streams.hexdigests(), streams.digests
        result.episode_ends = streams.ends.tolist()
    except Exception as exc:  # noqa: BLE001 - a failed run is a verdict, not a crash
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - t0
    return result


def _play(env, actions: np.ndarray) -> None:
    """Resets a synchronous pool and steps it with ``actions`` (shape
    ``(num_envs, steps)``), in any autoreset mode; nothing is recorded."""
    env.reset()
    disabled = env.metadata["autoreset_mode"] is AutoresetMode.DISABLED
    for k in range(actions.shape[1]):
        _, _, terminated, truncated, _ = env.step(actions[:, k])
        if disabled and (terminated | truncated).any():
            env.reset(options={"reset_mask": terminated | truncated})


def _judge(key: str, title: str, ref: RunResult, other: RunResult) -> PairingResult:
    runs = (ref.name, other.name)
    failed = [r for r in (ref, other) if r.error]
    if failed:
        why = "; ".join(f"{r.name} run failed: {r.error}" for r in failed)
        return PairingResult(key, title, runs, "error", error=why)
    where = first_divergence(ref.digests, other.digests)
    if where is None:
        return PairingResult(key, title, runs, "agree")
    envs = [e for e, (x, y) in enumerate(zip(ref.env_hashes, other.env_hashes)) if x != y]
    return PairingResult(key, title, runs, "differ", first_divergence=where, differing_envs=envs)


#: The seed pairing's bound on a false alarm: a pattern of alike streams
#: fails it only if chance makes that pattern at most this often (six
#: patterns: at most 6e-4 a check in all).
SEED_FALSE_ALARM = 1e-4


def seed_pairing_verdict(hashes_a: Sequence[str], hashes_b: Sequence[str], seeds: tuple,
                         repeat_action_probability: float, noop_max: int,
                         random: bool = True,
                         groups: Sequence[range] | None = None,
                         sticky_repeats: float | None = None) -> tuple[str, str, list]:
    """The ``seed`` pairing's verdict on two runs with pool seeds ``seeds``
    whose every env was given the same actions.

    Args:
        hashes_a, hashes_b: each env's stream SHA-256, one list per run.
        seeds: the two runs' pool seeds.
        repeat_action_probability, noop_max: the pool's options. Two envs'
            streams can be alike only if their games start with the same
            no-op count (1..``noop_max``, about once in ``noop_max`` pairs),
            and, with sticky actions, only while no repeat drawn from the
            seed has shown (a short stream: a few steps). So a pair is alike
            by chance at most once in ``noop_max`` (once in 2 with no no-op
            starts and sticky actions; with neither, nothing is random).
        random: False for an env with nothing random (the null env).
        groups: the runs' worker groups (``EnvConfig.worker_groups``), for
            the pattern of a random state the workers inherit.
        sticky_repeats: the sticky repeats a stream is expected to hold
            (steps x frame_skip x repeat_action_probability; None: not
            known). With no-op starts off (``noop_max`` <= 1), fewer than
            :data:`SEED_STICKY_MIN_REPEATS` leave the streams alike whatever
            the seed: ``"n/a"``.

    Returns:
        ``(verdict, text, shared)``: ``"agree"`` (no pattern of a seeding
        bug), ``"shared"`` or ``"n/a"`` (nothing random, or fewer envs than
        a pattern needs to be told from chance), what the line says, and the
        alike pairs ``[[seed, env, seed, env], ...]``.

    A pattern fails only if chance makes it at most
    :data:`SEED_FALSE_ALARM` of the time (each of its pairs alike at most
    once in ``noop_max``, independently): every stream of both runs alike
    (neither the seed nor the env index reaches the envs); under each seed
    every env alike (the index does not); env *i* alike under both seeds
    (the seed ignored); env *i* + 1 under one seed alike env *i* under the
    other (an env seed of ``seed + i``); envs of the same rank in different
    workers alike (the workers start from one random state, as a parent's
    forked into them). One alike pair in no such pattern passes, as chance
    makes it.
    """
    n = len(hashes_a)
    (sa, sb), h = seeds, {"a": list(hashes_a), "b": list(hashes_b)}
    seed_of = {"a": sa, "b": sb}
    sticky = repeat_action_probability > 0
    if not random or (not sticky and noop_max <= 1):
        why = ("the null env draws nothing from its seed" if not random else
               f"with repeat_action_probability 0 and noop_max {noop_max} nothing in a "
               f"stream is random, so no seed can change it")
        return "n/a", why, []
    if noop_max <= 1 and sticky_repeats is not None and \
            sticky_repeats < SEED_STICKY_MIN_REPEATS:
        return "n/a", (f"with noop_max {noop_max} a stream is random through its sticky "
                       f"repeats alone, and {sticky_repeats:.3g} are expected in it (steps x "
                       f"frame_skip x repeat_action_probability), too few to tell a seed "
                       f"ignored from chance: {SEED_STICKY_MIN_REPEATS} or more"), []
    chance = 1 / noop_max if noop_max > 1 else 0.5  # a pair alike at most this often
    need = math.ceil(math.log(SEED_FALSE_ALARM) / math.log(chance) - 1e-9)
    if n < need:
        return "n/a", (f"a pair of streams may be alike by chance once in "
                       f"{round(1 / chance)} (games that start with the same no-op count"
                       + (", before a sticky repeat shows" if sticky else "")
                       + f"), and {plural(n, 'env')} are too few to tell a seed ignored "
                         f"from chance: {need} or more"), []
    ranks = []
    if groups is not None and len(groups) > 1:
        first = groups[0]
        ranks = [(r, first.start + k, r, g.start + k) for g in groups[1:]
                 for k in range(min(len(first), len(g))) for r in "ab"]
    patterns = [
        ([("a", 0, "a", i) for i in range(1, n)] + [("a", 0, "b", i) for i in range(n)],
         "every env under both seeds plays one stream: neither the pool seed nor the env "
         "index reaches the envs"),
        ([(r, 0, r, i) for r in "ab" for i in range(1, n)], "under each seed every env "
         "plays one stream: the env index does not reach the envs' seeds"),
        ([("a", i, "b", i) for i in range(n)], "each env plays the same stream under both "
         "seeds: the pool seed is ignored"),
        ([("a", i + 1, "b", i) for i in range(n - 1)], f"env i + 1 under seed {sa} plays env "
         f"i's stream under seed {sb}: an env seed of seed + i?"),
        ([("a", i, "b", i + 1) for i in range(n - 1)], f"env i under seed {sa} plays env "
         f"i + 1's stream under seed {sb}: an env seed of seed + i?"),
        (ranks, "envs of the same rank in different workers play one stream: the workers "
         "start from one random state (a parent's, forked into them?)"),
    ]
    shared = [[seed_of[r], e, seed_of[q], f] for r, e, q, f in
              [("a", e, "a", f) for e in range(n) for f in range(e + 1, n)]
              + [("b", e, "b", f) for e in range(n) for f in range(e + 1, n)]
              + [("a", e, "b", f) for e in range(n) for f in range(n)]
              if h[r][e] == h[q][f]]
    for pairs, why in patterns:
        if len(pairs) >= need and all(h[r][x] == h[q][y] for r, x, q, y in pairs):
            return "shared", f"{why} ({plural(len(shared), 'pair')} alike)", shared
    return "agree", (f"all {2 * n} env streams distinct" if not shared else
                     f"{plural(len(shared), 'pair')} of env streams alike, in no pattern "
                     f"of a seeding bug (a pair may be alike by chance once in "
                     f"{round(1 / chance)})"), shared


def _judge_seed(title: str, a: RunResult, b: RunResult, seeds: tuple,
                cfg: _config.EnvConfig, steps: int,
                sources: Sequence[tuple] = ()) -> PairingResult:
    """The seed pairing's verdict: on its two runs, then on each pair of
    runs of one random source alone (``sources``: ``(name, in words,
    overrides, num_envs, run_a, run_b)``); the first that fails decides,
    and its ``shared`` pairs are of the runs the note names."""
    judged = [(None, cfg, a, b)]
    for name, what, overrides, n, ra, rb in sources:
        judged.append((what, dataclasses.replace(cfg, num_envs=n, **dict(overrides)), ra, rb))
    runs = tuple(r.name for _, _, ra, rb in judged for r in (ra, rb))
    failed = [r for _, _, ra, rb in judged for r in (ra, rb) if r.error]
    if failed:
        why = "; ".join(f"{r.name} run failed: {r.error}" for r in failed)
        return PairingResult("seed", title, runs, "error", error=why)
    verdicts, notes, shared_all = [], [], []
    for what, c, ra, rb in judged:
        verdict, text, shared = seed_pairing_verdict(
            ra.env_hashes, rb.env_hashes, seeds, c.repeat_action_probability, c.noop_max,
            random=c.game != _config.NULL_ENV, groups=c.worker_groups(),
            sticky_repeats=_sticky_repeats(c, steps))
        text = text if what is None else (
            f"with {what}, {plural(c.num_envs, 'env')} (runs {ra.name}, {rb.name}): {text}")
        if verdict == "shared":
            return PairingResult("seed", title, runs, verdict, shared=shared, note=text)
        verdicts.append(verdict)
        notes.append(text)
        shared_all += shared if what is None else []
    if sources and not any(s[0] == "sticky" for s in sources):
        notes.append(f"sticky actions alone not run: {_sticky_repeats(cfg, steps):.3g} "
                     f"repeats expected in a stream (steps x frame_skip x "
                     f"repeat_action_probability), too few to judge: "
                     f"{SEED_STICKY_MIN_REPEATS} or more")
    # agree where every source was judged; n/a where one had too few envs
    verdict = "agree" if all(v == "agree" for v in verdicts) else "n/a"
    return PairingResult("seed", title, runs, verdict, shared=shared_all, note="; ".join(notes))


def check_reproducibility(game: str = "Breakout", *, num_envs: int = 4, steps: int = 300,
                          seed: int = 0, policy_seed: int | None = None,
                          num_workers: int | None = None, batch_size: int | None = None,
                          pairings: Sequence[str] | None = None, progress: bool = False,
                          unseeded_policy: str | None = None, **options) -> CheckReport:
    """Runs one seeded rollout several ways and checks every env's stream agrees.

    See the module docstring for the runs and pairings. Each run starts a
    fresh pool and closes it; the check takes seconds at its defaults.

    Args:
        game: the game, as :func:`shmatari.make` takes it.
        num_envs: envs per run (>= 2, so that workers and batches can vary).
        steps: agent steps per env.
        seed: the pool seed (the ``seed`` pairing's second run takes the
            next one, or the one before at 2**128 - 1).
        policy_seed: the policy's seed (default ``seed``); see :func:`policy_actions`.
        num_workers: N for every shmatari run but ``one_worker`` (2..num_envs;
            default: the cores available, at least 2, at most ``num_envs``).
        batch_size: the async run's batch (1..num_envs - 1; default ``num_envs // 2``).
        pairings: keys of :data:`PAIRINGS` to run (default all).
        progress: show a progress bar on stderr.
        unseeded_policy: **test only**, to see a failure: the pairing key
            of a run (``"rerun"``, ``"workers"``, ``"fork"``, ``"spawn"``,
            ``"async"``, ``"fixed"``, ``"reseed"``, ``"fast_reset"``,
            ``"pipe"``; the run's name, ``"one_worker"`` or ``"fast_off"``, too)
            whose actions are drawn from NumPy's global RNG, the caller's
            state (the check seeds it only while a pool starts, and puts it
            back), so that run diverges from the reference.
        **options: env options, as :func:`shmatari.make` (``preset`` too).
            Every ``autoreset_mode`` works: the rollout resets ended envs with
            a mask under ``"disabled"``, and with ``"same_step"`` (and
            ``"disabled"``) a done step's ``obs`` field covers its own
            observation and then the next episode's first one. The pipe run
            leaves ``render_mode`` out (the baseline does not render).

    The processes the runs start (the spawn run's workers, the pipe run's)
    do not import the caller's main script, so a script need not guard the
    call with ``if __name__ == "__main__":``.

    Returns:
        CheckReport: ``report.ok`` is True when every pairing holds
        (agrees; for ``seed``, no pattern of alike streams, or not applicable);
        ``report.episode_ends`` counts the reference run's steps that ended
        an episode (0: ``steps`` too few to compare any reset after the first).

    Raises:
        TypeError: an argument of the wrong type, or an unknown option.
        ValueError: an unknown game, pairing or run, or a value out of range.
            Both are raised before any process starts.
        ModuleNotFoundError: the ``pipe`` pairing asked for (``pairings``)
            without OpenCV (``cv2``), before any process starts; by default
            the pairing is left out there, said in a NOTE line.
    """
    asked = pairings is not None
    pairings = PAIRINGS if pairings is None else tuple(pairings)
    unknown = [p for p in pairings if p not in PAIRINGS]
    if unknown:
        raise ValueError(f"unknown pairing(s) {unknown}; choose from {', '.join(PAIRINGS)}")
    varying = [p for p in ("workers", "async", "fixed") if p in pairings]
    # The minimum depends on the pairings: checked here, once, so that the
    # message gives the minimum that applies (2 with workers or async).
    num_envs = _config._int("num_envs", num_envs, 1 - 2**63)
    if num_envs < 1 and not varying:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if num_envs < 2 and varying:
        named = (" and ".join(varying) if len(varying) < 3
                 else f"{', '.join(varying[:-1])} and {varying[-1]}")
        raise ValueError(f"num_envs must be >= 2 for the {named} pairing"
                         f"{'s' * (len(varying) > 1)} (so that num_workers and batch_size can "
                         f"vary), got {num_envs}; the other pairings "
                         f"({', '.join(p for p in PAIRINGS if p not in varying)}) take 1")
    if num_workers is None:
        num_workers = min(num_envs, max(2, _config.available_cores()))
    if batch_size is None:
        batch_size = max(1, num_envs // 2)
    cfg = _config.build_config(game, num_envs, num_workers=num_workers, batch_size=batch_size,
                               seed=seed, **options)
    if cfg.num_workers < 2 and "workers" in pairings:
        raise ValueError(f"num_workers must be >= 2 (it is compared with 1), got {num_workers}")
    if cfg.batch_size >= cfg.num_envs and "async" in pairings:
        raise ValueError(f"batch_size must be < num_envs ({cfg.num_envs}) for the async run, "
                         f"got {cfg.batch_size}")
    left_out = None
    if "fixed" in pairings and (cfg.batch_size >= cfg.num_envs or cfg.num_envs % cfg.batch_size):
        if not asked:  # by default, where it cannot run: said in a NOTE line
            pairings = tuple(p for p in pairings if p != "fixed")
            left_out = (f"the fixed pairing (batch_order 'fixed' needs a batch_size < "
                        f"num_envs that divides it: {cfg.batch_size} and {cfg.num_envs})")
        else:
            raise ValueError(f"the fixed pairing needs a batch_size < num_envs that divides "
                             f"it ({cfg.num_envs}), got {cfg.batch_size}")
    steps = _config._int("steps", steps, 1)
    # the pairings that can run without OpenCV, as a way out (fixed only where it can run)
    fixed_runs = cfg.batch_size < cfg.num_envs and cfg.num_envs % cfg.batch_size == 0
    rest = ([p for p in pairings if p != "pipe"] or
            [p for p in PAIRINGS if p != "pipe" and (p != "fixed" or fixed_runs)])
    # OpenCV, which the pipe baseline's classic workers resize with: the
    # bench's own test of the pipe row
    if "pipe" in pairings and cfg.game != _config.NULL_ENV and peer_available("pipe"):
        if not asked:
            # by default, left out and said in a NOTE line, as the bench skips
            # its pipe row: a plain install's shmatari-check exited 2, "bad
            # arguments", with none given (a newcomer's pass, 2026-12-06)
            pairings = tuple(p for p in pairings if p != "pipe")
            left_out = "; ".join(filter(None, [left_out, (
                "the pipe pairing (the pipe baseline's classic workers resize with OpenCV, "
                "not installed here: python3 -m pip install opencv-python-headless, or "
                "shmatari's check extra)")]))
        else:
            # a plain install failed here after the other runs, with the
            # worker's ModuleNotFoundError (a newcomer's pass)
            raise ModuleNotFoundError(
                "the pipe pairing needs OpenCV, which the pipe baseline's classic workers "
                "resize with: python3 -m pip install opencv-python-headless (or shmatari's "
                "check extra; any one OpenCV package will do), or leave the pairing out "
                f"(--pairings {','.join(rest)})", name="cv2")
    if policy_seed is None:
        policy_seed = cfg.seed
    policy_seed = seeding.check_seed(policy_seed, "policy_seed")
    # the seed pairing's second seed: the next one (the one before, at the top)
    seeds = (cfg.seed, cfg.seed + 1 if cfg.seed + 1 < 1 << seeding.SEED_BITS else cfg.seed - 1)
    sources = _seed_sources(cfg, steps) if "seed" in pairings else []
    plans, pairs = _plans(cfg.num_workers, cfg.batch_size, pairings, options, seeds, sources)
    fast_unused = _fast_reset_unused(cfg) if "fast_reset" in pairings else None
    if fast_unused is not None:  # judged n/a, with neither run made
        plans = [p for p in plans if p.name not in ("fast_on", "fast_off")]
    # the runs an unseeded policy may take (each the second of its pairing)
    names = [p.name for p in plans
             if p.name not in ("reference", "fast_on") and not p.name.startswith("seed_")]
    # the pairing's key names its variant run too (workers: the one-worker run)
    run_of = {"workers": "one_worker", "fast_reset": "fast_off"}
    asked_run, unseeded_policy = unseeded_policy, run_of.get(unseeded_policy, unseeded_policy)
    if unseeded_policy is not None and unseeded_policy not in names:
        key_of = {run: key for key, run in run_of.items()}
        keys = ", ".join(key_of.get(n, n) for n in names) or "none"
        na = (f"; the fast_reset pairing is n/a here ({fast_unused})"
              if unseeded_policy == "fast_off" and fast_unused is not None else "")
        raise ValueError(f"unseeded_policy (--unseeded-policy) must name a pairing run here "
                         f"({keys}), got {asked_run!r}{na}")

    def seeded(n_actions):
        return policy_actions(cfg.num_envs, steps, n_actions, policy_seed)

    def unseeded(n_actions):
        return np.random.randint(0, n_actions, (cfg.num_envs, steps))

    t0 = time.perf_counter()
    runs, interrupted = {}, False
    with Progress(progress, "shmatari-check") as shown, _main_script_hidden():
        bar = shown.bar(steps * len(plans), "runs")
        try:
            for i, plan in enumerate(plans):
                bar.update(i * steps, plan.label)
                tick = _ticker(bar, i * steps, plan.label)
                runs[plan.name] = _execute(plan, cfg.game, cfg.num_envs, cfg.seed, steps,
                                           options, unseeded if plan.name == unseeded_policy
                                           else seeded, tick)
                runs[plan.name].unseeded_policy = plan.name == unseeded_policy
        except KeyboardInterrupt:  # the run's pool is closed; judge what finished
            interrupted = True
    first = {"seed": "seed_a", "fast_reset": "fast_on"}
    verdicts = []
    for key, title, plan in pairs:
        if key == "fast_reset" and fast_unused is not None:
            if not interrupted:  # no run: none named
                verdicts.append(PairingResult(key, title, (), "n/a", note=fast_unused))
        elif first.get(key, "reference") in runs and plan.name in runs:
            a = runs[first.get(key, "reference")]
            if key != "seed":
                verdicts.append(_judge(key, title, a, runs[plan.name]))
            elif all(f"seed_{s[0]}_{t}" in runs for s in sources for t in "ab"):
                verdicts.append(_judge_seed(title, a, runs[plan.name], seeds, cfg, steps, [
                    (*s, runs[f"seed_{s[0]}_a"], runs[f"seed_{s[0]}_b"]) for s in sources]))
    config = {"game": cfg.game, "num_envs": cfg.num_envs, "steps": steps, "seed": cfg.seed,
              "policy_seed": policy_seed, "num_workers": cfg.num_workers,
              "batch_size": cfg.batch_size, "start_method": _config.default_start_method(),
              "options": cfg.env_options(), "pairings": list(pairings),
              "left_out": left_out}
    return CheckReport(config, runs, verdicts, time.perf_counter() - t0, interrupted,
                       len(pairs))


# -- the command line -------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = _cli.ArgumentParser(
        prog="shmatari-check", formatter_class=_cli.HelpFormatter, allow_abbrev=False,
        description="Runs one seeded rollout several ways (twice, 1 and N workers, fork and "
                    "spawn, sync and async, fast resets on and off, shmatari and the pipe "
                    "baseline) and checks that "
                    "every env's stream of observations, rewards, flags and info is "
                    "identical; and under two pool seeds, that no two streams are alike.",
        epilog="Exit status: 0 when every pairing agrees, 1 otherwise, 2 on bad arguments, "
               "130 after Ctrl-C, 143 after SIGTERM (the pairings that finished are "
               "printed). The pairings but seed check that the stream does not depend on "
               "how it is run; seed, that it depends on the pool seed (seeds S and S + 1, "
               "the same actions in every env: no pattern of alike streams). That it depends on "
               "the options, compare the env_hashes of two --json reports (the default and "
               "-o repeat_action_probability=0: every env's differs).")
    _cli.add_version(p)
    p.add_argument("--game", default="Breakout", help="game")
    p.add_argument("--num-envs", type=_cli.integer, default=4,
                   help="envs per run (>= 2 with the workers or async pairings, else >= 1)")
    p.add_argument("--steps", type=_cli.positive_int, default=None,
                   help="agent steps per env (default 300; not with --train)")
    p.add_argument("--seed", type=_cli.nonnegative_int, default=0, help="pool seed")
    p.add_argument("--policy-seed", type=_cli.nonnegative_int, default=None,
                   help="seed of the random policy (default: --seed)")
    p.add_argument("--num-workers", type=_cli.positive_int, default=None,
                   help="workers N, compared with 1 (default: cores, at least 2, at most envs)")
    p.add_argument("--batch-size", type=_cli.positive_int, default=None,
                   help="batch of the async run (default num_envs // 2)")
    p.add_argument("--pairings", default=None,
                   help=f"comma-separated subset of {','.join(PAIRINGS)} (default: all)")
    p.add_argument("--preset", choices=sorted(_config.PRESETS), default=None,
                   help="a named set of env options (docs/semantics.md); -o options override it")
    p.add_argument("-o", "--option", action="append", type=_cli.env_option, default=[],
                   metavar="KEY=VALUE",
                   help="env option, repeatable, parsed by its type: -o grayscale=false "
                        "-o repeat_action_probability=0 -o max_episode_frames=none")
    p.add_argument("--json", metavar="FILE", default=None, help="write the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--train", action="store_true",
                   help="instead: train a short PPO (needs torch) with 1 worker, N workers, and "
                        "N workers beside a busy loop, and compare each update's losses and "
                        "the final parameters (shmatari.train_check)")
    p.add_argument("--train-updates", type=_cli.positive_int, default=None,
                   help="--train: PPO updates per run (default 3)")
    p.add_argument("--train-batch-order", default=None, choices=("fixed", "first_ready"),
                   help="--train: the pool's batch order (default fixed; first_ready shows "
                        "a failure)")
    p.add_argument("--torch-threads", type=_cli.positive_int, default=None,
                   help="--train: torch.set_num_threads in every run (default 1)")
    p.add_argument("--unseeded-policy", metavar="RUN", default=None,
                   help="test only: RUN (a pairing: rerun, workers, fork, spawn, async, fixed, "
                        "reseed, fast_reset, pipe) draws "
                        "its actions from the unseeded global NumPy RNG, to show a failure")
    p.word_hint = _cli.game_word_hint
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The ``shmatari-check`` console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    _cli.check_output_path(parser, "--json", args.json)
    with _cli.stop_on_sigterm(), _cli.survive_closed_stdout():
        return _main(parser, args)


#: Flags of the rollout check alone, and of ``--train`` alone, by dest.
_ROLLOUT_ONLY = {"steps": "--steps", "policy_seed": "--policy-seed",
                 "batch_size": "--batch-size", "pairings": "--pairings", "preset": "--preset",
                 "option": "-o/--option", "unseeded_policy": "--unseeded-policy"}
_TRAIN_ONLY = {"train_updates": "--train-updates", "train_batch_order": "--train-batch-order",
               "torch_threads": "--torch-threads"}


def _refuse_other_mode(parser, args) -> None:
    """One mode's flags given to the other are refused: they would be
    ignored (a --train run with -o options checks the default options)."""
    if args.train:
        given = [flag for dest, flag in _ROLLOUT_ONLY.items() if getattr(args, dest)]
        if given:
            parser.error(f"--train does not take {', '.join(given)}: it trains with its "
                         f"own fixed env options and policy (shmatari.train_check), and "
                         f"takes --game, --num-envs, --seed, --num-workers, "
                         f"{', '.join(_TRAIN_ONLY.values())}")
    else:
        given = [flag for dest, flag in _TRAIN_ONLY.items() if getattr(args, dest) is not None]
        if given:
            parser.error(f"{', '.join(given)}: only with --train (they would be ignored)")


def _main(parser, args) -> int:
    _refuse_other_mode(parser, args)
    if args.train:
        return _main_train(parser, args)
    if args.steps is None:
        args.steps = 300
    options = dict(args.option)
    if args.preset is not None:
        options["preset"] = args.preset
    try:
        report = check_reproducibility(
            args.game, num_envs=args.num_envs, steps=args.steps, seed=args.seed,
            policy_seed=args.policy_seed, num_workers=args.num_workers,
            batch_size=args.batch_size,
            # an empty --pairings "" is an empty list (refused), not every
            # pairing (a fuzzing pass)
            pairings=None if args.pairings is None else [p.strip() for p in
                                                         args.pairings.split(",")],
            progress=not args.quiet, unseeded_policy=args.unseeded_policy, **options)
    except ModuleNotFoundError as exc:  # OpenCV, for the pipe pairing
        print(f"shmatari-check: {exc}", file=sys.stderr)
        return 2
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:  # before the first run began
        print("shmatari-check: interrupted", file=sys.stderr)
        return _cli.interrupted_status()
    return _print_report(report, args)


def _print_report(report, args) -> int:
    """Prints a report's lines, writes its JSON (``--json``) and returns the
    exit status: 0 if it passed, 1 if not, 130 if cut short by Ctrl-C (143
    by SIGTERM)."""
    for line in report.lines():
        print(line, flush=True)
    if args.json:
        _cli.write_json(args.json, report.as_dict())
    if getattr(report, "interrupted", False):
        print("shmatari-check: interrupted", file=sys.stderr)
        return _cli.interrupted_status()
    return 0 if report.ok else 1


def _main_train(parser, args) -> int:
    """``shmatari-check --train``: see :mod:`shmatari.train_check`."""
    from . import train_check

    def progress(name):
        if not args.quiet:
            print(f"train: {name} run ...", file=sys.stderr, flush=True)

    try:
        report = train_check.check_training(
            args.game, num_envs=args.num_envs, updates=args.train_updates or 3,
            seed=args.seed, num_workers=args.num_workers,
            batch_order=args.train_batch_order or "fixed",
            torch_threads=args.torch_threads or 1, progress=progress)
    except ImportError as exc:
        print(f"shmatari-check: {exc}", file=sys.stderr)
        return 2
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        print("shmatari-check: interrupted", file=sys.stderr)
        return _cli.interrupted_status()
    return _print_report(report, args)


if __name__ == "__main__":
    sys.exit(main())
