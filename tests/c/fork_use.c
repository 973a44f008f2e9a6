/* A client's copy used in a forked child: the child's calls are refused
 * (SHMATARI_ERR_STATE, nothing posted or taken) and the parent steps on
 * with its own batches. Attaches to NAME, resets, takes the batch, forks;
 * the child calls shmatari_send, shmatari_wait, shmatari_reset and
 * shmatari_release_batch through its copy, prints "child send S wait W
 * reset R", detaches and exits; then the parent steps three times and prints
 * "step S" each time with the batch's first env id and elapsed_step. The
 * child's calls used to succeed: it took the parent's next batch, and the
 * parent then read the child's results as its own, one batch late, with no
 * error (an attacker's pass). */
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
  static int32_t actions[SHMATARI_MAX_ENVS]; /* zeros: NOOP */
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    shmatari_batch cb;
    int s = shmatari_send(&c, actions, b.env_id, b.size);
    int w = shmatari_wait(&c, &cb, SHMATARI_SECOND);
    int z = shmatari_reset(&c);
    shmatari_release_batch(&c);
    printf("child send %d wait %d reset %d\n", s, w, z);
    fflush(stdout);
    shmatari_detach(&c);
    _exit(0);
  }
  if (child < 0 || waitpid(child, NULL, 0) != child) return 1;
  for (int i = 0; i < 3; i++) {
    r = shmatari_send(&c, actions, b.env_id, b.size);
    if (r == SHMATARI_OK) r = shmatari_wait(&c, &b, 30 * SHMATARI_SECOND);
    printf("step %d", r);
    if (r == SHMATARI_OK)
      printf(" env %d elapsed %d", (int)((const int32_t *)b.field[SHMATARI_FIELD_ENV_ID])[0],
             (int)((const int32_t *)b.field[SHMATARI_FIELD_ELAPSED_STEP])[0]);
    printf("\n");
    if (r != SHMATARI_OK) printf("%s\n", c.error);
  }
  shmatari_detach(&c);
  return 0;
}
