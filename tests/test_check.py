"""shmatari-check: every way of running a seeded rollout agrees, and a broken
run is caught and located."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shmatari
from shmatari.check import FIELDS, PAIRINGS, first_divergence, main, policy_actions
from shmatari.config import AUTORESET_MODES

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_shmatari_check_with_defaults_agrees_everywhere_and_writes_its_report(tmp_path):
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, "-m", "shmatari.check", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(PAIRINGS) + 1
    assert all(line.startswith("agree ") for line in lines[:-1])
    assert lines[-1].startswith(f"shmatari-check: all {len(PAIRINGS)} pairings agree")
    report = json.loads(out.read_text())
    assert report["ok"] is True
    # Breakout under the random policy ends episodes within the default 300
    # steps: resets and autoreset are in the streams compared (no NOTE line)
    assert report["episode_ends"] > 0
    assert f", {report['episode_ends']} episode ends, seed 0," in lines[-1]
    assert [p["key"] for p in report["pairings"]] == list(PAIRINGS)
    assert {p["verdict"] for p in report["pairings"]} == {"agree"}
    assert report["config"]["num_envs"] == 4 and report["config"]["steps"] == 300
    reference = report["runs"]["reference"]["env_hashes"]
    assert len(set(reference)) == 4  # the envs themselves differ
    assert set(report["runs"]) == {"reference", "rerun", "one_worker", "fork", "spawn",
                                   "async", "fixed", "reseed", "fast_on", "fast_off", "pipe",
                                   "seed_a", "seed_b", "seed_sticky_a", "seed_sticky_b",
                                   "seed_noops_a", "seed_noops_b"}
    seed_runs = [report["runs"].pop(r)["env_hashes"] for r in ("seed_a", "seed_b")]
    # each random source alone, sticky actions with 14 envs
    sticky = [report["runs"].pop(f"seed_sticky_{t}")["env_hashes"] for t in "ab"]
    noops = [report["runs"].pop(f"seed_noops_{t}")["env_hashes"] for t in "ab"]
    assert [len(set(sticky[0] + sticky[1])), len(set(noops[0] + noops[1]))] == [28, 8]
    # the fast_reset pairing's games are cut short: streams of their own
    fast = [report["runs"].pop(r)["env_hashes"] for r in ("fast_on", "fast_off")]
    assert fast[0] == fast[1] and fast[0] != reference
    for run in report["runs"].values():
        assert run["error"] is None and run["env_hashes"] == reference
    # the seed pairing: every env given env 0's actions, under seeds 0 and 1
    assert len(set(seed_runs[0] + seed_runs[1])) == 8
    assert seed_runs[0] != reference and lines[-2] == (
        "agree   pool seeds 0 and 1, every env given env 0's actions: all 8 env streams "
        "distinct; with sticky actions alone (noop_max 0), 14 envs (runs seed_sticky_a, "
        "seed_sticky_b): all 28 env streams distinct; with no-op starts alone "
        "(repeat_action_probability 0), 4 envs (runs seed_noops_a, seed_noops_b): all 8 env "
        "streams distinct"), lines[-2]
    assert report["machine"]["cores"] >= 1 and report["machine"]["versions"]["ale-py"]


def test_an_unseeded_run_fails_the_check_and_the_divergence_is_named(tmp_path):
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, "-m", "shmatari.check", "--num-envs", "2",
                           "--steps", "60", "--pairings", "rerun,async", "--quiet",
                           "--unseeded-policy", "async", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rerun, broken, *_, summary = proc.stdout.splitlines()
    assert rerun.startswith("agree   twice as is")
    assert broken.startswith(
        "DIFFER  sync vs async (batch_size 1): first divergence at agent step ")
    assert "field obs" in broken or "field reward" in broken
    assert summary.startswith("shmatari-check: 1 of 2 pairings does not agree")
    report = json.loads(out.read_text())
    assert report["ok"] is False and report["runs"]["async"]["unseeded_policy"] is True
    where = report["pairings"][1]["first_divergence"]
    # The policy cannot change the reset: the first divergence follows an action.
    assert 1 <= where["step"] <= 60 and where["env"] in (0, 1) and where["field"] in FIELDS
    assert f"agent step {where['step']}, env {where['env']}, field {where['field']}" in broken


def test_the_streams_hold_each_steps_info(capsys, tmp_path):
    """A stream was each step's observation, reward and flags: a run whose
    info differed (here ``info["ram"]``, the console's RAM, asked for by one
    run only) had the same env hashes. The info of each step is hashed too,
    the fifth field; the RAM run still agrees with itself everywhere."""
    plain = run_check(capsys, tmp_path, "--pairings", "rerun")
    ram = run_check(capsys, tmp_path, "--pairings", "rerun,async,pipe", "-o", "ram_info=true")
    assert plain["fields"] == ram["fields"] == ["obs", "reward", "terminated", "truncated",
                                                "info"]
    a = plain["runs"]["reference"]["env_hashes"]
    b = ram["runs"]["reference"]["env_hashes"]
    assert all(x != y for x, y in zip(a, b)), (a, b)


def test_unseeded_policy_takes_the_pairings_key(capsys):
    """--pairings says 'workers', --unseeded-policy wanted the run's name
    'one_worker', and its error quoted the Python parameter (a newcomer's
    pass): both spellings work now, and the error names the flag."""
    code = main(["--num-envs", "2", "--steps", "20", "--quiet", "--pairings", "workers",
                 "--unseeded-policy", "workers"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1 and out[0].startswith("DIFFER  num_workers 2 vs 1")
    assert out[-1].startswith("shmatari-check: 1 of 1 pairing does not agree")
    with pytest.raises(SystemExit) as exit_:
        main(["--unseeded-policy", "bogus"])
    assert exit_.value.code == 2
    assert ("--unseeded-policy) must name a pairing run here (rerun, workers, fork, spawn, "
            "async, fixed, reseed, fast_reset, pipe)") in capsys.readouterr().err
    # the fast_reset pairing's unseeded run is its second, fast resets off
    code = main(["--num-envs", "2", "--steps", "20", "--quiet", "--pairings", "fast_reset",
                 "--unseeded-policy", "fast_reset"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("DIFFER  fast resets on vs off"), out
    # the fast_reset pairing alone: its own runs, its games' ends counted
    # (no reference made for nothing, no false "no episode ended" NOTE)
    assert "NOTE" not in out and " 0 episode ends" not in out, out


def test_an_empty_pairings_flag_is_refused_not_taken_for_all(capsys):
    """--pairings "" ran all ten pairings (a fuzzing pass)."""
    with pytest.raises(SystemExit) as exit_:
        main(["--pairings", "", "--quiet"])
    assert exit_.value.code == 2 and "unknown pairing(s) ['']" in capsys.readouterr().err


#: A short check whose episodes end: lost lives (terminated) and a 200-frame
#: cap (truncated, at agent step 50 or sooner) within 100 steps.
SHORT = ["--num-envs", "2", "--steps", "100", "--quiet", "-o", "episodic_life=true",
         "-o", "max_episode_frames=200"]


def run_check(capsys, tmp_path, *args: str) -> dict:
    """``shmatari-check`` through its command line; asserts exit 0 and every
    line an agreement; returns the JSON report."""
    out = tmp_path / "check.json"
    code = main([*SHORT, "--json", str(out), *args])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    # (the seed pairing's n/a: 2 envs are too few to tell a seed ignored from chance)
    assert all(line.startswith("agree ") or line.startswith("n/a     pool seeds")
               for line in lines[:-1]) and len(lines) >= 2, lines
    report = json.loads(out.read_text())
    assert report["ok"] is True
    assert {p["verdict"] for p in report["pairings"] if p["key"] != "seed"} == {"agree"}
    return report


def test_check_agrees_in_every_autoreset_mode(capsys, tmp_path):
    """The rollout takes each mode's way to the next episode: next-step's reset
    step, same-step's final_obs, disabled's masked reset (sync and async);
    the pipe baseline does each mode its own way (Gymnasium's SyncVectorEnv)."""
    hashes = {}
    for mode in AUTORESET_MODES:
        # Async batches of 2 of 3 envs mix envs that ended with envs that go on.
        report = run_check(capsys, tmp_path, "--num-envs", "3", "--batch-size", "2",
                           "--pairings", "async,pipe", "-o", f"autoreset_mode={mode}")
        assert report["config"]["options"]["autoreset_mode"] == mode
        hashes[mode] = report["runs"]["reference"]["env_hashes"]
    # Same-step and a masked reset after the done step give the same stream
    # (the done step's observation, then the next episode's first) ...
    assert hashes["same_step"] == hashes["disabled"]
    # ... and next-step's differs in every env: each env ended an episode.
    assert all(a != b for a, b in zip(hashes["next_step"], hashes["same_step"]))


@pytest.mark.parametrize("args", [["-o", "grayscale=false", "-o", "obs_layout=channels_first"],
                                  ["--preset", "dqn", "-o", "autoreset_mode=same_step"]],
                         ids=["rgb-channels-first", "dqn-preset"])
def test_check_agrees_with_rgb_and_with_a_preset(capsys, tmp_path, args):
    report = run_check(capsys, tmp_path, "--pairings", "async,pipe", *args)
    options = report["config"]["options"]
    if "--preset" in args:  # the preset's values, with -o's over them
        assert options["reward_clip"] and options["use_fire_reset"]
        assert options["repeat_action_probability"] == 0.0
    else:
        assert options["grayscale"] is False and options["obs_layout"] == "channels_first"


def pool_trace(policy, seed: int) -> list:
    """Every observation, reward and flag of a 2-env Pong pool, step 0 = reset."""
    with shmatari.make("Pong", num_envs=2, seed=seed) as env:
        actions = policy(int(env.single_action_space.n))
        obs, _ = env.reset()
        trace = [(obs, np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool))]
        for k in range(actions.shape[1]):
            obs, reward, terminated, truncated, _ = env.step(actions[:, k])
            trace.append((obs, reward, terminated, truncated))
    return trace


def test_the_named_divergence_is_the_first_difference_in_the_full_streams(keep_global_rngs):
    steps, seed = 40, 3
    np.random.seed(11)
    report = shmatari.check_reproducibility("Pong", num_envs=2, steps=steps, seed=seed,
                                            pairings=["rerun"], unseeded_policy="rerun")
    assert not report.ok
    # Redo both runs keeping every array (the unseeded one from the same
    # global state), and find their first difference.
    a = pool_trace(lambda n: policy_actions(2, steps, n, seed), seed)
    np.random.seed(11)
    b = pool_trace(lambda n: np.random.randint(0, n, (2, steps)), seed)
    expected = next({"step": k, "env": e, "field": f}
                    for k in range(steps + 1) for e in range(2)
                    for f, x, y in zip(FIELDS, (v[e] for v in a[k]), (v[e] for v in b[k]))
                    if not np.array_equal(x, y))
    assert report.pairings[0].first_divergence == expected
    assert report.pairings[0].differing_envs == [0, 1]


def test_first_divergence_takes_the_earliest_step_then_lowest_env_then_field_order():
    a = np.zeros((3, 10, len(FIELDS)), np.uint64)
    assert first_divergence(a, a.copy()) is None
    b = a.copy()
    b[2, 7, FIELDS.index("obs")] = 1
    b[1, 5, FIELDS.index("truncated")] = 1
    b[2, 5, FIELDS.index("reward")] = 1
    assert first_divergence(a, b) == {"step": 5, "env": 1, "field": "truncated"}
    b[1, 5, FIELDS.index("reward")] = 1
    assert first_divergence(a, b) == {"step": 5, "env": 1, "field": "reward"}


def test_policy_rows_are_per_env_seeded_streams():
    full = policy_actions(4, 50, 6, policy_seed=9)
    assert full.shape == (4, 50) and full.min() >= 0 and full.max() < 6
    # An env's actions do not depend on how many envs or steps there are.
    np.testing.assert_array_equal(policy_actions(2, 20, 6, 9), full[:2, :20])
    assert len({row.tobytes() for row in full}) == 4


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(num_envs=1), ValueError, "num_envs must be >= 2"),
    (dict(num_workers=1), ValueError, "num_workers"),
    (dict(batch_size=4), ValueError, "batch_size"),
    (dict(pairings=["nope"]), ValueError, "unknown pairing"),
    (dict(unseeded_policy="reference"), ValueError, "unseeded_policy"),
    (dict(steps=0), ValueError, "steps"),
    (dict(frame_skp=2), TypeError, "frame_skip"),
])
def test_bad_arguments_fail_before_any_run(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        shmatari.check_reproducibility("Breakout", **kwargs)


def test_cli_bad_option_exits_2_with_the_reason():
    proc = subprocess.run([sys.executable, "-m", "shmatari.check", "-o", "noop_max=-1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "noop_max" in proc.stderr


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_the_train_checks_busy_loop_ends_with_a_killed_check(how):
    """shmatari-check --train's "load" run spins a process beside the pool.
    A check killed by SIGKILL or SIGTERM (which skip its ``finally``) left it
    spinning under init for good (an attacker's pass); now it ends."""
    import signal
    import time

    import psutil

    code = ("import time\nfrom shmatari.train_check import start_busy_loop\n"
            "print(start_busy_loop().pid, flush=True)\ntime.sleep(60)\n")
    check = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        busy = psutil.Process(int(check.stdout.readline()))
        time.sleep(0.3)
        assert busy.is_running() and busy.status() != psutil.STATUS_ZOMBIE
        check.send_signal(getattr(signal, how))
        check.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if busy.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            busy.kill()
            pytest.fail(f"the busy loop was still running 5 s after the check's {how}")
    finally:
        check.kill()
        check.wait()


def test_a_check_that_ends_no_episode_says_what_it_did_not_compare(tmp_path):
    """The default 300 steps end no episode of Pong (its first ends after
    about 800 agent steps of the random policy), and the docs' CI recipe ran
    it so: every pairing agreed over streams without a single reset after
    the first, and nothing said so (a reproducibility audit). The summary
    counts the episode ends, and a NOTE line says what was not compared."""
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, "-m", "shmatari.check", "--num-envs", "2",
                           "--steps", "20", "--pairings", "rerun", "--quiet",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict, note, summary = proc.stdout.splitlines()
    assert verdict.startswith("agree   twice as is")
    assert note.startswith("NOTE    no env ended an episode in 20 steps: no autoreset, "
                           "no later reset and no episode statistic was compared")
    assert "-o max_episode_steps=N" in note
    assert summary.startswith("shmatari-check: 1 pairing agrees (breakout, 2 envs x 20 steps, "
                              "0 episode ends, seed 0,")
    report = json.loads(out.read_text())
    assert report["episode_ends"] == 0 and report["runs"]["rerun"]["episode_ends"] == [0, 0]
    # capped episodes end within the budget: counted per env, and no NOTE
    report = shmatari.check_reproducibility("Breakout", num_envs=2, steps=20,
                                            pairings=("rerun",), max_episode_steps=8)
    assert report.ok and report.runs["reference"].episode_ends == [2, 2]
    assert report.episode_ends == 4 and not any(line.startswith("NOTE") for line in report.lines())
    assert "4 episode ends" in report.lines()[-1]


def test_the_summary_tells_a_pairing_that_could_not_run_from_one_that_differs():
    """A failed run was counted as a pairing that "does not agree"."""
    from shmatari.check import CheckReport, PairingResult

    config = {"game": "pong", "num_envs": 2, "steps": 5, "seed": 0}
    agree = PairingResult("rerun", "twice as is", ("reference", "rerun"), "agree")
    failed = PairingResult("spawn", "start method zygote vs spawn", ("reference", "spawn"),
                           "error", error="spawn run failed: RuntimeError: no")
    differ = PairingResult("async", "sync vs async (batch_size 1)", ("reference", "async"),
                           "differ", first_divergence={"step": 1, "env": 0, "field": "obs"},
                           differing_envs=[0])
    lines = CheckReport(config, {}, [agree, failed, failed], 1.0).lines()
    assert lines[-1].startswith("shmatari-check: 2 of 3 pairings could not run (pong, ")
    lines = CheckReport(config, {}, [agree, differ, failed], 1.0).lines()
    assert lines[-1].startswith("shmatari-check: 1 of 3 pairings does not agree, 1 of 3 could "
                                "not run (pong, ")
    lines = CheckReport(config, {}, [failed], 1.0).lines()
    assert lines[-1].startswith("shmatari-check: 1 of 1 pairing could not run (pong, ")
    lines = CheckReport(config, {}, [differ, differ], 1.0).lines()
    assert lines[-1].startswith("shmatari-check: 2 of 2 pairings do not agree (pong, ")


def test_a_default_pairing_that_cannot_run_is_named_in_a_note():
    """The fixed pairing needs a batch_size that divides num_envs; left out
    of the default pairings where it does not, the summary still said "all
    N pairings agree" (a reviewer's pass, 2026-12-06). A NOTE line says
    what was not run; asked for by name, it is refused."""
    from shmatari.check import check_reproducibility

    report = check_reproducibility("null", num_envs=3, batch_size=2, steps=20)
    assert "fixed" not in [p.key for p in report.pairings]
    assert report.config["left_out"].startswith("the fixed pairing")
    assert "NOTE    not run: the fixed pairing (batch_order 'fixed' needs a batch_size < " \
           "num_envs that divides it: 2 and 3)" in report.lines()
    with pytest.raises(ValueError, match="the fixed pairing needs a batch_size"):
        check_reproducibility("null", num_envs=3, batch_size=2, steps=20,
                              pairings=["rerun", "fixed"])


def test_a_script_without_a_main_guard_runs_the_check_once(tmp_path):
    """The spawn run's workers and the pipe run's processes are started by
    multiprocessing, whose spawn and forkserver children run the parent's
    main script again: a script calling the check without an ``if __name__
    == "__main__":`` guard (which the README says shmatari does not need)
    ran the whole check again in each of them, each printing its own
    verdicts, one of them "do not agree" (a reproducibility audit: 5 runs of
    this script for 1). The check's children no longer import it."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import os\n"
        "print('script ran', flush=True)\n"
        "import shmatari\n"
        "report = shmatari.check_reproducibility('Breakout', num_envs=2, steps=5,\n"
        "                                        pairings=('spawn', 'pipe'))\n"
        "print(report.lines()[-1], flush=True)\n"
        "assert __import__('sys').modules['__main__'].__file__ == __file__\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("script ran") == 1, proc.stdout
    assert proc.stdout.count("shmatari-check: all 2 pairings agree") == 1, proc.stdout


_NO_OPENCV = r"""
import sys
sys.modules["cv2"] = None  # as if no OpenCV package were installed: import cv2 fails
import shmatari
from shmatari import _bench_backends
from shmatari.check import main
print("bench pipe:", _bench_backends.peer_available("pipe"))
print("bench pipe-kernel:", _bench_backends.peer_available("pipe-kernel"))
try:
    shmatari.check_reproducibility("Pong", num_envs=2, steps=5, pairings=["pipe"])
except ModuleNotFoundError as exc:
    print("api:", exc)
print("without pipe:", shmatari.check_reproducibility(
    "Pong", num_envs=2, steps=5, pairings=["rerun"], progress=False).ok)
print("asked:", main(["--game", "Pong", "--steps", "5", "--num-envs", "2", "--quiet",
                      "--pairings", "rerun,pipe"]))
sys.exit(main(["--game", "Pong", "--steps", "5", "--num-envs", "2", "--quiet"]))
"""


def test_without_opencv_the_pipe_pairing_is_refused_before_any_run():
    """A plain install has no OpenCV (not a base dependency: opencv-python
    and opencv-python-headless must not be installed together). The check
    ran every other pairing, then failed with the pipe worker's
    ModuleNotFoundError, and shmatari-bench died with a traceback (a
    newcomer's pass). Now the pipe pairing asked for is refused at once
    (exit 2), naming the way out, other pairings run, and the bench's pipe
    row says it is not installed, as EnvPool's does; pipe-kernel needs no
    OpenCV. With no --pairings, the check leaves the pipe pairing out and
    says so in a NOTE line (it exited 2, "bad arguments", with none given:
    a newcomer's pass, 2026-12-06)."""
    proc = subprocess.run([sys.executable, "-c", _NO_OPENCV], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-2000:])
    assert "asked: 2" in proc.stdout, proc.stdout
    assert "NOTE    not run: the pipe pairing (the pipe baseline's classic workers resize " \
        "with OpenCV, not installed here" in proc.stdout, proc.stdout
    assert "pairings agree" in proc.stdout, proc.stdout
    out = proc.stdout
    assert "bench pipe: not installed (OpenCV: python3 -m pip install opencv-python-headless" \
        in out, out
    assert "bench pipe-kernel: None" in out, out
    assert "api: the pipe pairing needs OpenCV" in out and "--pairings rerun," in out, out
    assert "without pipe: True" in out, out
    assert "shmatari-check: the pipe pairing needs OpenCV" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


#: Run in a fresh process: seeding bugs put into shmatari.seeding there, and
#: workers forked from it (start method fork), so that they carry the bug.
_SEEDING_BUG = """
import sys
import numpy as np
from shmatari import atari, check, config, seeding
ale, noop, reseed_core = seeding.ale_seed, seeding.noop_rng, atari.reseed_core
config.default_start_method = lambda: "fork"
for bug in sys.argv[1:]:
    name, sticky = bug.split(":")
    if name == "global":  # the workers draw from the state forked from the parent
        seeding.noop_rng = lambda s, i, r=0, g=0: np.random.default_rng(
            np.random.randint(2**31))
        pairings = ["rerun"]
    elif name == "reseed":  # reset(seed=S) re-derives every env as env 0
        atari.reseed_core = lambda core, index, seed: reseed_core(core, 0, seed)
        pairings = ["reseed"]
    elif name == "ignoredale":  # ALE's seed (sticky actions) ignores the pool seed
        seeding.ale_seed = lambda s, i, r=0, g=0: ale(0, i, r, g)
        pairings = ["seed"]
    elif name == "ignorednoops":  # the no-op counts ignore the pool seed
        seeding.noop_rng = lambda s, i, r=0, g=0: noop(0, i, r, g)
        pairings = ["seed"]
    else:
        remap = {"ignored": lambda s, i: (0, i), "plus_i": lambda s, i: (s + i, 0),
                 "same": lambda s, i: (0, 0), "none": lambda s, i: (s, i)}[name]
        seeding.ale_seed = lambda s, i, r=0, g=0: ale(*remap(s, i), r, g)
        seeding.noop_rng = lambda s, i, r=0, g=0: noop(*remap(s, i), r, g)
        pairings = ["seed"]
    report = check.check_reproducibility("Breakout", num_envs=4, steps=120, seed=5,
                                         pairings=pairings,
                                         repeat_action_probability=float(sticky))
    print(bug, report.ok, report.lines()[0], flush=True)
    seeding.ale_seed, seeding.noop_rng, atari.reseed_core = ale, noop, reseed_core
"""


def test_the_check_catches_the_classic_seeding_bugs():
    """The pairings showed that a stream does not depend on how it is run,
    and left "it depends on the seed" to a comparison of two reports whose
    policies differed too, so a build whose envs ignored the seed passed it
    (a reproducibility audit, 2026-12-06). The seed pairing fails each
    classic bug, with sticky actions and without (where a seed draws only
    no-op counts), and passes the real seeding; a worker that draws from a
    random state forked from the parent fails the rerun, whose pool starts
    from another parent state. A reseed that gives every env env 0's
    streams fails the reseed pairing (the check ran no reset(seed=...) until
    2026-12-06, and passed it: a reproducibility audit). With sticky
    actions and no-op starts both drawn from the seed, one source that
    ignores the seed fails the pairing too: its runs of each source alone
    (the other source told the streams apart, and the pairing passed: a
    reproducibility audit, 2026-12-07)."""
    bugs = ["none:0.25", "none:0", "ignored:0.25", "ignored:0", "plus_i:0.25", "plus_i:0",
            "same:0.25", "same:0", "global:0.25", "reseed:0.25", "ignoredale:0.25",
            "ignorednoops:0.25"]
    proc = subprocess.run([sys.executable, "-c", _SEEDING_BUG, *bugs], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    got = {line.split(" ", 1)[0]: line.split(" ", 2)[1:] for line in proc.stdout.splitlines()}
    assert set(got) == set(bugs), proc.stdout
    for bug, (ok, line) in got.items():
        name = bug.split(":")[0]
        assert (ok == "True") == (name == "none"), (bug, line)
        expect = {"none": "agree   pool seeds 5 and 6", "global": "DIFFER  twice as is",
                  "reseed": "DIFFER  make(seed=5) vs make(seed=6), 200 steps, reset(seed=5)",
                  "ignored": "the pool seed is ignored", "plus_i": "an env seed of seed + i",
                  "ignoredale": "with sticky actions alone (noop_max 0), 14 envs (runs "
                                "seed_sticky_a, seed_sticky_b): each env plays the same "
                                "stream under both seeds: the pool seed is ignored",
                  "ignorednoops": "with no-op starts alone (repeat_action_probability 0), 4 "
                                  "envs (runs seed_noops_a, seed_noops_b): each env plays "
                                  "the same stream under both seeds",
                  "same": "every env under both seeds plays one stream"}[name]
        assert expect in line, (bug, line)


def test_the_seed_pairing_judges_sticky_actions_alone_only_with_repeats_to_show():
    """Streams of sticky actions alone are alike whatever the seed until a
    repeat shows: the sticky-alone runs of one step (or of
    repeat_action_probability 1e-4) failed a correct build, "neither the
    pool seed nor the env index reaches the envs (378 pairs alike)" (a
    review, 2026-12-07). They run, and are judged, only where a stream is
    expected to hold SEED_STICKY_MIN_REPEATS repeats; the no-op-alone runs
    still run, and the line says why the sticky ones did not."""
    from shmatari.check import SEED_STICKY_MIN_REPEATS, check_reproducibility

    for steps, sticky in ((1, 0.25), (300, 1e-4)):
        report = check_reproducibility("Breakout", num_envs=4, steps=steps, policy_seed=2,
                                       pairings=["seed"], repeat_action_probability=sticky)
        assert report.ok, report.lines()
        assert set(report.runs) == {"seed_a", "seed_b", "seed_noops_a", "seed_noops_b"}
        assert "sticky actions alone not run" in report.lines()[0], report.lines()
        assert f"too few to judge: {SEED_STICKY_MIN_REPEATS} or more" in report.lines()[0]
    # with no-op starts off, the main pairing is sticky actions alone: n/a with too few
    report = check_reproducibility("Breakout", num_envs=16, steps=1, policy_seed=2,
                                   pairings=["seed"], noop_max=0)
    assert report.ok and report.pairings[0].verdict == "n/a", report.lines()
    assert "too few to tell a seed ignored from chance" in report.lines()[0]


@pytest.mark.parametrize("sticky, noop_max, n, verdict", [
    (0.25, 30, 3, "agree"), (0.25, 30, 2, "n/a"), (0.25, 0, 13, "n/a"), (0.25, 0, 14, "agree"),
    (0.0, 0, 4, "n/a"), (0.0, 1, 4, "n/a"), (0.0, 2, 4, "n/a"), (0.0, 30, 4, "agree"),
    (0.0, 30, 2, "n/a")])
def test_the_seed_verdict_without_alike_streams(sticky, noop_max, n, verdict):
    """Distinct streams pass; a stream with nothing random, or too few envs
    to tell a seed ignored from chance (a pair alike once in noop_max, once
    in 2 with sticky actions alone: noop_max 30 needs 3 envs for a 1e-4
    false alarm, noop_max 2 or 0 needs 14), is n/a."""
    from shmatari.check import seed_pairing_verdict

    a, b = [f"a{i}" for i in range(n)], [f"b{i}" for i in range(n)]
    got, text, shared = seed_pairing_verdict(a, b, (0, 1), sticky, noop_max)
    assert (got, shared) == (verdict, []), text


def test_the_seed_verdict_tells_chance_from_a_pattern():
    """Two envs play one stream about once in noop_max pairs, with sticky
    actions too while no repeat has shown (short streams failed the pairing
    on a correct build: a review, 2026-12-06): one alike pair passes, a
    whole pattern fails. Every env of each run alike, with 3 envs, and envs
    of the same rank in different workers alike (a random state the workers
    inherit, with 2 envs per worker) passed as chance (the same review)."""
    from shmatari.check import seed_pairing_verdict

    a, b = ["x", "a1", "a2", "a3"], ["b0", "b1", "x", "b3"]
    for sticky in (0.0, 0.25):
        assert seed_pairing_verdict(a, b, (0, 1), sticky, 30)[::2] == ("agree", [[0, 0, 1, 2]])
    shifted = ["a0", "b0", "b1", "b2"]  # env i + 1 under seed 0 is env i under seed 1
    verdict, text, shared = seed_pairing_verdict(shifted, b[:2] + ["b2", "b3"], (0, 1), 0.0, 30)
    assert verdict == "shared" and "seed + i" in text and len(shared) == 3
    verdict, text, _ = seed_pairing_verdict(["x"] * 3, ["y"] * 3, (0, 1), 0.0, 30)
    assert verdict == "shared" and "env index does not reach" in text
    verdict, text, _ = seed_pairing_verdict(["p", "q", "p", "q"], ["r", "s", "r", "s"], (0, 1),
                                            0.25, 30, groups=[range(0, 2), range(2, 4)])
    assert verdict == "shared" and "same rank in different workers" in text


FAST_RESET_PLANTS = {
    # one-line bugs of a reproducibility pass (2026-12-06), each let
    # through by the default pairings' four episode ends, as they read once
    # fast resets followed the env's generator themselves (2026-12-06, later)
    "generator advanced two draws too far": [
        ("gen.advance(2 * noops)", "gen.advance(2 * noops + 2)")],
    "generator one draw short": [
        ("gen.advance(2 * (frames - self._known_at))",
         "gen.advance(2 * (frames - self._known_at) - 1)")],
    "no primer: the old game's action stays remembered": [
        ("if gen.next_draw() >= self._p:", "if True:")],
    "the primer judged by the reset's draw, not the one after the no-ops": [
        ("        if noops:\n"
         "            gen.advance(2 * noops)\n"
         "        if gen.next_draw() >= self._p:\n",
         "        passes = gen.next_draw() >= self._p\n"
         "        if noops:\n"
         "            gen.advance(2 * noops)\n"
         "        if passes:\n")],
}


@pytest.mark.parametrize("plant", sorted(FAST_RESET_PLANTS))
def test_the_fast_reset_pairing_catches_a_planted_fast_reset_bug(plant, tmp_path):
    """shmatari-check had no pairing of fast resets on and off: only the
    pipe pairing reset as ALE does, left out without OpenCV, and too few
    resets at its defaults to see a bug that shows now and then. A copy of
    the package with one line of fast_reset.py broken must fail the
    fast_reset pairing at the default settings (the real workers and
    emulator, in a subprocess that imports the copy)."""
    import shutil

    root = tmp_path / "src"
    shutil.copytree(Path(shmatari.__file__).parent, root / "shmatari",
                    ignore=shutil.ignore_patterns("__pycache__"))
    path = root / "shmatari" / "fast_reset.py"
    text = path.read_text()
    for old, new in FAST_RESET_PLANTS[plant]:
        assert text.count(old) == 1, plant
        text = text.replace(old, new)
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "shmatari.check", "--quiet",
                           "--pairings", "fast_reset", "--seed", "1"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(root)))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("DIFFER  fast resets on vs off, games cut at 10 agent steps"), \
        proc.stdout


def test_the_fast_reset_pairing_is_not_applicable_where_no_reset_is_fast(capsys):
    """Fast resets turned off by the options, or a game whose fast reset is
    not proven (Boxing): the pairing says n/a, and why, with neither run."""
    from shmatari.check import check_reproducibility

    report = check_reproducibility("Breakout", num_envs=2, steps=5, pairings=["fast_reset"],
                                   fast_reset="off")
    (verdict,) = report.pairings
    assert verdict.verdict == "n/a" and "fast_reset='off'" in verdict.note
    # no run at all: none named (a reference was made for nothing: a review)
    assert report.runs == {} and verdict.runs == () and report.ok
    report = check_reproducibility("Boxing", num_envs=2, steps=5, pairings=["fast_reset"])
    assert report.pairings[0].verdict == "n/a"
    assert "boxing resets as ALE does here" in report.pairings[0].note
    assert report.lines()[0].startswith("n/a     fast resets on vs off")
