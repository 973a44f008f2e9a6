/* For each line of stdin (a pool name, without the segment prefix), prints
 * 1 if shmatari_servable_name accepts it, else 0: compared with Python's
 * shmatari.cli.NAME_RE, the same rule, in tests/test_server.py. */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stdio.h>
#include <string.h>

int main(void) {
  char line[256];
  while (fgets(line, sizeof line, stdin) != NULL) {
    line[strcspn(line, "\n")] = 0;
    printf("%d\n", shmatari_servable_name(line));
  }
  return 0;
}
