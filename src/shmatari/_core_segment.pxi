# Included by _core.pyx (one compiled module, shmatari._core): Segment, typed access to a mapped segment.

# --------------------------------------------------------------------------
# A mapped segment

cdef class Segment:
    """Typed access to a mapped shmatari segment.

    Args:
        buf: a writable buffer over the whole segment (``SharedMemory.buf``).
            The segment's header must already be written; the magic and the
            ABI major version are checked.

    Raises:
        ValueError: the buffer is too small or its header is not a shmatari
            header of ABI major ``ABI_MAJOR``.
    """

    cdef object _view
    cdef char *base
    cdef shmatari_header *hdr
    cdef uint32_t *env_worker
    cdef uint8_t *touched
    #: How the client waits for a batch: poll for up to spin_ns nanoseconds
    #: (SHMATARI_SPIN_PAUSE, the default, or SPIN_YIELD) before sleeping on the futex.
    cdef public int64_t spin_ns
    cdef public int spin_mode
    cdef int64_t next_check_ns  # when wait_batch next checks the owner's pid

    def __init__(self, buf):
        cdef const unsigned char[::1] mv = buf
        code, msg = check_header(mv)
        if code != SHMATARI_OK:
            raise ValueError(msg)
        self._view = mv
        self.base = <char *>&mv[0]
        self.hdr = <shmatari_header *>self.base
        self.env_worker = <uint32_t *>calloc(self.hdr.num_envs, sizeof(uint32_t))
        self.touched = <uint8_t *>calloc(self.hdr.num_workers, 1)
        if self.env_worker == NULL or self.touched == NULL:
            raise MemoryError()
        self.spin_ns = 0
        self.spin_mode = SHMATARI_SPIN_PAUSE
        self.next_check_ns = 0
        # The creator sets the groups after this; refresh_groups() then.
        shmatari_env_workers(self.hdr, self.env_worker, NULL, 0)

    def __cinit__(self, *args, **kwargs):
        self.env_worker = NULL
        self.touched = NULL

    def __dealloc__(self):
        free(self.env_worker)
        free(self.touched)

    def refresh_groups(self):
        """Re-reads which worker owns which env from the worker records.

        Raises:
            ValueError: the groups do not cover every env exactly once.
        """
        self._check()
        cdef char msg[512]
        if shmatari_env_workers(self.hdr, self.env_worker, msg, sizeof(msg)) != SHMATARI_OK:
            raise ValueError(msg.decode("utf-8", "replace"))

    def release(self):
        """Drops the reference to the buffer (before ``SharedMemory.close``)."""
        self._view = None
        self.base = NULL
        self.hdr = NULL

    cdef inline void _check(self) except *:
        if self.hdr == NULL:
            raise ValueError("segment released")

    # -- geometry ----------------------------------------------------------
    @property
    def num_envs(self):
        self._check()
        return self.hdr.num_envs

    @property
    def num_workers(self):
        self._check()
        return self.hdr.num_workers

    @property
    def batch_size(self):
        self._check()
        return self.hdr.batch_size

    @property
    def ring_depth(self):
        self._check()
        return self.hdr.ring_depth

    def header(self):
        """The header's words as a dict (a snapshot; ``header_words``), with
        ``slot_field_offset`` cut to this build's fields and ``action_set``
        to ``num_actions``."""
        self._check()
        out = header_words(self._view)
        out["slot_field_offset"] = out["slot_field_offset"][:<int>SHMATARI_FIELD_COUNT]
        out["action_set"] = out["action_set"][:min(out["num_actions"], SHMATARI_MAX_ACTIONS)]
        return out

    # -- setup by the creator ----------------------------------------------
    def set_worker_group(self, uint32_t worker, uint32_t env_begin, uint32_t env_end):
        self._check()
        cdef shmatari_worker_ctrl *wc = shmatari_worker(self.hdr, worker)
        wc.env_begin = env_begin
        wc.env_end = env_end

    def set_owner(self, int32_t pid):
        """Records the owner: ``pid`` and its start time
        (``shmatari_process_start``), which name it in every liveness check."""
        self._check()
        self.hdr.owner_pid = pid
        self.hdr.owner_start = shmatari_process_start(pid)

    def owner_alive(self):
        """Whether the pool's owner lives (``shmatari_owner_alive``: its pid,
        and its start time where the header has one): the rule a worker
        applies to its owner and a client to its server."""
        self._check()
        return bool(shmatari_owner_alive(self.hdr))

    def set_seed_words(self, words):
        """Writes the pool seed (``SEED_WORDS`` uint64 words, least significant first)."""
        self._check()
        cdef unsigned i
        for i in range(SHMATARI_SEED_WORDS):
            self.hdr.seed_words[i] = words[i]

    def seed_words(self):
        self._check()
        return [self.hdr.seed_words[i] for i in range(SHMATARI_SEED_WORDS)]

    def set_pool_state(self, uint32_t state):
        """Publishes the pool state and wakes every worker, and the client, to see it."""
        self._check()
        cdef uint32_t w
        cdef shmatari_worker_ctrl *wc
        shmatari_store_release(&self.hdr.pool_state, state)
        for w in range(self.hdr.num_workers):
            wc = shmatari_worker(self.hdr, w)
            shmatari_notify(&wc.wake_seq, &wc.sleeping)
        shmatari_notify(&self.hdr.main_seq, &self.hdr.main_sleeping)

    def pool_state(self):
        self._check()
        return shmatari_load_acquire(&self.hdr.pool_state)

    # -- worker records ----------------------------------------------------
    def worker_state(self, uint32_t worker):
        self._check()
        return shmatari_load_acquire(&shmatari_worker(self.hdr, worker).state)

    def worker_pid(self, uint32_t worker):
        self._check()
        return shmatari_worker(self.hdr, worker).pid

    def worker_group(self, uint32_t worker):
        self._check()
        cdef shmatari_worker_ctrl *wc = shmatari_worker(self.hdr, worker)
        return (wc.env_begin, wc.env_end)

    def worker_error(self, uint32_t worker):
        """The error text a failed worker left (str, empty when none)."""
        self._check()
        cdef char *text = shmatari_error_text(self.hdr, worker)
        cdef size_t n = strlen(text) if text[SHMATARI_ERROR_BYTES - 1] == 0 else SHMATARI_ERROR_BYTES - 1
        return text[:n].decode("utf-8", "replace")

    def counts(self):
        """(ready_workers, failed_workers)."""
        self._check()
        return (shmatari_load_acquire(&self.hdr.ready_workers),
                shmatari_load_acquire(&self.hdr.failed_workers))

    # -- the client's side (shmatari/shmatari.h) ---------------------------
    def open_client(self, int32_t pid, double timeout):
        """Attaches process ``pid`` as the pool's client (``shmatari_open_pool``):
        waits up to ``timeout`` seconds for the pool to run, claims it (one
        client at a time; a dead client's claim is taken over) and recovers it
        from any previous client (``shmatari_recover``).

        Returns:
            (int, int, str): the status code, the current client's pid when
            the code is ``STATUS["busy"]`` (else 0), and the message.
        """
        self._check()
        cdef char msg[512]
        cdef int32_t holder = 0
        cdef int r
        cdef uint64_t size = self._view.shape[0]
        cdef int64_t timeout_ns = <int64_t>(timeout * 1e9)
        msg[0] = 0
        with nogil:
            r = shmatari_open_pool(self.hdr, size, pid, timeout_ns, &holder, msg, sizeof(msg))
        return r, holder, msg.decode("utf-8", "replace")

    def release_client(self, int32_t pid):
        """Gives up the client claim if ``pid`` holds it (``shmatari_unclaim``)."""
        self._check()
        shmatari_unclaim(self.hdr, pid)

    def pool_check(self, bint check_pids=True):
        """Whether the pool can still answer (``shmatari_pool_check``).

        Returns:
            (int, str): ``OK`` or a liveness status, and its message.
        """
        self._check()
        cdef char msg[512]
        msg[0] = 0
        r = shmatari_pool_check(self.hdr, check_pids, msg, sizeof(msg))
        return r, msg.decode("utf-8", "replace")

    def post(self, const uint32_t[::1] env_ids, const int32_t[::1] actions, uint32_t cmd):
        """Posts one command per env and wakes the workers that own them
        (``shmatari_post``).

        Args:
            env_ids: uint32, shape (n,): the envs, each at most once, each
                waiting for a command (the caller checks both).
            actions: int32, shape (n,) or None: action index per env (STEP).
            cmd: ``CMD_STEP``, ``CMD_RESET``, ``CMD_RESEED`` or ``CMD_OBSERVE``.
        """
        self._check()
        cdef uint32_t n = env_ids.shape[0]
        cdef const int32_t *acts = NULL
        if actions is not None:
            if <uint32_t>actions.shape[0] != n:
                raise ValueError(f"{actions.shape[0]} actions for {n} envs")
            if n:
                acts = &actions[0]
        if n:
            with nogil:
                shmatari_post(self.hdr, self.env_worker, self.touched, &env_ids[0], n, acts,
                              cmd)

    def post_all(self, const int32_t[::1] actions, uint32_t cmd):
        """``post`` to every env, in env order (``actions``: int32 (num_envs,) or None)."""
        self._check()
        cdef uint32_t n = self.hdr.num_envs
        cdef const int32_t *acts = NULL
        if actions is not None:
            if <uint32_t>actions.shape[0] != n:
                raise ValueError(f"{actions.shape[0]} actions for {n} envs")
            acts = &actions[0]
        with nogil:
            shmatari_post(self.hdr, self.env_worker, self.touched, NULL, n, acts, cmd)

    def wait_batch(self, uint64_t batch, double timeout):
        """Waits until batch ``batch`` (a count of batches taken) is full,
        polling for ``spin_ns`` before sleeping (``shmatari_wait_batch``).

        Returns:
            int: ``OK`` when full; ``ERR_TIMEOUT`` after ``timeout`` seconds;
            ``ERR_INTERRUPTED`` after a signal whose handler did not raise;
            or a liveness status (see :meth:`pool_check`).

        Raises:
            KeyboardInterrupt (or any signal handler's exception): a signal
            arrived while waiting.
        """
        self._check()
        cdef int r
        cdef int64_t timeout_ns = <int64_t>(timeout * 1e9)
        with nogil:
            r = shmatari_wait_batch(self.hdr, batch, self.spin_ns, self.spin_mode, timeout_ns,
                                    &self.next_check_ns, NULL, 0)
        if r == SHMATARI_ERR_INTERRUPTED:
            PyErr_CheckSignals()
        return r

    def wait_ready(self, uint32_t count, double timeout):
        """Waits until ``count`` workers are ready; False on timeout or failure."""
        self._check()
        cdef shmatari_header *h = self.hdr
        cdef uint32_t seen
        cdef int r
        cdef int64_t timeout_ns = <int64_t>(timeout * 1e9)
        while True:
            with nogil:
                seen = shmatari_load_acquire(&h.main_seq)
                if shmatari_load_acquire(&h.ready_workers) >= count:
                    r = -1
                elif shmatari_load_acquire(&h.failed_workers) != 0:
                    r = -2
                else:
                    r = shmatari_wait_change(&h.main_seq, seen, &h.main_sleeping,
                                             0, SHMATARI_SPIN_PAUSE, timeout_ns)
            if r == -1:
                return True
            if r != SHMATARI_WAIT_CHANGED:
                if r == SHMATARI_WAIT_EINTR:
                    PyErr_CheckSignals()
                return False

    def take_batch(self, uint64_t batch):
        """Marks batch ``batch`` taken: its slot may be written again
        (``shmatari_consume_batch``, which also marks its rows empty)."""
        self._check()
        shmatari_consume_batch(self.hdr, batch)

    def clear_slots(self):
        """Marks every row of every slot empty (``env_id`` -1); the creator
        calls it once, before any worker starts."""
        self._check()
        cdef uint64_t s
        for s in range(self.hdr.ring_depth):
            shmatari_clear_rows(self.hdr, s)

    # -- restarting dead workers (the creator, while no other worker is busy) --
    def in_flight(self):
        """bool array, shape (num_envs,): envs with a command not yet answered
        (``req_seq != ack_seq``)."""
        self._check()
        cdef uint32_t e
        cdef shmatari_env_ctrl *ec
        out = np.zeros(self.hdr.num_envs, np.bool_)
        cdef uint8_t[::1] o = out.view(np.uint8)
        for e in range(self.hdr.num_envs):
            ec = shmatari_env(self.hdr, e)
            o[e] = shmatari_load_acquire(&ec.req_seq) != shmatari_load_acquire(&ec.ack_seq)
        return out

    def recover(self, workers):
        """Makes the ring consistent after ``workers`` died, and says what
        their replacements must publish.

        Call it once every other worker is idle (no command of theirs in
        flight) and before the replacements start; the client must not post
        meanwhile. A worker publishes a row in this order (``_publish``):
        fields and observation, its env's ``results`` count, ``env_id``
        (release), the slot's ``done_count``, the env's ``ack_seq``. So the
        rows not yet taken tell what a dead worker finished: a row whose
        ``env_id`` is set is complete (its ``done_count`` bump may be lost:
        every slot not yet taken is recounted from its complete rows); a
        reserved row whose ``env_id`` is still -1 is a hole (asynchronous
        pools), filled by the replacement with the result of one of the dead
        worker's unanswered commands. A complete row of a dead worker's env
        whose ``ack_seq`` was lost answers that env's command.

        Args:
            workers: indices of the dead workers.

        Returns:
            dict: ``{env: position}`` for each env of those workers with a
            command in flight, which its replacement answers first: position
            >= 0 is the reserved row to write (an asynchronous pool's hole),
            -1 the usual position.

        Raises:
            RuntimeError: the ring holds holes that no dead env can explain
                (a bug, or a segment written by something else).
        """
        self._check()
        cdef shmatari_header *h = self.hdr
        cdef uint64_t B = h.batch_size, N = h.num_envs
        cdef uint64_t consumed = h.consumed_batches, p, begin, end
        cdef bint ordered = B == N
        cdef int32_t env
        cdef shmatari_env_ctrl *ec
        dead = np.zeros(N, np.bool_)
        for w in workers:
            b, e = self.worker_group(w)
            dead[b:e] = True
        begin = consumed * B
        end = begin + N if ordered else shmatari_load_acquire64(&h.alloc_pos)
        holes, answered, complete = [], set(), {}
        for p in range(begin, end):
            env = <int32_t>shmatari_load_acquire(<uint32_t *>shmatari_row_env_id(h, p))
            if env < 0:
                holes.append(p)
                continue
            complete[p // B] = complete.get(p // B, 0) + 1
            if 0 <= env < <int32_t>N and dead[env]:
                answered.add(env)
        plan = {}
        for e in np.flatnonzero(dead).tolist():
            ec = shmatari_env(h, e)
            if shmatari_load_acquire(&ec.req_seq) == ec.ack_seq:
                continue
            if e in answered:
                if ordered:
                    shmatari_store_release64(&ec.results, consumed + 1)
                shmatari_store_release(&ec.ack_seq, ec.req_seq)
            elif ordered:
                # Result r of env e has position r * num_envs + e: the
                # replacement rewrites this round's row.
                shmatari_store_release64(&ec.results, consumed)
                plan[e] = -1
            else:
                plan[e] = holes.pop(0) if holes else -1
        if holes and not ordered:
            raise RuntimeError(f"result positions {holes} were reserved but never "
                               f"written, and no dead worker's env had a command in flight")
        for p in range(consumed, (end + B - 1) // B):
            shmatari_store_release(
                &(<shmatari_slot_header *>shmatari_slot(h, p)).done_count, complete.get(p, 0))
        return plan

    def reset_worker(self, uint32_t worker):
        """Readies a dead worker's record for its replacement: state
        STARTING, no pid, no error text (and one failed worker fewer if it
        had failed)."""
        self._check()
        cdef shmatari_worker_ctrl *wc = shmatari_worker(self.hdr, worker)
        if shmatari_load_acquire(&wc.state) == SHMATARI_WORKER_FAILED:
            shmatari_fetch_add(&self.hdr.failed_workers, <uint32_t>0xFFFFFFFF)
        wc.pid = 0
        wc.sleeping = 0
        shmatari_error_text(self.hdr, worker)[0] = 0
        shmatari_store_release(&wc.state, SHMATARI_WORKER_STARTING)

    def copy_batch(self, uint64_t batch, uint8_t[::1] fields_out, uint8_t[::1] obs_out,
                   bint final=False):
        """Copies batch ``batch``'s result fields (the slot's bytes from the
        first field array up to the observations, as laid out in the slot)
        and, unless ``obs_out`` is None, its observations into caller-owned
        buffers, with one memcpy each; with ``final``, its final records
        (same-step pools) instead."""
        self._check()
        cdef shmatari_header *h = self.hdr
        cdef char *slot = shmatari_slot(h, batch)
        if final:
            if h.slot_final_offset == 0:
                raise ValueError("this pool has no final records (not same_step)")
            slot += h.slot_final_offset
        cdef size_t nf = h.slot_obs_offset - h.slot_field_offset[0]
        cdef size_t no = h.obs_env_bytes * h.batch_size
        if <size_t>fields_out.shape[0] != nf or (
                obs_out is not None and <size_t>obs_out.shape[0] != no):
            raise ValueError(f"copy_batch needs {nf} and {no} bytes")
        with nogil:
            memcpy(&fields_out[0], slot + h.slot_field_offset[0], nf)
        if obs_out is not None:
            with nogil:
                memcpy(&obs_out[0], slot + h.slot_obs_offset, no)

    def collect(self, uint64_t batch, obs_out, bint final=False):
        """Copies batch ``batch`` (as ``copy_batch``) into a new private buffer
        and returns NumPy views of it, built here with NumPy's C API: the
        client's hot path, where a dozen Python-level views cost more than the
        round trip itself.

        Args:
            batch: the batch index (a count of batches taken).
            obs_out: uint8 buffer for the observations, or None.
            final: read the same-step final records instead.

        Returns:
            (views, bits): ``views`` holds one array of shape (batch_size,)
            per field of ``FIELDS``, in order (the 0/1 fields as bool), then
            two bool arrays: the rows' ``FLAG_RESET`` and ``FLAG_RESTARTED``
            bits. ``bits``: 1 if a row has ``episode_done``, 2 if a row has
            ``FLAG_FINAL``.
        """
        self._check()
        cdef shmatari_header *h = self.hdr
        cdef Py_ssize_t B = h.batch_size
        cdef size_t nf = h.slot_obs_offset - h.slot_field_offset[0]
        raw = np.empty(nf + 2 * B, np.uint8)
        cdef uint8_t[::1] mraw = raw
        self.copy_batch(batch, mraw[:nf], obs_out, final)
        cdef uint8_t *base = &mraw[0]
        cdef const uint32_t *flags = <const uint32_t *>(
            base + h.slot_field_offset[<int>SHMATARI_FIELD_FLAGS] - h.slot_field_offset[0])
        cdef const uint8_t *done = <const uint8_t *>(
            base + h.slot_field_offset[<int>SHMATARI_FIELD_EPISODE_DONE] - h.slot_field_offset[0])
        cdef uint8_t *reset_bits = base + nf
        cdef uint8_t *restart_bits = base + nf + B
        cdef int bits = 0
        cdef Py_ssize_t i
        for i in range(B):
            reset_bits[i] = (flags[i] & SHMATARI_FLAG_RESET) != 0
            restart_bits[i] = (flags[i] & SHMATARI_FLAG_RESTARTED) != 0
            if done[i]:
                bits |= 1
            if flags[i] & SHMATARI_FLAG_FINAL:
                bits |= 2
            if reset_bits[i]:
                bits |= 4
        cdef list views = []
        cdef int f
        for f in range(<int>SHMATARI_FIELD_COUNT):
            views.append(_view(raw, <char *>base + h.slot_field_offset[f] - h.slot_field_offset[0],
                               B, _PRESENTED[f]))
        views.append(_view(raw, <char *>reset_bits, B, _BOOL))
        views.append(_view(raw, <char *>restart_bits, B, _BOOL))
        return tuple(views), bits

    # -- views ---------------------------------------------------------------
    def slot_offset(self, uint64_t slot):
        """Byte offset of slot ``slot`` (mod ring_depth) in the segment."""
        self._check()
        return <uint64_t>(shmatari_slot(self.hdr, slot) - self.base)
