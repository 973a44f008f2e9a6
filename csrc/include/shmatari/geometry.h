/*
 * shmatari/geometry.h -- loading a segment's geometry once, checked against the layout.
 * Part of the header-only C client; include "shmatari/shmatari.h", which
 * includes every part in order (docs/architecture.md names each part).
 */
#ifndef SHMATARI_GEOMETRY_H
#define SHMATARI_GEOMETRY_H

#include "shmatari/liveness.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * The protocol, on a mapped header. shmatari's Python client calls these
 * same functions (through its extension module).
 */

/* Whether an optional per-env area (the render or RAM area) does NOT fit:
 * it must begin at or after `after`, aligned, and num_envs * env_bytes
 * bytes from `offset` (overflow checked) must end within `total`. Sets
 * *area_end when the sums do not overflow. Returns 1 if it does not fit. */
static inline int shmatari_area_misfit(uint64_t offset, uint64_t after, uint64_t num_envs,
                                       uint64_t env_bytes, uint64_t total,
                                       uint64_t *area_end) {
  uint64_t bytes;
  return offset < after || offset % SHMATARI_ALIGN != 0 ||
         shmatari_mul_u64(num_envs, env_bytes, &bytes) ||
         shmatari_add_u64(offset, bytes, area_end) || *area_end > total;
}

/* The first checks of a header's private copy: its magic, its ABI major
 * version and its total_bytes against the `size` mapped. Returns
 * SHMATARI_OK, _ERR_NOT_SHMATARI or _ERR_ABI (with a message). */
static inline int shmatari_geom_identify(const shmatari_header *h, uint64_t size,
                                         char *msg, size_t len) {
  if (h->magic != SHMATARI_MAGIC)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: magic %#llx, expected %#llx",
                         (unsigned long long)h->magic,
                         (unsigned long long)SHMATARI_MAGIC);
  if (h->abi_major != SHMATARI_ABI_MAJOR)
    return shmatari_fail(msg, len, SHMATARI_ERR_ABI,
                         "segment has layout ABI %u.%u; this client reads ABI "
                         "%u.x: build the client against the server's "
                         "shmatari/layout.h", h->abi_major, h->abi_minor,
                         SHMATARI_ABI_MAJOR);
  if (size != h->total_bytes)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: it holds %llu bytes, %s "
                         "than its header's total_bytes %llu",
                         (unsigned long long)size,
                         size < h->total_bytes ? "smaller" : "larger",
                         (unsigned long long)h->total_bytes);
  return SHMATARI_OK;
}

/* Copies the primary parameters of `h` into `want` (zeroed first), the
 * ones the layout is computed from. A word that a minor version added is a
 * reserved word in a pool of a lower minor, which a client MUST NOT read
 * (docs/layout.md, "Versioning"): there it counts as 0. */
static inline void shmatari_geom_primary(const shmatari_header *h, shmatari_header *want) {
  memset(want, 0, sizeof *want);
  want->num_envs = h->num_envs;
  want->num_workers = h->num_workers;
  want->batch_size = h->batch_size;
  want->ring_depth = h->ring_depth;
  want->stack_num = h->stack_num;
  want->img_height = h->img_height;
  want->img_width = h->img_width;
  want->channels = h->channels;
  want->frame_skip = h->frame_skip;
  const int minor11 = h->abi_minor >= 1, minor12 = h->abi_minor >= 2,
            minor13 = h->abi_minor >= 3;
  /* (1.1) autoreset_mode (and slot_final_offset, compared below) */
  want->autoreset_mode = minor11 ? h->autoreset_mode : 0;
  /* (1.2) obs_layout, the screen and the render area: a pool of 1.0 or 1.1
   * is channels last and has no render area, whatever those words hold. */
  want->obs_layout = minor12 ? h->obs_layout : 0;
  want->screen_height = minor12 ? h->screen_height : 0;
  want->screen_width = minor12 ? h->screen_width : 0;
  /* (1.3) the RAM area and batch_order: none in an older pool (whose
   * batches are served first ready). */
  want->ram_bytes = minor13 ? h->ram_bytes : 0;
  want->batch_order = minor13 ? h->batch_order : 0;
}

/* The first stored size or offset of `h` that differs from the one computed
 * into `want`, by name, with both values; NULL if none does. Words a pool's
 * minor version does not have are not compared, nor the ones a higher minor
 * version may enlarge (those are bounded by shmatari_geom_areas). */
static inline const char *shmatari_geom_mismatch(const shmatari_header *h,
                                                 const shmatari_header *want,
                                                 unsigned long long *got,
                                                 unsigned long long *expected) {
  const int minor11 = h->abi_minor >= 1,
            known = h->abi_minor <= SHMATARI_ABI_MINOR,
            minor12 = h->abi_minor >= 2 && known,
            minor13 = h->abi_minor >= 3 && known;
#define SHMATARI_EXPECT(name, a, b)                       \
  if ((uint64_t)(a) != (uint64_t)(b)) {                   \
    *got = (unsigned long long)(a);                       \
    *expected = (unsigned long long)(b);                  \
    return name;                                          \
  }
  SHMATARI_EXPECT("header_bytes", h->header_bytes, want->header_bytes)
  SHMATARI_EXPECT("obs_frame_bytes", h->obs_frame_bytes, want->obs_frame_bytes)
  SHMATARI_EXPECT("obs_env_bytes", h->obs_env_bytes, want->obs_env_bytes)
  SHMATARI_EXPECT("env_ctrl_offset", h->env_ctrl_offset, want->env_ctrl_offset)
  SHMATARI_EXPECT("worker_ctrl_offset", h->worker_ctrl_offset,
                  want->worker_ctrl_offset)
  SHMATARI_EXPECT("errors_offset", h->errors_offset, want->errors_offset)
  SHMATARI_EXPECT("slots_offset", h->slots_offset, want->slots_offset)
  SHMATARI_EXPECT("slot_obs_offset", h->slot_obs_offset, want->slot_obs_offset)
  if (minor11)
    SHMATARI_EXPECT("slot_final_offset", h->slot_final_offset,
                    want->slot_final_offset)
  for (unsigned f = 0; f < SHMATARI_FIELD_COUNT; f++)
    SHMATARI_EXPECT("slot_field_offset", h->slot_field_offset[f],
                    want->slot_field_offset[f])
  if (known) {
    SHMATARI_EXPECT("slot_bytes", h->slot_bytes, want->slot_bytes)
    SHMATARI_EXPECT("field_count", h->field_count, want->field_count)
  }
  if (minor12) {
    SHMATARI_EXPECT("render_offset", h->render_offset, want->render_offset)
    SHMATARI_EXPECT("render_env_bytes", h->render_env_bytes,
                    want->render_env_bytes)
  }
  if (minor13)
    SHMATARI_EXPECT("ram_offset", h->ram_offset, want->ram_offset)
#undef SHMATARI_EXPECT
  return NULL;
}

/* Whether the slots, the render area and the RAM area of `h` (a pool of a
 * higher minor version may have enlarged slots, with new arrays after the
 * ones above, and more fields, and moved the areas further) fit in its
 * total_bytes, in that order; and num_actions is in bounds. `want` is the
 * computed layout. Returns SHMATARI_OK or _ERR_NOT_SHMATARI (with a
 * message). */
static inline int shmatari_geom_areas(const shmatari_header *h,
                                      const shmatari_header *want,
                                      char *msg, size_t len) {
  uint64_t ring_bytes, end;
  if (h->field_count < SHMATARI_FIELD_COUNT || h->field_count > SHMATARI_MAX_FIELDS ||
      h->slot_bytes < want->slot_bytes || h->slot_bytes % SHMATARI_ALIGN != 0 ||
      shmatari_mul_u64(h->ring_depth, h->slot_bytes, &ring_bytes) ||
      shmatari_add_u64(want->slots_offset, ring_bytes, &end) ||
      end > h->total_bytes)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: ABI %u.%u with field_count "
                         "%u and slot_bytes %llu does not fit its %llu bytes",
                         h->abi_major, h->abi_minor, h->field_count,
                         (unsigned long long)h->slot_bytes,
                         (unsigned long long)h->total_bytes);
  /* (1.2) The render area, when there is one, lies after the slots. */
  uint64_t render_end = 0;
  if (want->screen_height != 0 &&
      (h->render_env_bytes < want->render_env_bytes ||
       h->render_env_bytes % SHMATARI_ALIGN != 0 ||
       shmatari_area_misfit(h->render_offset, end, h->num_envs, h->render_env_bytes,
                            h->total_bytes, &render_end)))
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: its render area (offset "
                         "%llu, %llu bytes per env) does not fit its %llu "
                         "bytes after the slots",
                         (unsigned long long)h->render_offset,
                         (unsigned long long)h->render_env_bytes,
                         (unsigned long long)h->total_bytes);
  if (want->screen_height != 0) end = render_end;
  /* (1.3) The RAM area, when there is one, lies after the slots and the
   * render area. */
  uint64_t ram_end;
  if (want->ram_bytes != 0 &&
      shmatari_area_misfit(h->ram_offset, end, h->num_envs, want->ram_bytes,
                           h->total_bytes, &ram_end))
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: its RAM area (offset %llu, "
                         "%u bytes per env) does not fit its %llu bytes after "
                         "the slots and the render area",
                         (unsigned long long)h->ram_offset, want->ram_bytes,
                         (unsigned long long)h->total_bytes);
  if (h->num_actions > SHMATARI_MAX_ACTIONS)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: num_actions %u is more than "
                         "%u", h->num_actions, SHMATARI_MAX_ACTIONS);
  return SHMATARI_OK;
}

/* Checks that `size` bytes at `base` hold a shmatari segment this header can
 * read, and copies its geometry into *g (g->hdr = base). It reads the header
 * once, into a private copy, and trusts none of its sizes or offsets: it
 * checks the magic and the ABI major version (shmatari_geom_identify),
 * bounds the primary parameters (num_envs, num_workers, batch_size,
 * ring_depth, stack_num, img_height, img_width, channels, frame_skip,
 * autoreset_mode; SHMATARI_MAX_*), recomputes the layout from them
 * (shmatari_geom_primary, shmatari_layout_compute_msg, overflow checked)
 * and requires every stored size and offset to equal the computed one
 * (shmatari_geom_mismatch), and total_bytes to equal `size`. (A pool of a
 * higher minor version may have larger slots and more bytes after them,
 * bounded by shmatari_geom_areas; see docs/layout.md.)
 * Returns SHMATARI_OK, _ERR_NOT_SHMATARI or _ERR_ABI (with a message). */
static inline int shmatari_geom_load(void *base, uint64_t size,
                                     shmatari_geom *g, char *msg, size_t len) {
  shmatari_header h, want;
  if (size < SHMATARI_HEADER_BYTES)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "segment of %llu bytes is smaller than the %u-byte "
                         "header", (unsigned long long)size,
                         SHMATARI_HEADER_BYTES);
  memcpy(&h, base, sizeof h); /* nothing below reads the segment again */
  int r = shmatari_geom_identify(&h, size, msg, len);
  if (r != SHMATARI_OK) return r;
  shmatari_geom_primary(&h, &want);
  char why[400];
  if (shmatari_layout_compute_msg(&want, why, sizeof why) != SHMATARI_LAYOUT_OK)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: its header's %s", why);
  unsigned long long got = 0, expected = 0;
  const char *bad = shmatari_geom_mismatch(&h, &want, &got, &expected);
  if (bad != NULL)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: its header's %s is %llu, but "
                         "its geometry (num_envs %u, batch_size %u, ring_depth "
                         "%u) gives %llu", bad, got, h.num_envs, h.batch_size,
                         h.ring_depth, expected);
  r = shmatari_geom_areas(&h, &want, msg, len);
  if (r != SHMATARI_OK) return r;
  want.slot_bytes = h.slot_bytes;
  want.total_bytes = h.total_bytes;
  if (want.screen_height != 0) { /* checked above */
    want.render_offset = h.render_offset;
    want.render_env_bytes = h.render_env_bytes;
  }
  if (want.ram_bytes != 0) want.ram_offset = h.ram_offset; /* checked above */
  want.abi_minor = h.abi_minor; /* the pool's: which words it has */
  want.owner_pid = h.owner_pid; /* who owns it: judged from this copy */
  want.owner_start = h.owner_start;
  shmatari_geom_set(g, base, &want);
  return SHMATARI_OK;
}

/* shmatari_geom_load without keeping the geometry: SHMATARI_OK,
 * _ERR_NOT_SHMATARI or _ERR_ABI (with a message). */
static inline int shmatari_check_header(const void *base, uint64_t size,
                                        char *msg, size_t len) {
  shmatari_geom g;
  return shmatari_geom_load((void *)(uintptr_t)base, size, &g, msg, len);
}

/* Fills env_worker[e] with the worker that owns env e (num_envs entries),
 * from the worker records. Returns SHMATARI_OK, or _ERR_NOT_SHMATARI if the
 * groups do not cover every env exactly once. */
static inline int shmatari_env_workers(const shmatari_geom *g,
                                       uint32_t *env_worker, char *msg,
                                       size_t len) {
  uint32_t next = 0;
  for (uint32_t w = 0; w < g->num_workers; w++) {
    const shmatari_worker_ctrl *wc = shmatari_worker(g, w);
    /* Read once: the segment may change under us. */
    uint32_t begin = *(const volatile uint32_t *)&wc->env_begin;
    uint32_t end = *(const volatile uint32_t *)&wc->env_end;
    if (begin != next || end <= begin || end > g->num_envs)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                           "worker %u owns envs [%u, %u), expected to start "
                           "at %u", w, begin, end, next);
    for (uint32_t e = begin; e < end; e++) env_worker[e] = w;
    next = end;
  }
  if (next != g->num_envs)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "the workers own envs [0, %u) of %u", next,
                         g->num_envs);
  return SHMATARI_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_GEOMETRY_H */
