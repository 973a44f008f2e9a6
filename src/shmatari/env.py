"""The face of a pool: :func:`make` (and its options) and :func:`attach`, which
return a :class:`ShmVectorEnv` (defined in :mod:`shmatari._vector_env`,
importable from here).

:class:`ShmVectorEnv` owns the Gymnasium surface only, and wires the two parts
a pool is made of:

- :mod:`shmatari.client`: this process's end of the segment (state, argument
  checks, commands and batches, status codes to exceptions);
- :mod:`shmatari.supervisor`: the owner's side (worker processes, liveness,
  restarts, resource lifetime). :func:`make` has one; :func:`attach` does not.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import config as _config
from ._vector_env import GYM_AUTORESET, ShmVectorEnv  # noqa: F401  (GYM_AUTORESET: re-exported)
from .supervisor import _deferred_sigint

__all__ = ["make", "attach", "ShmVectorEnv"]

#: Seconds attach() waits for a starting pool, or for a previous client's
#: last commands to finish.
_ATTACH_TIMEOUT = 30.0


def make(env_id: str, num_envs: int = 8, *, batch_size: int | None = None,
         num_workers: int | None = None, seed: int | None = None,
         start_method: str | None = None, zero_copy: bool = False,
         restart_workers: bool = False, preset: str | None = None,
         start_timeout: float | None = None, batch_order: str = "first_ready",
         **options) -> "ShmVectorEnv":
    """Creates a pool of Atari envs served by worker processes through shared memory.

    It first removes the segments that pools killed outright left in
    ``/dev/shm`` (:func:`shmatari.shm.sweep_stale`: only those whose owner is
    dead and that no process maps).

    Args:
        env_id: the game: an ale-py ROM id (``"breakout"``) or a usual spelling
            (``"Breakout"``, ``"ALE/Breakout-v5"``; a legacy ``"BreakoutNoFrameskip-v4"``
            gives a warning that only the game is taken from it, the options
            staying shmatari's, unless ``preset`` is given or ``frame_skip``
            and ``repeat_action_probability`` are both set);
            or ``"null"``, a built-in env that emulates nothing and only
            writes a frame per step (4 actions, never done), to measure the
            cost of the round trip itself.
        num_envs: envs in the pool (>= 1; default 8).
        batch_size: results per :meth:`ShmVectorEnv.recv` (1..num_envs; default
            num_envs, which makes the pool synchronous).
        batch_order: which envs a batch of an asynchronous pool
            (``batch_size < num_envs``) holds. ``"first_ready"`` (default):
            the first ``batch_size`` results to finish, as EnvPool's async
            mode; timing decides which envs share a batch, so a policy's
            random draws and a rollout's end depend on it (a training run
            does not replay bit for bit). ``"fixed"``: ``batch_size`` must
            divide ``num_envs``; with ``G = num_envs // batch_size`` groups,
            the k-th batch since the last full reset holds exactly envs
            ``k % G, k % G + G, k % G + 2G, ...`` (``info["env_id"]``, in
            that order), whatever the workers' timing: groups served
            round-robin, each one striped over the workers (which own
            contiguous envs), so every worker steps while the policy runs on
            another group. ``recv()`` waits for that group only, and refuses
            (CallOrderError) when one of its envs was not sent a command.
            Still zero-copy and as fast as first ready when every group is
            sent each round (docs/reproducibility.md). A synchronous pool is
            fixed either way. The default stays first ready because it
            accepts any send pattern (some envs, any subset, a batch_size
            that does not divide num_envs) and is the async contract of
            EnvPool and Gymnasium users' code; make's default pool is
            synchronous, hence reproducible, anyway. Double-buffered
            training that must replay (examples/ppo_atari.py) asks for
            ``"fixed"``.
        num_workers: worker processes (1..num_envs; default: the cores this
            process may use, at most num_envs). Each owns a contiguous group
            of envs.
        seed: the pool seed, an int in [0, 2**128); None draws fresh entropy,
            kept in ``env.seed_entropy``. Env *i* derives its streams from
            ``SeedSequence(seed, spawn_key=(i,))`` (see :mod:`shmatari.seeding`).
        start_method: how worker processes start. ``"zygote"`` (default on
            Linux): forked from shmatari's zygote, a small process started
            once per trainer process from a clean interpreter, which loads
            only ale-py, NumPy and shmatari's core (:mod:`shmatari._zygote`):
            workers carry nothing of the trainer (no torch), the main script
            needs no ``if __name__ == "__main__":`` guard, and scripts from
            stdin, ``python -c``, notebooks, threads and daemonic processes
            (a multiprocessing Pool's worker) all work. ``"spawn"`` (default
            elsewhere), ``"forkserver"`` or ``"fork"``: multiprocessing's
            start methods, with their rules (the guard; spawn and
            forkserver import the main script in every worker).
        start_timeout: seconds the workers may take to build their envs
            before make() raises WorkerError (default: 120 plus 1 per env of
            the largest worker). Progress is logged every 5 s meanwhile
            (logger ``"shmatari"``, level INFO). A zygote seen stopped
            (SIGSTOP, a debugger) for 2 s fails the start sooner, with words
            that say so (``_zygote.STOPPED_SECONDS``).
        zero_copy: return observations as read-only views into the shared
            ring instead of copies. The ring holds ``ceil(num_envs /
            batch_size) + 1`` batches, so the view returned by a ``recv()``
            (or ``step()``) stays valid through the next ``recv()``; envs
            sent after that one overwrite it, silently: the view then shows
            newer frames. In a synchronous pool: the observation of step *t*
            is valid until step *t + 2* is called. So a view must be used or
            copied before the next-but-one call: kept in a list (as CleanRL's
            async script keeps ``next_obs``) it changes under the caller.
            The views are read-only: ``torch.from_numpy(view)`` warns that
            the array is not writable (writing through such a tensor would
            corrupt the ring). The recipe is one copy into storage of the
            caller's own, e.g. ``np.copyto(buf[t], obs)`` into a writable
            rollout array that torch shares (``torch.from_numpy(buf)``),
            or ``torch.tensor(obs)``. Default False: every returned array
            is the caller's own (writable, never overwritten), as
            :mod:`shmatari.envpool` returns them unless asked otherwise.
        restart_workers: when a worker dies or fails while the pool runs,
            start a new one in its place instead of raising WorkerError
            (a warning is logged to the ``"shmatari"`` logger). Its envs are
            rebuilt, seeded from the pool seed, the env index and the
            worker's restart count (:mod:`shmatari.seeding`), and each
            reports the lost episode as truncated, with
            ``info["worker_restarted"]``, in its next result (a reset's
            result is flagged too, without truncation). Commands in flight
            when the worker died are answered by the new one, so a batch
            still fills. A worker that fails while starting still raises,
            as does one that dies again after ``supervisor.RESTART_LIMIT``
            (5) restarts within ``RESTART_WINDOW`` (60) seconds (its sixth
            death), and a replacement this
            process has no file descriptor or process left to start
            (ResourceLimitError), and one whose segment file the name no
            longer names (``/dev/shm`` cleaned); the pool is then broken. The
            call that notices a death waits for the replacement to be ready,
            up to ``start_timeout`` for the whole restart, whatever its own
            ``timeout``; a close() from another thread ends that wait
            (PoolClosedError).
        preset: None, ``"dqn"`` or ``"gymnasium"``: a named set of the
            options below (``config.PRESETS``); options given here override
            it. ``"dqn"``: Nature DQN as SB3's AtariWrapper (sticky actions 0,
            episodic_life, use_fire_reset, reward_clip; stack 4 as SB3's
            VecFrameStack). ``"gymnasium"``: the defaults below.
        **options: env options. The defaults are Gymnasium's
            AtariPreprocessing + FrameStackObservation(4) on ALE/<Game>-v5
            (ALE v5: Machado et al., 2018), bit for bit; docs/semantics.md
            gives each rule in full, with its tests and the peers' differences.
            A *frame* is one emulator frame, a *step* one agent step.

            - ``frame_skip=4``: frames per step; the action is repeated and
              the reward summed over the frames actually emulated. A step
              stops at the frame that ends its episode.
            - ``maxpool=True``: each frame of the stack is the pixel-wise max
              of the step's last two frames in ALE's palette (per channel in
              RGB), taken before the resize; a step that emulated one frame
              (``frame_skip=1``, or an episode ending on its first frame) uses
              that frame alone, never an older one. False: the last frame.
            - ``grayscale=True``: ALE's grayscale palette, observations uint8
              ``(num_envs, stack_num, img_height, img_width)``; False: RGB,
              ``(num_envs, stack_num, img_height, img_width, 3)``.
            - ``img_height=84``, ``img_width=84``: at most the game's screen
              (210 x 160; taller for 13 games, listed in docs/semantics.md);
              area resize from that screen, bit-identical to ``cv2.resize(...,
              interpolation=cv2.INTER_AREA)``.
            - ``stack_num=4``: frames per observation, oldest first. A reset
              fills the stack with its first frame; a done step's stack holds
              only frames of the ending episode.
            - ``noop_max=30``: at each new game, n NOOP frames, n uniform in
              [1, noop_max] from env i's no-op generator
              (``seeding.noop_rng(seed, i)``), as Gymnasium's
              AtariPreprocessing and SB3's NoopResetEnv; 0: none. A no-op
              frame that ends the game resets it again.
            - ``use_fire_reset=False``: if True, one step (frame_skip frames) of FIRE
              after the no-ops, and after each lost life with episodic_life,
              on action sets with FIRE at index 1 and at least 3 actions
              (skipped elsewhere, e.g. Freeway). This is the first step of
              SB3's FireResetEnv, without its step of action 2. If FIRE ends
              the game, a fresh reset (no-ops, no FIRE) gives the first
              observation.
            - ``episodic_life=False``: if True, a step whose lives drop (to a value
              above 0) ends the episode with ``terminated`` while the game goes
              on; the next reset continues the game (a NOOP step, then FIRE)
              with a fresh stack, as SB3's EpisodicLifeEnv. ``info["lives"]``
              and ``info["game_over"]`` report the game; the frame cap, the
              step count and the episode statistics cover the whole game.
            - ``reward_clip=False``: if True, the reward is the sign of the step's
              summed reward; ``info["raw_reward"]`` keeps it unclipped and
              ``info["episode"]["r"]`` is the raw score.
            - ``max_episode_frames=108000``: truncate the game when its frame
              count (no-op, FIRE and continuation frames included; ALE's
              episode frame number) reaches this, on that very frame: at step
              27,000 with no no-ops. None: never. A done step always has
              ``terminated`` or ``truncated`` set.
            - ``max_episode_steps=None``: truncate the game at the step whose
              ``info["elapsed_step"]`` reaches this (agent steps since the
              game's reset: no-op and FIRE reset frames not counted, the
              count going on across lives under ``episodic_life``), as
              EnvPool's ``max_episode_steps`` and Gymnasium's ``TimeLimit``;
              with ``max_episode_frames`` too, whichever comes first. None:
              never (:func:`shmatari.envpool.make` sets it from EnvPool's).
            - ``repeat_action_probability=0.25``: sticky actions, ALE's own
              per-frame mechanism, seeded per env.
            - ``full_action_space=False``: if True, all 18 actions instead of the game's
              minimal set.
            - ``autoreset_mode="next_step"``, ``"same_step"`` or
              ``"disabled"`` (or a ``gymnasium.vector.AutoresetMode``),
              declared in ``env.metadata["autoreset_mode"]``:

              - ``"next_step"`` (Gymnasium 1.x): the step after a done step
                returns the reset observation, reward 0 and both flags false;
                its action is ignored.
              - ``"same_step"``: a done step returns the reset observation at
                once, with the step's reward and flags; the step's own
                observation and info are in ``info["final_obs"]`` and
                ``info["final_info"]`` (masks ``_final_obs``,
                ``_final_info``), as Gymnasium's SyncVectorEnv.
              - ``"disabled"``: stepping an env whose episode ended raises
                CallOrderError; reset it with
                ``reset(options={"reset_mask": mask})``.

            - ``obs_layout="channels_last"``: RGB observations ``(num_envs,
              stack_num, img_height, img_width, 3)``; ``"channels_first"``:
              ``(num_envs, 3 * stack_num, img_height, img_width)``, frame s in
              channels 3s..3s+2 (EnvPool's layout, what SB3's and CleanRL's
              CNNs take), written planar by the frame kernel: the same values,
              no transpose. Grayscale is the same in both.
            - ``render_mode=None``: ``"rgb_array"`` makes :meth:`ShmVectorEnv.render`
              return each env's full-size RGB screen (workers keep the
              last screen of each env in the segment, about 34 KB copied
              per result); None: nothing kept, no cost.
            - ``ram_info=False``: True adds ``info["ram"]``, uint8 ``(n, 128)``:
              each row's console RAM (ALE's ``getRAM``) at the state its
              observation shows (after the reset in a same-step done row),
              as EnvPool's ``info["ram"]`` and ale-py's ``obs_type="ram"``;
              workers copy 128 bytes per result into the segment.
            - ``episode_statistics=True``: when an env ends a game (not a
              life), ``info["episode"]`` holds ``r`` (float64, raw score),
              ``l`` (int32, agent steps), ``t`` (float64, seconds since the
              episode's reset) and ``frames`` (int64), with the mask
              ``info["_episode"]``: the names of Gymnasium's
              RecordEpisodeStatistics. False: neither key (nor in
              ``final_info``), and no timing work in ``recv``, so that the pool
              can be wrapped in ``gymnasium.wrappers.vector.RecordEpisodeStatistics``
              (which refuses an info that has ``episode`` already).
            - ``fast_reset="auto"``: after an env's first reset, a new game
              restores the state that reset left (about 0.1-0.3 ms instead
              of ALE's 5 ms ``reset_game``) where the table of
              :mod:`shmatari.fast_reset` proves it exact for the game's ROM,
              the installed ale-py and the sticky setting; the same streams
              bit for bit. ``"off"``: ALE's reset always.

            Two seeding arguments for pools that are slices of a larger one
            (``shmatari.ray`` gives each node its slice; docs/distributed.md):
            ``env_index_offset=0`` (env j derives its streams as env
            ``env_index_offset + j`` of a pool with the same seed) and
            ``pool_generation=0`` (how many times a supervisor rebuilt the
            pool; part of each env's ``SeedSequence`` spawn key). Both are
            ints >= 0 (:func:`shmatari.config.build_config`).

    Returns:
        ShmVectorEnv: a ``gymnasium.vector.VectorEnv``; call ``reset()`` first.

    Raises:
        TypeError: an argument of the wrong type, or an unknown option.
        ValueError: an unknown game (close names are suggested), a ROM that
            cannot be played single-player or whose file is missing (not in
            ``list_games()``), an
            unknown preset, or an option out of range. All are raised before
            any process starts.
        SharedMemorySpaceError: ``/dev/shm`` is too small for the pool.
        ResourceLimitError: this process or the system ran out of file
            descriptors or processes (``ulimit -n``, ``ulimit -u``).
        WorkerError: a worker failed while building its envs, or they were
            not all ready within ``start_timeout`` (the message says how far
            they got and what to change).
        RuntimeError: a multiprocessing start method inside a daemonic
            process (use ``"zygote"``).
    """
    if start_timeout is not None:
        # any real number but a bool (np.int64 and np.float32 were refused,
        # where every int argument takes them: a fuzzing pass)
        if isinstance(start_timeout, (bool, np.bool_)) or \
                not isinstance(start_timeout, numbers.Real):
            raise TypeError(f"start_timeout must be a number of seconds or None, got "
                            f"{type(start_timeout).__name__}")
        start_timeout = float(start_timeout)
        if not 0 < start_timeout < math.inf:  # NaN fails both
            raise ValueError(f"start_timeout must be a finite number of seconds > 0, or "
                             f"None, got {start_timeout!r}")
    # Checking the game imports ale-py and loads its ROM: a KeyboardInterrupt
    # raised inside ale-py's native code aborts the process (C++ terminate),
    # so a Ctrl-C then is raised once that is done.
    with _deferred_sigint():
        cfg = _config.build_config(env_id, num_envs, batch_size=batch_size,
                                   num_workers=num_workers, seed=seed,
                                   start_method=start_method, zero_copy=zero_copy,
                                   restart_workers=restart_workers, preset=preset,
                                   batch_order=batch_order, **options)
    return ShmVectorEnv(cfg, start_timeout=start_timeout)


def attach(name: str, *, timeout: float = _ATTACH_TIMEOUT,
           zero_copy: bool = False) -> "ShmVectorEnv":
    """Attaches to a pool that another process serves (``shmatari serve``).

    The pool keeps running in its server; this process becomes its one
    client and drives it through the shared-memory segment, with the same
    API as :func:`make`'s pools (``reset``, ``step``, ``send`` / ``recv``,
    the spaces, ``metadata["autoreset_mode"]``), all read from the segment's
    header. :meth:`ShmVectorEnv.close` detaches and leaves the pool running
    for the next client.

    Attaching makes the pool consistent first: it waits until commands that
    a previous client left running have finished, then drops the results
    nobody took (``shmatari_recover`` in ``shmatari/shmatari.h``; see
    docs/layout.md). Call ``reset()`` before stepping.

    Args:
        name: the pool's name (``"demo"`` for ``shmatari serve ... --name
            demo``, whose segment is ``/dev/shm/shmatari_demo``), or a full
            segment name such as ``env.segment_name``.
        timeout: seconds to wait in all (a finite number >= 0): for a pool
            that is still starting (a warning to the ``"shmatari"`` logger
            says so once, when there is no such segment yet; only for a name
            that ``shmatari serve --name`` can take: an automatic name of
            ``make()`` or a name serve refuses, not there, fails at once), for the
            segment's in-use lock while another process holds it exclusively
            (only a sweep or a starting server takes it, for microseconds),
            and for a previous client's last commands (at least 50 ms for
            those, whatever ``timeout``: their acknowledgements land a few
            milliseconds after the results). A segment whose
            header is all zeros is looked at again for 2 s at most
            (``_core.ZERO_HEADER_SECONDS``, as C's attach), then refused.
        zero_copy: as :func:`make`'s.

    Returns:
        ShmVectorEnv: the attached pool; ``env.config`` is None.

    Raises:
        AttachError: no such pool (``code="not_found"``), not a shmatari
            segment (``"not_shmatari"``; a header still all zeros after 2 s
            too), another layout ABI major version (``"abi"``), another
            live client (``"busy"``, with its pid in ``client_pid``), a pool
            still starting, or a segment locked by another process, after
            ``timeout`` (``"timeout"``), a server or worker that died
            (``"server_dead"``, ``"worker"``) or a pool that is closing
            (``"closed"``), a segment this user should not trust
            (``"untrusted"``: another user's, a symbolic link, open to other
            users or sparse; docs/layout.md, "Trust"), or a system call that
            failed (``"system"``).
        TypeError: ``name`` is not a str, or ``timeout`` not a number
            (None, bool and str are refused).
        ValueError: an empty name, one with ``/`` or NUL, or one longer
            than 54 characters (a pool name; a segment name may have
            ``shmatari_`` before it); a ``timeout`` that is negative, NaN or
            infinite.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str such as 'demo', got {type(name).__name__}")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds (attach waits at most that "
                        f"long), got {type(timeout).__name__} {timeout!r}")
    if not 0 <= float(timeout) < math.inf:  # NaN fails both
        raise ValueError(f"timeout must be a finite number of seconds >= 0 (attach waits "
                         f"at most that long), got {timeout!r}")
    timeout = float(timeout)
    if "\0" in name:
        raise ValueError(f"name must not contain NUL characters, got {name!r}")
    return ShmVectorEnv._attach(name, timeout, bool(zero_copy))
