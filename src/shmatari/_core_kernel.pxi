# Included by _core.pyx (one compiled module, shmatari._core): the frame kernel wrappers: Resizer and Palette.

# --------------------------------------------------------------------------
# The frame kernel

cdef class Resizer:
    """OpenCV-exact ``INTER_AREA`` downscale of uint8 images, and the fused kernel.

    Args:
        src_shape: (height, width) of the source in pixels.
        dst_shape: (height, width) of the result; each at most the source's.
        channels: 1 (grayscale, 2-D arrays) or 3 (RGB, shape (h, w, 3)).

    Raises:
        ValueError: a size is below 1, an upscale was asked, or channels is
            neither 1 nor 3.
    """

    cdef shmatari_resize_plan plan
    cdef readonly int channels

    def __cinit__(self, src_shape, dst_shape, int channels=1):
        memset(&self.plan, 0, sizeof(self.plan))
        r = shmatari_resize_plan_init(&self.plan, src_shape[0], src_shape[1],
                                      dst_shape[0], dst_shape[1], channels)
        if r == SHMATARI_KERNEL_EINVAL:
            raise ValueError(
                f"cannot area-resize {tuple(src_shape)} to {tuple(dst_shape)} with "
                f"{channels} channel(s): sizes must be >= 1, at most the source's "
                f"(no upscale), and channels 1 or 3")
        if r != SHMATARI_KERNEL_OK:
            raise MemoryError()
        self.channels = channels

    def __dealloc__(self):
        shmatari_resize_plan_free(&self.plan)

    @property
    def mode(self):
        """0 copy, 1 integer 2x2 block, 2 other integer blocks, 3 general area."""
        return self.plan.mode

    def _out(self, out):
        shape = (self.plan.dst_h, self.plan.dst_w) + ((3,) if self.channels == 3 else ())
        if out is None:
            return np.empty(shape, np.uint8)
        if out.shape != shape or out.dtype != np.uint8 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous uint8 array of shape {shape}")
        return out

    def resize(self, src, out=None):
        """Resizes one image.

        Args:
            src: uint8, shape (src_h, src_w) or (src_h, src_w, 3), C-contiguous.
            out: optional uint8 destination of the result's shape.

        Returns:
            numpy.ndarray: uint8, shape (dst_h, dst_w[, 3]); equal bit for bit to
            ``cv2.resize(src, (dst_w, dst_h), interpolation=cv2.INTER_AREA)``.
        """
        cdef const uint8_t[:, ::1] s
        shape = (self.plan.src_h, self.plan.src_w) + ((3,) if self.channels == 3 else ())
        src = np.ascontiguousarray(src)
        if src.shape != shape or src.dtype != np.uint8:
            raise ValueError(f"src must be uint8 of shape {shape}, got "
                             f"{src.dtype} {src.shape}")
        s = src.reshape(self.plan.src_h, -1)
        dst = self._out(out)
        cdef uint8_t[:, ::1] d = dst.reshape(self.plan.dst_h, -1)
        with nogil:
            shmatari_resize_u8(&self.plan, &s[0, 0], s.shape[1], &d[0, 0], d.shape[1])
        return dst

    def frame(self, a, b, lut, out=None):
        """The fused kernel: palette lookup, max-pool and resize.

        Args:
            a, b: uint8 palette indices, shape (src_h, src_w); b may be None.
            lut: uint8, shape (256,) for grayscale or (256, 3) for RGB.
            out: optional destination.

        Returns:
            numpy.ndarray: ``resize(max(lut[a], lut[b]))`` as uint8.
        """
        cdef const uint8_t[:, ::1] sa = np.ascontiguousarray(a, np.uint8)
        cdef const uint8_t[:, ::1] sb
        cdef const uint8_t *pb = NULL
        cdef const uint8_t[::1] table = np.ascontiguousarray(lut, np.uint8).reshape(-1)
        if sa.shape[0] != self.plan.src_h or sa.shape[1] != self.plan.src_w:
            raise ValueError("a has the wrong shape")
        if table.shape[0] != 256 * self.channels:
            raise ValueError(f"lut must hold 256 x {self.channels} entries")
        if b is not None:
            sb = np.ascontiguousarray(b, np.uint8)
            if sb.shape[0] != sa.shape[0] or sb.shape[1] != sa.shape[1]:
                raise ValueError("b has the wrong shape")
            pb = &sb[0, 0]
        dst = self._out(out)
        cdef uint8_t[:, ::1] d = dst.reshape(self.plan.dst_h, -1)
        with nogil:
            shmatari_frame(&self.plan, &sa[0, 0], pb, &table[0], &d[0, 0], d.shape[1])
        return dst


cdef class Palette:
    """A worker's frame processor: the learned palette table and resize plan.

    The table maps ALE palette indices to exactly what ALE's own
    ``getScreenGrayscale`` / ``getScreenRGB`` give; it is filled from those
    calls the first time a frame shows an index not seen before, so after a
    few frames each step needs only ``getScreen`` (raw indices).

    Args:
        screen_shape: the game's screen, (height, width): ALE's getScreenDims.
        obs_shape: (img_height, img_width).
        grayscale: True for one channel, False for RGB.
        planar: write RGB frames channels first, ``(3, img_height,
            img_width)`` (the values as in the default ``(img_height,
            img_width, 3)``).
    """

    cdef shmatari_resize_plan plan
    cdef uint8_t lut[768]
    cdef uint8_t known[256]
    cdef readonly int channels, screen_h, screen_w
    cdef readonly bint planar
    cdef object convert_buf  # ndarray for ALE's conversion of the screen
    cdef uint8_t *convert_ptr
    cdef readonly uint64_t learned  # times ALE's conversion was called

    def __cinit__(self, screen_shape, obs_shape, bint grayscale=True, bint planar=False):
        self.channels = 1 if grayscale else 3
        self.screen_h, self.screen_w = screen_shape
        memset(self.lut, 0, sizeof(self.lut))
        memset(self.known, 0, sizeof(self.known))
        memset(&self.plan, 0, sizeof(self.plan))
        r = shmatari_resize_plan_init(&self.plan, self.screen_h, self.screen_w,
                                      obs_shape[0], obs_shape[1], self.channels)
        if r != SHMATARI_KERNEL_OK:
            raise ValueError(f"cannot resize the {self.screen_h}x{self.screen_w} "
                             f"screen to {obs_shape[0]}x{obs_shape[1]}")
        self.planar = planar and self.channels == 3
        self.plan.planar = self.planar
        shape = (self.screen_h, self.screen_w) + ((3,) if self.channels == 3 else ())
        self.convert_buf = np.empty(shape, np.uint8)
        cdef uint8_t[::1] flat = self.convert_buf.reshape(-1)
        self.convert_ptr = &flat[0]
        self.learned = 0

    def __dealloc__(self):
        shmatari_resize_plan_free(&self.plan)

    def table(self):
        """(lut, known): copies of the learned table, uint8 (256, channels) and (256,)."""
        lut = np.asarray(<uint8_t[:768]>self.lut).copy()[:256 * self.channels]
        return lut.reshape(256, self.channels), np.asarray(<uint8_t[:256]>self.known).copy()

    cdef int ensure_known(self, object ale, const uint8_t *frame,
                          const uint8_t *checked) except -1:
        """Learns the palette from ALE's conversion of the current screen
        (which must be ``frame``) if ``frame`` holds an unseen index."""
        if shmatari_has_unknown(frame, checked, self.screen_h, self.screen_w,
                                self.known):
            if self.channels == 1:
                ale.getScreenGrayscale(self.convert_buf)
            else:
                ale.getScreenRGB(self.convert_buf)
            shmatari_learn_palette(frame, self.convert_ptr,
                                   self.screen_h * self.screen_w, self.channels,
                                   self.lut, self.known)
            self.learned += 1
        return 0
