/* Prints the offset of every member of the layout structs, the result
 * fields, and the constants, as JSON, compiled straight from the public
 * headers (the members and fields from their lists in shmatari/layout.h):
 * the C side of the layout agreement test. Built as C11 and as C++. */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stddef.h>
#include <stdio.h>

/* One struct: {"sizeof": n, "member": offset, ...}, from its member list. */
#define MEMBER(type_, name, dims) \
  printf(", \"%s\": %zu", #name, offsetof(DUMPED, name));
#define DUMP(type, LIST)                                                       \
  printf("%s\"%s\": {\"sizeof\": %zu", nfirst ? "" : ", ", #type, sizeof(type)); \
  nfirst = 0;                                                                \
  LIST(MEMBER)                                                               \
  printf("}");
/* One field: ["name", "NumPy type", bytes, "unit", "meaning"]. */
#define FIELD(NAME, name, type, unit, meaning)                                 \
  printf("%s[\"%s\", \"%s\", %zu, \"%s\", \"%s\"]",                             \
         (int)SHMATARI_FIELD_##NAME != 0 ? ", " : "", #name, SHMATARI_TYPESTR(type), \
         sizeof(type), unit, meaning);

int main(void) {
  int nfirst = 1;
  printf("{");
#define DUMPED shmatari_header
  DUMP(shmatari_header, SHMATARI_HEADER_MEMBERS)
#undef DUMPED
#define DUMPED shmatari_env_ctrl
  DUMP(shmatari_env_ctrl, SHMATARI_ENV_CTRL_MEMBERS)
#undef DUMPED
#define DUMPED shmatari_worker_ctrl
  DUMP(shmatari_worker_ctrl, SHMATARI_WORKER_CTRL_MEMBERS)
#undef DUMPED
#define DUMPED shmatari_slot_header
  DUMP(shmatari_slot_header, SHMATARI_SLOT_HEADER_MEMBERS)
#undef DUMPED
  printf(", \"fields\": [");
  SHMATARI_RESULT_FIELDS(FIELD)
  printf("]");
  printf(", \"constants\": {\"magic\": %llu, \"abi_major\": %u, \"header_bytes\": %u, "
         "\"field_count\": %d",
         (unsigned long long)SHMATARI_MAGIC, SHMATARI_ABI_MAJOR, SHMATARI_HEADER_BYTES,
         (int)SHMATARI_FIELD_COUNT);
#define C(name) printf(", \"%s\": %lld", #name, (long long)(name));
  C(SHMATARI_ABI_MINOR) C(SHMATARI_ALIGN) C(SHMATARI_SLOT_HEADER_BYTES) C(SHMATARI_ERROR_BYTES)
  C(SHMATARI_MAX_ACTIONS) C(SHMATARI_SEED_WORDS) C(SHMATARI_FLAG_RESET) C(SHMATARI_FLAG_RESTARTED)
  C(SHMATARI_FLAG_FINAL) C(SHMATARI_FLAG_OBSERVED)
  C(SHMATARI_CMD_STEP) C(SHMATARI_CMD_RESET) C(SHMATARI_CMD_RESEED) C(SHMATARI_CMD_OBSERVE)
  C(SHMATARI_AUTORESET_NEXT_STEP) C(SHMATARI_AUTORESET_SAME_STEP) C(SHMATARI_AUTORESET_DISABLED)
  C(SHMATARI_WORKER_STARTING) C(SHMATARI_WORKER_READY) C(SHMATARI_WORKER_FAILED)
  C(SHMATARI_WORKER_EXITED) C(SHMATARI_POOL_STARTING) C(SHMATARI_POOL_RUNNING)
  C(SHMATARI_POOL_CLOSING)
  printf("}, \"status\": {");
  static const int codes[] = {
      SHMATARI_OK, SHMATARI_ERR_NOT_FOUND, SHMATARI_ERR_NOT_SHMATARI, SHMATARI_ERR_ABI,
      SHMATARI_ERR_BUSY, SHMATARI_ERR_TIMEOUT, SHMATARI_ERR_SERVER_DEAD, SHMATARI_ERR_WORKER,
      SHMATARI_ERR_CLOSED, SHMATARI_ERR_INTERRUPTED, SHMATARI_ERR_INVALID, SHMATARI_ERR_STATE,
      SHMATARI_ERR_SYSTEM, SHMATARI_ERR_UNTRUSTED};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    printf("%s\"%d\": \"%s\"", i ? ", " : "", codes[i], shmatari_strerror(codes[i]));
  printf("}}\n");
  return 0;
}
