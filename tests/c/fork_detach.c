/* A client's copy in a forked child, detached there (a helper process's
 * cleanup, a RAII destructor): the claim is the parent's and stays. Attaches
 * to NAME, resets, takes the batch, forks; the child calls shmatari_detach
 * and exits; then the parent prints "claim <client_pid word> parent <pid>",
 * steps once and prints "step <status>". shmatari_detach in the child used
 * to free the parent's claim, and another process could attach and drive
 * the same pool (an attacker's pass). */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stdio.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
  static shmatari_client c;
  shmatari_batch b;
  if (argc != 2) return 2;
  int r = shmatari_attach(&c, argv[1], 30 * SHMATARI_SECOND);
  if (r == SHMATARI_OK) r = shmatari_reset(&c);
  if (r == SHMATARI_OK) r = shmatari_wait(&c, &b, 30 * SHMATARI_SECOND);
  if (r != SHMATARI_OK) {
    printf("setup failed: %d %s\n", r, c.error);
    return 1;
  }
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    shmatari_detach(&c);
    _exit(0);
  }
  if (child < 0 || waitpid(child, NULL, 0) != child) return 1;
  printf("claim %d parent %d\n",
         (int)__atomic_load_n(&c.hdr->client_pid, __ATOMIC_ACQUIRE), (int)getpid());
  static int32_t actions[SHMATARI_MAX_ENVS]; /* zeros: NOOP */
  r = shmatari_send(&c, actions, b.env_id, b.size);
  if (r == SHMATARI_OK) r = shmatari_wait(&c, &b, 30 * SHMATARI_SECOND);
  printf("step %d\n", r);
  shmatari_detach(&c);
  return 0;
}
