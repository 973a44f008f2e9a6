/*
 * shmatari/layout.h -- the shared-memory layout of a shmatari env pool.
 *
 * This header is the contract. The Python package reads every constant and
 * offset below through its extension module, which is compiled from this
 * file; C and C++ clients include it directly. Nothing here is typed twice.
 *
 * Conventions (MUST / SHOULD / MAY as in RFC 2119):
 *   - All integers are little-endian, fixed width, naturally aligned.
 *   - Offsets are in bytes from the start of the segment (or of a slot where
 *     stated); sizes are in bytes unless a field says "elements".
 *   - Counts of emulator frames say "frames"; counts of agent steps (one
 *     action, frame_skip frames) say "steps".
 *   - Every region starts on a SHMATARI_ALIGN (64-byte) boundary.
 *   - Words named *_seq are counters that only increase (mod 2^32) and are
 *     the words a process sleeps on (futex). They are written with release
 *     and read with acquire ordering (see shmatari/sync.h).
 *
 * Segment:
 *   [header: 1024 bytes]
 *   [env_ctrl:    num_envs    x 64 bytes]   requests from the client
 *   [worker_ctrl: num_workers x 64 bytes]   wake words and worker state
 *   [errors:      num_workers x SHMATARI_ERROR_BYTES]  worker tracebacks
 *   [slots:       ring_depth  x slot_bytes] results, one batch per slot
 *   [render:      num_envs    x render_env_bytes] (1.2, only when
 *                 screen_height is not 0) each env's last screen
 *   [ram:         num_envs    x ram_bytes] (1.3, only when ram_bytes is
 *                 not 0) each env's console RAM at its last result
 *
 * A slot holds one batch of batch_size results:
 *   [slot header: 64 bytes, done_count first]
 *   [one array of batch_size elements per shmatari_field, 64-aligned]
 *   [obs: batch_size x obs_env_bytes, 64-aligned]
 *   [final records (same-step pools only, ABI 1.1): from slot_final_offset,
 *    a copy of the 64-byte-header-plus-fields-plus-obs layout above, whose
 *    first 64 bytes are unused]
 *
 * A row (the result at one index of a slot) is written in this order: its
 * fields but env_id, its observation and final record; the env's `results`
 * (release); the row's env_id (release), which marks the row complete; the
 * slot's done_count; the env's ack_seq. A client that takes a batch SHOULD
 * write -1 into every env_id of the slot before it stores done_count = 0
 * (shmatari_clear_rows; shmatari_consume_batch does), and the creator does
 * so for every slot before its workers start. Then a row not yet taken whose
 * env_id is -1 is one that no live worker has finished, which lets the
 * creator replace a worker that died mid-row (restart_workers in Python;
 * docs/layout.md).
 *
 * Versioning: a client MUST check magic and abi_major and refuse any other
 * major version. A minor version only adds fields in reserved space; a client
 * MAY use a pool of a higher minor version and MUST ignore what it does not
 * know. Reserved words MUST be written as 0 and MUST NOT be read.
 */
#ifndef SHMATARI_LAYOUT_H
#define SHMATARI_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHMATARI_ABI_MAJOR 1u
#define SHMATARI_ABI_MINOR 3u /* 1.1: autoreset_mode, slot_final_offset,
                                  CMD_OBSERVE, FLAG_FINAL, FLAG_OBSERVED;
                                  1.2: obs_layout, the render area,
                                  owner_start; 1.3: the RAM area,
                                  batch_order */
/* "SHMATARI" as 8 ASCII bytes, read as a little-endian uint64. */
#define SHMATARI_MAGIC UINT64_C(0x49524154414D4853)

#define SHMATARI_ALIGN 64u
#define SHMATARI_HEADER_BYTES 1024u
#define SHMATARI_SLOT_HEADER_BYTES 64u
#define SHMATARI_ERROR_BYTES 4096u /* per worker, NUL-terminated UTF-8 */
#define SHMATARI_MAX_ACTIONS 18u   /* ALE's full action set */
#define SHMATARI_MAX_FIELDS 16u
#define SHMATARI_SEED_WORDS 4u
#define SHMATARI_RENDER_PALETTE_BYTES 768u /* (1.2) uint8 [256][3] */
#define SHMATARI_RAM_BYTES 128u /* (1.3) the Atari 2600's RAM, uint8 [128] */

/* Commands a client posts for one env (shmatari_env_ctrl.cmd). */
enum shmatari_cmd {
  SHMATARI_CMD_NONE = 0,
  SHMATARI_CMD_STEP = 1,   /* one agent step with `action` */
  SHMATARI_CMD_RESET = 2,  /* start the env's next episode, keeping its RNG
                              streams (after a life lost under episodic_life
                              the game goes on: docs/semantics.md) */
  SHMATARI_CMD_RESEED = 3, /* re-derive the env's RNG from seed_words, reset */
  SHMATARI_CMD_OBSERVE = 4 /* (1.1) publish the env's current observation
                              again without emulating: reward 0, every flag
                              0, SHMATARI_FLAG_OBSERVED set; how a synchronous
                              client resets only some envs and still gets one
                              result per env */
};

/* How an env goes on after a step that ended its episode
 * (shmatari_header.autoreset_mode, ABI 1.1). The names and meanings are
 * Gymnasium 1.x's AutoresetMode. */
enum shmatari_autoreset_mode {
  SHMATARI_AUTORESET_NEXT_STEP = 0, /* the env's next STEP resets it instead,
                                       ignores its action and publishes the
                                       reset (reward 0, terminated and
                                       truncated 0, SHMATARI_FLAG_RESET) */
  SHMATARI_AUTORESET_SAME_STEP = 1, /* the done step resets at once: its row
                                       holds the reset's obs and fields except
                                       reward, terminated and truncated, which
                                       are the step's; the step's own result
                                       is the row's final record, and
                                       SHMATARI_FLAG_FINAL is set */
  SHMATARI_AUTORESET_DISABLED = 2   /* the client MUST post CMD_RESET to a done
                                       env before stepping it; a worker that
                                       gets a STEP anyway behaves as NEXT_STEP */
};

/* How an observation's RGB channels are laid out (shmatari_header.obs_layout,
 * ABI 1.2). Grayscale observations (channels 1) are the same in both. */
enum shmatari_obs_layout {
  SHMATARI_OBS_CHANNELS_LAST = 0, /* [stack_num][img_height][img_width]
                                     [channels]: interleaved RGB */
  SHMATARI_OBS_CHANNELS_FIRST = 1 /* [stack_num][channels][img_height]
                                     [img_width]: planar RGB, i.e.
                                     [stack_num * channels][img_height]
                                     [img_width] as EnvPool's and SB3's CNNs
                                     take it */
};

/* Which results an asynchronous pool's batch holds
 * (shmatari_header.batch_order, ABI 1.3). A synchronous pool (batch_size ==
 * num_envs) is fixed whatever the word holds: every batch is every env. */
enum shmatari_batch_order {
  SHMATARI_BATCH_FIRST_READY = 0, /* the first batch_size results to finish,
                                     in any order (EnvPool's async contract):
                                     timing decides which envs share a batch */
  SHMATARI_BATCH_FIXED = 1        /* (1.3) num_envs % batch_size == 0, and with
                                     G = num_envs / batch_size groups, batch k
                                     holds exactly the envs e with e % G ==
                                     k % G, in increasing order (env e at
                                     index e / G): groups served round-robin,
                                     whatever the workers' timing. Result r of
                                     env e has position r * num_envs +
                                     shmatari_env_rank(e) */
};

/* Worker states (shmatari_worker_ctrl.state). */
enum shmatari_worker_state {
  SHMATARI_WORKER_STARTING = 0,
  SHMATARI_WORKER_READY = 1,
  SHMATARI_WORKER_FAILED = 2, /* its error text is in the errors region */
  SHMATARI_WORKER_EXITED = 3
};

/* Pool states (shmatari_header.pool_state). */
enum shmatari_pool_state {
  SHMATARI_POOL_STARTING = 0,
  SHMATARI_POOL_RUNNING = 1,
  SHMATARI_POOL_CLOSING = 2 /* workers MUST exit when they see it */
};

/* Element types of the layout, and the NumPy type string of each (every
 * integer and float is little-endian, fixed width). shmatari_bool8 is a byte
 * that holds 0 or 1; Python presents such fields as bool. */
typedef uint8_t shmatari_bool8;
#define SHMATARI_TYPESTR(type) SHMATARI_TYPESTR_##type
#define SHMATARI_TYPESTR_uint8_t "|u1"
#define SHMATARI_TYPESTR_shmatari_bool8 "|u1"
#define SHMATARI_TYPESTR_int32_t "<i4"
#define SHMATARI_TYPESTR_uint32_t "<u4"
#define SHMATARI_TYPESTR_int64_t "<i8"
#define SHMATARI_TYPESTR_uint64_t "<u8"
#define SHMATARI_TYPESTR_float "<f4"
#define SHMATARI_TYPESTR_double "<f8"

/* The per-result fields, in order: each is an array of batch_size elements
 * in every slot (its offset from the slot's start is
 * slot_field_offset[SHMATARI_FIELD_<NAME>]). One line per field:
 *   X(NAME, name, type, unit, meaning)
 * This list is the only place a field is written down: the enum, the
 * SHMATARI_FIELD_* tables, shmatari_layout_compute, struct shmatari_result,
 * the offset tables of Python's extension and the layout test's dump are
 * generated from it (docs/layout.md's table is checked against it). A new
 * field goes at the end (at most SHMATARI_MAX_FIELDS) with a minor ABI
 * version bump. */
#define SHMATARI_RESULT_FIELDS(X)                                             \
  X(ENV_ID, env_id, int32_t, "-", "the env, 0..num_envs-1")                   \
  X(REWARD, reward, float, "score",                                           \
    "step reward (its sign with `reward_clip`)")                              \
  X(TERMINATED, terminated, shmatari_bool8, "-",                              \
    "0/1: the episode ended (game over, or a life lost with "                 \
    "`episodic_life`)")                                                       \
  X(TRUNCATED, truncated, shmatari_bool8, "-",                                \
    "0/1: cut at `max_episode_frames`")                                       \
  X(LIVES, lives, int32_t, "-", "ALE `lives()` after the step")               \
  X(RAW_REWARD, raw_reward, float, "score", "unclipped score change")         \
  X(GAME_OVER, game_over, shmatari_bool8, "-", "0/1: the game itself ended")  \
  X(ELAPSED_STEP, elapsed_step, int32_t, "steps", "since the game's reset")   \
  X(EPISODE_FRAME_NUMBER, episode_frame_number, int64_t, "frames",          \
    "since the game's reset, no-op and FIRE frames included")                 \
  X(FRAME_NUMBER, frame_number, int64_t, "frames", "since the env began")     \
  X(EPISODE_RETURN, episode_return, double, "score",                          \
    "raw score since the reset")                                              \
  X(EPISODE_DONE, episode_done, shmatari_bool8, "-",                          \
    "0/1: this step ended a game (game over or truncation); the "             \
    "`episode_*` fields are its totals")                                      \
  X(FLAGS, flags, uint32_t, "-",                                              \
    "`SHMATARI_FLAG_RESET` (1): the result of a reset; "                      \
    "`SHMATARI_FLAG_RESTARTED` (2): the worker was restarted; "               \
    "`SHMATARI_FLAG_FINAL` (4, 1.1): the row has a final record; "            \
    "`SHMATARI_FLAG_OBSERVED` (8, 1.1): the result of `CMD_OBSERVE`")

#define SHMATARI_X_FIELD_ENUM(NAME, name, type, unit, meaning) \
  SHMATARI_FIELD_##NAME,
enum shmatari_field {
  SHMATARI_RESULT_FIELDS(SHMATARI_X_FIELD_ENUM)
  SHMATARI_FIELD_COUNT
};

#define SHMATARI_FLAG_RESET 1u     /* the result of a reset, not of an action */
#define SHMATARI_FLAG_RESTARTED 2u /* the env's worker was restarted */
#define SHMATARI_FLAG_FINAL 4u     /* (1.1, same-step pools) the row is the
                                      reset that followed a done step; the
                                      row's final record holds that step's
                                      result */
#define SHMATARI_FLAG_OBSERVED 8u  /* (1.1) the result of CMD_OBSERVE */

/* Element size in bytes, NumPy type string and name of each field, in enum
 * order (initializers: `static const char *names[] = SHMATARI_FIELD_NAMES;`). */
#define SHMATARI_X_FIELD_BYTES(NAME, name, type, unit, meaning) sizeof(type),
#define SHMATARI_X_FIELD_TYPE(NAME, name, type, unit, meaning) \
  SHMATARI_TYPESTR(type),
#define SHMATARI_X_FIELD_NAME(NAME, name, type, unit, meaning) #name,
#define SHMATARI_FIELD_BYTES {SHMATARI_RESULT_FIELDS(SHMATARI_X_FIELD_BYTES)}
#define SHMATARI_FIELD_TYPES {SHMATARI_RESULT_FIELDS(SHMATARI_X_FIELD_TYPE)}
#define SHMATARI_FIELD_NAMES {SHMATARI_RESULT_FIELDS(SHMATARI_X_FIELD_NAME)}

/* One result with every field, as a struct. Not how a slot holds it (one
 * array per field): for code that handles one row at a time. */
#define SHMATARI_X_RESULT_MEMBER(NAME, name, type, unit, meaning) type name;
typedef struct shmatari_result {
  SHMATARI_RESULT_FIELDS(SHMATARI_X_RESULT_MEMBER)
} shmatari_result;

/* The structs of the segment, one list each, member by member in order:
 *   X(type, name, dims)   dims: empty, or [count] for an array
 * The structs below are generated from them, and so are the offset tables
 * of Python's extension and the layout test's dump. A member is added by
 * taking words out of a reserved array (a minor ABI version bump). */

/* The header, at offset 0. Written once by the creator before any worker
 * starts, except the words marked otherwise. */
#define SHMATARI_HEADER_MEMBERS(X)                                            \
  X(uint64_t, magic, )        /* 0: SHMATARI_MAGIC; never moves */            \
  X(uint32_t, abi_major, )    /* 8: SHMATARI_ABI_MAJOR; never moves */        \
  X(uint32_t, abi_minor, )    /* 12 */                                        \
  X(uint64_t, header_bytes, ) /* 16: SHMATARI_HEADER_BYTES */                 \
  X(uint64_t, total_bytes, )  /* 24: bytes of the whole segment */            \
                                                                              \
  X(uint32_t, num_envs, )     /* 32: elements */                              \
  X(uint32_t, num_workers, )  /* 36 */                                        \
  X(uint32_t, batch_size, )   /* 40: results per slot; == num_envs:           \
                                 synchronous */                               \
  X(uint32_t, ring_depth, )   /* 44: slots in the ring, >= 2 */               \
  X(uint32_t, stack_num, )    /* 48: frames per observation */                \
  X(uint32_t, img_height, )   /* 52: pixels */                                \
  X(uint32_t, img_width, )    /* 56: pixels */                                \
  X(uint32_t, channels, )     /* 60: 1 (grayscale) or 3 (RGB, obs_layout) */ \
  X(uint32_t, frame_skip, )   /* 64: frames per step */                       \
  X(uint32_t, num_actions, )  /* 68: size of the action space; written by     \
                                 the workers before they report ready */      \
                                                                              \
  X(uint64_t, obs_frame_bytes, )    /* 72: img_height * img_width * channels  \
                                     */                                       \
  X(uint64_t, obs_env_bytes, )      /* 80: stack_num * obs_frame_bytes */     \
  X(uint64_t, slot_bytes, )         /* 88: stride between slots */            \
  X(uint64_t, env_ctrl_offset, )    /* 96 */                                  \
  X(uint64_t, worker_ctrl_offset, ) /* 104 */                                 \
  X(uint64_t, errors_offset, )      /* 112 */                                 \
  X(uint64_t, slots_offset, )       /* 120 */                                 \
  X(uint64_t, slot_obs_offset, )    /* 128: from the slot's start; obs of     \
                                       result j at slot_obs_offset + j *      \
                                       obs_env_bytes, laid out as obs_layout  \
                                       says (default [stack_num][img_height]  \
                                       [img_width][channels]), oldest frame   \
                                       first */                               \
  X(uint64_t, slot_field_offset, [SHMATARI_MAX_FIELDS]) /* 136: from the      \
                                slot's start, by enum shmatari_field; unused  \
                                0 */                                          \
  X(int32_t, action_set, [SHMATARI_MAX_ACTIONS]) /* 264: ALE action id of     \
                                each action index; written by the workers */  \
  X(int32_t, owner_pid, )    /* 336: the creator's process id */              \
  X(int32_t, client_pid, )   /* 340: the attached client's, 0 when none;      \
                                claimed and released only by                  \
                                compare-and-swap (shmatari_claim in           \
                                shmatari/shmatari.h) */                       \
  X(uint32_t, pool_state, )  /* 344: enum shmatari_pool_state; written by     \
                                the creator at any time (release) */          \
  X(uint32_t, field_count, ) /* 348: SHMATARI_FIELD_COUNT */                  \
  X(uint64_t, seed_words, [SHMATARI_SEED_WORDS]) /* 352: the pool seed, least \
                                significant word first, below 2**128 (words   \
                                2 and 3 zero);                                \
                                rewritten by the client before posting        \
                                SHMATARI_CMD_RESEED */                        \
  X(uint32_t, autoreset_mode, ) /* 384: (1.1) enum                            \
                                shmatari_autoreset_mode; written by the       \
                                creator; an input of shmatari_layout_compute  \
                                */                                            \
  X(uint32_t, obs_layout, ) /* 388: (1.2) enum shmatari_obs_layout; written  \
                                by the creator; an input of                   \
                                shmatari_layout_compute. A pool of ABI 1.1    \
                                has 0 here: channels last */                  \
  X(uint64_t, slot_final_offset, ) /* 392: (1.1) from the slot's start; 0     \
                                unless autoreset_mode is SAME_STEP. The final \
                                record of result j has field f at             \
                                slot_final_offset + slot_field_offset[f]      \
                                (element j) and its obs at slot_final_offset  \
                                + slot_obs_offset + j * obs_env_bytes.        \
                                Written by the worker before it bumps         \
                                done_count, and valid only in rows whose      \
                                flags hold SHMATARI_FLAG_FINAL */             \
  X(uint64_t, owner_start, ) /* 400: (1.2) when the creator's process         \
                                started, in clock ticks since boot (Linux:    \
                                field 22 of /proc/<owner_pid>/stat); 0 if     \
                                unknown. With owner_pid it names the owner:   \
                                shmatari_owner_alive */                       \
  X(uint64_t, ram_offset, ) /* 408: (1.3) from the segment's start: the RAM  \
                                area, num_envs x ram_bytes; 0 when ram_bytes  \
                                is 0 */                                       \
  X(uint32_t, ram_bytes, ) /* 416: (1.3) bytes of console RAM per env in the  \
                                RAM area, and its stride: 0 (no RAM area) or  \
                                SHMATARI_RAM_BYTES. An input of               \
                                shmatari_layout_compute */                    \
  X(uint32_t, batch_order, ) /* 420: (1.3) enum shmatari_batch_order;        \
                                written by the creator; an input of           \
                                shmatari_layout_compute. A pool of ABI 1.2    \
                                has 0 here: first ready */                    \
  X(uint32_t, reserved0, [16]) /* 424..487 */                                 \
  X(uint64_t, render_offset, ) /* 488: (1.2) from the segment's start: the    \
                                render area, num_envs x render_env_bytes; 0   \
                                when the pool does not render (screen_height  \
                                0) */                                         \
  X(uint64_t, render_env_bytes, ) /* 496: (1.2) stride of the render area:    \
                                env i's part at render_offset + i *           \
                                render_env_bytes holds its RGB palette, uint8 \
                                [256][3], then its last screen as ALE palette \
                                indices, uint8 [screen_height][screen_width]; \
                                a multiple of 64 */                           \
  X(uint32_t, screen_height, ) /* 504: (1.2) pixels of the game's screen in   \
                                the render area; 0: no render area. An input  \
                                of shmatari_layout_compute */                 \
  X(uint32_t, screen_width, ) /* 508: (1.2) pixels; 0 with screen_height */   \
                                                                              \
  /* 512: one cache line of words the workers write and the client sleeps    \
     on */                                                                    \
  X(uint32_t, main_seq, )      /* 512: bumped by a worker when a slot fills,  \
                                  a worker becomes ready, or a worker fails   \
                                  */                                          \
  X(uint32_t, main_sleeping, ) /* 516: 1 while a process may sleep on         \
                                  main_seq (the client; the creator while     \
                                  workers start) */                           \
  X(uint32_t, ready_workers, ) /* 520: workers that reached READY */          \
  X(uint32_t, failed_workers, ) /* 524: workers that reached FAILED */        \
  X(uint32_t, reserved1, [12]) /* 528..575 */                                 \
                                                                              \
  /* 576: the result position counter (asynchronous pools) */                 \
  X(uint64_t, alloc_pos, )     /* 576: next result position; a worker takes   \
                                  one with a fetch-add. Result position p     \
                                  lives in slot (p / batch_size) % ring_depth \
                                  at index p % batch_size. A client attaching \
                                  rounds it up to a batch boundary while no   \
                                  command is in flight (shmatari_recover). */ \
  X(uint64_t, reserved2, [7])  /* 584..639 */                                 \
                                                                              \
  /* 640: client-owned state, kept here so that a new client can attach */    \
  X(uint64_t, consumed_batches, ) /* 640: batches the client has taken        \
                                     (release) */                             \
  X(uint64_t, reserved3, [47])    /* 648..1023 */

/* One per env, written by the client (except ack_seq and results). */
#define SHMATARI_ENV_CTRL_MEMBERS(X)                                          \
  X(uint32_t, req_seq, ) /* 0: client bumps it (release) after cmd and        \
                            action */                                         \
  X(uint32_t, cmd, )     /* 4: enum shmatari_cmd */                           \
  X(int32_t, action, )   /* 8: action index, 0..num_actions-1 */              \
  X(uint32_t, ack_seq, ) /* 12: worker: req_seq of the last result it         \
                            published */                                      \
  X(uint64_t, results, ) /* 16: worker: results this env has published; in a  \
                            synchronous pool result r of env i has position   \
                            r * num_envs + i. A client attaching aligns every \
                            env's count while no command is in flight         \
                            (shmatari_recover). */                            \
  X(uint64_t, reserved, [5]) /* 24..63 */

/* One per worker. */
#define SHMATARI_WORKER_CTRL_MEMBERS(X)                                       \
  X(uint32_t, wake_seq, )  /* 0: client bumps it after posting requests for   \
                              the worker's envs, or to make it see            \
                              pool_state */                                   \
  X(uint32_t, sleeping, )  /* 4: worker: 1 while it may sleep on wake_seq */  \
  X(int32_t, pid, )        /* 8: worker: its process id */                    \
  X(uint32_t, state, )     /* 12: worker: enum shmatari_worker_state          \
                              (release) */                                    \
  X(uint32_t, env_begin, ) /* 16: creator: first env of the worker's group */ \
  X(uint32_t, env_end, )   /* 20: creator: one past its last env */           \
  X(uint64_t, steps, )     /* 24: worker: results published */                \
  X(uint64_t, reserved, [4]) /* 32..63 */

/* The first 64 bytes of every slot. */
#define SHMATARI_SLOT_HEADER_MEMBERS(X)                                       \
  X(uint32_t, done_count, ) /* 0: results written to the slot; a worker bumps \
                               it (release) after writing a result; the       \
                               client reads it (acquire) and writes 0 once it \
                               has taken the batch */                         \
  X(uint32_t, reserved, [15])

#define SHMATARI_X_MEMBER(type, name, dims) type name dims;
typedef struct shmatari_header {
  SHMATARI_HEADER_MEMBERS(SHMATARI_X_MEMBER)
} shmatari_header;
typedef struct shmatari_env_ctrl {
  SHMATARI_ENV_CTRL_MEMBERS(SHMATARI_X_MEMBER)
} shmatari_env_ctrl;
typedef struct shmatari_worker_ctrl {
  SHMATARI_WORKER_CTRL_MEMBERS(SHMATARI_X_MEMBER)
} shmatari_worker_ctrl;
typedef struct shmatari_slot_header {
  SHMATARI_SLOT_HEADER_MEMBERS(SHMATARI_X_MEMBER)
} shmatari_slot_header;

#if defined(__cplusplus)
#define SHMATARI_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define SHMATARI_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
/* The members tile each struct: no padding anywhere. */
#define SHMATARI_X_SIZE(type, name, dims) +sizeof(type dims)
SHMATARI_STATIC_ASSERT(0 SHMATARI_HEADER_MEMBERS(SHMATARI_X_SIZE) ==
                           SHMATARI_HEADER_BYTES, "header members");
SHMATARI_STATIC_ASSERT(sizeof(shmatari_header) == SHMATARI_HEADER_BYTES,
                       "header size");
SHMATARI_STATIC_ASSERT(offsetof(shmatari_header, autoreset_mode) == 384,
                       "autoreset_mode");
SHMATARI_STATIC_ASSERT(offsetof(shmatari_header, slot_final_offset) == 392,
                       "slot_final_offset");
SHMATARI_STATIC_ASSERT(offsetof(shmatari_header, render_offset) == 488,
                       "render_offset");
SHMATARI_STATIC_ASSERT(offsetof(shmatari_header, owner_start) == 400,
                       "owner_start");
SHMATARI_STATIC_ASSERT(offsetof(shmatari_header, ram_offset) == 408 &&
                           offsetof(shmatari_header, ram_bytes) == 416,
                       "ram");
SHMATARI_STATIC_ASSERT(SHMATARI_RAM_BYTES % SHMATARI_ALIGN == 0, "ram stride");
SHMATARI_STATIC_ASSERT(offsetof(shmatari_header, batch_order) == 420,
                       "batch_order");
SHMATARI_STATIC_ASSERT(offsetof(shmatari_header, main_seq) == 512, "main_seq");
SHMATARI_STATIC_ASSERT(offsetof(shmatari_header, alloc_pos) == 576, "alloc");
SHMATARI_STATIC_ASSERT(offsetof(shmatari_header, consumed_batches) == 640,
                       "consumed");
SHMATARI_STATIC_ASSERT(0 SHMATARI_ENV_CTRL_MEMBERS(SHMATARI_X_SIZE) == 64 &&
                           sizeof(shmatari_env_ctrl) == 64, "env ctrl");
SHMATARI_STATIC_ASSERT(0 SHMATARI_WORKER_CTRL_MEMBERS(SHMATARI_X_SIZE) == 64 &&
                           sizeof(shmatari_worker_ctrl) == 64, "worker ctrl");
SHMATARI_STATIC_ASSERT(0 SHMATARI_SLOT_HEADER_MEMBERS(SHMATARI_X_SIZE) == 64 &&
                           sizeof(shmatari_slot_header) == 64, "slot header");
SHMATARI_STATIC_ASSERT(SHMATARI_FIELD_COUNT <= SHMATARI_MAX_FIELDS, "fields");
SHMATARI_STATIC_ASSERT(sizeof(float) == 4 && sizeof(double) == 8, "IEEE 754");

/* Documented maxima of the primary parameters (docs/layout.md, "Trust"). A
 * creator MUST NOT lay out, and a client refuses, a pool beyond them; they
 * bound every product below, and shmatari_layout_compute still checks each
 * sum and product for overflow. */
#define SHMATARI_MAX_ENVS 65536u        /* num_envs */
#define SHMATARI_MAX_RING_DEPTH 131072u /* ring_depth */
#define SHMATARI_MAX_STACK 256u         /* stack_num */
#define SHMATARI_MAX_IMG_SIDE 4096u     /* img_height, img_width (pixels) */
#define SHMATARI_MAX_FRAME_SKIP 1024u   /* frame_skip (frames) */
/* Bytes in a whole segment: 1 TiB. */
#define SHMATARI_MAX_SEGMENT_BYTES (UINT64_C(1) << 40)

static inline uint64_t shmatari_align_up(uint64_t n) {
  return (n + SHMATARI_ALIGN - 1) / SHMATARI_ALIGN * SHMATARI_ALIGN;
}

/* Smallest ring depth that keeps a batch intact until the next batch has
 * been taken: ceil(num_envs / batch_size) + 1. */
static inline uint32_t shmatari_min_ring_depth(uint32_t num_envs,
                                               uint32_t batch_size) {
  return (uint32_t)(((uint64_t)num_envs + batch_size - 1) / batch_size + 1);
}

/* Overflow-checked arithmetic for the layout: each returns 0 and leaves the
 * result in *out, or 1 on overflow (past 2^64). */
static inline int shmatari_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return __builtin_add_overflow(a, b, out);
}
static inline int shmatari_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}
static inline int shmatari_align_checked(uint64_t n, uint64_t *out) {
  if (n > UINT64_MAX - (SHMATARI_ALIGN - 1)) return 1;
  *out = shmatari_align_up(n);
  return 0;
}

/* Why shmatari_layout_compute refused a geometry: SHMATARI_LAYOUT_INVALID
 * (a parameter out of its range) or SHMATARI_LAYOUT_TOO_LARGE (the segment
 * would exceed SHMATARI_MAX_SEGMENT_BYTES, or 2^64). */
enum { SHMATARI_LAYOUT_OK = 0, SHMATARI_LAYOUT_INVALID = -1,
       SHMATARI_LAYOUT_TOO_LARGE = -2 };

/* Whether a primary parameter of h is out of its range (SHMATARI_MAX_*, and
 * the rules between them): 1, writing every parameter with its range to
 * msg when msg is not NULL; else 0. */
static inline int shmatari_layout_invalid(const shmatari_header *h, char *msg,
                                          size_t len) {
  if (h->num_envs >= 1 && h->num_envs <= SHMATARI_MAX_ENVS &&
      h->num_workers >= 1 && h->num_workers <= h->num_envs &&
      h->batch_size >= 1 && h->batch_size <= h->num_envs &&
      h->ring_depth >= shmatari_min_ring_depth(h->num_envs, h->batch_size) &&
      h->ring_depth <= SHMATARI_MAX_RING_DEPTH &&
      h->stack_num >= 1 && h->stack_num <= SHMATARI_MAX_STACK &&
      h->img_height >= 1 && h->img_height <= SHMATARI_MAX_IMG_SIDE &&
      h->img_width >= 1 && h->img_width <= SHMATARI_MAX_IMG_SIDE &&
      (h->channels == 1 || h->channels == 3) && h->frame_skip >= 1 &&
      h->frame_skip <= SHMATARI_MAX_FRAME_SKIP &&
      h->autoreset_mode <= SHMATARI_AUTORESET_DISABLED &&
      h->obs_layout <= SHMATARI_OBS_CHANNELS_FIRST &&
      h->batch_order <= SHMATARI_BATCH_FIXED &&
      (h->batch_order != SHMATARI_BATCH_FIXED ||
       h->num_envs % h->batch_size == 0) &&
      h->screen_height <= SHMATARI_MAX_IMG_SIDE &&
      h->screen_width <= SHMATARI_MAX_IMG_SIDE &&
      (h->screen_height == 0) == (h->screen_width == 0) &&
      (h->ram_bytes == 0 || h->ram_bytes == SHMATARI_RAM_BYTES))
    return 0;
  if (msg != NULL)
    snprintf(msg, len, "invalid geometry: num_envs %u (1..%u), num_workers "
             "%u (1..num_envs), batch_size %u (1..num_envs), ring_depth %u "
             "(%u..%u), stack_num %u (1..%u), image %ux%u (1..%u a side), "
             "channels %u (1 or 3), frame_skip %u (1..%u), autoreset_mode "
             "%u (0..2), obs_layout %u (0..1), batch_order %u (0..1; fixed "
             "needs batch_size to divide num_envs), screen %ux%u (both 0, or "
             "1..%u a side), ram_bytes %u (0 or %u)", h->num_envs, SHMATARI_MAX_ENVS, h->num_workers,
             h->batch_size, h->ring_depth,
             h->batch_size ? shmatari_min_ring_depth(h->num_envs,
                                                     h->batch_size) : 0,
             SHMATARI_MAX_RING_DEPTH, h->stack_num, SHMATARI_MAX_STACK,
             h->img_height, h->img_width, SHMATARI_MAX_IMG_SIDE, h->channels,
             h->frame_skip, SHMATARI_MAX_FRAME_SKIP, h->autoreset_mode,
             h->obs_layout, h->batch_order, h->screen_height, h->screen_width,
             SHMATARI_MAX_IMG_SIDE, h->ram_bytes, SHMATARI_RAM_BYTES);
  return 1;
}

/* Fills in the sizes of one observation and one slot of h (obs_frame_bytes,
 * obs_env_bytes, slot_field_offset[], slot_obs_offset, slot_final_offset,
 * slot_bytes) from its checked primary parameters. Returns 1 if a sum or
 * product overflowed (the values are then meaningless), else 0. */
static inline int shmatari_layout_slot(shmatari_header *h) {
  static const uint8_t field_bytes[SHMATARI_FIELD_COUNT] = SHMATARI_FIELD_BYTES;
  int over = 0;
  uint64_t t, off;
  over |= shmatari_mul_u64((uint64_t)h->img_height * h->img_width,
                           h->channels, &h->obs_frame_bytes);
  over |= shmatari_mul_u64(h->obs_frame_bytes, h->stack_num, &h->obs_env_bytes);

  off = SHMATARI_SLOT_HEADER_BYTES;
  for (unsigned f = 0; f < SHMATARI_MAX_FIELDS; f++) h->slot_field_offset[f] = 0;
  for (unsigned f = 0; f < SHMATARI_FIELD_COUNT; f++) {
    h->slot_field_offset[f] = off;
    over |= shmatari_add_u64(off, (uint64_t)field_bytes[f] * h->batch_size, &t);
    over |= shmatari_align_checked(t, &off);
  }
  h->slot_obs_offset = off;
  over |= shmatari_mul_u64(h->obs_env_bytes, h->batch_size, &t);
  over |= shmatari_add_u64(off, t, &t);
  over |= shmatari_align_checked(t, &h->slot_bytes);
  h->slot_final_offset = 0;
  if (h->autoreset_mode == SHMATARI_AUTORESET_SAME_STEP) {
    h->slot_final_offset = h->slot_bytes;
    over |= shmatari_mul_u64(h->slot_bytes, 2, &h->slot_bytes);
  }
  return over;
}

/* Fills in the offsets of h's areas in the segment (env_ctrl_offset,
 * worker_ctrl_offset, errors_offset, slots_offset, render_offset,
 * render_env_bytes, ram_offset) and total_bytes, from its checked primary
 * parameters and slot_bytes. Returns 1 if a sum or product overflowed, else
 * 0. */
static inline int shmatari_layout_areas(shmatari_header *h) {
  int over = 0;
  uint64_t t, off = SHMATARI_HEADER_BYTES;
  h->env_ctrl_offset = off;
  off += (uint64_t)h->num_envs * sizeof(shmatari_env_ctrl);
  h->worker_ctrl_offset = off;
  off += (uint64_t)h->num_workers * sizeof(shmatari_worker_ctrl);
  h->errors_offset = off;
  off += (uint64_t)h->num_workers * SHMATARI_ERROR_BYTES;
  h->slots_offset = off; /* < 2^30 under SHMATARI_MAX_ENVS */
  over |= shmatari_mul_u64(h->ring_depth, h->slot_bytes, &t);
  over |= shmatari_add_u64(off, t, &off);
  h->render_offset = 0;
  h->render_env_bytes = 0;
  if (h->screen_height != 0) { /* (1.2) the render area */
    h->render_offset = off;
    h->render_env_bytes = shmatari_align_up(
        SHMATARI_RENDER_PALETTE_BYTES +
        (uint64_t)h->screen_height * h->screen_width); /* < 2^25 */
    over |= shmatari_mul_u64(h->num_envs, h->render_env_bytes, &t);
    over |= shmatari_add_u64(off, t, &off);
  }
  h->ram_offset = 0;
  if (h->ram_bytes != 0) { /* (1.3) the RAM area; off is 64-aligned here */
    h->ram_offset = off;
    over |= shmatari_mul_u64(h->num_envs, h->ram_bytes, &t);
    over |= shmatari_add_u64(off, t, &off);
  }
  h->total_bytes = off;
  return over;
}

/* Fills in every size and offset of h from its primary parameters
 * (num_envs, num_workers, batch_size, ring_depth, stack_num, img_height,
 * img_width, channels, frame_skip, autoreset_mode, obs_layout, batch_order,
 * screen_height, screen_width, ram_bytes), and the identity words.
 * Every parameter is bounded (SHMATARI_MAX_*: shmatari_layout_invalid) and
 * every sum and product is checked for overflow (shmatari_layout_slot,
 * shmatari_layout_areas). Returns SHMATARI_LAYOUT_OK, or _INVALID /
 * _TOO_LARGE, writing the reason (with the byte count when too large) to
 * msg when msg is not NULL. */
static inline int shmatari_layout_compute_msg(shmatari_header *h, char *msg,
                                              size_t len) {
  if (msg != NULL && len > 0) msg[0] = 0;
  if (shmatari_layout_invalid(h, msg, len)) return SHMATARI_LAYOUT_INVALID;
  h->magic = SHMATARI_MAGIC;
  h->abi_major = SHMATARI_ABI_MAJOR;
  h->abi_minor = SHMATARI_ABI_MINOR;
  h->header_bytes = SHMATARI_HEADER_BYTES;
  h->field_count = SHMATARI_FIELD_COUNT;
  int over = shmatari_layout_slot(h);
  over |= shmatari_layout_areas(h);
  if (over || h->total_bytes > SHMATARI_MAX_SEGMENT_BYTES) {
    if (msg != NULL) {
      if (over)
        snprintf(msg, len, "geometry too large: the segment would need "
                 "2^64 bytes or more (limit %llu)",
                 (unsigned long long)SHMATARI_MAX_SEGMENT_BYTES);
      else
        snprintf(msg, len, "geometry too large: the segment would need %llu "
                 "bytes (limit %llu)", (unsigned long long)h->total_bytes,
                 (unsigned long long)SHMATARI_MAX_SEGMENT_BYTES);
    }
    h->total_bytes = 0;
    return SHMATARI_LAYOUT_TOO_LARGE;
  }
  return SHMATARI_LAYOUT_OK;
}

/* shmatari_layout_compute_msg without the message: 0, or -1 (invalid or
 * too large). */
static inline int shmatari_layout_compute(shmatari_header *h) {
  return shmatari_layout_compute_msg(h, NULL, 0) == SHMATARI_LAYOUT_OK ? 0 : -1;
}

/* The checked geometry of a mapped segment, copied out of it once
 * (shmatari_geom_load in shmatari/shmatari.h, or shmatari_geom_set). Every
 * address the protocol computes comes from here, never from the segment:
 * a header rewritten after the check cannot move a read or a write. */
typedef struct shmatari_geom {
  shmatari_header *hdr; /* the mapped segment; only its shared words (seqs,
                           states, counters, claims) are read through it */
  uint64_t total_bytes; /* == bytes mapped */
  uint32_t num_envs, num_workers, batch_size, ring_depth;
  uint32_t stack_num, img_height, img_width, channels, frame_skip;
  uint32_t autoreset_mode, obs_layout;
  uint32_t screen_height, screen_width; /* (1.2) 0: no render area */
  uint64_t obs_frame_bytes, obs_env_bytes, slot_bytes;
  uint64_t env_ctrl_offset, worker_ctrl_offset, errors_offset, slots_offset;
  uint64_t slot_obs_offset, slot_final_offset;
  uint64_t slot_field_offset[SHMATARI_MAX_FIELDS];
  uint64_t render_offset, render_env_bytes; /* (1.2) */
  uint64_t ram_offset; /* (1.3) 0: no RAM area */
  uint32_t ram_bytes;  /* (1.3) 0 or SHMATARI_RAM_BYTES */
  uint32_t batch_order; /* (1.3) enum shmatari_batch_order; 0 in older pools */
  uint32_t abi_minor;   /* the pool's minor ABI version, as checked: which
                           words it has (owner_start from 1.2) is decided from
                           this copy, never from the live header */
  int32_t owner_pid;    /* the owner's words, copied with the geometry: the */
  uint64_t owner_start; /* owner judged is the one attached to (0: unknown, or
                           a pool before ABI 1.2: judged by its pid alone) */
} shmatari_geom;

/* Copies the geometry of `checked` (a header already checked, or computed by
 * shmatari_layout_compute) into g, for the segment mapped at base. */
static inline void shmatari_geom_set(shmatari_geom *g, void *base,
                                     const shmatari_header *checked) {
  g->hdr = (shmatari_header *)base;
  g->total_bytes = checked->total_bytes;
  g->num_envs = checked->num_envs;
  g->num_workers = checked->num_workers;
  g->batch_size = checked->batch_size;
  g->ring_depth = checked->ring_depth;
  g->stack_num = checked->stack_num;
  g->img_height = checked->img_height;
  g->img_width = checked->img_width;
  g->channels = checked->channels;
  g->frame_skip = checked->frame_skip;
  g->autoreset_mode = checked->autoreset_mode;
  g->obs_layout = checked->obs_layout;
  g->batch_order = checked->batch_order;
  g->abi_minor = checked->abi_minor;
  g->owner_pid = checked->owner_pid;
  g->owner_start = checked->abi_minor >= 2 ? checked->owner_start : 0;
  g->screen_height = checked->screen_height;
  g->screen_width = checked->screen_width;
  g->render_offset = checked->render_offset;
  g->render_env_bytes = checked->render_env_bytes;
  g->ram_offset = checked->ram_offset;
  g->ram_bytes = checked->ram_bytes;
  g->obs_frame_bytes = checked->obs_frame_bytes;
  g->obs_env_bytes = checked->obs_env_bytes;
  g->slot_bytes = checked->slot_bytes;
  g->env_ctrl_offset = checked->env_ctrl_offset;
  g->worker_ctrl_offset = checked->worker_ctrl_offset;
  g->errors_offset = checked->errors_offset;
  g->slots_offset = checked->slots_offset;
  g->slot_obs_offset = checked->slot_obs_offset;
  g->slot_final_offset = checked->slot_final_offset;
  for (unsigned f = 0; f < SHMATARI_MAX_FIELDS; f++)
    g->slot_field_offset[f] = checked->slot_field_offset[f];
}

static inline shmatari_env_ctrl *shmatari_env(const shmatari_geom *g,
                                              uint32_t env) {
  return (shmatari_env_ctrl *)((char *)g->hdr + g->env_ctrl_offset) + env;
}

static inline shmatari_worker_ctrl *shmatari_worker(const shmatari_geom *g,
                                                    uint32_t worker) {
  return (shmatari_worker_ctrl *)((char *)g->hdr + g->worker_ctrl_offset) +
         worker;
}

static inline char *shmatari_error_text(const shmatari_geom *g,
                                        uint32_t worker) {
  return (char *)g->hdr + g->errors_offset +
         (uint64_t)worker * SHMATARI_ERROR_BYTES;
}

static inline char *shmatari_slot(const shmatari_geom *g, uint64_t slot) {
  return (char *)g->hdr + g->slots_offset + (slot % g->ring_depth) * g->slot_bytes;
}

/* (1.2) Env env's part of the render area: its RGB palette (uint8 [256][3]),
 * then its screen (uint8 palette indices [screen_height][screen_width]). The
 * worker writes both before it publishes each result of the env, so a client
 * that has taken the env's latest result, and posted it nothing since, reads
 * the screen of that result; the palette holds the colour of every index the
 * screen uses. Only when render_offset is not 0 (else NULL). */
static inline uint8_t *shmatari_render_area(const shmatari_geom *g,
                                            uint32_t env) {
  /* NULL without the area (it pointed into the header: a C++ user's pass) */
  if (g->render_offset == 0) return NULL;
  return (uint8_t *)g->hdr + g->render_offset +
         (uint64_t)env * g->render_env_bytes;
}

/* (1.3) Env env's part of the RAM area: its console RAM, uint8 [ram_bytes].
 * The worker writes it before it publishes each result of the env (with the
 * render area), so a client that has taken the env's latest result, and
 * posted it nothing since, reads the RAM of that result's state (after the
 * reset, in a same-step pool's done row). Only when ram_offset is not 0
 * (else NULL). */
static inline uint8_t *shmatari_ram_area(const shmatari_geom *g,
                                         uint32_t env) {
  /* NULL without the area (it pointed into the header: a C++ user's pass) */
  if (g->ram_offset == 0) return NULL;
  return (uint8_t *)g->hdr + g->ram_offset + (uint64_t)env * g->ram_bytes;
}

/* 1 if the pool's batches are fixed groups of envs, whatever the timing:
 * a synchronous pool, or batch_order FIXED (1.3). Then result r of env e has
 * position r * num_envs + shmatari_env_rank(g, e), and no worker touches
 * alloc_pos. */
static inline int shmatari_ordered(const shmatari_geom *g) {
  return g->batch_size == g->num_envs || g->batch_order == SHMATARI_BATCH_FIXED;
}

/* Groups of an ordered pool: batch k holds group k % G. */
static inline uint32_t shmatari_groups(const shmatari_geom *g) {
  return shmatari_ordered(g) ? g->num_envs / g->batch_size : 0;
}

/* Where env e's results go in an ordered pool, 0..num_envs-1: group e % G,
 * index e / G, i.e. rank (e % G) * batch_size + e / G (e itself in a
 * synchronous pool). */
static inline uint32_t shmatari_env_rank(const shmatari_geom *g, uint32_t e) {
  uint32_t G = g->num_envs / g->batch_size;
  return (e % G) * g->batch_size + e / G;
}

/* The env_id element of the row of result position pos. */
static inline int32_t *shmatari_row_env_id(const shmatari_geom *g,
                                           uint64_t pos) {
  return (int32_t *)(shmatari_slot(g, pos / g->batch_size) +
                     g->slot_field_offset[SHMATARI_FIELD_ENV_ID]) +
         pos % g->batch_size;
}

/* Marks every row of slot `slot` (mod ring_depth) empty: env_id -1. */
static inline void shmatari_clear_rows(const shmatari_geom *g,
                                       uint64_t slot) {
  int32_t *ids = (int32_t *)(shmatari_slot(g, slot) +
                             g->slot_field_offset[SHMATARI_FIELD_ENV_ID]);
  for (uint32_t i = 0; i < g->batch_size; i++) ids[i] = -1;
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_LAYOUT_H */
