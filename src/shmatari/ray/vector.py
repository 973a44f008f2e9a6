"""shmatari.ray's vector env: the trainer's side, a client whose transport is Ray."""

from __future__ import annotations

import logging
import time
import weakref

import gymnasium as gym
import numpy as np
import ray
from gymnasium.vector import AutoresetMode

from .. import _core
from .. import config as _config
from ..client import (RESET_TIMEOUT, add_row_results, check_timeout, refusal, reset_args,
                      send_args)
from ..env import GYM_AUTORESET
from .._vector_extras import Closing
from ..errors import StepTimeoutError, WorkerError, check_usable
from . import cluster
from .node import LateCall, Node, NodeRestarted
from .wire import apply, unflatten, wire_bytes, zeros

__all__ = ["make", "RayVectorEnv"]

_log = logging.getLogger("shmatari")

#: Seconds between checks of the deadline while waiting for results.
_POLL = 0.5

#: Seconds a call sent again to an unavailable node is waited for past the deadline.
_RESEND_GRACE = 0.3
#: Deaths of a node's actor while its pool starts (Ray restarting it each
#: time, with restart_workers) after which the start fails.
_START_DEATHS = 3


def _deadline(timeout: float | None) -> float | None:
    """``time.monotonic()`` ``timeout`` seconds on; None for None or an
    infinite timeout (no limit: Ray's waits take no infinity)."""
    return None if timeout is None or timeout == float("inf") else time.monotonic() + timeout


def make(game: str, num_envs: int = 8, *, num_nodes=None, envs_per_node=None,
         batch_size: int | None = None, seed: int | None = None,
         restart_workers: bool = False, num_cpus_per_node: float = 1,
         max_restarts: int = -1, start_timeout: float = cluster.START_TIMEOUT,
         **options) -> "RayVectorEnv":
    """Creates a pool of Atari envs spread over the nodes of a Ray cluster.

    Connects to the cluster (``ray.init()``, which joins ``RAY_ADDRESS`` or
    starts a local one) if this process has not yet. Then one actor per node
    builds an ordinary local pool (:func:`shmatari.make`) of that node's envs.

    Args:
        game: as :func:`shmatari.make`'s ``env_id``.
        num_envs: envs in all (>= the number of nodes).
        num_nodes: where the actors go:

            - None (default): one actor on each alive node with at least
              ``num_cpus_per_node`` CPUs (a ``STRICT_SPREAD`` placement group);
            - an int: that many actors, one per node (``STRICT_SPREAD``);
            - a ``ray.util.placement_group.PlacementGroup``: one actor per
              bundle, in bundle order (each bundle must hold
              ``num_cpus_per_node`` CPUs);
            - a list of Ray node ids (``ray.nodes()[k]["NodeID"]``): one actor
              on each (hard node affinity).
        envs_per_node: None (default: divided evenly, in contiguous slices,
            sizes differing by at most 1), an int (every node; the product
            must be ``num_envs``) or a list of ints, one per node.
        batch_size: results per :meth:`RayVectorEnv.recv` (default
            ``num_envs``: synchronous). ``recv`` returns whichever envs'
            results reach the trainer first, from any node.
        seed: the pool seed, as :func:`shmatari.make`'s: env *i* has the
            streams of env *i* of a local pool with this seed, on any number
            of nodes. None draws fresh entropy once (``env.seed_entropy``).
        restart_workers: a dead actor is restarted by Ray (``max_restarts``)
            and rebuilds its pool; the local pools also replace their dead
            workers (see :func:`shmatari.make`). False: a dead actor raises
            WorkerError.
        num_cpus_per_node: CPUs each actor reserves (its placement bundle).
        max_restarts: with ``restart_workers``, Ray's ``max_restarts`` for
            each actor (-1: no limit).
        start_timeout: seconds to wait for the placement and the nodes' pools
            (a node Ray calls unavailable meanwhile is sent its start again
            until then, as a call in play is; one whose actor died three
            times while building its pool, Ray restarting it, fails make()).
        **options: the env options and the local pools' ``num_workers``
            (per node; default the node's cores) and ``start_method``, as
            :func:`shmatari.make` takes them. ``zero_copy`` is refused
            (observations are rebuilt on the trainer), as are ``batch_order``
            (a batch is the first node's to answer) and a ``render_mode``
            (the pool does not render).

    Returns:
        RayVectorEnv: a ``gymnasium.vector.VectorEnv``; call ``reset()`` first.

    Raises:
        TypeError, ValueError: a bad argument or option (before any actor
            starts), ``num_nodes`` above the cluster's alive nodes, or
            envs that do not divide as ``envs_per_node`` says.
        GetTimeoutError: the placement group was not ready in time.
        WorkerError: a node failed to build its pool, or its actor did not
            start within ``start_timeout`` (not scheduled: the message names
            the CPUs it needs; Ray still calling it unavailable then: the
            message says so).
    """
    if "zero_copy" in options:
        raise TypeError("zero_copy does not apply to shmatari.ray pools: observations are "
                        "rebuilt on the trainer from the frames the nodes send")
    if "batch_order" in options:
        raise TypeError("batch_order does not apply to shmatari.ray pools: a batch holds "
                        "the envs of whichever node answers first (for batches in a fixed "
                        "order, a local pool: shmatari.make(..., batch_order='fixed'))")
    if options.get("render_mode") is not None:
        raise TypeError("render_mode does not apply to shmatari.ray pools: they do not "
                        "render (a local pool does: shmatari.make(..., "
                        "render_mode='rgb_array'))")
    for name in ("env_index_offset", "pool_generation"):
        if name in options:
            raise TypeError(f"{name} is set by shmatari.ray for each node")
    num_workers = options.pop("num_workers", None)
    cfg = _config.build_config(game, num_envs, batch_size=batch_size, seed=seed,
                               restart_workers=restart_workers, **options)
    if num_workers is not None:
        cluster.check_count("num_workers", num_workers)
    max_restarts = int(max_restarts)
    if not ray.is_initialized():
        ray.init()
    strategies, pg = cluster.placement(num_nodes, num_cpus_per_node, start_timeout)
    try:
        sizes = cluster.split(cfg.num_envs, len(strategies), envs_per_node)
    except BaseException:
        if pg is not None:
            cluster.remove_placement_group(pg)
        raise
    return RayVectorEnv(cfg, sizes, strategies, pg, num_workers=num_workers,
                        num_cpus=num_cpus_per_node, max_restarts=max_restarts,
                        options=options, start_timeout=start_timeout)


class RayVectorEnv(Closing, gym.vector.VectorEnv):
    """Atari envs on the nodes of a Ray cluster, one local pool per node.

    The API, shapes and dtypes are :class:`shmatari.ShmVectorEnv`'s:
    observations uint8 ``(n, stack_num, img_height, img_width)`` (``(...,
    3)`` in RGB), oldest frame first; ``reward`` float32, ``terminated`` /
    ``truncated`` bool, ``(n,)``; the same ``info`` keys (``env_id`` int32
    global env indices, ``episode`` with ``_episode``, ``final_obs`` in
    same-step pools, ...). Every array returned is the caller's own.

    ``nodes`` describes each node: ``{"node": k, "env_ids": range, "node_id",
    "ip", "pid", "worker_pids", "segment_name", "restarts"}``; after a
    restart (the actor's, or a worker's inside the node) it holds the new
    pids, from the reply that reports the restart. Use it from one thread
    at a time. Make it with :func:`make`.

    Its calls are checked and recorded by the client state machine a local
    pool's client uses (``_core.ClientMachine``, C's ``client_state.h``),
    with Ray as its transport: every call sequence is accepted or refused
    alike, with the same texts (``tests/integration/test_ray_pool.py`` runs
    the stateful client test against it). A ``reset()`` of every env drains
    what is in flight first, as a local pool's does.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, cfg: _config.EnvConfig, sizes: list[int], strategies: list, pg,
                 *, num_workers, num_cpus, max_restarts, options, start_timeout):
        self.config = cfg
        self.num_envs, self.batch_size = cfg.num_envs, cfg.batch_size
        self.seed_entropy = cfg.seed
        self.closed = False
        self._broken: str | None = None
        self._actors: list = []
        self._created: list = []    # each actor's answer to ready(): it was created
        self._finalizer = weakref.finalize(self, cluster.shutdown, self._actors, pg,
                                           cluster.CLOSE_TIMEOUT, self._created)
        self._restart = cfg.restart_workers
        self._start_timeout = start_timeout
        self._num_cpus = num_cpus
        self._autoreset = cfg.autoreset_mode
        self.metadata = dict(type(self).metadata, autoreset_mode=GYM_AUTORESET[self._autoreset])
        self.autoreset_mode = self.metadata["autoreset_mode"]
        bounds = np.cumsum([0] + sizes)
        self._bounds = bounds
        remote = ray.remote(Node)
        try:
            for k, (strategy, n) in enumerate(zip(strategies, sizes)):
                args = dict(options, game=cfg.game, seed=cfg.seed,
                            restart_workers=cfg.restart_workers,
                            # A node answers a call when all its envs in it
                            # are done, taking them as they come: any subset
                            # of a node's envs may be sent (a local pool
                            # accepts every call sequence, so must a node).
                            batch_size=1,
                            num_workers=None if num_workers is None else min(num_workers, n))
                self._actors.append(remote.options(
                    num_cpus=num_cpus, scheduling_strategy=strategy,
                    max_restarts=max_restarts if cfg.restart_workers else 0,
                    max_task_retries=0).remote(k, int(bounds[k]), n, args))
                self._created.append(self._actors[-1].ready.remote())
            started = self._start_pools(dict.fromkeys(range(len(self._actors)), 0),
                                        time.monotonic() + self._start_timeout,
                                        first_ready=dict(enumerate(self._created)))
            metas = [started[k] for k in range(len(self._actors))]
        except BaseException:
            self.close()
            raise
        self.nodes = [dict(m, node=k, env_ids=range(int(bounds[k]), int(bounds[k + 1])),
                           restarts=0) for k, m in enumerate(metas)]
        shape, n_actions = tuple(metas[0]["obs_shape"]), metas[0]["n_actions"]
        self.single_observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.observation_space = gym.spaces.Box(0, 255, (self.num_envs,) + shape, np.uint8)
        self.single_action_space = gym.spaces.Discrete(n_actions)
        self.action_space = gym.spaces.MultiDiscrete(np.full(self.num_envs, n_actions))
        self._stacks = np.zeros((self.num_envs,) + shape, np.uint8)
        # The client state machine (client_state.h); Ray carries its commands.
        self._machine = _core.ClientMachine(self.num_envs, self.batch_size, n_actions,
                                            _core.AUTORESET_MODES[self._autoreset])
        self._last_ids = None       # env_id of the last batch returned
        self._inflight: dict = {}   # ObjectRef -> (seq, node, kind, args)
        self._seq = 0
        # seq -> (time.monotonic() its node was first unavailable, Ray's last error)
        self._unreachable: dict = {}
        self._ready: list = []      # decoded rows not yet returned
        self._ready_count = 0
        self.wire_bytes = 0         # bytes of arrays received from the nodes
        self.wire_rows = 0          # rows (env results) received

    # -- helpers -----------------------------------------------------------------
    def _start_pools(self, generations: dict, deadline: float, during: str = "starting",
                     first_ready: dict | None = None) -> dict:
        """Builds the pools of the nodes in ``generations`` (node ->
        ``start``'s generation: 0 in make(), the restart's number after a
        restart) at once, up to ``deadline`` (``time.monotonic()``); returns
        each node's answer to its start.

        Each node is first asked which process runs it (``Node.ready``;
        ``first_ready``: refs of that call already sent), then sent its
        start. A node Ray calls unavailable (ActorUnavailableError: the
        request or its answer lost, or the actor died and Ray restarts it)
        is asked again after 0.1 s, one pause for all such nodes of a
        round: the same process is sent its start again (a start that ran
        answers as it did, building nothing; until 2026-12-07 make()
        failed at once), another one means the actor died while its pool
        was starting, and after ``_START_DEATHS`` such deaths the node
        fails (a pool that kills its actor at every start was sent it
        until ``start_timeout``, Ray restarting it each time: 300 s by
        default, a review, 2026-12-07).

        Raises:
            WorkerError: a node's pool failed to start; its actor died (and
                Ray could not restart it, or it died ``_START_DEATHS``
                times while starting); past ``deadline``, the nodes that did
                not answer (not scheduled, or slow to start; a node Ray
                still called unavailable then is named as such).
        """
        pending: dict = {}      # ref -> (node, "ready" or "start")
        for k in generations:
            ref = first_ready[k] if first_ready else self._actors[k].ready.remote()
            pending[ref] = (k, "ready")
        pid_sent: dict = {}     # node -> the process its last start went to
        deaths = dict.fromkeys(generations, 0)
        metas: dict = {}
        unavailable: dict = {}  # node -> (time.monotonic() of Ray's first such word, its last)
        again: list = []        # nodes Ray called unavailable this round
        while pending or again:
            if again:  # one pause for every node asked again this round
                time.sleep(max(0.0, min(0.1, deadline - time.monotonic())))
                for k in again:
                    pending[self._actors[k].ready.remote()] = (k, "ready")
                again = []
            left = deadline - time.monotonic()
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, min(_POLL, left)))
            if done:
                done = ray.wait(list(pending), num_returns=len(pending), timeout=0)[0]
            for ref in done:
                k, what = pending.pop(ref)
                try:
                    answer = ray.get(ref)
                except ray.exceptions.ActorUnavailableError as exc:
                    now = time.monotonic()
                    since = unavailable.get(k, (now,))[0]
                    unavailable[k] = (since, exc)
                    if now >= deadline:
                        raise self._unavailable_at_start(k, now - since, exc,
                                                         during=during) from None
                    again.append(k)
                    continue
                except ray.exceptions.RayError as exc:
                    raise self._node_error(k, exc, during) from None
                if what == "start":
                    # (only a start's answer ends Ray's unavailable spell: the
                    # ready() between two lost starts answers, and clearing it
                    # there made a timeout read as an actor never scheduled,
                    # or give the time since the last loss: a flaky test)
                    unavailable.pop(k, None)
                    metas[k] = answer
                    continue
                pid = int(answer)
                if k in pid_sent and pid != pid_sent[k]:
                    deaths[k] += 1
                    if deaths[k] >= _START_DEATHS:
                        raise self._node_error_text(
                            k, f"died while {during} its pool {deaths[k]} times (Ray "
                               f"restarted its actor each time; the node's log says why)",
                            "")
                pid_sent[k] = pid
                pending[self._actors[k].start.remote(generations[k])] = (k, "start")
            if not done and pending and time.monotonic() >= deadline:
                late = sorted({k for k, _ in pending.values()})
                gone = [k for k in late if k in unavailable]
                if gone:
                    k = gone[0]
                    raise self._unavailable_at_start(
                        k, time.monotonic() - unavailable[k][0], unavailable[k][1],
                        resent=True, during=during)
                if during != "starting":
                    raise self._node_error_text(
                        late[0], f"did not build its pool within start_timeout="
                                 f"{self._start_timeout:g} s after Ray restarted its actor",
                        "")
                # Not a failed pool (it was reported as one: a Ray pass): the
                # actors were not scheduled, or their pools were slow to start.
                raise WorkerError.of(
                    "node(s) " + ", ".join(map(str, late)), None, range(self.num_envs),
                    f"did not start within start_timeout={self._start_timeout:g} s: Ray did "
                    f"not schedule their actors (each needs {self._num_cpus:g} CPU(s) free "
                    f"on its node: ray.available_resources()) or their pools were slow to "
                    f"start (a larger start_timeout)", worker=-1, label="node")
        return metas

    def _unavailable_at_start(self, k: int, waited: float, exc: BaseException,
                              resent: bool = False, during: str = "starting") -> WorkerError:
        """WorkerError: node ``k`` did not start (``during="starting"``, in
        make()) or rebuild its pool after a restart (``"restarting"``)
        within start_timeout, Ray calling it unavailable (``exc``, its last
        word) since ``waited`` seconds; ``resent``: the start sent again
        after that word has not answered (else Ray said it again at the
        timeout). Until 2026-12-07 both said "did not start"."""
        cause = getattr(exc, "cause", None)  # Ray's error, raised in the actor
        head = _core.printable(str(cause if cause is not None else exc).strip())
        head = head.partition("\n")[0] or type(exc).__name__
        did = "did not start" if during == "starting" else "did not restart its pool"
        if resent:
            what = (f"{did} within start_timeout={self._start_timeout:g} s: Ray said "
                    f"it was unavailable ({head}) from {waited:.1f} s before, and the start "
                    f"sent again has not answered")
        else:
            what = (f"{did}: Ray said it was unavailable for {waited:.1f} s, up to "
                    f"start_timeout={self._start_timeout:g} s ({head})")
        return self._node_error_text(k, what, "")

    def _node_error(self, k: int, exc: BaseException, during: str = "") -> WorkerError:
        cause = getattr(exc, "cause", None)
        if isinstance(exc, NodeRestarted) or isinstance(cause, NodeRestarted):
            # its actor died between calls and Ray restarted it: no pool's error
            return self._node_error_text(k, "died between calls (Ray restarted its actor, "
                                            "which has no pool)", "")
        if isinstance(cause, LateCall):
            # Never the answer to a call in flight: each is numbered at or
            # above every keep this trainer sent the node (see _submit).
            return self._node_error_text(k, "refused a call this trainer waits for, as a "
                                            "late copy (a bug of shmatari.ray): "
                                            + _core.printable(str(cause)), "")
        died = isinstance(exc, ray.exceptions.RayActorError)
        # The node's text, as a worker's, may carry escape sequences or bidi
        # controls (an error message quoting a file name, a ROM's text...).
        text = _core.printable(str(cause if cause is not None else exc).strip())
        head = text.splitlines()[0] if text else type(exc).__name__
        what = (f"{'died' if died else 'failed'}{' while ' + during if during else ''}: "
                + (head if died else f"its pool raised {head}"))
        # The node's own error, its env indices local to the node's pool.
        return self._node_error_text(k, what, "" if died else text)

    def _node_error_text(self, k: int, what: str, trace: str) -> WorkerError:
        """WorkerError naming node ``k`` (-1: unknown), where it runs and its
        envs, saying ``what``, with the node's ``trace`` ("": none)."""
        if k < 0:
            return WorkerError.of("a node", None, range(self.num_envs), what, worker=-1,
                                  traceback=trace, label="node")
        nodes, where = getattr(self, "nodes", None), ""
        if nodes:
            where = f" on Ray node {nodes[k]['node_id']} ({nodes[k]['ip']})"
        return WorkerError.of(f"node {k}", nodes[k]["pid"] if nodes else None,
                              range(int(self._bounds[k]), int(self._bounds[k + 1])), what,
                              worker=k, traceback=trace, where=where, label="node")

    def _break(self, err: WorkerError) -> WorkerError:
        """Marks the pool broken by ``err`` (returned, to raise)."""
        self._broken = str(err)
        self._machine.client_break()
        return err

    @property
    def _pending(self) -> int:
        """Envs with a command whose result was not returned (the state machine's count)."""
        return self._machine.pending

    def _refused(self, code: int) -> None:
        if code != _core.OK:
            raise refusal(self._machine, code)

    def _usable(self) -> None:
        if not self.closed and self._broken is None and not ray.is_initialized():
            # ray.shutdown() with the pool open: the next call started a new
            # local Ray instance, failed with a bare Exception and left the
            # envs "running" (a Ray pass, 2026-12-07)
            self._break(WorkerError.of(
                "a node", None, range(self.num_envs),
                "is gone: Ray was shut down (ray.shutdown()) while this pool was open, "
                "and its actors with it (a new pool needs ray.init() again)",
                worker=-1, label="node"))
        check_usable(self.closed, self._broken)

    def _submit(self, k: int, kind: str, args: tuple, seq: int | None = None) -> None:
        """Sends node ``k`` a command (``seq``: a call sent again keeps its number)."""
        actor = self._actors[k]
        if seq is None:
            seq = self._seq = self._seq + 1
        # the node keeps the answers from its oldest call unanswered on (Node.call)
        keep = min([v[0] for v in self._inflight.values() if v[1] == k] + [seq])
        try:
            ref = actor.call.remote(seq, keep, kind, args)
        except Exception as exc:  # noqa: BLE001 - Ray refused the call (its actor is gone)
            text = _core.printable(str(exc).strip()).partition("\n")[0]
            raise self._break(WorkerError.of(
                f"node {k}", self.nodes[k]["pid"] if getattr(self, "nodes", None) else None,
                range(int(self._bounds[k]), int(self._bounds[k + 1])),
                f"cannot be called: Ray refused the call ({text or type(exc).__name__}; "
                f"after ray.shutdown() and ray.init(), a pool of the old cluster is gone)",
                worker=k, label="node")) from None
        self._inflight[ref] = (seq, k, kind, args)

    # -- the async API -------------------------------------------------------------
    def send(self, actions, env_id=None) -> None:
        """Sends actions to envs that are waiting for one.

        Args:
            actions: integer action indices, shape ``(n,)``.
            env_id: int env indices ``(n,)`` (global), no duplicates; default
                every env.

        Raises:
            TypeError: non-integer actions or env ids.
            ValueError: wrong shapes, out-of-range actions or ids, duplicates.
            CallOrderError: an env is still running, reset() was not called,
                or (``autoreset_mode="disabled"``) an env's episode ended.
            PoolClosedError: the pool is closed or broken.
        """
        self._usable()
        self._send(actions, env_id)

    def _send(self, actions, env_id, step: bool = False) -> None:
        acts, ids = send_args(actions, env_id, self.num_envs, self.batch_size, self._last_ids)
        self._refused(self._machine.accept_send(acts, ids, step))
        ids = np.arange(self.num_envs) if ids is None else ids.astype(np.int64)
        node = np.searchsorted(self._bounds, ids, side="right") - 1
        for k in np.unique(node):
            sel = node == k
            local = (ids[sel] - self._bounds[k]).astype(np.int32)
            self._submit(int(k), "step", (local, acts[sel]))

    def async_reset(self, seed: int | None = None, options: dict | None = None,
                    timeout: float | None = RESET_TIMEOUT) -> None:
        """Resets envs without waiting for their observations; collect the
        results with :meth:`recv`. A reset of every env first waits, up to
        ``timeout`` seconds, for the commands in flight (their results
        dropped), as :meth:`reset`.

        Raises:
            As :meth:`reset`.
        """
        timeout = check_timeout(timeout)
        self._usable()
        self._async_reset(seed, options, _deadline(timeout))

    def _async_reset(self, seed, options, deadline=None) -> None:
        cmd, bits, seed = reset_args(seed, options, self.num_envs)
        self._refused(self._machine.check_reset(cmd, bits))
        mask = None if bits is None else bits.view(bool)
        if mask is None:
            self._drain(deadline)
            idle = np.ones(self.num_envs, bool)
        else:
            idle = (self._machine.env_flags() & _core.ENV_RUNNING) == 0
        if seed is not None:
            self.seed_entropy = seed
        for k in range(len(self._actors)):
            b, e = self._bounds[k], self._bounds[k + 1]
            if mask is None:
                self._submit(k, "reset", (None, None, seed))
            elif idle[b:e].any():  # masked envs reset, the others not running observed
                self._submit(k, "reset", (mask[b:e] & idle[b:e], ~mask[b:e] & idle[b:e], None))
        self._machine.accept_reset(bits)

    def _drain(self, deadline: float | None = None) -> None:
        """Drops what is in flight (a reset of every env): waits for the
        nodes' answers, keeps their frames (the stacks the nodes now hold)
        and drops their rows. Past ``deadline`` (``time.monotonic()``; None:
        none) it raises StepTimeoutError, nothing dropped (the answers
        received stay for recv(), the others in flight): a node alive but
        stuck held reset() with no limit (a Ray pass, 2026-12-07)."""
        while self._inflight:
            ref = min(self._inflight, key=lambda r: self._inflight[r][0])
            if deadline is not None:
                while not ray.wait([ref], timeout=min(_POLL, max(
                        0.0, deadline - time.monotonic())))[0]:
                    if time.monotonic() < deadline:
                        continue
                    if self._unreachable_past(deadline):
                        break  # its answer taken, or restarted: choose the oldest again
                    k = self._inflight[ref][1]
                    raise StepTimeoutError(
                        f"reset() waited for the commands in flight past its timeout: node "
                        f"{k} (envs {int(self._bounds[k])}..{int(self._bounds[k + 1]) - 1}) "
                        f"has not answered; nothing was dropped or reset (reset() again, or "
                        f"close() the pool)")
                else:
                    self._receive(ref, deadline)
                continue  # (its node restarted meanwhile, or another call answered)
            self._receive(ref, deadline)
        self._ready, self._ready_count = [], 0

    def recv(self, timeout: float | None = None):
        """Waits for the next ``batch_size`` results, from whichever nodes answer first.

        Returns:
            (obs, reward, terminated, truncated, info): as
            :meth:`shmatari.ShmVectorEnv.recv`; ``obs`` uint8 ``(batch_size,
            *single_observation_space.shape)``; in a synchronous pool rows
            are in env order, else ``info["env_id"]`` (int32) names them.

        Args:
            timeout: seconds to wait at most (None: until results come or a
                node is reported dead).

        Raises:
            StepTimeoutError: ``timeout`` passed; nothing was taken.
            CallOrderError: fewer than ``batch_size`` envs are running.
            WorkerError: a node's actor died (as soon as Ray reports it), or
                its pool failed, naming the node and its envs; with
                ``restart_workers`` only if its restart fails. A node Ray
                calls unavailable (ActorUnavailableError: a network blip,
                a restart) is sent its calls again, each answered once,
                and is dead only if Ray calls it unavailable again at or
                past ``timeout`` (no timeout: ``start_timeout`` after its
                first such error); a call sent again that is only slow ends
                in StepTimeoutError.
            PoolClosedError: the pool is closed or broken.
        """
        self._usable()
        return self._recv(check_timeout(timeout))

    def _recv(self, timeout: float | None, caller: str = "recv", asked: float | None = None):
        """``asked``: the timeout the caller was given, for the message
        (``timeout`` is what is left of it)."""
        self._refused(self._machine.check_wait())
        deadline = _deadline(timeout)
        asked = timeout if asked is None else asked
        while self._ready_count < self.batch_size:
            wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))
            if not self._inflight:
                # Nothing more can come (a reply lost its rows): waiting would never end.
                raise self._break(WorkerError.of(
                    "a node", None, range(self.num_envs),
                    f"left {self.batch_size - self._ready_count} result(s) of this batch "
                    f"unanswered with nothing in flight; the pool is broken: close() it",
                    worker=-1, label="node"))
            done, _ = ray.wait(list(self._inflight), num_returns=1, timeout=wait)
            if done and len(self._inflight) > 1:
                done = sorted(ray.wait(list(self._inflight), num_returns=len(self._inflight),
                                       timeout=0)[0], key=lambda r: self._inflight[r][0])
            for ref in done:
                if ref in self._inflight:
                    self._receive(ref, deadline)
            if not done and deadline is not None and time.monotonic() >= deadline:
                if self._unreachable_past(deadline):
                    continue  # a resent call's answer taken, or its node restarted: wait again
                raise StepTimeoutError(
                    f"{caller}() got no {self.batch_size} result(s) within {asked:g} s; "
                    f"nothing was taken: the results come with recv() (or close() the pool)")
        return self._take_batch()

    def _receive(self, ref, deadline: float | None = None) -> None:
        """Takes the answer of call ``ref``; ``deadline``: the caller's
        (``time.monotonic()``, None: none), how long a node Ray calls
        unavailable is waited for."""
        # Taken out of _inflight once ray.get has answered: a Ctrl-C while it
        # waits (reset()'s drain) leaves the call in flight, as the local
        # pool's reset() does. Popped before, its reply was lost: the next
        # recv() broke the pool ("left N result(s) unanswered with nothing
        # in flight"), though the node had answered.
        seq, k, kind, args = self._inflight[ref]
        try:
            packet = ray.get(ref)
        except ray.exceptions.ActorUnavailableError as exc:
            # Before RayActorError (its base): not a dead actor (a network
            # blip, or Ray restarting it), taken for one until 2026-12-07.
            self._unavailable(k, exc, (seq, kind, args), deadline, ref)
            return
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError,
                ray.exceptions.OwnerDiedError) as exc:
            del self._inflight[ref]
            self._node_died(k, exc, (seq, kind, args))
            return
        except ray.exceptions.RayError as exc:  # the node's method raised
            del self._inflight[ref]
            if isinstance(exc, NodeRestarted) or isinstance(getattr(exc, "cause", None),
                                                             NodeRestarted):
                # Ray restarted the actor while no call was in flight (a
                # trainer between steps): a fresh actor with no pool. It was
                # taken for a failed pool, which broke the pool even with
                # restart_workers (a Ray pass, 2026-12-07).
                self._node_died(k, exc, (seq, kind, args))
                return
            raise self._break(self._node_error(k, exc)) from None
        del self._inflight[ref]
        self._unreachable.pop(seq, None)
        problem = self._malformed(packet, k, kind, args)
        if problem:
            raise self._break(WorkerError.of(
                f"node {k}", self.nodes[k]["pid"],
                range(int(self._bounds[k]), int(self._bounds[k + 1])),
                f"sent a malformed reply to {kind}(): {_core.printable(problem)}; the pool "
                f"is broken (its envs' results are lost): close() it", worker=k,
                label="node")) from None
        self.wire_bytes += wire_bytes(packet)
        self.wire_rows += len(packet["env_id"])
        pids = packet.pop("~worker_pids", None)
        if pids is not None:  # the node's pool replaced a worker
            self.nodes[k]["worker_pids"] = pids.tolist()
        self._decode(packet, kind, args)

    def _malformed(self, packet, k: int, kind: str, args: tuple) -> str:
        """What is wrong with node ``k``'s reply to a call (``kind``,
        ``args``), or "": it must answer each env of the call once (env ids
        of that node) and nothing else, with arrays of one row per env and
        the frames' shape and dtype. A reply is the node's, and the node's
        Ray actor is trusted code, but a node of another shmatari version or
        options, or a bug, must not write other envs' stacks (a negative env
        id indexes from the end), nor lose rows (the next recv() would wait
        for them forever), nor hand the trainer arrays of another shape."""
        if not isinstance(packet, dict):
            return f"a {type(packet).__name__}, not a dict of arrays"
        for key, v in packet.items():
            if not isinstance(key, str):
                return f"a key {key!r} that is not a str"
            if not isinstance(v, np.ndarray) or v.ndim < 1 or v.dtype.hasobject:
                got = f"dtype {v.dtype}, ndim {v.ndim}" if isinstance(v, np.ndarray) \
                    else type(v).__name__
                return f"{key!r} is not an array of numbers of one row per env (got {got})"
        for key in ("env_id", "~op", "~frames"):
            if key not in packet:
                return f"no {key!r}"
        ids = packet["env_id"]
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            return f"env_id of shape {ids.shape} and dtype {ids.dtype}, not int (n,)"
        n = len(ids)
        b, e = int(self._bounds[k]), int(self._bounds[k + 1])
        if kind == "step":
            want = np.asarray(args[0], np.int64) + b
        elif args[0] is None:
            want = np.arange(b, e)
        else:
            want = np.flatnonzero(np.asarray(args[0], bool) | np.asarray(args[1], bool)) + b
        if n and not np.array_equal(np.sort(ids.astype(np.int64)), np.sort(want)):
            return (f"rows of env(s) {ids[:16].tolist()}{' ...' if n > 16 else ''} "
                    f"answering a call to env(s) {want[:16].tolist()}"
                    f"{' ...' if want.size > 16 else ''}")
        if not n and want.size:
            return f"no rows, answering a call to {want.size} env(s)"
        stack = self._stacks.shape[1:]
        want_shape = {"~op": (n,), "~frames": (n,) + stack[1:]}
        op = packet["~op"]
        if op.shape == (n,):
            want_shape["~full"] = (int((op == 3).sum()),) + stack
        if "~fop" in packet or "~fframes" in packet:
            m = packet.get("_final_obs")
            if m is None or m.dtype != bool or m.shape != (n,):
                return "final frames without a bool _final_obs of one row per env"
            want_shape["~fop"] = (int(m.sum()),)
            want_shape["~fframes"] = (int(m.sum()),) + stack[1:]
            fop = packet.get("~fop")
            if fop is not None and fop.shape == want_shape["~fop"]:
                want_shape["~ffull"] = (int((fop == 3).sum()),) + stack
        for key, shape in want_shape.items():
            v = packet.get(key)
            if v is None:
                if key in ("~full", "~ffull") and not shape[0]:
                    continue
                return f"no {key!r}"
            if v.shape != shape or v.dtype != np.uint8:
                return f"{key!r} of shape {v.shape} and dtype {v.dtype}, not uint8 {shape}"
        if (op > 3).any() or ("~fop" in packet and (packet["~fop"] > 3).any()):
            return "a frame code that is none of OP_SHIFT, OP_FILL, OP_KEEP, OP_FULL"
        for key, kinds in (("~reward", "f"), ("~terminated", "b"), ("~truncated", "b"),
                           ("~observed", "b"), ("_final_obs", "b")):
            if key in packet and packet[key].dtype.kind not in kinds:
                return f"{key!r} of dtype {packet[key].dtype}"
            if key not in packet and key in ("~reward", "~terminated", "~truncated"):
                return f"no {key!r}"
        pids = packet.get("~worker_pids")
        if pids is not None and (pids.ndim != 1 or pids.dtype.kind not in "iu"
                                 or not pids.size or (pids < 0).any()):
            return f"'~worker_pids' of shape {pids.shape} and dtype {pids.dtype}, not pids"
        for key, v in packet.items():
            if key not in want_shape and key != "~worker_pids" and len(v) != n:
                return f"{key!r} has {len(v)} rows, the reply {n}"
        return ""

    def _unavailable(self, k: int, exc: BaseException, call: tuple,
                     deadline: float | None, ref=None) -> None:
        """Node ``k``'s answer to ``call`` (seq, kind, args; ``ref``: its
        ObjectRef, in flight until the call is sent again) is Ray's
        ActorUnavailableError. Sends the call again after 0.1 s; the node is
        dead once Ray has said so again past ``deadline`` (None: the pool's
        ``start_timeout`` from the first time): a first word is always
        followed by one resend."""
        seq, kind, args = call
        if any(v[0] == seq and r != ref for r, v in self._inflight.items()):
            self._inflight.pop(ref, None)  # sent again already (an interrupted resend)
            return
        now = time.monotonic()
        first = seq not in self._unreachable
        since = self._unreachable.get(seq, (now,))[0]
        self._unreachable[seq] = (since, exc)
        limit = since + self._start_timeout if deadline is None else deadline
        if now >= limit and not first:
            self._inflight.pop(ref, None)
            self._unreachable.pop(seq, None)
            cause = getattr(exc, "cause", None)  # Ray's error, raised in the actor
            head = _core.printable(str(cause if cause is not None else exc).strip())
            head = head.partition("\n")[0]
            waited = (f"the call's timeout" if deadline is not None else
                      f"start_timeout={self._start_timeout:g} s (the call has no timeout)")
            self._node_died(k, exc, call, self._node_error_text(
                k, f"died: Ray said it was unavailable for {now - since:.1f} s, past "
                   f"{waited} ({head or type(exc).__name__})", ""))
            return
        time.sleep(max(0.0, min(0.1, limit - now)))
        self._submit(k, kind, args, seq)
        self._inflight.pop(ref, None)

    def _unreachable_past(self, deadline: float) -> bool:
        """At ``deadline`` (passed): a call sent again to a node Ray called
        unavailable and not answered since is given a moment (_RESEND_GRACE)
        for Ray's word; unavailable again, the node is dead. True: an answer
        was taken (or the node restarted); False: none came (the caller's
        StepTimeoutError: the call stays in flight, a pending call is not
        an unavailable one)."""
        late = [r for r, v in self._inflight.items() if v[0] in self._unreachable]
        if not late:
            return False
        ref = min(late, key=lambda r: self._inflight[r][0])
        if not ray.wait([ref], timeout=_RESEND_GRACE)[0]:
            return False
        self._receive(ref, deadline)
        return True

    def _node_died(self, k: int, exc: BaseException, call: tuple,
                   err: WorkerError | None = None) -> None:
        """Raises WorkerError (``err``, default the one ``exc`` says), or
        restarts node ``k`` and resends its calls."""
        err = self._node_error(k, exc) if err is None else err
        for s in [c[0] for c in self._inflight.values() if c[1] == k] + [call[0]]:
            self._unreachable.pop(s, None)
        if not self._restart:
            raise self._break(err)
        # (call may be in flight still: sent again to a node unavailable past the timeout)
        calls = [call] + [(s, kind, a) for r, (s, n, kind, a) in self._inflight.items()
                          if n == k and s != call[0]]
        dropped = [r for r, v in self._inflight.items() if v[1] == k]
        for r in dropped:
            del self._inflight[r]
        node = self.nodes[k]
        node["restarts"] += 1
        try:  # Ray may still be restarting the actor: unavailable for a moment
            meta = self._start_pools({k: node["restarts"]},
                                     time.monotonic() + self._start_timeout,
                                     "restarting")[k]
        except WorkerError as again:
            # Out of restarts (max_restarts), died again while starting, or failed.
            _log.warning("%s; its restart failed", str(err).partition("\n")[0])
            raise self._break(again) from None
        node.update(meta)
        _log.warning("%s; restarted (restart %d of this node)",
                     str(err).partition("\n")[0], node["restarts"])
        for r in dropped:
            # Their answers are errors (the dead actor's, or NodeRestarted);
            # taken here, Ray does not log them as unhandled.
            try:
                ray.get(r, timeout=0)
            except Exception:  # noqa: BLE001 - expected: the calls are sent again below
                pass
        for seq, kind, args in sorted(calls, key=lambda c: c[0]):
            self._submit(k, kind, args, seq)

    def _row_not_an_answer(self, e: int, flags: int, row: int) -> None:
        """Raises WorkerError naming the node of env ``e``, whose row ``row``
        (its ``flags``) does not answer the command this client sent it."""
        why = self._machine.row_problem(e, flags)
        # e is one of the call's envs (_malformed checked the reply's ids)
        k = min(max(int(np.searchsorted(self._bounds, e, side="right")) - 1, 0),
                len(self.nodes) - 1)
        raise self._break(WorkerError.of(
            f"node {k}", self.nodes[k]["pid"],
            range(int(self._bounds[k]), int(self._bounds[k + 1])),
            f"sent a row (row {row} of the batch) for env {e} {why}; the pool is broken (its envs' results are "
            f"lost): close() it", worker=k, label="node")) from None

    def _decode(self, packet: dict, kind: str, args: tuple) -> None:
        ids = packet.pop("env_id").astype(np.int64)
        if not ids.size:
            return  # a reply with no rows
        # A node's envs in order (every synchronous reply): a view, no gather.
        where = ids
        if ids.size and ids[-1] - ids[0] + 1 == ids.size and (np.diff(ids) == 1).all():
            where = slice(int(ids[0]), int(ids[-1]) + 1)
        old = self._stacks[where]
        obs = apply(packet.pop("~op"), packet.pop("~frames"), packet.pop("~full", None), old)
        final = None
        if "~fop" in packet:
            m = packet["_final_obs"]
            final = np.zeros_like(obs)
            final[m] = apply(packet.pop("~fop"), packet.pop("~fframes"),
                              packet.pop("~ffull", None), old[m])
        self._stacks[where] = obs
        packet["env_id"] = ids.astype(np.int32)
        self._ready.append({"obs": obs, "final": final, "cols": packet})
        self._ready_count += len(ids)

    def _take_batch(self):
        chunks, self._ready = self._ready, []
        if len(chunks) == 1:
            # copies: the columns are Ray's deserialized, read-only buffers
            # (a local pool's arrays are the caller's own; `reward *= 0.5`
            # failed on one node and worked on two: a Ray pass, 2026-12-07)
            cols = {k: np.array(v) for k, v in chunks[0]["cols"].items()}
            obs, fobs = chunks[0]["obs"], chunks[0]["final"]
        else:
            like = {}  # a column of each field, for the rows a chunk lacks
            for c in chunks:
                for k, v in c["cols"].items():
                    like.setdefault(k, v)
            n = [len(c["obs"]) for c in chunks]
            cols = {k: np.concatenate([c["cols"].get(k, zeros(m, v))
                                       for c, m in zip(chunks, n)])
                    for k, v in like.items()}
            obs = np.concatenate([c["obs"] for c in chunks])
            has_final = any(c["final"] is not None for c in chunks)
            fobs = np.concatenate([np.zeros_like(c["obs"]) if c["final"] is None else c["final"]
                                   for c in chunks]) if has_final else None
        B = self.batch_size
        if B == self.num_envs and (np.diff(cols["env_id"]) < 0).any():
            order = np.argsort(cols["env_id"], kind="stable")
            cols = {k: v[order] for k, v in cols.items()}
            obs = obs[order]
            fobs = None if fobs is None else fobs[order]
        rest = obs.shape[0] - B
        if rest:
            self._ready = [{"obs": obs[B:], "final": None if fobs is None else fobs[B:],
                            "cols": {k: v[B:] for k, v in cols.items()}}]
            obs, fobs = obs[:B], None if fobs is None else fobs[:B]
            cols = {k: v[:B] for k, v in cols.items()}
        self._ready_count = rest
        env_id = cols["env_id"]
        reward = cols.pop("~reward")
        terminated, truncated = cols.pop("~terminated"), cols.pop("~truncated")
        observed = cols.pop("~observed", np.zeros(B, bool))
        # each row's flags, as a local pool's worker writes them: checked
        # against the command this client sent (shmatari_row_mismatch)
        flags = (observed.astype(np.uint32) * _core.FLAG_OBSERVED
                 | cols["reset"].astype(np.uint32) * _core.FLAG_RESET
                 | cols["worker_restarted"].astype(np.uint32) * _core.FLAG_RESTARTED)
        if "_final_obs" in cols:  # a same-step pool's rows with a final record
            flags |= cols["_final_obs"].astype(np.uint32) * _core.FLAG_FINAL
        bad = self._machine.accept_rows(env_id, flags, terminated.view(np.uint8),
                                        truncated.view(np.uint8))
        if bad < B:
            # A row whose flags do not answer the command sent (a reset's
            # flag on a step whose episode had not ended, an observation for
            # a step): handed out, the trainer would take it for the env's
            # result, and the env would stay "in flight" in the client's
            # state (until 2026-12-06 the return was ignored).
            self._row_not_an_answer(int(env_id[bad]), int(flags[bad]), bad)
        self._last_ids = env_id
        if "_episode" in cols and not cols["_episode"].any():
            cols = {k: v for k, v in cols.items()
                    if not (k.startswith("episode/") or k == "_episode")}
        if "_final_obs" in cols and not cols["_final_obs"].any():
            cols = {k: v for k, v in cols.items()
                    if not (k.startswith("final_info/") or k in ("_final_obs", "_final_info"))}
        info = unflatten(cols)
        if "_final_obs" in info:
            objs = np.full(B, None, dtype=object)
            for j in np.flatnonzero(info["_final_obs"]):
                objs[j] = fobs[j]
            info["final_obs"] = objs
        return obs, reward, terminated, truncated, info

    # -- the Gymnasium API -----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None,
              timeout: float | None = RESET_TIMEOUT):
        """Resets every env (or those in ``options["reset_mask"]``), as
        :meth:`shmatari.ShmVectorEnv.reset`.

        Returns:
            (obs, info): ``obs`` uint8 ``(num_envs, *single_observation_space.shape)``
            in a synchronous pool; else the first ``batch_size`` envs ready.
            With a ``reset_mask``, ``info`` also holds each row's
            ``reward``, ``terminated`` and ``truncated``, as a local pool's.

        A reset of every env first drops what is in flight (the results of
        a ``send()`` not received), as a local pool's reset does.

        Args:
            seed, options: as :meth:`shmatari.ShmVectorEnv.reset`.
            timeout: seconds the whole reset may take at most (the commands
                in flight, then the first observations); default
                :data:`shmatari.client.RESET_TIMEOUT` (60 s), None: no limit.

        Raises:
            CallOrderError: a ``reset_mask`` naming an env still running, or
                before the first reset of every env.
            TypeError, ValueError: a bad seed, options or timeout.
            StepTimeoutError: ``timeout`` passed: waiting for the commands
                in flight, nothing was dropped or reset; waiting for the
                observations, the resets are in flight (``recv()`` takes
                them, or ``reset()`` again).
            WorkerError: a node died or failed.
        """
        timeout = check_timeout(timeout)
        self._usable()
        deadline = _deadline(timeout)
        self._async_reset(seed, options, deadline)
        obs, reward, terminated, truncated, info = self._recv(
            None if deadline is None else max(0.0, deadline - time.monotonic()), "reset",
            timeout)
        add_row_results(info, options, reward, terminated, truncated)
        return obs, info

    def step(self, actions, env_id=None, timeout: float | None = None):
        """Steps the envs once: ``send(actions, env_id)`` then ``recv(timeout)``.

        Returns:
            (obs, reward, terminated, truncated, info), as :meth:`recv`.

        Raises:
            As :meth:`send` and :meth:`recv`.
        """
        timeout = check_timeout(timeout)
        self._usable()
        self._send(actions, env_id, step=True)
        return self._recv(timeout)

    # -- lifetime ------------------------------------------------------------------
    def close(self, **kwargs) -> None:
        """Closes every node's pool (workers stopped, segments removed), kills
        the actors and removes the placement group this pool made. Idempotent.
        It waits for the nodes' pools to close up to
        ``shmatari.ray.cluster.CLOSE_TIMEOUT`` (10 s), not for an actor Ray
        never created (not scheduled: killed at once)."""
        self.closed = True
        self._finalizer()

    def close_extras(self, **kwargs) -> None:
        self._finalizer()

    def __repr__(self) -> str:
        return (f"RayVectorEnv({self.config.game!r}, num_envs={self.num_envs}, "
                f"batch_size={self.batch_size}, nodes={len(self._bounds) - 1}, "
                f"{'closed' if self.closed else 'open'})")

    @property
    def actors(self) -> list:
        """The nodes' Ray actor handles, in node order."""
        return list(self._actors)
