# Included by _core.pyx (one compiled module, shmatari._core): the client state machine
# (ClientMachine, shmatari/client_state.h) and the conversions of its arguments.

# --------------------------------------------------------------------------
# Converting a call's integer arguments (the C client checks their values)

ctypedef fused any_int:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    uint32_t
    uint64_t


cdef void _saturate(const any_int[:] a, int32_t[::1] out) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(a.shape[0]):
        if a[i] < 0:
            out[i] = <int32_t>a[i] if <int64_t>a[i] >= -2147483648 else -2147483648
        else:
            out[i] = <int32_t>a[i] if <uint64_t>a[i] <= 2147483647 else 2147483647


cdef object _int32_of_plain(object values):
    """as_int32's fast path, for what a trainer passes on every step: a
    native-endian, aligned, 1-D NumPy array of signed integers of 4 or 8 bytes
    (``integers()``'s int64, a policy's argmax, ``info["env_id"]``): a new
    int32 array, saturated as ``_saturate`` does, without NumPy's Python-level
    calls (microseconds a step on the cache a worker left:
    ``benchmarks/results/trainer-path-ab.txt``). None for anything else (the
    general path then converts it)."""
    if type(values) is not np.ndarray:
        return None
    cdef cnp.ndarray a = <cnp.ndarray>values
    cdef cnp.npy_intp size = cnp.PyArray_ITEMSIZE(a)
    if (cnp.PyArray_NDIM(a) != 1 or not cnp.PyArray_ISSIGNED(a) or (size != 4 and size != 8)
            or not cnp.PyArray_ISNOTSWAPPED(a) or not cnp.PyArray_ISALIGNED(a)):
        return None
    cdef cnp.npy_intp n = cnp.PyArray_DIM(a, 0)
    cdef cnp.npy_intp stride = cnp.PyArray_STRIDE(a, 0)
    cdef const char *src = <const char *>cnp.PyArray_DATA(a)
    cdef int64_t v
    cdef Py_ssize_t i
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(1, &n, cnp.NPY_INT32, 0)
    cdef int32_t *dst = <int32_t *>cnp.PyArray_DATA(out)
    if size == 8:
        for i in range(n):
            v = (<const int64_t *>(src + i * stride))[0]
            dst[i] = <int32_t>(-2147483648 if v < -2147483648 else
                               2147483647 if v > 2147483647 else v)
    else:
        for i in range(n):
            dst[i] = (<const int32_t *>(src + i * stride))[0]
    return out


cdef int _check_int32(cnp.ndarray a, str name) except -1:
    """ValueError unless ``a`` is a 1-D, C-contiguous, aligned, native int32
    array (what :func:`as_int32` returns), the layout ``Segment.client_send``
    reads through a pointer."""
    if (cnp.PyArray_NDIM(a) != 1 or cnp.PyArray_TYPE(a) != cnp.NPY_INT32
            or not cnp.PyArray_ISCARRAY_RO(a) or not cnp.PyArray_ISNOTSWAPPED(a)):
        raise ValueError(f"{name} must be a 1-D C-contiguous native int32 array "
                         f"(as_int32), got {a.dtype} {(<object>a).shape}")
    return 0


def as_int32(values, str name, Py_ssize_t n=-1):
    """Converts ``values`` (any integer dtype, or a sequence of ints) to a new
    int32 array, shape (n,). Values beyond int32 are clamped to its bounds,
    so that the C client, which checks every value, refuses them (its text
    then shows the bound, as "2147483647 or more").

    Args:
        values: the call's argument.
        name: the argument's name, for the error text.
        n: the length expected, for the error text (the C client checks it).

    Raises:
        TypeError: not integers (None, floats, bools, objects are refused).
        ValueError: not one-dimensional.
    """
    fast = _int32_of_plain(values)
    if fast is not None:
        return fast
    if values is None:
        raise TypeError(f"{name} must be a 1-D array of integers, got None")
    try:
        a = np.asarray(values)
    except (TypeError, ValueError) as exc:  # ragged nesting, odd objects
        raise TypeError(f"{name} must be a 1-D array of integers, "
                        f"got {type(values).__name__}: {exc}") from exc
    if a.shape == (0,):
        return np.empty(0, np.int32)  # no values to convert (``[]`` is float64)
    if a.dtype.kind not in "iu":
        hint = (" (Python ints beyond int64, or objects that are not ints)"
                if a.dtype.kind == "O" else "")
        raise TypeError(f"{name} must be integers, got dtype {a.dtype}{hint}")
    if a.ndim != 1:
        raise ValueError(f"{name} must have shape ({n if n >= 0 else 'n'},), got {a.shape}")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    out = np.empty(a.shape[0], np.int32)
    if a.dtype == np.int64:
        _saturate[int64_t](a, out)
    elif a.dtype == np.int32:
        _saturate[int32_t](a, out)
    elif a.dtype == np.int16:
        _saturate[int16_t](a, out)
    elif a.dtype == np.int8:
        _saturate[int8_t](a, out)
    elif a.dtype == np.uint64:
        _saturate[uint64_t](a, out)
    elif a.dtype == np.uint32:
        _saturate[uint32_t](a, out)
    elif a.dtype == np.uint16:
        _saturate[uint16_t](a, out)
    else:
        _saturate[uint8_t](a, out)
    return out


#: ``info``'s per-env keys, and the field (``COLLECTED``) each one is.
INFO_FIELDS = (("env_id", "env_id"), ("lives", "lives"), ("raw_reward", "raw_reward"),
               ("game_over", "game_over"), ("elapsed_step", "elapsed_step"),
               ("episode_frame_number", "episode_frame_number"),
               ("frame_number", "frame_number"), ("reset", "_reset"),
               ("worker_restarted", "_restarted"))


def per_env_info(fields):
    """``info``'s per-env arrays (``INFO_FIELDS``) from a batch's fields (a
    mapping of ``COLLECTED`` names to arrays of shape (n,), as
    ``Segment.collect`` returns them), the arrays themselves, not copies;
    ``game_over`` as bool (a view where the field is uint8: the pipe
    baseline's rows). Built in C: it runs once a batch on the step path.

    Returns:
        dict: ``{"env_id": int32 (n,), "lives": int32, "raw_reward": float32,
        "game_over": bool, "elapsed_step": int32, "episode_frame_number":
        int64, "frame_number": int64, "reset": bool, "worker_restarted":
        bool}``.

    Raises:
        KeyError: a field missing.
    """
    cdef dict info = {}
    cdef tuple pair
    for pair in INFO_FIELDS:
        info[pair[0]] = fields[pair[1]]
    cdef object game_over = info["game_over"]
    if (<cnp.ndarray?>game_over).dtype is not _BOOL:
        info["game_over"] = game_over.view(_BOOL)
    return info


def obs_shape(uint32_t stack_num, uint32_t img_height, uint32_t img_width,
              uint32_t channels, uint32_t obs_layout):
    """One env's observation shape, as ``shmatari_obs_shape`` (client.h) lays
    it out: ``(stack_num, h, w)`` grayscale, ``(stack_num, h, w, 3)``
    channels-last RGB, ``(stack_num * 3, h, w)`` channels-first RGB."""
    cdef shmatari_client c
    cdef uint32_t shape[4]
    memset(&c, 0, sizeof(c))
    c.geom.stack_num, c.geom.img_height, c.geom.img_width = stack_num, img_height, img_width
    c.geom.channels, c.geom.obs_layout = channels, obs_layout
    cdef int n = shmatari_obs_shape(&c, shape)
    return tuple(shape[i] for i in range(n))


# --------------------------------------------------------------------------
# The client state machine (client_state.h), for every transport

#: ``Segment.collect``'s summary bits: some row ended an episode, some row
#: holds a final record, some row is a reset.
cdef enum:
    _BATCH_DONE = 1
    _BATCH_FINAL = 2
    _BATCH_RESET = 4
BATCH_DONE, BATCH_FINAL, BATCH_RESET = _BATCH_DONE, _BATCH_FINAL, _BATCH_RESET


cdef int _row_bits(const uint32_t *flags, const uint8_t *done, Py_ssize_t n,
                   uint8_t *out) noexcept nogil:
    """The one place where rows' flags become bits: writes each row's
    FLAG_RESET, FLAG_RESTARTED and FLAG_FINAL bit (0/1) to out[i],
    out[n + i] and out[2n + i]; returns the batch's ``BATCH_*`` bits."""
    cdef int bits = 0
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = (flags[i] & SHMATARI_FLAG_RESET) != 0
        out[n + i] = (flags[i] & SHMATARI_FLAG_RESTARTED) != 0
        out[2 * n + i] = (flags[i] & SHMATARI_FLAG_FINAL) != 0
        if done[i]:
            bits |= _BATCH_DONE
        if out[2 * n + i]:
            bits |= _BATCH_FINAL
        if out[i]:
            bits |= _BATCH_RESET
    return bits


def row_bits(const uint32_t[::1] flags, const uint8_t[::1] episode_done):
    """As ``Segment.collect`` reads them, for rows from elsewhere (the pipe
    baseline): ``({"_reset", "_restarted", "_final"}: bool (n,), bits)``."""
    cdef Py_ssize_t n = flags.shape[0]
    if episode_done.shape[0] != n:
        raise ValueError("row_bits needs one episode_done per row")
    out = np.zeros(3 * n, np.bool_)
    cdef uint8_t[::1] o = out.view(np.uint8)
    cdef int bits = _row_bits(&flags[0], &episode_done[0], n, &o[0]) if n else 0
    return {"_reset": out[:n], "_restarted": out[n:2 * n], "_final": out[2 * n:]}, bits


cdef class ClientMachine:
    """The client state machine of ``shmatari/client_state.h`` (state, each
    env's running / ended bits, the calls' checks and refusal texts), apart
    from any transport: a :class:`Segment` is one (commands posted to the
    segment); ``shmatari.ray`` makes one whose transport is Ray.

    Args:
        num_envs, batch_size, num_actions: the pool's.
        autoreset_mode: a value of ``AUTORESET_MODES``.

    Each call returns a status code: ``OK``, or ``ERR_STATE`` / ``ERR_INVALID``
    with nothing changed and :attr:`client_error` saying why.
    """

    cdef shmatari_client cl

    def __cinit__(self, *args, **kwargs):
        memset(&self.cl, 0, sizeof(self.cl))
        self.cl.names = shmatari_call_names_python
        self.cl.spin_mode = SHMATARI_SPIN_PAUSE

    def __init__(self, uint32_t num_envs, uint32_t batch_size, uint32_t num_actions,
                 uint32_t autoreset_mode):
        if shmatari_machine_open(&self.cl, num_envs, batch_size, num_actions,
                                 autoreset_mode) != SHMATARI_OK:
            raise MemoryError(self.client_error)

    def __dealloc__(self):
        shmatari_client_close(&self.cl)

    @property
    def client_state(self):
        """The client's state: a value of ``CLIENT_STATES`` (``shmatari_client_state``)."""
        return self.cl.state

    @property
    def client_error(self):
        """The last refusal or failure of a client call, in words (str)."""
        return self.cl.error.decode("utf-8", "replace")

    @property
    def pending(self):
        """Envs with a command whose result was not returned."""
        return self.cl.pending

    def env_flags(self):
        """uint8 array, shape (num_envs,): each env's ``SHMATARI_ENV_*`` bits
        (``ENV_RUNNING``, ``ENV_ENDED``, and the command in flight and whether
        the last row ended: ``client_state.h``)."""
        if self.cl.env_flags == NULL:
            raise ValueError("no client open")
        return np.asarray(<uint8_t[:self.cl.geom.num_envs]>self.cl.env_flags).copy()

    def client_break(self):
        """Marks the client broken (``shmatari_client_break``)."""
        shmatari_client_break(&self.cl)

    cdef const int32_t *_ids(self, const int32_t[::1] actions, const int32_t[::1] env_ids) except? NULL:
        """env_ids' pointer (NULL: every env), once its length is checked
        against the actions' (the one check of the count with env ids)."""
        if env_ids is None:
            return NULL
        if env_ids.shape[0] != actions.shape[0]:
            raise ValueError(f"actions must have shape ({env_ids.shape[0]},) (one per env "
                             f"id), got ({actions.shape[0]},)")
        # No envs is a list of none, not NULL (which means every env).
        return &env_ids[0] if env_ids.shape[0] else <const int32_t *>&self.cl.pending

    def accept_send(self, const int32_t[::1] actions, const int32_t[::1] env_ids, bint step=False):
        """``shmatari_accept_send``: checks a send (``step``: one that a wait
        follows) of ``actions`` (int32) to ``env_ids`` (int32, or None for
        every env) and marks the envs running; the caller's transport then
        carries the commands."""
        cdef const int32_t *ids = self._ids(actions, env_ids)
        cdef uint32_t n = actions.shape[0]
        return shmatari_accept_send(&self.cl, SHMATARI_CALL_STEP if step else SHMATARI_CALL_SEND,
                                    &actions[0] if n else <const int32_t *>&n, ids, n)

    def check_wait(self):
        """OK if a batch is due (state ``waiting``), else the refusal (``ERR_STATE``)."""
        return shmatari_check_state(&self.cl, SHMATARI_CALL_WAIT, 1u << SHMATARI_CLIENT_WAITING)

    def check_reset(self, uint32_t cmd, const uint8_t[::1] mask):
        """``shmatari_check_reset``: a reset of every env (``mask`` None) or
        of the envs of a uint8 mask of shape (num_envs,); changes nothing."""
        return shmatari_check_reset(&self.cl, cmd, self._mask(mask))

    def accept_reset(self, const uint8_t[::1] mask):
        """``shmatari_accept_reset``: records a reset that :meth:`check_reset`
        accepted, once the transport dropped what was in flight (``mask`` None)."""
        shmatari_accept_reset(&self.cl, self._mask(mask))

    cdef const uint8_t *_mask(self, const uint8_t[::1] mask) except? NULL:
        if mask is None:
            return NULL
        if <uint32_t>mask.shape[0] != self.cl.geom.num_envs:
            raise ValueError("the mask needs one byte per env")
        return &mask[0]

    def accept_rows(self, const int32_t[::1] env_id, const uint32_t[::1] flags,
                    const uint8_t[::1] terminated, const uint8_t[::1] truncated):
        """``shmatari_accept_rows``: records a batch's rows (each env no
        longer running; ``ENV_ENDED`` under disabled autoreset). Returns the
        number of rows if every row named an env with a command in flight
        (once), else the index of the first that did not (skipped)."""
        cdef uint32_t n = env_id.shape[0]
        if flags.shape[0] != n or terminated.shape[0] != n or truncated.shape[0] != n:
            raise ValueError("accept_rows needs one flags, terminated and truncated per row")
        if n:
            return shmatari_accept_rows(&self.cl, &env_id[0], &flags[0], &terminated[0],
                                        &truncated[0], n)
        return 0

    def row_problem(self, int32_t env, uint32_t flags):
        """Why a row of ``env`` with ``flags`` (``FLAG_*``) cannot be that env's
        result now, in words (str), or None if it can: the env is outside the
        pool, has no command in flight, or its command was another
        (``shmatari_row_mismatch``). Changes nothing: for the row that
        :meth:`accept_rows` skipped, whose env's bits it left as they were."""
        cdef const char *why
        if self.cl.env_flags == NULL:
            raise ValueError("no client open")
        if env < 0 or <uint32_t>env >= self.cl.geom.num_envs:
            return "outside the pool"
        if not (self.cl.env_flags[env] & SHMATARI_ENV_RUNNING):
            return ("which had no command in flight (or one named by an earlier row; "
                    "each command is answered once)")
        why = shmatari_row_mismatch(self.cl.env_flags[env], flags, self.cl.geom.autoreset_mode)
        return None if why == NULL else why.decode("ascii")


# --------------------------------------------------------------------------
# The per-pool thread guard of the client's public calls

from cpython.pythread cimport PyThread_get_thread_ident


cdef class CallGuard:
    """One thread inside a pool's calls at a time (``shmatari.client``'s
    ``_one_thread``): taken, the call run and the guard given back in one C
    function, so that a KeyboardInterrupt (Ctrl-C), which Python raises only
    between bytecodes of Python code, cannot land between taking the guard
    and the ``finally`` that gives it back. (A ``threading.Lock`` taken and
    released by Python code could be left held by a Ctrl-C there, and every
    later call was refused as "another thread is inside".)

    Once :meth:`shut` (a close()), no thread may come in again: a call
    refused then gets ``closed(name, None)``. Checked and taken with the GIL
    held, so that no thread slips in between a close()'s check that no call
    runs and its release of the client and the mapping (a thread stepping in
    a loop while another closed the pool crashed the process with SIGFPE: a
    helper's pass, 2026-12-05). And a call that a close() from a signal
    handler in its own thread overtook, and that then failed on the
    released pool, gets ``closed(name, error)`` raised from that error, not
    the error itself ("segment released").

    Args:
        refuse: ``refuse(inside, name, same_thread=False) -> Exception``, the
            error for a call ``name`` made while another thread is inside call
            ``inside`` (or, ``same_thread``, this thread: from a signal
            handler that interrupted it; no public call runs another).
        closed: ``closed(name, error) -> Exception``, the error for a call
            ``name`` once the guard is shut (``error``: what the call raised
            on the pool closed under it, or None: it was not run).
        forked: ``forked(pid) -> Exception``, the error for a call made in a
            process other than ``pid``, the one that made the guard (a child
            forked from it); checked first, with a C ``getpid()``. None: no
            check.
    """

    cdef unsigned long holder  # thread ident inside, 0: none
    cdef object inside         # the name of the call it is inside
    cdef object refuse
    cdef object closed_error
    cdef bint closed
    cdef object on_leave       # run as the thread inside leaves (defer)
    cdef long pid              # the process the guard was made in
    cdef object forked

    def __cinit__(self, refuse, closed, forked=None):
        self.holder = 0
        self.inside = ""
        self.refuse = refuse
        self.closed_error = closed
        self.closed = False
        self.on_leave = None
        self.pid = getpid()
        self.forked = forked

    def run(self, str name, method, obj, tuple args, dict kwargs):
        """Returns ``method(obj, *args, **kwargs)``, run under the guard.

        Raises:
            ``forked(pid)``: called in a process other than the guard's
                (``pid``); nothing was run.
            ``refuse(inside, name)``: another thread is inside; nothing was run.
            ``refuse(inside, name, True)``: this thread is inside already (a
                signal handler's call); nothing was run.
            ``closed(name, None)``: the guard is shut; nothing was run.
            ``closed(name, error)``: the guard was shut while the call ran,
                and it failed with ``error`` (an ``Exception``; where
                ``closed`` returns ``error`` itself, that is raised).
        """
        if self.forked is not None and getpid() != self.pid:
            raise self.forked(self.pid)
        cdef unsigned long me = PyThread_get_thread_ident()
        if self.holder == me:
            # No call runs another: this one comes from a signal handler (or
            # a finalizer) that interrupted the call inside. Run, it took
            # that call's batch or dropped its commands, and the call went on
            # with the wrong rows or an error about a call never made (a
            # helper's API pass, 2026-12-05).
            raise self.refuse(self.inside, name, True)
        if self.holder != 0:
            raise self.refuse(self.inside, name)
        if self.closed:
            raise self.closed_error(name, None)
        self.holder = me
        self.inside = name
        try:
            return method(obj, *args, **kwargs)
        except Exception as exc:
            if self.closed:  # shut while it ran
                err = self.closed_error(name, exc)
                if err is not exc:
                    raise err from exc
            raise
        finally:
            self.holder = 0
            if self.on_leave is not None:
                leave, self.on_leave = self.on_leave, None
                try:
                    leave()
                except Exception:  # a release's error is not the call's
                    pass

    def defer(self, callback):
        """Once shut: ``callback()`` is run by the thread inside as it
        leaves its call (after its exception, if any, is set), so that a
        close() that gave up waiting for it still releases what the call
        used. Returns False, having kept nothing, if no other thread is
        inside: then the caller releases at once. (A close() that gave up
        released nothing, ever: an attached pool's claim was kept while the
        process lived, and every other client was refused: an attacker's
        pass, 2026-12-05.)"""
        if self.holder == 0 or self.holder == PyThread_get_thread_ident():
            return False
        self.on_leave = callback
        return True

    def shut(self):
        """Lets no thread in again (a close()); returns whether no other
        thread than this one is inside now (else the close() waits for it
        to leave: :attr:`held_by`)."""
        self.closed = True
        return self.holder == 0 or self.holder == PyThread_get_thread_ident()

    @property
    def held(self):
        """Whether a thread is inside (for tests and diagnostics)."""
        return self.holder != 0

    @property
    def held_by(self):
        """The ident (``threading.get_ident()``) of the thread inside, 0: none."""
        return self.holder
