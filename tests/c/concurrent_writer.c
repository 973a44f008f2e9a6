/*
 * tests/c/concurrent_writer.c -- a C client stepping a real pool while a
 * second thread of the same process, standing in for any process of the
 * same user, flips words of the segment under it (issue 25: double fetch).
 *
 *   cc -std=gnu11 -g -O1 -pthread -fsanitize=address,undefined \
 *      -I csrc/include tests/c/concurrent_writer.c -o concurrent_writer
 *   shmatari serve Pong --num-envs 8 --name demo &
 *   ./concurrent_writer demo SECONDS [SEED]
 *
 * The client runs the loop that shmatari.h documents and
 * examples/cpp_trainer uses: wait for a batch, then shmatari_send(&c, acts,
 * b.env_id, b.size), whose env ids point into the segment. The writer
 * thread, meanwhile, picks a word at random and writes a hostile value into
 * it, spins a little, and puts the old value back if nobody wrote it since:
 *   - rows of the ring: env_id (out of range by one, huge, negative, another
 *     env), flags, terminated, truncated; and each slot's done_count;
 *   - header words the client reads after attaching (consumed_batches,
 *     alloc_pos, main_seq, num_actions) or must never read again (every
 *     geometry word, slot_field_offset[]);
 *   - the worker records' env_begin / env_end, and their error texts.
 * Words whose change stops the server for good (pool_state, the worker
 * counts and states, owner, client_pid, the env commands) are left alone:
 * they are refused by other checks, and the run would end.
 *
 * The client may be refused (SHMATARI_ERR_INVALID, _STATE), time out, or see
 * the pool broken; it then resets, or detaches and attaches again. What it
 * must never do is read or write outside its own memory and the mapping:
 * AddressSanitizer and UBSan, which the test builds it with, abort then.
 * Prints one line of counts and exits 0 at the end of SECONDS.
 */
#include "shmatari/shmatari.h"

#include <pthread.h>
#include <stdatomic.h>

static atomic_int stop_flag;

typedef struct writer_arg {
  shmatari_geom g; /* the geometry, as the client checked it */
  uint64_t seed;
  uint64_t flips;
} writer_arg;

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* Writes `bad` into the 32-bit word at p, spins, and restores the old value
 * unless something else wrote the word meanwhile. */
static void flip32(uint32_t *p, uint32_t bad, unsigned spins) {
  uint32_t old = __atomic_load_n(p, __ATOMIC_RELAXED);
  __atomic_store_n(p, bad, __ATOMIC_RELAXED);
  for (volatile unsigned i = 0; i < spins; i++) {
  }
  __atomic_compare_exchange_n(p, &bad, old, 0, __ATOMIC_RELAXED,
                              __ATOMIC_RELAXED);
}

static void flip64(uint64_t *p, uint64_t bad, unsigned spins) {
  uint64_t old = __atomic_load_n(p, __ATOMIC_RELAXED);
  __atomic_store_n(p, bad, __ATOMIC_RELAXED);
  for (volatile unsigned i = 0; i < spins; i++) {
  }
  __atomic_compare_exchange_n(p, &bad, old, 0, __ATOMIC_RELAXED,
                              __ATOMIC_RELAXED);
}

static uint32_t hostile_env(uint64_t r, uint32_t num_envs) {
  switch (r % 6) {
    case 0: return num_envs;                       /* one past the end */
    case 1: return num_envs + (uint32_t)(r >> 8) % 64;
    case 2: return UINT32_C(0x7fffffff);
    case 3: return UINT32_C(0xffffffff);           /* -1: an empty row */
    case 4: return UINT32_C(0x80000000);           /* INT32_MIN */
    default: return (uint32_t)(r >> 8) % num_envs; /* another env */
  }
}

static void *writer(void *p) {
  writer_arg *a = (writer_arg *)p;
  const shmatari_geom *g = &a->g;
  char *base = (char *)g->hdr;
  uint64_t s = a->seed;
  while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
    uint64_t r = next_rand(&s), r2 = next_rand(&s);
    unsigned spins = (unsigned)(r2 % 2000);
    unsigned kind = (unsigned)(r % 100);
    uint64_t slot = (r >> 8) % g->ring_depth;
    uint32_t row = (uint32_t)((r >> 24) % g->batch_size);
    char *sl = shmatari_slot(g, slot);
    if (kind < 60) { /* env_id rows: the double fetch of issue 25 */
      uint32_t *id = (uint32_t *)(sl + g->slot_field_offset[SHMATARI_FIELD_ENV_ID]) + row;
      flip32(id, hostile_env(r2 >> 16, g->num_envs), spins);
    } else if (kind < 70) {
      uint32_t *fl = (uint32_t *)(sl + g->slot_field_offset[SHMATARI_FIELD_FLAGS]) + row;
      flip32(fl, (uint32_t)r2, spins);
    } else if (kind < 75) {
      uint8_t *t = (uint8_t *)(sl + g->slot_field_offset[
          r & 1 ? SHMATARI_FIELD_TERMINATED : SHMATARI_FIELD_TRUNCATED]) + row;
      __atomic_store_n(t, (uint8_t)r2, __ATOMIC_RELAXED);
    } else if (kind < 80) {
      flip32(&((shmatari_slot_header *)sl)->done_count, (uint32_t)(r2 % (2 * g->batch_size + 2)),
             spins);
    } else if (kind < 90) { /* header words: geometry, counters, num_actions */
      static const size_t words64[] = {
          offsetof(shmatari_header, total_bytes),
          offsetof(shmatari_header, obs_frame_bytes),
          offsetof(shmatari_header, obs_env_bytes),
          offsetof(shmatari_header, slot_bytes),
          offsetof(shmatari_header, env_ctrl_offset),
          offsetof(shmatari_header, worker_ctrl_offset),
          offsetof(shmatari_header, errors_offset),
          offsetof(shmatari_header, slots_offset),
          offsetof(shmatari_header, slot_obs_offset),
          offsetof(shmatari_header, slot_final_offset),
          offsetof(shmatari_header, slot_field_offset),
          offsetof(shmatari_header, consumed_batches),
          offsetof(shmatari_header, alloc_pos)};
      static const size_t words32[] = {
          offsetof(shmatari_header, num_envs),
          offsetof(shmatari_header, num_workers),
          offsetof(shmatari_header, batch_size),
          offsetof(shmatari_header, ring_depth),
          offsetof(shmatari_header, num_actions),
          offsetof(shmatari_header, main_seq),
          offsetof(shmatari_header, abi_minor)};
      size_t n64 = sizeof words64 / sizeof words64[0];
      size_t n32 = sizeof words32 / sizeof words32[0];
      size_t k = (size_t)(r2 % (n64 + n32));
      if (k < n64)
        flip64((uint64_t *)(base + words64[k]), next_rand(&s) >> (r & 63),
               spins);
      else
        flip32((uint32_t *)(base + words32[k - n64]),
               (uint32_t)(next_rand(&s) >> (r & 31)), spins);
    } else if (kind < 95) { /* a worker's group */
      shmatari_worker_ctrl *wc = shmatari_worker(g, (uint32_t)(r2 % g->num_workers));
      flip32(r & 1 ? &wc->env_begin : &wc->env_end,
             hostile_env(r2 >> 8, g->num_envs), spins);
    } else { /* a worker's error text: no NUL */
      char *text = shmatari_error_text(g, (uint32_t)(r2 % g->num_workers));
      uint64_t at = (r2 >> 8) % SHMATARI_ERROR_BYTES;
      __atomic_store_n(&text[at], (char)('a' + r2 % 26), __ATOMIC_RELAXED);
    }
    a->flips++;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s POOL SECONDS [SEED]\n", argv[0]);
    return 2;
  }
  const char *pool = argv[1];
  int64_t end = shmatari_now_ns() + (int64_t)(atof(argv[2]) * 1e9);
  uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
  shmatari_client c;
  int r = shmatari_attach(&c, pool, 30 * SHMATARI_SECOND);
  if (r != SHMATARI_OK) {
    fprintf(stderr, "attach: %s\n", c.error);
    return 1;
  }
  /* The writer maps the segment itself, as another process would: its
   * mapping outlives the client's detach and attach. */
  char path[SHMATARI_NAME_MAX + 16];
  snprintf(path, sizeof path, "/dev/shm/%s", c.segment);
  int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return 1;
  void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
  close(fd);
  writer_arg arg;
  char msg[SHMATARI_MESSAGE_BYTES];
  if (map == MAP_FAILED ||
      shmatari_geom_load(map, (uint64_t)st.st_size, &arg.g, msg, sizeof msg) !=
          SHMATARI_OK)
    return 1;
  arg.seed = seed;
  arg.flips = 0;
  uint64_t steps = 0, refused = 0, timeouts = 0, reattached = 0, failed = 0;
  uint64_t rs = seed ^ UINT64_C(0x5eed);
  int32_t *acts = (int32_t *)calloc(c.geom.num_envs, sizeof(int32_t));
  if (acts == NULL) return 1;
  /* One clean round before the writer starts, so that a run always steps:
   * under load a flip can stop the server (it watches the words written
   * once) or spoil every batch (a row naming an env twice is refused)
   * before the first batch came, and the run proved nothing. */
  r = shmatari_reset_envs(&c, SHMATARI_CMD_RESET, NULL, 30 * SHMATARI_SECOND);
  if (r == SHMATARI_OK) {
    shmatari_batch first;
    r = shmatari_wait(&c, &first, 30 * SHMATARI_SECOND);
    if (r == SHMATARI_OK) {
      steps += first.size;
      r = shmatari_send(&c, acts, first.env_id, first.size);
    }
  }
  if (r != SHMATARI_OK) {
    fprintf(stderr, "the clean round: %s\n", c.error);
    return 1;
  }
  pthread_t th;
  if (pthread_create(&th, NULL, writer, &arg) != 0) return 1;
  int attached = 1, waited = 0;
  while (shmatari_now_ns() < end) {
    if (!attached) {
      r = shmatari_attach(&c, pool, SHMATARI_SECOND);
      if (r != SHMATARI_OK) {
        failed++;
        if (r == SHMATARI_ERR_NOT_FOUND || r == SHMATARI_ERR_SERVER_DEAD) break;
        continue;
      }
      attached = 1;
      reattached++;
      r = shmatari_reset_envs(&c, SHMATARI_CMD_RESET, NULL, SHMATARI_SECOND);
      continue;
    }
    shmatari_batch b;
    r = shmatari_wait(&c, &b, SHMATARI_SECOND / 2);
    if (r == SHMATARI_ERR_TIMEOUT && ++waited < 4)
      continue; /* a loaded machine: wait on, and reset after 2 s */
    waited = 0;
    if (r == SHMATARI_OK) {
      steps += b.size;
      for (uint32_t i = 0; i < b.size; i++)
        acts[i] = c.num_actions ? (int32_t)(next_rand(&rs) % c.num_actions) : 0;
      /* The documented pattern: the env ids point into the segment. */
      r = shmatari_send(&c, acts, b.env_id, b.size);
      if (r == SHMATARI_OK) continue;
      refused++;
    } else if (r == SHMATARI_ERR_TIMEOUT || r == SHMATARI_ERR_STATE) {
      timeouts++;
    }
    if (c.state == SHMATARI_CLIENT_BROKEN || r == SHMATARI_ERR_NOT_SHMATARI) {
      shmatari_detach(&c);
      attached = 0;
      continue;
    }
    r = shmatari_reset_envs(&c, SHMATARI_CMD_RESET, NULL, SHMATARI_SECOND);
    if (r != SHMATARI_OK && c.state == SHMATARI_CLIENT_BROKEN) {
      shmatari_detach(&c);
      attached = 0;
    }
  }
  atomic_store(&stop_flag, 1);
  pthread_join(th, NULL);
  if (attached) shmatari_detach(&c);
  munmap(map, (size_t)st.st_size);
  free(acts);
  printf("steps %llu refused %llu timeouts %llu reattached %llu "
         "attach_failed %llu flips %llu\n",
         (unsigned long long)steps, (unsigned long long)refused,
         (unsigned long long)timeouts, (unsigned long long)reattached,
         (unsigned long long)failed, (unsigned long long)arg.flips);
  return 0;
}
