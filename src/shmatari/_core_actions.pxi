# Included by _core.pyx (one compiled module, shmatari._core): check_actions, on the client's hot path.

# --------------------------------------------------------------------------
# Checking actions on the client's hot path

ctypedef fused action_int:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    uint32_t
    uint64_t


cdef Py_ssize_t _copy_actions(const action_int[:] a, int64_t n_actions,
                              int32_t[::1] out) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(a.shape[0]):
        if a[i] < 0 or <uint64_t>a[i] >= <uint64_t>n_actions:
            return i
        out[i] = <int32_t>a[i]
    return -1


def check_actions(actions, Py_ssize_t n, int64_t n_actions):
    """Validates actions and returns them as a new int32 array.

    Args:
        actions: integer action indices (any integer dtype, or a sequence of ints).
        n: the number of actions expected.
        n_actions: the size of the action space.

    Returns:
        numpy.ndarray: int32, shape (n,).

    Raises:
        TypeError: not integers (floats, bools, objects are refused).
        ValueError: not of shape (n,), or an action outside 0..n_actions-1.
    """
    try:
        a = np.asarray(actions)
    except (TypeError, ValueError) as exc:  # ragged nesting, odd objects
        raise TypeError(f"actions must be a 1-D array of integers (action indices), "
                        f"got {type(actions).__name__}: {exc}") from exc
    if a.shape == (0,) and n == 0:
        return np.empty(0, np.int32)  # no values to check (``[]`` is float64)
    if a.dtype.kind not in "iu":
        hint = (" (Python ints beyond int64, or objects that are not ints)"
                if a.dtype.kind == "O" else "")
        raise TypeError(f"actions must be integers (action indices), got dtype {a.dtype}{hint}")
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"actions must have shape ({n},), got {a.shape}")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    out = np.empty(n, np.int32)
    cdef Py_ssize_t bad
    if a.dtype == np.int64:
        bad = _copy_actions[int64_t](a, n_actions, out)
    elif a.dtype == np.int32:
        bad = _copy_actions[int32_t](a, n_actions, out)
    elif a.dtype == np.int16:
        bad = _copy_actions[int16_t](a, n_actions, out)
    elif a.dtype == np.int8:
        bad = _copy_actions[int8_t](a, n_actions, out)
    elif a.dtype == np.uint64:
        bad = _copy_actions[uint64_t](a, n_actions, out)
    elif a.dtype == np.uint32:
        bad = _copy_actions[uint32_t](a, n_actions, out)
    elif a.dtype == np.uint16:
        bad = _copy_actions[uint16_t](a, n_actions, out)
    else:
        bad = _copy_actions[uint8_t](a, n_actions, out)
    if bad >= 0:
        raise ValueError(f"action {a[bad]} at position {bad} is out of range: this game "
                         f"has actions 0..{n_actions - 1}")
    return out
