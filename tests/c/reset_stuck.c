/* shmatari_reset with a command in flight that never finishes, for
 * tests/test_server.py: attaches to NAME, resets, takes the first batch,
 * prints "batch" and waits for a line on stdin (the test stops the
 * worker then), sends actions to that batch's envs, and calls
 * shmatari_reset, which drains them first. Prints "reset status R after S s:
 * <error text>" and exits 0. Built with SHMATARI_RESET_TIMEOUT_NS set short
 * by the test: shmatari_reset MUST give up after it, not wait for good. */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s NAME\n", argv[0]);
    return 2;
  }
  static shmatari_client c;
  shmatari_batch b;
  int r = shmatari_attach(&c, argv[1], 30 * SHMATARI_SECOND);
  if (r == SHMATARI_OK) r = shmatari_reset(&c);
  if (r == SHMATARI_OK) r = shmatari_wait(&c, &b, 30 * SHMATARI_SECOND);
  if (r != SHMATARI_OK) {
    printf("failed %d: %s\n", r, c.error);
    return 1;
  }
  printf("batch\n");
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof line, stdin) == NULL) return 1;
  int32_t actions[64] = {0};
  r = shmatari_send(&c, actions, b.env_id, b.size);
  if (r != SHMATARI_OK) {
    printf("send failed %d: %s\n", r, c.error);
    return 1;
  }
  const int64_t t0 = shmatari_now_ns();
  r = shmatari_reset(&c);
  printf("reset status %d after %.3f s: %s\n", r,
         (double)(shmatari_now_ns() - t0) / 1e9, c.error);
  shmatari_detach(&c);
  return 0;
}
