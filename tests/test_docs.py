"""The docs run: every code block of README.md and docs/*.md is run or
checked, unless the Markdown marks it as not meant to run (the directives
are in tests/docs_blocks.py). Python blocks that need only the core run
here, each in a fresh interpreter; shell blocks are checked (each command
exists and takes its flags); ``shmatari serve`` and its client block run
together. Blocks that need torch, SB3, TorchRL or Ray run in
tests/integration/test_docs_integration.py."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys

import pytest
from conftest import shm_entries

import docs_blocks
from docs_blocks import ROOT

BLOCKS = docs_blocks.blocks()
SHELL = ("bash", "sh", "shell")


def run_script(code: str, tmp_path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs ``code`` as a script in a fresh interpreter, in a scratch folder;
    fails on a non-zero exit or a traceback, and on a segment left behind."""
    path = tmp_path / "snippet.py"
    path.write_text(code)
    env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.Popen([sys.executable, str(path)], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)  # a hang guard, not a timing check
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and "Traceback" not in err, f"{code}\n--- stderr ---\n{err}"
    assert not shm_entries(proc.pid), f"segments left by the snippet: {shm_entries(proc.pid)}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def check_commands(block, run_help: bool = True) -> None:
    """Each command of a shell block exists and takes every flag it is given:
    its ``--help`` lists them (a script that needs the integration extras is
    read instead, when ``run_help`` is False)."""
    for cmd in docs_blocks.commands(block):
        helper = docs_blocks.help_command(cmd)
        if helper is None:
            problem = docs_blocks.check_other(cmd)
            assert problem is None, f"{block.id}: {problem}"
            continue
        if run_help:
            proc = subprocess.run(helper, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, f"{block.id}: {' '.join(helper)}: {proc.stderr}"
            text = proc.stdout
        else:
            text = (ROOT / cmd[1]).read_text()
        for flag in docs_blocks.flags(cmd):
            assert flag in text, f"{block.id}: {' '.join(cmd[:2])} has no {flag}"


def test_every_block_is_run_or_marked_not_to_run():
    problems = [p for b in BLOCKS for p in docs_blocks.problems(b)]
    assert not problems, "\n".join(problems)
    assert sum(b.suite == "core" for b in BLOCKS) >= 10  # the parser finds the blocks


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "python" and
                                   b.suite == "core" and not b.has("client")],
                         ids=lambda b: b.id)
def test_python_block_runs(block, tmp_path):
    run_script(block.script(str(tmp_path)), tmp_path)


@pytest.mark.parametrize("block", [b for b in BLOCKS if (b.language in SHELL or
                                                         b.has("transcript")) and
                                   b.suite != "skip" and not b.has("server")],
                         ids=lambda b: b.id)
def test_shell_block_commands_exist_with_their_flags(block):
    check_commands(block, run_help=block.suite == "core")


def _pairs():
    """(server block, client block) pairs: a client follows its server."""
    servers = [b for b in BLOCKS if b.has("server")]
    out = []
    for s in servers:
        client = next((b for b in BLOCKS if b.has("client") and b.path == s.path and
                       b.line > s.line), None)
        assert client is not None, f"{s.id}: a server block without its client block"
        out.append((s, client))
    return out


@pytest.mark.parametrize("pair", _pairs(), ids=lambda p: p[0].id)
def test_served_pool_and_its_client_block_run(pair, tmp_path):
    """The serve command really serves (under a name of this test's), the
    client block attaches to it and runs, and Ctrl-C stops the server with
    exit status 0 and nothing left (README: by design)."""
    server, client = pair
    (cmd,) = docs_blocks.commands(server)
    assert cmd[:2] == ["shmatari", "serve"], cmd
    demo = cmd[cmd.index("--name") + 1]
    name = f"docs{os.getpid()}"
    cmd = [name if w == demo else w for w in cmd]
    log = (tmp_path / "serve.err").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "shmatari.cli", *cmd[1:]],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 300)  # a hang guard
        line = proc.stdout.readline() if ready else ""
        assert re.fullmatch(rf"ready name={name} segment=shmatari_{name} pid={proc.pid}\n",
                            line), (line, (tmp_path / "serve.err").read_text())
        code = client.script(str(tmp_path)).replace(f'"{demo}"', f'"{name}"')
        assert name in code
        run_script(code, tmp_path)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, (tmp_path / "serve.err").read_text()
        assert not os.path.exists(f"/dev/shm/shmatari_{name}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def _verdicts(text: str) -> list[str]:
    """shmatari-check's verdict lines, each cut to its verdict and pairing (a
    DIFFER line's step, env and field depend on unseeded draws)."""
    return [line.split(":")[0] for line in text.splitlines()
            if line.startswith(("agree ", "DIFFER "))]


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.has("transcript") and
                                   b.suite == "core" and
                                   docs_blocks.commands(b)[0][0] == "shmatari-check" and
                                   "--train" not in docs_blocks.commands(b)[0]],
                         ids=lambda b: b.id)
def test_check_transcript_shows_what_the_check_prints(block, tmp_path):
    """The verdict lines of a shmatari-check transcript are the ones the
    command prints now (a transcript said "forkserver" after the default
    start method had become the zygote)."""
    cmd = docs_blocks.commands(block)[0]
    if "--json" in cmd:  # not over the committed report
        cmd[cmd.index("--json") + 1] = str(tmp_path / "report.json")
    proc = subprocess.run([sys.executable, "-m", "shmatari.check", *cmd[1:]],
                          capture_output=True, text=True, timeout=600)
    shown = block.code.split("\n$ ", 1)[0]  # the first command's output
    assert _verdicts(proc.stdout) == _verdicts(shown), proc.stdout
    status = re.search(r"^\$ echo \$\?\n(\d+)$", block.code, re.M)
    assert proc.returncode == (int(status.group(1)) if status else 0), proc.stderr


def test_the_cpp_trainers_sample_output_shows_this_abi():
    # it showed abi=1.2 after the layout went to 1.3 (a new user's pass)
    import re

    from shmatari import _core

    text = (ROOT / "examples" / "cpp_trainer" / "README.md").read_text()
    assert re.findall(r"\babi=(\d+)\.(\d+)", text) == [(str(_core.ABI_MAJOR),
                                                         str(_core.ABI_MINOR))]


def test_the_ppo_examples_help_lists_the_readmes_flags_without_torch():
    """``python examples/ppo_atari.py --help`` printed only "needs torch"
    where torch is not installed (a newcomer's report): its options are
    parsed before torch is imported. torch is kept out of the script's
    process (``sys.modules["torch"] = None``: every import of it fails)."""
    (cmd,) = [c for b in BLOCKS for c in docs_blocks.commands(b)
              if c[1:2] == ["examples/ppo_atari.py"]]
    runner = ("import runpy, sys; sys.modules['torch'] = None; "
              "sys.argv = [sys.argv[1], '--help']; runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", runner, str(ROOT / cmd[1])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for flag in docs_blocks.flags(cmd):
        assert flag in proc.stdout, flag
    # with options, it still says what it needs (exit status 1, no traceback)
    runner = runner.replace("'--help'", "'--num-envs', '4'")
    proc = subprocess.run([sys.executable, "-c", runner, str(ROOT / cmd[1])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "needs torch" in proc.stderr and "integrations" in proc.stderr, proc.stderr
    # A legacy id is checked quietly: the script plays preset="dqn", and
    # make() warns only where the options leave the id's conventions open
    # (it told a CleanRL user of BreakoutNoFrameskip-v4 that the run had
    # sticky actions 0.25: a newcomer's pass, 2026-12-06)
    proc = subprocess.run([sys.executable, "-W", "always", "-c",
                           runner.replace("'--num-envs', '4'",
                                          "'--env-id', 'BreakoutNoFrameskip-v4'"),
                           str(ROOT / cmd[1])], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "needs torch" in proc.stderr, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr


def test_the_readmes_chaos_figures_are_those_of_the_committed_run():
    """The README's chaos block quoted an earlier run's times (a trainer's
    death cleaned up in 0.206 s where the committed file says 0.016 s) after
    benchmarks/results/chaos.json was measured again (a docs review,
    2026-12-06): its figures are read back from the file here."""
    import json
    import math

    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- chaos-figures -->(.*?)<!-- /chaos-figures -->", text, re.S).group(1)
    res = json.loads((ROOT / "benchmarks" / "results" / "chaos.json").read_text())
    t = res["time_to_error"]
    parent = [x["time_to_error_s"] for x in res["per_trial"] if x["killed"] == "parent"]
    expected = [f"{res['config']['trials']} trials", f"{res['hangs']} hangs",
                f"{res['leaked_segments']} leaked segments",
                f"{res['orphaned_processes']}\norphaned processes",
                f"{res['wrong_outcomes']} wrong outcomes",
                f"{t['worker_killed']['p50_s']:.3f} s (median; p99 "
                f"{t['worker_killed']['p99_s']:.3f} s)",
                f"{t['parent_killed']['p50_s']:.3f} s (median; "
                f"{sum(v < 0.1 for v in parent)} of the {len(parent)} such trials within "
                f"{math.ceil(100 * max(v for v in parent if v < 0.1)) / 100:g} s, the other "
                f"{sum(v >= 0.1 for v in parent)} at "
                f"{min(v for v in parent if v >= 0.1):.2f}–{max(parent):.2f} s; "
                f"p99 {t['parent_killed']['p99_s']:.3f} s)",
                f"p99 over all\ntrials {t['all']['p99_s']:.3f} s"]
    flat = " ".join(block.split())
    for figure in expected:
        assert " ".join(figure.split()) in flat, (figure, block)


def test_the_readmes_ceiling_tables_are_those_of_the_committed_sittings():
    """The README's issue-24 totals were edited by hand after each sitting
    (a count or a median could drift from the JSON they summarize): each
    table between ``<!-- ceiling-sittings --first F --last L -->`` markers
    is what benchmarks/ceiling_sittings.py computes from the committed
    JSON of those sittings, and the newest sitting there is in a table."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "ceiling_sittings", ROOT / "benchmarks" / "ceiling_sittings.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"<!-- ceiling-sittings --first (\d+) --last (\d+) -->\n(.*?)\n"
                        r"<!-- /ceiling-sittings -->", text, re.S)
    assert len(blocks) >= 2, "the README's issue-24 tables lost their markers"
    for first, last, table in blocks:
        runs = mod.load(int(first), int(last))
        assert all(runs.values()), (first, last)
        assert table.strip().splitlines() == mod.table(runs), (first, last)
    newest = max(int(m) for m in re.findall(r"sticky0-sitting(\d+)\.json",
                                            " ".join(p.name for p in (ROOT / "benchmarks" /
                                                                      "results").iterdir())))
    assert max(int(last) for _, last, _ in blocks) == newest, newest
