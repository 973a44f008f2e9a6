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
WORKER_STARTING = SHMATARI_WORKER_STARTING
WORKER_READY = SHMATARI_WORKER_READY
WORKER_FAILED = SHMATARI_WORKER_FAILED
WORKER_EXITED = SHMATARI_WORKER_EXITED
POOL_STARTING = SHMATARI_POOL_STARTING
POOL_RUNNING = SHMATARI_POOL_RUNNING
POOL_CLOSING = SHMATARI_POOL_CLOSING

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
    static const char *shmatari_py_field_types[] = SHMATARI_FIELD_TYPES;
    static const char *shmatari_py_field_names[] = SHMATARI_FIELD_NAMES;
    typedef struct { const char *type; const char *member; size_t value; } shmatari_py_member;
    static const shmatari_py_member shmatari_py_members[] = {
      {"shmatari_header", "sizeof", sizeof(shmatari_header)},
      {"shmatari_header", "magic", offsetof(shmatari_header, magic)},
      {"shmatari_header", "abi_major", offsetof(shmatari_header, abi_major)},
      {"shmatari_header", "abi_minor", offsetof(shmatari_header, abi_minor)},
      {"shmatari_header", "header_bytes", offsetof(shmatari_header, header_bytes)},
      {"shmatari_header", "total_bytes", offsetof(shmatari_header, total_bytes)},
      {"shmatari_header", "num_envs", offsetof(shmatari_header, num_envs)},
      {"shmatari_header", "num_workers", offsetof(shmatari_header, num_workers)},
      {"shmatari_header", "batch_size", offsetof(shmatari_header, batch_size)},
      {"shmatari_header", "ring_depth", offsetof(shmatari_header, ring_depth)},
      {"shmatari_header", "stack_num", offsetof(shmatari_header, stack_num)},
      {"shmatari_header", "img_height", offsetof(shmatari_header, img_height)},
      {"shmatari_header", "img_width", offsetof(shmatari_header, img_width)},
      {"shmatari_header", "channels", offsetof(shmatari_header, channels)},
      {"shmatari_header", "frame_skip", offsetof(shmatari_header, frame_skip)},
      {"shmatari_header", "num_actions", offsetof(shmatari_header, num_actions)},
      {"shmatari_header", "obs_frame_bytes", offsetof(shmatari_header, obs_frame_bytes)},
      {"shmatari_header", "obs_env_bytes", offsetof(shmatari_header, obs_env_bytes)},
      {"shmatari_header", "slot_bytes", offsetof(shmatari_header, slot_bytes)},
      {"shmatari_header", "env_ctrl_offset", offsetof(shmatari_header, env_ctrl_offset)},
      {"shmatari_header", "worker_ctrl_offset", offsetof(shmatari_header, worker_ctrl_offset)},
      {"shmatari_header", "errors_offset", offsetof(shmatari_header, errors_offset)},
      {"shmatari_header", "slots_offset", offsetof(shmatari_header, slots_offset)},
      {"shmatari_header", "slot_obs_offset", offsetof(shmatari_header, slot_obs_offset)},
      {"shmatari_header", "slot_field_offset", offsetof(shmatari_header, slot_field_offset)},
      {"shmatari_header", "action_set", offsetof(shmatari_header, action_set)},
      {"shmatari_header", "owner_pid", offsetof(shmatari_header, owner_pid)},
      {"shmatari_header", "client_pid", offsetof(shmatari_header, client_pid)},
      {"shmatari_header", "pool_state", offsetof(shmatari_header, pool_state)},
      {"shmatari_header", "field_count", offsetof(shmatari_header, field_count)},
      {"shmatari_header", "seed_words", offsetof(shmatari_header, seed_words)},
      {"shmatari_header", "autoreset_mode", offsetof(shmatari_header, autoreset_mode)},
      {"shmatari_header", "slot_final_offset", offsetof(shmatari_header, slot_final_offset)},
      {"shmatari_header", "main_seq", offsetof(shmatari_header, main_seq)},
      {"shmatari_header", "main_sleeping", offsetof(shmatari_header, main_sleeping)},
      {"shmatari_header", "ready_workers", offsetof(shmatari_header, ready_workers)},
      {"shmatari_header", "failed_workers", offsetof(shmatari_header, failed_workers)},
      {"shmatari_header", "alloc_pos", offsetof(shmatari_header, alloc_pos)},
      {"shmatari_header", "consumed_batches", offsetof(shmatari_header, consumed_batches)},
      {"shmatari_env_ctrl", "sizeof", sizeof(shmatari_env_ctrl)},
      {"shmatari_env_ctrl", "req_seq", offsetof(shmatari_env_ctrl, req_seq)},
      {"shmatari_env_ctrl", "cmd", offsetof(shmatari_env_ctrl, cmd)},
      {"shmatari_env_ctrl", "action", offsetof(shmatari_env_ctrl, action)},
      {"shmatari_env_ctrl", "ack_seq", offsetof(shmatari_env_ctrl, ack_seq)},
      {"shmatari_env_ctrl", "results", offsetof(shmatari_env_ctrl, results)},
      {"shmatari_worker_ctrl", "sizeof", sizeof(shmatari_worker_ctrl)},
      {"shmatari_worker_ctrl", "wake_seq", offsetof(shmatari_worker_ctrl, wake_seq)},
      {"shmatari_worker_ctrl", "sleeping", offsetof(shmatari_worker_ctrl, sleeping)},
      {"shmatari_worker_ctrl", "pid", offsetof(shmatari_worker_ctrl, pid)},
      {"shmatari_worker_ctrl", "state", offsetof(shmatari_worker_ctrl, state)},
      {"shmatari_worker_ctrl", "env_begin", offsetof(shmatari_worker_ctrl, env_begin)},
      {"shmatari_worker_ctrl", "env_end", offsetof(shmatari_worker_ctrl, env_end)},
      {"shmatari_worker_ctrl", "steps", offsetof(shmatari_worker_ctrl, steps)},
      {"shmatari_slot_header", "sizeof", sizeof(shmatari_slot_header)},
      {"shmatari_slot_header", "done_count", offsetof(shmatari_slot_header, done_count)},
    };
    static const size_t shmatari_py_member_count =
        sizeof(shmatari_py_members) / sizeof(shmatari_py_members[0]);
    """
    const char *shmatari_py_field_types[]
    const char *shmatari_py_field_names[]
    ctypedef struct shmatari_py_member:
        const char *type
        const char *member
        size_t value
    const shmatari_py_member shmatari_py_members[]
    const size_t shmatari_py_member_count

#: The per-result fields of a slot: (name, NumPy dtype), in enum order.
FIELDS = tuple(
    (shmatari_py_field_names[i].decode(), np.dtype(shmatari_py_field_types[i].decode()))
    for i in range(<int>SHMATARI_FIELD_COUNT)
)


_BOOL = np.dtype(bool)
#: The dtype each field is handed out as: the 0/1 bytes as bool.
_PRESENTED = tuple(_BOOL if name in ("terminated", "truncated", "game_over", "episode_done")
                   else dtype for name, dtype in FIELDS)


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
    out = {}
    for i in range(shmatari_py_member_count):
        m = shmatari_py_members[i]
        out.setdefault(m.type.decode(), {})[m.member.decode()] = m.value
    return out


def min_ring_depth(uint32_t num_envs, uint32_t batch_size):
    """Smallest ring depth for a pool: ``ceil(num_envs / batch_size) + 1`` slots."""
    return shmatari_min_ring_depth(num_envs, batch_size)


def compute_layout(*, uint32_t num_envs, uint32_t num_workers, uint32_t batch_size,
                   uint32_t ring_depth, uint32_t stack_num, uint32_t img_height,
                   uint32_t img_width, uint32_t channels, uint32_t frame_skip,
                   uint32_t autoreset_mode=SHMATARI_AUTORESET_NEXT_STEP):
    """Lays out a segment with ``shmatari_layout_compute``.

    ``autoreset_mode`` is a value of ``AUTORESET_MODES``; same-step pools get
    room for final records in every slot.

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
    if shmatari_layout_compute_msg(&h, msg, sizeof(msg)) != 0:
        raise ValueError(msg.decode("utf-8", "replace") + ": " + repr(dict(
            num_envs=num_envs, num_workers=num_workers, batch_size=batch_size,
            ring_depth=ring_depth, stack_num=stack_num, img_height=img_height,
            img_width=img_width, channels=channels, frame_skip=frame_skip,
            autoreset_mode=autoreset_mode)))
    return (<char *>&h)[:sizeof(h)]


def status_name(int code):
    """The name of a status code (a key of ``STATUS``), or ``"unknown"``."""
    for name, value in STATUS.items():
        if value == code:
            return name
    return "unknown"


def pid_alive(int32_t pid):
    """True if process ``pid`` exists and is not a zombie (``shmatari_pid_alive``)."""
    return bool(shmatari_pid_alive(pid))


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
