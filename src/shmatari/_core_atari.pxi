# Included by _core.pyx (one compiled module, shmatari._core), after _core_envcore.pxi:
# AtariCore, the per-env Atari logic (emulation, preprocessing, episodes, fast resets).

# --------------------------------------------------------------------------
# The per-env Atari step

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
        max_episode_steps: truncate the game at this many agent steps
            (``elapsed_step``: no-op and FIRE reset frames not counted, the
            count going on across lives under ``episodic_life``), as
            EnvPool's ``max_episode_steps`` and Gymnasium's ``TimeLimit``
            (0: never).
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
    cdef readonly int64_t max_episode_frames, max_episode_steps
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
    # the newest raw screen and ALE's RAM before a prepared reset
    # (prepare_reset): what an OBSERVE in between shows
    cdef object _held_raw
    cdef uint8_t _held_ram[SHMATARI_RAM_BYTES]
    cdef const uint8_t[:, ::1] _fast_screen
    cdef bint _screen_saved

    def __init__(self, ale, Palette palette, action_set, rom_path, *, int frame_skip,
                 int stack_num, bint maxpool, int noop_max, bint episodic_life,
                 bint use_fire_reset, bint reward_clip, int64_t max_episode_frames,
                 noop_rng, bint same_step, preprocessor=None,
                 Palette render_palette=None, bint fast_reset=False,
                 int64_t max_episode_steps=0):
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
        self.max_episode_steps = max_episode_steps
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
        # the frames ALE emulated loading the ROM count, as in ale-py's
        # getFrameNumber (8 for Air Raid: its reset's starting frames)
        self.res.frame_number = ale.getFrameNumber()

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
        """ALE's RAM (``getRAM``, 128 bytes) after the env's last result; the
        RAM saved before a prepared reset while the row shows the done step
        (an OBSERVE in between), as its observation and render do."""
        if self.show_held:
            memcpy(out, self._held_ram, SHMATARI_RAM_BYTES)
            return 0
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
        cdef bint ended = False
        # (drawn before the reset, which draws nothing from noop_rng: the
        # same draws in the same order as drawing after it)
        if self.noop_max > 0:
            noops = int(self.noop_rng.integers(1, self.noop_max + 1))
        if noops > 0 and self._fast is not None:
            if not self._fast.learned and not self._fast.saved_noops(noops):
                # the first fast new game saves every start in one pass
                # each saved screen's colours are learned while it is ALE's
                # current screen (the palette reads them from ALE's conversion)
                self._fast.learn_noops(self.noop_max, self.max_episode_frames,
                                       self._learn_current_screen)
            if self._fast.saved_noops(noops):
                return self._restore_noops(noops)
        self._restart_game()
        for i in range(noops):
            self.res.episode_return += self._frame(0)
            if self._ended():
                ended = True
                self._restart_game()
        if noops > 0 and not ended and self._fast is not None:
            # a start made from the post-reset state (episode_return: the
            # no-ops' score alone): the next reset that draws as many restores it
            screen = self._fast.save_noops(noops, int(self.res.episode_return))
            if screen is not None:  # None: a count above fast_reset.NOOP_STARTS_MAX
                self._learn_screen(screen)
        return 0

    cdef int _restore_noops(self, int noops) except -1:
        """A fast reset and ``noops`` no-op frames in one restore
        (``FastReset.restore_noops``): the same state, screen, reward and
        counts as emulating them."""
        screen, reward = self._fast.restore_noops(noops)
        self._fast_screen = screen
        self._screen_saved = True
        self._clear_episode()
        self.res.episode_frame_number = self._episode_frame_number()
        # the reset's starting frames and the no-ops, as emulating them
        self.res.frame_number += self.res.episode_frame_number
        self.res.episode_return += reward
        return 0

    cdef int _restart_game(self) except -1:
        """``reset_game`` (or its fast equivalent) and a fresh episode. Some
        games' reset emulates starting frames (8 for Air Raid, 16 for Pac-Man,
        134 for Name This Game): they count, as in ALE's
        ``getEpisodeFrameNumber`` and its cap, and ``getFrameNumber`` (in
        ``frame_number`` until 2026-12-06 they did not: an Atari-semantics
        pass)."""
        if self._fast is not None:
            self._fast.restore()
            self._fast_screen = self._fast.screen
            self._screen_saved = True
        else:
            self._reset_game()
            if self.fast_reset:
                self._save_reset()
        self._clear_episode()
        self.res.episode_frame_number = self._episode_frame_number()
        self.res.frame_number += self.res.episode_frame_number
        return 0

    @property
    def saved_starts(self):
        """How many no-op starts (post-reset states after 1..noop_max no-op
        frames) this env has saved for its fast resets: 0 without them."""
        return 0 if self._fast is None else sum(
            self._fast.saved_noops(k) for k in range(1, self.noop_max + 1))

    cdef int _save_reset(self) except -1:
        """Right after ALE's reset: saves the state for the next fast resets,
        and learns the palette indices of its screen (which a fast reset
        shows without ALE's screen: ``_capture``, ``write_render``)."""
        from .fast_reset import FastReset
        fast = FastReset(self.ale)
        self._fast_screen = fast.screen
        self._learn_screen(fast.screen)
        self._fast = fast
        return 0

    def _learn_current_screen(self, screen):
        """``_learn_screen`` for ``FastReset.learn_noops``, which calls it
        with each start it saves while that screen is ALE's current one."""
        self._learn_screen(screen)

    cdef int _learn_screen(self, const uint8_t[:, ::1] screen) except -1:
        """Learns the palette indices of a saved screen, which a restore
        shows without ALE's screen (``_capture``, ``write_render``). The
        screen must be ALE's current screen: the colours are read from ALE's
        conversion of it (``Palette.ensure_known``)."""
        self.palette.ensure_known(self.ale, &screen[0, 0], NULL)
        if self.render_palette is not None:
            self.render_palette.ensure_known(self.ale, &screen[0, 0], NULL)
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
        cdef uint8_t[::1] ram = self.ale.getRAM()
        memcpy(self._held_ram, &ram[0], SHMATARI_RAM_BYTES)
        self.reset()
        self.prepared_res = self.res
        self.prepared = True
        return 0

    def reseed(self, int ale_seed, noop_rng):
        """Re-seeds ALE (reloading the ROM, as ale-py's ``reset(seed=...)``
        does), restarts the frame count and replaces the no-op generator."""
        self.ale.setInt("random_seed", ale_seed)
        self.ale.loadROM(self.rom_path)
        self._fast = None  # saved again after the next reset
        self._screen_saved = False
        if self.prepared:  # the episode started ahead is dropped
            self.res = self.held_res
        # A reloaded ROM counts its frames from its load (the starting frames
        # its reset emulates, 0 in most games), as ale-py's getFrameNumber
        # after reset(seed=...): the env's results are then a fresh env's.
        self.res.frame_number = self.ale.getFrameNumber()
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
        if self.max_episode_steps > 0 and self.res.elapsed_step >= self.max_episode_steps:
            capped = True  # the step limit (EnvPool's: elapsed_step >= max_episode_steps)
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
