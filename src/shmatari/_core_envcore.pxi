# Included by _core.pyx (one compiled module, shmatari._core): the per-env logic's base,
# EnvCore, and NullCore. AtariCore is in _core_atari.pxi.

# --------------------------------------------------------------------------
# The per-env Atari step

cdef extern from *:
    """
    /* The result fields as Python values, generated from layout.h's
     * SHMATARI_RESULT_FIELDS: a tuple of every field after env_id. */
    #define SHMATARI_PY_BOX_int32_t(v) PyLong_FromLong(v)
    #define SHMATARI_PY_BOX_uint32_t(v) PyLong_FromUnsignedLong(v)
    #define SHMATARI_PY_BOX_int64_t(v) PyLong_FromLongLong(v)
    #define SHMATARI_PY_BOX_uint64_t(v) PyLong_FromUnsignedLongLong(v)
    #define SHMATARI_PY_BOX_uint8_t(v) PyLong_FromLong(v)
    #define SHMATARI_PY_BOX_shmatari_bool8(v) PyBool_FromLong(v)
    #define SHMATARI_PY_BOX_float(v) PyFloat_FromDouble(v)
    #define SHMATARI_PY_BOX_double(v) PyFloat_FromDouble(v)
    SHMATARI_STATIC_ASSERT(SHMATARI_FIELD_ENV_ID == 0, "env_id comes first");
    #define SHMATARI_PY_BOX_FIELD(NAME, name, type, unit, meaning)            \
      if (SHMATARI_FIELD_##NAME != SHMATARI_FIELD_ENV_ID) {                   \
        PyObject *v = SHMATARI_PY_BOX_##type(r->name);                        \
        if (v == NULL) {                                                      \
          Py_DECREF(t);                                                       \
          return NULL;                                                        \
        }                                                                     \
        PyTuple_SET_ITEM(t, SHMATARI_FIELD_##NAME - 1, v);                    \
      }
    static PyObject *shmatari_py_result_tuple(const shmatari_result *r) {
      PyObject *t = PyTuple_New(SHMATARI_FIELD_COUNT - 1);
      if (t == NULL) return NULL;
      SHMATARI_RESULT_FIELDS(SHMATARI_PY_BOX_FIELD)
      return t;
    }
    """
    object shmatari_py_result_tuple(const shmatari_result *r)


# Where an env is between commands: one phase instead of three booleans.
cdef enum Phase:
    PHASE_PLAYING = 0      # in an episode: the next STEP emulates
    PHASE_END_PENDING = 1  # a life-loss continuation ended the game or hit the
                           # cap: the next STEP reports it, emulating nothing
    PHASE_NEW_GAME = 2     # the episode is over: the next STEP or RESET starts
                           # a new game (also before the first reset)
    PHASE_NEXT_LIFE = 3    # a lost life ended the episode (episodic_life): the
                           # next STEP or RESET continues the game


#: Names of the values ``EnvCore.result()`` returns, in order: the slot's
#: fields after ``env_id``.
RESULT_FIELDS = tuple(name for name, _ in FIELDS[1:])
_RESULT_INDEX = {name: i for i, name in enumerate(RESULT_FIELDS)}


cdef class EnvCore:
    """What every env of a worker has: a frame stack, the last result and the
    episode's counters. Subclasses implement ``reset`` and ``step``; the worker
    loop, the pipe baseline and the bench read results through this class.

    With same-step autoreset (``same_step``), a subclass's ``step`` calls
    ``_same_step_reset`` after a done step: the step's result and observation
    are kept as the final record and the env resets at once."""

    cdef list _action_ids
    cdef readonly int stack_num, num_actions
    cdef readonly bint same_step
    # frame stack: stack_num frames, `head` is the newest
    cdef uint8_t *hist
    cdef Py_ssize_t frame_bytes
    cdef int head
    cdef Phase phase
    # The last result, every field of layout.h's SHMATARI_RESULT_FIELDS but
    # env_id: the episode's counters carry over from step to step, the rest
    # is the step's (_clear_result). Python reads the fields as attributes
    # (``core.reward``; ``__getattr__``).
    cdef shmatari_result res
    # same_step: the done step's result and observation (valid with FLAG_FINAL)
    cdef shmatari_result final
    cdef uint8_t *final_obs
    # A next episode started ahead of the command that asks for it
    # (prepare_reset): its result, and the view before it (result, frame
    # stack), which an OBSERVE in between still shows (show_held).
    cdef bint prepared, show_held
    cdef shmatari_result prepared_res, held_res
    cdef uint8_t *held_hist
    cdef int held_head

    def __cinit__(self, *args, **kwargs):
        self.hist = NULL
        self.final_obs = NULL
        self.held_hist = NULL

    def __dealloc__(self):
        free(self.hist)
        free(self.final_obs)
        free(self.held_hist)

    cdef int _init_core(self, list action_ids, Py_ssize_t frame_bytes,
                        int stack_num, bint same_step=False) except -1:
        self._action_ids = action_ids
        self.num_actions = len(action_ids)
        self.stack_num = stack_num
        self.frame_bytes = frame_bytes
        self.same_step = same_step
        self.hist = <uint8_t *>malloc(frame_bytes * stack_num)
        if self.hist == NULL:
            raise MemoryError()
        memset(self.hist, 0, frame_bytes * stack_num)
        if same_step:
            self.final_obs = <uint8_t *>malloc(frame_bytes * stack_num)
            if self.final_obs == NULL:
                raise MemoryError()
            memset(self.final_obs, 0, frame_bytes * stack_num)
        memset(&self.final, 0, sizeof(self.final))
        memset(&self.res, 0, sizeof(self.res))
        self.head = 0
        self.phase = PHASE_NEW_GAME
        return 0

    def __getattr__(self, name):
        """The last result's fields by name (``RESULT_FIELDS``), as ``result()``."""
        i = _RESULT_INDEX.get(name)
        if i is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return shmatari_py_result_tuple(&self.res)[i]

    cdef inline void _clear_episode(self):
        self.res.elapsed_step = 0
        self.res.episode_frame_number = 0
        self.res.episode_return = 0.0

    cdef inline void _clear_result(self):
        """Zeroes the step's fields: every field but the env's counters
        (lives, the episode's and the env's counts), which carry over."""
        cdef shmatari_result kept = self.res
        memset(&self.res, 0, sizeof(self.res))
        self.res.lives = kept.lives
        self.res.elapsed_step = kept.elapsed_step
        self.res.episode_frame_number = kept.episode_frame_number
        self.res.frame_number = kept.frame_number
        self.res.episode_return = kept.episode_return

    cdef inline uint8_t *_next_frame(self):
        """Advances the stack; returns where the newest frame goes."""
        self.head = (self.head + 1) % self.stack_num
        return self.hist + self.head * self.frame_bytes

    cdef int _fill_stack(self) except -1:
        cdef int i
        for i in range(self.stack_num):
            if i != self.head:
                memcpy(self.hist + i * self.frame_bytes,
                       self.hist + self.head * self.frame_bytes, self.frame_bytes)
        return 0

    cdef int _same_step_reset(self) except -1:
        """After a done step: keeps its result and observation as the final
        record, resets, and leaves the reset's result with the done step's
        reward, terminated and truncated, and ``FLAG_FINAL``."""
        self.final = self.res
        self.write_obs(self.final_obs)
        self.reset()
        self.res.reward = self.final.reward
        self.res.terminated = self.final.terminated
        self.res.truncated = self.final.truncated
        self.res.flags |= SHMATARI_FLAG_FINAL
        return 0

    cpdef int reset(self) except -1:
        """Starts the next episode and writes its first observation."""
        raise NotImplementedError

    cpdef int step(self, int action) except -1:
        """One agent step with action index ``action``."""
        raise NotImplementedError

    cpdef int prepare_reset(self) except -1:
        """Starts the next episode ahead, while the worker has nothing else
        to do, after a done step (next-step autoreset or disabled): the
        STEP or RESET that would start it returns it at once. Nothing changes
        but when the work is done: the same emulation and the same random
        draws of this env's own streams, in the same order; an OBSERVE in
        between still shows the done step's observation and counters. A
        no-op for envs that never end (``NullCore``) and with same-step
        autoreset."""
        return 0

    cdef inline bint _take_prepared(self):
        """If a next episode was prepared: makes its result the current one."""
        if not self.prepared:
            return False
        self.prepared = False
        self.show_held = False
        self.res = self.prepared_res
        return True

    cpdef int observe(self) except -1:
        """``CMD_OBSERVE``: the current observation again, nothing emulated;
        reward 0, every flag false, ``FLAG_OBSERVED``."""
        self.show_held = self.prepared
        if self.prepared:
            self.res = self.held_res
        self._clear_result()
        self.res.flags = SHMATARI_FLAG_OBSERVED
        return 0

    cpdef int restart_result(self) except -1:
        """The first result of an env rebuilt after its worker died, in
        answer to a STEP or OBSERVE: the lost episode ends, truncated.

        The env starts a new game (``reset``) and reports reward 0,
        ``truncated``, ``FLAG_RESTARTED``; the lost episode's statistics are
        gone, so ``episode_done`` is 0. Then the autoreset mode applies as
        after any truncation: next-step, the env's next STEP resets it;
        same-step, this row is already a fresh reset (``FLAG_FINAL``; the
        final record is the truncation, with this game's first observation);
        disabled, the client must reset it."""
        self.reset()  # a prepared reset, if any, is this reset
        self._clear_result()
        self.res.truncated = True
        self.res.flags = SHMATARI_FLAG_RESTARTED
        self.phase = PHASE_NEW_GAME
        if self.same_step:
            self._same_step_reset()
            self.res.flags |= SHMATARI_FLAG_RESTARTED
        return 0

    cdef void write_obs(self, uint8_t *out) noexcept nogil:
        cdef int s, src
        cdef uint8_t *hist = self.held_hist if self.show_held else self.hist
        cdef int head = self.held_head if self.show_held else self.head
        for s in range(self.stack_num):
            src = (head + 1 + s) % self.stack_num
            memcpy(out + s * self.frame_bytes, hist + src * self.frame_bytes,
                   self.frame_bytes)

    cdef int write_render(self, uint8_t *out, uint32_t height, uint32_t width) except -1:
        """Writes the env's part of the render area (layout.h,
        ``shmatari_render_area``): an RGB palette, then the last screen as
        palette indices. An env with no screen writes zeros (black)."""
        memset(out, 0, SHMATARI_RENDER_PALETTE_BYTES + <size_t>height * width)
        return 0

    cdef int write_ram(self, uint8_t *out) except -1:
        """Writes the env's console RAM (layout.h, ``shmatari_ram_area``):
        zeros for an env with no console."""
        memset(out, 0, SHMATARI_RAM_BYTES)
        return 0

    def obs_into(self, out):
        """Copies the stacked observation, oldest frame first, into ``out``
        (uint8, C-contiguous, stack_num * frame bytes)."""
        cdef uint8_t[::1] o = out.reshape(-1)
        if o.shape[0] != self.frame_bytes * self.stack_num:
            raise ValueError("out has the wrong size")
        self.write_obs(&o[0])

    def ram(self):
        """The RAM the env's row would carry (``ram_info``): bytes, 128."""
        cdef uint8_t out[SHMATARI_RAM_BYTES]
        self.write_ram(out)
        return bytes(out[:SHMATARI_RAM_BYTES])

    def action_ids(self):
        """ALE action id of each action index (a new list)."""
        return list(self._action_ids)

    def result(self):
        """The last result as a tuple, in the order of ``RESULT_FIELDS``:
        (reward, terminated, truncated, lives, raw_reward, game_over,
        elapsed_step, episode_frame_number, frame_number, episode_return,
        episode_done, flags)."""
        return shmatari_py_result_tuple(&self.res)


cdef class NullCore(EnvCore):
    """A built-in env that emulates nothing: each step only writes one frame
    (every byte the step count, mod 256) and never ends. With it a pool's
    throughput is the pure cost of shmatari's round trip.

    Args:
        frame_shape: (img_height, img_width[, 3]).
        stack_num: frames per observation.
        num_actions: size of its action space.
    """

    def __init__(self, frame_shape, *, int stack_num, int num_actions=4):
        cdef Py_ssize_t n = 1
        for d in frame_shape:
            n *= d
        self._init_core(list(range(num_actions)), n, stack_num)

    cpdef int reset(self) except -1:
        self._clear_result()
        self._clear_episode()
        memset(self._next_frame(), 0, self.frame_bytes)
        self._fill_stack()
        self.phase = PHASE_PLAYING
        self.res.flags = SHMATARI_FLAG_RESET
        return 0

    cpdef int step(self, int action) except -1:
        self._clear_result()
        self.res.elapsed_step += 1
        self.res.episode_frame_number += 1
        self.res.frame_number += 1
        memset(self._next_frame(), <uint8_t>(self.res.frame_number & 0xFF), self.frame_bytes)
        return 0
