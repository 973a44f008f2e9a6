/* A same-step pool's final records through the C client.
 *   final_records NAME STEPS clean: attaches to NAME, resets, steps every
 *     env STEPS times with NOOP and checks each batch's final records: in
 *     each row whose flags hold SHMATARI_FLAG_FINAL, final_field's env_id
 *     is the row's, and final_field points into the client's memory, not
 *     the segment. Prints "finals <count> outside <count> wrong <count>".
 *   final_records NAME STEPS rewrite: the same, but once a published batch
 *     (before its wait) has a flagged row, writes another env's id into
 *     that row's final record, as another process of the user may, then
 *     waits. Prints "rewrote row <i>" and "status <r>: <message>".
 * The client copies the final records once and refuses one whose env_id is
 * not its row's: until 2026-12-06 final_field pointed into the segment,
 * unchecked. */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: final_records NAME STEPS clean|rewrite\n");
    return 2;
  }
  const int steps = atoi(argv[2]), rewrite = strcmp(argv[3], "rewrite") == 0;
  static shmatari_client c;
  shmatari_batch b;
  int r = shmatari_attach(&c, argv[1], 30 * SHMATARI_SECOND);
  if (r == SHMATARI_OK) r = shmatari_reset(&c);
  if (r == SHMATARI_OK) r = shmatari_wait(&c, &b, 30 * SHMATARI_SECOND);
  if (r != SHMATARI_OK) {
    printf("setup failed: %d %s\n", r, c.error);
    return 1;
  }
  const shmatari_geom *g = &c.geom;
  if (g->slot_final_offset == 0) {
    printf("not a same-step pool\n");
    return 1;
  }
  const char *lo = (const char *)g->hdr, *hi = lo + g->total_bytes;
  static int32_t actions[SHMATARI_MAX_ENVS]; /* zeros: NOOP */
  long finals = 0, outside = 0, wrong = 0;
  for (int t = 0; t < steps; t++) {
    r = shmatari_send(&c, actions, b.env_id, b.size);
    if (r != SHMATARI_OK) {
      printf("send failed: %d %s\n", r, c.error);
      return 1;
    }
    if (rewrite) {
      /* The next batch, once published: its flags and final records in the
       * segment, as another process sees them. */
      uint64_t next = b.index + 1;
      const char *slot = shmatari_slot(g, next);
      uint32_t *done = &((shmatari_slot_header *)shmatari_slot(g, next))->done_count;
      while (shmatari_load_acquire(done) < g->batch_size) {
      }
      const uint32_t *flags =
          (const uint32_t *)(slot + g->slot_field_offset[SHMATARI_FIELD_FLAGS]);
      int32_t *fin = (int32_t *)(shmatari_slot(g, next) + g->slot_final_offset +
                                 g->slot_field_offset[SHMATARI_FIELD_ENV_ID]);
      for (uint32_t i = 0; i < g->batch_size; i++) {
        if (!(shmatari_load_acquire(&flags[i]) & SHMATARI_FLAG_FINAL)) continue;
        fin[i] = (int32_t)((fin[i] + 1) % (int32_t)g->num_envs);
        printf("rewrote row %u\n", i);
        r = shmatari_wait(&c, &b, 30 * SHMATARI_SECOND);
        printf("status %d: %s\n", r, r == SHMATARI_OK ? "" : c.error);
        /* a failed wait leaves its batch cleared, this path too (a review,
         * 2026-12-06: size and obs were set, env_id NULL) */
        printf("batch %u %d %d\n", b.size, b.obs == NULL, b.env_id == NULL);
        shmatari_detach(&c);
        return 0;
      }
    }
    r = shmatari_wait(&c, &b, 30 * SHMATARI_SECOND);
    if (r != SHMATARI_OK) {
      printf("wait failed: %d %s\n", r, c.error);
      return 1;
    }
    const uint32_t *flags = (const uint32_t *)b.field[SHMATARI_FIELD_FLAGS];
    const int32_t *fin = (const int32_t *)b.final_field[SHMATARI_FIELD_ENV_ID];
    for (uint32_t i = 0; i < b.size; i++) {
      if (!(flags[i] & SHMATARI_FLAG_FINAL)) continue;
      finals++;
      wrong += fin[i] != b.env_id[i];
    }
    for (unsigned f = 0; f < SHMATARI_FIELD_COUNT; f++) {
      const char *p = (const char *)b.final_field[f];
      outside += p >= lo && p < hi;
    }
  }
  printf("finals %ld outside %ld wrong %ld\n", finals, outside, wrong);
  shmatari_detach(&c);
  return 0;
}
