/* shmatari_printable (pool.h) on the bytes of each argument, given as hex:
 * prints each result as hex, one line each. tests/test_trust.py checks what
 * comes out. */
#include "shmatari/shmatari.h" /* first: it sets the feature macros */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  for (int a = 1; a < argc; a++) {
    size_t n = strlen(argv[a]) / 2;
    char *text = (char *)malloc(n + 1);
    if (text == NULL) return 2;
    for (size_t i = 0; i < n; i++) {
      unsigned v;
      if (sscanf(argv[a] + 2 * i, "%2x", &v) != 1) return 2;
      text[i] = (char)v;
    }
    text[n] = 0;
    shmatari_printable(text, n);
    for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)text[i]);
    printf("\n");
    free(text);
  }
  return 0;
}
