/* shmatari_attach(NAME, TIMEOUT_NS) from a C client, usually started before
 * the server: prints "attached num_envs=N after S s" and exits 0, or
 * "status R after S s: <the client's error text>" and exits 1 (and
 * "waiting" on stderr once SIGINT's handler is in place). SIGINT's
 * handler only sets a flag, as a trainer's would (no SA_RESTART); the
 * output then ends with " (SIGINT caught)". */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t interrupted = 0;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s NAME TIMEOUT_NS (< 0: no limit)\n", argv[0]);
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);
  fprintf(stderr, "waiting\n"); /* the handler is in place: signal now */
  static shmatari_client c;
  const int64_t t0 = shmatari_now_ns();
  int r = shmatari_attach(&c, argv[1], (int64_t)strtoll(argv[2], NULL, 10));
  const double s = (double)(shmatari_now_ns() - t0) / 1e9;
  if (r != SHMATARI_OK) {
    printf("status %d after %.3f s: %s%s\n", r, s, c.error,
           interrupted ? " (SIGINT caught)" : "");
    return 1;
  }
  printf("attached num_envs=%u after %.3f s\n", c.geom.num_envs, s);
  shmatari_detach(&c);
  return 0;
}
