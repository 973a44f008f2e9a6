"""One client, written once in C (shmatari.h): a served pool driven
alternately by shmatari's Python client and by a C client built against the
header (tests/c/client_alternate.c), with the same states, the same
refusals (in each language's call names) and the same results as one
Python client doing the same calls."""

from __future__ import annotations

import itertools
import os
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

import shmatari
from shmatari import _core
from shmatari.env import ShmVectorEnv
from conftest import build_sanitized

ROOT = pathlib.Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "csrc" / "include"
ROUNDS = 12
OPTIONS = dict(num_workers=1, seed=3, max_episode_frames=40)
_names = itertools.count()


@pytest.fixture(scope="module")
def c_client(tmp_path_factory):
    cc = next((c for c in map(shutil.which, ("cc", "gcc", "clang")) if c), None)
    if cc is None:
        pytest.skip("no C compiler on this machine")
    exe = tmp_path_factory.mktemp("client") / "client_alternate"
    build_sanitized([cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-pedantic",
                     f"-I{INCLUDE}", str(ROOT / "tests" / "c" / "client_alternate.c"),
                     "-o", str(exe)])
    return exe


def _digest(row: np.ndarray) -> int:
    flat = row.reshape(-1).astype(np.uint64)
    weights = (np.arange(flat.size, dtype=np.uint64) % 251) + 1
    return int((flat * weights).sum(dtype=np.uint64))


def _rows(obs, reward, term, trunc, env_id):
    return [f"env={e} digest={_digest(obs[i])} reward={float(reward[i]):g} "
            f"term={int(term[i])} trunc={int(trunc[i])}" for i, e in enumerate(env_id)]


def python_session(env, states: list) -> tuple[list, str]:
    """What client_alternate.c does, through the Python API."""
    states.append(env._client.state)
    with pytest.raises(shmatari.CallOrderError) as err:
        env.recv()
    states.append(env._client.state)
    env.async_reset()
    states.append(env._client.state)
    out = []
    for k in range(ROUNDS + 1):
        obs, reward, term, trunc, info = env.recv()
        states.append(env._client.state)
        ids = info["env_id"]
        out += _rows(obs, reward, term, trunc, ids)
        if k == ROUNDS:
            break
        env.send((k + ids) % env.single_action_space.n, ids)
        states.append(env._client.state)
    return out, str(err.value)


def test_python_and_c_clients_take_turns_on_one_segment(c_client):
    cfg = shmatari.config.build_config("Breakout", 2, **OPTIONS)
    name = f"oc{os.getpid()}x{next(_names)}"
    owner = ShmVectorEnv(cfg, segment_name=_core.segment_name(name), claim=False)
    try:
        sessions, texts, state_seqs = [], [], []
        for turn in ("python", "c", "python", "c"):
            if turn == "python":
                states = []
                with shmatari.attach(name) as env:
                    rows, text = python_session(env, states)
                state_seqs.append(states)
            else:
                proc = subprocess.run([str(c_client), name, str(ROUNDS)], capture_output=True,
                                      text=True, timeout=60)
                assert proc.returncode == 0, proc.stderr
                rows = [line[4:] for line in proc.stdout.splitlines() if line.startswith("row ")]
                text = re.search(r"^refused=-?\d+ (.*)$", proc.stdout, re.M).group(1)
                states = re.findall(r"^state=(\w+)$", proc.stdout, re.M)
                assert states[-1] == "detached"
                state_seqs.append(states[:-1])
            sessions.append(rows)
            texts.append(text)
    finally:
        owner.close()
    # The same state machine: the same states after the same calls ...
    assert all(seq == state_seqs[0] for seq in state_seqs), state_seqs
    assert state_seqs[0][:3] == ["needs_reset", "needs_reset", "waiting"]
    # ... the same refusal, each in its own language's call names ...
    shared = "refused; the pool has not been reset yet by this client (made or attached)"
    assert texts[0].startswith("recv() " + shared)
    assert "reset() or async_reset() (every env)" in texts[0]
    assert texts[1].startswith("shmatari_wait " + shared) and "shmatari_reset" in texts[1]
    # ... and the same results as one Python client doing all four sessions.
    with shmatari.make("Breakout", 2, **OPTIONS) as ref:
        want = [python_session(ref, [])[0] for _ in range(4)]
    assert sessions == want
    assert any("term=1" in r or "trunc=1" in r for r in sum(sessions, []))  # episodes ended
