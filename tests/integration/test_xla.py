"""``xla()`` (shmatari.xla): jitted ``step`` inside ``jax.lax.scan`` on CPU,
the same rollout as the Python API (sync and async), and the EnvPool
adapter in CleanRL's ``ppo_atari_envpool_xla_jax*.py`` style, beside EnvPool."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import shmatari
import shmatari.envpool as shm_envpool

jax = pytest.importorskip("jax")
jnp = jax.numpy

pytestmark = pytest.mark.usefixtures("no_leaks")

GAME = "Breakout-v5"
OPTIONS = dict(seed=7, num_workers=2, noop_max=1, repeat_action_probability=0.0)


def _actions(num_envs: int, length: int, n_actions: int) -> np.ndarray:
    """int32 (num_envs, length): env e's k-th action, fixed in advance."""
    return np.random.default_rng(11).integers(0, n_actions, (num_envs, length), dtype=np.int32)


# -- a PPO-shaped loop, written in CleanRL's shape (not its file) ----------------
def _policy_init(key, obs_dim: int, n_actions: int) -> dict:
    k1, k2 = jax.random.split(key)
    return {"pi": jax.random.normal(k1, (obs_dim, n_actions)) * 0.01,
            "v": jax.random.normal(k2, (obs_dim,)) * 0.01}


def _features(obs):
    # (B, 4, 84, 84) uint8 -> (B, 4 * 21 * 21): 4x4 mean pooling, scaled to 0..1
    b = obs.shape[0]
    x = obs.astype(jnp.float32).reshape(b, 4, 21, 4, 21, 4).mean(axis=(3, 5)) / 255.0
    return x.reshape(b, -1)


def test_ppo_shaped_loop_jits_step_inside_scan():
    num_envs, num_steps, iterations = 4, 64, 4
    env = shmatari.make(GAME, num_envs=num_envs, **OPTIONS)
    try:
        obs, _ = env.reset()
        handle, recv, send, step = env.xla()
        n_actions = env.single_action_space.n
        params = _policy_init(jax.random.PRNGKey(0), 4 * 21 * 21, n_actions)

        def rollout_step(carry, _):
            params, handle, obs, key, ep_return, returns = carry
            key, sub = jax.random.split(key)
            feats = _features(obs)
            logits = feats @ params["pi"]
            action = jax.random.categorical(sub, logits)
            logp = jax.nn.log_softmax(logits)[jnp.arange(num_envs), action]
            handle, (next_obs, reward, term, trunc, info) = step(handle, action)
            done = term | trunc
            ep_return = ep_return + info["raw_reward"]
            returns = jnp.where(done, ep_return, returns)
            ep_return = jnp.where(done, 0.0, ep_return)
            out = (feats, action, logp, feats @ params["v"], reward, done, info["elapsed_step"])
            return (params, handle, next_obs, key, ep_return, returns), out

        def gae(rewards, values, dones, last_value, gamma=0.99, lam=0.95):
            def back(adv, xs):
                r, v, nv, d = xs
                delta = r + gamma * nv * (1.0 - d) - v
                adv = delta + gamma * lam * (1.0 - d) * adv
                return adv, adv
            next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
            _, adv = jax.lax.scan(back, jnp.zeros_like(last_value),
                                  (rewards, values, next_values, dones.astype(jnp.float32)),
                                  reverse=True)
            return adv

        def loss_fn(params, feats, actions, old_logp, adv, returns):
            logits = feats @ params["pi"]
            logp = jax.nn.log_softmax(logits)[jnp.arange(actions.shape[0]), actions]
            ratio = jnp.exp(logp - old_logp)
            pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 0.8, 1.2) * adv).mean()
            return pg + 0.5 * ((feats @ params["v"] - returns) ** 2).mean()

        @jax.jit
        def iteration(params, handle, obs, key, ep_return, returns):
            carry = (params, handle, obs, key, ep_return, returns)
            carry, (feats, actions, logp, values, rewards, dones, steps) = jax.lax.scan(
                rollout_step, carry, None, length=num_steps)
            params, handle, obs, key, ep_return, returns = carry
            adv = gae(rewards, values, dones, _features(obs) @ params["v"])
            flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
            loss, grads = jax.value_and_grad(loss_fn)(
                params, flat(feats), flat(actions), flat(logp), flat(adv), flat(adv + values))
            params = jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)
            return (params, handle, obs, key, ep_return, returns), (loss, rewards, steps)

        carry = (params, handle, jnp.asarray(obs), jax.random.PRNGKey(1),
                 jnp.zeros(num_envs), jnp.zeros(num_envs))
        losses, all_steps, total_reward = [], [], 0.0
        for _ in range(iterations):
            carry, (loss, rewards, steps) = iteration(*carry)
            losses.append(float(loss))
            all_steps.append(np.asarray(steps))
            total_reward += float(rewards.sum())
        assert np.isfinite(losses).all()
        assert np.array_equal(np.asarray(carry[1]), handle)  # threaded through, unchanged
        # Each env's elapsed_step counts every jitted step (1, 2, ... within an episode).
        steps = np.concatenate(all_steps)  # (iterations * num_steps, num_envs)
        assert steps.shape == (iterations * num_steps, num_envs)
        assert (np.diff(steps, axis=0)[steps[1:] != 0] == 1).all()
        assert total_reward > 0  # Breakout under a near-random policy scores in 256 steps
        # The Python API goes on from where the jitted steps left off.
        jax.block_until_ready(carry)
        elapsed = env.step(np.zeros(num_envs, np.int64))[4]["elapsed_step"]
        assert ((elapsed == steps[-1] + 1) | (elapsed == 0)).all()  # 0: an autoreset
        assert (elapsed == steps[-1] + 1).any()
    finally:
        env.close()


# -- the same rollout through xla() and through the Python API ---------------------
def _python_rollout(env, table, length):
    """Sync: per env, the observation, reward and flags of its first `length`
    steps after the reset, stepping env e with table[e, k] at its k-th step."""
    env.reset()
    seen = {e: [] for e in range(env.num_envs)}
    for k in range(length):
        obs, rew, term, trunc, _ = env.step(table[:, k])
        for e in range(env.num_envs):
            seen[e].append((obs[e].copy(), rew[e], term[e], trunc[e]))
    return seen


def _xla_rollout(env, table, length):
    obs, _ = env.reset()
    handle, recv, send, step = env.xla()
    table_j = jnp.asarray(table)

    def body(carry, _):
        handle, count = carry
        action = table_j[jnp.arange(env.num_envs), count]
        handle, (obs, rew, term, trunc, info) = step(handle, action)
        return (handle, count + 1), (obs, rew, term, trunc, info["env_id"])

    run = jax.jit(lambda h: jax.lax.scan(body, (h, jnp.zeros(env.num_envs, jnp.int32)), None,
                                         length=length))
    _, (obs, rew, term, trunc, ids) = jax.block_until_ready(run(handle))
    seen = {e: [] for e in range(env.num_envs)}
    for t in range(length):
        for i, e in enumerate(np.asarray(ids[t])):
            seen[int(e)].append((np.asarray(obs[t, i]), rew[t, i], term[t, i], trunc[t, i]))
    return seen


def _assert_same(a, b, length):
    for e in a:
        assert len(a[e]) >= length and len(b[e]) >= length, (e, len(a[e]), len(b[e]))
        for k in range(length):
            oa, ra, ta, ua = a[e][k]
            ob, rb, tb, ub = b[e][k]
            assert np.array_equal(oa, ob), f"env {e} step {k}: observations differ"
            assert (float(ra), bool(ta), bool(ua)) == (float(rb), bool(tb), bool(ub)), (e, k)


def test_xla_rollout_is_the_python_rollout_sync():
    num_envs, length = 4, 150
    table = None
    seen = []
    for how in ("python", "xla"):
        env = shmatari.make(GAME, num_envs=num_envs, **OPTIONS)
        try:
            if table is None:
                table = _actions(num_envs, length, env.single_action_space.n)
            roll = _python_rollout if how == "python" else _xla_rollout
            seen.append(roll(env, table, length))
        finally:
            env.close()
    _assert_same(*seen, length)
    rewards = sum(float(r) for e in seen[0] for _, r, _, _ in seen[0][e])
    assert rewards > 0  # the comparison covered scoring steps


def _async_rollout(env, table, batches, use_xla):
    """Async: each batch's envs step again with their next table action.
    Which envs come in a batch depends on timing; each env's own sequence
    does not (it depends on the seed, its index and its actions)."""
    B = env.batch_size
    seen = {e: [] for e in range(env.num_envs)}

    def record(obs, rew, term, trunc, ids):
        for i, e in enumerate(ids):
            seen[int(e)].append((np.asarray(obs[i]).copy(), rew[i], term[i], trunc[i]))

    env.async_reset()
    if not use_xla:
        count = np.zeros(env.num_envs, np.int64)
        obs, rew, term, trunc, info = env.recv()
        # Every env's sequence starts at its reset observation, whichever
        # batch brings it (the first batch holds only B of them).
        record(obs, rew, term, trunc, info["env_id"])
        for _ in range(batches):
            ids = info["env_id"]
            env.send(table[ids, count[ids]], ids)
            count[ids] += 1
            obs, rew, term, trunc, info = env.recv()
            for i, e in enumerate(ids := info["env_id"]):
                seen[int(e)].append((obs[i].copy(), rew[i], term[i], trunc[i]))
        return seen
    handle, recv, send, step = env.xla()
    table_j = jnp.asarray(table)

    def body(carry, _):
        handle, count, ids = carry
        handle = send(handle, table_j[ids, count[ids]], ids)
        count = count.at[ids].add(1)
        handle, (obs, rew, term, trunc, info) = recv(handle)
        ids = info["env_id"]
        return (handle, count, ids), (obs, rew, term, trunc, ids)

    @jax.jit
    def run(handle):
        handle, (obs, rew, term, trunc, info) = recv(handle)
        carry = (handle, jnp.zeros(env.num_envs, jnp.int32), info["env_id"])
        return (obs, rew, term, trunc, info["env_id"]), \
            jax.lax.scan(body, carry, None, length=batches)[1]

    first, (obs, rew, term, trunc, ids) = jax.block_until_ready(run(handle))
    record(*first)
    for t in range(batches):
        for i in range(B):
            seen[int(ids[t, i])].append((np.asarray(obs[t, i]), rew[t, i], term[t, i],
                                         trunc[t, i]))
    return seen


def test_xla_rollout_is_the_python_rollout_async():
    num_envs, batch_size, batches = 4, 2, 240
    seen = []
    for use_xla in (False, True):
        env = shmatari.make(GAME, num_envs=num_envs, batch_size=batch_size, **OPTIONS)
        try:
            table = _actions(num_envs, batches + 1, env.single_action_space.n)
            seen.append(_async_rollout(env, table, batches, use_xla))
        finally:
            env.close()
    # Every env has a result in at least every other batch window of the ring;
    # compare the prefix both runs reached for every env.
    length = min(len(s[e]) for s in seen for e in s)
    assert length >= 20, [len(s[e]) for s in seen for e in s]
    _assert_same(*seen, length)


# -- the EnvPool adapter, used as CleanRL's xla scripts use EnvPool ----------------
@pytest.mark.parametrize("backend", ["shmatari.envpool", "envpool"])
@pytest.mark.parametrize("batch_size", [0, 2])
def test_envpool_adapter_xla_cleanrl_style(backend, batch_size):
    """The shape of ``ppo_atari_envpool_xla_jax.py``'s rollout (episode
    statistics from ``info["reward"]`` / ``info["terminated"]``) and of the
    async scripts (``send(handle, action, info["env_id"])``), on either backend."""
    mod = shm_envpool if backend == "shmatari.envpool" else pytest.importorskip("envpool")
    num_envs = 4
    envs = mod.make(GAME, env_type="gymnasium", num_envs=num_envs, batch_size=batch_size,
                    episodic_life=True, reward_clip=True, seed=1)
    try:
        B = batch_size or num_envs
        n_actions = envs.single_action_space.n
        if batch_size:
            envs.async_reset()
        else:
            envs.reset()
        handle, recv, send, step_env = envs.xla()

        def step_and_record(carry, key):
            handle, returns, returned, env_id = carry
            action = jax.random.randint(key, (B,), 0, n_actions)
            if batch_size:
                handle, (obs, reward, term, trunc, info) = step_env(handle, action, env_id)
            else:
                handle, (obs, reward, term, trunc, info) = step_env(handle, action)
            env_id = info["env_id"]
            new = returns[env_id] + info["reward"]
            over = info["terminated"] + trunc
            returned = returned.at[env_id].set(jnp.where(over, new, returned[env_id]))
            returns = returns.at[env_id].set(new * (1 - over))
            return (handle, returns, returned, env_id), (obs.shape[0], reward.sum())

        @jax.jit
        def rollout(handle, keys):
            env_id = jnp.arange(B, dtype=jnp.int32)
            if batch_size:
                handle, (_, _, _, _, info) = recv(handle)
                env_id = info["env_id"]
            carry = (handle, jnp.zeros(num_envs), jnp.zeros(num_envs), env_id)
            return jax.lax.scan(step_and_record, carry, keys)

        (handle2, returns, returned, _), (sizes, rewards) = jax.block_until_ready(
            # 1,000 batches: EnvPool's async mode chooses which envs step by
            # timing, and 300 batches of 2 (about 150 agent steps an env)
            # scored nothing at all in one run of 2026-12-02
            rollout(handle, jax.random.split(jax.random.PRNGKey(0), 1000)))
        assert (np.asarray(sizes) == B).all()
        assert float(rewards.sum()) > 0 and float(np.asarray(returns).sum()) >= 0
        assert np.asarray(handle2).shape == np.asarray(handle).shape
    finally:
        envs.close()


@pytest.mark.parametrize("backend", ["shmatari.envpool", "envpool"])
def test_envpool_adapter_xla_sync_step_rows_come_in_env_id_order(backend):
    """A synchronous pool's jitted step(handle, action, env_id) returns the
    rows in env_id's order, as its Python step does and as EnvPool does."""
    mod = shm_envpool if backend == "shmatari.envpool" else pytest.importorskip("envpool")
    envs = mod.make(GAME, env_type="gymnasium", num_envs=4, seed=1)
    try:
        envs.reset()
        handle, _, _, step_env = envs.xla()
        ids = jnp.array([2, 0, 3, 1], jnp.int32)
        step = jax.jit(step_env)
        for _ in range(3):
            handle, (obs, _, _, _, info) = step(handle, jnp.zeros(4, jnp.int32), ids)
            assert np.asarray(info["env_id"]).tolist() == [2, 0, 3, 1]
            assert obs.shape[0] == 4
        # EnvPool's dict actions, in the jitted step too
        handle, (_, _, _, _, info) = step(handle, {"action": jnp.zeros(4, jnp.int32),
                                                   "env_id": ids})
        assert np.asarray(info["env_id"]).tolist() == [2, 0, 3, 1]
    finally:
        envs.close()


# -- refusals: clear errors, the pool unchanged ---------------------------------------
def test_xla_refusals_leave_the_pool_usable():
    env = shmatari.make("null", num_envs=4, batch_size=2, num_workers=2, seed=0)
    other = shmatari.make("null", num_envs=4, num_workers=1, seed=0)
    try:
        env.async_reset()
        handle, recv, send, step = env.xla()
        other_handle = other.xla()[0]
        with pytest.raises(ValueError, match="pass env_id"):
            jax.jit(step)(handle, jnp.zeros(2, jnp.int32))  # batch-sized, no env_id
        recv_j = jax.jit(recv)
        with pytest.raises(jax.errors.JaxRuntimeError, match="another pool"):
            jax.block_until_ready(recv_j(other_handle))
        handle, (_, _, _, _, info) = jax.block_until_ready(recv_j(handle))
        ids = np.asarray(info["env_id"])
        send_j = jax.jit(send)
        with pytest.raises(jax.errors.JaxRuntimeError, match="out of range"):
            jax.block_until_ready(send_j(handle, jnp.array([0, 99]), ids))
        # The C client refused before posting: the same envs can be sent to.
        handle = jax.block_until_ready(send_j(handle, jnp.zeros(2, jnp.int32), ids))
        # Python and jitted calls share one client: Python collects the batch.
        assert env.recv()[0].shape == (2,) + env.single_observation_space.shape
    finally:
        env.close()
        other.close()
    with pytest.raises(jax.errors.JaxRuntimeError, match="the pool is closed"):
        jax.block_until_ready(recv_j(handle))


def test_a_program_compiled_ahead_of_time_outlives_its_pool_safely():
    """An executable from jax.jit(f).lower(...).compile() holds no reference
    to the Python functions that kept the pool's client alive: with the
    client's address baked in, it stepped a new pool whose client took that
    address, with no error, or read freed memory (an attacker's pass,
    2026-12-06). The handlers find the client by a serial never reused,
    which close() takes out of their table: the old program fails as on a
    closed pool, and the new pool is untouched."""
    import gc

    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    env.reset()
    handle, recv, send, step = env.xla()
    compiled = jax.jit(step).lower(handle, jnp.zeros(2, jnp.int32)).compile()
    handle, (obs, *_) = jax.block_until_ready(compiled(handle, jnp.zeros(2, jnp.int32)))
    env.close()
    del env, recv, send, step
    gc.collect()
    new = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    try:
        new.reset()
        new_handle = new.xla()[0]
        assert bytes(np.asarray(new_handle)) != bytes(np.asarray(handle))
        with pytest.raises(jax.errors.JaxRuntimeError, match="the pool is closed"):
            jax.block_until_ready(compiled(handle, jnp.zeros(2, jnp.int32)))
        # the old program stepped nothing of the new pool: its envs are at 0
        _, _, _, _, info = new.step(np.zeros(2, np.int64))
        assert info["elapsed_step"].tolist() == [1, 1]
    finally:
        new.close()


def test_every_xla_of_a_pool_returns_one_handle_and_restart_workers_warns():
    """Each xla() call registered its own serial: two calls' handles
    differed, and one's handle passed to the other's functions was refused
    as "another pool's" (EnvPool returns one handle: a client-code pass,
    2026-12-06). And xla() on a restart_workers pool now says that a dead
    worker is not replaced inside jitted code."""
    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    try:
        env.reset()
        h1, recv1, send1, step1 = env.xla()
        h2, recv2, send2, step2 = env.xla()
        assert bytes(np.asarray(h1)) == bytes(np.asarray(h2))
        h, (*_, info) = jax.block_until_ready(jax.jit(step2)(h1, jnp.zeros(2, jnp.int32)))
        h, (*_, info) = jax.block_until_ready(jax.jit(step1)(h, jnp.zeros(2, jnp.int32)))
        assert np.asarray(info["elapsed_step"]).tolist() == [2, 2]
    finally:
        env.close()
    with shmatari.make("null", num_envs=2, num_workers=1, seed=0, restart_workers=True) as env:
        with pytest.warns(UserWarning, match="restart_workers=True: inside jitted code a "
                                             "dead worker is not replaced"):
            env.xla()


_FIRST_HANDLE = r"""
import numpy as np, shmatari
with shmatari.make("null", num_envs=2, num_workers=1, seed=0) as env:
    env.reset()
    a = bytes(np.asarray(env.xla()[0])).hex()
with shmatari.make("null", num_envs=2, num_workers=1, seed=0) as env:
    env.reset()
    print(a, bytes(np.asarray(env.xla()[0])).hex())
"""


def test_xla_serials_differ_between_processes():
    """Serials were counted 1, 2, ... in every process: a program exported
    (jax.export) by one process and loaded by another drove whichever pool
    of that process held the same serial (a reviewer's pass, 2026-12-06).
    Two fresh processes' first pools now get different handles, and one
    process's two pools too."""
    import subprocess
    import sys

    runs = [subprocess.run([sys.executable, "-c", _FIRST_HANDLE], capture_output=True,
                           text=True, timeout=120) for _ in range(2)]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr[-2000:]
    (a1, b1), (a2, b2) = (proc.stdout.split() for proc in runs)
    assert len({a1, b1, a2, b2}) == 4, (a1, b1, a2, b2)
    # never 0, and below 2**63 (jax lowers the attribute through int64)
    assert all(0 < int.from_bytes(bytes.fromhex(h), sys.byteorder) < 2**63
               for h in (a1, b1, a2, b2)), (a1, b1, a2, b2)


_FORKED_SERIALS = r"""
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
lib.shmatari_xla_register.restype = ctypes.c_uint64
lib.shmatari_xla_register.argtypes = [ctypes.c_void_p]
lib.shmatari_xla_unregister.restype = ctypes.c_int
lib.shmatari_xla_unregister.argtypes = [ctypes.c_uint64, ctypes.c_int64]
first = lib.shmatari_xla_register(1)  # the key drawn in this process
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the child: its next serial, then out at once
    os.write(write, str(lib.shmatari_xla_register(1)).encode())
    os._exit(0)
os.close(write)
os.waitpid(pid, 0)
child = int(os.read(read, 64))
parent = lib.shmatari_xla_register(1)
assert all(lib.shmatari_xla_unregister(s, 0) == 1 for s in (first, parent))
print(first, parent, child)
"""


def test_xla_serials_of_a_forked_child_are_its_own():
    """The random key that maps the count to serials was drawn once per
    library load, so a child forked after it went on with the parent's next
    serials (a reviewer's pass, 2026-12-06). A child draws its own key. (In
    a process without jax: forking a multithreaded one risks a deadlock.)"""
    import subprocess
    import sys

    from shmatari import xla as shxla

    proc = subprocess.run([sys.executable, "-c", _FORKED_SERIALS, str(shxla.build())],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, parent, child = map(int, proc.stdout.split())
    assert child not in (first, parent) and 0 < child < 2**63


def test_xla_refuses_same_step_pools_with_the_reason():
    env = shmatari.make("null", num_envs=2, num_workers=1, autoreset_mode="same_step")
    try:
        with pytest.raises(NotImplementedError, match="final_obs"):
            env.xla()
    finally:
        env.close()


def test_xla_timeout_names_only_the_envs_not_answered():
    """With one of two workers stopped, the timeout names that worker's envs
    alone (shmatari_unanswered_text, as Python's recv()): it named every env
    of the batch, results in or not."""
    import os
    import signal

    env = shmatari.make("null", num_envs=4, num_workers=2, seed=0)
    try:
        env.reset()
        handle, recv, send, step = env.xla(timeout=0.3)
        pid = env.worker_pids[1]
        os.kill(pid, signal.SIGSTOP)
        try:
            handle = jax.block_until_ready(jax.jit(send)(handle, jnp.zeros(4, jnp.int32)))
            with pytest.raises(jax.errors.JaxRuntimeError, match="DEADLINE_EXCEEDED") as e:
                jax.block_until_ready(jax.jit(recv)(handle))
        finally:
            os.kill(pid, signal.SIGCONT)
        text = str(e.value)
        assert f"every worker alive: worker 1 (pid {pid}) has not answered envs 2, 3 (alive" in text
        assert "worker 0" not in text
    finally:
        env.close()


def test_xla_wait_for_a_batch_no_worker_will_fill_ends_in_our_words():
    """A jitted recv() waiting for a batch that another process made
    unfillable (one write to the header's alloc_pos) ends within a slice,
    whatever its timeout, as Python's recv() does (shmatari_check_stall);
    its error said "not a shmatari segment" about a segment that is one."""
    from shmatari import _core, shm

    env = shmatari.make("null", num_envs=4, num_workers=2, batch_size=2, seed=0)
    try:
        env.async_reset()
        env.recv(timeout=30)
        env.recv(timeout=30)  # every env idle: nothing in flight
        other = shm.attach(env.segment_name)  # as any process of this user may
        try:
            word = np.ndarray((1,), np.uint64, other.buf,
                              _core.struct_layout()["shmatari_header"]["alloc_pos"])
            word[0] += 1
            del word
        finally:
            other.close()
        handle, recv, send, step = env.xla(timeout=None)
        handle = jax.block_until_ready(jax.jit(send)(handle, jnp.zeros(2, jnp.int32),
                                                     jnp.array([0, 1], jnp.int32)))
        handle = jax.block_until_ready(jax.jit(send)(handle, jnp.zeros(2, jnp.int32),
                                                     jnp.array([2, 3], jnp.int32)))
        with pytest.raises(jax.errors.JaxRuntimeError) as e:
            jax.block_until_ready(jax.jit(recv)(handle))
        text = str(e.value)
        assert "shmatari xla: the env pool cannot go on: batch " in text, text
        assert "every env with a command in flight (4) has answered" in text, text
        assert "not a shmatari segment" not in text
    finally:
        env.close()


def test_xla_timeout_with_a_stopped_worker_loses_nothing():
    """A worker that is alive but stopped: recv fails with DEADLINE_EXCEEDED
    after `timeout`, the commands stay in flight, and once the worker goes
    on, the next recv returns their results."""
    import os
    import signal

    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    try:
        env.reset()
        handle, recv, send, step = env.xla(timeout=0.3)
        send_j, recv_j = jax.jit(send), jax.jit(recv)
        (pid,) = env.worker_pids
        os.kill(pid, signal.SIGSTOP)
        try:
            handle = jax.block_until_ready(send_j(handle, jnp.zeros(2, jnp.int32)))
            with pytest.raises(jax.errors.JaxRuntimeError, match="DEADLINE_EXCEEDED") as e:
                jax.block_until_ready(recv_j(handle))
            # the timeout given, not the wait's slice, and who has not answered
            assert "no batch of 2 result(s) within 0.3 s (xla()'s timeout)" in str(e.value)
            assert f"worker 0 (pid {pid}) has not answered envs 0, 1" in str(e.value)
        finally:
            os.kill(pid, signal.SIGCONT)
        handle, (obs, rew, term, trunc, info) = jax.block_until_ready(recv_j(handle))
        assert np.asarray(info["env_id"]).tolist() == [0, 1]
        assert np.asarray(info["elapsed_step"]).tolist() == [1, 1]
    finally:
        env.close()


def _assert_ctrl_c_ends_the_wait(recv_j, handle, timer) -> None:
    """A jitted recv on a stopped worker raises KeyboardInterrupt within
    3 s of its start, once ``timer`` (started, sending SIGINT at 0.3 s)
    fires, and returns nothing."""
    import time

    t0 = time.monotonic()
    returned = False
    with pytest.raises(KeyboardInterrupt):
        jax.block_until_ready(recv_j(handle))
        returned = True
        time.sleep(5)  # where a late KeyboardInterrupt would land instead
    timer.join()
    assert not returned and time.monotonic() - t0 < 3.0


def test_xla_wait_runs_python_signal_handlers_and_ctrl_c_ends_it():
    """A jitted recv that waits (timeout None: no limit) on a stopped worker.
    A signal whose Python handler returns (SIGUSR1 here) runs while it waits
    and the wait goes on; Ctrl-C (SIGINT, KeyboardInterrupt) ends it at once,
    with nothing taken, and the next recv returns the batch once the worker
    goes on. The wait ignored Ctrl-C until a batch came, which a stopped
    worker never sends (an attacker's pass), as Python's recv() never did."""
    import os
    import signal
    import threading
    import time

    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    seen = []
    old_usr1 = signal.signal(signal.SIGUSR1, lambda *_: seen.append(time.monotonic()))
    try:
        env.reset()
        handle, recv, send, step = env.xla()
        send_j, recv_j = jax.jit(send), jax.jit(recv)
        # compiled before the clock starts: a compile under load that outlasts
        # the SIGCONT below would run the handlers after the wait, not in it
        handle = jax.block_until_ready(send_j(handle, jnp.zeros(2, jnp.int32)))
        handle, _ = jax.block_until_ready(recv_j(handle))
        (pid,) = env.worker_pids
        os.kill(pid, signal.SIGSTOP)
        me = os.getpid()
        sent = {}

        def kill(target, sig):
            sent[sig] = time.monotonic()
            os.kill(target, sig)

        def later(delay, target, sig):
            timer = threading.Timer(delay, kill, (target, sig))
            timer.start()
            return timer

        try:
            handle = jax.block_until_ready(send_j(handle, jnp.zeros(2, jnp.int32)))
            # a handler that returns: the wait goes on past it, and ends with the batch
            timers = [later(0.3, me, signal.SIGUSR1), later(0.6, me, signal.SIGUSR1),
                      later(1.2, pid, signal.SIGCONT)]
            t0 = time.monotonic()
            handle, (obs, rew, term, trunc, info) = jax.block_until_ready(recv_j(handle))
            for timer in timers:
                timer.join()
            # both ran while it waited (before the worker went on), and the
            # wait went on to the batch
            assert len(seen) == 2 and seen[-1] < sent[signal.SIGCONT], (seen, sent)
            assert np.asarray(info["elapsed_step"]).tolist() == [2, 2]
            # Ctrl-C: KeyboardInterrupt at once, the batch left in flight
            # (the worker stopped before the send: the null env would
            # answer it before a SIGSTOP sent after)
            os.kill(pid, signal.SIGSTOP)
            handle = jax.block_until_ready(send_j(handle, jnp.zeros(2, jnp.int32)))
            _assert_ctrl_c_ends_the_wait(recv_j, handle, later(0.3, me, signal.SIGINT))
        finally:
            os.kill(pid, signal.SIGCONT)
        handle, (obs, rew, term, trunc, info) = jax.block_until_ready(recv_j(handle))
        assert np.asarray(info["env_id"]).tolist() == [0, 1]
        assert np.asarray(info["elapsed_step"]).tolist() == [3, 3]
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)
        env.close()


def test_xla_wait_ends_on_a_ctrl_c_handed_to_another_thread():
    """A SIGINT that the kernel hands to another thread (jax runs many)
    never interrupts the jitted wait's sleep: it only sets Python's flag,
    which the handler looked at only after an interrupted sleep, so the
    wait went on until a batch came, for good from a stopped worker (a
    signal pass; the same bug as attach()'s). The flag is looked at after
    every slice now. ``pthread_kill`` hands it to another thread; a timer
    resumes the worker after 10 s, where the old code returned."""
    import os
    import signal
    import threading

    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    try:
        env.reset()
        handle, recv, send, step = env.xla()
        send_j, recv_j = jax.jit(send), jax.jit(recv)
        handle = jax.block_until_ready(send_j(handle, jnp.zeros(2, jnp.int32)))
        handle, _ = jax.block_until_ready(recv_j(handle))  # compiled before the clock
        (pid,) = env.worker_pids
        os.kill(pid, signal.SIGSTOP)
        valve = threading.Timer(10.0, os.kill, (pid, signal.SIGCONT))
        try:
            handle = jax.block_until_ready(send_j(handle, jnp.zeros(2, jnp.int32)))
            ctrl_c = threading.Timer(0.3, lambda: signal.pthread_kill(threading.get_ident(),
                                                                      signal.SIGINT))
            valve.start()
            ctrl_c.start()
            _assert_ctrl_c_ends_the_wait(recv_j, handle, ctrl_c)
        finally:
            valve.cancel()
            os.kill(pid, signal.SIGCONT)
        handle, (obs, rew, term, trunc, info) = jax.block_until_ready(recv_j(handle))
        assert np.asarray(info["elapsed_step"]).tolist() == [2, 2]  # nothing was taken
    finally:
        env.close()


def test_xla_wide_actions_and_env_ids_saturate_and_are_refused():
    """With jax_enable_x64 an int64 action of 2**32 + 3 (or env id 2**32)
    is refused as out of range, as the Python pool refuses it, not narrowed
    to action 3 (env 0) and stepped."""
    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    try:
        env.reset()
        with jax.enable_x64(True):
            handle, recv, send, step = env.xla()
            for action, ids in (([2**32 + 3, 0], None), ([0, 0], [2**32 + 1, 2**32]),
                                ([-2**32, 0], None)):
                ids = None if ids is None else jnp.array(ids, jnp.int64)
                with pytest.raises(jax.errors.JaxRuntimeError, match="out of range"):
                    jax.block_until_ready(send(handle, jnp.array(action, jnp.int64), ids))
            # nothing was posted: the pool goes on with valid actions
            handle, (obs, rew, term, trunc, info) = jax.block_until_ready(
                step(handle, jnp.array([1, 0], jnp.int64)))
        assert np.asarray(info["elapsed_step"]).tolist() == [1, 1]
    finally:
        env.close()


@pytest.mark.parametrize("timeout", [float("inf"), 1e10])
def test_xla_timeout_past_int64_nanoseconds_waits_without_limit(timeout):
    # As the Python pool's recv(timeout=inf): no limit (it was OverflowError).
    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    try:
        env.reset()
        handle, recv, send, step = env.xla(timeout=timeout)
        handle, (obs, *_, info) = jax.block_until_ready(
            jax.jit(step)(handle, jnp.zeros(2, jnp.int32)))
        assert np.asarray(info["elapsed_step"]).tolist() == [1, 1]
    finally:
        env.close()


def test_xla_handlers_are_not_loaded_from_a_cache_others_can_write(tmp_path, monkeypatch):
    """The handler library is loaded into the trainer: one found in a cache
    directory another user owns or can write (a shared SHMATARI_XLA_CACHE)
    is refused before it is loaded, not run (an attacker's pass planted one
    whose constructor ran as the trainer's user)."""
    import os
    import shutil
    import stat
    import subprocess

    from shmatari import xla

    monkeypatch.setenv("SHMATARI_XLA_CACHE", str(tmp_path / "own"))
    built = xla.build()
    assert built.parent.parent == tmp_path / "own"
    key = built.parent.name

    # this user's own cache made under a umask of 002 (earlier versions):
    # the directories are made private, a group-writable library rebuilt
    built.chmod(0o664)
    built.parent.chmod(0o775)
    rebuilt = xla.build()
    assert rebuilt == built and stat.S_IMODE(built.parent.stat().st_mode) == 0o755
    assert not stat.S_IMODE(rebuilt.stat().st_mode) & 0o022

    shared = tmp_path / "shared"  # like /tmp: sticky and writable by all
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("SHMATARI_XLA_CACHE", str(shared))
    with pytest.raises(xla.XlaBuildError, match="writable by others"):
        xla.build()

    if os.geteuid() != 0 or shutil.which("cc") is None:
        return  # (giving a directory away needs root)
    marker = tmp_path / "ran"
    src = tmp_path / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void f(void) {'
                   f' FILE *o = fopen("{marker}", "w"); if (o) fclose(o); }}\n')
    planted = tmp_path / "planted" / key
    planted.mkdir(parents=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(planted / built.name), str(src)],
                   check=True)
    for p in (planted / built.name, planted, planted.parent):
        os.chown(p, 65534, 65534)
    monkeypatch.setenv("SHMATARI_XLA_CACHE", str(planted.parent))
    with pytest.raises(xla.XlaBuildError, match="belongs to uid 65534"):
        xla.build()
    assert not marker.exists()


def test_xla_handlers_loaded_are_the_file_that_was_checked(tmp_path, monkeypatch):
    """The handler library is judged and loaded through one descriptor
    chain (the cache directory, its key's directory, the file, each opened
    with O_NOFOLLOW): a path renamed between the check and the load is
    refused, not loaded. Before, the path was checked with ``lstat`` and
    then given to ``dlopen``, which loaded whatever was there by then."""
    import os
    import shutil
    import subprocess

    from shmatari import xla

    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the planted library")
    cache = tmp_path / "cache"
    monkeypatch.setenv("SHMATARI_XLA_CACHE", str(cache))
    built = xla.build()
    marker = tmp_path / "ran"
    src = tmp_path / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void f(void) {'
                   f' FILE *o = fopen("{marker}", "w"); if (o) fclose(o); }}\n')
    evil = tmp_path / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(evil), str(src)], check=True)
    real_build = xla.build

    def load_after(swap):
        def build_then_swap(force=False):
            path = real_build(force)
            swap(path)  # what another process does between the check and the load
            return path
        monkeypatch.setattr(xla, "build", build_then_swap)
        monkeypatch.setattr(xla, "_loaded", {})
        with pytest.raises(xla.XlaBuildError) as err:
            xla._load(0)
        assert not marker.exists(), "the planted library's constructor ran"
        return str(err.value)

    def to_link(path):  # this user's process swaps the file for a link
        os.replace(path, tmp_path / "kept.so")
        os.symlink(evil, path)

    assert "symbolic link" in load_after(to_link)
    os.unlink(built)
    os.replace(tmp_path / "kept.so", built)

    if os.geteuid() != 0:
        return  # (giving a directory away needs root)

    def to_others_dir(path):  # whoever can write the cache's parent swaps it
        os.replace(cache, tmp_path / "kept")
        (cache / path.parent.name).mkdir(parents=True)
        shutil.copy(evil, path)
        for p in (path, path.parent, cache):
            os.chown(p, 65534, 65534)

    assert "belongs to uid 65534" in load_after(to_others_dir)


#: A pool and a jitted 5000-step scan over it (``roll``), for the scripts below.
_SCAN_POOL = r"""
env = shmatari.make("Breakout", num_envs=4, num_workers=2, seed=0)
env.reset()
handle, recv, send, step = env.xla()

def body(handle, key):
    handle, (obs, reward, term, trunc, info) = step(handle, jax.random.randint(key, (4,), 0, 4))
    return handle, reward

roll = jax.jit(lambda h, k: jax.lax.scan(body, h, jax.random.split(k, 5000)))
"""

_CLOSE_IN_FLIGHT = r"""
import os, signal, sys, time, jax, shmatari
""" + _SCAN_POOL + r"""
out = roll(handle, jax.random.PRNGKey(0))  # dispatched: runs while Python goes on
time.sleep(float(sys.argv[1]))
if sys.argv[2] == "interrupt":  # a Ctrl-C while the scan runs: the pool's exit finalizer closes it
    print(env.segment_name, flush=True)
    raise KeyboardInterrupt
if sys.argv[2] in ("stop", "nothread"):  # a worker stopped under the scan: no batch comes
    os.kill(env.worker_pids[1], signal.SIGSTOP)
if sys.argv[2] == "nothread":  # no thread can start (Python 3.12's exit handlers)
    import threading
    start = threading.Thread.start

    def refuse(self):
        if self.name == "shmatari-close-watch":
            raise RuntimeError("can't create new thread at interpreter shutdown")
        start(self)

    threading.Thread.start = refuse
if sys.argv[2] == "alarm":  # a signal handler raises while close() waits for the scan
    def alarm(signum, frame):
        raise TimeoutError("the harness's time limit")

    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
t0 = time.monotonic()
try:
    env.close()                             # no block_until_ready first
except TimeoutError as exc:
    print("close raised", exc, flush=True)
print("closed in %.2f s" % (time.monotonic() - t0), flush=True)
try:
    jax.block_until_ready(out)
    print("finished", flush=True)
except jax.errors.JaxRuntimeError as exc:
    print("failed:", exc, flush=True)
"""


@pytest.mark.parametrize("delay", [0.5, 1.5])
def test_xla_close_while_a_jitted_scan_runs_waits_for_it_and_does_not_crash(tmp_path, delay):
    """close() right after a jitted lax.scan was dispatched (jax runs it
    asynchronously), with no block_until_ready first, as a script that ends
    its loop and closes does. close() zeroed the client struct that the XLA
    handler was inside (SIGFPE: the whole process died, rc -8). It waits
    for the jitted calls its thread dispatched, which run to their end as if
    the close() came after them (JAX's program order, and EnvPool's: until
    2026-12-07 it marked the pool closing first and the scan failed with
    "the pool is closing", a JAX user's pass); nothing leaks."""
    import subprocess
    import sys

    script = tmp_path / "close_in_flight.py"
    script.write_text(_CLOSE_IN_FLIGHT)
    proc = subprocess.run([sys.executable, str(script), str(delay), "close"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "closed in" in proc.stdout, proc.stdout
    assert "finished" in proc.stdout and "failed" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("how", ["stop", "nothread"])
def test_xla_close_under_a_jitted_scan_a_stopped_worker_holds_is_bounded(tmp_path, how):
    """The wait for the scan lasts while the pool makes progress: with a
    worker stopped under it (no batch for OTHER_THREAD_TIMEOUT, 2 s), close()
    marks the pool closing, the scan fails in the pool's words, and close()
    ends within a few seconds. Where the watcher cannot start (Python
    3.12.1 refuses a new thread in an atexit callback, where the pool's exit
    finalizer runs: every attempt of that shutdown failed, and with Ctrl-C
    the process hung at exit; a review) the pool is marked closing first,
    as before 2026-12-07."""
    import subprocess
    import sys

    script = tmp_path / "close_in_flight.py"
    script.write_text(_CLOSE_IN_FLIGHT)
    proc = subprocess.run([sys.executable, str(script), "0.5", how],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    seconds = float(proc.stdout.split("closed in ")[1].split()[0])
    assert (2.0 if how == "stop" else 0.0) <= seconds < 15.0, proc.stdout
    assert "failed:" in proc.stdout and "closing" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_xla_close_waiting_for_a_scan_raises_a_signal_handlers_exception(tmp_path):
    """A SIGALRM handler raises while close() waits for the thread's jitted
    scan (Python runs it once the wait returns, the scan done): close()
    ends the pool and then raises the handler's exception, as every
    shutdown does; the wait caught it with the calls' failures and it was
    lost (a review, 2026-12-07)."""
    import subprocess
    import sys

    script = tmp_path / "close_in_flight.py"
    script.write_text(_CLOSE_IN_FLIGHT)
    proc = subprocess.run([sys.executable, str(script), "0.2", "alarm"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "close raised the harness's time limit" in proc.stdout, proc.stdout
    assert "finished" in proc.stdout, proc.stdout
    # The failed calls' error is the results' alone: jax's exit handlers,
    # which wait on its runtime tokens again, printed it twice more
    # ("Exception ignored in atexit callback") until 2026-12-05.
    assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("delay", [0.5, 1.5])
def test_a_ctrl_c_while_a_jitted_scan_runs_exits_without_jaxs_exit_tracebacks(tmp_path, delay):
    """A Ctrl-C while a jitted scan runs, as CleanRL's
    ppo_atari_envpool_xla_jax_scan.py gets it (the KeyboardInterrupt comes
    in jax.device_get while the scan goes on): the pool's exit finalizer
    closes the pool (once the scan has ended, since 2026-12-07; before, under
    the scan, whose calls failed). Until 2026-12-05
    jax's own exit handlers (clean_up, wait_for_tokens) then waited on the
    failed calls' runtime tokens and each printed "Exception ignored in
    atexit callback" with a JaxRuntimeError naming this process as the
    pool's owner closing it: two tracebacks after the KeyboardInterrupt's."""
    import subprocess
    import sys

    script = tmp_path / "close_in_flight.py"
    script.write_text(_CLOSE_IN_FLIGHT)
    proc = subprocess.run([sys.executable, str(script), str(delay), "interrupt"],
                          capture_output=True, text=True, timeout=120)
    # Python ends an uncaught KeyboardInterrupt by SIGINT (-2)
    assert proc.returncode in (-signal.SIGINT, 130), (proc.returncode, proc.stderr[-2000:])
    assert "KeyboardInterrupt" in proc.stderr, proc.stderr[-2000:]
    assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    assert "JaxRuntimeError" not in proc.stderr, proc.stderr[-3000:]
    name = proc.stdout.split()[0]
    assert not os.path.exists(f"/dev/shm/{name}")


_CLOSE_FROM_ANOTHER_THREAD = r"""
import threading, time, jax, shmatari
""" + _SCAN_POOL + r"""
result = []

def train():  # another thread's jitted call: the closing thread's barrier is not its
    try:
        jax.block_until_ready(roll(handle, jax.random.PRNGKey(0)))
        result.append("finished")
    except jax.errors.JaxRuntimeError as exc:
        result.append("failed: %s" % exc)

t = threading.Thread(target=train)
t.start()
time.sleep(1.0)
t0 = time.monotonic()
env.close()
print("closed in %.2f s" % (time.monotonic() - t0), flush=True)
t.join(60)
print(result[0] if result else "no result", flush=True)
"""


def test_xla_close_from_another_thread_while_its_jitted_call_runs_does_not_crash(tmp_path):
    """close() on one thread while a jitted scan another thread dispatched
    is inside a handler: the closing thread's jax.effects_barrier does not
    wait for the other thread's calls, and the handlers' table only kept
    calls that started after the close out: the client was zeroed under
    the running handler (a reviewer's pass, 2026-12-06). Now the table
    counts the handlers inside each pool and close() waits for them to
    leave (the pool's CLOSING ends their waits) before releasing the
    client: the scan fails with the pool's words and the process lives."""
    import subprocess
    import sys

    script = tmp_path / "close_from_thread.py"
    script.write_text(_CLOSE_FROM_ANOTHER_THREAD)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    seconds = float(proc.stdout.split("closed in ")[1].split()[0])
    assert seconds < 5.0, proc.stdout
    assert "failed:" in proc.stdout and "clos" in proc.stdout, proc.stdout


_CLOSE_IN_A_SIGNAL_HANDLER = r"""
import os, signal, time, numpy as np, jax, shmatari
from shmatari import supervisor
env = shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0)
env.reset()
handle, recv, send, step = env.xla()
jstep = jax.jit(step)
handle, _ = jax.block_until_ready(jstep(handle, np.zeros(2, np.int32)))
pid = env.worker_pids[0]
took = []

def on_alarm(signum, frame):  # runs inside the handler's wait (PyErr_CheckSignals)
    os.kill(pid, signal.SIGCONT)
    t0 = time.monotonic()
    env.close()
    took.append(time.monotonic() - t0)

signal.signal(signal.SIGALRM, on_alarm)
os.kill(pid, signal.SIGSTOP)
signal.setitimer(signal.ITIMER_REAL, 0.5)
try:
    jax.block_until_ready(jstep(handle, np.zeros(2, np.int32)))
    print("step returned")
except jax.errors.JaxRuntimeError as exc:
    print("step failed:", str(exc).splitlines()[0])
kept = len(supervisor._KEPT_FOR_JITTED_CALLS)
with shmatari.make("null", num_envs=1, num_workers=1) as other:  # releases what was kept
    pass
print("close took %.2f kept %d then %d" % (took[0], kept, len(supervisor._KEPT_FOR_JITTED_CALLS)))
"""


def test_xla_close_in_a_signal_handler_inside_the_wait_does_not_wait_for_itself(tmp_path):
    """A close() that a Python signal handler runs inside a jitted call's
    wait (the handler runs signal handlers there) waited the whole bound
    for the lease its own thread held (a reviewer's pass, 2026-12-06). It
    returns at once now, keeps the client and mapping while the handler is
    inside, and the next pool made releases them."""
    import subprocess
    import sys

    script = tmp_path / "close_in_handler.py"
    script.write_text(_CLOSE_IN_A_SIGNAL_HANDLER)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-2000:])
    assert "step failed:" in proc.stdout and "clos" in proc.stdout, proc.stdout
    took = float(proc.stdout.split("close took ")[1].split()[0])
    assert took < 1.5, proc.stdout  # the bound is 2 s; the workers' stop is quick
    assert proc.stdout.rstrip().endswith("kept 1 then 0"), proc.stdout


_ATTACHED_CLOSE_UNDER_A_THREAD = r"""
import os, signal, subprocess, sys, threading, time, jax, shmatari
name = sys.argv[1]
server = subprocess.Popen([sys.executable, "-m", "shmatari", "serve", "Breakout", "--num-envs",
                           "4", "--num-workers", "2", "--name", name],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
try:
    server.stdout.readline()  # ready
    env = shmatari.attach(name)
    workers = list(env.worker_pids)
    env.reset()
    handle, recv, send, step = env.xla()

    def body(h, key):
        h, (o, r, te, tr, info) = step(h, jax.random.randint(key, (4,), 0, 4))
        return h, r

    roll = jax.jit(lambda h, k: jax.lax.scan(body, h, jax.random.split(k, 20000)))
    result = []

    def train():
        try:
            jax.block_until_ready(roll(handle, jax.random.PRNGKey(0)))
            result.append("finished")
        except jax.errors.JaxRuntimeError as exc:
            result.append("failed")

    t = threading.Thread(target=train)
    t.start()
    time.sleep(1.0)
    for w in workers:
        os.kill(w, signal.SIGSTOP)  # the jitted call waits inside its handler
    time.sleep(0.2)
    env.close()  # an attached pool: no CLOSING ends that wait
    for w in workers:
        os.kill(w, signal.SIGCONT)
    t.join(60)
    again = shmatari.attach(name, timeout=5)  # this process's claim is given back
    again.reset()
    again.close()
    print("result", result, "re-attached")
finally:
    server.send_signal(signal.SIGINT)
    server.wait(30)
"""


def test_xla_attached_pool_closed_under_another_threads_call_can_be_attached_again(tmp_path):
    """close() of an attached pool while another thread's jitted call was
    inside a handler kept the client and mapping (right), and the claim
    with them for as long as the process lived: no client could attach
    again, this process included ("the pool already has a client: pid P
    (this process)"; a reviewer's pass, 2026-12-06). Once the handler has
    left, the next attach gives back what was kept."""
    import subprocess
    import sys

    script = tmp_path / "attached_close.py"
    script.write_text(_ATTACHED_CLOSE_UNDER_A_THREAD)
    proc = subprocess.run([sys.executable, str(script), f"xa{os.getpid()}"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-3000:])
    assert "re-attached" in proc.stdout, proc.stdout


def test_xla_wrong_handle_is_refused_in_our_words():
    """A handle of another shape or dtype (say the actions passed first) is
    refused when traced with a TypeError naming the handle, not by XLA's
    aliasing check in its words ("input_output_aliases ... uint8[8]")."""
    env = shmatari.make("null", num_envs=4, num_workers=1, seed=0)
    try:
        env.reset()
        handle, recv, send, step = env.xla()
        for bad in (jnp.zeros(4, jnp.uint8), handle.astype(np.int32), handle[:4]):
            for call in (lambda h: step(h, jnp.zeros(4, jnp.int32)),
                         lambda h: send(h, jnp.zeros(4, jnp.int32)), recv):
                with pytest.raises(TypeError, match=r"handle must be the uint8 \(8,\) array"):
                    jax.jit(call)(bad)
        # nothing was sent: the pool steps on
        handle, (obs, *_ , info) = jax.block_until_ready(jax.jit(step)(handle, jnp.zeros(4, jnp.int32)))
        assert np.asarray(info["elapsed_step"]).tolist() == [1, 1, 1, 1]
    finally:
        env.close()


def test_xla_step_refusal_names_step_as_the_python_pool_does():
    """A jitted step() refused (its envs still running after a send) named
    the call send(), where the Python pool's step() names step()."""
    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0)
    try:
        env.reset()
        handle, recv, send, step = env.xla()
        handle = jax.block_until_ready(jax.jit(send)(handle, jnp.zeros(2, jnp.int32)))
        with pytest.raises(jax.errors.JaxRuntimeError, match=r"call out of order: step\(\): env 0 is still running"):
            jax.block_until_ready(jax.jit(step)(handle, jnp.zeros(2, jnp.int32)))
        handle, _ = jax.block_until_ready(jax.jit(recv)(handle))  # the pool goes on
    finally:
        env.close()


@pytest.mark.parametrize("adapter", [False, True])
def test_xla_gives_the_ram_of_a_ram_info_pool_as_python_does(adapter):
    """``ram_info=True``: ``info["ram"]``, uint8 (batch_size, 128), each row's
    RAM after its step, as the Python pool's and EnvPool's ``xla()`` give it.
    Until 2026-12-06 the jitted info had no ``ram`` (KeyError when traced),
    while migration.md said it was as in Python (a client-code pass)."""
    length, rams = 40, []
    for use_xla in (False, True):
        if adapter:
            env = shm_envpool.make(GAME, env_type="gymnasium", num_envs=4, ram_info=True,
                                   seed=7, num_threads=2, noop_max=1)
        else:
            env = shmatari.make(GAME, num_envs=4, ram_info=True, **OPTIONS)
        try:
            table = _actions(4, length, env.single_action_space.n)
            env.reset()
            if use_xla:
                handle, recv, send, step = env.xla()

                def body(handle, action):
                    handle, (*_, info) = step(handle, action)
                    return handle, (info["ram"], info["env_id"])

                _, (ram, ids) = jax.block_until_ready(
                    jax.jit(lambda h: jax.lax.scan(body, h, jnp.asarray(table.T)))(handle))
                assert ram.shape == (length, 4, 128) and ram.dtype == jnp.uint8
                np.testing.assert_array_equal(ids, np.tile(np.arange(4), (length, 1)))
                rams.append(np.asarray(ram))
            else:
                rams.append(np.stack([env.step(table[:, k])[-1]["ram"]
                                      for k in range(length)]))
        finally:
            env.close()
    np.testing.assert_array_equal(rams[0], rams[1])
    assert len({r.tobytes() for r in rams[0][:, 0]}) > 10  # the RAM changed as it played
