"""EnvPool's Atari API on a shmatari pool: ``import shmatari.envpool as envpool``.

A script written for EnvPool's Gymnasium API (``examples/cleanrl_ppo_envpool.py``)
runs with only its import changed. :func:`make` takes EnvPool's
task ids (``"Breakout-v5"``), option names, units and **defaults** (EnvPool
1.2.5: ``envpool/atari/atari_env.h`` ``AtariEnvFns::DefaultConfig`` and
``envpool/core/env_spec.h``), and returns :class:`EnvPoolAdapter`, which has
EnvPool's single-env ``action_space`` / ``observation_space``, its ``info``
keys (``env_id``, ``players``, ``lives``, ``reward``, ``terminated``,
``elapsed_step``), ``reset(env_id)``, ``send`` / ``recv`` / ``async_reset``
and the ``config`` / ``spec`` dicts. Underneath is a :class:`shmatari.ShmVectorEnv`.

``make(..., env_type="gym")`` gives EnvPool 0.6-0.8's gym 0.2x API instead
(:class:`GymEnvPoolAdapter`: obs-only ``reset``, 4-tuple ``step`` with
``dones``, ``info["TimeLimit.truncated"]``), which CleanRL's EnvPool scripts
(``ppo_atari_envpool.py``, ``pqn_atari_envpool.py``, ``ppo_rnd_envpool.py``,
the async JAX ones) are written for: they too run with only the import changed.

Where shmatari's frame-level rules differ from EnvPool's (the FIRE reset, the
continuation after a lost life, the frame a done step shows, random streams),
the option is mapped to the nearest shmatari rule and docs/migration.md says
what differs. Options shmatari has no rule for raise ``ValueError`` naming
the nearest equivalent.
"""

from __future__ import annotations

import difflib
import functools
import re
import warnings
from typing import Any

import numpy as np

from . import config as _config
from . import games
from ._envpool_adapter import EnvPoolAdapter, EnvSpec, GymEnvPoolAdapter
from .env import make as _make

__all__ = ["make", "make_gymnasium", "make_gym", "make_dm", "make_spec", "list_all_envs",
           "EnvPoolAdapter", "GymEnvPoolAdapter", "EnvSpec", "DEFAULT_CONFIG"]

#: EnvPool 1.2.5's defaults for an Atari task: the core's (env_spec.h), the
#: Atari env's (atari_env.h) and the registration's (``max_episode_steps``).
#: ``batch_size=0`` means ``num_envs`` (synchronous); ``num_threads=0`` means
#: ``min(batch_size, cores)``; ``seed`` env i is seeded with ``seed + i`` there.
DEFAULT_CONFIG = {
    "num_envs": 1,
    "batch_size": 0,
    "num_threads": 0,
    "max_num_players": 1,
    "thread_affinity_offset": -1,
    "seed": 42,
    "gym_reset_return_info": True,
    "max_episode_steps": 27000,
    "stack_num": 4,
    "frame_skip": 4,
    "noop_max": 30,
    "zero_discount_on_life_loss": False,
    "episodic_life": False,
    "reward_clip": False,
    "use_fire_reset": True,
    "img_height": 84,
    "img_width": 84,
    "mode": -1,
    "difficulty": -1,
    "full_action_space": False,
    "repeat_action_probability": 0.0,
    "use_inter_area_resize": True,
    "gray_scale": True,
}

#: EnvPool 0.6-0.8's defaults for ``env_type="gym"`` where they differ:
#: ``reset()`` returns the observations alone.
_GYM_DEFAULTS = {"gym_reset_return_info": False}

#: shmatari's own make() arguments that the adapter also accepts.
_SHMATARI_EXTRAS = ("num_workers", "start_method", "zero_copy", "restart_workers", "ram_info",
                    "batch_order", "start_timeout")

#: EnvPool make() keywords with no shmatari rule, and what to use instead.
_REFUSED = {
    "env_seed": "pass one int `seed`: env i then derives its streams from "
                "SeedSequence(seed, spawn_key=(i,)) (shmatari.seeding)",
    "render_mode": "render through shmatari's own pool: shmatari.make(..., "
                   "render_mode='rgb_array').render() gives every env's full-size RGB frame",
    "render_env_id": "shmatari.make(..., render_mode='rgb_array').render() renders every env",
    "render_width": "shmatari renders the game's own screen size only",
    "render_height": "shmatari renders the game's own screen size only",
    "from_pixels": "Atari observations are pixels already",
    "base_path": "ROMs come from ale-py (ale_py.roms); there is no asset path",
    "task": "name the game in task_id, e.g. make('Breakout-v5', ...)",
}


def _ale_version() -> str:
    import ale_py

    return getattr(ale_py, "__version__", "?")


@functools.lru_cache(maxsize=None)
def _action_set(rom: str, full_action_space: bool) -> tuple[int, ...]:
    """The ALE action ids of a game's action set (loads the ROM once, ~0.1 s)."""
    from ale_py import ALEInterface, LoggerMode

    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.loadROM(games.rom_path(rom))
    acts = ale.getLegalActionSet() if full_action_space else ale.getMinimalActionSet()
    return tuple(int(a.value) for a in acts)


def _task_name(rom: str) -> str:
    """EnvPool's task id for an ale-py ROM id: ``ms_pacman`` -> ``MsPacman-v5``."""
    return "".join(part.capitalize() for part in rom.split("_")) + "-v5"


def list_all_envs() -> list[str]:
    """EnvPool's Atari task ids for every ROM ale-py ships (``"Breakout-v5"``, ...).

    EnvPool's own list also holds its other suites (MuJoCo, Procgen, ...);
    shmatari serves Atari only.
    """
    return [_task_name(rom) for rom in games.list_games()]


def _resolve_task(task_id: str) -> str:
    if not isinstance(task_id, str):
        raise TypeError(f"task_id must be a str such as 'Breakout-v5', got {type(task_id).__name__}")
    try:
        rom, _ = games.resolve_quietly(task_id)  # its legacy-id warning is make()'s
    except ValueError as exc:
        if str(exc).startswith("unknown Atari game"):  # suggest task ids, not ROM ids
            tasks = list_all_envs()
            close = difflib.get_close_matches(task_id, tasks, n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise ValueError(f"unknown task {task_id!r}{hint}: shmatari.envpool serves EnvPool's "
                             f"Atari tasks only (list_all_envs() lists the {len(tasks)})") \
                from None
        raise ValueError(f"{exc}. shmatari.envpool serves EnvPool's Atari tasks only "
                         f"('<Game>-v5'; list_all_envs() lists them)") from None
    if task_id not in list_all_envs():
        # EnvPool refuses every id but its own ('Breakout-v5'); so does its
        # drop-in, rather than let 'BreakoutNoFrameskip-v4' suggest that id's
        # conventions while EnvPool's defaults apply.
        raise ValueError(
            f"{task_id!r} is not an EnvPool task id: shmatari.envpool takes EnvPool's own "
            f"({_task_name(rom)!r}; list_all_envs() lists them), with EnvPool's defaults "
            f"(repeat_action_probability=0, use_fire_reset=True, max_episode_steps=27000) "
            f"unless you set them; shmatari.make({task_id!r}, ...) takes Gymnasium's and "
            f"ALE's ids")
    return rom


def _check_keywords(kwargs: dict) -> None:
    for name in kwargs:
        if name in _REFUSED:
            raise ValueError(f"shmatari.envpool does not support EnvPool's {name!r}: "
                             f"{_REFUSED[name]}")
    known = list(DEFAULT_CONFIG) + list(_SHMATARI_EXTRAS)
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        close = {u: difflib.get_close_matches(u, known, n=1) for u in unknown}
        hints = "".join(f" (did you mean {close[u][0]!r} for {u!r}?)"
                        for u in unknown if close[u])
        raise TypeError(f"unknown EnvPool option(s) {unknown} for an Atari task{hints}; "
                        f"known: {', '.join(known)}")


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def _bool(name: str, value: Any) -> bool:
    """A yes/no option as EnvPool's bindings take it: a bool (or NumPy's),
    never a string or a number judged by its truth ("False" is true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool (True or False), got "
                        f"{type(value).__name__} {value!r}")
    return bool(value)


def _build(task_id: str, kwargs: dict, env_type: str = "gymnasium"
           ) -> tuple[EnvSpec, dict, dict]:
    """Validates EnvPool options; returns the spec, shmatari's make() keywords
    and the adapter's own settings."""
    _check_keywords(kwargs)
    rom = _resolve_task(task_id)
    defaults = dict(DEFAULT_CONFIG, **(_GYM_DEFAULTS if env_type == "gym" else {}))
    config = dict(defaults, **{k: v for k, v in kwargs.items() if k in DEFAULT_CONFIG})
    config["task"] = rom
    num_envs = _int("num_envs", config["num_envs"])
    batch_size = _int("batch_size", config["batch_size"])
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if not 0 <= batch_size <= num_envs:
        raise ValueError(f"batch_size must be in [0, num_envs={num_envs}] (0: num_envs), "
                         f"got {batch_size}")
    config["batch_size"] = batch_size = batch_size or num_envs
    seed = config["seed"]
    if isinstance(seed, (list, tuple, np.ndarray)):
        raise ValueError("shmatari.envpool takes one int seed, not a seed per env: "
                         + _REFUSED["env_seed"])
    seed = _int("seed", seed)
    if not -2**31 <= seed < 2**31:
        raise ValueError(f"seed must be an int32 as in EnvPool, got {seed}")
    if not isinstance(config["gym_reset_return_info"], bool):
        raise TypeError(f"gym_reset_return_info must be a bool, got "
                        f"{config['gym_reset_return_info']!r}")
    if config["gym_reset_return_info"] is not True and env_type != "gym":
        raise ValueError("gym_reset_return_info=False is gone from EnvPool 1.2 too: reset() "
                         "returns (obs, info); env_type='gym' (the gym 0.2x API) takes it")
    if _int("max_num_players", config["max_num_players"]) != 1:
        raise ValueError("Atari tasks have one player: max_num_players must be 1")
    for name in ("mode", "difficulty"):
        if _int(name, config[name]) != -1:
            raise ValueError(f"{name}={config[name]}: shmatari plays each game's default "
                             f"{name} only; leave it at -1")
    for name in ("episodic_life", "reward_clip", "use_fire_reset", "full_action_space",
                 "gray_scale", "use_inter_area_resize", "zero_discount_on_life_loss"):
        config[name] = _bool(name, config[name])
    if config["use_inter_area_resize"] is not True:
        raise ValueError("use_inter_area_resize=False (EnvPool's bilinear resize) is not "
                         "supported: shmatari resizes with OpenCV's INTER_AREA only, bit for "
                         "bit; use use_inter_area_resize=True")
    frame_skip = _int("frame_skip", config["frame_skip"])
    noop_max = _int("noop_max", config["noop_max"])
    if noop_max < 1:
        raise ValueError(f"noop_max must be >= 1 (EnvPool draws U[0, noop_max - 1]), got "
                         f"{noop_max}; noop_max=1 with use_fire_reset gives no no-op")
    full = bool(config["full_action_space"])
    action_set = _action_set(rom, full)
    # EnvPool presses FIRE when the action set holds ALE action 1 anywhere;
    # shmatari when FIRE is action index 1 of a set of at least 3 (SB3's rule).
    envpool_fire = bool(config["use_fire_reset"]) and 1 in action_set
    shm_fire = envpool_fire and len(action_set) >= 3 and action_set[1] == 1
    if envpool_fire and not shm_fire:
        warnings.warn(f"{rom}: EnvPool would press FIRE at reset (its action set holds FIRE), "
                      f"shmatari does not (FIRE is not action 1 of at least 3)", UserWarning,
                      stacklevel=3)
    # EnvPool: n ~ U[0, noop_max - 1] + 1 - fire no-op frames, then one FIRE
    # frame if fire: without FIRE, 1..noop_max no-ops (shmatari's noop_max
    # rule exactly); with FIRE, 0..noop_max-1. shmatari cannot draw 0 among
    # others, so with FIRE it takes 1..noop_max-1 (0 when noop_max is 1).
    shm_noop_max = noop_max - 1 if envpool_fire else noop_max
    # EnvPool's cap: agent steps since the game's reset (its no-op and FIRE
    # frames not counted), and no frame cap; shmatari's max_episode_steps
    # is that count (CleanRL's async scripts test elapsed_step against it)
    max_steps = config["max_episode_steps"]
    if max_steps is not None:
        max_steps = _int("max_episode_steps", max_steps)
        if max_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1 (agent steps; None: no limit), "
                             f"got {max_steps}")
    num_threads = _int("num_threads", config["num_threads"])
    if num_threads < 0:
        raise ValueError(f"num_threads must be >= 0 (0: one per core), got {num_threads}")
    num_workers = kwargs.get("num_workers")
    if num_workers is None and num_threads:
        num_workers = min(num_threads, num_envs)
    make_kwargs = dict(
        batch_size=batch_size, num_workers=num_workers, seed=seed % 2**32,
        frame_skip=frame_skip, repeat_action_probability=config["repeat_action_probability"],
        noop_max=shm_noop_max, stack_num=config["stack_num"], img_height=config["img_height"],
        img_width=config["img_width"], grayscale=bool(config["gray_scale"]), maxpool=True,
        episodic_life=bool(config["episodic_life"]), use_fire_reset=shm_fire,
        reward_clip=bool(config["reward_clip"]), full_action_space=full,
        max_episode_frames=None, max_episode_steps=max_steps, autoreset_mode="next_step",
        obs_layout="channels_first",
        **{k: kwargs[k] for k in _SHMATARI_EXTRAS if k in kwargs and k != "num_workers"})
    affinity = _int("thread_affinity_offset", config["thread_affinity_offset"])
    # shmatari's own checks of what the pool would take, before the spec's
    # spaces are built from it: make_spec returned specs that make()
    # refuses (stack_num=0, img_height=1000), or failed in Gymnasium's Box
    # naming no option (stack_num=2.5) (a fuzzing pass)
    _config.build_config(rom, num_envs, **{k: v for k, v in make_kwargs.items()
                                           if k != "start_timeout"})
    spec = EnvSpec(_task_name(rom), config, len(action_set))
    return spec, make_kwargs, {"affinity": affinity}


def make_spec(task_id: str, **kwargs) -> EnvSpec:
    """EnvPool's ``make_spec``: the spec of a pool, without starting one
    (its Gymnasium spaces; EnvPool's ``make_spec`` takes no env_type either).

    Raises:
        As :func:`make`.
    """
    return _build(task_id, kwargs)[0]


def _old_gym() -> bool:
    """Whether the installed ``gym`` (not Gymnasium) is older than 0.26, the
    gym 0.2x API that ``env_type="gym"`` serves (CleanRL's EnvPool scripts
    pin gym 0.23.1). Read from its metadata: gym is not imported."""
    from importlib import metadata

    try:
        version = metadata.version("gym")
    except metadata.PackageNotFoundError:
        return False
    parts = re.match(r"(\d+)\.(\d+)", version or "")
    return parts is not None and (int(parts[1]), int(parts[2])) < (0, 26)


def make(task_id: str, env_type: str = "gymnasium", **kwargs) -> "EnvPoolAdapter":
    """Creates a shmatari pool with EnvPool's ``make`` signature and defaults.

    Args:
        task_id: an EnvPool Atari task id, exactly as EnvPool spells it:
            ``"Breakout-v5"``, ``"MsPacman-v5"`` (other spellings, such as
            ``"ALE/Breakout-v5"`` or ``"breakout"``, are refused, naming the
            EnvPool id).
        env_type: ``"gymnasium"`` (Gymnasium's API: :class:`EnvPoolAdapter`)
            or ``"gym"``: the gym 0.2x API that EnvPool 0.6-0.8 served and
            CleanRL's EnvPool scripts (``ppo_atari_envpool.py``,
            ``pqn_atari_envpool.py``, ``ppo_rnd_envpool.py``, the async JAX
            ones) are written for: :class:`GymEnvPoolAdapter`, a 4-tuple
            ``step`` with ``dones``, ``reset()`` giving the observations
            alone (``gym_reset_return_info=False``, EnvPool 0.x's default),
            ``info["TimeLimit.truncated"]``, and ``gym.spaces`` when ``gym``
            is installed. (EnvPool 1.2's "gym" is Gymnasium's API instead.)
            ``"dm"`` raises.
        **kwargs: EnvPool's options, with its defaults (``DEFAULT_CONFIG``)
            and units. In short (docs/migration.md has every difference):

            - ``num_envs=1``, ``batch_size=0`` (0: num_envs, synchronous);
            - ``num_threads=0``: becomes shmatari's ``num_workers``
              (processes, at most num_envs; 0: one per core);
            - ``thread_affinity_offset=-1``: >= 0 pins worker w to core
              ``(offset + w) % os.cpu_count()``, as EnvPool pins thread w;
            - ``seed=42`` (int32): the pool seed; env i derives its streams
              from ``SeedSequence(seed, spawn_key=(i,))``, not ``seed + i``;
            - ``max_episode_steps=27000`` agent steps: shmatari's
              ``max_episode_steps``, the same count (the step whose
              ``elapsed_step`` reaches it is truncated; no-op and FIRE reset
              frames not counted) and no frame cap, as EnvPool (before
              2026-12-04 it became ``max_episode_frames = max_episode_steps *
              frame_skip``, which truncated up to ``ceil(noop_max /
              frame_skip)`` steps earlier: CleanRL's async scripts, which test
              ``elapsed_step >= max_episode_steps``, never saw it);
            - ``stack_num=4``, ``frame_skip=4``, ``img_height=84``,
              ``img_width=84``, ``episodic_life=False``, ``reward_clip=False``,
              ``full_action_space=False``, ``repeat_action_probability=0.0``;
            - ``gray_scale=True``; False gives RGB channels first,
              ``(num_envs, 3 * stack_num, H, W)``, as EnvPool;
            - ``noop_max=30``: EnvPool draws U[0, noop_max - 1] no-op
              frames then FIRE with the FIRE reset, U[1, noop_max] without
              it; the adapter passes ``noop_max - 1`` (FIRE) or ``noop_max``
              on, so shmatari draws U[1, noop_max - 1] with FIRE (a count of
              0 never comes, noop_max=1: no no-op at all) and U[1, noop_max]
              without (docs/migration.md);
            - ``use_fire_reset=True``: FIRE at each reset on games whose
              action set has it (shmatari presses it for one agent step);
            - ``zero_discount_on_life_loss``: accepted; it changes only
              dm_env's ``discount``, which the Gymnasium API does not return;
            - ``use_inter_area_resize=True`` only; ``mode``, ``difficulty``
              -1 only; ``gym_reset_return_info`` True only, except with
              ``env_type="gym"`` (default False there);
            - shmatari's ``num_workers``, ``start_method``, ``zero_copy``,
              ``restart_workers``, ``start_timeout`` are accepted too; ``ram_info=True``:
              EnvPool's ``info["ram"]`` (uint8, ``(batch, 128)``), which
              EnvPool always gives and shmatari on request; and ``batch_order``:
              ``"first_ready"`` (default: EnvPool's async contract, whichever
              ``batch_size`` envs finish first) or ``"fixed"`` (groups in a
              documented order, so that an async training run replays; see
              :func:`shmatari.make`).

    Returns:
        EnvPoolAdapter (``GymEnvPoolAdapter`` with ``env_type="gym"``): call
        ``reset()`` (or ``async_reset()``) first.

    Raises:
        TypeError: an unknown option or one of the wrong type.
        ValueError: a non-Atari task, an option shmatari has no rule for
            (the message names the nearest equivalent) or out of range.
        SharedMemorySpaceError, WorkerError: as :func:`shmatari.make`.
    """
    if env_type == "dm":
        raise ValueError("env_type='dm' (dm_env's TimeStep API) is not supported: use "
                         "env_type='gymnasium'")
    if env_type not in ("gym", "gymnasium"):
        raise ValueError(f"env_type must be 'gymnasium' or 'gym', got {env_type!r}")
    if env_type == "gym" and "gym_reset_return_info" not in kwargs and not _old_gym():
        # EnvPool 1.x's env_type="gym" returns (obs, info) and a 5-tuple:
        # code written for it unpacked this API's obs and 4-tuple silently
        # wrong, or failed at step() (a newcomer's pass, 2026-12-05). Not
        # where gym < 0.26 is installed: that is CleanRL's EnvPool setup,
        # whose unchanged scripts warned at every run (a client-code pass).
        warnings.warn(
            "shmatari.envpool env_type='gym' is EnvPool 0.6-0.8's gym 0.2x API, what CleanRL's "
            "EnvPool scripts unpack: reset() returns the observations alone and step() a "
            "4-tuple (obs, rew, done, info). EnvPool 1.x's env_type='gym' returns (obs, info) "
            "and a 5-tuple: for code written for that, use env_type='gymnasium'. Pass "
            "gym_reset_return_info=False (or True) to say which you mean and silence this",
            UserWarning, stacklevel=games._caller_stacklevel())
    spec, make_kwargs, extra = _build(task_id, kwargs, env_type)
    pool = _make(spec.config.task, spec.config.num_envs, **make_kwargs)
    cls = GymEnvPoolAdapter if env_type == "gym" else EnvPoolAdapter
    try:
        return cls(pool, spec, thread_affinity_offset=extra["affinity"])
    except BaseException:
        pool.close()
        raise


def make_gymnasium(task_id: str, **kwargs) -> "EnvPoolAdapter":
    """``make(task_id, "gymnasium", **kwargs)``."""
    return make(task_id, "gymnasium", **kwargs)


def make_gym(task_id: str, **kwargs) -> "GymEnvPoolAdapter":
    """``make(task_id, "gym", **kwargs)``: the gym 0.2x API of EnvPool 0.6-0.8
    (:class:`GymEnvPoolAdapter`), which CleanRL's scripts unpack: ``reset()``
    returns the observations alone, ``step`` a 4-tuple. EnvPool 1.x's
    ``make_gym`` returns Gymnasium's 2-tuple ``reset`` and 5-tuple ``step``
    instead: code written for it calls :func:`make_gymnasium` here."""
    return make(task_id, "gym", **kwargs)


def make_dm(task_id: str, **kwargs):
    """Not supported.

    Raises:
        ValueError: always; use :func:`make_gymnasium`.
    """
    return make(task_id, "dm", **kwargs)
