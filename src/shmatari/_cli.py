"""What the three command lines (``shmatari``, ``shmatari-bench``,
``shmatari-check``) share, so that they behave alike and as ``pip`` or
``pytest`` do: usage errors are one line on stderr with exit status 2
(argparse's own error path), ``--help`` is plain text with every default,
``--version`` exists everywhere, output paths are checked before any work
starts, and Ctrl-C ends with status 130 and no traceback; except for
``shmatari serve``, whose normal way to stop is Ctrl-C or SIGTERM: it exits
0 then, once its workers are stopped and its segment removed.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import signal
import stat
import sys
import tempfile

__all__ = ["ArgumentParser", "unknown_arguments_text", "given", "game_word_hint",
           "HelpFormatter", "plain", "add_version", "integer", "positive_int",
           "nonnegative_int", "positive_float", "nonnegative_float", "check_output_path",
           "write_json", "EXIT_INTERRUPTED", "stop_on_sigterm", "interrupted_status",
           "survive_closed_stdout"]

#: Exit status after Ctrl-C, as a shell reports a process ended by SIGINT.
EXIT_INTERRUPTED = 130

#: The signal that asked the command to stop (SIGTERM after
#: :func:`stop_on_sigterm`), for :func:`interrupted_status`.
_stop_signal: list = []


@contextlib.contextmanager
def stop_on_sigterm():
    """For the block: SIGTERM (``kill``, ``timeout``, a CI job's end) stops
    the command as Ctrl-C does: pools closed, what finished printed and
    written. The handler raises SIGINT in this process, so that the places
    that hold back Ctrl-C (process starts, cleanup) hold this back too; where
    SIGINT is ignored (a job started with ``nohup`` or ``&``) it raises
    KeyboardInterrupt itself. A child forked meanwhile (which inherits the
    handler) is ended by SIGTERM as by default: ``multiprocessing`` stops its
    workers that way. The previous handler comes back after the block (a
    ``main()`` called inside another program). Only in the main thread."""
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        _stop_signal.append(signum)
        if callable(signal.getsignal(signal.SIGINT)):
            signal.raise_signal(signal.SIGINT)
        else:
            raise KeyboardInterrupt

    _stop_signal.clear()
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: Write errors after which standard output is dropped: its reader went
#: away, or the device cannot take more.
_DROPPED_OUTPUT_ERRNOS = frozenset(getattr(errno, name) for name in
                                   ("EPIPE", "ENOSPC", "EIO", "EDQUOT", "EFBIG")
                                   if hasattr(errno, name))


class _ClosedPipeTolerant:
    """``sys.stdout`` for :func:`survive_closed_stdout`: the real stream, except
    that a write or flush into a pipe whose reader went away (or onto a full
    device: ``> /dev/full``, said once on stderr) sends fd 1 to /dev/null
    instead of raising."""

    def __init__(self, stream):
        self._stream = stream

    def _guard(self, call, *args):
        try:
            return call(*args)
        except OSError as exc:  # EPIPE: the reader went away; ENOSPC (/dev/full), EIO
            if exc.errno not in _DROPPED_OUTPUT_ERRNOS:
                raise  # EAGAIN (a non-blocking stdout), EBADF, ...: as before
            if not isinstance(exc, BrokenPipeError):
                try:
                    print(f"{os.path.basename(sys.argv[0]) or 'shmatari'}: standard output "
                          f"could not be written ({exc.strerror or exc}); the rest of it is "
                          f"dropped", file=sys.stderr, flush=True)
                except (OSError, ValueError):
                    pass
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
            # what the stream still buffers now goes to /dev/null
            return call(*args)

    def write(self, text):
        return self._guard(self._stream.write, text)

    def flush(self):
        return self._guard(self._stream.flush)

    def __getattr__(self, name):  # isatty, fileno, encoding, ... for rich and print
        return getattr(self._stream, name)


@contextlib.contextmanager
def survive_closed_stdout():
    """For the block: standard output whose reader went away
    (``shmatari-check | head -1``) is dropped from then on, where Python
    raised BrokenPipeError at the next print and the command stopped with a
    traceback, its ``--json`` or plot not written. The command runs to its
    end and exits with its own status (a check's verdict, not SIGPIPE's 141),
    as if its output had been read. Yields the stand-in (None where there
    is no standard output)."""
    real = sys.stdout
    if real is None:  # pythonw, or stdout closed: nothing to guard
        yield None
        return
    stand_in = _ClosedPipeTolerant(real)
    sys.stdout = stand_in
    try:
        yield stand_in
    finally:
        sys.stdout = real
        try:
            real.flush()
        except OSError:  # what was buffered after the block
            stand_in._guard(real.flush)


def interrupted_status() -> int:
    """The exit status of a command cut short: 128 + the signal, as a shell
    reports a process that signal ended (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + _stop_signal[0] if _stop_signal else EXIT_INTERRUPTED


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line on stderr, then exit
    status 2: ``prog: error: <what>; see prog --help``."""

    def error(self, message: str):
        message = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    #: ``word_hint(word, argv) -> str | None``: the command's hint for a
    #: bare word it does not take (a game name where ``--game`` was not
    #: given, say), or None.
    word_hint = None

    def parse_args(self, args=None, namespace=None):
        # argparse's own check, with a hint per unknown argument: it said
        # only "unrecognized arguments: --num-env 8" where serve's said
        # "did you mean --num-envs?" (a newcomer's pass)
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extra = self.parse_known_args(argv, namespace)
        if extra:
            self.error(unknown_arguments_text(self, extra, word_hint=self.word_hint,
                                              argv=argv))
        return parsed


def same_output(a, b) -> bool:
    """Whether the streams ``a`` and ``b`` write to one file or terminal
    (``cmd > log 2>&1``, or both on the screen): then a line printed on
    both shows twice. False when either has no descriptor."""
    try:
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (AttributeError, OSError, ValueError):  # closed, or no descriptor
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def given(argv: list, flag: str) -> bool:
    """Whether ``flag`` is on the command line ``argv`` (``--flag V`` or
    ``--flag=V``)."""
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def game_word_hint(word: str, argv: list) -> str | None:
    """A bare word's hint for a command with ``--game``: ``did you mean
    --game Pong?`` where the word names a game and ``--game`` was not given
    (a second word after ``--game Pong``, or a backend's name, is not one)."""
    from . import games

    if given(argv, "--game"):
        return None
    try:
        games.resolve_quietly(word)
    except (TypeError, ValueError):
        return None
    return f"did you mean --game {word}?"


def unknown_arguments_text(parser: argparse.ArgumentParser, extra: list,
                           own_hints: dict | None = None, option_flags: bool = False,
                           word_hint=None, argv: list = ()) -> str:
    """argparse's ``unrecognized arguments: ...`` with a hint for each one
    that has one:

    - ``own_hints[name]`` (the command's own words for a flag it lacks);
    - another library's name for an env option (``config._NOT_OPTIONS``:
      ``--sticky-actions``: use repeat_action_probability), where the option
      it names is a flag of ``parser`` (``(flag --repeat-action-probability)``)
      or where the parser's flags are the env options (``option_flags``,
      ``shmatari serve``);
    - else the closest long flag (difflib, cutoff 0.7): ``did you mean
      --num-envs?``;
    - a bare word that is not the value of an unknown flag before it:
      ``word_hint(word, argv)``, where given (the command's, which may look
      at the whole command line ``argv``: ``--game Pong``).
    """
    import difflib

    from . import config

    flags = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    after_flag = False
    for token in extra:
        if not token.startswith("-"):
            hint = None if after_flag or word_hint is None else word_hint(token, list(argv))
            if hint:
                hints.append(f"{token}: {hint}")
            after_flag = False
            continue
        after_flag = "=" not in token
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        name = flag[2:].replace("-", "_")
        if own_hints and name in own_hints:
            hints.append(f"{flag}: {own_hints[name]}")
            continue
        hint = config._NOT_OPTIONS.get(name)
        if hint is not None:  # "... use frame_skip": the parser's flag for it too
            names = [w for w in re.findall(r"\buse ([a-z_]+)", hint)
                     if "--" + w.replace("_", "-") in flags]
            if names or option_flags:
                hints.append(f"{flag}: {hint}" + (f" (flag --{names[0].replace('_', '-')})"
                                                   if names else ""))
                continue
        close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.7)
        if close:
            hints.append(f"{flag}: did you mean {close[0]}?")
    return f"unrecognized arguments: {' '.join(extra)}" + (f"; {'; '.join(hints)}"
                                                            if hints else "")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Descriptions kept as written; each option's default appended, except
    where it is None or suppressed (the help text then says what happens)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False and action.nargs == 0:
            return action.help
        return super()._get_help_string(action)


def plain(text: str | None) -> str:
    """reStructuredText (docstrings) as plain text: ``x`` and :func:`x` -> x.
    None (``python -OO`` strips docstrings) is the empty text."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text or "")
    return text.replace("``", "")


def doc_parts(doc: str | None, count: int = 2) -> list[str]:
    """A module docstring's paragraphs as plain text (:func:`plain`), at
    least ``count`` of them (empty ones under ``python -OO``)."""
    parts = plain(doc).split("\n\n")
    return parts + [""] * (count - len(parts))


def add_version(parser: argparse.ArgumentParser) -> None:
    """``--version``: prints ``<prog> <shmatari version> (ale-py ..., Python
    ...)`` and exits 0."""
    import importlib.metadata
    import platform

    from . import __version__

    try:
        ale = importlib.metadata.version("ale-py")
    except importlib.metadata.PackageNotFoundError:
        ale = "not installed"
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {__version__} (ale-py {ale}, Python "
                                f"{platform.python_version()})")


def _number(kind, low: float, strict: bool, text: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
    if value != value or (value <= low if strict else value < low) or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be {'>' if strict else '>='} {low}, got {text}")
    return value


def integer(text: str) -> int:
    """argparse type: any int; the command checks the range (where the
    minimum depends on other arguments, so that the message names it)."""
    return _number(int, float("-inf"), False, text)


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    return _number(int, 1, False, text)


def nonnegative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    return _number(int, 0, False, text)


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0."""
    return _number(float, 0.0, True, text)


def nonnegative_float(text: str) -> float:
    """argparse type: a finite float >= 0."""
    return _number(float, 0.0, False, text)


def probability(text: str) -> float:
    """argparse type: a float in [0, 1]."""
    value = _number(float, 0.0, False, text)
    if value > 1.0:
        raise argparse.ArgumentTypeError(f"must be <= 1, got {text}")
    return value


#: make()'s own arguments, which the commands that take ``-o`` (shmatari-check)
#: set with flags: ``-o seed=3`` names the flag instead of "unknown option".
_POOL_FLAGS = {"seed": "--seed", "num_envs": "--num-envs", "num_workers": "--num-workers",
               "batch_size": "--batch-size", "env_id": "--game", "game": "--game",
               "preset": "--preset"}


def env_option(text: str) -> tuple:
    """``-o KEY=VALUE``: ``(key, value)``, the value parsed by the option's
    type (:func:`shmatari.config.parse_option`).

    Raises:
        argparse.ArgumentTypeError: not KEY=VALUE, an unknown option, or a
            value its type refuses (argparse then prints usage, exit 2).
    """
    from . import config

    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    if key in _POOL_FLAGS:
        raise argparse.ArgumentTypeError(
            f"{key} is the pool's own argument, not an env option: use {_POOL_FLAGS[key]}")
    try:
        return key, config.parse_option(key, value)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def resolve_output_path(path: str) -> str:
    """``path`` with its symbolic links followed (as ``os.path.realpath``),
    except one the kernel's ``fs.protected_symlinks`` would not follow: a
    link in a sticky directory that others can write (``/tmp``) owned by
    neither this user nor the directory's owner. There another user could
    point the name at one of this user's files, which the rename of
    :func:`write_json` would replace (a rename never opens through the link,
    so the kernel's protection does not apply to it).

    Raises:
        PermissionError: such a link is on the way (the message names it).
        OSError: more than 40 links on the way (a loop).
    """
    euid = os.geteuid()
    todo = [c for c in os.path.abspath(path).split(os.sep) if c]
    cur, hops = os.sep, 0
    while todo:
        comp = todo.pop(0)
        if comp == ".":
            continue
        if comp == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, comp)
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            cur = nxt
            continue
        if not stat.S_ISLNK(st.st_mode):
            cur = nxt
            continue
        hops += 1
        if hops > 40:
            raise OSError(f"{path}: too many levels of symbolic links")
        folder = os.stat(cur)
        if (folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
                and st.st_uid not in (euid, folder.st_uid)):
            raise PermissionError(
                f"{nxt} is a symbolic link of another user (uid {st.st_uid}) in the shared "
                f"directory {cur}: not followed (as the kernel's fs.protected_symlinks); "
                f"give another file name")
        target = os.readlink(nxt)
        if os.path.isabs(target):
            cur = os.sep
        todo[:0] = [c for c in target.split(os.sep) if c]
    return cur


def check_output_path(parser: argparse.ArgumentParser, flag: str, path: str | None) -> None:
    """Refuses (``parser.error``, exit 2) an output file that could not be
    written, before the run that would fill it: an empty name, a missing or
    unwritable folder, a folder given as the file, an existing file that is
    not a regular file (a FIFO, a device: the file is written whole and
    renamed over it), is not writable, or is another user's in a shared
    sticky directory, where this user's rename cannot replace it
    (:func:`_unreplaceable_owner`). A symbolic link is followed (its
    target is written, :func:`write_json`), but not another user's in a
    shared sticky directory (:func:`resolve_output_path`)."""
    if path is None:
        return
    if not path:
        parser.error(f"{flag}: an empty file name; give a file name")
    shown = path
    try:
        path = resolve_output_path(path)
    except OSError as exc:
        parser.error(f"{flag} {shown}: {exc}")
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        parser.error(f"{flag} {shown}: is a directory; give a file name")
    if os.path.exists(path) and not os.path.isfile(path):
        parser.error(f"{flag} {shown}: {path} is not a regular file (a FIFO or a device); "
                     f"give a file name")
    if not os.path.isdir(folder):
        parser.error(f"{flag} {shown}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        parser.error(f"{flag} {shown}: the directory {folder} is not writable")
    # Tried, as the run's end will (write_output: a new file, then renamed):
    # os.access says yes to root for /proc and /sys, and the run went to its
    # end and lost its results in a traceback (a newcomer's pass, 2026-12-06).
    try:
        fd, probe = tempfile.mkstemp(prefix=".shmatari-", suffix=".probe", dir=folder)
    except OSError as exc:
        parser.error(f"{flag} {shown}: cannot create a file in the directory {folder} "
                     f"({exc.strerror or exc})")
    os.close(fd)
    os.unlink(probe)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        parser.error(f"{flag} {shown}: the file exists and is not writable")
    owner = _unreplaceable_owner(path)
    if owner is not None:
        parser.error(f"{flag} {shown}: the file belongs to uid {owner} in the shared "
                     f"directory {folder}, where only its owner may replace it; give "
                     f"another file name")


def _unreplaceable_owner(path: str) -> int | None:
    """The owner of an existing file at ``path`` that this user cannot
    rename over, which :func:`write_output` does at the end of a run: in a
    sticky directory (``/tmp``) only the file's owner, the directory's or
    root may (``EPERM`` otherwise, and the run's results were lost). None
    if there is no such file or this user may replace it."""
    euid = os.geteuid()
    try:
        st, folder = os.lstat(path), os.stat(os.path.dirname(path) or ".")
    except OSError:
        return None
    if euid == 0 or not folder.st_mode & stat.S_ISVTX or euid in (st.st_uid, folder.st_uid):
        return None
    return st.st_uid


def write_output(path: str, write, suffix: str = "") -> None:
    """Writes an output file whole or not at all: ``write(f)`` fills a
    temporary file (a binary file object) in the same folder, which is then
    renamed over ``path``, over the target of a symbolic link, which stays a
    link, as :func:`resolve_output_path` allows. The path is resolved and
    judged here, at the write, not only when the run began (a link put in
    its place meanwhile was followed). An existing file of this user's keeps
    its permission bits (``rwx`` only), as with ``open(path, "w")``; a new
    one, or one of another user's (root writing into ``/tmp``), gets
    ``0o666`` less the umask: no bit, setuid included, is taken from a file
    someone else made.

    Args:
        path: the file to write.
        write: called once with the temporary file, open for writing.
        suffix: the temporary file's suffix (matplotlib picks a format by it).

    Raises:
        PermissionError: another user's link on the way
            (:func:`resolve_output_path`).
    """
    path = resolve_output_path(path)
    folder = os.path.dirname(path)
    umask = os.umask(0)
    os.umask(umask)
    mode = 0o666 & ~umask
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            mode = stat.S_IMODE(st.st_mode) & 0o777
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".shmatari-", suffix=suffix, dir=folder)
    try:
        os.fchmod(fd, mode)  # as open(path, "w") would leave it
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json(path: str, obj) -> None:
    """Writes ``obj`` as indented JSON, whole or not at all
    (:func:`write_output`).

    Raises:
        PermissionError: another user's link on the way
            (:func:`resolve_output_path`).
    """
    write_output(path, lambda f: f.write((json.dumps(obj, indent=2) + "\n").encode()),
                 ".json")
