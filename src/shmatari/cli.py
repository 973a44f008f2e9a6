"""``shmatari``: the command line. ``shmatari serve`` runs a pool for other processes.

``shmatari serve Breakout --num-envs 32 --name demo`` starts the workers and the
segment ``/dev/shm/shmatari_demo``, prints the name to attach to, and serves
until SIGINT or SIGTERM; then it stops the workers and removes the segment. It
does the same, with exit status 1, when a worker fails or dies. Clients attach
with ``shmatari.attach("demo")`` (Python) or ``shmatari_attach(&c, "demo", ...)``
(C/C++, ``csrc/include/shmatari/shmatari.h``), one at a time; a client that
detaches or dies leaves the pool running for the next.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import select
import signal
import struct
import sys
import time

import numpy as np

from . import _cli, _core, config as _config, shm

__all__ = ["main", "serve"]

#: Pool names: a letter first (so no name looks like an automatic
#: ``<pid>_<hex>`` one), then letters, digits, ``_`` and ``-``. 20 characters
#: at most keeps ``/shmatari_<name>`` within macOS's 31.
NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,19}")

#: Seconds between the server's checks of its workers and of a client's liveness.
_POLL = 0.1
#: Seconds between the server's reads of the claim word (``client_pid``)
#: while nothing happens (a C client detaches without an event).
_CLAIM_POLL = 0.005
#: Seconds the server keeps watching the claim word closely after a process
#: opens or closes the segment (an attach in progress).
_CLAIM_SPIN = 0.02
#: At most this many seconds of such watching in a row, however often the
#: segment is opened (a client retrying its attach every few milliseconds
#: kept the server watching, and not checking its workers, for as long as it
#: retried); between its reads the server sleeps this long.
_CLAIM_SPIN_MAX = 0.05
_CLAIM_NAP = 50e-6
#: Seconds an excess of opens over attaches seen must last before it is
#: logged as attaches not seen: the open and the close of one process's
#: read-only look at the segment (a second server refused the name, a
#: stale-segment sweep) can fall in two looks of the claim word far apart
#: on a loaded machine, and the open alone read as an unseen attach (a new
#: user's pass: one run in ten beside two busy loops).
_UNSEEN_GRACE = 1.0
#: Claim lines (attached, detached, ...) logged per second; more are counted
#: and logged as one line: a process flipping the claim word flooded the log.
_CLAIM_LINES_PER_S = 20


class _Stop(BaseException):
    """SIGINT or SIGTERM, raised in the main thread."""


#: Set by a stop signal, and checked by serve's loop: the _Stop the handler
#: raises is lost where the handler runs inside a finalizer (``__del__``, a
#: weakref callback: Python prints "Exception ignored" and goes on), and the
#: server must stop all the same.
_STOP_REQUESTED = [False]


def _on_stop_signal(signum, frame):
    if _STOP_REQUESTED[0]:
        # A stop is under way: a second signal must not cut its cleanup
        # short. (One during the cleanup of a start that the first stopped,
        # before serve's finally ignores signals, left the named segment:
        # an attacker's pass, 3 of 3.)
        return
    _STOP_REQUESTED[0] = True
    raise _Stop()


def _log(msg: str) -> None:
    """One line on stderr. A reader that went away (``serve ... 2>&1 | head``)
    does not stop the server: stderr then goes to /dev/null."""
    try:
        print(f"shmatari serve: {msg}", file=sys.stderr, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stderr.fileno())
        os.close(devnull)


def _plural(count: int, word: str, plural: str) -> str:
    return f"{count} {word if count == 1 else plural}"


def _free_name(segment: str) -> None:
    """Makes ``segment`` available: removes it if its server is gone.

    What sits at ``/dev/shm/<segment>`` may be anything another local user
    put there (docs/layout.md, "Trust"): it is never followed if a link,
    never removed unless it is this user's, and every refusal is one line.
    A segment of this user is stale, and removed, when its owner is gone:
    the pid in its header is dead, or is not the process whose start time
    the header records (``Segment.owner_alive``, the one liveness rule),
    or no process maps it (nobody holds its in-use lock, which every live
    server holds); so a squatter's file naming a live pid does not block
    the name.

    Raises:
        SystemExit: a live server already serves it, or it is not ours to
            remove (another user's, not a shmatari pool, unreadable).
    """
    path = f"{shm.SHM_DIR}/{segment}"
    unlocked = False  # its header's owner lives, but no process holds its in-use lock
    try:
        # Read-only: a live server counts the read-write opens of its file as
        # clients (_OpenWatch), and this look is none.
        mapped = shm.attach(segment, readonly=True)
    except FileNotFoundError:
        return
    except shm.UntrustedSegmentError as exc:
        # The trust check's text speaks to a client; the server's way out is
        # the file's owner, or another name.
        text = str(exc)
        cut = text.find("; a client attaches only")
        if cut >= 0:
            text = text[:cut] + "; only that user (or root) can remove it"
        raise SystemExit(f"shmatari serve: the name is taken: {text}; or choose another "
                         f"--name") from None
    except (ValueError, OSError) as exc:  # an empty or special file, EINVAL, ...
        if isinstance(exc, ValueError):  # an empty file: a server being created, or debris
            owner, alive = 0, False
            try:
                st = os.lstat(path)
                ident = (st.st_dev, st.st_ino)
            except FileNotFoundError:
                return
        else:
            raise SystemExit(f"shmatari serve: cannot use {path} "
                             f"({exc.strerror or exc}); choose another --name") from None
    else:
        seg, ident = None, shm.identity(mapped)
        try:
            try:
                seg = _core.Segment(mapped.buf)
                # the owner's pid and start time (Segment.owner_alive)
                owner, alive = seg.header()["owner_pid"], seg.owner_alive()
            except ValueError:
                owner, alive = -1, False
            if alive:
                import fcntl
                # Converting our own shared lock to an exclusive one succeeds
                # only if no other process holds it: then none maps it.
                try:
                    fcntl.flock(mapped._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # noqa: SLF001
                except OSError:
                    pass
                else:
                    alive = False
                    unlocked = True
        finally:
            if seg is not None:
                seg.release()
            del seg
            mapped.close()
        if owner == -1:
            raise SystemExit(f"shmatari serve: {path} exists and is not a shmatari pool; "
                             f"choose another --name (or remove it if it is debris of yours)")
        if alive:
            raise SystemExit(f"shmatari serve: the name is taken: pid {owner} already "
                             f"serves {path}; choose another --name or stop it")
    if unlocked:  # a copy, or a file whose header names a live pid (an attacker's pass)
        _log(f"removing {path}: no process holds it (its header names pid {owner}, "
             f"alive, which does not hold its lock: not its server)")
    else:
        _log(f"removing {path}, left by a server that is gone (pid {owner})")
    shm.unlink_own(segment, ident)  # the file judged above, not one created since


def _options_line(cfg: _config.EnvConfig, preset: str | None) -> str:
    """``preset dqn`` / ``ALE v5 options``, then the options that differ from it."""
    base = dict(_config.OPTION_DEFAULTS)
    if preset:
        base.update(_config.PRESETS[preset])
    options = cfg.env_options()
    changed = [f"{k}={options[k]}" for k in base if options[k] != base[k]]
    return (f"preset {preset}" if preset else "ALE v5 options") + \
        (f" with {', '.join(changed)}" if changed else "")


def _claim_word(mapped) -> np.ndarray:
    """A 0-d int32 view of the header's ``client_pid`` in ``mapped``, at the
    offset the C header gives."""
    offset = _core.struct_layout()["shmatari_header"]["client_pid"]
    return np.ndarray((), np.int32, buffer=mapped.buf, offset=offset)


class _OpenWatch:
    """Opens of the segment file by other processes, through Linux's inotify
    (``IN_OPEN``; ``IN_CLOSE_NOWRITE`` tells apart the opens of other pools'
    stale-segment sweeps, which open it read-only and close it at once, from
    clients, which open it read-write). ``fd`` is -1 where inotify is
    missing; then the claim word is only polled."""

    IN_CLOSE_NOWRITE, IN_OPEN = 0x10, 0x20

    def __init__(self, path: str):
        self.fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return
        if fd < 0:
            return
        if libc.inotify_add_watch(fd, os.fsencode(path), self.IN_OPEN | self.IN_CLOSE_NOWRITE) < 0:
            os.close(fd)
            return
        self.fd = fd

    def wait(self, timeout: float) -> bool:
        """Sleeps until an event or ``timeout`` seconds; True on an event."""
        if self.fd < 0:
            time.sleep(timeout)
            return False
        return bool(select.select([self.fd], [], [], timeout)[0])

    def read(self) -> tuple[int, int]:
        """(opens, read-only closes) since the last call; never blocks."""
        opens = closes = 0
        while self.fd >= 0:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                break
            off = 0
            while off + 16 <= len(data):
                _, mask, _, name_len = struct.unpack_from("iIII", data, off)
                opens += bool(mask & self.IN_OPEN)
                closes += bool(mask & self.IN_CLOSE_NOWRITE)
                off += 16 + name_len
        return opens, closes

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


#: The kernel's flag of a process in ``do_exit`` (/proc/<pid>/stat's 9th
#: field), set before it lets go of its memory and kept as a zombie.
_PF_EXITING = 0x4


def _not_a_client(pid: int, ident: tuple[int, int] | None, own: set) -> str | None:
    """Why process ``pid``, alive and named by the claim word, cannot be the
    pool's client, or None. A client maps the segment before it claims it
    (docs/layout.md, Attach), so a process that does not map the file
    ``ident`` (``(st_dev, st_ino)``; from ``/proc/<pid>/maps``) holds a claim
    that another process wrote: with any long-lived pid there (1, another
    user's daemon) every attach was refused as "busy" for as long as the
    server ran (an attacker's pass). The server and its workers map it but
    are never the client. None also where ``/proc`` cannot tell (not Linux),
    and for a process that is exiting (``PF_EXITING``: a client killed right
    after it claimed, whose mappings are gone before it is a zombie).
    """
    if pid in own:
        return "is the server or one of its workers"
    if ident is None or not os.path.isdir("/proc/self"):
        return None
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            maps = f.read()
    except FileNotFoundError:
        return None  # gone: judged dead by the caller
    except PermissionError:
        # The kernel hides the map of a process that is not dumpable (a
        # binary with file capabilities, a set-id program, one that called
        # prctl(PR_SET_DUMPABLE, 0)) from its own user too: such a client
        # lost its claim 0.1 s after every attach (an attacker's pass,
        # 2026-12-07). A process of this user is judged by its life alone;
        # this user's processes can rewrite the word anyway (docs/layout.md,
        # Trust, "Limits").
        if _same_user(pid):
            return None
        return "is another user's process (its memory map cannot be read)"
    except OSError:
        return None
    dev = f"{os.major(ident[0]):02x}:{os.minor(ident[0]):02x}".encode()
    ino = str(ident[1]).encode()
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) >= 5 and fields[3] == dev and fields[4] == ino:
            return None
    try:  # a client that is exiting has no mappings left: its death is judged instead
        with open(f"/proc/{pid}/stat", "rb") as f:
            flags = int(f.read().rsplit(b")", 1)[1].split()[6])
    except (OSError, ValueError, IndexError):
        return None
    if flags & _PF_EXITING:
        return None
    return "does not map the segment"


def _same_user(pid: int) -> bool:
    """Whether process ``pid`` opens files as this process's user (its fs
    uid, in ``/proc/<pid>/status``, readable by every user, is this
    process's effective uid): one that could have opened the segment; True
    where it cannot be read (gone: judged dead by the caller)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    # real, effective, saved, fs: the fs uid opens files, and a
                    # client opened the 0600 segment (its real or effective uid
                    # kept a set-uid program's of another user, which cannot
                    # open it: a review)
                    return int(line.split()[4]) == os.geteuid()
    except (OSError, ValueError):
        return True
    return True


class _Clients:
    """Logs each client that attaches, detaches or dies.

    The claim word (``client_pid``) holds the current client's pid; the
    header keeps no count of attaches, so a client that attaches and
    detaches between two reads would go unseen. The server therefore sleeps
    on the segment file's inotify events: a client opening the segment wakes
    it, and it then reads the claim word closely until the attach is over.
    Should a client still come and go unseen (it held the pool for
    microseconds, or was refused), the open and close are logged without a
    pid."""

    def __init__(self, claim: np.ndarray, watch: _OpenWatch, guard=None, release=None,
                 not_a_client=None, restore=None):
        self.claim, self.watch = claim, watch
        self.guard = guard  # called before each read of the claim word
        # release(pid): frees the claim if pid still holds it, True if it did
        # (Segment.unclaim); restore(pid): gives it back if the word is 0,
        # True if it did (Segment.reclaim)
        self.release, self.restore = release, restore
        # not_a_client(pid): why a live pid cannot be the client, or None
        self.not_a_client, self.judged = not_a_client, False
        self.client, self.reported_dead = 0, False
        # When the client started (process_start, read as its claim is first
        # seen): the claim word holds a pid alone (ABI 1.x), and a pid that
        # another process took over after the client died is not the client.
        self.client_start = 0
        self.balance = 0  # client opens of the segment minus attaches seen
        # since when balance has been above 0, and the holder then (_report_unseen)
        self.unseen_since, self.unseen_holder = None, 0
        # this second's claim lines: when it began, lines logged, lines counted
        self.window, self.said, self.unsaid = time.monotonic(), 0, 0

    def _say(self, msg: str) -> None:
        """Logs a claim line, up to _CLAIM_LINES_PER_S a second; the rest are
        counted (:meth:`_flush`)."""
        self._flush()
        if self.said < _CLAIM_LINES_PER_S:
            self.said += 1
            _log(msg)
        else:
            self.unsaid += 1

    def _flush(self, final: bool = False) -> None:
        """Once the second is over (or ``final``ly): one line for the claim
        lines not logged."""
        now = time.monotonic()
        if now - self.window < 1.0 and not final:
            return
        if self.unsaid:
            _log(f"{self.unsaid} more changes of the claim word in {now - self.window:.1f} s "
                 f"were not logged one by one (over {_CLAIM_LINES_PER_S} a second: clients "
                 f"attaching and detaching in a fast loop, or a process other than a "
                 f"client writing the word)")
        self.window, self.said, self.unsaid = now, 0, 0

    def _read_claim(self) -> None:
        if self.guard is not None:
            self.guard()
        now = int(self.claim)
        if now == self.client:
            return
        if self.client and not self.reported_dead:
            if not now:
                self._say(f"client pid {self.client} detached")
            elif _core.process_alive(self.client, self.client_start):
                # It detached and the other attached between two reads, or
                # another process rewrote the word.
                self._say(f"client pid {self.client} (still running) detached or lost the "
                          f"claim, and pid {now} holds it now")
            else:
                self._say(f"client pid {self.client} is gone; pid {now} took over")
        if now:
            self._say(f"client pid {now} attached")
            self.balance -= 1  # judged with its open by the wait() that reads it
        self.client, self.reported_dead, self.judged = now, False, False
        self.client_start = _core.process_start(now) if now else 0

    def wait(self, timeout: float) -> None:
        """Up to ``timeout`` seconds of watching."""
        event = self.watch.wait(timeout)
        self._read_claim()
        if not event:
            return
        holder = self.client
        # Each attach opens the segment read-write once, as it begins (the
        # read-only opens of stale-segment sweeps are closed at once, so
        # opens minus read-only closes counts the clients): over time these
        # opens match the attaches seen, and any excess went unseen.
        opens, ro_closes = self.watch.read()
        now = time.monotonic()
        quiet_until, give_up = now + _CLAIM_SPIN, now + _CLAIM_SPIN_MAX
        while now < quiet_until:
            self._read_claim()
            o, c = self.watch.read()
            now = time.monotonic()
            if o or c:
                opens, ro_closes = opens + o, ro_closes + c
                quiet_until = min(now + _CLAIM_SPIN, give_up)
            time.sleep(_CLAIM_NAP)
        self.balance += opens - ro_closes
        self._note_unseen(holder if holder and self.client == holder else 0)

    def _note_unseen(self, holder: int = 0) -> None:
        """Starts (or ends) the grace of an excess of opens over attaches seen."""
        if self.balance <= 0:
            self.unseen_since = None
        elif self.unseen_since is None:
            self.unseen_since, self.unseen_holder = time.monotonic(), holder

    def _report_unseen(self, final: bool = False) -> None:
        """Logs the attaches not seen to claim the pool: an excess of opens
        that lasted :data:`_UNSEEN_GRACE` (or is still there at the stop,
        once the pending events are taken)."""
        if final:
            self._count_opens()
            self._note_unseen()
        if self.balance <= 0:  # settled since (a claim seen before its open was read)
            self.unseen_since = None
        if self.unseen_since is None or \
                (not final and time.monotonic() - self.unseen_since < _UNSEEN_GRACE):
            return
        holder, count = self.unseen_holder, self.balance
        self.balance, self.unseen_since = 0, None  # first: a stop right after logs it once
        _log(f"{_plural(count, 'attach', 'attaches')} to the pool ended without "
             f"being seen to claim it: "
             + (f"refused while pid {holder} held it (one client at a time), or pid "
                f"{holder} detached and attached again between two looks"
                if holder else
                "each attached and detached between two looks of this log (a "
                "fast attach loop), or was refused as busy (a client this log has "
                "not seen held the pool), or failed"))

    def check(self) -> None:
        self._flush()
        self._report_unseen()
        if self.client and not self.reported_dead and \
                not _core.process_alive(self.client, self.client_start):
            # the word read again first: a client that detached and exited
            # since the last read is logged as detached, not dead (an
            # attacker's pass: "client pid N died" after a clean detach)
            self._read_claim()
        if self.client and not self.reported_dead and \
                not _core.process_alive(self.client, self.client_start):
            # The claim is freed now (if that pid still holds it), not left
            # for the next attach to judge: by then another process may have
            # the pid, and the dead client would look alive (ABI 1.x keeps
            # no start time for the client). The server judges the pid with
            # the start time it read when it saw the claim, so a process that
            # took the pid over in between (another user's too: the C claim
            # counts it alive) does not hold the pool for the dead client.
            if self.release is not None:
                self.release(self.client)
            _log(f"client pid {self.client} died; its claim is freed, the next client to "
                 f"attach takes the pool")
            self._forget_claim()
        elif self.client and not self.judged and self.not_a_client is not None:
            # A client maps the segment before it claims it and unclaims
            # before it unmaps, so while its claim is in the word it maps the
            # file. The server judged a claim it saw a while before: the
            # client had detached (the word 0, unseen) and was attaching
            # again, unmapped at the look, then claimed again before the
            # swap below, which freed its live claim; its next call failed
            # ("client_pid reads 0": a soak test's attach loop, about one in
            # 500 cycles, 2026-12-06). So: the opens so far are taken, the
            # word is read again (a claim that changed meanwhile is judged at
            # the next check), and after the look, an open of the file since
            # that read (an attach, which opens the file, then maps it, then
            # claims) means the look may have fallen in such a gap: judged
            # again at the next check.
            pid = self.client
            self._count_opens()
            self._read_claim()
            if self.client != pid:
                return
            self.judged = True  # once per claim: a client keeps its mapping
            why = self.not_a_client(pid)
            if why is not None and self._count_opens():
                self.judged = False
                return
            if why is not None:
                freed = self.release is not None and self.release(pid)
                if freed and self._count_opens() and self.restore is not None and \
                        self.restore(pid):
                    # An attach opened the file between the look and the swap:
                    # perhaps this pid's, claiming again within that window (a
                    # race hunter saw it with 2 ms added there): its claim is
                    # given back, and judged again at the next check.
                    self.judged = False
                    return
                if freed:  # outside the rate limit: a claim freed is always logged
                    _log(f"pid {pid} holds the claim but {why}: another process wrote "
                         f"the claim word; it is freed")
                self._forget_claim()

    def _count_opens(self) -> int:
        """Takes the segment file's pending open events into the count of
        attaches (``balance``, as :meth:`wait` does); returns the opens."""
        opens, ro_closes = self.watch.read()
        self.balance += opens - ro_closes
        self._note_unseen()
        return opens

    def _forget_claim(self) -> None:
        """After freeing a claim: the next sighting of the word, the same pid
        included, is a new claim, judged again. (The freed pid was kept as
        the client, judged: written again into the word, by a process that
        then left, it was never looked at again, and every attach was refused
        as busy for as long as the server ran: an attacker's pass.)"""
        self.client, self.client_start = 0, 0
        self.reported_dead, self.judged = False, False


class _Shrunk(Exception):
    """The segment was made smaller under the server (``ftruncate``)."""


def _pool_words_wrong(seg, num_workers: int) -> str | None:
    """What the served pool's own header words say that its workers do not:
    ``pool_state`` not RUNNING, ``failed_workers`` not 0, ``ready_workers``
    not every worker (each word read once). serve() reads them, then checks
    its workers (a worker that failed in between is named as itself), and
    stops on a word no worker explains: a process that maps the segment
    wrote it, and no client could attach again ("the pool was still
    starting", "a worker failed"), while the server served on and logged
    nothing. None: all as they should be."""
    state = seg.pool_state()
    ready, failed = seg.counts()
    if state != _core.POOL_RUNNING:
        return f"its pool_state word is {state}, not {_core.POOL_RUNNING} (running)"
    if failed != 0:
        return f"its failed_workers word is {failed}, with no worker failed"
    if ready != num_workers:
        return f"its ready_workers word is {ready}, not {num_workers}"
    return None


#: The header's words that change while a pool runs, or that no attach
#: reads: the claim, ``pool_state`` (:func:`_pool_words_wrong`), the seed a
#: client writes before a reseed, the reserved words. Every other word of
#: its first 512 bytes (geometry, offsets, action set, owner) is written
#: once, before the pool runs.
_LIVE_HEADER_WORDS = frozenset({"client_pid", "pool_state", "seed_words", "reserved0"})
#: Each worker record's words written once before the pool runs (the
#: creator's group, the worker's pid); its ``state`` is
#: ``Supervisor.dead_workers``'s.
_FIXED_WORKER_WORDS = ("pid", "env_begin", "env_end")


class _FixedWords:
    """The served pool's words that are written once, before it runs
    (:data:`_LIVE_HEADER_WORDS`, :data:`_FIXED_WORKER_WORDS`), against the
    server's own record of them: the header it computed, its pid and the
    start time it wrote, each worker's pid and group; and the action set,
    the one taken from the segment: its client read it once and checked it
    as the pool started, right after worker 0 wrote it (a rewrite before
    that read, to another valid set, is not seen). A process that maps the segment and
    rewrites one (``num_envs``, ``owner_pid``, ``num_actions``, an action
    id, a worker's pid or group) makes every later attach fail ("invalid
    geometry", "the server is gone", "worker 1 died"), and the server
    served on, logging only attaches that ended unseen (an attacker's
    pass). :meth:`changed` names the first that differs.

    Args:
        header: the header's bytes as the creator computed them
            (``Supervisor.header``), before the segment existed.
        owner: (pid, start time) of the creator.
        action_set: the ALE action ids the server's client read once and
            checked as the pool started.
        workers: each worker's (pid, env_begin, env_end).
    """

    def __init__(self, header: bytes, owner: tuple, action_set, workers: list):
        members = _core.MEMBERS["shmatari_header"]
        worker = _core.MEMBERS["shmatari_worker_ctrl"]
        stride = _core.struct_layout()["shmatari_worker_ctrl"]["sizeof"]
        worker_ctrl_offset = _core.header_words(header)["worker_ctrl_offset"]
        model = bytearray(header[:512])

        def put(name, values):
            off, dtype, count = members[name]
            data = np.zeros(count, dtype)
            data[:len(values)] = values
            model[off:off + dtype.itemsize * count] = data.tobytes()

        put("owner_pid", [owner[0]])
        put("owner_start", [owner[1]])
        put("num_actions", [len(action_set)])
        put("action_set", list(action_set))
        self._spans, self._values = [], []
        for name, (off, dtype, count) in members.items():
            if off + dtype.itemsize * count <= 512 and name not in _LIVE_HEADER_WORDS:
                span = (f"{name} word", off, dtype, count)
                self._spans.append(span)
                self._values.append(self._read(model, span))
        for w, fixed in enumerate(workers):
            for name, value in zip(_FIXED_WORKER_WORDS, fixed):
                off, dtype, count = worker[name]
                self._spans.append((f"worker {w}'s {name} word",
                                    worker_ctrl_offset + w * stride + off, dtype, count))
                self._values.append([int(value)])

    @staticmethod
    def _read(buf, span) -> list:
        _, off, dtype, count = span
        return np.frombuffer(bytes(buf[off:off + dtype.itemsize * count]), dtype).tolist()

    def changed(self, buf) -> str | None:
        """The first word of the segment (``buf``) that does not hold what
        the server wrote or expects there (each read once), as text; None:
        none."""
        for span, was in zip(self._spans, self._values):
            now = self._read(buf, span)
            if now != was:
                if len(now) == 1:  # one word: its value, not a list of one
                    now, was = now[0], was[0]
                return (f"its {span[0]} is {now}, not {was} (written once, before the pool "
                        f"ran)")
        return None


def _restore_size(segment, total: int) -> bool:
    """The server's guard against a shrunk segment: a process of the same
    user may ``ftruncate`` it, and then every access to the lost pages is a
    SIGBUS, which would kill the server before it removes the segment. Before
    each of its reads the server checks the size, and restores it (the lost
    pages come back as zeros) so that it, and its workers, can stop cleanly.
    A shrink between this check and the read still kills it (a documented
    limit, docs/layout.md "Trust"). Returns True if the size was restored."""
    fd = getattr(segment, "_fd", -1)
    if fd < 0:
        return False
    size = os.fstat(fd).st_size
    if size >= total:
        return False
    os.ftruncate(fd, total)
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, total)
    _log(f"{segment.name} was shrunk to {size} bytes (of {total}) by another process; "
         f"size restored, stopping")
    return True


def _segment_changed(segment, total: int, ident) -> str | None:
    """What another process of the same user changed in the served
    segment's file that makes every attach fail while the server serves on:
    it grew (the size no longer ``total``; ``ftruncate`` past the end leaves
    a hole, which attach refuses as sparse), its mode or owner changed
    (``chmod 0644`` also lets every local user read the frames), checked as
    attach checks it (:func:`shmatari._core.trust_fd`, one ``fstat``), or
    its name in ``/dev/shm`` now names another file, or none (``lstat``:
    clients can no longer reach this pool). A shrink is
    :func:`_restore_size`'s. None: unchanged."""
    fd = getattr(segment, "_fd", -1)
    if fd < 0:
        return None
    path = f"{shm.SHM_DIR}/{segment.name}"
    code, msg, size = _core.trust_fd(path, fd)
    if code != _core.OK:  # attach's words, less its advice to the user
        return msg.split("; remove it")[0]
    if size != total:
        return f"{path} was grown to {size} bytes (of {total})"
    named = shm.named_identity(segment.name)
    if named != ident:
        return (f"{path} was removed" if named is None else
                f"{path} now names another file")
    return None


def serve(cfg: _config.EnvConfig, name: str | None, out=None,
          preset: str | None = None) -> int:
    """Serves a pool until SIGINT / SIGTERM (returns 0) or a worker failure
    (returns 1). Prints one line ``ready name=... segment=... pid=...`` to
    ``out`` once clients may attach, and logs on stderr each client that
    attaches, detaches or dies (see ``_Clients``).

    Args:
        cfg: the pool (see :func:`shmatari.config.build_config`).
        name: the pool name, or None for an automatic one.
        out: where the ready line goes (default: standard output; a
            reader that went away before it does not stop the server).
        preset: the preset ``cfg`` was built with, for the start line.
    """
    from .env import ShmVectorEnv
    from .errors import WorkerError

    segment = _core.segment_name(name) if name else shm.new_name()
    if name:
        _free_name(segment)
    # Both handled explicitly: a shell starts background jobs with SIGINT
    # ignored, and Python would keep it so.
    _STOP_REQUESTED[0] = False
    previous = {}
    env = mapped = claim = watch = clients = None
    total = 0
    try:
        # Installed inside the try: a signal right after the first handler is
        # in is a stop like any other (it escaped as an uncaught _Stop, with a
        # traceback and exit status 1: an attacker's pass).
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _on_stop_signal)
        try:
            env = ShmVectorEnv(cfg, segment_name=segment, claim=False)
        except FileExistsError:  # another server took the name since _free_name
            # (its words, not the file's temporary name the link reported: a
            # race hunter's pass, 2026-12-06)
            raise SystemExit(f"shmatari serve: the name is taken: another server created "
                             f"{shm.SHM_DIR}/{segment} while this one started; choose "
                             f"another --name or stop it") from None
        except OSError as exc:  # /dev/shm full, ...
            raise SystemExit(f"shmatari serve: cannot create {shm.SHM_DIR}/{segment}: "
                             f"{exc}") from None
        total = env._seg.header()["total_bytes"]
        mapped = shm.attach(segment)
        claim = _claim_word(mapped)
        shape = env.single_observation_space.shape
        _log(f"{cfg.game}: {_plural(env.num_envs, 'env', 'envs')}, batch_size "
             f"{env.batch_size}, {_plural(env.num_workers, 'worker', 'workers')}, "
             f"{_options_line(cfg, preset)}; obs uint8 {shape}, "
             f"{env.single_action_space.n} actions, autoreset {cfg.autoreset_mode}, "
             f"seed {cfg.seed}")
        watch = _OpenWatch(f"{shm.SHM_DIR}/{segment}")  # before any client can come
        attach_name = name or segment
        with _cli.survive_closed_stdout() as stdout:
            print(f"ready name={attach_name} segment={segment} pid={os.getpid()}",
                  file=out or stdout, flush=True)
        _log(f'attach with shmatari.attach("{attach_name}") or '
             f'shmatari_attach(&client, "{attach_name}", timeout_ns); Ctrl-C stops')

        ident = shm.identity(env._res.segment)
        sup = env._supervisor
        fixed = _FixedWords(sup.header, (os.getpid(), sup.owner_start),
                            env._client.action_set,
                            [(pid, g.start, g.stop) for pid, g in zip(env.worker_pids,
                                                                       sup.groups)])

        def guard() -> None:  # before each read of the segment: one fstat
            if _restore_size(env._res.segment, total):
                raise _Shrunk()

        clients = _Clients(claim, watch, guard, env._seg.unclaim, lambda pid: _not_a_client(
            pid, ident, {os.getpid(), *env.worker_pids}), env._seg.reclaim)
        next_check = 0.0
        while True:
            if _STOP_REQUESTED[0]:  # its _Stop was lost (see _STOP_REQUESTED)
                raise _Stop()
            clients.wait(_CLAIM_POLL)
            t = time.monotonic()
            if t >= next_check:
                next_check = t + _POLL
                guard()
                changed = _segment_changed(env._res.segment, total, ident)
                if changed is not None:
                    _log(f"stopping: the pool's segment was changed by another process: "
                         f"{changed}; no client could attach to it")
                    return 1
                wrong = (_pool_words_wrong(env._seg, env.num_workers)
                         or fixed.changed(env._res.segment.buf))
                env._check_workers()
                if wrong:
                    _log(f"stopping: the pool's segment was written by another process: "
                         f"{wrong}, with every worker running (a client that writes it "
                         f"unchecked); no client could use the pool")
                    return 1
                clients.check()
    except _Stop:
        if clients is not None:
            try:
                clients._read_claim()  # a detach just before the signal is logged
            except _Shrunk:
                pass
            clients._report_unseen(final=True)
            clients._flush(final=True)
        _log("stopping")
        return 0
    except WorkerError as exc:
        _log(f"stopping: {exc}")
        _record_death(env, exc)
        return 1
    except _Shrunk:
        return 1
    finally:
        # A second Ctrl-C or SIGTERM must not cut the cleanup short (it is
        # bounded: workers get a few seconds, then are killed).
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        try:
            if watch is not None:
                watch.close()
            del claim, clients  # the views, before their mapping closes
            if mapped is not None:
                shm.close_mapping(mapped)
            if env is not None:
                _restore_size(env._res.segment, total)
                env.close()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _record_death(env, exc: WorkerError) -> None:
    """Before the server closes a pool whose worker died: writes the death
    into that worker's record (state FAILED, its cause as the error text,
    one more ``failed_workers``), as a worker that fails writes its own, so
    that the attached client's next check reports it (``SHMATARI_ERR_WORKER``,
    Python's WorkerError) with its cause; it read only the CLOSING that
    follows ("the pool's owner is closing the pool"), and only the server's
    log said why (a C++ user's pass, 2026-12-07). A worker that failed and
    wrote its own error keeps it."""
    if not exc.exitcode or env is None or not 0 <= exc.worker < env.num_workers:
        return  # alive, or it exited on a CLOSING (which another process may write)
    try:
        seg = env._seg
        if seg.worker_state(exc.worker) == _core.WORKER_FAILED:
            return
        text = str(exc).split("\n", 1)[0]
        head = f"worker {exc.worker} ("
        if text.startswith(head) and ") " in text:
            text = text.split(") ", 1)[1]  # the client's message names the worker
        error = f"{text} (found by the server, pid {os.getpid()}, which stops)"
        if exc.worker_traceback:  # what it left: faulthandler's dump of a fatal signal
            error += "\n" + exc.worker_traceback
        _core.mark_worker(seg, exc.worker, _core.WORKER_FAILED, error=error)
    except (ValueError, RuntimeError, OSError):
        pass  # the segment is gone or broken: the client reads the close


def _option_type(key: str):
    """argparse type of option ``key``: :func:`shmatari.config.parse_option`."""
    def parse(text: str):
        try:
            return _config.parse_option(key, text)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = key  # argparse names the type in some messages
    return parse


def _option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per env option of :func:`shmatari.make`, typed by
    ``config.OPTION_TYPES``; booleans also as ``--no-<flag>``."""
    group = parser.add_argument_group("env options (as shmatari.make; default: ALE v5, "
                                      "or the preset's)")
    for key, default in _config.OPTION_DEFAULTS.items():
        flag = "--" + key.replace("_", "-")
        kw = dict(dest=key, default=argparse.SUPPRESS, help=f"(default: {default})")
        kind = _config.OPTION_TYPES[key]
        if kind[0] is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
        elif kind[0] is str:
            # "none" where None is a choice (render_mode), as -o takes it (a
            # fuzzing pass: --render-mode none was refused)
            names = ["none" if c is None else c for c in kind[1]]
            group.add_argument(flag, type=_option_type(key), choices=list(kind[1]),
                               metavar="{" + ",".join(names) + "}", **kw)
        else:
            metavar = {"max_episode_frames": "FRAMES|none",
                       "max_episode_steps": "STEPS|none"}.get(key, key.upper())
            group.add_argument(flag, type=_option_type(key), metavar=metavar, **kw)


def _parser() -> argparse.ArgumentParser:
    doc = _cli.doc_parts(__doc__)
    p = _cli.ArgumentParser(prog="shmatari", description=doc[0],
                            formatter_class=_cli.HelpFormatter, allow_abbrev=False,
                            epilog="The package's other commands: shmatari-bench (throughput "
                                   "against peers and the no-IPC ceiling) and shmatari-check "
                                   "(reproducibility); each takes --help.")
    _cli.add_version(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("serve", help="serve a pool of Atari envs to a client process",
                       description=doc[1], allow_abbrev=False,
                       formatter_class=_cli.HelpFormatter)
    _cli.add_version(s)
    s.add_argument("game", help="the game: Breakout, ALE/Breakout-v5, breakout, ...")
    s.add_argument("--num-envs", type=_cli.positive_int, default=8, help="envs in the pool")
    s.add_argument("--batch-size", type=_cli.positive_int, default=None,
                   help="results per batch (default num_envs: synchronous)")
    s.add_argument("--num-workers", type=_cli.positive_int, default=None,
                   help="worker processes (default: the cores available, at most num_envs)")
    s.add_argument("--batch-order", default="first_ready", choices=_config.BATCH_ORDERS,
                   help="with --batch-size below --num-envs: 'fixed' serves the groups of "
                        "envs in turn, so a training run replays; 'first_ready' the first "
                        "results in")
    s.add_argument("--seed", type=_cli.nonnegative_int, default=None,
                   help="pool seed (default: fresh entropy, printed)")
    s.add_argument("--start-method", default=None, choices=_config.START_METHODS,
                   help=f"(default: {_config.default_start_method()})")
    s.add_argument("--preset", default=None, choices=sorted(_config.PRESETS),
                   help="a named set of env options (see shmatari.make); flags override it "
                        "(default: none, ALE v5)")
    s.add_argument("--name", default=None,
                   help="pool name for clients (segment /dev/shm/shmatari_NAME; a letter, "
                        "then up to 19 letters, digits, _ or -); default: an automatic "
                        "shmatari_<pid>_<hex>, printed")
    _option_flags(s)
    p.serve_parser = s  # main() reports its usage errors as serve's
    return p


def main(argv=None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before serve() took SIGINT over: nothing made yet
        _log("stopping (interrupted while starting)")
        return 0


#: Flags of make() that serve does not have, and why.
_MAKE_ONLY = {
    "restart_workers": "restart_workers is make()'s own: a served pool stops when a worker "
                       "dies (its client sees PoolClosedError)",
    "zero_copy": "zero_copy is the client's choice: shmatari.attach(name, zero_copy=True)",
}


def _unknown_flags_text(serve_parser, extra: list) -> str:
    """``unrecognized arguments: ...``, with a hint for each flag that has
    one: another library's spelling (``--frameskip``: use --frame-skip),
    make()'s own arguments, or the closest flag of serve's."""
    return _cli.unknown_arguments_text(serve_parser, extra, _MAKE_ONLY, option_flags=True)


def _main(argv) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    opts = vars(args)
    parser = parser.serve_parser  # the only command
    if extra:  # serve's usage error, not the top level's ("see shmatari --help")
        parser.error(_unknown_flags_text(parser, extra))
    if args.name is not None and not NAME_RE.fullmatch(args.name):
        parser.error(f"--name must be a letter then up to 19 letters, digits, '_' or '-', "
                     f"got {args.name!r}")
    if args.name is not None and shm.is_automatic_name(_core.segment_name(args.name)):
        # make()'s names: the sweep and the workers treat them as a pid's
        parser.error(f"--name {args.name!r} looks like an automatic segment name "
                     f"({shm.PREFIX}<pid>_<hex>); choose another")
    bare = None if args.name is None else _core.segment_name(args.name)[len(shm.PREFIX):]
    if bare is not None and not NAME_RE.fullmatch(bare):
        # "shmatari_" or "shmatari_9x": a full segment name whose bare name
        # attach() (and shmatari_attach) holds no server can start, so that a
        # client waiting for it gave up at once (an attacker's pass, 2026-12-06)
        parser.error(f"--name {args.name!r}: a name that starts with {shm.PREFIX!r} is the "
                     f"segment's full name, and what follows the prefix must be a letter then "
                     f"up to 19 letters, digits, '_' or '-', got {bare!r}")
    try:
        cfg = _config.build_config(
            args.game, args.num_envs, batch_size=args.batch_size,
            num_workers=args.num_workers, seed=args.seed, start_method=args.start_method,
            preset=args.preset, batch_order=args.batch_order,
            **{k: opts[k] for k in _config.OPTION_DEFAULTS if k in opts})
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    return serve(cfg, args.name, preset=args.preset)


if __name__ == "__main__":
    sys.exit(main())
