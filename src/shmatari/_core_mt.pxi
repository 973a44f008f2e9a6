# Included by _core.pyx (one compiled module, shmatari._core): the env
# generator that fast resets follow (shmatari.fast_reset).

# --------------------------------------------------------------------------
# std::mt19937, followed outside ALE

cdef enum:
    MT_N = 624
    MT_M = 397


cdef class MTFollower:
    """ALE's env generator (a ``std::mt19937``: what sticky frames draw)
    followed outside ALE, so that a fast reset neither reads it from ALE nor
    writes it back when it need not (``shmatari.fast_reset.FastReset``).

    The same generator as NumPy's ``MT19937`` (tests compare the two), kept
    as libstdc++ keeps it: 624 state words and the index of the next word
    (624: the next draw twists first), so that :meth:`text` is what ALE's
    ``cloneState(include_rng=True)`` writes for it.

    Args:
        text: the generator as libstdc++ writes it: 625 decimal numbers,
            space-separated (624 words below 2**32, then an index 0..624).

    Raises:
        ValueError: ``text`` is not such a generator.
    """

    cdef uint32_t key[MT_N]
    cdef int pos

    def __init__(self, bytes text not None):
        words = text.split()
        if len(words) != MT_N + 1:
            raise ValueError("not a std::mt19937 as libstdc++ writes it")
        cdef int i
        cdef object w
        for i in range(MT_N):
            w = int(words[i])
            if not 0 <= w < 2 ** 32:
                raise ValueError("not a std::mt19937 as libstdc++ writes it")
            self.key[i] = <uint32_t>w
        w = int(words[MT_N])
        if not 0 <= w <= MT_N:
            raise ValueError("not a std::mt19937 as libstdc++ writes it")
        self.pos = <int>w

    cdef void _twist(self) noexcept:
        cdef int i
        cdef uint32_t y
        for i in range(MT_N):
            y = (self.key[i] & 0x80000000u) | (self.key[(i + 1) % MT_N] & 0x7fffffffu)
            self.key[i] = self.key[(i + MT_M) % MT_N] ^ (y >> 1) ^ (0x9908b0dfu if y & 1 else 0u)
        self.pos = 0

    def advance(self, uint64_t draws):
        """Takes ``draws`` 32-bit draws (two per frame ALE emulates in ``act``,
        one per player)."""
        cdef uint64_t room = MT_N - self.pos
        if draws <= room:
            self.pos += <int>draws
            return
        draws -= room
        self.pos = MT_N
        while draws > 0:
            self._twist()
            room = draws if draws < MT_N else MT_N
            self.pos = <int>room
            draws -= room

    def next_draw(self) -> float:
        """The next draw of ALE's ``Random::nextDouble`` (not taken): the
        next 32-bit word over 2**32, which is never above ALE's value of it."""
        cdef uint32_t y
        cdef uint32_t saved[MT_N]
        if self.pos < MT_N:
            y = self.key[self.pos]
        else:  # the next draw twists: a copy twists
            memcpy(saved, self.key, sizeof(saved))
            self._twist()
            y = self.key[0]
            memcpy(self.key, saved, sizeof(saved))
            self.pos = MT_N
        y ^= y >> 11
        y ^= (y << 7) & 0x9d2c5680u
        y ^= (y << 15) & 0xefc60000u
        y ^= y >> 18
        return y / 4294967296.0

    def text(self) -> bytes:
        """The generator as libstdc++ writes it (``operator<<``): the 624
        words and the index, decimal, space-separated."""
        cdef char buf[MT_N * 11 + 4]
        cdef char digits[10]
        cdef size_t n = 0
        cdef int i, k
        cdef uint32_t v
        for i in range(MT_N + 1):
            v = self.key[i] if i < MT_N else <uint32_t>self.pos
            k = 0
            while True:
                digits[k] = <char>(48 + v % 10)
                k += 1
                v //= 10
                if v == 0:
                    break
            while k > 0:
                k -= 1
                buf[n] = digits[k]
                n += 1
            if i < MT_N:
                buf[n] = 32
                n += 1
        return buf[:n]
