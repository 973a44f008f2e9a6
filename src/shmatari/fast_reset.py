"""Fast resets: starting a new game by restoring a state saved right after
ALE's own reset, where that is proven to change no bit.

``ALEInterface.reset_game()`` emulates about 70 frames (60 no-op frames, two
presses of the console's RESET switch, the game's starting actions): about
5 ms, 14 agent steps' worth. Restoring a state cloned right after a reset
takes about 0.1 ms. The two differ in what the restore does not carry:

- ALE's *remembered action*, the action a sticky frame repeats
  (``StellaEnvironment::m_player_a_action``): a reset sets it to NOOP
  (``softReset``); it lives in the environment, not in the saved state. With
  ``repeat_action_probability > 0`` the remembered action shows only in a
  frame whose draw for player A is below the probability; the fast reset
  knows the env's generator (it follows it: two draws per frame emulated)
  and so the next frame's draw. When that draw passes, that frame takes its
  new action whatever was remembered, and the state is simply restored.
  When it does not, the fast reset sets the remembered action as the reset
  does: it restores the post-reset state with a *primer* generator whose
  next draw is at least the probability (so the frame it acts takes the
  NOOP, as a non-sticky frame does), acts one NOOP frame, then restores the
  post-reset state with the env's own generator as it was before (a real
  reset draws no random number; neither, in the end, does a fast one). With
  probability 0 every draw passes.
- ALE's frame counter since the ROM was loaded (``getFrameNumber``): the
  restored state gets the current one.
- ALE's screen buffer: ``getScreen`` shows the old game's last frame until
  the next frame is emulated. :class:`shmatari._core.AtariCore` uses the
  screen saved with the state instead.
- ALE's console random generator (``System::myRandom``), which only a
  console reset draws from (RIOT timer, cartridge RAM): it stays where the
  first reset left it. Nothing observable depends on it once every reset of
  the env is fast (a reseed reloads the ROM, which seeds it anew).
- Emulator state that ALE's serialisation leaves out (the TIA's partial-frame
  flag and frame buffers in ale-py 0.12), and RAM that a game keeps across a
  console reset (a high score, a level, a random seed): where a game's next
  frames depend on them, a restore is not a reset. Those games are found by
  comparison, not by reading.

The no-op frames that start a game (1..noop_max NOOP frames) are saved the
same way: the first fast new game emulates ``noop_max`` of them once and
saves the state after each (:meth:`FastReset.learn_noops`; the first game,
which ALE resets, saves the start it draws, :meth:`FastReset.save_noops`);
a later game that draws ``k`` restores the start saved after ``k``
(:meth:`FastReset.restore_noops`). A NOOP frame after a
reset repeats nothing but NOOP, whatever the sticky draw, so only ALE's env
generator tells the two apart: the restore advances it by the frames' draws.

So a fast reset is used only where it is *checked*: :data:`VERDICTS` lists,
for one ale-py version, the ROMs (by MD5) whose fast and real resets gave
the same screens, RAM, rewards, lives, game-over flags, frame counters and
saved states (the console generator aside) over several seeds and episodes
that ended by game over and by truncation, with and without sticky actions
(``tests/test_fast_reset.py`` repeats the comparison over every game;
``python -m shmatari.fast_reset`` recomputes the table, ``python -m
shmatari.fast_reset --recheck`` repeats its no-op run with this version). A ROM, ale-py
version or sticky setting not in the table resets as ALE does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
import warnings
from pathlib import Path

import numpy as np

__all__ = ["VERDICTS", "proven", "use_fast_reset", "rom_md5", "ale_probability", "FastReset",
           "compare"]

_VERDICTS_FILE = Path(__file__).with_name("fast_reset_verdicts.json")

#: The most no-op starts an env saves (counts 1..this): a larger draw emulates
#: its no-ops after the restore, as an unsaved count does. Each start is a
#: screen and a state, about 42 kB: at most about 2.7 MB per env, where a
#: noop_max of 20,000 saved 840 MB.
NOOP_STARTS_MAX = 64

#: A fast reset checks the generator it follows against ALE's own (read
#: from ALE and compared, about 40-110 us) at the first reset it follows
#: and then every this many (about 1-2 us a reset): the follower's
#: invariant (two draws a frame, every frame one ``act`` of one frame)
#: checked as the envs run, not only in the tests. A difference warns
#: (``RuntimeWarning``) and goes on from ALE's generator.
CHECK_EVERY = 64

#: Serializer's bool patterns (ALE's ``Serializer.hxx``), little-endian words.
_TRUE = struct.pack("<I", 0xFAB1FAB2)
_FALSE = struct.pack("<I", 0xBAD1BAD2)

#: The primer: ``std::mt19937`` seeded with this seed draws 0.99901... first,
#: which is at least any repeat_action_probability up to it.
_PRIMER_SEED = 1989


@functools.lru_cache(maxsize=1)
def _verdicts() -> dict:
    return json.loads(_VERDICTS_FILE.read_text())


def __getattr__(name):
    if name == "VERDICTS":
        return _verdicts()
    raise AttributeError(name)


def rom_md5(path: str) -> str:
    """The ROM file's MD5, hex.

    Cached per file as ``os.stat`` sees it (device, inode, size and
    modification time, in ns): a ROM replaced or rewritten in place under a
    long-lived process is hashed again (until 2026-12-06 the cache was per
    path, and a replaced ROM was judged by its old MD5: a helper's pass).

    Raises:
        OSError: the file cannot be read.
    """
    st = os.stat(path)
    return _md5_of(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _md5_of(path: str, dev: int, ino: int, size: int, mtime_ns: int) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def ale_probability(repeat_action_probability: float) -> float:
    """The sticky probability as ALE uses it: ale-py's ``setFloat`` takes a
    C ``float``, ALE's settings keep it as text with six significant digits
    (``%g``) and read that back as a ``float``. ``0.9990136`` is
    ``0.999014`` there, ``1e-7`` is ``1e-07``, ``0.2499996`` is ``0.25``
    (checked against ALE's ``getFloat`` in the tests)."""
    return float(np.float32(float("%g" % float(np.float32(repeat_action_probability)))))


def _sticky_key(repeat_action_probability: float) -> str | None:
    # A frame acts its new action when its draw (a double) is >= ALE's
    # value of the probability: the primer's draw must pass that value, not
    # the one given (until 2026-12-05 0.9990137 passed as a double, 0.99901372
    # as ALE's float, and the primer repeated the old game's action: a
    # reproducibility pass; until 2026-12-06 0.9990136 passed as a float32,
    # but ALE keeps six digits, 0.999014: a review).
    p = ale_probability(repeat_action_probability)
    if p == 0.0:
        return "sticky_0"
    if p <= _primer_draw():
        return "sticky"
    return None


def proven(game: str, rom_path: str, repeat_action_probability: float) -> bool:
    """Whether :data:`VERDICTS` proves a fast reset exact for ``game`` (its ROM
    at ``rom_path``, by MD5), the installed ale-py and the sticky setting."""
    import ale_py

    table = _verdicts()
    key = _sticky_key(repeat_action_probability)
    if key is None or table.get("ale_py") != ale_py.__version__:
        return False
    return table[key].get(game) == rom_md5(rom_path)


def use_fast_reset(config, preprocessor=None) -> bool:
    """Whether a pool's envs reset fast: ``config.fast_reset == "auto"``,
    shmatari's own frame kernel (no ``preprocessor``), and :func:`proven`."""
    from . import games

    return (config.fast_reset == "auto" and preprocessor is None
            and proven(config.game, str(games.rom_path(config.game)),
                       config.repeat_action_probability))


# -- the saved state's bytes (ALE's ALEState::serialize and ::save) -----------------

def _split(state: bytes) -> tuple[bytes, bytes, bytes]:
    """An ``ALEState.serialize()`` into (header, inner state, tail): six
    ints (paddles, frame number, episode frame number, mode, difficulty),
    the emulator's serialisation, two ints (paddle limits)."""
    (n,) = struct.unpack_from("<i", state, 24)
    if len(state) != 28 + n + 8:
        raise ValueError("not an ALEState serialisation this module knows")
    return state[:24], state[28:28 + n], state[28 + n:]


def _join(header: bytes, inner: bytes, tail: bytes) -> bytes:
    return header + struct.pack("<i", len(inner)) + inner + tail


def _rng_split(inner: bytes) -> tuple[bytes, bytes | None]:
    """The inner state without its env-generator part, and that part (the
    TRUE pattern, the length and the generator's text), or None."""
    if inner.endswith(_FALSE):
        return inner[:-4], None
    k = len(inner)
    while True:
        k = inner.rfind(_TRUE, 0, k)
        if k < 0:
            raise ValueError("no generator in this ALEState")
        (n,) = struct.unpack_from("<i", inner, k + 4)
        if k + 8 + n == len(inner):
            return inner[:k], inner[k:]


def _console_rng_span(inner: bytes) -> tuple[int, int]:
    """Where the console generator's text lies in the inner state: after the
    ROM's MD5 string, "System" and the cycle count."""
    (n,) = struct.unpack_from("<i", inner, 0)
    o = 4 + n
    (m,) = struct.unpack_from("<i", inner, o)
    if inner[o + 4:o + 4 + m] != b"System":
        raise ValueError("not an ALEState serialisation this module knows")
    o += 4 + m + 4
    (n,) = struct.unpack_from("<i", inner, o)
    return o, o + 4 + n


def comparable(state: bytes) -> bytes:
    """A saved state (``cloneState(include_rng=True).serialize()``) without
    the console generator, which fast resets leave where the first reset
    left it: what fast and real resets must agree on."""
    header, inner, tail = _split(state)
    a, b = _console_rng_span(inner)
    return _join(header, inner[:a] + inner[b:], tail)


@functools.lru_cache(maxsize=1)
def _primer_text() -> bytes:
    """``std::mt19937(_PRIMER_SEED)`` as libstdc++ writes it (the 624 state
    words and the index), which is how ALE saves its generator."""
    mt = np.random.MT19937()
    mt._legacy_seeding(_PRIMER_SEED)  # init_genrand: std::mt19937's seeding
    return _mt_text(mt)


def _mt_text(mt: np.random.MT19937) -> bytes:
    """A NumPy MT19937 as libstdc++ writes a ``std::mt19937`` (the same
    generator): the 624 state words and the index, space-separated."""
    st = mt.state["state"]
    return (" ".join(map(str, st["key"].tolist())) + " " + str(int(st["pos"]))).encode()


def _follower(rng: bytes):
    """An ALE state's generator part (the TRUE pattern, the length, then
    ``std::mt19937`` as libstdc++ writes it) as a ``_core.MTFollower``."""
    from ._core import MTFollower

    (n,) = struct.unpack_from("<i", rng, 4)
    return MTFollower(rng[8:8 + n])


@functools.lru_cache(maxsize=1)
def _primer_draw() -> float:
    mt = np.random.MT19937()
    mt._legacy_seeding(_PRIMER_SEED)
    return int(mt.random_raw()) / 2**32  # ALE's Random::nextDouble


class FastReset:
    """One env's saved post-reset state and the restore that replaces
    ``reset_game()``.

    Args:
        ale: the env's ``ALEInterface``, right after ``reset_game()`` (its
            ``repeat_action_probability`` says when a reset needs the
            primer; until 2026-12-06 a ``sticky`` flag said so, and every
            sticky reset used it).

    Raises:
        ValueError: not an ALE state serialisation this module knows.
    """

    def __init__(self, ale):
        from ale_py import ALEState

        self._ale = ale
        self._state_type = ALEState
        saved = ale.cloneState()
        raw = saved.serialize()
        #: The post-reset screen (palette indices), what ``getScreen`` shows
        #: after a real reset.
        self.screen = np.array(ale.getScreen(), dtype=np.uint8)
        self._header, inner, self._tail = _split(raw)
        self._body, rng = _rng_split(inner)
        if rng is not None:
            raise ValueError("the post-reset state carries a generator")
        self._saved = saved
        #: saved no-op starts: count -> (header, body, tail, screen, reward)
        self._starts: dict[int, tuple] = {}
        #: whether :meth:`learn_noops` has run
        self.learned = False
        self._primer = ALEState(_join(
            self._header,
            self._body + _TRUE + struct.pack("<i", len(_primer_text())) + _primer_text(),
            self._tail))
        #: ALE's sticky probability as ALE keeps it (a float32, as a double)
        self._p = ale.getFloat("repeat_action_probability")
        #: The env's generator as this object last knew it (a
        #: ``_core.MTFollower``) at ALE's frame count ``_known_at``; None:
        #: unknown, read from ALE at the next reset.
        self._known = None
        self._known_at = 0
        #: sticky resets that needed the primer frame (the next draw did not
        #: pass): about ``repeat_action_probability`` of them
        self.primed = 0
        #: resets followed since the generator was last checked against
        #: ALE's (``CHECK_EVERY``); the first one followed is checked
        self._unchecked = CHECK_EVERY - 1
        #: checks that found the followed generator unlike ALE's (each warned)
        self.desyncs = 0

    def round_trips(self) -> bool:
        """Restores the saved state and clones it again: the same bytes?
        (For the check only: a restore right after the reset is not a no-op
        in every game, so an env in use never calls it.)"""
        self._ale.restoreState(self._saved)
        self._known = None  # the frame count moved with no draw
        return self._ale.cloneState().serialize() == self._saved.serialize()

    def _header_at(self, frame_number: int, header: bytes | None = None) -> bytes:
        """The saved header (``header``, else the post-reset one) with ALE's
        frame count since the ROM was loaded, which a reset does not clear:
        ``frame_number`` (the count before the reset) plus the frames the
        episode counts in that header (the reset's own: 8 for Air Raid, ...,
        and any no-op frames after it)."""
        header = self._header if header is None else header
        (episode_frames,) = struct.unpack_from("<i", header, 12)
        return header[:8] + struct.pack("<i", frame_number + episode_frames) + header[12:]

    def restore(self) -> None:
        """Leaves the env as ``reset_game()`` would (see the module's notes)."""
        frames = self._ale.getFrameNumber()
        self._reset_to(self._header_at(frames), self._body, self._tail,
                       self._generator(frames), 0)

    def _generator(self, frames: int):
        """The env's generator now (a ``_core.MTFollower``), ALE's frame count
        being ``frames``: the one last known advanced by two draws per frame
        emulated since (ALE's ``act`` draws once per player each frame, and
        every frame since was an ``act`` of one frame: ``frame_skip`` is 1
        and no env acts at a terminal state, which draws without a frame),
        else read from ALE (``cloneState(include_rng=True)``: about 40 µs,
        its text written and parsed, which each reset paid until 2026-12-06).
        The first reset followed, then every ``CHECK_EVERY``-th, is checked
        against ALE's: a difference (a frame emulated some other way) warns
        and ALE's is used."""
        gen = self._known
        if gen is None or frames < self._known_at:
            return self._read_generator()
        gen.advance(2 * (frames - self._known_at))
        self._unchecked += 1
        if self._unchecked >= CHECK_EVERY:
            self._unchecked = 0
            read = self._read_generator()
            if read.text() != gen.text():
                self.desyncs += 1
                warnings.warn(
                    f"shmatari's fast reset followed ALE's generator wrongly (frame "
                    f"{frames}; {self.desyncs} time(s) in this env): it goes on from ALE's "
                    f"own, but the resets since the last check may have differed from "
                    f"ALE's (sticky actions); please report it, and use fast_reset='off' "
                    f"where runs must match ALE's resets bit for bit", RuntimeWarning,
                    stacklevel=2)
                return read
        return gen

    def _read_generator(self):
        """ALE's env generator now, read from ALE (a ``_core.MTFollower``)."""
        _, inner, _ = _split(self._ale.cloneState(include_rng=True).serialize())
        return _follower(_rng_split(inner)[1])

    def _reset_to(self, header: bytes, body: bytes, tail: bytes,
                  gen, noops: int) -> None:
        """Restores a saved state (``header``, ``body``, ``tail``) that
        follows a reset and ``noops`` NOOP frames, with the env's generator
        ``gen`` (as the reset found it) advanced by those frames' draws, and
        the remembered action as a reset leaves it: NOOP, or any action if
        the next frame's draw for player A passes the probability (that frame
        then takes its new action whatever was remembered, so nothing tells
        the two apart). When it does not pass, the primer sets NOOP: the
        post-reset state with a generator whose next draw passes, one NOOP
        frame, then the saved state (a restore keeps the remembered action)."""
        ale = self._ale
        self._known = None  # until the restore is done: read from ALE if it raises
        if noops:
            gen.advance(2 * noops)
        if gen.next_draw() >= self._p:
            if noops:
                ale.restoreState(self._state_type(_join(header, body + self._text(gen), tail)))
            else:  # ALE's generator is where a reset leaves it: untouched
                ale.restoreState(self._state_type(_join(header, body + _FALSE, tail)))
        else:
            self.primed += 1
            ale.restoreState(self._primer)
            ale.act(0)  # the draw passes the primer: the remembered action is NOOP
            ale.restoreState(self._state_type(_join(header, body + self._text(gen), tail)))
        self._known, self._known_at = gen, ale.getFrameNumber()

    @staticmethod
    def _text(gen) -> bytes:
        """``gen`` as an ALE state's generator part: the TRUE pattern, the
        text's length, then ``std::mt19937`` as libstdc++ writes it."""
        text = gen.text()
        return _TRUE + struct.pack("<i", len(text)) + text

    # -- no-op starts ------------------------------------------------------------

    def save_noops(self, noops: int, reward: int) -> np.ndarray:
        """Saves the state right after a reset (real or fast) and ``noops``
        NOOP frames that neither ended the game nor reached a frame cap, with
        their summed ``reward``: the next reset that draws the same number of
        no-ops restores it (:meth:`restore_noops`) instead of emulating them.
        Each saved start holds a screen (about 34 kB) and a state (about 8 kB);
        counts above :data:`NOOP_STARTS_MAX` are not saved.

        Returns:
            np.ndarray | None: the saved screen (palette indices, uint8,
            (210, 160)); None for a count above :data:`NOOP_STARTS_MAX`.
        """
        if noops > NOOP_STARTS_MAX:
            return None
        header, inner, tail = _split(self._ale.cloneState().serialize())
        body, rng = _rng_split(inner)
        if rng is not None:
            raise ValueError("the saved state carries a generator")
        screen = np.array(self._ale.getScreen(), dtype=np.uint8)
        self._starts[noops] = (header, body, tail, screen, int(reward))
        return screen

    def learn_noops(self, noop_max: int, max_episode_frames: int = 0, learn=None) -> list:
        """Saves every start after 1..``noop_max`` no-op frames in one pass:
        a fast reset (:meth:`restore`), then ``noop_max`` NOOP frames, saving
        the state after each (:meth:`save_noops`) until one ends the game or
        reaches ``max_episode_frames`` (0: no cap; ALE's episode frame count,
        as the env's cap): those starts and any later are left to be emulated
        as before. About ``noop_max`` frames and as many clones, once per env
        (:attr:`learned`), where saving each count when it is first drawn
        emulates 1 + 2 + ... + ``noop_max`` frames over the first hundred or so
        games. The states saved are the ones those games would save (the
        frames after a reset are NOOPs, whatever the sticky draws), and the
        env is left as it was found: state, generator and frame count
        (``cloneState(include_rng=True)`` and back).

        ``learn(screen)``, if given, is called with each screen saved while
        it is still ALE's current screen: a palette learns a screen's colours
        from ALE's conversion of the current screen, and once the pass is
        over ALE shows only its last frame (learning the earlier screens
        then mapped their new palette indices to the last frame's colours).

        Returns:
            list[np.ndarray]: the screens saved (palette indices, uint8,
            (210, 160)); their colours are to be learned through ``learn``,
            not from this list, once ALE has moved on.
        """
        ale = self._ale
        self.learned = True
        before = ale.cloneState(include_rng=True)
        primed = self.primed  # this restore is no env's reset
        self.restore()
        self.primed = primed
        screens, reward = [], 0
        for k in range(1, min(noop_max, NOOP_STARTS_MAX) + 1):
            reward += ale.act(0)
            if ale.game_over(with_truncation=False) or (
                    max_episode_frames > 0
                    and ale.getEpisodeFrameNumber() >= max_episode_frames):
                break
            if k not in self._starts:
                screens.append(self.save_noops(k, reward))
                if learn is not None:
                    learn(screens[-1])
        ale.restoreState(before)
        self._known = None  # restored with the generator it had before the pass
        return screens

    def saved_noops(self, noops: int) -> bool:
        """Whether a start after ``noops`` no-op frames is saved."""
        return noops in self._starts

    def restore_noops(self, noops: int) -> tuple[np.ndarray, int]:
        """Leaves the env as ``reset_game()`` and ``noops`` NOOP frames would:
        the saved state, ALE's frame count advanced by the reset's and the
        no-ops' frames, the env's generator advanced by the draws those frames
        make (two per frame, one per player, whatever the sticky setting),
        and the remembered action as :meth:`restore` leaves it (a reset sets
        NOOP, and a NOOP frame keeps it).

        Returns:
            (screen, reward): the screen after the last no-op (palette
            indices, uint8, shape (210, 160)) and the no-ops' summed reward.
        """
        header, body, tail, screen, reward = self._starts[noops]
        frames = self._ale.getFrameNumber()
        self._reset_to(self._header_at(frames, header), body, tail, self._generator(frames),
                       noops)
        return screen, reward


# -- the check ------------------------------------------------------------------------

def _new_ale(rom_path: str, seed: int, repeat_action_probability: float):
    from ale_py import ALEInterface, LoggerMode

    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setInt("random_seed", seed)
    ale.setFloat("repeat_action_probability", repeat_action_probability)
    ale.setInt("frame_skip", 1)
    ale.loadROM(rom_path)
    return ale


def _env_rng(ale) -> bytes:
    _, inner, _ = _split(ale.cloneState(include_rng=True).serialize())
    return _rng_split(inner)[1]


def compare(rom_path: str, repeat_action_probability: float, seed: int, *,
            episodes: int = 4, max_frames: int = 2000, noop_max: int = 0) -> str | None:
    """Plays one action stream on two emulators, one reset by ALE and one by
    :class:`FastReset`, and says where they first differ (None: nowhere).

    Each episode ends at game over or after a random number of frames (1 to
    60 for half of them, else 1 to ``max_frames``: resets from many states
    of running games too); actions are uniform over
    the game's minimal set, NOOP a third of the time. Compared after each
    reset: the screen, RAM, lives, game-over flag and both frame counts;
    after each frame: reward, screen, RAM, lives, game over; at each
    episode's end: the env's random generator (what sticky frames draw).

    Args:
        rom_path: the ROM.
        repeat_action_probability: ALE's sticky-action probability.
        seed: ALE's random_seed and the action stream's seed.
        episodes: episodes to play (the first starts from a real reset in
            both).
        max_frames: the longest episode, in frames.
        noop_max: above 0, each episode starts with 1..noop_max NOOP frames
            (drawn from the action stream's generator): emulated after the
            real reset; on the fast side, as :class:`shmatari._core.AtariCore`
            does, the first fast new game saves every start in one pass
            (:meth:`FastReset.learn_noops`); each game restores the start
            with its count of no-ops where one is saved
            (:meth:`FastReset.restore_noops`), else emulates them after a
            fast reset and saves them. Compared after them as after a reset.

    Returns:
        str | None: the first difference, e.g. ``"episode 2 frame 0: screen"``.
    """
    import numpy as np

    real = _new_ale(rom_path, seed, repeat_action_probability)
    fast = _new_ale(rom_path, seed, repeat_action_probability)
    real.reset_game()
    fast.reset_game()
    fr = FastReset(fast)
    if not fr.round_trips():
        return "the saved state does not round-trip"
    actions = real.getMinimalActionSet()
    noop = type(actions[0]).NOOP  # ALE's action 0, whatever the minimal set holds
    rng = np.random.default_rng(seed)

    def same(what):
        return what(real) == what(fast)

    for ep in range(episodes):
        screen = None
        noops = int(rng.integers(1, noop_max + 1)) if noop_max > 0 else 0
        if ep:
            real.reset_game()
            if noops and not fr.learned and not fr.saved_noops(noops):
                fr.learn_noops(noop_max)  # as AtariCore's first fast new game
            if noops and fr.saved_noops(noops):
                reward = sum(real.act(noop) for _ in range(noops))
                screen, saved = fr.restore_noops(noops)
                if saved != reward:
                    return f"episode {ep} {noops} no-ops: reward"
                noops = 0
            else:
                fr.restore()
                screen = fr.screen
        else:
            screen = fast.getScreen()
        if noops:
            reward = 0
            for t in range(noops):
                r = real.act(noop)
                if r != fast.act(noop):
                    return f"episode {ep} no-op {t}: reward"
                reward += r
                if real.game_over():
                    return f"episode {ep} no-op {t}: game over (choose a smaller noop_max)"
            fr.save_noops(noops, reward)
            screen = fast.getScreen()
        if not np.array_equal(real.getScreen(), screen):
            return f"episode {ep} reset: screen"
        for name, what in (("RAM", lambda a: a.getRAM().tobytes()), ("lives", lambda a: a.lives()),
                           ("game over", lambda a: a.game_over()),
                           ("frame counts", lambda a: (a.getFrameNumber(),
                                                       a.getEpisodeFrameNumber())),
                           ("random generator", _env_rng)):
            if not same(what):
                return f"episode {ep} reset: {name}"
        # half the episodes short: many different states to reset from
        length = int(rng.integers(1, (60 if rng.random() < 0.5 else max_frames) + 1))
        for t in range(length):
            a = actions[0] if rng.random() < 1 / 3 else actions[int(rng.integers(len(actions)))]
            if real.act(a) != fast.act(a):
                return f"episode {ep} frame {t}: reward"
            if not np.array_equal(real.getScreen(), fast.getScreen()):
                return f"episode {ep} frame {t}: screen"
            if not np.array_equal(real.getRAM(), fast.getRAM()):
                return f"episode {ep} frame {t}: RAM"
            if real.lives() != fast.lives() or real.game_over() != fast.game_over():
                return f"episode {ep} frame {t}: lives or game over"
            if real.game_over():
                break
        if _env_rng(real) != _env_rng(fast):
            return f"episode {ep} end: random generator"
    return None


#: The comparisons behind :data:`VERDICTS`: (seeds, episodes, max_frames,
#: noop_max) per run; a game is proven where every run of it found no
#: difference. The third run (many short episodes, with no-op starts) was
#: added with saved no-op starts; it found that Boxing's real reset does not
#: always leave the same RAM (its frame counter one off, from the 16th reset
#: on in each seed tried), which the first two had not met.
CHECK_RUNS = (((11, 12, 13), 5, 3000, 0), ((21, 22), 8, 1500, 0), ((31, 32), 24, 60, 30))


def _table(runs=CHECK_RUNS, games=None) -> dict:
    """Recomputes :data:`VERDICTS` for the installed ale-py (slow: about an
    hour on 2 busy cores)."""
    import ale_py

    from . import games as games_mod

    table = {"ale_py": ale_py.__version__,
             "checks": [{"seeds": list(s), "episodes": e, "max_frames": m, "noop_max": n}
                        for s, e, m, n in runs],
             "sticky_0": {}, "sticky": {}, "differ": {}}
    for game in games or games_mod.list_games():
        path = str(games_mod.rom_path(game))
        for key, p in (("sticky_0", 0.0), ("sticky", 0.25)):
            why = None
            for seeds, episodes, max_frames, noop_max in runs:
                for seed in seeds:
                    why = compare(path, p, seed, episodes=episodes, max_frames=max_frames,
                                  noop_max=noop_max)
                    if why:
                        break
                if why:
                    break
            if why is None:
                table[key][game] = rom_md5(path)
            else:
                table["differ"][f"{game} {key}"] = why
            print(game, key, why or "same", flush=True)
    # Whether a restore is a reset does not depend on stickiness: a game that
    # differs at one setting is proven at neither.
    both = set(table["sticky_0"]) & set(table["sticky"])
    for key in ("sticky_0", "sticky"):
        for game in sorted(set(table[key]) - both):
            del table[key][game]
            table["differ"][f"{game} {key}"] = "differs with the other sticky setting"
    return table


def recheck(run: int = 2) -> dict:
    """Repeats one of :data:`CHECK_RUNS` (by index; the third, with no-op
    starts, by default: about 4 minutes on one core) over every game the
    table proves, at both sticky settings, with this version's
    :class:`FastReset`; returns ``{(game, sticky, seed): difference}``,
    empty when every comparison agrees (printed as it goes)."""
    from . import games as games_mod

    seeds, episodes, max_frames, noop_max = CHECK_RUNS[run]
    differ, runs = {}, 0
    for game in games_mod.list_games():
        path = str(games_mod.rom_path(game))
        for p in (0.0, 0.25):
            if not proven(game, path, p):
                continue
            for seed in seeds:
                runs += 1
                why = compare(path, p, seed, episodes=episodes, max_frames=max_frames,
                              noop_max=noop_max)
                if why:
                    differ[(game, p, seed)] = why
                    print(game, p, seed, why, flush=True)
    print(f"{runs} comparisons, {len(differ)} differ", flush=True)
    return differ


def main(argv=None) -> int:
    """``python -m shmatari.fast_reset``: recomputes the verdict table into a
    file, or rechecks the proven games (exit status 1 if one differs)."""
    import argparse

    from . import _cli

    p = _cli.ArgumentParser(
        prog="python -m shmatari.fast_reset", formatter_class=_cli.HelpFormatter,
        description="Recomputes the fast-reset verdict table (every game, both sticky "
                    "settings: about an hour on one core) into OUT, as "
                    "fast_reset_verdicts.json is made, or with --recheck repeats one of "
                    "its check runs over the games it proves.")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("out", nargs="?", metavar="OUT", help="the JSON file to write")
    mode.add_argument("--recheck", nargs="?", const=2, type=int, metavar="RUN",
                      choices=range(len(CHECK_RUNS)),
                      help=f"repeat check run RUN (0..{len(CHECK_RUNS) - 1}, default 2: the "
                           f"no-op starts, about 4 minutes) over every proven game; exit "
                           f"status 1 if one differs")
    p.add_argument("--games", default=None, metavar="NAMES",
                   help="with OUT: only these games, comma-separated (ROM ids)")
    args = p.parse_args(argv)
    if args.recheck is not None:
        if args.games is not None:
            p.error("--games goes with OUT, not --recheck")
        return 1 if recheck(args.recheck) else 0
    _cli.check_output_path(p, "OUT", args.out)
    names = args.games.split(",") if args.games else None
    table = json.dumps(_table(games=names), indent=1, sort_keys=True) + "\n"
    _cli.write_output(args.out, lambda f: f.write(table.encode()), ".json")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
