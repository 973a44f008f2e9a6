"""Game names: from the spellings users type to ale-py's ROM ids."""

from __future__ import annotations

import difflib
import functools
import re
import warnings

__all__ = ["resolve_game", "rom_path", "list_games"]


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@functools.lru_cache(maxsize=1)
def _rom_ids() -> dict[str, str]:
    from ale_py import roms

    return {_key(rom_id): rom_id for rom_id in roms.get_all_rom_ids()}


def list_games() -> list[str]:
    """ale-py's ROM ids, sorted (``"breakout"``, ``"ms_pacman"``, ...)."""
    return sorted(_rom_ids().values())


def resolve_game(env_id: str) -> str:
    """Turns a game name into ale-py's ROM id.

    Accepts the ROM id itself (``"ms_pacman"``) and the usual spellings:
    ``"MsPacman"``, ``"ALE/MsPacman-v5"``, ``"MsPacmanNoFrameskip-v4"``,
    ``"mspacman"``. Case, ``_``/``-``, an ``ALE/`` prefix, a ``-vN`` suffix and
    a ``NoFrameskip`` / ``Deterministic`` suffix are ignored. Only the game is
    taken from the name: a Gym v0/v4 or ``NoFrameskip`` / ``Deterministic``
    name gives a ``UserWarning``, since those names stand for conventions (no
    sticky actions, other frame skips) that shmatari's options do not follow
    unless set.

    Args:
        env_id: the game's name.

    Returns:
        str: the ROM id, e.g. ``"breakout"``.

    Raises:
        TypeError: ``env_id`` is not a str.
        ValueError: no ROM matches (the message suggests close names), or
            the name asks for RAM observations (``"Breakout-ram-v5"``).
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str such as 'Breakout', got {type(env_id).__name__}")
    name = env_id.strip()
    name = re.sub(r"^ALE/", "", name, flags=re.IGNORECASE)
    version = re.search(r"-v(\d+)$", name)
    name = re.sub(r"-v\d+$", "", name)
    ram = re.search(r"-?ram(NoFrameskip|Deterministic)?$", name, flags=re.IGNORECASE)
    if ram and _key(name) not in _rom_ids():
        game = name[:ram.start()]
        raise ValueError(
            f"{env_id!r} names the RAM observations of {game or 'a game'}: RAM observations "
            f"are not supported (only pixels); use "
            f"{repr(game + '-v5') if game else 'the game name'} for its screen")
    legacy = re.search(r"(NoFrameskip|Deterministic)$", name)
    name = re.sub(r"(NoFrameskip|Deterministic)$", "", name)
    ids = _rom_ids()
    rom = ids.get(_key(name))
    if rom is None:
        close = difflib.get_close_matches(_key(name), list(ids), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(ids[c]) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown Atari game {env_id!r}: ale-py {_ale_version()} ships no such ROM{hint} "
            f"(shmatari.games.list_games() lists all {len(ids)})")
    if legacy or (version and version.group(1) != "5"):
        warnings.warn(
            f"{env_id!r} names Gym's legacy conventions (no sticky actions, other frame "
            f"skips), but shmatari takes only the game from it: its options follow ALE v5 "
            f"(frame_skip=4, repeat_action_probability=0.25, ...) unless you set them; "
            f"preset='dqn' gives SB3's AtariWrapper conventions", UserWarning, stacklevel=4)
    return rom


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
