/* The liveness rule in C (shmatari_process_alive, shmatari_owner_alive):
 * this process, a zombie child, a reaped child, and a header whose
 * owner_start names another process. Then reads a line from stdin, prints
 * "ok <its own start, in clock ticks>" and exits 0; or names the failed
 * check and exits 1. Built as C11 and as C++. */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#define CHECK(c)                                     \
  do {                                               \
    if (!(c)) {                                      \
      printf("failed: %s (line %d)\n", #c, __LINE__); \
      return 1;                                      \
    }                                                \
  } while (0)

int main(void) {
  int32_t me = (int32_t)getpid();
  uint64_t start = shmatari_process_start(me);
  CHECK(start > 0);
  CHECK(shmatari_process_alive(me, start));
  CHECK(shmatari_process_alive(me, 0));
  CHECK(!shmatari_process_alive(me, start + 1));
  CHECK(!shmatari_process_alive(0, 0) && !shmatari_process_alive(-1, 0));

  static shmatari_header h; /* zeroed */
  static shmatari_geom g;
  h.abi_minor = SHMATARI_ABI_MINOR;
  h.owner_pid = me;
  h.owner_start = start;
  shmatari_geom_set(&g, &h, &h); /* as attached: its checked copy */
  CHECK(shmatari_owner_alive(&g));
  char msg[SHMATARI_MESSAGE_BYTES];
  CHECK(shmatari_owner_check(&g, msg, sizeof msg) == SHMATARI_OK);
  h.owner_start = start + 1; /* another process under the owner's pid */
  shmatari_geom_set(&g, &h, &h);
  CHECK(!shmatari_owner_alive(&g));
  CHECK(shmatari_owner_check(&g, msg, sizeof msg) == SHMATARI_ERR_SERVER_DEAD);
  CHECK(strstr(msg, "that owns the pool is gone") != NULL);
  /* The header's words rewritten after the attach (abi_minor to 1, or
   * owner_start to 0: either dropped the start time) change nothing: the
   * owner is judged from the geometry's copy (an attacker's pass). */
  h.abi_minor = 1;
  h.owner_start = 0;
  CHECK(!shmatari_owner_alive(&g));
  CHECK(shmatari_owner_check(&g, msg, sizeof msg) == SHMATARI_ERR_SERVER_DEAD);
  h.owner_start = start + 1;
  shmatari_geom_set(&g, &h, &h); /* a pool of ABI 1.1: the pid alone */
  CHECK(g.owner_start == 0 && shmatari_owner_alive(&g));

  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) _exit(0);
  /* A zombie until reaped: dead by the rule. */
  for (int i = 0; i < 1000 && shmatari_process_start((int32_t)child) != 0; i++)
    usleep(1000);
  CHECK(!shmatari_pid_alive((int32_t)child));
  CHECK(waitpid(child, NULL, 0) == child);
  CHECK(!shmatari_pid_alive((int32_t)child));
  (void)getchar(); /* lives until told, so that the caller can read its start */
  printf("ok %llu\n", (unsigned long long)start);
  return 0;
}
