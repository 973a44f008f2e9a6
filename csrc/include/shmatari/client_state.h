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

/* One batch of results, pointing into the segment. Valid until the next
 * shmatari_wait or shmatari_detach. Element i of every array belongs to env
 * env_id[i]; in a synchronous pool (batch_size == num_envs) env_id[i] == i,
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
   * step that ended the episode, whose row holds the reset that followed. */
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
  SHMATARI_CLIENT_BROKEN = 5       /* a worker failed, or the server died or
                                      is closing: only detach */
};

/* Per-env bits of shmatari_client.env_flags. */
#define SHMATARI_ENV_RUNNING 1u /* a command posted, its result not returned */
#define SHMATARI_ENV_ENDED 2u   /* autoreset_mode DISABLED: its last step ended
                                   the episode; only a reset restarts it */
#define SHMATARI_ENV_LISTED 4u  /* scratch: listed in the call being checked */

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
    "send()", "recv()", "reset()", "reset(options={'reset_mask': mask})",
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
  uint32_t *env_worker; /* per env: the worker that owns it */
  uint8_t *touched;     /* scratch: one byte per worker */
  /* Private copies of a call's arguments, num_envs entries each: env ids,
   * actions and reset masks may point into the segment (b.env_id of a
   * batch), where another process may change them between the check and the
   * use; each call copies them here once, then checks and uses the copy. */
  int32_t *call_env_ids;
  int32_t *call_actions;
  uint8_t *call_mask;
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
  uint32_t b = c->hdr != NULL ? c->geom.batch_size : 0;
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
      snprintf(out, len, "; the pool is broken (a worker failed, or the "
               "server died or is closing): %s leaves that state",
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
  if (c->hdr != NULL) c->state = SHMATARI_CLIENT_BROKEN;
}

/* Frees the client's bookkeeping (not the mapping nor the claim: see
 * shmatari_detach); c is DETACHED afterwards. Safe to call twice. */
static inline void shmatari_client_close(shmatari_client *c) {
  free(c->env_flags);
  free(c->env_worker);
  free(c->touched);
  free(c->call_env_ids);
  free(c->call_actions);
  free(c->call_mask);
  c->hdr = NULL;
  memset(&c->geom, 0, sizeof c->geom);
  c->num_actions = 0;
  c->env_flags = NULL;
  c->env_worker = NULL;
  c->touched = NULL;
  c->call_env_ids = NULL;
  c->call_actions = NULL;
  c->call_mask = NULL;
  c->pending = 0;
  c->holding = 0;
  c->state = SHMATARI_CLIENT_DETACHED;
}

/* Starts the client's bookkeeping on the segment of checked geometry g
 * (shmatari_geom_load), mapped, claimed and recovered (shmatari_attach does
 * all of it; shmatari's Python client maps the segment itself and calls
 * this). Copies *g into c->geom: nothing after reads a size or offset from
 * the segment. Reads num_actions once (written by worker 0 before the pool
 * ran), bounded by SHMATARI_MAX_ACTIONS (0 if above: every action refused).
 * c->pid, spin settings and names stay as the caller set them. Returns
 * SHMATARI_OK (state NEEDS_RESET), or _ERR_SYSTEM / _ERR_NOT_SHMATARI (c
 * left DETACHED). */
static inline int shmatari_client_open(shmatari_client *c,
                                       const shmatari_geom *g) {
  shmatari_header *h = g->hdr;
  c->geom = *g;
  c->hdr = h;
  c->num_actions = *(volatile uint32_t *)&h->num_actions;
  if (c->num_actions > SHMATARI_MAX_ACTIONS) c->num_actions = 0;
  c->env_flags = (uint8_t *)calloc(g->num_envs, 1);
  c->env_worker = (uint32_t *)calloc(g->num_envs, sizeof(uint32_t));
  c->touched = (uint8_t *)calloc(g->num_workers, 1);
  c->call_env_ids = (int32_t *)calloc(g->num_envs, sizeof(int32_t));
  c->call_actions = (int32_t *)calloc(g->num_envs, sizeof(int32_t));
  c->call_mask = (uint8_t *)calloc(g->num_envs, 1);
  int r = SHMATARI_OK;
  if (c->env_flags == NULL || c->env_worker == NULL || c->touched == NULL ||
      c->call_env_ids == NULL || c->call_actions == NULL || c->call_mask == NULL)
    r = shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_SYSTEM,
                      "out of memory");
  else
    r = shmatari_env_workers(&c->geom, c->env_worker, c->error,
                             sizeof c->error);
  if (r != SHMATARI_OK) {
    shmatari_client_close(c);
    return r;
  }
  c->taken = shmatari_load_acquire64(&h->consumed_batches);
  c->pending = 0;
  c->holding = 0;
  c->state = SHMATARI_CLIENT_NEEDS_RESET;
  c->error[0] = 0;
  return SHMATARI_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_CLIENT_STATE_H */
