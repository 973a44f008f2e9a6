/*
 * shmatari/client_state.h -- the client state machine: states, refusals, bookkeeping.
 * Part of the header-only C client; include "shmatari/shmatari.h", which
 * includes every part in order (docs/architecture.md names each part).
 */
#ifndef SHMATARI_CLIENT_STATE_H
#define SHMATARI_CLIENT_STATE_H

#include "shmatari/protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * The client: attach by name, post, wait, detach.
 */

/* One batch of results: the observations point into the segment, the
 * fields (env_id, reward, ...) into the client's private copy of the rows,
 * read once (shmatari_next_batch), so that they say what the client's state
 * machine read. Valid until the next shmatari_wait, a reset of every env
 * (shmatari_reset, _reseed, _reset_envs without a mask: it releases the
 * batch held, and its slot's observations are written again) or
 * shmatari_detach.
 * Element i of every array belongs to env env_id[i]; in a synchronous pool (batch_size == num_envs) env_id[i] == i,
 * and with batch_order FIXED (G groups) env_id[i] == index % G + i * G. */
typedef struct shmatari_batch {
  uint64_t index;           /* batches consumed before this one */
  uint32_t size;            /* results: batch_size */
  const uint8_t *obs;       /* size x obs_stride bytes; result i's observation
                               at obs + i * obs_stride, uint8, oldest frame
                               first, laid out as the pool's obs_layout says
                               (c.geom.obs_layout; shmatari_obs_shape) */
  uint64_t obs_stride;      /* bytes: obs_env_bytes */
  const int32_t *env_id;    /* size elements */
  const float *reward;      /* size elements (clipped if reward_clip) */
  const uint8_t *terminated;/* size elements, 0/1 */
  const uint8_t *truncated; /* size elements, 0/1 */
  const void *field[SHMATARI_FIELD_COUNT]; /* every field by enum
                               shmatari_field, size elements each, of
                               SHMATARI_FIELD_BYTES / SHMATARI_FIELD_TYPES */
  /* Same-step pools (autoreset_mode SHMATARI_AUTORESET_SAME_STEP), else
   * NULL: the final records, laid out as obs and field above. Row i's are
   * valid only when its flags hold SHMATARI_FLAG_FINAL: the result of the
   * step that ended the episode, whose row holds the reset that followed.
   * final_field[] points into the client's private copy of the final
   * records, made and checked by shmatari_wait (in each row whose copied
   * flags hold SHMATARI_FLAG_FINAL, its final env_id is the row's);
   * final_obs, as obs, into the segment. (Until 2026-12-06 final_field
   * pointed into the segment, unchecked: an attacker's pass.) */
  const uint8_t *final_obs;
  const void *final_field[SHMATARI_FIELD_COUNT];
} shmatari_batch;

/* The client's state, as Gymnasium's AsyncState: which calls it accepts
 * and which call leaves it. Every refused call (SHMATARI_ERR_STATE) names the
 * state in c->error and the call that leaves it (shmatari_state_text). */
enum shmatari_client_state {
  SHMATARI_CLIENT_DETACHED = 0,    /* no pool: shmatari_attach leaves it */
  SHMATARI_CLIENT_NEEDS_RESET = 1, /* attached, not reset yet: only a reset
                                      of every env leaves it */
  SHMATARI_CLIENT_IDLE = 2,        /* no env running: send or reset */
  SHMATARI_CLIENT_PARTIAL = 3,     /* 1..batch_size-1 envs running (or, with
                                      batch_order FIXED, not every env of the
                                      next batch's group): send to more envs;
                                      a reset of every env drops the commands
                                      in flight */
  SHMATARI_CLIENT_WAITING = 4,     /* batch_size or more envs running: wait
                                      takes a batch; send to the envs not
                                      running; a reset of every env drops the
                                      commands in flight */
  SHMATARI_CLIENT_BROKEN = 5       /* a worker failed, the server died or
                                      is closing, or a wait found a batch no
                                      worker will fill: only detach */
};

/* Per-env bits of shmatari_client.env_flags. */
#define SHMATARI_ENV_RUNNING 1u /* a command posted, its result not returned */
#define SHMATARI_ENV_ENDED 2u   /* autoreset_mode DISABLED: its last step ended
                                   the episode; only a reset restarts it */
#define SHMATARI_ENV_LISTED 4u  /* scratch: listed in the call being checked */
/* The command in flight, while RUNNING: neither bit a STEP. */
#define SHMATARI_ENV_RESETTING 8u  /* a RESET or RESEED */
#define SHMATARI_ENV_OBSERVING 16u /* an OBSERVE (a masked reset's others) */
#define SHMATARI_ENV_COMMAND (SHMATARI_ENV_RESETTING | SHMATARI_ENV_OBSERVING)
#define SHMATARI_ENV_LAST_ENDED 32u /* its last row (not an observation)
                                       was terminated or truncated */

/* Why a row with flags `flags` cannot answer the command recorded in
 * env_flags bits `fl` (SHMATARI_ENV_COMMAND) in a pool of autoreset mode
 * `autoreset` (SHMATARI_AUTORESET_*), or NULL if it can. A STEP's result is
 * never an observation, and a reset only as the autoreset makes one: in a
 * same-step pool with the done step's final record (FLAG_FINAL), in a
 * next-step pool after a row that ended the episode, in a disabled pool
 * never. An OBSERVE's result is an observation (or the restart result of a
 * replaced worker); a RESET's or RESEED's is a reset. A command word
 * rewritten by another process (STEP to OBSERVE, or to RESET) made the
 * worker answer another command, and the step was lost with no error (an
 * attacker's pass and a review, 2026-12-06). */
static inline const char *shmatari_row_mismatch(uint8_t fl, uint32_t flags,
                                                uint32_t autoreset) {
  if (fl & SHMATARI_ENV_RESETTING)
    return (flags & SHMATARI_FLAG_RESET) && !(flags & SHMATARI_FLAG_OBSERVED)
               ? NULL
               : "whose command was a reset, but the row is not a reset's result";
  if (fl & SHMATARI_ENV_OBSERVING)
    return flags & (SHMATARI_FLAG_OBSERVED | SHMATARI_FLAG_RESTARTED)
               ? NULL
               : "whose command was an observation (a masked reset's), but the "
                 "row is not one";
  if (flags & SHMATARI_FLAG_OBSERVED)
    return "whose command was a step, but the row is an observation "
           "(FLAG_OBSERVED: the env was not stepped)";
  if ((flags & SHMATARI_FLAG_RESET) &&
      !(autoreset == SHMATARI_AUTORESET_SAME_STEP ? (flags & SHMATARI_FLAG_FINAL) != 0
        : autoreset == SHMATARI_AUTORESET_NEXT_STEP ? (fl & SHMATARI_ENV_LAST_ENDED) != 0
                                                     : 0))
    return "whose command was a step, but the row is a reset that its "
           "autoreset does not make there (the env's episode had not ended)";
  return NULL;
}

/* The calls, as refusals name them (shmatari_client.names). */
enum shmatari_call {
  SHMATARI_CALL_SEND, SHMATARI_CALL_WAIT, SHMATARI_CALL_RESET,
  SHMATARI_CALL_RESET_MASKED, SHMATARI_CALL_STEP, SHMATARI_CALL_DETACH,
  SHMATARI_CALL_ATTACH, SHMATARI_CALL_COUNT
};
static const char *const shmatari_call_names_c[SHMATARI_CALL_COUNT] = {
    "shmatari_send", "shmatari_wait", "shmatari_reset",
    "shmatari_reset_envs with a mask", "shmatari_send + shmatari_wait",
    "shmatari_detach", "shmatari_attach"};
/* The same calls in shmatari's Python API (its client sets these names). */
static const char *const shmatari_call_names_python[SHMATARI_CALL_COUNT] = {
    "send()", "recv()", "reset() or async_reset()", "reset(options={'reset_mask': mask})",
    "step()", "close()", "shmatari.attach()"};

typedef struct shmatari_client {
  shmatari_header *hdr; /* the mapped segment (read-only for the caller);
                           NULL when not attached */
  uint64_t map_bytes;   /* bytes shmatari_attach mapped (0: the caller
                           mapped the segment itself) */
  shmatari_geom geom;   /* the checked geometry, copied once at attach: every
                           size and offset comes from here */
  uint32_t num_actions; /* the action space's size, read once at attach */
  int32_t pid;          /* this process: the claim's holder */
  int64_t spin_ns;      /* how long a wait polls before it sleeps (0); worth
                           tens of microseconds with a core to spare */
  int spin_mode;        /* SHMATARI_SPIN_PAUSE (default) or _YIELD */
  int64_t next_check_ns; /* when a wait next checks the server's pid */
  int state;            /* enum shmatari_client_state */
  uint64_t taken;       /* batches consumed (the next batch's index) */
  int holding;          /* 1 while the last batch returned is not consumed */
  uint32_t pending;     /* envs with SHMATARI_ENV_RUNNING */
  uint8_t *env_flags;   /* per env: SHMATARI_ENV_* bits */
  uint32_t *env_posted; /* per env: the req_seq this client last wrote (its
                           own count of commands posted; read from the
                           segment once, at open) */
  uint32_t *env_worker; /* per env: the worker that owns it */
  uint8_t *touched;     /* scratch: one byte per worker */
  /* For a first-ready pool's waits (shmatari_check_progress), from this
   * client's own records: per env, its count of commands (env_posted) and
   * whether a command was in flight, at the last liveness check; per
   * worker, since when (that check's time, ns) it has held commands of
   * this client and answered none (-1: none in flight, or not yet seen). */
  uint32_t *check_posted;
  uint8_t *check_inflight;
  uint8_t *inflight_now; /* per env, from the ack_seq shmatari_check_running
                            read at this check (read once, for both) */
  int64_t *worker_since;
  uint32_t stalled;     /* 1 + the worker whose stall ended the last wait
                           with _ERR_TIMEOUT (shmatari_check_progress); 0:
                           none */
  /* Private copies of a call's arguments, num_envs entries each: env ids,
   * actions and reset masks may point into the segment (b.env_id of a
   * batch), where another process may change them between the check and the
   * use; each call copies them here once, then checks and uses the copy. */
  int32_t *call_env_ids;
  int32_t *call_actions;
  uint8_t *call_mask;
  /* The held batch's result rows (the slot's bytes from its first field
   * array up to its observations, as laid out in the slot), copied once by
   * shmatari_next_batch: what the state machine read (env_id, flags,
   * terminated, truncated) is what every caller reads
   * (shmatari_batch_fields), never the segment's words again. In
   * same-step pools twice that: then the final records' fields, copied by
   * shmatari_wait (shmatari_batch_final_fields). */
  uint8_t *batch_fields;
  const char *const *names; /* call names in refusals (shmatari_call_names_c) */
  char segment[SHMATARI_NAME_MAX]; /* the segment's name */
  char error[SHMATARI_MESSAGE_BYTES]; /* the last failure, in words */
} shmatari_client;

/* The name of a client state (enum shmatari_client_state). */
static inline const char *shmatari_client_state_name(int state) {
  switch (state) {
    case SHMATARI_CLIENT_DETACHED: return "detached";
    case SHMATARI_CLIENT_NEEDS_RESET: return "needs_reset";
    case SHMATARI_CLIENT_IDLE: return "idle";
    case SHMATARI_CLIENT_PARTIAL: return "partial";
    case SHMATARI_CLIENT_WAITING: return "waiting";
    case SHMATARI_CLIENT_BROKEN: return "broken";
    default: return "unknown";
  }
}

/* Writes "; the pool ...: <the calls that leave the state>" for c's state. */
static inline void shmatari_state_text(const shmatari_client *c, char *out,
                                       size_t len) {
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  uint32_t b = c->geom.batch_size;
  switch (c->state) {
    case SHMATARI_CLIENT_DETACHED:
      snprintf(out, len, "; the client is detached: %s first",
               k[SHMATARI_CALL_ATTACH]);
      break;
    case SHMATARI_CLIENT_NEEDS_RESET:
      snprintf(out, len, "; the pool has not been reset yet by this client "
               "(made or attached): %s (every env) leaves that state",
               k[SHMATARI_CALL_RESET]);
      break;
    case SHMATARI_CLIENT_IDLE:
      snprintf(out, len, "; the pool is idle (no env running): %s or %s "
               "leave that state", k[SHMATARI_CALL_SEND],
               k[SHMATARI_CALL_RESET]);
      break;
    case SHMATARI_CLIENT_PARTIAL:
      snprintf(out, len, "; the pool has %u env(s) running, fewer than a "
               "batch of %u: %s to more envs leaves that state, or %s, which "
               "drops the commands in flight", c->pending, b,
               k[SHMATARI_CALL_SEND], k[SHMATARI_CALL_RESET]);
      break;
    case SHMATARI_CLIENT_WAITING:
      snprintf(out, len, "; the pool has %u env(s) running and a batch of %u "
               "is due: %s leaves that state (or %s, which drops the commands "
               "in flight)", c->pending, b, k[SHMATARI_CALL_WAIT],
               k[SHMATARI_CALL_RESET]);
      break;
    default:
      snprintf(out, len, "; the pool is broken (a worker failed, the server "
               "died or is closing, or a wait found a batch no worker will "
               "fill): %s leaves that state",
               k[SHMATARI_CALL_DETACH]);
  }
}

/* Writes the message fmt, then the state and its way out, to c->error;
 * returns code. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int shmatari_refuse(shmatari_client *c, int code,
                                  const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(c->error, sizeof c->error, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof c->error)
    shmatari_state_text(c, c->error + n, sizeof c->error - (size_t)n);
  return code;
}

/* Appends printf-style text at out + *used (out holds len bytes, NUL
 * terminated), cut at its end; *used stays below len. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline void shmatari_appendf(char *out, size_t len, size_t *used,
                                    const char *fmt, ...) {
  if (len == 0 || *used >= len - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out + *used, len - *used, fmt, ap);
  va_end(ap);
  if (n < 0) {
    out[*used] = 0;
    return;
  }
  *used += (size_t)n < len - *used ? (size_t)n : len - *used - 1;
}

static inline const char *shmatari_unanswered_worker_text(const shmatari_client *c,
                                                          int64_t worker, char *out,
                                                          size_t len);

/* Envs listed per worker in shmatari_unanswered_text, then "and N more". */
#define SHMATARI_UNANSWERED_LISTED 8u

/* Writes, for a wait that timed out with every worker alive, which workers
 * hold commands they have not answered: "worker W (pid P) has not answered
 * envs E, F" per such worker, joined by "; " (at most
 * SHMATARI_UNANSWERED_LISTED envs each, then "and N more"), then " (alive,
 * but stopped or busy: a long noop_max, or a stuck emulator)"; or "no env
 * has a command in flight". An env counts when this client posted to it
 * (SHMATARI_ENV_RUNNING) and its worker has not acknowledged the command
 * (req_seq != ack_seq, each read once): one whose result is in, waiting for
 * the rest of its batch, is not named. The worker is the client's own record
 * (env_worker); its pid is read once, for the words only. Python's recv()
 * and reset() and the xla() call give these words. Returns out, NUL
 * terminated when len > 0. */
static inline const char *shmatari_unanswered_text(const shmatari_client *c,
                                                   char *out, size_t len) {
  return shmatari_unanswered_worker_text(c, -1, out, len);
}

/* shmatari_unanswered_text for worker `worker` alone (< 0: every worker):
 * what a stalled worker's error names (the others' commands may be in
 * flight and answered in time: an attacker's pass, 2026-12-06, found the
 * healthy worker named "stopped or busy" beside the stopped one). */
static inline const char *shmatari_unanswered_worker_text(const shmatari_client *c,
                                                          int64_t worker, char *out,
                                                          size_t len) {
  const shmatari_geom *g = &c->geom;
  size_t used = 0;
  if (len == 0) return out;
  out[0] = 0;
  for (uint32_t w = 0; w < g->num_workers; w++) {
    if (worker >= 0 && (uint32_t)worker != w) continue;
    uint32_t ids[SHMATARI_UNANSWERED_LISTED], count = 0;
    for (uint32_t e = 0; e < g->num_envs; e++) {
      if (c->env_worker[e] != w || !(c->env_flags[e] & SHMATARI_ENV_RUNNING))
        continue;
      shmatari_env_ctrl *ec = shmatari_env(g, e);
      if (shmatari_load_acquire(&ec->req_seq) == shmatari_load_acquire(&ec->ack_seq))
        continue;
      if (count < SHMATARI_UNANSWERED_LISTED) ids[count] = e;
      count++;
    }
    if (count == 0) continue;
    int32_t pid = (int32_t)shmatari_load_acquire(
        (const uint32_t *)&shmatari_worker(g, w)->pid);
    shmatari_appendf(out, len, &used, "%sworker %u (pid %d) has not answered env%s ",
                     used ? "; " : "", w, (int)pid, count > 1 ? "s" : "");
    uint32_t listed = count < SHMATARI_UNANSWERED_LISTED ? count : SHMATARI_UNANSWERED_LISTED;
    for (uint32_t i = 0; i < listed; i++)
      shmatari_appendf(out, len, &used, "%s%u", i ? ", " : "", ids[i]);
    if (count > listed)
      shmatari_appendf(out, len, &used, " and %u more", count - listed);
  }
  if (used == 0)
    shmatari_appendf(out, len, &used, "no env has a command in flight");
  else
    shmatari_appendf(out, len, &used, " (alive, but stopped or busy: a long "
                     "noop_max, or a stuck emulator)");
  return out;
}

/* Whether the wait for batch c->taken can still end (a wait's slice that
 * found no batch asks). Every env that this client has a command in flight
 * for (SHMATARI_ENV_RUNNING) is checked for an answer (req_seq == ack_seq,
 * each read once, acquire): once all have answered, each answer's row and
 * its bump of a slot's done_count are visible (the publish order at the top
 * of protocol.h). The client waits only with batch_size or more envs running
 * (a fixed-order pool's next group all running), and its workers put the
 * first batch_size of those answers in batch c->taken; so if the slot still
 * holds fewer rows, no worker will ever fill it: another process changed
 * where results go (the header's alloc_pos, an env's `results` count, the
 * slot's done_count). Until 2026-12-05 such a wait ran to its timeout, and
 * for good without one (an attacker's pass). Returns SHMATARI_OK (the wait
 * may still end), or _ERR_NOT_SHMATARI with words in c->error. */
static inline int shmatari_check_stall(shmatari_client *c) {
  const shmatari_geom *g = &c->geom;
  uint32_t running = 0;
  for (uint32_t e = 0; e < g->num_envs; e++) {
    if (!(c->env_flags[e] & SHMATARI_ENV_RUNNING)) continue;
    shmatari_env_ctrl *ec = shmatari_env(g, e);
    if (shmatari_load_acquire(&ec->req_seq) != shmatari_load_acquire(&ec->ack_seq))
      return SHMATARI_OK; /* a command still in flight may fill the slot */
    running++;
  }
  if (running < g->batch_size) return SHMATARI_OK; /* not waiting: no claim */
  uint32_t done = shmatari_load_acquire(
      &((shmatari_slot_header *)shmatari_slot(g, c->taken))->done_count);
  if (done >= g->batch_size) return SHMATARI_OK; /* the batch came meanwhile */
  return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_NOT_SHMATARI,
                       "batch %llu holds %u of its %u results, and every env "
                       "with a command in flight (%u) has answered: no worker "
                       "will fill it (another process changed where results go: "
                       "the header's alloc_pos, an env's results count or the "
                       "slot's done_count)",
                       (unsigned long long)c->taken, done, g->batch_size, running);
}

/* (1.3) In a pool of batch_order FIXED (asynchronous), the first env of the
 * next batch's group (index c->taken + holding, group that % G, envs group,
 * group + G, ...) that is not running; num_envs when all are, and in every
 * other pool. */
static inline uint32_t shmatari_group_idle(const shmatari_client *c) {
  const shmatari_geom *h = &c->geom;
  if (h->batch_order != SHMATARI_BATCH_FIXED || h->batch_size == h->num_envs)
    return h->num_envs;
  uint32_t G = h->num_envs / h->batch_size;
  uint32_t group = (uint32_t)((c->taken + (c->holding ? 1 : 0)) % G);
  for (uint32_t e = group; e < h->num_envs; e += G)
    if (!(c->env_flags[e] & SHMATARI_ENV_RUNNING)) return e;
  return h->num_envs;
}

/* After a change of c->pending: IDLE, PARTIAL or WAITING (batch_order
 * FIXED: WAITING only when every env of the next batch's group runs). */
static inline void shmatari_settle(shmatari_client *c) {
  if (c->state == SHMATARI_CLIENT_IDLE || c->state == SHMATARI_CLIENT_PARTIAL ||
      c->state == SHMATARI_CLIENT_WAITING)
    c->state = c->pending == 0                   ? SHMATARI_CLIENT_IDLE
               : c->pending < c->geom.batch_size ? SHMATARI_CLIENT_PARTIAL
               : shmatari_group_idle(c) != c->geom.num_envs
                   ? SHMATARI_CLIENT_PARTIAL
                   : SHMATARI_CLIENT_WAITING;
}

/* Marks the pool broken (after a liveness error): only detach leaves it. */
static inline void shmatari_client_break(shmatari_client *c) {
  if (c->state != SHMATARI_CLIENT_DETACHED) c->state = SHMATARI_CLIENT_BROKEN;
}

/* Frees the client's bookkeeping (not the mapping nor the claim: see
 * shmatari_detach); c is DETACHED afterwards. Safe to call twice. */
static inline void shmatari_client_close(shmatari_client *c) {
  free(c->env_flags);
  free(c->env_posted);
  free(c->env_worker);
  free(c->touched);
  free(c->check_posted);
  free(c->check_inflight);
  free(c->inflight_now);
  free(c->worker_since);
  free(c->call_env_ids);
  free(c->call_actions);
  free(c->call_mask);
  free(c->batch_fields);
  c->hdr = NULL;
  memset(&c->geom, 0, sizeof c->geom);
  c->num_actions = 0;
  c->env_flags = NULL;
  c->env_posted = NULL;
  c->env_worker = NULL;
  c->touched = NULL;
  c->check_posted = NULL;
  c->check_inflight = NULL;
  c->inflight_now = NULL;
  c->worker_since = NULL;
  c->stalled = 0;
  c->call_env_ids = NULL;
  c->call_actions = NULL;
  c->call_mask = NULL;
  c->batch_fields = NULL;
  c->pending = 0;
  c->holding = 0;
  c->state = SHMATARI_CLIENT_DETACHED;
}

/* Starts the client's bookkeeping on the segment of checked geometry g
 * (shmatari_geom_load), mapped, claimed and recovered (shmatari_attach does
 * all of it; shmatari's Python client maps the segment itself and calls
 * this). next_batch: the batch the client waits for first, as
 * shmatari_recover (or shmatari_open_pool) gave it; not read from the
 * segment's consumed_batches, which another process may have written since
 * the recovery stored it (the client would then wait on a batch no worker
 * writes). Copies *g into c->geom: nothing after reads a size or offset from
 * the segment. Reads num_actions once (written by worker 0 before the pool
 * ran) and refuses a pool whose count is not 1..SHMATARI_MAX_ACTIONS: a
 * client's actions are indices below it (a trainer draws them with
 * `% c->num_actions`). c->pid, spin settings and names stay as the caller
 * set them. Returns SHMATARI_OK (state NEEDS_RESET), or _ERR_SYSTEM /
 * _ERR_NOT_SHMATARI (c left DETACHED). */
static inline int shmatari_client_open(shmatari_client *c,
                                       const shmatari_geom *g,
                                       uint64_t next_batch) {
  shmatari_header *h = g->hdr;
  uint32_t num_actions = *(volatile uint32_t *)&h->num_actions; /* once */
  if (num_actions == 0 || num_actions > SHMATARI_MAX_ACTIONS)
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari pool: its action set has %u actions, "
                         "not 1 to %u (its workers write num_actions before "
                         "the pool runs)",
                         num_actions, SHMATARI_MAX_ACTIONS);
  c->geom = *g;
  c->hdr = h;
  c->num_actions = num_actions;
  c->env_flags = (uint8_t *)calloc(g->num_envs, 1);
  c->env_posted = (uint32_t *)calloc(g->num_envs, sizeof(uint32_t));
  c->env_worker = (uint32_t *)calloc(g->num_envs, sizeof(uint32_t));
  c->touched = (uint8_t *)calloc(g->num_workers, 1);
  c->check_posted = (uint32_t *)calloc(g->num_envs, sizeof(uint32_t));
  c->check_inflight = (uint8_t *)calloc(g->num_envs, 1);
  c->inflight_now = (uint8_t *)calloc(g->num_envs, 1);
  c->worker_since = (int64_t *)malloc(g->num_workers * sizeof(int64_t));
  c->call_env_ids = (int32_t *)calloc(g->num_envs, sizeof(int32_t));
  c->call_actions = (int32_t *)calloc(g->num_envs, sizeof(int32_t));
  c->call_mask = (uint8_t *)calloc(g->num_envs, 1);
  c->batch_fields = (uint8_t *)calloc(
      g->slot_obs_offset - g->slot_field_offset[0], g->slot_final_offset ? 2 : 1);
  int r = SHMATARI_OK;
  if (c->env_flags == NULL || c->env_posted == NULL || c->env_worker == NULL ||
      c->touched == NULL || c->check_posted == NULL || c->check_inflight == NULL ||
      c->inflight_now == NULL ||
      c->worker_since == NULL ||
      c->call_env_ids == NULL || c->call_actions == NULL ||
      c->call_mask == NULL || c->batch_fields == NULL)
    r = shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_SYSTEM,
                      "out of memory");
  else
    r = shmatari_env_workers(&c->geom, c->env_worker, c->error,
                             sizeof c->error);
  if (r != SHMATARI_OK) {
    shmatari_client_close(c);
    return r;
  }
  /* The count each env's commands go on from: its req_seq, read once here
   * (the pool recovered: nothing in flight), never again. */
  for (uint32_t e = 0; e < g->num_envs; e++)
    c->env_posted[e] = shmatari_load_acquire(&shmatari_env(g, e)->req_seq);
  for (uint32_t w = 0; w < g->num_workers; w++) c->worker_since[w] = -1;
  c->stalled = 0;
  c->taken = next_batch;
  c->pending = 0;
  c->holding = 0;
  c->state = SHMATARI_CLIENT_NEEDS_RESET;
  c->error[0] = 0;
  return SHMATARI_OK;
}

/* Starts the state machine alone, with no segment: the bookkeeping of a
 * client whose transport is not a segment (shmatari.ray drives the same
 * machine, with Ray carrying the commands and results). Returns
 * SHMATARI_OK (state NEEDS_RESET) or _ERR_SYSTEM (out of memory; c left
 * DETACHED). c->names and the spin settings stay as the caller set them. */
static inline int shmatari_machine_open(shmatari_client *c, uint32_t num_envs,
                                        uint32_t batch_size,
                                        uint32_t num_actions,
                                        uint32_t autoreset_mode) {
  shmatari_client_close(c);
  c->geom.num_envs = num_envs;
  c->geom.batch_size = batch_size;
  c->geom.autoreset_mode = autoreset_mode;
  c->num_actions = num_actions;
  c->env_flags = (uint8_t *)calloc(num_envs ? num_envs : 1, 1);
  if (c->env_flags == NULL) {
    shmatari_client_close(c);
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_SYSTEM,
                         "out of memory");
  }
  c->state = SHMATARI_CLIENT_NEEDS_RESET;
  c->error[0] = 0;
  return SHMATARI_OK;
}

/* ------------------------------------------------------------------------
 * The state machine's rules, apart from any transport: each call is
 * checked here (state, env ids, actions) and recorded here once the
 * transport has carried it (shmatari_send and shmatari_next_batch for a
 * segment; shmatari.ray for a Ray pool).
 */

/* Checks a call's state: SHMATARI_OK if c->state is one of the
 * `allowed` states (a bit mask of 1 << state), else _ERR_STATE naming the
 * call, the state and its way out. */
static inline int shmatari_check_state(shmatari_client *c, int call,
                                       unsigned allowed) {
  if (allowed & (1u << c->state)) return SHMATARI_OK;
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  return shmatari_refuse(c, SHMATARI_ERR_STATE, "%s refused", k[call]);
}

#define SHMATARI_ACTIVE                                           \
  ((1u << SHMATARI_CLIENT_IDLE) | (1u << SHMATARI_CLIENT_PARTIAL) | \
   (1u << SHMATARI_CLIENT_WAITING))

/* Checks n env ids (envs 0..n-1 when env_ids is NULL; then n MUST be
 * num_envs) and n actions (NULL: none): every env in range, listed once,
 * without a bit of `forbid` (SHMATARI_ENV_*), every action in
 * 0..num_actions-1. Returns SHMATARI_OK, _ERR_INVALID or _ERR_STATE (only
 * when every argument is valid: a bad one is named first); changes nothing. */
static inline int shmatari_check_envs(shmatari_client *c, int call,
                                      const int32_t *env_ids, uint32_t n,
                                      const int32_t *actions, uint8_t forbid) {
  const shmatari_geom *h = &c->geom;
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  char *msg = c->error;
  size_t len = sizeof c->error;
  if (env_ids == NULL && n != h->num_envs)
    return shmatari_fail(
        msg, len, SHMATARI_ERR_INVALID, "%s: %u actions for %u envs (actions "
        "must have shape (%u,)): %s", k[call], n, h->num_envs, h->num_envs,
        call == SHMATARI_CALL_STEP && h->batch_size == h->num_envs
            ? "a synchronous pool steps every env at once (a pool made "
              "with batch_size < num_envs steps batches of fewer)"
            : "pass env ids to address fewer");
  /* A bad argument is reported before a state: the first env that may not
   * take the call is kept in `state` while the rest of the arguments are
   * checked (until 2026-12-05 env_ids [3, 3] with env 3 running were
   * refused as "still running", a CallOrderError, not as listed twice). */
  int r = SHMATARI_OK, state = SHMATARI_OK;
  uint32_t i;
  for (i = 0; i < n && r == SHMATARI_OK; i++) {
    int64_t e = env_ids != NULL ? env_ids[i] : (int64_t)i;
    uint8_t fl = e >= 0 && e < (int64_t)h->num_envs ? c->env_flags[e] : 0;
    if (e < 0 || e >= (int64_t)h->num_envs)
      r = shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "%s: env_ids[%u] = "
                        "%lld%s is out of range 0..%u", k[call], i,
                        (long long)e,
                        /* Python's client clamps wider integers to int32 */
                        k != shmatari_call_names_python ? "" :
                        e == INT32_MAX ? " or more" :
                        e == INT32_MIN ? " or less" : "",
                        h->num_envs - 1);
    else if (fl & SHMATARI_ENV_LISTED)
      r = shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "%s: env %lld is "
                        "listed twice in env_ids", k[call], (long long)e);
    else if (actions != NULL &&
             (actions[i] < 0 || (uint32_t)actions[i] >= c->num_actions))
      r = shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "%s: action %d%s at "
                        "position %u is out of range: this game has actions "
                        "0..%u", k[call], actions[i],
                        /* Python's client clamps wider integers to int32 */
                        k != shmatari_call_names_python ? "" :
                        actions[i] == INT32_MAX ? " or more" :
                        actions[i] == INT32_MIN ? " or less" : "",
                        i, c->num_actions - 1);
    else {
      if (state == SHMATARI_OK && (fl & forbid & SHMATARI_ENV_RUNNING))
        state = shmatari_refuse(c, SHMATARI_ERR_STATE, "%s: env %lld is still "
                                "running (its result was not received)",
                                k[call], (long long)e);
      else if (state == SHMATARI_OK && (fl & forbid & SHMATARI_ENV_ENDED))
        /* the way out is that reset: not the state's general one (send()
         * would be refused the same way) */
        state = shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_STATE,
                              "%s: env %lld ended its episode and "
                              "autoreset_mode is 'disabled': reset it first "
                              "with %s", k[call], (long long)e,
                              k[SHMATARI_CALL_RESET_MASKED]);
      c->env_flags[e] |= SHMATARI_ENV_LISTED;
    }
  }
  for (uint32_t j = 0; j < i; j++) {
    int64_t e = env_ids != NULL ? env_ids[j] : (int64_t)j;
    if (e >= 0 && e < (int64_t)h->num_envs)
      c->env_flags[e] &= (uint8_t)~SHMATARI_ENV_LISTED;
  }
  return r != SHMATARI_OK ? r : state; /* c->error holds the one returned */
}

/* Would sending n more commands leave a batch to wait for? SHMATARI_OK, or
 * _ERR_STATE saying that a step (send then wait) of n envs cannot return. */
static inline int shmatari_check_step(shmatari_client *c, uint32_t n) {
  if (c->pending + n >= c->geom.batch_size) return SHMATARI_OK;
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  /* The way out of this call first; the state's words after it (an env
   * that ended under 'disabled' takes no action until its masked reset). */
  uint32_t running = c->pending + n;
  char smaller[64] = "";
  if (running > 0)
    snprintf(smaller, sizeof smaller, ", or make the pool with batch_size <= %u",
             running);
  return shmatari_refuse(c, SHMATARI_ERR_STATE,
                         "%s would send %u action(s) and wait for a batch of %u "
                         "results, but only %u env(s) would then be running; "
                         "nothing was sent: give actions to at least %u env(s)%s",
                         k[SHMATARI_CALL_STEP], n, c->geom.batch_size, running,
                         c->geom.batch_size - c->pending, smaller);
}

/* Marks n envs running (env_ids NULL: envs 0..n-1) with the command
 * `command` (SHMATARI_ENV_COMMAND bits; 0: a STEP). */
static inline void shmatari_mark_running(shmatari_client *c,
                                         const int32_t *env_ids, uint32_t n,
                                         uint8_t command) {
  for (uint32_t i = 0; i < n; i++) {
    uint8_t *fl = &c->env_flags[env_ids != NULL ? (uint32_t)env_ids[i] : i];
    *fl = (uint8_t)((*fl & ~SHMATARI_ENV_COMMAND) | SHMATARI_ENV_RUNNING |
                    command);
  }
  c->pending += n;
  shmatari_settle(c);
}

/* Accepts a send of n actions (as shmatari_send describes them), or with
 * call SHMATARI_CALL_STEP a send that a wait follows (then the envs running
 * afterwards MUST make a batch: shmatari_check_step). Checks the state, the
 * env ids and the actions, then marks the envs running; the caller's
 * transport then carries the commands. Returns SHMATARI_OK, or
 * _ERR_INVALID / _ERR_STATE with nothing changed. */
static inline int shmatari_accept_send(shmatari_client *c, int call,
                                       const int32_t *actions,
                                       const int32_t *env_ids, uint32_t n) {
  int r = shmatari_check_state(c, call, SHMATARI_ACTIVE);
  if (r == SHMATARI_OK)
    r = shmatari_check_envs(c, call, env_ids, n, actions,
                            SHMATARI_ENV_RUNNING | SHMATARI_ENV_ENDED);
  if (r == SHMATARI_OK && call == SHMATARI_CALL_STEP)
    r = shmatari_check_step(c, n);
  if (r == SHMATARI_OK) shmatari_mark_running(c, env_ids, n, 0);
  return r;
}

/* Checks a reset (shmatari_reset_envs describes it): the state, the
 * command and the mask. Changes nothing. Returns SHMATARI_OK,
 * _ERR_INVALID or _ERR_STATE. */
static inline int shmatari_check_reset(shmatari_client *c, uint32_t cmd,
                                       const uint8_t *mask) {
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  int call = mask != NULL ? SHMATARI_CALL_RESET_MASKED : SHMATARI_CALL_RESET;
  int r = shmatari_check_state(
      c, call, SHMATARI_ACTIVE | (1u << SHMATARI_CLIENT_NEEDS_RESET));
  if (r != SHMATARI_OK) return r;
  const shmatari_geom *h = &c->geom;
  if (cmd != SHMATARI_CMD_RESET && (cmd != SHMATARI_CMD_RESEED || mask != NULL))
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                         "%s: command %u is not a reset%s", k[call], cmd,
                         cmd == SHMATARI_CMD_RESEED ? " of some envs: reseeding "
                         "re-derives every env" : "");
  if (mask == NULL) return SHMATARI_OK;
  uint32_t masked = 0, first_running = h->num_envs;
  for (uint32_t e = 0; e < h->num_envs; e++) {
    if (!mask[e]) continue;
    masked++;
    if ((c->env_flags[e] & SHMATARI_ENV_RUNNING) && first_running == h->num_envs)
      first_running = e;
  }
  if (masked == 0)
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                         "%s: the mask holds no env", k[call]);
  if (c->state == SHMATARI_CLIENT_NEEDS_RESET && masked < h->num_envs)
    return shmatari_refuse(c, SHMATARI_ERR_STATE, "%s: the first reset must "
                           "reset every env", k[call]);
  if (first_running < h->num_envs)
    return shmatari_refuse(c, SHMATARI_ERR_STATE, "%s: env %u is still "
                           "running (its result was not received)", k[call],
                           first_running);
  return SHMATARI_OK;
}

/* Records a reset that shmatari_check_reset accepted, once the transport
 * has dropped what was in flight (mask NULL) and carries the commands:
 * mask NULL, every env running afresh; else every env not running is
 * running again, the masked ones reset (no longer ENDED) and the others
 * observed (they keep their bits). */
static inline void shmatari_accept_reset(shmatari_client *c,
                                         const uint8_t *mask) {
  const shmatari_geom *h = &c->geom;
  if (mask == NULL) {
    memset(c->env_flags, 0, h->num_envs);
    c->pending = 0;
    c->state = SHMATARI_CLIENT_IDLE;
    shmatari_mark_running(c, NULL, h->num_envs, SHMATARI_ENV_RESETTING);
    return;
  }
  if (c->state == SHMATARI_CLIENT_NEEDS_RESET) c->state = SHMATARI_CLIENT_IDLE;
  for (uint32_t e = 0; e < h->num_envs; e++) {
    if (c->env_flags[e] & SHMATARI_ENV_RUNNING) continue;
    c->env_flags[e] = (uint8_t)(mask[e] ? SHMATARI_ENV_RUNNING | SHMATARI_ENV_RESETTING
                                        : (c->env_flags[e] & ~SHMATARI_ENV_COMMAND) |
                                              SHMATARI_ENV_RUNNING |
                                              SHMATARI_ENV_OBSERVING);
    c->pending++;
  }
  shmatari_settle(c);
}

/* Records n result rows (a batch): each row's env is no longer running;
 * under autoreset_mode DISABLED a row that is not an observation
 * (SHMATARI_FLAG_OBSERVED) marks its env ENDED if it terminated or was
 * truncated, else clears the bit. Rows naming an env out of range or not
 * running (one already named by an earlier row of the batch included), or
 * whose flags cannot answer the env's command (shmatari_row_mismatch), are
 * skipped (worker-written values are bounded here). Returns n if every row
 * was recorded, else the index of the first row skipped: no worker wrote
 * it (a worker answers each command once), and the batch cannot be handed
 * out as the envs' results (shmatari_next_batch then fails). */
static inline uint32_t shmatari_accept_rows(shmatari_client *c,
                                            const int32_t *env_id,
                                            const uint32_t *flags,
                                            const uint8_t *term,
                                            const uint8_t *trunc, uint32_t n) {
  const shmatari_geom *h = &c->geom;
  int disabled = h->autoreset_mode == SHMATARI_AUTORESET_DISABLED;
  uint32_t first_bad = n;
  for (uint32_t i = 0; i < n; i++) {
    /* Worker-written words (the rows may be in the segment), each read once
     * (an atomic load: the compiler may not load it again), then bounded
     * before it indexes anything. */
    int32_t e = (int32_t)shmatari_load_acquire((const uint32_t *)&env_id[i]);
    if (e < 0 || (uint32_t)e >= h->num_envs ||
        !(c->env_flags[e] & SHMATARI_ENV_RUNNING)) {
      if (first_bad == n) first_bad = i;
      continue;
    }
    uint32_t rf = shmatari_load_acquire(&flags[i]); /* read once */
    if (shmatari_row_mismatch(c->env_flags[e], rf, h->autoreset_mode) != NULL) {
      if (first_bad == n) first_bad = i;
      continue;
    }
    uint8_t fl = (uint8_t)(c->env_flags[e] &
                           ~(SHMATARI_ENV_RUNNING | SHMATARI_ENV_COMMAND));
    if (!(rf & SHMATARI_FLAG_OBSERVED)) {
      int ended = __atomic_load_n(&term[i], __ATOMIC_RELAXED) ||
                  __atomic_load_n(&trunc[i], __ATOMIC_RELAXED);
      fl = (uint8_t)((fl & ~SHMATARI_ENV_LAST_ENDED) |
                     (ended ? SHMATARI_ENV_LAST_ENDED : 0));
      if (disabled)
        fl = (uint8_t)((fl & ~SHMATARI_ENV_ENDED) | (ended ? SHMATARI_ENV_ENDED : 0));
    }
    c->env_flags[e] = fl;
    c->pending--;
  }
  shmatari_settle(c);
  return first_bad;
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_CLIENT_STATE_H */
