# Included by _core.pyx (one compiled module, shmatari._core): the per-env logic: EnvCore, NullCore, AtariCore.

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


cdef class AtariCore(EnvCore):
    """One Atari env: emulation, preprocessing and episode bookkeeping.

    Used by shmatari's workers, by the pipe baseline and by the benchmark's
    ceiling, so that all three do exactly the same work per step. Each
    behaviour is specified in ``docs/semantics.md``. Every option is
    required: ``shmatari.atari.build_core`` passes an ``EnvConfig``'s, whose
    defaults are ``shmatari.config.OPTION_DEFAULTS``.

    Args:
        ale: an ``ale_py.ALEInterface`` with its ROM loaded, built in this
            process.
        palette: the worker's ``Palette`` (shared by its envs).
        action_set: ALE action ids, one per action index.
        rom_path: the ROM, reloaded when the env is re-seeded.
        frame_skip: frames per step (>= 1).
        stack_num: frames per observation (>= 1).
        maxpool: pool the last two frames of a step.
        noop_max: at most this many no-op frames at reset (0: none).
        episodic_life: a lost life ends the episode (``terminated``), the game
            goes on.
        use_fire_reset: press FIRE for one step after reset (games with FIRE
            at index 1 of at least 3 actions).
        reward_clip: the reward is its sign.
        max_episode_frames: truncate the game at this many frames (0: never).
        noop_rng: a ``numpy.random.Generator`` for the no-op counts.
        fast_reset: after the first reset, start each new game by restoring
            the state that reset left (``shmatari.fast_reset.FastReset``)
            instead of ALE's ``reset_game``. Only for a game, ale-py version
            and sticky setting where ``shmatari.fast_reset.proven`` says the
            two are the same; not with a ``preprocessor``.
        same_step: same-step autoreset: a done step resets at once and keeps
            its own result as the final record (the worker loop
            publishes it beside the next result).
        preprocessor: None for shmatari's kernel; else an object whose
            ``capture(ale)`` is called after every emulated frame and whose
            ``emit(pool, out)`` writes the step's frame (uint8, shape
            (img_height, img_width[, 3])) into ``out``, pooling the last two
            captured frames when ``pool``. The pipe baseline's classic
            preprocessing plugs in here; the episode logic stays this class's.
    """

    cdef object _act, _get_screen, _game_over, _lives, _reset_game, _episode_frame_number
    cdef object preprocessor, hist_frames
    #: The env's ``ALEInterface`` (for tests and tools: acting on it directly
    #: puts it out of step with the core).
    cdef readonly object ale
    cdef readonly object rom_path
    cdef Palette palette
    cdef readonly int frame_skip, noop_max
    cdef readonly bint maxpool, episodic_life, use_fire_reset, reward_clip
    cdef readonly int64_t max_episode_frames
    cdef public object noop_rng
    cdef readonly bint fire_ok
    # render_mode: an RGB palette (the observations' own when they are RGB)
    cdef Palette render_palette
    # raw screens: two buffers, `cur` is the newest
    cdef object raw_arrays
    cdef uint8_t *raw[2]
    cdef int cur
    # fast resets: wanted, the saved post-reset state once the first reset
    # made it (a FastReset), and whether ALE's screen still shows the old
    # game (a restore emulates no frame): then the saved screen is the
    # current one
    cdef readonly bint fast_reset
    cdef object _fast
    # the newest raw screen before a prepared reset (prepare_reset)
    cdef object _held_raw
    cdef const uint8_t[:, ::1] _fast_screen
    cdef bint _screen_saved

    def __init__(self, ale, Palette palette, action_set, rom_path, *, int frame_skip,
                 int stack_num, bint maxpool, int noop_max, bint episodic_life,
                 bint use_fire_reset, bint reward_clip, int64_t max_episode_frames,
                 noop_rng, bint same_step, preprocessor=None,
                 Palette render_palette=None, bint fast_reset=False):
        self.ale = ale
        self._act = ale.act
        self._get_screen = ale.getScreen
        self._game_over = ale.game_over
        self._lives = ale.lives
        self._reset_game = ale.reset_game
        self._episode_frame_number = ale.getEpisodeFrameNumber
        self.rom_path = rom_path
        self.palette = palette
        self._init_core([int(getattr(a, "value", a)) for a in action_set],
                        palette.plan.dst_h * palette.plan.dst_w * palette.channels,
                        stack_num, same_step)
        self.frame_skip = frame_skip
        self.maxpool = maxpool
        self.noop_max = noop_max
        self.episodic_life = episodic_life
        self.use_fire_reset = use_fire_reset
        self.reward_clip = reward_clip
        self.max_episode_frames = max_episode_frames
        self.noop_rng = noop_rng
        # FIRE (ALE id 1) at index 1 of an action set of at least 3 actions,
        # as SB3's FireResetEnv requires.
        self.fire_ok = self.num_actions >= 3 and self._action_ids[1] == 1
        h, w = palette.screen_h, palette.screen_w
        self.raw_arrays = (np.zeros((h, w), np.uint8), np.zeros((h, w), np.uint8))
        cdef uint8_t[:, ::1] r0 = self.raw_arrays[0]
        cdef uint8_t[:, ::1] r1 = self.raw_arrays[1]
        self.raw[0] = &r0[0, 0]
        self.raw[1] = &r1[0, 0]
        self.cur = 0
        if fast_reset and preprocessor is not None:
            raise ValueError("fast_reset needs shmatari's frame kernel, not a preprocessor "
                             "(which reads ALE's screen itself)")
        self.fast_reset = fast_reset
        self._fast = None
        self._screen_saved = False
        self.render_palette = render_palette
        if render_palette is not None and (
                render_palette.channels != 3 or preprocessor is not None or
                (render_palette.screen_h, render_palette.screen_w) != (h, w)):
            raise ValueError("render_palette must be an RGB Palette of the game's screen, "
                             "without a preprocessor")
        self.preprocessor = preprocessor
        if preprocessor is not None and palette.planar:
            raise ValueError("a preprocessor writes channels-last frames: use "
                             "obs_layout='channels_last' with it")
        if preprocessor is not None:
            frame_shape = (palette.plan.dst_h, palette.plan.dst_w) + \
                ((3,) if palette.channels == 3 else ())
            self.hist_frames = np.asarray(
                <uint8_t[:self.stack_num * self.frame_bytes]>self.hist
            ).reshape((self.stack_num,) + frame_shape)

    cdef int write_render(self, uint8_t *out, uint32_t height, uint32_t width) except -1:
        """The RGB palette, learned from ALE's ``getScreenRGB`` for any index
        the screen shows that it has not seen (ALE's current screen is the
        newest raw one), then that screen's palette indices."""
        if self.render_palette is None or <int>height != self.palette.screen_h or \
                <int>width != self.palette.screen_w:
            raise ValueError(f"this env cannot render into a {height} x {width} area (built "
                             f"without render_palette, or another screen size)")
        cdef uint8_t[:, ::1] held
        cdef uint8_t *screen = self.raw[self.cur]
        if self.show_held:
            held = self._held_raw
            screen = &held[0, 0]
        self.render_palette.ensure_known(self.ale, screen, NULL)
        memcpy(out, self.render_palette.lut, SHMATARI_RENDER_PALETTE_BYTES)
        memcpy(out + SHMATARI_RENDER_PALETTE_BYTES, screen, <size_t>height * width)
        return 0

    cdef int write_ram(self, uint8_t *out) except -1:
        """ALE's RAM (``getRAM``, 128 bytes) after the env's last result."""
        cdef uint8_t[::1] ram = self.ale.getRAM()
        memcpy(out, &ram[0], SHMATARI_RAM_BYTES)
        return 0

    cdef inline int _capture(self) except -1:
        """Copies the current screen into the next raw buffer (newest)."""
        cdef int nxt = 1 - self.cur
        if self.preprocessor is not None:
            self.preprocessor.capture(self.ale)
            return 0
        if self._screen_saved:
            # after a fast reset: the saved screen, whose palette indices
            # are known (_save_reset)
            memcpy(self.raw[nxt], &self._fast_screen[0, 0],
                   <size_t>self.palette.screen_h * self.palette.screen_w)
        else:
            self._get_screen(self.raw_arrays[nxt])
        self.palette.ensure_known(self.ale, self.raw[nxt], self.raw[self.cur])
        self.cur = nxt
        return 0

    cdef inline int _emit(self, bint pool) except -1:
        """Processes the newest screen (pooled with the one before it when
        ``pool``) into the next frame of the stack."""
        if self.preprocessor is not None:
            self._next_frame()
            self.preprocessor.emit(pool, self.hist_frames[self.head])
            return 0
        shmatari_frame(&self.palette.plan, self.raw[self.cur],
                       self.raw[1 - self.cur] if pool else NULL,
                       self.palette.lut, self._next_frame(),
                       self.palette.plan.dst_w * (1 if self.palette.planar
                                                  else self.palette.channels))
        return 0

    cdef int _frame(self, int ale_action) except? -1:
        """Emulates one frame, counting it; returns the raw reward."""
        cdef int r = self._act(ale_action)
        self._screen_saved = False
        self.res.frame_number += 1
        self.res.episode_frame_number += 1
        return r

    cdef inline bint _capped(self):
        return self.max_episode_frames > 0 and self.res.episode_frame_number >= self.max_episode_frames

    cdef bint _ended(self) except -1:
        """The game is over or has reached the frame cap."""
        return self._game_over(with_truncation=False) or self._capped()

    cdef int _new_game(self) except -1:
        """``reset_game``, then 1..noop_max no-op frames; a no-op frame that
        ends the game (or reaches the cap) resets it again and the remaining
        no-ops go on, as Gymnasium's AtariPreprocessing and SB3's
        NoopResetEnv."""
        cdef int noops = 0, i
        self._restart_game()
        if self.noop_max > 0:
            noops = int(self.noop_rng.integers(1, self.noop_max + 1))
        for i in range(noops):
            self.res.episode_return += self._frame(0)
            if self._ended():
                self._restart_game()
        return 0

    cdef int _restart_game(self) except -1:
        """``reset_game`` (or its fast equivalent) and a fresh episode. Some
        games' reset emulates starting frames (8 for Air Raid, 16 for Pac-Man,
        134 for Name This Game): they count, as in ALE's
        ``getEpisodeFrameNumber`` and its cap."""
        if self._fast is not None:
            self._fast.restore()
            self._screen_saved = True
        else:
            self._reset_game()
            if self.fast_reset:
                self._save_reset()
        self._clear_episode()
        self.res.episode_frame_number = self._episode_frame_number()
        return 0

    cdef int _save_reset(self) except -1:
        """Right after ALE's reset: saves the state for the next fast resets,
        and learns the palette indices of its screen (which a fast reset
        shows without ALE's screen: ``_capture``, ``write_render``)."""
        from .fast_reset import FastReset
        fast = FastReset(self.ale, self.ale.getFloat("repeat_action_probability") > 0)
        self._fast_screen = fast.screen
        self.palette.ensure_known(self.ale, &self._fast_screen[0, 0], NULL)
        if self.render_palette is not None:
            self.render_palette.ensure_known(self.ale, &self._fast_screen[0, 0], NULL)
        self._fast = fast
        return 0

    cdef int _press_fire(self) except -1:
        """One step (frame_skip frames) of FIRE; 0 if it ended the game or
        reached the cap, 1 otherwise."""
        cdef int i
        for i in range(self.frame_skip):
            self.res.episode_return += self._frame(self._action_ids[1])
            if self._ended():
                return 0
        return 1

    cdef int _start_episode_obs(self, bint end_pending) except -1:
        self._capture()
        self._emit(False)
        self._fill_stack()
        self.res.lives = self._lives()
        self.phase = PHASE_END_PENDING if end_pending else PHASE_PLAYING
        self.res.flags = SHMATARI_FLAG_RESET
        return 0

    cdef int _continue_game(self) except -1:
        """After a life lost with episodic_life: one no-op step (as SB3's
        EpisodicLifeEnv) and FIRE when enabled, then a fresh frame stack,
        without resetting the game. If those frames end the game or reach the
        cap, they stop there and the next step reports it."""
        cdef int i
        cdef bint ended = False
        cdef double before = self.res.episode_return
        self._clear_result()
        for i in range(self.frame_skip):
            self.res.episode_return += self._frame(0)
            if self._ended():
                ended = True
                break
        if not ended and self.use_fire_reset and self.fire_ok:
            ended = not self._press_fire()
        self.res.raw_reward = <float>(self.res.episode_return - before)
        return self._start_episode_obs(ended)

    cpdef int prepare_reset(self) except -1:
        cdef size_t n = <size_t>self.frame_bytes * self.stack_num
        if self.prepared or self.same_step or self.preprocessor is not None or not (
                self.phase == PHASE_NEW_GAME or self.phase == PHASE_NEXT_LIFE):
            return 0
        if self.held_hist == NULL:
            self.held_hist = <uint8_t *>malloc(n)
            if self.held_hist == NULL:
                raise MemoryError()
            self._held_raw = np.empty_like(self.raw_arrays[0])
        memcpy(self.held_hist, self.hist, n)
        self.held_head = self.head
        self.held_res = self.res
        np.copyto(self._held_raw, self.raw_arrays[self.cur])
        self.reset()
        self.prepared_res = self.res
        self.prepared = True
        return 0

    def reseed(self, int ale_seed, noop_rng):
        """Re-seeds ALE (reloading the ROM, as ale-py's ``reset(seed=...)``
        does) and replaces the no-op generator."""
        self.ale.setInt("random_seed", ale_seed)
        self.ale.loadROM(self.rom_path)
        self._fast = None  # saved again after the next reset
        self._screen_saved = False
        self.prepared = False
        self.show_held = False
        self.noop_rng = noop_rng
        self.phase = PHASE_NEW_GAME

    cpdef int reset(self) except -1:
        """Starts the next episode and writes its first observation.

        After an episode ended by a lost life (episodic_life) this continues
        the game (``_continue_game``, as SB3's EpisodicLifeEnv). Otherwise a
        new game: ``reset_game``, 1..noop_max no-op frames, one step of FIRE
        when enabled (if it ends the game: ``reset_game`` and no-ops again,
        without FIRE, as SB3's FireResetEnv), then the stack filled with the
        newest frame. The result has reward 0, ``raw_reward`` the score of
        those frames and ``FLAG_RESET``. A prepared reset (``prepare_reset``)
        is that same reset, done ahead."""
        if self._take_prepared():
            return 0
        if self.phase == PHASE_NEXT_LIFE:
            return self._continue_game()
        self._clear_result()
        self._new_game()
        if self.use_fire_reset and self.fire_ok and not self._press_fire():
            self._new_game()
        self.res.raw_reward = <float>self.res.episode_return
        return self._start_episode_obs(False)

    cpdef int step(self, int action) except -1:
        """One agent step with action index ``action`` (0..num_actions-1).

        After a step that ended the episode the next call resets instead and
        ignores ``action`` (next-step autoreset, as Gymnasium 1.x), unless
        ``same_step``: then the done step resets at once, its own result is
        kept as the final record, and the result is the reset's with the
        step's reward, terminated and truncated, and ``FLAG_FINAL``."""
        cdef int emulated = 0, ale_action
        cdef double raw = 0.0
        cdef int32_t lives
        cdef bint over = False, life_lost = False, capped = False
        if self._take_prepared():
            return 0
        if self.phase == PHASE_NEW_GAME or self.phase == PHASE_NEXT_LIFE:
            return self.reset()
        self._clear_result()
        ale_action = self._action_ids[action]
        if self.phase == PHASE_END_PENDING:
            # The continuation after a lost life ended the game or reached the
            # cap: report it now, emulating nothing.
            over = self._game_over(with_truncation=False)
            capped = self._capped()
            self.phase = PHASE_PLAYING
        while not (over or life_lost or capped) and emulated < self.frame_skip:
            raw += self._frame(ale_action)
            emulated += 1
            self._capture()
            over = self._game_over(with_truncation=False)
            if self.episodic_life:
                # A loss down to 0 lives is left to game over (as SB3's
                # EpisodicLifeEnv and EnvPool): Q*bert can show 0 lives for a
                # few frames before its game ends.
                lives = self._lives()
                life_lost = 0 < lives < self.res.lives
                self.res.lives = lives
            capped = self._capped()
        self._emit(self.maxpool and emulated >= 2)
        if not self.episodic_life:
            self.res.lives = self._lives()
        self.res.elapsed_step += 1
        self.res.raw_reward = <float>raw
        self.res.episode_return += raw
        if self.reward_clip:
            self.res.reward = <float>((raw > 0) - (raw < 0))
        else:
            self.res.reward = <float>raw
        self.res.game_over = over
        self.res.terminated = over or life_lost
        self.res.truncated = capped
        self.res.episode_done = over or capped
        if self.res.terminated or self.res.truncated:
            self.phase = PHASE_NEW_GAME if self.res.episode_done else PHASE_NEXT_LIFE
            if self.same_step:
                self._same_step_reset()
        return 0
