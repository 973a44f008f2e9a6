/*
 * tests/c/trust_cases.c -- the crafted segments of issue 13, each a named
 * regression case for the C client's header check (shmatari_geom_load) and
 * its open checks (shmatari_attach), built by tests/test_trust.py with
 * -fsanitize=address,undefined.
 *
 * Usage: trust_cases [DIR]
 *   Without DIR: the header cases, on heap buffers of exactly the segment's
 *   size (so that AddressSanitizer sees any read or write outside it).
 *   With DIR (a tmpfs directory, /dev/shm): also the open cases, on files
 *   named shmatari_trust<pid>_* there, removed before it exits.
 * Prints one line per case ("ok NAME" or "FAIL NAME: why") and exits 0 when
 * every case passed.
 */
#define _GNU_SOURCE 1 /* fallocate and its FALLOC_FL_* flags */
#include "shmatari/shmatari.h"

#include <sys/stat.h>
#if defined(__linux__)
#include <linux/falloc.h>
#endif

static int failures = 0;

static void report(const char *name, int ok, const char *why) {
  if (ok) {
    printf("ok %s\n", name);
  } else {
    printf("FAIL %s: %s\n", name, why);
    failures++;
  }
}

/* A valid header for a small pool: 4 envs, 2 workers, sync, 8x8x1, stack 2. */
static shmatari_header valid_header(void) {
  shmatari_header h;
  memset(&h, 0, sizeof h);
  h.num_envs = 4;
  h.num_workers = 2;
  h.batch_size = 4;
  h.ring_depth = 2;
  h.stack_num = 2;
  h.img_height = 8;
  h.img_width = 8;
  h.channels = 1;
  h.frame_skip = 4;
  if (shmatari_layout_compute(&h) != 0) abort();
  h.owner_pid = (int32_t)getpid();
  return h;
}

/* Runs the check on a heap copy of exactly `size` bytes whose header is h;
 * expects `want` and a message holding `needle`. On OK, walks the checked
 * geometry over the whole buffer (every region, as a client touches it). */
static void expect(const char *name, const shmatari_header *h, uint64_t size,
                   int want, const char *needle) {
  char msg[SHMATARI_MESSAGE_BYTES] = "";
  char why[SHMATARI_MESSAGE_BYTES + 128];
  if (size > (UINT64_C(1) << 26)) size = SHMATARI_HEADER_BYTES; /* stay small */
  unsigned char *buf = (unsigned char *)calloc(1, (size_t)size);
  if (buf == NULL) abort();
  memcpy(buf, h, size < sizeof *h ? (size_t)size : sizeof *h);
  shmatari_geom g;
  int r = shmatari_geom_load(buf, size, &g, msg, sizeof msg);
  if (r == SHMATARI_OK) {
    for (uint64_t s = 0; s < g.ring_depth; s++) shmatari_clear_rows(&g, s);
    (void)shmatari_pool_check(&g, 0, msg, sizeof msg);
  }
  snprintf(why, sizeof why, "status %d (%s), expected %d; message: %s", r,
           shmatari_strerror(r), want, msg);
  report(name, r == want && (needle == NULL || strstr(msg, needle) != NULL), why);
  free(buf);
}

static void header_cases(void) {
  shmatari_header v = valid_header(), h;
  expect("valid_header_passes", &v, v.total_bytes, SHMATARI_OK, NULL);

  h = v; /* ring_depth x slot_bytes wraps modulo 2^64 */
  h.slot_bytes = UINT64_C(1) << 63;
  expect("ring_times_slot_bytes_wraps", &h, h.total_bytes,
         SHMATARI_ERR_NOT_SHMATARI, "slot_bytes");

  h = v; /* env_ctrl_offset + num_envs x 64 wraps */
  h.env_ctrl_offset = UINT64_MAX - 64;
  expect("env_ctrl_offset_wraps", &h, h.total_bytes,
         SHMATARI_ERR_NOT_SHMATARI, "env_ctrl_offset");

  h = v;
  h.worker_ctrl_offset = UINT64_MAX - 63;
  expect("worker_ctrl_offset_wraps", &h, h.total_bytes,
         SHMATARI_ERR_NOT_SHMATARI, "worker_ctrl_offset");

  h = v; /* an error text 4 KB before the mapping */
  h.errors_offset = (uint64_t)0 - SHMATARI_ERROR_BYTES;
  expect("errors_offset_before_the_mapping", &h, h.total_bytes,
         SHMATARI_ERR_NOT_SHMATARI, "errors_offset");

  h = v;
  h.slots_offset = UINT64_MAX - 1023;
  expect("slots_offset_wraps", &h, h.total_bytes, SHMATARI_ERR_NOT_SHMATARI,
         "slots_offset");

  h = v; /* img_height x img_width x channels wraps to 0 */
  h.img_height = 1u << 31;
  h.img_width = 1u << 31;
  h.channels = 4;
  h.obs_frame_bytes = 0;
  h.obs_env_bytes = 0;
  expect("obs_frame_bytes_wraps_to_zero", &h, h.total_bytes,
         SHMATARI_ERR_NOT_SHMATARI, "invalid geometry");

  h = v; /* a result field placed after the obs block */
  h.slot_field_offset[SHMATARI_FIELD_REWARD] = h.slot_obs_offset + 64;
  expect("result_field_after_obs", &h, h.total_bytes,
         SHMATARI_ERR_NOT_SHMATARI, "slot_field_offset");

  h = v;
  h.slot_final_offset = h.slot_bytes;
  expect("final_records_without_same_step", &h, h.total_bytes,
         SHMATARI_ERR_NOT_SHMATARI, "slot_final_offset");

  h = v; /* 2^26 envs: consistent, 11 GB, beyond SHMATARI_MAX_ENVS */
  h.num_envs = 1u << 26;
  h.batch_size = 1u << 26;
  h.num_workers = 1;
  h.ring_depth = 2;
  expect("num_envs_beyond_the_maximum", &h, h.total_bytes,
         SHMATARI_ERR_NOT_SHMATARI, "num_envs 67108864");

  h = v; /* total_bytes larger than the file */
  expect("file_smaller_than_total_bytes", &h, h.total_bytes - 64,
         SHMATARI_ERR_NOT_SHMATARI, "smaller");
  expect("file_larger_than_total_bytes", &h, h.total_bytes + 64,
         SHMATARI_ERR_NOT_SHMATARI, "larger");

  h = v;
  h.num_actions = SHMATARI_MAX_ACTIONS + 1;
  expect("num_actions_beyond_18", &h, h.total_bytes, SHMATARI_ERR_NOT_SHMATARI,
         "num_actions");

  h = v;
  h.abi_major = SHMATARI_ABI_MAJOR + 1;
  expect("other_abi_major", &h, h.total_bytes, SHMATARI_ERR_ABI, "ABI");

  h = v;
  h.magic = 0;
  expect("no_magic", &h, h.total_bytes, SHMATARI_ERR_NOT_SHMATARI, "magic");
  expect("shorter_than_a_header", &v, 100, SHMATARI_ERR_NOT_SHMATARI,
         "smaller than");

  /* shmatari_layout_compute: 2^20 envs x stack 2^30 once passed as 176 MB. */
  h = v;
  h.num_envs = 1u << 20;
  h.batch_size = 1u << 20;
  h.stack_num = 1u << 30;
  char msg[320];
  int r = shmatari_layout_compute_msg(&h, msg, sizeof msg);
  report("layout_compute_refuses_2p20_envs_stack_2p30",
         r == SHMATARI_LAYOUT_INVALID && strstr(msg, "stack_num") != NULL, msg);
  h = v;
  h.num_envs = SHMATARI_MAX_ENVS;
  h.batch_size = SHMATARI_MAX_ENVS;
  h.num_workers = 1;
  h.stack_num = SHMATARI_MAX_STACK;
  h.img_height = SHMATARI_MAX_IMG_SIDE;
  h.img_width = SHMATARI_MAX_IMG_SIDE;
  h.channels = 3;
  h.ring_depth = 2;
  r = shmatari_layout_compute_msg(&h, msg, sizeof msg);
  report("layout_compute_refuses_too_large_with_byte_count",
         r == SHMATARI_LAYOUT_TOO_LARGE && strstr(msg, "bytes") != NULL, msg);
}

/* Header words that no pool's own processes would write, on a loaded
 * geometry: the client's checks name the word, not a worker. */
static void pool_word_cases(void) {
  shmatari_header v = valid_header();
  char msg[SHMATARI_MESSAGE_BYTES] = "";
  unsigned char *buf = (unsigned char *)calloc(1, (size_t)v.total_bytes);
  if (buf == NULL) abort();
  memcpy(buf, &v, sizeof v);
  shmatari_geom g;
  int r = shmatari_geom_load(buf, v.total_bytes, &g, msg, sizeof msg);
  if (r == SHMATARI_OK) {
    g.hdr->failed_workers = 3; /* no worker FAILED */
    r = shmatari_pool_check(&g, 0, msg, sizeof msg);
  }
  report("failed_workers_with_no_worker_failed_names_the_word",
         r == SHMATARI_ERR_WORKER && strstr(msg, "failed_workers word is 3") != NULL,
         msg);
  free(buf);
}

enum { WRITTEN, SPARSE, HOLE_PADDED };

/* Writes a valid segment file at path, as shmatari's creator does (mode
 * 0600, every page allocated and written), or SPARSE (only the header
 * written), or HOLE_PADDED (issue 25: every page written but the second,
 * punched out, and as many bytes allocated past the end of the file
 * (FALLOC_FL_KEEP_SIZE), so that st_blocks x 512 still covers st_size);
 * returns 0, or -1 (HOLE_PADDED where fallocate cannot do that). */
static int write_segment(const char *path, int kind, mode_t mode) {
  shmatari_header h = valid_header();
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int ok = ftruncate(fd, (off_t)h.total_bytes) == 0;
  if (ok && kind != SPARSE) {
    static const char zeros[4096];
    for (uint64_t at = 0; ok && at < h.total_bytes; at += sizeof zeros) {
      size_t n = h.total_bytes - at < sizeof zeros ? (size_t)(h.total_bytes - at)
                                                  : sizeof zeros;
      ok = pwrite(fd, zeros, n, (off_t)at) == (ssize_t)n;
    }
  }
#if defined(__linux__)
  if (ok && kind == HOLE_PADDED) {
    struct stat st;
    ok = h.total_bytes > 8192 &&
         fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096,
                   4096) == 0 &&
         fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)h.total_bytes, 8192) == 0 &&
         fstat(fd, &st) == 0 &&
         (uint64_t)st.st_blocks * 512 >= (uint64_t)st.st_size;
  }
#else
  if (kind == HOLE_PADDED) ok = 0;
#endif
  ok = ok && pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
       fchmod(fd, mode) == 0;
  close(fd);
  return ok ? 0 : -1;
}

/* Writes the pool_state word of the segment file at path; 0 or -1. */
static int write_pool_state(const char *path, uint32_t state) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int ok = pwrite(fd, &state, sizeof state,
                  (off_t)offsetof(shmatari_header, pool_state)) == (ssize_t)sizeof state;
  close(fd);
  return ok ? 0 : -1;
}

static void open_case(const char *name, const char *pool, int want,
                      const char *needle) {
  shmatari_client c;
  char why[SHMATARI_MESSAGE_BYTES + 64];
  int r = shmatari_attach(&c, pool, SHMATARI_SECOND / 20);
  snprintf(why, sizeof why, "status %d, expected %d; message: %s", r, want,
           c.error);
  report(name, r == want && (needle == NULL || strstr(c.error, needle)), why);
  if (r == SHMATARI_OK) shmatari_detach(&c);
}

static void open_cases(const char *dir) {
  char pool[64], path[256], target[256];
  int pid = (int)getpid();
  /* A good file of ours gets past every open check: its pool never runs. */
  snprintf(pool, sizeof pool, "trust%d_good", pid);
  snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
  if (write_segment(path, WRITTEN, 0600) == 0)
    open_case("own_0600_segment_passes_the_open_checks", pool,
              SHMATARI_ERR_TIMEOUT, "still starting");
  snprintf(target, sizeof target, "%s", path);

  snprintf(pool, sizeof pool, "trust%d_link", pid);
  snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
  if (symlink(target, path) == 0)
    open_case("symlink_is_not_followed", pool, SHMATARI_ERR_UNTRUSTED,
              "symbolic link");
  unlink(path);

  /* A pool_state no server writes: the wait for RUNNING ends at once. */
  snprintf(pool, sizeof pool, "trust%d_nostate", pid);
  snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
  if (write_segment(path, WRITTEN, 0600) == 0 && write_pool_state(path, 77) == 0)
    open_case("pool_state_that_is_no_state_ends_the_wait", pool,
              SHMATARI_ERR_NOT_SHMATARI, "pool_state word is 77");
  unlink(path);

  snprintf(pool, sizeof pool, "trust%d_open", pid);
  snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
  if (write_segment(path, WRITTEN, 0666) == 0)
    open_case("mode_0666_is_refused", pool, SHMATARI_ERR_UNTRUSTED, "0666");
  unlink(path);

  snprintf(pool, sizeof pool, "trust%d_group", pid);
  snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
  if (write_segment(path, WRITTEN, 0640) == 0)
    open_case("mode_0640_is_refused", pool, SHMATARI_ERR_UNTRUSTED, "0640");
  unlink(path);

  snprintf(pool, sizeof pool, "trust%d_sparse", pid);
  snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
  if (write_segment(path, SPARSE, 0600) == 0)
    open_case("sparse_file_is_refused", pool, SHMATARI_ERR_UNTRUSTED,
              "sparse");
  unlink(path);

  snprintf(pool, sizeof pool, "trust%d_hole", pid);
  snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
  if (write_segment(path, HOLE_PADDED, 0600) == 0)
    open_case("hole_padded_past_the_end_is_refused", pool,
              SHMATARI_ERR_UNTRUSTED, "hole at byte 4096");
  unlink(path);

  snprintf(pool, sizeof pool, "trust%d_fifo", pid);
  snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
  if (mkfifo(path, 0600) == 0)
    open_case("fifo_is_refused_without_blocking", pool, SHMATARI_ERR_UNTRUSTED,
              "not a regular file");
  unlink(path);

  snprintf(pool, sizeof pool, "trust%d_dir", pid);
  snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
  if (mkdir(path, 0700) == 0)
    open_case("directory_is_refused", pool, SHMATARI_ERR_UNTRUSTED,
              "not a regular file");
  rmdir(path);

  if (geteuid() == 0) { /* root: a file of another uid (65534, nobody) */
    snprintf(pool, sizeof pool, "trust%d_other", pid);
    snprintf(path, sizeof path, "%s/shmatari_%s", dir, pool);
    if (write_segment(path, WRITTEN, 0600) == 0 && chown(path, 65534, 65534) == 0)
      open_case("another_users_segment_is_refused", pool,
                SHMATARI_ERR_UNTRUSTED, "belongs to uid 65534");
    unlink(path);
  }
  unlink(target);
}

int main(int argc, char **argv) {
  header_cases();
  pool_word_cases();
  if (argc > 1) open_cases(argv[1]);
  printf("%d failed\n", failures);
  return failures != 0;
}
