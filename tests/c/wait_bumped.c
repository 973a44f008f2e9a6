/* A wait that another process keeps waking. Two modes:
 *   wait_bumped wait NAME TIMEOUT_S: attaches to NAME, resets, takes the
 *     reset batch, prints "worker0 <pid>", reads a line from stdin (the
 *     caller stops that worker meanwhile), posts a step to every env,
 *     prints "posted", then waits once (TIMEOUT_S < 0: no limit) and prints
 *     "status <r> after <seconds>: <message>".
 *   wait_bumped bump NAME PERIOD_MS SECONDS [WORD]: maps NAME's segment
 *     (/dev/shm/shmatari_NAME; no claim) and bumps a word, waking its
 *     sleepers, every PERIOD_MS for SECONDS: main_seq, or with WORD "wake0"
 *     worker 0's wake_seq (what a worker's idle wait sleeps on).
 * A waiter's checks of the processes must not depend on a quiet slice of
 * sleep: with the bumps, a dead server was never noticed. */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wait_mode(const char *name, double timeout_s) {
  static shmatari_client c;
  shmatari_batch b;
  int r = shmatari_attach(&c, name, 30 * SHMATARI_SECOND);
  if (r == SHMATARI_OK) r = shmatari_reset(&c);
  if (r == SHMATARI_OK) r = shmatari_wait(&c, &b, 30 * SHMATARI_SECOND);
  if (r != SHMATARI_OK) {
    printf("setup failed: %d %s\n", r, c.error);
    return 1;
  }
  printf("worker0 %d\n", (int)shmatari_worker(&c.geom, 0)->pid);
  char go[8];
  if (fgets(go, sizeof go, stdin) == NULL) return 1; /* the caller stopped the worker */
  static int32_t actions[SHMATARI_MAX_ENVS]; /* zeros: NOOP */
  r = shmatari_send(&c, actions, b.env_id, b.size);
  if (r != SHMATARI_OK) {
    printf("send failed: %d %s\n", r, c.error);
    return 1;
  }
  printf("posted\n");
  fflush(stdout);
  int64_t t0 = shmatari_now_ns();
  r = shmatari_wait(&c, &b, timeout_s < 0 ? -1 : (int64_t)(timeout_s * 1e9));
  printf("status %d after %.2f: %s\n", r, (double)(shmatari_now_ns() - t0) / 1e9,
         r == SHMATARI_OK ? "" : c.error);
  shmatari_detach(&c);
  return 0;
}

static int bump_mode(const char *name, long period_ms, double seconds,
                     const char *word) {
  char path[256];
  snprintf(path, sizeof path, "/dev/shm/shmatari_%s", name);
  int fd = open(path, O_RDWR);
  if (fd < 0) {
    perror(path);
    return 1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(shmatari_header)) return 1;
  shmatari_header *h = (shmatari_header *)mmap(NULL, (size_t)st.st_size,
                                               PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (h == MAP_FAILED) return 1;
  uint32_t *seq = &h->main_seq, *sleeping = &h->main_sleeping;
  if (strcmp(word, "wake0") == 0) {
    shmatari_geom g;
    char msg[256];
    if (shmatari_geom_load(h, (uint64_t)st.st_size, &g, msg, sizeof msg) != SHMATARI_OK) {
      fprintf(stderr, "%s\n", msg);
      return 1;
    }
    seq = &shmatari_worker(&g, 0)->wake_seq;
    sleeping = &shmatari_worker(&g, 0)->sleeping;
  }
  printf("bumping\n");
  struct timespec ts = {period_ms / 1000, (period_ms % 1000) * 1000000L};
  int64_t end = shmatari_now_ns() + (int64_t)(seconds * 1e9);
  while (shmatari_now_ns() < end) {
    shmatari_notify(seq, sleeping);
    nanosleep(&ts, NULL);
  }
  munmap(h, (size_t)st.st_size);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc == 4 && strcmp(argv[1], "wait") == 0) return wait_mode(argv[2], atof(argv[3]));
  if ((argc == 5 || argc == 6) && strcmp(argv[1], "bump") == 0)
    return bump_mode(argv[2], atol(argv[3]), atof(argv[4]), argc == 6 ? argv[5] : "main");
  fprintf(stderr, "usage: wait_bumped wait NAME TIMEOUT_S | bump NAME PERIOD_MS SECONDS "
                  "[main|wake0]\n");
  return 2;
}
