/*
 * tests/c/attach_fuzz.c -- fuzz target for the C client's header check and
 * the protocol functions it guards (shmatari/shmatari.h), for libFuzzer:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I csrc/include \
 *         tests/c/attach_fuzz.c -o attach_fuzz
 *   ./attach_fuzz -max_total_time=10 CORPUS_DIR
 *
 * Built with -DSHMATARI_FUZZ_REPLAY and any C compiler instead, it runs the
 * files named on its command line once each (tests/test_trust.py feeds it
 * hypothesis-made headers when clang's libFuzzer is missing).
 *
 * One input is a segment: its first 1024 bytes are the header, the rest
 * (repeated, or zeros) fills the segment up to the header's total_bytes (at
 * most 1 MiB here), on a heap buffer of exactly that size, so that
 * AddressSanitizer catches any access outside it. If shmatari_geom_load
 * accepts it, the target runs what a client does with a checked geometry
 * (the worker groups, pool checks with error texts, recovery, clearing and
 * consuming slots, reading every field and observation of a batch), then
 * rewrites the header with other input bytes, as a hostile process could
 * after the check, and runs it all again: nothing may read or write outside
 * the buffer, since no size or offset is read from the segment after the
 * check.
 */
#include "shmatari/shmatari.h"

#define FUZZ_MAX_SEGMENT (UINT64_C(1) << 20)

static uint64_t sink;

static void exercise(const shmatari_geom *g) {
  char msg[SHMATARI_MESSAGE_BYTES];
  uint32_t *env_worker = (uint32_t *)calloc(g->num_envs, sizeof(uint32_t));
  uint8_t *touched = (uint8_t *)calloc(g->num_workers, 1);
  uint32_t *posted = (uint32_t *)calloc(g->num_envs, sizeof(uint32_t));
  if (env_worker == NULL || touched == NULL || posted == NULL) abort();
  if (shmatari_env_workers(g, env_worker, msg, sizeof msg) == SHMATARI_OK) {
    uint32_t n = g->num_envs < 64 ? g->num_envs : 64;
    shmatari_post(g, env_worker, touched, posted, NULL, n, NULL, SHMATARI_CMD_RESET);
  }
  (void)shmatari_pool_check(g, 0, msg, sizeof msg);
  for (uint32_t w = 0; w < g->num_workers && w < 8; w++)
    sink += (uint64_t)strnlen(shmatari_error_text(g, w), SHMATARI_ERROR_BYTES);
  (void)shmatari_recover(g, 0, NULL, msg, sizeof msg);
  /* A batch, as shmatari_wait presents it: every field and obs byte. */
  const char *slot = shmatari_slot(g, g->hdr->consumed_batches);
  static const uint8_t field_bytes[SHMATARI_FIELD_COUNT] = SHMATARI_FIELD_BYTES;
  for (unsigned f = 0; f < SHMATARI_FIELD_COUNT; f++)
    for (uint64_t i = 0; i < (uint64_t)field_bytes[f] * g->batch_size; i++)
      sink += (uint8_t)slot[g->slot_field_offset[f] + i];
  const uint8_t *obs = (const uint8_t *)slot + g->slot_obs_offset;
  uint64_t obs_bytes = g->obs_env_bytes * g->batch_size;
  for (uint64_t i = 0; i < obs_bytes; i += 61) sink += obs[i];
  if (obs_bytes) sink += obs[obs_bytes - 1];
  if (g->slot_final_offset) {
    const uint8_t *fin = (const uint8_t *)slot + g->slot_final_offset +
                         g->slot_obs_offset;
    sink += fin[obs_bytes - 1];
  }
  for (uint64_t pos = 0; pos < 2 * (uint64_t)g->batch_size && pos < 4096; pos++)
    sink += (uint32_t)*shmatari_row_env_id(g, pos);
  shmatari_consume_batch(g, g->hdr->consumed_batches);
  for (uint64_t s = 0; s < g->ring_depth && s < 64; s++) shmatari_clear_rows(g, s);
  free(env_worker);
  free(touched);
  free(posted);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char msg[SHMATARI_MESSAGE_BYTES];
  shmatari_geom g;
  if (size < SHMATARI_HEADER_BYTES) {
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);
    if (copy == NULL) abort();
    if (size) memcpy(copy, data, size);
    (void)shmatari_check_header(copy, size, msg, sizeof msg);
    free(copy);
    return 0;
  }
  uint64_t total;
  memcpy(&total, data + 24, sizeof total); /* total_bytes */
  if (total < SHMATARI_HEADER_BYTES || total > FUZZ_MAX_SEGMENT)
    total = size < FUZZ_MAX_SEGMENT ? size : FUZZ_MAX_SEGMENT;
  uint8_t *buf = (uint8_t *)malloc((size_t)total);
  if (buf == NULL) abort();
  const uint8_t *rest = data + SHMATARI_HEADER_BYTES;
  size_t nrest = size - SHMATARI_HEADER_BYTES;
  memcpy(buf, data, SHMATARI_HEADER_BYTES);
  for (uint64_t i = SHMATARI_HEADER_BYTES; i < total;) {
    size_t n = nrest < total - i ? nrest : (size_t)(total - i);
    if (n == 0) {
      memset(buf + i, 0, (size_t)(total - i));
      break;
    }
    memcpy(buf + i, rest, n);
    i += n;
  }
  shmatari_header *h = (shmatari_header *)buf;
  h->pool_state = SHMATARI_POOL_RUNNING; /* never wait in a fuzz run */
  h->main_sleeping = 0;
  if (shmatari_geom_load(buf, total, &g, msg, sizeof msg) == SHMATARI_OK) {
    exercise(&g);
    /* A hostile rewrite of the header after the check. */
    for (size_t i = 0; i < SHMATARI_HEADER_BYTES && nrest; i++)
      if (i < offsetof(shmatari_header, main_seq))
        buf[i] ^= rest[i % nrest];
    h->pool_state = SHMATARI_POOL_RUNNING;
    exercise(&g);
  }
  free(buf);
  return 0;
}

#ifdef SHMATARI_FUZZ_REPLAY
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (f == NULL) return 2;
    static uint8_t data[1 << 20];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    LLVMFuzzerTestOneInput(data, n);
  }
  printf("replayed %d inputs\n", argc - 1);
  return 0;
}
#endif
