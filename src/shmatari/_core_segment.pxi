# Included by _core.pyx (one compiled module, shmatari._core): Segment, typed access to a mapped segment.

# --------------------------------------------------------------------------
# A mapped segment

cdef enum:
    WAIT_RUNNING, WAIT_RECOVER, WAIT_RESET


cdef int _sliced(int what, const shmatari_geom *g, shmatari_client *c, uint32_t cmd,
                 const uint8_t *mask, int64_t deadline, uint64_t *next_batch, char *msg,
                 size_t len, const uint64_t *words=NULL, const int *stop=NULL) except? -1000:
    """Runs one of the C waits a Python caller makes with no limit of its
    own (what: WAIT_RUNNING, ``shmatari_wait_running(g)``; WAIT_RECOVER,
    ``shmatari_recover(g, next_batch)``; WAIT_RESET,
    ``shmatari_reset_seeded(c, cmd, mask, words)``) until ``deadline`` (monotonic ns,
    -1: none), in slices of ``SHMATARI_POLL_NS``, running Python's signal
    handlers between them. Each of these calls, timed out or interrupted,
    changed nothing and may be called again (their comments in shmatari.h).

    A C wait sees a signal only if it lands during its sleep (EINTR). One
    that lands between two slices of the C loop, or that the kernel hands
    to another thread (PyTorch and JAX run many), only sets Python's flag,
    which nothing checked while the C loop ran: a Ctrl-C waited out the
    whole timeout, or forever (the Ctrl-C test of attach() failed so about
    once in ten suites under load, until 2026-12-05).

    ``stop`` (WAIT_RESET: the Segment's ``stopping``, set by
    :meth:`Segment.stop_waits`, a close() from another thread): once set, the
    wait ends at the end of its slice with ``SHMATARI_ERR_CLOSED``. An
    attached pool has no CLOSING state of its own to end the C wait, and a
    reset that drained for a stopped worker went on after close() had
    returned, forever with ``timeout=None`` (an attacker's pass, 2026-12-05).

    Returns the call's status code: SHMATARI_ERR_TIMEOUT only once the
    deadline has passed.

    Raises:
        KeyboardInterrupt (or any signal handler's exception), after the
        call that was interrupted returned: nothing changed by it.
    """
    cdef int r
    cdef int64_t left
    while True:
        left = SHMATARI_POLL_NS
        if deadline >= 0:
            left = max(<int64_t>0, min(left, deadline - shmatari_now_ns()))
        with nogil:
            if what == WAIT_RUNNING:
                r = shmatari_wait_running(g, left, msg, len)
            elif what == WAIT_RECOVER:
                r = shmatari_recover(g, left, next_batch, msg, len)
            else:
                r = shmatari_reset_seeded(c, cmd, mask, words, left)
        if r == SHMATARI_ERR_INTERRUPTED or (
                r == SHMATARI_ERR_TIMEOUT and (deadline < 0 or shmatari_now_ns() < deadline)):
            PyErr_CheckSignals()  # raises, or the handlers returned: wait on
            if stop != NULL and stop[0]:
                return SHMATARI_ERR_CLOSED  # nothing changed (as a timeout)
            continue
        return r


cdef class Segment(ClientMachine):
    """Typed access to a mapped shmatari segment.

    Args:
        buf: a writable buffer over the whole segment (``SharedMemory.buf``).
            The segment's header must already be written. It is checked as
            a C client checks it (``shmatari_geom_load``: magic, ABI major
            version, bounded parameters, every offset and size recomputed,
            ``total_bytes`` equal to the buffer's size) and its geometry is
            copied once: no later call reads a size or offset from the buffer.

    It is also this process's client of the pool once :meth:`open_client`
    succeeded: the :class:`ClientMachine` (client_state.h) whose transport is
    the segment (``shmatari_send`` posts, ``shmatari_next_batch`` waits).

    Raises:
        ValueError: the buffer's header is not a consistent shmatari header
            of ABI major ``ABI_MAJOR`` for a segment of its size.
    """

    cdef object _view
    cdef char *base
    cdef shmatari_header *hdr
    # The checked geometry, copied out of the header once (shmatari_geom_load):
    # every size and offset used below comes from here, never from the segment.
    cdef shmatari_geom geo
    # Set by stop_waits() (a close() from another thread): a reset's drain
    # (_sliced) ends at its next slice. Read and written with the GIL held.
    cdef int stopping

    def __init__(self, buf):
        cdef const unsigned char[::1] mv = buf
        cdef char msg[512]
        msg[0] = 0
        if shmatari_geom_load(<void *>&mv[0], mv.shape[0], &self.geo, msg,
                              sizeof(msg)) != SHMATARI_OK:
            raise ValueError(msg.decode("utf-8", "replace"))
        self._view = mv
        self.base = <char *>&mv[0]
        self.hdr = <shmatari_header *>self.base

    #: How the client waits for a batch: poll for up to spin_ns nanoseconds
    #: (SPIN_PAUSE, the default, or SPIN_YIELD) before sleeping on the futex.
    @property
    def spin_ns(self):
        return self.cl.spin_ns

    @spin_ns.setter
    def spin_ns(self, int64_t value):
        self.cl.spin_ns = value

    @property
    def spin_mode(self):
        return self.cl.spin_mode

    @spin_mode.setter
    def spin_mode(self, int value):
        self.cl.spin_mode = value

    def refresh_groups(self):
        """Checks which worker owns which env in the worker records (the
        client reads them again when it opens: ``shmatari_client_open``).

        Raises:
            ValueError: the groups do not cover every env exactly once.
        """
        self._check()
        cdef char msg[512]
        cdef uint32_t *owner = <uint32_t *>calloc(self.geo.num_envs, sizeof(uint32_t))
        if owner == NULL:
            raise MemoryError()
        cdef int r = shmatari_env_workers(&self.geo, owner, msg, sizeof(msg))
        free(owner)
        if r != SHMATARI_OK:
            raise ValueError(msg.decode("utf-8", "replace"))

    def stop_waits(self):
        """Ends a reset's wait (:meth:`client_reset`) at its next slice, with
        ``STATUS["closed"]`` and nothing changed, now and for every later
        reset: a close() from another thread while a call waits."""
        self.stopping = 1

    def release(self):
        """Drops the reference to the buffer (before ``SharedMemory.close``)."""
        shmatari_client_close(&self.cl)
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
        return self.geo.num_envs

    @property
    def num_workers(self):
        self._check()
        return self.geo.num_workers

    @property
    def batch_size(self):
        self._check()
        return self.geo.batch_size

    @property
    def ring_depth(self):
        self._check()
        return self.geo.ring_depth

    def header(self):
        """The header's words as a dict (a snapshot; ``header_words``), with
        ``slot_field_offset`` cut to this build's fields and ``action_set``
        to ``num_actions``. The geometry's words are the checked geometry
        copied at attach (``shmatari_geom``), not what the segment says now."""
        self._check()
        cdef shmatari_geom *g = &self.geo
        out = header_words(self._view)
        out.update(
            total_bytes=g.total_bytes, num_envs=g.num_envs, num_workers=g.num_workers,
            batch_size=g.batch_size, ring_depth=g.ring_depth, stack_num=g.stack_num,
            img_height=g.img_height, img_width=g.img_width, channels=g.channels,
            frame_skip=g.frame_skip, obs_frame_bytes=g.obs_frame_bytes,
            obs_env_bytes=g.obs_env_bytes, slot_bytes=g.slot_bytes,
            env_ctrl_offset=g.env_ctrl_offset, worker_ctrl_offset=g.worker_ctrl_offset,
            errors_offset=g.errors_offset, slots_offset=g.slots_offset,
            slot_obs_offset=g.slot_obs_offset, slot_final_offset=g.slot_final_offset,
            autoreset_mode=g.autoreset_mode, obs_layout=g.obs_layout,
            batch_order=g.batch_order, screen_height=g.screen_height, screen_width=g.screen_width,
            render_offset=g.render_offset, render_env_bytes=g.render_env_bytes,
            ram_offset=g.ram_offset, ram_bytes=g.ram_bytes,
            slot_field_offset=[g.slot_field_offset[i]
                               for i in range(<int>SHMATARI_FIELD_COUNT)])
        out["action_set"] = out["action_set"][:min(out["num_actions"], SHMATARI_MAX_ACTIONS)]
        return out

    def unanswered(self, worker=None):
        """Which workers have not answered this client's commands, in words
        (``shmatari_unanswered_text``: "worker 0 (pid 12) has not answered
        envs 0, 1 (alive, but stopped or busy: ...)", or "no env has a
        command in flight"): what a timed-out wait names, the same words as
        the C client's and ``xla()``'s. Needs the client open (:meth:`open_client`)."""
        self._check()
        if self.cl.hdr == NULL:
            raise ValueError("no client open")
        cdef char text[SHMATARI_MESSAGE_BYTES]
        cdef int64_t w = -1 if worker is None else <int64_t>worker
        shmatari_unanswered_worker_text(&self.cl, w, text, sizeof(text))
        return text.decode("utf-8", "replace")

    def client_action_set(self):
        """The action set of the client opened here (:meth:`open_client`):
        the header's ``action_set`` words, read now, cut to the
        ``num_actions`` that ``shmatari_client_open`` read once and checked
        (1..18), which bounds every action the client accepts. Not the
        header's ``num_actions`` again: a writer could change it between the
        two reads, and the action space would then disagree with the actions
        accepted. With no client open (a server's own pool, which takes no
        steps), cut to the ``num_actions`` of the same snapshot. Returns a
        list of ints (ALE action ids, still unchecked)."""
        self._check()
        words = header_words(self._view)
        n = self.cl.num_actions if self.cl.hdr != NULL else \
            min(words["num_actions"], SHMATARI_MAX_ACTIONS)
        return words["action_set"][:n]

    # -- setup by the creator ----------------------------------------------
    def set_worker_group(self, uint32_t worker, uint32_t env_begin, uint32_t env_end):
        self._check()
        cdef shmatari_worker_ctrl *wc = shmatari_worker(&self.geo, worker)
        wc.env_begin = env_begin
        wc.env_end = env_end

    def set_owner(self, int32_t pid, start=None):
        """Records the owner: ``pid`` and its start time (``start``, or
        ``shmatari_process_start`` when None), which name it in every
        liveness check."""
        self._check()
        cdef uint64_t st = shmatari_process_start(pid) if start is None else <uint64_t>start
        self.hdr.owner_pid = pid
        self.hdr.owner_start = st
        # and this Segment's own copy, which its liveness checks judge by
        # (shmatari_owner_words): the words written, not read back
        self.geo.owner_pid = pid
        self.geo.owner_start = st if self.geo.abi_minor >= 2 else 0

    def owner_alive(self):
        """Whether the pool's owner lives (``shmatari_owner_alive``: its pid,
        and its start time where the header has one): the rule a worker
        applies to its owner and a client to its server."""
        self._check()
        return bool(shmatari_owner_alive(&self.geo))

    def set_seed_words(self, words):
        """Writes the pool seed (``SEED_WORDS`` uint64 words, least significant first)."""
        self._check()
        if len(words) != SHMATARI_SEED_WORDS:
            raise ValueError(f"the seed is {SHMATARI_SEED_WORDS} words, got {len(words)}")
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
        for w in range(self.geo.num_workers):
            wc = shmatari_worker(&self.geo, w)
            shmatari_notify(&wc.wake_seq, &wc.sleeping)
        shmatari_notify(&self.hdr.main_seq, &self.hdr.main_sleeping)

    def pool_state(self):
        self._check()
        return shmatari_load_acquire(&self.hdr.pool_state)

    # -- worker records ----------------------------------------------------
    def worker_state(self, uint32_t worker):
        self._check()
        return shmatari_load_acquire(&shmatari_worker(&self.geo, worker).state)

    def worker_pid(self, uint32_t worker):
        self._check()
        return shmatari_worker(&self.geo, worker).pid

    def worker_group(self, uint32_t worker):
        self._check()
        cdef shmatari_worker_ctrl *wc = shmatari_worker(&self.geo, worker)
        return (wc.env_begin, wc.env_end)

    def worker_error(self, uint32_t worker):
        """The error text a failed worker left (str, empty when none), with
        control characters escaped (:func:`printable`)."""
        self._check()
        # Copied once (a slice: one memcpy), then bounded: a NUL tested, then
        # looked for again in the segment, could be gone by the second read.
        cdef bytes data = shmatari_error_text(&self.geo, worker)[:SHMATARI_ERROR_BYTES - 1]
        cdef Py_ssize_t n = data.find(b"\0")
        return printable((data if n < 0 else data[:n]).decode("utf-8", "replace"))

    def counts(self):
        """(ready_workers, failed_workers)."""
        self._check()
        return (shmatari_load_acquire(&self.hdr.ready_workers),
                shmatari_load_acquire(&self.hdr.failed_workers))

    # -- the client's side (shmatari/shmatari.h) ---------------------------
    def open_client(self, int32_t pid, double timeout, record=None):
        """Attaches process ``pid`` as the pool's client, as
        ``shmatari_open_pool`` does: waits up to ``timeout`` seconds for the
        pool to run (``shmatari_wait_running``), claims it (one client at a
        time; a dead client's claim is taken over: ``shmatari_claim``) and
        recovers it from any previous client (``shmatari_recover``). Each
        wait runs in slices of ``SHMATARI_POLL_NS`` with Python's signal
        handlers run between them (:func:`_sliced`), the claim kept across
        them.

        ``record``: an object whose ``client_pid`` is set to ``pid`` here, once
        the claim is this call's, with no Python code run in between, so that
        no signal (Ctrl-C) can land between the claim and its record; a call
        that claimed nothing leaves it alone (set by the caller before, a
        BUSY answer for another handle of this process would let that
        handle's claim be given up by this one's cleanup).

        Returns:
            (int, int, str): the status code, the current client's pid when
            the code is ``STATUS["busy"]`` (else 0), and the message.

        Raises:
            KeyboardInterrupt (or any signal handler's exception): a signal
            arrived while waiting; the claim was not kept.
        """
        self._check()
        cdef char msg[512]
        cdef int32_t holder = 0
        cdef uint64_t next_batch = 0
        cdef int r
        cdef int64_t timeout_ns = timeout_to_ns(timeout)
        cdef int64_t deadline = shmatari_deadline(timeout_ns)  # -1: none
        msg[0] = 0
        r = _sliced(WAIT_RUNNING, &self.geo, NULL, 0, NULL, deadline, NULL, msg, sizeof(msg))
        if r == SHMATARI_ERR_TIMEOUT:
            return r, 0, f"the pool was still starting after {timeout:.1f} s"
        if r == SHMATARI_OK:
            r = shmatari_claim(self.hdr, pid, &holder, msg, sizeof(msg))
        if r != SHMATARI_OK:
            return r, holder, msg.decode("utf-8", "replace")
        try:
            r = _sliced(WAIT_RECOVER, &self.geo, NULL, 0, NULL, deadline, &next_batch, msg,
                       sizeof(msg))
        except BaseException:  # a signal handler's exception: the claim is not kept
            shmatari_unclaim(self.hdr, pid)
            raise
        if r == SHMATARI_OK:
            shmatari_client_close(&self.cl)
            self.cl.pid = pid
            # the batch the recovery set, not consumed_batches read again
            r = shmatari_client_open(&self.cl, &self.geo, next_batch)
            if r != SHMATARI_OK:
                shmatari_unclaim(self.hdr, pid)
                return r, 0, self.client_error
            if record is not None:
                record.client_pid = pid
            return r, 0, ""
        shmatari_unclaim(self.hdr, pid)
        if r == SHMATARI_ERR_TIMEOUT:
            waited = max(timeout, SHMATARI_RECOVER_GRACE_NS / 1e9)  # the C grace
            return r, 0, (f"a command of the previous client was still running after "
                          f"{waited:.2f} s")
        return r, 0, msg.decode("utf-8", "replace")

    def unclaim(self, int32_t pid):
        """Frees the client claim if ``pid`` holds it, and nothing else
        (``shmatari_unclaim``'s compare-and-swap): the server's release of
        a client it saw die, so that a process that reuses the pid later
        does not look like a live client to the next attach. Returns whether
        it freed it (the word held ``pid``)."""
        self._check()
        return shmatari_cas_i32(&self.hdr.client_pid, pid, 0) == pid

    def reclaim(self, int32_t pid):
        """Gives the client claim back to ``pid`` if the word is free (0):
        the server's undoing of a release that may have freed a live
        client's new claim (``cli._Clients.check``). Returns whether it did."""
        self._check()
        return shmatari_cas_i32(&self.hdr.client_pid, 0, pid) == 0

    def release_client(self, int32_t pid):
        """Gives up the client claim if ``pid`` holds it (``shmatari_unclaim``)."""
        self._check()
        shmatari_client_close(&self.cl)
        self.unclaim(pid)

    # -- the client's transport: the segment (client.h) ----------------------
    @property
    def client_address(self):
        """The address (int) of this process's ``shmatari_client``, and its
        size in bytes: for native code in this process that drives the same
        client (shmatari.xla's XLA FFI handlers). Valid while this Segment
        lives; used by one thread at a time."""
        return <size_t>&self.cl, sizeof(shmatari_client)

    @property
    def obs_shape(self):
        """One env's observation shape (``obs_shape``, from the checked geometry)."""
        cdef shmatari_geom *g = &self.geo
        return obs_shape(g.stack_num, g.img_height, g.img_width, g.channels, g.obs_layout)

    @property
    def taken(self):
        """Batches consumed: the index of the next (or held) batch."""
        return self.cl.taken

    def client_send(self, cnp.ndarray actions not None, cnp.ndarray env_ids,
                    bint step=False):
        """``shmatari_send_call``: steps the envs ``env_ids`` (int32, or None
        for every env) with ``actions`` (int32), each 1-D and C-contiguous
        (as :func:`as_int32` makes them); ``step``: as ``step()``, which then
        waits (refused unless a batch is then due). Returns the status code;
        on refusal nothing was posted and :attr:`client_error` says why.
        The arrays are read through their pointers, not typed memoryviews,
        which cost a few microseconds a call on the step path.

        Raises:
            ValueError: arrays that are not int32, 1-D and C-contiguous, or
                whose lengths differ.
        """
        _check_int32(actions, "actions")
        cdef cnp.npy_intp count = cnp.PyArray_DIM(actions, 0)
        cdef const int32_t *acts = <const int32_t *>cnp.PyArray_DATA(actions)
        cdef const int32_t *ids = NULL
        if env_ids is not None:
            _check_int32(env_ids, "env_id")
            # the whole lengths, before n is narrowed to the C client's uint32
            if cnp.PyArray_DIM(env_ids, 0) != count:
                raise ValueError(f"actions must have shape ({cnp.PyArray_DIM(env_ids, 0)},) "
                                 f"(one per env id), got ({count},)")
            # No envs is a list of none, not NULL (which means every env).
            ids = <const int32_t *>cnp.PyArray_DATA(env_ids) if count else \
                <const int32_t *>&self.cl.pending
        if count > <cnp.npy_intp>0xFFFFFFFF:  # the C client counts in uint32
            raise ValueError(f"actions must have shape ({self.geo.num_envs},) or "
                             f"fewer (one per env), got ({count},)")
        cdef uint32_t n = <uint32_t>count
        return shmatari_send_call(&self.cl, SHMATARI_CALL_STEP if step else SHMATARI_CALL_SEND,
                                  acts if n else <const int32_t *>&n, ids, n)

    def client_reset(self, uint32_t cmd, const uint8_t[::1] mask, double timeout=INFINITY,
                     words=None):
        """``shmatari_reset_envs``: resets every env (``mask`` None: first
        dropping what is in flight, waiting up to ``timeout`` seconds, inf:
        no limit, for the commands in flight) or the envs of a uint8
        ``mask``; with ``words`` (``SEED_WORDS`` uint64 words, least
        significant first; ``CMD_RESEED`` of every env), ``shmatari_reseed``:
        the seed words are written once nothing is in flight. Returns the
        status code (``STATUS["timeout"]``: nothing was dropped, nor a word
        written; ``STATUS["closed"]``: :meth:`stop_waits` ended the drain,
        likewise; a signal during the drain raises its exception, with
        nothing changed: the drain runs in slices, :func:`_sliced`).

        Raises:
            KeyboardInterrupt (or any signal handler's exception).
            ValueError: ``timeout`` NaN or negative; ``words`` not
                ``SEED_WORDS`` long.
            OverflowError: a word not in 0..2**64 - 1.
        """
        if self.cl.hdr == NULL:
            raise ValueError("no client open")
        cdef const uint8_t *m = self._mask(mask)
        cdef int64_t timeout_ns = timeout_to_ns(timeout)
        cdef int64_t deadline = shmatari_deadline(timeout_ns)  # -1: none
        cdef uint64_t w[SHMATARI_SEED_WORDS]
        cdef unsigned i
        if words is None:
            return _sliced(WAIT_RESET, NULL, &self.cl, cmd, m, deadline, NULL, NULL, 0, NULL,
                           &self.stopping)
        if len(words) != SHMATARI_SEED_WORDS:
            raise ValueError(f"the seed is {SHMATARI_SEED_WORDS} words, got {len(words)}")
        for i in range(SHMATARI_SEED_WORDS):
            w[i] = words[i]
        return _sliced(WAIT_RESET, NULL, &self.cl, cmd, m, deadline, NULL, NULL, 0, w,
                       &self.stopping)

    def client_next_batch(self, double timeout, double stall=-1.0):
        """``shmatari_next_batch_within``: waits up to ``timeout`` seconds
        for the next batch and holds it (index :attr:`taken`) until
        :meth:`client_release`. In a first-ready pool, ``stall`` seconds
        (< 0: no limit) without a result from a worker that holds commands
        of this client end the wait with ``ERR_TIMEOUT`` and
        :attr:`client_stalled` set (the worker: :attr:`client_stalled_worker`),
        even while other workers fill batches.
        Returns the status code.

        Raises:
            KeyboardInterrupt (or any signal handler's exception): a signal
            arrived while waiting (nothing changed).
        """
        cdef int r
        cdef int64_t timeout_ns = timeout_to_ns(timeout)
        cdef int64_t stall_ns = -1 if stall < 0 else timeout_to_ns(stall)
        with nogil:
            r = shmatari_next_batch_within(&self.cl, timeout_ns, stall_ns)
        if r == SHMATARI_ERR_INTERRUPTED:
            PyErr_CheckSignals()
        return r

    @property
    def client_stalled(self):
        """Whether the last :meth:`client_next_batch` ended with
        ``ERR_TIMEOUT`` because a worker stalled (its ``stall`` limit), not
        because its own ``timeout`` passed."""
        return self.cl.stalled != 0

    @property
    def client_stalled_worker(self):
        """The worker that ended the last wait as stalled, or None."""
        return None if self.cl.stalled == 0 else self.cl.stalled - 1

    def client_release(self):
        """Consumes the batch held. Called right after the
        :meth:`client_next_batch` that took it, whose process check
        (``shmatari_check_process``) stands for this one: it releases
        through ``shmatari_release_held``, without a second ``getpid()``."""
        shmatari_release_held(&self.cl)

    def pool_check(self, bint check_pids=True):
        """Whether the pool can still answer (``shmatari_pool_check``).

        Returns:
            (int, str): ``OK`` or a liveness status, and its message.
        """
        self._check()
        cdef char msg[512]
        cdef int r
        msg[0] = 0
        with nogil:  # it may wait up to SHMATARI_DEATH_RECORD_NS for a server's record
            r = shmatari_pool_check(&self.geo, check_pids, msg, sizeof(msg))
        return r, msg.decode("utf-8", "replace")

    def wait_ready(self, uint32_t count, double timeout):
        """Waits until ``count`` workers are ready; False on failure, or
        once ``timeout`` seconds have passed in all: main_seq changing (any
        process of the user may bump it) does not stretch the wait, so the
        caller's liveness checks and deadline come at least that often."""
        self._check()
        cdef shmatari_header *h = self.hdr
        cdef shmatari_geom *g = &self.geo
        cdef uint32_t seen
        cdef int r
        cdef int64_t timeout_ns = timeout_to_ns(timeout), left = timeout_ns
        cdef int64_t deadline = shmatari_deadline(timeout_ns)  # -1: none
        while True:
            with nogil:
                seen = shmatari_load_acquire(&h.main_seq)
                if deadline >= 0:
                    left = deadline - shmatari_now_ns()
                if shmatari_load_acquire(&h.ready_workers) >= count:
                    r = -1
                elif shmatari_load_acquire(&h.failed_workers) != 0:
                    r = -2
                elif deadline >= 0 and left <= 0:
                    r = SHMATARI_WAIT_TIMEOUT
                else:
                    r = shmatari_wait_change(&h.main_seq, seen, &h.main_sleeping,
                                             0, SHMATARI_SPIN_PAUSE, left)
            if r == -1:
                return True
            if r != SHMATARI_WAIT_CHANGED:
                if r == SHMATARI_WAIT_EINTR:
                    PyErr_CheckSignals()
                return False

    def clear_slots(self):
        """Marks every row of every slot empty (``env_id`` -1); the creator
        calls it once, before any worker starts."""
        self._check()
        cdef uint64_t s
        for s in range(self.geo.ring_depth):
            shmatari_clear_rows(&self.geo, s)

    # -- restarting dead workers (the creator, while no other worker is busy) --
    def in_flight(self):
        """bool array, shape (num_envs,): envs with a command not yet answered
        (``req_seq != ack_seq``)."""
        self._check()
        cdef uint32_t e
        cdef shmatari_env_ctrl *ec
        out = np.zeros(self.geo.num_envs, np.bool_)
        cdef uint8_t[::1] o = out.view(np.uint8)
        for e in range(self.geo.num_envs):
            ec = shmatari_env(&self.geo, e)
            o[e] = shmatari_load_acquire(&ec.req_seq) != shmatari_load_acquire(&ec.ack_seq)
        return out

    def recover(self, groups, running=None, posted=None):
        """Makes the ring consistent after the workers of ``groups`` died, and says what
        their replacements must publish (``shmatari_recover_workers``, beside
        the write order it relies on in ``shmatari/shmatari.h``).

        Call it once every other worker is idle (no command of theirs in
        flight) and before the replacements start; the client must not post
        meanwhile.

        Which env has a command in flight, and how many commands it was
        sent, come from this process's client (its ``SHMATARI_ENV_RUNNING``
        bits and its own counts, ``env_posted``), never from the segment's
        req_seq and ack_seq: another process that wrote ack_seq between the
        worker's death and its replacement's start made the replacement skip
        a command in flight (the env answered nothing again) or run one
        twice (every later result of the env one command late), with no
        error (an attacker's pass, 2026-12-06).

        Args:
            groups: the dead workers' env ranges (``range``s), from the
                caller's own record of the groups, not the segment's words
                (which any process that maps the segment can rewrite).
            running, posted: the client's record, where this process has no
                client open (a test of a ring set up by hand): per env, a
                command whose result the client has not taken (bool), and the
                client's count of commands to it (uint32). With a client
                open, its own (these must then be None).

        Returns:
            dict: ``{env: (position, seen)}`` for every env of those
            workers. ``position``: for an env with a command in flight and
            no complete row, which its replacement answers first, the
            reserved row to write (>= 0: an asynchronous pool's hole) or -1
            (the usual position); -2 for every other env. ``seen``: the
            last command its replacement counts as answered (the client's
            count, less one where it answers the command in flight), which
            is also the env's ack_seq as this call leaves it.

        Raises:
            RuntimeError: the ring holds holes that no dead env can explain
                (a bug, or a segment written by something else), or no
                client is open in this process.
        """
        self._check()
        cdef uint32_t N = self.geo.num_envs
        own = self.cl.env_flags != NULL and self.cl.env_posted != NULL
        if own == (running is not None or posted is not None):
            raise RuntimeError("recover() takes running and posted only where this process "
                               "has no client open, and then needs both")
        dead = np.zeros(N, np.uint8)
        for group in groups:
            dead[group.start:group.stop] = 1
        if own:
            running = np.asarray(<uint8_t[:N]>self.cl.env_flags) & SHMATARI_ENV_RUNNING
            posted = np.asarray(<uint32_t[:N]>self.cl.env_posted).copy()
        running = np.ascontiguousarray(np.asarray(running) != 0, np.uint8)
        posted = np.ascontiguousarray(posted, np.uint32)
        if running.shape != (N,) or posted.shape != (N,):
            raise ValueError("running and posted need one entry per env")
        plan = np.empty(N, np.int64)
        rows = np.empty(<size_t>self.geo.ring_depth * self.geo.batch_size, np.int32)
        cdef uint8_t[::1] d = dead
        cdef uint8_t[::1] rn = running
        cdef uint32_t[::1] po = posted
        cdef int64_t[::1] pl = plan
        cdef int32_t[::1] rw = rows
        cdef char msg[512]
        msg[0] = 0
        if shmatari_recover_workers(&self.geo, &d[0], &rn[0], &po[0], &pl[0], &rw[0], msg,
                                    sizeof(msg)) != SHMATARI_OK:
            raise RuntimeError(msg.decode("utf-8", "replace"))
        # the replacements are not counted silent from before they started
        # (however the deaths were noticed)
        shmatari_forget_progress(&self.cl)
        return {e: (int(plan[e]), (int(posted[e]) - (1 if plan[e] >= -1 else 0)) % 2**32)
                for e in np.flatnonzero(dead).tolist()}

    def reset_worker(self, uint32_t worker):
        """Readies a dead worker's record for its replacement: state
        STARTING, no pid, no error text (and one failed worker fewer if it
        had failed; never below 0: a FAILED state that another process wrote
        into a live worker's record, with the count left at 0, made it wrap
        to 2**32 - 1, and the pool never ran again)."""
        self._check()
        cdef shmatari_worker_ctrl *wc = shmatari_worker(&self.geo, worker)
        cdef uint32_t count, seen
        if shmatari_load_acquire(&wc.state) == SHMATARI_WORKER_FAILED:
            count = shmatari_load_acquire(&self.hdr.failed_workers)
            while count != 0:
                seen = shmatari_cas_u32(&self.hdr.failed_workers, count, count - 1)
                if seen == count:
                    break
                count = seen
        wc.pid = 0
        wc.sleeping = 0
        shmatari_error_text(&self.geo, worker)[0] = 0
        shmatari_store_release(&wc.state, SHMATARI_WORKER_STARTING)

    cdef int _copy_batch(self, uint64_t batch, char *fields_out, char *obs_out,
                         bint final) except -1:
        """Copies batch ``batch``'s result fields (the slot's bytes from the
        first field array up to the observations, as laid out in the slot,
        ``slot_obs_offset - slot_field_offset[0]`` bytes) to ``fields_out``
        and, unless ``obs_out`` is NULL, its observations
        (``obs_env_bytes * batch_size`` bytes) to ``obs_out``: private
        buffers of those sizes, one memcpy each. With ``final``, its final
        records (same-step pools) instead. The batch this process's client
        holds (:attr:`taken`) has its fields from the client's private copy
        of the rows (``shmatari_batch_fields``: read once, what its state
        machine read), not from the segment again."""
        cdef shmatari_geom *g = &self.geo
        cdef char *slot = shmatari_slot(g, batch)
        if final:
            if g.slot_final_offset == 0:
                raise ValueError("this pool has no final records (not same_step)")
            slot += g.slot_final_offset
        cdef size_t nf = g.slot_obs_offset - g.slot_field_offset[0]
        cdef size_t no = g.obs_env_bytes * g.batch_size
        cdef const char *rows = slot + g.slot_field_offset[0]
        if (not final and self.cl.hdr != NULL and self.cl.holding
                and batch == self.cl.taken and self.cl.batch_fields != NULL):
            rows = <const char *>self.cl.batch_fields
        with nogil:
            memcpy(fields_out, rows, nf)
            if obs_out != NULL:
                memcpy(obs_out, slot + g.slot_obs_offset, no)
        return 0

    def collect(self, uint64_t batch, cnp.ndarray obs_out, bint final=False,
                cnp.ndarray expect_ids=None, cnp.ndarray final_rows=None):
        """Copies batch ``batch`` (``_copy_batch``) into a new private buffer
        and returns NumPy arrays over it, built here with NumPy's C API: the
        client's hot path, where a dozen Python-level views cost more than the
        round trip itself.

        Args:
            batch: the batch index (a count of batches taken).
            obs_out: a C-contiguous, writeable uint8 array of
                ``batch_size * obs_env_bytes`` bytes (any shape) for the
                observations, or None.
            final: read the same-step final records instead; then
                ``expect_ids`` (int32) and ``final_rows`` (bool), each of
                shape (batch_size,), the batch's own ``env_id`` and ``_final``
                (from its ``collect``), are required: only the rows that
                hold a final record are checked, each against its row's env,
                and the others are left as they are (no worker writes them;
                their arrays are never read: ``build_info`` takes
                ``final_rows``' rows only).

        Returns:
            (fields, bits): ``fields`` maps each name of ``COLLECTED`` to an
            array of shape (batch_size,): one per field of ``FIELDS`` (the
            0/1 fields as bool), then three bool arrays, the rows'
            ``FLAG_RESET``, ``FLAG_RESTARTED`` and ``FLAG_FINAL`` bits
            (``_reset``, ``_restarted``, ``_final``). ``bits``:
            ``BATCH_DONE`` if a row has ``episode_done``, ``BATCH_FINAL`` if a
            row has ``FLAG_FINAL``, ``BATCH_RESET`` if a row has ``FLAG_RESET``.
            The one place where the rows' flags become bits.

        Raises:
            ValueError: ``obs_out`` of another size, type or layout; ``final``
                in a pool without final records, or without ``expect_ids``
                and ``final_rows``; a row whose ``env_id`` is outside the pool,
                or a final record whose ``env_id`` is not its row's (written
                by something other than its workers).
        """
        self._check()
        cdef shmatari_geom *g = &self.geo
        cdef cnp.npy_intp B = g.batch_size
        cdef size_t nf = g.slot_obs_offset - g.slot_field_offset[0]
        cdef size_t no = g.obs_env_bytes * g.batch_size
        cdef char *obs_ptr = NULL
        if obs_out is not None:
            if (cnp.PyArray_TYPE(obs_out) != cnp.NPY_UINT8 or not cnp.PyArray_ISCARRAY(obs_out)
                    or <size_t>cnp.PyArray_NBYTES(obs_out) != no):
                raise ValueError(f"collect needs a C-contiguous writeable uint8 array of {no} "
                                 f"bytes for the observations, got {obs_out.dtype} "
                                 f"{(<object>obs_out).shape}")
            obs_ptr = <char *>cnp.PyArray_DATA(obs_out)
        cdef const int32_t *want = NULL
        cdef const uint8_t *has_final = NULL
        if final:
            if (expect_ids is None or final_rows is None
                    or cnp.PyArray_TYPE(expect_ids) != cnp.NPY_INT32
                    or cnp.PyArray_TYPE(final_rows) != cnp.NPY_BOOL
                    or not cnp.PyArray_ISCARRAY_RO(expect_ids)
                    or not cnp.PyArray_ISCARRAY_RO(final_rows)
                    or cnp.PyArray_SIZE(expect_ids) != B or cnp.PyArray_SIZE(final_rows) != B):
                raise ValueError(f"collect(final=True) needs the batch's env_id (int32) and "
                                 f"_final (bool), each of shape ({B},)")
            want = <const int32_t *>cnp.PyArray_DATA(expect_ids)
            has_final = <const uint8_t *>cnp.PyArray_DATA(final_rows)
        cdef cnp.npy_intp raw_len = <cnp.npy_intp>(nf + 3 * B)
        cdef cnp.ndarray raw = cnp.PyArray_EMPTY(1, &raw_len, cnp.NPY_UINT8, 0)
        cdef uint8_t *base = <uint8_t *>cnp.PyArray_DATA(raw)
        self._copy_batch(batch, <char *>base, obs_ptr, final)
        cdef const uint32_t *flags = <const uint32_t *>(
            base + g.slot_field_offset[<int>SHMATARI_FIELD_FLAGS] - g.slot_field_offset[0])
        cdef const uint8_t *done = <const uint8_t *>(
            base + g.slot_field_offset[<int>SHMATARI_FIELD_EPISODE_DONE] - g.slot_field_offset[0])
        cdef const int32_t *ids = <const int32_t *>(
            base + g.slot_field_offset[<int>SHMATARI_FIELD_ENV_ID] - g.slot_field_offset[0])
        cdef Py_ssize_t i
        for i in range(B):
            # Worker-written: bounded before the client indexes with it (the
            # private copy cannot change under this check). A final record
            # is checked only in a row that has one, against its row's env:
            # until 2026-12-06 every row's was bounded, and -1 written by
            # another process into a row without one (where no worker
            # writes) raised after the batch was taken, its results lost and
            # the pool not broken (an attacker's pass).
            if final:
                if has_final[i] and ids[i] != want[i]:
                    raise ValueError(
                        f"batch {batch} row {i} holds a final record of env_id {ids[i]}, not "
                        f"its row's env {want[i]}: the segment was written by something "
                        f"other than its workers")
            elif ids[i] < 0 or <uint32_t>ids[i] >= g.num_envs:
                raise ValueError(
                    f"batch {batch} row {i} holds env_id {ids[i]}, outside 0..{g.num_envs - 1}: "
                    f"the segment was written by something other than its workers")
        cdef int bits = _row_bits(flags, done, B, base + nf)
        cdef dict fields = {}
        cdef int f
        for f in range(<int>SHMATARI_FIELD_COUNT):
            fields[<str>COLLECTED[f]] = _view(
                raw, <char *>base + g.slot_field_offset[f] - g.slot_field_offset[0], B,
                _PRESENTED[f])
        for f in range(3):
            fields[<str>COLLECTED[<int>SHMATARI_FIELD_COUNT + f]] = _view(
                raw, <char *>base + nf + f * B, B, _BOOL)
        return fields, bits

    # -- views ---------------------------------------------------------------
    def slot_offset(self, uint64_t slot):
        """Byte offset of slot ``slot`` (mod ring_depth) in the segment."""
        self._check()
        return <uint64_t>(shmatari_slot(&self.geo, slot) - self.base)


# --------------------------------------------------------------------------
# Who may attach: the C client's policy (shmatari_trust_fd / _path in
# shmatari/attach.h), its one statement, for shmatari.shm too.

def trust_fd(path, int fd):
    """Checks an open segment as ``shmatari_attach`` does
    (``shmatari_trust_fd``, docs/layout.md "Trust"): one ``fstat`` of ``fd``,
    then a regular file of this process's effective uid, mode 0600 or less,
    every byte allocated and (Linux) no hole before its end.

    Args:
        path: the segment's path, for the message (str).
        fd: a descriptor of it, open (its offset is left at 0).

    Returns:
        (int, str, int): ``OK``, ``STATUS["untrusted"]`` or
        ``STATUS["system"]`` (``fstat`` failed); the message; the size
        ``fstat`` gave (bytes; 0 unless ``OK``), which is the size to map.
    """
    cdef bytes p = path.encode("utf-8", "surrogateescape")
    cdef struct_stat st
    cdef char msg[512]
    cdef int r
    msg[0] = 0
    r = shmatari_trust_fd(p, fd, &st, msg, sizeof(msg))
    return r, msg.decode("utf-8", "replace"), (st.st_size if r == SHMATARI_OK else 0)


def trust_path(path):
    """Checks what is at ``path`` from its ``lstat``, as ``shmatari_attach``
    does when opening it failed (``shmatari_trust_path``): a symbolic link,
    another user's file, a FIFO or socket, a mode open to others.

    Returns:
        (int, str): ``OK`` (nothing wrong with it: the open failed for
        another reason), ``STATUS["untrusted"]`` or ``STATUS["system"]``
        (``lstat`` failed), and the message.
    """
    cdef bytes p = path.encode("utf-8", "surrogateescape")
    cdef char msg[512]
    msg[0] = 0
    r = shmatari_trust_path(p, msg, sizeof(msg))
    return r, msg.decode("utf-8", "replace")
