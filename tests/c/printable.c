/* shmatari_printable (pool.h) on the bytes of each argument, given as hex:
 * prints each result as hex, one line each. tests/test_trust.py checks what
 * comes out.
 *
 * printable --quote CAP HEX...: each argument made printable, then quoted
 * (shmatari_quote_lines) into an output of CAP bytes, printed as hex.
 * printable --segment FILE [pids]: the message shmatari_pool_check gives for
 * the segment in FILE (read whole into a buffer of its size), printed as hex
 * (with "pids": check_pids 1, the owner's and workers' processes too).
 * printable --unanswered FILE CAP...: a client opened on the segment in
 * FILE, every env marked running, and shmatari_unanswered_text into an
 * output of each CAP bytes (allocated to that size), printed as hex. */
#include "shmatari/shmatari.h" /* first: it sets the feature macros */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *from_hex(const char *hex, size_t *n) {
  *n = strlen(hex) / 2;
  char *text = (char *)malloc(*n + 1);
  if (text == NULL) return NULL;
  for (size_t i = 0; i < *n; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
      free(text);
      return NULL;
    }
    text[i] = (char)v;
  }
  text[*n] = 0;
  return text;
}

static void print_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)s[i]);
  printf("\n");
}

/* The segment in the file at path, read whole into a buffer of its size
 * (*buf, to free), and its geometry; 0, else the exit status to give. */
static int load_segment(const char *path, char **buf, shmatari_geom *g) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return 2;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  *buf = (char *)malloc((size_t)size);
  if (*buf == NULL || fread(*buf, 1, (size_t)size, f) != (size_t)size) return 2;
  fclose(f);
  char msg[SHMATARI_MESSAGE_BYTES];
  if (shmatari_geom_load(*buf, (uint64_t)size, g, msg, sizeof msg) != SHMATARI_OK) {
    printf("load: %s\n", msg);
    return 3;
  }
  return 0;
}

static int segment_message(const char *path, int check_pids) {
  char *buf;
  shmatari_geom g;
  int bad = load_segment(path, &buf, &g);
  if (bad) return bad;
  char msg[SHMATARI_MESSAGE_BYTES] = "";
  int r = shmatari_pool_check(&g, check_pids, msg, sizeof msg);
  printf("%d\n", r);
  print_hex(msg, strlen(msg));
  free(buf);
  return 0;
}

static int unanswered(const char *path, int ncaps, char **caps) {
  char *buf;
  shmatari_geom g;
  int bad = load_segment(path, &buf, &g);
  if (bad) return bad;
  shmatari_client c;
  memset(&c, 0, sizeof c);
  if (shmatari_client_open(&c, &g, 0) != SHMATARI_OK) {
    printf("open: %s\n", c.error);
    return 3;
  }
  for (uint32_t e = 0; e < g.num_envs; e++) c.env_flags[e] |= SHMATARI_ENV_RUNNING;
  for (int i = 0; i < ncaps; i++) {
    size_t cap = (size_t)strtoul(caps[i], NULL, 10);
    char *out = (char *)malloc(cap ? cap : 1);
    if (out == NULL) return 2;
    const char *r = shmatari_unanswered_text(&c, out, cap);
    if (r != out) return 4;
    print_hex(out, cap ? strlen(out) : 0);
    free(out);
  }
  shmatari_client_close(&c);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--unanswered") == 0)
    return unanswered(argv[2], argc - 3, argv + 3);
  if ((argc == 3 || argc == 4) && strcmp(argv[1], "--segment") == 0)
    return segment_message(argv[2], argc == 4 && strcmp(argv[3], "pids") == 0);
  int first = 1;
  size_t cap = 0;
  if (argc >= 3 && strcmp(argv[1], "--quote") == 0) {
    cap = (size_t)strtoul(argv[2], NULL, 10);
    first = 3;
  }
  for (int a = first; a < argc; a++) {
    size_t n;
    char *text = from_hex(argv[a], &n);
    if (text == NULL) return 2;
    shmatari_printable(text, n);
    if (first == 3) {
      char *out = (char *)malloc(cap);
      if (out == NULL) return 2;
      size_t m = shmatari_quote_lines(text, out, cap);
      if (cap > 0 && (m >= cap || out[m] != 0)) return 4;
      print_hex(out, m);
      free(out);
    } else {
      print_hex(text, n);
    }
    free(text);
  }
  return 0;
}
