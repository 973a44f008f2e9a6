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
  h.abi_minor = SHMATARI_ABI_MINOR;
  h.owner_pid = me;
  h.owner_start = start;
  CHECK(shmatari_owner_alive(&h));
  char msg[SHMATARI_MESSAGE_BYTES];
  CHECK(shmatari_owner_check(&h, msg, sizeof msg) == SHMATARI_OK);
  h.owner_start = start + 1; /* another process under the owner's pid */
  CHECK(!shmatari_owner_alive(&h));
  CHECK(shmatari_owner_check(&h, msg, sizeof msg) == SHMATARI_ERR_SERVER_DEAD);
  CHECK(strstr(msg, "that owns the pool is gone") != NULL);
  h.abi_minor = 1; /* ABI 1.1: no owner_start, the pid alone */
  CHECK(shmatari_owner_alive(&h));

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
