"""The options of a pool: defaults, names and validation, in one place."""

from __future__ import annotations

import dataclasses
import difflib
import numbers
import os
import sys

from . import _core, games, seeding

__all__ = ["EnvConfig", "build_config", "parse_option", "OPTION_DEFAULTS", "OPTION_TYPES",
           "PRESETS", "AUTORESET_MODES", "available_cores", "default_start_method",
           "mp_start_method"]

#: The null env's "screen", (height, width) in pixels: it emulates none, and
#: bounds its image options as most Atari games' 210 x 160 screen does. An
#: Atari game's screen comes from ALE (:func:`shmatari.games.screen_shape`).
NULL_SCREEN_SHAPE = (210, 160)

#: Env options and their defaults: ALE v5 (Machado et al., 2018) with
#: Gymnasium 1.x's next-step autoreset. The one table of defaults:
#: ``EnvConfig``'s option fields (name, type and default) are made from it,
#: and ``AtariCore`` takes every option from an ``EnvConfig``.
OPTION_DEFAULTS = {
    "frame_skip": 4,
    "repeat_action_probability": 0.25,
    "noop_max": 30,
    "stack_num": 4,
    "img_height": 84,
    "img_width": 84,
    "grayscale": True,
    "maxpool": True,
    "episodic_life": False,
    "use_fire_reset": False,
    "reward_clip": False,
    "full_action_space": False,
    "max_episode_frames": 108_000,
    "max_episode_steps": None,
    "autoreset_mode": "next_step",
    "episode_statistics": True,
    "obs_layout": "channels_last",
    "render_mode": None,
    "ram_info": False,
    "fast_reset": "auto",
}

#: The ``render_mode`` values (None: no rendering).
RENDER_MODES = (None, "rgb_array")

#: The ``fast_reset`` values (:mod:`shmatari.fast_reset`): ``"auto"``
#: restores a saved post-reset state where that is proven exact for the
#: game, the installed ale-py and the sticky setting; ``"off"``: ALE's reset.
FAST_RESET_MODES = ("auto", "off")

#: The ``obs_layout`` values: where RGB observations put their channels.
OBS_LAYOUTS = ("channels_last", "channels_first")

#: The ``autoreset_mode`` values, Gymnasium 1.x's ``AutoresetMode`` (whose
#: members are accepted too).
AUTORESET_MODES = ("next_step", "same_step", "disabled")

#: Named sets of options (``make(..., preset=name)``); options given
#: explicitly override them. Each sets every option it names, so its meaning
#: does not change when shmatari's defaults do. See docs/semantics.md.
PRESETS = {
    # Nature DQN (Mnih et al., 2015) as Stable-Baselines3's AtariWrapper
    # (2.x defaults) on a NoFrameskip-v4 env with ale-py's 108,000-frame cap,
    # plus VecFrameStack(4), which SB3 users add themselves.
    "dqn": {
        "frame_skip": 4,
        "repeat_action_probability": 0.0,
        "noop_max": 30,
        "stack_num": 4,
        "img_height": 84,
        "img_width": 84,
        "grayscale": True,
        "maxpool": True,
        "episodic_life": True,
        "use_fire_reset": True,
        "reward_clip": True,
        "full_action_space": False,
        "max_episode_frames": 108_000,
    },
    # Gymnasium's AtariPreprocessing (noop_max=30, frame_skip=4,
    # screen_size=84) and FrameStackObservation(4) on ALE/<Game>-v5 made with
    # frameskip=1: ALE v5's sticky actions and frame cap (Machado et al., 2018).
    # The same values as OPTION_DEFAULTS today, typed out on purpose: a preset
    # names a peer's conventions, which must not move if shmatari's defaults do.
    "gymnasium": {
        "frame_skip": 4,
        "repeat_action_probability": 0.25,
        "noop_max": 30,
        "stack_num": 4,
        "img_height": 84,
        "img_width": 84,
        "grayscale": True,
        "maxpool": True,
        "episodic_life": False,
        "use_fire_reset": False,
        "reward_clip": False,
        "full_action_space": False,
        "max_episode_frames": 108_000,
    },
}
#: ``env_id`` of the built-in null env (no emulation; for measuring IPC).
NULL_ENV = "null"
START_METHODS = ("zygote", "fork", "forkserver", "spawn")
#: ``batch_order`` values (layout.h's enum shmatari_batch_order): which envs
#: an asynchronous pool's batch holds. See :func:`shmatari.make`.
BATCH_ORDERS = ("first_ready", "fixed")


class _EnvConfigMethods:
    """What :class:`EnvConfig` derives from its fields."""

    @property
    def channels(self) -> int:
        return 1 if self.grayscale else 3

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """Shape of one env's observation: (stack_num, img_height, img_width),
        in RGB (..., 3) or with ``obs_layout="channels_first"`` (3 * stack_num,
        img_height, img_width): ``_core.obs_shape``, C's ``shmatari_obs_shape``."""
        from . import _core

        return _core.obs_shape(self.stack_num, self.img_height, self.img_width, self.channels,
                               _core.OBS_LAYOUTS[self.obs_layout])

    def env_options(self) -> dict:
        """The per-env options (everything but the pool's shape and seed), as
        :func:`build_config` takes them."""
        return {k: getattr(self, k) for k in OPTION_DEFAULTS}

    def worker_groups(self) -> list[range]:
        """Contiguous env groups, one per worker, sizes differing by at most 1."""
        q, r = divmod(self.num_envs, self.num_workers)
        groups, begin = [], 0
        for w in range(self.num_workers):
            end = begin + q + (1 if w < r else 0)
            groups.append(range(begin, end))
            begin = end
        return groups


#: A validated pool configuration (see :func:`shmatari.make`): the pool's
#: fields, then one field per option of ``OPTION_DEFAULTS``, with its type
#: and default from there, then the two seeding-only fields. ``screen_shape``
#: is the game's screen, (height, width) in pixels, from ALE: what the frames
#: are resized from (``games.screen_shape``). ``env_index_offset``: env j of
#: this pool is seeded as env ``env_index_offset + j`` of a larger pool
#: (shmatari.ray gives each node a contiguous slice). ``pool_generation``:
#: how many times an outer supervisor rebuilt this pool (shmatari.ray's
#: restarts of a dead node); see :mod:`shmatari.seeding`.
EnvConfig = dataclasses.make_dataclass(
    "EnvConfig",
    [("game", str), ("num_envs", int), ("batch_size", int), ("num_workers", int),
     ("seed", int), ("start_method", str), ("screen_shape", tuple[int, int]),
     ("zero_copy", bool, False), ("restart_workers", bool, False),
     ("batch_order", str, "first_ready"),
     *((name, str | None if default is None else type(default), default)
       for name, default in OPTION_DEFAULTS.items()),
     ("env_index_offset", int, 0), ("pool_generation", int, 0)],
    bases=(_EnvConfigMethods,), frozen=True)
EnvConfig.__module__ = __name__  # for pickle (make_dataclass's module= is 3.12+)
EnvConfig.__doc__ = "A validated pool configuration (see :func:`shmatari.make`)."


def available_cores() -> int:
    """Cores this process may run on (``os.sched_getaffinity`` where it exists)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def default_start_method() -> str:
    """``zygote`` on Linux (:mod:`shmatari._zygote`: workers forked from a clean
    process that never imports the trainer's script), ``spawn`` elsewhere;
    both safe in a parent that already runs threads (torch, OpenCV), unlike ``fork``."""
    return "zygote" if sys.platform.startswith("linux") else "spawn"


def mp_start_method(start_method: str) -> str:
    """The multiprocessing start method for process pools other than
    shmatari's own (the pipe baseline, the benchmark's ceiling, Gymnasium's
    AsyncVectorEnv): ``"zygote"`` is shmatari's, so they use ``forkserver``."""
    return "forkserver" if start_method == "zygote" else start_method


#: Upper bounds of the integer options: what the layout's and the core's C
#: types hold (uint32 counts, int frame counts), far above any real use, or
#: the layout's own limits (``SHMATARI_MAX_*`` of layout.h, read from the
#: extension), so that a value the layout refuses is refused here, by name.
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

#: Each env option's type and bounds, the one table that both validation
#: (:func:`build_config`) and the command lines (:func:`parse_option`, the
#: flags of ``shmatari serve``) read: ``(kind, low, high)`` for numbers
#: (``high`` None: the C type's bound), ``(bool,)``, ``(str, choices)``.
#: ``max_episode_frames`` and ``max_episode_steps`` also take None (no cap).
OPTION_TYPES = {
    "frame_skip": (int, 1, _core.MAX_FRAME_SKIP),
    "repeat_action_probability": (float, 0.0, 1.0),
    "noop_max": (int, 0, _INT32_MAX),
    "stack_num": (int, 1, _core.MAX_STACK),
    # at most the game's own screen: build_config checks it (_image_side)
    "img_height": (int, 1, _INT32_MAX),
    "img_width": (int, 1, _INT32_MAX),
    "grayscale": (bool,),
    "maxpool": (bool,),
    "episodic_life": (bool,),
    "use_fire_reset": (bool,),
    "reward_clip": (bool,),
    "full_action_space": (bool,),
    "max_episode_frames": (int, 1, _INT64_MAX),
    "max_episode_steps": (int, 1, _INT64_MAX),
    "autoreset_mode": (str, AUTORESET_MODES),
    "episode_statistics": (bool,),
    "obs_layout": (str, OBS_LAYOUTS),
    "render_mode": (str, RENDER_MODES),
    "ram_info": (bool,),
    "fast_reset": (str, FAST_RESET_MODES),
}
assert set(OPTION_TYPES) == set(OPTION_DEFAULTS)

#: Arguments that Gymnasium's or EnvPool's Atari envs take and shmatari does
#: not, with what to do instead (rather than a "did you mean" guess).
_NOT_OPTIONS = {
    "obs_type": "obs_type is not an option: observations are pixels (grayscale=False gives "
                "RGB); ram_info=True adds each env's console RAM as info['ram']",
    "frameskip": "frameskip is ale-py's spelling (Gymnasium's ALE envs): use frame_skip",
    "gray_scale": "gray_scale is EnvPool's spelling: use grayscale",
    "screen_size": "screen_size is AtariPreprocessing's: use img_height and img_width",
    "terminal_on_life_loss": "terminal_on_life_loss is AtariPreprocessing's: use "
                             "episodic_life",
    "max_num_frames_per_episode": "max_num_frames_per_episode is ale-py's: use "
                                  "max_episode_frames",
    "num_threads": "num_threads is EnvPool's: use num_workers (worker processes)",
    # a newcomer's pass, 2026-12-06: "unknown option" only
    "env_type": "env_type is EnvPool's: shmatari.make is a Gymnasium vector env; for "
                "EnvPool's API use shmatari.envpool.make(task_id, env_type=...)",
    "sticky_actions": "sticky_actions is not an option: use repeat_action_probability "
                      "(per-frame probability; 0.25 as in ALE v5, 0.0 for none)",
    "n_envs": "n_envs is Stable-Baselines3's spelling: use num_envs",
    # ale-py's, EnvPool's and SB3's names that said only "unknown option"
    # (a newcomer's pass, 2026-12-05)
    "mode": "mode is ale-py's game mode: not an option; every game is played in its "
            "default mode and difficulty, as EnvPool and ALE's v5 ids do",
    "difficulty": "difficulty is ale-py's: not an option; every game is played in its "
                  "default mode and difficulty, as EnvPool and ALE's v5 ids do",
    "continuous": "continuous is ale-py's: not supported; actions are discrete indices "
                  "into the action set",
    "sound_obs": "sound_obs is ale-py's: not supported; observations are pixels",
    # an ale-py name the migration table promises a hint for (a newcomer's
    # pass, 2026-12-06)
    "life_loss_info": "life_loss_info is ale-py's: use episodic_life=True (a lost life "
                      "ends the episode with terminated, as SB3's EpisodicLifeEnv)",
    "thread_affinity_offset": "thread_affinity_offset is EnvPool's: shmatari.envpool.make "
                              "takes it (pins the workers to cores); make()'s workers "
                              "are placed by the OS",
    "clip_reward": "clip_reward is Stable-Baselines3's AtariWrapper spelling: use "
                   "reward_clip",
    # frame-stack and EnvPool names that got a wrong "did you mean" guess
    # ('stack_size' -> 'batch_size'; a newcomer's pass, 2026-12-05)
    "stack_size": "stack_size is Gymnasium's FrameStackObservation's: use stack_num",
    "num_stack": "num_stack is Gymnasium's FrameStack's: use stack_num",
    "n_stack": "n_stack is Stable-Baselines3's VecFrameStack's: use stack_num",
    "frame_stack": "frame_stack is not an option: use stack_num (frames per observation)",
    "use_inter_area_resize": "use_inter_area_resize is EnvPool's: not an option; frames are "
                             "always resized as OpenCV's INTER_AREA does, bit for bit",
    "noop_reset": "noop_reset is not an option: use noop_max (0 for no no-op starts)",
    # ale-py's AtariVectorEnv and EnvPool names that got a generic guess or
    # none (a newcomer's pass, 2026-12-06)
    "reward_clipping": "reward_clipping is ale-py's AtariVectorEnv's: use reward_clip (its "
                       "default is False here, True there)",
    "zero_discount_on_life_loss": "zero_discount_on_life_loss is EnvPool's: not an option "
                                  "(it sets dm_env's discount only); "
                                  "info['lives'] tells a lost life, and episodic_life=True "
                                  "ends the episode there",
    "fire_reset": "fire_reset is not an option: use use_fire_reset",
}

#: :func:`shmatari.make`'s own arguments (not env options), which a
#: misspelled keyword is matched against too: ``num_env=8`` said "unknown
#: option" and listed only the env options (a newcomer's pass, 2026-12-05).
POOL_ARGUMENTS = ("num_envs", "batch_size", "num_workers", "seed", "start_method",
                  "zero_copy", "restart_workers", "preset", "start_timeout", "batch_order")

#: The episode caps: None (no cap) or a count >= 1, in an ``EnvConfig`` as
#: given (``AtariCore``, whose C fields are int64, takes None as 0).
_CAPS = ("max_episode_frames", "max_episode_steps")

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _int(name, value, lo, hi=_INT32_MAX):
    if isinstance(value, (bool,)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    return value


def _bool(name, value):
    import numpy as np

    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def _float(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    value = float(value)
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _choice(name, value, choices):
    # a str (or None where it is a choice), compared as one: a 0-d array
    # compares elementwise and passed `in` (a fuzzing pass: start_method and
    # obs_layout then failed inside the pool's start, naming no argument)
    if not (value is None or isinstance(value, str)) or value not in choices:
        hint = ""
        if name == "fast_reset" and isinstance(value, bool):
            hint = f" (fast_reset={'auto' if value else 'off'!r} for {value})"
        if name == "render_mode" and value == "human":  # a newcomer's pass, 2026-12-06
            hint = (": no window is opened; to watch a game, make the pool with "
                    "render_mode='rgb_array' and show the frames env.render() returns")
        raise ValueError(f"{name} must be one of {choices}, got {value!r}{hint}")
    return None if value is None else str(value)


def _image_side(name, value, game, screen, axis):
    """img_height (axis 0) or img_width (axis 1): from 1 to the screen's size
    on that axis (the resize averages areas; it never upscales)."""
    value = _int(name, value, 1)
    if value > screen[axis]:
        raise ValueError(f"{name} must be <= {screen[axis]}, the {('height', 'width')[axis]} "
                         f"of {game}'s {screen[0]} x {screen[1]} screen (the resize never "
                         f"upscales), got {value}")
    return value


def _check_option(name, value):
    """``value`` checked against ``OPTION_TYPES[name]``."""
    kind = OPTION_TYPES[name]
    if kind[0] is bool:
        return _bool(name, value)
    if kind[0] is float:
        return _float(name, value, kind[1], kind[2])
    if kind[0] is int:
        if name in _CAPS and value is None:
            return None
        return _int(name, value, kind[1], kind[2])
    if name == "autoreset_mode":
        return _autoreset_mode(value)
    return _choice(name, value, kind[1])


def _unknown_options(names, arguments: tuple[str, ...] = ()) -> TypeError:
    """The TypeError for unknown keywords ``names``: each matched (difflib)
    against the env options and ``arguments`` (the caller's own keywords:
    :data:`POOL_ARGUMENTS` for ``make()``), then the lists of both."""
    hints = []
    for name in names:
        if name in _NOT_OPTIONS:
            hints.append(_NOT_OPTIONS[name])
            continue
        if name in POOL_ARGUMENTS:  # "did you mean" the name given (a fuzzing pass)
            hints.append(f"{name!r} is an argument of shmatari.make(), not taken here")
            continue
        close = difflib.get_close_matches(name, [*OPTION_DEFAULTS, *arguments], n=1)
        what = "unknown option or argument" if arguments else "unknown option"
        hints.append(f"{what} {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    known = ""
    if not set(names) <= set(_NOT_OPTIONS):
        known = f"; known options: {', '.join(OPTION_DEFAULTS)}"
        if arguments:
            known += f"; the pool's own arguments: {', '.join(arguments)}"
    return TypeError("; ".join(hints) + known)


def parse_option(name: str, text: str):
    """An env option's value from command-line text, by its type in
    :data:`OPTION_TYPES`: booleans from ``true/false/yes/no/on/off/1/0`` (any
    case), numbers from their digits, ``none`` for ``max_episode_frames``
    and ``max_episode_steps``.

    Raises:
        TypeError: an unknown option.
        ValueError: text that is not a value of the option's type, or a
            value out of range.
    """
    if name not in OPTION_TYPES:
        raise _unknown_options([name])
    kind, text = OPTION_TYPES[name], text.strip()
    if kind[0] is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(f"{name} must be a bool (true/false, yes/no, on/off, 1/0), "
                         f"got {text!r}")
    if name == "render_mode" and text.lower() == "none":
        return None
    if kind[0] is int and name in _CAPS and text.lower() == "none":
        return None
    if kind[0] in (int, float):
        try:
            value = kind[0](text)
        except ValueError:
            what = "an int" if kind[0] is int else "a number"
            raise ValueError(f"{name} must be {what}, got {text!r}") from None
        return _check_option(name, value)
    return _check_option(name, text)


def build_config(env_id, num_envs=8, *, batch_size=None, num_workers=None, seed=None,
                 start_method=None, zero_copy=False, restart_workers=False, preset=None,
                 env_index_offset=0, pool_generation=0, batch_order="first_ready",
                 **options) -> EnvConfig:
    """Validates :func:`shmatari.make`'s arguments; see there for their meaning.

    Options come from ``OPTION_DEFAULTS``, then ``PRESETS[preset]``, then
    ``options``.

    Two arguments change seeding only, for pools that are one part of a
    larger pool (:mod:`shmatari.ray` builds one per node); ``make()`` passes
    them through:

    - ``env_index_offset`` (int >= 0, default 0): env *j* of this pool derives
      its streams as env ``env_index_offset + j`` of a pool with the same seed,
      so a pool of envs ``b..b+n-1`` replays exactly those envs of a bigger
      local pool. ``env_index_offset + num_envs`` must be at most 2**32.
    - ``pool_generation`` (int >= 0, default 0): how many times a supervisor
      outside the pool rebuilt it (a restarted node). Above 0, env *i* derives
      from ``SeedSequence(seed, spawn_key=(i, k, pool_generation))``, *k*
      being its worker's restart count (0 at first), so a rebuilt pool plays
      new games rather than replaying old ones (:mod:`shmatari.seeding`).

    A legacy Gym id (``"BreakoutNoFrameskip-v4"``) gives
    :func:`shmatari.resolve_game`'s ``UserWarning`` unless ``preset`` is
    given or ``options`` set both ``frame_skip`` and
    ``repeat_action_probability``.

    Raises:
        TypeError: an option of the wrong type, or an unknown option.
        ValueError: an unknown game or preset, a ROM that cannot be played
            single-player, or an option out of range.
    """
    unknown = sorted(set(options) - set(OPTION_DEFAULTS))
    if unknown:
        raise _unknown_options(unknown, POOL_ARGUMENTS)
    opts = dict(OPTION_DEFAULTS)
    if preset is not None:
        if not isinstance(preset, str) or preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)} or None, got {preset!r}")
        opts.update(PRESETS[preset])
    opts.update(options)
    game, legacy = (NULL_ENV, "") if env_id == NULL_ENV else games.resolve_quietly(env_id)
    if preset is None and not {"frame_skip", "repeat_action_probability"} <= set(options):
        # A legacy id's conventions left to shmatari's defaults: said. With a
        # preset, or both options set, the caller chose them (a newcomer's
        # pass: preset="dqn" on "BreakoutNoFrameskip-v4", SB3's own spelling,
        # was warned that the options follow ALE v5).
        games.warn_legacy(env_id, legacy)
    num_envs = _int("num_envs", num_envs, 1, _core.MAX_ENVS)
    batch_size = num_envs if batch_size is None else _int("batch_size", batch_size, 1)
    if batch_size > num_envs:
        raise ValueError(f"batch_size must be <= num_envs ({num_envs}), got {batch_size}")
    batch_order = _choice("batch_order", batch_order, BATCH_ORDERS)
    if batch_order == "fixed" and num_envs % batch_size:
        raise ValueError(f"batch_order='fixed' serves num_envs / batch_size groups of "
                         f"batch_size envs each: batch_size must divide num_envs "
                         f"({num_envs}), got {batch_size}")
    if num_workers is None:
        num_workers = min(num_envs, available_cores())
    num_workers = _int("num_workers", num_workers, 1)
    if num_workers > num_envs:
        raise ValueError(f"num_workers must be <= num_envs ({num_envs}): a worker "
                         f"needs at least one env; got {num_workers}")
    seed = seeding.draw_entropy() if seed is None else seeding.check_seed(seed)
    if start_method is None:
        start_method = default_start_method()
    start_method = _choice("start_method", start_method, START_METHODS)
    screen = NULL_SCREEN_SHAPE if game == NULL_ENV else games.screen_shape(game)
    opts = {k: _check_option(k, opts[k]) for k in OPTION_DEFAULTS}
    # The image bounds follow the game's own screen, which OPTION_TYPES cannot know.
    opts["img_height"] = _image_side("img_height", opts["img_height"], game, screen, 0)
    opts["img_width"] = _image_side("img_width", opts["img_width"], game, screen, 1)
    env_index_offset = _int("env_index_offset", env_index_offset, 0, 2**32 - num_envs)
    pool_generation = _int("pool_generation", pool_generation, 0, 2**32 - 1)
    return EnvConfig(
        game=game,
        num_envs=num_envs,
        batch_size=batch_size,
        num_workers=num_workers,
        seed=seed,
        start_method=start_method,
        screen_shape=screen,
        zero_copy=_bool("zero_copy", zero_copy),
        restart_workers=_bool("restart_workers", restart_workers),
        batch_order=batch_order,
        env_index_offset=env_index_offset,
        pool_generation=pool_generation,
        **opts,
    )


def uneven_groups(config: EnvConfig) -> str | None:
    """What to warn about a pool whose first-ready batches step its envs
    unevenly: each worker steps its own group of envs, so where the groups
    differ in size (``num_envs % num_workers``) an env of a smaller group is
    stepped about (q + 1) / q times as often as one of a larger (a
    client-code pass, 2026-12-05: 5 envs on 2 workers, batch 3, stepped the
    group of 2 1.6 times as often; EnvPool's threads share one queue). None
    for even groups, synchronous pools and ``batch_order="fixed"``."""
    n, w, b = config.num_envs, config.num_workers, config.batch_size
    if b >= n or config.batch_order != "first_ready" or n % w == 0:
        return None
    q = n // w
    return (f"num_envs={n} over num_workers={w} makes worker groups of {q + 1} and {q} "
            f"envs, and each worker steps its own group: in first-ready batches "
            f"(batch_size {b} < num_envs) an env of a group of {q} is stepped about "
            f"{(q + 1) / q:.3g} times as often as one of a group of {q + 1} (EnvPool's threads "
            f"share one queue). For even stepping pass a num_workers that divides "
            f"num_envs" + (", or batch_order='fixed'" if n % b == 0 else
                           f", or batch_order='fixed' with a batch_size that divides "
                           f"num_envs ({_or_list([d for d in range(1, n) if n % d == 0])})"))


def _or_list(values: list) -> str:
    """``[1, 2, 5]`` as ``"1, 2 or 5"``."""
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _autoreset_mode(value) -> str:
    """``"next_step"``, ``"same_step"`` or ``"disabled"``, from one of those or
    a ``gymnasium.vector.AutoresetMode``."""
    from gymnasium.vector import AutoresetMode

    if isinstance(value, AutoresetMode):
        value = value.name.lower()
    if not isinstance(value, str) or value not in AUTORESET_MODES:
        raise ValueError(f"autoreset_mode must be one of {AUTORESET_MODES} (or a "
                         f"gymnasium.vector.AutoresetMode), got {value!r}")
    return str(value)
