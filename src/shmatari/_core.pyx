# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""shmatari's compiled core: the layout contract, signalling, frame kernel and
the per-env Atari step.

Everything here is built from ``csrc/include/shmatari/layout.h``,
``csrc/include/shmatari/sync.h`` and ``csrc/shmatari_kernel.{h,c}``; the
Python modules read constants and offsets from this module only.
"""

from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t)
from libc.stddef cimport ptrdiff_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset, strlen

import numpy as np

cimport numpy as cnp
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF

cnp.import_array()


cdef extern from "numpy/arrayobject.h":
    object PyArray_NewFromDescr(type subtype, cnp.dtype descr, int nd, cnp.npy_intp *dims,
                                cnp.npy_intp *strides, void *data, int flags, PyObject *obj)





cdef extern from "shmatari/layout.h" nogil:
    const unsigned SHMATARI_ABI_MAJOR
    const unsigned SHMATARI_ABI_MINOR
    const uint64_t SHMATARI_MAGIC
    const unsigned SHMATARI_ALIGN
    const unsigned SHMATARI_HEADER_BYTES
    const unsigned SHMATARI_SLOT_HEADER_BYTES
    const unsigned SHMATARI_ERROR_BYTES
    const unsigned SHMATARI_MAX_ACTIONS
    const unsigned SHMATARI_MAX_FIELDS
    const unsigned SHMATARI_SEED_WORDS
    const unsigned SHMATARI_FLAG_RESET
    const unsigned SHMATARI_FLAG_RESTARTED
    const unsigned SHMATARI_FLAG_FINAL
    const unsigned SHMATARI_FLAG_OBSERVED

    enum shmatari_cmd:
        SHMATARI_CMD_NONE
        SHMATARI_CMD_STEP
        SHMATARI_CMD_RESET
        SHMATARI_CMD_RESEED
        SHMATARI_CMD_OBSERVE
    enum shmatari_autoreset_mode:
        SHMATARI_AUTORESET_NEXT_STEP
        SHMATARI_AUTORESET_SAME_STEP
        SHMATARI_AUTORESET_DISABLED
    enum shmatari_worker_state:
        SHMATARI_WORKER_STARTING
        SHMATARI_WORKER_READY
        SHMATARI_WORKER_FAILED
        SHMATARI_WORKER_EXITED
    enum shmatari_pool_state:
        SHMATARI_POOL_STARTING
        SHMATARI_POOL_RUNNING
        SHMATARI_POOL_CLOSING
    enum shmatari_field:
        SHMATARI_FIELD_ENV_ID
        SHMATARI_FIELD_REWARD
        SHMATARI_FIELD_TERMINATED
        SHMATARI_FIELD_TRUNCATED
        SHMATARI_FIELD_LIVES
        SHMATARI_FIELD_RAW_REWARD
        SHMATARI_FIELD_GAME_OVER
        SHMATARI_FIELD_ELAPSED_STEP
        SHMATARI_FIELD_EPISODE_FRAMES
        SHMATARI_FIELD_FRAME_NUMBER
        SHMATARI_FIELD_EPISODE_RETURN
        SHMATARI_FIELD_EPISODE_DONE
        SHMATARI_FIELD_FLAGS
        SHMATARI_FIELD_COUNT

    ctypedef struct shmatari_header:
        uint64_t magic
        uint32_t abi_major
        uint32_t abi_minor
        uint64_t header_bytes
        uint64_t total_bytes
        uint32_t num_envs
        uint32_t num_workers
        uint32_t batch_size
        uint32_t ring_depth
        uint32_t stack_num
        uint32_t img_height
        uint32_t img_width
        uint32_t channels
        uint32_t frame_skip
        uint32_t num_actions
        uint64_t obs_frame_bytes
        uint64_t obs_env_bytes
        uint64_t slot_bytes
        uint64_t env_ctrl_offset
        uint64_t worker_ctrl_offset
        uint64_t errors_offset
        uint64_t slots_offset
        uint64_t slot_obs_offset
        uint64_t slot_field_offset[16]
        int32_t action_set[18]
        int32_t owner_pid
        int32_t client_pid
        uint32_t pool_state
        uint32_t field_count
        uint64_t seed_words[4]
        uint32_t autoreset_mode
        uint64_t slot_final_offset
        uint32_t main_seq
        uint32_t main_sleeping
        uint32_t ready_workers
        uint32_t failed_workers
        uint64_t alloc_pos
        uint64_t consumed_batches

    ctypedef struct shmatari_env_ctrl:
        uint32_t req_seq
        uint32_t cmd
        int32_t action
        uint32_t ack_seq
        uint64_t results

    ctypedef struct shmatari_worker_ctrl:
        uint32_t wake_seq
        uint32_t sleeping
        int32_t pid
        uint32_t state
        uint32_t env_begin
        uint32_t env_end
        uint64_t steps

    ctypedef struct shmatari_slot_header:
        uint32_t done_count

    int shmatari_layout_compute(shmatari_header *h)
    uint32_t shmatari_min_ring_depth(uint32_t num_envs, uint32_t batch_size)
    shmatari_env_ctrl *shmatari_env(const shmatari_header *h, uint32_t env)
    shmatari_worker_ctrl *shmatari_worker(const shmatari_header *h, uint32_t w)
    char *shmatari_error_text(const shmatari_header *h, uint32_t worker)
    char *shmatari_slot(const shmatari_header *h, uint64_t slot)
    int32_t *shmatari_row_env_id(const shmatari_header *h, uint64_t pos)
    void shmatari_clear_rows(const shmatari_header *h, uint64_t slot)


cdef extern from "shmatari/sync.h" nogil:
    int64_t shmatari_now_ns()
    const int SHMATARI_WAIT_CHANGED
    const int SHMATARI_WAIT_TIMEOUT
    const int SHMATARI_WAIT_EINTR
    uint32_t shmatari_load_acquire(const uint32_t *p)
    uint64_t shmatari_load_acquire64(const uint64_t *p)
    void shmatari_store_release(uint32_t *p, uint32_t v)
    void shmatari_store_release64(uint64_t *p, uint64_t v)
    uint32_t shmatari_fetch_add(uint32_t *p, uint32_t v)
    uint64_t shmatari_fetch_add64(uint64_t *p, uint64_t v)
    const int SHMATARI_SPIN_PAUSE
    const int SHMATARI_SPIN_YIELD
    int shmatari_wait_change(uint32_t *word, uint32_t expected,
                             uint32_t *sleeping, int64_t spin_ns, int spin_mode,
                             int64_t timeout_ns)
    void shmatari_notify(uint32_t *word, uint32_t *sleeping)


cdef extern from "shmatari/shmatari.h" nogil:
    enum shmatari_status:
        SHMATARI_OK
        SHMATARI_ERR_NOT_FOUND
        SHMATARI_ERR_NOT_SHMATARI
        SHMATARI_ERR_ABI
        SHMATARI_ERR_BUSY
        SHMATARI_ERR_TIMEOUT
        SHMATARI_ERR_SERVER_DEAD
        SHMATARI_ERR_WORKER
        SHMATARI_ERR_CLOSED
        SHMATARI_ERR_INTERRUPTED
        SHMATARI_ERR_INVALID
        SHMATARI_ERR_STATE
        SHMATARI_ERR_SYSTEM
    const int SHMATARI_NAME_MAX
    const char *SHMATARI_NAME_PREFIX
    int shmatari_pid_alive(int32_t pid)
    int shmatari_check_header(const void *base, uint64_t size, char *msg, size_t len)
    int shmatari_env_workers(const shmatari_header *h, uint32_t *env_worker,
                             char *msg, size_t len)
    int shmatari_pool_check(const shmatari_header *h, int check_pids, char *msg,
                            size_t len)
    int shmatari_open_pool(shmatari_header *h, uint64_t size, int32_t pid,
                           int64_t timeout_ns, int32_t *holder, char *msg, size_t len)
    void shmatari_unclaim(shmatari_header *h, int32_t pid)
    void shmatari_post(shmatari_header *h, const uint32_t *env_worker,
                       uint8_t *touched, const uint32_t *env_ids, uint32_t n,
                       const int32_t *actions, uint32_t cmd)
    int shmatari_wait_batch(shmatari_header *h, uint64_t batch, int64_t spin_ns,
                            int spin_mode, int64_t timeout_ns, int64_t *next_check_ns,
                            char *msg, size_t len)
    void shmatari_consume_batch(shmatari_header *h, uint64_t batch)
    int shmatari_segment_name(const char *name, char *out, size_t out_len,
                              char *msg, size_t len)


cdef extern from "shmatari_kernel.h" nogil:
    const int SHMATARI_KERNEL_OK
    const int SHMATARI_KERNEL_EINVAL
    ctypedef struct shmatari_resize_plan:
        int32_t src_h, src_w, dst_h, dst_w, channels, mode
    int shmatari_resize_plan_init(shmatari_resize_plan *plan, int src_h,
                                  int src_w, int dst_h, int dst_w, int channels)
    void shmatari_resize_plan_free(shmatari_resize_plan *plan)
    void shmatari_resize_u8(shmatari_resize_plan *plan, const uint8_t *src,
                            ptrdiff_t src_stride, uint8_t *dst,
                            ptrdiff_t dst_stride)
    void shmatari_frame(shmatari_resize_plan *plan, const uint8_t *a,
                        const uint8_t *b, const uint8_t *lut, uint8_t *dst,
                        ptrdiff_t dst_stride)
    int shmatari_has_unknown(const uint8_t *frame, const uint8_t *checked,
                             int height, int width, const uint8_t *known)
    void shmatari_learn_palette(const uint8_t *frame, const uint8_t *converted,
                                size_t n, int channels, uint8_t *lut,
                                uint8_t *known)


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
SPIN_PAUSE = SHMATARI_SPIN_PAUSE
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
NAME_PREFIX = SHMATARI_NAME_PREFIX.decode()

#: Status codes of the C client (``enum shmatari_status``), by name.
STATUS = {
    "ok": SHMATARI_OK, "not_found": SHMATARI_ERR_NOT_FOUND,
    "not_shmatari": SHMATARI_ERR_NOT_SHMATARI, "abi": SHMATARI_ERR_ABI,
    "busy": SHMATARI_ERR_BUSY, "timeout": SHMATARI_ERR_TIMEOUT,
    "server_dead": SHMATARI_ERR_SERVER_DEAD, "worker": SHMATARI_ERR_WORKER,
    "closed": SHMATARI_ERR_CLOSED, "interrupted": SHMATARI_ERR_INTERRUPTED,
    "invalid": SHMATARI_ERR_INVALID, "state": SHMATARI_ERR_STATE,
    "system": SHMATARI_ERR_SYSTEM,
}
OK = SHMATARI_OK
ERR_TIMEOUT = SHMATARI_ERR_TIMEOUT
ERR_INTERRUPTED = SHMATARI_ERR_INTERRUPTED

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
        ValueError: the geometry is invalid (see ``shmatari_layout_compute``).
    """
    cdef shmatari_header h
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
    if shmatari_layout_compute(&h) != 0:
        raise ValueError("invalid pool geometry: " + repr(dict(
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


# --------------------------------------------------------------------------
# A mapped segment

cdef class Segment:
    """Typed access to a mapped shmatari segment.

    Args:
        buf: a writable buffer over the whole segment (``SharedMemory.buf``).
            The segment's header must already be written; the magic and the
            ABI major version are checked.

    Raises:
        ValueError: the buffer is too small or its header is not a shmatari
            header of ABI major ``ABI_MAJOR``.
    """

    cdef object _view
    cdef char *base
    cdef shmatari_header *hdr
    cdef uint32_t *env_worker
    cdef uint8_t *touched
    #: How the client waits for a batch: poll for up to spin_ns nanoseconds
    #: (SPIN_PAUSE or SPIN_YIELD) before sleeping on the futex.
    cdef public int64_t spin_ns
    cdef public int spin_mode
    cdef int64_t next_check_ns  # when wait_batch next checks the owner's pid

    def __init__(self, buf):
        cdef const unsigned char[::1] mv = buf
        code, msg = check_header(mv)
        if code != SHMATARI_OK:
            raise ValueError(msg)
        self._view = mv
        self.base = <char *>&mv[0]
        self.hdr = <shmatari_header *>self.base
        self.env_worker = <uint32_t *>calloc(self.hdr.num_envs, sizeof(uint32_t))
        self.touched = <uint8_t *>calloc(self.hdr.num_workers, 1)
        if self.env_worker == NULL or self.touched == NULL:
            raise MemoryError()
        self.spin_ns = 0
        self.spin_mode = SHMATARI_SPIN_PAUSE
        self.next_check_ns = 0
        # The creator sets the groups after this; refresh_groups() then.
        shmatari_env_workers(self.hdr, self.env_worker, NULL, 0)

    def __cinit__(self, *args, **kwargs):
        self.env_worker = NULL
        self.touched = NULL

    def __dealloc__(self):
        free(self.env_worker)
        free(self.touched)

    def refresh_groups(self):
        """Re-reads which worker owns which env from the worker records.

        Raises:
            ValueError: the groups do not cover every env exactly once.
        """
        self._check()
        cdef char msg[512]
        if shmatari_env_workers(self.hdr, self.env_worker, msg, sizeof(msg)) != SHMATARI_OK:
            raise ValueError(msg.decode("utf-8", "replace"))

    def release(self):
        """Drops the reference to the buffer (before ``SharedMemory.close``)."""
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
        return self.hdr.num_envs

    @property
    def num_workers(self):
        self._check()
        return self.hdr.num_workers

    @property
    def batch_size(self):
        self._check()
        return self.hdr.batch_size

    @property
    def ring_depth(self):
        self._check()
        return self.hdr.ring_depth

    def header(self):
        """The header's words as a dict (a snapshot)."""
        self._check()
        h = self.hdr
        return {
            "magic": h.magic, "abi_major": h.abi_major, "abi_minor": h.abi_minor,
            "header_bytes": h.header_bytes, "total_bytes": h.total_bytes,
            "num_envs": h.num_envs, "num_workers": h.num_workers,
            "batch_size": h.batch_size, "ring_depth": h.ring_depth,
            "stack_num": h.stack_num, "img_height": h.img_height,
            "img_width": h.img_width, "channels": h.channels,
            "frame_skip": h.frame_skip, "num_actions": h.num_actions,
            "obs_frame_bytes": h.obs_frame_bytes, "obs_env_bytes": h.obs_env_bytes,
            "slot_bytes": h.slot_bytes, "env_ctrl_offset": h.env_ctrl_offset,
            "worker_ctrl_offset": h.worker_ctrl_offset,
            "errors_offset": h.errors_offset, "slots_offset": h.slots_offset,
            "slot_obs_offset": h.slot_obs_offset,
            "slot_field_offset": [h.slot_field_offset[i] for i in range(<int>SHMATARI_FIELD_COUNT)],
            "action_set": [h.action_set[i] for i in range(h.num_actions)],
            "owner_pid": h.owner_pid, "client_pid": h.client_pid,
            "pool_state": h.pool_state, "field_count": h.field_count,
            "seed_words": [h.seed_words[i] for i in range(SHMATARI_SEED_WORDS)],
            "autoreset_mode": h.autoreset_mode,
            "slot_final_offset": h.slot_final_offset,
            "ready_workers": shmatari_load_acquire(&h.ready_workers),
            "failed_workers": shmatari_load_acquire(&h.failed_workers),
            "alloc_pos": shmatari_load_acquire64(&h.alloc_pos),
            "consumed_batches": h.consumed_batches,
        }

    # -- setup by the creator ----------------------------------------------
    def set_worker_group(self, uint32_t worker, uint32_t env_begin, uint32_t env_end):
        self._check()
        cdef shmatari_worker_ctrl *wc = shmatari_worker(self.hdr, worker)
        wc.env_begin = env_begin
        wc.env_end = env_end

    def set_owner(self, int32_t pid):
        self._check()
        self.hdr.owner_pid = pid

    def set_seed_words(self, words):
        """Writes the pool seed (``SEED_WORDS`` uint64 words, least significant first)."""
        self._check()
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
        for w in range(self.hdr.num_workers):
            wc = shmatari_worker(self.hdr, w)
            shmatari_notify(&wc.wake_seq, &wc.sleeping)
        shmatari_notify(&self.hdr.main_seq, &self.hdr.main_sleeping)

    def pool_state(self):
        self._check()
        return shmatari_load_acquire(&self.hdr.pool_state)

    # -- worker records ----------------------------------------------------
    def worker_state(self, uint32_t worker):
        self._check()
        return shmatari_load_acquire(&shmatari_worker(self.hdr, worker).state)

    def worker_pid(self, uint32_t worker):
        self._check()
        return shmatari_worker(self.hdr, worker).pid

    def worker_group(self, uint32_t worker):
        self._check()
        cdef shmatari_worker_ctrl *wc = shmatari_worker(self.hdr, worker)
        return (wc.env_begin, wc.env_end)

    def worker_error(self, uint32_t worker):
        """The error text a failed worker left (str, empty when none)."""
        self._check()
        cdef char *text = shmatari_error_text(self.hdr, worker)
        cdef size_t n = strlen(text) if text[SHMATARI_ERROR_BYTES - 1] == 0 else SHMATARI_ERROR_BYTES - 1
        return text[:n].decode("utf-8", "replace")

    def counts(self):
        """(ready_workers, failed_workers)."""
        self._check()
        return (shmatari_load_acquire(&self.hdr.ready_workers),
                shmatari_load_acquire(&self.hdr.failed_workers))

    # -- the client's side (shmatari/shmatari.h) ---------------------------
    def open_client(self, int32_t pid, double timeout):
        """Attaches process ``pid`` as the pool's client (``shmatari_open_pool``):
        waits up to ``timeout`` seconds for the pool to run, claims it (one
        client at a time; a dead client's claim is taken over) and recovers it
        from any previous client (``shmatari_recover``).

        Returns:
            (int, int, str): the status code, the current client's pid when
            the code is ``STATUS["busy"]`` (else 0), and the message.
        """
        self._check()
        cdef char msg[512]
        cdef int32_t holder = 0
        cdef int r
        cdef uint64_t size = self._view.shape[0]
        cdef int64_t timeout_ns = <int64_t>(timeout * 1e9)
        msg[0] = 0
        with nogil:
            r = shmatari_open_pool(self.hdr, size, pid, timeout_ns, &holder, msg, sizeof(msg))
        return r, holder, msg.decode("utf-8", "replace")

    def release_client(self, int32_t pid):
        """Gives up the client claim if ``pid`` holds it (``shmatari_unclaim``)."""
        self._check()
        shmatari_unclaim(self.hdr, pid)

    def pool_check(self, bint check_pids=True):
        """Whether the pool can still answer (``shmatari_pool_check``).

        Returns:
            (int, str): ``OK`` or a liveness status, and its message.
        """
        self._check()
        cdef char msg[512]
        msg[0] = 0
        r = shmatari_pool_check(self.hdr, check_pids, msg, sizeof(msg))
        return r, msg.decode("utf-8", "replace")

    def post(self, const uint32_t[::1] env_ids, const int32_t[::1] actions, uint32_t cmd):
        """Posts one command per env and wakes the workers that own them
        (``shmatari_post``).

        Args:
            env_ids: uint32, shape (n,): the envs, each at most once, each
                waiting for a command (the caller checks both).
            actions: int32, shape (n,) or None: action index per env (STEP).
            cmd: ``CMD_STEP``, ``CMD_RESET``, ``CMD_RESEED`` or ``CMD_OBSERVE``.
        """
        self._check()
        cdef uint32_t n = env_ids.shape[0]
        cdef const int32_t *acts = NULL
        if actions is not None:
            if <uint32_t>actions.shape[0] != n:
                raise ValueError(f"{actions.shape[0]} actions for {n} envs")
            if n:
                acts = &actions[0]
        if n:
            with nogil:
                shmatari_post(self.hdr, self.env_worker, self.touched, &env_ids[0], n, acts,
                              cmd)

    def post_all(self, const int32_t[::1] actions, uint32_t cmd):
        """``post`` to every env, in env order (``actions``: int32 (num_envs,) or None)."""
        self._check()
        cdef uint32_t n = self.hdr.num_envs
        cdef const int32_t *acts = NULL
        if actions is not None:
            if <uint32_t>actions.shape[0] != n:
                raise ValueError(f"{actions.shape[0]} actions for {n} envs")
            acts = &actions[0]
        with nogil:
            shmatari_post(self.hdr, self.env_worker, self.touched, NULL, n, acts, cmd)

    def wait_batch(self, uint64_t batch, double timeout):
        """Waits until batch ``batch`` (a count of batches taken) is full,
        polling for ``spin_ns`` before sleeping (``shmatari_wait_batch``).

        Returns:
            int: ``OK`` when full; ``ERR_TIMEOUT`` after ``timeout`` seconds;
            ``ERR_INTERRUPTED`` after a signal whose handler did not raise;
            or a liveness status (see :meth:`pool_check`).

        Raises:
            KeyboardInterrupt (or any signal handler's exception): a signal
            arrived while waiting.
        """
        self._check()
        cdef int r
        cdef int64_t timeout_ns = <int64_t>(timeout * 1e9)
        with nogil:
            r = shmatari_wait_batch(self.hdr, batch, self.spin_ns, self.spin_mode, timeout_ns,
                                    &self.next_check_ns, NULL, 0)
        if r == SHMATARI_ERR_INTERRUPTED:
            PyErr_CheckSignals()
        return r

    def wait_ready(self, uint32_t count, double timeout):
        """Waits until ``count`` workers are ready; False on timeout or failure."""
        self._check()
        cdef shmatari_header *h = self.hdr
        cdef uint32_t seen
        cdef int r
        cdef int64_t timeout_ns = <int64_t>(timeout * 1e9)
        while True:
            with nogil:
                seen = shmatari_load_acquire(&h.main_seq)
                if shmatari_load_acquire(&h.ready_workers) >= count:
                    r = -1
                elif shmatari_load_acquire(&h.failed_workers) != 0:
                    r = -2
                else:
                    r = shmatari_wait_change(&h.main_seq, seen, &h.main_sleeping,
                                             0, SHMATARI_SPIN_PAUSE, timeout_ns)
            if r == -1:
                return True
            if r != SHMATARI_WAIT_CHANGED:
                if r == SHMATARI_WAIT_EINTR:
                    PyErr_CheckSignals()
                return False

    def batch_done(self, uint64_t batch):
        """Results written so far to the slot of batch ``batch``."""
        self._check()
        return shmatari_load_acquire(
            &(<shmatari_slot_header *>shmatari_slot(self.hdr, batch)).done_count)

    def take_batch(self, uint64_t batch):
        """Marks batch ``batch`` taken: its slot may be written again
        (``shmatari_consume_batch``, which also marks its rows empty)."""
        self._check()
        shmatari_consume_batch(self.hdr, batch)

    def clear_slots(self):
        """Marks every row of every slot empty (``env_id`` -1); the creator
        calls it once, before any worker starts."""
        self._check()
        cdef uint64_t s
        for s in range(self.hdr.ring_depth):
            shmatari_clear_rows(self.hdr, s)

    # -- restarting dead workers (the creator, while no other worker is busy) --
    def in_flight(self):
        """bool array, shape (num_envs,): envs with a command not yet answered
        (``req_seq != ack_seq``)."""
        self._check()
        cdef uint32_t e
        cdef shmatari_env_ctrl *ec
        out = np.zeros(self.hdr.num_envs, np.bool_)
        cdef uint8_t[::1] o = out.view(np.uint8)
        for e in range(self.hdr.num_envs):
            ec = shmatari_env(self.hdr, e)
            o[e] = shmatari_load_acquire(&ec.req_seq) != shmatari_load_acquire(&ec.ack_seq)
        return out

    def recover(self, workers):
        """Makes the ring consistent after ``workers`` died, and says what
        their replacements must publish.

        Call it once every other worker is idle (no command of theirs in
        flight) and before the replacements start; the client must not post
        meanwhile. A worker publishes a row in this order (``_publish``):
        fields and observation, its env's ``results`` count, ``env_id``
        (release), the slot's ``done_count``, the env's ``ack_seq``. So the
        rows not yet taken tell what a dead worker finished: a row whose
        ``env_id`` is set is complete (its ``done_count`` bump may be lost:
        every slot not yet taken is recounted from its complete rows); a
        reserved row whose ``env_id`` is still -1 is a hole (asynchronous
        pools), filled by the replacement with the result of one of the dead
        worker's unanswered commands. A complete row of a dead worker's env
        whose ``ack_seq`` was lost answers that env's command.

        Args:
            workers: indices of the dead workers.

        Returns:
            dict: ``{env: position}`` for each env of those workers with a
            command in flight, which its replacement answers first: position
            >= 0 is the reserved row to write (an asynchronous pool's hole),
            -1 the usual position.

        Raises:
            RuntimeError: the ring holds holes that no dead env can explain
                (a bug, or a segment written by something else).
        """
        self._check()
        cdef shmatari_header *h = self.hdr
        cdef uint64_t B = h.batch_size, N = h.num_envs
        cdef uint64_t consumed = h.consumed_batches, p, begin, end
        cdef bint ordered = B == N
        cdef int32_t env
        cdef shmatari_env_ctrl *ec
        dead = np.zeros(N, np.bool_)
        for w in workers:
            b, e = self.worker_group(w)
            dead[b:e] = True
        begin = consumed * B
        end = begin + N if ordered else shmatari_load_acquire64(&h.alloc_pos)
        holes, answered, complete = [], set(), {}
        for p in range(begin, end):
            env = <int32_t>shmatari_load_acquire(<uint32_t *>shmatari_row_env_id(h, p))
            if env < 0:
                holes.append(p)
                continue
            complete[p // B] = complete.get(p // B, 0) + 1
            if 0 <= env < <int32_t>N and dead[env]:
                answered.add(env)
        plan = {}
        for e in np.flatnonzero(dead).tolist():
            ec = shmatari_env(h, e)
            if shmatari_load_acquire(&ec.req_seq) == ec.ack_seq:
                continue
            if e in answered:
                if ordered:
                    shmatari_store_release64(&ec.results, consumed + 1)
                shmatari_store_release(&ec.ack_seq, ec.req_seq)
            elif ordered:
                # Result r of env e has position r * num_envs + e: the
                # replacement rewrites this round's row.
                shmatari_store_release64(&ec.results, consumed)
                plan[e] = -1
            else:
                plan[e] = holes.pop(0) if holes else -1
        if holes and not ordered:
            raise RuntimeError(f"result positions {holes} were reserved but never "
                               f"written, and no dead worker's env had a command in flight")
        for p in range(consumed, (end + B - 1) // B):
            shmatari_store_release(
                &(<shmatari_slot_header *>shmatari_slot(h, p)).done_count, complete.get(p, 0))
        return plan

    def reset_worker(self, uint32_t worker):
        """Readies a dead worker's record for its replacement: state
        STARTING, no pid, no error text (and one failed worker fewer if it
        had failed)."""
        self._check()
        cdef shmatari_worker_ctrl *wc = shmatari_worker(self.hdr, worker)
        if shmatari_load_acquire(&wc.state) == SHMATARI_WORKER_FAILED:
            shmatari_fetch_add(&self.hdr.failed_workers, <uint32_t>0xFFFFFFFF)
        wc.pid = 0
        wc.sleeping = 0
        shmatari_error_text(self.hdr, worker)[0] = 0
        shmatari_store_release(&wc.state, SHMATARI_WORKER_STARTING)

    def copy_batch(self, uint64_t batch, uint8_t[::1] fields_out, uint8_t[::1] obs_out,
                   bint final=False):
        """Copies batch ``batch``'s result fields (the slot's bytes from the
        first field array up to the observations, as laid out in the slot)
        and, unless ``obs_out`` is None, its observations into caller-owned
        buffers, with one memcpy each; with ``final``, its final records
        (same-step pools) instead."""
        self._check()
        cdef shmatari_header *h = self.hdr
        cdef char *slot = shmatari_slot(h, batch)
        if final:
            if h.slot_final_offset == 0:
                raise ValueError("this pool has no final records (not same_step)")
            slot += h.slot_final_offset
        cdef size_t nf = h.slot_obs_offset - h.slot_field_offset[0]
        cdef size_t no = h.obs_env_bytes * h.batch_size
        if <size_t>fields_out.shape[0] != nf or (
                obs_out is not None and <size_t>obs_out.shape[0] != no):
            raise ValueError(f"copy_batch needs {nf} and {no} bytes")
        with nogil:
            memcpy(&fields_out[0], slot + h.slot_field_offset[0], nf)
        if obs_out is not None:
            with nogil:
                memcpy(&obs_out[0], slot + h.slot_obs_offset, no)

    def collect(self, uint64_t batch, obs_out, bint final=False):
        """Copies batch ``batch`` (as ``copy_batch``) into a new private buffer
        and returns NumPy views of it, built here with NumPy's C API: the
        client's hot path, where a dozen Python-level views cost more than the
        round trip itself.

        Args:
            batch: the batch index (a count of batches taken).
            obs_out: uint8 buffer for the observations, or None.
            final: read the same-step final records instead.

        Returns:
            (views, bits): ``views`` holds one array of shape (batch_size,)
            per field of ``FIELDS``, in order (the 0/1 fields as bool), then
            two bool arrays: the rows' ``FLAG_RESET`` and ``FLAG_RESTARTED``
            bits. ``bits``: 1 if a row has ``episode_done``, 2 if a row has
            ``FLAG_FINAL``.
        """
        self._check()
        cdef shmatari_header *h = self.hdr
        cdef Py_ssize_t B = h.batch_size
        cdef size_t nf = h.slot_obs_offset - h.slot_field_offset[0]
        raw = np.empty(nf + 2 * B, np.uint8)
        cdef uint8_t[::1] mraw = raw
        self.copy_batch(batch, mraw[:nf], obs_out, final)
        cdef uint8_t *base = &mraw[0]
        cdef const uint32_t *flags = <const uint32_t *>(
            base + h.slot_field_offset[<int>SHMATARI_FIELD_FLAGS] - h.slot_field_offset[0])
        cdef const uint8_t *done = <const uint8_t *>(
            base + h.slot_field_offset[<int>SHMATARI_FIELD_EPISODE_DONE] - h.slot_field_offset[0])
        cdef uint8_t *reset_bits = base + nf
        cdef uint8_t *restart_bits = base + nf + B
        cdef int bits = 0
        cdef Py_ssize_t i
        for i in range(B):
            reset_bits[i] = (flags[i] & SHMATARI_FLAG_RESET) != 0
            restart_bits[i] = (flags[i] & SHMATARI_FLAG_RESTARTED) != 0
            if done[i]:
                bits |= 1
            if flags[i] & SHMATARI_FLAG_FINAL:
                bits |= 2
            if reset_bits[i]:
                bits |= 4
        cdef list views = []
        cdef int f
        for f in range(<int>SHMATARI_FIELD_COUNT):
            views.append(_view(raw, <char *>base + h.slot_field_offset[f] - h.slot_field_offset[0],
                               B, _PRESENTED[f]))
        views.append(_view(raw, <char *>reset_bits, B, _BOOL))
        views.append(_view(raw, <char *>restart_bits, B, _BOOL))
        return tuple(views), bits

    # -- views ---------------------------------------------------------------
    def slot_offset(self, uint64_t slot):
        """Byte offset of slot ``slot`` (mod ring_depth) in the segment."""
        self._check()
        return <uint64_t>(shmatari_slot(self.hdr, slot) - self.base)


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


# --------------------------------------------------------------------------
# The per-env Atari step

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
    """

    cdef shmatari_resize_plan plan
    cdef uint8_t lut[768]
    cdef uint8_t known[256]
    cdef readonly int channels, screen_h, screen_w
    cdef object convert_buf  # ndarray for ALE's conversion of the screen
    cdef uint8_t *convert_ptr
    cdef readonly uint64_t learned  # times ALE's conversion was called

    def __cinit__(self, screen_shape, obs_shape, bint grayscale=True):
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


cdef struct _Result:
    # One published result, as the slot's per-field arrays hold it.
    float reward
    float raw_reward
    uint8_t terminated
    uint8_t truncated
    uint8_t game_over
    uint8_t episode_done
    int32_t lives
    int32_t elapsed_step
    int64_t episode_frames
    int64_t frame_number
    double episode_return
    uint32_t flags


cdef tuple _result_tuple(const _Result *r):
    return (r.reward, bool(r.terminated), bool(r.truncated), r.lives, r.raw_reward,
            bool(r.game_over), r.elapsed_step, r.episode_frames, r.frame_number,
            r.episode_return, bool(r.episode_done), r.flags)


#: Names of the values ``EnvCore.result()`` returns, in order: the slot's
#: fields after ``env_id``.
RESULT_FIELDS = tuple(name for name, _ in FIELDS[1:])


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
    # episode state
    cdef bint needs_reset
    cdef readonly int32_t lives
    cdef readonly int32_t elapsed_step
    cdef readonly int64_t episode_frames, frame_number
    cdef readonly double episode_return
    # last result
    cdef readonly float reward, raw_reward
    cdef readonly bint terminated, truncated, game_over, episode_done
    cdef readonly uint32_t flags
    # same_step: the done step's result and observation (valid with FLAG_FINAL)
    cdef _Result final
    cdef uint8_t *final_obs

    def __cinit__(self, *args, **kwargs):
        self.hist = NULL
        self.final_obs = NULL

    def __dealloc__(self):
        free(self.hist)
        free(self.final_obs)

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
        self.head = 0
        self.needs_reset = True
        self.frame_number = 0
        self._clear_episode()
        self._clear_result()
        return 0

    cdef inline void _clear_episode(self):
        self.elapsed_step = 0
        self.episode_frames = 0
        self.episode_return = 0.0

    cdef inline void _clear_result(self):
        self.reward = 0.0
        self.raw_reward = 0.0
        self.terminated = False
        self.truncated = False
        self.game_over = False
        self.episode_done = False
        self.flags = 0

    cdef inline void snapshot(self, _Result *r) noexcept nogil:
        """The current result, as published."""
        r.reward = self.reward
        r.raw_reward = self.raw_reward
        r.terminated = self.terminated
        r.truncated = self.truncated
        r.game_over = self.game_over
        r.episode_done = self.episode_done
        r.lives = self.lives
        r.elapsed_step = self.elapsed_step
        r.episode_frames = self.episode_frames
        r.frame_number = self.frame_number
        r.episode_return = self.episode_return
        r.flags = self.flags

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
        self.snapshot(&self.final)
        self.write_obs(self.final_obs)
        self.reset()
        self.reward = self.final.reward
        self.terminated = self.final.terminated
        self.truncated = self.final.truncated
        self.flags |= SHMATARI_FLAG_FINAL
        return 0

    cpdef int reset(self) except -1:
        """Starts the next episode and writes its first observation."""
        raise NotImplementedError

    cpdef int step(self, int action) except -1:
        """One agent step with action index ``action``."""
        raise NotImplementedError

    cpdef int observe(self) except -1:
        """``CMD_OBSERVE``: the current observation again, nothing emulated;
        reward 0, every flag false, ``FLAG_OBSERVED``."""
        self._clear_result()
        self.flags = SHMATARI_FLAG_OBSERVED
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
        self.reset()
        self._clear_result()
        self.truncated = True
        self.flags = SHMATARI_FLAG_RESTARTED
        self.needs_reset = True
        if self.same_step:
            self._same_step_reset()
            self.flags |= SHMATARI_FLAG_RESTARTED
        return 0

    cdef void write_obs(self, uint8_t *out) noexcept nogil:
        cdef int s, src
        for s in range(self.stack_num):
            src = (self.head + 1 + s) % self.stack_num
            memcpy(out + s * self.frame_bytes, self.hist + src * self.frame_bytes,
                   self.frame_bytes)

    def obs_into(self, out):
        """Copies the stacked observation, oldest frame first, into ``out``
        (uint8, C-contiguous, stack_num * frame bytes)."""
        cdef uint8_t[::1] o = out.reshape(-1)
        if o.shape[0] != self.frame_bytes * self.stack_num:
            raise ValueError("out has the wrong size")
        self.write_obs(&o[0])

    def final_obs_into(self, out):
        """Copies the observation of the done step that the last result
        followed (same_step, ``flags & FLAG_FINAL``) into ``out``, as
        ``obs_into``."""
        cdef uint8_t[::1] o = out.reshape(-1)
        if not self.same_step:
            raise ValueError("final observations exist only with same_step")
        if o.shape[0] != self.frame_bytes * self.stack_num:
            raise ValueError("out has the wrong size")
        memcpy(&o[0], self.final_obs, self.frame_bytes * self.stack_num)

    def action_ids(self):
        """ALE action id of each action index (a new list)."""
        return list(self._action_ids)

    def result(self):
        """The last result as a tuple, in the order of ``RESULT_FIELDS``:
        (reward, terminated, truncated, lives, raw_reward, game_over,
        elapsed_step, episode_frames, frame_number, episode_return,
        episode_done, flags)."""
        cdef _Result r
        self.snapshot(&r)
        return _result_tuple(&r)

    def final_result(self):
        """The result of the done step that the last result followed
        (same_step, ``flags & FLAG_FINAL``), as ``result()``; None otherwise."""
        if not self.flags & SHMATARI_FLAG_FINAL:
            return None
        return _result_tuple(&self.final)


cdef class NullCore(EnvCore):
    """A built-in env that emulates nothing: each step only writes one frame
    (every byte the step count, mod 256) and never ends. With it a pool's
    throughput is the pure cost of shmatari's round trip.

    Args:
        frame_shape: (img_height, img_width[, 3]).
        stack_num: frames per observation.
        num_actions: size of its action space.
    """

    def __init__(self, frame_shape, *, int stack_num=4, int num_actions=4):
        cdef Py_ssize_t n = 1
        for d in frame_shape:
            n *= d
        self._init_core(list(range(num_actions)), n, stack_num)

    cpdef int reset(self) except -1:
        self._clear_result()
        self._clear_episode()
        memset(self._next_frame(), 0, self.frame_bytes)
        self._fill_stack()
        self.needs_reset = False
        self.flags = SHMATARI_FLAG_RESET
        return 0

    cpdef int step(self, int action) except -1:
        self._clear_result()
        self.elapsed_step += 1
        self.episode_frames += 1
        self.frame_number += 1
        memset(self._next_frame(), <uint8_t>(self.frame_number & 0xFF), self.frame_bytes)
        return 0


cdef class AtariCore(EnvCore):
    """One Atari env: emulation, preprocessing and episode bookkeeping.

    Used by shmatari's workers, by the pipe baseline and by the benchmark's
    ceiling, so that all three do exactly the same work per step. Each
    behaviour is specified in ``docs/semantics.md``.

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
        same_step: same-step autoreset: a done step resets at once and keeps
            its own result as the final record (``final_result``,
            ``final_obs_into``).
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
    # raw screens: two buffers, `cur` is the newest
    cdef object raw_arrays
    cdef uint8_t *raw[2]
    cdef int cur
    cdef bint soft_reset   # the last episode ended by a lost life
    cdef bint end_pending  # a life-loss continuation ended the game or hit the cap

    def __init__(self, ale, Palette palette, action_set, rom_path, *, int frame_skip=4,
                 int stack_num=4, bint maxpool=True, int noop_max=30,
                 bint episodic_life=False, bint use_fire_reset=False,
                 bint reward_clip=False, int64_t max_episode_frames=108000,
                 noop_rng=None, bint same_step=False, preprocessor=None):
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
        self.soft_reset = False
        self.end_pending = False
        self.preprocessor = preprocessor
        if preprocessor is not None:
            frame_shape = (palette.plan.dst_h, palette.plan.dst_w) + \
                ((3,) if palette.channels == 3 else ())
            self.hist_frames = np.asarray(
                <uint8_t[:self.stack_num * self.frame_bytes]>self.hist
            ).reshape((self.stack_num,) + frame_shape)

    cdef inline int _capture(self) except -1:
        """Copies the current screen into the next raw buffer (newest)."""
        cdef int nxt = 1 - self.cur
        if self.preprocessor is not None:
            self.preprocessor.capture(self.ale)
            return 0
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
                       self.palette.plan.dst_w * self.palette.channels)
        return 0

    cdef int _frame(self, int ale_action) except? -1:
        """Emulates one frame, counting it; returns the raw reward."""
        cdef int r = self._act(ale_action)
        self.frame_number += 1
        self.episode_frames += 1
        return r

    cdef inline bint _capped(self):
        return self.max_episode_frames > 0 and self.episode_frames >= self.max_episode_frames

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
            self.episode_return += self._frame(0)
            if self._ended():
                self._restart_game()
        return 0

    cdef int _restart_game(self) except -1:
        """``reset_game`` and a fresh episode. Some games' reset emulates
        starting frames (8 for Air Raid, 16 for Pac-Man, 134 for Name This
        Game): they count, as in ALE's ``getEpisodeFrameNumber`` and its cap."""
        self._reset_game()
        self._clear_episode()
        self.episode_frames = self._episode_frame_number()
        return 0

    cdef int _press_fire(self) except -1:
        """One step (frame_skip frames) of FIRE; 0 if it ended the game or
        reached the cap, 1 otherwise."""
        cdef int i
        for i in range(self.frame_skip):
            self.episode_return += self._frame(self._action_ids[1])
            if self._ended():
                return 0
        return 1

    cdef int _start_episode_obs(self, bint end_pending) except -1:
        self._capture()
        self._emit(False)
        self._fill_stack()
        self.lives = self._lives()
        self.needs_reset = False
        self.soft_reset = False
        self.end_pending = end_pending
        self.flags = SHMATARI_FLAG_RESET
        return 0

    cdef int _continue_game(self) except -1:
        """After a life lost with episodic_life: one no-op step (as SB3's
        EpisodicLifeEnv) and FIRE when enabled, then a fresh frame stack,
        without resetting the game. If those frames end the game or reach the
        cap, they stop there and the next step reports it."""
        cdef int i
        cdef bint ended = False
        cdef double before = self.episode_return
        self._clear_result()
        for i in range(self.frame_skip):
            self.episode_return += self._frame(0)
            if self._ended():
                ended = True
                break
        if not ended and self.use_fire_reset and self.fire_ok:
            ended = not self._press_fire()
        self.raw_reward = <float>(self.episode_return - before)
        return self._start_episode_obs(ended)

    def reseed(self, int ale_seed, noop_rng):
        """Re-seeds ALE (reloading the ROM, as ale-py's ``reset(seed=...)``
        does) and replaces the no-op generator."""
        self.ale.setInt("random_seed", ale_seed)
        self.ale.loadROM(self.rom_path)
        self.noop_rng = noop_rng
        self.needs_reset = True
        self.soft_reset = False

    cpdef int reset(self) except -1:
        """Starts the next episode and writes its first observation.

        After an episode ended by a lost life (episodic_life) this continues
        the game (``_continue_game``, as SB3's EpisodicLifeEnv). Otherwise a
        new game: ``reset_game``, 1..noop_max no-op frames, one step of FIRE
        when enabled (if it ends the game: ``reset_game`` and no-ops again,
        without FIRE, as SB3's FireResetEnv), then the stack filled with the
        newest frame. The result has reward 0, ``raw_reward`` the score of
        those frames and ``FLAG_RESET``."""
        if self.needs_reset and self.soft_reset:
            return self._continue_game()
        self._clear_result()
        self._new_game()
        if self.use_fire_reset and self.fire_ok and not self._press_fire():
            self._new_game()
        self.raw_reward = <float>self.episode_return
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
        if self.needs_reset:
            return self.reset()
        self._clear_result()
        ale_action = self._action_ids[action]
        if self.end_pending:
            # The continuation after a lost life ended the game or reached the
            # cap: report it now, emulating nothing.
            over = self._game_over(with_truncation=False)
            capped = self._capped()
            self.end_pending = False
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
                life_lost = 0 < lives < self.lives
                self.lives = lives
            capped = self._capped()
        self._emit(self.maxpool and emulated >= 2)
        if not self.episodic_life:
            self.lives = self._lives()
        self.elapsed_step += 1
        self.raw_reward = <float>raw
        self.episode_return += raw
        if self.reward_clip:
            self.reward = <float>((raw > 0) - (raw < 0))
        else:
            self.reward = <float>raw
        self.game_over = over
        self.terminated = over or life_lost
        self.truncated = capped
        self.episode_done = over or capped
        if self.terminated or self.truncated:
            self.needs_reset = True
            self.soft_reset = not self.episode_done
            if self.same_step:
                self._same_step_reset()
        return 0


# --------------------------------------------------------------------------
# The worker loop

cdef inline void _write_fields(const shmatari_header *h, char *slot, uint32_t idx,
                               const _Result *r) noexcept nogil:
    """Every field of row ``idx`` but ``env_id``, which commits the row."""
    (<float *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_REWARD]))[idx] = r.reward
    (<uint8_t *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_TERMINATED]))[idx] = r.terminated
    (<uint8_t *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_TRUNCATED]))[idx] = r.truncated
    (<int32_t *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_LIVES]))[idx] = r.lives
    (<float *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_RAW_REWARD]))[idx] = r.raw_reward
    (<uint8_t *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_GAME_OVER]))[idx] = r.game_over
    (<int32_t *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_ELAPSED_STEP]))[idx] = r.elapsed_step
    (<int64_t *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_EPISODE_FRAMES]))[idx] = r.episode_frames
    (<int64_t *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_FRAME_NUMBER]))[idx] = r.frame_number
    (<double *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_EPISODE_RETURN]))[idx] = r.episode_return
    (<uint8_t *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_EPISODE_DONE]))[idx] = r.episode_done
    (<uint32_t *>(slot + h.slot_field_offset[<int>SHMATARI_FIELD_FLAGS]))[idx] = r.flags


cdef inline void _publish(shmatari_header *h, uint32_t env, EnvCore core,
                          bint ordered, int64_t reserved) noexcept nogil:
    """Writes env ``env``'s result at its next position (``reserved`` >= 0:
    at that position, taken by a worker that died; see Segment.recover).

    The order is part of the contract that lets a dead worker be replaced:
    row, ``results``, ``env_id`` (release: the row is complete),
    ``done_count``; the caller then stores ``ack_seq``."""
    cdef shmatari_env_ctrl *ec = shmatari_env(h, env)
    cdef uint64_t pos, batch
    cdef uint32_t idx
    cdef char *slot
    cdef char *final
    cdef _Result r
    if reserved >= 0:
        pos = <uint64_t>reserved
    elif ordered:
        pos = ec.results * h.num_envs + env
    else:
        pos = shmatari_fetch_add64(&h.alloc_pos, 1)
    batch = pos / h.batch_size
    idx = <uint32_t>(pos % h.batch_size)
    slot = shmatari_slot(h, batch)
    core.snapshot(&r)
    _write_fields(h, slot, idx, &r)
    core.write_obs(<uint8_t *>(slot + h.slot_obs_offset + idx * h.obs_env_bytes))
    if (r.flags & SHMATARI_FLAG_FINAL) and h.slot_final_offset != 0:
        final = slot + h.slot_final_offset
        _write_fields(h, final, idx, &core.final)
        (<int32_t *>(final + h.slot_field_offset[<int>SHMATARI_FIELD_ENV_ID]))[idx] = env
        memcpy(final + h.slot_obs_offset + idx * h.obs_env_bytes, core.final_obs,
               h.obs_env_bytes)
    shmatari_store_release64(&ec.results, ec.results + 1)
    shmatari_store_release(<uint32_t *>shmatari_row_env_id(h, pos), env)
    if shmatari_fetch_add(&(<shmatari_slot_header *>slot).done_count, 1) + 1 == h.batch_size:
        shmatari_notify(&h.main_seq, &h.main_sleeping)


cdef int _serve(shmatari_env_ctrl *ec, uint32_t e, EnvCore core, Segment seg, reseed,
                bint restarted) except -1:
    """Runs env ``e``'s command (``restarted``: its first since its worker
    was replaced, which a STEP or OBSERVE answers with the restart's
    result, ignoring the action: a command that killed the previous worker
    does not kill its replacement)."""
    cdef uint32_t cmd = ec.cmd
    cdef int32_t action = ec.action
    cdef bint reset = cmd == SHMATARI_CMD_RESET or cmd == SHMATARI_CMD_RESEED
    if restarted and not reset:
        core.restart_result()
        return 0
    if cmd == SHMATARI_CMD_STEP:
        if action < 0 or action >= core.num_actions:
            raise ValueError(f"env {e} was sent action {action}; its action space is "
                             f"0..{core.num_actions - 1} (did a client write the segment "
                             f"without checking its actions?)")
    elif cmd != SHMATARI_CMD_OBSERVE and not reset:
        raise ValueError(f"env {e} was sent command {cmd}, which layout.h does not define")
    if cmd == SHMATARI_CMD_STEP:
        core.step(action)
    elif cmd == SHMATARI_CMD_OBSERVE:
        core.observe()
    elif cmd == SHMATARI_CMD_RESEED:
        reseed(core, e, seg.seed_words())
        core.reset()
    else:
        core.reset()
    if restarted:
        core.flags |= SHMATARI_FLAG_RESTARTED
    return 0


def worker_loop(Segment seg, uint32_t worker, list cores, reseed, parent_alive,
                int64_t spin_ns=0, int spin_mode=SHMATARI_SPIN_PAUSE, double poll=0.2,
                bint restarted=False, dict positions=None):
    """Runs a worker until the pool closes or its parent dies.

    Args:
        seg: the mapped segment.
        worker: this worker's index.
        cores: one ``EnvCore`` (``AtariCore`` or ``NullCore``) per env of the
            worker's group, in order.
        reseed: ``reseed(core, env_index, seed_words)``, called for
            ``CMD_RESEED`` before the reset.
        parent_alive: ``parent_alive() -> bool``, called after each ``poll``
            seconds of sleep, and every ``poll`` seconds while busy (a
            client may keep a worker busy after its parent died); the loop
            returns when it is False.
        spin_ns: nanoseconds to poll the wake word before sleeping on it.
        spin_mode: ``SPIN_PAUSE`` or ``SPIN_YIELD`` (see ``shmatari/sync.h``).
        poll: seconds between parent checks.
        restarted: this worker replaces one that died: each env's first
            result is ``EnvCore.restart_result()`` (a STEP or OBSERVE), or its
            reset flagged ``FLAG_RESTARTED`` (a RESET or RESEED).
        positions: ``{env: position}`` from ``Segment.recover``: where to
            write each env's first result (-1: the usual position).

    Returns:
        str: ``"closed"`` or ``"orphaned"``.

    Raises:
        ValueError: a command or action outside the layout's (a client that
            wrote the segment unchecked).
    """
    seg._check()
    cdef shmatari_header *h = seg.hdr
    cdef shmatari_worker_ctrl *wc = shmatari_worker(h, worker)
    cdef uint32_t begin = wc.env_begin, end = wc.env_end, e, wake, req
    cdef shmatari_env_ctrl *ec
    cdef EnvCore core
    cdef bint busy, ordered = h.batch_size == h.num_envs
    cdef int r
    cdef int64_t poll_ns = <int64_t>(poll * 1e9)
    cdef int64_t next_check = shmatari_now_ns() + poll_ns, now
    cdef uint32_t *seen = <uint32_t *>malloc((end - begin) * sizeof(uint32_t))
    # per env: -2 once its first result is out, else where to write it
    cdef int64_t *first = <int64_t *>malloc((end - begin) * sizeof(int64_t))
    if seen == NULL or first == NULL:
        free(seen)
        free(first)
        raise MemoryError()
    positions = positions or {}
    try:
        for e in range(begin, end):
            seen[e - begin] = shmatari_load_acquire(&shmatari_env(h, e).ack_seq)
            first[e - begin] = positions.get(e, -1) if restarted else -2
        while True:
            wake = shmatari_load_acquire(&wc.wake_seq)
            if shmatari_load_acquire(&h.pool_state) == SHMATARI_POOL_CLOSING:
                return "closed"
            busy = False
            for e in range(begin, end):
                ec = shmatari_env(h, e)
                req = shmatari_load_acquire(&ec.req_seq)
                if req == seen[e - begin]:
                    continue
                busy = True
                core = <EnvCore>cores[e - begin]
                _serve(ec, e, core, seg, reseed, first[e - begin] != -2)
                with nogil:
                    _publish(h, e, core, ordered, first[e - begin])
                    first[e - begin] = -2
                    seen[e - begin] = req
                    shmatari_store_release(&ec.ack_seq, req)
                    wc.steps += 1
            # Python runs signal handlers (SIGTERM: exit) only here: the loop
            # and the env steps are C calls, and the signal may have woken
            # another thread than this one.
            PyErr_CheckSignals()
            if busy:
                now = shmatari_now_ns()
                if now >= next_check:
                    next_check = now + poll_ns
                    if not parent_alive():
                        return "orphaned"
                continue
            with nogil:
                r = shmatari_wait_change(&wc.wake_seq, wake, &wc.sleeping, spin_ns,
                                         spin_mode, poll_ns)
            if r == SHMATARI_WAIT_TIMEOUT and not parent_alive():
                return "orphaned"
    finally:
        free(seen)
        free(first)


def mark_worker(Segment seg, uint32_t worker, uint32_t state, int32_t pid=0,
                error=None):
    """Publishes a worker's state (and pid, and error text) and wakes the client."""
    seg._check()
    cdef shmatari_header *h = seg.hdr
    cdef shmatari_worker_ctrl *wc = shmatari_worker(h, worker)
    cdef char *text
    cdef bytes data
    if pid:
        wc.pid = pid
    if error is not None:
        data = error.encode("utf-8", "replace")[:SHMATARI_ERROR_BYTES - 1]
        text = shmatari_error_text(h, worker)
        memcpy(text, <char *>data, len(data))
        text[len(data)] = 0
    shmatari_store_release(&wc.state, state)
    if state == SHMATARI_WORKER_READY:
        shmatari_fetch_add(&h.ready_workers, 1)
    elif state == SHMATARI_WORKER_FAILED:
        shmatari_fetch_add(&h.failed_workers, 1)
    shmatari_notify(&h.main_seq, &h.main_sleeping)


def set_num_actions(Segment seg, action_set):
    """Records the action space (ALE action ids) in the header."""
    seg._check()
    cdef unsigned i, n = len(action_set)
    if n > SHMATARI_MAX_ACTIONS:
        raise ValueError(f"{n} actions exceed the layout's {SHMATARI_MAX_ACTIONS}")
    for i in range(n):
        seg.hdr.action_set[i] = int(action_set[i])
    seg.hdr.num_actions = n
