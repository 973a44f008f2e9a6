/* A client that reads its batch as the docs' loop does: attach NAME, reset,
 * wait, then (without sending) wait again, which is refused; prints
 * "first rc size", "refused rc size env_id reward final_obs", "areas RENDER
 * RAM" (1 where the pointer is NULL), and exits 0. Built with -O2 -Wall
 * -Wextra -Werror: gcc's -Wmaybe-uninitialized refused the fields read
 * after a checked wait until shmatari_wait cleared its batch first (a C++
 * user's pass, 2026-12-06). */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  static shmatari_client c;
  if (shmatari_attach(&c, argv[1], 30 * SHMATARI_SECOND) != SHMATARI_OK) {
    printf("attach: %s\n", c.error);
    return 1;
  }
  int r = shmatari_reset(&c);
  shmatari_batch b;
  memset(&b, 0xAB, sizeof b); /* what a stack holds */
  if (r == SHMATARI_OK) r = shmatari_wait(&c, &b, 30 * SHMATARI_SECOND);
  if (r != SHMATARI_OK) {
    printf("reset or wait: %s\n", c.error);
    return 1;
  }
  double total = 0;
  const double *ret = (const double *)b.field[SHMATARI_FIELD_EPISODE_RETURN];
  for (uint32_t i = 0; i < b.size; i++) total += ret[i] + b.reward[i] + b.terminated[i];
  printf("first %d %u %g\n", r, b.size, total);
  memset(&b, 0xAB, sizeof b);
  r = shmatari_wait(&c, &b, SHMATARI_SECOND); /* nothing sent: refused */
  printf("refused %d %u %d %d %d\n", r, b.size, b.env_id == NULL, b.reward == NULL,
         b.final_obs == NULL);
  printf("areas %d %d\n", shmatari_render_area(&c.geom, 0) == NULL,
         shmatari_ram_area(&c.geom, 0) == NULL);
  shmatari_detach(&c);
  return 0;
}
