/*
 * shmatari/client.h -- the client's calls: send, reset, wait (the API a trainer drives).
 * Part of the header-only C client; include "shmatari/shmatari.h", which
 * includes every part in order (docs/architecture.md names each part).
 */
#ifndef SHMATARI_CLIENT_H
#define SHMATARI_CLIENT_H

#include "shmatari/client_state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Observation shape of one env, as the bytes are laid out (obs_layout) and
 * as Python's client presents it: (stack_num, img_height, img_width) for
 * grayscale, (stack_num, img_height, img_width, 3) for channels-last RGB,
 * (stack_num * 3, img_height, img_width) for channels-first (planar) RGB.
 * Returns the number of dimensions (3 or 4). */
static inline int shmatari_obs_shape(const shmatari_client *c,
                                     uint32_t shape[4]) {
  const shmatari_geom *h = &c->geom;
  shape[0] = h->stack_num;
  shape[1] = h->img_height;
  shape[2] = h->img_width;
  shape[3] = h->channels;
  if (h->channels == 1) return 3;
  if (h->obs_layout == SHMATARI_OBS_CHANNELS_FIRST) {
    shape[0] = h->stack_num * h->channels;
    return 3;
  }
  return 4;
}

/* SHMATARI_OK in the process that attached c (c->pid), else _ERR_STATE:
 * a process forked from it holds a copy of c, but not the claim, and its
 * calls would take the parent's batches and post into its envs (the parent
 * would then read another's results as its own, one batch late, with no
 * error: an attacker's pass). A child attaches a client of its own once the
 * parent has detached; shmatari_detach in a child only unmaps. Clients
 * without a segment (shmatari_machine_open) are not checked. */
static inline int shmatari_check_process(shmatari_client *c) {
  int32_t self = (int32_t)getpid();
  if (c->hdr == NULL || self == c->pid) return SHMATARI_OK;
  return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_STATE,
                       "this client was attached by process %d; process %d "
                       "(forked from it) cannot use it: the claim is the "
                       "parent's. Attach a client of its own once the parent "
                       "has detached",
                       (int)c->pid, (int)self);
}

/* Whether the pool's claim word (the header's client_pid, read once) still
 * names this client. A client holds it from attach to detach, and no other
 * live process may take it (shmatari_claim); a word that reads otherwise
 * was rewritten by another process, which, or a third, can then attach in
 * this client's place and step the same envs (an attacker's pass,
 * 2026-12-05: the victim's next batch held the other's results). Returns
 * SHMATARI_OK, or _ERR_NOT_SHMATARI with the client BROKEN. */
static inline int shmatari_check_claim(shmatari_client *c) {
  if (c->hdr == NULL) return SHMATARI_OK;
  int32_t holder =
      (int32_t)shmatari_load_acquire((const uint32_t *)&c->hdr->client_pid);
  if (holder == c->pid) return SHMATARI_OK;
  shmatari_client_break(c);
  return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_NOT_SHMATARI,
                       "the pool's client word (client_pid) reads %d, not "
                       "this client's pid %d: another process rewrote it%s, "
                       "and this client can no longer tell its results from "
                       "another's",
                       (int)holder, (int)c->pid,
                       holder != 0 ? " or attached in this client's place" : "");
}

/* Whether env e's req_seq, read once, is the value this client last wrote
 * there (its own count, env_posted). Only a client writes req_seq, so
 * another value is another process's write: its worker would run, or has
 * run, a command nobody posted, or (a word put back) never runs the one
 * posted, and the env's results could no longer be matched to this
 * client's commands. With `all_states` 0, an env whose worker's state (read
 * once) is FAILED or EXITED is not judged: a worker that failed on a
 * command another process wrote (a bad action, a req_seq it refused) is
 * named by the pool's liveness check, with its traceback, and its
 * replacement answers what is in flight once. (Until 2026-12-06 every state
 * but READY was left out, and a state word written STARTING let a put-back
 * req_seq lose the env silently: an attacker's pass.) Returns 1 if judged
 * wrong, with the value read in *req. */
static inline int shmatari_posted_wrong(const shmatari_client *c, uint32_t e,
                                        int all_states, uint32_t *req) {
  const shmatari_geom *g = &c->geom;
  *req = shmatari_load_acquire(&shmatari_env(g, e)->req_seq); /* once */
  if (*req == c->env_posted[e]) return 0;
  if (all_states) return 1;
  uint32_t state = shmatari_load_acquire(&shmatari_worker(g, c->env_worker[e])->state);
  return state != SHMATARI_WORKER_FAILED && state != SHMATARI_WORKER_EXITED;
}

/* Breaks the client for env e's req_seq `req` (shmatari_posted_wrong);
 * `when` says when it was read. Returns _ERR_NOT_SHMATARI. */
static inline int shmatari_posted_fail(shmatari_client *c, uint32_t e,
                                       uint32_t req, const char *when) {
  shmatari_client_break(c);
  return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_NOT_SHMATARI,
                       "env %u's req_seq reads %u%s, but this client's last "
                       "command to it was number %u: another process wrote "
                       "the env's command words (its worker may have run a "
                       "command this client never posted, or never run the "
                       "one it posted), and the env's results can no longer "
                       "be matched to this client's commands",
                       e, req, when, c->env_posted[e]);
}

/* Before posting to n envs (env_ids, or envs 0..n-1 when NULL; none with a
 * command in flight): each env's req_seq is this client's own count
 * (shmatari_posted_wrong), else the client breaks (until 2026-12-06 the
 * client posted req_seq + 1 read back, and one write of it made every later
 * result of the env come one command late, with no error: an attacker's
 * pass). (ack_seq is not judged: it may lag the last result handed out, by
 * more than one command where a worker died between its row and its ack and
 * was replaced. A write that moves req_seq and puts it back, or jumps it, is
 * the worker's to refuse: it runs only the next number of its own count,
 * docs/layout.md "A step"; one put back before the worker saw it, the
 * waits catch: shmatari_check_running.) Returns SHMATARI_OK or
 * _ERR_NOT_SHMATARI. */
static inline int shmatari_check_posted(shmatari_client *c,
                                        const uint32_t *env_ids, uint32_t n) {
  const shmatari_geom *g = &c->geom;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t e = env_ids != NULL ? env_ids[i] : i, req;
    if (e >= g->num_envs) continue;
    if (shmatari_posted_wrong(c, e, 0, &req)) return shmatari_posted_fail(c, e, req, "");
  }
  return SHMATARI_OK;
}

/* While the client waits: every env with a command in flight
 * (SHMATARI_ENV_RUNNING) still has req_seq == the client's count
 * (shmatari_posted_wrong, whatever its worker's state: the waits' liveness
 * check names a failed worker first). A word put back to ack_seq before
 * the worker saw the command left it unrun for good; in a first-ready pool
 * the other envs kept filling batches, so no stall was ever seen, and the
 * env was lost from training with no error until the next full reset (an
 * attacker's pass, 2026-12-06). And, in a first-ready pool, every such env
 * whose worker says it answered (ack_seq, read once, is the client's count)
 * has its row among the positions not yet taken (this client's next batch
 * on, up to alloc_pos, read once after the acks: a row is complete before
 * its ack): alloc_pos moved back by another process made a worker write
 * over a row not yet taken, and that env's result was lost, silently (the
 * same pass). Run after each wait slice that found no batch and at each of
 * the waits' liveness checks (every SHMATARI_POLL_NS, even while batches
 * keep coming). Returns SHMATARI_OK or _ERR_NOT_SHMATARI (the client
 * broken). */
static inline int shmatari_check_running(shmatari_client *c) {
  const shmatari_geom *g = &c->geom;
  uint8_t *answered = c->call_mask; /* scratch, num_envs bytes: no call runs now */
  /* ordered pools' rows have fixed places (the stall and row checks) */
  const int skip_rows = shmatari_ordered(g) || answered == NULL;
  uint32_t waiting = 0;
  /* what shmatari_check_progress judges, from the same reads */
  uint8_t *inflight = skip_rows ? NULL : c->inflight_now;
  for (uint32_t e = 0; e < g->num_envs; e++) {
    uint32_t req;
    if (!skip_rows) answered[e] = 0;
    if (inflight != NULL) inflight[e] = 0;
    if (!(c->env_flags[e] & SHMATARI_ENV_RUNNING)) continue;
    if (shmatari_posted_wrong(c, e, 1, &req))
      return shmatari_posted_fail(c, e, req, " while this client waited for its result");
    if (skip_rows) continue;
    if (shmatari_load_acquire(&shmatari_env(g, e)->ack_seq) == c->env_posted[e]) {
      answered[e] = 1; /* once: this read decides the row check and progress */
      waiting++;
    } else if (inflight != NULL) {
      inflight[e] = 1;
    }
  }
  if (waiting == 0) return SHMATARI_OK;
  const uint64_t B = g->batch_size, begin = c->taken * B;
  const uint64_t end = shmatari_load_acquire64(&g->hdr->alloc_pos); /* once */
  const uint64_t span = end - begin; /* bounded before it is scanned */
  if (end >= begin && span <= (uint64_t)g->ring_depth * B) {
    for (uint64_t k = 0; k < span && waiting; k++) {
      int32_t e = (int32_t)shmatari_load_acquire(
          (const uint32_t *)shmatari_row_env_id(g, begin + k)); /* once */
      if (e >= 0 && (uint32_t)e < g->num_envs && answered[e]) {
        answered[e] = 0;
        waiting--;
      }
    }
  }
  if (waiting == 0) return SHMATARI_OK;
  uint32_t lost = 0;
  while (!answered[lost]) lost++;
  for (uint32_t e = 0; e < g->num_envs; e++) answered[e] = 0;
  shmatari_client_break(c);
  return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_NOT_SHMATARI,
                       "env %u's worker answered its command %u, but no row of "
                       "it is among the results not yet taken (positions %llu "
                       "to %llu): another process moved the header's alloc_pos "
                       "(or rewrote the rows), and the env's result was written "
                       "over",
                       lost, c->env_posted[lost], (unsigned long long)begin,
                       (unsigned long long)end);
}

/* A first-ready pool's wait, at each of its liveness checks (`now`: the
 * check's time), right after shmatari_check_running found nothing wrong:
 * whether a worker that holds commands of this client (an env
 * SHMATARI_ENV_RUNNING whose ack_seq is not the client's count, from the
 * read shmatari_check_running made: c->inflight_now) has answered none of
 * them for stall_ns or more (< 0: no limit). In an ordered pool a worker
 * that stops stops the batches, and the wait's timeout names it; in a
 * first-ready pool the other workers' results kept filling batches, and a
 * stopped worker's envs (SIGSTOP, an emulator stuck in a loop) were
 * dropped from training with no error, whatever the timeout (an
 * attacker's pass, 2026-12-06). A worker has answered when an env of it
 * that had a command in flight at the last check has none now, or has
 * been posted again (the client's own count moved: it posts only after
 * taking a result). Not from the worker's `steps` word, which any process
 * may bump (the next attacker's pass hid a stopped worker so); an ack_seq
 * written to look answered is caught by shmatari_check_running, from the
 * same read (no row of it). Returns SHMATARI_OK, or _ERR_TIMEOUT with
 * words in c->error and c->stalled = 1 + the worker (nothing changed: a
 * wait may go on; the worker's silence is counted afresh). Detection
 * comes between stall_ns and stall_ns plus two SHMATARI_POLL_NS after the
 * worker's last answer. */
static inline int shmatari_check_progress(shmatari_client *c, int64_t now,
                                          int64_t stall_ns) {
  const shmatari_geom *g = &c->geom;
  if (shmatari_ordered(g) || c->worker_since == NULL) return SHMATARI_OK;
  /* scratch, zeros between calls (shmatari_post): bit 1 a command in
   * flight, bit 2 an answer since the last check */
  uint8_t *seen = c->touched;
  for (uint32_t e = 0; e < g->num_envs; e++) {
    const uint32_t w = c->env_worker[e];
    const uint8_t inflight = c->inflight_now[e];
    if (c->check_inflight[e] && (!inflight || c->env_posted[e] != c->check_posted[e]))
      seen[w] |= 2;
    if (inflight) seen[w] |= 1;
    c->check_posted[e] = c->env_posted[e];
    c->check_inflight[e] = inflight;
  }
  uint32_t stalled = 0;
  for (uint32_t w = 0; w < g->num_workers; w++) {
    const int busy = seen[w] & 1, answered = seen[w] & 2;
    if (!busy || answered || c->worker_since[w] < 0)
      c->worker_since[w] = busy ? now : -1;
    else if (stall_ns >= 0 && now - c->worker_since[w] >= stall_ns && !stalled)
      stalled = w + 1;
    seen[w] = 0;
  }
  if (!stalled) return SHMATARI_OK;
  const uint32_t w = stalled - 1;
  const int64_t silent = now - c->worker_since[w];
  /* counted again from here: a wait called again after this error gets its
   * whole limit, as after a timeout (the review of 2026-12-06: one every
   * 0.1 s after the first) */
  c->worker_since[w] = now;
  c->stalled = stalled;
  return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_TIMEOUT,
                       "worker %u (pid %d, as the segment names it) has "
                       "answered none of this client's commands for %.3f s "
                       "(the other workers' results kept coming)",
                       w, (int)(int32_t)shmatari_load_acquire(
                              (const uint32_t *)&shmatari_worker(g, w)->pid),
                       (double)silent / SHMATARI_SECOND);
}

/* Forgets the workers' silences counted so far (shmatari_check_progress):
 * after a liveness error, or once dead workers were replaced, a
 * replacement is not counted silent from before it started. */
static inline void shmatari_forget_progress(shmatari_client *c) {
  if (c->worker_since == NULL) return;
  for (uint32_t w = 0; w < c->geom.num_workers; w++) c->worker_since[w] = -1;
}

/* shmatari_send as the call `call` names it in refusals: with
 * SHMATARI_CALL_STEP, also refused (nothing posted) unless the envs running
 * afterwards make a batch to wait for (shmatari_check_step), as a step that
 * sends and then waits needs. */
static inline int shmatari_send_call(shmatari_client *c, int call,
                                     const int32_t *actions,
                                     const int32_t *env_ids, uint32_t n) {
  int forked = shmatari_check_process(c);
  if (forked != SHMATARI_OK) return forked;
  if (c->state != SHMATARI_CLIENT_BROKEN && c->state != SHMATARI_CLIENT_DETACHED) {
    int claim = shmatari_check_claim(c);
    if (claim != SHMATARI_OK) return claim;
  }
  if (actions == NULL)
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                         "actions is NULL");
  const int32_t *ids = env_ids, *acts = actions;
  if (c->call_actions != NULL) { /* an open client */
    const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
    if (n > c->geom.num_envs && env_ids == NULL)
      return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                           "%s: %u actions for %u envs (actions must have "
                           "shape (%u,))", k[call], n, c->geom.num_envs,
                           c->geom.num_envs);
    if (n > c->geom.num_envs)
      return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                           "%s: %u env_ids for %u envs: env_ids lists each "
                           "env at most once", k[call], n, c->geom.num_envs);
    /* Read once: env_ids (b.env_id of a batch) and actions may point into
     * the segment, which another process may change under us; the copies
     * are checked, then posted. */
    if (env_ids != NULL) {
      memcpy(c->call_env_ids, env_ids, (size_t)n * sizeof(int32_t));
      ids = c->call_env_ids;
    }
    memcpy(c->call_actions, actions, (size_t)n * sizeof(int32_t));
    acts = c->call_actions;
  }
  int r = shmatari_accept_send(c, call, acts, ids, n);
  if (r == SHMATARI_OK && c->env_posted != NULL)
    r = shmatari_check_posted(c, (const uint32_t *)ids, n);
  if (r == SHMATARI_OK)
    shmatari_post(&c->geom, c->env_worker, c->touched, c->env_posted,
                  (const uint32_t *)ids, n, acts, SHMATARI_CMD_STEP);
  return r;
}

/* Steps n envs: actions[i] (0..num_actions-1) for env env_ids[i], or for env
 * i when env_ids is NULL (then n MUST be num_envs). Envs whose episode ended
 * reset instead (next-step autoreset). Refused (nothing posted) in states
 * other than IDLE, PARTIAL and WAITING, for an env still running, and under
 * autoreset_mode DISABLED for an env whose episode ended (a bad argument is
 * named before an env's state), and in a process forked from the client's
 * (shmatari_check_process). Returns SHMATARI_OK, _ERR_INVALID or
 * _ERR_STATE. */
static inline int shmatari_send(shmatari_client *c, const int32_t *actions,
                                const int32_t *env_ids, uint32_t n) {
  return shmatari_send_call(c, SHMATARI_CALL_SEND, actions, env_ids, n);
}

/* Internal (not part of the documented calls): shmatari_release_batch for
 * callers that checked the process already (one getpid() a call:
 * shmatari_next_batch, shmatari_reset_seeded, and Python's client_release
 * right after the next_batch that took the batch). */
static inline void shmatari_release_held(shmatari_client *c) {
  if (c->holding) {
    shmatari_consume_batch(&c->geom, c->taken);
    c->taken++;
    c->holding = 0;
  }
}

/* Consumes the batch the last wait returned (its slot may be written
 * again); nothing if none is held, or in a process forked from the client's
 * (the batch is the parent's: shmatari_check_process). */
static inline void shmatari_release_batch(shmatari_client *c) {
  if (c->holding && shmatari_check_process(c) == SHMATARI_OK)
    shmatari_release_held(c);
}

/* Resets envs: every env when mask is NULL, else each env e with mask[e]
 * != 0 (num_envs bytes). cmd: SHMATARI_CMD_RESET (each env keeps its random
 * stream) or, every env only, _RESEED (re-derives each env's stream from
 * seed_words as they are when its worker serves it: a seed below 2**128,
 * words 2 and 3 zero, else SHMATARI_ERR_INVALID; shmatari_reseed writes
 * them at the right time, and is the call to use). The first observations
 * come back through waits; afterwards every env is running.
 *
 * A reset of every env is the way back from every state but BROKEN: it
 * first drops what is in flight (the batch held, the commands posted and
 * their results not taken: shmatari_drain, shmatari_drop_results), waiting
 * up to timeout_ns (< 0: no limit) for the commands to finish.
 * A masked reset leaves running envs running: no masked env may be running;
 * the envs neither masked nor running republish their observation
 * (CMD_OBSERVE), so that every env has one result coming. Under
 * autoreset_mode DISABLED this is how ended envs restart while others run.
 *
 * Returns SHMATARI_OK; _ERR_INVALID or _ERR_STATE (nothing changed);
 * _ERR_INTERRUPTED during a drain (nothing dropped yet: call again);
 * _ERR_TIMEOUT; or a liveness error. */
static inline int shmatari_reset_seeded(shmatari_client *c, uint32_t cmd,
                                        const uint8_t *mask,
                                        const uint64_t *words,
                                        int64_t timeout_ns);
static inline int shmatari_reset_envs(shmatari_client *c, uint32_t cmd,
                                      const uint8_t *mask, int64_t timeout_ns) {
  return shmatari_reset_seeded(c, cmd, mask, NULL, timeout_ns);
}

/* Resets every env with new random streams: each env's stream re-derived
 * from `words` (SHMATARI_SEED_WORDS words, least significant first: a seed
 * below 2**128, words 2 and 3 zero, else SHMATARI_ERR_INVALID), as
 * shmatari_reset_envs(c, SHMATARI_CMD_RESEED, NULL, timeout_ns) does. The
 * words go into seed_words only once no command is in flight: a worker
 * reads seed_words when it serves a RESEED, so one still in flight from an
 * earlier reseed would take words written before the drain. On
 * _ERR_TIMEOUT or _ERR_INTERRUPTED nothing changed, the words included. */
static inline int shmatari_reseed(shmatari_client *c, const uint64_t *words,
                                  int64_t timeout_ns) {
  return shmatari_reset_seeded(c, SHMATARI_CMD_RESEED, NULL, words, timeout_ns);
}

/* shmatari_reset_envs; with `words` (a RESEED of every env), the seed words
 * written once the drain is over (shmatari_reseed). */
static inline int shmatari_reset_seeded(shmatari_client *c, uint32_t cmd,
                                        const uint8_t *mask,
                                        const uint64_t *words,
                                        int64_t timeout_ns) {
  int r = shmatari_check_process(c);
  if (r != SHMATARI_OK) return r;
  if (mask != NULL && c->call_mask != NULL) {
    /* Read once: the mask may point into shared memory; the checks and both
     * passes below use this copy. */
    memcpy(c->call_mask, mask, c->geom.num_envs);
    mask = c->call_mask;
  }
  r = shmatari_check_reset(c, cmd, mask);
  if (r != SHMATARI_OK) return r;
  const shmatari_geom *h = &c->geom;
  if (cmd == SHMATARI_CMD_RESEED) {
    /* Seeds are below 2**128 (seeding.py says why); a worker fails on a
     * larger one, so it is refused here first, nothing changed. */
    uint64_t high = words != NULL
                        ? words[2] | words[3]
                        : *(volatile uint64_t *)&h->hdr->seed_words[2] |
                              *(volatile uint64_t *)&h->hdr->seed_words[3];
    const char *const *names = c->names != NULL ? c->names : shmatari_call_names_c;
    /* a C client's reseed is named as the call it made (Python's is reset()) */
    const char *call = words != NULL && names == shmatari_call_names_c
                           ? "shmatari_reseed" : names[SHMATARI_CALL_RESET];
    if (high != 0)
      return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                           "%s: seed_words hold a seed of 2**128 or more "
                           "(words 2 and 3 must be 0): seeds are below 2**128",
                           call);
  }
  if (mask == NULL) {
    shmatari_release_held(c);
    if (c->pending != 0) {
      r = shmatari_drain(h, timeout_ns, 1, c->error, sizeof c->error);
      if (r != SHMATARI_OK) return r;
      c->taken = shmatari_drop_results(h);
    }
    r = shmatari_check_posted(c, NULL, h->num_envs);
    if (r != SHMATARI_OK) return r;
    if (cmd == SHMATARI_CMD_RESEED && words != NULL) /* published by the posts' release */
      for (uint32_t i = 0; i < SHMATARI_SEED_WORDS; i++)
        h->hdr->seed_words[i] = words[i];
    shmatari_post(h, c->env_worker, c->touched, c->env_posted, NULL, h->num_envs,
                  NULL, cmd);
    shmatari_accept_reset(c, NULL);
    return SHMATARI_OK;
  }
  for (uint32_t e = 0; e < h->num_envs; e++) {
    if (c->env_flags[e] & SHMATARI_ENV_RUNNING) continue;
    r = shmatari_check_posted(c, &e, 1);
    if (r != SHMATARI_OK) return r;
  }
  for (int pass = 0; pass < 2; pass++) {
    /* pass 0: the masked envs reset; pass 1: the others republish. */
    for (uint32_t e = 0; e < h->num_envs; e++) {
      if ((mask[e] != 0) != (pass == 0) ||
          (c->env_flags[e] & SHMATARI_ENV_RUNNING))
        continue;
      uint32_t id = e;
      shmatari_post(h, c->env_worker, c->touched, c->env_posted, &id, 1, NULL,
                    pass == 0 ? cmd : (uint32_t)SHMATARI_CMD_OBSERVE);
    }
  }
  shmatari_accept_reset(c, mask);
  return SHMATARI_OK;
}

/* How long shmatari_reset waits for the commands in flight to finish: 60 s,
 * as Python's reset() (a worker stopped with SIGSTOP, or a segment another
 * process scribbled on, would otherwise keep it waiting for good). Define it
 * before including the header to change it; shmatari_reset_envs takes any
 * timeout, -1 for none. */
#ifndef SHMATARI_RESET_TIMEOUT_NS
#define SHMATARI_RESET_TIMEOUT_NS 60000000000LL
#endif

/* Resets every env (each keeps its random stream), first dropping whatever
 * is in flight, waiting up to SHMATARI_RESET_TIMEOUT_NS for it
 * (_ERR_TIMEOUT then, nothing dropped: call again to wait longer); the
 * first observations come back through shmatari_wait. */
static inline int shmatari_reset(shmatari_client *c) {
  return shmatari_reset_envs(c, SHMATARI_CMD_RESET, NULL,
                             SHMATARI_RESET_TIMEOUT_NS);
}

/* (1.3) In a pool of batch_order FIXED, the next batch (index c->taken) is
 * group taken % G, envs g, g + G, g + 2G, ... (G = num_envs / batch_size):
 * SHMATARI_OK if every one of them is running, else _ERR_STATE naming the
 * first that is not (a wait would never end). Always OK in other pools. */
static inline int shmatari_check_group(shmatari_client *c) {
  uint32_t e = shmatari_group_idle(c);
  if (e == c->geom.num_envs) return SHMATARI_OK;
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  uint32_t G = c->geom.num_envs / c->geom.batch_size;
  uint32_t group = (uint32_t)(c->taken % G);
  return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_STATE,
                       "%s refused: batches come in a fixed order "
                       "(batch_order 'fixed'), and the next, batch %llu, is "
                       "envs %u, %u, ... (from %u in steps of %u); env %u of "
                       "it was not sent a command: %s to it first",
                       k[SHMATARI_CALL_WAIT], (unsigned long long)c->taken,
                       group, group + G, group, G, e, k[SHMATARI_CALL_SEND]);
}

/* Field f (enum shmatari_field) of the batch held: batch_size entries of
 * its type, in the client's private copy of the rows (c->batch_fields,
 * written by shmatari_next_batch), valid until the next wait, reset of
 * every env (which releases the batch held) or detach. */
static inline const void *shmatari_batch_fields(const shmatari_client *c,
                                                unsigned f) {
  const shmatari_geom *h = &c->geom;
  return c->batch_fields + (h->slot_field_offset[f] - h->slot_field_offset[0]);
}

/* Field f of the final records of the batch held (same-step pools), in the
 * client's private copy that shmatari_wait makes: batch_size entries, as
 * shmatari_batch_fields. */
static inline const void *shmatari_batch_final_fields(const shmatari_client *c,
                                                      unsigned f) {
  const shmatari_geom *h = &c->geom;
  return c->batch_fields + (h->slot_obs_offset - h->slot_field_offset[0]) +
         (h->slot_field_offset[f] - h->slot_field_offset[0]);
}

/* shmatari_next_batch_within's wait for batch c->taken to fill: in slices
 * of at most SHMATARI_POLL_NS, each followed, where the wait ran its
 * liveness check, by the client's own checks of the envs in flight
 * (shmatari_check_running, shmatari_check_progress) and, where no batch
 * came, by whether one still can (shmatari_check_stall). Returns what
 * shmatari_next_batch_within returns before it takes the batch. */
static inline int shmatari_await_batch(shmatari_client *c, int64_t timeout_ns,
                                       int64_t stall_ns) {
  const shmatari_geom *h = &c->geom;
  int r;
  /* In slices of at most SHMATARI_POLL_NS: after each that found no batch,
   * whether one can still come (shmatari_check_stall). A timeout within one
   * slice (Python's and xla's waits slice themselves) reads no clock here. */
  const int one_slice = timeout_ns >= 0 && timeout_ns <= SHMATARI_POLL_NS;
  const int64_t deadline = one_slice ? -1 : shmatari_deadline(timeout_ns);
  for (;;) {
    int64_t slice = one_slice ? timeout_ns : SHMATARI_POLL_NS;
    if (deadline >= 0) {
      int64_t left = deadline - shmatari_now_ns();
      slice = left < 0 ? 0 : (left < slice ? left : slice);
    }
    const int64_t checked = c->next_check_ns;
    r = shmatari_wait_batch(h, c->taken, c->spin_ns, c->spin_mode, slice,
                            &c->next_check_ns, c->error, sizeof c->error);
    /* The wait ran its liveness check (every SHMATARI_POLL_NS, even while
     * batches keep coming): the commands in flight with it, with no clock
     * read of their own. */
    const int ran = (r == SHMATARI_OK || r == SHMATARI_ERR_TIMEOUT) &&
                    c->next_check_ns != checked;
    if (ran) {
      int bad = shmatari_check_running(c);
      if (bad == SHMATARI_OK) /* the check's time: no clock read here */
        bad = shmatari_check_progress(c, c->next_check_ns - SHMATARI_POLL_NS,
                                      stall_ns);
      if (bad != SHMATARI_OK) return bad;
    }
    if (r != SHMATARI_OK && r != SHMATARI_ERR_TIMEOUT &&
        r != SHMATARI_ERR_INTERRUPTED)
      shmatari_forget_progress(c); /* a worker died: its owner may replace it */
    if (r != SHMATARI_ERR_TIMEOUT) break;
    r = ran ? SHMATARI_OK : shmatari_check_running(c);
    if (r == SHMATARI_OK) r = shmatari_check_stall(c);
    if (r != SHMATARI_OK) {
      shmatari_client_break(c);
      return r;
    }
    if (one_slice || (deadline >= 0 && shmatari_now_ns() >= deadline))
      return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_TIMEOUT,
                           "no batch within %.3f s",
                           (double)timeout_ns / SHMATARI_SECOND);
  }
  return r;
}

/* Breaks the client at row `bad` of the batch held, which no worker wrote
 * (`why`: how the row fails; `mismatch`: or the command its flags do not
 * answer, shmatari_row_mismatch), and returns SHMATARI_ERR_NOT_SHMATARI
 * with words that name what another process may have rewritten. */
static inline int shmatari_refuse_row(shmatari_client *c, uint32_t bad,
                                      const char *why, const char *mismatch) {
  const shmatari_geom *h = &c->geom;
  const int32_t *ids =
      (const int32_t *)shmatari_batch_fields(c, SHMATARI_FIELD_ENV_ID);
  int32_t e = __atomic_load_n(&ids[bad], __ATOMIC_RELAXED);
  shmatari_client_break(c);
  /* In a first-ready pool a row written over (alloc_pos moved back: the
   * attacker's pass of 2026-12-06) shows as either. */
  const char *also = shmatari_ordered(h) ? "" : ", or moved the header's alloc_pos back";
  /* -1: a row cleared for its next use and not written yet, taken because
   * the slot's count said it was full (an attacker's pass, 2026-12-06,
   * found the words blaming only the env ids) */
  const char *early = e == -1 ? ", or raised the slot's done_count before its rows "
                                "were written" : "";
  if (mismatch != NULL)
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_NOT_SHMATARI,
                         "batch %llu's row %u, env %d's, %s: the worker ran "
                         "another command than this client posted (another "
                         "process rewrote the env's command word or the "
                         "row%s)",
                         (unsigned long long)c->taken, bad, (int)e, mismatch, also);
  return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_NOT_SHMATARI,
                       "batch %llu's row %u names env %d, %s: no worker "
                       "wrote it (another process rewrote the batch's env "
                       "ids%s%s)",
                       (unsigned long long)c->taken, bad, (int)e, why, early,
                       also);
}

/* Checks the rows of the batch just copied (c->batch_fields) against the
 * commands this client has in flight, and settles the client's state on
 * them (shmatari_accept_rows). Returns SHMATARI_OK, or
 * SHMATARI_ERR_NOT_SHMATARI with the client BROKEN at the first row no
 * worker wrote. */
static inline int shmatari_accept_batch(shmatari_client *c) {
  const shmatari_geom *h = &c->geom;
  const int32_t *ids =
      (const int32_t *)shmatari_batch_fields(c, SHMATARI_FIELD_ENV_ID);
  /* The first row no worker wrote, and why, in the private copy. */
  uint32_t bad = h->batch_size;
  char why[160] = "";
  /* the row's flags do not answer its env's command (shmatari_row_mismatch) */
  const char *mismatch = NULL;
  if (shmatari_ordered(h)) {
    /* An ordered pool's batch k is group k % G, its row i env
     * k % G + i * G (shmatari_env_rank; env i in a synchronous pool): a row
     * naming another env, even one of the pool with a command in flight,
     * was written by no worker. Two rows' ids swapped went to the trainer
     * with no error (an attacker's pass, 2026-12-06). */
    const uint32_t G = shmatari_groups(h), first = (uint32_t)(c->taken % G);
    for (uint32_t i = 0; i < h->batch_size && bad == h->batch_size; i++)
      if (__atomic_load_n(&ids[i], __ATOMIC_RELAXED) != (int32_t)(first + i * G)) {
        bad = i;
        snprintf(why, sizeof why,
                 "where this pool's batches come in a fixed order (%s) and "
                 "that row is env %u's",
                 h->batch_size == h->num_envs ? "a synchronous pool: row i is env i"
                                              : "batch_order 'fixed'",
                 first + i * G);
      }
  }
  if (bad == h->batch_size) {
    /* A row no worker wrote: handed out, the batch would name an env twice
     * (and leave another's result untaken) or one outside the pool, and
     * the client's state would no longer match what the caller holds (an
     * attacker's pass, 2026-12-05: env_id [0, 0, 2, 3] went to the
     * trainer with no error). */
    bad = shmatari_accept_rows(
        c, ids, (const uint32_t *)shmatari_batch_fields(c, SHMATARI_FIELD_FLAGS),
        (const uint8_t *)shmatari_batch_fields(c, SHMATARI_FIELD_TERMINATED),
        (const uint8_t *)shmatari_batch_fields(c, SHMATARI_FIELD_TRUNCATED),
        h->batch_size);
    if (bad < h->batch_size) {
      int32_t e = __atomic_load_n(&ids[bad], __ATOMIC_RELAXED);
      /* a skipped row left its env's bits as they were */
      if (e >= 0 && (uint32_t)e < h->num_envs &&
          (c->env_flags[e] & SHMATARI_ENV_RUNNING))
        mismatch = shmatari_row_mismatch(
            c->env_flags[e],
            __atomic_load_n((const uint32_t *)shmatari_batch_fields(
                                c, SHMATARI_FIELD_FLAGS) + bad,
                            __ATOMIC_RELAXED),
            h->autoreset_mode);
      snprintf(why, sizeof why, "%s",
               e < 0 || (uint32_t)e >= h->num_envs
                   ? "outside the pool"
                   : "which had no command in flight (or one named by an "
                     "earlier row; a worker answers each command once)");
    }
  }
  return bad < h->batch_size ? shmatari_refuse_row(c, bad, why, mismatch)
                             : SHMATARI_OK;
}

/* Consumes the batch held, then waits up to timeout_ns (< 0: no limit) for
 * the next one (index c->taken, held until the next wait, reset or
 * shmatari_release_batch) and marks its envs no longer running (under
 * autoreset_mode DISABLED, an env whose step ended its episode ENDED).
 * Returns SHMATARI_OK; _ERR_STATE (fewer than batch_size envs running, a
 * fixed-order pool's next group not all running: shmatari_check_group, or
 * not IDLE/PARTIAL/WAITING, or a process forked from the client's:
 * shmatari_check_process, nothing released); _ERR_TIMEOUT or _ERR_INTERRUPTED (call again to
 * go on waiting: nothing changed; the call again waits its own timeout_ns, so
 * a caller signalled more often than that, by a profiler's SIGPROF or its own
 * timers, keeps its own deadline across calls); _ERR_SERVER_DEAD / _ERR_WORKER /
 * _ERR_CLOSED, each within timeout_ns plus at most SHMATARI_POLL_NS; or
 * _ERR_NOT_SHMATARI within SHMATARI_POLL_NS, whatever timeout_ns, once every
 * env in flight has answered and the batch is still not full
 * (shmatari_check_stall), or at once for a batch with a row no worker wrote
 * (an env_id outside the pool or with no command in flight:
 * shmatari_accept_rows; in an ordered pool, shmatari_ordered, any env but
 * the row's own): the client is then BROKEN. In a first-ready pool, also
 * _ERR_TIMEOUT (nothing changed, c->stalled set) when a worker that holds
 * commands of this client has published nothing for stall_ns (< 0: no
 * limit; shmatari_check_progress), even while other workers' results fill
 * batches. Callers that wait in slices (Python's client, xla()) pass each
 * slice as timeout_ns and their whole wait's limit as stall_ns;
 * shmatari_next_batch passes timeout_ns as both. */
static inline int shmatari_next_batch_within(shmatari_client *c,
                                             int64_t timeout_ns,
                                             int64_t stall_ns) {
  c->stalled = 0;
  int r = shmatari_check_process(c);
  if (r != SHMATARI_OK) return r;
  shmatari_release_held(c);
  if (c->state == SHMATARI_CLIENT_PARTIAL && c->pending >= c->geom.batch_size)
    r = shmatari_check_group(c); /* fixed order: the reason it is not WAITING */
  if (r == SHMATARI_OK)
    r = shmatari_check_state(c, SHMATARI_CALL_WAIT, 1u << SHMATARI_CLIENT_WAITING);
  if (r != SHMATARI_OK) return r;
  r = shmatari_await_batch(c, timeout_ns, stall_ns);
  if (r != SHMATARI_OK) return r;
  r = shmatari_check_claim(c); /* a batch taken while another client stepped */
  if (r != SHMATARI_OK) return r;
  /* Read once: the rows are copied to private memory, and the state
   * machine and every caller read that copy (shmatari_batch_fields): a row
   * another process changes after this copy changes nothing the client
   * decides or hands out. */
  const shmatari_geom *h = &c->geom;
  const char *slot = shmatari_slot(h, c->taken);
  memcpy(c->batch_fields, slot + h->slot_field_offset[0],
         h->slot_obs_offset - h->slot_field_offset[0]);
  c->holding = 1; /* before accept_rows: the state it settles on counts the
                     batch held (a fixed-order pool's next group) */
  return shmatari_accept_batch(c);
}

/* shmatari_next_batch_within with stall_ns = timeout_ns where it is
 * positive (a wait with a limit: a stalled worker of a first-ready pool
 * ends it as the batch's timeout would), else none (a poll, or no limit). */
static inline int shmatari_next_batch(shmatari_client *c, int64_t timeout_ns) {
  return shmatari_next_batch_within(c, timeout_ns, timeout_ns > 0 ? timeout_ns : -1);
}

/* Consumes the batch the last call returned, then waits up to timeout_ns
 * (< 0: no limit) for the next one and points *out at it
 * (shmatari_next_batch). Its envs may be sent commands again at once.
 * In a same-step pool, also copies the batch's final records' fields and
 * checks each flagged row's (SHMATARI_FLAG_FINAL) env_id against its row's:
 * _ERR_NOT_SHMATARI, the client BROKEN, where one differs.
 * Returns what shmatari_next_batch does; after a liveness error the client
 * is BROKEN. *out is cleared first (size 0, every pointer NULL) and stays
 * so unless SHMATARI_OK: a caller that reads it after a failed wait reads
 * no garbage (a C++ user's pass, 2026-12-06: an unchecked first wait that
 * timed out had the next shmatari_send read stack memory as env ids; and
 * gcc's -Wmaybe-uninitialized refused callers built with -Werror).
 * stall_ns: as shmatari_next_batch_within's (a trainer that waits in
 * slices, to run its signal flags between them, passes each slice as
 * timeout_ns and its whole limit as stall_ns; shmatari_wait passes
 * timeout_ns as both). */
static inline int shmatari_wait_within(shmatari_client *c, shmatari_batch *out,
                                       int64_t timeout_ns, int64_t stall_ns) {
  memset(out, 0, sizeof *out);
  int r = shmatari_next_batch_within(c, timeout_ns, stall_ns);
  if (r == SHMATARI_ERR_SERVER_DEAD || r == SHMATARI_ERR_WORKER ||
      r == SHMATARI_ERR_CLOSED)
    shmatari_client_break(c);
  if (r != SHMATARI_OK) return r;
  const shmatari_geom *h = &c->geom;
  const char *slot = shmatari_slot(h, c->taken);
  out->index = c->taken;
  out->size = h->batch_size;
  out->obs = (const uint8_t *)(slot + h->slot_obs_offset);
  out->obs_stride = h->obs_env_bytes;
  const char *fin = h->slot_final_offset ? slot + h->slot_final_offset : NULL;
  if (fin != NULL) {
    /* Read once, as the rows: the final records' fields copied, then each
     * flagged row's checked against the row's env (the copies'). Until
     * 2026-12-06 final_field pointed into the segment, unchecked, where
     * Python's client copied and checked them (an attacker's pass). */
    const uint64_t bytes = h->slot_obs_offset - h->slot_field_offset[0];
    memcpy(c->batch_fields + bytes, fin + h->slot_field_offset[0], bytes);
    const int32_t *ids =
        (const int32_t *)shmatari_batch_fields(c, SHMATARI_FIELD_ENV_ID);
    const uint32_t *flags =
        (const uint32_t *)shmatari_batch_fields(c, SHMATARI_FIELD_FLAGS);
    const int32_t *final_ids =
        (const int32_t *)shmatari_batch_final_fields(c, SHMATARI_FIELD_ENV_ID);
    for (uint32_t i = 0; i < h->batch_size; i++) {
      if (!(flags[i] & SHMATARI_FLAG_FINAL) || final_ids[i] == ids[i]) continue;
      memset(out, 0, sizeof *out); /* as every failed wait leaves it */
      shmatari_client_break(c);
      return shmatari_fail(
          c->error, sizeof c->error, SHMATARI_ERR_NOT_SHMATARI,
          "batch %llu's row %u holds a final record of env %d, not of its "
          "row's env %d: no worker wrote it (another process rewrote the "
          "batch's final records)",
          (unsigned long long)c->taken, i, (int)final_ids[i], (int)ids[i]);
    }
  }
  out->final_obs = fin ? (const uint8_t *)(fin + h->slot_obs_offset) : NULL;
  for (unsigned f = 0; f < SHMATARI_FIELD_COUNT; f++) {
    out->field[f] = shmatari_batch_fields(c, f); /* the private copy */
    out->final_field[f] = fin ? shmatari_batch_final_fields(c, f) : NULL;
  }
  out->env_id = (const int32_t *)out->field[SHMATARI_FIELD_ENV_ID];
  out->reward = (const float *)out->field[SHMATARI_FIELD_REWARD];
  out->terminated = (const uint8_t *)out->field[SHMATARI_FIELD_TERMINATED];
  out->truncated = (const uint8_t *)out->field[SHMATARI_FIELD_TRUNCATED];
  return SHMATARI_OK;
}

/* shmatari_wait_within with stall_ns = timeout_ns where it is positive
 * (none for a poll or no limit), as shmatari_next_batch. */
static inline int shmatari_wait(shmatari_client *c, shmatari_batch *out,
                                int64_t timeout_ns) {
  return shmatari_wait_within(c, out, timeout_ns, timeout_ns > 0 ? timeout_ns : -1);
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_CLIENT_H */
