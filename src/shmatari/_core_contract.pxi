# Included by _core.pyx (one compiled module, shmatari._core): the layout contract as Python sees it: constants, offset tables, struct_layout/compute_layout/check_header/segment_name.

# --------------------------------------------------------------------------
# The contract, as Python sees it

ABI_MAJOR = SHMATARI_ABI_MAJOR
ABI_MINOR = SHMATARI_ABI_MINOR
MAGIC = SHMATARI_MAGIC
ALIGN = SHMATARI_ALIGN
HEADER_BYTES = SHMATARI_HEADER_BYTES
SLOT_HEADER_BYTES = SHMATARI_SLOT_HEADER_BYTES
ERROR_BYTES = SHMATARI_ERROR_BYTES
MAX_ACTIONS = SHMATARI_MAX_ACTIONS
SEED_WORDS = SHMATARI_SEED_WORDS
RENDER_PALETTE_BYTES = SHMATARI_RENDER_PALETTE_BYTES
RAM_BYTES = SHMATARI_RAM_BYTES
FLAG_RESET = SHMATARI_FLAG_RESET
FLAG_RESTARTED = SHMATARI_FLAG_RESTARTED
FLAG_FINAL = SHMATARI_FLAG_FINAL
FLAG_OBSERVED = SHMATARI_FLAG_OBSERVED
SPIN_YIELD = SHMATARI_SPIN_YIELD
CMD_STEP = SHMATARI_CMD_STEP
CMD_RESET = SHMATARI_CMD_RESET
CMD_RESEED = SHMATARI_CMD_RESEED
CMD_OBSERVE = SHMATARI_CMD_OBSERVE
#: ``autoreset_mode`` option value -> the header's enum shmatari_autoreset_mode.
AUTORESET_MODES = {"next_step": SHMATARI_AUTORESET_NEXT_STEP,
                   "same_step": SHMATARI_AUTORESET_SAME_STEP,
                   "disabled": SHMATARI_AUTORESET_DISABLED}
#: ``obs_layout`` option value -> the header's enum shmatari_obs_layout.
OBS_LAYOUTS = {"channels_last": SHMATARI_OBS_CHANNELS_LAST,
               "channels_first": SHMATARI_OBS_CHANNELS_FIRST}
#: ``batch_order`` option value -> the header's enum shmatari_batch_order (1.3).
BATCH_ORDERS = {"first_ready": SHMATARI_BATCH_FIRST_READY,
                "fixed": SHMATARI_BATCH_FIXED}
WORKER_STARTING = SHMATARI_WORKER_STARTING
WORKER_READY = SHMATARI_WORKER_READY
WORKER_FAILED = SHMATARI_WORKER_FAILED
WORKER_EXITED = SHMATARI_WORKER_EXITED
POOL_STARTING = SHMATARI_POOL_STARTING
POOL_RUNNING = SHMATARI_POOL_RUNNING
POOL_CLOSING = SHMATARI_POOL_CLOSING
#: Seconds an attach waits on a header that is all zeros before it refuses
#: it (``SHMATARI_ZERO_HEADER_NS``): servers publish their name with the
#: header written, so only a file being created reads zero that long.
ZERO_HEADER_SECONDS = SHMATARI_ZERO_HEADER_NS / 1e9

#: Status codes of the C client (``enum shmatari_status``), by name.
STATUS = {
    "ok": SHMATARI_OK, "not_found": SHMATARI_ERR_NOT_FOUND,
    "not_shmatari": SHMATARI_ERR_NOT_SHMATARI, "abi": SHMATARI_ERR_ABI,
    "busy": SHMATARI_ERR_BUSY, "timeout": SHMATARI_ERR_TIMEOUT,
    "server_dead": SHMATARI_ERR_SERVER_DEAD, "worker": SHMATARI_ERR_WORKER,
    "closed": SHMATARI_ERR_CLOSED, "interrupted": SHMATARI_ERR_INTERRUPTED,
    "invalid": SHMATARI_ERR_INVALID, "state": SHMATARI_ERR_STATE,
    "system": SHMATARI_ERR_SYSTEM, "untrusted": SHMATARI_ERR_UNTRUSTED,
}
#: Documented maxima of a pool's primary parameters (``SHMATARI_MAX_*``,
#: docs/layout.md "Trust"): a client refuses a header beyond them.
MAX_ENVS = SHMATARI_MAX_ENVS
MAX_RING_DEPTH = SHMATARI_MAX_RING_DEPTH
MAX_STACK = SHMATARI_MAX_STACK
MAX_IMG_SIDE = SHMATARI_MAX_IMG_SIDE
MAX_FRAME_SKIP = SHMATARI_MAX_FRAME_SKIP
MAX_SEGMENT_BYTES = SHMATARI_MAX_SEGMENT_BYTES
OK = SHMATARI_OK
ERR_TIMEOUT = SHMATARI_ERR_TIMEOUT
ERR_INTERRUPTED = SHMATARI_ERR_INTERRUPTED
ERR_STATE = SHMATARI_ERR_STATE
ERR_INVALID = SHMATARI_ERR_INVALID
#: The client's states (``enum shmatari_client_state``), by name.
CLIENT_STATES = {shmatari_client_state_name(v).decode(): v for v in (
    SHMATARI_CLIENT_DETACHED, SHMATARI_CLIENT_NEEDS_RESET, SHMATARI_CLIENT_IDLE,
    SHMATARI_CLIENT_PARTIAL, SHMATARI_CLIENT_WAITING, SHMATARI_CLIENT_BROKEN)}
ENV_RUNNING = SHMATARI_ENV_RUNNING
ENV_ENDED = SHMATARI_ENV_ENDED

cdef extern from *:
    """
    #include <stddef.h>
    /* Every table below is generated from the lists in shmatari/layout.h. */
    typedef struct {
      const char *name, *type, *ctype, *unit, *meaning;
    } shmatari_py_field;
    #define SHMATARI_PY_FIELD(NAME, name, type, unit, meaning) \
      {#name, SHMATARI_TYPESTR(type), #type, unit, meaning},
    static const shmatari_py_field shmatari_py_fields[] = {
      SHMATARI_RESULT_FIELDS(SHMATARI_PY_FIELD)
    };
    typedef struct {
      const char *type, *member;
      size_t offset, size;
      const char *elem; /* NumPy type string of one element */
    } shmatari_py_member;
    #define SHMATARI_PY_MEMBER(S, type, name) \
      {#S, #name, offsetof(S, name), sizeof(((S *)0)->name), SHMATARI_TYPESTR(type)},
    #define SHMATARI_PY_HEADER(type, name, dims) \
      SHMATARI_PY_MEMBER(shmatari_header, type, name)
    #define SHMATARI_PY_ENV_CTRL(type, name, dims) \
      SHMATARI_PY_MEMBER(shmatari_env_ctrl, type, name)
    #define SHMATARI_PY_WORKER_CTRL(type, name, dims) \
      SHMATARI_PY_MEMBER(shmatari_worker_ctrl, type, name)
    #define SHMATARI_PY_SLOT_HEADER(type, name, dims) \
      SHMATARI_PY_MEMBER(shmatari_slot_header, type, name)
    static const shmatari_py_member shmatari_py_members[] = {
      {"shmatari_header", "sizeof", 0, sizeof(shmatari_header), ""},
      SHMATARI_HEADER_MEMBERS(SHMATARI_PY_HEADER)
      {"shmatari_env_ctrl", "sizeof", 0, sizeof(shmatari_env_ctrl), ""},
      SHMATARI_ENV_CTRL_MEMBERS(SHMATARI_PY_ENV_CTRL)
      {"shmatari_worker_ctrl", "sizeof", 0, sizeof(shmatari_worker_ctrl), ""},
      SHMATARI_WORKER_CTRL_MEMBERS(SHMATARI_PY_WORKER_CTRL)
      {"shmatari_slot_header", "sizeof", 0, sizeof(shmatari_slot_header), ""},
      SHMATARI_SLOT_HEADER_MEMBERS(SHMATARI_PY_SLOT_HEADER)
    };
    static const size_t shmatari_py_member_count =
        sizeof(shmatari_py_members) / sizeof(shmatari_py_members[0]);
    """
    ctypedef struct shmatari_py_field:
        const char *name
        const char *type
        const char *ctype
        const char *unit
        const char *meaning
    const shmatari_py_field shmatari_py_fields[]
    ctypedef struct shmatari_py_member:
        const char *type
        const char *member
        size_t offset
        size_t size
        const char *elem
    const shmatari_py_member shmatari_py_members[]
    const size_t shmatari_py_member_count

#: Every per-result field, in enum order, as layout.h's SHMATARI_RESULT_FIELDS
#: lists it: (name, NumPy dtype, C type, unit, meaning).
FIELD_SPECS = tuple([
    (shmatari_py_fields[_i].name.decode(), np.dtype(shmatari_py_fields[_i].type.decode()),
     shmatari_py_fields[_i].ctype.decode(), shmatari_py_fields[_i].unit.decode(),
     shmatari_py_fields[_i].meaning.decode())
    for _i in range(<int>SHMATARI_FIELD_COUNT)])
#: The per-result fields of a slot: (name, NumPy dtype), in enum order.
FIELDS = tuple((spec[0], spec[1]) for spec in FIELD_SPECS)
#: Names of the arrays ``Segment.collect`` returns, in order: the fields,
#: then the rows' FLAG_RESET, FLAG_RESTARTED and FLAG_FINAL bits.
COLLECTED = tuple(spec[0] for spec in FIELD_SPECS) + ("_reset", "_restarted", "_final")
#: Segment name prefix (``SHMATARI_NAME_PREFIX``): ``shmatari_<name>``.
NAME_PREFIX = SHMATARI_NAME_PREFIX.decode()

#: Every member of the layout's structs: {struct: {member: (offset, NumPy
#: element dtype, element count)}}, reserved words included.
cdef dict _members():
    cdef size_t i
    cdef const shmatari_py_member *m
    out = {}
    for i in range(shmatari_py_member_count):
        m = &shmatari_py_members[i]
        if m.member != b"sizeof":
            dt = np.dtype(m.elem.decode())
            out.setdefault(m.type.decode(), {})[m.member.decode()] = (
                m.offset, dt, m.size // dt.itemsize)
    return out


MEMBERS = _members()


_BOOL = np.dtype(bool)
#: The dtype each field is handed out as: the 0/1 bytes (C type
#: ``shmatari_bool8``) as bool.
_PRESENTED = tuple(_BOOL if ctype == "shmatari_bool8" else dtype
                   for _, dtype, ctype, _, _ in FIELD_SPECS)


cdef object _view(object base, char *data, cnp.npy_intp n, object descr):
    """A 1-D array of ``n`` elements of ``descr`` at ``data``, inside ``base``
    (which it keeps alive)."""
    Py_INCREF(descr)  # PyArray_NewFromDescr steals a reference
    arr = PyArray_NewFromDescr(np.ndarray, <cnp.dtype>descr, 1, &n, NULL, data,
                               cnp.NPY_ARRAY_CARRAY, NULL)
    cnp.set_array_base(arr, base)
    return arr


def struct_layout():
    """Offsets and sizes of every struct member, as the C compiler laid them out.

    Returns:
        dict: ``{"shmatari_header": {"sizeof": 1024, "magic": 0, ...}, ...}``,
        in bytes. Tests compare it with a separately compiled C program.
    """
    cdef size_t i
    cdef const shmatari_py_member *m
    out = {}
    for i in range(shmatari_py_member_count):
        m = &shmatari_py_members[i]
        out.setdefault(m.type.decode(), {})[m.member.decode()] = (
            m.size if m.member == b"sizeof" else m.offset)
    return out


cdef object _load(const char *p, str kind, size_t size):
    """One element of the layout at ``p``, loaded with acquire ordering."""
    cdef uint64_t v
    if size == 8:
        v = shmatari_load_acquire64(<const uint64_t *>p)
        return <int64_t>v if kind == "i" else v
    if size == 4:
        v = shmatari_load_acquire(<const uint32_t *>p)
        return <int32_t>v if kind == "i" else v
    raise TypeError(f"no {size}-byte member in the header")


def header_words(buf):
    """The words of a header (every member of ``shmatari_header`` but the
    reserved ones), read through the offset table generated from layout.h's
    ``SHMATARI_HEADER_MEMBERS``: a snapshot.

    Args:
        buf: at least ``HEADER_BYTES`` bytes, the header at offset 0.

    Returns:
        dict: member name -> int, or list of int for an array.

    Raises:
        ValueError: ``buf`` is shorter than the header.
    """
    cdef const unsigned char[::1] mv = buf
    if <size_t>mv.shape[0] < SHMATARI_HEADER_BYTES:
        raise ValueError(f"{mv.shape[0]} bytes hold no {SHMATARI_HEADER_BYTES}-byte header")
    cdef const char *base = <const char *>&mv[0]
    cdef size_t k, offset, size, count
    out = {}
    for name, spec in MEMBERS["shmatari_header"].items():
        if name.startswith("reserved"):  # MUST NOT be read (layout.h)
            continue
        offset, dtype, count = spec
        size = dtype.itemsize
        words = []
        for k in range(count):
            words.append(_load(base + offset + k * size, dtype.kind, size))
        out[name] = words if count > 1 else words[0]
    return out


def min_ring_depth(uint32_t num_envs, uint32_t batch_size):
    """Smallest ring depth for a pool: ``ceil(num_envs / batch_size) + 1`` slots."""
    return shmatari_min_ring_depth(num_envs, batch_size)


def compute_layout(*, uint32_t num_envs, uint32_t num_workers, uint32_t batch_size,
                   uint32_t ring_depth, uint32_t stack_num, uint32_t img_height,
                   uint32_t img_width, uint32_t channels, uint32_t frame_skip,
                   uint32_t autoreset_mode=SHMATARI_AUTORESET_NEXT_STEP,
                   uint32_t obs_layout=SHMATARI_OBS_CHANNELS_LAST,
                   uint32_t screen_height=0, uint32_t screen_width=0,
                   uint32_t ram_bytes=0,
                   uint32_t batch_order=SHMATARI_BATCH_FIRST_READY):
    """Lays out a segment with ``shmatari_layout_compute``.

    ``autoreset_mode`` is a value of ``AUTORESET_MODES``; same-step pools get
    room for final records in every slot. ``obs_layout`` is a value of
    ``OBS_LAYOUTS``. ``screen_height`` / ``screen_width`` (pixels, both or
    neither 0) add the render area, each env's last full-size screen.
    ``ram_bytes`` (0 or ``RAM_BYTES``) adds the RAM area, each env's console RAM.
    ``batch_order`` is a value of ``BATCH_ORDERS`` (``fixed`` needs
    ``batch_size`` to divide ``num_envs``).

    Returns:
        bytes: the 1024-byte header image to copy to offset 0 of the segment;
        ``total_bytes`` (offset 24) is the size the segment needs.

    Raises:
        ValueError: the geometry is invalid or too large (see
            ``shmatari_layout_compute_msg``); the message says which
            parameter is out of range, or how many bytes it would need.
    """
    cdef shmatari_header h
    cdef char msg[512]
    memset(&h, 0, sizeof(h))
    h.num_envs = num_envs
    h.num_workers = num_workers
    h.batch_size = batch_size
    h.ring_depth = ring_depth
    h.stack_num = stack_num
    h.img_height = img_height
    h.img_width = img_width
    h.channels = channels
    h.frame_skip = frame_skip
    h.autoreset_mode = autoreset_mode
    h.obs_layout = obs_layout
    h.screen_height = screen_height
    h.screen_width = screen_width
    h.ram_bytes = ram_bytes
    h.batch_order = batch_order
    if shmatari_layout_compute_msg(&h, msg, sizeof(msg)) != 0:
        raise ValueError(msg.decode("utf-8", "replace") + ": " + repr(dict(
            num_envs=num_envs, num_workers=num_workers, batch_size=batch_size,
            ring_depth=ring_depth, stack_num=stack_num, img_height=img_height,
            img_width=img_width, channels=channels, frame_skip=frame_skip,
            autoreset_mode=autoreset_mode, obs_layout=obs_layout,
            screen_height=screen_height, screen_width=screen_width, ram_bytes=ram_bytes,
            batch_order=batch_order)))
    return (<char *>&h)[:sizeof(h)]


def status_name(int code):
    """The name of a status code (a key of ``STATUS``), or ``"unknown"``."""
    for name, value in STATUS.items():
        if value == code:
            return name
    return "unknown"


cpdef int64_t timeout_to_ns(double seconds) except? -2:
    """Seconds -> the ``timeout_ns`` of shmatari.h's waits: nanoseconds, or
    -1 (no limit) for inf and for anything past 2**63 ns (292 years).

    Raises:
        ValueError: NaN (converting it to int64 is undefined behaviour in C)
            or a negative number (which the C waits would read as no limit).
    """
    if seconds != seconds or seconds < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {seconds!r}")
    if seconds >= 9.2e9:
        return -1
    return <int64_t>(seconds * 1e9)


def pid_alive(int32_t pid):
    """True if process ``pid`` exists and is not a zombie (``shmatari_pid_alive``)."""
    return bool(shmatari_pid_alive(pid))


def process_start(int32_t pid):
    """When process ``pid`` started, in clock ticks since boot (Linux
    ``/proc/<pid>/stat``, ``shmatari_process_start``); 0 if it is gone, a
    zombie, or unknown."""
    return shmatari_process_start(pid)


def process_alive(int32_t pid, uint64_t start):
    """The liveness rule of C and Python alike (``shmatari_process_alive``):
    ``pid`` exists, is not a zombie, and, unless ``start`` is 0, started at
    ``start`` (``process_start``): a process that reused the pid is not it."""
    return bool(shmatari_process_alive(pid, start))


def check_header(buf):
    """Checks a segment's header as a C client does (``shmatari_check_header``).

    Returns:
        (int, str): a status code (``OK``, ``STATUS["not_shmatari"]`` or
        ``STATUS["abi"]``) and its message ("" when OK).
    """
    cdef const unsigned char[::1] mv = buf
    cdef char msg[512]
    msg[0] = 0
    r = shmatari_check_header(&mv[0], mv.shape[0], msg, sizeof(msg))
    return r, msg.decode("utf-8", "replace")


def segment_name(str name):
    """The segment name of pool ``name`` (``shmatari_segment_name``):
    ``"demo"`` -> ``"shmatari_demo"``; a name that already starts with
    ``shmatari_`` is kept.

    Raises:
        ValueError: an empty name, a name with ``/``, or one too long.
    """
    cdef char out[256]
    cdef char msg[512]
    data = name.encode("utf-8")
    if shmatari_segment_name(data, out, SHMATARI_NAME_MAX, msg, sizeof(msg)) != SHMATARI_OK:
        raise ValueError(msg.decode("utf-8", "replace"))
    return out.decode("utf-8")


import re as _re

# C0 controls but tab and newline, DEL, C1 controls (U+0080..U+009F), and
# the bidirectional formatting characters ("Trojan Source", CVE-2021-42574).
_CONTROL = _re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f"
                       "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(m) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(str text):
    """``text`` with every control character but tab and newline written as
    ``\\xNN``, and every bidirectional formatting character (U+061C,
    U+200E, U+200F, U+202A..U+202E, U+2066..U+2069) as ``\\uNNNN``: a
    worker's error text comes from the segment, which any process of the
    user may write, and ends up in messages, logs and terminals, where
    escape sequences could clear the screen, retitle the window or hide what
    follows, and bidi controls reorder what is shown (``shmatari_pool_check``
    does the same in C, with ``?``)."""
    return _CONTROL.sub(_escaped, text)
