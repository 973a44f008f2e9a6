# Included by _core.pyx (one compiled module, shmatari._core): the worker loop, mark_worker, set_num_actions.

# --------------------------------------------------------------------------
# The worker loop

cdef extern from *:
    """
    /* Every field of row idx of a slot but env_id, which commits the row;
     * generated from layout.h's SHMATARI_RESULT_FIELDS (one typed store per
     * field, the env_id test folded away at compile time). Offsets come from
     * the checked geometry (shmatari_geom), never from the segment. */
    #define SHMATARI_PY_WRITE_FIELD(NAME, name, type, unit, meaning)          \
      if (SHMATARI_FIELD_##NAME != SHMATARI_FIELD_ENV_ID)                     \
        ((type *)(slot + g->slot_field_offset[SHMATARI_FIELD_##NAME]))[idx] = \
            r->name;
    static inline void shmatari_py_write_fields(const shmatari_geom *g,
                                                char *slot, uint32_t idx,
                                                const shmatari_result *r) {
      SHMATARI_RESULT_FIELDS(SHMATARI_PY_WRITE_FIELD)
    }
    """
    void _write_fields "shmatari_py_write_fields" (
        const shmatari_geom *g, char *slot, uint32_t idx, const shmatari_result *r) nogil


#: Result positions stay below this: 2**63 results at a billion a second
#: take 292 years, so a count at or past it was written by something else,
#: and would wrap (docs/layout.md).
cdef uint64_t _POSITION_LIMIT = (<uint64_t>1) << 63
#: An env's ``results`` count stays below this, so that ``results *
#: num_envs + rank`` stays below ``_POSITION_LIMIT`` for any pool (num_envs
#: at most SHMATARI_MAX_ENVS, 2**16): a comparison, not a division, per result.
cdef uint64_t _RESULTS_LIMIT = _POSITION_LIMIT / SHMATARI_MAX_ENVS


cdef inline int _publish(const shmatari_geom *g, uint32_t env, EnvCore core,
                         bint ordered, int64_t reserved, uint64_t *bad) noexcept nogil:
    """Writes env ``env``'s result at its next position (``reserved`` >= 0:
    at that position, taken by a worker that died; see Segment.recover).
    Returns 0, or -1 with nothing written and ``bad[0]`` the ``results``
    count read when it is at or past ``_RESULTS_LIMIT``, or -2 with the
    position when it is at or past ``_POSITION_LIMIT``, or -3 with the
    position when its slot was full already (the row written over another).

    The order is part of the contract that lets a dead worker be replaced:
    row, ``results``, ``env_id`` (release: the row is complete),
    ``done_count``; the caller then stores ``ack_seq``."""
    cdef shmatari_header *h = g.hdr
    cdef shmatari_env_ctrl *ec = shmatari_env(g, env)
    cdef uint64_t pos, batch
    cdef uint32_t done
    # Read once: the position written and the count published come from the
    # same value (another process may change the word in between).
    cdef uint64_t results = shmatari_load_acquire64(&ec.results)
    cdef uint32_t idx
    cdef char *slot
    cdef char *final
    if reserved >= 0:
        pos = <uint64_t>reserved
    elif ordered:
        # synchronous, or batch_order FIXED: batch r * G + env % G, checked
        # before the product can wrap
        if results >= _RESULTS_LIMIT:
            bad[0] = results
            return -1
        pos = results * g.num_envs + shmatari_env_rank(g, env)
    else:
        pos = shmatari_fetch_add64(&h.alloc_pos, 1)
    if pos >= _POSITION_LIMIT:
        bad[0] = pos
        return -2
    batch = pos / g.batch_size
    idx = <uint32_t>(pos % g.batch_size)
    slot = shmatari_slot(g, batch)
    _write_fields(g, slot, idx, &core.res)
    core.write_obs(<uint8_t *>(slot + g.slot_obs_offset + idx * g.obs_env_bytes))
    if (core.res.flags & SHMATARI_FLAG_FINAL) and g.slot_final_offset != 0:
        final = slot + g.slot_final_offset
        _write_fields(g, final, idx, &core.final)
        (<int32_t *>(final + g.slot_field_offset[<int>SHMATARI_FIELD_ENV_ID]))[idx] = env
        memcpy(final + g.slot_obs_offset + idx * g.obs_env_bytes, core.final_obs,
               g.obs_env_bytes)
    shmatari_store_release64(&ec.results, results + 1)
    shmatari_store_release(<uint32_t *>shmatari_row_env_id(g, pos), env)
    done = shmatari_fetch_add(&(<shmatari_slot_header *>slot).done_count, 1)
    if done >= g.batch_size:
        # The slot held its batch_size rows already: this position was handed
        # out twice (another process moved alloc_pos back), and the row just
        # written replaced another env's result, which is lost (an
        # attacker's pass, 2026-12-06: silent in a first-ready pool).
        bad[0] = pos
        return -3
    if done + 1 == g.batch_size:
        shmatari_notify(&h.main_seq, &h.main_sleeping)
    return 0


cdef int _serve(shmatari_env_ctrl *ec, uint32_t e, EnvCore core, Segment seg, reseed,
                bint restarted) except -1:
    """Runs env ``e``'s command (``restarted``: its first since its worker
    was replaced, which a STEP or OBSERVE answers with the restart's
    result, ignoring the action: a command that killed the previous worker
    does not kill its replacement)."""
    # Read once (atomic loads, which the compiler may not repeat): the
    # command and action checked are the ones run.
    cdef uint32_t cmd = shmatari_load_acquire(&ec.cmd)
    cdef int32_t action = <int32_t>shmatari_load_acquire(<uint32_t *>&ec.action)
    cdef bint reset = cmd == SHMATARI_CMD_RESET or cmd == SHMATARI_CMD_RESEED
    if restarted and not reset:
        core.restart_result()
        return 0
    if cmd == SHMATARI_CMD_STEP:
        if action < 0 or action >= core.num_actions:
            raise ValueError(f"env {e} was sent action {action}; its action space is "
                             f"0..{core.num_actions - 1} (did a client write the segment "
                             f"without checking its actions?)")
    elif cmd != SHMATARI_CMD_OBSERVE and not reset:
        raise ValueError(f"env {e} was sent command {cmd}, which layout.h does not define")
    if cmd == SHMATARI_CMD_STEP:
        core.step(action)
    elif cmd == SHMATARI_CMD_OBSERVE:
        core.observe()
    elif cmd == SHMATARI_CMD_RESEED:
        reseed(core, e, seg.seed_words())
        core.reset()
    else:
        core.reset()
    if restarted:
        core.res.flags |= SHMATARI_FLAG_RESTARTED
    return 0


def worker_loop(Segment seg, uint32_t worker, list cores, reseed, parent_alive,
                uint32_t env_begin, int64_t spin_ns=0, int spin_mode=SHMATARI_SPIN_PAUSE, double poll=0.2,
                bint restarted=False, dict positions=None, int64_t long_spin_ns=0):
    """Runs a worker until the pool closes or its parent dies.

    Args:
        seg: the mapped segment.
        worker: this worker's index.
        cores: one ``EnvCore`` (``AtariCore`` or ``NullCore``) per env of the
            worker's group, in order.
        reseed: ``reseed(core, env_index, seed_words)``, called for
            ``CMD_RESEED`` before the reset.
        parent_alive: ``parent_alive() -> bool``, called after each ``poll``
            seconds of sleep, and every ``poll`` seconds while busy (a
            client may keep a worker busy after its parent died); the loop
            returns when it is False.
        env_begin: the first env of the worker's group, whose envs are
            ``env_begin .. env_begin + len(cores) - 1``: from the pool's
            own record (the caller checked the segment's ``env_begin`` /
            ``env_end`` words against it), never read here from the segment.
        spin_ns: nanoseconds to poll the wake word before sleeping on it.
        spin_mode: ``SHMATARI_SPIN_PAUSE`` (0) or ``SPIN_YIELD`` (see ``shmatari/sync.h``).
        long_spin_ns: poll this long instead of ``spin_ns`` while the
            client's longest recent share of a wait (fading by 1/8 a wait)
            is under half of it (0: never); see ``shmatari.spin``.
        poll: seconds between parent checks.
        restarted: this worker replaces one that died: each env's first
            result is ``EnvCore.restart_result()`` (a STEP or OBSERVE), or its
            reset flagged ``FLAG_RESTARTED`` (a RESET or RESEED).
        positions: with ``restarted``, ``{env: (position, seen)}`` for
            every env of the group, from ``Segment.recover``: where to write
            each env's first result (-1: the usual position; -2: no command
            in flight, taken as -1) and the last command counted as answered
            (the env's ack_seq, as the recovery left it).

    Returns:
        str: ``"closed"`` or ``"orphaned"``.

    Raises:
        ValueError: a group that is empty or does not fit the pool; a command
            or action outside the layout's, a result count
            at or past 2**47 or a position at or past 2**63, or an ``ack_seq`` of the group that
            this worker did not store (a client that wrote the segment
            unchecked).
    """
    seg._check()
    cdef shmatari_header *h = seg.hdr
    cdef shmatari_geom *g = &seg.geo
    if worker >= g.num_workers:
        raise ValueError(f"worker {worker} of a pool of {g.num_workers} workers")
    cdef shmatari_worker_ctrl *wc = shmatari_worker(g, worker)
    # The group the cores were built for, bounded (without overflow) before
    # any address is computed from it (docs/layout.md, "Trust").
    if not 0 < len(cores) <= g.num_envs or env_begin > g.num_envs - len(cores):
        raise ValueError(f"worker {worker}'s group of {len(cores)} envs from env "
                         f"{env_begin} does not fit a pool of {g.num_envs} envs")
    cdef uint32_t begin = env_begin
    cdef uint32_t end = env_begin + <uint32_t>len(cores)
    cdef uint32_t e, wake, req, ack
    cdef uint32_t n = end - begin, i, k, scan = 0, qhead = 0, qlen = 0
    cdef shmatari_env_ctrl *ec
    cdef EnvCore core
    cdef bint busy, ordered = shmatari_ordered(g)
    cdef int r = 0
    cdef uint64_t bad = 0
    cdef int64_t poll_ns = <int64_t>(poll * 1e9)
    cdef int64_t next_check = shmatari_now_ns() + poll_ns, now
    cdef int64_t gap = 0, filled, share
    cdef uint32_t main_seen = shmatari_load_acquire(&h.main_seq)
    cdef uint32_t *seen = <uint32_t *>malloc(n * sizeof(uint32_t))
    # per env: -2 once its first result is out, else where to write it
    cdef int64_t *first = <int64_t *>malloc(n * sizeof(int64_t))
    # Pending envs in the order their requests were noticed (a ring of env
    # offsets), and which are in it: served oldest first, so that in an
    # async pool no env of the group is served ahead of the others.
    cdef uint32_t *queue = <uint32_t *>malloc(n * sizeof(uint32_t))
    cdef uint8_t *queued = <uint8_t *>calloc(n, 1)
    # Envs whose last result ended an episode: while no request waits, their
    # next episode is started ahead (EnvCore.prepare_reset), off the
    # critical path of the round that will ask for it.
    cdef uint8_t *ended = <uint8_t *>calloc(n, 1)
    cdef uint32_t npending = 0
    if seen == NULL or first == NULL or queue == NULL or queued == NULL or ended == NULL:
        free(seen)
        free(first)
        free(queue)
        free(queued)
        free(ended)
        raise MemoryError()
    try:
        for e in range(begin, end):
            ack = shmatari_load_acquire(&shmatari_env(g, e).ack_seq)  # once
            seen[e - begin] = ack
            first[e - begin] = -2
            if restarted:
                # Where to start from is the owner's recovery plan (its
                # client's own record: Segment.recover), which also set
                # ack_seq to it; the words read again here decided it until
                # 2026-12-06, and another process that wrote ack_seq after
                # the recovery made this worker skip a command in flight or
                # run one twice, with no error (an attacker's pass).
                plan = positions.get(e) if positions is not None else None
                if plan is None:
                    raise ValueError(f"worker {worker} was restarted with no recovery plan "
                                     f"for env {e}")
                position, mine = plan
                if ack != mine:
                    raise ValueError(
                        f"env {e}'s ack_seq reads {ack}, but the owner's recovery left it "
                        f"at {mine} before this replacement started: another process "
                        f"wrote it (a client that writes it unchecked)")
                seen[e - begin] = mine
                first[e - begin] = max(position, -1)
        while True:
            wake = shmatari_load_acquire(&wc.wake_seq)
            if shmatari_load_acquire(&h.pool_state) == SHMATARI_POOL_CLOSING:
                return "closed"
            # Notice new requests, scanning round-robin from the env after the
            # last one served, so that requests that arrive together take
            # turns at the head of the queue.
            for k in range(n):
                i = (scan + k) % n
                if queued[i]:
                    continue
                req = shmatari_load_acquire(&shmatari_env(g, begin + i).req_seq)  # once
                if req != seen[i]:
                    if req != seen[i] + 1:
                        # A client posts one command at a time: another
                        # process wrote the word. Served, the jump (or a
                        # moved word put back) made the worker run a
                        # command nobody posted, and every later result
                        # of the env came one command late, with no error
                        # (an attacker's pass, 2026-12-06).
                        raise ValueError(
                            f"env {begin + i}'s req_seq reads {req}, but the last command "
                            f"worker {worker} answered for it was number {seen[i]}: a client "
                            f"posts one command at a time (number {seen[i] + 1} next), so "
                            f"the segment was written by something other than its client "
                            f"(a process that writes it unchecked)")
                    queue[(qhead + qlen) % n] = i
                    qlen += 1
                    queued[i] = 1
                    # main_seq as this request is noticed: a change after
                    # it is a batch filled since (the wait below watches it)
                    main_seen = shmatari_load_acquire(&h.main_seq)
            busy = qlen != 0
            if busy:
                i = queue[qhead]
                qhead = (qhead + 1) % n
                qlen -= 1
                queued[i] = 0
                scan = (i + 1) % n
                e = begin + i
                ec = shmatari_env(g, e)
                req = seen[i] + 1  # the command noticed (the word is not read again)
                core = <EnvCore>cores[i]
                _serve(ec, e, core, seg, reseed, first[i] != -2)
                if g.render_offset != 0:
                    core.write_render(shmatari_render_area(g, e), g.screen_height,
                                      g.screen_width)
                if g.ram_offset != 0:
                    core.write_ram(shmatari_ram_area(g, e))
                with nogil:
                    r = _publish(g, e, core, ordered, first[i], &bad)
                    if r == 0:
                        first[i] = -2
                        seen[i] = req
                        shmatari_store_release(&ec.ack_seq, req)
                        wc.steps += 1
                        if (core.res.terminated or core.res.truncated) and not ended[i]:
                            ended[i] = 1
                            npending += 1
                if r == -3:
                    raise ValueError(
                        f"env {e}'s result went to position {bad}, in batch "
                        f"{bad // g.batch_size}, whose slot held all its {g.batch_size} "
                        f"results already: " +
                        ("another process moved the env's results count, and its row "
                         "went to a slot whose batch was not taken yet" if ordered else
                         "the position was handed out twice (another process moved the "
                         "header's alloc_pos back), and another env's result there was "
                         "written over") +
                        " (or another process raised the slot's done_count)")
                if r != 0:
                    raise ValueError(
                        (f"env {e}'s results count is {bad}, at or past 2**47"
                         if r == -1 else
                         f"env {e}'s result position is {bad}, at or past 2**63") +
                        ", which no run reaches: the segment was written by something "
                        "other than its creator (a client that writes it unchecked)")
            # Python runs signal handlers (SIGTERM: exit) only here: the loop
            # and the env steps are C calls, and the signal may have woken
            # another thread than this one.
            PyErr_CheckSignals()
            if not busy and npending:
                # one at a time: new requests are noticed between them
                for k in range(n):
                    if ended[k]:
                        ended[k] = 0
                        npending -= 1
                        (<EnvCore>cores[k]).prepare_reset()
                        break
                busy = True
            if busy:
                now = shmatari_now_ns()
                if now >= next_check:
                    next_check = now + poll_ns
                    if not parent_alive():
                        return "orphaned"
                continue
            # Idle: every ack_seq of the group is the last one this worker
            # stored (nobody else writes them while it lives). One changed
            # by another process would keep req_seq != ack_seq for good,
            # and every attach would wait for a command nobody runs.
            for k in range(n):
                ack = shmatari_load_acquire(&shmatari_env(g, begin + k).ack_seq)
                if ack != seen[k]:
                    raise ValueError(
                        f"env {begin + k}'s ack_seq is {ack}, but worker {worker} last "
                        f"answered its command {seen[k]}: the segment was written by "
                        f"something other than its workers (a client that writes it "
                        f"unchecked)")
            with nogil:
                # gap: the longest recent wait of this worker for the client,
                # fading by 1/8 a wait (ns). Only the client's share counts:
                # from the moment the round's batch filled (seen while
                # polling, or before the wait began) to the next request.
                # The wait for a slower worker of the same round does not: a
                # core the hypervisor took for a moment would put the faster
                # worker to sleep, and its slower wake-ups would make every
                # next round's wait long. A wait whose share is unknown
                # (slept before the batch filled) only fades it, so a worker
                # that always finishes first polls long again within a few
                # rounds and then sees the client's share (one 2 ms poll in
                # about 14 rounds of a slow trainer). A maximum, not an
                # average: a trainer that is slow one step in 8 (a gradient
                # step every 8 env steps) keeps it over the bound, so the
                # worker does not poll through the slow steps, when the
                # trainer needs the cores; after one 5 ms wait it takes 13
                # quick ones to poll long again.
                r = shmatari_wait_change_watching(
                    &wc.wake_seq, wake, &wc.sleeping,
                    long_spin_ns if gap < long_spin_ns // 2 else spin_ns, spin_mode,
                    poll_ns, &h.main_seq, main_seen, &filled)
                gap -= gap // 8
                if filled >= 0:
                    share = shmatari_now_ns() - filled
                    if share > gap:
                        gap = share
            # The owner is checked after a quiet wait, and at least every
            # poll when woken: wake_seq changing (any process of the user
            # may bump it) must not keep an orphan alive.
            now = shmatari_now_ns()
            if r == SHMATARI_WAIT_TIMEOUT or now >= next_check:
                next_check = now + poll_ns
                if not parent_alive():
                    return "orphaned"
    finally:
        free(seen)
        free(first)
        free(queue)
        free(queued)
        free(ended)


def mark_worker(Segment seg, uint32_t worker, uint32_t state, int32_t pid=0,
                error=None):
    """Publishes a worker's state (and pid, and error text) and wakes the client."""
    seg._check()
    cdef shmatari_header *h = seg.hdr
    cdef shmatari_geom *g = &seg.geo
    cdef shmatari_worker_ctrl *wc = shmatari_worker(g, worker)
    cdef char *text
    cdef bytes data
    if pid:
        wc.pid = pid
    if error is not None:
        data = error.encode("utf-8", "replace")[:SHMATARI_ERROR_BYTES - 1]
        text = shmatari_error_text(g, worker)
        memcpy(text, <char *>data, len(data))
        text[len(data)] = 0
    shmatari_store_release(&wc.state, state)
    if state == SHMATARI_WORKER_READY:
        shmatari_fetch_add(&h.ready_workers, 1)
    elif state == SHMATARI_WORKER_FAILED:
        shmatari_fetch_add(&h.failed_workers, 1)
    shmatari_notify(&h.main_seq, &h.main_sleeping)


def set_num_actions(Segment seg, action_set):
    """Records the action space (ALE action ids) in the header."""
    seg._check()
    cdef unsigned i, n = len(action_set)
    if n > SHMATARI_MAX_ACTIONS:
        raise ValueError(f"{n} actions exceed the layout's {SHMATARI_MAX_ACTIONS}")
    for i in range(n):
        seg.hdr.action_set[i] = int(action_set[i])
    seg.hdr.num_actions = n
