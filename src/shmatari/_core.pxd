"""C declarations of shmatari's compiled core: the csrc headers as Cython sees them.

cimported automatically by ``_core.pyx`` (same name); nothing here is Python-visible.
"""

from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t)
from libc.stddef cimport ptrdiff_t

cimport numpy as cnp
from cpython.object cimport PyObject


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
    const unsigned SHMATARI_RENDER_PALETTE_BYTES
    const unsigned SHMATARI_FLAG_RESET
    const unsigned SHMATARI_FLAG_RESTARTED
    const unsigned SHMATARI_FLAG_FINAL
    const unsigned SHMATARI_FLAG_OBSERVED
    ctypedef uint8_t shmatari_bool8

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
    enum shmatari_obs_layout:
        SHMATARI_OBS_CHANNELS_LAST
        SHMATARI_OBS_CHANNELS_FIRST
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
        uint32_t obs_layout
        uint64_t slot_final_offset
        uint64_t owner_start
        uint64_t render_offset
        uint64_t render_env_bytes
        uint32_t screen_height
        uint32_t screen_width
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

    ctypedef struct shmatari_geom:
        shmatari_header *hdr
        uint64_t total_bytes
        uint32_t num_envs, num_workers, batch_size, ring_depth
        uint32_t stack_num, img_height, img_width, channels, frame_skip
        uint32_t autoreset_mode, obs_layout, screen_height, screen_width
        uint64_t obs_frame_bytes, obs_env_bytes, slot_bytes
        uint64_t env_ctrl_offset, worker_ctrl_offset, errors_offset, slots_offset
        uint64_t slot_obs_offset, slot_final_offset
        uint64_t slot_field_offset[16]
        uint64_t render_offset, render_env_bytes

    const uint64_t SHMATARI_MAX_ENVS
    const uint64_t SHMATARI_MAX_RING_DEPTH
    const uint64_t SHMATARI_MAX_STACK
    const uint64_t SHMATARI_MAX_IMG_SIDE
    const uint64_t SHMATARI_MAX_FRAME_SKIP
    const uint64_t SHMATARI_MAX_SEGMENT_BYTES
    int shmatari_layout_compute(shmatari_header *h)
    int shmatari_layout_compute_msg(shmatari_header *h, char *msg, size_t len)
    uint32_t shmatari_min_ring_depth(uint32_t num_envs, uint32_t batch_size)
    shmatari_env_ctrl *shmatari_env(const shmatari_geom *g, uint32_t env)
    shmatari_worker_ctrl *shmatari_worker(const shmatari_geom *g, uint32_t w)
    char *shmatari_error_text(const shmatari_geom *g, uint32_t worker)
    char *shmatari_slot(const shmatari_geom *g, uint64_t slot)
    uint8_t *shmatari_render_area(const shmatari_geom *g, uint32_t env)
    int32_t *shmatari_row_env_id(const shmatari_geom *g, uint64_t pos)
    void shmatari_clear_rows(const shmatari_geom *g, uint64_t slot)


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
        SHMATARI_ERR_UNTRUSTED
    const int SHMATARI_NAME_MAX
    const char *SHMATARI_NAME_PREFIX
    int shmatari_pid_alive(int32_t pid)
    uint64_t shmatari_process_start(int32_t pid)
    int shmatari_process_alive(int32_t pid, uint64_t start)
    int shmatari_owner_alive(const shmatari_header *h)
    int shmatari_check_header(const void *base, uint64_t size, char *msg, size_t len)
    int shmatari_geom_load(void *base, uint64_t size, shmatari_geom *g, char *msg,
                           size_t len)
    int shmatari_env_workers(const shmatari_geom *g, uint32_t *env_worker,
                             char *msg, size_t len)
    int shmatari_pool_check(const shmatari_geom *g, int check_pids, char *msg,
                            size_t len)
    int shmatari_open_pool(const shmatari_geom *g, int32_t pid,
                           int64_t timeout_ns, int32_t *holder, char *msg, size_t len)
    void shmatari_unclaim(shmatari_header *h, int32_t pid)
    void shmatari_post(const shmatari_geom *g, const uint32_t *env_worker,
                       uint8_t *touched, const uint32_t *env_ids, uint32_t n,
                       const int32_t *actions, uint32_t cmd)
    int shmatari_wait_batch(const shmatari_geom *g, uint64_t batch, int64_t spin_ns,
                            int spin_mode, int64_t timeout_ns, int64_t *next_check_ns,
                            char *msg, size_t len)
    void shmatari_consume_batch(const shmatari_geom *g, uint64_t batch)
    int shmatari_segment_name(const char *name, char *out, size_t out_len,
                              char *msg, size_t len)

    # The client state machine (one per process and pool).
    enum shmatari_client_state:
        SHMATARI_CLIENT_DETACHED
        SHMATARI_CLIENT_NEEDS_RESET
        SHMATARI_CLIENT_IDLE
        SHMATARI_CLIENT_PARTIAL
        SHMATARI_CLIENT_WAITING
        SHMATARI_CLIENT_BROKEN
    const uint8_t SHMATARI_ENV_RUNNING
    const uint8_t SHMATARI_ENV_ENDED
    const char *const *shmatari_call_names_python
    ctypedef struct shmatari_client:
        shmatari_header *hdr
        uint64_t map_bytes
        shmatari_geom geom
        uint32_t num_actions
        int32_t pid
        int64_t spin_ns
        int spin_mode
        int64_t next_check_ns
        int state
        uint64_t taken
        int holding
        uint32_t pending
        uint8_t *env_flags
        const char *const *names
        char error[512]
    const char *shmatari_client_state_name(int state)
    int shmatari_client_open(shmatari_client *c, const shmatari_geom *g)
    void shmatari_client_close(shmatari_client *c)
    void shmatari_client_break(shmatari_client *c)
    int shmatari_send(shmatari_client *c, const int32_t *actions,
                      const int32_t *env_ids, uint32_t n)
    int shmatari_reset_envs(shmatari_client *c, uint32_t cmd, const uint8_t *mask,
                            int64_t timeout_ns)
    int shmatari_check_step(shmatari_client *c, uint32_t n)
    int shmatari_recover_workers(const shmatari_geom *g, const uint8_t *dead_env, int64_t *plan,
                                 char *msg, size_t len)
    int shmatari_next_batch(shmatari_client *c, int64_t timeout_ns)
    void shmatari_release_batch(shmatari_client *c)


cdef extern from "shmatari_kernel.h" nogil:
    const int SHMATARI_KERNEL_OK
    const int SHMATARI_KERNEL_EINVAL
    ctypedef struct shmatari_resize_plan:
        int32_t src_h, src_w, dst_h, dst_w, channels, mode
        int32_t planar
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
