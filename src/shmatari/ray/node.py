"""shmatari.ray's node actor: one node's local pool, served to the trainer."""

from __future__ import annotations

import functools
import os
import re
import traceback

import numpy as np
import ray

from ..errors import WorkerError
from .wire import KEPT_FIELDS, delta, merge, order, rows, take, zeros

#: A WorkerError's head, ``"worker 3 (pid 7, envs 0..1)"`` (WorkerError.of).
_ENVS = re.compile(r"\(pid [^,()\n]*, envs (\d+)\.\.(\d+)\)")

#: Restart phases of an env on its node (see Node).
_LIVE, _AFTER_RESTART_ROW, _FRESH = 0, 1, 2


class NodeRestarted(RuntimeError):
    """A command reached a node actor that Ray restarted and that has no pool
    yet (its ``start`` not called since): the trainer restarts the node
    (``RayVectorEnv._node_died``) and sends the command again."""


class LateCall(RuntimeError):
    """A call reached its node after the trainer had received the answers of
    every call to that node up to a later one (a copy of a call that Ray
    delivered late, after the call sent again in its place was answered):
    not run, since it would run a second time (step its envs again, or
    rebuild the pool the trainer plays, for a start). The trainer waits
    for no such call, so this answer reaches no one; were it ever the answer
    to a call in flight, the trainer would break the pool with it (a node's
    error), not take it for rows."""


class _Raised:
    """A call's error answer, kept (``Node.replies``) to be raised again."""

    __slots__ = ("exc", "tb")

    def __init__(self, exc: BaseException):
        self.exc, self.tb = exc, exc.__traceback__


def _global_envs(exc: BaseException, begin: int) -> str:
    """``str(exc)``, a WorkerError's env range (its local pool's indices,
    ``0..count-1``) written as the trainer's global env ids (``begin +``
    each); any other text as it is."""
    text = str(exc)
    ids = getattr(exc, "env_ids", None) if isinstance(exc, WorkerError) else None
    if not begin or not isinstance(ids, range) or not ids:
        return text
    head, nl, rest = text.partition("\n")
    m = _ENVS.search(head)
    if m is None or (int(m[1]), int(m[2])) != (ids.start, ids.stop - 1):
        return text
    return (head[:m.start(1)] + f"{ids.start + begin}..{ids.stop - 1 + begin}"
            + head[m.end(2):] + nl + rest)


def _reported(method):
    """Re-raises what a node's method raises as a plain RuntimeError holding
    its type, message and traceback: shmatari's exceptions take keyword
    arguments, which Ray cannot rebuild on the trainer's side. A
    WorkerError of the node's pool names its envs by the trainer's global
    env ids (the pool's own are local: 0.. on every node).
    ``NodeRestarted`` and ``LateCall`` go as they are, for the trainer to
    tell them apart."""
    @functools.wraps(method)
    def wrapper(self, *args):
        if method.__name__ != "start" and self.env is None:
            raise NodeRestarted(f"node {self.node}'s actor was restarted by Ray and has no "
                                f"pool yet")
        try:
            return method(self, *args)
        except (NodeRestarted, LateCall):
            raise
        except Exception as exc:  # noqa: BLE001 - sent to the trainer
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            local = str(exc)  # read once
            said = _global_envs(exc, self.begin)
            if said != local:
                text = text.replace(local, said)
            raise RuntimeError(f"{type(exc).__name__}: {said}\n--- traceback ---\n{text}") \
                from None
    return wrapper


class Node:
    """One node's local pool, served to the trainer (runs inside a Ray actor).

    Its methods run one at a time (a Ray actor's default), each answering
    with one packet: a dict of NumPy arrays (see the module docstring).
    """

    def __init__(self, node: int, begin: int, count: int, pool_args: dict):
        self.node, self.begin, self.count = node, begin, count
        self.args = dict(pool_args)
        self.env = None
        self.generation = -1     # the pool's (start's argument); -1: none built
        self.newest = -1         # the highest generation start() was sent
        self.started: dict = {}  # start's answer for that pool
        # seq -> the answer (a packet, or _Raised) of a call the trainer may ask again
        self.replies: dict = {}
        self.kept_from = 0       # the highest keep seen: every call below it was answered

    # The pool's workers start with the local pool's default: zygote on
    # Linux (forked from a clean helper that never imports the actor's
    # __main__, Ray's worker script), spawn elsewhere (which imports that
    # script again as __mp_main__; it keeps its body under
    # `if __name__ == "__main__":`, so the import runs nothing). fork is
    # avoided: the actor runs Ray's threads (gRPC, the core worker), and a
    # child forked from a threaded process may inherit a held lock.

    def ready(self) -> int:
        """The actor's process id: it exists (its first call, answered once
        Ray has created it; close() waits only for the nodes that
        answered). The trainer asks again after Ray calls a start
        unavailable: another pid means Ray restarted the actor, which died
        while its pool was starting."""
        return os.getpid()

    @_reported
    def start(self, generation: int) -> dict:
        """Builds the pool (again, after a restart: ``generation`` >= 1).
        Sent again with the generation of the pool it built (its answer
        lost: Ray's ActorUnavailableError), it answers as it did the first
        time, building nothing.

        Raises:
            LateCall: ``generation`` is below one sent before (a copy Ray
                delivered late: built, it would close the pool the trainer
                plays and start its envs' streams over); nothing built.

        Returns:
            dict: the spaces and where the node runs (``node_id``, ``ip``,
            ``pid``, ``worker_pids``, ``segment_name``).
        """
        import shmatari

        if generation < self.newest:
            raise LateCall(f"node {self.node} refused start({generation}): start("
                           f"{self.newest}) came before it, so it is a late copy; nothing "
                           f"built")
        self.newest = generation
        if self.env is not None and generation == self.generation:
            return dict(self.started)
        if self.env is not None:
            self.env.close()
            self.env, self.generation = None, -1
        # answers of the old pool's calls; kept_from stays: a late copy of
        # one of them is refused still (the trainer sends its calls in
        # flight again, each at or above every keep it sent)
        self.replies = {}
        args = dict(self.args)
        game = args.pop("game")
        self.env = shmatari.make(game, self.count, env_index_offset=self.begin,
                                 pool_generation=generation, **args)
        self.autoreset = self.env.config.autoreset_mode
        shape = self.env.single_observation_space.shape
        self.prev = np.zeros((self.count,) + shape, np.uint8)
        self.has_prev = np.zeros(self.count, bool)
        self.last = {k: np.zeros(self.count, np.int64) for k in KEPT_FIELDS}
        self.last_ram = None  # (count, 128): each env's RAM after its last row (ram_info)
        self.dtypes: dict = {}
        self.like: dict = {}  # a column of each field, for its rows' shape
        self.phase = np.full(self.count, _FRESH if generation else _LIVE, np.int8)
        if generation:
            # A restarted node answers each env's next command as a local
            # pool's replaced worker does: row A (the new game's first
            # observation) ends the lost episode, truncated; row B is the
            # reset that follows it (next-step autoreset) or a reset command.
            self.rows_a = self._merged(self._reset_local(None))
            self.rows_b = self._merged(self._reset_local(None))
        ctx = ray.get_runtime_context()
        self.pids_sent = list(self.env.worker_pids)  # the pids the trainer holds
        self.started = {"obs_shape": tuple(shape),
                        "n_actions": int(self.env.single_action_space.n),
                        "node_id": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(),
                        "pid": os.getpid(), "worker_pids": list(self.pids_sent),
                        "segment_name": self.env.segment_name}
        self.generation = generation
        return dict(self.started)

    def close(self) -> None:
        """Closes the pool: its workers stop and its segment is removed."""
        if self.env is not None:
            self.env.close()
            self.env, self.generation = None, -1

    @_reported
    def pool_info(self) -> dict:
        """Where the pool runs now (for tests and logs)."""
        return {"pid": os.getpid(), "worker_pids": list(self.env.worker_pids),
                "segment_name": self.env.segment_name}

    # -- commands ----------------------------------------------------------------
    def call(self, seq: int, keep: int, kind: str, args: tuple) -> dict:
        """Runs command ``kind`` (``"step"`` or ``"reset"``) with ``args``, once
        per ``seq`` (the trainer's number of the call): the same ``seq`` sent
        again gets the answer of its first run, not a second step: its
        packet, or the same exception raised again (its type, text and
        attributes: a WorkerError of the pool, a bad argument), not a second
        run that would step the envs already stepped or fail otherwise.
        The trainer sends a call again when Ray answered it with
        ActorUnavailableError, which may come after the call ran and its
        answer was lost. ``keep`` is the trainer's oldest call to this node
        still unanswered: the answers of calls below the highest ``keep``
        seen are dropped, and such a call (a copy Ray delivered late) is
        refused. A pool built since (``start``) runs the calls again.
        (NodeRestarted, a restarted actor with no pool, is not an answer:
        nothing ran.)

        Raises:
            LateCall: ``seq`` is below the highest ``keep`` seen; not run.
            ValueError: ``kind`` is no command.
            RuntimeError: the command raised (the node's error, as
                ``_reported`` writes it), now or when it first ran.
        """
        self.kept_from = kept_from = max(self.kept_from, keep)
        for s in [s for s in self.replies if s < kept_from]:
            del self.replies[s]
        answer = self.replies.get(seq)
        if isinstance(answer, _Raised):
            raise answer.exc.with_traceback(answer.tb)
        if answer is not None:
            return answer
        if seq < kept_from:
            raise LateCall(
                f"node {self.node} refused call {seq} ({kind}): it came after the trainer "
                f"had the answers of its calls to this node below call {kept_from}, so it "
                f"is a late copy of a call answered already; not run (it would run a "
                f"second time)")
        try:
            if kind not in ("step", "reset"):
                raise ValueError(f"no command {kind!r}: 'step' or 'reset'")
            packet = getattr(self, kind)(*args)
        except NodeRestarted:
            raise
        except Exception as exc:  # noqa: BLE001 - kept, then sent to the trainer
            self.replies[seq] = _Raised(exc)
            raise
        self.replies[seq] = packet
        return packet

    @_reported
    def reset(self, mask, observe, seed) -> dict:
        """Resets the envs in ``mask`` (bool (count,), or None: all) and
        observes those in ``observe`` (bool (count,), or None: none), as the
        trainer's client state machine decided; with ``seed``, re-derives
        every env. Answers the rows of those envs, in env order."""
        n = self.count
        every = np.arange(n)
        if seed is not None:
            self.env.async_reset(seed=seed)
            part = self._merged(self._collect(n))
            part["cols"]["worker_restarted"] = part["cols"]["worker_restarted"] | (
                self.phase[part["ids"]] == _FRESH)
            self.phase[:] = _LIVE
            return self._encode(order(part, every))
        mask = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
        observe = np.zeros(n, bool) if observe is None else np.asarray(observe, bool)
        parts = []
        live = mask & (self.phase == _LIVE)
        if live.any():
            local = self._merged(self._reset_local(None if live.all() else live))
            parts.append(take(local, np.flatnonzero(live[local["ids"]])))
        pre = np.flatnonzero(mask & (self.phase != _LIVE))
        if pre.size:
            rows = take(self.rows_b, pre)
            rows["cols"]["worker_restarted"] = self.phase[pre] == _FRESH
            self.phase[pre] = _LIVE
            parts.append(rows)
        parts += self._observed(np.flatnonzero(observe))
        return self._reply(parts)

    @_reported
    def step(self, ids, actions) -> dict:
        """Steps envs ``ids`` (local indices, int32 (n,)) with ``actions``."""
        ids = np.asarray(ids, np.int64)
        actions = np.asarray(actions)
        phase = self.phase[ids]
        live = phase == _LIVE
        parts = []
        if live.any():
            if live.all() and ids.size == self.count and self.env.batch_size == self.count:
                self.env.send(actions[np.argsort(ids)])  # a synchronous pool steps every env
            else:
                self.env.send(actions[live], ids[live])
            parts += self._collect(int(live.sum()))
        parts += self._restart_rows(ids[phase == _FRESH])
        done_b = ids[phase == _AFTER_RESTART_ROW]
        if done_b.size:
            parts.append(take(self.rows_b, done_b))
            self.phase[done_b] = _LIVE
        return self._reply(parts, ids)

    # -- helpers -----------------------------------------------------------------
    def _collect(self, n: int) -> list:
        parts, got = [], 0
        while got < n:
            part = rows(*self.env.recv())
            for k, v in part["cols"].items():
                self.dtypes.setdefault(k, v.dtype)
                self.like.setdefault(k, v[:0])
            parts.append(part)
            got += len(part["ids"])
        return parts

    def _merged(self, parts: list) -> dict:
        return merge(parts, self.dtypes)

    def _reset_local(self, mask) -> list:
        self.env.async_reset(options=None if mask is None else {"reset_mask": mask})
        return self._collect(self.count)

    def _observed(self, ids: np.ndarray) -> list:
        """Rows of envs that a masked reset leaves alone: the current
        observation again, reward 0 and every flag false (as the local pool's
        ``CMD_OBSERVE``); a restarted env gives its restart row instead."""
        fresh = ids[self.phase[ids] == _FRESH]
        ids = ids[self.phase[ids] != _FRESH]
        parts = self._restart_rows(fresh)
        if ids.size:
            cols = {k: zeros(ids.size, self.like[k], dt) for k, dt in self.dtypes.items()
                    if "/" not in k and not k.startswith("_")}
            cols["env_id"] = ids.astype(self.dtypes["env_id"])
            for k in KEPT_FIELDS:
                cols[k] = self.last[k][ids].astype(self.dtypes[k])
            if "ram" in cols and self.last_ram is not None:
                # the console's RAM now, as a local pool's observed row has it
                cols["ram"] = self.last_ram[ids]
            cols["~observed"] = np.ones(ids.size, bool)
            parts.append({"ids": ids, "obs": self.prev[ids], "fobs": None, "cols": cols})
        return parts

    def _restart_rows(self, ids: np.ndarray) -> list:
        """The first result of envs whose node was restarted, answering a
        step: the lost episode ends, truncated, with ``worker_restarted``."""
        if not ids.size:
            return []
        rows = take(self.rows_a, ids)
        cols = rows["cols"]
        for k in list(cols):
            if k.startswith("episode/") or k.startswith("_") or k.startswith("final_info"):
                del cols[k]
        for k in ("~reward", "raw_reward"):
            cols[k] = np.zeros_like(cols[k])
        for k in ("~terminated", "game_over", "reset"):
            cols[k] = np.zeros_like(cols[k])
        cols["~truncated"] = np.ones_like(cols["~truncated"])
        cols["worker_restarted"] = np.ones_like(cols["worker_restarted"])
        if self.autoreset == "next_step":
            self.phase[ids] = _AFTER_RESTART_ROW
            return [rows]
        self.phase[ids] = _LIVE
        if self.autoreset == "disabled":
            return [rows]
        # same_step: the row is already the next game's reset (row B), and
        # the truncation is its final record.
        b = take(self.rows_b, ids)
        final = {"final_info/" + k: v for k, v in cols.items() if not k.startswith("~")}
        bc = dict(b["cols"])
        bc.update(final)
        bc["~reward"], bc["~terminated"] = cols["~reward"], cols["~terminated"]
        bc["~truncated"], bc["worker_restarted"] = cols["~truncated"], cols["worker_restarted"]
        bc["_final_obs"] = np.ones(ids.size, bool)
        bc["_final_info"] = np.ones(ids.size, bool)
        return [{"ids": ids, "obs": b["obs"], "fobs": rows["obs"], "cols": bc}]

    def _reply(self, parts: list, ids=None) -> dict:
        """The packet of ``parts``' rows: those of ``ids`` first, in its order,
        then the others in env order (none: an empty packet)."""
        if not parts:
            return {"env_id": np.empty(0, np.int32), "~op": np.empty(0, np.uint8),
                    "~frames": np.empty((0,) + self.prev.shape[2:], np.uint8)}
        part = self._merged(parts)
        rows = np.sort(part["ids"])
        if ids is not None:
            ids = ids[np.isin(ids, rows)]
            rows = np.concatenate([ids, rows[~np.isin(rows, ids)]])
        return self._encode(order(part, rows))

    def _encode(self, part: dict) -> dict:
        """The packet for ``part``'s rows; remembers what the trainer now holds."""
        ids, obs, cols = part["ids"], part["obs"], part["cols"]
        old, has_old = self.prev[ids], self.has_prev[ids]
        op, frames, full = delta(obs, old, has_old)
        packet = dict(cols)
        packet["env_id"] = (ids + self.begin).astype(np.int32)
        packet["~op"], packet["~frames"] = op, frames
        if full.size:
            packet["~full"] = full
        if part["fobs"] is not None and cols["_final_obs"].any():
            m = np.flatnonzero(cols["_final_obs"])
            fop, fframes, ffull = delta(part["fobs"][m], old[m], has_old[m])
            packet["~fop"], packet["~fframes"] = fop, fframes
            if ffull.size:
                packet["~ffull"] = ffull
            fid = packet["final_info/env_id"].astype(np.int64)
            packet["final_info/env_id"] = np.where(cols["_final_info"], fid + self.begin,
                                                   0).astype(np.int32)
        else:
            for k in [k for k in packet if k.startswith("final_info/") or
                      k in ("_final_obs", "_final_info")]:
                del packet[k]
        if "~observed" in packet and not packet["~observed"].any():
            del packet["~observed"]
        if "_episode" in packet and not packet["_episode"].any():
            for k in [k for k in packet if k.startswith("episode/") or k == "_episode"]:
                del packet[k]
        pids = list(self.env.worker_pids)  # read once
        if pids != self.pids_sent:
            # a worker of the pool was replaced (restart_workers): the
            # trainer's nodes[k]["worker_pids"] follows
            packet["~worker_pids"] = np.asarray(pids, np.int64)
            self.pids_sent = pids
        self.prev[ids] = obs
        self.has_prev[ids] = True
        for k in KEPT_FIELDS:
            self.last[k][ids] = cols[k]
        if "ram" in cols:
            if self.last_ram is None:
                self.last_ram = np.zeros((self.count,) + cols["ram"].shape[1:], cols["ram"].dtype)
            self.last_ram[ids] = cols["ram"]
        return packet
