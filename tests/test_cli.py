"""The three command lines behave as the tools people know (pip, pytest):
usage errors are one line with exit status 2 and no traceback, output paths
are checked before the run, Ctrl-C stops cleanly and loses nothing, every
command has --help (plain text, with defaults) and --version, and messages
name the real cause. Each test runs the commands as a user would, in a
subprocess."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import stat
import subprocess
import sys
import time

import pytest

import shmatari
from shmatari import _bench_backends
from shmatari.check import PAIRINGS
from conftest import pid_alive, shm_entries

pytestmark = pytest.mark.usefixtures("no_leaks")


def _script(module: str) -> list[str]:
    """What the console script of ``module`` runs (pyproject's [project.scripts])."""
    return [sys.executable, "-c", f"import sys; from shmatari.{module} import main; "
                                  f"sys.exit(main())"]


COMMANDS = {
    "shmatari": _script("cli"),
    "shmatari serve": [*_script("cli"), "serve"],
    "shmatari-bench": _script("bench"),
    "shmatari-check": _script("check"),
}
FAST_BENCH = ["--seconds", "0.2", "--warmup", "0.05", "--rounds", "2"]


def run(command: str, *args: str, timeout: float = 120, env=None):
    return subprocess.run([*COMMANDS[command], *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def assert_usage_error(proc, *needles: str) -> None:
    """Exit status 2, one line on stderr naming the cause, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def hide_module(tmp_path, name: str) -> dict:
    """An environment in which ``import name`` fails as if it were not
    installed (a package of that name earlier on the path that raises
    ImportError)."""
    pkg = tmp_path / "hidden" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"raise ImportError('{name} hidden by the test')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "hidden"),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


# -- --help and --version on every command ---------------------------------------------

@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_has_version(command):
    proc = run(command, "--version", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(rf"{command} {re.escape(shmatari.__version__)} \(ale-py \S+, "
                        rf"Python \S+\)\n", proc.stdout), proc.stdout


def test_python_m_shmatari_is_the_shmatari_command():
    """``python -m shmatari`` had no __main__ (a leak pass ran the server
    through ``-c``): it is the ``shmatari`` command, for environments whose
    scripts folder is not on PATH."""
    for args in (["--version"], ["serve", "--help"]):
        proc = subprocess.run([sys.executable, "-m", "shmatari", *args], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == run("shmatari", *args, timeout=60).stdout
    proc = subprocess.run([sys.executable, "-m", "shmatari", "serve", "NoSuchGame"],
                          capture_output=True, text=True, timeout=60)
    assert_usage_error(proc, "NoSuchGame")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_has_plain_help_with_defaults(command):
    proc = run(command, "--help", timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert proc.stdout.startswith("usage: ")
    assert "``" not in proc.stdout and ":func:" not in proc.stdout  # no reStructuredText
    if command != "shmatari":
        assert "(default: " in proc.stdout


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_runs_under_python_OO(command):
    """python -OO (PYTHONOPTIMIZE=2) strips docstrings, which the commands'
    help is built from: --version, --help and a usage error crashed with
    TypeError (an attacker's pass)."""
    env = dict(os.environ, PYTHONOPTIMIZE="2")
    for args, code in ((["--version"], 0), (["--help"], 0), (["--no-such-flag"], 2)):
        proc = run(command, *args, timeout=60, env=env)
        assert proc.returncode == code and "Traceback" not in proc.stderr, proc.stderr


def test_no_resource_warning_under_python_dev_mode():
    """PYTHONDEVMODE=1 shows ResourceWarnings: the zygote left its socket
    to the garbage collector at exit (an attacker's pass). The run's stderr
    is read to its end, which the zygote holds until it exits."""
    env = dict(os.environ, PYTHONDEVMODE="1")
    proc = subprocess.run(
        [sys.executable, "-c", "import shmatari\n"
         "with shmatari.make('null', num_envs=2, num_workers=1) as env:\n"
         "    env.reset()\n"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "ResourceWarning" not in proc.stderr, proc.stderr


def test_bench_help_shows_the_defaults_of_seconds_warmup_rounds_and_max_envs():
    text = " ".join(run("shmatari-bench", "--help", timeout=60).stdout.split())
    for flag, default in (("--seconds", "2.0"), ("--warmup", "0.5"), ("--rounds", "7"),
                          ("--max-envs", "64")):
        assert re.search(rf"{flag} \S+ .*?\(default: {re.escape(default)}\)", text), flag


# -- usage errors: one line, exit 2, before anything starts ----------------------------

@pytest.mark.parametrize("command,args,needles", [
    ("shmatari-bench", ["--num-envs", "0"], ["--num-envs", "must be >= 1, got 0"]),
    ("shmatari-bench", ["--seconds", "0"], ["--seconds", "must be > 0.0, got 0"]),
    ("shmatari-bench", ["--rounds", "0"], ["--rounds", "must be >= 1"]),
    ("shmatari-bench", ["--num-envs", "2", "--batch-size", "3"], ["--batch-size 3"]),
    # it ran with num_envs workers (a new user's pass), where check and serve refuse it
    ("shmatari-bench", ["--num-envs", "8", "--num-workers", "9"],
     ["--num-workers 9 must be <= --num-envs 8"]),
    ("shmatari-bench", ["--game", "Breakoot"], ["did you mean 'breakout'"]),
    ("shmatari-bench", ["--env", "null", "--backends", "ceiling"],
     ["--backends does not apply to --env null"]),
    ("shmatari-bench", ["--repeat-action-probability", "1.5"],
     ["--repeat-action-probability", "must be <= 1, got 1.5"]),
    ("shmatari-bench", ["--repeat-action-probability", "-0.1"],
     ["--repeat-action-probability", "must be >= 0.0"]),
    ("shmatari-bench", ["--env", "null", "--repeat-action-probability", "0"],
     ["--repeat-action-probability does not apply to --env null"]),
    ("shmatari-bench", ["--max-envs", "4"], ["--max-envs goes with --sweep"]),
    ("shmatari-bench", ["--sweep", "--env", "null"], ["--sweep does not apply to --env null"]),
    # measured 1 and N envs whatever these said (a newcomer's pass)
    ("shmatari-bench", ["--env", "null", "--batch-size", "2", "--game", "Pong"],
     ["--game, --batch-size: not with --env null"]),
    # taken and ignored until 2026-12-06 (a newcomer's pass)
    ("shmatari-bench", ["--env", "null", "--rounds", "5", "--no-interleave"],
     ["--rounds, --no-interleave: not with --env null"]),
    # the minimum of the default pairings (workers, async), not 1 (issue 25)
    ("shmatari-check", ["--num-envs", "0"], ["num_envs must be >= 2", "got 0"]),
    ("shmatari-check", ["--steps", "x"], ["--steps", "expected an integer"]),
    ("shmatari serve", ["Breakout", "--num-envs", "-1"], ["--num-envs", "must be >= 1"]),
    # unknown arguments said only "unrecognized arguments: ...", where
    # serve's gave a hint (a newcomer's pass)
    ("shmatari-bench", ["--batchsize", "2"],
     ["unrecognized arguments: --batchsize 2", "--batchsize: did you mean --batch-size?"]),
    ("shmatari-bench", ["--sticky-actions", "0"], ["(flag --repeat-action-probability)"]),
    ("shmatari-bench", ["--num-threads", "2"],
     ["num_threads is EnvPool's", "(flag --num-workers)"]),
    ("shmatari-bench", ["Pong"], ["Pong: did you mean --game Pong?"]),
    ("shmatari-bench", ["--backends", "shmatari", "envpool"],
     ["envpool: --backends takes one comma-separated list"]),
    ("shmatari-bench", ["--backends", "shmatari,envpol"],
     ["unknown backend(s) envpol (did you mean 'envpool' for 'envpol'?)"]),
    ("shmatari-check", ["--seeed", "3"], ["--seeed: did you mean --seed?"]),
    ("shmatari-check", ["Pong"], ["Pong: did you mean --game Pong?"]),
])
def test_usage_errors_are_one_line_with_exit_status_2(command, args, needles):
    assert_usage_error(run(command, *args, timeout=60), *needles)


def test_a_hint_names_a_flag_only_where_the_command_has_that_option():
    """The bench has no env-option flags but --repeat-action-probability: a
    hint for ale-py's --frameskip must not send the user to a flag the text
    merely mentions (obs_type's "each env's RAM" is not --env)."""
    # nor a bare word to --game where it was given, or where the word names
    # no game (a reviewer's pass)
    for args in (["--frameskip", "4"], ["--obs-type", "rgb"], ["--game", "Pong", "Breakout"],
                 ["hello"]):
        proc = run("shmatari-bench", *args, timeout=60)
        unknown = args[2:] if args[0] == "--game" else args
        assert_usage_error(proc, f"unrecognized arguments: {' '.join(unknown)}")
        assert "(flag" not in proc.stderr and "did you mean" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("command,args", [
    ("shmatari-bench", ["--backends", "shmatari"]),
    ("shmatari-check", []),
])
def test_output_path_is_checked_before_the_run(command, args, tmp_path):
    missing = tmp_path / "missing" / "x.json"
    t = time.monotonic()
    proc = run(command, *args, "--json", str(missing), timeout=60)
    assert_usage_error(proc, "--json", "does not exist")
    assert time.monotonic() - t < 30  # refused at once, not after the run
    assert_usage_error(run(command, *args, "--json", str(tmp_path), timeout=60),
                       "is a directory")


@pytest.mark.parametrize("command,args", [
    ("shmatari-bench", ["--backends", "shmatari"]),
    ("shmatari-check", []),
])
def test_output_path_that_is_empty_or_not_a_regular_file_is_refused(command, args, tmp_path):
    """``--json ''`` ran and wrote nothing (exit 0); a FIFO was replaced by a
    regular file."""
    assert_usage_error(run(command, *args, "--json", "", timeout=60), "--json",
                       "an empty file name")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert_usage_error(run(command, *args, "--json", str(fifo), timeout=60), "--json",
                       "not a regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize("command,args", [
    ("shmatari-bench", ["--backends", "shmatari"]),
    ("shmatari-check", ["--pairings", "rerun"]),
])
def test_an_output_folder_that_takes_no_new_file_is_refused_before_the_run(command, args):
    """/proc passes os.access for root, but takes no new file: the run went
    to its end, then lost its results in a traceback (exit 1; a newcomer's
    pass, 2026-12-06). The folder is now tried with a file, as the run's end
    writes one."""
    t = time.monotonic()
    proc = run(command, *args, "--json", "/proc/shmatari-report.json", timeout=60)
    assert_usage_error(proc, "--json", "cannot create a file in the directory /proc")
    assert time.monotonic() - t < 30  # refused at once, not after the run


def test_json_through_a_symbolic_link_writes_its_target(tmp_path):
    """The link stays a link (it was replaced by a regular file)."""
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("{}")
    link.symlink_to(target)
    proc = run("shmatari-check", "--steps", "20", "--pairings", "rerun", "--json", str(link),
               timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and json.loads(target.read_text())["ok"] is True


@pytest.mark.parametrize("before, after", [(0o600, 0o600), (0o6750, 0o750)])
def test_json_over_an_existing_file_keeps_its_permission_bits_but_no_special_bit(
        tmp_path, before, after):
    """A private report stayed private with open(path, "w"); the rename made
    it 0o644 (an attacker's pass). But write_json then copied the mode of
    whatever file was there, setuid and setgid included (another pass:
    another user's ``chmod 6777`` file in /tmp made root's report
    ``-rwsrwsrwx``): only an own regular file's rwx bits are kept."""
    from shmatari import _cli

    report = tmp_path / "report.json"
    report.write_text("{}")
    report.chmod(before)
    _cli.write_json(str(report), {"ok": True})
    assert stat.S_IMODE(report.stat().st_mode) == after
    assert json.loads(report.read_text()) == {"ok": True}


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_outputs_take_no_mode_from_another_users_file_and_no_late_link(tmp_path):
    """Root writing a report or the sweep's plot into a shared directory:
    another user's file there lent its mode, setuid included, to root's new
    file; and the plot was written through the path the run began with, so
    a link put there during the sweep sent root's PNG over any file (an
    attacker's pass). A new file gets 0o666 less the umask; the plot's path
    is judged when it is written."""
    from shmatari import _bench_report, _cli

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = shared / "out.json"
    theirs.write_text("{}")
    os.chown(theirs, 65534, 65534)
    theirs.chmod(0o6777)
    umask = os.umask(0o022)
    try:
        _cli.write_json(str(theirs), {"ok": True})
    finally:
        os.umask(umask)
    st = theirs.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o644)

    victim = tmp_path / "important.conf"
    victim.write_text("precious")
    victim.chmod(0o600)
    plot = shared / "sweep.png"
    report = {"results": [{"backend": "shmatari", "num_envs": n, "env_steps_per_s": 100.0 * n}
                          for n in (1, 2)],
              "machine": {"cores": 2, "cpu_model": "test"}, "game": "Breakout"}
    _bench_report.plot_sweep(report, str(plot))  # the path as checked: written
    assert plot.read_bytes()[:4] == b"\x89PNG"
    plot.unlink()
    plot.symlink_to(victim)  # what the other user does while the sweep runs
    os.lchown(plot, 65534, 65534)
    with pytest.raises(PermissionError, match="uid 65534"):
        _bench_report.plot_sweep(report, str(plot))
    assert victim.read_text() == "precious"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_output_file_another_user_owns_in_a_sticky_directory_is_refused_up_front(
        tmp_path, monkeypatch, capsys):
    """A user other than root whose report path is another user's file in
    /tmp learned of it only at the end of the run, when the rename over it
    failed (EPERM) and the results were lost. It is a usage error at once.
    (Root may replace it; a non-root user is this process with its euid
    patched.)"""
    import argparse

    from shmatari import _cli

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = shared / "out.json"
    theirs.write_text("{}")
    theirs.chmod(0o666)  # writable, yet not replaceable by a rename
    os.chown(theirs, 65534, 65534)
    parser = argparse.ArgumentParser(prog="shmatari-bench")
    _cli.check_output_path(parser, "--json", str(theirs))  # root: allowed
    monkeypatch.setattr(os, "geteuid", lambda: 4321)
    with pytest.raises(SystemExit):
        _cli.check_output_path(parser, "--json", str(theirs))
    assert "the file belongs to uid 65534 in the shared directory" in capsys.readouterr().err
    assert _cli._unreplaceable_owner(str(theirs)) == 65534
    assert _cli._unreplaceable_owner(str(shared / "new.json")) is None


def test_output_paths_resolve_as_realpath_does(tmp_path):
    from shmatari import _cli

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "rel").symlink_to("a/b")
    (tmp_path / "a" / "up").symlink_to("..")
    (tmp_path / "abs").symlink_to(tmp_path / "rel")
    for p in ("rel/x.json", "abs/x.json", "a/up/a/b/../x.json", "a/./b/x.json", "new.json"):
        full = str(tmp_path / p)
        assert _cli.resolve_output_path(full) == os.path.realpath(full), p
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(OSError, match="too many levels"):
        _cli.resolve_output_path(str(tmp_path / "loop" / "x.json"))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a link to another user needs root")
def test_json_through_another_users_link_in_a_shared_directory_is_refused(tmp_path):
    """Another user's link in a sticky world-writable directory (/tmp) is not
    followed: the kernel would refuse to open through it (fs.protected_symlinks),
    and the rename over its target replaced a file of this user that the
    other could not write (an attacker's pass)."""
    from shmatari import _cli

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    victim = private / "important.conf"
    victim.write_text("precious")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    link = shared / "report.json"
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)
    assert_usage_error(run("shmatari-check", "--json", str(link), timeout=60), "--json",
                       "symbolic link of another user")
    with pytest.raises(PermissionError, match="uid 65534"):
        _cli.write_json(str(link), {"ok": True})
    assert victim.read_text() == "precious" and link.is_symlink()
    # this user's own link there is followed, as before
    os.lchown(link, os.geteuid(), os.getegid())
    _cli.write_json(str(link), {"ok": True})
    assert json.loads(victim.read_text()) == {"ok": True}


def test_bench_plot_path_is_checked_before_the_sweep(tmp_path):
    assert_usage_error(run("shmatari-bench", "--sweep", "--plot",
                           str(tmp_path / "no" / "p.png"), timeout=60), "--plot",
                       "does not exist")


def test_bench_policy_without_torch_is_a_usage_error(tmp_path):
    proc = run("shmatari-bench", "--policy", timeout=60, env=hide_module(tmp_path, "torch"))
    assert_usage_error(proc, "--policy needs torch", "pip install torch")


# -- Ctrl-C ----------------------------------------------------------------------------

def _interrupt_when(proc, pattern: str, timeout: float, sig=signal.SIGINT,
                    group: bool = True) -> None:
    """Sends SIGINT to the whole process group (as a terminal's Ctrl-C does;
    or ``sig``, to the group or to the process alone) once ``pattern``
    appears on the process's stderr."""
    seen, deadline = "", time.monotonic() + timeout
    while not re.search(pattern, seen):
        assert time.monotonic() < deadline, f"{pattern!r} never came:\n{seen}"
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            line = proc.stderr.readline()
            assert line, f"the process ended before {pattern!r}:\n{seen}"
            seen += line
    if group:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)


def test_sigterm_handling_stays_in_the_command():
    """stop_on_sigterm's handler is for the command's own process, during the
    command: a child forked meanwhile still dies of SIGTERM (multiprocessing
    stops its workers so: with the handler inherited, a fork Pool's
    terminate() hung the core suite), and the previous handler comes back."""
    from shmatari import _cli

    before = signal.getsignal(signal.SIGTERM)
    with _cli.stop_on_sigterm():
        pid = os.fork()
        if pid == 0:  # the child
            time.sleep(30)
            os._exit(0)
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before


def _group_alive(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                pids.append(int(entry))
    return pids


def _assert_nothing_left(proc) -> None:
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(proc.pid), "processes left behind"
    assert not shm_entries(proc.pid), "segments left behind"


@pytest.mark.parametrize("sig,group,status", [
    (signal.SIGINT, True, 130),   # a terminal's Ctrl-C
    # `timeout`, a CI job's end (the group) or `kill` (the process): it died
    # with children's tracebacks and no JSON (a new user's pass)
    (signal.SIGTERM, True, 143),
    (signal.SIGTERM, False, 143),
], ids=["ctrl-c", "sigterm-group", "sigterm"])
def test_ctrl_c_stops_the_bench_cleanly_and_keeps_what_finished(tmp_path, sig, group, status):
    out = tmp_path / "bench.json"
    proc = subprocess.Popen(
        [*COMMANDS["shmatari-bench"], "--num-envs", "2", "--seconds", "0.2", "--warmup", "0",
         "--rounds", "1000", "--backends", "shmatari,pipe,ceiling", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "COLUMNS": "160"})
    try:
        # in round 3 of pipe, which runs after the ceiling and shmatari in it
        _interrupt_when(proc, r"pipe, round 3/", timeout=180, sig=sig, group=group)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == status, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert "interrupted" in stderr
    report = json.loads(out.read_text())
    assert report["interrupted"] is True
    rows = {r["backend"]: r for r in report["results"]}
    # every row over the same rounds: the bursts of the round cut short are
    # left out (the ceiling and shmatari had one more than pipe, and the
    # header spoke of the most: a newcomer's pass)
    assert [rows[b]["rounds"] for b in ("shmatari", "pipe", "ceiling")] == [2, 2, 2], rows
    assert report["dropped_bursts"] == 2
    assert "shmatari" in stdout and "interrupted: median of the 2 bursts done" in stdout
    assert "(2 bursts of the round cut short left out)" in stdout
    _assert_nothing_left(proc)


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_check_cleanly_with_the_pairings_done(tmp_path, sig, status):
    proc = subprocess.Popen(
        [*COMMANDS["shmatari-check"], "--num-envs", "2", "--steps", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(8)  # inside the first, long run
        os.killpg(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == status, stderr
    assert "Traceback" not in stderr
    assert f"shmatari-check: interrupted after 0 of {len(PAIRINGS)} pairings" in stdout
    _assert_nothing_left(proc)


# -- the sweep's rows ------------------------------------------------------------------

def test_sweep_names_a_missing_peer_once_and_says_1_env(tmp_path):
    out = tmp_path / "sweep.json"
    proc = run("shmatari-bench", *FAST_BENCH, "--quiet", "--sweep", "--max-envs", "2",
               "--backends", "shmatari,envpool", "--json", str(out), "--plot",
               str(tmp_path / "p.png"), timeout=300, env=hide_module(tmp_path, "envpool"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["skipped"] == {"envpool": "not installed" + _bench_backends.ENVPOOL_HINT}
    assert [(r["backend"], r["num_envs"], r["setting"]) for r in report["results"]] == [
        ("shmatari", 1, "1 env, 1 worker"), ("shmatari", 2, "2 envs, 2 workers")]
    assert proc.stdout.count("not installed") == 1
    assert "1 envs" not in proc.stdout and "1 workers" not in proc.stdout


# -- shmatari-check's options ----------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("grayscale=false", False), ("grayscale=No", False), ("grayscale=1", True),
    ("episodic_life=yes", True), ("frame_skip=2", 2), ("repeat_action_probability=0", 0.0),
    ("max_episode_frames=none", None),
])
def test_check_options_are_parsed_by_their_type(text, value):
    from shmatari._cli import env_option

    key, parsed = env_option(text)
    assert parsed == value and type(parsed) is type(value)


def test_check_runs_with_typed_options_and_one_env_for_rerun(tmp_path):
    out = tmp_path / "check.json"
    proc = run("shmatari-check", "--num-envs", "1", "--pairings", "rerun", "--steps", "20",
               "-o", "grayscale=false", "-o", "frame_skip=2", "--quiet", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "agree   twice as is: the env stream is identical"
    assert "(breakout, 1 env x 20 steps" in proc.stdout
    options = json.loads(out.read_text())["config"]["options"]
    assert options["grayscale"] is False and options["frame_skip"] == 2


@pytest.mark.parametrize("command,args", [
    ("shmatari-check", ["--num-envs", "1", "--pairings", "rerun", "--steps", "10"]),
    ("shmatari-bench", ["--env", "null", "--num-workers", "1", "--seconds", "0.1",
                        "--warmup", "0.02"]),
])
def test_a_reader_that_went_away_loses_nothing_and_prints_no_traceback(command, args,
                                                                        tmp_path):
    """``shmatari-check | head -1``: the reader gone, the next print raised
    BrokenPipeError, the command ended in a traceback with status 1 and its
    --json was never written (a newcomer's pass). Here the pipe is closed
    before the first line: the command runs to its end, writes its JSON and
    exits with its own status."""
    out = tmp_path / "out.json"
    proc = subprocess.Popen([*COMMANDS[command], *args, "--quiet", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the only reader: every write to it now fails
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert json.loads(out.read_text())["results" if command == "shmatari-bench"
                                       else "pairings"]
    if not os.path.exists("/dev/full"):
        return
    out.unlink()
    with open("/dev/full", "w") as full:  # a full device: ENOSPC, said once on stderr
        proc = subprocess.run([*COMMANDS[command], *args, "--quiet", "--json", str(out)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "standard output could not be written (No space left on device)" in proc.stderr
    assert json.loads(out.read_text())

@pytest.mark.parametrize("args,needles", [
    (["-o", "grayscale=maybe"], ["grayscale must be a bool", "true/false"]),
    (["-o", "frame_skip=two"], ["frame_skip must be an int, got 'two'"]),
    (["-o", "noop_max=-1"], ["noop_max must be >= 0"]),
    (["-o", "render_mode=human"], ["render_mode must be one of", "'rgb_array'", "'human'"]),
    (["--num-envs", "1"], ["num_envs must be >= 2 for the workers, async and fixed pairings"]),
    (["--game", "Breakout-ram-v5"], ["observations are pixels", "ram_info=True"]),
    # the pool's own arguments name their flags (they said "unknown option")
    (["-o", "seed=3"], ["seed is the pool's own argument, not an env option: use --seed"]),
    (["-o", "num_envs=3"], ["use --num-envs"]),
    # one mode's flags in the other: they were ignored (--train checked the
    # default options whatever -o said; a newcomer's pass)
    (["--train", "-o", "grayscale=false", "--preset", "dqn"],
     ["--train does not take --preset, -o/--option", "fixed env options"]),
    (["--train", "--steps", "50", "--pairings", "rerun"],
     ["--train does not take --steps, --pairings"]),
    (["--train-updates", "5", "--torch-threads", "2"],
     ["--train-updates, --torch-threads: only with --train"]),
])
def test_check_refuses_bad_options_naming_the_cause(args, needles):
    assert_usage_error(run("shmatari-check", *args, timeout=60), *needles)


# -- messages that name the real cause -------------------------------------------------

def test_render_mode_says_what_exists():
    with pytest.raises(ValueError, match="render_mode must be one of") as info:
        shmatari.make("Breakout", 2, render_mode="human")
    assert "did you mean" not in str(info.value) and "'rgb_array'" in str(info.value)


@pytest.mark.parametrize("env_id", ["Breakout-ram-v5", "ALE/Breakout-ram-v5",
                                    "Breakout-ramNoFrameskip-v4"])
def test_ram_game_names_say_where_the_ram_is(env_id):
    with pytest.raises(ValueError, match=r"observations are pixels; use 'Breakout-v5' with "
                                         r"ram_info=True for the RAM in info\['ram'\]") as info:
        shmatari.make(env_id, 2)
    assert "did you mean" not in str(info.value)


def test_serve_ram_game_is_a_usage_error():
    assert_usage_error(run("shmatari serve", "Breakout-ram-v5", timeout=60),
                       "observations are pixels", "ram_info=True")


@pytest.mark.parametrize("args,needles", [
    (["--frameskip", "4"], ["shmatari serve: error: unrecognized arguments: --frameskip 4",
                            "use frame_skip (flag --frame-skip)",
                            "(see shmatari serve --help)"]),
    (["--sticky-actions", "0"], ["(flag --repeat-action-probability)"]),
    (["--restart-workers"], ["restart_workers is make()'s own"]),
    (["--num-env", "4"], ["--num-env: did you mean --num-envs?"]),
    (["--obs-type", "rgb"], ["obs_type is not an option"]),
])
def test_serve_unknown_flags_are_serves_usage_errors_with_a_hint(args, needles):
    """They were the top level's error ("shmatari: error: ... (see shmatari
    --help)", whose help lists only the command) with no hint (a newcomer's
    pass)."""
    assert_usage_error(run("shmatari serve", "Breakout", *args, timeout=60), *needles)


def test_serve_render_mode_takes_none_as_o_does():
    """--render-mode none was refused where -o render_mode=none is taken (a
    fuzzing pass); a bad value names the option's choices."""
    from shmatari.cli import _parser

    parse = _parser().parse_args
    assert parse(["serve", "Breakout", "--render-mode", "none"]).render_mode is None
    assert parse(["serve", "Breakout", "--render-mode", "rgb_array"]).render_mode == "rgb_array"
    assert parse(["serve", "Breakout", "--obs-layout", "channels_last"]).obs_layout == \
        "channels_last"
    assert_usage_error(run("shmatari serve", "Breakout", "--render-mode", "human", timeout=60),
                       "render_mode must be one of")


def test_serve_help_gives_each_default_once():
    out = run("shmatari serve", "--help", timeout=60).stdout
    assert "(default: first_ready)" in " ".join(out.split())
    assert "(default: first_ready) (default: first_ready)" not in " ".join(out.split())


# -- shmatari serve --------------------------------------------------------------------

def test_serve_logs_its_preset_and_every_short_lived_client(tmp_path):
    """Clients that attach and detach within milliseconds are each logged:
    by pid when the server sees the claim, or counted when it could not."""
    name = f"c{os.getpid()}"
    log = tmp_path / "serve.err"
    proc = subprocess.Popen([*COMMANDS["shmatari serve"], "Breakout", "--name", name,
                             "--num-envs", "2", "--num-workers", "1", "--preset", "dqn",
                             "--frame-skip", "3"],
                            stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and proc.stdout.readline().startswith(f"ready name={name}")
        for _ in range(3):  # each well within 0.1 s
            t = time.monotonic()
            shmatari.attach(name).close()
            assert time.monotonic() - t < 0.1
            time.sleep(0.3)
        with shmatari.attach(name) as env:  # one that stays a moment
            env.reset()
            time.sleep(0.3)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    text = log.read_text()
    assert "Traceback" not in text
    assert "2 envs, batch_size 2, 1 worker, preset dqn with frame_skip=3" in \
        text.splitlines()[0]
    me = os.getpid()
    attached = text.count(f"client pid {me} attached")
    unseen = sum(int(n) for n in re.findall(r"(\d+) attach(?:es)? to the pool ended without "
                                            r"being seen", text))
    assert attached + unseen == 4, text
    assert attached >= 1 and text.count(f"client pid {me} detached") == attached
    assert not pid_alive(proc.pid)


@pytest.mark.parametrize("args,needles", [
    ([], ["one of the arguments OUT --recheck is required"]),
    (["--recheck", "7"], ["invalid choice: 7"]),
    (["--recheck", "--games", "pong"], ["--games goes with OUT"]),
    (["/nonexistent-dir/verdicts.json"], ["/nonexistent-dir does not exist"]),
])
def test_fast_reset_module_parses_its_arguments(args, needles):
    """``python -m shmatari.fast_reset`` read sys.argv by hand: no argument
    raised IndexError, and --help started the hour-long recomputation, to
    be written to a file named --help (a newcomer's pass)."""
    proc = subprocess.run([sys.executable, "-m", "shmatari.fast_reset", *args],
                          capture_output=True, text=True, timeout=60)
    assert_usage_error(proc, *needles)


def test_fast_reset_module_help_runs_nothing():
    proc = subprocess.run([sys.executable, "-m", "shmatari.fast_reset", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--recheck [RUN]" in proc.stdout and not proc.stderr


def test_bench_skips_an_envpool_too_old_to_run_and_says_which(tmp_path):
    """EnvPool 0.8.4, what ``pip install envpool`` (the skipped row's hint)
    gave on Python 3.10, crashed the bench with SIGSEGV in its async recv
    (a newcomer's pass, 2026-12-06). An EnvPool older than 1.2 is now a
    skipped row that names its version, and the hint asks for >= 1.2."""
    pkg = tmp_path / "old" / "envpool"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.8.4'\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "old"),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = tmp_path / "bench.json"
    proc = run("shmatari-bench", *FAST_BENCH, "--quiet", "--backends", "shmatari,envpool-async",
               "--json", str(out), timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert "skipped" not in rows["shmatari"]
    why = rows["envpool-async"]["skipped"]
    assert why.startswith("EnvPool 0.8.4 is installed; the bench runs EnvPool 1.2 or newer"), why
    assert "envpool>=1.2" in _bench_backends.ENVPOOL_HINT or sys.version_info < (3, 11)


def test_shmatari_help_names_the_other_commands():
    """``shmatari --help`` listed serve alone; a newcomer looking for the
    bench and the check found no word of them there (2026-12-06)."""
    proc = run("shmatari", "--help", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "shmatari-bench" in proc.stdout and "shmatari-check" in proc.stdout
