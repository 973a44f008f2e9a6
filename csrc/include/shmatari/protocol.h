/*
 * shmatari/protocol.h -- the ring protocol: recovery, drain, post, wait and consume.
 * Part of the header-only C client; include "shmatari/shmatari.h", which
 * includes every part in order (docs/architecture.md names each part).
 */
#ifndef SHMATARI_PROTOCOL_H
#define SHMATARI_PROTOCOL_H

#include "shmatari/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Recovery. A worker publishes each result in this order (_publish in the
 * worker loop, src/shmatari/_core_worker.pxi), and both recoveries below
 * rely on it:
 *   1. the row's fields and observation (and, same-step, its final record);
 *   2. the env's `results` count (release);
 *   3. the row's env_id (release): from here on the row is complete;
 *   4. the slot's done_count (fetch-add), waking the client when it fills;
 *   5. the env's ack_seq (release), by the caller: the command is answered.
 * So once an env's ack_seq equals its req_seq, steps 1-4 of its result are
 * visible: a new client (a dead client's successor, or a reset that drops
 * what is in flight) drains, then drops what was not taken
 * (shmatari_recover). And a worker that died between two steps leaves each
 * row it began either complete (env_id set; the done_count bump or the
 * ack_seq may be lost) or a hole (reserved in an asynchronous pool, env_id
 * still -1): what its replacement must answer (shmatari_recover_workers).
 */

/* Makes the ring consistent after the workers owning the envs with
 * dead_env[e] != 0 (num_envs bytes) died, and says what their replacements
 * must publish first. The caller MUST call it once every other worker is
 * idle (no command of theirs in flight) and before the replacements start;
 * the client MUST NOT post meanwhile (the owner calls it from inside the
 * client's wait).
 *  - Every slot not yet taken gets done_count = its complete rows (a lost
 *    bump is restored).
 *  - Which dead env has a command in flight is the client's own record:
 *    running[e] != 0 (a command whose result it has not taken:
 *    SHMATARI_ENV_RUNNING), and posted[e] its count of commands to the env
 *    (shmatari_client.env_posted), never the segment's req_seq and ack_seq,
 *    which another process could write between the dead worker's end and
 *    its replacement's start (an ack_seq set to req_seq made the
 *    replacement skip a command in flight, and the env answered nothing
 *    again; one set lower made it run a command twice, and every later
 *    result of the env came one command late: an attacker's pass,
 *    2026-12-06).
 *  - Every dead env's ack_seq is set to what its replacement starts from:
 *    posted[e] where it was answered (its row is complete: and, in ordered
 *    pools, its `results` counts it) or had no command in flight, else
 *    posted[e] - 1.
 *  - plan[e] (num_envs entries), for a dead env with a command in flight and
 *    no row: the position its replacement writes (>= 0: a hole, reserved in
 *    an asynchronous pool; -1: the usual position, with a synchronous pool's
 *    `results` wound back to this round); -2 for every other env.
 * Each row's env_id is read once, into row_env (private memory of
 * ring_depth * batch_size entries), and every decision (the counts, which
 * dead env was answered, the holes) is made from that copy: a process that
 * rewrites a row meanwhile cannot make a row count as complete and be
 * handed out as a hole. Until 2026-12-05 the hole search read the rows
 * again.
 * Returns SHMATARI_OK, or _ERR_NOT_SHMATARI (with a message) when holes
 * remain that no dead env explains: a bug, or a segment written by something
 * else. */
static inline int shmatari_recover_workers(const shmatari_geom *g,
                                           const uint8_t *dead_env,
                                           const uint8_t *running,
                                           const uint32_t *posted,
                                           int64_t *plan, int32_t *row_env,
                                           char *msg, size_t len) {
  shmatari_header *h = g->hdr;
  const uint64_t B = g->batch_size, N = g->num_envs;
  const uint64_t consumed = shmatari_load_acquire64(&h->consumed_batches);
  /* Ordered pools (synchronous, or batch_order FIXED): the client waits for
   * batch `consumed`, and every env's next result lies in one of the G
   * batches from there (the one of its group), N positions in all. */
  const int ordered = shmatari_ordered(g);
  const uint64_t G = ordered ? shmatari_groups(g) : 1;
  const uint64_t begin = consumed * B;
  uint64_t end = ordered ? begin + N : shmatari_load_acquire64(&h->alloc_pos);
  /* Read from the segment: bounded to the ring, so that a bad counter cannot
   * make the scans below run on. */
  if (end < begin || end - begin > (uint64_t)g->ring_depth * B)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "result positions %llu..%llu do not fit the ring of "
                         "%u slots", (unsigned long long)begin,
                         (unsigned long long)end, g->ring_depth);
  const int64_t answered = -3; /* scratch: a dead env with a complete row */
  for (uint64_t e = 0; e < N; e++) plan[e] = -2;
  /* The one read of each row: row_env[k] is position begin + k, k < span. */
  const uint64_t span = end - begin; /* <= ring_depth * B, checked above */
  for (uint64_t k = 0; k < span; k++)
    row_env[k] = (int32_t)shmatari_load_acquire(
        (uint32_t *)shmatari_row_env_id(g, begin + k));
  /* Batch consumed + k / B holds positions begin + k (begin = consumed * B).
   * Counted by offsets from begin, never by b * B: a hostile
   * consumed_batches near 2**64 / B made that product wrap, and the loop
   * ran about 2**62 times (a reviewer's reading, 2026-12-05). */
  for (uint64_t k0 = 0; k0 < span; k0 += B) {
    uint32_t complete = 0;
    for (uint64_t k = k0; k < k0 + B && k < span; k++) {
      int32_t env = row_env[k];
      if (env < 0) continue;
      complete++;
      if ((uint64_t)env < N && dead_env[env]) plan[env] = answered;
    }
    shmatari_store_release(
        &((shmatari_slot_header *)shmatari_slot(g, consumed + k0 / B))->done_count,
        complete);
  }
  uint64_t hole = begin; /* the next position to look for a hole at */
  for (uint64_t e = 0; e < N; e++) {
    if (!dead_env[e]) continue;
    shmatari_env_ctrl *ec = shmatari_env(g, (uint32_t)e);
    int was_answered = plan[e] == answered;
    plan[e] = -2;
    if (!running[e]) { /* no command in flight: the last was answered */
      shmatari_store_release(&ec->ack_seq, posted[e]);
      continue;
    }
    /* Ordered: the batch of env e's group among the G from `consumed`; its
     * result r has position r * num_envs + rank, i.e. batch r * G + group. */
    const uint64_t round =
        ordered ? (consumed + (e % G + G - consumed % G) % G) / G : 0;
    if (was_answered) {
      if (ordered) shmatari_store_release64(&ec->results, round + 1);
      shmatari_store_release(&ec->ack_seq, posted[e]);
      continue;
    }
    if (ordered) {
      /* The replacement rewrites this round's row. */
      shmatari_store_release64(&ec->results, round);
      plan[e] = -1;
    } else {
      while (hole < end && row_env[hole - begin] >= 0) hole++;
      plan[e] = hole < end ? (int64_t)hole++ : -1;
    }
    shmatari_store_release(&ec->ack_seq, posted[e] - 1);
  }
  while (!ordered && hole < end && row_env[hole - begin] >= 0) hole++;
  if (!ordered && hole < end)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "result position %llu was reserved but never written, "
                         "and no dead worker's env had a command in flight",
                         (unsigned long long)hole);
  return SHMATARI_OK;
}

/* Waits until every env has answered its last command (ack_seq ==
 * req_seq), waking every worker first in case a client died between posting
 * and waking. With `interruptible`, a signal ends the wait with
 * _ERR_INTERRUPTED (nothing changed; call again); else the wait goes on.
 * Returns SHMATARI_OK, _ERR_TIMEOUT (after timeout_ns; < 0: no limit), or a
 * liveness error. */
static inline int shmatari_drain(const shmatari_geom *g, int64_t timeout_ns,
                                 int interruptible, char *msg, size_t len) {
  shmatari_header *h = g->hdr;
  int64_t deadline = shmatari_deadline(timeout_ns), next_check = 0;
  for (uint32_t w = 0; w < g->num_workers; w++) {
    shmatari_worker_ctrl *wc = shmatari_worker(g, w);
    shmatari_notify(&wc->wake_seq, &wc->sleeping);
  }
  for (;;) {
    uint32_t seen = shmatari_load_acquire(&h->main_seq), busy = g->num_envs;
    for (uint32_t e = 0; e < g->num_envs && busy == g->num_envs; e++) {
      shmatari_env_ctrl *ec = shmatari_env(g, e);
      if (shmatari_load_acquire(&ec->req_seq) !=
          shmatari_load_acquire(&ec->ack_seq))
        busy = e;
    }
    if (busy == g->num_envs) return SHMATARI_OK;
    /* Workers bump main_seq only when a slot fills, so sleep in short
     * slices: this runs once per attach or drain, while the last commands
     * finish. */
    int r = shmatari_pool_check_due(g, &next_check, msg, len);
    if (r == SHMATARI_OK)
      r = shmatari_sleep_main(g, seen, 0, SHMATARI_SPIN_PAUSE, deadline,
                              SHMATARI_SECOND / 100, msg, len);
    if (r == SHMATARI_ERR_TIMEOUT)
      return shmatari_fail(msg, len, r, "env %u was still running a command "
                           "after %.1f s", busy,
                           (double)timeout_ns / SHMATARI_SECOND);
    if (r == SHMATARI_ERR_INTERRUPTED && !interruptible) continue;
    if (r != SHMATARI_OK) return r;
  }
}

/* Drops every result not taken, once no command is in flight
 * (shmatari_drain): with T the number of batches begun (first-ready pools:
 * ceil(alloc_pos / batch_size); ordered pools, synchronous or batch_order
 * FIXED with G groups: G times R, R the largest `results` of any env, or
 * ceil(consumed_batches / G) if more), it sets alloc_pos = T * batch_size
 * (first ready) or every env's `results` = R (ordered: the next batch is
 * group 0's), clears every slot's done_count and rows (shmatari_clear_rows)
 * and sets consumed_batches = T. No worker touches these words while no
 * command is in flight. Each word is read once. Returns T (the caller's
 * next batch: not read back from the segment). */
static inline uint64_t shmatari_drop_results(const shmatari_geom *g) {
  shmatari_header *h = g->hdr;
  uint64_t batches = shmatari_load_acquire64(&h->consumed_batches);
  if (shmatari_ordered(g)) {
    uint64_t G = shmatari_groups(g), rounds = (batches + G - 1) / G;
    for (uint32_t e = 0; e < g->num_envs; e++) {
      uint64_t results = shmatari_load_acquire64(&shmatari_env(g, e)->results);
      if (results > rounds) rounds = results;
    }
    for (uint32_t e = 0; e < g->num_envs; e++)
      shmatari_env(g, e)->results = rounds;
    batches = rounds * G;
  } else {
    uint64_t pos = shmatari_load_acquire64(&h->alloc_pos);
    uint64_t begun = (pos + g->batch_size - 1) / g->batch_size;
    if (begun > batches) batches = begun;
    shmatari_store_release64(&h->alloc_pos, batches * g->batch_size);
  }
  for (uint64_t s = 0; s < g->ring_depth; s++) {
    shmatari_clear_rows(g, s);
    shmatari_store_release(
        &((shmatari_slot_header *)shmatari_slot(g, s))->done_count, 0);
  }
  shmatari_store_release64(&h->consumed_batches, batches);
  return batches;
}

/* The least time a recovery waits for the previous client's commands to be
 * acknowledged (shmatari_recover), whatever its timeout. */
#define SHMATARI_RECOVER_GRACE_NS (SHMATARI_SECOND / 20)

/* Makes the pool consistent for a new client (the caller holds the claim):
 * waits (at least SHMATARI_RECOVER_GRACE_NS) until every command in flight
 * is answered (shmatari_drain), then
 * drops every result not taken (shmatari_drop_results) and stores in
 * *next_batch (when not NULL) the client's next batch, T: the value it
 * wrote, not read back from the segment, where another process could have
 * changed it since (shmatari_client_open takes it). Returns SHMATARI_OK,
 * _ERR_TIMEOUT, _ERR_INTERRUPTED (a signal arrived while waiting: nothing
 * was dropped; call again), or a liveness error. */
static inline int shmatari_recover(const shmatari_geom *g, int64_t timeout_ns,
                                   uint64_t *next_batch, char *msg,
                                   size_t len) {
  /* At least SHMATARI_RECOVER_GRACE_NS, whatever timeout_ns: a worker
   * publishes a result (done_count) before it acknowledges the command
   * (ack_seq), so a client that took its last batch and detached leaves
   * acknowledgements that land a few milliseconds later, and an attach with
   * timeout 0 right after a clean detach was refused ("a command of the
   * previous client was still running after 0.0 s") in up to half the
   * tries (a race hunter's pass, 2026-12-06). */
  if (timeout_ns >= 0 && timeout_ns < SHMATARI_RECOVER_GRACE_NS)
    timeout_ns = SHMATARI_RECOVER_GRACE_NS;
  int r = shmatari_drain(g, timeout_ns, 1, msg, len);
  if (r != SHMATARI_OK) {
    if (r == SHMATARI_ERR_TIMEOUT)
      return shmatari_fail(msg, len, r, "a command of the previous client was "
                           "still running after %.2f s",
                           (double)timeout_ns / SHMATARI_SECOND);
    return r;
  }
  uint64_t batch = shmatari_drop_results(g);
  if (next_batch != NULL) *next_batch = batch;
  return SHMATARI_OK;
}

/* Everything attaching does once the segment is mapped and its header
 * checked (shmatari_geom_load, which gave g):
 * waits (up to timeout_ns) for the pool to run, claims it for pid and
 * recovers it (shmatari_recover, which gives *next_batch: pass it to
 * shmatari_client_open). On failure the claim is not kept; _ERR_INTERRUPTED
 * (a signal, while waiting for the pool to run or for a previous client's
 * commands) changed nothing else either: call again to go on. */
static inline int shmatari_open_pool(const shmatari_geom *g, int32_t pid,
                                     int64_t timeout_ns, int32_t *holder,
                                     uint64_t *next_batch, char *msg,
                                     size_t len) {
  shmatari_header *h = g->hdr;
  int64_t deadline = shmatari_deadline(timeout_ns);
  int r = shmatari_wait_running(g, timeout_ns, msg, len);
  if (r == SHMATARI_OK) r = shmatari_claim(h, pid, holder, msg, len);
  if (r != SHMATARI_OK) return r;
  int64_t left = deadline < 0 ? -1 : deadline - shmatari_now_ns();
  r = shmatari_recover(g, left < 0 && deadline >= 0 ? 0 : left, next_batch,
                       msg, len);
  if (r != SHMATARI_OK) shmatari_unclaim(h, pid);
  return r;
}

/* Posts command `cmd` (enum shmatari_cmd) to n envs and wakes the workers
 * that own them: for each env, cmd and action first, then req_seq (release)
 * set to ++posted[env], the poster's own count of its commands to the env,
 * never the segment's word read back (another process that added 1 to it
 * made a worker run a command nobody posted, and every later result of that
 * env came one command late; an attacker's pass, 2026-12-06); then each
 * touched worker's wake_seq (shmatari_notify).
 * env_ids: n env indices, or NULL for envs 0..n-1; actions: n action indices
 * (STEP), or NULL for 0. Both MUST be private memory (never the segment:
 * shmatari_send copies them first), which the caller has checked: every env
 * in range, listed once, and with no command in flight; an env id out of
 * range is skipped all the same (nothing is written outside the pool).
 * env_worker: from shmatari_env_workers; touched: num_workers bytes of zeros
 * (left zero). */
static inline void shmatari_post(const shmatari_geom *g,
                                 const uint32_t *env_worker,
                                 uint8_t *touched, uint32_t *posted,
                                 const uint32_t *env_ids, uint32_t n,
                                 const int32_t *actions, uint32_t cmd) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t e = env_ids != NULL ? env_ids[i] : i;
    if (e >= g->num_envs) continue;
    shmatari_env_ctrl *ec = shmatari_env(g, e);
    ec->cmd = cmd;
    ec->action = actions != NULL ? actions[i] : 0;
    shmatari_store_release(&ec->req_seq, ++posted[e]);
    touched[env_worker[e]] = 1;
  }
  for (uint32_t w = 0; w < g->num_workers; w++) {
    if (touched[w]) {
      shmatari_worker_ctrl *wc = shmatari_worker(g, w);
      shmatari_notify(&wc->wake_seq, &wc->sleeping);
      touched[w] = 0;
    }
  }
}

/* Waits until batch `batch` (a count of batches consumed) is full, polling
 * for spin_ns in spin_mode before sleeping (shmatari_wait_change). Returns SHMATARI_OK, _ERR_TIMEOUT
 * after timeout_ns (< 0: no limit), _ERR_INTERRUPTED on a signal, or a
 * liveness error: the pool's words are checked at every wake-up, and the
 * processes' ids after each SHMATARI_POLL_NS of sleep and once
 * *next_check_ns (a monotonic time, advanced here; the caller keeps it
 * between calls, starting at 0) has passed, so that a client kept busy by
 * the other workers still learns that one died (its envs would never answer
 * again), or that workers outlive their server. */
static inline int shmatari_wait_batch(const shmatari_geom *g, uint64_t batch,
                                      int64_t spin_ns, int spin_mode,
                                      int64_t timeout_ns,
                                      int64_t *next_check_ns, char *msg,
                                      size_t len) {
  shmatari_header *h = g->hdr;
  shmatari_slot_header *slot = (shmatari_slot_header *)shmatari_slot(g, batch);
  int64_t now = shmatari_now_ns(), deadline = shmatari_deadline(timeout_ns);
  if (now >= *next_check_ns) {
    *next_check_ns = now + SHMATARI_POLL_NS;
    int r = shmatari_pool_check(g, 1, msg, len);
    if (r != SHMATARI_OK) return r;
  }
  for (;;) {
    uint32_t seen = shmatari_load_acquire(&h->main_seq);
    if (shmatari_load_acquire(&slot->done_count) >= g->batch_size)
      return SHMATARI_OK;
    int r = shmatari_pool_check_due(g, next_check_ns, msg, len);
    if (r == SHMATARI_OK)
      r = shmatari_sleep_main(g, seen, spin_ns, spin_mode, deadline,
                              SHMATARI_POLL_NS, msg, len);
    if (r == SHMATARI_ERR_TIMEOUT) {
      if (shmatari_load_acquire(&slot->done_count) >= g->batch_size)
        return SHMATARI_OK;
      return shmatari_fail(msg, len, r, "no batch within %.3f s",
                           (double)timeout_ns / SHMATARI_SECOND);
    }
    if (r != SHMATARI_OK) return r;
  }
}

/* Marks batch `batch` consumed: its slot may be written again, and its
 * rows are empty (shmatari_clear_rows). */
static inline void shmatari_consume_batch(const shmatari_geom *g,
                                          uint64_t batch) {
  shmatari_header *h = g->hdr;
  shmatari_clear_rows(g, batch);
  shmatari_store_release(
      &((shmatari_slot_header *)shmatari_slot(g, batch))->done_count, 0);
  shmatari_store_release64(&h->consumed_batches, batch + 1);
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_PROTOCOL_H */
