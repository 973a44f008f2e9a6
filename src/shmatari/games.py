"""Game names: from the spellings users type to ale-py's ROM ids; which ROMs
can be played; each game's screen size."""

from __future__ import annotations

import difflib
import functools
import os
import re
import sys
import warnings

__all__ = ["resolve_game", "rom_path", "list_games", "screen_shape"]


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@functools.lru_cache(maxsize=1)
def _rom_ids() -> dict[str, str]:
    from ale_py import roms

    return {_key(rom_id): rom_id for rom_id in roms.get_all_rom_ids()}


@functools.lru_cache(maxsize=None)
def _playable(rom: str) -> bool:
    """Whether ALE can load the ROM for single-player play.

    ``ALEInterface.isSupportedROM`` is ALE's own test, made without loading:
    it answers None exactly where ``loadROM`` would call ``exit()`` for a
    ROM ale-py ships (no single-player game settings: combat, joust,
    maze_craze and warlords in ale-py 0.12, the ROMs ale-py's Gymnasium
    registration skips as having no single-player mode). About 0.1 ms.

    Raises:
        FileNotFoundError, OSError: the ROM file is missing or not ale-py's
            (from :func:`rom_path`).
    """
    from ale_py import ALEInterface

    return ALEInterface.isSupportedROM(rom_path(rom)) is not None


def _listed(rom: str) -> bool:
    try:
        return _playable(rom)
    except OSError:  # no such file here (ALE_ROMS_DIR), or not ale-py's
        return False


def list_games() -> list[str]:
    """The games :func:`shmatari.make` can play: ale-py's ROM ids that ALE
    loads for single-player play, sorted (``"adventure"``, ``"air_raid"``, ...).

    ROMs that ale-py ships for multi-player play only (ALE has no
    single-player settings for them: ``combat``, ``joust``, ``maze_craze``,
    ``warlords`` in ale-py 0.12) are left out, as ale-py's own Gymnasium
    registration leaves them out; :func:`resolve_game` refuses them.
    """
    return sorted(rom for rom in _rom_ids().values() if _listed(rom))


@functools.lru_cache(maxsize=None)
def screen_shape(rom_id: str) -> tuple[int, int]:
    """The game's screen, (height, width) in pixels, as ALE reports it
    (``getScreenDims``): (210, 160) for most games, taller for some
    (docs/semantics.md lists them). Observations are resized from it.

    Loads the ROM once in this process (about 0.1 s, cached per game), with
    ALE's log level set to errors only, as ale-py's ``AtariEnv`` sets it.

    Args:
        rom_id: a ROM id from :func:`resolve_game`.

    Raises:
        ValueError: ``rom_id`` is not a game ALE can play (it is checked first:
            ALE would exit this process loading it).
    """
    rom = resolve_game(rom_id)
    from ale_py import ALEInterface, LoggerMode

    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.loadROM(rom_path(rom))
    height, width = (int(x) for x in ale.getScreenDims())
    return height, width


def resolve_game(env_id: str) -> str:
    """Turns a game name into ale-py's ROM id.

    Accepts the ROM id itself (``"ms_pacman"``) and the usual spellings:
    ``"MsPacman"``, ``"ALE/MsPacman-v5"``, ``"MsPacmanNoFrameskip-v4"``,
    ``"mspacman"``, and this package's registered id ``"shmatari/MsPacman-v5"``
    (:mod:`shmatari.registration`, the same defaults as :func:`shmatari.make`).
    Case, ``_``/``-``, an ``ALE/`` or ``shmatari/`` prefix, a ``-vN`` suffix and
    a ``NoFrameskip`` / ``Deterministic`` suffix are ignored. Only the game is
    taken from the name: a Gym v0/v4 or ``NoFrameskip`` / ``Deterministic``
    name gives a ``UserWarning``, since those names stand for conventions
    (sticky actions 0.25 in v0, none in v4; frame skips of 1, 4 or 2..4)
    that shmatari's options do not follow unless set.

    Args:
        env_id: the game's name.

    Returns:
        str: the ROM id, e.g. ``"breakout"``.

    Raises:
        TypeError: ``env_id`` is not a str.
        ValueError: characters other than letters, digits, ``_``, ``-``
            and spaces after the prefix (a NUL, ``.``, ``/``), no ROM
            matches (the message suggests close names), the
            ROM cannot be played single-player, or its file is missing or
            altered (not in :func:`list_games` either way), or the
            name asks for RAM observations (``"Breakout-ram-v5"``).
    """
    rom, conventions = resolve_quietly(env_id)
    warn_legacy(env_id, conventions)
    return rom


def resolve_quietly(env_id: str) -> tuple[str, str]:
    """:func:`resolve_game` without its warning: the ROM id and what a legacy
    id's suffix and version stood for ("" for a v5 or plain name), for a
    caller that warns only where the options it was given leave them open
    (:func:`warn_legacy`). Raises as :func:`resolve_game`."""
    name, version, suffix = _split_id(env_id)
    if version and version not in _ATARI_VERSIONS:
        game = name[:len(name) - len(suffix)]
        raise ValueError(
            f"{env_id!r}: no Atari env has version v{version} (Gym's and ALE's are "
            f"{', '.join('v' + v for v in _ATARI_VERSIONS)}; shmatari follows v5's "
            f"conventions): use {game + '-v5'!r} or the game's name")
    ram = re.search(r"-?ram(NoFrameskip|Deterministic)?$", name, flags=re.IGNORECASE)
    if ram and _key(name) not in _rom_ids():
        game = name[:ram.start()]
        raise ValueError(
            f"{env_id!r} names the RAM observations of {game or 'a game'}: shmatari's "
            f"observations are pixels; use "
            f"{repr(game + '-v5') if game else 'the game name'} with ram_info=True for the RAM "
            f"in info['ram'] (or gymnasium.make('shmatari/<Game>-v5', obs_type='ram') for one "
            f"env whose observation is its RAM)")
    name = name[:len(name) - len(suffix)]
    ids = _rom_ids()
    rom = ids.get(_key(name))
    if rom is None:
        playable = [k for k, r in ids.items() if _listed(r)]
        if _key(name) == "null":  # shmatari's benchmark env is "null" exactly
            hint = "; did you mean 'null' (shmatari's env with no emulator)?"
        else:
            close = difflib.get_close_matches(_key(name), playable, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(repr(ids[c]) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown Atari game {_shown(env_id)}: ale-py {_ale_version()} ships no such "
            f"ROM{hint} (shmatari.list_games() lists all {len(playable)})")
    try:
        playable = _playable(rom)
    except OSError as exc:  # checked here, before any process starts
        raise ValueError(
            f"{env_id!r}: ale-py {_ale_version()} lists ROM {rom!r}, but its file cannot be "
            f"read ({exc}); reinstall ale-py (pip install --force-reinstall ale-py), or fix "
            f"ALE_ROMS_DIR if you set it. shmatari.list_games() lists the games whose "
            f"ROMs are here") from exc
    if not playable:
        named = repr(rom) if env_id == rom else f"{env_id!r} (ROM {rom!r})"
        raise ValueError(
            f"{named} cannot be played: ale-py {_ale_version()} ships this ROM for its "
            f"multi-player modes only, and ALE has no single-player settings for it "
            f"(loading it would exit the process; Gymnasium registers no v5 env for it "
            f"either). shmatari.list_games() lists the {len(list_games())} games "
            f"that can be played")
    return rom, _legacy_conventions(suffix, version, rom)


def warn_legacy(env_id: str, conventions: str) -> None:
    """The ``UserWarning`` of :func:`resolve_game` for a legacy id whose
    ``conventions`` (:func:`_legacy_conventions`) are not "", at the first
    line outside this package."""
    if conventions:
        warnings.warn(
            f"{env_id!r} names Gym's legacy conventions ({conventions}), but shmatari takes "
            f"only the game from it: its options follow ALE v5 (frame_skip=4, "
            f"repeat_action_probability=0.25, ...) unless you set them; preset='dqn' gives "
            f"SB3's AtariWrapper conventions", UserWarning, stacklevel=_caller_stacklevel())


def _legacy_conventions(suffix: str, version: str, rom: str | None = None) -> str:
    """What a Gym id's suffix (``"NoFrameskip"``, ``"Deterministic"`` or
    ``""``) and version (``"0"``, ``"4"``, ``"5"`` or ``""``) stood for, as
    Gym and ale-py registered them (v0: sticky actions 0.25, v4: none; a
    frame skip drawn from 2..4 each step, 4 with Deterministic (3 for the
    ROM ``"space_invaders"``), 1 with NoFrameskip), or "" for a v5 or
    unversioned name without a suffix: the name shmatari's options follow.
    (Until 2026-12-05 every legacy id was said to have no sticky actions, v0
    ids too, and every Deterministic id a frame skip of "4 (3 in
    SpaceInvaders)": newcomers' passes.)"""
    if not suffix and version in ("", "5"):
        return ""
    deterministic = "a frame skip of 3" if rom == "space_invaders" else "a frame skip of 4"
    skip = {"NoFrameskip": "no frame skip", "Deterministic": deterministic}.get(
        suffix, "a frame skip drawn from 2..4 each step")
    sticky = {"0": "sticky actions 0.25", "4": "no sticky actions"}.get(version)
    return f"{skip}, {sticky}" if sticky else skip


def _shown(env_id: str) -> str:
    """``env_id`` for a message: its repr, cut to 60 characters."""
    return repr(env_id) if len(env_id) <= 60 else repr(env_id[:57]) + "..."


def _split_id(env_id: str) -> tuple[str, str, str]:
    """An id's (name, version, suffix): the name without its ``ALE/`` or
    ``shmatari/`` prefix and ``-vN`` version (its ``NoFrameskip`` /
    ``Deterministic`` suffix kept, and given as ``suffix``; "" if none),
    the version's digits ("" if none). ``"ALE/PongNoFrameskip-v4"`` ->
    ``("PongNoFrameskip", "4", "NoFrameskip")``.

    Raises:
        TypeError: ``env_id`` is not a str.
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str such as 'Breakout', got {type(env_id).__name__}")
    name = re.sub(r"^(ALE|shmatari)/", "", env_id.strip(), flags=re.IGNORECASE)
    if re.search(r"[^A-Za-z0-9_\- ]", name):
        # a NUL, a newline, a path ("../breakout") named breakout, the
        # characters being dropped with "_" and "-" (a fuzzing pass)
        raise ValueError(f"env_id {_shown(env_id)} holds characters no game id has: a game "
                         f"is named by letters, digits, '_' and '-' (such as 'Breakout', "
                         f"'ms_pacman', 'ALE/MsPacman-v5')")
    version = re.search(r"-v(\d+)$", name, flags=re.IGNORECASE)
    if version:
        name = name[:version.start()]
    suffix = re.search(r"(NoFrameskip|Deterministic)$", name)
    return name, version.group(1) if version else "", suffix.group(1) if suffix else ""


def legacy_id(env_id: str) -> bool:
    """True if ``env_id`` names Gym's legacy conventions (a v0 or v4 id, or
    a ``NoFrameskip`` / ``Deterministic`` one), for which
    :func:`resolve_game` warns.

    Raises:
        TypeError: ``env_id`` is not a str.
    """
    _, version, suffix = _split_id(env_id)
    return bool(_legacy_conventions(suffix, version))


#: The versions Gym and ale-py ever gave Atari ids (``Pong-v0``,
#: ``PongNoFrameskip-v4``, ``ALE/Pong-v5``): another is refused as unknown.
_ATARI_VERSIONS = ("0", "4", "5")


def _caller_stacklevel() -> int:
    """``warnings.warn``'s ``stacklevel`` for a warning of the function that
    calls this one: the first frame outside this package, so that the
    warning names the caller's line whichever way in led here (``make``,
    ``resolve_game`` itself); a fixed level named ``sys:1`` for some."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def rom_path(rom_id: str) -> str:
    """Path of a ROM file shipped with ale-py.

    Raises:
        FileNotFoundError: ale-py has no such ROM file.
    """
    import os
    import warnings

    from ale_py import roms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = roms.get_rom_path(rom_id)
    if path is None or not os.path.exists(path):
        raise FileNotFoundError(f"ale-py {_ale_version()} has no ROM file for {rom_id!r}")
    return str(path)


def _ale_version() -> str:
    import ale_py

    return getattr(ale_py, "__version__", "?")
