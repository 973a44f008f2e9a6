"""The backends of ``shmatari-bench``: how each vector env is opened and
stepped (:class:`Runner`), the ceiling's processes (:class:`Ceiling`) and the
policy of ``--policy``. See :mod:`shmatari.bench`."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import re
import signal
import sys
import threading
import time

import numpy as np

from . import config as _config

__all__ = ["BACKENDS", "CEILINGS", "POLICY_BACKENDS", "OPTIONS", "Runner", "Ceiling",
           "open_backend", "options", "peer_available", "setting_text", "torch_missing",
           "nature_cnn_policy", "close_all", "plural"]

#: Backends in the order they run and print.
BACKENDS = ("shmatari", "shmatari-async", "shmatari-ale-reset", "shmatari-async-ale-reset",
            "pipe", "pipe-kernel", "envpool", "envpool-async", "ale_vector", "gymnasium")
#: The ceilings (the last rows): "ceiling" resets as ALE does, the bound for
#: any pool that does; "ceiling-fast" with shmatari's fast resets
#: (``fast_reset="auto"``, :mod:`shmatari.fast_reset`); "ceiling-sync" is
#: ceiling-fast's processes meeting at a barrier after every round (each env
#: stepped once; a polling barrier, :class:`SpinBarrier`): what a synchronous
#: pool with those resets could reach if its signalling were free.
CEILINGS = ("ceiling", "ceiling-fast", "ceiling-sync")
#: Backends of ``--policy``: ``shmatari-double`` is shmatari's async pool
#: with batch_size num_envs / 2 (double-buffered sampling), the halves served
#: first ready; ``shmatari-ordered`` the same with ``batch_order="fixed"``
#: (the halves alternate in a fixed order: a training run replays).
POLICY_BACKENDS = ("shmatari", "shmatari-double", "shmatari-ordered", "envpool",
                   "envpool-async")
#: The rows that step batches as they come (send/recv): compared with
#: EnvPool's async row, the others with its synchronous one.
ASYNC_BACKENDS = ("shmatari-async", "shmatari-async-ale-reset", "shmatari-double",
                  "shmatari-ordered", "envpool-async")
PEER_MODULE = {"envpool": "envpool", "envpool-async": "envpool",
               "ale_vector": "ale_vector", "gymnasium": "gymnasium"}
#: ALE v5's options, set explicitly on every backend so that all do the same
#: work. shmatari's rows reset fast where proven exact (the same streams), its
#: "-ale-reset" rows and the "ceiling" row as ALE does. ``shmatari-bench
#: --repeat-action-probability`` replaces the sticky-action probability on
#: every backend (:func:`options`).
OPTIONS = dict(frame_skip=4, repeat_action_probability=0.25, noop_max=30, stack_num=4,
               img_height=84, img_width=84, grayscale=True, maxpool=True,
               episodic_life=False, use_fire_reset=False, reward_clip=False,
               full_action_space=False, max_episode_frames=108_000, fast_reset="auto")
ACTION_ROWS = 4096
#: Seconds a ceiling-sync process waits at its barrier for the others.
BARRIER_TIMEOUT = 60.0
#: Seconds a ceiling burst may run past its warm-up and measured seconds
#: before the bench gives up on a process that neither answers nor dies.
ANSWER_SLACK = 30.0


def options(repeat_action_probability: float | None = None) -> dict:
    """:data:`OPTIONS`, with ``repeat_action_probability`` (the per-frame
    probability of sticky actions, ALE's own) replaced when given: the
    options every backend of one run is opened with (``open_backend`` reads
    the probability from the config, so the peers follow it too)."""
    out = dict(OPTIONS)
    if repeat_action_probability is not None:
        out["repeat_action_probability"] = float(repeat_action_probability)
    return out


def plural(count: int, word: str, many: str | None = None) -> str:
    """``plural(1, "env")`` -> ``"1 env"``; ``plural(2, "process", "processes")``."""
    return f"{count} {word if count == 1 else many or word + 's'}"


#: The oldest EnvPool the bench runs: EnvPool 0.8.4, what ``pip install
#: envpool`` gives on Python 3.10, crashes (SIGSEGV) in its async ``recv``,
#: taking the whole bench with it (a newcomer's pass, 2026-12-06).
ENVPOOL_MIN = (1, 2)
#: How to install EnvPool, as a skipped row says it (the README says the
#: same); its 1.2 wheels need Python 3.11 or newer on Linux x86-64, where
#: the peers extra installs it too.
ENVPOOL_HINT = (" (python3 -m pip install 'envpool>=1.2', or shmatari's peers extra)"
                if sys.version_info >= (3, 11) else
                " (EnvPool 1.2, the oldest the bench runs, needs Python 3.11 or newer)")


def _version_tuple(text: str) -> tuple[int, ...]:
    """``"1.2.5"`` -> ``(1, 2, 5)``: the leading numbers of a version string."""
    return tuple(int(n) for n in re.findall(r"\d+", text.split("+")[0])[:3])


#: How to install OpenCV (the pipe baseline's and Gymnasium's preprocessing).
OPENCV_HINT = (" (OpenCV: python3 -m pip install opencv-python-headless, or shmatari's "
               "bench extra; any one OpenCV package will do)")


def peer_available(name: str) -> str | None:
    """None if the backend can run here, else why not."""
    peer = PEER_MODULE.get(name)
    try:
        if peer == "envpool":
            import envpool  # noqa: F401
            version = str(getattr(envpool, "__version__", "0"))
            if _version_tuple(version) < ENVPOOL_MIN:
                return (f"EnvPool {version} is installed; the bench runs EnvPool "
                        f"{'.'.join(map(str, ENVPOOL_MIN))} or newer (0.8's async recv "
                        f"crashes the process)" + ENVPOOL_HINT)
        elif peer == "ale_vector":
            from ale_py.vector_env import AtariVectorEnv  # noqa: F401
        elif peer == "gymnasium":
            import cv2  # noqa: F401
            import gymnasium  # noqa: F401
        elif name == "pipe":
            import cv2  # noqa: F401,F811 - the classic baseline resizes with OpenCV
    except Exception:  # noqa: BLE001 - any import failure means "not installed"
        return "not installed" + (ENVPOOL_HINT if peer == "envpool" else
                                  OPENCV_HINT if name in ("pipe", "gymnasium") else "")
    return None


def game_title(rom: str) -> str:
    """``"ms_pacman"`` -> ``"MsPacman"`` (the Gymnasium / EnvPool spelling)."""
    return "".join(part.capitalize() for part in rom.split("_"))


#: How often a burst updates the progress bar at most (seconds).
TICK_SECONDS = 0.1


class Runner:
    """Steps one backend: ``loop()`` performs one iteration and returns the
    env steps it completed. Synchronous backends ``step`` every env;
    asynchronous ones ``recv`` a batch and ``send`` its next actions. The
    actions come from a fixed random table, or from ``policy(obs)``."""

    def __init__(self, env, num_envs: int, *, sync: bool, reset=None):
        self.env, self.sync, self.num_envs = env, sync, num_envs
        self.n_actions = _n_actions(env)
        self.actions = np.random.default_rng(12345).integers(0, self.n_actions,
                                                             (ACTION_ROWS, num_envs))
        self.policy = None
        self.policy_seconds = 0.0
        self.k = 0
        if sync:
            self.obs = (reset or env.reset)()[0]
        else:
            env.async_reset()

    def _act(self, obs, n: int):
        if self.policy is None:
            return self.actions[self.k % ACTION_ROWS][:n]
        t = time.perf_counter()
        actions = self.policy(obs)
        self.policy_seconds += time.perf_counter() - t
        return actions

    def loop(self) -> int:
        self.k += 1
        if self.sync:
            self.obs = self.env.step(self._act(self.obs, self.num_envs))[0]
            return self.num_envs
        obs, _, _, _, info = self.env.recv()
        ids = info["env_id"]
        self.env.send(self._act(obs, len(ids)), ids)
        return len(ids)

    def burst(self, warmup: float, seconds: float, tick) -> dict:
        """``warmup`` seconds unmeasured, then ``seconds`` measured."""
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            self.loop()
        self.policy_seconds = 0.0
        steps, t0 = 0, time.perf_counter()
        end, now, next_tick = t0 + seconds, t0, t0
        while now < end:
            steps += self.loop()
            now = time.perf_counter()
            if now >= next_tick:
                # The progress bar at most every TICK_SECONDS, as the ceiling's
                # parent: an update every loop (about 3 us a batch, until
                # 2026-12-05) was the bench's own CPU, taken from the workers
                # of the backend it measured and not from the ceiling's.
                tick(now - t0)
                next_tick = now + TICK_SECONDS
        out = {"env_steps": steps, "seconds": now - t0}
        if self.policy is not None:
            out["policy_seconds"] = self.policy_seconds
        return out

    def close(self):
        self.env.close()


def _n_actions(env) -> int:
    space = getattr(env, "single_action_space", None) or env.action_space
    return int(space.n)


def open_backend(name: str, cfg: _config.EnvConfig, batch_size: int) -> Runner:
    n, seed = cfg.num_envs, cfg.seed
    if name.endswith("-ale-reset"):
        cfg, name = dataclasses.replace(cfg, fast_reset="off"), name[:-len("-ale-reset")]
    if name in ("shmatari", "shmatari-async", "shmatari-double", "shmatari-ordered"):
        from .env import ShmVectorEnv

        if name == "shmatari-ordered":
            if n % batch_size:
                raise ValueError(f"shmatari-ordered needs batch_size {batch_size} to divide "
                                 f"num_envs {n} (batch_order='fixed')")
            env = ShmVectorEnv(dataclasses.replace(cfg, batch_size=batch_size,
                                                   batch_order="fixed"))
            return Runner(env, n, sync=False)
        if name != "shmatari":
            env = ShmVectorEnv(dataclasses.replace(cfg, batch_size=batch_size))
            return Runner(env, n, sync=False)
        return Runner(ShmVectorEnv(cfg), n, sync=True)
    if name in ("pipe", "pipe-kernel"):
        from .baselines import PipeVectorEnv

        env = PipeVectorEnv(_config.build_config(cfg.game, n, num_workers=n, seed=seed,
                                                 start_method=cfg.start_method,
                                                 **cfg.env_options()),
                            preprocess="kernel" if name == "pipe-kernel" else "opencv")
        return Runner(env, n, sync=True)
    if name in ("envpool", "envpool-async"):
        import envpool

        kw = dict(batch_size=batch_size) if name == "envpool-async" else {}
        env = envpool.make(f"{game_title(cfg.game)}-v5", env_type="gymnasium", num_envs=n,
                           num_threads=cfg.num_workers, seed=seed, frame_skip=4,
                           repeat_action_probability=cfg.repeat_action_probability,
                           noop_max=30, stack_num=4,
                           img_height=84, img_width=84, gray_scale=True,
                           use_inter_area_resize=True, episodic_life=False,
                           reward_clip=False, use_fire_reset=False,
                           full_action_space=False, max_episode_steps=27_000, **kw)
        return Runner(env, n, sync=not kw)
    if name == "ale_vector":
        from ale_py import ALEInterface, LoggerMode
        from ale_py.vector_env import AtariVectorEnv

        ALEInterface.setLoggerMode(LoggerMode.Error)
        env = AtariVectorEnv(cfg.game, n, num_threads=cfg.num_workers, frameskip=4,
                             repeat_action_probability=cfg.repeat_action_probability,
                             noop_max=30, stack_num=4,
                             img_height=84, img_width=84, grayscale=True, maxpool=True,
                             episodic_life=False, reward_clipping=False,
                             use_fire_reset=False, full_action_space=False,
                             max_num_frames_per_episode=108_000)
        return Runner(env, n, sync=True, reset=lambda: env.reset(seed=seed))
    if name == "gymnasium":
        import ale_py
        import gymnasium as gym
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        gym.register_envs(ale_py)
        sticky = cfg.repeat_action_probability
        game_id = f"ALE/{game_title(cfg.game)}-v5"

        def thunk():
            ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
            if game_id not in gym.registry:
                # A forkserver child whose server preloaded ale_py without
                # Gymnasium (shmatari._worker_ale, for shmatari's workers):
                # its envs were never registered there.
                from ale_py.registration import register_v5_envs

                register_v5_envs()
            e = gym.make(game_id, frameskip=1, repeat_action_probability=sticky,
                         full_action_space=False, max_num_frames_per_episode=108_000)
            e = AtariPreprocessing(e, noop_max=30, frame_skip=4, screen_size=84,
                                   terminal_on_life_loss=False, grayscale_obs=True)
            return FrameStackObservation(e, 4)

        from .atari import child_environment

        # Its processes (and the resource tracker or fork server it may be
        # the first to start) are `python -c ...`: with PYTHONSAFEPATH, a
        # module planted in the current folder does not run in them.
        with child_environment():
            env = gym.vector.AsyncVectorEnv([thunk] * n, shared_memory=True,
                                            context=_config.mp_start_method(cfg.start_method))
        return Runner(env, n, sync=True, reset=lambda: env.reset(seed=seed))
    raise ValueError(f"unknown backend {name!r}")


def setting_text(name: str, cfg: _config.EnvConfig, batch_size: int) -> str:
    if name.endswith("-ale-reset"):
        return setting_text(name[:-len("-ale-reset")], cfg, batch_size) + ", ALE's reset"
    s = plural(cfg.num_envs, "env")
    if name == "shmatari-double":
        s += f", 2 halves of {batch_size}, first ready"
    elif name == "shmatari-ordered":
        s += f", 2 halves of {batch_size}, fixed order"
    elif name.endswith("-async"):
        s += f", batch {batch_size}"
    if name.startswith("shmatari"):
        return s + ", " + plural(cfg.num_workers, "worker")
    if name.startswith(("envpool", "ale_vector")):
        return s + ", " + plural(cfg.num_workers, "thread")
    if name == "pipe-kernel":
        return s + ", 1 process per env, shmatari's kernel"
    return s + ", 1 process per env"


# -- the ceiling: shmatari's core, one process per worker group, no IPC -------------

class SpinBarrier:
    """A barrier of ``parties`` processes over shared words, for ceiling-sync.

    A process that arrives before the others polls (``os.sched_yield()``
    between looks) instead of sleeping, so the last arrival frees everyone
    within microseconds: the optimistic barrier a bound wants
    (``multiprocessing.Barrier``, whose semaphores put a waiter to sleep,
    took about 220 us a wait on this project's 2-core VM). Every process
    makes the same arrivals, numbered 1, 2, ... Process 0 leads: its arrival
    ``n`` is one word, ``4 * n + phase``, in slot ``n % 2``, so what the
    others read after arrival ``n`` is arrival ``n``'s phase (the leader
    rewrites that slot only after arrival ``n + 1``, which waits for them).

    Args:
        ctx: the multiprocessing context the processes are started with.
        parties: how many processes wait.
    """

    def __init__(self, ctx, parties: int):
        self.parties = parties
        # 2 leader slots, ranks 1.., then the abort word (set by the parent
        # when a process died: the others stop waiting at once)
        self.words = ctx.RawArray("q", parties + 2)

    def abort(self) -> None:
        """Makes every wait, current or later, raise ``RuntimeError``."""
        self.words[self.parties + 1] = 1

    def wait(self, rank: int, n: int, phase: int = 0) -> int:
        """Arrival ``n`` of process ``rank`` (the leader, rank 0, passes
        ``phase``, 0..3); returns the leader's phase of arrival ``n``.

        Raises:
            TimeoutError: after ``BARRIER_TIMEOUT`` seconds, counted from
                the call, without every process (a dead or stopped partner).
            RuntimeError: after :meth:`abort`."""
        w = self.words
        if rank == 0:
            w[n % 2] = 4 * n + phase
        else:
            w[1 + rank] = n
        looks, deadline = 0, time.monotonic() + BARRIER_TIMEOUT
        while True:
            lead = w[n % 2]
            if lead // 4 == n and all(w[1 + r] >= n for r in range(1, self.parties)):
                return lead % 4
            if w[self.parties + 1]:
                raise RuntimeError(f"ceiling-sync process {rank}: the barrier was aborted "
                                   f"(another process died or stopped answering)")
            os.sched_yield()
            looks += 1
            # the clock every 64 looks: a look can take a whole time slice
            # when another process wants this core
            if looks % 64 == 0 and time.monotonic() > deadline:
                raise TimeoutError(f"ceiling-sync process {rank} waited "
                                   f"{BARRIER_TIMEOUT:g} s at the barrier")


def _ceiling_worker(fields: dict, indices: list, conn, barrier=None, rank: int = 0) -> None:
    """Builds its envs, then runs one burst per ``(warmup, seconds)`` it
    receives, answering ``(env_steps, seconds)``; ends at None or EOF.

    With ``barrier`` (a :class:`SpinBarrier` of every ceiling process; this
    one's ``rank``) the processes meet after every round, as a synchronous
    pool's workers do (:func:`_barrier_burst`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it
    from . import atari

    atari.quiet_process()
    cfg = _config.EnvConfig(**fields)
    palette = atari.build_palette(cfg)
    cores = [atari.build_core(cfg, i, palette) for i in indices]
    for c in cores:
        c.reset()
    out = np.empty(cfg.obs_shape, np.uint8)
    rng = np.random.default_rng(indices[0])
    acts = rng.integers(0, cores[0].num_actions, (ACTION_ROWS, len(cores))).tolist()

    def one_round(k: int) -> int:
        row = acts[k % ACTION_ROWS]
        for j, c in enumerate(cores):
            c.step(row[j])
            c.obs_into(out)
        return len(cores)

    conn.send("ready")
    k, arrivals = 0, 0
    while True:
        try:
            cmd = conn.recv()
        except EOFError:
            return
        if cmd is None:
            return
        warmup, seconds = cmd
        if barrier is not None:
            steps, spent, k, arrivals = _barrier_burst(one_round, k, warmup, seconds,
                                                       barrier, rank, arrivals)
            conn.send((steps, spent))
            continue
        t_start = time.perf_counter() + warmup
        end = t_start + seconds
        steps, counting = 0, False
        while True:
            now = time.perf_counter()
            if not counting and now >= t_start:
                counting, steps, t_start = True, 0, now
            if now >= end:
                break
            steps += one_round(k)
            k += 1
        conn.send((steps, now - t_start))


def _barrier_burst(one_round, k: int, warmup: float, seconds: float, barrier: SpinBarrier,
                   rank: int, n: int) -> tuple[int, float, int, int]:
    """One ceiling-sync burst: a first arrival (all start together), then
    rounds, each followed by an arrival. The leader decides each arrival's
    phase from its clock: 0 warm-up, 1 counting, 2 over; all take it from
    the wait on, so all count the same rounds and leave after the same one.
    ``n``: the arrivals made so far. Returns (env steps counted, seconds
    counted, next k, arrivals made)."""
    n += 1
    barrier.wait(rank, n)
    t_start = time.perf_counter() + warmup
    end = t_start + seconds
    steps, counting = 0, False
    while True:
        steps += one_round(k)
        k += 1
        phase = 0
        if rank == 0:
            now = time.perf_counter()
            phase = 2 if counting and now >= end else 1 if now >= t_start else 0
        n += 1
        phase = barrier.wait(rank, n, phase)
        if phase == 2:
            return steps, time.perf_counter() - t_start, k, n
        if phase == 1 and not counting:
            counting, steps, t_start = True, 0, time.perf_counter()


class Ceiling:
    """The ceiling's processes, kept between bursts like any backend.

    Args:
        cfg: the envs and the number of processes (``cfg.worker_groups()``).
        fast_reset: reset with ``fast_reset="auto"`` (else ALE's reset).
        barrier: the processes meet at a barrier after every round, each
            env stepped once (``ceiling-sync``)."""

    def __init__(self, cfg: _config.EnvConfig, fast_reset: bool = False,
                 barrier: bool = False):
        from .atari import child_environment

        cfg = dataclasses.replace(cfg, fast_reset="auto" if fast_reset else "off")
        #: the config every process builds its envs from
        self.config = cfg
        ctx = mp.get_context(_config.mp_start_method(cfg.start_method))
        fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
        self.groups = cfg.worker_groups()
        spin = SpinBarrier(ctx, len(self.groups)) if barrier else None
        self._barrier = spin
        self.conns, self.procs = [], []
        try:
            with child_environment():
                for g in self.groups:
                    parent, child = ctx.Pipe()
                    p = ctx.Process(target=_ceiling_worker, daemon=True,
                                    args=(fields, list(g), child, spin, len(self.procs)))
                    p.start()
                    child.close()
                    self.conns.append(parent)
                    self.procs.append(p)
            deadline = time.perf_counter() + 60.0
            for c in self.conns:
                self._recv(c, deadline)
        except BaseException:
            self.close()
            raise

    def _failed(self):
        if self._barrier is not None:  # the survivors stop polling at once
            self._barrier.abort()
        end = time.perf_counter() + 0.5
        for p in self.procs:  # a process whose pipe closed is exiting
            p.join(max(0.0, end - time.perf_counter()))
        codes = [p.exitcode for p in self.procs]
        raise RuntimeError(f"a ceiling process failed: exit codes {codes}")

    def _recv(self, conn, deadline: float, tick=None):
        """The next answer on ``conn``, by ``deadline`` (perf_counter);
        ``RuntimeError`` when a process died (with the exit codes) or the
        deadline passed (a process stopped or stuck)."""
        while not conn.poll(TICK_SECONDS):
            if any(p.exitcode is not None for p in self.procs):
                self._failed()
            if time.perf_counter() > deadline:
                if self._barrier is not None:
                    self._barrier.abort()
                raise RuntimeError("a ceiling process did not answer in time (stopped or "
                                   "stuck): pids " + ", ".join(str(p.pid) for p in self.procs))
            if tick is not None:
                tick()
        try:
            return conn.recv()
        except (EOFError, OSError):  # the process at the other end is gone
            self._failed()

    def burst(self, warmup: float, seconds: float, tick) -> dict:
        for c in self.conns:
            try:
                c.send((warmup, seconds))
            except OSError:  # the process at the other end is gone
                self._failed()
        t0 = time.perf_counter()
        deadline = t0 + warmup + seconds + ANSWER_SLACK
        answers = [self._recv(c, deadline, lambda: tick(
            min(seconds, max(0.0, time.perf_counter() - t0 - warmup)))) for c in self.conns]
        return {"env_steps": sum(a[0] for a in answers),
                "seconds": max(a[1] for a in answers),
                "per_process": [a[0] for a in answers]}

    def close(self):
        for c in self.conns:
            try:
                c.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(2.0)
            if p.exitcode is None:
                p.kill()
                p.join(1.0)
        for c in self.conns:
            c.close()
        self.conns, self.procs = [], []


# -- the policy of --policy ---------------------------------------------------------

def torch_missing() -> str | None:
    """None if torch can be imported, else how to install it."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return ("--policy needs torch: python3 -m pip install torch (the CPU build, far "
                "smaller on Linux: add --index-url https://download.pytorch.org/whl/cpu)")
    return None


def nature_cnn_policy(stack_num: int, n_actions: int):
    """``policy(obs) -> actions``: the Nature DQN network (Mnih et al., 2015;
    CleanRL's PPO agent), three convolutions and a 512-unit layer, on CPU with
    one thread. ``obs``: uint8, shape ``(batch, stack_num, 84, 84)``; the
    actions are sampled from its logits: int64, shape ``(batch,)``."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(stack_num, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
        nn.Linear(512, n_actions)).eval()

    @torch.inference_mode()
    def policy(obs):
        x = torch.from_numpy(np.asarray(obs)).float().div_(255.0)
        logits = net(x)
        return torch.distributions.Categorical(logits=logits).sample().numpy()

    return policy


# -- one point: every backend at one num_envs ---------------------------------------

def close_all(items) -> bool:
    """Closes every runner, whatever a runner's ``close`` raises. A Ctrl-C
    meanwhile is held back until all are closed, so that no process or
    segment is left behind, and is not lost: returns True if one came (in
    the main thread, and unless SIGINT is ignored, as in a background job;
    elsewhere Python delivers none), for the caller to stop as after any
    other. (Until 2026-12-05 it was ignored: a bench stopped
    while a backend closed went on with the next one, and one stopped while
    the last closed reported ``"interrupted": false``.)"""
    caught = []
    previous = None
    if _in_main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        # (a bench started as a background job ignores SIGINT: it still does)
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        for item in items:
            try:
                item.close()
            except Exception:  # noqa: BLE001 - close the others regardless
                pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return bool(caught)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


