/* A C client of a served pool, for tests/test_one_client.py: the same
 * protocol functions (shmatari.h) that shmatari's Python client calls.
 *
 * Usage: client_alternate NAME ROUNDS
 * Attaches, tries a wait before any reset (refused), resets every env, then
 * ROUNDS times: waits for a batch and sends action (round + env) %
 * num_actions to each of its envs; waits for the last batch and detaches.
 * Prints `state=NAME` after every call, `refused=TEXT`, and one `row ...`
 * line per result: env, obs digest (sum of byte * (index % 251 + 1)),
 * reward, terminated, truncated. */
#include "shmatari/shmatari.h"

static void rows(const shmatari_batch *b) {
  for (uint32_t i = 0; i < b->size; i++) {
    const uint8_t *o = b->obs + i * b->obs_stride;
    uint64_t digest = 0;
    for (uint64_t j = 0; j < b->obs_stride; j++)
      digest += (uint64_t)o[j] * (j % 251 + 1);
    printf("row env=%d digest=%llu reward=%g term=%d trunc=%d\n", b->env_id[i],
           (unsigned long long)digest, (double)b->reward[i], b->terminated[i],
           b->truncated[i]);
  }
}

static void state(const shmatari_client *c) {
  printf("state=%s\n", shmatari_client_state_name(c->state));
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s NAME ROUNDS\n", argv[0]);
    return 2;
  }
  int rounds = atoi(argv[2]);
  shmatari_client c;
  shmatari_batch b;
  int r = shmatari_attach(&c, argv[1], 10 * SHMATARI_SECOND);
  if (r != SHMATARI_OK) {
    fprintf(stderr, "attach: %s\n", c.error);
    return 1;
  }
  state(&c);
  r = shmatari_wait(&c, &b, 0);
  printf("refused=%d %s\n", r, c.error);
  state(&c);
  r = shmatari_reset(&c);
  state(&c);
  for (int k = 0; r == SHMATARI_OK && k <= rounds; k++) {
    r = shmatari_wait(&c, &b, 10 * SHMATARI_SECOND);
    if (r != SHMATARI_OK) break;
    state(&c);
    rows(&b);
    if (k == rounds) break;
    int32_t actions[64];
    for (uint32_t i = 0; i < b.size && i < 64; i++)
      actions[i] = (int32_t)((uint32_t)(k + b.env_id[i]) % c.num_actions);
    r = shmatari_send(&c, actions, b.env_id, b.size);
    state(&c);
  }
  if (r != SHMATARI_OK) fprintf(stderr, "%s: %s\n", shmatari_strerror(r), c.error);
  shmatari_detach(&c);
  state(&c);
  return r == SHMATARI_OK ? 0 : 1;
}
