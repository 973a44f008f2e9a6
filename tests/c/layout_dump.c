/* Prints the offset of every member of the layout structs, and the
 * constants, as JSON, compiled straight from the public headers: the C side
 * of the layout agreement test. Built as C11 and as C++. */
#include "shmatari/shmatari.h" /* first: it asks for POSIX under -std=c11 */

#include <stddef.h>
#include <stdio.h>

#define M(type, member) \
  printf("%s\"%s\": %zu", first ? "" : ", ", #member, offsetof(type, member)); \
  first = 0;
#define BEGIN(type)                                                  \
  printf("%s\"%s\": {\"sizeof\": %zu", nfirst ? "" : ", ", #type, sizeof(type)); \
  nfirst = 0;                                                        \
  first = 0;
#define END() printf("}");

int main(void) {
  int first = 1, nfirst = 1;
  printf("{");
  BEGIN(shmatari_header)
  M(shmatari_header, magic) M(shmatari_header, abi_major) M(shmatari_header, abi_minor)
  M(shmatari_header, header_bytes) M(shmatari_header, total_bytes)
  M(shmatari_header, num_envs) M(shmatari_header, num_workers) M(shmatari_header, batch_size)
  M(shmatari_header, ring_depth) M(shmatari_header, stack_num) M(shmatari_header, img_height)
  M(shmatari_header, img_width) M(shmatari_header, channels) M(shmatari_header, frame_skip)
  M(shmatari_header, num_actions) M(shmatari_header, obs_frame_bytes)
  M(shmatari_header, obs_env_bytes) M(shmatari_header, slot_bytes)
  M(shmatari_header, env_ctrl_offset) M(shmatari_header, worker_ctrl_offset)
  M(shmatari_header, errors_offset) M(shmatari_header, slots_offset)
  M(shmatari_header, slot_obs_offset) M(shmatari_header, slot_field_offset)
  M(shmatari_header, action_set) M(shmatari_header, owner_pid) M(shmatari_header, client_pid)
  M(shmatari_header, pool_state) M(shmatari_header, field_count) M(shmatari_header, seed_words)
  M(shmatari_header, autoreset_mode) M(shmatari_header, slot_final_offset)
  M(shmatari_header, main_seq) M(shmatari_header, main_sleeping)
  M(shmatari_header, ready_workers) M(shmatari_header, failed_workers)
  M(shmatari_header, alloc_pos) M(shmatari_header, consumed_batches)
  END()
  BEGIN(shmatari_env_ctrl)
  M(shmatari_env_ctrl, req_seq) M(shmatari_env_ctrl, cmd) M(shmatari_env_ctrl, action)
  M(shmatari_env_ctrl, ack_seq) M(shmatari_env_ctrl, results)
  END()
  BEGIN(shmatari_worker_ctrl)
  M(shmatari_worker_ctrl, wake_seq) M(shmatari_worker_ctrl, sleeping) M(shmatari_worker_ctrl, pid)
  M(shmatari_worker_ctrl, state) M(shmatari_worker_ctrl, env_begin)
  M(shmatari_worker_ctrl, env_end) M(shmatari_worker_ctrl, steps)
  END()
  BEGIN(shmatari_slot_header)
  M(shmatari_slot_header, done_count)
  END()
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
