"""batch_order="fixed": asynchronous batches in a documented order (issue 22).

Batch k since the last full reset holds envs k % G, k % G + G, ... (G =
num_envs / batch_size), whatever the workers' timing: stopped and resumed
workers (SIGSTOP / SIGCONT) must not change which envs share a batch, nor
their order, nor their trajectories."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shmatari
from shmatari import _core
from shmatari.errors import CallOrderError

pytestmark = pytest.mark.usefixtures("no_leaks")


def documented_group(k: int, num_envs: int, batch_size: int) -> list[int]:
    """The envs of batch k, as make()'s docstring and docs/layout.md say."""
    G = num_envs // batch_size
    return list(range(k % G, num_envs, G))


def _stop_some(pids, rng) -> threading.Timer | None:
    """SIGSTOPs a random subset of the workers and resumes them 0-20 ms later
    (a timer thread), so that groups finish in another order than posted."""
    stopped = [p for p in pids if rng.random() < 0.5]
    for p in stopped:
        os.kill(p, signal.SIGSTOP)
    if not stopped:
        return None
    timer = threading.Timer(float(rng.uniform(0, 0.02)),
                            lambda: [os.kill(p, signal.SIGCONT) for p in stopped])
    timer.start()
    return timer


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(groups=st.integers(2, 4), batch_size=st.integers(1, 3), workers=st.integers(1, 4),
       schedule=st.integers(0, 2**32 - 1))
def test_fixed_batches_come_in_the_documented_order_whatever_the_timing(
        groups, batch_size, workers, schedule):
    num_envs = groups * batch_size
    workers = min(workers, num_envs)
    rng = np.random.default_rng(schedule)
    with shmatari.make("null", num_envs, batch_size=batch_size, num_workers=workers, seed=3,
                       batch_order="fixed") as env:
        assert env.batch_order == "fixed"
        pids = env.worker_pids
        timer = _stop_some(pids, rng)
        _, info = env.reset()
        k = 0
        assert info["env_id"].tolist() == documented_group(k, num_envs, batch_size)
        # Pipelined as a double-buffered trainer: every other group is still
        # in flight (its reset) while this one is sent its actions.
        for _ in range(4 * groups):
            ids = info["env_id"]
            env.send(rng.integers(0, 4, ids.size), ids)
            if timer is not None:
                timer.join()
            timer = _stop_some(pids, rng)
            _, _, _, _, info = env.recv()
            k += 1
            assert info["env_id"].tolist() == documented_group(k, num_envs, batch_size)
        if timer is not None:
            timer.join()


def _trajectories(batch_order: str, num_workers: int, start_method: str | None = None):
    """Breakout, 6 envs in 3 groups, each env's own fixed actions: the env ids
    of every batch and a digest of each env's observations and rewards."""
    rng = np.random.default_rng(11)
    actions = rng.integers(0, 4, (6, 3 * 30))  # first ready may run one env ahead
    seen, digests = [], {e: [] for e in range(6)}
    with shmatari.make("Breakout", 6, batch_size=2, num_workers=num_workers, seed=5,
                       batch_order=batch_order, start_method=start_method,
                       preset="dqn", autoreset_mode="same_step") as env:
        steps = np.zeros(6, int)
        env.async_reset()
        for _ in range(3 * 30):
            obs, reward, _, _, info = env.recv()
            ids = info["env_id"]
            seen.append(ids.tolist())
            for row, e in enumerate(ids):
                digests[int(e)].append((obs[row].tobytes(), float(reward[row])))
            env.send(actions[ids, steps[ids]], ids)
            steps[ids] += 1
    return seen, digests


def test_fixed_order_replays_across_worker_counts_and_start_methods():
    ref_ids, ref = _trajectories("fixed", 1)
    assert ref_ids[:4] == [[0, 3], [1, 4], [2, 5], [0, 3]]
    for workers, method in ((3, None), (2, "spawn")):
        ids, digests = _trajectories("fixed", workers, method)
        assert ids == ref_ids
        assert digests == ref
    # first ready gives each env the same trajectory too (the env's own
    # actions): only which envs share a batch may differ
    _, first_ready = _trajectories("first_ready", 3)
    for e in range(6):
        n = min(len(first_ready[e]), len(ref[e]))
        assert first_ready[e][:n] == ref[e][:n]


def test_fixed_order_refusals_leave_the_pool_usable():
    with pytest.raises(ValueError, match="batch_size must divide num_envs"):
        shmatari.make("null", 6, batch_size=4, batch_order="fixed")
    with pytest.raises(ValueError, match="batch_order must be one of"):
        shmatari.make("null", 6, batch_size=3, batch_order="sorted")
    with pytest.raises(ValueError, match="batch_order"):
        _core.compute_layout(num_envs=6, num_workers=2, batch_size=4, ring_depth=3, stack_num=1,
                             img_height=4, img_width=4, channels=1, frame_skip=1,
                             batch_order=_core.BATCH_ORDERS["fixed"])
    with shmatari.make("null", 8, batch_size=4, num_workers=2, seed=0, batch_order="fixed") as env:
        _, info = env.reset()
        assert info["env_id"].tolist() == [0, 2, 4, 6]
        _, _, _, _, info = env.recv()
        assert info["env_id"].tolist() == [1, 3, 5, 7]
        # group 1 sent, group 0 (the next batch) not: recv would never return
        env.send(np.zeros(4, np.int64), [1, 3, 5, 7])
        with pytest.raises(CallOrderError, match=r"batch 2, is envs 0, 2, .*env 0 of it"):
            env.recv()
        env.send(np.zeros(3, np.int64), [0, 2, 4])
        with pytest.raises(CallOrderError, match="env 6 of it was not sent"):
            env.recv()
        env.send(np.zeros(1, np.int64), [6])
        assert env.recv()[4]["env_id"].tolist() == [0, 2, 4, 6]
        assert env.recv()[4]["env_id"].tolist() == [1, 3, 5, 7]
        # a full reset drops what is in flight and starts again at group 0
        env.send(np.zeros(4, np.int64), [1, 3, 5, 7])
        _, info = env.reset()
        assert info["env_id"].tolist() == [0, 2, 4, 6]
        assert env.recv()[4]["env_id"].tolist() == [1, 3, 5, 7]
        # a masked reset republishes the others: the order goes on
        env.send(np.zeros(4, np.int64), [1, 3, 5, 7])
        env.send(np.zeros(4, np.int64), [0, 2, 4, 6])
        assert env.recv()[4]["env_id"].tolist() == [0, 2, 4, 6]
        assert env.recv()[4]["env_id"].tolist() == [1, 3, 5, 7]
        mask = np.zeros(8, bool)
        mask[[2, 5]] = True
        _, info = env.reset(options={"reset_mask": mask})
        assert info["env_id"].tolist() == [0, 2, 4, 6]
        assert env.recv()[4]["env_id"].tolist() == [1, 3, 5, 7]


def test_a_replaced_worker_keeps_the_fixed_order():
    """restart_workers: a worker killed with commands in flight is replaced,
    and the batches still come as documented (recovery of an ordered pool)."""
    with shmatari.make("null", 8, batch_size=2, num_workers=2, seed=0, batch_order="fixed",
                       restart_workers=True) as env:
        _, info = env.reset()
        k, restarted = 0, []
        for step in range(24):
            ids = info["env_id"]
            assert ids.tolist() == documented_group(k, 8, 2)
            victim = env.worker_pids[0] if step == 9 else None
            if victim:  # stopped, so that its env of this group is in flight when it dies
                os.kill(victim, signal.SIGSTOP)
            env.send(np.zeros(ids.size, np.int64), ids)
            if victim:
                os.kill(victim, signal.SIGKILL)
            _, _, _, _, info = env.recv()
            restarted += info["env_id"][info["worker_restarted"]].tolist()
            k += 1
        assert info["env_id"].tolist() == documented_group(k, 8, 2)
        assert set(restarted) == {0, 1, 2, 3}  # worker 0's envs, each flagged once
