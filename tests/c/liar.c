/* A client of `shmatari serve` that writes one kind of word it does not
 * own, then detaches:
 *   liar ack NAME: env 0's ack_seq = req_seq + 1 (only workers write it);
 *   liar results NAME: every env's `results` = ceil(2**64 / num_envs), a
 *     count whose position (results * num_envs + rank) wraps past 2**64.
 * The pool's workers must fail, naming the word, rather than leave every
 * later client waiting for commands nobody runs. */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  static shmatari_client c;
  if (argc != 3 || (strcmp(argv[1], "ack") != 0 && strcmp(argv[1], "results") != 0)) {
    fprintf(stderr, "usage: liar ack|results NAME\n");
    return 2;
  }
  int r = shmatari_attach(&c, argv[2], 30 * SHMATARI_SECOND);
  if (r != SHMATARI_OK) {
    printf("attach failed: %d %s\n", r, c.error);
    return 1;
  }
  if (strcmp(argv[1], "ack") == 0) {
    shmatari_env_ctrl *ec = shmatari_env(&c.geom, 0);
    shmatari_store_release(&ec->ack_seq, shmatari_load_acquire(&ec->req_seq) + 1);
  } else {
    uint64_t v = UINT64_MAX / c.geom.num_envs + 1;
    for (uint32_t e = 0; e < c.geom.num_envs; e++)
      shmatari_store_release64(&shmatari_env(&c.geom, e)->results, v);
  }
  printf("lied\n");
  shmatari_detach(&c);
  return 0;
}
